"""bench/training/pyg_accuracy.py: its arguments, the configs the two routes share, its comparison rule and table,
and (slow tier) a smoke run on Cora, one seed of one epoch per route, written to a temporary folder (never
bench/results/)."""

from __future__ import annotations

import math
import sys

import pytest
from conftest import REPO, SHARED_DATA
from script_runs import run_bench

sys.path.insert(0, str(REPO / "bench" / "training"))


@pytest.mark.parametrize("name", ["cora", "amazon-photo", "coauthor-physics"])
def test_both_routes_train_the_same_settings(name):
    """The routes differ only in the front end: every other key of the run is equal; GraphSAGE everywhere."""
    from pyg_accuracy import config

    dgl, pyg = config(name, "dgl", 3), config(name, "pyg", 3)
    assert (dgl.frontend, pyg.frontend) == ("dgl", "pyg")
    assert dgl.model_dump(exclude={"frontend"}) == pyg.model_dump(exclude={"frontend"})
    assert pyg.model == "sage" and not pyg.self_loop and pyg.seed == 3 and pyg.device == "cpu"


def test_the_comparison_says_within_noise_by_twice_the_standard_error():
    from pyg_accuracy import compare, markdown

    rows = [
        {"dataset": "a", "route": "dgl", "test_accs": "0.80 0.82 0.81"},
        {"dataset": "a", "route": "pyg", "test_accs": "0.81 0.83 0.82"},  # +1 point, SE 0.82 points: within 2 SE
        {"dataset": "b", "route": "dgl", "test_accs": "0.80 0.80 0.81"},
        {"dataset": "b", "route": "pyg", "test_accs": "0.90 0.91 0.90"},
    ]
    compare(rows)
    assert math.isnan(rows[0]["diff_to_dgl"]) and rows[0]["within_noise"] == ""
    assert rows[1]["diff_to_dgl"] == pytest.approx(0.01) and rows[1]["diff_se"] == pytest.approx(0.01 * math.sqrt(2 / 3))
    assert rows[1]["within_noise"] == "yes" and rows[3]["within_noise"] == "no" and rows[3]["welch_p"] < 0.01
    for r in rows:
        r.update(fanouts="-1,-1", batch_size=140, hidden=16, epochs=2, test_acc_mean=0.8, test_acc_std=0.01, epoch_time_median=0.1, eval_time_median=0.1)
    table = markdown(rows, {"command": "python bench/training/pyg_accuracy.py", "device": "cpu", "machine": "m", "seeds": "0..2", "rule": "r"})
    assert table.startswith("`python bench/training/pyg_accuracy.py`")
    assert "| a | pyg | -1,-1 | 140 | 16 | 2 | 80.00 ± 1.00 | +1.00 ± 0.82 |" in table


@pytest.mark.slow  # one epoch of each route on Cora, in a subprocess
def test_pyg_accuracy_bench_smoke(tmp_path):
    pytest.importorskip("dgl")
    pytest.importorskip("torch_geometric")
    if not (SHARED_DATA / "planetoid").is_dir():
        pytest.skip(f"real datasets not present at {SHARED_DATA}")
    out = tmp_path / "pa"
    args = ["--datasets", "cora", "--seeds", "1", "--epochs", "1", "--data-root", SHARED_DATA]
    _, result = run_bench("bench/training/pyg_accuracy.py", *args, out=out)
    rows = result["rows"]
    assert [(row["dataset"], row["route"]) for row in rows] == [("cora", "dgl"), ("cora", "pyg")]
    assert all(0 <= row["test_acc_mean"] <= 1 and row["seeds"] == 1 and row["epochs"] == 1 for row in rows)
    assert "bench/training/pyg_accuracy.py --datasets cora" in result["meta"]["command"]
    assert out.with_suffix(".csv").read_text().startswith("# command: ") and out.with_suffix(".png").stat().st_size > 0
    assert "| cora | pyg |" in out.with_suffix(".md").read_text(encoding="utf-8")
