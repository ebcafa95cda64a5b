"""A background worker that produces items ``depth`` ahead of the consumer, with a clean lifecycle.

The worker runs ``produce(task)`` for each task on one daemon thread and hands results over a
bounded queue. An exception in the worker reaches the consumer as the same exception object,
with the worker's traceback, and holds nothing that holds it back (no reference cycle: the frames
of its traceback are freed when the consumer drops it, with no wait for the garbage collector).
The worker closes its task iterator (``tasks.close()``, where it has one: a generator) when it
stops, whether at the end, on an error or when asked to, so a task source that owns resources (a
generator over a torch DataLoader's sampling processes) releases them then, and not when the
worker's frame is freed, which an exception's traceback can put off. :meth:`Prefetcher.close` (also at garbage collection) stops the
worker within about ``poll`` seconds when it is blocked on a full queue; a worker inside a step
(``produce`` or the next task) is never interrupted: it stops when that step ends. ``close`` waits
for that up to ``join_timeout`` seconds and goes on; whoever must not run beside the old worker
(a new epoch that reuses its buffers) waits with :func:`wait_stopped`, which says when it waits long.
A consumer waiting in :meth:`Prefetcher.next` when another thread closes the worker wakes within
``poll`` seconds with StopIteration (nothing more would come).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

log = logging.getLogger(__name__)

#: Seconds :meth:`Prefetcher.close` waits for the worker to end its step before it goes on.
JOIN_TIMEOUT = 5.0
#: Seconds :func:`wait_stopped` waits before it warns (it then goes on waiting).
STOP_WARN_AFTER = 10.0

_DONE = object()


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class Prefetcher(Generic[R]):
    """Iterate over ``produce(task)`` for ``tasks``, computed up to ``depth`` items ahead on a thread.

    ``depth`` >= 1. The worker shares only the queue and the stop flag with this object, so the
    object can be garbage-collected (and its finalizer stop the worker) while the worker runs.
    ``join_timeout``: seconds :meth:`close` waits for the worker (default :data:`JOIN_TIMEOUT`).
    """

    def __init__(
        self,
        tasks: Iterable[T],
        produce: Callable[[T], R],
        depth: int,
        name: str = "dgl-zerocopy-prefetch",
        poll: float = 0.05,
        join_timeout: float | None = None,
    ) -> None:
        if depth < 1:
            raise ValueError(f"depth must be at least 1, but got {depth}")
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._poll = poll
        self._thread = threading.Thread(target=_work, args=(iter(tasks), produce, self._queue, self._stop, poll), name=name, daemon=True)
        self._finalizer = weakref.finalize(self, _shutdown, self._stop, self._queue, self._thread, join_timeout)
        self._thread.start()

    def __iter__(self) -> Prefetcher[R]:
        return self

    def __next__(self) -> R:
        return self.next()

    def next(self, timeout: float | None = None) -> R:
        """The next item, as ``next(prefetcher)``; with ``timeout`` (seconds), ``TimeoutError`` when
        none is ready by then (the worker keeps running: call again to go on waiting).
        ``StopIteration`` once :meth:`close` was called, also when another thread calls it while
        this one waits (it wakes within ``poll`` seconds)."""
        item = self._take(timeout)
        if item is _DONE:
            self.close()
            raise StopIteration
        if isinstance(item, _Failure):
            self.close()
            error = item.error  # the worker's traceback stays attached to the exception object
            del item
            try:
                raise error
            finally:
                # This frame goes into the traceback: a local that held the error would make a
                # cycle (error -> traceback -> frame -> error) that only the garbage collector
                # frees, and with it everything the worker's frames hold (its task source).
                del error
        return item

    def _take(self, timeout: float | None):
        """The next queued item, waiting at most ``timeout`` seconds (None: until one comes), in
        waits of ``poll`` seconds: a close from another thread (whose shutdown drops what is
        queued and ends the worker, so that nothing more would come) ends the wait."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._stop.is_set():  # closed, here or on another thread: nothing more comes
                raise StopIteration
            wait = self._poll if deadline is None else min(self._poll, max(deadline - time.monotonic(), 0.0))
            try:
                item = self._queue.get(timeout=wait)
            except queue.Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"no item from the prefetch worker within {timeout} s") from None
                continue
            if self._stop.is_set():  # closed while it was taken: dropped, as close() drops the rest
                del item
                raise StopIteration
            return item

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def thread(self) -> threading.Thread:
        """The worker thread (to wait for its end with :func:`wait_stopped` once this object is gone)."""
        return self._thread

    def close(self) -> None:
        """Stop the worker: it takes no new task, and its results not yet taken are dropped.
        Waits up to ``join_timeout`` seconds for it to end the step it is in, then goes on (the
        worker then ends when that step does). Idempotent."""
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
        try:
            for task in tasks:
                if stop.is_set() or not put(produce(task)):
                    return
        finally:  # before the consumer hears of the end: what the tasks hold is released by then
            close_iterator(tasks)
        end = _DONE
    except BaseException as error:  # noqa: BLE001 - everything goes to the consumer
        end = _Failure(error)
    try:
        put(end)
    finally:
        del end  # the failure's traceback holds this frame: no cycle through a local


def close_iterator(iterator) -> None:
    """Close ``iterator`` if it can be closed (a generator: its ``finally`` blocks run and its frame,
    with what it holds, is freed now). Must run on the thread that iterates it, or once that
    thread has stopped (a generator that is running cannot be closed)."""
    close = getattr(iterator, "close", None)
    if callable(close):
        close()


def _shutdown(stop: threading.Event, out: queue.Queue, thread: threading.Thread, join_timeout: float | None) -> None:
    stop.set()
    if thread is not threading.current_thread():
        timeout = JOIN_TIMEOUT if join_timeout is None else join_timeout
        thread.join(timeout=timeout)
        if thread.is_alive():
            log.info("%s is still in its current step %.1f s after it was asked to stop; it ends when the step does", thread.name, timeout)
    while True:  # drop produced items so their buffers are released now
        try:
            out.get_nowait()
        except queue.Empty:
            break


def wait_stopped(thread: threading.Thread, what: str, warn_after: float | None = None) -> None:
    """Block until ``thread`` has ended, however long its current step takes: whatever runs next
    would race with it. After ``warn_after`` seconds (default :data:`STOP_WARN_AFTER`) a warning
    says what is waited for and that the wait goes on; then a log line each time the wait doubles.
    A wait that never ends means the step is stuck (a sampler, a lost server); Ctrl-C interrupts it."""
    if thread is threading.current_thread():
        raise RuntimeError(f"{what} cannot wait for its own thread {thread.name!r} to stop")
    limit = STOP_WARN_AFTER if warn_after is None else warn_after
    start = time.monotonic()
    thread.join(limit)
    if not thread.is_alive():
        return
    warnings.warn(
        f"{what} ({thread.name}) is still in its current step (sampling or gathering a batch) after {limit:g} s; "
        "waiting for it to end before going on, since it would write the same buffers. A first batch that "
        "compiles kernels or samples a huge graph can take this long; if it never ends, what it waits on is "
        "stuck (a sampler, a lost server): Ctrl-C interrupts the wait",
        RuntimeWarning,
        stacklevel=4,
    )  # the caller of the loader that waits
    next_line = 2 * max(limit, 1e-3)  # then a log line each time the wait doubles
    while True:
        thread.join(max(next_line - (time.monotonic() - start), 0.0))
        waited = time.monotonic() - start
        if not thread.is_alive():
            log.info("%s ended after %.1f s", what, waited)
            return
        log.warning("still waiting for %s (%s) to end its step: %.0f s so far", what, thread.name, waited)
        next_line *= 2
