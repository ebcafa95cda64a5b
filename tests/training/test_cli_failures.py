"""Faults a user meets on disk, each one line on stderr and exit code 2 through ``dgl-zerocopy``
(``cli.main`` in this process): ``partition --out`` where no folder can be, ``train --dist`` on
damaged partition files, damaged dataset caches (the generated one is regenerated with a warning),
``DGL_ZEROCOPY_CACHE`` at a file (the CPU emulator falls back to a private folder with a warning)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED_DATA, SMALL
from script_runs import run_cli

from dgl_zerocopy.cli import main
from dgl_zerocopy.cuda.gather import emulator_build
from dgl_zerocopy.data import DatasetError, SyntheticSpec, load_dataset

TINY = ["--dataset", "synthetic", "--num-nodes", "400"]  # generated in milliseconds


def one_line_exit_2(argv: list[str], capsys) -> str:
    """Run ``dgl-zerocopy ARGV`` in this process; assert exit code 2 and one line on stderr, return it."""
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's errors
        code = e.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("dgl-zerocopy: error: "), err
    return err.strip()


# -- partition --out ------------------------------------------------------------------------------


def test_partition_out_under_a_file(tmp_path, capsys):
    (tmp_path / "file").write_text("not a folder")
    err = one_line_exit_2(["partition", *TINY, "--parts", "1", "--out", str(tmp_path / "file" / "parts")], capsys)
    assert f"lies under the file {str(tmp_path / 'file')!r}" in err
    # checked before the dataset loads: cora without --data-root would fail on that instead
    err = one_line_exit_2(["partition", "--dataset", "cora", "--parts", "1", "--out", str(tmp_path / "file" / "parts")], capsys)
    assert "lies under the file" in err


def test_partition_out_where_no_folder_can_be_made(tmp_path, capsys):
    if os.geteuid() == 0:  # root writes through any mode bits: /proc takes no new folder
        out = "/proc/dgl-zerocopy-test/parts"
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        out = str(locked / "parts")
    err = one_line_exit_2(["partition", *TINY, "--parts", "1", "--out", out], capsys)
    assert repr(out) in err and "pass a folder you can write to" in err
    assert not Path(out).exists()


def test_partition_that_fails_writing_leaves_no_folder(tmp_path, capsys, monkeypatch):
    import dgl

    def disk_full(graph, name, num_parts, out, **kwargs):
        (Path(out) / "part0").mkdir()  # half-written, as a real failure would leave it
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(dgl.distributed, "partition_graph", disk_full)
    out = tmp_path / "new" / "parts"
    err = one_line_exit_2(["partition", *TINY, "--parts", "1", "--out", str(out)], capsys)
    assert "No space left on device" in err and repr(str(out)) in err
    assert not (tmp_path / "new").exists()  # nor the parent it made


# -- train --dist on damaged partition files ------------------------------------------------------


@pytest.fixture(scope="module")
def parts(tmp_path_factory) -> Path:
    from dgl_zerocopy.dist import partition_dataset

    return partition_dataset(load_dataset("synthetic", synthetic=SMALL), 1, tmp_path_factory.mktemp("parts") / "p", method="random").folder


def _truncate(path: Path, keep: int | None = None) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2 if keep is None else keep])


def _rewrite_json(path: Path, edit) -> None:
    config = json.loads(path.read_text())
    edit(config)
    path.write_text(json.dumps(config))


DAMAGE = {
    "ours truncated": (lambda d: _truncate(d / "dgl_zerocopy.json"), "dgl_zerocopy.json' is damaged (not readable JSON"),
    "ours not JSON": (lambda d: (d / "dgl_zerocopy.json").write_bytes(b"\xff\xfe garbage"), "dgl_zerocopy.json' is damaged"),
    "ours a list": (lambda d: (d / "dgl_zerocopy.json").write_text("[1, 2]"), "a JSON list, not an object"),
    "ours missing a key": (lambda d: _rewrite_json(d / "dgl_zerocopy.json", lambda c: c.pop("feat_dim")), "lacks the key 'feat_dim'"),
    "ours a wrong type": (lambda d: _rewrite_json(d / "dgl_zerocopy.json", lambda c: c.update(num_parts="two")), "a value of the wrong type"),
    "DGL's truncated": (lambda d: _truncate(d / "synthetic.json"), "synthetic.json' is damaged (not readable JSON"),
    "DGL's missing keys": (lambda d: _rewrite_json(d / "synthetic.json", lambda c: [c.pop("node_map"), c.pop("part-0")]), "lacks node_map, part-0"),
    "DGL's other part count": (lambda d: _rewrite_json(d / "synthetic.json", lambda c: c.update(num_parts=3)), "in 3 parts, but dgl_zerocopy.json says"),
    "a part file gone": (lambda d: (d / "part0" / "graph.dgl").unlink(), "its part_graph file 'part0/graph.dgl' is missing"),
}


@pytest.mark.parametrize("damage,message", DAMAGE.values(), ids=DAMAGE.keys())
def test_train_dist_on_damaged_partitions(parts, tmp_path, damage, message, capsys):
    folder = tmp_path / "p"
    shutil.copytree(parts, folder)
    damage(folder)
    err = one_line_exit_2(["train", "--dist", str(folder), "--epochs", "1", "--no-progress"], capsys)
    assert message in err
    assert f"--out {folder} --overwrite" in err  # the fix


def test_launch_local_on_a_damaged_partition(parts, tmp_path, capsys):
    folder = tmp_path / "p"
    shutil.copytree(parts, folder)
    _truncate(folder / "dgl_zerocopy.json")
    err = one_line_exit_2(["launch-local", "--parts", "1", "--", "train", "--dist", str(folder)], capsys)
    assert "dgl_zerocopy.json' is damaged" in err


# -- dataset caches -------------------------------------------------------------------------------

SPEC = SyntheticSpec(num_nodes=400, avg_degree=6, feat_dim=8, num_classes=4, seed=3)


CUTS = [(f, keep) for f in ("features.npy", "indptr.npy", "indices.npy", "labels.npy", "test_idx.npy") for keep in (None, 10)]


@pytest.mark.parametrize("file,keep", [*CUTS, ("num_classes.txt", 0)])  # half the file, or a cut inside the header
def test_a_damaged_generated_cache_is_regenerated_with_a_warning(tmp_path, file, keep):
    first = load_dataset("synthetic", synthetic=SPEC, cache=tmp_path)
    path = tmp_path / SPEC.cache_name() / file
    _truncate(path, keep)
    with pytest.warns(UserWarning, match=f"the dataset cache file '{path}' is damaged .*; regenerating its folder"):
        again = load_dataset("synthetic", synthetic=SPEC, cache=tmp_path)
    for key in ("indptr", "indices", "features", "labels", "train_idx", "val_idx", "test_idx"):
        np.testing.assert_array_equal(getattr(again, key), getattr(first, key))
    assert [p.name for p in tmp_path.iterdir()] == [SPEC.cache_name()]  # the damaged folder is gone
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and the next load reads the cache quietly
        load_dataset("synthetic", synthetic=SPEC, cache=tmp_path)


def test_cache_variable_at_a_file(tmp_path, monkeypatch, capsys):
    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setenv("DGL_ZEROCOPY_CACHE", str(tmp_path / "file"))
    err = one_line_exit_2(["train", *TINY, "--epochs", "1", "--no-progress"], capsys)
    assert f"DGL_ZEROCOPY_CACHE={str(tmp_path / 'file')!r} is a file, not a folder" in err
    assert "set DGL_ZEROCOPY_CACHE to a folder you can write to" in err and "or unset it" in err
    monkeypatch.setenv("DGL_ZEROCOPY_CACHE", str(tmp_path / "file" / "sub"))
    err = one_line_exit_2(["partition", *TINY, "--parts", "1", "--out", str(tmp_path / "parts")], capsys)
    assert f"DGL_ZEROCOPY_CACHE={str(tmp_path / 'file' / 'sub')!r} lies under the file" in err
    assert not (tmp_path / "parts").exists()


def test_a_cache_argument_at_a_file_names_the_folder_not_the_variable(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(DatasetError, match=r"the dataset cache '.*file' is a file, not a folder; pass a folder"):
        load_dataset("synthetic", synthetic=SPEC, cache=tmp_path / "file")


@pytest.mark.skipif(not (SHARED_DATA / "planetoid").is_dir(), reason=f"real datasets not present at {SHARED_DATA}")
def test_a_planetoid_file_cut_short_is_named_as_damaged_not_refused(tmp_path, capsys):
    shutil.copytree(SHARED_DATA / "planetoid", tmp_path / "planetoid")
    _truncate(tmp_path / "planetoid" / "ind.cora.allx")
    err = one_line_exit_2(["train", "--dataset", "cora", "--data-root", str(tmp_path), "--epochs", "1", "--no-progress"], capsys)
    assert "ind.cora.allx: not a readable Planetoid pickle" in err and "cut short or damaged" in err and "refused" not in err


def _ogb_arxiv(root: Path) -> Path:
    """A tiny ogbn-arxiv in ogb's layout under ``root`` (test_ogb's writer), loaded once: its cache made."""
    pytest.importorskip("ogb")
    from test_ogb import _raw_data, write_ogb

    write_ogb(root / "ogbn_arxiv", "ogbn-arxiv", _raw_data())
    load_dataset("ogbn-arxiv", root=root)
    return root / "ogbn_arxiv"


def test_a_damaged_ogb_cache_is_rebuilt_or_named(tmp_path, capsys):
    folder = _ogb_arxiv(tmp_path)
    first = load_dataset("ogbn-arxiv", root=tmp_path)
    features = np.array(first.features)
    path = folder / "dgl_zerocopy" / "features.npy"
    _truncate(path)
    with pytest.warns(UserWarning, match=f"the cache file '{path}' is damaged .*; rebuilding the cache"):
        again = load_dataset("ogbn-arxiv", root=tmp_path)
    np.testing.assert_array_equal(again.features, features)

    _truncate(path)  # now without the files to rebuild it from
    shutil.rmtree(folder / "raw")
    shutil.rmtree(folder / "processed")
    with pytest.warns(UserWarning, match="is damaged"):
        err = one_line_exit_2(["train", "--dataset", "ogbn-arxiv", "--data-root", str(tmp_path), "--epochs", "1", "--no-progress"], capsys)
    assert f"the cache file {str(path)!r} is damaged" in err and "cannot be rebuilt" in err and "arxiv.zip" in err


def test_a_damaged_ogb_processed_file_is_named_with_the_fix(tmp_path, capsys):
    folder = _ogb_arxiv(tmp_path)
    shutil.rmtree(folder / "dgl_zerocopy")
    _truncate(folder / "processed" / "dgl_data_processed")
    err = one_line_exit_2(["train", "--dataset", "ogbn-arxiv", "--data-root", str(tmp_path), "--epochs", "1", "--no-progress"], capsys)
    assert f"ogb could not read {str(folder / 'processed' / 'dgl_data_processed')!r}" in err
    assert f"delete the folder {str(folder / 'processed')!r}" in err


# -- the CPU emulator's cache ---------------------------------------------------------------------


@pytest.fixture
def fake_compiler(monkeypatch, tmp_path_factory):
    """g++ replaced by a copy of a library it built (the real one, once): the cache logic without a compile each time."""
    built = tmp_path_factory.getbasetemp() / "emulator-library.so"
    if not built.exists():
        shutil.copy(emulator_build.build_emulator(), built)
    real = subprocess.run
    calls = []

    def run(command, *args, **kwargs):
        if "-o" not in command:
            return real(command, *args, **kwargs)
        calls.append(command)
        shutil.copy(built, command[command.index("-o") + 1])
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(emulator_build.subprocess, "run", run)
    return calls


@pytest.mark.parametrize("where", ["a file", "under a file", "emulator/ a file"])
def test_emulator_cache_at_a_file_builds_in_a_private_folder(tmp_path, monkeypatch, fake_compiler, where):
    (tmp_path / "file").write_text("")
    cache = {"a file": tmp_path / "file", "under a file": tmp_path / "file" / "sub", "emulator/ a file": tmp_path}[where]
    if where == "emulator/ a file":
        (tmp_path / "emulator").write_text("")
    monkeypatch.setenv("DGL_ZEROCOPY_CACHE", str(cache))
    monkeypatch.setattr(emulator_build, "_private_dir", None, raising=False)  # a fresh process's
    with pytest.warns(UserWarning, match=f"the CPU emulator's cache '{cache / 'emulator'}' cannot be used .* Set DGL_ZEROCOPY_CACHE"):
        path = emulator_build.build_emulator()
    assert path.is_file() and not path.is_relative_to(tmp_path)
    assert len(fake_compiler) == 1


def test_a_cut_short_emulator_library_is_built_again_not_loaded(tmp_path, monkeypatch, fake_compiler):
    monkeypatch.setenv("DGL_ZEROCOPY_CACHE", str(tmp_path))
    path = emulator_build.build_emulator()
    whole = path.read_bytes()
    for keep in (0, 10, 200, len(whole) // 2, len(whole) - 1):  # dlopen of any of these dies of SIGBUS or refuses
        path.write_bytes(whole[:keep])
        with pytest.warns(UserWarning, match="is damaged \\(cut short\\); building it again"):
            assert emulator_build.build_emulator() == path
        assert path.read_bytes() == whole, keep
    assert len(fake_compiler) == 6


# -- the console script, in a process of its own ---------------------------------------------------


@pytest.mark.slow  # a process (~5 s): DGL's import and the logging setup must add nothing to the one line
def test_console_script_on_a_damaged_partition_prints_one_line(parts, tmp_path):
    folder = tmp_path / "p"
    shutil.copytree(parts, folder)
    _truncate(folder / "synthetic.json")
    r = run_cli("train", "--dist", folder, "--epochs", "1", "--no-progress", timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert "synthetic.json' is damaged" in r.stderr
