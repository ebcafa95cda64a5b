"""Caches are trusted only while their files hold the bytes written, and the partial
files of a writer killed midway are removed by a later run (item 7).

Item 1: a file overwritten in place keeps its size, which was all that was checked before: the
features file of ``--feature-storage auto``, a compressed folder's codes, the generated dataset and
the OGB cache were then used as they were (zeros trained on, without a word). Each is now checked
against the digests recorded when it was written (:mod:`dgl_zerocopy.store.cache_files`), and
written again with a warning naming the file. On the code before the mend the damage tests fail at
``pytest.warns`` (nothing said) and the rows read back are the zeros.

Item 7: a writer killed with SIGKILL (a forked process, killed while it writes; the test waits for
its pid to be gone, never for a clock) left its hidden partial file or folder for good. A later
call into the same cache now removes it; on the code before the mend the partial is still there.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import subprocess
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED_DATA
from script_runs import run_cli

from dgl_zerocopy.data import SyntheticSpec, load_dataset
from dgl_zerocopy.data.feature_file import features_on_storage
from dgl_zerocopy.data.synthetic import generate
from dgl_zerocopy.store.compression import compress, compressed_beside, load_compressed

SPEC = SyntheticSpec(num_nodes=400, avg_degree=6, feat_dim=8, num_classes=4, seed=3)
FAST = SyntheticSpec(num_nodes=2000, avg_degree=6, feat_dim=16, num_classes=4, seed=5)


def _overwrite(path: Path, fill: bytes | None = None) -> None:
    """Overwrite the second half of ``path`` in place, keeping its size (``dd conv=notrunc``): zeros,
    or random bytes."""
    size = path.stat().st_size
    n = size - size // 2
    data = fill * n if fill is not None else np.random.default_rng(0).integers(0, 256, n, dtype=np.uint8).tobytes()
    with open(path, "r+b") as f:
        f.seek(size // 2)
        f.write(data)
    assert path.stat().st_size == size


def _hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


# -- item 1: the helper ---------------------------------------------------------------------------


def _written(tmp_path: Path, age_s: float = 0) -> tuple[Path, Path]:
    """A file and its manifest, recorded as a writer records them; ``age_s``: its mtime set back."""
    from dgl_zerocopy.store.cache_files import record_digests

    path = tmp_path / "a.npy"
    np.save(path, np.arange(10_000, dtype=np.float32))
    if age_s:
        past = time.time_ns() - int(age_s * 1e9)
        os.utime(path, ns=(past, past))
    record_digests({path.name: path}, tmp_path / "digests.json")
    return path, tmp_path / "digests.json"


def test_a_file_overwritten_in_place_or_cut_short_is_named(tmp_path):
    from dgl_zerocopy.store.cache_files import DamagedFile, check_digests

    path, _ = _written(tmp_path)
    check_digests(tmp_path)  # whole: no error
    _overwrite(path, b"\0")
    with pytest.raises(DamagedFile, match="its bytes are not those written") as info:
        check_digests(tmp_path)
    assert info.value.path == path
    with open(path, "r+b") as f:
        f.truncate(100)
    with pytest.raises(DamagedFile, match="100 bytes, 40,128 when it was written"):
        check_digests(tmp_path)
    path.unlink()
    with pytest.raises(DamagedFile, match="missing"):
        check_digests(tmp_path)


@pytest.mark.parametrize(
    "manifest", [None, b"{not json", b'{"format": 1, "hash": "md5", "files": {}}', b'{"format": 1, "hash": "blake2b-128", "files": {"../x": {}}}']
)
def test_a_missing_or_unreadable_manifest_is_damage(tmp_path, manifest):
    from dgl_zerocopy.store.cache_files import DamagedFile, check_digests

    _written(tmp_path)
    if manifest is None:
        (tmp_path / "digests.json").unlink()
    else:
        (tmp_path / "digests.json").write_bytes(manifest)
    with pytest.raises(DamagedFile) as info:
        check_digests(tmp_path)
    assert info.value.path == tmp_path / "digests.json"


def test_a_file_hashed_long_after_its_write_is_then_trusted_by_its_stamp(tmp_path, monkeypatch):
    """Written 10 s ago: the stamp is recorded, and later checks read nothing, until a write changes it."""
    from dgl_zerocopy.store import cache_files

    path, _ = _written(tmp_path, age_s=10)
    reads = []
    real = cache_files.file_digest
    monkeypatch.setattr(cache_files, "file_digest", lambda p: reads.append(p) or real(p))
    cache_files.check_digests(tmp_path)
    assert reads == []  # trusted by its stamp
    _overwrite(path, b"\0")  # a write: a new modification time
    with pytest.raises(cache_files.DamagedFile):
        cache_files.check_digests(tmp_path)
    assert reads == [path]


def test_a_file_written_just_now_is_hashed_again_at_its_next_check(tmp_path, monkeypatch):
    """A write in the clock tick of the stamp could keep the time: a fresh file gets no stamp, so the
    next check hashes it; once it is older, that check records the stamp and the one after reads nothing."""
    from dgl_zerocopy.store import cache_files

    path, manifest = _written(tmp_path)
    reads = []
    real = cache_files.file_digest
    monkeypatch.setattr(cache_files, "file_digest", lambda p: reads.append(p) or real(p))
    cache_files.check_digests(tmp_path)
    assert reads == [path]
    past = time.time_ns() - 10**10
    os.utime(path, ns=(past, past))  # as if the check ran 10 s after the write
    cache_files.check_digests(tmp_path)
    cache_files.check_digests(tmp_path)
    assert reads == [path, path]


# -- item 1: each cache ---------------------------------------------------------------------------


def test_a_generated_dataset_overwritten_in_place_is_regenerated_with_a_warning(tmp_path):
    first = load_dataset("synthetic", synthetic=SPEC, cache=tmp_path)
    path = tmp_path / SPEC.cache_name() / "features.npy"
    _overwrite(path, b"\0")
    with pytest.warns(UserWarning, match=f"the dataset cache file '{path}' is damaged \\(its bytes are not those written"):
        again = load_dataset("synthetic", synthetic=SPEC, cache=tmp_path)
    np.testing.assert_array_equal(again.features, first.features)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(load_dataset("synthetic", synthetic=SPEC, cache=tmp_path).features, first.features)


def test_a_cache_without_digests_is_written_again_with_a_warning(tmp_path):
    """A cache of an older version (no digests.json) cannot be told whole: it is regenerated."""
    load_dataset("synthetic", synthetic=SPEC, cache=tmp_path)
    manifest = tmp_path / SPEC.cache_name() / "digests.json"
    manifest.unlink()
    with pytest.warns(UserWarning, match=f"the dataset cache file '{manifest}' is damaged \\(missing: no digest was recorded"):
        load_dataset("synthetic", synthetic=SPEC, cache=tmp_path)
    assert manifest.is_file()


@pytest.mark.skipif(not (SHARED_DATA / "planetoid").is_dir(), reason=f"real datasets not present at {SHARED_DATA}")
def test_features_on_storage_overwritten_in_place_are_written_again_with_a_warning(tmp_path):
    """The issue's case: `dd if=/dev/zero ... conv=notrunc` over the cora features of `--feature-storage auto`."""
    ds = load_dataset("cora", root=SHARED_DATA)
    path = load_dataset("cora", root=SHARED_DATA, cache=tmp_path, features_on_storage=True).features.path
    _overwrite(path, b"\0")
    with pytest.warns(UserWarning, match=f"the cached features file '{path}' is damaged \\(its bytes are not those written.*; writing .* again"):
        again = load_dataset("cora", root=SHARED_DATA, cache=tmp_path, features_on_storage=True)
    assert again.features.path == path
    np.testing.assert_array_equal(np.load(path), ds.features)


def test_a_compressed_folder_beside_its_npy_with_random_codes_is_written_again(tmp_path):
    """The issue's second case: random bytes over features.int8-column-minmax/codes.npy."""
    x = np.random.default_rng(1).standard_normal((500, 40)).astype(np.float32)
    np.save(tmp_path / "features.npy", x)
    folder = compressed_beside(tmp_path / "features.npy", "int8")
    _overwrite(folder / "codes.npy")
    with pytest.warns(UserWarning, match=f"the compressed features file '{folder / 'codes.npy'}' is damaged \\(its bytes are not those written"):
        assert compressed_beside(tmp_path / "features.npy", "int8") == folder
    assert np.array_equal(load_compressed(folder).decode().numpy(), compress(x, "int8").decode().numpy())


def test_an_ogb_cache_overwritten_in_place_is_rebuilt_with_a_warning(tmp_path):
    pytest.importorskip("ogb")
    from test_ogb import _raw_data, write_ogb

    write_ogb(tmp_path / "ogbn_arxiv", "ogbn-arxiv", _raw_data())
    first = np.array(load_dataset("ogbn-arxiv", root=tmp_path).indices)
    path = tmp_path / "ogbn_arxiv" / "dgl_zerocopy" / "indices.npy"  # the graph: zeros would be edges to node 0
    _overwrite(path, b"\0")
    with pytest.warns(UserWarning, match=f"the cache file '{path}' is damaged \\(its bytes are not those written.*; rebuilding the cache"):
        again = load_dataset("ogbn-arxiv", root=tmp_path)
    np.testing.assert_array_equal(again.indices, first)


@pytest.mark.slow  # two runs of the command, each a process of its own (~15 s each)
@pytest.mark.skipif(not (SHARED_DATA / "planetoid").is_dir(), reason=f"real datasets not present at {SHARED_DATA}")
def test_the_command_on_a_zeroed_features_cache_warns_and_trains_as_before(tmp_path):
    """The issue's command: zeros over the cached cora features (same size), then the same command:
    one warning naming the file, and the same scores as the first run (one thread, no prefetch)."""
    command = ["train", "--config", "configs/cora-gcn.yaml", "--data-root", SHARED_DATA]
    command += ["--epochs", "3", "--feature-storage", "auto", "--host-buffer", "100%", "--no-progress", "--prefetch", "0"]
    env = {**os.environ, "DGL_ZEROCOPY_CACHE": str(tmp_path), "OMP_NUM_THREADS": "1"}

    def run() -> subprocess.CompletedProcess:
        done = run_cli(*command, env=env, timeout=600)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        return done

    scores = re.compile(r"^epoch +\d+ \| loss \S+ \| acc train \S+ val \S+ test \S+|^final test accuracy .*$", re.M)
    first = run()
    assert "damaged" not in first.stderr, first.stderr
    (path,) = (tmp_path / "features").glob("cora-*.npy")
    _overwrite(path, b"\0")
    second = run()
    assert f"the cached features file {str(path)!r} is damaged (its bytes are not those written" in second.stderr, second.stderr
    assert scores.findall(second.stdout) == scores.findall(first.stdout) != []
    np.testing.assert_array_equal(np.load(path), load_dataset("cora", root=SHARED_DATA).features)


# -- item 7: partial files of a writer killed midway ----------------------------------------------


def _blocked(ready) -> None:
    """In the forked writer: ``ready.set()`` where the write would go on, then wait to be killed."""
    ready.set()
    time.sleep(600)


def _write_features(folder: Path, ready) -> None:
    real = np.save

    def half_then_block(file, array, *args, **kwargs):
        real(file, array[: len(array) // 2])
        file.flush()
        _blocked(ready)

    np.save = half_then_block
    features_on_storage(generate(FAST), folder)


def _write_compressed(folder: Path, ready) -> None:
    from dgl_zerocopy.store.compression import table

    table.encode_into = lambda *a, **k: _blocked(ready)
    compressed_beside(folder / "features.npy", "int8")


def _write_generated(folder: Path, ready) -> None:
    real = np.save

    def block_at_features(file, array, *args, **kwargs):
        if Path(file).name == "features.npy":
            _blocked(ready)
        real(file, array, *args, **kwargs)

    np.save = block_at_features
    load_dataset("synthetic", synthetic=FAST, cache=folder)


def _kill_midway(writer, folder: Path) -> list[str]:
    """Fork a process running ``writer(folder, ready)``, wait until it is writing, SIGKILL it and wait
    for its pid to be gone; return the names of what it left in ``folder``."""
    before = set(os.listdir(folder))
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    proc = ctx.Process(target=writer, args=(folder, ready), daemon=True)
    proc.start()
    try:
        assert ready.wait(120), "the writer never started writing"
        left = sorted(set(os.listdir(folder)) - before)
        assert left, "the writer wrote nothing yet"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()  # reaped: the pid is gone
    assert proc.exitcode == -signal.SIGKILL
    return left


def test_a_features_file_left_by_a_killed_writer_is_removed_by_the_next_run(tmp_path):
    folder = tmp_path / "features"
    folder.mkdir()
    left = _kill_midway(_write_features, folder)
    assert all(name.startswith(".") for name in left), left  # hidden
    stored = features_on_storage(generate(FAST), folder)  # the next run
    assert [name for name in left if (folder / name).exists()] == [] and _hidden(folder) == []
    np.testing.assert_array_equal(np.load(stored.features.path), generate(FAST).features)


def test_a_compressed_folder_left_by_a_killed_writer_is_removed_by_the_next_run(tmp_path):
    x = np.random.default_rng(2).standard_normal((300, 24)).astype(np.float32)
    np.save(tmp_path / "features.npy", x)
    left = _kill_midway(_write_compressed, tmp_path)
    folder = compressed_beside(tmp_path / "features.npy", "int8")
    assert [name for name in left if (tmp_path / name).exists()] == [] and _hidden(tmp_path) == []
    assert np.array_equal(load_compressed(folder).decode().numpy(), compress(x, "int8").decode().numpy())


def test_a_generated_dataset_left_by_a_killed_writer_is_removed_by_the_next_run(tmp_path):
    left = _kill_midway(_write_generated, tmp_path)
    load_dataset("synthetic", synthetic=FAST, cache=tmp_path)
    assert [name for name in left if (tmp_path / name).exists()] == []
    assert [p.name for p in tmp_path.iterdir()] == [FAST.cache_name()]


def test_a_live_writers_partial_file_is_kept(tmp_path):
    """The sweep removes only partials whose writer is gone: a running writer's stays."""
    from dgl_zerocopy.store.cache_files import sweep_partials

    folder = tmp_path / "features"
    folder.mkdir()
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    proc = ctx.Process(target=_write_features, args=(folder, ready), daemon=True)
    proc.start()
    try:
        assert ready.wait(120)
        left = _hidden(folder)
        assert len(left) == 1 and ".partial-" in left[0], left  # names its writer
        assert sweep_partials(folder) == [] and _hidden(folder) == left
        features_on_storage(generate(FAST), folder)  # another run writes the same cache meanwhile
        assert _hidden(folder) == left
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
    assert sweep_partials(folder) == [folder / name for name in left] and _hidden(folder) == []


def _die_in_ogb_build(folder: Path, ready) -> None:
    """A writer of the OGB cache killed after making its partial folder (SIGKILL, no clean-up)."""
    import tempfile

    from dgl_zerocopy.data.ogb import CACHE_DIR
    from dgl_zerocopy.store.cache_files import partial_prefix

    (Path(tempfile.mkdtemp(prefix=partial_prefix(CACHE_DIR), dir=folder)) / "labels.npy").write_bytes(b"half")
    os.kill(os.getpid(), signal.SIGKILL)


def test_an_ogb_cache_left_by_a_killed_writer_is_removed_by_the_next_load(tmp_path):
    pytest.importorskip("ogb")
    from test_ogb import _raw_data, write_ogb

    folder = tmp_path / "ogbn_arxiv"
    write_ogb(folder, "ogbn-arxiv", _raw_data())
    proc = multiprocessing.get_context("fork").Process(target=_die_in_ogb_build, args=(folder, None))
    proc.start()
    proc.join()  # the pid is gone
    assert proc.exitcode == -signal.SIGKILL and len(_hidden(folder)) == 1
    load_dataset("ogbn-arxiv", root=tmp_path)
    assert _hidden(folder) == [] and (folder / "dgl_zerocopy" / "digests.json").is_file()
