"""pytest progress that survives a killed run: the pytest step of bench/gpu_check.py.

Loaded into the pytest process with ``-p gpu_check_pytest`` (bench/gpu_check/ on PYTHONPATH) and the
variable ``GPU_CHECK_PYTEST_LOG`` naming a file, this plugin appends one JSON line per event
as it happens (the tests selected, each test's start, each phase's report, the session's end),
each line written and closed at once. pytest's own ``--junitxml`` is written only when the session
ends, so a run stopped at its time limit would leave none; these lines stay whatever stops it.

:func:`read_progress` turns the file back into one outcome per selected test, and names the
tests that never ran (the time limit came first) and the one that was running when it came.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

LOG_VARIABLE = "GPU_CHECK_PYTEST_LOG"


def _write(record: dict) -> None:
    path = os.environ.get(LOG_VARIABLE)
    if not path:  # imported, not loaded as the check's plugin: record nothing
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def _message(report) -> str:
    """A report's one-line reason: a skip's reason, or the last line of a failure."""
    if report.skipped and isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        return str(report.longrepr[2])[:300]  # (file, line, reason)
    text = getattr(report, "longreprtext", "") or ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


# -- the plugin's hooks (pytest calls them by name) --------------------------------------------


def pytest_configure(config) -> None:
    """Let the check's SIGINT end this pytest's session. Started by a shell without job control
    (``make gpu-check &``, a CI script), a process inherits SIGINT ignored, and Python keeps an
    ignored SIGINT ignored: the interrupt at the limit did nothing, pytest was killed instead and
    its summary lost. A test may still ignore SIGINT itself (then pytest is killed, as designed)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collectreport(report) -> None:
    if report.failed:
        _write({"event": "collect_error", "id": report.nodeid, "message": _message(report)})


def pytest_collection_finish(session) -> None:
    _write({"event": "selected", "ids": [item.nodeid for item in session.items], "t": time.time()})


def pytest_runtest_logstart(nodeid, location) -> None:
    _write({"event": "start", "id": nodeid, "t": time.time()})


def pytest_runtest_logreport(report) -> None:
    _write(
        {
            "event": "report",
            "id": report.nodeid,
            "when": report.when,
            "outcome": report.outcome,
            "seconds": round(report.duration, 3),
            "message": _message(report) if report.outcome != "passed" else "",
        }
    )


def pytest_sessionfinish(session, exitstatus) -> None:
    _write({"event": "finish", "exitstatus": int(exitstatus), "t": time.time()})


# -- reading it back ---------------------------------------------------------------------------


@dataclass
class Progress:
    """What a pytest run recorded. ``outcomes`` maps each test that finished to ``passed``,
    ``failed`` (its call failed), ``error`` (its setup or teardown failed) or ``skipped``;
    ``not_run`` lists the selected tests with no report, in order; ``in_flight`` is the test that
    had started and not finished (None when none), ``in_flight_since`` when it started (epoch s)."""

    selected: list[str] = field(default_factory=list)
    outcomes: dict[str, str] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    collect_errors: list[str] = field(default_factory=list)
    not_run: list[str] = field(default_factory=list)
    in_flight: str | None = None
    in_flight_since: float | None = None
    finished: bool = False
    exitstatus: int | None = None

    def count(self, outcome: str) -> int:
        return sum(1 for o in self.outcomes.values() if o == outcome)

    def slowest(self, n: int = 10) -> list[tuple[str, float]]:
        return sorted(self.seconds.items(), key=lambda kv: -kv[1])[:n]


def read_progress(path: Path) -> Progress | None:
    """The outcomes recorded in ``path`` (None when the file is missing: the plugin never ran).
    A line cut short by a kill is ignored."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError:
        return None
    p = Progress()
    started: dict[str, float] = {}
    done: set[str] = set()
    for line in text.splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        event = r.get("event")
        if event == "selected":
            p.selected = list(r["ids"])
        elif event == "collect_error":
            p.collect_errors.append(f"{r['id']}: {r['message']}")
        elif event == "start":
            started[r["id"]] = r["t"]
        elif event == "report":
            test, when, outcome = r["id"], r["when"], r["outcome"]
            p.seconds[test] = round(p.seconds.get(test, 0.0) + r["seconds"], 3)
            if outcome == "failed":
                p.outcomes[test] = "failed" if when == "call" else "error"
                p.messages.setdefault(test, r["message"])
            elif outcome == "skipped" and p.outcomes.get(test) not in ("failed", "error"):
                p.outcomes[test] = "skipped"
                p.messages.setdefault(test, r["message"])
            elif outcome == "passed" and when == "call" and test not in p.outcomes:
                p.outcomes[test] = "passed"
            if when == "teardown":
                done.add(test)
        elif event == "finish":
            p.finished, p.exitstatus = True, r["exitstatus"]
    running = [t for t in started if t not in done]
    if running:
        p.in_flight = running[-1]
        p.in_flight_since = started[p.in_flight]
        if p.outcomes.get(p.in_flight) in ("passed", "skipped"):
            del p.outcomes[p.in_flight]  # its call passed, but it never finished (teardown): not a pass
    p.not_run = [t for t in p.selected if t not in p.outcomes and t != p.in_flight]
    return p
