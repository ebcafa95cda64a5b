"""Our DataLoader's own cost per epoch, two versions of the package side by side.

The node-classification path (DGL's ``NeighborSampler``, features and labels served by the loader)
at a base commit and in this checkout, with DGL's own ``DataLoader`` as the yardstick, no model:
what is timed is the loader alone (sampling, gathering, the batch's assembly), where a slower
loader shows plainly instead of hiding in the training step's noise.

Each round starts one child process per version (``PYTHONPATH`` = that version's tree, extracted
with ``git archive``), alternating which goes first, so that the machine's load drifts over both
alike; a child loads the generated dataset, iterates ``--epochs`` epochs of each loader (epoch 0
warms up) and reports its epoch times. Routes: ``dgl`` (DGL's loader, features from ``g.ndata``),
``dropin`` (ours, the same arguments, features from ``g.ndata``), ``store`` (ours, ``features=`` a
FeatureStore), each of ours at ``prefetch`` 0 and 2. Writes CSV/JSON (median, min, max over every
round's epochs, and the head/base ratio per route) and a PNG.

    python bench/training/loader_ab.py --base 930cd84 [--rounds 3] [--epochs 3] [--num-nodes 200000] [--out loader_ab]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: common.py
from common import command_line, machine, pyplot, save_figure, write_results  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ROUTES = ("dgl", "dropin-p0", "dropin-p2", "store-p0", "store-p2")


def child(args: argparse.Namespace) -> None:
    """Time each route's epochs in this process (the package as PYTHONPATH found it); JSON on stdout."""
    import dgl
    import torch

    import dgl_zerocopy
    from dgl_zerocopy import DataLoader, FeatureStore
    from dgl_zerocopy.data import load_dataset
    from dgl_zerocopy.data.synthetic import SyntheticSpec

    torch.set_num_threads(1)
    data = load_dataset("synthetic", SyntheticSpec(num_nodes=args.num_nodes))
    g = data.to_dgl(with_data=True)
    train = torch.from_numpy(data.train_idx)
    fanouts = [int(f) for f in args.fanouts.split(",")]

    def sampler():
        return dgl.dataloading.NeighborSampler(fanouts, prefetch_node_feats=["feat"], prefetch_labels=["label"])

    store = FeatureStore(g.ndata["feat"], backend="cpu")
    options = dict(batch_size=args.batch_size, shuffle=True, device="cpu")
    loaders = {
        "dgl": lambda: dgl.dataloading.DataLoader(g, train, sampler(), **options),
        "dropin-p0": lambda: DataLoader(g, train, sampler(), prefetch=0, **options),
        "dropin-p2": lambda: DataLoader(g, train, sampler(), prefetch=2, **options),
        "store-p0": lambda: DataLoader(
            g, train, dgl.dataloading.NeighborSampler(fanouts), features={"feat": store}, labels={"label": g.ndata["label"]}, prefetch=0, **options
        ),
        "store-p2": lambda: DataLoader(
            g, train, dgl.dataloading.NeighborSampler(fanouts), features={"feat": store}, labels={"label": g.ndata["label"]}, prefetch=2, **options
        ),
    }
    times = {}
    for route in ROUTES:
        torch.manual_seed(0)
        loader, epochs = loaders[route](), []
        for _ in range(args.epochs):
            start, rows = time.perf_counter(), 0
            for _input_nodes, _output_nodes, blocks in loader:
                rows += blocks[0].srcdata["feat"].shape[0] + blocks[-1].dstdata["label"].shape[0]  # read what a step reads
            epochs.append(time.perf_counter() - start)
        times[route] = epochs[1:]  # epoch 0 warms up
    store.close()
    print(json.dumps({"package": str(Path(dgl_zerocopy.__file__).parent), "times": times}))


def run_child(tree: Path, args: argparse.Namespace) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1")
    command = [sys.executable, str(Path(__file__).resolve()), "--child", "--epochs", str(args.epochs), "--num-nodes", str(args.num_nodes)]
    command += ["--fanouts", args.fanouts, "--batch-size", str(args.batch_size)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"loader_ab: the child for {tree} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if not result["package"].startswith(str(tree)):  # an editable install shadowing PYTHONPATH would compare a tree with itself
        raise SystemExit(f"loader_ab: the child for {tree} imported the package from {result['package']}")
    return result["times"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="930cd84", help="the git revision to compare this checkout with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3, help="per route and child; epoch 0 warms up")
    parser.add_argument("--num-nodes", type=int, default=200_000)
    parser.add_argument("--fanouts", default="15,10,5")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--out", default="loader_ab", help="result file stem under bench/results/, or a path (without suffix) elsewhere")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args)
        return 0
    if args.rounds < 1 or args.epochs < 2:
        parser.error("--rounds must be >= 1 and --epochs >= 2 (epoch 0 warms up)")
    with tempfile.TemporaryDirectory(prefix="loader-ab-") as folder:
        base_tree = Path(folder) / "base"
        base_tree.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.base], capture_output=True, check=False)
        if archive.returncode != 0:
            raise SystemExit(f"loader_ab: git archive {args.base} failed: {archive.stderr.decode().strip()}")
        subprocess.run(["tar", "-x", "-C", str(base_tree)], input=archive.stdout, check=True)
        trees = {"base": base_tree, "head": ROOT}
        samples: dict[tuple[str, str], list[float]] = {}
        for round_ in range(args.rounds):
            order = ["base", "head"] if round_ % 2 == 0 else ["head", "base"]
            for version in order:
                for route, times in run_child(trees[version], args).items():
                    samples.setdefault((version, route), []).extend(times)
                print(f"round {round_ + 1}/{args.rounds}: {version} done", file=sys.stderr)
    rows = []
    for route in ROUTES:
        base, head = (statistics.median(samples[(v, route)]) for v in ("base", "head"))
        for version in ("base", "head"):
            values = samples[(version, route)]
            rows.append(
                dict(
                    route=route,
                    version=version,
                    epoch_time=statistics.median(values),
                    epoch_min=min(values),
                    epoch_max=max(values),
                    epochs=len(values),
                    head_over_base=head / base,
                )
            )
    head_rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False).stdout.strip()
    meta = {
        "command": command_line(),
        "machine": machine(),
        "setup": (
            f"synthetic {args.num_nodes:,} nodes, fanouts {args.fanouts}, batch {args.batch_size}, loader only (no model), "
            f"base {args.base} against head {head_rev} (+ uncommitted changes), {args.rounds} alternating rounds x {args.epochs - 1} timed epochs"
        ),
    }
    out = Path(args.out)
    folder = out.parent if out.parent != Path(".") else None
    write_results(out.name, rows, meta, **({"folder": folder} if folder else {}))
    plot(rows, (folder or ROOT / "bench" / "results") / f"{out.name}.png", meta["setup"])
    for r in rows:
        print(f"{r['route']:10} {r['version']:5} {r['epoch_time']:.3f} s [{r['epoch_min']:.3f}-{r['epoch_max']:.3f}]  head/base {r['head_over_base']:.3f}")
    return 0


def plot(rows: list[dict], path: Path, title: str) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.38
    for i, version in enumerate(("base", "head")):
        mine = [r for r in rows if r["version"] == version]
        x = [j + (i - 0.5) * width for j in range(len(mine))]
        med = [r["epoch_time"] for r in mine]
        err = [[m - r["epoch_min"] for m, r in zip(med, mine)], [r["epoch_max"] - m for m, r in zip(med, mine)]]
        ax.bar(x, med, width, yerr=err, capsize=3, label=version)
    ax.set_xticks(range(len(ROUTES)), ROUTES)
    ax.set_ylabel("loader epoch time (s), median and range")
    ax.set_title(title, fontsize=7)
    ax.legend()
    save_figure(fig, path, dpi=120)


if __name__ == "__main__":
    raise SystemExit(main())
