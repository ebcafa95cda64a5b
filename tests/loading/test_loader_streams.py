"""The loaders' stream protocol (docs/architecture.md, dgl_zerocopy/loading/ring.py), checked on the CPU
against a model of CUDA streams and events (tests/stream_model.py), and on a GPU for real.

At every hand-over the model checks that each feature tensor lives in one ring slot and that
everything else handed over (node ids, labels, 1-D node data, blocks) was ``record_stream``-ed on
the consumer's stream; the worker may reuse a slot only after its release was recorded.
"""

from __future__ import annotations

import itertools

import pytest
import torch

dgl = pytest.importorskip("dgl")

from conftest import requires_cuda  # noqa: E402
from stream_model import CudaModel, ModelStream  # noqa: E402

from dgl_zerocopy import FeatureStore  # noqa: E402
from dgl_zerocopy.loading import ring as ring_module  # noqa: E402
from dgl_zerocopy.loading.loader import DataLoader  # noqa: E402


@pytest.fixture
def model(monkeypatch):
    return CudaModel().install(monkeypatch)


def _loader(small_dataset, model, prefetch=2, sampler=None, graph=None):
    graph = graph if graph is not None else small_dataset.to_dgl()
    store = FeatureStore(torch.from_numpy(small_dataset.features), backend="cpu", device="cpu")
    loader = DataLoader(
        graph,
        torch.from_numpy(small_dataset.train_idx),
        sampler or dgl.dataloading.NeighborSampler([4, 2]),
        features={"feat": store},
        labels={"label": torch.from_numpy(small_dataset.labels)},
        device="cpu",
        batch_size=20,
        prefetch=prefetch,
        seed=0,
    )
    loader._ring.side = ModelStream("side", model)  # what a CUDA device gets: the worker's own stream
    return loader


def _take(iterator, loader, model, n=None) -> int:
    """Take ``n`` batches (all when None), checking each hand-over against the model. Returns how many."""
    in_slot = [k for k, v in loader.features.items() if isinstance(v, FeatureStore)]
    for count in itertools.count():
        if n is not None and count == n:
            return count
        try:
            input_nodes, output_nodes, blocks = next(iterator)
        except StopIteration:
            return count
        outside = [
            input_nodes,
            output_nodes,
            *blocks,
            *(blocks[0].srcdata[k] for k in loader.features if k not in in_slot),
            *(blocks[-1].dstdata[k] for k in loader.labels),
        ]
        model.take(loader._ring, [blocks[0].srcdata[k] for k in in_slot], outside)


def test_worker_reuses_a_slot_only_after_its_release(small_dataset, model):
    loader = _loader(small_dataset, model)
    iterator = iter(loader)
    assert _take(iterator, loader, model, 10) == 10
    iterator.close()
    assert model.violations == []
    slot_waits = [stream for stream, event in model.waits if any(event is slot.released for slot in loader._ring.slots)]
    assert len(slot_waits) >= 10 and set(slot_waits) == {"side"}


@pytest.mark.parametrize("leave", ["break", "close", "end"])
def test_a_new_epoch_waits_for_the_slot_the_last_one_held(small_dataset, model, leave):
    loader = _loader(small_dataset, model)
    iterator = iter(loader)
    _take(iterator, loader, model, None if leave == "end" else 3)
    if leave == "close":
        loader.close()
    del iterator  # for "break": the iterator is dropped, nothing calls close()
    second = iter(loader)
    _take(second, loader, model, len(loader._ring) + 2)
    second.close()
    assert model.violations == []


def test_one_d_node_data_and_labels_are_recorded_on_the_consumer_stream(small_dataset, model):
    """A 1-D tensor named in the sampler's prefetch_node_feats is gathered into a tensor of its own
    on the side stream, like the labels: it must be record_stream-ed at hand-over (the model's
    take() checks every tensor handed over outside a slot)."""
    graph = small_dataset.to_dgl(with_data=True)
    graph.ndata["degree"] = graph.in_degrees().float()
    sampler = dgl.dataloading.NeighborSampler([4, 2], prefetch_node_feats=["degree"], prefetch_labels=["label"])
    loader = _loader(small_dataset, model, sampler=sampler, graph=graph)
    assert set(loader.features) == {"feat", "degree"} and not isinstance(loader.features["degree"], FeatureStore)
    for _epoch in range(2):
        iterator = iter(loader)
        assert _take(iterator, loader, model) == len(loader)
    assert model.violations == []


def test_record_stream_reaches_every_cuda_tensor_and_skips_host_ones():
    seen = []

    class Tensorish:  # a DeviceBlock or a DGL graph on a GPU
        device = torch.device("cuda", 0)

        def record_stream(self, stream):
            seen.append(("block", stream))

    class HostGraph:  # DGL raises for a CPU graph: it must not be asked
        device = torch.device("cpu")

        def record_stream(self, stream):
            raise AssertionError("record_stream on a CPU graph")

    ring_module.record_stream(({"label": torch.zeros(3)}, [Tensorish(), HostGraph(), (Tensorish(),)]), "s")
    assert seen == [("block", "s"), ("block", "s")]


# -- on a GPU -------------------------------------------------------------------------------------


@pytest.mark.gpu
@requires_cuda
def test_features_held_past_a_break_are_not_overwritten_by_the_next_epoch(small_dataset):
    from dgl_zerocopy.loading.dgl_options import dgl_has_cuda

    graph = small_dataset.to_dgl()
    # A copy of its own: no other test's store can have pinned this memory.
    features = torch.from_numpy(small_dataset.features).clone()
    labels_host = torch.from_numpy(small_dataset.labels)
    blocks_kind = "dgl" if dgl_has_cuda() else "device"
    loader = DataLoader(
        graph,
        torch.from_numpy(small_dataset.train_idx),
        dgl.dataloading.NeighborSampler([4, 2]),
        features={"feat": features},
        labels={"label": labels_host},
        device="cuda",
        batch_size=20,
        prefetch=2,
        seed=0,
        blocks=blocks_kind,
    )
    for _ in range(3):
        for input_nodes, output_nodes, blocks in loader:  # noqa: B007 (the last batch is read after the loop)
            torch.cuda._sleep(100_000_000)  # the step is still running when the next epoch starts
            kept = blocks[0].srcdata["feat"].clone()  # queued behind the sleep
            labels = blocks[-1].dstdata["label"].clone()
            break
        for _ in zip(range(6), loader):  # the next epoch's worker refills every slot meanwhile
            pass
        # The loader hands out the node ids on the device (as DGL does): index the host tables with host ids.
        assert input_nodes.device.type == "cuda" and output_nodes.device.type == "cuda"
        torch.testing.assert_close(kept.cpu(), features[input_nodes.cpu()], rtol=0, atol=0)
        torch.testing.assert_close(labels.cpu(), labels_host[output_nodes.cpu()], rtol=0, atol=0)
    loader.close()
