"""Host arrays and the folders that hold them: helpers shared by the data loaders and the
compressed tables. Imports nothing of dgl_zerocopy but :mod:`.cache_files`, so every layer may use it."""

from __future__ import annotations

import mmap
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np

from .cache_files import partial_prefix


def tensor_view(array: np.ndarray):
    """``torch.from_numpy(array)`` (shares memory) without torch's warning for read-only arrays:
    datasets and compressed codes may be read-only memory maps, and nothing in this package
    writes to them."""
    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(array)


def npy_file(path: str | os.PathLike) -> Path:
    """``path`` as a Path, checked to name an existing ``.npy`` file (ValueError, FileNotFoundError otherwise)."""
    path = Path(path)
    if path.suffix != ".npy":
        raise ValueError(f"a path must name a .npy file, but got {str(path)!r}")
    if not path.is_file():
        raise FileNotFoundError(f"no such feature file: {str(path)!r}")
    return path


def replace_dir(tmp: Path, out: Path, marker: str) -> None:
    """Rename the finished folder ``tmp`` to ``out``, moving an older ``out`` aside first (a reader
    that mapped its files keeps them: removing a mapped file leaves its pages to whoever maps it).
    If another process finished ``out`` meanwhile (its ``marker`` file exists), keep theirs."""
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=partial_prefix(out.name), dir=out.parent))  # a later run removes it if we die here
        os.replace(out, old / out.name)
        shutil.rmtree(old, ignore_errors=True)
    try:
        os.replace(tmp, out)
    except OSError:
        if not (out / marker).is_file():
            raise
        shutil.rmtree(tmp, ignore_errors=True)  # a concurrent writer won the race: same data


def mapped_file(array) -> np.memmap | None:
    """The ``np.memmap`` over the file mapping that ``array`` views (``array`` itself, or the map a
    slice or view of it was taken from), or None when ``array`` is not file-mapped memory."""
    root = array
    while isinstance(root, np.ndarray) and not isinstance(root.base, mmap.mmap):
        root = root.base  # a slice of a memmap carries its parent's offset: find the array over the mmap itself
    if not isinstance(root, np.memmap) or not root.filename:
        return None
    return root


def is_shared_file_map(array) -> bool:
    """True when ``array`` views a *shared* mapping of a file (``np.load(path, mmap_mode="r")``,
    ``"r+"`` or ``"w+"``): a page written or marked dirty there is written back to the file.
    A copy-on-write map (``mmap_mode="c"``) keeps written pages private: False."""
    root = mapped_file(array)
    return root is not None and root.mode != "c"


def file_ref(data, table) -> tuple[str, int, str, tuple[int, ...], str] | None:
    """``(filename, offset, dtype, shape, mode)`` of the file bytes that ``table`` views, when ``data``
    is a NumPy memory map (or a view of one) under ``table``; None otherwise."""
    root = mapped_file(data)
    if root is None:
        return None
    start = table.data_ptr() - root.ctypes.data
    if start < 0 or start + table.numel() * table.element_size() > root.nbytes:
        return None  # the table is a copy (made contiguous), not the mapped bytes
    mode = "r+" if root.mode == "w+" else root.mode  # "w+" would truncate the file in the receiver
    return str(root.filename), int(root.offset) + start, data.dtype.str, tuple(table.shape), mode


def human_size(nbytes: int) -> str:
    """``nbytes`` for a message: ``"1.5 GiB"``, ``"12.0 KiB"``, ``"300 bytes"``."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} bytes"
