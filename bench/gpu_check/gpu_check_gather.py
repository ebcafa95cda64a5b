"""The gather step of bench/gpu_check.py: bench/gathering/gather.py over row widths, methods, codecs and caches, time-limited.

:data:`GATHER_ARGS` sizes the sweep per mode (``quick``: the default pass; ``full``: ``--full``), :func:`gather_plan`
counts it for the header, :func:`gather_part` runs it and :func:`judge_gather` reads its rows (every method is checked
equal to ``table[ids]`` before it is timed).
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpu_check_rows import TIME_LIMIT_STATUS, failure_digest, result_rows
from gpu_check_setup import Part, Run, last_line, run_bounded

GATHER_SCRIPT = Path(__file__).resolve().parents[1] / "gathering" / "gather.py"
# gather.py starts no configuration this close to its limit, per mode: its own start-up (its clock starts
# after it), the longest configuration with its width's set-up, and the writing (docs/gpu.md).
GATHER_RESERVE = {"quick": 10, "full": 50}

# 512 B (128 columns: the zero-copy options, codecs and caches) and 1 KB rows first, so that a
# time limit leaves out the least telling widths; the summary orders rows by width again.
GATHER_ARGS = {
    "full": [
        "--cols",
        "128,256,100,64,32,16,512,1024",
        "--dtypes",
        "fp32",
        "--batches",
        "262144",
        "--rows",
        "4000000",
        "--table-gb",
        "2",
        "--repeats",
        "15",
        "--tune-cols",
        "128",
        "--max-blocks",
        "0.5sm,1sm,2sm,4sm",
        "--codecs",
        "fp16,bf16,int8,int8-row",
        "--codec-cols",
        "100,128",
        "--cache-fracs",
        "0.1,0.25,0.5",
    ],
    "quick": [
        "--cols",
        "128,256,100,16",
        "--dtypes",
        "fp32",
        "--batches",
        "65536",
        "--rows",
        "500000",
        "--table-gb",
        "0.25",
        "--repeats",
        "5",
        "--tune-cols",
        "128",
        "--max-blocks",
        "1sm,2sm",
        "--codecs",
        "fp16,bf16,int8,int8-row",
        "--codec-cols",
        "128",
        "--cache-fracs",
        "0.25",
    ],
}


def gather_plan(mode: str, sms: int) -> dict[str, float]:
    """The size of the gather sweep of ``mode`` on a GPU of ``sms`` SMs: configurations (width x
    batch x method), gathers (per configuration: the correctness check, 3 warm-ups and the timed
    repeats) and the gigabytes of rows they deliver."""
    if str(GATHER_SCRIPT.parent) not in sys.path:
        sys.path.append(str(GATHER_SCRIPT.parent))  # last: its modules must shadow nothing the check imports
    import gather

    a = GATHER_ARGS[mode]

    def opt(flag: str) -> str:
        return a[a.index(flag) + 1]

    caps = gather.parse_max_blocks(opt("--max-blocks"), sms)
    codecs, codec_dims = tuple(opt("--codecs").split(",")), gather.parse_ints(opt("--codec-cols"))
    fracs = tuple(float(f) for f in opt("--cache-fracs").split(","))
    configs = [
        (d, b)
        for d in gather.parse_ints(opt("--cols"))
        for b in gather.parse_ints(opt("--batches"))
        for _ in gather.methods_for(True, d in gather.parse_ints(opt("--tune-cols")), caps, codecs if d in codec_dims else (), fracs)
    ]
    per = 1 + 3 + int(opt("--repeats"))
    return {"configurations": len(configs), "gathers": len(configs) * per, "gigabytes": sum(4 * d * b for d, b in configs) * per / 1e9}


def gather_part(env: dict, limit: float, out: Path, mode: str) -> tuple[Part, str]:
    """bench/gathering/gather.py, which starts no configuration after ``limit - GATHER_RESERVE`` s."""
    soft = max(limit - GATHER_RESERVE[mode], 1)
    cmd = [sys.executable, str(GATHER_SCRIPT), *GATHER_ARGS[mode], "--raw", "json", "--time-limit", f"{soft:g}", "--out", str(out / "gather")]
    run = run_bounded(cmd, limit, env)
    return judge_gather(run, result_rows(out, "gather"), limit, GATHER_RESERVE[mode]), run.output


def judge_gather(run: Run, rows: list[dict], limit: float, reserve: float = GATHER_RESERVE["full"]) -> Part:
    """The gather step's outcome: a failed row fails it; rows skipped for time make it partial.
    Killed at its limit, it failed: it stops by itself ``reserve`` s before, so one
    configuration ran longer than that (hung?); the rows it had written are kept."""
    part = Part("gather", seconds=run.seconds, limit=limit)
    skipped = [r for r in rows if r.get("status") == TIME_LIMIT_STATUS]
    measured = [r for r in rows if r.get("status") == "ok"]
    bad = [r for r in rows if r.get("status") not in ("ok", TIME_LIMIT_STATUS)]
    part.details = {"results": len(measured), "skipped_for_time": len(skipped), "failed": len(bad)}
    if bad:
        part.status, part.reason = "failed", f"{len(bad)} of {len(rows)} results failed: " + failure_digest(bad, "method")
    elif run.returncode is None:
        after = [ln for ln in run.output.splitlines() if ln.startswith("gather: ")]
        part.status = "failed"
        part.reason = (
            f"killed at its time limit ({limit:.0f} s) after {len(measured)} results: a configuration outran the "
            f"{reserve:.0f} s kept for it (hung?); the last finished: {after[-1].removeprefix('gather: ') if after else 'none'}"
        )
    elif run.returncode != 0 or not rows:
        part.status, part.reason = "failed", last_line(run.output, run.returncode)
    elif skipped:
        part.status = "partial"
        part.reason = (
            f"{len(measured)} results, each equal to table[ids] before timing; {len(skipped)} configurations "
            f"{TIME_LIMIT_STATUS} (at {', '.join(dict.fromkeys(str(r['row_bytes']) + ' B' for r in skipped))})"
        )
    else:
        widths = len({r["dim"] for r in rows})
        part.status, part.reason = "ok", f"{len(rows)} results at {widths} widths, every method equal to table[ids] before timing"
    return part
