"""The slot ring: how a prefetch worker hands batches to the training step across CUDA streams.

One mechanism for both loaders (:class:`dgl_zerocopy.DataLoader` and
:class:`dgl_zerocopy.dist.DistLoader`); the protocol is the stream table of docs/architecture.md:

- The worker fills batch ``i`` into slot ``i % len(ring)`` (:meth:`SlotRing.fill`): output buffers
  allocated once per name and grown only for a larger batch, written on the ring's side stream
  after that stream waited for the slot's ``released`` event. The batch's ``ready`` event is
  recorded on the side stream after its last write.
- At hand-over (:meth:`SlotRing.hand_over`, consumer thread) the consumer's stream waits for
  ``ready`` (the host never waits), and everything the worker hands over that is not in a slot
  (node ids, labels, blocks, tensors gathered without an ``out=``) is ``record_stream``-ed on the
  consumer's stream.
- The consumer records a slot's ``released`` event on its stream (:meth:`SlotRing.release`) when
  it asks for the next batch, when the epoch ends or is left, and for every slot when a new epoch
  begins (:meth:`SlotRing.begin_epoch`; an epoch left by ``break`` released nothing).
- One worker writes the ring at a time: a new epoch begins only after the previous epoch's worker
  has stopped, however long its last step takes (:func:`~dgl_zerocopy.loading.prefetch.wait_stopped` warns
  while it waits). The worker also shares the sampler (and DGL's RPC client for DistDGL), so a
  guard on the slots alone would not be enough.
- Iterators alive at the same time (``zip(loader, loader)``, nested loops, two threads) each take a
  ring of their own from the loader's :class:`RingPool`: a ring serves one iterator at a time
  and given back when that iterator ends (its end, ``break``, an error, ``close()``, garbage
  collection); the next iterator that takes it begins its epoch as above, after the last writer
  stopped. A loop that runs alone always gets the first ring, so buffers are made once.

Without a side stream (a CPU device, ``prefetch=0``, or ``use_alternate_streams=False``) no event is
used: the worker's work is queued on the stream current on its thread, which for the CPU and for
the serial loader is the consumer's own order.
"""

from __future__ import annotations

import threading
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from .prefetch import Prefetcher, wait_stopped
from .timing import StageTimer


class Slot:
    """One ring entry: output buffers by name, the event that frees them, and weak references to
    the tensors last handed out from them (to warn when a kept one is overwritten)."""

    def __init__(self) -> None:
        self.buffers: dict[str, torch.Tensor] = {}
        self.released = torch.cuda.Event() if torch.cuda.is_available() else None
        self.handed_out: list[weakref.ref] = []

    def buffer(self, name: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """A contiguous ``shape`` view of this slot's buffer ``name`` (dtype, device): the same memory
        every time, reallocated (with 25 % headroom) only for more rows than it holds. Call it
        inside :meth:`SlotRing.fill`, so that a new buffer comes from the side stream's pool."""
        rows = shape[0]
        buf = self.buffers.get(name)
        if buf is None or buf.shape[0] < rows or buf.shape[1:] != tuple(shape[1:]) or buf.dtype != dtype or buf.device != device:
            cap = max(rows, int(1.25 * buf.shape[0])) if buf is not None and buf.shape[0] < rows else rows
            buf = torch.empty((cap, *shape[1:]), dtype=dtype, device=device)
            self.buffers[name] = buf
        return buf[:rows]


@dataclass
class Fill:
    """Batch ``index`` being written into ``slot`` on ``stream`` (None: the thread's current
    stream); ``ready`` is recorded on ``stream`` when the fill ends (None without a side stream)."""

    index: int
    slot: Slot
    stream: torch.cuda.Stream | None
    ready: torch.cuda.Event | None = None


class SlotRing:
    """``prefetch + 2`` slots (``prefetch`` queued, one being filled, one held by the training step),
    the side stream the worker fills them on (CUDA ``device``, ``prefetch > 0`` and
    ``side_stream``), and the epoch's worker."""

    def __init__(self, device: torch.device, prefetch: int, side_stream: bool = True) -> None:
        self.device = device
        self.slots = [Slot() for _ in range(prefetch + 2)]
        use_side = device.type == "cuda" and prefetch > 0 and side_stream
        self.side: torch.cuda.Stream | None = torch.cuda.Stream(device) if use_side else None
        # The worker of the current epoch: a weak reference (the ring must not keep it alive: its
        # finalizer stops it when the epoch is dropped) and its thread (to wait for its end).
        self._writer: tuple[weakref.ref, threading.Thread] | None = None
        self._kept_warned = False

    def __len__(self) -> int:
        return len(self.slots)

    # -- epochs (consumer thread) -------------------------------------------------------------
    def begin_epoch(self) -> None:
        """Before a new epoch's first batch: stop the previous epoch's worker if it still runs and
        wait until it has stopped (it may be in a long step: a kernel compile, a huge sample, an
        RPC), then release every slot after the work the consumer has queued so far."""
        self.stop_writer("the prefetch worker of the previous epoch")
        self.release(self.slots)
        for slot in self.slots:  # the loop variable of the last epoch may still hold its last batch: fine
            slot.handed_out = []

    def stop_writer(self, what: str = "the prefetch worker") -> None:
        """Stop this epoch's worker, if any, and wait until it has stopped (``what`` names it in the
        warning of a long wait); from its own thread (a finalizer run there), only stop it."""
        if self._writer is None:
            return
        ref, thread = self._writer
        self._writer = None
        worker = ref()
        if worker is not None:
            worker.close()
        if thread is not threading.current_thread():
            wait_stopped(thread, what)

    def set_writer(self, worker: Prefetcher) -> None:
        """``worker`` fills the slots this epoch; the next :meth:`begin_epoch` waits for its end."""
        self._writer = (weakref.ref(worker), worker.thread)

    # -- the worker --------------------------------------------------------------------------
    @contextmanager
    def fill(self, index: int) -> Iterator[Fill]:
        """Write batch ``index`` inside this block: on the side stream (current there), which first
        waits for the slot's release; the ``ready`` event is recorded after the block's work."""
        slot = self.slots[index % len(self.slots)]
        fill = Fill(index, slot, self.side)
        if self.side is None:
            yield fill
            return
        with torch.cuda.stream(self.side):
            self.side.wait_event(slot.released)  # the training step may still read this slot's previous batch
            yield fill
            fill.ready = torch.cuda.Event()
            fill.ready.record(self.side)

    # -- the consumer ------------------------------------------------------------------------
    def hand_over(self, fill: Fill, in_slot: Iterable[torch.Tensor], loose, timer: StageTimer) -> Slot:
        """Take the batch of ``fill`` on the consumer's thread: its stream waits for ``ready``, and
        ``loose`` (tensors, blocks, and dicts, lists, tuples of them: everything handed over that is
        not in the slot) is ``record_stream``-ed on it. ``in_slot``: the tensors handed out from the
        slot's buffers. Returns the slot, which the consumer holds until it :meth:`release`\\ s it."""
        slot = fill.slot
        self._check_kept(slot, fill.index)
        slot.handed_out = [weakref.ref(t) for t in in_slot]
        if fill.ready is not None:
            consumer = torch.cuda.current_stream(self.device)
            with timer.stage("wait", stream=consumer):  # the device-side wait for the fill
                consumer.wait_event(fill.ready)
            # Not in a slot: their memory came from the side stream's pool and the consumer's
            # stream frees them, so the allocator must not reuse it before this stream is done.
            record_stream(loose, consumer)
        return slot

    def release(self, slots: Iterable[Slot]) -> None:
        """Record the release event of ``slots`` on the calling thread's current stream (the
        consumer's): the worker reuses a slot only after the work queued there so far."""
        if self.side is None:
            return
        stream = torch.cuda.current_stream(self.device)
        for slot in slots:
            slot.released.record(stream)

    def _check_kept(self, slot: Slot, index: int) -> None:
        """Warn (once per ring) when a tensor handed out from ``slot`` earlier is still referenced:
        its buffer now holds batch ``index``, so whoever kept it reads other rows."""
        if self._kept_warned or not any(ref() is not None for ref in slot.handed_out):
            return
        self._kept_warned = True
        warnings.warn(
            f"a feature tensor of batch {index - len(self.slots)} is still referenced, but its buffer was reused for batch "
            f"{index}: it now holds that batch's rows. The loader reuses {len(self.slots)} buffers (prefetch + 2); "
            f"to keep a batch's features, keep x.clone()",
            stacklevel=4,
        )


class RingPool:
    """The rings of one loader: :meth:`take` lends the first free ring (made by ``make`` when none
    is free) to one iterator, :meth:`give_back` returns it. One iterator at a time keeps using the
    first ring; each iterator alive beside it holds another (``prefetch + 2`` more slots, made on
    its first batches and kept for the next time). Thread-safe."""

    def __init__(self, make: Callable[[], SlotRing]) -> None:
        self._make = make
        self._rings: list[SlotRing] = []
        self._lent: set[int] = set()  # indices in _rings
        self._lock = threading.Lock()

    @property
    def rings(self) -> list[SlotRing]:
        """Every ring made so far, the first one first."""
        with self._lock:
            return list(self._rings)

    @property
    def first(self) -> SlotRing:
        """The ring a loop that runs alone gets (made now if none is)."""
        with self._lock:
            if not self._rings:
                self._rings.append(self._make())
            return self._rings[0]

    @first.setter
    def first(self, ring: SlotRing) -> None:
        with self._lock:
            if 0 in self._lent:
                raise RuntimeError("the first ring is in use by a live iterator: it cannot be replaced now")
            self._rings[:1] = [ring]

    def take(self) -> SlotRing:
        """Take a ring: the first free one, or a new one when every ring is in use. The caller begins
        its epoch on it (:meth:`SlotRing.begin_epoch`) and gives it back when its iterator ends."""
        with self._lock:
            if not self._rings:
                self._rings.append(self._make())
            index = next((i for i in range(len(self._rings)) if i not in self._lent), None)
            if index is None:
                index = len(self._rings)
                self._rings.append(self._make())
            self._lent.add(index)
            return self._rings[index]

    def give_back(self, ring: SlotRing) -> None:
        """Return ``ring`` to the pool (idempotent); its worker may still be ending its step: the
        next taker waits for that in :meth:`SlotRing.begin_epoch`."""
        with self._lock:
            for i, known in enumerate(self._rings):
                if known is ring:
                    self._lent.discard(i)

    @property
    def in_use(self) -> int:
        """How many rings are taken now (live iterators that prefetch)."""
        with self._lock:
            return len(self._lent)

    def stop_writers(self, what: str = "the prefetch worker") -> None:
        """Stop the worker of every ring and wait until each has stopped (:meth:`SlotRing.stop_writer`)."""
        for ring in self.rings:
            ring.stop_writer(what)


def record_stream(obj, stream: torch.cuda.Stream) -> None:
    """``record_stream`` every CUDA tensor in ``obj``: tensors, DGL graphs and DeviceBlocks (their
    ``record_stream`` method), and dicts, lists and tuples of them. Host objects are skipped."""
    if isinstance(obj, torch.Tensor):
        if obj.is_cuda:
            obj.record_stream(stream)
    elif isinstance(obj, dict):
        for value in obj.values():
            record_stream(value, stream)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            record_stream(value, stream)
    elif hasattr(obj, "record_stream") and getattr(getattr(obj, "device", None), "type", None) == "cuda":
        obj.record_stream(stream)
