"""A generated graph's CSC files checked once, and guarded while mapped.

The samplers index ``indptr``/``indices`` without bounds checks, so a damaged file (ids past the graph, a
negative id, offsets that decrease) would crash the process or return garbage. :func:`verify_csc` runs at
every :func:`~dgl_zerocopy.data.disk_graph.open_disk_graph`:

- where a verdict is recorded for these very files (each one's size, modification time in ns and inode,
  as the caches of :mod:`~dgl_zerocopy.store.cache_files` record a file last hashed whole), the graph
  opens with no pass over it: a ``stat`` per file;
- otherwise one :func:`~dgl_zerocopy.data.graph_check.check_csc` pass over both files (4-7 GB/s from the
  page cache on a 2-core machine, docs/benchmarks.md), refusing a damaged graph with the file, the first bad
  position and value and the fix; when it passes, its verdict is recorded (:data:`RECORD` in the folder, or
  under the package's cache folder where the graph's folder is read-only) with a log line, so that the next
  open costs no pass.

:func:`~dgl_zerocopy.data.papers_disk.generate_to_disk` checks the files it wrote the same way and records
the verdict before the folder is renamed into place.

What the record catches and what it does not: any write through the file system changes a file's
modification time (a truncation or extension its size too; a file copied or renamed over the path is
another inode), so all of those get the full pass again. It cannot tell bytes changed while the
modification time was set back (``os.utime``, ``touch -d``, ``cp -p`` onto the same inode), nor bits
rotted on the disk, nor a write whose time falls in the same clock tick as the check that recorded it
(so the verdict of an existing graph is recorded only for files last written
:data:`~dgl_zerocopy.store.cache_files.RACY_NS` before the pass began; the generator's files are its own
until renamed into place, so their verdict is recorded at once). It is a record of a check, not a hash of
the bytes: hashing a 26 GB file at every open would cost a full pass, as much as the check it would spare.

:class:`CscFiles` holds a descriptor of each mapped file (:class:`~dgl_zerocopy.store.mapped_file.MappedFile`);
:meth:`CscFiles.check`, one ``fstat`` per file before each batch, raises
:class:`~dgl_zerocopy.store.storage.StorageChangedError` for a file cut short (a read past its end would be
SIGBUS) or written since it was checked (its ids are no longer the ones checked).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
import weakref
from pathlib import Path

import numpy as np

from ..store.cache_files import RACY_NS, file_stamp, write_json_atomic
from ..store.host_files import mapped_file
from ..store.mapped_file import MappedFile
from ..store.storage.direct_reader import StorageChangedError
from .graph_check import check_csc

__all__ = ["RECORD", "CSC_FILES", "CscFiles", "verify_csc", "check_files", "file_stamps", "record_generated", "record_verdict"]

log = logging.getLogger(__name__)

RECORD = "csc_checked.json"
CSC_FILES = ("indptr", "indices")
_FORMAT = 1
_FIX = "generate the graph again (dgl-zerocopy generate OUT --overwrite), into a new folder if this one is in use"


class CscFiles:
    """The files under a graph's mapped ``indptr`` and ``indices``, each open read-only (the very file
    mapped, not whatever the path names later).

    Args:
        folder: the graph's folder (named by errors).
        arrays: ``{"indptr": map, "indices": map}``: ``np.load(..., mmap_mode="r")`` arrays.
    """

    def __init__(self, folder: Path, arrays: dict[str, np.ndarray]) -> None:
        self.folder = Path(folder)
        self.files: dict[str, MappedFile] = {}
        self.checked: dict[str, list[int]] | None = None  # the stamps the verdict holds for (set by verify_csc)
        holder = "a DiskGraph (or a sampler over it)"
        for name in CSC_FILES:
            root = mapped_file(arrays[name])
            if root is None:
                continue
            ref = (str(root.filename), int(root.offset), root.dtype.str, root.shape, root.mode)
            self.files[name] = MappedFile(ref, root.ctypes.data, what="the graph file", holder=holder, fix=f"sampling stops: {_FIX}")
        weakref.finalize(self, _close_all, list(self.files.values()))  # the descriptors live as long as the maps' users

    def __reduce__(self):
        # A descriptor means nothing in another process, and a DiskGraph's maps arrive there as copies in memory
        # (NumPy pickles a memmap's values): the receiver's copy checks no file.
        return (_no_files, (str(self.folder),))

    def stamps(self) -> dict[str, list[int]]:
        """Each file's stamp (size, modification time in ns, inode): the mapped file's where it is open,
        else the path's."""
        out = {}
        for name in CSC_FILES:
            st = self.files[name].stat() if name in self.files else None
            out[name] = file_stamp(st if st is not None else os.stat(self.folder / f"{name}.npy"))
        return out

    def check(self) -> None:
        """Raise :class:`StorageChangedError` when a mapped file was cut short or written since it was checked.

        Raises:
            StorageChangedError: naming the file and the fix (open the graph again, or generate it again).
        """
        for name, mapped in self.files.items():
            mapped.check()
            st = mapped.stat()
            if self.checked is not None and st is not None and file_stamp(st) != self.checked[name]:
                raise StorageChangedError(
                    f"the graph file {str(mapped.path)!r} was written to after it was checked (size, modification time or inode "
                    f"{file_stamp(st)}, checked at {self.checked[name]}), while a DiskGraph maps it: its ids may no longer lie in the "
                    f"graph, so sampling stops: open the graph again (it is checked again), or {_FIX}"
                )


def _no_files(folder: str) -> CscFiles:
    return CscFiles(Path(folder), {name: np.empty(0, np.int64) for name in CSC_FILES})


def _close_all(files: list[MappedFile]) -> None:
    for mapped in files:
        mapped.close()


def verify_csc(folder: Path, meta: dict, indptr: np.ndarray, indices: np.ndarray, files: CscFiles) -> bool:
    """Check a graph's CSC at open: no pass where a verdict is recorded for these files as they are now,
    else one :func:`check_csc` pass (then its verdict recorded where the files are old enough to trust
    their stamps). Returns True when a pass ran.

    Raises:
        IndexError: an index outside ``[0, num_nodes)``, naming ``indices.npy``, its position and value.
        ValueError: ``indptr.npy`` not starting at 0, decreasing, or not ending at the edge count.
        StorageChangedError: a file written to while it was checked.
    """
    stamps = files.stamps()
    if stamps in _recorded(folder, meta):
        files.checked = stamps
        return False
    started = time.time_ns()
    check_files(folder, meta, indptr, indices)
    if files.stamps() != stamps:
        raise StorageChangedError(f"the graph in {str(folder)!r} was written to while it was checked; open it again when the writer is done")
    files.checked = stamps
    # The caches' rule: a stamp is trusted only for a file last written RACY_NS before the pass began (a write in the
    # same clock tick as the pass would keep the modification time).
    trusted = all(started - mtime_ns > RACY_NS for _, mtime_ns, _ in stamps.values())
    seconds = (time.time_ns() - started) / 1e9
    if not trusted:
        log.info("%s: the graph's CSC checked whole in %.2f s (written too recently to record the verdict)", folder, seconds)
        return True
    where = record_verdict(folder, meta, stamps)
    log.info(
        "%s: the graph's CSC checked whole in %.2f s; verdict recorded in %s (later opens skip the pass)",
        folder,
        seconds,
        where or "nowhere (no writable folder)",
    )
    return True


def check_files(folder: Path, meta: dict, indptr: np.ndarray, indices: np.ndarray) -> None:
    """One :func:`check_csc` pass over a graph's CSC, its errors naming the file that holds the fault."""
    n = int(meta["num_nodes"])
    try:
        check_csc(indptr, indices, n, name="its CSC", num_dst_nodes=n, fix=_FIX)
    except IndexError as e:
        raise IndexError(f"{str(folder / 'indices.npy')!r} does not hold a valid graph: {e}") from None
    except ValueError as e:
        raise ValueError(f"{str(folder / 'indptr.npy')!r} does not hold a valid graph: {e}") from None


def record_generated(folder: Path, meta: dict) -> None:
    """Check the CSC that the generator just wrote into ``folder`` (its private, not yet renamed folder) with one
    :func:`check_csc` pass, and record the verdict there. The stamps are recorded at once, however recent the
    files: nobody else writes a folder of a partial name, and a rename into place keeps every stamp.

    Raises:
        IndexError, ValueError: the generator wrote a CSC the samplers could not read (a bug: nothing is recorded).
    """
    arrays = {name: np.load(folder / f"{name}.npy", mmap_mode="r") for name in CSC_FILES}
    check_files(folder, meta, arrays["indptr"], arrays["indices"])
    stamps = file_stamps(folder)
    write_json_atomic(folder / RECORD, _record(meta, stamps))


def file_stamps(folder: Path) -> dict[str, list[int]]:
    """The stamp (size, modification time in ns, inode) of each CSC file in ``folder``, by its path."""
    return {name: file_stamp(os.stat(Path(folder) / f"{name}.npy")) for name in CSC_FILES}


def record_verdict(folder: Path, meta: dict, stamps: dict[str, list[int]]) -> Path | None:
    """Write the verdict that ``folder``'s CSC files, at ``stamps``, passed :func:`check_csc`: into the folder
    (:data:`RECORD`, atomically), else into the package's cache folder; returns where, or None."""
    record = _record(meta, stamps)
    for target in (folder / RECORD, _cache_record(folder)):
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(target, {**record, "folder": str(folder.resolve())} if target.parent != folder else record)
            return target
        except OSError:
            continue
    return None


def _record(meta: dict, stamps: dict[str, list[int]]) -> dict:
    return {"format": _FORMAT, "check": "check_csc", **_identity(meta), "files": {f"{k}.npy": v for k, v in stamps.items()}}


def _identity(meta: dict) -> dict:
    return {"num_nodes": int(meta["num_nodes"]), "num_edges": int(meta["num_edges"]), "index_dtype": str(meta["index_dtype"])}


def _recorded(folder: Path, meta: dict) -> list[dict[str, list[int]]]:
    """The stamps of each verdict recorded for this graph: the folder's, and the cache's (a read-only folder's
    record of files changed since the folder's own was written)."""
    found = []
    for target in (folder / RECORD, _cache_record(folder)):
        try:
            record = json.loads(target.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or record.get("format") != _FORMAT or record.get("check") != "check_csc":
            continue
        if any(record.get(k) != v for k, v in _identity(meta).items()):
            continue
        if target.parent != folder and record.get("folder") != str(folder.resolve()):
            continue
        files = record.get("files")
        if isinstance(files, dict):
            found.append({k: files.get(f"{k}.npy") for k in CSC_FILES})
    return found


def _cache_record(folder: Path) -> Path:
    from . import cache_dir

    key = hashlib.blake2b(str(folder.resolve()).encode(), digest_size=8).hexdigest()
    return cache_dir() / "graph-checks" / f"{key}.json"
