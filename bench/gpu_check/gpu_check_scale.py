"""The scale step of bench/gpu_check.py: bench/training/scale.py --device cuda, time-limited.

A papers100M-shaped graph generated to the GPU machine's disk, in the check's work folder, at the largest
fraction the step's limit holds (:data:`SCALE_ARGS`: 1 % in the default pass, 10 % with ``--full``;
docs/gpu.md sizes them), opened without a copy; then scale.py's GPU route (bench/training/scale_gpu.py): the
CSC pinned in place and read by our GPU sampler over PCIe, the first batch's edges checked against the
files, the feature rows gathered zero-copy onto the GPU from the storage tier's pinned host buffer (int8
codes, decoded there), GraphSAGE steps on the GPU, every phase timed between two device synchronisations.
The results folder may hold only 8 files, so scale.py writes into the work folder and its row goes into
summary.json and summary.md (:func:`scale_figures`, :func:`scale_markdown`), the GPU named; the graph's
folder is removed after the step (a disk of 64 GB).

Without CUDA (``DGL_ZEROCOPY_GPU_CHECK_ON_CPU=1``) scale.py runs the same route on the CPU, the reference
backend standing in for the GPU sampler: the orchestration runs, the figures say nothing of a GPU.
"""

from __future__ import annotations

import re
import shutil
import sys
from functools import partial
from pathlib import Path

from gpu_check_rows import TIME_LIMIT_STATUS, figure_rows, finite, number_cell, result_rows, section_head
from gpu_check_setup import Part, Run, last_line, run_bounded

BENCH = Path(__file__).resolve().parents[1]
STEM = "scale"
#: bench/training/scale.py's arguments per mode: the largest fraction of papers100M's nodes whose generation and
#: run fit the step's limit on an H200 machine (16 cores, 128 GB RAM, 64 GB disk; docs/gpu.md), 4 batches of 1,024
#: seeds (each batch's first gather reads its rows from the file: the slow part at 10 %) and 10 training steps
#: (their gathers find the rows in the host buffer; the loss is compared over the first and last 5). The default
#: pass's host buffer holds the 1 % graph's 142 MB of codes (a smaller buffer pins faster); --full keeps
#: scale.py's 2 GiB, which holds the 10 % graph's 1.4 GB.
SCALE_ARGS = {
    "quick": ["--fractions", "0.01", "--batches", "4", "--steps", "10", "--host-buffer", str(256 << 20)],
    "full": ["--fractions", "0.1", "--batches", "4", "--steps", "10"],
}
#: scale.py starts no stage this close to the step's limit: the run stage at the check's size and the files.
SCALE_RESERVE = {"quick": 18, "full": 40}
FIGURE_KEYS = (
    "fraction",
    "device",
    "nodes",
    "edges",
    "index_dtype",
    "disk_gb",
    "generate_s",
    "open_s",
    "pin_s",
    "gpu_peak_gb",
    "run_peak_rss_gb",
    "sample_ms_median",
    "sample_ms_q1",
    "sample_ms_q3",
    "gather_ms_median",
    "gather_ms_q1",
    "gather_ms_q3",
    "sampled_edges_per_batch",
    "sampled_edges_per_s",
    "gathered_bytes_per_batch",
    "storage_bytes_per_batch",
    "ns_per_sampled_edge",
    "ns_per_gathered_byte",
    "positions_past_2_31_checked",
    "steps",
    "step_ms_median",
    "loss_first5",
    "loss_last5",
    "loss_falls",
    "status",
)


def scale_part(env: dict, limit: float, workdir: Path, mode: str, cuda: bool) -> tuple[Part, str]:
    """bench/training/scale.py within ``limit`` seconds (it starts no stage after ``limit - SCALE_RESERVE``), the
    graph generated into ``workdir`` and removed afterwards, its files in ``workdir``."""
    soft = max(limit - SCALE_RESERVE[mode], 1)
    device = ["--device", "cuda"] if cuda else ["--device", "cpu", "--emulate-gpu-sampler"]
    args = [*SCALE_ARGS[mode], *device, "--time-limit", f"{soft:g}"]
    data = workdir / "scale-data"
    cmd = [sys.executable, str(BENCH / "training" / "scale.py"), *args, "--data-dir", str(data), "--out-dir", str(workdir), "--stem", STEM]
    try:
        run = run_bounded(cmd, limit, env)
    finally:
        shutil.rmtree(data, ignore_errors=True)  # GBs at 10 %: the steps after this one keep the disk
    part = judge_scale(run, result_rows(workdir, STEM), limit)
    part.details["command"] = "python3 bench/training/scale.py " + " ".join(args)
    return part, run.output


def judge_scale(run: Run, rows: list[dict], limit: float) -> Part:
    """The step's outcome from scale.py's row (one fraction). A failed stage (the edges' check included) or a loss
    that does not fall fails the step; a run stage the time limit left out, or a kill at the limit, makes it
    partial (the generation's figures kept where it finished)."""
    part = Part("scale", seconds=run.seconds, limit=limit)
    row = rows[0] if rows else None
    status = str(row.get("status", "")) if row else ""
    if row is not None:
        part.details = {"fraction": row.get("fraction"), "device": row.get("device"), "status": status}
    if status.startswith("failed"):
        part.status, part.reason = "failed", f"{_share(row)} of papers100M: {status}"
    elif run.returncode is None:
        where = stage_reached(run.output)
        part.status = "partial"
        part.reason = f"time limit ({limit:.0f} s) reached" + (f" in the {where} stage" if where else "") + (f"; {figures_text(row)}" if status == "ok" else "")
    elif status == TIME_LIMIT_STATUS:
        generated = f"generated in {row['generate_s']:.0f} s" if finite(row.get("generate_s")) else "not generated"
        part.status, part.reason = "partial", f"{_share(row)} of papers100M {generated}; the run {TIME_LIMIT_STATUS}"
    elif run.returncode != 0 or row is None:
        part.status, part.reason = "failed", last_line(run.output, run.returncode)
    elif not row.get("loss_falls"):
        part.status, part.reason = "failed", f"the loss did not fall on {row.get('device')}: {figures_text(row)}"
    else:
        part.status, part.reason = "ok", figures_text(row)
    return part


def stage_reached(output: str) -> str | None:
    """The last stage scale.py announced (``scale 0.01: run (12 s in)``): generate or run; None before either."""
    found = re.findall(r"^scale \S+: (generate|run) \(", output, re.M)
    return found[-1] if found else None


def _share(row: dict) -> str:
    """The row's fraction of papers100M as a percentage (``1 %``)."""
    return f"{100 * row['fraction']:g} %" if finite(row.get("fraction")) else "?"


def figures_text(row: dict) -> str:
    """One line: the graph, the device, the CSC's pinning, sampling and gathering per batch, the loss."""
    edges = row.get("edges")
    return (
        f"{_share(row)} of papers100M ({number_cell(row.get('nodes'), ',')} nodes, {number_cell(edges / 1e6 if finite(edges) else None, '.1f')} M edges) on "
        f"{row.get('device')}: generated in {number_cell(row.get('generate_s'), '.0f')} s, CSC pinned in {number_cell(row.get('pin_s'))} s; "
        f"sample {number_cell(row.get('sample_ms_median'), '.1f')} ms/batch ({number_cell(row.get('ns_per_sampled_edge'), '.1f')} ns per sampled edge), "
        f"gather {number_cell(row.get('gather_ms_median'), '.1f')} ms/batch ({number_cell(row.get('ns_per_gathered_byte'), '.2f')} ns per byte); "
        f"loss {number_cell(row.get('loss_first5'))} -> {number_cell(row.get('loss_last5'))}"
    )


def _spread(figures: dict, name: str) -> str:
    """``median (q1–q3)`` of ``name``, or a dash where it was not measured."""
    if not finite(figures.get(f"{name}_median")):
        return "–"
    return f"{figures[f'{name}_median']:.1f} ({number_cell(figures.get(f'{name}_q1'), '.1f')}–{number_cell(figures.get(f'{name}_q3'), '.1f')})"


# The step's rows as summary.json keeps them: the keys of FIGURE_KEYS.
scale_figures = partial(figure_rows, keys=FIGURE_KEYS)


def scale_markdown(figures: list[dict]) -> list[str]:
    """summary.md's scale section (no lines without figures)."""
    if not figures:
        return []
    lines = section_head(
        f"papers100M at scale: generated to this machine's disk, sampled and gathered on {figures[0].get('device')}",
        "| share | nodes | in-edges | on disk GB | generate s | CSC pinned s | sample ms/batch (q1–q3) | gather ms/batch (q1–q3) "
        "| ns per sampled edge | ns per gathered byte | step ms | loss first 5 -> last 5 | peak RSS GB | GPU peak GB | status |",
    )
    for f in figures:
        sample, gather = (_spread(f, f"{phase}_ms") for phase in ("sample", "gather"))
        edges = f"{f['edges'] / 1e6:.1f} M" if finite(f.get("edges")) else "–"
        lines.append(
            f"| {_share(f)} | {number_cell(f['nodes'], ',')} | {edges} | {number_cell(f['disk_gb'])} | {number_cell(f['generate_s'], '.1f')} "
            f"| {number_cell(f['pin_s'])} | {sample} | {gather} | {number_cell(f['ns_per_sampled_edge'], '.1f')} | {number_cell(f['ns_per_gathered_byte'])} "
            f"| {number_cell(f['step_ms_median'], '.1f')} | {number_cell(f['loss_first5'])} -> {number_cell(f['loss_last5'])} "
            f"| {number_cell(f['run_peak_rss_gb'])} | {number_cell(f['gpu_peak_gb'])} | {str(f['status']).replace('|', '/')} |"
        )
    if str(figures[0].get("device", "cpu")).startswith("cpu"):
        how = "Here the CPU stood in for the GPU (the reference backend sampled, the cpu backend gathered): these are no GPU figures."
    else:
        how = (
            "The in-edge CSC stays in host memory, pinned in place, and our sampler reads it over PCIe; the rows are gathered "
            "zero-copy from the storage tier's pinned host buffer (int8 codes, decoded on the GPU)."
        )
    return [*lines, "", f"{how} The first batch's edges were checked against the files. The CPU route's figures are in docs/benchmarks.md."]
