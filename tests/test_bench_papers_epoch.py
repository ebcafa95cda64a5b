"""bench/training/papers_epoch.py's dry run: every route on the CPU stand-ins, each first batch checked, the results written."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

BENCH = Path(__file__).resolve().parents[1] / "bench" / "training"
sys.path.insert(0, str(BENCH))

import papers_epoch  # noqa: E402
from papers_check import Regenerated  # noqa: E402

pytest.importorskip("dgl")
FRACTION = "0.0003"  # 33,318 nodes: one generator block, about 360 training seeds
CHECKS = ("check_rows", "check_rows_regenerated", "check_labels", "check_edges", "check_edges_regenerated")


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("papers") / "papers_epoch"
    code = papers_epoch.main(["--fraction", FRACTION, "--device", "cpu", "--epochs", "2", "--workers", "2", "--out", str(out)])
    return code, out


def test_every_route_runs_and_checks_its_first_batch(dry_run):
    code, out = dry_run
    rows = json.loads(out.with_suffix(".json").read_text())["rows"]
    assert code == 0, [r["status"] for r in rows]
    assert [r["route"] for r in rows] == list(papers_epoch.ROUTES)
    for r in rows:
        assert r["status"] == "ok", r
        for key in papers_epoch.FIELDS:
            assert key in r, (r["route"], key)
        for key in CHECKS:
            assert r[key] > 0, (r["route"], key)  # the check read rows, labels and edges of the table and the generator
        assert r["epoch_s"] > 0 and 0.0 <= r["wait_share"] <= 1.0 and 0.0 <= r["test_acc"] <= 1.0 and r["host_peak_gb"] > 0
        assert "stand-in" in r["note"] or r["route"] == "d"  # no CPU figure passes for a GPU one
    assert rows[-1]["note"] == "DGL's own DataLoader"
    header = out.with_suffix(".csv").read_text().splitlines()
    assert header[0].startswith("# command: ") and "papers_epoch.py" in header[0]
    assert out.with_suffix(".png").stat().st_size > 0


def test_plan_only_prints_the_estimate_and_runs_nothing(tmp_path, capsys):
    assert papers_epoch.main(["--fraction", "0.25", "--plan-only", "--workers", "16", "--out", str(tmp_path / "p")]) == 0
    line = capsys.readouterr().out
    assert "27,764,989 nodes" in line and "estimated" in line and "14.2 GB of features" in line
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("damage", ["feature", "label"])
def test_a_damaged_table_fails_the_first_batch_check(damage):
    from dgl_zerocopy.data.papers_disk import papers100m_spec
    from dgl_zerocopy.data.papers_memory import generate_in_memory
    from dgl_zerocopy.training.config import TrainConfig

    cfg = TrainConfig(dataset="synthetic", feature_source="cpu", sampler="cpu", device="cpu", epochs=1)
    with generate_in_memory(papers100m_spec(float(FRACTION)), workers=1) as graph:
        seed = int(graph.dataset.train_idx[0])  # the first batch's first seed: always among its input nodes
        regenerated = Regenerated(graph.layout)
        assert papers_epoch.first_batch(cfg, graph, torch.device("cpu"), regenerated)["rows"] > 0  # intact: it passes
        if damage == "feature":
            graph.dataset.features[seed, 3] += np.float32(0.5)  # the loader reads the table as it is: only the generator tells
        else:
            graph.dataset.labels[seed] = (graph.dataset.labels[seed] + 1) % graph.dataset.num_classes
        with pytest.raises(AssertionError, match="generator"):
            papers_epoch.first_batch(cfg, graph, torch.device("cpu"), regenerated)


def test_bad_arguments_are_refused(capsys):
    for argv, said in ((["--routes", "a,z"], "unknown route 'z'"), (["--fraction", "2"], "--fraction must be in")):
        with pytest.raises(SystemExit):
            papers_epoch.main(argv)
        assert said in capsys.readouterr().err
