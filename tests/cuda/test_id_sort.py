"""Sorting a batch for the gather over only the bits it needs (dgl_zerocopy.cuda.gather.id_sort), and the
sorted gather it feeds: the emulated kernels write every row back to its place, equal to ``table[ids]``.

NumPy arrays stand in for CuPy's (the same calls) and CPU tensors for CUDA ones.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dgl_zerocopy.cuda.gather.emulator import emulate_decode, emulate_gather
from dgl_zerocopy.cuda.gather.id_sort import SORT_PLANS, sort_for_gather, sort_plan

KINDS = ("numpy", "torch")
#: (rows in the table, ids in the batch) that take each plan.
PLAN_SIZES = {"packed32": (1000, 300), "ids32": (2**28, 3000), "packed64": (2**40, 300)}


def as_kind(ids: np.ndarray, kind: str):
    return torch.from_numpy(ids) if kind == "torch" else ids


def to_numpy(array) -> np.ndarray:
    return array.numpy() if isinstance(array, torch.Tensor) else array


def check_sorted(ids: np.ndarray, sorted_ids, positions) -> None:
    sorted_ids, positions = to_numpy(sorted_ids), to_numpy(positions)
    assert sorted_ids.dtype == ids.dtype and positions.dtype == np.int64
    np.testing.assert_array_equal(sorted_ids, np.sort(ids))
    np.testing.assert_array_equal(np.sort(positions), np.arange(ids.size))  # a permutation
    np.testing.assert_array_equal(ids[positions], sorted_ids)


def test_the_plan_is_the_narrowest_key():
    assert sort_plan(16384, 100_000) == "packed32"  # 17 + 14 bits
    assert sort_plan(2**14, 2**17) == "packed32" and sort_plan(2**14 + 1, 2**17) == "ids32"  # 31 bits, then 32
    assert sort_plan(262144, 111_059_956) == "ids32"  # papers100M: 27 + 18 bits
    assert sort_plan(262144, 2**31) == "ids32" and sort_plan(262144, 2**31 + 1) == "packed64"
    assert sort_plan(0, 0) == sort_plan(1, 1) == "packed32"
    with pytest.raises(ValueError, match="need 64 key bits; split the batch"):
        sort_plan(2**24, 2**40)
    with pytest.raises(ValueError, match=">= 0"):
        sort_plan(-1, 10)
    for plan, (rows, n) in PLAN_SIZES.items():
        assert sort_plan(n, rows) == plan


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("plan, dtype", [(p, d) for p in SORT_PLANS for d in (np.int32, np.int64) if PLAN_SIZES[p][0] <= np.iinfo(d).max])
def test_random_and_duplicate_ids_sort_with_their_positions(kind, plan, dtype):
    rows, n = PLAN_SIZES[plan]
    rng = np.random.default_rng(len(plan) + np.dtype(dtype).itemsize)
    for ids in (
        rng.integers(0, rows, n),  # random
        rng.integers(0, 7, n) * (rows // 7),  # many duplicates
        np.full(n, rows - 1),  # all the last row
        np.concatenate([np.zeros(n // 2), np.full(n - n // 2, rows - 1)])[::-1],  # both ends, descending
    ):
        ids = ids.astype(dtype)
        check_sorted(ids, *sort_for_gather(as_kind(ids, kind), rows))


@pytest.mark.parametrize("kind", KINDS)
def test_degenerate_batches(kind):
    for ids in (np.array([], dtype=np.int64), np.array([5], dtype=np.int64), np.array([3, 3], dtype=np.int32)):
        check_sorted(ids, *sort_for_gather(as_kind(ids, kind), 10))
    torch_ids = torch.tensor([4, 1, 4, 0])
    sorted_ids, positions = sort_for_gather(torch_ids, 5)
    assert isinstance(sorted_ids, torch.Tensor) and sorted_ids.device == torch_ids.device


@pytest.mark.parametrize("kind", KINDS)
def test_bad_ids_are_refused(kind):
    with pytest.raises(TypeError, match="ids must be int32 or int64, but got float32"):
        sort_for_gather(as_kind(np.zeros(3, np.float32), kind), 10)
    with pytest.raises(ValueError, match=r"ids must be 1-D, but got shape \(2, 2\)"):
        sort_for_gather(as_kind(np.zeros((2, 2), np.int64), kind), 10)
    with pytest.raises(TypeError, match="ids must be a torch tensor, a NumPy or a CuPy array, but got list"):
        sort_for_gather([1, 2], 10)


# ---------------------------------------------------------------- the sorted gather equals table[ids]


def batches(num_rows: int, seed: int):
    rng = np.random.default_rng(seed)
    yield "random", rng.integers(0, num_rows, 333)
    yield "duplicates", rng.integers(0, 5, 333)
    yield "edges", np.array([num_rows - 1, 0, num_rows - 1, 0, 1])
    yield "one", np.array([num_rows // 2])
    yield "empty", np.array([], dtype=np.int64)


def sorted_through(ids: np.ndarray, num_rows: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
    sorted_ids, positions = sort_for_gather(as_kind(ids.astype(np.int64), kind), num_rows)
    return to_numpy(sorted_ids), to_numpy(positions)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("row_bytes", [16, 128, 400, 512, 1024])
@pytest.mark.parametrize("shape", ["default", "one window per row", "naive"])
def test_the_sorted_gather_writes_every_row_back(kind, row_bytes, shape):
    options = {"default": {}, "one window per row": {"threads_per_row": 32}, "naive": {"variant": "naive"}}[shape]
    table = np.random.default_rng(row_bytes).integers(-(2**31), 2**31, (600, row_bytes // 4), dtype=np.int32)
    for name, ids in batches(len(table), row_bytes):
        sorted_ids, positions = sorted_through(ids, len(table), kind)
        out = emulate_gather(table, sorted_ids, perm=positions, base_offset=16, **options)
        np.testing.assert_array_equal(out, table[ids], err_msg=f"{name} ids, {shape}")


@pytest.mark.parametrize("kind", KINDS)
def test_the_sorted_cached_gather_writes_every_row_back(kind):
    rng = np.random.default_rng(5)
    table = rng.integers(0, 2**31, (500, 100), dtype=np.int32)  # 400 B rows
    cached = rng.choice(len(table), 120, replace=False)
    slot_map = np.full(len(table), -1, dtype=np.int32)
    slot_map[cached] = np.arange(cached.size, dtype=np.int32)
    cache_rows = np.ascontiguousarray(table[cached])
    for name, ids in batches(len(table), 5):
        sorted_ids, positions = sorted_through(ids, len(table), kind)
        out = emulate_gather(table, sorted_ids, perm=positions, cache_rows=cache_rows, slot_map=slot_map)
        np.testing.assert_array_equal(out, table[ids], err_msg=f"{name} ids, hits and misses")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("code", ["fp16", "int8"])
def test_the_sorted_decoding_gather_writes_every_row_back(kind, code):
    rng = np.random.default_rng(7)
    values = rng.standard_normal((400, 128)).astype(np.float32)
    if code == "fp16":
        codes, pairs, expected_of = values.astype(np.float16), {}, lambda ids: codes[ids].astype(np.float32)
    else:
        codes = rng.integers(-128, 128, (400, 128), dtype=np.int8)
        scale, offset = rng.uniform(0.01, 0.1, 400).astype(np.float32), rng.standard_normal(400).astype(np.float32)
        pairs = dict(scale=scale, offset=offset, affine="row")
        expected_of = lambda ids: codes[ids].astype(np.float32) * scale[ids, None] + offset[ids, None]  # noqa: E731
    for name, ids in batches(len(codes), 7):
        sorted_ids, positions = sorted_through(ids, len(codes), kind)
        out = emulate_decode(codes, sorted_ids, code=code, perm=positions, **pairs)
        np.testing.assert_array_equal(out, expected_of(ids), err_msg=f"{name} ids, {code}")
