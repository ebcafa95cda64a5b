"""Run the CUDA gather kernels on the CPU, to test them and model their PCIe traffic without a GPU.

``kernels/gather.cu`` is compiled unchanged by g++ (:mod:`dgl_zerocopy.cuda.gather.emulator_build`)
and run on the launch configuration of :func:`dgl_zerocopy.cuda.gather.gather_plan.plan_gather`, exactly
as on the GPU. With ``trace=True`` every table load is recorded (address, bytes, warp, load site)
for :mod:`dgl_zerocopy.cuda.gather.pcie_model`. :func:`emulate_gather` runs the raw-copy kernels,
:func:`emulate_decode` the decoding gather of compressed rows (fp16, bf16, int8 codes). Both take an
optional hot-row cache (``cache_rows`` and ``slot_map``): the fused hit/miss gather, hits read from
a separate buffer that stands for device memory (the trace marks which loads were host reads).

The emulation is faithful for kernels whose threads do not communicate (no ``__syncthreads``, no
shuffles): threads run one after another, so it checks results and addresses, not timing or races.
Float arithmetic follows the GPU's compile options: where they flush subnormals to zero (CuPy's
``-ftz=true``), the shim's ``__fmul_rn``/``__fadd_rn`` flush too (:func:`~dgl_zerocopy.cuda.gather.emulator_build.float_op`).
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
from dataclasses import dataclass

import numpy as np

from dgl_zerocopy.cuda.gather import gather_plan, instantiations
from dgl_zerocopy.cuda.gather.emulator_build import RECORD_DTYPE, entry_symbol, library, load_columns

__all__ = ["Trace", "emulate_decode", "emulate_gather", "run_plan"]

logger = logging.getLogger(__name__)

_BUFFER_ALIGN = gather_plan.LINE_BYTES
_ARG_CTYPES = {"ptr": ctypes.c_void_p, "i64": ctypes.c_longlong, "i32": ctypes.c_int}


@dataclass(frozen=True)
class Trace:
    """The table loads of one emulated gather, one entry per active (unmasked) lane load.

    ``(warp, slot)`` identifies one warp-wide load instruction: ``slot`` numbers the passes of a
    thread through load sites, masked passes included, and all lanes of a warp pass the same
    sites in the same order.

    Attributes:
        address: absolute byte address of each load (int64).
        nbytes: bytes of each load (int32).
        warp: global warp index of the loading thread (int64).
        slot: load-site number within the thread (int64).
        plan: the launch plan that ran.
        table_address: address of the table's first row.
        num_ids: rows gathered.
        table_bytes: bytes of the table (loads outside ``[table_address, table_address +
            table_bytes)`` read something else: per-row (scale, offset) pairs, cache rows).
        host_ranges: ``(start, end)`` address ranges of host memory (the table, per-row pairs in
            host memory): the loads the PCIe model counts. Loads outside them read device memory
            (a hot-row cache and its pairs) and cross no link. None: every load is a host read.
        hits: rows read from a hot-row cache (0 without one).
    """

    address: np.ndarray
    nbytes: np.ndarray
    warp: np.ndarray
    slot: np.ndarray
    plan: gather_plan.GatherPlan
    table_address: int
    num_ids: int
    table_bytes: int = 0
    host_ranges: tuple[tuple[int, int], ...] | None = None
    hits: int = 0

    @property
    def useful_bytes(self) -> int:
        """Bytes the gather had to deliver over the link: ``(num_ids - hits) * row_bytes`` (the
        missed rows; all rows without a cache)."""
        return (self.num_ids - self.hits) * self.plan.row_bytes

    def host_mask(self) -> np.ndarray:
        """Which loads read host memory (inside :attr:`host_ranges`; all when it is None)."""
        if self.host_ranges is None:
            return np.ones(self.address.shape, dtype=bool)
        inside = np.zeros(self.address.shape, dtype=bool)
        for start, end in self.host_ranges:
            inside |= (self.address >= start) & (self.address < end)
        return inside

    def subset(self, mask: np.ndarray) -> Trace:
        """The trace of the loads selected by ``mask`` (same plan and ranges)."""
        return dataclasses.replace(self, address=self.address[mask], nbytes=self.nbytes[mask], warp=self.warp[mask], slot=self.slot[mask])


def _aligned_bytes(nbytes: int, offset: int, fill: int) -> np.ndarray:
    """A uint8 array of ``nbytes`` starting ``offset`` bytes past a 128-byte boundary."""
    raw = np.full(nbytes + 2 * _BUFFER_ALIGN, fill, dtype=np.uint8)
    start = (-raw.ctypes.data) % _BUFFER_ALIGN + offset
    return raw[start : start + nbytes]


def _check_inputs(table: np.ndarray, ids: np.ndarray, variant: str, base_offset: int) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(table, np.ndarray) or table.ndim < 1:
        raise TypeError(f"table must be a NumPy array with a row axis, but got {type(table).__name__} of ndim {getattr(table, 'ndim', None)}")
    if table.dtype.hasobject:
        raise TypeError(f"table must hold plain values, but got dtype {table.dtype}")
    ids = np.asarray(ids)
    if ids.ndim != 1 or ids.dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise TypeError(f"ids must be a 1-D int32 or int64 array, but got dtype {ids.dtype} and shape {ids.shape}; convert with ids.astype(np.int64)")
    if variant not in instantiations.VARIANTS:
        raise ValueError(f"variant must be one of {instantiations.VARIANTS}, but got {variant!r}")
    if isinstance(base_offset, bool) or not isinstance(base_offset, int) or not (0 <= base_offset < _BUFFER_ALIGN):
        raise ValueError(f"base_offset must be an int in [0, 127], but got {base_offset!r}")
    if ids.size:
        low, high = int(ids.min()), int(ids.max())
        bad = low if low < 0 else high if high >= table.shape[0] else None
        if bad is not None:
            raise IndexError(f"id {bad} is out of range for a table of {table.shape[0]} rows")
    return table, np.ascontiguousarray(ids)


def _check_perm(perm: np.ndarray | None, num_ids: int) -> np.ndarray | None:
    if perm is None:
        return None
    perm = np.asarray(perm)
    if perm.ndim != 1 or perm.dtype.kind not in "iu" or perm.size != num_ids:
        raise ValueError(f"perm must be a 1-D integer array of {num_ids} output positions, but got dtype {perm.dtype} and shape {perm.shape}")
    perm = np.ascontiguousarray(perm, dtype=np.int64)
    if not np.array_equal(np.sort(perm), np.arange(num_ids)):
        raise ValueError("perm must be a permutation of range(len(ids))")
    return perm


@dataclass(frozen=True)
class _Cache:
    """A hot-row cache placed for an emulated kernel; its arrays stay referenced while it runs.

    ``rows`` holds the cached rows' bytes, ``stride`` apart, in their own buffer: it stands for
    device memory, so its loads fall outside the trace's host ranges. ``pairs``: an int8 per-row
    table's (scale, offset) pairs of the cached rows, one per slot (device memory too)."""

    rows: np.ndarray | None = None
    slot_map: np.ndarray | None = None
    stride: int = 0
    hits: int = 0
    pairs: np.ndarray | None = None

    def plan_arguments(self) -> dict[str, int]:
        if self.slot_map is None:
            return {}
        return dict(cache_address=int(self.rows.ctypes.data), cache_stride=self.stride, slot_bytes=self.slot_map.dtype.itemsize)

    def kernel_arguments(self) -> dict[str, int]:
        if self.slot_map is None:
            return {}
        return dict(
            slot_map_address=int(self.slot_map.ctypes.data),
            cache_address=int(self.rows.ctypes.data),
            cache_stride=self.stride,
            cache_affine_address=0 if self.pairs is None else int(self.pairs.ctypes.data),
        )


def _place_cache(
    table: np.ndarray, cache_rows: np.ndarray | None, slot_map: np.ndarray | None, cache_offset: int, cache_stride: int | None, ids: np.ndarray
) -> _Cache:
    """Check a hot-row cache against ``table`` and lay its rows out as the kernel reads them."""
    if cache_rows is None and slot_map is None:
        if cache_offset != 0 or cache_stride is not None:
            raise ValueError("cache_offset and cache_stride place a cache: pass cache_rows and slot_map too")
        return _Cache()
    if cache_rows is None or slot_map is None:
        raise ValueError("cache_rows and slot_map go together: pass both for a cached gather, or neither")
    if not isinstance(cache_rows, np.ndarray) or cache_rows.dtype != table.dtype or cache_rows.shape[1:] != table.shape[1:]:
        raise TypeError(
            f"cache_rows must be a NumPy array of rows of the table ({table.dtype}, shape (k,) + "
            f"{table.shape[1:]}), but got {getattr(cache_rows, 'dtype', type(cache_rows).__name__)} "
            f"{getattr(cache_rows, 'shape', '')}"
        )
    slot_map = np.asarray(slot_map)
    if slot_map.dtype not in (np.dtype(np.int32), np.dtype(np.int64)) or slot_map.shape != (table.shape[0],):
        raise TypeError(
            f"slot_map must be a 1-D int32 or int64 array of {table.shape[0]} entries (one per table row), "
            f"but got dtype {slot_map.dtype} and shape {slot_map.shape}"
        )
    num_cached = cache_rows.shape[0]
    bad = np.flatnonzero((slot_map < -1) | (slot_map >= num_cached))
    if bad.size:
        raise ValueError(f"slot_map[{bad[0]}] = {slot_map[bad[0]]} is not a slot of a {num_cached}-row cache (valid: -1 for not cached, 0 to {num_cached - 1})")
    if isinstance(cache_offset, bool) or not isinstance(cache_offset, int) or not 0 <= cache_offset < _BUFFER_ALIGN:
        raise ValueError(f"cache_offset must be an int in [0, 127], but got {cache_offset!r}")
    row_bytes = cache_rows.dtype.itemsize * int(np.prod(cache_rows.shape[1:], dtype=np.int64))
    stride = row_bytes if cache_stride is None else cache_stride
    if isinstance(stride, bool) or not isinstance(stride, int) or stride < row_bytes:
        raise ValueError(f"cache_stride must be an int >= the row's {row_bytes} bytes, but got {cache_stride!r}")
    rows = _aligned_bytes(num_cached * stride, cache_offset, fill=0)
    if num_cached and row_bytes:
        rows.reshape(num_cached, stride)[:, :row_bytes] = np.ascontiguousarray(cache_rows).reshape(num_cached, -1).view(np.uint8)
    slot_map = np.ascontiguousarray(slot_map)
    return _Cache(rows=rows, slot_map=slot_map, stride=stride, hits=int(np.count_nonzero(slot_map[ids] >= 0)))


def emulate_gather(
    table: np.ndarray,
    ids: np.ndarray,
    *,
    variant: str = "aligned",
    base_offset: int = 0,
    perm: np.ndarray | None = None,
    trace: bool = False,
    max_blocks: int | None = None,
    cache_rows: np.ndarray | None = None,
    slot_map: np.ndarray | None = None,
    cache_offset: int = 0,
    cache_stride: int | None = None,
    threads_per_row: int | None = None,
    threads_per_block: int = 256,
) -> np.ndarray | tuple[np.ndarray, Trace]:
    """Gather ``table[ids]`` by running the CUDA kernel on the CPU.

    With ``cache_rows`` and ``slot_map``, the fused cached gather: row ``ids[j]`` is read from
    ``cache_rows[slot_map[ids[j]]]`` when that slot is >= 0, else from the table (so the result
    is ``table[ids]`` when every cached row equals its table row, as
    :func:`dgl_zerocopy.store.cache.cached_gather`).

    Args:
        table: the feature table, rows along axis 0 (any plain dtype; copied as bytes).
        ids: 1-D int32 or int64 row ids, each in ``[0, len(table))``.
        variant: ``"aligned"`` or ``"naive"``.
        base_offset: the table's first row is placed this many bytes (0..127) past a 128-byte
            boundary, to exercise every alignment.
        perm: optional permutation: output row ``perm[j]`` receives ``table[ids[j]]`` (callers
            sort ids for locality and pass the sorting permutation).
        trace: also return the :class:`Trace` of table loads.
        max_blocks: grid cap, as on the GPU.
        cache_rows: the cached rows, ``(k,) + table.shape[1:]`` of ``table.dtype`` (aligned
            variant only; together with ``slot_map``).
        slot_map: 1-D int32 or int64, one entry per table row: its slot in ``cache_rows`` or -1.
        cache_offset: the cache's first row is placed this many bytes (0..127) past a 128-byte
            boundary.
        cache_stride: bytes between cache rows (default the row's bytes).
        threads_per_row: aligned variant: lanes per row, as for
            :func:`~dgl_zerocopy.cuda.gather.gather_plan.plan_gather` (None: the plan's choice).
        threads_per_block: threads per block, as on the GPU (a multiple of 32, at most 1024).

    Returns:
        An array of shape ``(len(ids),) + table.shape[1:]`` and ``table.dtype``; with ``trace``,
        the tuple ``(out, Trace)`` (cache loads are traced, outside ``Trace.host_ranges``).

    Raises:
        TypeError: bad table, ids, cache rows or slot map type. IndexError: an id out of range.
        ValueError: a bad variant, base offset, perm, slot or cache layout.
    """
    table, ids = _check_inputs(table, ids, variant, base_offset)
    perm = _check_perm(perm, ids.size)
    cache = _place_cache(table, cache_rows, slot_map, cache_offset, cache_stride, ids)
    num_ids = int(ids.size)
    row_bytes = table.dtype.itemsize * int(np.prod(table.shape[1:], dtype=np.int64))

    table_bytes = _aligned_bytes(table.nbytes, base_offset, fill=0)
    if table.nbytes:
        table_bytes[:] = np.ascontiguousarray(table).reshape(-1).view(np.uint8)
    # Fill the output with a marker so that rows the kernel fails to write cannot pass a test.
    out_bytes = _aligned_bytes(num_ids * row_bytes, 0, fill=0xA5)
    table_address = int(table_bytes.ctypes.data)
    out_address = int(out_bytes.ctypes.data)

    plan = gather_plan.plan_gather(
        row_bytes,
        table_address,
        num_ids,
        variant=variant,
        elem_size=table.dtype.itemsize,
        max_blocks=max_blocks,
        threads_per_block=threads_per_block,
        id_bytes=ids.dtype.itemsize,
        out_address=out_address,
        threads_per_row=threads_per_row,
        **cache.plan_arguments(),
    )
    args = gather_plan.kernel_arguments(
        plan,
        table_address=table_address,
        row_stride=row_bytes,
        ids_address=int(ids.ctypes.data),
        perm_address=0 if perm is None else int(perm.ctypes.data),
        out_address=out_address,
        out_stride=row_bytes,
        **cache.kernel_arguments(),
    )
    records = _run(plan, args, trace)
    out = out_bytes.view(table.dtype).reshape((num_ids,) + table.shape[1:])
    if not trace:
        return out
    return out, _trace(records, plan, table_address, num_ids, table.nbytes, ((table_address, table_address + table.nbytes),), cache.hits)


def run_plan(plan: gather_plan.GatherPlan, args: tuple[gather_plan.KernelArg, ...]) -> None:
    """Run ``plan``'s kernel on the CPU with ``args`` (:func:`~dgl_zerocopy.cuda.gather.gather_plan.kernel_arguments`)
    over buffers the caller placed: the CPU twin of launching the same plan and arguments on a GPU.
    The caller keeps every buffer alive and every id in range (the kernel checks none)."""
    _run(plan, args, trace=False)


def _run(plan: gather_plan.GatherPlan, args: tuple[gather_plan.KernelArg, ...], trace: bool) -> np.ndarray:
    """Run ``plan``'s kernel on the CPU with ``args``; the load records when ``trace``."""
    records = np.empty(0, dtype=RECORD_DTYPE)
    if plan.grid == 0:
        return records
    lib = library()
    values = [_ARG_CTYPES[kind](value) for kind, value in args]
    pointers = (ctypes.c_void_p * len(values))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values])
    entry = getattr(lib, entry_symbol(plan.kernel))
    logger.debug("emulating %s grid=%d block=%d", plan.kernel, plan.grid, plan.block)
    if trace:
        lib.zc_emu_trace_begin()
    try:
        entry(plan.grid, plan.block, pointers)
        if trace:
            records = np.empty(lib.zc_emu_trace_size(), dtype=RECORD_DTYPE)
            lib.zc_emu_trace_copy(records.ctypes.data)
    finally:
        if trace:
            lib.zc_emu_trace_end()
    return records


def _trace(
    records: np.ndarray, plan: gather_plan.GatherPlan, table_address: int, num_ids: int, table_bytes: int, host_ranges: tuple[tuple[int, int], ...], hits: int
) -> Trace:
    return Trace(**load_columns(records), plan=plan, table_address=table_address, num_ids=num_ids, table_bytes=table_bytes, host_ranges=host_ranges, hits=hits)


#: NumPy dtypes accepted for the codes of each format (fp16 and bf16 codes may come as raw bits).
_CODE_DTYPES = {
    "fp16": (np.dtype(np.float16), np.dtype(np.uint16), np.dtype(np.int16)),
    "bf16": (np.dtype(np.uint16), np.dtype(np.int16)),
    "int8": (np.dtype(np.int8),),
}
#: NumPy dtype of each output format's result (bfloat16: its bits, NumPy having no bfloat16).
_OUT_DTYPES = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16), "bfloat16": np.dtype(np.uint16)}


def emulate_decode(
    codes: np.ndarray,
    ids: np.ndarray,
    *,
    code: str,
    out_format: str = "float32",
    scale: np.ndarray | None = None,
    offset: np.ndarray | None = None,
    affine: str | None = None,
    base_offset: int = 0,
    out_offset: int = 0,
    perm: np.ndarray | None = None,
    trace: bool = False,
    max_blocks: int | None = None,
    cache_rows: np.ndarray | None = None,
    slot_map: np.ndarray | None = None,
    cache_offset: int = 0,
    cache_stride: int | None = None,
    cache_pairs: bool = True,
) -> np.ndarray | tuple[np.ndarray, Trace]:
    """Gather and decode compressed rows ``codes[ids]`` by running ``gather_decode`` on the CPU.

    The decode is ``x = float(code)`` (fp16, bf16) or ``x = float(code) * scale[k] + offset[k]``
    (int8; ``k`` the column for ``affine="column"``, the row id for ``"row"``), in float32, then
    rounded to ``out_format`` (nearest, ties to even).

    Args:
        codes: 2-D code table: int8 for ``"int8"``; float16 or its bits (uint16/int16) for
            ``"fp16"``; the bits (uint16/int16) for ``"bf16"``.
        ids: 1-D int32 or int64 row ids, each in ``[0, len(codes))``.
        code: ``"fp16"``, ``"bf16"`` or ``"int8"``.
        out_format: ``"float32"``, ``"float16"`` or ``"bfloat16"``.
        scale, offset: int8 only: float32, one per column (``affine="column"``) or per row
            (``"row"``). They are packed into (scale, offset) pairs as the GPU backend packs them;
            per-row pairs lie in their own buffer and their loads are traced (host memory on the
            GPU), per-column ones are device memory there and not traced.
        base_offset: the code table starts this many bytes (0..127) past a 128-byte boundary.
        out_offset: the output starts this many bytes (0..127) past a 128-byte boundary (a
            multiple of the output element size): narrows the output stores.
        perm, trace, max_blocks: as for :func:`emulate_gather`.
        cache_rows, slot_map, cache_offset, cache_stride: a hot-row cache of *codes* (rows of
            ``codes``' dtype), as for :func:`emulate_gather`: hits are decoded like misses.
        cache_pairs: int8 per row with a cache: the cached rows' (scale, offset) pairs are copied
            to a per-slot buffer (device memory, as the zero-copy backend does) and hits read
            theirs from it; False: hits read their pair from the host pairs, as misses do.

    Returns:
        ``(len(ids), columns)`` of float32, float16, or uint16 holding bfloat16 bits; with
        ``trace``, the tuple ``(out, Trace)``.

    Raises:
        TypeError: bad table, ids, or code dtype. IndexError: an id out of range.
        ValueError: a bad format, affine map, base offset or perm.
    """
    codes, ids = _check_inputs(codes, ids, "aligned", base_offset)
    if code not in instantiations.CODE_FORMATS:
        raise ValueError(f"code must be one of {tuple(instantiations.CODE_FORMATS)}, but got {code!r}")
    if out_format not in instantiations.OUT_FORMATS:
        raise ValueError(f"out_format must be one of {tuple(instantiations.OUT_FORMATS)}, but got {out_format!r}")
    if codes.ndim != 2 or codes.dtype not in _CODE_DTYPES[code]:
        raise TypeError(f"{code} codes must be a 2-D array of {' or '.join(map(str, _CODE_DTYPES[code]))}, but got dtype {codes.dtype} and shape {codes.shape}")
    if isinstance(out_offset, bool) or not isinstance(out_offset, int) or not 0 <= out_offset < _BUFFER_ALIGN:
        raise ValueError(f"out_offset must be an int in [0, 127], but got {out_offset!r}")
    num_rows, columns = codes.shape
    pairs = _affine_pairs(code, affine, scale, offset, num_rows, columns)
    perm = _check_perm(perm, ids.size)
    num_ids = int(ids.size)
    cache = _place_cache(codes, cache_rows, slot_map, cache_offset, cache_stride, ids)

    table_bytes = _aligned_bytes(codes.nbytes, base_offset, fill=0)
    if codes.nbytes:
        table_bytes[:] = np.ascontiguousarray(codes).reshape(-1).view(np.uint8)
    out_dtype = _OUT_DTYPES[out_format]
    out_row_bytes = columns * out_dtype.itemsize
    out_bytes = _aligned_bytes(num_ids * out_row_bytes, out_offset, fill=0xA5)
    table_address, out_address = int(table_bytes.ctypes.data), int(out_bytes.ctypes.data)
    pair_bytes = None
    if pairs is not None:
        pair_bytes = _aligned_bytes(pairs.nbytes, 0, fill=0)
        pair_bytes[:] = pairs.reshape(-1).view(np.uint8)
    host_ranges = [(table_address, table_address + codes.nbytes)]
    if affine == "row":
        host_ranges.append((int(pair_bytes.ctypes.data), int(pair_bytes.ctypes.data) + pairs.nbytes))
        if cache.slot_map is not None and cache_pairs:
            cached = np.zeros((cache_rows.shape[0], 2), dtype=np.float32)
            rows = np.flatnonzero(cache.slot_map >= 0)
            cached[cache.slot_map[rows]] = pairs[rows]
            cache = dataclasses.replace(cache, pairs=_aligned_bytes(cached.nbytes, 0, fill=0))
            cache.pairs[:] = cached.reshape(-1).view(np.uint8)

    plan = gather_plan.plan_decode(
        columns,
        table_address,
        num_ids,
        code=code,
        out_format=out_format,
        affine=affine,
        max_blocks=max_blocks,
        id_bytes=ids.dtype.itemsize,
        out_address=out_address,
        **cache.plan_arguments(),
    )
    args = gather_plan.kernel_arguments(
        plan,
        table_address=table_address,
        row_stride=plan.row_bytes,
        ids_address=int(ids.ctypes.data),
        perm_address=0 if perm is None else int(perm.ctypes.data),
        out_address=out_address,
        out_stride=out_row_bytes,
        affine_address=0 if pair_bytes is None else int(pair_bytes.ctypes.data),
        **cache.kernel_arguments(),
    )
    records = _run(plan, args, trace)
    out = out_bytes.view(out_dtype).reshape(num_ids, columns)
    if not trace:
        return out
    return out, _trace(records, plan, table_address, num_ids, codes.nbytes, tuple(host_ranges), cache.hits)


def _affine_pairs(code: str, affine: str | None, scale, offset, num_rows: int, columns: int) -> np.ndarray | None:
    """The (scale, offset) float32 pairs of an int8 table, shape (n, 2); None for fp16/bf16."""
    if code != "int8":
        if affine is not None or scale is not None or offset is not None:
            raise ValueError(f"{code} codes take no affine map, scale or offset")
        return None
    if affine not in gather_plan.AFFINE_AXES:
        raise ValueError(f"int8 codes need affine='column' or 'row', but got {affine!r}")
    length = columns if affine == "column" else num_rows
    arrays = []
    for name, values in (("scale", scale), ("offset", offset)):
        values = np.asarray(values) if values is not None else None
        if values is None or values.dtype != np.float32 or values.shape != (length,):
            raise ValueError(
                f"{name} must be a float32 array of {length} values (one per {affine}), but got {None if values is None else f'{values.dtype} {values.shape}'}"
            )
        arrays.append(values)
    return np.ascontiguousarray(np.stack(arrays, axis=1))
