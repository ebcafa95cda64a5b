"""Gather backends behind FeatureStore: each owns its device state and does the work on valid input."""
from __future__ import annotations

import functools
from typing import Protocol

import torch


class Backend(Protocol):
    """What FeatureStore needs of a backend. Input is already validated by the store."""

    def gather(self, ids: torch.Tensor, out: torch.Tensor | None, stream) -> torch.Tensor: ...

    def close(self) -> None: ...


def make_backend(name: str, table: torch.Tensor, device: torch.device, read_only: bool = False) -> Backend:
    """The backend ``name`` over ``table``; ``read_only`` marks memory that must not be written (a file map)."""
    if name == "cpu":
        from .cpu import CpuBackend

        return CpuBackend(table, device)
    if name == "gpu":
        from .gpu import GpuBackend

        return GpuBackend(table, device)
    if name == "zerocopy":
        from .zerocopy import ZeroCopyBackend

        return ZeroCopyBackend(table, device, read_only=read_only)
    raise ValueError(f"unknown backend {name!r}")


@functools.cache
def zerocopy_available() -> bool:
    """True where CUDA works and CuPy imports (what the zero-copy kernels need)."""
    if not torch.cuda.is_available():
        return False
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - any CuPy/driver failure means "not available"
        return False
