"""GPU launcher of the gather kernels (``kernels/gather.cu``), and their NVRTC compile check.

:func:`launch_gather` copies raw rows; :func:`launch_decode` reads compressed rows (fp16, bf16,
int8 codes) and decodes them in the kernel. Both take an optional :class:`DeviceCache` (hot rows in
device memory, found through a slot map): the fused gather then reads hits from the cache and
misses from the host table, into the same output. The launch configuration comes from
:mod:`dgl_zerocopy.cuda.gather.gather_plan`, the same plan the CPU emulator runs.

CuPy is imported lazily, inside the functions that launch kernels, so this module imports on
machines without CUDA. :func:`compile_check` needs no GPU: it compiles every instantiation through
:mod:`dgl_zerocopy.cuda.nvrtc` (NVRTC through ctypes, with CuPy's options).

Also importable as ``dgl_zerocopy.kernels`` (``launch_gather``, ``compile_gather_module``,
``compile_check``, and the NVRTC names): that package holds the CUDA sources and re-exports these.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dgl_zerocopy.cuda.gather import gather_plan, id_sort, instantiations, sort_policy
from dgl_zerocopy.cuda.kernel_source import kernel_options, read_kernel
from dgl_zerocopy.cuda.nvrtc import compile_program, preload_for_cupy

__all__ = ["DeviceCache", "compile_check", "compile_gather_module", "cupy_stream", "launch_decode", "launch_gather"]

logger = logging.getLogger(__name__)

_MAIN_SOURCE = "gather.cu"


def _compile_options() -> tuple[str, ...]:
    # Ours only; CuPy adds its own (-ftz=true among them): kernel_source.nvrtc_options.
    return kernel_options()


def compile_check(arch: str, name_expressions: Sequence[str] | None = None) -> bytes:
    """Compile every gather instantiation for ``arch`` (e.g. ``"sm_70"``, ``"sm_90"``) with NVRTC:
    :func:`dgl_zerocopy.cuda.nvrtc.compile_program` of ``gather.cu``, with the instantiations
    ``name_expressions`` (default: all the launcher uses). Needs no GPU; same arguments, result
    and errors as ``compile_program``.
    """
    names = instantiations.all_name_expressions() if name_expressions is None else name_expressions
    return compile_program(_MAIN_SOURCE, arch, names)


# --------------------------------------------------------------------------- GPU launch (CuPy)


def _cupy() -> Any:
    try:
        import cupy
    except ImportError as error:  # CuPy missing or no CUDA libraries
        raise RuntimeError(
            "the zero-copy gather needs CuPy and a CUDA GPU: pip install dgl-zerocopy[cuda12] or dgl-zerocopy[cuda13], matching torch's CUDA"
        ) from error
    return cupy


@functools.cache
def compile_gather_module(device_id: int, name_expressions: tuple[str, ...] | None = None) -> Any:
    """The compiled ``cupy.RawModule`` of ``kernels/gather.cu`` for CUDA device ``device_id``,
    holding the instantiations ``name_expressions`` (default: all the launcher can use).

    Compiled once per device, names and process (memoized). The launcher compiles only the
    instantiation a launch needs: CuPy 13 keeps no disk cache for modules built with name
    expressions, so compiling all of them would cost every new process the whole set.
    """
    cupy = _cupy()
    preload_for_cupy(cupy)
    names = instantiations.all_name_expressions() if name_expressions is None else tuple(name_expressions)
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
    sort: bool | str = False,
    max_blocks: int | None = None,
    out_stride_bytes: int | None = None,
    cache: DeviceCache | None = None,
    threads_per_row: int | None = None,
    threads_per_block: int = 256,
    unchecked: bool = False,
) -> gather_plan.GatherPlan:
    """Enqueue ``out[j] = table[ids[j]]`` on ``stream`` (asynchronous; no synchronisation).

    The contract with the caller (``FeatureStore``, whose one id check runs before):
        * ``table_ptr`` is device-accessible: pinned and mapped host memory (UVA), or device memory.
        * every id is in ``[0, table_shape[0])``; the kernel does not check (an out-of-range id
          reads outside the table).
        * ``out`` is on the current CUDA device and stays alive until the stream has run the gather.

    Called directly, it checks the ids' type and shape and the cache's slot map on each call;
    ``unchecked=True`` skips those checks for a caller that made them (the zero-copy backend: ids
    already checked, int32/int64 on the current device, within ``[0, table_shape[0])``; a slot map
    checked when its cache was made).

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
            back to its original position through the inverse permutation; ``"auto"``: when the
            fitted link model says it pays for this batch (:mod:`~dgl_zerocopy.cuda.gather.sort_policy`).
            The ids are sorted on the stream over only the bits they need (:mod:`~dgl_zerocopy.cuda.gather.id_sort`).
        max_blocks: cap on the grid, to leave SMs to concurrent training.
        out_stride_bytes: bytes between output rows (default: the row bytes).
        cache: hot rows in device memory (aligned variant only): ``out[j]`` is then read from
            ``cache`` row ``slot_map[ids[j]]`` when that is >= 0, else from the table; the
            vector width also suits the cache rows' address and stride.
        threads_per_row: aligned variant: lanes per row (a power of two up to 32; None: the
            plan's choice), as for :func:`~dgl_zerocopy.cuda.gather.gather_plan.plan_gather`.
        threads_per_block: threads per block (a multiple of 32, at most 1024).
        unchecked: skip the checks of ``ids`` and of ``cache.slot_map`` (see above).

    Returns:
        The launch plan used (``grid == 0``: nothing was launched).

    Raises:
        TypeError: ids or slot map of a wrong type. ValueError: inconsistent sizes or a bad
            argument. RuntimeError: CuPy or CUDA unavailable.
    """
    if len(table_shape) < 1:
        raise ValueError(f"table_shape must have a row axis, but got {tuple(table_shape)}")
    row_bytes = int(itemsize) * math.prod(int(s) for s in table_shape[1:])

    plan = functools.partial(
        gather_plan.plan_gather,
        row_bytes,
        int(table_ptr),
        variant=variant,
        elem_size=int(itemsize),
        max_blocks=max_blocks,
        threads_per_block=threads_per_block,
        row_stride=int(row_stride_bytes),
        threads_per_row=threads_per_row,
    )
    return _enqueue(
        plan,
        int(table_ptr),
        int(row_stride_bytes),
        row_bytes,
        ids,
        out,
        stream=stream,
        sort=sort,
        out_stride_bytes=out_stride_bytes,
        cache=cache,
        table_rows=int(table_shape[0]),
        unchecked=unchecked,
    )


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
    sort: bool | str = False,
    max_blocks: int | None = None,
    out_stride_bytes: int | None = None,
    cache: DeviceCache | None = None,
    unchecked: bool = False,
) -> gather_plan.GatherPlan:
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
    ``dgl_zerocopy.store.compression.Codec.decode``.

    ``cache``: as for :func:`launch_gather`, its rows holding the table's *codes*; a hit is
    decoded exactly as a miss (with its row's (scale, offset) from ``cache.row_pairs_ptr`` when
    given, else from ``affine_ptr``). ``unchecked``: as for :func:`launch_gather`.

    Returns:
        The launch plan used (``grid == 0``: nothing was launched).

    Raises:
        TypeError: ids of a wrong type. ValueError: inconsistent sizes or a bad argument.
        RuntimeError: CuPy or CUDA unavailable.
    """
    if len(table_shape) != 2:
        raise ValueError(f"table_shape must be (rows, columns), but got {tuple(table_shape)}")
    if code not in instantiations.CODE_FORMATS:
        raise ValueError(f"code must be one of {tuple(instantiations.CODE_FORMATS)}, but got {code!r}")
    if out_format not in instantiations.OUT_FORMATS:
        raise ValueError(f"out_format must be one of {tuple(instantiations.OUT_FORMATS)}, but got {out_format!r}")
    columns = int(table_shape[1])

    plan = functools.partial(
        gather_plan.plan_decode,
        columns,
        int(table_ptr),
        code=code,
        out_format=out_format,
        affine=affine,
        max_blocks=max_blocks,
        row_stride=int(row_stride_bytes),
    )
    out_row_bytes = columns * instantiations.OUT_FORMATS[out_format][1]
    return _enqueue(
        plan,
        int(table_ptr),
        int(row_stride_bytes),
        out_row_bytes,
        ids,
        out,
        stream=stream,
        sort=sort,
        out_stride_bytes=out_stride_bytes,
        affine_ptr=int(affine_ptr),
        cache=cache,
        table_rows=int(table_shape[0]),
        unchecked=unchecked,
    )


def _slot_map_array(cupy: Any, cache: DeviceCache, table_rows: int) -> Any:
    """The cache's slot map as a CuPy array, checked (without touching its values)."""
    slot_map = cupy.asarray(cache.slot_map)
    if slot_map.ndim != 1 or slot_map.dtype not in (cupy.dtype("int32"), cupy.dtype("int64")):
        raise TypeError(f"the cache's slot_map must be a 1-D int32 or int64 device array, but got dtype {slot_map.dtype} and shape {slot_map.shape}")
    if slot_map.size != table_rows or not slot_map.flags.c_contiguous:
        raise ValueError(
            f"the cache's slot_map must be contiguous with one entry per table row ({table_rows}), but has "
            f"{slot_map.size} entries{'' if slot_map.flags.c_contiguous else ' and is strided'}"
        )
    return slot_map


def _enqueue(
    plan_for,
    table_ptr: int,
    row_stride: int,
    out_row_bytes: int,
    ids: Any,
    out: Any,
    *,
    stream: Any,
    sort: bool | str,
    out_stride_bytes: int | None,
    affine_ptr: int = 0,
    cache: DeviceCache | None = None,
    table_rows: int = 0,
    unchecked: bool = False,
) -> gather_plan.GatherPlan:
    """Validate ids, out and the cache (ids and slot map not when ``unchecked``), plan (``plan_for(num_ids,
    id_bytes=, out_address=, out_stride=, num_sms=, **cache_layout)``), sort if asked, and launch; everything on ``stream``."""
    sort_policy.check_sort(sort)
    cupy = _cupy()
    if stream is not None:
        stream = cupy_stream(cupy, stream, int(cupy.cuda.runtime.getDevice()))
    out_stride = out_row_bytes if out_stride_bytes is None else int(out_stride_bytes)
    # Everything below is enqueued on the gather's stream, including id copies and sorting.
    # Temporaries are allocated there too: CuPy's pool reuses them only on that stream, after
    # the kernel, so dropping them on return is safe.
    with stream if stream is not None else contextlib.nullcontext():
        ids = cupy.asarray(ids)
        if not unchecked and (ids.ndim != 1 or ids.dtype not in (cupy.dtype("int32"), cupy.dtype("int64"))):
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
                raise ValueError(f"out must hold {needed} bytes for {num_ids} rows of {out_row_bytes} bytes, but has {out_nbytes}")
        cache_plan: dict[str, int] = {}
        cache_args: dict[str, int] = {}
        if cache is not None:
            slot_map = cupy.asarray(cache.slot_map) if unchecked else _slot_map_array(cupy, cache, table_rows)
            cache_plan = dict(cache_address=int(cache.rows_ptr), cache_stride=int(cache.row_stride_bytes), slot_bytes=slot_map.dtype.itemsize)
            cache_args = dict(
                slot_map_address=int(slot_map.data.ptr),
                cache_address=int(cache.rows_ptr),
                cache_stride=int(cache.row_stride_bytes),
                cache_affine_address=int(cache.row_pairs_ptr),
            )
        device_id = int(cupy.cuda.runtime.getDevice())
        plan = plan_for(num_ids, id_bytes=ids.dtype.itemsize, out_address=out_ptr, out_stride=out_stride, num_sms=_num_sms(device_id), **cache_plan)
        if plan.grid == 0:
            return plan
        kernel = _kernel(device_id, plan.kernel)
        perm_ptr = 0
        if sort_policy.resolve_sort(sort, plan, table_rows * row_stride):
            ids, perm = id_sort.sort_for_gather(ids, table_rows)  # on the stream; dropped after the launch (see above)
            perm_ptr = int(perm.data.ptr)
        args = gather_plan.kernel_arguments(
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
