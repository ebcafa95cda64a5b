"""Host-buffer eviction policies on a neighbour-sampling trace: storage rows read per epoch.

Trace: the input nodes of DGL's NeighborSampler (fanouts 15,10,5) over the products-shaped
synthetic graph (dgl_zerocopy.data.SyntheticSpec) scaled to ``--nodes``, the batch scaled by the
same factor as bench/gathering/cache.py (1024 seeds at 2,449,029 nodes), ``--epochs`` epochs, each with its
own order and neighbour draws. Each policy runs the real HostBuffer (dgl_zerocopy/store/storage)
with a reader that reads nothing, at a budget of ``--share`` of the table's rows (100 float32
features a row); reported: storage rows per epoch over the last epoch and the miss rate (storage
rows / distinct rows gathered). Static ranking: ``degree`` (the degree sampling follows).

    .venv/bin/python bench/tiers/storage_eviction.py --nodes 100000 --epochs 3 --share 0.25
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from dgl_zerocopy.store.cache import make_policy
from dgl_zerocopy.store.storage.eviction import make_eviction
from dgl_zerocopy.store.storage.host_buffer import BufferFullError, HostBuffer
from dgl_zerocopy.store.storage.stats import StorageStats

PRODUCTS_NODES, PRODUCTS_BATCH = 2_449_029, 1024
ROW_BYTES = 400


class NoReader:
    def read_into(self, rows, dest, slots) -> None:
        pass


def trace(nodes: int, epochs: int, seed: int = 0) -> tuple[object, list[list[np.ndarray]]]:
    import dgl

    from dgl_zerocopy.data.synthetic import SyntheticSpec, generate

    data = generate(SyntheticSpec(num_nodes=nodes, feat_dim=8))
    graph = data.to_dgl()
    sampler = dgl.dataloading.NeighborSampler([15, 10, 5])
    seeds = torch.from_numpy(data.train_idx)
    batch = max(1, round(PRODUCTS_BATCH * nodes / PRODUCTS_NODES))
    out = []
    for epoch in range(epochs):
        dgl.seed(seed + epoch)
        order = seeds[torch.from_numpy(np.random.default_rng(seed + epoch).permutation(seeds.numel()))]
        out.append([sampler.sample(graph, order[s : s + batch])[0].numpy() for s in range(0, order.numel(), batch)])
    return graph, out


def simulate(name: str, nodes: int, capacity: int, order: np.ndarray, epochs: list[list[np.ndarray]], share: float | None) -> dict:
    rank = np.empty(nodes, dtype=np.int32)
    rank[order] = np.arange(nodes, dtype=np.int32)
    static_rows = order[: int(capacity * share)].astype(np.int64) if share else None
    stats = StorageStats()
    buffer = HostBuffer(NoReader(), nodes, ROW_BYTES // 4, torch.float32, capacity, make_eviction(name, capacity, rank), stats, static_rows)
    for batches in epochs:
        stats.reset()
        for ids in batches:
            _, slots = buffer.acquire(np.unique(ids).astype(np.int64))
            buffer.release(slots)
    s = stats.as_dict()
    rows = s["host_hits"] + s["storage_rows"]
    return {"storage_rows_per_epoch": s["storage_rows"], "miss_rate": s["storage_rows"] / rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--share", type=float, default=0.25, help="host budget as a share of the table's rows")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results" / "storage_eviction.json")
    args = parser.parse_args(argv)
    graph, epochs = trace(args.nodes, args.epochs)
    order = make_policy("degree", graph).order.numpy()
    capacity = int(args.nodes * args.share)
    runs = {name: (name, None) for name in ("static", "fifo", "lru", "clock")}
    for dynamic in ("lru", "clock"):
        for share in (0.1, 0.25, 0.5):
            runs[f"hybrid-{dynamic}-{share:g}"] = (dynamic, share)
    results = {}
    for label, (name, share) in runs.items():
        try:
            results[label] = simulate(name, args.nodes, capacity, order, epochs, share)
        except BufferFullError:  # a batch's rows outgrow the dynamic share
            results[label] = {"storage_rows_per_epoch": None, "miss_rate": None}
            print(f"{label:22s} a batch does not fit the dynamic share")
            continue
        print(f"{label:22s} storage rows/epoch {results[label]['storage_rows_per_epoch']:>9,}  miss rate {results[label]['miss_rate']:.3f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"nodes": args.nodes, "epochs": args.epochs, "share": args.share, "capacity": capacity, "batches_per_epoch": len(epochs[0])}
    args.out.write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
