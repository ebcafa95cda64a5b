"""``use_uva=True``: the DataLoader samples on the GPU (:mod:`dgl_zerocopy.sampling`), and the sampled
ids never leave it.

DGL's ``NeighborSampler`` (and DGL's own subclasses, such as ``MultiLayerFullNeighborSampler``) maps
onto :class:`~dgl_zerocopy.sampling.GpuNeighborSampler`: ``fanouts`` (-1: every in-edge),
``replace``, ``prefetch_node_feats``/``prefetch_labels``/``prefetch_edge_feats``; ``fused`` is unused,
and ``output_device`` changes nothing the loop sees (DGL's loader, too, puts each batch on
``device``). What the GPU sampler cannot do is refused at construction, each error naming the option
and the fix (``use_uva=False``: sampling on the CPU): weighted picks (``prob=``/``mask=``),
``edge_dir="out"``, heterographs and fanouts per edge type, other samplers (edge prediction with its
``exclude``, subgraph samplers, a subclass of one's own) and ``num_workers > 0``. Our
:class:`~dgl_zerocopy.sampling.SnapshotSampler` maps onto
:class:`~dgl_zerocopy.sampling.GpuSnapshotSampler` (``fanouts``, ``snapshot_size``, ``refresh``): its
snapshot lives in device memory, built and refreshed from the full CSC (placed as below) by the
loader's epoch hook (:meth:`DeviceSampling.on_epoch_start`), so that a batch reads no PCIe. The blocks are
DeviceBlocks, or with ``blocks="dgl"`` DGL blocks made from them on the same device (a CUDA build of
DGL on a GPU; the loader refuses ``blocks="dgl"`` on a GPU with a CPU-only DGL).

The graph's in-edge CSC is taken once per graph, placement and device
(:func:`~dgl_zerocopy.sampling.shared_graph`): pinned in place (``graph_placement="pinned"``, the
default), or copied into device memory (``"device"``, the upper bound); shared by every loader over
that graph, and given back by :meth:`DeviceSampling.close` (the loader's ``close()``, or its garbage
collection), after the loader's worker has stopped: the last user unpins it. An array the graph's CSC
views (a dataset's, in shared memory for DDP ranks) is pinned where it is, so ranks share one copy.

Per batch, on the ring's side stream (inside :meth:`~.ring.SlotRing.fill`): the seeds go to the
device (pinned, non-blocking), the sampler builds one :class:`~dgl_zerocopy.loading.blocks.DeviceBlock`
per layer with one size read per batch (its only host wait), and its ids feed the FeatureStores as
they are, with no range check (``unchecked=True``: the project produced them): the input nodes gather
the node features into the ring slot, the output nodes the labels (through a one-column FeatureStore
over them, :class:`~.feature_sources.Sources` with ``device_ids``), the blocks' edge ids the edge
features. A block's edge ids (``edata[dgl.EID]``) stay pending until read; what they will read (the
picks' CSC positions) is handed over with the batch (:func:`pending_inputs`), so the consumer's
stream is recorded on it.

CPU stand-in: inside :func:`emulate_on_cpu` (tests, and machines without a GPU), ``use_uva=True`` with
a CPU device samples with the GPU sampler's CPU backend (``"emulator"``: the CUDA kernel source
compiled for the CPU; ``"reference"``: its NumPy twin) over the graph as it is: the whole loader path
runs but the CUDA launches.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from .collate import Need
from .dgl_options import is_dgl_sampler

GRAPH_PLACEMENTS = ("pinned", "device")
CPU_BACKENDS = ("emulator", "reference")

_stand_ins: list[str] = []  # the backends of the emulate_on_cpu blocks entered, innermost last
_FIX = "pass use_uva=False to sample on the CPU with DGL's sampler"


@contextlib.contextmanager
def emulate_on_cpu(backend: str = "reference") -> Iterator[None]:
    """Inside the block, ``use_uva=True`` (and ``train --sampler gpu``) with a CPU device is accepted:
    the loader samples with the GPU sampler's CPU ``backend`` (``"emulator"`` or ``"reference"``) on
    the graph as it is on the host. Internal: the tests run the GPU path's plumbing with it."""
    if backend not in CPU_BACKENDS:
        raise ValueError(f"backend must be one of {CPU_BACKENDS}, but got {backend!r}")
    _stand_ins.append(backend)
    try:
        yield
    finally:
        _stand_ins.pop()


def stand_in() -> str | None:
    """The CPU backend of the innermost :func:`emulate_on_cpu` block, or None outside one."""
    return _stand_ins[-1] if _stand_ins else None


def check_cuda(device: Any) -> None:
    """Raise RuntimeError when ``use_uva=True`` cannot sample on a GPU here: no CUDA (outside
    :func:`emulate_on_cpu`). ``device``: the loader's ``device`` argument (None: the default)."""
    on_cpu = device is not None and torch.device(device).type == "cpu"
    if torch.cuda.is_available() or (stand_in() is not None and (device is None or on_cpu)):
        return
    raise RuntimeError(f"use_uva=True samples on a CUDA GPU, but torch sees none (torch.cuda.is_available() is False); {_FIX}")


class DeviceSampling:
    """The loader's GPU sampling over ``graph`` (a homogeneous DGL graph on the CPU) with DGL's
    ``sampler`` (a ``NeighborSampler``) or a :class:`~dgl_zerocopy.sampling.SnapshotSampler`, onto
    ``device``; ``placement``: ``"pinned"`` or ``"device"``. Raises ValueError (naming the option and
    the fix) for what it cannot sample."""

    def __init__(self, graph: Any, sampler: Any, device: torch.device, placement: str, num_workers: int, blocks: str) -> None:
        from ..sampling import GpuNeighborSampler, GpuSnapshotSampler

        self.snapshot = _check(graph, sampler, device, placement, num_workers)
        if device.type == "cuda":
            where, self.placement = device, placement
        else:
            where, self.placement = stand_in(), "host"
        if self.snapshot:  # the snapshot in device memory, built and refreshed by on_epoch_start
            self.sampler = GpuSnapshotSampler(sampler.fanouts, sampler.snapshot_size, sampler.refresh, device=where, placement=placement)
        else:
            self.sampler = GpuNeighborSampler(list(sampler.fanouts), replace=bool(sampler.replace), device=where, placement=placement)
        self.source, self.device, self.blocks = graph, device, blocks
        self.edge_features = _names(sampler.prefetch_edge_feats)
        self.ntype, self.etype = graph.ntypes[0], graph.canonical_etypes[0]
        self._graph = None  # taken by open(), at the start of each epoch
        self._lock = threading.Lock()

    @property
    def graph(self):
        """The :class:`~dgl_zerocopy.sampling.SamplingGraph` held (None after :meth:`close`)."""
        return self._graph

    def open(self) -> None:
        """Take the graph (made on the first use of the graph, placement and device in the process;
        then shared), unless held already. Called on the consumer's thread, before a worker starts."""
        from ..sampling import shared_graph

        if self.snapshot:
            return  # the snapshot sampler takes the full CSC when on_epoch_start builds its snapshot
        with self._lock:
            if self._graph is None or self._graph.closed:
                # A "device" copy is made here, on the current stream, by a blocking copy: complete
                # before any side stream reads it.
                self._graph = shared_graph(self.source, self.placement, self.device if self.placement != "host" else None)

    def on_epoch_start(self, graph: Any) -> None:
        """The loader's epoch hook, on the consumer's thread and stream, after the previous epoch's
        worker stopped: the snapshot sampler builds its snapshot in device memory, or refreshes it
        (ordered on the device against the batches still running on the side stream:
        :class:`~dgl_zerocopy.sampling.snapshot_gpu.StreamOrder`). Nothing for a NeighborSampler."""
        if self.snapshot:
            self.sampler.on_epoch_start(graph)

    def sample(self, seeds: torch.Tensor, features: list[str], labels: list[str]) -> tuple[tuple, list[Need], list[torch.Tensor]]:
        """One batch on the current stream: ``(output, needs, pending)``: ``output`` is DGL's
        ``(input_nodes, output_nodes, blocks)`` on the device; ``needs`` the node ``features`` at the
        input nodes, the ``labels`` at the output nodes and the edge features at each block's edge ids
        (which computes them), each to serve unchecked; ``pending``: the tensors the blocks' pending
        data will read (:func:`pending_inputs`)."""
        graph = self.source if self.snapshot else self._graph
        if graph is None or (not self.snapshot and graph.closed):
            raise RuntimeError("the DataLoader's GPU sampling was closed; iterate the loader again to take the graph again")
        input_nodes, output_nodes, blocks = self.sampler.sample_blocks(graph, seeds)
        dst_frame = 0
        if self.blocks == "dgl":
            blocks, dst_frame = [to_dgl_block(block) for block in blocks], 1  # a DGL block's frames: src, then dst
        last = len(blocks) - 1
        needs = [Need(0, None, "node", 0, "src", self.ntype, name, name, input_nodes, False) for name in features]
        needs += [Need(last, None, "node", dst_frame, "dst", self.ntype, name, name, output_nodes, False) for name in labels]
        if self.edge_features:
            from ..sampling.blocks import EID

            for i, block in enumerate(blocks):
                needs += [Need(i, None, "edge", 0, None, self.etype, name, name, block.edata[EID], False) for name in self.edge_features]
        return (input_nodes, output_nodes, blocks), needs, pending_inputs(blocks)

    def close(self) -> None:
        """Give the graph back (the last user unpins it or frees its device copy). Idempotent; the
        caller makes sure no worker samples any more. :meth:`open` takes it again."""
        from ..sampling import release

        if self.snapshot:
            self.sampler.close()  # frees the device snapshot; the next epoch builds a new one
            return
        with self._lock:
            graph, self._graph = self._graph, None
        if graph is not None:
            release(graph)


def to_dgl_block(block: Any) -> Any:
    """The DGL block of a homogeneous :class:`~dgl_zerocopy.loading.blocks.DeviceBlock` the GPU
    sampler made, on its device and with its id dtype: the same CSC (edge ``i`` of the DGL block is
    CSC position ``i``), ``srcdata``/``dstdata[dgl.NID]`` and ``edata[dgl.EID]`` (computed now, on
    the current stream, as DGL's sampler gives them). The block's other data is not carried."""
    import dgl

    from ..sampling.blocks import EID, NID

    csc = ("csc", (block.indptr, block.indices, block.indptr.new_empty(0)))  # no edge ids: 0..E-1 in CSC order
    made = dgl.create_block(csc, num_src_nodes=block.num_src_nodes(), num_dst_nodes=block.num_dst_nodes(), device=block.device)
    made.srcdata[NID], made.dstdata[NID], made.edata[EID] = block.srcdata[NID], block.dstdata[NID], block.edata[EID]
    return made


def pending_inputs(blocks: list) -> list[torch.Tensor]:
    """The tensors the blocks' data not computed yet will read when it is (the picks' CSC positions
    of ``edata[dgl.EID]``: the arguments of each pending ``functools.partial``). Made on the side
    stream and possibly read on the consumer's, they are recorded on its stream like the rest."""
    found = []
    for block in blocks:
        for compute in getattr(block.edata, "_pending", {}).values():
            if isinstance(compute, functools.partial):
                found += [arg for arg in compute.args if isinstance(arg, torch.Tensor)]
    return found


def _names(names: Any) -> list[str]:
    """A prefetch list: names, or ``{type: names}`` for the graph's one type."""
    if isinstance(names, Mapping):
        return [name for listed in names.values() for name in listed]
    return list(names or [])


def _check(graph: Any, sampler: Any, device: torch.device, placement: str, num_workers: int) -> bool:
    """Raise ValueError for what GPU sampling cannot do; returns whether ``sampler`` is a SnapshotSampler."""
    from dgl.dataloading import NeighborSampler

    from ..sampling import SnapshotSampler

    if placement not in GRAPH_PLACEMENTS:
        raise ValueError(f"graph_placement must be 'pinned' (the CSC pinned in place) or 'device' (a copy in GPU memory), but got {placement!r}")
    if device.type != "cuda" and stand_in() is None:
        raise ValueError(f"use_uva=True samples on the GPU and puts the batches there, but device is {str(device)!r}; pass device='cuda', or {_FIX}")
    snapshot = type(sampler) is SnapshotSampler
    if not snapshot and (not isinstance(sampler, NeighborSampler) or not is_dgl_sampler(sampler)):
        raise ValueError(
            f"use_uva=True samples on the GPU with dgl.dataloading.NeighborSampler's arguments or dgl_zerocopy's SnapshotSampler, but the sampler "
            f"is {type(sampler).__name__} (edge prediction with exclude=, subgraph samplers and samplers of one's own sample on the CPU); {_FIX}"
        )
    if snapshot:
        _check_graph_and_workers(graph, sampler, num_workers)
        return True
    if sampler.prob is not None:
        raise ValueError(f"use_uva=True picks neighbours uniformly, but the NeighborSampler weights them (prob=/mask={sampler.prob!r}); {_FIX}")
    if sampler.edge_dir != "in":
        raise ValueError(
            f"use_uva=True samples in-edges, but the NeighborSampler has edge_dir={sampler.edge_dir!r}; reverse the graph (dgl.reverse), or {_FIX}"
        )
    _check_graph_and_workers(graph, sampler, num_workers)
    # blocks="dgl" is converted from the DeviceBlocks; on a GPU with a CPU-only DGL the loader refused it already.
    return False


def _check_graph_and_workers(graph: Any, sampler: Any, num_workers: int) -> None:
    if len(graph.ntypes) != 1 or len(graph.canonical_etypes) != 1 or any(isinstance(f, Mapping) for f in sampler.fanouts):
        raise ValueError(
            f"use_uva=True samples graphs of one node and one edge type with one fanout per layer, but this graph has node types "
            f"{graph.ntypes} and edge types {graph.canonical_etypes} (fanouts {sampler.fanouts}); {_FIX}"
        )
    if num_workers:
        raise ValueError(f"use_uva=True samples on the GPU in the loader's own thread, so num_workers must be 0, but got {num_workers}")
