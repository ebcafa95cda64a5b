"""bench/training/loader_ab.py on a tiny graph, written to a temporary path (never bench/results/)."""

import pytest
from script_runs import run_bench, run_python


@pytest.mark.slow  # two child processes that each load DGL and iterate five loaders
def test_loader_ab_times_each_route_in_both_trees(tmp_path):
    pytest.importorskip("dgl")
    stem = tmp_path / "loader_ab_tiny"
    # --base HEAD: a clone may be shallow; the machinery (archive, both trees imported, rows) is what is checked.
    args = ["--base", "HEAD", "--rounds", "1", "--epochs", "2", "--num-nodes", "3000"]
    _, result = run_bench("bench/training/loader_ab.py", *args, out=stem, timeout=300)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loader_ab_tiny.csv", "loader_ab_tiny.json", "loader_ab_tiny.png"]
    rows = result["rows"]
    assert {(row["route"], row["version"]) for row in rows} == {
        (route, v) for route in ("dgl", "dropin-p0", "dropin-p2", "store-p0", "store-p2") for v in ("base", "head")
    }
    for row in rows:
        assert row["epochs"] == 1 and 0 < row["epoch_min"] <= row["epoch_time"] <= row["epoch_max"]
    assert "base HEAD against head" in result["meta"]["setup"]


def test_bad_rounds_are_refused_in_one_line():
    r = run_python("bench/training/loader_ab.py", "--epochs", "1", timeout=60)
    assert r.returncode == 2 and "--epochs >= 2" in r.stderr
