import threading
import time

import pytest
import torch
from conftest import requires_cuda

from dgl_zerocopy.loading import timing
from dgl_zerocopy.loading.timing import StageTimer


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


class FakeEvent:
    """Stands in for torch.cuda.Event on the CPU: records what the timer does with it."""

    log: list = []

    def __init__(self, enable_timing=False):
        assert enable_timing, "elapsed_time needs timing events"
        self.stamp = None

    def record(self, stream):
        self.stamp = stream.now
        FakeEvent.log.append(("record", stream.name))

    def synchronize(self):
        FakeEvent.log.append(("synchronize",))

    def elapsed_time(self, end):
        return (end.stamp - self.stamp) * 1000.0


class FakeStream:
    def __init__(self, name):
        self.name, self.now = name, 0.0


def test_device_stages_use_events_and_wait_only_when_read(monkeypatch):
    monkeypatch.setattr(timing.torch.cuda, "Event", FakeEvent)
    FakeEvent.log = []
    side = FakeStream("side")
    timer = StageTimer()
    for seconds in (0.25, 0.5):
        with timer.stage("gather", stream=side):
            side.now += seconds  # the work the block queues on the stream
    assert ("synchronize",) not in FakeEvent.log, "a device stage must not wait while the pipeline runs"
    assert FakeEvent.log == [("record", "side")] * 4
    assert timer.counts["gather"] == 2
    assert timer.reset() == {"gather": 0.75}
    assert FakeEvent.log.count(("synchronize",)) == 2
    assert timer.reset() == {}


@pytest.mark.gpu
@requires_cuda
def test_device_stage_measures_the_stream_not_the_host():
    timer = StageTimer()
    side = torch.cuda.Stream()
    start = time.perf_counter()
    with timer.stage("gather", stream=side):
        with torch.cuda.stream(side):
            torch.cuda._sleep(200_000_000)  # queued: the host does not wait for it
    host = time.perf_counter() - start
    device = timer.reset()["gather"]
    assert device > 10 * host and device > 0.01


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
