"""Resident memory of a storage-backed store stays within ``StorageTier(bytes=)`` plus a few batches,
however large the file: a 96 MiB file, a 16 MiB budget (1/6 of it), 40 batches
of random rows. RSS is the process's VmRSS; the page cache is not in it, and O_DIRECT keeps the
file's pages out of it as well (checked in test_storage_errors.py)."""

from __future__ import annotations

import gc

import numpy as np
import torch

from dgl_zerocopy import FeatureStore
from dgl_zerocopy.store import StorageTier

ROWS, DIM = 65536, 384  # 1.5 KiB rows, 96 MiB
BUDGET = 16 << 20
BATCH = 1500


def _rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def test_resident_memory_stays_within_the_budget(tmp_path):
    path = tmp_path / "big.npy"
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(ROWS, DIM))
    for start in range(0, ROWS, 8192):  # written a slab at a time: the file never sits in this process
        out[start : start + 8192] = np.arange(start, min(start + 8192, ROWS), dtype=np.float32)[:, None]
    out.flush()
    del out
    gc.collect()
    rng = np.random.default_rng(0)
    result = torch.empty((BATCH, DIM))
    before = _rss()
    peak = 0
    with FeatureStore(path, backend="cpu", storage=StorageTier(BUDGET)) as store:
        for _ in range(40):
            ids = torch.from_numpy(rng.integers(0, ROWS, BATCH))
            store.gather(ids, out=result)
            assert torch.equal(result[:, 0], ids.float()) and torch.equal(result[:, -1], ids.float())
            peak = max(peak, _rss() - before)
        stats = store.storage_stats()
    batch_bytes = BATCH * DIM * 4
    # the budget, the reader threads' scratch buffers (4 x 1 MiB) and a few batches of temporaries
    assert peak <= BUDGET + 4 * (1 << 20) + 4 * batch_bytes, (peak, stats)
    assert stats["evictions"] > 0 and stats["storage_bytes"] > path.stat().st_size  # it did run past the budget
    print(f"RSS growth peak {peak / 2**20:.1f} MiB for a {path.stat().st_size / 2**20:.0f} MiB file, budget {BUDGET / 2**20:.0f} MiB; {stats}")
