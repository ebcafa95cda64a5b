"""Sampling on the GPU: DGL's neighbour sampling for PyPI's CPU-only DGL, on our kernels.

- :mod:`.graph`: :class:`SamplingGraph`, a graph's in-edge CSC pinned in place, in device memory,
  or as it is on the host (for the CPU backends); :func:`shared_graph`/:func:`release`: one per graph and placement.
- :mod:`.layer`: one layer of picks (``sample_csc`` of :mod:`dgl_zerocopy.cuda.sampling`), and the
  checks every entry point shares.
- :mod:`.relabel`: unique and relabel on the device (destinations first, as ``dgl.to_block``).
- :mod:`.lazy`: block data computed when first read (edge ids).
- :mod:`.neighbor`: :func:`sample_neighbors` (one layer, a DGL frontier) and
  :class:`GpuNeighborSampler` (DGL's ``NeighborSampler`` arguments, :class:`DeviceBlock` output).
- :mod:`.snapshot`: :class:`SnapshotSampler`, a DGL block sampler over a cached, partly refreshed
  sample of each node's in-edges (:mod:`.snapshot_csc`: its compact CSC and draws);
  :mod:`.snapshot_gpu`: :class:`GpuSnapshotSampler`, the same snapshot in device memory, sampled and
  refreshed with the kernels (what ``use_uva=True`` makes of a SnapshotSampler).

This layer sits beside ``loading`` (it imports the kernel layer, the store and ``loading.blocks``).
"""

from .graph import SamplingGraph, release, shared_graph
from .neighbor import GpuNeighborSampler, sample_neighbors
from .snapshot import SnapshotSampler
from .snapshot_gpu import GpuSnapshotSampler

__all__ = ["GpuNeighborSampler", "GpuSnapshotSampler", "SamplingGraph", "SnapshotSampler", "release", "sample_neighbors", "shared_graph"]
