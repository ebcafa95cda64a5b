"""The file under a memory-mapped table, checked before each gather: cut short, it would kill the process.

A table that maps a file (a ``.npy`` path, ``np.load(path, mmap_mode=...)``, a compressed folder's
codes) reads the file's pages on demand. When the file is truncated while mapped, a read past its
new end is not an error Python can catch: the kernel sends SIGBUS and the process dies ("Bus
error", exit 135). :class:`MappedFile` holds a descriptor of the very file mapped (through
``/proc/self/map_files``, so a file renamed over the path later is not mistaken for it) and
:meth:`MappedFile.check` compares its size with the mapped range before each gather: one
``fstat``, about a microsecond. A truncation between the check and the gather's reads is not
caught: the check narrows the window, it cannot close it (docs/storage.md, "Mapped files").
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from .storage.direct_reader import StorageChangedError

_STORE_FIX = (
    "the store stops: make a new store over the whole file (write a new file and rename it into place, never rewrite one in "
    "use), or read it with FeatureStore(path, storage=StorageTier(N)), which reads the file with checks instead of mapping it"
)


class MappedFile:
    """The file that ``(filename, offset, dtype, shape, mode)`` maps, open read-only; :meth:`check`
    raises :class:`StorageChangedError` when it no longer holds the mapped bytes. ``what``, ``holder``
    and ``fix`` word its error: what the file is, who maps it, and what the user should do."""

    def __init__(self, file: tuple, address: int, *, what: str = "the feature file", holder: str = "a FeatureStore", fix: str = _STORE_FIX) -> None:
        filename, offset, dtype, shape, _ = file
        self.path = Path(filename)
        self.end = int(offset) + math.prod(shape) * np.dtype(dtype).itemsize  # the bytes a gather may read
        self._what, self._holder, self._fix = what, holder, fix  # the error's words: what the file is, who maps it, the fix
        self._fd = _open_mapping(address, self.path)

    def check(self) -> None:
        if self._fd < 0:
            return
        size = os.fstat(self._fd).st_size
        if size < self.end:
            raise StorageChangedError(
                f"{self._what} {str(self.path)!r} was cut short to {size:,} bytes while {self._holder} maps it (the table "
                f"needs {self.end:,}); reading a mapped file past its end kills the process (SIGBUS), so {self._fix}"
            )

    def stat(self) -> os.stat_result | None:
        """``os.fstat`` of the very file mapped, or None where it could not be opened (no check then)."""
        return os.fstat(self._fd) if self._fd >= 0 else None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _open_mapping(address: int, path: Path) -> int:
    """A read-only descriptor of the file mapped at ``address`` (``/proc/self/map_files``, or ``path``
    when it is still that file), else of ``path`` where there is no ``/proc`` (not Linux); -1: no check."""
    try:
        with open("/proc/self/maps") as maps:
            found = next((f for f in map(str.split, maps) if int(f[0].split("-")[0], 16) <= address < int(f[0].split("-")[1], 16)), None)
    except OSError:
        found = None
    if found is not None:
        try:
            return os.open(f"/proc/self/map_files/{found[0]}", os.O_RDONLY)
        except OSError:
            pass  # map_files refused (an older kernel, a restricted /proc): the path, if it is the file mapped
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return -1
    if found is not None and os.fstat(fd).st_ino != int(found[4]):
        os.close(fd)  # another file was renamed over the path since it was mapped
        return -1
    return fd
