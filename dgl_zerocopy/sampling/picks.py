"""One hop's picks on the CPU, in NumPy: the reference that :mod:`hop_kernels` is tested equal to.

Three ways a destination picks among its in-edges (CSC positions ``[start, start + deg)``):

- uniformly (:func:`pick`, :func:`pick_ranges`): Floyd's algorithm draws ``k`` distinct offsets exactly;
- by time (:func:`cut_by_time`, then :func:`pick_ranges`): the times of a neighbourhood's positions are
  sorted, so the in-edges no later than the destination's seed time are a prefix found by binary search;
  ``'uniform'`` picks uniformly in it, ``'last'`` takes its last ``k`` (pyg-lib's semantics);
- by weight (:func:`pick_weighted`): with replacement, each draw by inverse transform on the
  neighbourhood's prefix sums (:func:`prefix_sums`, computed once per graph); without, the ``k`` largest
  keys ``log(u) / w`` (Efraimidis and Spirakis), listed in CSC order.

Every draw is :func:`hop_kernels.uniforms` of a seed, the destination's index and the draw's (for the
keys: the edge's offset in its neighbourhood), so the compiled kernels pick the same edges.
Contracts: int64 positions and indices; times int or float; weights float64, finite and >= 0.
"""

from __future__ import annotations

import numpy as np

from . import hop_kernels

TEMPORAL_STRATEGIES = ("uniform", "last")


def ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(starts[i], starts[i] + lengths[i])`` (int64)."""
    total = int(lengths.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    # One step per element: +1 within a range; at each range's first element, the jump from the
    # previous range's last value to this range's start.
    nonempty = lengths > 0
    starts = starts[nonempty].astype(np.int64)
    lengths = lengths[nonempty].astype(np.int64)
    firsts = np.cumsum(lengths) - lengths
    steps = np.ones(total, dtype=np.int64)
    steps[firsts[1:]] = starts[1:] - (starts[:-1] + lengths[:-1] - 1)
    steps[0] = starts[0]
    return np.cumsum(steps)


def floyd_subsets(counts: np.ndarray, k: int, seed: int, rows: np.ndarray | None = None) -> np.ndarray:
    """``[len(counts), k]`` int64: row ``i`` holds ``k`` distinct offsets in ``[0, counts[i])``, uniform over
    all such subsets (every ``counts[i] >= k``). Floyd's algorithm, one vectorised step per column: draw
    ``t`` in ``[0, j]`` with ``j = counts - k + step``; keep ``t``, or ``j`` where ``t`` is taken (``j`` never
    is). "Taken" is a flag per (row, offset), so a step costs O(rows). Row ``i``'s draws are
    ``uniforms(seed, rows[i], step)`` (``rows`` defaults to ``arange``), as in the compiled kernel."""
    n = len(counts)
    if n == 0 or k == 0:
        return np.empty((n, k), dtype=np.int64)
    uniform = hop_kernels.uniforms(seed, np.arange(n) if rows is None else rows, np.arange(k))
    return floyd_steps(counts.astype(np.int64, copy=False), uniform).T


def floyd_steps(counts: np.ndarray, uniform: np.ndarray) -> np.ndarray:
    """``[k, n]`` int64: column ``i`` holds ``k`` distinct offsets in ``[0, counts[i])`` (int64
    ``counts``, every one ``>= k``), step ``s`` of Floyd's algorithm drawing ``uniform[s]`` (``[k, n]``
    floats in ``[0, 1)``). "Taken" is a flag per (row, offset) in one scratch array."""
    k, n = uniform.shape
    first = np.cumsum(counts) - counts  # each row's first flag
    taken = np.zeros(int(counts.sum()), dtype=bool)
    out = np.empty((k, n), dtype=np.int64)
    for step in range(k):
        j = counts - k + step
        t = (uniform[step] * (j + 1)).astype(np.int64)
        np.minimum(t, j, out=t)  # guards float rounding
        t += first
        j += first
        out[step] = np.where(taken[t], j, t)
        taken[out[step]] = True
    out -= first
    return out


def pick(indptr: np.ndarray, dst: np.ndarray, fanout: int, replace: bool, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """One hop of one relation: ``(pos, which)``, the CSC positions of the picked in-edges of ``dst``
    (global ids) and, for each, the index into ``dst`` of its destination; grouped by destination in
    ``dst``'s order. Draw ``d`` of destination ``dst[i]`` is ``uniforms(seed, i, d)``, so
    :func:`hop_kernels.pick` picks the same edges."""
    start = indptr[dst]
    return pick_ranges(start, indptr[dst + 1] - start, fanout, replace, seed)


def pick_ranges(start: np.ndarray, deg: np.ndarray, fanout: int, replace: bool, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`pick` over explicit ranges: destination ``i`` picks among CSC positions
    ``[start[i], start[i] + deg[i])`` (int64 each; a temporal cut-off shortens them)."""
    n = len(start)
    if fanout < 0:
        counts = deg
    elif replace:
        counts = np.where(deg > 0, fanout, 0)
    else:
        counts = np.minimum(deg, fanout)
    which = np.repeat(np.arange(n, dtype=np.int64), counts)
    if fanout < 0:
        return ranges(start, deg), which
    if replace:
        draw = np.arange(len(which)) - (np.cumsum(counts) - counts)[which]
        uniform = hop_kernels.uniforms(seed, which[draw == 0], np.arange(fanout)).T.reshape(-1)
        draws = (uniform * deg[which]).astype(np.int64)
        return start[which] + np.minimum(draws, deg[which] - 1), which
    return without_replacement(start, deg, counts, fanout, lambda big: floyd_subsets(deg[big], fanout, seed, big) + start[big, None]), which


def without_replacement(start: np.ndarray, deg: np.ndarray, counts: np.ndarray, fanout: int, choose) -> np.ndarray:
    """The picked positions, grouped by destination: every in-edge where ``deg <= fanout``, and
    ``choose(big)``'s ``[len(big), fanout]`` positions for the destinations ``big`` of more."""
    pos = np.empty(int(counts.sum()), dtype=np.int64)
    offset = np.cumsum(counts) - counts
    whole = deg <= fanout
    if whole.any():
        pos[ranges(offset[whole], deg[whole])] = ranges(start[whole], deg[whole])
    big = np.flatnonzero(~whole)
    if len(big):
        pos[offset[big, None] + np.arange(fanout)] = choose(big)
    return pos


def upper_bounds(values: np.ndarray, lo: np.ndarray, hi: np.ndarray, limit: np.ndarray) -> np.ndarray:
    """Per ``i``, the first position in ``[lo[i], hi[i])`` whose value is past ``limit[i]`` (``hi[i]`` if
    none), where ``values`` is sorted within each range: a bisection, all ranges at once."""
    lo, hi = lo.astype(np.int64, copy=True), hi.astype(np.int64, copy=True)
    active = np.flatnonzero(lo < hi)
    while len(active):
        mid = (lo[active] + hi[active]) // 2
        right = values[mid] <= limit[active]
        lo[active[right]] = mid[right] + 1
        hi[active[~right]] = mid[~right]
        active = active[lo[active] < hi[active]]
    return lo


def cut_by_time(indptr: np.ndarray, times: np.ndarray, dst: np.ndarray, dst_time: np.ndarray, fanout: int, strategy: str) -> tuple[np.ndarray, np.ndarray]:
    """``(start, deg)`` of the in-edges of ``dst`` whose time is at most ``dst_time`` (per destination: its
    seed's time); ``times`` per CSC position, sorted within each neighbourhood. ``'last'`` keeps the last
    ``fanout`` of them (all for -1)."""
    start = indptr[dst].astype(np.int64)
    end = upper_bounds(times, start, indptr[dst + 1], dst_time)
    if strategy == "last" and fanout >= 0:
        start = np.maximum(start, end - fanout)
    return start, end - start


def prefix_sums(indptr: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """float64 ``[num_edges]``: the running sum of ``weights`` within each neighbourhood (its last entry the
    neighbourhood's total). Non-decreasing within a neighbourhood (weights are >= 0), so a draw is a
    binary search."""
    total = np.cumsum(weights, dtype=np.float64)
    deg = np.diff(indptr)
    base = np.concatenate([[0.0], total])[indptr[:-1]]
    return total - np.repeat(base, deg)


def weighted_counts(deg: np.ndarray, totals: np.ndarray, fanout: int, replace: bool) -> np.ndarray:
    """How many in-edges each destination picks by weight: all for -1 or ``deg <= fanout`` without
    replacement; ``fanout`` with replacement where the neighbourhood weighs more than 0 (none where not)."""
    if fanout < 0:
        return deg
    if replace:
        return np.where(totals > 0, fanout, 0)
    return np.minimum(deg, fanout)


def pick_weighted(
    indptr: np.ndarray, weights: np.ndarray, sums: np.ndarray, dst: np.ndarray, fanout: int, replace: bool, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`pick` with each in-edge's chance proportional to its weight (``sums``: :func:`prefix_sums`)."""
    start = indptr[dst].astype(np.int64)
    end = indptr[dst + 1].astype(np.int64)
    deg = end - start
    totals = np.where(deg > 0, sums[np.maximum(end - 1, 0)], 0.0)
    counts = weighted_counts(deg, totals, fanout, replace)
    which = np.repeat(np.arange(len(dst), dtype=np.int64), counts)
    if fanout < 0 or len(which) == 0:
        return ranges(start, counts), which
    draw = np.arange(len(which)) - (np.cumsum(counts) - counts)[which]
    if replace:
        # Inverse transform: the first position whose running sum passes u * total.
        target = hop_kernels.uniforms_at(seed, which, draw) * totals[which]
        pos = upper_bounds(sums, start[which], end[which], target)
        return np.minimum(pos, end[which] - 1), which

    def largest_keys(big: np.ndarray) -> np.ndarray:
        # Every in-edge of a large neighbourhood gets the key log(u) / w; the largest ``fanout`` win (ties to
        # the earlier position), listed in CSC order.
        group = np.repeat(big, deg[big])
        edge = ranges(start[big], deg[big])
        keys = hop_kernels.weight_keys(hop_kernels.uniforms_at(seed, group, edge - start[group]), weights[edge])
        order = np.lexsort((-keys, group))
        rank = np.arange(len(order)) - np.repeat(np.cumsum(deg[big]) - deg[big], deg[big])
        return np.sort(edge[order][rank < fanout].reshape(len(big), fanout), axis=1)

    return without_replacement(start, deg, counts, fanout, largest_keys), which


def check_times(indptr: np.ndarray, times: np.ndarray, name: str) -> np.ndarray:
    """``times`` (one per CSC position) as a NumPy array, refused unless numeric, of the right length and
    sorted within every neighbourhood (a cut-off is a binary search).

    Raises:
        TypeError: times not of an integer or float dtype.
        ValueError: the wrong length, or a neighbourhood out of time order (its destination named).
    """
    times = np.asarray(times)
    if times.dtype.kind not in "iuf":
        raise TypeError(f"{name}: times must be integers or floats, but got dtype {times.dtype}")
    if times.shape != (int(indptr[-1]),):
        raise ValueError(f"{name}: expected one time per edge ({int(indptr[-1])}), but got shape {tuple(times.shape)}")
    down = np.flatnonzero(times[1:] < times[:-1]) + 1  # positions earlier than the one before
    down = down[np.isin(down, indptr, invert=True)]  # a neighbourhood's first position may be earlier
    if len(down):
        dst = int(np.searchsorted(indptr, down[0], side="right") - 1)
        raise ValueError(f"{name}: the in-edges of node {dst} are not sorted by time; sort each neighbourhood by time (PyG does unless is_sorted=True)")
    return times


def check_weights(indptr: np.ndarray, weights: np.ndarray, name: str) -> np.ndarray:
    """``weights`` (one per CSC position) as float64, refused unless finite and >= 0, of the right length.

    Raises:
        TypeError: weights not numeric. ValueError: the wrong length, or a negative or non-finite weight
        (its position and value named).
    """
    weights = np.asarray(weights)
    if weights.dtype.kind not in "iuf":
        raise TypeError(f"{name}: weights must be numbers, but got dtype {weights.dtype}")
    weights = weights.astype(np.float64, copy=False)
    if weights.shape != (int(indptr[-1]),):
        raise ValueError(f"{name}: expected one weight per edge ({int(indptr[-1])}), but got shape {tuple(weights.shape)}")
    bad = np.flatnonzero(~np.isfinite(weights) | (weights < 0))
    if len(bad):
        raise ValueError(f"{name}: weight {weights[bad[0]]} at CSC position {int(bad[0])} is not a finite number >= 0; fix the edge weights")
    return weights
