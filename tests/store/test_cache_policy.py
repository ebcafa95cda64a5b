"""The static hot-row cache (dgl_zerocopy/store/cache/): byte budgets, the two policies, the slot map and
the hit/miss split, the CPU reference gather (== features[ids] for every mix), counters, errors,
and bench/gathering/cache.py on a tiny graph."""

from __future__ import annotations

import math
import threading
import warnings

import numpy as np
import pytest
import torch
from conftest import SMALL, devices
from script_runs import run_bench, run_python

from dgl_zerocopy.store.cache import (
    CACHE_POLICIES,
    DEFAULT_CACHE_POLICY,
    CacheStats,
    HotRowCache,
    InDegreePolicy,
    PresamplePolicy,
    SamplingDegreePolicy,
    budget_for_rows,
    build_cache,
    build_slot_map,
    cache_capacity,
    cached_gather,
    check_cache_args,
    make_policy,
    presample_counts,
    sampled_degree,
    sampling_edge_dir,
    split_hits,
)


@pytest.fixture(scope="module")
def dgl():
    return pytest.importorskip("dgl")


def _graph(dgl, src, dst, n):
    return dgl.graph((torch.tensor(src), torch.tensor(dst)), num_nodes=n)


@pytest.fixture(scope="module")
def small(dgl, small_dataset):
    """The 3,000-node generated graph as DGL graph, float32 table and training seeds."""
    return small_dataset.to_dgl(), torch.from_numpy(small_dataset.features), torch.from_numpy(small_dataset.train_idx)


# -- budget ------------------------------------------------------------------------------------


def test_budget_counts_rows_and_the_int32_slot_map():
    n, row = 1000, 64
    assert cache_capacity(0, row, n) == 0
    assert cache_capacity(4 * n + row - 1, row, n) == 0  # the map fits, one row does not
    assert cache_capacity(row - 1, row, n) == 0  # smaller than one row
    assert cache_capacity(4 * n + row, row, n) == 1
    for k in (1, 7, 500, n):  # exactly k rows
        assert cache_capacity(budget_for_rows(k, row, n), row, n) == k
        assert cache_capacity(budget_for_rows(k, row, n) - 1, row, n) == k - 1
    assert budget_for_rows(0, row, n) == 0 and budget_for_rows(10, row, n) == 10 * row + 4 * n
    assert cache_capacity(10**12, row, n) == n  # never more rows than the table has


def test_budget_beyond_two_billion_slots_pays_for_an_int64_map():
    from dgl_zerocopy.store.cache.slots import SLOTS_INT32

    n = 3 * 2**31  # arithmetic only: nothing this size is allocated
    int32_full = budget_for_rows(SLOTS_INT32, 1, n)
    assert int32_full == SLOTS_INT32 + 4 * n and cache_capacity(int32_full, 1, n) == SLOTS_INT32
    one_more = budget_for_rows(SLOTS_INT32 + 1, 1, n)
    assert one_more == SLOTS_INT32 + 1 + 8 * n
    assert cache_capacity(one_more, 1, n) == SLOTS_INT32 + 1
    assert cache_capacity(one_more - 1, 1, n) == SLOTS_INT32  # the int64 map does not fit: back to int32


def test_budget_is_never_exceeded(small):
    graph, table, _ = small
    n, row = table.shape[0], table.shape[1] * table.element_size()
    policy = InDegreePolicy(graph)
    rng = np.random.default_rng(0)
    budgets = [0, 1, row - 1, row, 4 * n, 4 * n + row - 1, 4 * n + row, n * row + 4 * n, 2 * n * row, *rng.integers(0, 2 * n * row, 50)]
    for budget in budgets:
        budget = int(budget)
        ids = policy.rows_for_budget(budget, row)
        used = ids.numel() * row + (4 * n if ids.numel() else 0)
        assert used <= budget, (budget, ids.numel())
        assert (ids.numel() + 1) * row + 4 * n > budget or ids.numel() == n  # and nothing that fits is left out
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cache = build_cache(table, budget, "in_degree", graph=graph)
        assert (cache.nbytes if cache else 0) <= budget
        if cache is not None:
            assert torch.equal(cache.row_ids, ids) and cache.nbytes == used


def test_budget_that_holds_no_row_makes_no_cache(small):
    graph, table, _ = small
    assert build_cache(table, 0, "in_degree", graph=graph) is None
    with pytest.warns(UserWarning, match="holds no row"):
        assert build_cache(table, 100, "in_degree", graph=graph) is None


# -- policies ----------------------------------------------------------------------------------


def test_in_degree_picks_the_highest_in_degrees_ties_by_lower_id(dgl):
    # in-degrees: node 0: 1, 1: 3, 2: 0, 3: 3, 4: 2, 5: 1
    src = [1, 0, 2, 3, 0, 2, 4, 0, 1, 5, 0]
    dst = [0, 1, 1, 1, 3, 3, 3, 4, 4, 5, 2]
    graph = _graph(dgl, src, dst, 6)
    assert graph.in_degrees().tolist() == [1, 3, 1, 3, 2, 1]
    policy = make_policy("in_degree", graph)
    assert policy.order.tolist() == [1, 3, 4, 0, 2, 5]
    assert policy.rows_for_budget(budget_for_rows(3, 8, 6), 8).tolist() == [1, 3, 4]
    assert torch.equal(make_policy("in_degree", graph).order, policy.order)  # deterministic


def test_in_degree_on_a_generated_graph_matches_a_sort(small):
    graph, table, _ = small
    deg = graph.in_degrees().numpy()
    order = InDegreePolicy(graph).order.numpy()
    assert sorted(order.tolist()) == list(range(len(deg)))
    assert np.all(np.diff(deg[order]) <= 0)
    k = 300
    assert deg[order[:k]].min() >= np.sort(deg)[::-1][k - 1]


def _dag(dgl):
    """0 -> 1..4, 1 -> 2..4, 2 -> 3..4, 3 -> 4: out-degrees 4, 3, 2, 1, 0 and in-degrees 0, 1, 2, 3, 4."""
    src, dst = zip(*[(i, j) for i in range(5) for j in range(i + 1, 5)])
    return _graph(dgl, list(src), list(dst), 5)


class _NoDirection:
    """A block sampler of one's own without ``edge_dir``: taken to sample in-edges, as DGL's do by default."""

    def sample(self, graph, seeds):
        raise AssertionError("the degree policies never sample")


def test_degree_ranks_by_the_degree_sampling_follows_on_a_directed_graph(dgl):
    graph = _dag(dgl)
    assert graph.out_degrees().tolist() == [4, 3, 2, 1, 0] and graph.in_degrees().tolist() == [0, 1, 2, 3, 4]
    by_out, by_in = [0, 1, 2, 3, 4], [4, 3, 2, 1, 0]
    # in_degree and out_degree rank what they say, whatever the sampler
    assert make_policy("in_degree", graph).order.tolist() == by_in
    assert make_policy("out_degree", graph).order.tolist() == by_out
    out_sampler = dgl.dataloading.NeighborSampler([2, 2], edge_dir="out")
    assert make_policy("in_degree", graph, sampler=out_sampler).order.tolist() == by_in
    assert make_policy("out_degree", graph, sampler=out_sampler).order.tolist() == by_out
    # degree: out-degree for in-edge sampling (no sampler, DGL's default, a sampler without edge_dir), in-degree for out-edges
    for sampler in (None, dgl.dataloading.NeighborSampler([2, 2]), dgl.dataloading.LaborSampler([2, 2]), _NoDirection()):
        policy = make_policy("degree", graph, sampler=sampler)
        assert isinstance(policy, SamplingDegreePolicy) and policy.order.tolist() == by_out, sampler
        assert (policy.name, policy.edge_dir, policy.kind, policy.degrees.tolist()) == ("degree", "in", "out_degree", [4, 3, 2, 1, 0])
    for sampler in (out_sampler, dgl.dataloading.LaborSampler([2, 2], edge_dir="out")):
        policy = make_policy("degree", graph, sampler=sampler)
        assert policy.order.tolist() == by_in and (policy.edge_dir, policy.kind) == ("out", "in_degree")
    # ties by lower node id, as for in_degree
    ties = _graph(dgl, [3, 3, 1, 1, 0], [0, 1, 2, 3, 4], 5)  # out-degrees 1, 2, 0, 2, 0
    assert make_policy("degree", ties).order.tolist() == make_policy("out_degree", ties).order.tolist() == [1, 3, 0, 2, 4]


def test_degree_is_how_often_dgls_sampler_reaches_a_row(dgl):
    """One layer of full neighbourhoods, one seed per batch, every node a seed: a row is gathered once as its own
    seed and once per node it reaches along the sampled edges: out-degree + 1 for in-edge sampling, in-degree + 1
    for edge_dir="out". The degree policy's degrees are exactly these counts less one."""
    rng = np.random.default_rng(0)
    graph = dgl.to_simple(dgl.remove_self_loop(_graph(dgl, rng.integers(0, 200, 1500), rng.integers(0, 200, 1500), 200)))
    assert not torch.equal(graph.in_degrees(), graph.out_degrees())
    for edge_dir in ("in", "out"):
        sampler = dgl.dataloading.NeighborSampler([-1], edge_dir=edge_dir)
        counts = presample_counts(graph, sampler, torch.arange(200), batch_size=1)
        assert torch.equal(torch.from_numpy(make_policy("degree", graph, sampler=sampler).degrees) + 1, counts), edge_dir
        wrong = "in_degree" if edge_dir == "in" else "out_degree"
        assert not torch.equal(torch.from_numpy(make_policy(wrong, graph).degrees) + 1, counts)


def test_a_sampler_with_another_edge_dir_is_refused(dgl, small):
    graph, table, _ = small
    odd = dgl.dataloading.NeighborSampler([2])
    odd.edge_dir = "both"
    with pytest.raises(ValueError, match="the sampler's edge_dir must be 'in' or 'out', but got 'both'"):
        make_policy("degree", graph, sampler=odd)
    with pytest.raises(ValueError, match="edge_dir must be 'in' or 'out'"):
        check_cache_args(10**6, "degree", table.shape[0], graph, odd)  # before anything is built or pinned
    assert sampling_edge_dir(_NoDirection()) == sampling_edge_dir(None) == "in"
    assert (sampled_degree("in"), sampled_degree("out")) == ("out_degree", "in_degree")
    with pytest.raises(ValueError, match="edge_dir must be 'in' or 'out', but got 'both'"):
        sampled_degree("both")


def test_degree_is_the_default_policy():
    import inspect

    from dgl_zerocopy.store import DeviceCache
    from dgl_zerocopy.store.cache import choose_rows
    from dgl_zerocopy.training.sources import CacheRequest

    assert DEFAULT_CACHE_POLICY == "degree" == CACHE_POLICIES[0]
    assert DeviceCache().policy == "degree"
    for func in (build_cache, choose_rows):
        assert inspect.signature(func).parameters["cache_policy"].default == "degree", func
    assert CacheRequest().policy == "degree"


def _directed_power_law(dgl, n: int = 3000, avg_degree: float = 10.0, seed: int = 0):
    """A directed graph whose out-degrees and in-degrees follow independent power laws (directed Chung-Lu:
    sources drawn in proportion to one set of Pareto weights, destinations to another)."""
    rng = np.random.default_rng(seed)
    out_w, in_w = rng.pareto(1.5, n) + 1, rng.pareto(1.5, n) + 1
    m = int(n * avg_degree)
    src = np.searchsorted(np.cumsum(out_w), rng.random(m) * out_w.sum())
    dst = np.searchsorted(np.cumsum(in_w), rng.random(m) * in_w.sum())
    return dgl.to_simple(_graph(dgl, np.minimum(src, n - 1), np.minimum(dst, n - 1), n))


def test_the_default_policy_beats_in_degree_on_a_directed_power_law_graph(dgl):
    """The issue's case, small: fanouts [5, 5], batches of 64, 10 % of the rows cached. Sampling reads rows by
    out-degree, so the default ("degree") must hit far more often than "in_degree" (the old default) and as often
    as "out_degree", and no ranking beats the oracle (the rows these batches read most)."""
    graph = _directed_power_law(dgl)
    n = graph.num_nodes()
    table = torch.arange(n, dtype=torch.float32).unsqueeze(1).repeat(1, 8)
    budget = budget_for_rows(n // 10, table.shape[1] * table.element_size(), n)
    sampler = dgl.dataloading.NeighborSampler([5, 5])
    caches = {
        "default": build_cache(table, budget, graph=graph, sampler=sampler),
        **{p: build_cache(table, budget, p, graph=graph) for p in ("in_degree", "out_degree")},
    }
    assert all(c.num_cached == n // 10 for c in caches.values())
    seeds = torch.from_numpy(np.random.default_rng(1).permutation(n)[:1280])
    counts = torch.zeros(n, dtype=torch.int64)
    for start in range(0, seeds.numel(), 64):
        input_nodes = sampler.sample(graph, seeds[start : start + 64])[0]
        counts[input_nodes] += 1
        for cache in caches.values():
            assert torch.equal(cache.gather(input_nodes, table), table[input_nodes])
    rate = {name: cache.stats.hit_rate for name, cache in caches.items()}
    oracle = float(counts.sort(descending=True).values[: n // 10].sum() / counts.sum())
    assert caches["default"].policy == "degree" and torch.equal(caches["default"].row_ids, caches["out_degree"].row_ids)
    assert rate["default"] > 2 * rate["in_degree"], rate  # about 25 % against 9 %
    assert rate["default"] <= oracle and rate["default"] > 0.8 * oracle, (rate, oracle)


def test_presample_counts_the_input_nodes_of_each_batch(dgl):
    # A path 0 -> 1 -> 2 -> 3 -> 4 and 5 -> 4: the 2-hop in-neighbourhood of a seed, full neighbours.
    graph = _graph(dgl, [0, 1, 2, 3, 5], [1, 2, 3, 4, 4], 6)
    sampler = dgl.dataloading.NeighborSampler([-1, -1])
    one_batch = presample_counts(graph, sampler, torch.tensor([4, 2]), batch_size=2)
    assert one_batch.tolist() == [1, 1, 1, 1, 1, 1]  # {4, 3, 5, 2} from 4, {2, 1, 0} from 2: once each
    per_seed = presample_counts(graph, sampler, torch.tensor([4, 2]), batch_size=1)
    assert per_seed.tolist() == [1, 1, 2, 1, 1, 1]  # both batches gather row 2
    overlapping = presample_counts(graph, sampler, torch.tensor([4, 3]), batch_size=1)
    assert overlapping.tolist() == [0, 1, 2, 2, 1, 1]  # 4: {4,3,5,2}, 3: {3,2,1}
    assert (presample_counts(graph, sampler, torch.tensor([4, 3]), batch_size=1, epochs=2) == 2 * overlapping).all()
    policy = make_policy("presample", graph, sampler=sampler, seeds=torch.tensor([4, 3]), batch_size=1)
    # counts 2, 2 (nodes 2, 3; out-degree 1 each: lower id first), then the counts-1 nodes by the degree the sampler
    # follows, out-degree (1 and 5 have 1, 4 has none; in-degree would put 4 first), then id
    assert policy.order.tolist() == [2, 3, 1, 5, 4, 0]
    out = make_policy(
        "presample", graph, sampler=dgl.dataloading.NeighborSampler([-1, -1], edge_dir="out"), seeds=torch.tensor([0]), batch_size=1
    )  # 0 -> 1 -> 2 along out-edges: counts [1, 1, 1, 0, 0, 0]
    assert out.counts.tolist() == [1, 1, 1, 0, 0, 0] and out.order.tolist() == [1, 2, 0, 4, 3, 5]  # ties by in-degree


class _RecordingSampler:
    """Passes every call to a DGL sampler and keeps what it returned (and how often it was called)."""

    def __init__(self, inner):
        self.inner, self.calls, self.returned = inner, 0, []

    def sample(self, graph, seeds):
        self.calls += 1
        self.returned.append(self.inner.sample(graph, seeds))
        return self.returned[-1]


def test_presample_counts_match_a_direct_count(dgl, small):
    graph, _, seeds = small
    # What the sampler returned, counted directly (DGL's multi-threaded draws are not repeatable, even after dgl.seed).
    sampler = _RecordingSampler(dgl.dataloading.NeighborSampler([4, 3]))
    counts = presample_counts(graph, sampler, seeds, batch_size=50, seed=3)
    assert sampler.calls == math.ceil(len(seeds) / 50)
    expected = torch.zeros(graph.num_nodes(), dtype=torch.int64)
    for input_nodes, _, blocks in sampler.returned:
        assert torch.equal(input_nodes, blocks[0].srcdata[dgl.NID])
        expected += torch.bincount(input_nodes, minlength=graph.num_nodes())
    assert torch.equal(counts, expected) and counts.max() <= sampler.calls

    # The batches: seeds shuffled by default_rng(seed), cut in order (full neighbourhoods: a repeatable sampler).
    full = dgl.dataloading.NeighborSampler([-1, -1])
    counts = presample_counts(graph, full, seeds, batch_size=50, seed=3)
    order = seeds[torch.from_numpy(np.random.default_rng(3).permutation(len(seeds)))]
    expected = sum(torch.bincount(full.sample(graph, order[i : i + 50])[0], minlength=graph.num_nodes()) for i in range(0, len(order), 50))
    assert torch.equal(counts, expected)
    assert not torch.equal(counts, presample_counts(graph, full, seeds, batch_size=50, seed=4))  # another order, other batches


@pytest.mark.parametrize("epochs, calls", [(1, 5), (0.5, 3), (0.01, 1), (2, 10), (1.5, 8)])
def test_presample_runs_about_the_asked_epochs(dgl, small, epochs, calls):
    graph, _, seeds = small
    sampler = _RecordingSampler(dgl.dataloading.NeighborSampler([2]))
    counts = presample_counts(graph, sampler, seeds[:45], batch_size=10, epochs=epochs)
    assert sampler.calls == calls and counts.max() <= calls


def test_presample_ranks_by_counts_then_the_degree_sampling_follows(dgl, small):
    graph, _, seeds = small
    policy = PresamplePolicy(graph, dgl.dataloading.NeighborSampler([3, 3]), seeds, batch_size=64)
    counts, deg, order = policy.counts.numpy(), graph.out_degrees().numpy(), policy.order.numpy()
    key = list(zip(-counts[order], -deg[order], order))
    assert key == sorted(key)


# -- slot map, split, reference gather ----------------------------------------------------------


def _cache_of(table, row_ids, device="cpu"):
    return HotRowCache(table, torch.tensor(row_ids, dtype=torch.int64), device)


def test_slot_map_gives_each_cached_row_its_slot():
    slot_map = build_slot_map(torch.tensor([5, 0, 7]), 10)
    assert slot_map.dtype == torch.int32
    assert slot_map.tolist() == [1, -1, -1, -1, -1, 0, -1, 2, -1, -1]
    assert build_slot_map(torch.tensor([], dtype=torch.int64), 4).tolist() == [-1] * 4
    with pytest.raises(ValueError, match="distinct"):
        build_slot_map(torch.tensor([1, 1]), 4)
    with pytest.raises(IndexError, match=r"\[0, 4\)"):
        build_slot_map(torch.tensor([4]), 4)
    with pytest.raises(ValueError, match="cannot cache 5 rows"):
        build_slot_map(torch.arange(5), 4)


@pytest.mark.parametrize("id_dtype", [torch.int32, torch.int64])
def test_split_hits_partitions_the_batch(id_dtype):
    slot_map = build_slot_map(torch.tensor([5, 0, 7]), 10)
    ids = torch.tensor([7, 1, 5, 5, 9, 0, 7], dtype=id_dtype)
    hit_pos, hit_slots, miss_pos, miss_ids = split_hits(ids, slot_map)
    assert hit_pos.tolist() == [0, 2, 3, 5, 6] and hit_slots.tolist() == [2, 0, 0, 1, 2]
    assert miss_pos.tolist() == [1, 4] and miss_ids.tolist() == [1, 9]
    assert hit_pos.dtype == miss_pos.dtype == torch.int64 and miss_ids.dtype == id_dtype and hit_slots.dtype == torch.int32


MIXES = {
    "all-hit": lambda cached, n, rng: rng.choice(cached, 200),
    "all-miss": lambda cached, n, rng: rng.choice(np.setdiff1d(np.arange(n), cached), 200),
    "mixed": lambda cached, n, rng: rng.integers(0, n, 300),
    "repeated": lambda cached, n, rng: np.array([cached[0]] * 5 + [n - 1] * 5 + [cached[1], n - 1, cached[0]]),
    "empty": lambda cached, n, rng: np.array([], dtype=np.int64),
    "one": lambda cached, n, rng: np.array([cached[2]]),
}


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("mix", list(MIXES))
@pytest.mark.parametrize("id_dtype", [torch.int32, torch.int64])
def test_cached_gather_equals_features_of_ids(device, mix, id_dtype):
    n, rng = 500, np.random.default_rng(1)
    host = torch.from_numpy(rng.standard_normal((n, 37)).astype(np.float32))
    cached = rng.choice(n - 1, 120, replace=False)  # row n - 1 never cached
    ids = torch.from_numpy(MIXES[mix](cached, n, rng).astype(np.int64)).to(device, id_dtype)
    cache = _cache_of(host, cached, device)  # host rows copied to the device, as a store will
    table = host.to(device)  # the reference reads misses from a table on the same device
    out = cache.gather(ids, table)
    assert out.shape == (ids.numel(), 37) and torch.equal(out, table[ids.long()])
    hits = int(np.isin(ids.cpu().numpy(), cached).sum())
    assert cache.stats.as_dict() == {"hits": hits, "misses": ids.numel() - hits, "hit_rate": hits / ids.numel() if ids.numel() else 0.0}
    if mix == "all-hit":
        assert cache.stats.misses == 0
    if mix == "all-miss":
        assert cache.stats.hits == 0
    buffer = torch.full((ids.numel(), 37), float("nan"), device=device)
    assert cached_gather(ids, table, cache.rows, cache.slot_map, out=buffer) is buffer
    assert torch.equal(buffer, table[ids.long()])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int8, torch.int64, torch.float64])
def test_cached_gather_keeps_every_dtype(dtype):
    table = (torch.arange(64 * 5).reshape(64, 5) % 120).to(dtype)
    cache = _cache_of(table, [3, 60, 0, 17])
    ids = torch.tensor([60, 1, 3, 3, 63, 0, 17, 2])
    assert torch.equal(cache.gather(ids, table), table[ids])
    assert cache.rows.dtype == dtype and cache.nbytes == 4 * 5 * table.element_size() + 64 * 4


def test_cache_rows_are_a_separate_copy():
    table = torch.arange(20.0).reshape(10, 2)
    cache = _cache_of(table, [4, 2])
    assert cache.rows.data_ptr() != table.data_ptr() and cache.rows.tolist() == [[8.0, 9.0], [4.0, 5.0]]
    table[4] = -1.0  # a static cache: a copy taken when it was built
    assert cache.gather(torch.tensor([4]), table).tolist() == [[8.0, 9.0]]


def test_split_and_gather_check_their_input():
    table = torch.zeros(10, 3)
    cache = _cache_of(table, [1, 2])
    with pytest.raises(IndexError, match="id 10 at position 1 is out of range for a table of 10 rows"):
        cache.gather(torch.tensor([0, 10]), table)
    with pytest.raises(IndexError, match="id -1"):
        split_hits(torch.tensor([-1]), cache.slot_map)
    with pytest.raises(TypeError, match="int32/int64"):
        split_hits(torch.tensor([1.0]), cache.slot_map)
    with pytest.raises(TypeError, match="int32/int64"):
        split_hits([1, 2], cache.slot_map)
    with pytest.raises(ValueError, match="not the table this cache was built from"):
        cache.gather(torch.tensor([1]), torch.zeros(10, 4))
    with pytest.raises(ValueError, match="out must be"):
        cached_gather(torch.tensor([1]), table, cache.rows, cache.slot_map, out=torch.zeros(2, 3))
    assert cache.stats.hits == cache.stats.misses == 0  # rejected batches are not counted


# -- statistics --------------------------------------------------------------------------------


def test_stats_arithmetic_and_reset():
    stats = CacheStats()
    assert stats.as_dict() == {"hits": 0, "misses": 0, "hit_rate": 0.0}
    stats.record(3, 1)
    stats.record(0, 4)
    stats.record(7, 0)
    assert (stats.hits, stats.misses) == (10, 5) and stats.hit_rate == pytest.approx(10 / 15)
    assert stats.as_dict() == {"hits": 10, "misses": 5, "hit_rate": pytest.approx(2 / 3)}
    stats.reset()
    assert stats.as_dict() == {"hits": 0, "misses": 0, "hit_rate": 0.0}
    with pytest.raises(ValueError, match=">= 0"):
        stats.record(-1, 0)


def test_stats_count_every_batch_from_several_threads():
    stats = CacheStats()

    def work():
        for _ in range(2000):
            stats.record(2, 1)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert stats.snapshot() == (16000, 8000)


# -- errors ------------------------------------------------------------------------------------


def test_unknown_policy_lists_the_valid_ones(small):
    graph, table, _ = small
    for bytes_ in (0, 10**6):  # a typo fails even without a cache
        with pytest.raises(ValueError, match="cache_policy must be one of 'degree', 'in_degree', 'out_degree', 'presample', but got 'in-degree'"):
            build_cache(table, bytes_, "in-degree", graph=graph)
    with pytest.raises(ValueError, match="'degree', 'in_degree', 'out_degree', 'presample'"):
        make_policy("lru", graph)
    assert CACHE_POLICIES == ("degree", "in_degree", "out_degree", "presample")


@pytest.mark.parametrize(
    "budget, error, match", [(-1, ValueError, ">= 0"), (1.5, TypeError, "integer"), (True, TypeError, "integer"), ("1GB", TypeError, "integer")]
)
def test_bad_budgets(small, budget, error, match):
    graph, table, _ = small
    with pytest.raises(error, match=match):
        build_cache(table, budget, "in_degree", graph=graph)


def test_missing_or_mismatched_graph_sampler_seeds(dgl, small):
    graph, table, seeds = small
    sampler = dgl.dataloading.NeighborSampler([2])
    with pytest.raises(ValueError, match="needs graph="):
        build_cache(table, 10**6, "in_degree")
    with pytest.raises(ValueError, match="needs sampler= and seeds="):
        build_cache(table, 10**6, "presample", graph=graph)
    with pytest.raises(ValueError, match="needs seeds="):
        build_cache(table, 10**6, "presample", graph=graph, sampler=sampler)
    with pytest.raises(ValueError, match="needs sampler="):
        check_cache_args(10**6, "presample", table.shape[0], graph, None, seeds)
    with pytest.raises(ValueError, match="graph has 3000 nodes but the feature table has 2999 rows"):
        build_cache(table[:-1], 10**6, "in_degree", graph=graph)
    with pytest.raises(TypeError, match="DGL graph"):
        build_cache(table, 10**6, "in_degree", graph=object())
    hetero = dgl.heterograph({("a", "r", "b"): (torch.tensor([0]), torch.tensor([0]))})
    with pytest.raises(ValueError, match="one node type"):
        make_policy("in_degree", hetero)
    assert check_cache_args(0, "presample", 5) == 0  # no cache: nothing else is needed


def test_presample_checks_its_seeds_and_batches(dgl, small):
    graph, _, _ = small
    sampler = dgl.dataloading.NeighborSampler([2])
    with pytest.raises(IndexError, match=r"\[0, 3000\)"):
        presample_counts(graph, sampler, torch.tensor([0, 3000]))
    with pytest.raises(ValueError, match="non-empty 1-D"):
        presample_counts(graph, sampler, torch.tensor([], dtype=torch.int64))
    with pytest.raises(ValueError, match="batch_size"):
        presample_counts(graph, sampler, torch.tensor([1]), batch_size=0)
    with pytest.raises(ValueError, match="epochs"):
        presample_counts(graph, sampler, torch.tensor([1]), epochs=0)
    with pytest.raises(ValueError, match="block sampler"):
        presample_counts(graph, lambda g, s: None, torch.tensor([1]))


def test_presample_cache_end_to_end(dgl, small):
    graph, table, seeds = small
    row = table.shape[1] * table.element_size()
    cache = build_cache(
        table, budget_for_rows(300, row, table.shape[0]), "presample", graph=graph, sampler=dgl.dataloading.NeighborSampler([4, 4]), seeds=seeds, batch_size=128
    )
    assert cache.num_cached == 300 and cache.policy == "presample"
    input_nodes = dgl.dataloading.NeighborSampler([4, 4]).sample(graph, seeds[:128])[0]
    assert torch.equal(cache.gather(input_nodes, table), table[input_nodes])
    assert 0 < cache.stats.hit_rate < 1


# -- bench/gathering/cache.py ----------------------------------------------------------------------------


@pytest.mark.slow
def test_cache_bench_on_a_tiny_graph(dgl, tmp_path):
    stem = tmp_path / "cache_tiny"
    args = ["--graphs", "products,directed", "--products-nodes", SMALL.num_nodes, "--directed-nodes", "3000", "--sizes", "5,50", "--repeats", "2"]
    r, result = run_bench("cache", *args, "--feature-compression", "int8", out=stem, timeout=300)
    everything = result["rows"]
    policies = ("degree", "in_degree", "out_degree", "presample", "oracle")
    for graph, repeat in [(g, k) for g in ("products", "directed") for k in (0, 1)]:
        rows = [row for row in everything if row["graph"] == graph and row["repeat"] == repeat]
        assert {row["eval_seed"] - row["presample_seed"] for row in rows} == {1}
        assert {row["presample_seed"] for row in rows} == {1 + 2 * repeat}
        compressed = {(row["stored"], row["cache_pct"]): row for row in rows if row["stored"] != "fp32"}
        rows = [row for row in rows if row["stored"] == "fp32"]
        assert set(compressed) == {(s, p) for s in ("int8 codes", "int8 decoded") for p in (5, 50)}
        by = {(row["policy"], row["cache_pct"]): row for row in rows}
        assert set(by) == {(p, s) for p in policies for s in (5, 50)} and len(rows) == len(by)
        for pct in (5, 50):
            codes, decoded, fp32 = compressed[("int8 codes", pct)], compressed[("int8 decoded", pct)], by[("presample", pct)]
            assert codes["cache_mib"] == decoded["cache_mib"] == fp32["cache_mib"]  # one byte budget
            assert decoded["cache_rows"] == fp32["cache_rows"] and decoded["hit_rate"] == fp32["hit_rate"]
            assert codes["cache_rows"] > 3.5 * fp32["cache_rows"] or codes["cache_rows"] == fp32["nodes"]  # 64 B against 16 B
            assert codes["hit_rate"] >= decoded["hit_rate"] and codes["pcie_gb_cached"] <= decoded["pcie_gb_cached"]
            assert decoded["pcie_gb_cached"] < fp32["pcie_gb_cached"]  # misses move codes
            assert codes["pcie_saved"] == pytest.approx(1 - codes["pcie_gb_cached"] / codes["pcie_gb_no_cache"])
            assert len({by[(p, pct)]["cache_mib"] for p in policies}) == 1  # every policy at the same byte budget
            if graph == "products":  # bidirected: in- and out-degree are one, so are the three degree rankings
                assert by[("degree", pct)]["hit_rate"] == by[("in_degree", pct)]["hit_rate"] == by[("out_degree", pct)]["hit_rate"]
            else:  # directed: in-edge sampling reads rows by out-degree
                assert by[("degree", pct)]["hit_rate"] == by[("out_degree", pct)]["hit_rate"]
                assert by[("degree", pct)]["hit_rate"] > by[("in_degree", pct)]["hit_rate"] + 0.07  # 15 % against 5 %, 73 against 49
        for row in rows:
            assert 0 <= row["hit_rate"] <= 1 and row["pcie_saved"] == row["hit_rate"]
            assert row["misses_per_epoch"] == round(row["rows_per_epoch"] * (1 - row["hit_rate"]))
            assert row["pcie_gb_cached"] == pytest.approx(row["pcie_gb_no_cache"] * (1 - row["hit_rate"]))
            assert row["hit_rate"] <= by[("oracle", row["cache_pct"])]["hit_rate"] + 1e-12  # no policy beats the oracle
        assert by[("degree", 5)]["hit_rate"] < by[("degree", 50)]["hit_rate"]
    summary = {(s["graph"], s["stored"], s["policy"], s["cache_pct"]): s for s in result["summary"]}
    for (graph, stored, policy, pct), s in summary.items():
        rates = sorted(row["hit_rate"] for row in everything if (row["graph"], row["stored"], row["policy"], row["cache_pct"]) == (graph, stored, policy, pct))
        assert s["repeats"] == 2 and (s["hit_rate_min"], s["hit_rate_max"]) == (rates[0], rates[-1])
        assert s["hit_rate_median"] == pytest.approx(sum(rates) / 2)
    assert stem.with_suffix(".png").stat().st_size > 0 and "| products | presample |" in r.stdout and "| directed | degree |" in r.stdout
    assert "| products | int8 codes |" in r.stdout and "median [min-max] of 2 repeats" in r.stdout


@pytest.mark.slow
def test_cache_bench_reads_an_amazon_graph_as_stored(dgl, tmp_path):
    """``amazon-photo-stored``: the file's one-way edges, not the dataset's symmetrised graph; sampled with fanouts
    5,5 and batches of 64; the degree sampling follows is its out-degree."""
    from conftest import SHARED_DATA

    if not (SHARED_DATA / "graphdata" / "amazon_photo.npz").is_file():
        pytest.skip(f"needs {SHARED_DATA}/graphdata/amazon_photo.npz")
    stem = tmp_path / "cache_stored"
    args = ["--graphs", "amazon-photo-stored,amazon-photo", "--sizes", "10", "--data-root", SHARED_DATA]
    _, result = run_bench("bench/gathering/cache.py", *args, out=stem, timeout=300)
    rows = {(row["graph"], row["policy"]): row for row in result["rows"]}
    stored, symmetric = rows[("amazon-photo-stored", "degree")], rows[("amazon-photo", "degree")]
    assert stored["edges"] < 0.7 * symmetric["edges"] and (stored["batch"], symmetric["batch"]) == (64, 200)
    assert stored["hit_rate"] == rows[("amazon-photo-stored", "out_degree")]["hit_rate"]
    assert symmetric["hit_rate"] == rows[("amazon-photo", "in_degree")]["hit_rate"] == rows[("amazon-photo", "out_degree")]["hit_rate"]


@pytest.mark.slow
def test_cache_bench_refuses_the_same_seed_twice(tmp_path):
    r = run_python("bench/gathering/cache.py", "--presample-seed", "3", "--eval-seed", "3", "--out", tmp_path / "c")
    assert r.returncode == 2 and "must differ" in r.stderr, r.stderr
    assert not list(tmp_path.iterdir())
