"""The sampling step of bench/gpu_check.py: bench/sampler/sampling.py on the GPU, time-limited, with partial results.

Our sampler with the graph's CSC pinned in place (``gpu-pinned``) and in device memory
(``gpu-device``), our snapshot sampler with its snapshot in device memory (``gpu-snapshot``:
batches read no PCIe), against DGL's CPU sampler (``dgl-cpu``) on the same machine and graph: ms
per minibatch and sampled edges/s (relabelling and blocks included), each checked before it is timed
(bench/sampler/sampling.py); the summary gives UVA sampling of the full CSC over the device snapshot, per
batch (the goal: at least 3x). The graph is the products-shaped synthetic one at a size the step's time limit
holds (:data:`SAMPLING_ARGS`; docs/gpu.md sizes it); ogbn-products' full scale is a run of its own
(docs/benchmarks.md). The results folder may hold only 8 files, so bench/sampler/sampling.py writes into
the check's work folder and its rows go into summary.json and summary.md (:func:`sampling_figures`,
:func:`sampling_markdown`).

Beside the times, each of our methods' device operations and host synchronisations per batch
(``launches_per_batch``, ``host_syncs_per_batch``), counted first by bench/sampler/launch_count.py
(:func:`with_launch_counts`; the emulated kernels give the counts of the CPU stand-ins).

Without CUDA (``DGL_ZEROCOPY_GPU_CHECK_ON_CPU=1``) the reference backend stands in for the GPU
methods (``reference``, ``snapshot-reference``): the orchestration runs, the figures mean nothing.

The end-to-end epoch table (GPU sampling + zero-copy gather against CPU sampling +
zero-copy gather and DGL's default path) waits for the DataLoader's GPU-sampling route: not here yet.
"""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path

from gpu_check_rows import TIME_LIMIT_STATUS, figure_rows, number_cell, result_rows, section_head, split_rows
from gpu_check_setup import Part, Run, last_line, run_bounded

BENCH = Path(__file__).resolve().parents[1]
#: bench/sampler/sampling.py's arguments per mode: a graph whose generation fits the step (docs/gpu.md).
SAMPLING_ARGS = {
    "full": ["--num-nodes", "200000", "--batches", "10", "--repeats", "5", "--warmup", "3"],
    "quick": ["--num-nodes", "50000", "--batch-size", "512", "--batches", "5", "--repeats", "3"],
}
#: bench/sampler/sampling.py starts no method this close to the step's limit: the longest method at the
#: check's size, per mode (kernels compiled cold, the check against the reference backend, the timed
#: repeats) and the writing of the rows and the plot.
SAMPLING_RESERVE = {"quick": 8, "full": 15}
#: bench/sampler/launch_count.py's limit per mode (a quarter of the step's at most): one counted batch per method.
COUNT_LIMIT = {"quick": 8, "full": 20}
#: The counted method (bench/sampler/launch_count.py) whose counts each timed method's row carries.
COUNTED_AS = {
    "gpu-pinned": "gpu-pinned",
    "gpu-device": "gpu-device",
    "gpu-snapshot": "gpu-snapshot",
    "reference": "emulator",
    "snapshot-reference": "snapshot-emulator",
}
FIGURE_KEYS = (
    "method",
    "what",
    "num_nodes",
    "num_edges",
    "fanouts",
    "batch_size",
    "ms_per_batch_median",
    "ms_per_batch_q1",
    "ms_per_batch_q3",
    "medges_per_s_median",
    "medges_per_s_q1",
    "medges_per_s_q3",
    "edges_per_batch",
    "layer_edges",
    "input_nodes_per_batch",
    "x_dgl_cpu",
    "build_s",
    "refresh_ms",
    "launches_per_batch",
    "host_syncs_per_batch",
    "status",
    "wall_s",
)


def sampling_methods(cuda: bool) -> str:
    """The methods the step times: ours pinned and device-resident, the device-resident snapshot and
    DGL's CPU sampler; without CUDA the reference backend stands in for ours."""
    return "gpu-pinned,gpu-device,gpu-snapshot,dgl-cpu" if cuda else "reference,snapshot-reference,dgl-cpu"


def sampling_part(env: dict, limit: float, workdir: Path, mode: str, cuda: bool) -> tuple[Part, str]:
    """bench/sampler/launch_count.py (at most :data:`COUNT_LIMIT`), then bench/sampler/sampling.py within
    the rest of ``limit`` seconds (it starts no method after ``limit - SAMPLING_RESERVE``), their files
    in ``workdir``; the counts join the timed rows (:func:`with_launch_counts`)."""
    batch = SAMPLING_ARGS[mode][SAMPLING_ARGS[mode].index("--batch-size") + 1] if "--batch-size" in SAMPLING_ARGS[mode] else "1024"
    methods = ",".join(dict.fromkeys(COUNTED_AS[m] for m in sampling_methods(cuda).split(",") if m in COUNTED_AS))
    count_args = ["--methods", methods, "--batch-size", batch]
    counted = run_bounded(
        [sys.executable, str(BENCH / "sampler" / "launch_count.py"), *count_args, "--out", str(workdir / "launch_count")],
        min(COUNT_LIMIT[mode], limit / 4),
        env,
    )
    left = max(limit - counted.seconds, 0.1)
    soft = max(left - SAMPLING_RESERVE[mode], 1)
    stem = workdir / "sampling"
    args = [*SAMPLING_ARGS[mode], "--methods", sampling_methods(cuda), "--time-limit", f"{soft:g}"]
    run = run_bounded([sys.executable, str(BENCH / "sampler" / "sampling.py"), *args, "--out", str(stem)], left, env)
    with_launch_counts(workdir)
    part = judge_sampling(run, result_rows(workdir, "sampling"), limit)
    part.details["command"] = "python3 bench/sampler/sampling.py " + " ".join(args)
    part.details["count_command"] = "python3 bench/sampler/launch_count.py " + " ".join(count_args)
    return part, counted.output + run.output


def with_launch_counts(workdir: Path) -> list[dict]:
    """The timed rows of ``workdir/sampling.json`` with the counts of ``workdir/launch_count.json``
    (``launches_per_batch``, ``host_syncs_per_batch``, from the method :data:`COUNTED_AS` names),
    written back; the rows as they were where either file is missing."""
    path = workdir / "sampling.json"
    try:
        timed = json.loads(path.read_text())
    except (OSError, ValueError):
        return result_rows(workdir, "sampling")
    counts = {r["method"]: r for r in result_rows(workdir, "launch_count") if r.get("status") == "ok"}
    for row in timed.get("rows", []):
        counted = counts.get(COUNTED_AS.get(row.get("method"), ""))
        if counted is not None:
            row["launches_per_batch"], row["host_syncs_per_batch"] = counted["launches_per_batch"], counted["host_syncs_per_batch"]
    path.write_text(json.dumps(timed, indent=1))
    return timed.get("rows", [])


def judge_sampling(run: Run, rows: list[dict], limit: float) -> Part:
    """The step's outcome. A method that failed (its check or its run) fails the step; methods the
    time limit left out (not started, or cut off at a kill: the rows written by then are kept)
    make it partial; a method that could not run here (no DGL) is named in the reason."""
    part = Part("sampling", seconds=run.seconds, limit=limit)
    ok, failed, for_time, other = split_rows(rows)
    part.details = {"results": len(ok), "skipped_for_time": len(for_time), "skipped": len(other), "failed": len(failed)}
    skipped = "".join(f"; {r['method']} {r['status']}" for r in other)
    if failed:
        part.status = "failed"
        part.reason = f"{len(failed)} of {len(rows)} methods failed: " + "; ".join(f"{r['method']}: {r['status']}" for r in failed[:3])
    elif run.returncode is None:
        part.status = "partial"
        part.reason = (
            f"time limit ({limit:.0f} s) reached; methods finished: {', '.join(r['method'] for r in ok) or 'none'}; the rest skipped: time limit{skipped}"
        )
    elif run.returncode != 0 or not rows:
        part.status, part.reason = "failed", last_line(run.output, run.returncode)
    elif for_time:
        part.status = "partial"
        part.reason = f"{figures_text(ok) or 'no method measured'}; {', '.join(r['method'] for r in for_time)} {TIME_LIMIT_STATUS}{skipped}"
    elif not ok:
        part.status, part.reason = "failed", "no method measured" + skipped
    else:
        part.status, part.reason = "ok", figures_text(ok) + skipped
    return part


def figures_text(ok: list[dict]) -> str:
    """One line of the measured figures: ms per batch and M edges/s per method, pinned over device."""
    text = "; ".join(f"{r['method']} {r['ms_per_batch_median']:.2f} ms/batch, {r['medges_per_s_median']:.1f} M edges/s{_counts_text(r)}" for r in ok)
    by = {r["method"]: r for r in ok}
    if "gpu-pinned" in by and "gpu-device" in by:
        text += f"; device-resident {by['gpu-device']['medges_per_s_median'] / by['gpu-pinned']['medges_per_s_median']:.2f}x pinned"
    if (ratio := snapshot_ratio(ok)) is not None:
        text += f"; device snapshot {ratio:.2f}x faster per batch than pinned (goal at least 3x)"
    return text + ("; each checked before timing" if ok else "")


def _counts_text(row: dict) -> str:
    if row.get("launches_per_batch") is None:
        return ""
    return f" ({row['launches_per_batch']} launches, {row['host_syncs_per_batch']} host syncs a batch)"


def snapshot_ratio(rows: list[dict]) -> float | None:
    """ms per batch of UVA sampling of the full CSC (``gpu-pinned``) over the device-resident
    snapshot's (``gpu-snapshot``), where both ran; else None (bench/sampler/sampling.py's, on summary rows)."""
    by = {r["method"]: r for r in rows if r.get("status") == "ok"}
    if "gpu-pinned" in by and "gpu-snapshot" in by:
        return by["gpu-pinned"]["ms_per_batch_median"] / by["gpu-snapshot"]["ms_per_batch_median"]
    return None


# The step's rows as summary.json keeps them: the keys of FIGURE_KEYS.
sampling_figures = partial(figure_rows, keys=FIGURE_KEYS)


def sampling_markdown(figures: list[dict]) -> list[str]:
    """summary.md's sampling section (no lines without figures)."""
    if not figures:
        return []
    first = figures[0]
    lines = section_head(
        f"Sampling: our sampler against DGL's CPU sampler ({number_cell(first['num_nodes'], ',')} nodes, {number_cell(first['num_edges'], ',')} edges, "
        f"fanouts {first['fanouts']}, batch {first['batch_size']}; relabelling and blocks included)",
        "| method | ms per batch median (q1–q3) | M sampled edges/s median (q1–q3) | × DGL CPU | edges per batch (per layer) | what | status |",
    )
    for f in figures:
        ms = rate = per = "–"
        if f["status"] == "ok":
            ms = f"{number_cell(f['ms_per_batch_median'])} ({number_cell(f['ms_per_batch_q1'])}–{number_cell(f['ms_per_batch_q3'])})"
            rate = f"{number_cell(f['medges_per_s_median'])} ({number_cell(f['medges_per_s_q1'])}–{number_cell(f['medges_per_s_q3'])})"
            per = f"{number_cell(f['edges_per_batch'], ',.0f')} ({f['layer_edges']})"
        lines.append(f"| {f['method']} | {ms} | {rate} | {number_cell(f['x_dgl_cpu'])} | {per} | {f['what']} | {str(f['status']).replace('|', '/')} |")
    by = {f["method"]: f for f in figures if f["status"] == "ok"}
    if "gpu-pinned" in by and "gpu-device" in by:
        ratio = by["gpu-pinned"]["ms_per_batch_median"] / by["gpu-device"]["ms_per_batch_median"]
        lines += ["", f"Pinned in place takes {ratio:.2f}x the time per batch of device-resident (the goal: within 1.5x)."]
    if (snapshot := snapshot_ratio(figures)) is not None:
        row = by["gpu-snapshot"]
        lines += [
            "",
            f"UVA sampling of the full CSC (pinned) takes {snapshot:.2f}x the time per batch of sampling the snapshot in device memory "
            f"(the goal: at least 3x); the snapshot was built in {number_cell(row.get('build_s'))} s, one refresh (share 0.25) took "
            f"{number_cell(row.get('refresh_ms'), '.1f')} ms.",
        ]
    counted = [f for f in figures if f.get("launches_per_batch") is not None]
    if counted:
        each = "; ".join(f"{f['method']} {f['launches_per_batch']} launches, {f['host_syncs_per_batch']} host syncs" for f in counted)
        lines += ["", f"Device operations per batch (bench/sampler/launch_count.py, one batch counted): {each}."]
    lines += ["", "The end-to-end epoch table (GPU sampling against CPU sampling, DGL's default path) is under the epoch table."]
    return lines
