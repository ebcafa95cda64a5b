"""The numbering of disjoint trees: each seed's tree numbers its own nodes, a node being a (tree, id) pair.

Two implementations, the same numbers: :class:`DisjointNumbering` (NumPy: sorted keys and a search per hop;
the reference) and :class:`TreeNumbering` (numba, for :mod:`tree_hops`: pairs grouped by tree, numbered tree
by tree in a node-indexed array the sampling thread keeps, into its kept buffers: no sort, no hash, no fresh
pages). Either numbers new pairs in order of first occurrence, from the current count.
Contracts: ids and tree indices int64 NumPy; every output int64.
"""

from __future__ import annotations

import numpy as np

from . import hop_kernels


class DisjointNumbering:
    """A node type's numbering when every seed has its own tree: a node is a (seed index, global id) pair."""

    def __init__(self, num_nodes: int) -> None:
        self.num_nodes = max(int(num_nodes), 1)
        self.keys = np.empty(0, dtype=np.int64)  # sorted keys seed * num_nodes + id
        self.key_local = np.empty(0, dtype=np.int64)
        self.ids: list[np.ndarray] = []
        self.batches: list[np.ndarray] = []
        self.count = 0

    def add_seeds(self, seeds: np.ndarray) -> None:
        self.add(seeds, np.arange(len(seeds), dtype=np.int64))

    def add(self, ids: np.ndarray, batch: np.ndarray) -> tuple[np.ndarray, int]:
        keys = batch * self.num_nodes + ids
        where = np.searchsorted(self.keys, keys)
        known = where < len(self.keys)
        known[known] = self.keys[where[known]] == keys[known]
        local = np.empty(len(keys), dtype=np.int64)
        local[known] = self.key_local[where[known]]
        fresh_keys, first, inverse = np.unique(keys[~known], return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")  # in order of first occurrence
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))
        fresh_local = self.count + rank
        local[~known] = fresh_local[inverse.reshape(-1)]
        self.ids.append(fresh_keys[order] % self.num_nodes)
        self.batches.append(fresh_keys[order] // self.num_nodes)
        merged = np.concatenate([self.keys, fresh_keys])
        sort = np.argsort(merged, kind="stable")
        self.keys = merged[sort]
        self.key_local = np.concatenate([self.key_local, fresh_local])[sort]
        self.count += len(order)
        return local, len(order)

    def nodes(self) -> np.ndarray:
        return np.concatenate(self.ids) if self.ids else np.empty(0, dtype=np.int64)

    def batch(self) -> np.ndarray:
        return np.concatenate(self.batches) if self.batches else np.empty(0, dtype=np.int64)

    def reset(self) -> None:
        pass


if hop_kernels.available:
    _prefetch = hop_kernels._prefetch

    @hop_kernels._jit
    def _number_run(src, offset, lo, hi, dst_tree, nodes, trees, count, part_lo, part_off, local, rows, ahead):
        """Number the sources ``src[offset[i]:offset[i + 1]]`` of destinations ``i`` in ``lo:hi``, whose trees
        ``dst_tree[i]`` are non-decreasing, tree by tree: the tree's earlier nodes (of each part ``p``: positions
        ``part_lo[p] + part_off[p, b]`` up to ``part_lo[p] + part_off[p, b + 1]`` of ``nodes``) marked in the
        node-indexed ``local`` (-1 elsewhere), the tree's sources numbered against them (new ones appended to
        ``nodes``/``trees`` from ``count``), then ``local`` wiped again. ``rows[e]``: source ``e``'s local id.
        Returns the new count."""
        n, i, last = count, lo, offset[hi]
        while i < hi:
            b, j = dst_tree[i], i
            while j < hi and dst_tree[j] == b:
                j += 1
            for p in range(len(part_lo)):
                for q in range(part_lo[p] + part_off[p, b], part_lo[p] + part_off[p, b + 1]):
                    local[nodes[q]] = q
            fresh = n
            for e in range(offset[i], offset[j]):
                if e + ahead < last:
                    _prefetch(local, src[e + ahead])
                v = src[e]
                r = local[v]
                if r < 0:
                    r = n
                    local[v] = n
                    nodes[n] = v
                    trees[n] = b
                    n += 1
                rows[e] = r
            for p in range(len(part_lo)):
                for q in range(part_lo[p] + part_off[p, b], part_lo[p] + part_off[p, b + 1]):
                    local[nodes[q]] = -1
            for q in range(fresh, n):
                local[nodes[q]] = -1
            i = j
        return n


class TreeNumbering:
    """:class:`DisjointNumbering` of one node type, compiled, for pairs that come in runs grouped by tree.

    The type's nodes and their trees are written into ``nodes`` and ``trees`` (the sampling thread's kept
    buffers, :class:`~.cpu_hops._Growing`) in parts: the seeds, then one part per run numbered, each grouped by
    tree, with where each tree's nodes start in it. A run is numbered tree by tree against the tree's nodes so
    far, marked in ``local`` (the thread's node-indexed int32 array, all -1 between calls: in cache where a
    table keyed by (tree, node) is not), so no sort and no hash. Needs numba."""

    def __init__(self, local: np.ndarray, nodes, trees, num_trees: int) -> None:
        self.local, self.nodes, self.trees = local, nodes, trees
        self.num_trees = num_trees
        self.part_lo: list[int] = []
        self.part_off: list[np.ndarray] = []
        self.hop_first = 0  # the parts and first local id of the nodes that joined since the last start_hop()
        self.hop_parts = 0

    @property
    def count(self) -> int:
        return self.nodes.size

    def add_seeds(self, seeds: np.ndarray) -> None:
        """The seeds first, seed ``i`` in tree ``i``."""
        self.nodes.next(len(seeds))[:] = seeds
        self.trees.next(len(seeds))[:] = np.arange(len(seeds))
        self._add_part(len(seeds))

    def start_hop(self) -> tuple[int, np.ndarray, np.ndarray, list[tuple[int, int]]]:
        """The nodes that joined since the last call (the seeds at first), as the next hop's destinations:
        ``(first local id, global ids, trees, runs)``, each run a ``(lo, hi)`` slice of them grouped by tree."""
        first, parts = self.hop_first, range(len(self.part_lo) - self.hop_parts, len(self.part_lo))
        ends = [self.part_lo[p] for p in parts[1:]] + [self.count]
        runs = [(self.part_lo[p] - first, end - first) for p, end in zip(parts, ends)]
        self.hop_first, self.hop_parts = self.count, 0
        return first, self.nodes.filled()[first:], self.trees.filled()[first:], runs

    def add(self, src: np.ndarray, offset: np.ndarray, dst_tree: np.ndarray, rows: np.ndarray, runs: list[tuple[int, int]]) -> int:
        """Local ids into ``rows`` of the pairs ``(dst_tree[i], src[e])`` for the sources ``e`` in
        ``offset[i]:offset[i + 1]`` of each destination ``i``, numbering new pairs in order of first occurrence;
        each of ``runs`` (``(lo, hi)`` destinations, in order) grouped by tree. Returns how many were new."""
        before = self.count
        for lo, hi in runs:
            edges = int(offset[hi] - offset[lo])
            if edges == 0:
                continue
            count = self.count
            self.nodes.next(edges)
            self.trees.next(edges)
            part_lo = np.array(self.part_lo, dtype=np.int64)
            part_off = np.stack(self.part_off) if self.part_off else np.empty((0, self.num_trees + 1), dtype=np.int64)
            args = (src, offset, lo, hi, dst_tree, self.nodes.data, self.trees.data, count, part_lo, part_off, self.local, rows)
            self._add_part(int(_number_run(*args, hop_kernels._AHEAD)) - count)
        return self.count - before

    def _add_part(self, n: int) -> None:
        if n == 0:
            return
        start = self.count
        self.nodes.fill(n)
        self.trees.fill(n)
        self.part_lo.append(start)
        self.part_off.append(np.searchsorted(self.trees.filled()[start:], np.arange(self.num_trees + 1)))
        self.hop_parts += 1
