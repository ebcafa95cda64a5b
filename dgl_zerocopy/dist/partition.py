"""Partition a dataset for DistDGL with DGL's own ``partition_graph``, and read the result back.

The output folder holds what DGL writes (``<graph_name>.json`` and ``part<i>/``), with node data
``feat``, ``label`` and the masks ``train_mask``/``val_mask``/``test_mask`` (uint8), plus two files
of ours: ``dgl_zerocopy.json`` (dataset name, classes, feature width, part count, DGL's config
file name) and ``orig_nids.npy``. ``partition_graph`` relabels the nodes so that each partition
owns a contiguous id range: ``orig_nids[new_id]`` is the node's id in the original dataset, so
``features[orig_nids[i]]`` is the row that DistDGL serves for node ``i``.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..data import GraphDataset

log = logging.getLogger(__name__)

METHODS = ("metis", "random")
INFO_FILE = "dgl_zerocopy.json"
ORIG_NIDS_FILE = "orig_nids.npy"
MASKS = ("train_mask", "val_mask", "test_mask")


@dataclass(frozen=True)
class PartitionInfo:
    """What :func:`partition_dataset` wrote to ``folder`` (read back by :func:`load_partition_info`)."""

    folder: Path
    graph_name: str
    dataset: str
    num_parts: int
    num_nodes: int
    num_classes: int
    feat_dim: int
    method: str

    @property
    def part_config(self) -> Path:
        """DGL's partition config file (``DistGraph(part_config=...)``, ``DGL_CONF_PATH``)."""
        return self.folder / f"{self.graph_name}.json"

    def orig_nids(self) -> np.ndarray:
        """``orig_nids[new_id]``: the original dataset id of DistDGL's node ``new_id`` (int64)."""
        return np.load(self.folder / ORIG_NIDS_FILE)


def partition_dataset(dataset: GraphDataset, num_parts: int, out: str | Path, *, graph_name: str | None = None,
                      method: str = "metis", overwrite: bool = False) -> PartitionInfo:
    """Partition ``dataset`` into ``num_parts`` parts under ``out`` with DGL's ``partition_graph``
    (one halo hop, ``method`` ``"metis"`` or ``"random"``) and return what was written.

    ``out`` must be empty or absent; a folder written by this function earlier is replaced only
    with ``overwrite=True``. ``graph_name`` defaults to the dataset's name (DistDGL finds the
    partitions' shared memory by it)."""
    import dgl

    if not isinstance(num_parts, int) or num_parts < 1:
        raise ValueError(f"num_parts must be a positive integer, but got {num_parts!r}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, but got {method!r}")
    if num_parts > dataset.num_nodes:
        raise ValueError(f"num_parts {num_parts} exceeds the {dataset.num_nodes} nodes of {dataset.name!r}; use fewer parts")
    graph_name = graph_name or dataset.name.replace("-", "_")
    if not graph_name.isidentifier():
        raise ValueError(f"graph_name must be letters, digits and underscores (it names shared memory), but got {graph_name!r}")
    out = Path(out)
    _check_out(out, overwrite)

    graph = dataset.to_dgl(with_data=False)
    n = dataset.num_nodes
    graph.ndata["feat"] = torch.from_numpy(np.ascontiguousarray(dataset.features, dtype=np.float32))
    graph.ndata["label"] = torch.from_numpy(np.ascontiguousarray(dataset.labels, dtype=np.int64))
    for mask, idx in zip(MASKS, (dataset.train_idx, dataset.val_idx, dataset.test_idx)):
        m = torch.zeros(n, dtype=torch.uint8)
        m[torch.from_numpy(np.asarray(idx, dtype=np.int64))] = 1
        graph.ndata[mask] = m
    log.info("partitioning %s (%d nodes) into %d parts with %s under %s", dataset.name, n, num_parts, method, out)
    orig_nids, _ = dgl.distributed.partition_graph(graph, graph_name, num_parts, str(out), num_hops=1, part_method=method,
                                                   return_mapping=True)
    np.save(out / ORIG_NIDS_FILE, orig_nids.numpy().astype(np.int64))
    info = PartitionInfo(out.resolve(), graph_name, dataset.name, num_parts, n, dataset.num_classes,
                         int(dataset.features.shape[1]), method)
    (out / INFO_FILE).write_text(json.dumps({
        "graph_name": graph_name, "dataset": dataset.name, "num_parts": num_parts, "num_nodes": n,
        "num_classes": dataset.num_classes, "feat_dim": info.feat_dim, "method": method}, indent=1))
    return info


def load_partition_info(folder: str | Path) -> PartitionInfo:
    """The :class:`PartitionInfo` of a folder written by :func:`partition_dataset`; a folder
    without one raises ``FileNotFoundError`` naming the command that makes it."""
    folder = Path(folder)
    path = folder / INFO_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{str(folder)!r} holds no partitions made by dgl-zerocopy (no {INFO_FILE}); make them with "
                                f"`dgl-zerocopy partition --dataset NAME --parts K --out {folder}`")
    meta = json.loads(path.read_text())
    info = PartitionInfo(folder.resolve(), meta["graph_name"], meta["dataset"], int(meta["num_parts"]), int(meta["num_nodes"]),
                         int(meta["num_classes"]), int(meta["feat_dim"]), meta["method"])
    if not info.part_config.is_file():
        raise FileNotFoundError(f"DGL's partition config {str(info.part_config)!r} is missing; partition again into {str(folder)!r}")
    return info


def _check_out(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise ValueError(f"out {str(out)!r} is a file; pass a folder for the partitions")
    if out.is_dir() and any(out.iterdir()):
        if not (out / INFO_FILE).is_file():
            raise ValueError(f"out {str(out)!r} is not empty and holds no earlier partitions; pass an empty or new folder")
        if not overwrite:
            raise ValueError(f"out {str(out)!r} already holds partitions; pass overwrite=True (--overwrite) to replace them")
    out.mkdir(parents=True, exist_ok=True)
