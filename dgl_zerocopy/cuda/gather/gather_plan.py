"""Launch configuration of the gather kernels (``kernels/gather.cu``).

The one place that picks the vector width, threads per row, window alignment, block and grid
(instantiations: :mod:`dgl_zerocopy.cuda.gather.instantiations`). The GPU launcher
(:mod:`dgl_zerocopy.cuda.gather.launcher`) and the CPU emulator (:mod:`dgl_zerocopy.cuda.gather.emulator`)
both call :func:`plan_gather` (raw rows) or :func:`plan_decode` (compressed rows decoded in the
kernel) and :func:`kernel_arguments`, so the emulator runs exactly the configuration the GPU would.
Both plans optionally include a hot-row cache in device memory (``cache_address``: the fused
hit/miss gather; the kernels' ``zc_row_source``). Pure Python: no CUDA needed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .instantiations import CODE_FORMATS, ID_TYPES, IDENTITY, LOAD_TYPES, OUT_FORMATS, VARIANTS, decode_name_expression, name_expression

__all__ = [
    "AFFINE_AXES",
    "GatherPlan",
    "KernelArg",
    "LINE_BYTES",
    "SLOT_BYTES",
    "SMALL_ROW_BYTES",
    "WARP_SIZE",
    "default_threads_per_row",
    "kernel_arguments",
    "plan_decode",
    "plan_gather",
]

WARP_SIZE = 32
#: Bytes of one memory line: a warp-wide load becomes one request per line it touches.
LINE_BYTES = 128
#: Rows over one line and up to this many bytes get line-sized windows by default (:func:`default_threads_per_row`).
SMALL_ROW_BYTES = 512
#: Resident threads per SM on sm_70 .. sm_90: one full wave of a grid-stride kernel.
MAX_THREADS_PER_SM = 2048

#: Widths of a cache's slot map entries (int32, int64): a kernel argument, not a template one.
SLOT_BYTES = (4, 8)

#: Where an int8 code's (scale, offset) pair comes from: one per column, or one per table row.
AFFINE_AXES = ("column", "row")

#: One kernel argument: (kind, value); kind is ``"ptr"`` (64-bit address), ``"i64"`` or ``"i32"``.
KernelArg = tuple[str, int]


@dataclass(frozen=True)
class GatherPlan:
    """How one gather is launched.

    Attributes:
        variant: ``"aligned"`` or ``"naive"``.
        kernel: the C++ name expression of the instantiation, e.g. ``"gather_aligned<uint4, int>"``.
        vector_bytes: bytes per load: the vector width (aligned) or element width (naive).
        threads_per_row: aligned: lanes copying one row together (a power of two, at most 32);
            naive: elements per row (one thread each).
        window_bytes: aligned: bytes one row group covers per load instruction
            (``threads_per_row * vector_bytes``); naive: bytes a warp covers (``32 * vector_bytes``).
        align_bytes: aligned: a row's first window starts at its address rounded down to this
            (128, the window, or ``vector_bytes`` for no shift; see ``kernels/gather.cu``);
            naive: ``vector_bytes`` (no shift).
        steps_per_row: aligned: load instructions per row (worst case over row alignments); naive: 1.
        block: threads per block (a multiple of 32).
        grid: blocks; 0 when there is nothing to copy (no ids or empty rows): do not launch.
        row_bytes: bytes copied per row (for a decoding plan: bytes of codes read per row).
        num_ids: rows gathered.
        code: decoding plans: the code format (a key of :data:`CODE_FORMATS`); None for a raw copy.
        out_format: decoding plans: the output format (a key of :data:`OUT_FORMATS`).
        affine: decoding plans of int8 codes: ``"column"`` or ``"row"``; else None.
        out_row_bytes: bytes written per output row (``row_bytes`` for a raw copy).
        store_bytes: decoding plans: width of the output stores (the widest dividing the output
            base, the output stride and the bytes one load decodes into; at most 16).
        id_bytes: 4 (int32 ids) or 8 (int64).
        slot_bytes: 0 for no cache; 4 or 8: the plan reads hits from a hot-row cache whose slot map
            has entries of that width (int32, int64), and its vector also divides the cache's base
            address and row stride.
    """

    variant: str
    kernel: str
    vector_bytes: int
    threads_per_row: int
    window_bytes: int
    align_bytes: int
    steps_per_row: int
    block: int
    grid: int
    row_bytes: int
    num_ids: int
    code: str | None = None
    out_format: str | None = None
    affine: str | None = None
    out_row_bytes: int | None = None
    store_bytes: int = 0
    id_bytes: int = 8
    slot_bytes: int = 0

    @property
    def decodes(self) -> bool:
        """Whether the plan runs the decoding kernel (``gather_decode``: its arguments add the affine pairs and the store width)."""
        return self.kernel.startswith("gather_decode<")

    @property
    def cached(self) -> bool:
        """Whether the plan reads hits from a hot-row cache (its kernel takes the slot map)."""
        return self.slot_bytes != 0

    @property
    def threads(self) -> int:
        """Threads launched (``grid * block``)."""
        return self.grid * self.block


def _widest_load(limit: int, *values: int) -> int:
    """The widest load width <= ``limit`` dividing every value (addresses, strides, sizes)."""
    for width in sorted(LOAD_TYPES, reverse=True):
        if width <= limit and all(value % width == 0 for value in values):
            return width
    return 1


def fewest_threads_per_row(row_bytes: int, vector: int) -> int:
    """The fewest lanes (a power of two, at most a warp) that cover the row in one window."""
    return min(WARP_SIZE, 1 << max(row_bytes // vector - 1, 0).bit_length())


def default_threads_per_row(row_bytes: int, vector: int) -> int:
    """Lanes per row of the default aligned shape: :func:`fewest_threads_per_row`, but a window of one
    line for rows over one line up to :data:`SMALL_ROW_BYTES` (16-byte vectors: 8 lanes, 4 rows per warp).
    The fitted link model (:mod:`~dgl_zerocopy.cuda.gather.link_model`) has a warp's bytes in flight set the
    rate of random small rows: 4 rows of up to 4 lines each, not one row of 512 B, and each line still
    requested once (narrower windows would split lines into requests the fitted figures cannot price)."""
    fewest = fewest_threads_per_row(row_bytes, vector)
    if LINE_BYTES < row_bytes <= SMALL_ROW_BYTES:
        return min(fewest, max(1, LINE_BYTES // vector))
    return fewest


def _aligned_geometry(row_bytes: int, vector: int, threads_per_row: int | None = None) -> tuple[int, int, int, int]:
    """(threads per row, window, align, steps) of the aligned scheme (``kernels/gather.cu`` explains each)
    for rows of ``row_bytes`` read with ``vector``-byte loads; ``threads_per_row`` None: the default."""
    if threads_per_row is None:
        threads_per_row = default_threads_per_row(row_bytes, vector)
    window = threads_per_row * vector
    if row_bytes <= window:
        align = vector  # one instruction covers the row from its start: no shift
    else:
        align = min(window, LINE_BYTES)
    steps = -(-(align - vector + row_bytes) // window) if row_bytes else 1
    return threads_per_row, window, align, steps


def _aligned_blocks(num_ids: int, threads_per_row: int, threads_per_block: int) -> int:
    return -(-num_ids // ((threads_per_block // WARP_SIZE) * (WARP_SIZE // threads_per_row)))  # blocks of whole rows


def _grid(work_blocks: int, num_ids: int, row_bytes: int, num_sms: int, threads_per_block: int, max_blocks: int | None) -> int:
    """Blocks for the work, at most one full wave and at most ``max_blocks``; 0: nothing to do."""
    full_wave = max(1, num_sms * (MAX_THREADS_PER_SM // threads_per_block))
    cap = full_wave if max_blocks is None else min(full_wave, max_blocks)
    return 0 if num_ids == 0 or row_bytes == 0 else min(work_blocks, cap)


def _new_plan(variant: str, kernel: str, vector: int, geometry: tuple[int, int, int, int], work_blocks: int, **values: int | str | None) -> GatherPlan:
    """The one place a :class:`GatherPlan` is made, raw or decoding, from values checked already.

    ``geometry``: (threads per row, window, align, steps); ``work_blocks``: blocks for all the work,
    capped by :func:`_grid`. ``values``: ``row_bytes``, ``num_ids``, ``num_sms``, ``threads_per_block``,
    ``max_blocks``, ``id_bytes``, ``slot_bytes`` (0: no cache), ``out_row_bytes`` and, for a decoding
    plan, ``code``, ``out_format``, ``affine``, ``store_bytes``.
    """
    threads_per_row, window, align, steps = geometry
    num_sms, block, max_blocks = values.pop("num_sms"), values.pop("threads_per_block"), values.pop("max_blocks")
    grid = _grid(work_blocks, values["num_ids"], values["row_bytes"], num_sms, block, max_blocks)
    return GatherPlan(
        variant=variant,
        kernel=kernel,
        vector_bytes=vector,
        threads_per_row=threads_per_row,
        window_bytes=window,
        align_bytes=align,
        steps_per_row=steps,
        block=block,
        grid=grid,
        **values,
    )


def _check_launch(num_sms: int, threads_per_block: int, id_bytes: int, max_blocks: int | None) -> None:
    _check_int("num_sms", num_sms, 1)
    if max_blocks is not None:
        _check_int("max_blocks", max_blocks, 1)
    _check_int("threads_per_block", threads_per_block, WARP_SIZE)
    if threads_per_block % WARP_SIZE or threads_per_block > 1024:
        raise ValueError(f"threads_per_block must be a multiple of 32 in [32, 1024], but got {threads_per_block}")
    if id_bytes not in ID_TYPES:
        raise ValueError(f"id_bytes must be 4 (int32) or 8 (int64), but got {id_bytes!r}")


def _check_cache(cache_address: int | None, cache_stride: int | None, slot_bytes: int, row_bytes: int, variant: str = "aligned") -> tuple[int, ...]:
    """The cache's (address, stride) to add to the values the vector must divide; () for no cache."""
    if cache_address is None:
        if cache_stride is not None:
            raise ValueError(f"cache_stride={cache_stride} was given without cache_address")
        return ()
    if variant != "aligned":
        raise ValueError(f"a cached gather runs the aligned kernel; variant={variant!r} has no cache: use 'aligned'")
    _check_int("cache_address", cache_address, 0)
    if slot_bytes not in SLOT_BYTES:
        raise ValueError(f"slot_bytes must be 4 (int32 slot map) or 8 (int64), but got {slot_bytes!r}")
    cache_stride = row_bytes if cache_stride is None else cache_stride
    _check_int("cache_stride", cache_stride, row_bytes)
    return (cache_address, cache_stride)


def _check_int(name: str, value: int, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, but got {value!r}")


def plan_gather(
    row_bytes: int,
    table_address: int,
    num_ids: int,
    *,
    variant: str = "aligned",
    elem_size: int,
    max_blocks: int | None = None,
    num_sms: int = 132,
    threads_per_block: int = 256,
    id_bytes: int = 8,
    row_stride: int | None = None,
    out_address: int = 0,
    out_stride: int | None = None,
    cache_address: int | None = None,
    cache_stride: int | None = None,
    slot_bytes: int = 4,
    threads_per_row: int | None = None,
) -> GatherPlan:
    """Choose the launch configuration for gathering ``num_ids`` rows of ``row_bytes`` bytes.

    Args:
        row_bytes: bytes per row to copy (``itemsize * columns``).
        table_address: address of the table's first row (its alignment limits the vector width).
        num_ids: number of rows to gather.
        variant: ``"aligned"`` (vector loads, line-aligned windows) or ``"naive"``.
        elem_size: bytes per element; naive loads one element per thread.
        max_blocks: cap on the grid, so that the gather leaves SMs to concurrent training.
        num_sms: SMs of the device; the grid never exceeds one full wave
            (``num_sms * 2048 // threads_per_block`` blocks): the kernels are grid-stride.
        threads_per_block: a multiple of 32, at most 1024.
        id_bytes: 4 for int32 ids, 8 for int64 ids.
        row_stride: bytes between table rows (default ``row_bytes``).
        out_address: address of the output's first row (its alignment limits the vector width).
        out_stride: bytes between output rows (default ``row_bytes``).
        cache_address: address of a hot-row cache's first row in device memory (None: no cache).
            With it, the plan reads each row whose slot map entry is >= 0 from the cache and the
            others from the table, with the same vector, which then also divides this address and
            ``cache_stride``. Aligned variant only.
        cache_stride: bytes between cache rows (default ``row_bytes``).
        slot_bytes: width of the slot map's entries with a cache: 4 (int32) or 8 (int64).
        threads_per_row: aligned variant only: lanes that copy one row together, a power of two
            from 1 to 32 (``32 // threads_per_row`` rows per warp). None (the default):
            :func:`default_threads_per_row`. Fewer lanes give each lane more steps of the row,
            issued back to back (more loads in flight per lane) and a warp more rows at once.

    Returns:
        The plan; ``grid == 0`` means there is nothing to launch.

    Raises:
        ValueError: a value out of range (the message names it).
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, but got {variant!r}")
    _check_int("row_bytes", row_bytes, 0)
    _check_int("table_address", table_address, 0)
    _check_int("num_ids", num_ids, 0)
    _check_int("elem_size", elem_size, 1)
    _check_int("out_address", out_address, 0)
    if row_bytes % elem_size:
        raise ValueError(f"row_bytes must be a multiple of elem_size={elem_size}, but got {row_bytes}")
    _check_launch(num_sms, threads_per_block, id_bytes, max_blocks)
    row_stride = row_bytes if row_stride is None else row_stride
    out_stride = row_bytes if out_stride is None else out_stride
    _check_int("row_stride", row_stride, row_bytes)
    _check_int("out_stride", out_stride, row_bytes)
    cache_layout = _check_cache(cache_address, cache_stride, slot_bytes, row_bytes, variant)
    if threads_per_row is not None:
        _check_int("threads_per_row", threads_per_row, 1)
        if threads_per_row > WARP_SIZE or threads_per_row & (threads_per_row - 1) or variant != "aligned":
            raise ValueError(f"threads_per_row must be a power of two from 1 to 32, for the aligned variant only, but got {threads_per_row!r} ({variant})")

    layout = (table_address, row_stride, row_bytes, out_address, out_stride, *cache_layout)
    if variant == "aligned":
        # Widest vector that keeps every load naturally aligned and entirely inside or outside
        # a row: it must divide both base addresses, both strides and the row size.
        vector = _widest_load(16, *layout)
        threads_per_row, window, align, steps = _aligned_geometry(row_bytes, vector, threads_per_row)
        work_blocks = _aligned_blocks(num_ids, threads_per_row, threads_per_block)
    else:
        # One element per thread; a smaller load only if the addresses are not element-aligned.
        elem_load = elem_size & -elem_size  # largest power of two dividing elem_size
        vector = _widest_load(min(elem_load, 16), *layout)
        threads_per_row = row_bytes // vector
        window = WARP_SIZE * vector
        align = vector
        steps = 1
        work_blocks = -(-(num_ids * threads_per_row) // threads_per_block)

    launch = {"num_sms": num_sms, "threads_per_block": threads_per_block, "max_blocks": max_blocks, "id_bytes": id_bytes}
    layout = {"row_bytes": row_bytes, "num_ids": num_ids, "out_row_bytes": row_bytes, "slot_bytes": slot_bytes if cache_layout else 0}
    kernel = name_expression(variant, vector, id_bytes)
    return _new_plan(variant, kernel, vector, (threads_per_row, window, align, steps), work_blocks, **layout, **launch)


def plan_decode(
    columns: int,
    table_address: int,
    num_ids: int,
    *,
    code: str,
    out_format: str = "float32",
    affine: str | None = None,
    max_blocks: int | None = None,
    num_sms: int = 132,
    threads_per_block: int = 256,
    id_bytes: int = 8,
    row_stride: int | None = None,
    out_address: int = 0,
    out_stride: int | None = None,
    cache_address: int | None = None,
    cache_stride: int | None = None,
    slot_bytes: int = 4,
) -> GatherPlan:
    """Choose the launch of the decoding gather (``gather_decode`` in ``kernels/gather.cu``).

    The reads follow the aligned scheme of :func:`plan_gather` on the *code* row
    (``columns * code bytes``): the widest vector dividing the table base, its row stride and the
    code row, the same threads per row, windows, alignment and steps. The output does not limit
    the loads (they are what crosses PCIe): each lane writes what its load decodes to
    (``vector / code bytes`` elements) with stores of ``store_bytes``, the widest dividing the
    output base, the output stride and that chunk. fp16 codes written as float16 (and bf16 as
    bfloat16) decode to themselves: that plan is :func:`plan_gather`'s aligned raw copy (its
    ``kernel`` is ``gather_aligned``; ``code`` and ``out_format`` still say what it copies).

    Args:
        columns: elements per row.
        table_address: address of the code table's first row.
        num_ids: rows to gather.
        code: ``"fp16"``, ``"bf16"`` or ``"int8"`` (:data:`CODE_FORMATS`).
        out_format: ``"float32"``, ``"float16"`` or ``"bfloat16"`` (:data:`OUT_FORMATS`).
        affine: int8 only (and required there): ``"column"`` (one (scale, offset) pair per
            column) or ``"row"`` (one pair per table row).
        max_blocks, num_sms, threads_per_block, id_bytes: as for :func:`plan_gather`.
        row_stride: bytes between code rows (default the code row's bytes).
        out_address: address of the output's first row.
        out_stride: bytes between output rows (default the output row's bytes).
        cache_address, cache_stride, slot_bytes: a hot-row cache of *code* rows in device memory,
            as for :func:`plan_gather` (``cache_stride`` counts code bytes; default the code row).

    Returns:
        The plan (``plan.code`` set; ``grid == 0``: nothing to launch).

    Raises:
        ValueError: an unknown format, a missing or needless ``affine``, addresses or strides not
            aligned to their element size, or a value out of range (the message names it).
    """
    if code not in CODE_FORMATS:
        raise ValueError(f"code must be one of {tuple(CODE_FORMATS)}, but got {code!r}")
    if out_format not in OUT_FORMATS:
        raise ValueError(f"out_format must be one of {tuple(OUT_FORMATS)}, but got {out_format!r}")
    if code == "int8" and affine not in AFFINE_AXES:
        raise ValueError(f"int8 codes need affine='column' or 'row', but got {affine!r}")
    if code != "int8" and affine is not None:
        raise ValueError(f"{code} codes take no affine map, but got affine={affine!r}")
    _check_int("columns", columns, 0)
    _check_int("table_address", table_address, 0)
    _check_int("num_ids", num_ids, 0)
    _check_int("out_address", out_address, 0)
    _check_launch(num_sms, threads_per_block, id_bytes, max_blocks)
    code_bytes, out_bytes = CODE_FORMATS[code][1], OUT_FORMATS[out_format][1]
    row_bytes, out_row_bytes = columns * code_bytes, columns * out_bytes
    row_stride = row_bytes if row_stride is None else row_stride
    out_stride = out_row_bytes if out_stride is None else out_stride
    _check_int("row_stride", row_stride, row_bytes)
    _check_int("out_stride", out_stride, out_row_bytes)
    cache_layout = _check_cache(cache_address, cache_stride, slot_bytes, row_bytes)
    cache_checks = (("cache_address", cache_layout[0], code_bytes, code), ("cache_stride", cache_layout[1], code_bytes, code)) if cache_layout else ()
    for name, value, size, fmt in (
        ("table_address", table_address, code_bytes, code),
        ("row_stride", row_stride, code_bytes, code),
        ("out_address", out_address, out_bytes, out_format),
        ("out_stride", out_stride, out_bytes, out_format),
        *cache_checks,
    ):
        if value % size:
            raise ValueError(f"{name} must be a multiple of {size} (the size of one {fmt} element), but got {value}")

    if (code, out_format) in IDENTITY:
        plan = plan_gather(
            row_bytes,
            table_address,
            num_ids,
            elem_size=code_bytes,
            max_blocks=max_blocks,
            num_sms=num_sms,
            threads_per_block=threads_per_block,
            id_bytes=id_bytes,
            row_stride=row_stride,
            out_address=out_address,
            out_stride=out_stride,
            cache_address=cache_address,
            cache_stride=cache_stride,
            slot_bytes=slot_bytes,
        )
        return dataclasses.replace(plan, code=code, out_format=out_format)

    # The loads are what crosses PCIe: only the code rows (table's and cache's) limit their width.
    vector = _widest_load(16, table_address, row_stride, row_bytes, *cache_layout)
    chunk = vector // code_bytes * out_bytes
    store = _widest_load(min(16, chunk), out_address, out_stride, chunk)
    geometry = _aligned_geometry(row_bytes, vector)
    work_blocks = _aligned_blocks(num_ids, geometry[0], threads_per_block)
    launch = {"num_sms": num_sms, "threads_per_block": threads_per_block, "max_blocks": max_blocks, "id_bytes": id_bytes}
    layout = {"row_bytes": row_bytes, "num_ids": num_ids, "out_row_bytes": out_row_bytes, "slot_bytes": slot_bytes if cache_layout else 0}
    decoding = {"code": code, "out_format": out_format, "affine": affine, "store_bytes": store}
    kernel = decode_name_expression(code, out_format, vector)
    return _new_plan("aligned", kernel, vector, geometry, work_blocks, **layout, **launch, **decoding)


def kernel_arguments(
    plan: GatherPlan,
    *,
    table_address: int,
    row_stride: int,
    ids_address: int,
    perm_address: int,
    out_address: int,
    out_stride: int,
    affine_address: int = 0,
    slot_map_address: int = 0,
    cache_address: int = 0,
    cache_stride: int = 0,
    cache_affine_address: int = 0,
) -> tuple[KernelArg, ...]:
    """The kernel's arguments in the order of its C++ signature (``kernels/gather.cu``).

    ``perm_address`` is 0 for no permutation; otherwise it points at ``num_ids`` int64 output
    positions (row ``j`` of the ids goes to output row ``perm[j]``). ``affine_address``
    (decoding plans with an affine map only) points at the float32 (scale, offset) pairs: one per
    column or one per table row, as ``plan.affine`` says.

    Cached plans (``plan.cached``) take the slot map (one entry of ``plan.slot_bytes`` per table
    row: a cache slot or -1), the cache rows' address and stride (those the plan was made for),
    and, for per-row affine pairs, optionally ``cache_affine_address``: the pairs of the cached
    rows, one per slot, in device memory (0: hits read their pair from ``affine_address``).

    Raises:
        ValueError: a decoding plan with an affine map and no ``affine_address``; a cached plan
            without a slot map or cache address, or cache arguments for a plan without a cache.
    """
    if plan.decodes and plan.affine is not None and not affine_address:
        raise ValueError(f"a plan with affine={plan.affine!r} needs the address of its (scale, offset) pairs")
    if plan.cached and not (slot_map_address and cache_address):
        raise ValueError("a cached plan needs slot_map_address and cache_address (the slot map and the cache rows)")
    if not plan.cached and (slot_map_address or cache_address or cache_affine_address):
        raise ValueError(
            "cache arguments were given for a plan made without a cache: pass cache_address to "
            "plan_gather/plan_decode, so that the vector width suits the cache rows too"
        )
    args: list[KernelArg] = [
        ("ptr", table_address),
        ("i64", row_stride),
        ("i64", plan.row_bytes),
        ("ptr", ids_address),
        ("ptr", perm_address),
        ("i64", plan.num_ids),
        ("ptr", out_address),
        ("i64", out_stride),
    ]
    if plan.variant == "aligned":  # both aligned kernels take the optional cache (null: none)
        args += [("ptr", slot_map_address), ("i32", plan.slot_bytes), ("ptr", cache_address), ("i64", cache_stride if plan.cached else 0)]
    if plan.decodes:
        args += [
            ("ptr", affine_address if plan.affine is not None else 0),
            ("i32", int(plan.affine == "row")),
            ("ptr", cache_affine_address if plan.affine == "row" else 0),
            ("i32", plan.store_bytes),
            ("i32", plan.id_bytes),
        ]
    if plan.variant == "aligned":
        args += [("i32", plan.threads_per_row), ("i64", plan.align_bytes), ("i64", plan.steps_per_row)]
    return tuple(args)
