"""PyG's own code around our loaders (dgl_zerocopy/pyg/loaders.py, features.py): ``loader.data`` as PyG's (the
user's data with its features, our stores over the same memory), ``BasicGNN.inference`` (with and without its
cache), batches that follow the data as PyG's do (compared with PyG's ``filter_data``), PyG's wrappers
(``PrefetchLoader``, ``CachedLoader``, ``ZipLoader``, ``ImbalancedSampler`` as ``sampler=``), ``trim_to_layer``
through ``num_sampled_nodes``/``num_sampled_edges``, ``HGTConv``/``to_hetero`` on our hetero batches, and the
loaders' signatures (PyG's types and defaults).
Worker processes under every start method are in tests/pyg/test_pyg_workers.py."""

from __future__ import annotations

import inspect
import types
import typing
import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("torch_geometric")

from torch_geometric.data import Data, HeteroData  # noqa: E402
from torch_geometric.loader import CachedLoader, ImbalancedSampler, PrefetchLoader, ZipLoader  # noqa: E402
from torch_geometric.loader import LinkNeighborLoader as PygLinkNeighborLoader  # noqa: E402
from torch_geometric.loader import NeighborLoader as PygNeighborLoader  # noqa: E402
from torch_geometric.loader.utils import filter_data  # noqa: E402
from torch_geometric.nn import HGTConv, SAGEConv, to_hetero  # noqa: E402
from torch_geometric.nn.models import GraphSAGE  # noqa: E402

from dgl_zerocopy.pyg import LinkNeighborLoader, NeighborLoader  # noqa: E402

N, E = 80, 500


def make_data(seed: int = 0) -> Data:
    gen = torch.Generator().manual_seed(seed)
    return Data(
        x=torch.randn(N, 6, generator=gen),
        edge_index=torch.randint(0, N, (2, E), generator=gen),
        edge_attr=torch.randn(E, 2, generator=gen),
        y=torch.randint(0, 3, (N,), generator=gen),
    )


def expected(data: Data, batch: Data) -> Data:
    """What PyG's own loader gives for the nodes and edges our batch sampled: PyG's ``filter_data`` of ``data``."""
    row, col = batch.edge_index
    return filter_data(data, batch.n_id, row, col, batch.e_id, None)


def assert_as_pyg(data: Data, batch: Data) -> None:
    ref = expected(data, batch)
    sampler_fields = {"n_id", "e_id", "batch", "num_sampled_nodes", "num_sampled_edges", "input_id", "seed_time", "batch_size"}
    assert set(ref.keys()) == set(batch.keys()) - sampler_fields, (sorted(ref.keys()), sorted(batch.keys()))
    for key in ref.keys():
        assert torch.equal(batch[key], ref[key]), key


# -- loader.data ----------------------------------------------------------------------------------------------------


def test_loader_data_is_the_users_data_and_our_store_shares_its_memory():
    data = make_data()
    loader = NeighborLoader(data, [3, 2], batch_size=16)
    assert loader.data is data and loader.data.num_nodes == N and loader.data.x is data.x
    table = loader.route.node[(None, "x")]._table
    assert np.shares_memory(table.numpy(), data.x.numpy()), "no second copy of the table"
    assert np.shares_memory(loader.route.edge[(None, "edge_attr")]._table.numpy(), data.edge_attr.numpy())
    for batch in loader:
        assert_as_pyg(data, batch)


@pytest.mark.parametrize("cache", [False, True])
def test_basic_gnn_inference_over_our_loader_equals_the_full_graph(cache):
    """PyG's layer-wise inference (reads ``loader.data.x``, ``len(loader.dataset) == loader.data.num_nodes``)."""
    torch.manual_seed(0)
    data = make_data()
    model = GraphSAGE(6, 8, num_layers=2, out_channels=3).eval()
    loader = NeighborLoader(data, [-1], batch_size=32, shuffle=False)
    with torch.no_grad():
        full = model(data.x, data.edge_index)
        layered = model.inference(loader, progress_bar=False, cache=cache)
    assert torch.allclose(layered, full, atol=1e-5)


# -- the batch follows the data, as PyG's ----------------------------------------------------------------------------


def test_a_table_set_after_the_loader_is_built_is_served_as_pyg_serves_it():
    data = make_data()
    loader = NeighborLoader(data, [3, 2], batch_size=16)
    data.x = torch.randn(N, 6)  # a new table: PyG's loader slices it
    data.z = torch.randn(N, 4)  # a new attribute
    del data.edge_attr  # gone: the batch has none
    with pytest.warns(UserWarning, match=r"data.x was replaced after the loader was built"):
        batch = next(iter(loader))
    assert_as_pyg(data, batch)
    assert "edge_attr" not in batch
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once
        for batch in loader:
            assert_as_pyg(data, batch)


def test_a_table_written_in_place_is_served_new_from_our_store():
    data = make_data()
    loader = NeighborLoader(data, [3], batch_size=16)
    data.x.mul_(2.0)  # the store reads the same memory
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batch = next(iter(loader))
    assert_as_pyg(data, batch)


def test_a_table_given_in_features_stays_ours_whatever_the_data_holds():
    data = make_data()
    table = torch.randn(N, 6)
    loader = NeighborLoader(data, [3], batch_size=16, features={"x": table})
    data.x = torch.randn(N, 6)
    batch = next(iter(loader))
    assert torch.equal(batch.x, table[batch.n_id])


def test_hetero_loader_data_and_a_replaced_table():
    h = HeteroData()
    h["paper"].x = torch.randn(30, 4)
    h["author"].x = torch.randn(20, 3)
    h["author", "writes", "paper"].edge_index = torch.stack([torch.randint(0, 20, (90,)), torch.randint(0, 30, (90,))])
    h["paper", "rev", "author"].edge_index = torch.stack([torch.randint(0, 30, (60,)), torch.randint(0, 20, (60,))])
    loader = NeighborLoader(h, [3, 2], input_nodes=("paper", torch.arange(8)), batch_size=8)
    assert loader.data is h and loader.data["paper"].x is h["paper"].x
    h["author"].x = torch.randn(20, 3)
    with pytest.warns(UserWarning, match=r"data\['author'\].x was replaced"):
        batch = next(iter(loader))
    for node_type in ("paper", "author"):
        assert torch.equal(batch[node_type].x, h[node_type].x[batch[node_type].n_id]), node_type


# -- PyG's wrappers --------------------------------------------------------------------------------------------------


def test_prefetch_and_cached_loaders_over_ours():
    data = make_data()
    loader = NeighborLoader(data, [3, 2], batch_size=16)
    batches = list(PrefetchLoader(loader, device="cpu"))
    assert len(batches) == len(loader)
    for batch in batches:
        assert_as_pyg(data, batch)
    cached = CachedLoader(loader, device="cpu")
    first = [b.n_id for b in cached]
    again = [b.n_id for b in cached]
    assert len(first) == len(loader) and all(torch.equal(a, b) for a, b in zip(first, again)), "the second epoch is the cache"


def test_zip_loader_over_ours():
    """ZipLoader draws one batch of indices and hands it to each loader (a seed per index)."""
    data = make_data()
    loaders = [NeighborLoader(data, [3], batch_size=16), LinkNeighborLoader(data, [2, 2], edge_label_index=data.edge_index[:, :40], batch_size=16)]
    count = 0
    for nodes, links in ZipLoader(loaders, batch_size=8):
        assert_as_pyg(data, nodes)
        assert nodes.batch_size == 8 and links.edge_label_index.shape == (2, 8)
        assert torch.equal(links.n_id[links.edge_label_index], data.edge_index[:, links.input_id]), "the links asked for"
        count += 1
    assert count == 40 // 8, "as long as the shorter dataset"


def test_imbalanced_sampler_as_sampler():
    data = make_data()
    data.y = (torch.arange(N) < 8).long()  # class 1 is 10 %
    torch.manual_seed(0)
    loader = NeighborLoader(data, [3], batch_size=20, sampler=ImbalancedSampler(data.y, num_samples=2000))
    seeds = torch.cat([batch.n_id[: batch.batch_size] for batch in loader])
    assert len(seeds) == 2000
    share = float((data.y[seeds] == 1).float().mean())
    assert 0.4 < share < 0.6, share  # balanced, against 0.1 without the sampler


# -- PyG's layers on our batches -------------------------------------------------------------------------------------


def test_trim_to_layer_with_our_num_sampled_counts():
    torch.manual_seed(0)
    data = make_data()
    model = GraphSAGE(6, 8, num_layers=2, out_channels=3).eval()
    loader = NeighborLoader(data, [4, 3], batch_size=16)
    for batch in loader:
        plain = model(batch.x, batch.edge_index)[: batch.batch_size]
        trimmed = model(batch.x, batch.edge_index, num_sampled_nodes_per_hop=batch.num_sampled_nodes, num_sampled_edges_per_hop=batch.num_sampled_edges)
        assert torch.allclose(trimmed[: batch.batch_size], plain, atol=1e-5)


def _hetero(seed: int = 0) -> HeteroData:
    gen = torch.Generator().manual_seed(seed)
    h = HeteroData()
    h["paper"].x = torch.randn(40, 8, generator=gen)
    h["author"].x = torch.randn(25, 8, generator=gen)
    h["author", "writes", "paper"].edge_index = torch.stack([torch.randint(0, 25, (120,), generator=gen), torch.randint(0, 40, (120,), generator=gen)])
    h["paper", "rev_writes", "author"].edge_index = h["author", "writes", "paper"].edge_index.flip(0)
    h["paper", "cites", "paper"].edge_index = torch.randint(0, 40, (2, 100), generator=gen)
    return h


def test_hgtconv_on_our_full_neighbourhood_batch_equals_the_full_graph():
    torch.manual_seed(0)
    h = _hetero()
    conv = HGTConv(8, 8, h.metadata(), heads=2).eval()
    seeds = torch.arange(10)
    loader = NeighborLoader(h, [-1], input_nodes=("paper", seeds), batch_size=10)
    batch = next(iter(loader))
    with torch.no_grad():
        full = conv(h.x_dict, h.edge_index_dict)["paper"][seeds]
        ours = conv(batch.x_dict, batch.edge_index_dict)["paper"][: batch["paper"].batch_size]
    assert torch.equal(batch["paper"].n_id[:10], seeds)
    assert torch.allclose(ours, full, atol=1e-5)


def test_to_hetero_model_trains_on_our_link_batches():
    torch.manual_seed(0)
    h = _hetero()

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = SAGEConv((-1, -1), 8)

        def forward(self, x, edge_index):
            return self.conv(x, edge_index)

    model = to_hetero(Encoder(), h.metadata(), aggr="sum")
    et = ("author", "writes", "paper")
    loader = LinkNeighborLoader(h, [-1], edge_label_index=(et, h[et].edge_index), batch_size=32, neg_sampling_ratio=1.0, shuffle=True)
    optimizer = None
    losses = []
    for _ in range(15):
        for batch in loader:
            out = model(batch.x_dict, batch.edge_index_dict)
            src, dst = batch[et].edge_label_index
            score = (out["author"][src] * out["paper"][dst]).sum(-1)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(score, batch[et].edge_label)
            optimizer = optimizer or torch.optim.Adam(model.parameters(), lr=0.01)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    assert np.mean(losses[-4:]) < np.mean(losses[:4]), (losses[:4], losses[-4:])


# -- signatures ------------------------------------------------------------------------------------------------------


def _canonical(hint):
    """A type hint with typing's spellings made one (``Optional[X]`` and ``X | None``, ``Tuple`` and ``tuple``)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return ("union", frozenset(_canonical(a) for a in args))
    if origin is not None:
        return origin if not args else (origin, tuple(_canonical(a) for a in args))
    return hint


@pytest.mark.parametrize("ours, pyg", [(NeighborLoader, PygNeighborLoader), (LinkNeighborLoader, PygLinkNeighborLoader)])
def test_signatures_are_pygs_and_typed(ours, pyg):
    mine, theirs = typing.get_type_hints(ours.__init__), typing.get_type_hints(pyg.__init__)
    ours_parameters = inspect.signature(ours.__init__).parameters
    for name, parameter in inspect.signature(pyg.__init__).parameters.items():
        assert name in ours_parameters and ours_parameters[name].default == parameter.default, name
        if name not in ("self", "kwargs"):
            assert _canonical(mine[name]) == _canonical(theirs[name]), (name, mine[name], theirs[name])
    for name in ("device", "graph_placement", "features", "prefetch"):
        assert ours_parameters[name].kind is inspect.Parameter.KEYWORD_ONLY and "Any" not in str(mine[name]), name


def test_prefetch_with_workers_is_refused():
    with pytest.raises(ValueError, match=r"prefetch=2 with num_workers=1: the worker processes read ahead"):
        NeighborLoader(make_data(), [2], batch_size=4, num_workers=1, prefetch=2)


def test_place_planetoid_raw_links_the_files_where_planetoid_reads_them(tmp_path):
    from dgl_zerocopy.pyg.datasets import place_planetoid_raw

    source = tmp_path / "raw_files"
    source.mkdir()
    for part in ("x", "y", "graph"):
        (source / f"ind.cora.{part}").write_bytes(part.encode())
    raw = place_planetoid_raw(source, tmp_path / "root", "Cora")
    assert raw == tmp_path / "root" / "Cora" / "raw"
    assert sorted(p.name for p in raw.iterdir()) == ["ind.cora.graph", "ind.cora.x", "ind.cora.y"]
    assert (raw / "ind.cora.x").read_bytes() == b"x" and (raw / "ind.cora.x").is_symlink()
    assert place_planetoid_raw(source, tmp_path / "root", "Cora") == raw, "again: the files there are kept"
    with pytest.raises(FileNotFoundError, match=r"no raw Planetoid file ind.citeseer.\*"):
        place_planetoid_raw(source, tmp_path / "root", "CiteSeer")


def test_arguments_that_would_do_nothing_are_refused():
    data = make_data()
    with pytest.raises(ValueError, match=r"graph_placement='device' puts the graph in GPU memory, but device=None"):
        NeighborLoader(data, [2], batch_size=4, graph_placement="device")
    from dgl_zerocopy.pyg import FeatureStore, GraphStore

    pair = (FeatureStore.from_data(data), GraphStore.from_data(data))
    with pytest.raises(ValueError, match=r"features= routes tables of a Data or HeteroData, but the data is a tuple"):
        NeighborLoader(pair, [2], batch_size=4, features={"x": torch.randn(N, 2)})
    assert len(NeighborLoader(pair, [2], input_nodes=torch.arange(8), batch_size=4, features=False)) == 2, "False: nothing routed, as a pair has"
