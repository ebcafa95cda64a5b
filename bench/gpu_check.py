"""One command that checks the whole GPU path: the GPU tests, the gather and epoch benchmarks, multi-GPU DDP.

    make gpu-check                                   (on a machine with a CUDA GPU; docs/gpu.md)
    python3 bench/gpu_check.py [--out DIR] [--wheels .whl] [--parts pytest,gather,epoch,ddp] [--quick]

Without CUDA (``torch.cuda.is_available()`` False) it prints one line and exits 2, before anything
else. With CUDA it runs, each part in a subprocess with its own time limit (a hang costs that part
only; the parts' limits add up to under 10 minutes) and its output echoed as it comes:

0. setup: the wheels in ``--wheels`` (default ``.whl/``, when it holds any) installed offline
   (``pip --no-index``) into ``--site``, which the parts get on PYTHONPATH after the checkout;
1. ``pytest -m gpu``: counts, skip reasons and failures;
2. ``bench/gather.py``: zerocopy (aligned and naive kernels), cpu and gpu against h2d, fp32 rows
   of 64 B to 4 KB, 262,144 random ids, CUDA-event timing; at 512 B also ``sort_ids`` and
   ``max_blocks`` caps of 0.5 to 4 times the SM count; at 100 and 128 columns also the
   compressed tables (``zerocopy-fp16``, ``-bf16``, ``-int8``, ``-int8-row``) through the decoding
   kernel, checked against the reference decode and counted in fp32-equivalent GB/s; at 512 B
   also ``zerocopy`` and ``cpu`` with a hot-row cache of 10, 25 and 50 % of the rows (hit rate
   and GB/s, against the same backend without a cache);
3. ``bench/epoch.py``: GraphSAGE on the synthetic graph, sources cpu, zerocopy and gpu, prefetch
   0 and 2; skipped, with the reason, when ``import dgl`` fails (after ``import dgl_zerocopy``);
4. ``dgl-zerocopy train --nproc N``: data-parallel GraphSAGE on all N GPUs (NCCL, one rank per
   GPU, feature source zerocopy over one shared host table), only where
   ``torch.cuda.device_count() > 1``; elsewhere recorded as not run, with the GPU count as reason.

It writes into ``--out`` (default bench/results/gpu/) at most 8 files, the most a lent machine
sends back: gather.{csv,json,png}, epoch.{csv,json,png}, summary.json and summary.md (device,
versions, the command, each part's status, reason and seconds (the DDP run's figures in its
reason), the key figures, the tails of
failed parts' output and the whole pytest output). summary.md is also printed at the end.
Exit code: 0 every part ran and passed, 1 a part failed or was skipped, 2 no CUDA.

Testing aid: DGL_ZEROCOPY_GPU_CHECK_ON_CPU=1 runs the parts on a machine without CUDA (the
orchestration only: GPU tests skip, the benchmarks take their CPU paths, the figures mean nothing).
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import math
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import command_line  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "bench" / "results" / "gpu"
DEFAULT_SITE = Path("/tmp/dgl-zerocopy-site")
PARTS = ("pytest", "gather", "epoch", "ddp")
# Seconds per step. With start-up they stay under the 10 minutes a lent machine gives one command.
BUDGETS = {"wheels": 45, "pytest": 140, "gather": 180, "epoch": 115, "ddp": 60}
GATHER_RESERVE = 60  # gather.py starts no new width this close to its limit, so it can write what it has
RESULT_FILES = ("gather.csv", "gather.json", "gather.png", "epoch.csv", "epoch.json", "epoch.png", "summary.json", "summary.md")
# What a lent machine sends back from its output folder (see docs/gpu.md).
TRANSFER = {"files": 8, "file_bytes": 16 * 2**20, "total_bytes": 64 * 2**20, "depth": 2}
SAFE_NAME = re.compile(r"^[A-Za-z0-9._-]+$")

GATHER_ARGS = {
    "full": ["--cols", "16,32,64,100,128,256,512,1024", "--dtypes", "fp32", "--batches", "262144", "--rows", "4000000",
             "--table-gb", "2", "--repeats", "15", "--tune-cols", "128", "--max-blocks", "0.5sm,1sm,2sm,4sm",
             "--codecs", "fp16,bf16,int8,int8-row", "--codec-cols", "100,128", "--cache-fracs", "0.1,0.25,0.5"],
    "quick": ["--cols", "16,100,128,1024", "--dtypes", "fp32", "--batches", "65536", "--rows", "500000",
              "--table-gb", "0.25", "--repeats", "5", "--tune-cols", "128", "--max-blocks", "1sm,2sm",
              "--codecs", "fp16,bf16,int8,int8-row", "--codec-cols", "128", "--cache-fracs", "0.25"],
}
EPOCH_ARGS = {"full": ["--prefetch", "2", "--epochs", "4"], "quick": ["--prefetch", "2", "--epochs", "3", "--num-nodes", "50000"]}
# The epoch part's graph (cached by then), 3 epochs evaluated once after the last.
DDP_ARGS = {"full": ["--num-nodes", "200000", "--epochs", "3", "--eval-every", "3"],
            "quick": ["--num-nodes", "50000", "--epochs", "2", "--eval-every", "2"]}
PYTEST_TEST_TIMEOUT = 120  # per test, where pytest-timeout is installed: one hung test fails alone


@dataclass
class Part:
    """The outcome of one step: ``status`` is ok, failed, skipped, pending or not run."""

    name: str
    status: str = "pending"
    reason: str = ""
    seconds: float = 0.0
    details: dict = field(default_factory=dict)


@dataclass
class Run:
    """A finished subprocess: ``returncode`` None means it was killed at its time limit."""

    returncode: int | None
    output: str
    seconds: float


# -- running things --------------------------------------------------------------------------

def run_bounded(cmd: list[str], timeout: float, env: dict | None = None, cwd: Path = REPO, echo: bool = True) -> Run:
    """Run ``cmd`` with stdout and stderr merged, echoing its lines as they come; after
    ``timeout`` seconds kill its whole process group (it runs in a session of its own)."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, encoding="utf-8", errors="replace", start_new_session=True)
    lines: list[str] = []

    def pump() -> None:
        for line in proc.stdout:
            lines.append(line)
            if echo:
                print("  | " + line, end="" if line.endswith("\n") else "\n", flush=True)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    returncode = None
    try:
        returncode = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pass
    finally:
        if proc.poll() is None:  # timed out, or we were interrupted: take its children down too
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        reader.join(timeout=10)
    return Run(returncode, "".join(lines), time.monotonic() - start)


def child_env(site: Path | None) -> dict:
    """The parts' environment: the checkout (the package runs from it) and ``site`` on PYTHONPATH."""
    env = dict(os.environ)
    paths = [str(REPO), *([str(site)] if site else []), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    env.update(PYTHONPATH=os.pathsep.join(paths), PYTHONUNBUFFERED="1", PYTHONIOENCODING="utf-8", DGLBACKEND="pytorch", MPLBACKEND="Agg",
               OUTDATED_IGNORE="1")  # ogb's PyPI check would only warn: the lent machine has no network
    return env


def last_line(text: str, returncode: int | None = None) -> str:
    """The last non-empty line of ``text`` (a traceback's error), else the exit code."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else f"exit code {returncode}"


def tail(text: str, n: int = 40) -> str:
    return "\n".join(text.rstrip().splitlines()[-n:])


def pip_install_command(python: str, wheels: list[Path], site: Path) -> list[str]:
    """Offline install of ``wheels`` into ``site``: no index, no dependencies, no network."""
    return [python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir", "--upgrade",
            "--disable-pip-version-check", "--target", str(site), *map(str, wheels)]


def wheel_needed(wheel: Path) -> bool:
    """Whether ``wheel`` brings something this interpreter lacks: its distribution missing, or
    older than the wheel (a wheel carried for a version floor, e.g. typing_extensions, is then
    left out rather than replacing a newer one)."""
    import importlib.metadata

    name, version = wheel.name.split("-")[:2]
    try:
        have = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return True
    try:
        from packaging.version import Version

        return Version(have) < Version(version)
    except Exception:  # noqa: BLE001 - no packaging, or a version it cannot read: install to be safe
        return have != version


def install_wheels(wheels_dir: Path, site: Path, timeout: float) -> Part:
    """Install the wheels of ``wheels_dir`` that :func:`wheel_needed` into ``site``, offline."""
    part = Part("wheels")
    found = sorted(wheels_dir.glob("*.whl")) if wheels_dir.is_dir() else []
    wheels = [w for w in found if wheel_needed(w)]
    part.details["present"] = [w.name for w in found if w not in wheels]
    if not wheels:
        part.status = "ok"
        part.reason = f"no wheels in {wheels_dir}: the installed packages are used" if not found else "every wheel's package is installed already"
        return part
    print(f"gpu-check: installing {len(wheels)} wheels from {wheels_dir} into {site} (offline)", flush=True)
    run = run_bounded(pip_install_command(sys.executable, wheels, site), timeout)
    part.seconds = run.seconds
    part.details["wheels"] = [w.name for w in wheels]
    if run.returncode == 0:
        part.status, part.reason = "ok", f"{len(wheels)} wheels into {site}: {', '.join(w.name.split('-')[0] for w in wheels)}"
    else:
        part.status = "failed"
        part.reason = f"timed out after {timeout:.0f} s" if run.returncode is None else f"pip: {last_line(run.output, run.returncode)}"
        part.details["output_tail"] = tail(run.output)
    return part


# -- the parts -------------------------------------------------------------------------------

def parse_pytest_counts(text: str) -> dict[str, int]:
    """Counts from pytest's closing line (``3 failed, 41 passed, 2 skipped in 30.1s``)."""
    for line in reversed(text.splitlines()):
        if re.search(r"\bin \d+(\.\d+)?s\b", line):
            found = re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected|xfailed|xpassed|warnings?)\b", line)
            if found:
                return {("errors" if w.startswith("error") else "warnings" if w.startswith("warning") else w): int(n) for n, w in found}
    return {}


def pytest_short_summary(text: str, limit: int = 60) -> list[str]:
    """pytest's ``FAILED``/``ERROR``/``SKIPPED`` summary lines."""
    return [ln.strip() for ln in text.splitlines() if ln.startswith(("FAILED ", "ERROR ", "SKIPPED "))][:limit]


def pytest_command(python: str) -> list[str]:
    cmd = [python, "-m", "pytest", "-m", "gpu", "-q", "-rfEs", "--tb=short", "-p", "no:cacheprovider", "--continue-on-collection-errors"]
    if importlib.util.find_spec("pytest_timeout") is not None:
        cmd.append(f"--timeout={PYTEST_TEST_TIMEOUT}")
    return cmd


def pytest_part(env: dict, timeout: float) -> tuple[Part, str]:
    part = Part("pytest")
    run = run_bounded(pytest_command(sys.executable), timeout, env)
    counts = parse_pytest_counts(run.output)
    part.seconds, part.details = run.seconds, {"counts": counts, "summary": pytest_short_summary(run.output)}
    shown = ", ".join(f"{n} {k}" for k, n in counts.items())
    if run.returncode is None:
        part.status, part.reason = "failed", f"timed out after {timeout:.0f} s"
    elif run.returncode == 0 and counts.get("passed", 0) > 0:
        part.status, part.reason = "ok", shown
    elif run.returncode == 0:
        part.status, part.reason = "failed", f"no GPU test passed ({shown or 'nothing counted'})"
    elif run.returncode == 5:
        part.status, part.reason = "failed", "pytest -m gpu selected no test"
    else:
        part.status, part.reason = "failed", shown or last_line(run.output, run.returncode)
    return part, run.output


def gather_part(env: dict, timeout: float, out: Path, mode: str) -> tuple[Part, str]:
    part = Part("gather")
    soft = max(timeout - GATHER_RESERVE, 1)
    cmd = [sys.executable, str(REPO / "bench" / "gather.py"), *GATHER_ARGS[mode], "--raw", "json", "--time-limit", f"{soft:g}", "--out", str(out / "gather")]
    run = run_bounded(cmd, timeout, env)
    part.seconds = run.seconds
    rows = _rows(out / "gather.json")
    bad = [r for r in rows if r.get("status") != "ok"]
    if run.returncode is None:
        part.status, part.reason = "failed", f"timed out after {timeout:.0f} s"
    elif run.returncode == 0 and rows and not bad:
        widths = len({r["dim"] for r in rows})
        part.status, part.reason = "ok", f"{len(rows)} results at {widths} widths, every method equal to table[ids] before timing"
    elif bad:
        part.status, part.reason = "failed", f"{len(bad)} of {len(rows)} results failed or skipped: " + failure_digest(bad, "method")
    else:
        part.status, part.reason = "failed", last_line(run.output, run.returncode)
    return part, run.output


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


def epoch_part(env: dict, timeout: float, out: Path, mode: str, sources: str) -> tuple[Part, str, str]:
    """The epoch benchmark, or skipped when ``import dgl`` fails. Also returns DGL's version."""
    part = Part("epoch")
    probe, dgl_version = probe_dgl(part, env, timeout)
    if dgl_version is None:
        return part, probe.output, f"not importable ({part.reason.removeprefix('import dgl failed: ')})"
    left = timeout - probe.seconds
    cmd = [sys.executable, str(REPO / "bench" / "epoch.py"), *EPOCH_ARGS[mode], "--sources", sources, "--out", str(out / "epoch")]
    run = run_bounded(cmd, left, env)
    part.seconds = probe.seconds + run.seconds
    rows = _rows(out / "epoch.json")
    bad = [r for r in rows if r.get("status") != "ok"]
    if run.returncode is None:
        part.status, part.reason = "failed", f"timed out after {timeout:.0f} s"
    elif run.returncode == 0 and rows and not bad:
        part.status, part.reason = "ok", f"{len(rows)} routes: " + ", ".join(f"{r['source']} prefetch {r['prefetch']}" for r in rows)
    elif bad:
        part.status, part.reason = "failed", f"{len(bad)} of {len(rows)} routes failed: " + failure_digest(bad, "source")
    else:
        part.status, part.reason = "failed", last_line(run.output, run.returncode)
    return part, run.output, dgl_version


def ddp_part(env: dict, timeout: float, mode: str, gpus: int) -> tuple[Part, str]:
    """``dgl-zerocopy train --nproc gpus`` on CUDA (zerocopy), where there is more than one GPU."""
    part = Part("ddp")
    if gpus < 2:
        part.status, part.reason = "not run", f"skipped: {gpus} CUDA GPU(s) here; the multi-GPU DDP run needs 2 or more"
        return part, ""
    probe, dgl_version = probe_dgl(part, env, timeout)
    if dgl_version is None:
        return part, probe.output
    cmd = [sys.executable, "-m", "dgl_zerocopy.cli", "train", "--nproc", str(gpus), "--device", "cuda", "--feature-source", "zerocopy",
           *DDP_ARGS[mode], "--no-progress"]
    run = run_bounded(cmd, timeout - probe.seconds, env)
    part.seconds = probe.seconds + run.seconds
    figures = parse_train_output(run.output)
    part.details = {"command": " ".join(cmd[1:]), "nproc": gpus, **figures}
    epochs = int(DDP_ARGS[mode][DDP_ARGS[mode].index("--epochs") + 1])
    if run.returncode is None:
        part.status, part.reason = "failed", f"timed out after {timeout:.0f} s"
    elif run.returncode == 0 and len(figures["epoch_times"]) == epochs and figures["test_acc"] is not None:
        times = figures["epoch_times"][1:] or figures["epoch_times"]
        part.status = "ok"
        part.reason = (f"{gpus} GPUs (NCCL, zerocopy): epoch {statistics.median(times):.2f} s (median of epochs 1..; "
                       f"{', '.join(f'{t:.2f}' for t in figures['epoch_times'])}), final test accuracy {figures['test_acc']:.4f}")
    else:
        part.status = "failed"
        part.reason = last_line(run.output, run.returncode) if run.returncode else f"{len(figures['epoch_times'])} of {epochs} epoch lines"
    return part, run.output


def parse_train_output(text: str) -> dict:
    """Epoch times and the final test accuracy from ``dgl-zerocopy train``'s output (rank 0's lines)."""
    times = [float(t) for t in re.findall(r"^epoch +\d+ \|.*\| time ([0-9.]+)s", text, re.M)]
    final = re.search(r"^final test accuracy ([0-9.]+)", text, re.M)
    return {"epoch_times": times, "test_acc": float(final.group(1)) if final else None}


def failure_digest(rows: list[dict], key: str, limit: int = 3) -> str:
    """The first ``limit`` distinct failures, each with where it happened."""
    seen: dict[str, str] = {}
    for r in rows:
        where = f"{r[key]} at {r['row_bytes']} B" if "row_bytes" in r else f"{r[key]} prefetch {r.get('prefetch')}"
        seen.setdefault(r["status"], where)
    return "; ".join(f"{where}: {status}" for status, where in list(seen.items())[:limit])


def _rows(path: Path) -> list[dict]:
    try:
        return json.loads(path.read_text())["rows"]
    except (OSError, ValueError, KeyError):
        return []


# -- environment -----------------------------------------------------------------------------

def cuda_version_text(number: int) -> str:
    """CUDA's integer version (13000) as text (13.0)."""
    return f"{number // 1000}.{number % 1000 // 10}"


def environment(cuda: bool) -> dict:
    """Device, driver and library versions (each guarded: a failure is recorded, not raised)."""
    import numpy
    import torch

    env = {"python": platform.python_version(), "torch": torch.__version__, "torch_cuda": str(torch.version.cuda), "numpy": numpy.__version__,
           "cpu_count": os.cpu_count()}
    if cuda:
        try:
            props = torch.cuda.get_device_properties(0)
            env.update(device=torch.cuda.get_device_name(0), compute_capability="%d.%d" % torch.cuda.get_device_capability(0),
                       sm_count=props.multi_processor_count, memory_gib=round(props.total_memory / 2**30, 1))
        except Exception as e:  # noqa: BLE001 - a broken device still gets its summary, and the parts say more
            env["device"] = f"CUDA device not readable ({type(e).__name__}: {e})"[:200]
    else:
        env["device"] = "cpu (no CUDA: DGL_ZEROCOPY_GPU_CHECK_ON_CPU)"
    try:
        import cupy

        env["cupy"] = cupy.__version__
        if cuda:
            env["cuda_runtime"] = cuda_version_text(cupy.cuda.runtime.runtimeGetVersion())
            env["cuda_driver_api"] = cuda_version_text(cupy.cuda.runtime.driverGetVersion())
    except Exception as e:  # noqa: BLE001 - reported in the summary
        env["cupy"] = f"unavailable ({type(e).__name__}: {e})"[:200]
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            r = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
            env["driver"] = r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else f"nvidia-smi: exit {r.returncode}"
        except (OSError, subprocess.TimeoutExpired) as e:
            env["driver"] = f"nvidia-smi: {type(e).__name__}"
    else:
        env["driver"] = "unknown (no nvidia-smi)"
    return env


# -- results ---------------------------------------------------------------------------------

def gather_figures(rows: list[dict]) -> list[dict]:
    """The key gather figures: per row size and method, GB/s median and quartiles and the ratio
    to the ceiling (h2d on a GPU), at the largest batch."""
    if not rows:
        return []
    batch = max(r["batch"] for r in rows)
    keys = ("dtype", "dim", "row_bytes", "batch", "method", "gbps_median", "gbps_q1", "gbps_q3", "ratio_to_ceiling", "status", "hit_rate")
    return [{k: r.get(k) for k in keys} for r in rows if r["batch"] == batch]


def epoch_figures(rows: list[dict]) -> list[dict]:
    """The key epoch figures: per source and prefetch, epoch seconds (median, min, max) and the
    share of the step spent waiting for data."""
    keys = ("source", "prefetch", "epoch_time", "epoch_min", "epoch_max", "wait_share", "test_acc", "status")
    return [{k: r.get(k) for k in keys} for r in rows]


def exit_code(parts: list[Part]) -> int:
    """0 when every part that was asked for (and the setup) passed, else 1."""
    return 0 if all(p.status in ("ok", "not run") for p in parts) else 1


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _num(value, fmt: str = ".2f") -> str:
    return format(value, fmt) if _finite(value) else "–"


def _spread(median, low, high) -> str:
    """``median (low–high)``, or a dash where there is no number."""
    return f"{median:.2f} ({_num(low)}–{_num(high)})" if _finite(median) else "–"


def _json_safe(value):
    """NaN and infinity become None (JSON has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def render_markdown(summary: dict) -> str:
    """summary.md without the logs: environment, parts, gather and epoch figures."""
    env, parts = summary["environment"], summary["parts"]
    verdict = "passed" if summary["exit_code"] == 0 else f"NOT PASSED (exit {summary['exit_code']})"
    if not summary.get("finished", True):
        verdict = "UNFINISHED (still running, or stopped before the end)"
    lines = [f"# gpu-check on {env.get('device', '?')}: {verdict}", "",
             f"`{summary['command']}`, started {summary['started']}, {summary['seconds']:.0f} s in all; files in `{summary['out']}`.", "",
             "| what | value |", "|---|---|"]
    names = {"device": "device", "compute_capability": "compute capability", "sm_count": "SMs", "memory_gib": "GPU memory GiB",
             "driver": "driver", "cuda_driver_api": "CUDA driver API", "cuda_runtime": "CUDA runtime (CuPy)", "torch_cuda": "CUDA of torch",
             "python": "python", "torch": "torch", "cupy": "cupy", "numpy": "numpy", "dgl": "dgl", "cpu_count": "CPUs"}
    lines += [f"| {label} | {env[key]} |" for key, label in names.items() if key in env]
    lines += ["", "## Parts", "", "| part | status | seconds | details |", "|---|---|---|---|"]
    lines += [f"| {p['name']} | {p['status']} | {p['seconds']:.1f} | {_cell(p['reason'])} |" for p in parts]

    gather = summary["figures"]["gather"]
    plain = [g for g in gather if "+" not in g["method"]]
    if plain:
        methods = list(dict.fromkeys(g["method"] for g in plain))
        lines += ["", f"## Gather: GB/s median (ratio to {summary['ceiling']}), {plain[0]['dtype']}, {plain[0]['batch']:,} random rows", "",
                  "| row bytes | cols | " + " | ".join(methods) + " |", "|---|---|" + "---|" * len(methods)]
        for dim in dict.fromkeys(g["dim"] for g in plain):
            at = {g["method"]: g for g in plain if g["dim"] == dim}
            first = next(iter(at.values()))
            cells = [_gather_cell(at.get(m)) for m in methods]
            lines.append(f"| {first['row_bytes']} | {dim} | " + " | ".join(cells) + " |")
    if bad := [g for g in gather if g["status"] != "ok"]:
        lines += ["", "Not measured: " + _cell(failure_digest(bad, "method", limit=10))]
    cached = [g for g in gather if "+cache=" in g["method"]]
    if cached:
        plain_at = {g["method"]: g for g in gather if g["dim"] == cached[0]["dim"] and "+" not in g["method"]}
        lines += ["", f"## Hot-row cache at {cached[0]['row_bytes']} B rows ({cached[0]['dim']} cols; uniform ids, random cached rows)", "",
                  "| method | cached share | hit rate | GB/s median (q1–q3) | ratio to the same backend without cache | status |",
                  "|---|---|---|---|---|---|"]
        for g in cached:
            base, share = g["method"].split("+cache=")
            ref = plain_at.get(base)
            rel = g["gbps_median"] / ref["gbps_median"] if ref and _finite(g["gbps_median"]) and _finite(ref["gbps_median"]) else None
            lines.append(f"| {base} | {share} | {_num(g.get('hit_rate'), '.3f')} | {_spread(g['gbps_median'], g['gbps_q1'], g['gbps_q3'])} | "
                         f"{_num(rel)} | {_cell(g['status'])} |")
    options = [g for g in gather if g["method"].split("+")[0] == "zerocopy" and "+cache=" not in g["method"]
               and any("+" in h["method"] and "+cache=" not in h["method"] and h["dim"] == g["dim"] for h in gather)]
    if options:
        default = next((g for g in options if g["method"] == "zerocopy"), None)
        lines += ["", f"## Zero-copy options at {options[0]['row_bytes']} B rows ({options[0]['dim']} cols, SMs: {env.get('sm_count', '?')})", "",
                  "| method | GB/s median (q1–q3) | ratio to " + summary["ceiling"] + " | ratio to default zerocopy | status |", "|---|---|---|---|---|"]
        for g in options:
            rel = g["gbps_median"] / default["gbps_median"] if default and _finite(g["gbps_median"]) and _finite(default["gbps_median"]) else None
            lines.append(f"| {g['method']} | {_spread(g['gbps_median'], g['gbps_q1'], g['gbps_q3'])} | {_num(g['ratio_to_ceiling'])} | "
                         f"{_num(rel)} | {_cell(g['status'])} |")
    epoch = summary["figures"]["epoch"]
    if epoch:
        lines += ["", "## Epoch: GraphSAGE on the synthetic graph", "",
                  "| source | prefetch | epoch s median (min–max) | wait share of step | test acc | status |", "|---|---|---|---|---|---|"]
        for e in epoch:
            share = f"{100 * e['wait_share']:.1f} %" if _finite(e["wait_share"]) else "–"
            lines.append(f"| {e['source']} | {e['prefetch']} | {_spread(e['epoch_time'], e['epoch_min'], e['epoch_max'])} | {share} | "
                         f"{_num(e['test_acc'], '.4f')} | {_cell(e['status'])} |")
    if summary.get("transfer_problems"):
        lines += ["", "## Results folder", "", *(f"- {p}" for p in summary["transfer_problems"])]
    return "\n".join(lines) + "\n"


def _gather_cell(g: dict | None) -> str:
    if g is None:
        return "–"
    if g["status"] != "ok":
        return "failed" if g["status"].startswith("failed") else "skipped"
    return f"{_num(g['gbps_median'])} ({_num(g['ratio_to_ceiling'])})"


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
    """What would stop ``folder`` coming back whole from a lent machine: more than 8 files,
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


# -- main ------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results folder (default bench/results/gpu/)")
    parser.add_argument("--wheels", type=Path, default=REPO / ".whl", help="folder of wheels to install offline first (default .whl/; skipped when empty)")
    parser.add_argument("--site", type=Path, default=DEFAULT_SITE, help="where those wheels are installed (put on the parts' PYTHONPATH)")
    parser.add_argument("--parts", default=",".join(PARTS), help="which parts to run, comma separated (default all: pytest,gather,epoch,ddp)")
    parser.add_argument("--quick", action="store_true", help="smaller benchmarks (a smoke run of a few minutes; figures not for the record)")
    args = parser.parse_args(argv)
    chosen = [p.strip() for p in args.parts.split(",") if p.strip()]
    if unknown := [p for p in chosen if p not in PARTS]:
        parser.error(f"unknown part {unknown[0]!r}; choose from {', '.join(PARTS)}")

    try:
        import torch
    except ImportError as e:
        print(f"gpu-check: torch is not importable with {sys.executable} ({e}); run it where torch and a CUDA GPU are", file=sys.stderr, flush=True)
        return 2
    cuda = torch.cuda.is_available()
    if not cuda and os.environ.get("DGL_ZEROCOPY_GPU_CHECK_ON_CPU") != "1":
        print("gpu-check: no CUDA GPU here (torch.cuda.is_available() is False); run it on a machine with one", file=sys.stderr, flush=True)
        return 2

    started, clock = datetime.datetime.now().astimezone(), time.monotonic()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    for name in RESULT_FILES:  # results of an earlier run must not pass for this one's
        (out / name).unlink(missing_ok=True)
    mode = "quick" if args.quick else "full"
    print(f"gpu-check: {mode} run, results in {out}", flush=True)

    setup = install_wheels(args.wheels.resolve(), args.site.resolve(), BUDGETS["wheels"])
    print(f"gpu-check: setup: {setup.status}: {setup.reason}", flush=True)
    env = child_env(args.site.resolve() if setup.details.get("wheels") else None)
    parts = {name: Part(name) if name in chosen else Part(name, "not run", "not in --parts") for name in PARTS}
    summary = {"command": command_line(), "started": started.isoformat(timespec="seconds"), "seconds": 0.0, "out": str(out), "mode": mode,
               "exit_code": 1, "finished": False, "ceiling": "h2d" if cuda else "copy", "environment": environment(cuda), "budgets_s": BUDGETS,
               "parts": [], "figures": {"gather": [], "epoch": []}}
    logs: dict[str, str] = {}

    def record() -> None:
        every = [setup, *parts.values()]
        summary.update(seconds=time.monotonic() - clock, exit_code=exit_code(every), parts=[asdict(p) for p in every],
                       figures={"gather": gather_figures(_rows(out / "gather.json")), "epoch": epoch_figures(_rows(out / "epoch.json"))})
        write_summary(out, summary, logs)

    record()
    steps = [name for name in PARTS if name in chosen]
    for i, name in enumerate(steps, 1):
        print(f"\ngpu-check [{i}/{len(steps)}] {name} (time limit {BUDGETS[name]} s)", flush=True)
        if name == "pytest":
            parts[name], logs[name] = pytest_part(env, BUDGETS[name])
        elif name == "gather":
            parts[name], logs[name] = gather_part(env, BUDGETS[name], out, mode)
        elif name == "ddp":
            parts[name], logs[name] = ddp_part(env, BUDGETS[name], mode, torch.cuda.device_count() if cuda else 0)
        else:
            sources = "cpu,zerocopy,gpu" if cuda else "cpu"
            parts[name], logs[name], summary["environment"]["dgl"] = epoch_part(env, BUDGETS[name], out, mode, sources)
        print(f"gpu-check [{i}/{len(steps)}] {name}: {parts[name].status} in {parts[name].seconds:.1f} s: {parts[name].reason}", flush=True)
        record()
    summary.update(finished=True, transfer_problems=transfer_problems(out))
    record()
    print("\n" + render_markdown(summary), flush=True)
    return summary["exit_code"]


if __name__ == "__main__":
    sys.exit(main())
