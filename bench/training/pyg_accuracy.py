"""GraphSAGE through the PyG front end against the DGL route: test accuracy on the real graphs, seed for seed.

Each dataset trains with its shipped config (bench/common.py's ``REAL_GRAPH_CONFIGS``; Cora and Citeseer take
configs/cora-gcn.yaml's settings with GraphSAGE in place of GCN and no self-loops, as SAGEConv has its own root
weight), on the CPU, through two routes that differ only in the front end:

- ``dgl``: DGL's sampler, our DataLoader (feature source ``cpu``) and :class:`dgl_zerocopy.training.models.GraphSAGE`
  (``dgl_zerocopy.nn.SAGEConv``, numerically dgl.nn's) over blocks;
- ``pyg``: our PyG loader (:class:`dgl_zerocopy.pyg.NeighborLoader`: our CPU hop sampler, the features through
  our store) and GraphSAGE of PyG's ``SAGEConv`` over PyG's sampled subgraphs (:mod:`dgl_zerocopy.training.pyg_train`).

Same hidden size, layers, dropout, learning rate, weight decay, epochs, fanouts, batch sizes, evaluation schedule,
split and seed; the two models compute the same function (``fc_neigh(mean) + fc_self(x)`` against ``lin_l(mean) +
lin_r(x)``; tests/training/test_pyg_train.py checks it with copied weights) and start from their frameworks' own initial
weights (DGL's Glorot with ReLU gain, PyG's Kaiming-uniform). Accuracy is the test accuracy at the evaluated epoch
of best validation accuracy, both evaluated with sampled neighbourhoods at the training fanouts; mean and standard
deviation over ``--seeds`` seeds. ``within noise``: the difference of the means is at most twice its standard error
(Welch; ``p`` from Welch's t-test).

Correctness first: before training, a batch of our PyG loader must carry the table's rows at its ``n_id``, the
labels of its seeds and only edges of the graph.

    python bench/training/pyg_accuracy.py [--datasets cora,citeseer,...] [--seeds 5] [--data-root ../shared/data]
    dgl-zerocopy bench pyg_accuracy  (the same)

Results: ``bench/results/pyg_accuracy.{csv,json,png,md}`` (``--out``), the exact command in each.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: common.py
from common import REAL_GRAPH_CONFIGS, RESULTS, SeedRuns, accuracy_bars, chosen, command_line, machine, markdown_table, save_figure, write_results  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
ROUTES = ("dgl", "pyg")
# GraphSAGE on every graph: the GCN config of the Planetoid graphs trains SAGE here (SAGEConv keeps its own root weight).
SAGE_OVER_GCN = {"model": "sage", "self_loop": False}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default=",".join(REAL_GRAPH_CONFIGS), help=f"comma-separated, from: {', '.join(REAL_GRAPH_CONFIGS)}")
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 (each: the split of the GraphData graphs, the initial weights, the draws)")
    parser.add_argument("--routes", default=",".join(ROUTES), help="comma-separated, from: dgl, pyg")
    parser.add_argument("--data-root", default=str(REPO.parent / "shared" / "data"), help="folder of the real datasets")
    parser.add_argument("--epochs", type=int, help="override every config's epochs (quick runs)")
    parser.add_argument("--out", default=str(RESULTS / "pyg_accuracy"), help="result path without suffix")
    args = parser.parse_args(argv)
    args.dataset_list = chosen(parser, args.datasets, REAL_GRAPH_CONFIGS, "dataset")
    args.route_list = chosen(parser, args.routes, ROUTES, "route")
    if not args.dataset_list or not args.route_list or args.seeds < 1:
        parser.error("--datasets and --routes must name at least one each, and --seeds must be at least 1")
    return args


def config(name: str, route: str, seed: int, epochs: int | None = None):
    """The run of ``name`` through ``route`` (module docstring)."""
    from dgl_zerocopy.training.config import build_config, read_yaml

    overrides = {"dataset": name, "device": "cpu", "feature_source": "cpu", "frontend": route, "seed": seed, "epochs": epochs}
    file_values = read_yaml(REPO / "configs" / REAL_GRAPH_CONFIGS[name])
    if file_values.get("model") == "gcn":
        file_values = {**file_values, **SAGE_OVER_GCN}
    return build_config(file_values, overrides)


def check_pyg_batch(dataset, cfg) -> None:
    """Correctness first: one training batch of our PyG loader holds the table's rows at ``n_id``, the seeds
    first with their labels, and only edges of the graph (the path the PyG route's accuracy is measured through)."""
    from dgl_zerocopy.pyg import NeighborLoader
    from dgl_zerocopy.pyg.datasets import to_pyg

    data = to_pyg(dataset, masks=False)
    seeds = torch.from_numpy(dataset.train_idx)
    loader = NeighborLoader(data, num_neighbors=list(cfg.fanouts), input_nodes=seeds, batch_size=cfg.batch_size, shuffle=False)
    try:
        batch = next(iter(loader))
    finally:
        loader.close()
    n_id = batch.n_id.numpy()
    src, dst = n_id[batch.edge_index[0].numpy()], n_id[batch.edge_index[1].numpy()]
    edges = set(zip(dataset.indices.tolist(), np.repeat(np.arange(dataset.num_nodes), np.diff(dataset.indptr)).tolist()))
    if not np.array_equal(batch.x.numpy(), dataset.features[n_id]):
        raise SystemExit(f"{dataset.name}: the PyG batch's x differs from the table at its n_id")
    if not (np.array_equal(n_id[: batch.batch_size], dataset.train_idx[: batch.batch_size]) and np.array_equal(batch.y.numpy(), dataset.labels[n_id])):
        raise SystemExit(f"{dataset.name}: the PyG batch's seeds or labels are not the dataset's")
    if not all((int(s), int(d)) in edges for s, d in zip(src, dst)):
        raise SystemExit(f"{dataset.name}: the PyG batch holds an edge the graph does not")


def run(name: str, route: str, args: argparse.Namespace) -> dict:
    from dgl_zerocopy.data import load_dataset
    from dgl_zerocopy.training.pyg_train import train_pyg
    from dgl_zerocopy.training.train import train

    fit = train_pyg if route == "pyg" else train

    runs = SeedRuns()
    cfg = None
    for seed in range(args.seeds):
        cfg = config(name, route, seed, args.epochs)
        start = time.perf_counter()
        dataset = load_dataset(name, root=args.data_root, split_seed=seed)
        if seed == 0 and route == "pyg":
            check_pyg_batch(dataset, cfg)
        runs.add(fit(cfg, dataset, progress=False), start, f"{name} [{route}] seed {seed}")
        del dataset
    return {
        "dataset": name,
        "route": route,
        "model": "GraphSAGE (PyG SAGEConv)" if route == "pyg" else "GraphSAGE (dgl_zerocopy.nn.SAGEConv)",
        "fanouts": ",".join(map(str, cfg.fanouts)),
        "batch_size": cfg.batch_size,
        "hidden": cfg.hidden,
        "epochs": cfg.epochs,
        "seeds": args.seeds,
        **runs.accuracy(ddof=1),
        **runs.times(),
        "seconds_per_run": float(np.mean(runs.seconds)),
    }


def compare(rows: list[dict]) -> None:
    """Add to each ``pyg`` row its difference from the ``dgl`` row of its dataset, the standard error of that
    difference, Welch's p and whether the difference is within noise (at most twice its standard error)."""
    for r in rows:
        base = next((b for b in rows if b["dataset"] == r["dataset"] and b["route"] == "dgl"), None)
        if r["route"] == "dgl" or base is None:
            r.update(diff_to_dgl=float("nan"), diff_se=float("nan"), welch_p=float("nan"), within_noise="")
            continue
        a, b = (np.array(x["test_accs"].split(), dtype=float) for x in (r, base))
        se = math.sqrt(np.var(a, ddof=1) / len(a) + np.var(b, ddof=1) / len(b)) if min(len(a), len(b)) > 1 else float("nan")
        diff = float(a.mean() - b.mean())
        p = float("nan")
        if min(len(a), len(b)) > 1 and se > 0:
            from scipy.stats import ttest_ind

            p = float(ttest_ind(a, b, equal_var=False).pvalue)
        r.update(diff_to_dgl=diff, diff_se=se, welch_p=p, within_noise="" if math.isnan(se) else ("yes" if abs(diff) <= 2 * se else "no"))


def markdown(rows: list[dict], meta: dict) -> str:
    """The table for the docs, with the exact command above it."""
    above = [
        f"`{meta['command']}`",
        "",
        f"{meta['device']}; {meta['machine']}; seeds {meta['seeds']}; {meta['rule']}.",
        "Times are wall clock on the machine as it was (shared by other jobs), not a speed comparison: bench/training/pyg_epoch.py is.",
        "",
    ]
    header = (
        "| dataset | route | fanouts | batch | hidden | epochs | test accuracy % (mean ± std) | pyg - dgl (points ± SE) | Welch p | within noise "
        "| epoch s (median) | eval s (median) |"
    )
    return "\n".join(above) + "\n" + markdown_table(header, map(_table_row, rows)) + "\n"


def _table_row(r: dict) -> str:
    diff = "-" if math.isnan(r["diff_to_dgl"]) else f"{100 * r['diff_to_dgl']:+.2f} ± {100 * r['diff_se']:.2f}"
    p = "-" if math.isnan(r["welch_p"]) else f"{r['welch_p']:.2f}"
    return (
        f"| {r['dataset']} | {r['route']} | {r['fanouts']} | {r['batch_size']} | {r['hidden']} | {r['epochs']} | "
        f"{100 * r['test_acc_mean']:.2f} ± {100 * r['test_acc_std']:.2f} | {diff} | {p} | {r['within_noise'] or '-'} | "
        f"{r['epoch_time_median']:.3f} | {r['eval_time_median']:.3f} |"
    )


def plot(rows: list[dict], meta: dict, path: Path) -> None:
    labels = {"dgl": "DGL route (dgl_zerocopy.nn SAGEConv)", "pyg": "PyG route (PyG SAGEConv, dgl_zerocopy.pyg loader)"}
    fig, ax, x, datasets = accuracy_bars(rows, "route", labels.__getitem__, 1.4)
    ax.set_xticks(x, datasets, fontsize=8)
    ax.set_ylabel("test accuracy % (mean ± std)")
    ax.set_ylim(50, 100)
    ax.set_title(f"GraphSAGE, two front ends; {meta['device']}; seeds {meta['seeds']}; best-validation epoch", fontsize=8)
    ax.legend(fontsize=8, loc="upper center", ncol=2)
    save_figure(fig, path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    meta = {
        "command": command_line(),
        "machine": machine(),
        "device": "cpu (no GPU)" if not torch.cuda.is_available() else f"cpu ({torch.cuda.get_device_name()} present, not used)",
        "rule": "test accuracy at the evaluated epoch of best validation accuracy; mean and sample std over seeds",
        "seeds": f"0..{args.seeds - 1}",
    }
    rows = []
    for name in args.dataset_list:
        for route in args.route_list:
            rows.append(run(name, route, args))
            r = rows[-1]
            print(f"{name} [{route}]: test {100 * r['test_acc_mean']:.2f} ± {100 * r['test_acc_std']:.2f} %, epoch {r['epoch_time_median']:.3f}s", flush=True)
        table = write(rows, meta, Path(args.out))  # after each dataset: a long run's finished datasets are kept
    print("\n" + table)


def write(rows: list[dict], meta: dict, out: Path) -> str:
    """The rows so far, compared, as CSV, JSON, PNG and the markdown table (returned)."""
    compare(rows)
    csv_path, _ = write_results(out.name, rows, meta, out.parent)
    plot(rows, meta, csv_path.with_suffix(".png"))
    table = markdown(rows, meta)
    csv_path.with_suffix(".md").write_text(table, encoding="utf-8")
    return table


if __name__ == "__main__":
    main()
