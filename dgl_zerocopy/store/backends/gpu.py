"""The upper bound: the whole table resident in device memory, gathered on the device.

A compressed table stays compressed in device memory (2-4x less of it); the gathered codes are
decoded on the device (:class:`~dgl_zerocopy.store.compression.decode.Decoder`)."""

from __future__ import annotations

import torch

from ..compression.codec import Codec
from ..compression.decode import Decoder
from ..transfer import to_device


class GpuBackend:
    def __init__(self, table: torch.Tensor, device: torch.device, codec: Codec | None = None, out_dtype: torch.dtype | None = None) -> None:
        self.table = table.to(device)
        self.out_dtype = out_dtype if out_dtype is not None else table.dtype
        self._decoder = Decoder(codec, self.out_dtype, device) if codec is not None else None

    def gather(self, ids: torch.Tensor, out: torch.Tensor | None, stream) -> torch.Tensor:
        """``table[ids]`` on the device, on ``stream``. ids are already checked: int64/int32 on the
        CPU or the device, within ``[0, num_rows)`` (device ids clamped there)."""
        with torch.cuda.stream(stream):
            ids = to_device(ids, self.table.device)
            if self._decoder is None or self._decoder.passthrough:
                return torch.index_select(self.table, 0, ids, out=out) if out is not None else self.table.index_select(0, ids)
            codes = self.table.index_select(0, ids)
            if out is None:
                out = torch.empty(codes.shape, dtype=self.out_dtype, device=self.table.device)
            return self._decoder(codes, ids, out)

    def close(self) -> None:
        # Gathers in flight still read the table: free it only after the device has run them.
        if self.table is not None:
            torch.cuda.synchronize(self.table.device)
        self.table = None
        self._decoder = None
