"""Snapshot sampling on the GPU: :class:`GpuSnapshotSampler`, the snapshot of
:class:`~.snapshot.SnapshotSampler` in device memory, sampled and refreshed with the GPU sampler's kernels.

The snapshot is the CPU sampler's compact CSC (:class:`~.snapshot_csc.Snapshot`: node ``v`` owns the
``min(deg(v), snapshot_size)`` slots ``indptr[v]:indptr[v + 1]``, each an in-edge's source ``src`` and
original edge id ``eid``; ids int32 where they fit), allocated once on the sampling device and read
by the kernels as a :class:`~.graph.SamplingGraph` placed there (``src`` its indices, ``eid`` its edge ids):

- **a batch**: each layer is ``sample_csc`` over the snapshot with the layer's fanout (the picks of
  :class:`~.neighbor.GpuNeighborSampler`, which samples it: one size read per batch), so a batch
  reads device memory only, no PCIe. The blocks are ``DeviceBlock``\\ s in the graph's id dtype
  (written so by the kernels over the compact snapshot), with ``dgl.NID`` and ``dgl.EID`` of the
  original graph (``EID``: the snapshot's ``eid`` at each picked slot, read by the fetch kernel, on
  the sampling stream: a later refresh rewrites the slots).
- **the build and each refresh**: ``sample_csc`` over the full CSC, read where the GPU sampler reads
  it (pinned in place by default, over PCIe), with fanout ``snapshot_size`` at the nodes to redraw:
  its picks per node are ``min(deg, snapshot_size)`` distinct in-edges, uniform, exactly the node's
  slot count, and are scattered into the node's slots on the device with their edge ids (one size
  read per chunk of nodes). Refresh unit, order and guarantee as the CPU sampler's (nodes, a
  :class:`~.snapshot_csc.RefreshOrder`, ``ceil(refresh * n)`` of the ``n`` partial nodes per epoch).

Streams: the snapshot is written on the stream current at the build or refresh (the loader's: the
consumer's, at the start of an epoch) and read on the stream current at each batch (the loader's
side stream). :class:`StreamOrder` orders the two on the device, with no host wait: a batch's stream
waits for the event recorded after the last write, and a write's stream waits for the event recorded
after the last batch of every stream that sampled (the loader's last prefetched batches may still be
running there when the next epoch's refresh is enqueued). The CPU backends finish each call on the
host: they order nothing and make no CUDA stream or event.

Devices: ``"cuda"``/``"cuda:N"``, or the CPU backends ``"emulator"`` (the same kernel source built for
the CPU) and ``"reference"`` (its NumPy twin), which keep the snapshot on the host and read the full
CSC as it is.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from .graph import GraphStamp, SamplingGraph, check_homogeneous, release, shared_graph
from .layer import as_seeds, check_placement, draw_seed, resolve_device, sample_layer
from .neighbor import GpuNeighborSampler
from .snapshot import SnapshotHolder, announce_rebuild, check_options, slots_per_node
from .snapshot_csc import RefreshOrder, Snapshot, id_dtype

log = logging.getLogger(__name__)

#: Picks per refresh chunk (``sample_csc`` reads its total back once per chunk; its scratch is about
#: 40 bytes a pick on the device).
CHUNK_PICKS = 1 << 22


class StreamOrder:
    """Orders the snapshot's writes (build, refresh) against its reads (batches) across CUDA streams
    with events, on the device: :meth:`before_read`/:meth:`after_read` around a batch,
    :meth:`before_write`/:meth:`after_write` around a write, each on the calling thread's current
    stream of ``device``. One read event per stream that sampled, recorded again by each batch (a
    stream runs in order: the last record covers the earlier batches). Only ``backend`` ``"cuda"``
    runs on CUDA streams; for the CPU backends (``"emulator"``, ``"reference"``) nothing is ordered and
    no stream or event is made, even where CUDA is available."""

    def __init__(self, device: torch.device, backend: str) -> None:
        # The CPU backends run each call to its end on the host: asking for a stream would create a
        # CUDA context (and events) that nothing ever waits on.
        self.device = device if backend == "cuda" else None
        self.written: Any = None  # recorded after the last write
        self.reads: dict[Any, tuple[Any, Any]] = {}  # stream key -> (stream, event after its last batch)

    def _current(self) -> Any:
        return torch.cuda.current_stream(self.device) if self.device is not None else None

    def before_read(self) -> None:
        stream = self._current()
        if stream is not None and self.written is not None:
            stream.wait_event(self.written)

    def after_read(self) -> None:
        stream = self._current()
        if stream is None:
            return
        key = getattr(stream, "cuda_stream", id(stream))
        if key not in self.reads:
            self.reads[key] = (stream, torch.cuda.Event())
        self.reads[key][1].record(stream)

    def before_write(self) -> None:
        stream = self._current()
        if stream is not None:
            for _, event in self.reads.values():
                stream.wait_event(event)

    def after_write(self) -> None:
        stream = self._current()
        if stream is not None:
            self.written = torch.cuda.Event()
            self.written.record(stream)


class GpuSnapshotSampler(SnapshotHolder):
    """:class:`~.snapshot.SnapshotSampler` with its snapshot on the sampling device: ``sample(g,
    seeds)`` returns ``(input_nodes, output_nodes, blocks)`` as :class:`~.neighbor.GpuNeighborSampler`
    does (one ``DeviceBlock`` per layer, the input layer first, destinations first among the sources,
    in ``g``'s id dtype, ``srcdata``/``dstdata[dgl.NID]`` and ``edata[dgl.EID]`` of ``g``, the edge ids
    int64 when ``g`` has more than 2**31 edges), each
    destination with ``min(in-degree, fanout)`` distinct in-edges drawn uniformly from its snapshot.

    ``fanouts``, ``snapshot_size``, ``refresh``: as :class:`~.snapshot.SnapshotSampler`'s (checked
    the same way). ``device``: ``"cuda"``/``"cuda:N"``, ``"emulator"`` or ``"reference"``;
    ``placement``: where the CUDA kernels read the full CSC for the build and the refreshes,
    ``"pinned"`` (in place) or ``"device"`` (a copy); the snapshot itself is always in device memory
    (on the host for the CPU backends). ``output_device``: where the blocks go (default: the sampling device).

    ``g``: a homogeneous DGL graph on the CPU, or a :class:`~.graph.SamplingGraph` of the full CSC.
    The snapshot of ``g`` is built on its first :meth:`sample` or :meth:`on_epoch_start` (draws from
    torch's default generator: ``torch.manual_seed`` reproduces it, on every backend alike);
    :meth:`refresh_snapshot` (or :meth:`on_epoch_start`, the loader's epoch hook) redraws the next
    ``ceil(refresh * n)`` of the ``n`` nodes whose snapshot is partial. A batch reads only the
    snapshot. A DGL graph changed in place since the build gets a new snapshot, with a warning (as
    :class:`~.snapshot.SnapshotSampler`'s); the build's fanout is ``min(snapshot_size, largest
    in-degree)``. :meth:`close` (or ``with``) waits for the device, frees the snapshot and gives back
    the full CSC (a later :meth:`sample` builds a new snapshot).
    """

    def __init__(
        self,
        fanouts: Sequence[int],
        snapshot_size: int | None = None,
        refresh: float = 0.25,
        *,
        device: Any = "cuda",
        placement: str = "pinned",
        output_device: Any = None,
    ) -> None:
        self.fanouts, self.snapshot_size, self.refresh = check_options(fanouts, snapshot_size, refresh)
        if placement not in ("pinned", "device"):
            raise ValueError(f"placement must be 'pinned' or 'device' (where the refresh reads the full CSC), but got {placement!r}")
        self.backend, self.device = resolve_device(device)
        self.placement = placement if self.backend == "cuda" else "host"
        self.output_device = torch.device(output_device) if output_device is not None else self.device
        # The layers' sampler moves the blocks to output_device itself, their edge ids still lazy.
        self._layers = GpuNeighborSampler(self.fanouts, device=self.backend if self.backend != "cuda" else self.device, output_device=self.output_device)
        self._order_streams = StreamOrder(self.device, self.backend)
        self._source: Any = None  # the graph the snapshot was built from (a DGL graph or a SamplingGraph)
        self._stamp: GraphStamp | None = None  # that DGL graph as it was (a change in place rebuilds)
        self._full: SamplingGraph | None = None  # its full CSC, where the kernels read it
        self._shared = False  # whether _full came from shared_graph (given back at close)
        self._graph: SamplingGraph | None = None  # the snapshot, placed for the kernels
        self._out_dtype = torch.int64
        self._hold_nothing()

    # -- the snapshot -----------------------------------------------------------------------------

    @property
    def full_csc_nbytes(self) -> int:
        """Bytes of the full in-edge CSC the refresh reads (indptr and indices; 0 before the build)."""
        full = self._full
        return 0 if full is None else sum(t.numel() * t.element_size() for t in (full.indptr, full.indices))

    def refresh_snapshot(self, g: Any = None) -> int:
        """Redraw the next ``ceil(refresh * n)`` of the ``n`` nodes whose snapshot is partial, on the
        current stream; returns how many. ``g``: the graph (default: the one sampled last); a graph
        without a snapshot, or changed in place since its build (a warning), gets one built (which
        counts as 0). Without a snapshot and ``g``, nothing."""
        with self._lock:
            if g is None and self._snapshot is not None:
                g = self._source
            if g is not None and not self._bound_to(g):
                self._build(g)
                return 0
            if self._snapshot is None:
                return 0
            nodes = self._order.take(math.ceil(self.refresh * self._order.nodes.numel()))
            self._fill(nodes)
            self.nodes_refreshed += nodes.numel()
            return nodes.numel()

    def _bound_to(self, g: Any) -> bool:
        """Whether the snapshot is ``g``'s, as it was at the build (a DGL graph changed in place since
        is announced, and the caller builds anew)."""
        if self._snapshot is None or self._source is not g or self._full is None or self._full.closed:
            return False
        changed = self._stamp.changed(g) if self._stamp is not None else None
        if changed is not None:
            announce_rebuild("GpuSnapshotSampler", changed)
        return changed is None

    def _build(self, g: Any) -> None:
        self._drop()
        if isinstance(g, SamplingGraph):
            check_placement(g, self.backend, self.device)
            full, self._shared, self._out_dtype, self._stamp = g, False, g.idtype, None
        else:
            check_homogeneous(g)
            full = shared_graph(g, self.placement, self.device if self.backend == "cuda" else None)
            self._shared, self._out_dtype, self._stamp = True, g.idtype, GraphStamp(g)
        self._source, self._full = g, full
        self._layers.node_dtype = self._out_dtype  # the kernels write the graph's ids over the compact snapshot
        deg = (full.indptr[1:] - full.indptr[:-1]).cpu().long()  # the host's (pinned) offsets, or one read of a device copy
        self._slots = slots_per_node(deg, self.snapshot_size, "GpuSnapshotSampler")
        keep = deg.clamp(max=self._slots)
        total = int(keep.sum())
        indptr = torch.zeros(full.num_nodes + 1, dtype=torch.int64)
        torch.cumsum(keep, 0, out=indptr[1:])
        where = self.device
        snap = Snapshot(
            indptr.to(id_dtype(total)).to(where),
            torch.empty(total, dtype=id_dtype(full.num_nodes - 1), device=where),
            torch.empty(total, dtype=id_dtype(full.num_edges - 1), device=where),
        )
        self._snapshot = snap
        # The slots' edge ids name edges of the full graph: its edge id dtype (int64 past 2**31 edges), not the node ids'.
        # Without edge ids of its own: a batch's fetch reads each pick's edge id from snap.eid at once.
        self._graph = SamplingGraph.placed(snap.indptr, snap.src, edge_idtype=full.edge_idtype)
        self._order = RefreshOrder(torch.nonzero(deg > self._slots).squeeze(1))
        self.nodes_refreshed = 0
        self._fill(torch.arange(full.num_nodes))
        log.info("snapshot of %d nodes on %s: %d of %d in-edges, %d bytes", full.num_nodes, where, total, full.num_edges, snap.nbytes)

    def _fill(self, nodes: torch.Tensor) -> None:
        """Redraw the slots of ``nodes`` (distinct int64 ids on the host) from the full CSC: per chunk,
        ``sample_csc`` with fanout ``min(snapshot_size, largest in-degree)`` (the same picks as
        ``snapshot_size``; one host read: its total) and a scatter of the picks' sources and edge ids
        into the nodes' slots, all on the current stream."""
        snap, full, size = self._snapshot, self._full, self._slots
        if nodes.numel() == 0 or size == 0:
            return  # snapshot_size 0 (every fanout 0, as check_options allows) or no edges: no slot to draw, blocks without edges
        self._order_streams.before_write()
        step = max(1, CHUNK_PICKS // size)
        for lo in range(0, nodes.numel(), step):
            chunk = as_seeds(nodes[lo : lo + step], full, self.device)
            picks = sample_layer(full, chunk, size, False, draw_seed(), self.backend)
            total = picks.src.numel()
            # Pick j of the chunk's node i goes to slot indptr[node] + (j - first pick of i): the
            # picks per node are min(deg, size), the node's slot count, in the slots' order.
            # (searchsorted, not repeat_interleave: with DGL loaded, that takes ~20 ms a call on the CPU)
            at = torch.arange(total, device=chunk.device)
            owner = torch.searchsorted(picks.indptr[1:], at, right=True)
            start = torch.index_select(snap.indptr, 0, chunk.long()).long() - picks.indptr[:-1]
            slots = torch.index_select(start, 0, owner) + at
            snap.src.index_copy_(0, slots, picks.src.to(snap.src.dtype))
            snap.eid.index_copy_(0, slots, full.edge_ids(picks.pos).to(snap.eid.dtype))
        self._order_streams.after_write()

    # -- sampling ---------------------------------------------------------------------------------

    def sample(self, g: Any, seeds: Any, exclude_eids: Any = None) -> tuple[torch.Tensor, torch.Tensor, list]:
        """:meth:`sample_blocks` (the loader serves the prefetched data itself)."""
        return self.sample_blocks(g, seeds, exclude_eids)

    def sample_blocks(self, g: Any, seeds: Any, exclude_eids: Any = None) -> tuple[torch.Tensor, torch.Tensor, list]:
        """``(input_nodes, output_nodes, blocks)`` for the seed nodes ``seeds`` of ``g`` from the
        snapshot (built on first use), on the current stream; one host read per batch (the GPU
        sampler's size read). Raises IndexError for a seed outside the graph."""
        if exclude_eids is not None:
            raise ValueError("GpuSnapshotSampler does not exclude edges (exclude=); sample with dgl.dataloading.NeighborSampler for that")
        if isinstance(seeds, Mapping):
            raise ValueError("seeds per node type (a dict) are for heterographs; GpuSnapshotSampler samples homogeneous graphs: pass one tensor")
        with self._lock:
            if not self._bound_to(g):
                self._build(g)
            self._order_streams.before_read()
            # The fetch kernel reads each pick's edge id now: the slots are rewritten by the next refresh.
            input_nodes, output_nodes, blocks = self._layers.sample_blocks(self._graph, seeds, edge_ids=self._snapshot.eid)
            self._order_streams.after_read()
        return input_nodes, output_nodes, blocks

    # -- lifecycle ------------------------------------------------------------------------------------

    def close(self) -> None:
        """Wait for the device (kernels may still read the snapshot), free the snapshot and give back
        the full CSC (the last user unpins it). Idempotent; a later :meth:`sample` builds anew."""
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        if self._graph is not None:
            self._graph.close()  # synchronizes a CUDA device before the snapshot is freed
        if self._full is not None and self._shared:
            release(self._full)
        self._graph = self._snapshot = self._order = self._full = self._source = self._stamp = None
        self._order_streams = StreamOrder(self.device, self.backend)

    def __enter__(self) -> GpuSnapshotSampler:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        where = self.backend if self.backend != "cuda" else str(self.device)
        return f"GpuSnapshotSampler(fanouts={self.fanouts}, snapshot_size={self.snapshot_size}, refresh={self.refresh}, device={where!r}, placement={self.placement!r})"
