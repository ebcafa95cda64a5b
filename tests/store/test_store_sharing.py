"""A FeatureStore sent to another process (torch.multiprocessing, spawn) shares its table, never copies it.

Children are spawned (as ``torch.multiprocessing.spawn`` does), report through a queue, and are
terminated when a test fails or runs out of time: no test waits on a child forever.
"""

import gc
import pickle
import queue
import re
import time
import traceback
import warnings
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from conftest import requires_cuda

from dgl_zerocopy import FeatureStore

_CTX = mp.get_context("spawn")
TIMEOUT = 90  # seconds for a group of children: starting Python and importing torch takes a few on 2 cores


class _Children:
    """``n`` spawned processes running ``target(rank, *args)``; what each returns (or its traceback)
    comes back through a queue. A context manager: no child outlives the ``with`` block."""

    def __init__(self, target, *args, n: int = 1) -> None:
        self._queue = _CTX.Queue()
        self._procs = [_CTX.Process(target=_child_main, args=(self._queue, target, rank, *args), daemon=True) for rank in range(n)]
        self._deadline = 0.0

    def __enter__(self) -> "_Children":
        self._deadline = time.monotonic() + TIMEOUT
        try:
            for proc in self._procs:
                proc.start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _check(self, what: str) -> None:
        crashed = [proc.exitcode for proc in self._procs if proc.exitcode not in (None, 0)]
        if crashed:
            pytest.fail(f"a child exited with {crashed} {what}")
        if time.monotonic() > self._deadline:
            pytest.fail(f"children did not finish within {TIMEOUT} s ({what})")

    def wait(self, event) -> None:
        """Until ``event`` is set by a child; a child that fails first fails the test with its traceback."""
        while not event.wait(0.2):
            if any(not proc.is_alive() for proc in self._procs):
                self.results()  # reports the child's error
                pytest.fail("a child exited without setting the event")
            self._check("before setting the event")

    def results(self) -> list:
        got = {}
        while len(got) < len(self._procs):
            try:
                status, rank, value = self._queue.get(timeout=0.2)
            except queue.Empty:
                self._check("before reporting")
                continue
            if status == "error":
                pytest.fail(f"child {rank} failed:\n{value}")
            got[rank] = value
        for proc in self._procs:
            proc.join(max(1.0, self._deadline - time.monotonic()))
        return [got[rank] for rank in range(len(self._procs))]

    def __exit__(self, *exc) -> None:
        for proc in self._procs:
            if proc.pid is None:
                continue  # never started
            if proc.is_alive():
                proc.terminate()
            proc.join(10)
        self._queue.close()


def _child_main(results, target, rank: int, *args) -> None:
    try:
        results.put(("ok", rank, target(rank, *args)))
    except BaseException:  # noqa: BLE001 - every failure goes back to the test, with its traceback
        results.put(("error", rank, traceback.format_exc()))


def _gather_in_child(rank: int, store: FeatureStore, ids: list) -> dict:
    report = {"arrived_unbound": store._backend is None, "repr": repr(store)}
    for name in ("int32", "int64"):
        report[name] = store.gather(torch.tensor(ids, dtype=getattr(torch, name))).numpy().copy()  # the buffer is reused
    options = store.options
    report.update(device=str(store.device), backend=store.backend, closed=store.closed, options=(options.variant, options.sort_ids, options.max_blocks))
    return report


def _mapping(address: int) -> dict:
    """The mapping of this process that holds ``address``: its path and its Rss and Pss in kB (/proc/self/smaps)."""
    found = None
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                if found is not None:
                    break
                fields = line.split()
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                if lo <= address < hi:
                    found = {"path": fields[5] if len(fields) > 5 else ""}
            elif found is not None and line.split(":")[0] in ("Rss", "Pss"):
                found[line.split(":")[0]] = int(line.split()[1])
    if found is None:
        raise LookupError(f"no mapping holds 0x{address:x}")
    return found


# -- shared memory -------------------------------------------------------------------------


@pytest.mark.slow
def test_a_shared_table_round_trips_through_spawn():
    table = torch.randn(1000, 16).share_memory_()
    store = FeatureStore(table, backend="cpu", device="cpu", variant="naive", sort_ids=True, max_blocks=3)
    ids = [3, 999, 0, 3, 512]
    with _Children(_gather_in_child, store, ids, n=2) as children:
        reports = children.results()
    for report in reports:
        assert report["arrived_unbound"] and "unbound" in report["repr"]
        np.testing.assert_array_equal(report["int32"], table[ids].numpy())
        np.testing.assert_array_equal(report["int64"], table[ids].numpy())
        assert report["device"] == "cpu" and report["backend"] == "cpu" and not report["closed"]
        assert report["options"] == ("naive", True, 3)
    assert not store.closed  # the parent's store is untouched by pickling
    torch.testing.assert_close(store.gather(torch.tensor(ids)), table[ids], rtol=0, atol=0)


def test_a_shared_table_is_sent_as_a_handle_not_a_copy():
    table = torch.randn(100, 8).share_memory_()
    store = FeatureStore(table, backend="cpu", device="cpu")
    clone = ForkingPickler.loads(ForkingPickler.dumps(store))  # in this process: torch maps the same storage
    assert clone._table.data_ptr() == table.data_ptr()
    torch.testing.assert_close(clone.gather(torch.tensor([5, 0])), table[[5, 0]], rtol=0, atol=0)


def _sees_writes(rank: int, store: FeatureStore, ready, go) -> tuple:
    before = store.gather(torch.tensor([7])).numpy().copy()
    store._table[3] = -1.0  # a write through this child's mapping of the table
    ready.set()
    if not go.wait(TIMEOUT):
        raise TimeoutError("the parent never wrote its marker row")
    return before, store.gather(torch.tensor([7])).numpy().copy()


def test_writes_on_either_side_are_seen_by_the_other():
    table = torch.zeros(10, 4).share_memory_()
    store = FeatureStore(table, backend="cpu", device="cpu")
    ready, go = _CTX.Event(), _CTX.Event()
    with _Children(_sees_writes, store, ready, go) as children:
        children.wait(ready)  # the child holds the table now
        table[7] = 42.0
        go.set()
        [(before, after)] = children.results()
    np.testing.assert_array_equal(before, np.zeros((1, 4), np.float32))
    np.testing.assert_array_equal(after, np.full((1, 4), 42.0, np.float32))
    torch.testing.assert_close(store.gather(torch.tensor([3])), torch.full((1, 4), -1.0), rtol=0, atol=0)


def _touch_and_measure(rank: int, store: FeatureStore, barrier) -> dict:
    rows = len(store)
    for start in range(0, rows, 4096):  # every row, through the store
        store.gather(torch.arange(start, min(start + 4096, rows)))
    barrier.wait(TIMEOUT)  # both children have touched every page
    measured = _mapping(store._table.data_ptr())
    barrier.wait(TIMEOUT)  # and neither unmaps before the other has measured
    return measured


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads /proc/self/smaps (Linux)")
def test_two_children_hold_the_table_once_in_host_memory():
    table = torch.empty(16384, 1024).share_memory_()  # 64 MiB
    table.fill_(1.0)  # resident in the parent too: three processes map every page
    store = FeatureStore(table, backend="cpu", device="cpu")
    barrier = _CTX.Barrier(2)  # held here until the children are done: they open its semaphore by name
    with _Children(_touch_and_measure, store, barrier, n=2) as children:
        measured = children.results()
    table_kb = table.numel() * table.element_size() // 1024
    mappers = 3  # the parent and two children
    for m in measured:
        assert m["Rss"] >= 0.95 * table_kb, f"the child did not touch the whole table: {m}"
        # A private copy would count in full (Pss == Rss); shared pages are split between their mappers.
        assert m["Pss"] == pytest.approx(m["Rss"] / mappers, rel=0.15), f"the table is not shared by {mappers} processes: {m}"


# -- file maps -----------------------------------------------------------------------------


def _npy(tmp_path: Path) -> tuple[Path, np.ndarray]:
    data = np.arange(1000 * 16, dtype=np.float32).reshape(1000, 16)
    np.save(tmp_path / "feat.npy", data)
    return tmp_path / "feat.npy", data


@pytest.mark.parametrize(
    "source, rows", [("path", slice(None)), ("mmap_r", slice(None)), ("mmap_r_slice", slice(100, 600)), ("mmap_c", slice(None)), ("mmap_r+", slice(None))]
)
def test_a_file_map_pickles_as_a_file_reference(tmp_path, source, rows):
    path, data = _npy(tmp_path)
    data = data[rows]
    given = {
        "path": lambda: path,
        "mmap_r": lambda: np.load(path, mmap_mode="r"),
        "mmap_r_slice": lambda: np.load(path, mmap_mode="r")[rows],  # its own .offset is the parent's
        "mmap_c": lambda: np.load(path, mmap_mode="c"),
        "mmap_r+": lambda: np.load(path, mmap_mode="r+"),
    }[source]()
    store = FeatureStore(given, backend="cpu", device="cpu")
    blob = pickle.dumps(store)  # plain pickle: a file reference, whatever the table's size
    assert len(blob) < 2048
    clone = pickle.loads(blob)
    assert _mapping(clone._table.data_ptr())["path"] == str(path), "the clone should map the file, not hold a copy"
    ids = torch.tensor([0, len(data) - 1, 7])
    np.testing.assert_array_equal(clone.gather(ids).numpy(), data[ids.numpy()])
    np.testing.assert_array_equal(store.gather(ids).numpy(), data[ids.numpy()])


def test_a_file_map_round_trips_through_spawn(tmp_path):
    path, data = _npy(tmp_path)
    store = FeatureStore(path, backend="cpu", device="cpu")
    ids = [999, 0, 5, 5]
    with _Children(_gather_in_child, store, ids) as children:
        [report] = children.results()
    assert report["arrived_unbound"] and not report["closed"]
    np.testing.assert_array_equal(report["int32"], data[ids])
    np.testing.assert_array_equal(report["int64"], data[ids])


# -- private memory ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.zeros(1000, 16),
        lambda: np.zeros((1000, 16), np.float32),
        lambda: torch.zeros(16, 1000).share_memory_().t(),  # shared, but the store keeps a contiguous (private) copy
    ],
    ids=["tensor", "numpy", "non-contiguous"],
)
def test_a_private_table_refuses_to_pickle_at_once(make):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "not contiguous": the store copies that one
        store = FeatureStore(make(), backend="cpu", device="cpu")
    pointer = store._table.data_ptr()
    for dumps in (pickle.dumps, ForkingPickler.dumps):
        with pytest.raises(TypeError, match=r"1000 x 16 float32, 62\.5 KiB.*private memory") as raised:
            dumps(store)
        message = str(raised.value)
        assert "FeatureStore(feat.share_memory_()" in message and "before" in message and "pinned" in message
        assert ".npy" in message and "in each process" in message
    # Nothing half-done: the table was not moved to shared memory (torch's reduction would), the store works.
    assert store._table.data_ptr() == pointer and not store._table.is_shared()
    assert not store.closed
    torch.testing.assert_close(store.gather(torch.tensor([1, 0])), torch.zeros(2, 16), rtol=0, atol=0)


def test_spawning_with_a_private_table_fails_in_the_parent():
    store = FeatureStore(torch.zeros(1000, 16), backend="cpu", device="cpu")
    process = _CTX.Process(target=_gather_in_child, args=(0, store, [0]), daemon=True)
    with pytest.raises(TypeError, match="share_memory_"):
        process.start()
    assert process.pid is None  # pickled before any child started
    torch.testing.assert_close(store.gather(torch.tensor([3])), torch.zeros(1, 16), rtol=0, atol=0)


# -- binding and closing -------------------------------------------------------------------


def test_an_unpickled_store_binds_once(tmp_path, monkeypatch):
    path, data = _npy(tmp_path)
    clone = pickle.loads(pickle.dumps(FeatureStore(path, backend="cpu", device="cpu")))
    assert clone._backend is None and "cpu (unbound)" in repr(clone)
    assert clone.shape == (1000, 16) and clone.dtype == torch.float32 and len(clone) == 1000  # known unbound
    assert clone.device == torch.device("cpu")  # binds
    backend = clone._backend
    assert backend is not None
    assert clone.bind() is clone and clone.bind("cpu") is clone and clone._backend is backend
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # so that "cuda:1" resolves without a GPU
    with pytest.raises(ValueError, match=r"bound to cpu, so it cannot bind to cuda:1"):
        clone.bind("cuda:1")
    assert clone._backend is backend


def test_closing_an_unbound_store(tmp_path):
    path, _ = _npy(tmp_path)
    store = FeatureStore(path, backend="cpu", device="cpu")
    clone = pickle.loads(pickle.dumps(store))
    clone.close()
    clone.close()
    assert clone.closed and "unbound" in repr(clone)
    for use in (lambda: clone.gather(torch.tensor([0])), clone.bind, lambda: clone.device, lambda: pickle.dumps(clone)):
        with pytest.raises(RuntimeError, match="closed"):
            use()
    assert not store.closed  # closing the clone closes nothing of the original
    other = pickle.loads(pickle.dumps(store))
    finalizer = other._finalizer
    del other
    gc.collect()
    assert not finalizer.alive


# -- CUDA (skipped without a GPU) ----------------------------------------------------------


def _bind_in_child(rank: int, store: FeatureStore, ids: list) -> dict:
    torch.cuda.set_device(torch.cuda.device_count() - 1)  # after unpickling, as in mp.spawn's workers
    report = {"arrived_unbound": store._backend is None}
    report["rows"] = store.gather(torch.tensor(ids)).cpu().numpy()
    report["device"], report["current"] = str(store.device), f"cuda:{torch.cuda.current_device()}"
    zerocopy = store.backend == "zerocopy"
    probe = zerocopy and store._table.is_shared()  # a writable table: a second registration says "already pinned"
    if zerocopy:
        report["pinned"] = store._backend._pinned.pinned
    if probe:
        try:
            FeatureStore(store._table, backend="zerocopy", device=store.device).close()
            report["registered_here"] = False
        except RuntimeError as error:
            report["registered_here"] = "already pinned" in str(error)
    store.close()
    if zerocopy:
        report["unpinned"] = not store._backend._pinned.pinned
    if probe:
        FeatureStore(store._table, backend="zerocopy", device=store.device).close()  # registrable again: unregistered
    report["closed"] = store.closed
    return report


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("backend", ["zerocopy", "cpu", "gpu"])
@pytest.mark.parametrize("source", ["shared", "npy"])
def test_a_cuda_store_binds_to_the_childs_current_device(tmp_path, backend, source):
    path, data = _npy(tmp_path)
    given = torch.from_numpy(data).share_memory_() if source == "shared" else path
    store = FeatureStore(given, backend=backend, device="cuda:0")
    ids = [999, 0, 5, 5, 123]
    with _Children(_bind_in_child, store, ids) as children:
        [report] = children.results()
    assert report["arrived_unbound"]
    np.testing.assert_array_equal(report["rows"], data[ids])
    assert report["device"] == report["current"] == f"cuda:{torch.cuda.device_count() - 1}"
    assert report["closed"]
    if backend == "zerocopy":
        assert report["pinned"] and report["unpinned"]
        if source == "shared":
            assert report["registered_here"], "the child's store should have registered the table in the child"
    np.testing.assert_array_equal(store.gather(torch.tensor(ids)).cpu().numpy(), data[ids])  # the parent's store still works
    store.close()


@pytest.mark.gpu
@requires_cuda
def test_a_bound_cuda_store_refuses_another_device():
    table = torch.zeros(100, 8).share_memory_()
    with FeatureStore(table, backend="zerocopy", device="cuda:0") as store:
        assert store.bind() is store and store.bind("cuda:0") is store and store.bind(0) is store
        with pytest.raises(ValueError, match=r"bound to cuda:0, so it cannot bind to cpu"):
            store.bind("cpu")
