"""GraphSAGE and GCN layers in plain torch over :class:`~dgl_zerocopy.blocks.DeviceBlock`.

They compute what ``dgl.nn.SAGEConv`` (mean aggregator) and ``dgl.nn.GraphConv`` compute, on any
torch device, without DGL: PyPI's DGL is a CPU build, so its own layers cannot run on CUDA blocks.

- Parameter names and shapes equal DGL 2.1's, so state dicts are interchangeable both ways
  (``ours.load_state_dict(theirs.state_dict())``); :func:`load_dgl_weights` does that and checks
  that the two layers are configured alike.
- ``forward(block, x)``: ``block`` is a :class:`DeviceBlock` on ``x``'s device, or a DGL block
  (converted on each call with :meth:`DeviceBlock.from_dgl`; hand DeviceBlocks in to convert once).
  ``x`` is ``(num_src_nodes, in_feats)``; the destination nodes are its first ``num_dst_nodes``
  rows (DGL's block convention). The result is ``(num_dst_nodes, out_feats)`` in ``x``'s dtype.
- Aggregation is a sparse CSR x dense product (one SpMM, cuSPARSE on CUDA, MKL on the CPU; the
  backward pass multiplies by the block's cached CSR transpose) for float32/float64, and a gather +
  ``index_add_`` for other dtypes (float16/bfloat16, which the CPU SpMM lacks). It runs outside
  autocast, in the rows' own dtype. A destination without in-edges aggregates to zero.
"""
from __future__ import annotations

import contextlib
import operator
from typing import Any, Union

import torch
from torch import nn

from .blocks import DeviceBlock

SAGE_AGGREGATORS = ("mean",)
GCN_NORMS = ("both", "right", "left", "none")

BlockLike = Union[DeviceBlock, Any]  # Any: a DGL block, typed loosely so this module never imports DGL


class SAGEConv(nn.Module):
    """GraphSAGE layer (Hamilton et al. 2017) with mean aggregation:
    ``fc_self(x_dst) + fc_neigh(mean of in-neighbours' x)``, the bias living in ``fc_self``.

    Parameters as DGL's: ``fc_self`` (Linear in->out, with ``bias``) and ``fc_neigh`` (Linear
    in->out, no bias). A destination with no in-edges gets a zero neighbour term.
    """

    def __init__(self, in_feats: int, out_feats: int, aggregator_type: str = "mean", bias: bool = True) -> None:
        super().__init__()
        if aggregator_type not in SAGE_AGGREGATORS:
            raise ValueError(
                f"aggregator_type {aggregator_type!r} is not supported; choose from: {', '.join(SAGE_AGGREGATORS)}"
            )
        self.in_feats, self.out_feats = _positive("in_feats", in_feats), _positive("out_feats", out_feats)
        self.aggregator_type = aggregator_type
        self.fc_neigh = nn.Linear(self.in_feats, self.out_feats, bias=False)
        self.fc_self = nn.Linear(self.in_feats, self.out_feats, bias=bias)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot-uniform weights with the ReLU gain, as DGL initialises them (the bias keeps
        ``nn.Linear``'s default)."""
        gain = nn.init.calculate_gain("relu")
        nn.init.xavier_uniform_(self.fc_self.weight, gain=gain)
        nn.init.xavier_uniform_(self.fc_neigh.weight, gain=gain)
        if self.fc_self.bias is not None:
            bound = 1.0 / self.in_feats**0.5
            nn.init.uniform_(self.fc_self.bias, -bound, bound)

    def forward(self, block: BlockLike, x: torch.Tensor) -> torch.Tensor:
        """Destination features ``(num_dst_nodes, out_feats)`` from source features ``x``."""
        block = _device_block(block, x, self.in_feats)
        if _project_first(block, self.in_feats, self.out_feats):  # equal in exact arithmetic
            neigh = _neighbour_mean(block, self.fc_neigh(x))
        else:
            neigh = self.fc_neigh(_neighbour_mean(block, x))
        return self.fc_self(x[: block.num_dst_nodes()]) + neigh

    def extra_repr(self) -> str:
        return f"{self.in_feats}, {self.out_feats}, aggregator_type={self.aggregator_type!r}, bias={self.fc_self.bias is not None}"


class GraphConv(nn.Module):
    """Graph convolution (Kipf & Welling 2017) on a block:
    ``D_dst^-a · A · D_src^-b · x · weight + bias``, with the degrees taken within the block and
    clamped to at least 1; ``norm`` picks the exponents: ``"both"`` (a = b = 1/2), ``"right"``
    (a = 1, b = 0: the mean), ``"left"`` (a = 0, b = 1) or ``"none"`` (the sum).

    Parameters as DGL's: ``weight`` ``(in_feats, out_feats)`` (absent with ``weight=False``, which
    needs ``in_feats == out_feats``) and ``bias`` ``(out_feats,)``. A destination with no in-edges
    gets the bias alone; ``allow_zero_in_degree=False`` makes that a ValueError instead (the check
    reads the degrees back to the host, a sync on CUDA).
    """

    def __init__(
        self,
        in_feats: int,
        out_feats: int,
        norm: str = "both",
        weight: bool = True,
        bias: bool = True,
        allow_zero_in_degree: bool = True,
    ) -> None:
        super().__init__()
        if norm not in GCN_NORMS:
            raise ValueError(f"norm {norm!r} is not supported; choose from: {', '.join(GCN_NORMS)}")
        self.in_feats, self.out_feats = _positive("in_feats", in_feats), _positive("out_feats", out_feats)
        if not weight and self.in_feats != self.out_feats:
            raise ValueError(
                f"weight=False keeps the width, but in_feats={in_feats} differs from out_feats={out_feats}; "
                "make them equal or keep the weight"
            )
        self.norm = norm
        self.allow_zero_in_degree = allow_zero_in_degree
        self.weight = nn.Parameter(torch.empty(self.in_feats, self.out_feats)) if weight else None
        self.bias = nn.Parameter(torch.empty(self.out_feats)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot-uniform weight and zero bias, as DGL initialises them."""
        if self.weight is not None:
            nn.init.xavier_uniform_(self.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, block: BlockLike, x: torch.Tensor) -> torch.Tensor:
        """Destination features ``(num_dst_nodes, out_feats)`` from source features ``x``."""
        block = _device_block(block, x, self.in_feats)
        if not self.allow_zero_in_degree and bool((block.in_degrees() == 0).any()):
            raise ValueError(
                "the block has destination nodes with no in-edges, whose output would be the bias alone; "
                "add self-loops to the graph before sampling, or pass allow_zero_in_degree=True"
            )
        h = x
        if self.norm in ("both", "left"):
            h = h * _degree_scale(block.out_degrees(), self.norm == "both", h.dtype).unsqueeze(1)
        if self.weight is not None and _project_first(block, self.in_feats, self.out_feats):
            h = _neighbour_sum(block, h @ self.weight)
        else:
            h = _neighbour_sum(block, h)
            if self.weight is not None:
                h = h @ self.weight
        if self.norm in ("both", "right"):
            h = h * _degree_scale(block.in_degrees(), self.norm == "both", h.dtype).unsqueeze(1)
        if self.bias is not None:
            h = h + self.bias
        return h

    def extra_repr(self) -> str:
        return (
            f"{self.in_feats}, {self.out_feats}, norm={self.norm!r}, weight={self.weight is not None}, "
            f"bias={self.bias is not None}, allow_zero_in_degree={self.allow_zero_in_degree}"
        )


def load_dgl_weights(ours: nn.Module, theirs: nn.Module) -> None:
    """Copy the parameters of ``theirs`` into ``ours`` in place.

    Works for one layer (``dgl.nn.SAGEConv`` -> :class:`SAGEConv`, ``dgl.nn.GraphConv`` ->
    :class:`GraphConv`) or for whole models built alike (same module names), the parameter names
    being the same. Raises ValueError when the layers are configured differently (aggregator, norm)
    or when names or shapes do not match."""
    pairs = dict(theirs.named_modules())
    for name, layer in ours.named_modules():
        other = pairs.get(name)
        if other is None:
            continue
        if isinstance(layer, SAGEConv) and getattr(other, "_aggre_type", layer.aggregator_type) != layer.aggregator_type:
            raise ValueError(
                f"{name or 'the layer'}: aggregator {other._aggre_type!r} differs from ours {layer.aggregator_type!r}; "
                f"build ours with aggregator_type={other._aggre_type!r}"
            )
        if isinstance(layer, GraphConv) and getattr(other, "_norm", layer.norm) != layer.norm:
            raise ValueError(
                f"{name or 'the layer'}: norm {other._norm!r} differs from ours {layer.norm!r}; build ours with norm={other._norm!r}"
            )
    # strict=True, so that a missing weight or bias is an error, not a silent half copy.
    state = theirs.state_dict()
    try:
        ours.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise ValueError(f"the parameters do not match (build both layers with the same sizes and options): {err}") from err


# -- aggregation ----------------------------------------------------------------------------------


def _device_block(block: BlockLike, x: torch.Tensor, in_feats: int) -> DeviceBlock:
    """``block`` as a DeviceBlock on ``x``'s device, after checking ``x`` against it (shapes
    only: no device sync). A DeviceBlock elsewhere is an error rather than a hidden copy."""
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise TypeError(f"x must be a 2-D tensor (num_src_nodes, in_feats), but got {_describe(x)}")
    if isinstance(block, DeviceBlock):
        if block.device != x.device:
            raise ValueError(f"the block is on {block.device} but x on {x.device}; move one with block.to(x.device)")
    else:
        block = DeviceBlock.from_dgl(block, x.device)
    if x.shape[0] != block.num_src_nodes():
        raise ValueError(
            f"x has {x.shape[0]} rows but the block {block.num_src_nodes()} source nodes; "
            "pass the features of the block's source nodes (blocks[i].srcdata['_ID'])"
        )
    if x.shape[1] != in_feats:
        raise ValueError(f"x has {x.shape[1]} features per row but the layer expects in_feats={in_feats}")
    return block


def _project_first(block: DeviceBlock, in_feats: int, out_feats: int) -> bool:
    """Whether multiplying by the weight before aggregating costs fewer operations than after.

    Before: every source row is projected (``src * in * out``) and the narrower rows summed
    (``edges * out``); after: the wide rows are summed (``edges * in``) and only the destinations
    projected (``dst * in * out``). A sampled block has many more sources than destinations, so
    "project first whenever in > out" (DGL's rule) can cost several times more: with 512 input
    features, hidden 256 and fanouts 15,10,5 (bench/scaling.py, 1M nodes) the training step's
    compute took 7.0 s under that rule and 2.1 s under this one."""
    src, dst, edges = block.num_src_nodes(), block.num_dst_nodes(), block.num_edges()
    return src * in_feats * out_feats + edges * out_feats < edges * in_feats + dst * in_feats * out_feats


def _neighbour_sum(block: DeviceBlock, h: torch.Tensor) -> torch.Tensor:
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


def _neighbour_mean(block: DeviceBlock, h: torch.Tensor) -> torch.Tensor:
    """``(num_dst, d)``: the mean of the in-neighbours' rows, zero for a destination with none."""
    return _neighbour_sum(block, h) / block.in_degrees().clamp(min=1).to(h.dtype).unsqueeze(1)


def _degree_scale(degrees: torch.Tensor, sqrt: bool, dtype: torch.dtype) -> torch.Tensor:
    d = degrees.clamp(min=1).to(dtype)
    return d.rsqrt() if sqrt else d.reciprocal()


def _no_autocast(device: torch.device) -> contextlib.AbstractContextManager:
    # Under autocast, mm would recast the sparse adjacency and the rows to half precision; the sum
    # stays in the rows' own dtype instead (the SpMM is memory-bound, precision is free here).
    if device.type in ("cuda", "cpu"):
        return torch.autocast(device.type, enabled=False)
    return contextlib.nullcontext()


def _positive(name: str, value: int) -> int:
    try:
        n = operator.index(value)  # ints, NumPy ints; not floats or bools-as-sizes by mistake
    except TypeError:
        n = None
    if n is None or isinstance(value, bool) or n < 1:
        raise ValueError(f"{name} must be a positive int, but got {value!r}")
    return n


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dim()}-D tensor of shape {tuple(value.shape)}"
    return type(value).__name__
