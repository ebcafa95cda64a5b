"""Exact uniform neighbour sampling on the CPU, hop by hop: no pyg-lib, no DGL, no compiler at run time.

:class:`HopSampler` samples a multi-hop neighbourhood over typed in-edge CSCs (one per relation) with
one node numbering for all hops, the way a PyG batch numbers its nodes:

- per node type, the seeds first (in their order, duplicates kept), then each hop's new nodes in order
  of first occurrence;
- per relation and hop, ``fanout`` in-edges of each node that joined at the previous hop (every in-edge
  where there are at most ``fanout``; all of them for -1; ``fanout`` draws with replacement for
  ``replace=True``), uniformly: Floyd's algorithm draws ``k`` distinct offsets exactly;
- each sampled edge as ``(row, col, pos)``: its source and destination as local indices into their
  type's node list, and its position in the relation's CSC (an edge id where the CSC is in edge order).

``disjoint=True`` gives each seed its own tree (a node reached from two seeds appears twice), with the
seed index of every node in ``batch``. ``induced_edges`` gives every edge among a set of nodes.
A relation with ``times`` samples by time (each tree only in-edges no later than its seed's time, uniformly
or the latest: :mod:`picks`; needs ``disjoint``), one with ``weights`` by weight, with pyg-lib's semantics.

Two paths give the same batch, element for element: numba's kernels (:mod:`hop_kernels`: one pass
per edge, a hop split over torch's intra-op threads; the default where numba is installed) and
NumPy's vectorised passes (:func:`pick`, the reference). Disjoint batches (temporal ones too) run
:mod:`tree_hops` (compiled picks, tree-by-tree numbering, kept buffers); weighted ones that are not disjoint
the NumPy loop over hops with compiled picks (:mod:`pick_kernels`). The draws are
counter-based (:func:`hop_kernels.uniforms` of a seed per hop and relation, the destination's index and
the draw's), so they do not depend on the path or the split.

Contracts: CSCs are NumPy arrays (``indptr`` int64 ``[num_dst + 1]``, ``indices`` int32 or int64,
``[num_edges]``, memory-mapped allowed); every output is int64 NumPy. The seeds come from a NumPy
generator the caller passes (seeded from torch's by :func:`torch_generator_rng`, so
``torch.manual_seed`` reproduces a batch). A sampler keeps, per thread, one node-indexed int32 scratch
array per type (all -1 between calls) and the buffers a batch is written into (handed over with it).
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from ..data.graph_check import check_csc
from . import hop_kernels, pick_kernels, tree_hops
from .disjoint import DisjointNumbering
from .fanout import check_fanout
from .picks import (
    TEMPORAL_STRATEGIES,
    check_times,
    check_weights,
    cut_by_time,
    floyd_subsets,  # noqa: F401 - imported from here before picks.py
    pick,
    pick_ranges,
    pick_weighted,
    prefix_sums,
    ranges,  # noqa: F401
)


@dataclass(frozen=True)
class Relation:
    """One edge type's in-edge CSC: the sources of destination ``v`` are ``indices[indptr[v]:indptr[v + 1]]``,
    of type ``src_type``; ``v`` is of type ``dst_type``. Optional, one per CSC position: ``times`` (sorted
    within each neighbourhood; an edge's time, or its source's) for temporal sampling, ``weights``
    (float, >= 0) for weighted sampling; not both."""

    indptr: np.ndarray
    indices: np.ndarray
    src_type: Hashable
    dst_type: Hashable
    times: np.ndarray | None = None
    weights: np.ndarray | None = None


@dataclass
class Sampled:
    """A sampled neighbourhood (int64 NumPy arrays). ``nodes[t]``: global ids of type ``t``, seeds first;
    ``batch[t]`` (disjoint only): each node's seed index; ``row``/``col``/``pos`` per relation: sources and
    destinations as indices into ``nodes`` of their type, CSC positions; ``nodes_per_hop[t]``: how many
    nodes of type ``t`` joined at each hop (the seeds first, ``hops + 1`` counts); ``edges_per_hop[r]``:
    how many edges each hop sampled (``hops`` counts)."""

    nodes: dict[Hashable, np.ndarray]
    row: dict[Hashable, np.ndarray]
    col: dict[Hashable, np.ndarray]
    pos: dict[Hashable, np.ndarray]
    nodes_per_hop: dict[Hashable, list[int]]
    edges_per_hop: dict[Hashable, list[int]]
    batch: dict[Hashable, np.ndarray] | None = None


def torch_generator_rng() -> np.random.Generator:
    """A NumPy generator seeded from torch's default generator (so ``torch.manual_seed`` reproduces it)."""
    return np.random.default_rng(int(torch.randint(0, 2**62, (1,))))


class _Numbering:
    """One node type's numbering during a call: global ids in order of joining, and a node-indexed
    array of local ids (-1 for a node not yet numbered), reset when the call ends."""

    def __init__(self, local: np.ndarray) -> None:
        self.local = local
        self.parts: list[np.ndarray] = []
        self.count = 0

    def add_seeds(self, seeds: np.ndarray) -> None:
        # Every seed keeps its place (a repeated seed too: the batch's first rows are the seeds); a
        # repeated id maps to one of its places.
        self.local[seeds] = np.arange(len(seeds), dtype=np.int64)
        self.parts.append(seeds)
        self.count = len(seeds)

    def add(self, ids: np.ndarray) -> tuple[np.ndarray, int]:
        """Local ids of ``ids`` (numbering the new ones in order of first occurrence) and how many were new."""
        local = self.local[ids]
        new = ids[local < 0]
        if len(new) == 0:
            return local.astype(np.int64), 0
        # Unique without sorting: each new id's slot keeps the mark -2 - (its first position in new),
        # written last because the marks go in back to front (NumPy's 1-D fancy assignment writes in
        # order; np.maximum.at would guarantee it at three times the cost; the kernels' path, tested
        # equal, numbers in this order by construction).
        marks = np.arange(len(new), dtype=np.int64)
        self.local[new[::-1]] = -2 - marks[::-1]
        fresh = new[(-2 - self.local[new]) == marks]
        self.local[fresh] = np.arange(self.count, self.count + len(fresh), dtype=np.int64)
        self.parts.append(fresh)
        self.count += len(fresh)
        return self.local[ids].astype(np.int64), len(fresh)

    def nodes(self) -> np.ndarray:
        return np.concatenate(self.parts) if self.parts else np.empty(0, dtype=np.int64)

    def reset(self) -> None:
        for part in self.parts:
            self.local[part] = -1


def _tail(parts: list[np.ndarray], count: int, start: int) -> np.ndarray:
    """The ids numbered from ``start`` (a part's first) to ``count``: the trailing ``parts`` joined."""
    k, n = len(parts), count
    while n > start:
        k -= 1
        n -= len(parts[k])
    return np.concatenate(parts[k:])


class _Growing:
    """An int64 buffer filled front to back during a call and kept between calls, so that a batch
    writes into pages it has touched before (fresh pages cost a fault each: more than the sampling)."""

    def __init__(self) -> None:
        self.data = np.empty(0, dtype=np.int64)
        self.size = 0

    def next(self, n: int) -> np.ndarray:
        """A view of the ``n`` slots after the filled ones (filled by :meth:`fill`)."""
        if self.size + n > len(self.data):
            grown = np.empty(max(self.size + n, 2 * len(self.data)), dtype=np.int64)
            grown[: self.size] = self.data[: self.size]
            self.data = grown
        return self.data[self.size : self.size + n]

    def fill(self, n: int) -> None:
        self.size += n

    def filled(self) -> np.ndarray:
        return self.data[: self.size]

    def take(self) -> np.ndarray:
        """The filled slots, handed over: the buffer starts afresh (as large) rather than copying them."""
        out = self.filled()
        self.data = np.empty(len(self.data), dtype=np.int64)
        self.size = 0
        return out


@dataclass
class _Scratch:
    local: dict[Hashable, np.ndarray] = field(default_factory=dict)
    buffers: dict[Hashable, _Growing] = field(default_factory=dict)

    def buffer(self, key: Hashable) -> _Growing:
        if key not in self.buffers:
            self.buffers[key] = _Growing()
        buf = self.buffers[key]
        buf.size = 0
        return buf


class HopSampler:
    """Multi-hop sampling over ``relations`` (key -> :class:`Relation`), node counts ``num_nodes``
    (type -> int). Thread-safe: each thread has its own scratch arrays. ``compiled``: pick and number
    with :mod:`hop_kernels` (numba; the default where it is installed) or with NumPy alone; both give
    the same batch.

    Every relation's CSC is checked here, once (:func:`~dgl_zerocopy.data.graph_check.check_csc`), since the
    kernels index without bounds checks; per batch only the seeds and fanouts are. ``checked=True`` skips the
    pass for a caller that verified these very arrays (a graph file checked when it was opened).

    Raises:
        ValueError, IndexError, TypeError: a malformed CSC, a source id out of its type's range (position and
            value named), a non-integer array; ValueError also for a node type without a count.
    """

    def __init__(
        self, relations: Mapping[Hashable, Relation], num_nodes: Mapping[Hashable, int], *, compiled: bool | None = None, checked: bool = False
    ) -> None:
        if compiled and not hop_kernels.available:
            raise ImportError("HopSampler(compiled=True) needs numba: pip install numba (or dgl-zerocopy[pyg])")
        self.compiled = hop_kernels.available if compiled is None else bool(compiled)
        self.relations = dict(relations)
        self.num_nodes = {t: int(n) for t, n in num_nodes.items()}
        for key, rel in self.relations.items():
            for t in (rel.src_type, rel.dst_type):
                if t not in self.num_nodes:
                    raise ValueError(f"relation {key!r} names node type {t!r}, which has no node count; give num_nodes[{t!r}]")
            if len(rel.indptr) != self.num_nodes[rel.dst_type] + 1:
                raise ValueError(
                    f"relation {key!r}: indptr has {len(rel.indptr)} entries, expected num_nodes[{rel.dst_type!r}] + 1 = {self.num_nodes[rel.dst_type] + 1}"
                )
            if not checked:
                fix = f"build the CSC from edges whose sources lie in [0, num_nodes[{rel.src_type!r}]), or pass the right num_nodes"
                check_csc(rel.indptr, rel.indices, self.num_nodes[rel.src_type], name=f"relation {key!r} ({rel.src_type!r} -> {rel.dst_type!r})", fix=fix)
        self.times, self.weights, self._sums = {}, {}, {}
        for key, rel in self.relations.items():
            if rel.times is not None and rel.weights is not None:
                raise ValueError(f"relation {key!r}: sampling by time and by weight at once is not supported (nor by pyg-lib); give one")
            if rel.times is not None:
                self.times[key] = check_times(rel.indptr, rel.times, f"relation {key!r}")
            if rel.weights is not None:
                self.weights[key] = check_weights(rel.indptr, rel.weights, f"relation {key!r}")
                self._sums[key] = prefix_sums(rel.indptr, self.weights[key])
        self._local = threading.local()

    def _scratch(self, node_type: Hashable | None = None) -> np.ndarray | _Scratch:
        """This thread's node-indexed array of ``node_type`` (all -1), or its :class:`_Scratch` for None."""
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = _Scratch()
        if node_type is None:
            return scratch
        if node_type not in scratch.local:
            scratch.local[node_type] = np.full(self.num_nodes[node_type], -1, dtype=np.int32)
        return scratch.local[node_type]

    def sample(
        self,
        seeds: Mapping[Hashable, np.ndarray],
        fanouts: Mapping[Hashable, Sequence[int]],
        *,
        replace: bool = False,
        disjoint: bool = False,
        rng: np.random.Generator | None = None,
        seed_times: Mapping[Hashable, np.ndarray] | None = None,
        temporal_strategy: str = "uniform",
    ) -> Sampled:
        """Sample ``len(fanouts[r])`` hops (the same for every relation ``r``) from ``seeds`` (type ->
        global ids). Relations with ``times`` pick only in-edges no later than the time of the seed whose
        tree the destination is in (``seed_times``: type -> one time per seed; needs ``disjoint=True``),
        uniformly or the latest (``temporal_strategy`` ``'uniform'`` or ``'last'``); relations with
        ``weights`` pick by weight. Raises IndexError for a seed outside its type's range, ValueError for a
        fanout that :func:`~.fanout.check_fanout` refuses (not an int, below -1, or past 2**31 - 1), for
        temporal sampling without ``disjoint``, seed times or a known strategy, or with seeds of two types."""
        rng = torch_generator_rng() if rng is None else rng
        seed_time = self._seed_time(seeds, seed_times, disjoint, temporal_strategy)
        fanouts = {key: [check_fanout(f, f"fanouts[{key!r}][{hop}]") for hop, f in enumerate(values)] for key, values in fanouts.items()}
        hops = {len(f) for f in fanouts.values()}
        if len(hops) > 1:
            raise ValueError(f"every relation needs the same number of hops; got fanout lists of lengths {sorted(hops)}")
        num_hops = hops.pop() if hops else 0
        if self.compiled and disjoint:
            return self._sample_trees(seeds, fanouts, num_hops, replace, rng, (seed_time, temporal_strategy))
        if self.compiled and not self.weights:
            return self._sample_compiled(seeds, fanouts, num_hops, replace, rng)
        numbering = {t: DisjointNumbering(self.num_nodes[t]) if disjoint else _Numbering(self._scratch(t)) for t in self.num_nodes}
        try:
            return self._sample(numbering, seeds, fanouts, num_hops, replace, disjoint, rng, (seed_time, temporal_strategy))
        finally:
            for n in numbering.values():
                n.reset()

    def _seed_time(self, seeds, seed_times, disjoint: bool, strategy: str) -> np.ndarray | None:
        """The time of each tree (by seed index) where some relation samples by time, else None."""
        if not self.times:
            return None
        if strategy not in TEMPORAL_STRATEGIES:
            raise ValueError(f"temporal_strategy must be one of {TEMPORAL_STRATEGIES}, but got {strategy!r}")
        if not disjoint:
            raise ValueError("temporal sampling needs disjoint=True: each seed's tree has its own time")
        given = [t for t, ids in seeds.items() if len(np.asarray(ids).reshape(-1))]
        if len(given) > 1:
            raise ValueError(f"temporal sampling takes seeds of one node type, but got seeds of {given}; sample each type apart")
        if not given:
            return np.empty(0, dtype=np.int64)
        t = given[0]
        if seed_times is None or seed_times.get(t) is None:
            raise ValueError(f"temporal sampling needs seed_times[{t!r}], one time per seed")
        times = np.asarray(seed_times[t]).reshape(-1)
        if len(times) != len(np.asarray(seeds[t]).reshape(-1)):
            raise ValueError(f"seed_times[{t!r}] has {len(times)} entries for {len(np.asarray(seeds[t]).reshape(-1))} seeds; give one time per seed")
        return times

    def _pick(self, key, rel: Relation, dst, dst_batch, fanout: int, replace: bool, seed: int, temporal) -> tuple:
        """One hop of one relation: ``(pos, which, sources or None)`` by time, by weight or uniformly (:mod:`picks`;
        compiled: :mod:`pick_kernels`)."""
        seed_time, strategy = temporal
        if key in self.times:
            start, deg = cut_by_time(rel.indptr, self.times[key], dst, seed_time[dst_batch], fanout, strategy)
            return (*pick_ranges(start, deg, fanout, replace, seed), None)
        if key in self.weights:
            weighted = pick_kernels.pick_weighted if self.compiled else pick_weighted
            return (*weighted(rel.indptr, self.weights[key], self._sums[key], dst, fanout, replace, seed), None)
        return (*pick(rel.indptr, dst, fanout, replace, seed), None)

    def _seeds(self, t: Hashable, ids) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if len(ids) and (ids.min() < 0 or ids.max() >= self.num_nodes[t]):
            bad = ids[(ids < 0) | (ids >= self.num_nodes[t])][0]
            raise IndexError(f"seed {int(bad)} of node type {t!r} is outside [0, {self.num_nodes[t]}); pass node ids of that type")
        return ids

    def _sample_compiled(self, seeds, fanouts, num_hops, replace, rng) -> Sampled:
        """:meth:`_sample` without ``disjoint``, by :mod:`hop_kernels`, into this thread's kept buffers
        (copied out at the end): the same batch, element for element."""
        scratch = self._scratch()
        seeds = {t: self._seeds(t, ids) for t, ids in seeds.items()}
        local = {t: self._scratch(t) for t in self.num_nodes}
        nodes = {t: scratch.buffer(("nodes", t)) for t in self.num_nodes}
        edges = {r: tuple(scratch.buffer((part, r)) for part in ("row", "col", "pos")) for r in self.relations}
        offset, src = scratch.buffer("offset"), scratch.buffer("src")
        per_hop = {t: [0] for t in self.num_nodes}
        edges_per_hop = {r: [] for r in self.relations}
        try:
            frontier = {}  # type -> (first local id, global ids) of last hop's new nodes
            for t, ids in seeds.items():
                local[t][ids] = np.arange(len(ids), dtype=np.int64)  # as _Numbering.add_seeds
                nodes[t].next(len(ids))[:] = ids
                nodes[t].fill(len(ids))
                per_hop[t][0] = len(ids)
                frontier[t] = (0, ids)
            for hop in range(num_hops):
                before = {t: nodes[t].size for t in self.num_nodes}
                for key, rel in self.relations.items():
                    fanout = int(fanouts[key][hop]) if key in fanouts else 0
                    first, dst = frontier.get(rel.dst_type, (0, np.empty(0, np.int64)))
                    if fanout == 0 or len(dst) == 0:
                        edges_per_hop[key].append(0)
                        continue
                    seed = int(rng.integers(0, 2**63))  # drawn as the NumPy path draws it
                    starts = offset.next(len(dst) + 1)
                    total = hop_kernels.count(rel.indptr, dst, fanout, replace, starts)
                    rows, cols, poss = edges[key]
                    hop_kernels.pick(rel.indptr, rel.indices, dst, starts, fanout, replace, seed, first, poss.next(total), cols.next(total), src.next(total))
                    new = hop_kernels.number(local[rel.src_type], src.next(total), nodes[rel.src_type].size, rows.next(total), nodes[rel.src_type].next(total))
                    nodes[rel.src_type].fill(new)
                    for part in edges[key]:
                        part.fill(total)
                    edges_per_hop[key].append(total)
                frontier = {}
                for t in self.num_nodes:
                    new = nodes[t].size - before[t]
                    per_hop[t].append(new)
                    if new:
                        frontier[t] = (before[t], nodes[t].filled()[before[t] :])  # appended to, never overwritten
            return Sampled(
                nodes={t: nodes[t].filled().copy() for t in self.num_nodes},
                row={r: e[0].take() for r, e in edges.items()},
                col={r: e[1].take() for r, e in edges.items()},
                pos={r: e[2].take() for r, e in edges.items()},
                nodes_per_hop=per_hop,
                edges_per_hop=edges_per_hop,
            )
        finally:
            for t in self.num_nodes:
                local[t][nodes[t].filled()] = -1

    def _sample_trees(self, seeds, fanouts, num_hops, replace, rng, temporal) -> Sampled:
        """:meth:`_sample` with ``disjoint``, by :mod:`tree_hops` (compiled picks and tree-by-tree numbering)."""
        seeds = {t: self._seeds(t, ids) for t, ids in seeds.items()}
        picks = {key: ("time", times) for key, times in self.times.items()}
        picks.update({key: ("weight", weights, self._sums[key]) for key, weights in self.weights.items()})
        local = {t: self._scratch(t) for t in self.num_nodes}
        nodes, batch, row, col, pos, per_hop, edges_per_hop = tree_hops.sample_trees(
            self.relations, picks, self._scratch(), local, seeds, fanouts, num_hops, replace, rng, temporal
        )
        return Sampled(nodes=nodes, row=row, col=col, pos=pos, nodes_per_hop=per_hop, edges_per_hop=edges_per_hop, batch=batch)

    def _sample(self, numbering, seeds, fanouts, num_hops, replace, disjoint, rng, temporal=(None, "uniform")) -> Sampled:
        per_hop = {t: [0] for t in self.num_nodes}
        frontier = {}  # type -> (first local id, global ids, seed indices or None) of last hop's new nodes
        for t, ids in seeds.items():
            ids = self._seeds(t, ids)
            numbering[t].add_seeds(ids)
            per_hop[t][0] = len(ids)
            frontier[t] = (0, ids, np.arange(len(ids), dtype=np.int64) if disjoint else None)
        edges = {r: ([], [], []) for r in self.relations}
        edges_per_hop = {r: [] for r in self.relations}
        for hop in range(num_hops):
            added = {t: [] for t in self.num_nodes}
            for key, rel in self.relations.items():
                fanout = int(fanouts[key][hop]) if key in fanouts else 0
                first, dst, dst_batch = frontier.get(rel.dst_type, (0, np.empty(0, np.int64), None))
                if fanout == 0 or len(dst) == 0:
                    edges_per_hop[key].append(0)
                    continue
                pos, which, src = self._pick(key, rel, dst, dst_batch, fanout, replace, int(rng.integers(0, 2**63)), temporal)
                src = rel.indices[pos].astype(np.int64, copy=False) if src is None else src
                before = numbering[rel.src_type].count
                if disjoint:
                    src_batch = dst_batch[which]
                    row, new = numbering[rel.src_type].add(src, src_batch)
                else:
                    row, new = numbering[rel.src_type].add(src)
                if new:
                    added[rel.src_type].append((before, new))
                rows, cols, poss = edges[key]
                rows.append(row)
                cols.append(first + which)
                poss.append(pos)
                edges_per_hop[key].append(len(pos))
            frontier = {}
            for t, spans in added.items():
                total = sum(n for _, n in spans)
                per_hop[t].append(total)
                if total:
                    start, n = spans[0][0], numbering[t]
                    batch = _tail(n.batches, n.count, start) if disjoint else None
                    frontier[t] = (start, _tail(n.ids if disjoint else n.parts, n.count, start), batch)
        empty = np.empty(0, dtype=np.int64)
        return Sampled(
            nodes={t: numbering[t].nodes() for t in self.num_nodes},
            row={r: np.concatenate(e[0]) if e[0] else empty for r, e in edges.items()},
            col={r: np.concatenate(e[1]) if e[1] else empty for r, e in edges.items()},
            pos={r: np.concatenate(e[2]) if e[2] else empty for r, e in edges.items()},
            nodes_per_hop=per_hop,
            edges_per_hop=edges_per_hop,
            batch={t: numbering[t].batch() for t in self.num_nodes} if disjoint else None,
        )

    def induced_edges(self, nodes: Mapping[Hashable, np.ndarray]) -> tuple[dict, dict, dict]:
        """Every edge among ``nodes`` (type -> distinct global ids): ``(row, col, pos)`` per relation, as
        local indices into ``nodes`` of the source and destination types and CSC positions, grouped by
        destination in ``nodes``' order."""
        locals_ = {}
        try:
            for t, ids in nodes.items():
                local = self._scratch(t)
                local[ids] = np.arange(len(ids), dtype=np.int64)
                locals_[t] = (local, ids)
            rows, cols, poss = {}, {}, {}
            for key, rel in self.relations.items():
                src_local = locals_[rel.src_type][0] if rel.src_type in locals_ else None
                dst = nodes.get(rel.dst_type, np.empty(0, np.int64))
                if src_local is None or len(dst) == 0:
                    rows[key] = cols[key] = poss[key] = np.empty(0, dtype=np.int64)
                    continue
                pos, which = pick(rel.indptr, dst, -1, False, 0)
                row = src_local[rel.indices[pos]].astype(np.int64)
                keep = row >= 0
                rows[key], cols[key], poss[key] = row[keep], which[keep], pos[keep]
            return rows, cols, poss
        finally:
            for local, ids in locals_.values():
                local[ids] = -1
