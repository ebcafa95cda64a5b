"""The papers step of bench/gpu_check.py: bench/training/papers_epoch.py at 25 % of papers100M, time-limited, asked for by name.

The graph (27.8 M nodes, about 0.8 B in-edges, 14.2 GB of float32 features) is generated straight into host memory on
all cores, then GraphSAGE trains through routes a (all in GPU memory), b (ours: pinned CSC, GPU sampling, zero-copy),
b8 (ours, int8 rows), c (ours through PyG) and d (the conventional CPU path), each route's first batch checked
against the tables and the generator first. The script prints its plan (sizes, estimated seconds) before it starts.

Not in the default parts: about 5 minutes of GPU time, so ``--parts papers`` (alone, or with ``pytest``) runs it,
with the whole check's time limit raised to the ``--full`` one unless ``--time-limit`` is given. It writes
papers_epoch.csv, .json and .png into the results folder: beside gather and epoch's six files and the two summaries
that would pass the results folder's 8 files, so the check refuses ``papers`` beside them
(:data:`PAPERS_EXCLUSIVE`). The script starts no route after the step's limit less :data:`PAPERS_RESERVE`.

Without CUDA (``DGL_ZEROCOPY_GPU_CHECK_ON_CPU=1``) the step runs the script's dry run (a tiny fraction, every route's
CPU stand-in): the orchestration only; its rows say so and are no GPU figures.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpu_check_rows import finite, number_cell, result_rows, split_rows
from gpu_check_setup import Part, Run, last_line, run_bounded

BENCH = Path(__file__).resolve().parents[1]
SCRIPT = BENCH / "training" / "papers_epoch.py"
STEM = "papers_epoch"
#: The step's seconds: the plan's estimate at 25 % (papers_epoch.py --plan-only: about 240 s) with room to spare.
PAPERS_LIMIT = 420
#: Seconds of the step kept after the last route may start: the longest route (d, CPU sampling) and the writing.
PAPERS_RESERVE = 150
#: The steps whose result files, beside this step's three, would pass the 8 files that come back.
PAPERS_EXCLUSIVE = ("gather", "epoch", "link")
PAPERS_FILES = (f"{STEM}.csv", f"{STEM}.json", f"{STEM}.png")
#: The script's arguments: on a GPU 25 % of papers100M, route c last (its PyG edge_index of the whole graph, and the
#: CSC PyG sorts from it, are the plan's least known cost: a time limit then leaves out c, not d, which the goals
#: compare with b); without one the dry run's tiny fraction on the CPU stand-ins.
PAPERS_ARGS = {"cuda": ["--fraction", "0.25", "--routes", "a,b,b8,d,c"], "cpu": ["--fraction", "0.0005", "--device", "cpu", "--epochs", "2"]}


def papers_part(env: dict, limit: float, out: Path, cuda: bool) -> tuple[Part, str]:
    """bench/training/papers_epoch.py within ``limit`` seconds, its results in ``out`` as papers_epoch.*."""
    soft = max(limit - PAPERS_RESERVE, 10.0)
    args = [*PAPERS_ARGS["cuda" if cuda else "cpu"], "--time-limit", f"{soft:g}", "--out", str(out / STEM)]
    run = run_bounded([sys.executable, str(SCRIPT), *args], limit, env)
    part = judge_papers(run, result_rows(out, STEM), limit)
    part.details["command"] = "python3 bench/training/papers_epoch.py " + " ".join(args)
    return part, run.output


def judge_papers(run: Run, rows: list[dict], limit: float) -> Part:
    """The step's outcome: a failed route (its first batch's check included) fails it, and so does being killed at
    its limit with no row; routes the time limit left out, or a kill after some rows, make it partial."""
    part = Part("papers", seconds=run.seconds, limit=limit)
    ok, failed, for_time, _ = split_rows(rows)
    part.details = {"routes": [papers_figures(r) for r in rows], "ratios": ratios(rows)}
    dry = " (dry run on the CPU stand-ins: no GPU figures)" if any("stand-in" in str(r.get("note", "")) for r in rows) else ""
    if failed:
        part.status = "failed"
        part.reason = f"{len(failed)} of {len(rows)} routes failed: " + "; ".join(f"{r['route']}: {r['status']}" for r in failed[:3])
    elif run.returncode is None:
        part.status = "partial" if ok else "failed"
        part.reason = f"stopped at its time limit ({limit:.0f} s) after {len(ok)} routes: {last_line(run.output)}"
    elif run.returncode != 0 or not rows:
        part.status, part.reason = "failed", last_line(run.output, run.returncode)
    elif for_time:
        part.status = "partial"
        part.reason = f"{routes_text(ok)}; {', '.join(r['route'] for r in for_time)} skipped: time limit{dry}"
    else:
        part.status, part.reason = "ok", f"{routes_text(ok)}{dry}"
    return part


def papers_figures(row: dict) -> dict:
    """A route's row as the step's details keep it."""
    keys = ("route", "status", "note", "epoch_s", "wait_share", "test_acc", "host_peak_gb", "device_peak_gb", "check_rows", "check_edges")
    return {k: row.get(k) for k in keys}


def ratios(rows: list[dict]) -> dict:
    """Epoch d / epoch b (goal: at least 4) and epoch b8 / epoch a (goal: at most 1.25), where both routes ran."""
    epoch = {r["route"]: r.get("epoch_s") for r in rows if r.get("status") == "ok" and finite(r.get("epoch_s"))}
    return {
        "d_over_b": epoch["d"] / epoch["b"] if {"b", "d"} <= epoch.keys() and epoch["b"] else None,
        "b8_over_a": epoch["b8"] / epoch["a"] if {"a", "b8"} <= epoch.keys() and epoch["a"] else None,
    }


def routes_text(ok: list[dict]) -> str:
    """One line: each route's epoch and accuracy, the first batch checked, and the two ratios against their goals."""
    each = ", ".join(f"{r['route']} {number_cell(r.get('epoch_s'))} s (acc {number_cell(r.get('test_acc'), '.3f')})" for r in ok)
    found = ratios(ok)
    goals = [
        f"d/b {found['d_over_b']:.2f} (goal >= 4)" if found["d_over_b"] else "",
        f"b8/a {found['b8_over_a']:.2f} (goal <= 1.25)" if found["b8_over_a"] else "",
    ]
    return f"{len(ok)} routes, each first batch checked: {each}" + "".join(f"; {g}" for g in goals if g)
