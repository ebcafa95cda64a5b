"""bench/epoch.py on a tiny graph, written to a temporary path (never bench/results/)."""

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO


@pytest.mark.slow  # a benchmark smoke run; the routes yield the same batches in test_train
def test_epoch_bench_reports_every_route_with_median_and_spread(tmp_path):
    pytest.importorskip("dgl")  # the bench samples with DGL (in a subprocess with the same environment)
    stem = tmp_path / "epoch_tiny"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "dgl_zerocopy.cli",
            "bench",
            "epoch",
            "--num-nodes",
            "1500",
            "--epochs",
            "3",
            "--batch-size",
            "128",
            "--hidden",
            "16",
            "--fanouts",
            "4,4",
            "--out",
            str(stem),
        ],
        capture_output=True,
        text=True,
        encoding="utf-8",
        cwd=REPO,
        env=os.environ.copy(),
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    rows = json.loads(stem.with_suffix(".json").read_text())["rows"]
    routes = {(row["source"], row["prefetch"]) for row in rows}
    assert {("dgl", 0), ("dgl-storage", 0), ("cpu", 0), ("cpu", 2)} <= routes, routes
    for row in rows:
        assert 0 < row["epoch_min"] <= row["epoch_time"] <= row["epoch_max"], row
        assert 0 <= row["wait_share"] <= 1 and 0 <= row["test_acc"] <= 1, row
        assert row["compute"] > 0, row
    assert stem.with_suffix(".png").stat().st_size > 0 and stem.with_suffix(".csv").stat().st_size > 0
    assert "| dgl-storage | 0 |" in r.stdout
    assert not (REPO / "bench" / "results" / "epoch_tiny.json").exists()


def test_epoch_bench_sources_are_checked(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "dgl_zerocopy.cli", "bench", "epoch", "--sources", "cpu,magic", "--out", str(tmp_path / "e")],
        capture_output=True,
        text=True,
        encoding="utf-8",
        cwd=REPO,
        env=os.environ.copy(),
        timeout=120,
    )
    assert r.returncode == 2 and "unknown source 'magic'" in r.stderr, r.stderr
    assert not list(tmp_path.iterdir())
