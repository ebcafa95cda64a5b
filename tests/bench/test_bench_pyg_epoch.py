"""bench/training/pyg_epoch.py: its arguments, its first-batch check, its rows (PyG's own loader skipped with the
ImportError a PyPI install gives), and a smoke run of every route through ``dgl-zerocopy bench pyg_epoch`` (slow tier)."""

import json
import os
import sys

import numpy as np
import pytest
import torch
from conftest import REPO
from script_runs import run_bench

pytest.importorskip("torch_geometric")
sys.path.insert(0, str(REPO / "bench" / "training"))
import pyg_epoch  # noqa: E402

TINY = ["--num-nodes", "600", "--batch-size", "16", "--epochs", "2", "--max-batches", "2", "--hidden", "8"]


def _has_pyg_sampler() -> bool:
    try:
        import pyg_lib  # noqa: F401
    except ImportError:
        try:
            import torch_sparse  # noqa: F401
        except ImportError:
            return False
    return True


def test_spread_stays_within_the_values():
    s = pyg_epoch.spread([1.0, 3.0])
    assert (s["median"], s["q1"], s["q3"], s["min"], s["max"]) == (2.0, 1.5, 2.5, 1.0, 3.0)
    assert pyg_epoch.spread([4.0])["q1"] == 4.0


def test_the_first_batch_check_catches_a_wrong_row(tmp_path, monkeypatch):
    monkeypatch.setenv("DGL_ZEROCOPY_CACHE", str(tmp_path / "cache"))
    from dgl_zerocopy.data import SyntheticSpec, load_dataset

    dataset = load_dataset("synthetic", synthetic=SyntheticSpec(num_nodes=400))
    args = pyg_epoch.parse_args(["--batch-size", "8"])
    graphs = {}
    loader = pyg_epoch.build_loader("pyg", dataset, graphs, args, torch.device("cpu"), 0)
    assert pyg_epoch.check_first("pyg", loader, dataset, torch.device("cpu")).startswith("batch 0: seeds first")
    wrong = graphs["pyg"].clone()
    wrong.x = wrong.x + 1
    loader = pyg_epoch.build_loader("pyg", dataset, {"pyg": wrong}, args, torch.device("cpu"), 0)
    with pytest.raises(AssertionError, match="pyg: a feature row differs"):
        pyg_epoch.check_first("pyg", loader, dataset, torch.device("cpu"))
    loader.close()


def test_our_pyg_route_is_measured_and_pyg_own_says_why_not(tmp_path, monkeypatch):
    """In-process, the PyG routes only (no DGL needed): a row per prefetch, figures that add up, files written."""
    monkeypatch.setenv("DGL_ZEROCOPY_CACHE", str(tmp_path / "cache"))
    stem = tmp_path / "out" / "pe"
    code = pyg_epoch.main([*TINY, "--routes", "pyg,pyg-own", "--prefetch", "0,1", "--model", "sage", "--out", str(stem)])
    assert code == 0
    data = json.loads(stem.with_suffix(".json").read_text())
    rows = data["rows"]
    assert [(r["route"], r["prefetch"]) for r in rows] == [("pyg", 0), ("pyg", 1), ("pyg-own", "-")]
    for r in rows[:2]:
        raw = data["raw"][f"pyg prefetch {r['prefetch']}"]
        assert r["status"] == "ok" and r["model"] == "sage" and r["checked"].startswith("batch 0:")
        assert raw["batches"] == [2, 2] and r["batches_per_epoch"] == 2 and r["epoch_s_median"] == raw["seconds"][1]
        assert r["edges_per_batch"] == raw["edges"][1] / 2 > 0 and np.isnan(r["x_dgl"])
        assert len(raw["batch_seconds"]) == 2 and r["batch_ms_q1"] <= r["batch_ms_median"] <= r["batch_ms_q3"]
    if _has_pyg_sampler():
        assert rows[2]["status"] == "ok"
    else:
        assert rows[2]["status"] == "skipped: ImportError: 'NeighborSampler' requires either 'pyg-lib' or 'torch-sparse'"
    assert data["meta"]["device"].startswith("cpu (no GPU")
    assert all(stem.with_suffix(s).stat().st_size > 0 for s in (".csv", ".json", ".png"))


def test_a_time_limit_already_spent_skips_every_route(tmp_path, monkeypatch):
    monkeypatch.setenv("DGL_ZEROCOPY_CACHE", str(tmp_path / "cache"))
    stem = tmp_path / "pe"
    assert pyg_epoch.main([*TINY, "--routes", "pyg", "--prefetch", "0", "--time-limit", "1e-9", "--out", str(stem)]) == 0
    rows = json.loads(stem.with_suffix(".json").read_text())["rows"]
    assert [(r["route"], r["status"]) for r in rows] == [("pyg", pyg_epoch.TIME_LIMIT_STATUS)]


@pytest.mark.slow
def test_smoke_run_of_every_route_through_the_cli(tmp_path):
    pytest.importorskip("dgl")
    stem = tmp_path / "out" / "pyg_epoch"
    args = [*TINY, "--num-nodes", "2000", "--model", "sage", "--prefetch", "0,2"]
    env = {**os.environ, "DGL_ZEROCOPY_CACHE": str(tmp_path / "cache"), "MPLBACKEND": "Agg"}
    r, data = run_bench("pyg_epoch", *args, out=stem, env=env)
    assert data["meta"]["command"].endswith("pyg_epoch.py " + " ".join(args) + f" --out {stem}")
    rows = {(row["route"], row["prefetch"]): row for row in data["rows"]}
    ours = [("pyg", 0), ("pyg", 2), ("dgl-route", 0), ("dgl-route", 2)]
    assert list(rows) == [*ours, ("dgl", "-"), ("pyg-own", "-")]
    assert all(rows[k]["status"] == "ok" and rows[k]["edges_per_batch"] > 0 and rows[k]["nodes_per_batch"] > 16 for k in [*ours, ("dgl", "-")])
    assert rows[("dgl", "-")]["x_dgl"] == 1.0 and rows[("pyg", 0)]["x_dgl"] > 0
    # DGL samples every node of the layer before again, PyG each node once: fewer edges in a PyG batch.
    assert rows[("pyg", 0)]["edges_per_batch"] < rows[("dgl", "-")]["edges_per_batch"]
    assert "| pyg | 0 |" in r.stdout and "| dgl | - |" in r.stdout
    assert all(stem.with_suffix(s).stat().st_size > 0 for s in (".csv", ".json", ".png"))
