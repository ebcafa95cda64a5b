"""bench/'s layout: a folder per question, every script runs from its folder, no import circle.

A benchmark runs as ``python bench/FOLDER/NAME.py`` (its folder first on ``sys.path``; it puts bench/
there itself for common.py), as ``dgl-zerocopy bench NAME``, or is imported by its bare name with its
folder on the path (by the tests, by ``make gpu-check``). So the names are unique across bench/, and a
folder is never named like a module elsewhere (``import NAME`` would find the empty folder instead).
"""

import ast
import json
import re
import subprocess
import sys
import textwrap

import pytest
from conftest import REPO

BENCH = REPO / "bench"
FILES = sorted(p for p in BENCH.rglob("*.py") if "results" not in p.relative_to(BENCH).parts)
MODULES = {p.stem: p for p in FILES}
#: The helpers every step or benchmark shares: they import no other module of bench/ but common.
SHARED = ("common", "gpu_check_rows")


def _imports(path) -> set[str]:
    """The bench/ modules that ``path`` imports anywhere (a function's lazy import counts too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return {n for n in names if n in MODULES and n != path.stem}


GRAPH = {name: _imports(path) for name, path in MODULES.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (``[a, b, ..., a]``), or None where there is none."""
    state: dict[str, str] = {}  # "open" while on the path being walked, "done" after

    def walk(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := walk(nxt, [*path, nxt])):
                return found
        state[node] = "done"
        return None

    return next((c for n in sorted(graph) if n not in state and (c := walk(n, [n]))), None)


def test_the_cycle_finder_finds_a_circle_and_passes_a_chain():
    assert _cycle({"report": {"sampling"}, "sampling": {"report", "setup"}, "setup": set()}) == ["report", "sampling", "report"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_bench_has_no_import_circle():
    assert GRAPH["gpu_check_main"] >= {"gpu_check_report", "gpu_check_sampling", "gpu_check_storage", "common"}  # the graph is read
    assert _cycle(GRAPH) is None, f"bench/ imports in a circle: {' -> '.join(_cycle(GRAPH))}"


def test_the_shared_helpers_import_no_step_or_benchmark():
    for name in SHARED:
        assert GRAPH[name] <= {"common"}, f"bench/{MODULES[name].relative_to(BENCH)} imports {sorted(GRAPH[name])}"


def test_names_are_unique_and_folders_are_no_module_names():
    stems = [p.stem for p in FILES]
    assert len(stems) == len(set(stems)), sorted(s for s in stems if stems.count(s) > 1)
    folders = {p.parent for p in FILES if p.parent != BENCH}
    assert {f.name for f in folders} == {"gpu_check", "gathering", "sampler", "tiers", "training", "pcie"}
    # bench/gpu_check.py beside bench/gpu_check/ is the one name shared: in one folder a module wins over a folder
    clashes = [f for f in folders if f.name in MODULES and MODULES[f.name].parent != f.parent]
    assert not clashes, clashes
    assert sorted(p.name for p in BENCH.glob("*.py")) == ["common.py", "gpu_check.py"]  # the rest sits in a folder


@pytest.mark.slow
def test_every_script_runs_from_its_folder():
    """Each script's ``--help`` (the ``dgl-zerocopy bench NAME`` ones through the command, the rest as
    ``python bench/FOLDER/NAME.py`` has it: its folder first on the path), and each other module imported
    with only its own folder on the path (as a child process that runs it by its file has it): one
    interpreter, bench/'s modules forgotten between two."""
    pytest.importorskip("dgl")  # bench/tiers/storage.py imports it first
    code = textwrap.dedent(f"""
        import contextlib, importlib, io, json, runpy, sys
        from pathlib import Path

        import dgl_zerocopy.cli as cli

        BENCH = Path({str(BENCH)!r})
        base = [p for p in sys.path if not p.startswith(str(BENCH))]
        results = {{}}
        for path in sorted(p for p in BENCH.rglob("*.py") if "results" not in p.parts):
            for name, module in list(sys.modules.items()):
                if str(getattr(module, "__file__", None) or "").startswith(str(BENCH)):
                    del sys.modules[name]
            source = path.read_text()
            out = io.StringIO()
            try:
                with contextlib.redirect_stdout(out):
                    if path.stem in cli.BENCHMARKS:
                        sys.path[:] = base  # the command puts the script's folder on the path
                        cli.main(["bench", path.stem, "--help"])
                    elif "argparse" in source and "__main__" in source:
                        sys.path[:] = [str(path.parent), *base]
                        sys.argv = [str(path), "--help"]
                        runpy.run_path(str(path), run_name="__main__")
                    else:
                        sys.path[:] = [str(path.parent), *base]
                        importlib.import_module(path.stem)
                        results[str(path.relative_to(BENCH))] = "imported"
                        continue
                results[str(path.relative_to(BENCH))] = "no help"
            except SystemExit as e:
                results[str(path.relative_to(BENCH))] = "help" if e.code in (0, None) and "usage:" in out.getvalue() else f"exit {{e.code}}"
            except BaseException as e:
                results[str(path.relative_to(BENCH))] = f"{{type(e).__name__}}: {{e}}"
        print(json.dumps(results))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, encoding="utf-8", errors="replace", cwd="/", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    results = json.loads(r.stdout.strip().splitlines()[-1])
    assert set(results) == {str(p.relative_to(BENCH)) for p in FILES}
    bad = {k: v for k, v in results.items() if v not in ("help", "imported")}
    assert not bad, bad
    imported = {k for k, v in results.items() if v == "imported"}
    assert "sampler/snapshot_speed.py" in imported and "gpu_check/gpu_check_rows.py" in imported and "training/epoch.py" not in imported


def test_every_bench_script_the_docs_name_is_there():
    """The docs' commands name scripts at their place (the CHANGELOG names the old places on purpose)."""
    texts = {
        p.relative_to(REPO): p.read_text(encoding="utf-8") for p in [REPO / "README.md", REPO / "Makefile", BENCH / "README.md", *(REPO / "docs").glob("*.md")]
    }
    named = {(str(where), m) for where, text in texts.items() for m in re.findall(r"(?<![\w/.-])bench/[a-z0-9_/]+\.py\b", text)}
    assert len(named) > 30
    assert not sorted(f"{where}: {path}" for where, path in named if not (REPO / path).is_file())
