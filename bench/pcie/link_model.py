"""The link model (dgl_zerocopy/cuda/gather/link_model.py) against the committed H200 zero-copy figures.

Reads the committed results (``bench/results/gpu/h200-2026-11-27/``: run2-full-gather.csv, run3-sort.csv
and the quick run's run1-summary.json, whose 0.25 GB table of at most 500,000 rows is the GPU check's
quick gather), prints the model beside every zero-copy figure (ours, naive, sorted ids; every row size
and batch), then what the model predicts for the default kernel shape at 2 GB and 57 GB tables.
No GPU needed; the predictions are a model, not a measurement.

``--fit`` fits the constants again (minimax of the relative error over the figures whose quartiles
spread by less than 15 %, Nelder-Mead from the current constants; needs SciPy) and prints them for
``FITTED``.

    python bench/pcie/link_model.py [--fit] [--stem link_model]

Writes bench/results/STEM.{csv,json,png}; prints a markdown table.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import replace
from pathlib import Path

from dgl_zerocopy.cuda.gather import gather_plan, link_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: common.py
from common import RESULTS, command_line, machine, pyplot, save_figure, table_head, write_results  # noqa: E402

H200 = RESULTS / "gpu" / "h200-2026-11-27"
#: The quick GPU check's gather table (bench/gpu_check/gpu_check_main.py, GATHER_ARGS["quick"]).
QUICK_ROWS, QUICK_TABLE_GB = 500_000, 0.25
#: The widths the default-shape predictions are printed for (ogbn-products 400 B, papers100M 512 B).
PREDICT_ROWS = (128, 256, 400, 512, 1024, 4096)


def committed_cells(folder: Path = H200) -> list[link_model.MeasuredCell]:
    """Every committed zero-copy figure the model is held to."""
    return [
        *link_model.read_measurements(folder / "run2-full-gather.csv"),
        *link_model.read_measurements(folder / "run3-sort.csv"),
        *link_model.read_measurements(folder / "run1-summary.json", rows=QUICK_ROWS, table_gb=QUICK_TABLE_GB),
    ]


def worst_error(cells: list[link_model.MeasuredCell], constants: link_model.LinkConstants) -> float:
    """The largest |log(model / measured)| over the held figures."""
    return max(abs(math.log1p(r["error"])) for r in link_model.compare(cells, constants) if r["held"])


def fit(cells: list[link_model.MeasuredCell]) -> link_model.LinkConstants:
    """Constants minimising the worst relative error (log scale), from :data:`FITTED`."""
    from scipy.optimize import minimize

    names = link_model.FITTED_NAMES
    start = link_model.FITTED

    def constants(x) -> link_model.LinkConstants:
        return replace(start, **{n: getattr(start, n) * math.exp(v) for n, v in zip(names, x, strict=True)})

    def loss(x) -> float:
        try:
            return worst_error(cells, constants(x))
        except ValueError:
            return math.inf

    result = minimize(loss, [0.0] * len(names), method="Nelder-Mead", options=dict(maxiter=20000, maxfev=20000, xatol=1e-6, fatol=1e-8))
    return constants(result.x)


def predictions(constants: link_model.LinkConstants) -> list[dict]:
    """The default shape (and the one-window shape the runs measured) at 2 GB and 57 GB, random and sorted ids."""
    rows = []
    for row_bytes in PREDICT_ROWS:
        for table_gb in (2, 57):
            for order in link_model.ORDERS:
                one_window = gather_plan.fewest_threads_per_row(row_bytes, 16)
                for shape, lanes in (("default", None), ("one window per row", one_window)):
                    if shape != "default" and lanes == gather_plan.default_threads_per_row(row_bytes, 16):
                        continue  # the same shape
                    e = link_model.estimate(row_bytes, 262144, table_gb * 1e9, order=order, threads_per_row=lanes, constants=constants)
                    rows.append(
                        dict(
                            row_bytes=row_bytes,
                            table_gb=table_gb,
                            order=order,
                            shape=shape,
                            threads_per_row=e.threads_per_row,
                            model_gbps=e.gbps,
                            bound=e.bound,
                        )
                    )
    return rows


def markdown(compared: list[dict]) -> str:
    lines = table_head("| source | method | row B | batch | table GB | measured GB/s | spread | model GB/s | error | held | bound |", "llrrrrrrrll")
    for r in compared:
        lines.append(
            f"| {r['source']} | {r['method']} | {r['row_bytes']} | {r['batch']} | {r['table_bytes'] / 1e9:.2f} | {r['gbps']:.1f} | {r['spread']:.0%} "
            f"| {r['model_gbps']:.1f} | {r['error']:+.1%} | {'yes' if r['held'] else 'no (noisy)'} | {r['bound']} |"
        )
    return "\n".join(lines)


def plot(compared: list[dict], path: Path, title: str) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6, 5.5))
    styles = {"zerocopy": ("s", "tab:blue"), "zerocopy-naive": ("o", "tab:orange"), "zerocopy+sort_ids": ("^", "tab:green")}
    for method, (marker, color) in styles.items():
        for held in (True, False):
            mine = [r for r in compared if r["method"] == method and r["held"] == held]
            ax.scatter(
                [r["gbps"] for r in mine],
                [r["model_gbps"] for r in mine],
                marker=marker,
                facecolors=color if held else "none",
                edgecolors=color,
                label=f"{method}{'' if held else ' (noisy)'}",
                s=22,
            )
    top = 1.1 * max(max(r["gbps"], r["model_gbps"]) for r in compared)
    ax.plot([0, top], [0, top], color="grey", lw=0.8)
    for factor in (0.85, 1.15):
        ax.plot([0, top], [0, top * factor], color="grey", lw=0.6, ls=":")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel("measured GB/s (H200, committed)")
    ax.set_ylabel("link model GB/s")
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(True, alpha=0.3)
    ax.set_title(title, fontsize=8)
    save_figure(fig, path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true", help="fit the constants again (SciPy) and use them")
    parser.add_argument("--stem", default="link_model", help="output name under bench/results/")
    args = parser.parse_args()

    command = command_line()
    cells = committed_cells()
    constants = fit(cells) if args.fit else link_model.FITTED
    compared = link_model.compare(cells, constants)
    held = [r for r in compared if r["held"]]
    worst = max(abs(r["error"]) for r in held)
    meta = {
        "command": command,
        "machine": machine(),
        "measurements": ", ".join(sorted({c.source for c in cells})) + f" ({H200.relative_to(RESULTS.parent.parent)})",
        "constants": ", ".join(f"{k}={v:.4g}" for k, v in constants.as_dict().items()),
        "held": f"{len(held)} of {len(compared)} figures (quartile spread <= {link_model.NOISE_LIMIT:.0%}); worst error {worst:.1%}",
    }
    extra = {"constants": constants.as_dict(), "predictions": predictions(constants)}
    csv_path, json_path = write_results(args.stem, compared, meta, extra=extra)
    png_path = RESULTS / f"{args.stem}.png"
    plot(compared, png_path, f"link model vs H200 zero-copy figures: {len(held)} held, worst {worst:.1%}")
    print(f"command: {command}\n")
    print(markdown(compared))
    print(f"\nheld: {meta['held']}\nconstants: {meta['constants']}\n")
    print("| row B | table GB | order | shape | lanes/row | model GB/s | bound |\n|---:|---:|---|---|---:|---:|---|")
    for p in extra["predictions"]:
        print(f"| {p['row_bytes']} | {p['table_gb']} | {p['order']} | {p['shape']} | {p['threads_per_row']} | {p['model_gbps']:.1f} | {p['bound']} |")
    print("\nwrote " + ", ".join(os.path.relpath(p) for p in (csv_path, json_path, png_path)))


if __name__ == "__main__":
    main()
