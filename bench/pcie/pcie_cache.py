"""PCIe request model of the fused cached gather: link bytes per gathered row against the hit rate,
for every stored form (fp32, fp16, bf16, int8 per column and per row), at the headline widths.

Runs the real kernel (kernels/gather.cu with a slot map: hits read from a cache buffer that stands
for device memory, misses from the host table) and the same gather without a cache on the CPU
emulator, checks both outputs against a NumPy decode, and applies the request model of
dgl_zerocopy/cuda/gather/pcie_model.py counting only host loads. No GPU needed; a model, not a measurement.
The hit rate is set here by construction; bench/gathering/cache.py measures the hit rates the policies reach.

    python bench/pcie/pcie_cache.py [--num-ids 512] [--num-rows 4096] [--seed 0]

Writes bench/results/pcie_cache.{csv,json,png}; prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: common.py
from common import RESULTS, command_line, machine, pyplot, save_figure, write_results  # noqa: E402

from dgl_zerocopy.cuda.gather.pcie_model import CODEC_VARIANTS, TLP_OVERHEAD_BYTES, compare_cached  # noqa: E402

COLUMNS = {100: "ogbn-products", 128: "ogbn-papers100M"}
HIT_RATES = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)


def run(columns: tuple[int, ...], hit_rates: tuple[float, ...], num_ids: int, num_rows: int, seed: int) -> list[dict]:
    """One row per (columns, stored form, hit rate), with the link bytes per gathered row and the
    ratio to the uncached fp32 gather of the same width (compression and cache together)."""
    rows = []
    for cols in columns:
        fp32_uncached = None
        for codec in CODEC_VARIANTS:
            for hit_rate, m in compare_cached(cols, hit_rates, codec=codec, num_ids=num_ids, num_rows=num_rows, seed=seed).items():
                row = {
                    **m.as_dict(),
                    "target_hit_rate": hit_rate,
                    "dataset": COLUMNS.get(cols, ""),
                    "link_bytes_per_row": m.link_bytes / num_ids if num_ids else 0.0,
                }
                if codec == "fp32" and hit_rate == hit_rates[0]:
                    fp32_uncached = m.uncached_link_bytes
                row["vs_fp32_uncached"] = m.link_bytes / fp32_uncached if fp32_uncached else float("nan")
                rows.append(row)
    return rows


def markdown(rows: list[dict], hit_rates: tuple[float, ...] = HIT_RATES) -> str:
    """Link bytes per gathered row (and the share of the uncached fp32 gather's) per hit rate."""
    head = " | ".join(f"h={h:g}" for h in hit_rates)
    lines = [f"| columns | stored as | {head} |", "|---|---|" + "---:|" * len(hit_rates)]
    for cols in dict.fromkeys(r["columns"] for r in rows):
        for codec in CODEC_VARIANTS:
            sel = {r["target_hit_rate"]: r for r in rows if r["columns"] == cols and r["codec"] == codec}
            if not sel:
                continue
            name = f"{cols} ({sel[hit_rates[0]]['dataset']})" if codec == "fp32" and sel[hit_rates[0]]["dataset"] else str(cols)
            cells = " | ".join(f"{sel[h]['link_bytes_per_row']:.0f} ({sel[h]['vs_fp32_uncached']:.0%})" for h in hit_rates)
            lines.append(f"| {name} | {codec} | {cells} |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path, hit_rates: tuple[float, ...] = HIT_RATES) -> None:
    """Link bytes per row against hit rate, one line per stored form, one panel per width."""
    plt = pyplot()

    widths = list(dict.fromkeys(r["columns"] for r in rows))
    fig, axes = plt.subplots(1, len(widths), figsize=(4.5 * len(widths), 3.4), squeeze=False, sharey=True)
    for ax, cols in zip(axes[0], widths):
        for codec in CODEC_VARIANTS:
            sel = {r["target_hit_rate"]: r for r in rows if r["columns"] == cols and r["codec"] == codec}
            if sel:
                ax.plot(list(hit_rates), [sel[h]["link_bytes_per_row"] for h in hit_rates], "o-", markersize=3, label=codec)
        ax.set_title(f"{cols} columns {COLUMNS.get(cols, '')} (model)", fontsize=9)
        ax.set_xlabel("cache hit rate")
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("PCIe link bytes per gathered row")
    axes[0][0].legend(fontsize=7)
    save_figure(fig, path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-ids", type=int, default=512, help="ids per gather (distinct; the hit rate sets how many are cached rows)")
    parser.add_argument("--num-rows", type=int, default=4096, help="rows in the table (a quarter of them cached)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(RESULTS / "pcie_cache"), help="result path without suffix (default bench/results/pcie_cache)")
    args = parser.parse_args(argv)

    command = command_line()
    rows = run(tuple(COLUMNS), HIT_RATES, args.num_ids, args.num_rows, args.seed)
    meta = {
        "command": command,
        "machine": machine(),
        "model": f"host loads only (cache reads are device memory); link bytes = fetched sectors + {TLP_OVERHEAD_BYTES} B * requests",
        "tables": f"{args.num_rows} rows on a 128-B boundary, a random quarter cached (int32 slot map; int8/row pairs of cached rows on the device too)",
        "ids": f"{args.num_ids} distinct per gather (seed {args.seed}), round(h * num_ids) of them cached rows",
    }
    stem = Path(args.out)
    paths = [*write_results(stem.name, rows, meta, stem.parent), stem.with_suffix(".png")]
    plot(rows, paths[-1])
    print(f"command: {command}\n")
    print("link bytes per gathered row (share of the uncached fp32 gather's)\n")
    print(markdown(rows))
    print("\nwrote " + ", ".join(os.path.relpath(p) for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
