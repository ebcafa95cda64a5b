"""bench/training/ddp.py on a tiny graph, written to a temporary path (never bench/results/)."""

import json
import os
import signal
import subprocess

import pytest
from conftest import REPO
from script_runs import start_in_own_session

TINY = ["--num-nodes", "3000", "--epochs", "2", "--repeats", "2", "--batch-size", "64", "--hidden", "16", "--fanouts", "4,4", "--nproc", "2", "--threads", "2"]


def _bench(*args, env=None):
    """``dgl-zerocopy bench ddp`` in a session of its own, killed with its ranks after 180 s."""
    if env is None:  # the bench refuses a set OMP_NUM_THREADS (the next test)
        env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    proc = start_in_own_session("-m", "dgl_zerocopy.cli", "bench", "ddp", *args, env=env)
    try:
        out, err = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("bench ddp did not finish within 180 s")
    return proc.returncode, out, err


@pytest.mark.slow
def test_ddp_bench_runs_both_setups_alternating_with_median_and_spread(tmp_path):
    pytest.importorskip("dgl")  # the bench samples with DGL
    stem = tmp_path / "ddp_tiny"
    code, out, err = _bench(*TINY, "--out", str(stem))
    assert code == 0, err[-4000:]
    data = json.loads(stem.with_suffix(".json").read_text())
    rows, raw = data["rows"], data["raw"]
    assert [(r["setup"], r["processes"], r["threads"], r["batch_per_process"]) for r in rows] == [("1x2", 1, 2, 64), ("2x1", 2, 1, 32)]
    # Two repetitions, the order of the setups swapped in the second, the same seed for both setups of one.
    assert [(r["repeat"], r["seed"], r["setup"]) for r in raw] == [(0, 0, "1x2"), (0, 0, "2x1"), (1, 1, "2x1"), (1, 1, "1x2")]
    for r in raw:
        assert len(r["epoch_times"]) == 2 and r["epoch_time"] == r["epoch_times"][1], r  # epoch 0 warms up
        assert 0 < r["epoch_time"] < r["job_time"] and 0 <= r["test_acc"] <= 1, r
    for row in rows:
        assert row["runs"] == 2
        assert row["epoch_min"] <= row["epoch_q1"] <= row["epoch_time"] <= row["epoch_q3"] <= row["epoch_max"], row
        assert row["test_acc_min"] <= row["test_acc"] <= row["test_acc_max"], row
    assert rows[0]["speedup"] == 1.0 and rows[0]["acc_diff"] == 0.0
    assert rows[1]["speedup"] == pytest.approx(rows[0]["epoch_time"] / rows[1]["epoch_time"])
    diffs = sorted(b["test_acc"] - a["test_acc"] for a in raw for b in raw if a["setup"] == "1x2" and b["setup"] == "2x1" and a["seed"] == b["seed"])
    assert (rows[1]["acc_diff_min"], rows[1]["acc_diff_max"]) == pytest.approx((diffs[0], diffs[-1]))
    assert data["meta"]["command"].endswith("--out " + str(stem)) and "load_average_1min" in data["meta"]
    assert stem.with_suffix(".png").stat().st_size > 0
    assert stem.with_suffix(".csv").read_text().startswith("# command: ")
    assert "| 2x1 | 2 x 1 | 32 |" in out and "# " + data["meta"]["command"] in out
    assert not (REPO / "bench" / "results" / "ddp_tiny.json").exists()


@pytest.mark.slow
def test_ddp_bench_refuses_a_set_omp_num_threads(tmp_path):
    code, _, err = _bench("--out", str(tmp_path / "d"), env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert code == 2 and "OMP_NUM_THREADS is set (1)" in err, err
    assert not list(tmp_path.iterdir())
