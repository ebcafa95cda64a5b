"""The CPU-gather baseline: ``index_select(out=)`` into a reused buffer, then (on CUDA) an async copy.

A fresh output per batch costs page faults on every new page: reusing one buffer is several
times faster (bench/gathering/cpu_gather.py), so the baseline we compare against is the fast one.

Compressed tables (``codec``), CPU device, decoded by :class:`~dgl_zerocopy.store.compression.decode.Decoder`
the faster of two ways as measured (``bench/gathering/cpu_gather.py``, docs/benchmarks.md):
- int8, tile by tile: a tile's codes are gathered into a small reused buffer and decoded at once
  into the tile's rows of the output, so the decode's three passes (convert, scale, shift) run over
  cache-resident rows: 1.15x the rate of gathering all codes first. A tile holds
  :data:`TILE_BYTES` of codes per torch thread (each thread's share stays in its own cache).
- fp16/bf16, the whole batch's codes first, then one conversion pass: 1.05x the tiled rate.
CUDA device: the codes are copied to the device and decoded there, so the link carries codes.

With a hot-row cache (:class:`~dgl_zerocopy.store.cache.HotRowCache`, rows or codes of the table):
- CUDA device: the ids are split on the CPU (a host copy of the slot map); only the misses are
  gathered into the pinned staging buffer and copied, and the device assembles the batch from
  them and the cached rows: the hits leave the host-to-device copy;
- CPU device: the same split, the hits read from the cache's separate CPU copy (the logic, no speed).
"""

from __future__ import annotations

import torch

from ..cache import HotRowCache, split_hits
from ..compression.codec import Codec
from ..compression.decode import Decoder
from ..transfer import to_device

#: Codes per tile and torch thread, for the CPU decode.
TILE_BYTES = 256 << 10


class CpuBackend:
    def __init__(
        self, table: torch.Tensor, device: torch.device, codec: Codec | None = None, out_dtype: torch.dtype | None = None, cache: HotRowCache | None = None
    ) -> None:
        self.table = table
        self.device = device
        self.cache = cache
        # The split runs where the ids are (the CPU): a host copy of a device cache's slot map.
        self._host_slots = cache.slot_map.cpu() if cache is not None and device.type == "cuda" else None
        self.out_dtype = out_dtype if out_dtype is not None else table.dtype
        self._decoder = Decoder(codec, self.out_dtype, device) if codec is not None else None
        self._staging = torch.empty((0, table.shape[1]), dtype=table.dtype)  # gathered rows or codes; grown on demand
        self._host_out = torch.empty((0, table.shape[1]), dtype=self.out_dtype)  # decoded rows (CPU device, compressed)
        self._device_out = None

    def _host_buffer(self, n: int) -> torch.Tensor:
        if self._staging.shape[0] < n:
            pin = self.device.type == "cuda"  # pinned staging lets the H2D copy run asynchronously
            self._staging = torch.empty((n, self.table.shape[1]), dtype=self.table.dtype, pin_memory=pin)
        return self._staging[:n]

    def _decoded_buffer(self, n: int) -> torch.Tensor:
        if self._host_out.shape[0] < n:
            self._host_out = torch.empty((n, self.table.shape[1]), dtype=self.out_dtype)
        return self._host_out[:n]

    def gather(self, ids: torch.Tensor, out: torch.Tensor | None, stream) -> torch.Tensor:
        """``table[ids]`` on ``self.device`` (the store's contract: :class:`~.base.Backend`). ids are
        already checked: int64/int32 on the CPU or the device, within ``[0, num_rows)``."""
        ids = ids.cpu()
        if self.cache is not None:
            return self._gather_cached(ids, out, stream)
        decoder = self._decoder
        if self.device.type == "cpu":
            if decoder is None:
                target = out if out is not None else self._host_buffer(ids.shape[0])
                return torch.index_select(self.table, 0, ids, out=target)
            target = out if out is not None else self._decoded_buffer(ids.shape[0])
            if decoder.passthrough:
                return torch.index_select(self.table, 0, ids, out=target)
            step = (
                ids.shape[0]
                if decoder.name != "int8"
                else max(1, TILE_BYTES * torch.get_num_threads() // max(1, self.table.shape[1] * self.table.element_size()))
            )
            tile = self._host_buffer(min(step, ids.shape[0]))
            for start in range(0, ids.shape[0], max(1, step)):
                part = ids[start : start + step]
                codes = torch.index_select(self.table, 0, part, out=tile[: part.shape[0]])
                decoder(codes, part, target[start : start + part.shape[0]])
            return target
        # The staging buffer is reused: wait until the previous copy out of it has finished.
        if self._device_out is not None:
            self._device_out[1].synchronize()
        staging = torch.index_select(self.table, 0, ids, out=self._host_buffer(ids.shape[0]))
        with torch.cuda.stream(stream):
            if decoder is None or decoder.passthrough:
                if out is None:
                    out = torch.empty(staging.shape, dtype=self.out_dtype, device=self.device)
                out.copy_(staging, non_blocking=True)
                codes = None
            else:
                codes = torch.empty(staging.shape, dtype=staging.dtype, device=self.device)
                codes.copy_(staging, non_blocking=True)
            done = torch.cuda.Event()
            done.record(stream)
            if codes is not None:
                if out is None:
                    out = torch.empty(staging.shape, dtype=self.out_dtype, device=self.device)
                decoder(codes, ids, out)
        self._device_out = (out, done)
        return out

    def _gather_cached(self, ids: torch.Tensor, out: torch.Tensor | None, stream) -> torch.Tensor:
        cache, decoder, n = self.cache, self._decoder, ids.shape[0]
        decode = decoder is not None and not decoder.passthrough
        if self.device.type == "cpu":
            if not decode:
                target = out if out is not None else (self._host_buffer(n) if decoder is None else self._decoded_buffer(n))
                return cache.gather(ids, self.table, target, unchecked=True)
            codes = cache.gather(ids, self.table, self._host_buffer(n), unchecked=True)
            return decoder(codes, ids, out if out is not None else self._decoded_buffer(n))
        split = split_hits(ids, self._host_slots, unchecked=True)
        cache.stats.record(split.hit_positions.numel(), split.miss_positions.numel())
        if self._device_out is not None:  # the staging buffer is reused: the previous copy out of it must be done
            self._device_out[1].synchronize()
        staged = torch.index_select(self.table, 0, split.miss_ids, out=self._host_buffer(split.miss_ids.shape[0]))
        with torch.cuda.stream(stream):
            rows = torch.empty((n, self.table.shape[1]), dtype=self.table.dtype, device=self.device) if decode or out is None else out
            if staged.shape[0]:
                rows.index_copy_(0, to_device(split.miss_positions, self.device), staged.to(self.device, non_blocking=True))
            done = torch.cuda.Event()
            done.record(stream)  # after the copy out of the staging buffer
            if split.hit_positions.numel():
                hit_slots = to_device(split.hit_slots, self.device)
                rows.index_copy_(0, to_device(split.hit_positions, self.device), cache.rows.index_select(0, hit_slots))
            if decode:
                if out is None:
                    out = torch.empty(rows.shape, dtype=self.out_dtype, device=self.device)
                rows = decoder(rows, ids, out)
        self._device_out = (rows, done)
        return rows

    def close(self) -> None:
        if self._device_out is not None:  # the last copy may still read the pinned staging buffer
            self._device_out[1].synchronize()
        self._staging = torch.empty((0, self.table.shape[1]), dtype=self.table.dtype)
        self._host_out = torch.empty((0, self.table.shape[1]), dtype=self.out_dtype)
        self._device_out = None
