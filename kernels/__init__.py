"""CUDA sources of the gather kernels (``*.cu``, ``*.cuh``, ``cpu_shim.h``), as package data.

The GPU launcher lives in :mod:`dgl_zerocopy.cuda.gather.launcher` and NVRTC in
:mod:`dgl_zerocopy.cuda.nvrtc` (a module ``dgl_zerocopy/kernels.py`` would be shadowed by this
package once installed); their public functions are re-exported here, lazily, so
``from dgl_zerocopy.kernels import launch_gather`` works without importing CuPy.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    # Neither module imports CuPy; their __all__ are the one list of names.
    from dgl_zerocopy.cuda import nvrtc
    from dgl_zerocopy.cuda.gather import launcher

    for module in (launcher, nvrtc):
        if name in module.__all__:
            return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
