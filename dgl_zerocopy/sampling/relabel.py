"""Unique and relabel with torch operations, on the device that sampled: DGL's ``to_block`` numbering.

A block's source nodes are its destination nodes first (as given, in their order), then each node
that the sampled edges bring in and that is not a destination, in the order of its first appearance
among the edges: what ``dgl.to_block`` gives for a frontier whose edges are in that order.

No operation here waits for the device except one: :func:`read_size`, which reads the number of
source nodes back to size the result (torch's ``unique``, boolean masks and ``nonzero`` would each
read a size back too, so they are not used). The tests count the calls of :func:`read_size`.
"""

from __future__ import annotations

import torch


def read_size(count: torch.Tensor) -> int:
    """The one place of the sampler layer that reads a value back from the device (a host sync on CUDA)."""
    return int(count)


def relabel(dst: torch.Tensor, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(nodes, local_src)``: the block's source nodes (``dst`` first, then the new nodes of ``src`` in
    order of first appearance; ``src``'s dtype) and each entry of ``src`` as an index into ``nodes``
    (int64). ``dst`` and ``src`` are 1-D tensors of node ids of one dtype on one device.

    A node given twice in ``dst`` keeps both places; an entry of ``src`` equal to it points to its
    first place (``dgl.to_block`` points to the last: its destinations are meant to be distinct).
    Reads one size back from the device (:func:`read_size`), none when ``src`` is empty."""
    num_dst, num_src = dst.numel(), src.numel()
    if num_src == 0:
        return dst, torch.zeros(0, dtype=torch.int64, device=dst.device)
    total = num_dst + num_src
    cand = torch.cat([dst, src])
    # A stable sort puts equal ids together, each run in increasing position: its first element is
    # the id's first appearance.
    order = torch.argsort(cand, stable=True)
    ids = cand[order]
    starts = torch.ones(total, dtype=torch.bool, device=cand.device)
    starts[1:] = ids[1:] != ids[:-1]
    step = torch.arange(total, device=cand.device)
    run_start = torch.cummax(torch.where(starts, step, 0), 0).values  # sorted index of each run's first element
    first = order[run_start]  # for each sorted element: the position of its id's first appearance
    # A node is new when its first appearance is among the sampled sources; numbered by that position.
    new_at_sorted = (starts & (order >= num_dst)).long()
    new_at = torch.empty_like(new_at_sorted).scatter_(0, order, new_at_sorted)  # by position (order is a permutation)
    rank = torch.cumsum(new_at, 0) - 1 + num_dst  # the local id of a new node, at its first position
    label = torch.where(first < num_dst, first, rank[first])
    local = torch.empty_like(label).scatter_(0, order, label)
    # Unique nodes: the destinations, then each new node written at its local id; every other
    # position writes into one spare slot past the end, so nothing here depends on the count.
    slot = torch.where(new_at.bool(), rank, total)
    nodes = torch.empty(total + 1, dtype=cand.dtype, device=cand.device).scatter_(0, slot, cand)
    nodes[:num_dst] = dst
    count = read_size(new_at.sum()) + num_dst
    return nodes[:count], local[num_dst:]
