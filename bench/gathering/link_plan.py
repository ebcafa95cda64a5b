"""The plan of bench/gathering/link_experiment.py as data: which cells one GPU run measures, what each costs,
and the budget that prunes them. Pure Python (no torch, no GPU), so the plan can be printed and tested anywhere.

A cell is one measured gather: a table (size, memory kind), a row size, an id order, a batch, a method
and a kernel shape. The full product of the axes is thousands of cells; the plan is instead a few
*questions*, each a small product around one base point (512 B rows, 262,144 random ids, 32 GB table,
the default kernel), in the order they matter. :func:`prune` keeps cells, question by question, while
the estimated GPU time stays within the budget; a cell whose table is not set up yet also pays that
table's set-up. The estimate's rates (:data:`RATES`) are assumptions, written down here; each run
records the seconds it really took, per cell and per table, for the next plan to use.

One table per memory kind, of the largest size: a table of S GB is its first S GB (the cell's ids
fall in it). What a random row costs over the link depends on the span its batch's ids cover (the
pages the GPU and the IOMMU translate), which a prefix of a larger registration spans as a table of
its own would; it saves the set-up (registration faults in and locks every page) of six tables.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

#: The axes (the issue's grid). Table sizes in GB (1e9 bytes); the memory kinds are those of
#: dgl_zerocopy.store.huge_pages.HostTable: ``small`` (4 KiB pages) and ``huge`` (2 MB pages).
TABLE_GB = (1, 8, 32, 56)
MEMORY = ("small", "huge")
ROW_BYTES = (128, 400, 512, 1024)
#: ``device-sorted``: random ids sorted by the gather itself on the device (the store's sort, timed with it).
ORDERS = ("contiguous", "random", "sorted", "device-sorted")
BATCHES = (16384, 262144, 1048576)
#: Kernel shapes of the zero-copy gather: launch options of the aligned kernel (``rows_per_warp``:
#: lanes per row ``32 // rows_per_warp``; ``blocks_per_sm``: the grid cap in blocks per SM; ``block``:
#: threads per block) or the naive kernel. ``default`` is what the FeatureStore launches (rows of
#: 129-512 B: line windows, 4 rows per warp); ``rows/warp=1`` one window per row, what the first H200
#: run measured.
SHAPES = {
    "default": {},
    "rows/warp=1": {"rows_per_warp": 1},
    "rows/warp=2": {"rows_per_warp": 2},
    "grid=1/SM": {"blocks_per_sm": 1},
    "grid=4/SM": {"blocks_per_sm": 4},
    "block=1024": {"block": 1024},
    "naive": {"variant": "naive"},
}
#: Methods: our kernel reading the host table over the link; the pinned copy of the same bytes from
#: the same memory (the link's ceiling); our kernel over a copy of the table in device memory.
METHODS = ("zerocopy", "h2d", "device")
BASE = {"table_gb": 32, "row_bytes": 512, "order": "random", "batch": 262144}

#: Assumed rates of the estimate (GB/s, seconds). Conservative: the first H200 run measured
#: 20-49 GB/s for zero-copy at 2 GB and 55 GB/s for the pinned copy; a 56 GB table may be slower.
RATES = {
    "zerocopy_gbps": 10.0,  # any shape, order and table (the slow end: 56 GB random 128 B rows)
    "h2d_gbps": 40.0,
    "device_gbps": 500.0,
    "reference_gbps": 2.0,  # table[ids] on the host (16 threads, random rows), then to the device
    "register_gbps": 2.0,  # cudaHostRegister: the driver faults in and locks every page (1-2 GB/s reported)
    "fill_gbps": 10.0,  # the table written from the device (pinned) in chunks
    "device_copy_gbps": 20.0,  # a table copied into device memory
    "cell_overhead_s": 0.05,  # ids, events, launch glue, the check's compare
}


#: Seconds of the GPU run outside the cells: interpreter, torch and CUDA start, one NVRTC compile per
#: kernel instantiation the shapes use (a cold kernel cache), writing and plotting.
STARTUP_S = 25.0


@dataclass(frozen=True)
class Cell:
    """One measured gather of the plan.

    Attributes:
        question: what the cell helps answer (a key of :func:`questions`).
        table_gb: the table's size in GB (the dry run scales it down): the span of the table
            (of the largest size, one per memory kind) that the ids fall in.
        memory: ``small`` (4 KiB pages) or ``huge`` (2 MB pages).
        row_bytes: bytes per row.
        order: ``contiguous`` (one run of ids), ``random`` (uniform), ``sorted`` (random, sorted on
            the host) or ``device-sorted`` (random, sorted by the gather on the device, timed).
        batch: ids per gather.
        method: ``zerocopy``, ``h2d`` or ``device``.
        shape: a key of :data:`SHAPES` (``default`` for the references).
    """

    question: str
    table_gb: int
    memory: str
    row_bytes: int
    order: str
    batch: int
    method: str = "zerocopy"
    shape: str = "default"

    @property
    def key(self) -> tuple:
        """What the cell measures (its question aside): two questions may share a cell."""
        return (self.table_gb, self.memory, self.row_bytes, self.order, self.batch, self.method, self.shape)

    def as_dict(self) -> dict:
        return asdict(self)


def questions(tables: tuple[int, ...] = TABLE_GB) -> dict[str, list[Cell]]:
    """The plan's questions, most telling first, each a list of cells (duplicates across
    questions allowed: :func:`plan` keeps the first). ``tables``: the table sizes (GB) to use."""
    base_table = base_table_gb(tables)
    b, r = BASE["batch"], BASE["row_bytes"]
    q: dict[str, list[Cell]] = {}
    # 1. Translation and locality: table size x page size x id order, and the link's ceiling beside.
    q["table size x pages x order"] = [Cell("table size x pages x order", t, m, r, o, b) for t in tables for m in MEMORY for o in ORDERS[:3]] + [
        Cell("table size x pages x order", t, m, r, "contiguous", b, "h2d") for t in tables for m in MEMORY
    ]
    # 2. Row size: does the small-row gap close with 2 MB pages or sorted ids at a large table?
    q["row size"] = [Cell("row size", base_table, m, w, o, b) for w in ROW_BYTES for m in MEMORY for o in ("random", "sorted")] + [
        *(Cell("row size", base_table, m, w, "contiguous", b, "h2d") for w in ROW_BYTES for m in MEMORY),
        *(Cell("row size", base_table, "small", w, "random", b, "device") for w in ROW_BYTES),
    ]
    # 3. Kernel shapes: rows per warp (more rows and loads in flight), grid, block, the naive kernel.
    q["kernel shape"] = [Cell("kernel shape", base_table, m, w, "random", b, "zerocopy", s) for w in (128, r) for m in MEMORY for s in SHAPES]
    # 4. Sort policy: the gather's own sort against none, by row size and batch (what sort_ids="auto" decides).
    q["sort policy"] = [Cell("sort policy", base_table, "small", w, o, n) for w in ROW_BYTES for n in BATCHES for o in ("random", "device-sorted")]
    # 5. Batch: are reads in flight enough at 16k ids, does 1M change the picture?
    q["batch"] = [Cell("batch", base_table, m, r, "random", n) for n in BATCHES for m in MEMORY] + [
        Cell("batch", base_table, "small", r, "contiguous", n, "h2d") for n in BATCHES
    ]
    # 6. Device memory at each size: the GPU's own translation, without the link.
    q["device memory"] = [Cell("device memory", t, "small", r, "random", b, "device") for t in tables]
    return q


def base_table_gb(tables: tuple[int, ...]) -> int:
    """The table size the row, shape and batch questions use: 32 GB, or the largest given."""
    return BASE["table_gb"] if BASE["table_gb"] in tables else max(tables)


def plan(tables: tuple[int, ...] = TABLE_GB) -> list[Cell]:
    """Every cell of :func:`questions`, in question order, each measured once."""
    seen: set[tuple] = set()
    cells = []
    for group in questions(tables).values():
        for cell in group:
            if cell.key not in seen:
                seen.add(cell.key)
                cells.append(cell)
    return cells


def cell_seconds(cell: Cell, repeats: int, warmup: int, rates: dict = RATES) -> float:
    """Estimated GPU-run seconds of one cell: its reference (``table[ids]`` on the host), the
    check, the warm-ups and the timed repeats."""
    nbytes = cell.batch * cell.row_bytes / 1e9
    speed = rates[f"{cell.method}_gbps"]
    reference = 0.0 if cell.method == "h2d" else nbytes / rates["reference_gbps"]
    return rates["cell_overhead_s"] + reference + (1 + warmup + repeats) * nbytes / speed


def table_seconds(table_gb: int, rates: dict = RATES) -> float:
    """Estimated seconds to set up one host table of ``table_gb``: register (fault in and lock) and fill it."""
    return table_gb / rates["register_gbps"] + table_gb / rates["fill_gbps"]


def device_copy_seconds(table_gb: int, rates: dict = RATES) -> float:
    """Estimated seconds to copy one table into device memory (the ``device`` method)."""
    return table_gb / rates["device_copy_gbps"]


def prune(cells: list[Cell], budget_s: float, repeats: int, warmup: int, rates: dict = RATES) -> tuple[list[Cell], list[Cell], float]:
    """(kept, pruned, estimated seconds of the kept): cells kept in order while the estimate stays
    within ``budget_s``; the table of each memory kind (of the largest size) and the device copy
    are counted once, with the first cell that needs them. A cell that would pass the budget is
    pruned, and later, cheaper cells may still fit."""
    big = max((c.table_gb for c in cells), default=0)
    kept, pruned = [], []
    tables: set[str] = set()
    device = False
    total = 0.0
    for cell in cells:
        cost = cell_seconds(cell, repeats, warmup, rates)
        if cell.memory not in tables:
            cost += table_seconds(big, rates)
        if cell.method == "device" and not device:
            cost += device_copy_seconds(big, rates)
        if total + cost > budget_s:
            pruned.append(cell)
            continue
        total += cost
        kept.append(cell)
        tables.add(cell.memory)
        device = device or cell.method == "device"
    return kept, pruned, total


def run_order(cells: list[Cell]) -> list[Cell]:
    """The kept cells grouped so that each memory kind's table is set up once (in the order of
    :data:`MEMORY`), in plan order within it: a time limit then leaves out the least telling."""
    return sorted(cells, key=lambda c: MEMORY.index(c.memory))


def describe(kept: list[Cell], pruned: list[Cell], estimate_s: float, budget_s: float) -> str:
    """The plan as text: cells per question, the tables, the estimate against the budget."""
    lines = [f"link experiment plan: {len(kept)} cells, estimated {estimate_s:.0f} s of GPU time (budget {budget_s:.0f} s); {len(pruned)} pruned"]
    for name in dict.fromkeys(c.question for c in kept + pruned):
        mine = [c for c in kept if c.question == name]
        gone = sum(c.question == name for c in pruned)
        lines.append(f"  {name}: {len(mine)} cells" + (f" ({gone} pruned)" if gone else ""))
    big, spans = max((c.table_gb for c in kept), default=0), sorted({c.table_gb for c in kept})
    kinds = [m for m in MEMORY if any(c.memory == m for c in kept)]
    lines.append(f"  tables: {big} GB in {' and '.join(f'{m} pages' for m in kinds)}; ids spanning its first {', '.join(map(str, spans))} GB")
    return "\n".join(lines)
