"""Datasets by name, each loaded into a :class:`GraphDataset`; generated ones cached on disk."""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from .base import GraphDataset
from .synthetic import SyntheticSpec, generate

__all__ = ["GraphDataset", "SyntheticSpec", "DATASETS", "cache_dir", "load_dataset"]

log = logging.getLogger(__name__)

DATASETS = ("synthetic",)
_ARRAYS = ("indptr", "indices", "features", "labels", "train_idx", "val_idx", "test_idx")


def cache_dir() -> Path:
    """Where generated datasets are kept: ``$DGL_ZEROCOPY_CACHE``, else ``~/.cache/dgl_zerocopy``."""
    return Path(os.environ.get("DGL_ZEROCOPY_CACHE", Path.home() / ".cache" / "dgl_zerocopy"))


def load_dataset(name: str, synthetic: SyntheticSpec | None = None, cache: Path | None = None) -> GraphDataset:
    """Load dataset ``name``. ``synthetic`` sizes the generated graph; ``cache`` overrides :func:`cache_dir`."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose from: {', '.join(DATASETS)}")
    return _load_synthetic(synthetic or SyntheticSpec(), cache or cache_dir())


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
