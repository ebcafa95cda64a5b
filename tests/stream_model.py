"""A model of CUDA streams and events on the CPU, to check the slot ring's protocol
(dgl_zerocopy/loading/ring.py, docs/architecture.md) for every loader that uses it.

The model records, for each ring slot, when the consumer last received it (the test notes that
with :meth:`CudaModel.take`) and when its release event was last recorded. The worker may reuse a
slot (``wait_event(slot.released)``) only after a release recorded later than the slot's last
hand-over: otherwise it would overwrite features the training step may still be reading. It also
records what the ring ``record_stream``-s, so a test can check that every tensor handed over
outside a slot was recorded on the consumer's stream.
"""

from __future__ import annotations

import itertools
import threading
from contextlib import contextmanager

import torch

from dgl_zerocopy.loading import ring as ring_module

_clock = itertools.count()


class ModelEvent:
    def __init__(self, enable_timing: bool = False) -> None:
        self.recorded_at = -1  # never recorded: a wait on it does not wait

    def record(self, stream) -> None:
        self.recorded_at = next(_clock)


class ModelStream:
    def __init__(self, name: str, model: CudaModel) -> None:
        self.name, self.model = name, model

    def wait_event(self, event: ModelEvent) -> None:
        self.model.waits.append((self.name, event))
        handed = self.model.handed.get(id(event))
        if handed is not None and event.recorded_at < handed:
            self.model.violations.append(f"{self.name} reused a slot handed out at {handed} whose release was last recorded at {event.recorded_at}")

    def wait_stream(self, other) -> None:
        pass


class CudaModel:
    """Stand-ins for torch.cuda.Stream/Event/stream/current_stream, per thread as in CUDA, and for
    the ring's ``record_stream``."""

    def __init__(self) -> None:
        self.local = threading.local()
        self.waits: list = []
        self.handed: dict[int, int] = {}  # id of a slot's release event -> when its slot was last handed out
        self.violations: list[str] = []
        self.recorded: list[tuple[object, str]] = []  # (object given to ring.record_stream, stream name)
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

    def record_stream(self, obj, stream) -> None:
        self.recorded.append((obj, stream.name))

    def install(self, monkeypatch) -> CudaModel:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "Event", ModelEvent)
        monkeypatch.setattr(torch.cuda, "current_stream", self.current_stream)
        monkeypatch.setattr(torch.cuda, "stream", self.stream)
        monkeypatch.setattr(ring_module, "record_stream", self.record_stream)
        return self

    # -- what a test checks at each hand-over ---------------------------------------------------
    def take(self, ring, in_slot: list[torch.Tensor], outside: list) -> None:
        """Note a batch handed over now: each tensor of ``in_slot`` must be a view of one slot's
        buffer (that slot counts as handed out now); each tensor or object of ``outside`` must
        have been given to ``record_stream`` on the consumer's stream."""
        for tensor in in_slot:
            slots = [s for s in ring.slots if any(_storage(b) == _storage(tensor) for b in s.buffers.values())]
            assert len(slots) == 1, f"a feature tensor handed out is in {len(slots)} ring slots, not one"
            self.handed[id(slots[0].released)] = next(_clock)
        storages, objects = set(), set()
        for obj, stream in self.recorded:
            if stream == "consumer":
                _walk(obj, storages, objects)
        self.recorded.clear()  # this hand-over's records only: a freed tensor's memory may be reused
        for obj in outside:
            if isinstance(obj, torch.Tensor):
                assert _storage(obj) in storages, f"a tensor {tuple(obj.shape)} {obj.dtype} was handed over outside a slot without record_stream"
            else:
                assert id(obj) in objects, f"{type(obj).__name__} handed over without record_stream"


def _storage(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


def _walk(obj, storages: set, objects: set) -> None:
    objects.add(id(obj))
    if isinstance(obj, torch.Tensor):
        storages.add(_storage(obj))
    elif isinstance(obj, dict):
        for value in obj.values():
            _walk(value, storages, objects)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            _walk(value, storages, objects)
