import threading
import time

from dgl_zerocopy.timing import StageTimer


def test_stage_accumulates_and_reset_clears():
    timer = StageTimer()
    for _ in range(2):
        with timer.stage("a"):
            time.sleep(0.01)
    totals = timer.reset()
    assert totals["a"] >= 0.02
    assert timer.reset() == {}


def test_timed_charges_each_next_and_yields_everything():
    def slow():
        for i in range(3):
            time.sleep(0.01)
            yield i

    timer = StageTimer()
    assert list(timer.timed(slow(), "sample")) == [0, 1, 2]
    assert timer.totals["sample"] >= 0.03


def test_sync_runs_before_the_clock_stops():
    calls = []
    timer = StageTimer(sync=lambda: calls.append(1))
    with timer.stage("x"):
        pass
    assert calls == [1]


def test_threads_add_up():
    timer = StageTimer()

    def work():
        for _ in range(100):
            with timer.stage("t"):
                pass

    threads = [threading.Thread(target=work) for _ in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert timer.counts["t"] == 400 and timer.totals["t"] > 0
