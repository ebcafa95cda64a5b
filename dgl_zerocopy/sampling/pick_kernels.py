"""Compiled picks by time and by weight, by numba (:mod:`hop_kernels`'s twins).

- :func:`cut_by_time`: per destination, a binary search for the last in-edge no later than its tree's time
  (``'last'``: then the latest ``k``), written as a two-entry ``indptr`` per destination, so that
  :func:`hop_kernels.pick` (Floyd's draws, threads and all) picks inside the cut unchanged;
- :func:`pick_weighted`: with replacement an inverse transform on the prefix sums, without the ``k``
  largest keys ``log(u) / w`` listed in CSC order.

Each gives what its NumPy reference in :mod:`picks` gives, element for
element (the same counter-based draws). Contracts: int64 ids, positions and offsets; ``times`` and the trees'
times numeric (compared as NumPy compares them); ``weights``/``sums`` float64. No bounds checks: the caller
checked ids.
"""

from __future__ import annotations

import threading

import numpy as np

from . import hop_kernels
from .picks import weighted_counts

available = hop_kernels.available
# :func:`cut_by_time` prefetches the neighbourhood this many destinations ahead, up to this many cache lines of it.
_AHEAD, _LINES = 16, 8

if available:
    _jit = hop_kernels._jit
    _uniform = hop_kernels._uniform
    _HALF_UNIT = hop_kernels._HALF_UNIT

    _prefetch = hop_kernels._prefetch

    @_jit
    def _cut(indptr, times, dst, dst_tree, tree_time, fanout, last, bounds):
        """``bounds[2 i], bounds[2 i + 1]``: destination ``i``'s in-edges no later than its tree's time (an upper
        bound by binary search). Each search is a chain of reads of ``times``, each a miss past the cache; so
        the neighbourhood ``_AHEAD`` destinations on is prefetched (up to ``_LINES`` of its cache lines, spread
        over it) and its ``indptr`` entry before that: the misses of several searches are then in flight at once."""
        n = len(dst)
        for i in range(n):
            if i + 2 * _AHEAD < n:
                _prefetch(indptr, dst[i + 2 * _AHEAD])
            if i + _AHEAD < n:
                v = dst[i + _AHEAD]
                lo, hi = indptr[v], indptr[v + 1]
                for p in range(lo, hi, max(64 // times.itemsize, (hi - lo) // _LINES)):
                    _prefetch(times, p)
            start, lo, hi = indptr[dst[i]], indptr[dst[i]], indptr[dst[i] + 1]
            limit = tree_time[dst_tree[i]]
            while lo < hi:  # upper bound: the first position later than the limit
                mid = (lo + hi) // 2
                if times[mid] <= limit:
                    lo = mid + 1
                else:
                    hi = mid
            if last and fanout >= 0:
                start = max(start, lo - fanout)
            bounds[2 * i] = start
            bounds[2 * i + 1] = lo

    @_jit
    def _pick_weighted(indptr, weights, sums, dst, offset, fanout, replace, seed, pos):
        keys = np.empty(0, dtype=np.float64)
        for i in range(len(dst)):
            start, end = indptr[dst[i]], indptr[dst[i] + 1]
            deg, o, c = end - start, offset[i], offset[i + 1] - offset[i]
            if fanout < 0 or (not replace and deg <= fanout):
                for e in range(c):
                    pos[o + e] = start + e
            elif replace:
                total = sums[end - 1]
                for d in range(c):
                    target = _uniform(seed, i, d) * total
                    lo, hi = start, end
                    while lo < hi:  # the first position whose running sum passes the target
                        mid = (lo + hi) // 2
                        if sums[mid] <= target:
                            lo = mid + 1
                        else:
                            hi = mid
                    pos[o + d] = min(lo, end - 1)
            else:
                if len(keys) < deg:
                    keys = np.empty(deg, dtype=np.float64)
                for e in range(deg):
                    w = weights[start + e]
                    keys[e] = np.log(_uniform(seed, i, e) + _HALF_UNIT) / w if w > 0 else -np.inf
                # The largest keys, ties to the earlier position (a stable sort of the negated keys).
                won = np.sort(np.argsort(-keys[:deg], kind="mergesort")[:fanout])
                for d in range(fanout):
                    pos[o + d] = start + won[d]


def cut_by_time(
    indptr: np.ndarray, times: np.ndarray, dst: np.ndarray, dst_tree: np.ndarray, tree_time: np.ndarray, fanout: int, strategy: str, bounds: np.ndarray
) -> np.ndarray:
    """Fill ``bounds`` (int64 ``[2 * len(dst)]``): destination ``i``'s in-edges no later than its tree's time
    ``tree_time[dst_tree[i]]`` (``'last'``: the latest ``fanout`` of them) are CSC positions
    ``bounds[2 i] : bounds[2 i + 1]``. Pass ``bounds`` as the indptr and ``2 * arange(len(dst))`` as the
    destinations of :func:`hop_kernels.count` / :func:`hop_kernels.pick`. Returns ``bounds``."""
    last = strategy == "last"
    # Each search waits on a chain of misses past the cache: the destinations split over the hop's threads.
    parts = min(hop_kernels.threads(), len(dst) // (hop_kernels.PARALLEL_EDGES // 8))
    cuts = np.linspace(0, len(dst), max(parts, 1) + 1).astype(np.int64)
    helpers = [
        threading.Thread(
            target=_cut, args=(indptr, times, dst[lo:hi], dst_tree[lo:hi], tree_time, fanout, last, bounds[2 * lo : 2 * hi]), name="dgl-zerocopy-cut"
        )
        for lo, hi in zip(cuts[1:-1], cuts[2:])
    ]
    for helper in helpers:
        helper.start()
    _cut(indptr, times, dst[: cuts[1]], dst_tree[: cuts[1]], tree_time, fanout, last, bounds[: 2 * cuts[1]])
    for helper in helpers:
        helper.join()
    return bounds


def pick_weighted(indptr, weights, sums, dst, fanout: int, replace: bool, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`~.picks.pick_weighted`, compiled: ``(pos, which)``."""
    start, end = indptr[dst], indptr[dst + 1]
    deg = (end - start).astype(np.int64)
    totals = np.where(deg > 0, sums[np.maximum(end - 1, 0)], 0.0)
    counts = weighted_counts(deg, totals, fanout, replace)
    offset = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    pos = np.empty(int(offset[-1]), dtype=np.int64)
    _pick_weighted(indptr, weights, sums, dst, offset, fanout, replace, seed, pos)
    return pos, np.repeat(np.arange(len(dst), dtype=np.int64), counts)
