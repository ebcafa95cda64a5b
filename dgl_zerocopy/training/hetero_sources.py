"""Feature sources for heterographs (:class:`~dgl_zerocopy.data.hetero.HeteroGraphDataset`).

A source yields ``(blocks, x, y)`` as the homogeneous ones do (:mod:`.sources`), with ``x`` a dict
``{ntype: features of blocks[0]'s source nodes of that type}`` (every node type) and ``y`` the
labels of ``blocks[-1]``'s destinations of the target type (the seeds: ``{target: ids}`` are the
loader's indices). The fanouts apply to every edge type (DGL's ``NeighborSampler`` with an int per layer).

Which feature sources apply:

- ``dgl``: DGL's DataLoader with ``prefetch_node_feats`` for every node type and ``prefetch_labels``
  for the target: DGL slices ``g.nodes[ntype].data``. On the CPU, or on CUDA with a CUDA build of DGL.
- ``cpu``, ``zerocopy``, ``gpu``: our :class:`~dgl_zerocopy.loading.loader.DataLoader` with one
  :class:`FeatureStore` per node type (``features={(ntype, "feat"): store}``) on that backend and
  the target's labels (``labels={(target, "label"): labels}``), ``prefetch`` batches ahead. On CUDA
  with PyPI's DGL the blocks are :class:`~dgl_zerocopy.loading.blocks.HeteroDeviceBlock` lists,
  which :class:`~dgl_zerocopy.training.models.RGCN` takes. Compressed features: one compressed
  store per node type.
- ``dgl-storage`` is refused: its storage hook (:func:`dgl_zerocopy.loading.dgl.with_features`)
  marks homogeneous blocks only. So is a hot-row cache: its ranking is by the degrees of one node type.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import torch

from ..data.base import tensor_view
from ..data.hetero import HeteroGraphDataset
from ..loading.dgl_options import dgl_has_cuda
from ..loading.timing import StageTimer
from ..store.compression import check_codec_name
from ..store.feature_store import FeatureStore
from .our_loaders import OurLoaders

HETERO_FEATURE_SOURCES = ("dgl", "cpu", "zerocopy", "gpu")


def make_hetero_source(
    name: str,
    dataset: HeteroGraphDataset,
    fanouts: list[int],
    device: torch.device,
    prefetch: int = 0,
    seed: int = 0,
    compression: str | None = None,
    cache_rows: float | int = 0,
    blocks: str | None = None,
):
    """The feature source called ``name`` (one of :data:`HETERO_FEATURE_SOURCES`) for a heterograph;
    ``cache_rows`` (the cache size asked for) must be 0; ``blocks`` (``"dgl"``/``"device"``, our
    loader's sources only): the block kind, by default what ``device`` needs."""
    compression = check_codec_name(compression)
    if name not in HETERO_FEATURE_SOURCES:
        raise ValueError(
            f"feature source {name!r} does not serve heterographs ({dataset.name!r} is one); choose from: {', '.join(HETERO_FEATURE_SOURCES)}"
            + (" ('dgl-storage': DGL's storage hook marks homogeneous blocks only)" if name == "dgl-storage" else "")
        )
    if cache_rows:
        raise ValueError(f"a hot-row cache ranks the rows of a homogeneous graph, and {dataset.name!r} is a heterograph; ask for no cache")
    if name == "dgl":
        if compression is not None:
            raise ValueError(f"compression {compression!r} needs a FeatureStore source (cpu, zerocopy or gpu); source 'dgl' slices DGL's own tables")
        return HeteroDglSource(dataset, fanouts, device)
    return HeteroStoreSource(dataset, fanouts, device, backend=name, prefetch=prefetch, seed=seed, compression=compression, blocks=blocks)


def _by_type(data, block) -> dict[str, torch.Tensor]:
    """A block's ``srcdata[name]`` as ``{ntype: tensor}`` (DGL gives the tensor itself for one type)."""
    return dict(data) if isinstance(data, Mapping) else {block.srctypes[0]: data}


class _NoCache:
    has_cache = False

    def cache_stats(self) -> dict:
        return {"hits": 0, "misses": 0, "hit_rate": 0.0}

    def reset_cache_stats(self) -> None:
        pass


class HeteroDglSource(_NoCache):
    """DGL's DataLoader with ``prefetch_node_feats`` per node type: features sliced by DGL."""

    def __init__(self, dataset: HeteroGraphDataset, fanouts: list[int], device: torch.device) -> None:
        self.graph = dataset.to_dgl(with_data=True)
        self.target = dataset.target
        self.fanouts, self.device = fanouts, device

    def batches(self, nodes: torch.Tensor, batch_size: int, shuffle: bool, timer: StageTimer, ddp: bool = False) -> Iterator:
        import dgl

        sampler = dgl.dataloading.NeighborSampler(
            self.fanouts, prefetch_node_feats={ntype: ["feat"] for ntype in self.graph.ntypes}, prefetch_labels={self.target: ["label"]}
        )
        loader = dgl.dataloading.DataLoader(self.graph, {self.target: nodes}, sampler, batch_size=batch_size, shuffle=shuffle, device=self.device, use_ddp=ddp)
        for _, _, blocks in timer.timed(loader, "sample"):  # includes DGL's gather
            yield blocks, _by_type(blocks[0].srcdata["feat"], blocks[0]), blocks[-1].dstdata["label"][self.target]

    def close(self) -> None:
        pass


class HeteroStoreSource(_NoCache, OurLoaders):
    """DGL samples the typed blocks; our :class:`DataLoader` gathers each node type's input rows
    with that type's FeatureStore (backend ``cpu``, ``zerocopy`` or ``gpu``), ``prefetch`` batches ahead."""

    def __init__(
        self,
        dataset: HeteroGraphDataset,
        fanouts: list[int],
        device: torch.device,
        backend: str = "cpu",
        prefetch: int = 0,
        seed: int = 0,
        compression: str | None = None,
        blocks: str | None = None,
    ) -> None:
        self.graph = dataset.to_dgl(with_data=False)
        self.target = dataset.target
        self.fanouts, self.device, self.prefetch, self.seed = fanouts, device, prefetch, seed
        self.stores: dict[str, FeatureStore] = {}
        try:
            for ntype, table in dataset.features.items():
                self.stores[ntype] = FeatureStore(table, backend=backend, device=device, compression=compression)
        except BaseException:
            self.close()
            raise
        self.labels = tensor_view(dataset.labels)
        self.blocks = blocks or ("device" if device.type == "cuda" and not dgl_has_cuda() else "dgl")
        self._loaders: dict = {}

    def batches(self, nodes: torch.Tensor, batch_size: int, shuffle: bool, timer: StageTimer, ddp: bool = False) -> Iterator:
        import dgl

        loader = self._loader(
            nodes,
            {self.target: nodes},
            batch_size,
            shuffle,
            ddp,
            timer,
            lambda: dgl.dataloading.NeighborSampler(self.fanouts),
            features={(ntype, "feat"): store for ntype, store in self.stores.items()},
            labels={(self.target, "label"): self.labels},
            blocks=self.blocks,
        )
        for _, _, blocks in loader:
            yield blocks, _by_type(blocks[0].srcdata["feat"], blocks[0]), blocks[-1].dstdata["label"][self.target]

    def close(self) -> None:
        self._close_loaders()
        for store in self.stores.values():
            store.close()
