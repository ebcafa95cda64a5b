"""The pytest step's outcome in bench/gpu_check.py: ``pytest -m gpu``'s command, and its verdict read from pytest's
output and from the record the plugin (gpu_check_pytest.py) writes as each test ends."""

from __future__ import annotations

import importlib.util
import re

from gpu_check_pytest import LOG_VARIABLE, Progress
from gpu_check_setup import Part, Run, last_line

PYTEST_TEST_TIMEOUT = 120  # a test still running after this long at the limit is reported as hung


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
    """``pytest -m gpu`` with the progress plugin and the 15 slowest tests listed at the end."""
    cmd = [
        python,
        "-m",
        "pytest",
        "-m",
        "gpu",
        "-q",
        "-rfEs",
        "--tb=short",
        "-p",
        "no:cacheprovider",
        "--continue-on-collection-errors",
        "--durations=15",
        "-p",
        "gpu_check_pytest",
    ]
    if importlib.util.find_spec("pytest_timeout") is not None:
        cmd.append(f"--timeout={PYTEST_TEST_TIMEOUT}")
    return cmd


def judge_pytest(run: Run, progress: Progress | None, limit: float) -> Part:
    """The pytest step's outcome from its run and the plugin's record. A test that finished and
    failed fails the step; a test the time limit left out (or cut off, unless it had run longer
    than :data:`PYTEST_TEST_TIMEOUT`: hung) is reported as not run, and the step is partial."""
    part = Part("pytest", seconds=run.seconds, limit=limit)
    counts = parse_pytest_counts(run.output)
    part.details = {"counts": counts, "summary": pytest_short_summary(run.output)}
    if progress is None:  # the plugin wrote nothing: pytest did not start, or could not load it
        part.status = "failed"
        part.reason = (
            f"stopped at its time limit ({limit:.0f} s) with no per-test record"
            if run.stopped
            else f"no per-test record ({LOG_VARIABLE}): {last_line(run.output, run.returncode)}"
        )
        return part
    bad = {t: o for t, o in progress.outcomes.items() if o in ("failed", "error")}
    cut = progress.in_flight if run.stopped else None
    ran_for = run.ended - progress.in_flight_since if cut and progress.in_flight_since else 0.0
    not_run = progress.not_run if run.stopped else []
    part.details.update(
        counts={
            "passed": progress.count("passed"),
            "failed": progress.count("failed"),
            "errors": progress.count("error"),
            "skipped": progress.count("skipped"),
            "not run (time limit)": len(not_run) + bool(cut),
            "selected": len(progress.selected),
        },
        failures=[f"{t}: {o}: {progress.messages.get(t, '')}" for t, o in bad.items()],
        collect_errors=progress.collect_errors,
        not_run=not_run,
        in_flight=cut,
        slowest=[f"{t}: {s:.1f} s" for t, s in progress.slowest(10)],
    )
    shown = ", ".join(f"{n} {k}" for k, n in part.details["counts"].items() if n and k != "selected")
    if bad or progress.collect_errors or ran_for > PYTEST_TEST_TIMEOUT:
        part.status = "failed"
        first = [*(f"{t} ({o})" for t, o in bad.items()), *progress.collect_errors][:3]
        hung = [f"{cut} still running after {ran_for:.0f} s (hung?)"] if ran_for > PYTEST_TEST_TIMEOUT else []
        part.reason = f"{shown}: " + "; ".join(first + hung)
    elif not_run or cut:
        part.status = "partial"
        part.reason = (
            f"time limit ({limit:.0f} s): {shown}" + (f"; {cut} cut off after {ran_for:.0f} s" if cut else "") + "; every test that finished passed or skipped"
        )
    elif not progress.finished and run.returncode:
        part.status, part.reason = "failed", f"pytest ended before its session did (exit {run.returncode}): {last_line(run.output)}"
    elif run.returncode == 5 or not progress.selected:
        part.status, part.reason = "failed", "pytest -m gpu selected no test"
    elif progress.count("passed") == 0:
        part.status, part.reason = "failed", f"no GPU test passed ({shown or 'nothing counted'})"
    elif run.returncode != 0:
        part.status, part.reason = "failed", f"exit {run.returncode}: {last_line(run.output, run.returncode)}"
    else:
        part.status, part.reason = "ok", shown
    return part
