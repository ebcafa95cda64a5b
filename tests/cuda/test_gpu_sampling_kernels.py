"""The sampling kernels on a real GPU (backend "cuda") against the reference, exactly: CSC pinned in
host memory (a pinned copy, and registered in place) and resident in device memory (skipped
without CUDA and CuPy)."""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)", allow_module_level=True)
cupy = pytest.importorskip("cupy", reason="needs CuPy (pip package cupy-cuda12x or cupy-cuda13x)")

from test_sampling_kernels import power_law_csc  # noqa: E402

from dgl_zerocopy.cuda.sampling import SampledCSC, plan_csc, sample_csc, sample_csc_deferred  # noqa: E402
from dgl_zerocopy.store.pinning import PinnedRange  # noqa: E402

PLACEMENTS = ["pinned", "registered", "device"]


# test_sampling_kernels' graphs with larger hubs and more isolated nodes
gpu_csc = functools.partial(power_law_csc, max_degree=300, isolated_every=13)


class Placed:
    """The CSC where the kernels read it; ``close()`` unregisters what was registered in place."""

    def __init__(self, indptr: torch.Tensor, indices: torch.Tensor, placement: str) -> None:
        self.ranges = []
        if placement == "pinned":
            self.indptr, self.indices = indptr.pin_memory(), indices.pin_memory()
        elif placement == "registered":
            self.indptr, self.indices = indptr.clone(), indices.clone()
            for t in (self.indptr, self.indices):
                self.ranges.append(PinnedRange(t.data_ptr(), t.numel() * t.element_size()))
        else:
            self.indptr, self.indices = indptr.cuda(), indices.cuda()

    def close(self) -> None:
        torch.cuda.synchronize()
        for r in self.ranges:
            r.unpin()


def assert_same(gpu: SampledCSC, cpu: SampledCSC) -> None:
    for name, x, y in zip(SampledCSC._fields, gpu, cpu):
        assert x.is_cuda and x.dtype == y.dtype, name
        assert torch.equal(x.cpu(), y), name


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("indptr_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("indices_dtype", [torch.int32, torch.int64])
def test_cuda_equals_reference_exactly(placement, indptr_dtype, indices_dtype):
    gen = np.random.default_rng(3)
    for case in range(6):
        indptr, indices = gpu_csc(int(gen.integers(1, 3000)), seed=case)
        indptr, indices = indptr.to(indptr_dtype), indices.to(indices_dtype)
        seeds = torch.from_numpy(gen.integers(0, len(indptr) - 1, int(gen.integers(0, 5000)))).to(indices_dtype)
        fanout = int(gen.choice([1, 5, 15, 300, -1]))
        replace = bool(case % 2)
        seed = int(gen.integers(0, 1 << 62))
        placed = Placed(indptr, indices, placement)
        try:
            gpu = sample_csc(placed.indptr, placed.indices, seeds.cuda(), fanout, replace=replace, seed=seed, backend="cuda")
            cpu = sample_csc(indptr, indices, seeds, fanout, replace=replace, seed=seed, backend="reference")
            assert_same(gpu, cpu)
        finally:
            placed.close()


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_hub_of_degree_one_million_on_a_side_stream(placement):
    deg = 1_000_000
    indptr = torch.tensor([0, 5, 5 + deg])
    indices = torch.randint(0, 2, (5 + deg,))
    seeds = torch.tensor([1, 0, 1, 1])
    placed = Placed(indptr, indices, placement)
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for replace in (False, True):
                gpu = sample_csc(placed.indptr, placed.indices, seeds.cuda(), 300, replace=replace, seed=8, backend="cuda")
                side.synchronize()
                assert_same(gpu, sample_csc(indptr, indices, seeds, 300, replace=replace, seed=8, backend="reference"))
    finally:
        placed.close()


def test_one_host_synchronisation_per_call():
    indptr, indices = gpu_csc(2000)
    placed = Placed(indptr, indices, "pinned")
    seeds = torch.arange(2000, device="cuda")
    sample_csc(placed.indptr, placed.indices, seeds, 10, backend="cuda")  # compile first
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sample_csc(placed.indptr, placed.indices, seeds, 10, backend="cuda")
        with warnings.catch_warnings(record=True) as none:
            warnings.simplefilter("always")
            empty = sample_csc(placed.indptr, placed.indices, seeds[:0], 10, backend="cuda")
    finally:
        torch.cuda.set_sync_debug_mode(0)
    syncs = [w for w in caught if "synchroniz" in str(w.message)]
    assert len(syncs) == 1, [str(w.message) for w in syncs]
    assert not [w for w in none if "synchroniz" in str(w.message)] and empty.indptr.tolist() == [0]


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_deferred_halves_equal_reference_exactly_without_a_sync(placement, dtype):
    """plan_csc (over a longer buffer with num_valid on the device) and sample_csc_deferred under
    torch's sync debug mode "error": no synchronisation; every output entry equal to the
    reference's (the -1 slots, the plan of the buffer, a bad seed's flag included)."""
    indptr, indices = gpu_csc(3000, dtype=dtype, seed=5)
    gen = torch.Generator().manual_seed(2)
    seeds = torch.randint(0, 3000, (700,), generator=gen).to(dtype)
    buffer = torch.cat([seeds, torch.full((300,), -7, dtype=dtype)])
    placed = Placed(indptr, indices, placement)
    try:
        ref = {}
        for fanout, replace in ((10, False), (10, True), (-1, False)):
            ref[fanout, replace] = (
                plan_csc(indptr, buffer, fanout, replace=replace, num_valid=torch.tensor([700]), backend="reference"),
                sample_csc_deferred(indptr, indices, seeds, fanout, replace=replace, seed=4, capacity=None if fanout > 0 else 99_999, backend="reference"),
            )
        gpu_seeds, gpu_buffer, count = seeds.cuda(), buffer.cuda(), torch.tensor([700], device="cuda")
        sample_csc_deferred(placed.indptr, placed.indices, gpu_seeds, 3, backend="cuda")  # compiled, outside the check
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            got = {}
            for fanout, replace in ref:
                plan = plan_csc(placed.indptr, gpu_buffer, fanout, replace=replace, num_valid=count, backend="cuda")
                capacity = None if fanout > 0 else 99_999
                out = sample_csc_deferred(
                    placed.indptr, placed.indices, gpu_seeds, fanout, replace=replace, seed=4, capacity=capacity, plan=plan.head(700), backend="cuda"
                )
                got[fanout, replace] = (plan, out)
        finally:
            torch.cuda.set_sync_debug_mode(0)
        for key, (plan, out) in got.items():
            for x, y in zip((*plan[:3], *out), (*ref[key][0][:3], *ref[key][1])):
                assert x.is_cuda and x.dtype == y.dtype and torch.equal(x.cpu(), y), key
        flagged = sample_csc_deferred(placed.indptr, placed.indices, torch.tensor([3, 3000, 7], device="cuda", dtype=dtype), 4, backend="cuda")
        assert flagged.sizes().tolist()[1] == 1
    finally:
        placed.close()


@pytest.mark.parametrize("placement", ["pinned", "device"])
def test_bad_seed_is_an_index_error_from_the_device_flag(placement):
    indptr, indices = gpu_csc(100)
    placed = Placed(indptr, indices, placement)
    for bad in (100, -3):
        with pytest.raises(IndexError, match=rf"seed node id {bad} is out of range.*100 nodes"):
            sample_csc(placed.indptr, placed.indices, torch.tensor([3, bad, 7], device="cuda"), 4, backend="cuda")


def test_pageable_or_misplaced_csc_is_refused():
    indptr, indices = gpu_csc(50)
    seeds = torch.arange(10, device="cuda")
    with pytest.raises(ValueError, match="indptr is in pageable host memory.*pin it"):
        sample_csc(indptr, indices.cuda(), seeds, 3, backend="cuda")
    with pytest.raises(ValueError, match="indices must be contiguous"):
        sample_csc(indptr.cuda(), indices.cuda()[::1].repeat(2)[::2], seeds, 3, backend="cuda")
    with pytest.raises(ValueError, match="seeds are on cpu"):
        sample_csc(indptr.cuda(), indices.cuda(), seeds.cpu(), 3, backend="cuda")
