"""The PyG loaders' device side: the prefetch path's stream protocol on the CPU, against the model of CUDA streams
and events (tests/stream_model.py), and the loaders on a GPU for real (``gpu`` marker, skipped without CUDA).

With ``prefetch > 0`` (dgl_zerocopy/pyg/loaders.py ``_prefetched``) each batch is sampled and gathered inside its
ring slot's fill, on the worker's side stream, which first waits for the slot's release; at hand-over the
consumer's stream waits for the batch's ``ready`` event and every tensor of the batch (a PyG batch owns its
tensors: none lives in a slot) is ``record_stream``-ed on the consumer's stream. On a GPU: batches on the
device, equal to ``data[ids]`` for every graph placement and prefetch depth, links, heterographs and the
remote backend, and the full-neighbourhood GraphConv equal to the full graph's on the real kernels.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("torch_geometric")

from conftest import requires_cuda  # noqa: E402
from stream_model import CudaModel, ModelStream  # noqa: E402
from test_pyg_loaders import N, check_hetero, check_homogeneous, check_hops, make_data, make_hetero  # noqa: E402

from dgl_zerocopy.loading.ring import SlotRing  # noqa: E402
from dgl_zerocopy.pyg import FeatureStore, GraphStore, LinkNeighborLoader, NeighborLoader  # noqa: E402
from dgl_zerocopy.pyg import features as features_module  # noqa: E402
from dgl_zerocopy.pyg.sampler import NeighborSampler  # noqa: E402

# -- the stream protocol, on the model ------------------------------------------------------------------------


def _tensors(obj) -> list[torch.Tensor]:
    """Every tensor of a batch (``to_dict()``: nested dicts by type for HeteroData)."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for value in obj.values() for t in _tensors(value)]
    if isinstance(obj, (list, tuple)):
        return [t for value in obj for t in _tensors(value)]
    return []


@pytest.fixture
def streams(monkeypatch):
    """``(model, streams)``: the model of CUDA streams, and the stream current at each sampling and gather."""
    seen = {"sample": [], "gather": []}
    sample, gather = NeighborSampler._sample, features_module.gather

    def sample_on(self, *args, **kwargs):
        seen["sample"].append(torch.cuda.current_stream().name)
        return sample(self, *args, **kwargs)

    def gather_on(store, ids):
        seen["gather"].append(torch.cuda.current_stream().name)
        return gather(store, ids)

    monkeypatch.setattr(NeighborSampler, "_sample", sample_on)
    monkeypatch.setattr(features_module, "gather", gather_on)
    return monkeypatch, seen


def _on_the_model(loader, monkeypatch) -> CudaModel:
    """Install the model after the loader (its stores bound on the CPU) and give the loader the ring a CUDA
    device gets: the model's events, a side stream of the worker's own."""
    model = CudaModel().install(monkeypatch)
    loader._ring = SlotRing(torch.device("cpu"), loader.prefetch)
    loader._ring.side = ModelStream("side", model)
    return model


def _take(loader, model, n: int | None = None) -> int:
    """Take ``n`` batches of a new epoch (all when None), checking each hand-over on the model."""
    count = 0
    for batch in loader:
        tensors = _tensors(batch.to_dict())
        assert tensors, "a batch with tensors"
        model.take(loader._ring, [], tensors)  # nothing in a slot: every tensor record_stream-ed on the consumer's stream
        count += 1
        if n is not None and count == n:
            break
    return count


def _slot_waits(loader, model, stream: str) -> int:
    return sum(1 for name, event in model.waits if name == stream and any(event is slot.released for slot in loader._ring.slots))


def test_prefetch_follows_the_stream_protocol(streams):
    monkeypatch, seen = streams
    data = make_data()
    loader = NeighborLoader(data, [3, 2], batch_size=8, prefetch=2)
    model = _on_the_model(loader, monkeypatch)
    assert _take(loader, model) == 8
    assert seen["sample"] == ["side"] * 8, "sampled on the worker's side stream"
    assert seen["gather"] == ["side"] * 16, "x and edge_attr gathered there too"
    assert _slot_waits(loader, model, "side") == 8, "each fill waited for its slot's release"
    ready = [event for name, event in model.waits if name == "consumer"]
    assert len(ready) == 8 and all(event.recorded_at >= 0 for event in ready), "the consumer waited for each batch's ready event"
    assert model.violations == []


@pytest.mark.parametrize("leave", ["break", "close", "end"])
def test_a_new_epoch_after_leaving_one(streams, leave):
    monkeypatch, seen = streams
    data = make_data()
    # close() gives back the loader's stores: a loader that goes on after it routes no features.
    loader = NeighborLoader(data, [3, 2], batch_size=8, prefetch=2, shuffle=True, features=False if leave == "close" else None)
    model = _on_the_model(loader, monkeypatch)
    _take(loader, model, None if leave == "end" else 3)
    if leave == "close":
        loader.close()
    assert _take(loader, model) == 8
    assert model.violations == [] and set(seen["sample"]) == {"side"}


def test_hetero_and_link_batches_on_the_model(streams):
    monkeypatch, seen = streams
    h = make_hetero()
    hetero = NeighborLoader(h, [3, 2], input_nodes=("paper", torch.arange(16)), batch_size=4, prefetch=1)
    link = LinkNeighborLoader(make_data(), [2], batch_size=40, neg_sampling="triplet", prefetch=3)
    for loader in (hetero, link):
        model = _on_the_model(loader, monkeypatch)
        assert _take(loader, model) == len(loader)
        assert model.violations == [] and _slot_waits(loader, model, "side") == len(loader)
    assert set(seen["sample"]) == {"side"} and set(seen["gather"]) == {"side"}


# -- on a GPU ------------------------------------------------------------------------------------------------------


def _cpu(batch):
    return batch.to("cpu")


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("prefetch", [0, 2])
@pytest.mark.parametrize("placement", ["pinned", "device"])
def test_cuda_batches(placement, prefetch):
    data = make_data()
    loader = NeighborLoader(data, [3, 2], batch_size=16, device="cuda", graph_placement=placement, prefetch=prefetch, shuffle=True)
    kept = []
    for batch in loader:
        for name in ("n_id", "e_id", "edge_index", "x", "edge_attr"):
            assert batch[name].is_cuda, f"{name} on the GPU"
        assert torch.equal(batch.x.cpu(), data.x[batch.n_id.cpu()])
        host = _cpu(batch)
        check_homogeneous(data, host, host.n_id[: host.batch_size])  # y and the 1-D w sliced by PyG, by e_id
        check_hops(data, host, [3, 2])
        kept.append(batch)
    for batch in kept:  # a PyG batch owns its tensors: still right after the batches made after it
        assert torch.equal(batch.x.cpu(), data.x[batch.n_id.cpu()]) and torch.equal(batch.edge_attr.cpu(), data.edge_attr[batch.e_id.cpu()])
    assert sorted(torch.cat([b.n_id[: b.batch_size].cpu() for b in kept]).tolist()) == list(range(N))
    loader.close()


@pytest.mark.gpu
@requires_cuda
def test_cuda_full_neighbourhood_reproduces_the_full_graph():
    from torch_geometric.nn import GraphConv

    data = make_data()
    seeds = torch.tensor([0, 3, 11, 42, N - 1])
    loader = NeighborLoader(data, [-1, -1], input_nodes=seeds, batch_size=5, device="cuda", prefetch=0)
    batch = next(iter(loader))
    torch.manual_seed(0)
    conv1, conv2 = GraphConv(5, 8), GraphConv(8, 4)
    with torch.no_grad():
        full = conv2(conv1(data.x, data.edge_index).relu(), data.edge_index)[seeds]
        conv1, conv2 = conv1.cuda(), conv2.cuda()
        ours = conv2(conv1(batch.x, batch.edge_index).relu(), batch.edge_index)[:5]
    assert torch.allclose(ours.cpu(), full, atol=1e-4)  # sums in another order on the GPU
    loader.close()


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("prefetch", [0, 2])
def test_cuda_link_loader(prefetch):
    data = make_data()
    loader = LinkNeighborLoader(data, [3, 2], batch_size=32, neg_sampling_ratio=1.0, device="cuda", prefetch=prefetch)
    for batch in loader:
        assert batch.n_id.is_cuda and batch.edge_index.is_cuda and batch.x.is_cuda
        host = _cpu(batch)
        assert torch.equal(data.edge_index[:, host.e_id], host.n_id[host.edge_index])
        assert torch.equal(host.x, data.x[host.n_id]) and torch.equal(host.edge_attr, data.edge_attr[host.e_id])
        assert torch.equal(host.n_id[host.edge_label_index[:, :32]], data.edge_index[:, host.input_id])
    loader.close()


@pytest.mark.gpu
@requires_cuda
def test_cuda_hetero_features_on_the_device():
    h = make_hetero()
    seeds = torch.arange(8)
    loader = NeighborLoader(h, [3, 2], input_nodes=("paper", seeds), batch_size=8, device="cuda", prefetch=2)
    batch = next(iter(loader))
    assert batch["paper"].x.is_cuda and batch["author"].x.is_cuda
    check_hetero(h, _cpu(batch), "paper", seeds)
    loader.close()


@pytest.mark.gpu
@requires_cuda
def test_cuda_remote_backend():
    data = make_data()
    pair = (FeatureStore.from_data(data, device="cuda"), GraphStore.from_data(data))
    loader = NeighborLoader(pair, [3, 2], input_nodes=torch.arange(N), batch_size=16, device="cuda", prefetch=2)
    for batch in loader:
        assert batch.x.is_cuda and batch.edge_index.is_cuda
        host = _cpu(batch)
        assert torch.equal(data.edge_index[:, host.e_id], host.n_id[host.edge_index])
        assert torch.equal(host.x, data.x[host.n_id]) and torch.equal(host.edge_attr, data.edge_attr[host.e_id])
    loader.close()
    pair[0].close()
