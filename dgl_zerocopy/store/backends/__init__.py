"""Gather backends behind FeatureStore: each owns its device state and does the work on valid input."""

from __future__ import annotations

import functools

import torch

from ...cuda.gather.instantiations import name_expression
from ..cache import HotRowCache
from ..compression.codec import Codec
from .base import VARIANTS, Backend, GatherOptions

__all__ = ["VARIANTS", "Backend", "GatherOptions", "PROBE_KERNEL", "make_backend", "zerocopy_available", "zerocopy_problem"]


def make_backend(
    name: str,
    table: torch.Tensor,
    device: torch.device,
    read_only: bool = False,
    options: GatherOptions = GatherOptions(),  # noqa: B008 (frozen: one immutable default)
    codec: Codec | None = None,
    out_dtype: torch.dtype | None = None,
    cache: HotRowCache | None = None,
) -> Backend:
    """The backend ``name`` over ``table``; ``read_only`` pins it with the read-only flag (a file
    map); ``options`` configure the zero-copy kernel. A compressed table: ``table`` holds the codes,
    ``codec`` decodes them (:mod:`dgl_zerocopy.store.compression`) and ``out_dtype`` is the dtype of the
    gathered rows (default: the table's). ``cache``: hot rows of ``table`` (codes, for a compressed
    one) on ``device``, read instead of the host table (``cpu`` and ``zerocopy``; ``gpu`` takes none)."""
    if name == "cpu":
        from .cpu import CpuBackend

        return CpuBackend(table, device, codec=codec, out_dtype=out_dtype, cache=cache)
    if cache is not None and name != "zerocopy":
        raise ValueError(f"backend {name!r} takes no cache")
    if name == "gpu":
        from .gpu import GpuBackend

        return GpuBackend(table, device, codec=codec, out_dtype=out_dtype)
    if name == "zerocopy":
        from .zerocopy import ZeroCopyBackend

        extra = {"codec": codec, "out_dtype": out_dtype} if codec is not None else {}
        if cache is not None:
            extra["cache"] = cache
        return ZeroCopyBackend(table, device, read_only=read_only, options=options, **extra)
    raise ValueError(f"unknown backend {name!r}")


#: The instantiation compiled to check a device: the aligned kernel's widest load with int64 ids,
#: what a table of 16-byte-multiple rows uses, so that the first gather often reuses the compile.
PROBE_KERNEL = name_expression("aligned", 16, 8)


@functools.cache
def zerocopy_problem(device_index: int) -> str | None:
    """Why the zero-copy gather cannot run on CUDA device ``device_index``, or None if it can.

    Checks that the device exists, that CuPy imports, and that a gather kernel compiles and loads
    for the device through CuPy (NVRTC for its ``sm_XY``). Cached per device: one compile per
    process. The reason is one line that ends with the fix."""
    if not torch.cuda.is_available() or not 0 <= device_index < torch.cuda.device_count():
        return f"CUDA device {device_index} is not available"
    extra = f"dgl-zerocopy[cuda{torch.version.cuda.split('.')[0]}]" if torch.version.cuda else "dgl-zerocopy[cuda12] or [cuda13]"
    try:
        import cupy  # noqa: F401 - the import is the check
    except Exception as error:  # noqa: BLE001 - ImportError, or CuPy failing to find its CUDA libraries
        return f"CuPy does not import ({type(error).__name__}: {_first_line(error)}); pip install {extra}"
    from ...cuda.gather import launcher

    major, minor = torch.cuda.get_device_capability(device_index)
    try:
        launcher.compile_gather_module(device_index, (PROBE_KERNEL,))
    except Exception as error:  # noqa: BLE001 - whatever stops the kernel is the reason to report
        return (
            f"the gather kernel does not compile for CUDA device {device_index} (sm_{major}{minor}): "
            f"{type(error).__name__}: {_first_line(error)}; install the NVRTC and CuPy of torch's CUDA "
            f"(pip install {extra}) or set CUDA_PATH to a CUDA toolkit, and run "
            "`dgl-zerocopy info`; backend='zerocopy' raises the full error"
        )
    return None


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else "no message"


def zerocopy_available(device_index: int | None = None) -> bool:
    """True where the zero-copy gather runs on CUDA device ``device_index`` (default: the current
    one): see :func:`zerocopy_problem`."""
    if not torch.cuda.is_available():
        return False
    return zerocopy_problem(torch.cuda.current_device() if device_index is None else device_index) is None
