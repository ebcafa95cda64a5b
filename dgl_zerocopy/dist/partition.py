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
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .._extras import import_dgl
from ..data import DatasetError, GraphDataset

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


def partition_dataset(
    dataset: GraphDataset, num_parts: int, out: str | Path, *, graph_name: str | None = None, method: str = "metis", overwrite: bool = False
) -> PartitionInfo:
    """Partition ``dataset`` into ``num_parts`` parts under ``out`` with DGL's ``partition_graph``
    (one halo hop, ``method`` ``"metis"`` or ``"random"``) and return what was written.

    ``out`` must be empty or absent; a folder written by this function earlier is replaced only
    with ``overwrite=True``. ``graph_name`` defaults to the dataset's name (DistDGL finds the
    partitions' shared memory by it). A folder that cannot be made or written raises
    ``ValueError`` naming it; the folders this call created are removed again when writing fails."""
    dgl = import_dgl("dgl_zerocopy.dist.partition_dataset (DGL's partition_graph)")

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
    check_out(out, overwrite)
    created = _make_out(out)

    graph = dataset.to_dgl(with_data=False)
    n = dataset.num_nodes
    graph.ndata["feat"] = torch.from_numpy(np.ascontiguousarray(dataset.features, dtype=np.float32))
    graph.ndata["label"] = torch.from_numpy(np.ascontiguousarray(dataset.labels, dtype=np.int64))
    for mask, idx in zip(MASKS, (dataset.train_idx, dataset.val_idx, dataset.test_idx)):
        m = torch.zeros(n, dtype=torch.uint8)
        m[torch.from_numpy(np.asarray(idx, dtype=np.int64))] = 1
        graph.ndata[mask] = m
    log.info("partitioning %s (%d nodes) into %d parts with %s under %s", dataset.name, n, num_parts, method, out)
    info = PartitionInfo(out.resolve(), graph_name, dataset.name, num_parts, n, dataset.num_classes, int(dataset.features.shape[1]), method)
    meta = {
        "graph_name": graph_name,
        "dataset": dataset.name,
        "num_parts": num_parts,
        "num_nodes": n,
        "num_classes": dataset.num_classes,
        "feat_dim": info.feat_dim,
        "method": method,
    }
    try:
        orig_nids, _ = dgl.distributed.partition_graph(graph, graph_name, num_parts, str(out), num_hops=1, part_method=method, return_mapping=True)
        np.save(out / ORIG_NIDS_FILE, orig_nids.numpy().astype(np.int64))
        (out / INFO_FILE).write_text(json.dumps(meta, indent=1))  # written last: marks whole partitions
    except OSError as e:
        if created is not None:  # nothing half-written is left where the user asked for partitions
            shutil.rmtree(created, ignore_errors=True)
        raise ValueError(f"writing the partitions to {str(out)!r} failed ({_reason(e)}); free space there or pass another --out folder") from None
    return info


def load_partition_info(folder: str | Path) -> PartitionInfo:
    """The :class:`PartitionInfo` of a folder written by :func:`partition_dataset`.

    A folder without one raises ``FileNotFoundError`` naming the command that makes it; a damaged
    one (our ``dgl_zerocopy.json`` or DGL's config not JSON, missing keys, values that disagree, a
    partition file gone) raises :class:`~dgl_zerocopy.data.DatasetError` naming the file and the fix."""
    folder = Path(folder)
    path = folder / INFO_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{str(folder)!r} holds no partitions made by dgl-zerocopy (no {INFO_FILE}); make them with "
            f"`dgl-zerocopy partition --dataset NAME --parts K --out {folder}`"
        )
    fix = f"partition again with `dgl-zerocopy partition ... --out {folder} --overwrite`"
    meta = _read_json(path, fix)
    try:
        info = PartitionInfo(
            folder.resolve(),
            str(meta["graph_name"]),
            str(meta["dataset"]),
            int(meta["num_parts"]),
            int(meta["num_nodes"]),
            int(meta["num_classes"]),
            int(meta["feat_dim"]),
            str(meta["method"]),
        )
    except KeyError as e:
        raise DatasetError(f"{str(path)!r} lacks the key {e.args[0]!r}; {fix}") from None
    except (TypeError, ValueError) as e:
        raise DatasetError(f"{str(path)!r} holds a value of the wrong type ({e}); {fix}") from None
    if info.num_parts < 1:
        raise DatasetError(f"{str(path)!r} says num_parts {info.num_parts}; {fix}")
    if not info.part_config.is_file():
        raise FileNotFoundError(f"DGL's partition config {str(info.part_config)!r} is missing; partition again into {str(folder)!r}")
    _check_dgl_config(info, fix)
    return info


def check_out(out: str | Path, overwrite: bool) -> None:
    """Refuse, with a ``ValueError`` naming the folder and the fix, an ``out`` that cannot take
    partitions: a file, a non-empty folder of something else, earlier partitions without
    ``overwrite``, or a path under a file. Creates nothing (the caller may check before loading)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out {str(out)!r} is a file; pass a folder for the partitions")
    if out.is_dir() and any(out.iterdir()):
        if not (out / INFO_FILE).is_file():
            raise ValueError(f"out {str(out)!r} is not empty and holds no earlier partitions; pass an empty or new folder")
        if not overwrite:
            raise ValueError(f"out {str(out)!r} already holds partitions; pass overwrite=True (--overwrite) to replace them")
    parent = out.absolute()
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(f"out {str(out)!r} lies under the file {str(parent)!r}; pass a folder path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"out {str(out)!r} cannot be written: {str(parent)!r} is not writable by you; pass a folder you can write to")


def _make_out(out: Path) -> Path | None:
    """Create ``out`` (and its parents) and check that a file can be written in it; the topmost
    folder this call created (removed again if anything fails), or None when ``out`` existed."""
    top = out.absolute()
    while not top.parent.exists():
        top = top.parent
    top = None if out.exists() else top
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=out, prefix=".write-test.")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        if top is not None:
            shutil.rmtree(top, ignore_errors=True)
        raise ValueError(f"out {str(out)!r} cannot be written ({_reason(e)}); pass a folder you can write to") from None
    return top


def _reason(e: OSError) -> str:
    return e.strerror or str(e)


def _read_json(path: Path, fix: str) -> dict:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise DatasetError(f"{str(path)!r} is damaged (not readable JSON: {e}); {fix}") from None
    if not isinstance(data, dict):
        raise DatasetError(f"{str(path)!r} is damaged (a JSON {type(data).__name__}, not an object); {fix}")
    return data


def _check_dgl_config(info: PartitionInfo, fix: str) -> None:
    """What DistDGL reads of its config before it touches a partition: its keys, the part count
    and graph name that ours records, and each part's files."""
    path = info.part_config
    config = _read_json(path, fix)
    missing = [k for k in ("graph_name", "num_nodes", "num_edges", "num_parts", "node_map", "edge_map") if k not in config]
    missing += [f"part-{i}" for i in range(info.num_parts) if not isinstance(config.get(f"part-{i}"), dict)]
    if missing:
        raise DatasetError(f"DGL's partition config {str(path)!r} lacks {', '.join(missing)}; {fix}")
    if config["graph_name"] != info.graph_name or config["num_parts"] != info.num_parts:
        raise DatasetError(
            f"DGL's partition config {str(path)!r} is for graph {config['graph_name']!r} in {config['num_parts']} parts, but "
            f"{INFO_FILE} says {info.graph_name!r} in {info.num_parts}; {fix}"
        )
    for i in range(info.num_parts):
        files = config[f"part-{i}"]
        for key in ("node_feats", "edge_feats", "part_graph"):
            name = files.get(key)
            if not isinstance(name, str) or not (path.parent / name).is_file():
                raise DatasetError(f"part {i} of {str(path)!r}: its {key} file {name!r} is missing; {fix}")
