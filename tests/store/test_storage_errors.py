"""Bad input to a storage-backed store and how it reads: clear errors for a missing
or truncated file, a budget that holds no row or not one batch, a file changed while open; the file
is never written; the reads use O_DIRECT (or warn and fall back); no thread outlives close()."""

from __future__ import annotations

import errno
import os
import threading

import numpy as np
import pytest
import torch

from dgl_zerocopy import FeatureStore
from dgl_zerocopy.store import StorageTier
from dgl_zerocopy.store.storage import BufferFullError, StorageChangedError, direct_reader

ROWS, DIM = 2000, 16


@pytest.fixture
def table(tmp_path):
    path = tmp_path / "feat.npy"
    np.save(path, np.arange(ROWS * DIM, dtype=np.float32).reshape(ROWS, DIM))
    return path


def _no_storage_threads() -> bool:
    return not [t.name for t in threading.enumerate() if t.name.startswith("dgl-zerocopy-")]


def test_missing_file_and_not_a_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such feature file"):
        FeatureStore(tmp_path / "nope.npy", storage=StorageTier(1 << 20))
    with pytest.raises(TypeError, match=r"\.npy path"):
        FeatureStore(torch.zeros(3, 3), storage=StorageTier(1 << 20))
    with pytest.raises(FileNotFoundError, match="not a compressed table"):
        FeatureStore(tmp_path, storage=StorageTier(1 << 20))


def test_truncated_file_names_the_sizes(table):
    size = table.stat().st_size
    os.truncate(table, size - 100)
    with pytest.raises(ValueError, match=rf"truncated: its header says {ROWS} rows .* but the file has {size - 100} bytes"):
        FeatureStore(table, storage=StorageTier(1 << 20))
    assert _no_storage_threads()


@pytest.mark.parametrize("budget", [0, -5, 1.5, True])
def test_budget_must_be_positive_bytes(table, budget):
    with pytest.raises(ValueError, match=r"StorageTier\(bytes=\) must be a positive integer"):
        FeatureStore(table, storage=StorageTier(budget))


def test_budget_that_holds_no_row(table):
    with pytest.raises(ValueError, match=rf"holds no row: the row -> slot map of {ROWS} rows"):
        FeatureStore(table, storage=StorageTier(ROWS * 4))


def test_budget_below_one_batch_is_clear_at_the_gather_and_reserves_nothing(table):
    with FeatureStore(table, backend="cpu", storage=StorageTier(ROWS * 4 + 100 * (DIM * 4 + 30))) as store:
        with pytest.raises(BufferFullError, match=r"500 distinct rows, 500 of them to read .* Raise the host buffer's budget, StorageTier\(bytes=\)"):
            store.gather(torch.arange(500))
        assert int(store._backend.buffer.pins.sum()) == 0
        assert torch.equal(store.gather(torch.arange(50)), torch.from_numpy(np.load(table)[:50]))  # usable still


def test_policy_and_options_checked(table):
    with pytest.raises(ValueError, match=r"StorageTier\(policy=\) must be one of"):
        FeatureStore(table, storage=StorageTier(1 << 20, "mru"))
    with pytest.raises(ValueError, match="ranks rows statically: pass graph="):
        FeatureStore(table, storage=StorageTier(1 << 20, "hybrid"))
    with pytest.raises(TypeError, match="storage_options takes"):
        FeatureStore(table, host_cache_bytes=1 << 20, storage_options={"thread": 2})
    with pytest.raises(ValueError, match="backend='gpu'"):
        FeatureStore(table, backend="gpu", storage=StorageTier(1 << 20))
    with pytest.raises(ValueError, match="compress the file first"):
        FeatureStore(table, storage=StorageTier(1 << 20), compression="int8")


@pytest.mark.parametrize("change", ["rewrite", "replace", "remove"])
def test_file_changed_while_open(table, change):
    store = FeatureStore(table, backend="cpu", storage=StorageTier(1 << 16))
    store.gather(torch.arange(10))
    if change == "rewrite":
        with open(table, "r+b") as f:
            f.seek(-4, os.SEEK_END)
            f.write(b"\0\0\0\0")
        os.utime(table, ns=(1, 1))
    elif change == "replace":
        np.save(table.with_name("new.npy"), np.zeros((ROWS, DIM), np.float32))
        os.replace(table.with_name("new.npy"), table)
    else:
        os.remove(table)
    with pytest.raises(StorageChangedError, match="changed|removed"):
        store.gather(torch.arange(1000, 1100))
    assert int(store._backend.buffer.pins.sum()) == 0
    store.close()
    assert _no_storage_threads()


def test_the_file_is_never_written(table):
    before = (table.stat().st_mtime_ns, table.read_bytes())
    with FeatureStore(table, backend="cpu", storage=StorageTier(1 << 16)) as store:
        for s in range(0, ROWS, 300):
            store.read_ahead(torch.arange(s, s + 50)).release()
            store.gather(torch.arange(s, min(s + 300, ROWS)))
    assert (table.stat().st_mtime_ns, table.read_bytes()) == before
    assert _no_storage_threads()


def test_reads_use_o_direct_where_the_file_system_allows(table, monkeypatch):
    flags = []
    real = os.open
    monkeypatch.setattr(direct_reader.os, "open", lambda path, f, *a: flags.append(f) or real(path, f, *a))
    try:
        probe = real(table, os.O_RDONLY | os.O_DIRECT)
        os.close(probe)
    except OSError:
        pytest.skip("this file system refuses O_DIRECT (the fallback is tested below)")
    with FeatureStore(table, backend="cpu", storage=StorageTier(1 << 16)) as store:
        store.gather(torch.arange(100))
        assert store._backend._reader.direct
    assert flags and flags[0] & os.O_DIRECT


def test_o_direct_refused_warns_and_falls_back(table, monkeypatch):
    real = os.open

    def refuse(path, flags, *args):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(path, flags, *args)

    advice = []
    monkeypatch.setattr(direct_reader.os, "open", refuse)
    monkeypatch.setattr(direct_reader.os, "posix_fadvise", lambda fd, off, n, how: advice.append(how))
    with pytest.warns(UserWarning, match="refuses O_DIRECT"), FeatureStore(table, backend="cpu", storage=StorageTier(1 << 16)) as store:
        assert not store._backend._reader.direct
        assert torch.equal(store.gather(torch.arange(5, 105)), torch.from_numpy(np.load(table)[5:105]))
    assert advice and set(advice) == {os.POSIX_FADV_DONTNEED}


def test_pickled_store_reopens_the_file(table):
    import pickle

    with FeatureStore(table, backend="cpu", storage=StorageTier(1 << 16)) as store:
        copy = pickle.loads(pickle.dumps(store))
    with copy:
        assert torch.equal(copy.gather(torch.tensor([3, 1999])), torch.from_numpy(np.load(table)[[3, 1999]]))
        assert copy.storage_stats()["storage_rows"] == 2
