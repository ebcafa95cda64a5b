"""Neighbour sampling at several graph sizes side by side: bench/sampler/sampling.py once per size, one table.

By default the products-shaped graph at 200,000 nodes (the size of the GPU check's sampling step) and at
ogbn-products' full scale (2,449,029 nodes, about 124 M stored edges), the same methods, fanouts and batches at
each; every method's first batch checked before it is timed (sampling.py's checks). Each size's run writes its own
files into a work folder; this script merges their rows (``num_nodes``, ``num_edges`` name the size; ``x_dgl_cpu``
is the ratio to DGL's CPU sampler on the same graph) into ``--out``.{csv,json,png}, the command in their header.
The full graph is generated once (about 1 GB, cached by dgl_zerocopy.data).

Arguments other than these are passed to sampling.py for every size (``--batches``, ``--repeats``, ``--fanouts``,
``--batch-size``, ``--idtype`` ...). ``--time-limit`` counts for the whole run: each size gets what is left, and a
size with nothing left is not started (its methods' rows read ``skipped: time limit``).

    python bench/sampler/sampling_sizes.py [--sizes 200000,2449029] [--methods gpu-pinned,gpu-device,gpu-snapshot,dgl-cpu] [--out STEM] [sampling.py's flags]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]  # bench/: common.py; bench/sampler/: sampling.py
import sampling  # noqa: E402
from common import RESULTS, TIME_LIMIT_STATUS, command_line, machine, markdown_table, pyplot, save_figure, write_results  # noqa: E402

SIZES = (200_000, sampling.PRODUCTS["nodes"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="comma-separated node counts (default 200000,2449029: ogbn-products' full scale)")
    parser.add_argument("--methods", help="sampling.py's --methods, at every size (default: sampling.py's)")
    parser.add_argument("--time-limit", type=float, default=0, help="seconds for the whole run (0: none)")
    parser.add_argument("--out", default=str(RESULTS / "sampling_sizes"), help="result path without suffix (default bench/results/sampling_sizes)")
    args, passed = parser.parse_known_args(argv)
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
        if not sizes or min(sizes) < 1:
            raise ValueError
    except ValueError:
        parser.error(f"--sizes must be comma-separated positive node counts, e.g. 200000,2449029, but got {args.sizes!r}")
    if "--num-nodes" in passed or "--out" in passed:
        parser.error("--num-nodes and --out are this script's own (--sizes, --out): pass them once, here")
    began = time.perf_counter()
    rows, graphs, codes = [], [], []
    meta: dict = {}
    with tempfile.TemporaryDirectory(prefix="sampling-sizes-") as work:
        for size in sizes:
            left = args.time_limit - (time.perf_counter() - began) if args.time_limit else 0
            stem = Path(work) / f"sampling_{size}"
            run = ["--num-nodes", str(size), "--out", str(stem), *passed, *(["--methods", args.methods] if args.methods else [])]
            if args.time_limit and left <= 0:
                methods = (args.methods or ",".join(sampling.default_methods())).split(",")
                rows += [{"method": m, "num_nodes": size, "status": TIME_LIMIT_STATUS} for m in methods]
                continue
            codes.append(sampling.main([*run, *(["--time-limit", f"{left:g}"] if args.time_limit else [])]))
            try:
                data = json.loads(stem.with_suffix(".json").read_text())
            except OSError:  # sampling.py stopped before its first row (a bad flag: exit 2, its error on stderr)
                continue
            meta = {**data["meta"], **meta}
            graphs.append(data["meta"]["graph"])
            rows += data["rows"]
    meta.update(command=command_line(), machine=machine(), graph=" | ".join(graphs), sizes=",".join(map(str, sizes)))
    if not rows:
        print("sampling_sizes: no size ran (see sampling.py's error above)", file=sys.stderr)
        return 2
    out = Path(args.out)
    csv_path, _ = write_results(out.name, rows, meta, out.parent)
    _plot(rows, meta, csv_path.with_suffix(".png"))
    print(f"\n# {meta['command']}\n# {meta.get('device')}; {meta['machine']}\n# {meta['graph']}\n\n{markdown(rows)}")
    return max(codes, default=0)


def markdown(rows: list[dict]) -> str:
    """The merged rows as one table, a row per method and size."""
    header = "| method | nodes | edges | ms per batch median | M sampled edges/s median | × DGL CPU | status |"
    return markdown_table(header, map(_table_row, rows), "lrrrrrl")


def _table_row(r: dict) -> str:
    if r.get("status") != "ok":
        return f"| {r['method']} | {r['num_nodes']:,} | – | – | – | – | {r['status']} |"
    ratio = r.get("x_dgl_cpu", float("nan"))
    return (
        f"| {r['method']} | {r['num_nodes']:,} | {r['num_edges']:,} | {r['ms_per_batch_median']:.2f} | {r['medges_per_s_median']:.2f} | "
        f"{'–' if not np.isfinite(ratio) else format(ratio, '.2f')} | ok |"
    )


def _plot(rows: list[dict], meta: dict, path: Path) -> None:
    plt = pyplot()

    done = [r for r in rows if r.get("status") == "ok"]
    methods = list(dict.fromkeys(r["method"] for r in done))
    sizes = list(dict.fromkeys(r["num_nodes"] for r in done))
    fig, ax = plt.subplots(figsize=(1.6 * max(1, len(methods)) + 3, 4))
    width = 0.8 / max(1, len(sizes))
    for j, size in enumerate(sizes):
        values = [next((r["medges_per_s_median"] for r in done if r["method"] == m and r["num_nodes"] == size), np.nan) for m in methods]
        ax.bar(np.arange(len(methods)) + j * width, values, width, label=f"{size:,} nodes")
    ax.set_xticks(np.arange(len(methods)) + width * (len(sizes) - 1) / 2, methods, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("M sampled edges/s (log)")
    ax.set_title(f"{meta.get('device')}: {meta.get('sampling', '')}", fontsize=7)
    if sizes:
        ax.legend(fontsize=8)
    save_figure(fig, path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
