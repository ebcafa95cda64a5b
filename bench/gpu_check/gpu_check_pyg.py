"""The PyG step of bench/gpu_check.py: bench/training/pyg_epoch.py on the GPU, time-limited.

Our PyG front end with ``device="cuda"`` (``dgl_zerocopy.pyg.NeighborLoader``: our kernels sample from the
graph's CSC pinned in host memory, our store gathers the feature rows zero-copy, the next batch prepared
on a side stream) against our DGL route on the same GPU (``dgl_zerocopy.DataLoader`` with ``use_uva=True``:
the same kernels and store behind DGL's loader signature), and against PyG's own ``NeighborLoader`` where
the image has pyg-lib or torch-sparse (it samples on the CPU; the batch is then moved with ``.to("cuda")``):
on a PyPI install its row says ``skipped: ImportError: ...``. Loading only (sample + gather, no model),
an epoch of the products-shaped synthetic graph's training nodes per route in turn, the device named in
the rows (:data:`PYG_ARGS`; docs/gpu.md sizes it). The results folder may hold only 8 files, so
bench/training/pyg_epoch.py writes into the check's work folder and its rows go into summary.json and
summary.md (:func:`pyg_figures`, :func:`pyg_markdown`).

Without CUDA (``DGL_ZEROCOPY_GPU_CHECK_ON_CPU=1``) the routes run on the CPU: the orchestration runs, the
figures say nothing of a GPU.
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

from gpu_check_rows import TIME_LIMIT_STATUS, figure_rows, number_cell, result_rows, section_head, split_rows
from gpu_check_setup import Part, Run, last_line, run_bounded

BENCH = Path(__file__).resolve().parents[1]
STEM = "pyg_epoch"
#: bench/training/pyg_epoch.py's arguments per mode: the epoch step's graph (cached by then), epochs the
#: step's limit holds (docs/gpu.md).
PYG_ARGS = {"full": ["--num-nodes", "200000", "--epochs", "5", "--prefetch", "0,2"], "quick": ["--num-nodes", "50000", "--epochs", "3", "--prefetch", "2"]}
#: The routes, ours first (PyG's own needs pyg-lib or torch-sparse; DGL's own loader needs a CUDA build of
#: DGL and is the epoch step's).
PYG_ROUTES = "pyg,dgl-route,pyg-own"
#: bench/training/pyg_epoch.py builds no route and starts no round of epochs this close to the step's
#: limit: a round at the check's size and the writing of the rows and the plot.
PYG_RESERVE = {"quick": 6, "full": 12}
FIGURE_KEYS = (
    "route",
    "what",
    "device",
    "prefetch",
    "num_nodes",
    "num_edges",
    "fanouts",
    "batch_size",
    "epoch_s_median",
    "epoch_s_q1",
    "epoch_s_q3",
    "epoch_s_min",
    "epoch_s_max",
    "medges_per_s_median",
    "batches_per_epoch",
    "edges_per_batch",
    "nodes_per_batch",
    "build_s",
    "status",
    "wall_s",
)


def pyg_part(env: dict, limit: float, workdir: Path, mode: str, cuda: bool) -> tuple[Part, str]:
    """bench/training/pyg_epoch.py within ``limit`` seconds (it starts nothing after ``limit - PYG_RESERVE``),
    its files in ``workdir``."""
    soft = max(limit - PYG_RESERVE[mode], 1)
    args = [*PYG_ARGS[mode], "--routes", PYG_ROUTES, "--device", "cuda" if cuda else "cpu", "--time-limit", f"{soft:g}"]
    run = run_bounded([sys.executable, str(BENCH / "training" / "pyg_epoch.py"), *args, "--out", str(workdir / STEM)], limit, env)
    part = judge_pyg(run, result_rows(workdir, STEM), limit)
    part.details["command"] = "python3 bench/training/pyg_epoch.py " + " ".join(args)
    return part, run.output


def judge_pyg(run: Run, rows: list[dict], limit: float) -> Part:
    """The step's outcome. A route that failed (its first-batch check or an epoch) fails the step; routes the
    time limit left out (or a kill cut off: the rows written by then are kept) make it partial; a route that
    cannot run here (PyG's own without pyg-lib, ours without DGL) is named in the reason; the step is skipped
    when no route could run."""
    part = Part("pyg", seconds=run.seconds, limit=limit)
    ok, failed, for_time, other = split_rows(rows)
    part.details = {"results": len(ok), "skipped_for_time": len(for_time), "skipped": len(other), "failed": len(failed)}
    skipped = "".join(f"; {_name(r)} {r['status']}" for r in other)
    if failed:
        part.status = "failed"
        part.reason = f"{len(failed)} of {len(rows)} routes failed: " + "; ".join(f"{_name(r)}: {r['status']}" for r in failed[:3])
    elif run.returncode is None:
        done = ", ".join(_name(r) for r in ok) or "none"
        part.status, part.reason = "partial", f"time limit ({limit:.0f} s) reached; routes measured: {done}; the rest skipped: time limit{skipped}"
    elif run.returncode != 0 or not rows:
        part.status, part.reason = "failed", last_line(run.output, run.returncode)
    elif for_time:
        part.status = "partial"
        part.reason = f"{figures_text(ok) or 'no route measured'}; {', '.join(_name(r) for r in for_time)} {TIME_LIMIT_STATUS}{skipped}"
    elif not ok:
        part.status, part.reason = "skipped", str(other[0]["status"]).removeprefix("skipped: ") if other else "no route measured"
    else:
        part.status, part.reason = "ok", figures_text(ok) + skipped
    return part


def _name(row: dict) -> str:
    return row["route"] if row.get("prefetch") in ("-", None, "") else f"{row['route']} prefetch {row['prefetch']}"


def ratio(rows: list[dict]) -> tuple[float, object] | None:
    """Our PyG route's epoch over our DGL route's at the highest prefetch both ran, and that prefetch; else None."""
    by = {(r["route"], r.get("prefetch")): r for r in rows if r.get("status") == "ok"}
    both = [p for (route, p) in by if route == "pyg" and ("dgl-route", p) in by]
    if not both:
        return None
    prefetch = max(both, key=lambda p: int(p) if str(p).isdigit() else -1)
    return by[("pyg", prefetch)]["epoch_s_median"] / by[("dgl-route", prefetch)]["epoch_s_median"], prefetch


def figures_text(ok: list[dict]) -> str:
    """One line: per route the epoch's seconds and sampled edges/s; our PyG route over our DGL route."""
    text = "; ".join(f"{_name(r)} {r['epoch_s_median']:.3f} s/epoch, {r['medges_per_s_median']:.1f} M edges/s" for r in ok)
    if (found := ratio(ok)) is not None:
        text += f"; PyG route / DGL route {found[0]:.2f} (epoch, prefetch {found[1]})"
    return text


# The step's rows as summary.json keeps them: the keys of FIGURE_KEYS.
pyg_figures = partial(figure_rows, keys=FIGURE_KEYS)


def pyg_markdown(figures: list[dict]) -> list[str]:
    """summary.md's PyG section (no lines without figures)."""
    if not figures:
        return []
    first = figures[0]
    lines = section_head(
        f"PyG route: our PyG loader against our DGL route (loading only: sample + gather; {first.get('device')}; "
        f"{number_cell(first['num_nodes'], ',')} nodes, fanouts {first['fanouts']}, batch {first['batch_size']})",
        "| route | prefetch | epoch s median (q1–q3) | M sampled edges/s | edges per batch | nodes per batch | status |",
    )
    for f in figures:
        epoch = rate = edges = nodes = "–"
        if f["status"] == "ok":
            epoch = f"{number_cell(f['epoch_s_median'], '.3f')} ({number_cell(f['epoch_s_q1'], '.3f')}–{number_cell(f['epoch_s_q3'], '.3f')})"
            rate, edges, nodes = number_cell(f["medges_per_s_median"]), number_cell(f["edges_per_batch"], ",.0f"), number_cell(f["nodes_per_batch"], ",.0f")
        lines.append(f"| {f['route']} | {f['prefetch']} | {epoch} | {rate} | {edges} | {nodes} | {str(f['status']).replace('|', '/')} |")
    if (found := ratio(figures)) is not None:
        same = ", the same kernels and store" if str(first.get("device")) != "cpu" else ", each with its own CPU sampler"
        lines += ["", f"Our PyG route's epoch takes {found[0]:.2f}x our DGL route's (prefetch {found[1]}{same})."]
    return lines
