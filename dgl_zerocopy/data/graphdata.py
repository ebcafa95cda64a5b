"""Amazon Computers/Photo and Coauthor CS/Physics from the GraphData ``.npz`` files (Shchur et al. 2018).

Each file holds the adjacency in CSR (``adj_indptr``, ``adj_indices``, ``num_nodes``; the Amazon
graphs store one direction per edge), sparse node features (``attr_indptr``, ``attr_indices``,
``attr_data``, ``attr_shape``) and ``labels``. There is no standard split: as in "Pitfalls of
Graph Neural Network Evaluation", 20 training and 30 validation nodes are drawn per class from a
seed, and every other node is a test node.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from ..store.host_memory import host_array
from .base import DatasetError, GraphDataset, symmetric_csc

__all__ = ["load_graphdata", "GRAPHDATA_FILES", "TRAIN_PER_CLASS", "VAL_PER_CLASS", "per_class_split"]

GRAPHDATA_FILES = {
    "amazon-computers": "amazon_cs.npz",
    "amazon-photo": "amazon_photo.npz",
    "coauthor-cs": "coauthor_cs.npz",
    "coauthor-physics": "coauthor_phy.npz",
}
TRAIN_PER_CLASS = 20
VAL_PER_CLASS = 30
_KEYS = ("adj_indptr", "adj_indices", "num_nodes", "attr_indptr", "attr_indices", "attr_data", "attr_shape", "labels")


def load_graphdata(name: str, root: Path, split_seed: int = 0) -> GraphDataset:
    """Dataset ``name`` (a key of :data:`GRAPHDATA_FILES`) from ``<root>/graphdata/`` (or ``<root>``).

    The graph is symmetrised, with duplicate edges and self-loops dropped; features are dense
    float32 ``(num_nodes, num_feats)``, each row divided by its sum (zero rows stay zero); the split is
    :func:`per_class_split` with ``split_seed``.
    """
    if name not in GRAPHDATA_FILES:
        raise ValueError(f"unknown GraphData dataset {name!r}; choose from: {', '.join(GRAPHDATA_FILES)}")
    path = _find_file(GRAPHDATA_FILES[name], Path(root))
    try:
        with np.load(path) as npz:  # no allow_pickle: object arrays are refused
            arrays = {k: npz[k] for k in _KEYS if k in npz.files}
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise DatasetError(f"{str(path)!r} is not a readable GraphData .npz file: {e}") from None
    missing = [k for k in _KEYS if k not in arrays]
    if missing:
        raise DatasetError(f"{str(path)!r} lacks the arrays {', '.join(missing)}; expected {', '.join(_KEYS)}")

    num_nodes = int(arrays["num_nodes"])
    adj_indptr = arrays["adj_indptr"].astype(np.int64, copy=False)
    dst = arrays["adj_indices"].astype(np.int64, copy=False)
    src = np.repeat(np.arange(num_nodes, dtype=np.int64), np.diff(adj_indptr))
    indptr, indices = symmetric_csc(src, dst, num_nodes)

    labels = arrays["labels"].astype(np.int64, copy=False)
    num_classes = int(labels.max()) + 1
    train_idx, val_idx, test_idx = per_class_split(labels, num_classes, split_seed, name)
    features = _dense_features(arrays["attr_indptr"], arrays["attr_indices"], arrays["attr_data"], arrays["attr_shape"])
    return GraphDataset(name, indptr, indices, features, labels, train_idx, val_idx, test_idx, num_classes)


def per_class_split(labels: np.ndarray, num_classes: int, seed: int, name: str = "dataset") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted int64 train/val/test ids: :data:`TRAIN_PER_CLASS` and :data:`VAL_PER_CLASS` random
    nodes of each class (``numpy.random.default_rng(seed)``), all the others test."""
    rng = np.random.default_rng(seed)
    train, val = [], []
    for c in range(num_classes):
        members = np.flatnonzero(labels == c)
        if len(members) < TRAIN_PER_CLASS + VAL_PER_CLASS:
            raise DatasetError(f"{name}: class {c} has {len(members)} nodes, fewer than the {TRAIN_PER_CLASS} + {VAL_PER_CLASS} the split draws")
        members = rng.permutation(members)
        train.append(members[:TRAIN_PER_CLASS])
        val.append(members[TRAIN_PER_CLASS : TRAIN_PER_CLASS + VAL_PER_CLASS])
    train_idx, val_idx = np.sort(np.concatenate(train)), np.sort(np.concatenate(val))
    rest = np.ones(len(labels), dtype=bool)
    rest[train_idx] = False
    rest[val_idx] = False
    return train_idx.astype(np.int64), val_idx.astype(np.int64), np.flatnonzero(rest).astype(np.int64)


def _find_file(filename: str, root: Path) -> Path:
    for path in (root / "graphdata" / filename, root / filename):
        if path.is_file():
            return path
    raise DatasetError(f"{filename} not found in {str(root / 'graphdata')!r} or {str(root)!r}; place the GraphData .npz files there")


def _dense_features(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, shape: np.ndarray) -> np.ndarray:
    """The CSR matrix as a C-contiguous float32 array, rows summing to 1, written and normalised in
    its one full-size buffer (Coauthor Physics is 1.16 GB: no dense temporary beside it).
    Duplicate entries add up."""
    rows, cols = (int(s) for s in shape)
    out = host_array((rows, cols), np.float32)  # zero-filled, 2 MB pages by default
    row_of = np.repeat(np.arange(rows, dtype=np.int64), np.diff(indptr.astype(np.int64, copy=False)))
    flat = row_of * cols + indices.astype(np.int64, copy=False)
    data = data.astype(np.float32, copy=False)
    np.add.at(out.reshape(-1), flat, data)
    # Row-normalised like the Planetoid features: the Amazon rows hold hundreds of ones, and raw
    # they blow up the first steps (loss 6 -> 24 on Amazon Photo) and stall training.
    row_sum = np.bincount(row_of, weights=data, minlength=rows)[:, None]
    np.divide(out, row_sum, out=out, where=row_sum != 0)
    return out
