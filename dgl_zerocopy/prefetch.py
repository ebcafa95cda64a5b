"""A background worker that produces items ``depth`` ahead of the consumer, with a clean lifecycle.

The worker runs ``produce(task)`` for each task on one daemon thread and hands results over a
bounded queue. An exception in the worker reaches the consumer as the same exception object,
with the worker's traceback. :meth:`Prefetcher.close` (also at garbage collection) stops the
worker within about ``poll`` seconds, even when it is blocked on a full queue.
"""
from __future__ import annotations

import queue
import threading
import weakref
from typing import Callable, Generic, Iterable, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_DONE = object()


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class Prefetcher(Generic[R]):
    """Iterate over ``produce(task)`` for ``tasks``, computed up to ``depth`` items ahead on a thread.

    ``depth`` >= 1. The worker shares only the queue and the stop flag with this object, so the
    object can be garbage-collected (and its finalizer stop the worker) while the worker runs.
    """

    def __init__(self, tasks: Iterable[T], produce: Callable[[T], R], depth: int, name: str = "dgl-zerocopy-prefetch", poll: float = 0.05) -> None:
        if depth < 1:
            raise ValueError(f"depth must be at least 1, but got {depth}")
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=_work, args=(iter(tasks), produce, self._queue, self._stop, poll), name=name, daemon=True)
        self._finalizer = weakref.finalize(self, _shutdown, self._stop, self._queue, self._thread)
        self._thread.start()

    def __iter__(self) -> "Prefetcher[R]":
        return self

    def __next__(self) -> R:
        return self.next()

    def next(self, timeout: float | None = None) -> R:
        """The next item, as ``next(prefetcher)``; with ``timeout`` (seconds), ``TimeoutError`` when
        none is ready by then (the worker keeps running: call again to go on waiting)."""
        if not self._finalizer.alive:
            raise StopIteration
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no item from the prefetch worker within {timeout} s") from None
        if item is _DONE:
            self.close()
            raise StopIteration
        if isinstance(item, _Failure):
            self.close()
            raise item.error  # the worker's traceback stays attached to the exception object
        return item

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def close(self) -> None:
        """Stop the worker and wait for it (idempotent)."""
        self._finalizer()


def _work(tasks, produce, out: queue.Queue, stop: threading.Event, poll: float) -> None:
    def put(item) -> bool:
        while not stop.is_set():
            try:
                out.put(item, timeout=poll)
                return True
            except queue.Full:
                continue
        return False

    try:
        for task in tasks:
            if stop.is_set():
                return
            if not put(produce(task)):
                return
        put(_DONE)
    except BaseException as error:  # noqa: BLE001 - everything goes to the consumer
        put(_Failure(error))


def _shutdown(stop: threading.Event, out: queue.Queue, thread: threading.Thread) -> None:
    stop.set()
    if thread is not threading.current_thread():
        thread.join(timeout=5.0)
    while True:  # drop produced items so their buffers are released now
        try:
            out.get_nowait()
        except queue.Empty:
            break
