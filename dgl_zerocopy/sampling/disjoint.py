"""The numbering of disjoint trees: each seed's tree numbers its own nodes, a node being a (tree, id) pair.

Two implementations, the same numbers: :class:`DisjointNumbering` (NumPy: sorted keys and a search per hop;
the reference) and :class:`HashedDisjointNumbering` (numba: one pass over a hop's edges into an
open-addressing hash table kept by the sampling thread between batches, so that a batch neither allocates nor
clears more than it used). Either numbers new pairs in order of first occurrence, from the current count.
Contracts: ids and tree indices int64 NumPy; every output int64.
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from . import hop_kernels

_AHEAD = 16  # the hash table's slots prefetched this many edges ahead (each probe past the cache is a miss)


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
    _ROW = hop_kernels._ROW
    _prefetch = hop_kernels._prefetch

    @hop_kernels._jit
    def _slot(key, mask):
        return np.int64((np.uint64(key) * _ROW) >> np.uint64(24)) & mask

    @hop_kernels._jit
    def _number_pairs(table, batch, ids, num_nodes, count, rows, fresh, slots):
        """Keys ``batch * num_nodes + ids`` into ``table`` (``[2 * capacity]``: key, local id; key -1 empty):
        ``rows`` their local ids, new ones numbered from ``count`` and listed in ``fresh`` with their ``slots``;
        returns how many were new."""
        mask = len(table) // 2 - 1
        n = 0
        m = len(ids)
        for e in range(m):
            if e + _AHEAD < m:
                _prefetch(table, 2 * _slot(batch[e + _AHEAD] * num_nodes + ids[e + _AHEAD], mask))
            key = batch[e] * num_nodes + ids[e]
            s = _slot(key, mask)
            while True:
                if table[2 * s] == key:
                    rows[e] = table[2 * s + 1]
                    break
                if table[2 * s] < 0:
                    table[2 * s] = key
                    table[2 * s + 1] = count + n
                    rows[e] = count + n
                    fresh[n] = key
                    slots[n] = s
                    n += 1
                    break
                s = (s + 1) & mask
        return n

    @hop_kernels._jit
    def _number_by_tree(prior_ids, prior_batch, batch, ids, local, count, rows, fresh, fresh_batch):
        """The pairs ``(batch, ids)`` against the earlier pairs ``(prior_batch, prior_ids)`` (both batches
        non-decreasing; an earlier pair's local id is its position), tree by tree: a tree's earlier nodes are
        written into the node-indexed ``local`` (-1 elsewhere), its pairs numbered from ``count``, ``local``
        wiped again. Returns how many were new (their ids in ``fresh``, trees in ``fresh_batch``)."""
        n, e, m, c = 0, 0, len(ids), 0
        while e < m:
            b = batch[e]
            while c < len(prior_batch) and prior_batch[c] < b:
                c += 1
            lo = c
            while c < len(prior_batch) and prior_batch[c] == b:
                local[prior_ids[c]] = c
                c += 1
            first = n
            while e < m and batch[e] == b:
                v = ids[e]
                r = local[v]
                if r < 0:
                    r = count + n
                    local[v] = r
                    fresh[n] = v
                    fresh_batch[n] = b
                    n += 1
                rows[e] = r
                e += 1
            for q in range(lo, c):
                local[prior_ids[q]] = -1
            for q in range(first, n):
                local[fresh[q]] = -1
        return n


class HashedDisjointNumbering:
    """:class:`DisjointNumbering` of ``node_type`` by a hash table of keys ``tree * num_nodes + id`` that
    ``scratch`` (the sampling thread's :class:`~.cpu_hops._Scratch`) keeps between batches, one per type; grown to stay under half full,
    and only its used slots cleared by :meth:`reset`. Needs numba."""

    def __init__(self, num_nodes: int, scratch, node_type: Hashable) -> None:
        self.num_nodes = max(int(num_nodes), 1)
        self.scratch, self.key = scratch, ("disjoint pairs", node_type)  # a table per node type
        if self.key not in scratch.local:
            scratch.local[self.key] = np.full(2 * 1024, -1, dtype=np.int64)
        self.ids: list[np.ndarray] = []
        self.batches: list[np.ndarray] = []
        self.slots: list[np.ndarray] = []
        self.count = 0

    def add_seeds(self, seeds: np.ndarray) -> None:
        self.add(seeds, np.arange(len(seeds), dtype=np.int64))

    def add(self, ids: np.ndarray, batch: np.ndarray) -> tuple[np.ndarray, int]:
        """Local ids of the pairs ``(batch, ids)``, numbering the new ones; and how many were new."""
        ids, batch = ids.astype(np.int64, copy=False), batch.astype(np.int64, copy=False)
        if 4 * (self.count + len(ids)) > len(self.scratch.local[self.key]):
            self._grow(4 * (self.count + len(ids)))
        rows, fresh, slots = (np.empty(len(ids), dtype=np.int64) for _ in range(3))
        new = int(_number_pairs(self.scratch.local[self.key], batch, ids, self.num_nodes, self.count, rows, fresh, slots))
        self.ids.append(fresh[:new] % self.num_nodes)
        self.batches.append(fresh[:new] // self.num_nodes)
        self.slots.append(slots[:new])
        self.count += new
        return rows, new

    def _grow(self, size: int) -> None:
        self.scratch.local[self.key] = np.full(1 << int(size - 1).bit_length(), -1, dtype=np.int64)
        ids, batch = self.nodes(), self.batch()
        slots = np.empty(len(ids), dtype=np.int64)
        # Re-inserted in order of their local ids, so that each gets its own id back.
        _number_pairs(self.scratch.local[self.key], batch, ids, self.num_nodes, 0, np.empty_like(ids), np.empty_like(ids), slots)
        self.slots = [slots]

    def nodes(self) -> np.ndarray:
        return np.concatenate(self.ids) if self.ids else np.empty(0, dtype=np.int64)

    def batch(self) -> np.ndarray:
        return np.concatenate(self.batches) if self.batches else np.empty(0, dtype=np.int64)

    def reset(self) -> None:
        """Empty the slots this call used (the table stays, as large, for the next batch)."""
        table = self.scratch.local[self.key]
        for slots in self.slots:
            table[2 * slots] = -1
        self.slots = []


class TreeDisjointNumbering:
    """:class:`DisjointNumbering` tree by tree, where the trees come in order: while every call's pairs are
    grouped by tree (non-decreasing tree index), a tree's nodes so far are marked in a node-indexed array
    (the sampling thread's, all -1 between calls: in cache where the hash table is not) and its pairs numbered
    against them. The first call whose pairs are not grouped hands the numbering over to
    :class:`HashedDisjointNumbering` (the same ids). Needs numba."""

    def __init__(self, num_nodes: int, scratch, node_type: Hashable) -> None:
        self.num_nodes, self.scratch, self.node_type = max(int(num_nodes), 1), scratch, node_type
        key = ("tree local", node_type)
        if key not in scratch.local:
            scratch.local[key] = np.full(self.num_nodes, -1, dtype=np.int32)  # local ids of one batch: int32 halves the misses
        self.local = scratch.local[key]
        self.ids: list[np.ndarray] = []
        self.batches: list[np.ndarray] = []
        self.count = 0
        self.hashed: HashedDisjointNumbering | None = None

    def add_seeds(self, seeds: np.ndarray) -> None:
        self.add(seeds, np.arange(len(seeds), dtype=np.int64))

    def add(self, ids: np.ndarray, batch: np.ndarray) -> tuple[np.ndarray, int]:
        ids, batch = ids.astype(np.int64, copy=False), batch.astype(np.int64, copy=False)
        if self.hashed is None and len(batch) > 1 and (batch[1:] < batch[:-1]).any():
            self.hashed = HashedDisjointNumbering(self.num_nodes, self.scratch, self.node_type)
            if self.count:
                self.hashed.add(self.nodes(), self.batch())
        if self.hashed is not None:
            rows, new = self.hashed.add(ids, batch)
            self.ids, self.batches, self.count = self.hashed.ids, self.hashed.batches, self.hashed.count
            return rows, new
        prior_ids, prior_batch = self.nodes(), self.batch()
        if len(prior_batch) > 1 and (prior_batch[1:] < prior_batch[:-1]).any():
            # Earlier parts, each grouped by tree, joined: sorted by tree (stable) for the walk; their positions
            # are the local ids, so the walk is given the ids sorted the same way, and the local ids mapped back.
            order = np.argsort(prior_batch, kind="stable")
        else:
            order = None
        rows, fresh, fresh_batch = (np.empty(len(ids), dtype=np.int64) for _ in range(3))
        walked = (prior_ids, prior_batch) if order is None else (prior_ids[order], prior_batch[order])
        new = int(_number_by_tree(*walked, batch, ids, self.local, self.count, rows, fresh, fresh_batch))
        if order is not None:
            old = rows < self.count
            rows[old] = order[rows[old]]
        self.ids.append(fresh[:new])
        self.batches.append(fresh_batch[:new])
        self.count += new
        return rows, new

    def nodes(self) -> np.ndarray:
        return np.concatenate(self.ids) if self.ids else np.empty(0, dtype=np.int64)

    def batch(self) -> np.ndarray:
        return np.concatenate(self.batches) if self.batches else np.empty(0, dtype=np.int64)

    def reset(self) -> None:
        if self.hashed is not None:
            self.hashed.reset()
