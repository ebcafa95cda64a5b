"""Running the project's scripts as a user would: in a child process (``python ...``, the command line
``dgl-zerocopy ...``, the benchmarks under bench/, whose results must never land in bench/results/),
or an example in this process, and reading a figure from what it printed."""

from __future__ import annotations

import json
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"


def run_python(*args, timeout: float = 300, env: dict | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """``python ARGS`` with this interpreter, its output captured as UTF-8 text, its input empty (a
    prompt reads the end of the input, it never waits).

    Args:
        *args: the interpreter's arguments (paths are turned into strings).
        timeout: seconds before the child is killed and ``subprocess.TimeoutExpired`` raised.
        env: the child's environment; this process's when None.
        cwd: the child's folder; the checkout when left out.

    Returns:
        The finished process; its exit status is the caller's to check.
    """
    return subprocess.run(
        [sys.executable, *map(str, args)],
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="replace",
        stdin=subprocess.DEVNULL,
        cwd=cwd,
        env=os.environ.copy() if env is None else env,
        timeout=timeout,
    )


def run_cli(*args, timeout: float = 300, env: dict | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """``dgl-zerocopy ARGS``, run as ``python -m dgl_zerocopy.cli ARGS`` (the arguments as for ``run_python``)."""
    return run_python("-m", "dgl_zerocopy.cli", *args, timeout=timeout, env=env, cwd=cwd)


def start_in_own_session(*args, env: dict | None = None, cwd: Path = REPO) -> subprocess.Popen:
    """Start ``python ARGS`` in a session of its own, its outputs piped as UTF-8 text: ``os.killpg(proc.pid, ...)``
    then reaches every process it spawned (the ranks of a DDP job) as well.

    Args:
        *args: the interpreter's arguments (paths are turned into strings).
        env: the child's environment; this process's when None.
        cwd: the child's folder; the checkout when left out.
    """
    return subprocess.Popen(
        [sys.executable, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        cwd=cwd,
        env=os.environ.copy() if env is None else env,
        start_new_session=True,
    )


def assert_runs_without(module: str, code: str) -> None:
    """Assert that ``python -c CODE`` exits 0 with ``module`` unimportable: it is set to None in
    ``sys.modules`` before CODE runs, so that importing it raises ImportError."""
    run = run_python("-c", f"import sys; sys.modules[{module!r}] = None\n{code}")
    assert run.returncode == 0, run.stderr


def output_tail(run: subprocess.CompletedProcess, chars: int = 3000) -> str:
    """The exit status and the last ``chars`` characters of each output, for an assertion's message."""
    return f"exit {run.returncode}\n--- stdout\n{run.stdout[-chars:]}\n--- stderr\n{run.stderr[-chars:]}"


def _results_files() -> dict[Path, tuple[int, int]]:
    return {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in RESULTS.rglob("*") if p.is_file()}


def run_bench(
    script: str, *args, out: Path | None = None, results: Path | None = None, returncode: int = 0, timeout: float = 600, env: dict | None = None
) -> tuple[subprocess.CompletedProcess, dict | None]:
    """Run a benchmark, check its exit status and that it wrote nothing under bench/results/, and read
    the JSON it wrote.

    Args:
        script: a script's path from the checkout (``"bench/gathering/gather.py"``), run with ``python``;
            or a name without ``.py`` (``"epoch"``), run as ``dgl-zerocopy bench NAME``.
        *args: the benchmark's arguments.
        out: the stem its files take: ``--out OUT`` is added and ``OUT.json`` read.
        results: the JSON file to read where the script names its files itself (``--out-dir``); none
            is read when both are left out.
        returncode: the exit status the run must end with.
        timeout: seconds before the run is killed.
        env: the child's environment; this process's when None.

    Returns:
        The finished process and the JSON read (None where none was asked for).

    Raises:
        AssertionError: another exit status (with the end of both outputs), or a file under
            bench/results/ created or changed by the run.
    """
    command = [script] if script.endswith(".py") else ["-m", "dgl_zerocopy.cli", "bench", script]
    if out is not None:
        args = (*args, "--out", out)
        results = Path(out).with_suffix(".json") if results is None else results
    before = _results_files()
    run = run_python(*command, *args, timeout=timeout, env=env)
    assert run.returncode == returncode, output_tail(run)
    written = sorted(str(p.relative_to(REPO)) for p, stamp in _results_files().items() if before.get(p) != stamp)
    assert not written, f"the run wrote into bench/results/: {written}"
    return run, None if results is None else json.loads(Path(results).read_text(encoding="utf-8"))


def run_side_by_side(scripts: list, argv: list, timeout: float = 300) -> list[str]:
    """Run ``python SCRIPT ARGV`` for each script at once from the checkout (on it ``PYTHONPATH``), each
    on one thread as they share the cores, and return their outputs in order.

    Raises:
        AssertionError: a script that exits with another status than 0 (with the end of its outputs).
        subprocess.TimeoutExpired: one still running after ``timeout`` seconds; every one is killed.
    """
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    runs = [
        subprocess.Popen(
            [sys.executable, str(s), *map(str, argv)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, encoding="utf-8", env=env, cwd=REPO
        )
        for s in scripts
    ]
    outputs = []
    try:
        for run in runs:
            out, err = run.communicate(timeout=timeout)
            assert run.returncode == 0, out[-2000:] + err[-4000:]
            outputs.append(out)
    finally:
        for run in runs:
            run.kill()
    return outputs


def run_in_process(script: Path, argv: list, capsys, monkeypatch) -> str:
    """Run ``script`` in this process as ``python SCRIPT ARGV`` would (as ``__main__``) and return what it
    printed; ``capsys`` and ``monkeypatch`` are the calling test's fixtures."""
    monkeypatch.setattr(sys, "argv", [str(script), *map(str, argv)])
    runpy.run_path(str(script), run_name="__main__")
    return capsys.readouterr().out


def metric(pattern: str, out: str) -> float:
    """The number ``pattern``'s first group finds in ``out``; an AssertionError with the end of ``out`` where none."""
    found = re.search(pattern, out)
    assert found, out[-2000:]
    return float(found.group(1))
