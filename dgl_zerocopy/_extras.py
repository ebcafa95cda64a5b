"""The frameworks the front ends need, each brought by an extra: DGL by ``[dgl]``, PyG by ``[pyg]``.

The core (store and tiers, kernels, samplers over a CSC, datasets, the CLI's parser) imports neither, so
``pip install dgl-zerocopy`` brings no DGL. What needs DGL gets it through :func:`import_dgl` (or turns the
``ModuleNotFoundError`` of its own ``import dgl`` with :func:`missing_dgl`): where DGL is not installed, the
user reads one line naming the extra that brings it, not a traceback from deep inside the package.

This module imports only the standard library; every layer may import it.
"""

from __future__ import annotations

from types import ModuleType


def install_hint(extra: str) -> str:
    """The command that installs the framework of ``extra`` (``"dgl"``, ``"pyg"``) with this package."""
    return f'pip install "dgl-zerocopy[{extra}]"'


class MissingExtraError(ModuleNotFoundError):
    """A framework that an extra brings is not installed; the message says which extra (one line).

    A ``ModuleNotFoundError`` (``name`` is the missing module), so that ``except ModuleNotFoundError`` and
    ``pytest.importorskip`` treat it as the missing module it is."""


def missing_dgl(error: ModuleNotFoundError, needed_by: str) -> ModuleNotFoundError:
    """What to raise for ``error``, caught around an import of DGL by ``needed_by``: where DGL itself is
    missing, a :class:`MissingExtraError` naming the ``[dgl]`` extra; else (DGL is there, something it
    imports is not) ``error`` itself, which says what is missing."""
    if error.name != "dgl":
        return error
    return MissingExtraError(f"{needed_by} needs DGL, which is not installed: {install_hint('dgl')}", name="dgl")


def import_dgl(needed_by: str) -> ModuleType:
    """``import dgl`` for ``needed_by`` (what the user called, in their words): the module, or
    :class:`MissingExtraError` where DGL is not installed."""
    try:
        import dgl
    except ModuleNotFoundError as error:
        raise missing_dgl(error, needed_by) from None
    return dgl
