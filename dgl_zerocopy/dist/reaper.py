"""Nothing of a ``launch-local`` job outlives it: its processes die with the launcher, and what they leave is removed.

A job's servers and trainers each run in a session of their own (so that stopping one stops the
processes it started), which also means no terminal signal and no parent's death reaches them.
This module closes that gap three ways:

- **exec mode** (``python reaper.py exec PARENT -- COMMAND...``): each server and trainer starts
  through it. It asks the kernel to SIGKILL the process when its parent exits (Linux
  ``PR_SET_PDEATHSIG``; kept across ``exec``), checks that the parent is still PARENT (it may have
  died before the call), and execs COMMAND in place: same pid, nothing stays between.
- **guard mode** (``python reaper.py guard JOB FOLDER``): one process per job, in a session of its
  own, reads its stdin until end of file. The launcher holds the write end and never writes, so
  end of file comes when the launcher exits, however it exits (SIGKILL, OOM killer, closed
  terminal) or closes it after its own clean-up. Then it kills every process of the job
  (:func:`kill_job`), unlinks the job's shared-memory segments and removes FOLDER.
- **sweep** (:func:`sweep`, run by each launch): removes the segments and folders of jobs whose
  launcher is dead and of which no process is left (a guard that was killed too).

A job is named by its id, ``dglzc{pid}_{starttime}_{hex}``: the launcher's pid and its start time
(``/proc/PID/stat``, clock ticks since boot), so that a reused pid is not taken for the launcher,
and 6 random hex digits for jobs of one process. Its segments' names start with the id (the
per-machine prefixes of :mod:`.single_host` extend it), its folder is ``dgl-zerocopy-cluster-{id}-*``
in the temporary directory, and every process of the job carries ``JOB_ENV={id}`` in its environment,
which is how its processes are found (a pid alone could have been reused).

Run by path with ``python -I -S``: this file uses the standard library only, so it starts in
milliseconds without importing the package (which imports torch).
"""

from __future__ import annotations

import ctypes
import os
import re
import secrets
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

JOB_ENV = "DGL_ZEROCOPY_JOB"
SHM_DIR = Path("/dev/shm")
FOLDER_PREFIX = "dgl-zerocopy-cluster-"
JOB_RE = re.compile(r"dglzc(\d+)_(\d+)_[0-9a-f]{6}")
_PR_SET_PDEATHSIG = 1


def new_job_id() -> str:
    """A fresh job id of this process (see the module docstring)."""
    pid = os.getpid()
    return f"dglzc{pid}_{start_time(pid) or 0}_{secrets.token_hex(3)}"


def start_time(pid: int) -> int | None:
    """Start time of process ``pid`` in clock ticks since boot; None if it does not exist or is a zombie.
    0 where ``/proc`` cannot be read (not Linux)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return None
    except (OSError, IndexError):
        return 0 if process_exists(pid) else None
    return None if fields[0] in "ZX" else int(fields[19])  # field 22 of proc(5); fields[0] is field 3


def owner_alive(job: str) -> bool:
    """True while the launcher that made ``job`` runs (same pid and start time)."""
    found = JOB_RE.fullmatch(job)
    if found is None:
        raise ValueError(f"{job!r} is not a job id (dglzc{{pid}}_{{starttime}}_{{hex}})")
    pid, started = int(found.group(1)), int(found.group(2))
    now = start_time(pid)
    return now is not None and (now == started or 0 in (now, started))


def job_processes(job: str) -> list[int]:
    """Live processes (other than this one) whose environment carries ``JOB_ENV=job``."""
    needle = f"\0{JOB_ENV}={job}\0".encode()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        pid = int(entry.name)
        if pid != os.getpid() and _environ_has(pid, needle):
            found.append(pid)
    return found


def kill_job(job: str, timeout: float = 10.0) -> int:
    """SIGKILL every process of ``job`` (again, as long as new ones appear) and wait up to ``timeout``
    seconds until none is left; returns how many were killed."""
    needle = f"\0{JOB_ENV}={job}\0".encode()
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while True:
        pids = job_processes(job)
        if not pids or time.monotonic() > deadline:
            return len(killed)
        for pid in pids:
            if _kill_if(pid, needle):
                killed.add(pid)
        time.sleep(0.02)


def remove_job_files(job: str, folder: str | Path | None = None, shm_dir: Path = SHM_DIR) -> int:
    """Unlink the shared-memory segments of ``job`` and remove ``folder``; returns the segments removed."""
    removed = 0
    for path in shm_dir.glob(job + "*") if shm_dir.is_dir() else ():
        try:
            path.unlink()
            removed += 1
        except FileNotFoundError:
            pass
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
    return removed


def sweep(shm_dir: Path = SHM_DIR, tmp_dir: str | Path | None = None) -> tuple[int, int]:
    """Remove what dead jobs left: segments in ``shm_dir`` and folders in ``tmp_dir`` (default: the
    temporary directory) of jobs whose launcher is gone and of which no process is left. A live
    job's, and names not of this form, are never touched. Returns (segments, folders) removed."""
    tmp_dir = Path(tmp_dir if tmp_dir is not None else tempfile.gettempdir())
    entries: dict[str, list[Path]] = {}
    for folder, strip in ((shm_dir, ""), (tmp_dir, FOLDER_PREFIX)):
        for path in folder.glob(strip + "dglzc*") if folder.is_dir() else ():
            found = JOB_RE.match(path.name[len(strip) :])
            if found is not None:
                entries.setdefault(found.group(0), []).append(path)
    segments = folders = 0
    for job, paths in entries.items():
        if owner_alive(job) or job_processes(job):
            continue
        for path in paths:
            try:
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                    folders += 1
                else:
                    path.unlink()
                    segments += 1
            except FileNotFoundError:
                pass
            except OSError:  # another user's: theirs to remove
                pass
    return segments, folders


def process_exists(pid: int) -> bool:
    """Whether a process ``pid`` exists (another user's counts; a zombie too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _environ_has(pid: int, needle: bytes) -> bool:
    try:
        return needle in b"\0" + Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:  # gone, or another user's (not of our jobs)
        return False


def _kill_if(pid: int, needle: bytes) -> bool:
    """SIGKILL ``pid`` if it is (still) a process of the job. Through a pidfd where the system has
    them: the pidfd names the process checked, so a pid reused after the check is never signalled."""
    fd = None
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except (AttributeError, OSError):  # no pidfd (old kernel, not Linux): the check and the kill are microseconds apart
        pass
    try:
        if not _environ_has(pid, needle):
            return False
        if fd is not None:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
        return True
    except ProcessLookupError:
        return False
    finally:
        if fd is not None:
            os.close(fd)


def _exec(parent: int, command: list[str]) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the guard still stops the job when the launcher dies
        pass
    if os.getppid() != parent:  # the launcher died before the call: no signal would come
        os._exit(1)
    os.execvp(command[0], command)


def _guard(job: str, folder: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only the launcher's end of file ends the guard
    sys.stdin.buffer.read()
    kill_job(job)
    remove_job_files(job, folder)


def main(argv: list[str]) -> None:
    """``exec PARENT -- COMMAND...`` or ``guard JOB FOLDER`` (see the module docstring)."""
    if len(argv) >= 4 and argv[0] == "exec" and argv[2] == "--":
        _exec(int(argv[1]), argv[3:])
    elif len(argv) == 3 and argv[0] == "guard" and JOB_RE.fullmatch(argv[1]):
        _guard(argv[1], argv[2])
    else:
        sys.exit(f"usage: reaper.py exec PARENT -- COMMAND... | reaper.py guard JOB FOLDER (got {argv})")


if __name__ == "__main__":
    main(sys.argv[1:])
