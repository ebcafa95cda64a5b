"""Faults of a ``train --feature-storage`` run, each one line on stderr and an exit code: the
feature file truncated, overwritten, replaced or removed while the run reads it (exit 1: the job
failed while it ran); a host buffer too small for the batches under ``--nproc 2`` (exit 2, the line of one
process); the README's storage command, as written.

The fast tests call ``cli.main`` in this process with the failure stood in; the slow ones run the command in a
process of its own, with the fault made for real."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO
from torch.multiprocessing.spawn import ProcessRaisedException

from dgl_zerocopy import cli
from dgl_zerocopy.data import SyntheticSpec, load_dataset
from dgl_zerocopy.store.storage import BufferFullError, StorageChangedError
from dgl_zerocopy.training.config import ConfigError

pytest.importorskip("dgl")

RUN = ["train", "--dataset", "synthetic", "--num-nodes", "2000", "--device", "cpu", "--no-progress", "--fanouts", "3,3"]
RUN += ["--batch-size", "64", "--eval-batch-size", "64", "--hidden", "16"]


def _one_line(err: str) -> str:
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("dgl-zerocopy: error: "), err
    return err.strip()


# -- fast: the CLI's side, the failure stood in ------------------------------------------------------------------


def _failing_train(monkeypatch, error: BaseException) -> None:
    import dgl_zerocopy.training.train as train_module

    def train(*args, **kwargs):
        raise error

    monkeypatch.setattr(train_module, "train", train)


def test_a_feature_file_changed_while_training_is_one_line_and_exit_1(monkeypatch, capsys):
    _failing_train(monkeypatch, StorageChangedError("the feature file '/x/f.npy' was removed while a FeatureStore reads it; make a new store"))
    assert cli.main([*RUN, "--epochs", "1"]) == 1
    line = _one_line(capsys.readouterr().err)
    assert "the feature file '/x/f.npy' was removed while a FeatureStore reads it" in line and "the run stopped" in line


@pytest.mark.parametrize(
    "error,code,message",
    [
        (BufferFullError("the host buffer cannot hold this batch: 631 distinct rows"), 2, "is too small for this run: the host buffer cannot hold this batch"),
        (ConfigError("host_buffer '1%' (20 of 2,000 rows) cannot serve this run's batches"), 2, "cannot serve this run's batches"),
        (StorageChangedError("the feature file '/x/f.npy' ended early"), 1, "the feature file '/x/f.npy' ended early"),
    ],
    ids=["buffer full", "refused budget", "file changed"],
)
def test_a_ranks_own_error_is_the_line_of_one_process(monkeypatch, capsys, error, code, message):
    """``--nproc 2``: a rank's BufferFullError, ConfigError or StorageChangedError reaches the parent inside a
    ProcessRaisedException (the rank's traceback as text, the error itself as ``.error``): the same line and
    exit code as without ``--nproc``."""
    failure = ProcessRaisedException("\n\n-- Process 1 terminated with the following error:\nTraceback ...", 1, 4242)
    failure.error = error
    _failing_train(monkeypatch, failure)
    assert cli.main([*RUN, "--epochs", "1", "--feature-storage", "auto", "--host-buffer", "50%"]) == code
    assert message in _one_line(capsys.readouterr().err)


def test_a_ranks_other_error_keeps_its_traceback(monkeypatch):
    """An error that is not one of ours (a bug, a device fault) still shows the rank's traceback."""
    failure = ProcessRaisedException("\n\n-- Process 1 terminated with the following error:\nTraceback ...\nZeroDivisionError", 1, 4242)
    failure.error = ZeroDivisionError("division by zero")
    _failing_train(monkeypatch, failure)
    with pytest.raises(ProcessRaisedException):
        cli.main([*RUN, "--epochs", "1"])


# -- slow: the command in a process of its own, the fault made for real ------------------------------------------

# Wraps the reader so that its 4th batch of reads finds the file changed as FAULT says: made for real,
# at a known point of the run (a timer would race with a run that takes 2 to 20 s on a busy machine).
_FAULT = """
import os, sys
import numpy as np
from dgl_zerocopy.store.storage import direct_reader
real, calls, fault = direct_reader.DirectReader.read_into, [0], sys.argv[1]

def read_into(self, *args, **kwargs):
    calls[0] += 1
    if calls[0] == 4:
        path = str(self.path)
        if fault == "truncated":
            os.truncate(path, 1000)
        elif fault == "removed":
            os.remove(path)
        elif fault == "overwritten":  # same size, new bytes and time
            with open(path, "r+b") as f:
                f.seek(256)
                f.write(os.urandom(4096))
            os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 10**9))
        elif fault == "replaced":  # a new file renamed into place
            np.save(path + ".new.npy", np.load(path) + 1)
            os.replace(path + ".new.npy", path)
    return real(self, *args, **kwargs)

direct_reader.DirectReader.read_into = read_into
from dgl_zerocopy.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.fixture
def feature_npy(tmp_path):
    path = tmp_path / "feat.npy"
    np.save(path, load_dataset("synthetic", SyntheticSpec(num_nodes=2000)).features)
    return path


@pytest.mark.slow  # a process each (~5 s); test_a_feature_file_changed_while_training_is_one_line_and_exit_1 is the fast check
@pytest.mark.parametrize("fault", ["truncated", "removed", "overwritten", "replaced"])
def test_a_feature_file_changed_under_a_run_ends_it_in_one_line(fault, feature_npy):
    argv = [*RUN, "--epochs", "3", "--feature-storage", str(feature_npy), "--host-buffer", "60%"]
    r = subprocess.run([sys.executable, "-c", _FAULT, fault, *argv], capture_output=True, text=True, encoding="utf-8", errors="replace", cwd=REPO, timeout=300)
    line = _one_line(r.stderr)
    assert r.returncode == 1, r.stderr
    said = "was removed while" if fault == "removed" else r"(changed while|ended early)"
    assert re.search(rf"the feature file '{re.escape(str(feature_npy))}' {said}", line), line
    assert "the run stopped" in line


@pytest.mark.slow  # two ranks (~15 s); test_a_ranks_own_error_is_the_line_of_one_process is the fast check
def test_a_host_buffer_too_small_under_nproc_2_is_one_line_and_exit_2(feature_npy):
    argv = [*RUN, "--epochs", "1", "--feature-storage", str(feature_npy), "--host-buffer", "1%", "--nproc", "2"]
    r = subprocess.run(
        [sys.executable, "-m", "dgl_zerocopy.cli", *argv], capture_output=True, text=True, encoding="utf-8", errors="replace", cwd=REPO, timeout=600
    )
    assert r.returncode == 2, r.stderr
    line = _one_line(r.stderr)
    assert "host_buffer '1%'" in line and "--host-buffer" in line, line
    alone = subprocess.run(
        [sys.executable, "-m", "dgl_zerocopy.cli", *argv[:-2]], capture_output=True, text=True, encoding="utf-8", errors="replace", cwd=REPO, timeout=600
    )
    assert alone.returncode == 2 and "host_buffer '1%'" in _one_line(alone.stderr)  # the same refusal without --nproc


def _readme_storage_command() -> list[str]:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    found = [line for line in readme.splitlines() if "dgl-zerocopy train" in line and "--feature-storage" in line]
    assert len(found) == 1, found
    return found[0].split("#")[0].split()


@pytest.mark.slow  # the generated dataset's 200,000 nodes, 3 epochs from storage (~1-2 min on 2 cores)
def test_the_readmes_storage_command_runs_as_written(tmp_path):
    command = _readme_storage_command()
    assert command[0] == ".venv/bin/dgl-zerocopy", command
    env = {**os.environ, "DGL_ZEROCOPY_CACHE": os.environ.get("DGL_ZEROCOPY_CACHE", str(tmp_path))}
    r = subprocess.run(
        [sys.executable, "-m", "dgl_zerocopy.cli", *command[1:]],
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="replace",
        cwd=REPO,
        env=env,
        timeout=900,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "features on storage in" in r.stdout and "final test accuracy" in r.stdout
