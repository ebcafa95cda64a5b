"""A generated graph on disk never crashes the process or samples garbage: open_disk_graph checks its CSC
(dgl_zerocopy/data/disk_check.py) by one pass, or by the verdict recorded for its files as they are, and the
samplers over it check the mapped files before each batch.

The damage cases could crash the process where a check is missing (a sampler reading ids past the graph is a
SIGSEGV, a mapped file cut short a SIGBUS), so they run in a child process; each prints what it got as one JSON
line. A child that dies is started again for the cases after the one it died in, so that each case passes or
fails on its own."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO

from dgl_zerocopy.data import disk_check, graph_check
from dgl_zerocopy.data import papers_disk as pd
from dgl_zerocopy.data.disk_graph import open_disk_graph
from dgl_zerocopy.data.synthetic import SyntheticSpec
from dgl_zerocopy.sampling.disk import hop_sampler, sampling_graph

SPEC = SyntheticSpec.papers100m_like(num_nodes=6_000, seed=3)
BLOCK = 1_000

CHILD = r"""
import json, os, sys
from pathlib import Path
import numpy as np
from dgl_zerocopy.data.disk_graph import open_disk_graph
from dgl_zerocopy.sampling.disk import hop_sampler, sampling_graph
from dgl_zerocopy.store.storage import StorageChangedError

root, names = Path(sys.argv[1]), sys.argv[2:]
ALL = {"_N": np.arange(6_000)}

def write(folder, name, at, values):
    array = np.load(folder / f"{name}.npy", mmap_mode="r+")  # the data only: the header stays as it was
    array[at : at + len(values)] = values
    array.flush()
    del array

def sample(graph):
    sampled = hop_sampler(graph).sample(ALL, {"_E": [-1]})  # every in-edge: every position of indices is read
    return [int(sampled.nodes["_N"].min()), int(sampled.nodes["_N"].max())]

def opened(folder):
    graph = open_disk_graph(folder)
    return {"sampled": sample(graph), "in_memory": sample(graph.in_memory())}

def cut_after_open(folder):
    graph = open_disk_graph(folder)
    sample(graph)
    os.truncate(folder / "indices.npy", 4096)
    said = {}
    for what, step in (("sample", lambda: sample(graph)), ("sampling_graph", lambda: sampling_graph(graph)), ("in_memory", lambda: graph.in_memory())):
        try:
            step()
            said[what] = "went on"
        except StorageChangedError as e:
            said[what] = str(e)
    return said

def written_after_open(folder):
    graph = open_disk_graph(folder)
    sample(graph)
    write(folder, "indices", 100, np.full(10, 10**9, np.int32))
    return {"sampled": sample(graph)}

CASES = {
    "ids past the graph": lambda f: (write(f, "indices", 1234, np.full(40, 6_007, np.int32)), opened(f))[1],
    "a negative index": lambda f: (write(f, "indices", 321, np.full(3, -5, np.int32)), opened(f))[1],
    "a decreasing indptr": lambda f: (write(f, "indptr", 2500, np.array([7], np.int64)), opened(f))[1],
    "cut short after open": cut_after_open,
    "written after open": written_after_open,
}
for name in names:
    try:
        said = ["went on", CASES[name](root / name)]
    except Exception as e:
        said = [type(e).__name__, str(e)]
    print(json.dumps({"case": name, "said": said}), flush=True)
"""

CASES = ("ids past the graph", "a negative index", "a decreasing indptr", "cut short after open", "written after open")


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    return pd.generate_to_disk(tmp_path_factory.mktemp("graph") / "g", SPEC, block_nodes=BLOCK, progress=False)


@pytest.fixture(scope="module")
def outcomes(generated, tmp_path_factory):
    """Every case's ``[what, message]`` (``"died"`` and the exit code and stderr where the child died in it)."""
    root = tmp_path_factory.mktemp("cases")
    for name in CASES:
        shutil.copytree(generated, root / name)
    said, left = {}, list(CASES)
    while left:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(root), *left], capture_output=True, text=True, encoding="utf-8", errors="replace", cwd=REPO, timeout=300
        )
        for line in done.stdout.splitlines():
            if line.startswith("{"):
                record = json.loads(line)
                said[record["case"]] = record["said"]
        left = [name for name in left if name not in said]
        if left:  # the child died in the first case it did not report
            said[left.pop(0)] = ["died", f"exit {done.returncode} (-11: SIGSEGV, -7: SIGBUS)\n{done.stderr[-2000:]}"]
    return root, said


def test_ids_past_the_graph_are_refused_at_open(outcomes):
    root, said = outcomes
    what, message = said["ids past the graph"]
    assert what == "IndexError", said["ids past the graph"]
    assert message.startswith(f"{str(root / 'ids past the graph' / 'indices.npy')!r} does not hold a valid graph"), message
    assert "id 6007 at position 1234 is out of range for 6000 nodes" in message and "generate the graph again" in message


def test_a_negative_index_is_refused_at_open(outcomes):
    root, said = outcomes
    what, message = said["a negative index"]
    assert what == "IndexError", said["a negative index"]
    assert str(root / "a negative index" / "indices.npy") in message and "id -5 at position 321" in message


def test_a_decreasing_indptr_is_refused_at_open(outcomes, generated):
    root, said = outcomes
    what, message = said["a decreasing indptr"]
    assert what == "ValueError", said["a decreasing indptr"]
    before = int(np.load(generated / "indptr.npy")[2499])
    assert str(root / "a decreasing indptr" / "indptr.npy") in message
    assert f"decreases at position 2500 ({before} then 7)" in message and "generate the graph again" in message


def test_a_file_cut_short_after_open_is_refused_not_a_bus_error(outcomes):
    root, said = outcomes
    what, steps = said["cut short after open"]
    assert what == "went on" and isinstance(steps, dict), said["cut short after open"]
    file = str(root / "cut short after open" / "indices.npy")
    for step in ("sample", "sampling_graph", "in_memory"):
        assert steps[step].startswith(f"the graph file {file!r} was cut short to 4,096 bytes while a DiskGraph"), (step, steps[step])
        assert "SIGBUS" in steps[step] and "generate the graph again" in steps[step]


def test_a_file_written_after_open_stops_the_sampler(outcomes):
    root, said = outcomes
    what, message = said["written after open"]
    assert what == "StorageChangedError", said["written after open"]
    assert str(root / "written after open" / "indices.npy") in message and "written to after it was checked" in message
    assert "open the graph again" in message


@pytest.fixture
def passes(monkeypatch):
    """Counts the passes over a CSC's values (check_csc's monotone pass runs once per pass over a graph)."""
    graph_check.forget_checks()
    count = [0]
    real = graph_check._check_monotone

    def counted(*args, **kwargs):
        count[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(graph_check, "_check_monotone", counted)
    yield count
    graph_check.forget_checks()


def _sample(graph) -> None:
    hop_sampler(graph).sample({"_N": np.arange(50)}, {"_E": [5, 5]})
    sampling_graph(graph).indices  # noqa: B018 - the guarded attribute a kernel reads


def test_an_unchanged_generated_graph_opens_without_a_pass(tmp_path, passes):
    out = pd.generate_to_disk(tmp_path / "g", SPEC, block_nodes=BLOCK, progress=False)
    assert passes[0] == 1, "the generator checks what it wrote, once"
    assert (out / disk_check.RECORD).is_file()
    graph = open_disk_graph(out)
    _sample(graph)
    assert graph.checked and passes[0] == 1, "no pass at open, none in the samplers"


def _old(path) -> None:
    """Set ``path``'s modification time a minute back: a file last written long ago (its stamp can be trusted)."""
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - 60 * 10**9))


@pytest.mark.parametrize("change", ["touched", "rewritten"])
def test_a_changed_file_gets_one_pass(tmp_path, passes, change):
    out = pd.generate_to_disk(tmp_path / "g", SPEC, block_nodes=BLOCK, progress=False)
    file = out / "indices.npy"
    if change == "touched":
        os.utime(file)
    else:  # the same bytes in another file renamed over it: another inode
        shutil.copyfile(file, tmp_path / "copy.npy")
        os.replace(tmp_path / "copy.npy", file)
    before = passes[0]
    graph = open_disk_graph(out)
    _sample(graph)
    assert passes[0] == before + 1, "one pass at open, none in the samplers"


def test_a_graph_without_a_record_is_checked_once_then_recorded(tmp_path, passes, caplog):
    out = pd.generate_to_disk(tmp_path / "g", SPEC, block_nodes=BLOCK, progress=False)
    (out / disk_check.RECORD).unlink()  # as a graph generated before verdicts were recorded
    for name in ("indptr.npy", "indices.npy"):
        _old(out / name)
    before = passes[0]
    with caplog.at_level(logging.INFO, logger="dgl_zerocopy.data.disk_check"):
        open_disk_graph(out)
    assert passes[0] == before + 1
    assert (out / disk_check.RECORD).is_file() and "verdict recorded in" in caplog.text and str(out / disk_check.RECORD) in caplog.text
    open_disk_graph(out)
    assert passes[0] == before + 1, "the recorded verdict spares the second open its pass"


def test_a_read_only_folder_records_its_verdict_in_the_cache(tmp_path, passes, monkeypatch):
    out = pd.generate_to_disk(tmp_path / "g", SPEC, block_nodes=BLOCK, progress=False)
    for name in ("indptr.npy", "indices.npy"):
        _old(out / name)  # changed since the generator's record (which stays): checked, and recorded in the cache
    monkeypatch.setenv("DGL_ZEROCOPY_CACHE", str(tmp_path / "cache"))
    real = disk_check.write_json_atomic

    def read_only(target, record):  # the folder refuses writes, as a read-only mount would (the tests run as root)
        if target.parent == out:
            raise PermissionError(13, "Read-only file system", str(target))
        real(target, record)

    monkeypatch.setattr(disk_check, "write_json_atomic", read_only)
    before = passes[0]
    open_disk_graph(out)
    assert len(list((tmp_path / "cache" / "graph-checks").iterdir())) == 1
    open_disk_graph(out)
    assert passes[0] == before + 1, "checked once, then by the verdict recorded in the cache"
    os.utime(out / "indptr.npy")
    open_disk_graph(out)
    assert passes[0] == before + 2, "a changed file is checked again"
