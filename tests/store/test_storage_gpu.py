"""A storage-backed FeatureStore on a real GPU: what tests/store/test_storage_zerocopy.py can
only model on the CPU. Skipped without CUDA; run by ``make gpu-check`` (``pytest -m gpu``).

- the host buffer (an anonymous map) is registered with the real ``cudaHostRegister`` and read by
  the real kernels: rows equal the file's, with and without the device cache, for compressed codes;
- the driver reports the buffer as page-locked while the store is open and as ordinary memory after
  ``close()``;
- slots are given back after the gather's CUDA event: batches gathered on a side stream held back by
  a long sleep, through a buffer too small for all of them, still read their own rows.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import requires_cuda

import dgl_zerocopy
from dgl_zerocopy import FeatureStore
from dgl_zerocopy.store import StorageTier
from dgl_zerocopy.store.cache import CachePolicy
from dgl_zerocopy.store.storage.host_buffer import SLOT_BYTES

pytestmark = [pytest.mark.gpu, requires_cuda]

ROWS, DIM = 20_000, 100


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    path = tmp_path_factory.mktemp("storage-gpu") / "feat.npy"
    np.save(path, np.random.default_rng(0).standard_normal((ROWS, DIM)).astype(np.float32))
    return path


def _budget(slots: int, row_bytes: int = DIM * 4) -> int:
    return ROWS * 4 + slots * (row_bytes + SLOT_BYTES + 8)  # exactly `slots` slots under "lru"


def _page_locked(address: int) -> bool:
    from cupy.cuda import runtime

    try:
        return runtime.pointerGetAttributes(address).type == runtime.memoryTypeHost
    except runtime.CUDARuntimeError:
        return False


@pytest.mark.parametrize("cache", [False, True], ids=["no-device-cache", "device-cache"])
def test_rows_equal_the_file_and_the_buffer_is_pinned_while_open(table, cache):
    expect = np.load(table)
    kwargs = {"cache_bytes": 2000 * DIM * 4 + ROWS * 4, "cache_policy": CachePolicy(torch.randperm(ROWS))} if cache else {}
    store = FeatureStore(table, backend="zerocopy", device="cuda", storage=StorageTier(_budget(5000)), **kwargs)
    address = store._backend.buffer.rows.data_ptr()
    assert _page_locked(address)
    for _ in range(6):
        for where in ("cpu", "cuda"):
            ids = torch.randint(0, ROWS, (3000,))
            got = store.gather(ids.to(where))
            assert got.device.type == "cuda"
            assert torch.equal(got.cpu(), torch.from_numpy(expect[ids.numpy()]))
    stats = store.storage_stats()
    assert stats["evictions"] > 0 and (stats["device_hits"] > 0) == cache
    store.close()
    assert not _page_locked(address), "close() left the host buffer pinned"


@pytest.mark.parametrize("codec", ["fp16", "int8"])
def test_compressed_codes_decode_on_the_device(table, tmp_path, codec):
    compressed = dgl_zerocopy.compress(str(table), codec, out=tmp_path / codec)
    with FeatureStore(tmp_path / codec, backend="zerocopy", device="cuda", storage=StorageTier(_budget(5000, DIM * (2 if codec == "fp16" else 1)))) as store:
        for _ in range(4):
            ids = torch.randint(0, ROWS, (3000,))
            assert torch.equal(store.gather(ids).cpu(), compressed.decode(ids))


def test_queued_gathers_read_their_own_rows_through_a_small_buffer(table):
    """The side stream waits on a long sleep: every gather is queued, not run, when the next one
    needs slots. A slot given back before its gather ran would be refilled under it."""
    expect = np.load(table)
    side = torch.cuda.Stream()
    with FeatureStore(table, backend="zerocopy", device="cuda", storage=StorageTier(_budget(512), "lru")) as store:
        store.gather(torch.arange(4), stream=side)  # compiles the kernel
        torch.cuda.synchronize()
        batches = [torch.arange(i * 400, (i + 1) * 400) for i in range(6)]  # 2400 distinct rows through 512 slots
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(200_000_000)  # ~0.1-0.2 s: the gathers below are queued behind it
            results = [store.gather(ids, stream=side) for ids in batches]
        torch.cuda.synchronize()
        for ids, got in zip(batches, results, strict=True):
            assert torch.equal(got.cpu(), torch.from_numpy(expect[ids.numpy()]))
