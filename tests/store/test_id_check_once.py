"""A gather checks its ids once, at the store's entry (:mod:`dgl_zerocopy.store.id_check`), and the
layers below it (backends, the cache's split, the kernel launcher) take them as checked.

Every check function of ``id_check`` is wrapped, in every module that took it by name; a call made
while no other one runs counts as one check (``check_ids`` calls the others: still one). The cache's
own check (``split_hits`` called without ``unchecked=True``) goes through ``check_host_ids`` too, so
a backend that checks again is counted. The zero-copy backend runs on the stand-in device of
tests/store/test_store_zerocopy_cpu.py, whose launches record whether they were told the ids are
checked. Each bad input still raises the error users see.
"""

from __future__ import annotations

import functools
import re
import sys
import threading

import numpy as np
import pytest
import torch
from test_store_zerocopy_cpu import Device, install  # noqa: E402 - also skips without CuPy

from dgl_zerocopy import FeatureStore
from dgl_zerocopy.cuda.gather import launcher
from dgl_zerocopy.store import id_check
from dgl_zerocopy.store.cache import CachePolicy
from dgl_zerocopy.store.options import DeviceCache, StorageTier

ROWS, DIM = 10, 4
CHECKS = ("check_ids", "check_ids_arg", "check_host_ids")


class Checks:
    """How many checks ran: calls of ``id_check``'s functions made outside another of them."""

    def __init__(self) -> None:
        self.count = 0
        self._local = threading.local()

    def wrap(self, function):
        @functools.wraps(function)
        def counted(*args, **kwargs):
            depth = getattr(self._local, "depth", 0)
            self.count += depth == 0
            self._local.depth = depth + 1
            try:
                return function(*args, **kwargs)
            finally:
                self._local.depth = depth

        return counted

    def take(self) -> int:
        count, self.count = self.count, 0
        return count


@pytest.fixture
def checks(monkeypatch) -> Checks:
    counter = Checks()
    for name in CHECKS:
        original = getattr(id_check, name, None)
        if original is None:
            continue
        counted = counter.wrap(original)
        for module in list(sys.modules.values()):
            if getattr(module, "__name__", "").startswith("dgl_zerocopy") and getattr(module, name, None) is original:
                monkeypatch.setattr(module, name, counted)
    monkeypatch.setattr(id_check.DeviceIdCheck, "check", counter.wrap(id_check.DeviceIdCheck.check))
    return counter


@pytest.fixture
def launches(monkeypatch) -> list[dict]:
    """The stand-in device's kernels, each launch's keyword arguments recorded."""
    gpu = install(monkeypatch, Device())
    seen: list[dict] = []
    for name in ("launch_gather", "launch_decode"):
        kernel = getattr(gpu, name)

        def recording(*args, _kernel=kernel, **kwargs):
            seen.append(kwargs)
            return _kernel(*args, **kwargs)

        monkeypatch.setattr(launcher, name, recording)
    return seen


def _table() -> torch.Tensor:
    return torch.arange(ROWS * DIM, dtype=torch.float32).reshape(ROWS, DIM)


def _ranking() -> CachePolicy:
    return CachePolicy(torch.tensor([3, 7, 0, 9, 1, 2, 4, 5, 6, 8]))


_CACHE = DeviceCache(4 * ROWS + 4 * DIM * 4, _ranking())  # the slot map and four rows

STORES = {
    "cpu": lambda path: FeatureStore(_table(), backend="cpu", device="cpu"),
    "cpu, cached": lambda path: FeatureStore(_table(), backend="cpu", device="cpu", cache=_CACHE),
    "cpu, int8": lambda path: FeatureStore(_table(), backend="cpu", device="cpu", compression="int8"),
    "cpu, fp16, cached": lambda path: FeatureStore(_table(), backend="cpu", device="cpu", compression="fp16", cache=_CACHE),
    "storage": lambda path: FeatureStore(path, backend="cpu", device="cpu", storage=StorageTier(1 << 16)),
    "storage, cached": lambda path: FeatureStore(path, backend="cpu", device="cpu", storage=StorageTier(1 << 16), cache=_CACHE),
}


@pytest.fixture
def table_file(tmp_path):
    path = tmp_path / "feat.npy"
    np.save(path, _table().numpy())
    return path


def _zerocopy(compression=None) -> FeatureStore:
    store = FeatureStore(_table(), backend="zerocopy", device="cuda", compression=compression)
    store._backend.device = torch.device("cpu")  # where its outputs are allocated: the stand-in has no device memory
    return store


def _expect(store: FeatureStore, ids) -> torch.Tensor:
    """The reference ``features[ids]``; a compressed table's codes decoded by its codec."""
    ids = torch.as_tensor(ids).long()
    if store.codec is None:
        return _table()[ids]
    return store.codec.decode(store.table[ids], ids, store.dtype)


def _bad_inputs(device: str):
    """(ids, error type, message) for each bad input, as users see them today (the whole message)."""
    rows = f"for a table of {ROWS} rows (valid: 0 to {ROWS - 1})"
    return [
        (torch.tensor([0.0, 1.0]), TypeError, "ids must be int32 or int64, but got torch.float32; convert with ids.long()"),
        ([0, 1], TypeError, "ids must be a torch.Tensor or numpy.ndarray of int32/int64, but got list"),
        (torch.zeros((1, 2), dtype=torch.int64), ValueError, "ids must be 1-D, but got shape (1, 2)"),
        (
            torch.zeros(2, dtype=torch.int64, device="meta"),
            ValueError,
            f"ids are on meta but this store gathers on {device}; move them with ids.to('{device}')",
        ),
        (torch.tensor([0, ROWS]), IndexError, f"id {ROWS} at position 1 is out of range {rows}"),
        (np.array([-1, 2], dtype=np.int32), IndexError, f"id -1 at position 0 is out of range {rows}"),
    ]


def _gathers_check_once(store: FeatureStore, checks: Checks) -> None:
    checks.take()  # what the constructor checked (its cache's rows) is not a gather's
    for ids in (torch.tensor([3, 0, 9, 3, 5]), torch.tensor([7, 2], dtype=torch.int32), np.array([1, 8, 1]), torch.empty(0, dtype=torch.int64)):
        rows = store.gather(ids)
        assert checks.take() == 1, f"{type(ids).__name__} ids: one check per gather"
        assert torch.equal(rows, _expect(store, ids))
    if store.device.type == "cpu":  # the stand-in device has no memory of its own to hold an out
        out = torch.empty((2, DIM))
        assert store.gather(torch.tensor([4, 6]), out=out) is out and checks.take() == 1
    store.gather(torch.tensor([4, 6]), unchecked=True)
    assert checks.take() == 1  # the type is still checked; the range is the caller's word


@pytest.mark.parametrize("kind", list(STORES))
def test_one_check_per_gather_on_the_cpu_backends(kind, table_file, checks):
    with STORES[kind](table_file) as store:
        _gathers_check_once(store, checks)


@pytest.mark.parametrize("kind", list(STORES))
def test_each_bad_input_raises_the_same_error_after_one_check(kind, table_file, checks):
    with STORES[kind](table_file) as store:
        checks.take()
        for ids, error, message in _bad_inputs("cpu"):
            with pytest.raises(error, match=re.escape(message)):
                store.gather(ids)
            assert checks.take() == 1, (ids, error)
        assert torch.equal(store.gather(torch.tensor([2, 9])), _expect(store, [2, 9]))  # the store still gathers


def test_a_read_ahead_checks_its_ids_once(table_file, checks):
    with STORES["storage"](table_file) as store:
        checks.take()
        handle = store.read_ahead(torch.tensor([1, 2, 3]))
        assert checks.take() == 1
        assert torch.equal(store.gather(torch.tensor([1, 2, 3]), read_ahead=handle), _table()[[1, 2, 3]])
        assert checks.take() == 1
        with pytest.raises(IndexError, match=f"id {ROWS} at position 0 is out of range"):
            store.read_ahead(torch.tensor([ROWS]))
        assert checks.take() == 1


@pytest.mark.parametrize("compression", [None, "fp16"])
def test_one_check_per_zerocopy_gather_and_the_launcher_told_so(compression, checks, launches):
    with _zerocopy(compression) as store:
        _gathers_check_once(store, checks)
        assert launches and all(kwargs.get("unchecked") is True for kwargs in launches), launches
        launches.clear()
        for ids, error, message in _bad_inputs("cuda:0"):
            with pytest.raises(error, match=re.escape(message)):
                store.gather(ids)
            assert checks.take() == 1, (ids, error)
        assert launches == []  # nothing launched for a batch refused


def test_device_ids_are_checked_once_on_the_device_and_reported_later(monkeypatch, checks, launches):
    monkeypatch.setattr(id_check, "checked_on_device", lambda ids: True)  # the stand-in's ids take the device path
    with _zerocopy() as store:
        checks.take()
        assert torch.equal(store.gather(torch.tensor([2, ROWS, 4])), _table()[[2, ROWS - 1, 4]])  # clamped
        assert checks.take() == 1 and launches[-1]["unchecked"] is True
        with pytest.raises(IndexError, match=f"id {ROWS} at position 1 is out of range for a table of {ROWS} rows .* gather #1 of device ids"):
            store.raise_deferred_errors()
