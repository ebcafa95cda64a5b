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
- :mod:`.blocks` (:mod:`.typed_data`): :class:`DeviceBlock` and :class:`HeteroDeviceBlock`, the blocks
  sampling builds, as plain torch tensors on any device (re-exported by :mod:`dgl_zerocopy.loading.blocks`).

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
