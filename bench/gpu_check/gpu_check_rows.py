"""What every step of bench/gpu_check.py reads and shows: a benchmark's rows, table cells, output tails.

Shared by the step modules (gpu_check_sampling, gpu_check_storage, gpu_check_pyg, gpu_check_scale), the setup and
the report; it imports none of them, so that the check's modules import one another in one direction only:
gpu_check_main -> gpu_check_report -> gpu_check_sampling, gpu_check_storage, gpu_check_pyg, gpu_check_scale ->
gpu_check_setup -> gpu_check_rows -> common (tests/bench/test_bench_layout.py holds bench/ to no circle).
"""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: common.py
from common import TIME_LIMIT_STATUS, table_head  # noqa: E402,F401 - the status gather.py and sampling.py give a row their time limit left out


def tail(text: str, n: int = 40) -> str:
    """The last ``n`` lines of ``text`` (a step's output, as summary.md shows it)."""
    return "\n".join(text.rstrip().splitlines()[-n:])


def _number(text: str):
    """A CSV cell as int, else float (``nan`` included), else the text itself."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def result_rows(folder: Path, stem: str) -> list[dict]:
    """The rows of ``STEM.json`` (written when a benchmark finishes), else those of ``STEM.csv``
    (bench/gathering/gather.py appends to it configuration by configuration, so a stopped run keeps
    them); [] when neither can be read."""
    try:
        return json.loads((folder / f"{stem}.json").read_text())["rows"]
    except (OSError, ValueError, KeyError):
        pass
    try:
        lines = [ln for ln in (folder / f"{stem}.csv").read_text().splitlines() if ln and not ln.startswith("#")]
    except OSError:
        return []
    return [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(lines)]


def split_rows(rows: list[dict]) -> tuple[list[dict], list[dict], list[dict], list[dict]]:
    """A step's rows by status: measured (``ok``), failed, skipped for time, and skipped for another reason
    (what could not run here: no DGL, no pyg-lib)."""
    ok = [r for r in rows if r.get("status") == "ok"]
    failed = [r for r in rows if str(r.get("status", "")).startswith("failed")]
    for_time = [r for r in rows if r.get("status") == TIME_LIMIT_STATUS]
    other = [r for r in rows if r not in ok and r not in failed and r not in for_time]
    return ok, failed, for_time, other


def failure_digest(rows: list[dict], key: str, limit: int = 3) -> str:
    """The first ``limit`` distinct failures, each with where it happened."""
    seen: dict[str, str] = {}
    for r in rows:
        where = f"{r[key]} at {r['row_bytes']} B" if "row_bytes" in r else f"{r[key]} prefetch {r.get('prefetch')}"
        seen.setdefault(r["status"], where)
    return "; ".join(f"{where}: {status}" for status, where in list(seen.items())[:limit])


def finite(value) -> bool:
    """True for an int or float that is neither NaN nor infinite (bools are no numbers here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def number_cell(value, fmt: str = ".2f") -> str:
    """A table cell: ``value`` formatted, or a dash where it is no finite number."""
    return format(value, fmt) if finite(value) else "–"


def figure_rows(rows: list[dict], keys: tuple[str, ...]) -> list[dict]:
    """A step's rows as summary.json keeps them: each row's ``keys`` (None where a row lacks one)."""
    return [{k: r.get(k) for k in keys} for r in rows]


def section_head(title: str, header: str) -> list[str]:
    """A summary.md section's first lines: a blank line, ``## title``, a blank line, then its table's
    ``header`` (``"| a | b |"``) and a plain rule."""
    return ["", f"## {title}", "", *table_head(header)]
