"""Data-parallel training over one shared host table, with 2 gloo ranks on 127.0.0.1.

The ranks are started by ``dgl_zerocopy.training.ddp.launch`` (spawned processes, a FileStore rendezvous in
a temporary folder, collectives over the loopback interface). Every test that starts processes is
bounded: in this process by a watchdog that kills the test's children after ``LIMIT`` seconds (a
hung ``launch`` then fails, as its ranks died, instead of hanging the suite), for the command line
by subprocess timeouts; and every such test checks that no process is left behind.
"""

from __future__ import annotations

import collections
import dataclasses
import ipaddress
import multiprocessing.resource_tracker
import os
import pickle
import re
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch

dgl = pytest.importorskip("dgl")
psutil = pytest.importorskip("psutil")  # a dependency of DGL

from conftest import REPO  # noqa: E402

from dgl_zerocopy.training import ddp, shared_dataset  # noqa: E402
from dgl_zerocopy.training.config import ConfigError, TrainConfig, build_config  # noqa: E402
from dgl_zerocopy.training.ddp import SharedDataset, launch, share_dataset  # noqa: E402

# Seconds before a test's processes count as hung and are killed. Starting 2 ranks (Python, torch,
# DGL) takes ~4 s on 2 idle cores, ~14 s on 2 cores shared with other jobs; each test takes 10-50 s.
LIMIT = 90
SMAPS = Path("/proc/self/smaps")


# -- bounds and clean-up -------------------------------------------------------------------------


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


@contextmanager
def bounded(seconds: float = LIMIT):
    """Kill the children this block starts if it runs past ``seconds`` (then fail the test), and
    check on the way out that none of them is left."""
    multiprocessing.resource_tracker.ensure_running()  # spawn starts it once per process: not a rank, and it stays
    before = _children()
    fired = threading.Event()

    def kill() -> None:
        fired.set()
        for pid in _children() - before:
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                pass

    timer = threading.Timer(seconds, kill)
    timer.daemon = True
    timer.start()
    try:
        yield
    except BaseException:
        if fired.is_set():
            pytest.fail(f"the processes did not finish within {seconds} s; they were killed")
        raise
    finally:
        timer.cancel()
    if fired.is_set():
        pytest.fail(f"the processes did not finish within {seconds} s; they were killed")
    assert _children() - before == set(), "launch left a process behind"


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# -- what a rank measures --------------------------------------------------------------------------


def _mapping(address: int) -> dict:
    """The mapping of this process that holds ``address``: path, device, inode, Rss and Pss (kB)."""
    found = None
    with SMAPS.open() as smaps:
        for line in smaps:
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                if found is not None:
                    break
                fields = line.split(maxsplit=5)
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                if lo <= address < hi:
                    found = {"device": fields[3], "inode": int(fields[4]), "path": fields[5].strip() if len(fields) > 5 else ""}
            elif found is not None and line.split(":")[0] in ("Rss", "Pss"):
                found[line.split(":")[0]] = int(line.split()[1])
    if found is None:
        raise LookupError(f"no mapping holds 0x{address:x}")
    return found


def _inet_addresses() -> set[str]:
    """The local and remote addresses of this process's TCP/UDP sockets."""
    proc = psutil.Process()
    conns = proc.net_connections(kind="inet") if hasattr(proc, "net_connections") else proc.connections(kind="inet")
    return {c.laddr.ip for c in conns} | {c.raddr.ip for c in conns if c.raddr}


def _rank_report(rank: int, world_size: int, shared: SharedDataset, cfg: TrainConfig) -> dict:
    """One rank: the seeds our DataLoader gives it (use_ddp) over two epochs, the host pages of its
    FeatureStore's table, a model trained by the training loop, and its sockets."""
    import torch.distributed as dist

    from dgl_zerocopy import DataLoader, FeatureStore
    from dgl_zerocopy.training.train import _fit

    dataset = shared.open()
    table = torch.from_numpy(dataset.features)
    store = FeatureStore(dataset.features, backend="cpu", device="cpu")
    loader = DataLoader(
        dataset.to_dgl(),
        torch.from_numpy(dataset.train_idx),
        dgl.dataloading.NeighborSampler([3, 3]),
        use_ddp=True,
        ddp_seed=7,
        seed=7,  # opt-in: every epoch a new permutation of all seeds dealt out (DGL's fixed split is the default)
        batch_size=16,
        shuffle=True,
        features={"feat": store},
        labels={"label": torch.from_numpy(dataset.labels)},
    )
    epochs = []
    for _ in range(2):
        batches = []
        for input_nodes, output_nodes, blocks in loader:
            if not torch.equal(blocks[0].srcdata["feat"], table[input_nodes]):
                raise AssertionError("the gathered rows differ from the shared table's")
            batches.append(output_nodes.tolist())
        epochs.append(batches)
    for start in range(0, len(store), 1024):  # every page of the table, read through the store
        store.gather(torch.arange(start, min(start + 1024, len(store))))
    dist.barrier()  # both ranks have read every page ...
    mapping = _mapping(store._table.data_ptr())
    dist.barrier()  # ... and both have measured before either goes on
    history, model = _fit(cfg, dataset, torch.device("cpu"), None, False, rank, world_size)
    report = {
        "pid": os.getpid(),
        "batches_per_epoch": len(loader),
        "epochs": epochs,
        "mapping": mapping,
        "params": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "history": [(h.loss, h.train_acc, h.val_acc, h.test_acc) for h in history],
        "addresses": _inet_addresses(),
    }  # while the process group is up
    loader.close()
    store.close()
    # Nothing may hold the rank's exit (ogb's PyPI check, for one, ran in such threads).
    report["threads"] = sorted(t.name for t in threading.enumerate() if not t.daemon and t is not threading.main_thread())
    return report


def _wide(dataset, width: int = 1024):
    """``dataset`` with a ``width``-column table (its features repeated): 12 MB at 3,000 nodes, so that
    page counts are clear; an odd training set, so that the DDP split pads."""
    features = np.ascontiguousarray(np.tile(dataset.features, (1, width // dataset.features.shape[1])))
    return dataclasses.replace(dataset, features=features, train_idx=dataset.train_idx[:-1] if len(dataset.train_idx) % 2 == 0 else dataset.train_idx)


# -- the tests -----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(not SMAPS.exists(), reason="reads /proc/self/smaps (Linux)")
def test_two_ranks_split_the_seeds_train_in_step_over_one_shared_table(small_dataset):
    dataset = _wide(small_dataset)
    cfg = TrainConfig(model="sage", fanouts=[3, 3], batch_size=64, hidden=16, epochs=2, device="cpu", feature_source="cpu", seed=3)
    shared = share_dataset(dataset)
    assert shared.arrays["features"].is_shared() and len(shared.dataset.features) == 0, "sent as shared memory, not as an array"
    with bounded():
        reports = launch(_rank_report, 2, shared, cfg, backend="gloo", timeout=LIMIT)
    assert all(_gone(r["pid"]) for r in reports)

    # Seeds: per epoch, disjoint apart from DGL's padding, covering the training set, as many batches everywhere.
    train = dataset.train_idx.tolist()
    per_rank = -(-len(train) // 2)
    assert len(train) % 2 == 1 and per_rank * 2 - len(train) == 1  # one seed of padding
    for epoch in range(2):
        parts = [[s for batch in r["epochs"][epoch] for s in batch] for r in reports]
        assert [len(r["epochs"][epoch]) for r in reports] == [reports[0]["batches_per_epoch"]] * 2 == [-(-per_rank // 16)] * 2
        assert [len(p) for p in parts] == [per_rank, per_rank]
        assert all(len(set(p)) == len(p) for p in parts), "a rank got a seed twice"
        counts = collections.Counter(parts[0] + parts[1])
        assert set(counts) == set(train), "the ranks together cover the training set"
        assert sorted(counts.values()) == [1] * (len(train) - 1) + [2], "only the padding seed is on both ranks"
    for r in reports:
        assert set(r["epochs"][0][0]) != set(r["epochs"][1][0]), "a new order every epoch"
        assert {s for b in r["epochs"][0] for s in b} != {s for b in r["epochs"][1] for s in b}, "a new split every epoch"

    # Training: the same parameters on both ranks, changed from the initial ones; the all-reduced figures agree.
    from dgl_zerocopy.training.models import build_model
    from dgl_zerocopy.training.train import seed_everything

    seed_everything(cfg.seed)
    initial = build_model(cfg.model, dataset.features.shape[1], cfg.hidden, dataset.num_classes, len(cfg.fanouts), cfg.dropout).state_dict()
    params = [r["params"] for r in reports]
    assert params[0].keys() == params[1].keys() == initial.keys()
    for name in params[0]:
        assert torch.equal(params[0][name], params[1][name]), f"{name} differs between the ranks"
    assert any(not torch.equal(params[0][k], initial[k]) for k in initial), "training changed nothing"
    assert reports[0]["history"] == reports[1]["history"] and len(reports[0]["history"]) == cfg.epochs
    assert np.isfinite(reports[0]["history"]).all()

    # One table in host memory: both ranks' stores view the same shared pages, which the parent maps too.
    mine = _mapping(shared.arrays["features"].data_ptr())
    table_kb = dataset.features.nbytes // 1024
    for r in reports:
        m = r["mapping"]
        assert (m["device"], m["inode"], m["path"]) == (mine["device"], mine["inode"], mine["path"]), (m, mine)
        assert m["Rss"] >= 0.95 * table_kb, f"the rank did not read the whole table: {m}"
        # A private copy would count in full (Pss == Rss); shared pages are split between their 3 mappers.
        assert m["Pss"] == pytest.approx(m["Rss"] / 3, rel=0.15), f"the table is not shared by the parent and 2 ranks: {m}"

    # Loopback only, and nothing left running that would hold a rank's exit.
    for r in reports:
        assert r["threads"] == [], r["threads"]
        assert r["addresses"], "no socket seen: the check would prove nothing"
        assert all(ipaddress.ip_address(a).is_loopback for a in r["addresses"]), r["addresses"]


def _fail(rank: int, world_size: int, folder: str, how: str) -> None:
    import torch.distributed as dist

    Path(folder, f"pid-{rank}").write_text(str(os.getpid()))
    dist.barrier()  # both ranks are up
    if rank == 1:
        Path(folder, "failed-at").write_text(repr(time.time()))
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        # A non-daemon thread, which would hold a normal exit: the rank must leave all the same.
        threading.Thread(target=time.sleep, args=(600,)).start()
        raise ValueError("rank 1 failed on purpose")
    dist.all_reduce(torch.ones(1))  # rank 0 waits in a collective for a peer that never joins it
    time.sleep(600)


@pytest.mark.slow  # two 2-rank launches (raise, kill); the two-rank training above stays in the fast tier
def test_a_failing_rank_ends_the_job_at_once_with_its_own_error(tmp_path):
    from torch.multiprocessing.spawn import ProcessExitedException, ProcessRaisedException

    for how, error in (("raise", ProcessRaisedException), ("kill", ProcessExitedException)):
        folder = tmp_path / how
        folder.mkdir()
        with bounded():
            with pytest.raises(error) as raised:
                launch(_fail, 2, str(folder), how, backend="gloo", timeout=LIMIT)
            took = time.time() - float((folder / "failed-at").read_text())
        message = str(raised.value)
        pids = [int((folder / f"pid-{rank}").read_text()) for rank in range(2)]
        assert all(_gone(pid) for pid in pids), "a rank outlived launch"
        assert raised.value.error_index == 1, message
        if how == "raise":
            # The failing rank's own error, not the "connection closed" its peer saw next. The rank
            # leaves with os._exit once its error is written (its non-daemon thread cannot hold it),
            # so its peer fails next and is named as a consequence.
            assert "Process 1 terminated with the following error" in message
            assert message.rstrip().endswith("ValueError: rank 1 failed on purpose"), message
            assert "(then: rank 0 raised" in message, message
        else:
            assert message.startswith(f"rank 1 (pid {pids[1]}) was killed by SIGKILL; the other ranks were stopped"), message
            assert raised.value.signal_name == "SIGKILL"
        # Measured on 2 busy cores (load 9): 2.0 s after a kill, 5.4 s after the raise (the grace period).
        assert took < ddp.ERROR_GRACE + 4, f"{how}: launch raised {took:.1f} s after the failure"


def _cuda_rank(rank: int, world_size: int, shared: SharedDataset, cfg: TrainConfig) -> dict:
    from dgl_zerocopy import FeatureStore
    from dgl_zerocopy.training.train import _fit

    dataset = shared.open()
    ids = torch.randint(0, len(dataset.features), (4096,))
    with FeatureStore(dataset.features, backend="zerocopy", device=f"cuda:{rank}") as store:  # this rank's GPU reads the shared pages
        gathered = store.gather(ids).cpu()
    history, model = _fit(cfg, dataset, torch.device("cuda", rank), None, False, rank, world_size)
    return {
        "gathered": torch.equal(gathered, torch.from_numpy(dataset.features)[ids]),
        "params": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "history": [(h.loss, h.test_acc) for h in history],
    }


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
def test_two_gpus_train_in_step_over_one_pinned_host_table(small_dataset):
    cfg = TrainConfig(model="sage", fanouts=[3, 3], batch_size=64, hidden=16, epochs=2, device="cuda", feature_source="zerocopy", seed=3)
    with bounded():
        reports = launch(_cuda_rank, 2, share_dataset(small_dataset), cfg, backend="nccl", timeout=LIMIT)
    assert all(r["gathered"] for r in reports), "a rank's zero-copy gather differs from the table"
    for name, value in reports[0]["params"].items():
        assert torch.equal(value, reports[1]["params"][name]), f"{name} differs between the GPUs"
    assert reports[0]["history"] == reports[1]["history"] and np.isfinite(reports[0]["history"]).all()


# -- the command line ---------------------------------------------------------------------------

CLI = [
    "train",
    "--device",
    "cpu",
    "--num-nodes",
    "20000",
    "--fanouts",
    "5,5",
    "--hidden",
    "64",
    "--batch-size",
    "256",
    "--lr",
    "0.01",
    "--epochs",
    "2",
    "--no-progress",
]


def _cli(*args: str) -> subprocess.CompletedProcess:
    """``dgl-zerocopy`` in a session of its own: on a timeout its whole process group is killed."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "dgl_zerocopy.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        cwd=REPO,
        env=os.environ.copy(),
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=LIMIT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"dgl-zerocopy {' '.join(args)} did not finish within {LIMIT} s")
    deadline = time.monotonic() + 10  # the ranks are gone; multiprocessing's resource tracker follows its parent
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("a process of the command outlived it")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _accuracy(stdout: str) -> float:
    return float(re.search(r"final test accuracy ([0-9.]+)", stdout).group(1))


@pytest.mark.slow  # an accuracy run through the CLI, twice; test_two_ranks_split_the_seeds_... guards DDP in the fast tier
def test_train_with_two_processes_on_the_cpu_matches_one():
    two = _cli(*CLI, "--nproc", "2")
    assert two.returncode == 0, two.stdout[-2000:] + two.stderr[-4000:]
    assert "2 processes (DDP, gloo on the CPU), batch 128 per process" in two.stdout
    for epoch in range(2):  # rank 0 prints; a line from rank 1 would double it
        assert len(re.findall(rf"^epoch +{epoch} \| loss", two.stdout, re.M)) == 1, two.stdout
    assert two.stdout.count("final test accuracy") == 1 and "Traceback" not in two.stderr
    one = _cli(*CLI, "--nproc", "1")
    assert one.returncode == 0, one.stderr[-4000:]
    assert "processes (DDP" not in one.stdout
    # Measured with these settings, seeds 0-4: one process 0.753-0.786, two 0.740-0.785; the two
    # differ by 0.0005-0.013 at the same seed, and one seed's runs by up to 0.0075 (sampling threads).
    # The same global batch and number of steps: the difference should be that noise, not a trend.
    assert _accuracy(one.stdout) > 0.5, one.stdout  # 47 classes: chance is about 0.02
    assert abs(_accuracy(two.stdout) - _accuracy(one.stdout)) < 0.04, (_accuracy(one.stdout), _accuracy(two.stdout))


# -- bad input and sharing (no process started) ------------------------------------------------


def _noop(rank: int, world_size: int) -> int:
    return rank


def test_bad_process_counts_and_devices_fail_at_once(monkeypatch, capsys):
    from dgl_zerocopy import cli
    from dgl_zerocopy.training.train import resolve_device, train

    before = _children()
    for nproc in (0, -1, 1.5, "2", True, None):
        with pytest.raises(ValueError, match="nproc must be a positive integer"):
            launch(_noop, nproc)
    for kwargs, match in (({"backend": "mpi"}, "backend must be 'nccl' or 'gloo'"), ({"threads": 0}, "threads must be"), ({"timeout": 0}, "timeout must be")):
        with pytest.raises(ValueError, match=match):
            launch(_noop, 2, **kwargs)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="nproc 2 needs 2 GPUs, but 0 are visible"):
            launch(_noop, 2, backend="nccl")
    for nproc in (0, "two", 1.5):
        with pytest.raises(ConfigError, match="nproc"):
            build_config({}, {"nproc": nproc})

    # The command line: one line, exit 2.
    assert cli.main(["train", "--nproc", "0"]) == 2
    assert "nproc: Input should be greater than 0, but got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        cli.main(["train", "--nproc", "two"])
    assert exited.value.code == 2 and "--nproc: invalid int value: 'two'" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert cli.main(["train", "--nproc", "2", "--device", "cuda"]) == 2
        assert "device 'cuda' requested but CUDA is not available here" in capsys.readouterr().err
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ConfigError, match=r"--nproc 2 runs one process per GPU, but this machine has 1 CUDA GPU\(s\); use --nproc 1"):
        resolve_device("cuda", "cpu", nproc=2)
    monkeypatch.undo()

    cfg = TrainConfig(nproc=2, device="cpu", epochs=1)
    with pytest.raises(TypeError, match="on_epoch runs in rank 0's process and must be picklable"):
        train(cfg, None, on_epoch=lambda stats: None)
    assert _children() == before, "nothing may start for bad input"


def test_more_cpu_ranks_than_cores_or_memory_are_refused_before_any_starts(monkeypatch, tmp_path, capsys):
    """The CPU bound on nproc: a core and ddp.RANK_BYTES of memory per rank (stood in for here), checked
    by launch and by the CLI before any process or temporary folder exists; one line, exit 2."""
    from dgl_zerocopy import cli

    monkeypatch.setattr(ddp.tempfile, "tempdir", str(tmp_path))  # launch's folder would appear here
    monkeypatch.setattr(ddp, "_usable_cores", lambda: 2)
    monkeypatch.setattr(ddp, "_available_memory", lambda: 64 * ddp.RANK_BYTES)
    before = _children()
    assert ddp.cpu_rank_limit(2) is None and ddp.cpu_rank_limit(1) is None  # an allowed count (the 2-rank tests run it)
    with pytest.raises(
        ValueError, match=r"^nproc 3 is more than this machine can run: gloo ranks on the CPU need a core each, and 2 are usable here; use nproc 2 or less$"
    ):
        launch(_noop, 3, backend="gloo")
    assert cli.main(["train", "--config", str(REPO / "configs" / "cora-gcn.yaml"), "--epochs", "1", "--nproc", "64"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--nproc 64 is more than this machine can run" in err and "use --nproc 2 or less" in err, err

    monkeypatch.setattr(ddp, "_usable_cores", lambda: 64)
    monkeypatch.setattr(ddp, "_available_memory", lambda: 3 * ddp.RANK_BYTES + ddp.RANK_BYTES // 2)
    assert ddp.cpu_rank_limit(3) is None
    with pytest.raises(ValueError, match=r"nproc 4 is more than this machine can run: each gloo rank needs about 512 MiB .*enough for 3; use nproc 3 or less"):
        launch(_noop, 4, backend="gloo")
    assert cli.main(["train", "--device", "cpu", "--epochs", "1", "--nproc", "8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "1.8 GiB of memory is available, enough for 3; use --nproc 3 or less" in err, err
    assert _children() == before and list(tmp_path.iterdir()) == [], "nothing may start for a refused count"


def test_share_dataset_sends_references_not_copies(small_dataset, tmp_path):
    shared = share_dataset(small_dataset)
    assert share_dataset(shared) is shared
    assert shared.name == small_dataset.name
    for name, tensor in shared.arrays.items():
        assert tensor.is_shared(), name
        assert len(getattr(shared.dataset, name)) == 0, f"{name} would travel as an array"
    assert len(pickle.dumps(shared.dataset)) < 4096
    opened = shared.open()
    for name, tensor in shared.arrays.items():
        np.testing.assert_array_equal(getattr(opened, name), getattr(small_dataset, name))
        assert getattr(opened, name).ctypes.data == tensor.data_ptr(), f"{name}: a view of the shared memory"
    again = share_dataset(opened)  # already shared: the same memory, no second copy
    assert all(again.arrays[k].data_ptr() == shared.arrays[k].data_ptr() for k in shared.arrays)
    assert small_dataset.features.ctypes.data != shared.arrays["features"].data_ptr(), "the caller's array stays as it was"

    # A memory-mapped table travels as its file (offset included for a slice of the map).
    np.save(tmp_path / "feat.npy", small_dataset.features)
    mapped = np.load(tmp_path / "feat.npy", mmap_mode="r")
    rows = slice(1000, 2000)
    sliced = dataclasses.replace(small_dataset, features=mapped[rows])
    ref = share_dataset(sliced).arrays["features"]
    assert isinstance(ref, shared_dataset._MappedFile) and ref.filename == str(tmp_path / "feat.npy")
    assert len(pickle.dumps(ref)) < 1024
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(ref)).open(), small_dataset.features[rows])
