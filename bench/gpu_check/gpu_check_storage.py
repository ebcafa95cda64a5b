"""The storage step of bench/gpu_check.py: bench/tiers/storage.py on the GPU, time-limited.

A feature table 4x its host budget on the GPU machine's disk, trained through our DataLoader with
the model on the GPU: our tiers (``zerocopy`` backend: the GPU gathers from the pinned host
buffer; rows missing there read from the file first) with the next batches read ahead
(``static+ahead``) and without (``static``), the int8 codes read ahead (``static-int8+ahead``),
against an ``MADV_RANDOM`` mmap of the whole file (``mmap-random``, the ``cpu`` backend). Each run
is a fresh process after the file's pages were dropped from the page cache. The figures: storage
MiB per epoch, rows/s and the loop's wait for its next batch as a share of the step (the
goal with reading ahead: at most 5 %), of the last epoch; for our tiers also the host buffer's size
and what of it is resident (``buffer_mib``, ``buffer_resident_mib``, and the first epoch's: with the
``zerocopy`` backend the whole buffer, pinned at the bind). Where the machine lets no cgroup be made
the runs have no memory limit (the mmap's second epoch may then read from the page cache: its
first-epoch MiB is the fair figure), and the rows say so (``memory_limit``).

The results folder may hold only 8 files, so bench/tiers/storage.py writes into the check's work folder
and its rows go into summary.json and summary.md (:func:`storage_figures`, :func:`storage_markdown`).
Without CUDA (``DGL_ZEROCOPY_GPU_CHECK_ON_CPU=1``) the model trains on the CPU and our tiers use the
``cpu`` backend: the orchestration runs, the figures say nothing of a GPU.
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

from gpu_check_rows import TIME_LIMIT_STATUS, figure_rows, finite, number_cell, result_rows, section_head, split_rows
from gpu_check_setup import Part, Run, last_line, run_bounded

BENCH = Path(__file__).resolve().parents[1]
#: bench/tiers/storage.py's arguments per mode: a table and epochs the step's time limit holds (docs/gpu.md).
STORAGE_ARGS = {
    "full": ["--nodes", "100000", "--dim", "256", "--epochs", "2", "--max-batches", "30", "--batch-size", "64", "--hidden", "256"],
    "quick": ["--nodes", "20000", "--dim", "64", "--epochs", "2", "--max-batches", "8", "--batch-size", "16", "--hidden", "64"],
}
#: The runs, the most telling first (a time limit leaves out the last).
STORAGE_RUNS = "static+ahead,static,mmap-random,static-int8+ahead"
#: bench/tiers/storage.py starts no run this close to the step's limit: one run at the check's size (a
#: process that imports torch and DGL and starts CUDA, two short epochs) and the writing.
STORAGE_RESERVE = {"quick": 8, "full": 12}
FIGURE_KEYS = (
    "run",
    "status",
    "device",
    "backend",
    "epoch_s",
    "rows_per_s",
    "storage_mib_per_epoch",
    "first_storage_mib",
    "wait_s",
    "step_s",
    "wait_over_step",
    "first_wait_over_step",
    "host_hit_rate",
    "storage_reads",
    "read_ahead_hits",
    "batches",
    "buffer_mib",
    "buffer_resident_mib",
    "first_buffer_resident_mib",
    "memory_limit",
)


def storage_part(env: dict, limit: float, workdir: Path, mode: str, cuda: bool) -> tuple[Part, str]:
    """bench/tiers/storage.py within ``limit`` seconds (it starts no run after ``limit - STORAGE_RESERVE``),
    its table and its files in ``workdir``."""
    soft = max(limit - STORAGE_RESERVE[mode], 1)
    args = [*STORAGE_ARGS[mode], "--runs", STORAGE_RUNS, "--device", "cuda" if cuda else "cpu", "--time-limit", f"{soft:g}"]
    table = workdir / "storage-table"
    table.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(BENCH / "tiers" / "storage.py"), *args, "--dir", str(table), "--out-dir", str(workdir), "--stem", "storage"]
    run = run_bounded(cmd, limit, env)
    part = judge_storage(run, result_rows(workdir, "storage"), limit)
    part.details["command"] = "python3 bench/tiers/storage.py " + " ".join(args)
    return part, run.output


def judge_storage(run: Run, rows: list[dict], limit: float) -> Part:
    """The step's outcome. A run that failed fails the step; runs the time limit left out (not
    started, or cut off at a kill: the rows written by then are kept) make it partial; runs that
    could not start here (``import dgl`` failed) make it skipped, with the reason."""
    part = Part("storage", seconds=run.seconds, limit=limit)
    ok, failed, for_time, other = split_rows(rows)
    part.details = {"results": len(ok), "skipped_for_time": len(for_time), "skipped": len(other), "failed": len(failed)}
    if failed:
        part.status = "failed"
        part.reason = f"{len(failed)} of {len(rows)} runs failed: " + "; ".join(f"{r['run']}: {r['status']}" for r in failed[:3])
    elif run.returncode is None:
        part.status = "partial"
        part.reason = f"time limit ({limit:.0f} s) reached; runs finished: {', '.join(r['run'] for r in ok) or 'none'}; the rest skipped: time limit"
    elif run.returncode != 0 or not rows:
        part.status, part.reason = "failed", last_line(run.output, run.returncode)
    elif other and not ok:
        part.status, part.reason = "skipped", str(other[0]["status"]).removeprefix("skipped: ")
    elif for_time:
        part.status = "partial"
        part.reason = f"{figures_text(ok) or 'no run measured'}; {', '.join(r['run'] for r in for_time)} {TIME_LIMIT_STATUS}"
    else:
        part.status, part.reason = "ok", figures_text(ok)
    return part


def figures_text(ok: list[dict]) -> str:
    """One line: per run, storage MiB per epoch and the wait's share of the step; reading ahead's effect."""
    text = "; ".join(f"{r['run']} {r['storage_mib_per_epoch']:.0f} MiB/epoch, wait {r['wait_over_step']:.2f} of the step" for r in ok)
    by = {r["run"]: r for r in ok}
    if "static+ahead" in by:
        text += f"; reading ahead: wait {by['static+ahead']['wait_over_step']:.1%} of the step (goal at most 5 %)"
    return text


# The step's rows as summary.json keeps them: the keys of FIGURE_KEYS.
storage_figures = partial(figure_rows, keys=FIGURE_KEYS)


def storage_markdown(figures: list[dict]) -> list[str]:
    """summary.md's storage section (no lines without figures)."""
    if not figures:
        return []
    limit = next((f["memory_limit"] for f in figures if f.get("memory_limit")), "none")
    lines = section_head(
        f"Tables larger than host memory: a table 4x its host budget on this machine's disk, page cache dropped before each run; memory limit: {limit}",
        "| run | backend | storage MiB / epoch (first epoch) | rows/s | hit rate in memory | wait / step (first epoch) "
        "| host buffer MiB: resident (first epoch) of its size | status |",
    )
    for f in figures:
        mib = rate = hit = wait = buffer = "–"
        if f["status"] == "ok":
            mib = f"{number_cell(f['storage_mib_per_epoch'], '.1f')} ({number_cell(f['first_storage_mib'], '.1f')})"
            rate, hit = number_cell(f["rows_per_s"], ",.0f"), number_cell(f["host_hit_rate"])
            wait = f"{number_cell(f['wait_over_step'])} ({number_cell(f['first_wait_over_step'])})"
            if finite(f.get("buffer_mib")):  # our tiers' runs; an mmap has no buffer of ours
                resident = f"{number_cell(f.get('buffer_resident_mib'), '.1f')} ({number_cell(f.get('first_buffer_resident_mib'), '.1f')})"
                buffer = f"{resident} of {number_cell(f['buffer_mib'], '.1f')}"
        lines.append(f"| {f['run']} | {f.get('backend') or '–'} | {mib} | {rate} | {hit} | {wait} | {buffer} | {str(f['status']).replace('|', '/')} |")
    by = {f["run"]: f for f in figures if f["status"] == "ok"}
    if "static+ahead" in by:
        lines += ["", f"With reading ahead the loop waited {by['static+ahead']['wait_over_step']:.1%} of the step for its next batch (the goal: at most 5 %)."]
    return lines
