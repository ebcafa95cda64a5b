"""The PyG front end's loaders (dgl_zerocopy/pyg/loaders.py, sampler.py, features.py) on the CPU: PyG's batch
contract checked field by field.

``NeighborLoader`` and ``LinkNeighborLoader`` on ``Data`` and ``HeteroData``: ``x == data.x[n_id]``, ``edge_attr ==
data.edge_attr[e_id]``, ``data.edge_index[:, e_id] == n_id[edge_index]`` (per edge type), the seeds first, each
hop's edges into the nodes that joined at the hop before with ``min(deg, k)`` in-edges each, ``-1`` the exact
in-neighbourhood, replace, bidirectional, induced and disjoint subgraphs, links with binary and triplet negative
sampling; input nodes as ids, a mask and ``(type, ids)``; workers, ``filter_per_worker``, shuffle, transform;
a two-layer GraphConv on the full-neighbourhood batch equal to the full graph's output (as PyG's own test);
the refusals; ``prefetch=2`` equal to ``prefetch=0`` under one seed, and its thread gone after the epoch, after
a break and after an error; features routed through our store (compressed too) or left to PyG; and
``sample_with_blocks``, the GPU route's translation of DGL-layout blocks, run with the reference backend.
"""

from __future__ import annotations

import gc
import threading
import warnings

import pytest
import torch

pytest.importorskip("torch_geometric")

from torch_geometric.data import Data, HeteroData  # noqa: E402
from torch_geometric.nn import GraphConv  # noqa: E402

from dgl_zerocopy.pyg import LinkNeighborLoader, NeighborLoader  # noqa: E402
from dgl_zerocopy.pyg.sampler import NeighborSampler, sample_with_blocks  # noqa: E402
from dgl_zerocopy.sampling.graph import SamplingGraph  # noqa: E402
from dgl_zerocopy.sampling.neighbor import GpuNeighborSampler  # noqa: E402
from dgl_zerocopy.store.feature_store import FeatureStore as TableStore  # noqa: E402

N, E = 60, 400
PREFETCH_THREAD = "dgl-zerocopy-pyg-prefetch"


def make_data(seed: int = 0) -> Data:
    """Random edges with repeated pairs; node N - 1 has no in-edges; node 0 has 30 more."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(0, N, (E,), generator=gen)
    dst = torch.cat([torch.randint(0, N - 1, (E - 30,), generator=gen), torch.zeros(30, dtype=torch.long)])
    return Data(
        x=torch.randn(N, 5, generator=gen),
        edge_index=torch.stack([src, dst]),
        edge_attr=torch.randn(E, 3, generator=gen),
        w=torch.rand(E, generator=gen),  # a 1-D edge attribute whose name does not say "edge"
        y=torch.arange(N),
    )


EDGE_TYPES = [("paper", "cites", "paper"), ("author", "writes", "paper"), ("paper", "rev_writes", "author"), ("inst", "employs", "author")]
NODES = {"paper": 40, "author": 30, "inst": 10}


def make_hetero(seed: int = 0) -> HeteroData:
    gen = torch.Generator().manual_seed(seed)
    h = HeteroData()
    h["paper"].x = torch.randn(NODES["paper"], 4, generator=gen)
    h["paper"].y = torch.arange(NODES["paper"])
    h["author"].x = torch.randn(NODES["author"], 3, generator=gen)
    h["inst"].num_nodes = NODES["inst"]  # no features at all
    for src, rel, dst in EDGE_TYPES:
        count = 4 * NODES[dst]
        index = torch.stack([torch.randint(0, NODES[src], (count,), generator=gen), torch.randint(0, NODES[dst], (count,), generator=gen)])
        h[src, rel, dst].edge_index = index
    h["author", "writes", "paper"].edge_attr = torch.randn(h["author", "writes", "paper"].num_edges, 2, generator=gen)
    return h


# -- the contract, checked ---------------------------------------------------------------------------------------


def in_degree(edge_index: torch.Tensor, n: int) -> torch.Tensor:
    return torch.bincount(edge_index[1], minlength=n)


def check_homogeneous(data: Data, batch: Data, seeds: torch.Tensor, *, subgraph: str = "directional", disjoint: bool = False) -> None:
    n_id, e_id = batch.n_id, batch.e_id
    assert batch.batch_size == len(seeds) and torch.equal(n_id[: batch.batch_size], seeds), "the seeds come first"
    if disjoint:
        assert torch.equal(batch.batch[: batch.batch_size], torch.arange(batch.batch_size))
        pairs = set(zip(batch.batch.tolist(), n_id.tolist()))
        assert len(pairs) == len(n_id), "a node twice in one tree"
        assert torch.equal(batch.batch[batch.edge_index[0]], batch.batch[batch.edge_index[1]]), "an edge between trees"
    else:
        assert len(n_id.unique()) == len(n_id)
    assert torch.equal(batch.x, data.x[n_id]) and torch.equal(batch.y, data.y[n_id])
    assert torch.equal(batch.edge_attr, data.edge_attr[e_id]) and torch.equal(batch.w, data.w[e_id])
    ends = n_id[batch.edge_index]
    if subgraph == "bidirectional":
        same = (ends == data.edge_index[:, e_id]).all(0)
        flipped = (ends.flip(0) == data.edge_index[:, e_id]).all(0)
        assert (same | flipped).all()
    else:
        assert torch.equal(data.edge_index[:, e_id], ends), "data.edge_index[:, e_id] == n_id[edge_index]"
    if subgraph == "induced":
        wanted = set(n_id.tolist())
        among = [e for e in range(data.num_edges) if data.edge_index[0, e].item() in wanted and data.edge_index[1, e].item() in wanted]
        assert sorted(e_id.tolist()) == among, "every edge among n_id, once"
    if subgraph != "bidirectional":
        assert sum(batch.num_sampled_nodes) == len(n_id) and sum(batch.num_sampled_edges) == batch.edge_index.size(1)


def check_hops(data: Data, batch: Data, fanouts: list[int], replace: bool = False) -> None:
    """Directional: hop ``h``'s edges go into the nodes that joined at hop ``h - 1``, ``min(deg, k)`` each."""
    deg = in_degree(data.edge_index, data.num_nodes)
    starts = torch.tensor([0, *batch.num_sampled_nodes]).cumsum(0)
    first = 0
    for hop, (k, count) in enumerate(zip(fanouts, batch.num_sampled_edges)):
        cols = batch.edge_index[1, first : first + count]
        lo, hi = int(starts[hop]), int(starts[hop + 1])
        assert ((cols >= lo) & (cols < hi)).all(), f"hop {hop + 1}: an edge into a node that did not join at hop {hop}"
        d = deg[batch.n_id[lo:hi]]
        want = d if k < 0 else torch.where(d > 0, k, 0) if replace else d.clamp(max=k)
        assert torch.equal(torch.bincount(cols - lo, minlength=hi - lo), want), f"hop {hop + 1}: in-edges per node"
        first += count


def check_hetero(h: HeteroData, batch: HeteroData, input_type: str | None = None, seeds: torch.Tensor | None = None) -> None:
    for t in h.node_types:
        n_id = batch[t].n_id
        assert len(n_id.unique()) == len(n_id)
        if "x" in h[t]:
            assert torch.equal(batch[t].x, h[t].x[n_id])
        assert sum(batch[t].num_sampled_nodes) == len(n_id)
    if seeds is not None:
        assert batch[input_type].batch_size == len(seeds) and torch.equal(batch[input_type].n_id[: len(seeds)], seeds)
    for et in h.edge_types:
        src, _, dst = et
        ei, e_id = batch[et].edge_index, batch[et].e_id
        ends = torch.stack([batch[src].n_id[ei[0]], batch[dst].n_id[ei[1]]])
        assert torch.equal(h[et].edge_index[:, e_id], ends), f"{et}: edge_index[:, e_id] == n_id[edge_index]"
        assert sum(batch[et].num_sampled_edges) == ei.size(1)
        if "edge_attr" in h[et]:
            assert torch.equal(batch[et].edge_attr, h[et].edge_attr[e_id])


def one_batch(loader):
    return next(iter(loader))


# -- NeighborLoader on Data ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("fanouts", [[3, 2], [-1], [4, -1]], ids=str)
def test_homogeneous_batches(fanouts, replace):
    data = make_data()
    loader = NeighborLoader(data, fanouts, batch_size=16, replace=replace)
    assert len(loader) == 4
    seen = []
    for i, batch in enumerate(loader):
        seeds = torch.arange(16 * i, min(16 * (i + 1), N))
        check_homogeneous(data, batch, seeds)
        check_hops(data, batch, fanouts, replace)
        assert torch.equal(batch.input_id, seeds)
        seen.append(batch.n_id[: batch.batch_size])
    assert torch.equal(torch.cat(seen), torch.arange(N))


def test_minus_one_gives_exactly_the_in_neighbourhood():
    data = make_data()
    seeds = torch.tensor([0, 7, N - 1, 12])
    batch = one_batch(NeighborLoader(data, [-1], input_nodes=seeds, batch_size=4))
    for local, v in enumerate(seeds.tolist()):
        got = sorted(batch.e_id[batch.edge_index[1] == local].tolist())
        assert got == (data.edge_index[1] == v).nonzero().flatten().tolist()
    assert (batch.edge_index[1] == 2).sum() == 0, "node N - 1 has no in-edges"


def test_input_nodes_as_ids_and_as_a_mask():
    data = make_data()
    ids = torch.tensor([5, 3, 40, 22, 9])
    batch = one_batch(NeighborLoader(data, [2, 2], input_nodes=ids, batch_size=5))
    check_homogeneous(data, batch, ids)
    assert torch.equal(batch.input_id, torch.arange(5))
    mask = torch.zeros(N, dtype=torch.bool)
    mask[ids] = True
    batch = one_batch(NeighborLoader(data, [2, 2], input_nodes=mask, batch_size=5))
    check_homogeneous(data, batch, ids.sort().values)


@pytest.mark.parametrize("subgraph", ["directional", "bidirectional", "induced"])
@pytest.mark.parametrize("disjoint", [False, True])
def test_subgraph_types_and_disjoint(subgraph, disjoint):
    data = make_data()
    if disjoint and subgraph == "induced":
        with pytest.raises(ValueError, match="disjoint=True with subgraph_type='induced'"):
            NeighborLoader(data, [3, 2], batch_size=8, subgraph_type=subgraph, disjoint=disjoint)
        return
    seeds = torch.tensor([0, 1, 2, 0, 5, 6, 7, 1]) if disjoint else torch.arange(8)  # disjoint: repeated seeds
    loader = NeighborLoader(data, [3, 2], input_nodes=seeds, batch_size=8, subgraph_type=subgraph, disjoint=disjoint)
    batch = one_batch(loader)
    check_homogeneous(data, batch, seeds, subgraph=subgraph, disjoint=disjoint)
    if subgraph == "directional":
        check_hops(data, batch, [3, 2])
    if subgraph == "bidirectional":
        assert "num_sampled_nodes" not in batch and "num_sampled_edges" not in batch, "as PyG: no per-hop counts"
    if disjoint:
        assert len(batch.n_id.unique()) < len(batch.n_id), "a node in two trees"


def test_directed_false_is_induced():
    data = make_data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # PyG's deprecation of directed=
        batch = one_batch(NeighborLoader(data, [2, 2], batch_size=8, directed=False))
    check_homogeneous(data, batch, torch.arange(8), subgraph="induced")


@pytest.mark.parametrize("subgraph", ["directional", "induced"])
def test_full_neighbourhood_batch_reproduces_a_gnn_on_the_full_graph(subgraph):
    """As PyG's own test: two GraphConv layers on a [-1, -1] batch give the seeds' full-graph outputs."""
    data = make_data()
    torch.manual_seed(0)
    conv1, conv2 = GraphConv(5, 8), GraphConv(8, 4)

    def model(x, edge_index):
        return conv2(conv1(x, edge_index).relu(), edge_index)

    seeds = torch.tensor([0, 3, 11, 42, N - 1])
    batch = one_batch(NeighborLoader(data, [-1, -1], input_nodes=seeds, batch_size=5, subgraph_type=subgraph))
    with torch.no_grad():
        full = model(data.x, data.edge_index)[seeds]
        ours = model(batch.x, batch.edge_index)[: batch.batch_size]
    assert torch.allclose(ours, full, atol=1e-5)


def test_transform_sees_the_features():
    data = make_data()

    def transform(batch):
        batch.x2 = batch.x * 2  # x comes from our store: it must be there when the transform runs
        return batch

    for prefetch in (0, 2):
        batch = one_batch(NeighborLoader(data, [2], batch_size=8, transform=transform, prefetch=prefetch))
        assert torch.equal(batch.x2, 2 * data.x[batch.n_id])


@pytest.mark.parametrize("filter_per_worker", [True, False])
@pytest.mark.parametrize("prefetch", [0, 2])
def test_filter_per_worker(filter_per_worker, prefetch):
    data = make_data()
    loader = NeighborLoader(data, [3, 2], batch_size=20, filter_per_worker=filter_per_worker, prefetch=prefetch)
    batches = list(loader)
    assert len(batches) == 3
    for i, batch in enumerate(batches):
        check_homogeneous(data, batch, torch.arange(20 * i, 20 * i + 20))


def test_shuffle_covers_every_seed_once_in_another_order():
    data = make_data()
    loader = NeighborLoader(data, [2], batch_size=16, shuffle=True)
    torch.manual_seed(4)
    order = torch.cat([b.n_id[: b.batch_size] for b in loader])
    assert sorted(order.tolist()) == list(range(N)) and not torch.equal(order, torch.arange(N))
    torch.manual_seed(4)
    assert torch.equal(torch.cat([b.n_id[: b.batch_size] for b in loader]), order), "the same seed, the same order"


@pytest.mark.parametrize("filter_per_worker", [True, False])
def test_two_workers_cover_every_seed_each_epoch(filter_per_worker):
    data = make_data()
    loader = NeighborLoader(data, [3, 2], batch_size=8, num_workers=2, persistent_workers=True, shuffle=True, filter_per_worker=filter_per_worker, prefetch=0)
    try:
        for _epoch in range(2):
            seeds = []
            for batch in loader:
                check_homogeneous(data, batch, batch.n_id[: batch.batch_size])
                seeds.append(batch.n_id[: batch.batch_size])
            assert sorted(torch.cat(seeds).tolist()) == list(range(N))
    finally:
        # Now, while the queues are there: PyG's loader is in a reference cycle, and its persistent workers,
        # shut down by the garbage collector, time out (5 s each) in whichever test runs then.
        iterator = loader._iterator
        getattr(iterator, "iterator", iterator)._shutdown_workers()


# -- NeighborLoader on HeteroData -----------------------------------------------------------------------------------


def test_hetero_batches_with_input_nodes_as_type_and_ids():
    h = make_hetero()
    seeds = torch.tensor([3, 0, 17, 39])
    loader = NeighborLoader(h, [3, 2], input_nodes=("paper", seeds), batch_size=4)
    batch = one_batch(loader)
    check_hetero(h, batch, "paper", seeds)
    assert torch.equal(batch["paper"].y, h["paper"].y[batch["paper"].n_id]) and torch.equal(batch["paper"].input_id, torch.arange(4))
    assert "x" not in batch["inst"] and len(batch["inst"].n_id) > 0
    mask = torch.zeros(NODES["author"], dtype=torch.bool)
    mask[[2, 9]] = True
    batch = one_batch(NeighborLoader(h, [3, 2], input_nodes=("author", mask), batch_size=2))
    check_hetero(h, batch, "author", torch.tensor([2, 9]))
    batches = list(NeighborLoader(h, [1], input_nodes=("author", None), batch_size=16))
    assert torch.equal(torch.cat([b["author"].n_id[: b["author"].batch_size] for b in batches]), torch.arange(NODES["author"]))


def test_hetero_per_edge_type_fanouts_and_minus_one():
    h = make_hetero()
    fanouts = {EDGE_TYPES[0]: [2, 1], EDGE_TYPES[1]: [-1, 0], EDGE_TYPES[2]: [1, 1], EDGE_TYPES[3]: [0, 3]}
    seeds = torch.tensor([0, 5, 9])
    batch = one_batch(NeighborLoader(h, fanouts, input_nodes=("paper", seeds), batch_size=3))
    check_hetero(h, batch, "paper", seeds)
    for et, k in ((EDGE_TYPES[0], 2), (EDGE_TYPES[1], -1)):
        ei = batch[et].edge_index
        hop1 = ei[:, : batch[et].num_sampled_edges[0]]
        deg = in_degree(h[et].edge_index, NODES["paper"])[seeds]
        want = deg if k < 0 else deg.clamp(max=k)
        assert torch.equal(torch.bincount(hop1[1], minlength=3)[:3], want), f"{et}: in-edges per seed"
        assert (hop1[1] < 3).all()
    writes = batch[EDGE_TYPES[1]]
    for local, v in enumerate(seeds.tolist()):  # -1: exactly the in-edges of each seed
        got = sorted(writes.e_id[: writes.num_sampled_edges[0]][writes.edge_index[1, : writes.num_sampled_edges[0]] == local].tolist())
        assert got == (h[EDGE_TYPES[1]].edge_index[1] == v).nonzero().flatten().tolist()
    assert batch[EDGE_TYPES[1]].num_sampled_edges[1] == 0 and batch[EDGE_TYPES[3]].num_sampled_edges[0] == 0


@pytest.mark.filterwarnings("ignore:Cannot convert to bidirectional graph:UserWarning")  # ("inst", "employs", "author") has no reverse
@pytest.mark.parametrize("subgraph", ["bidirectional", "induced"])
def test_hetero_bidirectional_and_induced(subgraph):
    h = make_hetero()
    batch = one_batch(NeighborLoader(h, [2, 2], input_nodes=("paper", torch.arange(6)), batch_size=6, subgraph_type=subgraph))
    for et in h.edge_types:
        src, _, dst = et
        ends = torch.stack([batch[src].n_id[batch[et].edge_index[0]], batch[dst].n_id[batch[et].edge_index[1]]])
        if subgraph == "induced":
            assert torch.equal(h[et].edge_index[:, batch[et].e_id], ends)
            s, d = set(batch[src].n_id.tolist()), set(batch[dst].n_id.tolist())
            among = [e for e in range(h[et].num_edges) if h[et].edge_index[0, e].item() in s and h[et].edge_index[1, e].item() in d]
            assert sorted(batch[et].e_id.tolist()) == among, f"{et}: every edge among the nodes"
        else:  # as PyG: each edge is one of its type's or a reverse type's, turned round (no e_id then)
            known = set(map(tuple, h[et].edge_index.t().tolist()))
            for other in h.edge_types:
                if other[0] == dst and other[2] == src:
                    known |= set(map(tuple, h[other].edge_index.flip(0).t().tolist()))
            assert set(map(tuple, ends.t().tolist())) <= known, f"{et}: an edge the graph does not have"


def test_hetero_disjoint():
    h = make_hetero()
    seeds = torch.tensor([1, 2, 1])
    batch = one_batch(NeighborLoader(h, [2, 2], input_nodes=("paper", seeds), batch_size=3, disjoint=True))
    assert torch.equal(batch["paper"].n_id[:3], seeds) and torch.equal(batch["paper"].batch[:3], torch.arange(3))
    for t in h.node_types:
        pairs = set(zip(batch[t].batch.tolist(), batch[t].n_id.tolist()))
        assert len(pairs) == len(batch[t].n_id)
    for et in h.edge_types:
        src, _, dst = et
        ei = batch[et].edge_index
        assert torch.equal(batch[src].batch[ei[0]], batch[dst].batch[ei[1]]), f"{et}: an edge between trees"
        assert torch.equal(h[et].edge_index[:, batch[et].e_id], torch.stack([batch[src].n_id[ei[0]], batch[dst].n_id[ei[1]]]))


# -- LinkNeighborLoader ---------------------------------------------------------------------------------------------


def test_link_loader_binary_negatives():
    data = make_data()
    loader = LinkNeighborLoader(data, [3, 2], batch_size=10, neg_sampling_ratio=1.0)
    batches = list(loader)
    assert len(batches) == E // 10
    for i, batch in enumerate(batches[:5]):
        assert torch.equal(batch.x, data.x[batch.n_id]) and torch.equal(batch.edge_attr, data.edge_attr[batch.e_id])
        assert torch.equal(data.edge_index[:, batch.e_id], batch.n_id[batch.edge_index])
        assert torch.equal(batch.input_id, torch.arange(10 * i, 10 * i + 10))
        eli, label = batch.edge_label_index, batch.edge_label
        assert eli.shape == (2, 20) and torch.equal(label, torch.cat([torch.ones(10), torch.zeros(10)]))
        assert torch.equal(batch.n_id[eli[:, :10]], data.edge_index[:, batch.input_id]), "positives: the input edges"
        seeds = set(batch.n_id[: batch.num_sampled_nodes[0]].tolist())
        assert set(batch.n_id[eli].flatten().tolist()) <= seeds, "every endpoint is a seed"
        assert sum(batch.num_sampled_nodes) == len(batch.n_id) and len(batch.n_id.unique()) == len(batch.n_id)


def test_link_loader_with_labels_and_without_negatives():
    data = make_data()
    label_index = data.edge_index[:, [4, 8, 15, 16]]
    labels = torch.tensor([3, 1, 4, 1])
    batch = one_batch(LinkNeighborLoader(data, [2], edge_label_index=label_index, edge_label=labels, batch_size=4))
    assert torch.equal(batch.n_id[batch.edge_label_index], label_index) and torch.equal(batch.edge_label, labels)
    assert torch.equal(data.edge_index[:, batch.e_id], batch.n_id[batch.edge_index])


def test_link_loader_triplet_negatives():
    data = make_data()
    batch = one_batch(LinkNeighborLoader(data, [2, 2], batch_size=8, neg_sampling="triplet", shuffle=True))
    assert batch.src_index.shape == (8,) and batch.dst_pos_index.shape == (8,) and batch.dst_neg_index.numel() == 8
    pos = torch.stack([batch.n_id[batch.src_index], batch.n_id[batch.dst_pos_index]])
    assert torch.equal(pos, data.edge_index[:, batch.input_id])
    assert (batch.dst_neg_index < len(batch.n_id)).all() and (batch.dst_neg_index >= 0).all()
    assert torch.equal(batch.x, data.x[batch.n_id]) and torch.equal(data.edge_index[:, batch.e_id], batch.n_id[batch.edge_index])


@pytest.mark.parametrize("neg", ["binary", "triplet"])
def test_hetero_link_loader(neg):
    h = make_hetero()
    et = ("author", "writes", "paper")
    batch = one_batch(LinkNeighborLoader(h, [3, 2], edge_label_index=(et, None), batch_size=8, neg_sampling=neg))
    check_hetero(h, batch)
    positives = h[et].edge_index[:, batch[et].input_id]
    if neg == "binary":
        eli = batch[et].edge_label_index
        got = torch.stack([batch["author"].n_id[eli[0]], batch["paper"].n_id[eli[1]]])
        assert torch.equal(got[:, :8], positives) and torch.equal(batch[et].edge_label, torch.cat([torch.ones(8), torch.zeros(8)]))
    else:
        got = torch.stack([batch["author"].n_id[batch["author"].src_index], batch["paper"].n_id[batch["paper"].dst_pos_index]])
        assert torch.equal(got, positives)
        assert (batch["paper"].dst_neg_index < len(batch["paper"].n_id)).all()


# -- refusals ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(time_attr="nope"), "time_attr='nope' names no attribute of the data"),
        (dict(weight_attr="nope"), "weight_attr='nope' names no attribute of the data"),
        (dict(input_time=torch.zeros(N)), "conflicting 'input_time' and 'time_attr'"),
        (dict(time_attr="w", temporal_strategy="latest"), "temporal_strategy must be one of"),
        (dict(time_attr="w", weight_attr="w"), "by time and by weight at once"),
        (dict(prefetch=-1), "prefetch must be an int >= 0"),
        (dict(prefetch=1.5), "prefetch must be an int >= 0"),
        (dict(graph_placement="host"), "graph_placement must be"),
    ],
)
def test_refusals_when_built(kwargs, match):
    data = make_data()
    with pytest.raises(ValueError, match=match):
        NeighborLoader(data, [2], batch_size=4, **kwargs)


def test_link_loader_refusals():
    data = make_data()
    with pytest.raises(ValueError, match="conflicting 'edge_label_time' and 'time_attr'"):
        LinkNeighborLoader(data, [2], batch_size=4, edge_label_time=torch.zeros(E))
    with pytest.raises(ValueError, match="temporal sampling \\(time_attr='w'\\) with subgraph_type='induced' is not supported"):
        LinkNeighborLoader(data, [2], batch_size=4, time_attr="w", edge_label_time=torch.zeros(E), subgraph_type="induced")
    with pytest.raises(TypeError, match="features must be a dict"):
        LinkNeighborLoader(data, [2], batch_size=4, features=["x"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
def test_cuda_without_cuda_is_a_runtime_error():
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        NeighborLoader(make_data(), [2], batch_size=4, device="cuda")


# -- prefetch -----------------------------------------------------------------------------------------------------------


def _epoch(loader, seed: int) -> list:
    torch.manual_seed(seed)
    return [(b.n_id, b.edge_index, b.x, b.e_id) for b in loader]


@pytest.mark.parametrize("shuffle", [False, True])
def test_prefetch_gives_the_batches_of_prefetch_zero(shuffle):
    data = make_data()
    serial = _epoch(NeighborLoader(data, [3, 2], batch_size=16, shuffle=shuffle, prefetch=0), seed=7)
    ahead = _epoch(NeighborLoader(data, [3, 2], batch_size=16, shuffle=shuffle, prefetch=2), seed=7)
    assert len(serial) == len(ahead) == 4
    for a, b in zip(serial, ahead):
        assert all(torch.equal(x, y) for x, y in zip(a, b))
    link = [LinkNeighborLoader(data, [2], batch_size=32, neg_sampling_ratio=1.0, shuffle=shuffle, prefetch=p) for p in (0, 2)]
    one, two = (_epoch(loader, seed=8) for loader in link)
    assert all(torch.equal(x, y) for a, b in zip(one, two, strict=True) for x, y in zip(a, b))


def _prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == PREFETCH_THREAD]


def _gone(threads: list[threading.Thread]) -> bool:
    for t in threads:
        t.join(timeout=10)
    return not any(t.is_alive() for t in threads)


def test_the_prefetch_thread_ends_with_the_epoch_after_a_break_and_after_an_error():
    data = make_data()
    loader = NeighborLoader(data, [3, 2], batch_size=8, prefetch=2)
    assert not _prefetch_threads()
    threads = []
    for _ in loader:
        threads = threads or _prefetch_threads()
    assert len(threads) == 1 and _gone(threads), "after the epoch"
    for _ in loader:
        threads = _prefetch_threads()
        break
    assert len(threads) == 1
    del loader
    gc.collect()
    assert _gone(threads), "after a break and the loader deleted"

    def fail(batch):
        if batch.input_id[0] >= 16:
            raise KeyError("the third batch")
        return batch

    loader = NeighborLoader(data, [3, 2], batch_size=8, prefetch=2, transform=fail)
    got = []
    with pytest.raises(KeyError, match="the third batch"):
        for batch in loader:
            got.append(batch)
            threads = threads if len(got) > 1 else _prefetch_threads()
    assert len(got) == 2 and _gone(threads), "after an error in the worker"
    assert len(list(NeighborLoader(data, [3, 2], batch_size=8, prefetch=2))) == 8, "a new loader prefetches again"


def test_close_in_an_epoch_stops_the_prefetch_worker_before_closing_the_stores():
    data = make_data()
    loader = NeighborLoader(data, [3, 2], batch_size=8, prefetch=2)
    iterator = iter(loader)
    next(iterator)
    [thread] = _prefetch_threads()
    loader.close()  # the worker (blocked on its full queue) reads the stores: it stops first
    assert not thread.is_alive()
    assert all(store.closed for store in loader.route.node.values())
    with pytest.raises(StopIteration):
        next(iterator)


# -- features ---------------------------------------------------------------------------------------------------------


def test_features_false_leaves_pyg_slicing():
    data = make_data()
    loader = NeighborLoader(data, [3], batch_size=8, features=False)
    assert not loader.route and "x" in loader.data and "edge_attr" in loader.data
    batch = one_batch(loader)
    check_homogeneous(data, batch, torch.arange(8))


def test_feature_tables_route_through_our_store_by_default():
    data = make_data()
    loader = NeighborLoader(data, [3], batch_size=8)
    assert set(loader.route.node) == {(None, "x")} and set(loader.route.edge) == {(None, "edge_attr")}
    assert all(isinstance(s, TableStore) for s in [*loader.route.node.values(), *loader.route.edge.values()])
    assert loader.data is data and "x" in loader.data, "loader.data is the user's data, tables and all, as in PyG"
    assert loader.route.node[(None, "x")]._table.data_ptr() == data.x.data_ptr(), "the store serves the data's own memory"
    batch = one_batch(loader)
    check_homogeneous(data, batch, torch.arange(8))
    assert "num_nodes" not in batch._store, "no num_nodes the in-memory batch would not have"


def test_a_compressed_store_and_an_extra_table():
    data = make_data()
    store = TableStore(data.x, compression="fp16")
    extra = torch.randn(N, 2)
    loader = NeighborLoader(data, [3, 2], batch_size=16, features={"x": store, "h": extra})
    for batch in loader:
        assert torch.equal(batch.x, store.codec.decode(data.x.half()[batch.n_id], batch.n_id))
        assert torch.allclose(batch.x, data.x[batch.n_id], atol=1e-2, rtol=1e-3) and batch.x.dtype == torch.float32
        assert torch.equal(batch.h, extra[batch.n_id]) and torch.equal(batch.edge_attr, data.edge_attr[batch.e_id])


def test_close_closes_the_stores_it_built_and_leaves_the_ones_passed_in():
    data = make_data()
    store = TableStore(data.x, compression="fp16")
    loader = NeighborLoader(data, [3], batch_size=8, features={"x": store})
    built = loader.route.edge[(None, "edge_attr")]
    loader.close()
    assert built.closed, "the edge table's store was built by the loader: closed with it"
    assert not store.closed, "a store passed in built belongs to its owner"
    again = NeighborLoader(data, [3], batch_size=8, features={"x": store})
    batch = one_batch(again)
    assert torch.equal(batch.x, store.codec.decode(data.x.half()[batch.n_id], batch.n_id)), "a second loader shares it"
    again.close()
    store.close()


def test_hetero_features_by_type():
    h = make_hetero()
    store = TableStore(h["author"].x, compression="fp16")
    et = ("author", "writes", "paper")
    loader = NeighborLoader(h, [3, 2], input_nodes=("paper", torch.arange(8)), batch_size=8, features={("author", "x"): store})
    assert set(loader.route.node) == {("paper", "x"), ("author", "x")} and set(loader.route.edge) == {(et, "edge_attr")}
    batch = one_batch(loader)
    n_id = batch["author"].n_id
    assert torch.equal(batch["author"].x, store.codec.decode(h["author"].x.half()[n_id], n_id))
    assert torch.equal(batch["paper"].x, h["paper"].x[batch["paper"].n_id])
    assert torch.equal(batch[et].edge_attr, h[et].edge_attr[batch[et].e_id])
    assert "num_nodes" not in batch["paper"] and batch["inst"].num_nodes == len(batch["inst"].n_id)


def test_the_gpu_routes_edge_index_handling_on_the_cpu():
    """On a GPU the shell's edge_index is a placeholder on the device (PyG stacks the batch's there, from the
    sampler's row/col): PyG must still tell edge attributes from node attributes (``w``, 1-D, sliced by e_id),
    homogeneous and hetero. The placeholder is made on the loader's device, the CPU here."""
    data = make_data()
    loader = NeighborLoader(data, [3, 2], batch_size=8, features=False)
    loader._own_edge_index = True  # what a CUDA device sets; nothing here runs on CUDA
    loader._graph_num_nodes = N
    shell, _ = loader.route.view(data, loader.device, N)
    assert shell.edge_index.shape == data.edge_index.shape and shell.edge_index.stride() == (0, 0), "a placeholder, no memory"
    assert loader.data.edge_index is data.edge_index, "the user's data keeps its edge_index"
    check_homogeneous(data, one_batch(loader), torch.arange(8))
    bare = Data(edge_index=data.edge_index, w=data.w, y=data.y)  # no table PyG could count nodes by but edge_index
    loader = NeighborLoader(bare, [3, 2], batch_size=8)
    loader._own_edge_index, loader._graph_num_nodes = True, N
    batch = one_batch(loader)
    assert torch.equal(batch.y, data.y[batch.n_id]) and torch.equal(batch.w, data.w[batch.e_id])
    assert torch.equal(batch.n_id[batch.edge_index], data.edge_index[:, batch.e_id]), "the batch's edges are the graph's"
    assert "num_nodes" not in batch._store, "the shell's count is not the batch's"
    h = make_hetero()
    et = ("author", "writes", "paper")
    h[et].weight = torch.rand(h[et].num_edges)
    loader = NeighborLoader(h, [3, 2], input_nodes=("paper", torch.arange(8)), batch_size=8)
    loader._own_edge_index = True
    batch = one_batch(loader)
    check_hetero(h, batch, "paper", torch.arange(8))
    assert torch.equal(batch[et].weight, h[et].weight[batch[et].e_id])


# -- the GPU route's translation, on the CPU ------------------------------------------------------------------------


def _blocks_output(data: Data, seeds: torch.Tensor, fanouts: list[int]):
    """``sample_with_blocks`` over PyG's CSC (colptr, row; perm: CSC position -> edge id) for PyG's
    ``fanouts`` (seeds' first; DGL's blocks take the input layer's first)."""
    pyg_sampler = NeighborSampler(data, fanouts)
    graph = SamplingGraph(pyg_sampler.colptr, pyg_sampler.row)
    with GpuNeighborSampler(list(reversed(fanouts)), device="reference") as blocks:
        out = sample_with_blocks(blocks, graph, seeds, fanouts)
    return out, pyg_sampler.perm


@pytest.mark.parametrize("fanouts", [[3, 2], [-1, -1], [4, 2, 1]], ids=str)
def test_sample_with_blocks_gives_a_pyg_sampler_output(fanouts):
    data = make_data()
    seeds = torch.tensor([0, 4, 9, N - 1])
    torch.manual_seed(0)
    out, perm = _blocks_output(data, seeds, fanouts)
    node, row, col = out.node, out.row, out.col
    e_id = perm[out.edge]
    assert torch.equal(node[:4], seeds) and len(node.unique()) == len(node)
    assert len(out.num_sampled_nodes) == len(fanouts) + 1 and sum(out.num_sampled_nodes) == len(node)
    assert len(out.num_sampled_edges) == len(fanouts) and sum(out.num_sampled_edges) == len(row) == len(col) == len(e_id)
    assert torch.equal(data.edge_index[:, e_id], torch.stack([node[row], node[col]])), "edges consistent with the graph"
    assert len(e_id.unique()) == len(e_id), "no edge twice (each node's in-edges come from one hop)"
    as_batch = Data(edge_index=torch.stack([row, col]), n_id=node, num_sampled_nodes=out.num_sampled_nodes, num_sampled_edges=out.num_sampled_edges)
    check_hops(data, as_batch, fanouts)  # each hop into the nodes of the hop before, min(deg, k) each


def test_sample_with_blocks_full_neighbourhood_reproduces_the_full_graph():
    data = make_data()
    seeds = torch.tensor([0, 3, 11, 42, N - 1])
    out, perm = _blocks_output(data, seeds, [-1, -1])
    torch.manual_seed(0)
    conv1, conv2 = GraphConv(5, 8), GraphConv(8, 4)
    edge_index = torch.stack([out.row, out.col])
    with torch.no_grad():
        full = conv2(conv1(data.x, data.edge_index).relu(), data.edge_index)[seeds]
        ours = conv2(conv1(data.x[out.node], edge_index).relu(), edge_index)[: len(seeds)]
    assert torch.allclose(ours, full, atol=1e-5)


def test_sample_with_blocks_without_layers():
    data = make_data()
    out, _ = _blocks_output(data, torch.tensor([2, 5]), [])
    assert out.node.tolist() == [2, 5] and out.row.numel() == 0 and out.num_sampled_nodes == [2] and out.num_sampled_edges == []


@pytest.fixture
def gpu_route(monkeypatch):
    """Make a sampler take its GPU route on the CPU: a CUDA device as far as the route is decided, the GPU
    sampler (built by the route's own code) on the reference backend (the CUDA kernels' picks), the graph
    built by the route's own code on the host."""
    from dgl_zerocopy.sampling import neighbor

    def reference(fanouts, **kwargs):
        assert kwargs["device"].type == "cuda" and kwargs["placement"] == "host"
        return GpuNeighborSampler(fanouts, replace=kwargs["replace"], device="reference")

    monkeypatch.setattr(neighbor, "GpuNeighborSampler", reference)

    def route(sampler: NeighborSampler) -> None:
        sampler.device = torch.device("cuda")  # read by _gpu_route (and checked above); nothing runs on CUDA
        sampler.graph_placement = "host"

    return route


@pytest.mark.parametrize("subgraph", ["directional", "bidirectional"])
@pytest.mark.parametrize("fanouts", [[3, 2], [4, -1], [-1, -1]], ids=str)
def test_the_gpu_route_on_the_cpu_gives_pygs_batches(fanouts, subgraph, gpu_route):
    """The whole GPU route (sample_with_blocks, edge ids from PyG's perm as the graph's eids, PyG's filter with no
    second mapping) on the reference backend: batches held to the contract of the CPU route."""
    data = make_data()
    loader = NeighborLoader(data, fanouts, batch_size=16, subgraph_type=subgraph)
    gpu_route(loader.node_sampler)
    assert loader.node_sampler.edge_permutation is None and loader.node_sampler.perm is not None
    for i, batch in enumerate(loader):
        check_homogeneous(data, batch, torch.arange(16 * i, min(16 * (i + 1), N)), subgraph=subgraph)
        if subgraph == "directional":
            check_hops(data, batch, fanouts)
    graph = loader.node_sampler._gpu_graph
    assert graph is not None and graph._eids is loader.node_sampler.perm
    loader.close()
    assert graph.closed and loader.node_sampler._gpu_graph is None


def test_the_gpu_route_on_the_cpu_for_links_and_a_full_neighbourhood_gnn(gpu_route):
    data = make_data()
    loader = LinkNeighborLoader(data, [2, 2], batch_size=16, neg_sampling_ratio=1.0)
    gpu_route(loader.link_sampler)
    batch = one_batch(loader)
    assert torch.equal(data.edge_index[:, batch.e_id], batch.n_id[batch.edge_index]) and torch.equal(batch.edge_attr, data.edge_attr[batch.e_id])
    assert torch.equal(batch.n_id[batch.edge_label_index[:, :16]], data.edge_index[:, batch.input_id])
    seeds = torch.tensor([0, 3, 11, 42, N - 1])
    loader = NeighborLoader(data, [-1, -1], input_nodes=seeds, batch_size=5)
    gpu_route(loader.node_sampler)
    batch = one_batch(loader)
    torch.manual_seed(0)
    conv1, conv2 = GraphConv(5, 8), GraphConv(8, 4)
    with torch.no_grad():
        full = conv2(conv1(data.x, data.edge_index).relu(), data.edge_index)[seeds]
        ours = conv2(conv1(batch.x, batch.edge_index).relu(), batch.edge_index)[:5]
    assert torch.allclose(ours, full, atol=1e-5)
