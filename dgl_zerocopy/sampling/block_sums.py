"""Sums and means of a :class:`~dgl_zerocopy.sampling.blocks.DeviceBlock`'s source rows over its in-edges: the aggregation
the layers of :mod:`dgl_zerocopy.nn` run.

Float32/float64 rows: one sparse CSR x dense product (cuSPARSE on CUDA, MKL on the CPU) whose backward multiplies by the block's
cached CSR transpose; other dtypes (float16/bfloat16, which the CPU SpMM lacks): a gather and ``index_add_``. Outside autocast,
in the rows' own dtype. A destination without in-edges sums to zero.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from .blocks import DeviceBlock

__all__ = ["degree_scale", "neighbour_mean", "neighbour_sum"]


def neighbour_sum(block: DeviceBlock, h: torch.Tensor) -> torch.Tensor:
    """``(num_dst, d)``: for each destination, the sum of ``h``'s rows of its in-neighbours."""
    if h.dtype in (torch.float32, torch.float64):
        with _no_autocast(h.device):
            return _CSRMatmul.apply(block, h)
    out = h.new_zeros((block.num_dst_nodes(), h.shape[1]))
    return out.index_add_(0, block.edge_dst(), h.index_select(0, block.indices))


class _CSRMatmul(torch.autograd.Function):
    """``adj @ h`` whose backward multiplies by a prebuilt CSR transpose, cached on the block.
    torch's own backward for a CSR operand transposes the matrix again on every call (measured
    several times slower on small blocks on the CPU); here each direction is one plain CSR SpMM."""

    @staticmethod
    def forward(ctx: Any, block: DeviceBlock, h: torch.Tensor) -> torch.Tensor:
        # The block, not a tensor: the graph is a constant, and the transpose is built only
        # when a backward pass asks for it (never in inference).
        ctx.block = block
        return block.adjacency(h.dtype) @ h

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, torch.Tensor]:
        with _no_autocast(grad.device):
            return None, ctx.block.adjacency(grad.dtype, transpose=True) @ grad.contiguous()


def neighbour_mean(block: DeviceBlock, h: torch.Tensor) -> torch.Tensor:
    """``(num_dst, d)``: the mean of the in-neighbours' rows, zero for a destination with none."""
    return neighbour_sum(block, h) / block.in_degrees().clamp(min=1).to(h.dtype).unsqueeze(1)


def degree_scale(degrees: torch.Tensor, sqrt: bool, dtype: torch.dtype) -> torch.Tensor:
    """``1 / sqrt(d)`` (``sqrt``) or ``1 / d`` of each degree, in ``dtype``, a degree of 0 counted as 1."""
    d = degrees.clamp(min=1).to(dtype)
    return d.rsqrt() if sqrt else d.reciprocal()


def _no_autocast(device: torch.device) -> contextlib.AbstractContextManager:
    # Under autocast, mm would recast the sparse adjacency and the rows to half precision; the sum
    # stays in the rows' own dtype instead (the SpMM is memory-bound, precision is free here).
    if device.type in ("cuda", "cpu"):
        return torch.autocast(device.type, enabled=False)
    return contextlib.nullcontext()
