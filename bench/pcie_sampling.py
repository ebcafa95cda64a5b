"""PCIe request model of GPU neighbour sampling from a CSC in pinned host memory: link requests and
bytes per sampled edge, for int32 and int64 CSCs, with and without reading edge ids.

Samples minibatches as DGL's NeighborSampler(fanouts) does, with the sampling kernels
(kernels/sample.cu) run on the CPU emulator, from a graph with ogbn-products' degree shape
(dgl_zerocopy.cuda.sampling.pcie_model.products_like_csc), and applies the request model of
dgl_zerocopy/cuda/gather/pcie_model.py to the loads of indptr, indices and (when asked) edge ids.
Compares the flat fetch (a thread per sampled edge, what runs) with a thread per seed, and both
with a sampler that scans whole neighbour lists. No GPU needed; a model, not a measurement.

    python bench/pcie_sampling.py [--num-nodes 1000000] [--batches 4] [--fanouts 15,10,5] [--batch-size 1024]

Writes bench/results/pcie_sampling.{csv,json}; prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch  # noqa: E402
from common import RESULTS, command_line, machine, write_results  # noqa: E402

from dgl_zerocopy.cuda.gather.pcie_model import TLP_OVERHEAD_BYTES  # noqa: E402
from dgl_zerocopy.cuda.sampling.pcie_model import model_layers, products_like_csc, totals  # noqa: E402

DTYPES = {"int32": torch.int32, "int64": torch.int64}


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


def markdown(rows: list[dict]) -> str:
    lines = [
        "| CSC | edge ids | fetch | requests/edge | fetched B/edge | link B/edge | useful B/edge | indptr share | whole-list scan link B/edge |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
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
    parser.add_argument("--out", default=str(RESULTS / "pcie_sampling"), help="result path without suffix (default bench/results/pcie_sampling)")
    args = parser.parse_args(argv)
    fanouts = tuple(int(f) for f in args.fanouts.split(","))

    command = command_line()
    rows = run(args.num_nodes, fanouts, args.batch_size, args.batches, args.seed)
    meta = {
        "command": command,
        "machine": machine(),
        "model": f"loads of indptr, indices and edge ids (the CSC in pinned host memory, 128-B aligned); link bytes = fetched sectors + {TLP_OVERHEAD_BYTES} B * requests",
        "graph": f"products_like_csc({args.num_nodes}, seed={args.seed}): log-normal in-degrees, mean 50.5, sources in proportion to degree",
        "sampling": f"fanouts {fanouts} (last first, as DGL), {args.batches} batches of {args.batch_size} seeds, without replacement",
    }
    stem = Path(args.out)
    paths = write_results(stem.name, rows, meta, stem.parent)
    print(f"command: {command}\n")
    print(markdown(rows))
    print("\nwrote " + ", ".join(os.path.relpath(p) for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
