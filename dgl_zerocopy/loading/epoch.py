"""One epoch of :class:`~dgl_zerocopy.loading.loader.DataLoader`: the iterator that ``iter(loader)`` returns.

Every ``iter()`` gets an iterator of its own, as torch's DataLoader gives: its own worker thread
(``prefetch > 0``) and its own ring of slots, taken from the loader's
:class:`~dgl_zerocopy.loading.ring.RingPool` for as long as the iterator lives. So iterators alive
at the same time (``zip(loader, loader)``, nested loops, one loop per thread) each give a whole
epoch, their feature tensors in buffers of their own. The iterator gives its ring back when it
ends: at the epoch's end, on an error, on ``close()`` (its own or the loader's), or when it is
garbage-collected (a ``break``); the next iterator that takes the ring waits for this one's worker
to stop before it writes there (:meth:`~dgl_zerocopy.loading.ring.SlotRing.begin_epoch`).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Iterator
from typing import Any, NamedTuple

from .collate import put
from .prefetch import Prefetcher, close_iterator
from .ring import Fill, RingPool, Slot, SlotRing


class Batch(NamedTuple):
    """What the worker hands over: the sampler's output on the device (marks still in place), its
    graphs in walk order, the needs and their values with whether each lives in ``fill``'s slot."""

    output: object
    graphs: list
    needs: list
    served: list
    fill: Fill
    pending: list = []  # GPU sampling: tensors the blocks' pending edge ids will read (record_stream-ed too)


class EpochIterator:
    """The batches of one epoch of ``loader``, produced from ``tasks`` (``(index, work)`` pairs) into
    ``ring`` (taken from ``pool``, given back when this iterator ends or is freed)."""

    def __init__(self, loader: Any, tasks: Iterator, pool: RingPool, ring: SlotRing) -> None:
        self._loader = loader
        self._ring = ring
        self._held: Slot | None = None
        self._closed = False  # closed: by its end, an error, close() (it writes the ring no more)
        self._superseded = False  # ended by a newer epoch of a loader that reads ahead (see supersede())
        # Freed without close() (a `break`): the ring goes back; the worker's own finalizer stops it.
        self._give_back = weakref.finalize(self, pool.give_back, ring)
        tasks = _with_ring(tasks, ring)
        if loader.prefetch > 0:
            # The worker must not keep the loader alive, or it could never be collected and stopped.
            produce = weakref.WeakMethod(loader._produce)
            self._source = Prefetcher(tasks, functools.partial(_call, produce), depth=loader.prefetch)
            ring.set_writer(self._source)  # the next epoch on this ring waits for this worker's end
        else:
            self._source = map(loader._produce, tasks)
        self._tasks = None if loader.prefetch > 0 else tasks  # the worker thread closes its own

    def __iter__(self) -> EpochIterator:
        return self

    def __next__(self):
        loader = self._loader
        if self._closed:
            if self._superseded:
                raise RuntimeError(
                    "this epoch was ended by a newer iter(loader): a loader that reads features ahead from storage "
                    "serves one epoch at a time, since each epoch's reads ahead reserve slots of the store's one host "
                    "buffer; finish or leave one epoch before starting the next, or pass read_ahead=False"
                )
            raise StopIteration
        # Release the slot of the previous batch before taking the next one: the worker may reuse
        # it as soon as the queue has room (on CUDA, only after the work queued so far finishes).
        self._release_held()
        try:
            batch = next(self._source)
        except StopIteration:
            self.close()
            # The host waits here anyway: the range checks of device ids (a store's deferred errors)
            # are read now, so a bad id of this epoch is raised before the next one starts.
            for store in loader._sources.stores():
                store.raise_deferred_errors()
            raise
        except BaseException:  # an error ends the epoch: its sampling source is released now
            self.close()
            raise
        values = [value for value, _ in batch.served]
        # Everything not in the slot is record_stream-ed on the consumer's stream (the protocol).
        loose = (batch.output, [value for value, in_slot in batch.served if not in_slot], batch.pending)
        self._held = self._ring.hand_over(batch.fill, [value for value, in_slot in batch.served if in_slot], loose, loader.timer)
        return put(batch.output, batch.graphs, batch.needs, values)

    def _release_held(self) -> None:
        if self._held is not None:
            self._ring.release([self._held])
            self._held = None

    def close(self) -> None:
        """Stop the worker, release the slot of the batch last handed out and give the ring back
        (idempotent; the next :func:`next` raises StopIteration)."""
        self._closed = True
        if isinstance(self._source, Prefetcher):
            self._source.close()
        close_iterator(self._tasks)
        self._release_held()
        self._give_back()

    def supersede(self) -> None:
        """End this epoch for a newer one (the loader reads ahead from storage): :meth:`close`, then wait
        until the worker has stopped, its reservations in the host buffer released; the next
        :func:`next` raises RuntimeError saying why."""
        ring = self._ring
        self._superseded = True
        self.close()
        ring.stop_writer("the prefetch worker of the epoch a newer one ends")

    @property
    def closed(self) -> bool:
        """Whether this epoch has ended (its end, an error, ``close()``): it produces nothing more."""
        return self._closed

    @property
    def thread(self) -> Any:
        """The worker thread (None without prefetching), to wait for its end once the epoch is left."""
        return self._source.thread if isinstance(self._source, Prefetcher) else None

    @property
    def worker_alive(self) -> bool:
        return isinstance(self._source, Prefetcher) and self._source.alive


def _with_ring(tasks: Iterator, ring: SlotRing) -> Iterator:
    """``(index, work, ring)`` for each task: the loader's ``_produce`` fills this epoch's ring."""
    try:
        for index, work in tasks:
            yield index, work, ring
    finally:
        close_iterator(tasks)


def _call(method: weakref.WeakMethod, task):
    fn = method()
    if fn is None:
        raise RuntimeError("the DataLoader was garbage-collected during its epoch")
    return fn(task)
