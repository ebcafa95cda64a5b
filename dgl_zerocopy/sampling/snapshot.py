"""Snapshot sampling: every layer draws its fanout from a small cached sample of each node's in-edges
(the *snapshot*), and a share of the snapshot is redrawn from the full graph once per epoch.

The snapshot is a compact CSC (:class:`Snapshot`): node ``v`` owns ``min(deg(v), snapshot_size)``
slots ``indptr[v]:indptr[v + 1]``, each holding one in-edge of ``v`` (its source ``src`` and its
edge id ``eid`` in the original graph), chosen uniformly without replacement; ids are int32
wherever they fit. A node's slot count never changes, so a refresh rewrites slots in place. What is
sized by the slot count (the pick tables, the build's chunks) is sized by ``min(snapshot_size,
largest in-degree)`` (:func:`slots_per_node`), the same snapshot, so a huge ``snapshot_size`` costs
what the graph costs.

Refresh unit: **nodes**. A refresh redraws the whole snapshot of each chosen node from its full
in-edge list, exactly as the first build drew it. Why nodes and not slots: a node's snapshot is
then always a uniform ``snapshot_size``-subset of its in-edges, with no bias towards edges that
happen to survive (replacing single slots needs "an edge not yet in the snapshot", a draw from a
changing remainder); the redraw is the same operation as one layer of neighbour sampling with
fanout ``snapshot_size`` over the chosen nodes (``sample_csc``, whose picks per node are exactly
this slot layout); and the nodes to redraw are a plain id list. Only nodes with more in-edges
than ``snapshot_size`` are redrawn (the others hold all their in-edges); they are redrawn in
turn along a random order (a new one each round), ``ceil(refresh * count)`` per epoch, so each
partial snapshot is at most ``ceil(1 / refresh)`` epochs old.

The sampling work per batch touches only the snapshot (a few slots per frontier node), the
relabelling of the picked sources (a node-indexed map, reset after use) and the block.

GPU: :class:`~.snapshot_gpu.GpuSnapshotSampler`, what
``dgl_zerocopy.DataLoader(..., use_uva=True)`` makes of this sampler, keeps the same three arrays
(same slot layout) in device memory, read by the kernels as a :class:`~.graph.SamplingGraph` placed
there (``src`` its indices, ``eid`` its edge ids): each layer's picks are ``sample_csc`` over it with
the layer's fanout, so a batch reads no PCIe; the build and each refresh are ``sample_csc`` over the
full CSC pinned in place with fanout ``snapshot_size`` at the nodes to redraw, whose per-node picks
(``min(deg, snapshot_size)`` CSC positions, mapped to sources and edge ids) are scattered into the
same slots on the device. Refresh unit, order and guarantee are this module's.
"""

from __future__ import annotations

import logging
import math
import threading
import warnings
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from .fanout import MAX_FANOUT
from .graph import GraphStamp, check_homogeneous, dgl_csc
from .snapshot_csc import PickTables, RefreshOrder, Relabel, Snapshot, build_snapshot, fill, side_by_side

try:  # the package imports without DGL; the sampler itself needs it
    from dgl.dataloading import BlockSampler as _BlockSampler
except ModuleNotFoundError:  # pragma: no cover - exercised by tests/package/test_without_dgl.py
    _BlockSampler = object

log = logging.getLogger(__name__)


def _full_csc(g: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``(indptr, indices, eids)`` of ``g``'s in-edges: DGL's own tensors, made once per graph
    (``eids`` None when the CSC positions are the edge ids)."""
    return dgl_csc(g)


def _graph_key(g: Any) -> tuple:
    """What identifies a graph across processes (a loader's workers get copies): its sizes, id dtype
    and a checksum of 64 offsets and 64 sources spread over its CSC."""
    indptr, indices, _ = _full_csc(g)
    at = torch.linspace(0, indptr.numel() - 1, 64).long()
    total = int(indptr[at].sum())
    if indices.numel():
        total += int((indices[torch.linspace(0, indices.numel() - 1, 64).long()].long() * torch.arange(1, 65)).sum())
    return g.num_nodes(), g.num_edges(), str(g.idtype), total


def _check_graph(g: Any) -> None:
    check_homogeneous(g, "SnapshotSampler", also_takes="")


def _check_fanouts(fanouts: Any) -> list[int]:
    if isinstance(fanouts, int) or not isinstance(fanouts, Sequence) or not fanouts:
        raise ValueError(f"fanouts must be a non-empty list of ints, one per layer, but got {fanouts!r}")
    checked = []
    for i, f in enumerate(fanouts):
        if isinstance(f, bool) or not isinstance(f, int | np.integer) or not -1 <= f <= MAX_FANOUT:
            raise ValueError(f"fanouts[{i}] must be an int >= 0, but got {f!r}; the largest fanout is {MAX_FANOUT} (2**31 - 1)")
        if f == -1:
            raise ValueError(
                f"fanouts[{i}] is -1 (every in-edge), which a snapshot of a few in-edges per node cannot give; "
                f"pass a fanout >= 0, or sample full neighbourhoods with dgl.dataloading.NeighborSampler"
            )
        checked.append(int(f))
    return checked


def check_options(fanouts: Any, snapshot_size: Any, refresh: Any) -> tuple[list[int], int, float]:
    """``(fanouts, snapshot_size, refresh)`` checked (ValueError naming the value) and defaulted
    (``snapshot_size`` None: twice the largest fanout): the CPU and the GPU snapshot samplers' options."""
    fanouts = _check_fanouts(fanouts)
    largest = max(fanouts)
    if snapshot_size is None:
        snapshot_size = 2 * largest
    if isinstance(snapshot_size, bool) or not isinstance(snapshot_size, int | np.integer) or snapshot_size < largest:
        raise ValueError(
            f"snapshot_size={snapshot_size!r} is below the largest fanout {largest}, or not an int: a layer cannot draw more "
            f"in-edges than the snapshot keeps; pass snapshot_size >= {largest}, or None for 2 x the largest fanout ({2 * largest})"
        )
    if isinstance(refresh, bool) or not isinstance(refresh, int | float | np.floating | np.integer) or not 0.0 <= float(refresh) <= 1.0:
        raise ValueError(f"refresh={refresh!r} must be a share in [0, 1]: the part of the snapshot redrawn per epoch (0: static, 1: a new one every epoch)")
    return fanouts, int(snapshot_size), float(refresh)


def slots_per_node(deg: torch.Tensor, snapshot_size: int, sampler: str) -> int:
    """The most slots a node of in-degrees ``deg`` gets: ``min(snapshot_size, largest in-degree)``.
    A node never holds more slots than in-edges, so the snapshot is the one ``snapshot_size`` gives;
    what is sized by this number (the CPU sampler's pick tables, the refresh's chunks, the GPU
    build's fanout) is then bounded by the graph, whatever ``snapshot_size`` says. Logged (INFO)
    when it is below ``snapshot_size``."""
    largest = int(deg.max()) if deg.numel() else 0
    if snapshot_size <= largest:
        return snapshot_size
    log.info(
        "%s: snapshot_size %d is above the graph's largest in-degree %d: every node keeps all its in-edges (the snapshot is the whole "
        "graph, and a refresh has nothing to redraw); the sampler's memory is sized by %d slots per node at most",
        sampler,
        snapshot_size,
        largest,
        largest,
    )
    return largest


def announce_rebuild(sampler: str, changed: str) -> None:
    """Warn that the graph of a snapshot was changed in place since the build (``changed``: what
    :meth:`~.graph.GraphStamp.changed` says) and that a new snapshot of it is being built."""
    warnings.warn(
        f"the graph was changed in place since {sampler} built its snapshot ({changed}): building a new snapshot of the graph as it "
        f"is now, as a new sampler would (a whole build; worker processes started before the change keep sampling their copy of the old graph)",
        stacklevel=5,
    )


class SnapshotHolder:
    """What the CPU and GPU snapshot samplers share: their state of the snapshot (set up by
    :meth:`_hold_nothing`), what they tell of it, and the loader's epoch hook."""

    def _hold_nothing(self) -> None:
        self._snapshot: Snapshot | None = None
        self._order: RefreshOrder | None = None
        self._slots = 0  # slots per node at most: min(snapshot_size, the graph's largest in-degree)
        self._lock = threading.Lock()
        self.nodes_refreshed = 0  # nodes redrawn by refreshes since the build (the build not counted)

    @property
    def snapshot(self) -> Snapshot | None:
        """The current snapshot, on the sampling device (None before the first build)."""
        return self._snapshot

    @property
    def snapshot_nbytes(self) -> int:
        """Bytes of the snapshot's compact CSC, on the sampling device (0 before the first build)."""
        return self._snapshot.nbytes if self._snapshot is not None else 0

    def on_epoch_start(self, g: Any) -> None:
        """The epoch hook of :class:`dgl_zerocopy.DataLoader`: builds the snapshot of ``g`` if there is
        none for it (so that worker processes start with it), else :meth:`refresh_snapshot`."""
        self.refresh_snapshot(g)


class SnapshotSampler(SnapshotHolder, _BlockSampler):
    """DGL's ``NeighborSampler`` over a snapshot: ``sample(g, seeds)`` returns ``(input_nodes,
    output_nodes, blocks)`` as DGL's does (one DGL block per layer, the first the input layer;
    destinations first among the sources; ``srcdata``/``dstdata[dgl.NID]`` and ``edata[dgl.EID]``
    in the original graph's ids; the ``prefetch_*`` data marked as DGL's samplers mark it), in DGL's
    ``DataLoader`` and in :class:`dgl_zerocopy.DataLoader`.

    ``fanouts[i]``: in-edges per destination of layer ``i``, ``>= 0`` (-1, every in-edge, is refused).
    ``snapshot_size``: in-edges kept per node (default: twice the largest fanout; at least the
    largest fanout). ``refresh``: the share of the snapshot redrawn from the full graph per epoch,
    in ``[0, 1]`` (0: static; 1: a new snapshot every epoch), counted in nodes (see the module's
    docstring: a node's whole snapshot is redrawn; nodes holding all their in-edges need none).

    The snapshot of a graph is built on its first :meth:`sample` (or :meth:`on_epoch_start`), from
    torch's default generator (``torch.manual_seed`` reproduces the snapshot and the picks). Each
    layer draws ``min(fanout, slots)`` of a frontier node's ``min(deg, snapshot_size)`` slots,
    uniformly without replacement. :class:`dgl_zerocopy.DataLoader` calls :meth:`on_epoch_start`
    at the start of every epoch; any other loop calls :meth:`refresh_snapshot` once per epoch.

    Guarantee: at every visit of a node of in-degree ``d`` in a layer of fanout ``f``, each of its
    in-edges is picked with probability ``min(1, f / d)`` (its snapshot is a uniform subset, the
    picks a uniform subset of that). With ``refresh > 0`` every partial snapshot is redrawn at least
    every ``ceil(1 / refresh)`` epochs, independently, so over many epochs every in-edge is picked
    in a share ``min(1, f / d)`` of its node's visits: no edge is starved. With ``refresh = 0`` a node
    of in-degree above ``snapshot_size`` only ever gives the ``snapshot_size`` edges of its snapshot.

    Worker processes (``num_workers > 0``) sample from the copy of the snapshot they start with:
    built by :meth:`on_epoch_start` in the main process, refreshed there before the next epoch's
    workers start; persistent workers keep their first copy (:class:`dgl_zerocopy.DataLoader` warns of
    it). ``exclude_eids`` is refused.

    A graph changed in place since the build (``add_nodes``, ``remove_edges``, ...: a new graph index,
    :class:`~.graph.GraphStamp`, compared at every call) gets a new snapshot, with a warning: a DGL
    sampler keeps no state and samples the graph as it is, and so does this one, at a build's cost.

    On the GPU, :class:`dgl_zerocopy.DataLoader` with ``use_uva=True`` samples with a
    :class:`~.snapshot_gpu.GpuSnapshotSampler` of the same options instead (the snapshot in device
    memory, refreshed at each epoch's start); this object then builds nothing.
    """

    def __init__(
        self,
        fanouts: Sequence[int],
        snapshot_size: int | None = None,
        refresh: float = 0.25,
        prefetch_node_feats: Any = None,
        prefetch_labels: Any = None,
        prefetch_edge_feats: Any = None,
        output_device: Any = None,
    ) -> None:
        if _BlockSampler is object:
            raise ModuleNotFoundError("SnapshotSampler is a DGL BlockSampler and needs DGL: pip install dgl", name="dgl")
        self.fanouts, self.snapshot_size, self.refresh = check_options(fanouts, snapshot_size, refresh)
        super().__init__(
            prefetch_node_feats=prefetch_node_feats, prefetch_labels=prefetch_labels, prefetch_edge_feats=prefetch_edge_feats, output_device=output_device
        )
        self._hold_nothing()
        self._tables: PickTables | None = None
        self._relabel: Relabel | None = None
        self._key: tuple | None = None  # _graph_key of the graph the snapshot was built from
        self._graph: weakref.ref | None = None
        self._stamp: GraphStamp | None = None  # that graph as it was (a change in place rebuilds)
        self._full_nbytes = 0

    # -- the snapshot -----------------------------------------------------------------------------

    @property
    def full_csc_nbytes(self) -> int:
        """Bytes of the sampled graph's full in-edge CSC as DGL holds it (indptr, indices, edge ids)."""
        return self._full_nbytes

    @property
    def state_nbytes(self) -> int:
        """Bytes of everything the sampler keeps: the snapshot, the refresh order and the relabelling map."""
        parts = (self._order, self._tables, self._relabel)
        return self.snapshot_nbytes + sum(p.nbytes for p in parts if p is not None)

    def refresh_snapshot(self, g: Any = None) -> int:
        """Redraw ``ceil(refresh * n)`` of the ``n`` nodes whose snapshot is partial (in-degree above
        ``snapshot_size``), the next ones of a random order; returns how many were redrawn. ``g``:
        the graph (default: the one sampled last); a graph without a snapshot, or changed in place
        since its build (a warning), gets one built (the build counts as 0 here). Before any snapshot
        exists and without ``g``, does nothing."""
        with self._lock:
            if g is not None:
                _check_graph(g)
            elif self._snapshot is None:
                return 0
            else:
                g = self._graph() if self._graph is not None else None
                if g is None:
                    raise RuntimeError("the graph of this snapshot is gone (garbage-collected, or in another process): pass it, refresh_snapshot(g)")
            if not self._bound_to(g):
                self._build(g)
                return 0
            self._tables.redraw()
            count = math.ceil(self.refresh * self._order.nodes.numel())
            nodes = self._order.take(count)
            fill(self._snapshot, _full_csc(g), nodes, self._slots)
            self.nodes_refreshed += nodes.numel()
            return nodes.numel()

    def _bound_to(self, g: Any) -> bool:
        """Whether the snapshot is ``g``'s (the same object, unchanged since the build, or a copy of
        it in a worker process). The same object changed in place is announced (a warning): the
        caller builds anew, as a DGL sampler, which keeps no state, samples the graph as it is."""
        if self._snapshot is None:
            return False
        if self._graph is not None and self._graph() is g:
            changed = self._stamp.changed(g)
            if changed is None:
                return True
            announce_rebuild("SnapshotSampler", changed)
            return False
        if _graph_key(g) == self._key:
            self._graph, self._stamp = weakref.ref(g), GraphStamp(g)
            return True
        return False

    def _build(self, g: Any) -> None:
        full = _full_csc(g)
        self._full_nbytes = sum(t.numel() * t.element_size() for t in full if t is not None)
        deg = full[0][1:] - full[0][:-1]
        self._slots = slots_per_node(deg, self.snapshot_size, "SnapshotSampler")
        self._snapshot = build_snapshot(full, g.num_edges(), self._slots)
        self._order = RefreshOrder(torch.nonzero(deg > self._slots).squeeze(1))
        self._tables = PickTables(self._slots, max(self.fanouts))
        self._relabel = Relabel(g.num_nodes())
        self._key, self._graph, self._stamp = _graph_key(g), weakref.ref(g), GraphStamp(g)
        self.nodes_refreshed = 0
        log.info(
            "snapshot of %d nodes: %d of %d in-edges, %d bytes (full CSC %d)",
            g.num_nodes(),
            self._snapshot.src.numel(),
            g.num_edges(),
            self.snapshot_nbytes,
            self._full_nbytes,
        )

    # -- sampling ---------------------------------------------------------------------------------

    def sample_blocks(self, g: Any, seed_nodes: Any, exclude_eids: Any = None) -> tuple[torch.Tensor, Any, list]:
        """``(input_nodes, output_nodes, blocks)`` for ``seed_nodes`` (1-D node ids) of ``g``, from the
        snapshot (built on first use). Raises IndexError for a seed outside the graph."""
        import dgl

        if exclude_eids is not None:
            raise ValueError("SnapshotSampler does not exclude edges (exclude=); sample with dgl.dataloading.NeighborSampler for that")
        if isinstance(seed_nodes, Mapping):
            raise ValueError("seeds per node type (a dict) are for heterographs; SnapshotSampler samples homogeneous graphs: pass one tensor")
        _check_graph(g)
        seeds = _as_seeds(seed_nodes, g.num_nodes())
        blocks = []
        with self._lock:
            if not self._bound_to(g):
                self._build(g)
            if self._relabel is None:  # not sent to worker processes: made in each
                self._relabel = Relabel(g.num_nodes())
            dst = seeds
            for fanout in reversed(self.fanouts):
                indptr, src, eid = self._tables.pick(self._snapshot, dst, fanout)
                nodes, local = self._relabel(dst, src)
                block = dgl.create_block(
                    ("csc", (indptr, local, torch.empty(0, dtype=local.dtype))), num_src_nodes=nodes.numel(), num_dst_nodes=dst.numel(), idtype=g.idtype
                )
                block.srcdata[dgl.NID] = nodes.to(g.idtype)
                block.dstdata[dgl.NID] = dst.to(g.idtype)
                block.edata[dgl.EID] = eid.to(g.idtype)
                blocks.insert(0, block)
                dst = nodes
        input_nodes = dst.to(g.idtype)
        if self.output_device is not None:
            blocks = [block.to(self.output_device) for block in blocks]
            input_nodes = input_nodes.to(self.output_device)
        return input_nodes, seed_nodes, blocks

    # -- pickling (worker processes) ----------------------------------------------------------------

    def __getstate__(self) -> dict:
        # The snapshot travels; the lock, the graph's weak references and the map (rebuilt) do not.
        state = dict(self.__dict__)
        state.update(_lock=None, _graph=None, _stamp=None, _relabel=None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        if self._snapshot is not None:
            self._snapshot = side_by_side(self._snapshot)

    def __repr__(self) -> str:
        return f"SnapshotSampler(fanouts={self.fanouts}, snapshot_size={self.snapshot_size}, refresh={self.refresh})"


def _as_seeds(seeds: Any, num_nodes: int) -> torch.Tensor:
    """``seeds`` as 1-D int64 node ids; IndexError naming the first one outside ``[0, num_nodes)``."""
    if isinstance(seeds, np.ndarray):
        seeds = torch.from_numpy(seeds)
    seeds = torch.as_tensor(seeds)
    if seeds.dim() == 0:
        seeds = seeds.reshape(1)
    if seeds.dim() != 1 or seeds.dtype.is_floating_point or seeds.dtype == torch.bool:
        raise ValueError(f"seed nodes must be 1-D integer node ids, but got {seeds.dtype} of shape {tuple(seeds.shape)}")
    seeds = seeds.long()
    bad = (seeds < 0) | (seeds >= num_nodes)
    if bool(bad.any()):
        raise IndexError(f"seed node {int(seeds[bad][0])} is outside the graph's nodes [0, {num_nodes})")
    return seeds
