"""The CUDA gather kernels run on the CPU emulator: every result equals NumPy's ``table[ids]``."""

from __future__ import annotations

import numpy as np
import pytest

from dgl_zerocopy.cuda.gather import emulator_build
from dgl_zerocopy.cuda.gather.emulator import emulate_gather

VARIANTS = ("aligned", "naive")
# bfloat16 has no NumPy dtype; its bytes behave like any 2-byte element (int16/uint16, float16).
DTYPES = ("float32", "float16", "float64", "int8", "uint8", "int16", "int32", "int64")
ROW_BYTES = (1, 2, 3, 4, 7, 8, 12, 100, 127, 128, 129, 255, 400, 512, 1000, 4096, 4099)
OFFSETS = (0, 1, 2, 3, 4, 8, 12, 16, 31, 32, 63, 64, 100, 127)
MARKER = 0xA5  # the emulator pre-fills outputs with it; tables never contain it


def make_table(num_rows: int, row_bytes: int, dtype: str, seed: int = 0) -> np.ndarray:
    """Random bytes without MARKER, so that a row the kernel never wrote cannot pass."""
    dtype = np.dtype(dtype)
    raw = np.random.default_rng(seed).integers(0, MARKER, size=num_rows * row_bytes, dtype=np.uint8)
    return raw.view(dtype).reshape(num_rows, row_bytes // dtype.itemsize)


def assert_same_bytes(actual: np.ndarray, expected: np.ndarray, context: str) -> None:
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, context
    assert actual.tobytes() == expected.tobytes(), context


def assert_gathers(table: np.ndarray, ids: np.ndarray, context: str, **launch) -> None:
    """``emulate_gather(table, ids, **launch)`` gives ``table[ids]``, byte for byte."""
    assert_same_bytes(emulate_gather(table, ids, **launch), table[ids], context)


def mixed_ids(num_rows: int, seed: int = 1) -> np.ndarray:
    """Unsorted, with duplicates and both ends of the table."""
    rng = np.random.default_rng(seed)
    return np.concatenate([[num_rows - 1, 0, 3 % num_rows], rng.integers(0, num_rows, 40), [0, num_rows - 1]])


@pytest.mark.parametrize("variant", VARIANTS)
def test_byte_rows_of_every_width_and_alignment(variant):
    for row_bytes in ROW_BYTES:
        table = make_table(23, row_bytes, "uint8", seed=row_bytes)
        ids = mixed_ids(len(table))
        for offset in OFFSETS:
            assert_gathers(table, ids, f"{variant} row_bytes={row_bytes} offset={offset}", variant=variant, base_offset=offset)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_width_and_alignment(dtype, variant):
    itemsize = np.dtype(dtype).itemsize
    for columns in (1, 2, 3, 7, 25, 100, 127, 128, 129, 513):
        table = make_table(17, columns * itemsize, dtype, seed=columns)
        ids = mixed_ids(len(table))
        # element-aligned offsets (what real tables have) and a few that are not
        for offset in sorted({0, itemsize, 16 + itemsize, 64, 120, 1, 3, 66}):
            assert_gathers(table, ids, f"{dtype} {variant} columns={columns} offset={offset}", variant=variant, base_offset=offset)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("id_dtype", [np.int32, np.int64])
def test_degenerate_id_sets(variant, id_dtype):
    table = make_table(10, 400, "float32")
    cases = {
        "none": [],
        "one": [4],
        "first and last": [0, 9],
        "duplicates": [7, 7, 7, 2, 7],
        "unsorted": [9, 3, 0, 8, 1, 5],
        "all, reversed": list(range(9, -1, -1)),
    }
    for name, ids in cases.items():
        ids = np.asarray(ids, dtype=id_dtype)
        assert_gathers(table, ids, f"{variant} {id_dtype.__name__} ids {name}", variant=variant)


@pytest.mark.parametrize("variant", VARIANTS)
def test_many_ids_grid_stride_with_capped_grid(variant):
    table = make_table(300, 40, "float32")
    ids = np.random.default_rng(2).integers(0, 300, 5000)
    for max_blocks in (None, 1, 3):
        assert_gathers(table, ids, f"{variant} max_blocks={max_blocks}", variant=variant, max_blocks=max_blocks)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("id_dtype", [np.int32, np.int64])
def test_sorted_ids_with_inverse_permutation_write_back(variant, id_dtype):
    for row_bytes, offset in [(400, 0), (400, 16), (12, 4), (129, 3)]:
        table = make_table(50, row_bytes, "uint8")
        ids = np.random.default_rng(3).integers(0, 50, 77).astype(id_dtype)
        perm = np.argsort(ids, kind="stable")
        out = emulate_gather(table, ids[perm], variant=variant, perm=perm, base_offset=offset)
        assert_same_bytes(out, table[ids], f"{variant} row_bytes={row_bytes} offset={offset}")


@pytest.mark.parametrize("variant", VARIANTS)
def test_table_shapes(variant):
    ids = np.array([2, 0, 2], dtype=np.int64)
    for table in (
        np.arange(5, dtype=np.float32),  # one element per row
        np.arange(5 * 2 * 3, dtype=np.int16).reshape(5, 2, 3),
        np.zeros((5, 0), dtype=np.float32),  # empty rows: nothing to launch
        np.ones((5, 3), dtype=np.float16)[:, ::2],  # non-contiguous input
    ):
        assert_gathers(table, ids, f"{variant} shape={table.shape}", variant=variant)


@pytest.mark.parametrize("variant", VARIANTS)
def test_trace_loads_every_useful_byte_once_inside_the_table(variant):
    table = make_table(64, 400, "float32")
    ids = np.random.default_rng(4).integers(0, 64, 100)
    for offset in (0, 16, 4):
        out, trace = emulate_gather(table, ids, variant=variant, base_offset=offset, trace=True)
        assert_same_bytes(out, table[ids], variant)
        assert trace.table_address % 128 == offset
        assert int(trace.nbytes.sum()) == trace.useful_bytes == 100 * 400
        assert np.all(trace.address % trace.nbytes == 0)  # naturally aligned loads
        assert trace.address.min() >= trace.table_address
        assert (trace.address + trace.nbytes).max() <= trace.table_address + table.nbytes
        # per row: each byte exactly once
        relative = np.sort(trace.address - trace.table_address)
        expected = np.sort((ids[:, None] * 400 + np.arange(0, 400, trace.plan.vector_bytes)[None, :]).reshape(-1))
        np.testing.assert_array_equal(relative, expected)


def test_aligned_trace_groups_one_warp_instruction_per_row_step():
    table = make_table(4, 512, "float32")
    _, trace = emulate_gather(table, np.array([1]), trace=True, threads_per_row=32)
    assert trace.plan.vector_bytes == 16 and trace.plan.threads_per_row == 32
    assert np.unique(trace.warp).tolist() == [0]
    assert np.unique(trace.slot).tolist() == [0]  # one instruction: 32 lanes x 16 B
    assert trace.address.size == 32


def test_bad_inputs_are_rejected():
    table = make_table(10, 8, "float32")
    with pytest.raises(IndexError, match="id 10"):
        emulate_gather(table, np.array([1, 10]))
    with pytest.raises(IndexError, match="id -1"):
        emulate_gather(table, np.array([-1, 2]))
    with pytest.raises(TypeError, match="int32 or int64"):
        emulate_gather(table, np.array([1.0, 2.0]))
    with pytest.raises(TypeError, match="int32 or int64"):
        emulate_gather(table, np.array([[1, 2]]))
    with pytest.raises(ValueError, match="base_offset"):
        emulate_gather(table, np.array([1]), base_offset=128)
    with pytest.raises(ValueError, match="variant"):
        emulate_gather(table, np.array([1]), variant="fast")
    with pytest.raises(ValueError, match="permutation"):
        emulate_gather(table, np.array([1, 2]), perm=np.array([0, 0]))
    with pytest.raises(ValueError, match="perm"):
        emulate_gather(table, np.array([1, 2]), perm=np.array([0]))
    with pytest.raises(TypeError, match="table"):
        emulate_gather([[1.0]], np.array([0]))


def test_library_is_built_once_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DGL_ZEROCOPY_CACHE", str(tmp_path))
    path = emulator_build.build_emulator()
    assert path.parent == tmp_path / "emulator" and path.is_file()
    mtime = path.stat().st_mtime_ns
    assert emulator_build.build_emulator() == path
    assert path.stat().st_mtime_ns == mtime
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary files left
