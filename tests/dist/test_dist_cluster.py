"""Two DistDGL partitions on 127.0.0.1: servers and trainers as processes (``launch_local`` and the
``dgl-zerocopy`` commands). Every job is bounded by a timeout, talks only to 127.0.0.1, and each
test checks that no process and no shared-memory segment of the job is left behind.

These run the two single-host fixes (machine id per process, shared-memory names per machine):
without them both trainers would see partition 0 as local and the servers would overwrite each
other's shared memory, and the rows would not equal the originals.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, SHARED_DATA, SMALL

from dgl_zerocopy.data import load_dataset
from dgl_zerocopy.dist import ClusterError, launch_local, partition_dataset, trainer_threads

pytestmark = pytest.mark.slow

LIMIT = 240  # seconds for one job: 4 processes importing torch and DGL on 2 busy cores
WORKER = Path(__file__).resolve().parent / "dist_worker.py"


def _children() -> set[int]:
    """Live (not zombie) processes whose parent is this one."""
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and fields[0] != "Z":
            out.add(int(stat.parent.name))
    return out


def _segments() -> list[Path]:
    return sorted(Path("/dev/shm").glob(f"dglzc{os.getpid()}*"))


@pytest.fixture
def clean():
    before = _children()
    yield
    deadline = time.monotonic() + 10
    while _children() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _children() - before
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left behind: {left}"
    assert not _segments(), f"shared memory left behind: {_segments()}"


@pytest.fixture(scope="module")
def two_parts(tmp_path_factory):
    dataset = load_dataset("synthetic", synthetic=SMALL)
    folder = tmp_path_factory.mktemp("two")
    np.save(folder / "features.npy", dataset.features)
    np.save(folder / "labels.npy", dataset.labels)
    return partition_dataset(dataset, 2, folder / "parts", method="metis"), folder


def test_two_partitions_rows_equal_the_originals_and_the_split_is_counted(two_parts, tmp_path, clean):
    info, originals = two_parts
    results = tmp_path / "results"
    results.mkdir()
    job = launch_local(
        [sys.executable, str(WORKER), "fetch", str(info.folder), str(originals), str(results)], info.part_config, 2, timeout=LIMIT, log_dir=tmp_path / "logs"
    )
    assert job.trainer_codes == [0, 0] and job.server_codes == [0, 0]
    config = json.loads(info.part_config.read_text())
    sizes = [b - a for a, b in config["node_map"]["_N"]]
    reports = [json.loads((results / f"trainer{m}.json").read_text()) for m in range(2)]
    for machine, r in enumerate(reports):
        assert r["machine"] == r["part_id"] == machine  # the machine-id fix: trainer 1 is machine 1
        assert r["rows_equal"] and r["labels_equal"] and r["loader_equal"]
        assert r["local_rows"] == sizes[machine]  # its own server's partition (the shared-memory fix)
        assert (r["all_local"], r["all_remote"]) == (sizes[machine], info.num_nodes - sizes[machine])
        assert r["batches"] == -(-r["owned"] // 200)
        assert (r["stats_local"], r["stats_remote"]) == (r["loader_local"], r["loader_remote"])
        assert r["loader_local"] > 0 and r["loader_remote"] > 0  # a halo reaches into the other partition
        assert r["loader_local"] + r["loader_remote"] == r["counted"]
        for mix in ("all_remote", "one_local", "one_remote", "duplicates", "empty", "after_failure", "after_pull_failure"):
            assert r[f"{mix}_equal"], (machine, mix)
        assert r["failure_raised"] and r["pull_failure_raised"]
        assert r["pull_threads_left"] == 0  # each fetch joins its pull thread
        assert r["omp_threads"] == job.trainer_threads == int(os.environ.get("OMP_NUM_THREADS") or trainer_threads(2))


def test_a_server_that_dies_fails_the_trainers_within_seconds(two_parts, tmp_path, clean):
    info, originals = two_parts
    results, logs = tmp_path / "results", tmp_path / "logs"
    results.mkdir()
    started = []
    import dgl_zerocopy.dist.local_cluster as cluster

    real_start = cluster._start

    def start(*args, **kwargs):
        started.append(real_start(*args, **kwargs))
        return started[-1]

    killed_at = []

    def kill_server_when_ready():
        deadline = time.monotonic() + LIMIT
        while time.monotonic() < deadline and not all((results / f"ready{m}").exists() for m in range(2)):
            time.sleep(0.1)
        time.sleep(0.5)
        killed_at.append(time.monotonic())
        os.kill(started[1].popen.pid, signal.SIGKILL)  # server 1

    cluster._start = start
    killer = threading.Thread(target=kill_server_when_ready, daemon=True)
    try:
        killer.start()
        with pytest.raises(ClusterError) as error:
            launch_local(
                [sys.executable, str(WORKER), "loop", str(info.folder), str(originals), str(results)], info.part_config, 2, timeout=LIMIT, log_dir=logs
            )
    finally:
        cluster._start = real_start
    failed_after = time.monotonic() - killed_at[0]
    assert failed_after < 3.0  # the launcher stops the job within about a second (SERVER_LOST_WAIT 0.5 s + a poll + the stop)
    message = str(error.value)
    assert re.search(r"server 1 \(pid \d+\) exited with code -9 \(SIGKILL\) while trainer 0", message), message
    # Each trainer ended within those seconds: by its watchdog's ServerLostError (exit code 1), by DGL's
    # own abort when the socket closed (SIGABRT), or stopped by the launcher when blocked inside DGL.
    ends = re.findall(r"trainer \d (exit code -?[1-9]\d*|still blocked, stopped)", message)
    assert len(ends) == 2, message[:600]


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``dgl-zerocopy ARGS``, bounded: past ``LIMIT`` it gets SIGTERM (launch-local then stops its
    servers and trainers and removes their shared memory), SIGKILL 15 s later, and the test fails."""
    command = [sys.executable, "-m", "dgl_zerocopy.cli", *args]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env={**os.environ, **(env or {})}) as proc:
        try:
            out, err = proc.communicate(timeout=LIMIT)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
            pytest.fail(f"dgl-zerocopy {' '.join(args)} did not finish within {LIMIT} s")
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def _accuracy(stdout: str) -> float:
    found = re.search(r"final test accuracy ([0-9.]+)", stdout)
    assert found, stdout[-3000:]
    return float(found.group(1))


CORA = [
    "--fanouts",
    "10,10",
    "--batch-size",
    "140",
    "--epochs",
    "20",
    "--hidden",
    "64",
    "--lr",
    "0.01",
    "--eval-every",
    "5",
    "--device",
    "cpu",
    "--no-progress",
]


@pytest.mark.skipif(not (SHARED_DATA / "planetoid").is_dir(), reason="needs ../shared/data/planetoid")
def test_launch_local_on_cora_reaches_single_machine_accuracy(tmp_path, clean):
    parts = tmp_path / "cora2"
    made = _cli("partition", "--dataset", "cora", "--data-root", str(SHARED_DATA), "--parts", "2", "--out", str(parts))
    assert made.returncode == 0, made.stderr[-3000:]
    assert "2 partition(s) of cora (metis)" in made.stdout
    dist = _cli("launch-local", "--parts", "2", "--timeout", str(LIMIT - 20), "--", "train", "--dist", str(parts), *CORA)
    assert dist.returncode == 0, dist.stdout[-3000:] + dist.stderr[-3000:]
    assert "launch-local: 2 server(s) and 2 trainer(s) on 127.0.0.1 finished" in dist.stdout
    assert len(re.findall(r"^epoch +19 \| loss", dist.stdout, re.M)) == 1  # trainer 0 prints, trainer 1 does not
    single = _cli("train", "--dataset", "cora", "--data-root", str(SHARED_DATA), *CORA)
    assert single.returncode == 0, single.stderr[-3000:]
    a, b = _accuracy(dist.stdout), _accuracy(single.stdout)
    assert a > 0.70 and b > 0.70, (a, b)  # GraphSAGE on Cora's public split: about 0.77 here
    assert abs(a - b) < 0.04, (a, b)  # within run-to-run noise (different seeds per trainer, different batches)


def test_cli_errors_are_one_line_with_the_fix(two_parts, tmp_path, clean):
    info, _ = two_parts
    wrong = _cli("launch-local", "--parts", "3", "--", "train", "--dist", str(info.folder))
    assert wrong.returncode == 2 and f"--parts 3 but {str(info.folder)!r} holds 2 partitions; pass --parts 2" in wrong.stderr
    no_dist = _cli("launch-local", "--parts", "2", "--", "train", "--epochs", "1")
    assert no_dist.returncode == 2 and "needs --dist OUT" in no_dist.stderr
    standalone = _cli("train", "--dist", str(info.folder), "--epochs", "1", env={"DGL_DIST_MODE": "standalone"})
    assert standalone.returncode == 2 and "standalone mode (DGL_DIST_MODE unset) runs one" in standalone.stderr
    missing = _cli("train", "--dist", str(tmp_path), "--epochs", "1")
    assert missing.returncode == 2 and "holds no partitions made by dgl-zerocopy" in missing.stderr
    busy = _cli("partition", "--dataset", "synthetic", "--num-nodes", "500", "--parts", "2", "--out", str(info.folder))
    assert busy.returncode == 2 and "already holds partitions; pass overwrite=True (--overwrite)" in busy.stderr
