"""Host tables the package allocates or loads itself live in 2 MB pages by default.

Datasets loaded into memory, generated graphs' features, the storage tier's host buffer, the private copy
of a file map that pinning needs on a GPU without read-only registration (:mod:`.pin_target`), and the CSC
copies a GPU sampler reads are made here: in a
:class:`~dgl_zerocopy.store.huge_pages.HostTable` (``pages="huge"``), whose mapping outlives the
``HostTable`` object for as long as an array over it is alive. Why: a GPU reading random rows of pinned
host memory translates each row's page afresh, and 2 MB pages mean 512 times fewer of them
(``bench/gathering/link_experiment.py`` measures what that buys).

Where huge pages are unavailable (no transparent huge pages and no hugetlb pool, or not Linux:
:func:`~dgl_zerocopy.store.huge_pages.huge_page_support`), the table is made as before, in an ordinary
anonymous mapping (page-aligned, zero-filled), with one warning per process. ``DGL_ZEROCOPY_HUGE_PAGES=0``
(or ``off``, ``false``, ``no``) turns the default off; ``huge_pages=False`` does so for one call.

Tables handed to the package as tensors or arrays are never copied here: they are registered in place, in
whatever pages they have. :func:`page_report` says what backs any host array or tensor.
"""

from __future__ import annotations

import logging
import mmap
import os
import threading
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .host_files import human_size
from .huge_pages import HUGE_PAGE_BYTES, HostTable, PageReport, _smaps_totals, check_table_args, huge_page_support, warn_once

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

__all__ = ["HUGE_PAGES_ENV", "huge_pages_wanted", "host_array", "host_copy", "huge_page_copy", "load_npy", "page_report"]

#: The environment variable that turns the 2 MB-page default off (``0``, ``off``, ``false``, ``no``).
HUGE_PAGES_ENV = "DGL_ZEROCOPY_HUGE_PAGES"
_OFF, _ON = ("0", "off", "false", "no"), ("", "1", "on", "true", "yes")
_SLAB_BYTES = 64 << 20  # a copy moves this much at a time, so a file map is never read whole into a temporary
# The fallback of each HostTable mapping still alive: page_report's words.
_fallbacks: dict[int, tuple[int, str | None]] = {}  # first address -> (mapped bytes, fallback)
_fallbacks_lock = threading.Lock()


def huge_pages_wanted(huge_pages: bool | None = None) -> bool:
    """``huge_pages`` when given, else the default: on unless ``$DGL_ZEROCOPY_HUGE_PAGES`` turns it off.

    Raises:
        ValueError: the variable holds something else than on/off words, named with the fix.
    """
    if huge_pages is not None:
        return bool(huge_pages)
    value = os.environ.get(HUGE_PAGES_ENV, "").strip().lower()
    if value in _OFF:
        return False
    if value in _ON:
        return True
    raise ValueError(f"{HUGE_PAGES_ENV}={value!r} is not understood: set it to 0 (4 KiB pages) or 1 (2 MB pages, the default), or unset it")


def host_array(shape: tuple[int, ...], dtype, huge_pages: bool | None = None) -> np.ndarray:
    """A zero-filled, writable, page-aligned host array of ``shape`` and ``dtype`` in an anonymous mapping:
    2 MB pages when wanted (:func:`huge_pages_wanted`) and available, else 4 KiB pages (with one warning
    per process when they were wanted). By default (``huge_pages=None``) a table under 2 MB gets 4 KiB
    pages (it has fewer than 512 of them, and a huge page would be mostly empty); ``huge_pages=True``
    asks for 2 MB pages whatever the size. The mapping is freed with the last array over it.

    Raises:
        ValueError, TypeError: as :class:`~dgl_zerocopy.store.huge_pages.HostTable` (a bad shape or dtype);
            ValueError also for a ``$DGL_ZEROCOPY_HUGE_PAGES`` not understood.
        OSError: the mapping failed (no memory or address space for it).
    """
    shape, dtype = check_table_args(shape, dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if huge_pages_wanted(huge_pages) and (huge_pages or nbytes >= HUGE_PAGE_BYTES):  # by default, not for a table of under 512 small pages
        why_not = huge_page_support(nbytes)
        if why_not is None:
            table = HostTable(shape, dtype, pages="huge")
            array = table.array
            _remember(table)
            return array
        _warn_unavailable(why_not)
    region = mmap.mmap(-1, max(1, nbytes), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return np.frombuffer(region, dtype=dtype, count=nbytes // dtype.itemsize).reshape(shape)


def host_copy(array: np.ndarray, huge_pages: bool | None = None, read_only: bool | None = None) -> np.ndarray:
    """``array`` copied into a C-contiguous :func:`host_array`, a slab of rows at a time (a file map is read
    once, never whole into a temporary); read-only when ``read_only`` (default: as ``array`` is)."""
    array = np.asanyarray(array)
    out = host_array(array.shape if array.ndim else (1,), array.dtype, huge_pages)
    source = array.reshape(out.shape)
    step = max(1, _SLAB_BYTES // max(1, source[0].nbytes if source.shape[0] else 1))
    for start in range(0, source.shape[0], step):
        out[start : start + step] = source[start : start + step]
    out = out.reshape(array.shape)
    if not (array.flags.writeable if read_only is None else not read_only):
        out.flags.writeable = False
    return out


def load_npy(path: str | os.PathLike, huge_pages: bool | None = None) -> np.ndarray:
    """The ``.npy`` file at ``path`` read into memory (a writable array): into 2 MB pages by default
    (:func:`host_copy` of its file map), else as ``numpy.load(path)`` reads it. Raises what ``numpy.load``
    raises for a missing or damaged file (``OSError``, ``ValueError``, ``EOFError``); nothing stays mapped."""
    if not huge_pages_wanted(huge_pages):
        return np.load(path)
    mapped = np.load(Path(path), mmap_mode="r")
    try:
        if mapped.dtype.hasobject or not mapped.ndim:
            return np.load(path)
        return host_copy(mapped, huge_pages=huge_pages, read_only=False)
    finally:
        del mapped


def huge_page_copy(table: torch.Tensor, what: str) -> torch.Tensor | None:
    """``table`` (a contiguous CPU tensor) copied into 2 MB pages, for pinning the copy rather than its own
    pages; None (pin ``table`` as it is) where huge pages are not wanted (:func:`huge_pages_wanted`) or
    not available (with one warning then), or ``table`` is under 2 MB. The copy costs ``table``'s size in
    RAM; ``what`` names it in the log."""
    nbytes = table.numel() * table.element_size()
    if nbytes < HUGE_PAGE_BYTES or not huge_pages_wanted():
        return None
    why_not = huge_page_support(nbytes)
    if why_not is not None:
        _warn_unavailable(why_not)
        return None
    import torch

    copy = torch.from_numpy(host_array((nbytes,), np.uint8, huge_pages=True)).view(table.dtype).view(table.shape)
    copy.copy_(table)
    log.info("copied %s (%s) into 2 MB pages to pin it there (%s=0 pins its own pages)", what, human_size(nbytes), HUGE_PAGES_ENV)
    return copy


def page_report(table) -> PageReport:
    """What backs the host array or tensor ``table`` now (``/proc/self/smaps``, over its own bytes):
    ``method`` is ``"hugetlb"``, ``"thp"`` (advised huge) or ``"small"``, from the mappings' flags;
    ``fallback`` is the reason a :func:`host_array` did not get its first choice (None otherwise).
    Transparent huge pages arrive at each 2 MB extent's first write: report after filling."""
    if hasattr(table, "data_ptr"):
        start, nbytes = int(table.data_ptr()), int(table.numel()) * int(table.element_size())
    else:
        start, nbytes = int(np.asarray(table).ctypes.data), int(np.asarray(table).nbytes)
    rss, huge, page, flags = _smaps_totals(start, start + max(1, nbytes))
    method = "hugetlb" if "ht" in flags else "thp" if "hg" in flags else "small"
    with _fallbacks_lock:
        fallback = next((why for first, (length, why) in _fallbacks.items() if first <= start < first + length), None)
    return PageReport(method, fallback, rss, huge, page, flags)


def _remember(table: HostTable) -> None:
    """Keep ``table``'s fallback for :func:`page_report` while its mapping lives (dropped with it)."""
    first = table.address
    with _fallbacks_lock:
        _fallbacks[first] = (table.mapped_bytes, table.fallback)
    weakref.finalize(table._mmap, _forget, first)


def _forget(first: int) -> None:
    with _fallbacks_lock:
        _fallbacks.pop(first, None)


def _warn_unavailable(why_not: str) -> None:
    warn_once(
        f"huge pages unavailable: {why_not}",
        f"host tables get 4 KiB pages, not 2 MB ones: {why_not}. Set /sys/kernel/mm/transparent_hugepage/enabled to madvise "
        f"(or reserve pages in /proc/sys/vm/nr_hugepages) for them; {HUGE_PAGES_ENV}=0 chooses 4 KiB pages without this warning",
        stacklevel=4,
    )
