"""Snapshot sampling: accuracy against DGL's NeighborSampler on the six real graphs and the
synthetic one; sampling time per epoch and memory against it on the products-shaped graph.

``--parts speed`` (results ``snapshot_speed.{csv,json,png}``): the graph of
:func:`dgl_zerocopy.cuda.sampling.pcie_model.products_like_csc` (ogbn-products' in-degree shape: mean
50.5, log-normal, capped at its largest degree; ``--nodes``, default 200,000 = 1/12 of products), an
epoch = a random 8 % of the nodes as seeds (products' training share) in shuffled batches of 1024,
fanouts 15,10,5 (DGL's products example). Checked first: one batch of every sampler is a set of
real edges with their edge ids and ``min(deg, fanout)`` in-edges per destination. Then one warm-up
epoch each (a snapshot is built there: its build time is reported apart), then ``--repeats`` rounds,
each timing one epoch of every sampler in a rotated order (side by side: the same moments of a busy
machine); a snapshot epoch includes its refresh (``on_epoch_start``, as our DataLoader calls it).
Reported: median and quartiles of the epoch time, and the ratio to DGL per round (median, min,
max). Memory: the sampler's structures (the snapshot's compact CSC; everything it keeps: plus the
refresh order, the pick tables and the relabelling map) against the full CSC that DGL samples, and
the peak resident memory an epoch adds (``VmHWM`` after ``clear_refs``, Linux). Threads:
``--threads`` (default 1) for torch and DGL's OpenMP, set before either loads: on the shared
2-core machine more threads spin against other work.

``--parts accuracy`` (results ``snapshot_accuracy.{csv,json,png}``): GraphSAGE (mean, 2 layers,
hidden ``--hidden``, dropout 0.5, Adam lr 0.01, weight decay 5e-4) trained through our DataLoader
(features and labels from tensors on the CPU) with fanouts ``--fanouts`` (default 5,5, below most
degrees, so the snapshot of ``2 x 5`` in-edges is partial for many nodes), once per sampler:
``neighbor`` (DGL's NeighborSampler) and ``snapshot`` at refresh 0, 0.1, 0.25 and 1, for seeds
``0..--seeds-1`` (the seed fixes the split of the GraphData graphs, the initial weights and the batch
order, the same for every sampler). Evaluation: full-neighbourhood inference on the whole graph every
``--eval-every`` epochs; the test accuracy at the evaluated epoch of best validation accuracy; mean
and std over seeds, and the difference to ``neighbor`` (mean and std of the per-seed differences).

    python bench/sampler/snapshot.py --parts speed [--nodes 200000] [--repeats 7] [--threads 1]
    python bench/sampler/snapshot.py --parts accuracy [--datasets cora,...,synthetic] [--seeds 3] [--epochs 50]
        [--synthetic-nodes 50000] [--synthetic-epochs 10] [--data-root ../shared/data]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: common.py
from common import RESULTS, command_line, machine  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DATASETS = ("cora", "citeseer", "amazon-computers", "amazon-photo", "coauthor-cs", "coauthor-physics", "synthetic")
REFRESHES = (0.0, 0.1, 0.25, 1.0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="speed,accuracy", help="comma-separated: speed, accuracy")
    parser.add_argument("--threads", type=int, default=1, help="torch and OpenMP threads (set before torch and DGL load)")
    parser.add_argument("--nodes", type=int, default=200_000, help="speed: nodes of the products-shaped graph")
    parser.add_argument("--batch-size", type=int, default=1024, help="speed: seeds per batch")
    parser.add_argument("--repeats", type=int, default=7, help="speed: timed epochs per sampler")
    parser.add_argument("--datasets", default=",".join(DATASETS), help=f"accuracy: comma-separated, from {', '.join(DATASETS)}")
    parser.add_argument("--seeds", type=int, default=3, help="accuracy: seeds 0..N-1")
    parser.add_argument("--refresh", default=",".join(map(str, REFRESHES)), help="accuracy: the snapshot samplers' refresh shares")
    parser.add_argument("--fanouts", default="5,5", help="accuracy: fanouts per layer")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=50, help="accuracy: epochs on the real graphs")
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--synthetic-nodes", type=int, default=50_000)
    parser.add_argument("--synthetic-epochs", type=int, default=10)
    parser.add_argument("--data-root", default=str(REPO.parent / "shared" / "data"), help="folder of the real datasets")
    parser.add_argument("--out-dir", default=str(RESULTS), help="where the result files go")
    args = parser.parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    if not parts or set(parts) - {"speed", "accuracy"}:
        parser.error(f"--parts must name speed and/or accuracy, but got {args.parts!r}")
    names = [n.strip() for n in args.datasets.split(",") if n.strip()]
    if "accuracy" in parts and (not names or set(names) - set(DATASETS)):
        parser.error(f"--datasets must name some of {', '.join(DATASETS)}, but got {args.datasets!r}")
    if args.threads < 1 or args.repeats < 1 or args.seeds < 1:
        parser.error("--threads, --repeats and --seeds must be >= 1")
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    base = {"command": command_line(), "machine": machine(), "device": "cpu", "threads": args.threads}
    if "speed" in parts:
        from snapshot_speed import run_speed

        run_speed(args, base)
    if "accuracy" in parts:
        from snapshot_accuracy import run_accuracy

        run_accuracy(args, names, base)


if __name__ == "__main__":
    main()
