"""Cora and Citeseer from the original Planetoid files (Yang, Cohen, Salakhutdinov 2016).

The files ``ind.<name>.{x,y,tx,ty,allx,ally,graph,test.index}`` are Python 2 pickles of SciPy
sparse matrices, NumPy arrays and a dict of adjacency lists. They are read with a restricted
unpickler that admits only those classes: a pickle naming any other global (``os.system``, ...)
raises :class:`DatasetError` instead of running it.

The result follows the standard Planetoid setup (Kipf & Welling 2017): train = the first
``len(y)`` nodes, validation = the next 500, test = the nodes listed in ``test.index``; features
row-normalised; the graph symmetric, without duplicate edges or self-loops.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from numpy.core.multiarray import _reconstruct

from ..store.host_memory import host_array
from .base import DatasetError, GraphDataset, symmetric_csc

__all__ = ["load_planetoid", "PLANETOID_FILES", "restricted_load"]

PLANETOID_FILES = ("x", "y", "tx", "ty", "allx", "ally", "graph", "test.index")
NUM_VAL = 500  # the standard split's validation nodes, right after the training nodes

# Everything the Planetoid pickles reference, by the (module, name) written in the file; Python 2's
# ``__builtin__`` is spelled out because find_class sees names before the 2-to-3 import fix-up.
_ALLOWED = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
    ("scipy.sparse.csr", "csr_matrix"): sp.csr_matrix,
    ("scipy.sparse._csr", "csr_matrix"): sp.csr_matrix,
    ("collections", "defaultdict"): __import__("collections").defaultdict,
    ("__builtin__", "list"): list,
    ("builtins", "list"): list,
}


class _Refused(pickle.UnpicklingError):
    """A global outside :data:`_ALLOWED` (apart from a damaged pickle's own UnpicklingError)."""


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise _Refused(f"global {module}.{name} is not allowed in a Planetoid file") from None


def restricted_load(data: bytes, what: str = "pickle"):
    """Unpickle ``data`` (a Python 2 pickle, latin-1 strings) admitting only the NumPy/SciPy classes
    of the Planetoid files; anything else raises :class:`DatasetError` naming ``what``."""
    try:
        return _RestrictedUnpickler(io.BytesIO(data), encoding="latin1").load()
    except _Refused as e:
        raise DatasetError(f"{what}: refused to load: {e}") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError) as e:
        raise DatasetError(
            f"{what}: not a readable Planetoid pickle ({type(e).__name__}: {e}); the file is cut short or damaged: copy the Planetoid files again"
        ) from None


def _find_folder(name: str, root: Path) -> Path:
    """``<root>/planetoid`` if it holds the files, else ``<root>`` itself."""
    expected = [f"ind.{name}.{suffix}" for suffix in PLANETOID_FILES]
    for folder in (root / "planetoid", root):
        if all((folder / f).is_file() for f in expected):
            return folder
    raise DatasetError(
        f"dataset {name!r}: Planetoid files not found in {str(root / 'planetoid')!r} or {str(root)!r}; "
        f"expected {', '.join(expected)} (the original Planetoid release)"
    )


def load_planetoid(name: str, root: Path) -> GraphDataset:
    """Cora or Citeseer (``name``) from ``<root>/planetoid/ind.<name>.*`` (or ``<root>/ind.<name>.*``).

    Features: float32, ``(num_nodes, num_feats)``, each row divided by its sum (all-zero rows stay
    zero). Citeseer's test nodes without a feature row (isolated in the original data) get zero
    features and label 0, as in the standard loaders; none of them is in a split.
    """
    if name not in ("cora", "citeseer"):
        raise ValueError(f"unknown Planetoid dataset {name!r}; choose from: cora, citeseer")
    folder = _find_folder(name, Path(root))
    objects = {}
    for key in ("x", "y", "tx", "ty", "allx", "ally", "graph"):
        path = folder / f"ind.{name}.{key}"
        objects[key] = restricted_load(path.read_bytes(), str(path))
    _check_types(objects, folder, name)
    test_path = folder / f"ind.{name}.test.index"
    try:
        test_index = np.array([int(line) for line in test_path.read_text().split()], dtype=np.int64)
    except ValueError as e:
        raise DatasetError(f"{str(test_path)!r}: expected one integer node id per line ({e})") from None

    allx, tx, ally, ty, graph = objects["allx"], objects["tx"], objects["ally"], objects["ty"], objects["graph"]
    num_labeled = allx.shape[0]
    if test_index.size == 0 or test_index.min() < num_labeled or len(test_index) != tx.shape[0]:
        raise DatasetError(f"{str(test_path)!r}: test ids must number tx's rows ({tx.shape[0]}) and follow allx's {num_labeled} rows")
    # The test rows belong to the nodes named in test.index, in that order; node ids between
    # allx's rows and the largest test id that no row names keep zero features (Citeseer).
    num_nodes = int(max(test_index.max() + 1, max(graph) + 1, num_labeled))
    features = _row_normalized(allx, tx, test_index, num_nodes)
    onehot = np.zeros((num_nodes, ally.shape[1]), dtype=np.float32)
    onehot[:num_labeled] = ally
    onehot[test_index] = ty
    labels = onehot.argmax(1).astype(np.int64)

    src, dst = _edge_list(graph)
    if max(src.max(), dst.max()) >= num_nodes:
        raise DatasetError(f"{str(folder)!r}: ind.{name}.graph names node {max(src.max(), dst.max())} but there are {num_nodes} nodes")
    indptr, indices = symmetric_csc(src, dst, num_nodes)

    num_train = objects["y"].shape[0]
    return GraphDataset(
        name=name,
        indptr=indptr,
        indices=indices,
        features=features,
        labels=labels,
        train_idx=np.arange(num_train, dtype=np.int64),
        val_idx=np.arange(num_train, num_train + NUM_VAL, dtype=np.int64),
        test_idx=np.sort(test_index),
        num_classes=int(ally.shape[1]),
    )


def _check_types(objects: dict, folder: Path, name: str) -> None:
    for key in ("x", "tx", "allx"):
        if not sp.issparse(objects[key]):
            raise DatasetError(f"{str(folder / f'ind.{name}.{key}')!r}: expected a SciPy sparse matrix, got {type(objects[key]).__name__}")
    for key in ("y", "ty", "ally"):
        if not isinstance(objects[key], np.ndarray) or objects[key].ndim != 2:
            raise DatasetError(f"{str(folder / f'ind.{name}.{key}')!r}: expected a 2-D one-hot NumPy array")
    if not isinstance(objects["graph"], dict):
        raise DatasetError(f"{str(folder / f'ind.{name}.graph')!r}: expected a dict of adjacency lists, got {type(objects['graph']).__name__}")


def _row_normalized(allx: sp.spmatrix, tx: sp.spmatrix, test_index: np.ndarray, num_nodes: int) -> np.ndarray:
    """Dense float32 features, allx's rows first, tx's rows at ``test_index``, each row summing to 1."""
    features = host_array((num_nodes, allx.shape[1]), np.float32)  # zero-filled, 2 MB pages by default
    features[: allx.shape[0]] = allx.toarray()
    features[test_index] = tx.toarray()
    row_sum = features.sum(1, dtype=np.float64, keepdims=True)
    np.divide(features, row_sum, out=features, where=row_sum != 0)
    return features


def _edge_list(graph: dict) -> tuple[np.ndarray, np.ndarray]:
    """Source and destination ids of every adjacency-list entry (one direction, as stored)."""
    lengths = [len(v) for v in graph.values()]
    src = np.repeat(np.fromiter(graph.keys(), dtype=np.int64, count=len(graph)), lengths)
    dst = np.fromiter((int(u) for v in graph.values() for u in v), dtype=np.int64, count=sum(lengths))
    return src, dst
