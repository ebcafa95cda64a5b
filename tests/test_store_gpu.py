"""FeatureStore on CUDA: every backend equals ``data[ids]`` on the device. Skipped without a GPU."""
import numpy as np
import pytest
import torch

from dgl_zerocopy import FeatureStore

from conftest import requires_cuda

pytestmark = [pytest.mark.gpu, requires_cuda]

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]
BACKENDS = ["zerocopy", "cpu", "gpu"]


def _table(rows, dim, dtype):
    return (torch.arange(rows * dim) % 127).reshape(rows, dim).to(dtype)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim", [1, 3, 100, 129, 602])
def test_every_backend_equals_indexing(backend, dtype, dim):
    table = _table(1000, dim, dtype)
    with FeatureStore(table, backend=backend, device="cuda") as store:
        for ids in ([], [0], [999], [5, 5, 0, 999, 17], torch.randint(0, 1000, (4096,)).tolist()):
            for id_dtype in (torch.int32, torch.int64):
                for where in ("cpu", "cuda"):
                    ids_t = torch.tensor(ids, dtype=id_dtype, device=where)
                    got = store.gather(ids_t)
                    assert got.device.type == "cuda" and got.dtype == dtype
                    torch.testing.assert_close(got.cpu(), table[ids_t.long().cpu()], rtol=0, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gather_on_a_side_stream(backend):
    table = _table(5000, 100, torch.float32)
    side = torch.cuda.Stream()
    ids = torch.randint(0, 5000, (20000,))
    with FeatureStore(table, backend=backend, device="cuda") as store:
        out = torch.empty((20000, 100), device="cuda")
        with torch.cuda.stream(side):
            store.gather(ids, out=out, stream=side)
        torch.cuda.current_stream().wait_stream(side)
        torch.testing.assert_close(out.cpu(), table[ids], rtol=0, atol=0)


def test_out_of_range_id_on_the_device():
    with FeatureStore(_table(10, 4, torch.float32), backend="zerocopy", device="cuda") as store:
        with pytest.raises(IndexError, match="id 10 at position 0"):
            store.gather(torch.tensor([10], device="cuda"))


def test_close_unregisters_and_is_idempotent():
    table = _table(100, 8, torch.float32)
    first = FeatureStore(table, backend="zerocopy", device="cuda")
    with pytest.raises(RuntimeError, match="already pinned"):
        FeatureStore(table, backend="zerocopy", device="cuda")
    first.close()
    first.close()
    second = FeatureStore(table, backend="zerocopy", device="cuda")  # registrable again: unpinned
    torch.testing.assert_close(second.gather(torch.tensor([3])).cpu(), table[[3]])
    second.close()


def test_memory_mapped_npy_is_pinned_in_place(tmp_path):
    data = np.arange(4000, dtype=np.float32).reshape(1000, 4)
    np.save(tmp_path / "f.npy", data)
    with FeatureStore(tmp_path / "f.npy", backend="zerocopy", device="cuda") as store:
        np.testing.assert_array_equal(store.gather(torch.tensor([7, 0, 999])).cpu().numpy(), data[[7, 0, 999]])


def test_ids_on_another_gpu_are_rejected():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    with FeatureStore(_table(10, 4, torch.float32), backend="zerocopy", device="cuda:0") as store:
        with pytest.raises(ValueError, match="cuda:1"):
            store.gather(torch.tensor([1], device="cuda:1"))
