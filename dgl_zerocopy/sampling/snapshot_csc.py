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

from typing import NamedTuple

import torch

_INT32_MAX = 2**31 - 1
_CHUNK = 1 << 20  # entries of the [nodes, size] draw matrix made at once (bounds the build's scratch memory: ~40 bytes each)


class Snapshot(NamedTuple):
    """The compact CSC: node ``v``'s slots are ``indptr[v]:indptr[v + 1]`` (``min(deg(v), size)``
    of them); ``src[i]`` is the source node and ``eid[i]`` the original graph's edge id of slot ``i``."""

    indptr: torch.Tensor
    src: torch.Tensor
    eid: torch.Tensor

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self)


def id_dtype(largest: int) -> torch.dtype:
    """int32 when every id up to ``largest`` fits, else int64."""
    return torch.int32 if largest <= _INT32_MAX else torch.int64


def draw_subsets(counts: torch.Tensor, k: int) -> torch.Tensor:
    """Row ``i`` of the ``[len(counts), k]`` int64 result: ``k`` distinct offsets in ``[0, counts[i])``
    (every ``counts[i] >= k``), uniform over all such subsets. Floyd's algorithm, one vectorised step
    per column: at step ``s`` draw ``t`` uniformly in ``[0, j]`` with ``j = counts - k + s``, and keep
    ``t``, or ``j`` when ``t`` is taken already (``j`` never is: earlier steps drew below it). "Taken"
    is a flag per (row, offset) in one scratch array, so a step costs O(rows), not O(rows * s).
    Draws from torch's default generator."""
    n = counts.numel()
    out = torch.empty(n, k, dtype=torch.int64)
    if n == 0 or k == 0:
        return out
    counts = counts.long()
    first = torch.cumsum(counts, 0) - counts  # each row's first flag
    taken = torch.zeros(int(counts.sum()), dtype=torch.bool)
    # Every step's j and draw t at once (columns); only the "taken" check goes step by step.
    j = (counts - k).unsqueeze(1) + torch.arange(k)
    t = (torch.rand(n, k, dtype=torch.float64) * (j + 1)).long()
    t = torch.minimum(t, j)  # guards float rounding
    for step in range(k):
        col = torch.where(torch.index_select(taken, 0, first + t[:, step]), j[:, step], t[:, step])
        taken.index_fill_(0, first + col, True)
        out[:, step] = col
    return out


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
        pos = [ranges(start[whole], deg[whole])]
        slots = [ranges(slot_start[whole], deg[whole])]
        big = torch.nonzero(~whole).squeeze(1)
        if big.numel():
            pos.append((draw_subsets(deg[big], size) + start[big].unsqueeze(1)).view(-1))
            slots.append((torch.arange(size).unsqueeze(0) + slot_start[big].unsqueeze(1)).view(-1))
        pos, slots = torch.cat(pos), torch.cat(slots)
        snap.src.index_copy_(0, slots, torch.index_select(indices, 0, pos).to(snap.src.dtype))
        snap.eid.index_copy_(0, slots, (pos if eids is None else torch.index_select(eids, 0, pos)).to(snap.eid.dtype))


def build_snapshot(full: tuple, num_edges: int, size: int) -> Snapshot:
    """The snapshot of the full in-edge CSC ``full`` = ``(indptr, indices, eids or None)`` of a graph
    with ``num_edges`` edges: per node ``min(deg, size)`` of its in-edges, uniformly without
    replacement, in a compact CSC with int32 ids wherever they fit."""
    indptr = full[0]
    num_nodes = indptr.numel() - 1
    keep = (indptr[1:] - indptr[:-1]).long().clamp(max=size)
    total = int(keep.sum())
    snap_indptr = torch.zeros(num_nodes + 1, dtype=id_dtype(total))
    snap_indptr[1:] = torch.cumsum(keep, 0)
    snap = Snapshot(snap_indptr, torch.empty(total, dtype=id_dtype(num_nodes - 1)), torch.empty(total, dtype=id_dtype(num_edges - 1)))
    fill(snap, full, torch.arange(num_nodes), size)
    return snap


class PickTables:
    """One layer's picks: per frontier node of ``s`` slots, ``min(fanout, s)`` of them uniformly
    without replacement, by looking up a random row of a table of random orders of ``[0, s)``.

    For each ``s`` in ``1..size`` the table holds :attr:`rows` independent uniform random orders of
    ``[0, s)``, cut to their first ``min(s, width)`` entries (``width``: the largest fanout). The
    first ``f`` entries of a uniform random order are a uniform ``f``-subset, so every pick is
    exactly uniform; a node visited twice uses the same row with probability ``1 / rows``.
    :meth:`redraw` draws new tables (the sampler does at each epoch's refresh). A lookup is one
    gather per frontier node instead of ``fanout`` random draws with a duplicate check each."""

    def __init__(self, size: int, width: int) -> None:
        self.size, self.width = size, width
        # Fewer rows for large snapshots bounds the redraw's work (rows * size**2 / 2 sort keys).
        self.rows = max(256, min(4096, (1 << 22) // max(size * size, 1)))
        dtype = torch.int8 if size <= 127 else torch.int16 if size <= 32767 else torch.int32
        self.table = torch.zeros(max(size, 1) * self.rows, max(width, 1), dtype=dtype)
        self.redraw()

    def redraw(self) -> None:
        """New random orders in every table (torch's default generator). One uniform random order of
        ``[0, size)`` per row; the table of ``s`` takes from it the entries below ``s``, in their
        order, which are a uniform random order of ``[0, s)``."""
        orders = torch.argsort(torch.rand(self.rows, self.size), dim=1).to(self.table.dtype)
        for s in range(1, self.size + 1):
            w = min(s, self.width)
            below = torch.masked_select(orders, orders < s).view(self.rows, s)
            self.table[(s - 1) * self.rows : s * self.rows, :w] = below[:, :w]

    def pick(self, snap: Snapshot, dst: torch.Tensor, fanout: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per node of ``dst`` (int64), ``min(fanout, slots)`` of its snapshot's slots (``fanout <=
        width``). Returns the picks' CSC ``indptr`` (int64, a row per node of ``dst``), their
        sources and their edge ids, row by row."""
        # index_select and masked_select: several times faster on the CPU than tensor[index] and tensor[mask].
        # Positions stay in the snapshot's index dtype (int32 where it fits: faster gathers).
        start = torch.index_select(snap.indptr, 0, dst)
        slots = torch.index_select(snap.indptr, 0, dst + 1) - start
        picks = slots.clamp(max=fanout)
        indptr = torch.zeros(dst.numel() + 1, dtype=torch.int64)
        torch.cumsum(picks, 0, out=indptr[1:])
        if fanout == 0 or dst.numel() == 0:
            return indptr, snap.src[:0], snap.eid[:0]
        row = (slots.clamp(min=1).long() - 1) * self.rows + torch.randint(0, self.rows, (dst.numel(),))
        pos = torch.index_select(self.table, 0, row)[:, :fanout] + start.unsqueeze(1)
        if bool((picks < fanout).any()):  # nodes with fewer slots than the fanout: their first ones
            pos = torch.masked_select(pos, torch.arange(fanout).unsqueeze(0) < picks.unsqueeze(1))
        else:
            pos = pos.view(-1)
        return indptr, torch.index_select(snap.src, 0, pos), torch.index_select(snap.eid, 0, pos)

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
        else:
            state.index_fill_(0, src, 2)
            state.index_fill_(0, dst, 1)
            new = torch.nonzero(state == 2).squeeze(1)
            state.index_fill_(0, new, 0)
            state.index_fill_(0, dst, 0)
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
