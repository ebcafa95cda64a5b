"""Unique and relabel with torch operations, on the device that sampled: DGL's ``to_block`` numbering.

A block's source nodes are its destination nodes first (as given, in their order), then each node
that the sampled edges bring in and that is not a destination, in the order of its first appearance
among the edges: what ``dgl.to_block`` gives for a frontier whose edges are in that order.

:func:`relabel_deferred` waits for nothing: it works over the sampler's buffers (the picks, then
-1 in the unused slots) and leaves the number of source nodes on the device (torch's ``unique``,
boolean masks and ``nonzero`` would each read a size back, so they are not used). It is the torch
twin of the relabelling kernels that :class:`~.neighbor.GpuNeighborSampler` runs
(``dgl_zerocopy.cuda.sampling.relabel_layer``: five device operations a layer where this takes about
thirty); the tests hold the two equal. :func:`read_sizes` is the sampler's one read of the device
per batch; the tests count its calls.
"""

from __future__ import annotations

import torch


def read_sizes(values: torch.Tensor) -> list[int]:
    """``values`` (a 1-D integer tensor) as Python ints: one read back from the device, a host sync on CUDA."""
    return values.tolist()


def relabel_deferred(dst: torch.Tensor, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(nodes, local, count)`` without a host read. ``dst`` (the destinations) and ``src`` (sampled
    source ids; entries < 0 are unused slots, never nodes) are 1-D tensors of node ids of one dtype
    on one device.

    ``nodes`` (``src``'s dtype) holds the block's source nodes in its first ``count`` entries
    (``count``: an int64 tensor of one element on the device): ``dst`` first, then the new nodes of
    ``src`` in order of first appearance; the entries after them are unspecified. ``local`` (int64,
    one per entry of ``src``) is each entry as an index into ``nodes`` (unspecified for unused slots).
    A node given twice in ``dst`` keeps both places; an entry of ``src`` equal to it points to its
    first place (``dgl.to_block`` points to the last: its destinations are meant to be distinct)."""
    num_dst, num_src = dst.numel(), src.numel()
    if num_src == 0:
        return dst, torch.zeros(0, dtype=torch.int64, device=dst.device), torch.full((1,), num_dst, dtype=torch.int64, device=dst.device)
    total = num_dst + num_src
    cand = torch.cat([dst, src])
    # A stable sort puts equal ids together, each run in increasing position: its first element is
    # the id's first appearance. Unused slots (-1) form runs of their own, before every node.
    order = torch.argsort(cand, stable=True)
    ids = cand[order]
    starts = torch.ones(total, dtype=torch.bool, device=cand.device)
    starts[1:] = ids[1:] != ids[:-1]
    step = torch.arange(total, device=cand.device)
    # The sorted index of each run's first element: each start writes its index at its run's number,
    # every other element into one spare slot past the end. Not torch.cummax: on CUDA its 1-D scan
    # runs in one thread block, and took 65 % of the GPU sampler's device time on an H200 (0.7 ms a
    # layer at 650k sampled edges; bench/results/gpu/h200-2026-11-27/profile-gpu-pinned.txt).
    run_id = torch.cumsum(starts, 0) - 1
    run_first = torch.empty(total + 1, dtype=torch.int64, device=cand.device).scatter_(0, torch.where(starts, run_id, total), step)
    run_start = run_first[run_id]
    first = order[run_start]  # for each sorted element: the position of its id's first appearance
    # A node is new when its first appearance is among the sampled sources; numbered by that position.
    new_at_sorted = (starts & (order >= num_dst) & (ids >= 0)).long()
    new_at = torch.empty_like(new_at_sorted).scatter_(0, order, new_at_sorted)  # by position (order is a permutation)
    rank = torch.cumsum(new_at, 0) - 1 + num_dst  # the local id of a new node, at its first position
    label = torch.where(first < num_dst, first, rank[first])
    local = torch.empty_like(label).scatter_(0, order, label)
    # Unique nodes: the destinations, then each new node written at its local id; every other
    # position writes into one spare slot past the end, so nothing here depends on the count.
    slot = torch.where(new_at.bool(), rank, total)
    nodes = torch.empty(total + 1, dtype=cand.dtype, device=cand.device).scatter_(0, slot, cand)
    nodes[:num_dst] = dst
    count = (new_at.sum() + num_dst).reshape(1)
    return nodes, local[num_dst:], count


def relabel(dst: torch.Tensor, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(nodes, local)`` of :func:`relabel_deferred`, ``nodes`` cut to the source nodes: one read
    (:func:`read_sizes`) of their count; none when ``src`` is empty (then ``nodes`` is ``dst``)."""
    if src.numel() == 0:
        return dst, torch.zeros(0, dtype=torch.int64, device=dst.device)
    nodes, local, count = relabel_deferred(dst, src)
    (num_nodes,) = read_sizes(count)
    return nodes[:num_nodes], local
