"""PyG's remote-backend interfaces over our store (dgl_zerocopy/pyg/stores.py) on the CPU.

:class:`FeatureStore` and :class:`GraphStore`: put, get, remove and size as PyG's interface defines them, the
refusal of partial puts, ``from_data`` for ``Data`` and ``HeteroData``; ``NeighborLoader((feature_store,
graph_store), ...)`` and ``LinkNeighborLoader`` batches held to the in-memory loader's contract, edge features
by ``e_id`` included (PyG's own remote path cannot return them: pyg-team/pytorch_geometric#9566), homogeneous
and hetero; graphs put as COO, CSR and CSC all sample valid batches, their edge ids in the order put.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("torch_geometric")

from test_pyg_loaders import EDGE_TYPES, NODES, check_hetero, check_homogeneous, make_data, make_hetero  # noqa: E402

from dgl_zerocopy.pyg import FeatureStore, GraphStore, LinkNeighborLoader, NeighborLoader  # noqa: E402
from dgl_zerocopy.store.feature_store import FeatureStore as TableStore  # noqa: E402

# -- FeatureStore --------------------------------------------------------------------------------------------------


def test_feature_store_put_get_size_remove():
    fs = FeatureStore()
    x, y = torch.randn(10, 4), torch.arange(10) * 3
    assert fs.put_tensor(x, group_name=None, attr_name="x", index=None)
    assert fs.put_tensor(y, group_name=None, attr_name="y", index=None)
    assert isinstance(fs._nodes[(None, "x")], TableStore) and fs._nodes[(None, "y")] is y, "tables to our store, labels as given"
    assert torch.equal(fs.get_tensor(group_name=None, attr_name="x", index=None), x)
    ids = torch.tensor([7, 0, 7, 3])
    assert torch.equal(fs.get_tensor(group_name=None, attr_name="x", index=ids), x[ids])
    assert torch.equal(fs.get_tensor(group_name=None, attr_name="y", index=ids), y[ids])
    many = fs.multi_get_tensor([(None, "x", ids), (None, "y", ids)])
    assert torch.equal(many[0], x[ids]) and torch.equal(many[1], y[ids])
    assert fs.get_tensor_size(group_name=None, attr_name="x") == (10, 4) and fs.get_tensor_size(group_name=None, attr_name="y") == (10,)
    assert sorted(a.attr_name for a in fs.get_all_tensor_attrs()) == ["x", "y"]
    assert fs.remove_tensor(group_name=None, attr_name="x", index=None) and not fs.remove_tensor(group_name=None, attr_name="x", index=None)
    assert fs.get_tensor_size(group_name=None, attr_name="x") is None
    with pytest.raises(KeyError, match="no table 'x'"):
        fs.get_tensor(group_name=None, attr_name="x", index=None)
    assert [a.attr_name for a in fs.get_all_tensor_attrs()] == ["y"]
    fs.close()


def test_feature_store_refuses_partial_puts():
    fs = FeatureStore()
    with pytest.raises(ValueError, match=r"'x' came with index="):
        fs.put_tensor(torch.randn(3, 4), group_name=None, attr_name="x", index=torch.tensor([0, 1, 2]))
    assert fs.get_all_tensor_attrs() == []
    assert fs.put_tensor(torch.randn(3, 4), group_name=None, attr_name="x", index=slice(None)), "the whole table: fine"


def test_feature_store_holds_a_compressed_store_as_given():
    x = torch.randn(12, 6)
    store = TableStore(x, compression="fp16")
    fs = FeatureStore()
    fs.put_tensor(store, group_name="paper", attr_name="x", index=None)
    ids = torch.tensor([11, 2, 5])
    got = fs.get_tensor(group_name="paper", attr_name="x", index=ids)
    assert torch.equal(got, store.codec.decode(x.half()[ids], ids)) and torch.allclose(got, x[ids], atol=1e-2, rtol=1e-3)
    assert fs.get_tensor_size(group_name="paper", attr_name="x") == (12, 6)


def test_edge_tables():
    fs = FeatureStore()
    w, attr = torch.rand(20), torch.randn(20, 3)
    fs.put_edge_tensor(attr, "edge_attr")
    fs.put_edge_tensor(w, "w", edge_type=EDGE_TYPES[0])
    assert fs.edge_tensor_attrs() == [(None, "edge_attr"), (EDGE_TYPES[0], "w")]
    ids = torch.tensor([19, 0, 4])
    assert torch.equal(fs.get_edge_tensor("edge_attr", ids), attr[ids]) and torch.equal(fs.get_edge_tensor("edge_attr"), attr)
    assert torch.equal(fs.get_edge_tensor("w", ids, EDGE_TYPES[0]), w[ids])
    with pytest.raises(KeyError, match="no edge table 'w' of edge type None"):
        fs.get_edge_tensor("w", ids)
    assert fs.get_all_tensor_attrs() == [], "edge tables are not node tables"


# -- GraphStore ----------------------------------------------------------------------------------------------------


def test_graph_store_put_get_remove_and_csc():
    data = make_data()
    gs = GraphStore()
    row, col = data.edge_index
    assert gs.put_edge_index((row, col), edge_type=None, layout="coo", size=(60, 60))
    got = gs.get_edge_index(edge_type=None, layout="coo", size=(60, 60))
    assert got[0] is row and got[1] is col
    [attr] = gs.get_all_edge_attrs()
    assert attr.edge_type is None and attr.layout.value == "coo" and attr.size == (60, 60) and not attr.is_sorted
    src, colptr, perm = gs.csc()
    assert torch.equal(colptr, torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(col, minlength=60).cumsum(0)]))
    assert torch.equal(src, row[perm]) and torch.equal(col[perm], col.sort(stable=True).values)
    assert gs.remove_edge_index(edge_type=None, layout="coo", size=(60, 60))
    assert gs.get_all_edge_attrs() == []
    with pytest.raises(KeyError):
        gs.get_edge_index(edge_type=None, layout="coo", size=(60, 60))


def test_from_data_homogeneous():
    data = make_data()
    fs, gs = FeatureStore.from_data(data), GraphStore.from_data(data)
    assert sorted(a.attr_name for a in fs.get_all_tensor_attrs()) == ["x", "y"]
    assert fs.edge_tensor_attrs() == [(None, "edge_attr"), (None, "w")]
    assert torch.equal(fs.get_tensor(group_name=None, attr_name="x", index=None), data.x) and torch.equal(fs.get_edge_tensor("w"), data.w)
    [attr] = gs.get_all_edge_attrs()
    assert attr.size == (60, 60)
    row, col = gs.get_edge_index(attr)
    assert torch.equal(torch.stack([row, col]), data.edge_index)


def hetero_with_features():
    """make_hetero() with a table for "inst": PyG's remote backend learns its node types from the feature store."""
    h = make_hetero()
    h["inst"].x = torch.randn(NODES["inst"], 2)
    return h


def test_from_data_hetero():
    h = hetero_with_features()
    fs, gs = FeatureStore.from_data(h), GraphStore.from_data(h)
    assert sorted((a.group_name, a.attr_name) for a in fs.get_all_tensor_attrs()) == [("author", "x"), ("inst", "x"), ("paper", "x"), ("paper", "y")]
    assert fs.edge_tensor_attrs() == [(("author", "writes", "paper"), "edge_attr")]
    attrs = {a.edge_type: a for a in gs.get_all_edge_attrs()}
    assert set(attrs) == set(EDGE_TYPES)
    for et, attr in attrs.items():
        assert attr.size == (NODES[et[0]], NODES[et[2]])
        assert torch.equal(torch.stack(gs.get_edge_index(attr)), h[et].edge_index)


# -- loaders over the pair -------------------------------------------------------------------------------------


@pytest.mark.parametrize("prefetch", [0, 2])
def test_remote_batches_equal_the_in_memory_loaders(prefetch):
    """The same CSC (PyG sorts the COO the same way), so the same picks for the same seed: every field equal,
    edge features included."""
    data = make_data()
    pair = (FeatureStore.from_data(data), GraphStore.from_data(data))
    remote = NeighborLoader(pair, [3, 2], input_nodes=torch.arange(60), batch_size=16, shuffle=True, prefetch=prefetch)
    local = NeighborLoader(data, [3, 2], input_nodes=torch.arange(60), batch_size=16, shuffle=True, prefetch=prefetch)
    torch.manual_seed(2)
    ours = list(remote)
    torch.manual_seed(2)
    theirs = list(local)
    assert len(ours) == len(theirs) == 4
    for a, b in zip(ours, theirs):
        check_homogeneous(data, a, a.n_id[: a.batch_size])
        for name in ("n_id", "e_id", "edge_index", "x", "y", "edge_attr", "w", "input_id"):
            assert torch.equal(a[name], b[name]), name
        assert a.num_sampled_nodes == b.num_sampled_nodes and a.batch_size == b.batch_size


def test_remote_hetero_batches_with_edge_features():
    h = hetero_with_features()
    pair = (FeatureStore.from_data(h), GraphStore.from_data(h))
    seeds = torch.tensor([4, 0, 33])
    loader = NeighborLoader(pair, [3, 2], input_nodes=("paper", seeds), batch_size=3)
    batch = next(iter(loader))
    check_hetero(h, batch, "paper", seeds)  # edge_attr of ("author", "writes", "paper") by e_id among the checks
    et = ("author", "writes", "paper")
    assert batch[et].edge_attr.shape == (batch[et].edge_index.size(1), 2)
    assert torch.equal(batch["paper"].y, h["paper"].y[batch["paper"].n_id])
    assert torch.equal(batch["inst"].x, h["inst"].x[batch["inst"].n_id])


def test_remote_link_loader_with_edge_features():
    data = make_data()
    pair = (FeatureStore.from_data(data), GraphStore.from_data(data))
    label_index = data.edge_index[:, 100:132]
    batch = next(iter(LinkNeighborLoader(pair, [3, 2], edge_label_index=(None, label_index), batch_size=32, neg_sampling_ratio=1.0)))
    assert torch.equal(batch.n_id[batch.edge_label_index[:, :32]], label_index)
    assert torch.equal(data.edge_index[:, batch.e_id], batch.n_id[batch.edge_index])
    assert torch.equal(batch.edge_attr, data.edge_attr[batch.e_id]) and torch.equal(batch.x, data.x[batch.n_id])


def _sorted_by(edge_index: torch.Tensor, key: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(perm, edges in that order, pointer over key)``."""
    perm = torch.argsort(key, stable=True)
    ptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(key, minlength=n).cumsum(0)])
    return perm, edge_index[:, perm], ptr


def put_graph(gs: GraphStore, edge_index: torch.Tensor, layout: str, size: tuple[int, int], edge_type=None) -> torch.Tensor:
    """Put ``edge_index`` in ``layout``; returns the permutation of its edges in the order put (edge ids)."""
    if layout == "coo":
        gs.put_edge_index((edge_index[0], edge_index[1]), edge_type=edge_type, layout="coo", size=size)
        return torch.arange(edge_index.size(1))
    if layout == "csr":
        perm, edges, ptr = _sorted_by(edge_index, edge_index[0], size[0])
        gs.put_edge_index((ptr, edges[1]), edge_type=edge_type, layout="csr", size=size)
    else:
        perm, edges, ptr = _sorted_by(edge_index, edge_index[1], size[1])
        gs.put_edge_index((edges[0], ptr), edge_type=edge_type, layout="csc", size=size, is_sorted=True)
    return perm


@pytest.mark.parametrize("layout", ["coo", "csr", "csc"])
def test_every_layout_samples_valid_batches(layout):
    data = make_data()
    gs, fs = GraphStore(), FeatureStore()
    perm = put_graph(gs, data.edge_index, layout, (60, 60))
    fs.put_tensor(data.x, group_name=None, attr_name="x", index=None)
    fs.put_edge_tensor(data.edge_attr[perm], "edge_attr")  # in the order the edges were put
    put_order = data.edge_index[:, perm]
    seen = []
    for batch in NeighborLoader((fs, gs), [3, 2], input_nodes=torch.arange(60), batch_size=16):
        assert torch.equal(put_order[:, batch.e_id], batch.n_id[batch.edge_index]), "e_id: the edge ids in the order put"
        assert torch.equal(batch.edge_attr, data.edge_attr[perm][batch.e_id]) and torch.equal(batch.x, data.x[batch.n_id])
        assert sum(batch.num_sampled_edges) == batch.edge_index.size(1) and len(batch.n_id.unique()) == len(batch.n_id)
        seen.append(batch.n_id[: batch.batch_size])
    assert torch.equal(torch.cat(seen), torch.arange(60))


def test_hetero_edge_types_in_three_layouts():
    h = hetero_with_features()
    fs, gs = FeatureStore(), GraphStore()
    for t in h.node_types:
        fs.put_tensor(h[t].x, group_name=t, attr_name="x", index=None)
    perms = {}
    for et, layout in zip(EDGE_TYPES, ["coo", "csr", "csc", "csr"]):
        perms[et] = put_graph(gs, h[et].edge_index, layout, (NODES[et[0]], NODES[et[2]]), edge_type=et)
    writes = ("author", "writes", "paper")
    fs.put_edge_tensor(h[writes].edge_attr[perms[writes]], "edge_attr", writes)
    batch = next(iter(NeighborLoader((fs, gs), [3, 2], input_nodes=("paper", torch.arange(10)), batch_size=10)))
    for et in EDGE_TYPES:
        src, _, dst = et
        ei = batch[et].edge_index
        put_order = h[et].edge_index[:, perms[et]]
        assert torch.equal(put_order[:, batch[et].e_id], torch.stack([batch[src].n_id[ei[0]], batch[dst].n_id[ei[1]]])), et
    assert torch.equal(batch[writes].edge_attr, h[writes].edge_attr[perms[writes]][batch[writes].e_id])
    for t in h.node_types:
        assert torch.equal(batch[t].x, h[t].x[batch[t].n_id])
