"""Epoch time per feature source, prefetch on and off: the same model, seed and batches.

For each available source (``dgl``: DGL's default DataLoader path; ``dgl-storage``: DGL's own
DataLoader with our FeatureStore attached; ``cpu``; and on a GPU ``zerocopy`` and ``gpu``) and
prefetch 0 (serial) and N, trains ``--epochs`` epochs and reports the median epoch time (epoch 0 warms up), its
stage breakdown, the time the training step waited for data (and its share of the step time), and
test accuracy. Writes CSV/JSON and a stacked-bar PNG. A route that raises becomes a row with
``status`` "failed: ..." (its traceback on stderr), the others still run, and the exit code is 1.

``--samplers cpu,gpu`` adds, for each FeatureStore route (not DGL's loaders, which sample on the
CPU), the same route sampling on the GPU (``use_uva=True``, the graph's CSC pinned in place):
GPU sampling + zero-copy gather, CPU sampling + zero-copy gather and DGL's default path side by
side, same graph and seeds. Default ``cpu`` only. Without CUDA ``--samplers gpu`` is refused in
one line (exit 2).

``--feature-compression fp16|bf16|int8`` holds the features compressed in every FeatureStore route
(``dgl`` is then left out: it slices DGL's own table).

    python bench/training/epoch.py [--num-nodes 200000] [--epochs 4] [--prefetch 2] [--sources cpu,zerocopy,gpu] [--samplers cpu,gpu] [--feature-compression int8] [--out STEM or /path/STEM]
    dgl-zerocopy bench epoch  (the same)
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import traceback
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: common.py
from common import chosen, command_line, machine, pyplot, save_figure, synthetic_config, write_results  # noqa: E402

NUMBERS = ("epoch_time", "epoch_min", "epoch_max", "sample", "gather", "transfer", "compute", "wait", "wait_share", "test_acc")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-nodes", type=int, default=200_000)
    parser.add_argument("--epochs", type=int, default=4, help="epoch 0 warms up; the median of the others is reported")
    parser.add_argument("--prefetch", type=int, default=2)
    parser.add_argument("--model", default="sage")
    parser.add_argument("--fanouts", default="15,10,5")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument(
        "--sources",
        help="comma-separated feature sources, in this order, the first the baseline of the ratios "
        "(default: dgl, dgl-storage, cpu, and on a GPU gpu and zerocopy)",
    )
    parser.add_argument(
        "--samplers", default="cpu", help="comma-separated: cpu (DGL's sampler) and/or gpu (ours, use_uva=True; FeatureStore routes only, CUDA)"
    )
    # Testing aid, not for users: the GPU sampler's CPU reference backend stands in for CUDA (figures mean nothing).
    parser.add_argument("--emulate-gpu-sampler", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--feature-compression", default="none", help="none, fp16, bf16 or int8: how the FeatureStore routes hold the features")
    parser.add_argument("--out", default="epoch", help="result file stem under bench/results/, or a path (without suffix) elsewhere")
    args = parser.parse_args(argv)

    from dgl_zerocopy.data import SyntheticSpec, load_dataset
    from dgl_zerocopy.loading.gpu_sampling import emulate_on_cpu
    from dgl_zerocopy.store.backends import zerocopy_available
    from dgl_zerocopy.store.compression import check_codec_name
    from dgl_zerocopy.training.config import FEATURE_SOURCES
    from dgl_zerocopy.training.train import train

    try:
        compression = check_codec_name(args.feature_compression) or "none"
    except ValueError as e:
        parser.error(str(e))
    cuda = torch.cuda.is_available()
    sources = ["dgl", "dgl-storage", "cpu"] + (["gpu"] if cuda else []) + (["zerocopy"] if zerocopy_available() else [])
    if compression != "none":
        sources = [s for s in sources if s != "dgl"]
    if args.sources:
        sources = chosen(parser, args.sources, FEATURE_SOURCES, "source")
    samplers = [s.strip() for s in args.samplers.split(",") if s.strip()]
    if not samplers or (unknown := [s for s in samplers if s not in ("cpu", "gpu")]):
        parser.error(f"unknown sampler {(unknown or [args.samplers])[0]!r}; choose from cpu, gpu")
    if "gpu" in samplers and not cuda and not args.emulate_gpu_sampler:
        # one line, before any work: the GPU sampler has no CPU path a user should time
        print("epoch.py: --samplers gpu samples on a CUDA GPU, but torch.cuda.is_available() is False; use --samplers cpu", file=sys.stderr)
        return 2
    dataset = load_dataset("synthetic", synthetic=SyntheticSpec(num_nodes=args.num_nodes))
    meta = {
        "command": command_line(),
        "machine": machine(),
        "device": torch.cuda.get_device_name() if cuda else "cpu (no GPU)",
        "setup": f"synthetic {args.num_nodes:,} nodes, features {compression if compression != 'none' else 'float32'}, {args.model}, fanouts {args.fanouts}, batch {args.batch_size}, hidden {args.hidden}, "
        f"samplers {','.join(samplers)}, median (min-max) over epochs 1..{args.epochs - 1} (epoch 0 warms up); test accuracy after the last",
    }
    rows = []
    routes = [(source, sampler) for source in sources for sampler in samplers if sampler == "cpu" or source not in ("dgl", "dgl-storage")]
    for source, sampler in routes:
        dgl_loader = source in ("dgl", "dgl-storage")  # DGL's DataLoader: its own prefetching, no prefetch knob
        for prefetch in [0] if dgl_loader else [0, args.prefetch]:
            if dgl_loader and cuda:
                from dgl_zerocopy.loading.dgl_options import dgl_has_cuda

                if not dgl_has_cuda():
                    continue
            cfg = synthetic_config(
                args, model=args.model, feature_source=source, prefetch=prefetch, seed=0, device="auto", feature_compression=compression, sampler=sampler
            )
            try:
                with emulate_on_cpu("reference") if sampler == "gpu" and not cuda else contextlib.nullcontext():
                    history = train(cfg, dataset, progress=False)
            except Exception as e:  # noqa: BLE001 - a failing route becomes a row; the others still run
                traceback.print_exc()
                failed = f"failed: {type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"[:300]
                rows.append({"source": source, "sampler": sampler, "prefetch": prefetch, **dict.fromkeys(NUMBERS, float("nan")), "status": failed})
                print(f"{source:>11} sampler {sampler} prefetch {prefetch}: {failed}", flush=True)
                _save(args.out, rows, meta)
                continue
            measured = history[1:] or history  # epoch 0 warms up (allocations, caches, thread start)
            times = [h.epoch_time for h in measured]
            stage = {s: float(np.median([h.stages.get(s, 0.0) for h in measured])) for s in ("sample", "gather", "transfer", "compute", "wait")}
            step = stage["wait"] + stage["compute"]
            rows.append(
                {
                    "source": source,
                    "sampler": sampler,
                    "prefetch": prefetch,
                    "epoch_time": float(np.median(times)),
                    "epoch_min": min(times),
                    "epoch_max": max(times),
                    **stage,
                    "wait_share": stage["wait"] / step if step else float("nan"),
                    "test_acc": history[-1].test_acc,
                    "status": "ok",
                }
            )
            print(
                f"{source:>11} sampler {sampler} prefetch {prefetch}: epoch {rows[-1]['epoch_time']:.2f}s ({min(times):.2f}-{max(times):.2f}), "
                f"wait {stage['wait']:.2f}s, test acc {history[-1].test_acc:.4f}",
                flush=True,
            )
            _save(args.out, rows, meta)  # each route's row as it finishes: a run stopped at a time limit keeps them
    if not rows:
        parser.error(f"no route ran: sources {', '.join(sources)} (DGL's own loader needs a CUDA build of DGL on a GPU)")
    csv_path, _ = _save(args.out, rows, meta)
    _plot(rows, meta, csv_path.with_suffix(".png"))
    print(f"\n# {meta['command']}\n# {meta['device']}; {meta['machine']}; {meta['setup']}")
    ratio_key = "ratio_to_" + rows[0]["source"]
    print(
        f"| source | prefetch | sampler | epoch s (min-max) | sample | gather | transfer | compute | wait | wait share of step | epoch / {rows[0]['source']} | test acc |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['source']} | {r['prefetch']} | {r['sampler']} | {r['epoch_time']:.2f} ({r['epoch_min']:.2f}-{r['epoch_max']:.2f}) | {r['sample']:.2f} | {r['gather']:.2f} | {r['transfer']:.2f} | "
            f"{r['compute']:.2f} | {r['wait']:.2f} | {100 * r['wait_share']:.1f} % | {r[ratio_key]:.2f} | {r['test_acc']:.4f} |"
            + ("" if r["status"] == "ok" else f" {r['status']}")
        )
    return 0 if all(r["status"] == "ok" for r in rows) else 1


def _save(stem: str, rows: list[dict], meta: dict):
    """Write the rows so far (with each route's epoch time over the first route's) as CSV and JSON."""
    if rows:
        baseline = rows[0]["epoch_time"]
        for r in rows:
            r["ratio_to_" + rows[0]["source"]] = r["epoch_time"] / baseline
    return write_results(stem, rows, meta)


def _plot(rows: list[dict], meta: dict, path: Path) -> None:
    plt = pyplot()

    labels = [f"{r['source']}\n{r['sampler']} sampling\nprefetch {r['prefetch']}" for r in rows]
    fig, ax = plt.subplots(figsize=(1.6 * len(rows) + 2, 4))
    bottom = np.zeros(len(rows))
    for stage in ("compute", "wait"):
        vals = np.array([r[stage] for r in rows])
        ax.bar(labels, vals, bottom=bottom, label=stage)
        bottom += vals
    other = np.array([r["epoch_time"] for r in rows]) - bottom
    ax.bar(labels, np.clip(other, 0, None), bottom=bottom, label="other (optimizer, loop)", color="lightgrey")
    ax.set_ylabel("seconds per epoch")
    ax.set_title(f"{meta['device']}: {meta['setup']}", fontsize=8)
    ax.legend(fontsize=8)
    save_figure(fig, path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
