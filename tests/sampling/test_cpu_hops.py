"""The CPU hop sampler (dgl_zerocopy/sampling/cpu_hops.py) against plain-Python references.

``ranges``, ``floyd_subsets`` and ``pick`` against loops over lists; uniformity of the picks (each in-edge
of a node with degree ``d`` picked with frequency ``k / d``, each ``k``-subset equally often) within a
binomial tolerance on a fixed seed; :class:`HopSampler`'s output checked edge by edge against the CSC it
samples (seeds first, sources, destinations and positions agree, every hop's counts), homogeneous and with
three node types, disjoint trees, induced edges against a brute-force set, the refusals, the scratch
arrays' reset (after an error too, and under two threads), and reproducibility. Every test runs on both
of HopSampler's paths (NumPy alone, and numba's kernels: tests/sampling/test_hop_kernels.py checks them equal).
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter

import numpy as np
import pytest
import torch

from dgl_zerocopy.sampling import hop_kernels
from dgl_zerocopy.sampling.cpu_hops import HopSampler, Relation, floyd_subsets, pick, ranges


@pytest.fixture(autouse=True, params=[False, True], ids=["numpy", "compiled"])
def compiled(request, monkeypatch):
    """Every test twice: HopSampler on NumPy alone, and with the compiled kernels (its default where numba is)."""
    if request.param and not hop_kernels.available:
        pytest.skip("numba is not installed (it comes with dgl-zerocopy[pyg])")
    monkeypatch.setattr(hop_kernels, "available", request.param)
    return request.param


# -- small graphs ---------------------------------------------------------------------------------------------


def random_csc(num_dst: int, num_src: int, num_edges: int, seed: int, dtype=np.int64) -> tuple[np.ndarray, np.ndarray]:
    """An in-edge CSC with repeated pairs, some nodes without in-edges and one hub (node 0, 40 more in-edges)."""
    gen = np.random.default_rng(seed)
    dst = np.concatenate([gen.integers(0, max(num_dst - 3, 1), num_edges), np.zeros(40, dtype=np.int64)])
    src = gen.integers(0, num_src, len(dst))
    order = np.argsort(dst, kind="stable")
    indptr = np.zeros(num_dst + 1, dtype=np.int64)
    np.add.at(indptr, dst + 1, 1)
    return np.cumsum(indptr), src[order].astype(dtype)


def homogeneous(n: int = 60, e: int = 300, seed: int = 0, dtype=np.int64) -> tuple[HopSampler, Relation]:
    indptr, indices = random_csc(n, n, e, seed, dtype)
    rel = Relation(indptr, indices, "n", "n")
    return HopSampler({"r": rel}, {"n": n}), rel


HETERO_NODES = {"a": 30, "b": 20, "c": 10}
HETERO_RELS = [("a", "ab", "b"), ("b", "ba", "a"), ("c", "ca", "a"), ("a", "aa", "a")]


def hetero(seed: int = 0) -> HopSampler:
    relations = {}
    for i, key in enumerate(HETERO_RELS):
        src, _, dst = key
        indptr, indices = random_csc(HETERO_NODES[dst], HETERO_NODES[src], 3 * HETERO_NODES[dst], seed + i)
        relations[key] = Relation(indptr, indices, src, dst)
    return HopSampler(relations, HETERO_NODES)


def degree(rel: Relation, v: int) -> int:
    return int(rel.indptr[v + 1] - rel.indptr[v])


def check_sampled(sampler: HopSampler, seeds: dict, fanouts: dict, out, *, replace: bool = False, disjoint: bool = False) -> None:
    """Everything ``out`` must satisfy for the CSCs of ``sampler`` (module docstring)."""
    num_hops = len(next(iter(fanouts.values())))
    starts = {}  # type -> first local id of each hop's nodes (hops + 2 bounds)
    for t, nodes in out.nodes.items():
        assert nodes.dtype == np.int64
        given = np.asarray(seeds.get(t, []), dtype=np.int64)
        assert np.array_equal(nodes[: len(given)], given), f"type {t}: the seeds come first, in their order"
        per_hop = out.nodes_per_hop[t]
        assert len(per_hop) == num_hops + 1 and per_hop[0] == len(given) and sum(per_hop) == len(nodes)
        starts[t] = np.concatenate([[0], np.cumsum(per_hop)])
        if (nodes >= 0).all():
            assert (nodes < sampler.num_nodes[t]).all()
        if disjoint:
            batch = out.batch[t]
            assert len(batch) == len(nodes) and np.array_equal(batch[: len(given)], np.arange(len(given)))
            pairs = list(zip(batch.tolist(), nodes.tolist()))
            assert len(set(pairs)) == len(pairs), f"type {t}: a node appears twice in one tree"
        elif len(set(given.tolist())) == len(given):
            assert len(np.unique(nodes)) == len(nodes), f"type {t}: a node numbered twice"
    for key, rel in sampler.relations.items():
        row, col, pos = out.row[key], out.col[key], out.pos[key]
        assert row.dtype == col.dtype == pos.dtype == np.int64 and len(row) == len(col) == len(pos)
        assert len(out.edges_per_hop[key]) == num_hops and sum(out.edges_per_hop[key]) == len(row)
        src_nodes, dst_nodes = out.nodes[rel.src_type], out.nodes[rel.dst_type]
        dst = dst_nodes[col]
        assert np.array_equal(src_nodes[row], rel.indices[pos].astype(np.int64)), f"{key}: a source is not indices[pos]"
        assert ((rel.indptr[dst] <= pos) & (pos < rel.indptr[dst + 1])).all(), f"{key}: a position outside its destination's range"
        if disjoint:
            assert np.array_equal(out.batch[rel.src_type][row], out.batch[rel.dst_type][col]), f"{key}: an edge between two trees"
        # Hop by hop: the destinations are the nodes that joined at the previous hop, each with min(deg, k)
        # in-edges (k with replacement, all for -1); the sources are numbered by the end of this hop.
        done = 0
        for hop, count in enumerate(out.edges_per_hop[key]):
            k = fanouts.get(key, [0] * num_hops)[hop]
            lo, hi = starts[rel.dst_type][hop], starts[rel.dst_type][hop + 1]
            c = col[done : done + count]
            assert ((c >= lo) & (c < hi)).all(), f"{key} hop {hop}: a destination that did not join at hop {hop}"
            assert (row[done : done + count] < starts[rel.src_type][hop + 2]).all()
            degs = rel.indptr[dst_nodes[lo:hi] + 1] - rel.indptr[dst_nodes[lo:hi]]
            want = np.zeros_like(degs) if k == 0 else degs if k < 0 else np.where(degs > 0, k, 0) if replace else np.minimum(degs, k)
            assert np.array_equal(np.bincount(c - lo, minlength=hi - lo), want), f"{key} hop {hop}: wrong number of in-edges"
            if not replace:
                pairs = list(zip(c.tolist(), pos[done : done + count].tolist()))
                assert len(set(pairs)) == len(pairs), f"{key} hop {hop}: an edge picked twice for one destination"
            done += count


# -- ranges, floyd_subsets, pick -----------------------------------------------------------------------------


def test_ranges_is_the_concatenation_of_aranges():
    gen = np.random.default_rng(0)
    for _ in range(50):
        n = int(gen.integers(0, 8))
        starts, lengths = gen.integers(0, 100, n), gen.integers(0, 4, n)  # empty ranges among them
        want = [v for s, length in zip(starts, lengths) for v in range(s, s + length)]
        got = ranges(starts, lengths)
        assert got.dtype == np.int64 and got.tolist() == want
    assert ranges(np.array([5, 2]), np.array([0, 0])).tolist() == []
    assert ranges(np.array([7, 3, 9], dtype=np.int32), np.array([2, 0, 1], dtype=np.int32)).tolist() == [7, 8, 9]


@pytest.mark.parametrize("k", [1, 2, 5])
def test_floyd_subsets_are_distinct_offsets_in_range(k):
    gen = np.random.default_rng(1)
    counts = gen.integers(k, k + 6, 500)
    out = floyd_subsets(counts, k, 2)
    assert out.shape == (500, k) and out.dtype == np.int64
    for row, count in zip(out.tolist(), counts.tolist()):
        assert len(set(row)) == k and all(0 <= v < count for v in row)
    assert floyd_subsets(counts, 0, 9).shape == (500, 0) and floyd_subsets(counts[:0], k, 9).shape == (0, k)
    # counts == k: every offset, in some order.
    assert (np.sort(floyd_subsets(np.full(20, k), k, 9), axis=1) == np.arange(k)).all()


def test_floyd_subsets_draw_every_subset_equally_often():
    """Each of the C(5, 2) = 10 subsets of 2 offsets among 5 with frequency 1/10 (6 standard deviations)."""
    n = 50_000
    out = np.sort(floyd_subsets(np.full(n, 5), 2, 3), axis=1)
    counts = Counter(map(tuple, out.tolist()))
    assert set(counts) == set(itertools.combinations(range(5), 2))
    p = 0.1
    tolerance = 6 * np.sqrt(n * p * (1 - p))
    assert all(abs(c - n * p) < tolerance for c in counts.values()), counts


def _pick_reference_counts(rel: Relation, dst: np.ndarray, fanout: int, replace: bool) -> list[int]:
    counts = []
    for v in dst.tolist():
        d = degree(rel, v)
        counts.append(d if fanout < 0 else (fanout if d else 0) if replace else min(d, fanout))
    return counts


@pytest.mark.parametrize("fanout", [-1, 0, 1, 3, 8])
@pytest.mark.parametrize("replace", [False, True])
def test_pick_counts_and_positions_against_a_loop(fanout, replace):
    _, rel = homogeneous()
    dst = np.array([0, 5, 59, 58, 5, 12, 30, 0], dtype=np.int64)  # the hub, nodes without in-edges, a repeat
    pos, which = pick(rel.indptr, dst, fanout, replace, 4)
    assert pos.dtype == which.dtype == np.int64
    want = _pick_reference_counts(rel, dst, fanout, replace)
    assert np.bincount(which, minlength=len(dst)).tolist() == want
    assert (np.diff(which) >= 0).all(), "grouped by destination in dst's order"
    for i, v in enumerate(dst.tolist()):
        mine = pos[which == i].tolist()
        assert all(rel.indptr[v] <= p < rel.indptr[v + 1] for p in mine)
        if fanout < 0:
            assert mine == list(range(rel.indptr[v], rel.indptr[v + 1])), "-1: every in-edge, in CSC order"
        elif not replace:
            assert len(set(mine)) == len(mine), "without replacement: distinct positions"
            if degree(rel, v) <= fanout:
                assert sorted(mine) == list(range(rel.indptr[v], rel.indptr[v + 1]))


def test_pick_with_replacement_repeats_a_position_where_draws_exceed_the_degree():
    indptr = np.array([0, 2], dtype=np.int64)
    pos, which = pick(indptr, np.array([0]), 10, True, 5)
    assert len(pos) == 10 and set(pos.tolist()) <= {0, 1} and len(set(pos.tolist())) == 2
    assert which.tolist() == [0] * 10


@pytest.mark.parametrize("replace", [False, True])
def test_pick_is_uniform_over_in_edges(replace):
    """Over many draws each in-edge of a node with degree d is picked with frequency k / d (6 binomial
    standard deviations), for degrees above and at the fanout; one call draws for many copies of the node."""
    indptr = np.array([0, 10, 13, 20], dtype=np.int64)  # degrees 10, 3, 7
    k, n = 3, 20_000
    dst = np.repeat(np.arange(3, dtype=np.int64), n)
    pos, which = pick(indptr, dst, k, replace, 6)
    freq = np.bincount(pos, minlength=20) / n
    for v in range(3):
        d = int(indptr[v + 1] - indptr[v])
        mean = k / d if replace else min(k, d) / d  # picks per draw of this node, per in-edge
        p = min(mean, 1.0)
        tolerance = 6 * np.sqrt(p * (1 - p) / n) + 1e-12 if not replace else 6 * np.sqrt(k * (1 / d) * (1 - 1 / d) / n)
        got = freq[indptr[v] : indptr[v + 1]]
        assert np.all(np.abs(got - mean) <= tolerance), (v, got, mean)


# -- HopSampler: homogeneous -------------------------------------------------------------------------------


@pytest.mark.parametrize("fanouts", [[3, 2], [-1], [2, -1, 1], [0, 2]], ids=str)
@pytest.mark.parametrize("replace", [False, True])
def test_homogeneous_batches_are_consistent_with_the_csc(fanouts, replace):
    sampler, _ = homogeneous()
    seeds = {"n": np.array([4, 0, 17, 59, 33])}
    out = sampler.sample(seeds, {"r": fanouts}, replace=replace, rng=np.random.default_rng(7))
    assert out.batch is None
    check_sampled(sampler, seeds, {"r": fanouts}, out, replace=replace)


def test_minus_one_takes_exactly_the_in_neighbourhood():
    sampler, rel = homogeneous()
    out = sampler.sample({"n": np.array([0, 9])}, {"r": [-1]}, rng=np.random.default_rng(8))
    nodes = out.nodes["n"]
    for local, v in enumerate([0, 9]):
        got = Counter((int(nodes[r]), int(p)) for r, c, p in zip(out.row["r"], out.col["r"], out.pos["r"]) if c == local)
        want = Counter((int(rel.indices[p]), p) for p in range(rel.indptr[v], rel.indptr[v + 1]))
        assert got == want


def test_int32_indices_and_repeated_seeds():
    sampler, _ = homogeneous(dtype=np.int32)
    seeds = {"n": np.array([3, 3, 8])}
    out = sampler.sample(seeds, {"r": [4, 2]}, rng=np.random.default_rng(9))
    assert out.nodes["n"][:3].tolist() == [3, 3, 8]
    check_sampled(sampler, seeds, {"r": [4, 2]}, out)


def test_empty_seeds_and_zero_hops():
    sampler, _ = homogeneous()
    out = sampler.sample({"n": np.array([], dtype=np.int64)}, {"r": [3, 3]}, rng=np.random.default_rng(0))
    assert len(out.nodes["n"]) == 0 and len(out.row["r"]) == 0 and out.edges_per_hop["r"] == [0, 0]
    out = sampler.sample({"n": np.array([1, 2])}, {"r": []}, rng=np.random.default_rng(0))
    assert out.nodes["n"].tolist() == [1, 2] and out.nodes_per_hop["n"] == [2] and len(out.row["r"]) == 0


# -- HopSampler: heterogeneous ---------------------------------------------------------------------------


@pytest.mark.parametrize("disjoint", [False, True])
def test_hetero_batches_with_per_relation_fanouts(disjoint):
    sampler = hetero()
    fanouts = {("a", "ab", "b"): [2, 1], ("b", "ba", "a"): [3, 0], ("c", "ca", "a"): [1, 2], ("a", "aa", "a"): [-1, 1]}
    seeds = {"a": np.array([0, 7, 29]), "b": np.array([5])}
    out = sampler.sample(seeds, fanouts, disjoint=disjoint, rng=np.random.default_rng(10))
    check_sampled(sampler, seeds, fanouts, out, disjoint=disjoint)
    assert len(out.nodes["c"]) > 0 and out.nodes_per_hop["c"][0] == 0, "c joins only through ca"
    assert out.edges_per_hop[("b", "ba", "a")][1] == 0, "fanout 0 at hop 2"


def test_a_relation_without_a_fanout_samples_nothing():
    sampler = hetero()
    fanouts = {("b", "ba", "a"): [3, 3]}
    out = sampler.sample({"a": np.array([0, 1])}, fanouts, rng=np.random.default_rng(11))
    assert all(len(out.row[key]) == 0 for key in sampler.relations if key != ("b", "ba", "a"))
    check_sampled(sampler, {"a": np.array([0, 1])}, fanouts, out)


# -- disjoint ---------------------------------------------------------------------------------------------------


def test_disjoint_trees_repeat_a_shared_neighbour():
    """Nodes 1 and 2 both have node 0 as their only in-neighbour: two trees, node 0 in each."""
    indptr = np.array([0, 0, 1, 2], dtype=np.int64)
    indices = np.array([0, 0], dtype=np.int64)
    sampler = HopSampler({"r": Relation(indptr, indices, "n", "n")}, {"n": 3})
    seeds = {"n": np.array([1, 2])}
    out = sampler.sample(seeds, {"r": [1]}, disjoint=True, rng=np.random.default_rng(0))
    assert out.nodes["n"].tolist() == [1, 2, 0, 0] and out.batch["n"].tolist() == [0, 1, 0, 1]
    check_sampled(sampler, seeds, {"r": [1]}, out, disjoint=True)
    shared = sampler.sample(seeds, {"r": [1]}, rng=np.random.default_rng(0))
    assert shared.nodes["n"].tolist() == [1, 2, 0], "not disjoint: one node 0"


def test_disjoint_homogeneous_on_a_random_graph():
    sampler, _ = homogeneous()
    seeds = {"n": np.array([0, 1, 2, 3, 4, 0])}
    out = sampler.sample(seeds, {"r": [3, 3]}, disjoint=True, rng=np.random.default_rng(12))
    check_sampled(sampler, seeds, {"r": [3, 3]}, out, disjoint=True)
    assert len(np.unique(out.nodes["n"])) < len(out.nodes["n"]), "some node is in two trees"


# -- induced edges -------------------------------------------------------------------------------------------


def brute_force_induced(sampler: HopSampler, nodes: dict) -> dict:
    got = {}
    for key, rel in sampler.relations.items():
        src_local = {int(v): i for i, v in enumerate(nodes.get(rel.src_type, []))}
        edges = set()
        for c, v in enumerate(nodes.get(rel.dst_type, [])):
            for p in range(rel.indptr[v], rel.indptr[v + 1]):
                u = int(rel.indices[p])
                if u in src_local:
                    edges.add((src_local[u], c, p))
        got[key] = edges
    return got


def test_induced_edges_equal_a_brute_force_set():
    sampler, _ = homogeneous()
    out = sampler.sample({"n": np.array([0, 3, 11])}, {"r": [3, 2]}, rng=np.random.default_rng(13))
    rows, cols, poss = sampler.induced_edges(out.nodes)
    got = set(zip(rows["r"].tolist(), cols["r"].tolist(), poss["r"].tolist()))
    assert len(got) == len(rows["r"]) and got == brute_force_induced(sampler, out.nodes)["r"]
    assert (np.diff(cols["r"]) >= 0).all(), "grouped by destination"
    assert (sampler._scratch("n") == -1).all()


def test_induced_edges_hetero():
    sampler = hetero()
    nodes = {"a": np.array([0, 4, 9, 28]), "b": np.array([1, 2, 19]), "c": np.array([0, 9])}
    rows, cols, poss = sampler.induced_edges(nodes)
    want = brute_force_induced(sampler, nodes)
    for key in sampler.relations:
        assert set(zip(rows[key].tolist(), cols[key].tolist(), poss[key].tolist())) == want[key]
        assert len(rows[key]) == len(want[key])
    rows, _, _ = sampler.induced_edges({"a": np.array([0, 1])})  # types left out: no edges there
    assert len(rows[("a", "ab", "b")]) == 0 and len(rows[("c", "ca", "a")]) == 0


# -- refusals -------------------------------------------------------------------------------------------------


def test_a_seed_out_of_range_raises_index_error_naming_it():
    sampler, _ = homogeneous()
    with pytest.raises(IndexError, match=r"seed 60 of node type 'n'"):
        sampler.sample({"n": np.array([1, 60])}, {"r": [2]})
    with pytest.raises(IndexError, match=r"seed -1 "):
        sampler.sample({"n": np.array([-1])}, {"r": [2]})


def test_construction_and_fanout_refusals():
    indptr, indices = random_csc(5, 5, 10, 0)
    with pytest.raises(ValueError, match=r"num_nodes\['m'\]"):
        HopSampler({"r": Relation(indptr, indices, "m", "n")}, {"n": 5})
    with pytest.raises(ValueError, match="indptr has 6 entries"):
        HopSampler({"r": Relation(indptr, indices, "n", "n")}, {"n": 7})
    sampler = hetero()
    with pytest.raises(ValueError, match="same number of hops"):
        sampler.sample({"a": np.array([0])}, {("a", "ab", "b"): [1, 1], ("b", "ba", "a"): [2]})


# -- scratch, threads, reproducibility -----------------------------------------------------------------------


def test_scratch_is_reset_after_each_call_and_after_an_error():
    sampler = hetero()
    fanouts = {key: [2, 2] for key in sampler.relations}
    out = sampler.sample({"a": np.array([0, 1])}, fanouts, rng=np.random.default_rng(14))
    assert all((sampler._scratch(t) == -1).all() for t in HETERO_NODES)
    with pytest.raises(IndexError):  # a's seeds numbered before b's bad seed is seen
        sampler.sample({"a": np.array([2, 3]), "b": np.array([20])}, fanouts)
    assert all((sampler._scratch(t) == -1).all() for t in HETERO_NODES)
    again = sampler.sample({"a": np.array([0, 1])}, fanouts, rng=np.random.default_rng(14))
    check_sampled(sampler, {"a": np.array([0, 1])}, fanouts, again)
    for t in HETERO_NODES:
        assert np.array_equal(out.nodes[t], again.nodes[t])


def test_two_threads_sample_concurrently():
    """Each thread has its own scratch: concurrent calls on one sampler give valid, independent batches
    (the same as a single thread's with the same generator)."""
    sampler, _ = homogeneous(n=200, e=2000)
    fanouts = {"r": [4, 3]}
    start = threading.Barrier(2)
    results: dict[int, list] = {0: [], 1: []}
    errors = []

    def work(i: int) -> None:
        try:
            rng = np.random.default_rng(100 + i)
            start.wait()
            for j in range(60):
                seeds = {"n": np.arange(10 * (j % 15) + i, 10 * (j % 15) + i + 10)}
                results[i].append((seeds, sampler.sample(seeds, fanouts, rng=rng)))
        except Exception as error:  # reported below, in the test's thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors and all(not t.is_alive() for t in threads)
    for i in (0, 1):
        rng = np.random.default_rng(100 + i)
        for seeds, out in results[i]:
            check_sampled(sampler, seeds, fanouts, out)
            alone = sampler.sample(seeds, fanouts, rng=rng)
            assert np.array_equal(alone.nodes["n"], out.nodes["n"]) and np.array_equal(alone.pos["r"], out.pos["r"])


def _same(a, b) -> bool:
    return all(np.array_equal(a.nodes[t], b.nodes[t]) for t in a.nodes) and all(
        np.array_equal(getattr(a, f)[r], getattr(b, f)[r]) for f in ("row", "col", "pos") for r in a.row
    )


def test_the_same_generator_seed_or_torch_seed_reproduces_a_batch():
    sampler = hetero()
    fanouts = {key: [3, 2] for key in sampler.relations}
    seeds = {"a": np.array([0, 1, 2]), "b": np.array([3])}
    one = sampler.sample(seeds, fanouts, rng=np.random.default_rng(15))
    assert _same(one, sampler.sample(seeds, fanouts, rng=np.random.default_rng(15)))
    torch.manual_seed(3)
    two = sampler.sample(seeds, fanouts)
    torch.manual_seed(3)
    assert _same(two, sampler.sample(seeds, fanouts))
    others = [sampler.sample(seeds, fanouts, rng=np.random.default_rng(s)) for s in range(16, 20)]
    assert not all(_same(one, other) for other in others), "the picks depend on the generator"
