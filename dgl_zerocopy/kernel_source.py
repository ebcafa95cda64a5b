"""Where the CUDA sources are and how to read them.

The ``.cu``/``.cuh`` files sit in ``kernels/`` at the repository root and are installed as the
package ``dgl_zerocopy.kernels`` (see ``pyproject.toml``), so :func:`kernel_dir` finds them through
``importlib.resources`` in an installed wheel and in an editable install alike. Run straight from a
source checkout without installing (``PYTHONPATH=.``), that package is not importable and the
checkout's ``kernels/`` folder is used. ``#include "x.cuh"`` lines are resolved by the compilers
(NVRTC, CuPy, g++) through an include-path option pointing at :func:`kernel_dir`.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.resources
import logging
from pathlib import Path

__all__ = ["KERNEL_SUFFIXES", "kernel_dir", "kernel_sources_digest", "read_kernel"]

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
    checkout = Path(__file__).resolve().parent.parent / "kernels"
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
