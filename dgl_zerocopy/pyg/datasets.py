"""Our datasets (:mod:`dgl_zerocopy.data`) as PyG's ``Data``: what a PyG script's ``dataset[0]`` would be.

``to_pyg(load_dataset("cora", root=...))`` gives ``Data(x, y, edge_index, train_mask, val_mask, test_mask)``
with the same graph, features, labels and split as the DGL route trains on, without a download. ``x``
and ``y`` are views of the dataset's host arrays (no copy; a memory-mapped table stays mapped), so a
loader's store pins or maps the same memory.

:func:`place_planetoid_raw` puts the raw Planetoid files where PyG's own ``Planetoid`` dataset reads them,
so that a PyG script's ``Planetoid(root, "Cora")`` runs without a download.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Data

from ..data import FeatureFile, GraphDataset, HeteroGraphDataset
from ..data.base import tensor_view


def to_pyg(dataset: GraphDataset, masks: bool = True) -> Data:
    """``dataset`` as a PyG ``Data``: ``x`` (the feature table, viewed), ``y`` (the labels, viewed),
    ``edge_index`` (the CSC's in-edges: sources in row 0, destinations in row 1, grouped by destination)
    and, with ``masks``, ``train_mask``/``val_mask``/``test_mask`` of the dataset's split; ``num_nodes``
    is set explicitly.

    Args:
        dataset: A homogeneous dataset from :func:`dgl_zerocopy.data.load_dataset`, its features in memory.
        masks: Add the split's boolean masks.

    Returns:
        The ``Data``, on the CPU (``edge_index`` ``int64``).

    Raises:
        TypeError: for a heterograph or anything but a ``GraphDataset``.
        ValueError: for a dataset whose features were left on storage (pass the file as ``features=``).
    """
    if isinstance(dataset, HeteroGraphDataset):
        raise TypeError(f"to_pyg converts homogeneous datasets, but {dataset.name!r} is a heterograph (a HeteroGraphDataset)")
    if not isinstance(dataset, GraphDataset):
        raise TypeError(f"to_pyg takes a GraphDataset (dgl_zerocopy.data.load_dataset), but got {type(dataset).__name__}")
    if isinstance(dataset.features, FeatureFile):
        raise ValueError(
            f"{dataset.name!r} has its features left on storage ({str(dataset.features.path)!r}); load it without features_on_storage, "
            f"or pass the file to the loader as features={{'x': dgl_zerocopy.FeatureStore(path, storage=dgl_zerocopy.store.StorageTier(...))}}"
        )
    n = dataset.num_nodes
    dst = torch.repeat_interleave(torch.arange(n, dtype=torch.int64), tensor_view(np.diff(dataset.indptr)))
    edge_index = torch.stack([tensor_view(np.asarray(dataset.indices, dtype=np.int64)), dst])
    data = Data(x=tensor_view(np.ascontiguousarray(dataset.features)), y=tensor_view(dataset.labels), edge_index=edge_index, num_nodes=n)
    if masks:
        for name in ("train", "val", "test"):
            mask = torch.zeros(n, dtype=torch.bool)
            mask[tensor_view(getattr(dataset, f"{name}_idx"))] = True
            data[f"{name}_mask"] = mask
    return data


def place_planetoid_raw(source: str | os.PathLike, root: str | os.PathLike, name: str = "Cora") -> Path:
    """Link the raw Planetoid files ``source/ind.<name>.*`` into ``root/<name>/raw``, where PyG's
    ``Planetoid(root, name)`` reads them before it would download (files already there are kept).

    Returns:
        The raw folder.

    Raises:
        FileNotFoundError: ``source`` holds no ``ind.<name>.*`` file.
    """
    files = sorted(Path(source).glob(f"ind.{name.lower()}.*"))
    if not files:
        raise FileNotFoundError(f"no raw Planetoid file ind.{name.lower()}.* in {str(source)!r}; pass the folder that holds them")
    raw = Path(root) / name / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for file in files:
        if not (raw / file.name).exists():
            (raw / file.name).symlink_to(file.resolve())
    return raw
