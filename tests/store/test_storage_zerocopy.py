"""The zerocopy path of a storage-backed FeatureStore, run on the CPU.

``FeatureStore(path, backend="zerocopy", storage=StorageTier(N))``: the host buffer is pinned in place
and the gather kernel reads its slots. Here the CUDA runtime is the stand-in of tests/store/test_pinning.py
(it records what is registered), streams and events are stand-ins, and the kernel is the real
``kernels/gather.cu`` run by the CPU emulator (:mod:`dgl_zerocopy.cuda.gather.emulator`), reading
the buffer through the device pointer the runtime handed out. As in tests/store/test_store_zerocopy_cpu.py,
the stand-in device is the host: the backend's own tensors are on the CPU.

The device can fall behind the host (``Device.deferred``): a launch then runs only when the device
catches up (an event synchronised, or :meth:`Device.run_everything`), and reads the buffer as it is
*then*. That is what makes the release of slots after the gather's event checkable: a slot given
back at once could be evicted and refilled by the next batch before the queued kernel reads it.

What waits for a GPU (tests/store/test_storage_gpu.py, ``make gpu-check``): the real pinning of an
anonymous map, the real kernels over PCIe, real event ordering and the speed.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest
import torch
from test_pinning import FakeRuntime, use  # noqa: E402 - also skips without CuPy
from test_store_zerocopy_cpu import Device as StandInDevice
from test_store_zerocopy_cpu import install

import dgl_zerocopy
from dgl_zerocopy import FeatureStore
from dgl_zerocopy.cuda.gather.emulator import emulate_gather
from dgl_zerocopy.store import StorageTier
from dgl_zerocopy.store import feature_store as feature_store_module
from dgl_zerocopy.store.cache import CachePolicy
from dgl_zerocopy.store.storage import BufferFullError, StorageChangedError
from dgl_zerocopy.store.storage import host_buffer as host_buffer_module
from dgl_zerocopy.store.storage.tiers import StorageBackend

ROWS, DIM = 3000, 37  # 148-byte rows: rows straddle 4 KiB blocks, and the kernel's vectors are 4 bytes wide


class Event:
    """A CUDA event: passed once the device has run what was queued before it was recorded."""

    def __init__(self, device: Device) -> None:
        self.device, self.done, self.synchronized = device, True, 0

    def record(self, stream=None) -> None:
        self.done = not self.device.deferred  # an eager device has run it already

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.synchronized += 1
        if self.device.fault:
            raise RuntimeError(self.device.fault)
        if not self.done:
            self.device.run_everything()


class Device(StandInDevice):
    """The stand-in device of tests/store/test_store_zerocopy_cpu.py (its streams), with one queue of
    launches (in order, as on one stream) that runs when the device catches up, and the real
    kernel on the emulator."""

    def __init__(self) -> None:
        super().__init__()
        self.deferred = False
        self.fault: str | None = None  # what every event's synchronize raises (a kernel that faulted)
        self.queue: list = []

    def make_event(self, enable_timing: bool = False) -> Event:
        event = Event(self)
        self.events.append(event)
        return event

    def run_everything(self) -> None:
        """The device catches up: every queued launch runs, every event recorded so far passes."""
        queue, self.queue = self.queue, []
        for launch in queue:
            launch()
        for event in self.events:
            event.done = True

    def launch_gather(
        self, table_ptr, table_shape, itemsize, row_stride, ids, out, *, stream=None, variant="aligned", sort=False, max_blocks=None, cache=None, **_
    ):
        """``kernels/gather.cu`` on the emulator: ``out[j] = table[ids[j]]``, the table read through
        the device pointer (the stand-in runtime's: host address + 0x1000) when the launch runs. A test
        keeps each gather's result alive until its launch has run (on a GPU the caching allocator does)."""
        assert cache is None, "a storage-backed store assembles device-cache hits itself"
        ids = ids.numpy().copy()  # on a GPU the ids were copied to device memory at the launch
        rows, columns = int(table_shape[0]), int(np.prod(table_shape[1:]))
        self.launches.append({"table_ptr": table_ptr, "ids": ids, "stream": stream})

        def run() -> None:
            assert ((ids >= 0) & (ids < rows)).all(), f"the kernel read a slot outside the buffer of {rows} slots: {ids}"
            raw = (ctypes.c_uint8 * (rows * int(row_stride))).from_address(table_ptr - 0x1000)
            table = np.frombuffer(raw, dtype=np.uint8).reshape(rows, int(row_stride))[:, : columns * int(itemsize)]
            table = table.view(np.dtype(f"u{int(itemsize)}"))
            perm = np.argsort(ids, kind="stable") if sort else None
            got = emulate_gather(table, ids if perm is None else ids[perm], variant=variant, max_blocks=max_blocks, perm=perm)
            ctypes.memmove(out, got.ctypes.data, got.nbytes)

        if self.deferred:
            self.queue.append(run)
        else:
            run()

    def launch_decode(self, *args, **kwargs):
        raise AssertionError("a storage-backed store gathers codes and decodes them itself: the decoding kernel is not launched")


_made: list[FeatureStore] = []


@pytest.fixture
def device(monkeypatch):
    gpu = install(monkeypatch, Device())
    # The store is on cuda:0; its backend's tensors (output, device cache, decode) on the host.
    monkeypatch.setattr(feature_store_module, "StorageBackend", lambda table, device, *rest: StorageBackend(table, torch.device("cpu"), *rest))
    yield gpu
    gpu.deferred, gpu.fault = False, None
    while _made:  # a store a failed test left open is closed while the stand-ins are in place
        _made.pop().close()


def zerocopy_store(path, **kwargs) -> FeatureStore:
    store = FeatureStore(path, backend="zerocopy", device="cuda", **kwargs)
    _made.append(store)
    return store


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    path = tmp_path_factory.mktemp("storage-zerocopy") / "feat.npy"
    np.save(path, np.random.default_rng(0).standard_normal((ROWS, DIM)).astype(np.float32))
    return path


def _ranking() -> CachePolicy:
    return CachePolicy(torch.from_numpy(np.random.default_rng(1).permutation(ROWS)))


def _batches(seed: int, n: int = 8, size: int = 300):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        yield torch.from_numpy(rng.integers(0, ROWS, size))
    yield torch.empty(0, dtype=torch.int64)
    yield torch.tensor([5, 5, 5, ROWS - 1, 0, 5], dtype=torch.int32)  # duplicates, first and last rows


def _budget(slots: int, row_bytes: int = DIM * 4) -> int:
    """Bytes for exactly ``slots`` slots under ``lru`` (the slot map, and each slot's row and
    bookkeeping); a policy with less state per slot, or a static ranking, gets somewhat fewer or more."""
    return ROWS * 4 + slots * (row_bytes + host_buffer_module.SLOT_BYTES + 8)


def _pinned(device: Device) -> list[tuple[int, int]]:
    return [(ptr, entry[0]) for ptr, entry in device.runtime.registered.items()]


def _buffer(store: FeatureStore):
    return store._backend.buffer


def _assert_pinned_once(device: Device, store: FeatureStore) -> None:
    rows = _buffer(store).rows
    assert _pinned(device) == [(rows.data_ptr(), rows.numel() * rows.element_size())], "the host buffer, whole, is what is pinned"
    assert device.runtime.calls.count("hostRegister") == 1


def _assert_unpinned(device: Device) -> None:
    assert device.runtime.registered == {}, "something is still pinned"
    assert device.runtime.calls.count("hostRegister") == device.runtime.calls.count("hostUnregister")
    assert not [t for t in threading.enumerate() if t.name.startswith(("dgl-zerocopy-storage", "dgl-zerocopy-read-ahead"))]


# -- rows -------------------------------------------------------------------------------------


@pytest.mark.parametrize("cache", [False, True], ids=["no-device-cache", "device-cache"])
@pytest.mark.parametrize("policy", ["dynamic", "static", "hybrid"])
def test_rows_equal_the_file_through_the_pinned_buffer(device, table, cache, policy):
    expect = np.load(table)
    kwargs = {"cache_policy": _ranking()} if policy != "dynamic" or cache else {}
    if cache:
        kwargs["cache_bytes"] = 200 * DIM * 4 + ROWS * 4
    store = zerocopy_store(table, storage=StorageTier(_budget(800), policy), **kwargs)
    assert store.device == torch.device("cuda", 0) and store.on_storage
    _assert_pinned_once(device, store)
    pointer = _buffer(store).rows.data_ptr() + 0x1000  # the device address the stand-in runtime gave
    for ids in _batches(2):
        got = store.gather(ids)
        assert torch.equal(got, torch.from_numpy(expect[ids.long().numpy()])), f"batch of {ids.numel()} rows"
    assert device.launches and {launch["table_ptr"] for launch in device.launches} == {pointer}, "the kernel reads the pinned buffer"
    assert all(launch["ids"].max(initial=0) < _buffer(store).capacity for launch in device.launches), "the kernel gets slots, not row ids"
    stats = store.storage_stats()
    assert stats["storage_rows"] > 0 and stats["host_hits"] > 0 and stats["evictions"] > 0
    assert (stats["device_hits"] > 0) == cache
    store.close()
    _assert_unpinned(device)


@pytest.mark.parametrize("options", [{"variant": "naive"}, {"sort_ids": True}, {"max_blocks": 1}], ids=["naive", "sorted", "one-block"])
def test_kernel_options_reach_the_kernel_and_rows_stay_exact(device, table, options):
    expect = np.load(table)
    store = zerocopy_store(table, storage=StorageTier(_budget(700)), **options)
    for ids in _batches(3, n=4):
        assert torch.equal(store.gather(ids), torch.from_numpy(expect[ids.long().numpy()]))
    store.close()
    _assert_unpinned(device)


@pytest.mark.parametrize("cache", [False, True], ids=["no-device-cache", "device-cache"])
@pytest.mark.parametrize("codec,axis", [("fp16", None), ("bf16", None), ("int8", "column"), ("int8", "row")])
def test_compressed_folder_codes_are_pinned_and_decoded(device, table, tmp_path, codec, axis, cache):
    folder = tmp_path / f"feat.{codec}"
    compressed = dgl_zerocopy.compress(str(table), codec, out=folder, **({"axis": axis} if axis else {}))
    kwargs = {"cache_bytes": 200 * DIM + ROWS * 4, "cache_policy": _ranking()} if cache else {}
    store = zerocopy_store(folder, storage=StorageTier(_budget(800, DIM * 2)), **kwargs)
    assert store.compression == codec and store.dtype == torch.float32
    _assert_pinned_once(device, store)
    assert _buffer(store).rows.dtype == compressed.codec.stored_dtype, "the buffer holds the codes: the link carries them"
    for ids in _batches(4):
        assert torch.equal(store.gather(ids), compressed.decode(ids.long()))
    store.close()
    _assert_unpinned(device)


def test_read_ahead_rows_are_gathered_from_the_pinned_buffer(device, table):
    expect = np.load(table)
    store = zerocopy_store(table, storage=StorageTier(_budget(1500)))
    batches = list(_batches(5, n=6))
    ahead = store.read_ahead(batches[0])
    for i, ids in enumerate(batches):
        following = store.read_ahead(batches[i + 1]) if i + 1 < len(batches) else None
        assert torch.equal(store.gather(ids, read_ahead=ahead), torch.from_numpy(expect[ids.long().numpy()]))
        ahead = following
    stats = store.storage_stats()
    assert stats["read_ahead_rows"] > 0 and stats["read_ahead_hits"] > 0
    store.gather(torch.empty(0, dtype=torch.int64))  # an acquire: the gathers' events have all passed (an eager device)
    assert _buffer(store).pins.sum() == 0, "every read-ahead and gather reservation given back"
    store.close()
    _assert_unpinned(device)


# -- slots released after the gather's event -------------------------------------------------


def _three_batches_over_eight_slots(device: Device, table) -> tuple[np.ndarray, list[torch.Tensor], list[torch.Tensor]]:
    """Three batches of 4 new rows through a buffer of 8 slots, on a device that falls behind: the
    third needs slots the first two still have in flight."""
    store = zerocopy_store(table, storage=StorageTier(_budget(8), "lru"))
    assert _buffer(store).capacity == 8
    device.deferred = True
    batches = [torch.arange(0, 4), torch.arange(10, 14), torch.arange(20, 24)]
    results = [store.gather(ids) for ids in batches]
    device.run_everything()
    return np.load(table), batches, results


def test_slots_are_given_back_only_after_the_gathers_event(device, table):
    store = zerocopy_store(table, storage=StorageTier(_budget(8), "lru"))
    buffer = _buffer(store)
    device.deferred = True
    first = store.gather(torch.arange(0, 4))
    slots = buffer.slot_of[np.arange(4)]
    assert (buffer.pins[slots] == 1).all(), "the kernel has not run: its slots stay reserved"
    second = store.gather(torch.arange(10, 14))  # 4 free slots: no need to wait
    assert (buffer.pins[slots] == 1).all() and not any(event.synchronized for event in device.events)
    third = store.gather(torch.arange(20, 24))  # every slot in flight: it waits for the device
    assert any(event.synchronized for event in device.events) and not device.queue[:-1]
    assert (buffer.slot_of[np.arange(20, 24)] >= 0).all()
    device.run_everything()
    expect = np.load(table)
    for ids, got in zip((range(0, 4), range(10, 14), range(20, 24)), (first, second, third), strict=True):
        assert torch.equal(got, torch.from_numpy(expect[list(ids)])), "a queued gather read a slot refilled before it ran"
    last = store.gather(torch.arange(30, 31))  # the next acquire finds every event passed
    assert buffer.pins.sum() == 1, "only the last gather's slot is still reserved"
    store.close()  # runs the last kernel, which writes into `last`: kept alive as the caching allocator would
    assert torch.equal(last, torch.from_numpy(expect[30:31]))
    assert buffer.pins.sum() == 0
    _assert_unpinned(device)


def test_an_immediate_release_would_let_a_queued_gather_read_a_refilled_slot(device, table, monkeypatch):
    """The model has teeth: with ``release_after`` replaced by an immediate release the test above fails."""
    monkeypatch.setattr(host_buffer_module.HostBuffer, "release_after", lambda self, event, slots: self.release(slots))
    expect, batches, results = _three_batches_over_eight_slots(device, table)
    assert not torch.equal(results[0], torch.from_numpy(expect[batches[0].numpy()]))
    assert torch.equal(results[2], torch.from_numpy(expect[batches[2].numpy()]))


def test_with_release_after_every_queued_gather_reads_its_own_rows(device, table):
    expect, batches, results = _three_batches_over_eight_slots(device, table)
    for ids, got in zip(batches, results, strict=True):
        assert torch.equal(got, torch.from_numpy(expect[ids.numpy()]))


def test_close_waits_for_the_gathers_in_flight_before_unpinning(device, table):
    store = zerocopy_store(table, storage=StorageTier(_budget(64)))
    device.deferred = True
    got = store.gather(torch.arange(100, 140))
    assert device.queue, "the kernel is queued"
    store.close()
    assert not device.queue, "close() let the device run the queued kernel before unpinning"
    assert torch.equal(got, torch.from_numpy(np.load(table)[100:140]))
    _assert_unpinned(device)


# -- nothing left pinned after errors --------------------------------------------------------


def test_a_batch_larger_than_the_buffer_raises_and_leaves_the_store_usable(device, table):
    store = zerocopy_store(table, storage=StorageTier(_budget(16), "lru"))
    with pytest.raises(BufferFullError, match="Raise the host buffer's budget"):
        store.gather(torch.arange(0, 40))
    assert _buffer(store).pins.sum() == 0, "nothing stays reserved"
    assert torch.equal(store.gather(torch.arange(5)), torch.from_numpy(np.load(table)[:5]))
    store.close()
    _assert_unpinned(device)


def test_a_file_changed_while_open_raises_and_close_unpins(device, tmp_path):
    path = tmp_path / "feat.npy"
    np.save(path, np.ones((ROWS, DIM), dtype=np.float32))
    store = zerocopy_store(path, storage=StorageTier(_budget(100)))
    store.gather(torch.arange(10))
    np.save(path, np.zeros((ROWS, DIM), dtype=np.float32))  # rewritten in place
    with pytest.raises(StorageChangedError, match="changed"):
        store.gather(torch.arange(50, 60))
    assert _buffer(store).pins.sum() == 0 or not device.queue
    store.close()
    _assert_unpinned(device)


def test_a_failed_pin_leaves_nothing_pinned_and_no_thread(device, table, monkeypatch):
    use(monkeypatch, FakeRuntime(register_error="cudaErrorMemoryAllocation: out of memory"))
    with pytest.raises(RuntimeError, match="could not page-lock"):
        FeatureStore(table, backend="zerocopy", device="cuda", storage=StorageTier(_budget(100)))
    from dgl_zerocopy.store import pinning

    assert pinning._registered == {}
    assert not [t for t in threading.enumerate() if t.name.startswith(("dgl-zerocopy-storage", "dgl-zerocopy-read-ahead"))]


def test_an_error_in_a_with_block_unpins(device, table):
    with pytest.raises(KeyError):
        with FeatureStore(table, backend="zerocopy", device="cuda", storage=StorageTier(_budget(100))) as store:
            store.gather(torch.arange(3))
            raise KeyError("the user's own error")
    _assert_unpinned(device)


def test_a_device_fault_at_close_still_unpins_and_stops_every_thread(device, table):
    store = zerocopy_store(table, storage=StorageTier(_budget(100)))
    device.deferred = True
    queued = store.gather(torch.arange(20))  # noqa: F841 - the queued kernel's output, alive while it is queued
    device.fault = "CUDA error: an illegal memory access was encountered"
    with pytest.raises(RuntimeError, match="illegal memory access"):
        store.close()
    assert store.closed
    _assert_unpinned(device)


@pytest.fixture
def ids_on_device(monkeypatch):
    """CPU ids take the path of ids on the device (clamped there, checked later)."""
    from dgl_zerocopy.store import id_check

    monkeypatch.setattr(id_check, "checked_on_device", lambda ids: True)


def test_device_ids_out_of_range_read_the_nearest_row_and_are_reported_later(device, table, ids_on_device):
    store = zerocopy_store(table, storage=StorageTier(_budget(100)))
    got = store.gather(torch.tensor([3, ROWS, -1, 2]))
    assert torch.equal(got, torch.from_numpy(np.load(table)[[3, ROWS - 1, 0, 2]])), "clamped: nothing read outside the file"
    with pytest.raises(IndexError, match=f"id {ROWS} at position 1"):
        store.raise_deferred_errors()
    store.close()
    _assert_unpinned(device)
