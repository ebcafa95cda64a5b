"""Gather backends behind FeatureStore: each owns its device state and does the work on valid input."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Protocol

import torch

VARIANTS = ("aligned", "naive")


@dataclass(frozen=True)
class GatherOptions:
    """Options of the zero-copy gather kernel (see ``FeatureStore``); checked on construction."""

    variant: str = "aligned"
    sort_ids: bool = False
    max_blocks: int | None = None

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, but got {self.variant!r}")
        if not isinstance(self.sort_ids, bool):
            raise TypeError(f"sort_ids must be True or False, but got {self.sort_ids!r}")
        if self.max_blocks is not None and (isinstance(self.max_blocks, bool) or not isinstance(self.max_blocks, int) or self.max_blocks < 1):
            raise ValueError(f"max_blocks must be a positive integer or None (no cap), but got {self.max_blocks!r}")


class Backend(Protocol):
    """What FeatureStore needs of a backend. Input is already validated by the store.

    ``gather`` runs on ``stream`` (CUDA; the store has made it current and ordered it after the
    ids) and allocates there; ``close`` waits for the gathers in flight before releasing memory."""

    def gather(self, ids: torch.Tensor, out: torch.Tensor | None, stream) -> torch.Tensor: ...

    def close(self) -> None: ...


def make_backend(name: str, table: torch.Tensor, device: torch.device, read_only: bool = False,
                 options: GatherOptions = GatherOptions()) -> Backend:
    """The backend ``name`` over ``table``; ``read_only`` pins it with the read-only flag (a file
    map); ``options`` configure the zero-copy kernel."""
    if name == "cpu":
        from .cpu import CpuBackend

        return CpuBackend(table, device)
    if name == "gpu":
        from .gpu import GpuBackend

        return GpuBackend(table, device)
    if name == "zerocopy":
        from .zerocopy import ZeroCopyBackend

        return ZeroCopyBackend(table, device, read_only=read_only, options=options)
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
