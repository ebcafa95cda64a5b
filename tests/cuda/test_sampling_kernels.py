"""sample_csc (dgl_zerocopy.cuda.sampling): the reference and the emulated kernel, against the
sampling contract, against each other (exactly), and against DGL's sampler."""

from __future__ import annotations

import itertools
import logging
import random

import numpy as np
import pytest
import torch
from nvrtc_archs import ARCH_PARAMS, FAST_ARCH, requires_nvrtc
from script_runs import run_python

from dgl_zerocopy.cuda import nvrtc
from dgl_zerocopy.cuda.sampling import SampledCSC, instantiations, pcie_model, rng, sample_csc
from dgl_zerocopy.cuda.sampling import launcher as sampling_launcher
from dgl_zerocopy.cuda.sampling.emulator import emulate_sample

CPU_BACKENDS = ["reference", "emulator"]
FANOUTS = [1, 3, 15, -1]


def power_law_csc(num_nodes: int, *, dtype: torch.dtype = torch.int64, seed: int = 0, max_degree: int = 200, isolated_every: int = 17):
    """An in-edge CSC with a heavy-tailed degree distribution, every ``isolated_every``-th node isolated."""
    gen = np.random.default_rng(seed)
    deg = np.minimum(gen.zipf(1.8, num_nodes) - 1, max_degree)
    deg[::isolated_every] = 0
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(deg, out=indptr[1:])
    indices = gen.integers(0, num_nodes, int(indptr[-1]))
    return torch.from_numpy(indptr).to(dtype), torch.from_numpy(indices).to(dtype)


def check_contract(indptr, indices, seeds, fanout, replace, result: SampledCSC) -> None:
    """Every property the contract promises, seed by seed."""
    assert isinstance(result, SampledCSC)
    assert result.indptr.dtype == torch.int64 and result.pos.dtype == torch.int64
    assert result.src.dtype == indices.dtype
    assert len(result.indptr) == len(seeds) + 1 and int(result.indptr[0]) == 0
    assert len(result.src) == len(result.pos) == int(result.indptr[-1])
    assert torch.equal(result.src, indices[result.pos])
    for i, v in enumerate(seeds.tolist()):
        start, end = int(indptr[v]), int(indptr[v + 1])
        deg = end - start
        picks = result.pos[int(result.indptr[i]) : int(result.indptr[i + 1])].tolist()
        expected = deg if fanout == -1 else (fanout if deg else 0) if replace else min(deg, fanout)
        assert len(picks) == expected, (v, deg, fanout, replace)
        assert picks == sorted(picks)
        assert all(start <= p < end for p in picks)
        if fanout == -1 or (not replace and deg <= fanout):
            assert picks == list(range(start, end))
        elif not replace:
            assert len(set(picks)) == len(picks)


# --------------------------------------------------------------------------- the RNG


def test_rng_equals_python_integer_arithmetic():
    """mix, mulhi and the keyed draws are the 64-bit formulas of kernels/sample_rng.cuh."""
    mask = (1 << 64) - 1

    def mix(z: int) -> int:
        z ^= z >> 30
        z = z * 0xBF58476D1CE4E5B9 & mask
        z ^= z >> 27
        z = z * 0x94D049BB133111EB & mask
        return z ^ z >> 31

    gen = random.Random(1)
    a = [gen.getrandbits(64) for _ in range(500)] + [0, mask, 1 << 63]
    b = [gen.getrandbits(64) for _ in range(500)] + [mask, mask, 3]
    assert rng.mulhi(np.array(a, np.uint64), np.array(b, np.uint64)).tolist() == [x * y >> 64 for x, y in zip(a, b)]
    assert rng.mix(np.array(a, np.uint64)).tolist() == [mix(x) for x in a]
    seed = mask - 5  # the additions wrap
    keys = rng.row_key(seed, np.arange(4))
    assert keys.tolist() == [mix((mix((seed + rng.GOLDEN) & mask) + (i + 1) * rng.GOLDEN) & mask) for i in range(4)]
    assert rng.draw(keys, 7).tolist() == [mix((k + 8 * rng.GOLDEN) & mask) for k in keys.tolist()]
    assert rng.uniform(rng.draw(keys, 0), np.int64(10)).max() < 10


# --------------------------------------------------------------------------- the contract


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("fanout", FANOUTS)
def test_contract_on_power_law_graph(backend, dtype, replace, fanout):
    indptr, indices = power_law_csc(400, dtype=dtype)
    seeds = torch.randperm(400, generator=torch.Generator().manual_seed(2))[:150].to(dtype)
    result = sample_csc(indptr, indices, seeds, fanout, replace=replace, seed=11, backend=backend)
    check_contract(indptr, indices, seeds, fanout, replace, result)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("replace", [False, True])
def test_isolated_duplicate_and_empty_seeds(backend, replace):
    indptr = torch.tensor([0, 0, 6, 6, 40])  # nodes 0 and 2 isolated, 1 of degree 6, 3 of 34
    indices = torch.arange(40) % 4
    seeds = torch.tensor([0, 3, 3, 2, 1, 3, 0])
    result = sample_csc(indptr, indices, seeds, 4, replace=replace, seed=5, backend=backend)
    check_contract(indptr, indices, seeds, 4, replace, result)
    counts = result.indptr.diff().tolist()
    assert counts[0] == counts[3] == counts[6] == 0
    # Duplicates are sampled independently (their position in seeds keys the RNG).
    picks = [result.pos[int(result.indptr[i]) : int(result.indptr[i + 1])].tolist() for i in (1, 2, 5)]
    assert picks[0] != picks[1] or picks[1] != picks[2]
    empty = sample_csc(indptr, indices, seeds[:0], 4, replace=replace, backend=backend)
    assert empty.indptr.tolist() == [0] and len(empty.src) == len(empty.pos) == 0


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_reproducible_per_seed_and_different_seeds_differ(backend):
    indptr, indices = power_law_csc(300, seed=3)
    seeds = torch.arange(300)
    first = sample_csc(indptr, indices, seeds, 5, seed=42, backend=backend)
    again = sample_csc(indptr, indices, seeds, 5, seed=42, backend=backend)
    other = sample_csc(indptr, indices, seeds, 5, seed=43, backend=backend)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert torch.equal(first.indptr, other.indptr) and not torch.equal(first.pos, other.pos)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_node_of_degree_one_million(backend):
    """A hub's picks cost fanout draws, never a pass over its neighbours; int32 ids."""
    deg = 1_000_000
    indptr = torch.tensor([0, 3, 3 + deg], dtype=torch.int32)
    indices = torch.arange(3 + deg, dtype=torch.int32)
    seeds = torch.tensor([1, 0, 1], dtype=torch.int32)
    for replace in (False, True):
        result = sample_csc(indptr, indices, seeds, 300, replace=replace, seed=9, backend=backend)
        check_contract(indptr, indices, seeds, 300, replace, result)
        hub = result.pos[:300]
        assert hub.min() < 3 + deg // 10 and hub.max() > 3 + deg - deg // 10  # spread over the range


# --------------------------------------------------------------------------- emulator == reference


def assert_same(a: SampledCSC, b: SampledCSC) -> None:
    for name, x, y in zip(SampledCSC._fields, a, b):
        assert x.dtype == y.dtype and torch.equal(x, y), name


@pytest.mark.parametrize("indptr_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("indices_dtype", [torch.int32, torch.int64])
def test_emulator_equals_reference_exactly(indptr_dtype, indices_dtype):
    """Many graphs, seeds, fanouts and RNG seeds, every dtype pairing, with and without
    replacement: the kernels (g++) return the reference's picks bit for bit."""
    gen = np.random.default_rng(7)
    for case in range(12):
        indptr, indices = power_law_csc(int(gen.integers(1, 600)), seed=case, max_degree=int(gen.choice([3, 40, 400])))
        indptr, indices = indptr.to(indptr_dtype), indices.to(indices_dtype)
        num_nodes = len(indptr) - 1
        seeds = torch.from_numpy(gen.integers(0, num_nodes, int(gen.integers(0, 700)))).to(indices_dtype)
        fanout = int(gen.choice([1, 2, 5, 15, 64, 300, -1]))
        replace = bool(case % 2)
        seed = int(gen.integers(0, 1 << 63)) * 2 + case % 2  # the whole uint64 range
        args = (indptr, indices, seeds, fanout)
        assert_same(sample_csc(*args, replace=replace, seed=seed, backend="emulator"), sample_csc(*args, replace=replace, seed=seed, backend="reference"))


def test_emulator_grid_cap_and_fetch_variants_agree():
    """A capped grid (grid-stride loops) and the per-seed fetch give the same result."""
    indptr, indices = power_law_csc(500, seed=5)
    seeds = torch.arange(500)
    expected = sample_csc(indptr, indices, seeds, 7, seed=1, backend="reference")
    for kwargs in (dict(max_blocks=1), dict(fetch_variant="per_seed"), dict(max_blocks=2, fetch_variant="per_seed")):
        assert_same(SampledCSC(*emulate_sample(indptr, indices, seeds, 7, seed=1, **kwargs)), expected)


def test_emulated_kernel_flags_bad_seeds():
    """Without the Python range check (as on CUDA), the bounds pass finds a bad seed and the
    driver raises IndexError naming it, after reading it with the total."""
    indptr, indices = power_law_csc(30)
    for bad in (30, -4):
        with pytest.raises(IndexError, match=rf"seed node id {bad} is out of range.*30 nodes"):
            emulate_sample(indptr, indices, torch.tensor([1, 2, bad, 5]), 3)


def test_instantiations():
    names = instantiations.all_name_expressions()
    assert len(names) == len(set(names)) == 20
    assert "sample_bounds<int, long long>" in names and "sample_fetch<long long>" in names
    with pytest.raises(ValueError, match="indices must be 4 .* or 8 .* but got 2"):
        instantiations.fetch_name(2)
    with pytest.raises(ValueError, match="variant must be one of"):
        instantiations.fetch_name(4, "warp")


# --------------------------------------------------------------------------- uniformity


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_picks_uniform_over_positions_chi_square(backend):
    """Over 40 RNG seeds x 100 duplicate seeds (4000 draws, both key them), each position of a
    degree-40 hub is picked equally often."""
    stats = pytest.importorskip("scipy.stats")
    deg, fanout, rng_seeds, duplicates = 40, 6, 40, 100
    indptr = torch.tensor([0, deg])
    indices = torch.arange(deg)
    seeds = torch.zeros(duplicates, dtype=torch.int64)
    for replace in (False, True):
        hits = np.zeros(deg, dtype=np.int64)
        for s in range(rng_seeds):
            result = sample_csc(indptr, indices, seeds, fanout, replace=replace, seed=s, backend=backend)
            hits += np.bincount(result.pos.numpy(), minlength=deg)
        assert hits.sum() == rng_seeds * duplicates * fanout
        assert stats.chisquare(hits).pvalue > 1e-4, (replace, hits)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("replace", [False, True])
def test_picks_uniform_over_positions_of_a_large_hub_chi_square(backend, replace):
    """A hub of 10^6 in-edges (int32 CSC), 20,000 duplicate seeds (each drawn independently), fanout
    10: 200,000 picks, binned two ways, each bin expecting 2,000. By range (100 bins of 10^4 positions:
    the draw's high bits, a skew toward either end) and by residue mod 100 (its low bits, a bias of the
    range reduction). RNG seed fixed, so deterministic; p > 1e-6 (99 degrees of freedom: a chi-square
    statistic above about 181)."""
    stats = pytest.importorskip("scipy.stats")
    deg, fanout, trials, bins, first = 1_000_000, 10, 20_000, 100, 3
    indptr = torch.tensor([0, first, first + deg], dtype=torch.int32)
    indices = torch.arange(first + deg, dtype=torch.int32)
    seeds = torch.ones(trials, dtype=torch.int32)
    result = sample_csc(indptr, indices, seeds, fanout, replace=replace, seed=2024, backend=backend)
    offsets = result.pos.numpy() - first
    assert len(offsets) == trials * fanout and offsets.min() >= 0 and offsets.max() < deg
    if not replace:  # no position twice within a seed's picks
        assert (np.diff(np.sort(offsets.reshape(trials, fanout), axis=1), axis=1) > 0).all()
    for name, binned in (("range", offsets * bins // deg), ("residue", offsets % bins)):
        counts = np.bincount(binned, minlength=bins)
        assert counts.sum() == trials * fanout
        assert stats.chisquare(counts).pvalue > 1e-6, (name, counts.min(), counts.max())


def test_subsets_uniform_without_replacement():
    """Floyd's algorithm gives every 3-subset of 7 positions the same chance (35 subsets), across
    RNG seeds and across positions in seeds (both key the draws)."""
    stats = pytest.importorskip("scipy.stats")
    indptr = torch.tensor([0, 7])
    indices = torch.arange(7)
    seeds = torch.zeros(200, dtype=torch.int64)
    subsets = {s: 0 for s in itertools.combinations(range(7), 3)}
    for s in range(40):
        result = sample_csc(indptr, indices, seeds, 3, seed=s, backend="reference")
        for picks in result.pos.view(-1, 3).tolist():
            subsets[tuple(picks)] += 1
    counts = np.array(list(subsets.values()))
    assert counts.min() > 0 and stats.chisquare(counts).pvalue > 1e-4, counts


# --------------------------------------------------------------------------- against DGL


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("fanout", [2, 10, -1])
def test_agrees_with_dgl_sample_neighbors(dtype, fanout):
    """Per-seed counts equal DGL's; where DGL takes every in-edge, the same edges."""
    dgl = pytest.importorskip("dgl")
    gen = torch.Generator().manual_seed(4)
    src = torch.randint(0, 500, (4000,), generator=gen)
    dst = (torch.rand(4000, generator=gen) ** 3 * 500).long()  # skewed in-degrees
    g = dgl.graph((src, dst), num_nodes=500, idtype=dtype)
    indptr, indices, eids = g.adj_tensors("csc")
    seeds = torch.randperm(500, generator=gen)[:200].to(dtype)
    ours = sample_csc(indptr, indices, seeds, fanout, seed=3, backend="reference")
    frontier = dgl.sampling.sample_neighbors(g, seeds, fanout)
    f_src, f_dst = frontier.edges()
    f_eid = frontier.edata[dgl.EID]
    for i, v in enumerate(seeds.tolist()):
        ours_pos = ours.pos[int(ours.indptr[i]) : int(ours.indptr[i + 1])]
        theirs = f_eid[f_dst == v]
        assert len(ours_pos) == len(theirs)
        ours_eid = eids[ours_pos]
        assert torch.equal(g.find_edges(ours_eid)[1], torch.full_like(ours_eid, v).to(dtype))
        if fanout == -1 or g.in_degrees(v) <= fanout:
            assert sorted(ours_eid.tolist()) == sorted(theirs.tolist())
    assert torch.equal(ours.src, g.find_edges(eids[ours.pos])[0])
    assert len(f_src) == len(ours.src)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_bad_seed_ids_raise_index_error(backend):
    indptr, indices = power_law_csc(50)
    for bad in (50, -1, 1 << 40):
        with pytest.raises(IndexError, match=rf"seed node id {bad} is out of range.*50 nodes"):
            sample_csc(indptr, indices, torch.tensor([0, bad, 3]), 5, backend=backend)


def test_bad_arguments_name_the_value():
    indptr, indices = power_law_csc(20)
    seeds = torch.arange(5)
    with pytest.raises(ValueError, match="fanout must be an int >= 1 or -1.*0"):
        sample_csc(indptr, indices, seeds, 0, backend="reference")
    with pytest.raises(ValueError, match="fanout.*True"):
        sample_csc(indptr, indices, seeds, True, backend="reference")
    with pytest.raises(ValueError, match=r"seed must be in \[0, 2\*\*64\).*-1"):
        sample_csc(indptr, indices, seeds, 3, seed=-1, backend="reference")
    with pytest.raises(ValueError, match="backend must be one of.*'gpu'"):
        sample_csc(indptr, indices, seeds, 3, backend="gpu")
    with pytest.raises(TypeError, match="indices must be int32 or int64.*float32"):
        sample_csc(indptr, indices.float(), seeds, 3, backend="reference")
    with pytest.raises(ValueError, match="seeds must be 1-D.*"):
        sample_csc(indptr, indices, seeds.view(1, -1), 3, backend="reference")
    with pytest.raises(ValueError, match="indptr.*empty"):
        sample_csc(indptr[:0], indices, seeds[:0], 3, backend="reference")
    with pytest.raises(ValueError, match=r"indptr\[-1\] is .* but indices has only"):
        sample_csc(indptr, indices[:-1], seeds, 3, backend="reference")


# --------------------------------------------------------------------------- NVRTC (no GPU)


@requires_nvrtc
@pytest.mark.parametrize("arch", ARCH_PARAMS)
def test_every_sampling_instantiation_compiles_without_warnings(arch, caplog):
    """With CuPy's own options (kernel_source.nvrtc_options), for every architecture of the found
    NVRTC's CUDA major (sm_90 here, the others in the slow tier)."""
    with caplog.at_level(logging.WARNING, logger="dgl_zerocopy.cuda.nvrtc"):
        cubin = sampling_launcher.compile_check(arch)
    assert cubin[:4] == b"\x7fELF"
    assert not caplog.records, caplog.text


@requires_nvrtc
def test_ptx_has_every_entry_and_the_64_bit_multiply_high():
    ptx = sampling_launcher.compile_check(FAST_ARCH.replace("sm_", "compute_")).decode()
    assert ptx.count(".entry ") == len(instantiations.all_name_expressions())
    assert "mul.hi.u64" in ptx  # zc_uniform's __umul64hi
    assert "curand" not in ptx and ".ftz" not in ptx


@requires_nvrtc
def test_compile_error_names_the_bad_instantiation():
    with pytest.raises(nvrtc.KernelCompileError, match="no_such_type"):
        sampling_launcher.compile_check(FAST_ARCH, ["sample_fetch<no_such_type>"])


@pytest.mark.slow
def test_cuda_backend_without_a_gpu_is_a_clear_error():
    """The launcher imports without CuPy; CPU seeds on backend 'cuda' name the emulator."""
    code = (
        "import sys; sys.modules['cupy'] = None\n"
        "import torch\n"
        "from dgl_zerocopy.cuda.sampling import launcher, pcie_model, sample_csc\n"
        "try:\n"
        "    sample_csc(torch.tensor([0, 1]), torch.tensor([0]), torch.tensor([0]), 2)\n"
        "except ValueError as e:\n"
        "    assert \"backend='emulator'\" in str(e), e\n"
        "else:\n"
        "    raise SystemExit('no error')\n"
        "try:\n"
        "    launcher._cupy()\n"
        "except RuntimeError as e:\n"
        "    assert 'CuPy' in str(e) and 'emulator' in str(e), e\n"
    )
    result = run_python("-c", code, timeout=120)
    assert result.returncode == 0, result.stderr


# --------------------------------------------------------------------------- the PCIe model


def test_pcie_model_counts_one_request_per_line_of_picks():
    """One seed taking all 64 in-edges (int32, 256 B on two lines): the flat fetch reads them in two
    instructions of 32 lanes (one line each), the per-seed fetch in 64 (one request each); its
    two offsets are one request."""
    indptr = torch.tensor([0, 64], dtype=torch.int32)
    indices = torch.zeros(64, dtype=torch.int32)
    flat = pcie_model.model_layers(indptr, indices, (-1,), batch_size=1)
    per_seed = pcie_model.model_layers(indptr, indices, (-1,), batch_size=1, variant="per_seed")
    assert flat[0].edges == per_seed[0].edges == 64
    assert (flat[0].indices_requests, flat[0].indices_fetched) == (2, 256)
    assert (per_seed[0].indices_requests, per_seed[0].indices_fetched) == (64, 64 * 32)
    assert flat[0].indptr_requests == 1 and flat[0].scan_requests == 2
    with_eids = pcie_model.model_layers(indptr, indices, (-1,), batch_size=1, edge_ids=True)
    assert (with_eids[0].eid_requests, with_eids[0].eid_fetched) == (2, 256)


def test_pcie_model_on_a_products_shaped_graph():
    """Small graph: the flat fetch costs fewer requests and link bytes per edge than a thread per
    seed and than scanning whole lists; int32 ids fewer than int64; edge ids add to both."""
    indptr, indices = pcie_model.products_like_csc(20_000)
    degrees = indptr.diff().double()
    assert 40 < degrees.mean() < 60 and degrees.min() >= 1
    result = {}
    for dtype in (torch.int32, torch.int64):
        for variant in ("flat", "per_seed"):
            for edge_ids in (False, True):
                layers = pcie_model.model_layers(indptr.to(dtype), indices.to(dtype), (15, 10, 5), batch_size=256, edge_ids=edge_ids, variant=variant)
                assert [m.fanout for m in layers] == [5, 10, 15] and layers[0].seeds == 256
                assert all(m.edges <= m.seeds * m.fanout for m in layers)
                result[dtype, variant, edge_ids] = pcie_model.totals(layers)
    for dtype in (torch.int32, torch.int64):
        flat, per_seed = result[dtype, "flat", False], result[dtype, "per_seed", False]
        assert flat["requests_per_edge"] < per_seed["requests_per_edge"]
        assert flat["link_bytes_per_edge"] < per_seed["link_bytes_per_edge"]
        assert flat["link_bytes_per_edge"] < flat["scan_link_bytes_per_edge"]
        assert result[dtype, "flat", True]["link_bytes_per_edge"] > flat["link_bytes_per_edge"]
    assert result[torch.int32, "flat", False]["link_bytes_per_edge"] < result[torch.int64, "flat", False]["link_bytes_per_edge"]
