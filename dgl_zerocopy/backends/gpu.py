"""The upper bound: the whole table resident in device memory, gathered on the device."""
from __future__ import annotations

import torch

from ..transfer import to_device


class GpuBackend:
    def __init__(self, table: torch.Tensor, device: torch.device) -> None:
        self.table = table.to(device)

    def gather(self, ids: torch.Tensor, out: torch.Tensor | None, stream) -> torch.Tensor:
        with torch.cuda.stream(stream):
            ids = to_device(ids, self.table.device)
            return torch.index_select(self.table, 0, ids, out=out) if out is not None else self.table.index_select(0, ids)

    def close(self) -> None:
        # Gathers in flight still read the table: free it only after the device has run them.
        if self.table is not None:
            torch.cuda.synchronize(self.table.device)
        self.table = None
