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

Features left on storage (a dataset whose ``features`` is a
:class:`~dgl_zerocopy.data.feature_file.FeatureFile`: ``train --feature-storage``): the FeatureStore
sources build ``FeatureStore(path, storage=StorageTier(N))`` with ``N`` from the request's ``host_buffer``
(a share of the table's rows, its bookkeeping on top, or a size) and the graph for its static ranking (the degree sampling
follows); our DataLoader reads the next batches' rows ahead. A buffer that cannot hold the distinct rows
of the run's batches (training, and evaluation where ``cache.eval_batch_size`` is given) is refused when the
source is made (:class:`~.config.ConfigError`, :mod:`.host_budget`). ``storage_stats()`` and
``reset_storage_stats()`` pass the store's counters on (``on_storage`` False: no counters).

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
import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from ..data import GraphDataset
from ..data.base import tensor_view
from ..data.feature_file import FeatureFile, mapped_npy
from ..data.hetero import HeteroGraphDataset
from ..loading.dgl_options import dgl_has_cuda
from ..loading.timing import StageTimer
from ..store.cache import DEFAULT_CACHE_POLICY, budget_for_rows
from ..store.compression import CODECS, check_codec_name, compressed_beside
from ..store.compression.codec import STORED_DTYPES
from ..store.feature_store import FeatureStore
from ..store.options import DeviceCache, StorageTier
from ..store.storage.policy import budget_for_slots
from ..store.table_input import human_size
from .config import ConfigError, parse_cache_size
from .host_budget import check_batches_fit
from .our_loaders import OurLoaders

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
    host_buffer: str | None = None  # features left on storage: the host buffer ("25%" of the table's rows, "2GiB", bytes)
    host_buffer_policy: str | None = None  # which rows it keeps (None: static, ranked by the graph's degrees)
    eval_batch_size: int | None = None  # features left on storage: the evaluation batches the buffer must serve too (None: not checked)

    def host_buffer_bytes(self, rows: int, row_bytes: int) -> int:
        """The host buffer's bytes for a table of ``rows`` stored rows of ``row_bytes``: a share (``"25%"``) gives
        that share of the rows a slot each, the buffer's bookkeeping on top (``"100%"`` holds the whole table)."""
        kind, amount = parse_cache_size(self.host_buffer, "host_buffer")
        return budget_for_slots(rows, row_bytes, math.ceil(round(amount * rows, 6)), self.host_buffer_policy) if kind == "rows" else amount

    def store_options(self, graph, fanouts: list[int], rows: int, row_bytes: int, on_storage: bool = False) -> dict:
        """``FeatureStore`` parts (``cache=``, ``storage=``) for a table of ``rows`` stored rows of ``row_bytes``;
        ``on_storage``: the table is a path, its host buffer sized by ``host_buffer`` and ranked by ``graph``."""
        options = {"storage": StorageTier(self.host_buffer_bytes(rows, row_bytes), self.host_buffer_policy)} if on_storage else {}
        kind, amount = parse_cache_size(self.size)
        cache_bytes = budget_for_rows(round(amount * rows), row_bytes, rows) if kind == "rows" else amount
        if cache_bytes == 0:
            if on_storage:
                options["cache"] = DeviceCache(graph=graph)  # no device cache; the graph ranks the host buffer's static rows
            return options
        # "degree" needs no sampler: every source samples in-edges (DGL's default), so it ranks by out-degree.
        sampler = seeds = presample = None
        if self.policy == "presample":
            import dgl

            sampler, seeds, presample = dgl.dataloading.NeighborSampler(fanouts), self.seeds, {"batch_size": self.batch_size}
        options["cache"] = DeviceCache(cache_bytes, self.policy, graph, sampler, seeds, presample)
        return options


def _stored_row_bytes(dataset: GraphDataset, compression: str | None) -> int:
    """Bytes of one stored row: the table's, or its codes' (fp16/bf16: 2 per column, int8: 1)."""
    if compression in CODECS:
        return dataset.features.shape[1] * STORED_DTYPES[compression].itemsize
    if isinstance(dataset.features, FeatureFile):
        return dataset.features.row_bytes
    return dataset.features.shape[1] * dataset.features.dtype.itemsize


def _feature_store(dataset: GraphDataset, graph, fanouts: list[int], compression, cache: CacheRequest, backend: str, device: torch.device) -> FeatureStore:
    """The FeatureStore of ``dataset``'s features: in memory, or left on storage (a :class:`FeatureFile`)
    with a host buffer that must serve the run's batches (:mod:`.host_budget`; :class:`ConfigError` otherwise)."""
    table, codec = feature_table(dataset, compression)
    row_bytes = _stored_row_bytes(dataset, compression)
    on_storage = isinstance(dataset.features, FeatureFile)
    if not on_storage:
        options = cache.store_options(graph, fanouts, dataset.num_nodes, row_bytes)
        return FeatureStore(table, backend=backend, device=device, compression=codec, **options)
    try:
        options = cache.store_options(graph, fanouts, dataset.num_nodes, row_bytes, on_storage)
        store = FeatureStore(table, backend=backend, device=device, compression=codec, **options)
    except ValueError as error:  # a budget that holds no row
        raise ConfigError(f"host_buffer {cache.host_buffer!r}: {error}") from None
    rows = store.nbytes // row_bytes
    if rows < min(cache.batch_size, dataset.num_nodes):
        store.close()
        raise ConfigError(
            f"host_buffer {cache.host_buffer!r} ({human_size(options['storage'].bytes)}) holds {rows:,} rows of {row_bytes:,} bytes beside its "
            f"row -> slot map, fewer than one batch's {cache.batch_size:,} seeds (and a batch reads their sampled neighbours too); "
            f"give a larger --host-buffer or a smaller --batch-size"
        )
    check_batches_fit(store, graph, dataset, fanouts, cache, row_bytes)  # training and evaluation batches, before the first step
    return store


class _StoreStats:
    """The cache and storage counters of a source's ``features`` store."""

    @property
    def has_cache(self) -> bool:
        return self.features.cache_policy is not None

    def cache_stats(self) -> dict:
        return self.features.cache_stats()

    def reset_cache_stats(self) -> None:
        self.features.reset_cache_stats()

    @property
    def on_storage(self) -> bool:
        return self.features.on_storage

    def storage_stats(self) -> dict:
        return self.features.storage_stats()

    def reset_storage_stats(self) -> None:
        self.features.reset_storage_stats()


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
    on_storage = False

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
        self.features = _feature_store(dataset, self.graph, fanouts, compression, cache, "auto" if device.type == "cuda" else "cpu", device)

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


class StoreSource(_StoreStats, OurLoaders):
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
        self.features = _feature_store(dataset, self.graph, fanouts, compression, cache, backend, device)
        self.labels = tensor_view(dataset.labels)
        self.blocks = "device" if device.type == "cuda" and not dgl_has_cuda() else "dgl"
        self._loaders: dict = {}

    def batches(self, nodes: torch.Tensor, batch_size: int, shuffle: bool, timer: StageTimer, ddp: bool = False) -> Iterator:
        # On a GPU the snapshot lives in device memory and is sampled there (our loader with use_uva=True
        # maps the SnapshotSampler onto GpuSnapshotSampler); evaluation batches sample the full graph.
        gpu = self.sampling.kind == "gpu" or (shuffle and self.sampling.kind == "snapshot" and _samples_on_gpu(self.device))
        loader = self._loader(
            nodes,
            nodes,
            batch_size,
            shuffle,
            ddp,
            timer,
            lambda: self._sampler(shuffle),
            features={"feat": self.features},
            labels={"label": self.labels},
            blocks="device" if gpu else self.blocks,
            use_uva=gpu,
            graph_placement=self.sampling.placement if gpu else "pinned",  # evaluation of snapshot runs: DGL's sampler on the CPU
        )
        for _, _, blocks in loader:
            yield blocks, blocks[0].srcdata["feat"], blocks[-1].dstdata["label"]

    def _sampler(self, shuffle: bool):
        """The sampler of a new loader: the source's one SnapshotSampler for snapshot training batches, else DGL's."""
        import dgl

        if shuffle and self.sampling.kind == "snapshot":
            if self.snapshot_sampler is None:
                self.snapshot_sampler = self.sampling.snapshot_sampler(self.fanouts)
            return self.snapshot_sampler
        return dgl.dataloading.NeighborSampler(self.fanouts)

    def close(self) -> None:
        self._close_loaders()
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
    if isinstance(dataset.features, FeatureFile):  # left on storage: the file, or its codes beside it
        stored = dataset.features
        if compression is None or stored.codec == compression:
            return str(stored.path), None
        if stored.codec is not None:
            raise ValueError(f"{str(stored.path)!r} holds {stored.codec} codes, but compression {compression!r} was asked; pass the .npy, or no compression")
        return compressed_beside(stored.path, compression), None
    path = mapped_npy(dataset.features) if compression is not None else None
    if path is None:
        return dataset.features, compression
    try:
        return compressed_beside(path, compression), None
    except OSError as error:
        log.warning("cannot keep the %s form beside %s (%s); compressing it in memory instead", compression, path, error)
        return dataset.features, compression


def _samples_on_gpu(device: torch.device) -> bool:
    """Whether our loader's snapshot sampling runs on the GPU sampler: on a CUDA device, or on the CPU
    inside :func:`~dgl_zerocopy.loading.gpu_sampling.emulate_on_cpu` (the tests' stand-in)."""
    from ..loading.gpu_sampling import stand_in

    return device.type == "cuda" or stand_in() is not None
