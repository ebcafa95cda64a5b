"""Datasets by name, each loaded into a :class:`GraphDataset`; generated ones cached on disk."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from .base import DatasetError, GraphDataset
from .synthetic import SyntheticSpec, generate

__all__ = ["GraphDataset", "DatasetError", "SyntheticSpec", "DATASETS", "REAL_DATASETS", "cache_dir", "load_dataset"]

log = logging.getLogger(__name__)

PLANETOID = ("cora", "citeseer")
GRAPHDATA = ("amazon-computers", "amazon-photo", "coauthor-cs", "coauthor-physics")
OGB = ("ogbn-products", "ogbn-arxiv", "ogbn-papers100M")
REAL_DATASETS = PLANETOID + GRAPHDATA + OGB  # read from a --data-root folder, never downloaded
DATASETS = ("synthetic",) + REAL_DATASETS
_ARRAYS = ("indptr", "indices", "features", "labels", "train_idx", "val_idx", "test_idx")


def cache_dir() -> Path:
    """Where generated datasets are kept: ``$DGL_ZEROCOPY_CACHE``, else ``~/.cache/dgl_zerocopy``."""
    return Path(os.environ.get("DGL_ZEROCOPY_CACHE", Path.home() / ".cache" / "dgl_zerocopy"))


def load_dataset(
    name: str, synthetic: SyntheticSpec | None = None, cache: Path | None = None, root: str | Path | None = None, split_seed: int = 0
) -> GraphDataset:
    """Load dataset ``name``.

    ``synthetic`` sizes the generated graph and ``cache`` overrides :func:`cache_dir` for it. The
    real datasets are read from ``root`` (``--data-root``); ``split_seed`` draws the random
    20/30-per-class split of the GraphData graphs. Missing files raise :class:`DatasetError`.
    """
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose from: {', '.join(DATASETS)}")
    if name == "synthetic":
        return _load_synthetic(synthetic or SyntheticSpec(), cache or cache_dir())
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


def _load_synthetic(spec: SyntheticSpec, root: Path) -> GraphDataset:
    folder = root / spec.cache_name()
    if not (folder / "num_classes.txt").exists():
        log.info("generating %s", folder.name)
        data = generate(spec)
        _save(data, folder)
        return data
    arrays = {k: np.load(folder / f"{k}.npy") for k in _ARRAYS}
    return GraphDataset(name="synthetic", num_classes=int((folder / "num_classes.txt").read_text()), **arrays)


def _save(data: GraphDataset, folder: Path) -> None:
    """Write every array, then rename the folder into place: a reader never sees half a dataset."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    try:
        for k in _ARRAYS:
            np.save(tmp / f"{k}.npy", getattr(data, k))
        (tmp / "num_classes.txt").write_text(str(data.num_classes))
        os.replace(tmp, folder)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not (folder / "num_classes.txt").exists():  # a concurrent writer may have won the race
            raise
