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
    """Options of the zero-copy gather kernel (``FeatureStore(kernel=...)``); the other backends ignore them.

    Args:
        variant: ``"aligned"`` (default: vector loads sized to the rows' alignment; the only kernel that
            decodes compressed rows and reads a device cache) or ``"naive"`` (the baseline: one thread per element).
        sort_ids: gather in sorted id order (better locality on the host side) and write each row back
            to its position: True, False, or ``"auto"`` (default: the fitted link model decides per batch).
        max_blocks: a cap on the kernel's grid, to leave SMs to concurrent training (default None: no cap).

    Raises:
        ValueError: an unknown variant, or ``max_blocks`` that is not a positive int.
        TypeError: ``sort_ids`` other than True, False or ``"auto"``.
    """

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

    ``gather``'s ids are already checked (:func:`dgl_zerocopy.store.id_check.check_ids`, once per
    gather): a contiguous 1-D int64/int32 tensor on the CPU or the backend's device, within
    ``[0, num_rows)`` (unless the store's caller passed ``unchecked=True``, vouching for the range);
    a backend checks them no further. ``out`` (if given) has the result's shape, dtype and device.
    ``gather`` runs on ``stream`` (CUDA; the store has made it current and ordered it after the
    ids) and allocates there; ``close`` waits for the gathers in flight before releasing memory."""

    def gather(self, ids: torch.Tensor, out: torch.Tensor | None, stream) -> torch.Tensor: ...

    def close(self) -> None: ...
