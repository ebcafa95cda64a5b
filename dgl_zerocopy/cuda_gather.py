"""GPU launcher of the gather kernels (``kernels/gather.cu``) and their NVRTC compile check.

:func:`launch_gather` copies raw rows; :func:`launch_decode` reads compressed rows (fp16, bf16,
int8 codes) and decodes them in the kernel. Both take an optional :class:`DeviceCache` (hot rows in
device memory, found through a slot map): the fused gather then reads hits from the cache and
misses from the host table, into the same output.

CuPy is imported lazily, inside the functions that launch kernels, so this module imports on
machines without CUDA. :func:`compile_check` needs no GPU: it drives NVRTC through ctypes, found
by :func:`find_nvrtc` (the CUDA 12 or 13 pip wheels that torch's CUDA builds install, a CUDA
toolkit, or CuPy's own lookup), with the options CuPy passes on the GPU (``-ftz=true`` among them).

Also importable as ``dgl_zerocopy.kernels`` (``launch_gather``, ``compile_gather_module``,
``compile_check``): that package holds the CUDA sources and re-exports these names.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
import logging
import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dgl_zerocopy import launch
from dgl_zerocopy.kernel_source import kernel_options, nvrtc_options, read_kernel

__all__ = [
    "DeviceCache",
    "KernelCompileError",
    "NvrtcLibrary",
    "choose_nvrtc",
    "compile_check",
    "compile_gather_module",
    "cupy_stream",
    "default_archs",
    "find_nvrtc",
    "launch_decode",
    "launch_gather",
    "nvrtc_candidates",
    "nvrtc_library_path",
    "nvrtc_version",
    "supported_archs",
]

logger = logging.getLogger(__name__)

_MAIN_SOURCE = "gather.cu"
_ARCH_PATTERN = re.compile(r"^(sm_|compute_)?(\d{2,3})$")


class KernelCompileError(RuntimeError):
    """A kernel failed to compile; the message holds the compiler log."""


def _compile_options() -> tuple[str, ...]:
    # Ours only; CuPy adds its own (-ftz=true among them): kernel_source.nvrtc_options.
    return kernel_options()


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


def nvrtc_candidates(search_path: Sequence[str], environ: Mapping[str, str],
                     default_toolkit: str = TOOLKIT_DEFAULT) -> list[NvrtcLibrary]:
    """Every NVRTC library in the file layouts, in search order, each real file once (first wins).

    1. pip wheels, for each folder of ``search_path`` (``sys.path``): ``nvidia/cuda_nvrtc/lib``
       (CUDA 12: ``nvidia-cuda-nvrtc-cu12``), then ``nvidia/cu13/lib`` (CUDA 13:
       ``nvidia-cuda-nvrtc`` 13, which torch's ``cuda-toolkit[nvrtc]`` brings);
    2. CUDA toolkits: ``$CUDA_PATH``, ``$CUDA_HOME``, then ``default_toolkit`` (``/usr/local/cuda``),
       each at ``lib64``, ``lib`` and ``targets/*/lib``.

    Reads only directory listings (no library is loaded), so tests can pass fake trees.
    """
    folders = [(source, os.path.join(entry, layout)) for entry in search_path if entry
               for source, layout in PIP_LAYOUTS]
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
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]


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
                return NvrtcLibrary(loaded.abs_path, int(match.group(1)),
                                    f"CuPy's lookup (cuda-pathfinder: {loaded.found_via})"), tried
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
    lib.nvrtcCreateProgram.argtypes = [
        ctypes.POINTER(p),
        c,
        c,
        ctypes.c_int,
        ctypes.POINTER(c),
        ctypes.POINTER(c),
    ]
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


def compile_check(arch: str, name_expressions: Sequence[str] | None = None) -> bytes:
    """Compile every gather instantiation for ``arch`` (e.g. ``"sm_70"``, ``"sm_90"``) with NVRTC,
    with the options CuPy compiles them with on the GPU (:func:`dgl_zerocopy.kernel_source.nvrtc_options`:
    ours, CuPy's include paths, ``-ftz=true``, ``--device-as-default-execution-space``).

    Needs no GPU or driver; CuPy only for its include paths, where it is importable. Warnings in
    the log are logged at WARNING level.

    Args:
        arch: ``"sm_XX"`` (``"XX"`` alone is accepted) for a cubin, as CuPy builds; or
            ``"compute_XX"`` for the PTX of that virtual architecture (to read which instructions
            the compiler chose). ``XX`` is one of :func:`supported_archs`.
        name_expressions: instantiations to compile (default: all the launcher uses).

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
    names = tuple(launch.all_name_expressions() if name_expressions is None else name_expressions)
    lib = _nvrtc()
    supported = _supported_archs_of(lib)
    if f"sm_{number}" not in supported:
        major, minor = _version_of(lib)
        raise ValueError(
            f"sm_{number} is not supported by NVRTC {major}.{minor} ({find_nvrtc().source}: "
            f"{find_nvrtc().path}); it compiles for {', '.join(supported)}"
        )
    program = ctypes.c_void_p()
    _nvrtc_call(
        lib,
        "nvrtcCreateProgram",
        lib.nvrtcCreateProgram(
            ctypes.byref(program),
            read_kernel(_MAIN_SOURCE).encode(),
            _MAIN_SOURCE.encode(),
            0,
            None,
            None,
        ),
    )
    try:
        for name in names:
            _nvrtc_call(
                lib,
                f"nvrtcAddNameExpression({name})",
                lib.nvrtcAddNameExpression(program, name.encode()),
            )
        options = nvrtc_options(target)
        option_array = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        status = lib.nvrtcCompileProgram(program, len(options), option_array)
        log = _program_log(lib, program)
        if status != 0:
            message = lib.nvrtcGetErrorString(status).decode()
            raise KernelCompileError(f"NVRTC could not compile {_MAIN_SOURCE} for {target} ({message}):\n{log}")
        if log.strip():
            logger.warning("NVRTC log for %s:\n%s", target, log)
        for name in names:
            lowered = ctypes.c_char_p()
            _nvrtc_call(
                lib,
                f"nvrtcGetLoweredName({name})",
                lib.nvrtcGetLoweredName(program, name.encode(), ctypes.byref(lowered)),
            )
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


# --------------------------------------------------------------------------- GPU launch (CuPy)


def _cupy() -> Any:
    try:
        import cupy
    except ImportError as error:  # CuPy missing or no CUDA libraries
        raise RuntimeError(
            "the zero-copy gather needs CuPy and a CUDA GPU: pip install dgl-zerocopy[cuda12] or "
            "dgl-zerocopy[cuda13], matching torch's CUDA"
        ) from error
    return cupy


def _load_nvrtc_for_cupy(cupy: Any) -> None:
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


@functools.cache
def compile_gather_module(device_id: int, name_expressions: tuple[str, ...] | None = None) -> Any:
    """The compiled ``cupy.RawModule`` of ``kernels/gather.cu`` for CUDA device ``device_id``,
    holding the instantiations ``name_expressions`` (default: all the launcher can use).

    Compiled once per device, names and process (memoized). The launcher compiles only the
    instantiation a launch needs: CuPy 13 keeps no disk cache for modules built with name
    expressions, so compiling all of them would cost every new process the whole set.
    """
    cupy = _cupy()
    _load_nvrtc_for_cupy(cupy)
    names = launch.all_name_expressions() if name_expressions is None else tuple(name_expressions)
    with cupy.cuda.Device(device_id):
        module = cupy.RawModule(code=read_kernel(_MAIN_SOURCE), options=_compile_options(), name_expressions=names)
        module.compile()
    logger.info("compiled %d kernel(s) of %s for CUDA device %d", len(names), _MAIN_SOURCE, device_id)
    return module


@functools.cache
def _kernel(device_id: int, name: str) -> Any:
    cupy = _cupy()
    with cupy.cuda.Device(device_id):
        return compile_gather_module(device_id, (name,)).get_function(name)


class _StreamHandle:
    """A raw ``cudaStream_t`` in the CUDA stream protocol that ``cupy.cuda.Stream.from_external`` reads."""

    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)  # (protocol version, stream address)


def cupy_stream(cupy: Any, stream: Any, device_id: int) -> Any:
    """``stream`` as a CuPy stream: a CuPy stream is returned as is; a ``torch.cuda.Stream`` (or
    anything with a ``cuda_stream`` handle) is wrapped without copying or synchronising.

    CuPy 14 deprecates ``ExternalStream`` for ``Stream.from_external``; CuPy 13 has only the former.
    """
    if isinstance(stream, (cupy.cuda.Stream, cupy.cuda.ExternalStream)):
        return stream
    handle = getattr(stream, "cuda_stream", None)
    if not isinstance(handle, int):
        raise TypeError(f"stream must be a torch.cuda.Stream or a CuPy stream, but got {type(stream).__name__}")
    from_external = getattr(cupy.cuda.Stream, "from_external", None)
    if from_external is not None:
        return from_external(_StreamHandle(handle))
    return cupy.cuda.ExternalStream(handle, device_id)


@functools.cache
def _num_sms(device_id: int) -> int:
    return int(_cupy().cuda.Device(device_id).attributes["MultiProcessorCount"])


def _argument(kind: str, value: int) -> Any:
    import numpy as np

    return {"ptr": np.uint64, "i64": np.int64, "i32": np.int32}[kind](value)


def _device_buffer(cupy: Any, array: Any) -> tuple[int, int]:
    """(address, bytes) of a C-contiguous device array: a torch CUDA tensor or a CuPy array."""
    if hasattr(array, "data_ptr") and hasattr(array, "element_size"):
        # torch tensors directly: their __cuda_array_interface__ refuses bfloat16.
        if not array.is_cuda or not array.is_contiguous():
            raise ValueError("out must be a contiguous CUDA tensor")
        return int(array.data_ptr()), array.numel() * array.element_size()
    array = cupy.asarray(array)
    if not array.flags.c_contiguous:
        raise ValueError("out must be C-contiguous")
    return int(array.data.ptr), int(array.nbytes)


@dataclass(frozen=True)
class DeviceCache:
    """A hot-row cache in device memory, as the fused gather reads it (``zc_row_source`` in
    ``kernels/gather.cu``). The caller keeps all of it alive until the stream has run the gather.

    Attributes:
        rows_ptr: address of the cached rows' first row (device memory); each row laid out like a
            table row (for a compressed table: the same codes).
        row_stride_bytes: bytes between cached rows (``>=`` the row's bytes).
        slot_map: 1-D C-contiguous int32 or int64 device array (CuPy, or anything with
            ``__cuda_array_interface__``), one entry per table row: its slot (row of the cache) or
            -1. Every slot must be -1 or a valid cache row: the kernel does not check.
        row_pairs_ptr: int8 codes with per-row (scale, offset) only: the cached rows' float32
            pairs, one per slot, in device memory (0: hits read their pair from host memory, one
            PCIe request each).
    """

    rows_ptr: int
    row_stride_bytes: int
    slot_map: Any
    row_pairs_ptr: int = 0


def launch_gather(
    table_ptr: int,
    table_shape: Sequence[int],
    itemsize: int,
    row_stride_bytes: int,
    ids: Any,
    out: Any,
    *,
    stream: Any = None,
    variant: str = "aligned",
    sort: bool = False,
    max_blocks: int | None = None,
    out_stride_bytes: int | None = None,
    cache: DeviceCache | None = None,
) -> launch.GatherPlan:
    """Enqueue ``out[j] = table[ids[j]]`` on ``stream`` (asynchronous; no synchronisation).

    The contract with the caller (``FeatureStore``), which validates in public:
        * ``table_ptr`` is device-accessible: pinned and mapped host memory (UVA), or device memory.
        * every id is in ``[0, table_shape[0])``; the kernel does not check (an out-of-range id
          reads outside the table).
        * ``out`` is on the current CUDA device and stays alive until the stream has run the gather.

    Args:
        table_ptr: address of the table's first row.
        table_shape: table shape, rows first; a row is ``prod(table_shape[1:])`` elements.
        itemsize: bytes per element.
        row_stride_bytes: bytes between table rows (``>= row bytes``).
        ids: 1-D int32 or int64 device array (CuPy, or anything with
            ``__cuda_array_interface__``, e.g. a CUDA torch tensor).
        out: output address (int), or a C-contiguous device array of at least
            ``len(ids) * row bytes`` bytes.
        stream: a ``torch.cuda.Stream`` or a CuPy stream (None: CuPy's current stream).
        variant: ``"aligned"`` or ``"naive"``.
        sort: gather in sorted id order (better locality on the host side) and write each row
            back to its original position through the inverse permutation.
        max_blocks: cap on the grid, to leave SMs to concurrent training.
        out_stride_bytes: bytes between output rows (default: the row bytes).
        cache: hot rows in device memory (aligned variant only): ``out[j]`` is then read from
            ``cache`` row ``slot_map[ids[j]]`` when that is >= 0, else from the table; the
            vector width also suits the cache rows' address and stride.

    Returns:
        The launch plan used (``grid == 0``: nothing was launched).

    Raises:
        TypeError: ids or slot map of a wrong type. ValueError: inconsistent sizes or a bad
            argument. RuntimeError: CuPy or CUDA unavailable.
    """
    if len(table_shape) < 1:
        raise ValueError(f"table_shape must have a row axis, but got {tuple(table_shape)}")
    row_bytes = int(itemsize) * math.prod(int(s) for s in table_shape[1:])

    def plan(num_ids: int, id_bytes: int, out_address: int, out_stride: int, num_sms: int, **cached) -> launch.GatherPlan:
        return launch.plan_gather(row_bytes, int(table_ptr), num_ids, variant=variant, elem_size=int(itemsize),
                                  max_blocks=max_blocks, num_sms=num_sms, id_bytes=id_bytes,
                                  row_stride=int(row_stride_bytes), out_address=out_address, out_stride=out_stride,
                                  **cached)

    return _enqueue(plan, int(table_ptr), int(row_stride_bytes), row_bytes, ids, out, stream=stream, sort=sort,
                    out_stride_bytes=out_stride_bytes, cache=cache, table_rows=int(table_shape[0]))


def launch_decode(
    table_ptr: int,
    table_shape: Sequence[int],
    code: str,
    row_stride_bytes: int,
    ids: Any,
    out: Any,
    *,
    out_format: str = "float32",
    affine: str | None = None,
    affine_ptr: int = 0,
    stream: Any = None,
    sort: bool = False,
    max_blocks: int | None = None,
    out_stride_bytes: int | None = None,
    cache: DeviceCache | None = None,
) -> launch.GatherPlan:
    """Enqueue ``out[j] = decode(table[ids[j]])`` on ``stream``: the compressed rows are read
    over PCIe with the aligned scheme and decoded in registers (``gather_decode``,
    ``kernels/gather.cu``). Asynchronous; the contract is :func:`launch_gather`'s, and:

        * the table holds ``code`` codes (``"fp16"``, ``"bf16"``: 2 bytes; ``"int8"``: 1 byte),
          ``table_shape`` is ``(rows, columns)`` and ``row_stride_bytes`` counts code bytes;
        * for ``"int8"``, ``affine`` is ``"column"`` or ``"row"`` and ``affine_ptr`` points at
          float32 (scale, offset) pairs, one per column or one per table row, device-accessible
          (device memory, or pinned and mapped host memory) until the stream has run the gather;
        * ``out`` holds ``len(ids)`` rows of ``columns`` elements of ``out_format``
          (``"float32"``, ``"float16"``, ``"bfloat16"``).

    Decoding: ``x = float(code)`` (fp16, bf16) or ``float(code) * scale + offset`` (int8), in
    float32, rounded to nearest-even into ``out_format``: equal to
    ``dgl_zerocopy.compression.Codec.decode``.

    ``cache``: as for :func:`launch_gather`, its rows holding the table's *codes*; a hit is
    decoded exactly as a miss (with its row's (scale, offset) from ``cache.row_pairs_ptr`` when
    given, else from ``affine_ptr``).

    Returns:
        The launch plan used (``grid == 0``: nothing was launched).

    Raises:
        TypeError: ids of a wrong type. ValueError: inconsistent sizes or a bad argument.
        RuntimeError: CuPy or CUDA unavailable.
    """
    if len(table_shape) != 2:
        raise ValueError(f"table_shape must be (rows, columns), but got {tuple(table_shape)}")
    if code not in launch.CODE_FORMATS:
        raise ValueError(f"code must be one of {tuple(launch.CODE_FORMATS)}, but got {code!r}")
    if out_format not in launch.OUT_FORMATS:
        raise ValueError(f"out_format must be one of {tuple(launch.OUT_FORMATS)}, but got {out_format!r}")
    columns = int(table_shape[1])

    def plan(num_ids: int, id_bytes: int, out_address: int, out_stride: int, num_sms: int, **cached) -> launch.GatherPlan:
        return launch.plan_decode(columns, int(table_ptr), num_ids, code=code, out_format=out_format, affine=affine,
                                  max_blocks=max_blocks, num_sms=num_sms, id_bytes=id_bytes,
                                  row_stride=int(row_stride_bytes), out_address=out_address, out_stride=out_stride,
                                  **cached)

    out_row_bytes = columns * launch.OUT_FORMATS[out_format][1]
    return _enqueue(plan, int(table_ptr), int(row_stride_bytes), out_row_bytes, ids, out, stream=stream, sort=sort,
                    out_stride_bytes=out_stride_bytes, affine_ptr=int(affine_ptr), cache=cache,
                    table_rows=int(table_shape[0]))


def _slot_map_array(cupy: Any, cache: DeviceCache, table_rows: int) -> Any:
    """The cache's slot map as a CuPy array, checked (without touching its values)."""
    slot_map = cupy.asarray(cache.slot_map)
    if slot_map.ndim != 1 or slot_map.dtype not in (cupy.dtype("int32"), cupy.dtype("int64")):
        raise TypeError(f"the cache's slot_map must be a 1-D int32 or int64 device array, but got dtype {slot_map.dtype} "
                        f"and shape {slot_map.shape}")
    if slot_map.size != table_rows or not slot_map.flags.c_contiguous:
        raise ValueError(f"the cache's slot_map must be contiguous with one entry per table row ({table_rows}), but has "
                         f"{slot_map.size} entries{'' if slot_map.flags.c_contiguous else ' and is strided'}")
    return slot_map


def _enqueue(plan_for, table_ptr: int, row_stride: int, out_row_bytes: int, ids: Any, out: Any, *, stream: Any,
             sort: bool, out_stride_bytes: int | None, affine_ptr: int = 0, cache: DeviceCache | None = None,
             table_rows: int = 0) -> launch.GatherPlan:
    """Validate ids, out and the cache, plan (``plan_for(num_ids, id_bytes, out_address, out_stride,
    num_sms, **cache_layout)``), sort if asked, and launch; everything on ``stream``."""
    cupy = _cupy()
    if stream is not None:
        stream = cupy_stream(cupy, stream, int(cupy.cuda.runtime.getDevice()))
    out_stride = out_row_bytes if out_stride_bytes is None else int(out_stride_bytes)
    # Everything below is enqueued on the gather's stream, including id copies and sorting.
    # Temporaries are allocated there too: CuPy's pool reuses them only on that stream, after
    # the kernel, so dropping them on return is safe.
    with stream if stream is not None else contextlib.nullcontext():
        ids = cupy.asarray(ids)
        if ids.ndim != 1 or ids.dtype not in (cupy.dtype("int32"), cupy.dtype("int64")):
            raise TypeError(
                f"ids must be a 1-D int32 or int64 device array, but got dtype {ids.dtype} and "
                f"shape {ids.shape}; convert with ids.to(torch.int64) or ids.astype(cupy.int64)"
            )
        ids = cupy.ascontiguousarray(ids)
        num_ids = int(ids.size)
        if isinstance(out, int):
            out_ptr = out
        else:
            out_ptr, out_nbytes = _device_buffer(cupy, out)
            needed = (num_ids - 1) * out_stride + out_row_bytes if num_ids else 0
            if out_nbytes < needed:
                raise ValueError(
                    f"out must hold {needed} bytes for {num_ids} rows of {out_row_bytes} bytes, but "
                    f"has {out_nbytes}"
                )
        cache_plan: dict[str, int] = {}
        cache_args: dict[str, int] = {}
        if cache is not None:
            slot_map = _slot_map_array(cupy, cache, table_rows)
            cache_plan = dict(cache_address=int(cache.rows_ptr), cache_stride=int(cache.row_stride_bytes),
                              slot_bytes=slot_map.dtype.itemsize)
            cache_args = dict(slot_map_address=int(slot_map.data.ptr), cache_address=int(cache.rows_ptr),
                              cache_stride=int(cache.row_stride_bytes), cache_affine_address=int(cache.row_pairs_ptr))
        device_id = int(cupy.cuda.runtime.getDevice())
        plan = plan_for(num_ids, ids.dtype.itemsize, out_ptr, out_stride, _num_sms(device_id), **cache_plan)
        if plan.grid == 0:
            return plan
        kernel = _kernel(device_id, plan.kernel)
        perm_ptr = 0
        if sort:
            perm = cupy.argsort(ids).astype(cupy.int64, copy=False)
            ids = ids[perm]
            perm_ptr = int(perm.data.ptr)
        args = launch.kernel_arguments(
            plan,
            table_address=table_ptr,
            row_stride=row_stride,
            ids_address=int(ids.data.ptr),
            perm_address=perm_ptr,
            out_address=out_ptr,
            out_stride=out_stride,
            affine_address=affine_ptr,
            **cache_args,
        )
        logger.debug("launch %s grid=%d block=%d", plan.kernel, plan.grid, plan.block)
        kernel((plan.grid,), (plan.block,), tuple(_argument(kind, value) for kind, value in args))
    return plan
