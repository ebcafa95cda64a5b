"""What a zero-copy reader pins for a table it must not write: a file map read into 2 MB pages, the map
pinned read-only, or a copy-on-write map of the file; never the file's pages writable.

Kept apart from :mod:`.pinning` (which registers a range and knows nothing of what it holds) because it
chooses pages, as :mod:`.host_memory` does.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np

from .host_files import file_ref, human_size, is_shared_file_map, tensor_view
from .host_memory import huge_page_copy
from .huge_pages import warn_once

if TYPE_CHECKING:
    import torch

__all__ = ["pinnable_table"]


def pinnable_table(table: torch.Tensor, array: np.ndarray, read_only_supported: bool) -> tuple[torch.Tensor, bool]:
    """The table to pin for ``array`` (memory the store must not write, which ``table`` views), and
    whether to pin it read-only.

    Where the device supports read-only registration, a shared file map (``mmap_mode`` ``"r"``, ``"r+"``,
    ``"w+"``, a ``.npy`` path) is pinned read-only as it is: the driver neither writes nor dirties its
    pages, and every process that maps the file pins the same pages. Elsewhere it needs a private copy
    to be pinned writable (a ``"r"`` map cannot be pinned writable at all, and pinning a writable shared
    map would dirty its pages, which the kernel writes back to the file when they are unpinned): that
    copy is made in 2 MB pages by default (:func:`~dgl_zerocopy.store.host_memory.huge_page_copy`), else,
    where huge pages are unavailable or ``DGL_ZEROCOPY_HUGE_PAGES=0``, the file is mapped again
    copy-on-write, as before. Any other read-only array is read-only only by NumPy's flag: its pages are
    registered as they are (registration never writes). The file is never written on any of these paths."""
    ref = file_ref(array, table) if is_shared_file_map(array) else None
    if ref is not None and not read_only_supported:
        copy = huge_page_copy(table, f"the file map of {ref[0]!r}")  # the private copy that pinning needs, in 2 MB pages
        if copy is not None:
            warn_once(
                "a file map pinned through a private copy",
                f"this GPU cannot pin read-only memory (cudaDevAttrHostRegisterReadOnlySupported is 0), so the memory-mapped "
                f"table {ref[0]!r} is read into a private copy in 2 MB pages, which is pinned: {human_size(copy.numel() * copy.element_size())} "
                f"of RAM beside the file's page cache (the file is not modified; this is said once per process)",
                stacklevel=4,  # pinnable_table <- bind <- __init__/gather/device <- the caller
            )
            return copy, False
    if read_only_supported:
        return table, True
    if ref is not None:
        filename, offset, dtype, shape, _ = ref
        private = np.memmap(filename, dtype=np.dtype(dtype), mode="c", offset=offset, shape=shape)
        warnings.warn(
            f"this GPU cannot pin read-only memory (cudaDevAttrHostRegisterReadOnlySupported is 0), so the "
            f"memory-mapped table {filename!r} is mapped copy-on-write instead (pinning a shared map of the file "
            f"would write its pages back to it): pinning keeps a private copy of its "
            f"{private.nbytes / 2**30:.2f} GiB in RAM (the file is not modified). To avoid the page-cache copy "
            f"beside it, load the table into RAM (numpy.load without mmap_mode)",
            stacklevel=4,  # pinnable_table <- bind <- __init__/gather/device <- the caller
        )
        return tensor_view(private), False
    return table, False
