"""bench/sampler/sampling_sizes.py: sampling.py once per graph size, the rows merged into one table."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "sampler"))

import sampling_sizes  # noqa: E402

SMALL = ["--methods", "reference", "--avg-degree", "8", "--batch-size", "16", "--batches", "2", "--repeats", "1", "--warmup", "0"]


def test_the_default_sizes_are_the_checks_graph_and_full_products():
    assert sampling_sizes.SIZES == (200_000, 2_449_029)


def test_each_size_runs_and_the_rows_are_merged(tmp_path, capsys):
    out = tmp_path / "sizes"
    assert sampling_sizes.main(["--sizes", "400,800", *SMALL, "--out", str(out)]) == 0
    data = json.loads(out.with_suffix(".json").read_text())
    rows = data["rows"]
    assert [(r["method"], r["num_nodes"], r["status"]) for r in rows] == [("reference", 400, "ok"), ("reference", 800, "ok")]
    assert rows[1]["num_edges"] > rows[0]["num_edges"] > 0 and all(r["medges_per_s_median"] > 0 and r["checked"] for r in rows)
    assert data["meta"]["sizes"] == "400,800" and data["meta"]["graph"].count("products-shaped") == 2
    assert out.with_suffix(".csv").read_text().startswith("# ") and out.with_suffix(".png").stat().st_size > 0
    table = capsys.readouterr().out
    assert "| reference | 400 |" in table and "| reference | 800 |" in table


def test_a_size_past_the_time_limit_is_not_started(tmp_path):
    out = tmp_path / "sizes"
    assert sampling_sizes.main(["--sizes", "400,800", *SMALL, "--time-limit", "1e-9", "--out", str(out)]) == 0
    rows = json.loads(out.with_suffix(".json").read_text())["rows"]
    assert {(r["num_nodes"], r["status"]) for r in rows} == {(400, "skipped: time limit"), (800, "skipped: time limit")}


@pytest.mark.parametrize("argv", [["--sizes", "0"], ["--sizes", "a,b"], ["--num-nodes", "5"]])
def test_bad_sizes_are_refused(argv, tmp_path):
    with pytest.raises(SystemExit):
        sampling_sizes.main([*argv, "--out", str(tmp_path / "x")])
