"""Feature sources for training: where a sampled batch's input features and labels come from.

- ``dgl``: DGL's own path (``NeighborSampler(prefetch_node_feats=...)``): DGL slices
  ``g.ndata`` inside its loader. What DGL users run today; its gather is not separable from sampling.
- ``dgl-storage``: DGL's own DataLoader with our FeatureStore attached (:mod:`dgl_zerocopy.loading.dgl`):
  DGL samples and prefetches; the input rows are gathered by the store's backend.
- ``cpu`` / ``zerocopy`` / ``gpu``: DGL samples; our :class:`DataLoader` gathers with a
  :class:`FeatureStore` on that backend, ``prefetch`` batches ahead of training. With
  ``sampling=SamplerRequest("gpu", placement)`` our DataLoader samples on the GPU instead
  (``use_uva=True``, the graph's CSC ``"pinned"`` in place or in ``"device"`` memory; it views the
  dataset's arrays, in shared memory under DDP, so the ranks pin one copy).

Snapshot sampling (``sampling=SamplerRequest("snapshot", snapshot_size=K, refresh=R)``, any
source of a homogeneous graph): the training batches (the shuffled ones) come from one
:class:`~dgl_zerocopy.sampling.SnapshotSampler` per source, on the CPU whatever the device, refreshed
once per epoch: by our DataLoader's epoch hook, or, for DGL's loader (``dgl``, ``dgl-storage``), by the
source when the epoch's batches are asked for. Evaluation (unshuffled batches) samples the full
graph with DGL's ``NeighborSampler``, as ``cpu`` does, so the accuracy of a model trained on
snapshots is measured as any other's (and evaluating does not advance the refresh).

Compressed features (``compression`` ``fp16``/``bf16``/``int8``, the ``feature_compression`` of a
config): the FeatureStore sources hold the codes and gather decoded float32 rows. A memory-mapped
``.npy`` table (the OGB loaders' cache) is compressed once into a folder beside it and reused by
later runs; any other table is compressed in memory when the source is made.

A hot-row cache (``cache``, a :class:`CacheRequest`: the ``feature_cache`` and ``cache_policy`` of a
config) gives the FeatureStore sources' store ``cache_bytes``: a share of the rows is turned into
the bytes that hold that many stored rows (codes, when compressed). ``cache_stats()`` and
``reset_cache_stats()`` pass the store's counters on (zeros for ``dgl``).

A source yields ``(blocks, x, y)`` with ``x`` the features of ``blocks[0]``'s source nodes and ``y``
the labels of ``blocks[-1]``'s destinations, all on the training device.

Data-parallel training (``torch.distributed`` up): ``batches(..., ddp=True)`` yields this rank's
share of the seeds through the loader's ``use_ddp``: every rank gets as many batches (the shares
padded by repetition to equal size), with a new order every epoch (our DataLoader permutes all
seeds with ``ddp_seed=seed`` and cuts them; DGL's keeps a fixed slice per rank and shuffles within
it). The training loop asks for that; evaluation does not.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..data import GraphDataset
from ..data.base import tensor_view
from ..data.hetero import HeteroGraphDataset
from ..loading.dgl_options import dgl_has_cuda
from ..loading.loader import DataLoader
from ..loading.timing import StageTimer
from ..store.cache import DEFAULT_CACHE_POLICY, budget_for_rows
from ..store.compression import CODECS, check_codec_name, compressed_beside
from ..store.compression.codec import STORED_DTYPES
from ..store.feature_store import FeatureStore
from .config import parse_cache_size

FEATURE_SOURCES = ("dgl", "dgl-storage", "cpu", "zerocopy", "gpu")

log = logging.getLogger(__name__)

# DGL's loader nags about CPU affinity on every epoch; it is advice, not a fault of this run.
warnings.filterwarnings("ignore", message="Dataloader CPU affinity opt is not enabled")


NO_CACHE_STATS = {"hits": 0, "misses": 0, "hit_rate": 0.0}

DEFAULT_SNAPSHOT_REFRESH = 0.25


@dataclass(frozen=True)
class SamplerRequest:
    """How a run samples neighbours (the ``sampler``, ``graph_placement``, ``snapshot_size`` and
    ``snapshot_refresh`` of a config): ``kind`` ``"cpu"`` (DGL's ``NeighborSampler``), ``"gpu"``
    (ours in our DataLoader, ``use_uva=True``, the CSC at ``placement``) or ``"snapshot"`` (the
    training batches from a :class:`~dgl_zerocopy.sampling.SnapshotSampler` of ``snapshot_size``
    in-edges per node, None: twice the largest fanout, ``refresh`` of it redrawn per epoch)."""

    kind: str = "cpu"
    placement: str = "pinned"
    snapshot_size: int | None = None
    refresh: float = DEFAULT_SNAPSHOT_REFRESH

    @classmethod
    def of(cls, cfg) -> SamplerRequest:
        """The request of a :class:`~.config.TrainConfig` (its unset snapshot keys: the defaults)."""
        refresh = DEFAULT_SNAPSHOT_REFRESH if cfg.snapshot_refresh is None else cfg.snapshot_refresh
        return cls(cfg.sampler, cfg.graph_placement, cfg.snapshot_size, refresh)

    def snapshot_sampler(self, fanouts: list[int], **prefetch):
        """The SnapshotSampler of the training batches; ``prefetch``: its ``prefetch_node_feats``/``prefetch_labels``."""
        from ..sampling import SnapshotSampler

        return SnapshotSampler(fanouts, snapshot_size=self.snapshot_size, refresh=self.refresh, **prefetch)


class _SnapshotEpochs:
    """For DGL's loader, which has no epoch hook: ``snapshot_sampler``, the training batches'
    SnapshotSampler (None until first used, or without snapshot sampling), made once per source and
    refreshed each time an epoch's training batches are asked for."""

    def _sampler(self, shuffle: bool, **prefetch):
        """The sampler of a DGL loader of ``shuffle``d (training) or unshuffled (evaluation) batches."""
        import dgl

        if not shuffle or self.sampling.kind != "snapshot":
            return dgl.dataloading.NeighborSampler(self.fanouts, **prefetch)
        if self.snapshot_sampler is None:
            self.snapshot_sampler = self.sampling.snapshot_sampler(self.fanouts, **prefetch)
        self.snapshot_sampler.refresh_snapshot(self.graph)  # the first call builds it
        return self.snapshot_sampler


@dataclass(frozen=True)
class CacheRequest:
    """A training run's hot-row cache: ``size`` as ``feature_cache`` writes it (``"10%"`` of the
    rows, ``"512MiB"``, bytes), ``policy`` (default ``"degree"``), and for ``"presample"`` the
    training ``seeds`` and ``batch_size`` the sampler runs over."""

    size: str = "0"
    policy: str = DEFAULT_CACHE_POLICY
    seeds: torch.Tensor | None = None
    batch_size: int = 1024

    def store_options(self, graph, fanouts: list[int], rows: int, row_bytes: int) -> dict:
        """``FeatureStore`` keyword arguments for a table of ``rows`` stored rows of ``row_bytes``."""
        kind, amount = parse_cache_size(self.size)
        cache_bytes = budget_for_rows(round(amount * rows), row_bytes, rows) if kind == "rows" else amount
        if cache_bytes == 0:
            return {}
        # "degree" needs no sampler: every source samples in-edges (DGL's default), so it ranks by out-degree.
        options = {"cache_bytes": cache_bytes, "cache_policy": self.policy, "graph": graph}
        if self.policy == "presample":
            import dgl

            options.update(sampler=dgl.dataloading.NeighborSampler(fanouts), seeds=self.seeds, presample_options={"batch_size": self.batch_size})
        return options


def _stored_row_bytes(dataset: GraphDataset, compression: str | None) -> int:
    """Bytes of one stored row: the table's, or its codes' (fp16/bf16: 2 per column, int8: 1)."""
    itemsize = STORED_DTYPES[compression].itemsize if compression in CODECS else dataset.features.dtype.itemsize
    return dataset.features.shape[1] * itemsize


class _StoreStats:
    """The cache counters of a source's ``features`` store."""

    @property
    def has_cache(self) -> bool:
        return self.features.cache_policy is not None

    def cache_stats(self) -> dict:
        return self.features.cache_stats()

    def reset_cache_stats(self) -> None:
        self.features.reset_cache_stats()


class DglSource(_SnapshotEpochs):
    """DGL's DataLoader with ``prefetch_node_feats``: features sliced by DGL."""

    def __init__(self, dataset: GraphDataset, fanouts: list[int], device: torch.device, sampling: SamplerRequest = SamplerRequest()) -> None:
        self.graph = dataset.to_dgl(with_data=True)
        self.fanouts = fanouts
        self.device = device
        self.sampling, self.snapshot_sampler = sampling, None

    def batches(self, nodes: torch.Tensor, batch_size: int, shuffle: bool, timer: StageTimer, ddp: bool = False) -> Iterator:
        import dgl

        sampler = self._sampler(shuffle, prefetch_node_feats=["feat"], prefetch_labels=["label"])
        # DGL's split: a fixed slice of the seeds per rank, shuffled within it (NumPy's global generator).
        loader = dgl.dataloading.DataLoader(self.graph, nodes, sampler, batch_size=batch_size, shuffle=shuffle, device=self.device, use_ddp=ddp)
        for _, _, blocks in timer.timed(loader, "sample"):  # includes DGL's gather
            yield blocks, blocks[0].srcdata["feat"], blocks[-1].dstdata["label"]

    has_cache = False

    def cache_stats(self) -> dict:
        return dict(NO_CACHE_STATS)

    def reset_cache_stats(self) -> None:
        pass

    def close(self) -> None:
        pass


class DglStorageSource(_StoreStats, _SnapshotEpochs):
    """DGL's own DataLoader with our FeatureStore attached: DGL samples and prefetches, the store
    gathers the input rows (backend ``auto``: zero-copy on a GPU, else cpu); labels from ``g.ndata``."""

    def __init__(
        self,
        dataset: GraphDataset,
        fanouts: list[int],
        device: torch.device,
        compression: str | None = None,
        cache: CacheRequest = CacheRequest(),
        sampling: SamplerRequest = SamplerRequest(),
    ) -> None:
        self.graph = dataset.to_dgl(with_data=False)
        self.graph.ndata["label"] = tensor_view(dataset.labels)
        self.fanouts = fanouts
        self.device = device
        self.sampling, self.snapshot_sampler = sampling, None
        table, codec = feature_table(dataset, compression)
        self.features = FeatureStore(
            table,
            backend="auto" if device.type == "cuda" else "cpu",
            device=device,
            compression=codec,
            **cache.store_options(self.graph, fanouts, dataset.num_nodes, _stored_row_bytes(dataset, compression)),
        )

    def batches(self, nodes: torch.Tensor, batch_size: int, shuffle: bool, timer: StageTimer, ddp: bool = False) -> Iterator:
        import dgl

        from ..loading.dgl import attach, with_features

        sampler = with_features(self._sampler(shuffle), features=["feat"], labels=["label"])
        loader = dgl.dataloading.DataLoader(self.graph, nodes, sampler, batch_size=batch_size, shuffle=shuffle, device=self.device, use_ddp=ddp)
        attach(loader, {"feat": self.features})
        for _, _, blocks in timer.timed(loader, "sample"):  # includes the gather, inside DGL's prefetcher
            yield blocks, blocks[0].srcdata["feat"], blocks[-1].dstdata["label"]

    def close(self) -> None:
        self.features.close()


class StoreSource(_StoreStats):
    """DGL samples the blocks; our :class:`DataLoader` gathers the input rows with a FeatureStore
    (backend ``cpu``, ``zerocopy`` or ``gpu``), ``prefetch`` batches ahead."""

    def __init__(
        self,
        dataset: GraphDataset,
        fanouts: list[int],
        device: torch.device,
        backend: str = "cpu",
        prefetch: int = 0,
        seed: int = 0,
        compression: str | None = None,
        cache: CacheRequest = CacheRequest(),
        sampling: SamplerRequest = SamplerRequest(),
    ) -> None:
        self.graph = dataset.to_dgl(with_data=False)
        self.fanouts, self.device, self.prefetch, self.seed = fanouts, device, prefetch, seed
        self.sampling = sampling
        self.snapshot_sampler = None  # the training loaders' SnapshotSampler (sampling.kind "snapshot"), refreshed by their epoch hook
        table, codec = feature_table(dataset, compression)
        self.features = FeatureStore(
            table,
            backend=backend,
            device=device,
            compression=codec,
            **cache.store_options(self.graph, fanouts, dataset.num_nodes, _stored_row_bytes(dataset, compression)),
        )
        self.labels = tensor_view(dataset.labels)
        self.blocks = "device" if device.type == "cuda" and not dgl_has_cuda() else "dgl"
        self._loaders: dict = {}

    def batches(self, nodes: torch.Tensor, batch_size: int, shuffle: bool, timer: StageTimer, ddp: bool = False) -> Iterator:
        import dgl

        key = (nodes.data_ptr(), len(nodes), batch_size, shuffle, ddp)
        if key not in self._loaders:  # one loader per node set, so its epoch counter reshuffles (and re-splits)
            if shuffle and self.sampling.kind == "snapshot":
                if self.snapshot_sampler is None:
                    self.snapshot_sampler = self.sampling.snapshot_sampler(self.fanouts)
                sampler = self.snapshot_sampler
            else:
                sampler = dgl.dataloading.NeighborSampler(self.fanouts)
            # On a GPU the snapshot lives in device memory and is sampled there (our loader with use_uva=True
            # maps the SnapshotSampler onto GpuSnapshotSampler); evaluation batches sample the full graph.
            gpu = self.sampling.kind == "gpu" or (shuffle and self.sampling.kind == "snapshot" and _samples_on_gpu(self.device))
            self._loaders[key] = DataLoader(
                self.graph,
                nodes,
                sampler,
                features={"feat": self.features},
                labels={"label": self.labels},
                device=self.device,
                use_ddp=ddp,
                ddp_seed=self.seed,
                batch_size=batch_size,
                shuffle=shuffle,
                prefetch=self.prefetch,
                seed=self.seed,
                blocks="device" if gpu else self.blocks,
                use_uva=gpu,
                graph_placement=self.sampling.placement,
            )
        loader = self._loaders[key]
        loader.timer = timer
        for _, _, blocks in loader:
            yield blocks, blocks[0].srcdata["feat"], blocks[-1].dstdata["label"]

    def close(self) -> None:
        for loader in self._loaders.values():
            loader.close()
        self.features.close()


def make_source(
    name: str,
    dataset: GraphDataset,
    fanouts: list[int],
    device: torch.device,
    prefetch: int = 0,
    seed: int = 0,
    compression: str | None = None,
    cache: CacheRequest = CacheRequest(),
    sampling: SamplerRequest = SamplerRequest(),
):
    """The feature source called ``name`` (see :data:`FEATURE_SOURCES`) for ``dataset`` on ``device``;
    ``compression`` (None/``"none"``, ``"fp16"``, ``"bf16"``, ``"int8"``) and ``cache`` for the FeatureStore sources;
    ``sampling``: a :class:`SamplerRequest` (``"gpu"``: our DataLoader's sources only; ``"snapshot"``: homogeneous graphs).
    A heterograph (:class:`~dgl_zerocopy.data.hetero.HeteroGraphDataset`) gets one of :mod:`.hetero_sources`."""
    if sampling.kind not in ("cpu", "gpu", "snapshot"):
        raise ValueError(f"unknown sampler {sampling.kind!r}; choose from: cpu, gpu, snapshot")
    if isinstance(dataset, HeteroGraphDataset):
        if sampling.kind == "snapshot":
            raise ValueError("the snapshot sampler samples homogeneous graphs, and this dataset is a heterograph; sample it with SamplerRequest('cpu')")
        from .hetero_sources import make_hetero_source

        return make_hetero_source(name, dataset, fanouts, device, prefetch, seed, compression, parse_cache_size(cache.size)[1])
    compression = check_codec_name(compression)
    if name == "dgl":
        for what, used in ((f"compression {compression!r}", compression is not None), (f"a cache of {cache.size!r}", parse_cache_size(cache.size)[1] != 0)):
            if used:
                raise ValueError(f"{what} needs a FeatureStore source (dgl-storage, cpu, zerocopy or gpu); source 'dgl' slices DGL's own table")
        return DglSource(dataset, fanouts, device, sampling=sampling)
    if name == "dgl-storage":
        return DglStorageSource(dataset, fanouts, device, compression=compression, cache=cache, sampling=sampling)
    if name in ("cpu", "zerocopy", "gpu"):
        return StoreSource(dataset, fanouts, device, backend=name, prefetch=prefetch, seed=seed, compression=compression, cache=cache, sampling=sampling)
    raise ValueError(f"unknown feature source {name!r}; choose from: {', '.join(FEATURE_SOURCES)}")


def feature_table(dataset: GraphDataset, compression: str | None):
    """``(data, compression)`` to build the FeatureStore from: the dataset's features as they are, or
    their compressed folder kept beside a memory-mapped ``.npy`` (written once, then reused), or the
    features with ``compression`` for the store to compress in memory (other tables, or a folder
    that cannot be written)."""
    compression = check_codec_name(compression)
    path = _mapped_npy(dataset.features) if compression is not None else None
    if path is None:
        return dataset.features, compression
    try:
        return compressed_beside(path, compression), None
    except OSError as error:
        log.warning("cannot keep the %s form beside %s (%s); compressing it in memory instead", compression, path, error)
        return dataset.features, compression


def _mapped_npy(features) -> Path | None:
    """The ``.npy`` file that ``features`` maps whole (``np.load(path, mmap_mode=...)``), else None."""
    filename = getattr(features, "filename", None)
    if not isinstance(features, np.memmap) or not filename or not str(filename).endswith(".npy"):
        return None
    whole = np.load(filename, mmap_mode="r")
    if whole.shape != features.shape or whole.dtype != features.dtype or whole.offset != features.offset:
        return None
    return Path(filename)


def _samples_on_gpu(device: torch.device) -> bool:
    """Whether our loader's snapshot sampling runs on the GPU sampler: on a CUDA device, or on the CPU
    inside :func:`~dgl_zerocopy.loading.gpu_sampling.emulate_on_cpu` (the tests' stand-in)."""
    from ..loading.gpu_sampling import stand_in

    return device.type == "cuda" or stand_in() is not None
