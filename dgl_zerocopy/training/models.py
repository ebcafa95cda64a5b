"""GraphSAGE (mean) and GCN for minibatch training on a list of blocks, one block per layer.

The layers are :mod:`dgl_zerocopy.nn`'s, so a model runs on DGL blocks (CPU DGL included) and on
:class:`~dgl_zerocopy.loading.blocks.DeviceBlock` lists on any device, and this module does not need DGL.
Parameter names equal those of the same models built from ``dgl.nn`` layers, so their checkpoints load.
:class:`RGCN` is the typed (heterograph) model: one layer per edge type in each
:class:`~dgl_zerocopy.nn.HeteroGraphConv`, over typed DGL blocks or
:class:`~dgl_zerocopy.loading.blocks.HeteroDeviceBlock` lists.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from ..nn import GraphConv, HeteroGraphConv, SAGEConv

__all__ = ["GraphSAGE", "GCN", "RGCN", "build_model", "MODELS"]

MODELS = ("sage", "gcn", "rgcn")  # rgcn: for heterographs (build_model needs etypes)
RELATION_LAYERS = ("sage", "gcn")  # RGCN's layer per edge type


class _BlockGNN(nn.Module):
    """Layers applied block by block: ``forward(blocks, x)`` with ``blocks`` a sequence of DGL blocks
    or DeviceBlocks (one per layer) and ``x`` the input nodes' features (``blocks[0]``'s sources)
    returns logits ``(blocks[-1].num_dst_nodes(), num_classes)`` on ``x``'s device. DGL blocks are
    converted to DeviceBlocks on ``x``'s device on each call; DeviceBlocks must already be there."""

    def __init__(self, layers: list[nn.Module], dropout: float) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.dropout = nn.Dropout(dropout)

    def forward(self, blocks: Sequence[Any], x: torch.Tensor) -> torch.Tensor:
        if len(blocks) != len(self.layers):
            raise ValueError(f"the model has {len(self.layers)} layers but got {len(blocks)} blocks; use one fanout per layer")
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h)
            if i < len(self.layers) - 1:
                h = self.dropout(F.relu(h))
        return h


class GraphSAGE(_BlockGNN):
    """GraphSAGE with mean aggregation (Hamilton et al. 2017)."""

    def __init__(self, in_feats: int, hidden: int, num_classes: int, num_layers: int = 3, dropout: float = 0.5) -> None:
        dims = _dims(in_feats, hidden, num_classes, num_layers)
        super().__init__([SAGEConv(a, b, "mean") for a, b in zip(dims[:-1], dims[1:])], dropout)


class GCN(_BlockGNN):
    """Graph convolution (Kipf & Welling 2017) on sampled blocks.

    ``norm="right"`` (the default) averages over each destination's in-edges, which a block carries
    in full: a node's output does not depend on which other seeds share its batch. Kipf's
    symmetric ``"both"`` divides by the *block's* source out-degrees, which do depend on the batch:
    trained with batches of 200 seeds and evaluated with one batch of all test nodes, GCN with
    ``"both"`` fell from 85 % to 56 % test accuracy on Amazon Photo (see docs/benchmarks.md).
    """

    def __init__(self, in_feats: int, hidden: int, num_classes: int, num_layers: int = 2, dropout: float = 0.5, norm: str = "right") -> None:
        dims = _dims(in_feats, hidden, num_classes, num_layers)
        super().__init__([GraphConv(a, b, norm=norm, allow_zero_in_degree=True) for a, b in zip(dims[:-1], dims[1:])], dropout)


class RGCN(nn.Module):
    """Relational GNN (Schlichtkrull et al. 2018, with GraphSAGE or GCN relations): per layer, one
    ``SAGEConv`` (``conv="sage"``, mean) or ``GraphConv`` (``conv="gcn"``, ``norm="right"``) per
    edge type, summed per destination type (:class:`~dgl_zerocopy.nn.HeteroGraphConv`).

    ``etypes``: the edge types' names (or canonical edge types, where names repeat), every one
    the model will meet. Every node type's features have ``in_feats`` columns. ``forward(blocks,
    x)``: ``blocks`` one typed block per layer, ``x`` ``{ntype: features of blocks[0]'s sources}``;
    returns ``{ntype: logits (num_dst_nodes(ntype), num_classes)}`` for the destination types the
    last block reaches (take the target type's entry)."""

    def __init__(
        self,
        in_feats: int,
        hidden: int,
        num_classes: int,
        etypes: Sequence[str | tuple[str, str, str]],
        num_layers: int = 2,
        dropout: float = 0.5,
        conv: str = "sage",
    ) -> None:
        super().__init__()
        if conv not in RELATION_LAYERS:
            raise ValueError(f"unknown relation layer {conv!r}; choose from: {', '.join(RELATION_LAYERS)}")
        if not etypes:
            raise ValueError("etypes must name at least one edge type (graph.etypes, or graph.canonical_etypes where names repeat)")
        dims = _dims(in_feats, hidden, num_classes, num_layers)

        def layer(a: int, b: int) -> nn.Module:
            return SAGEConv(a, b, "mean") if conv == "sage" else GraphConv(a, b, norm="right", allow_zero_in_degree=True)

        self.layers = nn.ModuleList(HeteroGraphConv({etype: layer(a, b) for etype in etypes}, aggregate="sum") for a, b in zip(dims[:-1], dims[1:]))
        self.dropout = nn.Dropout(dropout)

    def forward(self, blocks: Sequence[Any], x: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if len(blocks) != len(self.layers):
            raise ValueError(f"the model has {len(self.layers)} layers but got {len(blocks)} blocks; use one fanout per layer")
        h = dict(x)
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h)
            if i < len(self.layers) - 1:
                h = {ntype: self.dropout(F.relu(v)) for ntype, v in h.items()}
        return h


def build_model(
    name: str, in_feats: int, hidden: int, num_classes: int, num_layers: int, dropout: float, *, etypes: Sequence[str | tuple[str, str, str]] | None = None
) -> nn.Module:
    """The model called ``name`` (one of :data:`MODELS`). ``rgcn`` (:class:`RGCN`, one SAGEConv per
    edge type) needs ``etypes``, the heterograph's edge types; the others take no ``etypes``."""
    if name == "rgcn":
        if not etypes:
            raise ValueError("model 'rgcn' needs etypes, the heterograph's edge types (graph.etypes, or graph.canonical_etypes where names repeat)")
        return RGCN(in_feats, hidden, num_classes, etypes, num_layers, dropout)
    if etypes is not None and name in MODELS:
        raise ValueError(f"model {name!r} trains on homogeneous graphs and takes no etypes, but got {list(etypes)}; use 'rgcn' for a heterograph")
    if name == "sage":
        return GraphSAGE(in_feats, hidden, num_classes, num_layers, dropout)
    if name == "gcn":
        return GCN(in_feats, hidden, num_classes, num_layers, dropout)
    raise ValueError(f"unknown model {name!r}; choose from: {', '.join(MODELS)}")


def _dims(in_feats: int, hidden: int, num_classes: int, num_layers: int) -> list[int]:
    if num_layers < 1:
        raise ValueError(f"num_layers must be at least 1, but got {num_layers}")
    return [in_feats] + [hidden] * (num_layers - 1) + [num_classes]
