"""Which host-buffer slot gives up its row when a miss needs one.

The host buffer (:mod:`.host_buffer`) asks its policy for ``k`` victims among the slots it may
take (not reserved by a read ahead or a gather in flight, not loading) and tells it what happened
to each slot: :meth:`Eviction.touch` (a batch found its row there), :meth:`Eviction.filled` (a row
was just read into it). Everything is vectorised over slot arrays: a batch costs a few NumPy
passes over the slots, never a Python loop per row.

- ``lru``: the slot used longest ago (batch granularity: one stamp per batch).
- ``clock``: CLOCK (second chance): a hand sweeps the slots; a slot used since the hand last
  passed loses its mark and stays, an unmarked one is taken. Rows come in unmarked, so a row
  read once and never again leaves before the rows batches keep coming back to.
- ``fifo``: the row read longest ago, whatever its use since (the baseline of the measurement).
- ``static``: the row the static ranking (the device cache's policies, ``degree`` first) puts last.

``hybrid`` (LSM-GNN's split of static and dynamic node information) is not a class here: the host
buffer reserves a share of its slots for the rows ranked first (filled when first used, never
evicted) and runs the dynamic policy over the rest. Which dynamic policy, and what share, was
measured on a neighbour-sampling trace: ``bench/tiers/storage_eviction.py`` and docs/storage.md.
"""

from __future__ import annotations

import numpy as np

__all__ = ["DYNAMIC_POLICIES", "Eviction", "make_eviction"]

DYNAMIC_POLICIES = ("lru", "clock", "fifo")


class Eviction:
    """The protocol (and the LRU policy): ``capacity`` slots, numbered from 0."""

    name = "lru"
    #: Bytes of state per slot (counted in the host budget).
    slot_bytes = 8

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._stamp = np.zeros(capacity, dtype=np.int64)
        self._now = 0

    def touch(self, slots: np.ndarray) -> None:
        """A batch read the rows in ``slots``."""
        self._stamp_now(slots)

    def filled(self, slots: np.ndarray, rows: np.ndarray) -> None:
        """Rows ``rows`` were just read into ``slots``."""
        self.touch(slots)

    def victims(self, k: int, candidates: np.ndarray) -> np.ndarray:
        """``k`` slots to empty, chosen among ``candidates`` (int64 slot ids, at least ``k``)."""
        return _smallest(self._stamp, candidates, k)

    def _stamp_now(self, slots: np.ndarray) -> None:
        """Stamp ``slots`` with the next tick: they are the newest now."""
        self._now += 1
        self._stamp[slots] = self._now


class Fifo(Eviction):
    name = "fifo"

    def touch(self, slots: np.ndarray) -> None:
        pass  # use does not count: only the order rows came in

    def filled(self, slots: np.ndarray, rows: np.ndarray) -> None:
        self._stamp_now(slots)


class Clock(Eviction):
    name = "clock"
    slot_bytes = 1

    def __init__(self, capacity: int) -> None:
        self.capacity, self._hand = capacity, 0
        self._mark = np.zeros(capacity, dtype=np.uint8)  # 1: read since the hand last passed the slot

    def touch(self, slots: np.ndarray) -> None:
        self._mark[slots] = 1

    def filled(self, slots: np.ndarray, rows: np.ndarray) -> None:
        self._mark[slots] = 0

    def victims(self, k: int, candidates: np.ndarray) -> np.ndarray:
        # The candidates in the order the hand meets them, starting at the hand.
        order = np.argsort((candidates - self._hand) % self.capacity, kind="stable")
        swept = candidates[order]
        unmarked = np.flatnonzero(self._mark[swept] == 0)
        if unmarked.size >= k:
            stop = int(unmarked[k - 1])
            chosen = swept[unmarked[:k]]
            self._mark[swept[: stop + 1]] = 0  # passed over: their second chance is used
        else:  # a whole turn clears every mark; the second turn takes the first of the rest
            marked = np.flatnonzero(self._mark[swept] != 0)
            self._mark[swept] = 0
            chosen = np.concatenate((swept[unmarked], swept[marked[: k - unmarked.size]]))
        self._hand = (int(chosen[-1]) + 1) % self.capacity
        return chosen


class Static(Eviction):
    """Evicts the row ranked last by ``rank`` (row -> position in the static ranking)."""

    name = "static"

    def __init__(self, capacity: int, rank: np.ndarray) -> None:
        self.capacity = capacity
        self._rank = rank
        self._stamp = np.zeros(capacity, dtype=np.int64)  # the rank of each slot's row

    def touch(self, slots: np.ndarray) -> None:
        pass

    def filled(self, slots: np.ndarray, rows: np.ndarray) -> None:
        self._stamp[slots] = self._rank[rows]

    def victims(self, k: int, candidates: np.ndarray) -> np.ndarray:
        return _smallest(-self._stamp, candidates, k)


def _smallest(key: np.ndarray, candidates: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` candidates with the smallest ``key``."""
    if k >= candidates.size:
        return candidates
    return candidates[np.argpartition(key[candidates], k - 1)[:k]]


def make_eviction(name: str, capacity: int, rank: np.ndarray | None = None) -> Eviction:
    """The policy ``name`` (``"lru"``, ``"clock"``, ``"fifo"``, ``"static"``: needs ``rank``) over ``capacity`` slots."""
    if name == "static":
        if rank is None:
            raise ValueError("static eviction needs a ranking of the rows")
        return Static(capacity, rank)
    kinds = {"lru": Eviction, "clock": Clock, "fifo": Fifo}
    if name not in kinds:
        raise ValueError(f"eviction must be one of {', '.join(map(repr, (*kinds, 'static')))}, but got {name!r}")
    return kinds[name](capacity)
