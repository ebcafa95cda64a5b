"""A PCIe request model of the gather kernels, computed from emulated load addresses.

The paper's argument (Min et al., VLDB 2021) made measurable without hardware: how many PCIe read
requests, and how many bytes over the link, a gather costs per useful byte, naive kernel against
aligned kernel, for any row width.

Model (each assumption is a simplification of the real GPU and link):

1. **Requests.** The GPU coalesces one warp-wide load instruction (the active lanes' loads at the
   same load site, :class:`dgl_zerocopy.emulator.Trace` ``(warp, slot)``) into one memory request
   per distinct 128-byte line it touches; a request to pinned host memory becomes one PCIe read
   request. Requests of different instructions are never merged, even for the same line (the GPU
   L2 does not cache system-memory reads across instructions in this model).
2. **Bytes fetched.** A request fetches only the 32-byte sectors its instruction touches in that
   line; the completion carries ``32 * sectors`` bytes of payload (sectors need not be
   contiguous; a real GPU may then split the read, which this model does not charge).
3. **Overhead.** Each request costs one completion TLP with ``TLP_OVERHEAD_BYTES = 24`` bytes of
   header and framing (12-16 B TLP header, 2 B sequence number, 4 B LCRC, 2 B framing, rounded);
   completions are not split at the read completion boundary, and the upstream read-request
   TLPs, flow-control and ACK/NAK DLLPs are ignored.
4. **Efficiency.** ``link_efficiency = useful / (fetched + requests * 24)``: the fraction of
   downstream link bytes that carry requested feature bytes. It is an upper bound on the share of
   the link's raw bandwidth a gather can turn into features; latency, the number of outstanding
   requests and the host memory system are not modelled.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

import numpy as np

from dgl_zerocopy import launch
from dgl_zerocopy.emulator import Trace, emulate_gather

__all__ = [
    "LINE_BYTES",
    "SECTOR_BYTES",
    "TLP_OVERHEAD_BYTES",
    "PcieMetrics",
    "analyze",
    "compare",
]

logger = logging.getLogger(__name__)

LINE_BYTES = launch.LINE_BYTES
SECTOR_BYTES = 32
TLP_OVERHEAD_BYTES = 24


@dataclass(frozen=True)
class PcieMetrics:
    """Modelled PCIe cost of one gather (see the module docstring for the model).

    Attributes:
        variant: kernel variant.
        row_bytes: bytes per row.
        num_ids: rows gathered.
        vector_bytes: bytes per load in the plan.
        instructions: warp-wide load instructions with at least one active lane.
        requests: 128-byte-line read requests.
        fetched_bytes: bytes moved, at 32-byte sector granularity.
        useful_bytes: ``num_ids * row_bytes``.
        requests_per_row: ``requests / num_ids``.
        bytes_per_useful_byte: ``fetched_bytes / useful_bytes``.
        link_efficiency: ``useful / (fetched + requests * TLP_OVERHEAD_BYTES)``.
    """

    variant: str
    row_bytes: int
    num_ids: int
    vector_bytes: int
    instructions: int
    requests: int
    fetched_bytes: int
    useful_bytes: int
    requests_per_row: float
    bytes_per_useful_byte: float
    link_efficiency: float

    def as_dict(self) -> dict[str, float | int | str]:
        """The metrics as a plain dict (for CSV/JSON)."""
        return asdict(self)


def _count_distinct(*columns: np.ndarray) -> int:
    """Number of distinct rows of the given equally long integer columns."""
    if columns[0].size == 0:
        return 0
    order = np.lexsort(columns[::-1])
    changed = np.zeros(order.size - 1, dtype=bool)
    for column in columns:
        ordered = column[order]
        changed |= ordered[1:] != ordered[:-1]
    return int(changed.sum()) + 1


def analyze(trace: Trace) -> PcieMetrics:
    """Apply the request model to the loads of one emulated gather."""
    first = trace.address
    last = trace.address + trace.nbytes.astype(np.int64) - 1
    # A load crossing a line (or sector) boundary counts in both; aligned loads never cross.
    warp = np.concatenate([trace.warp, trace.warp])
    slot = np.concatenate([trace.slot, trace.slot])
    lines = np.concatenate([first, last]) // LINE_BYTES
    sectors = np.concatenate([first, last]) // SECTOR_BYTES
    requests = _count_distinct(warp, slot, lines)
    fetched = _count_distinct(warp, slot, sectors) * SECTOR_BYTES
    instructions = _count_distinct(trace.warp, trace.slot)
    useful = trace.useful_bytes
    return PcieMetrics(
        variant=trace.plan.variant,
        row_bytes=trace.plan.row_bytes,
        num_ids=trace.num_ids,
        vector_bytes=trace.plan.vector_bytes,
        instructions=instructions,
        requests=requests,
        fetched_bytes=fetched,
        useful_bytes=useful,
        requests_per_row=requests / trace.num_ids if trace.num_ids else 0.0,
        bytes_per_useful_byte=fetched / useful if useful else 0.0,
        link_efficiency=useful / (fetched + requests * TLP_OVERHEAD_BYTES) if useful else 0.0,
    )


def compare(
    row_bytes: int,
    *,
    dtype: np.dtype | str = "float32",
    num_ids: int = 256,
    num_rows: int = 1024,
    base_offset: int = 0,
    seed: int = 0,
    ids: np.ndarray | None = None,
) -> dict[str, PcieMetrics]:
    """Model the naive and the aligned kernel gathering the same random rows.

    Builds a ``(num_rows, row_bytes // itemsize)`` table of ``dtype`` placed ``base_offset`` bytes
    past a 128-byte boundary, draws ``num_ids`` uniform random ids (or takes ``ids``), checks that
    both kernels return ``table[ids]``, and analyses their traces.

    Returns:
        ``{"naive": PcieMetrics, "aligned": PcieMetrics}``.

    Raises:
        ValueError: ``row_bytes`` not a positive multiple of the dtype's size, or bad sizes.
        RuntimeError: an emulated kernel returned wrong rows (a kernel bug).
    """
    dtype = np.dtype(dtype)
    if row_bytes <= 0 or row_bytes % dtype.itemsize:
        raise ValueError(
            f"row_bytes must be a positive multiple of {dtype.itemsize} ({dtype}), "
            f"but got {row_bytes}"
        )
    if num_rows < 1 or num_ids < 0:
        raise ValueError(f"num_rows must be >= 1 and num_ids >= 0, but got {num_rows}, {num_ids}")
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=num_rows * row_bytes, dtype=np.uint8)
    table = raw.view(dtype).reshape(num_rows, row_bytes // dtype.itemsize)
    if ids is None:
        ids = rng.integers(0, num_rows, size=num_ids, dtype=np.int64)
    expected = table[ids]
    results = {}
    for variant in launch.VARIANTS[::-1]:
        out, trace = emulate_gather(
            table, ids, variant=variant, base_offset=base_offset, trace=True
        )
        if out.tobytes() != expected.tobytes():
            raise RuntimeError(
                f"emulated {variant} gather of {row_bytes}-byte rows returned wrong rows"
            )
        results[variant] = analyze(trace)
    logger.debug(
        "row %d B: naive %.2f req/row, aligned %.2f req/row",
        row_bytes,
        results["naive"].requests_per_row,
        results["aligned"].requests_per_row,
    )
    return results
