"""Host tables the package makes itself are in 2 MB pages by default (dgl_zerocopy/store/host_memory.py):
datasets read into memory, generated features, the storage tier's host buffer, a file map a zero-copy
store pins, the CSC a GPU sampler reads. On the CPU: what pages they got (/proc/self/smaps), that their
values equal the source, the fallback where huge pages are unavailable (one warning per process and
reason), the switch that turns the default off, and that nothing stays mapped after close(), an error
or a signal.

Registration goes through the stand-in CUDA runtime of tests/store/test_pinning.py.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import mapped
from test_pinning import FakeRuntime, mapping_of, use  # noqa: E402 - also skips without CuPy

from dgl_zerocopy.data import SyntheticSpec, load_dataset
from dgl_zerocopy.data.synthetic import generate
from dgl_zerocopy.sampling.graph import SamplingGraph
from dgl_zerocopy.store import huge_pages, pin_target, pinning
from dgl_zerocopy.store.host_files import tensor_view
from dgl_zerocopy.store.host_memory import HUGE_PAGES_ENV, host_array, host_copy, huge_pages_wanted, load_npy, page_report
from dgl_zerocopy.store.huge_pages import HUGE_PAGE_BYTES, HostTable

THP = huge_pages._thp_mode()
needs_thp = pytest.mark.skipif(THP not in ("always", "madvise"), reason=f"transparent huge pages are {THP!r} here")
BIG = (8192, 128)  # 4 MiB of float32: two huge pages


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    """Each test starts with the default (no variable) and meets the once-per-process warnings afresh."""
    monkeypatch.delenv(HUGE_PAGES_ENV, raising=False)
    monkeypatch.setattr(huge_pages, "_warned", set())


@pytest.fixture
def no_huge_pages(monkeypatch):
    """A machine without transparent huge pages and with an empty hugetlb pool (the probe's answers)."""
    monkeypatch.setattr(huge_pages, "_thp_mode", lambda: "never")
    monkeypatch.setattr(huge_pages, "_free_hugetlb_pages", lambda: 0)


def _features(rows: int = BIG[0], dim: int = BIG[1]) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((rows, dim), dtype=np.float32)


# -- the switch ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "wanted"), [(None, True), ("1", True), ("on", True), ("0", False), ("off", False), ("False", False), ("no", False)])
def test_the_default_is_on_and_the_variable_turns_it_off(monkeypatch, value, wanted):
    if value is not None:
        monkeypatch.setenv(HUGE_PAGES_ENV, value)
    assert huge_pages_wanted() is wanted
    assert huge_pages_wanted(True) is True and huge_pages_wanted(False) is False  # a call's own choice wins


def test_a_variable_not_understood_is_named_with_the_fix(monkeypatch):
    monkeypatch.setenv(HUGE_PAGES_ENV, "maybe")
    with pytest.raises(ValueError, match=r"DGL_ZEROCOPY_HUGE_PAGES='maybe' is not understood: set it to 0 .* or 1"):
        host_array(BIG, np.float32)


# -- what the tables get --------------------------------------------------------------------------


@needs_thp
def test_a_table_of_2mb_or_more_is_2mb_aligned_zeroed_and_in_huge_pages():
    table = host_array(BIG, np.float32)
    assert table.ctypes.data % HUGE_PAGE_BYTES == 0 and table.shape == BIG and table.flags.writeable
    assert not table.any()
    table[:] = 1.0
    report = page_report(table)
    assert report.method == "thp" and "hg" in report.vm_flags and report.fallback.startswith("MAP_HUGETLB not tried")
    assert page_report(torch.from_numpy(table)).vm_flags == report.vm_flags  # a tensor is reported as its array


def test_off_and_small_tables_get_4k_pages_without_a_warning(monkeypatch):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        small = host_array((10, 4), np.float32)  # under one huge page
        off = host_array(BIG, np.float32, huge_pages=False)
        monkeypatch.setenv(HUGE_PAGES_ENV, "0")
        by_variable = host_array(BIG, np.float32)
    for table in (small, off, by_variable):
        table[:] = 2.0
        assert page_report(table).method == "small" and "hg" not in page_report(table).vm_flags
        assert table.ctypes.data % 4096 == 0  # page-aligned, as the storage tier's direct reads need


@needs_thp
def test_a_small_table_asked_for_huge_pages_gets_them():
    table = host_array((10, 4), np.float32, huge_pages=True)
    table[:] = 1.0
    assert page_report(table).method == "thp" and table.ctypes.data % HUGE_PAGE_BYTES == 0


def test_without_huge_pages_one_warning_per_process_and_an_equal_table(no_huge_pages):
    source = _features()
    with pytest.warns(UserWarning, match=r"get 4 KiB pages, not 2 MB ones: no transparent huge pages \(never\).*DGL_ZEROCOPY_HUGE_PAGES=0"):
        first = host_copy(source)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same reason again: no second warning
        second = host_copy(source[:6000])
        table = host_array(BIG, np.int64)
    np.testing.assert_array_equal(first, source)
    np.testing.assert_array_equal(second, source[:6000])
    assert not table.any() and page_report(first).method == "small"


def test_a_copy_equals_its_source_and_keeps_it_read_only():
    source = _features()
    source.setflags(write=False)
    copy = host_copy(source)
    np.testing.assert_array_equal(copy, source)
    assert copy.ctypes.data != source.ctypes.data and not copy.flags.writeable
    assert host_copy(source, read_only=False).flags.writeable
    ids = np.array([0, 8191, 17, 17])
    np.testing.assert_array_equal(copy[ids], source[ids])


def test_an_error_half_way_through_a_host_table_leaves_nothing_mapped(monkeypatch):
    made = []
    real = huge_pages.mmap.mmap

    def recording(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    def failing(*args, **kwargs):
        raise MemoryError("the view failed")

    monkeypatch.setattr(huge_pages.mmap, "mmap", recording)
    monkeypatch.setattr(huge_pages.np, "frombuffer", failing)
    with pytest.raises(MemoryError, match="the view failed"):
        HostTable(BIG, np.float32)
    assert len(made) == 1 and made[0].closed  # unmapped at once, not left to the garbage collector


# -- datasets ------------------------------------------------------------------------------------


@needs_thp
def test_npy_files_read_into_memory_land_in_huge_pages_equal_to_the_file(tmp_path):
    source = _features()
    np.save(tmp_path / "f.npy", source)
    table = load_npy(tmp_path / "f.npy")
    np.testing.assert_array_equal(table, source)
    assert table.flags.writeable and page_report(table).method == "thp"
    off = load_npy(tmp_path / "f.npy", huge_pages=False)  # numpy.load's own array (NumPy may advise huge pages itself)
    np.testing.assert_array_equal(off, source)
    assert page_report(off).fallback is None and page_report(table).fallback is not None


def test_a_damaged_npy_file_raises_and_leaves_nothing_mapped(tmp_path):
    np.save(tmp_path / "f.npy", _features())
    (tmp_path / "f.npy").write_bytes((tmp_path / "f.npy").read_bytes()[: 1 << 20])  # cut short
    gc.collect()
    before = len(Path("/proc/self/maps").read_text().splitlines())
    with pytest.raises(ValueError):
        load_npy(tmp_path / "f.npy")
    gc.collect()
    assert len(Path("/proc/self/maps").read_text().splitlines()) <= before


@needs_thp
def test_generated_features_are_in_huge_pages_and_the_cached_copy_too(tmp_path):
    spec = SyntheticSpec(num_nodes=6000, avg_degree=4.0, feat_dim=128, num_classes=4)  # 3 MiB of features
    generated = generate(spec)
    assert page_report(generated.features).method == "thp"
    first = load_dataset("synthetic", spec, cache=tmp_path)  # generated, written to the cache
    cached = load_dataset("synthetic", spec, cache=tmp_path)  # read back from it
    np.testing.assert_array_equal(cached.features, generated.features)
    np.testing.assert_array_equal(first.features, generated.features)
    assert page_report(cached.features).method == "thp" and cached.features.flags.writeable
    ids = np.array([5, 0, 5999])
    np.testing.assert_array_equal(cached.features[ids], generated.features[ids])


def test_generated_features_under_the_variable_are_ordinary_memory_and_equal(tmp_path, monkeypatch):
    spec = SyntheticSpec(num_nodes=6000, avg_degree=4.0, feat_dim=128, num_classes=4)
    huge = generate(spec)
    monkeypatch.setenv(HUGE_PAGES_ENV, "off")
    plain = generate(spec)
    assert page_report(plain.features).method == "small"
    np.testing.assert_array_equal(plain.features, huge.features)


# -- the storage tier's host buffer ---------------------------------------------------------------


@needs_thp
@pytest.mark.parametrize("setting", [None, "0"])
def test_the_host_buffer_is_in_huge_pages_by_default_and_gathers_the_file_rows(tmp_path, monkeypatch, setting):
    from dgl_zerocopy import FeatureStore
    from dgl_zerocopy.store import StorageTier

    if setting is not None:
        monkeypatch.setenv(HUGE_PAGES_ENV, setting)
    source = _features(20000, 64)  # 5 MiB file, 4 MiB buffer
    np.save(tmp_path / "f.npy", source)
    store = FeatureStore(tmp_path / "f.npy", backend="cpu", storage=StorageTier(4 << 20))
    try:
        ids = torch.from_numpy(np.random.default_rng(1).integers(0, 20000, 3000))
        torch.testing.assert_close(store.gather(ids).clone(), torch.from_numpy(source)[ids])
        buffer_rows = store._backend.buffer.rows
        assert page_report(buffer_rows).method == ("thp" if setting is None else "small")
        assert buffer_rows.data_ptr() % 4096 == 0
        span = (buffer_rows.data_ptr(), buffer_rows.data_ptr() + buffer_rows.numel() * buffer_rows.element_size())
        del buffer_rows
    finally:
        store.close()
    del store
    gc.collect()
    assert not mapped(*span)  # the buffer is unmapped with the store


# -- a file map that a zero-copy store pins --------------------------------------------------------


@needs_thp
def test_a_file_map_pinned_through_a_private_copy_gets_it_in_huge_pages_and_the_file_untouched(tmp_path, monkeypatch):
    source = _features()
    path = tmp_path / "f.npy"
    np.save(path, source)
    before = path.read_bytes()
    array = np.load(path, mmap_mode="r")
    table = tensor_view(array)
    fake = use(monkeypatch, FakeRuntime(read_only_supported=0, touch_pages=True))
    with pytest.warns(UserWarning, match=r"cannot pin read-only memory .* private copy in 2 MB pages, which is pinned: 4.0 MiB of RAM"):
        pinned, read_only = pin_target.pinnable_table(table, array, pinning.read_only_register_supported(0))
    assert not read_only and pinned.data_ptr() != table.data_ptr() and pinned.data_ptr() % HUGE_PAGE_BYTES == 0
    torch.testing.assert_close(pinned, torch.from_numpy(source))
    assert page_report(pinned).method == "thp"
    pinned_range = pinning.PinnedRange(pinned.data_ptr(), pinned.numel() * pinned.element_size(), read_only=read_only)
    assert fake.registered[pinned.data_ptr()][0] == source.nbytes
    pinned_range.unpin()
    assert path.read_bytes() == before


def test_a_file_map_is_pinned_read_only_in_place_where_the_device_can(tmp_path, monkeypatch):
    """Every process that maps the file pins the same pages: no private copy per process."""
    np.save(tmp_path / "f.npy", _features())
    array = np.load(tmp_path / "f.npy", mmap_mode="r")
    table = tensor_view(array)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got, read_only = pin_target.pinnable_table(table, array, read_only_supported=True)
    assert got is table and read_only


@pytest.mark.parametrize("reason", ["variable", "unavailable"])
def test_a_pinned_file_map_takes_the_old_path_when_off_or_unavailable(tmp_path, monkeypatch, reason):
    source = _features()
    np.save(tmp_path / "f.npy", source)
    array = np.load(tmp_path / "f.npy", mmap_mode="r")
    table = tensor_view(array)
    if reason == "variable":
        monkeypatch.setenv(HUGE_PAGES_ENV, "0")
        with pytest.warns(UserWarning) as caught:
            got, read_only = pin_target.pinnable_table(table, array, read_only_supported=False)
    else:
        monkeypatch.setattr(huge_pages, "_thp_mode", lambda: "never")
        monkeypatch.setattr(huge_pages, "_free_hugetlb_pages", lambda: 0)
        with pytest.warns(UserWarning) as caught:
            got, read_only = pin_target.pinnable_table(table, array, read_only_supported=False)
    messages = [str(w.message) for w in caught]
    assert any("mapped copy-on-write instead" in m for m in messages)  # the old path
    assert any("4 KiB pages, not 2 MB ones" in m for m in messages) == (reason == "unavailable")
    assert not read_only and mapping_of(got.data_ptr())[1] == str(tmp_path / "f.npy")  # a private map of the file
    torch.testing.assert_close(got, table)


# -- the pinned CSC a GPU sampler reads -----------------------------------------------------------


def _csc(n: int = 300_000, degree: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    indptr = torch.arange(0, n * degree + 1, degree, dtype=torch.int64)  # 2.3 MiB
    indices = torch.from_numpy(np.random.default_rng(2).integers(0, n, n * degree))  # 9.2 MiB
    return indptr, indices


@needs_thp
def test_a_pinned_csc_asked_for_huge_pages_pins_equal_copies_and_close_unmaps_them(monkeypatch):
    fake = use(monkeypatch, FakeRuntime())
    indptr, indices = _csc()
    expected = indices.clone()
    graph = SamplingGraph(indptr, indices, placement="pinned", device="cuda:0", huge_pages=True)
    assert graph.huge_page_copies
    copies = graph.indptr, graph.indices
    for copy, given in zip(copies, (indptr, indices)):
        assert copy.data_ptr() != given.data_ptr() and copy.data_ptr() % HUGE_PAGE_BYTES == 0
        torch.testing.assert_close(copy, given)
        assert page_report(copy).method == "thp"
        assert fake.registered[copy.data_ptr()][0] == given.numel() * 8
    span = [(c.data_ptr(), c.data_ptr() + c.numel() * 8) for c in copies]
    del copies, copy
    graph.close()
    gc.collect()
    assert fake.registered == {} and not any(mapped(start, end) for start, end in span)
    torch.testing.assert_close(indices, expected)  # the caller's tensors are untouched and alive


def test_a_pinned_csc_of_given_tensors_stays_in_place_by_default(monkeypatch):
    fake = use(monkeypatch, FakeRuntime())
    indptr, indices = _csc()
    with SamplingGraph(indptr, indices, placement="pinned", device="cuda:0") as graph:
        assert graph.indices.data_ptr() == indices.data_ptr() and not graph.huge_page_copies
        assert indices.data_ptr() in fake.registered
    assert fake.registered == {}


def test_a_pinned_csc_without_huge_pages_is_pinned_in_place_with_one_warning(monkeypatch, no_huge_pages):
    fake = use(monkeypatch, FakeRuntime())
    indptr, indices = _csc()
    with pytest.warns(UserWarning, match="4 KiB pages, not 2 MB ones: no transparent huge pages"):
        graph = SamplingGraph(indptr, indices, placement="pinned", device="cuda:0", huge_pages=True)
    with graph:
        assert not graph.huge_page_copies and graph.indices.data_ptr() == indices.data_ptr()
        assert set(fake.registered) == {indptr.data_ptr(), indices.data_ptr()}


def test_a_failed_registration_of_the_csc_copies_leaves_nothing_pinned_or_mapped(monkeypatch):
    fake = use(monkeypatch, FakeRuntime())
    real = fake.hostRegister
    calls = []

    def second_fails(ptr, size, flags):
        calls.append((ptr, size))
        if len(calls) == 2:
            raise fake.CUDARuntimeError("cudaErrorMemoryAllocation: out of memory")
        real(ptr, size, flags)

    monkeypatch.setattr(fake, "hostRegister", second_fails)
    indptr, indices = _csc()
    with pytest.raises(RuntimeError, match="could not page-lock"):
        SamplingGraph(indptr, indices, placement="pinned", device="cuda:0", huge_pages=True)
    gc.collect()
    assert fake.registered == {}
    if THP in ("always", "madvise"):  # the copies were made, then freed with the failed graph
        assert calls[0][0] != indptr.data_ptr() and not any(mapped(ptr, ptr + size) for ptr, size in calls)


# -- a child killed by a signal -------------------------------------------------------------------

CHILD = """
import sys
import numpy as np
from dgl_zerocopy.data import SyntheticSpec
from dgl_zerocopy.data.synthetic import generate
data = generate(SyntheticSpec(num_nodes=6000, avg_degree=4.0, feat_dim=128, num_classes=4))
start = data.features.ctypes.data
print(f"READY {start} {start + data.features.nbytes}", flush=True)
sys.stdin.read()  # until the parent kills it
"""


def _huge_bytes_of(pid: int, start: int, end: int) -> int:
    return huge_pages._smaps_totals(start, end, smaps=f"/proc/{pid}/smaps")[1]


@needs_thp
def test_a_child_killed_by_sigkill_had_its_features_in_huge_pages_and_leaves_no_mapping():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH")]))}
    env.pop(HUGE_PAGES_ENV, None)
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(CHILD)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        line = child.stdout.readline().split()  # the event: the table is made and filled
        assert line and line[0] == "READY", child.stderr.read() if child.poll() is not None else line
        start, end = int(line[1]), int(line[2])
        assert _huge_bytes_of(child.pid, start, end) >= HUGE_PAGE_BYTES  # the default reached the child's table
        child.kill()
        child.wait(timeout=60)  # reaped: the kernel has taken its mappings back
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=60)
        for stream in (child.stdin, child.stdout, child.stderr):
            stream.close()
    assert child.returncode == -signal.SIGKILL
    assert not Path(f"/proc/{child.pid}").exists() and _huge_bytes_of(child.pid, start, end) == 0


def test_page_report_names_no_fallback_for_memory_it_did_not_make():
    plain = np.ones(BIG, dtype=np.float32)
    report = page_report(plain)
    assert report.fallback is None and report.rss_bytes >= plain.nbytes - 4096 and report.method in ("thp", "small")


@needs_thp
def test_a_zero_copy_store_over_a_npy_path_gathers_from_its_huge_page_copy(tmp_path, monkeypatch):
    """The real FeatureStore on the stand-in device of tests/store/test_store_zerocopy_cpu.py: what it registers
    is the 2 MB-page copy (not the file's pages), and rows gathered through it equal ``features[ids]``."""
    from test_store_zerocopy_cpu import Device, install, zerocopy_store

    gpu = install(monkeypatch, Device())
    gpu.runtime = use(monkeypatch, FakeRuntime(read_only_supported=0, touch_pages=True))  # a device that needs the private copy
    source = _features()
    np.save(tmp_path / "f.npy", source)
    with pytest.warns(UserWarning, match="read into a private copy in 2 MB pages"):
        store = zerocopy_store(str(tmp_path / "f.npy"))
    try:
        ((address, (size, flags)),) = gpu.runtime.registered.items()
        assert size == source.nbytes and address % HUGE_PAGE_BYTES == 0 and not flags & 0x08  # the copy, writable
        assert page_report(store._table).method == "thp" and store._table.data_ptr() == address
        ids = torch.from_numpy(np.random.default_rng(3).integers(0, BIG[0], 500))
        torch.testing.assert_close(store.gather(ids).clone(), torch.from_numpy(source)[ids])
    finally:
        store.close()
    assert gpu.runtime.registered == {}


@needs_thp
def test_from_dgl_copies_a_csc_it_builds_and_pins_dgl_s_own_in_place(monkeypatch):
    dgl = pytest.importorskip("dgl")
    fake = use(monkeypatch, FakeRuntime())
    n, m = 50_000, 400_000  # 3.2 MB of int64 sources
    rng = np.random.default_rng(4)
    src, dst = torch.from_numpy(rng.integers(0, n, m)), torch.from_numpy(rng.integers(0, n, m))
    coo_only = dgl.graph((src, dst), num_nodes=n).formats("coo")  # DGL keeps no CSC: the one sorted from COO is ours
    with SamplingGraph.from_dgl(coo_only, "pinned", "cuda:0") as ours:
        assert ours.huge_page_copies and page_report(ours.indices).method == "thp"
        with SamplingGraph.from_dgl(coo_only, "host") as reference:
            torch.testing.assert_close(ours.indptr, reference.indptr)
            torch.testing.assert_close(ours.indices, reference.indices)
    g = dgl.graph((src, dst), num_nodes=n)
    dgl_indptr, dgl_indices, _ = g.adj_tensors("csc")
    with SamplingGraph.from_dgl(g, "pinned", "cuda:0") as theirs:
        assert not theirs.huge_page_copies and theirs.indices.data_ptr() == dgl_indices.data_ptr()
    with SamplingGraph.from_dgl(g, "pinned", "cuda:0", huge_pages=True) as asked:
        assert asked.huge_page_copies and asked.indices.data_ptr() != dgl_indices.data_ptr()
        torch.testing.assert_close(asked.indices, dgl_indices)
    assert fake.registered == {}


@needs_thp
def test_compressed_codes_made_in_memory_are_in_huge_pages_and_equal_to_the_old_path(monkeypatch):
    from dgl_zerocopy import compress

    source = _features(20000, 128)  # 2.4 MiB of int8 codes
    huge = compress(source, "int8")
    monkeypatch.setenv(HUGE_PAGES_ENV, "0")
    plain = compress(source, "int8")
    assert page_report(huge.array).method == "thp" and page_report(plain.array).method == "small"
    np.testing.assert_array_equal(huge.array, plain.array)
    ids = torch.tensor([0, 19999, 7])
    torch.testing.assert_close(huge.decode(ids), plain.decode(ids))
