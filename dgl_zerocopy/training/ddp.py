"""Data-parallel processes on one machine: :func:`launch` runs a function in N spawned ranks, each
with a ``torch.distributed`` process group; :func:`share_dataset` hands a dataset to them without
copying its arrays.

One rank per GPU with NCCL (``torch.cuda.set_device(rank)``), or gloo ranks on the CPU. Ranks meet
through a ``FileStore`` in a private temporary folder, and their collectives connect over the
loopback interface only: nothing listens on, or talks to, another address.

Errors: a rank that raises ends the job. :func:`launch` raises
``torch.multiprocessing.ProcessRaisedException`` with the traceback of the rank that failed
*first* (its original exception type and message, not the "connection closed" that its peers see
next; the exception itself as ``.error`` where it pickles, else None), once every rank has stopped: the others get :data:`ERROR_GRACE` seconds to exit by
themselves, then they are killed. A rank that dies without a Python error (a signal, ``os._exit``)
gives ``ProcessExitedException`` when no rank raised, its message one line naming the rank, its
pid and the signal or exit code. No process outlives :func:`launch`: ranks are killed when it
returns or raises, and die with the parent process if that is killed.

Nothing is left behind either. The temporary folder is removed when :func:`launch` returns or
raises (Ctrl-C, or SIGTERM turned into an exception by the caller, as ``dgl-zerocopy train`` does).
A parent killed outright (SIGKILL, the OOM killer) cannot remove it: its name carries the owner's
pid and start time, ``dgl-zerocopy-ddp-{pid}-{start}-*``, and the next :func:`launch` on the
machine removes every such folder whose owner is no longer running. A rank runs multiprocessing's
exit finalizers before it leaves, so the locks and queues it made leave no named semaphore.
"""

from __future__ import annotations

import ctypes
import datetime
import multiprocessing.connection
import multiprocessing.util
import os
import pickle
import re
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from ..store.cache_files import start_time as _start_time  # one process's identity: its pid and start time
from .shared_dataset import SharedDataset, share_dataset

__all__ = ["SharedDataset", "launch", "share_dataset"]  # sharing lives in .shared_dataset; its names stay importable here

#: Seconds a collective (or the rendezvous) may wait for a peer before it fails.
DEFAULT_TIMEOUT = 600.0
#: Seconds the other ranks get, after a rank failed, to exit by themselves before they are killed.
ERROR_GRACE = 5.0
_POLL = 0.2  # seconds between checks of the error files while joining
#: Memory one gloo rank holds of its own before its share of the work: the interpreter with torch,
#: DGL and a process group (measured with psutil on torch 2.2 / DGL 2.1: 388 MiB unique, 626 MiB
#: resident after the imports; a Cora rank of ``train --nproc 2`` peaked at 448 MiB unique, 770 MiB
#: resident, the dataset shared; 64 Cora ranks took 23.3 GB before their first epoch), rounded up.
RANK_BYTES = 512 << 20


def cpu_rank_limit(nproc: int, rank_bytes: int = RANK_BYTES) -> tuple[int, str] | None:
    """None when ``nproc`` gloo ranks can run here, else ``(most, why)``: the most ranks that can,
    and what bounds them. A rank needs a core of its own (``sched_getaffinity``: more ranks than
    cores time-share them, and every collective waits for the rank that is descheduled) and
    ``rank_bytes`` of memory (against psutil's available memory: beyond it the machine swaps or
    the OOM killer ends the job part way). Refused rather than capped: ``nproc`` sets each rank's
    share of the batch, so running fewer ranks than asked would quietly change the training."""
    cores = _usable_cores()
    if nproc > cores:
        return cores, f"gloo ranks on the CPU need a core each, and {cores} are usable here"
    available = _available_memory()
    fits = available // rank_bytes
    if nproc > fits:
        return max(1, fits), (
            f"each gloo rank needs about {rank_bytes / 2**20:.0f} MiB of its own (torch, DGL, its process group), "
            f"and {available / 2**30:.1f} GiB of memory is available, enough for {fits}"
        )
    return None


def launch(fn: Callable[..., Any], nproc: int, *args, backend: str | None = None, timeout: float = DEFAULT_TIMEOUT, threads: int | None = None) -> list:
    """Run ``fn(rank, world_size, *args)`` in ``nproc`` spawned processes and return what each
    returned, in rank order.

    ``fn`` must be picklable (a module-level function), and so must ``args`` and its return
    value; tensors in shared memory (``share_memory_()``, :func:`share_dataset`) are passed by
    handle, not copied. ``backend``: ``"nccl"`` (one rank per GPU; rank ``r`` uses ``cuda:r``) or
    ``"gloo"`` (the CPU); default NCCL where CUDA is available, else gloo. ``timeout``: seconds a
    collective may wait for a peer. ``threads``: torch (and OpenMP) threads per rank (default: the
    usable CPU cores divided by ``nproc``, at least 1).
    """
    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
        raise ValueError(f"nproc must be a positive integer, but got {nproc!r}")
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend not in ("nccl", "gloo"):
        raise ValueError(f"backend must be 'nccl' or 'gloo', but got {backend!r}")
    if backend == "nccl" and nproc > torch.cuda.device_count():
        raise ValueError(
            f"backend 'nccl' runs one rank per GPU: nproc {nproc} needs {nproc} GPUs, but "
            f"{torch.cuda.device_count()} are visible; lower nproc or use backend 'gloo'"
        )
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, but got {timeout!r}")
    if threads is None:
        # The ranks share the machine's cores: N ranks each with every core would oversubscribe them
        # (on 2 cores, 2 ranks x 2 threads run slower than 2 x 1), so each gets its share.
        threads = max(1, _usable_cores() // nproc)
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer, but got {threads!r}")
    if backend == "gloo" and nproc > 1 and (limit := cpu_rank_limit(nproc)) is not None:  # before any process or folder
        raise ValueError(f"nproc {nproc} is more than this machine can run: {limit[1]}; use nproc {limit[0]} or less")
    _sweep_workdirs()
    workdir = Path(tempfile.mkdtemp(prefix=f"{_WORKDIR_PREFIX}{os.getpid()}-{_start_time(os.getpid()) or 0}-"))
    processes: list = []
    try:
        # torch.multiprocessing's context: its pickler sends shared tensors as handles.
        context = torch.multiprocessing.get_context("spawn")
        with _child_environment(threads):
            for rank in range(nproc):
                process = context.Process(
                    target=_run_rank, name=f"ddp-rank-{rank}", args=(rank, os.getpid(), fn, nproc, backend, str(workdir), float(timeout), threads, args)
                )
                process.start()  # pickles the arguments: an unpicklable one raises here, and the finally stops the others
                processes.append(process)
        _join(processes, workdir)
        return [_result(workdir, rank) for rank in range(nproc)]
    finally:
        _stop(processes)
        shutil.rmtree(workdir, ignore_errors=True)


# -- in each rank ------------------------------------------------------------------------------
def _run_rank(rank: int, parent: int, fn: Callable, world_size: int, backend: str, workdir: str, timeout: float, threads: int, args: tuple) -> None:
    """A rank's life: process group up, ``fn``, its result or error written, process group down."""
    _die_with(parent)
    import torch.distributed as dist

    loopback = _loopback_interface()
    if loopback is not None:  # gloo's pairs and NCCL's bootstrap sockets on 127.0.0.1 only
        os.environ["GLOO_SOCKET_IFNAME"] = os.environ["NCCL_SOCKET_IFNAME"] = loopback
    torch.set_num_threads(threads)
    if backend == "nccl":
        torch.cuda.set_device(rank)
    folder = Path(workdir)
    code = 0
    try:
        dist.init_process_group(backend, init_method=(folder / "store").as_uri(), rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=timeout))
        _write(folder / f"result-{rank}.pkl", fn(rank, world_size, *args))
    except Exception as error:  # noqa: BLE001 - every error goes to the parent, with its traceback
        # Written before the process group goes down (which makes the peers fail next), with the
        # time, so the parent can tell the first error from its consequences; with the error itself
        # where it pickles (ProcessRaisedException.error: the command prints its own errors in one line).
        report = (time.monotonic(), traceback.format_exc())
        try:
            _write(folder / f"error-{rank}.pkl", (*report, error))
        except Exception:  # noqa: BLE001 - an error that does not pickle: its traceback alone
            _write(folder / f"error-{rank}.pkl", report)
        code = 1
    except KeyboardInterrupt:  # Ctrl-C reaches every rank too: the parent reports it, once
        code = 130
    finally:
        # No destroy_process_group() and no interpreter teardown: with torch 2.2.1's gloo a rank could
        # block there for good once its peer had exited (a rank of bench/training/ddp.py stuck in it for minutes,
        # its result already written). The outcome is on disk; flush and leave without destructors.
        sys.stdout.flush()
        sys.stderr.flush()
        _run_exit_finalizers()
        os._exit(code)


def _run_exit_finalizers() -> None:
    """What a normal exit runs first: multiprocessing's finalizers of priority 0 and up. In a
    spawned process every Lock, RLock, Event or Queue is a *named* semaphore, registered with the
    parent's resource tracker and unlinked by a finalizer that ``os._exit`` skips; left to the
    tracker, they end the job with "There appear to be N leaked semaphore objects"."""
    try:
        multiprocessing.util._run_finalizers(0)
    except Exception:  # noqa: BLE001 - the rank's outcome is written; its exit must not fail here
        pass


def _die_with(parent: int) -> None:
    """Be killed when the parent process dies (Linux ``PR_SET_PDEATHSIG``), even in a collective."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the parent's finally still stops the ranks
        return
    if os.getppid() != parent:  # the parent died before the call: no signal would come
        os._exit(1)


def _write(path: Path, value: Any) -> None:
    tmp = path.with_suffix(".tmp")
    with tmp.open("wb") as f:
        pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
    tmp.replace(path)  # whole or absent: the parent never reads half a file


# -- in the parent -----------------------------------------------------------------------------
def _join(processes: list, workdir: Path) -> None:
    """Wait for every rank. After the first failure (an error written, or a rank exiting with a
    non-zero code) the others get ERROR_GRACE seconds to exit, then are killed, and the first
    error is raised."""
    running = {p.sentinel: rank for rank, p in enumerate(processes)}
    exited: dict[int, int] = {}  # rank -> exit code, of the ranks that exited by themselves
    failed_at = None
    while running:
        for sentinel in multiprocessing.connection.wait(list(running), timeout=_POLL):
            rank = running.pop(sentinel)
            processes[rank].join()
            exited[rank] = processes[rank].exitcode
        if failed_at is None and (any(exited.values()) or _errors(workdir)):
            failed_at = time.monotonic()
        if failed_at is not None and time.monotonic() - failed_at > ERROR_GRACE:
            break
    if failed_at is None:
        return
    _stop(processes)
    raise _failure(processes, workdir, exited)


def _errors(workdir: Path) -> list[tuple[float, int, str, BaseException | None]]:
    """``(time, rank, traceback, the error or None)`` of every rank that reported an error, earliest first."""
    found = []
    for path in workdir.glob("error-*.pkl"):
        with path.open("rb") as f:
            when, text, *error = pickle.load(f)
        found.append((when, int(path.stem.split("-")[1]), text, error[0] if error else None))
    return sorted(found, key=lambda e: e[:2])


def _failure(processes: list, workdir: Path, exited: dict[int, int]) -> Exception:
    """The exception for a failed job, naming what happened to every rank that failed.

    The cause: a rank killed by a signal (other than launch's; a Python error in a peer makes a
    rank raise, not die), else the earliest Python error, else a rank's non-zero exit code. A rank
    that died without a Python error gives a ``ProcessExitedException`` of one line (what the
    command prints), e.g. ``rank 1 (pid 4242) was killed by SIGKILL; the other ranks were stopped``."""
    from torch.multiprocessing.spawn import ProcessExitedException, ProcessRaisedException

    errors = _errors(workdir)
    raised = {rank for _, rank, *_ in errors}
    died = {rank: code for rank, code in exited.items() if code != 0 and rank not in raised}  # without a Python error
    killed = sorted(set(range(len(processes))) - set(exited))
    signalled = sorted(rank for rank, code in died.items() if code < 0)
    cause = signalled[0] if signalled else errors[0][1] if errors else min(died)
    pid = processes[cause].pid
    if cause in died:
        code = died[cause]
        message = f"rank {cause} (pid {pid}) {_exit_text(code)}"
        message += "".join(f", and rank {r} (pid {processes[r].pid}) {_exit_text(c)}" for r, c in sorted(died.items()) if r != cause)
        stopped = sorted(raised | set(killed))  # the peers that failed next, or were still running
        if stopped:
            others = len(stopped) == len(processes) - len(died)
            message += f"; {'the other ranks were' if others else 'rank(s) ' + ', '.join(map(str, stopped)) + ' were'} stopped"
        if code == -signal.SIGKILL:
            message += " (SIGKILL comes from `kill -9` or from the kernel's out-of-memory killer)"
        return ProcessExitedException(message, cause, pid, code, _signal_name(code))
    notes = [f"rank {r} {_exit_text(c)}" for r, c in sorted(died.items())]
    notes += [f"rank {r} raised {_last_line(text)}" for _, r, text, _ in errors if r != cause]
    notes += [f"rank(s) {killed} stopped by launch"] if killed else []
    note = f" (then: {'; '.join(notes)})" if notes else ""
    text, error = next((text, error) for _, r, text, error in errors if r == cause)
    failure = ProcessRaisedException(f"\n\n-- Process {cause} terminated with the following error{note}:\n{text}", cause, pid)
    failure.error = error  # the rank's exception itself, or None where it did not pickle
    return failure


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else "?"


def _signal_name(code: int) -> str | None:
    if code >= 0:
        return None
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _exit_text(code: int) -> str:
    if code < 0:
        return f"was killed by {_signal_name(code)}"
    if code == 130:  # _run_rank's code for a KeyboardInterrupt
        return "was interrupted (SIGINT)"
    return f"exited with code {code} without reporting an error"


def _result(workdir: Path, rank: int):
    path = workdir / f"result-{rank}.pkl"
    if not path.exists():  # e.g. a rank interrupted by Ctrl-C exits without a result
        raise RuntimeError(f"rank {rank} exited without a result (interrupted?)")
    with path.open("rb") as f:
        return pickle.load(f)


def _stop(processes: list) -> None:
    """Kill and reap every rank still running (idempotent)."""
    for process in processes:
        if process.is_alive():
            process.kill()
    for process in processes:
        process.join()


@contextmanager
def _child_environment(threads: int):
    """OMP_NUM_THREADS for the children while they start (unless the user set it): OpenMP reads it
    when torch and DGL load, before a rank's code runs; DGL's sampling threads follow it."""
    if "OMP_NUM_THREADS" in os.environ:
        yield
        return
    os.environ["OMP_NUM_THREADS"] = str(threads)
    try:
        yield
    finally:
        del os.environ["OMP_NUM_THREADS"]


def _available_memory() -> int:
    """Bytes of memory available to new processes without swapping (psutil's estimate)."""
    import psutil

    return int(psutil.virtual_memory().available)


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _loopback_interface() -> str | None:
    names = {name for _, name in socket.if_nameindex()}
    return next((n for n in ("lo", "lo0") if n in names), None)


# -- what a killed job left -------------------------------------------------------------------
_WORKDIR_PREFIX = "dgl-zerocopy-ddp-"
_WORKDIR_NAME = re.compile(re.escape(_WORKDIR_PREFIX) + r"(\d+)-(\d+)-")


def _sweep_workdirs(root: str | Path | None = None) -> list[Path]:
    """Remove the temporary folders of :func:`launch` jobs whose owner is no longer running (it
    was killed before its clean-up ran); return them. A folder whose owner runs (same pid, same
    start time) is kept, and so are folders of other users and names of another form. Nothing
    is removed without ``/proc``, where an owner's life cannot be told."""
    if _start_time(os.getpid()) is None:
        return []
    removed = []
    for path in Path(root or tempfile.gettempdir()).glob(f"{_WORKDIR_PREFIX}*"):
        match = _WORKDIR_NAME.match(path.name)
        if match is None or _start_time(int(match[1])) == int(match[2]):
            continue
        try:
            if path.is_symlink() or not path.is_dir() or path.stat().st_uid != os.getuid():
                continue
        except OSError:  # removed meanwhile (by another launch's sweep)
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed
