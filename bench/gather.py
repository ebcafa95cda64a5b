"""Gather bandwidth per FeatureStore backend over a grid of feature widths, dtypes and batch sizes.

Correctness first (every method equals ``table[ids]``), then warm-up, then the median and spread
of ``--repeats`` timed gathers. Bandwidth counts useful bytes (rows x row bytes).

On a GPU: backends zerocopy, cpu (CPU gather + pinned H2D copy) and gpu (resident table), each
against ``h2d``, a pinned host-to-device copy of the same bytes (the PCIe ceiling).
On the CPU: the cpu backend against ``torch.index_select`` and ``table[ids]`` fancy indexing.

    python bench/gather.py [--rows 1000000] [--dims 100,128,256,602] [--batches 1024,16384,262144]
    dgl-zerocopy bench gather  (the same)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import command_line, machine, summarize, time_repeated, write_results  # noqa: E402

DTYPES = {"fp32": torch.float32, "fp16": torch.float16}


def methods_for(store_factory, table: torch.Tensor, ids: torch.Tensor, device: torch.device) -> dict:
    """Name -> zero-argument callable doing one gather of ``ids`` (plus the ceiling ``h2d``/``copy``)."""
    n, dim = ids.shape[0], table.shape[1]
    if device.type == "cuda":
        out = torch.empty((n, dim), dtype=table.dtype, device=device)
        pinned_src = torch.empty((n, dim), dtype=table.dtype, pin_memory=True)
        fns = {"h2d": lambda: out.copy_(pinned_src, non_blocking=True)}
        for backend, store in store_factory().items():
            fns[backend] = (lambda s=store: s.gather(ids, out=out))  # ids from the CPU sampler, as in training
        return fns
    buf = torch.empty((n, dim), dtype=table.dtype)
    src = torch.ones_like(buf)  # the same bytes, contiguous: the ceiling a gather can approach
    store = store_factory()["cpu"]
    return {
        "copy": lambda: buf.copy_(src),
        "cpu": lambda: store.gather(ids, out=buf),
        "index_select": lambda: torch.index_select(table, 0, ids),
        "fancy": lambda: table[ids],
    }


def main(argv: list[str] | None = None) -> None:
    cuda = torch.cuda.is_available()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000 if cuda else 200_000, help="table rows")
    parser.add_argument("--dims", default="100,128,256,602")
    parser.add_argument("--dtypes", default="fp32,fp16")
    parser.add_argument("--batches", default="1024,16384,262144", help="ids per gather")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", default="gather", help="result file stem under bench/results/")
    args = parser.parse_args(argv)

    from dgl_zerocopy import FeatureStore
    from dgl_zerocopy.backends import zerocopy_available

    device = torch.device("cuda" if cuda else "cpu")
    sync = torch.cuda.synchronize if cuda else None
    rng = np.random.default_rng(0)
    rows = []
    for dtype_name in args.dtypes.split(","):
        for dim in map(int, args.dims.split(",")):
            table = torch.from_numpy(rng.standard_normal((args.rows, dim), dtype=np.float32)).to(DTYPES[dtype_name])
            stores = {}

            def factory():
                if not stores:
                    stores["cpu"] = FeatureStore(table, backend="cpu", device=device)
                    if cuda:
                        stores["gpu"] = FeatureStore(table, backend="gpu", device=device)
                        if zerocopy_available():
                            stores["zerocopy"] = FeatureStore(table, backend="zerocopy", device=device)
                return stores

            for batch in map(int, args.batches.split(",")):
                ids = torch.from_numpy(rng.integers(0, args.rows, batch))
                fns = methods_for(factory, table, ids, device)
                reference = table[ids].to(device)
                for name, fn in fns.items():
                    if name not in ("h2d", "copy"):
                        torch.testing.assert_close(fn(), reference, rtol=0, atol=0)
                    useful = batch * dim * table.element_size()
                    for t in time_repeated(fn, args.repeats, warmup=3, sync=sync):
                        rows.append({"dtype": dtype_name, "dim": dim, "row_bytes": dim * table.element_size(), "batch": batch,
                                     "method": name, "seconds": t, "gbps": useful / t / 1e9})
            for s in stores.values():
                s.close()

    summary = _summarize(rows, ceiling="h2d" if cuda else "copy")
    meta = {"command": command_line(), "machine": machine(), "device": torch.cuda.get_device_name() if cuda else "cpu (no GPU)",
            "table_rows": args.rows, "repeats": args.repeats}
    write_results(f"{args.out}_raw", rows, meta)
    csv_path, _ = write_results(args.out, summary, meta)
    _plot(summary, meta, csv_path.with_suffix(".png"))
    print(f"# {meta['command']}\n# {meta['device']}; {meta['machine']}; table {args.rows:,} rows")
    print("| dtype | dim | batch | method | GB/s median | q1–q3 | ratio to ceiling |\n|---|---|---|---|---|---|---|")
    for s in summary:
        print(f"| {s['dtype']} | {s['dim']} | {s['batch']} | {s['method']} | {s['gbps_median']:.2f} | {s['gbps_q1']:.2f}–{s['gbps_q3']:.2f} | {s['ratio_to_ceiling']:.2f} |")


def _summarize(rows: list[dict], ceiling: str) -> list[dict]:
    keys = sorted({(r["dtype"], r["dim"], r["batch"]) for r in rows}, key=lambda k: (k[0], k[1], k[2]))
    summary = []
    for dtype, dim, batch in keys:
        group = [r for r in rows if (r["dtype"], r["dim"], r["batch"]) == (dtype, dim, batch)]
        methods = list(dict.fromkeys(r["method"] for r in group))
        top = summarize([r["gbps"] for r in group if r["method"] == ceiling])["median"]
        for m in methods:
            s = summarize([r["gbps"] for r in group if r["method"] == m])
            summary.append({"dtype": dtype, "dim": dim, "batch": batch, "method": m,
                            **{f"gbps_{k}": v for k, v in s.items()}, "ratio_to_ceiling": s["median"] / top})
    return summary


def _plot(summary: list[dict], meta: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dtypes = list(dict.fromkeys(s["dtype"] for s in summary))
    batch = max(s["batch"] for s in summary)
    fig, axes = plt.subplots(1, len(dtypes), figsize=(6 * len(dtypes), 3.8), squeeze=False)
    for ax, dtype in zip(axes[0], dtypes):
        sel = [s for s in summary if s["dtype"] == dtype and s["batch"] == batch]
        dims = sorted({s["dim"] for s in sel})
        methods = list(dict.fromkeys(s["method"] for s in sel))
        width = 0.8 / len(methods)
        for i, m in enumerate(methods):
            vals = [next(s for s in sel if s["dim"] == d and s["method"] == m) for d in dims]
            med = [v["gbps_median"] for v in vals]
            err = [[v["gbps_median"] - v["gbps_q1"] for v in vals], [v["gbps_q3"] - v["gbps_median"] for v in vals]]
            ax.bar(np.arange(len(dims)) + i * width, med, width, yerr=err, capsize=3, label=m)
        ax.set_xticks(np.arange(len(dims)) + 0.4 - width / 2, [str(d) for d in dims])
        ax.set_xlabel(f"feature dim ({dtype})")
        ax.set_ylabel("GB/s (median, IQR)")
        ax.set_title(f"{meta['device']}: gather of {batch:,} random rows", fontsize=9)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
