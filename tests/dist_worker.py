"""A trainer (or, with DGL_ROLE=server, a server) of the 2-partition tests in test_dist_cluster.py.

``python dist_worker.py fetch PARTS ORIGINALS RESULTS``: fetch every node's row through
DistFeatureSource and one epoch of DistLoader batches, compare each row with the original dataset's
(``ORIGINALS``/features.npy, labels.npy, through the partition's orig_nids), write
``RESULTS/trainer<machine>.json``.
``python dist_worker.py loop PARTS ORIGINALS RESULTS``: write ``RESULTS/ready<machine>`` and iterate
DistLoader epochs until a server is lost (then exit through the watchdog's error).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

import dgl_zerocopy  # noqa: F401 - DGL's import hook
from dgl_zerocopy.dist import DistFeatureSource, DistLoader, ServerLostError, connect, exit_now, installed


def main(mode: str, parts: str, originals: str, results: str) -> None:
    graph, info = connect(parts)  # a server serves here and exits
    machine = installed().get("machine_id", 0)
    orig = torch.from_numpy(info.orig_nids())
    features = torch.from_numpy(np.load(Path(originals) / "features.npy"))
    labels = torch.from_numpy(np.load(Path(originals) / "labels.npy"))
    feat, label = DistFeatureSource(graph.ndata["feat"], device="cpu"), DistFeatureSource(graph.ndata["label"], device="cpu")
    nodes = torch.arange(graph.num_nodes())
    owned = dgl_nodes_of(graph, feat.part_id)
    loader = DistLoader(graph, owned, [5, 5], features={"feat": feat}, labels={"label": label}, batch_size=200, prefetch=2)
    if mode == "loop":
        (Path(results) / f"ready{machine}").write_text("ready")
        try:
            while True:
                for _ in loader:
                    pass
        except ServerLostError as error:
            exit_now(error)
    ids = nodes[torch.randperm(len(nodes), generator=torch.Generator().manual_seed(machine))]
    rows = feat.fetch(ids)
    counts = feat.reset_counts()
    result = {"machine": machine, "part_id": feat.part_id, "local_rows": feat.num_local_rows, "all_local": counts.local,
              "all_remote": counts.remote, "rows_equal": bool(torch.equal(rows, features[orig[ids]])),
              "labels_equal": bool(torch.equal(label.fetch(ids), labels[orig[ids]])),
              "owned": len(owned), "loader_equal": True, "batches": 0, "loader_local": 0, "loader_remote": 0, "counted": 0}
    for input_nodes, seeds, blocks in loader:
        result["batches"] += 1
        result["counted"] += len(input_nodes)
        result["loader_equal"] &= bool(torch.equal(blocks[0].srcdata["feat"], features[orig[input_nodes]]))
        result["loader_equal"] &= bool(torch.equal(blocks[-1].dstdata["label"], labels[orig[seeds]]))
        local = int((graph.get_partition_book().nid2partid(input_nodes) == feat.part_id).sum())
        result["loader_local"] += local
        result["loader_remote"] += len(input_nodes) - local
    result["stats_local"] = sum(s.local_rows for s in loader.stats)
    result["stats_remote"] = sum(s.remote_rows for s in loader.stats)
    (Path(results) / f"trainer{machine}.json").write_text(json.dumps(result))


def dgl_nodes_of(graph, part_id: int) -> torch.Tensor:
    """The ids owned by partition ``part_id`` (a contiguous range after DGL's relabelling)."""
    book = graph.get_partition_book()
    nodes = torch.arange(graph.num_nodes())
    return nodes[book.nid2partid(nodes) == part_id]


if __name__ == "__main__":
    main(*sys.argv[1:5])
