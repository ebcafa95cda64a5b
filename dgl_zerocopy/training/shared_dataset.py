"""Sharing a dataset with spawned processes without a copy per process: :func:`share_dataset` puts its arrays
in shared memory (or names their files, for memory-mapped arrays) and :meth:`SharedDataset.open` in the
receiver gives the dataset back over the same memory. :func:`~dgl_zerocopy.training.ddp.launch` sends one to
its ranks (``dgl_zerocopy.training.ddp`` re-exports both names)."""

from __future__ import annotations

import dataclasses
import mmap
import os
import shutil
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..data import GraphDataset, HeteroGraphDataset
from ..data.base import tensor_view


@dataclass(frozen=True)
class _MappedFile:
    """Where a memory-mapped array's bytes are: the receiver maps the same file (the page cache
    holds them once for every process)."""

    filename: str
    offset: int
    dtype: str
    shape: tuple
    mode: str

    def open(self) -> np.ndarray:
        return np.memmap(self.filename, dtype=np.dtype(self.dtype), mode=self.mode, offset=self.offset, shape=self.shape)


@dataclass(frozen=True)
class SharedDataset:
    """A :class:`GraphDataset` (or a :class:`~dgl_zerocopy.data.hetero.HeteroGraphDataset`) to send
    to spawned processes: its arrays are in shared memory (or are file maps) and travel by handle.
    :meth:`open` in the receiver gives the dataset back, its arrays NumPy views of the same memory;
    a FeatureStore made there over ``features`` pins or gathers the one table every process shares."""

    dataset: Any  # every array replaced by an empty placeholder of its dtype (a field of dicts of arrays: an empty dict)
    arrays: dict  # field name -> shared torch.Tensor or _MappedFile, or a dict/tuple of them as the field holds its arrays

    def open(self) -> Any:
        return dataclasses.replace(self.dataset, **{k: _attach_all(v) for k, v in self.arrays.items()})

    @property
    def name(self) -> str:
        return self.dataset.name


def share_dataset(dataset: GraphDataset | HeteroGraphDataset | SharedDataset) -> SharedDataset:
    """``dataset`` ready for :func:`launch`'s ``args``, without a copy per process.

    Each array (features, graph, labels, splits) is sent by reference: a memory-mapped file (an
    OGB cache, ``np.load(..., mmap_mode="r")``) as its file, to be mapped again; an array already
    viewing shared memory as that memory; any other array is moved into shared memory once here
    (``torch.from_numpy(a).share_memory_()``: one copy, which every rank then maps; the caller's
    private array stays as it was, and is freed when the caller drops it)."""
    if isinstance(dataset, SharedDataset):
        return dataset
    arrays, placeholders = {}, {}
    for field in dataclasses.fields(dataset):
        value = getattr(dataset, field.name)
        if isinstance(value, np.ndarray):
            arrays[field.name] = _share_array(value, field.name)
            placeholders[field.name] = np.empty((0,) + value.shape[1:], dtype=value.dtype)
        elif isinstance(value, dict) and _holds_arrays(value):  # a heterograph's per-type features and edges
            arrays[field.name] = _share_all(value, field.name)
            placeholders[field.name] = {}
    return SharedDataset(dataclasses.replace(dataset, **placeholders), arrays)


def _holds_arrays(value) -> bool:
    items = value.values() if isinstance(value, dict) else value if isinstance(value, tuple) else ()
    return isinstance(value, np.ndarray) or any(map(_holds_arrays, items))


def _share_all(value, name: str):
    """Each array in a dict/tuple tree shared (:func:`_share_array`), the tree kept."""
    if isinstance(value, dict):
        return {k: _share_all(v, f"{name}[{k!r}]") for k, v in value.items()}
    return tuple(_share_all(v, f"{name}[{i}]") for i, v in enumerate(value)) if isinstance(value, tuple) else _share_array(value, name)


def _attach_all(shared):
    if isinstance(shared, dict):
        return {k: _attach_all(v) for k, v in shared.items()}
    return tuple(map(_attach_all, shared)) if isinstance(shared, tuple) else _attach(shared)


def _share_array(array: np.ndarray, name: str):
    mapped = _mapped_file(array)
    if mapped is not None:
        return mapped
    base = array.base
    if (
        isinstance(base, torch.Tensor)
        and base.is_shared()
        and base.is_contiguous()
        and array.flags.c_contiguous
        and base.data_ptr() == array.ctypes.data
        and base.numel() == array.size
    ):
        return base  # already a view of shared memory (e.g. a dataset opened from a SharedDataset)
    tensor = tensor_view(np.ascontiguousarray(array))
    try:
        return tensor.share_memory_()
    except RuntimeError as e:
        free = shutil.disk_usage("/dev/shm").free if os.path.isdir("/dev/shm") else 0
        raise RuntimeError(
            f"cannot move the dataset's {name!r} ({array.nbytes / 2**30:.2f} GiB) into shared memory "
            f"(/dev/shm has {free / 2**30:.2f} GiB free): {e}. Enlarge /dev/shm (docker: --shm-size), or "
            f"keep the arrays in .npy files mapped with np.load(path, mmap_mode='r'), which are shared as files"
        ) from e


def _mapped_file(array: np.ndarray) -> _MappedFile | None:
    """The file and offset of a C-contiguous array that views a ``np.memmap``'s bytes, else None."""
    root = array
    while isinstance(root, np.ndarray) and not isinstance(root.base, mmap.mmap):
        root = root.base
    if not isinstance(root, np.memmap) or not root.filename or not array.flags.c_contiguous:
        return None
    start = array.ctypes.data - root.ctypes.data
    if start < 0 or start + array.nbytes > root.nbytes:
        return None
    mode = "r+" if root.mode == "w+" else root.mode  # "w+" would truncate the file in the receiver
    return _MappedFile(str(root.filename), int(root.offset) + start, array.dtype.str, tuple(array.shape), mode)


def _attach(shared) -> np.ndarray:
    if isinstance(shared, _MappedFile):
        return shared.open()
    return shared.numpy()  # a view of the shared memory; the array keeps the tensor alive
