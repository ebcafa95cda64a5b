"""A PCIe request model of the gather kernels, computed from emulated load addresses.

The paper's argument (Min et al., VLDB 2021) made measurable without hardware: how many PCIe read
requests, and how many bytes over the link, a gather costs per useful byte, naive kernel against
aligned kernel, for any row width.

Model (each assumption is a simplification of the real GPU and link):

1. **Requests.** The GPU coalesces one warp-wide load instruction (the active lanes' loads at the
   same load site, :class:`dgl_zerocopy.cuda.gather.emulator.Trace` ``(warp, slot)``) into one memory request
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
   requests and the host memory system are not modelled here (they are the fitted link model's:
   :mod:`dgl_zerocopy.cuda.gather.link_model`).
5. **Compressed rows** (:func:`compare_codecs`). The link carries ``fetched + requests * 24``
   bytes per row of codes (plus, for int8 with a per-row scale held in host memory, the request
   and sector of that row's (scale, offset) pair); the GPU delivers the row as fp32
   (``4 * columns`` bytes). The *fp32-equivalent bandwidth* on a link of ``LINK_GBPS`` is
   ``LINK_GBPS * 4 * columns / link bytes per row``: the fp32 gather bandwidth that would deliver
   the same rows per second, assuming the link is the bottleneck (the decode costs a few
   instructions per element; the GPU has them to spare at PCIe rates).
6. **Hot-row cache** (:func:`compare_cached`). Only loads inside host memory count
   (:attr:`Trace.host_ranges`: the table and per-row pairs in pinned host memory); the fused
   kernel's reads of cached rows (and of the cached rows' pairs) are device memory and cost the
   link nothing; nor does the slot map lookup (device memory, not traced). A warp instruction that
   mixes hit and miss rows is charged only the lines its host loads touch. ``useful_bytes`` is
   then the missed rows' bytes: what still had to cross the link.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np

from dgl_zerocopy.cuda.gather import gather_plan, instantiations
from dgl_zerocopy.cuda.gather.emulator import Trace, emulate_decode, emulate_gather

__all__ = [
    "CODEC_VARIANTS",
    "CacheMetrics",
    "LINE_BYTES",
    "LINK_GBPS",
    "SECTOR_BYTES",
    "TLP_OVERHEAD_BYTES",
    "CodecMetrics",
    "PcieMetrics",
    "analyze",
    "compare",
    "compare_cached",
    "compare_codecs",
    "count_distinct",
]

logger = logging.getLogger(__name__)

LINE_BYTES = gather_plan.LINE_BYTES
SECTOR_BYTES = 32
TLP_OVERHEAD_BYTES = 24
#: Modelled link bandwidth (GB/s): PCIe Gen4 x16 as a GPU reads host memory, about 25 GB/s.
LINK_GBPS = 25.0
#: The stored forms :func:`compare_codecs` models: the fp32 table, then each codec
#: (``int8/column``: one (scale, offset) per column, in device memory; ``int8/row``: one per row,
#: in pinned host memory).
CODEC_VARIANTS = ("fp32", "fp16", "bf16", "int8/column", "int8/row")


class _Metrics:
    """A row of metrics: a frozen dataclass that also reads as a plain dict (for CSV/JSON)."""

    def as_dict(self) -> dict[str, float | int | str]:
        """The metrics as a plain dict (for CSV/JSON)."""
        return asdict(self)


@dataclass(frozen=True)
class PcieMetrics(_Metrics):
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


def count_distinct(*columns: np.ndarray) -> int:
    """Number of distinct rows of the given equally long integer columns (a row: one value from
    each column at the same position); 0 for empty columns. The request model counts a warp's
    distinct (instruction, line) pairs with it."""
    if columns[0].size == 0:
        return 0
    order = np.lexsort(columns[::-1])
    changed = np.zeros(order.size - 1, dtype=bool)
    for column in columns:
        ordered = column[order]
        changed |= ordered[1:] != ordered[:-1]
    return int(changed.sum()) + 1


def analyze(trace: Trace) -> PcieMetrics:
    """Apply the request model to the host loads of one emulated gather (those inside
    ``trace.host_ranges``; a hot-row cache's device reads are left out)."""
    trace = trace.subset(trace.host_mask())
    first = trace.address
    last = trace.address + trace.nbytes.astype(np.int64) - 1
    # A load crossing a line (or sector) boundary counts in both; aligned loads never cross.
    warp = np.concatenate([trace.warp, trace.warp])
    slot = np.concatenate([trace.slot, trace.slot])
    lines = np.concatenate([first, last]) // LINE_BYTES
    sectors = np.concatenate([first, last]) // SECTOR_BYTES
    requests = count_distinct(warp, slot, lines)
    fetched = count_distinct(warp, slot, sectors) * SECTOR_BYTES
    instructions = count_distinct(trace.warp, trace.slot)
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
        link_efficiency=useful / (fetched + requests * TLP_OVERHEAD_BYTES) if useful and requests else 0.0,
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
        raise ValueError(f"row_bytes must be a positive multiple of {dtype.itemsize} ({dtype}), but got {row_bytes}")
    if num_rows < 1 or num_ids < 0:
        raise ValueError(f"num_rows must be >= 1 and num_ids >= 0, but got {num_rows}, {num_ids}")
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=num_rows * row_bytes, dtype=np.uint8)
    table = raw.view(dtype).reshape(num_rows, row_bytes // dtype.itemsize)
    if ids is None:
        ids = rng.integers(0, num_rows, size=num_ids, dtype=np.int64)
    expected = table[ids]
    results = {}
    for variant in instantiations.VARIANTS[::-1]:
        out, trace = emulate_gather(table, ids, variant=variant, base_offset=base_offset, trace=True)
        if out.tobytes() != expected.tobytes():
            raise RuntimeError(f"emulated {variant} gather of {row_bytes}-byte rows returned wrong rows")
        results[variant] = analyze(trace)
    logger.debug("row %d B: naive %.2f req/row, aligned %.2f req/row", row_bytes, results["naive"].requests_per_row, results["aligned"].requests_per_row)
    return results


@dataclass(frozen=True)
class CodecMetrics(_Metrics):
    """Modelled PCIe cost of gathering rows stored in one form, and the fp32-equivalent bandwidth
    it delivers (module docstring, point 5). Per-row figures are averages over the gathered rows.

    Attributes:
        codec: a name of :data:`CODEC_VARIANTS`.
        columns: elements per row.
        num_ids: rows gathered.
        stored_row_bytes: bytes of one stored row (codes; ``4 * columns`` for fp32).
        vector_bytes: bytes per load the plan chose for the stored row.
        requests_per_row: read requests per row, the (scale, offset) pairs' included.
        pair_requests_per_row: of those, the requests for per-row (scale, offset) pairs.
        fetched_bytes_per_row: payload bytes per row (32-byte sectors).
        link_bytes_per_row: ``fetched + 24 * requests`` per row: what crosses the link.
        fp32_bytes_per_row: ``4 * columns``: the row as the GPU delivers it.
        link_gbps: the modelled link bandwidth.
        fp32_equivalent_gbps: ``link_gbps * fp32_bytes_per_row / link_bytes_per_row``.
        vs_fp32: ``fp32_equivalent_gbps`` over the fp32 table's (1.0 for fp32; NaN when fp32 was
            not modelled alongside).
    """

    codec: str
    columns: int
    num_ids: int
    stored_row_bytes: int
    vector_bytes: int
    requests_per_row: float
    pair_requests_per_row: float
    fetched_bytes_per_row: float
    link_bytes_per_row: float
    fp32_bytes_per_row: int
    link_gbps: float
    fp32_equivalent_gbps: float
    vs_fp32: float = float("nan")


#: Decodes gathered stored rows (and their ids) to float32, as the kernels do.
_Decode = Callable[[np.ndarray, np.ndarray], np.ndarray]


def _stored_form(codec: str, values: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, dict, _Decode]:
    """``values`` stored as ``codec`` (a name of :data:`CODEC_VARIANTS`): the stored table, the
    emulator's keyword arguments for it, and the decode of gathered rows to float32."""
    code, _, axis = codec.partition("/")
    if code == "fp32":
        return values, {}, lambda rows, ids: rows
    if code == "fp16":
        return values.astype(np.float16), {"code": "fp16"}, lambda rows, ids: rows.astype(np.float32)
    if code == "bf16":
        codes = (values.view(np.uint32) >> 16).astype(np.uint16)  # truncated: any bits will do
        return codes, {"code": "bf16"}, lambda rows, ids: (rows.astype(np.uint32) << 16).view(np.float32)
    num_rows, columns = values.shape
    codes = rng.integers(-128, 128, size=(num_rows, columns), dtype=np.int8)
    length = columns if axis == "column" else num_rows
    scale = rng.uniform(0.001, 0.1, length).astype(np.float32)
    offset = rng.standard_normal(length).astype(np.float32)

    def decode(rows: np.ndarray, ids: np.ndarray) -> np.ndarray:
        k = np.arange(columns)[None, :] if axis == "column" else ids[:, None]
        return rows.astype(np.float32) * scale[k] + offset[k]

    return codes, dict(code="int8", scale=scale, offset=offset, affine=axis), decode


def _emulate_checked(stored: np.ndarray, options: dict, decode: _Decode, ids: np.ndarray, what: str, **cache) -> tuple[np.ndarray, Trace]:
    """Run the kernel for a stored table (raw gather for fp32, else the decoding gather) with a
    trace, and check its rows against the NumPy decode. Raises RuntimeError on wrong rows."""
    if options:
        out, trace = emulate_decode(stored, ids, **options, trace=True, **cache)
    else:
        out, trace = emulate_gather(stored, ids, trace=True, **cache)
    if out.tobytes() != np.ascontiguousarray(decode(stored[ids], ids), dtype=np.float32).tobytes():
        raise RuntimeError(f"emulated {what} returned wrong rows")
    return out, trace


def _codec_metrics(codec: str, columns: int, trace: Trace, link_gbps: float) -> CodecMetrics:
    whole = analyze(trace)
    inside = (trace.address >= trace.table_address) & (trace.address < trace.table_address + trace.table_bytes)
    pairs = analyze(trace.subset(~inside))  # host pairs only: analyze leaves device loads out
    n = max(trace.num_ids, 1)
    link = (whole.fetched_bytes + TLP_OVERHEAD_BYTES * whole.requests) / n
    fp32_bytes = 4 * columns
    return CodecMetrics(
        codec=codec,
        columns=columns,
        num_ids=trace.num_ids,
        stored_row_bytes=trace.plan.row_bytes,
        vector_bytes=trace.plan.vector_bytes,
        requests_per_row=whole.requests / n,
        pair_requests_per_row=pairs.requests / n,
        fetched_bytes_per_row=whole.fetched_bytes / n,
        link_bytes_per_row=link,
        fp32_bytes_per_row=fp32_bytes,
        link_gbps=link_gbps,
        fp32_equivalent_gbps=link_gbps * fp32_bytes / link if link else 0.0,
    )


def compare_codecs(
    columns: int,
    *,
    codecs: tuple[str, ...] = CODEC_VARIANTS,
    num_ids: int = 256,
    num_rows: int = 1024,
    base_offset: int = 0,
    seed: int = 0,
    ids: np.ndarray | None = None,
    link_gbps: float = LINK_GBPS,
) -> dict[str, CodecMetrics]:
    """Model gathering the same random rows of a ``(num_rows, columns)`` table stored as each of
    ``codecs`` (:data:`CODEC_VARIANTS`), decoded to float32 by the kernels on the emulator.

    Each table (fp32 values, or random codes with random scales) starts ``base_offset`` bytes past
    a 128-byte boundary; every output is checked against a NumPy decode before its trace is used.

    Returns:
        ``{codec: CodecMetrics}`` in the order of ``codecs``; ``vs_fp32`` is filled when
        ``"fp32"`` is among them.

    Raises:
        ValueError: an unknown codec or bad sizes.
        RuntimeError: an emulated kernel returned wrong rows (a kernel bug).
    """
    if unknown := [c for c in codecs if c not in CODEC_VARIANTS]:
        raise ValueError(f"codecs must be among {CODEC_VARIANTS}, but got {unknown[0]!r}")
    if columns < 1 or num_rows < 1 or num_ids < 0:
        raise ValueError(f"columns and num_rows must be >= 1 and num_ids >= 0, but got {columns}, {num_rows}, {num_ids}")
    rng = np.random.default_rng(seed)
    if ids is None:
        ids = rng.integers(0, num_rows, size=num_ids, dtype=np.int64)
    values = rng.standard_normal((num_rows, columns), dtype=np.float32)
    results: dict[str, CodecMetrics] = {}
    for codec in codecs:
        stored, options, decode = _stored_form(codec, values, rng)
        _, trace = _emulate_checked(stored, options, decode, ids, f"{codec} gather of {columns} columns", base_offset=base_offset)
        results[codec] = _codec_metrics(codec, columns, trace, link_gbps)
    if "fp32" in results:
        base = results["fp32"].fp32_equivalent_gbps
        results = {c: replace(m, vs_fp32=m.fp32_equivalent_gbps / base if base else float("nan")) for c, m in results.items()}
    return results


@dataclass(frozen=True)
class CacheMetrics(_Metrics):
    """Modelled PCIe cost of one fused cached gather against the same gather without a cache
    (module docstring, point 6).

    Attributes:
        codec: how the table is stored (a name of :data:`CODEC_VARIANTS`); the cache holds the
            same stored rows (codes for a compressed table).
        columns: elements per row.
        num_ids: rows gathered.
        hits: rows read from the cache (device memory).
        hit_rate: ``hits / num_ids`` (0.0 for no ids).
        requests: host read requests of the cached gather.
        fetched_bytes: host bytes it fetched (32-byte sectors).
        link_bytes: ``fetched_bytes + 24 * requests``.
        miss_bytes: the missed rows' stored bytes (with a per-row (scale, offset) pair in host
            memory, the pairs the gather still reads from host are not in it).
        uncached_requests, uncached_fetched_bytes, uncached_link_bytes: the same ids without a cache.
        link_bytes_saved: ``1 - link_bytes / uncached_link_bytes`` (0.0 for no ids).
    """

    codec: str
    columns: int
    num_ids: int
    hits: int
    hit_rate: float
    requests: int
    fetched_bytes: int
    link_bytes: int
    miss_bytes: int
    uncached_requests: int
    uncached_fetched_bytes: int
    uncached_link_bytes: int
    link_bytes_saved: float


def _mixed_ids(rng: np.random.Generator, cached: np.ndarray, uncached: np.ndarray, num_ids: int, hit_rate: float) -> np.ndarray:
    """``num_ids`` ids of which ``round(hit_rate * num_ids)`` are cached rows, the rest not, shuffled;
    distinct where there are enough rows (a minibatch's input nodes are distinct)."""
    hits = round(hit_rate * num_ids)
    for needed, rows, kind in ((hits, cached, "cached"), (num_ids - hits, uncached, "uncached")):
        if needed and not rows.size:
            raise ValueError(f"hit_rate={hit_rate} needs {kind} rows, but there are none")
    ids = np.concatenate(
        [rng.choice(cached, hits, replace=hits > cached.size), rng.choice(uncached, num_ids - hits, replace=num_ids - hits > uncached.size)]
    ).astype(np.int64)
    return rng.permutation(ids)


def compare_cached(
    columns: int,
    hit_rates: Sequence[float] = (0.0, 0.25, 0.5, 0.75, 1.0),
    *,
    codec: str = "fp32",
    num_ids: int = 256,
    num_rows: int = 1024,
    cached_rows: int | None = None,
    base_offset: int = 0,
    seed: int = 0,
) -> dict[float, CacheMetrics]:
    """Model the fused cached gather at each hit rate against the uncached gather of the same ids.

    A ``(num_rows, columns)`` table stored as ``codec`` starts ``base_offset`` bytes past a
    128-byte boundary; ``cached_rows`` random rows (default a quarter) are copied to the cache, in
    slot order, with an int32 slot map (for int8 per row, with their (scale, offset) pairs, as the
    zero-copy backend caches them). For each hit rate ``h``, ``round(h * num_ids)`` ids are drawn
    from the cached rows and the rest from the others (without repeats where there are enough
    rows, as a minibatch's input nodes), shuffled; both kernels' rows are checked
    against a NumPy decode before their traces are analysed.

    Returns:
        ``{hit_rate: CacheMetrics}`` in the order of ``hit_rates``.

    Raises:
        ValueError: an unknown codec, a hit rate outside [0, 1], or bad sizes (a hit rate that
            needs cached or uncached rows where there are none).
        RuntimeError: an emulated kernel returned wrong rows (a kernel bug).
    """
    if codec not in CODEC_VARIANTS:
        raise ValueError(f"codec must be one of {CODEC_VARIANTS}, but got {codec!r}")
    if columns < 1 or num_rows < 1 or num_ids < 0:
        raise ValueError(f"columns and num_rows must be >= 1 and num_ids >= 0, but got {columns}, {num_rows}, {num_ids}")
    if bad := [h for h in hit_rates if not 0.0 <= h <= 1.0]:
        raise ValueError(f"hit rates must lie in [0, 1], but got {bad[0]!r}")
    cached_rows = num_rows // 4 if cached_rows is None else cached_rows
    if not 0 <= cached_rows <= num_rows:
        raise ValueError(f"cached_rows must lie in [0, num_rows={num_rows}], but got {cached_rows}")
    rng = np.random.default_rng(seed)
    values = rng.standard_normal((num_rows, columns), dtype=np.float32)
    stored, options, decode = _stored_form(codec, values, rng)
    order = rng.permutation(num_rows)
    cached, uncached = np.sort(order[:cached_rows]), np.sort(order[cached_rows:])
    slot_map = np.full(num_rows, -1, dtype=np.int32)
    slot_map[cached] = np.arange(cached_rows, dtype=np.int32)
    cache = dict(cache_rows=np.ascontiguousarray(stored[cached]), slot_map=slot_map)
    results: dict[float, CacheMetrics] = {}
    for hit_rate in hit_rates:
        ids = _mixed_ids(rng, cached, uncached, num_ids, hit_rate)
        what = f"{codec} gather of {columns} columns at hit rate {hit_rate}"
        _, with_cache = _emulate_checked(stored, options, decode, ids, f"cached {what}", base_offset=base_offset, **cache)
        _, without = _emulate_checked(stored, options, decode, ids, what, base_offset=base_offset)
        host, base = analyze(with_cache), analyze(without)
        link = host.fetched_bytes + TLP_OVERHEAD_BYTES * host.requests
        base_link = base.fetched_bytes + TLP_OVERHEAD_BYTES * base.requests
        results[hit_rate] = CacheMetrics(
            codec=codec,
            columns=columns,
            num_ids=num_ids,
            hits=with_cache.hits,
            hit_rate=with_cache.hits / num_ids if num_ids else 0.0,
            requests=host.requests,
            fetched_bytes=host.fetched_bytes,
            link_bytes=link,
            miss_bytes=with_cache.useful_bytes,
            uncached_requests=base.requests,
            uncached_fetched_bytes=base.fetched_bytes,
            uncached_link_bytes=base_link,
            link_bytes_saved=1.0 - link / base_link if base_link else 0.0,
        )
    return results
