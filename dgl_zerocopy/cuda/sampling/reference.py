"""The NumPy reference of the sampling kernels (``kernels/sample.cu``): same algorithm, same RNG.

Per seed node ``v = seeds[i]`` with in-degree ``deg = indptr[v + 1] - indptr[v]``:

- ``fanout == -1``, or ``deg <= fanout`` without replacement: every position of ``v``, in order;
- without replacement, ``deg > fanout``: Floyd's algorithm picks a uniform ``fanout``-subset of
  ``[0, deg)``: for ``d`` in ``0 .. fanout - 1``, ``j = deg - fanout + d``,
  ``t = uniform(draw(key, d), j + 1)``; keep ``t``, or ``j`` when ``t`` is already kept. It
  reads nothing but the picked positions of ``indices``, whatever the degree;
- with replacement, ``deg > 0``: ``fanout`` independent ``uniform(draw(key, d), deg)``;

``key = row_key(seed, i)`` (:mod:`.rng`). A seed's picks are sorted by position. The steps are
the kernels' (:mod:`.launch`): :func:`reference_plan` (bounds, counts, offsets) and
:func:`reference_pick_and_fetch` (outputs of a given capacity, -1 past the picks). Vectorised over
the seeds: one NumPy pass per draw index, so ``O(len(seeds) * fanout^2)`` work for Floyd's
membership test, as the kernel's.
"""

from __future__ import annotations

import numpy as np
import torch

from dgl_zerocopy.cuda.sampling import rng
from dgl_zerocopy.cuda.sampling.launch import CSCPlan, Relabelled

__all__ = ["output_counts", "pick_offsets", "reference_pick_and_fetch", "reference_plan", "reference_recount", "reference_relabel", "sample_reference"]


def output_counts(deg: np.ndarray, fanout: int, replace: bool) -> np.ndarray:
    """Picks per seed: ``deg`` at -1; ``fanout`` when replacing and ``deg > 0``; else ``min``."""
    deg = np.asarray(deg, dtype=np.int64)
    if fanout == -1:
        return deg.copy()
    if replace:
        return np.where(deg > 0, fanout, 0).astype(np.int64)
    return np.minimum(deg, fanout)


def pick_offsets(keys: np.ndarray, deg: np.ndarray, fanout: int, replace: bool) -> np.ndarray:
    """The sorted offsets in ``[0, deg)`` drawn for seeds that sample (``len(keys)`` rows, each with
    ``deg > fanout`` without replacement or ``deg > 0`` with), as an int64 array
    ``(len(keys), fanout)``."""
    deg = np.asarray(deg, dtype=np.int64)
    rows = len(keys)
    if replace:
        draws = rng.draw(keys[:, None], np.arange(fanout, dtype=np.uint64)[None, :])
        picks = rng.uniform(draws, deg[:, None])
    else:
        picks = np.empty((rows, fanout), dtype=np.int64)
        for d in range(fanout):
            j = deg - fanout + d
            t = rng.uniform(rng.draw(keys, d), j + 1)
            taken = (picks[:, :d] == t[:, None]).any(axis=1)
            picks[:, d] = np.where(taken, j, t)
    picks.sort(axis=1)
    return picks


def reference_plan(indptr: torch.Tensor, seeds: torch.Tensor, fanout: int, replace: bool, num_valid: torch.Tensor | None = None) -> CSCPlan:
    """Passes 1 and 2 and the scan, as the kernels compute them, on CPU tensors (:class:`.launch.CSCPlan`):
    seeds past ``num_valid`` and seeds outside ``[0, N)`` get an empty range; ``bad`` holds the
    first bad position (the kernels: any one of them), or -1."""
    ptr, ids = indptr.numpy(), seeds.numpy().astype(np.int64)
    live = len(ids) if num_valid is None else max(0, min(int(num_valid.reshape(-1)[0]), len(ids)))
    ids = ids[:live]
    bad = (ids < 0) | (ids >= len(ptr) - 1)
    safe = np.where(bad, 0, ids)
    bounds = np.zeros((len(seeds), 2), dtype=np.int64)
    bounds[:live, 0] = np.where(bad, 0, ptr[safe])
    bounds[:live, 1] = np.where(bad, 0, ptr[safe + 1])
    out_indptr = np.zeros(len(seeds) + 1, dtype=np.int64)
    np.cumsum(output_counts(bounds[:, 1] - bounds[:, 0], fanout, replace), out=out_indptr[1:])
    first_bad = int(np.flatnonzero(bad)[0]) if bad.any() else -1
    return CSCPlan(torch.from_numpy(bounds.reshape(-1)), torch.from_numpy(out_indptr), torch.tensor([first_bad]), fanout, replace)


def reference_recount(plan: CSCPlan) -> None:
    """Recompute ``plan.out_indptr`` in place from its ``bounds`` (after a ``narrow`` shrank them)."""
    bounds = plan.bounds.numpy().reshape(-1, 2)
    counts = output_counts(bounds[:, 1] - bounds[:, 0], plan.fanout, plan.replace)
    out = plan.out_indptr.numpy()
    out[0] = 0
    np.cumsum(counts, out=out[1:])


def reference_pick_and_fetch(
    plan: CSCPlan, indices: torch.Tensor, seed: int, capacity: int, edge_ids: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Passes 3 and 4 over ``plan``: ``(src, pos)`` of ``capacity`` entries, the picks first, then -1
    (only -1 when the total exceeds ``capacity``), as the kernels write them; with ``edge_ids``,
    ``pos`` holds the picks' edge ids."""
    fanout, replace = plan.fanout, plan.replace
    bounds, out_indptr = plan.bounds.numpy().reshape(-1, 2), plan.out_indptr.numpy()
    start, deg = bounds[:, 0], bounds[:, 1] - bounds[:, 0]
    counts = np.diff(out_indptr)
    total = int(out_indptr[-1])
    src = np.full(capacity, -1, dtype=indices.numpy().dtype)
    pos = np.full(capacity, -1, dtype=np.int64)
    if total > capacity:
        return torch.from_numpy(src), torch.from_numpy(pos)
    owner = np.repeat(np.arange(len(counts)), counts)  # the seed of each output entry
    offset = np.arange(total, dtype=np.int64) - out_indptr[owner]  # all positions, in order
    if fanout != -1:
        sampled = deg > fanout if not replace else deg > 0
        rows = np.flatnonzero(sampled)
        if len(rows):
            keys = rng.row_key(seed, rows)
            picks = pick_offsets(keys, deg[rows], fanout, replace)
            offset[np.repeat(sampled, counts)] = picks.reshape(-1)
    pos[:total] = start[owner] + offset
    src[:total] = indices.numpy()[pos[:total]]
    if edge_ids is not None:
        pos[:total] = edge_ids.numpy()[pos[:total]]
    return torch.from_numpy(src), torch.from_numpy(pos)


def sample_reference(
    indptr: torch.Tensor, indices: torch.Tensor, seeds: torch.Tensor, fanout: int, replace: bool, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(out_indptr, src, pos)`` for already validated CPU arguments (ids in range), sized exactly:
    ``out_indptr`` int64, ``len(seeds) + 1``; ``src`` of ``indices``' dtype; ``pos`` int64."""
    plan = reference_plan(indptr, seeds, fanout, replace)
    src, pos = reference_pick_and_fetch(plan, indices, seed, int(plan.out_indptr[-1]))
    return plan.out_indptr, src, pos


def reference_relabel(dst: torch.Tensor, dst_count: torch.Tensor | None, src: torch.Tensor, out_indptr: torch.Tensor, sizes: torch.Tensor) -> Relabelled:
    """The relabelling kernels' outputs (:func:`.launch.relabel_passes`) on CPU tensors, by sorting:
    each node's first appearance among the live destinations, then the picks (-1: unused); new
    nodes numbered in that order after the destinations; ``sizes`` written ``[total, count]``."""
    num_dst = len(dst)
    live = num_dst if dst_count is None else max(0, min(int(dst_count.reshape(-1)[0]), num_dst))
    picks = src.numpy().astype(np.int64)
    cand = np.concatenate([dst.numpy()[:live].astype(np.int64), picks])
    where = np.concatenate([np.arange(live), num_dst + np.arange(len(picks))])
    valid = cand >= 0
    unique, first_index = np.unique(cand[valid], return_index=True)  # the first of each id, in candidate order
    first = where[valid][first_index]
    new = first >= num_dst
    order = np.argsort(first[new])  # new nodes by first appearance (distinct positions)
    rank = np.zeros(len(unique), dtype=np.int64)
    rank[np.flatnonzero(new)[order]] = live + np.arange(len(order))
    label = np.where(new, rank, first)
    nodes = np.full(num_dst + len(picks), -1, dtype=np.int64)
    nodes[:live] = cand[:live]
    nodes[label[new]] = unique[new]
    local = np.full(len(picks), -1, dtype=np.int64)
    used = picks >= 0
    local[used] = label[np.searchsorted(unique, picks[used])]
    sizes[0], sizes[1] = int(out_indptr[-1]), live + int(new.sum())
    dtype = dst.dtype
    return Relabelled(torch.from_numpy(nodes).to(dtype), torch.from_numpy(local).to(dtype), out_indptr.to(dtype), sizes)
