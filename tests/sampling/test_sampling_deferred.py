"""sample_csc's two halves without a host read (plan_csc, sample_csc_deferred), relabel over their
padded picks, and the sampler built on them: equal to sample_csc bit for bit on the reference and
the emulated kernels, the unused slots -1, a buffer's tail past its device-side count never read."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_sampling_kernels import power_law_csc

from dgl_zerocopy.cuda.sampling import CSCPlan, DeferredCSC, SampledCSC, plan_csc, sample_csc, sample_csc_deferred
from dgl_zerocopy.sampling import relabel

CPU_BACKENDS = ["reference", "emulator"]


def assert_same(a: tuple, b: tuple) -> None:
    for x, y in zip(a, b, strict=True):
        if isinstance(x, torch.Tensor):
            assert x.dtype == y.dtype and torch.equal(x, y)
        else:
            assert x == y


@pytest.mark.parametrize("indptr_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("indices_dtype", [torch.int32, torch.int64])
def test_deferred_equals_sample_csc_exactly(indptr_dtype, indices_dtype):
    """Random graphs, seeds, fanouts (-1 with a capacity past its total), both replacements: the
    picks are sample_csc's, the unused slots -1, and the emulated kernels write every entry of
    every output (``bad`` included) as the reference does."""
    gen = np.random.default_rng(11)
    for case in range(10):
        indptr, indices = power_law_csc(int(gen.integers(1, 500)), seed=case, max_degree=int(gen.choice([3, 40, 400])))
        indptr, indices = indptr.to(indptr_dtype), indices.to(indices_dtype)
        seeds = torch.from_numpy(gen.integers(0, len(indptr) - 1, int(gen.integers(0, 400)))).to(indices_dtype)
        fanout = int(gen.choice([1, 2, 5, 15, 64, -1]))
        replace, seed = bool(case % 2), int(gen.integers(0, 1 << 63))
        exact = sample_csc(indptr, indices, seeds, fanout, replace=replace, seed=seed, backend="reference")
        total = int(exact.indptr[-1])
        capacity = total + int(gen.integers(0, 40)) if fanout == -1 else None
        outs = [sample_csc_deferred(indptr, indices, seeds, fanout, replace=replace, seed=seed, capacity=capacity, backend=b) for b in CPU_BACKENDS]
        assert_same(*outs)
        out = outs[1]
        assert isinstance(out, DeferredCSC) and len(out.src) == (capacity if fanout == -1 else len(seeds) * fanout)
        assert out.sizes().tolist() == [total, -1]
        assert_same(out.trimmed(total), exact)
        assert (out.src[total:] == -1).all() and (out.pos[total:] == -1).all()


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_plan_over_a_longer_buffer_reads_only_its_valid_prefix(backend):
    """num_valid = 120 of a 200-entry buffer whose tail holds ids outside the graph (as an unused
    buffer may): none is flagged or read, and the plan's head samples as sample_csc does."""
    indptr, indices = power_law_csc(300, seed=4)
    seeds = torch.randint(0, 300, (120,), generator=torch.Generator().manual_seed(0))
    buffer = torch.cat([seeds, torch.tensor([300, -1, 1 << 40] * 26 + [7, 8])])
    for fanout in (-1, 6):
        plan = plan_csc(indptr, buffer, fanout, num_valid=torch.tensor([120]), backend=backend)
        alone = plan_csc(indptr, seeds, fanout, backend=backend)
        assert isinstance(plan, CSCPlan) and int(plan.bad) == -1
        assert (plan.bounds[240:] == 0).all() and (plan.out_indptr[120:] == plan.out_indptr[120]).all()
        assert_same(plan.head(120), alone)
        total = int(plan.out_indptr[-1])
        out = sample_csc_deferred(indptr, indices, seeds, fanout, seed=3, capacity=total, plan=plan.head(120), backend=backend)
        assert_same(out.trimmed(total), sample_csc(indptr, indices, seeds, fanout, seed=3, backend="reference"))
    assert_same(
        plan_csc(indptr, buffer, 6, num_valid=torch.tensor([120]), backend="emulator"),
        plan_csc(indptr, buffer, 6, num_valid=torch.tensor([120]), backend="reference"),
    )
    empty = plan_csc(indptr, buffer, 6, num_valid=torch.tensor([0]), backend=backend)
    assert empty.out_indptr.abs().sum() == 0 and int(empty.bad) == -1


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_bad_seed_is_reported_on_the_device_not_raised(backend):
    indptr, indices = power_law_csc(50, seed=2)
    for bad in (50, -3):
        seeds = torch.tensor([4, bad, 9])
        out = sample_csc_deferred(indptr, indices, seeds, 3, backend=backend)
        total, position = out.sizes().tolist()
        assert position == 1 and out.indptr[2] == out.indptr[1]  # no picks for it, the others sampled
        assert_same(out.trimmed(total).pos[: int(out.indptr[1])], sample_csc(indptr, indices, seeds[:1], 3, backend="reference").pos)
        assert int(plan_csc(indptr, seeds, -1, backend=backend).bad) == 1


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_capacity_below_the_total_gives_no_picks(backend):
    """The kernels write nothing past the outputs: all -1, and trimmed() names the fix."""
    indptr, indices = power_law_csc(100, seed=1)
    seeds = torch.arange(100)
    total = int(plan_csc(indptr, seeds, -1, backend="reference").out_indptr[-1])
    out = sample_csc_deferred(indptr, indices, seeds, -1, capacity=total - 1, backend=backend)
    assert len(out.src) == total - 1 and (out.src == -1).all() and (out.pos == -1).all()
    assert int(out.indptr[-1]) == total
    with pytest.raises(ValueError, match=rf"total {total} exceeds the capacity {total - 1}"):
        out.trimmed(total)


def test_deferred_arguments_name_the_value():
    indptr, indices = power_law_csc(30)
    seeds = torch.arange(5)
    with pytest.raises(ValueError, match="fanout -1 needs capacity="):
        sample_csc_deferred(indptr, indices, seeds, -1, backend="reference")
    for bad in (-1, True, 2.0):
        with pytest.raises(ValueError, match=rf"capacity must be an int >= 0, but got {bad!r}"):
            sample_csc_deferred(indptr, indices, seeds, 3, capacity=bad, backend="reference")
    plan = plan_csc(indptr, seeds, 3, backend="reference")
    with pytest.raises(ValueError, match=r"plan must be plan_csc\(\.\.\.\) of these 5 seeds with fanout=4, replace=False, but got \(3, False, 5\)"):
        sample_csc_deferred(indptr, indices, seeds, 4, plan=plan, backend="reference")
    with pytest.raises(ValueError, match="of these 4 seeds"):
        sample_csc_deferred(indptr, indices, seeds[:4], 3, plan=plan, backend="reference")
    with pytest.raises(ValueError, match="plan must be .* but got tuple"):
        sample_csc_deferred(indptr, indices, seeds, 3, plan=tuple(plan), backend="reference")
    with pytest.raises(TypeError, match="num_valid must be None or an int64 tensor of one element"):
        plan_csc(indptr, seeds, 3, num_valid=torch.tensor([2], dtype=torch.int32), backend="reference")
    with pytest.raises(TypeError, match="num_valid must be"):
        plan_csc(indptr, seeds, 3, num_valid=2, backend="reference")
    with pytest.raises(ValueError, match=r"n must be in \[0, 5\].*6"):
        plan.head(6)
    with pytest.raises(ValueError, match="fanout must be an int >= 1 or -1"):
        plan_csc(indptr, seeds, 0, backend="reference")


def test_relabel_over_padded_picks_equals_relabel_of_the_picks():
    """Unused slots (-1) are never nodes, and the nodes and local ids of the picks are those of
    the picks alone; the count stays on the device."""
    gen = torch.Generator().manual_seed(5)
    for _ in range(20):
        dst = torch.randperm(60, generator=gen)[:10]
        src = torch.randint(0, 60, (int(torch.randint(0, 40, (), generator=gen)),), generator=gen)
        pads = torch.full((int(torch.randint(0, 30, (), generator=gen)),), -1)
        nodes, local, count = relabel.relabel_deferred(dst, torch.cat([src, pads]))
        expected_nodes, expected_local = relabel.relabel(dst, src)
        assert count.shape == (1,) and int(count) == len(expected_nodes)
        assert torch.equal(nodes[: int(count)], expected_nodes) and torch.equal(local[: len(src)], expected_local)
        assert (expected_nodes >= 0).all()


@pytest.mark.parametrize("fanouts", [[3], [-1], [4, -1], [-1, 2]])
def test_sampler_bad_seed_is_an_index_error_naming_it(fanouts):
    """From the emulated kernels' device flag, read with the layer's sizes (or the output layer's
    total when it takes every in-edge)."""
    from test_sampling import make_graph

    from dgl_zerocopy.sampling import GpuNeighborSampler

    g = make_graph()
    with pytest.raises(IndexError, match=r"seed node id 400 is out of range for a CSC of 400 nodes.*\[0, 400\)"):
        GpuNeighborSampler(fanouts, device="emulator").sample(g, torch.tensor([1, 400, 2]))


def test_sample_csc_is_unchanged_by_the_halves():
    """sample_csc (exact sizes, one read) is plan + read + pick and fetch of that total."""
    indptr, indices = power_law_csc(200, seed=9)
    seeds = torch.arange(0, 200, 3)
    for backend in CPU_BACKENDS:
        plan = plan_csc(indptr, seeds, 5, backend=backend)
        out = sample_csc_deferred(indptr, indices, seeds, 5, seed=2, plan=plan, capacity=int(plan.out_indptr[-1]), backend=backend)
        assert_same(SampledCSC(*out[:3]), sample_csc(indptr, indices, seeds, 5, seed=2, backend=backend))


@pytest.mark.parametrize("fanouts", [[-1, 3, -1], [2, -1]])
def test_sampler_every_edge_layers_with_replace_equal_reference(fanouts):
    """replace=True means nothing to a fanout -1 layer: its plan, made ahead, serves it."""
    from test_sampling import block_triples, make_graph

    from dgl_zerocopy.sampling import GpuNeighborSampler

    g = make_graph(torch.int32)
    torch.manual_seed(4)
    ours = GpuNeighborSampler(fanouts, replace=True, device="emulator").sample_blocks(g, torch.arange(0, 400, 9))
    torch.manual_seed(4)
    ref = GpuNeighborSampler(fanouts, replace=True, device="reference").sample_blocks(g, torch.arange(0, 400, 9))
    assert torch.equal(ours[0], ref[0]) and all(block_triples(a) == block_triples(b) for a, b in zip(ours[2], ref[2]))
    assert plan_csc(torch.tensor([0, 2]), torch.tensor([0]), -1, replace=True, backend="reference").replace is False


def test_relabel_uses_no_single_block_scan():
    """``torch.cummax`` on CUDA scans a 1-D tensor in one thread block: in relabel it took 65 % of the
    GPU sampler's device time on an H200 (bench/results/gpu/h200-2026-11-27/profile-gpu-pinned.txt).
    Relabel uses parallel scans (cumsum) and scatters only; its result is checked against
    ``torch.unique``'s numbering here and by the tests above."""
    from torch.overrides import TorchFunctionMode

    class Calls(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.names = set()

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.names.add(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    gen = torch.Generator().manual_seed(5)
    dst = torch.randperm(5000, generator=gen)[:300]
    src = torch.randint(-1, 5000, (4000,), generator=gen)
    with Calls() as calls:
        nodes, local, count = relabel.relabel_deferred(dst, src)
    assert "cummax" not in calls.names and "cumsum" in calls.names, sorted(calls.names)
    nodes = nodes[: int(count)]
    assert torch.equal(nodes[:300], dst)
    used = src >= 0
    assert torch.equal(nodes[local[used]], src[used])
    assert torch.equal(torch.sort(nodes).values, torch.unique(torch.cat([dst, src[used]])))
