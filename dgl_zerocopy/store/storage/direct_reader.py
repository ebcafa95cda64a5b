"""Rows of a file read with ``O_DIRECT``: past the page cache, so that resident memory is what the
host buffer's budget says, however large the file.

- Aligned: each read starts on a :data:`BLOCK` boundary, covers whole blocks, and lands in a
  page-aligned scratch buffer (an anonymous ``mmap``), as ``O_DIRECT`` requires; the rows are then
  copied out of it into their slots.
- Coalesced: the rows of a batch, sorted, become runs of blocks; rows that share a block, or lie in
  adjacent blocks, are read by one ``preadv`` (at most :data:`MAX_EXTENT` bytes, or one row's blocks).
- Many in flight: the runs are spread over a pool of reader threads (``os.preadv`` releases the GIL).
- Fallback: a file system that refuses ``O_DIRECT`` (tmpfs, some network and overlay file systems)
  is read through the page cache, each range dropped from it after the read
  (``posix_fadvise(DONTNEED)``), with a warning that says so.
- Checked: before each batch of reads the file's size, modification time and inode are compared
  with those seen at open; a file changed (or removed, or replaced) while open raises
  :class:`StorageChangedError`. The file is opened read-only: nothing is ever written to it.
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from .stats import StorageStats

#: The alignment of direct reads: file offset, length and buffer address (the page size covers
#: every logical block size in use).
BLOCK = 4096
#: The most bytes one read covers (longer runs of blocks are split; a row larger than this is one read).
MAX_EXTENT = 1 << 20
#: Reader threads by default.
DEFAULT_THREADS = 4


class StorageChangedError(RuntimeError):
    """The file behind a storage-backed store changed, or was removed, while the store had it open."""


class DirectReader:
    """Reads rows ``rows`` (row ``r`` at bytes ``[offset + r * row_bytes, + row_bytes)``) of ``path``.

    ``direct=False`` skips ``O_DIRECT`` (buffered reads, each range dropped from the page cache
    after it). ``stats`` counts what storage delivered (``storage_bytes``: whole blocks; ``storage_reads``)."""

    def __init__(
        self,
        path: str | os.PathLike,
        offset: int,
        row_bytes: int,
        num_rows: int,
        *,
        threads: int = DEFAULT_THREADS,
        direct: bool = True,
        stats: StorageStats | None = None,
    ) -> None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"reader threads must be a positive integer, but got {threads!r}")
        self.path = Path(path)
        self.threads = threads
        self.offset, self.row_bytes, self.num_rows = int(offset), int(row_bytes), int(num_rows)
        self.stats = stats if stats is not None else StorageStats()
        self._count_lock = threading.Lock()
        self._fd = -1
        self.direct = False
        self._open(direct)
        self._seen = self._identity(os.fstat(self._fd))
        self._scratch = threading.local()
        self._scratches: list[mmap.mmap] = []
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="dgl-zerocopy-storage")

    # -- opening ---------------------------------------------------------------------------
    def _open(self, direct: bool) -> None:
        flag = getattr(os, "O_DIRECT", 0)
        if direct and flag:
            try:
                self._fd = os.open(self.path, os.O_RDONLY | flag)
                self._probe()
                self.direct = True
                return
            except OSError as error:
                if self._fd >= 0:
                    os.close(self._fd)
                    self._fd = -1
                if error.errno not in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
                    raise
                warnings.warn(
                    f"the file system of {str(self.path)!r} refuses O_DIRECT ({os.strerror(error.errno)}): rows are read through "
                    "the page cache instead, each range dropped from it after the read (posix_fadvise DONTNEED); resident memory "
                    "stays bounded, but reads cost a copy more",
                    stacklevel=4,
                )
        self._fd = os.open(self.path, os.O_RDONLY)

    def _probe(self) -> None:
        """One aligned read: some file systems accept ``O_DIRECT`` at open and refuse the read."""
        size = os.fstat(self._fd).st_size
        if size:
            scratch = mmap.mmap(-1, BLOCK)
            try:
                os.preadv(self._fd, [scratch], 0)
            finally:
                scratch.close()

    @staticmethod
    def _identity(stat: os.stat_result) -> tuple[int, int, int]:
        return stat.st_size, stat.st_mtime_ns, stat.st_ino

    def check_unchanged(self) -> None:
        """``StorageChangedError`` when the file at :attr:`path` is not the one opened, as it was."""
        try:
            now = self._identity(os.stat(self.path))
        except FileNotFoundError:
            raise StorageChangedError(f"the feature file {str(self.path)!r} was removed while a FeatureStore reads it; make a new store") from None
        if now != self._seen:
            raise StorageChangedError(
                f"the feature file {str(self.path)!r} changed while a FeatureStore reads it (size, modification time or inode: "
                f"{self._seen} then {now}); rows already in memory could mix old and new data, so the store stops: make a new store "
                "over the finished file (write a new file and rename it into place, never rewrite one in use)"
            )

    # -- reading ---------------------------------------------------------------------------
    def read_into(self, rows: np.ndarray, dest: np.ndarray, slots: np.ndarray) -> None:
        """``dest[slots[i]] = bytes of row rows[i]``: ``rows`` sorted, distinct, in range (int64);
        ``dest`` a ``(slots, row_bytes)`` uint8 array. Returns when every row is in place."""
        if self._fd < 0:
            raise RuntimeError("this reader is closed")
        if rows.size == 0:
            return
        self.check_unchanged()
        extents = self.plan(rows)
        total = sum(extent[3] for extent in extents) * BLOCK
        groups = _group(extents, min(MAX_EXTENT, max(BLOCK, total // (4 * self.threads))))  # a few tasks per thread
        futures = [self._pool.submit(self._read_group, rows, dest, slots, group) for group in groups]
        errors = [f.exception() for f in futures]  # wait for every read before anything is reported
        for error in errors:
            if error is not None:
                raise error

    def plan(self, rows: np.ndarray) -> list[tuple[int, int, int, int]]:
        """The reads for sorted ``rows``: ``(first index, end index, first block, blocks)`` per run,
        rows ``rows[first:end]`` lying in blocks ``[first block, first block + blocks)``."""
        start = self.offset + rows * self.row_bytes
        lo = start // BLOCK
        hi = (start + self.row_bytes - 1) // BLOCK  # the last block of each row, inclusive
        new = np.empty(rows.size, dtype=bool)
        new[0] = True
        new[1:] = lo[1:] > hi[:-1] + 1  # a gap of at least one block starts a new read
        firsts = np.flatnonzero(new)
        ends = np.append(firsts[1:], rows.size)
        limit = max(1, MAX_EXTENT // BLOCK)
        extents = []
        for a, b in zip(firsts.tolist(), ends.tolist(), strict=True):
            while a < b:  # split a run longer than MAX_EXTENT at row boundaries
                first = int(lo[a])
                cut = a + 1 + int(np.searchsorted(hi[a + 1 : b], first + limit - 1, side="right"))
                extents.append((a, cut, first, int(hi[cut - 1]) - first + 1))
                a = cut
        return extents

    def _read_group(self, rows: np.ndarray, dest: np.ndarray, slots: np.ndarray, group: list[tuple[int, int, int, int]]) -> None:
        for a, b, block, blocks in group:
            nbytes = blocks * BLOCK
            scratch = self._scratch_buffer(nbytes)
            position = block * BLOCK
            got = os.preadv(self._fd, [memoryview(scratch)[:nbytes]], position)
            if not self.direct:
                os.posix_fadvise(self._fd, position, nbytes, os.POSIX_FADV_DONTNEED)
            self.stats.add(storage_bytes=got, storage_reads=1)
            base = self.offset + int(rows[a]) * self.row_bytes - position
            need = base + (int(rows[b - 1]) - int(rows[a]) + 1) * self.row_bytes
            if got < need:
                raise StorageChangedError(f"the feature file {str(self.path)!r} ended early: a read at byte {position} got {got} of {need} bytes")
            span = np.frombuffer(scratch, dtype=np.uint8, count=need - base, offset=base).reshape(-1, self.row_bytes)
            dest[slots[a:b]] = span[rows[a:b] - rows[a]]

    def _scratch_buffer(self, nbytes: int) -> mmap.mmap:
        """This thread's page-aligned scratch buffer, grown to hold ``nbytes``."""
        scratch = getattr(self._scratch, "buffer", None)
        if scratch is None or len(scratch) < nbytes:
            scratch = mmap.mmap(-1, max(nbytes, MAX_EXTENT))
            with self._count_lock:
                self._scratches.append(scratch)
            self._scratch.buffer = scratch
        return scratch

    def close(self) -> None:
        """Stop the reader threads (after the reads in flight) and close the file. Idempotent."""
        self._pool.shutdown(wait=True)
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._scratch = threading.local()
        for scratch in self._scratches:
            try:
                scratch.close()
            except BufferError:  # still viewed by an array of a read that failed: freed with it
                pass
        self._scratches.clear()


def _group(extents: list[tuple[int, int, int, int]], target: int) -> list[list[tuple[int, int, int, int]]]:
    """Extents in consecutive groups of about ``target`` bytes: one pool task each."""
    groups, current, size = [], [], 0
    for extent in extents:
        current.append(extent)
        size += extent[3] * BLOCK
        if size >= target:
            groups.append(current)
            current, size = [], 0
    if current:
        groups.append(current)
    return groups
