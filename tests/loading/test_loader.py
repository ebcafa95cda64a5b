"""DataLoader: DGL-shaped batches with features and labels filled; overlap on == overlap off."""

import gc
import threading
import time

import pytest
import torch

from dgl_zerocopy import FeatureStore
from dgl_zerocopy.loading.loader import DataLoader

dgl = pytest.importorskip("dgl")  # every test here needs DGL, which the GPU image lacks


@pytest.fixture(scope="module")
def setup(small_dataset):
    graph = small_dataset.to_dgl()
    features = torch.from_numpy(small_dataset.features)
    labels = torch.from_numpy(small_dataset.labels)
    return graph, features, labels, torch.from_numpy(small_dataset.train_idx)


def _loader(setup, sampler, prefetch, **kw):
    graph, features, labels, train_idx = setup
    store = FeatureStore(features, backend="cpu", device="cpu")
    kw.setdefault("shuffle", True)
    return DataLoader(
        graph, train_idx, sampler, features={"feat": store}, labels={"label": labels}, device="cpu", batch_size=100, prefetch=prefetch, seed=3, **kw
    )


def _threads():
    return [t for t in threading.enumerate() if t.name.startswith("dgl-zerocopy-prefetch")]


def _epoch(loader):
    """Each batch in a canonical form: DGL may number a block's nodes differently from run to run
    (its relabelling is parallel), so nodes are sorted and edges compared as global id pairs."""
    out = []
    for input_nodes, output_nodes, blocks in loader:
        order = torch.argsort(input_nodes)
        edges = []
        for b in blocks:
            indptr, indices, _ = b.adj_tensors("csc")
            src = b.srcdata[dgl.NID][indices]
            dst = torch.repeat_interleave(b.dstdata[dgl.NID], indptr.diff())
            key = torch.sort(src * 10**7 + dst).values
            edges.append(key)
        out.append((input_nodes[order], output_nodes.clone(), edges, blocks[0].srcdata["feat"][order], blocks[-1].dstdata["label"].clone()))
    return out


@pytest.mark.parametrize("prefetch", [0, 1, 3])
@pytest.mark.parametrize("sampler", [dgl.dataloading.NeighborSampler([5, 3]), dgl.dataloading.MultiLayerFullNeighborSampler(2)], ids=["neighbor", "full"])
def test_batches_carry_the_right_features_and_labels(setup, sampler, prefetch):
    graph, features, labels, train_idx = setup
    loader = _loader(setup, sampler, prefetch)
    seen = []
    for input_nodes, output_nodes, blocks in loader:
        torch.testing.assert_close(blocks[0].srcdata["feat"], features[input_nodes], rtol=0, atol=0)
        torch.testing.assert_close(blocks[-1].dstdata["label"], labels[output_nodes], rtol=0, atol=0)
        torch.testing.assert_close(blocks[0].srcdata[dgl.NID], input_nodes)
        seen.append(output_nodes)
    assert len(seen) == len(loader) == -(-len(train_idx) // 100)
    assert torch.equal(torch.sort(torch.cat(seen)).values, torch.sort(train_idx).values), "each seed once per epoch"


def test_overlap_on_and_off_give_the_same_batches(setup):
    """Full-neighbour sampling is deterministic, so everything must match exactly. (DGL's
    NeighborSampler draws from per-thread generators that dgl.seed does not make reproducible
    across threads, so random fanouts are compared through the features test above.)"""
    sampler = dgl.dataloading.MultiLayerFullNeighborSampler(2)
    serial, overlapped = _epoch(_loader(setup, sampler, 0)), _epoch(_loader(setup, sampler, 2))
    assert len(serial) == len(overlapped)
    for a, b in zip(serial, overlapped):
        torch.testing.assert_close(a[0], b[0], rtol=0, atol=0)
        torch.testing.assert_close(a[1], b[1], rtol=0, atol=0)
        assert all(torch.equal(e1, e2) for e1, e2 in zip(a[2], b[2]))
        torch.testing.assert_close(a[3], b[3], rtol=0, atol=0)
        torch.testing.assert_close(a[4], b[4], rtol=0, atol=0)


def test_shuffle_is_seeded_and_changes_each_epoch(setup):
    sampler = dgl.dataloading.MultiLayerFullNeighborSampler(1)
    first = [o for _, o, _ in _loader(setup, sampler, 1)]
    again = [o for _, o, _ in _loader(setup, sampler, 1)]
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    loader = _loader(setup, sampler, 1)
    epoch0, epoch1 = [o.clone() for _, o, _ in loader], [o.clone() for _, o, _ in loader]
    assert not torch.equal(epoch0[0], epoch1[0])


def test_drop_last_and_len(setup):
    loader = _loader(setup, dgl.dataloading.MultiLayerFullNeighborSampler(1), 1, drop_last=True)
    assert len(loader) == len(setup[3]) // 100 == len(list(loader))


def test_worker_error_reaches_the_loop(setup):
    class Broken(dgl.dataloading.NeighborSampler):
        def sample(self, g, seeds, exclude_eids=None):
            raise RuntimeError("sampler exploded")

    with pytest.raises(RuntimeError, match="sampler exploded"):
        for _ in _loader(setup, Broken([2]), 2):
            pass


def _wait_no_threads():
    gc.collect()
    deadline = time.perf_counter() + 1.0
    while _threads() and time.perf_counter() < deadline:
        time.sleep(0.02)
    return not _threads()


def test_break_and_errors_in_the_step_stop_the_worker(setup):
    loader = _loader(setup, dgl.dataloading.NeighborSampler([3]), 2)
    for _ in loader:
        break
    assert _wait_no_threads(), "break alone should stop the worker"
    assert len(list(loader)) == len(loader), "the loader still works after a break"

    def step_fails():
        for _ in _loader(setup, dgl.dataloading.NeighborSampler([3]), 2):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        step_fails()
    assert _wait_no_threads()


def test_garbage_collected_loader_stops_its_worker(setup):
    it = iter(_loader(setup, dgl.dataloading.NeighborSampler([3]), 2))
    next(it)
    del it
    assert _wait_no_threads()


def test_ring_buffers_are_reused_not_reallocated(setup):
    loader = _loader(setup, dgl.dataloading.MultiLayerFullNeighborSampler(1), 1, shuffle=False)  # same batches each epoch
    list(loader)
    first = {id(s): s.buffers["feat"].data_ptr() for s in loader._ring.slots if "feat" in s.buffers}
    list(loader)
    second = {id(s): s.buffers["feat"].data_ptr() for s in loader._ring.slots if "feat" in s.buffers}
    assert first and first == second


def test_labels_as_a_feature_store(setup):
    graph, features, labels, train_idx = setup
    loader = DataLoader(
        graph,
        train_idx,
        dgl.dataloading.NeighborSampler([2]),
        features={"feat": features},
        labels={"label": FeatureStore(labels[:, None], backend="cpu", device="cpu")},
        batch_size=64,
        prefetch=1,
    )
    for _, output_nodes, blocks in loader:
        torch.testing.assert_close(blocks[-1].dstdata["label"], labels[output_nodes])


BAD = {
    "indices out of range": (dict(indices=torch.tensor([0, 10**6])), IndexError, "outside the graph"),
    "negative index": (dict(indices=torch.tensor([-1])), IndexError, "node -1"),
    "float indices": (dict(indices=torch.tensor([0.5])), TypeError, "int32/int64"),
    "feature rows": (dict(features={"feat": torch.zeros(5, 2)}), ValueError, "has 5 rows but the graph has"),
    "label length": (dict(labels={"label": torch.zeros(5)}), ValueError, "has 5 entries"),
    "blocks kind": (dict(blocks="gpu"), ValueError, "'dgl' or 'device'"),
    "negative prefetch": (dict(prefetch=-1), ValueError, "prefetch must be"),
    "zero batch": (dict(batch_size=0), ValueError, "batch_size must be"),
}


@pytest.mark.parametrize("override,error,message", BAD.values(), ids=BAD.keys())
def test_bad_input_fails_at_construction_before_any_thread(setup, override, error, message):
    graph, features, labels, train_idx = setup
    kw = dict(indices=train_idx, features={"feat": features}, labels={"label": labels}, blocks="dgl", prefetch=2, batch_size=10)
    kw.update(override)
    before = len(_threads())
    with pytest.raises(error, match=message):
        DataLoader(graph, kw.pop("indices"), dgl.dataloading.NeighborSampler([2]), **kw)
    assert len(_threads()) == before


def test_device_blocks_on_the_cpu_carry_the_same_batches_and_train_the_same(setup):
    """``blocks="device"`` is what a CUDA run with PyPI's DGL uses; on the CPU it must give the
    same rows, labels and model outputs as DGL blocks for the same (deterministic) sampler."""
    from dgl_zerocopy.loading.blocks import DeviceBlock
    from dgl_zerocopy.training.models import build_model

    graph, features, labels, _ = setup
    torch.manual_seed(0)
    model = build_model("sage", features.shape[1], 16, int(labels.max()) + 1, 2, dropout=0.0).eval()
    # One sampler each: DGL 2.1's fused NeighborSampler keeps per-call state on the instance, so
    # one instance used by two loaders at the same time samples wrong neighbourhoods.
    ours = _loader(setup, dgl.dataloading.MultiLayerFullNeighborSampler(2), 1, blocks="device")
    theirs = _loader(setup, dgl.dataloading.MultiLayerFullNeighborSampler(2), 0)
    batches = 0
    for (inp, out, blocks), (_inp_d, out_d, blocks_d) in zip(ours, theirs):
        assert all(isinstance(b, DeviceBlock) for b in blocks)
        torch.testing.assert_close(blocks[0].srcdata["feat"], features[inp], rtol=0, atol=0)
        torch.testing.assert_close(blocks[-1].dstdata["label"], labels[out], rtol=0, atol=0)
        torch.testing.assert_close(blocks[0].srcdata["_ID"], inp, rtol=0, atol=0)
        assert torch.equal(out, out_d)
        with torch.no_grad():  # rows of the same seeds, whatever order DGL numbered the inputs in
            torch.testing.assert_close(model(blocks, blocks[0].srcdata["feat"]), model(blocks_d, blocks_d[0].srcdata["feat"]))
        batches += 1
    assert batches == len(ours) > 1


def test_a_new_epoch_starts_only_after_the_last_epochs_worker_has_stopped(setup, monkeypatch):
    """close() gives up on a worker inside a long step (a first batch that compiles kernels, a
    huge sample) after JOIN_TIMEOUT; that worker then still gathers its batch into a ring slot.
    The next epoch must not write the ring (nor sample with the same sampler) before it has
    stopped: it waits, with a warning. Timeouts injected: 0.05 s to give up, 0.1 s to warn."""
    from dgl_zerocopy.loading import prefetch

    monkeypatch.setattr(prefetch, "JOIN_TIMEOUT", 0.05)
    monkeypatch.setattr(prefetch, "STOP_WARN_AFTER", 0.1)
    graph, features, labels, train_idx = setup
    gate, calls = threading.Event(), []

    class SlowThirdBatch(dgl.dataloading.NeighborSampler):
        def sample(self, g, seeds, exclude_eids=None):
            calls.append(seeds)
            if len(calls) == 3:  # epoch 0's batch 2: the worker is inside it when the epoch is left
                gate.wait(10)
            return super().sample(g, seeds, exclude_eids)

    loader = _loader(setup, SlowThirdBatch([3, 2]), 1, shuffle=False)
    store = loader.features["feat"]
    writes = []  # the thread of each gather into the ring, in the order they happen
    gather = store.gather

    def recording_gather(ids, *args, **kwargs):
        out = gather(ids, *args, **kwargs)
        writes.append(threading.current_thread())
        return out

    monkeypatch.setattr(store, "gather", recording_gather)
    iterator = iter(loader)
    next(iterator)
    old_worker = iterator._source.thread
    deadline = time.perf_counter() + 5
    while len(calls) < 3 and time.perf_counter() < deadline:
        time.sleep(0.01)
    assert len(calls) == 3, "the worker should be inside batch 2"
    started = time.perf_counter()
    loader.close()  # gives up after 0.05 s: the worker is still inside its step
    assert time.perf_counter() - started < 1.0 and old_worker.is_alive()
    timer = threading.Timer(0.4, gate.set)  # the long step ends 0.4 s from now
    timer.start()
    try:
        with pytest.warns(RuntimeWarning, match="previous epoch .* still in its current step"):
            batches = [(input_nodes, blocks[0].srcdata["feat"].clone()) for input_nodes, _, blocks in loader]
    finally:
        gate.set()
        timer.cancel()
    assert not old_worker.is_alive()
    old = [i for i, thread in enumerate(writes) if thread is old_worker]
    new = [i for i, thread in enumerate(writes) if thread is not old_worker]
    assert len(old) == 3 and len(new) == len(loader), "batches 0-2 by the old worker, a whole epoch by the new one"
    assert max(old) < min(new), f"the old worker wrote the ring after the new epoch had started: {writes}"
    assert len(batches) == len(loader)
    for input_nodes, x in batches:
        torch.testing.assert_close(x, features[input_nodes], rtol=0, atol=0)


class _OwnSampler(dgl.dataloading.NeighborSampler):
    """A sampler of one's own (it overrides nothing, yet could): its ids are not trusted."""


class _BadIdSampler(dgl.dataloading.NeighborSampler):
    def sample(self, g, seeds, exclude_eids=None):
        input_nodes, output_nodes, blocks = super().sample(g, seeds, exclude_eids)
        return torch.cat([input_nodes, torch.tensor([g.num_nodes()], dtype=input_nodes.dtype)]), output_nodes, blocks


@pytest.mark.parametrize("prefetch", [0, 2])
def test_gathers_skip_the_range_check_only_for_ids_dgls_own_sampler_drew(setup, monkeypatch, prefetch):
    """The ids of DGL's own samplers are nodes of the graph whose rows the stores hold: the range
    check (a pass over the ids; on a GPU a device check) is skipped for them, for features and
    label stores. A sampler of one's own is checked, so a bad id still raises the store's IndexError."""
    graph, features, labels, train_idx = setup
    flags = []
    gather = FeatureStore.gather

    def spy(self, ids, *args, **kwargs):
        flags.append(kwargs.get("unchecked", False))
        return gather(self, ids, *args, **kwargs)

    monkeypatch.setattr(FeatureStore, "gather", spy)

    def epoch(sampler):
        flags.clear()
        loader = DataLoader(
            graph,
            train_idx,
            sampler,
            features={"feat": FeatureStore(features, backend="cpu", device="cpu")},
            labels={"label": FeatureStore(labels[:, None], backend="cpu", device="cpu")},
            batch_size=500,
            prefetch=prefetch,
        )
        for _, output_nodes, blocks in loader:
            assert torch.equal(blocks[-1].dstdata["label"], labels[output_nodes])
        assert len(flags) == 2 * len(loader)  # one feature and one label gather per batch
        return set(flags)

    assert epoch(dgl.dataloading.NeighborSampler([3, 2])) == {True}
    assert epoch(dgl.dataloading.MultiLayerFullNeighborSampler(1)) == {True}
    assert epoch(_OwnSampler([3, 2])) == {False}
    with pytest.raises(IndexError, match=f"id {graph.num_nodes()} at position"):
        epoch(_BadIdSampler([3, 2]))


@pytest.mark.parametrize("prefetch", [0, 2])
def test_an_epoch_ends_by_reading_the_stores_deferred_id_checks(setup, monkeypatch, prefetch):
    """Device ids are range-checked on the device and a bad one is raised later (the store's
    deferred errors): the loader reads them at the end of each epoch, where the host waits anyway,
    so a bad id of an epoch is raised before the next epoch starts."""
    graph, features, labels, train_idx = setup
    stores = {"feat": FeatureStore(features, backend="cpu", device="cpu"), "label": FeatureStore(labels[:, None], backend="cpu", device="cpu")}
    pending = {"feat": IndexError("ids contain 999 (from a device check)")}
    calls = []

    def read_checks(self):
        name = next(k for k, v in stores.items() if v is self)
        calls.append(name)
        if name in pending:
            raise pending.pop(name)

    monkeypatch.setattr(FeatureStore, "raise_deferred_errors", read_checks)
    loader = DataLoader(
        graph,
        train_idx,
        dgl.dataloading.NeighborSampler([3, 2]),
        features={"feat": stores["feat"]},
        labels={"label": stores["label"]},
        batch_size=500,
        prefetch=prefetch,
    )
    with pytest.raises(IndexError, match="999"):
        for _ in loader:
            assert calls == []  # read once, at the end, not per batch
    assert calls == ["feat"]
    calls.clear()
    assert sum(1 for _ in loader) == len(loader)  # nothing pending: the next epoch runs through
    assert sorted(calls) == ["feat", "label"]


@pytest.mark.parametrize("prefetch", [0, 2])
def test_an_epoch_beside_a_newer_one_goes_on_in_buffers_of_its_own(setup, prefetch):
    loader = _loader(setup, dgl.dataloading.MultiLayerFullNeighborSampler(1), prefetch, shuffle=False)
    first = iter(loader)
    batches = [(input_nodes, blocks[0].srcdata["feat"].clone()) for input_nodes, _, blocks in [next(first)]]
    second = iter(loader)
    batches += [(input_nodes, blocks[0].srcdata["feat"].clone()) for input_nodes, _, blocks in [next(second)]]
    # Each iterator is a whole epoch (torch's semantics), written into a ring of its own.
    batches += [(input_nodes, blocks[0].srcdata["feat"].clone()) for input_nodes, _, blocks in first]
    batches += [(input_nodes, blocks[0].srcdata["feat"].clone()) for input_nodes, _, blocks in second]
    assert len(batches) == 2 * len(loader)
    for input_nodes, x in batches:
        torch.testing.assert_close(x, setup[1][input_nodes], rtol=0, atol=0)
