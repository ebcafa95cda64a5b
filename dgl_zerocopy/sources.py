"""Feature sources for training: where a sampled batch's input features and labels come from.

- ``dgl``: DGL's own path (``NeighborSampler(prefetch_node_feats=...)``): DGL slices
  ``g.ndata`` inside its loader. What DGL users run today; its gather is not separable from sampling.
- ``dgl-storage``: DGL's own DataLoader with our FeatureStore attached (:mod:`dgl_zerocopy.dgl`):
  DGL samples and prefetches; the input rows are gathered by the store's backend.
- ``cpu`` / ``zerocopy`` / ``gpu``: DGL samples; our :class:`DataLoader` gathers with a
  :class:`FeatureStore` on that backend, ``prefetch`` batches ahead of training.

A source yields ``(blocks, x, y)`` with ``x`` the features of ``blocks[0]``'s source nodes and ``y``
the labels of ``blocks[-1]``'s destinations, all on the training device.
"""
from __future__ import annotations

import warnings
from typing import Iterator

import torch

from .data import GraphDataset
from .data.base import tensor_view
from .loader import DataLoader, dgl_has_cuda
from .store import FeatureStore
from .timing import StageTimer

FEATURE_SOURCES = ("dgl", "dgl-storage", "cpu", "zerocopy", "gpu")

# DGL's loader nags about CPU affinity on every epoch; it is advice, not a fault of this run.
warnings.filterwarnings("ignore", message="Dataloader CPU affinity opt is not enabled")


class DglSource:
    """DGL's DataLoader with ``prefetch_node_feats``: features sliced by DGL."""

    def __init__(self, dataset: GraphDataset, fanouts: list[int], device: torch.device) -> None:
        self.graph = dataset.to_dgl(with_data=True)
        self.fanouts = fanouts
        self.device = device

    def batches(self, nodes: torch.Tensor, batch_size: int, shuffle: bool, timer: StageTimer) -> Iterator:
        import dgl

        sampler = dgl.dataloading.NeighborSampler(self.fanouts, prefetch_node_feats=["feat"], prefetch_labels=["label"])
        loader = dgl.dataloading.DataLoader(self.graph, nodes, sampler, batch_size=batch_size, shuffle=shuffle, device=self.device)
        for _, _, blocks in timer.timed(loader, "sample"):  # includes DGL's gather
            yield blocks, blocks[0].srcdata["feat"], blocks[-1].dstdata["label"]

    def close(self) -> None:
        pass


class DglStorageSource:
    """DGL's own DataLoader with our FeatureStore attached: DGL samples and prefetches, the store
    gathers the input rows (backend ``auto``: zero-copy on a GPU, else cpu); labels from ``g.ndata``."""

    def __init__(self, dataset: GraphDataset, fanouts: list[int], device: torch.device) -> None:
        self.graph = dataset.to_dgl(with_data=False)
        self.graph.ndata["label"] = tensor_view(dataset.labels)
        self.fanouts = fanouts
        self.device = device
        self.features = FeatureStore(dataset.features, backend="auto" if device.type == "cuda" else "cpu", device=device)

    def batches(self, nodes: torch.Tensor, batch_size: int, shuffle: bool, timer: StageTimer) -> Iterator:
        import dgl

        from .dgl import attach, with_features

        sampler = with_features(dgl.dataloading.NeighborSampler(self.fanouts), features=["feat"], labels=["label"])
        loader = dgl.dataloading.DataLoader(self.graph, nodes, sampler, batch_size=batch_size, shuffle=shuffle, device=self.device)
        attach(loader, {"feat": self.features})
        for _, _, blocks in timer.timed(loader, "sample"):  # includes the gather, inside DGL's prefetcher
            yield blocks, blocks[0].srcdata["feat"], blocks[-1].dstdata["label"]

    def close(self) -> None:
        self.features.close()


class StoreSource:
    """DGL samples the blocks; our :class:`DataLoader` gathers the input rows with a FeatureStore
    (backend ``cpu``, ``zerocopy`` or ``gpu``), ``prefetch`` batches ahead."""

    def __init__(self, dataset: GraphDataset, fanouts: list[int], device: torch.device, backend: str = "cpu", prefetch: int = 0, seed: int = 0) -> None:
        self.graph = dataset.to_dgl(with_data=False)
        self.fanouts, self.device, self.prefetch, self.seed = fanouts, device, prefetch, seed
        self.features = FeatureStore(dataset.features, backend=backend, device=device)
        self.labels = tensor_view(dataset.labels)
        self.blocks = "device" if device.type == "cuda" and not dgl_has_cuda() else "dgl"
        self._loaders: dict = {}

    def batches(self, nodes: torch.Tensor, batch_size: int, shuffle: bool, timer: StageTimer) -> Iterator:
        import dgl

        key = (nodes.data_ptr(), len(nodes), batch_size, shuffle)
        if key not in self._loaders:  # one loader per node set, so its epoch counter reshuffles
            self._loaders[key] = DataLoader(
                self.graph, nodes, dgl.dataloading.NeighborSampler(self.fanouts), features={"feat": self.features},
                labels={"label": self.labels}, device=self.device, batch_size=batch_size, shuffle=shuffle,
                prefetch=self.prefetch, seed=self.seed, blocks=self.blocks)
        loader = self._loaders[key]
        loader.timer = timer
        for _, _, blocks in loader:
            yield blocks, blocks[0].srcdata["feat"], blocks[-1].dstdata["label"]

    def close(self) -> None:
        for loader in self._loaders.values():
            loader.close()
        self.features.close()


def make_source(name: str, dataset: GraphDataset, fanouts: list[int], device: torch.device, prefetch: int = 0, seed: int = 0):
    """The feature source called ``name`` (see :data:`FEATURE_SOURCES`) for ``dataset`` on ``device``."""
    if name == "dgl":
        return DglSource(dataset, fanouts, device)
    if name == "dgl-storage":
        return DglStorageSource(dataset, fanouts, device)
    if name in ("cpu", "zerocopy", "gpu"):
        return StoreSource(dataset, fanouts, device, backend=name, prefetch=prefetch, seed=seed)
    raise ValueError(f"unknown feature source {name!r}; choose from: {', '.join(FEATURE_SOURCES)}")
