"""Reading ahead: ``read_ahead(ids)`` returns at once, reads the
rows in the background, and keeps them reserved (never evicted) until the gather that uses them;
that gather waits only for rows still being read; rows are exact; handles release cleanly."""

from __future__ import annotations

import re
import threading

import numpy as np
import pytest
import torch

from dgl_zerocopy import FeatureStore
from dgl_zerocopy.store import StorageTier
from dgl_zerocopy.store.storage import host_buffer

ROWS, DIM = 4000, 64  # 256-byte rows


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    path = tmp_path_factory.mktemp("ahead") / "feat.npy"
    np.save(path, np.random.default_rng(0).standard_normal((ROWS, DIM)).astype(np.float32))
    return path


def _budget(slots: int) -> int:
    return ROWS * 4 + slots * (DIM * 4 + 30)


def test_read_ahead_rows_are_not_evicted_before_their_gather(table):
    """With the reservation removed, the batches gathered in between evict the rows read ahead and
    the last gather reads them again from storage (this test then fails)."""
    expect = np.load(table)
    ahead_ids = torch.arange(0, 600)
    with FeatureStore(table, backend="cpu", storage=StorageTier(_budget(1200), "lru")) as store:
        store.gather(torch.arange(3000, 3500))  # the largest gather: read ahead leaves room for one like it
        handle = store.read_ahead(ahead_ids)
        handle.wait()
        rng = np.random.default_rng(5)
        for _ in range(10):  # 10 x 500 other rows through 600 free slots: everything unreserved is evicted
            ids = torch.from_numpy(rng.integers(1000, ROWS, 500))
            assert torch.equal(store.gather(ids), torch.from_numpy(expect[ids.numpy()]))
        store.reset_storage_stats()
        assert torch.equal(store.gather(ahead_ids, read_ahead=handle), torch.from_numpy(expect[:600]))
        stats = store.storage_stats()
        assert stats["storage_rows"] == 0 and stats["host_hits"] == 600 and stats["read_ahead_hits"] == 600
        assert int(store._backend.buffer.pins.sum()) == 0  # the gather gave the reservation back


def test_gather_waits_only_for_rows_still_being_read(table, monkeypatch):
    """A read ahead blocked mid-read: the gather of its batch waits for it and reads nothing itself."""
    expect = np.load(table)
    started, go = threading.Event(), threading.Event()
    with FeatureStore(table, backend="cpu", storage=StorageTier(_budget(2000))) as store:
        reader = store._backend._reader
        real = reader.read_into

        def slow(rows, dest, slots):
            started.set()
            go.wait(10)
            real(rows, dest, slots)

        monkeypatch.setattr(reader, "read_into", slow)
        handle = store.read_ahead(torch.arange(100, 400))  # returns at once
        assert started.wait(10) and not handle.done
        monkeypatch.setattr(reader, "read_into", real)
        threading.Timer(0.2, go.set).start()
        ids = torch.arange(100, 450)  # 50 rows the read ahead does not have
        assert torch.equal(store.gather(ids, read_ahead=handle), torch.from_numpy(expect[100:450]))
        stats = store.storage_stats()
        assert stats["read_ahead_rows"] == 300 and stats["read_ahead_hits"] == 300 and stats["storage_rows"] == 50


def test_read_ahead_leaves_room_for_a_gather_and_counts_what_it_skipped(table):
    with FeatureStore(table, backend="cpu", storage=StorageTier(_budget(1000))) as store:
        store.gather(torch.arange(0, 400))
        handles = [store.read_ahead(torch.arange(s, s + 400)) for s in (1000, 1400)]
        for h in handles:
            h.wait()
        assert store.storage_stats()["read_ahead_skipped"] > 0
        store.gather(torch.arange(3000, 3400))  # still fits: read ahead kept room for it
        for h in handles:
            h.release()
            h.release()  # idempotent
        assert int(store._backend.buffer.pins.sum()) == 0


def test_unused_handles_released_by_close_and_no_thread_left(table):
    store = FeatureStore(table, backend="cpu", storage=StorageTier(_budget(1000)))
    handles = [store.read_ahead(torch.arange(s, s + 100)) for s in range(0, 1000, 100)]
    store.close()
    for h in handles:
        h.release()  # after close: nothing to give back, no error
    assert not [t.name for t in threading.enumerate() if t.name.startswith("dgl-zerocopy-")]


def test_a_failed_read_ahead_leaves_rows_to_the_gather(table, monkeypatch):
    expect = np.load(table)
    with FeatureStore(table, backend="cpu", storage=StorageTier(_budget(1000))) as store:
        reader = store._backend._reader
        real = reader.read_into
        monkeypatch.setattr(reader, "read_into", lambda *a: (_ for _ in ()).throw(OSError(5, "Input/output error")))
        handle = store.read_ahead(torch.arange(0, 100))
        handle.wait()
        monkeypatch.setattr(reader, "read_into", real)
        assert torch.equal(store.gather(torch.arange(0, 100), read_ahead=handle), torch.from_numpy(expect[:100]))
        buffer = store._backend.buffer
        assert int(buffer.pins.sum()) == 0 and not buffer._fills


def test_read_ahead_needs_a_storage_backed_store():
    with FeatureStore(torch.zeros(4, 2)) as store, pytest.raises(TypeError, match=r"storage=StorageTier\(N\)"):
        store.read_ahead(torch.arange(2))


def test_slot_bytes_constant_matches_the_bookkeeping():
    assert host_buffer.SLOT_BYTES == 8 + 4 + 4 + 1


@pytest.mark.parametrize("policy", ["static", "dynamic", "hybrid"])
def test_reads_ahead_never_leave_a_gather_without_room(table, policy):
    """Two batches read ahead of each gather, each batch most of the buffer and overlapping what is
    resident: a read ahead reserving resident rows (not only misses) must count them, or the next
    gather finds too few free slots (BufferFullError; this failed before the count)."""
    expect = np.load(table)
    rng = np.random.default_rng(7)
    graph = None
    if policy != "dynamic":
        import dgl

        graph = dgl.graph((torch.from_numpy(rng.integers(0, ROWS, 20000)), torch.from_numpy(rng.integers(0, ROWS, 20000))), num_nodes=ROWS)
    with FeatureStore(table, backend="cpu", storage=StorageTier(_budget(1300), policy), graph=graph) as store:
        pool = rng.permutation(ROWS)[:1600]  # batches drawn from a set a little larger than the buffer
        batches = [torch.from_numpy(rng.choice(pool, 1100, replace=False)) for _ in range(12)]
        handles = [store.read_ahead(b) for b in batches[:2]]
        for i, ids in enumerate(batches):
            if i + 2 < len(batches):
                handles.append(store.read_ahead(batches[i + 2]))
            assert torch.equal(store.gather(ids, read_ahead=handles[i]), torch.from_numpy(expect[ids.numpy()]))
        assert int(store._backend.buffer.pins.sum()) == 0
        assert store.storage_stats()["read_ahead_hits"] > 0


def test_read_ahead_after_close_names_the_closed_store(table):
    """It raised ``RuntimeError: cannot schedule new futures after shutdown`` (the pool's words)."""
    store = FeatureStore(table, backend="cpu", storage=StorageTier(_budget(1200)))
    store.gather(torch.arange(10))
    store.close()
    with pytest.raises(RuntimeError, match=re.escape(f"this FeatureStore over {str(table)!r} is closed; make a new one to read ahead")):
        store.read_ahead(torch.arange(10))
