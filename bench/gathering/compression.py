"""How well each codec reconstructs the features of the real graphs: which int8 form to default to.

For each dataset and codec (fp16, bf16 and the four int8 forms: per column or per row, min/max or
absmax), compresses the feature table (chunked, as the store does), decodes it whole with the
reference decode and reports
  rel_error        ||X - X'|| / ||X|| over the whole table (dominated by the large columns)
  col_error_mean   the mean over columns of ||x_j - x'_j|| / ||x_j||: every column counts alike
  col_error_max    the worst column
  cols_lost        columns whose relative error is 0.5 or more: their information is gone
  nonzero_p99      99th percentile of |x - x'| / |x| over the non-zero entries
  compress_s       seconds to compress (one thread of NumPy, slab by slab)
plus ``hetero``: the synthetic graph's features with columns scaled 10^-3..10^0 (log-uniform), the
case of features whose columns differ 100x or more in range (what PCA'd or embedding features look
like), where a row-wide scale loses the small columns. Correctness first: every int8 decode is
checked within half a step of the original (the codec's error bound). Writes CSV/JSON and a PNG.

    python bench/gathering/compression.py [--datasets cora,...,synthetic,hetero] [--data-root ../shared/data] [--num-nodes 200000]
    dgl-zerocopy bench compression  (the same)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: common.py
from common import command_line, grouped_bars, machine, save_figure, write_results  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DATASETS = ("cora", "citeseer", "amazon-computers", "amazon-photo", "coauthor-cs", "coauthor-physics", "synthetic", "hetero")
FORMS = [("fp16", None, None), ("bf16", None, None)] + [("int8", a, m) for a in ("column", "row") for m in ("minmax", "absmax")]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default=",".join(DATASETS), help=f"comma-separated, from: {', '.join(DATASETS)}")
    parser.add_argument("--data-root", default=str(REPO.parent / "shared" / "data"), help="folder of the real datasets")
    parser.add_argument("--num-nodes", type=int, default=200_000, help="synthetic graph size (also for hetero)")
    parser.add_argument("--out", default="compression")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.datasets.split(",") if n.strip()]
    if not names or any(n not in DATASETS for n in names):
        parser.error(f"--datasets must name some of {', '.join(DATASETS)}, but got {args.datasets!r}")

    rows = []
    for name in names:
        x = _features(name, args)
        print(f"{name}: {x.shape[0]:,} x {x.shape[1]:,}, {100 * np.count_nonzero(x) / x.size:.1f} % non-zero", flush=True)
        for codec, axis, method in FORMS:
            rows.append({"dataset": name, "rows": x.shape[0], "cols": x.shape[1], **_measure(x, codec, axis, method)})
            r = rows[-1]
            print(
                f"  {r['form']:>18}: rel {r['rel_error']:.2e}, columns mean {r['col_error_mean']:.2e} max {r['col_error_max']:.2e}, "
                f"lost {r['cols_lost']}, non-zero p99 {r['nonzero_p99']:.2e}, {r['compress_s']:.2f}s",
                flush=True,
            )
        del x

    meta = {
        "command": command_line(),
        "machine": machine(),
        "metrics": "rel_error = ||X - X'||_F / ||X||_F; col_error = ||x_j - x'_j|| / ||x_j|| per non-zero column; "
        "cols_lost = columns with col_error >= 0.5; nonzero_p99 = 99th percentile of |x - x'| / |x| over non-zero entries",
        "hetero": f"synthetic {args.num_nodes:,}-node features, column j scaled by 10^u_j, u_j ~ U(-3, 0) (seed 0)",
    }
    csv_path, _ = write_results(args.out, rows, meta)
    _plot(rows, csv_path.with_suffix(".png"))
    print(f"\n# {meta['command']}\n# {meta['machine']}")
    print("| dataset | form | error (whole table) | column error, mean | column error, worst | columns lost | non-zero entries, p99 |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['dataset']} | {r['form']} | {r['rel_error']:.1e} | {r['col_error_mean']:.1e} | {r['col_error_max']:.1e} | "
            f"{r['cols_lost']} | {r['nonzero_p99']:.1e} |"
        )


def _features(name: str, args) -> np.ndarray:
    from dgl_zerocopy.data import SyntheticSpec, load_dataset

    spec = SyntheticSpec(num_nodes=args.num_nodes)
    if name == "hetero":
        x = np.array(load_dataset("synthetic", synthetic=spec).features)
        x *= (10.0 ** np.random.default_rng(0).uniform(-3, 0, x.shape[1])).astype(np.float32)
        return x
    return np.ascontiguousarray(load_dataset(name, synthetic=spec, root=args.data_root).features)


def _measure(x: np.ndarray, codec: str, axis: str | None, method: str | None) -> dict:
    from dgl_zerocopy import compress

    start = time.perf_counter()
    table = compress(x, codec, axis=axis, method=method)
    seconds = time.perf_counter() - start
    decoded = table.decode().numpy()
    if codec == "int8":  # correctness first: within half a step (plus float32 rounding of the decode)
        scale, offset = table.codec.scale.numpy(), table.codec.offset.numpy()
        if axis == "row":
            scale, offset = scale[:, None], offset[:, None]
        slack = 4 * np.finfo(np.float32).eps * (np.abs(x) + np.abs(offset) + 128 * scale)
        if not np.all(np.abs(decoded.astype(np.float64) - x) <= scale / 2 + slack):
            raise SystemExit(f"int8 {axis} {method}: a value decodes further than half a step from the original")
    err = decoded.astype(np.float64)
    err -= x
    col_norm = np.sqrt(np.einsum("ij,ij->j", x, x, dtype=np.float64))
    col_err = np.sqrt(np.einsum("ij,ij->j", err, err))
    live = col_norm > 0
    col_rel = col_err[live] / col_norm[live]
    nonzero = x != 0
    rel_nz = np.abs(err[nonzero]) / np.abs(x[nonzero])
    return {
        "form": codec if codec != "int8" else f"int8-{axis}-{method}",
        "codec": codec,
        "axis": axis or "",
        "method": method or "",
        "rel_error": float(np.sqrt((col_err**2).sum() / max((col_norm**2).sum(), 1e-300))),
        "col_error_mean": float(col_rel.mean()) if len(col_rel) else 0.0,
        "col_error_max": float(col_rel.max()) if len(col_rel) else 0.0,
        "cols_lost": int((col_rel >= 0.5).sum()),
        "nonzero_p99": float(np.quantile(rel_nz, 0.99)) if len(rel_nz) else 0.0,
        "bytes_per_value": table.codes.element_size(),
        "compress_s": seconds,
    }


def _plot(rows: list[dict], path: Path) -> None:
    fig, ax, x, datasets = grouped_bars(rows, "form", lambda r: max(r["col_error_mean"], 1e-9), inch_per_dataset=1.2, margin=3)
    ax.set_yscale("log")
    ax.set_xticks(x, datasets, fontsize=8)
    ax.set_ylabel("mean column relative error")
    ax.set_title("reconstruction error per codec (lower is better); every column weighs alike", fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    save_figure(fig, path, dpi=120)


if __name__ == "__main__":
    main()
