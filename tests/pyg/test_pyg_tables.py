"""The tables a PyG loader gathers are checked when it is built: one row per node (or edge) of their type, the
error naming the key and both counts; a tensor that requires grad is served as PyG serves it (sliced, with its
autograd graph)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("torch_geometric")

from torch_geometric.data import Data, HeteroData  # noqa: E402

from dgl_zerocopy.pyg import FeatureStore, GraphStore, LinkNeighborLoader, NeighborLoader  # noqa: E402


def small_graph(num_nodes: int = 100, num_edges: int = 300) -> Data:
    torch.manual_seed(0)
    return Data(x=torch.randn(num_nodes, 4), edge_index=torch.randint(0, num_nodes, (2, num_edges)), y=torch.arange(num_nodes))


def small_hetero() -> HeteroData:
    torch.manual_seed(0)
    data = HeteroData()
    data["paper"].x = torch.randn(10, 3)
    data["author"].x = torch.randn(20, 3)
    data["author", "writes", "paper"].edge_index = torch.stack([torch.randint(0, 20, (50,)), torch.randint(0, 10, (50,))])
    data["paper", "rev_writes", "author"].edge_index = torch.stack([torch.randint(0, 10, (40,)), torch.randint(0, 20, (40,))])
    return data


def test_a_node_table_of_the_wrong_length_is_refused_at_build_naming_the_key_and_both_counts():
    with pytest.raises(ValueError, match=r"features\['nope'\] has 3 rows, but the graph has 100 nodes.*pass one of 100 rows"):
        NeighborLoader(small_graph(), num_neighbors=[5, 5], batch_size=10, features={"nope": torch.randn(3, 3)})


def test_an_edge_table_of_the_wrong_length_is_refused_at_build():
    data = small_graph()
    data.edge_attr = torch.randn(300, 2)  # an edge attribute of the data, replaced by a table of the wrong length
    with pytest.raises(ValueError, match=r"features\['edge_attr'\] has 7 rows, but the graph has 300 edges"):
        NeighborLoader(data, num_neighbors=[5], batch_size=10, features={"edge_attr": torch.randn(7, 2)})


def test_a_link_loader_checks_its_tables_too():
    data = small_graph()
    with pytest.raises(ValueError, match=r"features\['nope'\] has 99 rows, but the graph has 100 nodes"):
        LinkNeighborLoader(data, num_neighbors=[3], batch_size=8, edge_label_index=data.edge_index[:, :20], features={"nope": torch.randn(99, 2)})


def test_a_hetero_table_names_its_type():
    with pytest.raises(ValueError, match=r"features\[\('author', 'z'\)\] has 10 rows, but the graph has 20 nodes of type 'author'"):
        NeighborLoader(small_hetero(), num_neighbors=[3], batch_size=4, input_nodes="paper", features={("author", "z"): torch.randn(10, 2)})
    edge_type = ("author", "writes", "paper")
    with pytest.raises(ValueError, match=r"has 49 rows, but the graph has 50 edges of type \('author', 'writes', 'paper'\)"):
        NeighborLoader(small_hetero(), num_neighbors=[3], batch_size=4, input_nodes="paper", features={(edge_type, "w"): torch.randn(49, 2)})


def test_tables_of_the_right_length_are_served_equal_to_indexing():
    data = small_graph()
    data.edge_attr = torch.randn(300, 2)
    extra, weights = torch.randn(100, 3), torch.randn(300, 2)
    batch = next(iter(NeighborLoader(data, num_neighbors=[5, 5], batch_size=10, features={"extra": extra, "edge_attr": weights})))
    assert torch.equal(batch.extra, extra[batch.n_id]) and torch.equal(batch.x, data.x[batch.n_id])
    assert torch.equal(batch.edge_attr, weights[batch.e_id])


def test_a_remote_feature_store_with_a_short_edge_table_is_refused_at_build():
    data = small_graph()
    feature_store, graph_store = FeatureStore.from_data(data), GraphStore.from_data(data)
    feature_store.put_edge_tensor(torch.randn(5, 2), "w")
    with pytest.raises(ValueError, match=r"FeatureStore\['w'\] has 5 rows, but the graph has 300 edges"):
        NeighborLoader((feature_store, graph_store), num_neighbors=[5], batch_size=10, input_nodes=torch.arange(10))
    feature_store.close()


def test_a_remote_feature_store_with_a_short_node_table_is_refused_at_build():
    data = small_graph()
    feature_store, graph_store = FeatureStore.from_data(data), GraphStore.from_data(data)
    feature_store.put_tensor(torch.randn(60, 2), group_name=None, attr_name="short", index=None)
    with pytest.raises(ValueError, match=r"FeatureStore\['short'\] has 60 rows, but the graph has 100 nodes"):
        NeighborLoader((feature_store, graph_store), num_neighbors=[5], batch_size=10, input_nodes=torch.arange(10))
    feature_store.close()


def test_a_parameter_in_the_data_is_served_with_its_gradient_as_pyg_serves_it():
    data = small_graph()
    data.x = torch.nn.Parameter(torch.randn(100, 4))
    batch = next(iter(NeighborLoader(data, num_neighbors=[5, 5], batch_size=10)))
    assert torch.equal(batch.x.detach(), data.x.detach()[batch.n_id])
    assert batch.x.requires_grad
    batch.x.sum().backward()
    expected = torch.zeros(100).index_add_(0, batch.n_id, torch.ones(len(batch.n_id)))
    assert torch.equal(data.x.grad[:, 0], expected), "each sampled row's gradient reaches the parameter"


def test_a_parameter_in_a_remote_feature_store_keeps_its_gradient():
    data = small_graph()
    feature_store = FeatureStore.from_data(data)
    embedding = torch.nn.Parameter(torch.randn(100, 4))
    feature_store.put_tensor(embedding, group_name=None, attr_name="emb", index=None)
    ids = torch.tensor([3, 1, 3])
    rows = feature_store.get_tensor(group_name=None, attr_name="emb", index=ids)
    assert torch.equal(rows.detach(), embedding.detach()[ids]) and rows.requires_grad
    feature_store.close()


def test_a_parameter_given_as_features_is_refused_with_the_fix():
    with pytest.raises(TypeError, match=r"features\['emb'\] requires grad.*leave it in the Data"):
        NeighborLoader(small_graph(), num_neighbors=[5], batch_size=10, features={"emb": torch.nn.Parameter(torch.randn(100, 2))})
