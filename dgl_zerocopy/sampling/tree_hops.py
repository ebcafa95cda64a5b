"""Disjoint batches on the compiled path: :meth:`~.cpu_hops.HopSampler.sample` with ``disjoint=True``, hop by hop.

Each hop of each relation picks with :mod:`hop_kernels` (uniformly; by time inside the bounds that
:func:`pick_kernels.cut_by_time` writes; or by weight with :func:`pick_kernels.pick_weighted`) and numbers
the sources tree by tree (:class:`~.disjoint.TreeNumbering`), everything written into the sampling thread's
kept buffers, so that a batch faults in no fresh pages and no pass in Python touches every edge. The same
batch as the NumPy path (:class:`~.disjoint.DisjointNumbering`), element for element: the same draws, in the
same order, and new (tree, node) pairs numbered in order of first occurrence.

Why it holds: the seeds are grouped by tree (seed ``i`` is tree ``i``), a hop's picks come out grouped by
destination, so a run of destinations grouped by tree gives sources grouped by tree, and numbering them tree
by tree keeps them grouped. A type that gains nodes from two relations in one hop has two such runs, each
numbered after the one before. Contracts: as :mod:`cpu_hops` (int64 NumPy outputs); needs numba.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import numpy as np

from . import hop_kernels, pick_kernels
from .disjoint import TreeNumbering


def sample_trees(
    relations: Mapping,
    picks: Mapping[Hashable, tuple],
    scratch,
    local: Mapping[Hashable, np.ndarray],
    seeds: Mapping[Hashable, np.ndarray],
    fanouts: Mapping[Hashable, Sequence[int]],
    num_hops: int,
    replace: bool,
    rng: np.random.Generator,
    temporal: tuple,
) -> tuple:
    """``num_hops`` hops of disjoint trees from ``seeds`` (type -> checked int64 ids) over ``relations``
    (key -> :class:`~.cpu_hops.Relation`); ``picks[key]``: ``('time', times)`` or ``('weight', weights,
    sums)`` for a relation that samples so; ``scratch``: the thread's :class:`~.cpu_hops._Scratch`;
    ``local[t]``: its node-indexed int32 array of type ``t`` (all -1, and so again on return);
    ``temporal``: ``(time of each tree, strategy)``. Returns ``(nodes, batch, row, col, pos, nodes_per_hop,
    edges_per_hop)`` as :class:`~.cpu_hops.Sampled` holds them."""
    tree_time, strategy = temporal
    num_trees = max((len(ids) for ids in seeds.values()), default=0)
    numbering = {t: TreeNumbering(local[t], scratch.buffer(("tree nodes", t)), scratch.buffer(("tree batch", t)), num_trees) for t in local}
    edges = {r: tuple(scratch.buffer((part, r)) for part in ("row", "col", "pos")) for r in relations}
    offset, src, bounds, cut = (scratch.buffer(("tree", what)) for what in ("offset", "src", "bounds", "cut"))
    per_hop = {t: [0] for t in local}
    edges_per_hop = {r: [] for r in relations}
    for t, ids in seeds.items():
        numbering[t].add_seeds(ids)
        per_hop[t][0] = len(ids)
    for hop in range(num_hops):
        before = {t: n.count for t, n in numbering.items()}
        frontier = {t: n.start_hop() for t, n in numbering.items()}
        for key, rel in relations.items():
            fanout = int(fanouts[key][hop]) if key in fanouts else 0
            first, dst, dst_tree, runs = frontier[rel.dst_type]
            if fanout == 0 or len(dst) == 0:
                edges_per_hop[key].append(0)
                continue
            seed = int(rng.integers(0, 2**63))  # drawn as the NumPy path draws it
            starts = offset.next(len(dst) + 1)
            rows, cols, poss = edges[key]
            how = picks.get(key, ("uniform",))
            if how[0] == "weight":
                pos, which = pick_kernels.pick_weighted(rel.indptr, how[1], how[2], dst, fanout, replace, seed)
                total = len(pos)
                starts[:] = np.searchsorted(which, np.arange(len(dst) + 1))
                poss.next(total)[:] = pos
                cols.next(total)[:] = first + which
                src.next(total)[:] = rel.indices[pos]
            else:
                indptr, where = rel.indptr, dst
                if how[0] == "time":
                    # The cut as a two-entry indptr per destination: the picks run inside it unchanged.
                    indptr = pick_kernels.cut_by_time(rel.indptr, how[1], dst, dst_tree, tree_time, fanout, strategy, bounds.next(2 * len(dst)))
                    where = cut.next(len(dst))
                    where[:] = np.arange(0, 2 * len(dst), 2)
                total = hop_kernels.count(indptr, where, fanout, replace, starts)
                hop_kernels.pick(indptr, rel.indices, where, starts, fanout, replace, seed, first, poss.next(total), cols.next(total), src.next(total))
            numbering[rel.src_type].add(src.next(total), starts, dst_tree, rows.next(total), runs)
            for part in edges[key]:
                part.fill(total)
            edges_per_hop[key].append(total)
        for t, n in numbering.items():
            per_hop[t].append(n.count - before[t])
    return (
        {t: n.nodes.filled().copy() for t, n in numbering.items()},
        {t: n.trees.filled().copy() for t, n in numbering.items()},
        {r: e[0].take() for r, e in edges.items()},
        {r: e[1].take() for r, e in edges.items()},
        {r: e[2].take() for r, e in edges.items()},
        per_hop,
        edges_per_hop,
    )
