"""Test accuracy on the six real graphs and the synthetic one, beside the published figures.

Each dataset trains with its shipped config (Cora/Citeseer: configs/cora-gcn.yaml; Amazon:
configs/amazon-computers-sage.yaml; Coauthor: configs/coauthor-physics-sage.yaml; synthetic:
configs/synthetic-sage.yaml), through
our DataLoader (feature source ``cpu``), for ``--seeds`` seeds; the GraphData split follows the
seed. Accuracy is the test accuracy at the evaluated epoch of best validation accuracy
(:func:`dgl_zerocopy.training.train.best_epoch`); reported as mean and standard deviation over seeds, with
the median epoch time (epoch 0 left out as warm-up). Writes CSV/JSON and a PNG; prints a table.

Compression is a dimension (``--feature-compression none,fp16,int8``): each dataset trains once
per codec with the same seeds, the features held compressed by the FeatureStore and decoded in the
gather (``feature_compression`` of the config), and the table gives each codec's difference from
``none``. The int8 forms other than the default (``int8-row-minmax``, ``int8-column-absmax``,
``int8-row-absmax``; ``int8`` is ``int8-column-minmax``) train on the table decoded back to float32
(what the store's gather returns, bit for bit), for comparing the forms.

    python bench/training/accuracy.py [--datasets cora,citeseer,...] [--seeds 3] [--data-root ../shared/data] [--feature-compression none,fp16,int8]
    dgl-zerocopy bench accuracy  (the same)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: common.py
from common import REAL_GRAPH_CONFIGS, SeedRuns, accuracy_bars, command_line, machine, save_figure, write_results  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CONFIGS = {**REAL_GRAPH_CONFIGS, "synthetic": "synthetic-sage.yaml"}
# Test accuracy (%) as published: Kipf & Welling 2017 (GCN, Planetoid split) and Shchur et al.
# 2018 (GCN, 20/30 per class random splits); the synthetic graph has none.
PUBLISHED = {
    "cora": 81.5,
    "citeseer": 70.3,
    "amazon-computers": 82.6,
    "amazon-photo": 91.2,
    "coauthor-cs": 91.1,
    "coauthor-physics": 92.8,
    "synthetic": float("nan"),
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default=",".join(CONFIGS), help=f"comma-separated, from: {', '.join(CONFIGS)}")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1")
    parser.add_argument("--data-root", default=str(REPO.parent / "shared" / "data"), help="folder of the real datasets")
    parser.add_argument("--num-nodes", type=int, default=200_000, help="synthetic graph size")
    parser.add_argument("--epochs", type=int, help="override every config's epochs (quick runs)")
    parser.add_argument("--max-epochs", type=int, help="cap every config's epochs (quick runs that keep the shorter configs)")
    parser.add_argument("--min-eval-every", type=int, help="evaluate at most every N epochs (quick runs; configs that evaluate less often keep theirs)")
    parser.add_argument(
        "--feature-compression", default="none", help=f"comma-separated, from: {', '.join(COMPRESSIONS)} (none first: the others are compared with it)"
    )
    parser.add_argument("--out", default="accuracy")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.datasets.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown or not names or args.seeds < 1:
        parser.error(f"--datasets must name some of {', '.join(CONFIGS)} (got {unknown or names}) and --seeds must be >= 1")
    codecs = [c.strip() for c in args.feature_compression.split(",") if c.strip()]
    if not codecs or any(c not in COMPRESSIONS for c in codecs):
        parser.error(f"--feature-compression must name some of {', '.join(COMPRESSIONS)}, but got {args.feature_compression!r}")

    rows = []
    for name in names:
        for codec in codecs:
            rows.append(_run(name, codec, args))
            r = rows[-1]
            print(
                f"{name} [{codec}]: test {100 * r['test_acc_mean']:.2f} ± {100 * r['test_acc_std']:.2f} % (published {r['published']}), "
                f"epoch {r['epoch_time_median']:.3f}s",
                flush=True,
            )
    for r in rows:  # each codec against none on the same dataset and seeds
        base = next((b for b in rows if b["dataset"] == r["dataset"] and b["compression"] == "none"), None)
        r["diff_to_none"] = r["test_acc_mean"] - base["test_acc_mean"] if base is not None else float("nan")
        # Paired by seed (same split, same initial weights): the spread of the per-seed differences.
        paired = np.array(r["test_accs"].split(), dtype=float) - np.array(base["test_accs"].split(), dtype=float) if base is not None else []
        r["diff_to_none_std"] = float(np.std(paired)) if len(paired) else float("nan")
        r["within_std_or_half_point"] = bool(base is not None and abs(r["diff_to_none"]) <= max(base["test_acc_std"], 0.005))

    meta = {
        "command": command_line(),
        "machine": machine(),
        "device": "cpu (no GPU)" if not torch.cuda.is_available() else torch.cuda.get_device_name(),
        "rule": "test accuracy at the evaluated epoch of best validation accuracy; mean and std over seeds",
        "seeds": f"0..{args.seeds - 1}",
    }
    csv_path, _ = write_results(args.out, rows, meta)
    _plot(rows, meta, csv_path.with_suffix(".png"))
    print(f"\n# {meta['command']}\n# {meta['device']}; {meta['machine']}; seeds {meta['seeds']}; {meta['rule']}")
    print(
        "| dataset | compression | model | fanouts | epochs | test accuracy % (mean ± std) | - none (points) | published % | epoch s (median) | eval s (median) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        pub = "-" if np.isnan(r["published"]) else f"{r['published']:.1f}"
        diff = "-" if r["compression"] == "none" or np.isnan(r["diff_to_none"]) else f"{100 * r['diff_to_none']:+.2f}"
        print(
            f"| {r['dataset']} | {r['compression']} | {r['model']} | {r['fanouts']} | {r['epochs']} | {100 * r['test_acc_mean']:.2f} ± "
            f"{100 * r['test_acc_std']:.2f} | {diff} | {pub} | {r['epoch_time_median']:.3f} | {r['eval_time_median']:.3f} |"
        )


# none, the codecs through the store, and the int8 forms (trained on the decoded table).
INT8_FORMS = {f"int8-{a}-{m}": (a, m) for a in ("column", "row") for m in ("minmax", "absmax")}
COMPRESSIONS = ("none", "fp16", "bf16", "int8", *[f for f in INT8_FORMS if f != "int8-column-minmax"])


def _run(name: str, codec: str, args: argparse.Namespace) -> dict:
    from dgl_zerocopy.data import SyntheticSpec, load_dataset
    from dgl_zerocopy.training.config import build_config, read_yaml
    from dgl_zerocopy.training.train import train

    through_store = codec in ("none", "fp16", "bf16", "int8")
    overrides = {"dataset": name, "device": "cpu", "feature_source": "cpu", "epochs": args.epochs, "feature_compression": codec if through_store else "none"}
    runs = SeedRuns()
    cfg = None
    for seed in range(args.seeds):
        cfg = build_config(read_yaml(REPO / "configs" / CONFIGS[name]), {**overrides, "seed": seed})
        quick = {
            "epochs": min(cfg.epochs, args.max_epochs) if args.max_epochs else None,
            "eval_every": max(cfg.eval_every, args.min_eval_every) if args.min_eval_every else None,
        }
        cfg = cfg.model_copy(update={k: v for k, v in quick.items() if v is not None})
        start = time.perf_counter()
        dataset = load_dataset(name, synthetic=SyntheticSpec(num_nodes=args.num_nodes), root=args.data_root, split_seed=seed)
        if not through_store:
            dataset = _decoded(dataset, *INT8_FORMS[codec])
        if cfg.self_loop:
            dataset = dataset.with_self_loops()
        if seed == 0:
            _check(dataset, cfg)
        runs.add(train(cfg, dataset, progress=False), start, f"{name} [{codec}] seed {seed}")
        del dataset
    return {
        "dataset": name,
        "compression": codec,
        "model": cfg.model,
        "fanouts": ",".join(map(str, cfg.fanouts)),
        "epochs": cfg.epochs,
        "seeds": args.seeds,
        **runs.accuracy(),
        "published": PUBLISHED[name],
        **runs.times(quartiles=True),
    }


def _decoded(dataset, axis: str, method: str):
    """``dataset`` with its features compressed as int8 (``axis``, ``method``) and decoded back to float32."""
    from dataclasses import replace

    from dgl_zerocopy import compress

    return replace(dataset, features=compress(dataset.features, "int8", axis=axis, method=method).decode().numpy())


def _check(dataset, cfg) -> None:
    """Correctness first: the splits are disjoint, and a batch from our loader carries exactly the
    table's rows (a compressed table's: the reference decode of its codes) and labels at the
    sampled ids (the path the accuracy is measured through)."""
    from dgl_zerocopy.loading.timing import StageTimer
    from dgl_zerocopy.training.sources import make_source

    splits = np.concatenate([dataset.train_idx, dataset.val_idx, dataset.test_idx])
    if len(np.unique(splits)) != len(splits):
        raise SystemExit(f"{dataset.name}: train/val/test overlap")
    source = make_source("cpu", dataset, cfg.fanouts, torch.device("cpu"), compression=cfg.feature_compression)
    try:
        blocks, x, y = next(iter(source.batches(torch.from_numpy(dataset.train_idx), cfg.batch_size, False, StageTimer())))
        ids, out_ids = blocks[0].srcdata["_ID"], blocks[-1].dstdata["_ID"].numpy()
        store = source.features
        expected = dataset.features[ids.numpy()] if store.codec is None else store.codec.decode(store._table[ids], ids).numpy()
        if not (np.array_equal(x.numpy(), expected) and np.array_equal(y.numpy(), dataset.labels[out_ids])):
            raise SystemExit(f"{dataset.name}: the loader's batch differs from the table at the sampled ids")
    finally:
        source.close()


def _plot(rows: list[dict], meta: dict, path: Path) -> None:
    codecs = list(dict.fromkeys(r["compression"] for r in rows))
    fig, ax, x, datasets = accuracy_bars(
        rows,
        "compression",
        lambda codec: f"{codec} (mean ± std over seeds)" if codec != "none" or len(codecs) > 1 else "ours (mean ± std over seeds)",
        1.3 * max(1, len(codecs) / 2),
    )
    models = {r["dataset"]: r["model"] for r in rows}
    ax.scatter(x, [PUBLISHED[d] for d in datasets], color="black", marker="_", s=400, zorder=3, label="published (GCN)")
    ax.set_xticks(x, [f"{d}\n{models[d]}" for d in datasets], fontsize=8)
    ax.set_ylabel("test accuracy %")
    ax.set_ylim(50, 100)
    ax.set_title(f"{meta['device']}; seeds {meta['seeds']}; best-validation epoch", fontsize=8)
    ax.legend(fontsize=8, loc="lower right")
    save_figure(fig, path, dpi=120)


if __name__ == "__main__":
    main()
