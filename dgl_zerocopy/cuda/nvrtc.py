"""NVRTC, found and driven through ctypes: which library (the CUDA 12 or 13 pip wheels that torch's
CUDA builds install, a CUDA toolkit, or CuPy's own lookup), its version, the architectures it
compiles for, and a compile of a kernel source with the options CuPy passes on the GPU
(``-ftz=true`` among them). Needs no GPU or driver; imports no CuPy.

One module for every kernel: the gather launcher (:mod:`dgl_zerocopy.cuda.gather.launcher`)
compiles ``kernels/gather.cu`` through :func:`compile_program`; sampling kernels will too.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import logging
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dgl_zerocopy.cuda.kernel_source import nvrtc_options, read_kernel

__all__ = [
    "KernelCompileError",
    "NvrtcLibrary",
    "choose_nvrtc",
    "compile_program",
    "default_archs",
    "find_nvrtc",
    "nvrtc_candidates",
    "nvrtc_library_path",
    "nvrtc_version",
    "preload_for_cupy",
    "supported_archs",
]

logger = logging.getLogger(__name__)

_ARCH_PATTERN = re.compile(r"^(sm_|compute_)?(\d{2,3})$")


class KernelCompileError(RuntimeError):
    """A kernel failed to compile; the message holds the compiler log."""


# --------------------------------------------------------------------------- NVRTC (no GPU)

#: Where each lookup looks, in search order (documented in :func:`find_nvrtc`).
PIP_LAYOUTS = (("cu12 pip", "nvidia/cuda_nvrtc/lib"), ("cu13 pip", "nvidia/cu13/lib"))
TOOLKIT_VARIABLES = ("CUDA_PATH", "CUDA_HOME")
TOOLKIT_DEFAULT = "/usr/local/cuda"
TOOLKIT_LIB_DIRS = ("lib64", "lib", "targets/*/lib")
_LIBRARY_NAME = re.compile(r"^libnvrtc\.so\.(\d+)(?:\.\d+)*$")
#: One architecture per GPU generation the kernels target (Volta, Turing, Ampere, Hopper,
#: Blackwell); :func:`default_archs` keeps those the loaded NVRTC supports.
TARGET_ARCHS = ("sm_70", "sm_75", "sm_80", "sm_90", "sm_100")


@dataclass(frozen=True)
class NvrtcLibrary:
    """One NVRTC shared library: its ``path``, the CUDA ``major`` its file name carries
    (``libnvrtc.so.<major>``) and the lookup that found it (``source``: ``"cu12 pip"``,
    ``"cu13 pip"``, ``"CUDA_PATH"``, ``"CUDA_HOME"``, ``"/usr/local/cuda"``, ``"CuPy's lookup
    (cuda-pathfinder: ...)"`` or ``"dynamic linker"``)."""

    path: str
    major: int
    source: str


def _libraries_in(folder: str, source: str) -> list[NvrtcLibrary]:
    # One file per CUDA major: the shortest name is the soname (libnvrtc.so.12), which the
    # longer, fully versioned names of a toolkit (libnvrtc.so.12.4.127) are links to or copies of.
    try:
        names = sorted(os.listdir(folder), key=lambda name: (len(name), name))
    except OSError:
        return []
    found: dict[int, NvrtcLibrary] = {}
    for name in names:
        match = _LIBRARY_NAME.match(name)
        if match and int(match.group(1)) not in found and os.path.isfile(os.path.join(folder, name)):
            found[int(match.group(1))] = NvrtcLibrary(os.path.join(folder, name), int(match.group(1)), source)
    return list(found.values())


def nvrtc_candidates(search_path: Sequence[str], environ: Mapping[str, str], default_toolkit: str = TOOLKIT_DEFAULT) -> list[NvrtcLibrary]:
    """Every NVRTC library in the file layouts, in search order, each real file once (first wins).

    1. pip wheels, for each folder of ``search_path`` (``sys.path``): ``nvidia/cuda_nvrtc/lib``
       (CUDA 12: ``nvidia-cuda-nvrtc-cu12``), then ``nvidia/cu13/lib`` (CUDA 13:
       ``nvidia-cuda-nvrtc`` 13, which torch's ``cuda-toolkit[nvrtc]`` brings);
    2. CUDA toolkits: ``$CUDA_PATH``, ``$CUDA_HOME``, then ``default_toolkit`` (``/usr/local/cuda``),
       each at ``lib64``, ``lib`` and ``targets/*/lib``.

    Reads only directory listings (no library is loaded), so tests can pass fake trees.
    """
    folders = [(source, os.path.join(entry, layout)) for entry in search_path if entry for source, layout in PIP_LAYOUTS]
    roots = [(name, environ[name]) for name in TOOLKIT_VARIABLES if environ.get(name)]
    for source, root in [*roots, (default_toolkit, default_toolkit)]:
        for lib_dir in TOOLKIT_LIB_DIRS:
            folders += [(source, folder) for folder in sorted(glob.glob(os.path.join(root, lib_dir)))]
    seen: set[str] = set()
    candidates = []
    for source, folder in folders:
        for library in _libraries_in(folder, source):
            real = os.path.realpath(library.path)
            if real not in seen:
                seen.add(real)
                candidates.append(library)
    return candidates


def choose_nvrtc(candidates: Sequence[NvrtcLibrary], cuda_major: int | None) -> NvrtcLibrary | None:
    """The first candidate of CUDA major ``cuda_major`` (the running torch's); without one, the
    first of the newest major; None for no candidates."""
    for candidate in candidates:
        if candidate.major == cuda_major:
            return candidate
    return max(candidates, key=lambda candidate: candidate.major, default=None)  # max keeps the first of equals


class _DlInfo(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p), ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]


def _defining_file(function: Any) -> str | None:
    """The shared library that defines the ctypes ``function`` (``dladdr``), or None."""
    dladdr = getattr(ctypes.CDLL(None), "dladdr", None)
    if dladdr is None:
        return None
    info = _DlInfo()
    if dladdr(ctypes.cast(function, ctypes.c_void_p), ctypes.byref(info)) == 0 or not info.fname:
        return None
    return os.path.realpath(info.fname.decode())


def _nvrtc_from_loaders(cuda_major: int | None) -> tuple[NvrtcLibrary | None, list[str]]:
    """NVRTC as CuPy finds it: CuPy 14 asks cuda-pathfinder (site-packages, conda, the dynamic
    linker, CUDA_PATH); CuPy 13 dlopens ``libnvrtc.so.<major>`` through the dynamic linker
    (LD_LIBRARY_PATH, ldconfig). Both load the library. Returns it (or None) and what was tried."""
    tried = []
    try:
        from cuda import pathfinder  # CuPy 14's dependency; CuPy itself is not imported
    except ImportError:
        tried.append("CuPy's lookup (cuda-pathfinder: not installed)")
    else:
        try:
            loaded = pathfinder.load_nvidia_dynamic_lib("nvrtc")
        except (RuntimeError, OSError) as error:  # DynamicLibNotFoundError, or its probe failing
            tried.append(f"CuPy's lookup (cuda-pathfinder: {str(error).splitlines()[0]})")
        else:
            match = _LIBRARY_NAME.match(os.path.basename(os.path.realpath(loaded.abs_path or "")))
            if loaded.abs_path and match:
                return NvrtcLibrary(loaded.abs_path, int(match.group(1)), f"CuPy's lookup (cuda-pathfinder: {loaded.found_via})"), tried
            tried.append(f"CuPy's lookup (cuda-pathfinder found {loaded.abs_path!r}, not a libnvrtc.so.N)")
    # The dynamic linker knows sonames only: torch's major first, then the newest.
    majors = sorted({12, 13, cuda_major or 13}, key=lambda major: (major != cuda_major, -major))
    for major in majors:
        try:
            lib = ctypes.CDLL(f"libnvrtc.so.{major}")
        except OSError:
            continue
        return NvrtcLibrary(_defining_file(lib.nvrtcVersion) or f"libnvrtc.so.{major}", major, "dynamic linker"), tried
    tried.append(f"the dynamic linker (LD_LIBRARY_PATH, ldconfig: {', '.join(f'libnvrtc.so.{m}' for m in majors)})")
    return None, tried


def _torch_cuda_major() -> int | None:
    import torch

    return int(torch.version.cuda.split(".")[0]) if torch.version.cuda else None


@functools.cache
def find_nvrtc() -> NvrtcLibrary:
    """The NVRTC library this process uses, and which lookup found it.

    Search order: the pip wheels on ``sys.path`` (CUDA 12, then 13 layout), then ``$CUDA_PATH``,
    ``$CUDA_HOME`` and ``/usr/local/cuda`` (see :func:`nvrtc_candidates`); among those found, the
    one matching torch's CUDA major (``torch.version.cuda``) wins, else the newest. Only when none
    is found: CuPy's own lookup (cuda-pathfinder, then the dynamic linker), which loads it.

    Raises:
        FileNotFoundError: no NVRTC anywhere; the message lists the places searched and the fix.
    """
    cuda_major = _torch_cuda_major()
    chosen = choose_nvrtc(nvrtc_candidates(sys.path, os.environ), cuda_major)
    if chosen is not None:
        return chosen
    chosen, tried = _nvrtc_from_loaders(cuda_major)
    if chosen is not None:
        return chosen
    variables = ", ".join(f"${name}" for name in TOOLKIT_VARIABLES)
    torch_cuda = f"torch's CUDA {cuda_major}" if cuda_major else "the CUDA major of your driver"
    raise FileNotFoundError(
        "NVRTC (libnvrtc.so.12 or .13) was not found. Searched: "
        f"{' and '.join(layout for _, layout in PIP_LAYOUTS)} in every sys.path folder; "
        f"{variables} and {TOOLKIT_DEFAULT} at {', '.join(TOOLKIT_LIB_DIRS)}; {'; '.join(tried)}. "
        f"Fix: pip install dgl-zerocopy[cuda12] or dgl-zerocopy[cuda13], matching {torch_cuda} "
        "(torch's CUDA wheels bring NVRTC too), or set CUDA_PATH to a CUDA toolkit"
    )


def nvrtc_library_path() -> str:
    """Path of the NVRTC library :func:`find_nvrtc` chose (FileNotFoundError: none found)."""
    return find_nvrtc().path


@functools.cache
def _open_nvrtc(path: str) -> ctypes.CDLL:
    # libnvrtc dlopens libnvrtc-builtins by name at compile time; load it first from the same
    # folder so that the lookup succeeds without LD_LIBRARY_PATH.
    for builtins in sorted(glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so*"))):
        ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(path)
    p, c, i = ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)
    lib.nvrtcGetErrorString.restype = c
    lib.nvrtcGetErrorString.argtypes = [ctypes.c_int]
    lib.nvrtcVersion.argtypes = [i, i]
    lib.nvrtcGetNumSupportedArchs.argtypes = [i]
    lib.nvrtcGetSupportedArchs.argtypes = [i]
    lib.nvrtcCreateProgram.argtypes = [ctypes.POINTER(p), c, c, ctypes.c_int, ctypes.POINTER(c), ctypes.POINTER(c)]
    lib.nvrtcDestroyProgram.argtypes = [ctypes.POINTER(p)]
    lib.nvrtcAddNameExpression.argtypes = [p, c]
    lib.nvrtcCompileProgram.argtypes = [p, ctypes.c_int, ctypes.POINTER(c)]
    lib.nvrtcGetProgramLogSize.argtypes = [p, ctypes.POINTER(ctypes.c_size_t)]
    lib.nvrtcGetProgramLog.argtypes = [p, ctypes.c_char_p]
    lib.nvrtcGetLoweredName.argtypes = [p, c, ctypes.POINTER(c)]
    lib.nvrtcGetCUBINSize.argtypes = [p, ctypes.POINTER(ctypes.c_size_t)]
    lib.nvrtcGetCUBIN.argtypes = [p, ctypes.c_char_p]
    lib.nvrtcGetPTXSize.argtypes = [p, ctypes.POINTER(ctypes.c_size_t)]
    lib.nvrtcGetPTX.argtypes = [p, ctypes.c_char_p]
    return lib


def _nvrtc() -> ctypes.CDLL:
    return _open_nvrtc(nvrtc_library_path())


def _version_of(lib: ctypes.CDLL) -> tuple[int, int]:
    major, minor = ctypes.c_int(), ctypes.c_int()
    status = lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    if status != 0:
        raise OSError(f"nvrtcVersion failed with status {status}")
    return major.value, minor.value


def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the NVRTC library :func:`compile_check` uses.

    Raises:
        OSError: NVRTC is not installed (FileNotFoundError) or cannot be loaded.
    """
    return _version_of(_nvrtc())


def _supported_archs_of(lib: ctypes.CDLL) -> tuple[str, ...]:
    count = ctypes.c_int()
    _nvrtc_call(lib, "nvrtcGetNumSupportedArchs", lib.nvrtcGetNumSupportedArchs(ctypes.byref(count)))
    archs = (ctypes.c_int * count.value)()
    _nvrtc_call(lib, "nvrtcGetSupportedArchs", lib.nvrtcGetSupportedArchs(archs))
    return tuple(f"sm_{arch}" for arch in archs)


def supported_archs() -> tuple[str, ...]:
    """Every ``sm_XX`` the loaded NVRTC compiles for, oldest first (from NVRTC itself).

    Raises:
        OSError: NVRTC is not installed or cannot be loaded.
    """
    return _supported_archs_of(_nvrtc())


def default_archs() -> tuple[str, ...]:
    """The architectures to check the kernels for: those of :data:`TARGET_ARCHS` that the loaded
    NVRTC supports (NVRTC 12: sm_70 to sm_90, and sm_100 from 12.8; NVRTC 13: sm_75 to sm_100,
    CUDA 13 having dropped sm_50 to sm_72).

    Raises:
        OSError: NVRTC is not installed or cannot be loaded.
    """
    supported = set(supported_archs())
    return tuple(arch for arch in TARGET_ARCHS if arch in supported)


def _nvrtc_call(lib: ctypes.CDLL, what: str, status: int) -> None:
    if status != 0:
        message = lib.nvrtcGetErrorString(status).decode()
        raise KernelCompileError(f"NVRTC {what} failed: {message} ({status})")


def _program_log(lib: ctypes.CDLL, program: ctypes.c_void_p) -> str:
    size = ctypes.c_size_t()
    if lib.nvrtcGetProgramLogSize(program, ctypes.byref(size)) != 0 or size.value <= 1:
        return ""
    buffer = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(program, buffer)
    return buffer.value.decode(errors="replace")


def compile_program(source: str, arch: str, name_expressions: Sequence[str]) -> bytes:
    """Compile the instantiations ``name_expressions`` of the kernel source file ``source`` (a name
    in ``kernels/``, e.g. ``"gather.cu"``) for ``arch`` with NVRTC, with the options CuPy compiles
    them with on the GPU (:func:`dgl_zerocopy.cuda.kernel_source.nvrtc_options`: ours, CuPy's include
    paths, ``-ftz=true``, ``--device-as-default-execution-space``).

    Needs no GPU or driver; CuPy only for its include paths, where it is importable. Warnings in
    the log are logged at WARNING level.

    Args:
        source: the kernel source file, by its name in ``kernels/``.
        arch: ``"sm_XX"`` (``"XX"`` alone is accepted) for a cubin, as CuPy builds; or
            ``"compute_XX"`` for the PTX of that virtual architecture (to read which instructions
            the compiler chose). ``XX`` is one of :func:`supported_archs`.
        name_expressions: the template instantiations to compile.

    Returns:
        The cubin (``sm_XX``) or the PTX text (``compute_XX``), as bytes.

    Raises:
        ValueError: ``arch`` is not of the form ``sm_XX`` or ``compute_XX``, or the loaded NVRTC
            does not support it.
        FileNotFoundError: NVRTC is not installed.
        KernelCompileError: compilation failed; the message holds the NVRTC log.
    """
    match = _ARCH_PATTERN.match(arch) if isinstance(arch, str) else None
    if match is None:
        raise ValueError(f"arch must look like 'sm_80' or 'compute_80', but got {arch!r}")
    number, ptx = match.group(2), match.group(1) == "compute_"
    target = f"{'compute' if ptx else 'sm'}_{number}"
    names = tuple(name_expressions)
    lib = _nvrtc()
    supported = _supported_archs_of(lib)
    if f"sm_{number}" not in supported:
        major, minor = _version_of(lib)
        raise ValueError(
            f"sm_{number} is not supported by NVRTC {major}.{minor} ({find_nvrtc().source}: {find_nvrtc().path}); it compiles for {', '.join(supported)}"
        )
    program = ctypes.c_void_p()
    _nvrtc_call(lib, "nvrtcCreateProgram", lib.nvrtcCreateProgram(ctypes.byref(program), read_kernel(source).encode(), source.encode(), 0, None, None))
    try:
        for name in names:
            _nvrtc_call(lib, f"nvrtcAddNameExpression({name})", lib.nvrtcAddNameExpression(program, name.encode()))
        options = nvrtc_options(target)
        option_array = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        status = lib.nvrtcCompileProgram(program, len(options), option_array)
        log = _program_log(lib, program)
        if status != 0:
            message = lib.nvrtcGetErrorString(status).decode()
            raise KernelCompileError(f"NVRTC could not compile {source} for {target} ({message}):\n{log}")
        if log.strip():
            logger.warning("NVRTC log for %s:\n%s", target, log)
        for name in names:
            lowered = ctypes.c_char_p()
            _nvrtc_call(lib, f"nvrtcGetLoweredName({name})", lib.nvrtcGetLoweredName(program, name.encode(), ctypes.byref(lowered)))
        kind = "PTX" if ptx else "CUBIN"
        size = ctypes.c_size_t()
        _nvrtc_call(lib, f"nvrtcGet{kind}Size", getattr(lib, f"nvrtcGet{kind}Size")(program, ctypes.byref(size)))
        if size.value == 0:
            raise KernelCompileError(f"NVRTC produced an empty {kind.lower()} for {target}")
        code = ctypes.create_string_buffer(size.value)
        _nvrtc_call(lib, f"nvrtcGet{kind}", getattr(lib, f"nvrtcGet{kind}")(program, code))
        logger.debug("compiled %d kernels for %s (%d bytes of %s)", len(names), target, size.value, kind)
        return code.raw[: size.value - 1] if ptx else code.raw  # the PTX size counts its final NUL
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(program))


def preload_for_cupy(cupy: Any) -> None:
    """Load the NVRTC of CuPy's CUDA major before CuPy compiles (no-op where none is found)."""
    # CuPy 13 dlopens "libnvrtc.so.<its CUDA major>" by name, which only the dynamic linker's path
    # (LD_LIBRARY_PATH, ldconfig) answers: not the pip wheels. Once a library of that soname is
    # loaded here, the linker hands CuPy the same one. CuPy 14 finds the wheels itself
    # (cuda-pathfinder), and takes an NVRTC already loaded; loading the one of its major keeps
    # it from taking one of another major.
    try:
        major = int(cupy.cuda.get_local_runtime_version()) // 1000  # works without a driver
        chosen = choose_nvrtc(nvrtc_candidates(sys.path, os.environ), major)
        if chosen is None or chosen.major != major:
            logger.debug("no NVRTC %d in the pip wheels or toolkits; CuPy looks for it itself", major)
            return
        _open_nvrtc(chosen.path)
    except Exception as error:  # noqa: BLE001 - CuPy reports its own NVRTC error when it compiles
        logger.debug("NVRTC not preloaded for CuPy (%s)", error)
