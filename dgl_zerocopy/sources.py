"""Feature sources for training: where a sampled batch's input features and labels come from.

- ``dgl``: DGL's own path (``NeighborSampler(prefetch_node_feats=...)``): DGL slices
  ``g.ndata`` inside its loader. What DGL users run today; its gather is not separable from sampling.
- ``cpu``: DGL samples; a :class:`FeatureStore` on the ``cpu`` backend gathers into a reused buffer.

A source yields ``(blocks, x, y)`` with ``x`` the features of ``blocks[0]``'s source nodes and ``y``
the labels of ``blocks[-1]``'s destinations, all on the training device.
"""
from __future__ import annotations

import warnings
from typing import Iterator

import torch

from .data import GraphDataset
from .store import FeatureStore
from .timing import StageTimer

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


class StoreSource:
    """DGL samples the blocks; a FeatureStore gathers the input rows."""

    def __init__(self, dataset: GraphDataset, fanouts: list[int], device: torch.device, backend: str = "cpu") -> None:
        self.graph = dataset.to_dgl(with_data=False)
        self.fanouts = fanouts
        self.device = device
        self.features = FeatureStore(dataset.features, backend=backend, device=device)
        self.labels = torch.from_numpy(dataset.labels)

    def batches(self, nodes: torch.Tensor, batch_size: int, shuffle: bool, timer: StageTimer) -> Iterator:
        import dgl

        sampler = dgl.dataloading.NeighborSampler(self.fanouts)
        loader = dgl.dataloading.DataLoader(self.graph, nodes, sampler, batch_size=batch_size, shuffle=shuffle)
        for input_nodes, output_nodes, blocks in timer.timed(loader, "sample"):
            with timer.stage("gather"):
                x = self.features.gather(input_nodes)
                y = self.labels[output_nodes]
            with timer.stage("transfer"):
                y = y.to(self.device, non_blocking=True)
                blocks = [b.to(self.device) for b in blocks] if self.device.type != "cpu" else blocks
            yield blocks, x, y

    def close(self) -> None:
        self.features.close()


def make_source(name: str, dataset: GraphDataset, fanouts: list[int], device: torch.device):
    """The feature source called ``name`` (``dgl`` or ``cpu``) for ``dataset`` on ``device``."""
    if name == "dgl":
        return DglSource(dataset, fanouts, device)
    if name == "cpu":
        return StoreSource(dataset, fanouts, device, backend="cpu")
    raise ValueError(f"unknown feature source {name!r}; choose from: dgl, cpu")
