"""The papers100M-shaped graph generated to disk (dgl_zerocopy/data/papers_disk.py) and opened without a
copy (dgl_zerocopy/data/disk_graph.py): the chunked writer equals the one-shot reference, reproducibly;
an interrupted run leaves nothing that opens as finished; edge positions past 2**31; no copy on open."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from script_runs import run_cli

from dgl_zerocopy.data import DatasetError
from dgl_zerocopy.data import papers_disk as pd
from dgl_zerocopy.data.disk_check import file_stamps, record_verdict
from dgl_zerocopy.data.disk_graph import FORMAT, META, NpyAppender, open_disk_graph
from dgl_zerocopy.data.synthetic import SyntheticSpec
from dgl_zerocopy.sampling.disk import hop_sampler, sampling_graph
from dgl_zerocopy.store.cache_files import partial_prefix

SPEC = SyntheticSpec.papers100m_like(num_nodes=6_000, seed=3)
BLOCK = 1_000
ARRAYS = ("indptr", "indices", "labels", "train_idx", "val_idx", "test_idx")


@pytest.fixture(scope="module")
def reference():
    return {f: pd.generate_arrays(SPEC, block_nodes=BLOCK, features=f) for f in pd.FEATURE_FORMATS}


def _features(graph, fmt):
    return np.load(graph.path / "features" / "codes.npy") if fmt == "int8" else np.load(graph.path / "features.npy")


@pytest.mark.parametrize("fmt", pd.FEATURE_FORMATS)
@pytest.mark.parametrize("chunk", [1, BLOCK, 2_500, 10**6])
def test_the_chunked_writer_equals_the_one_shot_reference(tmp_path, reference, fmt, chunk):
    graph = open_disk_graph(pd.generate_to_disk(tmp_path / "g", SPEC, features=fmt, block_nodes=BLOCK, chunk_nodes=chunk, progress=False))
    for name in ARRAYS:
        assert np.array_equal(getattr(graph, name), reference[fmt][name]), name
    assert np.array_equal(_features(graph, fmt), reference[fmt]["features"])
    assert graph.indices.dtype == np.int32 and graph.indptr.dtype == np.int64, "the narrowest index dtype, 64-bit offsets"
    assert graph.num_edges == graph.meta["num_edges"] and graph.meta["format"] == FORMAT


def test_the_graph_is_a_csc_of_the_spec_shape(reference):
    ref = reference["fp32"]
    n, indptr, indices = SPEC.num_nodes, ref["indptr"], ref["indices"]
    dst = np.repeat(np.arange(n), np.diff(indptr))
    assert indptr[0] == 0 and (np.diff(indptr) >= 0).all() and indices.min() >= 0 and indices.max() < n
    assert not (indices == dst).any(), "no self-loops"
    key = dst * n + indices
    assert (np.diff(key) > 0).all(), "columns sorted, no repeated source"
    assert 0.8 * SPEC.avg_degree < len(indices) / n < 1.2 * SPEC.avg_degree
    labels = ref["labels"]
    assert set(np.unique(labels)) == set(range(SPEC.num_classes)), "every class present"
    same = (labels[indices] == labels[dst]).mean()
    # 0.8 drawn; dropping repeats takes more same-class edges (hubs of a small class drawn twice)
    assert same > 0.6 > 10 * np.square(np.bincount(labels) / n).sum(), f"homophilous edges: {same:.2f}"
    split = np.concatenate([ref["train_idx"], ref["val_idx"], ref["test_idx"]])
    assert len(np.unique(split)) == len(split), "the splits are disjoint"


def test_int8_codes_decode_to_the_fp32_features(reference):
    layout = pd.GraphLayout.of(SPEC, BLOCK)
    decoded = reference["int8"]["features"].astype(np.float32) * layout.scale + layout.offset
    error = np.abs(decoded - reference["fp32"]["features"])
    inside = error <= layout.scale / 2 + 1e-5
    assert inside.mean() > 0.9999, "all but the clipped tail within half a step"


def test_the_same_seed_gives_the_same_bytes_and_another_seed_another_graph(tmp_path):
    a = pd.generate_to_disk(tmp_path / "a", SPEC, block_nodes=BLOCK, progress=False)
    b = pd.generate_to_disk(tmp_path / "b", SPEC, block_nodes=BLOCK, chunk_nodes=3 * BLOCK, progress=False)
    for name in [f"{k}.npy" for k in ARRAYS] + ["features/codes.npy", "features/scale.npy", "features/offset.npy"]:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    other = pd.generate_arrays(SyntheticSpec.papers100m_like(num_nodes=6_000, seed=4), block_nodes=BLOCK)
    assert not np.array_equal(other["indices"][:1000], open_disk_graph(a).indices[:1000])


def test_a_raise_midway_leaves_nothing_and_a_rerun_succeeds(tmp_path, monkeypatch, reference):
    calls = []
    real = pd._write_chunk

    def failing(*args):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("disk full")
        return real(*args)

    monkeypatch.setattr(pd, "_write_chunk", failing)
    with pytest.raises(RuntimeError, match="disk full"):
        pd.generate_to_disk(tmp_path / "g", SPEC, block_nodes=BLOCK, chunk_nodes=BLOCK, progress=False)
    assert list(tmp_path.iterdir()) == [], "no folder, no partial left behind"
    with pytest.raises(DatasetError, match="not a finished generated graph"):
        open_disk_graph(tmp_path / "g")
    monkeypatch.setattr(pd, "_write_chunk", real)
    graph = open_disk_graph(pd.generate_to_disk(tmp_path / "g", SPEC, block_nodes=BLOCK, progress=False))
    assert np.array_equal(graph.indices, reference["int8"]["indices"])


_KILLED = """
import sys, time
from dgl_zerocopy.data import papers_disk as pd
from dgl_zerocopy.data.synthetic import SyntheticSpec
real = pd._write_chunk
def slow(*args):
    out = real(*args)
    print("chunk", flush=True)
    time.sleep(60)
    return out
pd._write_chunk = slow
pd.generate_to_disk(sys.argv[1], SyntheticSpec.papers100m_like(num_nodes=6_000, seed=3), block_nodes=1_000, chunk_nodes=1_000, progress=False)
"""


@pytest.mark.slow
def test_a_killed_run_leaves_a_partial_folder_that_the_next_run_removes(tmp_path, reference):
    out = tmp_path / "g"
    proc = subprocess.Popen([sys.executable, "-c", _KILLED, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "chunk"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    leftovers = list(tmp_path.iterdir())
    assert len(leftovers) == 1 and leftovers[0].name.startswith(f".{out.name}.partial-"), leftovers
    assert not out.exists()
    graph = open_disk_graph(pd.generate_to_disk(out, SPEC, block_nodes=BLOCK, progress=False))
    assert [p.name for p in tmp_path.iterdir()] == ["g"], "the dead writer's folder was swept"
    assert np.array_equal(graph.indices, reference["int8"]["indices"])


def test_a_finished_graph_is_kept_and_other_folders_are_refused(tmp_path):
    out = pd.generate_to_disk(tmp_path / "g", SPEC, block_nodes=BLOCK, progress=False)
    stamp = (out / META).stat().st_mtime_ns
    time.sleep(0.01)
    assert pd.generate_to_disk(out, SPEC, block_nodes=BLOCK, progress=False) == out and (out / META).stat().st_mtime_ns == stamp
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x").write_text("mine")
    with pytest.raises(ValueError, match="not a generated graph"):
        pd.generate_to_disk(tmp_path / "other", SPEC, progress=False)
    with pytest.raises(ValueError, match="features must be one of"):
        pd.generate_to_disk(tmp_path / "h", SPEC, features="fp16")
    with pytest.raises(ValueError, match="fraction"):
        pd.papers100m_spec(0.0)
    assert pd.papers100m_spec(1.0).num_nodes == 111_059_956 and pd.papers100m_spec(0.01).num_nodes == 1_110_600


def test_a_damaged_folder_does_not_open(tmp_path):
    out = pd.generate_to_disk(tmp_path / "g", SPEC, block_nodes=BLOCK, progress=False)
    with open(out / "indices.npy", "r+b") as f:
        f.truncate(1000)
    with pytest.raises(DatasetError, match="indices.npy"):
        open_disk_graph(out)


def test_opening_copies_nothing(tmp_path):
    graph = open_disk_graph(pd.generate_to_disk(tmp_path / "g", SPEC, block_nodes=BLOCK, progress=False))
    mapped = {k: np.load(graph.path / f"{k}.npy", mmap_mode="r") for k in ("indptr", "indices")}
    assert isinstance(graph.indices, np.memmap) and not graph.indices.flags.writeable
    graph.populate()  # faults the pages in; the arrays stay the mappings
    relation = hop_sampler(graph).relations["_E"]
    assert relation.indptr is graph.indptr and relation.indices is graph.indices, "the sampler holds the mappings themselves"
    sg = sampling_graph(graph)
    for name, t in (("indptr", sg.indptr), ("indices", sg.indices)):
        array = getattr(graph, name)
        assert t.data_ptr() == array.ctypes.data, f"{name}: the tensor views the mapped pages"
        assert np.shares_memory(t.numpy(), array)
        assert np.array_equal(t.numpy(), mapped[name])
    sampled = hop_sampler(graph).sample({"_N": np.arange(5)}, {"_E": [15, 10, 5]}, rng=np.random.default_rng(0))
    pos, col, nodes = sampled.pos["_E"], sampled.col["_E"], sampled.nodes["_N"]
    assert np.array_equal(graph.indices[pos], nodes[sampled.row["_E"]]), "every sampled edge is in the file"
    assert ((pos >= graph.indptr[nodes[col]]) & (pos < graph.indptr[nodes[col] + 1])).all()


class _Registered:
    """Stands in for PinnedRange where there is no GPU: records what would be registered, and how."""

    def __init__(self, host_ptr: int, nbytes: int, read_only: bool = False) -> None:
        self.host_ptr, self.nbytes, self.read_only, self.pinned = host_ptr, nbytes, read_only, True

    def unpin(self) -> None:
        self.pinned = False


@pytest.mark.parametrize("read_only_supported", [True, False])
def test_a_pinned_sampling_graph_pins_the_read_only_maps_as_the_store_does(tmp_path, monkeypatch, read_only_supported):
    """The mapped CSC is read-only, which cudaHostRegister pins only with its read-only flag: where the GPU has it,
    the file pages themselves are registered read-only; elsewhere a copy-on-write map of the same bytes is (with a
    warning), never a writable shared map, so the files are never written. The registration is stood in for."""
    import dgl_zerocopy.sampling.graph as sampling_graph_module
    import dgl_zerocopy.store.pinning as pinning

    graph = open_disk_graph(pd.generate_to_disk(tmp_path / "g", SPEC, block_nodes=BLOCK, progress=False))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)  # close() waits for the device
    monkeypatch.setattr(pinning, "read_only_register_supported", lambda index: read_only_supported)
    monkeypatch.setattr(sampling_graph_module, "PinnedRange", _Registered)
    if read_only_supported:
        sg = sampling_graph(graph, "pinned", "cuda:0")
    else:
        with pytest.warns(UserWarning, match="copy-on-write"):
            sg = sampling_graph(graph, "pinned", "cuda:0")
    pins = sg._pins
    assert sg.device == torch.device("cuda", 0) and [p.read_only for p in pins] == [read_only_supported] * 2
    for pin, name, t in zip(pins, ("indptr", "indices"), (sg.indptr, sg.indices)):
        array = getattr(graph, name)
        assert (pin.host_ptr, pin.nbytes) == (t.data_ptr(), array.nbytes) and np.array_equal(t.numpy(), array)
        assert (t.data_ptr() == array.ctypes.data) == read_only_supported, f"{name}: the file's pages only where they can be pinned read-only"
    sg.close()
    assert not any(p.pinned for p in pins)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a GPU")
def test_a_pinned_sampling_graph_needs_a_gpu(tmp_path):
    graph = open_disk_graph(pd.generate_to_disk(tmp_path / "g", SPEC, block_nodes=BLOCK, progress=False))
    with pytest.raises(RuntimeError, match="placement='pinned' registers the CSC for a CUDA GPU, but torch sees none"):
        sampling_graph(graph, "pinned")


def test_features_through_the_storage_tier(tmp_path, reference):
    graph = open_disk_graph(pd.generate_to_disk(tmp_path / "g", SPEC, block_nodes=BLOCK, progress=False))
    layout = pd.GraphLayout.of(SPEC, BLOCK)
    ids = torch.tensor([0, 5, 5_999, 17, 3_000])
    with graph.feature_store(host_buffer_bytes=1 << 20) as store:
        rows = store.gather(ids)
    codes = reference["int8"]["features"][ids.numpy()]
    assert torch.allclose(rows, torch.from_numpy(codes.astype(np.float32) * layout.scale + layout.offset))
    dataset = graph.to_dataset()
    assert dataset.features.codec == "int8" and dataset.features.shape == (SPEC.num_nodes, SPEC.feat_dim)


def test_feature_stores_former_keywords_still_work_with_a_warning(tmp_path):
    """``host_cache_bytes=`` and ``host_cache_policy=``, the former names of ``host_buffer_bytes=`` and
    ``host_buffer_policy=``: the same store, with a DeprecationWarning; under both names, a TypeError."""
    graph = open_disk_graph(pd.generate_to_disk(tmp_path / "g", SPEC, block_nodes=BLOCK, progress=False))
    ids = torch.tensor([0, 5, 5_999, 17])
    with graph.feature_store(1 << 20, host_buffer_policy="lru") as store:
        expect = store.gather(ids), store.nbytes  # nbytes: the slots this budget gives an lru buffer
    for old in ({"host_cache_bytes": 1 << 20, "host_buffer_policy": "lru"}, {"host_buffer_bytes": 1 << 20, "host_cache_policy": "lru"}):
        (name,) = (k for k in old if k.startswith("host_cache"))
        with pytest.warns(DeprecationWarning, match=rf"feature_store\({name}=\) is deprecated: write {name.replace('cache', 'buffer')}="):
            store = graph.feature_store(**old)
        with store:
            assert torch.equal(store.gather(ids), expect[0]) and store.nbytes == expect[1]
    with pytest.raises(TypeError, match=r"got both host_buffer_bytes= and host_cache_bytes="):
        graph.feature_store(1 << 20, host_cache_bytes=1 << 20)


def _sparse_graph(folder, edges: int):
    """A generated-graph folder of two nodes with ``edges`` in-edges, for free: ``indices.npy`` is a
    sparse file (every source node 0) mapped in place; node 1 holds the last 10 edges."""
    folder.mkdir()
    np.save(folder / "indptr.npy", np.array([0, edges - 10, edges], dtype=np.int64))
    appender = NpyAppender(folder / "indices.npy", np.int32)
    appender.rows = edges
    appender.close()
    with open(folder / "indices.npy", "r+b") as f:
        f.truncate(f.seek(0, 2) + 4 * edges)
    for name in ("labels", "train_idx", "val_idx", "test_idx"):
        np.save(folder / f"{name}.npy", np.zeros(2 if name == "labels" else 0, dtype=np.int64))
    meta = {"format": FORMAT, "num_nodes": 2, "num_edges": edges, "index_dtype": "int32", "num_classes": 2, "feat_dim": 1}
    meta.update(num_train=0, num_val=0, num_test=0, features="features.npy")
    (folder / META).write_text(json.dumps(meta))
    record_verdict(folder, meta, file_stamps(folder))  # every id 0, offsets fine: recorded as checked, not read (8 GB) at open
    return open_disk_graph(folder)


def test_edge_positions_past_2_31_from_a_mapped_file(tmp_path):
    edges = 2**31 + 10
    graph = _sparse_graph(tmp_path / "g", edges)
    assert graph.indices.dtype == np.int32 and graph.num_edges == edges
    sampled = hop_sampler(graph).sample({"_N": np.array([1])}, {"_E": [4]}, rng=np.random.default_rng(0))
    pos = sampled.pos["_E"]
    assert pos.dtype == np.int64 and len(pos) == 4 and ((pos >= 2**31) & (pos < edges)).all(), pos
    assert (graph.indices[pos] == 0).all()
    sg = sampling_graph(graph)
    assert sg.idtype == torch.int32 and sg.edge_idtype == torch.int64
    past = torch.from_numpy(pos)
    assert torch.equal(sg.edge_ids(past), past), "edge ids keep their 64-bit value"


def test_the_partial_prefix_names_the_writer(tmp_path):
    assert partial_prefix("g").startswith(".g.partial-")


@pytest.mark.slow  # two child processes, each importing torch
def test_the_generate_command(tmp_path):
    r = run_cli("generate", tmp_path / "g", "--fraction", "0.0001", "--no-progress", "--seed", "3", timeout=120)
    assert r.returncode == 0, r.stderr
    assert "11,106 nodes" in r.stdout and "int32 indices" in r.stdout and "int8 features" in r.stdout
    graph = open_disk_graph(tmp_path / "g")
    assert graph.meta["spec"]["seed"] == 3 and graph.feature_store(host_buffer_bytes=1 << 20).gather(torch.tensor([0])).shape == (1, 128)
    r = run_cli("generate", tmp_path / "h", "--fraction", "2", timeout=120)
    assert r.returncode == 2 and r.stderr.strip() == "dgl-zerocopy: error: fraction must be in (0, 1], but got 2.0" and not (tmp_path / "h").exists()


def _vm_flags(address: int) -> list[str]:
    """The kernel's flags (/proc/self/smaps ``VmFlags``) of the mapping that holds ``address``."""
    inside = False
    for line in open("/proc/self/smaps"):
        head = line.split()
        if "-" in head[0] and ":" not in head[0]:
            start, end = (int(x, 16) for x in head[0].split("-"))
            inside = start <= address < end
        elif inside and head[0] == "VmFlags:":
            return head[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="reads the mappings' flags from Linux's /proc")
@pytest.mark.parametrize("huge_pages", [True, False])
def test_in_memory_copies_the_csc_into_anonymous_memory_advised_to_huge_pages(tmp_path, huge_pages):
    """``in_memory()``: the CSC copied out of the files (equal, read-only, advised to transparent huge
    pages unless asked not to, where the kernel has them), every other array still the file map; the
    sampler picks the same edges from the copy as from the files."""
    graph = open_disk_graph(pd.generate_to_disk(tmp_path / "g", SPEC, block_nodes=BLOCK, progress=False))
    copy = graph.in_memory(huge_pages=huge_pages)
    for name in ("indptr", "indices"):
        array, mapped = getattr(copy, name), getattr(graph, name)
        assert not isinstance(array, np.memmap) and not np.shares_memory(array, mapped), name
        assert array.dtype == mapped.dtype and np.array_equal(array, mapped) and not array.flags.writeable, name
        thp = os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled")
        assert ("hg" in _vm_flags(array.ctypes.data)) == (huge_pages and thp), name
    assert copy.labels is graph.labels and copy.features_path == graph.features_path and copy.path == graph.path
    assert isinstance(graph.indices, np.memmap), "the opened graph is left as it was"
    seeds, fanouts = {"_N": np.arange(0, 6_000, 7)}, {"_E": [15, 10]}
    ours = hop_sampler(copy).sample(seeds, fanouts, rng=np.random.default_rng(4))
    theirs = hop_sampler(graph).sample(seeds, fanouts, rng=np.random.default_rng(4))
    assert np.array_equal(ours.pos["_E"], theirs.pos["_E"]) and np.array_equal(ours.nodes["_N"], theirs.nodes["_N"])


def test_in_memory_refuses_a_copy_larger_than_the_memory_left_and_names_the_fix(tmp_path, monkeypatch):
    import psutil

    graph = open_disk_graph(pd.generate_to_disk(tmp_path / "g", SPEC, block_nodes=BLOCK, progress=False))
    need = graph.indptr.nbytes + graph.indices.nbytes
    available = int(need / 0.8) - 1  # one byte short of the 80 % rule
    monkeypatch.setattr(psutil, "virtual_memory", lambda: type("Memory", (), {"available": available})())
    with pytest.raises(MemoryError, match=r"indptr, indices into memory needs .* GiB, more than 80 % of the .* use populate\(\)"):
        graph.in_memory()
    monkeypatch.setattr(psutil, "virtual_memory", lambda: type("Memory", (), {"available": available + 2})())
    assert np.array_equal(graph.in_memory().indices, graph.indices), "at the rule's edge the copy is made"


def test_a_pinned_sampling_graph_registers_an_in_memory_copy_as_it_is(tmp_path, monkeypatch):
    """The copy is anonymous memory, read-only by NumPy's flag only: registered in place, no copy-on-write
    map and no warning, even where the GPU cannot pin read-only memory. The registration is stood in for."""
    import warnings

    import dgl_zerocopy.sampling.graph as sampling_graph_module
    import dgl_zerocopy.store.pinning as pinning

    graph = open_disk_graph(pd.generate_to_disk(tmp_path / "g", SPEC, block_nodes=BLOCK, progress=False)).in_memory()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(pinning, "read_only_register_supported", lambda index: False)
    monkeypatch.setattr(sampling_graph_module, "PinnedRange", _Registered)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sg = sampling_graph(graph, "pinned", "cuda:0")
    for pin, name in zip(sg._pins, ("indptr", "indices")):
        array = getattr(graph, name)
        assert (pin.host_ptr, pin.nbytes, pin.read_only) == (array.ctypes.data, array.nbytes, False), name
    sg.close()
