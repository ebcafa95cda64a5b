"""HostTable (dgl_zerocopy/store/huge_pages.py) on the CPU: alignment, what pages it got, its fallbacks,
and that close(), an error or a signal leaves nothing mapped or pinned.

Registration goes through PinnedRange with a stand-in CUDA runtime (its names are checked against
CuPy's where CuPy is installed), as tests/store/test_pinning.py does.
"""

from __future__ import annotations

import gc
import mmap
import os
import signal
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import mapped

from dgl_zerocopy.store import huge_pages, pinning
from dgl_zerocopy.store.huge_pages import HUGE_PAGE_BYTES, HostTable

THP = huge_pages._thp_mode()
needs_thp = pytest.mark.skipif(THP not in ("always", "madvise"), reason=f"transparent huge pages are {THP!r} here")


class _Error(Exception):
    pass


class FakeRuntime:
    """The names of ``cupy.cuda.runtime`` that PinnedRange calls; records what is registered."""

    CUDARuntimeError = _Error
    memoryTypeHost = 1

    def __init__(self) -> None:
        self.registered: dict[int, int] = {}

    def hostRegister(self, ptr: int, size: int, flags: int) -> None:
        self.registered[ptr] = size

    def hostUnregister(self, ptr: int) -> None:
        del self.registered[ptr]

    def pointerGetAttributes(self, ptr: int):
        attributes = type("PointerAttributes", (), {})()
        attributes.type = self.memoryTypeHost if any(p <= ptr < p + n for p, n in self.registered.items()) else 0
        attributes.devicePointer = ptr if attributes.type else 0
        return attributes


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    """Each test meets the once-per-process warnings afresh."""
    monkeypatch.setattr(huge_pages, "_warned", set())


@pytest.fixture
def runtime(monkeypatch) -> FakeRuntime:
    fake = FakeRuntime()
    monkeypatch.setattr(pinning, "_runtime", lambda: fake)
    monkeypatch.setattr(pinning, "_registered", {})
    return fake


def test_the_stand_in_has_only_names_the_real_runtime_has():
    cupy = pytest.importorskip("cupy", reason="needs CuPy to compare names with")
    for name in [n for n in vars(FakeRuntime) if not n.startswith("_")]:
        assert hasattr(cupy.cuda.runtime, name), name


@pytest.mark.parametrize("pages", ["huge", "small"])
def test_the_table_is_2mb_aligned_zeroed_and_as_asked(pages):
    with HostTable((1000, 100), np.float32, pages=pages) as table:
        array = table.array
        assert table.address % HUGE_PAGE_BYTES == 0 and table.mapped_bytes % HUGE_PAGE_BYTES == 0
        assert table.mapped_bytes >= table.nbytes == 1000 * 100 * 4
        assert array.shape == (1000, 100) and array.dtype == np.float32 and array.flags.writeable and not array.any()
        assert mapped(table.address, table.address + table.mapped_bytes)
        array[:] = 7
        assert float(table.tensor().sum()) == 7 * 1000 * 100
        del array


@needs_thp
def test_huge_pages_are_advised_and_reported_from_smaps():
    with HostTable((4 * HUGE_PAGE_BYTES // 4,), np.int32, pages="huge") as table:
        table.array[:] = 1  # transparent huge pages come at the first write
        report = table.report()
        assert report.method in ("hugetlb", "thp")
        if report.method == "thp":
            assert "hg" in report.vm_flags and "nh" not in report.vm_flags
            assert "MAP_HUGETLB" in report.fallback  # why the pool was not used is named
        assert report.rss_bytes >= table.nbytes and 0 <= report.huge_bytes <= report.rss_bytes
        assert 0.0 <= report.huge_share <= 1.0


def test_small_pages_advise_against_huge_ones():
    with HostTable((4 * HUGE_PAGE_BYTES // 4,), np.int32, pages="small") as table:
        table.array[:] = 1
        report = table.report()
        assert report.method == "small" and report.fallback is None and report.huge_bytes == 0
        if hasattr(mmap, "MADV_NOHUGEPAGE"):
            assert "nh" in report.vm_flags


@needs_thp
def test_a_failing_map_hugetlb_falls_back_to_transparent_huge_pages(monkeypatch):
    real = mmap.mmap

    def refusing(fileno, length, *args, flags=mmap.MAP_SHARED, **kwargs):
        if flags & huge_pages._MAP_HUGETLB:
            raise OSError(12, "Cannot allocate memory")
        return real(fileno, length, *args, flags=flags, **kwargs)

    monkeypatch.setattr(huge_pages, "_free_hugetlb_pages", lambda: 10**6)  # the pool looks big enough
    monkeypatch.setattr(huge_pages.mmap, "mmap", refusing)
    with HostTable((1024,), np.float32) as table:
        assert table.method == "thp" and table.address % HUGE_PAGE_BYTES == 0
        assert table.fallback.startswith("MAP_HUGETLB failed (Cannot allocate memory)") and "transparent huge pages" in table.fallback


def test_an_empty_pool_is_not_tried_and_says_how_to_fill_it(monkeypatch):
    monkeypatch.setattr(huge_pages, "_free_hugetlb_pages", lambda: 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # where THP is off too, the 4 KiB warning (tested below)
        with HostTable((1024,), np.float32) as table:
            assert table.method in ("thp", "small")
            assert "MAP_HUGETLB not tried: 0 free 2 MiB pages" in table.fallback and "/proc/sys/vm/nr_hugepages" in table.fallback


def test_without_transparent_huge_pages_4k_pages_come_with_a_warning(monkeypatch):
    monkeypatch.setattr(huge_pages, "_free_hugetlb_pages", lambda: 0)
    monkeypatch.setattr(huge_pages, "_thp_mode", lambda: "never")
    with pytest.warns(UserWarning, match=r"get 4 KiB pages, not 2 MB ones.*MAP_HUGETLB not tried.*\(never\).*DGL_ZEROCOPY_HUGE_PAGES=0"):
        table = HostTable((1024,), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process and reason: a second table says nothing
        second = HostTable((4096,), np.float32)
    with table, second:
        table.array[:] = 1
        assert table.method == second.method == "small" and "hg" not in table.report().vm_flags
        assert second.fallback == table.fallback.replace("4.0 KiB", "16.0 KiB")


def test_the_pool_is_read_from_meminfo(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 100 kB\nHugePages_Total:      8\nHugePages_Free:       5\nHugepagesize:       2048 kB\n")
    assert huge_pages._free_hugetlb_pages(str(meminfo)) == 5
    meminfo.write_text("HugePages_Free:       5\nHugepagesize:    1048576 kB\n")  # 1 GiB pages: not ours
    assert huge_pages._free_hugetlb_pages(str(meminfo)) == 0
    assert huge_pages._free_hugetlb_pages(str(tmp_path / "missing")) == 0


@pytest.mark.skipif(huge_pages._free_hugetlb_pages() < 2, reason="no free pages in this machine's hugetlb pool (/proc/sys/vm/nr_hugepages)")
def test_map_hugetlb_where_the_pool_has_pages():
    with HostTable((HUGE_PAGE_BYTES // 4,), np.int32) as table:
        table.array[:] = 3
        report = table.report()
        assert report.method == "hugetlb" and report.fallback is None and "ht" in report.vm_flags
        assert report.kernel_page_bytes == HUGE_PAGE_BYTES and report.huge_bytes >= table.nbytes


@pytest.mark.parametrize(
    "shape, dtype, pages, error, match",
    [
        ((-1, 4), np.float32, "huge", ValueError, r"shape must be non-negative integers, rows first, but got \(-1, 4\)"),
        ((), np.float32, "huge", ValueError, "shape must be"),
        ((2.5,), np.float32, "huge", ValueError, r"but got \(2.5,\)"),
        ((4,), object, "huge", TypeError, "plain values, but got dtype object"),
        ((4,), np.float32, "giant", ValueError, r"pages must be one of \('huge', 'small'\), but got 'giant'"),
    ],
)
def test_bad_arguments_are_named(shape, dtype, pages, error, match):
    with pytest.raises(error, match=match):
        HostTable(shape, dtype, pages=pages)


def test_close_unpins_and_unmaps_and_is_idempotent(runtime):
    table = HostTable((1000, 32), np.float32)
    start, end = table.address, table.address + table.mapped_bytes
    pinned = table.pin()
    assert pinned.pinned and runtime.registered == {table.address: table.nbytes}
    with pytest.raises(ValueError, match="pinned already"):
        table.pin()
    table.close()
    assert runtime.registered == {} and pinning._registered == {} and not pinned.pinned
    assert table.closed and not mapped(start, end)
    table.close()
    with pytest.raises(ValueError, match="closed"):
        table.array  # noqa: B018


def test_close_with_a_live_view_refuses_then_unmaps_after_it_is_gone(runtime):
    table = HostTable((1000, 32), np.float32)
    start, end = table.address, table.address + table.mapped_bytes
    table.pin()
    view = table.tensor()[10:20]
    with pytest.raises(RuntimeError, match=r"still alive. Delete them \(del\), then call close\(\) again"):
        table.close()
    assert runtime.registered == {} and mapped(start, end)  # unpinned; still mapped under the view
    assert float(view.sum()) == 0.0
    del view
    table.close()
    assert not mapped(start, end)


def test_an_error_inside_the_block_leaves_nothing(runtime):
    with pytest.raises(KeyError):
        with HostTable((1000, 32), np.float32) as table:
            start, end = table.address, table.address + table.mapped_bytes
            table.pin()
            raise KeyError("a fault while the table is in use")
    assert runtime.registered == {} and not mapped(start, end)


def test_an_error_with_a_view_alive_unpins_warns_and_unmaps_with_the_view(runtime):
    def use_it():
        with HostTable((1000, 32), np.float32) as table:
            bounds.extend((table.address, table.address + table.mapped_bytes))
            table.pin()
            view = table.array[:5]  # noqa: F841 - alive in this frame while the error leaves it
            raise KeyError("a fault with a view alive")

    bounds: list[int] = []
    with pytest.warns(ResourceWarning, match="still alive"):
        with pytest.raises(KeyError):
            use_it()
    assert runtime.registered == {}
    gc.collect()  # the frame (and its view) go with the traceback
    assert not mapped(*bounds)


# The child takes Ctrl-C as under a terminal whatever it inherits: a shell without job control (`make test &`)
# starts its children with SIGINT ignored, and Python then installs no KeyboardInterrupt handler.
CHILD = """
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)
import numpy as np
from dgl_zerocopy.store import huge_pages, pinning
registered = {}
class Runtime:
    CUDARuntimeError = RuntimeError
    memoryTypeHost = 1
    def hostRegister(self, ptr, size, flags): registered[ptr] = size
    def hostUnregister(self, ptr): del registered[ptr]
    def pointerGetAttributes(self, ptr):
        a = type("A", (), {})()
        a.type = 1 if any(p <= ptr < p + n for p, n in registered.items()) else 0
        a.devicePointer = ptr if a.type else 0
        return a
pinning._runtime = lambda: Runtime()
def mapped(start, end):
    for line in open("/proc/self/maps"):
        low, high = (int(x, 16) for x in line.split()[0].split("-"))
        if low < end and start < high:
            return True
    return False
try:
    with huge_pages.HostTable((4 << 20,), np.float32) as table:
        table.array[:] = 1
        table.pin()
        start, end = table.address, table.address + table.mapped_bytes
        print("READY", flush=True)
        time.sleep(60)
except KeyboardInterrupt:
    print(f"AFTER registered={registered} mapped={mapped(start, end)}", flush=True)
    sys.exit(3)
"""


def _start_child() -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH")]))}
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(CHILD)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = child.stdout.readline()
    if line.strip() != "READY":
        child.kill()
        raise AssertionError(f"the child did not start: {line!r} {child.communicate(timeout=30)}")
    return child


def test_ctrl_c_in_a_child_unpins_and_unmaps_before_it_exits():
    child = _start_child()
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=30)
    assert child.returncode == 3, err
    assert "AFTER registered={} mapped=False" in out


def test_a_child_killed_by_sigkill_leaves_no_huge_pages_taken():
    free_before = huge_pages._free_hugetlb_pages()
    child = _start_child()
    child.kill()
    child.communicate(timeout=30)  # waits for the pid: its memory is the kernel's again
    assert child.returncode == -signal.SIGKILL and not Path(f"/proc/{child.pid}").exists()
    assert huge_pages._free_hugetlb_pages() == free_before


def _smaps_entry(maps_line: str, flags: str, **kb: int) -> str:
    """One mapping as /proc/PID/smaps shows it: its maps line, its fields in kB (the name and colon
    padded to 16 columns, the value right-aligned in 8, as the kernel prints them), its VmFlags."""
    fields = [f"{name + ':':<16}{value:>8} kB" for name, value in kb.items()]
    return "\n".join([maps_line, *fields, f"VmFlags: {flags}"]) + "\n"


def test_smaps_totals_count_the_mappings_of_the_range_and_hugetlb_pages(tmp_path):
    """The hugetlb branch on a machine without a pool: a smaps text as the kernel writes it."""
    smaps = tmp_path / "smaps"
    smaps.write_text(
        _smaps_entry(
            "7f0000000000-7f0000400000 rw-p 00000000 00:0f 12345                      /anon_hugepage (deleted)",
            "rd wr mr mw me de ht",
            Size=4096,
            KernelPageSize=2048,
            Rss=0,
            AnonHugePages=0,
            Shared_Hugetlb=0,
            Private_Hugetlb=4096,
        )
        + _smaps_entry("7f0000400000-7f0000600000 rw-p 00000000 00:00 0", "rd wr mr mw me ac hg", Size=2048, KernelPageSize=4, Rss=2048, AnonHugePages=2048)
        + _smaps_entry("7f0000600000-7f0000601000 rw-p 00000000 00:00 0", "rd wr mr mw me ac", Rss=4)
    )
    start = 0x7F0000000000
    assert huge_pages._smaps_totals(start, start + (4 << 20), str(smaps)) == (4 << 20, 4 << 20, 2 << 20, ("rd", "wr", "mr", "mw", "me", "de", "ht"))
    rss, huge, page, flags = huge_pages._smaps_totals(start, start + (6 << 20), str(smaps))
    assert (rss, huge, page) == (6 << 20, 6 << 20, 2 << 20) and {"ht", "hg"} <= set(flags)
    assert huge_pages._smaps_totals(0, 4096, str(smaps)) == (0, 0, 0, ())
    assert huge_pages._smaps_totals(0, 4096, str(tmp_path / "missing")) == (0, 0, 0, ())
