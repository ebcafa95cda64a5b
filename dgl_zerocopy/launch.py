"""Launch configuration of the gather kernels (``kernels/gather.cu``).

The one place that picks the vector width, threads per row, window alignment, block and grid.
The GPU launcher (:mod:`dgl_zerocopy.cuda_gather`) and the CPU emulator
(:mod:`dgl_zerocopy.emulator`) both call :func:`plan_gather` and :func:`kernel_arguments`, so the
emulator runs exactly the configuration the GPU would. Pure Python: no CUDA needed.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "GatherPlan",
    "KernelArg",
    "LINE_BYTES",
    "VARIANTS",
    "WARP_SIZE",
    "all_name_expressions",
    "kernel_arguments",
    "name_expression",
    "plan_gather",
]

WARP_SIZE = 32
#: Bytes of one memory line: a warp-wide load becomes one request per line it touches.
LINE_BYTES = 128
VARIANTS = ("aligned", "naive")
#: Resident threads per SM on sm_70 .. sm_90: one full wave of a grid-stride kernel.
MAX_THREADS_PER_SM = 2048

#: CUDA type of each load width. The kernels copy bytes, so the element type does not matter.
LOAD_TYPES = {16: "uint4", 8: "uint2", 4: "unsigned int", 2: "unsigned short", 1: "unsigned char"}
#: CUDA type of each id width (int32 and int64 ids).
ID_TYPES = {4: "int", 8: "long long"}

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
            (``threads_per_row * vector_bytes``); naive: bytes a warp covers
            (``32 * vector_bytes``).
        align_bytes: aligned: a row's first window starts at its address rounded down to this
            (128, the window, or ``vector_bytes`` for no shift; see ``kernels/gather.cu``);
            naive: ``vector_bytes`` (no shift).
        steps_per_row: aligned: load instructions per row (worst case over row alignments);
            naive: 1.
        block: threads per block (a multiple of 32).
        grid: blocks; 0 when there is nothing to copy (no ids or empty rows): do not launch.
        row_bytes: bytes copied per row.
        num_ids: rows gathered.
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

    @property
    def threads(self) -> int:
        """Threads launched (``grid * block``)."""
        return self.grid * self.block


def name_expression(variant: str, load_bytes: int, id_bytes: int) -> str:
    """The kernel instantiation for ``variant`` with ``load_bytes`` loads and ``id_bytes`` ids."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, but got {variant!r}")
    if load_bytes not in LOAD_TYPES:
        raise ValueError(f"load_bytes must be one of {sorted(LOAD_TYPES)}, but got {load_bytes}")
    if id_bytes not in ID_TYPES:
        raise ValueError(f"id_bytes must be 4 (int32) or 8 (int64), but got {id_bytes}")
    return f"gather_{variant}<{LOAD_TYPES[load_bytes]}, {ID_TYPES[id_bytes]}>"


def all_name_expressions() -> tuple[str, ...]:
    """Every instantiation the launcher may use (compiled together into one module)."""
    return tuple(
        name_expression(variant, load_bytes, id_bytes)
        for variant in VARIANTS
        for load_bytes in sorted(LOAD_TYPES, reverse=True)
        for id_bytes in sorted(ID_TYPES)
    )


def _widest_load(limit: int, *values: int) -> int:
    """The widest load width <= ``limit`` dividing every value (addresses, strides, sizes)."""
    for width in sorted(LOAD_TYPES, reverse=True):
        if width <= limit and all(value % width == 0 for value in values):
            return width
    return 1


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
    _check_int("num_sms", num_sms, 1)
    _check_int("out_address", out_address, 0)
    if row_bytes % elem_size:
        raise ValueError(
            f"row_bytes must be a multiple of elem_size={elem_size}, but got {row_bytes}"
        )
    if max_blocks is not None:
        _check_int("max_blocks", max_blocks, 1)
    _check_int("threads_per_block", threads_per_block, WARP_SIZE)
    if threads_per_block % WARP_SIZE or threads_per_block > 1024:
        raise ValueError(
            f"threads_per_block must be a multiple of 32 in [32, 1024], but got {threads_per_block}"
        )
    if id_bytes not in ID_TYPES:
        raise ValueError(f"id_bytes must be 4 (int32) or 8 (int64), but got {id_bytes!r}")
    row_stride = row_bytes if row_stride is None else row_stride
    out_stride = row_bytes if out_stride is None else out_stride
    _check_int("row_stride", row_stride, row_bytes)
    _check_int("out_stride", out_stride, row_bytes)

    layout = (table_address, row_stride, row_bytes, out_address, out_stride)
    if variant == "aligned":
        # Widest vector that keeps every load naturally aligned and entirely inside or outside
        # a row: it must divide both base addresses, both strides and the row size.
        vector = _widest_load(16, *layout)
        vectors_per_row = row_bytes // vector
        threads_per_row = min(WARP_SIZE, 1 << max(vectors_per_row - 1, 0).bit_length())
        window = threads_per_row * vector
        if row_bytes <= window:
            align = vector  # one instruction covers the row from its start: no shift
        else:
            align = min(window, LINE_BYTES)
        steps = -(-(align - vector + row_bytes) // window) if row_bytes else 1
        rows_per_block = (threads_per_block // WARP_SIZE) * (WARP_SIZE // threads_per_row)
        work_blocks = -(-num_ids // rows_per_block)
    else:
        # One element per thread; a smaller load only if the addresses are not element-aligned.
        elem_load = elem_size & -elem_size  # largest power of two dividing elem_size
        vector = _widest_load(min(elem_load, 16), *layout)
        threads_per_row = row_bytes // vector
        window = WARP_SIZE * vector
        align = vector
        steps = 1
        work_blocks = -(-(num_ids * threads_per_row) // threads_per_block)

    full_wave = max(1, num_sms * (MAX_THREADS_PER_SM // threads_per_block))
    cap = full_wave if max_blocks is None else min(full_wave, max_blocks)
    grid = 0 if num_ids == 0 or row_bytes == 0 else min(work_blocks, cap)
    return GatherPlan(
        variant=variant,
        kernel=name_expression(variant, vector, id_bytes),
        vector_bytes=vector,
        threads_per_row=threads_per_row,
        window_bytes=window,
        align_bytes=align,
        steps_per_row=steps,
        block=threads_per_block,
        grid=grid,
        row_bytes=row_bytes,
        num_ids=num_ids,
    )


def kernel_arguments(
    plan: GatherPlan,
    *,
    table_address: int,
    row_stride: int,
    ids_address: int,
    perm_address: int,
    out_address: int,
    out_stride: int,
) -> tuple[KernelArg, ...]:
    """The kernel's arguments in the order of its C++ signature (``kernels/gather.cu``).

    ``perm_address`` is 0 for no permutation; otherwise it points at ``num_ids`` int64 output
    positions (row ``j`` of the ids goes to output row ``perm[j]``).
    """
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
    if plan.variant == "aligned":
        args += [
            ("i32", plan.threads_per_row),
            ("i64", plan.align_bytes),
            ("i64", plan.steps_per_row),
        ]
    return tuple(args)
