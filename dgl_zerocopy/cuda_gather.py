"""GPU launcher of the gather kernels (``kernels/gather.cu``) and their NVRTC compile check.

CuPy is imported lazily, inside the functions that launch kernels, so this module imports on
machines without CUDA. :func:`compile_check` needs no GPU and no CuPy: it drives NVRTC through
ctypes, from the ``nvidia-cuda-nvrtc-cu12`` pip package that the torch wheel already installs.

Also importable as ``dgl_zerocopy.kernels`` (``launch_gather``, ``compile_gather_module``,
``compile_check``): that package holds the CUDA sources and re-exports these names.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
import importlib.util
import logging
import math
import os
import re
from collections.abc import Sequence
from typing import Any

from dgl_zerocopy import launch
from dgl_zerocopy.kernel_source import kernel_dir, kernel_sources_digest, read_kernel

__all__ = [
    "KernelCompileError",
    "compile_check",
    "compile_gather_module",
    "cupy_stream",
    "launch_gather",
    "nvrtc_library_path",
    "nvrtc_version",
]

logger = logging.getLogger(__name__)

_MAIN_SOURCE = "gather.cu"
_ARCH_PATTERN = re.compile(r"^(?:sm_)?(\d{2,3})$")


class KernelCompileError(RuntimeError):
    """A kernel failed to compile; the message holds the compiler log."""


def _compile_options() -> tuple[str, ...]:
    # The digest define makes every compile cache key (CuPy keys on source text and options)
    # change when an included header changes, not only the main source.
    return (
        "--std=c++17",
        f"--include-path={kernel_dir()}",
        f"-DZC_KERNEL_DIGEST=0x{kernel_sources_digest()[:15]}",
    )


# --------------------------------------------------------------------------- NVRTC (no GPU)


def nvrtc_library_path() -> str:
    """Path of ``libnvrtc.so.12`` from the ``nvidia-cuda-nvrtc-cu12`` pip package.

    Raises:
        FileNotFoundError: the package (or its library) is not installed.
    """
    try:
        spec = importlib.util.find_spec("nvidia.cuda_nvrtc")
    except ModuleNotFoundError:  # no "nvidia" namespace at all
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the pip package nvidia-cuda-nvrtc-cu12 is not installed (torch's CUDA wheel brings "
            "it; or `pip install nvidia-cuda-nvrtc-cu12`)"
        )
    for location in spec.submodule_search_locations:
        found = sorted(glob.glob(os.path.join(location, "lib", "libnvrtc.so*")))
        found = [path for path in found if "builtins" not in os.path.basename(path)]
        if found:
            return found[0]
    raise FileNotFoundError(
        f"nvidia-cuda-nvrtc-cu12 is installed at {list(spec.submodule_search_locations)} but has "
        "no lib/libnvrtc.so*"
    )


@functools.cache
def _nvrtc() -> ctypes.CDLL:
    path = nvrtc_library_path()
    # libnvrtc dlopens libnvrtc-builtins by name at compile time; load it first from the same
    # folder so that the lookup succeeds without LD_LIBRARY_PATH.
    for builtins in sorted(glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so*"))):
        ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(path)
    p, c = ctypes.c_void_p, ctypes.c_char_p
    lib.nvrtcGetErrorString.restype = c
    lib.nvrtcGetErrorString.argtypes = [ctypes.c_int]
    lib.nvrtcVersion.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)]
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
    return lib


def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the NVRTC library :func:`compile_check` uses.

    Raises:
        OSError: NVRTC is not installed or cannot be loaded.
    """
    lib = _nvrtc()
    major, minor = ctypes.c_int(), ctypes.c_int()
    status = lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    if status != 0:
        raise OSError(f"nvrtcVersion failed with status {status}")
    return major.value, minor.value


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


def compile_check(arch: str, name_expressions: Sequence[str] | None = None) -> None:
    """Compile every gather instantiation for ``arch`` (e.g. ``"sm_70"``, ``"sm_90"``) with NVRTC.

    Needs no GPU, driver or CuPy. Warnings in the log are logged at WARNING level.

    Args:
        arch: target architecture, ``"sm_XX"`` (``"XX"`` alone is accepted).
        name_expressions: instantiations to compile (default: all the launcher uses).

    Raises:
        ValueError: ``arch`` is not of the form ``sm_XX``.
        FileNotFoundError: NVRTC is not installed.
        KernelCompileError: compilation failed; the message holds the NVRTC log.
    """
    match = _ARCH_PATTERN.match(arch) if isinstance(arch, str) else None
    if match is None:
        raise ValueError(f"arch must look like 'sm_80', but got {arch!r}")
    names = tuple(launch.all_name_expressions() if name_expressions is None else name_expressions)
    lib = _nvrtc()
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
        options = [*_compile_options(), f"--gpu-architecture=sm_{match.group(1)}"]
        option_array = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        status = lib.nvrtcCompileProgram(program, len(options), option_array)
        log = _program_log(lib, program)
        if status != 0:
            message = lib.nvrtcGetErrorString(status).decode()
            raise KernelCompileError(
                f"NVRTC could not compile {_MAIN_SOURCE} for sm_{match.group(1)} "
                f"({message}):\n{log}"
            )
        if log.strip():
            logger.warning("NVRTC log for sm_%s:\n%s", match.group(1), log)
        for name in names:
            lowered = ctypes.c_char_p()
            _nvrtc_call(
                lib,
                f"nvrtcGetLoweredName({name})",
                lib.nvrtcGetLoweredName(program, name.encode(), ctypes.byref(lowered)),
            )
        cubin_size = ctypes.c_size_t()
        _nvrtc_call(
            lib, "nvrtcGetCUBINSize", lib.nvrtcGetCUBINSize(program, ctypes.byref(cubin_size))
        )
        if cubin_size.value == 0:
            raise KernelCompileError(f"NVRTC produced an empty cubin for sm_{match.group(1)}")
        logger.debug(
            "compiled %d kernels for sm_%s (%d-byte cubin)",
            len(names),
            match.group(1),
            cubin_size.value,
        )
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(program))


# --------------------------------------------------------------------------- GPU launch (CuPy)


def _cupy() -> Any:
    try:
        import cupy
    except ImportError as error:  # cupy-cuda12x missing or no CUDA libraries
        raise RuntimeError(
            "the zero-copy gather needs CuPy (pip package cupy-cuda12x) and a CUDA GPU"
        ) from error
    return cupy


def _load_nvrtc_for_cupy() -> None:
    # CuPy 13 dlopens "libnvrtc.so.12" by name; on machines with a driver but no CUDA toolkit only
    # the pip package has it. Once loaded here, the dynamic linker hands CuPy the same library.
    try:
        _nvrtc()
    except OSError as error:
        logger.debug("NVRTC pip package not loaded (%s); CuPy will look for a CUDA toolkit", error)


@functools.cache
def compile_gather_module(device_id: int, name_expressions: tuple[str, ...] | None = None) -> Any:
    """The compiled ``cupy.RawModule`` of ``kernels/gather.cu`` for CUDA device ``device_id``,
    holding the instantiations ``name_expressions`` (default: all the launcher can use).

    Compiled once per device, names and process (memoized). The launcher compiles only the
    instantiation a launch needs: CuPy 13 keeps no disk cache for modules built with name
    expressions, so compiling all of them would cost every new process the whole set.
    """
    cupy = _cupy()
    _load_nvrtc_for_cupy()
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

    Returns:
        The launch plan used (``grid == 0``: nothing was launched).

    Raises:
        TypeError: ids of a wrong type. ValueError: inconsistent sizes or a bad argument.
        RuntimeError: CuPy or CUDA unavailable.
    """
    cupy = _cupy()
    if len(table_shape) < 1:
        raise ValueError(f"table_shape must have a row axis, but got {tuple(table_shape)}")
    if stream is not None:
        stream = cupy_stream(cupy, stream, int(cupy.cuda.runtime.getDevice()))
    row_bytes = int(itemsize) * math.prod(int(s) for s in table_shape[1:])
    out_stride = row_bytes if out_stride_bytes is None else int(out_stride_bytes)
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
            needed = (num_ids - 1) * out_stride + row_bytes if num_ids else 0
            if out_nbytes < needed:
                raise ValueError(
                    f"out must hold {needed} bytes for {num_ids} rows of {row_bytes} bytes, but "
                    f"has {out_nbytes}"
                )
        device_id = int(cupy.cuda.runtime.getDevice())
        plan = launch.plan_gather(
            row_bytes,
            int(table_ptr),
            num_ids,
            variant=variant,
            elem_size=int(itemsize),
            max_blocks=max_blocks,
            num_sms=_num_sms(device_id),
            id_bytes=ids.dtype.itemsize,
            row_stride=int(row_stride_bytes),
            out_address=out_ptr,
            out_stride=out_stride,
        )
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
            table_address=int(table_ptr),
            row_stride=int(row_stride_bytes),
            ids_address=int(ids.data.ptr),
            perm_address=perm_ptr,
            out_address=out_ptr,
            out_stride=out_stride,
        )
        logger.debug("launch %s grid=%d block=%d", plan.kernel, plan.grid, plan.block)
        kernel((plan.grid,), (plan.block,), tuple(_argument(kind, value) for kind, value in args))
    return plan
