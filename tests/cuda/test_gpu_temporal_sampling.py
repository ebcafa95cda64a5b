"""The GPU's temporal and weighted picks (kernels/sample_temporal.cu, dgl_zerocopy/cuda/sampling/temporal.py).

Three ways on the CPU: NVRTC compiles every instantiation for every architecture the found NVRTC supports;
the g++ emulator runs the same .cu and is checked equal to the NumPy twins (the cut to
``sampling.picks.cut_by_time``, the weighted picks to ``reference_pick_weighted``) and, for a hub, to the exact
distribution (chi-squared); its trace gives the PCIe requests of the cut's binary searches (coalesced when a
warp's seeds share a neighbourhood). On a GPU (``gpu`` marker) the CUDA backend equals the emulator.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from nvrtc_archs import ARCH_PARAMS, requires_nvrtc

from dgl_zerocopy.cuda.sampling import temporal
from dgl_zerocopy.sampling.picks import cut_by_time, prefix_sums


def _emulator_available() -> bool:
    try:
        temporal._library()
    except (RuntimeError, OSError):
        return False
    return True


requires_emulator = pytest.mark.skipif(not _emulator_available(), reason="no C++ compiler for the CPU emulator")


def sorted_csc(num_nodes: int, num_edges: int, seed: int):
    gen = np.random.default_rng(seed)
    dst = np.sort(np.concatenate([gen.integers(0, num_nodes, num_edges), np.zeros(300, dtype=np.int64)]))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=num_nodes))])
    times = gen.integers(0, 1000, len(dst))
    times = times[np.lexsort((times, dst))]
    return indptr, gen.integers(0, num_nodes, len(dst)), times


@requires_nvrtc
@pytest.mark.parametrize("arch", ARCH_PARAMS)
def test_every_instantiation_compiles(arch):
    assert len(temporal.compile_check(arch)) > 0
    ptx = temporal.compile_check(f"compute_{arch.removeprefix('sm_')}").decode()
    assert ptx.count(".entry ") == len(temporal.all_name_expressions())


@requires_emulator
@pytest.mark.parametrize("strategy", ["uniform", "last"])
@pytest.mark.parametrize("dtype", [np.int64, np.float64, np.int32])
def test_emulated_cut_equals_the_numpy_reference(strategy, dtype):
    indptr, _, times = sorted_csc(200, 3000, 0)
    times = times.astype(dtype)
    gen = np.random.default_rng(1)
    seeds = gen.integers(0, 200, 300)
    seed_time = gen.integers(-5, 1005, 300).astype(dtype)
    bounds = torch.from_numpy(np.stack([indptr[seeds], indptr[seeds + 1]], axis=1).reshape(-1).astype(np.int64))
    temporal.cut_by_time(bounds, torch.from_numpy(times), torch.from_numpy(seed_time), 4, strategy, backend="emulator")
    start, deg = cut_by_time(indptr, times, seeds, seed_time, 4, strategy)
    assert np.array_equal(bounds.numpy(), np.stack([start, start + deg], axis=1).reshape(-1))
    assert (deg < np.diff(indptr)[seeds]).any() and (deg > 0).any()


def weighted_case(seed: int = 2):
    gen = np.random.default_rng(seed)
    indptr, indices, _ = sorted_csc(150, 2500, seed)
    weights = gen.random(int(indptr[-1])) * (gen.random(int(indptr[-1])) > 0.2)
    weights[indptr[5] : indptr[6]] = 0.0  # a neighbourhood of total weight 0
    seeds = np.concatenate([[0, 5], gen.integers(0, 150, 200)])
    bounds = np.stack([indptr[seeds], indptr[seeds + 1]], axis=1).reshape(-1).astype(np.int64)
    return indptr, indices, weights, prefix_sums(indptr, weights), bounds


@requires_emulator
@pytest.mark.parametrize("fanout, replace", [(5, False), (5, True), (-1, False), (64, False), (1, True)])
def test_emulated_weighted_picks_equal_the_numpy_twin(fanout, replace):
    _, indices, weights, sums, bounds = weighted_case()
    out_indptr, pos = temporal.pick_weighted(
        torch.from_numpy(bounds), torch.from_numpy(weights), torch.from_numpy(sums), fanout, replace, 7, backend="emulator"
    )
    want_indptr, want_pos = temporal.reference_pick_weighted(bounds, weights, sums, fanout, replace, 7)
    assert np.array_equal(out_indptr.numpy(), want_indptr) and np.array_equal(pos.numpy(), want_pos)
    assert len(want_pos) > 100
    if replace:
        assert (weights[pos.numpy()] > 0).all(), "a zero weight drawn with replacement"
        assert out_indptr[2] == out_indptr[1], "a neighbourhood of total weight 0 gave picks"
    src = temporal.fetch_sources(torch.from_numpy(indices), pos, backend="emulator")
    assert np.array_equal(src.numpy(), indices[pos.numpy()])


@requires_emulator
def test_emulated_weighted_picks_follow_the_weights_chi_square():
    stats = pytest.importorskip("scipy.stats")
    weights = np.array([0.5, 1.0, 2.0, 4.0, 8.0, 3.0, 1.5, 0.25])
    copies = 400
    bounds = np.stack([np.zeros(copies, dtype=np.int64), np.full(copies, len(weights))], axis=1).reshape(-1)
    sums = np.cumsum(weights)
    for replace, fanout in ((True, 3), (False, 1)):
        hits = np.zeros(len(weights), dtype=np.int64)
        for seed in range(10):
            _, pos = temporal.pick_weighted(
                torch.from_numpy(bounds), torch.from_numpy(weights), torch.from_numpy(sums), fanout, replace, seed, backend="emulator"
            )
            np.add.at(hits, pos.numpy(), 1)
        assert hits.sum() == 10 * copies * fanout
        assert stats.chisquare(hits, hits.sum() * weights / weights.sum()).pvalue > 1e-4, (replace, hits)


@requires_emulator
def test_pcie_requests_of_the_cut():
    """A warp of 32 seeds of one node searches one neighbourhood together: one request per step; 32 seeds
    of 32 far-apart neighbourhoods: up to 32 a step."""
    deg = 1000
    times = torch.arange(32 * 4096, dtype=torch.int64)  # 32 neighbourhoods of 4096 positions (32 KB apart)
    same = torch.tensor([0, deg] * 32)
    _, loads = temporal.cut_by_time(same.clone(), times, torch.full((32,), 500), -1, backend="emulator", trace=True)
    steps = int(np.ceil(np.log2(deg + 1)))
    assert len(loads) == 32 * steps and temporal.pcie_requests(loads) == steps
    apart = torch.stack([torch.arange(32) * 4096, torch.arange(32) * 4096 + deg], dim=1).reshape(-1)
    _, loads = temporal.cut_by_time(apart, times, torch.arange(32) * 4096 + 500, -1, backend="emulator", trace=True)
    assert temporal.pcie_requests(loads) == 32 * steps


def test_refusals():
    bounds = torch.zeros(4, dtype=torch.int64)
    with pytest.raises(ValueError, match="strategy must be"):
        temporal.cut_by_time(bounds, torch.zeros(3), torch.zeros(2), 2, "latest", backend="emulator")
    with pytest.raises(ValueError, match="2 entries per seed"):
        temporal.cut_by_time(bounds, torch.zeros(3), torch.zeros(3), 2, backend="emulator")
    with pytest.raises(TypeError, match="times must be int32, int64, float32 or float64"):
        temporal.cut_name(torch.int16)
    with pytest.raises(ValueError, match="must be -1 or in"):
        temporal.pick_weighted(bounds, torch.zeros(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64), 65, False, 0, backend="emulator")
    with pytest.raises(ValueError, match="backend must be"):
        temporal.fetch_sources(torch.zeros(3, dtype=torch.int64), torch.zeros(1, dtype=torch.int64), backend="gpu")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("placement", ["pinned", "device"])
def test_cuda_equals_the_emulator(placement):
    indptr, indices, times = sorted_csc(200, 3000, 3)
    _, _, weights, sums, bounds = weighted_case(3)
    where = (lambda t: t.pin_memory()) if placement == "pinned" else (lambda t: t.cuda())
    seeds = np.random.default_rng(4).integers(0, 200, 300)
    cut = torch.from_numpy(np.stack([indptr[seeds], indptr[seeds + 1]], axis=1).reshape(-1).astype(np.int64))
    seed_time = torch.from_numpy(np.random.default_rng(5).integers(0, 1000, 300))
    for strategy in ("uniform", "last"):
        want = temporal.cut_by_time(cut.clone(), torch.from_numpy(times), seed_time, 4, strategy, backend="emulator")
        got = temporal.cut_by_time(cut.cuda(), where(torch.from_numpy(times)), seed_time.cuda(), 4, strategy)
        assert torch.equal(got.cpu(), want)
    for fanout, replace in ((5, False), (5, True), (-1, False)):
        want = temporal.pick_weighted(torch.from_numpy(bounds), torch.from_numpy(weights), torch.from_numpy(sums), fanout, replace, 9, backend="emulator")
        got = temporal.pick_weighted(torch.from_numpy(bounds).cuda(), where(torch.from_numpy(weights)), where(torch.from_numpy(sums)), fanout, replace, 9)
        assert all(torch.equal(g.cpu(), w) for g, w in zip(got, want))
        src = temporal.fetch_sources(where(torch.from_numpy(indices)), got[1])
        assert torch.equal(src.cpu(), torch.from_numpy(indices)[want[1]])
