"""PCIe request model of compressed rows: bytes over the link per row, and the fp32-equivalent
bandwidth delivered, for fp32, fp16, bf16 and int8 (per-column and per-row scales) tables.

Runs the real kernels (kernels/gather.cu: the aligned fp32 gather and the decoding gather) on the
CPU emulator with the same random ids for every stored form, checks each output against a NumPy
decode, and applies the request model of dgl_zerocopy/cuda/gather/pcie_model.py (128-byte line requests per
warp instruction, 32-byte sectors, 24 bytes of TLP overhead per request). fp32-equivalent
bandwidth = link GB/s x (4 x columns) / (link bytes per row). No GPU needed; a model, not a
measurement.

    python bench/pcie/pcie_codecs.py [--num-ids 512] [--num-rows 4096] [--link-gbps 25] [--seed 0]

Writes bench/results/pcie_codecs.{csv,json,png}; prints a markdown table of the headline widths
(100, 128 and 602 columns) and the int8 goal (>= 3x the fp32 figure).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: common.py
from common import RESULTS, command_line, machine, pyplot, save_figure, table_head, width_axes, write_results  # noqa: E402

from dgl_zerocopy.cuda.gather.pcie_model import CODEC_VARIANTS, LINE_BYTES, LINK_GBPS, SECTOR_BYTES, TLP_OVERHEAD_BYTES, compare_codecs  # noqa: E402

#: Widths of the plot; the headline ones are ogbn-products (100), ogbn-papers100M (128), reddit (602).
COLUMNS = (16, 31, 32, 64, 100, 128, 200, 256, 300, 500, 512, 602, 1000, 1024)
HEADLINE = {100: "ogbn-products", 128: "ogbn-papers100M", 602: "reddit"}
GOAL = 3.0


def run(columns: tuple[int, ...], num_ids: int, num_rows: int, base_offset: int, seed: int, link_gbps: float) -> list[dict]:
    rows = []
    for cols in columns:
        result = compare_codecs(cols, num_ids=num_ids, num_rows=num_rows, base_offset=base_offset, seed=seed, link_gbps=link_gbps)
        rows += [{**m.as_dict(), "dataset": HEADLINE.get(cols, "")} for m in result.values()]
    return rows


def markdown(rows: list[dict]) -> str:
    lines = table_head("| columns | stored as | row B | vec B | requests/row | of which scale pairs | link B/row | fp32-equiv. GB/s | vs fp32 |", "rlrrrrrrr")
    for r in rows:
        if r["columns"] not in HEADLINE:
            continue
        name = f" ({r['dataset']})" if r["codec"] == "fp32" else ""
        lines.append(
            f"| {r['columns']}{name} | {r['codec']} | {r['stored_row_bytes']} | {r['vector_bytes']} | "
            f"{r['requests_per_row']:.2f} | {r['pair_requests_per_row']:.2f} | {r['link_bytes_per_row']:.0f} | "
            f"{r['fp32_equivalent_gbps']:.1f} | {r['vs_fp32']:.2f}x |"
        )
    return "\n".join(lines)


def goal_lines(rows: list[dict]) -> str:
    out = []
    for codec in ("int8/column", "int8/row"):
        ratios = {r["columns"]: r["vs_fp32"] for r in rows if r["codec"] == codec and r["columns"] in HEADLINE}
        met = all(v >= GOAL for v in ratios.values())
        shown = ", ".join(f"{c} cols {v:.2f}x" for c, v in ratios.items())
        out.append(f"{codec}: {shown}: goal >= {GOAL:g}x {'met' if met else 'NOT met'} at every headline width")
    return "\n".join(out)


def plot(rows: list[dict], path: Path, title: str) -> None:
    plt = pyplot()

    fig, (ax_bytes, ax_gbps) = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = {"fp32": "o-", "fp16": "s-", "bf16": "x:", "int8/column": "^-", "int8/row": "v--"}
    for codec in CODEC_VARIANTS:
        sel = [r for r in rows if r["codec"] == codec]
        x = [r["columns"] for r in sel]
        ax_bytes.plot(x, [r["link_bytes_per_row"] / r["fp32_bytes_per_row"] for r in sel], styles[codec], label=codec, markersize=4)
        ax_gbps.plot(x, [r["fp32_equivalent_gbps"] for r in sel], styles[codec], label=codec, markersize=4)
    link = rows[0]["link_gbps"]
    ax_gbps.axhline(link, color="grey", lw=0.8, ls=":", label=f"link ({link:g} GB/s)")
    ax_bytes.set_ylabel("link bytes per fp32 byte delivered")
    ax_gbps.set_ylabel(f"fp32-equivalent GB/s on a {link:g} GB/s link")
    width_axes((ax_bytes, ax_gbps), "feature columns", HEADLINE)
    fig.suptitle(title, fontsize=9)
    save_figure(fig, path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-ids", type=int, default=512, help="random ids per gather (the same for every stored form)")
    parser.add_argument("--num-rows", type=int, default=4096, help="rows in the table")
    parser.add_argument("--base-offset", type=int, default=0, help="bytes past a 128-byte boundary where each table starts (0..127)")
    parser.add_argument("--link-gbps", type=float, default=LINK_GBPS, help="modelled link bandwidth (GB/s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(RESULTS / "pcie_codecs"), help="result path without suffix (default bench/results/pcie_codecs)")
    args = parser.parse_args(argv)

    command = command_line()
    rows = run(COLUMNS, args.num_ids, args.num_rows, args.base_offset, args.seed, args.link_gbps)
    meta = {
        "command": command,
        "machine": machine(),
        "model": (
            f"requests = distinct {LINE_BYTES}-B lines per warp load instruction; fetched = distinct {SECTOR_BYTES}-B "
            f"sectors per instruction; link bytes = fetched + {TLP_OVERHEAD_BYTES} B * requests; fp32-equivalent GB/s = "
            f"{args.link_gbps:g} * 4 * columns / link bytes per row"
        ),
        "tables": f"{args.num_rows} rows, base {args.base_offset} B past a 128-B boundary; int8/column pairs in device memory "
        "(not on the link), int8/row pairs in pinned host memory (on the link)",
        "ids": f"{args.num_ids} uniform random (seed {args.seed}), the same for every stored form",
    }
    stem = Path(args.out)
    csv_path, json_path = write_results(stem.name, rows, meta, stem.parent)
    png_path = stem.with_suffix(".png")
    plot(rows, png_path, f"PCIe request model, compressed rows decoded in the kernel ({args.num_ids} random ids, table base +{args.base_offset} B)")
    print(f"command: {command}\n")
    print(markdown(rows))
    print("\n" + goal_lines(rows))
    print("\nwrote " + ", ".join(os.path.relpath(p) for p in (csv_path, json_path, png_path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
