"""The in-memory form every dataset loads into: a CSC graph, a host feature table, labels, splits."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from .._extras import import_dgl
from ..store.cache_files import DamagedFile
from ..store.host_files import tensor_view  # noqa: F401 - imported from here by much of the package


def check_split_fractions(train_frac: float, val_frac: float, test_frac: float) -> None:
    """Raise ``ValueError`` unless the train, validation and test fractions of a generated graph's nodes are
    each positive and together at most 1."""
    if min(train_frac, val_frac, test_frac) <= 0 or train_frac + val_frac + test_frac > 1:
        raise ValueError(
            f"the split fractions must be positive and sum to at most 1, but got train_frac={train_frac}, val_frac={val_frac}, test_frac={test_frac}"
        )


def csc_from_sorted_keys(key: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """CSC arrays ``(indptr, indices)`` of the edges encoded as sorted int64 keys ``dst * n + src``.

    ``key`` is reused as ``indices`` (no second edge-sized array); column ``c`` holds the keys in
    ``[c * n, (c + 1) * n)``, so its bounds are a search, not a per-edge count."""
    indptr = np.searchsorted(key, np.arange(n + 1, dtype=np.int64) * n).astype(np.int64)
    np.remainder(key, n, out=key)
    return indptr, key


def symmetric_csc(src: np.ndarray, dst: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Both directions of every edge, self-loops and duplicates dropped, as sorted CSC arrays."""
    keep = src != dst
    a, b = src[keep].astype(np.int64, copy=False), dst[keep].astype(np.int64, copy=False)
    return csc_from_sorted_keys(np.unique(np.concatenate([b * n + a, a * n + b])), n)


ARRAYS = ("indptr", "indices", "features", "labels", "train_idx", "val_idx", "test_idx")  # a cached dataset's .npy files


def load_arrays(folder: Path, load: Callable[[Path], np.ndarray], shapes: Callable[[dict], dict], told: str) -> dict[str, np.ndarray]:
    """Each of ``ARRAYS`` read by ``load`` from ``folder/<name>.npy``, of the shapes
    ``shapes(arrays)`` gives by name (``told`` says who gave them, in the error); raises
    ``DamagedFile`` naming the first file that does not read or fit."""
    arrays = {}
    for k in ARRAYS:
        path = folder / f"{k}.npy"
        try:
            arrays[k] = load(path)
        except (OSError, ValueError, EOFError) as e:
            raise DamagedFile(path, str(e) or type(e).__name__) from None
    for k, shape in shapes(arrays).items():
        if arrays[k].shape != shape:
            raise DamagedFile(folder / f"{k}.npy", f"shape {arrays[k].shape}, {told} {shape}")
    return arrays


class CscSizes:
    """``num_nodes`` and ``num_edges`` of a class holding a CSC as ``indptr`` and ``indices``."""

    indptr: np.ndarray
    indices: np.ndarray

    @property
    def num_nodes(self) -> int:
        return int(self.indptr.shape[0] - 1)

    @property
    def num_edges(self) -> int:
        return int(self.indices.shape[0])


class DatasetError(ValueError):
    """A dataset that cannot be loaded as asked (missing files, no root given): one line for the user."""


@dataclass(frozen=True)
class GraphDataset(CscSizes):
    """A node-classification dataset held in host memory.

    Contract: ``indptr``/``indices`` are the in-edges in CSC form (int64, ``indptr`` has
    ``num_nodes + 1`` entries); ``features`` is a C-contiguous 2-D array of ``num_nodes`` rows
    (possibly a read-only memory map); ``labels`` is int64 of length ``num_nodes``; the splits are
    sorted int64 node ids.
    """

    name: str
    indptr: np.ndarray
    indices: np.ndarray
    features: np.ndarray
    labels: np.ndarray
    train_idx: np.ndarray
    val_idx: np.ndarray
    test_idx: np.ndarray
    num_classes: int
    evaluator: str | None = None  # an OGB dataset name: accuracy through ogb's Evaluator

    def with_self_loops(self) -> GraphDataset:
        """The same dataset with one self-loop per node (GCN's A + I); existing self-loops are kept once."""
        n = self.num_nodes
        dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(self.indptr))
        keep = self.indices != dst
        key = np.concatenate([dst[keep] * n + self.indices[keep], np.arange(n, dtype=np.int64) * (n + 1)])
        key.sort()
        indptr, indices = csc_from_sorted_keys(key, n)
        return replace(self, indptr=indptr, indices=indices)

    def to_dgl(self, with_data: bool = False):
        """A DGL graph of the CSC structure; with ``with_data`` also ``ndata['feat'/'label']``
        (zero-copy views of the host arrays, as DGL's own path would hold them)."""
        import torch

        dgl = import_dgl("GraphDataset.to_dgl")
        graph = dgl.graph(("csc", (tensor_view(self.indptr), tensor_view(self.indices), torch.tensor([], dtype=torch.int64))), num_nodes=self.num_nodes)
        if with_data:
            graph.ndata["feat"] = tensor_view(np.ascontiguousarray(self.features))
            graph.ndata["label"] = tensor_view(self.labels)
        return graph

    def summary(self) -> str:
        return (
            f"{self.name}: {self.num_nodes:,} nodes, {self.num_edges:,} edges, "
            f"{self.features.shape[1]}-dim {self.features.dtype} features, {self.num_classes} classes, "
            f"train/val/test {len(self.train_idx):,}/{len(self.val_idx):,}/{len(self.test_idx):,}"
        )
