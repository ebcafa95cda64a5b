"""Weighted neighbour sampling (dgl_zerocopy/sampling/picks.py, cpu_hops.HopSampler, pyg/sampler.py's ``weight_attr``).

The distribution of the picks against the exact one, by chi-squared on fixed seeds (the pattern of the GPU
sampler's hub test): with replacement each draw picks in-edge ``e`` with probability ``w_e / W``; without,
the pair of picks of a 5-edge neighbourhood follows successive sampling proportional to weight (pyg-lib's
Efraimidis-Spirakis draw), every pair's frequency against its enumerated probability. Zero weights, whole
neighbourhoods, the per-neighbourhood prefix sums against a loop, the refusals, and PyG's NeighborLoader
with ``weight_attr``. Every HopSampler test runs on both of its paths (NumPy, and the compiled kernels).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from test_cpu_hops import compiled  # noqa: F401 - autouse: every test on NumPy alone and on the compiled kernels

from dgl_zerocopy.sampling.cpu_hops import HopSampler, Relation
from dgl_zerocopy.sampling.picks import pick_weighted, prefix_sums

stats = pytest.importorskip("scipy.stats")


def star(weights: np.ndarray, copies: int = 1) -> tuple[HopSampler, np.ndarray]:
    """``copies`` destinations (nodes 0..copies-1), each with in-edges from nodes ``copies..`` weighted ``weights``."""
    d = len(weights)
    indptr = np.arange(copies + 1, dtype=np.int64) * d
    indptr = np.concatenate([indptr, np.full(d, indptr[-1])])
    indices = np.tile(np.arange(copies, copies + d), copies)
    rel = Relation(indptr, indices, "n", "n", weights=np.tile(weights, copies))
    return HopSampler({"r": rel}, {"n": copies + d}), indptr


def test_prefix_sums_restart_in_every_neighbourhood():
    indptr = np.array([0, 3, 3, 5, 9])
    weights = np.array([1.0, 2.0, 0.5, 4.0, 0.0, 1.0, 1.0, 3.0, 0.25])
    want = [1.0, 3.0, 3.5, 4.0, 4.0, 1.0, 2.0, 5.0, 5.25]
    assert np.allclose(prefix_sums(indptr, weights), want)


@pytest.mark.parametrize("fanout", [3, 7])
def test_with_replacement_each_draw_is_proportional_to_weight(fanout):
    weights = np.array([0.5, 1.0, 2.0, 4.0, 0.0, 8.0, 3.0, 1.5])
    sampler, indptr = star(weights, copies=200)
    hits = np.zeros(len(weights), dtype=np.int64)
    rng = np.random.default_rng(0)
    for _ in range(10):
        out = sampler.sample({"n": np.arange(200)}, {"r": [fanout]}, replace=True, rng=rng)
        np.add.at(hits, out.pos["r"] % len(weights), 1)
    assert hits.sum() == 10 * 200 * fanout
    assert hits[4] == 0, "an in-edge of weight 0 was picked"
    positive = weights > 0
    expected = hits.sum() * weights[positive] / weights.sum()
    assert stats.chisquare(hits[positive], expected).pvalue > 1e-4, hits


def test_without_replacement_pairs_follow_successive_sampling():
    """k=2 of 5 in-edges: P({i, j}) = w_i/W * w_j/(W - w_i) + w_j/W * w_i/(W - w_j)."""
    weights = np.array([1.0, 2.0, 3.0, 5.0, 9.0])
    total = weights.sum()
    pairs = list(itertools.combinations(range(5), 2))
    exact = np.array([weights[i] / total * weights[j] / (total - weights[i]) + weights[j] / total * weights[i] / (total - weights[j]) for i, j in pairs])
    sampler, indptr = star(weights, copies=500)
    counts = dict.fromkeys(pairs, 0)
    rng = np.random.default_rng(1)
    for _ in range(20):
        out = sampler.sample({"n": np.arange(500)}, {"r": [2]}, rng=rng)
        picked = (out.pos["r"] % 5).reshape(500, 2)
        assert (picked[:, 0] < picked[:, 1]).all(), "two distinct in-edges, listed in CSC order"
        for i, j in picked.tolist():
            counts[(i, j)] += 1
    observed = np.array([counts[p] for p in pairs])
    assert stats.chisquare(observed, observed.sum() * exact).pvalue > 1e-4, observed
    # Against the uniform picks the same counts are far off: the test can tell weighted from uniform.
    assert stats.chisquare(observed, np.full(len(pairs), observed.sum() / len(pairs))).pvalue < 1e-6


def test_whole_neighbourhoods_and_zero_weights():
    indptr = np.array([0, 3, 5, 5])
    weights = np.array([0.0, 0.0, 0.0, 1.0, 0.0])
    rel = Relation(indptr, np.array([1, 2, 0, 0, 1]), "n", "n", weights=weights)
    sampler = HopSampler({"r": rel}, {"n": 3})
    dst = np.array([0, 1, 2])
    sums = prefix_sums(indptr, weights)
    # fanout >= degree without replacement, or -1: every in-edge, whatever its weight (as pyg-lib).
    for fanout in (3, -1):
        pos, which = pick_weighted(indptr, weights, sums, dst, fanout, False, 7)
        assert pos.tolist() == [0, 1, 2, 3, 4] and which.tolist() == [0, 0, 0, 1, 1]
    # With replacement a neighbourhood of total weight 0 gives nothing; the other only its weighted edge.
    pos, which = pick_weighted(indptr, weights, sums, dst, 4, True, 7)
    assert pos.tolist() == [3, 3, 3, 3] and which.tolist() == [1, 1, 1, 1]
    # Without replacement, the positive weight first, then zero weights fill the pick.
    out = sampler.sample({"n": np.array([1])}, {"r": [1]}, rng=np.random.default_rng(2))
    assert out.pos["r"].tolist() == [3]


def test_refusals():
    indptr = np.array([0, 2])
    for bad, match in (
        (np.array([1.0, -1.0]), "weight -1.0 at CSC position 1"),
        (np.array([np.nan, 1.0]), "not a finite number"),
        (np.ones(3), "one weight per edge"),
    ):
        with pytest.raises(ValueError, match=match):
            HopSampler({"r": Relation(indptr, np.array([0, 0]), "n", "n", weights=bad)}, {"n": 1})
    with pytest.raises(TypeError, match="weights must be numbers"):
        HopSampler({"r": Relation(indptr, np.array([0, 0]), "n", "n", weights=np.array(["a", "b"]))}, {"n": 1})


def test_neighbor_loader_weight_attr():
    from torch_geometric.data import Data

    from dgl_zerocopy.pyg import NeighborLoader

    gen = torch.Generator().manual_seed(3)
    n, e = 300, 4000
    edge_index = torch.randint(0, n, (2, e), generator=gen)
    w = torch.rand(e, generator=gen)
    w[w < 0.5] = 0.0  # half the edges never sampled with replacement
    data = Data(edge_index=edge_index, x=torch.randn(n, 3, generator=gen), w=w, num_nodes=n)
    loader = NeighborLoader(data, num_neighbors=[4, 4], weight_attr="w", replace=True, batch_size=64)
    sampled = torch.cat([batch.e_id for batch in loader])
    assert len(sampled) > 1000 and (w[sampled] > 0).all(), "an edge of weight 0 was sampled"
    batch = next(iter(NeighborLoader(data, num_neighbors=[4, 4], weight_attr="w", batch_size=64)))
    src, dst = batch.edge_index
    assert torch.equal(data.edge_index[:, batch.e_id], torch.stack([batch.n_id[src], batch.n_id[dst]]))
    # Uniform sampling of the same data picks zero weights: the check above can fail.
    plain = torch.cat([batch.e_id for batch in NeighborLoader(data, num_neighbors=[4, 4], replace=True, batch_size=64)])
    assert (w[plain] == 0).any()
    with pytest.raises(ValueError, match="not a finite number >= 0"):
        NeighborLoader(Data(edge_index=edge_index, w=-w, num_nodes=n), num_neighbors=[2], weight_attr="w", batch_size=4)


@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("disjoint", [False, True])
def test_compiled_equals_numpy(replace, disjoint, monkeypatch):
    from dgl_zerocopy.sampling import hop_kernels, pick_kernels

    if not pick_kernels.available:
        pytest.skip("numba is not installed (it comes with dgl-zerocopy[pyg])")
    monkeypatch.setattr(hop_kernels, "available", True)
    gen = np.random.default_rng(4)
    n = 400
    dst = np.sort(np.concatenate([gen.integers(0, n, 6000), np.zeros(300, dtype=np.int64)]))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=n))])
    indices = gen.integers(0, n, len(dst))
    weights = gen.random(len(dst)) * (gen.random(len(dst)) > 0.2)  # a fifth weigh 0
    seeds, outs = gen.permutation(n)[:80], []
    for compiled_path in (False, True):
        sampler = HopSampler({"r": Relation(indptr, indices, "n", "n", weights=weights)}, {"n": n}, compiled=compiled_path)
        outs.append(sampler.sample({"n": seeds}, {"r": [8, 4, 2]}, replace=replace, disjoint=disjoint, rng=np.random.default_rng(5)))
    assert len(outs[0].pos["r"]) > 1000
    for part in ("nodes", "row", "col", "pos") + (("batch",) if disjoint else ()):
        for key in getattr(outs[0], part):
            assert np.array_equal(getattr(outs[0], part)[key], getattr(outs[1], part)[key]), part
