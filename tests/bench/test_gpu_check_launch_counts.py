"""The GPU check's sampling step reports launches and host syncs per batch beside the times:
bench/sampler/launch_count.py counts one batch per method (here on the emulated kernels, the GPU
launcher's host logic), and the step joins the counts to bench/sampler/sampling.py's rows, into
summary.json's figures and summary.md."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import REPO
from script_runs import run_bench

sys.path[:0] = [str(REPO / "bench" / folder) for folder in ("gpu_check", ".", "sampler")]
import gpu_check_sampling as gs  # noqa: E402


@pytest.mark.slow
def test_launch_count_runs_on_the_emulated_kernels_and_writes_its_rows(tmp_path):
    stem = tmp_path / "launch_count"
    done, result = run_bench("bench/sampler/launch_count.py", "--methods", "emulator,snapshot-emulator,gpu-pinned", "--batch-size", "256", out=stem)
    rows = {r["method"]: r for r in result["rows"]}
    for method in ("emulator", "snapshot-emulator"):
        row = rows[method]
        assert row["status"] == "ok" and row["host_syncs_per_batch"] == 1 and row["syncs"] == {"tolist": 1}, row
        assert 0 < row["launches_per_batch"] <= 32 and sum(row["kernels"].values()) == 7 * 3, row
    assert rows["snapshot-emulator"]["launches_per_batch"] <= rows["emulator"]["launches_per_batch"]
    import torch

    if not torch.cuda.is_available():
        assert rows["gpu-pinned"]["status"].startswith("skipped: no CUDA GPU")
    assert "emulator: " in done.stdout and "launches" in done.stdout


def test_the_counts_join_the_timed_rows_and_the_summary(tmp_path):
    timed = [
        {"method": m, "status": "ok", "ms_per_batch_median": ms, "medges_per_s_median": 10.0}
        for m, ms in (("gpu-pinned", 2.0), ("gpu-snapshot", 1.0), ("dgl-cpu", 9.0))
    ]
    (tmp_path / "sampling.json").write_text(json.dumps({"command": "x", "rows": timed}))
    counted = [
        {"method": "gpu-pinned", "status": "ok", "launches_per_batch": 31, "host_syncs_per_batch": 1},
        {"method": "gpu-snapshot", "status": "failed: boom"},
    ]
    (tmp_path / "launch_count.json").write_text(json.dumps({"rows": counted}))
    rows = gs.with_launch_counts(tmp_path)
    assert [(r["method"], r.get("launches_per_batch"), r.get("host_syncs_per_batch")) for r in rows] == [
        ("gpu-pinned", 31, 1),
        ("gpu-snapshot", None, None),
        ("dgl-cpu", None, None),
    ]
    assert json.loads((tmp_path / "sampling.json").read_text())["rows"][0]["launches_per_batch"] == 31  # written back
    assert "gpu-pinned 2.00 ms/batch, 10.0 M edges/s (31 launches, 1 host syncs a batch)" in gs.figures_text(rows)
    figures = gs.sampling_figures([{**r, "num_nodes": 10, "num_edges": 20, "fanouts": "15,10,5", "batch_size": 8} for r in rows])
    assert figures[0]["launches_per_batch"] == 31 and figures[2]["host_syncs_per_batch"] is None
    md = "\n".join(gs.sampling_markdown(figures))
    assert "Device operations per batch (bench/sampler/launch_count.py, one batch counted): gpu-pinned 31 launches, 1 host syncs." in md
    (tmp_path / "launch_count.json").unlink()  # the counting cut off: the rows stay as they were
    assert gs.with_launch_counts(tmp_path)[0]["launches_per_batch"] == 31
    assert gs.with_launch_counts(tmp_path / "none") == []
    assert gs.COUNTED_AS["reference"] == "emulator" and gs.COUNT_LIMIT["quick"] < 25
