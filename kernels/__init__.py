"""CUDA sources of the gather kernels (``*.cu``, ``*.cuh``, ``cpu_shim.h``), as package data.

The GPU launcher lives in :mod:`dgl_zerocopy.cuda_gather` (a module ``dgl_zerocopy/kernels.py``
would be shadowed by this package once installed); its public functions are re-exported here,
lazily, so ``from dgl_zerocopy.kernels import launch_gather`` works without importing CuPy.
"""

from __future__ import annotations

from typing import Any

_LAUNCHER_NAMES = frozenset(
    {
        "KernelCompileError",
        "compile_check",
        "compile_gather_module",
        "launch_gather",
        "nvrtc_library_path",
        "nvrtc_version",
    }
)


def __getattr__(name: str) -> Any:
    if name in _LAUNCHER_NAMES:
        from dgl_zerocopy import cuda_gather

        return getattr(cuda_gather, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
