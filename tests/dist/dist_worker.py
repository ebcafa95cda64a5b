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
import threading
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
    result = {
        "machine": machine,
        "part_id": feat.part_id,
        "local_rows": feat.num_local_rows,
        "all_local": counts.local,
        "all_remote": counts.remote,
        "rows_equal": bool(torch.equal(rows, features[orig[ids]])),
        "labels_equal": bool(torch.equal(label.fetch(ids), labels[orig[ids]])),
        "owned": len(owned),
        "loader_equal": True,
        "batches": 0,
        "loader_local": 0,
        "loader_remote": 0,
        "counted": 0,
    }
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
    result.update(mixes(feat, label, graph, features[orig], labels[orig]))
    result["omp_threads"] = torch.get_num_threads()
    (Path(results) / f"trainer{machine}.json").write_text(json.dumps(result))


def mixes(feat: DistFeatureSource, label: DistFeatureSource, graph, features: torch.Tensor, labels: torch.Tensor) -> dict:
    """Fetches of every local/remote mix, into ``out=`` too, a failed local gather, a failed pull
    (``features``/``labels``: the originals in DGL's id order). Returns name -> bool."""
    own = dgl_nodes_of(graph, feat.part_id)
    other = dgl_nodes_of(graph, 1 - feat.part_id)
    g = torch.Generator().manual_seed(feat.part_id)
    cases = {
        "all_remote": other[torch.randperm(len(other), generator=g)[:300]],
        "one_local": torch.cat([other[:50], own[7:8], other[50:90]]),
        "one_remote": torch.cat([own[:50], other[3:4], own[50:90]]),
        "duplicates": torch.cat([own[:5], other[:5], own[:5], other[:5]]).int(),
        "empty": torch.empty(0, dtype=torch.int64),
    }
    out = {}
    for name, ids in cases.items():
        rows, labs = feat.fetch(ids), label.fetch(ids)
        into = torch.full((len(ids), features.shape[1]), float("nan"))
        same = feat.fetch(ids, out=into) is into
        out[f"{name}_equal"] = bool(torch.equal(rows, features[ids.long()]) and torch.equal(labs, labels[ids.long()]) and same and torch.equal(into, rows))
    # A local gather or a pull that fails raises, after the pull has come back: the next fetch's
    # reply is its own (a pull left in flight would hand it the previous reply, or hang).
    mixed = torch.cat([own[:100], other[:100]])

    def failing_gather(*args, **kwargs):
        raise RuntimeError("injected local gather failure")

    out["failure_raised"] = fetch_raises(feat, feat.store, "gather", failing_gather, RuntimeError, mixed)
    out["after_failure_equal"] = bool(torch.equal(feat.fetch(mixed.flip(0)), features[mixed.flip(0)]))
    out["pull_failure_raised"] = fetch_raises(feat, feat, "tensor", FailingPull(feat.tensor), ConnectionError, mixed)
    out["after_pull_failure_equal"] = bool(torch.equal(feat.fetch(mixed), features[mixed]))
    out["pull_threads_left"] = sum(t.name.startswith("dgl-zerocopy-dist-pull") for t in threading.enumerate())
    feat.close()
    label.close()
    return out


def fetch_raises(feat: DistFeatureSource, owner, attr: str, replacement, error: type, ids: torch.Tensor) -> bool:
    """Whether ``feat.fetch(ids)`` raises the injected ``error`` while ``owner.attr`` is ``replacement``."""
    original = getattr(owner, attr)
    setattr(owner, attr, replacement)
    try:
        feat.fetch(ids)
        return False
    except error as raised:
        return "injected" in str(raised)
    finally:
        setattr(owner, attr, original)


class FailingPull:
    """A DistTensor whose pulls fail (its shape and name are the real one's)."""

    def __init__(self, tensor) -> None:
        self.shape, self.name = tensor.shape, tensor.name

    def __getitem__(self, ids):
        raise ConnectionError("injected pull failure")


def dgl_nodes_of(graph, part_id: int) -> torch.Tensor:
    """The ids owned by partition ``part_id`` (a contiguous range after DGL's relabelling)."""
    book = graph.get_partition_book()
    nodes = torch.arange(graph.num_nodes())
    return nodes[book.nid2partid(nodes) == part_id]


if __name__ == "__main__":
    main(*sys.argv[1:5])
