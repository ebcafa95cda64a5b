"""PCIe request model: naive against aligned gather kernel, for fp32 rows of 4 to 4096 bytes.

Runs the real kernels (kernels/gather.cu) on the CPU emulator with random ids, checks their output
against ``table[ids]``, and applies the request model of dgl_zerocopy/cuda/gather/pcie_model.py (128-byte
line requests per warp instruction, 32-byte sectors, 24 bytes of TLP overhead per request).
No GPU needed; the numbers are a model, not a measurement.

    python bench/pcie/pcie_model.py [--num-ids 512] [--num-rows 4096] [--base-offset 0] [--seed 0]

Writes bench/results/pcie_model.{csv,json} and docs/pcie_model.png; prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from dgl_zerocopy.cuda.gather.pcie_model import LINE_BYTES, SECTOR_BYTES, TLP_OVERHEAD_BYTES, compare

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: common.py
from common import command_line, machine, pyplot, save_figure, table_head, width_axes, write_results  # noqa: E402

DOCS = Path(__file__).resolve().parents[2] / "docs"
# fp32 columns: powers of two, odd counts, and the two headline datasets
# (ogbn-products: 100 fp32 = 400 B, ogbn-papers100M: 128 fp32 = 512 B).
COLUMNS = (1, 2, 3, 4, 5, 7, 8, 13, 16, 25, 31, 32, 33, 47, 64, 100, 127, 128, 129, 200, 255, 256, 300, 500, 512, 777, 1000, 1024)
HEADLINE = {400: "ogbn-products", 512: "ogbn-papers100M"}


def run(columns: tuple[int, ...], num_ids: int, num_rows: int, base_offset: int, seed: int) -> list[dict]:
    rows = []
    for cols in columns:
        row_bytes = 4 * cols
        result = compare(row_bytes, dtype="float32", num_ids=num_ids, num_rows=num_rows, base_offset=base_offset, seed=seed)
        naive, aligned = result["naive"], result["aligned"]
        rows.append(
            {
                "row_bytes": row_bytes,
                "fp32_columns": cols,
                "dataset": HEADLINE.get(row_bytes, ""),
                "aligned_vector_bytes": aligned.vector_bytes,
                "naive_requests_per_row": naive.requests_per_row,
                "aligned_requests_per_row": aligned.requests_per_row,
                "naive_bytes_per_useful_byte": naive.bytes_per_useful_byte,
                "aligned_bytes_per_useful_byte": aligned.bytes_per_useful_byte,
                "naive_link_efficiency": naive.link_efficiency,
                "aligned_link_efficiency": aligned.link_efficiency,
                "naive_instructions_per_row": naive.instructions / num_ids,
                "aligned_instructions_per_row": aligned.instructions / num_ids,
                "request_ratio": naive.requests / aligned.requests,
                "efficiency_gain": aligned.link_efficiency / naive.link_efficiency,
            }
        )
    return rows


def markdown(rows: list[dict]) -> str:
    lines = table_head(
        "| row B | fp32 cols | vec B | requests/row naive | aligned | fetched/useful naive | aligned | link eff. naive | aligned | gain |", "rrrrrrrrrr"
    )
    for r in rows:
        name = f" ({r['dataset']})" if r["dataset"] else ""
        lines.append(
            f"| {r['row_bytes']}{name} | {r['fp32_columns']} | {r['aligned_vector_bytes']} "
            f"| {r['naive_requests_per_row']:.2f} | {r['aligned_requests_per_row']:.2f} "
            f"| {r['naive_bytes_per_useful_byte']:.3f} | {r['aligned_bytes_per_useful_byte']:.3f} "
            f"| {r['naive_link_efficiency']:.1%} | {r['aligned_link_efficiency']:.1%} "
            f"| {r['efficiency_gain']:.2f}x |"
        )
    return "\n".join(lines)


def plot(rows: list[dict], path: Path, title: str) -> None:
    plt = pyplot()

    x = [r["row_bytes"] for r in rows]
    fig, (ax_req, ax_eff) = plt.subplots(1, 2, figsize=(11, 4.2))
    for variant, style in (("naive", "o--"), ("aligned", "s-")):
        per_kib = [r[f"{variant}_requests_per_row"] * 1024 / r["row_bytes"] for r in rows]
        ax_req.plot(x, per_kib, style, label=variant, markersize=4)
        ax_eff.plot(x, [100 * r[f"{variant}_link_efficiency"] for r in rows], style, label=variant, markersize=4)
    ax_req.axhline(1024 / LINE_BYTES, color="grey", lw=0.8, ls=":", label="one request per line")
    ax_req.set_ylabel("PCIe read requests per KiB of features")
    ax_eff.set_ylabel("modelled link efficiency (%)")
    ax_eff.set_ylim(0, 100)
    width_axes((ax_req, ax_eff), "row width (bytes, fp32 table)", HEADLINE)
    ax_req.set_yscale("log")
    fig.suptitle(title, fontsize=9)
    save_figure(fig, path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-ids", type=int, default=512, help="random ids per gather")
    parser.add_argument("--num-rows", type=int, default=4096, help="rows in the table")
    parser.add_argument("--base-offset", type=int, default=0, help="bytes past a 128-byte boundary where the table starts (0..127)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    command = command_line()
    rows = run(COLUMNS, args.num_ids, args.num_rows, args.base_offset, args.seed)
    meta = {
        "command": command,
        "machine": machine(),
        "model": (
            f"requests = distinct {LINE_BYTES}-B lines per warp load instruction; "
            f"fetched = distinct {SECTOR_BYTES}-B sectors per instruction; "
            f"link efficiency = useful / (fetched + {TLP_OVERHEAD_BYTES} B * requests)"
        ),
        "table": f"float32, {args.num_rows} rows, base {args.base_offset} B past a 128-B boundary",
        "ids": f"{args.num_ids} uniform random (seed {args.seed})",
    }
    csv_path, json_path = write_results("pcie_model", rows, meta)
    png_path = DOCS / "pcie_model.png"
    plot(rows, png_path, f"PCIe request model, naive vs aligned gather ({args.num_ids} random ids, fp32, table base +{args.base_offset} B)")
    print(f"command: {command}\n")
    print(markdown(rows))
    print("\nwrote " + ", ".join(os.path.relpath(p) for p in (csv_path, json_path, png_path)))


if __name__ == "__main__":
    main()
