"""Where the CUDA sources are, how to read them, and the options every compiler sees them with.

The ``.cu``/``.cuh`` files sit in ``kernels/`` at the repository root and are installed as the
package ``dgl_zerocopy.kernels`` (see ``pyproject.toml``), so :func:`kernel_dir` finds them through
``importlib.resources`` in an installed wheel and in an editable install alike. Run straight from a
source checkout without installing (``PYTHONPATH=.``), that package is not importable and the
checkout's ``kernels/`` folder is used. ``#include "x.cuh"`` lines are resolved by the compilers
(NVRTC, CuPy, g++) through an include-path option pointing at :func:`kernel_dir`.

Compile options: the GPU compiles the kernels through CuPy, which adds options of its own to ours
(:func:`kernel_options`), among them ``-ftz=true``: float32 arithmetic *with* a flush-to-zero
variant then flushes subnormal inputs and results to zero. :func:`nvrtc_options` is the complete
list NVRTC receives from CuPy, which the NVRTC compile check uses too; :func:`gpu_flushes_subnormals`
tells the CPU emulator to model the flush (``kernels/cpu_shim.h``).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.resources
import logging
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "CUPY_OPTIONS_AFTER_ARCH",
    "CUPY_OPTIONS_BEFORE_ARCH",
    "KERNEL_SUFFIXES",
    "flush_to_zero",
    "gpu_flushes_subnormals",
    "kernel_dir",
    "kernel_options",
    "kernel_sources_digest",
    "nvrtc_options",
    "read_kernel",
]

logger = logging.getLogger(__name__)

#: Files that make up the kernel sources (hashed into every compile cache key).
KERNEL_SUFFIXES = (".cu", ".cuh", ".h")
_PACKAGE = "dgl_zerocopy.kernels"
_MAIN_SOURCE = "gather.cu"


@functools.cache
def kernel_dir() -> Path:
    """The directory holding ``gather.cu`` and its headers.

    Raises:
        FileNotFoundError: neither the installed package nor the source checkout has them.
    """
    try:
        candidate = Path(str(importlib.resources.files(_PACKAGE)))
    except ModuleNotFoundError:
        candidate = None
    if candidate is not None and (candidate / _MAIN_SOURCE).is_file():
        return candidate
    checkout = Path(__file__).resolve().parents[2] / "kernels"  # dgl_zerocopy/cuda/ -> the checkout
    if (checkout / _MAIN_SOURCE).is_file():
        logger.debug("package %s not importable; using kernels from %s", _PACKAGE, checkout)
        return checkout
    raise FileNotFoundError(
        f"cannot find {_MAIN_SOURCE}: package {_PACKAGE} is not installed and {checkout} does not "
        "exist; install dgl-zerocopy (`make install`) or run from a source checkout"
    )


def read_kernel(name: str) -> str:
    """The text of kernel source ``name`` (a file name in :func:`kernel_dir`, e.g. ``"gather.cu"``).

    Raises:
        ValueError: ``name`` is not a plain file name.
        FileNotFoundError: no such kernel source.
    """
    if not name or Path(name).name != name:
        raise ValueError(f"name must be a file name like 'gather.cu', but got {name!r}")
    path = kernel_dir() / name
    if not path.is_file():
        available = sorted(p.name for p in kernel_dir().iterdir() if p.suffix in KERNEL_SUFFIXES)
        raise FileNotFoundError(f"no kernel source {name!r} in {kernel_dir()}; have {available}")
    return path.read_text(encoding="utf-8")


def kernel_sources_digest() -> str:
    """SHA-256 over the names and contents of every kernel source file (cache keys).

    Compilers cache by the main source text; a change in an included header must change the key.
    """
    digest = hashlib.sha256()
    for path in sorted(kernel_dir().iterdir()):
        if path.is_file() and path.suffix in KERNEL_SUFFIXES:
            digest.update(path.name.encode())
            digest.update(b"\0")
            digest.update(path.read_bytes())
            digest.update(b"\0")
    return digest.hexdigest()


# --------------------------------------------------------------------------- compile options

#: What CuPy (13 and 14, ``cupy/cuda/compiler.py``) appends to a RawModule's options before NVRTC
#: sees them: ``-ftz=true`` right after them (``_compile_with_cache_cuda``), then the architecture
#: and ``--device-as-default-execution-space`` (``_compile_using_nvrtc``). Its include paths and
#: default ``--std`` come first, from CuPy's own ``assemble_cupy_compiler_options`` where CuPy is
#: importable (:func:`nvrtc_options`). tests/cuda/test_kernels_nvrtc.py runs CuPy's compile path with a
#: recording stand-in for NVRTC and fails if these differ from what CuPy really passes.
CUPY_OPTIONS_BEFORE_ARCH = ("-ftz=true",)
CUPY_OPTIONS_AFTER_ARCH = ("--device-as-default-execution-space",)


def kernel_options() -> tuple[str, ...]:
    """The options this project gives CuPy's ``RawModule`` for ``gather.cu``: C++17, the include
    path of :func:`kernel_dir`, and a digest define that makes every compile cache key (CuPy keys on
    source text and options) change when an included header changes, not only the main source."""
    return ("--std=c++17", f"--include-path={kernel_dir()}", f"-DZC_KERNEL_DIGEST=0x{kernel_sources_digest()[:15]}")


def _with_cupy_includes(options: tuple[str, ...]) -> tuple[str, ...]:
    """``options`` as CuPy's ``assemble_cupy_compiler_options`` completes them (its CCCL include
    paths first, its own and the CUDA headers' last); ``options`` unchanged where CuPy cannot be
    imported or cannot find the CUDA headers (the include paths change no code of ours)."""
    try:
        from cupy._core import core  # CuPy 13 and 14; importing needs no GPU

        return tuple(core.assemble_cupy_compiler_options(tuple(options)))
    except Exception as error:  # noqa: BLE001 - CuPy missing, or unusable on this machine
        logger.debug("compile options without CuPy's include paths (%s: %s)", type(error).__name__, error)
        return tuple(options)


def nvrtc_options(arch: str) -> tuple[str, ...]:
    """Every option NVRTC receives when CuPy compiles ``gather.cu`` for ``arch``, in CuPy's order.

    Args:
        arch: ``"sm_XX"`` (a cubin, what CuPy builds) or ``"compute_XX"`` (PTX).
    """
    return (*_with_cupy_includes(kernel_options()), *CUPY_OPTIONS_BEFORE_ARCH, f"-arch={arch}", *CUPY_OPTIONS_AFTER_ARCH)


def flush_to_zero(options: Sequence[str]) -> bool:
    """Whether NVRTC given ``options`` flushes float32 subnormals to zero: the last ``-ftz=`` /
    ``--ftz=`` option decides; without one, NVRTC's default, false."""
    flush = False
    for option in options:
        name, _, value = option.partition("=")
        if name in ("-ftz", "--ftz"):
            flush = value == "true"
    return flush


def gpu_flushes_subnormals() -> bool:
    """Whether the kernels CuPy compiles flush float32 subnormals (true: CuPy passes ``-ftz=true``).
    Decided by the same options as :func:`nvrtc_options` (CuPy's include paths carry no ``-ftz``)."""
    return flush_to_zero((*kernel_options(), *CUPY_OPTIONS_BEFORE_ARCH, *CUPY_OPTIONS_AFTER_ARCH))
