"""What a sampler's output asks for, the output moved to the device, and the answers put in place.

DGL's samplers say which data a batch needs by putting a ``LazyFeature`` where it goes: in a node
or edge frame of a graph they return (``blocks[0].srcdata["feat"]``, a pair graph's
``edata["label"]``, a subgraph's ``ndata``, per node and edge type on heterographs), or as a
leaf of the output. DGL's loader walks the output (tuples, lists and dicts, as
``dgl.utils.recursive_apply`` does), fetches each mark and puts the rows in its place. Here the
same walk is split in three steps around the gather (:mod:`dgl_zerocopy.loading.loader`):

1. :func:`find_needs` (worker): every mark as a :class:`Need`: where it is, which data of the
   parent graph it names (kind, type, name), and the ids to gather;
2. :func:`move` (worker, on the ring's stream): the output on the device: tensors copied, blocks
   turned into :class:`~dgl_zerocopy.loading.blocks.DeviceBlock` (``device_blocks``), other graphs
   moved where the installed DGL can (a CUDA build) or left on the CPU;
3. :func:`put` (consumer, after the stream wait): each answer in its place.

Outputs that hold no marks pass through unchanged (but moved). CPU only, apart from the copies.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch

from ..store.transfer import to_device
from .dgl_options import log_once

log = logging.getLogger(__name__)

NID = EID = "_ID"  # DGL's dgl.NID and dgl.EID


@dataclass
class Need:
    """One ``LazyFeature`` of a batch. ``graph``: the position of its graph among the graphs of
    the output in walk order, or None for a LazyFeature leaf (``leaf``: its position among the
    leaves). ``kind``: ``"node"``, ``"edge"`` or ``"leaf"``; ``frame``: the index of the graph's node or edge
    frame; ``side``: ``"src"``/``"dst"`` for a block's node frame; ``type``: that frame's node type
    or canonical edge type; ``key``: the column; ``name``: the parent graph's data it takes;
    ``ids``: the parent's ids to gather (CPU); ``given``: the mark carried its own ids."""

    graph: int | None
    leaf: int | None
    kind: str
    frame: int
    side: str | None
    type: object
    key: str
    name: str
    ids: torch.Tensor
    given: bool
    slot: str = ""  # the name of its ring buffer (the loader names it)

    @property
    def slot_name(self) -> str:
        """A name for its ring buffer that says where the mark is: the same for the same mark in
        every batch of a sampler."""
        where = f"g{self.graph}" if self.graph is not None else f"leaf{self.leaf}"
        return f"{where}/{self.kind}{self.frame}/{self.key}"


def mark_blocks(output, features: list[tuple[str, str]], labels: list[tuple[str, str]]) -> None:
    """The loader's own ``features=``/``labels=`` ((node type, name) pairs) on an output that ends
    with a list of blocks: marked in ``blocks[0]``'s sources at ``output[0]`` (the input nodes) and
    in ``blocks[-1]``'s destinations at ``output[1]`` when it holds ids (the output nodes; else at
    the block's own ``dgl.NID``), unless the sampler marked that name there already (a column
    DGL sliced from the graph's data of that name is replaced). Other outputs are left alone."""
    from dgl.frame import LazyFeature

    blocks = output[-1] if isinstance(output, (tuple, list)) and output else None
    if not (isinstance(blocks, list) and blocks and getattr(blocks[0], "is_block", False)) or not hasattr(blocks[0], "_node_frames"):
        return
    for block, pairs, side, ids in ((blocks[0], features, "src", output[0]), (blocks[-1], labels, "dst", output[1] if len(output) > 2 else None)):
        types = block.srctypes if side == "src" else block.dsttypes
        for ntype, name in pairs:
            if ntype in types:
                frame = block._node_frames[types.index(ntype) + (0 if side == "src" else len(block.srctypes))]
                if not isinstance(frame._columns.get(name), LazyFeature):  # a column DGL sliced from the parent's data is replaced
                    frame[name] = _loader_mark(name, ids.get(ntype) if isinstance(ids, Mapping) else ids)


@functools.cache
def _mark_type() -> type:
    """LazyFeature's subclass for the marks the loader puts: their ids are the sampler's own output
    (trusted as the sampler is), not ids a sampler chose to give."""
    from dgl.frame import LazyFeature

    class LoaderMark(LazyFeature):
        __slots__ = ()

    return LoaderMark


def _loader_mark(name: str, ids):
    return _mark_type()(name, ids if isinstance(ids, torch.Tensor) else None)


def find_needs(output) -> list[Need]:
    """The marks of ``output`` (its graphs' frames and its LazyFeature leaves), in walk order.
    Raises ValueError for a mark with no ids to gather."""
    from dgl import DGLGraph
    from dgl.frame import LazyFeature

    needs: list[Need] = []
    graphs = leaves = 0
    for item in _marked(output, (DGLGraph, LazyFeature)):
        if isinstance(item, DGLGraph):
            _graph_needs(item, graphs, needs, LazyFeature)
            graphs += 1
        else:
            if item.id_ is None:
                raise ValueError(f"the sampler returned LazyFeature({item.name!r}) with no ids; give it ids (LazyFeature(name, ids))")
            needs.append(Need(None, leaves, "leaf", 0, None, None, item.name, item.name, item.id_, True))
            leaves += 1
    return needs


def _marked(item, kinds: tuple) -> Iterator:
    """The items of ``output`` of the classes ``kinds``, in walk order (as ``recursive_apply``
    visits them). Module-level, not a nested function: a recursive closure is a reference cycle
    that would keep a batch's graphs (and their ring buffers) alive until the garbage collector runs."""
    if isinstance(item, kinds):
        yield item
    elif isinstance(item, Mapping):
        for value in item.values():
            yield from _marked(value, kinds)
    elif isinstance(item, Sequence) and not isinstance(item, str):
        for value in item:
            yield from _marked(value, kinds)


def _rebuilt(item, fn: Callable):
    """``item`` with ``fn`` applied to each leaf, containers rebuilt as DGL's ``recursive_apply``
    does (tuples stay tuples, other sequences become lists, mappings dicts)."""
    if isinstance(item, Mapping):
        return {k: _rebuilt(v, fn) for k, v in item.items()}
    if isinstance(item, tuple):
        return tuple(_rebuilt(v, fn) for v in item)
    if isinstance(item, Sequence) and not isinstance(item, (str, torch.Tensor)):
        return [_rebuilt(v, fn) for v in item]
    return fn(item)


def _graph_needs(graph, position: int, needs: list[Need], lazy_type) -> None:
    num_src = len(graph.srctypes) if graph.is_block else None
    for kind, frames, types, id_name in (("node", graph._node_frames, graph.ntypes, NID), ("edge", graph._edge_frames, graph.canonical_etypes, EID)):
        for index, (frame, type_) in enumerate(zip(frames, types)):
            for key, column in frame._columns.items():
                if not isinstance(column, lazy_type):
                    continue
                given = column.id_ is not None and not isinstance(column, _mark_type())
                if not given and id_name not in frame.keys():
                    raise ValueError(
                        f"the sampler marked {kind} data {key!r} (type {type_!r}) with a LazyFeature, but the graph has no {id_name!r} "
                        f"ids to gather it by; give the mark ids (LazyFeature(name, ids)) or keep dgl.NID/dgl.EID in the graph"
                    )
                side = None if num_src is None or kind == "edge" else "src" if index < num_src else "dst"
                ids = column.id_ if column.id_ is not None else frame[id_name]
                needs.append(Need(position, None, kind, index, side, type_, key, column.name or key, ids, given))


def move(output, device: torch.device, device_blocks: bool, can_move_graphs: bool, needs: list[Need]) -> tuple[object, list]:
    """``output`` on ``device``, and its graphs as moved, in walk order. Tensors are copied (on the
    current stream, never blocking the host); blocks become DeviceBlocks when ``device_blocks``
    (edge marks on them are re-ordered to the DeviceBlock's CSC order first: ``needs`` is updated);
    other graphs move when ``can_move_graphs`` (a CUDA build of DGL), else stay on the CPU with
    their data put on ``device`` (said once in the log). Containers are rebuilt (:func:`_rebuilt`);
    on the CPU with DGL blocks nothing moves and the output is returned as it is."""
    from dgl import DGLGraph

    if device.type == "cpu" and not device_blocks:
        return output, list(_marked(output, DGLGraph))
    graphs: list = []

    def moved(item):
        if isinstance(item, DGLGraph):
            graphs.append(_move_graph(item, len(graphs), device, device_blocks, can_move_graphs, needs))
            return graphs[-1]
        return to_device(item, device) if isinstance(item, torch.Tensor) else item

    return _rebuilt(output, moved), graphs


def _move_graph(graph, position: int, device: torch.device, device_blocks: bool, can_move_graphs: bool, needs: list[Need]):
    if device_blocks and graph.is_block:
        from ..sampling.blocks import DeviceBlock, _csc

        for need in needs:
            if need.graph == position and need.kind == "edge":
                # A DeviceBlock's edges are in CSC order, DGL's block in its own: gather in that order.
                need.ids = need.ids[_csc(graph, need.type)[2].long()]
        return DeviceBlock.from_dgl(graph, device)
    if device.type == "cpu":
        return graph
    if can_move_graphs:
        return graph.to(device)
    log_once(
        "graph_stays",
        f"a {'block' if graph.is_block else 'graph'} of the sampler's output stays on the CPU (the installed DGL is a CPU build); "
        f"its marked data is gathered onto {device} all the same",
        log,
    )
    return graph


def put(output, graphs: list, needs: list[Need], values: list[torch.Tensor]):
    """Each need's value in its place: a DGL graph's frame (as DGL's loader does), a DeviceBlock's
    ``srcdata``/``dstdata``/``edata``, or the LazyFeature leaf it replaces (the output rebuilt).
    Returns the output."""
    leaves = {}
    for need, value in zip(needs, values):
        if need.graph is None:
            leaves[need.leaf] = value
            continue
        target = graphs[need.graph]
        if hasattr(target, "_node_frames"):  # a DGL graph
            frames = target._node_frames if need.kind == "node" else target._edge_frames
            frames[need.frame][need.key] = value
        else:  # a DeviceBlock or HeteroDeviceBlock
            data = target.edata if need.kind == "edge" else target.srcdata if need.side == "src" else target.dstdata
            typed = hasattr(target, "canonical_etypes")
            data[need.key] = {need.type: value} if typed else value
    return _replace_leaves(output, leaves) if leaves else output


def _replace_leaves(output, values: dict):
    from dgl.frame import LazyFeature

    answers = iter(values[i] for i in range(len(values)))
    return _rebuilt(output, lambda item: next(answers) if isinstance(item, LazyFeature) else item)
