"""Neighbour sampling over a graph's in-edge CSC, on the GPU (our CUDA kernels) and on the CPU (numba, or NumPy).

Both front ends sample here: DGL's ``NeighborSampler`` arguments (PyPI's DGL samples on the CPU only) and PyG's
``num_neighbors`` (PyPI's PyG cannot sample without pyg-lib).

On the GPU:

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
- :mod:`.blocks` (:mod:`.typed_data`): :class:`DeviceBlock` and :class:`HeteroDeviceBlock`, the blocks
  sampling builds, as plain torch tensors on any device (re-exported by :mod:`dgl_zerocopy.loading.blocks`).
- :mod:`.gpu_picks`: what a GPU-sampled layer picks besides uniform in-edges (PyG's hops, a time cut, weights).

On the CPU:

- :mod:`.cpu_hops`: :class:`~.cpu_hops.HopSampler`, exact uniform sampling hop by hop (:mod:`.hop_kernels` compiled by
  numba, :mod:`.picks` the NumPy reference); :mod:`.pick_kernels`: picks by time and by weight; :mod:`.disjoint` and
  :mod:`.tree_hops`: disjoint trees (one per seed, as PyG's temporal sampling requires); :mod:`.disk`: samplers over a
  graph mapped from disk.
- :mod:`.fanout`: the one check of a fanout that every sampler shares.

This layer sits below ``loading`` (which uses it) and imports only the kernel layer and the store.
The samplers are imported on first use (:func:`__getattr__`): ``snapshot`` imports DGL, and
``from dgl_zerocopy.sampling.blocks import DeviceBlock`` (what :mod:`dgl_zerocopy.nn` does) must not.
"""

from __future__ import annotations

from typing import Any

__all__ = ["GpuNeighborSampler", "GpuSnapshotSampler", "SamplingGraph", "SnapshotSampler", "release", "sample_neighbors", "shared_graph"]


def __getattr__(name: str) -> Any:
    """A name of ``__all__``, imported from its module when first asked for (then kept here)."""
    if name in ("SamplingGraph", "release", "shared_graph"):
        from . import graph as module
    elif name in ("GpuNeighborSampler", "sample_neighbors"):
        from . import neighbor as module
    elif name == "SnapshotSampler":
        from . import snapshot as module
    elif name == "GpuSnapshotSampler":
        from . import snapshot_gpu as module
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = globals()[name] = getattr(module, name)
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
