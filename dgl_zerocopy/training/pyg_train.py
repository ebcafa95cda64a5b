"""The PyG route of the training loop (``frontend: pyg``, ``dgl-zerocopy train --frontend pyg``).

GraphSAGE built from PyG's ``SAGEConv`` (:class:`PygGraphSAGE`), fed by :class:`dgl_zerocopy.pyg.NeighborLoader`
(our samplers, the features through our :class:`~dgl_zerocopy.FeatureStore`), trained on the same dataset, split,
fanouts, batch size, epochs and optimiser settings as the DGL route (:mod:`.train`), and reported the same way
(:class:`~.train.EpochStats` per epoch, the test accuracy at the evaluated epoch of best validation accuracy): one
graph, two front ends, side by side. Evaluation samples the val and test nodes' neighbourhoods with the training
fanouts, as the DGL route does; accuracy is the fraction predicted right (what OGB's evaluator computes too).

The model is the DGL route's function (:class:`~.models.GraphSAGE`): ``SAGEConv`` computes
``lin_l(mean of in-neighbours) + lin_r(x)`` (bias in ``lin_l``), ``dgl_zerocopy.nn.SAGEConv``
``fc_neigh(mean) + fc_self(x)`` (bias in ``fc_self``); ReLU and dropout between layers in both. Only the
initial weights differ: PyG's ``Linear`` defaults (Kaiming-uniform) against DGL's Glorot-uniform with ReLU gain.
Each batch is PyG's whole sampled subgraph: every layer runs on all its nodes and the seeds' rows (first)
are read at the end, as PyG's examples do. The aggregation reads the batch's adjacency as a sparse CSR
matrix (PyG's ``adj_t`` form, what ``T.ToSparseTensor(layout=torch.sparse_csr)`` makes; the mean is the
same): with ``edge_index`` PyG would materialise one row per edge, edges x feature width, 11 GB on
Coauthor Physics' evaluation batch.

Stages: ``sample`` (the loader's sampler), ``gather`` (PyG's slicing and our store's gather), ``compute``,
``wait``; with ``prefetch > 0`` the first two run on the loader's thread. Features come from the store on
the training device (``feature_source`` ``cpu``: CPU gather, then a copy; ``zerocopy``/``gpu`` on CUDA);
``sampler: gpu`` samples with our kernels on CUDA. Not on this route (refused by the config): GCN/RGCN,
DGL's loaders, snapshot sampling, the hot-row cache, features left on storage, several processes.

This module imports PyG only when a run starts (:func:`import_pyg`), so the DGL route does not need it.
"""

from __future__ import annotations

import functools
import logging
import random
import time
import warnings
from collections.abc import Callable
from types import ModuleType

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from tqdm import tqdm

from .._extras import MissingExtraError, install_hint
from ..data import GraphDataset
from ..data.base import tensor_view
from ..loading.timing import StageTimer
from ..store.feature_store import FeatureStore
from .config import TrainConfig
from .sources import feature_table
from .train import EpochStats, EpochTally, evaluates, resolve_device

log = logging.getLogger(__name__)

# The store backend of each feature source on this route (``dgl`` and ``dgl-storage`` are DGL's loaders).
BACKENDS = {"cpu": "cpu", "zerocopy": "zerocopy", "gpu": "gpu"}


def import_pyg(needed_by: str) -> ModuleType:
    """``import torch_geometric`` for ``needed_by`` (the user's words): the module, or a one-line
    :class:`~dgl_zerocopy._extras.MissingExtraError` naming the ``[pyg]`` extra where it is not installed."""
    try:
        import torch_geometric
    except ModuleNotFoundError as error:
        if error.name != "torch_geometric":
            raise
        raise MissingExtraError(f"{needed_by} needs PyG (torch-geometric), which is not installed: {install_hint('pyg')}", name="torch_geometric") from None
    return torch_geometric


class PygGraphSAGE(nn.Module):
    """GraphSAGE of PyG's ``SAGEConv`` layers (mean aggregation): ``forward(x, adj_t)`` with ``x`` the batch's
    node features and ``adj_t`` its adjacency (sparse, destinations as rows; or an ``edge_index``) returns every
    node's logits; the seeds' are the first rows. ReLU and dropout between layers."""

    def __init__(self, in_feats: int, hidden: int, num_classes: int, num_layers: int = 2, dropout: float = 0.5) -> None:
        super().__init__()
        from torch_geometric.nn import SAGEConv

        if num_layers < 1:
            raise ValueError(f"num_layers must be at least 1, but got {num_layers}")
        dims = [in_feats] + [hidden] * (num_layers - 1) + [num_classes]
        self.convs = nn.ModuleList(SAGEConv(a, b, aggr="mean") for a, b in zip(dims[:-1], dims[1:]))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, adj_t) -> torch.Tensor:
        for i, conv in enumerate(self.convs):
            x = conv(x, adj_t)
            if i < len(self.convs) - 1:
                x = self.dropout(F.relu(x))
        return x


def adjacency(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """The batch's ``adj_t``: a sparse CSR matrix whose row ``i`` holds node ``i``'s in-neighbours."""
    from torch_geometric.utils import to_torch_csr_tensor

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse (CSR tensor support is in beta state|invariant checks are implicitly disabled)")
        return to_torch_csr_tensor(edge_index.flip(0), size=(num_nodes, num_nodes))


def train_pyg(cfg: TrainConfig, dataset: GraphDataset, on_epoch: Callable[[EpochStats], None] | None = None, progress: bool = True) -> list[EpochStats]:
    """Train GraphSAGE of PyG's ``SAGEConv`` on ``dataset`` through our PyG loader (module docstring) and return
    one :class:`~.train.EpochStats` per epoch. ``cfg.frontend`` is not read: the caller chose this route."""
    import_pyg("training through the PyG front end")
    device = resolve_device(cfg.device, cfg.feature_source, sampler=cfg.sampler)
    _seed(cfg.seed)
    timer = StageTimer()
    loaders = _Loaders(cfg, dataset, device, timer)
    model = PygGraphSAGE(dataset.features.shape[1], cfg.hidden, dataset.num_classes, len(cfg.fanouts), cfg.dropout).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    history = []
    try:
        for epoch in range(cfg.epochs):
            model.train()
            timer.reset()
            tally = EpochTally()
            bar = tqdm(timer.timed(loaders.train, "wait"), total=len(loaders.train), desc=f"epoch {epoch}", leave=False, disable=not progress)
            for batch in bar:
                with timer.stage("compute", stream=torch.cuda.current_stream(device) if device.type == "cuda" else None):
                    loss = tally.step(optimizer, *_forward(model, batch, device))
                bar.set_postfix(loss=f"{loss:.3f}")
            epoch_time, stages = time.perf_counter() - tally.start, timer.reset()
            t0 = time.perf_counter()
            nan = float("nan")
            accuracies = (evaluate_pyg(model, loaders.val, device), evaluate_pyg(model, loaders.test, device)) if evaluates(cfg, epoch) else (nan, nan)
            stats = tally.stats(epoch, accuracies, epoch_time, t0, stages)
            history.append(stats)
            log.debug(stats.line())
            if on_epoch is not None:
                on_epoch(stats)
    finally:
        loaders.close()
    return history


def _seed(seed: int) -> None:
    """What ``torch_geometric.seed_everything`` seeds: ``random``, NumPy and torch (our CPU sampler draws from torch's)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _forward(model: nn.Module, batch, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The seeds' logits and labels of one batch, on ``device``."""
    x = batch.x.to(device, non_blocking=True).float()
    adj_t = adjacency(batch.edge_index.to(device), x.shape[0])
    size = batch.batch_size
    return model(x, adj_t)[:size], batch.y[:size].to(device)


@torch.no_grad()
def evaluate_pyg(model: nn.Module, loader, device: torch.device) -> float:
    """Accuracy on ``loader``'s seeds with their sampled neighbourhoods, dropout off (NaN without seeds)."""
    model.eval()
    correct = total = 0
    for batch in loader:
        logits, y = _forward(model, batch, device)
        correct += int((logits.argmax(1) == y).sum())
        total += len(y)
    return correct / total if total else float("nan")


class _Loaders:
    """The run's three loaders (training: shuffled, ``batch_size``; val and test: ``eval_batch_size``) over one
    ``Data`` of the graph and labels, sharing one sampler and one store of the features."""

    def __init__(self, cfg: TrainConfig, dataset: GraphDataset, device: torch.device, timer: StageTimer) -> None:
        from torch_geometric.data import Data

        from ..pyg import NeighborSampler
        from ..pyg.datasets import to_pyg

        full = to_pyg(dataset, masks=False)
        data = Data(y=full.y, edge_index=full.edge_index, num_nodes=full.num_nodes)  # the features: the store's
        table, codec = feature_table(dataset, cfg.feature_compression)
        self.store = FeatureStore(table, backend=BACKENDS[cfg.feature_source], device=device, compression=codec)
        sample_on = device if cfg.sampler == "gpu" else None
        self.sampler = NeighborSampler(data, num_neighbors=list(cfg.fanouts), device=sample_on, graph_placement=cfg.graph_placement)
        loader = _timed_loader_class()
        options = {
            "num_neighbors": list(cfg.fanouts),
            "neighbor_sampler": self.sampler,
            "features": {"x": self.store},
            "device": device,
            "prefetch": cfg.prefetch,
        }
        self.train = loader(data, input_nodes=tensor_view(dataset.train_idx), batch_size=cfg.batch_size, shuffle=True, timer=timer, **options)
        self.val, self.test = (
            loader(data, input_nodes=tensor_view(nodes), batch_size=cfg.eval_batch_size, shuffle=False, timer=timer, **options)
            for nodes in (dataset.val_idx, dataset.test_idx)
        )

    def close(self) -> None:
        for loader in (self.train, self.val, self.test):
            loader.close()  # the store and sampler are shared: closing them again does nothing
        self.store.close()


@functools.cache
def _timed_loader_class() -> type:
    """Our NeighborLoader whose sampling and filtering (PyG's slicing, our store's gather) are timed as stages
    ``sample`` and ``gather`` of the ``timer`` it is given: hooks on PyG's two steps, not timers in the data path."""
    from ..pyg import NeighborLoader

    class TimedNeighborLoader(NeighborLoader):
        def __init__(self, *args, timer: StageTimer, **kwargs) -> None:
            self.timer = timer
            super().__init__(*args, **kwargs)

        def collate_fn(self, index):
            with self.timer.stage("sample"):
                return super().collate_fn(index)

        def filter_fn(self, out):
            with self.timer.stage("gather"):
                return super().filter_fn(out)

    return TimedNeighborLoader
