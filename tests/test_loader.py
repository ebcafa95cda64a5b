"""DataLoader: DGL-shaped batches with features and labels filled; overlap on == overlap off."""
import gc
import threading
import time

import numpy as np
import pytest
import torch

from dgl_zerocopy import FeatureStore
from dgl_zerocopy.loader import DataLoader

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
    return DataLoader(graph, train_idx, sampler, features={"feat": store}, labels={"label": labels},
                      device="cpu", batch_size=100, prefetch=prefetch, seed=3, **kw)


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
        out.append((input_nodes[order], output_nodes.clone(), edges,
                    blocks[0].srcdata["feat"][order], blocks[-1].dstdata["label"].clone()))
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
    loader = DataLoader(graph, train_idx, dgl.dataloading.NeighborSampler([2]), features={"feat": features},
                        labels={"label": FeatureStore(labels[:, None], backend="cpu", device="cpu")}, batch_size=64, prefetch=1)
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
    from dgl_zerocopy.blocks import DeviceBlock
    from dgl_zerocopy.models import build_model

    graph, features, labels, _ = setup
    torch.manual_seed(0)
    model = build_model("sage", features.shape[1], 16, int(labels.max()) + 1, 2, dropout=0.0).eval()
    # One sampler each: DGL 2.1's fused NeighborSampler keeps per-call state on the instance, so
    # one instance used by two loaders at the same time samples wrong neighbourhoods.
    ours = _loader(setup, dgl.dataloading.MultiLayerFullNeighborSampler(2), 1, blocks="device")
    theirs = _loader(setup, dgl.dataloading.MultiLayerFullNeighborSampler(2), 0)
    batches = 0
    for (inp, out, blocks), (inp_d, out_d, blocks_d) in zip(ours, theirs):
        assert all(isinstance(b, DeviceBlock) for b in blocks)
        torch.testing.assert_close(blocks[0].srcdata["feat"], features[inp], rtol=0, atol=0)
        torch.testing.assert_close(blocks[-1].dstdata["label"], labels[out], rtol=0, atol=0)
        torch.testing.assert_close(blocks[0].srcdata["_ID"], inp, rtol=0, atol=0)
        assert torch.equal(out, out_d)
        with torch.no_grad():  # rows of the same seeds, whatever order DGL numbered the inputs in
            torch.testing.assert_close(model(blocks, blocks[0].srcdata["feat"]), model(blocks_d, blocks_d[0].srcdata["feat"]))
        batches += 1
    assert batches == len(ours) > 1
