"""Test accuracy on the six real graphs and the synthetic one, beside the published figures.

Each dataset trains with its shipped config (Cora/Citeseer: configs/cora-gcn.yaml; Amazon:
configs/amazon-computers-sage.yaml; Coauthor: configs/coauthor-physics-sage.yaml; synthetic:
configs/synthetic-sage.yaml), through
our DataLoader (feature source ``cpu``), for ``--seeds`` seeds; the GraphData split follows the
seed. Accuracy is the test accuracy at the evaluated epoch of best validation accuracy
(:func:`dgl_zerocopy.train.best_epoch`); reported as mean and standard deviation over seeds, with
the median epoch time (epoch 0 left out as warm-up). Writes CSV/JSON and a PNG; prints a table.

    python bench/accuracy.py [--datasets cora,citeseer,...] [--seeds 3] [--data-root ../shared/data]
    dgl-zerocopy bench accuracy  (the same)
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import command_line, machine, summarize, write_results  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CONFIGS = {
    "cora": "cora-gcn.yaml",
    "citeseer": "cora-gcn.yaml",
    "amazon-computers": "amazon-computers-sage.yaml",
    "amazon-photo": "amazon-computers-sage.yaml",
    "coauthor-cs": "coauthor-physics-sage.yaml",
    "coauthor-physics": "coauthor-physics-sage.yaml",
    "synthetic": "synthetic-sage.yaml",
}
# Test accuracy (%) as published: Kipf & Welling 2017 (GCN, Planetoid split) and Shchur et al.
# 2018 (GCN, 20/30 per class random splits); the synthetic graph has none.
PUBLISHED = {"cora": 81.5, "citeseer": 70.3, "amazon-computers": 82.6, "amazon-photo": 91.2,
             "coauthor-cs": 91.1, "coauthor-physics": 92.8, "synthetic": float("nan")}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default=",".join(CONFIGS), help=f"comma-separated, from: {', '.join(CONFIGS)}")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1")
    parser.add_argument("--data-root", default=str(REPO.parent / "shared" / "data"), help="folder of the real datasets")
    parser.add_argument("--num-nodes", type=int, default=200_000, help="synthetic graph size")
    parser.add_argument("--epochs", type=int, help="override every config's epochs (quick runs)")
    parser.add_argument("--out", default="accuracy")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.datasets.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown or not names or args.seeds < 1:
        parser.error(f"--datasets must name some of {', '.join(CONFIGS)} (got {unknown or names}) and --seeds must be >= 1")

    rows = []
    for name in names:
        rows.append(_run(name, args))
        r = rows[-1]
        print(f"{name}: test {100 * r['test_acc_mean']:.2f} ± {100 * r['test_acc_std']:.2f} % (published {r['published']}), "
              f"epoch {r['epoch_time_median']:.3f}s", flush=True)

    meta = {"command": command_line(), "machine": machine(), "device": "cpu (no GPU)" if not torch.cuda.is_available() else torch.cuda.get_device_name(),
            "rule": "test accuracy at the evaluated epoch of best validation accuracy; mean and std over seeds",
            "seeds": f"0..{args.seeds - 1}"}
    csv_path, _ = write_results(args.out, rows, meta)
    _plot(rows, meta, csv_path.with_suffix(".png"))
    print(f"\n# {meta['command']}\n# {meta['device']}; {meta['machine']}; seeds {meta['seeds']}; {meta['rule']}")
    print("| dataset | model | fanouts | epochs | test accuracy % (mean ± std) | published % | epoch s (median) | eval s (median) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        pub = "-" if np.isnan(r["published"]) else f"{r['published']:.1f}"
        print(f"| {r['dataset']} | {r['model']} | {r['fanouts']} | {r['epochs']} | {100 * r['test_acc_mean']:.2f} ± {100 * r['test_acc_std']:.2f} | "
              f"{pub} | {r['epoch_time_median']:.3f} | {r['eval_time_median']:.3f} |")


def _run(name: str, args: argparse.Namespace) -> dict:
    from dgl_zerocopy.config import build_config, read_yaml
    from dgl_zerocopy.data import SyntheticSpec, load_dataset
    from dgl_zerocopy.train import best_epoch, train

    overrides = {"dataset": name, "device": "cpu", "feature_source": "cpu", "epochs": args.epochs}
    accs, epoch_times, eval_times = [], [], []
    cfg = None
    for seed in range(args.seeds):
        cfg = build_config(read_yaml(REPO / "configs" / CONFIGS[name]), {**overrides, "seed": seed})
        start = time.perf_counter()
        dataset = load_dataset(name, synthetic=SyntheticSpec(num_nodes=args.num_nodes), root=args.data_root, split_seed=seed)
        if cfg.self_loop:
            dataset = dataset.with_self_loops()
        if seed == 0:
            _check(dataset, cfg)
        history = train(cfg, dataset, progress=False)
        best = best_epoch(history)
        accs.append(best.test_acc)
        epoch_times += [h.epoch_time for h in history[1:] or history]  # epoch 0 warms up
        eval_times += [h.eval_time for h in history if not np.isnan(h.val_acc)]
        print(f"  {name} seed {seed}: test {best.test_acc:.4f} at epoch {best.epoch} (val {best.val_acc:.4f}), "
              f"{time.perf_counter() - start:.0f}s", flush=True)
        del dataset
    ep, ev = summarize(epoch_times), summarize(eval_times)
    return {"dataset": name, "model": cfg.model, "fanouts": ",".join(map(str, cfg.fanouts)), "epochs": cfg.epochs,
            "seeds": args.seeds, "test_acc_mean": float(np.mean(accs)), "test_acc_std": float(np.std(accs)),
            "test_accs": " ".join(f"{a:.4f}" for a in accs), "published": PUBLISHED[name],
            "epoch_time_median": ep["median"], "epoch_time_q1": ep["q1"], "epoch_time_q3": ep["q3"],
            "eval_time_median": ev["median"]}


def _check(dataset, cfg) -> None:
    """Correctness first: the splits are disjoint, and a batch from our loader carries exactly the
    table's rows and labels at the sampled ids (the path the accuracy is measured through)."""
    from dgl_zerocopy.sources import make_source
    from dgl_zerocopy.timing import StageTimer

    splits = np.concatenate([dataset.train_idx, dataset.val_idx, dataset.test_idx])
    if len(np.unique(splits)) != len(splits):
        raise SystemExit(f"{dataset.name}: train/val/test overlap")
    source = make_source("cpu", dataset, cfg.fanouts, torch.device("cpu"))
    try:
        blocks, x, y = next(iter(source.batches(torch.from_numpy(dataset.train_idx), cfg.batch_size, False, StageTimer())))
        ids, out_ids = blocks[0].srcdata["_ID"].numpy(), blocks[-1].dstdata["_ID"].numpy()
        if not (np.array_equal(x.numpy(), dataset.features[ids]) and np.array_equal(y.numpy(), dataset.labels[out_ids])):
            raise SystemExit(f"{dataset.name}: the loader's batch differs from the table at the sampled ids")
    finally:
        source.close()


def _plot(rows: list[dict], meta: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(1.3 * len(rows) + 2, 4))
    ax.bar(x, [100 * r["test_acc_mean"] for r in rows], yerr=[100 * r["test_acc_std"] for r in rows], capsize=4,
           label="ours (mean ± std over seeds)")
    ax.scatter(x, [r["published"] for r in rows], color="black", marker="_", s=400, zorder=3, label="published (GCN)")
    ax.set_xticks(x, [f"{r['dataset']}\n{r['model']}" for r in rows], fontsize=8)
    ax.set_ylabel("test accuracy %")
    ax.set_ylim(50, 100)
    ax.set_title(f"{meta['device']}; seeds {meta['seeds']}; best-validation epoch", fontsize=8)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
