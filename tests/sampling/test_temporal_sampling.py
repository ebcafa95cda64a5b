"""Temporal neighbour sampling (dgl_zerocopy/sampling/picks.py, cpu_hops.HopSampler, pyg/sampler.py) with pyg-lib's semantics.

Per tree (``disjoint``), a destination picks only in-edges no later than its seed's time: the times of each
neighbourhood are sorted, the cut-off is a binary search (``upper_bounds`` against a loop), ``'uniform'`` picks
uniformly below it (chi-squared), ``'last'`` the latest ``k``. The whole multi-hop ``'last'`` batch is deterministic,
so it is checked equal, node for node and edge for edge, to a plain-Python sampler written from pyg-lib's rules
(a mapper keyed by (tree, node), new nodes in order of first occurrence). Node-level and edge-level times,
homogeneous and heterogeneous, through PyG's NeighborLoader and LinkNeighborLoader (seed times from the seeds,
``input_time`` and ``edge_label_time``); every "no later" check is shown able to fail on the same graph sampled
without times. Every HopSampler test runs on both of its paths (NumPy, and the compiled kernels).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_cpu_hops import compiled  # noqa: F401 - autouse: every test on NumPy alone and on the compiled kernels

from dgl_zerocopy.sampling import hop_kernels
from dgl_zerocopy.sampling.cpu_hops import HopSampler, Relation
from dgl_zerocopy.sampling.picks import cut_by_time, upper_bounds


def temporal_csc(num_nodes: int, num_edges: int, seed: int, *, edge_level: bool):
    """An in-edge CSC sorted by time within each neighbourhood, one hub (node 0, 200 more in-edges), and the
    per-position times: an edge's own (edge-level) or its source's (node-level, with the node times)."""
    gen = np.random.default_rng(seed)
    dst = np.concatenate([gen.integers(0, num_nodes, num_edges), np.zeros(200, dtype=np.int64)])
    src = gen.integers(0, num_nodes, len(dst))
    node_time = gen.integers(0, 1000, num_nodes)
    edge_time = gen.integers(0, 1000, len(dst))
    key = edge_time if edge_level else node_time[src]
    order = np.lexsort((key, dst))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=num_nodes))])
    indices = src[order]
    times = edge_time[order] if edge_level else node_time[indices]
    return indptr, indices, times, node_time


def sampler_for(indptr, indices, times, num_nodes) -> HopSampler:
    return HopSampler({"r": Relation(indptr, indices, "n", "n", times=times)}, {"n": num_nodes})


def edge_trees(out):
    """Each sampled edge's tree (seed index)."""
    return out.batch["n"][out.col["r"]]


# -- the cut-off -------------------------------------------------------------------------------------------------


def test_upper_bounds_equal_a_loop():
    gen = np.random.default_rng(0)
    values = np.sort(gen.integers(0, 20, 300))
    lo = gen.integers(0, 300, 100)
    hi = np.minimum(lo + gen.integers(0, 40, 100), 300)
    values[lo[0] : hi[0]] = 5  # a run of equal times: the bound goes past all of them
    limit = gen.integers(-2, 22, 100)
    limit[0] = 5
    want = [next((p for p in range(a, b) if values[p] > t), b) for a, b, t in zip(lo, hi, limit)]
    assert upper_bounds(values, lo, hi, limit).tolist() == want


@pytest.mark.parametrize("strategy", ["uniform", "last"])
@pytest.mark.parametrize("fanout", [3, -1])
def test_cut_by_time_keeps_the_allowed_prefix(strategy, fanout):
    indptr, _, times, _ = temporal_csc(50, 400, 1, edge_level=True)
    dst = np.arange(50)
    limit = np.random.default_rng(2).integers(0, 1000, 50)
    start, deg = cut_by_time(indptr, times, dst, limit, fanout, strategy)
    for v in dst:
        allowed = [p for p in range(indptr[v], indptr[v + 1]) if times[p] <= limit[v]]
        if strategy == "last" and fanout >= 0:
            allowed = allowed[len(allowed) - min(fanout, len(allowed)) :]
        assert list(range(start[v], start[v] + deg[v])) == allowed, v


# -- HopSampler ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("edge_level", [False, True], ids=["node-time", "edge-time"])
@pytest.mark.parametrize("strategy", ["uniform", "last"])
@pytest.mark.parametrize("replace", [False, True])
def test_no_sampled_neighbour_is_later_than_its_seed(edge_level, strategy, replace):
    n = 300
    indptr, indices, times, node_time = temporal_csc(n, 4000, 3, edge_level=edge_level)
    seeds = np.random.default_rng(4).integers(0, n, 64)
    seeds[0] = 0  # the hub
    seed_time = node_time[seeds] if not edge_level else np.random.default_rng(5).integers(0, 1000, len(seeds))
    rng = np.random.default_rng(6)
    out = sampler_for(indptr, indices, times, n).sample(
        {"n": seeds}, {"r": [6, 4, 3]}, replace=replace, disjoint=True, rng=rng, seed_times={"n": seed_time}, temporal_strategy=strategy
    )
    assert len(out.pos["r"]) > 500
    assert (times[out.pos["r"]] <= seed_time[edge_trees(out)]).all(), "a neighbour later than its seed's time"
    if not edge_level:  # every node of a tree is no later than its seed
        assert (node_time[out.nodes["n"]] <= seed_time[out.batch["n"]]).all()
    # The check above can fail: the same graph sampled without times has later neighbours.
    plain = HopSampler({"r": Relation(indptr, indices, "n", "n")}, {"n": n}).sample({"n": seeds}, {"r": [6, 4, 3]}, disjoint=True, rng=rng)
    assert (times[plain.pos["r"]] > seed_time[edge_trees(plain)]).any()


def reference_last(indptr, indices, times, seeds, seed_time, fanouts):
    """pyg-lib's temporal 'last' sampling, homogeneous and disjoint, as plain Python: per hop and per node of
    the previous hop, the last ``k`` in-edges no later than its tree's time; nodes keyed by (tree, id)."""
    nodes = [(i, int(s)) for i, s in enumerate(seeds)]
    mapper = {node: i for i, node in enumerate(nodes)}
    rows, cols, poss, begin = [], [], [], 0
    for k in fanouts:
        end = len(nodes)
        for i in range(begin, end):
            tree, v = nodes[i]
            allowed = [p for p in range(indptr[v], indptr[v + 1]) if times[p] <= seed_time[tree]]
            for p in allowed[max(0, len(allowed) - k) :] if k >= 0 else allowed:
                node = (tree, int(indices[p]))
                if node not in mapper:
                    mapper[node] = len(nodes)
                    nodes.append(node)
                rows.append(mapper[node])
                cols.append(i)
                poss.append(p)
        begin = end
    return nodes, rows, cols, poss


@pytest.mark.parametrize("edge_level", [False, True], ids=["node-time", "edge-time"])
def test_last_equals_the_plain_python_reference(edge_level):
    n = 120
    indptr, indices, times, node_time = temporal_csc(n, 900, 7, edge_level=edge_level)
    seeds = np.array([0, 5, 5, 17, 99, 0])  # a repeated seed is a tree of its own
    seed_time = np.array([900, 400, 800, 1000, 0, 100])
    fanouts = [3, 2, -1]
    out = sampler_for(indptr, indices, times, n).sample(
        {"n": seeds}, {"r": fanouts}, disjoint=True, rng=np.random.default_rng(0), seed_times={"n": seed_time}, temporal_strategy="last"
    )
    nodes, rows, cols, poss = reference_last(indptr, indices, times, seeds, seed_time, fanouts)
    assert list(zip(out.batch["n"].tolist(), out.nodes["n"].tolist())) == nodes
    assert out.row["r"].tolist() == rows and out.col["r"].tolist() == cols and out.pos["r"].tolist() == poss
    assert len(poss) > 40


def test_last_picks_the_most_recent():
    # One destination, in-edges at times 0..19 (sorted), seed time 12: 'last' with k=4 takes times 9..12.
    indptr = np.array([0, 0] + [20] * 20)
    indices = np.arange(1, 21)
    times = np.arange(20)
    out = HopSampler({"r": Relation(indptr, indices, "n", "n", times=times)}, {"n": 21}).sample(
        {"n": np.array([1])}, {"r": [4]}, disjoint=True, seed_times={"n": np.array([12])}, temporal_strategy="last"
    )
    assert sorted(times[out.pos["r"]].tolist()) == [9, 10, 11, 12]


@pytest.mark.parametrize("replace", [False, True])
def test_uniform_is_uniform_below_the_cut_off_chi_square(replace):
    """The hub's 201 in-edges, a cut-off that allows about half: over many batches each allowed in-edge is
    picked equally often (chi-squared, p > 1e-4 on a fixed seed), none past the cut-off."""
    stats = pytest.importorskip("scipy.stats")
    n = 300
    indptr, indices, times, _ = temporal_csc(n, 100, 8, edge_level=True)
    sampler = sampler_for(indptr, indices, times, n)
    limit = int(np.median(times[indptr[0] : indptr[1]]))
    allowed = np.flatnonzero(times[indptr[0] : indptr[1]] <= limit)
    hits = np.zeros(indptr[1] - indptr[0], dtype=np.int64)
    rng = np.random.default_rng(9)
    for _ in range(40):
        seeds = np.zeros(50, dtype=np.int64)
        out = sampler.sample({"n": seeds}, {"r": [5]}, replace=replace, disjoint=True, rng=rng, seed_times={"n": np.full(50, limit)})
        np.add.at(hits, out.pos["r"] - indptr[0], 1)
    assert hits.sum() == 40 * 50 * 5 and hits[allowed].sum() == hits.sum()
    assert stats.chisquare(hits[allowed]).pvalue > 1e-4, hits[allowed]


def test_refusals():
    indptr, indices, times, _ = temporal_csc(30, 100, 10, edge_level=True)
    sampler = sampler_for(indptr, indices, times, 30)
    seeds = {"n": np.array([0, 1])}
    with pytest.raises(ValueError, match="needs disjoint=True"):
        sampler.sample(seeds, {"r": [2]}, seed_times={"n": np.array([1, 2])})
    with pytest.raises(ValueError, match=r"needs seed_times\['n'\]"):
        sampler.sample(seeds, {"r": [2]}, disjoint=True)
    with pytest.raises(ValueError, match="one time per seed"):
        sampler.sample(seeds, {"r": [2]}, disjoint=True, seed_times={"n": np.array([1])})
    with pytest.raises(ValueError, match="temporal_strategy must be one of"):
        sampler.sample(seeds, {"r": [2]}, disjoint=True, seed_times={"n": np.array([1, 2])}, temporal_strategy="latest")
    unsorted = times.copy()
    v = int(np.flatnonzero(np.diff(indptr) >= 2)[0])
    unsorted[indptr[v]], unsorted[indptr[v] + 1] = 5, 4
    with pytest.raises(ValueError, match=f"in-edges of node {v} are not sorted by time"):
        sampler_for(indptr, indices, unsorted, 30)
    with pytest.raises(ValueError, match="one time per edge"):
        sampler_for(indptr, indices, times[:-1], 30)
    with pytest.raises(ValueError, match="by time and by weight at once"):
        HopSampler({"r": Relation(indptr, indices, "n", "n", times=times, weights=np.ones(len(times)))}, {"n": 30})


# -- through PyG's loaders ---------------------------------------------------------------------------------------------


def pyg_data(edge_level: bool, seed: int = 0):
    from torch_geometric.data import Data

    gen = torch.Generator().manual_seed(seed)
    n, e = 400, 5000
    data = Data(edge_index=torch.randint(0, n, (2, e), generator=gen), x=torch.randn(n, 4, generator=gen), num_nodes=n)
    if edge_level:
        data.etime = torch.randint(0, 1000, (e,), generator=gen)
    else:
        data.time = torch.randint(0, 1000, (n,), generator=gen)
    return data


def test_neighbor_loader_node_time_no_node_later_than_its_seed():
    from dgl_zerocopy.pyg import NeighborLoader

    data = pyg_data(edge_level=False)
    loader = NeighborLoader(data, num_neighbors=[5, 5], time_attr="time", batch_size=32)
    for batch in loader:
        seed_time = data.time[batch.n_id[: batch.batch_size]]
        assert (batch.time <= seed_time[batch.batch]).all()
        src, dst = batch.edge_index
        assert torch.equal(batch.batch[src], batch.batch[dst]), "an edge between two trees"
    # Without times the same data has later neighbours: the check above can fail.
    plain = next(iter(NeighborLoader(data, num_neighbors=[5, 5], disjoint=True, batch_size=32)))
    assert (data.time[plain.n_id] > data.time[plain.n_id[: plain.batch_size]][plain.batch]).any()


@pytest.mark.parametrize("strategy", ["uniform", "last"])
def test_neighbor_loader_edge_time_and_input_time(strategy):
    from dgl_zerocopy.pyg import NeighborLoader

    data = pyg_data(edge_level=True)
    input_time = torch.randint(0, 1000, (data.num_nodes,), generator=torch.Generator().manual_seed(3))
    loader = NeighborLoader(data, num_neighbors=[4, 3], time_attr="etime", input_time=input_time, temporal_strategy=strategy, batch_size=50)
    batch = next(iter(loader))
    assert torch.equal(batch.seed_time, input_time[: batch.batch_size])
    dst = batch.edge_index[1]
    assert (data.etime[batch.e_id] <= batch.seed_time[batch.batch[dst]]).all()
    if strategy == "last":  # the seeds' in-edges are each one's latest allowed ones
        for i in range(5):
            v, t = int(batch.n_id[i]), int(batch.seed_time[i])
            mask = (data.edge_index[1] == v) & (data.etime <= t)
            latest = sorted(data.etime[mask].tolist())[-4:]
            got = sorted(data.etime[batch.e_id[dst == i]].tolist())
            assert got == latest, (i, got, latest)


def test_link_neighbor_loader_edge_label_time():
    from dgl_zerocopy.pyg import LinkNeighborLoader

    data = pyg_data(edge_level=False, seed=1)
    label_index = data.edge_index[:, :64]
    label_time = torch.randint(0, 1000, (64,), generator=torch.Generator().manual_seed(4))
    loader = LinkNeighborLoader(data, num_neighbors=[4, 4], edge_label_index=label_index, edge_label_time=label_time, time_attr="time", batch_size=16)
    seen = 0
    for batch in loader:
        # Each label edge's two ends are two trees of its time; the ends themselves may be later (seeds are
        # not filtered, as in pyg-lib), every node sampled from them is not.
        per_tree = torch.cat([batch.edge_label_time, batch.edge_label_time])
        first = int(batch.num_sampled_nodes[0])
        assert first == 2 * len(batch.edge_label_time) and len(batch.time) > first
        assert (batch.time[first:] <= per_tree[batch.batch[first:]]).all()
        seen += len(batch.edge_label_time)
    assert seen == 64


def test_hetero_node_time():
    from torch_geometric.data import HeteroData

    from dgl_zerocopy.pyg import NeighborLoader

    gen = torch.Generator().manual_seed(5)
    data = HeteroData()
    data["paper"].x = torch.randn(200, 3, generator=gen)
    data["paper"].time = torch.randint(0, 100, (200,), generator=gen)
    data["author"].x = torch.randn(80, 3, generator=gen)
    data["author"].time = torch.randint(0, 100, (80,), generator=gen)
    data["author", "writes", "paper"].edge_index = torch.stack([torch.randint(0, 80, (1500,), generator=gen), torch.randint(0, 200, (1500,), generator=gen)])
    data["paper", "rev_writes", "author"].edge_index = data["author", "writes", "paper"].edge_index.flip(0)
    loader = NeighborLoader(data, num_neighbors=[4, 4], input_nodes="paper", time_attr="time", batch_size=20)
    batch = next(iter(loader))
    seed_time = data["paper"].time[batch["paper"].n_id[:20]]
    for t in ("paper", "author"):
        assert len(batch[t].n_id) > 0
        assert (batch[t].time <= seed_time[batch[t].batch]).all(), t


# -- the compiled kernels equal to the NumPy reference -----------------------------------------------------------------


@pytest.mark.skipif(not hop_kernels.available, reason="numba is not installed (it comes with dgl-zerocopy[pyg])")
@pytest.mark.parametrize("edge_level", [False, True], ids=["node-time", "edge-time"])
@pytest.mark.parametrize("strategy", ["uniform", "last"])
@pytest.mark.parametrize("replace", [False, True])
def test_compiled_equals_numpy(edge_level, strategy, replace, monkeypatch):
    monkeypatch.setattr(hop_kernels, "available", True)
    monkeypatch.setattr(hop_kernels, "PARALLEL_EDGES", 64)  # the picks split over threads too
    n = 500
    indptr, indices, times, node_time = temporal_csc(n, 8000, 11, edge_level=edge_level)
    seeds = np.random.default_rng(12).integers(0, n, 100)
    seed_time = np.random.default_rng(13).integers(0, 1000, 100)
    outs = []
    for compiled_path in (False, True):
        rel = Relation(indptr, indices, "n", "n", times=times)
        sampler = HopSampler({"r": rel}, {"n": n}, compiled=compiled_path)
        outs.append(
            sampler.sample(
                {"n": seeds},
                {"r": [10, 5, -1]},
                replace=replace,
                disjoint=True,
                rng=np.random.default_rng(14),
                seed_times={"n": seed_time},
                temporal_strategy=strategy,
            )
        )
    numpy_out, compiled_out = outs
    assert len(numpy_out.pos["r"]) > 2000
    for part in ("nodes", "batch", "row", "col", "pos"):
        for key in getattr(numpy_out, part):
            assert np.array_equal(getattr(numpy_out, part)[key], getattr(compiled_out, part)[key]), part
    assert numpy_out.nodes_per_hop == compiled_out.nodes_per_hop and numpy_out.edges_per_hop == compiled_out.edges_per_hop


@pytest.mark.skipif(not hop_kernels.available, reason="numba is not installed (it comes with dgl-zerocopy[pyg])")
def test_hetero_types_of_one_size_number_apart(monkeypatch):
    """Two node types of equal counts: a (tree, id) pair of one is not the same pair of the other (the compiled
    numbering keeps a table per type), on both paths alike."""
    monkeypatch.setattr(hop_kernels, "available", True)
    n = 10
    ids = np.arange(n)
    indptr = np.arange(n + 1)
    relations = {
        "ba": Relation(indptr, ids, "b", "a", times=ids),  # b_i -> a_i at time i
        "ab": Relation(indptr, ids, "a", "b"),
    }
    outs = [
        HopSampler(relations, {"a": n, "b": n}, compiled=path).sample(
            {"a": ids}, {"ba": [-1, -1], "ab": [-1, -1]}, disjoint=True, seed_times={"a": ids}, rng=np.random.default_rng(0)
        )
        for path in (False, True)
    ]
    for out in outs:
        assert out.nodes["b"].tolist() == ids.tolist() and out.batch["b"].tolist() == ids.tolist()
        assert out.nodes_per_hop == {"a": [n, 0, 0], "b": [0, n, 0]}


@pytest.mark.skipif(not hop_kernels.available, reason="numba is not installed (it comes with dgl-zerocopy[pyg])")
@pytest.mark.parametrize("strategy", ["uniform", "last"])
def test_hetero_compiled_equals_numpy_where_a_type_joins_from_two_relations(strategy, monkeypatch):
    """Each type gains nodes from two relations a hop (its next frontier two runs of trees), picks and cut-offs
    split over threads: the compiled batch equal to the NumPy one, element for element."""
    monkeypatch.setattr(hop_kernels, "available", True)
    monkeypatch.setattr(hop_kernels, "PARALLEL_EDGES", 64)
    n = 200
    relations = {}
    for i, (src, name, dst) in enumerate([("a", "aa", "a"), ("b", "ba", "a"), ("a", "ab", "b"), ("b", "bb", "b")]):
        indptr, indices, times, _ = temporal_csc(n, 3000, 30 + i, edge_level=True)
        relations[(src, name, dst)] = Relation(indptr, indices, src, dst, times=None if name == "ab" else times)
    seeds = np.random.default_rng(40).integers(0, n, 40)
    seed_time = np.random.default_rng(41).integers(0, 1000, 40)
    fanouts = {key: [5, 3, 2] for key in relations}
    outs = [
        HopSampler(relations, {"a": n, "b": n}, compiled=path).sample(
            {"a": seeds}, fanouts, disjoint=True, rng=np.random.default_rng(42), seed_times={"a": seed_time}, temporal_strategy=strategy
        )
        for path in (False, True)
    ]
    assert min(len(pos) for pos in outs[0].pos.values()) > 200
    for part in ("nodes", "batch", "row", "col", "pos"):
        for key, want in getattr(outs[0], part).items():
            assert np.array_equal(want, getattr(outs[1], part)[key]), (part, key)
    assert outs[0].nodes_per_hop == outs[1].nodes_per_hop and outs[0].edges_per_hop == outs[1].edges_per_hop


@pytest.mark.skipif(not hop_kernels.available, reason="numba is not installed (it comes with dgl-zerocopy[pyg])")
def test_tree_numbering_equals_the_numpy_one():
    """:class:`TreeNumbering` against :class:`DisjointNumbering`: repeated seeds, two calls a hop (so the next
    hop's destinations come in two runs of trees), the node-indexed array all -1 again at the end."""
    from dgl_zerocopy.sampling.cpu_hops import _Growing
    from dgl_zerocopy.sampling.disjoint import DisjointNumbering, TreeNumbering

    gen = np.random.default_rng(20)
    local = np.full(50, -1, dtype=np.int32)
    reference, tree = DisjointNumbering(50), TreeNumbering(local, _Growing(), _Growing(), num_trees=4)
    seeds = np.array([3, 3, 7, 49])
    reference.add_seeds(seeds)
    tree.add_seeds(seeds)
    run_counts = []
    for _ in range(3):
        first, dst, dst_tree, runs = tree.start_hop()
        run_counts.append(len(runs))
        assert first == reference.count - len(dst)
        for _ in range(2):  # two relations into this type
            deg = gen.integers(0, 6, len(dst))
            offset = np.concatenate([[0], np.cumsum(deg)])
            src = gen.integers(0, 50, int(offset[-1]))
            rows = np.empty(len(src), dtype=np.int64)
            new = tree.add(src, offset, dst_tree, rows, runs)
            want, want_new = reference.add(src, np.repeat(dst_tree, deg))
            assert np.array_equal(rows, want) and new == want_new > 0
    assert run_counts == [1, 2, 4]  # each call numbers each run of the hop before: a part per (call, run)
    assert np.array_equal(reference.nodes(), tree.nodes.filled()) and np.array_equal(reference.batch(), tree.trees.filled())
    assert (local == -1).all()
