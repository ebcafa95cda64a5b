"""Gather and training-step cost as the graph and the feature width grow: linear in bytes gathered?

Graphs are ogbn-papers100M-shaped (``SyntheticSpec.papers100m_like``: degree ~29, 172 classes,
~1.1 % train), generated once and cached. Two sweeps share one code path:
  nodes   --nodes (default 100k to 4M) at width 128
  width   --widths (default 64 to 1024) at --width-nodes nodes (default 1M)
For each graph:
  gather  ``FeatureStore(backend="cpu").gather`` of the input nodes of --batches batches sampled by
          our DataLoader (DGL's NeighborSampler, --fanouts, --batch-size); checked equal to
          ``feat[ids]`` first, then each batch timed --repeats times after two warm-up calls.
  step    --steps trained batches (sample + gather + forward/backward/Adam) through our DataLoader
          with prefetch 0, so the stages run one after another and the step time is their sum;
          one warm-up step first. The epoch time is extrapolated (median step x full batches per
          epoch), not measured: a whole epoch at 4M nodes is 43 steps, at 1M x 1024 wide 11 heavy ones.
Least squares of time against bytes gathered (time = a + b * bytes) over the graphs' medians, with
R^2, the slope per GB, the largest relative residual and the log-log exponent (1 means linear),
answers whether the cost grows linearly with the bytes gathered. Writes CSV/JSON and a PNG.

    python bench/training/scaling.py [--nodes 100000,250000] [--widths 64,128] [--steps 5] [--out-dir DIR]
    dgl-zerocopy bench scaling  (the same)
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: common.py
from common import RESULTS, command_line, machine, markdown_table, pyplot, save_figure, time_repeated, write_results  # noqa: E402

os.environ.setdefault("DGLBACKEND", "pytorch")

# Linear if the straight line explains nearly all the variance and doubling the bytes about doubles
# the time (log-log exponent near 1); both are needed: R^2 alone is dominated by the largest points.
LINEAR_R2 = 0.95
LINEAR_EXPONENT = (0.9, 1.1)


def _ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, e.g. 100000,250000, but got {text!r}") from None
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"expected one or more positive integers, but got {text!r}")
    return values


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--nodes", type=_ints, default=[100_000, 250_000, 500_000, 1_000_000, 2_000_000, 4_000_000], help="node counts of the node sweep (width 128)"
    )
    parser.add_argument("--widths", type=_ints, default=[64, 128, 256, 512, 1024], help="feature widths of the width sweep")
    parser.add_argument("--width-nodes", type=int, default=1_000_000, help="node count of the width sweep")
    parser.add_argument("--batches", type=int, default=8, help="sampled batches whose gather is timed")
    parser.add_argument("--repeats", type=int, default=3, help="timed gathers per batch")
    parser.add_argument("--steps", type=int, default=5, help="timed training steps (after one warm-up step)")
    parser.add_argument("--fanouts", type=_ints, default=[15, 10, 5])
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch intra-op threads (0: torch's default); on a busy machine 1 avoids stalls where one thread of a parallel gather waits for a core",
    )
    parser.add_argument("--out", default="scaling", help="file stem of the results")
    parser.add_argument("--out-dir", default=str(RESULTS), help="folder of the results (default bench/results)")
    args = parser.parse_args(argv)
    if min(args.batches, args.repeats, args.steps, args.batch_size, args.hidden, args.width_nodes) <= 0:
        parser.error("--batches, --repeats, --steps, --batch-size, --hidden and --width-nodes must be positive")

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    from dgl_zerocopy.data import SyntheticSpec, load_dataset

    # One row per distinct graph; the node sweep's width-128 graph may also belong to the width sweep.
    grid: dict[tuple[int, int], str] = {(n, 128): "nodes" for n in args.nodes}
    for w in args.widths:
        grid[(args.width_nodes, w)] = "both" if (args.width_nodes, w) in grid else "width"
    rows = []
    for (num_nodes, width), sweep in sorted(grid.items()):
        spec = SyntheticSpec.papers100m_like(num_nodes=num_nodes, feat_dim=width, seed=args.seed)
        start = time.perf_counter()
        dataset = load_dataset("synthetic", synthetic=spec)
        print(f"{num_nodes:>9,} nodes x {width:>4} wide: {dataset.num_edges:,} edges, loaded in {time.perf_counter() - start:.1f}s", flush=True)
        row = {
            "sweep": sweep,
            "nodes": num_nodes,
            "width": width,
            "edges": dataset.num_edges,
            "table_mb": dataset.features.nbytes / 1e6,
            **_measure(dataset, args),
        }
        rows.append(row)
        print(
            f"    gather {1e3 * row['gather_s']:.2f} ms for {row['gather_mb']:.1f} MB ({row['gather_gbps']:.2f} GB/s); "
            f"step {row['step_s']:.3f} s, epoch ~{row['epoch_s_extrapolated']:.1f} s",
            flush=True,
        )
        del dataset

    gather_fit = fit_linear([r["gather_mb"] * 1e6 for r in rows], [r["gather_s"] for r in rows])
    step_fit = fit_linear([r["step_mb"] * 1e6 for r in rows], [r["step_s"] for r in rows])
    meta = {
        "command": command_line(),
        "machine": machine(),
        "device": "cpu (FeatureStore backend cpu)",
        "torch_threads": torch.get_num_threads(),
        "setup": (
            f"papers100M-like synthetic graphs, fanouts {','.join(map(str, args.fanouts))}, batch {args.batch_size}, "
            f"SAGE hidden {args.hidden}; gather: {args.batches} batches x {args.repeats} repeats; "
            f"step: {args.steps} steps after 1 warm-up, prefetch 0"
        ),
        "epoch_note": "epoch_s_extrapolated = median step time x full batches per epoch (not a measured epoch)",
        "gather_fit": gather_fit,
        "gather_verdict": verdict("gather time", gather_fit),
        "step_fit": step_fit,
        "step_verdict": verdict("training step time", step_fit),
    }
    out_dir = Path(args.out_dir)
    csv_path, _ = write_results(args.out, rows, meta, folder=out_dir)
    _plot(rows, meta, csv_path.with_suffix(".png"))
    _print_table(rows, meta)


def _measure(dataset, args: argparse.Namespace) -> dict:
    """Gather and step timings on one graph (see the module docstring)."""
    import dgl

    from dgl_zerocopy.loading.loader import DataLoader
    from dgl_zerocopy.loading.timing import StageTimer
    from dgl_zerocopy.store.feature_store import FeatureStore
    from dgl_zerocopy.training.models import build_model

    train_idx = torch.from_numpy(dataset.train_idx)
    if len(train_idx) < args.batch_size:
        raise ValueError(
            f"--batch-size {args.batch_size} exceeds the {len(train_idx)} training nodes of the "
            f"{dataset.num_nodes:,}-node graph; lower --batch-size or raise --nodes"
        )
    graph = dataset.to_dgl()
    feat = torch.from_numpy(dataset.features)
    row_bytes = feat.shape[1] * feat.element_size()

    def loader(**kw) -> DataLoader:
        return DataLoader(
            graph,
            train_idx,
            dgl.dataloading.NeighborSampler(args.fanouts),
            device="cpu",
            batch_size=args.batch_size,
            shuffle=True,
            drop_last=True,
            prefetch=0,
            seed=args.seed,
            **kw,
        )

    # (a) gather: input-node ids from the real sampler, no features attached.
    id_batches = [input_nodes for input_nodes, _, _ in _take(loader(), args.batches)]
    with FeatureStore(feat, backend="cpu", device="cpu") as store:  # closed after: its buffer is freed before the steps
        torch.testing.assert_close(store.gather(id_batches[0]), feat[id_batches[0]], rtol=0, atol=0)  # correctness first
        per_batch = [float(np.median(time_repeated(lambda ids=ids: store.gather(ids), args.repeats))) for ids in id_batches]
    gather_rows = [len(ids) for ids in id_batches]
    del id_batches

    # (b) training steps through our DataLoader, serial (prefetch 0): sample + gather + compute.
    timer = StageTimer()
    store = FeatureStore(feat, backend="cpu", device="cpu")
    steps = loader(features={"feat": store}, labels={"label": torch.from_numpy(dataset.labels)}, timer=timer)
    model = build_model("sage", feat.shape[1], args.hidden, dataset.num_classes, len(args.fanouts), 0.5)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.003)
    step_times, step_rows = [], []
    batches = iter(_take(steps, args.steps + 1))
    for i in range(args.steps + 1):
        if i == 1:
            timer.reset()  # the warm-up step's stages are not counted
        start = time.perf_counter()
        input_nodes, _, blocks = next(batches)
        with timer.stage("compute"):
            logits = model(blocks, blocks[0].srcdata["feat"])
            loss = torch.nn.functional.cross_entropy(logits, blocks[-1].dstdata["label"])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        if i > 0:
            step_times.append(time.perf_counter() - start)
            step_rows.append(len(input_nodes))
    stages = timer.reset()
    steps.close()
    store.close()

    g, s = _quartiles(per_batch), _quartiles(step_times)
    gather_bytes = float(np.median(gather_rows)) * row_bytes
    batches_per_epoch = len(train_idx) // args.batch_size
    return {
        "gather_rows": float(np.median(gather_rows)),
        "gather_mb": gather_bytes / 1e6,
        "gather_s": g["median"],
        "gather_s_q1": g["q1"],
        "gather_s_q3": g["q3"],
        "gather_gbps": gather_bytes / g["median"] / 1e9,
        "step_mb": float(np.median(step_rows)) * row_bytes / 1e6,
        "step_s": s["median"],
        "step_s_q1": s["q1"],
        "step_s_q3": s["q3"],
        **{f"{k}_s_mean": stages.get(k, 0.0) / args.steps for k in ("sample", "gather", "transfer", "compute")},
        "batches_per_epoch": batches_per_epoch,
        "epoch_s_extrapolated": s["median"] * batches_per_epoch,
    }


def _quartiles(values: list[float]) -> dict[str, float]:
    """Median and quartiles, interpolated between the values (never outside them, even for two)."""
    q1, median, q3 = np.percentile(values, [25, 50, 75])
    return {"median": float(median), "q1": float(q1), "q3": float(q3)}


def _take(loader, count: int):
    """``count`` batches from ``loader``, starting new epochs as needed (small graphs have few batches)."""
    taken = 0
    while taken < count:
        for batch in loader:
            yield batch
            taken += 1
            if taken == count:
                loader.close()
                return


def fit_linear(x: list[float], y: list[float]) -> dict[str, float]:
    """Least squares ``y = a + b x`` (x in bytes, y in seconds): slope per GB, intercept, R^2, the
    largest |residual| / y, and the slope of log y on log x (1 for a line through the origin).
    NaN where fewer than three distinct x make a fit meaningless."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    nan = float("nan")
    if len(np.unique(x)) < 3:
        return {"points": len(x), "slope_s_per_gb": nan, "intercept_s": nan, "r2": nan, "max_rel_residual": nan, "loglog_exponent": nan}
    b, a = np.polyfit(x, y, 1)
    residual = y - (a + b * x)
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum(residual**2)) / ss_tot if ss_tot > 0 else nan
    exponent = float(np.polyfit(np.log(x), np.log(y), 1)[0])
    return {
        "points": len(x),
        "slope_s_per_gb": float(b) * 1e9,
        "intercept_s": float(a),
        "r2": r2,
        "max_rel_residual": float(np.max(np.abs(residual) / y)),
        "loglog_exponent": exponent,
    }


def verdict(what: str, fit: dict[str, float]) -> str:
    """One sentence: is ``what`` linear in the bytes gathered, by the thresholds above?"""
    if math.isnan(fit["r2"]):
        return f"{what}: too few distinct sizes ({fit['points']}) to fit a line"
    lo, hi = LINEAR_EXPONENT
    linear = fit["r2"] >= LINEAR_R2 and lo <= fit["loglog_exponent"] <= hi
    shape = (
        "linear"
        if linear
        else (
            "super-linear (cost per byte grows)"
            if fit["loglog_exponent"] > hi
            else "sub-linear (fixed costs weigh at small sizes)"
            if fit["loglog_exponent"] < lo
            else "not linear (poor fit)"
        )
    )
    return (
        f"{what} is {shape} in bytes gathered: R^2 {fit['r2']:.3f}, log-log exponent {fit['loglog_exponent']:.2f}, "
        f"{fit['slope_s_per_gb']:.3f} s per GB ({1 / fit['slope_s_per_gb']:.2f} GB/s marginal) + {1e3 * fit['intercept_s']:.2f} ms, "
        f"largest residual {100 * fit['max_rel_residual']:.0f} % of the time "
        f"(linear means R^2 >= {LINEAR_R2} and exponent in {lo}-{hi})"
    )


def _print_table(rows: list[dict], meta: dict) -> None:
    print(f"\n# {meta['command']}\n# {meta['device']}; {meta['machine']}; {meta['torch_threads']} torch threads\n# {meta['setup']}")
    header = "| sweep | nodes | width | edges | gather MB/batch | gather ms (q1–q3) | GB/s | step MB | step s (q1–q3) | sample / gather / compute s | epoch s (extrapolated) |"
    lines = [
        f"| {r['sweep']} | {r['nodes']:,} | {r['width']} | {r['edges']:,} | {r['gather_mb']:.1f} | "
        f"{1e3 * r['gather_s']:.2f} ({1e3 * r['gather_s_q1']:.2f}–{1e3 * r['gather_s_q3']:.2f}) | {r['gather_gbps']:.2f} | {r['step_mb']:.1f} | "
        f"{r['step_s']:.3f} ({r['step_s_q1']:.3f}–{r['step_s_q3']:.3f}) | "
        f"{r['sample_s_mean']:.3f} / {r['gather_s_mean']:.3f} / {r['compute_s_mean']:.3f} | "
        f"{r['epoch_s_extrapolated']:.1f} ({r['batches_per_epoch']} x step) |"
        for r in rows
    ]
    print(markdown_table(header, lines))
    print(f"\n{meta['gather_verdict']}.\n{meta['step_verdict']}.\n({meta['epoch_note']})")


def _plot(rows: list[dict], meta: dict, path: Path) -> None:
    plt = pyplot()

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for ax, key, mb, fit, title in (
        (axes[0], "gather_s", "gather_mb", meta["gather_fit"], "FeatureStore cpu gather per batch"),
        (axes[1], "step_s", "step_mb", meta["step_fit"], "training step (sample + gather + compute)"),
    ):
        for sweep, marker in (("nodes", "o"), ("width", "s"), ("both", "D")):
            sel = [r for r in rows if r["sweep"] == sweep]
            if not sel:
                continue
            x = np.array([r[mb] for r in sel]) / 1e3
            y = np.array([r[key] for r in sel])
            err = np.array([y - [r[key + "_q1"] for r in sel], [r[key + "_q3"] for r in sel] - y])
            ax.errorbar(
                x, y, yerr=err, fmt=marker, capsize=3, label={"nodes": "node sweep (width 128)", "width": "width sweep", "both": "in both sweeps"}[sweep]
            )
            for r, xi, yi in zip(sel, x, y):
                ax.annotate(f"{r['nodes'] / 1e6:g}M x {r['width']}", (xi, yi), fontsize=6, xytext=(3, -8), textcoords="offset points")
        if not math.isnan(fit["r2"]):
            xs = np.geomspace(min(r[mb] for r in rows), max(r[mb] for r in rows), 50) / 1e3
            ax.plot(
                xs,
                fit["intercept_s"] + fit["slope_s_per_gb"] * xs,
                "k--",
                lw=1,
                label=f"fit: {fit['slope_s_per_gb']:.3g} s/GB, R² {fit['r2']:.3f}, exponent {fit['loglog_exponent']:.2f}",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("GB gathered per batch (median)")
        ax.set_ylabel("seconds (median, IQR)")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7)
    fig.suptitle(f"{meta['device']}, {meta['machine']}\n{meta['setup']}", fontsize=8)
    save_figure(fig, path, dpi=120)


if __name__ == "__main__":
    main()
