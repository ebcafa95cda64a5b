"""bench/gathering/gather.py on the CPU in a tiny configuration (written to a temporary path, never
bench/results/), and its option parsing, summaries and plot on made-up GPU rows."""

import math
import sys

import pytest
import torch
from conftest import REPO
from script_runs import run_bench, run_python

sys.path.insert(0, str(REPO / "bench" / "gathering"))
import gather  # noqa: E402


def test_tiny_cpu_run_checks_times_and_writes_json_raw_rows(tmp_path):
    stem = tmp_path / "gather_tiny"
    args = ["--rows", "2000", "--cols", "16,100", "--dtypes", "fp32", "--batches", "300", "--repeats", "2", "--raw", "json"]
    r, data = run_bench("bench/gathering/gather.py", *args, out=stem, timeout=300)
    rows = data["rows"]
    assert {(row["dim"], row["method"]) for row in rows} == {(d, m) for d in (16, 100) for m in gather.CPU_METHODS}
    assert all(row["status"] == "ok" and row["gbps_median"] > 0 for row in rows), rows
    assert len(data["raw"]) == 2 * len(rows)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gather_tiny.csv", "gather_tiny.json", "gather_tiny.png"]
    assert "| fp32 | 100 | 300 | cpu |" in r.stdout


def test_cols_is_the_dims_flag_and_bad_values_are_usage_errors(tmp_path):
    r = run_python("bench/gathering/gather.py", "--dtypes", "fp64", "--out", tmp_path / "g")
    assert r.returncode == 2 and "unknown dtype 'fp64'" in r.stderr


def test_max_blocks_caps_from_sm_multiples():
    assert gather.parse_max_blocks("none,0.5sm,1sm,2sm,4sm", 132) == [66, 132, 264, 528]
    assert gather.parse_max_blocks("64, 1sm, 64", 64) == [64]
    assert gather.parse_max_blocks("0.001sm", 132) == [1]
    for bad in ("x", "0", "-3", "twosm"):
        with pytest.raises(ValueError, match="--max-blocks"):
            gather.parse_max_blocks(bad, 132)


def test_store_methods_map_to_feature_store_arguments():
    # The plain zero-copy methods keep the ids' order whatever the store's default sort policy is.
    assert gather.store_options("zerocopy") == {"backend": "zerocopy", "sort_ids": False}
    assert gather.store_options("zerocopy-naive") == {"backend": "zerocopy", "variant": "naive", "sort_ids": False}
    assert gather.store_options("zerocopy+sort_ids") == {"backend": "zerocopy", "sort_ids": True}
    assert gather.store_options("zerocopy+sort_ids=auto") == {"backend": "zerocopy", "sort_ids": "auto"}
    assert gather.store_options("zerocopy+max_blocks=264") == {"backend": "zerocopy", "sort_ids": False, "max_blocks": 264}
    assert gather.store_options("gpu") == {"backend": "gpu"}
    with pytest.raises(ValueError):
        gather.store_options("zerocopy+fast")
    assert gather.methods_for(True, tune=False, max_blocks=[66]) == ["h2d", "zerocopy", "zerocopy-naive", "cpu", "gpu"]
    assert gather.methods_for(True, tune=True, max_blocks=[66])[-2:] == ["zerocopy+sort_ids", "zerocopy+max_blocks=66"]
    assert gather.methods_for(False, tune=True, max_blocks=[66]) == list(gather.CPU_METHODS)
    assert gather.table_rows(4_000_000, 4096, 2.0) == 488_281 and gather.table_rows(4_000_000, 64, 2.0) == 4_000_000
    assert gather.table_rows(1000, 4096, None) == 1000
    assert gather.store_options("zerocopy+cache=0.25") == {"backend": "zerocopy", "sort_ids": False, "cache_fraction": 0.25}
    assert gather.store_options("cpu+cache=1") == {"backend": "cpu", "cache_fraction": 1.0}
    with pytest.raises(ValueError, match=r"\+cache=F"):
        gather.store_options("gpu+cache=0.5")
    assert gather.methods_for(True, tune=True, max_blocks=[], cache_fracs=(0.1, 0.5))[-4:] == [
        "zerocopy+cache=0.1",
        "cpu+cache=0.1",
        "zerocopy+cache=0.5",
        "cpu+cache=0.5",
    ]
    assert gather.methods_for(True, tune=False, max_blocks=[], cache_fracs=(0.1,))[-1] == "gpu"


@pytest.mark.parametrize("fraction", [0.1, 0.5, 1.0])
def test_a_cached_method_is_checked_timed_and_reports_its_hit_rate(fraction):
    table = torch.randn(2000, 24)
    ids = torch.randint(0, 2000, (4000,), generator=torch.Generator().manual_seed(0))
    reference = table[ids]
    out = torch.empty_like(reference)
    extra = {}
    times = gather.time_method(
        f"cpu+cache={fraction:g}", table, ids, reference, out, lambda fn, n: [fn() is not None and 1.0 for _ in range(n)], 3, extra=extra
    )
    assert times == [1.0, 1.0, 1.0] and torch.equal(out, reference)
    assert abs(extra["hit_rate"] - fraction) < 0.04  # uniform ids over a random choice of cached rows
    extra = {}
    gather.time_method("cpu", table, ids, reference, out, lambda fn, n: [1.0] * n, 2, extra=extra)
    assert extra == {}  # no cache, no hit rate


def _raw(method, gbps, dim=128, batch=1024):
    return [
        {"dtype": "fp32", "dim": dim, "row_bytes": 4 * dim, "table_rows": 1000, "batch": batch, "method": method, "seconds": 1.0, "gbps": g}
        for g in (gbps * 0.9, gbps, gbps * 1.1)
    ]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # matplotlib's own pyparsing calls, on first import
def test_summary_keeps_failures_as_rows_and_the_plot_draws_them(tmp_path):
    raw = _raw("h2d", 20.0) + _raw("zerocopy", 18.0) + _raw("zerocopy+sort_ids", 16.0) + _raw("h2d", 20.0, dim=16) + _raw("zerocopy", 9.0, dim=16)
    failures = [
        {
            "dtype": "fp32",
            "dim": 128,
            "row_bytes": 512,
            "table_rows": 1000,
            "batch": 1024,
            "method": "zerocopy-naive",
            "status": "failed: TypeError: unexpected keyword argument 'variant'",
        },
        {
            "dtype": "fp32",
            "dim": 128,
            "row_bytes": 512,
            "table_rows": 1000,
            "batch": 1024,
            "method": "zerocopy+max_blocks=66",
            "status": "failed: TypeError: unexpected keyword argument 'max_blocks'",
        },
    ]
    summary = gather.summarize_rows(raw, failures, "h2d")
    by = {(s["dim"], s["method"]): s for s in summary}
    assert by[(128, "zerocopy")]["ratio_to_ceiling"] == pytest.approx(0.9) and by[(128, "zerocopy")]["status"] == "ok"
    assert math.isnan(by[(128, "zerocopy-naive")]["gbps_median"]) and by[(128, "zerocopy-naive")]["status"].startswith("failed: TypeError")
    assert [s["method"] for s in summary if s["dim"] == 128] == ["h2d", "zerocopy", "zerocopy+sort_ids", "zerocopy-naive", "zerocopy+max_blocks=66"]
    path = tmp_path / "g.png"
    gather._plot(summary, {"device": "made-up GPU", "sm_count": 132}, path)
    assert path.stat().st_size > 0


def test_a_failing_method_becomes_a_row_not_a_crash(monkeypatch):
    import torch

    table = torch.arange(40, dtype=torch.float32).reshape(10, 4)
    ids = torch.tensor([3, 1, 3])
    out = torch.empty((3, 4))
    times = gather.time_method("cpu", table, ids, table[ids], out, lambda fn, n: [1.0] * n, 2)
    assert times == [1.0, 1.0]
    with pytest.raises(AssertionError, match="1 of 3 rows differ from table"):
        gather.check_equal(torch.cat([table[ids][:2], table[:1]]), table[ids])
    monkeypatch.setattr(gather, "open_method", lambda *a: ((lambda: out), lambda: None))  # a gather that writes nothing
    with pytest.raises(AssertionError, match="3 of 3 rows differ"):
        gather.time_method("cpu", table, ids, table[ids], out, lambda fn, n: [1.0] * n, 2)
    assert (
        gather.failure_text(TypeError("got an unexpected keyword argument 'variant'\nmore"))
        == "failed: TypeError: got an unexpected keyword argument 'variant'"
    )
