"""Node features left on storage: a dataset's ``features`` as the file that holds them.

A :class:`GraphDataset` whose ``features`` is a :class:`FeatureFile` never holds the table in
memory: the training sources serve it through ``FeatureStore(path, storage=StorageTier(N))``
(docs/storage.md), which keeps at most ``N`` bytes of its rows in a host buffer.

- :func:`attach_feature_file`: a ``.npy`` (or a folder written by :func:`dgl_zerocopy.compress`)
  of your own as the dataset's features, its rows checked against the graph's nodes;
- :func:`features_on_storage`: the dataset's own features in a file: the ``.npy`` they map already
  (the OGB cache), or a ``.npy`` written once into a cache folder and reused by later runs.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..store.cache_files import DamagedFile, check_digests, manifest_beside, partial_prefix, record_digests, sweep_partials
from .base import DatasetError, GraphDataset

__all__ = ["FeatureFile", "attach_feature_file", "features_on_storage", "mapped_npy"]

_HASH_CHUNK = 64 << 20  # bytes hashed at a time: the digest never needs a second copy of the table


@dataclass(frozen=True)
class FeatureFile:
    """A feature table left in its file: ``shape`` and ``dtype`` as a gather returns them (a
    compressed folder's decoded rows), ``row_bytes`` as stored (its codes), ``codec`` None for a
    plain ``.npy``. Made by :meth:`open`; pickled by path (each process opens its own store)."""

    path: Path
    shape: tuple[int, int]
    dtype: np.dtype
    row_bytes: int
    codec: str | None = None

    ndim = 2

    @classmethod
    def open(cls, path: str | os.PathLike) -> FeatureFile:
        """The table at ``path`` (a ``.npy`` or a compressed folder), its header checked (missing,
        truncated, not 2-D, a dtype no store gathers): :class:`DatasetError` naming the file otherwise."""
        from ..store.storage import open_table_file

        try:
            table = open_table_file(Path(path))
        except (OSError, ValueError, TypeError) as error:
            raise DatasetError(f"feature file: {error}") from None
        if table.codec is None:
            dtype = np.dtype(str(table.dtype).removeprefix("torch."))
            return cls(table.path, table.shape, dtype, table.row_bytes)
        return cls(table.folder, table.shape, np.dtype(np.float32), table.row_bytes, table.codec.name)

    @property
    def nbytes(self) -> int:
        """Bytes the file holds for the rows (codes, when compressed)."""
        return self.shape[0] * self.row_bytes

    def __len__(self) -> int:
        return self.shape[0]


def attach_feature_file(dataset: GraphDataset, path: str | os.PathLike | FeatureFile) -> GraphDataset:
    """``dataset`` with the table at ``path`` as its features, left on storage. The file must have
    one row per node (its width may differ from the dataset's own features: the model follows it);
    :class:`DatasetError` naming both shapes otherwise."""
    table = path if isinstance(path, FeatureFile) else FeatureFile.open(path)
    if table.shape[0] != dataset.num_nodes:
        raise DatasetError(
            f"feature file {str(table.path)!r} holds {table.shape[0]:,} rows (shape {table.shape}), but {dataset.name} has "
            f"{dataset.num_nodes:,} nodes (its features: shape {tuple(dataset.features.shape)}); give a table of one row per node"
        )
    return replace(dataset, features=table)


def features_on_storage(dataset: GraphDataset, folder: Path) -> GraphDataset:
    """``dataset`` with its features left on storage. Features that map a whole ``.npy`` already
    (the OGB loaders' cache) are served from that file; others are written once to
    ``folder/<name>-<rows>x<cols>-<dtype>-<digest>.npy`` (the digest of their bytes: a file is
    reused only for the same table) through a temporary file renamed into place, with the file's
    own digest beside it (``<file>.digests.json``): a file whose bytes are not those written is
    written again with a warning naming it. Partial files of writers that died are removed."""
    if isinstance(dataset.features, FeatureFile):
        return dataset
    mapped = mapped_npy(dataset.features)
    if mapped is not None:
        return replace(dataset, features=FeatureFile.open(mapped))
    features = np.ascontiguousarray(dataset.features)
    rows, cols = features.shape
    path = Path(folder) / f"{dataset.name}-{rows}x{cols}-{features.dtype}-{_digest(features)}.npy"
    sweep_partials(path.parent)
    if not _whole(path):
        _write_npy(path, features)
    return replace(dataset, features=FeatureFile.open(path))


def mapped_npy(features) -> Path | None:
    """The ``.npy`` file that ``features`` maps whole (``np.load(path, mmap_mode=...)``), else None."""
    filename = getattr(features, "filename", None)
    if not isinstance(features, np.memmap) or not filename or not str(filename).endswith(".npy"):
        return None
    whole = np.load(filename, mmap_mode="r")
    if whole.shape != features.shape or whole.dtype != features.dtype or whole.offset != features.offset:
        return None
    return Path(filename)


def _digest(array: np.ndarray) -> str:
    flat = array.reshape(-1).view(np.uint8)
    h = hashlib.blake2b(digest_size=8)
    for start in range(0, flat.size, _HASH_CHUNK):
        h.update(flat[start : start + _HASH_CHUNK])
    return h.hexdigest()


def _whole(path: Path) -> bool:
    """True when ``path`` holds the bytes written there (:func:`check_digests`); False when there is
    no file, and, with a warning naming the file, when it is damaged or has no digest recorded."""
    if not path.exists():
        return False
    try:
        check_digests(path.parent, manifest_beside(path))
    except DamagedFile as e:
        warnings.warn(f"the cached features file {str(e.path)!r} is damaged ({e.reason}); writing {str(path)!r} again", stacklevel=3)
        return False
    return True


def _write_npy(path: Path, array: np.ndarray) -> None:
    """Write ``array`` to a partial file, record its digest beside ``path``, then rename it into
    place (a writer killed midway leaves a partial file, which a later run removes)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=partial_prefix(path.name), dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                np.save(f, array)
            record_digests({path.name: Path(tmp)}, manifest_beside(path))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as error:
        raise DatasetError(f"cannot write the features to {str(path)!r} ({error.strerror or error}); the folder must be writable") from None
