"""bench/sampler/snapshot.py: its correctness check, and a smoke run at a tiny size written to a temporary
folder (never bench/results/)."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import REPO
from script_runs import run_bench, run_python

sys.path.insert(0, str(REPO / "bench" / "sampler"))


def test_the_speed_check_rejects_a_wrong_batch():
    dgl = pytest.importorskip("dgl")
    import torch
    from snapshot_speed import check_batch, products_graph, samplers

    g = products_graph(2000)
    seeds = torch.arange(64)
    for sampler in samplers().values():
        check_batch(g, seeds, sampler.sample(g, seeds))  # passes: real edges, min(deg, fanout) each
    input_nodes, output_nodes, blocks = samplers()["snapshot r=0.25"].sample(g, seeds)
    blocks[0].edata[dgl.EID] = blocks[0].edata[dgl.EID].flip(0)
    with pytest.raises(SystemExit, match="not the graph's edge"):
        check_batch(g, seeds, (input_nodes, output_nodes, blocks))


@pytest.mark.slow  # subprocesses: the bench, and one per sampler for its memory
def test_snapshot_bench_smoke(tmp_path):
    pytest.importorskip("dgl")
    args = ["--parts", "speed,accuracy", "--nodes", "3000", "--batch-size", "64", "--repeats", "2"]
    args += ["--datasets", "synthetic", "--synthetic-nodes", "1000", "--synthetic-epochs", "2", "--seeds", "1", "--refresh", "0,1"]
    args += ["--hidden", "8", "--out-dir", tmp_path]
    r, result = run_bench("bench/sampler/snapshot.py", *args, results=tmp_path / "snapshot_speed.json")
    speed = result["rows"]
    assert [row["sampler"] for row in speed] == ["neighbor", "snapshot r=0.25", "snapshot r=0.25 K=15", "snapshot r=0", "snapshot r=1"]
    for row in speed:
        assert 0 < row["epoch_s_min"] <= row["epoch_s_median"] <= row["epoch_s_max"], row
        assert row["ratio_to_neighbor_min"] <= row["ratio_to_neighbor_median"] <= row["ratio_to_neighbor_max"], row
        assert row["edges_per_epoch"] > 0 and row["full_csc_mib"] > 0, row
    snap = speed[2]
    assert 0 < snap["snapshot_mib"] < snap["state_mib"] and snap["snapshot_over_full_csc"] < 1, snap
    accuracy = json.loads((tmp_path / "snapshot_accuracy.json").read_text())["rows"]
    assert [row["sampler"] for row in accuracy] == ["neighbor", "snapshot r=0", "snapshot r=1"]
    assert all(0 <= row["test_acc_mean"] <= 1 for row in accuracy)
    for stem in ("snapshot_speed", "snapshot_accuracy"):
        assert (tmp_path / f"{stem}.png").stat().st_size > 0 and (tmp_path / f"{stem}.csv").stat().st_size > 0
    assert "| snapshot r=1 |" in r.stdout


def test_bad_arguments_are_refused(tmp_path):
    r = run_python("bench/sampler/snapshot.py", "--parts", "speed,magic", "--out-dir", tmp_path)
    assert r.returncode == 2 and "--parts must name speed and/or accuracy, but got 'speed,magic'" in r.stderr
