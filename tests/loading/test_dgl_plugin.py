"""The DGL-native route: DGL's own DataLoader, ``with_features`` and ``attach``, against DGL's
``prefetch_node_feats`` path and ``g.ndata`` as the reference."""

import threading
import warnings

import numpy as np
import pytest
import torch
from conftest import requires_cuda
from script_runs import run_cli

from dgl_zerocopy import FeatureStore
from dgl_zerocopy.training.config import TrainConfig
from dgl_zerocopy.training.train import train

dgl = pytest.importorskip("dgl")  # every test here needs DGL, which the GPU image lacks
from dgl_zerocopy.loading.dgl import ZeroCopyStorage, attach, with_features  # noqa: E402  (imports dgl)

# DGL's loader nags about CPU affinity on every epoch; it is advice, not a fault of these tests.
warnings.filterwarnings("ignore", message="Dataloader CPU affinity opt is not enabled")

BATCH = 200
SAMPLERS = {"neighbor": lambda **kw: dgl.dataloading.NeighborSampler([4, 3], **kw), "full": lambda **kw: dgl.dataloading.MultiLayerFullNeighborSampler(2, **kw)}


@pytest.fixture(scope="module")
def graph(small_dataset):
    return small_dataset.to_dgl(with_data=True)  # ndata 'feat' and 'label': the reference


@pytest.fixture(scope="module")
def store(small_dataset):
    with FeatureStore(small_dataset.features, backend="cpu", device="cpu") as s:
        yield s


@pytest.fixture(scope="module")
def seeds(small_dataset):
    return torch.from_numpy(small_dataset.train_idx)


def dgl_loader(graph, seeds, sampler, mode: str = "serial", **kw):
    loader = dgl.dataloading.DataLoader(graph, seeds, sampler, batch_size=BATCH, shuffle=True, num_workers=1 if mode == "workers" else 0, **kw)
    if mode == "thread":
        # DGL refuses use_prefetch_thread=True at construction unless device is CUDA; the flag is
        # read per epoch, so setting it afterwards runs DGL's prefetch thread on the CPU.
        loader.use_prefetch_thread = True
    return loader


def check_batches(batches, graph, seeds):
    """Every batch's features and labels equal g.ndata at its sampled ids; every seed once."""
    feat, label = graph.ndata["feat"], graph.ndata["label"]
    for input_nodes, output_nodes, blocks in batches:
        assert torch.equal(blocks[0].srcdata[dgl.NID], input_nodes)
        torch.testing.assert_close(blocks[0].srcdata["feat"], feat[input_nodes], rtol=0, atol=0)
        torch.testing.assert_close(blocks[-1].dstdata["label"], label[output_nodes], rtol=0, atol=0)
    assert len(batches) == -(-len(seeds) // BATCH)
    assert torch.equal(torch.sort(torch.cat([b[1] for b in batches])).values, torch.sort(seeds).values)


# -- the storage ----------------------------------------------------------------------------
def test_fetch_returns_rows_it_owns(store, small_dataset):
    """The cpu backend reuses one buffer between gathers; a fetched batch must not change when
    the next one is fetched (DGL hands it to the user, who may keep it)."""
    storage = ZeroCopyStorage(store)
    assert isinstance(storage, ZeroCopyStorage) and storage.store is store
    table = torch.from_numpy(small_dataset.features)
    first_ids, second_ids = torch.arange(0, 300), torch.arange(2000, 2400, dtype=torch.int32)
    first = storage.fetch(first_ids, torch.device("cpu"))
    second = storage.fetch(second_ids, "cpu", True)
    assert torch.equal(first, table[first_ids]) and torch.equal(second, table[second_ids.long()])
    assert first.data_ptr() != second.data_ptr()
    assert storage.fetch(torch.tensor([], dtype=torch.int64), "cpu").shape == (0, table.shape[1])


def test_storage_bad_input(store):
    with pytest.raises(TypeError, match="FeatureStore"):
        ZeroCopyStorage(torch.zeros(3, 2))
    with pytest.raises(IndexError, match="out of range"):
        ZeroCopyStorage(store).fetch(torch.tensor([0, len(store)]), "cpu")


# -- DGL's DataLoader with the wrapper and the storage ----------------------------------------
@pytest.mark.parametrize("mode", ["serial", "thread", "workers"])
@pytest.mark.parametrize("sampler", SAMPLERS)
def test_dgl_loader_yields_ndata_rows(graph, store, seeds, sampler, mode):
    loader = dgl_loader(graph, seeds, with_features(SAMPLERS[sampler](), features=["feat"], labels=["label"]), mode)
    assert attach(loader, {"feat": store}) is loader
    batches = list(loader)  # all kept at once: none may be overwritten by a later fetch
    check_batches(batches, graph, seeds)
    check_batches(list(loader), graph, seeds)  # a second epoch through the same loader


class _RecordingStorage(ZeroCopyStorage):
    def fetch(self, indices, device, pin_memory=False, **kwargs):
        self.threads.add(threading.current_thread().name)
        return super().fetch(indices, device, pin_memory, **kwargs)


def test_thread_mode_fetches_on_dgls_prefetch_thread(graph, store, seeds):
    storage = _RecordingStorage(store)
    storage.threads = set()
    loader = dgl_loader(graph, seeds, with_features(SAMPLERS["full"](), features=["feat"], labels=["label"]), "thread")
    attach(loader, {"feat": storage})
    check_batches(list(loader), graph, seeds)
    assert storage.threads and threading.main_thread().name not in storage.threads


def test_labels_from_an_attached_tensor_and_a_graph_without_features(small_dataset, store, seeds):
    bare = small_dataset.to_dgl(with_data=False)  # nothing in ndata: both names come from attached storages
    loader = dgl_loader(bare, seeds, with_features(SAMPLERS["neighbor"](), features="feat", labels="label"))
    attach(loader, {"feat": store, "label": torch.from_numpy(small_dataset.labels)})
    reference = small_dataset.to_dgl(with_data=True)
    check_batches(list(loader), reference, seeds)


def test_attached_storage_serves_dgls_own_prefetch_node_feats(graph, seeds, small_dataset):
    """With attach, DGL's own sampler options read the attached storage, not g.ndata: a table
    that differs from g.ndata shows which one was read."""
    doubled = FeatureStore(torch.from_numpy(small_dataset.features) * 2, backend="cpu", device="cpu")
    loader = dgl_loader(graph, seeds, SAMPLERS["neighbor"](prefetch_node_feats=["feat"], prefetch_labels=["label"]))
    attach(loader, {"feat": doubled})
    for input_nodes, output_nodes, blocks in loader:
        torch.testing.assert_close(blocks[0].srcdata["feat"], 2 * graph.ndata["feat"][input_nodes], rtol=0, atol=0)
        torch.testing.assert_close(blocks[-1].dstdata["label"], graph.ndata["label"][output_nodes], rtol=0, atol=0)
    assert "feat" in graph.ndata and graph.ndata["feat"].shape == (graph.num_nodes(), doubled.shape[1])  # the user's graph is untouched


@pytest.fixture
def one_sampling_thread():
    """DGL samples neighbours in an OpenMP loop with a generator per thread, so which thread draws
    which node's neighbours, and so the batch, varies on a busy machine: one thread makes it fixed."""
    from dgl.utils import get_num_threads, set_num_threads

    before = get_num_threads()
    set_num_threads(1)
    yield
    set_num_threads(before)


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_same_batches_as_prefetch_node_feats(graph, store, seeds, sampler, one_sampling_thread):
    """The same seed gives the same batches as DGL's own path. DGL shuffles with NumPy's global
    generator and samples neighbours with DGL's, both reseeded per run; serial loaders and one
    sampling thread (DGL's draws are not reproducible across threads). Compared by node id."""
    runs = []
    for ours in (False, True):
        np.random.seed(11)
        dgl.seed(11)
        if ours:
            loader = dgl_loader(graph, seeds, with_features(SAMPLERS[sampler](), features=["feat"], labels=["label"]))
            attach(loader, {"feat": store})
        else:
            loader = dgl_loader(graph, seeds, SAMPLERS[sampler](prefetch_node_feats=["feat"], prefetch_labels=["label"]))
        runs.append(list(loader))
    assert len(runs[0]) == len(runs[1])
    for (in_a, out_a, blocks_a), (in_b, out_b, blocks_b) in zip(*runs):
        assert torch.equal(out_a, out_b)
        order_a, order_b = torch.argsort(in_a), torch.argsort(in_b)
        assert torch.equal(in_a[order_a], in_b[order_b])
        torch.testing.assert_close(blocks_a[0].srcdata["feat"][order_a], blocks_b[0].srcdata["feat"][order_b], rtol=0, atol=0)
        torch.testing.assert_close(blocks_a[-1].dstdata["label"], blocks_b[-1].dstdata["label"], rtol=0, atol=0)
        for a, b in zip(blocks_a, blocks_b):  # the same edges, as (source id, destination id) pairs
            edges_a = {tuple(e) for e in torch.stack(_global_edges(a), 1).tolist()}
            assert edges_a == {tuple(e) for e in torch.stack(_global_edges(b), 1).tolist()}


def _global_edges(block):
    src, dst = block.edges()
    return block.srcdata[dgl.NID][src], block.dstdata[dgl.NID][dst]


# -- errors reach the loop ------------------------------------------------------------------
class _FailingStorage(ZeroCopyStorage):
    def fetch(self, indices, device, pin_memory=False, **kwargs):
        raise RuntimeError("feature server went away")


@pytest.mark.parametrize("mode", ["serial", "thread"])
def test_fetch_errors_reach_the_loop(graph, seeds, small_dataset, mode):
    short = FeatureStore(small_dataset.features[:100], backend="cpu", device="cpu")  # ids >= 100 are out of range
    loader = dgl_loader(graph, seeds, with_features(SAMPLERS["neighbor"](), features=["feat"]), mode)
    attach(loader, {})
    loader.attach_data("feat", ZeroCopyStorage(short))  # attach_data after attach works too; no row check here
    with pytest.raises(IndexError, match="out of range for a table of 100 rows"):
        for _ in loader:
            pass
    loader.attach_data("feat", _FailingStorage(short))
    with pytest.raises(RuntimeError, match="feature server went away"):
        for _ in loader:
            pass


@pytest.mark.parametrize("mode", ["serial", "thread"])
def test_missing_attach_names_it(graph, store, seeds, mode):
    sampler = with_features(SAMPLERS["neighbor"](), features=["feat"], labels=["label"])
    loader = dgl_loader(graph, seeds, sampler, mode)  # g.ndata has 'feat', but the wrapper never falls back to it
    with pytest.raises(KeyError, match=r"dgl_zerocopy\.loading\.dgl\.attach\(loader, \{'feat': store\}\)"):
        next(iter(loader))
    attach(loader, {"other": store})
    with pytest.raises(KeyError, match=r"no storage attached as 'feat' \(attached: 'other'\).*attach_data\('feat'"):
        next(iter(loader))


def test_bad_input_names_the_fix(graph, store, seeds, small_dataset):
    with pytest.raises(TypeError, match="block sampler"):
        with_features(object())
    with pytest.raises(TypeError, match="feature names"):
        with_features(SAMPLERS["full"](), features=[3])
    with pytest.raises(TypeError, match="dgl.dataloading.DataLoader"):
        attach(object(), {"feat": store})
    loader = dgl_loader(graph, seeds, with_features(SAMPLERS["full"]()))
    with pytest.raises(ValueError, match="has 100 rows but the graph has 3000 nodes"):
        attach(loader, {"feat": FeatureStore(small_dataset.features[:100], backend="cpu", device="cpu")})
    not_blocks = with_features(dgl.dataloading.ShaDowKHopSampler([2]))  # returns a subgraph, not blocks
    with pytest.raises(TypeError, match="with_features wraps block samplers only"):
        not_blocks.sample(graph, seeds[:10])


# -- the feature source and the CLI -----------------------------------------------------------
def test_dgl_storage_source_trains(small_dataset):
    cfg = TrainConfig(feature_source="dgl-storage", fanouts=[5, 5], batch_size=64, hidden=32, epochs=3, lr=0.01, device="cpu", dropout=0.2)
    history = train(cfg, small_dataset, progress=False)
    assert history[-1].loss < history[0].loss
    assert history[-1].test_acc > 1.0 / small_dataset.num_classes + 0.4


@pytest.mark.slow  # the console script in a process; the source trains in-process in the test above
def test_cli_trains_with_dgl_storage():
    args = ["--num-nodes", "1500", "--fanouts", "4,4", "--batch-size", "128", "--hidden", "16", "--epochs", "1", "--no-progress"]
    r = run_cli("train", *args, "--feature-source", "dgl-storage", "--device", "cpu")
    assert r.returncode == 0, r.stderr
    assert "feature source dgl-storage" in r.stdout and "final test accuracy" in r.stdout


# -- CUDA -------------------------------------------------------------------------------------
@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("backend", ["cpu", "auto"])
def test_cuda_fetch_is_a_future_ordered_by_events(small_dataset, backend):
    device = torch.device("cuda", torch.cuda.current_device())
    table = torch.from_numpy(small_dataset.features)
    with FeatureStore(table, backend=backend, device=device) as cuda_store:
        storage = ZeroCopyStorage(cuda_store)
        ids = torch.randint(0, len(table), (1000,))
        consumer = torch.cuda.Stream(device)
        with torch.cuda.stream(consumer):
            future = storage.fetch(ids, device, True)
            assert hasattr(future, "wait")
            rows = future.wait()
            later = storage.fetch(torch.arange(10), device).wait()  # must not disturb `rows`
            total = rows.sum()
        consumer.synchronize()
        assert rows.device == device and torch.equal(rows.cpu(), table[ids])
        assert torch.equal(later.cpu(), table[:10]) and torch.isclose(total.cpu(), table[ids].sum())
