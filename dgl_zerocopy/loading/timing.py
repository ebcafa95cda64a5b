"""Stage timers kept out of the data path: a context manager per stage and an iterator wrapper.

Host stages are timed with the wall clock. Device stages (``stage(name, stream=s)``) are timed
with a pair of CUDA events recorded on ``s``: no synchronisation happens while the pipeline runs
(a synchronize in the worker would wait for the training step and undo the overlap). Event pairs
are read when the totals are asked for (:meth:`StageTimer.reset`, :attr:`StageTimer.totals`),
which waits for the recorded work: do that between epochs, not per batch.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import torch

T = TypeVar("T")

STAGES = ("sample", "gather", "transfer", "compute", "wait")


class StageTimer:
    """Accumulates seconds per named stage; safe to use from several threads.

    Stages timed on a background thread or a side stream overlap with the main thread, so they
    need not add up to the epoch time.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)
        self._pending: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []

    @contextmanager
    def stage(self, name: str, stream: torch.cuda.Stream | None = None) -> Iterator[None]:
        """Time the block as stage ``name``: wall time, or with ``stream`` the device time of the
        work the block queues on that stream (events recorded before and after it)."""
        if stream is None:
            start = time.perf_counter()
            try:
                yield
            finally:
                elapsed = time.perf_counter() - start
                with self._lock:
                    self._totals[name] += elapsed
                    self.counts[name] += 1
            return
        begin = torch.cuda.Event(enable_timing=True)
        begin.record(stream)
        try:
            yield
        finally:
            end = torch.cuda.Event(enable_timing=True)
            end.record(stream)
            with self._lock:
                self._pending.append((name, begin, end))
                self.counts[name] += 1

    def timed(self, iterable: Iterable[T], name: str) -> Iterator[T]:
        """Yield from ``iterable``, charging the wall time each ``next`` takes to stage ``name``."""
        iterator = iter(iterable)
        while True:
            with self.stage(name):
                try:
                    item = next(iterator)
                except StopIteration:
                    return
            yield item

    @property
    def totals(self) -> dict[str, float]:
        """Seconds per stage so far (waits for the device stages recorded so far)."""
        with self._lock:
            self._resolve()
            return dict(self._totals)

    def reset(self) -> dict[str, float]:
        """Return the totals so far and start again from zero."""
        with self._lock:
            self._resolve()
            totals, self._totals = dict(self._totals), defaultdict(float)
            self.counts = defaultdict(int)
        return totals

    def _resolve(self) -> None:
        for name, begin, end in self._pending:
            end.synchronize()
            self._totals[name] += begin.elapsed_time(end) / 1000.0  # milliseconds -> seconds
        self._pending = []
