"""A graph left in its files: the folder :func:`~dgl_zerocopy.data.papers_disk.generate_to_disk` writes,
opened without a copy.

Layout (every array a plain ``.npy``, memory-mapped read-only on open)::

    DIR/indptr.npy      int64 [num_nodes + 1]: the in-edge CSC's offsets
    DIR/indices.npy     [num_edges]: the source of each in-edge, int32 while the node ids fit, else int64
    DIR/labels.npy      int64 [num_nodes]
    DIR/train_idx.npy, val_idx.npy, test_idx.npy: sorted int64 node ids
    DIR/features/       a compressed folder (``dgl_zerocopy.compress``'s layout: int8 codes per column),
    or DIR/features.npy float32 [num_nodes, feat_dim]
    DIR/graph.json      what was generated (spec, counts, dtypes): written last

A folder is written under a temporary name (:func:`~dgl_zerocopy.store.cache_files.partial_prefix`) and
renamed into place when whole, so a folder named ``DIR`` with a ``graph.json`` is a finished graph;
:func:`open_disk_graph` still checks each array's dtype and length against ``graph.json``, and the CSC's values
(ids in the graph, offsets from 0 and never decreasing) by one pass or by the verdict recorded for these
files (:mod:`~dgl_zerocopy.data.disk_check`); the mapped CSC files are guarded against truncation while open.

Opening copies nothing: :attr:`DiskGraph.indptr`/``indices`` are the file mappings, handed as they are
to :class:`~dgl_zerocopy.sampling.cpu_hops.HopSampler` (:func:`dgl_zerocopy.sampling.disk.hop_sampler`) and, as tensors
over the same pages, to :class:`~dgl_zerocopy.sampling.graph.SamplingGraph` (:func:`dgl_zerocopy.sampling.disk.sampling_graph`,
pinned in place with ``placement="pinned"``); the features are served by ``FeatureStore(path,
storage=StorageTier(N))`` (:meth:`DiskGraph.feature_store`).
"""

from __future__ import annotations

import json
import mmap
import os
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..store.host_memory import host_copy
from .base import CscSizes, DatasetError
from .disk_check import CSC_FILES, CscFiles, verify_csc

__all__ = ["DiskGraph", "open_disk_graph", "NpyAppender", "META", "FORMAT"]

META = "graph.json"
FORMAT = 1
_HEADER_BYTES = 128  # a fixed .npy header: the shape is written once the length is known


class NpyAppender:
    """A 1-D (or row-appended 2-D) ``.npy`` file written front to back: rows are appended as they
    come and the header, whose length is fixed, records the final shape at :meth:`close`. Nothing is
    held in memory but the chunk being written."""

    def __init__(self, path: Path, dtype, row_shape: tuple[int, ...] = ()) -> None:
        self.path, self.dtype, self.row_shape = Path(path), np.dtype(dtype), tuple(row_shape)
        self.rows = 0
        self._file = open(self.path, "wb")  # noqa: SIM115 - closed by close()
        self._file.write(_npy_header(self.dtype, (0, *self.row_shape)))

    def append(self, rows: np.ndarray) -> None:
        rows = np.ascontiguousarray(rows, dtype=self.dtype)
        if rows.shape[1:] != self.row_shape:
            raise ValueError(f"rows of shape {rows.shape[1:]} appended to {self.path.name}, whose rows are {self.row_shape}")
        self._file.write(memoryview(rows.reshape(-1)).cast("B"))
        self.rows += rows.shape[0]

    def close(self) -> None:
        if self._file.closed:
            return
        self._file.seek(0)
        self._file.write(_npy_header(self.dtype, (self.rows, *self.row_shape)))
        self._file.close()

    def abandon(self) -> None:
        self._file.close()


def _npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """A version-1.0 ``.npy`` header of exactly :data:`_HEADER_BYTES` bytes (what ``np.load`` reads)."""
    text = repr({"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape})
    body = text.encode("latin1")
    pad = _HEADER_BYTES - 10 - len(body) - 1
    if pad < 0:
        raise ValueError(f"a .npy header for shape {shape} does not fit {_HEADER_BYTES} bytes")
    body += b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little") + body


#: :meth:`DiskGraph.feature_store`'s former keywords -> their names now (the host buffer was called a cache).
_FORMER_KEYWORDS = {"host_cache_bytes": "host_buffer_bytes", "host_cache_policy": "host_buffer_policy"}


@dataclass(frozen=True, eq=False)
class DiskGraph(CscSizes):
    """A graph opened from its folder: every array a read-only memory map of its file (no copy)."""

    path: Path
    meta: dict
    indptr: np.ndarray
    indices: np.ndarray
    labels: np.ndarray
    train_idx: np.ndarray
    val_idx: np.ndarray
    test_idx: np.ndarray
    features_path: Path
    #: The mapped CSC files, checked before each batch (:meth:`check_files`); None for a CSC held in memory.
    csc_files: CscFiles | None = None
    #: True when ``indptr``/``indices`` passed :func:`~dgl_zerocopy.data.graph_check.check_csc` (at open, or by a
    #: verdict recorded for these files): the samplers of :mod:`dgl_zerocopy.sampling.disk` then skip their pass.
    checked: bool = False

    @property
    def num_classes(self) -> int:
        return int(self.meta["num_classes"])

    @property
    def feat_dim(self) -> int:
        return int(self.meta["feat_dim"])

    def nbytes_on_disk(self) -> int:
        """Bytes of every file in the folder."""
        return sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file())

    def populate(self, names: tuple[str, ...] = ("indptr", "indices")) -> None:
        """Fault every page of the named mappings in now (``madvise(MADV_WILLNEED)``, then one read per
        page): a sampler that reads columns at random then pays no page fault per batch. Costs one
        sequential read of the files and keeps their pages resident while memory allows (the kernel
        may still take clean pages back under pressure)."""
        for name in names:
            array = getattr(self, name)
            handle = getattr(array, "_mmap", None)
            if handle is not None and hasattr(mmap, "MADV_WILLNEED"):
                handle.madvise(mmap.MADV_WILLNEED)
            step = max(1, mmap.PAGESIZE // array.itemsize)
            for start in range(0, array.shape[0], 1 << 28):  # a bounded strided view at a time
                int(np.asarray(array[start : start + (1 << 28) : step]).sum())

    def in_memory(self, names: tuple[str, ...] = ("indptr", "indices"), huge_pages: bool | None = None) -> DiskGraph:
        """The same graph with the named arrays copied into anonymous memory in 2 MB pages (``MAP_HUGETLB``
        or transparent huge pages; 4 KiB ones with a warning where neither is available) unless
        ``huge_pages=False`` (default: on, unless ``DGL_ZEROCOPY_HUGE_PAGES=0``); the other arrays stay the file maps.
        The copies are read-only, as the maps are, and equal to the files element for element.

        Why: a sampler's reads of the CSC land on random pages, and in the file's 4 KiB pages each costs
        a page walk; in 2 MiB pages most do not (papers100M's shape on the CPU: 39 ns per sampled edge
        instead of 46, docs/benchmarks.md). The cost is RAM: the copy is anonymous memory that the kernel
        cannot drop as it drops clean file pages. Refused with :class:`MemoryError` (nothing allocated)
        when the copy would take more than 80 % of the memory available now, so that the feature cache
        and the sampler's scratch keep room; :meth:`populate` is then the way to keep the pages resident.
        The files are checked (:meth:`check_files`) before the copy and after it, so the copies are the bytes
        checked at open; a graph not checked (:attr:`checked` False) stays unchecked, and its samplers check it."""
        import psutil

        need = sum(getattr(self, name).nbytes for name in names)
        available = int(psutil.virtual_memory().available)
        if need > 0.8 * available:
            raise MemoryError(
                f"copying {', '.join(names)} into memory needs {need / 2**30:.2f} GiB, more than 80 % of the "
                f"{available / 2**30:.2f} GiB available now: use populate() to keep the file pages resident instead"
            )
        self.check_files()  # the copy reads every page of the maps: a file cut short would kill it
        copies = {name: _anonymous_copy(getattr(self, name), huge_pages) for name in names}
        # The copies hold the checked bytes when the files still are those checked (check_files compares their stamps).
        self.check_files()
        files = None if set(CSC_FILES) <= set(names) else self.csc_files
        return replace(self, **copies, csc_files=files)

    def check_files(self) -> None:
        """Raise where a mapped CSC file was cut short or written to since it was checked: one ``fstat`` per file,
        run by the samplers of :mod:`dgl_zerocopy.sampling.disk` before each batch. A read of a mapped file past
        its new end would kill the process (SIGBUS); ids written after the check could send a sampler outside
        the graph. A change between this check and the batch's reads is not caught: the check narrows the
        window, it cannot close it.

        Raises:
            StorageChangedError: naming the file and the fix.
        """
        if self.csc_files is not None:
            self.csc_files.check()

    def feature_store(self, host_buffer_bytes: int | None = None, backend: str = "cpu", device=None, host_buffer_policy: str | None = None, **options):
        """``FeatureStore(features, storage=StorageTier(host_buffer_bytes, host_buffer_policy))``: rows stay in their
        file, at most ``host_buffer_bytes`` of them in one host buffer (docs/storage.md); ``options``: the store's other parts.
        The former keywords ``host_cache_bytes=`` and ``host_cache_policy=`` still work, with a ``DeprecationWarning``.

        Raises:
            TypeError: no budget, or a keyword given under both its names."""
        from ..store.feature_store import FeatureStore
        from ..store.options import StorageTier

        given = {"host_buffer_bytes": host_buffer_bytes, "host_buffer_policy": host_buffer_policy}
        for old, new in _FORMER_KEYWORDS.items():
            if old not in options:
                continue
            if given[new] is not None:
                raise TypeError(f"feature_store() got both {new}= and {old}= (its former name); keep {new}=")
            warnings.warn(f"feature_store({old}=) is deprecated: write {new}=, the same setting under its new name", DeprecationWarning, stacklevel=2)
            given[new] = options.pop(old)
        if given["host_buffer_bytes"] is None:
            raise TypeError("feature_store() needs host_buffer_bytes, the host buffer's budget in bytes")
        storage = StorageTier(given["host_buffer_bytes"], given["host_buffer_policy"])
        return FeatureStore(str(self.features_path), backend=backend, device=device, storage=storage, **options)

    def to_dataset(self):
        """A :class:`~dgl_zerocopy.data.base.GraphDataset` over the same mappings, its features a
        :class:`~dgl_zerocopy.data.feature_file.FeatureFile` (left on storage). Its ``indices`` keep
        their dtype (int32 while the node ids fit), which widens the base contract's int64."""
        from .base import GraphDataset
        from .feature_file import FeatureFile

        return GraphDataset(
            self.meta.get("name", "generated"),
            self.indptr,
            self.indices,
            FeatureFile.open(self.features_path),
            self.labels,
            self.train_idx,
            self.val_idx,
            self.test_idx,
            self.num_classes,
        )


def _anonymous_copy(array: np.ndarray, huge_pages: bool | None) -> np.ndarray:
    """``array`` (1-D) copied into a private anonymous mapping, a bounded slice at a time, read-only once
    filled: 2 MB pages unless ``huge_pages`` is False (:func:`~dgl_zerocopy.store.host_memory.host_copy`:
    ``MAP_HUGETLB`` or transparent huge pages, else 4 KiB pages with one warning)."""
    return host_copy(array, huge_pages=huge_pages, read_only=True)


def is_disk_graph(path: str | os.PathLike) -> bool:
    """True when ``path`` is a finished generated graph (its ``graph.json`` exists)."""
    return (Path(path) / META).is_file()


def open_disk_graph(path: str | os.PathLike) -> DiskGraph:
    """The graph in folder ``path``, its arrays memory-mapped read-only, its CSC checked
    (:func:`~dgl_zerocopy.data.disk_check.verify_csc`: one pass over ``indptr.npy`` and ``indices.npy``, unless a
    verdict is recorded for these files as they are now; a graph generated by this version has one).

    Args:
        path: the folder :func:`~dgl_zerocopy.data.papers_disk.generate_to_disk` wrote.

    Returns:
        The :class:`DiskGraph`, ``checked`` True.

    Raises:
        DatasetError: a folder that is not a whole generated graph (a file missing, of another dtype or length),
            naming the file and the fix.
        IndexError: an id in ``indices.npy`` outside ``[0, num_nodes)``, naming the file, the position and the value.
        ValueError: an ``indptr.npy`` that does not start at 0 or decreases, naming the file and the position.
    """
    path = Path(path)
    try:
        meta = json.loads((path / META).read_text())
    except FileNotFoundError:
        raise DatasetError(f"{str(path)!r} is not a finished generated graph: it has no {META} (generate it with dgl-zerocopy generate)") from None
    except ValueError as e:
        raise DatasetError(f"{str(path / META)!r} is not valid JSON ({e}); generate the graph again") from None
    if meta.get("format") != FORMAT:
        raise DatasetError(f"{str(path)!r} holds generated-graph format {meta.get('format')!r}, this version reads {FORMAT}; generate it again")
    n, e = int(meta["num_nodes"]), int(meta["num_edges"])
    expect = {
        "indptr": (np.int64, (n + 1,)),
        "indices": (np.dtype(meta["index_dtype"]), (e,)),
        "labels": (np.int64, (n,)),
        "train_idx": (np.int64, (int(meta["num_train"]),)),
        "val_idx": (np.int64, (int(meta["num_val"]),)),
        "test_idx": (np.int64, (int(meta["num_test"]),)),
    }
    arrays = {}
    for name, (dtype, shape) in expect.items():
        file = path / f"{name}.npy"
        try:
            arrays[name] = np.load(file, mmap_mode="r")
        except (OSError, ValueError, EOFError) as err:
            raise DatasetError(f"{str(file)!r} does not open ({err}); generate the graph again") from None
        if arrays[name].dtype != dtype or arrays[name].shape != shape:
            raise DatasetError(
                f"{str(file)!r} holds {arrays[name].dtype} {arrays[name].shape}, {META} says {np.dtype(dtype)} {shape}; generate the graph again"
            )
    if int(arrays["indptr"][-1]) != e:
        raise DatasetError(f"{str(path / 'indptr.npy')!r} ends at {int(arrays['indptr'][-1])}, not at the {e} edges of indices.npy; generate the graph again")
    files = CscFiles(path, arrays)
    verify_csc(path, meta, arrays["indptr"], arrays["indices"], files)
    return DiskGraph(path=path, meta=meta, features_path=path / meta["features"], csc_files=files, checked=True, **arrays)
