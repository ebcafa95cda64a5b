"""Device-side message-flow blocks: the CSC structure of one sampled DGL block, on any torch device.

PyPI's DGL is a CPU build, so its blocks cannot move to CUDA. A :class:`DeviceBlock` holds what the
layers in :mod:`dgl_zerocopy.nn` need (CSC ``indptr`` and ``indices``, the node counts, and the
``_ID`` of the nodes) as plain torch tensors, so it lives wherever the features live.

Block convention (DGL's): the destination nodes are the first ``num_dst_nodes()`` source nodes, so
the destination features are ``x[:num_dst_nodes()]`` of the source features ``x``. A relation of a
typed block between two node types has separate sources and destinations (``dst_in_src=False``).

A typed (heterograph) block is a :class:`HeteroDeviceBlock`: one DeviceBlock per canonical edge type,
the node counts per type, and the data per node type and edge type, read as DGL reads a heterograph's.

This module does not import DGL; only :meth:`DeviceBlock.from_dgl` does, when called. The types live in
the sampling layer, which builds them, so that everything above it (loading, :mod:`dgl_zerocopy.nn`,
training) imports them downwards; :mod:`dgl_zerocopy.loading.blocks` re-exports them.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import torch

from .typed_data import TypedData

ID_DTYPES = (torch.int32, torch.int64)
# DGL's keys for the parent graph's node and edge ids (``dgl.NID``, ``dgl.EID``), written here so DGL need not be imported.
NID = "_ID"
EID = "_ID"

Device = torch.device | str | int


class DeviceBlock:
    """One bipartite block in CSC form: destination ``v``'s in-edges come from the source-local ids
    ``indices[indptr[v]:indptr[v + 1]]``.

    Contract: ``indptr`` (``num_dst + 1``) and ``indices`` (``num_edges``) are 1-D tensors of one
    integer dtype (int32 or int64) on one device; ``indptr`` starts at 0, never decreases and ends
    at ``num_edges``; every index is in ``[0, num_src)``; ``num_src >= num_dst`` unless
    ``dst_in_src`` is False (a relation between two node types: the destinations are not the first
    sources, and a layer takes a ``(src, dst)`` pair of features). The constructor checks dtypes,
    shapes and devices (cheap, no device sync) but trusts the values: :meth:`from_dgl` builds them
    correctly. ``srcdata``/``dstdata`` hold per-node tensors (first dimension ``num_src`` /
    ``num_dst``) and ``edata`` per-edge tensors in CSC order (``edata["_ID"]``: the parent graph's
    edge id of each edge), all on the same device.

    Derived tensors (degrees, the CSR adjacency and its transpose) are built on first use, on the
    current CUDA stream, and kept: a producer on a side stream must have the index tensors ready
    (an event) before the consumer's first call, as for any tensor it hands over.
    """

    is_block = True  # DGL-compatible flag, read by code that accepts graphs and blocks alike

    def __init__(
        self,
        indptr: torch.Tensor,
        indices: torch.Tensor,
        num_src: int,
        srcdata: dict[str, torch.Tensor] | None = None,
        dstdata: dict[str, torch.Tensor] | None = None,
        *,
        edata: dict[str, torch.Tensor] | None = None,
        dst_in_src: bool = True,
    ) -> None:
        for name, t in (("indptr", indptr), ("indices", indices)):
            if not isinstance(t, torch.Tensor) or t.dim() != 1:
                raise TypeError(f"{name} must be a 1-D torch tensor, but got {_describe(t)}")
            if t.dtype not in ID_DTYPES:
                raise TypeError(f"{name} must be int32 or int64, but got {t.dtype}; convert it with .long()")
        if indptr.dtype != indices.dtype:
            raise TypeError(f"indptr and indices must share one dtype, but got {indptr.dtype} and {indices.dtype}")
        if indptr.device != indices.device:
            raise ValueError(f"indptr is on {indptr.device} but indices on {indices.device}; move both to one device")
        if indptr.numel() < 1:
            raise ValueError("indptr must hold num_dst + 1 >= 1 offsets, but it is empty; use torch.zeros(1) for no destinations")
        num_src = int(num_src)
        if dst_in_src and num_src < indptr.numel() - 1:
            raise ValueError(f"num_src ({num_src}) must be at least num_dst ({indptr.numel() - 1}): destinations are the first sources")
        self.indptr = indptr
        self.indices = indices
        self._num_src = num_src
        self.srcdata: dict[str, torch.Tensor] = dict(srcdata or {})
        self.dstdata: dict[str, torch.Tensor] = dict(dstdata or {})
        self.edata: dict[str, torch.Tensor] = dict(edata or {})
        self.dst_in_src = bool(dst_in_src)
        # Derived tensors, built on first use and kept: a block is read by one layer per
        # forward and once more in backward, and the model may be run on it several times.
        self._cache: dict[Any, torch.Tensor] = {}

    # -- DGL-compatible queries ------------------------------------------------------------------

    def num_src_nodes(self) -> int:
        """Number of source nodes (the rows of the input features)."""
        return self._num_src

    def num_dst_nodes(self) -> int:
        """Number of destination nodes (the rows of the output); they are the first source nodes."""
        return self.indptr.numel() - 1

    def num_edges(self) -> int:
        """Number of edges."""
        return self.indices.numel()

    @property
    def device(self) -> torch.device:
        """The device of the index tensors."""
        return self.indptr.device

    @property
    def idtype(self) -> torch.dtype:
        """The dtype of ``indptr``/``indices`` (int32 or int64), as DGL's ``idtype``."""
        return self.indptr.dtype

    def in_degrees(self) -> torch.Tensor:
        """In-degree of each destination node: shape ``(num_dst,)``, dtype :attr:`idtype`, on :attr:`device`."""
        if "in_degrees" not in self._cache:
            self._cache["in_degrees"] = self.indptr[1:] - self.indptr[:-1]
        return self._cache["in_degrees"]

    def out_degrees(self) -> torch.Tensor:
        """Out-degree of each source node within this block: shape ``(num_src,)``, dtype :attr:`idtype`."""
        if "out_degrees" not in self._cache:
            # index_add_ rather than bincount: bincount reads the largest id back to the host first.
            counts = torch.zeros(self._num_src, dtype=self.idtype, device=self.device)
            self._cache["out_degrees"] = counts.index_add_(0, self.indices, torch.ones_like(self.indices))
        return self._cache["out_degrees"]

    # -- what the layers use -----------------------------------------------------------------------

    def adjacency(self, dtype: torch.dtype = torch.float32, transpose: bool = False) -> torch.Tensor:
        """The ``(num_dst, num_src)`` adjacency as a sparse CSR tensor of ones in ``dtype`` on
        :attr:`device`, so that ``adjacency() @ x`` sums each destination's in-neighbours' rows of
        ``x`` (a repeated edge counts once per copy, as in DGL). ``transpose=True`` gives the
        ``(num_src, num_dst)`` transpose, also in CSR (what the backward pass multiplies by).
        Built once per dtype and direction, then reused."""
        key = ("adjacency", dtype, transpose)
        if key not in self._cache:
            if transpose:
                # Sources' out-edges: the edges sorted by source (stable, so deterministic).
                order = torch.argsort(self.indices, stable=True)
                crow = torch.cat([self.indptr.new_zeros(1), self.out_degrees().cumsum(0).to(self.idtype)])
                col, size = self.edge_dst()[order].to(self.idtype), (self._num_src, self.num_dst_nodes())
            else:
                crow, col, size = self.indptr, self.indices, (self.num_dst_nodes(), self._num_src)
            values = torch.ones(self.num_edges(), dtype=dtype, device=self.device)
            with warnings.catch_warnings():
                # torch warns once per process that sparse CSR is "beta"; the operations used here
                # (construction and CSR @ dense) are long supported.
                warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
                if self.device.type == "cuda":
                    self._cache[key] = canonical_csr(crow, col, values, size)
                else:
                    # The CSR comes from a valid block; say so (newer torch warns when this is left implicit).
                    self._cache[key] = torch.sparse_csr_tensor(crow, col, values, size=size, check_invariants=False)
        return self._cache[key]

    def edge_dst(self) -> torch.Tensor:
        """The destination of each edge in CSC order: shape ``(num_edges,)``, dtype int64, on :attr:`device`."""
        if "edge_dst" not in self._cache:
            rows = torch.arange(self.num_dst_nodes(), device=self.device)
            # output_size avoids a device sync to learn the length, which is already known.
            self._cache["edge_dst"] = torch.repeat_interleave(rows, self.in_degrees(), output_size=self.num_edges())
        return self._cache["edge_dst"]

    # -- moving and building -----------------------------------------------------------------------

    def to(self, device: Device, non_blocking: bool = False) -> DeviceBlock:
        """This block on ``device``: ``self`` when already there, else a new block with the index
        tensors and every ``srcdata``/``dstdata``/``edata`` tensor copied there."""
        device = torch.device(device)
        if _same_device(self.device, device):
            return self

        def move(t: torch.Tensor) -> torch.Tensor:
            return t.to(device, non_blocking=non_blocking)

        return DeviceBlock(
            move(self.indptr),
            move(self.indices),
            self._num_src,
            {k: move(v) for k, v in self.srcdata.items()},
            {k: move(v) for k, v in self.dstdata.items()},
            edata={k: move(v) for k, v in self.edata.items()},
            dst_in_src=self.dst_in_src,
        )

    @classmethod
    def from_dgl(cls, block: Any, device: Device = "cpu", id_dtype: torch.dtype = torch.int64, edge_ids: bool | None = None) -> DeviceBlock | HeteroDeviceBlock:
        """The :class:`DeviceBlock` of a DGL block (or of a homogeneous DGL graph, whose sources and
        destinations are the same nodes), with ``indptr``/``indices`` in ``id_dtype`` on ``device``
        and the node ids ``srcdata["_ID"]``/``dstdata["_ID"]`` carried when the block has them (in
        the block's own id dtype, since they index the parent graph). Other node data is not copied.
        A block with several node or edge types gives a :class:`HeteroDeviceBlock` (see
        :meth:`HeteroDeviceBlock.from_dgl`); a one-relation block between two node types gives a
        DeviceBlock with ``dst_in_src=False``.

        ``edge_ids``: carry ``edata["_ID"]``, the parent graph's id of each edge in CSC order (one
        more copy per block). None (the default) means no for a DeviceBlock, yes for a typed block.

        Raises TypeError for a non-DGL object or a bad ``id_dtype``."""
        _check_dgl_block(block, id_dtype)
        if len(block.canonical_etypes) != 1 or len(block.srctypes) != 1 or len(block.dsttypes) != 1:
            return HeteroDeviceBlock.from_dgl(block, device, id_dtype, edge_ids=edge_ids is not False)
        return _relation(block, block.canonical_etypes[0], torch.device(device), id_dtype, bool(edge_ids), with_nids=True)

    def record_stream(self, stream: torch.cuda.Stream) -> None:
        """Mark every CUDA tensor of this block as used on ``stream`` (``Tensor.record_stream``), so
        the caching allocator does not reuse its memory before ``stream`` is done with it: what a
        producer on another stream calls before handing the block over. (Derived tensors are built
        on the consumer's stream, on first use, and need no record.)"""
        for t in (self.indptr, self.indices, *self.srcdata.values(), *self.dstdata.values(), *self.edata.values()):
            if t.is_cuda:
                t.record_stream(stream)

    def __repr__(self) -> str:
        return (
            f"DeviceBlock(num_src_nodes={self._num_src}, num_dst_nodes={self.num_dst_nodes()}, "
            f"num_edges={self.num_edges()}, device={self.device}, idtype={self.idtype})"
        )


class HeteroDeviceBlock:
    """A typed (heterograph) block: one :class:`DeviceBlock` per canonical edge type, read as DGL
    reads a heterograph block (``canonical_etypes``, ``block[etype]``, per-type counts and data).

    Contract: ``relations[(stype, etype, dtype)]`` is a DeviceBlock whose sources are the
    ``num_src[stype]`` source nodes of ``stype`` and whose destinations are the ``num_dst[dtype]``
    destination nodes of ``dtype`` (``dst_in_src`` True exactly when ``stype == dtype``: DGL's
    convention, per type); all on one device in one id dtype. ``srcdata``/``dstdata`` map a name to
    ``{ntype: tensor}`` (the tensor itself when there is one type) and ``edata`` to ``{canonical
    etype: tensor}`` in each relation's CSC order (``edata["_ID"]``: the parent graph's edge ids);
    a relation's own ``srcdata``/``dstdata``/``edata`` are the same per-type dicts. Counts, types,
    dtypes and devices are checked at construction (no device sync).
    """

    is_block = True

    def __init__(self, relations: Mapping[tuple[str, str, str], DeviceBlock], num_src_nodes: Mapping[str, int], num_dst_nodes: Mapping[str, int]) -> None:
        self._num_src, self._num_dst = {t: int(n) for t, n in num_src_nodes.items()}, {t: int(n) for t, n in num_dst_nodes.items()}
        if not relations:
            raise ValueError("a typed block needs at least one relation {(stype, etype, dtype): DeviceBlock}")
        self._relations: dict[tuple[str, str, str], DeviceBlock] = {}
        first = next(iter(relations.values()))
        for key, rel in relations.items():
            if not (isinstance(key, tuple) and len(key) == 3 and all(isinstance(part, str) for part in key)):
                raise TypeError(f"relations are keyed by canonical edge types (stype, etype, dtype), but got {key!r}")
            if not isinstance(rel, DeviceBlock):
                raise TypeError(f"relation {key} must be a DeviceBlock, but got {type(rel).__name__}")
            stype, _, dtype = key
            if stype not in self._num_src or dtype not in self._num_dst:
                raise ValueError(
                    f"relation {key} names a node type missing from the counts (sources {list(self._num_src)}, destinations {list(self._num_dst)})"
                )
            if (rel.num_src_nodes(), rel.num_dst_nodes()) != (self._num_src[stype], self._num_dst[dtype]):
                raise ValueError(
                    f"relation {key} has {rel.num_src_nodes()} sources and {rel.num_dst_nodes()} destinations, "
                    f"but the block has {self._num_src[stype]} {stype!r} sources and {self._num_dst[dtype]} {dtype!r} destinations"
                )
            if (rel.device, rel.idtype) != (first.device, first.idtype):
                raise ValueError(f"relation {key} is {rel.idtype} on {rel.device}, another {first.idtype} on {first.device}; use one dtype and device")
            self._relations[key] = rel
        # One dict per type, shared with the relations, so a relation sees what the block holds.
        self._src = {t: {} for t in self._num_src}
        self._dst = {t: {} for t in self._num_dst}
        self._edges = {key: {} for key in self._relations}
        for key, rel in self._relations.items():
            self._src[key[0]].update(rel.srcdata)
            self._dst[key[2]].update(rel.dstdata)
            self._edges[key].update(rel.edata)
            rel.srcdata, rel.dstdata, rel.edata = self._src[key[0]], self._dst[key[2]], self._edges[key]
        names = [key[1] for key in self._relations]
        self._by_name = {key[1]: key for key in self._relations if names.count(key[1]) == 1}
        self.srcdata = TypedData(self._src, self._num_src, "node")
        self.dstdata = TypedData(self._dst, self._num_dst, "node")
        self.edata = TypedData(self._edges, {key: rel.num_edges() for key, rel in self._relations.items()}, "edge", self._by_name)

    # -- DGL-compatible queries ------------------------------------------------------------------

    @property
    def canonical_etypes(self) -> list[tuple[str, str, str]]:
        return list(self._relations)

    @property
    def etypes(self) -> list[str]:
        return [key[1] for key in self._relations]

    @property
    def srctypes(self) -> list[str]:
        return list(self._num_src)

    @property
    def dsttypes(self) -> list[str]:
        return list(self._num_dst)

    def num_src_nodes(self, ntype: str | None = None) -> int:
        """Source nodes of ``ntype``, or of all types together (as DGL counts them) for None."""
        return sum(self._num_src.values()) if ntype is None else self._num_src[self._ntype(ntype, self._num_src)]

    def num_dst_nodes(self, ntype: str | None = None) -> int:
        """Destination nodes of ``ntype``, or of all types together for None."""
        return sum(self._num_dst.values()) if ntype is None else self._num_dst[self._ntype(ntype, self._num_dst)]

    number_of_src_nodes, number_of_dst_nodes = num_src_nodes, num_dst_nodes  # DGL's older names, still called by dgl.nn

    def num_edges(self, etype: str | tuple[str, str, str] | None = None) -> int:
        """Edges of ``etype`` (a name or a canonical edge type), or of all relations for None."""
        return sum(rel.num_edges() for rel in self._relations.values()) if etype is None else self[etype].num_edges()

    def __getitem__(self, etype: str | tuple[str, str, str]) -> DeviceBlock:
        """The relation ``etype`` (a canonical edge type, or a name that only one relation has)."""
        key = self._by_name.get(etype, etype) if isinstance(etype, str) else tuple(etype)
        if key not in self._relations:
            raise KeyError(f"{etype!r} is not an edge type of this block (or names several); choose from: {self.canonical_etypes}")
        return self._relations[key]

    @property
    def device(self) -> torch.device:
        return next(iter(self._relations.values())).device

    @property
    def idtype(self) -> torch.dtype:
        return next(iter(self._relations.values())).idtype

    # -- moving and building -----------------------------------------------------------------------

    def to(self, device: Device, non_blocking: bool = False) -> HeteroDeviceBlock:
        """This block on ``device``: ``self`` when already there, else a copy of every relation and
        every node and edge tensor there."""
        device = torch.device(device)
        if _same_device(self.device, device):
            return self

        def move(data: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            return {k: v.to(device, non_blocking=non_blocking) for k, v in data.items()}

        # The structure and edge data per relation; the node data once per type (the relations share it).
        relations = {
            key: DeviceBlock(
                *(t.to(device, non_blocking=non_blocking) for t in (rel.indptr, rel.indices)),
                rel.num_src_nodes(),
                edata=move(rel.edata),
                dst_in_src=rel.dst_in_src,
            )
            for key, rel in self._relations.items()
        }
        moved = HeteroDeviceBlock(relations, self._num_src, self._num_dst)
        for mine, theirs in ((self._src, moved._src), (self._dst, moved._dst)):
            for ntype, data in mine.items():
                theirs[ntype].update(move(data))
        return moved

    @classmethod
    def from_dgl(cls, block: Any, device: Device = "cpu", id_dtype: torch.dtype = torch.int64, edge_ids: bool = True) -> HeteroDeviceBlock:
        """The typed block of a DGL block or graph (any number of types): per canonical edge type,
        its CSC in ``id_dtype`` on ``device`` (with ``edata["_ID"]`` in CSC order when ``edge_ids``);
        per node type, the counts and ``srcdata``/``dstdata["_ID"]`` when the block has them. Other
        data is not copied. Raises TypeError for a non-DGL object or a bad ``id_dtype``."""
        _check_dgl_block(block, id_dtype)
        device = torch.device(device)
        relations = {key: _relation(block, key, device, id_dtype, edge_ids, with_nids=False) for key in block.canonical_etypes}
        typed = cls(relations, {t: block.num_src_nodes(t) for t in block.srctypes}, {t: block.num_dst_nodes(t) for t in block.dsttypes})
        from ..store.transfer import to_device

        for view, dgl_nodes, types in ((typed._src, block.srcnodes, block.srctypes), (typed._dst, block.dstnodes, block.dsttypes)):
            for ntype in types:
                if NID in dgl_nodes[ntype].data:
                    view[ntype][NID] = to_device(dgl_nodes[ntype].data[NID], device)
        return typed

    def record_stream(self, stream: torch.cuda.Stream) -> None:
        """As :meth:`DeviceBlock.record_stream`, for every relation and every node and edge tensor."""
        tensors = [t for rel in self._relations.values() for t in (rel.indptr, rel.indices)]
        tensors += [t for per_type in (self._src, self._dst, self._edges) for data in per_type.values() for t in data.values()]
        for t in tensors:
            if t.is_cuda:
                t.record_stream(stream)

    def _ntype(self, ntype: str, counts: dict[str, int]) -> str:
        if ntype not in counts:
            raise KeyError(f"{ntype!r} is not a node type of this block; choose from: {', '.join(counts)}")
        return ntype

    def __repr__(self) -> str:
        edges = {key: rel.num_edges() for key, rel in self._relations.items()}
        return f"HeteroDeviceBlock(num_src_nodes={self._num_src}, num_dst_nodes={self._num_dst}, num_edges={edges}, device={self.device}, idtype={self.idtype})"


def as_device_block(block: Any, device: Device) -> DeviceBlock | HeteroDeviceBlock:
    """``block`` on ``device`` as a :class:`DeviceBlock` (or a :class:`HeteroDeviceBlock` for a typed
    block): a DGL block is converted with :meth:`DeviceBlock.from_dgl`, a device block is returned
    as is or moved (``.to``)."""
    if isinstance(block, DeviceBlock | HeteroDeviceBlock):
        return block.to(device)
    return DeviceBlock.from_dgl(block, device)


def _check_dgl_block(block: Any, id_dtype: torch.dtype) -> None:
    if id_dtype not in ID_DTYPES:
        raise TypeError(f"id_dtype must be torch.int32 or torch.int64, but got {id_dtype}")
    try:
        import dgl
    except ImportError as err:
        raise ImportError("DeviceBlock.from_dgl needs DGL (pip install dgl); or build DeviceBlocks directly") from err
    if not isinstance(block, dgl.DGLGraph):
        raise TypeError(f"expected a DGL block (dgl.DGLGraph), but got {type(block).__name__}")


def _relation(block: Any, key: tuple[str, str, str], device: torch.device, id_dtype: torch.dtype, edge_ids: bool, with_nids: bool) -> DeviceBlock:
    """The DeviceBlock of relation ``key`` of a DGL block, on ``device``."""
    from ..store.transfer import to_device

    stype, _, dtype = key
    indptr, indices, order = _csc(block, key)
    # Copies are queued on the current stream without blocking the host (pinned first): on a
    # worker's side stream the consumer orders its reads after them (see record_stream).
    srcdata = {NID: to_device(block.srcdata[NID], device)} if with_nids and NID in block.srcdata else {}
    dstdata = {NID: to_device(block.dstdata[NID], device)} if with_nids and NID in block.dstdata else {}
    edata = {}
    if edge_ids:
        # The parent graph's ids in CSC order; a plain graph's own edge ids are its parent ids.
        parent = block.edges[key].data[EID] if EID in block.edges[key].data else None
        edata[EID] = to_device(order if parent is None else parent[order], device)
    # Cast on the host first, so an int32 block also moves half the bytes.
    return DeviceBlock(
        to_device(indptr.to(id_dtype), device),
        to_device(indices.to(id_dtype), device),
        block.num_src_nodes(stype),
        srcdata,
        dstdata,
        edata=edata,
        dst_in_src=stype == dtype,
    )


def _csc(block: Any, key: tuple[str, str, str] | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(indptr, indices, edge_ids)`` of relation ``key`` of a DGL graph (None: its only one), on
    the host; ``edge_ids`` is the position of each CSC edge in the block's own edge order."""
    key = key or block.canonical_etypes[0]
    formats = block.formats()
    if "csc" in formats["created"] + formats["not created"]:
        return block.adj_tensors("csc", etype=key)
    # The block was restricted to other sparse formats (DGL then refuses to build CSC): sort the
    # COO edges by destination instead.
    src, dst = block.edges(etype=key)
    order = torch.argsort(dst, stable=True)
    counts = torch.bincount(dst, minlength=block.num_dst_nodes(key[2]))
    indptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
    return indptr, src[order], order


def _same_device(a: torch.device, b: torch.device) -> bool:
    # torch.device("cuda") has no index; it means the current device.
    if a.type != b.type:
        return False
    if a.type == "cuda" and (a.index is None or b.index is None):
        return (a.index if a.index is not None else torch.cuda.current_device()) == (b.index if b.index is not None else torch.cuda.current_device())
    return a.index == b.index


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dim()}-D tensor of shape {tuple(value.shape)}"
    return type(value).__name__


def canonical_csr(crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """The same matrix as the CSR ``(crow, col, values)`` of ``size``, with each row's columns sorted
    and each (row, column) pair once, a repeated one holding the sum of its values: what cuSPARSE
    assumes of a CSR operand (it refuses ``nnz > rows * cols`` outright, which a block with repeated
    edges can have, and gives no guarantee for unsorted or repeated columns). ``adj @ x`` is unchanged.
    On ``col``'s device; crow and col int64 in the result. The merge reads back how many pairs are
    distinct: one device sync per matrix, paid once per block and direction (the matrix is cached)."""
    rows = torch.repeat_interleave(torch.arange(size[0], device=col.device), crow[1:] - crow[:-1], output_size=col.numel())
    coo = torch.sparse_coo_tensor(torch.stack([rows, col.long()]), values, size, check_invariants=False)
    return coo.coalesce().to_sparse_csr()
