"""Our PyG loaders with worker processes under every start method (dgl_zerocopy/pyg/loaders.py, features.py):
``spawn`` and ``forkserver`` (Python 3.14's default on Linux) pickle the loader into each worker, ``fork`` does not.

A table in private memory is moved into shared memory in place before its store is made (the data's tensor
and the store share it: no copy), a table that maps a file is reopened from the file, and one whose memory
torch does not own is copied into shared memory once with one warning naming its size. Each epoch is bounded
by the DataLoader's ``timeout`` and its workers are gone when it ends. ``spawn`` runs in the slow tier (about
30 s here, importing torch in each worker); ``forkserver`` stands in for it in the fast one."""

from __future__ import annotations

import multiprocessing
import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("torch_geometric")

from torch_geometric.data import Data, HeteroData  # noqa: E402

from dgl_zerocopy.pyg import LinkNeighborLoader, NeighborLoader  # noqa: E402
from dgl_zerocopy.pyg.loaders import workers_are_sent_data  # noqa: E402

N, E = 100, 600
WAIT_S = 120  # per batch (the DataLoader's timeout): a worker that hangs fails the test, never the suite


def make_data() -> Data:
    gen = torch.Generator().manual_seed(0)
    return Data(
        x=torch.randn(N, 8, generator=gen), edge_index=torch.randint(0, N, (2, E), generator=gen), edge_attr=torch.randn(E, 3, generator=gen), y=torch.arange(N)
    )


def children() -> set[int]:
    return {process.pid for process in multiprocessing.active_children()}


@pytest.mark.parametrize("method", [pytest.param("spawn", marks=pytest.mark.slow), pytest.param("forkserver", marks=pytest.mark.slow), "fork"])
def test_workers_under_every_start_method(method):
    data = make_data()
    before = children()
    loader = NeighborLoader(data, [3, 2], batch_size=25, num_workers=2, multiprocessing_context=method, timeout=WAIT_S)
    x_store = loader.route.node[(None, "x")]
    assert x_store._table.data_ptr() == data.x.data_ptr(), "the store serves the data's own memory"
    assert data.x.is_shared() == (method != "fork"), "moved to shared memory where workers are sent it, in place"
    seen = []
    for batch in loader:
        assert torch.equal(batch.x, data.x[batch.n_id]) and torch.equal(batch.edge_attr, data.edge_attr[batch.e_id])
        assert torch.equal(batch.y, data.y[batch.n_id])
        seen.append(batch.n_id[: batch.batch_size])
    assert torch.equal(torch.sort(torch.cat(seen)).values, torch.arange(N))
    assert loader.data is data and x_store._table.data_ptr() == data.x.data_ptr()
    assert children() <= before, "the epoch's workers are gone"


@pytest.mark.slow
def test_hetero_links_under_forkserver():
    h = HeteroData()
    h["user"].x = torch.randn(30, 4)
    h["item"].x = torch.randn(20, 5)
    et = ("user", "buys", "item")
    h[et].edge_index = torch.stack([torch.randint(0, 30, (80,)), torch.randint(0, 20, (80,))])
    h["item", "rev_buys", "user"].edge_index = h[et].edge_index.flip(0)
    loader = LinkNeighborLoader(h, [3], edge_label_index=(et, h[et].edge_index), batch_size=20, num_workers=1, multiprocessing_context="forkserver", timeout=WAIT_S)  # fmt: skip
    count = 0
    for batch in loader:
        for node_type in ("user", "item"):
            assert torch.equal(batch[node_type].x, h[node_type].x[batch[node_type].n_id])
        count += 1
    assert count == 4


@pytest.mark.slow
def test_a_table_replaced_before_the_workers_start_is_sent_as_pyg_sends_it():
    data = make_data()
    loader = NeighborLoader(data, [3], batch_size=50, num_workers=1, multiprocessing_context="spawn", timeout=WAIT_S)
    data.x = torch.randn(N, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the replaced table's warning (tests/pyg/test_pyg_uses.py)
        for batch in loader:
            assert torch.equal(batch.x, data.x[batch.n_id])


@pytest.mark.skipif(not hasattr(torch.UntypedStorage, "resizable"), reason="torch < 2.3 cannot tell a torch.from_numpy tensor's memory from torch's own")
def test_a_numpy_table_is_copied_into_shared_memory_once_with_a_warning():
    data = make_data()
    data.x = torch.from_numpy(np.random.default_rng(0).standard_normal((N, 8), dtype=np.float32))
    with pytest.warns(UserWarning, match=r"copied once into shared memory \(3\.1 KiB\)"):
        loader = NeighborLoader(data, [3], batch_size=50, num_workers=1, multiprocessing_context="spawn")
    assert data.x.is_shared() and loader.route.node[(None, "x")]._table.data_ptr() == data.x.data_ptr()


@pytest.mark.slow
def test_a_table_mapping_a_file_is_reopened_from_the_file(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.random.default_rng(0).standard_normal((N, 8), dtype=np.float32))
    data = make_data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.from_numpy of a read-only map
        data.x = torch.from_numpy(np.load(path, mmap_mode="r"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no copy, no warning
        loader = NeighborLoader(data, [3], batch_size=50, num_workers=1, multiprocessing_context="spawn", timeout=WAIT_S)
    store = loader.route.node[(None, "x")]
    assert store._file is not None and store._file[0] == str(path), "sent to workers as its file"
    assert not data.x.is_shared()
    for batch in loader:
        assert torch.equal(batch.x, data.x[batch.n_id])


def test_which_start_methods_send_the_data():
    assert not workers_are_sent_data({})
    assert not workers_are_sent_data({"num_workers": 2, "multiprocessing_context": "fork"})
    assert workers_are_sent_data({"num_workers": 2, "multiprocessing_context": "forkserver"})
    assert workers_are_sent_data({"num_workers": 2, "multiprocessing_context": multiprocessing.get_context("spawn")})


@pytest.mark.slow
def test_the_remote_backend_pair_under_forkserver():
    """Our FeatureStore's tables, put as private tensors, are rebuilt over shared memory for the workers."""
    from dgl_zerocopy.pyg import FeatureStore, GraphStore

    data = make_data()
    feature_store = FeatureStore.from_data(data)
    pair = (feature_store, GraphStore.from_data(data))
    loader = NeighborLoader(pair, [3], input_nodes=torch.arange(N), batch_size=50, num_workers=1, multiprocessing_context="forkserver", timeout=WAIT_S)  # fmt: skip
    assert data.x.is_shared() and data.edge_attr.is_shared(), "moved into shared memory in place"
    assert feature_store._nodes[(None, "x")]._table.data_ptr() == data.x.data_ptr(), "the store serves that memory"
    count = 0
    for batch in loader:
        assert torch.equal(batch.x, data.x[batch.n_id]) and torch.equal(batch.edge_attr, data.edge_attr[batch.e_id])
        count += 1
    assert count == 2
    assert feature_store.share_memory_() is feature_store and feature_store._nodes[(None, "x")]._table.data_ptr() == data.x.data_ptr()


def test_what_a_worker_is_sent_and_a_shallow_copy():
    import copy
    import pickle

    data = make_data()
    loader = NeighborLoader(data, [3], batch_size=50, num_workers=1, multiprocessing_context="forkserver")
    sent = pickle.loads(pickle.dumps(loader))
    assert "x" not in sent.data and "edge_attr" not in sent.data and torch.equal(sent.data.y, data.y), "the tables go as stores"
    assert set(sent.route.node) == {(None, "x")} and not sent.route.sources
    assert copy.copy(loader).data is data, "a copy keeps the data"
