"""dgl_zerocopy.dist in this process: partitioning, the single-host helpers, and DGL's standalone
mode (DGL_DIST_MODE unset, one partition, no server process): rows equal the original dataset's
through the partition's id mapping, the local/remote split is counted, the loader's batches carry them."""

from __future__ import annotations

import json
import os
import tempfile
import threading

import numpy as np
import pytest
import torch
from conftest import SMALL, devices

from dgl_zerocopy.data import load_dataset
from dgl_zerocopy.dist import (
    DistFeatureSource,
    DistLoader,
    ServerLostError,
    Watchdog,
    launch_local,
    load_partition_info,
    partition_dataset,
    remove_segments,
    single_host,
    trainer_threads,
)
from dgl_zerocopy.loading.prefetch import Prefetcher


@pytest.fixture(scope="module")
def dataset():
    return load_dataset("synthetic", synthetic=SMALL)


@pytest.fixture(scope="module")
def one_part(dataset, tmp_path_factory):
    return partition_dataset(dataset, 1, tmp_path_factory.mktemp("one") / "parts", method="random")


@pytest.fixture(scope="module")
def standalone_graph(one_part):
    """A DistGraph in standalone mode (the partition loaded in this process)."""
    import dgl

    if os.environ.get("DGL_DIST_MODE", "standalone") != "standalone":
        pytest.skip("standalone mode needs DGL_DIST_MODE unset")
    dgl.distributed.initialize(None)
    return dgl.distributed.DistGraph(one_part.graph_name, part_config=str(one_part.part_config))


# -- partitions ------------------------------------------------------------------------------------


def test_two_partitions_keep_a_permutation_of_the_nodes(dataset, tmp_path):
    info = partition_dataset(dataset, 2, tmp_path / "p", method="metis")
    orig = info.orig_nids()
    assert info.num_parts == 2 and info.num_nodes == dataset.num_nodes
    assert np.array_equal(np.sort(orig), np.arange(dataset.num_nodes))  # every node once
    assert not np.array_equal(orig, np.arange(dataset.num_nodes))  # DGL relabelled them
    config = json.loads(info.part_config.read_text())
    ranges = config["node_map"]["_N"]
    assert ranges[0][0] == 0 and ranges[-1][1] == dataset.num_nodes and ranges[0][1] == ranges[1][0]
    again = load_partition_info(tmp_path / "p")
    assert again == info


def test_partition_refuses_bad_input_with_the_fix(dataset, tmp_path):
    with pytest.raises(ValueError, match="num_parts must be a positive integer, but got 0"):
        partition_dataset(dataset, 0, tmp_path / "a")
    with pytest.raises(ValueError, match="method must be one of"):
        partition_dataset(dataset, 1, tmp_path / "a", method="kahip")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x.txt").write_text("mine")
    with pytest.raises(ValueError, match="not empty and holds no earlier partitions"):
        partition_dataset(dataset, 1, tmp_path / "busy")
    partition_dataset(dataset, 1, tmp_path / "done", method="random")
    with pytest.raises(ValueError, match="overwrite=True"):
        partition_dataset(dataset, 1, tmp_path / "done", method="random")
    partition_dataset(dataset, 1, tmp_path / "done", method="random", overwrite=True)
    with pytest.raises(FileNotFoundError, match="dgl-zerocopy partition --dataset NAME"):
        load_partition_info(tmp_path / "busy")


# -- standalone mode ---------------------------------------------------------------------------------


@pytest.mark.parametrize("device", devices())
def test_standalone_rows_equal_the_original_features(standalone_graph, one_part, dataset, device):
    orig = torch.from_numpy(one_part.orig_nids())
    ids = torch.randint(0, dataset.num_nodes, (777,), generator=torch.Generator().manual_seed(0))
    with DistFeatureSource(standalone_graph.ndata["feat"], device=device) as feat, DistFeatureSource(standalone_graph.ndata["label"], device=device) as label:
        assert feat.store.backend == ("zerocopy" if device == "cuda" else "cpu")
        rows = feat.fetch(ids)
        assert rows.device.type == device
        assert torch.equal(rows.cpu(), torch.from_numpy(dataset.features)[orig[ids]])
        assert torch.equal(label.fetch(ids.int()).cpu(), torch.from_numpy(dataset.labels)[orig[ids]])
        assert (feat.counts.local, feat.counts.remote, feat.counts.fetches) == (777, 0, 1)  # one partition: all local
        out = torch.full((3, dataset.features.shape[1]), -1.0, device=device)
        assert feat.fetch(np.array([5, 0, 5]), out=out) is out
        assert torch.equal(out.cpu(), torch.from_numpy(dataset.features)[orig[[5, 0, 5]]])
        assert feat.fetch(torch.tensor([], dtype=torch.int64)).shape == (0, dataset.features.shape[1])
        assert feat.reset_counts().local == 780 and feat.counts.local == 0


def test_source_views_the_local_partition_in_place(standalone_graph):
    tensor = standalone_graph.ndata["feat"]
    with DistFeatureSource(tensor, device="cpu") as feat:
        assert feat.store._table.data_ptr() == tensor.local_partition.data_ptr()  # no copy of the partition


def test_source_errors_name_the_value_and_the_fix(standalone_graph, dataset):
    with pytest.raises(TypeError, match="must be a dgl.distributed.DistTensor"):
        DistFeatureSource(torch.zeros(3, 2))
    with DistFeatureSource(standalone_graph.ndata["feat"], device="cpu") as feat:
        n = dataset.num_nodes
        with pytest.raises(IndexError, match=f"id {n} at position 1 is out of range .* of {n} rows"):
            feat.fetch(torch.tensor([0, n]))
        with pytest.raises(IndexError, match="id -1 at position 0"):
            feat.fetch(torch.tensor([-1]))
        with pytest.raises(TypeError, match="convert with ids.long"):
            feat.fetch(torch.tensor([0.5]))
        with pytest.raises(ValueError, match="must be 1-D"):
            feat.fetch(torch.zeros(2, 2, dtype=torch.int64))
        with pytest.raises(ValueError, match=r"out must be a contiguous torch.float32 tensor of shape \(2, 16\)"):
            feat.fetch(torch.tensor([0, 1]), out=torch.zeros(3, 16))


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("prefetch", [0, 2])
def test_standalone_loader_batches_carry_the_original_rows(standalone_graph, one_part, dataset, prefetch, device):
    orig = torch.from_numpy(one_part.orig_nids())
    feats, labels = torch.from_numpy(dataset.features), torch.from_numpy(dataset.labels)
    seeds = torch.arange(0, dataset.num_nodes, 3)
    with DistFeatureSource(standalone_graph.ndata["feat"], device=device) as feat, DistFeatureSource(standalone_graph.ndata["label"], device=device) as label:
        loader = DistLoader(standalone_graph, seeds, [4, 4], features={"feat": feat}, labels={"label": label}, batch_size=256, shuffle=True, prefetch=prefetch)
        seen, rows = [], 0
        for _epoch in range(2):
            for input_nodes, output_nodes, blocks in loader:
                x, y = blocks[0].srcdata["feat"], blocks[-1].dstdata["label"]
                assert x.device.type == y.device.type == device
                # On a GPU the rows come through the ring on a side stream: compared on the host.
                assert torch.equal(x.cpu(), feats[orig[input_nodes.cpu()]])
                assert torch.equal(y.cpu(), labels[orig[output_nodes.cpu()]])
                assert torch.equal(input_nodes[: len(output_nodes)], output_nodes)  # DGL's block convention
                seen.append(output_nodes)
                rows += len(input_nodes)
            assert len(loader.stats) == len(loader) == -(-len(seeds) // 256)
        assert torch.equal(torch.sort(torch.cat(seen[: len(loader)])).values, seeds)  # each seed once per epoch
        assert sum(s.local_rows for s in loader.stats) > 0 and all(s.remote_rows == 0 for s in loader.stats)
        assert feat.counts.local == rows  # only features are counted in stats; the source counts every fetch
        loader.close()


def test_loader_hands_batches_over_by_the_ring_protocol(standalone_graph, monkeypatch):
    """DistLoader uses DataLoader's slot ring (dgl_zerocopy/loading/ring.py), checked against the model of
    streams and events: features in ring slots filled on the side stream, reused only after their
    release, labels and blocks record_stream-ed on the consumer's stream, across a break too."""
    from stream_model import CudaModel, ModelStream

    from dgl_zerocopy.loading.ring import SlotRing

    with DistFeatureSource(standalone_graph.ndata["feat"], device="cpu") as feat, DistFeatureSource(standalone_graph.ndata["label"], device="cpu") as label:
        model = CudaModel().install(monkeypatch)
        loader = DistLoader(
            standalone_graph,
            torch.arange(0, standalone_graph.num_nodes(), 3),
            [4, 4],
            features={"feat": feat},
            labels={"label": label},
            batch_size=100,
            shuffle=True,
            prefetch=2,
        )
        assert type(loader._ring) is SlotRing  # the one mechanism, not a copy
        loader._ring.side = ModelStream("side", model)  # what a CUDA device gets
        taken = 0
        for leave_after in (3, None, None):  # a break, then two whole epochs
            for i, (input_nodes, seeds, blocks) in enumerate(loader):
                model.take(loader._ring, [blocks[0].srcdata["feat"]], [input_nodes, seeds, *blocks, blocks[-1].dstdata["label"]])
                taken += 1
                if i + 1 == leave_after:
                    break
        loader.close()
    assert taken == 3 + 2 * len(loader) and len(loader) > len(loader._ring)
    assert model.violations == []
    slot_waits = [stream for stream, event in model.waits if any(event is slot.released for slot in loader._ring.slots)]
    assert len(slot_waits) >= taken and set(slot_waits) == {"side"}


@pytest.mark.parametrize("prefetch", [0, 2])
def test_an_epoch_replaced_by_a_newer_one_stops_and_leaves_the_newer_alone(standalone_graph, one_part, dataset, prefetch):
    """Two iterators of one loader: starting the second ends the first (it yields nothing more and
    writes no slot), and dropping the first neither stops the second's worker nor releases its slot."""
    import gc

    orig, feats = torch.from_numpy(one_part.orig_nids()), torch.from_numpy(dataset.features)
    with DistFeatureSource(standalone_graph.ndata["feat"], device="cpu") as feat:
        loader = DistLoader(standalone_graph, torch.arange(0, dataset.num_nodes, 3), [4], features={"feat": feat}, batch_size=100, prefetch=prefetch)
        first = iter(loader)
        next(first)
        second = iter(loader)
        batches = [next(second)]
        with pytest.raises(StopIteration):
            next(first)
        del first
        gc.collect()
        with pytest.warns(UserWarning, match="batch 0 is still referenced"):  # batches[0]: its slot was reused
            batches += list(second)
        assert len(batches) == len(loader)
        for input_nodes, _, blocks in batches[-len(loader._ring) + 1 :]:  # the ones whose slots were not reused since
            assert torch.equal(blocks[0].srcdata["feat"], feats[orig[input_nodes]])


def test_loader_refuses_bad_arguments(standalone_graph):
    with DistFeatureSource(standalone_graph.ndata["feat"], device="cpu") as feat:
        with pytest.raises(TypeError, match=r"features\['feat'\] must be a DistFeatureSource"):
            DistLoader(standalone_graph, torch.arange(4), [2], features={"feat": standalone_graph.ndata["feat"]})
        with pytest.raises(ValueError, match="batch_size must be a positive integer, but got 0"):
            DistLoader(standalone_graph, torch.arange(4), [2], features={"feat": feat}, batch_size=0)
        with pytest.raises(ValueError, match="prefetch must be an integer >= 0"):
            DistLoader(standalone_graph, torch.arange(4), [2], features={"feat": feat}, prefetch=-1)
        with pytest.raises(ValueError, match="features is empty"):
            DistLoader(standalone_graph, torch.arange(4), [2], features={})


def test_standalone_training_learns(one_part, standalone_graph):
    from dgl_zerocopy.dist import train_dist
    from dgl_zerocopy.training.config import TrainConfig

    cfg = TrainConfig(fanouts=[5, 5], batch_size=256, hidden=32, epochs=3, lr=0.01, device="cpu", prefetch=2)
    history, info = train_dist(cfg, one_part.folder)
    assert info == one_part and len(history) == 3
    assert history[-1].loss < history[0].loss
    assert history[-1].test_acc > 2.0 / SMALL.num_classes  # well above chance (1/5)


@pytest.mark.parametrize(
    "update, flag",
    [({"feature_compression": "int8"}, "--feature-compression int8"), ({"feature_cache": "10%"}, "--feature-cache 10%"), ({"nproc": 2}, "--nproc 2")],
)
def test_options_that_do_not_apply_with_dist_are_refused(one_part, update, flag):
    from dgl_zerocopy.dist import train_dist
    from dgl_zerocopy.training.config import ConfigError, TrainConfig

    cfg = TrainConfig(device="cpu").model_copy(update=update)
    with pytest.raises(ConfigError, match=f"^{flag} does not apply with --dist"):
        train_dist(cfg, one_part.folder)


# -- the watchdog ------------------------------------------------------------------------------------


def test_watchdog_fails_within_its_poll_when_a_server_is_gone():
    import subprocess
    import sys
    import time

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    release = threading.Event()
    stuck = Prefetcher(range(3), lambda i: release.wait(), depth=1)  # a worker that waits as DGL's RPC would
    try:
        start = time.monotonic()
        with pytest.raises(ServerLostError, match=f"machine 1 \\(pid {gone.pid}\\) is gone while waiting for batch 0"):
            Watchdog([os.getpid(), gone.pid], stall_timeout=None, poll=0.05).wait(stuck, "batch 0")
        assert time.monotonic() - start < 2.0
        with pytest.raises(ServerLostError, match="no response from the DistDGL servers for 0 s"):
            Watchdog([], stall_timeout=0.2, poll=0.05).wait(stuck, "batch 0")
    finally:
        release.set()
        stuck.close()
    assert not stuck.alive


def test_watchdog_reads_its_settings_from_the_environment(monkeypatch):
    monkeypatch.setenv("DGL_ZEROCOPY_SERVER_PIDS", "12,34")
    monkeypatch.setenv("DGL_ZEROCOPY_STALL_TIMEOUT", "0")
    dog = Watchdog.from_env()
    assert dog.server_pids == [12, 34] and dog.stall_timeout is None
    monkeypatch.setenv("DGL_ZEROCOPY_SERVER_PIDS", "12,x")
    with pytest.raises(ValueError, match="comma-separated process ids, but got '12,x'"):
        Watchdog.from_env()
    with pytest.raises(ValueError, match="stall_timeout must be positive"):
        Watchdog(stall_timeout=0)


# -- single-host helpers (installing them is tested in the 2-partition jobs: it patches DGL for good) --


def test_shared_memory_segments_are_found_and_removed_by_prefix(tmp_path):
    if not single_host.SHM_DIR.is_dir():
        pytest.skip("no /dev/shm")
    prefix = f"dglzctest{os.getpid()}_"
    paths = [single_host.SHM_DIR / f"{prefix}{name}" for name in ("a", "node~_N~feat-kvdata-")]
    other = single_host.SHM_DIR / f"dglzcother{os.getpid()}"
    for p in [*paths, other]:
        p.write_bytes(b"x")
    try:
        assert single_host.segments(prefix) == sorted(paths)
        assert remove_segments(prefix) == 2
        assert single_host.segments(prefix) == [] and other.exists()
    finally:
        for p in [*paths, other]:
            p.unlink(missing_ok=True)
    with pytest.raises(ValueError, match="letters, digits or underscores"):
        single_host.segments("../etc")


def test_install_refuses_bad_values(monkeypatch):
    with pytest.raises(ValueError, match="machine_id must be a non-negative integer, but got -1"):
        single_host.install(-1, "abc")
    with pytest.raises(ValueError, match="shm_prefix must be 1-64 letters"):
        single_host.install(0, "a/b")
    monkeypatch.setenv(single_host.MACHINE_ID_ENV, "1")
    monkeypatch.delenv(single_host.SHM_PREFIX_ENV, raising=False)
    with pytest.raises(RuntimeError, match="set both"):
        single_host.install_from_env()
    assert single_host.installed() == {}


def test_trainer_threads_follow_dgl_launch_rule():
    # half the cores, split among the trainers of this host, at least one
    assert [trainer_threads(parts, cpus) for parts, cpus in ((1, 16), (2, 16), (3, 16), (2, 2), (4, 4), (1, 1))] == [8, 4, 2, 1, 1, 1]


@pytest.mark.parametrize("value", ["0", "two", "4,2"])
def test_launch_local_refuses_a_bad_thread_count_before_starting_anything(one_part, tmp_path, value, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where a work folder would be made
    with pytest.raises(ValueError, match=f"OMP_NUM_THREADS must be a positive integer.*{value!r}"):
        launch_local(["true"], one_part.part_config, 1, env={"OMP_NUM_THREADS": value})
    assert list(tmp_path.iterdir()) == []
