"""Prefetcher lifecycle: order, errors with their traceback, shutdown within a second, and the wait
for a worker that is inside a long step."""

import gc
import logging
import threading
import time
import traceback

import pytest

from dgl_zerocopy.loading import prefetch
from dgl_zerocopy.loading.prefetch import Prefetcher, wait_stopped


def _threads():
    return [t for t in threading.enumerate() if t.name.startswith("dgl-zerocopy-prefetch")]


def test_yields_everything_in_order():
    assert list(Prefetcher(range(50), lambda x: x * x, depth=3)) == [x * x for x in range(50)]
    time.sleep(0.2)
    assert not _threads()


def test_worker_exception_reaches_consumer_with_its_traceback():
    def produce(x):
        if x == 3:
            raise KeyError("bad item 3")
        return x

    p = Prefetcher(range(10), produce, depth=2)
    got = []
    with pytest.raises(KeyError, match="bad item 3") as info:
        for x in p:
            got.append(x)
    assert got == [0, 1, 2]
    frames = "".join(traceback.format_tb(info.value.__traceback__))
    assert "in produce" in frames, "the worker's frames should be in the traceback"
    assert not p.alive


def test_close_stops_a_blocked_worker_within_a_second():
    p = Prefetcher(range(10**9), lambda x: x, depth=2)
    next(p)
    time.sleep(0.1)  # the worker is now blocked on a full queue
    start = time.perf_counter()
    p.close()
    assert time.perf_counter() - start < 1.0 and not p.alive
    p.close()  # idempotent
    with pytest.raises(StopIteration):
        next(p)


def test_garbage_collection_stops_the_worker():
    p = Prefetcher(range(10**9), lambda x: x, depth=2)
    next(p)
    thread = p._thread
    del p
    gc.collect()
    thread.join(timeout=1.0)
    assert not thread.is_alive()


def test_break_and_exception_in_the_loop_stop_the_worker():
    def loop_with_error():
        for x in Prefetcher(range(10**9), lambda x: x, depth=2):
            if x == 5:
                raise RuntimeError("training step failed")

    with pytest.raises(RuntimeError, match="training step failed"):
        loop_with_error()
    gc.collect()
    deadline = time.perf_counter() + 1.0
    while _threads() and time.perf_counter() < deadline:
        time.sleep(0.02)
    assert not _threads()


def test_depth_must_be_positive():
    with pytest.raises(ValueError, match="at least 1"):
        Prefetcher([], lambda x: x, depth=0)


def test_close_gives_up_on_a_long_step_after_join_timeout(monkeypatch):
    """A worker inside a step is not interrupted: close() waits JOIN_TIMEOUT (injectable, here
    0.05 s instead of 5 s) and goes on; the worker ends when its step does."""
    monkeypatch.setattr(prefetch, "JOIN_TIMEOUT", 0.05)
    release = threading.Event()
    p = Prefetcher(range(10), lambda x: release.wait(10) and x, depth=1)
    try:
        time.sleep(0.05)  # the worker is inside produce(0)
        start = time.perf_counter()
        p.close()
        assert time.perf_counter() - start < 1.0 and p.alive
    finally:
        release.set()
    p.thread.join(2.0)
    assert not p.alive


def test_wait_stopped_warns_after_a_while_then_waits_to_the_end(caplog):
    release = threading.Event()
    p = Prefetcher(range(10), lambda x: release.wait(10) and x, depth=1, join_timeout=0.0)
    time.sleep(0.05)
    p.close()
    assert p.alive
    threading.Timer(0.35, release.set).start()
    start = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger="dgl_zerocopy.loading.prefetch"):
        with pytest.warns(RuntimeWarning, match=r"the test's worker \(dgl-zerocopy-prefetch\) is still in its current step .* after 0.05 s"):
            wait_stopped(p.thread, "the test's worker", warn_after=0.05)
    assert not p.alive and time.perf_counter() - start >= 0.3  # it waited for the end, past the warning
    assert any("still waiting for the test's worker" in r.getMessage() for r in caplog.records)  # at 0.1 s and 0.2 s


def test_wait_stopped_is_silent_for_a_worker_that_ends_in_time(recwarn):
    p = Prefetcher(range(3), lambda x: x, depth=1)
    assert list(p) == [0, 1, 2]
    wait_stopped(p.thread, "a finished worker", warn_after=1.0)
    assert not p.alive and not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
    with pytest.raises(RuntimeError, match="cannot wait for its own thread"):
        wait_stopped(threading.current_thread(), "this thread")
