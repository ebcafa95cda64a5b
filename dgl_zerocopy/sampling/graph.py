"""The in-edge CSC that the sampling kernels read, placed once: as it is on the host, pinned in place, or
copied into device memory.

Placements (``placement=``):

- ``"host"``: the CSC as it is, on the CPU, for the CPU backends (``emulator``, ``reference``).
- ``"pinned"``: the CSC registered with ``cudaHostRegister`` so that GPU threads read it over PCIe;
  unregistered by :meth:`close`. Tensors a caller hands in are registered in place (never a second
  copy) unless ``huge_pages=True``; a CSC this package builds (:meth:`SamplingGraph.from_dgl` of a graph
  without its own CSC) is copied into 2 MB pages first by default, since each sampled neighbour is a
  4-8 B read on a random page, the worst case for the GPU's address translation.
- ``"device"``: ``indptr`` and ``indices`` copied into device memory: the upper bound, as the
  ``gpu`` feature backend is for rows.

:meth:`SamplingGraph.placed` wraps a CSC already where the kernels read it (on a GPU, or on the host
for the CPU backends), with no copy: the GPU snapshot sampler's snapshot, which it rewrites in place.

The edge ids (the graph's id of each CSC position) are not read by the kernels and cross PCIe only
when something asks for them (:meth:`SamplingGraph.edge_ids`): on a pinned graph through a zero-copy
:class:`~dgl_zerocopy.FeatureStore` over them (pinned in place on first use), on a device graph from
a device copy made on first use.

A DGL graph is converted once (:meth:`SamplingGraph.from_dgl`: the tensors of ``g.adj_tensors("csc")``,
which are the graph's own CSC), and :func:`shared_graph` keeps one SamplingGraph per (graph,
placement, device) for everyone who samples that graph, so its pages are registered once.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any

import torch

from ..data.graph_check import check_csc
from ..store.host_memory import huge_page_copy, huge_pages_wanted
from ..store.pinning import PinnedRange

log = logging.getLogger(__name__)

PLACEMENTS = ("host", "pinned", "device")
ID_DTYPES = (torch.int32, torch.int64)


def edge_id_dtype(num_edges: int, idtype: torch.dtype, eids: torch.Tensor | None = None) -> torch.dtype:
    """The dtype of a graph's edge ids (:meth:`SamplingGraph.edge_ids`): its node ids' ``idtype``, as in
    DGL, while every edge id ``0 .. num_edges - 1`` fits it, else int64 (an int32 graph past 2**31 edges
    must not wrap its ids negative); never narrower than given edge ids ``eids``. Node ids keep ``idtype``."""
    dtype = idtype if num_edges - 1 <= torch.iinfo(idtype).max else torch.int64
    return torch.promote_types(dtype, eids.dtype) if eids is not None and eids.numel() > 0 else dtype


class SamplingGraph:
    """One homogeneous graph's in-edge CSC, where a sampling kernel reads it.

    Contract: ``indptr`` (``num_nodes + 1`` offsets, int32 or int64, starting at 0, never
    decreasing) and ``indices`` (the source node of each CSC position; int32 or int64, the graph's
    id dtype :attr:`idtype`) are 1-D CPU tensors; ``eids`` is the graph's edge id of each position,
    or None (or empty) when the positions are the edge ids; :meth:`edge_ids` returns them in
    :attr:`edge_idtype` (:func:`edge_id_dtype`: int64 past 2**31 edges, whatever :attr:`idtype`). The values
    are checked once, here (:func:`~dgl_zerocopy.data.graph_check.check_csc`: ``indptr`` from 0, never
    decreasing, ending at ``len(indices)``; every index in ``[0, num_nodes)``), since the CUDA kernels and
    their CPU twins index without bounds checks; the verdict is remembered for these tensors until they are
    written (their version), so a second SamplingGraph over them costs no second pass. ``checked=True`` skips
    the pass, for a caller that verified these very tensors (a graph file checked when it was opened).
    ``placement`` is one of :data:`PLACEMENTS`; ``device`` the CUDA device of ``"pinned"`` and
    ``"device"`` (default: the current one). ``"pinned"`` keeps the given tensors alive and reads
    them in place (same ``data_ptr``); a range page-locked already (``pin_memory()``) is used as it
    is and never unregistered. ``read_only`` pins with ``cudaHostRegisterReadOnly``: what a read-only
    file map needs (the caller checks :func:`~dgl_zerocopy.store.pinning.read_only_register_supported`;
    :func:`dgl_zerocopy.sampling.disk.sampling_graph` does). ``huge_pages=True`` (``"pinned"`` only) copies
    ``indptr`` and ``indices`` into 2 MB pages (:func:`~dgl_zerocopy.store.host_memory.huge_page_copy`: their
    size again in RAM) and pins the copies instead; where huge pages are unavailable, or under
    ``DGL_ZEROCOPY_HUGE_PAGES=0``, the given tensors are pinned in place (with one warning when
    unavailable). :meth:`close` (idempotent; also ``with``) waits for the device, then unregisters what
    this object registered and drops device copies and 2 MB-page copies.

    Raises:
        TypeError: an array that is not a 1-D int32/int64 torch tensor.
        ValueError: an array not on the CPU or not contiguous; a malformed ``indptr`` (named with its first bad
            position and value); an unknown placement.
        IndexError: an index outside ``[0, num_nodes)``, named with its position and value (before anything is
            pinned or copied).
    """

    def __init__(
        self,
        indptr: torch.Tensor,
        indices: torch.Tensor,
        eids: torch.Tensor | None = None,
        *,
        placement: str = "host",
        device: Any = None,
        read_only: bool = False,
        checked: bool = False,
        huge_pages: bool = False,
    ) -> None:
        _check_csc(indptr, indices, eids)
        if not checked:
            check_csc(indptr, indices, indptr.numel() - 1, name="SamplingGraph", fix="build the CSC from valid edges (ids in [0, num_nodes))")
        if placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}, but got {placement!r}")
        self.placement = placement
        self.device = torch.device("cpu") if placement == "host" else _cuda_device(device, placement)
        self.num_nodes = indptr.numel() - 1
        self.num_edges = indices.numel()
        self.idtype = indices.dtype
        self.edge_idtype = edge_id_dtype(self.num_edges, indices.dtype, eids)
        self._eids = eids if eids is not None and eids.numel() > 0 else None
        self._pins: list[PinnedRange] = []
        self._eid_source: Any = None  # made on the first edge_ids(): a FeatureStore or a device tensor
        self._lock = threading.Lock()
        self.closed = False
        self.huge_page_copies = False  # True: indptr or indices (or both) is a copy of ours in 2 MB pages
        if placement == "pinned" and huge_pages:
            given = (indptr, indices)
            copies = [huge_page_copy(t, f"the CSC's {name}") for name, t in zip(("indptr", "indices"), given)]  # None: under 2 MB, or none
            indptr, indices = (t if c is None else c for c, t in zip(copies, given))
            self.huge_page_copies = any(c is not None for c in copies)
        self._host = (indptr, indices)  # kept alive while pinned
        if placement == "pinned":
            try:
                for t in (indptr, indices):
                    self._pins.append(PinnedRange(t.data_ptr(), t.numel() * t.element_size(), read_only=read_only))
            except BaseException:
                self._unpin()  # nothing stays registered after a failure
                raise
        if placement == "device":
            self.indptr, self.indices = indptr.to(self.device), indices.to(self.device)
        else:
            self.indptr, self.indices = indptr, indices

    @classmethod
    def from_dgl(cls, g: Any, placement: str = "host", device: Any = None, huge_pages: bool | None = None) -> SamplingGraph:
        """The in-edge CSC of the homogeneous DGL graph ``g`` (on the CPU), placed as asked. The
        tensors are the graph's own CSC (``g.adj_tensors("csc")``, built by DGL once and kept in the
        graph), pinned in place unless ``huge_pages=True``; a graph restricted to other sparse formats gets
        a CSC sorted from its COO edges, ours, which ``"pinned"`` copies into 2 MB pages unless
        ``huge_pages=False`` (or ``DGL_ZEROCOPY_HUGE_PAGES=0``).
        Raises TypeError for a non-DGL object and ValueError for a heterograph or a graph not on the CPU."""
        check_homogeneous(g)
        indptr, indices, eids = dgl_csc(g)
        if huge_pages is None:
            huge_pages = huge_pages_wanted() and not dgl_has_csc(g)
        return cls(indptr, indices, eids, placement=placement, device=device, huge_pages=huge_pages)

    @classmethod
    def placed(cls, indptr: torch.Tensor, indices: torch.Tensor, eids: torch.Tensor | None = None, *, edge_idtype: torch.dtype | None = None) -> SamplingGraph:
        """A CSC whose tensors are already where the kernels read them, used as they are (no copy, no
        pinning): on one CUDA device (placement ``"device"``) or on the CPU (``"host"``, for the CPU
        backends). ``eids`` (the edge id of each position, on the same device, or None) is read by
        :meth:`edge_ids`, which returns ``edge_idtype`` (default: :func:`edge_id_dtype` of this CSC; a
        snapshot's edge ids name edges of a larger graph, whose dtype its maker passes). Whoever made the
        tensors may rewrite them in place (the GPU snapshot's refresh does) and orders those writes
        against the kernels that read them; :meth:`close` waits for the device and drops them."""
        device = indptr.device
        for name, t in (("indptr", indptr), ("indices", indices), ("eids", eids)):
            if t is None:
                continue
            if t.dim() != 1 or t.dtype not in ID_DTYPES or not t.is_contiguous():
                raise TypeError(f"{name} must be a contiguous 1-D int32 or int64 tensor, but got {t.dtype} of shape {tuple(t.shape)}")
            if t.device != device:
                raise ValueError(f"{name} is on {t.device} but indptr on {device}: a placed graph lives on one device")
        if indptr.numel() < 1:
            raise ValueError("indptr must hold num_nodes + 1 >= 1 offsets, but it is empty")
        graph = cls.__new__(cls)  # nothing to place: __init__'s copies and pinning do not apply
        graph.placement = "device" if device.type == "cuda" else "host"
        graph.device = device
        graph.num_nodes, graph.num_edges, graph.idtype = indptr.numel() - 1, indices.numel(), indices.dtype
        graph.edge_idtype = edge_idtype or edge_id_dtype(indices.numel(), indices.dtype, eids)
        graph._host = None
        graph._eids = eids if eids is not None and eids.numel() > 0 else None
        graph._pins, graph._lock, graph.closed, graph.huge_page_copies = [], threading.Lock(), False, False
        graph._eid_source = graph._eids if graph.placement == "device" else None
        graph.indptr, graph.indices = indptr, indices
        return graph

    # -- edge ids -----------------------------------------------------------------------------------

    def edge_ids(self, pos: torch.Tensor) -> torch.Tensor:
        """The graph's edge id of each CSC position in ``pos`` (int64, on the device that sampled: the
        CPU for ``"host"``, :attr:`device` otherwise), in :attr:`edge_idtype`, on ``pos``'s device. The
        positions come from a sampling kernel over this graph, so they are not range-checked again."""
        if self.closed:
            raise RuntimeError("this SamplingGraph is closed; sample from an open one")
        if self._eids is None:
            return pos.to(self.edge_idtype)
        if self.placement == "host":
            return self._eids[pos.to(self._eids.device)].to(self.edge_idtype)
        source = self._edge_id_source()
        if isinstance(source, torch.Tensor):
            return source[pos].to(self.edge_idtype)
        return source.gather(pos, unchecked=True).view(-1).to(self.edge_idtype)

    def _edge_id_source(self) -> Any:
        with self._lock:
            if self._eid_source is None:
                if self.placement == "device":
                    self._eid_source = self._eids.to(self.device)
                else:
                    from ..store.feature_store import FeatureStore

                    # A one-column table: the zero-copy gather reads each asked id over PCIe, in place.
                    self._eid_source = FeatureStore(self._eids.view(-1, 1), backend="zerocopy", device=self.device)
            return self._eid_source

    # -- lifecycle ------------------------------------------------------------------------------------

    def close(self) -> None:
        """Wait for the kernels that may read the graph (the device is synchronized: closing is rare),
        then unregister the pages this object registered and drop device copies. Idempotent."""
        if self.closed:
            return
        self.closed = True
        if self.placement != "host" and torch.cuda.is_available():
            torch.cuda.synchronize(self.device)
        if self._eid_source is not None and not isinstance(self._eid_source, torch.Tensor):
            self._eid_source.close()
        self._eid_source = None
        self._unpin()
        if self.placement == "device" or self.huge_page_copies:
            self.indptr = self.indices = self._host = None  # our copies are freed (unmapped) with their last reference

    def _unpin(self) -> None:
        for pin in self._pins:
            pin.unpin()
        self._pins.clear()

    @property
    def pinned(self) -> bool:
        """True while this object holds pages it registered itself."""
        return any(pin.pinned for pin in self._pins)

    def __enter__(self) -> SamplingGraph:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"SamplingGraph(num_nodes={self.num_nodes}, num_edges={self.num_edges}, idtype={self.idtype}, placement={self.placement!r}, device={self.device})"
        )


# -- DGL graphs -----------------------------------------------------------------------------------------


def check_homogeneous(g: Any, sampler: str = "GPU sampling", also_takes: str = " or a SamplingGraph") -> None:
    """Raise TypeError unless ``g`` is a DGL graph, ValueError unless it has one node and edge type and lives on the CPU.

    ``sampler`` names who samples it in the messages; ``also_takes`` what else it accepts besides a DGL graph."""
    import dgl

    if not isinstance(g, dgl.DGLGraph):
        raise TypeError(f"{sampler} samples a DGL graph (dgl.DGLGraph){also_takes}, but got {type(g).__name__}")
    if len(g.ntypes) != 1 or len(g.canonical_etypes) != 1:
        raise ValueError(
            f"{sampler} samples graphs with one node type and one edge type, but this one has node types {g.ntypes} "
            f"and edge types {g.canonical_etypes}; sample it with dgl.dataloading.NeighborSampler"
        )
    if g.device.type != "cpu":
        raise ValueError(f"the graph is on {g.device}; {sampler} reads a graph on the CPU: pass g.to('cpu')")


def dgl_has_csc(g: Any) -> bool:
    """Whether DGL keeps a CSC of ``g`` itself (made or allowed), so that :func:`dgl_csc` returns DGL's tensors."""
    formats = g.formats()
    return "csc" in formats["created"] + formats["not created"]


def dgl_csc(g: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``(indptr, indices, eids)`` of ``g``'s in-edges; ``eids`` None when the CSC positions are the edge ids."""
    if dgl_has_csc(g):
        indptr, indices, eids = g.adj_tensors("csc")
    else:
        # DGL refuses to build CSC for a graph restricted to other formats: sort the COO edges by destination.
        src, dst = g.edges()
        eids = torch.argsort(dst, stable=True)
        counts = torch.bincount(dst.long(), minlength=g.num_nodes())
        indptr, indices = torch.cat([counts.new_zeros(1), counts.cumsum(0)]).to(g.idtype), src[eids]
    return indptr, indices, (eids if eids.numel() > 0 else None)


class GraphStamp:
    """What a sampler records of the DGL graph it builds from, to tell at each call, cheaply, whether
    the graph was changed in place since (``add_nodes``, ``add_edges``, ``remove_nodes``,
    ``remove_edges``). DGL gives the graph a new structure object (``g._graph``, its graph index) at
    each such change and never alters one: a weak reference to the one seen at the stamp, compared
    with the graph's current one, is a pointer comparison and keeps nothing of the old graph alive.
    Without that object (another DGL), the node and edge counts are compared."""

    def __init__(self, g: Any) -> None:
        self.num_nodes, self.num_edges = g.num_nodes(), g.num_edges()
        index = getattr(g, "_graph", None)
        try:
            self._index = weakref.ref(index) if index is not None else None
        except TypeError:  # not weakly referable: the counts only
            self._index = None

    def changed(self, g: Any) -> str | None:
        """None when ``g`` is the graph as it was at the stamp; else what changed, in words."""
        if self._index is not None and self._index() is getattr(g, "_graph", None):
            return None
        now = g.num_nodes(), g.num_edges()
        if now == (self.num_nodes, self.num_edges):
            return None if self._index is None else f"its edges changed, {now[0]} nodes and {now[1]} edges as before"
        return f"{self.num_nodes} nodes and {self.num_edges} edges then, {now[0]} and {now[1]} now"


# -- one SamplingGraph per (DGL graph, placement, device) ------------------------------------------------

_shared: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # DGL graph -> {key: [SamplingGraph, users]}
_shared_lock = threading.Lock()


def shared_graph(g: Any, placement: str, device: Any = None, *, hold: bool = False) -> SamplingGraph:
    """The SamplingGraph of DGL graph ``g`` for ``placement`` on ``device``, made on first use and
    shared: every caller gets the same one (a graph's pages can be registered only once), and gives
    it back with :func:`release`. It is closed when its last user releases it, or when ``g`` is
    garbage-collected. ``hold``: keep it open for as long as ``g`` lives (no release needed; what
    :func:`~.neighbor.sample_neighbors` asks, so that repeated calls do not pin the graph again).
    A graph changed in place since (``add_edges``, ``remove_edges``: :class:`GraphStamp`) gets a new
    one; the old one stays with its users until they give it back."""
    check_homogeneous(g)
    device = torch.device("cpu") if placement == "host" else _cuda_device(device, placement)
    key = (placement, str(device), g.num_nodes(), g.num_edges(), g.idtype, id(getattr(g, "_graph", None)))
    with _shared_lock:
        per_graph = _shared.get(g)
        if per_graph is None:
            per_graph = _shared[g] = {}
        entry = per_graph.get(key)
        if entry is None or entry.graph.closed or entry.stamp.changed(g):  # (an id reused by a newer index)
            entry = per_graph[key] = _Entry(SamplingGraph.from_dgl(g, placement, device), GraphStamp(g))
            # Closed with the DGL graph at the latest; the finalizer holds the SamplingGraph, never g.
            weakref.finalize(g, entry.graph.close)
        if hold:
            entry.held = True
        else:
            entry.users += 1
        return entry.graph


def release(graph: SamplingGraph) -> None:
    """Give back a graph from :func:`shared_graph`; the last user's release closes it (unless it is held)."""
    with _shared_lock:
        for per_graph in list(_shared.values()):
            for key, entry in list(per_graph.items()):
                if entry.graph is graph:
                    entry.users -= 1
                    if entry.users <= 0 and not entry.held:
                        del per_graph[key]
                        graph.close()
                    return


class _Entry:
    def __init__(self, graph: SamplingGraph, stamp: GraphStamp) -> None:
        self.graph, self.stamp, self.users, self.held = graph, stamp, 0, False


# -- checks -----------------------------------------------------------------------------------------------


def _check_csc(indptr: Any, indices: Any, eids: Any) -> None:
    for name, t in (("indptr", indptr), ("indices", indices), ("eids", eids)):
        if t is None and name == "eids":
            continue
        if not isinstance(t, torch.Tensor) or t.dim() != 1:
            raise TypeError(f"{name} must be a 1-D torch tensor, but got {type(t).__name__}")
        if t.dtype not in ID_DTYPES:
            raise TypeError(f"{name} must be int32 or int64, but got {t.dtype}; convert it with .long()")
        if t.device.type != "cpu" or not t.is_contiguous():
            raise ValueError(f"{name} must be a contiguous CPU tensor (a SamplingGraph places it itself), but got one on {t.device}")
    if indptr.numel() < 1:
        raise ValueError("indptr must hold num_nodes + 1 >= 1 offsets, but it is empty")
    if eids is not None and eids.numel() not in (0, indices.numel()):
        raise ValueError(f"eids must hold one edge id per CSC position ({indices.numel()}), or none, but it holds {eids.numel()}")


def _cuda_device(device: Any, placement: str) -> torch.device:
    device = torch.device("cuda") if device is None else torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"placement {placement!r} is for a CUDA device, but got device {str(device)!r}; use placement='host' on the CPU")
    if device.index is None:
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else device
    return device
