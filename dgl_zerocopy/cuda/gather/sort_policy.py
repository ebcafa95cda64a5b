"""When a zero-copy gather sorts its ids: ``sort_ids="auto"``, decided by the fitted link model.

Sorting the batch costs time of its own (a fixed part and a part per id: :mod:`~dgl_zerocopy.cuda.gather.link_model`,
fitted to the H200's ``zerocopy+sort_ids`` figures), and pays back only where reads in flight or
translation misses, not the link, hold the gather back. ``"auto"`` sorts when the model's time of
the sorted gather, sort included, is at least :data:`MIN_GAIN` below the unsorted one, for the
batch, row size, table size and kernel shape of the launch.

What that means, with the fitted constants (``bench/pcie/link_model.py`` prints the figures):

- on the shape the H200 runs measured (one window per row), it sorts 262,144 ids of 256-512 B and
  of 4 KB, not of 1-2 KB, and no batch of 16,384 ids: as ``run3-sort`` measured (sorted 1.19-1.42x
  from 256 to 512 B at 262,144 ids, 1.05x and 1.04x at 1 and 2 KB, 1.14x at 4 KB; 0.46-0.87x at
  16,384). tests/cuda/test_sort_policy.py holds it to every figure pair that differs by more than 10 %;
- on the default shape (line windows for rows of 129-512 B, which the model has near the link
  already), it does not sort those rows: sorted ids buy little more than the shape gives; it sorts
  large batches of large rows (262,144 ids of 4 KB), where the link's limit is lower for random ids.
  The gain there rests on a loosely fitted constant (``host_miss_cost``): a prediction to measure.

The table size enters through the miss share of random ids, which the model takes as nearly 1 from
2 GB on, so it barely moves the choice. The decision is memoised per (plan, table size).
"""

from __future__ import annotations

import functools

from dgl_zerocopy.cuda.gather import gather_plan, link_model

__all__ = ["MIN_GAIN", "SORT_CHOICES", "check_sort", "resolve_sort", "should_sort"]

#: ``sort_ids`` values: always, never, or as :func:`should_sort` says.
SORT_CHOICES = (True, False, "auto")
#: The least modelled saving (share of the unsorted call's time) for which "auto" sorts.
MIN_GAIN = 0.05


@functools.lru_cache(maxsize=4096)
def should_sort(plan: gather_plan.GatherPlan, table_bytes: int) -> bool:
    """Whether the fitted link model has the sorted gather (sort included) at least
    :data:`MIN_GAIN` faster than the unsorted one, for the launch ``plan`` (its ids, row bytes
    read per row and kernel shape) from a host table of ``table_bytes``.
    """
    if plan.num_ids < 2 or plan.row_bytes == 0:
        return False  # nothing to reorder
    table_bytes = max(table_bytes, plan.row_bytes)
    unsorted = link_model.estimate_plan(plan, table_bytes, order="random")
    sorted_ = link_model.estimate_plan(plan, table_bytes, order="sorted")
    return sorted_.seconds <= (1.0 - MIN_GAIN) * unsorted.seconds


def check_sort(sort: bool | str) -> None:
    """Raise ValueError unless ``sort`` is one of :data:`SORT_CHOICES` (1 and 0 are not True and False)."""
    if not (sort is True or sort is False or (isinstance(sort, str) and sort == "auto")):
        raise ValueError(f"sort_ids must be True, False or 'auto', but got {sort!r}")


def resolve_sort(sort: bool | str, plan: gather_plan.GatherPlan, table_bytes: int) -> bool:
    """``sort`` as a decision for ``plan``: True and False as given, ``"auto"`` by :func:`should_sort`.

    Raises:
        ValueError: ``sort`` is none of :data:`SORT_CHOICES`.
    """
    check_sort(sort)
    return sort if isinstance(sort, bool) else should_sort(plan, int(table_bytes))
