"""FeatureStore on CUDA: every backend equals ``data[ids]`` on the device. Skipped without a GPU."""

import numpy as np
import pytest
import torch
from conftest import requires_cuda, saved_table

from dgl_zerocopy import FeatureStore

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


@pytest.mark.parametrize("backend", BACKENDS)
def test_out_of_range_ids_on_the_device_are_reported_and_never_read_outside_the_table(backend):
    # The table is the middle of a larger tensor whose rows around it hold a sentinel: a read outside
    # the table would bring it into the output (or fault).
    big = torch.full((30, 64), -7.0)
    big[10:20] = torch.arange(10 * 64, dtype=torch.float32).reshape(10, 64)
    table = big[10:20]
    store = FeatureStore(table, backend=backend, device="cuda")
    ids = torch.tensor([3, 10, -1, 2, 11], device="cuda")
    if backend == "cpu":  # it reads the ids on the host anyway: it raises at once
        with pytest.raises(IndexError, match="id 10 at position 1"):
            store.gather(ids)
        store.close()
        return
    rows = store.gather(ids).cpu()
    assert (rows != -7.0).all(), "a row outside the table was read"
    torch.testing.assert_close(rows, table[[3, 9, 0, 2, 9]], rtol=0, atol=0)  # the nearest valid rows
    with pytest.raises(IndexError, match="id 10 at position 1 is out of range for a table of 10 rows"):
        store.raise_deferred_errors()
    store.raise_deferred_errors()  # reported once
    store.gather(torch.tensor([12], device="cuda"))
    torch.cuda.synchronize()
    with pytest.raises(IndexError, match="id 12 at position 0"):  # the next gather finds the check done
        store.gather(torch.tensor([0], device="cuda"))
    store.gather(torch.tensor([-4], dtype=torch.int32, device="cuda"))
    with pytest.raises(IndexError, match="id -4 at position 0"):
        store.close()
    assert store.closed


@pytest.mark.parametrize("backend", ["zerocopy", "gpu"])
def test_checking_device_ids_does_not_make_the_host_wait(backend):
    # The caller's stream is busy; a gather of device ids on a side stream (which waits for it) must
    # return at once: a check that read the ids back would wait for the whole sleep.
    table = _table(1000, 16, torch.float32)
    side = torch.cuda.Stream()
    with FeatureStore(table, backend=backend, device="cuda") as store:
        ids = torch.randint(0, 1000, (5000,), device="cuda")
        store.gather(ids, stream=side)  # first: compiles the kernel, allocates the check's buffers
        torch.cuda.synchronize()
        torch.cuda._sleep(1_000_000_000)  # about 0.5-1 s on the caller's stream
        store.gather(ids, stream=side)
        returned_early = not torch.cuda.current_stream().query()
        torch.cuda.synchronize()
        assert returned_early, "the gather of device ids waited for the caller's stream"


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


@pytest.mark.parametrize("options", [{"variant": "naive"}, {"sort_ids": True}, {"max_blocks": 1}, {"sort_ids": True, "max_blocks": 3}])
def test_kernel_options_give_the_same_rows(options):
    table = _table(3000, 129, torch.float32)
    ids = torch.randint(0, 3000, (5000,))
    with FeatureStore(table, backend="zerocopy", device="cuda", **options) as store:
        torch.testing.assert_close(store.gather(ids).cpu(), table[ids], rtol=0, atol=0)
        torch.testing.assert_close(store.gather(ids.cuda().int()).cpu(), table[ids], rtol=0, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_device_ids_made_on_the_callers_stream_are_waited_for(backend):
    # The ids are written on the caller's stream after a long kernel; a gather on a side stream that
    # did not wait for them would read stale ids.
    table = _table(4096, 64, torch.float32)
    side = torch.cuda.Stream()
    with FeatureStore(table, backend=backend, device="cuda") as store:
        for _ in range(5):
            ids = torch.zeros(100_000, dtype=torch.int64, device="cuda")
            torch.cuda._sleep(5_000_000)  # keep the caller's stream busy
            ids.copy_(torch.randint(0, 4096, (100_000,)).pin_memory(), non_blocking=True)
            want = ids.cpu()  # on the caller's stream: after the copy
            got = store.gather(ids, stream=side)  # out=None: allocated on `side`, recorded on the caller's stream
            torch.cuda.current_stream().wait_stream(side)
            torch.testing.assert_close(got.cpu(), table[want], rtol=0, atol=0)


def test_close_waits_for_gathers_in_flight():
    table = _table(100_000, 256, torch.float32)
    side = torch.cuda.Stream()
    store = FeatureStore(table, backend="zerocopy", device="cuda")
    out = torch.empty((500_000, 256), device="cuda")
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # the gather queued behind this has not started when close() runs
    ids = torch.randint(0, 100_000, (500_000,))
    store.gather(ids, out=out, stream=side)
    store.close()  # must not unpin while the kernel is queued: it would read unregistered memory
    assert side.query(), "close() returned before the queued gather ran"
    torch.testing.assert_close(out.cpu(), table[ids], rtol=0, atol=0)


def test_read_only_memory_map_is_pinned_read_only_or_copy_on_write(tmp_path):
    from dgl_zerocopy.store.pinning import read_only_register_supported

    data = np.arange(40_000, dtype=np.float32).reshape(10_000, 4)
    np.save(tmp_path / "f.npy", data)
    array = np.load(tmp_path / "f.npy", mmap_mode="r")
    if read_only_register_supported(0):
        store = FeatureStore(array, backend="zerocopy", device="cuda")
    else:
        with pytest.warns(UserWarning, match="copy-on-write"):
            store = FeatureStore(array, backend="zerocopy", device="cuda")
    with store:
        ids = torch.randint(0, 10_000, (777,))
        np.testing.assert_array_equal(store.gather(ids).cpu().numpy(), data[ids.numpy()])
    np.testing.assert_array_equal(np.load(tmp_path / "f.npy"), data)


def test_a_failed_store_leaves_the_table_registrable(monkeypatch):
    from dgl_zerocopy.store import pinning

    table = _table(100, 8, torch.float32)
    real = pinning._runtime()

    class Failing:
        def __getattr__(self, name):
            return getattr(real, name)

        def pointerGetAttributes(self, ptr):
            raise real.CUDARuntimeError(1)

    monkeypatch.setattr(pinning, "_runtime", lambda: Failing())
    with pytest.raises(real.CUDARuntimeError):
        FeatureStore(table, backend="zerocopy", device="cuda")
    monkeypatch.undo()
    with FeatureStore(table, backend="zerocopy", device="cuda") as store:  # would say "already registered"
        torch.testing.assert_close(store.gather(torch.tensor([3])).cpu(), table[[3]])


# -- page-locked tables, files never written ------------------------


def test_a_table_pinned_by_torch_is_read_as_it_is():
    table = _table(1000, 33, torch.float32).pin_memory()
    ids = torch.randint(0, 1000, (500,))
    first = FeatureStore(table, backend="zerocopy", device="cuda")
    second = FeatureStore(table, backend="zerocopy", device="cuda")  # neither registers it: both may read it
    for store in (first, second):
        torch.testing.assert_close(store.gather(ids).cpu(), table[ids], rtol=0, atol=0)
        torch.testing.assert_close(store.gather(ids.cuda()).cpu(), table[ids], rtol=0, atol=0)
    first.close()  # unregisters nothing: the second store still reads pinned pages
    torch.testing.assert_close(second.gather(ids).cpu(), table[ids], rtol=0, atol=0)
    second.close()
    assert table.is_pinned()
    torch.testing.assert_close(table.to("cuda", non_blocking=True).cpu(), table, rtol=0, atol=0)


def test_a_table_in_cuda_host_alloc_memory_is_read_as_it_is():
    import cupy

    rows, dim = 1000, 16
    memory = cupy.cuda.alloc_pinned_memory(rows * dim * 4)  # cudaHostAlloc, through CuPy's pinned pool
    array = np.frombuffer(memory, dtype=np.float32, count=rows * dim).reshape(rows, dim)
    array[:] = np.arange(rows * dim, dtype=np.float32).reshape(rows, dim)
    ids = torch.randint(0, rows, (777,))
    with FeatureStore(array, backend="zerocopy", device="cuda") as store:
        np.testing.assert_array_equal(store.gather(ids).cpu().numpy(), array[ids.numpy()])
    runtime = cupy.cuda.runtime
    assert runtime.pointerGetAttributes(array.ctypes.data).type == runtime.memoryTypeHost  # still pinned


@pytest.mark.parametrize("source", ["path", "r", "r+", "c", "compressed"])
def test_pin_gather_close_leave_a_mapped_file_as_it_was(tmp_path, source):
    import gc
    import os
    import warnings

    data = np.arange(4096 * 64, dtype=np.float32).reshape(4096, 64) / 8  # 1 MiB: 256 pages; within fp16's range (the compressed case)
    table, path, want = saved_table(tmp_path, data, source)
    before = path.read_bytes()
    os.utime(path, ns=(10**18, 10**18))  # far from now: any update shows, whatever the clock's resolution
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the copy-on-write warning where the GPU cannot pin read-only memory
        store = FeatureStore(table, backend="zerocopy", device="cuda")
    ids = torch.randint(0, 4096, (2000,))
    torch.testing.assert_close(store.gather(ids).cpu(), want[ids], rtol=0, atol=0)
    torch.testing.assert_close(store.gather(ids.cuda()).cpu(), want[ids], rtol=0, atol=0)
    store.close()
    del store
    gc.collect()
    os.sync()  # dirty pages, if any, reach the file now
    assert path.read_bytes() == before
    assert os.stat(path).st_mtime_ns == 10**18, f"{source}: pinning wrote to the file"
