"""Lets ``import dgl`` (DGL 2.1) work on a torch for which DGL ships no graphbolt library.

PyPI's DGL 2.1 carries ``libgraphbolt_pytorch_<version>.so`` only for torch 2.0.0 to 2.2.1, and
``dgl.distributed`` (imported by ``dgl.dataloading``) imports ``dgl.graphbolt``, whose loader
raises for any other torch. The rest of DGL does not need it: ``libdgl.so`` does not link
against torch. :func:`install` adds an import hook that, only when that library is missing for
the running torch, answers ``import dgl.graphbolt`` with a placeholder module. Its one attribute,
``FusedCSCSamplingGraph``, is what DGL's other modules use (in ``isinstance`` checks); any other
name raises an ``AttributeError`` that says why.

A top-level module, importing nothing heavy (no torch, no dgl), so that installing the hook at
interpreter start-up costs nothing; the hook does its check only when ``dgl.graphbolt`` is imported.
"""

import importlib.machinery
import os
import sys
import types

MODULE = "dgl.graphbolt"
#: Set on the placeholder module, so callers (``dgl-zerocopy info``) can tell it from the real one.
MARK = "__dgl_zerocopy_placeholder__"


def library_path() -> str | None:
    """Where DGL's graphbolt library for the running torch would be (None if DGL is not found)."""
    dgl = sys.modules.get("dgl")
    folders = list(getattr(dgl, "__path__", []) or [])
    if not folders:
        spec = importlib.machinery.PathFinder.find_spec("dgl")
        folders = list(spec.submodule_search_locations or []) if spec else []
    if not folders:
        return None
    return os.path.join(folders[0], "graphbolt", f"libgraphbolt_pytorch_{_torch_version()}.so")


def _torch_version() -> str:
    torch = sys.modules.get("torch")  # DGL imports torch before graphbolt; metadata otherwise
    if torch is not None:
        version = torch.__version__
    else:
        import importlib.metadata  # not at module level: this module is imported at interpreter start-up

        version = importlib.metadata.version("torch")
    return str(version).split("+", maxsplit=1)[0]


def needs_placeholder() -> bool:
    """True when DGL's graphbolt library for the running torch is missing."""
    path = library_path()
    return path is not None and not os.path.exists(path)


class FusedCSCSamplingGraph:
    """Stands in for graphbolt's graph class: no object is ever one, so ``isinstance`` is False."""


class _Placeholder(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"dgl.graphbolt.{name} is not available: DGL 2.1 ships graphbolt only for torch 2.0.0-2.2.1, and "
            f"this is torch {_torch_version()}; dgl-zerocopy put a placeholder there so that the rest of DGL "
            f"works (graphs, sampling, DataLoader, dgl.nn, dgl.distributed without use_graphbolt)"
        )


class _Loader:  # importlib's loader protocol (importlib.abc is not imported: start-up cost)
    def create_module(self, spec):
        module = _Placeholder(spec.name)
        module.FusedCSCSamplingGraph = FusedCSCSamplingGraph
        setattr(module, MARK, True)
        return module

    def exec_module(self, module) -> None:
        pass


class _Finder:  # importlib's meta path finder protocol
    def find_spec(self, fullname, path=None, target=None):
        if fullname != MODULE or not needs_placeholder():
            return None  # the real dgl.graphbolt loads as usual
        return importlib.machinery.ModuleSpec(fullname, _Loader(), origin="dgl-zerocopy placeholder")


def install() -> None:
    """Put the hook first on ``sys.meta_path`` (idempotent). Effective for a later ``import dgl``."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def active() -> bool:
    """Whether the imported ``dgl.graphbolt`` is the placeholder."""
    return bool(getattr(sys.modules.get(MODULE), MARK, False))
