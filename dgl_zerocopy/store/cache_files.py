"""The files a cache writes and trusts later: their digests, and the partial files of writers that died.

Every cache the package writes (the generated dataset, the OGB dataset's ``.npy`` files, a dataset's
features written for ``--feature-storage auto``, a compressed folder kept beside its ``.npy``) is
trusted only when its bytes are those written:

- :func:`record_digests`, at write time, before the cache is renamed into place: each file's size
  and blake2b digest, in a manifest written atomically (``digests.json`` in a cache folder, or
  ``<file>.digests.json`` beside a single file);
- :func:`check_digests`, at every open: a size that differs is damage (no read); otherwise the file
  is hashed, unless its stamp (size, modification time, inode) is the one recorded when it was
  last hashed whole. Any write changes the modification time, so an unchanged stamp means unchanged
  bytes: a cache is read whole once, not at every run (blake2b runs at about 0.4-1 GB/s: seconds for
  a 10 GB file). A stamp is recorded only when the file's modification time lies
  :data:`RACY_NS` before the hash began (a write in the same clock tick would keep the time), so
  a fresh cache of small files is hashed once more at its first reuse.

A file that fails raises :class:`DamagedFile` naming it; the caller rebuilds the cache with a
warning (or refuses, naming the fix). A missing manifest (a cache written before digests were
recorded) fails the same way: the cache is written again.

Partial files: a writer names its temporary file or folder ``.<name>.partial-<host>-<pid>-<start>-*``
(:func:`partial_prefix`), so that a later run can tell a dead writer's leftovers (killed by SIGKILL,
or by the OOM killer, with no chance to clean up) from a live one's: :func:`sweep_partials` removes
those whose writer (pid and start time, on this host) is gone. Imports nothing of dgl_zerocopy.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

MANIFEST = "digests.json"
HASH = "blake2b-128"
RACY_NS = 2_000_000_000  # a stamp counts only for a file last written this long before it was hashed
_CHUNK = 1 << 20  # bytes read and hashed at a time (as fast as larger reads; little memory)
_FORMAT = 1


class DamagedFile(Exception):
    """A cache file whose bytes are not those recorded when it was written: ``path``, and ``reason``."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = Path(path), reason


# -- digests -------------------------------------------------------------------------------------


def file_digest(path: str | os.PathLike) -> str:
    """The blake2b (128-bit) digest of the file at ``path``, read in chunks into one reused buffer."""
    h = hashlib.blake2b(digest_size=16)
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def manifest_beside(path: Path) -> Path:
    """The manifest of a cache that is one file: ``<file>.digests.json`` beside it."""
    return path.with_name(f"{path.name}.{MANIFEST}")


def record_digests(files: Mapping[str, Path], manifest: Path) -> None:
    """Hash each file ``files[name]`` and write its size and digest under ``name`` (relative to the
    manifest's folder, where the file will be) to ``manifest``, atomically. The files must be
    private to the writer (partial files, not yet renamed into place): their stamps are recorded
    too when hashing outlasted :data:`RACY_NS` (a rename keeps the stamp)."""
    entries = {}
    for name, path in files.items():
        before = os.stat(path)
        digest = file_digest(path)
        entries[name] = {"size": before.st_size, "digest": digest, "checked": _trusted_stamp(before, time.time_ns())}
    _write_manifest(manifest, entries)


def check_digests(folder: Path, manifest: Path | None = None) -> None:
    """Check every file the manifest (default ``folder/digests.json``) lists against what was recorded
    when it was written; :class:`DamagedFile` naming the first that differs, or the manifest when it
    is missing or unreadable. Records the stamps of the files hashed whole (best effort)."""
    manifest = manifest if manifest is not None else folder / MANIFEST
    files = _read_manifest(manifest)
    updated = False
    for name, entry in files.items():
        path = folder / name
        try:
            before = os.stat(path)
        except FileNotFoundError:
            raise DamagedFile(path, "missing") from None
        if before.st_size != entry["size"]:
            raise DamagedFile(path, f"{before.st_size:,} bytes, {entry['size']:,} when it was written")
        if entry.get("checked") == file_stamp(before):
            continue  # unchanged since it was last hashed whole
        started = time.time_ns()
        digest = file_digest(path)
        if file_stamp(os.stat(path)) != file_stamp(before):
            raise DamagedFile(path, "written to while its digest was checked")
        if digest != entry["digest"]:
            raise DamagedFile(path, f"its bytes are not those written: their {HASH} digest differs from the one {manifest.name} recorded")
        stamp = _trusted_stamp(before, started)
        if stamp is not None:
            entry["checked"], updated = stamp, True
    if updated:
        try:
            _write_manifest(manifest, files)
        except OSError:
            pass  # a read-only cache: hashed again at its next open


def file_stamp(stat: os.stat_result) -> list[int]:
    """A file's stamp, what a recorded verdict about it holds for: ``[size, mtime_ns, inode]``."""
    return [stat.st_size, stat.st_mtime_ns, stat.st_ino]


def _trusted_stamp(stat: os.stat_result, hashed_from_ns: int) -> list[int] | None:
    """The stamp to record for a file hashed from ``hashed_from_ns`` on, or None when it was last
    written so recently that a later write could keep its modification time."""
    return file_stamp(stat) if hashed_from_ns - stat.st_mtime_ns > RACY_NS else None


def _read_manifest(manifest: Path) -> dict:
    try:
        data = json.loads(manifest.read_bytes())
    except FileNotFoundError:
        raise DamagedFile(manifest, "missing: no digest was recorded (a cache written by an older version, or cut short)") from None
    except (OSError, ValueError) as e:
        raise DamagedFile(manifest, f"not readable JSON: {e}") from None
    files = data.get("files") if isinstance(data, dict) and data.get("format") == _FORMAT and data.get("hash") == HASH else None
    ok = isinstance(files, dict) and all(
        isinstance(e, dict) and type(e.get("size")) is int and isinstance(e.get("digest"), str) and isinstance(n, str) and "/" not in n
        for n, e in files.items()
    )
    if not ok:
        raise DamagedFile(manifest, f"not a manifest of format {_FORMAT} ({HASH})")
    return files


def _write_manifest(manifest: Path, files: dict) -> None:
    write_json_atomic(manifest, {"format": _FORMAT, "hash": HASH, "files": files})


def write_json_atomic(target: Path, data: dict) -> None:
    """Write ``data`` as JSON to ``target`` whole or not at all: into a partial file beside it
    (:func:`partial_prefix`), then renamed over it."""
    text = json.dumps(data, indent=1) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=partial_prefix(target.name), dir=target.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# -- partial files -------------------------------------------------------------------------------

_PARTIAL = re.compile(r"\..+\.partial-([0-9a-f]{8})-(\d+)-(\d+)-")


def _host() -> str:
    return hashlib.blake2b(socket.gethostname().encode(), digest_size=4).hexdigest()


def partial_prefix(name: str) -> str:
    """The prefix of a temporary file or folder that becomes ``name``: hidden, and naming its writer
    (a hash of the host name, the pid and the process's start time) for :func:`sweep_partials`."""
    pid = os.getpid()
    return f".{name}.partial-{_host()}-{pid}-{start_time(pid) or 0}-"


def sweep_partials(folder: Path) -> list[Path]:
    """Remove the partial files and folders (:func:`partial_prefix`) in ``folder`` whose writer, on
    this host, no longer runs (same pid and start time); return them. A live writer's, other hosts',
    other users' and names of another form are kept; nothing is removed where ``/proc`` cannot
    tell a writer's life (not Linux)."""
    if start_time(os.getpid()) is None:
        return []
    host, removed = _host(), []
    try:
        entries = list(os.scandir(folder))
    except OSError:  # no folder yet
        return []
    for entry in entries:
        found = _PARTIAL.match(entry.name)
        if found is None or found[1] != host or start_time(int(found[2])) == int(found[3]):
            continue
        try:
            if entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
        except FileNotFoundError:  # removed meanwhile, by another run's sweep
            continue
        except OSError:
            continue
        removed.append(Path(entry.path))
    return removed


def start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, ``/proc/PID/stat``): with the pid it names
    one process, where a pid alone may have been reused. None: no such process, a zombie, or no ``/proc``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state, ppid, ...
    return None if fields[0] in ("Z", "X") else int(fields[19])  # field 22 of proc(5)
