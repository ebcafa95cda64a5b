"""dgl_zerocopy.DataLoader against DGL 2.1's own loader, use by use: node and edge classification,
link prediction with negative sampling and edge exclusion, heterographs with dict indices and
per-relation fanouts, edge weights and masks, subgraph samplers, edge features, DDP's split.

Each case builds a small graph in a few lines and runs both loaders over two epochs from the same
random state (``dgl.seed``, ``numpy.random.seed``, ``torch.manual_seed`` before each epoch), then
compares every batch: the structure (types, tuples, dicts, graphs, blocks, their edges and ids)
and every tensor in it, features and labels included. DGL runs one thread here: with more, its
fused neighbour sampling is not reproducible even against itself. Our sampling runs on the calling
thread (``prefetch=0``) or in worker processes: DGL seeds each thread's generator apart, so
sampling on the prefetch thread gives other (valid) samples; the prefetching runs are checked
for consistency instead (every served column equals the parent's data at the batch's ids), and
compared exactly for the deterministic samplers.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

import numpy as np
import pytest
import torch

dgl = pytest.importorskip("dgl")

from dgl_zerocopy import DataLoader  # noqa: E402
from dgl_zerocopy.loading import dgl_options  # noqa: E402
from dgl_zerocopy.loading.seeds import EpochOrder, interleaved, worker_batches  # noqa: E402

IDTYPES = [torch.int64, torch.int32]
ETYPES = [("user", "click", "item"), ("item", "clicked-by", "user"), ("user", "follow", "user")]


@pytest.fixture(autouse=True, scope="module")
def one_dgl_thread():
    before = dgl.utils.get_num_threads()
    dgl.utils.set_num_threads(1)
    yield
    dgl.utils.set_num_threads(before)


@pytest.fixture(autouse=True)
def fresh_messages(monkeypatch):
    monkeypatch.setattr(dgl_options, "_WARNED", set())
    monkeypatch.setattr(dgl_options, "_LOGGED", set())


# -- graphs, built in a few lines ----------------------------------------------------------------


def homogeneous(idtype, n=120, m=900):
    gen = torch.Generator().manual_seed(1)
    src, dst = torch.randint(0, n, (m,), generator=gen), torch.randint(0, n, (m,), generator=gen)
    g = dgl.graph((torch.cat([src, dst]), torch.cat([dst, src])), num_nodes=n, idtype=idtype)  # edge e's reverse: e + m, mod 2m
    g.ndata["feat"] = torch.randn(n, 6, generator=gen)
    g.ndata["label"] = torch.randint(0, 4, (n,), generator=gen)
    g.ndata["degree"] = g.in_degrees().float()
    g.edata["w"] = torch.rand(2 * m, generator=gen)
    g.edata["ef"] = torch.randn(2 * m, 3, generator=gen)
    g.edata["elabel"] = torch.randint(0, 3, (2 * m,), generator=gen)
    g.edata["mask"] = torch.rand(2 * m, generator=gen) > 0.3
    return g


def hetero(idtype, users=60, items=40, m=300):
    gen = torch.Generator().manual_seed(2)
    u, i = torch.randint(0, users, (m,), generator=gen), torch.randint(0, items, (m,), generator=gen)
    f = torch.randint(0, users, (2, m), generator=gen)
    g = dgl.heterograph({ETYPES[0]: (u, i), ETYPES[1]: (i, u), ETYPES[2]: (f[0], f[1])}, {"user": users, "item": items}, idtype=idtype)
    for ntype, n in (("user", users), ("item", items)):
        g.nodes[ntype].data["feat"] = torch.randn(n, 5, generator=gen)
    g.nodes["user"].data["label"] = torch.randint(0, 3, (users,), generator=gen)
    for etype in ETYPES:
        g.edges[etype].data["p"] = torch.rand(m, generator=gen)
        g.edges[etype].data["mask"] = torch.rand(m, generator=gen) > 0.3
        g.edges[etype].data["ef"] = torch.randn(m, 2, generator=gen)
    return g


def ids(n, idtype, step=1):
    return torch.arange(0, n, step, dtype=idtype)


# -- the uses: (graph, indices, sampler, loader keywords) -------------------------------------------


def node_classification(idtype, tmp_path):
    g = homogeneous(idtype)
    return g, ids(90, idtype), dgl.dataloading.NeighborSampler([3, 2], prefetch_node_feats=["feat", "degree"], prefetch_labels=["label"]), {}


def edge_classification(idtype, tmp_path):
    g = homogeneous(idtype)
    sampler = dgl.dataloading.as_edge_prediction_sampler(dgl.dataloading.NeighborSampler([2, 2], prefetch_node_feats=["feat"]), prefetch_labels=["elabel"])
    return g, ids(g.num_edges(), idtype, 23), sampler, {}


def link_prediction_self(idtype, tmp_path):
    g = homogeneous(idtype)
    base = dgl.dataloading.NeighborSampler([2, 2], prefetch_node_feats=["feat"])
    sampler = dgl.dataloading.as_edge_prediction_sampler(base, exclude="self", negative_sampler=dgl.dataloading.negative_sampler.Uniform(2))
    return g, ids(g.num_edges(), idtype, 31), sampler, {}


def link_prediction_reverse_id(idtype, tmp_path):
    g = homogeneous(idtype)
    m = g.num_edges() // 2
    reverse = torch.cat([torch.arange(m, 2 * m), torch.arange(0, m)]).to(idtype)
    base = dgl.dataloading.NeighborSampler([3, 1], prefetch_node_feats=["feat"], prefetch_edge_feats=["ef"])
    sampler = dgl.dataloading.as_edge_prediction_sampler(
        base, exclude="reverse_id", reverse_eids=reverse, negative_sampler=dgl.dataloading.negative_sampler.Uniform(1)
    )
    return g, ids(m, idtype, 13), sampler, {}


def link_prediction_reverse_types(idtype, tmp_path):
    g = hetero(idtype)
    base = dgl.dataloading.NeighborSampler([2, 2], prefetch_node_feats={"user": ["feat"], "item": ["feat"]})
    sampler = dgl.dataloading.as_edge_prediction_sampler(
        base,
        exclude="reverse_types",
        reverse_etypes={"click": "clicked-by", "clicked-by": "click"},
        negative_sampler=dgl.dataloading.negative_sampler.Uniform(1),
    )
    return g, {"click": ids(g.num_edges("click"), idtype, 7)}, sampler, {}


def hetero_node_classification(idtype, tmp_path):
    g = hetero(idtype)
    fanouts = [{ETYPES[0]: 2, ETYPES[1]: 3, ETYPES[2]: 1}, {ETYPES[0]: 1, ETYPES[1]: 2, ETYPES[2]: 2}]
    sampler = dgl.dataloading.NeighborSampler(
        fanouts, prefetch_node_feats={"user": ["feat"], "item": ["feat"]}, prefetch_labels={"user": ["label"]}, prefetch_edge_feats={"follow": ["ef"]}
    )
    return g, {"user": ids(50, idtype, 2), "item": ids(30, idtype, 3)}, sampler, {}


def weighted_neighbours(idtype, tmp_path):
    g = homogeneous(idtype)
    return g, ids(80, idtype), dgl.dataloading.NeighborSampler([3, 3], prob="w", prefetch_node_feats=["feat"], prefetch_edge_feats=["w"]), {}


def masked_hetero_neighbours(idtype, tmp_path):
    g = hetero(idtype)
    sampler = dgl.dataloading.NeighborSampler([2, 2], mask="mask", prefetch_node_feats={"user": ["feat"]})
    return g, {"user": ids(40, idtype)}, sampler, {}


def weighted_hetero_neighbours(idtype, tmp_path):
    g = hetero(idtype)
    return g, {"item": ids(40, idtype)}, dgl.dataloading.NeighborSampler([2, 2], prob="p", prefetch_node_feats={"item": ["feat"]}), {}


def cluster_gcn(idtype, tmp_path):
    g = homogeneous(idtype)
    # DGL's METIS partitioning takes int64 graphs only; the sampler then serves either.
    sampler = dgl.dataloading.ClusterGCNSampler(
        g.long(), 6, cache_path=str(tmp_path / f"cluster_{idtype}.pkl"), prefetch_ndata=["feat", "label"], prefetch_edata=["ef"]
    )
    return g, torch.arange(6), sampler, {"batch_size": 2}


def saint(idtype, tmp_path):
    g = homogeneous(idtype)
    return g, torch.arange(5), dgl.dataloading.SAINTSampler("node", 40, prefetch_ndata=["feat", "label"], prefetch_edata=["ef", "w"]), {"batch_size": 2}


def shadow_k_hop(idtype, tmp_path):
    g = homogeneous(idtype)
    return g, ids(60, idtype), dgl.dataloading.ShaDowKHopSampler([3, 2], prefetch_node_feats=["feat"], prefetch_edge_feats=["ef"]), {}


def full_neighbours_edge_features(idtype, tmp_path):
    g = homogeneous(idtype)
    return g, ids(70, idtype), dgl.dataloading.MultiLayerFullNeighborSampler(2, prefetch_node_feats=["feat"], prefetch_edge_feats=["ef", "w", "mask"]), {}


USES = [
    node_classification,
    edge_classification,
    link_prediction_self,
    link_prediction_reverse_id,
    link_prediction_reverse_types,
    hetero_node_classification,
    weighted_neighbours,
    masked_hetero_neighbours,
    weighted_hetero_neighbours,
    cluster_gcn,
    saint,
    shadow_k_hop,
    full_neighbours_edge_features,
]
DETERMINISTIC = {cluster_gcn}  # no random draw (even full-neighbour sampling draws from DGL's generator)


# -- comparing batches ---------------------------------------------------------------------------


def seed_all(value: int) -> None:
    dgl.seed(value)
    np.random.seed(value)
    torch.manual_seed(value)


def assert_same(ours, theirs, where="batch"):
    """The same structure, and every tensor in it equal (values and dtype)."""
    assert type(ours) is type(theirs), f"{where}: {type(ours).__name__} against DGL's {type(theirs).__name__}"
    if isinstance(theirs, torch.Tensor):
        assert ours.dtype == theirs.dtype and torch.equal(ours, theirs), f"{where}: {ours} against DGL's {theirs}"
    elif isinstance(theirs, Mapping):
        assert list(ours) == list(theirs), f"{where}: keys {list(ours)} against DGL's {list(theirs)}"
        for key in theirs:
            assert_same(ours[key], theirs[key], f"{where}[{key!r}]")
    elif isinstance(theirs, (list, tuple)):
        assert len(ours) == len(theirs), f"{where}: {len(ours)} items against DGL's {len(theirs)}"
        for i, (a, b) in enumerate(zip(ours, theirs)):
            assert_same(a, b, f"{where}[{i}]")
    elif isinstance(theirs, dgl.DGLGraph):
        assert_same_graph(ours, theirs, where)
    else:
        assert ours == theirs, where


def assert_same_graph(ours, theirs, where):
    assert (ours.is_block, ours.idtype, ours.canonical_etypes) == (theirs.is_block, theirs.idtype, theirs.canonical_etypes), where
    for etype in theirs.canonical_etypes:
        assert_same(ours.edges(form="all", order="eid", etype=etype), theirs.edges(form="all", order="eid", etype=etype), f"{where} edges {etype}")
        assert_same(dict(ours.edges[etype].data), dict(theirs.edges[etype].data), f"{where}.edges[{etype}].data")
    views = (("srcnodes", ours.srctypes), ("dstnodes", ours.dsttypes)) if theirs.is_block else (("nodes", ours.ntypes),)
    for view, types in views:
        for ntype in types:
            mine, dgls = getattr(ours, view)[ntype], getattr(theirs, view)[ntype]
            assert_same(len(mine), len(dgls), f"{where}.{view}[{ntype}] count")
            assert_same(_sorted(mine.data), _sorted(dgls.data), f"{where}.{view}[{ntype}].data")


def _sorted(data) -> dict:
    return {key: data[key] for key in sorted(data.keys())}


def assert_consistent(output, graph):
    """Every column of every graph in ``output`` equals the parent's data at the graph's ids."""
    if isinstance(output, Mapping):
        output = list(output.values())
    if isinstance(output, (list, tuple)):
        for item in output:
            assert_consistent(item, graph)
        return
    if not isinstance(output, dgl.DGLGraph):
        return
    sides = (("srcnodes", output.srctypes), ("dstnodes", output.dsttypes)) if output.is_block else (("nodes", output.ntypes),)
    for view, types in sides:
        for ntype in types:
            data = getattr(output, view)[ntype].data
            for key in data.keys():
                if key != dgl.NID and key in graph.nodes[ntype].data:
                    assert torch.equal(data[key], graph.nodes[ntype].data[key][data[dgl.NID].long()]), f"{view}[{ntype}].data[{key!r}]"
    for etype in output.canonical_etypes:
        data = output.edges[etype].data
        for key in data.keys():
            if key != dgl.EID and key in graph.edges[etype].data and dgl.EID in data:
                assert torch.equal(data[key], graph.edges[etype].data[key][data[dgl.EID].long()]), f"edges[{etype}].data[{key!r}]"


def run_both(graph, indices, sampler, epochs=2, dgl_kw=None, **ours_kw):
    """Both loaders over ``epochs`` epochs, each from the same random state; every batch compared.
    Returns the number of batches compared."""
    dgl_kw = {"batch_size": 16, "shuffle": True, **(dgl_kw or {})}
    theirs_loader = dgl.dataloading.DataLoader(graph, indices, sampler, device="cpu", **dgl_kw)
    ours_loader = DataLoader(graph, indices, sampler, **{**dgl_kw, **ours_kw})
    assert len(ours_loader) == len(theirs_loader)
    compared = 0
    for epoch in range(epochs):
        seed_all(epoch)
        theirs = list(theirs_loader)
        seed_all(epoch)
        count = 0
        for batch in ours_loader:  # not enumerate(): its reused result tuple would keep the previous batch alive
            assert_same(batch, theirs[count], f"epoch {epoch} batch {count}")
            count += 1
        assert count == len(theirs), f"epoch {epoch}: {count} batches against DGL's {len(theirs)}"
        compared += count
    return compared


# -- the tests -----------------------------------------------------------------------------------


@pytest.mark.parametrize("idtype", IDTYPES, ids=["int64", "int32"])
@pytest.mark.parametrize("use", USES, ids=[u.__name__ for u in USES])
def test_batches_equal_dgls(use, idtype, tmp_path):
    graph, indices, sampler, kw = use(idtype, tmp_path)
    if use is cluster_gcn and idtype == torch.int32:  # DGL's sampler builds int64 node ids: it fails on int32 graphs, in both loaders
        for loader in (dgl.dataloading.DataLoader(graph, indices, sampler), DataLoader(graph, indices, sampler, prefetch=0)):
            with pytest.raises(dgl.DGLError, match="to have data type torch.int32"):
                next(iter(loader))
        return
    assert run_both(graph, indices, sampler, dgl_kw=kw, prefetch=0) > 1


@pytest.mark.slow
@pytest.mark.parametrize("use", USES, ids=[u.__name__ for u in USES])
def test_batches_equal_dgls_with_worker_processes(use, tmp_path):
    """DGL splits an epoch's batches among the processes and torch takes one from each in turn:
    the same order and the same samples here (each process forked with DGL's random state)."""
    graph, indices, sampler, kw = use(torch.int64, tmp_path)
    assert run_both(graph, indices, sampler, dgl_kw={**kw, "num_workers": 2, "timeout": 60}, prefetch=2) > 1


@pytest.mark.parametrize("use", USES, ids=[u.__name__ for u in USES])
def test_prefetching_serves_every_mark_from_the_parent_graph(use, tmp_path):
    graph, indices, sampler, kw = use(torch.int64, tmp_path)
    loader = DataLoader(graph, indices, sampler, **{"batch_size": 16, "shuffle": True, **kw}, prefetch=2)
    batches = 0
    for batch in loader:
        assert_consistent(batch, graph)
        batches += 1
    assert batches == len(loader) > 1
    if use in DETERMINISTIC:
        assert run_both(graph, indices, sampler, epochs=1, dgl_kw=kw, prefetch=2) == len(loader)


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("n,world,batch", [(103, 3, 8), (8, 4, 3), (10, 2, 4)])
def test_ddp_split_is_dgls(monkeypatch, n, world, batch, drop_last, shuffle):
    """Each rank's ids, epoch by epoch, against DGL's DDPTensorizedDataset for that rank (its rank
    and world size given through torch.distributed's functions)."""
    from dgl.dataloading.dataloader import DDPTensorizedDataset

    indices = torch.arange(n) * 7 + 3
    for rank in range(world):
        monkeypatch.setattr(torch.distributed, "get_rank", lambda rank=rank: rank)
        monkeypatch.setattr(torch.distributed, "get_world_size", lambda: world)
        theirs = DDPTensorizedDataset(indices, batch, drop_last, 0, shuffle)
        ours = EpochOrder(n, batch, drop_last, shuffle, ddp=(rank, world))
        assert len(ours) == len(theirs)
        for epoch in range(3):
            np.random.seed(epoch)
            if shuffle:
                theirs.shuffle()
            expected = list(iter(theirs))
            np.random.seed(epoch)
            positions = ours.next_epoch(epoch)
            got = [indices[ours.batch(positions, i)] for i in range(len(ours))]
            assert [b.tolist() for b in got] == [b.tolist() for b in expected], f"rank {rank} epoch {epoch}"


def test_ddp_split_of_dict_indices_is_dgls(monkeypatch):
    from dgl.dataloading.dataloader import DDPTensorizedDataset

    g = hetero(torch.int64)
    indices = {"user": torch.arange(0, 50, 3), "item": torch.arange(0, 40, 4)}
    loader = DataLoader(g, indices, dgl.dataloading.NeighborSampler([1]), batch_size=5, shuffle=True, prefetch=0)
    for rank in range(3):
        monkeypatch.setattr(torch.distributed, "get_rank", lambda rank=rank: rank)
        monkeypatch.setattr(torch.distributed, "get_world_size", lambda: 3)
        theirs = DDPTensorizedDataset(indices, 5, False, 0, True)
        ours = EpochOrder(len(loader.seeds), 5, False, True, ddp=(rank, 3))
        np.random.seed(rank)
        theirs.shuffle()
        expected = list(iter(theirs))
        np.random.seed(rank)
        positions = ours.next_epoch(0)
        got = [loader.seeds.batch(ours.batch(positions, i)) for i in range(len(ours))]
        assert_same(got, expected, f"rank {rank}")


def test_a_rank_past_the_end_pads_from_the_start():
    """n < world: DGL reads uninitialised memory (or fails) for a rank with no seeds of its own."""
    orders = [EpochOrder(2, 1, False, True, ddp=(rank, 3)).next_epoch(0).tolist() for rank in range(3)]
    assert orders[2] == [0] and sorted(orders[0] + orders[1]) == [0, 1]


def test_worker_split_and_order_are_dgls():
    """DGL's _divide_by_worker: contiguous runs, the first workers one more; torch takes one from each in turn."""
    assert [list(worker_batches(7, w, 3)) for w in range(3)] == [[0, 1, 2], [3, 4], [5, 6]]
    assert interleaved(7, 3) == [0, 3, 5, 1, 4, 6, 2]
    assert interleaved(2, 4) == [0, 1]


def test_seed_opt_in_is_a_pure_function_of_the_epoch():
    a, b = EpochOrder(50, 8, False, True, seed=5), EpochOrder(50, 8, False, True, seed=5)
    np.random.seed(0)
    first = a.next_epoch(3)
    np.random.seed(1)
    assert torch.equal(first, b.next_epoch(3)) and not torch.equal(first, a.next_epoch(4))


@pytest.mark.parametrize(
    "indices,match",
    [
        (torch.tensor([0, 120]), "indices contain node 120, outside the graph's 120 nodes"),
        (torch.tensor([-1]), "indices contain node -1"),
        (torch.tensor([[1]]), "1-D"),
        (torch.tensor([0.5]), "int32/int64"),
    ],
)
def test_bad_node_ids_fail_at_construction(indices, match):
    g = homogeneous(torch.int64)
    with pytest.raises((IndexError, TypeError), match=match):
        DataLoader(g, indices, dgl.dataloading.NeighborSampler([2]))


def test_edge_ids_are_checked_as_edges_and_types_by_name():
    g, h = homogeneous(torch.int64), hetero(torch.int64)
    edges = dgl.dataloading.as_edge_prediction_sampler(dgl.dataloading.NeighborSampler([2]))
    DataLoader(g, torch.tensor([g.num_nodes(), g.num_edges() - 1]), edges)  # edge ids beyond the node count are fine
    with pytest.raises(IndexError, match=f"edge {g.num_edges()}, outside the graph's {g.num_edges()} edges"):
        DataLoader(g, torch.tensor([g.num_edges()]), edges)
    with pytest.raises(IndexError, match=r"indices\['item'\] contain node 40, outside the 40 nodes of type 'item'"):
        DataLoader(h, {"item": torch.tensor([40])}, dgl.dataloading.NeighborSampler([2]))
    with pytest.raises(IndexError, match=r"edge 300, outside the 300 edges of type \('user', 'click', 'item'\)"):
        DataLoader(h, {"click": torch.tensor([300])}, edges)
    with pytest.raises(KeyError, match="'shop'"):
        DataLoader(h, {"shop": torch.tensor([0])}, dgl.dataloading.NeighborSampler([2]))
    with pytest.raises(TypeError, match="give indices as a dict"):
        DataLoader(h, torch.tensor([0]), dgl.dataloading.NeighborSampler([2]))
    with pytest.raises(IndexError, match="partition 6, outside the sampler's 6 partitions"):
        DataLoader(g, torch.tensor([6]), cluster_gcn(torch.int64, _TmpPath())[2])


class _TmpPath:
    def __truediv__(self, name):
        import tempfile

        return os.path.join(tempfile.mkdtemp(prefix="dgl-zerocopy-cluster-"), name)


def test_data_indexed_on_the_host_is_said_once(caplog):
    g = homogeneous(torch.int64)
    sampler = dgl.dataloading.NeighborSampler([2], prefetch_node_feats=["feat"], prefetch_edge_feats=["w"])
    with caplog.at_level(logging.INFO, logger="dgl_zerocopy.loading"):
        for _ in range(2):
            for _ in DataLoader(g, ids(40, torch.int64), sampler, batch_size=16, prefetch=0):
                pass
    said = [r for r in caplog.records if "'w'" in r.getMessage() and "indexed on the host" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in caplog.records]


def test_a_missing_name_fails_at_construction_naming_its_type():
    h = hetero(torch.int64)
    with pytest.raises(KeyError, match="'label'.*node type 'item'"):
        DataLoader(h, {"user": torch.tensor([0])}, dgl.dataloading.NeighborSampler([2], prefetch_labels={"item": ["label"]}))
    with pytest.raises(KeyError, match="'nope'"):
        DataLoader(
            h,
            {"click": torch.tensor([0])},
            dgl.dataloading.as_edge_prediction_sampler(dgl.dataloading.NeighborSampler([2]), prefetch_labels={"click": ["nope"]}),
        )


def test_dgl_names_the_loader_relies_on_exist():
    """DGL's private names the collation uses, present in the installed DGL."""
    from dgl.dataloading import dataloader as dgl_loader
    from dgl.frame import Frame, LazyFeature

    g = dgl.graph(([0], [1]))
    assert isinstance(g._node_frames[0], Frame) and isinstance(g._edge_frames[0], Frame) and isinstance(g._node_frames[0]._columns, dict)
    assert {"name", "id_"} <= set(LazyFeature.__slots__)
    assert callable(dgl_loader.remove_parent_storage_columns) and callable(dgl_loader.restore_parent_storage_columns)
    assert callable(dgl.utils.set_num_threads) and callable(dgl.utils.recursive_apply)
    assert callable(dgl.dataloading.dataloader.DDPTensorizedDataset)  # the reference of the split tests


# -- a real 2-rank DDP run ------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ddp_rank(rank: int, world: int, port: int, drop_last: bool, out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=__import__("datetime").timedelta(seconds=60))
    try:
        dgl.utils.set_num_threads(1)
        graph, indices, sampler, _ = node_classification(torch.int64, None)
        kw = {"batch_size": 16, "shuffle": True, "drop_last": drop_last, "use_ddp": True}
        theirs_loader = dgl.dataloading.DataLoader(graph, indices, sampler, device="cpu", **kw)
        ours_loader = DataLoader(graph, indices, sampler, prefetch=0, **kw)
        seen = []
        for epoch in range(2):
            seed_all(epoch)
            theirs = list(theirs_loader)
            seed_all(epoch)
            count = 0
            for batch in ours_loader:
                assert_same(batch, theirs[count], f"rank {rank} epoch {epoch} batch {count}")
                seen.append(batch[1].tolist())
                count += 1
            assert count == len(theirs) == len(ours_loader)
        torch.save(seen, out)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("drop_last", [False, True])
def test_two_gloo_ranks_get_dgls_batches(tmp_path, drop_last):
    import torch.multiprocessing as mp

    port = _free_port()
    context = mp.get_context("spawn")
    outs = [str(tmp_path / f"rank{r}.pt") for r in range(2)]
    procs = [context.Process(target=_ddp_rank, args=(r, 2, port, drop_last, outs[r]), daemon=True) for r in range(2)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(120)
            assert p.exitcode == 0, f"rank exited with {p.exitcode}"
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
    seen = [torch.load(out) for out in outs]
    counts = [sum(len(b) for b in rank_batches) for rank_batches in seen]
    assert counts[0] == counts[1] > 0, "as many seeds on each rank"
    mine = [{i for b in rank_batches for i in b} for rank_batches in seen]
    assert not mine[0] & mine[1], "each rank keeps its own chunk of the seeds (90 of them: no padding)"
