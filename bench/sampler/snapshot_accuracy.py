"""The accuracy part of bench/sampler/snapshot.py (``--parts accuracy``; its docstring says what is measured)."""

from __future__ import annotations

import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: common.py
from common import accuracy_bars, markdown_table, paired_cells, save_figure, write_results  # noqa: E402

#: Batch size per dataset: the real graphs' training sets (20 per class, or Planetoid's 140/120) in
#: one or two batches; the synthetic graph's 8 % in batches of 1024.
BATCH = {"synthetic": 1024}
DEFAULT_BATCH = 256


def sampler_factories(fanouts: list[int], refreshes: list[float]) -> dict:
    import dgl

    from dgl_zerocopy.sampling import SnapshotSampler

    made = {"neighbor": lambda: dgl.dataloading.NeighborSampler(fanouts)}
    for r in refreshes:
        made[f"snapshot r={r:g}"] = lambda r=r: SnapshotSampler(fanouts, refresh=r)
    return made


def make_model(in_dim: int, hidden: int, classes: int, layers: int):
    import dgl.nn
    import torch
    import torch.nn.functional as F

    class SAGE(torch.nn.Module):
        """GraphSAGE (mean); ``graphs``: one block per layer, or the whole graph once per layer."""

        def __init__(self) -> None:
            super().__init__()
            dims = [in_dim] + [hidden] * (layers - 1) + [classes]
            self.convs = torch.nn.ModuleList(dgl.nn.SAGEConv(a, b, "mean") for a, b in zip(dims[:-1], dims[1:]))

        def forward(self, graphs, x):
            for i, (conv, g) in enumerate(zip(self.convs, graphs)):
                x = conv(g, x)
                if i + 1 < len(self.convs):
                    x = F.dropout(F.relu(x), 0.5, self.training)
            return x

    return SAGE()


def train_once(name: str, data, g, sampler, args, seed: int) -> dict:
    """Train with ``sampler`` through our DataLoader; the test accuracy at the evaluated epoch of best
    validation accuracy (full-neighbourhood inference on the whole graph)."""
    import torch
    import torch.nn.functional as F

    from dgl_zerocopy import DataLoader

    epochs = args.synthetic_epochs if name == "synthetic" else args.epochs
    feat, labels = torch.from_numpy(np.ascontiguousarray(data.features)), torch.from_numpy(data.labels)
    val, test = torch.from_numpy(data.val_idx), torch.from_numpy(data.test_idx)
    torch.manual_seed(seed)  # the same initial weights for every sampler
    model = make_model(feat.shape[1], args.hidden, data.num_classes, len(args.fanout_list))
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    loader = DataLoader(
        g, torch.from_numpy(data.train_idx), sampler, batch_size=BATCH.get(name, DEFAULT_BATCH), shuffle=True,
        features={"feat": feat}, labels={"label": labels}, prefetch=0, seed=seed,
    )  # fmt: skip
    best = (-1.0, math.nan, -1)
    start = time.perf_counter()
    for epoch in range(epochs):
        model.train()
        for _, _, blocks in loader:  # our loader calls sampler.on_epoch_start(g) first: the refresh
            loss = F.cross_entropy(model(blocks, blocks[0].srcdata["feat"]), blocks[-1].dstdata["label"])
            opt.zero_grad()
            loss.backward()
            opt.step()
        if (epoch + 1) % args.eval_every == 0 or epoch + 1 == epochs:
            model.eval()
            with torch.no_grad():
                pred = model([g] * len(args.fanout_list), feat).argmax(1)
            accs = [float((pred[idx] == labels[idx]).float().mean()) for idx in (val, test)]
            if accs[0] > best[0]:
                best = (accs[0], accs[1], epoch)
    loader.close()
    share = sampler.snapshot.src.numel() / g.num_edges() if getattr(sampler, "snapshot", None) is not None else math.nan
    return {"val": best[0], "test": best[1], "epoch": best[2], "seconds": time.perf_counter() - start, "snapshot_share": share}


def run_accuracy(args, names: list[str], base: dict) -> None:
    from dgl_zerocopy.data import SyntheticSpec, load_dataset

    args.fanout_list = [int(f) for f in args.fanouts.split(",")]
    refreshes = [float(r) for r in args.refresh.split(",")]
    factories = sampler_factories(args.fanout_list, refreshes)
    rows = []
    for name in names:
        runs = {s: [] for s in factories}
        for seed in range(args.seeds):
            data = load_dataset(name, synthetic=SyntheticSpec(num_nodes=args.synthetic_nodes), root=args.data_root, split_seed=seed)
            g = data.to_dgl()
            for sampler_name, make in factories.items():
                r = train_once(name, data, g, make(), args, seed)
                runs[sampler_name].append(r)
                print(f"  {name} seed {seed} {sampler_name}: test {100 * r['test']:.2f} % at epoch {r['epoch']} ({r['seconds']:.1f}s)", flush=True)
            del data, g
        rows += summarize_dataset(name, runs, args)
    meta = {
        **base,
        "model": f"GraphSAGE mean, {len(args.fanout_list)} layers, hidden {args.hidden}, dropout 0.5, Adam lr 0.01 wd 5e-4",
        "fanouts": args.fanouts,
        "epochs": f"{args.epochs} (synthetic {args.synthetic_epochs}, {args.synthetic_nodes} nodes), evaluated every {args.eval_every}",
        "rule": "test accuracy at the evaluated epoch of best validation accuracy (full-graph inference); mean and std over seeds",
        "seeds": f"0..{args.seeds - 1}",
        "goal": "|snapshot - neighbor| <= max(0.5 points, neighbor's std) at refresh >= 0.1",
    }
    csv_path, _ = write_results("snapshot_accuracy", rows, meta, Path(args.out_dir))
    plot_accuracy(rows, meta, csv_path.with_suffix(".png"))
    print(f"\n# {meta['command']}\n# {meta['model']}; fanouts {meta['fanouts']}; epochs {meta['epochs']}; seeds {meta['seeds']}; {meta['rule']}")
    print(results_table(rows))


def results_table(rows: list[dict]) -> str:
    """The printed table: a row per dataset and sampler, its difference from the neighbor sampler on the same seeds."""
    lines = []
    for r in rows:
        diff, within = paired_cells(r, "neighbor", "diff_to_neighbor", "within_goal")
        share = "-" if math.isnan(r["snapshot_share_of_edges"]) else f"{r['snapshot_share_of_edges']:.2f}"
        lines.append(
            f"| {r['dataset']} | {r['sampler']} | {100 * r['test_acc_mean']:.2f} ± {100 * r['test_acc_std']:.2f} | {diff} | {within} | {share} | {r['seconds_median']:.1f} |"
        )
    header = "| dataset | sampler | test % (mean ± std) | - neighbor (points, paired std) | within goal | snapshot share of edges | s per run |"
    return markdown_table(header, lines)


def summarize_dataset(name: str, runs: dict, args) -> list[dict]:
    base = [r["test"] for r in runs["neighbor"]]
    rows = []
    for sampler_name, results in runs.items():
        accs = [r["test"] for r in results]
        paired = [a - b for a, b in zip(accs, base)]  # same seed: same split, weights and batch order
        diff = statistics.fmean(paired)
        rows.append(
            {
                "dataset": name,
                "sampler": sampler_name,
                "refresh": math.nan if sampler_name == "neighbor" else float(sampler_name.split("=")[1]),
                "fanouts": args.fanouts,
                "seeds": len(accs),
                "test_acc_mean": statistics.fmean(accs),
                "test_acc_std": float(np.std(accs)),
                "test_accs": " ".join(f"{a:.4f}" for a in accs),
                "diff_to_neighbor": diff,
                "diff_std": float(np.std(paired)),
                "within_goal": bool(abs(diff) <= max(0.005, float(np.std(base)))),
                "snapshot_share_of_edges": statistics.fmean(r["snapshot_share"] for r in results),
                "seconds_median": statistics.median(r["seconds"] for r in results),
            }
        )
    return rows


def plot_accuracy(rows: list[dict], meta: dict, path: Path) -> None:
    fig, ax, x, datasets = accuracy_bars(rows, "sampler", inch_per_dataset=1.6, capsize=2)
    kinds = list(dict.fromkeys(r["sampler"] for r in rows))
    low = min(100 * r["test_acc_mean"] - 100 * r["test_acc_std"] for r in rows)
    ax.set_ylim(max(0, low - 5), 100)
    ax.set_xticks(x, datasets, fontsize=8)
    ax.set_ylabel("test accuracy % (mean ± std over seeds)")
    ax.set_title(f"{meta['model']}; fanouts {meta['fanouts']}; seeds {meta['seeds']}", fontsize=8)
    ax.legend(fontsize=7, ncol=len(kinds), loc="lower right")
    save_figure(fig, path)
