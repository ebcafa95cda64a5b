"""GraphSAGE and GCN layers in plain torch over :class:`~dgl_zerocopy.loading.blocks.DeviceBlock`.

They compute what ``dgl.nn.SAGEConv`` (mean aggregator) and ``dgl.nn.GraphConv`` compute, on any
torch device, without DGL: PyPI's DGL is a CPU build, so its own layers cannot run on CUDA blocks.

- Drop-in: the constructors and ``forward`` take DGL 2.1's arguments (names, order, defaults), so ``import dgl.nn as dglnn``
  can become ``import dgl_zerocopy.nn as dglnn``. Each argument does what it does in DGL; what is not supported fails at once.
- Parameter names and shapes equal DGL 2.1's, so state dicts are interchangeable both ways (``ours.load_state_dict(theirs.state_dict())``),
  a ``norm`` or ``activation`` module's own parameters included; :func:`load_dgl_weights` also checks the layers are configured alike.
- Aggregation (:mod:`dgl_zerocopy.sampling.block_sums`): one SpMM per direction for float32/float64, a gather + ``index_add_``
  for other dtypes; outside autocast, in the rows' own dtype. A destination without in-edges aggregates to zero.
- Typed (heterograph) blocks: :class:`HeteroGraphConv` applies one layer per edge type and sums
  (or averages, ...) per destination type, as ``dgl.nn.HeteroGraphConv`` does, over a
  :class:`~dgl_zerocopy.loading.blocks.HeteroDeviceBlock` or a typed DGL block. What runs on what:
  on DGL blocks (the CPU) every ``dgl.nn`` module works, and this module's layers also work inside
  ``dgl.nn.HeteroGraphConv``; on device blocks only this module's ``SAGEConv``, ``GraphConv`` and
  ``HeteroGraphConv`` work (``dgl.nn.HeteroGraphConv`` too, with this module's layers inside:
  it only reads the block's types and relations); other ``dgl.nn`` modules need DGL graphs.
- Errors are ValueError/TypeError, never DGL's ``DGLError``: this module runs without DGL (the GPU
  image has none), and DGL blocks and DeviceBlocks must fail alike. Code that catches DGL's error
  around a layer (``GraphConv``'s zero-in-degree check) catches ``ValueError`` here.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from .sampling.block_sums import degree_scale, neighbour_mean, neighbour_sum
from .sampling.blocks import DeviceBlock, HeteroDeviceBlock

__all__ = ["SAGEConv", "GraphConv", "HeteroGraphConv", "load_dgl_weights"]  # what docs/api.md lists

SAGE_AGGREGATORS = ("mean",)
GCN_NORMS = ("both", "right", "left", "none")
HETERO_AGGREGATES = ("sum", "max", "min", "mean", "stack")

BlockLike = DeviceBlock | Any  # Any: a DGL block, typed loosely so this module never imports DGL
Features = torch.Tensor | tuple[torch.Tensor, torch.Tensor]  # feat, or a (src, dst) pair


class SAGEConv(nn.Module):
    """GraphSAGE layer (Hamilton et al. 2017) with mean aggregation: ``norm(activation(fc_self(x_dst) + fc_neigh(mean of in-neighbours'
    x)))``, ``x`` the input after dropout. Parameters as DGL's: ``fc_self`` (Linear in->out, with the bias) and ``fc_neigh`` (Linear
    in->out, no bias). A destination with no in-edges gets a zero neighbour term. Arguments as ``dgl.nn.SAGEConv``'s.

    Args:
        in_feats: features per input row (a positive int; DGL's pair of sizes is not supported).
        out_feats: features per output row (a positive int).
        aggregator_type: ``"mean"``, the only one (DGL's ``"gcn"``, ``"pool"`` and ``"lstm"`` are not supported).
        feat_drop: dropout probability on the input rows, sources and destinations, in training mode (default 0).
        bias: whether ``fc_self`` has a bias (default True).
        norm: a callable applied to the output last (e.g. ``torch.nn.LayerNorm(out_feats)``), or None.
        activation: a callable applied to the output before ``norm`` (as DGL does), or None.

    Raises:
        ValueError: another aggregator; sizes that are not positive ints; ``feat_drop`` outside ``[0, 1]``.
        TypeError: a ``norm`` or ``activation`` that is not callable.
    """

    def __init__(
        self,
        in_feats: int,
        out_feats: int,
        aggregator_type: str,
        feat_drop: float = 0.0,
        bias: bool = True,
        norm: Callable[[torch.Tensor], torch.Tensor] | None = None,
        activation: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        super().__init__()
        self.aggregator_type = _one_of("aggregator_type", aggregator_type, SAGE_AGGREGATORS)
        self.in_feats, self.out_feats = _positive("in_feats", in_feats), _positive("out_feats", out_feats)
        # Attribute names as DGL's, so that a norm or activation module's parameters get DGL's
        # state-dict keys ("norm.weight", "activation.weight").
        self.norm = _callable_or_none("norm", norm)
        self.feat_drop = nn.Dropout(feat_drop)  # checks 0 <= feat_drop <= 1 itself
        self.activation = _callable_or_none("activation", activation)
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

    def forward(self, graph: BlockLike, feat: Features, edge_weight: torch.Tensor | None = None) -> torch.Tensor:
        """Destination features from source features.

        Args:
            graph: a :class:`DeviceBlock` on ``feat``'s device, or a DGL block (converted on each call).
            feat: the source rows ``(num_src_nodes, in_feats)``, whose first ``num_dst_nodes`` rows are the destinations (DGL's
                block convention), or a ``(src, dst)`` pair of the source and destination rows; on one device.
            edge_weight: not supported; must be None.

        Returns:
            ``(num_dst_nodes, out_feats)`` on ``feat``'s device, in its dtype.

        Raises:
            TypeError: ``feat`` not 2-D tensors; a typed block (use :class:`HeteroGraphConv`).
            ValueError: ``feat`` whose rows or columns do not match the block and ``in_feats``; block and ``feat`` on two devices.
            NotImplementedError: an ``edge_weight``.
        """
        _refuse_edge_weight(edge_weight)
        block, src, dst = _inputs(graph, feat, self.in_feats)
        # One dropout over the sources, whose first rows are the destinations (DGL's order: the
        # same random draws, so a seeded run drops the same entries as DGL's layer).
        src = self.feat_drop(src)
        dst = src[: block.num_dst_nodes()] if dst is None else self.feat_drop(dst)
        if _project_first(block, self.in_feats, self.out_feats):  # equal in exact arithmetic
            neigh = neighbour_mean(block, self.fc_neigh(src))
        else:
            neigh = self.fc_neigh(neighbour_mean(block, src))
        out = self.fc_self(dst) + neigh
        if self.activation is not None:
            out = self.activation(out)
        if self.norm is not None:
            out = self.norm(out)
        return out

    def extra_repr(self) -> str:
        return f"{self.in_feats}, {self.out_feats}, aggregator_type={self.aggregator_type!r}, bias={self.fc_self.bias is not None}"


class GraphConv(nn.Module):
    """Graph convolution (Kipf & Welling 2017) on a block: ``activation(D_dst^-a · A · D_src^-b · x · weight + bias)``, with the degrees
    taken within the block and clamped to at least 1. Parameters as DGL's: ``weight`` ``(in_feats, out_feats)`` and ``bias``
    ``(out_feats,)``. Arguments as ``dgl.nn.GraphConv``'s.

    A destination with no in-edges gets the bias alone. As in DGL, that is an error unless ``allow_zero_in_degree=True`` (or
    :meth:`set_allow_zero_in_degree`): a ValueError rather than DGL's ``DGLError``, raised before any computation. The check reads the
    degrees back to the host, a sync on CUDA; sampled blocks usually have such destinations, so models on them pass True.

    Args:
        in_feats: features per input row (a positive int).
        out_feats: features per output row (a positive int).
        norm: the exponents: ``"both"`` (default: a = b = 1/2), ``"right"`` (a = 1, b = 0: the mean), ``"left"`` (a = 0, b = 1) or
            ``"none"`` (the sum).
        weight: False: no weight of its own; ``forward`` then takes one (``forward(graph, feat, weight=W)``), or the rows are
            aggregated unprojected, the output keeping ``in_feats`` columns (as in DGL; a bias then needs ``in_feats == out_feats``).
        bias: whether the layer has a bias (default True).
        activation: a callable applied to the output last, or None.
        allow_zero_in_degree: skip the zero-in-degree check (default False).

    Raises:
        ValueError: an unknown ``norm``; sizes that are not positive ints.
        TypeError: an ``activation`` that is not callable.
    """

    def __init__(
        self,
        in_feats: int,
        out_feats: int,
        norm: str = "both",
        weight: bool = True,
        bias: bool = True,
        activation: Callable[[torch.Tensor], torch.Tensor] | None = None,
        allow_zero_in_degree: bool = False,
    ) -> None:
        super().__init__()
        self.norm = _one_of("norm", norm, GCN_NORMS)
        self.in_feats, self.out_feats = _positive("in_feats", in_feats), _positive("out_feats", out_feats)
        self.allow_zero_in_degree = allow_zero_in_degree
        self.weight = nn.Parameter(torch.empty(self.in_feats, self.out_feats)) if weight else None
        self.bias = nn.Parameter(torch.empty(self.out_feats)) if bias else None
        # "_activation" as in DGL, so that an activation module's parameters get DGL's state-dict keys.
        self._activation = _callable_or_none("activation", activation)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot-uniform weight and zero bias, as DGL initialises them."""
        if self.weight is not None:
            nn.init.xavier_uniform_(self.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def set_allow_zero_in_degree(self, set_value: bool) -> None:
        """Turn the zero-in-degree check off (``True``) or on (``False``), as DGL's method does."""
        self.allow_zero_in_degree = set_value

    def forward(self, graph: BlockLike, feat: Features, weight: torch.Tensor | None = None, edge_weight: torch.Tensor | None = None) -> torch.Tensor:
        """Destination features from source features.

        Args:
            graph: a :class:`DeviceBlock` on ``feat``'s device, or a DGL block (converted on each call).
            feat: the source rows ``(num_src_nodes, in_feats)``, or a ``(src, dst)`` pair whose ``dst`` is not read (as in DGL).
            weight: an ``(in_feats, out_feats)`` tensor, for a layer built with ``weight=False`` only.
            edge_weight: not supported; must be None.

        Returns:
            ``(num_dst_nodes, out_feats)`` (``in_feats`` columns without any weight) on ``feat``'s device, in its dtype.

        Raises:
            TypeError: ``feat`` or ``weight`` of the wrong kind; a typed block (use :class:`HeteroGraphConv`).
            ValueError: shapes that do not match; a destination with no in-edges unless allowed; a ``weight`` given to a layer
                with its own; a bias that an unprojected output does not fit.
            NotImplementedError: an ``edge_weight``.
        """
        _refuse_edge_weight(edge_weight)
        block, h, _ = _inputs(graph, feat, self.in_feats)
        weight = self._weight(weight)
        if not self.allow_zero_in_degree and bool((block.in_degrees() == 0).any()):
            raise ValueError(
                "the block has destination nodes with no in-edges, whose output would be the bias alone; "
                "add self-loops to the graph before sampling (dgl.add_self_loop), or pass allow_zero_in_degree=True"
            )
        width = self.in_feats if weight is None else weight.shape[1]
        if self.norm in ("both", "left"):
            h = h * degree_scale(block.out_degrees(), self.norm == "both", h.dtype).unsqueeze(1)
        if weight is not None and _project_first(block, self.in_feats, width):
            h = neighbour_sum(block, h @ weight)
        else:
            h = neighbour_sum(block, h)
            if weight is not None:
                h = h @ weight
        if self.norm in ("both", "right"):
            h = h * degree_scale(block.in_degrees(), self.norm == "both", h.dtype).unsqueeze(1)
        if self.bias is not None:
            h = h + self.bias
        if self._activation is not None:
            h = self._activation(h)
        return h

    def _weight(self, given: torch.Tensor | None) -> torch.Tensor | None:
        """The weight to multiply by: the layer's own, or ``given`` (checked), or None."""
        if given is None:
            if self.weight is None and self.bias is not None and self.in_feats != self.out_feats:
                raise ValueError(
                    f"this GraphConv has no weight (weight=False), so its output keeps in_feats={self.in_feats} "
                    f"columns, which the bias of out_feats={self.out_feats} does not fit; pass "
                    f"forward(graph, feat, weight=W) with W of shape ({self.in_feats}, {self.out_feats}), "
                    "or build the layer with weight=True"
                )
            return self.weight
        if self.weight is not None:
            raise ValueError("a weight was passed to forward, but the layer has its own weight parameter; build it with weight=False to pass one")
        if not isinstance(given, torch.Tensor):
            raise TypeError(f"weight must be a torch tensor, but got {_describe(given)}")
        if given.dim() != 2 or given.shape[0] != self.in_feats:
            raise ValueError(f"weight must have shape (in_feats={self.in_feats}, out), but got {_describe(given)}")
        if self.bias is not None and given.shape[1] != self.out_feats:
            raise ValueError(
                f"weight has {given.shape[1]} columns but the bias out_feats={self.out_feats}; pass a weight of shape ({self.in_feats}, {self.out_feats})"
            )
        return given

    def extra_repr(self) -> str:
        return (
            f"{self.in_feats}, {self.out_feats}, norm={self.norm!r}, weight={self.weight is not None}, "
            f"bias={self.bias is not None}, allow_zero_in_degree={self.allow_zero_in_degree}"
        )


class HeteroGraphConv(nn.Module):
    """One module per edge type over a typed block, the results summed (or otherwise aggregated) per destination node type:
    ``dgl.nn.HeteroGraphConv``'s arguments, parameters and results.

    Args:
        mods: an edge type's name (or a canonical edge type) -> the module called as ``mod(block[canonical etype], (src_features,
            dst_features), *mod_args[etype], **mod_kwargs[etype])`` (this module's SAGEConv/GraphConv, whose zero-in-degree check is
            turned off, as DGL does); kept in ``self.mods`` under ``str(key)``, so state dicts match DGL's.
        aggregate: one of :data:`HETERO_AGGREGATES` (default ``"sum"``; ``"stack"`` stacks on dimension 1) or ``fn(tensors, dsttype)``.

    Raises:
        ValueError: an unknown aggregate name.
        TypeError: an aggregate that is neither a name nor a callable.
    """

    def __init__(
        self, mods: Mapping[str | tuple[str, str, str], nn.Module], aggregate: str | Callable[[list[torch.Tensor], str], torch.Tensor] = "sum"
    ) -> None:
        super().__init__()
        self.mod_dict = dict(mods)
        self.mods = nn.ModuleDict({str(key): mod for key, mod in mods.items()})
        for mod in self.mods.values():
            if callable(getattr(mod, "set_allow_zero_in_degree", None)):
                mod.set_allow_zero_in_degree(True)  # a typed block has no self-loops to add: as DGL
        if isinstance(aggregate, str):
            if aggregate not in HETERO_AGGREGATES:
                raise ValueError(f"aggregate {aggregate!r} is not supported; choose from: {', '.join(HETERO_AGGREGATES)}, or pass fn(tensors, dsttype)")
            self.agg_fn = functools.partial(_aggregate, how=aggregate)
        elif callable(aggregate):
            self.agg_fn = aggregate
        else:
            raise TypeError(f"aggregate must be a name or a callable fn(tensors, dsttype), but got {aggregate!r}")

    def forward(
        self,
        g: HeteroDeviceBlock | Any,
        inputs: Mapping[str, torch.Tensor] | tuple[Mapping[str, torch.Tensor], Mapping[str, torch.Tensor]],
        mod_args: Mapping[str, tuple] | None = None,
        mod_kwargs: Mapping[str, dict] | None = None,
    ) -> dict[str, torch.Tensor]:
        """Destination features per type from source features per type.

        Args:
            g: a :class:`HeteroDeviceBlock` on the features' device, or a DGL block or graph (converted on each call).
            inputs: ``{ntype: source features}`` (the destinations being their first rows), or a ``(src, dst)`` pair of such dicts.
            mod_args: ``{etype: positional arguments}`` passed on to that relation's module.
            mod_kwargs: ``{etype: keyword arguments}`` passed on to that relation's module.

        Returns:
            ``{dsttype: features}`` on the inputs' device. A relation whose source or destination type has no input is left out; a
            destination type that no relation reaches is absent.

        Raises:
            TypeError: ``inputs`` that are not dicts of tensors.
            KeyError: an edge type of the block without a module.
        """
        mod_args, mod_kwargs = mod_args or {}, mod_kwargs or {}
        src_inputs, dst_inputs = inputs if isinstance(inputs, tuple) else (inputs, None)
        if not isinstance(src_inputs, Mapping) or not all(isinstance(v, torch.Tensor) for v in src_inputs.values()):
            raise TypeError(f"inputs must be a dict {{ntype: tensor}} or a (src, dst) pair of them, but got {_describe(src_inputs)}")
        block = _typed_block(g, src_inputs)
        if dst_inputs is None:
            dst_inputs = {k: v[: block.num_dst_nodes(k)] for k, v in src_inputs.items() if k in block.dsttypes}
        outputs: dict[str, list[torch.Tensor]] = {ntype: [] for ntype in block.dsttypes}
        for key in block.canonical_etypes:
            stype, etype, dtype = key
            if stype in src_inputs and dtype in dst_inputs:
                mod = self._get_module(key)
                outputs[dtype].append(mod(block[key], (src_inputs[stype], dst_inputs[dtype]), *mod_args.get(etype, ()), **mod_kwargs.get(etype, {})))
        return {ntype: self.agg_fn(outs, ntype) for ntype, outs in outputs.items() if outs}

    def _get_module(self, key: tuple[str, str, str]) -> nn.Module:
        for name in (key, key[1]):  # a canonical edge type first, then its name, as DGL looks them up
            if name in self.mod_dict:
                return self.mod_dict[name]
        raise KeyError(f"no module for edge type {key}; mods has {list(self.mod_dict)}")


def load_dgl_weights(ours: nn.Module, theirs: nn.Module) -> None:
    """Copy the parameters of ``theirs`` into ``ours`` in place.

    Args:
        ours: a layer of this module, or a model built of them.
        theirs: the same layer of ``dgl.nn`` (``SAGEConv`` -> :class:`SAGEConv`, ``GraphConv`` -> :class:`GraphConv`), or a
            model built alike (the same module and parameter names).

    Raises:
        ValueError: layers configured differently (aggregator, norm), or names or shapes that do not match.
    """
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
            raise ValueError(f"{name or 'the layer'}: norm {other._norm!r} differs from ours {layer.norm!r}; build ours with norm={other._norm!r}")
    # strict=True, so that a missing weight or bias is an error, not a silent half copy.
    state = theirs.state_dict()
    try:
        ours.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise ValueError(f"the parameters do not match (build both layers with the same sizes and options): {err}") from err


# -- aggregation ----------------------------------------------------------------------------------


def _aggregate(outputs: list[torch.Tensor], dsttype: str, how: str) -> torch.Tensor:
    """DGL's cross-type aggregation: the relations' results stacked, then reduced (or kept: "stack")."""
    if how == "stack":
        return torch.stack(outputs, dim=1)
    stacked = torch.stack(outputs, dim=0)
    if how in ("max", "min"):
        return getattr(torch, how)(stacked, dim=0)[0]
    return getattr(torch, how)(stacked, dim=0)


def _typed_block(g: Any, inputs: Mapping[str, torch.Tensor]) -> HeteroDeviceBlock:
    """``g`` as a HeteroDeviceBlock on the inputs' device."""
    if isinstance(g, HeteroDeviceBlock):
        return g
    if isinstance(g, DeviceBlock):
        raise TypeError(
            "HeteroGraphConv takes a typed block (HeteroDeviceBlock, or a DGL block with node and edge types), but got a DeviceBlock; call the layer itself"
        )
    device = next(iter(inputs.values())).device if inputs else torch.device("cpu")
    return HeteroDeviceBlock.from_dgl(g, device, edge_ids=False)


def _inputs(graph: BlockLike, feat: Features, in_feats: int) -> tuple[DeviceBlock, torch.Tensor, torch.Tensor | None]:
    """``(block, src, dst)``: ``graph`` as a DeviceBlock on the features' device, the source rows,
    and the destination rows of a ``(src, dst)`` pair (None for a single tensor), all checked."""
    if not isinstance(feat, tuple):
        block = _device_block(graph, feat, in_feats)
        if not block.dst_in_src:
            raise ValueError(
                "the block's sources and destinations are different node types (a relation of a typed block): "
                "pass feat as a (src, dst) pair, or wrap the layer in HeteroGraphConv"
            )
        return block, feat, None
    if len(feat) != 2:
        raise ValueError(f"feat must be a tensor or a (src, dst) pair of tensors, but got a tuple of {len(feat)}")
    src, dst = feat
    block = _device_block(graph, src, in_feats)
    if not isinstance(dst, torch.Tensor) or dst.dim() != 2:
        raise TypeError(f"feat's dst must be a 2-D tensor (num_dst_nodes, in_feats), but got {_describe(dst)}")
    if dst.device != src.device:
        raise ValueError(f"feat's src is on {src.device} but its dst on {dst.device}; put both on one device")
    if tuple(dst.shape) != (block.num_dst_nodes(), in_feats):
        raise ValueError(f"feat's dst must have shape (num_dst_nodes={block.num_dst_nodes()}, in_feats={in_feats}), but got {_describe(dst)}")
    return block, src, dst


def _device_block(block: BlockLike, x: torch.Tensor, in_feats: int) -> DeviceBlock:
    """``block`` as a DeviceBlock on ``x``'s device, after checking ``x`` (the source rows) against
    it (shapes only: no device sync). A DeviceBlock elsewhere is an error rather than a hidden copy."""
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise TypeError(f"feat must be a 2-D tensor (num_src_nodes, in_feats), but got {_describe(x)}")
    if isinstance(block, DeviceBlock):
        if block.device != x.device:
            raise ValueError(f"the block is on {block.device} but feat on {x.device}; move one with block.to(feat.device)")
    else:
        block = DeviceBlock.from_dgl(block, x.device)
    if isinstance(block, HeteroDeviceBlock):
        raise TypeError("the block has several node or edge types; wrap the layer in HeteroGraphConv({etype: layer, ...})")
    if x.shape[0] != block.num_src_nodes():
        raise ValueError(
            f"feat has {x.shape[0]} rows but the block {block.num_src_nodes()} source nodes; "
            "pass the features of the block's source nodes (blocks[i].srcdata['_ID'])"
        )
    if x.shape[1] != in_feats:
        raise ValueError(f"feat has {x.shape[1]} features per row but the layer expects in_feats={in_feats}")
    return block


def _refuse_edge_weight(edge_weight: torch.Tensor | None) -> None:
    # A DeviceBlock keeps its edges in CSC order without DGL's edge ids, so weights given in the
    # DGL block's edge order could not be matched to the edges: refuse rather than misapply them.
    if edge_weight is not None:
        raise NotImplementedError(
            "edge_weight is not supported by dgl_zerocopy.nn layers (they aggregate unweighted messages); "
            "use dgl.nn's layer on the CPU for weighted aggregation"
        )


def _project_first(block: DeviceBlock, in_feats: int, out_feats: int) -> bool:
    """Whether multiplying by the weight before aggregating costs fewer operations than after.

    Before: every source row is projected (``src * in * out``) and the narrower rows summed
    (``edges * out``); after: the wide rows are summed (``edges * in``) and only the destinations
    projected (``dst * in * out``). A sampled block has many more sources than destinations, so
    "project first whenever in > out" (DGL's rule) can cost several times more: with 512 input
    features, hidden 256 and fanouts 15,10,5 (bench/training/scaling.py, 1M nodes) the training step's
    compute took 7.0 s under that rule and 2.1 s under this one."""
    src, dst, edges = block.num_src_nodes(), block.num_dst_nodes(), block.num_edges()
    return src * in_feats * out_feats + edges * out_feats < edges * in_feats + dst * in_feats * out_feats


def _one_of(name: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"{name} {value!r} is not supported; choose from: {', '.join(choices)}")
    return value


def _positive(name: str, value: int) -> int:
    try:
        n = operator.index(value)  # ints, NumPy ints; not floats or bools-as-sizes by mistake
    except TypeError:
        n = None
    if n is None or isinstance(value, bool) or n < 1:
        pair = " (a (src, dst) pair of sizes is not supported)" if isinstance(value, tuple) else ""
        raise ValueError(f"{name} must be a positive int{pair}, but got {value!r}")
    return n


def _callable_or_none(name: str, value: Any) -> Any:
    # At construction rather than at the first forward: GraphConv's norm is a string, and one
    # passed to SAGEConv by mistake would otherwise fail only when called.
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be a callable (a module such as torch.nn.LayerNorm, or a function) or None, but got {value!r}")
    return value


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dim()}-D tensor of shape {tuple(value.shape)}"
    return type(value).__name__
