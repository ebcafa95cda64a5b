"""bench/sampler/sampling.py's methods that sample the PyG way, on the CPU: each hop only from the nodes that joined at the hop before.

  pyg-cpu     dgl_zerocopy.pyg.NeighborSampler's ``sample_from_nodes``: what a NeighborLoader batch costs to
              sample (PyG's sampler class, its input handling and output, our picks)
  hops-cpu    dgl_zerocopy.sampling.cpu_hops.HopSampler alone: the picks without PyG around them (numba's
              kernels over torch's intra-op threads, its default; NumPy where numba is missing)
  hops-numpy  the same on its NumPy path alone (compiled=False): what the kernels gain
  hops-disjoint  hops-cpu with ``disjoint=True``: each seed its own tree (what temporal sampling needs)
  hops-temporal  hops-disjoint sampling by time: random edge times (sorted within each neighbourhood, spread
              over [0, 10**6)), each seed a random time drawn from torch's generator; ``temporal_strategy``
              'uniform'. Against hops-cpu: what a RelBench-style loader costs per sampled edge

Their batches differ from DGL's blocks in one way that changes the edge count: DGL's ``NeighborSampler``
samples every node of the layer before again (the seeds at every hop), PyG samples each node once, at
the hop where it joined. So a PyG batch of the same seeds and fanouts holds fewer edges than a DGL batch;
sampled edges per second compare the samplers' speed, ms per batch what a batch costs. The fanouts are
given as DGL's (input layer first) and turned around for PyG (``num_neighbors``: the seeds' hop first).

Before timing, a batch is checked (:func:`check_hops`; the disjoint methods by :func:`check_trees`): the seeds first, every node once, per hop
``min(in-degree, fanout)`` in-edges of each node that joined at the hop before (``fanout`` with
replacement), each edge an in-edge of the graph at its CSC position, each hop's new nodes exactly the
sources not seen before; ``pyg-cpu`` and ``hops-numpy`` also equal to ``hops-cpu`` for the same
``torch.manual_seed``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

HOP_METHODS = ("pyg-cpu", "hops-cpu", "hops-numpy", "hops-disjoint", "hops-temporal")
TREE_METHODS = ("hops-disjoint", "hops-temporal")
TIME_SPAN = 10**6
WHAT = {
    "pyg-cpu": "CPU measurement: dgl_zerocopy.pyg.NeighborSampler.sample_from_nodes (a NeighborLoader batch's sampling)",
    "hops-cpu": "CPU measurement: dgl_zerocopy.sampling.cpu_hops.HopSampler alone (numba's kernels where installed)",
    "hops-numpy": "CPU measurement: dgl_zerocopy.sampling.cpu_hops.HopSampler alone, its NumPy path (compiled=False)",
    "hops-disjoint": "CPU measurement: HopSampler(disjoint=True), each seed its own tree",
    "hops-temporal": "CPU measurement: HopSampler by time (random edge times, random seed times, disjoint), temporal_strategy='uniform'",
}
_NODE = "node"  # HopSampler's one node type and relation


class HopCheckError(AssertionError):
    """A PyG-layout batch that breaks the sampler's contract."""


@dataclass
class Hops:
    """A batch in PyG's layout, int64 NumPy: ``nodes`` (seeds first, then each hop's new nodes), ``row``/``col``
    (sources and destinations as indices into ``nodes``), ``pos`` (CSC positions), per-hop counts."""

    nodes: np.ndarray
    row: np.ndarray
    col: np.ndarray
    pos: np.ndarray
    nodes_per_hop: list[int]
    edges_per_hop: list[int]


def unavailable(name: str) -> str | None:
    """Why ``name`` cannot run here (``pyg-cpu`` without torch-geometric), or None."""
    if name == "pyg-cpu":
        try:
            import dgl_zerocopy.pyg  # noqa: F401
        except ImportError as e:
            return f"skipped: import dgl_zerocopy.pyg failed: {str(e).splitlines()[0]}"[:300]
    return None


def build(name: str, indptr: torch.Tensor, indices: torch.Tensor, fanouts: list[int], replace: bool):
    """``sample(seeds) -> output`` of ``name`` over the CSC ``(indptr, indices)``; ``fanouts`` as DGL's."""
    hop_fanouts = list(reversed(fanouts))
    if name.startswith("hops-"):
        from dgl_zerocopy.sampling.cpu_hops import HopSampler, Relation, torch_generator_rng

        csc = indptr.numpy().astype(np.int64, copy=False)
        relation = Relation(csc, indices.numpy(), _NODE, _NODE, times=edge_times(csc) if name == "hops-temporal" else None)
        sampler = HopSampler({_NODE: relation}, {_NODE: indptr.numel() - 1}, compiled=False if name == "hops-numpy" else None)
        disjoint = name in TREE_METHODS

        def sample(seeds: torch.Tensor):
            # The seed times are drawn first, from torch's generator: torch.manual_seed reproduces the batch.
            times = {_NODE: torch.randint(0, TIME_SPAN, (seeds.numel(),)).numpy()} if name == "hops-temporal" else None
            return sampler.sample({_NODE: seeds.numpy()}, {_NODE: hop_fanouts}, replace=replace, disjoint=disjoint, rng=torch_generator_rng(), seed_times=times)

        return sample
    from torch_geometric.data import Data
    from torch_geometric.sampler import NodeSamplerInput

    from dgl_zerocopy.pyg import NeighborSampler

    # edge_index in CSC order (sorted by destination): PyG's CSC is then ours, its positions our edge ids.
    num_nodes = indptr.numel() - 1
    dst = torch.repeat_interleave(torch.arange(num_nodes), (indptr[1:] - indptr[:-1]).long(), output_size=indices.numel())
    data = Data(edge_index=torch.stack([indices.long(), dst]), num_nodes=num_nodes)
    sampler = NeighborSampler(data, num_neighbors=hop_fanouts, replace=replace, is_sorted=True)
    return lambda seeds: sampler.sample_from_nodes(NodeSamplerInput(input_id=None, node=seeds.long()))


def edge_times(indptr: np.ndarray, seed: int = 0) -> np.ndarray:
    """Random int64 times, one per CSC position, non-decreasing within each neighbourhood and spread over
    about ``[0, TIME_SPAN)``: running sums of random steps (mean ``TIME_SPAN / degree``), restarted per
    neighbourhood, with no sort of the whole edge list."""
    deg = np.diff(indptr)
    steps = np.random.default_rng(seed).random(int(indptr[-1])) * np.repeat(2.0 * TIME_SPAN / np.maximum(deg, 1), deg)
    running = np.cumsum(steps)
    base = np.concatenate([[0.0], running])[indptr[:-1]]
    return (running - np.repeat(base, deg)).astype(np.int64)


def check_trees(name: str, indptr: torch.Tensor, indices: torch.Tensor, seeds: torch.Tensor, out, fanouts: list[int], replace: bool, seed: int) -> str:
    """Raise :class:`HopCheckError` unless ``out`` (a disjoint ``Sampled`` of ``name``, sampled after
    ``torch.manual_seed(seed)``) is a valid sample of ``seeds``: the seeds first, each its own tree; each (tree,
    node) once; each edge an in-edge at its CSC position within one tree; for ``hops-temporal`` no edge later
    than its tree's seed time, and the batch equal to the NumPy path's. Returns what was checked."""
    torch.manual_seed(seed)
    seed_time = torch.randint(0, TIME_SPAN, (seeds.numel(),)).numpy()  # as sample() draws them
    csc, indices, seeds = indptr.long().numpy(), indices.long().numpy(), seeds.long().numpy()
    times = edge_times(csc) if name == "hops-temporal" else None
    _check_trees(csc, indices, seeds, out, fanouts, times, seed_time)
    if name != "hops-temporal":
        return "batch 0: the seeds first, each its own tree, each (tree, node) once, each edge an in-edge within one tree"
    from dgl_zerocopy.sampling.cpu_hops import HopSampler, Relation, torch_generator_rng

    torch.manual_seed(seed)
    torch.randint(0, TIME_SPAN, (seeds.size,))  # the seed times, drawn as sample() draws them
    reference = HopSampler({_NODE: Relation(csc, indices, _NODE, _NODE, times=times)}, {_NODE: len(csc) - 1}, compiled=False)
    want = reference.sample(
        {_NODE: seeds}, {_NODE: list(reversed(fanouts))}, replace=replace, disjoint=True, rng=torch_generator_rng(), seed_times={_NODE: seed_time}
    )
    check_same(out, want)
    return "batch 0: as hops-disjoint, no edge later than its seed's time, equal to the NumPy path (compiled=False)"


def _check_trees(indptr, indices, seeds, out, fanouts, times, seed_time) -> None:
    nodes, batch = out.nodes[_NODE], out.batch[_NODE]
    row, col, pos = out.row[_NODE], out.col[_NODE], out.pos[_NODE]
    if not (np.array_equal(nodes[: len(seeds)], seeds) and np.array_equal(batch[: len(seeds)], np.arange(len(seeds)))):
        raise HopCheckError("the batch's first nodes are not the seeds, each its own tree")
    if len(np.unique(batch * len(indptr) + nodes)) != len(nodes):
        raise HopCheckError("a node appears twice in one tree")
    dst = nodes[col]
    if not (np.all((pos >= indptr[dst]) & (pos < indptr[dst + 1])) and np.array_equal(indices[pos], nodes[row])):
        raise HopCheckError("an edge (row, col, position) is not an in-edge of the graph")
    if not np.array_equal(batch[row], batch[col]):
        raise HopCheckError("an edge between two trees")
    if sum(out.edges_per_hop[_NODE]) != len(row) or len(out.edges_per_hop[_NODE]) != len(fanouts):
        raise HopCheckError("the per-hop edge counts do not add up")
    if times is not None and len(pos) and (times[pos] > seed_time[batch[col]]).any():
        raise HopCheckError("an edge later than its tree's seed time")


def as_hops(out) -> Hops:
    """A ``SamplerOutput`` (pyg-cpu) or a ``Sampled`` (hops-cpu) as :class:`Hops`."""
    if hasattr(out, "edges_per_hop"):
        return Hops(out.nodes[_NODE], out.row[_NODE], out.col[_NODE], out.pos[_NODE], list(out.nodes_per_hop[_NODE]), list(out.edges_per_hop[_NODE]))
    return Hops(*(t.numpy() for t in (out.node, out.row, out.col, out.edge)), list(out.num_sampled_nodes), list(out.num_sampled_edges))


def counts(out) -> tuple[list[int], int]:
    """Edges per hop, input layer (the last hop) first as DGL's blocks are, and the batch's nodes."""
    if hasattr(out, "edges_per_hop"):
        return list(reversed(out.edges_per_hop[_NODE])), len(out.nodes[_NODE])
    return list(reversed(out.num_sampled_edges)), int(out.node.numel())


def check_hops(indptr: torch.Tensor, indices: torch.Tensor, seeds: torch.Tensor, out, fanouts: list[int], replace: bool) -> None:
    """Raise :class:`HopCheckError` unless ``out`` is a valid PyG-layout sample of ``seeds`` (distinct) from the
    CSC, ``fanouts`` as DGL's (input layer first)."""
    h = as_hops(out)
    indptr, indices, seeds = indptr.long().numpy(), indices.long().numpy(), seeds.long().cpu().numpy()
    degree = np.diff(indptr)
    hop_fanouts = list(reversed(fanouts))
    if len(h.nodes_per_hop) != len(hop_fanouts) + 1 or len(h.edges_per_hop) != len(hop_fanouts):
        raise HopCheckError(f"{len(h.nodes_per_hop)} node counts and {len(h.edges_per_hop)} edge counts for {len(hop_fanouts)} hops")
    if sum(h.nodes_per_hop) != len(h.nodes) or sum(h.edges_per_hop) != len(h.row) or not len(h.row) == len(h.col) == len(h.pos):
        raise HopCheckError("the per-hop counts do not add up to the batch's nodes and edges")
    if not np.array_equal(h.nodes[: len(seeds)], seeds) or h.nodes_per_hop[0] != len(seeds):
        raise HopCheckError("the batch's first nodes are not the seeds")
    if len(np.unique(h.nodes)) != len(h.nodes):
        raise HopCheckError("a node appears twice")
    bounds, first = np.cumsum([0, *h.nodes_per_hop]), 0
    for hop, fanout in enumerate(hop_fanouts):
        last = first + h.edges_per_hop[hop]
        row, col, pos, where = h.row[first:last], h.col[first:last], h.pos[first:last], f"hop {hop + 1}"
        lo, hi = bounds[hop], bounds[hop + 1]
        if len(col) and (col.min() < lo or col.max() >= hi):
            raise HopCheckError(f"{where}: a destination that did not join at the hop before")
        dst = h.nodes[lo:hi]
        deg = degree[dst]
        want = deg if fanout == -1 else np.where(deg > 0, fanout, 0) if replace else np.minimum(deg, fanout)
        got = np.bincount(col - lo, minlength=hi - lo)
        if not np.array_equal(got, want):
            bad = int(np.flatnonzero(got != want)[0])
            raise HopCheckError(f"{where}: node {int(dst[bad])} (in-degree {int(deg[bad])}) has {int(got[bad])} sampled in-edges, expected {int(want[bad])}")
        if len(row) and (row.min() < 0 or row.max() >= bounds[hop + 2]):
            raise HopCheckError(f"{where}: a source that is not among the nodes known after this hop")
        gdst = h.nodes[col]
        if not (np.all((pos >= indptr[gdst]) & (pos < indptr[gdst + 1])) and np.array_equal(indices[pos], h.nodes[row])):
            raise HopCheckError(f"{where}: an edge (row, col, position) is not an in-edge of the graph")
        if not replace and len(np.unique(pos)) != len(pos):
            raise HopCheckError(f"{where}: an edge sampled twice without replacement")
        new = np.setdiff1d(h.nodes[row], h.nodes[: bounds[hop + 1]])
        if not np.array_equal(np.sort(h.nodes[bounds[hop + 1] : bounds[hop + 2]]), new):
            raise HopCheckError(f"{where}: the hop's new nodes are not the sources seen for the first time")
        first = last


def check_same(out, expected) -> None:
    """Raise :class:`HopCheckError` unless two PyG-layout batches are equal."""
    a, b = as_hops(out), as_hops(expected)
    for what in ("nodes", "row", "col", "pos"):
        if not np.array_equal(getattr(a, what), getattr(b, what)):
            raise HopCheckError(f"{what} differ from hops-cpu's for the same torch.manual_seed")
