"""The zero-copy FeatureStore's glue, run on the CPU: a stand-in CUDA runtime (tests/store/test_pinning.py),
stand-in streams and events, and a stand-in kernel that reads rows through the pinned range's
device pointer on the host and records every read.

What it shows without a GPU:
- device ids are checked on the device with no host sync on the gather path (no ``.item()``,
  ``.cpu()``, ``bool()``, ``int()`` or synchronize), never read outside the table, and their
  ``IndexError`` is raised later: at a gather that finds the check done, by
  ``raise_deferred_errors()`` or by ``close()`` (item 6);
- one event per stream, reused by every gather (item 8);
- a table that is page-locked already is read as it is, never registered nor unregistered (item 3);
- a file map is pinned so that the file is never written (item 12).

The stand-in device is the host: ids stay on the CPU, and ``checked_on_device`` is made to answer
yes for them, so they take the device ids' path. The backend's own output device is the CPU.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import threading
import warnings
from contextlib import contextmanager

import cupy  # noqa: E402
import numpy as np
import pytest
import torch
from conftest import saved_table  # noqa: E402
from test_pinning import FakeRuntime, mapping_of, use  # noqa: E402 - also skips without CuPy
from torch.overrides import TorchFunctionMode

from dgl_zerocopy import FeatureStore  # noqa: E402
from dgl_zerocopy.cuda.gather import launcher  # noqa: E402
from dgl_zerocopy.store import id_check  # noqa: E402
from dgl_zerocopy.store.backends import zerocopy as zerocopy_backend  # noqa: E402

ROWS, DIM = 10, 4


class StandInEvent:
    """A CUDA event: ``query()`` answers what the test says the device has done."""

    created = 0

    def __init__(self, enable_timing: bool = False) -> None:
        type(self).created += 1
        self.done = True  # never recorded: nothing to wait for
        self.synchronized = 0

    def record(self, stream=None) -> None:
        self.done = False  # the work before it is queued, not run, until the test says so

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.synchronized += 1
        self.done = True


class StandInStream:
    _handles = itertools.count(0x7000)

    def __init__(self, name: str) -> None:
        self.name, self.cuda_stream = name, next(self._handles)

    def wait_stream(self, other) -> None:
        pass


class Device:
    """The stand-in device: its streams, the events made, and the rows the kernel read."""

    def __init__(self) -> None:
        self.local = threading.local()
        self.default = StandInStream("default")
        self.events: list[StandInEvent] = []
        self.launches: list[dict] = []

    def current_stream(self, device=None) -> StandInStream:
        return getattr(self.local, "stream", self.default)

    @contextmanager
    def stream(self, stream):
        previous = self.current_stream()
        self.local.stream = stream if stream is not None else previous
        try:
            yield
        finally:
            self.local.stream = previous

    def make_event(self, enable_timing: bool = False) -> StandInEvent:
        event = StandInEvent(enable_timing)
        self.events.append(event)
        return event

    def run_everything(self) -> None:
        """The device catches up: every event recorded so far has completed."""
        for event in self.events:
            event.done = True

    def launch_gather(self, table_ptr, table_shape, itemsize, row_stride, ids, out, *, stream=None, **options):
        """The kernel, on the host: ``out[j] = table[ids[j]]``, reading through the device pointer that
        the stand-in runtime handed out (host address + 0x1000); refuses to read outside the table."""
        host = table_ptr - 0x1000
        row_bytes = int(itemsize) * int(np.prod(table_shape[1:]))
        with no_checks():
            rows = ids.tolist()
        self.launches.append({"table_ptr": table_ptr, "ids": rows, "stream": stream})
        for j, row in enumerate(rows):
            assert 0 <= row < table_shape[0], f"the kernel read row {row}, outside the table of {table_shape[0]} rows"
            ctypes.memmove(out + j * row_bytes, host + row * row_stride, row_bytes)

    def launch_decode(self, table_ptr, table_shape, code, row_stride, ids, out, *, out_format, stream=None, **options):
        """The decoding kernel for fp16 codes into float32 rows, on the host, as :meth:`launch_gather`."""
        assert (code, out_format) == ("fp16", "float32")
        host, columns = table_ptr - 0x1000, int(table_shape[1])
        with no_checks():
            rows = ids.tolist()
        self.launches.append({"table_ptr": table_ptr, "ids": rows, "stream": stream})
        for j, row in enumerate(rows):
            assert 0 <= row < table_shape[0], f"the kernel read row {row}, outside the table of {table_shape[0]} rows"
            codes = np.frombuffer((ctypes.c_uint16 * columns).from_address(host + row * row_stride), dtype=np.float16)
            decoded = np.ascontiguousarray(codes.astype(np.float32))
            ctypes.memmove(out + j * columns * 4, decoded.ctypes.data, columns * 4)


class SyncWatch(TorchFunctionMode):
    """Fails on every torch call that makes the host read a tensor's values (a host sync on a GPU)."""

    READS = {"item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__index__", "__float__", "nonzero", "unique", "masked_select", "synchronize"}

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        if not getattr(_checks, "off", False):
            if name in self.READS:
                self.seen.append(name)
            if name == "copy_" and not kwargs.get("non_blocking", len(args) > 2 and args[2]):
                self.seen.append("blocking copy_")
            if name == "to" and "cpu" in map(str, list(args[1:]) + list(kwargs.values())):
                self.seen.append("to(cpu)")
        return func(*args, **kwargs)


_checks = threading.local()


@contextmanager
def no_checks():
    """What the stand-in kernel reads is the device's business, not a host sync."""
    _checks.off = True
    try:
        yield
    finally:
        _checks.off = False


@pytest.fixture
def device(monkeypatch):
    gpu = install(monkeypatch, Device())
    StandInEvent.created = 0
    yield gpu
    while _made:  # a store a failed test left open is closed here, while the stand-ins are still in place
        store = _made.pop()
        try:
            store.close()
        except IndexError:
            pass


def install(monkeypatch, gpu: Device) -> Device:
    """Make ``gpu`` torch's CUDA device, its launches the gather kernels, and the stand-in runtime CuPy's."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_stream", gpu.current_stream)
    monkeypatch.setattr(torch.cuda, "stream", gpu.stream)
    monkeypatch.setattr(torch.cuda, "Event", gpu.make_event)
    monkeypatch.setattr(cupy.cuda, "Device", lambda index=None: _nothing())
    monkeypatch.setattr(launcher, "launch_gather", gpu.launch_gather)
    monkeypatch.setattr(launcher, "launch_decode", gpu.launch_decode)
    monkeypatch.setattr(zerocopy_backend, "_cupy_view", lambda cupy, tensor: tensor)
    monkeypatch.setattr(zerocopy_backend, "to_device", lambda tensor, device: tensor)
    gpu.runtime = use(monkeypatch, FakeRuntime(touch_pages=True))
    return gpu


_made: list[FeatureStore] = []


@contextmanager
def _nothing():
    yield


def zerocopy_store(data) -> FeatureStore:
    """A zero-copy store made by the real constructor on the stand-in device (``cuda:0``)."""
    store = FeatureStore(data, backend="zerocopy", device="cuda")
    store._backend.device = torch.device("cpu")  # where its outputs are allocated: the stand-in has no device memory
    _made.append(store)
    return store


@pytest.fixture
def ids_on_device(monkeypatch):
    """CPU ids take the path of ids on the device."""
    monkeypatch.setattr(id_check, "checked_on_device", lambda ids: True)


def _table():
    return torch.arange(ROWS * DIM, dtype=torch.float32).reshape(ROWS, DIM)


# -- item 6: device ids checked on the device, reported later -------------------------------------


def test_device_ids_are_checked_with_no_host_sync_and_never_read_outside_the_table(device, ids_on_device):
    table = _table()
    store = zerocopy_store(table)
    ids = torch.tensor([3, ROWS, -1, 2])
    with SyncWatch() as watch:
        rows = store.gather(ids)
    assert watch.seen == [], f"the gather of device ids read values on the host: {watch.seen}"
    assert all(event.synchronized == 0 for event in device.events)
    assert device.launches[-1]["ids"] == [3, ROWS - 1, 0, 2]  # clamped on the device: nothing outside the table
    torch.testing.assert_close(rows, table[[3, ROWS - 1, 0, 2]])
    with pytest.raises(IndexError, match=f"id {ROWS} at position 1 is out of range for a table of {ROWS} rows"):
        store.raise_deferred_errors()
    store.close()


def test_the_error_is_raised_by_a_later_gather_once_the_check_has_run(device, ids_on_device):
    store = zerocopy_store(_table())
    store.gather(torch.tensor([1, 2, ROWS + 5]))
    store.gather(torch.tensor([4]))  # the device has not run the check yet: nothing to say, no waiting
    assert all(event.synchronized == 0 for event in device.events)
    device.run_everything()
    with pytest.raises(IndexError, match=rf"id {ROWS + 5} at position 2 .* gather #1 of device ids"):
        store.gather(torch.tensor([4]))
    store.gather(torch.tensor([4]))  # reported once
    store.raise_deferred_errors()
    store.close()


def test_raise_deferred_errors_waits_and_names_the_first_bad_batch_first(device, ids_on_device):
    store = zerocopy_store(_table())
    store.gather(torch.tensor([0, 1]))
    store.gather(torch.tensor([0, 12, -3]))
    store.gather(torch.tensor([-5]))
    with pytest.raises(IndexError, match="id 12 at position 1 .* gather #2 of device ids"):
        store.raise_deferred_errors()
    assert any(event.synchronized for event in device.events)  # it waits, as asked
    with pytest.raises(IndexError, match="id -5 at position 0 .* gather #3 of device ids"):
        store.raise_deferred_errors()
    store.raise_deferred_errors()
    store.close()


def test_close_raises_an_unreported_error_but_an_exception_on_its_way_wins(device, ids_on_device):
    store = zerocopy_store(_table())
    store.gather(torch.tensor([ROWS]))
    with pytest.raises(IndexError, match=f"id {ROWS} at position 0"):
        store.close()
    assert store.closed and device.runtime.registered == {}  # unpinned before it raised
    store.close()  # idempotent, reported once

    other = zerocopy_store(_table())
    with pytest.raises(KeyError):
        with other:
            other.gather(torch.tensor([-1]))
            raise KeyError("the user's own error")
    assert other.closed


def test_checks_from_two_threads_are_each_reported_once(device, ids_on_device):
    store = zerocopy_store(_table())

    def work(bad: bool) -> None:
        with torch.cuda.stream(StandInStream("worker" if bad else "other")):
            for i in range(50):
                store.gather(torch.tensor([i % ROWS, ROWS + i if bad and i % 10 == 0 else 1]))

    threads = [threading.Thread(target=work, args=(bad,)) for bad in (True, False)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    named = []
    while True:
        try:
            store.raise_deferred_errors()
            break
        except IndexError as error:
            named.append(int(str(error).split()[1]))
    assert named == [ROWS + i for i in range(0, 50, 10)]  # each bad batch once, in its thread's order
    store.close()


def test_cpu_ids_are_still_checked_at_once(device):
    store = zerocopy_store(_table())
    with pytest.raises(IndexError, match=f"id {ROWS} at position 1"):
        store.gather(torch.tensor([0, ROWS]))
    assert device.launches == []
    store.close()


def test_unchecked_device_ids_are_not_touched(device, ids_on_device):
    store = zerocopy_store(_table())
    store.gather(torch.tensor([1, 2]), unchecked=True)
    assert device.launches[-1]["ids"] == [1, 2] and StandInEvent.created == 1  # the launch's event only
    store.close()


# -- item 8: events reused ----------------------------------------------------------------------


def test_each_stream_gets_one_event_for_all_its_gathers(device):
    table = _table()
    store = zerocopy_store(table)
    backend = store._backend
    streams = [StandInStream("a"), StandInStream("b")]
    for i in range(100):
        stream = streams[i % 2]
        with torch.cuda.stream(stream):
            rows = backend.gather(torch.tensor([i % ROWS]), None, stream)
        torch.testing.assert_close(rows, table[[i % ROWS]])
    assert StandInEvent.created == 2
    store.close()


def test_checked_gathers_reuse_their_check_events_once_read(device, ids_on_device):
    store = zerocopy_store(_table())
    for i in range(50):
        store.gather(torch.tensor([i % ROWS, (i * 7) % ROWS]))
        device.run_everything()  # the device keeps up: each check is read at the next gather
    store.raise_deferred_errors()
    assert StandInEvent.created <= 3, f"{StandInEvent.created} events for 50 gathers"
    store.close()


# -- item 3: a table page-locked already ---------------------------------------------------------


def test_a_page_locked_table_is_read_as_it_is(device):
    table = _table()
    nbytes = table.numel() * table.element_size()
    device.runtime.page_locked.append((table.data_ptr(), nbytes))  # as tensor.pin_memory() leaves it
    store = zerocopy_store(table)
    rows = store.gather(torch.tensor([7, 0]))
    torch.testing.assert_close(rows, table[[7, 0]])
    assert device.launches[-1]["table_ptr"] == table.data_ptr() + 0x1000  # the runtime's device address
    store.close()
    assert "hostRegister" not in device.runtime.calls and "hostUnregister" not in device.runtime.calls
    assert device.runtime.page_locked == [(table.data_ptr(), nbytes)]


# -- item 12: a file map is never written --------------------------------------------------------


@pytest.mark.parametrize("supported", [1, 0], ids=["read-only-supported", "read-only-unsupported"])
@pytest.mark.parametrize("source", ["path", "r", "r+", "c", "compressed"])
def test_pin_gather_close_leave_the_file_as_it_was(tmp_path, device, source, supported):
    data = np.arange(1024 * 12, dtype=np.float32).reshape(1024, 12)
    table, path, want = saved_table(tmp_path, data, source)
    before = path.read_bytes()
    os.utime(path, ns=(10**18, 10**18))  # far from now: any update shows, whatever the clock's resolution
    device.runtime._read_only = supported
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the copy-on-write warning (tests/store/test_pinning.py checks it)
        store = zerocopy_store(table)
    pinned_at, entry = next(iter(device.runtime.registered.items()))
    assert mapping_of(pinned_at)[1] == str(path)
    if source != "c":  # a shared map: pinned read-only, or a private map of it pinned
        assert entry[1] & 0x08 if supported else mapping_of(pinned_at)[0].endswith("p")
    ids = torch.tensor([5, 0, 1023, 77])
    torch.testing.assert_close(store.gather(ids), want[ids])
    store.close()
    del store
    assert path.read_bytes() == before
    assert os.stat(path).st_mtime_ns == 10**18, f"{source}: pinning wrote to the file"
