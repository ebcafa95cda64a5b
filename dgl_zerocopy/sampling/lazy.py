"""A block's data dict whose entries may be computed on first read: the sampler's edge ids.

A block's ``edata[dgl.EID]`` maps each sampled CSC position to the graph's edge id, which on a pinned
graph reads the edge-id array over PCIe: it is worth doing only when something reads it. So the
entry is a pending computation until then: ``EID in block.edata`` is True and ``block.edata[EID]``
computes it once (later reads get the same tensor). Iterating the dict (``items()``, ``values()``,
``len()``), as ``DeviceBlock.to`` and ``record_stream`` do, sees only the entries computed so far.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


class LazyData(dict):
    """A ``dict`` of tensors plus pending ones: ``pending`` maps a name to a function returning its tensor."""

    def __init__(self, data: dict[str, torch.Tensor] | None = None, pending: dict[str, Callable[[], torch.Tensor]] | None = None) -> None:
        super().__init__(data or {})
        self._pending = dict(pending or {})

    def __missing__(self, name: str) -> torch.Tensor:
        if name not in self._pending:
            raise KeyError(name)
        value = self._pending.pop(name)()
        super().__setitem__(name, value)
        return value

    def __contains__(self, name: object) -> bool:
        return super().__contains__(name) or name in self._pending

    def get(self, name: str, default: Any = None) -> Any:
        return self[name] if name in self else default

    def __setitem__(self, name: str, value: torch.Tensor) -> None:
        self._pending.pop(name, None)  # a value set by the caller replaces a pending one
        super().__setitem__(name, value)

    def __delitem__(self, name: str) -> None:
        if self._pending.pop(name, None) is None:
            super().__delitem__(name)
        elif super().__contains__(name):
            super().__delitem__(name)

    def pending(self) -> list[str]:
        """The names not computed yet."""
        return list(self._pending)

    def __repr__(self) -> str:
        return f"LazyData({dict(self)!r}, pending={self.pending()})"
