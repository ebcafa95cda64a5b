"""The torch decode of gathered codes, used by the ``cpu`` and ``gpu`` backends.

Bit for bit what :meth:`Codec.decode` computes, without its temporaries: the codes are converted
into the output (or a reused float32 work buffer) and scaled and shifted there in place, as
separate multiply and add passes (a fused multiply-add would round once instead of twice and
differ from the reference in the last bit). The same calls run on CPU and CUDA tensors.

How the cpu backend feeds it (whole batch, or tile by tile for int8) is in ``backends/cpu.py``,
with the measurements behind it.
"""

from __future__ import annotations

import torch

from ..transfer import to_device
from .codec import Codec


class Decoder:
    """Decodes gathered codes of one codec to ``out_dtype``. ``scale``/``offset`` live on
    ``device`` (moved once here). On the CPU the float32 work buffer (int8 to a 16-bit output) is
    reused; on CUDA it is allocated on the current stream each call, so that gathers on several
    streams never share it."""

    def __init__(self, codec: Codec, out_dtype: torch.dtype, device: torch.device) -> None:
        self.name = codec.name
        self.axis = codec.axis
        self.out_dtype = out_dtype
        self.scale = codec.scale.to(device) if codec.scale is not None else None
        self.offset = codec.offset.to(device) if codec.offset is not None else None
        self._work = torch.empty(0, dtype=torch.float32, device=device)
        if device.type == "cuda":  # filled on the current stream; decodes run on others: wait once, here
            torch.cuda.current_stream(device).synchronize()

    @property
    def passthrough(self) -> bool:
        """True when the codes are already the output (fp16 codes to fp16, bf16 to bf16): gather straight into it."""
        return self.name != "int8" and self.out_dtype == {"fp16": torch.float16, "bf16": torch.bfloat16}[self.name]

    def __call__(
        self, codes: torch.Tensor, ids: torch.Tensor | None, out: torch.Tensor, row_params: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> torch.Tensor:
        """Decode ``codes`` (rows ``ids`` of the table) into ``out``; returns ``out``.
        Per-row int8 takes the rows' ``scale``/``offset`` from ``row_params`` if given (already
        gathered, on the codes' device), else gathers them with ``ids``."""
        if self.name != "int8":
            return out.copy_(codes)  # fp16/bf16 -> float32 is exact; to another 16-bit type, one rounding from float32
        target = out if out.dtype == torch.float32 else self._work_buffer(codes.shape)
        target.copy_(codes)
        if self.axis == "column":
            target.mul_(self.scale)
            target.add_(self.offset)
        else:
            if row_params is None:
                rows = to_device(ids, self.scale.device).to(torch.int64)  # host ids: pinned, no host wait
                row_params = (self.scale.index_select(0, rows), self.offset.index_select(0, rows))
            target.mul_(row_params[0].unsqueeze(1))
            target.add_(row_params[1].unsqueeze(1))
        if target is not out:
            out.copy_(target)
        return out

    def _work_buffer(self, shape) -> torch.Tensor:
        if self._work.device.type != "cpu":
            return torch.empty(shape, dtype=torch.float32, device=self._work.device)
        n = shape[0] * shape[1]
        if self._work.numel() < n:
            self._work = torch.empty(n, dtype=torch.float32, device=self._work.device)
        return self._work[:n].view(shape)
