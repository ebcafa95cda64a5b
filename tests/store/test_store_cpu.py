"""FeatureStore on the cpu backend (and its input checks), always equal to ``data[ids]``."""

import gc

import numpy as np
import pytest
import torch

from dgl_zerocopy import FeatureStore

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]


def _table(rows=50, dim=7, dtype=torch.float32):
    return (torch.arange(rows * dim) % 120).reshape(rows, dim).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("id_dtype", [torch.int32, torch.int64], ids=str)
def test_gather_equals_indexing(dtype, id_dtype):
    table = _table(dtype=dtype)
    store = FeatureStore(table, backend="cpu", device="cpu")
    for ids in ([], [0], [49], [3, 3, 0, 49, 7, 3], list(range(49, -1, -1))):
        ids = torch.tensor(ids, dtype=id_dtype)
        got = store.gather(ids)
        assert got.dtype == dtype and got.device.type == "cpu"
        torch.testing.assert_close(got, table[ids.long()], rtol=0, atol=0)


def test_numpy_ids_and_data():
    data = np.random.default_rng(0).standard_normal((20, 3)).astype(np.float32)
    store = FeatureStore(data, backend="cpu", device="cpu")
    ids = np.array([5, 1, 19])
    np.testing.assert_array_equal(store.gather(ids).numpy(), data[ids])
    assert store.shape == (20, 3) and store.dtype == torch.float32 and store.nbytes == data.nbytes


def test_npy_file_is_memory_mapped(tmp_path):
    data = np.arange(60, dtype=np.float16).reshape(20, 3)
    np.save(tmp_path / "f.npy", data)
    store = FeatureStore(tmp_path / "f.npy", backend="cpu", device="cpu")
    np.testing.assert_array_equal(store.gather(torch.tensor([2, 0])).numpy(), data[[2, 0]])
    assert _mapped_file(store._table.data_ptr()) == str(tmp_path / "f.npy"), "the table should be a file mapping, not a copy"


def _mapped_file(address: int) -> str:
    """The file backing ``address`` in this process, from /proc/self/maps ('' if anonymous)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            if lo <= address < hi:
                return fields[5] if len(fields) > 5 else ""
    return ""


def test_reused_buffer_and_out():
    table = _table()
    store = FeatureStore(table, backend="cpu", device="cpu")
    first = store.gather(torch.tensor([1, 2, 3]))
    second = store.gather(torch.tensor([4, 5]))
    assert first.data_ptr() == second.data_ptr(), "the store should reuse one buffer"
    out = torch.empty(2, 7)
    assert store.gather(torch.tensor([9, 8]), out=out).data_ptr() == out.data_ptr()
    torch.testing.assert_close(out, table[[9, 8]])


@pytest.mark.parametrize("bad", [-1, 50, 1000])
def test_out_of_range_id_raises_index_error_naming_it(bad):
    store = FeatureStore(_table(), backend="cpu", device="cpu")
    with pytest.raises(IndexError, match=rf"id {bad} at position 1 .* 50 rows"):
        store.gather(torch.tensor([0, bad, 2]))


def test_unchecked_skips_the_check_for_valid_ids():
    store = FeatureStore(_table(), backend="cpu", device="cpu")
    torch.testing.assert_close(store.gather(torch.tensor([4, 0]), unchecked=True), _table()[[4, 0]])


@pytest.mark.parametrize("ids", [torch.tensor([0.0, 1.0]), torch.tensor([True, False]), [0, 1]])
def test_wrong_id_types_raise_type_error(ids):
    with pytest.raises(TypeError, match="int32 or int64|torch.Tensor"):
        FeatureStore(_table(), backend="cpu", device="cpu").gather(ids)


def test_two_dimensional_ids_are_rejected():
    with pytest.raises(ValueError, match="1-D"):
        FeatureStore(_table(), backend="cpu", device="cpu").gather(torch.zeros(2, 2, dtype=torch.int64))


@pytest.mark.parametrize("out", [torch.empty(3, 7), torch.empty(2, 7, dtype=torch.float64), torch.empty(7, 2).t()])
def test_bad_out_raises_value_error(out):
    with pytest.raises(ValueError, match="out must be"):
        FeatureStore(_table(), backend="cpu", device="cpu").gather(torch.tensor([1, 2]), out=out)


@pytest.mark.parametrize("data", [torch.zeros(5), torch.zeros(2, 2, 2), np.zeros(3)])
def test_non_2d_data_is_rejected(data):
    with pytest.raises(ValueError, match="2-D"):
        FeatureStore(data, backend="cpu", device="cpu")


def test_unsupported_dtype_and_type():
    with pytest.raises(TypeError, match="not supported"):
        FeatureStore(torch.zeros(2, 2, dtype=torch.bool), backend="cpu", device="cpu")
    with pytest.raises(TypeError, match="numpy.ndarray"):
        FeatureStore([[1.0]], backend="cpu", device="cpu")


def test_non_contiguous_data_is_copied_with_a_warning():
    table = _table().t()
    with pytest.warns(UserWarning, match="not contiguous"):
        store = FeatureStore(table, backend="cpu", device="cpu")
    torch.testing.assert_close(store.gather(torch.tensor([1, 0])), table[[1, 0]])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without CUDA")
@pytest.mark.parametrize("backend", ["zerocopy", "gpu"])
def test_gpu_backends_without_cuda_name_the_cpu_backend(backend):
    with pytest.raises(RuntimeError, match="backend='cpu'"):
        FeatureStore(_table(), backend=backend)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without CUDA")
def test_auto_is_cpu_without_cuda():
    store = FeatureStore(_table())
    assert store.backend == "cpu" and store.device == torch.device("cpu")


def test_unknown_backend_names_the_choices():
    with pytest.raises(ValueError, match="'zerocopy'"):
        FeatureStore(_table(), backend="fast")


def test_close_is_idempotent_and_blocks_gather():
    with FeatureStore(_table(), backend="cpu", device="cpu") as store:
        store.gather(torch.tensor([1]))
    assert store.closed
    store.close()
    with pytest.raises(RuntimeError, match="closed"):
        store.gather(torch.tensor([1]))


def test_garbage_collection_closes():
    store = FeatureStore(_table(), backend="cpu", device="cpu")
    finalizer = store._finalizer
    del store
    gc.collect()
    assert not finalizer.alive


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"variant": "fast"}, ValueError, r"variant must be one of \('aligned', 'naive'\), but got 'fast'"),
        ({"max_blocks": 0}, ValueError, "max_blocks must be a positive integer or None"),
        ({"max_blocks": 2.5}, ValueError, "max_blocks must be a positive integer or None"),
        ({"sort_ids": "yes"}, TypeError, "sort_ids must be True, False or 'auto'"),
    ],
)
def test_bad_kernel_options_are_named(kwargs, error, match):
    with pytest.raises(error, match=match):
        FeatureStore(_table(), backend="cpu", device="cpu", **kwargs)


def test_kernel_options_are_kept_and_ignored_by_the_cpu_backend():
    store = FeatureStore(_table(), backend="cpu", device="cpu", variant="naive", sort_ids=True, max_blocks=4)
    assert (store.options.variant, store.options.sort_ids, store.options.max_blocks) == ("naive", True, 4)
    torch.testing.assert_close(store.gather(torch.tensor([3, 1])), _table()[[3, 1]])
