"""Rows of a file read with ``O_DIRECT``: past the page cache, so that resident memory is what the
host buffer's budget says, however large the file.

- Aligned: each read starts on a block boundary, covers whole blocks, and lands in a page-aligned
  scratch buffer (an anonymous ``mmap``), as ``O_DIRECT`` requires; the rows are then copied out of
  it into their slots. The block is the smallest direct read the file accepts (probed at open:
  512 bytes on most disks, the device's logical block; :data:`BLOCK` where none smaller works, and
  for buffered reads): a row smaller than a page costs its sectors, not a whole page.
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

#: The largest alignment of direct reads (file offset and length; buffers are page-aligned): the page
#: size covers every logical block size in use. Smaller ones are probed (:data:`SMALL_BLOCKS`).
BLOCK = 4096
#: Smaller direct-read sizes tried at open, smallest first.
SMALL_BLOCKS = (512, 1024, 2048)
#: The most bytes one read covers (longer runs of blocks are split; a row larger than this is one read).
MAX_EXTENT = 1 << 20
#: Reader threads by default.
DEFAULT_THREADS = 8


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
        self.block = self._smallest_block() if self.direct else BLOCK
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

    def _smallest_block(self) -> int:
        """The smallest of :data:`SMALL_BLOCKS` that a direct read of one block at that offset accepts, else :data:`BLOCK`."""
        size = os.fstat(self._fd).st_size
        scratch = mmap.mmap(-1, BLOCK)
        try:
            for block in SMALL_BLOCKS:
                if size < 2 * block:
                    break
                try:
                    if os.preadv(self._fd, [memoryview(scratch)[:block]], block) == block:
                        return block
                except OSError as error:
                    if error.errno != errno.EINVAL:
                        raise
        finally:
            scratch.close()
        return BLOCK

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
        first, end, block, blocks = self.plan(rows)
        total = int(blocks.sum()) * self.block
        # A few tasks per thread, each a run of consecutive extents read into one scratch buffer.
        cuts = _cuts(blocks, min(MAX_EXTENT, max(self.block, total // (4 * self.threads))) // self.block)
        futures = [self._pool.submit(self._read_group, rows, dest, slots, first[i:j], end[i:j], block[i:j], blocks[i:j]) for i, j in cuts]
        errors = [f.exception() for f in futures]  # wait for every read before anything is reported
        for error in errors:
            if error is not None:
                raise error

    def plan(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The reads for sorted ``rows``, as arrays with one entry per read (extent): ``first``, ``end``
        (rows ``rows[first:end]``), ``block`` (its first block) and ``blocks`` (its length in blocks)."""
        start = self.offset + rows * self.row_bytes
        lo = start // self.block
        hi = (start + self.row_bytes - 1) // self.block  # the last block of each row, inclusive
        new = np.empty(rows.size, dtype=bool)
        new[0] = True
        new[1:] = lo[1:] > hi[:-1] + 1  # a gap of at least one block starts a new read
        first = np.flatnonzero(new)
        end = np.append(first[1:], rows.size)
        limit = max(1, MAX_EXTENT // self.block)
        long = np.flatnonzero(hi[end - 1] - lo[first] + 1 > limit)
        if long.size:  # split the runs longer than MAX_EXTENT at row boundaries (rare: long stretches of rows)
            pieces = []
            for a, b in zip(first[long].tolist(), end[long].tolist(), strict=True):
                while a < b:
                    cut = a + 1 + int(np.searchsorted(hi[a + 1 : b], int(lo[a]) + limit - 1, side="right"))
                    pieces.append((a, cut))
                    a = cut
            keep = np.ones(first.size, dtype=bool)
            keep[long] = False
            split = np.array(pieces, dtype=np.int64).reshape(-1, 2)
            first = np.concatenate((first[keep], split[:, 0]))
            end = np.concatenate((end[keep], split[:, 1]))
            order = np.argsort(first, kind="stable")
            first, end = first[order], end[order]
        return first, end, lo[first], hi[end - 1] - lo[first] + 1

    def _read_group(self, rows, dest, slots, first, end, block, blocks) -> None:
        """Read the extents ``first..blocks`` (arrays) one after the other into this thread's scratch,
        then copy their rows into their slots in one step."""
        sizes = blocks * self.block
        at = np.cumsum(sizes) - sizes  # each extent's place in the scratch
        scratch = self._scratch_buffer(int(sizes.sum()))
        view = memoryview(scratch)
        got = 0
        try:
            for place, size, position in zip(at.tolist(), sizes.tolist(), (block * self.block).tolist(), strict=True):
                n = os.preadv(self._fd, [view[place : place + size]], position)
                got += n
                if n < size and position + n < self.offset + int(rows[-1] + 1) * self.row_bytes:
                    last = min(position + size, self.offset + int(rows[-1] + 1) * self.row_bytes)
                    raise StorageChangedError(f"the feature file {str(self.path)!r} ended early: a read at byte {position} got {n} of {last - position} bytes")
                if not self.direct:
                    os.posix_fadvise(self._fd, position, size, os.POSIX_FADV_DONTNEED)
        finally:
            self.stats.add(storage_bytes=got, storage_reads=len(sizes))
            view.release()
        # Row i of the group lies at its extent's place + (its byte in the file - the extent's first byte).
        owner = np.repeat(np.arange(first.size), end - first)
        picked = rows[first[0] : end[-1]]
        starts = at[owner] + self.offset + picked * self.row_bytes - block[owner] * self.block
        data = np.frombuffer(scratch, dtype=np.uint8, count=int(sizes.sum()))
        dest[slots[first[0] : end[-1]]] = np.lib.stride_tricks.sliding_window_view(data, self.row_bytes)[starts]

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


def _cuts(blocks: np.ndarray, target: int) -> list[tuple[int, int]]:
    """``[i, j)`` ranges of consecutive extents of about ``target`` blocks each (at least one extent):
    one pool task each."""
    total = np.cumsum(blocks)
    bounds = np.searchsorted(total, np.arange(target, int(total[-1]), max(1, target)), side="left") + 1
    bounds = np.unique(np.concatenate(([0], bounds[bounds < blocks.size], [blocks.size])))
    return list(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True))
