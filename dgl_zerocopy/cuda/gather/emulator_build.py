"""The CPU build of the gather kernels: ``kernels/gather.cu`` compiled unchanged by g++ through
``kernels/cpu_shim.h`` into a shared library, cached under ``$DGL_ZEROCOPY_CACHE/emulator``
(default ``~/.cache/dgl_zerocopy/emulator``) in a file named by a hash of the sources, the entry
points, the flags and the compiler, and loaded with ctypes. Also its scalar entry points: the
element conversions and float arithmetic of the kernels, to test them value by value.

:mod:`dgl_zerocopy.cuda.gather.emulator` runs the kernels of this library on a launch plan.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import hashlib
import logging
import os
import re
import shutil
import struct
import subprocess
import tempfile
import threading
import warnings
from pathlib import Path

import numpy as np

from dgl_zerocopy.cuda.gather import instantiations
from dgl_zerocopy.cuda.kernel_source import gpu_flushes_subnormals, kernel_dir, kernel_sources_digest

__all__ = [
    "CONVERSIONS",
    "FLOAT_OPS",
    "RECORD_DTYPE",
    "load_columns",
    "build_emulator",
    "build_library",
    "convert",
    "emulator_cache_dir",
    "emulator_flushes_subnormals",
    "entry_symbol",
    "float_op",
    "library",
]

logger = logging.getLogger(__name__)

# -ffp-contract=off: a multiply and an add stay two roundings, as __fmul_rn/__fadd_rn on the GPU.
_CXX_FLAGS = ("-std=c++17", "-O2", "-fPIC", "-shared", "-fno-strict-aliasing", "-ffp-contract=off")
#: NumPy mirror of ``zc_load_record`` in kernels/cpu_shim.h.
RECORD_DTYPE = np.dtype([("address", "<i8"), ("warp", "<i8"), ("slot", "<i8"), ("bytes", "<i4"), ("reserved", "<i4")])
_build_lock = threading.Lock()
_private_dir: Path | None = None  # where this process builds when the cache folder cannot be used


def load_columns(records: np.ndarray) -> dict[str, np.ndarray]:
    """The traced loads of ``records`` (``RECORD_DTYPE``) as copied columns: ``address``, ``nbytes``, ``warp``, ``slot``."""
    return {"address": records["address"].copy(), "nbytes": records["bytes"].copy(), "warp": records["warp"].copy(), "slot": records["slot"].copy()}


def emulator_cache_dir() -> Path:
    """Where built emulator libraries are cached: ``$DGL_ZEROCOPY_CACHE/emulator``."""
    root = os.environ.get("DGL_ZEROCOPY_CACHE") or Path.home() / ".cache" / "dgl_zerocopy"
    return Path(root) / "emulator"


def _usable_cache_dir() -> Path:
    """:func:`emulator_cache_dir`, created; when it cannot be (``$DGL_ZEROCOPY_CACHE`` names a file,
    lies under one, or is not writable) a private temporary folder of this process, removed at
    exit, with a warning naming the path and the fix: the emulator still runs, rebuilt each time."""
    folder = emulator_cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not os.access(folder, os.W_OK | os.X_OK):
            raise PermissionError(13, "not writable", str(folder))
        return folder
    except OSError as e:
        reason = e.strerror or str(e)
    global _private_dir
    if _private_dir is None:
        _private_dir = Path(tempfile.mkdtemp(prefix="dgl-zerocopy-emulator-"))
        atexit.register(shutil.rmtree, _private_dir, ignore_errors=True)
    warnings.warn(
        f"the CPU emulator's cache {str(folder)!r} cannot be used ({reason}); building into {str(_private_dir)!r} for this process. "
        f"Set DGL_ZEROCOPY_CACHE to a folder you can write to (or unset it) to keep the build",
        stacklevel=3,
    )
    return _private_dir


def entry_symbol(name_expression: str) -> str:
    """The C symbol of the library's entry point that launches instantiation ``name_expression``."""
    return "zc_emu_" + re.sub(r"[^0-9A-Za-z]+", "_", name_expression).strip("_")


def _translation_unit() -> str:
    # Only #includes and one entry-point macro per instantiation: the kernel code stays in .cu.
    lines = ['#include "cpu_shim.h"', '#include "gather.cu"']
    lines += [f"ZC_EMU_ENTRY({entry_symbol(name)}, {name})" for name in instantiations.all_name_expressions()]
    lines.append("ZC_EMU_CONVERT_ENTRY")
    return "\n".join(lines) + "\n"


def _compiler() -> tuple[str, str]:
    cxx = os.environ.get("CXX", "g++")
    path = shutil.which(cxx)
    if path is None:
        raise RuntimeError(f"C++ compiler {cxx!r} not found; the CPU emulator needs g++ (install it, or set CXX)")
    version = subprocess.run([path, "--version"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
    return path, version


def _cxx_flags() -> tuple[str, ...]:
    # ZC_EMU_FTZ: the shim's __fmul_rn/__fadd_rn flush subnormals, as the GPU's do under -ftz=true.
    return (*_CXX_FLAGS, *(("-DZC_EMU_FTZ=1",) if gpu_flushes_subnormals() else ()))


def build_emulator() -> Path:
    """Build (or find in the cache) the emulator library of the gather kernels and return its path
    (:func:`build_library` of ``gather.cu`` and its entry points)."""
    return build_library("gather", _translation_unit())


def build_library(stem: str, source: str) -> Path:
    """Build (or find in the cache) the library g++ makes of ``source`` (a translation unit that
    includes ``cpu_shim.h`` and a kernel source of ``kernels/``) and return its path, named
    ``{stem}-{hash}.so``; the sampling kernels' emulator builds through this too.

    The library is compiled into a temporary file in the cache directory and renamed into place,
    so concurrent builders never load a half-written file. A cache directory that cannot be used
    gives a warning and a build in a private temporary folder (see :func:`_usable_cache_dir`).

    Raises:
        RuntimeError: no compiler, or the compilation failed (the message holds its output).
    """
    cxx, version = _compiler()
    include = kernel_dir()
    key = hashlib.sha256("\0".join([kernel_sources_digest(), source, " ".join(_cxx_flags()), cxx, version]).encode()).hexdigest()[:24]
    target = _usable_cache_dir() / f"{stem}-{key}.so"
    if target.is_file():
        if _whole_elf(target):
            return target
        # dlopen of a library cut short dies of SIGBUS, beyond any except: checked before loading.
        warnings.warn(f"the cached CPU emulator {str(target)!r} is damaged (cut short); building it again", stacklevel=2)
        target.unlink(missing_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{stem}-", suffix=".so.tmp")
    os.close(fd)
    command = [cxx, *_cxx_flags(), "-I", str(include), "-x", "c++", "-", "-o", tmp]
    logger.info("building the CPU emulator %s into %s", stem, target)
    try:
        result = subprocess.run(command, input=source, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"compiling the CPU emulator failed ({' '.join(command)}):\n{result.stderr}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def _whole_elf(path: Path) -> bool:
    """Whether ``path`` is a 64-bit ELF file whose program segments and section table lie within
    the file (what a file cut short, or one not written by the compiler, fails)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return False
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:  # ELFCLASS64, little-endian
        return False
    phoff, shoff = struct.unpack_from("<QQ", data, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 0x36)
    if phoff + phnum * phentsize > len(data) or shoff + shnum * shentsize > len(data):
        return False
    for i in range(phnum):
        offset, filesz = struct.unpack_from("<Q", data, phoff + i * phentsize + 8)[0], struct.unpack_from("<Q", data, phoff + i * phentsize + 32)[0]
        if offset + filesz > len(data):
            return False
    return True


@functools.cache
def library() -> ctypes.CDLL:
    """The emulator library, built once per process (:func:`build_emulator`), its entry points typed."""
    with _build_lock:
        lib = ctypes.CDLL(str(build_emulator()))
    lib.zc_emu_record_bytes.restype = ctypes.c_int
    lib.zc_emu_trace_size.restype = ctypes.c_longlong
    lib.zc_emu_trace_copy.argtypes = [ctypes.c_void_p]
    if lib.zc_emu_record_bytes() != RECORD_DTYPE.itemsize:
        raise RuntimeError("kernels/cpu_shim.h zc_load_record does not match emulator.RECORD_DTYPE")
    lib.zc_emu_convert.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong]
    lib.zc_emu_convert.restype = None
    lib.zc_emu_float_op.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong]
    lib.zc_emu_float_op.restype = None
    lib.zc_emu_flushes_subnormals.restype = ctypes.c_int
    for name in instantiations.all_name_expressions():
        entry = getattr(lib, entry_symbol(name))
        entry.argtypes = [ctypes.c_uint, ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p)]
        entry.restype = None
    return lib


#: The element conversions of the decoding kernel: name -> (kind in zc_emu_convert, input dtype,
#: output dtype). Half and bfloat16 values are their uint16 bits.
CONVERSIONS = {
    "fp16->float32": (0, np.dtype(np.uint16), np.dtype(np.float32)),
    "float32->fp16": (1, np.dtype(np.float32), np.dtype(np.uint16)),
    "bf16->float32": (2, np.dtype(np.uint16), np.dtype(np.float32)),
    "float32->bf16": (3, np.dtype(np.float32), np.dtype(np.uint16)),
}


def convert(name: str, values: np.ndarray) -> np.ndarray:
    """Apply one of the emulated kernels' element conversions (:data:`CONVERSIONS`) to ``values``
    (half/bfloat16 as uint16 bits): the shim's software fp16 conversions, which stand for the
    GPU's instructions, and ``kernels/codecs.cuh``'s bf16 ones."""
    if name not in CONVERSIONS:
        raise ValueError(f"name must be one of {tuple(CONVERSIONS)}, but got {name!r}")
    kind, in_dtype, out_dtype = CONVERSIONS[name]
    values = np.ascontiguousarray(values)
    if values.dtype != in_dtype:
        raise TypeError(f"{name} takes {in_dtype} values, but got {values.dtype}")
    out = np.empty(values.shape, dtype=out_dtype)
    library().zc_emu_convert(kind, values.ctypes.data, out.ctypes.data, values.size)
    return out


#: The float32 arithmetic of the shim and kernels/codecs.cuh: name -> kind in zc_emu_float_op.
#: ``__fmul_rn``/``__fadd_rn`` flush subnormals when :func:`emulator_flushes_subnormals`, as CUDA's
#: do under CuPy's ``-ftz=true``; ``zc_mul_rn``/``zc_add_rn`` (what the kernels use) never flush.
FLOAT_OPS = {"__fmul_rn": 0, "__fadd_rn": 1, "zc_mul_rn": 2, "zc_add_rn": 3}


def float_op(name: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Apply one of :data:`FLOAT_OPS` elementwise to float32 arrays ``a`` and ``b`` (same shape)."""
    if name not in FLOAT_OPS:
        raise ValueError(f"name must be one of {tuple(FLOAT_OPS)}, but got {name!r}")
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    if a.dtype != np.float32 or b.dtype != np.float32 or a.shape != b.shape:
        raise TypeError(f"{name} takes two float32 arrays of one shape, but got {a.dtype} {a.shape} and {b.dtype} {b.shape}")
    out = np.empty(a.shape, dtype=np.float32)
    library().zc_emu_float_op(FLOAT_OPS[name], a.ctypes.data, b.ctypes.data, out.ctypes.data, a.size)
    return out


def emulator_flushes_subnormals() -> bool:
    """Whether the built emulator models flush-to-zero (it does when the GPU's options have it)."""
    return bool(library().zc_emu_flushes_subnormals())
