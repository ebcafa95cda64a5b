"""Data-parallel training on the CPU: 1 process x C threads against N processes x C/N threads, same global batch.

The same training (synthetic graph, GraphSAGE, seed, global batch, epochs, feature source ``cpu``)
runs in two setups on a machine with C usable cores (defaults for C = 2):
  1xC   one process with C torch/OpenMP threads;
  Nx1   N data-parallel processes (``dgl-zerocopy train --nproc N``: DDP, gloo on 127.0.0.1, the
        dataset in shared memory once), each with C // N threads (at least 1) and
        ceil(batch / N) seeds a step, so a step sees the same global batch and an epoch as many steps.
Both start the same way (``dgl_zerocopy.training.ddp.launch``, spawned processes, the dataset shared), so
start-up costs match. Repetition r trains both with seed ``--seed + r`` (the split too), the order of
the two swapped every repetition so that drift on a shared machine hits both alike. Per run: the
median epoch time over epochs 1.. (epoch 0 warms up; training only, evaluation is once, after the
last epoch), the job's wall time (start-up, every epoch and evaluation), and the final test accuracy.
Reported per setup: median, quartiles, min and max over the repetitions; the speed-up (ratio of
median epoch times) and the accuracy difference of the two setups at the same seed (median, min,
max). Writes ``ddp.csv``/``ddp.json`` (per-run rows in the JSON as ``raw``) and ``ddp.png``.

    python bench/training/ddp.py [--num-nodes 100000] [--epochs 4] [--repeats 3] [--nproc 2] [--out STEM or /path/STEM]
    dgl-zerocopy bench ddp  (the same)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import textwrap
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: common.py
from common import command_line, machine, pyplot, save_figure, synthetic_config, write_results  # noqa: E402

os.environ.setdefault("DGLBACKEND", "pytorch")


def main(argv: list[str] | None = None) -> int:
    from dgl_zerocopy.training.ddp import _usable_cores

    cores = _usable_cores()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-nodes", type=int, default=100_000, help="synthetic graph size (default 100,000: 8,000 training nodes)")
    parser.add_argument("--epochs", type=int, default=4, help="epochs per run; epoch 0 warms up (at least 2)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each setup, alternating")
    parser.add_argument("--nproc", type=int, default=cores, help=f"processes of the data-parallel setup (default: the {cores} usable cores)")
    parser.add_argument("--threads", type=int, default=cores, help=f"threads of the one-process setup (default: the {cores} usable cores)")
    parser.add_argument("--fanouts", default="15,10,5")
    parser.add_argument("--batch-size", type=int, default=1024, help="the global batch: per process ceil(batch / nproc)")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0, help="repetition r uses seed + r")
    parser.add_argument("--out", default="ddp", help="result file stem under bench/results/, or a path (without suffix) elsewhere")
    args = parser.parse_args(argv)
    if args.epochs < 2 or min(args.repeats, args.num_nodes, args.batch_size, args.hidden, args.threads) < 1 or args.nproc < 2:
        parser.error("--epochs must be >= 2, --nproc >= 2, and --repeats, --num-nodes, --batch-size, --hidden, --threads >= 1")
    if "OMP_NUM_THREADS" in os.environ:
        parser.error(
            f"OMP_NUM_THREADS is set ({os.environ['OMP_NUM_THREADS']}): it would hold both setups to that many OpenMP "
            "threads; unset it (the bench gives each process its share)"
        )

    import torch

    from dgl_zerocopy.data import SyntheticSpec, load_dataset
    from dgl_zerocopy.training.ddp import share_dataset

    per_process = max(1, cores // args.nproc)
    setups = [
        {"setup": f"1x{args.threads}", "processes": 1, "threads": args.threads, "batch_per_process": args.batch_size},
        {"setup": f"{args.nproc}x{per_process}", "processes": args.nproc, "threads": per_process, "batch_per_process": -(-args.batch_size // args.nproc)},
    ]
    load_start = _load()
    raw = []
    for r in range(args.repeats):
        seed = args.seed + r
        dataset = load_dataset("synthetic", synthetic=SyntheticSpec(num_nodes=args.num_nodes), split_seed=seed)
        train_nodes = len(dataset.train_idx)
        shared = share_dataset(dataset)  # once per seed, for both setups: the arrays in shared memory
        del dataset
        cfg = synthetic_config(args, num_nodes=args.num_nodes, feature_source="cpu", device="cpu", seed=seed)
        order = setups if r % 2 == 0 else setups[::-1]
        for setup in order:
            row = {"repeat": r, "seed": seed, **setup, **_run(cfg, shared, setup)}
            raw.append(row)
            print(
                f"repeat {r} seed {seed} {setup['setup']:>4}: epoch {row['epoch_time']:.2f}s "
                f"({row['epoch_min']:.2f}-{row['epoch_max']:.2f}), job {row['job_time']:.1f}s, test acc {row['test_acc']:.4f}",
                flush=True,
            )
        del shared

    rows = _summary(raw, setups)
    steps = -(-train_nodes // args.batch_size)
    meta = {
        "command": command_line(),
        "machine": machine(),
        "usable_cores": cores,
        "device": "cpu (gloo for the processes)",
        "torch": torch.__version__,
        "load_average_1min": f"{load_start} at the start, {_load()} at the end (other jobs on the machine)",
        "setup": (
            f"synthetic {args.num_nodes:,} nodes, sage, fanouts {args.fanouts}, global batch {args.batch_size} "
            f"(~{steps} steps an epoch in both setups), hidden {args.hidden}, feature source cpu, prefetch 2, {args.epochs} epochs "
            f"(epoch 0 warms up), {args.repeats} repetitions alternating, seeds {args.seed}..{args.seed + args.repeats - 1}"
        ),
        "per_run": "epoch_time = median over epochs 1.. of one run (training only); job_time = the run's wall time (process start, all epochs, one evaluation)",
    }
    csv_path, _ = write_results(args.out, rows, meta, extra={"raw": raw})
    _plot(raw, rows, meta, csv_path.with_suffix(".png"))
    _print_table(rows, meta)
    return 0


def _load() -> str:
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "?"


def _one_process(rank: int, world_size: int, cfg, shared) -> list:
    """The one-process setup inside a launched process (its threads set by launch)."""
    from dgl_zerocopy.training.train import train

    return train(cfg, shared, progress=False)


def _run(cfg, shared, setup: dict) -> dict:
    """Train ``cfg`` in ``setup``; its epoch times, wall time and final test accuracy."""
    from dgl_zerocopy.training.ddp import launch
    from dgl_zerocopy.training.train import train

    start = time.perf_counter()
    if setup["processes"] == 1:
        [history] = launch(_one_process, 1, cfg, shared, backend="gloo", threads=setup["threads"])
    else:
        history = train(cfg.model_copy(update={"nproc": setup["processes"]}), shared, progress=False)
    job = time.perf_counter() - start
    if len(history) != cfg.epochs or not np.isfinite(history[-1].test_acc):
        raise RuntimeError(f"{setup['setup']}: expected {cfg.epochs} epochs ending in an evaluation, got {history}")
    times = [h.epoch_time for h in history[1:]]
    return {
        "epoch_time": statistics.median(times),
        "epoch_min": min(times),
        "epoch_max": max(times),
        "job_time": job,
        "test_acc": history[-1].test_acc,
        "epoch_times": [h.epoch_time for h in history],
    }


def summarize(values: list[float]) -> dict[str, float]:
    """Median, quartiles (interpolated between the values, never outside them, even for two), min and max."""
    q1, median, q3 = np.percentile(values, [25, 50, 75])
    return {"median": float(median), "q1": float(q1), "q3": float(q3), "min": min(values), "max": max(values)}


def _summary(raw: list[dict], setups: list[dict]) -> list[dict]:
    """One row per setup: median and spread over the repetitions; the second setup against the first."""
    rows = []
    for setup in setups:
        mine = [r for r in raw if r["setup"] == setup["setup"]]
        e, j, a = (summarize([r[k] for r in mine]) for k in ("epoch_time", "job_time", "test_acc"))
        rows.append(
            {
                **setup,
                "runs": len(mine),
                "epoch_time": e["median"],
                "epoch_q1": e["q1"],
                "epoch_q3": e["q3"],
                "epoch_min": e["min"],
                "epoch_max": e["max"],
                "job_time": j["median"],
                "job_min": j["min"],
                "job_max": j["max"],
                "test_acc": a["median"],
                "test_acc_min": a["min"],
                "test_acc_max": a["max"],
            }
        )
    base = rows[0]
    for row in rows:
        row["speedup"] = base["epoch_time"] / row["epoch_time"]
        # The accuracy difference to the first setup at the same seed (0 for the first setup itself).
        diffs = [
            r["test_acc"] - b["test_acc"] for r in raw if r["setup"] == row["setup"] for b in raw if b["setup"] == base["setup"] and b["seed"] == r["seed"]
        ]
        row["acc_diff"], row["acc_diff_min"], row["acc_diff_max"] = statistics.median(diffs), min(diffs), max(diffs)
    return rows


def _print_table(rows: list[dict], meta: dict) -> None:
    print(f"\n# {meta['command']}\n# {meta['device']}; {meta['machine']}; torch {meta['torch']}; load average {meta['load_average_1min']}\n# {meta['setup']}")
    base = rows[0]["setup"]
    print(
        f"| setup | processes x threads | batch per process | epoch s median (q1–q3; min–max) | epoch speed-up vs {base} | "
        f"job s median (min–max) | test acc median (min–max) | acc − {base}, same seed: median (min–max) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['setup']} | {r['processes']} x {r['threads']} | {r['batch_per_process']} | {r['epoch_time']:.2f} "
            f"({r['epoch_q1']:.2f}–{r['epoch_q3']:.2f}; {r['epoch_min']:.2f}–{r['epoch_max']:.2f}) | {r['speedup']:.2f} | "
            f"{r['job_time']:.1f} ({r['job_min']:.1f}–{r['job_max']:.1f}) | {r['test_acc']:.4f} ({r['test_acc_min']:.4f}–{r['test_acc_max']:.4f}) | "
            f"{r['acc_diff']:+.4f} ({r['acc_diff_min']:+.4f}–{r['acc_diff_max']:+.4f}) |"
        )


def _plot(raw: list[dict], rows: list[dict], meta: dict, path: Path) -> None:
    plt = pyplot()

    names = [r["setup"] for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    for ax, key, label in ((axes[0], "epoch_time", "epoch time, s (median of epochs 1..)"), (axes[1], "test_acc", "final test accuracy")):
        for seed in sorted({r["seed"] for r in raw}):  # the two setups at one seed, joined
            ys = [next(r[key] for r in raw if r["seed"] == seed and r["setup"] == n) for n in names]
            ax.plot(range(len(names)), ys, "o-", color="grey", alpha=0.5, lw=1)
        for i, row in enumerate(rows):
            ax.hlines(row[key], i - 0.2, i + 0.2, color="C0", lw=3, label="median" if i == 0 else None)
        ax.set_xticks(range(len(names)), [f"{r['setup']}\n({r['processes']} proc x {r['threads']} thr)" for r in rows])
        ax.set_xlim(-0.5, len(names) - 0.5)
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    axes[0].set_title("grey: one repetition (same seed)", fontsize=8)
    fig.suptitle(f"{meta['machine']}, load average {meta['load_average_1min']}\n" + textwrap.fill(meta["setup"], 150), fontsize=7)
    save_figure(fig, path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
