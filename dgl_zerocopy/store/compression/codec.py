"""The compressed forms of a host feature table, and their reference decode.

A compressed table is a 2-D tensor of *codes* (``stored_dtype``) plus, for ``int8``, an affine
map per column or per row::

    fp16, bf16:  x = float(code)
    int8:        x = float(code) * scale[k] + offset[k],   k = column ("column") or row ("row")

``scale`` and ``offset`` are float32, shape ``(num_columns,)`` or ``(num_rows,)``. Every gather
path (the CPU backend, the CUDA kernels, the emulator) must equal :meth:`Codec.decode` on the
gathered codes; that function is the reference the tests compare with.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: The codec names accepted by ``FeatureStore(compression=...)`` (``None`` for an uncompressed table).
CODECS = ("fp16", "bf16", "int8")
STORED_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "int8": torch.int8}
AXES = ("column", "row")


def check_codec_name(name) -> str | None:
    """``name`` if it is a codec name or None; else ``ValueError`` listing the valid ones."""
    if name is None or name == "none":
        return None
    if name not in CODECS:
        raise ValueError(f"unknown compression {name!r}; use one of: none, {', '.join(CODECS)}")
    return name


@dataclass(frozen=True, eq=False)
class Codec:
    """How the stored codes decode to features (module docstring). ``scale``/``offset``: CPU
    float32 tensors for ``int8`` (``axis`` ``"column"`` or ``"row"``), None otherwise."""

    name: str
    scale: torch.Tensor | None = None
    offset: torch.Tensor | None = None
    axis: str | None = None

    def __post_init__(self) -> None:
        check_codec_name(self.name)
        if self.name == "int8":
            if self.axis not in AXES:
                raise ValueError(f"an int8 codec needs axis 'column' or 'row', but got {self.axis!r}")
            for label, t in (("scale", self.scale), ("offset", self.offset)):
                if not isinstance(t, torch.Tensor) or t.dtype != torch.float32 or t.dim() != 1:
                    raise TypeError(f"an int8 codec's {label} must be a 1-D float32 tensor, but got {t!r}")
            if self.scale.shape != self.offset.shape:
                raise ValueError(f"scale {tuple(self.scale.shape)} and offset {tuple(self.offset.shape)} differ in shape")
        elif self.scale is not None or self.offset is not None or self.axis is not None:
            raise ValueError(f"codec {self.name!r} takes no scale, offset or axis")

    @property
    def stored_dtype(self) -> torch.dtype:
        return STORED_DTYPES[self.name]

    def decode(self, codes: torch.Tensor, ids: torch.Tensor | None = None, out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Reference decode of gathered ``codes`` (rows ``ids`` of the table; needed for per-row
        int8) to ``out_dtype``. The affine map is computed in float32, then cast."""
        x = codes.to(torch.float32)
        if self.name == "int8":
            if self.axis == "column":
                x = x * self.scale + self.offset
            else:
                if ids is None:
                    raise ValueError("per-row int8 decode needs the ids of the rows")
                rows = ids.to(torch.int64).cpu()
                x = x * self.scale[rows, None] + self.offset[rows, None]
        return x.to(out_dtype)
