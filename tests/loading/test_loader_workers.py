"""Sampling processes (``num_workers > 0``) and task sources stop when an epoch ends by an error,
by ``break`` or by ``close()``, at once: not at the next garbage collection, and not only once the
caught exception is dropped.

The garbage collector is off in these tests (the ``no_gc`` fixture), so that a reference cycle
cannot be freed by chance in the middle of a test and hide the fault.
"""

from __future__ import annotations

import gc
import threading
import time
import weakref

import pytest
import torch

from dgl_zerocopy import FeatureStore
from dgl_zerocopy.loading.loader import DataLoader
from dgl_zerocopy.loading.prefetch import Prefetcher
from dgl_zerocopy.loading.timing import StageTimer
from dgl_zerocopy.loading.workers import sampled_batches

#: Seconds within which the processes must be gone (torch joins each for up to 5 s when one hangs).
STOP_WITHIN = 15.0


@pytest.fixture
def no_gc():
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect()


class Boom(Exception):
    """An exception class of its own: instances can be weakly referenced (ValueError's cannot)."""


# -- the prefetch worker (threads only: fast) ---------------------------------------------------


def _fail(task):
    raise Boom(f"task {task}")


def test_prefetcher_failure_is_freed_without_the_garbage_collector(no_gc):
    prefetcher = Prefetcher(range(3), _fail, depth=2)
    with pytest.raises(Boom) as caught:
        next(prefetcher)
    error = weakref.ref(caught.value)
    del caught  # pytest's record of it
    assert error() is None, "nothing holds the worker's exception once the consumer drops it (no reference cycle)"


@pytest.mark.parametrize("end", ["done", "error", "close"])
def test_the_worker_closes_its_tasks_when_it_stops(no_gc, end):
    closed = threading.Event()

    def tasks():
        try:
            yield from range(3 if end == "done" else 100)
        finally:
            closed.set()

    prefetcher = Prefetcher(tasks(), _fail if end == "error" else (lambda task: task), depth=1)
    kept = []  # the consumer keeps the exception: the task source must be closed all the same
    try:
        for _ in prefetcher:
            if end == "close":
                prefetcher.close()
    except Boom as error:
        kept.append(error)
    assert closed.wait(5.0), f"the worker closed its task iterator when it stopped ({end})"
    assert (end == "error") == bool(kept)


class _Failing(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int):
        raise Boom(f"item {i}")


def test_an_error_from_torchs_iterator_keeps_none_of_its_frames_locals():
    """torch's frames in the traceback hold its iterator (and its processes, when there are some):
    their locals are cleared; the traceback still names them."""
    workers = torch.utils.data.DataLoader(_Failing(), batch_size=None)
    with pytest.raises(Boom) as caught:
        next(sampled_batches(workers, StageTimer()))
    frames, tb = [], caught.value.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    torch_frames = [f for f in frames if "/torch/" in f.f_code.co_filename]
    assert torch_frames, "the traceback still shows where torch raised"
    assert all(not f.f_locals for f in torch_frames), [(f.f_code.co_name, sorted(f.f_locals)) for f in torch_frames]


# -- the DataLoader's sampling processes (about a second each) ------------------------------------


def _children() -> set[int]:
    import psutil

    return {p.pid for p in psutil.Process().children(recursive=True)}


def _wait_gone(pids: set[int], within: float = STOP_WITHIN) -> set[int]:
    """The pids of ``pids`` still running (not zombies) after up to ``within`` seconds."""
    import psutil

    deadline = time.monotonic() + within
    while True:
        alive = {p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE}
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


@pytest.fixture(scope="module")
def graph():
    dgl = pytest.importorskip("dgl")
    return dgl.rand_graph(2000, 20000)


class _SamplerFailingAt:
    """DGL's full-neighbour sampler that raises on seeds from ``bad`` on (in the sampling process)."""

    def __init__(self, bad: int) -> None:
        import dgl

        self.inner, self.bad = dgl.dataloading.MultiLayerFullNeighborSampler(1), bad

    def sample(self, g, seeds):
        if int(seeds.min()) >= self.bad:
            raise Boom(f"seeds from {self.bad} on")
        return self.inner.sample(g, seeds)


def _loader(graph, sampler=None, **kw):
    import dgl

    store = FeatureStore(torch.randn(graph.num_nodes(), 8), device="cpu")
    sampler = sampler or dgl.dataloading.MultiLayerFullNeighborSampler(1)
    loader = DataLoader(graph, torch.arange(graph.num_nodes()), sampler, batch_size=100, features={"feat": store}, num_workers=2, timeout=60, **kw)
    return loader, store


def _started(before: set[int]) -> set[int]:
    started = _children() - before
    assert len(started) >= 2, "the loader runs two sampling processes"
    return started


@pytest.mark.parametrize("prefetch", [2, 0])
def test_workers_stop_when_the_store_is_closed_mid_epoch(no_gc, graph, prefetch):
    before = _children()
    loader, store = _loader(graph, prefetch=prefetch)
    kept, started = [], set()
    try:
        for _ in loader:
            started = _started(before)
            store.close()
    except RuntimeError as error:
        kept.append(error)  # kept on purpose: its traceback must not keep the processes
    try:
        assert kept and "closed" in str(kept[0])
        assert not _wait_gone(started), "the sampling processes stop when the error is raised"
    finally:
        loader.close()


@pytest.mark.slow
def test_workers_stop_when_a_sampling_process_fails(no_gc, graph):
    before = _children()
    loader, _ = _loader(graph, _SamplerFailingAt(1000))
    kept, started = [], set()
    try:
        for _ in loader:
            started = started or _started(before)
    except Boom as error:
        kept.append(error)
    try:
        assert kept and "Caught Boom in DataLoader worker process" in str(kept[0]) and "seeds from 1000 on" in str(kept[0])
        assert not _wait_gone(started), "the sampling processes stop when the error is raised"
    finally:
        loader.close()


@pytest.mark.parametrize("persistent", [False, True])
def test_break_and_close(no_gc, graph, persistent):
    before = _children()
    loader, _ = _loader(graph, persistent_workers=persistent)
    try:
        for _batch in loader:
            started = _started(before)
            break
        del _batch  # not kept: the next epoch reuses its buffers
        if persistent:
            assert _wait_gone(started, within=0.5) == started, "persistent processes outlive the epoch"
        else:
            assert not _wait_gone(started), "processes of an epoch left by break stop"
        loader.close()
        assert not _wait_gone(started), "close() stops the sampling processes, persistent ones too"
        assert sum(1 for _ in loader) == len(loader), "the loader iterates again after close(), with new processes"
    finally:
        loader.close()
