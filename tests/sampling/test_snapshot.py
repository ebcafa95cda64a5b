"""SnapshotSampler: blocks as DGL's NeighborSampler gives them, the snapshot's layout, the
statistics of the picks over many epochs (per-visit marginals, no starved edge with refresh > 0,
at most snapshot_size distinct edges per node with a static snapshot), the refresh, bad input, and
both data loaders."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
import torch

dgl = pytest.importorskip("dgl")

from dgl_zerocopy.sampling import SnapshotSampler  # noqa: E402
from dgl_zerocopy.sampling.snapshot_csc import PickTables, RefreshOrder, Relabel, Snapshot, draw_subsets, side_by_side  # noqa: E402


def random_graph(num_nodes: int = 300, num_edges: int = 6000, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return dgl.graph((torch.randint(0, num_nodes, (num_edges,), generator=gen), torch.randint(0, num_nodes, (num_edges,), generator=gen)), num_nodes=num_nodes)


def stars(num_centres: int, degree: int):
    """Nodes ``0..num_centres-1``, each with ``degree`` in-edges from its own distinct sources."""
    dst = torch.arange(num_centres).repeat_interleave(degree)
    src = num_centres + torch.arange(num_centres * degree)
    return dgl.graph((src, dst), num_nodes=num_centres * (degree + 1))


def check_blocks(g, seeds, fanouts, input_nodes, output_nodes, blocks) -> None:
    """Every edge of every block is an edge of ``g`` with the edge id it carries; destinations come
    first among the sources; each destination has min(in-degree, fanout) distinct in-edges."""
    assert len(blocks) == len(fanouts)
    assert torch.equal(output_nodes, seeds)
    assert torch.equal(input_nodes, blocks[0].srcdata[dgl.NID])
    assert torch.equal(blocks[-1].dstdata[dgl.NID], seeds)
    deg = g.in_degrees()
    for i, (block, fanout) in enumerate(zip(blocks, fanouts)):
        src_ids, dst_ids = block.srcdata[dgl.NID], block.dstdata[dgl.NID]
        assert torch.equal(src_ids[: block.num_dst_nodes()], dst_ids), "destinations first among the sources"
        assert src_ids.unique().numel() == src_ids.numel()
        if i + 1 < len(blocks):
            assert torch.equal(blocks[i + 1].srcdata[dgl.NID], dst_ids)
        u, v = block.edges()
        eid = block.edata[dgl.EID]
        gu, gv = g.find_edges(eid)
        assert torch.equal(gu, src_ids[u]) and torch.equal(gv, dst_ids[v]), "edge ids name the picked edges"
        assert torch.equal(block.in_degrees(), deg[dst_ids].clamp(max=fanout))
        pairs = dst_ids[v] * g.num_edges() + eid  # no edge twice per destination: without replacement
        assert pairs.unique().numel() == pairs.numel()


def test_blocks_are_dgls_blocks_with_original_ids():
    g = random_graph()
    torch.manual_seed(0)
    sampler = SnapshotSampler([4, 3], snapshot_size=6, refresh=0.5)
    seeds = torch.randperm(g.num_nodes())[:50]
    check_blocks(g, seeds, [4, 3], *sampler.sample(g, seeds))
    sampler.refresh_snapshot()
    check_blocks(g, seeds, [4, 3], *sampler.sample(g, seeds))


def test_snapshot_layout_sizes_and_dtypes():
    g = random_graph()
    sampler = SnapshotSampler([5, 2])  # snapshot_size defaults to 2 x 5
    assert sampler.snapshot_size == 10 and sampler.snapshot is None and sampler.snapshot_nbytes == 0
    sampler.sample(g, torch.arange(5))
    snap = sampler.snapshot
    assert snap.indptr.dtype == snap.src.dtype == snap.eid.dtype == torch.int32
    deg = g.in_degrees()
    assert torch.equal((snap.indptr[1:] - snap.indptr[:-1]).long(), deg.clamp(max=10))
    dst = torch.repeat_interleave(torch.arange(g.num_nodes()), (snap.indptr[1:] - snap.indptr[:-1]).long())
    gu, gv = g.find_edges(snap.eid.long())
    assert torch.equal(gv, dst) and torch.equal(gu, snap.src.long()), "each slot holds an in-edge of its node"
    assert (dst * g.num_edges() + snap.eid.long()).unique().numel() == snap.eid.numel(), "distinct in-edges per node"
    assert sampler.snapshot_nbytes == sum(t.numel() * t.element_size() for t in snap)
    indptr, indices, eids = g.adj_tensors("csc")
    assert sampler.full_csc_nbytes == sum(t.numel() * t.element_size() for t in (indptr, indices, eids))
    assert sampler.snapshot_nbytes < sampler.full_csc_nbytes
    assert sampler.state_nbytes > sampler.snapshot_nbytes


def test_sources_and_edge_ids_side_by_side_pick_as_two_arrays_do():
    """The packed layout (one 8-byte read per picked slot) is a layout only: the picks of a packed
    snapshot equal those of the same snapshot in two arrays, draw for draw; it survives pickling."""
    g = random_graph(num_nodes=400, num_edges=9000)
    sampler = SnapshotSampler([6, 3], snapshot_size=8)
    sampler.sample(g, torch.arange(10))
    snap = sampler.snapshot
    assert snap.packed is not None and snap.packed.dtype == torch.int64
    assert torch.equal(snap.packed.view(torch.int32).view(-1, 2), torch.stack([snap.src, snap.eid], 1))
    apart = Snapshot(snap.indptr, snap.src.clone(), snap.eid.clone())
    assert apart.packed is None and side_by_side(apart).packed is not None
    dst = torch.randperm(g.num_nodes())[:150]
    for fanout in (0, 3, 6):
        torch.manual_seed(fanout)
        packed = sampler._tables.pick(snap, dst, fanout)
        torch.manual_seed(fanout)
        plain = sampler._tables.pick(apart, dst, fanout)
        assert all(torch.equal(a.long(), b.long()) for a, b in zip(packed, plain))
    copy = pickle.loads(pickle.dumps(sampler))  # plain pickle sends the columns apart: packed again
    assert copy.snapshot.packed is not None and torch.equal(copy.snapshot.eid, snap.eid)
    check_blocks(g, dst[:20], [6, 3], *copy.sample(g, dst[:20]))


@pytest.mark.parametrize("num_nodes", [100, 100_000])  # a scan of every node's flag; a sort of few picks
def test_relabel_numbers_destinations_first_then_new_sources_by_id(num_nodes):
    gen = torch.Generator().manual_seed(num_nodes)
    relabel = Relabel(num_nodes)
    for _ in range(3):  # the scratch arrays are clean between calls
        dst = torch.randperm(num_nodes, generator=gen)[:40]
        src = torch.randint(0, num_nodes, (500,), generator=gen, dtype=torch.int32)
        nodes, local = relabel(dst, src)
        new = torch.from_numpy(np.setdiff1d(src.long().unique().numpy(), dst.numpy()))
        assert torch.equal(nodes, torch.cat([dst, new]))
        assert local.dtype == torch.int64 and torch.equal(nodes[local], src.long())
        assert not relabel.state.any()


def test_draws_follow_torchs_seed():
    """``torch.manual_seed`` reproduces the snapshot's draws (NumPy's generator is seeded from torch's)."""
    counts = torch.randint(10, 50, (300,))
    torch.manual_seed(5)
    first = draw_subsets(counts, 7)
    torch.manual_seed(5)
    assert torch.equal(draw_subsets(counts, 7), first)
    assert not torch.equal(draw_subsets(counts, 7), first)


def test_draw_subsets_is_uniform():
    torch.manual_seed(1)
    n, d, k = 20000, 5, 2
    rows = draw_subsets(torch.full((n,), d), k)
    assert ((rows >= 0) & (rows < d)).all() and (rows[:, 0] != rows[:, 1]).all()
    code = rows.min(1).values * d + rows.max(1).values
    counts = torch.bincount(code, minlength=d * d)[code.unique()]
    p = 1 / math.comb(d, k)
    assert counts.numel() == math.comb(d, k)
    assert (counts - n * p).abs().max() <= 5 * math.sqrt(n * p * (1 - p)), counts


def test_table_picks_are_uniform():
    torch.manual_seed(2)
    snap = Snapshot(torch.tensor([0, 5], dtype=torch.int32), torch.arange(5, dtype=torch.int32), torch.arange(5, dtype=torch.int32))
    tables = PickTables(5, 2)
    dst = torch.zeros(2000, dtype=torch.int64)
    codes = []
    for _ in range(10):  # the tables are redrawn per epoch
        tables.redraw()
        indptr, src, _ = tables.pick(snap, dst, 2)
        assert torch.equal(indptr, torch.arange(0, 4001, 2))
        pairs = src.view(-1, 2).long()
        assert (pairs[:, 0] != pairs[:, 1]).all()
        codes.append(pairs.min(1).values * 5 + pairs.max(1).values)
    counts = torch.bincount(torch.cat(codes))[torch.cat(codes).unique()]
    n, p = 20000, 1 / 10
    # Picks within one table share its rows: the variance of a pattern's share in a table adds to the draws'.
    bound = 5 * math.sqrt(n * p * (1 - p) + 10 * (2000 * 2000) * p * (1 - p) / tables.rows)
    assert counts.numel() == 10 and (counts - n * p).abs().max() <= bound, counts


def pick_counts(sampler, g, epochs: int, centres: int):
    """How often each edge is picked when every centre is a seed once per epoch (refreshed per epoch)."""
    counts = torch.zeros(g.num_edges(), dtype=torch.int64)
    seeds = torch.arange(centres)
    for _ in range(epochs):
        sampler.refresh_snapshot(g)
        _, _, blocks = sampler.sample(g, seeds)
        counts += torch.bincount(blocks[0].edata[dgl.EID].long(), minlength=g.num_edges())
    return counts


@pytest.mark.slow
@pytest.mark.parametrize("refresh", [0.25, 1.0])
def test_every_edge_is_picked_with_probability_fanout_over_degree(refresh):
    """The guarantee: per visit each in-edge is picked with probability f / d; over many epochs with
    refresh > 0 no edge is starved. Bound: the count of an edge over T epochs is a sum of
    independent runs of at most L = ceil(1 / refresh) epochs sharing one snapshot, so its variance is
    at most T * a + T * L * b with a = (K/d)(f/K)(1 - f/K) (the picks given the snapshot) and
    b = (f/K)^2 (K/d)(1 - K/d) (whether the edge is in the snapshot); every edge within 5 sd."""
    torch.manual_seed(3)
    check_pick_rate(lambda f, k: SnapshotSampler([f], snapshot_size=k, refresh=refresh), refresh, epochs=400)


def check_pick_rate(make_sampler, refresh: float, epochs: int) -> None:
    """The guarantee's check (the bound above) for the sampler ``make_sampler(fanout, snapshot_size)``
    over ``epochs`` epochs of 16 stars of in-degree 12, snapshot 6, fanout 3."""
    centres, d, k, f = 16, 12, 6, 3
    g = stars(centres, d)
    counts = pick_counts(make_sampler(f, k), g, epochs, centres)
    mean = epochs * f / d
    run = math.ceil(1 / refresh)
    var = epochs * (k / d) * (f / k) * (1 - f / k) + epochs * run * (f / k) ** 2 * (k / d) * (1 - k / d)
    assert counts.sum() == epochs * centres * f
    assert (counts > 0).all(), "an edge was never picked"
    assert (counts - mean).abs().max() <= 5 * math.sqrt(var), (counts.min(), counts.max(), mean, math.sqrt(var))


def test_a_static_snapshot_never_gives_more_than_snapshot_size_edges():
    torch.manual_seed(4)
    centres, d, k, f = 16, 12, 6, 3
    g = stars(centres, d)
    sampler = SnapshotSampler([f], snapshot_size=k, refresh=0)
    counts = pick_counts(sampler, g, 200, centres)
    picked_per_node = (counts > 0).view(centres, d).sum(1)
    assert (picked_per_node == k).all(), picked_per_node  # k distinct edges, never more
    assert sampler.nodes_refreshed == 0


def test_refresh_redraws_each_partial_snapshot_once_per_round():
    g = stars(10, 12)
    torch.manual_seed(5)
    sampler = SnapshotSampler([2], snapshot_size=4, refresh=0.3)
    assert sampler.refresh_snapshot() == 0  # nothing built yet: nothing to refresh
    sampler.sample(g, torch.arange(3))
    tables = sampler._tables.table.clone()
    assert sampler.refresh_snapshot() == math.ceil(0.3 * 10)
    assert not torch.equal(sampler._tables.table, tables), "the per-visit draws are renewed every epoch"
    order = RefreshOrder(torch.arange(10))
    taken = [order.take(3) for _ in range(4)]  # ceil(1 / 0.3) = 4 epochs cover every node
    assert torch.cat(taken).unique().numel() == 10
    assert all(t.unique().numel() == t.numel() for t in taken)
    # refresh=1 redraws them all, every epoch
    full = SnapshotSampler([2], snapshot_size=4, refresh=1)
    full.sample(g, torch.arange(3))
    assert full.refresh_snapshot() == 10


def test_a_copy_in_another_process_keeps_the_snapshot():
    """A loader's worker gets a pickled sampler and its own copy of the graph: it samples from the
    snapshot it was given instead of building another."""
    g = random_graph()
    sampler = SnapshotSampler([3], refresh=0.5)
    sampler.sample(g, torch.arange(4))
    copy = pickle.loads(pickle.dumps(sampler))
    g_copy = pickle.loads(pickle.dumps(g))
    before = copy.snapshot.src.clone()
    check_blocks(g_copy, torch.arange(8), [3], *copy.sample(g_copy, torch.arange(8)))
    assert torch.equal(copy.snapshot.src, before) and copy.nodes_refreshed == 0
    other = random_graph(seed=1)  # another graph of the same size gets its own snapshot
    copy.sample(other, torch.arange(4))
    assert not torch.equal(copy.snapshot.eid, sampler.snapshot.eid)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"fanouts": [5, 10], "snapshot_size": 7}, "snapshot_size=7 is below the largest fanout 10"),
        ({"fanouts": [5], "refresh": 1.5}, "refresh=1.5 must be a share in [0, 1]"),
        ({"fanouts": [5], "refresh": -0.1}, "refresh=-0.1 must be a share in [0, 1]"),
        ({"fanouts": [5], "refresh": float("nan")}, "refresh=nan must be a share in [0, 1]"),
        ({"fanouts": [5, -1]}, "fanouts[1] is -1 (every in-edge)"),
        ({"fanouts": [-1], "snapshot_size": 10}, "fanouts[0] is -1 (every in-edge)"),
        ({"fanouts": 5}, "fanouts must be a non-empty list"),
        ({"fanouts": [5, "a"]}, "fanouts[1] must be an int >= 0, but got 'a'"),
    ],
)
def test_bad_arguments_name_the_value(kwargs, message):
    with pytest.raises(ValueError) as err:
        SnapshotSampler(**kwargs)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def check_bad_calls_refused(sampler, outside: str) -> None:
    """``sampler``, nothing built yet, refuses a heterograph, then a seed outside the graph (an IndexError
    matching ``outside``) and exclude_eids."""
    hetero = dgl.heterograph({("a", "r", "b"): (torch.tensor([0]), torch.tensor([0]))})
    with pytest.raises(ValueError, match="one node type and one edge type"):
        sampler.sample(hetero, torch.arange(1))
    g = random_graph()
    with pytest.raises(IndexError, match=outside):
        sampler.sample(g, torch.tensor([1, 300]))
    with pytest.raises(ValueError, match="does not exclude edges"):
        sampler.sample(g, torch.arange(3), exclude_eids=torch.arange(2))


def test_bad_calls_are_refused():
    sampler = SnapshotSampler([3])
    check_bad_calls_refused(sampler, outside="seed node 300 is outside")
    assert sampler.snapshot is None  # nothing half-built


def test_dgl_api_it_uses():
    """The DGL calls SnapshotSampler relies on, in the installed DGL."""
    block = dgl.create_block(("csc", (torch.tensor([0, 2, 3]), torch.tensor([1, 2, 0]), torch.empty(0, dtype=torch.int64))), num_src_nodes=3, num_dst_nodes=2)
    assert torch.equal(block.edges(order="eid")[0], torch.tensor([1, 2, 0]))  # edge i is CSC position i
    assert callable(dgl.dataloading.BlockSampler.assign_lazy_features)
    assert len(random_graph().adj_tensors("csc")) == 3


def test_in_dgls_dataloader_with_prefetched_data():
    g = random_graph()
    g.ndata["feat"] = torch.randn(g.num_nodes(), 4)
    g.ndata["label"] = torch.arange(g.num_nodes())
    sampler = SnapshotSampler([4, 3], prefetch_node_feats=["feat"], prefetch_labels=["label"])
    loader = dgl.dataloading.DataLoader(g, torch.arange(100), sampler, batch_size=32, shuffle=True)
    for _ in range(2):
        sampler.refresh_snapshot()  # DGL's loader has no epoch hook: the loop refreshes
        seen = []
        for input_nodes, output_nodes, blocks in loader:
            check_blocks(g, output_nodes, [4, 3], input_nodes, output_nodes, blocks)
            assert torch.equal(blocks[0].srcdata["feat"], g.ndata["feat"][input_nodes])
            assert torch.equal(blocks[-1].dstdata["label"], output_nodes)
            seen.append(output_nodes)
        assert torch.equal(torch.cat(seen).sort().values, torch.arange(100))


def test_our_dataloader_refreshes_at_every_epoch():
    from dgl_zerocopy import DataLoader

    g = random_graph()
    feat = torch.randn(g.num_nodes(), 4)
    sampler = SnapshotSampler([4, 3], snapshot_size=4, refresh=0.25)
    loader = DataLoader(g, torch.arange(64), sampler, batch_size=16, shuffle=True, features={"feat": feat}, prefetch=1)
    partial = int((g.in_degrees() > 4).sum())
    for epoch in range(3):
        for input_nodes, output_nodes, blocks in loader:
            check_blocks(g, output_nodes, [4, 3], input_nodes, output_nodes, blocks)
            assert torch.equal(blocks[0].srcdata["feat"], feat[input_nodes])
        # Epoch 0 builds the snapshot; each later epoch redraws ceil(refresh * partial) nodes first.
        assert sampler.nodes_refreshed == epoch * math.ceil(0.25 * partial)
    loader.close()


@pytest.mark.slow  # starts worker processes
def test_worker_processes_sample_from_the_refreshed_snapshot():
    """num_workers > 0: the main process builds and refreshes (on_epoch_start); each epoch's workers
    start with that snapshot, so every edge they pick is in it."""
    from dgl_zerocopy import DataLoader

    g = random_graph()
    sampler = SnapshotSampler([4, 3], snapshot_size=4, refresh=1.0)
    loader = DataLoader(g, torch.arange(64), sampler, batch_size=16, num_workers=2, features={"feat": torch.randn(g.num_nodes(), 4)})
    try:
        previous = None
        for epoch in range(3):
            picked = torch.cat([blocks[0].edata[dgl.EID] for _, _, blocks in loader])
            current = sampler.snapshot.eid.clone()
            assert torch.isin(picked, current.long()).all(), f"epoch {epoch}: a worker picked an edge outside the main snapshot"
            if previous is not None:
                assert not torch.equal(current, previous), "refresh=1 redraws the snapshot every epoch"
            previous = current
        assert sampler.nodes_refreshed == 2 * int((g.in_degrees() > 4).sum())
    finally:
        loader.close()
