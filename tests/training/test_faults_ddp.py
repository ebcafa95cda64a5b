"""Faults of a ``train --nproc`` job: its parent or a rank killed, SIGTERM. Nothing of the job may
outlive it (processes, shared memory, its temporary folder), and the terminal gets one line.

The slow tests run ``dgl-zerocopy train --nproc 2`` as a user would (a subprocess, its own
session and temporary directory) and kill part of it; the fast ones check each mend in a unit.
"""

from __future__ import annotations

import multiprocessing.util
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from conftest import REPO
from torch.multiprocessing.spawn import ProcessExitedException, ProcessRaisedException

from dgl_zerocopy import cli
from dgl_zerocopy.data import SyntheticSpec, load_dataset
from dgl_zerocopy.training import ddp, signals

# Seconds a job may take to start and print its first epoch (2 ranks importing torch and DGL:
# ~5 s on 2 idle cores, ~20 s on 2 busy ones), and to be gone after a fault.
START_LIMIT = 120
GONE_LIMIT = 20
SHM = Path("/dev/shm")
JOB = ["train", "--dataset", "synthetic", "--num-nodes", "3000", "--fanouts", "5,5", "--batch-size", "64", "--device", "cpu", "--nproc", "2", "--no-progress"]
KILLED_RANK = re.compile(r"dgl-zerocopy: error: rank (\d) \(pid (\d+)\) was killed by SIGKILL; the other ranks were stopped \(SIGKILL comes from ")


@pytest.fixture(scope="module")
def job_dataset() -> None:
    """The jobs' dataset generated and cached beforehand: its "generating ..." line stays off their stderr."""
    load_dataset("synthetic", synthetic=SyntheticSpec(num_nodes=3000), split_seed=0)


def _nothing(rank: int, world_size: int) -> int:
    return rank


# -- a job, killed in part ---------------------------------------------------------------------


class _ShmWatch:
    """The /dev/shm entries of one job, watched while it runs: those its processes (the parent, its
    ranks, the resource tracker, whatever they start) map or hold open, and torch's segments named
    with one of their pids (``torch_{pid}_...``). Polled every 0.1 s from the job's start until
    :meth:`stop`; the entries of other processes on the machine (another test session, a CI run)
    are never among them, whatever they make meanwhile.

    An entry is known by its inode: a semaphore's creator maps it under a temporary name, unlinked
    once linked as ``sem.mp-...`` (glibc's ``sem_open``), so its mapping reads "(deleted)". tmpfs
    numbers inodes from a counter: a file made later does not take the number of one removed."""

    def __init__(self, root: int) -> None:
        self.names: set[str] = set()
        self._inodes: set[int] = set()
        self._procs = {root: psutil.Process(root)}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.wait(0.1):
            self._poll()

    def _poll(self) -> None:
        # Every process seen stays watched (a rank whose parent was killed too); is_running() checks
        # its start time, so a pid reused by another process is not taken for it.
        live = {pid for pid, proc in self._procs.items() if proc.is_running()}
        for proc in psutil.process_iter(["ppid"]):  # children of the live ones (a grandchild listed first: next poll)
            if proc.info["ppid"] in live and proc.pid not in self._procs:
                self._procs[proc.pid] = proc
                live.add(proc.pid)
        for pid in live:
            self._inodes |= _shm_inodes(pid)
        pids = {str(pid) for pid in live}
        for entry in os.scandir(SHM) if SHM.is_dir() else ():
            if entry.inode() in self._inodes or (entry.name.startswith("torch_") and entry.name.split("_")[1] in pids):
                self.names.add(entry.name)

    def stop(self) -> set[str]:
        """Stop watching (once the job is gone); returns the entries seen."""
        self._done.set()
        self._thread.join()
        return self.names

    def left(self) -> list[str]:
        """The entries seen that are still in /dev/shm."""
        return sorted(n for n in self.names if (SHM / n).exists())


def _shm_inodes(pid: int) -> set[int]:
    """Inodes of the /dev/shm files that process ``pid`` maps (/proc/PID/maps) or holds open (/proc/PID/fd)."""
    inodes = set()
    try:
        with open(f"/proc/{pid}/maps") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)  # address, perms, offset, device, inode, path
                if len(fields) == 6 and fields[5].startswith("/dev/shm/"):
                    inodes.add(int(fields[4]))
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/dev/shm/"):
                    inodes.add(os.stat(f"/proc/{pid}/fd/{fd}").st_ino)
            except OSError:  # closed meanwhile
                pass
    except OSError:  # gone
        pass
    return inodes


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_gone(pids: set[int]) -> set[int]:
    """The pids still running after GONE_LIMIT seconds (none, it is hoped)."""
    deadline = time.monotonic() + GONE_LIMIT
    while time.monotonic() < deadline and not all(_gone(p) for p in pids):
        time.sleep(0.2)
    return {p for p in pids if not _gone(p)}


@contextmanager
def _job(tmp_path: Path, epochs: int = 100000):
    """``train --nproc 2`` in a session of its own, its temporary directory ``tmp_path``; yields
    the Popen once the first epoch line is out (``job.ranks``: the rank pids, ``job.pids``: every
    process of the job, ``job.shm``: its /dev/shm entries, complete after the ``with``). The whole
    session is killed on the way out, whatever happened."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "dgl_zerocopy.cli", *JOB, "--epochs", str(epochs)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    proc.shm = _ShmWatch(proc.pid)
    timer = threading.Timer(START_LIMIT + GONE_LIMIT, lambda: _killpg(proc.pid))
    timer.daemon = True
    timer.start()
    try:
        deadline = time.monotonic() + START_LIMIT
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line or line.startswith("epoch"):
                break
        if epochs > 10:
            assert line.startswith("epoch"), f"no epoch line within {START_LIMIT} s; stderr: {proc.stderr.read()[-2000:]}"
            children = psutil.Process(proc.pid).children(recursive=True)
            proc.ranks = [c.pid for c in children if "spawn_main" in " ".join(c.cmdline())]
            proc.pids = {proc.pid, *(c.pid for c in children)}
            assert len(proc.ranks) == 2, [c.cmdline() for c in children]
        yield proc
    finally:
        timer.cancel()
        _killpg(proc.pid)
        proc.communicate(timeout=GONE_LIMIT)
        proc.shm.stop()


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _folders(tmp_path: Path) -> list[Path]:
    return sorted(tmp_path.glob("dgl-zerocopy-ddp-*"))


@pytest.mark.slow  # a 2-rank CLI job; test_sigterm_in_train_unwinds_as_ctrl_c is the fast check
def test_sigterm_of_the_parent_stops_the_job_in_one_line_and_leaves_nothing(tmp_path, job_dataset):
    with _job(tmp_path) as job:
        assert [f.name.split("-")[3] for f in _folders(tmp_path)] == [str(job.pid)], "the folder names its owner"
        job.send_signal(signal.SIGTERM)
        out, err = job.communicate(timeout=GONE_LIMIT)
        assert job.returncode == 128 + signal.SIGTERM, err
        assert err.splitlines() == ["dgl-zerocopy: interrupted"], err
        assert _wait_gone(job.pids) == set(), "a process of the job outlived it"
    assert _folders(tmp_path) == []
    assert job.shm.left() == [], "the job's shared memory outlived it"


@pytest.mark.slow  # a 2-rank CLI job and a 1-rank launch; test_launch_sweeps_... is the fast check
def test_sigkill_of_the_parent_takes_the_ranks_and_the_next_launch_removes_its_folder(tmp_path, job_dataset, monkeypatch):
    with _job(tmp_path) as job:
        job.kill()
        out, err = job.communicate(timeout=GONE_LIMIT)
        assert _wait_gone(job.pids) == set(), "a rank or the resource tracker outlived the killed parent"
        assert err == "", err  # nothing left for the resource tracker to report
    assert len(_folders(tmp_path)) == 1  # its owner could not remove it ...
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert ddp.launch(_nothing, 1, backend="gloo", timeout=60) == [0]
    assert _folders(tmp_path) == []  # ... the next launch did
    assert job.shm.left() == [], "the job's shared memory outlived it"


@pytest.mark.slow  # a 2-rank CLI job; test_a_killed_rank_is_named_in_one_line is the fast check
def test_a_rank_killed_by_a_signal_ends_the_job_in_one_line_naming_it(tmp_path, job_dataset):
    with _job(tmp_path) as job:
        victim = job.ranks[1]
        os.kill(victim, signal.SIGKILL)
        out, err = job.communicate(timeout=ddp.ERROR_GRACE + GONE_LIMIT)
        assert job.returncode == 1, err
        lines = err.splitlines()
        assert len(lines) == 1 and KILLED_RANK.match(lines[0]), err
        assert int(KILLED_RANK.match(lines[0])[2]) == victim
        assert _wait_gone(job.pids) == set(), "a process of the job outlived it"
    assert _folders(tmp_path) == []
    assert job.shm.left() == [], "the job's shared memory outlived it"


@pytest.mark.slow  # a 2-rank CLI run; test_a_rank_exit_unlinks_its_semaphores is the fast check
def test_a_two_rank_run_ends_without_a_leaked_semaphore_warning(tmp_path, job_dataset):
    with _job(tmp_path, epochs=2) as job:
        out, err = job.communicate(timeout=START_LIMIT)
    assert job.returncode == 0, err
    assert "final test accuracy" in out
    assert "leaked semaphore" not in err and "Traceback" not in err, err
    assert _folders(tmp_path) == []
    assert job.shm.left() == [], "the job's shared memory outlived it"


# -- each mend in a unit -------------------------------------------------------------------------


# A stand-in job for the watch: the parent holds an entry open, its child maps one (its file closed),
# opens a named semaphore as multiprocessing does (mapped under a temporary name) and makes a
# torch-named entry with its pid, then both sleep until killed.
_SHM_CHILD = """
import _multiprocessing, mmap, os, sys, time
with open(f"/dev/shm/{sys.argv[1]}mapped", "w+b") as f:
    f.truncate(4096)
    mapped = mmap.mmap(f.fileno(), 4096)
semaphore = _multiprocessing.SemLock(1, 1, 1, f"/{sys.argv[1]}semaphore", False)
open(f"/dev/shm/torch_{os.getpid()}_0_0", "w").close()
time.sleep(120)
"""
_SHM_JOB = f"""
import subprocess, sys, time
held = open(f"/dev/shm/{{sys.argv[1]}}held", "w")
subprocess.Popen([sys.executable, "-c", {_SHM_CHILD!r}, sys.argv[1]])
time.sleep(120)
"""


@pytest.mark.skipif(not SHM.is_dir(), reason="no /dev/shm")
def test_the_watch_finds_a_jobs_own_shared_memory_and_no_other():
    prefix = f"dglzc-test-{os.getpid()}-"
    job = subprocess.Popen([sys.executable, "-c", _SHM_JOB, prefix], start_new_session=True)
    watch = _ShmWatch(job.pid)
    try:
        (SHM / f"{prefix}other").write_bytes(b"x")  # another process's, made while the job runs
        deadline = time.monotonic() + 30
        while len(watch.names) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        _killpg(job.pid)
        job.wait()
        watch.stop()
    try:
        torch_names = [n for n in watch.names if n.startswith("torch_")]
        assert len(torch_names) == 1, watch.names
        assert watch.left() == sorted([f"{prefix}held", f"{prefix}mapped", f"sem.{prefix}semaphore", *torch_names])  # left behind: the check fails
    finally:
        for path in [*SHM.glob(f"{prefix}*"), *SHM.glob(f"sem.{prefix}*"), *(SHM / n for n in watch.names)]:
            path.unlink(missing_ok=True)
    assert watch.left() == []


def test_a_dead_owners_folder_is_swept_and_a_live_ones_kept(tmp_path):
    me, start = os.getpid(), ddp._start_time(os.getpid())
    assert start is not None, "reads /proc/PID/stat"
    child = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ddp._start_time(child.pid) is None, "a zombie has exited: its folders are stale"
    child.wait()
    names = {
        "live": f"dgl-zerocopy-ddp-{me}-{start}-a1",  # this process: kept
        "reused": f"dgl-zerocopy-ddp-{me}-{start + 1}-b2",  # this pid, another process's start: swept
        "dead": f"dgl-zerocopy-ddp-{child.pid}-{start}-c3",  # no such process: swept
        "unnamed": "dgl-zerocopy-ddp-d4e5f6g7",  # an owner it cannot tell: kept
        "other": f"dgl-zerocopy-cluster-{child.pid}-{start}-e5",  # not launch's: kept
    }
    for name in names.values():
        (tmp_path / name).mkdir()
        (tmp_path / name / "store").write_text("x")
    (tmp_path / f"dgl-zerocopy-ddp-{child.pid}-{start}-f6").write_text("a file, not a folder: kept")
    removed = ddp._sweep_workdirs(tmp_path)
    assert sorted(p.name for p in removed) == sorted([names["reused"], names["dead"]])
    left = {p.name for p in tmp_path.iterdir()}
    assert left == {names["live"], names["unnamed"], names["other"], f"dgl-zerocopy-ddp-{child.pid}-{start}-f6"}


class _Stop(Exception):
    pass


def test_launch_sweeps_before_it_makes_its_own_folder(tmp_path, monkeypatch):
    stale = tmp_path / "dgl-zerocopy-ddp-999999999-1-x"  # beyond pid_max: no such process
    stale.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def mkdtemp(prefix: str):
        assert prefix == f"dgl-zerocopy-ddp-{os.getpid()}-{ddp._start_time(os.getpid())}-", prefix
        raise _Stop

    monkeypatch.setattr(ddp.tempfile, "mkdtemp", mkdtemp)
    with pytest.raises(_Stop):
        ddp.launch(_nothing, 1, backend="gloo")
    assert not stale.exists()


def test_a_killed_rank_is_named_in_one_line(tmp_path):
    ranks = [SimpleNamespace(pid=100 + r) for r in range(3)]
    # rank 1 killed; rank 0 raised next ("connection reset"), rank 2 still running when launch stopped it
    ddp._write(tmp_path / "error-0.pkl", (time.monotonic(), "Traceback ...\nRuntimeError: Connection reset by peer"))
    e = ddp._failure(ranks, tmp_path, {1: -signal.SIGKILL, 0: 1})
    assert (
        isinstance(e, ProcessExitedException) and e.signal_name == "SIGKILL" and (e.error_index, getattr(e, "error_pid", getattr(e, "pid", None))) == (1, 101)
    )  # torch 2.2: .pid
    assert str(e) == (
        "rank 1 (pid 101) was killed by SIGKILL; the other ranks were stopped (SIGKILL comes from `kill -9` or from the kernel's out-of-memory killer)"
    )
    e = ddp._failure(ranks, tmp_path / "none", {2: -signal.SIGTERM, 0: -signal.SIGKILL, 1: 0})
    assert str(e).startswith("rank 0 (pid 100) was killed by SIGKILL, and rank 2 (pid 102) was killed by SIGTERM (SIGKILL"), str(e)
    e = ddp._failure(ranks, tmp_path / "none", {1: 3})
    assert str(e) == "rank 1 (pid 101) exited with code 3 without reporting an error; the other ranks were stopped"
    assert "\n" not in str(e)


def test_a_ranks_error_travels_as_itself_beside_its_traceback(tmp_path):
    """The parent gets the rank's exception itself (``.error``), where it pickles, so that the
    command can print one of its own errors in one line; an error file of the older form has none."""
    from dgl_zerocopy.store.storage import BufferFullError

    ranks = [SimpleNamespace(pid=100 + r) for r in range(2)]
    ddp._write(tmp_path / "error-1.pkl", (time.monotonic(), "Traceback ...\nBufferFullError: the host buffer cannot hold this batch", BufferFullError("full")))
    ddp._write(tmp_path / "error-0.pkl", (time.monotonic(), "Traceback ...\nRuntimeError: Connection reset by peer"))
    e = ddp._failure(ranks, tmp_path, {0: 1, 1: 1})
    assert isinstance(e, ProcessRaisedException) and e.error_index == 1
    assert isinstance(e.error, BufferFullError) and str(e.error) == "full" and "BufferFullError: the host buffer" in str(e)
    (tmp_path / "error-1.pkl").unlink()
    assert ddp._failure(ranks, tmp_path, {0: 1, 1: 1}).error is None


def _raise_buffer_full(rank: int, world_size: int) -> None:
    from dgl_zerocopy.store.storage import BufferFullError

    raise BufferFullError(f"rank {rank} found the buffer full")


class _Unpicklable(Exception):
    def __reduce__(self):
        raise TypeError("not picklable")


def _raise_unpicklable(rank: int, world_size: int) -> None:
    raise _Unpicklable("a lock inside")


@pytest.mark.slow  # a spawned rank each (~5 s); test_a_ranks_error_travels_as_itself_beside_its_traceback is the fast check
def test_a_rank_sends_its_error_itself_or_its_traceback_alone():
    from dgl_zerocopy.store.storage import BufferFullError

    with pytest.raises(ProcessRaisedException) as raised:
        ddp.launch(_raise_buffer_full, 1, backend="gloo")
    assert isinstance(raised.value.error, BufferFullError) and str(raised.value.error) == "rank 0 found the buffer full"
    with pytest.raises(ProcessRaisedException) as raised:
        ddp.launch(_raise_unpicklable, 1, backend="gloo")
    assert raised.value.error is None and "_Unpicklable: a lock inside" in str(raised.value)


def test_the_cli_prints_a_killed_rank_in_one_line(monkeypatch, capsys):
    import dgl_zerocopy.training.train as train_module

    def train(*args, **kwargs):
        raise ProcessExitedException("rank 1 (pid 101) was killed by SIGKILL; the other ranks were stopped", 1, 101, -9, "SIGKILL")

    monkeypatch.setattr(train_module, "train", train)
    code = cli.main(["train", "--num-nodes", "300", "--epochs", "1", "--device", "cpu", "--no-progress"])
    assert code == 1
    assert capsys.readouterr().err == "dgl-zerocopy: error: rank 1 (pid 101) was killed by SIGKILL; the other ranks were stopped\n"


@pytest.mark.slow
def test_sigterm_in_train_unwinds_as_ctrl_c(tmp_path):
    # In a subprocess: without the handler, SIGTERM would end pytest itself.
    code = f"""
import os, signal, sys, time
import dgl_zerocopy.training.train as train_module
from dgl_zerocopy.cli import main

def train(*args, **kwargs):
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)
    finally:
        open({str(tmp_path / "unwound")!r}, "w").close()

train_module.train = train
code = main(["train", "--num-nodes", "300", "--epochs", "1", "--device", "cpu", "--no-progress"])
assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, "the handler outlived the command"
sys.exit(code)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 128 + signal.SIGTERM, r.stderr
    # The dataset's "generating ..." log line comes first when no earlier test left it in the cache.
    lines = [line for line in r.stderr.splitlines() if not line.startswith("generating ")]
    assert lines == ["dgl-zerocopy: interrupted"], r.stderr
    assert (tmp_path / "unwound").exists(), "the finally clauses did not run"


def test_an_ignored_sighup_stays_ignored():
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    try:
        with signals.signals_unwind():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:  # pytest's own handler stays too
                return
            assert signal.getsignal(signal.SIGTERM) is signals.terminate
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_a_rank_exit_unlinks_its_semaphores():
    # A spawned process's locks are named semaphores; os._exit skips the finalizers that unlink them.
    code = """
import multiprocessing, os
from dgl_zerocopy.training import ddp

lock = multiprocessing.get_context("spawn").Lock()
ddp._run_exit_finalizers()
os._exit(0)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "leaked semaphore" not in r.stderr, r.stderr


def test_the_private_multiprocessing_call_exists():
    assert callable(multiprocessing.util._run_finalizers)
