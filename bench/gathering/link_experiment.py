"""Zero-copy at the link: separate the causes of slow small-row zero-copy gathers in one GPU run.

The first H200 run reached half a pinned copy with rows of 128-512 B and 0.85 from 1 KB, at a 2 GB
table. A hypothesis to test (not a conclusion): each random row lands on a page that the GPU and the
host IOMMU translate afresh, the link holds a bounded number of reads in flight, so a longer wait
per read means fewer bytes per second; sorted ids and 2 MB pages should help, larger tables hurt.
So one run measures, over the plan of ``link_plan.py`` (printed with its estimated GPU time first):

- tables of 1, 8, 32 and 56 GB, in 4 KiB pages and in 2 MB pages (``HostTable``:
  ``MAP_HUGETLB`` where the pool allows, else transparent huge pages; which one it got, and the
  share of the table smaps shows in huge pages, go in the results), registered in place. One
  table per page size, of the largest size: a smaller table is its first GB, the span of the
  ids (what is translated), which saves six set-ups (link_plan.py says why);
- ids contiguous (the SM-read ceiling), random, sorted, and sorted by the gather on the device (the
  store's sort, timed with it; each zero-copy row also says what ``sort_ids="auto"`` would choose);
  rows of 128, 400, 512 and 1024 B;
  batches of 16k, 262k and 1M ids; kernel shapes (rows per warp, grid, block, the naive kernel);
- the pinned copy of the same bytes from the same memory (``h2d``) and our kernel over a copy of
  the table in device memory (``device``) as references.

Every cell's output is checked equal to ``table[ids]`` (the output first set to its complement)
before it is timed with CUDA events: the median and spread of ``--repeats`` gathers after warm-ups.
The rows also count the distinct 4 KiB and 2 MB pages the batch touches (the translations it
needs) and, for our kernel, the PCIe request model's requests per row and link efficiency for its
shape (dgl_zerocopy.cuda.gather.pcie_model on the emulator's trace). Results: STEM.csv/.json (with
each table's set-up seconds and pages, and the command) and STEM.png. A cell that fails becomes a
row naming the error, and the exit code is 1.

``--dry-run``: the same plan on the CPU at tiny sizes (tables / 16384, batches / 256), the kernels
run by the emulator (dgl_zerocopy.cuda.gather.emulator) on the same launch plans and arguments, the
pinned copy a contiguous copy on the CPU and device memory a second copy of the table; the whole
pipeline runs (plan, check, time, write, plot) and every row and the plot say ``dry run``.

    python bench/gathering/link_experiment.py [--budget 150] [--repeats 10] [--dry-run]
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: common.py
import common  # noqa: E402
import link_plan  # noqa: E402
from common import RESULTS, TIME_LIMIT_STATUS, append_csv_row, begin_csv, command_line, machine, summarize, time_cuda_events, time_repeated, write_results  # noqa: E402
from link_devices import CpuEmulator, GpuDevice, model_metrics  # noqa: E402

#: The dry run's sizes: tables and batches divided by these (56 GB -> 3.4 MB, 262,144 ids -> 1,024).
DRY_TABLE_SCALE = 16384
DRY_BATCH_SCALE = 256
FIELDS = (
    "dry_run",
    "question",
    "table_gb",
    "table_bytes",
    "memory",
    "pages",
    "huge_share",
    "row_bytes",
    "order",
    "batch",
    "method",
    "shape",
    "kernel",
    "threads_per_row",
    "sort_auto",
    "sorted_on_device",
    "grid",
    "block",
    "pages_4k",
    "pages_2m",
    "model_requests_per_row",
    "model_link_efficiency",
    "checked",
    "gbps_median",
    "gbps_q1",
    "gbps_q3",
    "gbps_min",
    "gbps_max",
    "ratio_to_h2d",
    "status",
    "wall_s",
)


def make_ids(rng: np.random.Generator, order: str, rows: int, batch: int) -> np.ndarray:
    """``batch`` int64 row ids of a table of ``rows`` rows: one contiguous run (from a random
    start), uniform random (also for ``device-sorted``: the gather sorts them), or uniform random sorted."""
    if order == "contiguous":
        start = int(rng.integers(0, max(1, rows - batch + 1)))
        return np.arange(start, start + batch, dtype=np.int64) % rows
    ids = rng.integers(0, rows, batch, dtype=np.int64)
    return np.sort(ids) if order == "sorted" else ids


def distinct_pages(ids: np.ndarray, row_bytes: int, page_bytes: int) -> int:
    """Pages of ``page_bytes`` that the rows ``ids`` touch (first and last byte of each row)."""
    first = ids * row_bytes
    return int(np.unique(np.concatenate([first // page_bytes, (first + row_bytes - 1) // page_bytes])).size)


def failure_text(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"failed: {type(error).__name__}: {lines[0] if lines else ''}"[:300]


def measure_cell(device, table, cell: link_plan.Cell, span: int, batch: int, rng: np.random.Generator, timer, repeats: int) -> tuple[dict, list[float]]:
    """Check then time one cell on the first ``span`` bytes of ``table`` (a set-up table of
    ``device``); returns the row's facts and the timed seconds. Raises what the gather raises, or
    AssertionError when its output differs from ``table[ids]``."""
    ids = make_ids(rng, cell.order, span // cell.row_bytes, batch)
    facts = {"pages_4k": distinct_pages(ids, cell.row_bytes, 4096), "pages_2m": distinct_pages(ids, cell.row_bytes, 2 << 20)}
    if cell.method == "h2d":
        gather, out, reference, launch = device.pinned_copy(table, batch * cell.row_bytes)
    else:
        shape, sort = link_plan.SHAPES[cell.shape], cell.order == "device-sorted"
        gather, out, reference, launch = device.gather(table, cell.row_bytes, ids, shape, cell.method == "device", sort)
        if cell.method == "zerocopy":  # what the model says this shape asks of the link
            facts.update(model_metrics(cell.row_bytes, cell.shape, device.sms))
    facts.update(launch)
    device.check(gather, out, reference)  # raises AssertionError naming the rows that differ
    facts["checked"] = True
    return facts, timer(gather, repeats)


def run(args: argparse.Namespace, device, kept: list[link_plan.Cell], meta: dict, stem: Path) -> int:
    """Measure ``kept`` (in run order: one table per memory kind, of the largest size, set up once;
    a smaller table is its first GB), then write the results; the exit code. Each cell's row is
    appended to the CSV as it is measured, so that a run stopped from outside keeps them."""
    rng = np.random.default_rng(0)
    if args.dry_run:
        timer = lambda fn, n: time_repeated(fn, n, warmup=args.warmup)  # noqa: E731
    else:
        timer = lambda fn, n: time_cuda_events(fn, n, warmup=args.warmup)  # noqa: E731
    size = lambda gb: int(gb * 1e9) // (DRY_TABLE_SCALE if args.dry_run else 1)  # noqa: E731
    scale = DRY_BATCH_SCALE if args.dry_run else 1
    rows: list[dict] = []
    tables: list[dict] = []
    csv_path = stem.parent / f"{stem.name}.csv"
    begin_csv(csv_path, meta, FIELDS)
    started = time.perf_counter()
    out_of_time = lambda: args.time_limit and time.perf_counter() - started > args.time_limit  # noqa: E731
    big = max(c.table_gb for c in kept)

    def record(row: dict) -> None:
        rows.append(row)
        append_csv_row(csv_path, row, FIELDS)
        print(f"link: {_label(row)}", flush=True)

    for memory, group in _grouped(link_plan.run_order(kept)):
        base = {"dry_run": args.dry_run, "memory": memory}
        if out_of_time():
            for c in group:
                record(_row({**base, "table_gb": c.table_gb, "table_bytes": size(c.table_gb)}, c, max(1, c.batch // scale), {}, [], TIME_LIMIT_STATUS, 0.0))
            continue
        try:
            table = device.open_table(size(big), memory, need_device_copy=any(c.method == "device" for c in group))
        except Exception as e:  # noqa: BLE001 - e.g. not enough host memory: its cells fail, the other kind still runs
            tables.append({**base, "table_gb": big, "table_bytes": size(big), "status": failure_text(e)})
            for c in group:
                record(_row({**base, "table_gb": c.table_gb, "table_bytes": size(c.table_gb)}, c, max(1, c.batch // scale), {}, [], failure_text(e), 0.0))
            continue
        base.update(pages=table.report["pages"], huge_share=table.report["huge_share"])
        tables.append({**base, "table_gb": big, "table_bytes": size(big), **table.report, "status": "ok"})
        try:
            for cell in group:
                batch, where = max(1, cell.batch // scale), {**base, "table_gb": cell.table_gb, "table_bytes": size(cell.table_gb)}
                if out_of_time():
                    record(_row(where, cell, batch, {}, [], TIME_LIMIT_STATUS, 0.0))
                    continue
                begun = time.perf_counter()
                try:
                    facts, seconds = measure_cell(device, table, cell, size(cell.table_gb), batch, rng, timer, args.repeats)
                    status = "ok"
                except Exception as e:  # noqa: BLE001 - a failure row; the other cells still run
                    facts, seconds, status = {"checked": False}, [], failure_text(e)
                record(_row(where, cell, batch, facts, seconds, status, time.perf_counter() - begun))
        finally:
            table.close()
    _ratios(rows)
    meta["tables"] = tables
    write_results(stem.name, [{k: r.get(k, "") for k in FIELDS} for r in rows], meta, stem.parent, extra={"tables": tables})
    if any(r["status"] == "ok" for r in rows):
        _plot(rows, meta, stem.parent / f"{stem.name}.png")
    failed = [r for r in rows if r["status"] not in ("ok", TIME_LIMIT_STATUS)]
    print(f"link: {sum(r['status'] == 'ok' for r in rows)} cells measured, {len(failed)} failed, results in {csv_path}", flush=True)
    return 1 if failed else 0


def _grouped(cells: list[link_plan.Cell]) -> list[tuple[str, list[link_plan.Cell]]]:
    groups: dict[str, list[link_plan.Cell]] = {}
    for cell in cells:
        groups.setdefault(cell.memory, []).append(cell)
    return list(groups.items())


def _row(base: dict, cell: link_plan.Cell, batch: int, facts: dict, seconds: list[float], status: str, wall: float) -> dict:
    nan = float("nan")
    stats = summarize([batch * cell.row_bytes / s / 1e9 for s in seconds]) if seconds else dict.fromkeys(("median", "q1", "q3", "min", "max"), nan)
    return {
        **dict.fromkeys(FIELDS, ""),
        **base,
        **{k: v for k, v in cell.as_dict().items() if k != "table_gb"},
        "batch": batch,
        "checked": False,
        **facts,
        **{f"gbps_{k}": v for k, v in stats.items()},
        "ratio_to_h2d": nan,
        "status": status,
        "wall_s": wall,
        "seconds": seconds,
    }


def _ratios(rows: list[dict]) -> None:
    """Each row's median over the pinned copy's at the same table, memory, row size and batch."""
    h2d = {(r["table_gb"], r["memory"], r["row_bytes"], r["batch"]): r["gbps_median"] for r in rows if r["method"] == "h2d" and r["status"] == "ok"}
    for r in rows:
        top = h2d.get((r["table_gb"], r["memory"], r["row_bytes"], r["batch"]))
        if top and r["status"] == "ok":
            r["ratio_to_h2d"] = r["gbps_median"] / top


def _label(row: dict) -> str:
    done = f"{row['gbps_median']:.2f} GB/s" if row["status"] == "ok" else row["status"]
    return f"{row['table_gb']} GB {row['memory']} ({row['pages']}), {row['row_bytes']} B, {row['order']}, {row['batch']} ids, {row['method']} {row['shape']}: {done}"


def _plot(rows: list[dict], meta: dict, path: Path) -> None:
    """Three panels of median GB/s (IQR bars): against table size (512 B rows), against row size,
    per kernel shape. A dry run's figure says so in its title and axis: it is no GPU figure."""
    plt = common.pyplot()

    ok = [r for r in rows if r["status"] == "ok"]
    dry = meta["dry_run"]
    unit = "GB/s, DRY RUN (CPU emulator, not a GPU figure)" if dry else "GB/s (median, IQR)"
    fig, axes = plt.subplots(1, 3, figsize=(18, 4.5))
    width_, table_ = link_plan.BASE["row_bytes"], link_plan.base_table_gb(tuple(sorted({r["table_gb"] for r in rows})))
    batch_ = max((r["batch"] for r in ok if r["question"] == "table size x pages x order"), default=0)
    for memory in link_plan.MEMORY:
        for order, method in (("contiguous", "zerocopy"), ("random", "zerocopy"), ("sorted", "zerocopy"), ("contiguous", "h2d")):
            want = (memory, order, method, width_, batch_, "default")
            pts = sorted((r for r in ok if (r["memory"], r["order"], r["method"], r["row_bytes"], r["batch"], r["shape"]) == want), key=lambda r: r["table_gb"])
            if pts:
                err = [[r["gbps_median"] - r["gbps_q1"] for r in pts], [r["gbps_q3"] - r["gbps_median"] for r in pts]]
                axes[0].errorbar(
                    [r["table_gb"] for r in pts], [r["gbps_median"] for r in pts], yerr=err, marker="o", capsize=3, label=f"{method} {order}, {memory} pages"
                )
    axes[0].set_xscale("log")
    ticks = sorted({r["table_gb"] for r in ok})
    axes[0].set_xticks(ticks, [str(t) for t in ticks])
    axes[0].set_xlabel(f"table size (nominal GB), {width_} B rows, {batch_:,} ids")
    at_base = [r for r in ok if r["table_gb"] == table_ and r["batch"] == batch_]
    panels = (
        (
            axes[1],
            [r for r in at_base if r["shape"] == "default" and r["order"] != "contiguous" or r["method"] == "h2d"],
            "row_bytes",
            ("method", "order", "memory"),
        ),
        (
            axes[2],
            [r for r in at_base if r["method"] == "zerocopy" and r["order"] == "random" and r["row_bytes"] in (128, width_)],
            "shape",
            ("row_bytes", "memory"),
        ),
    )
    for ax, sel, key, by in panels:
        series = list(dict.fromkeys(tuple(r[k] for k in by) for r in sel))
        xs = sorted(dict.fromkeys(r[key] for r in sel), key=lambda x: list(link_plan.SHAPES).index(x) if key == "shape" else x)
        width = 0.8 / max(1, len(series))
        for i, s in enumerate(series):
            pick = [next((r for r in sel if r[key] == x and tuple(r[k] for k in by) == s), None) for x in xs]
            ax.bar(
                np.arange(len(xs)) + i * width,
                [p["gbps_median"] if p else np.nan for p in pick],
                width,
                label=" ".join(map(str, s)) + (" B" if key == "shape" else ""),
            )
        ax.set_xticks(np.arange(len(xs)) + 0.4 - width / 2, [str(x) for x in xs], rotation=20 if key == "shape" else 0, fontsize=8)
        ax.set_xlabel(f"row bytes ({table_} GB table)" if key == "row_bytes" else f"kernel shape (random ids, {table_} GB table)")
    for ax in axes:
        ax.set_ylabel(unit)
        ax.legend(fontsize=6)
    title = f"{'DRY RUN on the CPU (emulated kernels, tiny sizes): ' if dry else ''}{meta['device']}: zero-copy at the link"
    fig.suptitle(title, fontsize=10)
    common.save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="the same plan on the CPU at tiny sizes, kernels emulated (no GPU figures)")
    parser.add_argument("--budget", type=float, default=150.0, help="seconds of GPU time the plan may take (estimated; default 150)")
    parser.add_argument("--repeats", type=int, default=None, help="timed gathers per cell (default 10; 2 in a dry run)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed gathers per cell after its check (default 3; 1 in a dry run)")
    parser.add_argument("--tables", default=",".join(map(str, link_plan.TABLE_GB)), help="table sizes in GB, comma separated (default 1,8,32,56)")
    parser.add_argument("--time-limit", type=float, default=0, help="seconds: no table or cell starts after this (its rows: skipped: time limit; 0: none)")
    parser.add_argument("--plan-only", action="store_true", help="print the plan and its estimate, measure nothing")
    parser.add_argument("--out", default=None, help="result file stem under bench/results/, or a path without suffix (default link_experiment[_dry_run])")
    args = parser.parse_args(argv)
    args.repeats = args.repeats or (2 if args.dry_run else 10)
    args.warmup = (1 if args.dry_run else 3) if args.warmup is None else args.warmup
    try:
        tables = tuple(int(t) for t in args.tables.split(",") if t.strip())
    except ValueError:
        parser.error(f"--tables must be whole GB, comma separated, but got {args.tables!r}")
    if not tables or min(tables) < 1:
        parser.error(f"--tables must be whole GB of at least 1, but got {args.tables!r}")
    # The estimate is of the GPU run whatever the mode: the dry run measures the same cells.
    kept, pruned, estimate = link_plan.prune(link_plan.plan(tables), args.budget - link_plan.STARTUP_S, args.repeats if not args.dry_run else 10, 3)
    estimate += link_plan.STARTUP_S
    print(link_plan.describe(kept, pruned, estimate, args.budget), flush=True)
    if not kept:
        parser.error(f"--budget {args.budget:g} holds no cell of the plan (a table's set-up alone takes longer); raise it, or use --tables with smaller sizes")
    if args.plan_only:
        return 0
    device = CpuEmulator() if args.dry_run else GpuDevice()
    meta = {
        "command": command_line() if argv is None else " ".join(["python", "bench/gathering/link_experiment.py", *map(shlex.quote, argv)]),
        "dry_run": args.dry_run,
        "device": device.name,
        "machine": machine(),
        "budget_s": args.budget,
        "gpu_estimate_s": round(estimate, 1),
        "cells": len(kept),
        "pruned": len(pruned),
        "repeats": args.repeats,
        "warmup": args.warmup,
        "timer": "perf_counter (dry run)" if args.dry_run else "CUDA events, device synchronized before each call",
        "sizes": f"tables / {DRY_TABLE_SCALE}, batches / {DRY_BATCH_SCALE} (dry run)" if args.dry_run else "as planned",
        "rates_assumed": link_plan.RATES,
    }
    default = "link_experiment_dry_run" if args.dry_run else "link_experiment"
    stem = Path(args.out or default)
    stem = stem if stem.is_absolute() else RESULTS / stem
    return run(args, device, kept, meta, stem)


if __name__ == "__main__":
    sys.exit(main())
