"""Nothing of a ``launch-local`` job outlives it, and its failures reach the terminal as the launcher's message.

Faults: the launcher killed (SIGKILL, SIGTERM, Ctrl-C), a trainer killed, a server killed, the
timeout. After each, within a bounded time, no process of the job (found by ``DGL_ZEROCOPY_JOB``
in its environment, or the job id in its command line: the guard), no shared-memory segment
under the job's prefix and no temporary folder of the job may be left, and stderr holds the
launcher's message only: nothing of what DGL says when it is stopped.

The fast tier does not depend on how busy the machine is: a clean-up is waited for as an event
(the processes gone, the pipes closed) within a bound meant only to end a hang, and each clock
bound is at least 10x what it measures on an idle 2-core machine (the value is beside it); that
the job's processes were stopped with SIGKILL, so that DGL's SIGTERM teardown never ran, is read
in their logs rather than from a clock. The tight timings are the slow tier's, on real DGL.

The fast tier runs the launcher with stand-in processes (``fault_worker.py``: no DGL, they start in
milliseconds, and take 3 s over SIGTERM as DGL's handler can); the slow tier runs the real
``dgl-zerocopy launch-local`` on two DistDGL partitions, and prints the times that docs/distributed.md
("When things fail") gives: ``pytest -m slow tests/dist/test_faults_cluster.py -k launch_local -rP``.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from conftest import REPO, SMALL

from dgl_zerocopy.data import load_dataset
from dgl_zerocopy.dist import ClusterError, launch_local, local_cluster, partition_dataset, reaper

WORKER = Path(__file__).resolve().parent / "fault_worker.py"
SHM = Path("/dev/shm")
DGL_NOISE = ("User pressed Ctrl+C", "terminate called")
# Seconds for a dead job's processes, segments and folder to go, and for a stopped launcher's pipes to
# close: only a hang's limit (idle, 2 cores: at most 0.05 s after the launcher's exit, 0.03 s from its
# Ctrl-C to its exit); the tests wait for the event itself.
CLEAN_WITHIN = 30.0


def _left(owner: int) -> dict[str, list]:
    """What is left of the jobs launched by process ``owner``: processes, segments, folders."""
    tag = f"dglzc{owner}_"
    procs = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            environ = (entry / "environ").read_bytes()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if f"{reaper.JOB_ENV}={tag}".encode() in environ or tag.encode() in cmdline:
            if int(entry.name) != os.getpid():
                procs.append(int(entry.name))
    return {
        "processes": procs,
        "segments": sorted(p.name for p in SHM.glob(tag + "*")),
        "folders": sorted(p.name for p in Path(tempfile.gettempdir()).glob(f"{reaper.FOLDER_PREFIX}{tag}*")),
    }


def _wait_clean(owner: int, seconds: float = CLEAN_WITHIN) -> float:
    """Seconds until nothing of ``owner``'s jobs is left; past ``seconds``, removes it and fails the test."""
    start = time.monotonic()
    while any(_left(owner).values()):
        if time.monotonic() - start > seconds:
            left = _left(owner)
            _remove_left(owner)
            pytest.fail(f"left {seconds:.0f} s after the job ended: {left}")
        time.sleep(0.05)
    return time.monotonic() - start


def _remove_left(owner: int) -> None:
    """Kill and remove whatever of ``owner``'s jobs is left (a failed test cleans up after itself)."""
    left = _left(owner)
    for pid in left["processes"]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for name in left["segments"]:
        (SHM / name).unlink(missing_ok=True)
    for name in left["folders"]:
        shutil.rmtree(Path(tempfile.gettempdir()) / name, ignore_errors=True)


def _wait_for(path: Path, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear within {seconds:.0f} s"
        time.sleep(0.02)


@pytest.fixture
def fake(tmp_path):
    """(part_config, results folder) for stand-in jobs; after the test, nothing of this process's jobs is left."""
    config = tmp_path / "graph.json"
    config.write_text("{}")  # launch_local only checks that it exists; the stand-ins do not read it
    results = tmp_path / "results"
    results.mkdir()
    yield config, results
    _wait_clean(os.getpid())


def _stopped_with_sigkill(logs: Path) -> None:
    """Every stand-in's log (kept in ``logs``) shows that it was stopped without its SIGTERM handler,
    which prints DGL's lines then takes 3 s: the launcher stops a job with SIGKILL."""
    texts = {p.name: p.read_text(errors="replace") for p in sorted(logs.glob("*.log"))}
    assert sorted(texts) == ["server0.log", "server1.log", "trainer0.log", "trainer1.log"], sorted(texts)
    for name, text in texts.items():
        assert "started" in text and not any(noise in text for noise in DGL_NOISE), (name, text)


def _kill_when_ready(path: Path, killed_at: list) -> threading.Thread:
    """SIGKILL the stand-in whose pid ``path`` holds once all four run; the time goes to ``killed_at``."""

    def kill():
        for name in ("server0", "server1", "trainer0", "trainer1"):
            _wait_for(path.with_name(name))
        killed_at.append(time.monotonic())
        os.kill(int(path.read_text()), signal.SIGKILL)

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


# -- the fast tier: stand-ins ------------------------------------------------------------------
def test_sweep_removes_what_dead_jobs_left_and_nothing_else(tmp_path):
    shm, tmp = tmp_path / "shm", tmp_path / "tmp"
    shm.mkdir()
    tmp.mkdir()
    dead = _reaped_pid()
    me, started = os.getpid(), reaper.start_time(os.getpid())
    jobs = {
        "dead": f"dglzc{dead}_123_abcdef",  # its launcher is gone
        "reused": f"dglzc{me}_{started + 1}_abcdef",  # its launcher's pid now names another process
        "live": f"dglzc{me}_{started}_abcdef",  # this process's own
        "running": f"dglzc{dead}_456_fedcba",  # launcher gone, but a process of the job runs (its guard's at work)
    }
    for job in jobs.values():
        (shm / f"{job}m0_cora_node_meta").write_bytes(b"x")
        (tmp / f"{reaper.FOLDER_PREFIX}{job}-q1w2").mkdir()
        (tmp / f"{reaper.FOLDER_PREFIX}{job}-q1w2" / "server0.log").write_text("log")
    others = ["dglzctest123_x", f"dglzc{dead}x", "cora_node_meta"]  # not of the form: never touched
    for name in others:
        (shm / name).write_bytes(b"x")
    (tmp / "dgl-zerocopy-cluster-abc").mkdir()
    runner = subprocess.Popen(["sleep", "30"], env={**os.environ, reaper.JOB_ENV: jobs["running"]})
    try:
        assert reaper.sweep(shm, tmp) == (2, 2)
    finally:
        runner.kill()
        runner.wait()
    kept = {job for job in jobs.values() if (shm / f"{job}m0_cora_node_meta").exists()}
    assert kept == {jobs["live"], jobs["running"]}
    assert {p.name.split("-")[3] for p in tmp.glob(f"{reaper.FOLDER_PREFIX}dglzc*")} == kept
    assert all((shm / name).exists() for name in others) and (tmp / "dgl-zerocopy-cluster-abc").is_dir()
    assert reaper.sweep(shm, tmp) == (1, 1)  # the running job's process has ended: now it goes


def _reaped_pid() -> int:
    """The pid of a process that existed and is gone (reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_lost_server_stops_the_job_within_a_second_and_the_terminal_shows_one_message(fake, tmp_path, capfd):
    config, results = fake
    killed_at: list = []
    killer = _kill_when_ready(results / "server1", killed_at)
    with pytest.raises(ClusterError) as error:
        launch_local([sys.executable, str(WORKER), str(results), "run"], config, 2, timeout=60, log_dir=tmp_path / "logs")
    stopped_after = time.monotonic() - killed_at[0]
    killer.join()
    # SERVER_LOST_WAIT (0.5 s: the trainers' time to see it) + a poll + the stop: 0.56 s idle. Not the job's
    # timeout (60 s); that the stop was a SIGKILL, not DGL's 3 s SIGTERM teardown, the logs say.
    assert local_cluster.SERVER_LOST_WAIT <= stopped_after < 6.0, stopped_after
    _stopped_with_sigkill(tmp_path / "logs")
    assert re.match(r"server 1 \(pid \d+\) exited with code -9 \(SIGKILL\) while trainer 0", str(error.value))
    assert "trainer 0 still blocked, stopped, trainer 1 still blocked, stopped" in str(error.value)
    _wait_clean(os.getpid())
    out, err = capfd.readouterr()
    for noise in (*DGL_NOISE, "trainer 0: started"):  # trainer 0's stderr is in its log, not on the terminal
        assert noise not in out + err


def test_a_killed_trainer_is_the_one_named(fake, tmp_path):
    config, results = fake
    killed_at: list = []
    _kill_when_ready(results / "trainer1", killed_at)
    with pytest.raises(ClusterError) as error:  # a slow poll: trainer 0's exit (code 1, its peer gone) is seen with trainer 1's
        launch_local([sys.executable, str(WORKER), str(results), "run"], config, 2, timeout=60, poll=0.5, log_dir=tmp_path / "logs")
    assert time.monotonic() - killed_at[0] < 5.0  # a poll (0.5 s) and the stop: 0.47 s idle; not the job's timeout (60 s)
    _stopped_with_sigkill(tmp_path / "logs")
    assert re.match(r"trainer 1 \(pid \d+\) failed with exit code -9 \(SIGKILL\)\n--- last lines of trainer 1's log ---\ntrainer 1: started", str(error.value))


def test_the_timeout_stops_the_job_on_time_and_quietly(fake, tmp_path, capfd):
    config, results = fake
    start = time.monotonic()
    with pytest.raises(ClusterError, match=r"^the job did not finish within its timeout of 2 s; stopped 4 processes$"):
        launch_local([sys.executable, str(WORKER), str(results), "run"], config, 2, timeout=2, log_dir=tmp_path / "logs")
    took = time.monotonic() - start
    assert 2.0 <= took < 21.0, took  # not before its timeout; 2.04 s idle (the slow tier times it on DGL)
    _stopped_with_sigkill(tmp_path / "logs")  # DGL's SIGTERM handler (3 s here) never runs
    out, err = capfd.readouterr()
    assert not any(noise in out + err for noise in DGL_NOISE), err


def test_the_timeout_bounds_the_servers_start_too(fake):
    config, results = fake
    start = time.monotonic()
    with pytest.raises(ClusterError, match=r"^the job did not finish within its timeout of 1 s \(server 0 \(pid \d+\), server 1 \(pid \d+\) still starting\)"):
        launch_local([sys.executable, str(WORKER), str(results), "deaf"], config, 2, timeout=1)
    assert time.monotonic() - start < 11.0  # 1.05 s idle; not start_timeout (120 s)


def test_a_job_that_succeeds_shows_trainer_0s_stderr_after_it(fake, capfd):
    config, results = fake
    job = launch_local([sys.executable, str(WORKER), str(results), "finish"], config, 2, timeout=60)
    assert job.trainer_codes == [0, 0] and job.server_codes == [0, 0]
    out, err = capfd.readouterr()
    assert err == "trainer 0: started\ntrainer 0: a warning\n"  # trainer 1's and the servers' stay in their logs


# A launcher process that starts in 0.1 s instead of 2-4 s: the package's __init__ (torch) is skipped, the
# dist modules that launch_local needs use the standard library only. SIGTERM unwinds as in `dgl-zerocopy`.
# SIGINT raises KeyboardInterrupt as in a terminal, whatever pytest inherited: a pytest started in the
# background by a shell without job control (`make test &`, a CI script) has SIGINT ignored, its children
# inherit that, and Python keeps an ignored SIGINT ignored; the launcher then never saw the test's Ctrl-C
# (the job kept running until the test gave up: "communicate timed out, returncode -9").
LAUNCHER = """
import signal, sys, types
from pathlib import Path
for name, path in (("dgl_zerocopy", Path("dgl_zerocopy")), ("dgl_zerocopy.dist", Path("dgl_zerocopy/dist"))):
    sys.modules[name] = types.ModuleType(name)
    sys.modules[name].__path__ = [str(path.resolve())]
from dgl_zerocopy.dist.local_cluster import launch_local

def terminated(signum, frame):
    raise KeyboardInterrupt

signal.signal(signal.SIGTERM, terminated)
signal.signal(signal.SIGINT, signal.default_int_handler)
try:
    launch_local([sys.executable, sys.argv[1], sys.argv[2], "run"], sys.argv[3], 2, timeout=120)
except KeyboardInterrupt:
    print("interrupted", file=sys.stderr)
    sys.exit(130)
"""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_killed_launcher_leaves_nothing(fake, sig):
    config, results = fake
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(WORKER), str(results), str(config)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        for name in ("server0", "server1", "trainer0", "trainer1"):
            _wait_for(results / name)
        assert _left(launcher.pid)["processes"] and _left(launcher.pid)["segments"] and _left(launcher.pid)["folders"]
        launcher.send_signal(sig)
        out, err = launcher.communicate(timeout=CLEAN_WITHIN)  # its stdout and stderr close when the job's processes are gone
        _wait_clean(launcher.pid)
    finally:
        launcher.kill()
        launcher.wait()
        _remove_left(launcher.pid)
    assert launcher.returncode == (-9 if sig == signal.SIGKILL else 130)
    assert err == ("" if sig == signal.SIGKILL else "interrupted\n")  # nothing of the stopped processes


def test_the_next_launch_sweeps_what_a_job_killed_with_its_guard_left(fake, caplog):
    # The launcher and its guard both SIGKILLed (the guard first): the kernel kills the job's processes,
    # but nothing of the job is left to remove its segments and folder. A real launch_local removes them
    # before it starts its own job.
    config, results = fake
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(WORKER), str(results), str(config)], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for name in ("server0", "server1", "trainer0", "trainer1"):
            _wait_for(results / name)
        guards = [pid for pid in _left(launcher.pid)["processes"] if b"guard" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")]
        assert len(guards) == 1, _left(launcher.pid)
        os.kill(guards[0], signal.SIGKILL)
        launcher.kill()
        launcher.wait()
        deadline = time.monotonic() + CLEAN_WITHIN
        while _left(launcher.pid)["processes"]:
            assert time.monotonic() < deadline, f"the job's processes outlived their launcher: {_left(launcher.pid)}"
            time.sleep(0.05)
        left = _left(launcher.pid)
        assert len(left["segments"]) == 4 and len(left["folders"]) == 1, left  # one per stand-in, the job's folder
        (results / "next").mkdir()
        with caplog.at_level(logging.INFO, logger="dgl_zerocopy.dist.local_cluster"):
            job = launch_local([sys.executable, str(WORKER), str(results / "next"), "finish"], config, 2, timeout=60)
        assert job.trainer_codes == [0, 0]
        assert _left(launcher.pid) == {"processes": [], "segments": [], "folders": []}
        swept = re.search(r"removed (\d+) shared-memory segment\(s\) and (\d+) folder\(s\) left by launch-local jobs whose launcher died", caplog.text)
        assert swept and int(swept[1]) >= 4 and int(swept[2]) >= 1, caplog.text  # and any other dead job's on this machine
    finally:
        launcher.kill()
        launcher.wait()
        _remove_left(launcher.pid)


# -- the slow tier: dgl-zerocopy launch-local on DistDGL -----------------------------------------
TRAIN = ["--fanouts", "5,5", "--batch-size", "200", "--epochs", "100000", "--hidden", "16", "--eval-every", "1000", "--device", "cpu"]


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    return partition_dataset(load_dataset("synthetic", synthetic=SMALL), 2, tmp_path_factory.mktemp("faults") / "parts").folder


class Job:
    """``dgl-zerocopy launch-local --parts 2 [FLAGS] -- train --dist PARTS ...``, its stdout read as it comes."""

    def __init__(self, parts: Path, *flags: str) -> None:
        command = [sys.executable, "-m", "dgl_zerocopy.cli", "launch-local", "--parts", "2", *flags, "--", "train", "--dist", str(parts), *TRAIN]
        self.started = time.monotonic()
        self.proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.out: list[str] = []
        self.reader = threading.Thread(target=lambda: self.out.extend(self.proc.stdout), daemon=True)
        self.reader.start()

    def wait_training(self, seconds: float = 180.0) -> None:
        deadline = time.monotonic() + seconds
        while not any(line.startswith("epoch") for line in self.out):
            assert self.proc.poll() is None, "".join(self.out) + self.proc.stderr.read()
            assert time.monotonic() < deadline, f"no epoch within {seconds:.0f} s: " + "".join(self.out)
            time.sleep(0.1)

    def process(self, role: str, index: int) -> int:
        """The pid of the job's server or trainer ``index`` (by its environment)."""
        for pid in _left(self.proc.pid)["processes"]:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            if f"DGL_ROLE={'client' if role == 'trainer' else role}".encode() in environ and f"DGL_ZEROCOPY_MACHINE_ID={index}".encode() in environ:
                return pid
        raise AssertionError(f"no {role} {index} among {_left(self.proc.pid)}")

    def stop(self) -> None:
        """Kill the launcher and whatever of its job is left (after a failed test)."""
        self.proc.kill()
        self.proc.wait()
        _remove_left(self.proc.pid)

    def end(self, seconds: float) -> tuple[int, str, float]:
        """(exit code, stderr, seconds from its start to its exit) within ``seconds``; kills it past
        them. ``self.ended``: when it exited (time.monotonic())."""
        try:
            self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"launch-local did not end within {seconds:.0f} s")
        self.ended = time.monotonic()
        err = self.proc.stderr.read()
        self.reader.join(timeout=10)
        return self.proc.returncode, err, self.ended - self.started


def _one_message(err: str) -> str:
    """The launcher's message: one line, then at most a log's tail; nothing DGL says when stopped."""
    assert not any(noise in err for noise in DGL_NOISE), err
    head = err.split("\n--- last lines of ")[0]
    assert head.count("\n") <= 1 and head.startswith("dgl-zerocopy: "), err
    return head.strip()


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=lambda s: s.name)
def test_launch_local_killed_leaves_nothing(parts, sig):
    job = Job(parts)
    try:
        job.wait_training()
        left = _left(job.proc.pid)
        assert len(left["processes"]) == 5 and len(left["segments"]) > 10 and len(left["folders"]) == 1  # 2 servers, 2 trainers, the guard
        job.proc.send_signal(sig)
        sent = time.monotonic()
        code, err, _ = job.end(15)
        assert _wait_clean(job.proc.pid) < 3.0
        clean = time.monotonic() - sent
    finally:
        job.stop()
    if sig == signal.SIGTERM:
        assert (code, err) == (143, "dgl-zerocopy: interrupted\n")  # as Ctrl-C, with 128 + SIGTERM as train gives
    else:
        assert (code, err) == (-9, "")
    print(f"measured: {sig.name} of the launcher: it exited {job.ended - sent:.2f} s after the signal, nothing of the job left {clean:.2f} s after it")


@pytest.mark.slow
@pytest.mark.parametrize("role", ["server", "trainer"])
def test_launch_local_with_a_killed_process_stops_within_seconds(parts, role):
    job = Job(parts)
    try:
        job.wait_training()
        os.kill(job.process(role, 1), signal.SIGKILL)
        killed = time.monotonic()
        code, err, _ = job.end(30)
        ended_after = job.ended - killed
        assert _wait_clean(job.proc.pid) < 3.0
        clean = time.monotonic() - killed
    finally:
        job.stop()
    message = _one_message(err)
    assert code == 1
    what = "exited with code -9 \\(SIGKILL\\) while" if role == "server" else "failed with exit code -9 \\(SIGKILL\\)"
    assert re.match(rf"dgl-zerocopy: error: {role} 1 \(pid \d+\) {what}", message), message
    assert ended_after < 4.0, ended_after  # the job stops within about a second; then the launcher's own exit (torch's teardown)
    print(f"measured: {role} 1 killed: the launcher exited {ended_after:.2f} s after the kill, nothing of the job left {clean:.2f} s after it")


@pytest.mark.slow
def test_launch_local_timeout_ends_the_job_on_time(parts):
    job = Job(parts, "--timeout", "15")
    try:
        code, err, took = job.end(60)
        assert _wait_clean(job.proc.pid) < 3.0
        clean = time.monotonic() - job.ended
    finally:
        job.stop()
    assert _one_message(err) == "dgl-zerocopy: error: the job did not finish within its timeout of 15 s; stopped 4 processes"
    assert code == 1 and 15 < took < 15 + 8, took  # + the launcher's start (importing torch) and exit, 2-4 s each on 2 busy cores
    print(f"measured: --timeout 15: the command took {took:.2f} s from its start to its exit, nothing of the job left {clean:.2f} s after its exit")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_the_launch_local_command_unwinds_sigterm_and_sighup_as_train_does(tmp_path, sig):
    # In a subprocess: without the handler, the signal would end pytest itself.
    code = f"""
import os, signal, sys, time
import dgl_zerocopy.dist.commands as commands
from dgl_zerocopy.cli import main

def launch_local(args):
    try:
        os.kill(os.getpid(), {int(sig)})
        time.sleep(30)
    finally:
        open({str(tmp_path / "unwound")!r}, "w").close()

commands.launch_local = launch_local
signal.signal({int(sig)}, signal.SIG_DFL)  # as a terminal leaves it (under nohup SIGHUP arrives ignored, and stays so)
code = main(["launch-local", "--parts", "2", "--", "train", "--dist", "x"])
assert signal.getsignal({int(sig)}) is signal.SIG_DFL, "the handler outlived the command"
sys.exit(code)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 128 + sig, r.stderr
    assert r.stderr.splitlines() == ["dgl-zerocopy: interrupted"], r.stderr
    assert (tmp_path / "unwound").exists(), "the launcher's finally clauses did not run"
