"""The PyG route of the training loop (training/pyg_train.py; ``dgl-zerocopy train --frontend pyg``): GraphSAGE of
PyG's SAGEConv computes the DGL route's function, learns through our PyG loader and reports as the DGL route does;
what the route cannot do is refused in one line; without PyG the CLI names the extra, and the DGL route trains; without
DGL the PyG route trains."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
import torch
from conftest import REPO

pytest.importorskip("torch_geometric")

from dgl_zerocopy.cli import main  # noqa: E402
from dgl_zerocopy.training.config import ConfigError, build_config  # noqa: E402
from dgl_zerocopy.training.pyg_train import PygGraphSAGE, adjacency, train_pyg  # noqa: E402
from dgl_zerocopy.training.train import best_epoch, train  # noqa: E402

# Hides PyG from a process (``import torch_geometric`` raises ModuleNotFoundError naming it), before anything imports it.
WITHOUT_PYG = "import sys; sys.modules['torch_geometric'] = None\n"
TINY = ["--num-nodes", "1500", "--fanouts", "4,4", "--batch-size", "128", "--hidden", "16", "--epochs", "1", "--no-progress", "--device", "cpu"]


def _pyg_run(**overrides):
    values = {"frontend": "pyg", "device": "cpu", "fanouts": "5,5", "batch_size": 64, "hidden": 32, "lr": 0.01, "epochs": 3, "prefetch": 0}
    return build_config({}, {**values, **overrides})


def test_pyg_sage_computes_the_dgl_routes_graphsage(small_dataset):
    """With the DGL route's weights copied in (fc_neigh -> lin_l, fc_self's bias -> lin_l's, fc_self -> lin_r), PyG's
    SAGEConv layers over the whole graph give the DGL route's logits of full-neighbourhood blocks: the same function."""
    pytest.importorskip("dgl")  # the DGL route's blocks
    from dgl_zerocopy.loading.timing import StageTimer
    from dgl_zerocopy.pyg.datasets import to_pyg
    from dgl_zerocopy.training.models import GraphSAGE
    from dgl_zerocopy.training.sources import make_source

    ds = small_dataset
    torch.manual_seed(0)
    theirs = GraphSAGE(ds.features.shape[1], 24, ds.num_classes, num_layers=2, dropout=0.5).eval()
    ours = PygGraphSAGE(ds.features.shape[1], 24, ds.num_classes, num_layers=2, dropout=0.5).eval()
    with torch.no_grad():
        for conv, layer in zip(ours.convs, theirs.layers):
            conv.lin_l.weight.copy_(layer.fc_neigh.weight)
            conv.lin_l.bias.copy_(layer.fc_self.bias)
            conv.lin_r.weight.copy_(layer.fc_self.weight)
    seeds = torch.from_numpy(ds.test_idx[:200])
    source = make_source("cpu", ds, [-1, -1], torch.device("cpu"))
    try:
        blocks, x, _ = next(iter(source.batches(seeds, len(seeds), False, StageTimer())))
        expected = theirs(blocks, x.float())
    finally:
        source.close()
    data = to_pyg(ds)
    with torch.no_grad():
        got = ours(data.x, adjacency(data.edge_index, data.num_nodes))[seeds]
        by_edge_index = ours(data.x, data.edge_index)[seeds]  # PyG's message passing: the same means
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(by_edge_index, expected, rtol=1e-4, atol=1e-4)


def test_the_pyg_route_learns_and_reports_as_the_dgl_route(small_dataset):
    """One EpochStats per epoch, the DGL route's stages, epochs skipped by eval_every as NaN, and accuracy well
    above chance (5 classes: 0.2)."""
    seen = []
    history = train_pyg(_pyg_run(epochs=4, eval_every=2), small_dataset, on_epoch=seen.append, progress=False)
    assert [h.epoch for h in history] == [0, 1, 2, 3] and seen == history
    assert math.isnan(history[0].val_acc) and math.isnan(history[2].test_acc)
    assert set(history[-1].stages) >= {"sample", "gather", "compute", "wait"}
    assert history[-1].stages["compute"] > 0 and history[-1].stages["sample"] > 0
    assert history[-1].loss < history[0].loss
    assert best_epoch(history).test_acc > 0.5, [h.line() for h in history]


def test_a_seed_gives_the_same_run_and_prefetch_trains(small_dataset):
    """``seed`` reproduces a serial run (prefetch 0). With batches sampled ahead on the loader's thread (prefetch 2)
    the run trains too, but is not reproduced draw for draw: the sampler and the step's dropout take turns at torch's
    generator in the order the threads reach it (so it is on the DGL route)."""
    serial = [h.loss for h in train_pyg(_pyg_run(epochs=2), small_dataset, progress=False)]
    again = [h.loss for h in train_pyg(_pyg_run(epochs=2), small_dataset, progress=False)]
    ahead = [h.loss for h in train_pyg(_pyg_run(epochs=2, prefetch=2), small_dataset, progress=False)]
    assert serial == again
    assert ahead[-1] < ahead[0]


def test_compressed_features_train_through_the_store(small_dataset):
    history = train_pyg(_pyg_run(epochs=2, feature_compression="fp16"), small_dataset, progress=False)
    assert len(history) == 2 and history[-1].loss < history[0].loss


@pytest.mark.parametrize(
    "overrides,names",
    [
        ({"model": "gcn"}, ["model 'gcn'", "--model sage"]),
        ({"feature_source": "dgl"}, ["feature source 'dgl'", "--feature-source cpu"]),
        ({"feature_source": "dgl-storage"}, ["feature source 'dgl-storage'"]),
        ({"sampler": "snapshot"}, ["sampler 'snapshot'", "--sampler cpu or gpu"]),
        ({"feature_cache": "10%"}, ["feature_cache '10%'", "--feature-cache"]),
        ({"feature_storage": "auto", "host_buffer": "50%"}, ["feature_storage 'auto'", "--feature-storage"]),
        ({"nproc": 2}, ["nproc 2", "--nproc 1"]),
    ],
)
def test_what_the_pyg_route_cannot_do_is_refused_in_one_line(overrides, names):
    with pytest.raises(ConfigError) as refused:
        build_config({}, {"frontend": "pyg", **overrides})
    message = str(refused.value)
    assert message.startswith("frontend 'pyg' trains with") and "--frontend dgl" in message and "\n" not in message, message
    for name in names:
        assert name in message, message


def test_the_dgl_routes_loop_refuses_a_pyg_config(small_dataset):
    with pytest.raises(ValueError, match="train_pyg"):
        train(_pyg_run(), small_dataset)


def test_an_unknown_frontend_names_the_choices():
    with pytest.raises(ConfigError, match="frontend"):
        build_config({}, {"frontend": "jax"})


def test_the_cli_trains_through_the_pyg_route(capsys):
    assert main(["train", "--frontend", "pyg", *TINY]) == 0
    out = capsys.readouterr().out
    assert "model sage of PyG's SAGEConv through dgl_zerocopy.pyg.NeighborLoader, fanouts [4, 4], batch 128" in out
    assert "epoch   0 | loss" in out and "final test accuracy" in out


def _python(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, encoding="utf-8", timeout=300)


def test_without_pyg_the_cli_names_the_extra_in_one_line():
    r = _python(WITHOUT_PYG + "from dgl_zerocopy.cli import main\nsys.exit(main(['train', '--frontend', 'pyg', '--epochs', '1']))\n")
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip() == (
        'dgl-zerocopy: error: dgl-zerocopy train --frontend pyg needs PyG (torch-geometric), which is not installed: pip install "dgl-zerocopy[pyg]"'
    ), r.stderr
    assert r.stdout == ""  # refused before the dataset loads


@pytest.mark.slow
def test_without_pyg_the_dgl_route_trains():
    pytest.importorskip("dgl")
    code = (
        WITHOUT_PYG
        + "from dgl_zerocopy.cli import main\nrc = main(['train', *sys.argv[1:]])\nassert 'torch_geometric' not in [m.split('.')[0] for m in sys.modules if sys.modules[m] is not None]\nsys.exit(rc)\n"
    )
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", code, *TINY], cwd=REPO, env=env, capture_output=True, text=True, encoding="utf-8", timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert "final test accuracy" in r.stdout


@pytest.mark.slow
def test_without_dgl_the_pyg_route_trains():
    code = (
        "import sys; sys.modules['dgl'] = None\n"
        "from dgl_zerocopy.cli import main\n"
        "rc = main(['train', '--frontend', 'pyg', *sys.argv[1:]])\n"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'dgl' and sys.modules[m] is not None]\n"
        "sys.exit(rc)\n"
    )
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", code, *TINY], cwd=REPO, env=env, capture_output=True, text=True, encoding="utf-8", timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert "final test accuracy" in r.stdout
