"""Samplers over a graph opened from disk (:class:`dgl_zerocopy.data.disk_graph.DiskGraph`), its mapped CSC
used as it is: no copy. Here rather than on the graph, so that the data layer imports nothing above it."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np
import torch

from ..data.disk_graph import DiskGraph
from ..store.host_files import tensor_view
from .cpu_hops import HopSampler, Relation, Sampled
from .graph import SamplingGraph, _cuda_device


class DiskHopSampler(HopSampler):
    """A :class:`HopSampler` over a :class:`DiskGraph`'s CSC that checks the graph's files
    (:meth:`DiskGraph.check_files`, one ``fstat`` each) before each batch: a file cut short raises
    :class:`~dgl_zerocopy.store.storage.StorageChangedError` instead of killing the process (SIGBUS)."""

    def __init__(self, graph: DiskGraph, **options: Any) -> None:
        self.graph = graph
        relations = {"_E": Relation(graph.indptr, graph.indices, "_N", "_N")}
        super().__init__(relations, {"_N": graph.num_nodes}, checked=graph.checked, **options)

    def sample(self, *args: Any, **kwargs: Any) -> Sampled:
        self.graph.check_files()
        return super().sample(*args, **kwargs)

    def induced_edges(self, nodes: Mapping[Hashable, np.ndarray]) -> tuple[dict, dict, dict]:
        self.graph.check_files()
        return super().induced_edges(nodes)


def hop_sampler(graph: DiskGraph, **options: Any) -> DiskHopSampler:
    """A :class:`HopSampler` over ``graph``'s mapped CSC as it is (one node type ``"_N"``, one relation
    ``"_E"``), its files checked before each batch (:class:`DiskHopSampler`). Its scratch array is one int32
    per node, made at the first sample.

    Args:
        graph: the opened graph; its CSC is not checked again where ``graph.checked`` (as opened).
        options: :class:`HopSampler`'s keywords (``compiled``).
    """
    return DiskHopSampler(graph, **options)


class _CheckedTensor:
    """A tensor attribute of :class:`DiskSamplingGraph` whose every read checks the graph's files first."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._slot = f"_{name}"

    def __get__(self, graph: Any, owner: type | None = None) -> Any:
        if graph is None:
            return self
        if graph._guarded:
            graph.graph.check_files()
        return getattr(graph, self._slot)

    def __set__(self, graph: Any, value: torch.Tensor) -> None:
        setattr(graph, self._slot, value)


class DiskSamplingGraph(SamplingGraph):
    """A :class:`SamplingGraph` over a :class:`DiskGraph`'s files whose ``indptr``/``indices`` check the files
    (:meth:`DiskGraph.check_files`) each time a sampler takes them, so before each layer's reads (not where
    the CSC was copied to the device: the files are not read again)."""

    indptr = _CheckedTensor()
    indices = _CheckedTensor()

    def __init__(self, graph: DiskGraph, *args: Any, **kwargs: Any) -> None:
        self.graph = graph
        self._guarded = False  # the base class sets indptr/indices: no file read before that
        super().__init__(*args, checked=graph.checked, **kwargs)
        self._guarded = self.placement != "device"  # a device copy reads the files no more


def sampling_graph(graph: DiskGraph, placement: str = "host", device: Any = None) -> SamplingGraph:
    """A :class:`SamplingGraph` over tensors that view ``graph``'s mapped files (``"host"`` for the CPU
    kernels' twins; ``"device"`` copies them to the GPU), the files checked each time a sampler takes the
    CSC (:class:`DiskSamplingGraph`); not checked again where ``graph.checked`` (as opened).

    ``placement="pinned"`` registers those pages in place. The files are mapped read-only, which
    ``cudaHostRegister`` pins only with its read-only flag: where the GPU has it the pages are pinned
    as they are; elsewhere (many x86 machines) they are mapped again copy-on-write and pinned there,
    with a warning (the pinned pages are then a private copy in RAM, and the files are never written:
    the FeatureStore's rule, :func:`~dgl_zerocopy.store.pin_target.pinnable_table`)."""
    graph.check_files()  # "device" copies the files, "pinned" may: a file cut short would kill the copy
    indptr, indices = tensor_view(graph.indptr), tensor_view(graph.indices)
    if placement != "pinned":
        return DiskSamplingGraph(graph, indptr, indices, placement=placement, device=device)
    if not torch.cuda.is_available():
        raise RuntimeError("placement='pinned' registers the CSC for a CUDA GPU, but torch sees none; use placement='host' (the CPU backends) here")
    from ..store.pin_target import pinnable_table
    from ..store.pinning import read_only_register_supported

    device = _cuda_device(device, placement)
    supported = read_only_register_supported(device.index)
    indptr, read_only = pinnable_table(indptr, graph.indptr, supported)
    indices, _ = pinnable_table(indices, graph.indices, supported)
    return DiskSamplingGraph(graph, indptr, indices, placement="pinned", device=device, read_only=read_only)
