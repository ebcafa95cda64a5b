"""How bench/gpu_check.py runs things and what it runs on: bounded subprocesses, the offline
install of the wheels the image lacks, and the versions the check's header prints first.

Without a GPU these run too (the header then reads "cpu"); tests drive them with stand-ins.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from gpu_check_rows import tail

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Part:
    """The outcome of one step: ``status`` is ok, partial, failed, skipped, not run or pending;
    ``limit`` the seconds it was given."""

    name: str
    status: str = "pending"
    reason: str = ""
    seconds: float = 0.0
    details: dict = field(default_factory=dict)
    limit: float | None = None


@dataclass
class Run:
    """A finished subprocess. ``returncode`` None: killed at its time limit; ``interrupted``:
    sent SIGINT at ``interrupt_at``; ``ended``: the wall-clock time (epoch s) it ended."""

    returncode: int | None
    output: str
    seconds: float
    interrupted: bool = False
    ended: float = 0.0

    @property
    def stopped(self) -> bool:
        """Whether the time limit stopped it (interrupted or killed)."""
        return self.interrupted or self.returncode is None


# -- running things --------------------------------------------------------------------------


def run_bounded(cmd: list[str], timeout: float, env: dict | None = None, cwd: Path = REPO, echo: bool = True, interrupt_at: float | None = None) -> Run:
    """Run ``cmd`` with stdout and stderr merged, echoing its lines as they come. After
    ``interrupt_at`` seconds (if given) send SIGINT to it (not its children: pytest then ends
    its session and reports); after ``timeout`` seconds kill its whole process group (it runs in
    a session of its own), and whatever of the group is left once it has ended."""
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        encoding="utf-8",
        errors="replace",
        start_new_session=True,
    )
    lines: list[str] = []

    def pump() -> None:
        for line in proc.stdout:
            lines.append(line)
            if echo:
                print("  | " + line, end="" if line.endswith("\n") else "\n", flush=True)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    returncode, interrupted = None, False
    try:
        if interrupt_at is not None and interrupt_at < timeout:
            try:
                returncode = proc.wait(timeout=max(interrupt_at, 0))
            except subprocess.TimeoutExpired:
                interrupted = True
                proc.send_signal(signal.SIGINT)
        if returncode is None:
            try:
                returncode = proc.wait(timeout=max(timeout - (time.monotonic() - start), 0))
            except subprocess.TimeoutExpired:
                pass
    finally:
        if proc.poll() is None:  # timed out, or we were interrupted
            returncode = None
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        try:  # children it left behind (a spawned worker of a cut-off test) go too
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        reader.join(timeout=10)
    return Run(returncode, "".join(lines), time.monotonic() - start, interrupted, time.time())


def child_env(site: Path | None, kernel_cache: Path | None = None) -> dict:
    """The steps' environment: the checkout (the package runs from it) and ``site`` on
    PYTHONPATH, CuPy's kernel cache in ``kernel_cache`` (where given)."""
    env = dict(os.environ)
    paths = [str(REPO), *([str(site)] if site else []), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    env.update(
        PYTHONPATH=os.pathsep.join(paths), PYTHONUNBUFFERED="1", PYTHONIOENCODING="utf-8", DGLBACKEND="pytorch", MPLBACKEND="Agg", OUTDATED_IGNORE="1"
    )  # ogb's PyPI check would only warn: a GPU machine may have no network
    if kernel_cache is not None:
        env["CUPY_CACHE_DIR"] = str(kernel_cache)
    return env


def last_line(text: str, returncode: int | None = None) -> str:
    """The last non-empty line of ``text`` (a traceback's error), else the exit code."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else f"exit code {returncode}"


def pip_install_command(python: str, wheels: list[Path], site: Path) -> list[str]:
    """Offline install of ``wheels`` into ``site``: no index, no dependencies, no network."""
    return [
        python,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-index",
        "--no-deps",
        "--no-compile",
        "--no-cache-dir",
        "--upgrade",
        "--disable-pip-version-check",
        "--target",
        str(site),
        *map(str, wheels),
    ]


def wheel_needed(wheel: Path) -> bool:
    """Whether ``wheel`` brings something this interpreter lacks: its distribution missing, or
    older than the wheel (a wheel carried for a version floor, e.g. typing_extensions, is then
    left out rather than replacing a newer one)."""
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
    """Install the wheels of ``wheels_dir`` that :func:`wheel_needed` into ``site``, offline and
    silently (the header, printed next, says what was installed)."""
    part = Part("wheels", limit=timeout)
    found = sorted(wheels_dir.glob("*.whl")) if wheels_dir.is_dir() else []
    wheels = [w for w in found if wheel_needed(w)]
    part.details["present"] = [w.name for w in found if w not in wheels]
    if not wheels:
        part.status = "ok"
        part.reason = f"none: no wheels in {wheels_dir}" if not found else f"none: the image has all {len(found)} wheels' packages"
        return part
    run = run_bounded(pip_install_command(sys.executable, wheels, site), timeout, echo=False)
    part.seconds = run.seconds
    part.details["wheels"] = [w.name for w in wheels]
    names = ", ".join("-".join(w.name.split("-")[:2]) for w in wheels)
    if run.returncode == 0:
        part.status, part.reason = "ok", f"{names} (offline, into {site})"
    else:
        part.status = "failed"
        why = f"timed out after {timeout:.0f} s" if run.returncode is None else f"pip: {last_line(run.output, run.returncode)}"
        part.reason = f"FAILED to install {names}: {why}"
        part.details["output_tail"] = tail(run.output)
    return part


# -- the header ------------------------------------------------------------------------------


def cuda_version_text(number: int) -> str:
    """CUDA's integer version (13000) as text (13.0)."""
    return f"{number // 1000}.{number % 1000 // 10}"


def _guarded(env: dict, key: str, fn) -> None:
    """``env[key] = fn()``, or the error that stopped it (a broken part is reported, not raised)."""
    try:
        env[key] = fn()
    except Exception as e:  # noqa: BLE001 - the header reports what it could not read
        env[key] = f"unavailable ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"[:200]


def environment(cuda: bool) -> dict:
    """Device, driver and library versions, each read in its own guard. The NVRTC figures come
    from CuPy (which compiles the kernels) and from dgl_zerocopy's own lookup (which picks the
    library CuPy is handed, and the compile check's)."""
    import numpy
    import torch

    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": str(torch.version.cuda),
        "numpy": numpy.__version__,
        "cpu_count": os.cpu_count(),
    }
    if cuda:

        def device() -> str:
            props = torch.cuda.get_device_properties(0)
            env.update(
                compute_capability="%d.%d" % torch.cuda.get_device_capability(0),
                sm_count=props.multi_processor_count,
                memory_gib=round(props.total_memory / 2**30, 1),
                gpu_count=torch.cuda.device_count(),
            )
            return torch.cuda.get_device_name(0)

        _guarded(env, "device", device)
    else:
        env["device"] = "cpu (no CUDA: DGL_ZEROCOPY_GPU_CHECK_ON_CPU)"
    _guarded(env, "nvrtc_check", _nvrtc_of_dgl_zerocopy)
    try:
        import cupy
    except Exception as e:  # noqa: BLE001 - reported in the header
        env["cupy"] = f"unavailable ({type(e).__name__}: {e})"[:200]
    else:
        env["cupy"] = cupy.__version__
        _guarded(env, "nvrtc_cupy", lambda: "%d.%d" % cupy.cuda.nvrtc.getVersion())
        if cuda:
            _guarded(env, "cuda_runtime", lambda: cuda_version_text(cupy.cuda.runtime.runtimeGetVersion()))
            _guarded(env, "cuda_driver_api", lambda: cuda_version_text(cupy.cuda.runtime.driverGetVersion()))
    _guarded(env, "dgl", lambda: importlib.metadata.version("dgl"))
    env["driver"] = _driver_version()
    return env


def _nvrtc_of_dgl_zerocopy() -> str:
    from dgl_zerocopy.cuda.nvrtc import find_nvrtc, nvrtc_version

    lib = find_nvrtc()
    return "%d.%d at %s (%s)" % (*nvrtc_version(), lib.path, lib.source)


def _driver_version() -> str:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return "unknown (no nvidia-smi)"
    try:
        r = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"nvidia-smi: {type(e).__name__}"
    return r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else f"nvidia-smi: exit {r.returncode}"


def header_lines(wheels: Part, env: dict, limits: dict[str, float | str], cache: str, mode: str, out: Path, total: float) -> list[str]:
    """What the check prints first: the wheels installed, the GPU, driver, CUDA, NVRTC and CuPy
    versions, the kernel cache, and each step's time limit."""
    gpu = env.get("device", "?")
    if "sm_count" in env:
        gpu += f", compute capability {env['compute_capability']}, {env['sm_count']} SMs, {env['memory_gib']} GiB ({env['gpu_count']} GPU(s))"
    shown = ", ".join(f"{name} {v:.0f} s" if isinstance(v, (int, float)) else f"{name} {v}" for name, v in limits.items())
    return [
        f"gpu-check: wheels installed: {wheels.reason}",
        f"gpu-check: GPU: {gpu}",
        f"gpu-check: driver {env.get('driver', '?')}, CUDA driver API {env.get('cuda_driver_api', '?')}; "
        f"CUDA runtime {env.get('cuda_runtime', '?')} (CuPy), torch built with CUDA {env.get('torch_cuda', '?')}",
        f"gpu-check: NVRTC {env.get('nvrtc_cupy', '?')} (CuPy); dgl_zerocopy's lookup: {env.get('nvrtc_check', '?')}",
        f"gpu-check: CuPy {env.get('cupy', '?')}, torch {env['torch']}, NumPy {env['numpy']}, Python {env['python']}, DGL {env.get('dgl', '?')}",
        f"gpu-check: kernel cache {cache}",
        f"gpu-check: {mode} run into {out}; time limits: {shown}; {total:.0f} s in all",
    ]
