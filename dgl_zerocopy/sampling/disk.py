"""Samplers over a graph opened from disk (:class:`dgl_zerocopy.data.disk_graph.DiskGraph`), its mapped CSC
used as it is: no copy. Here rather than on the graph, so that the data layer imports nothing above it."""

from __future__ import annotations

from typing import Any

import torch

from ..data.disk_graph import DiskGraph
from ..store.host_files import tensor_view
from .cpu_hops import HopSampler, Relation
from .graph import SamplingGraph, _cuda_device


def hop_sampler(graph: DiskGraph) -> HopSampler:
    """A :class:`HopSampler` over ``graph``'s mapped CSC as it is (one node type ``"_N"``, one relation
    ``"_E"``). Its scratch array is one int32 per node, made at the first sample."""
    return HopSampler({"_E": Relation(graph.indptr, graph.indices, "_N", "_N")}, {"_N": graph.num_nodes})


def sampling_graph(graph: DiskGraph, placement: str = "host", device: Any = None) -> SamplingGraph:
    """A :class:`SamplingGraph` over tensors that view ``graph``'s mapped files (``"host"`` for the CPU
    kernels' twins; ``"device"`` copies them to the GPU).

    ``placement="pinned"`` registers those pages in place. The files are mapped read-only, which
    ``cudaHostRegister`` pins only with its read-only flag: where the GPU has it the pages are pinned
    as they are; elsewhere (many x86 machines) they are mapped again copy-on-write and pinned there,
    with a warning (the pinned pages are then a private copy in RAM, and the files are never written:
    the FeatureStore's rule, :func:`~dgl_zerocopy.store.pinning.pinnable_table`)."""
    indptr, indices = tensor_view(graph.indptr), tensor_view(graph.indices)
    if placement != "pinned":
        return SamplingGraph(indptr, indices, placement=placement, device=device)
    if not torch.cuda.is_available():
        raise RuntimeError("placement='pinned' registers the CSC for a CUDA GPU, but torch sees none; use placement='host' (the CPU backends) here")
    from ..store.pinning import pinnable_table, read_only_register_supported

    device = _cuda_device(device, placement)
    supported = read_only_register_supported(device.index)
    indptr, read_only = pinnable_table(indptr, graph.indptr, supported)
    indices, _ = pinnable_table(indices, graph.indices, supported)
    return SamplingGraph(indptr, indices, placement="pinned", device=device, read_only=read_only)
