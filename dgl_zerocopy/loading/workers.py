"""The sampling processes of :class:`~dgl_zerocopy.loading.loader.DataLoader` (``num_workers > 0``):
a torch DataLoader whose items are the epoch's sampled batches, and the task iterator that the
loader's gather step reads them from.

Lifetime of the processes (torch stops those of a non-persistent iterator when the iterator is
freed, and keeps persistent ones in its DataLoader until that is freed):

- :func:`sampled_batches` is the only holder of the epoch's torch iterator. Closing it (the
  prefetch worker does when it stops: at the end, on an error, when the loop is left) frees the
  iterator, so the processes stop then, whatever else (an exception's traceback) still holds the
  frames that ran the epoch.
- An error raised by torch's iterator itself (a sampler's exception in a process, a timeout, a
  process that died) carries torch's frames in its traceback; they hold the iterator, and torch's
  re-raise makes a reference cycle that only the garbage collector frees. Their local variables
  are cleared (:func:`traceback.clear_frames`; the traceback still prints, with the process's
  own traceback in the message) before the error goes on, so the processes stop before the
  consumer sees it, whether or not it keeps the exception.
- Persistent workers live in the torch DataLoader that the loader keeps until its ``close()``,
  which shuts them down there (:func:`stop_processes`), whoever else still holds torch's iterator.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator

from .timing import StageTimer


def identity(item):
    """The torch DataLoader's ``collate_fn``: a batch is one item, already sampled."""
    return item


def sampled_batches(workers, timer: StageTimer) -> Iterator:
    """``enumerate(workers)``, with the wait for each item timed as ``sample``. ``workers``: the torch
    DataLoader, or its iterator already made (the loader makes it where DGL's loader does, on the
    thread that starts the epoch; this generator is then its only holder). Close it from the
    thread that iterates it (or once that thread has stopped) to stop non-persistent processes."""
    tasks = enumerate(workers)
    while True:
        with timer.stage("sample"):
            try:
                task = next(tasks, None)
            except BaseException as error:
                del tasks, workers  # with torch's frames below, the last holders of its iterator
                _clear_finished_frames(error)
                raise
        if task is None:
            return
        yield task


def _clear_finished_frames(error: BaseException) -> None:
    """Clear the local variables of the frames that have returned in the tracebacks of ``error``
    and of the exceptions it was raised from (frames still running are left as they are)."""
    pending, seen = [error], set()
    while pending:
        item = pending.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        traceback.clear_frames(item.__traceback__)
        pending += [item.__cause__, item.__context__]


def stop_processes(workers) -> None:
    """Shut down the processes of ``workers`` (a torch DataLoader) now and drop its persistent
    iterator: they are gone when this returns, even while something else (a loop left with
    ``break``, an exception's traceback) still holds that iterator. Call it once no thread reads
    the iterator. A DataLoader without processes, or whose iterator is gone, is left as it is."""
    iterator = getattr(workers, "_iterator", None)
    if iterator is None:
        return
    workers._iterator = None
    # torch's own clean-up (what its iterator's __del__ runs): tell the processes to end, join
    # them, and terminate any that do not end within its timeout. Idempotent.
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if callable(shutdown):
        shutdown()
