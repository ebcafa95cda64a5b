"""CUDA sources of the gather kernels (``*.cu``, ``*.cuh``, ``cpu_shim.h``), as package data.

The GPU launcher lives in :mod:`dgl_zerocopy.cuda_gather` (a module ``dgl_zerocopy/kernels.py``
would be shadowed by this package once installed); its public functions are re-exported here,
lazily, so ``from dgl_zerocopy.kernels import launch_gather`` works without importing CuPy.
"""

from __future__ import annotations

from typing import Any

def __getattr__(name: str) -> Any:
    from dgl_zerocopy import cuda_gather  # imports no CuPy; its __all__ is the one list of names

    if name in cuda_gather.__all__:
        return getattr(cuda_gather, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
