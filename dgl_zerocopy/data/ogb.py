"""ogbn-products, ogbn-arxiv and ogbn-papers100M through ogb's ``DglNodePropPredDataset``, cached as
``.npy`` files that later loads memory-map.

The first load reads the dataset with ogb, then writes the CSC graph, features, labels and splits
to ``<dataset folder>/dgl_zerocopy/`` (a temporary folder renamed into place, so a reader never
sees half a cache). Every later load maps those files read-only and does not touch ogb: the
feature table is a file mapping that :class:`~dgl_zerocopy.store.feature_store.FeatureStore` pins in place,
with no second copy in RAM.

Nothing is downloaded. ogb would fetch a missing dataset and ask questions on stdin (a download
over 1 GB, a folder without its ``RELEASE_v*.txt``); the files ogb needs are checked first and a
missing one raises :class:`DatasetError` with the download URL and the folder layout.

Features left on storage (``load_ogb(..., features_on_storage=True)``): the dataset's ``features``
is the cache's ``features.npy`` as a :class:`~dgl_zerocopy.data.feature_file.FeatureFile` (path,
shape, dtype; nothing mapped), which ``train --feature-storage auto --host-buffer SIZE`` serves
through a storage-backed FeatureStore: the table is never whole in memory.

Compressed features (:func:`compressed_features`): the cache's ``features.npy`` converted once, a
slab of rows at a time, into a folder beside it (``features.int8-column-minmax/``, ...) that
``FeatureStore(folder)`` maps; later calls, and ``train --feature-compression``, reuse it. It lives
inside the cache, so a rebuilt cache drops it with the old arrays.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import logging
import shutil
import tempfile
import warnings
import zlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np

from .._extras import import_dgl, install_hint
from ..store.cache_files import MANIFEST, DamagedFile, check_digests, partial_prefix, record_digests, sweep_partials
from ..store.compression import compressed_beside
from ..store.host_files import replace_dir
from .base import ARRAYS, DatasetError, GraphDataset, csc_from_sorted_keys, load_arrays
from .feature_file import FeatureFile

__all__ = ["load_ogb", "compressed_features", "OGB_DATASETS", "SYMMETRISED", "CACHE_DIR", "dataset_folder", "bidirected_csc", "directed_csc"]

log = logging.getLogger(__name__)

OGB_DATASETS = ("ogbn-products", "ogbn-arxiv", "ogbn-papers100M")
SYMMETRISED = ("ogbn-arxiv", "ogbn-papers100M")  # citation graphs stored one way; products is stored both ways
CACHE_DIR = "dgl_zerocopy"  # inside the dataset's folder
CACHE_FORMAT = 1  # bump when the cached arrays change meaning: older caches are rebuilt
_CHUNK_BYTES = 256 << 20  # feature rows are converted and written this many bytes at a time


def load_ogb(name: str, root: str | Path, meta_dict: dict | None = None, *, features_on_storage: bool = False) -> GraphDataset:
    """OGB node-property dataset ``name`` from ``<root>/<name with '_' for '-'>`` (ogb's layout).

    ``meta_dict``: ogb's per-dataset meta information (a column of ogb's ``master.csv`` with
    ``dir_path`` set to the dataset's folder), for a dataset in OGB's raw format kept elsewhere;
    then ``root`` is not used and ``name`` still picks the graph rule and the evaluator.

    Returns a :class:`GraphDataset` whose arrays are read-only memory maps: in-edges in CSC
    (int64; arxiv and papers100M made bidirected as ``dgl.to_bidirected`` does: one edge per
    direction, self-loops kept once), float32 C-contiguous features, int64 labels with -1 for
    unlabelled nodes (papers100M), sorted int64 splits; ``evaluator`` is ``name``.
    Raises :class:`DatasetError` when the dataset is not there, naming the URL and the layout, and
    when a file of it cannot be read or the cache cannot be written, naming the file or folder.
    A damaged cache (a file whose bytes are not those written: its digest, recorded at write time,
    differs; a file cut short, arrays of the wrong shape) is rebuilt with a warning naming the file;
    partial caches of writers that died are removed.

    ``features_on_storage=True``: ``features`` is the cache's ``features.npy`` as a
    :class:`~dgl_zerocopy.data.feature_file.FeatureFile`, never mapped nor read here; the training
    sources serve it through ``FeatureStore(path, storage=StorageTier(N))`` (docs/storage.md).
    """
    if features_on_storage:
        dataset = load_ogb(name, root, meta_dict)
        return replace(dataset, features=FeatureFile.open(dataset.features.filename))
    if name not in OGB_DATASETS:
        raise ValueError(f"unknown OGB dataset {name!r}; choose from: {', '.join(OGB_DATASETS)}")
    if meta_dict is not None and "dir_path" not in meta_dict:
        raise ValueError("meta_dict must hold 'dir_path', the dataset's folder, as ogb's meta_dict does")
    meta = dict(meta_dict) if meta_dict is not None else _master_column(name)
    folder = Path(meta["dir_path"]) if meta_dict is not None else dataset_folder(name, Path(root))
    cache = folder / CACHE_DIR
    sweep_partials(folder)
    damaged = None
    if _cache_is_current(cache, name):
        log.info("%s: mapping the cached arrays in %s", name, cache)
        try:
            return _open_cache(cache, name)
        except DamagedFile as e:
            damaged = e
            warnings.warn(f"{name}: the cache file {str(e.path)!r} is damaged ({e.reason}); rebuilding the cache from the dataset's files", stacklevel=2)
    try:
        _check_files(name, folder, meta)
    except DatasetError as e:
        if damaged is None:
            raise
        raise DatasetError(f"{name}: the cache file {str(damaged.path)!r} is damaged ({damaged.reason}) and cannot be rebuilt: {e}") from None
    log.info("%s: first load, reading %s with ogb and caching it as .npy in %s", name, folder, cache)
    try:
        _build_cache(name, folder, meta, meta_dict is not None, cache)
    except OSError as e:
        raise DatasetError(
            f"{name}: could not write the cache in {str(cache)!r} ({e}); {str(folder)!r} must be writable, with room for a copy of the dataset"
        ) from None
    try:
        return _open_cache(cache, name)
    except DamagedFile as e:
        raise DatasetError(f"{name}: the cache file {str(e.path)!r} is damaged right after it was written ({e.reason}); check the disk") from None


def compressed_features(
    name: str, root: str | Path, codec: str = "int8", meta_dict: dict | None = None, *, axis: str | None = None, method: str | None = None
) -> Path:
    """The folder of ``name``'s features compressed with ``codec`` (``"fp16"``, ``"bf16"``,
    ``"int8"``; int8's ``axis``/``method`` as in :func:`dgl_zerocopy.compress`), kept in the cache
    beside ``features.npy``: written on first use (loading the dataset first if it is not cached),
    then reused while ``features.npy`` is unchanged. ``FeatureStore(folder)`` loads it.
    ``root``/``meta_dict`` as in :func:`load_ogb`."""
    dataset = load_ogb(name, root, meta_dict)
    return compressed_beside(dataset.features.filename, codec, axis=axis, method=method)


def dataset_folder(name: str, root: Path) -> Path:
    """Where ogb keeps ``name`` under ``root``: ``ogbn_arxiv``, or ``ogbn_arxiv_dgl`` if that exists."""
    base = "_".join(name.split("-"))
    return root / (base + "_dgl") if (root / (base + "_dgl")).exists() else root / base


# --- the graph -------------------------------------------------------------------------------


def bidirected_csc(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """In-edges (CSC, int64) of the graph with both directions of every edge, each (u, v) once,
    self-loops once (as ``dgl.to_bidirected``); each column's sources sorted.

    Memory: one int64 key per directed edge (twice the input edges), sorted in place.
    """
    n = _check_key_range(num_nodes)
    m = len(src)
    key = np.empty(2 * m, dtype=np.int64)  # dst * n + src: sorting it orders by column, then source
    np.multiply(dst, n, out=key[:m])
    key[:m] += src
    np.multiply(src, n, out=key[m:])
    key[m:] += dst
    key.sort()
    if len(key):
        fresh = np.empty(len(key), dtype=bool)
        fresh[0] = True
        np.not_equal(key[1:], key[:-1], out=fresh[1:])
        key = key[fresh]
    return csc_from_sorted_keys(key, n)


def directed_csc(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """In-edges (CSC, int64) of the edges as given (duplicates kept); each column's sources sorted."""
    n = _check_key_range(num_nodes)
    key = np.multiply(dst, n, dtype=np.int64)
    key += src
    key.sort()
    return csc_from_sorted_keys(key, n)


def _check_key_range(num_nodes: int) -> int:
    if num_nodes * num_nodes >= 2**63:
        raise DatasetError(f"{num_nodes:,} nodes is too many for one int64 edge key (at most 3,037,000,499)")
    return int(num_nodes)


# --- the cache -------------------------------------------------------------------------------


def _cache_is_current(cache: Path, name: str) -> bool:
    path = cache / "meta.json"
    try:
        meta = json.loads(path.read_bytes())
    except FileNotFoundError:
        return False
    except (OSError, ValueError) as e:
        warnings.warn(f"{name}: the cache file {str(path)!r} is damaged ({e}); rebuilding the cache from the dataset's files", stacklevel=3)
        return False
    if not isinstance(meta, dict) or meta.get("format") != CACHE_FORMAT or meta.get("name") != name:
        log.info("%s: the cache in %s is from another format or dataset; rebuilding it", name, cache)
        return False
    return True


def _open_cache(cache: Path, name: str) -> GraphDataset:
    """The cached arrays, memory-mapped, each checked against the digest recorded when it was
    written and the shapes ``meta.json`` records; raises :class:`DamagedFile` naming the file."""
    check_digests(cache)
    path = cache / "meta.json"
    try:
        meta = json.loads(path.read_bytes())
        num_classes, n, m, feat_shape = int(meta["num_classes"]), int(meta["num_nodes"]), int(meta["num_edges"]), tuple(meta["feature_shape"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DamagedFile(path, f"{type(e).__name__}: {e}") from None
    shapes = {"indptr": (n + 1,), "indices": (m,), "features": feat_shape, "labels": (n,)}
    arrays = load_arrays(cache, lambda path: np.load(path, mmap_mode="r"), lambda _: shapes, "meta.json says")
    return GraphDataset(name=name, num_classes=num_classes, evaluator=name, **arrays)


def _build_cache(name: str, folder: Path, meta: dict, local: bool, cache: Path) -> None:
    """Read with ogb, write every array into a temporary folder, then rename it to ``cache``."""
    tmp = Path(tempfile.mkdtemp(prefix=partial_prefix(CACHE_DIR), dir=folder))
    try:
        _write_arrays(name, folder, meta, local, tmp)
        replace_dir(tmp, cache, marker="meta.json")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _write_arrays(name: str, folder: Path, meta: dict, local: bool, out: Path) -> None:
    # Order matters for papers100M's peak memory: the features leave RAM for the file first, then
    # ogb's graph is dropped, and only then is the CSC built from the edge list.
    dataset = _ogb_dataset(name, folder, meta, local)
    graph = dataset.graph[0]
    num_nodes = graph.num_nodes()
    labels = _int_labels(dataset.labels.numpy())
    np.save(out / "labels.npy", labels)
    with _reading(name, folder / "split" / meta["split"], f"fetch {meta['url']} again"):
        split = dataset.get_idx_split()
    for key, ours in (("train", "train_idx"), ("valid", "val_idx"), ("test", "test_idx")):
        ids = np.sort(split[key].numpy().astype(np.int64, copy=False))
        _check_split(name, key, ids, labels)
        np.save(out / f"{ours}.npy", ids)
    del labels, split
    if "feat" not in graph.ndata:
        raise DatasetError(f"{name} in {str(folder)!r} has no node features (raw/node-feat.csv.gz or node_feat in raw/data.npz)")
    features = graph.ndata.pop("feat").numpy()
    feat_shape = features.shape
    _save_float32(out / "features.npy", features)
    src, dst = (t.numpy() for t in graph.edges())
    del features, graph, dataset
    build = bidirected_csc if name in SYMMETRISED else directed_csc
    indptr, indices = build(src, dst, num_nodes)
    del src, dst
    np.save(out / "indptr.npy", indptr)
    np.save(out / "indices.npy", indices)
    info = {
        "format": CACHE_FORMAT,
        "name": name,
        "num_classes": int(meta["num classes"]),
        "num_nodes": num_nodes,
        "num_edges": int(len(indices)),
        "feature_shape": list(feat_shape),
        "bidirected": name in SYMMETRISED,
    }
    (out / "meta.json").write_text(json.dumps(info, indent=1) + "\n")  # marks a whole cache
    record_digests({name: out / name for name in ("meta.json", *(f"{k}.npy" for k in ARRAYS))}, out / MANIFEST)
    log.info("%s: cached %s nodes, %s edges, features %s", name, f"{num_nodes:,}", f"{len(indices):,}", feat_shape)


def _int_labels(raw: np.ndarray) -> np.ndarray:
    """ogb's ``(num_nodes, 1)`` labels as int64 of length ``num_nodes``; NaN (unlabelled) -> -1."""
    flat = raw.reshape(len(raw), -1)
    if flat.shape[1] != 1:
        raise DatasetError(f"expected one label per node, but the labels have shape {raw.shape}")
    flat = flat[:, 0]
    if not np.issubdtype(flat.dtype, np.floating):
        return flat.astype(np.int64)
    labels = np.full(len(flat), -1, dtype=np.int64)
    known = ~np.isnan(flat)
    labels[known] = flat[known].astype(np.int64)
    return labels


def _check_split(name: str, key: str, ids: np.ndarray, labels: np.ndarray) -> None:
    if len(ids) and (ids[0] < 0 or ids[-1] >= len(labels)):
        raise DatasetError(f"{name}: the {key} split holds node ids outside 0..{len(labels) - 1}; the split files do not match the graph")
    unlabelled = int((labels[ids] < 0).sum())
    if unlabelled:
        raise DatasetError(f"{name}: the {key} split holds {unlabelled} unlabelled nodes; the split files do not match the labels")


def _save_float32(path: Path, features: np.ndarray) -> None:
    """Write ``features`` as a C-contiguous float32 ``.npy``, a slab of rows at a time, so that a
    dtype conversion never needs a second full-size array in RAM."""
    if features.ndim != 2:
        raise DatasetError(f"expected 2-D node features, but got shape {features.shape}")
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=features.shape)
    step = max(1, _CHUNK_BYTES // max(1, features.shape[1] * 4))
    for start in range(0, len(features), step):
        out[start : start + step] = features[start : start + step]
    out.flush()
    del out


# --- ogb, without network or prompts ---------------------------------------------------------


def _ogb_dataset(name: str, folder: Path, meta: dict, local: bool):
    """``DglNodePropPredDataset`` with its prompts and downloads disabled (the files were checked)."""
    import_dgl(f"{name}'s first load (ogb's DglNodePropPredDataset)")
    from ogb.nodeproppred import dataset_dgl

    processed = folder / "processed"
    if (processed / "dgl_data_processed").exists():  # ogb reads its own cache, not raw/
        where, fix = processed / "dgl_data_processed", f"delete the folder {str(processed)!r} (ogb's own cache; it is rebuilt from raw/)"
    else:
        where, fix = folder / "raw", f"fetch {meta['url']} again"
    said = io.StringIO()  # ogb prints its steps and progress bars: they go to the debug log
    with _no_prompts(dataset_dgl), contextlib.redirect_stdout(said), contextlib.redirect_stderr(said), _reading(name, where, fix):
        try:
            if local:
                dataset = dataset_dgl.DglNodePropPredDataset(name, meta_dict=meta)
            else:
                dataset = dataset_dgl.DglNodePropPredDataset(name, root=str(folder.parent))
        finally:
            for line in said.getvalue().splitlines():
                log.debug("ogb: %s", line.rsplit("\r", 1)[-1])
    return dataset


@contextlib.contextmanager
def _reading(name: str, where: Path, fix: str) -> Iterator[None]:
    """Within the block, ogb failing on a file cut short or garbled (gzip, pandas, DGL's reader)
    raises :class:`DatasetError` naming ``where`` (a file, or the folder of the files read) and ``fix``."""
    from dgl import DGLError

    try:
        yield
    except DatasetError:
        raise
    except (OSError, EOFError, ValueError, zlib.error, DGLError) as e:
        reason = (str(e).strip().splitlines() or [""])[0]  # DGL's messages carry a stack trace
        raise DatasetError(f"{name}: ogb could not read {str(where)!r} ({type(e).__name__}: {reason}); a file is damaged: {fix}") from None


@contextlib.contextmanager
def _no_prompts(dataset_dgl) -> Iterator[None]:
    """Within the block, ogb's ``input()`` and download decision raise instead of waiting on stdin.
    The files were checked beforehand, so reaching either is a bug in that check."""

    def refuse(*args, **kwargs):
        asked = " ".join(str(args[0]).split()) if args else ""
        raise DatasetError(f"ogb wanted to ask or download ({asked}); nothing is asked or downloaded here: place the dataset's files yourself")

    from ogb.utils import url

    patched = [(dataset_dgl, "input"), (dataset_dgl, "decide_download"), (url, "input")]
    saved = [(mod, attr, mod.__dict__.get(attr)) for mod, attr in patched]
    for mod, attr in patched:
        setattr(mod, attr, refuse)  # a module global shadows the builtin for that module only
    try:
        yield
    finally:
        for mod, attr, old in saved:
            if old is None:
                delattr(mod, attr)
            else:
                setattr(mod, attr, old)


def _master_column(name: str) -> dict:
    """ogb's meta information for ``name`` (its ``master.csv``), read without importing ogb."""
    spec = importlib.util.find_spec("ogb")
    if spec is None or spec.origin is None:
        raise DatasetError(f"{name} is read with the 'ogb' package (and DGL), which is not installed: {install_hint('dgl')}")
    import pandas as pd  # ogb's own requirement

    master = pd.read_csv(Path(spec.origin).parent / "nodeproppred" / "master.csv", index_col=0, keep_default_na=False)
    return dict(master[name])


def _needed_files(meta: dict) -> list[str]:
    """The files ogb reads for one dataset, relative to its folder (``raw/`` ones are not needed
    when ogb's ``processed/dgl_data_processed`` exists)."""
    if meta["binary"] == "True":
        raw = ["raw/data.npz", "raw/node-label.npz"]
    else:
        extra = [] if meta["additional node files"] == "None" else meta["additional node files"].split(",")
        raw = [f"raw/{f}.csv.gz" for f in ("edge", "node-feat", "node-label", "num-node-list", "num-edge-list", *extra)]
    return raw


def _check_files(name: str, folder: Path, meta: dict) -> None:
    """Raise DatasetError naming the URL and the layout unless ogb will find all it needs."""
    split = f"split/{meta['split']}"
    release = f"RELEASE_v{meta['version']}.txt"
    raw = _needed_files(meta)
    missing = []
    if not folder.is_dir():
        missing.append(f"the folder {str(folder)!r}")
    else:
        if not (folder / release).exists():
            missing.append(release)
        if not (folder / "processed" / "dgl_data_processed").exists():
            missing += [f for f in raw if not (folder / f).exists()]
        if not (folder / split / "split_dict.pt").exists():
            missing += [f"{split}/{s}.csv.gz" for s in ("train", "valid", "test") if not (folder / split / f"{s}.csv.gz").exists()]
    if not missing:
        return
    layout = f"{folder.name}/{{{release}, {', '.join(raw)}, {split}/{{train,valid,test}}.csv.gz}}"
    raise DatasetError(
        f"{name} is not in {str(folder.parent)!r} (missing {', '.join(missing)}); nothing is downloaded here: "
        f"fetch {meta['url']}, unzip it in {str(folder.parent)!r} and rename {meta['download_name']}/ to {folder.name}/, "
        f"giving the layout {layout}"
    )
