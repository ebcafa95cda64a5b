"""Samplers over a graph opened from disk (:class:`dgl_zerocopy.data.disk_graph.DiskGraph`), its mapped CSC
used as it is: no copy. Here rather than on the graph, so that the data layer imports nothing above it."""

from __future__ import annotations

from typing import Any

from ..data.disk_graph import DiskGraph
from ..store.host_files import tensor_view
from .cpu_hops import HopSampler, Relation
from .graph import SamplingGraph


def hop_sampler(graph: DiskGraph) -> HopSampler:
    """A :class:`HopSampler` over ``graph``'s mapped CSC as it is (one node type ``"_N"``, one relation
    ``"_E"``). Its scratch array is one int32 per node, made at the first sample."""
    return HopSampler({"_E": Relation(graph.indptr, graph.indices, "_N", "_N")}, {"_N": graph.num_nodes})


def sampling_graph(graph: DiskGraph, placement: str = "host", device: Any = None) -> SamplingGraph:
    """A :class:`SamplingGraph` over tensors that view ``graph``'s mapped files (``placement="pinned"``
    registers those pages in place; ``"host"`` for the CPU kernels' twins)."""
    return SamplingGraph(tensor_view(graph.indptr), tensor_view(graph.indices), placement=placement, device=device)
