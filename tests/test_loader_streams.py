"""The loader's stream protocol (docs/architecture.md), checked on the CPU against a model of CUDA
streams and events, and on a GPU for real.

The model records, for each ring slot, when the consumer last received it and when its release
event was last recorded. The worker may reuse a slot (``wait_event(slot.released)``) only after
a release recorded later than the slot's last handover: otherwise it would overwrite features
the training step may still be reading.
"""
from __future__ import annotations

import itertools
import threading
from contextlib import contextmanager

import pytest
import torch

dgl = pytest.importorskip("dgl")

from dgl_zerocopy import FeatureStore, loader as loader_module  # noqa: E402
from dgl_zerocopy.loader import DataLoader  # noqa: E402

from conftest import requires_cuda  # noqa: E402

_clock = itertools.count()


class ModelEvent:
    def __init__(self, enable_timing: bool = False) -> None:
        self.recorded_at = -1  # never recorded: a wait on it does not wait

    def record(self, stream) -> None:
        self.recorded_at = next(_clock)


class ModelStream:
    def __init__(self, name: str, model: "CudaModel") -> None:
        self.name, self.model = name, model

    def wait_event(self, event: ModelEvent) -> None:
        self.model.waits.append((self.name, event))
        handed = self.model.handed.get(id(event))
        if handed is not None and event.recorded_at < handed:
            self.model.violations.append(f"{self.name} reused a slot handed out at {handed} whose release was last recorded at {event.recorded_at}")

    def wait_stream(self, other) -> None:
        pass


class CudaModel:
    """Stand-ins for torch.cuda.Stream/Event/stream/current_stream, per thread as in CUDA."""

    def __init__(self) -> None:
        self.local = threading.local()
        self.waits: list = []
        self.handed: dict[int, int] = {}  # id of a slot's release event -> when its slot was last handed out
        self.violations: list[str] = []
        self.default = ModelStream("consumer", self)

    def current_stream(self, device=None) -> ModelStream:
        return getattr(self.local, "stream", self.default)

    @contextmanager
    def stream(self, stream):
        previous = self.current_stream()
        self.local.stream = stream
        try:
            yield
        finally:
            self.local.stream = previous


@pytest.fixture
def model(monkeypatch):
    cuda = CudaModel()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "Event", ModelEvent)
    monkeypatch.setattr(torch.cuda, "current_stream", cuda.current_stream)
    monkeypatch.setattr(torch.cuda, "stream", cuda.stream)
    return cuda


def _loader(small_dataset, model, prefetch=2):
    graph = small_dataset.to_dgl()
    store = FeatureStore(torch.from_numpy(small_dataset.features), backend="cpu", device="cpu")
    loader = DataLoader(graph, torch.from_numpy(small_dataset.train_idx), dgl.dataloading.NeighborSampler([4, 2]),
                        features={"feat": store}, labels={"label": torch.from_numpy(small_dataset.labels)},
                        device="cpu", batch_size=20, prefetch=prefetch, seed=0)
    loader._side = ModelStream("side", model)  # what a CUDA device gets: the worker's own stream
    return loader


def _take(iterator, loader, model, n=None):
    """Take ``n`` batches (all when None), noting when each slot was handed out."""
    for count in itertools.count():
        if n is not None and count == n:
            return
        try:
            next(iterator)
        except StopIteration:
            return
        model.handed[id(iterator._held.released)] = next(_clock)


def test_worker_reuses_a_slot_only_after_its_release(small_dataset, model):
    loader = _loader(small_dataset, model)
    iterator = iter(loader)
    _take(iterator, loader, model, 10)
    iterator.close()
    assert model.violations == []
    slot_waits = [stream for stream, event in model.waits if any(event is slot.released for slot in loader._ring)]
    assert len(slot_waits) >= 10 and set(slot_waits) == {"side"}


@pytest.mark.parametrize("leave", ["break", "close", "end"])
def test_a_new_epoch_waits_for_the_slot_the_last_one_held(small_dataset, model, leave):
    loader = _loader(small_dataset, model)
    iterator = iter(loader)
    _take(iterator, loader, model, None if leave == "end" else 3)
    if leave == "close":
        loader.close()
    del iterator  # for "break": the iterator is dropped, nothing calls close()
    second = iter(loader)
    _take(second, loader, model, len(loader._ring) + 2)
    second.close()
    assert model.violations == []


def test_everything_handed_over_outside_a_slot_is_recorded_on_the_consumer_stream(small_dataset, model, monkeypatch):
    recorded = []
    monkeypatch.setattr(loader_module, "_record_stream", lambda obj, stream: recorded.append((obj, stream.name)))
    loader = _loader(small_dataset, model)
    batches = 0
    for input_nodes, output_nodes, blocks in loader:
        handed_input, handed_output, dst, handed_blocks = recorded[-1][0]
        assert recorded[-1][1] == "consumer"
        assert handed_input is input_nodes and handed_output is output_nodes
        assert handed_blocks is blocks and dst["label"] is blocks[-1].dstdata["label"]
        batches += 1
    assert len(recorded) == batches == len(loader)


def test_record_stream_reaches_every_cuda_tensor_and_skips_host_ones():
    seen = []

    class Tensorish:  # a DeviceBlock or a DGL graph on a GPU
        device = torch.device("cuda", 0)

        def record_stream(self, stream):
            seen.append(("block", stream))

    class HostGraph:  # DGL raises for a CPU graph: it must not be asked
        device = torch.device("cpu")

        def record_stream(self, stream):
            raise AssertionError("record_stream on a CPU graph")

    loader_module._record_stream(({"label": torch.zeros(3)}, [Tensorish(), HostGraph(), (Tensorish(),)]), "s")
    assert seen == [("block", "s"), ("block", "s")]


# -- on a GPU -------------------------------------------------------------------------------------

@pytest.mark.gpu
@requires_cuda
def test_features_held_past_a_break_are_not_overwritten_by_the_next_epoch(small_dataset):
    from dgl_zerocopy.loader import dgl_has_cuda

    graph = small_dataset.to_dgl()
    features = torch.from_numpy(small_dataset.features)
    blocks_kind = "dgl" if dgl_has_cuda() else "device"
    loader = DataLoader(graph, torch.from_numpy(small_dataset.train_idx), dgl.dataloading.NeighborSampler([4, 2]),
                        features={"feat": features}, labels={"label": torch.from_numpy(small_dataset.labels)},
                        device="cuda", batch_size=20, prefetch=2, seed=0, blocks=blocks_kind)
    for _ in range(3):
        for input_nodes, output_nodes, blocks in loader:
            torch.cuda._sleep(100_000_000)  # the step is still running when the next epoch starts
            kept = blocks[0].srcdata["feat"].clone()  # queued behind the sleep
            labels = blocks[-1].dstdata["label"].clone()
            break
        for _ in zip(range(6), loader):  # the next epoch's worker refills every slot meanwhile
            pass
        torch.testing.assert_close(kept.cpu(), features[input_nodes], rtol=0, atol=0)
        torch.testing.assert_close(labels.cpu(), torch.from_numpy(small_dataset.labels)[output_nodes], rtol=0, atol=0)
    loader.close()
