"""The snapshot's compact CSC and the vectorised draws over it (used by :mod:`.snapshot`).

- :class:`Snapshot`: per node ``min(deg, size)`` slots, each an in-edge (source, edge id).
- :func:`build_snapshot` / :func:`fill`: draw the slots of all nodes / of some nodes from the full
  CSC, uniformly without replacement (:func:`draw_subsets`, Floyd's algorithm over all rows at once).
- :class:`PickTables`: one layer's picks from the snapshot, by table lookup (see its docstring).
- :class:`Relabel`: a block's source numbering with node-indexed scratch arrays.
- :class:`RefreshOrder`: which nodes each refresh redraws.

Everything is torch operations over whole id arrays: no Python loop per node.
"""

from __future__ import annotations

import sys
from typing import NamedTuple

import numpy as np
import torch

from .picks import floyd_steps

_INT32_MAX = 2**31 - 1
TABLE_SLOTS = 256  # PickTables: slot counts up to this are looked up in tables; larger ones drawn at each visit
_CHUNK = 1 << 20  # entries of the [nodes, size] draw matrix made at once (bounds the build's scratch memory: ~40 bytes each)


class Snapshot(NamedTuple):
    """The compact CSC: node ``v``'s slots are ``indptr[v]:indptr[v + 1]`` (``min(deg(v), size)``
    of them); ``src[i]`` is the source node and ``eid[i]`` the original graph's edge id of slot ``i``.

    On the CPU, when both are int32, :func:`build_snapshot` stores them side by side (``src`` and
    ``eid`` are the two columns of one ``[slots, 2]`` array): :attr:`packed` then reads a slot's
    source and edge id in one 8-byte load, so a layer's random reads of its picks cost one cache
    miss per slot instead of two."""

    indptr: torch.Tensor
    src: torch.Tensor
    eid: torch.Tensor

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self)

    @property
    def packed(self) -> torch.Tensor | None:
        """Slot ``i``'s (source, edge id) as one int64 (a view of ``src`` and ``eid``; read it back with
        ``.view(torch.int32).view(-1, 2)``), or None when they are not stored side by side."""
        src, eid = self.src, self.eid
        if src.dtype != torch.int32 or eid.dtype != torch.int32 or src.device.type != "cpu":
            return None
        if src.stride() != (2,) or eid.stride() != (2,) or eid.data_ptr() != src.data_ptr() + 4:
            return None
        return torch.as_strided(src, (src.numel(), 2), (2, 1)).view(torch.int64).view(-1)


def id_dtype(largest: int) -> torch.dtype:
    """int32 when every id up to ``largest`` fits, else int64."""
    return torch.int32 if largest <= _INT32_MAX else torch.int64


def draw_subsets(counts: torch.Tensor, k: int) -> torch.Tensor:
    """Row ``i`` of the ``[len(counts), k]`` int64 result: ``k`` distinct offsets in ``[0, counts[i])``
    (every ``counts[i] >= k``), uniform over all such subsets; a transposed view (``.t()`` of a
    contiguous ``[k, n]`` array). Floyd's algorithm, one vectorised step per column: at step ``s``
    draw ``t`` uniformly in ``[0, j]`` with ``j = counts - k + s``, and keep ``t``, or ``j`` when ``t``
    is taken already (``j`` never is: earlier steps drew below it). "Taken" is a flag per (row,
    offset) in one scratch array, so a step costs O(rows), not O(rows * s).

    In NumPy (4x faster random numbers, and elementwise steps several times faster than torch's on
    one thread), from a NumPy generator seeded by torch's default generator: ``torch.manual_seed``
    reproduces the draws."""
    n = counts.numel()
    if n == 0 or k == 0:
        return torch.empty(n, k, dtype=torch.int64)
    uniform = np.random.default_rng(int(torch.randint(0, 2**62, (1,)))).random((k, n))
    return torch.from_numpy(floyd_steps(counts.numpy().astype(np.int64), uniform)).t()


def ranges(starts: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The concatenation of ``arange(starts[i], starts[i] + lengths[i])`` (int64)."""
    lengths = lengths.long()
    total = int(lengths.sum())
    first = torch.repeat_interleave(torch.cumsum(lengths, 0) - lengths, lengths, output_size=total)
    return torch.repeat_interleave(starts.long(), lengths, output_size=total) + torch.arange(total) - first


def fill(snap: Snapshot, full: tuple, nodes: torch.Tensor, size: int) -> None:
    """Redraw the slots of ``nodes`` (distinct ids) from the full CSC ``full`` = ``(indptr, indices,
    eids or None)``: every in-edge where there are at most ``size``, else ``size`` of them uniformly
    without replacement. In place; the slot counts stay as they are."""
    indptr, indices, eids = full
    step = max(1, _CHUNK // max(size, 1))
    for lo in range(0, nodes.numel(), step):
        chunk = nodes[lo : lo + step].long()
        start = torch.index_select(indptr, 0, chunk).long()
        deg = torch.index_select(indptr, 0, chunk + 1).long() - start
        slot_start = torch.index_select(snap.indptr, 0, chunk).long()
        whole = deg <= size  # these keep every in-edge
        pos, slots = [], []
        if bool(whole.any()):
            pos.append(ranges(start[whole], deg[whole]))
            slots.append(ranges(slot_start[whole], deg[whole]))
        big = torch.nonzero(~whole).squeeze(1)
        if big.numel():  # step by step ([size, nodes], draw_subsets' own layout): slot order is free
            pos.append((draw_subsets(deg[big], size).t() + start[big]).view(-1))
            slots.append((torch.arange(size).unsqueeze(1) + slot_start[big]).view(-1))
        pos, slots = (pos[0], slots[0]) if len(pos) == 1 else (torch.cat(pos), torch.cat(slots))
        src = torch.index_select(indices, 0, pos).to(snap.src.dtype)
        eid = (pos if eids is None else torch.index_select(eids, 0, pos)).to(snap.eid.dtype)
        packed = snap.packed
        if packed is not None:  # one scattered write per slot
            packed.index_copy_(0, slots, torch.stack([src, eid], 1).view(torch.int64).view(-1))
        else:
            snap.src.index_copy_(0, slots, src)
            snap.eid.index_copy_(0, slots, eid)


def side_by_side(snap: Snapshot) -> Snapshot:
    """``snap`` with its sources and edge ids stored side by side (:attr:`Snapshot.packed`) where both
    are int32 on the CPU and are not so already (a copy); else ``snap`` itself. (Plain ``pickle``
    sends the two columns of the pairs as two arrays: the receiver packs them again.)"""
    if snap.packed is not None or snap.src.dtype != torch.int32 or snap.eid.dtype != torch.int32 or snap.src.device.type != "cpu":
        return snap
    pairs = torch.stack([snap.src, snap.eid], 1)
    return Snapshot(snap.indptr, pairs[:, 0], pairs[:, 1])


def build_snapshot(full: tuple, num_edges: int, size: int) -> Snapshot:
    """The snapshot of the full in-edge CSC ``full`` = ``(indptr, indices, eids or None)`` of a graph
    with ``num_edges`` edges: per node ``min(deg, size)`` of its in-edges, uniformly without
    replacement, in a compact CSC with int32 ids wherever they fit (sources and edge ids side by side
    when both are int32: :attr:`Snapshot.packed`)."""
    indptr = full[0]
    num_nodes = indptr.numel() - 1
    keep = (indptr[1:] - indptr[:-1]).long().clamp(max=size)
    total = int(keep.sum())
    snap_indptr = torch.zeros(num_nodes + 1, dtype=id_dtype(total))
    snap_indptr[1:] = torch.cumsum(keep, 0)
    src_dtype, eid_dtype = id_dtype(num_nodes - 1), id_dtype(num_edges - 1)
    if src_dtype == eid_dtype == torch.int32:  # side by side: Snapshot.packed
        pairs = torch.empty(total, 2, dtype=torch.int32)
        snap = Snapshot(snap_indptr, pairs[:, 0], pairs[:, 1])
    else:
        snap = Snapshot(snap_indptr, torch.empty(total, dtype=src_dtype), torch.empty(total, dtype=eid_dtype))
    fill(snap, full, torch.arange(num_nodes), size)
    return snap


class PickTables:
    """One layer's picks: per frontier node of ``s`` slots, ``min(fanout, s)`` of them uniformly
    without replacement, by looking up a random row of a table of random orders of ``[0, s)``.

    For each ``s`` in ``1..limit`` the table holds :attr:`rows` independent uniform random orders of
    ``[0, s)``, cut to their first ``min(s, width)`` entries (``width``: the largest fanout, at most
    ``limit``: a node of ``s <= limit`` slots never gives more picks). The first ``f`` entries of a
    uniform random order are a uniform ``f``-subset, so every pick is exactly uniform; a node visited
    twice uses the same row with probability ``1 / rows``. :meth:`redraw` draws new tables (the
    sampler does at each epoch's refresh). A lookup is one gather per frontier node instead of
    ``fanout`` random draws with a duplicate check each.

    ``size`` is the most slots a node has (the sampler's ``min(snapshot_size, largest in-degree)``);
    ``limit`` is ``min(size, TABLE_SLOTS)``. A node of more than ``limit`` slots (only where ``size``
    is larger) gets its picks drawn at each visit instead (:func:`draw_subsets`, scratch of one flag
    per slot of such nodes in the layer). So the tables hold at most ``TABLE_SLOTS * rows * width``
    entries (a few MB), and a redraw takes ``limit`` steps, whatever ``snapshot_size`` or the graph's
    degrees are: the sampler's memory is the snapshot's, bounded by the graph's edges."""

    def __init__(self, size: int, width: int) -> None:
        self.size = size
        self.limit = min(size, TABLE_SLOTS)
        self.width = min(width, self.limit)
        # Fewer rows for large snapshots bounds the redraw's work and the tables' memory (rows * limit * width).
        self.rows = max(256, min(4096, (1 << 22) // max(self.limit * self.limit, 1)))
        dtype = torch.int8 if self.limit <= 127 else torch.int16
        self.table = torch.zeros(max(self.limit, 1) * self.rows, max(self.width, 1), dtype=dtype)
        self.redraw()

    def redraw(self) -> None:
        """New random orders in every table (torch's default generator), all rows at once, by the
        inside-out Fisher-Yates shuffle: a uniform random order of ``[0, s)`` is one of ``[0, s - 1)``
        with ``s - 1`` put at a uniform position ``p`` (the entry at ``p`` moving to the end), so the
        table of ``s`` is the running order after ``s`` steps. (Each table is uniform by itself; the
        tables of different ``s`` in one row are related, which no pick sees: a node has one ``s``.)"""
        order = torch.zeros(self.rows, max(self.limit, 1), dtype=self.table.dtype)
        rows = torch.arange(self.rows)
        for s in range(1, self.limit + 1):
            if s > 1:
                at = torch.randint(0, s, (self.rows,))
                order[:, s - 1] = order[rows, at]
                order[rows, at] = s - 1
            w = min(s, self.width)
            self.table[(s - 1) * self.rows : s * self.rows, :w] = order[:, :w]

    def pick(self, snap: Snapshot, dst: torch.Tensor, fanout: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per node of ``dst`` (int64), ``min(fanout, slots)`` of its snapshot's slots (``slots <=
        size``; ``fanout`` at most the ``width`` asked for). Returns the picks' CSC ``indptr`` (int64, a
        row per node of ``dst``), their sources and their edge ids, row by row (in the snapshot's
        dtypes; int64 when it is packed)."""
        # index_select: several times faster on the CPU than tensor[index]. Positions stay in the
        # snapshot's index dtype (int32 where it fits: faster gathers).
        start = torch.index_select(snap.indptr, 0, dst)
        slots = torch.index_select(snap.indptr, 0, dst + 1) - start
        picks = slots.clamp(max=fanout)
        indptr = torch.zeros(dst.numel() + 1, dtype=torch.int64)
        torch.cumsum(picks, 0, out=indptr[1:])
        if fanout == 0 or dst.numel() == 0:
            return indptr, snap.src[:0], snap.eid[:0]
        many = slots > self.limit if self.size > self.limit else None
        if many is not None and bool(many.any()):
            pos = self._mixed(start, slots, picks, fanout, many, indptr)
        else:
            pos = self._looked_up(start, slots, picks, fanout)
        packed = snap.packed
        if packed is not None:  # split as int64 (what the block takes): the low and the high half
            pairs = torch.index_select(packed, 0, pos)
            first, second = torch.bitwise_and(pairs, 0xFFFFFFFF), pairs.bitwise_right_shift_(32)  # ids are >= 0
            return (indptr, first, second) if sys.byteorder == "little" else (indptr, second, first)
        return indptr, torch.index_select(snap.src, 0, pos), torch.index_select(snap.eid, 0, pos)

    def _looked_up(self, start: torch.Tensor, slots: torch.Tensor, picks: torch.Tensor, fanout: int) -> torch.Tensor:
        """The picks' slot positions, row by row, for nodes of at most ``limit`` slots: from the tables."""
        fanout = min(fanout, self.width)  # above it only where width is limit: no node here has more slots
        row = (slots.clamp(min=1).long() - 1) * self.rows + torch.randint(0, self.rows, (slots.numel(),))
        pos = torch.index_select(self.table, 0, row)[:, :fanout] + start.unsqueeze(1)
        if bool((picks < fanout).any()):  # nodes with fewer slots than the fanout: their first ones
            # NumPy's boolean indexing: about 3x faster than torch.masked_select (they share the memory)
            keep = np.arange(fanout)[None, :] < picks.numpy()[:, None]
            return torch.from_numpy(pos.numpy()[keep])
        return pos.view(-1)

    def _mixed(self, start: torch.Tensor, slots: torch.Tensor, picks: torch.Tensor, fanout: int, many: torch.Tensor, indptr: torch.Tensor) -> torch.Tensor:
        """The picks' slot positions (int64), row by row, where some nodes (``many``) have more than
        ``limit`` slots: the others from the tables; those with at most ``fanout`` slots all of them,
        the rest ``fanout`` drawn now (:func:`draw_subsets`)."""
        pos = torch.empty(int(indptr[-1]), dtype=torch.int64)
        first = indptr[:-1]
        few = torch.nonzero(~many).squeeze(1)
        if few.numel():
            pos[ranges(first[few], picks[few])] = self._looked_up(start[few], slots[few], picks[few], fanout).long()
        many = torch.nonzero(many).squeeze(1)
        every = many[slots[many] <= fanout]
        if every.numel():
            pos[ranges(first[every], picks[every])] = ranges(start[every], slots[every])
        drawn = many[slots[many] > fanout]
        if drawn.numel():
            offsets = draw_subsets(slots[drawn].long(), fanout) + start[drawn].long().unsqueeze(1)
            pos[ranges(first[drawn], picks[drawn])] = offsets.reshape(-1)
        return pos

    @property
    def nbytes(self) -> int:
        return self.table.numel() * self.table.element_size()


class Relabel:
    """A block's source numbering: the destinations first, in their order, then the other picked
    sources by increasing id; with two node-indexed scratch arrays kept between batches (a state
    per node, zero between calls, and a local id per node, written before every read)."""

    def __init__(self, num_nodes: int) -> None:
        self.state = torch.zeros(num_nodes, dtype=torch.uint8)
        self.local = torch.empty(num_nodes, dtype=torch.int64)  # int64: the block's indices, with no conversion

    def __call__(self, dst: torch.Tensor, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(nodes, local)``: the source nodes (int64; ``dst`` first) and each of ``src`` as an index
        into them (int64). ``dst``: int64 ids, distinct; ``src``: ids of any integer dtype."""
        state = self.state
        src = src.long()
        if src.numel() * 32 < state.numel():  # few picks: sorting them beats scanning every node
            state.index_fill_(0, dst, 1)
            cand = torch.unique(src)
            new = torch.masked_select(cand, torch.index_select(state, 0, cand) == 0)
            state.index_fill_(0, dst, 0)
        else:  # NumPy's scatter and flatnonzero: 2x and 5x faster than torch's index_fill_ and nonzero here
            flags = state.numpy()
            flags[src.numpy()] = 2
            flags[dst.numpy()] = 1
            new = torch.from_numpy(np.flatnonzero(flags == 2))
            flags.fill(0)  # as cheap as the scan just done
        nodes = torch.cat([dst, new])
        self.local.index_copy_(0, nodes, torch.arange(nodes.numel(), dtype=self.local.dtype))
        return nodes, torch.index_select(self.local, 0, src)

    @property
    def nbytes(self) -> int:
        return self.state.numel() * self.state.element_size() + self.local.numel() * self.local.element_size()


class RefreshOrder:
    """The nodes with more in-edges than the snapshot holds, handed out ``count`` at a time along a
    random order that is redrawn at each new round: every one is redrawn once per round."""

    def __init__(self, nodes: torch.Tensor) -> None:
        self.nodes = nodes.to(id_dtype(int(nodes.max()) if nodes.numel() else 0))
        self.order = self.nodes[torch.randperm(nodes.numel())]
        self.cursor = 0

    def take(self, count: int) -> torch.Tensor:
        """The next ``count`` nodes (int64, distinct; fewer when there are fewer such nodes)."""
        taken, count = [], min(count, self.nodes.numel())
        while count > 0:
            if self.cursor == self.order.numel():
                self.order, self.cursor = self.nodes[torch.randperm(self.nodes.numel())], 0
            part = self.order[self.cursor : self.cursor + count]
            self.cursor += part.numel()
            count -= part.numel()
            taken.append(part)
        # A node at the end of one round and the start of the next is redrawn once.
        return torch.unique(torch.cat(taken).long()) if taken else torch.zeros(0, dtype=torch.int64)

    @property
    def nbytes(self) -> int:
        return (self.nodes.numel() + self.order.numel()) * self.nodes.element_size()
