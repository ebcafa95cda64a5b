"""A link model of the zero-copy gather, fitted to the committed H200 figures: reads in flight
(Little's law) and address-translation misses.

The request model (:mod:`~dgl_zerocopy.cuda.gather.pcie_model`) counts what crosses the link; it
cannot say why 64-512 B rows reached half a pinned copy on an H200 while 1-4 KB rows reached 0.85,
nor why sorting ids helped. This model predicts GB/s, and it reproduces every committed zero-copy
figure of ``bench/results/gpu/h200-2026-11-27/`` within 15 % (tests/cuda/test_link_model.py reads them).

Model (each point an assumption; the constants are :data:`FITTED`, and
``python bench/pcie/link_model.py --fit`` fits them again):

1. **Time of one gather call**: ``call_s + sort + bytes / rate``; ``call_s`` is the fixed cost of a
   call as the benchmark times it (launch, host glue), ``sort = sort_s + sort_s_per_id * ids`` when
   the gather sorts its ids (the measured sort: CuPy's argsort and a gather of the ids).
2. **Little's law on the device**: a warp holds :func:`warp_bytes_in_flight` bytes of reads at a time
   (aligned kernel: its rows per warp times up to ``ZC_STEPS_IN_FLIGHT`` windows of each row, the
   loads ``kernels/gather.cu`` issues before their stores; naive kernel: one load instruction,
   ``32 * element`` bytes). With ``warps`` such warps in flight and each read waiting ``latency``,
   ``rate = warps * bytes_in_flight / latency``. ``warps`` is fitted per kernel (the aligned kernel's
   are a quarter of the naive one's: lower occupancy would explain it, unmeasured); ``latency_s`` is assumed (a PCIe round
   trip to host memory, 1.5 us): the figures fix only ``warps / latency``.
3. **Translation misses**: a read whose page translation misses waits
   ``latency * (1 + miss_penalty)``. Random ids over a table of ``S`` bytes miss with probability
   ``miss_share = 1 - reach_bytes / S`` (0 for a table within the reach: the translations the GPU
   and the host IOMMU keep). Sorted ids miss once per ``translation_bytes`` span the batch touches
   (assumed 2 MiB; at the measured 2 GB table any span from 4 KiB to 2 MiB fits the figures).
   ``latency = latency_s * (1 + miss_penalty * miss_share)``.
4. **The link**: at most ``link_gbps / (1 + host_miss_cost * miss_share)``: what the link delivers
   to SM reads, lowered where translations miss (host-side walks).
5. ``rate`` is the lower of points 2-3 and 4; ``bound`` says which.

What the figures do not identify: every committed figure is of fp32 rows from one table per run
(0.25 GB quick run, 2 GB full runs), so ``reach_bytes`` rests on two table sizes and the model
predicts the loss from 2 GB to 57 GB only through ``miss_share`` (0.92 to 0.997); the table-size
question of ``bench/gathering/link_experiment.py`` measures it. Shapes other than the one measured
(one window per row: :func:`~dgl_zerocopy.cuda.gather.gather_plan.fewest_threads_per_row`) are
extrapolations through point 2. Two fitted constants are loose (:data:`LOOSE`): halved or doubled,
the figures still agree within 15 %, so what rests on them (the gain of sorting at the link's limit)
is a weak prediction. Figures whose own quartiles spread by more than
:data:`NOISE_LIMIT` of their median cannot hold a model to 15 %: :func:`compare` marks them.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from dgl_zerocopy.cuda.gather import gather_plan

__all__ = [
    "FITTED",
    "FITTED_NAMES",
    "LOOSE",
    "MEASURED_METHODS",
    "NOISE_LIMIT",
    "STEPS_IN_FLIGHT",
    "LinkConstants",
    "LinkEstimate",
    "MeasuredCell",
    "compare",
    "estimate",
    "estimate_plan",
    "miss_share",
    "read_measurements",
    "warp_bytes_in_flight",
]

#: ``ZC_STEPS_IN_FLIGHT`` of ``kernels/gather.cu``: loads of one row a lane issues before their stores.
STEPS_IN_FLIGHT = 4
#: A measured figure whose interquartile range exceeds this share of its median is too noisy to hold the model to.
NOISE_LIMIT = 0.15
#: The benchmark's methods the model predicts: (kernel variant, id order).
MEASURED_METHODS = {"zerocopy": ("aligned", "random"), "zerocopy-naive": ("naive", "random"), "zerocopy+sort_ids": ("aligned", "sorted")}
ORDERS = ("random", "sorted")


@dataclass(frozen=True)
class LinkConstants:
    """The model's constants (module docstring, points 1-4); ``FITTED`` holds the fitted ones.

    Attributes:
        call_s: fixed seconds of one gather call.
        aligned_warps, naive_warps: warps in flight of each kernel (fitted over ``latency_s``).
        latency_s: seconds one read waits without a translation miss (assumed, not fitted).
        miss_penalty: a translation miss lengthens a read's wait by this share of ``latency_s``.
        reach_bytes: table bytes whose translations stay cached: random ids miss with
            probability ``1 - reach_bytes / table_bytes``.
        translation_bytes: span of one translation for sorted ids (assumed, not fitted).
        link_gbps: GB/s the link delivers to SM reads without misses.
        host_miss_cost: the link delivers ``link_gbps / (1 + host_miss_cost * miss_share)``.
        sort_s, sort_s_per_id: seconds of sorting a batch: ``sort_s + sort_s_per_id * ids``.
    """

    call_s: float
    aligned_warps: float
    naive_warps: float
    latency_s: float
    miss_penalty: float
    reach_bytes: float
    translation_bytes: float
    link_gbps: float
    host_miss_cost: float
    sort_s: float
    sort_s_per_id: float

    def as_dict(self) -> dict[str, float]:
        """The constants as a plain dict (for JSON)."""
        return asdict(self)


#: Fitted (minimax relative error over the committed zero-copy figures that are not noisy) by
#: ``python bench/pcie/link_model.py --fit``; ``latency_s`` and ``translation_bytes`` assumed.
FITTED = LinkConstants(
    call_s=2.009e-4,
    aligned_warps=174.6,
    naive_warps=676.7,
    latency_s=1.5e-6,
    miss_penalty=1.1,
    reach_bytes=1.577e8,
    translation_bytes=float(2 << 20),
    link_gbps=50.44,
    host_miss_cost=0.1071,
    sort_s=3.491e-4,
    sort_s_per_id=5.472e-10,
)
#: Fitted constants the figures fix only loosely: halved or doubled, every held figure still agrees
#: within 15 % (the sorted figures, the only ones that see them, are few and near the link's limit).
LOOSE = ("host_miss_cost", "sort_s_per_id")
#: The constants :func:`compare` holds the fit to (the others are assumed).
FITTED_NAMES = ("call_s", "aligned_warps", "naive_warps", "miss_penalty", "reach_bytes", "link_gbps", "host_miss_cost", "sort_s", "sort_s_per_id")


def warp_bytes_in_flight(plan: gather_plan.GatherPlan) -> float:
    """Bytes of reads one warp of ``plan`` holds in flight at a time (module docstring, point 2)."""
    if plan.variant == "naive":
        return float(gather_plan.WARP_SIZE * plan.vector_bytes)
    rows_per_warp = gather_plan.WARP_SIZE // plan.threads_per_row
    return float(rows_per_warp * min(plan.row_bytes, STEPS_IN_FLIGHT * plan.window_bytes))


def miss_share(order: str, num_ids: int, table_bytes: float, constants: LinkConstants = FITTED) -> float:
    """Share of reads that wait for a translation miss (module docstring, point 3).

    Raises:
        ValueError: an unknown order or a table of no bytes.
    """
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, but got {order!r}")
    if table_bytes <= 0:
        raise ValueError(f"table_bytes must be positive, but got {table_bytes!r}")
    if order == "random":
        return max(0.0, 1.0 - constants.reach_bytes / table_bytes)
    if num_ids == 0:
        return 0.0
    spans = max(1.0, table_bytes / constants.translation_bytes)
    touched = spans * -math.expm1(-num_ids / spans)  # expected distinct spans of uniform sorted ids
    return min(1.0, touched / num_ids)


@dataclass(frozen=True)
class LinkEstimate:
    """The model's figures for one gather.

    Attributes:
        gbps: useful bytes per second of the whole call (as the benchmark reports).
        seconds: the call's seconds (fixed cost, sort, transfer).
        rate_gbps: GB/s of the transfer alone.
        bound: ``"reads in flight"`` or ``"link"``: which limit sets ``rate_gbps``.
        miss_share: share of reads waiting for a translation miss.
        warp_bytes_in_flight: the plan's bytes in flight per warp.
        threads_per_row: the shape's lanes per row (aligned; naive: elements per row).
    """

    gbps: float
    seconds: float
    rate_gbps: float
    bound: str
    miss_share: float
    warp_bytes_in_flight: float
    threads_per_row: int


def estimate(
    row_bytes: int,
    num_ids: int,
    table_bytes: float,
    *,
    variant: str = "aligned",
    order: str = "random",
    threads_per_row: int | None = None,
    elem_size: int = 4,
    constants: LinkConstants = FITTED,
) -> LinkEstimate:
    """The model's GB/s for gathering ``num_ids`` rows of ``row_bytes`` from a pinned host table of
    ``table_bytes`` with the kernel shape of :func:`~dgl_zerocopy.cuda.gather.gather_plan.plan_gather`
    (``variant``, ``threads_per_row``; a 128-byte-aligned table). ``order="sorted"``: the gather
    sorts the ids itself (its sort time counts).

    Raises:
        ValueError: bad sizes, order or shape (as ``plan_gather`` raises them).
    """
    plan = gather_plan.plan_gather(row_bytes, 0, num_ids, variant=variant, elem_size=elem_size, threads_per_row=threads_per_row)
    return estimate_plan(plan, table_bytes, order=order, constants=constants)


def estimate_plan(plan: gather_plan.GatherPlan, table_bytes: float, *, order: str = "random", constants: LinkConstants = FITTED) -> LinkEstimate:
    """:func:`estimate` for the launch ``plan`` (its rows, ids and shape), from a table of ``table_bytes``.

    Raises:
        ValueError: an unknown order or a table of no bytes.
    """
    num_ids, row_bytes, variant = plan.num_ids, plan.row_bytes, plan.variant
    share = miss_share(order, num_ids, table_bytes, constants)
    warps = constants.aligned_warps if variant == "aligned" else constants.naive_warps
    in_flight = warp_bytes_in_flight(plan)
    device = warps * in_flight / (constants.latency_s * (1.0 + constants.miss_penalty * share)) / 1e9
    link = constants.link_gbps / (1.0 + constants.host_miss_cost * share)
    rate = min(device, link)
    nbytes = num_ids * row_bytes
    sort = constants.sort_s + constants.sort_s_per_id * num_ids if order == "sorted" else 0.0
    seconds = constants.call_s + sort + nbytes / (rate * 1e9)
    return LinkEstimate(
        gbps=nbytes / seconds / 1e9,
        seconds=seconds,
        rate_gbps=rate,
        bound="link" if link <= device else "reads in flight",
        miss_share=share,
        warp_bytes_in_flight=in_flight,
        threads_per_row=plan.threads_per_row,
    )


@dataclass(frozen=True)
class MeasuredCell:
    """One committed zero-copy figure (fp32 rows).

    Attributes:
        source: the file's name. method: a key of :data:`MEASURED_METHODS`.
        row_bytes, batch: bytes per row and ids per gather. table_bytes: the table's bytes.
        gbps: the median; spread: ``(q3 - q1) / median``.
    """

    source: str
    method: str
    row_bytes: int
    batch: int
    table_bytes: int
    gbps: float
    spread: float


def read_measurements(path: str | Path, *, rows: int | None = None, table_gb: float | None = None) -> list[MeasuredCell]:
    """The zero-copy figures of :data:`MEASURED_METHODS` in one committed result: a CSV of
    ``bench/gathering/gather.py`` (its ``table_rows`` column gives each table) or a GPU-check
    summary JSON (``figures.gather``), whose tables need ``rows`` and ``table_gb`` (the gather's
    ``--rows`` and ``--table-gb``: a table holds ``min(rows, table_gb * 1e9 // row_bytes)`` rows).

    Raises:
        ValueError: a JSON summary without ``rows`` and ``table_gb``, or a file of another kind.
    """
    path = Path(path)
    if path.suffix == ".csv":
        with path.open() as f:
            records = list(csv.DictReader(line for line in f if not line.startswith("#")))
    elif path.suffix == ".json":
        if rows is None or table_gb is None:
            raise ValueError(f"{path.name}: a summary's figures name no table; pass rows= and table_gb= (the gather's --rows, --table-gb)")
        records = json.loads(path.read_text())["figures"]["gather"]
    else:
        raise ValueError(f"{path.name}: expected a gather CSV or a GPU-check summary JSON")
    cells = []
    for record in records:
        if record["method"] not in MEASURED_METHODS or record.get("dtype", "fp32") != "fp32" or record.get("status", "ok") != "ok":
            continue
        row_bytes = int(record["row_bytes"])
        table_rows = int(record["table_rows"]) if record.get("table_rows") else min(int(rows), int(table_gb * 1e9 // row_bytes))
        median = float(record["gbps_median"])
        spread = (float(record["gbps_q3"]) - float(record["gbps_q1"])) / median
        cells.append(MeasuredCell(path.name, record["method"], row_bytes, int(record["batch"]), table_rows * row_bytes, median, spread))
    return cells


def compare(cells: Iterable[MeasuredCell], constants: LinkConstants = FITTED, shape: str = "measured") -> list[dict]:
    """The model beside each measured figure: one dict per cell with ``model_gbps``, ``error``
    (model / measured - 1) and ``held`` (False for a figure noisier than :data:`NOISE_LIMIT`).
    ``shape="measured"`` models the shape the committed runs launched (one window per row)."""
    out = []
    for cell in cells:
        variant, order = MEASURED_METHODS[cell.method]
        lanes = None
        if variant == "aligned" and shape == "measured":
            lanes = gather_plan.fewest_threads_per_row(cell.row_bytes, gather_plan.plan_gather(cell.row_bytes, 0, 1, elem_size=4).vector_bytes)
        model = estimate(cell.row_bytes, cell.batch, cell.table_bytes, variant=variant, order=order, threads_per_row=lanes, constants=constants)
        out.append(
            {
                **asdict(cell),
                "model_gbps": model.gbps,
                "error": model.gbps / cell.gbps - 1.0,
                "held": cell.spread <= NOISE_LIMIT,
                "bound": model.bound,
                "miss_share": model.miss_share,
                "warp_bytes_in_flight": model.warp_bytes_in_flight,
            }
        )
    return out
