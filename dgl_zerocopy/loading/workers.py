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
- Persistent workers live in the torch DataLoader that the loader keeps until its ``close()``.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator

import torch

from .timing import StageTimer


class SampleBatches(torch.utils.data.Dataset):
    """Batch ``i`` of an epoch, sampled (in a torch DataLoader worker process). ``order`` is in
    shared memory: the loader rewrites it every epoch and persistent workers see the new order."""

    def __init__(self, graph, sampler, order: torch.Tensor, batch_size: int, num_batches: int) -> None:
        self.graph, self.sampler, self.order, self.batch_size, self.num_batches = graph, sampler, order, batch_size, num_batches

    def __len__(self) -> int:
        return self.num_batches

    def __getitem__(self, i: int):
        return self.sampler.sample(self.graph, self.order[i * self.batch_size : (i + 1) * self.batch_size])


def identity(item):
    """The torch DataLoader's ``collate_fn``: a batch is one item, already sampled."""
    return item


def sampled_batches(workers: torch.utils.data.DataLoader, timer: StageTimer) -> Iterator:
    """``enumerate(workers)``, with the wait for each item timed as ``sample``. Close it from the
    thread that iterates it (or once that thread has stopped) to stop non-persistent processes."""
    tasks = enumerate(workers)
    while True:
        with timer.stage("sample"):
            try:
                task = next(tasks, None)
            except BaseException as error:
                del tasks  # with torch's frames below, the last holders of its iterator
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
