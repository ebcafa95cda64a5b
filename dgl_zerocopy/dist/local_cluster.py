"""``launch-local``: a DistDGL job on one host, servers and trainers as processes on 127.0.0.1.

What DGL's launch tool does on a cluster (one server and one trainer per machine here, each
machine a partition), done with local processes: an ``ip_config`` of ``127.0.0.1 PORT`` lines
(free ports of the loopback interface; nothing is probed beyond it), each server started with
DGL's ``DGL_ROLE=server`` environment, then the trainers with the client environment and
``torch.distributed``'s (gloo over 127.0.0.1) and the servers' pids for their watchdog
(:mod:`dgl_zerocopy.dist.watchdog`). Every process also gets its machine id and a
per-machine shared-memory prefix (:mod:`dgl_zerocopy.dist.single_host`), the two fixes DGL 2.1
needs to run several machines on one host.

The launcher supervises: a trainer that fails, or a server that exits while trainers run, stops
the whole job within about a second with :class:`ClusterError` naming the process, its exit code
and the end of its log. At the end (success, failure, timeout or Ctrl-C) every process is
stopped and every shared-memory segment under the job's prefix unlinked. Stopped means SIGKILL:
DGL's own SIGTERM handler exits from inside the handler, prints "User pressed Ctrl+C" and C++'s
"terminate called without an active exception", and can hang in its teardown for seconds; a
killed process leaves nothing that the launcher does not remove.

Nothing outlives the launcher either (:mod:`.reaper`): each process is killed by the kernel when
the launcher dies, a guard process removes the job's segments and folder then, and each launch
sweeps what jobs with a dead launcher left. Trainer 0's stdout is the launcher's; its stderr goes
to its log, shown after a successful job and at the end of the error of a failed one, so that
the terminal shows the launcher's one message, not what the stopped processes said.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import reaper
from .single_host import MACHINE_ID_ENV, SHM_PREFIX_ENV
from .watchdog import SERVER_PIDS_ENV

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
SERVER_LOST_WAIT = 0.5  # seconds the trainers get to see a lost server themselves before they are stopped
_REAPER = Path(reaper.__file__)


class ClusterError(RuntimeError):
    """A local DistDGL job that failed: which process, how, and the end of its log."""


@dataclass
class _Proc:
    role: str  # "server" or "trainer"
    index: int
    popen: subprocess.Popen
    log: Path  # its stderr (and stdout, except trainer 0's)

    @property
    def name(self) -> str:
        return f"{self.role} {self.index} (pid {self.popen.pid})"


@dataclass
class LocalJob:
    """What :func:`launch_local` ran: the job's shared-memory prefix, ip_config and the exit codes."""

    shm_prefix: str
    ip_config: Path
    ports: list[int]
    server_codes: list[int | None] = field(default_factory=list)
    trainer_codes: list[int | None] = field(default_factory=list)
    segments_removed: int = 0
    seconds: float = 0.0
    trainer_threads: int = 0


def trainer_threads(num_parts: int, cpus: int | None = None) -> int:
    """OpenMP threads per trainer when ``num_parts`` trainers share this host's ``cpus`` (default:
    ``os.cpu_count()``): DGL's launch tool's rule, half the cores split among the trainers, at
    least 1. The other half is the servers' and the samplers'. Without it every trainer's torch
    takes every core, and on a small host a gather waits for a descheduled thread."""
    cpus = cpus if cpus is not None else (os.cpu_count() or 1)
    return max(cpus // 2 // num_parts, 1)


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on 127.0.0.1 now (bound and released; a race is possible, as with any such probe)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def write_ip_config(path: str | Path, ports: Sequence[int]) -> Path:
    """DGL's ip_config: one ``127.0.0.1 PORT`` line per machine (machine ``i`` is line ``i``)."""
    path = Path(path)
    path.write_text("".join(f"{HOST} {p}\n" for p in ports))
    return path


def launch_local(
    command: Sequence[str],
    part_config: str | Path,
    num_parts: int,
    *,
    timeout: float | None = None,
    env: dict[str, str] | None = None,
    log_dir: str | Path | None = None,
    start_timeout: float = 120.0,
    grace: float = 10.0,
    poll: float = 0.1,
) -> LocalJob:
    """Run ``command`` as ``num_parts`` DistDGL servers and ``num_parts`` trainers on 127.0.0.1; return when all trainers succeed.

    ``command``: the argv each process runs (DGL's convention: the training script also serves,
    ``dgl.distributed.initialize`` never returns in a server). ``part_config``: DGL's partition
    config (``<graph_name>.json``) of ``num_parts`` partitions. Trainer 0 writes to this process's
    stdout; its stderr, and the others' output, go to logs in ``log_dir`` (default: a temporary
    folder, removed at the end); trainer 0's stderr is copied to this process's stderr after a
    successful job. ``timeout``: seconds for the whole job, from this call (None: no limit);
    ``start_timeout``: for the servers to listen; ``grace``: for the processes to exit after the
    trainers asked the servers to shut down. Servers run one OpenMP thread, trainers
    :func:`trainer_threads` unless ``OMP_NUM_THREADS`` is set (in ``env`` or here). Raises
    :class:`ClusterError` on any failure, after stopping every process and removing the job's
    shared memory and temporary folder; the same when interrupted (``KeyboardInterrupt``) or
    killed (:mod:`.reaper`)."""
    command = [str(c) for c in command]
    if not command:
        raise ValueError("command is empty: pass the argv of the training process, e.g. [sys.executable, 'train.py']")
    if shutil.which(command[0]) is None:
        raise ValueError(f"command {command[0]!r} is not an executable file or on PATH; pass the argv of the training process")
    if not isinstance(num_parts, int) or num_parts < 1:
        raise ValueError(f"num_parts must be a positive integer, but got {num_parts!r}")
    part_config = Path(part_config).resolve()
    if not part_config.is_file():
        raise FileNotFoundError(f"partition config {str(part_config)!r} does not exist; make it with `dgl-zerocopy partition`")
    omp = (env or {}).get("OMP_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS") or str(trainer_threads(num_parts))
    if not omp.isdigit() or int(omp) < 1:
        raise ValueError(f"OMP_NUM_THREADS must be a positive integer (threads per trainer), but got {omp!r}")
    start = time.monotonic()
    deadline = None if timeout is None else start + timeout
    swept = reaper.sweep()
    if any(swept):
        log.info("removed %d shared-memory segment(s) and %d folder(s) left by launch-local jobs whose launcher died", *swept)
    prefix = reaper.new_job_id()  # unique per job: names of concurrent jobs never meet
    servers: list[_Proc] = []
    trainers: list[_Proc] = []
    work = guard = None
    try:
        work = Path(tempfile.mkdtemp(prefix=f"{reaper.FOLDER_PREFIX}{prefix}-"))
        job = LocalJob(prefix, work / "ip_config.txt", [], trainer_threads=int(omp))
        guard = _start_guard(prefix, work)
        logs = Path(log_dir) if log_dir is not None else work
        logs.mkdir(parents=True, exist_ok=True)
        ports = free_ports(num_parts + 1)
        job.ports = ports[:num_parts]
        write_ip_config(job.ip_config, job.ports)
        base = {
            **os.environ,
            **(env or {}),
            reaper.JOB_ENV: prefix,
            "DGL_IP_CONFIG": str(job.ip_config),
            "DGL_NUM_SERVER": "1",
            "DGL_NUM_CLIENT": str(num_parts),
            "DGL_CONF_PATH": str(part_config),
            "DGL_GRAPH_FORMAT": "csc",
            "DGL_NUM_SAMPLER": "0",
            "DGL_DIST_MAX_TRY_TIMES": os.environ.get("DGL_DIST_MAX_TRY_TIMES", "10"),
        }
        for i in range(num_parts):
            servers.append(
                _start(
                    "server",
                    i,
                    command,
                    {**base, "DGL_ROLE": "server", "DGL_SERVER_ID": str(i), "OMP_NUM_THREADS": "1", MACHINE_ID_ENV: str(i), SHM_PREFIX_ENV: f"{prefix}m{i}_"},
                    logs,
                )
            )
        _wait_listening(servers, job.ports, start_timeout, poll, timeout, deadline)
        for i in range(num_parts):
            trainers.append(
                _start(
                    "trainer",
                    i,
                    command,
                    {
                        **base,
                        "DGL_ROLE": "client",
                        "DGL_DIST_MODE": "distributed",
                        "DGL_GROUP_ID": "0",
                        "OMP_NUM_THREADS": omp,
                        "RANK": str(i),
                        "LOCAL_RANK": "0",
                        "WORLD_SIZE": str(num_parts),
                        "MASTER_ADDR": HOST,
                        "MASTER_PORT": str(ports[-1]),
                        MACHINE_ID_ENV: str(i),
                        SHM_PREFIX_ENV: f"{prefix}m{i}_",
                        SERVER_PIDS_ENV: ",".join(str(p.popen.pid) for p in servers),
                    },
                    logs,
                    keep_stdout=i == 0,
                )
            )
        _supervise(servers, trainers, timeout, deadline, poll, grace)
        _wait_servers(servers, grace)
        _replay_stderr(trainers[0])
    finally:
        _stop(trainers + servers)
        reaper.kill_job(prefix)  # one started but not yet listed (an interrupt inside _start)
        removed = reaper.remove_job_files(prefix, work)
        if removed:
            log.debug("removed %d shared-memory segments left under %s", removed, prefix)
        if guard is not None:
            _end_guard(guard)
    job.server_codes = [p.popen.returncode for p in servers]
    job.trainer_codes = [p.popen.returncode for p in trainers]
    job.segments_removed = removed
    job.seconds = time.monotonic() - start
    return job


def _start_guard(job: str, work: Path) -> subprocess.Popen:
    """The job's guard (:mod:`.reaper`): it cleans up when this process exits without doing so."""
    return subprocess.Popen(
        [sys.executable, "-I", "-S", str(_REAPER), "guard", job, str(work)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True
    )


def _end_guard(guard: subprocess.Popen) -> None:
    guard.stdin.close()  # its end of file: it finds nothing left and exits
    try:
        guard.wait(timeout=10)
    except subprocess.TimeoutExpired:
        log.warning("the job's guard (pid %d) did not exit within 10 s; killing it", guard.pid)
        guard.kill()
        guard.wait()


def _start(role: str, index: int, command: list[str], env: dict[str, str], logs: Path, keep_stdout: bool = False) -> _Proc:
    path = logs / f"{role}{index}.log"
    with path.open("wb") as out:
        # Through the reaper's exec mode: the process is killed by the kernel if this one dies.
        # A session of its own: stopping the process group stops what it started (DGL's sampler pool).
        popen = subprocess.Popen(
            [sys.executable, "-I", "-S", str(_REAPER), "exec", str(os.getpid()), "--", *command],
            env=env,
            stdout=None if keep_stdout else out,
            stderr=out,
            start_new_session=True,
        )
    log.debug("started %s %d: pid %d", role, index, popen.pid)
    return _Proc(role, index, popen, path)


def _replay_stderr(trainer: _Proc) -> None:
    """Trainer 0's stderr (warnings, logging) to this process's stderr, once the job has succeeded."""
    text = trainer.log.read_text(errors="replace") if trainer.log is not None and trainer.log.is_file() else ""
    if text:
        sys.stderr.write(text if text.endswith("\n") else text + "\n")
        sys.stderr.flush()


def _wait_listening(servers: list[_Proc], ports: list[int], start_timeout: float, poll: float, job_timeout: float | None, job_deadline: float | None) -> None:
    """Wait until every server listens on its port (read from /proc/net/tcp: nothing is sent to it),
    at most ``start_timeout`` seconds and not past the job's deadline."""
    deadline = time.monotonic() + start_timeout
    while True:
        for p in servers:
            if p.popen.poll() is not None:
                raise ClusterError(_failure(p, "exited while starting"))
        listening = _listening_ports()
        if listening is None:  # no /proc (not Linux): DGL's clients retry their connection every 3 s
            return
        if all(port in listening for port in ports):
            return
        waiting = ", ".join(p.name for p, port in zip(servers, ports) if port not in listening)
        if job_deadline is not None and time.monotonic() > job_deadline:
            raise ClusterError(f"the job did not finish within its timeout of {job_timeout:g} s ({waiting} still starting); stopped {len(servers)} processes")
        if time.monotonic() > deadline:
            raise ClusterError(f"{waiting} did not listen within {start_timeout:.0f} s; raise start_timeout for a large partition")
        time.sleep(poll)


def _listening_ports() -> set[int] | None:
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return None
    ports = set()
    for line in lines:
        fields = line.split()
        if len(fields) > 3 and fields[3] == "0A":  # TCP_LISTEN
            ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _supervise(servers: list[_Proc], trainers: list[_Proc], timeout: float | None, deadline: float | None, poll: float, grace: float) -> None:
    """Return when every trainer exited with 0; raise at the first failure, or past ``deadline``.

    A server that exits with code 0 was shut down by the trainers (DGL's ``exit_client``: after a
    barrier of all trainers, rank 0 tells the servers to stop), so the trainers get ``grace``
    seconds to finish their exit; a server that exits with another code (killed, crashed) stops
    the job within :data:`SERVER_LOST_WAIT` seconds."""
    shutdown_seen: float | None = None
    while True:
        running = ", ".join(t.name for t in trainers if t.popen.poll() is None)
        for p in servers:  # first: a lost server is the cause of whatever its trainers do next
            code = p.popen.poll()
            if code is not None and code != 0:
                _wait_exit(trainers, SERVER_LOST_WAIT)  # their watchdogs see it within 0.2 s: their exit codes say so
                codes = ", ".join(
                    f"trainer {t.index} " + ("still blocked, stopped" if t.popen.returncode is None else f"exit code {t.popen.returncode}") for t in trainers
                )
                raise ClusterError(
                    _failure(
                        p,
                        f"exited with code {code}{_signal_name(code)} while {running or 'the trainers'} "
                        f"still ran; their requests to it cannot be served, so the job was stopped ({codes})",
                    )
                )
            if code == 0 and shutdown_seen is None:
                shutdown_seen = time.monotonic()
        failed = [p for p in trainers if p.popen.returncode not in (None, 0)]
        if failed:  # seen in the same poll: one killed by a signal is the cause rather than a peer that lost it
            p = min(failed, key=lambda t: (t.popen.returncode >= 0, t.index))
            raise ClusterError(_failure(p, f"failed with exit code {p.popen.returncode}{_signal_name(p.popen.returncode)}"))
        if all(p.popen.returncode == 0 for p in trainers):
            return
        if shutdown_seen is not None and time.monotonic() - shutdown_seen > grace:
            raise ClusterError(f"the servers shut down but {running} did not exit within {grace:.0f} s; stopped the job")
        if deadline is not None and time.monotonic() > deadline:
            raise ClusterError(f"the job did not finish within its timeout of {timeout:g} s; stopped {len(servers) + len(trainers)} processes")
        time.sleep(poll)


def _wait_exit(procs: list[_Proc], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(p.popen.poll() is None for p in procs):
        time.sleep(0.05)


def _signal_name(code: int) -> str:
    if code < 0:
        try:
            return f" ({signal.Signals(-code).name})"
        except ValueError:
            pass
    return ""


def _wait_all(procs: list[_Proc], seconds: float, least: float, late: str) -> None:
    """Wait for ``procs`` to exit, ``seconds`` for them all (at least ``least`` each); one that does
    not is logged as ``late % (name, seconds)``."""
    deadline = time.monotonic() + seconds
    for p in procs:
        try:
            p.popen.wait(timeout=max(least, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.warning(late, p.name, seconds)


def _wait_servers(servers: list[_Proc], grace: float) -> None:
    """The trainers' exit tells the servers to shut down; give them ``grace`` seconds."""
    _wait_all(servers, grace, 0.0, "%s did not shut down within %.0f s after the trainers finished; stopping it")


def _stop(procs: list[_Proc], wait: float = 5.0) -> None:
    """SIGKILL the process group of each process still running and reap it (see the module docstring for why not SIGTERM)."""
    alive = [p for p in procs if p.popen.poll() is None]
    for p in alive:
        try:
            os.killpg(p.popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _wait_all(alive, wait, 0.1, "%s did not exit within %.0f s of SIGKILL")


def _failure(p: _Proc, what: str, lines: int = 20) -> str:
    tail = ""
    if p.log is not None and p.log.is_file():
        text = p.log.read_text(errors="replace").splitlines()[-lines:]
        tail = f"\n--- last lines of {p.role} {p.index}'s log ---\n" + "\n".join(text)
    return f"{p.name} {what}{tail}"
