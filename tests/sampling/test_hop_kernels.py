"""The compiled hop kernels (dgl_zerocopy/sampling/hop_kernels.py) equal to the NumPy path they replace.

The kernels' draws against :func:`hop_kernels.uniforms`; one hop's picks against
:func:`cpu_hops.pick` (every fanout case, Floyd's scan and its hash set, with replacement, int32 and
memory-mapped indices, split over one to four threads, ``indices`` read after the draws or among them); the numbering against a loop; whole batches of
:class:`HopSampler` with and without the kernels element for element (homogeneous, three node types,
repeated and empty seeds; no thread left after a call); the kept buffers (a batch is not overwritten by the next); a forked child
sampling after its parent used the thread pool; the refusal without numba.
"""

from __future__ import annotations

import multiprocessing
import threading

import numpy as np
import pytest

from dgl_zerocopy.sampling import hop_kernels
from dgl_zerocopy.sampling.cpu_hops import HopSampler, Relation, pick

pytestmark = pytest.mark.skipif(not hop_kernels.available, reason="numba is not installed (it comes with dgl-zerocopy[pyg])")


def skewed_csc(num_nodes: int, seed: int, dtype=np.int64, max_degree: int = 300) -> tuple[np.ndarray, np.ndarray]:
    """In-degrees from 0 to ``max_degree`` (many below every fanout tested, many above), sources uniform."""
    gen = np.random.default_rng(seed)
    degree = np.minimum(gen.geometric(1 / 25, num_nodes) - 1, max_degree)
    degree[:5] = [0, 1, max_degree, 33, 34]
    indptr = np.concatenate([[0], np.cumsum(degree)]).astype(np.int64)
    return indptr, gen.integers(0, num_nodes, int(indptr[-1])).astype(dtype)


def compiled_pick(indptr, indices, dst, fanout, replace, seed, first=0):
    offset = np.empty(len(dst) + 1, dtype=np.int64)
    total = hop_kernels.count(indptr, dst, fanout, replace, offset)
    pos, col, src = (np.full(total, -7, dtype=np.int64) for _ in range(3))
    hop_kernels.pick(indptr, indices, dst, offset, fanout, replace, seed, first, pos, col, src)
    return pos, col, src


def test_the_kernels_draws_are_the_numpy_draws():
    rows, draws = np.array([0, 1, 7, 2**40, 123456789]), np.arange(50)
    for seed in (0, 1, 2**62 + 5):
        want = hop_kernels.uniforms(seed, rows, draws)
        got = np.array([[hop_kernels._uniform(seed, int(r), int(d)) for r in rows] for d in draws])
        assert np.array_equal(got, want)
        assert want.min() >= 0 and want.max() < 1
    many = hop_kernels.uniforms(3, np.arange(100_000), np.arange(2)).reshape(-1)
    assert abs(many.mean() - 0.5) < 0.005 and np.histogram(many, bins=10, range=(0, 1))[0].min() > 19_000


@pytest.mark.parametrize("fanout", [-1, 1, 5, 15, 33, 40, 100])
@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("parts", [1, 2, 4])
@pytest.mark.parametrize("in_flight", [True, False], ids=["reads-after-draws", "reads-among-draws"])
def test_one_hop_equals_numpy_pick(fanout, replace, parts, in_flight, monkeypatch):
    """Element for element, whatever the split and wherever ``indices`` is read: fanouts at and above 33
    use the hash set for Floyd's "taken"."""
    monkeypatch.setattr(hop_kernels, "threads", lambda: parts)
    monkeypatch.setattr(hop_kernels, "MORE_READS_IN_FLIGHT", in_flight)
    monkeypatch.setattr(hop_kernels, "PARALLEL_EDGES", 64)
    indptr, indices = skewed_csc(2000, fanout + 1 + 1000 * replace)
    dst = np.random.default_rng(1).integers(0, 2000, 900)
    dst[:5] = [0, 1, 2, 3, 4]
    want_pos, which = pick(indptr, dst, fanout, replace, 99)
    pos, col, src = compiled_pick(indptr, indices, dst, fanout, replace, 99, first=1000)
    assert np.array_equal(pos, want_pos) and np.array_equal(col, which + 1000) and np.array_equal(src, indices[want_pos])


def test_floyd_in_the_kernel_is_uniform_over_subsets_with_the_hash_set():
    """Fanout 40 of degree 50 (the hash-set path): each in-edge picked with frequency 40/50 (6 binomial sd)."""
    indptr = np.array([0, 50], dtype=np.int64)
    n = 4000
    dst = np.zeros(n, dtype=np.int64)
    pos, _, _ = compiled_pick(indptr, np.arange(50), dst, 40, False, 5)
    per_draw = pos.reshape(n, 40)
    assert all(len(set(row)) == 40 for row in per_draw.tolist())
    freq = np.bincount(pos, minlength=50) / n
    assert np.all(np.abs(freq - 0.8) <= 6 * np.sqrt(0.8 * 0.2 / n)), freq


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_int32_and_memory_mapped_indices(dtype, tmp_path):
    indptr, indices = skewed_csc(500, 2, dtype)
    path = tmp_path / "indices.bin"
    indices.tofile(path)
    mapped = np.memmap(path, dtype=dtype, mode="r", shape=indices.shape)
    dst = np.arange(0, 500, 3, dtype=np.int64)
    want, _ = pick(indptr, dst, 10, False, 4)
    for table in (indices, mapped):
        pos, _, src = compiled_pick(indptr, table, dst, 10, False, 4)
        assert np.array_equal(pos, want) and src.dtype == np.int64 and np.array_equal(src, indices[want].astype(np.int64))


def test_number_in_order_of_first_occurrence():
    ids = np.array([5, 3, 5, 9, 3, 1, 0, 9], dtype=np.int64)
    local = np.full(10, -1, dtype=np.int32)
    local[1] = 0  # already numbered
    rows, fresh = np.empty(len(ids), dtype=np.int64), np.empty(len(ids), dtype=np.int64)
    new = hop_kernels.number(local, ids, 1, rows, fresh)
    assert new == 4 and fresh[:new].tolist() == [5, 3, 9, 0]
    assert rows.tolist() == [1, 2, 1, 3, 2, 0, 4, 3]
    assert local[[5, 3, 9, 0, 1]].tolist() == [1, 2, 3, 4, 0] and (np.delete(local, [0, 1, 3, 5, 9]) == -1).all()


@pytest.mark.parametrize("in_flight", [True, False], ids=["prefetched", "not-prefetched"])
def test_number_of_many_ids_equals_a_loop(in_flight, monkeypatch):
    """Far more ids than the prefetch distance, repeats and gaps among them, with the prefetch and without."""
    monkeypatch.setattr(hop_kernels, "MORE_READS_IN_FLIGHT", in_flight)
    ids = np.random.default_rng(2).integers(0, 5_000, 20_000).astype(np.int64)
    local = np.full(5_000, -1, dtype=np.int32)
    rows, fresh = np.empty(len(ids), dtype=np.int64), np.empty(len(ids), dtype=np.int64)
    new = hop_kernels.number(local, ids, 7, rows, fresh)
    want = {}
    for v in ids.tolist():
        want.setdefault(v, 7 + len(want))
    assert new == len(want) and fresh[:new].tolist() == list(want)
    assert rows.tolist() == [want[v] for v in ids.tolist()]


def both(relations, num_nodes):
    return HopSampler(relations, num_nodes, compiled=False), HopSampler(relations, num_nodes, compiled=True)


def assert_same(a, b):
    assert a.nodes.keys() == b.nodes.keys() and a.row.keys() == b.row.keys()
    for t in a.nodes:
        assert np.array_equal(a.nodes[t], b.nodes[t]), t
        assert a.nodes[t].dtype == b.nodes[t].dtype == np.int64
    for r in a.row:
        for part in ("row", "col", "pos"):
            assert np.array_equal(getattr(a, part)[r], getattr(b, part)[r]), (r, part)
            assert getattr(a, part)[r].dtype == getattr(b, part)[r].dtype == np.int64, (r, part)
    assert a.nodes_per_hop == b.nodes_per_hop and a.edges_per_hop == b.edges_per_hop


@pytest.mark.parametrize("fanouts", [[15, 10, 5], [-1, 3], [40, 2], [0, 4]], ids=str)
@pytest.mark.parametrize("replace", [False, True])
def test_whole_batches_equal_the_numpy_path(fanouts, replace, monkeypatch):
    monkeypatch.setattr(hop_kernels, "PARALLEL_EDGES", 256)
    monkeypatch.setattr(hop_kernels, "threads", lambda: 3)
    indptr, indices = skewed_csc(3000, 7, np.int32)
    numpy_path, compiled = both({"e": Relation(indptr, indices, "n", "n")}, {"n": 3000})
    gen = np.random.default_rng(8)
    for seeds in (gen.integers(0, 3000, 200), np.array([4, 4, 9, 4]), np.empty(0, dtype=np.int64)):
        a = numpy_path.sample({"n": seeds}, {"e": fanouts}, replace=replace, rng=np.random.default_rng(11))
        b = compiled.sample({"n": seeds}, {"e": fanouts}, replace=replace, rng=np.random.default_rng(11))
        assert_same(a, b)
    assert (compiled._scratch("n") == -1).all()
    assert not [t for t in threading.enumerate() if t.name == "dgl-zerocopy-hops"], "a hop's threads end with the call"


def test_hetero_batches_equal_the_numpy_path():
    sizes = {"a": 400, "b": 300, "c": 50}
    relations = {}
    for i, (src, dst) in enumerate([("a", "b"), ("b", "a"), ("c", "a"), ("a", "a")]):
        indptr, indices = skewed_csc(sizes[dst], 20 + i)
        relations[(src, dst)] = Relation(indptr, indices % sizes[src], src, dst)
    numpy_path, compiled = both(relations, sizes)
    fanouts = {key: [5, 3, 2] for key in relations}
    fanouts[("c", "a")] = [-1, 0, 1]
    for seeds in ({"a": np.arange(0, 400, 7)}, {"a": np.array([1, 1]), "b": np.arange(30)}):
        assert_same(numpy_path.sample(seeds, fanouts, rng=np.random.default_rng(12)), compiled.sample(seeds, fanouts, rng=np.random.default_rng(12)))


def test_a_batch_is_not_overwritten_by_the_next():
    """The kept buffers are handed over with the batch; the next call writes elsewhere."""
    indptr, indices = skewed_csc(2000, 9)
    _, sampler = both({"e": Relation(indptr, indices, "n", "n")}, {"n": 2000})
    first = sampler.sample({"n": np.arange(100)}, {"e": [10, 5]}, rng=np.random.default_rng(1))
    kept = {part: getattr(first, part)["e"].copy() for part in ("row", "col", "pos")}
    for i in range(3):
        sampler.sample({"n": np.arange(100 + i, 300)}, {"e": [10, 5]}, rng=np.random.default_rng(2 + i))
    assert all(np.array_equal(getattr(first, part)["e"], kept[part]) for part in kept)


def _sample_in_child(sampler, conn):
    out = sampler.sample({"n": np.arange(50)}, {"e": [20, 10]}, rng=np.random.default_rng(3))
    conn.send((out.nodes["n"], out.pos["e"]))
    conn.close()


def test_a_forked_child_samples_after_the_parent_used_its_threads(monkeypatch):
    """As a DataLoader worker does, after the parent split hops over threads (each call starts and joins its own)."""
    monkeypatch.setattr(hop_kernels, "PARALLEL_EDGES", 64)
    monkeypatch.setattr(hop_kernels, "threads", lambda: 2)
    indptr, indices = skewed_csc(2000, 10)
    _, sampler = both({"e": Relation(indptr, indices, "n", "n")}, {"n": 2000})
    want = sampler.sample({"n": np.arange(50)}, {"e": [20, 10]}, rng=np.random.default_rng(3))
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_sample_in_child, args=(sampler, child))
    proc.start()
    child.close()
    try:
        assert parent.poll(120), "the forked child sent nothing in 120 s"
        nodes, pos = parent.recv()
    finally:
        proc.join(timeout=60)
        if proc.is_alive():
            proc.kill()
    assert proc.exitcode == 0 and np.array_equal(nodes, want.nodes["n"]) and np.array_equal(pos, want.pos["e"])


def test_compiled_without_numba_is_refused(monkeypatch):
    monkeypatch.setattr(hop_kernels, "available", False)
    indptr, indices = skewed_csc(10, 0)
    with pytest.raises(ImportError, match="pip install numba"):
        HopSampler({"e": Relation(indptr, indices, "n", "n")}, {"n": 10}, compiled=True)
    assert HopSampler({"e": Relation(indptr, indices, "n", "n")}, {"n": 10}).compiled is False


def test_the_numbering_prefetch_is_a_prefetch_instruction_that_changes_nothing():
    """``_prefetch`` against the installed numba and LLVM: it compiles (int32 and int64 arrays and
    indices), emits the CPU's prefetch instruction, and leaves the arrays and the result as they were."""
    import numba

    @numba.njit
    def total(a, idx):
        s = 0
        for i in range(len(idx)):
            hop_kernels._prefetch(a, idx[(i + 5) % len(idx)])
            s += a[idx[i]]
        return s

    for dtype in (np.int32, np.int64):
        a = np.arange(10_000, dtype=dtype) * 3
        idx = np.random.default_rng(0).integers(0, len(a), 5_000).astype(dtype)
        before = a.copy()
        assert total(a, idx) == int(a[idx].sum()) and np.array_equal(a, before)
    asm = "\n".join(total.inspect_asm().values()).lower()
    assert "prefetch" in asm or "prfm" in asm  # x86-64, AArch64
