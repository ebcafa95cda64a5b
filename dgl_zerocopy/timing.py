"""Stage timers kept out of the data path: a context manager per stage and an iterator wrapper."""
from __future__ import annotations

import threading
import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")

STAGES = ("sample", "gather", "transfer", "compute", "wait")


class StageTimer:
    """Accumulates wall time per named stage; safe to use from several threads.

    ``sync`` is called before a stage's clock stops (e.g. ``torch.cuda.synchronize``) so that
    asynchronous device work is charged to the stage that launched it. Stages timed on a
    background thread overlap with the main thread, so they need not add up to the epoch time.
    """

    def __init__(self, sync: Callable[[], None] | None = None) -> None:
        self._sync = sync
        self._lock = threading.Lock()
        self.totals: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            if self._sync is not None:
                self._sync()
            elapsed = time.perf_counter() - start
            with self._lock:
                self.totals[name] += elapsed
                self.counts[name] += 1

    def timed(self, iterable: Iterable[T], name: str) -> Iterator[T]:
        """Yield from ``iterable``, charging the time each ``next`` takes to stage ``name``."""
        iterator = iter(iterable)
        while True:
            with self.stage(name):
                try:
                    item = next(iterator)
                except StopIteration:
                    return
            yield item

    def reset(self) -> dict[str, float]:
        """Return the totals so far and start again from zero."""
        with self._lock:
            totals, self.totals = dict(self.totals), defaultdict(float)
            self.counts = defaultdict(int)
        return totals
