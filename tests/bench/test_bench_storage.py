"""bench/tiers/storage.py: a smoke run at a tiny size into a temporary folder (never bench/results/): every
run's row and figures, the file's pages dropped before each run, no cgroup left behind."""

from __future__ import annotations

import os
import sys

import pytest
from conftest import REPO
from script_runs import run_bench, run_python

sys.path.insert(0, str(REPO / "bench" / "tiers"))


@pytest.mark.slow  # a process per run, each loading DGL
def test_storage_bench_smoke(tmp_path):
    pytest.importorskip("dgl")
    from storage import MemoryLimit

    runs = "mmap-random,static-int8+ahead,static+ahead,dynamic"
    args = ["--nodes", "6000", "--dim", "32", "--epochs", "2", "--max-batches", "4", "--batch-size", "8", "--hidden", "8", "--runs", runs]
    (tmp_path / "data").mkdir()
    _, result = run_bench("bench/tiers/storage.py", *args, "--dir", tmp_path / "data", "--out-dir", tmp_path, results=tmp_path / "storage.json")
    rows = result["rows"]
    assert [row["run"] for row in rows] == runs.split(",")
    for row in rows:
        assert row["batches"] == 4 and row["rows"] > 0 and row["rows_per_s"] > 0, row
        assert row["step_s"] > 0 and row["wait_over_step"] >= 0, row
    ours = rows[1:]
    assert all(0 < row["host_hit_rate"] <= 1 and row["evictions"] >= 0 for row in ours)
    for row in ours:  # the cpu backend's buffer grows as its slots fill, never past its size
        assert 0 < row["first_buffer_resident_mib"] <= row["buffer_resident_mib"] <= row["buffer_mib"], row
    assert rows[2]["read_ahead_hits"] > 0 and rows[3]["read_ahead_hits"] == 0  # reading ahead on, then off
    assert (tmp_path / "storage.png").stat().st_size > 0 and (tmp_path / "storage.csv").exists()
    folder = MemoryLimit.folder_of(os.getpid())
    if folder is not None and folder.parent.exists():
        assert not list(folder.parent.glob("dgl-zerocopy-bench-*")), "a run's cgroup was left behind"


@pytest.mark.slow
def test_the_gpu_mode_without_cuda_is_refused_in_one_line(tmp_path):
    """``--device cuda`` where torch sees no GPU: exit 2 and one line that names the fix, before any table is written."""
    r = run_python("bench/tiers/storage.py", "--device", "cuda", "--dir", tmp_path, "--out-dir", tmp_path, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[-1] == (
        "storage.py: error: --device cuda: no CUDA GPU here (torch.cuda.is_available() is False); leave it out to train on the CPU"
    )
    assert list(tmp_path.iterdir()) == []


def test_without_dgl_every_run_says_why_it_did_not_run(tmp_path):
    """``import dgl`` failing (as on a GPU image without the wheel): each run's row is skipped with the
    error, exit 0, no table written (the gpu-check step reports the step as skipped)."""
    shadow = tmp_path / "shadow" / "dgl"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('DGL is not installed here')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shadow.parent), os.environ.get("PYTHONPATH", "")])}
    args = ["--runs", "static+ahead,mmap-random", "--dir", tmp_path / "data", "--out-dir", tmp_path]
    (tmp_path / "data").mkdir()
    _, result = run_bench("bench/tiers/storage.py", *args, results=tmp_path / "storage.json", timeout=120, env=env)
    rows = result["rows"]
    why = "skipped: import dgl failed: ImportError: DGL is not installed here"
    assert rows == [{"run": "static+ahead", "status": why}, {"run": "mmap-random", "status": why}]
    assert list((tmp_path / "data").iterdir()) == []


def test_repeats_give_medians_with_their_spread_and_a_failure_wins():
    from storage import MEDIANS, _median_row

    def sample(wait, status="ok"):
        return {"run": "static+ahead", "status": status, "storage_reads": 7, **dict.fromkeys(MEDIANS, 1.0), "wait_over_step": wait}

    row = _median_row([sample(0.3), sample(0.1), sample(0.2)])
    assert (row["wait_over_step"], row["wait_over_step_min"], row["wait_over_step_max"], row["repeats"]) == (0.2, 0.1, 0.3, 3)
    assert row["storage_reads"] == 7 and row["step_s"] == 1.0 and "step_s_min" not in row
    failed = {"run": "static+ahead", "status": "failed: exit 1: boom"}
    assert _median_row([sample(0.3), failed, sample(0.2)]) == failed
    late = {"run": "static+ahead", "status": "skipped: time limit"}
    assert _median_row([sample(0.3), sample(0.1), late])["repeats"] == 2 and _median_row([late, late]) == late


def test_the_host_buffer_reading_counts_a_pinned_buffer_whole_from_the_bind():
    """docs/storage.md: ``zerocopy`` registers the whole host buffer when the store binds, which makes
    every page resident before any row is read; with ``cpu`` the pages fill with the slots."""
    from storage import buffer_resident_bytes

    buffer, row = 24 << 20, 512
    assert buffer_resident_bytes("zerocopy", buffer, 0, row) == buffer
    assert buffer_resident_bytes("zerocopy", buffer, 1000, row) == buffer
    assert buffer_resident_bytes("cpu", buffer, 0, row) == 0
    assert buffer_resident_bytes("cpu", buffer, 1000, row) == 1000 * row
    assert buffer_resident_bytes("cpu", buffer, 10**6, row) == buffer, "never more than the buffer: slots are reused"
