"""The host buffer: at most a budget's worth of a file's rows in memory, found by a row -> slot map.

``rows`` is one ``(capacity, dim)`` tensor over an anonymous page-aligned mapping, in 2 MB pages by
default (:func:`~dgl_zerocopy.store.host_memory.host_array`; ``DGL_ZEROCOPY_HUGE_PAGES=0`` for 4 KiB ones):
the table the gather backends read with slot ids. Resident memory depends on the backend (docs/storage.md):
with ``cpu`` a page becomes resident when a slot on it is first filled, so resident memory grows
to the buffer's size and no further; ``zerocopy`` pins the whole buffer in place when the store
binds (``cudaHostRegister``, as it pins any table), which makes every page resident and locked at
once, until ``close()``.

:meth:`HostBuffer.acquire` takes a batch's distinct rows and returns their slots, *reserved*
(a pin count per slot): a reserved slot is never evicted, so a gather in flight, or a read ahead
not yet gathered, keeps its rows. :meth:`release` (or :meth:`release_after` an event, for a
gather that reads asynchronously) gives them back. Misses are assigned slots under the lock, read
from storage outside it, then marked ready; a batch that finds a row still being read by another
(a read ahead) waits for that read only.

Slot map encoding (one int per row of the table): ``>= 0`` the row's slot (ready or loading);
``-1`` not in memory; ``<= -2`` not in memory, its slot ``-2 - v`` reserved for it (the static
share of the ``hybrid`` policy: the rows ranked first own a slot each, filled on first use and
never evicted).
"""

from __future__ import annotations

import threading

import numpy as np
import torch

from ..host_memory import host_array
from .direct_reader import DirectReader
from .eviction import Eviction
from .stats import StorageStats

#: Bytes of bookkeeping per slot besides the policy's: the slot's row (int64), its reservation
#: count (int32), the read filling it (int32), read ahead and not gathered yet (bool).
SLOT_BYTES = 17


class BufferFullError(ValueError):
    """A gather needs more slots than the host buffer can free for it."""


class _Fill:
    """One batch of rows being read into the buffer: waited on by batches that need its rows."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: BaseException | None = None


class HostBuffer:
    """``capacity`` slots of ``row_bytes`` over ``reader``'s file; ``eviction`` chooses victims among
    slots ``[static_slots, capacity)``; ``static_rows`` (best first) own slots ``0 ..
    len(static_rows) - 1``."""

    def __init__(
        self,
        reader: DirectReader,
        num_rows: int,
        dim: int,
        dtype: torch.dtype,
        capacity: int,
        eviction: Eviction,
        stats: StorageStats,
        static_rows: np.ndarray | None = None,
    ) -> None:
        self.reader, self.num_rows, self.capacity = reader, num_rows, capacity
        self.eviction, self.stats = eviction, stats
        item = torch.empty((), dtype=dtype).element_size()
        # Page-aligned (direct reads need it), in 2 MB pages by default (store/host_memory.py); resident once
        # written, or all at once when pinned; unmapped with the last view of it.
        self._memory = host_array((max(1, capacity * dim * item),), np.uint8)
        flat = torch.from_numpy(self._memory[: capacity * dim * item])
        self.rows = flat.view(dtype).view(capacity, dim)
        self._bytes = flat.numpy().reshape(capacity, dim * item)
        self.slot_of = np.full(num_rows, -1, dtype=np.int32 if capacity < 2**31 - 2 else np.int64)
        self.static_slots = 0 if static_rows is None else int(static_rows.size)
        if self.static_slots:
            self.slot_of[static_rows] = -2 - np.arange(self.static_slots, dtype=self.slot_of.dtype)
        self.row_of = np.full(capacity, -1, dtype=np.int64)
        self.pins = np.zeros(capacity, dtype=np.int32)
        self.ahead_pins = np.zeros(capacity, dtype=np.int32)  # the reads ahead among pins (each released by its handle)
        self.fill_of = np.full(capacity, -1, dtype=np.int32)  # the key of the _Fill reading the slot, or -1: ready
        self._ahead = np.zeros(capacity, dtype=bool)  # read by a read ahead, not gathered since
        self._fills: dict[int, _Fill] = {}
        self._next_fill = 0
        self._lock = threading.Lock()
        self._pending: list[tuple[object, np.ndarray]] = []  # (event, slots) released once the event has passed
        self.largest_gather = 0  # distinct rows of the largest gather so far: what read-ahead leaves free

    @property
    def dynamic_slots(self) -> int:
        return self.capacity - self.static_slots

    def acquire(self, rows: np.ndarray, *, ahead: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Reserve slots for ``rows`` (sorted, distinct, in range, int64), reading the misses.

        Returns ``(rows, slots)``: for a gather all of ``rows``; a read ahead (``ahead=True``) may
        keep fewer, leaving room for one gather as large as the largest so far (the rows it skips
        are counted and left to their gather). Raises :class:`BufferFullError` when a gather's rows
        cannot all get a slot; then nothing is reserved."""
        with self._lock:
            self._release_passed(wait=False)
        try:
            rows, slots, new, fill, waits = self._reserve(rows, ahead)
        except BufferFullError:
            with self._lock:
                self._release_passed(wait=True)  # gathers in flight may hold the slots: wait for them, once
            rows, slots, new, fill, waits = self._reserve(rows, ahead)
        if fill is not None:
            try:
                self.reader.read_into(rows[new], self._bytes, slots[new])
            except BaseException as error:
                self._abandon(rows, slots, new, fill, error, ahead)
                raise
            with self._lock:
                filled = slots[new]
                dynamic = filled >= self.static_slots
                self._fills.pop(int(self.fill_of[filled[0]]))
                self.fill_of[filled] = -1
                self.eviction.filled(filled[dynamic], rows[new][dynamic])
            fill.done.set()
        for other in waits:  # rows another call (a read ahead) is reading: wait for those only
            other.done.wait()
            if other.error is not None:
                self.release(slots, ahead=ahead)
                raise other.error
        return rows, slots

    def _reserve(self, rows: np.ndarray, ahead: bool):
        """Under the lock: classify, evict, assign and reserve. Nothing is changed when it raises."""
        with self._lock:
            slots = self.slot_of[rows].astype(np.int64)
            present = slots >= 0
            loading = np.zeros(rows.size, dtype=bool)
            loading[present] = self.fill_of[slots[present]] >= 0
            waits = {self._fills[int(f)] for f in np.unique(self.fill_of[slots[loading]])}
            static_miss = slots <= -2
            slots[static_miss] = -2 - slots[static_miss]
            dynamic_miss = np.flatnonzero(slots == -1)
            free = self._free_dynamic(exclude=slots[present])
            if ahead:
                # Reads ahead together hold at most (evictable slots - the largest gather so far, this
                # batch's own included) slots, so that any gather finds room beside them, whatever
                # else is reserved when it runs (gathers are brief; reads ahead last until their own
                # gather). A row costs one unless a read ahead holds its slot already; and a miss also
                # needs a free slot now.
                self.largest_gather = max(self.largest_gather, int(rows.size))
                held = int(np.count_nonzero(self.ahead_pins[self.static_slots :]))
                resident = np.flatnonzero(present)
                resident = resident[slots[resident] >= self.static_slots]
                costly = np.sort(np.concatenate((resident[self.ahead_pins[slots[resident]] == 0], dynamic_miss)))
                room = self.dynamic_slots - self.largest_gather - held
                kept = costly[: max(0, room)]
                kept_misses = np.flatnonzero(np.isin(kept, dynamic_miss))
                if kept_misses.size > free.size:  # no more misses than free slots now
                    kept = np.setdiff1d(kept, kept[kept_misses[free.size :]], assume_unique=True)
                if kept.size < costly.size:
                    keep = np.ones(rows.size, dtype=bool)
                    keep[np.setdiff1d(costly, kept, assume_unique=True)] = False  # left to the gather: counted, not read
                    self.stats.add(read_ahead_skipped=int(np.count_nonzero(~keep)))
                    rows, slots, present, loading = rows[keep], slots[keep], present[keep], loading[keep]
                    dynamic_miss = np.flatnonzero(slots == -1)
            elif dynamic_miss.size > free.size:
                raise BufferFullError(self._too_small(rows.size, dynamic_miss.size, free.size))
            slots[dynamic_miss] = self._take(free, dynamic_miss.size)
            new = np.flatnonzero(~present)
            self.pins[slots] += 1
            if ahead:
                self.ahead_pins[slots] += 1
            fill = None
            if new.size:
                fill, key = _Fill(), self._next_fill
                self._next_fill = (key + 1) % (2**31 - 1)
                self._fills[key] = fill
                self.slot_of[rows[new]] = slots[new]
                self.row_of[slots[new]] = rows[new]
                self.fill_of[slots[new]] = key
            hits = slots[present & ~loading]
            self.eviction.touch(hits[hits >= self.static_slots])
            if ahead:
                self._ahead[slots[new]] = True
                self.stats.add(read_ahead_rows=new.size)
            else:
                used = slots[present]
                from_ahead = int(np.count_nonzero(self._ahead[used]))
                self._ahead[used] = False
                self.largest_gather = max(self.largest_gather, int(rows.size))
                self.stats.add(host_hits=int(present.sum()), storage_rows=new.size, read_ahead_hits=from_ahead)
            return rows, slots, new, fill, waits

    def _free_dynamic(self, exclude: np.ndarray) -> np.ndarray:
        """Dynamic slots that may be taken, ascending: not reserved (``exclude`` is about to be). A mask
        over the slots, not a set difference: that sorted ~170k slots per call (37 ms) at 25 % of a
        200k-row int8 table."""
        takeable = self.pins[self.static_slots :] == 0
        if exclude.size:
            takeable[exclude[exclude >= self.static_slots] - self.static_slots] = False
        return np.flatnonzero(takeable) + self.static_slots

    def _take(self, free: np.ndarray, k: int) -> np.ndarray:
        if k == 0:
            return np.empty(0, dtype=np.int64)
        empty = free[self.row_of[free] < 0]
        if empty.size >= k:
            return empty[:k]
        full = free[self.row_of[free] >= 0]
        victims = self.eviction.victims(k - empty.size, full)
        self.slot_of[self.row_of[victims]] = -1  # dynamic slots hold rows without a reserved slot
        self.row_of[victims] = -1
        self.stats.add(evictions=victims.size)
        return np.concatenate((empty, victims))

    def _too_small(self, batch: int, needed: int, free: int) -> str:
        reserved = int(np.count_nonzero(self.pins[self.static_slots :]))
        row_bytes = self._bytes.shape[1]
        return (
            f"the host buffer cannot hold this batch: {batch} distinct rows, {needed} of them to read into it, but only {free} of its "
            f"{self.dynamic_slots} evictable slots are free ({reserved} are reserved by reads ahead or gathers in flight"
            + (f"; {self.static_slots} more are the static share" if self.static_slots else "")
            + f"); each row takes {row_bytes} bytes. Raise the host buffer's budget, StorageTier(bytes=) (a batch of {batch} rows needs about "
            f"{batch * row_bytes} bytes of slots, times the batches read ahead), or gather smaller batches"
        )

    def _abandon(self, rows, slots, new, fill: _Fill, error: BaseException, ahead: bool = False) -> None:
        """A read failed: its rows leave the map, every reservation of this call is returned, and
        the calls waiting for its rows get its error."""
        with self._lock:
            back = slots[new]
            self._fills.pop(int(self.fill_of[back[0]]), None)
            self.slot_of[rows[new]] = np.where(back < self.static_slots, -2 - back, -1)
            self.row_of[back] = -1
            self.fill_of[back] = -1
            self._ahead[back] = False
            self.pins[slots] -= 1
            if ahead:
                self.ahead_pins[slots] -= 1
        fill.error = error
        fill.done.set()

    def release(self, slots: np.ndarray, *, ahead: bool = False) -> None:
        """Give back one reservation of each of ``slots`` (``ahead``: a read ahead's)."""
        with self._lock:
            self.pins[slots] -= 1
            if ahead:
                self.ahead_pins[slots] -= 1

    def release_after(self, event, slots: np.ndarray) -> None:
        """Give back ``slots`` once ``event`` (a CUDA event after the gather that reads them) has passed."""
        with self._lock:
            self._pending.append((event, slots))

    def _release_passed(self, wait: bool) -> None:
        keep = []
        for event, slots in self._pending:
            if wait:
                event.synchronize()
            if wait or event.query():
                self.pins[slots] -= 1
            else:
                keep.append((event, slots))
        self._pending = keep

    def close(self) -> None:
        """Wait for the gathers still reading, then drop every reservation (also when the wait raises:
        a device fault is reported once, by the first event, and the store is closing anyway)."""
        with self._lock:
            try:
                self._release_passed(wait=True)
            finally:
                self._pending = []
                self.pins[:] = 0
                self.ahead_pins[:] = 0

    @property
    def resident_rows(self) -> int:
        return int(np.count_nonzero(self.row_of >= 0))
