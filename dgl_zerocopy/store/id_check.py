"""The check of the row ids given to ``FeatureStore.gather``: made once per gather, here.

:func:`check_ids` is the one check a gather makes (``FeatureStore.gather`` and ``read_ahead`` call
it once per batch): the ids' type, dtype, shape and device, then their range. What it returns is
what the layers below take as given (the backends, the cache's split, the kernel launcher): a
contiguous 1-D int32/int64 tensor on the CPU or the store's device, within ``[0, rows)``; those
layers check nothing again. Their public functions called directly (``split_hits``,
``cached_gather``, ``HotRowCache.gather``, ``launch_gather``) check their own input unless the
caller says it did (``unchecked=True``), as the store's backends do.

Host ids are checked at once: reading them costs nothing. Device ids are checked *on the device*,
on the gather's stream, without the host waiting for them (reading a result back would make the
host wait for everything queued before it, the caller's stream included):

1. the ids the kernel reads are clamped into ``[0, rows)``, so an out-of-range id never reads
   outside the table (its output row holds the nearest valid row instead, and the batch is
   reported as bad);
2. the position of the first bad id and that id are copied, asynchronously, into a small pinned
   host buffer, after which an event is recorded;
3. the error is raised where the host learns the result without waiting for it: at a later
   ``gather`` whose ``event.query()`` finds the check done, or where the host waits anyway:
   ``FeatureStore.raise_deferred_errors()`` (the end of an epoch) and ``close()``.

The check enqueues a handful of small kernels; nothing on its path calls ``.item()``, ``.cpu()``,
``bool()`` or a synchronize (``tests/store/test_store_zerocopy_cpu.py`` checks this on the CPU).
"""

from __future__ import annotations

import threading
from collections import deque

import numpy as np
import torch


def check_ids_arg(ids, device: torch.device) -> torch.Tensor:
    """``ids`` as a contiguous 1-D int32/int64 tensor on the CPU or ``device``; ``TypeError`` / ``ValueError`` otherwise."""
    if isinstance(ids, np.ndarray):
        ids = torch.from_numpy(ids)
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"ids must be a torch.Tensor or numpy.ndarray of int32/int64, but got {type(ids).__name__}")
    if ids.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"ids must be int32 or int64, but got {ids.dtype}; convert with ids.long()")
    if ids.dim() != 1:
        raise ValueError(f"ids must be 1-D, but got shape {tuple(ids.shape)}")
    if ids.device.type != "cpu" and ids.device != device:
        raise ValueError(f"ids are on {ids.device} but this store gathers on {device}; move them with ids.to({str(device)!r})")
    return ids.contiguous()


def check_host_ids(ids: torch.Tensor, rows: int) -> None:
    """Raise ``IndexError`` naming the first id of ``ids`` outside ``[0, rows)``. ``ids`` is read on
    the host: for a CPU tensor that costs nothing, for a device tensor it is a host sync."""
    if ids.numel() == 0:
        return
    lo, hi = torch.aminmax(ids)
    if int(lo) < 0 or int(hi) >= rows:
        bad = ((ids < 0) | (ids >= rows)).nonzero()[0, 0]
        raise IndexError(f"id {int(ids[bad])} at position {int(bad)} is out of range for a table of {rows} rows (valid: 0 to {rows - 1})")


def check_ids(ids, rows: int, device: torch.device, deferred: DeviceIdCheck, *, in_range: bool = True, on_host: bool = False) -> torch.Tensor:
    """The one check of a batch of ids; returns them as the layers below take them.

    Args:
        ids: the caller's ids: a 1-D int32/int64 ``torch.Tensor`` or ``numpy.ndarray``, on the CPU
            or on ``device``.
        rows: the table's rows; ids must lie in ``[0, rows)``.
        device: the store's device.
        deferred: where device ids are checked (on the current stream, reported later).
        in_range: False skips the range check (the caller vouches for it: ``unchecked=True``).
        on_host: check device ids on the host (copied there: a host sync), for a backend that
            reads them there anyway.

    Returns:
        ``ids`` as a contiguous 1-D int32/int64 tensor on the CPU or ``device``. Host ids are in
        range; device ids are clamped into ``[0, rows)`` by ``deferred`` (their error comes later).

    Raises:
        TypeError: ids that are not a tensor or array, or not int32/int64.
        ValueError: ids that are not 1-D, or on a device other than the CPU and ``device``.
        IndexError: a host id outside ``[0, rows)``, naming it, its position and the range.
    """
    ids = check_ids_arg(ids, device)
    if not in_range:
        return ids
    if checked_on_device(ids):
        if not on_host:
            return deferred.check(ids)
        ids = ids.cpu()
    check_host_ids(ids, rows)
    return ids


def checked_on_device(ids: torch.Tensor) -> bool:
    """Whether ``ids`` are checked on the device (later) rather than on the host (at once)."""
    return ids.device.type != "cpu"


class _Check:
    """One enqueued check: where its result lands on the host, and the event after the copy."""

    def __init__(self, pinned: bool) -> None:
        # [position of the first bad id (0 when none), the id there]
        self.result = torch.zeros(2, dtype=torch.int64, pin_memory=pinned)
        self.event = torch.cuda.Event()
        self.number = 0  # which gather of device ids it checked (1-based), for the message


class DeviceIdCheck:
    """Checks of device ids against a table of ``rows`` rows, reported without a host sync.

    :meth:`check` runs on the current stream; :meth:`poll` raises the first failure whose check has
    completed, without waiting; :meth:`wait` waits for every check enqueued, then does the same.
    Thread-safe: a prefetch thread may check while the main thread waits. Result buffers and events
    are reused once their check has been read (one per check in flight)."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self._lock = threading.Lock()
        self._reading = threading.Lock()
        self._pending: deque[_Check] = deque()  # in the order the gathers were made
        self._free: list[_Check] = []
        self._count = 0

    def check(self, ids: torch.Tensor) -> torch.Tensor:
        """The ids to read, clamped into ``[0, rows)``, after enqueueing their check on the current
        stream (which must be the one that reads the returned ids)."""
        if ids.numel() == 0:
            return ids
        if self.rows == 0:  # nothing to clamp into; known on the host
            raise IndexError(f"this table has no rows, so each of the {ids.numel()} ids is out of range")
        safe = ids.clamp(0, min(self.rows - 1, torch.iinfo(ids.dtype).max))
        bad = safe.ne(ids)
        # max over 0/1: the first 1, or position 0 when none is (torch returns the first maximal
        # index). uint8 rather than bool: every torch build's CUDA max kernel takes integer types.
        position = bad.to(torch.uint8).max(dim=0).indices.view(1)
        report = torch.cat((position, ids.index_select(0, position).to(torch.int64)))
        with self._lock:  # numbered and queued in one step, so the queue keeps the gathers' order
            check = self._free.pop() if self._free else _Check(pinned=ids.is_cuda)
            self._count += 1
            check.number = self._count
            check.result.copy_(report, non_blocking=True)
            check.event.record()  # on the current stream, after the copy; queued only once recorded
            self._pending.append(check)
        return safe

    def poll(self) -> None:
        """Raise ``IndexError`` for the earliest failed check that has completed; never waits."""
        self._report(wait=False)

    def wait(self) -> None:
        """Wait for every check enqueued so far, then raise ``IndexError`` for the earliest failure."""
        self._report(wait=True)

    def _report(self, wait: bool) -> None:
        with self._reading:  # one reader at a time; check() only appends, under self._lock
            while True:
                with self._lock:
                    if not self._pending:
                        return
                    check = self._pending[0]
                if not wait and not check.event.query():
                    return
                check.event.synchronize()  # done already when polled; otherwise the host waits, as asked
                position, value = check.result.tolist()
                with self._lock:
                    self._pending.popleft()
                    self._free.append(check)  # read: its buffer and event may serve another check
                if not 0 <= value < self.rows:
                    raise IndexError(
                        f"id {value} at position {position} is out of range for a table of {self.rows} rows (valid: 0 "
                        f"to {self.rows - 1}), in gather #{check.number} of device ids by this store (they are checked on "
                        f"the device and reported at a later gather, raise_deferred_errors() or close()); that batch is "
                        f"not valid: its out-of-range ids read the nearest valid row, never outside the table"
                    )
