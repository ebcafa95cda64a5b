"""What every gather backend shares: the options of the zero-copy kernel and the backend protocol.

Its own module so that a backend imports it without importing the package that picks backends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

VARIANTS = ("aligned", "naive")


@dataclass(frozen=True)
class GatherOptions:
    """Options of the zero-copy gather kernel (see ``FeatureStore``); checked on construction."""

    variant: str = "aligned"
    sort_ids: bool | str = "auto"
    max_blocks: int | None = None

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, but got {self.variant!r}")
        if not (isinstance(self.sort_ids, bool) or self.sort_ids == "auto"):
            raise TypeError(f"sort_ids must be True, False or 'auto' (the fitted link model decides per batch), but got {self.sort_ids!r}")
        if self.max_blocks is not None and (isinstance(self.max_blocks, bool) or not isinstance(self.max_blocks, int) or self.max_blocks < 1):
            raise ValueError(f"max_blocks must be a positive integer or None (no cap), but got {self.max_blocks!r}")


class Backend(Protocol):
    """What FeatureStore needs of a backend. Input is already validated by the store.

    ``gather`` runs on ``stream`` (CUDA; the store has made it current and ordered it after the
    ids) and allocates there; ``close`` waits for the gathers in flight before releasing memory."""

    def gather(self, ids: torch.Tensor, out: torch.Tensor | None, stream) -> torch.Tensor: ...

    def close(self) -> None: ...
