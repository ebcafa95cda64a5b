"""The results of bench/gpu_check.py: summary.json and summary.md, with each step's section.

Pure functions of the data the check collected (no GPU, no subprocess), so that the tests can
feed them made-up rows. summary.md opens with the header the check printed first (wheels, GPU,
driver, CUDA, NVRTC, CuPy), then each step's status, time limit and seconds, what the time limits
left out, and the figures. The rows are read by gpu_check_rows; the sampling, storage, PyG and scale sections
come from their steps' modules (which import gpu_check_rows, never this module).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from gpu_check_pyg import pyg_markdown
from gpu_check_rows import TIME_LIMIT_STATUS, failure_digest, finite, number_cell, tail
from gpu_check_sampling import sampling_markdown
from gpu_check_scale import scale_markdown
from gpu_check_storage import storage_markdown

# What the output folder may hold, so that it copies off a remote machine whole (see docs/gpu.md).
TRANSFER = {"files": 8, "file_bytes": 16 * 2**20, "total_bytes": 64 * 2**20, "depth": 2}
SAFE_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


def gather_figures(rows: list[dict]) -> list[dict]:
    """The key gather figures: per row size and method, GB/s median and quartiles and the ratio
    to the ceiling (h2d on a GPU), at the largest batch."""
    if not rows:
        return []
    batch = max(r["batch"] for r in rows)
    keys = ("dtype", "dim", "row_bytes", "batch", "method", "gbps_median", "gbps_q1", "gbps_q3", "ratio_to_ceiling", "status", "hit_rate", "wall_s")
    return [{k: r.get(k) for k in keys} for r in rows if r["batch"] == batch]


def epoch_figures(rows: list[dict]) -> list[dict]:
    """The key epoch figures: per source, sampler (``cpu`` for rows written before bench/training/epoch.py
    had samplers) and prefetch, epoch seconds (median, min, max) and the share of the step spent
    waiting for data."""
    keys = ("source", "sampler", "prefetch", "epoch_time", "epoch_min", "epoch_max", "wait_share", "test_acc", "status")
    return [{k: r.get(k) for k in keys} | {"sampler": r.get("sampler") or "cpu"} for r in rows]


def end_to_end(epoch: list[dict]) -> dict | None:
    """The end-to-end rows from the epoch figures: GPU sampling + zero-copy gather, CPU
    sampling + zero-copy gather (the ``zerocopy`` source, else the first source with both samplers:
    the CPU stand-in), both at the highest prefetch measured with GPU sampling, and DGL's default
    path (``dgl``, prefetch 0; None where it did not run). ``ratio``: GPU-sampling epoch over
    CPU-sampling epoch (the goal: at most 1/3); None when either did not finish. None without a
    GPU-sampling row."""
    gpu_rows = [e for e in epoch if e["sampler"] == "gpu"]
    if not gpu_rows:
        return None
    source = "zerocopy" if any(e["source"] == "zerocopy" for e in gpu_rows) else gpu_rows[0]["source"]
    prefetch = max(e["prefetch"] for e in gpu_rows if e["source"] == source)

    def pick(src: str, sampler: str, pf: int) -> dict | None:
        return next((e for e in epoch if (e["source"], e["sampler"], e["prefetch"]) == (src, sampler, pf)), None)

    gpu, cpu, dgl = pick(source, "gpu", prefetch), pick(source, "cpu", prefetch), pick("dgl", "cpu", 0)
    ok = [e is not None and e["status"] == "ok" and finite(e["epoch_time"]) for e in (gpu, cpu)]
    return {
        "source": source,
        "prefetch": prefetch,
        "gpu_sampling": gpu,
        "cpu_sampling": cpu,
        "dgl_default": dgl,
        "ratio": gpu["epoch_time"] / cpu["epoch_time"] if all(ok) else None,
    }


def end_to_end_markdown(e2e: dict | None) -> list[str]:
    """summary.md's end-to-end table: the three rows and the ratio line."""
    if e2e is None:
        return []
    lines = [
        "",
        f"## End to end: GPU sampling against CPU sampling ({e2e['source']} gather, prefetch {e2e['prefetch']}) and DGL's default path",
        "",
        "| route | epoch s median (min–max) | test acc | status |",
        "|---|---|---|---|",
    ]
    names = (("gpu_sampling", f"GPU sampling + {e2e['source']} gather"), ("cpu_sampling", f"CPU sampling + {e2e['source']} gather"))
    for key, name in (*names, ("dgl_default", "DGL's default path (its DataLoader, CPU sampling)")):
        e = e2e[key]
        if e is None:
            why = "not run here (DGL's DataLoader needs a CUDA build of DGL on a GPU)" if key == "dgl_default" else "not run (time limit?)"
            lines.append(f"| {name} | – | – | {why} |")
        else:
            lines.append(
                f"| {name} | {_spread(e['epoch_time'], e['epoch_min'], e['epoch_max'])} | {number_cell(e['test_acc'], '.4f')} | {_cell(e['status'])} |"
            )
    if e2e["ratio"] is not None:
        acc = (e2e["gpu_sampling"]["test_acc"], e2e["cpu_sampling"]["test_acc"])
        lines += [
            "",
            f"GPU-sampling epoch / CPU-sampling epoch: {e2e['ratio']:.2f} ({1 / e2e['ratio']:.2f}x faster; the goal: at least 3x, "
            f"i.e. at most 0.33, at the same accuracy: test acc {number_cell(acc[0], '.4f')} against {number_cell(acc[1], '.4f')}).",
        ]
    return lines


def _spread(median, low, high) -> str:
    """``median (low–high)``, or a dash where there is no number."""
    return f"{median:.2f} ({number_cell(low)}–{number_cell(high)})" if finite(median) else "–"


def _json_safe(value):
    """NaN and infinity become None (JSON has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def time_skips(summary: dict) -> list[str]:
    """What the time limits left out, one line per step: the tests not run (and the one cut off
    while running), the gather configurations skipped, a step not started."""
    lines = []
    for p in summary["parts"]:
        d = p.get("details", {})
        if p["name"] == "pytest" and (d.get("not_run") or d.get("in_flight")):
            not_run = d.get("not_run", [])
            shown = ", ".join(not_run[:20]) + (f" and {len(not_run) - 20} more" if len(not_run) > 20 else "")
            cut = f"; cut off while running: {d['in_flight']}" if d.get("in_flight") else ""
            lines.append(f"pytest: {len(not_run)} tests not run{': ' + shown if shown else ''}{cut}")
        elif p["status"] == "partial" and p["name"] not in ("pytest", "gather"):
            lines.append(f"{p['name']}: {p['reason']}")
    skipped = [g for g in summary["figures"]["gather"] if g["status"] == TIME_LIMIT_STATUS]
    if skipped:
        where = list(dict.fromkeys(f"{g['row_bytes']} B" for g in skipped))
        lines.append(
            f"gather: {len(skipped)} configurations at {', '.join(where)}: "
            + ", ".join(f"{g['method']} at {g['row_bytes']} B" for g in skipped[:12])
            + (" ..." if len(skipped) > 12 else "")
        )
    elif any(p["name"] == "gather" and p["status"] == "partial" for p in summary["parts"]):
        lines.append(next(f"gather: {p['reason']}" for p in summary["parts"] if p["name"] == "gather"))
    return lines


def render_markdown(summary: dict) -> str:
    """summary.md without the logs: the header, environment, parts, what the time limits left
    out, gather and epoch figures."""
    env, parts = summary["environment"], summary["parts"]
    verdict = "passed" if summary["exit_code"] == 0 else f"NOT PASSED (exit {summary['exit_code']})"
    if summary["exit_code"] == 0 and any(p["status"] == "partial" for p in parts):
        verdict += ", parts skipped for time (see below)"
    if not summary.get("finished", True):
        verdict = "UNFINISHED (still running, or stopped before the end)"
    lines = [
        f"# gpu-check on {env.get('device', '?')}: {verdict}",
        "",
        f"`{summary['command']}`, started {summary['started']}, {summary['seconds']:.0f} s in all "
        f"(time limit {summary.get('time_limit_s', '?')} s); files in `{summary['out']}`.",
        "",
    ]
    if summary.get("header"):
        lines += ["```", *summary["header"], "```", ""]
    lines += ["| what | value |", "|---|---|"]
    names = {
        "device": "device",
        "compute_capability": "compute capability",
        "sm_count": "SMs",
        "memory_gib": "GPU memory GiB",
        "gpu_count": "GPUs",
        "driver": "driver",
        "cuda_driver_api": "CUDA driver API",
        "cuda_runtime": "CUDA runtime (CuPy)",
        "torch_cuda": "CUDA of torch",
        "nvrtc_cupy": "NVRTC (CuPy)",
        "nvrtc_check": "NVRTC (dgl_zerocopy lookup)",
        "python": "python",
        "torch": "torch",
        "cupy": "cupy",
        "numpy": "numpy",
        "dgl": "dgl",
        "cpu_count": "CPUs",
        "kernel_cache": "kernel cache",
    }
    lines += [f"| {label} | {_cell(env[key])} |" for key, label in names.items() if key in env]
    lines += ["", "## Parts", "", "| part | status | time limit s | seconds | kernels compiled | details |", "|---|---|---|---|---|---|"]
    lines += [
        f"| {p['name']} | {p['status']} | {number_cell(p.get('limit'), '.0f')} | {p['seconds']:.1f} | "
        f"{p.get('details', {}).get('kernels_compiled', '–')} | {_cell(p['reason'])} |"
        for p in parts
    ]
    if skips := time_skips(summary):
        lines += ["", "## Skipped for time (not failures)", "", *(f"- {_cell(s)}" for s in skips)]

    gather = summary["figures"]["gather"]
    plain = [g for g in gather if "+" not in g["method"]]
    if plain:
        methods = list(dict.fromkeys(g["method"] for g in plain))
        lines += [
            "",
            f"## Gather: GB/s median (ratio to {summary['ceiling']}), {plain[0]['dtype']}, {plain[0]['batch']:,} random rows",
            "",
            "| row bytes | cols | " + " | ".join(methods) + " |",
            "|---|---|" + "---|" * len(methods),
        ]
        for dim in dict.fromkeys(g["dim"] for g in plain):
            at = {g["method"]: g for g in plain if g["dim"] == dim}
            first = next(iter(at.values()))
            cells = [_gather_cell(at.get(m)) for m in methods]
            lines.append(f"| {first['row_bytes']} | {dim} | " + " | ".join(cells) + " |")
    if bad := [g for g in gather if g["status"] not in ("ok", TIME_LIMIT_STATUS)]:
        lines += ["", "Not measured: " + _cell(failure_digest(bad, "method", limit=10))]
    cached = [g for g in gather if "+cache=" in g["method"]]
    if cached:
        plain_at = {g["method"]: g for g in gather if g["dim"] == cached[0]["dim"] and "+" not in g["method"]}
        lines += [
            "",
            f"## Hot-row cache at {cached[0]['row_bytes']} B rows ({cached[0]['dim']} cols; uniform ids, random cached rows)",
            "",
            "| method | cached share | hit rate | GB/s median (q1–q3) | ratio to the same backend without cache | status |",
            "|---|---|---|---|---|---|",
        ]
        for g in cached:
            base, share = g["method"].split("+cache=")
            ref = plain_at.get(base)
            rel = g["gbps_median"] / ref["gbps_median"] if ref and finite(g["gbps_median"]) and finite(ref["gbps_median"]) else None
            lines.append(
                f"| {base} | {share} | {number_cell(g.get('hit_rate'), '.3f')} | {_spread(g['gbps_median'], g['gbps_q1'], g['gbps_q3'])} | "
                f"{number_cell(rel)} | {_cell(g['status'])} |"
            )
    options = [
        g
        for g in gather
        if g["method"].split("+")[0] == "zerocopy"
        and "+cache=" not in g["method"]
        and any("+" in h["method"] and "+cache=" not in h["method"] and h["dim"] == g["dim"] for h in gather)
    ]
    if options:
        default = next((g for g in options if g["method"] == "zerocopy"), None)
        lines += [
            "",
            f"## Zero-copy options at {options[0]['row_bytes']} B rows ({options[0]['dim']} cols, SMs: {env.get('sm_count', '?')})",
            "",
            "| method | GB/s median (q1–q3) | ratio to " + summary["ceiling"] + " | ratio to default zerocopy | status |",
            "|---|---|---|---|---|",
        ]
        for g in options:
            rel = g["gbps_median"] / default["gbps_median"] if default and finite(g["gbps_median"]) and finite(default["gbps_median"]) else None
            lines.append(
                f"| {g['method']} | {_spread(g['gbps_median'], g['gbps_q1'], g['gbps_q3'])} | {number_cell(g['ratio_to_ceiling'])} | "
                f"{number_cell(rel)} | {_cell(g['status'])} |"
            )
    epoch = summary["figures"]["epoch"]
    sampled = any(e.get("sampler") == "gpu" for e in epoch)  # the sampler column only where GPU sampling ran
    if epoch:
        lines += [
            "",
            "## Epoch: GraphSAGE on the synthetic graph",
            "",
            f"| source |{' sampler |' if sampled else ''} prefetch | epoch s median (min–max) | wait share of step | test acc | status |",
            "|---|---|---|---|---|---|" + ("---|" if sampled else ""),
        ]
        for e in epoch:
            share = f"{100 * e['wait_share']:.1f} %" if finite(e["wait_share"]) else "–"
            sampler_cell = f" {e['sampler']} |" if sampled else ""
            lines.append(
                f"| {e['source']} |{sampler_cell} {e['prefetch']} | {_spread(e['epoch_time'], e['epoch_min'], e['epoch_max'])} | {share} | "
                f"{number_cell(e['test_acc'], '.4f')} | {_cell(e['status'])} |"
            )
    lines += end_to_end_markdown(end_to_end(epoch))
    lines += sampling_markdown(summary["figures"].get("sampling", []))
    lines += storage_markdown(summary["figures"].get("storage", []))
    lines += pyg_markdown(summary["figures"].get("pyg", []))
    lines += scale_markdown(summary["figures"].get("scale", []))
    if summary.get("transfer_problems"):
        lines += ["", "## Results folder", "", *(f"- {p}" for p in summary["transfer_problems"])]
    return "\n".join(lines) + "\n"


def _gather_cell(g: dict | None) -> str:
    if g is None:
        return "–"
    if g["status"] != "ok":
        return "time limit" if g["status"] == TIME_LIMIT_STATUS else "failed" if g["status"].startswith("failed") else "skipped"
    return f"{number_cell(g['gbps_median'])} ({number_cell(g['ratio_to_ceiling'])})"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def write_summary(folder: Path, summary: dict, logs: dict[str, str]) -> tuple[Path, Path]:
    """Write summary.json and summary.md (the rendered summary, then the tails of failed parts'
    output and the whole pytest output from ``logs``) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    json_path, md_path = folder / "summary.json", folder / "summary.md"
    json_path.write_text(json.dumps(_json_safe(summary), indent=1))
    text = render_markdown(summary)
    for p in summary["parts"]:
        if p["status"] in ("failed", "skipped") and p["name"] != "pytest" and logs.get(p["name"]):
            text += f"\n## {p['name']}: the last lines of its output\n\n```\n{tail(logs[p['name']], 60)}\n```\n"
    if logs.get("pytest"):
        text += f"\n## pytest -m gpu output\n\n```\n{logs['pytest'].rstrip()}\n```\n"
    md_path.write_text(text, encoding="utf-8")
    return json_path, md_path


def transfer_problems(folder: Path) -> list[str]:
    """What would stop ``folder`` being copied whole off a remote machine: more than 8 files,
    a file over 16 MiB, over 64 MiB in all, a name not of letters, digits, '.', '_', '-', or a
    file more than 2 folders down."""
    problems, total = [], 0
    files = [p for p in folder.rglob("*") if p.is_file() or p.is_symlink()]
    if len(files) > TRANSFER["files"]:
        problems.append(f"{len(files)} files, more than {TRANSFER['files']}")
    for p in files:
        rel = p.relative_to(folder)
        total += p.lstat().st_size
        if not all(SAFE_NAME.match(part) for part in rel.parts):
            problems.append(f"{rel}: a name of other characters than letters, digits, '.', '_' and '-'")
        if len(rel.parts) - 1 > TRANSFER["depth"]:
            problems.append(f"{rel}: more than {TRANSFER['depth']} folders down")
        if p.lstat().st_size > TRANSFER["file_bytes"]:
            problems.append(f"{rel}: over {TRANSFER['file_bytes'] // 2**20} MiB")
    if total > TRANSFER["total_bytes"]:
        problems.append(f"{total / 2**20:.1f} MiB in all, over {TRANSFER['total_bytes'] // 2**20} MiB")
    return problems
