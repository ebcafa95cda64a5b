"""CPU gather of sampled feature rows: which way to slice a host table is fastest.

On real sampled batches of the synthetic graph (fanouts 15,10,5, batch 1024), compares
  fancy     ``feat[ids]``: what plain scripts do (new output per batch)
  dgl       DGL's prefetch path (``TensorStorage.fetch``, what ``prefetch_node_feats`` runs)
  select    ``torch.index_select(feat, 0, ids)``: new output per batch
  select_out ``torch.index_select(..., out=buf)`` into a reused buffer (the ``cpu`` backend)
  store     ``FeatureStore(backend="cpu").gather`` (select_out plus the id check)
against ``copy``: a plain copy of the same number of bytes into a reused buffer (the ceiling).

    python bench/cpu_gather.py [--batches 8] [--repeats 5]
"""
from __future__ import annotations

import argparse
import os

import numpy as np
import torch

from common import command_line, machine, summarize, time_repeated, write_results

os.environ.setdefault("DGLBACKEND", "pytorch")


def sampled_batches(dataset, fanouts: list[int], batch_size: int, count: int, seed: int) -> list[torch.Tensor]:
    import dgl

    np.random.seed(seed)
    dgl.seed(seed)
    graph = dataset.to_dgl()
    loader = dgl.dataloading.DataLoader(graph, torch.from_numpy(dataset.train_idx), dgl.dataloading.NeighborSampler(fanouts), batch_size=batch_size, shuffle=True)
    batches = []
    for input_nodes, _, _ in loader:
        batches.append(input_nodes)
        if len(batches) == count:
            break
    return batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=8, help="sampled batches to gather")
    parser.add_argument("--repeats", type=int, default=5, help="timed gathers per batch and method")
    parser.add_argument("--num-nodes", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", default=None, help="PNG path (default bench/results/cpu_gather.png)")
    args = parser.parse_args()

    from dgl.storages import TensorStorage

    from dgl_zerocopy import FeatureStore
    from dgl_zerocopy.data import SyntheticSpec, load_dataset

    dataset = load_dataset("synthetic", synthetic=SyntheticSpec(num_nodes=args.num_nodes))
    feat = torch.from_numpy(dataset.features)
    batches = sampled_batches(dataset, [15, 10, 5], 1024, args.batches, args.seed)
    max_rows = max(len(b) for b in batches)
    buf = torch.empty((max_rows, feat.shape[1]), dtype=feat.dtype)
    store = FeatureStore(feat, backend="cpu", device="cpu")
    storage = TensorStorage(feat)
    row_bytes = feat.shape[1] * feat.element_size()

    rows = []
    for i, ids in enumerate(batches):
        n = len(ids)
        out = buf[:n]
        src = feat[:n]
        reference = feat[ids]
        methods = {
            "copy": lambda: out.copy_(src),
            "fancy": lambda: feat[ids],
            "dgl": lambda: storage.fetch(ids, "cpu"),
            "select": lambda: torch.index_select(feat, 0, ids),
            "select_out": lambda: torch.index_select(feat, 0, ids, out=out),
            "store": lambda: store.gather(ids),
        }
        for name, fn in methods.items():
            if name != "copy":  # correctness first: every method equals feat[ids]
                torch.testing.assert_close(fn(), reference, rtol=0, atol=0)
            for t in time_repeated(fn, args.repeats):
                rows.append({"method": name, "batch": i, "rows": n, "bytes": n * row_bytes, "seconds": t, "gbps": n * row_bytes / t / 1e9})

    summary = []
    copy_median = summarize([r["gbps"] for r in rows if r["method"] == "copy"])["median"]
    for name in methods:
        s = summarize([r["gbps"] for r in rows if r["method"] == name])
        summary.append({"method": name, **{f"gbps_{k}": v for k, v in s.items()}, "ratio_to_copy": s["median"] / copy_median})

    meta = {
        "command": command_line(),
        "machine": machine(),
        "torch_threads": torch.get_num_threads(),
        "batches": f"{len(batches)} sampled batches, fanouts 15,10,5, batch 1024, median {int(np.median([len(b) for b in batches])):,} rows x {row_bytes} B",
    }
    write_results("cpu_gather_raw", rows, meta)
    csv_path, _ = write_results("cpu_gather", summary, meta)
    _plot(summary, meta, args.plot or str(csv_path.with_suffix(".png")))

    print(f"# {meta['command']}\n# {meta['machine']}; {meta['batches']}")
    print("| method | GB/s median | GB/s q1–q3 | ratio to copy |\n|---|---|---|---|")
    for s in summary:
        print(f"| {s['method']} | {s['gbps_median']:.2f} | {s['gbps_q1']:.2f}–{s['gbps_q3']:.2f} | {s['ratio_to_copy']:.2f} |")


def _plot(summary: list[dict], meta: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [s["method"] for s in summary]
    med = np.array([s["gbps_median"] for s in summary])
    err = np.array([[s["gbps_median"] - s["gbps_q1"] for s in summary], [s["gbps_q3"] - s["gbps_median"] for s in summary]])
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.bar(names, med, yerr=err, capsize=4, color=["grey"] + ["tab:blue"] * (len(names) - 1))
    ax.set_ylabel("GB/s (useful bytes, median, IQR)")
    ax.set_title("CPU gather of sampled rows\n" + meta["batches"], fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
