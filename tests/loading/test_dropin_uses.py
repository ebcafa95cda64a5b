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

from collections.abc import Mapping

import numpy as np
import pytest
import torch

dgl = pytest.importorskip("dgl")

from dgl_zerocopy import DataLoader  # noqa: E402
from dgl_zerocopy.loading import dgl_options  # noqa: E402

IDTYPES = [torch.int64, torch.int32]
ETYPES = [("user", "click", "item"), ("item", "clicked-by", "user"), ("user", "follow", "user")]


DGL_THREADS = dgl.utils.get_num_threads()  # the process's own count, before the fixture below


@pytest.fixture(autouse=True, scope="module")
def one_dgl_thread():
    dgl.utils.set_num_threads(1)
    yield
    dgl.utils.set_num_threads(DGL_THREADS)


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


def assert_both_fail_on_int32(graph, indices, sampler, dgl_kw, **ours_kw):
    """DGL's ClusterGCNSampler builds int64 node ids: on an int32 graph it fails inside DGL, in
    DGL's loader and in ours alike (in the worker processes too, the error re-raised by torch)."""
    for loader in (dgl.dataloading.DataLoader(graph, indices, sampler, **dgl_kw), DataLoader(graph, indices, sampler, **dgl_kw, **ours_kw)):
        with pytest.raises(dgl.DGLError, match="to have data type torch.int32"):
            next(iter(loader))


# -- the tests -----------------------------------------------------------------------------------


@pytest.mark.parametrize("idtype", IDTYPES, ids=["int64", "int32"])
@pytest.mark.parametrize("use", USES, ids=[u.__name__ for u in USES])
def test_batches_equal_dgls(use, idtype, tmp_path):
    graph, indices, sampler, kw = use(idtype, tmp_path)
    if use is cluster_gcn and idtype == torch.int32:
        assert_both_fail_on_int32(graph, indices, sampler, {}, prefetch=0)
        return
    assert run_both(graph, indices, sampler, dgl_kw=kw, prefetch=0) > 1


@pytest.mark.slow
@pytest.mark.parametrize("idtype", IDTYPES, ids=["int64", "int32"])
@pytest.mark.parametrize("use", USES, ids=[u.__name__ for u in USES])
def test_batches_equal_dgls_with_worker_processes(use, idtype, tmp_path):
    """DGL splits an epoch's batches among the processes and torch takes one from each in turn:
    the same order and the same samples here (each process forked with DGL's random state)."""
    graph, indices, sampler, kw = use(idtype, tmp_path)
    workers = {"num_workers": 2, "timeout": 60}
    dgl.utils.set_num_threads(DGL_THREADS)  # the processes run DGL with one thread themselves, as DGL's do
    try:
        if use is cluster_gcn and idtype == torch.int32:
            assert_both_fail_on_int32(graph, indices, sampler, workers, prefetch=2)
            return
        assert run_both(graph, indices, sampler, dgl_kw={**kw, **workers}, prefetch=2) > 1
    finally:
        dgl.utils.set_num_threads(1)


def _reseed_dgl(worker_id: int) -> None:
    """A worker_init_fn as DGL scripts write them: each process's DGL generator seeded apart."""
    dgl.seed(1000 + worker_id)


@pytest.mark.slow
@pytest.mark.parametrize("idtype", IDTYPES, ids=["int64", "int32"])
@pytest.mark.parametrize("use", [node_classification, link_prediction_reverse_id, hetero_node_classification, saint], ids=lambda u: u.__name__)
def test_batches_equal_dgls_with_a_worker_init_fn(use, idtype, tmp_path):
    """worker_init_fn runs in each sampling process after DGL's own set-up, as in DGL's loader:
    re-seeded there, the processes draw DGL's samples (not those of the state they were forked with)."""
    graph, indices, sampler, kw = use(idtype, tmp_path)
    workers = {**kw, "num_workers": 2, "timeout": 60, "worker_init_fn": _reseed_dgl}
    dgl.utils.set_num_threads(DGL_THREADS)
    try:
        assert run_both(graph, indices, sampler, dgl_kw=workers, prefetch=2) > 1
    finally:
        dgl.utils.set_num_threads(1)


def _exclude_reverse_pairs(seed_edges: torch.Tensor) -> torch.Tensor:
    """A callable ``exclude``: the batch's edges and their reverses (homogeneous()'s edge e has e + m, mod 2m)."""
    half = 900  # homogeneous()'s m
    return torch.cat([seed_edges, (seed_edges + half) % (2 * half)])


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)], ids=["num_workers=0", "num_workers=2"])
@pytest.mark.parametrize("idtype", IDTYPES, ids=["int64", "int32"])
def test_batches_equal_dgls_with_a_callable_exclude(idtype, workers):
    graph = homogeneous(idtype)
    assert graph.num_edges() == 2 * 900
    base = dgl.dataloading.NeighborSampler([3, 2], prefetch_node_feats=["feat"], prefetch_edge_feats=["ef"])
    sampler = dgl.dataloading.as_edge_prediction_sampler(base, exclude=_exclude_reverse_pairs, negative_sampler=dgl.dataloading.negative_sampler.Uniform(1))
    indices = ids(900, idtype, 11)
    kw = {"num_workers": 2, "timeout": 60} if workers else {}
    assert run_both(graph, indices, sampler, dgl_kw=kw, prefetch=2 if workers else 0) > 1
    excluded = 0
    for _, pair_graph, _, blocks in DataLoader(graph, indices, sampler, batch_size=16, prefetch=0):
        gone = _exclude_reverse_pairs(pair_graph.edata[dgl.EID])
        for block in blocks:
            assert not torch.isin(block.edata[dgl.EID], gone).any(), "an excluded edge in a block"
        excluded += 1
    assert excluded > 1


@pytest.mark.slow
@pytest.mark.parametrize("use", [node_classification, link_prediction_self], ids=lambda u: u.__name__)
def test_batches_equal_dgls_with_persistent_worker_processes(use, tmp_path):
    """Persistent processes see each epoch's new order through shared memory, as DGL's do."""
    graph, indices, sampler, kw = use(torch.int64, tmp_path)
    workers = {**kw, "num_workers": 2, "persistent_workers": True, "timeout": 60}
    assert run_both(graph, indices, sampler, epochs=3, dgl_kw=workers, prefetch=2) > 2


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


@pytest.mark.parametrize("use", USES, ids=[u.__name__ for u in USES])
def test_every_use_keeps_the_stream_protocol(use, tmp_path, monkeypatch):
    """On a model of CUDA streams (tests/stream_model.py): at every hand-over each value the
    loader served into a slot is a view of one ring slot, and everything else it hands over (the
    sampler's output, the values indexed on the host) was record_stream-ed on the consumer's stream."""
    from collections import deque

    from stream_model import CudaModel, ModelStream

    from dgl_zerocopy.loading.loader import DataLoader as Loader

    model = CudaModel().install(monkeypatch)
    produced = deque()
    produce = Loader._produce

    def spy(self, task):
        batch = produce(self, task)
        produced.append(batch)
        return batch

    monkeypatch.setattr(Loader, "_produce", spy)
    graph, indices, sampler, kw = use(torch.int64, tmp_path)
    loader = DataLoader(graph, indices, sampler, **{"batch_size": 16, **kw}, prefetch=2)
    loader._ring.side = ModelStream("side", model)  # what a CUDA device gets
    taken = in_slots = 0
    for _ in loader:
        batch = produced.popleft()
        served = [v for v, in_slot in batch.served if in_slot]
        model.take(loader._ring, served, [batch.output, *(v for v, in_slot in batch.served if not in_slot)])
        taken, in_slots = taken + 1, in_slots + len(served)
    assert taken == len(loader) and model.violations == []
    assert in_slots, "the fast path served the 2-D data"


class _LeafSampler(dgl.dataloading.Sampler):
    """A sampler of one's own that returns a LazyFeature leaf (served from ``attach_data``)."""

    def sample(self, g, indices):
        return indices, {"score": dgl.LazyFeature("score", indices)}


def test_lazy_feature_leaves_come_from_attached_data():
    graph = homogeneous(torch.int64)
    score = torch.randn(graph.num_nodes(), 2)
    theirs_loader = dgl.dataloading.DataLoader(graph, ids(50, torch.int64), _LeafSampler(), batch_size=16, shuffle=True)
    theirs_loader.attach_data("score", score)
    with pytest.raises(KeyError, match=r"loader.attach_data\('score'"):
        next(iter(DataLoader(graph, ids(50, torch.int64), _LeafSampler(), batch_size=16, prefetch=2)))
    ours_loader = DataLoader(graph, ids(50, torch.int64), _LeafSampler(), batch_size=16, shuffle=True, prefetch=2)
    ours_loader.attach_data("score", score)
    seed_all(0)
    theirs = list(theirs_loader)
    seed_all(0)
    ours = [(i.clone(), {"score": d["score"].clone()}) for i, d in ours_loader]
    assert_same(ours, [tuple(batch) for batch in theirs])


class _ShuffledEdgeBlocks(dgl.dataloading.BlockSampler):
    """One block of all in-edges of the seeds, its edges in a random order (not by destination)."""

    def sample_blocks(self, g, seed_nodes, exclude_eids=None):
        frontier = dgl.in_subgraph(g, seed_nodes)
        order = torch.randperm(frontier.num_edges())
        shuffled = dgl.edge_subgraph(frontier, order, relabel_nodes=False)
        shuffled.edata[dgl.EID] = frontier.edata[dgl.EID][order]
        self.last = dgl.to_block(shuffled, seed_nodes)
        return self.last.srcdata[dgl.NID], seed_nodes, [self.last]


def test_device_block_edge_data_follows_its_csc_order():
    from dgl_zerocopy.sampling.blocks import _csc

    graph = homogeneous(torch.int64)
    sampler = _ShuffledEdgeBlocks(prefetch_edge_feats=["ef", "w"])
    for _, _, (block,) in DataLoader(graph, ids(40, torch.int64), sampler, batch_size=16, prefetch=0, blocks="device"):
        order = _csc(sampler.last, None)[2].long()
        assert not torch.equal(order, torch.arange(len(order))), "the DGL block's edges are not in CSC order already"
        parent = sampler.last.edata[dgl.EID][order]
        for name in ("ef", "w"):
            assert torch.equal(block.edata[name], graph.edata[name][parent]), name


@pytest.mark.parametrize("use", [node_classification, hetero_node_classification, full_neighbours_edge_features], ids=lambda u: u.__name__)
def test_device_blocks_carry_dgls_data(use, tmp_path):
    """blocks="device" (what a CUDA device gets with PyPI's DGL), here on the CPU: every block a
    DeviceBlock (HeteroDeviceBlock when typed) holding DGL's node data, and its edge data in the
    block's CSC order (DGL's edge order permuted, as the block's edata["_ID"] says)."""
    from dgl_zerocopy.sampling.blocks import _csc

    graph, indices, sampler, kw = use(torch.int64, tmp_path)
    lists = (sampler.prefetch_node_feats, sampler.prefetch_labels, sampler.prefetch_edge_feats)
    names = [n for names in lists for n in (names if isinstance(names, list) else [n for v in names.values() for n in v])]
    seed_all(0)
    theirs = list(dgl.dataloading.DataLoader(graph, indices, sampler, batch_size=16))
    seed_all(0)
    count = 0
    for ours in DataLoader(graph, indices, sampler, batch_size=16, prefetch=0, blocks="device"):
        assert_same(ours[:2], theirs[count][:2], f"batch {count} ids")
        for mine, dgls in zip(ours[2], theirs[count][2]):
            typed = len(dgls.canonical_etypes) > 1
            # A DeviceBlock holds the marked data (and _ID), not what DGL slices from the graph unasked.
            for view, dgl_view in (("srcdata", dgls.srcnodes), ("dstdata", dgls.dstnodes)):
                for key in getattr(mine, view).keys():
                    got = getattr(mine, view)[key]
                    for ntype, value in got.items() if typed else [(dgls.srctypes[0], got)]:
                        assert_same(value, dgl_view[ntype].data[key], f"{view}[{key!r}] of {ntype}")
            for key in mine.edata.keys():
                got = mine.edata[key]
                for etype, value in got.items() if typed else [(dgls.canonical_etypes[0], got)]:
                    assert_same(value, dgls.edges[etype].data[key][_csc(dgls, etype)[2].long()], f"edata[{key!r}] of {etype}")
        marked = {k for block in ours[2] for view in (block.srcdata, block.dstdata, block.edata) for k in view.keys()}
        assert marked >= set(names), f"the sampler's marks {names} in the blocks: {marked}"
        count += 1
    assert count == len(theirs) > 1
