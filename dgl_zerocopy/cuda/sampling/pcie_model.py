"""PCIe request model of sampling from a CSC in pinned host memory: link requests and bytes per
sampled edge, from the loads the emulated kernels make.

The model is the gather's (:mod:`dgl_zerocopy.cuda.gather.pcie_model`): one request per distinct
128-byte line per warp-wide load instruction (instructions never merge), bytes fetched at 32-byte
sector granularity, 24 bytes of completion overhead per request; link bytes = fetched + 24 x
requests. What crosses the link when sampling one layer (:func:`model_layers`):

- ``indptr``: the bounds pass, two adjacent offsets per seed read by two lanes of one instruction;
- ``indices``: the fetch pass, one id per sampled edge (the picks themselves are chosen from the
  degree alone, in device memory);
- edge ids, only when asked for: ``eids[pos]`` with the zero-copy gather (``gather_aligned`` of
  one-id rows, :func:`dgl_zerocopy.cuda.gather.emulator.emulate_gather`), counted apart.

For comparison, ``scan_*``: what reading each seed's whole neighbour list would cost (warp-
coalesced, every line of ``[lo, lo + deg)`` once): a sampler that scans its hubs.

Snapshot sampling with the snapshot in device memory (:func:`model_refresh`,
:func:`snapshot_link_per_edge`): a batch reads no PCIe at all (the kernels read the snapshot in device
memory); what crosses the link is the refresh, ``sample_csc`` over the pinned full CSC with fanout
``snapshot_size`` at the nodes to redraw (their ``indptr`` bounds and ``min(deg, snapshot_size)``
indices each, by the same kernels as a layer) plus those picks' edge ids (the zero-copy gather of
one-id rows) and the upload of the node list (a bulk copy, ``id bytes`` a node, no request overhead
counted), amortized over the edges an epoch samples.

:func:`products_like_csc` draws a graph with ogbn-products' degree shape (mean in-degree 50.5,
median about 25, a heavy tail clipped at products' largest degree, 17,481), neighbours drawn in
proportion to degree as in a symmetric graph, so frontiers lean to hubs as products' do. The model
counts requests and bytes; it predicts no time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch

from dgl_zerocopy.cuda.gather.emulator import emulate_gather
from dgl_zerocopy.cuda.gather.pcie_model import LINE_BYTES, SECTOR_BYTES, TLP_OVERHEAD_BYTES, analyze, count_distinct
from dgl_zerocopy.cuda.sampling.api import SampledCSC
from dgl_zerocopy.cuda.sampling.emulator import SampleTrace, emulate_sample

__all__ = ["CscReads", "LayerMetrics", "RefreshMetrics", "model_layers", "model_refresh", "products_like_csc", "snapshot_link_per_edge", "totals"]

#: ogbn-products: 2,449,029 nodes, 123,718,280 stored (directed) edges, largest in-degree 17,481.
PRODUCTS_AVG_DEGREE = 123_718_280 / 2_449_029
PRODUCTS_MAX_DEGREE = 17_481


def products_like_csc(
    num_nodes: int = 200_000, *, avg_degree: float = PRODUCTS_AVG_DEGREE, sigma: float = 1.2, dtype: torch.dtype = torch.int64, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """An in-edge CSC ``(indptr, indices)`` with log-normal degrees of mean ``avg_degree`` (clipped
    to 1 .. :data:`PRODUCTS_MAX_DEGREE`) and sources drawn in proportion to degree."""
    gen = np.random.default_rng(seed)
    mu = np.log(avg_degree) - sigma**2 / 2
    deg = np.clip(np.rint(gen.lognormal(mu, sigma, num_nodes)), 1, PRODUCTS_MAX_DEGREE).astype(np.int64)
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(deg, out=indptr[1:])
    indices = np.searchsorted(indptr[1:], gen.random(int(indptr[-1])) * indptr[-1], side="right")
    return torch.from_numpy(indptr).to(dtype), torch.from_numpy(indices).to(dtype)


@dataclass(frozen=True, kw_only=True)
class CscReads:
    """Modelled link reads of one emulated ``sample_csc`` launch: requests and fetched bytes of its
    offsets (``indptr_*``), sources (``indices_*``) and the picks' edge ids (``eid_*``, 0 when not read)."""

    indptr_requests: int
    indptr_fetched: int
    indices_requests: int
    indices_fetched: int
    eid_requests: int
    eid_fetched: int

    @property
    def requests(self) -> int:
        return self.indptr_requests + self.indices_requests + self.eid_requests

    @property
    def fetched(self) -> int:
        return self.indptr_fetched + self.indices_fetched + self.eid_fetched


def _csc_reads(trace: SampleTrace, sampled: SampledCSC, eids: np.ndarray | None) -> dict[str, int]:
    """:class:`CscReads`' fields of the launch traced in ``trace`` that returned ``sampled``; the
    picks' edge ids read from ``eids`` (one column), unless None."""
    reads = {}
    for name, where in (("indptr", trace.indptr_range), ("indices", trace.indices_range)):
        reads[f"{name}_requests"], reads[f"{name}_fetched"] = _requests_and_bytes(trace, trace.within(where))
    reads["eid_requests"] = reads["eid_fetched"] = 0
    if eids is not None and len(sampled.pos):
        reads["eid_requests"], reads["eid_fetched"] = _edge_id_cost(eids, sampled.pos.numpy())
    return reads


@dataclass(frozen=True)
class LayerMetrics(CscReads):
    """Modelled link traffic of sampling one layer (``scan_*``: a whole-list scan, for comparison).

    ``useful_bytes``: the ids delivered (``edges * id bytes``, plus two offsets per seed, plus
    ``edges * id bytes`` for edge ids when asked for).
    """

    layer: int
    fanout: int
    seeds: int
    edges: int
    id_bytes: int
    variant: str
    edge_ids: bool
    scan_requests: int
    scan_fetched: int
    useful_bytes: int

    @property
    def link_bytes(self) -> int:
        return self.fetched + TLP_OVERHEAD_BYTES * self.requests

    def as_dict(self) -> dict[str, float | int | str | bool]:
        row = asdict(self)
        row.update(requests=self.requests, fetched=self.fetched, link_bytes=self.link_bytes)
        return row


def _requests_and_bytes(trace: SampleTrace, mask: np.ndarray) -> tuple[int, int]:
    """(requests, fetched bytes) of the loads selected by ``mask``."""
    first = trace.address[mask]
    last = first + trace.nbytes[mask].astype(np.int64) - 1
    launch, warp, slot = (np.concatenate([a[mask], a[mask]]) for a in (trace.launch, trace.warp, trace.slot))
    ends = np.concatenate([first, last])  # a load crossing a line or sector counts in both
    return count_distinct(launch, warp, slot, ends // LINE_BYTES), count_distinct(launch, warp, slot, ends // SECTOR_BYTES) * SECTOR_BYTES


def _scan_cost(indptr: torch.Tensor, seeds: np.ndarray, id_bytes: int, base: int) -> tuple[int, int]:
    """Requests and sector bytes to read every seed's whole list once, coalesced."""
    ptr = indptr.numpy().astype(np.int64)
    lo, hi = ptr[seeds], ptr[seeds + 1]
    has = hi > lo
    first, last = base + lo[has] * id_bytes, base + hi[has] * id_bytes - 1
    lines = int((last // LINE_BYTES - first // LINE_BYTES + 1).sum())
    sectors = int((last // SECTOR_BYTES - first // SECTOR_BYTES + 1).sum())
    return lines, sectors * SECTOR_BYTES


def _edge_id_cost(eids: np.ndarray, pos: np.ndarray) -> tuple[int, int]:
    """Requests and fetched bytes of the zero-copy gather of the picks' edge ids ``eids[pos]`` (``eids``: the
    edge-id array as one column), run by the gather's emulator, whose rows are checked first."""
    taken, trace = emulate_gather(eids, pos, trace=True)
    if not np.array_equal(taken[:, 0], eids[pos, 0]):
        raise RuntimeError("the emulated edge-id gather returned other ids than eids[pos]; the gather emulator is broken")
    metrics = analyze(trace)
    return metrics.requests, metrics.fetched_bytes


def _line_aligned(tensor: torch.Tensor) -> torch.Tensor:
    """A copy of ``tensor`` whose first element starts a 128-byte line (reproducible counts)."""
    nbytes = tensor.numel() * tensor.element_size()
    raw = np.empty(nbytes + LINE_BYTES, dtype=np.uint8)
    start = (-raw.ctypes.data) % LINE_BYTES
    out = torch.from_numpy(raw[start : start + nbytes]).view(tensor.dtype)
    out.copy_(tensor)
    return out


def _next_seeds(seeds: np.ndarray, src: np.ndarray) -> np.ndarray:
    """The next layer's seeds as DGL's to_block orders them: this layer's, then new sources."""
    _, first = np.unique(src, return_index=True)
    new = src[np.sort(first)]
    return np.concatenate([seeds, new[~np.isin(new, seeds)]])


def model_layers(
    indptr: torch.Tensor,
    indices: torch.Tensor,
    fanouts: tuple[int, ...] = (15, 10, 5),
    *,
    batch_size: int = 1024,
    edge_ids: bool = False,
    variant: str = "flat",
    seed: int = 0,
) -> list[LayerMetrics]:
    """Sample one minibatch as DGL's NeighborSampler(fanouts) does (the last fanout first, from
    ``batch_size`` random seeds; each next layer from the previous one's destination and new
    source nodes) with the emulated kernels, and model each layer's link traffic.

    Args:
        indptr, indices: a CPU CSC (int32 or int64; edge ids take ``indices``' dtype, as in DGL);
            modelled at 128-byte-aligned addresses (copied there), as the edge ids are.
        variant: the fetch pass's threads: ``"flat"`` (a thread per edge, what runs) or
            ``"per_seed"``.
        edge_ids: also model reading ``eids[pos]`` (a zero-copy gather of one-id rows).
    """
    gen = np.random.default_rng(seed)
    indptr, indices = _line_aligned(indptr), _line_aligned(indices)  # both on a line, as in the table
    num_nodes = len(indptr) - 1
    seeds = gen.choice(num_nodes, size=min(batch_size, num_nodes), replace=False).astype(np.int64)
    id_bytes = indices.element_size()
    eids = np.arange(len(indices), dtype=indices.numpy().dtype).reshape(-1, 1) if edge_ids else None
    layers = []
    for layer, fanout in enumerate(reversed(fanouts)):
        ids = torch.from_numpy(seeds).to(indices.dtype)
        *out, trace = emulate_sample(indptr, indices, ids, fanout, seed=seed + layer, trace=True, fetch_variant=variant)
        sampled = SampledCSC(*out)
        edges = len(sampled.src)
        scan_req, scan_bytes = _scan_cost(indptr, seeds, id_bytes, trace.indices_range[0])
        useful = edges * id_bytes * (2 if edge_ids else 1) + len(seeds) * 2 * indptr.element_size()
        reads = _csc_reads(trace, sampled, eids)
        layers.append(LayerMetrics(layer, fanout, len(seeds), edges, id_bytes, variant, edge_ids, scan_req, scan_bytes, useful, **reads))
        seeds = _next_seeds(seeds, sampled.src.numpy().astype(np.int64))
    return layers


def totals(layers: list[LayerMetrics]) -> dict[str, float]:
    """Per sampled edge over all layers: requests, fetched, link and useful bytes; and the link
    bytes of a sampler that scans every seed's whole list instead of reading its picks (the same
    indptr and edge-id reads)."""
    edges = sum(m.edges for m in layers)
    requests = sum(m.requests for m in layers)
    fetched = sum(m.fetched for m in layers)
    scan = sum(m.scan_fetched + m.indptr_fetched + m.eid_fetched + TLP_OVERHEAD_BYTES * (m.scan_requests + m.indptr_requests + m.eid_requests) for m in layers)
    return {
        "edges": edges,
        "seeds": sum(m.seeds for m in layers),
        "requests_per_edge": requests / edges,
        "fetched_per_edge": fetched / edges,
        "link_bytes_per_edge": (fetched + TLP_OVERHEAD_BYTES * requests) / edges,
        "useful_bytes_per_edge": sum(m.useful_bytes for m in layers) / edges,
        "indptr_link_share": sum(m.indptr_fetched + TLP_OVERHEAD_BYTES * m.indptr_requests for m in layers) / (fetched + TLP_OVERHEAD_BYTES * requests),
        "scan_link_bytes_per_edge": scan / edges,
    }


# -- snapshot sampling: the refresh ------------------------------------------------------------------


@dataclass(frozen=True)
class RefreshMetrics(CscReads):
    """Modelled link traffic of redrawing the snapshot of ``nodes`` nodes (``picks`` in-edges in all)."""

    nodes: int
    picks: int
    id_bytes: int
    upload_bytes: int  # the node list, host to device (a bulk copy)

    @property
    def link_bytes(self) -> int:
        return self.fetched + TLP_OVERHEAD_BYTES * self.requests + self.upload_bytes

    @property
    def link_bytes_per_node(self) -> float:
        return self.link_bytes / self.nodes if self.nodes else 0.0


def model_refresh(indptr: torch.Tensor, indices: torch.Tensor, nodes: np.ndarray, size: int, *, seed: int = 0) -> RefreshMetrics:
    """The link traffic of redrawing the snapshot of ``nodes`` (distinct node ids) from the full CSC
    ``(indptr, indices)`` in pinned host memory (modelled at 128-byte-aligned addresses): what
    :class:`~dgl_zerocopy.sampling.GpuSnapshotSampler`'s refresh reads, ``sample_csc`` with fanout
    ``size`` at ``nodes`` (emulated, traced) and the picks' edge ids (``indices``' dtype, a
    zero-copy gather), plus the node list's upload."""
    indptr, indices = _line_aligned(indptr), _line_aligned(indices)
    ids = torch.from_numpy(np.asarray(nodes, dtype=np.int64)).to(indices.dtype)
    *out, trace = emulate_sample(indptr, indices, ids, size, seed=seed, trace=True)
    sampled = SampledCSC(*out)
    reads = _csc_reads(trace, sampled, np.arange(len(indices), dtype=indices.numpy().dtype).reshape(-1, 1))
    id_bytes = indices.element_size()
    return RefreshMetrics(len(ids), len(sampled.src), id_bytes, len(ids) * id_bytes, **reads)


def snapshot_link_per_edge(refresh: RefreshMetrics, refreshed_per_epoch: int, edges_per_epoch: float) -> float:
    """Link bytes per sampled edge of snapshot sampling with the snapshot in device memory: the
    batches read none; an epoch's refresh (``refreshed_per_epoch`` nodes, each costing what ``refresh``
    measured per node) spread over the ``edges_per_epoch`` edges the epoch's batches sample."""
    return refresh.link_bytes_per_node * refreshed_per_epoch / edges_per_epoch if edges_per_epoch else 0.0
