"""The NumPy reference of the sampling kernels (``kernels/sample.cu``): same algorithm, same RNG.

Per seed node ``v = seeds[i]`` with in-degree ``deg = indptr[v + 1] - indptr[v]``:

- ``fanout == -1``, or ``deg <= fanout`` without replacement: every position of ``v``, in order;
- without replacement, ``deg > fanout``: Floyd's algorithm picks a uniform ``fanout``-subset of
  ``[0, deg)``: for ``d`` in ``0 .. fanout - 1``, ``j = deg - fanout + d``,
  ``t = uniform(draw(key, d), j + 1)``; keep ``t``, or ``j`` when ``t`` is already kept. It
  reads nothing but the picked positions of ``indices``, whatever the degree;
- with replacement, ``deg > 0``: ``fanout`` independent ``uniform(draw(key, d), deg)``;

``key = row_key(seed, i)`` (:mod:`.rng`). A seed's picks are sorted by position. Vectorised over
the seeds: one NumPy pass per draw index, so ``O(len(seeds) * fanout^2)`` work for Floyd's
membership test, as the kernel's.
"""

from __future__ import annotations

import numpy as np
import torch

from dgl_zerocopy.cuda.sampling import rng

__all__ = ["output_counts", "pick_offsets", "reference_sample"]


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


def reference_sample(
    indptr: np.ndarray, indices: np.ndarray, seeds: np.ndarray, fanout: int, replace: bool, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(out_indptr, src, pos)`` as NumPy arrays for already validated arguments (ids in range).

    ``out_indptr`` int64, ``len(seeds) + 1``; ``src`` of ``indices``' dtype; ``pos`` int64.
    """
    seeds = seeds.astype(np.int64, copy=False)
    start = indptr[seeds].astype(np.int64)
    deg = indptr[seeds + 1].astype(np.int64) - start
    counts = output_counts(deg, fanout, replace)
    out_indptr = np.zeros(len(seeds) + 1, dtype=np.int64)
    np.cumsum(counts, out=out_indptr[1:])
    total = int(out_indptr[-1])
    owner = np.repeat(np.arange(len(seeds)), counts)  # the seed of each output entry
    offset = np.arange(total, dtype=np.int64) - out_indptr[owner]  # all positions, in order
    if fanout != -1:
        sampled = deg > fanout if not replace else deg > 0
        rows = np.flatnonzero(sampled)
        if len(rows):
            keys = rng.row_key(seed, rows)
            picks = pick_offsets(keys, deg[rows], fanout, replace)
            offset[np.repeat(sampled, counts)] = picks.reshape(-1)
    pos = start[owner] + offset
    src = indices[pos]
    return out_indptr, src, pos


def sample_reference(
    indptr: torch.Tensor, indices: torch.Tensor, seeds: torch.Tensor, fanout: int, replace: bool, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`reference_sample` on CPU tensors (zero-copy views), results as CPU tensors."""
    out_indptr, src, pos = reference_sample(indptr.numpy(), indices.numpy(), seeds.numpy(), fanout, replace, seed)
    return torch.from_numpy(out_indptr), torch.from_numpy(np.ascontiguousarray(src)), torch.from_numpy(pos)
