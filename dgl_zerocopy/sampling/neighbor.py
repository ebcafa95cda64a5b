"""Neighbour sampling on the GPU for PyPI's CPU-only DGL: DGL's arguments and meaning, our kernels.

- :func:`sample_neighbors`: one layer, as ``dgl.sampling.sample_neighbors(g, nodes, fanout,
  edge_dir="in", replace=...)``: a frontier graph on the CPU with every node of ``g``.
- :class:`GpuNeighborSampler`: DGL's ``NeighborSampler`` arguments; ``sample(g, seeds)`` returns
  ``(input_nodes, output_nodes, blocks)`` with the blocks as :class:`DeviceBlock` on the sampling device.

The graph's in-edge CSC is read where :mod:`.graph` placed it (pinned in place by default); the
picks come from the kernel layer's ``sample_csc`` (a frontier) or, for blocks, its halves without a
host read (``plan_csc``/``sample_csc_deferred``), and unique and relabel run on the same device by
the relabelling kernels (``relabel_layer``: a hash table of each node's first appearance). A batch
of blocks reads the device once (:func:`.relabel.read_sizes`), at its end: every layer's number of
picks and of source nodes and the bad-seed flag together. Nothing waits in between because every
buffer is sized by a capacity known on the host: ``len(destinations) * fanout`` picks (-1 in the
unused slots), destinations plus picks for the source nodes, and a layer's destinations are the
layer before's source-node buffer, its live prefix counted on the device. A layer of fanout -1 is
sized by its total, read with the sizes so far before it is sampled: one read more per such layer.
About ten device operations a layer (``dgl_zerocopy.cuda.sampling.op_count`` counts them; the
tests hold the bound). PyG's modes (:mod:`.gpu_picks`) slot into the same passes without a read: the
destinations an earlier hop expanded and a time cut shrink the bounds, weighted kernels replace the
uniform count and pick, disjoint trees are keys ``tree * num_nodes + node`` for the relabelling. The seeds go to the device from pinned memory. Edge ids (``edata[dgl.EID]``)
are computed when first read (:mod:`.lazy`). The kernels draw from a counter-based RNG keyed per
layer by :func:`.layer.draw_seed`, from torch's generator: ``torch.manual_seed`` reproduces a batch.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ..cuda.sampling import Relabelled
from ..cuda.sampling.launch import bad_seed_error
from ..store.transfer import to_device
from . import relabel
from .blocks import EID, NID, DeviceBlock
from .fanout import check_fanout
from .gpu_picks import KERNEL_BACKENDS, TemporalPicks, WeightedPicks, pick_keys, seed_keys, skip_expanded, split_keys
from .graph import SamplingGraph, check_homogeneous, release, shared_graph
from .layer import (
    as_seeds,
    check_placement,
    check_seed,
    draw_seed,
    given_seed_error,
    plan_layer,
    relabel_picks,
    resolve_device,
    sample_layer,
    sample_layer_deferred,
)
from .lazy import LazyData

#: ``srcdata`` of a disjoint sampler's blocks: each source node's tree (the position of its seed).
TREE = "_TREE"


def sample_neighbors(
    g: Any, nodes: Any, fanout: int, *, replace: bool = False, seed: int | None = None, device: Any = "cuda", copy_ndata: bool = True, copy_edata: bool = True
) -> Any:
    """The frontier of ``nodes``: a DGL graph on the CPU with every node of ``g`` (same id dtype)
    and, per node of ``nodes``, ``min(in-degree, fanout)`` of its in-edges picked uniformly without
    replacement (``fanout`` picks of its in-edges with ``replace=True``; all of them for ``fanout=-1``;
    none for 0), with ``edata[dgl.EID]`` naming each in ``g``: what
    ``dgl.sampling.sample_neighbors(g, nodes, fanout, edge_dir="in", replace=replace)`` returns. A
    node given twice is sampled twice. ``copy_ndata``/``copy_edata`` as DGL's (``g.ndata`` shared,
    ``g.edata`` indexed by the picked edges).

    ``g``: a homogeneous DGL graph on the CPU, or a :class:`SamplingGraph` (then the frontier has
    no data to copy). For ``device="cuda"`` a DGL graph's CSC is pinned in place on first use and
    stays so while ``g`` lives (a :class:`SamplingGraph` used with ``with`` gives the lifetime to the
    caller). ``device``: ``"cuda"``/``"cuda:N"``, ``"emulator"`` (the CUDA kernel run on the CPU) or
    ``"reference"``. ``seed``: the RNG key (same key, same picks, on every device); None draws one
    from torch's generator (``torch.manual_seed`` reproduces; ``dgl.seed`` does not).

    Raises IndexError for a node id outside ``[0, num_nodes)``, ValueError for a bad fanout,
    device or graph, TypeError for non-integer ids."""
    import dgl

    backend, run_on = resolve_device(device)
    fanout = check_fanout(fanout)
    key = draw_seed() if seed is None else check_seed(seed)
    if isinstance(g, SamplingGraph):
        graph, data = g, None
    else:
        graph, data = shared_graph(g, "host" if backend != "cuda" else "pinned", run_on, hold=True), g
    check_placement(graph, backend, run_on)
    seeds = as_seeds(nodes, graph, run_on)
    try:
        picks = sample_layer(graph, seeds, fanout, bool(replace), key, backend)
    except IndexError as error:
        raise given_seed_error(nodes, graph.num_nodes, error) from None
    num_picks = picks.src.numel()
    dst = torch.repeat_interleave(seeds, picks.indptr[1:] - picks.indptr[:-1], output_size=num_picks)
    eids = graph.edge_ids(picks.pos).cpu()
    frontier = dgl.graph((picks.src.cpu(), dst.cpu()), num_nodes=graph.num_nodes, idtype=graph.idtype)
    frontier.edata[EID] = eids
    if data is not None and copy_ndata:
        for name, value in data.ndata.items():
            frontier.ndata[name] = value
    if data is not None and copy_edata:
        for name, value in data.edata.items():
            frontier.edata[name] = value[eids.long()]
    return frontier


class GpuNeighborSampler:
    """DGL's ``NeighborSampler`` on our kernels: ``sample(g, seeds)`` returns ``(input_nodes,
    output_nodes, blocks)``, one :class:`DeviceBlock` per layer (the first is the input layer), as
    DGL's: ``fanouts[i]`` in-edges per destination of layer ``i`` (-1: all), uniform without
    replacement unless ``replace``; destinations first among the sources; ``srcdata[dgl.NID]``,
    ``dstdata[dgl.NID]`` and ``edata[dgl.EID]`` (computed when first read). A seed given twice is a
    destination twice, each with its own sample.

    ``device``: where to sample (``"cuda"``, ``"cuda:N"``, ``"emulator"``, ``"reference"``);
    ``placement``: where the CUDA kernels read the graph: ``"pinned"`` (its own pages registered in
    place) or ``"device"`` (a copy in device memory); the CPU backends read it as it is.
    ``output_device``: where the blocks and ids are returned (default: the sampling device).
    ``prefetch_node_feats``/``prefetch_labels``/``prefetch_edge_feats``: names of ``g.ndata``/
    ``g.edata`` that :meth:`sample` puts in ``blocks[0].srcdata``, ``blocks[-1].dstdata`` and every
    block's ``edata`` (indexed on the tensor's device, so a host tensor costs a round trip; a loader
    serves them from a FeatureStore instead, after :meth:`sample_blocks`). ``prob``/``mask`` (weighted
    sampling), ``edge_dir="out"`` and ``exclude_eids`` are refused; ``fused`` is accepted and unused.
    ``node_dtype``: the dtype of the blocks' node ids (default: the graph's id dtype); wider than the
    graph's, the kernels write it directly (a compact graph, as the GPU snapshot, gives the full
    graph's ids without a conversion per tensor).

    PyG's modes (:mod:`.gpu_picks`; the PyG front end's GPU route sets them): ``expand_once``: a
    destination an earlier layer expanded gets no in-edges again (PyG's hops; the blocks are then not
    DGL's for those destinations). ``disjoint``: every seed roots its own tree (a node reached in two
    trees is two sources; ``srcdata[TREE]`` names each source's tree). ``temporal``: a
    :class:`~.gpu_picks.TemporalPicks` over the graph's CSC (needs ``disjoint``; :meth:`sample_blocks`
    takes ``seed_time``). ``weighted``: a :class:`~.gpu_picks.WeightedPicks` over it (without
    replacement, fanouts up to ``MAX_WEIGHTED_FANOUT`` = 64: larger ones raise ValueError here). Both
    run on ``"cuda"`` and ``"emulator"`` only, and must describe the graph passed to :meth:`sample`.

    The graph of the last :meth:`sample` is kept (shared with other users of the same graph, see
    :func:`.graph.shared_graph`); :meth:`close` (or ``with``) gives it back: the last user unpins it.
    """

    def __init__(
        self,
        fanouts: Sequence[int],
        edge_dir: str = "in",
        prob: str | None = None,
        mask: str | None = None,
        replace: bool = False,
        prefetch_node_feats: Sequence[str] | None = None,
        prefetch_labels: Sequence[str] | None = None,
        prefetch_edge_feats: Sequence[str] | None = None,
        output_device: Any = None,
        fused: bool = True,
        *,
        device: Any = "cuda",
        placement: str = "pinned",
        node_dtype: torch.dtype | None = None,
        expand_once: bool = False,
        disjoint: bool = False,
        temporal: TemporalPicks | None = None,
        weighted: WeightedPicks | None = None,
    ) -> None:
        for option, value in (("prob", prob), ("mask", mask)):
            if value is not None:
                raise ValueError(
                    f"{option}={value!r} (weighted neighbour sampling) is not supported by GpuNeighborSampler; "
                    f"drop {option}= or sample with dgl.dataloading.NeighborSampler({option}=...)"
                )
        if edge_dir != "in":
            raise ValueError(
                f"GpuNeighborSampler samples in-edges (edge_dir='in'), but got edge_dir={edge_dir!r}; reverse the graph (dgl.reverse) to sample out-edges"
            )
        if isinstance(fanouts, int) or not isinstance(fanouts, Sequence) or any(isinstance(f, Mapping) for f in fanouts):
            raise ValueError(f"fanouts must be a list of ints, one per layer (per-edge-type dicts are for heterographs), but got {fanouts!r}")
        self.fanouts = [check_fanout(f, f"fanouts[{i}]") for i, f in enumerate(fanouts)]
        if placement not in ("pinned", "device"):
            raise ValueError(f"placement must be 'pinned' or 'device', but got {placement!r}")
        self.backend, self.device = resolve_device(device)
        self.placement = placement if self.backend == "cuda" else "host"
        self.output_device = torch.device(output_device) if output_device is not None else self.device
        self.replace, self.edge_dir, self.prob, self.fused = bool(replace), edge_dir, None, fused
        if node_dtype not in (None, torch.int32, torch.int64):
            raise ValueError(f"node_dtype must be None (the graph's), torch.int32 or torch.int64, but got {node_dtype!r}")
        self.node_dtype = node_dtype
        self._check_rules(expand_once, disjoint, temporal, weighted)
        self.expand_once, self.disjoint, self.temporal, self.weighted = bool(expand_once), bool(disjoint), temporal, weighted
        # As DGL's BlockSampler keeps them: a list of names, or {type: names}.
        self.prefetch_node_feats = prefetch_node_feats or []
        self.prefetch_labels = prefetch_labels or []
        self.prefetch_edge_feats = prefetch_edge_feats or []
        self._source: Any = None  # the DGL graph of self._graph
        self._graph: SamplingGraph | None = None
        self._lock = threading.Lock()

    def _check_rules(self, expand_once: Any, disjoint: Any, temporal: TemporalPicks | None, weighted: WeightedPicks | None) -> None:
        if temporal is not None and not disjoint:
            raise ValueError("temporal sampling needs disjoint=True (each seed's tree has its own time, as PyG requires)")
        if temporal is not None and weighted is not None:
            raise ValueError("temporal= and weighted= together: sampling by time and by weight at once is not supported (nor by pyg-lib)")
        if (temporal is not None or weighted is not None) and self.backend not in KERNEL_BACKENDS:
            raise ValueError(f"temporal and weighted picks run on device 'cuda' or 'emulator', but got {self.backend!r}")
        if weighted is not None:
            for fanout in self.fanouts:
                weighted.check_fanout(fanout, self.replace)

    # -- sampling -----------------------------------------------------------------------------------

    def sample(self, g: Any, seeds: Any, exclude_eids: Any = None) -> tuple[torch.Tensor, torch.Tensor, list[DeviceBlock]]:
        """:meth:`sample_blocks`, then the prefetched data (``prefetch_node_feats``, ``prefetch_labels``,
        ``prefetch_edge_feats``) from ``g``'s node and edge data."""
        input_nodes, output_nodes, blocks = self.sample_blocks(g, seeds, exclude_eids)
        if self.prefetch_node_feats or self.prefetch_labels or self.prefetch_edge_feats:
            self._prefetch(g, input_nodes, output_nodes, blocks)
        return input_nodes, output_nodes, blocks

    def sample_blocks(
        self, g: Any, seeds: Any, exclude_eids: Any = None, *, edge_ids: torch.Tensor | None = None, seed_time: Any = None
    ) -> tuple[torch.Tensor, torch.Tensor, list[DeviceBlock]]:
        """``(input_nodes, output_nodes, blocks)`` for the seed nodes ``seeds`` (1-D ids, on the CPU or
        the sampling device) of ``g`` (a homogeneous DGL graph on the CPU, or a :class:`SamplingGraph`),
        on :attr:`output_device`. One host read per batch, one more per fanout -1 layer (see the
        module's docstring). ``edge_ids``: None (the blocks' ``EID`` from the graph, computed when
        first read), or the edge id of each CSC position of a :class:`SamplingGraph` placed in the
        sampling device's memory, read by the fetch kernel now (for a CSC rewritten after the batch,
        as the GPU snapshot is; the graph's own edge ids are then not read). ``seed_time``: with
        ``temporal=``, one time per seed (a tensor or array, on the CPU or the sampling device): its
        tree's in-edges later than it are never picked. Raises IndexError for a seed outside the
        graph, ValueError for a missing or misshapen ``seed_time``."""
        if exclude_eids is not None:
            raise ValueError("GpuNeighborSampler does not exclude edges (exclude=); sample with dgl.dataloading.NeighborSampler for that")
        if isinstance(seeds, Mapping):
            raise ValueError("seeds per node type (a dict) are for heterographs; GpuNeighborSampler samples homogeneous graphs: pass one tensor")
        graph = self._graph_for(g)
        given, seeds = seeds, as_seeds(seeds, graph, self.device, self.node_dtype)
        seed_time = self._seed_time(seed_time, len(seeds))
        # One RNG key per layer, drawn before any sampling, output layer first (the order DGL samples in).
        keys = [draw_seed() for _ in self.fanouts]
        layers = self._sample_layers(graph, given, seeds, list(reversed(self.fanouts)), keys, edge_ids, seed_time)
        blocks: list[DeviceBlock] = []
        dst = seeds
        for layer in layers:
            block = layer.block(graph, dst)
            blocks.insert(0, block)
            dst = block.srcdata[NID]
        if self.output_device != self.device:
            blocks = [_moved(block, self.output_device) for block in blocks]
            dst, seeds = (to_device(t, self.output_device) for t in (dst, seeds))
        return dst, seeds, blocks

    def _seed_time(self, seed_time: Any, num_seeds: int) -> torch.Tensor | None:
        if self.temporal is None:
            if seed_time is not None:
                raise ValueError("seed_time= is for a temporal sampler; build it with temporal=TemporalPicks(...)")
            return None
        if seed_time is None:
            raise ValueError("a temporal sampler needs seed_time=, one time per seed")
        seed_time = torch.as_tensor(seed_time).reshape(-1)
        if seed_time.numel() != num_seeds:
            raise ValueError(f"seed_time must hold one time per seed ({num_seeds}), but has {seed_time.numel()}")
        return to_device(seed_time.to(self.temporal.dtype).contiguous(), self.device)

    def _sample_layers(
        self,
        graph: SamplingGraph,
        given: Any,
        seeds: torch.Tensor,
        fanouts: list[int],
        keys: list[int],
        edge_ids: torch.Tensor | None,
        seed_time: torch.Tensor | None = None,
    ) -> list[_Layer]:
        """Every layer sampled and relabelled on the device, the output layer first, with one host read
        at the end (one more before each fanout -1 layer, whose total sizes its picks). A layer's
        destinations are the layer before's source-node buffer, of which only a prefix (its count, on
        the device) is live: the kernels skip the rest, so nothing waits for a size in between."""
        # The batch's sizes on the device: [bad seed position, then per layer: picks, source nodes].
        sizes = torch.full((1 + 2 * len(fanouts),), -1, dtype=torch.int64, device=seeds.device)
        bad = sizes[:1]  # only the caller's seeds can be bad; later layers' flag stays -1
        layers: list[_Layer] = []
        num_nodes, num_trees = graph.num_nodes, len(seeds)
        # dst: what the relabelling numbers (disjoint: tree keys); nodes: their node ids, trees: their trees.
        dst, count, nodes, trees = seeds, None, seeds, None
        if self.disjoint:
            dst, trees = seed_keys(seeds, num_nodes), torch.arange(num_trees, device=seeds.device)
        expanded = None  # how many leading destinations an earlier layer expanded (expand_once)
        for layer, (fanout, key) in enumerate(zip(fanouts, keys)):
            plan, capacity = None, None
            if fanout != 0:
                narrow = self._narrow(nodes, trees, seed_time, fanout, expanded)
                weights = self.weighted.count(fanout, self.replace, self.backend) if self.weighted is not None else None
                plan = plan_layer(graph, nodes, fanout, self.replace, count, self.backend, bad, narrow=narrow, count_picks=weights)
            if fanout == -1:
                *before, capacity = relabel.read_sizes(torch.cat((sizes[: 1 + 2 * layer], plan.out_indptr[-1:])))
                _raise_bad(before[0], given, seeds, graph)
            pick = self.weighted.pick(key, self.backend) if self.weighted is not None and fanout != 0 else None
            picks = sample_layer_deferred(graph, nodes, fanout, self.replace, key, self.backend, capacity=capacity, plan=plan, edge_ids=edge_ids, pick=pick)
            numbered = picks if trees is None else picks._replace(src=pick_keys(picks.src, picks.indptr, trees, num_nodes))
            relabelled = relabel_picks(graph, dst, count, numbered, sizes[1 + 2 * layer : 3 + 2 * layer], self.backend, bounded=trees is None)
            expanded = num_trees if count is None else count
            dst, count = relabelled.nodes, relabelled.sizes[1:]
            nodes, trees = split_keys(dst, num_nodes, num_trees) if trees is not None else (dst, None)
            layers.append(_Layer(picks.pos, relabelled, edge_ids is not None, nodes, trees))
        values = relabel.read_sizes(sizes)  # the batch's one host read
        _raise_bad(values[0], given, seeds, graph)
        for layer, num_edges, num_src in zip(layers, values[1::2], values[2::2]):
            layer.num_edges, layer.num_src = num_edges, num_src
        return layers

    def _narrow(self, nodes: torch.Tensor, trees: torch.Tensor | None, seed_time: torch.Tensor | None, fanout: int, expanded: Any) -> Any:
        """The layer's ``narrow`` (None: every in-edge): the destinations expanded before emptied, then the time cut."""
        steps = []
        if self.expand_once and expanded is not None:
            steps.append(skip_expanded(expanded))
        if self.temporal is not None:
            steps.append(self.temporal.narrow(seed_time.index_select(0, trees), fanout, self.backend))
        if len(steps) < 2:
            return steps[0] if steps else None
        return lambda bounds: [step(bounds) for step in steps]

    def _prefetch(self, g: Any, input_nodes: torch.Tensor, output_nodes: torch.Tensor, blocks: list[DeviceBlock]) -> None:
        if isinstance(g, SamplingGraph):
            raise ValueError(
                "prefetch_node_feats/prefetch_labels/prefetch_edge_feats read the DGL graph's data: pass the DGL graph to sample(), not a SamplingGraph"
            )
        for name in _names(self.prefetch_node_feats, g.ndata, "prefetch_node_feats", "node"):
            blocks[0].srcdata[name] = _rows(g.ndata[name], input_nodes)
        for name in _names(self.prefetch_labels, g.ndata, "prefetch_labels", "node"):
            blocks[-1].dstdata[name] = _rows(g.ndata[name], output_nodes)
        for name in _names(self.prefetch_edge_feats, g.edata, "prefetch_edge_feats", "edge"):
            for block in blocks:
                block.edata[name] = _rows(g.edata[name], block.edata[EID])

    def _graph_for(self, g: Any) -> SamplingGraph:
        """The SamplingGraph of ``g``, kept for the next batches of the same graph."""
        if isinstance(g, SamplingGraph):
            check_placement(g, self.backend, self.device)
            return g
        with self._lock:
            if self._source is not g or self._graph is None or self._graph.closed:
                check_homogeneous(g)
                graph = shared_graph(g, self.placement, self.device)
                self._give_back()
                self._source, self._graph = g, graph
            return self._graph

    # -- lifecycle ------------------------------------------------------------------------------------

    def close(self) -> None:
        """Give back the graph this sampler holds (the last user unpins it). Idempotent; a later
        :meth:`sample` takes the graph again."""
        with self._lock:
            self._give_back()

    def _give_back(self) -> None:
        if self._graph is not None:
            release(self._graph)
        self._source = self._graph = None

    def __enter__(self) -> GpuNeighborSampler:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getstate__(self) -> dict:
        # Sent to another process (a loader's workers): without the graph, which that process takes itself.
        state = dict(self.__dict__)
        state.update(_source=None, _graph=None, _lock=None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"GpuNeighborSampler(fanouts={self.fanouts}, replace={self.replace}, device={self.backend if self.backend != 'cuda' else str(self.device)!r}, placement={self.placement!r})"


class _Layer:
    """One sampled layer on the device: the picks' CSC positions and the relabelled buffers; its sizes
    (picks, source nodes) once the batch's read has brought them."""

    def __init__(self, pos: torch.Tensor, relabelled: Relabelled, pos_are_edge_ids: bool, nodes: torch.Tensor, trees: torch.Tensor | None) -> None:
        self.pos, self.relabelled, self.pos_are_edge_ids = pos, relabelled, pos_are_edge_ids
        self.nodes, self.trees = nodes, trees  # the source nodes' ids and (disjoint) trees; relabelled.nodes holds keys then
        self.num_edges = self.num_src = 0

    def block(self, graph: SamplingGraph, dst: torch.Tensor) -> DeviceBlock:
        """The layer's block for its ``dst`` (the live destinations): views of the buffers, cut to the sizes."""
        out = self.relabelled
        nodes = self.nodes[: self.num_src]
        srcdata = {NID: nodes}
        if self.trees is not None:
            srcdata = {NID: nodes.to(dst.dtype), TREE: self.trees[: self.num_src]}
        block = DeviceBlock(out.indptr[: len(dst) + 1], out.local[: self.num_edges], self.num_src, srcdata, {NID: dst})
        picked = self.pos[: self.num_edges]
        if self.pos_are_edge_ids:  # read by the fetch kernel already: in the graph's edge id dtype
            block.edata = LazyData(pending={EID: functools.partial(picked.to, graph.edge_idtype)})
        else:
            block.edata = LazyData(pending={EID: functools.partial(graph.edge_ids, picked)})
        return block


def _raise_bad(position: int, given: Any, seeds: torch.Tensor, graph: SamplingGraph) -> None:
    """Raise the IndexError for a bad seed at ``position`` of ``seeds`` (-1: none) by its value in ``given``."""
    if position >= 0:
        raise given_seed_error(given, graph.num_nodes, bad_seed_error(int(seeds[position]), graph.num_nodes))


def _moved(block: DeviceBlock, device: torch.device) -> DeviceBlock:
    """``block`` on ``device``, its edge ids still computed on first read (then copied there)."""
    moved = block.to(device)
    pending = {name: functools.partial(_read_moved, block.edata, name, device) for name in getattr(block.edata, "pending", list)()}
    moved.edata = LazyData(dict(moved.edata), pending)
    return moved


def _read_moved(data: Mapping, name: str, device: torch.device) -> torch.Tensor:
    return to_device(data[name], device)


def _names(names: Any, frames: Any, option: str, kind: str) -> list[str]:
    """A prefetch list (names, or ``{type: names}`` for the graph's one type), each checked to exist."""
    if isinstance(names, Mapping):
        names = [name for listed in names.values() for name in listed]
    for name in names:
        if name not in frames:
            raise KeyError(f"{option} names {name!r}, but the graph's {kind} data has no such tensor (it has {sorted(frames.keys())})")
    return list(names)


def _rows(data: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """``data[ids]`` on ``ids``' device (indexed where ``data`` lives)."""
    rows = torch.index_select(data, 0, ids.to(data.device))
    return to_device(rows, ids.device)
