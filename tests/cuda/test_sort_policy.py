"""``sort_ids="auto"`` (dgl_zerocopy.cuda.gather.sort_policy): the fitted link model's choice, held to
the committed H200 sort figures, and the option as the store takes it."""

from __future__ import annotations

from pathlib import Path

import pytest

from dgl_zerocopy.cuda.gather import gather_plan, link_model, sort_policy
from dgl_zerocopy.store.backends.base import GatherOptions

H200 = Path(__file__).resolve().parents[2] / "bench" / "results" / "gpu" / "h200-2026-11-27"
QUICK_ROWS, QUICK_TABLE_GB = 500_000, 0.25  # bench/gpu_check/gpu_check_main.py GATHER_ARGS["quick"]


def plan(row_bytes: int, num_ids: int, threads_per_row: int | None = None, variant: str = "aligned") -> gather_plan.GatherPlan:
    return gather_plan.plan_gather(row_bytes, 0, num_ids, elem_size=4, variant=variant, threads_per_row=threads_per_row)


def measured_shape(row_bytes: int, num_ids: int) -> gather_plan.GatherPlan:
    """The shape the H200 runs launched: one window per row."""
    return plan(row_bytes, num_ids, gather_plan.fewest_threads_per_row(row_bytes, 16))


def test_auto_agrees_with_every_committed_sort_figure_that_differs_by_more_than_10_percent():
    cells = [
        *link_model.read_measurements(H200 / "run2-full-gather.csv"),
        *link_model.read_measurements(H200 / "run3-sort.csv"),
        *link_model.read_measurements(H200 / "run1-summary.json", rows=QUICK_ROWS, table_gb=QUICK_TABLE_GB),
    ]
    by_key = {(c.source, c.row_bytes, c.batch, c.method): c for c in cells}
    checked = 0
    for (source, row_bytes, batch, method), sorted_cell in by_key.items():
        unsorted = by_key.get((source, row_bytes, batch, "zerocopy"))
        if method != "zerocopy+sort_ids" or unsorted is None or max(sorted_cell.spread, unsorted.spread) > link_model.NOISE_LIMIT:
            continue
        gain = sorted_cell.gbps / unsorted.gbps
        if abs(gain - 1) <= 0.10:
            continue  # too close to call
        chosen = sort_policy.should_sort(measured_shape(row_bytes, batch), unsorted.table_bytes)
        assert chosen == (gain > 1), (source, row_bytes, batch, gain)
        checked += 1
    assert checked >= 12  # both answers among them: see the next test


def test_auto_sorts_large_batches_and_never_small_ones_on_the_measured_shape():
    assert not any(sort_policy.should_sort(measured_shape(w, 16384), 2 * 10**9) for w in (64, 128, 256, 400, 512, 1024, 4096))
    assert all(sort_policy.should_sort(measured_shape(w, 262144), 2 * 10**9) for w in (256, 400, 512, 4096))
    assert not any(sort_policy.should_sort(measured_shape(w, 262144), 2 * 10**9) for w in (64, 128, 1024, 2048))


def test_auto_on_the_default_shape():
    """Line windows put 129-512 B rows near the link's limit in the model: sorting them no longer pays
    at 262,144 ids; it still pays for 4 KB rows, where random ids lower the link's limit."""
    for w in (256, 400, 512):
        assert not sort_policy.should_sort(plan(w, 262144), 2 * 10**9)
        assert not sort_policy.should_sort(plan(w, 262144), 57 * 10**9)
    assert sort_policy.should_sort(plan(4096, 262144), 2 * 10**9)
    assert sort_policy.should_sort(plan(512, 262144, variant="naive"), 2 * 10**9)  # the naive kernel is held back by reads in flight


def test_nothing_to_reorder():
    assert not sort_policy.should_sort(plan(512, 1), 2 * 10**9)
    assert not sort_policy.should_sort(plan(512, 0), 2 * 10**9)


def test_resolve_keeps_true_and_false_and_refuses_the_rest():
    p = plan(512, 262144)
    assert sort_policy.resolve_sort(True, p, 10) is True and sort_policy.resolve_sort(False, measured_shape(512, 262144), 2 * 10**9) is False
    assert sort_policy.resolve_sort("auto", measured_shape(512, 262144), 2 * 10**9) is True
    for bad in (1, 0, "yes", None, "AUTO"):
        with pytest.raises(ValueError, match="sort_ids must be True, False or 'auto'"):
            sort_policy.resolve_sort(bad, p, 10)


def test_the_store_option_defaults_to_auto():
    assert GatherOptions().sort_ids == "auto"
    assert GatherOptions(sort_ids=True).sort_ids is True and GatherOptions(sort_ids=False).sort_ids is False
    with pytest.raises(TypeError, match="sort_ids must be True, False or 'auto'"):
        GatherOptions(sort_ids="sometimes")
