"""bench/training/papers_epoch.py's dry run: every route on the CPU stand-ins, each first batch checked, the results written."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path[:0] = [str(BENCH / "training"), str(BENCH / "gpu_check")]

import gpu_check_main as gpu_check  # noqa: E402
import papers_epoch  # noqa: E402
from gpu_check_papers import PAPERS_ARGS, PAPERS_LIMIT, judge_papers, papers_part  # noqa: E402
from gpu_check_setup import Part, Run, child_env  # noqa: E402
from papers_check import Regenerated  # noqa: E402

pytest.importorskip("dgl")
FRACTION = "0.0003"  # 33,318 nodes: one generator block, about 360 training seeds (the damage tests)
CHECKS = ("check_rows", "check_rows_regenerated", "check_labels", "check_edges", "check_edges_regenerated")


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """The gpu-check step without CUDA: the script's dry run in a subprocess, bounded by the step's limit."""
    folder = tmp_path_factory.mktemp("papers")
    part, output = papers_part(child_env(None), PAPERS_LIMIT, folder, cuda=False)
    return part, output, folder / "papers_epoch"


@pytest.mark.slow
def test_every_route_runs_and_checks_its_first_batch(dry_run):
    part, output, out = dry_run
    rows = json.loads(out.with_suffix(".json").read_text())["rows"]
    assert part.status == "ok", (part, output[-3000:])
    assert part.reason.startswith("5 routes, each first batch checked: a ") and part.reason.endswith("(dry run on the CPU stand-ins: no GPU figures)")
    assert (
        part.details["command"] == "python3 bench/training/papers_epoch.py " + " ".join(PAPERS_ARGS["cpu"]) + f" --time-limit {PAPERS_LIMIT - 150} --out {out}"
    )
    assert set(part.details["ratios"]) == {"d_over_b", "b8_over_a"} and all(v > 0 for v in part.details["ratios"].values())
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


def _row(route: str, status: str = "ok", epoch: float = 2.0) -> dict:
    return {"route": route, "status": status, "epoch_s": epoch, "test_acc": 0.5, "note": ""}


def test_the_step_judges_its_rows():
    rows = [_row("a", epoch=1.0), _row("b", epoch=2.0), _row("b8", epoch=1.1), _row("c"), _row("d", epoch=9.0)]
    ok = judge_papers(Run(0, "", 200.0), rows, PAPERS_LIMIT)
    assert ok.status == "ok" and "d/b 4.50 (goal >= 4)" in ok.reason and "b8/a 1.10 (goal <= 1.25)" in ok.reason
    failed = judge_papers(Run(1, "", 50.0), [*rows[:4], _row("d", "failed: AssertionError: a seed's label differs from the generator's")], PAPERS_LIMIT)
    assert failed.status == "failed" and "d: failed: AssertionError" in failed.reason
    partial = judge_papers(Run(0, "", 280.0), [*rows[:4], _row("d", "skipped: time limit")], PAPERS_LIMIT)
    assert partial.status == "partial" and partial.reason.endswith("d skipped: time limit") and partial.details["ratios"]["d_over_b"] is None
    assert judge_papers(Run(None, "generating", PAPERS_LIMIT), [], PAPERS_LIMIT).status == "failed"  # killed before any route
    assert judge_papers(Run(None, "", PAPERS_LIMIT), rows[:2], PAPERS_LIMIT).status == "partial"  # killed with rows kept


def test_the_check_runs_the_step_by_name_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("DGL_ZEROCOPY_GPU_CHECK_ON_CPU", "1")
    monkeypatch.setattr(sys, "path", list(sys.path))
    asked = []
    monkeypatch.setattr(gpu_check, "papers_part", lambda env, limit, out, cuda: asked.append(limit) or (Part("papers", "ok", "5 routes", 1.0, limit=limit), ""))
    (tmp_path / "whl").mkdir()
    argv = ["--out", str(tmp_path / "out"), "--wheels", str(tmp_path / "whl"), "--site", str(tmp_path / "site")]
    assert gpu_check.main([*argv, "--parts", "papers"]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert asked == [PAPERS_LIMIT] and summary["time_limit_s"] == gpu_check.FULL_TOTAL_LIMIT
    assert [p["status"] for p in summary["parts"] if p["name"] == "papers"] == ["ok"]
    assert "papers" not in gpu_check.PARTS  # never in the default pass
    with pytest.raises(SystemExit):
        gpu_check.main([*argv, "--parts", "papers,gather"])


def test_each_route_names_what_it_runs_on():
    assert papers_epoch.route_config("b", cuda=True, dgl_cuda=False) == ({"feature_source": "zerocopy", "sampler": "gpu"}, "")
    assert papers_epoch.route_config("a", cuda=True, dgl_cuda=False)[0] == {"feature_source": "gpu", "sampler": "gpu", "graph_placement": "device"}
    assert papers_epoch.route_config("b8", cuda=True, dgl_cuda=False)[0]["feature_compression"] == "int8"
    assert papers_epoch.route_config("c", cuda=True, dgl_cuda=False)[0]["frontend"] == "pyg"
    keys, note = papers_epoch.route_config("d", cuda=True, dgl_cuda=False)  # PyPI's DGL: our CPU route, named as such
    assert keys == {"feature_source": "cpu", "sampler": "cpu"} and note.startswith("our CPU route")
    assert papers_epoch.route_config("d", cuda=True, dgl_cuda=True) == ({"feature_source": "dgl", "sampler": "cpu"}, "DGL's own DataLoader")
    keys, note = papers_epoch.route_config("a", cuda=False, dgl_cuda=False)
    assert keys == {"feature_source": "cpu", "sampler": "gpu"} and "not a GPU figure" in note
