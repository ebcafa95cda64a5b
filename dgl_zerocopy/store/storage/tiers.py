"""StorageBackend: device cache, host buffer and storage behind one gather.

A storage-backed :class:`~dgl_zerocopy.FeatureStore` binds one of these as its backend. A gather:

1. takes the batch's distinct ids on the host (device ids are copied there: the host decides what
   to read);
2. splits them by the device cache's slot map (a host copy): hits are read from device memory;
3. reserves host-buffer slots for the rest (:meth:`HostBuffer.acquire`), reading from storage only
   the rows not in the buffer, and waiting only for rows a read ahead is still reading;
4. lets an ordinary backend (``cpu`` or ``zerocopy``) gather those slots from the buffer (the
   buffer is the table it reads: ``zerocopy`` pins it and reads it over PCIe as any table);
5. puts hits and misses in batch order and decodes a compressed table's codes (on the device), with
   the original ids (a per-row int8 table's scales are the rows', not the slots');
6. gives the slots back: at once when the gather has read them (``cpu``), after the gather's
   event (``zerocopy``, which reads asynchronously).

:meth:`read_ahead` runs steps 1-3 for a later batch on a background thread and returns a
:class:`ReadAhead` at once; its rows stay reserved (never evicted) until the gather that uses them.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import torch

from ..backends import GatherOptions, make_backend
from ..cache import HotRowCache
from ..compression.decode import Decoder
from ..transfer import to_device
from .direct_reader import DirectReader
from .eviction import make_eviction
from .host_buffer import HostBuffer
from .policy import StoragePlan
from .stats import StorageStats
from .table_file import TableFile


class ReadAhead:
    """The rows of a later batch, being read into the host buffer (or read). Pass it to the gather
    of that batch (``store.gather(ids, read_ahead=handle)``), which waits only for rows still
    being read and then gives the reservation back; or call :meth:`release` for a batch that will
    never be gathered. A read ahead never raises: a failed one leaves its rows to the gather."""

    def __init__(self, future: Future, owner: StorageBackend) -> None:
        self._future = future
        self._owner = owner
        self._released = False

    @property
    def done(self) -> bool:
        """True once its rows are in the host buffer (or the read ahead gave up)."""
        return self._future.done()

    def wait(self) -> None:
        """Block until the read ahead has finished (gathers never need to call it)."""
        with contextlib.suppress(BaseException):
            self._future.result()

    def release(self) -> None:
        """Give back the reservation (a read ahead not started yet is cancelled). Idempotent."""
        if self._released:
            return
        self._released = True
        if self._future.cancel():
            return
        try:
            slots = self._future.result()
        except BaseException:  # noqa: BLE001 - a failed read ahead reserved nothing; its gather reports the error
            return
        if not self._owner.closed:
            self._owner.buffer.release(slots, ahead=True)


class StorageBackend:
    """The backend of a storage-backed store on ``device`` (see the module docstring)."""

    def __init__(self, table: TableFile, device: torch.device, backend: str, options: GatherOptions, plan: StoragePlan, out_dtype: torch.dtype) -> None:
        if backend not in ("cpu", "zerocopy"):
            raise ValueError(f"a storage-backed store gathers with backend 'cpu' or 'zerocopy', but got {backend!r}")
        self.device, self.closed = device, False
        self.stats = StorageStats()
        rows, dim = table.shape
        self._reader = DirectReader(table.path, table.offset, table.row_bytes, rows, threads=plan.threads, direct=plan.direct, stats=self.stats)
        self._ahead_pool = ThreadPoolExecutor(1, thread_name_prefix="dgl-zerocopy-read-ahead")
        self._inner = None
        try:
            eviction = make_eviction(plan.eviction, plan.capacity, plan.rank)
            self.buffer = HostBuffer(self._reader, rows, dim, table.dtype, plan.capacity, eviction, self.stats, plan.static_rows)
            self.cache = self._read_cache(table, plan.cache_rows, plan.cache_policy) if plan.cache_rows is not None else None
            self._host_slots = self.cache.slot_map.cpu() if self.cache is not None else None
            self._decoder = Decoder(table.codec, out_dtype, device) if table.codec is not None else None
            self.out_dtype = out_dtype
            self._inner = make_backend(backend, self.buffer.rows, device, options=options)
            self._async = backend == "zerocopy"  # its kernels read the buffer after gather() returns
        except BaseException:
            self.close()
            raise

    def _read_cache(self, table: TableFile, rows: torch.Tensor, policy: str) -> HotRowCache:
        """The device cache, its rows read from storage once (sorted, so that runs coalesce)."""
        order = torch.sort(rows).values.numpy()
        codes = torch.empty((order.size, table.shape[1]), dtype=table.dtype)
        self._reader.read_into(order, codes.view(torch.uint8).numpy().reshape(order.size, -1), np.arange(order.size))
        where = torch.searchsorted(torch.from_numpy(order), rows)
        shape = torch.empty(table.shape, dtype=table.dtype, device="meta")
        return HotRowCache(shape, rows, self.device, policy=policy, rows=codes.index_select(0, where))

    # -- gather ----------------------------------------------------------------------------
    def gather(self, ids: torch.Tensor, out: torch.Tensor | None, stream) -> torch.Tensor:
        """``table[ids]`` through the tiers (module docstring). ids are already checked: int64/int32
        on the CPU or the device, within ``[0, num_rows)``; the slots it passes on are the buffer's own."""
        ids = ids.cpu()
        unique, inverse = torch.unique(ids, sorted=True, return_inverse=True)
        hit = self._host_slots[unique] >= 0 if self.cache is not None else None
        misses = unique if hit is None else unique[~hit]
        _, slots = self.buffer.acquire(misses.numpy().astype(np.int64, copy=False))
        try:
            result = self._gather_slots(ids, unique, inverse, hit, torch.from_numpy(slots), out, stream)
        except BaseException:
            self.buffer.release(slots)
            raise
        if self._async:
            event = torch.cuda.Event()
            event.record(stream)
            self.buffer.release_after(event, slots)
        else:
            self.buffer.release(slots)
        return result

    def _gather_slots(self, ids, unique, inverse, hit, slots: torch.Tensor, out, stream) -> torch.Tensor:
        n, dim, decoder = ids.shape[0], self.buffer.rows.shape[1], self._decoder
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            if hit is None:  # every row from the host buffer: the backend gathers in batch order
                codes = self._inner.gather(slots[inverse], out if decoder is None else None, stream)
            else:
                codes = self._assemble(ids, inverse, hit, slots, None if decoder is not None else out, stream)
            if decoder is None:
                return codes
            if out is None:
                out = torch.empty((n, dim), dtype=self.out_dtype, device=self.device)
            return decoder(codes, ids, out)

    def _assemble(self, ids, inverse, hit, slots, out, stream) -> torch.Tensor:
        """Batch rows (codes) from the device cache (hits) and the host buffer (misses)."""
        per_id = hit[inverse]
        hit_positions, miss_positions = per_id.nonzero().flatten(), (~per_id).nonzero().flatten()
        self.cache.stats.record(hit_positions.numel(), miss_positions.numel())
        self.stats.add(device_hits=int(hit.sum()))
        miss_index = torch.cumsum(~hit, 0) - 1  # a distinct id's position among the distinct misses
        target = out if out is not None else torch.empty((ids.shape[0], self.buffer.rows.shape[1]), dtype=self.buffer.rows.dtype, device=self.device)
        if miss_positions.numel():
            rows = self._inner.gather(slots[miss_index[inverse[miss_positions]]], None, stream)
            target.index_copy_(0, to_device(miss_positions, self.device), rows)
        if hit_positions.numel():
            cache_slots = to_device(self._host_slots[ids[hit_positions]].long(), self.device)
            target.index_copy_(0, to_device(hit_positions, self.device), self.cache.rows.index_select(0, cache_slots))
        return target

    # -- reading ahead ---------------------------------------------------------------------
    def read_ahead(self, ids: torch.Tensor) -> ReadAhead:
        """Start reading the host-buffer misses among ``ids`` (checked, on the CPU) in the background."""
        try:
            return ReadAhead(self._ahead_pool.submit(self._reserve_ahead, ids), self)
        except RuntimeError:  # the pool's "cannot schedule new futures after shutdown": close() has begun
            raise RuntimeError(f"this FeatureStore over {str(self._reader.path)!r} is closed; make a new one to read ahead") from None

    def _reserve_ahead(self, ids: torch.Tensor) -> np.ndarray:
        unique = torch.unique(ids)
        if self.cache is not None:
            unique = unique[self._host_slots[unique] < 0]
        return self.buffer.acquire(unique.numpy().astype(np.int64, copy=False), ahead=True)[1]

    # -- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        """Cancel the reads ahead not started, wait for the rest and for the gathers in flight, then
        unpin and free the buffer and stop every reader thread. Idempotent."""
        self._ahead_pool.shutdown(wait=True, cancel_futures=True)
        self.closed = True
        inner, self._inner = self._inner, None
        try:
            if inner is not None:
                inner.close()  # waits for its kernels, unpins the buffer (unpinned even if the wait raises)
        finally:
            try:
                if hasattr(self, "buffer"):
                    self.buffer.close()  # waits for the gathers' events: raises again after a device fault
            finally:
                self._reader.close()  # the reader threads stop whatever the device said
