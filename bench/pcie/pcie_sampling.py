"""PCIe request model of GPU neighbour sampling from a CSC in pinned host memory: link requests and
bytes per sampled edge, for int32 and int64 CSCs, with and without reading edge ids.

Samples minibatches as DGL's NeighborSampler(fanouts) does, with the sampling kernels
(kernels/sample.cu) run on the CPU emulator, from a graph with ogbn-products' degree shape
(dgl_zerocopy.cuda.sampling.pcie_model.products_like_csc), and applies the request model of
dgl_zerocopy/cuda/gather/pcie_model.py to the loads of indptr, indices and (when asked) edge ids.
Compares the flat fetch (a thread per sampled edge, what runs) with a thread per seed, and both
with a sampler that scans whole neighbour lists. No GPU needed; a model, not a measurement.

Part ``snapshot``: snapshot sampling with the snapshot in device memory
(GpuSnapshotSampler) against UVA sampling of the full CSC, int32 and int64: a batch reads no PCIe;
the refresh reads, per redrawn node, its indptr bounds, ``min(deg, snapshot_size)`` indices and
their edge ids (modelled on ``--refresh-sample`` random partial nodes with the emulated kernels),
``ceil(refresh x partial nodes)`` nodes per epoch, amortized over the edges an epoch samples (an
epoch: ``--train-share`` of the nodes as seeds, ogbn-products' 8 %, in batches of ``--batch-size``,
each sampling the UVA model's mean edges per batch: the picks per destination are the same).

    python bench/pcie/pcie_sampling.py [--num-nodes 1000000] [--batches 4] [--fanouts 15,10,5] [--batch-size 1024]
        [--parts uva,snapshot] [--snapshot-size 30] [--refreshes 0,0.1,0.25,1] [--refresh-sample 4096]

Writes bench/results/pcie_sampling.{csv,json} (part uva) and bench/results/pcie_snapshot.{csv,json}
(part snapshot); prints a markdown table per part.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: common.py
import numpy as np  # noqa: E402
import torch  # noqa: E402
from common import RESULTS, chosen, command_line, machine, table_head, write_results  # noqa: E402

from dgl_zerocopy.cuda.gather.pcie_model import TLP_OVERHEAD_BYTES  # noqa: E402
from dgl_zerocopy.cuda.sampling.pcie_model import model_layers, model_refresh, products_like_csc, snapshot_link_per_edge, totals  # noqa: E402

DTYPES = {"int32": torch.int32, "int64": torch.int64}
PARTS = ("uva", "snapshot")
#: ogbn-products' training split: 196,615 of 2,449,029 nodes.
PRODUCTS_TRAIN_SHARE = 196_615 / 2_449_029
MIB = 1 << 20


def run(num_nodes: int, fanouts: tuple[int, ...], batch_size: int, batches: int, seed: int) -> list[dict]:
    """One row per (CSC dtype, edge ids, fetch variant): per-edge figures over ``batches`` minibatches."""
    indptr, indices = products_like_csc(num_nodes, seed=seed)
    rows = []
    for dtype_name, dtype in DTYPES.items():
        ptr, idx = indptr.to(dtype), indices.to(dtype)
        for edge_ids in (False, True):
            for variant in ("flat", "per_seed"):
                layers = [
                    m
                    for b in range(batches)
                    for m in model_layers(ptr, idx, fanouts, batch_size=batch_size, edge_ids=edge_ids, variant=variant, seed=seed + 1000 * b)
                ]
                rows.append({"csc": dtype_name, "edge_ids": edge_ids, "fetch": variant, **totals(layers)})
    return rows


def _id_bytes(largest: int) -> int:
    return 4 if largest <= 2**31 - 1 else 8


def run_snapshot(
    num_nodes: int, fanouts: tuple[int, ...], batch_size: int, batches: int, seed: int, size: int, refreshes: list[float], sample: int, train_share: float
) -> list[dict]:
    """Per CSC dtype: UVA sampling of the full CSC (without and with edge ids) and the device-resident
    snapshot at each refresh share: link bytes per sampled edge, the batches' and the refresh's."""
    indptr, indices = products_like_csc(num_nodes, seed=seed)
    deg = (indptr[1:] - indptr[:-1]).numpy()
    partial = np.flatnonzero(deg > size)
    gen = np.random.default_rng(seed)
    refresh_nodes = np.sort(gen.choice(partial, size=min(sample, len(partial)), replace=False))
    build_nodes = np.sort(gen.choice(num_nodes, size=min(sample, num_nodes), replace=False))
    slots = int(np.minimum(deg, size).sum())
    num_edges = int(indptr[-1])
    snapshot_bytes = (num_nodes + 1) * _id_bytes(slots) + slots * (_id_bytes(num_nodes - 1) + _id_bytes(num_edges - 1))
    epoch_batches = math.ceil(train_share * num_nodes / batch_size)
    rows = []
    for dtype_name, dtype in DTYPES.items():
        ptr, idx = indptr.to(dtype), indices.to(dtype)
        uva = {}
        for edge_ids in (False, True):
            layers = [m for b in range(batches) for m in model_layers(ptr, idx, fanouts, batch_size=batch_size, edge_ids=edge_ids, seed=seed + 1000 * b)]
            uva[edge_ids] = totals(layers)
        edges_per_batch = uva[False]["edges"] / batches
        epoch_edges = epoch_batches * edges_per_batch
        refresh = model_refresh(ptr, idx, refresh_nodes, size, seed=seed)
        build = model_refresh(ptr, idx, build_nodes, size, seed=seed + 1)
        full_bytes = (num_nodes + 1 + 2 * num_edges) * ptr.element_size()  # indptr, indices, edge ids
        base = {
            "csc": dtype_name,
            "snapshot_size": size,
            "edges_per_batch": edges_per_batch,
            "epoch_batches": epoch_batches,
            "epoch_edges": epoch_edges,
            "partial_nodes": len(partial),
            "full_csc_mib": full_bytes / MIB,
            "snapshot_mib": snapshot_bytes / MIB,
            "build_mib": build.link_bytes_per_node * num_nodes / MIB,
            "refresh_link_bytes_per_node": refresh.link_bytes_per_node,
            "refresh_picks_per_node": refresh.picks / max(refresh.nodes, 1),
        }
        uva_link = uva[False]["link_bytes_per_edge"]
        for edge_ids in (False, True):
            link = uva[edge_ids]["link_bytes_per_edge"]
            method = "UVA, full CSC pinned" + (", edge ids read" if edge_ids else "")
            rows.append(
                {**base, "method": method, "refresh": float("nan"), "refreshed_nodes_per_epoch": 0}
                | {"batch_link_bytes_per_edge": link, "refresh_link_bytes_per_edge": 0.0, "link_bytes_per_edge": link, "uva_over_this": uva_link / link}
            )
        for share in refreshes:
            count = math.ceil(share * len(partial))
            link = snapshot_link_per_edge(refresh, count, epoch_edges)
            rows.append(
                {**base, "method": "snapshot in device memory", "refresh": share, "refreshed_nodes_per_epoch": count}
                | {
                    "batch_link_bytes_per_edge": 0.0,
                    "refresh_link_bytes_per_edge": link,
                    "link_bytes_per_edge": link,
                    "uva_over_this": uva_link / link if link else float("inf"),
                }
            )
    return rows


def snapshot_markdown(rows: list[dict]) -> str:
    lines = table_head("| CSC | method | refresh | batch link B/edge | refresh link B/edge (per epoch / epoch's edges) | link B/edge | UVA / this |", "llrrrrr")
    for r in rows:
        share = "–" if math.isnan(r["refresh"]) else f"{r['refresh']:g}"
        ratio = "∞ (build only)" if math.isinf(r["uva_over_this"]) else f"{r['uva_over_this']:.1f}"
        lines.append(
            f"| {r['csc']} | {r['method']} | {share} | {r['batch_link_bytes_per_edge']:.2f} | {r['refresh_link_bytes_per_edge']:.3f} | "
            f"{r['link_bytes_per_edge']:.3f} | {ratio} |"
        )
    first = rows[0]
    lines.append(
        f"\nEpoch: {first['epoch_batches']} batches, {first['epoch_edges'] / 1e6:.1f} M sampled edges; {first['partial_nodes']:,} partial nodes "
        f"(in-degree > {first['snapshot_size']}); snapshot {first['snapshot_mib']:.0f} MiB in device memory against the full CSC's "
        + ", ".join(f"{r['full_csc_mib']:.0f} MiB ({r['csc']})" for r in rows if r["method"].startswith("UVA") and "edge ids" not in r["method"])
        + "; the build reads "
        + ", ".join(f"{r['build_mib']:.0f} MiB ({r['csc']})" for r in rows if r["method"].startswith("UVA") and "edge ids" not in r["method"])
        + " once; a refreshed node costs "
        + ", ".join(f"{r['refresh_link_bytes_per_node']:.0f} B ({r['csc']})" for r in rows if r["method"].startswith("UVA") and "edge ids" not in r["method"])
        + "."
    )
    return "\n".join(lines)


def markdown(rows: list[dict]) -> str:
    lines = table_head(
        "| CSC | edge ids | fetch | requests/edge | fetched B/edge | link B/edge | useful B/edge | indptr share | whole-list scan link B/edge |", "lllrrrrrr"
    )
    for r in rows:
        lines.append(
            f"| {r['csc']} | {'yes' if r['edge_ids'] else 'no'} | {r['fetch']} | {r['requests_per_edge']:.3f} | {r['fetched_per_edge']:.1f} | "
            f"{r['link_bytes_per_edge']:.1f} | {r['useful_bytes_per_edge']:.2f} | {r['indptr_link_share']:.0%} | {r['scan_link_bytes_per_edge']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-nodes", type=int, default=1_000_000, help="nodes of the products-shaped graph (mean in-degree 50.5)")
    parser.add_argument("--fanouts", default="15,10,5", help="DGL's NeighborSampler fanouts, input layer first")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=4, help="minibatches modelled (their edges summed)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--parts", default=",".join(PARTS), help="comma separated: uva (the UVA sampler's variants), snapshot (against a device-resident snapshot)"
    )
    parser.add_argument("--snapshot-size", type=int, help="in-edges per node in the snapshot (default: 2 x the largest fanout)")
    parser.add_argument("--refreshes", default="0,0.1,0.25,1", help="refresh shares of the snapshot rows")
    parser.add_argument("--refresh-sample", type=int, default=4096, help="partial nodes whose refresh is modelled (the cost per node is scaled)")
    parser.add_argument("--train-share", type=float, default=PRODUCTS_TRAIN_SHARE, help="share of the nodes an epoch takes as seeds (ogbn-products: 0.0803)")
    parser.add_argument("--out", default=str(RESULTS / "pcie_sampling"), help="part uva's result path without suffix (default bench/results/pcie_sampling)")
    parser.add_argument(
        "--snapshot-out", default=str(RESULTS / "pcie_snapshot"), help="part snapshot's result path without suffix (default bench/results/pcie_snapshot)"
    )
    args = parser.parse_args(argv)
    fanouts = tuple(int(f) for f in args.fanouts.split(","))
    parts = chosen(parser, args.parts, PARTS, "part")
    size = args.snapshot_size if args.snapshot_size is not None else 2 * max(fanouts)
    if size < max(fanouts):
        parser.error(f"--snapshot-size {size} is below the largest fanout {max(fanouts)}")

    command = command_line()
    meta = {
        "command": command,
        "machine": machine(),
        "model": f"loads of indptr, indices and edge ids (the CSC in pinned host memory, 128-B aligned); link bytes = fetched sectors + {TLP_OVERHEAD_BYTES} B * requests",
        "graph": f"products_like_csc({args.num_nodes}, seed={args.seed}): log-normal in-degrees, mean 50.5, sources in proportion to degree",
        "sampling": f"fanouts {fanouts} (last first, as DGL), {args.batches} batches of {args.batch_size} seeds, without replacement",
    }
    print(f"command: {command}\n")
    if "uva" in parts:
        rows = run(args.num_nodes, fanouts, args.batch_size, args.batches, args.seed)
        stem = Path(args.out)
        paths = write_results(stem.name, rows, meta, stem.parent)
        print(markdown(rows))
        print("\nwrote " + ", ".join(os.path.relpath(p) for p in paths) + "\n")
    if "snapshot" in parts:
        refreshes = [float(r) for r in args.refreshes.split(",")]
        rows = run_snapshot(args.num_nodes, fanouts, args.batch_size, args.batches, args.seed, size, refreshes, args.refresh_sample, args.train_share)
        snapshot_meta = {
            **meta,
            "snapshot": f"snapshot_size {size} in device memory (GpuSnapshotSampler): batches read no PCIe; a refresh reads, per redrawn node, its indptr bounds, "
            f"min(deg, {size}) indices and their edge ids over PCIe (modelled on {args.refresh_sample} random partial nodes, scaled) and uploads the node "
            f"list; per epoch ceil(refresh x partial nodes) nodes, over an epoch of {args.train_share:.4f} x nodes as seeds",
        }
        stem = Path(args.snapshot_out)
        paths = write_results(stem.name, rows, snapshot_meta, stem.parent)
        print(snapshot_markdown(rows))
        print("\nwrote " + ", ".join(os.path.relpath(p) for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
