"""A host table in 2 MB pages: an anonymous mapping, 2 MB-aligned, seen as a NumPy array or torch tensor.

Why: a GPU reading random rows of pinned host memory translates each row's page afresh (in its own
TLB and, behind it, the host IOMMU's); with 2 MB pages a table of N bytes has N / 2 MiB pages
instead of N / 4 KiB. Whether that speeds a zero-copy gather is for a GPU to measure
(``bench/gathering/link_experiment.py``); this module only gives the memory, and says what it got.

How the pages are asked for, in order (``pages="huge"``):

1. ``MAP_HUGETLB``, where the kernel's pool has enough free 2 MB pages (``HugePages_Free`` in
   ``/proc/meminfo``, set by ``/proc/sys/vm/nr_hugepages``): reserved at the mapping, so a fault
   later cannot fail;
2. else transparent huge pages: an ordinary anonymous mapping, its table 2 MB-aligned inside it,
   advised ``madvise(MADV_HUGEPAGE)`` before the first write (as ``DiskGraph.in_memory()`` does),
   where ``/sys/kernel/mm/transparent_hugepage/enabled`` is not ``never``; the kernel then backs
   each aligned 2 MB extent with one huge page when it can (fragmented memory gives 4 KiB ones);
3. else 4 KiB pages, with a warning naming why (once per process and reason: :func:`warn_once`).

``pages="small"`` asks for 4 KiB pages and advises ``MADV_NOHUGEPAGE``, so that a machine whose
transparent huge pages are ``always`` does not hand out huge ones anyway: the comparison point.
:meth:`HostTable.report` reads ``/proc/self/smaps`` for what the kernel actually gave.

Registration for the GPU stays :class:`~dgl_zerocopy.store.pinning.PinnedRange`'s
(``cudaHostRegister`` in place): :meth:`HostTable.pin` makes one and :meth:`HostTable.close` unpins
it before it unmaps. Anonymous memory and the driver's registrations end with the process, so a
process killed by a signal leaves nothing behind.
"""

from __future__ import annotations

import mmap
import platform
import sys
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .host_files import human_size

if TYPE_CHECKING:
    import torch

    from .pinning import PinnedRange

__all__ = ["HUGE_PAGE_BYTES", "PAGE_KINDS", "HostTable", "PageReport", "check_table_args", "huge_page_support", "warn_once"]

#: The huge page size these tables are aligned to (x86-64 and arm64 with 4 KiB base pages).
HUGE_PAGE_BYTES = 2 << 20
#: What :class:`HostTable` may be asked for.
PAGE_KINDS = ("huge", "small")
#: Linux's mmap flag (not in Python's mmap module), on x86-64 and arm64 (other architectures: not tried).
_MAP_HUGETLB = 0x40000
_MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", 14)
_MADV_NOHUGEPAGE = getattr(mmap, "MADV_NOHUGEPAGE", 15)
_MEMINFO = "/proc/meminfo"
_THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"
_SMAPS = "/proc/self/smaps"
_warned: set[str] = set()  # the reasons warned about in this process (warn_once)
_warned_lock = threading.Lock()


@dataclass(frozen=True)
class PageReport:
    """What backs a table, from ``/proc/self/smaps`` (the mappings that hold it).

    Attributes:
        method: how the pages were asked for: ``"hugetlb"``, ``"thp"`` (advised) or ``"small"``.
        fallback: why the first choice was not had (None: it was).
        rss_bytes: resident bytes of those mappings (pages touched so far).
        huge_bytes: of them, bytes in huge pages (``AnonHugePages``, ``Private_Hugetlb`` and ``Shared_Hugetlb``).
        kernel_page_bytes: the mappings' base page size (``KernelPageSize``: 2 MiB for hugetlb).
        vm_flags: their ``VmFlags`` (``hg``: advised huge, ``nh``: advised not, ``ht``: hugetlb).
    """

    method: str
    fallback: str | None
    rss_bytes: int
    huge_bytes: int
    kernel_page_bytes: int
    vm_flags: tuple[str, ...]

    @property
    def huge_share(self) -> float:
        """Share of the resident bytes in huge pages (0 when nothing is resident yet)."""
        return self.huge_bytes / self.rss_bytes if self.rss_bytes else 0.0


class HostTable:
    """A zero-filled host table of ``shape`` and ``dtype`` in an anonymous mapping of its own.

    The table starts on a 2 MB boundary and its mapping ends on one, so each of its 2 MB extents
    can be one huge page. Use it as a context manager, or call :meth:`close`.

    Args:
        shape: the table's shape, rows first (non-negative integers).
        dtype: a NumPy dtype (or its name) of plain values.
        pages: ``"huge"`` (``MAP_HUGETLB`` where the pool allows, else transparent huge pages, else
            4 KiB pages with a warning) or ``"small"`` (4 KiB pages, huge ones advised against).

    Raises:
        ValueError: a negative or non-integer dimension, or an unknown ``pages``.
        TypeError: a dtype that is not of plain values (``object``).
        OSError: the mapping itself failed (no address space or memory for it).
    """

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype | str, pages: str = "huge") -> None:
        self._mmap: mmap.mmap | None = None
        self._array: np.ndarray | None = None
        self._pinned: PinnedRange | None = None
        shape, dtype = check_table_args(shape, dtype)
        if pages not in PAGE_KINDS:
            raise ValueError(f"pages must be one of {PAGE_KINDS}, but got {pages!r}")
        self.shape, self.dtype, self.pages = shape, dtype, pages
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * dtype.itemsize
        #: bytes mapped for the table: its size rounded up to whole 2 MB pages (at least one)
        self.mapped_bytes = max(1, -(-self.nbytes // HUGE_PAGE_BYTES)) * HUGE_PAGE_BYTES
        self.fallback: str | None = None
        try:
            if pages == "huge":
                self.method = self._map_huge()
            else:
                self._map_anonymous(advice=_MADV_NOHUGEPAGE)
                self.method = "small"
            count = int(np.prod(self.shape, dtype=np.int64))
            self._array = np.frombuffer(self._mmap, dtype=dtype, count=count, offset=self._offset).reshape(self.shape)
        except BaseException:  # nothing stays mapped after a failure half-way
            self._array = None
            self._close_mapping()
            raise

    # ------------------------------------------------------------------ mapping

    def _map_huge(self) -> str:
        """Map with ``MAP_HUGETLB`` where the pool allows, else advise transparent huge pages, else
        plain pages; returns the method and sets :attr:`fallback` to why the first was not had."""
        free = _free_hugetlb_pages()
        needed = self.mapped_bytes // HUGE_PAGE_BYTES
        if sys.platform.startswith("linux") and platform.machine() in ("x86_64", "aarch64") and free >= needed:
            try:
                self._mmap, self._offset = mmap.mmap(-1, self.mapped_bytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_HUGETLB), 0
                return "hugetlb"
            except OSError as e:  # another process took the pages between the check and the map
                why = f"MAP_HUGETLB failed ({e.strerror or e})"
        else:
            why = (
                f"MAP_HUGETLB not tried: {free} free 2 MiB pages in the kernel's pool (HugePages_Free), "
                f"{needed} needed for {human_size(self.nbytes)}; raise /proc/sys/vm/nr_hugepages to use it"
            )
        thp = _thp_mode()
        if thp in ("always", "madvise"):
            try:
                self._map_anonymous(advice=_MADV_HUGEPAGE)
                self.fallback = f"{why}; transparent huge pages (madvise, enabled: {thp}) instead"
                return "thp"
            except OSError as e:  # EINVAL: a kernel built without transparent huge pages
                self._close_mapping()
                thp = f"madvise(MADV_HUGEPAGE) failed: {e.strerror or e}"
        self._map_anonymous(advice=None)
        self.fallback = f"{why}; and no transparent huge pages ({thp}): 4 KiB pages instead"
        warn_once(
            f"no transparent huge pages ({thp})",
            f"host tables get 4 KiB pages, not 2 MB ones (first: {human_size(self.nbytes)}): {self.fallback}. {_HOW_TO_GET_THEM}",
            stacklevel=4,
        )
        return "small"

    def _map_anonymous(self, advice: int | None) -> None:
        """An anonymous mapping one huge page longer than needed, the table at its first 2 MB
        boundary (the kernel aligns large mappings only from Linux 6.7), advised before any write."""
        self._mmap = mmap.mmap(-1, self.mapped_bytes + HUGE_PAGE_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        probe = np.frombuffer(self._mmap, dtype=np.uint8, count=1)
        self._offset = (-probe.ctypes.data) % HUGE_PAGE_BYTES
        del probe  # releases its export of the mapping, which close() needs gone
        if advice is not None and hasattr(self._mmap, "madvise"):
            self._mmap.madvise(advice)

    def _close_mapping(self) -> None:
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None

    # ------------------------------------------------------------------ use

    @property
    def closed(self) -> bool:
        """True after :meth:`close` unmapped the table."""
        return self._mmap is None

    @property
    def array(self) -> np.ndarray:
        """The table as a writable NumPy array over the mapping (no copy).

        Raises:
            ValueError: the table was closed.
        """
        if self._array is None:
            raise ValueError("this host table is closed (or closing): make a new HostTable")
        return self._array

    @property
    def address(self) -> int:
        """Address of the table's first byte: a multiple of :data:`HUGE_PAGE_BYTES`."""
        return int(self.array.ctypes.data)

    def tensor(self) -> torch.Tensor:
        """The table as a torch tensor over the mapping (no copy; keeps it mapped while alive)."""
        import torch

        return torch.from_numpy(self.array)

    def report(self) -> PageReport:
        """What the kernel gave the table's mapping so far (``/proc/self/smaps``). Transparent
        huge pages come at the first write of each 2 MB extent, so report after filling."""
        start = int(self.array.ctypes.data) - self._offset
        rss, huge, page, flags = _smaps_totals(start, start + len(self._mmap))
        return PageReport(self.method, self.fallback, rss, huge, page, flags)

    def pin(self, read_only: bool = False) -> PinnedRange:
        """Register the table for the GPU in place (:class:`~dgl_zerocopy.store.pinning.PinnedRange`);
        :meth:`close` unpins it. Raises what ``PinnedRange`` raises (``RuntimeError`` with the
        reason; nothing stays registered), or ``ValueError`` when it is pinned already."""
        from .pinning import PinnedRange

        if self._pinned is not None and self._pinned.pinned:
            raise ValueError("this host table is pinned already: use the PinnedRange pin() returned")
        self._pinned = PinnedRange(self.address, self.nbytes, read_only=read_only)
        return self._pinned

    def close(self) -> None:
        """Unpin (if :meth:`pin` registered the table) and unmap. Idempotent.

        Raises:
            RuntimeError: an array or tensor over the table is still alive, so unmapping would
                leave it pointing at nothing; the table is unpinned, stays mapped until the last
                of them is freed, and a later ``close()`` unmaps it.
        """
        if self._pinned is not None:
            pinned, self._pinned = self._pinned, None
            pinned.unpin()
        if self._mmap is None:
            return
        self._array = None  # our own view: the one export the mapping has when nobody else holds one
        try:
            self._mmap.close()
        except BufferError:
            raise RuntimeError(
                f"cannot unmap the {human_size(self.nbytes)} host table: a NumPy array or torch tensor over it "
                "(table.array, table.tensor(), or a slice of either) is still alive. Delete them (del), then call "
                "close() again; it is unmapped anyway when the last of them is freed"
            ) from None
        self._mmap = None

    def __enter__(self) -> HostTable:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
            return
        try:  # an error is on its way: views of the table may live in its traceback's frames
            self.close()
        except RuntimeError as e:
            warnings.warn(str(e), ResourceWarning, stacklevel=2)

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"at 0x{self.address:x}"
        return f"HostTable(shape={self.shape}, dtype={self.dtype}, pages={self.pages!r}: {self.method}, {state})"


_HOW_TO_GET_THEM = (
    "For huge pages, set /sys/kernel/mm/transparent_hugepage/enabled to madvise (or reserve pages in "
    "/proc/sys/vm/nr_hugepages); to choose 4 KiB pages and silence this, set DGL_ZEROCOPY_HUGE_PAGES=0"
)


def check_table_args(shape, dtype) -> tuple[tuple[int, ...], np.dtype]:
    """``(shape, dtype)`` of a host table, checked: ValueError for a shape that is not non-negative
    integers (rows first), TypeError for a dtype that is not of plain values."""
    shape = tuple(shape)
    if not shape or any(isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0 for n in shape):
        raise ValueError(f"shape must be non-negative integers, rows first, but got {shape!r}")
    dtype = np.dtype(dtype)
    if dtype.hasobject:
        raise TypeError(f"a host table holds plain values, but got dtype {dtype}; use a numeric dtype such as float32")
    return tuple(int(n) for n in shape), dtype


def huge_page_support(nbytes: int = HUGE_PAGE_BYTES) -> str | None:
    """None when a :class:`HostTable` of ``nbytes`` can ask for 2 MB pages here (a hugetlb pool with room for
    it, or transparent huge pages not ``never``), else why not, in words. Reads ``/proc``; maps nothing."""
    needed = max(1, -(-int(nbytes) // HUGE_PAGE_BYTES))
    if not sys.platform.startswith("linux"):
        return f"huge pages are asked for on Linux only, and this is {sys.platform}"
    if platform.machine() in ("x86_64", "aarch64") and _free_hugetlb_pages() >= needed:
        return None
    thp = _thp_mode()
    if thp in ("always", "madvise") and hasattr(mmap.mmap, "madvise"):
        return None
    return f"no transparent huge pages ({thp}) and no room in the hugetlb pool (HugePages_Free in {_MEMINFO})"


def warn_once(reason: str, message: str, stacklevel: int = 2) -> bool:
    """``warnings.warn(message)`` the first time this process meets ``reason`` (a key without sizes, so
    that a thousand tables give one line); True when it warned."""
    with _warned_lock:
        if reason in _warned:
            return False
        _warned.add(reason)
    warnings.warn(message, stacklevel=stacklevel + 1)
    return True


def _free_hugetlb_pages(meminfo: str = _MEMINFO) -> int:
    """Free 2 MiB pages in the kernel's hugetlb pool (0 where it cannot be read or pages differ)."""
    info = {}
    try:
        for line in Path(meminfo).read_text().splitlines():
            key, _, value = line.partition(":")
            info[key.strip()] = value.split()
    except OSError:
        return 0
    try:
        size_kb = int(info.get("Hugepagesize", ["0"])[0])
        free = int(info.get("HugePages_Free", ["0"])[0])
    except (ValueError, IndexError):
        return 0
    return free if size_kb * 1024 == HUGE_PAGE_BYTES else 0


def _thp_mode(path: str = _THP_ENABLED) -> str:
    """The bracketed transparent huge page mode (``always``, ``madvise``, ``never``), or why unknown."""
    try:
        text = Path(path).read_text()
    except OSError:
        return "unavailable (no " + path + ")"
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else text.strip()


def _smaps_totals(start: int, end: int, smaps: str = _SMAPS) -> tuple[int, int, int, tuple[str, ...]]:
    """(Rss, AnonHugePages, KernelPageSize, VmFlags) summed over the mappings overlapping
    ``[start, end)`` in ``smaps``; bytes. Zeros where the file cannot be read."""
    rss = huge = page = 0
    flags: list[str] = []
    inside = False
    try:
        lines = Path(smaps).read_text().splitlines()
    except OSError:
        return 0, 0, 0, ()
    for line in lines:
        head = line.split(maxsplit=1)[0] if line else ""
        if "-" in head and ":" not in head:  # a mapping's first line: "start-end perms offset dev inode path"
            low, high = (int(x, 16) for x in head.split("-"))
            inside = low < end and start < high
        elif inside and head in ("Rss:", "AnonHugePages:", "KernelPageSize:", "Private_Hugetlb:", "Shared_Hugetlb:"):
            value = int(line.split()[1]) * 1024
            if head == "Rss:":
                rss += value
            elif head == "KernelPageSize:":
                page = max(page, value)
            else:  # hugetlb pages are not in Rss; transparent ones are in both
                huge += value
                rss += value if head.endswith("Hugetlb:") else 0
        elif inside and head == "VmFlags:":
            flags += [f for f in line.split()[1:] if f not in flags]
    return rss, huge, page, tuple(flags)
