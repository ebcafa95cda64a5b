"""The link step of bench/gpu_check.py: bench/gathering/link_experiment.py, time-limited, asked for by name.

Not in the default parts: it takes about 150 s of GPU time (the plan prints its estimate first), so
``--parts link`` (alone, or with ``pytest``) runs it; docs/gpu.md says how. It writes link.csv,
link.json and link.png into the results folder: with gather and epoch's six files and the two
summaries that would pass the results folder's 8 files, so the check refuses ``link``
beside ``gather`` or ``epoch`` (:data:`LINK_EXCLUSIVE`). The script's budget is the step's limit less
:data:`LINK_RESERVE`, and it starts no table or cell after that budget either.

Without CUDA (``DGL_ZEROCOPY_GPU_CHECK_ON_CPU=1``) the step runs the script's ``--dry-run``: the
orchestration only; its rows say ``dry run`` and are no GPU figures.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpu_check_rows import failure_digest, result_rows, split_rows
from gpu_check_setup import Part, Run, last_line, run_bounded

BENCH = Path(__file__).resolve().parents[1]
SCRIPT = BENCH / "gathering" / "link_experiment.py"
#: The step's seconds: the script's 150 s budget and its reserve.
LINK_LIMIT = 180
#: Seconds of the step kept outside the script's budget: its start (torch, CUDA) and the writing.
LINK_RESERVE = 30
#: The steps whose result files, beside the link step's three, would pass the 8 files that come back.
LINK_EXCLUSIVE = ("gather", "epoch")
LINK_FILES = ("link.csv", "link.json", "link.png")


def link_part(env: dict, limit: float, out: Path, cuda: bool) -> tuple[Part, str]:
    """bench/gathering/link_experiment.py within ``limit`` seconds, its results in ``out`` as link.*."""
    budget = max(limit - LINK_RESERVE, 10.0)
    args = ["--budget", f"{budget:g}", "--time-limit", f"{budget:g}", "--out", str(out / "link")]
    cmd = [sys.executable, str(SCRIPT), *args, *([] if cuda else ["--dry-run"])]
    run = run_bounded(cmd, limit, env)
    part = judge_link(run, result_rows(out, "link"), limit)
    part.details["command"] = "python3 bench/gathering/link_experiment.py " + " ".join(cmd[2:])
    return part, run.output


def judge_link(run: Run, rows: list[dict], limit: float) -> Part:
    """The step's outcome: a failed cell (a wrong result among them) fails it, and so does being
    killed at its limit (the rows it appended so far are kept); cells its time limit left out make
    it partial."""
    part = Part("link", seconds=run.seconds, limit=limit)
    ok, failed, for_time, _ = split_rows(rows)
    part.details = {"cells": len(rows), "measured": len(ok), "failed": len(failed), "skipped_for_time": len(for_time)}
    dry = " (dry run: no GPU figures)" if any(r.get("dry_run") in (True, "True") for r in rows) else ""
    if failed:
        part.status, part.reason = "failed", f"{len(failed)} of {len(rows)} cells failed: " + failure_digest(failed, "method")
    elif run.returncode is None:  # it starts nothing after its budget: a table's set-up or a cell outran the reserve
        part.status = "failed"
        part.reason = f"killed at its time limit ({limit:.0f} s) after {len(ok)} cells (the CSV keeps them): {last_line(run.output)}"
    elif run.returncode != 0 or not rows:
        part.status, part.reason = "failed", last_line(run.output, run.returncode)
    elif for_time:
        part.status, part.reason = "partial", f"{len(ok)} cells, each equal to table[ids] before timing; {len(for_time)} skipped: time limit{dry}"
    else:
        part.status, part.reason = "ok", f"{len(ok)} cells, each equal to table[ids] before timing{dry}"
    return part
