"""``dgl-zerocopy train --dataset hetero-synthetic --model rgcn``: the generated heterograph
(data/hetero.py: papers, authors, fields; the labels planted in the typed neighbourhood) trained
through our DataLoader (seeds ``{"paper": ids}``, fanouts per edge type, a FeatureStore per node
type) and through DGL's (feature source ``dgl``); the refusals; ``--nproc``."""

from __future__ import annotations

import os
import pickle
import re

import numpy as np
import pytest
import torch
from script_runs import run_cli

pytest.importorskip("dgl")  # sampling is DGL's

from dgl_zerocopy.data import HeteroSpec, load_dataset  # noqa: E402
from dgl_zerocopy.data.hetero import generate_hetero  # noqa: E402
from dgl_zerocopy.loading.timing import StageTimer  # noqa: E402
from dgl_zerocopy.training.config import TrainConfig  # noqa: E402
from dgl_zerocopy.training.ddp import share_dataset  # noqa: E402
from dgl_zerocopy.training.sources import make_source  # noqa: E402
from dgl_zerocopy.training.train import _build, _logits  # noqa: E402

# 3,000 papers (1,200 authors, 64 fields), 6 epochs: about 2 s a run here. data/hetero.py's label
# signal at this size: a paper's own features give 0.32-0.37 (nearest class centre), one hop 0.69.
TINY = ["--dataset", "hetero-synthetic", "--num-nodes", "3000", "--batch-size", "64", "--epochs", "6", "--lr", "0.02"]
TINY += ["--fanouts", "5,5", "--hidden", "32", "--weight-decay", "5e-4", "--device", "cpu", "--no-progress"]
FEATURES_ONLY = 0.37  # the best a model reading only the paper's own features gets
FINAL = r"final test accuracy ([0-9.]+)"


@pytest.fixture(scope="module")
def hetero():
    return generate_hetero(HeteroSpec.scaled(600))


def _main(args: list[str], capsys) -> tuple[int, str, str]:
    from dgl_zerocopy.cli import main

    try:
        code = main(args)
    except SystemExit as exit_:  # argparse's errors
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.slow
def test_the_cli_trains_rgcn_above_the_features_only_baseline_and_as_dgls_loader_does(capsys, one_thread):
    """Our DataLoader (feature source cpu) and DGL's (dgl), seeds 0-3: every run well above what a
    paper's own features give (a type's features served wrong brings it back to that figure), and the
    two loaders' mean accuracies within 0.06 of each other.

    Why four seeds and a mean: one run's figure moves with DGL's sampling threads and the CPU's float
    paths, so a seed's figure differs between machines (seed 0's DGL run gave 0.73 on a CI machine, 0.67
    here). Measured here, seeds 0-15: ours 0.61-0.70, DGL's 0.62-0.72; a same-seed pair's difference has
    a spread (sd) of 0.026, which is the test set's own noise (600 papers at 0.66: binomial sd 0.019 a
    run). A single pair bounded by 0.08 is a 3-sd bound and failed once in CI (0.087); the mean of four
    pairs has sd 0.013, so 0.06 is a 4.5-sd bound, and a loader that loses 0.1 still fails it."""
    figures: dict[str, list[float]] = {"cpu": [], "dgl": []}
    for seed in range(4):
        for source in ("cpu", "dgl"):
            code, out, err = _main(["train", *TINY, "--seed", str(seed), "--feature-source", source], capsys)
            assert code == 0, err[-3000:]
            assert "hetero-synthetic: 1200 author, 64 field, 3000 paper" in out, out[:500]
            assert f"model rgcn, fanouts [5, 5] per edge type, batch 64, feature source {source}" in out
            assert "epoch_time" in out and "epoch   5 | loss" in out, "the timing table and a line per epoch"
            figures[source].append(float(re.search(FINAL, out).group(1)))
    assert min(figures["cpu"] + figures["dgl"]) > FEATURES_ONLY + 0.13, figures
    assert abs(np.mean(figures["cpu"]) - np.mean(figures["dgl"])) < 0.06, figures


def _batches(source, nodes, seed: int = 5) -> list:
    """The source's batches of ``nodes`` in order, DGL's neighbour draws seeded on this thread (our
    loader with prefetch 0 samples here too) and made with one thread (with more, DGL's draws are
    not reproducible even against themselves)."""
    import dgl

    threads = dgl.utils.get_num_threads()
    dgl.utils.set_num_threads(1)
    dgl.seed(seed)
    torch.manual_seed(seed)
    try:
        return list(source.batches(nodes, 100, shuffle=False, timer=StageTimer()))
    finally:
        source.close()
        dgl.utils.set_num_threads(threads)


def test_our_loader_serves_every_node_types_features_as_dgls_loader_does(hetero):
    """Shuffle off, the same DGL seed, prefetch 0: our source's batches are DGL's loader's (the same
    sampled ids of every type), with each type's features and the papers' labels equal to the tables."""
    cpu = torch.device("cpu")
    nodes = torch.from_numpy(hetero.val_idx)
    ours = _batches(make_source("cpu", hetero, [4, 3], cpu, prefetch=0), nodes)
    theirs = _batches(make_source("dgl", hetero, [4, 3], cpu), nodes)
    assert len(ours) == len(theirs) == -(-len(nodes) // 100)
    for (blocks, x, y), (their_blocks, their_x, their_y) in zip(ours, theirs):
        ids = blocks[0].srcdata["_ID"]
        assert set(x) == set(hetero.num_nodes) and set(ids) == set(hetero.num_nodes), "every node type's features"
        for ntype, rows in x.items():
            assert torch.equal(ids[ntype], their_blocks[0].srcdata["_ID"][ntype]), ntype
            assert torch.equal(rows, torch.from_numpy(hetero.features[ntype])[ids[ntype]]), ntype
            assert torch.equal(rows, their_x[ntype]), ntype
        output = blocks[-1].dstdata["_ID"]["paper"]
        assert torch.equal(y, torch.from_numpy(hetero.labels)[output]) and torch.equal(y, their_y)
    assert torch.equal(torch.cat([blocks[-1].dstdata["_ID"]["paper"] for blocks, _, _ in ours]), nodes)


def test_the_gpu_routes_device_blocks_give_the_same_logits_on_the_cpu(hetero):
    """On CUDA with PyPI's DGL the sources hand out HeteroDeviceBlocks (zerocopy, gpu): here on the
    CPU (``blocks="device"``) the RGCN of the training loop gives the logits it gives on DGL's blocks."""
    from dgl_zerocopy.loading.blocks import HeteroDeviceBlock
    from dgl_zerocopy.training.hetero_sources import HeteroStoreSource

    cpu, nodes = torch.device("cpu"), torch.from_numpy(hetero.test_idx)
    torch.manual_seed(0)
    model = _build(TrainConfig(dataset="hetero-synthetic", fanouts=[4, 3], hidden=16), hetero).eval()
    device_batches = _batches(HeteroStoreSource(hetero, [4, 3], cpu, blocks="device"), nodes)
    dgl_batches = _batches(HeteroStoreSource(hetero, [4, 3], cpu, blocks="dgl"), nodes)
    assert all(isinstance(b, HeteroDeviceBlock) for blocks, _, _ in device_batches for b in blocks)
    with torch.no_grad():
        for (blocks, x, y), (their_blocks, their_x, their_y) in zip(device_batches, dgl_batches):
            torch.testing.assert_close(_logits(model, blocks, x, "paper"), _logits(model, their_blocks, their_x, "paper"))
            assert torch.equal(y, their_y)


def test_compressed_features_are_one_store_per_node_type(hetero):
    source = make_source("cpu", hetero, [3], torch.device("cpu"), compression="fp16")
    assert set(source.stores) == {"author", "field", "paper"} and all(s.compression == "fp16" for s in source.stores.values())
    for blocks, x, _ in _batches(source, torch.from_numpy(hetero.train_idx[:200])):
        for ntype, rows in x.items():
            table = torch.from_numpy(hetero.features[ntype])[blocks[0].srcdata["_ID"][ntype]]
            torch.testing.assert_close(rows, table, atol=4e-3, rtol=4e-3)


REFUSED = {
    "sage on a heterograph": (["train", "--dataset", "hetero-synthetic", "--model", "sage"], "model 'sage' trains on homogeneous graphs, and dataset 'hetero-synthetic' is a heterograph; use --model rgcn"),
    "gcn on a heterograph": (["train", "--dataset", "hetero-synthetic", "--model", "gcn"], "model 'gcn' trains on homogeneous graphs"),
    "rgcn on a homogeneous graph": (["train", "--dataset", "cora", "--model", "rgcn"], "model 'rgcn' trains on heterographs, and dataset 'cora' is homogeneous"),
    "dgl-storage": (["train", "--dataset", "hetero-synthetic", "--feature-source", "dgl-storage"], "feature source 'dgl-storage' (DGL's loader with our storage hook) serves homogeneous graphs only"),
    "zerocopy on the cpu": (["train", "--dataset", "hetero-synthetic", "--feature-source", "zerocopy", "--device", "cpu"], "needs a CUDA GPU"),
    "a feature cache": (["train", "--dataset", "hetero-synthetic", "--feature-cache", "10%"], "feature_cache '10%': the hot-row cache ranks the rows of a homogeneous graph"),
    "self-loops": (["train", "--dataset", "hetero-synthetic", "--self-loop"], "self_loop adds a self-loop per node of a homogeneous graph"),
    "partition": (["partition", "--dataset", "hetero-synthetic", "--parts", "2", "--out", "unused"], "`partition` takes homogeneous datasets"),
    "train --dist": (["train", "--dataset", "hetero-synthetic", "--dist", "unused"], "`train --dist` takes homogeneous datasets"),
}  # fmt: skip


@pytest.mark.parametrize("args,message", REFUSED.values(), ids=REFUSED.keys())
def test_what_does_not_apply_to_a_heterograph_is_one_line_and_exit_2(args, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may be written ("unused" folders) before the refusal
    code, _, err = _main(args, capsys)
    assert code == 2, err
    assert message in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not list(tmp_path.iterdir())


def test_the_model_follows_the_graph_unless_told():
    from dgl_zerocopy.training.config import build_config

    assert build_config({}, {"dataset": "hetero-synthetic"}).model == "rgcn"
    assert build_config({}, {}).model == "sage"


def test_the_library_refuses_what_the_cli_refuses(hetero):
    from dgl_zerocopy.training.models import build_model
    from dgl_zerocopy.training.sources import CacheRequest

    cpu = torch.device("cpu")
    with pytest.raises(ValueError, match="'dgl-storage': DGL's storage hook marks homogeneous blocks only"):
        make_source("dgl-storage", hetero, [3], cpu)
    with pytest.raises(ValueError, match="hot-row cache ranks the rows of a homogeneous graph"):
        make_source("cpu", hetero, [3], cpu, cache=CacheRequest("10%"))
    with pytest.raises(ValueError, match="model 'rgcn' needs etypes"):
        build_model("rgcn", 4, 4, 2, 2, 0.0)


def test_num_nodes_counts_papers():
    data = load_dataset("hetero-synthetic", hetero=HeteroSpec.scaled(1000))
    assert data.num_nodes == {"author": 400, "field": 64, "paper": 1000} and len(data.labels) == 1000
    assert load_dataset("hetero-synthetic").num_nodes["paper"] == HeteroSpec().num_papers


def test_a_heterograph_goes_to_the_ranks_through_shared_memory(hetero):
    """--nproc: every array of the heterograph (each type's features, each relation's edges, the
    labels and splits) travels as shared memory, not pickled bytes, and opens equal to the original."""
    shared = share_dataset(hetero)
    assert shared.arrays["features"]["paper"].is_shared() and shared.arrays["edges"][("paper", "cites", "paper")][0].is_shared()
    assert shared.dataset.features == {} and shared.dataset.edges == {} and len(shared.dataset.labels) == 0
    assert len(pickle.dumps(shared.dataset)) < 2000
    opened = shared.open()
    assert opened.num_nodes == hetero.num_nodes and opened.target == "paper"
    for ntype, table in hetero.features.items():
        assert np.array_equal(opened.features[ntype], table)
    for key, (src, dst) in hetero.edges.items():
        assert np.array_equal(opened.edges[key][0], src) and np.array_equal(opened.edges[key][1], dst)
    assert np.array_equal(opened.train_idx, hetero.train_idx)


@pytest.mark.slow  # two gloo ranks started (~15-30 s on shared cores)
def test_nproc_2_trains_the_heterograph():
    """``--nproc 2`` (gloo ranks on the CPU, find_unused_parameters for the relations the last layer
    leaves unused): the same bound as one process (measured 0.66, one process 0.66)."""
    run = run_cli("train", *TINY, "--nproc", "2", env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert "2 processes (DDP, gloo on the CPU)" in run.stdout
    assert float(re.search(FINAL, run.stdout).group(1)) > FEATURES_ONLY + 0.13, run.stdout[-2000:]
