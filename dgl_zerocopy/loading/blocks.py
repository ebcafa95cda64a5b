"""Device-side message-flow blocks: the CSC structure of one sampled DGL block, on any torch device.

PyPI's DGL is a CPU build, so its blocks cannot move to CUDA. A :class:`DeviceBlock` holds what the
layers in :mod:`dgl_zerocopy.nn` need (CSC ``indptr`` and ``indices``, the node counts, and the
``_ID`` of the nodes) as plain torch tensors, so it lives wherever the features live.

Block convention (DGL's): the destination nodes are the first ``num_dst_nodes()`` source nodes, so
the destination features are ``x[:num_dst_nodes()]`` of the source features ``x``.

This module does not import DGL; only :meth:`DeviceBlock.from_dgl` does, when called.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

ID_DTYPES = (torch.int32, torch.int64)
# DGL's key for the parent graph's node ids (``dgl.NID``), written here so DGL need not be imported.
NID = "_ID"

Device = torch.device | str | int


class DeviceBlock:
    """One bipartite block in CSC form: destination ``v``'s in-edges come from the source-local ids
    ``indices[indptr[v]:indptr[v + 1]]``.

    Contract: ``indptr`` (``num_dst + 1``) and ``indices`` (``num_edges``) are 1-D tensors of one
    integer dtype (int32 or int64) on one device; ``indptr`` starts at 0, never decreases and ends
    at ``num_edges``; every index is in ``[0, num_src)``; ``num_src >= num_dst``. The constructor
    checks dtypes, shapes and devices (cheap, no device sync) but trusts the values:
    :meth:`from_dgl` builds them correctly. ``srcdata``/``dstdata`` hold per-node tensors
    (first dimension ``num_src`` / ``num_dst``) on the same device.

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
        if num_src < indptr.numel() - 1:
            raise ValueError(f"num_src ({num_src}) must be at least num_dst ({indptr.numel() - 1}): destinations are the first sources")
        self.indptr = indptr
        self.indices = indices
        self._num_src = num_src
        self.srcdata: dict[str, torch.Tensor] = dict(srcdata or {})
        self.dstdata: dict[str, torch.Tensor] = dict(dstdata or {})
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
        tensors and every ``srcdata``/``dstdata`` tensor copied there."""
        device = torch.device(device)
        if _same_device(self.device, device):
            return self

        def move(t: torch.Tensor) -> torch.Tensor:
            return t.to(device, non_blocking=non_blocking)

        return DeviceBlock(
            move(self.indptr), move(self.indices), self._num_src, {k: move(v) for k, v in self.srcdata.items()}, {k: move(v) for k, v in self.dstdata.items()}
        )

    @classmethod
    def from_dgl(cls, block: Any, device: Device = "cpu", id_dtype: torch.dtype = torch.int64) -> DeviceBlock:
        """The :class:`DeviceBlock` of a DGL block (or of a homogeneous DGL graph, whose sources and
        destinations are the same nodes), with ``indptr``/``indices`` in ``id_dtype`` on ``device``
        and the node ids ``srcdata["_ID"]``/``dstdata["_ID"]`` carried when the block has them (in
        the block's own id dtype, since they index the parent graph). Other node data is not copied.

        Raises TypeError for a non-DGL object or a bad ``id_dtype``, and ValueError for a block with
        several node or edge types (convert each relation ``block[etype]`` on its own)."""
        if id_dtype not in ID_DTYPES:
            raise TypeError(f"id_dtype must be torch.int32 or torch.int64, but got {id_dtype}")
        try:
            import dgl
        except ImportError as err:
            raise ImportError("DeviceBlock.from_dgl needs DGL (pip install dgl); or build DeviceBlocks directly") from err
        if not isinstance(block, dgl.DGLGraph):
            raise TypeError(f"expected a DGL block (dgl.DGLGraph), but got {type(block).__name__}")
        if len(block.canonical_etypes) != 1 or len(block.srctypes) != 1 or len(block.dsttypes) != 1:
            raise ValueError(
                f"only blocks with one node type and one edge type are supported, but got edge types "
                f"{block.canonical_etypes}; convert each relation block[etype] on its own"
            )
        from ..store.transfer import to_device

        indptr, indices = _csc(block)
        device = torch.device(device)
        # Copies are queued on the current stream without blocking the host (pinned first): on a
        # worker's side stream the consumer orders its reads after them (see record_stream).
        srcdata = {NID: to_device(block.srcdata[NID], device)} if NID in block.srcdata else {}
        dstdata = {NID: to_device(block.dstdata[NID], device)} if NID in block.dstdata else {}
        # Cast on the host first, so an int32 block also moves half the bytes.
        return cls(to_device(indptr.to(id_dtype), device), to_device(indices.to(id_dtype), device), block.num_src_nodes(), srcdata, dstdata)

    def record_stream(self, stream: torch.cuda.Stream) -> None:
        """Mark every CUDA tensor of this block as used on ``stream`` (``Tensor.record_stream``), so
        the caching allocator does not reuse its memory before ``stream`` is done with it: what a
        producer on another stream calls before handing the block over. (Derived tensors are built
        on the consumer's stream, on first use, and need no record.)"""
        for t in (self.indptr, self.indices, *self.srcdata.values(), *self.dstdata.values()):
            if t.is_cuda:
                t.record_stream(stream)

    def __repr__(self) -> str:
        return (
            f"DeviceBlock(num_src_nodes={self._num_src}, num_dst_nodes={self.num_dst_nodes()}, "
            f"num_edges={self.num_edges()}, device={self.device}, idtype={self.idtype})"
        )


def as_device_block(block: Any, device: Device) -> DeviceBlock:
    """``block`` as a :class:`DeviceBlock` on ``device``: a DGL block is converted with
    :meth:`DeviceBlock.from_dgl`, a DeviceBlock is returned as is or moved (:meth:`DeviceBlock.to`)."""
    if isinstance(block, DeviceBlock):
        return block.to(device)
    return DeviceBlock.from_dgl(block, device)


def _csc(block: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``(indptr, indices)`` of a one-relation DGL graph, on the host.

    DGL's CSC also gives edge ids (the CSC order's position of each edge in the block's edge
    order); the layers aggregate unweighted messages, so the order of edges is irrelevant and the
    ids are dropped."""
    formats = block.formats()
    if "csc" in formats["created"] + formats["not created"]:
        indptr, indices, _edge_ids = block.adj_tensors("csc")
        return indptr, indices
    # The block was restricted to other sparse formats (DGL then refuses to build CSC): sort the
    # COO edges by destination instead.
    src, dst = block.edges()
    order = torch.argsort(dst, stable=True)
    counts = torch.bincount(dst, minlength=block.num_dst_nodes())
    indptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
    return indptr, src[order]


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
