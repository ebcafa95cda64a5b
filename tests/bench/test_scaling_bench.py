"""bench/training/scaling.py in a tiny configuration, written to a temporary folder (never bench/results/),
and its least-squares fit on known lines."""

import json
import math
import sys

import numpy as np
import pytest
from conftest import REPO
from script_runs import run_bench, run_cli

sys.path.insert(0, str(REPO / "bench" / "training"))
from scaling import fit_linear, verdict  # noqa: E402

TINY = [
    "--nodes",
    "2000,4000",
    "--widths",
    "16,64",
    "--width-nodes",
    "3000",
    "--batches",
    "3",
    "--repeats",
    "2",
    "--steps",
    "2",
    "--batch-size",
    "16",
    "--fanouts",
    "5,5",
    "--hidden",
    "16",
    "--threads",
    "1",
]
STEM = "scaling_test_tiny"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    pytest.importorskip("dgl")  # the bench samples with DGL
    out = tmp_path_factory.mktemp("scaling")
    r, _ = run_bench("scaling", *TINY, "--out", STEM, "--out-dir", out, timeout=300)
    return out, r.stdout


@pytest.mark.slow  # runs the benchmark; the fit below is tested on known lines in the fast tier
def test_files_written_to_the_given_folder_only(tiny_run):
    out, _ = tiny_run
    for suffix in (".csv", ".json", ".png"):
        assert (out / f"{STEM}{suffix}").stat().st_size > 0, suffix
        assert not (REPO / "bench" / "results" / f"{STEM}{suffix}").exists(), "the test must not write into bench/results"
    header = (out / f"{STEM}.csv").read_text().splitlines()
    assert header[0].startswith("# command: ") and "--out-dir" in header[0]


@pytest.mark.slow  # runs the benchmark; the fit below is tested on known lines in the fast tier
def test_rows_cover_the_grid(tiny_run):
    out, _ = tiny_run
    rows = json.loads((out / f"{STEM}.json").read_text())["rows"]
    assert {(r["nodes"], r["width"]) for r in rows} == {(2000, 128), (4000, 128), (3000, 16), (3000, 64)}
    assert {r["sweep"] for r in rows} == {"nodes", "width"}
    for r in rows:
        assert 0 < r["gather_s_q1"] <= r["gather_s"] <= r["gather_s_q3"]
        assert 0 < r["step_s_q1"] <= r["step_s"] <= r["step_s_q3"]
        assert r["compute_s_mean"] > 0 and r["sample_s_mean"] > 0
        assert r["epoch_s_extrapolated"] == pytest.approx(r["step_s"] * r["batches_per_epoch"])
        # float32 rows: bytes per gathered row is exactly the width times four
        assert r["gather_mb"] * 1e6 / r["gather_rows"] == pytest.approx(4 * r["width"])


@pytest.mark.slow  # runs the benchmark; the fit below is tested on known lines in the fast tier
def test_bytes_gathered_grow_with_width(tiny_run):
    out, _ = tiny_run
    rows = {r["width"]: r for r in json.loads((out / f"{STEM}.json").read_text())["rows"] if r["nodes"] == 3000}
    assert rows[16]["gather_mb"] < rows[64]["gather_mb"]
    assert rows[16]["step_mb"] < rows[64]["step_mb"]


@pytest.mark.slow  # runs the benchmark; the fit below is tested on known lines in the fast tier
def test_fit_fields_present_and_finite(tiny_run):
    out, stdout = tiny_run
    meta = json.loads((out / f"{STEM}.json").read_text())["meta"]
    for key in ("gather_fit", "step_fit"):
        fit = meta[key]
        assert fit["points"] == 4
        for field in ("slope_s_per_gb", "intercept_s", "r2", "max_rel_residual", "loglog_exponent"):
            assert math.isfinite(fit[field]), (key, field)
        assert fit["r2"] <= 1.0
    assert "in bytes gathered: R^2" in meta["gather_verdict"] and meta["gather_verdict"] in stdout
    assert "extrapolated" in meta["epoch_note"] and "| nodes | 2,000 | 128 |" in stdout


def test_fit_of_an_exact_line():
    x = [1e8, 2e8, 4e8, 8e8]
    fit = fit_linear(x, [0.5 * v / 1e9 for v in x])  # 0.5 s per GB through the origin
    assert fit["slope_s_per_gb"] == pytest.approx(0.5) and fit["intercept_s"] == pytest.approx(0.0, abs=1e-12)
    assert fit["r2"] == pytest.approx(1.0) and fit["loglog_exponent"] == pytest.approx(1.0)
    assert fit["max_rel_residual"] < 1e-9
    assert verdict("gather time", fit).startswith("gather time is linear in bytes gathered")


def test_fit_of_a_quadratic_is_not_linear():
    x = np.array([1e8, 2e8, 4e8, 8e8, 1.6e9])
    fit = fit_linear(x, (x / 1e9) ** 2)
    assert fit["loglog_exponent"] == pytest.approx(2.0)
    assert "super-linear" in verdict("step time", fit)


def test_too_few_sizes_give_nan_not_a_fake_fit():
    fit = fit_linear([1e6, 1e6, 2e6], [1.0, 1.1, 2.0])
    assert math.isnan(fit["r2"]) and math.isnan(fit["slope_s_per_gb"])
    assert "too few distinct sizes" in verdict("gather time", fit)


@pytest.mark.slow  # runs the benchmark; the fit below is tested on known lines in the fast tier
def test_batch_larger_than_the_training_set_is_a_clear_error(tmp_path):
    pytest.importorskip("dgl")  # the bench imports DGL before it checks the batch size
    r = run_cli("bench", "scaling", "--nodes", "2000", "--widths", "16", "--width-nodes", "2000", "--batch-size", "1024", "--out-dir", tmp_path)
    assert r.returncode != 0
    assert "--batch-size 1024 exceeds the 21 training nodes" in r.stderr and "lower --batch-size" in r.stderr
