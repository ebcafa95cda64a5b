"""dgl-zerocopy: GNN minibatch training with node features gathered straight from pinned host memory.

The names users import are in ``__all__`` (and docs/api.md, which lists every public module);
nothing else is bound here but the package's own submodules and underscored helpers.
"""


def _before_dgl() -> None:
    """Settle what ``import dgl`` does before any module of the package imports it."""
    import os
    import sys
    import types

    import _dgl_zerocopy_graphbolt

    # DGL asks for a backend on first import and prints a notice; this package is PyTorch only.
    os.environ.setdefault("DGLBACKEND", "pytorch")
    # ogb (which `import dgl` imports) checks PyPI for a newer release: importing `outdated` starts
    # non-daemon threads that call pypi.python.org with no time limit (OUTDATED_IGNORE does not stop
    # them). Every process, each DDP rank included, then reaches for the network and waits for it
    # at exit (2 s without internet; a stalled connection holds the exit indefinitely). Without
    # `outdated.check_outdated`, ogb skips its check: an empty module stands in, unless the real one
    # is already imported.
    os.environ.setdefault("OUTDATED_IGNORE", "1")
    if "outdated" not in sys.modules:
        sys.modules["outdated"] = types.ModuleType("outdated")
    # DGL 2.1 has a graphbolt library only for torch 2.0-2.2.1; on a newer torch `import dgl` needs a placeholder.
    _dgl_zerocopy_graphbolt.install()


_before_dgl()

# Old import paths of modules that moved (`dgl_zerocopy.dgl` is now `dgl_zerocopy.loading.dgl`, ...)
# keep working for one release, with a DeprecationWarning naming the new one.
from . import _moved  # noqa: E402

_moved.install()

from .loading.loader import DataLoader  # noqa: E402
from .store.compression import compress  # noqa: E402
from .store.feature_store import FeatureStore  # noqa: E402

__version__ = "0.1.0"
__all__ = ["DataLoader", "FeatureStore", "compress", "__version__"]
