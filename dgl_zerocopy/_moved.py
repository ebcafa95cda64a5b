"""Old import paths of public modules that moved (in the layout of 0.1 the package's folders became
its layers; later moves gave modules names that say what they hold), kept for one release:
``import dgl_zerocopy.dgl`` still works, warns with a ``DeprecationWarning`` naming the new path,
and gives the module at the new path itself (the same objects, not copies). The old paths are the
ones the README and docs showed before the move.

No file sits at an old path: an import hook answers these names only, so nothing named ``dgl.py``
in the package can shadow the real ``dgl`` (a script run from inside the package folder would
otherwise import it for ``import dgl``). A submodule of a moved package (``dgl_zerocopy.cache.policy``)
is the new package's submodule (``dgl_zerocopy.store.cache.policy``), never a second copy.

This module imports only the standard library; ``dgl_zerocopy/__init__.py`` calls :func:`install`.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from importlib.machinery import ModuleSpec
from types import ModuleType

#: Old path -> new path, for every public module that moved (see CHANGELOG.md and docs/api.md).
MOVED = {
    "dgl_zerocopy.dgl": "dgl_zerocopy.loading.dgl",
    "dgl_zerocopy.blocks": "dgl_zerocopy.sampling.blocks",
    "dgl_zerocopy.models": "dgl_zerocopy.training.models",
    "dgl_zerocopy.ddp": "dgl_zerocopy.training.ddp",
    "dgl_zerocopy.config": "dgl_zerocopy.training.config",
    "dgl_zerocopy.cache": "dgl_zerocopy.store.cache",
    "dgl_zerocopy.compression": "dgl_zerocopy.store.compression",
    # Split into cuda/nvrtc.py and cuda/gather/launcher.py; dgl_zerocopy.kernels re-exports both, every old name.
    "dgl_zerocopy.cuda_gather": "dgl_zerocopy.kernels",
    # The gather's launch plan, named apart from its launcher (cuda/gather/launcher.py).
    "dgl_zerocopy.cuda.gather.launch": "dgl_zerocopy.cuda.gather.gather_plan",
}


def new_path(name: str) -> str | None:
    """Where the module ``name`` lives now, if ``name`` is an old path or a submodule of one."""
    for old, new in MOVED.items():
        if name == old or name.startswith(old + "."):
            return new + name[len(old) :]
    return None


class _MovedFinder:
    """A meta path finder and loader (importlib's protocols) for the old paths only."""

    def find_spec(self, name: str, path=None, target=None) -> ModuleSpec | None:
        if not name.startswith("dgl_zerocopy.") or new_path(name) is None:
            return None
        return ModuleSpec(name, self)

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        new = new_path(spec.name)
        module = importlib.import_module(new)
        # The import system sets __spec__ on the module it is given: keep the module's own, restored
        # by exec_module, so that the module still names its real place.
        spec.loader_state = module.__spec__
        if spec.name in MOVED:  # a submodule of a moved package: its package's import warned already
            warnings.warn(
                f"{spec.name} moved to {new}: import {new} instead (the old path is deprecated and goes in the next release)",
                DeprecationWarning,
                stacklevel=2,  # the import statement's line: warnings skips importlib's own frames
            )
        return module

    def exec_module(self, module: ModuleType) -> None:
        # Nothing to run: the module ran at its new path. Give it back its own __spec__.
        module.__spec__ = module.__spec__.loader_state


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once), ahead of the finder that would find a moved
    package's submodule files a second time."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())
