"""The package's layout: its layers import one way, with no circle, in modules of one concept.

Imports are read with ``ast`` from every module of ``dgl_zerocopy`` (and ``kernels/__init__.py``,
shipped as ``dgl_zerocopy.kernels``): at module level and inside functions alike, since a lazy
import is still a dependency. A package's implicit import by its submodules is not an edge; an
explicit ``from . import name`` of the package is.
"""

from __future__ import annotations

import ast
import functools
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "dgl_zerocopy"

#: Layers, lowest first: a module may import its own layer and the ones below it, never one above.
LAYERS = {
    "cuda": 0,
    "kernels": 0,  # the GPU kernel layer (kernels/ holds its sources)
    "store": 1,  # where rows live
    "data": 2,  # datasets (their tables are files the store maps)
    "sampling": 3,  # GPU neighbour sampling and the device blocks it builds (the loader uses both)
    "loading": 4,  # batches
    "nn": 5,  # layers over device blocks
    "pyg": 5,  # the PyG front end: PyG's loaders over our samplers, store and ring
    "training": 6,  # loop, sources, config, models, DDP
    "dist": 7,  # DistDGL training, built on training
    "cli": 8,
    "": 8,  # the command line and the package's public names
    "_moved": 8,  # old import paths of moved modules, installed by the package's __init__
    "_extras": 0,  # the one-line error for a framework an extra brings (standard library only): every layer may import it
}
#: The folders nothing under store/ or sampling/ may import: the layers above them, and front ends to come.
ABOVE_SAMPLING = ("loading", "nn", "training", "dist", "cli", "pyg")
MAX_LINES = 500


def _modules() -> dict[str, Path]:
    """Module name -> file, for every module of the package."""
    modules = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    modules[f"{PACKAGE}.kernels"] = ROOT / "kernels" / "__init__.py"
    return modules


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its file."""
    return {t for t in _import_targets(name, path) if t in MODULES and t != name}


def _import_targets(name: str, path: Path) -> set[str]:
    """Every dotted name that ``name`` imports anywhere in its file, relative imports resolved: a
    module of the package, or the package module a name is taken from, or a module outside it."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            # `from pkg import sub` imports the submodule; `from pkg import name` the package itself.
            targets = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in MODULES else module for alias in node.names]
        else:
            continue
        found.update(targets)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _layer(module: str) -> int:
    first = module.removeprefix(PACKAGE).lstrip(".").split(".")[0]
    return LAYERS[first]


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` as a path (first module repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state and (found := visit(target)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_cycle_finder_finds_a_circle_and_passes_a_tree():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_import_reader_sees_function_level_and_package_imports(tmp_path):
    module = tmp_path / "zerocopy.py"
    module.write_text("def f():\n    from . import GatherOptions\n    from ..cache import HotRowCache\n")
    assert _imports(f"{PACKAGE}.store.backends.zerocopy", module) == {f"{PACKAGE}.store.backends", f"{PACKAGE}.store.cache"}


def test_no_import_circle_in_the_package():
    assert len(GRAPH) > 40 and all(_layer(name) >= 0 for name in GRAPH)
    circle = _cycle(GRAPH)
    assert circle is None, "import circle: " + " -> ".join(circle)


def test_imports_flow_down_the_layers():
    upward = [f"{name} -> {target}" for name, targets in sorted(GRAPH.items()) for target in sorted(targets) if _layer(target) > _layer(name)]
    assert upward == [], "modules importing a layer above their own:\n" + "\n".join(upward)


def test_store_and_sampling_import_no_layer_above_them():
    """The two layers the loader builds on (rows, and sampled blocks) never reach up: not to loading
    (``sampling`` once took ``DeviceBlock`` from ``loading.blocks``), nn, training, dist, the CLI or a
    front end such as ``pyg``, whether or not that folder exists yet."""
    lower = {name: path for name, path in MODULES.items() if _layer(name) in (LAYERS["store"], LAYERS["sampling"])}
    assert {f"{PACKAGE}.store.feature_store", f"{PACKAGE}.sampling.neighbor", f"{PACKAGE}.sampling.blocks"} <= set(lower)
    above = tuple(f"{PACKAGE}.{folder}" for folder in ABOVE_SAMPLING)
    upward = sorted(
        f"{name} -> {target}"
        for name, path in lower.items()
        for target in _import_targets(name, path)
        if target == PACKAGE or target.startswith(tuple(a + "." for a in above)) or target in above
    )
    assert upward == [], "store/ and sampling/ importing a layer above them:\n" + "\n".join(upward)


def test_every_subpackage_is_a_layer_the_list_names():
    folders = {p.name for p in (ROOT / PACKAGE).iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    modules = {p.stem for p in (ROOT / PACKAGE).glob("*.py") if p.stem != "__init__"}
    assert folders | modules <= set(LAYERS), sorted((folders | modules) - set(LAYERS))


def test_no_module_is_over_500_lines():
    long = {str(path.relative_to(ROOT)): n for path in MODULES.values() if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}, f"split these by concept: {long}"


# --------------------------------------------------------------------------- documented imports

_MD_IMPORT = re.compile(r"(from\s+dgl_zerocopy[\w.]*\s+import\s+(?:\([^)]*\)|[\w, ]+(?:\s+as\s+\w+)?)|import\s+dgl_zerocopy[\w.]*(?:\s+as\s+\w+)?)")


def _documented_imports() -> list[tuple[str, str]]:
    """(where, statement) for every import of the package that README, docs, examples and bench show."""
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for match in _MD_IMPORT.finditer(path.read_text(encoding="utf-8")):
            statement = re.sub(r"#[^\n]*", "", match.group(1))
            statement = " ".join(statement.replace("(", " ").replace(")", " ").split()).rstrip(",")
            found.append((path.name, statement))
    for path in sorted([*(ROOT / "examples").rglob("*.py"), *(ROOT / "bench").rglob("*.py"), *(ROOT / "docs").glob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith(PACKAGE):
                names = ", ".join(alias.name for alias in node.names)
                found.append((str(path.relative_to(ROOT)), f"from {node.module} import {names}"))
            elif isinstance(node, ast.Import):
                found += [(str(path.relative_to(ROOT)), f"import {a.name}") for a in node.names if a.name.startswith(PACKAGE)]
    return sorted(set(found))


DOCUMENTED = _documented_imports()

#: The package's modules that need a framework an extra brings (a module, and everything under it): where the
#: framework is not installed, importing one raises an ImportError naming the extra. Every other module imports
#: without either framework (tests/package/test_without_dgl.py checks both, with DGL hidden).
NEEDS_EXTRA = {f"{PACKAGE}.loading.dgl": "dgl", f"{PACKAGE}.dgl": "dgl", f"{PACKAGE}.pyg": "pyg"}
#: The framework each extra brings, by its module's name.
FRAMEWORK = {"dgl": "dgl", "pyg": "torch_geometric"}


def needed_extra(module: str) -> str | None:
    """The extra ``module`` (a dotted name of the package) needs, or None."""
    return next((extra for prefix, extra in NEEDS_EXTRA.items() if module == prefix or module.startswith(prefix + ".")), None)


def install_hint(extra: str) -> str:
    return f'pip install "dgl-zerocopy[{extra}]"'


@functools.cache
def _installed(framework: str) -> bool:
    try:
        importlib.import_module(framework)
    except ModuleNotFoundError as error:
        if error.name != framework:
            raise
        return False
    return True


def test_the_documented_imports_are_found():
    statements = {statement for _, statement in DOCUMENTED}
    assert len(statements) > 20
    assert {"import dgl_zerocopy.nn as dglnn", "from dgl_zerocopy import DataLoader", "from dgl_zerocopy import FeatureStore"} <= statements


@pytest.mark.parametrize("where, statement", DOCUMENTED, ids=[f"{w}:{s}" for w, s in DOCUMENTED])
def test_every_documented_import_works(where, statement):
    """Each import the docs show runs; one of a module whose framework is not installed (DGL's route on a machine
    without DGL) raises an ImportError that names the extra bringing it, and nothing else fails."""
    code = compile(statement, where, "exec")
    extra = needed_extra(statement.split()[1])  # `from M import ...`, `import M [as n]`: M
    if extra is not None and not _installed(FRAMEWORK[extra]):
        with pytest.raises(ImportError, match=re.escape(install_hint(extra))):
            exec(code, {})
    else:
        exec(code, {})
