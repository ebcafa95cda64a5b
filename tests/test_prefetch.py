"""Prefetcher lifecycle: order, errors with their traceback, shutdown within a second."""
import gc
import threading
import time
import traceback

import pytest

from dgl_zerocopy.prefetch import Prefetcher


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
