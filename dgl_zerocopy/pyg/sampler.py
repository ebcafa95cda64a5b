"""PyG's ``NeighborSampler`` on our samplers: PyG's arguments and outputs, our picks.

:class:`NeighborSampler` is PyG's own class (it builds the CSC, handles input nodes and edges, negative
sampling and bidirectional subgraphs) with its one native call, ``_sample``, answered by us:

- on the CPU by :class:`dgl_zerocopy.sampling.cpu_hops.HopSampler` (numba's kernels, or NumPy alone where
  numba is missing; no pyg-lib, no torch-sparse, no compiler): homogeneous and heterogeneous graphs, ``replace``, ``disjoint``, ``subgraph_type``
  directional, bidirectional and induced; temporal sampling (``time_attr`` node- or edge-level, seed times
  from ``input_time``/``edge_label_time`` or the seeds' own times, ``temporal_strategy`` ``'uniform'`` or
  ``'last'``, disjoint trees) and weighted sampling (``weight_attr``), both with pyg-lib's semantics;
- on a GPU (``device="cuda"``) by our kernels (:class:`dgl_zerocopy.sampling.GpuNeighborSampler`) from the
  CSC pinned in host memory (``graph_placement="pinned"``, the default) or in device memory
  (``"device"``), for homogeneous graphs with directional or bidirectional subgraphs: uniform, disjoint,
  temporal (the times travel with the CSC, placed as it is) and weighted (without replacement up to
  ``MAX_WEIGHTED_FANOUT`` = 64 picks per node, refused above when the sampler is built); the batch's index
  tensors are then on that GPU. Induced subgraphs and heterogeneous graphs sample on the CPU (induced:
  logged once).

Its output is what pyg-lib's would be: per node type the seeds first, then each hop's new nodes;
``row``/``col`` the sampled edges' source and destination as local indices; ``edge`` their positions
in PyG's CSC (PyG maps them to edge ids with ``edge_permutation``) on the CPU, their edge ids on a GPU
(mapped there: PyG's map is a host tensor; ``edge_permutation`` is then None); ``num_sampled_nodes`` per
hop, seeds first; ``num_sampled_edges`` per hop.

Refused when the sampler is built, with one clear error: backward sampling, ``disjoint`` or temporal
sampling with induced subgraphs (which PyG refuses too), time and weight together (as pyg-lib), an
unknown ``temporal_strategy``, times not sorted within a neighbourhood (``is_sorted=True``), weights
negative or not finite; a ``num_neighbors`` value that is not an int in ``[-1, 2**31 - 1]``
(``ValueError`` naming it); an ``edge_index`` with an id outside its node type's range (``IndexError``
naming the edge type, the row, the position and the value), checked before PyG builds its CSC from it (a
bad destination breaks that conversion too) and remembered for the tensor until it is written, so a second
loader over the same data costs no second pass. A CSC that PyG did not sort from a checked ``edge_index``
(``is_sorted=True``, ``adj_t``, a remote ``GraphStore``) is checked when the sampler is built, naming the edge
type.
Seeds outside the graph are refused (``IndexError``) before any kernel reads them.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch_geometric.typing as pyg_typing
from torch_geometric.data import Data, HeteroData
from torch_geometric.sampler import HeteroSamplerOutput, SamplerOutput
from torch_geometric.sampler import NeighborSampler as PygNeighborSampler
from torch_geometric.sampler.base import SubgraphType

from ..data.graph_check import check_csc, check_edge_index
from ..sampling.cpu_hops import HopSampler, Relation, torch_generator_rng
from ..sampling.fanout import check_num_neighbors
from ..sampling.picks import TEMPORAL_STRATEGIES

log = logging.getLogger(__name__)

_HOMOGENEOUS = "node"  # the one node type (and relation) of a homogeneous graph, for HopSampler


class NeighborSampler(PygNeighborSampler):
    """PyG's ``NeighborSampler`` sampling with our samplers (module docstring); PyG's arguments mean
    what they mean there (our loaders build it from theirs).

    Args:
        device: Where to sample: ``None``/``"cpu"`` (NumPy and numba on the CPU) or ``"cuda"``/``"cuda:N"``
            (our kernels, for homogeneous directional or bidirectional graphs).
        graph_placement: ``"pinned"`` or ``"device"``: where the GPU reads the CSC.

    Raises:
        ValueError: for ``sample_direction="backward"``, an unknown ``graph_placement`` or
            ``temporal_strategy``, ``disjoint``/temporal sampling with induced subgraphs, ``time_attr`` with
            ``weight_attr``, an attribute the data lacks, a bad ``num_neighbors``, or a CSC that is not one.
        IndexError: for an ``edge_index`` outside its node counts.
    """

    def __init__(
        self,
        data: Any,
        num_neighbors: Any,
        subgraph_type: Any = "directional",
        replace: bool = False,
        disjoint: bool = False,
        temporal_strategy: str = "uniform",
        time_attr: str | None = None,
        weight_attr: str | None = None,
        is_sorted: bool = False,
        share_memory: bool = False,
        directed: bool = True,
        sample_direction: str = "forward",
        *,
        device: Any = None,
        graph_placement: str = "pinned",
    ) -> None:
        refuse_unsupported(time_attr=time_attr, weight_attr=weight_attr, sample_direction=sample_direction)
        if graph_placement not in ("pinned", "device"):
            raise ValueError(f"graph_placement must be 'pinned' or 'device', but got {graph_placement!r}")
        if (disjoint or time_attr is not None) and (not directed or SubgraphType(subgraph_type) == SubgraphType.induced):
            # Induced edges are found among distinct nodes: a node in two trees would join them.
            what = "disjoint=True" if disjoint else f"temporal sampling (time_attr={time_attr!r})"
            raise ValueError(f"{what} with subgraph_type='induced' is not supported (nor by PyG); use 'directional' or 'bidirectional'")
        if temporal_strategy not in TEMPORAL_STRATEGIES:
            raise ValueError(f"temporal_strategy must be one of {TEMPORAL_STRATEGIES}, but got {temporal_strategy!r}")
        if time_attr is not None and weight_attr is not None:
            raise ValueError(
                f"time_attr={time_attr!r} with weight_attr={weight_attr!r}: sampling by time and by weight at once is not supported (nor by pyg-lib)"
            )
        for role, attr in (("time_attr", time_attr), ("weight_attr", weight_attr)):
            if attr is not None and isinstance(data, Data) and attr not in data:
                raise ValueError(f"{role}={attr!r} names no attribute of the data (it has {sorted(data.keys())}); give an attribute's name")
        check_num_neighbors(num_neighbors)
        # Whether the CSC PyG builds is known good: sorted by PyG itself from edge indices checked here.
        csc_checked = check_edge_indices(data) and not is_sorted
        with warnings.catch_warnings(), _pyg_lib_modes():
            # PyG warns that sampling without pyg-lib is deprecated: it is what this class is for.
            warnings.filterwarnings("ignore", message=".*without a 'pyg-lib' installation.*")
            super().__init__(
                data,
                num_neighbors=num_neighbors,
                subgraph_type=subgraph_type,
                replace=replace,
                disjoint=disjoint,
                temporal_strategy=temporal_strategy,
                time_attr=time_attr,
                weight_attr=weight_attr,
                is_sorted=is_sorted,
                share_memory=share_memory,
                directed=directed,
            )
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.graph_placement = graph_placement
        if not csc_checked:
            # Here, in the process that builds the loader, so that its workers inherit the verdict.
            self._check_csc()
        self._hops: HopSampler | None = None
        self._gpu: Any = None
        self._gpu_graph: Any = None
        self._gpu_picks: list[Any] = []
        if self.is_temporal or self.edge_weight is not None:
            self._hop_sampler()  # the times' order and the weights are checked here, when the loader is built
        if self.edge_weight is not None and self.device.type == "cuda" and not self.is_hetero:
            from ..sampling.gpu_picks import WeightedPicks

            for fanout in self.num_neighbors.get_values():
                WeightedPicks.check_fanout(fanout, self.replace)  # the GPU kernel's limit, refused now

    def _check_csc(self) -> None:
        """Check the CSC PyG built (from an ``adj_t``, an unsorted ``edge_index`` marked sorted, a remote
        ``GraphStore``) against the node counts, naming the edge type: the samplers built later are told so."""
        fix = "check the graph's edges and node counts (a GraphStore's size, is_sorted=True only for edges sorted by destination)"
        if not self.is_hetero:
            num_nodes = int(self.num_nodes)
            check_csc(self.colptr, self.row, num_nodes, name="the graph's CSC (built by PyG)", num_dst_nodes=num_nodes, fix=fix)
            return
        for edge_type in self.edge_types:
            rel = self.to_rel_type[edge_type]
            if edge_type[0] not in self.num_nodes or edge_type[-1] not in self.num_nodes:
                continue  # a node type without a count: HopSampler refuses the relation, naming it
            num_src, num_dst = int(self.num_nodes[edge_type[0]]), int(self.num_nodes[edge_type[-1]])
            name = f"the CSC of edge type {edge_type!r} (built by PyG)"
            check_csc(self.colptr_dict[rel], self.row_dict[rel], num_src, name=name, num_dst_nodes=num_dst, fix=fix)

    # -- PyG's one native call -------------------------------------------------------------------

    def _sample(self, seed: Any, seed_time: Any = None, **kwargs: Any) -> SamplerOutput | HeteroSamplerOutput:
        if isinstance(seed, dict):
            return self._sample_hetero(seed, self._seed_times(seed, seed_time))
        if self._gpu_route():
            return self._sample_on_gpu(seed, seed_time)
        return self._sample_homogeneous(seed, self._seed_times({_HOMOGENEOUS: seed}, {_HOMOGENEOUS: seed_time} if seed_time is not None else None))

    def _seed_times(self, seeds: dict, seed_time: dict | None) -> dict | None:
        """Each seed's time, as pyg-lib takes it: the given ``seed_time`` (``input_time``,
        ``edge_label_time``), else the seeds' own node times; None where nothing samples by time."""
        if not self.is_temporal:
            return None
        if seed_time is not None:
            return {t: _numpy(times) for t, times in seed_time.items()}
        if self.node_time is None:
            raise ValueError("edge-level temporal sampling needs a time per seed: pass input_time (NeighborLoader) or edge_label_time (LinkNeighborLoader)")
        node_time = self.node_time if self.is_hetero else {_HOMOGENEOUS: self.node_time}
        missing = [t for t, ids in seeds.items() if t not in node_time and len(ids)]
        if missing:
            raise ValueError(f"node type(s) {missing} have no {'time'!r} attribute for their seeds' times; pass input_time")
        return {t: _numpy(node_time[t])[_numpy(ids)] for t, ids in seeds.items() if t in node_time}

    # -- CPU ---------------------------------------------------------------------------------------

    def _hop_sampler(self) -> HopSampler:
        # Built on first use, in the process that samples (after a worker's fork): views of PyG's CSC.
        if self._hops is None:
            if self.is_hetero:
                relations = {}
                for edge_type in self.edge_types:
                    rel = self.to_rel_type[edge_type]
                    row = _numpy(self.row_dict[rel])
                    times, weights = self._per_position(rel, edge_type[0], row)
                    relations[edge_type] = Relation(_numpy(self.colptr_dict[rel]), row, edge_type[0], edge_type[-1], times, weights)
                self._hops = HopSampler(relations, dict(self.num_nodes), checked=True)
            else:
                row = _numpy(self.row)
                times, weights = self._per_position(None, None, row)
                relation = Relation(_numpy(self.colptr), row, _HOMOGENEOUS, _HOMOGENEOUS, times, weights)
                self._hops = HopSampler({_HOMOGENEOUS: relation}, {_HOMOGENEOUS: int(self.num_nodes)}, checked=True)
        return self._hops

    def _per_position(self, rel: str | None, src_type: Any, row: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
        """A relation's times and weights, one per CSC position (PyG sorted its CSC by them and permuted
        the edge-level ones): a node-level time is its source's, read once here so that it travels with
        the CSC and a cut-off is a binary search over contiguous memory."""

        def of_relation(values: Any) -> Any:  # PyG keys its edge-level dicts by relation name
            return values if values is None or rel is None else values.get(rel)

        times = None
        if self.node_time is not None:
            node_time = self.node_time if rel is None else self.node_time.get(src_type)
            times = None if node_time is None else _numpy(node_time)[row]
        elif self.edge_time is not None:
            edge_time = of_relation(self.edge_time)
            times = None if edge_time is None else _numpy(edge_time)
        weights = of_relation(self.edge_weight)
        return times, None if weights is None else _numpy(weights)

    def _sample_hops(self, seeds: dict, fanouts: dict, seed_times: dict | None) -> Any:
        return self._hop_sampler().sample(
            seeds,
            fanouts,
            replace=self.replace,
            disjoint=self.disjoint,
            rng=torch_generator_rng(),
            seed_times=seed_times,
            temporal_strategy=self.temporal_strategy,
        )

    def _sample_homogeneous(self, seed: torch.Tensor, seed_times: dict | None = None) -> SamplerOutput:
        hops = self._hop_sampler()
        fanouts = {_HOMOGENEOUS: list(self.num_neighbors.get_values())}
        induced = self.subgraph_type == SubgraphType.induced
        out = self._sample_hops({_HOMOGENEOUS: _numpy(seed)}, fanouts, seed_times)
        nodes = out.nodes[_HOMOGENEOUS]
        row, col, pos = out.row[_HOMOGENEOUS], out.col[_HOMOGENEOUS], out.pos[_HOMOGENEOUS]
        if induced:
            rows, cols, poss = hops.induced_edges({_HOMOGENEOUS: nodes})
            row, col, pos = rows[_HOMOGENEOUS], cols[_HOMOGENEOUS], poss[_HOMOGENEOUS]
        return SamplerOutput(
            node=_tensor(nodes),
            row=_tensor(row),
            col=_tensor(col),
            edge=_tensor(pos),
            batch=_tensor(out.batch[_HOMOGENEOUS]) if out.batch is not None else None,
            num_sampled_nodes=out.nodes_per_hop[_HOMOGENEOUS],
            num_sampled_edges=[len(row)] if induced else out.edges_per_hop[_HOMOGENEOUS],
        )

    def _sample_hetero(self, seed: dict, seed_times: dict | None = None) -> HeteroSamplerOutput:
        hops = self._hop_sampler()
        values = self.num_neighbors.get_values(self.edge_types)
        fanouts = {edge_type: list(values[edge_type]) for edge_type in self.edge_types}
        seeds = {node_type: _numpy(ids) for node_type, ids in seed.items()}
        out = self._sample_hops(seeds, fanouts, seed_times)
        row, col, pos = out.row, out.col, out.pos
        num_sampled_edges = out.edges_per_hop
        if self.subgraph_type == SubgraphType.induced:
            row, col, pos = hops.induced_edges(out.nodes)
            num_sampled_edges = {edge_type: [len(row[edge_type])] for edge_type in row}
        return HeteroSamplerOutput(
            node={t: _tensor(ids) for t, ids in out.nodes.items()},
            row={e: _tensor(v) for e, v in row.items()},
            col={e: _tensor(v) for e, v in col.items()},
            edge={e: _tensor(v) for e, v in pos.items()},
            batch={t: _tensor(b) for t, b in out.batch.items()} if out.batch is not None else None,
            num_sampled_nodes=out.nodes_per_hop,
            num_sampled_edges=num_sampled_edges,
        )

    # -- GPU ---------------------------------------------------------------------------------------

    def _gpu_route(self) -> bool:
        """Whether this batch samples with the kernels: a CUDA device, and a case they cover."""
        if self.device.type != "cuda" or self.is_hetero:
            return False
        if self.subgraph_type == SubgraphType.induced:
            if not getattr(self, "_told_cpu", False):
                log.info("induced subgraphs sample on the CPU (the GPU sampler gives directional blocks)")
                self._told_cpu = True
            return False
        return True

    @property
    def edge_permutation(self) -> Any:
        """PyG's map from CSC positions to edge ids; None on the GPU route, whose ``edge`` are edge ids
        already (PyG would index its host map with device positions)."""
        return None if self._gpu_route() else self.perm

    def _sample_on_gpu(self, seed: torch.Tensor, seed_time: Any = None) -> SamplerOutput:
        times = self._seed_times({_HOMOGENEOUS: seed}, {_HOMOGENEOUS: seed_time} if seed_time is not None else None)
        seed_times = None if times is None else torch.from_numpy(np.ascontiguousarray(times[_HOMOGENEOUS]))
        return sample_with_blocks(self._gpu_sampler(), self._gpu_graph_for(), seed, self.num_neighbors.get_values(), seed_time=seed_times)

    def _gpu_sampler(self) -> Any:
        if self._gpu is None:
            from ..sampling.gpu_picks import TemporalPicks, WeightedPicks
            from ..sampling.neighbor import GpuNeighborSampler

            # The times and weights per CSC position, placed as the CSC is (built once, closed with it).
            times, weights = self._per_position(None, None, _numpy(self.row))
            place = dict(placement=self.graph_placement, device=self.device)
            temporal = TemporalPicks(self.colptr, times, self.temporal_strategy, **place) if self.is_temporal else None
            weighted = WeightedPicks(self.colptr, weights, **place) if weights is not None else None
            self._gpu_picks = [rule for rule in (temporal, weighted) if rule is not None]
            # DGL's order (the input layer first, the seeds' fanout last): PyG's hops reversed; each node's
            # in-edges sampled once, at its hop (expand_once), as PyG's hops are.
            fanouts = list(reversed(self.num_neighbors.get_values()))
            self._gpu = GpuNeighborSampler(
                fanouts,
                replace=self.replace,
                device=self.device,
                placement=self.graph_placement,
                expand_once=True,
                disjoint=self.disjoint,
                temporal=temporal,
                weighted=weighted,
            )
        return self._gpu

    def _gpu_graph_for(self) -> Any:
        if self._gpu_graph is None:
            from ..sampling.graph import SamplingGraph

            # PyG's perm as the graph's edge ids: the blocks' EID are PyG's edge ids, read on the device.
            self._gpu_graph = SamplingGraph(self.colptr, self.row, self.perm, placement=self.graph_placement, device=self.device, checked=True)
        return self._gpu_graph

    def close(self) -> None:
        """Give back what the GPU route holds (the pinned or device CSC)."""
        if self._gpu_graph is not None:
            self._gpu_graph.close()
            self._gpu_graph = None
        for rule in self._gpu_picks:
            rule.close()
        self._gpu, self._gpu_picks = None, []

    def __getstate__(self) -> dict:
        # A worker process builds its own scratch arrays and GPU state.
        state = dict(self.__dict__)
        state["_hops"] = state["_gpu"] = state["_gpu_graph"] = None
        state["_gpu_picks"] = []
        return state


def sample_with_blocks(block_sampler: Any, graph: Any, seed: torch.Tensor, fanouts: list[int], *, seed_time: Any = None) -> SamplerOutput:
    """PyG's output from a block sampler's ``sample_blocks(graph, seed)`` (DGL's layout: input layer first,
    each block's sources beginning with its destinations, so that the input block's sources number every
    node as PyG does: seeds first, then each hop's new nodes). ``edge`` holds the blocks' edge ids: the
    graph's ``eids`` (PyG's edge ids for a graph built with PyG's ``perm``), or its CSC positions.

    A PyG hop samples only the nodes that joined at the hop before. A sampler built with ``expand_once=True``
    (the GPU route's) gives no in-edges to destinations an earlier layer expanded: its batch reads the device
    once (once more per fanout -1 layer). With another, a block samples every destination and its edges into
    nodes an earlier hop expanded are dropped here (one host read per layer after the first), so that no node
    gets in-edges twice; a node that only those edges reached stays in ``node``, without edges.
    A ``disjoint`` sampler's trees give ``batch``; ``seed_time`` (one per seed) goes to a temporal sampler."""
    from ..sampling.blocks import EID
    from ..sampling.neighbor import TREE

    _, _, blocks = block_sampler.sample_blocks(graph, seed, **({} if seed_time is None else {"seed_time": seed_time}))
    disjoint = getattr(block_sampler, "disjoint", False)
    if not blocks:
        empty = torch.empty(0, dtype=torch.long, device=seed.device)
        batch = torch.arange(seed.numel(), device=seed.device) if disjoint else None
        return SamplerOutput(node=seed.long(), row=empty, col=empty, edge=empty, batch=batch, num_sampled_nodes=[seed.numel()], num_sampled_edges=[])
    reexpands = not getattr(block_sampler, "expand_once", False)
    rows, cols, edges, per_hop, counts = [], [], [], [seed.numel()], []
    expanded = 0  # destinations (a prefix) whose in-edges an earlier hop gave
    for block in reversed(blocks):  # output layer (hop 1) first
        indptr = block.indptr.long()
        num_dst = indptr.numel() - 1
        degrees = indptr[1:] - indptr[:-1]
        col = torch.repeat_interleave(torch.arange(num_dst, device=indptr.device), degrees, output_size=block.indices.numel())
        row, edge = block.indices.long(), block.edata[EID].long()
        first = int(indptr[expanded]) if expanded and reexpands else 0  # edges are grouped by destination: a suffix stays
        rows.append(row[first:])
        cols.append(col[first:])
        edges.append(edge[first:])
        per_hop.append(block.num_src_nodes() - num_dst)
        counts.append(block.indices.numel() - first)
        expanded = num_dst
    return SamplerOutput(
        node=blocks[0].srcdata["_ID"].long(),
        batch=blocks[0].srcdata[TREE] if disjoint else None,
        row=torch.cat(rows),
        col=torch.cat(cols),
        edge=torch.cat(edges),
        num_sampled_nodes=per_hop,
        num_sampled_edges=counts,
    )


def check_edge_indices(data: Any) -> bool:
    """Refuse a ``Data``/``HeteroData`` whose ``edge_index`` names a node outside its type's range, before PyG
    converts it (its conversion writes counts at the destinations' ids). Returns True when every edge type's
    structure is an ``edge_index`` and was checked here; False where some is not (``adj_t``, a remote
    backend, a node type without a count): then the CSC PyG builds is checked when the sampler is built.

    Raises:
        IndexError: an id outside ``[0, num_nodes)`` of its type, named with the edge type, row, position and value.
        ValueError / TypeError: an ``edge_index`` not of shape ``[2, num_edges]`` or not of an integer dtype.
    """
    if isinstance(data, Data):
        stores = [(None, data._store, data.num_nodes, data.num_nodes)]
    elif isinstance(data, HeteroData):
        stores = [(edge_type, data[edge_type], data[edge_type[0]].num_nodes, data[edge_type[-1]].num_nodes) for edge_type in data.edge_types]
    else:
        return False
    complete = True
    for edge_type, store, num_src, num_dst in stores:
        edge_index = store.get("edge_index") if "adj" not in store and "adj_t" not in store else None
        if edge_index is None or num_src is None or num_dst is None or type(edge_index) is not torch.Tensor:
            complete = False  # another structure (or a subclass PyG converts its own way): checked as a CSC
            continue
        name = "edge_index" if edge_type is None else f"data[{edge_type!r}].edge_index"
        sizes = f"num_nodes={num_src}" if edge_type is None else f"{num_src} {edge_type[0]!r} and {num_dst} {edge_type[-1]!r} nodes"
        fix = f"drop or renumber those edges, or give the right node count ({sizes} now)"
        check_edge_index(edge_index, int(num_src), int(num_dst), name=name, fix=fix)
    return complete


def refuse_unsupported(*, time_attr: Any = None, weight_attr: Any = None, sample_direction: str = "forward", input_time: Any = None) -> None:
    """One clear error for what our samplers do not do, when the loader is built (never a wrong batch).
    Temporal and weighted sampling are done (``time_attr``, ``input_time`` and ``weight_attr`` are taken
    for the loaders' calls); backward sampling is refused."""
    if sample_direction != "forward":
        raise ValueError(f"sample_direction={sample_direction!r} is not supported by dgl_zerocopy.pyg; sample 'forward' (in-edges)")


@contextlib.contextmanager
def _pyg_lib_modes() -> Iterator[None]:
    """While PyG's constructor runs: tell it that the native sampler (ours) does edge-level times and
    weights, which it otherwise refuses without pyg-lib (its flags name pyg-lib's versions)."""
    names = ("WITH_EDGE_TIME_NEIGHBOR_SAMPLE", "WITH_WEIGHTED_NEIGHBOR_SAMPLE")
    saved = {name: getattr(pyg_typing, name) for name in names}
    try:
        for name in names:
            setattr(pyg_typing, name, True)
        yield
    finally:
        for name, value in saved.items():
            setattr(pyg_typing, name, value)


def _numpy(t: Any) -> np.ndarray:
    return t.numpy() if isinstance(t, torch.Tensor) else np.asarray(t)


def _tensor(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))
