"""Static scan of the names the package takes from CuPy and ``torch.cuda``, checked against the
installed libraries.

A reference is a dotted chain such as ``cupy.cuda.runtime.hostRegister``, found with ``ast`` (no
code of the package runs, so no GPU is needed). Names are resolved by the conventions of this
code base:

* ``import cupy`` / ``import cupy as cp`` / ``import cupy.cuda.runtime as rt`` /
  ``from cupy.cuda import runtime`` / ``from torch.cuda import Event`` bind a name to a dotted path;
  the import itself is a reference (``from cupy.cuda import nope`` must resolve too).
* A bare name ``cupy`` is always the CuPy module (``cupy = self._cupy``, ``cupy = _cupy()``, a
  parameter named ``cupy``), and so are ``self._cupy`` and ``_cupy()``.
* A module-level function without parameters that returns a module chain is an accessor:
  ``def _runtime(): from cupy.cuda import runtime; return runtime`` makes ``_runtime()`` stand for
  ``cupy.cuda.runtime`` in that file.
* ``x = <chain>`` makes ``x`` an alias of the chain in that scope.
* A chain stops at a call or a subscript: ``cupy.cuda.Device(0).attributes[...]`` is the reference
  ``cupy.cuda.Device``.
* ``getattr(<chain>, "name", ...)`` and ``hasattr(<chain>, "name")`` are guarded references to
  ``<chain>.name``: the way to reach a name that only newer versions have.

Only chains under :data:`ROOTS` are collected.
"""

from __future__ import annotations

import ast
import importlib
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

ROOTS = ("cupy", "cupyx", "torch.cuda")
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


@dataclass(frozen=True)
class Reference:
    chain: str
    path: str
    line: int
    guarded: bool = False  # reached through getattr/hasattr with a string literal

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def tracked(dotted: str) -> bool:
    return any(dotted == root or dotted.startswith(root + ".") for root in ROOTS)


class _Scanner:
    def __init__(self, path: str) -> None:
        self.path = path
        self.references: list[Reference] = []
        self.accessors: dict[str, str] = {"_cupy": "cupy"}  # function name -> the module it returns

    def _record(self, chain: str | None, node: ast.AST, guarded: bool = False) -> None:
        if chain is not None and "." in chain and tracked(chain):
            self.references.append(Reference(chain, self.path, node.lineno, guarded))

    # ----------------------------------------------------------------- scopes and bindings

    def scope(self, node: ast.AST, outer: Mapping[str, str]) -> None:
        """Visit ``node`` (a module, function, lambda or class) with its own bindings over ``outer``."""
        env = dict(outer)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg):
                if arg is not None:
                    env.pop(arg.arg, None)  # a parameter shadows an outer binding ...
                    if arg.arg == "cupy":
                        env["cupy"] = "cupy"  # ... except `cupy`, the module by convention
        body = list(_own_statements(node))
        for stmt in body:  # imports first: an assignment may alias an imported name
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                self._bind_import(stmt, env)
        for stmt in body:
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                value = self.chain_of(stmt.value, env)
                for target in targets:
                    if isinstance(target, ast.Name):
                        if target.id == "cupy":
                            env["cupy"] = "cupy"
                        elif value is not None:
                            env[target.id] = value
                        else:
                            env.pop(target.id, None)  # rebound to something untracked
        for child in ast.iter_child_nodes(node):
            self.visit(child, env)

    def find_accessors(self, tree: ast.Module) -> None:
        """Module-level functions without parameters whose every ``return`` gives the same module chain."""
        module_env: dict[str, str] = {}
        for stmt in tree.body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                self._bind_import(stmt, module_env, record=False)
        for stmt in tree.body:
            if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) or _has_parameters(stmt.args):
                continue
            env = dict(module_env)
            own = list(_own_statements(stmt))
            for inner in own:
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    self._bind_import(inner, env, record=False)
            returned = {self.chain_of(r.value, env) if r.value is not None else None for r in own if isinstance(r, ast.Return)}
            if len(returned) == 1 and None not in returned:
                self.accessors[stmt.name] = returned.pop()

    def _bind_import(self, stmt: ast.Import | ast.ImportFrom, env: dict[str, str], record: bool = True) -> None:
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname:
                    env[alias.asname] = alias.name
                else:  # `import cupy.cuda.runtime` binds `cupy`
                    top = alias.name.split(".")[0]
                    env[top] = top
                if record:
                    self._record(alias.name, stmt)
        elif stmt.level == 0 and stmt.module:  # relative imports are the package's own modules
            for alias in stmt.names:
                if alias.name == "*":
                    continue
                full = f"{stmt.module}.{alias.name}"
                env[alias.asname or alias.name] = full
                if record:
                    self._record(full, stmt)

    # ----------------------------------------------------------------- expressions

    def chain_of(self, node: ast.AST, env: Mapping[str, str]) -> str | None:
        """The dotted path ``node`` stands for, or None when it is not a known module chain."""
        chain, _ = self._unwind(node, env)
        return chain

    def _unwind(self, node: ast.AST, env: Mapping[str, str]) -> tuple[str | None, ast.AST]:
        """(dotted path of the attribute chain ``node``, the node where the chain starts)."""
        attrs: list[str] = []
        while isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "self" and node.attr == "_cupy":
                return ".".join(["cupy", *reversed(attrs)]), node
            attrs.append(node.attr)
            node = node.value
        base = None
        if isinstance(node, ast.Name):
            base = "cupy" if node.id == "cupy" else env.get(node.id)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in self.accessors and not node.args and not node.keywords:
            base = self.accessors[node.func.id]
        if base is None:
            return None, node
        return ".".join([base, *reversed(attrs)]), node

    def visit(self, node: ast.AST, env: Mapping[str, str]) -> None:
        if isinstance(node, _SCOPES):
            self.scope(node, env)
            return
        if isinstance(node, ast.Attribute):
            chain, start = self._unwind(node, env)
            self._record(chain, node)
            if start is not node:  # what the chain starts from: a call's arguments, say
                self.visit(start, env)
            return
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            owner = self.chain_of(node.args[0], env)
            if owner is not None:
                self._record(f"{owner}.{node.args[1].value}", node, guarded=True)
        for child in ast.iter_child_nodes(node):
            self.visit(child, env)


def _has_parameters(args: ast.arguments) -> bool:
    return bool(args.posonlyargs or args.args or args.kwonlyargs or args.vararg or args.kwarg)


def _own_statements(node: ast.AST) -> Iterable[ast.AST]:
    """Statements of ``node``'s scope, nested blocks included, nested scopes excluded."""
    todo = deque(ast.iter_child_nodes(node))
    while todo:
        child = todo.popleft()
        if isinstance(child, _SCOPES):
            continue
        if isinstance(child, ast.stmt):
            yield child
        todo.extend(c for c in ast.iter_child_nodes(child) if isinstance(c, (ast.stmt, ast.excepthandler, ast.match_case)))


def scan_source(source: str, path: str = "<string>") -> list[Reference]:
    """Every reference under :data:`ROOTS` in ``source``, in file order."""
    tree = ast.parse(source, filename=path)
    scanner = _Scanner(path)
    scanner.find_accessors(tree)
    scanner.scope(tree, {})
    return sorted(scanner.references, key=lambda r: (r.line, r.chain))


def scan_tree(root: Path, folders: Iterable[str]) -> list[Reference]:
    """References in every ``.py`` under ``root/<folder>``, paths relative to ``root``."""
    refs: list[Reference] = []
    for folder in folders:
        for file in sorted((root / folder).rglob("*.py")):
            refs += scan_source(file.read_text(encoding="utf-8"), str(file.relative_to(root)))
    return refs


# --------------------------------------------------------------------- resolution


def first_missing(dotted: str) -> str | None:
    """None when ``dotted`` resolves in the installed libraries, else its first prefix that does not.

    Each step is a ``getattr``; on a module a missing attribute may still be a submodule not yet
    imported (``import cupy.cuda.nvtx``), so that is tried next.
    """
    parts = dotted.split(".")
    try:
        obj = importlib.import_module(parts[0])
    except ImportError:
        return parts[0]
    for i in range(1, len(parts)):
        prefix = ".".join(parts[: i + 1])
        try:
            obj = getattr(obj, parts[i])
            continue
        except AttributeError:
            pass
        if not isinstance(obj, ModuleType):
            return prefix
        try:
            obj = importlib.import_module(prefix)
        except ImportError:
            return prefix
    return None


def installed_version(dotted: str) -> str:
    """``__version__`` of the library ``dotted`` belongs to (``torch`` for ``torch.cuda...``)."""
    return str(importlib.import_module(dotted.split(".")[0]).__version__)


def problems(refs: Iterable[Reference], optional: Mapping[str, str]) -> list[str]:
    """One line per bad reference: a name that does not resolve, or an optional name (one that
    only newer versions have, ``optional[name]`` = the first version with it) reached without a
    guard. Guarded references to optional names are left to the table's own check."""
    lines = []
    for ref in refs:
        parts = ref.chain.split(".")
        opt = next((p for p in (".".join(parts[:i]) for i in range(len(parts), 0, -1)) if p in optional), None)
        if opt is not None:
            if not (ref.guarded and ref.chain == opt):
                lines.append(
                    f"{ref.where}: {ref.chain} needs {parts[0]} >= {optional[opt]}; reach it through "
                    f"getattr(..., {opt.rsplit('.', 1)[1]!r}, None) and fall back when it is None"
                )
            continue
        missing = first_missing(ref.chain)
        if missing is not None:
            how = "getattr/hasattr of " if ref.guarded else ""
            which = "" if missing == ref.chain else f" ({missing} is missing)"
            lines.append(
                f"{ref.where}: {how}{ref.chain} does not exist in {parts[0]} "
                f"{installed_version(ref.chain)}{which}; if only newer versions have it, list it in "
                f"OPTIONAL and reach it through getattr"
            )
    return lines
