"""``train --sampler snapshot --snapshot-size K --snapshot-refresh R`` (config keys ``sampler: snapshot``,
``snapshot_size``, ``snapshot_refresh``): the keys parse and are checked, every
feature source trains from one SnapshotSampler refreshed once per epoch (evaluation samples the full
graph), and the accuracy stays near DGL's sampler's. The refusals through ``main`` are in
``tests/training/test_cli.py``'s ``BAD``."""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("dgl")  # training samples with DGL

from dgl_zerocopy.cli import _parser, main
from dgl_zerocopy.loading.timing import StageTimer
from dgl_zerocopy.sampling import SnapshotSampler
from dgl_zerocopy.training.config import ConfigError, TrainConfig, build_config, read_yaml
from dgl_zerocopy.training.sources import DEFAULT_SNAPSHOT_REFRESH, SamplerRequest, make_source
from dgl_zerocopy.training.train import train

TINY = ["--num-nodes", "1500", "--fanouts", "4,4", "--batch-size", "128", "--hidden", "16", "--epochs", "1", "--no-progress", "--device", "cpu"]


def _flags(*argv: str) -> dict:
    args = _parser().parse_args(["train", *argv])
    return {k: v for k, v in vars(args).items() if k not in ("command", "config", "no_progress", "dist", "ip_config")}


# -- the keys -------------------------------------------------------------------------------------


def test_the_flags_and_the_yaml_keys_give_the_same_request(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("sampler: snapshot\nfanouts: 10,5\nsnapshot-size: 12\nsnapshot_refresh: 0.1\n")
    from_file = build_config(read_yaml(path), {})
    from_flags = build_config({}, _flags("--sampler", "snapshot", "--fanouts", "10,5", "--snapshot-size", "12", "--snapshot-refresh", "0.1"))
    assert from_file == from_flags
    assert SamplerRequest.of(from_file) == SamplerRequest("snapshot", "pinned", 12, 0.1)
    # flags override the file's keys
    assert SamplerRequest.of(build_config(read_yaml(path), _flags("--snapshot-refresh", "1"))).refresh == 1.0


def test_unset_keys_take_the_samplers_defaults():
    cfg = build_config({}, _flags("--sampler", "snapshot"))
    assert (cfg.snapshot_size, cfg.snapshot_refresh) == (None, None)
    request = SamplerRequest.of(cfg)
    assert request == SamplerRequest("snapshot", "pinned", None, DEFAULT_SNAPSHOT_REFRESH) and DEFAULT_SNAPSHOT_REFRESH == 0.25
    sampler = request.snapshot_sampler(cfg.fanouts)
    assert isinstance(sampler, SnapshotSampler)
    assert (sampler.snapshot_size, sampler.refresh) == (2 * max(cfg.fanouts), 0.25)  # SnapshotSampler's own defaults
    assert TrainConfig().sampler == "cpu"


@pytest.mark.parametrize(
    "values,message",
    [
        ({"snapshot_size": 20}, "snapshot_size set the snapshot sampler, but sampler is 'cpu'; add --sampler snapshot, or drop --snapshot-size"),
        ({"sampler": "gpu", "snapshot_refresh": 0.5}, "snapshot_refresh set the snapshot sampler, but sampler is 'gpu'"),
        ({"sampler": "snapshot", "fanouts": [10, 5], "snapshot_size": 9}, "snapshot_size 9 is below the largest fanout 10"),
        ({"sampler": "snapshot", "snapshot_size": 0}, "snapshot_size 0 is below the largest fanout 15"),
        ({"sampler": "snapshot", "snapshot_refresh": 1.5}, "snapshot_refresh 1.5 must be a share in [0, 1]"),
        ({"sampler": "snapshot", "snapshot_refresh": -0.1}, "snapshot_refresh -0.1 must be a share in [0, 1]"),
        ({"sampler": "snapshot", "fanouts": [10, -1]}, "sampler 'snapshot' keeps a few in-edges per node and cannot give all of them (fanout -1"),
        ({"sampler": "snapshot", "dataset": "hetero-synthetic"}, "sampler 'snapshot' samples homogeneous graphs, and dataset 'hetero-synthetic'"),
        ({"sampler": "snapshot", "snapshot_size": "ten"}, "snapshot_size: Input should be a valid integer"),
        ({"sampler": "tpu"}, "sampler: Input should be 'cpu', 'gpu' or 'snapshot'"),
    ],
)
def test_bad_keys_are_one_line_config_errors(values, message):
    with pytest.raises(ConfigError) as error:
        build_config(values, {})
    assert message in str(error.value) and "\n" not in str(error.value)


def test_the_edge_values_are_accepted():
    for refresh in (0.0, 1.0):
        assert build_config({"sampler": "snapshot", "fanouts": [10, 5], "snapshot_size": 10, "snapshot_refresh": refresh}, {}).snapshot_refresh == refresh


# -- the sources ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["cpu", "dgl", "dgl-storage"])
def test_every_source_trains_from_one_snapshot_refreshed_once_per_epoch(small_dataset, name):
    """Training (shuffled) batches: the source's SnapshotSampler, refreshed once per epoch (our
    DataLoader's hook, or the source for DGL's loader), its first epoch building it; with refresh 0 every
    training edge is one of the snapshot's. Evaluation (unshuffled) batches neither use nor refresh it."""
    torch.manual_seed(0)
    nodes = torch.from_numpy(small_dataset.train_idx)
    features = torch.from_numpy(small_dataset.features)
    source = make_source(name, small_dataset, [4, 3], torch.device("cpu"), sampling=SamplerRequest("snapshot", snapshot_size=5, refresh=0.5))
    try:
        for epoch in range(3):
            for blocks, x, _ in source.batches(nodes, 256, True, StageTimer()):
                torch.testing.assert_close(x, features[blocks[0].srcdata["_ID"]], rtol=0, atol=0)
            if epoch == 0:
                sampler = source.snapshot_sampler
                assert isinstance(sampler, SnapshotSampler) and (sampler.snapshot_size, sampler.refresh) == (5, 0.5)
                partial = int((small_dataset.to_dgl(with_data=False).in_degrees() > 5).sum())
                assert partial > 0 and sampler.nodes_refreshed == 0  # built, not refreshed
        assert source.snapshot_sampler is sampler
        assert sampler.nodes_refreshed == 2 * math.ceil(0.5 * partial)  # epochs 1 and 2
        for _ in source.batches(torch.from_numpy(small_dataset.val_idx), 256, False, StageTimer()):
            pass
        assert sampler.nodes_refreshed == 2 * math.ceil(0.5 * partial), "evaluation refreshed the snapshot"
    finally:
        source.close()


def test_our_loaders_source_samples_the_snapshot_on_the_gpu_sampler_where_it_has_one(small_dataset, monkeypatch):
    """On a CUDA device (here the GPU sampler's CPU stand-in) the training batches come from
    GpuSnapshotSampler (the snapshot in device memory), evaluation from the full graph; rows exact."""
    from dgl_zerocopy.loading.gpu_sampling import emulate_on_cpu
    from dgl_zerocopy.sampling import GpuSnapshotSampler

    calls = []
    sample_blocks = GpuSnapshotSampler.sample_blocks
    monkeypatch.setattr(GpuSnapshotSampler, "sample_blocks", lambda self, *a, **k: calls.append(1) or sample_blocks(self, *a, **k))
    features = torch.from_numpy(small_dataset.features)
    with emulate_on_cpu("reference"):
        source = make_source("cpu", small_dataset, [4, 3], torch.device("cpu"), sampling=SamplerRequest("snapshot", snapshot_size=4, refresh=0.0))
        try:
            train_batches = 0
            for blocks, x, _ in source.batches(torch.from_numpy(small_dataset.train_idx), 256, True, StageTimer()):
                torch.testing.assert_close(x, features[blocks[0].srcdata["_ID"].long()], rtol=0, atol=0)
                train_batches += 1
            assert len(calls) == train_batches > 0
            for _ in source.batches(torch.from_numpy(small_dataset.val_idx), 256, False, StageTimer()):
                pass
            assert len(calls) == train_batches, "evaluation sampled from the snapshot"
        finally:
            source.close()


def test_a_static_snapshot_gives_only_its_own_edges(small_dataset):
    source = make_source("cpu", small_dataset, [4, 3], torch.device("cpu"), sampling=SamplerRequest("snapshot", snapshot_size=4, refresh=0.0))
    try:
        nodes = torch.from_numpy(small_dataset.train_idx)
        edges = [torch.cat([b.edata["_ID"] for b in blocks]) for _ in range(2) for blocks, _, _ in source.batches(nodes, 256, True, StageTimer())]
        kept = source.snapshot_sampler.snapshot.eid.long()
        assert torch.isin(torch.cat(edges).long(), kept).all()
        assert kept.numel() < small_dataset.to_dgl(with_data=False).num_edges()
    finally:
        source.close()


def test_a_heterograph_source_refuses_the_snapshot():
    from dgl_zerocopy.data import HeteroSpec, load_dataset

    hetero = load_dataset("hetero-synthetic", hetero=HeteroSpec.scaled(200))
    with pytest.raises(ValueError, match="homogeneous graphs"):
        make_source("cpu", hetero, [3], torch.device("cpu"), sampling=SamplerRequest("snapshot"))


# -- training -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_snapshot_training_reaches_the_accuracy_of_dgls_sampler(small_dataset):
    """The same runs with ``sampler: cpu`` and ``sampler: snapshot`` at its tightest, a snapshot of as
    many in-edges as the fanout (5: partial for 58 % of the nodes, mean in-degree 9.5) with the default
    refresh 0.25, seeds 0-7: mean test accuracies within 3 points.

    Why eight seeds and a mean: a seed's figure moves with DGL's sampling threads (its draws vary from
    run to run) and so between machines. Measured here, seeds 0-15 (0.1 s a run): cpu 0.71-0.85,
    snapshot 0.67-0.86; a same-seed pair's difference has a spread (sd) of 0.019 and reached 0.043, so
    the old bound on one pair (0.05) was 2.5 sd. The mean of eight pairs has sd 0.007: 0.03 is a
    4-sd bound, and a snapshot that costs 5 points fails it."""
    common = dict(fanouts=[5, 5], batch_size=128, hidden=32, epochs=5, lr=0.01, device="cpu", prefetch=0)
    accuracy: dict[str, list[float]] = {"cpu": [], "snapshot": []}
    for seed in range(8):
        for sampler, extra in (("cpu", {}), ("snapshot", {"snapshot_size": 5})):
            config = build_config({}, {**common, "sampler": sampler, "seed": seed, **extra})
            accuracy[sampler].append(train(config, small_dataset, progress=False)[-1].test_acc)
    chance = 1.0 / small_dataset.num_classes
    mean = {sampler: sum(figures) / len(figures) for sampler, figures in accuracy.items()}
    assert mean["cpu"] > chance + 0.4, accuracy
    assert abs(mean["snapshot"] - mean["cpu"]) <= 0.03, accuracy


def test_train_says_how_it_samples(capsys):
    code = main(["train", *TINY, "--sampler", "snapshot", "--snapshot-refresh", "0.5"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "sampled from a snapshot of 8 in-edges per node, refresh 0.5 per epoch (evaluation: the full graph)" in out
    assert "final test accuracy" in out


@pytest.mark.slow  # two gloo ranks (~30 s)
def test_ddp_ranks_each_sample_from_their_own_snapshot(capfd):
    code = main(["train", *TINY, "--sampler", "snapshot", "--snapshot-size", "6", "--nproc", "2", "--epochs", "2"])
    out = capfd.readouterr().out  # rank 0 prints from its own process
    assert code == 0, out
    assert "2 processes (DDP" in out and "epoch   1 | loss" in out and "final test accuracy" in out
