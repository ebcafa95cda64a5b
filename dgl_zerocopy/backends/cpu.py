"""The CPU-gather baseline: ``index_select(out=)`` into a reused buffer, then (on CUDA) an async copy.

A fresh output per batch costs page faults on every new page: reusing one buffer is several
times faster (bench/cpu_gather.py), so the baseline we compare against is the fast one.
"""
from __future__ import annotations

import torch


class CpuBackend:
    def __init__(self, table: torch.Tensor, device: torch.device) -> None:
        self.table = table
        self.device = device
        self._staging = torch.empty((0, table.shape[1]), dtype=table.dtype)  # grown on demand
        self._device_out = None

    def _host_buffer(self, n: int) -> torch.Tensor:
        if self._staging.shape[0] < n:
            pin = self.device.type == "cuda"  # pinned staging lets the H2D copy run asynchronously
            self._staging = torch.empty((n, self.table.shape[1]), dtype=self.table.dtype, pin_memory=pin)
        return self._staging[:n]

    def gather(self, ids: torch.Tensor, out: torch.Tensor | None, stream) -> torch.Tensor:
        ids = ids.cpu()
        if self.device.type == "cpu":
            target = out if out is not None else self._host_buffer(ids.shape[0])
            return torch.index_select(self.table, 0, ids, out=target)
        # The staging buffer is reused: wait until the previous copy out of it has finished.
        if self._device_out is not None:
            self._device_out[1].synchronize()
        staging = torch.index_select(self.table, 0, ids, out=self._host_buffer(ids.shape[0]))
        with torch.cuda.stream(stream):
            if out is None:
                out = torch.empty(staging.shape, dtype=staging.dtype, device=self.device)
            out.copy_(staging, non_blocking=True)
            done = torch.cuda.Event()
            done.record(stream)
        self._device_out = (out, done)
        return out

    def close(self) -> None:
        if self._device_out is not None:  # the last copy may still read the pinned staging buffer
            self._device_out[1].synchronize()
        self._staging = torch.empty((0, self.table.shape[1]), dtype=self.table.dtype)
        self._device_out = None
