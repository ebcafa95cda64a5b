"""Datasets by name, each loaded into a :class:`GraphDataset` (or, for the heterographs of
:data:`HETERO_DATASETS`, a :class:`~dgl_zerocopy.data.hetero.HeteroGraphDataset`); the generated
homogeneous one cached on disk."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np

from ..store.cache_files import MANIFEST, DamagedFile, check_digests, partial_prefix, record_digests, sweep_partials
from ..store.host_memory import load_npy
from . import feature_file
from .base import ARRAYS, DatasetError, GraphDataset, load_arrays
from .feature_file import FeatureFile
from .hetero import HeteroGraphDataset, HeteroSpec, generate_hetero
from .synthetic import SyntheticSpec, generate

__all__ = [
    "GraphDataset",
    "FeatureFile",
    "HeteroGraphDataset",
    "DatasetError",
    "SyntheticSpec",
    "HeteroSpec",
    "DATASETS",
    "REAL_DATASETS",
    "HETERO_DATASETS",
    "cache_dir",
    "load_dataset",
]

log = logging.getLogger(__name__)

PLANETOID = ("cora", "citeseer")
GRAPHDATA = ("amazon-computers", "amazon-photo", "coauthor-cs", "coauthor-physics")
OGB = ("ogbn-products", "ogbn-arxiv", "ogbn-papers100M")
REAL_DATASETS = PLANETOID + GRAPHDATA + OGB  # read from a --data-root folder, never downloaded
# Heterographs (several node and edge types), loaded as HeteroGraphDataset and trained by RGCN:
# hetero-synthetic is data/hetero.py's papers, authors and fields, generated in memory (well under
# a second at the default 20,000 papers), so not cached.
HETERO_DATASETS = ("hetero-synthetic",)
DATASETS = ("synthetic",) + HETERO_DATASETS + REAL_DATASETS
CACHE_ENV = "DGL_ZEROCOPY_CACHE"  # the folder of generated datasets (and of the CPU emulator's build)


def cache_dir() -> Path:
    """Where generated datasets are kept: ``$DGL_ZEROCOPY_CACHE``, else ``~/.cache/dgl_zerocopy``
    (an empty variable counts as unset)."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "dgl_zerocopy")


def load_dataset(
    name: str,
    synthetic: SyntheticSpec | None = None,
    cache: Path | None = None,
    root: str | Path | None = None,
    split_seed: int = 0,
    hetero: HeteroSpec | None = None,
    features_on_storage: bool = False,
) -> GraphDataset | HeteroGraphDataset:
    """Load dataset ``name``: a :class:`GraphDataset`, or a :class:`HeteroGraphDataset` for a name of
    :data:`HETERO_DATASETS` (``hetero`` sizes it, :meth:`HeteroSpec.scaled` from a paper count).

    ``synthetic`` sizes the generated graph and ``cache`` overrides :func:`cache_dir` for it. The
    real datasets are read from ``root`` (``--data-root``); ``split_seed`` draws the random
    20/30-per-class split of the GraphData graphs. Missing or unreadable files, and a cache folder
    that is a file, raise :class:`DatasetError` naming the file and the fix; a damaged cache of
    the generated dataset is regenerated with a warning.

    ``features_on_storage=True``: the features are left in a file, ``features`` a
    :class:`~dgl_zerocopy.data.feature_file.FeatureFile` (the training sources serve it through a
    storage-backed FeatureStore): the OGB datasets' cached ``features.npy``, never mapped; the
    generated one's cached ``features.npy``; the others' written once to ``<cache>/features/`` (``cache``, else :func:`cache_dir`) and reused.
    Homogeneous datasets only.
    """
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose from: {', '.join(DATASETS)}")
    if features_on_storage:
        if name in HETERO_DATASETS:
            raise DatasetError(f"features_on_storage leaves one table in a file, and {name!r} is a heterograph with a table per node type")
        if name in OGB and root is not None:
            from .ogb import load_ogb

            return load_ogb(name, root, features_on_storage=True)
        dataset = load_dataset(name, synthetic, cache, root, split_seed)
        folder = Path(cache) if cache is not None else cache_dir()
        if name == "synthetic" and (folder / (synthetic or SyntheticSpec()).cache_name() / "features.npy").is_file():
            return feature_file.attach_feature_file(dataset, folder / (synthetic or SyntheticSpec()).cache_name() / "features.npy")  # its own cache
        return feature_file.features_on_storage(dataset, folder / "features")
    if name == "hetero-synthetic":
        return generate_hetero(hetero or HeteroSpec())
    if name == "synthetic":
        return _load_synthetic(
            synthetic or SyntheticSpec(), Path(cache) if cache is not None else cache_dir(), cache is None and bool(os.environ.get(CACHE_ENV))
        )
    if root is None:
        raise DatasetError(
            f"dataset {name!r} is read from a folder: pass --data-root DIR (data_root in a config), the folder holding planetoid/, graphdata/ or ogbn_*/"
        )
    root = Path(root)
    if name in PLANETOID:
        from .planetoid import load_planetoid

        return load_planetoid(name, root)
    if name in GRAPHDATA:
        from .graphdata import load_graphdata

        return load_graphdata(name, root, split_seed=split_seed)
    from .ogb import load_ogb

    return load_ogb(name, root)


def _load_synthetic(spec: SyntheticSpec, root: Path, from_env: bool) -> GraphDataset:
    """The generated dataset of ``spec``, from its cache folder under ``root`` when there is a
    whole one; a damaged cache (a file whose bytes are not those written: its digest, recorded at
    write time, differs; an unreadable file, arrays of the wrong shape) is regenerated with a
    warning naming the file. Partial folders of writers that died are removed first."""
    _check_cache_root(root, from_env)
    sweep_partials(root)
    folder = root / spec.cache_name()
    if (folder / "num_classes.txt").exists():
        try:
            return _read_synthetic(folder, spec)
        except DamagedFile as e:
            warnings.warn(f"the dataset cache file {str(e.path)!r} is damaged ({e.reason}); regenerating its folder", stacklevel=3)
            try:
                _move_aside(folder)
            except OSError as err:
                raise DatasetError(
                    f"the dataset cache file {str(e.path)!r} is damaged ({e.reason}) and could not be moved aside ({err.strerror or err}); "
                    f"delete the folder {str(folder)!r} and run again"
                ) from None
    log.info("generating %s", folder.name)
    data = generate(spec)
    try:
        _save(data, folder)
    except OSError as e:
        raise DatasetError(f"cannot write the dataset cache in {str(folder)!r} ({e.strerror or e}); {_cache_fix(from_env)}") from None
    return data


def _read_synthetic(folder: Path, spec: SyntheticSpec) -> GraphDataset:
    """The cached arrays of ``spec``, each checked against the digest recorded when it was written
    and the shape ``spec`` gives it; raises :class:`DamagedFile` naming the file."""
    check_digests(folder)
    path = folder / "num_classes.txt"
    try:
        num_classes = int(path.read_text())
    except (OSError, ValueError) as e:
        raise DamagedFile(path, str(e)) from None
    if num_classes != spec.num_classes:
        raise DamagedFile(path, f"says {num_classes} classes, the spec {spec.num_classes}")
    n = spec.num_nodes
    arrays = load_arrays(
        folder,
        lambda path: load_npy(path) if path.stem == "features" else np.load(path),  # the table in 2 MB pages by default
        lambda arrays: {"indptr": (n + 1,), "features": (n, spec.feat_dim), "labels": (n,), "indices": (int(arrays["indptr"][-1]),)},
        "expected",
    )
    return GraphDataset(name="synthetic", num_classes=num_classes, **arrays)


def _check_cache_root(root: Path, from_env: bool) -> None:
    """Make the cache root (before any generating), refusing one that is a file, lies under one or
    cannot be made, with a :class:`DatasetError` naming where it came from and the fix."""
    where = f"{CACHE_ENV}={str(root)!r}" if from_env else f"the dataset cache {str(root)!r}"
    path = root.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    if path.exists() and not path.is_dir():
        what = "is a file, not a folder" if path == root.absolute() else f"lies under the file {str(path)!r}"
        raise DatasetError(f"{where} {what}; {_cache_fix(from_env)}")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DatasetError(f"{where} cannot be made ({e.strerror or e}); {_cache_fix(from_env)}") from None


def _cache_fix(from_env: bool) -> str:
    if from_env:
        return f"set {CACHE_ENV} to a folder you can write to (it is created if missing), or unset it to use ~/.cache/dgl_zerocopy"
    return "pass a folder you can write to"


def _move_aside(folder: Path) -> None:
    """Take a damaged cache folder out of the way (renamed, then removed), so the regenerated one
    can take its place; another process may have done it already."""
    aside = Path(tempfile.mkdtemp(prefix=partial_prefix(folder.name), dir=folder.parent))
    try:
        os.replace(folder, aside / folder.name)
    except FileNotFoundError:
        pass
    shutil.rmtree(aside, ignore_errors=True)


def _save(data: GraphDataset, folder: Path) -> None:
    """Write every array and their digests into a partial folder, then rename it into place: a
    reader never sees half a dataset."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=partial_prefix(folder.name), dir=folder.parent))
    try:
        names = [f"{k}.npy" for k in ARRAYS] + ["num_classes.txt"]
        for k in ARRAYS:
            np.save(tmp / f"{k}.npy", getattr(data, k))
        (tmp / "num_classes.txt").write_text(str(data.num_classes))
        record_digests({name: tmp / name for name in names}, tmp / MANIFEST)
        os.replace(tmp, folder)
    except BaseException as error:
        shutil.rmtree(tmp, ignore_errors=True)
        if not isinstance(error, OSError) or not (folder / "num_classes.txt").exists():  # a concurrent writer may have won the race
            raise
