"""One command that checks the whole GPU path: the GPU tests, the gather, sampling, storage, epoch, PyG and scale benchmarks, multi-GPU DDP.

    make gpu-check [GPU_CHECK_ARGS="--out DIR ..."]        (docs/gpu.md)
    python3 bench/gpu_check.py [--out DIR] [--wheels DIR] [--site DIR] [--parts pytest,gather,sampling,storage,epoch,pyg,scale,ddp] [--full] [--time-limit S]

The two are the same run (``make`` only adds its check for CUDA, below); the second needs no
``make`` and no PYTHONPATH: the checkout is found from this file. bench/gpu_check.py only finds this
module; the check's parts sit beside it in bench/gpu_check/ (bench/README.md draws their imports).

Without CUDA (``torch.cuda.is_available()`` False, or no torch) it prints one line and exits 2,
before anything else (``--probe`` prints that line, or nothing where CUDA works, and exits 0:
``make gpu-check`` asks it first and stops with the line as its only output). With CUDA it
first installs the wheels of ``--wheels`` that the image lacks, offline, into ``--site``, then
prints a header before anything else: the wheels installed, the GPU, driver, CUDA, NVRTC and
CuPy versions, the kernel cache and the time limits. The default pass takes at most 300 s
(correctness first: the GPU tests, then one short figure per benchmark), so that a run, a fix and
a second run take minutes; ``--full`` runs the whole benchmark set in 540 s. Then the steps, each in a subprocess with
its own time limit (docs/gpu.md sizes them), output echoed as it comes:

1. ``pytest -m gpu``, with a plugin (bench/gpu_check/gpu_check_pytest.py) that records each test's outcome
   as it happens; at the time limit pytest is interrupted (SIGINT, then killed after a grace):
   the tests that finished keep their outcomes, the others are reported as not run for time;
2. ``bench/gathering/gather.py``: zerocopy (aligned and naive), cpu, gpu against h2d, fp32 rows of
   64 B to 4 KB (512 B and 1 KB first), the zero-copy options, compressed tables and hot-row
   caches (docs/gpu.md); it appends each configuration's row to gather.csv as it is measured and
   starts none after its own limit (those rows read ``skipped: time limit``);
3. ``bench/sampler/sampling.py`` (bench/gpu_check/gpu_check_sampling.py): our GPU sampler, the CSC pinned in place and
   device-resident, against DGL's CPU sampler: ms per minibatch and sampled edges/s, each method
   checked first; it starts no method after its own limit; its rows go into the summary;
4. ``bench/tiers/storage.py`` (bench/gpu_check/gpu_check_storage.py): a table 4x its host budget on the machine's
   disk, our tiers (zerocopy backend) with and without reading ahead and int8 codes against an
   mmap of the file: storage MiB per epoch and the wait's share of the step; it starts
   no run after its own limit; its rows go into the summary;
5. ``bench/training/epoch.py``: GraphSAGE on the synthetic graph, sources dgl, zerocopy and gpu, each of
   ours sampled on the CPU and on the GPU (``--samplers cpu,gpu``), prefetch 0 and 2; the summary's
   end-to-end table sets GPU sampling + zero-copy gather against CPU sampling + zero-copy gather
   and DGL's default path; skipped, with the reason, when ``import dgl`` fails;
6. ``bench/training/pyg_epoch.py`` (bench/gpu_check/gpu_check_pyg.py): our PyG ``NeighborLoader`` with
   ``device="cuda"`` (GPU sampling from the pinned CSC, zero-copy features) against our DGL route on the
   GPU and PyG's own loader where the image has pyg-lib: seconds per loading epoch and sampled edges/s;
   it starts nothing after its own limit; its rows go into the summary;
7. ``bench/training/scale.py --device cuda`` (bench/gpu_check/gpu_check_scale.py): a papers100M-shaped graph
   generated to the machine's disk (1 % of its nodes, 10 % with ``--full``), its CSC pinned in place, sampled
   by our GPU sampler and checked against the files, the rows gathered zero-copy onto the GPU, GraphSAGE
   steps there; it starts no stage after its own limit; its row goes into the summary;
8. ``dgl-zerocopy train --nproc N`` on all N GPUs where ``torch.cuda.device_count() > 1``;
9. only when ``--parts`` names it (not beside gather or epoch: 8 files come back), ``link``:
   bench/gathering/link_experiment.py (bench/gpu_check/gpu_check_link.py), about 150 s;
10. only when ``--parts`` names it (not beside gather, epoch or link), ``papers``: bench/training/papers_epoch.py
   (bench/gpu_check/gpu_check_papers.py), a 25 % papers100M-shaped graph through routes a, b, b8, c and d,
   at most 420 s; the check's time limit is then the ``--full`` one unless ``--time-limit`` says otherwise.

Statuses: ok; partial (the time limit left something out, and everything that ran passed);
failed; skipped (could not run, e.g. no DGL); not run (not asked for, or one GPU for DDP).
Exit code: 0 when every step is ok, partial or not run; 1 otherwise; 2 no CUDA.

It writes into ``--out`` (default bench/results/gpu/) at most 8 files, a folder small enough to
copy off a remote machine: gather.{csv,json,png}, epoch.{csv,json,png}, summary.json and summary.md (rewritten
after every step, so a run stopped from outside still leaves what it had; the sampling and storage
rows are in the two summaries, as are the PyG and scale steps').

Testing aid: DGL_ZEROCOPY_GPU_CHECK_ON_CPU=1 runs the steps on a machine without CUDA (the
orchestration only: GPU tests skip, the benchmarks take their CPU paths, the reference backend
stands in for the GPU sampler; the figures mean nothing).
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

HERE = Path(__file__).resolve().parent  # bench/gpu_check/: this check's modules
BENCH = HERE.parent
REPO = BENCH.parent
sys.path[:0] = [str(HERE), str(BENCH)]  # bench/: common.py
from common import command_line  # noqa: E402
from gpu_check_gather import GATHER_ARGS, GATHER_RESERVE, GATHER_SCRIPT, gather_part, gather_plan, judge_gather  # noqa: E402,F401
from gpu_check_link import LINK_EXCLUSIVE, LINK_FILES, LINK_LIMIT, link_part  # noqa: E402
from gpu_check_outcome import PYTEST_TEST_TIMEOUT, judge_pytest, parse_pytest_counts, pytest_command, pytest_short_summary  # noqa: E402,F401
from gpu_check_papers import PAPERS_EXCLUSIVE, PAPERS_FILES, PAPERS_LIMIT, papers_part  # noqa: E402
from gpu_check_pyg import judge_pyg, pyg_figures, pyg_part  # noqa: E402,F401
from gpu_check_pytest import LOG_VARIABLE, read_progress  # noqa: E402
from gpu_check_report import SAFE_NAME, TRANSFER, end_to_end, epoch_figures, gather_figures, render_markdown, transfer_problems, write_summary  # noqa: E402,F401
from gpu_check_rows import TIME_LIMIT_STATUS, failure_digest, result_rows, tail  # noqa: E402
from gpu_check_sampling import judge_sampling, sampling_figures, sampling_part  # noqa: E402,F401
from gpu_check_scale import judge_scale, scale_figures, scale_part  # noqa: E402,F401
from gpu_check_setup import Part, Run, child_env, cuda_version_text, environment, header_lines, install_wheels, last_line, pip_install_command, run_bounded  # noqa: E402,F401
from gpu_check_storage import judge_storage, storage_figures, storage_part  # noqa: E402,F401

DEFAULT_OUT = REPO / "bench" / "results" / "gpu"
EPOCH_SCRIPT = BENCH / "training" / "epoch.py"
DEFAULT_SITE = Path("/tmp/dgl-zerocopy-site")
PARTS = ("pytest", "gather", "sampling", "storage", "epoch", "pyg", "scale", "ddp")
#: Steps run only when --parts names them (docs/gpu.md): ``link`` (bench/gathering/link_experiment.py, LINK_LIMIT s) and
#: ``papers`` (bench/training/papers_epoch.py at 25 % of papers100M, PAPERS_LIMIT s).
OPTIONAL_PARTS = ("link", "papers")
PASSING = ("ok", "partial", "not run")
#: The whole check's seconds: the default pass (correctness first: the ``gpu`` tests, then one short figure per
#: benchmark) takes at most 300 s, so that a run, a fix and a second run take minutes; ``--full`` runs the whole
#: benchmark set in 540 s, under 10 minutes with the start. docs/gpu.md sizes both.
TOTAL_LIMIT = 300
FULL_TOTAL_LIMIT = 540
#: Each step's time limit (seconds) in the default pass; on one GPU they add up to TOTAL_LIMIT (ddp runs only
#: on several GPUs, and then the steps before it give way: :func:`step_limit`).
LIMITS = {"wheels": 15, "pytest": 120, "gather": 25, "sampling": 25, "storage": 20, "epoch": 35, "pyg": 25, "scale": 35, "ddp": 45}
#: The same with ``--full``, from the measured and counted figures of docs/gpu.md.
FULL_LIMITS = {"wheels": 15, "pytest": 140, "gather": 95, "sampling": 50, "storage": 40, "epoch": 60, "pyg": 40, "scale": 100, "ddp": 60}
MIN_STEP = 15  # a step with fewer seconds left than this is not started (partial: time limit)
PYTEST_GRACE = 20  # pytest is interrupted this long before its limit, to end its session cleanly
RESULT_FILES = ("gather.csv", "gather.json", "gather.png", "epoch.csv", "epoch.json", "epoch.png", "summary.json", "summary.md")

EPOCH_ARGS = {"full": ["--prefetch", "2", "--epochs", "4"], "quick": ["--prefetch", "2", "--epochs", "3", "--num-nodes", "50000"]}
# The epoch part's graph (cached by then), 3 epochs evaluated once after the last.
DDP_ARGS = {"full": ["--num-nodes", "200000", "--epochs", "3", "--eval-every", "3"], "quick": ["--num-nodes", "50000", "--epochs", "2", "--eval-every", "2"]}


def step_limit(cap: float, left: float, later: float) -> float:
    """A step's seconds: its own ``cap``, cut so that the steps after it keep theirs (``later``,
    their sum) within the ``left`` seconds of the check. Below :data:`MIN_STEP` it is not started."""
    return max(0.0, min(cap, left - later))


def cache_entries(folder: Path | None) -> int:
    """Kernel modules in CuPy's kernel cache ``folder``: CuPy 14 writes one ``<hash>.cubin`` (or
    ``.ltoir``) per module it compiles, ours (one instantiation each) and its own kernels alike."""
    try:
        return sum(1 for p in folder.iterdir() if p.suffix in (".cubin", ".ltoir")) if folder else 0
    except OSError:
        return 0


# -- the steps -------------------------------------------------------------------------------


def pytest_part(env: dict, limit: float, workdir: Path, cwd: Path = REPO) -> tuple[Part, str]:
    """``pytest -m gpu`` in ``cwd`` within ``limit`` seconds, interrupted :data:`PYTEST_GRACE` s
    before it; the plugin's record goes to ``workdir``."""
    log = workdir / "pytest-progress.jsonl"
    log.unlink(missing_ok=True)
    # bench/gpu_check/ last on the path: it holds the plugin, and must shadow nothing the tests import
    env = {**env, LOG_VARIABLE: str(log), "PYTHONPATH": os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(HERE)) if p)}
    run = run_bounded(pytest_command(sys.executable), limit, env, cwd=cwd, interrupt_at=limit - PYTEST_GRACE)
    return judge_pytest(run, read_progress(log), limit), run.output


def probe_dgl(part: Part, env: dict, timeout: float) -> tuple[Run, str | None]:
    """``import dgl_zerocopy, dgl`` in a subprocess: DGL's version, or None after marking ``part``
    skipped with the error."""
    probe = run_bounded([sys.executable, "-c", "import dgl_zerocopy, dgl; print('DGL_VERSION=' + dgl.__version__)"], min(90, timeout), env, echo=False)
    if probe.returncode != 0:
        why = f"timed out after {min(90, timeout):.0f} s" if probe.returncode is None else last_line(probe.output, probe.returncode)
        part.status, part.reason, part.seconds = "skipped", f"import dgl failed: {why}", probe.seconds
        part.details["output_tail"] = tail(probe.output)
        return probe, None
    return probe, next((ln.split("=", 1)[1] for ln in probe.output.splitlines() if ln.startswith("DGL_VERSION=")), "?")


def epoch_sources(cuda: bool) -> tuple[str, str]:
    """bench/training/epoch.py's ``--sources`` and ``--samplers`` for the check: on a GPU DGL's default path
    and the zerocopy and gpu routes, each of ours with CPU and GPU sampling (the ``cpu`` source
    left out to keep the step in its limit: docs/gpu.md); without CUDA the cpu route with the stand-in."""
    return ("dgl,zerocopy,gpu", "cpu,gpu") if cuda else ("cpu", "cpu,gpu")


def epoch_part(env: dict, timeout: float, out: Path, mode: str, sources: str, samplers: str = "cpu") -> tuple[Part, str, str]:
    """The epoch benchmark, or skipped when ``import dgl`` fails. Also returns DGL's version.
    Without CUDA a GPU sampler in ``samplers`` runs the CPU stand-in (a testing aid)."""
    part = Part("epoch", limit=timeout)
    probe, dgl_version = probe_dgl(part, env, timeout)
    if dgl_version is None:
        return part, probe.output, f"not importable ({part.reason.removeprefix('import dgl failed: ')})"
    left = timeout - probe.seconds
    cmd = [sys.executable, str(EPOCH_SCRIPT), *EPOCH_ARGS[mode], "--sources", sources, "--samplers", samplers, "--out", str(out / "epoch")]
    if "gpu" in samplers.split(",") and os.environ.get("DGL_ZEROCOPY_GPU_CHECK_ON_CPU") == "1":
        cmd.append("--emulate-gpu-sampler")
    run = run_bounded(cmd, left, env)
    part.seconds = probe.seconds + run.seconds
    rows = result_rows(out, "epoch")
    bad = [r for r in rows if r.get("status") != "ok"]
    if bad:
        part.status, part.reason = "failed", f"{len(bad)} of {len(rows)} routes failed: " + failure_digest(bad, "source")
    elif run.returncode is None:  # stopped at its limit: the routes that finished are kept (epoch.py writes each row)
        done = ", ".join(_route(r) for r in rows) or "none"
        part.status, part.reason = "partial", f"time limit ({timeout:.0f} s) reached; routes finished: {done}; the rest skipped: time limit"
    elif run.returncode == 0 and rows:
        part.status, part.reason = "ok", f"{len(rows)} routes: " + ", ".join(_route(r) for r in rows)
    else:
        part.status, part.reason = "failed", last_line(run.output, run.returncode)
    e2e = end_to_end(epoch_figures(rows))
    if e2e is not None and e2e["ratio"] is not None:
        part.reason += f"; GPU-sampling epoch / CPU-sampling epoch {e2e['ratio']:.2f} ({e2e['source']}, prefetch {e2e['prefetch']}; goal at most 0.33)"
    return part, run.output, dgl_version


def _route(row: dict) -> str:
    """A route's name in the step's reason: source, sampler where it is the GPU's, prefetch."""
    return f"{row['source']}{' gpu-sampled' if row.get('sampler') == 'gpu' else ''} prefetch {row['prefetch']}"


def ddp_part(env: dict, timeout: float, mode: str, gpus: int) -> tuple[Part, str]:
    """``dgl-zerocopy train --nproc gpus`` on CUDA (zerocopy), where there is more than one GPU."""
    part = Part("ddp", limit=timeout)
    if gpus < 2:
        part.status, part.reason = "not run", f"skipped: {gpus} CUDA GPU(s) here; the multi-GPU DDP run needs 2 or more"
        return part, ""
    probe, dgl_version = probe_dgl(part, env, timeout)
    if dgl_version is None:
        return part, probe.output
    cmd = [
        sys.executable,
        "-m",
        "dgl_zerocopy.cli",
        "train",
        "--nproc",
        str(gpus),
        "--device",
        "cuda",
        "--feature-source",
        "zerocopy",
        *DDP_ARGS[mode],
        "--no-progress",
    ]
    run = run_bounded(cmd, timeout - probe.seconds, env)
    part.seconds = probe.seconds + run.seconds
    figures = parse_train_output(run.output)
    part.details = {"command": " ".join(cmd[1:]), "nproc": gpus, **figures}
    epochs = int(DDP_ARGS[mode][DDP_ARGS[mode].index("--epochs") + 1])
    if run.returncode is None:
        part.status, part.reason = "failed", f"did not finish within its time limit ({timeout:.0f} s): {len(figures['epoch_times'])} of {epochs} epochs"
    elif run.returncode == 0 and len(figures["epoch_times"]) == epochs and figures["test_acc"] is not None:
        times = figures["epoch_times"][1:] or figures["epoch_times"]
        part.status = "ok"
        part.reason = (
            f"{gpus} GPUs (NCCL, zerocopy): epoch {statistics.median(times):.2f} s (median of epochs 1..; "
            f"{', '.join(f'{t:.2f}' for t in figures['epoch_times'])}), final test accuracy {figures['test_acc']:.4f}"
        )
    else:
        part.status = "failed"
        part.reason = last_line(run.output, run.returncode) if run.returncode else f"{len(figures['epoch_times'])} of {epochs} epoch lines"
    return part, run.output


def parse_train_output(text: str) -> dict:
    """Epoch times and the final test accuracy from ``dgl-zerocopy train``'s output (rank 0's lines)."""
    times = [float(t) for t in re.findall(r"^epoch +\d+ \|.*\| time ([0-9.]+)s", text, re.M)]
    final = re.search(r"^final test accuracy ([0-9.]+)", text, re.M)
    return {"epoch_times": times, "test_acc": float(final.group(1)) if final else None}


def exit_code(parts: list[Part]) -> int:
    """0 when every step asked for (and the setup) is ok, partial (what ran passed; the time
    limit left the rest out) or not run; else 1."""
    return 0 if all(p.status in PASSING for p in parts) else 1


def no_cuda_line() -> str | None:
    """The one line that says why this machine cannot run the check, or None where it can
    (torch imports and ``torch.cuda.is_available()``, or DGL_ZEROCOPY_GPU_CHECK_ON_CPU=1)."""
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - ImportError, or a CUDA library that fails to load (OSError)
        return f"gpu-check: torch is not importable with {sys.executable} ({type(e).__name__}: {e}); run it where torch and a CUDA GPU are"
    if not torch.cuda.is_available() and os.environ.get("DGL_ZEROCOPY_GPU_CHECK_ON_CPU") != "1":
        return "gpu-check: no CUDA GPU here (torch.cuda.is_available() is False); run it on a machine with one"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results folder (default bench/results/gpu/)")
    parser.add_argument(
        "--wheels", type=Path, default=REPO / ".whl", help="folder of wheels to install offline first (default .whl/ of the checkout; skipped when empty)"
    )
    parser.add_argument("--site", type=Path, default=DEFAULT_SITE, help="where those wheels are installed (put on the steps' PYTHONPATH)")
    parser.add_argument(
        "--parts", default=",".join(PARTS), help="which steps to run, comma separated (default all: pytest,gather,sampling,storage,epoch,pyg,scale,ddp)"
    )
    parser.add_argument(
        "--full", action="store_true", help=f"the whole benchmark set, figures for the record ({FULL_TOTAL_LIMIT} s; default: the {TOTAL_LIMIT} s pass)"
    )
    parser.add_argument("--quick", action="store_true", help="the default pass (small benchmarks, one short figure each); kept for older commands")
    parser.add_argument("--time-limit", type=float, help=f"seconds for the whole check (default {TOTAL_LIMIT}, {FULL_TOTAL_LIMIT} with --full)")
    parser.add_argument("--probe", action="store_true", help="print the one line that says why this machine cannot run the check, or nothing; exit 0")
    args = parser.parse_args(argv)
    chosen = [p.strip() for p in args.parts.split(",") if p.strip()]
    if unknown := [p for p in chosen if p not in PARTS + OPTIONAL_PARTS]:
        parser.error(f"unknown part {unknown[0]!r}; choose from {', '.join(PARTS + OPTIONAL_PARTS)}")
    if "link" in chosen and (beside := [p for p in LINK_EXCLUSIVE if p in chosen]):
        parser.error(
            f"--parts link writes 3 result files of its own: run it without {' and '.join(beside)} (at most 8 files come back), e.g. --parts pytest,link"
        )
    if "papers" in chosen and (beside := [p for p in PAPERS_EXCLUSIVE if p in chosen]):
        parser.error(f"--parts papers writes 3 result files of its own: run it without {' and '.join(beside)} (at most 8 files come back), e.g. --parts papers")
    if args.full and args.quick:
        parser.error("--full and --quick exclude each other; --quick is the default pass")
    mode = "full" if args.full else "quick"
    step_limits = FULL_LIMITS if args.full else LIMITS  # read at call time: tests patch them
    step_limits = {**step_limits, **{name: limit for name, limit in (("link", LINK_LIMIT), ("papers", PAPERS_LIMIT)) if name in chosen}}
    if args.time_limit is None:
        args.time_limit = FULL_TOTAL_LIMIT if args.full or "papers" in chosen else TOTAL_LIMIT
    began = time.monotonic()  # the interpreter's start before this is inside the 60 s left of the 10 minutes
    why_not = no_cuda_line()
    if args.probe:
        if why_not:
            print(why_not, flush=True)
        return 0
    if why_not:
        print(why_not, file=sys.stderr, flush=True)
        return 2
    import torch

    cuda = torch.cuda.is_available()
    started = datetime.datetime.now().astimezone()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    for name in RESULT_FILES + LINK_FILES + PAPERS_FILES:  # results of an earlier run must not pass for this one's
        (out / name).unlink(missing_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    given_cache = os.environ.get("CUPY_CACHE_DIR")
    kernel_cache = Path(given_cache) if given_cache else workdir / "cupy-kernel-cache"  # cold: what a fresh machine has
    site = args.site.resolve()

    setup = install_wheels(args.wheels.resolve(), site, step_limits["wheels"])
    if setup.details.get("wheels"):
        sys.path[:0] = [str(REPO), str(site)]  # the header reads the versions the steps will import
    else:
        sys.path.insert(0, str(REPO))
    env = child_env(site if setup.details.get("wheels") else None, kernel_cache)
    gpus = torch.cuda.device_count() if cuda else 0
    steps = [name for name in PARTS + OPTIONAL_PARTS if name in chosen and not (name == "ddp" and gpus < 2)]
    limits: dict[str, float | str] = {name: step_limits[name] for name in steps}
    if "ddp" in chosen and "ddp" not in steps:
        limits["ddp"] = f"not run ({gpus} GPU)"
    environment_ = environment(cuda)
    cold = "cold (empty)" if cache_entries(kernel_cache) == 0 else f"{cache_entries(kernel_cache)} entries at the start"
    environment_["kernel_cache"] = f"{kernel_cache}: {cold}"
    header = header_lines(setup, environment_, limits, environment_["kernel_cache"], mode, out, args.time_limit)
    print("\n".join(header), flush=True)

    parts = {
        name: Part(name) if name in chosen else Part(name, "not run", "not in --parts") for name in PARTS + tuple(p for p in OPTIONAL_PARTS if p in chosen)
    }
    if "ddp" in chosen and "ddp" not in steps:
        parts["ddp"] = Part("ddp", "not run", f"skipped: {gpus} CUDA GPU(s) here; the multi-GPU DDP run needs 2 or more")
    summary = {
        "command": command_line(),
        "started": started.isoformat(timespec="seconds"),
        "seconds": 0.0,
        "out": str(out),
        "mode": mode,
        "exit_code": 1,
        "finished": False,
        "ceiling": "h2d" if cuda else "copy",
        "environment": environment_,
        "header": header,
        "time_limit_s": args.time_limit,
        "limits_s": step_limits,
        "parts": [],
        "figures": {"gather": [], "epoch": [], "end_to_end": None, "sampling": [], "storage": [], "pyg": [], "scale": []},
    }
    logs: dict[str, str] = {}

    def record() -> None:
        every = [setup, *parts.values()]
        summary.update(
            seconds=time.monotonic() - began,
            exit_code=exit_code(every),
            parts=[asdict(p) for p in every],
            figures={
                "gather": gather_figures(result_rows(out, "gather")),
                "epoch": epoch_figures(result_rows(out, "epoch")),
                "end_to_end": end_to_end(epoch_figures(result_rows(out, "epoch"))),
                "sampling": sampling_figures(result_rows(workdir, "sampling")),  # its files stay in workdir: 8 files come back
                "storage": storage_figures(result_rows(workdir, "storage")),
                "pyg": pyg_figures(result_rows(workdir, "pyg_epoch")),
                "scale": scale_figures(result_rows(workdir, "scale")),
            },
        )
        write_summary(out, summary, logs)

    record()
    for i, name in enumerate(steps, 1):
        left = args.time_limit - (time.monotonic() - began)
        limit = step_limit(step_limits[name], left, sum(step_limits[later] for later in steps[i:]))
        if limit < MIN_STEP:
            parts[name] = Part(name, "partial", f"not started: time limit ({left:.0f} s of the check's {args.time_limit:.0f} s left)", limit=limit)
            print(f"\ngpu-check [{i}/{len(steps)}] {name}: {TIME_LIMIT_STATUS} ({left:.0f} s left)", flush=True)
            record()
            continue
        size = ""
        if name == "gather":
            plan = gather_plan(mode, int(environment_.get("sm_count", 132)))
            size = f": {plan['configurations']} configurations, {plan['gathers']:,} gathers of {plan['gigabytes']:.0f} GB of rows in all"
        print(f"\ngpu-check [{i}/{len(steps)}] {name} (time limit {limit:.0f} s){size}", flush=True)
        compiled, begun = cache_entries(kernel_cache), time.monotonic()
        try:
            if name == "pytest":
                parts[name], logs[name] = pytest_part(env, limit, workdir)
            elif name == "gather":
                parts[name], logs[name] = gather_part(env, limit, out, mode)
            elif name == "sampling":
                parts[name], logs[name] = sampling_part(env, limit, workdir, mode, cuda)
            elif name == "storage":
                parts[name], logs[name] = storage_part(env, limit, workdir, mode, cuda)
            elif name == "pyg":
                parts[name], logs[name] = pyg_part(env, limit, workdir, mode, cuda)
            elif name == "scale":
                parts[name], logs[name] = scale_part(env, limit, workdir, mode, cuda)
            elif name == "ddp":
                parts[name], logs[name] = ddp_part(env, limit, mode, gpus)
            elif name == "link":
                parts[name], logs[name] = link_part(env, limit, out, cuda)
            elif name == "papers":
                parts[name], logs[name] = papers_part(env, limit, out, cuda)
            else:
                parts[name], logs[name], environment_["dgl"] = epoch_part(env, limit, out, mode, *epoch_sources(cuda))
        except Exception as e:  # noqa: BLE001 - an error of the check itself fails this step; the others still run
            parts[name] = Part(name, "failed", f"gpu_check.py itself: {type(e).__name__}: {e}"[:300], time.monotonic() - begun, limit=limit)
        parts[name].details["kernels_compiled"] = cache_entries(kernel_cache) - compiled
        print(
            f"gpu-check [{i}/{len(steps)}] {name}: {parts[name].status} in {parts[name].seconds:.1f} s "
            f"({parts[name].details['kernels_compiled']} kernels compiled): {parts[name].reason}",
            flush=True,
        )
        record()
    summary.update(finished=True, transfer_problems=transfer_problems(out))
    record()
    shutil.rmtree(workdir, ignore_errors=True)
    print("\n" + render_markdown(summary), flush=True)
    return summary["exit_code"]


if __name__ == "__main__":
    sys.exit(main())
