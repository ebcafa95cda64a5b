"""DataLoader: DGL 2.1's ``dgl.dataloading.DataLoader`` signature, defaults and output, plus
``features=``, ``labels=`` and ``prefetch=``; the next batches are sampled and gathered on a
background thread while the current one trains.

Any DGL sampler works as the user built it: block samplers (``input_nodes, output_nodes, blocks``),
``as_edge_prediction_sampler`` (``input_nodes, pair_graph[, neg_pair_graph], blocks``, edge ids as
indices, ``exclude`` and reverse mappings), subgraph samplers (``ClusterGCNSampler``,
``SAINTSampler``: a subgraph; ``ShaDowKHopSampler``: ``input_nodes, output_nodes, subgraph``), on
homogeneous graphs and heterographs (indices as ``{type: ids}``). Per batch it yields what DGL's
loader yields, on ``device``, with the data the sampler marks (``prefetch_node_feats``,
``prefetch_labels``, ``prefetch_edge_feats``, ``prefetch_ndata``/``prefetch_edata``, per type)
already in place: :mod:`.collate` finds the marks, :mod:`.feature_sources` serves each from a
FeatureStore per (kind, type, name) (shared by every loader in the process) into the ring's slots,
or, for what a store does not hold (labels, 1-D data), by indexing as DGL does. The indices, their
order per epoch, DDP's split and the worker processes' split follow DGL exactly (:mod:`.seeds`).

Feature tensors in slots are valid until the loop has asked for ``prefetch + 1`` more batches
(clone them to keep them longer; a warning says when a kept one was overwritten).

Streams (CUDA, ``prefetch > 0``; the table is in docs/architecture.md): the worker gathers and
copies on a side stream and records the batch's ready event; the consumer's stream waits on it.
Slot buffers are reused only after the slot's release event, which the consumer records when it
asks for the next batch, when the epoch ends or is left, and before a new epoch starts. Everything
else the worker hands over (the sampler's output moved to the device, labels, data indexed on the
host) is ``record_stream``-ed on the consumer's stream before the batch is returned. The ring, its
side stream and events are :mod:`dgl_zerocopy.loading.ring`, shared with the DistDGL loader. An
epoch writes a ring only after that ring's previous worker has stopped.

Iterators: every ``iter(loader)`` is an epoch of its own (:mod:`.epoch`), with its own worker and
ring, as torch's DataLoader gives every ``iter()`` its own iterator: ``zip(loader, loader)``, nested
loops and one loop per thread each get a whole epoch, and a loop that runs alone reuses one ring.

Ids: a batch of DGL's own sampler (and, for an edge-prediction wrapper, its inner sampler) holds
only node and edge ids of the graph, so the gathers skip the range check; the marks of a sampler
of one's own are range-checked.

``use_uva=True`` samples on the GPU (:mod:`.gpu_sampling`): DGL's ``NeighborSampler`` becomes our
``GpuNeighborSampler`` over the graph's CSC pinned in place (or in device memory), a
``SnapshotSampler`` our ``GpuSnapshotSampler`` (its snapshot in device memory, refreshed from that
CSC at each epoch's start); each batch is sampled on the side stream inside its slot's fill, and
the sampled ids feed the gathers on the device, unchecked.
"""

from __future__ import annotations

import functools
import logging
import threading
import weakref
from collections import deque
from collections.abc import Iterator, Mapping
from typing import NamedTuple

import torch

from .._extras import import_dgl
from ..store.feature_store import resolve_device
from . import dgl_options
from .collate import find_needs, mark_blocks, move
from .dgl_options import OTHER_TORCH_KWARGS, WORKER_KWARGS, apply_dgl_options, default_block_kind, dgl_has_cuda, gpu_cache_rows, is_dgl_sampler
from .epoch import Batch, EpochIterator
from .feature_sources import Sources
from .gpu_sampling import DeviceSampling, check_cuda
from .prefetch import close_iterator, wait_stopped
from .ring import RingPool, SlotRing
from .seeds import EDGE, PARTITION, EpochOrder, SeedSet, index_kind
from .timing import StageTimer
from .worker_dataset import EpochBatches, restore_parent_columns
from .workers import identity, sampled_batches, stop_processes

log = logging.getLogger(__name__)

BLOCK_KINDS = ("dgl", "device")


class DataLoader:
    """Minibatches of whatever the sampler returns, with the data it marks gathered onto ``device``.

    The arguments up to ``gpu_cache`` are DGL 2.1's, in its order and with its defaults; DGL's prefetcher and UVA options are
    each mapped to their nearest equivalent here (a one-time warning says so where one cannot apply).

    Every ``iter(loader)`` is an epoch of its own (the next epoch number, its own order), with its own worker thread and ring of
    ``prefetch + 2`` slots: iterators alive at the same time (``zip(loader, loader)``, nested loops, one per thread) each yield a
    whole epoch, their feature tensors in buffers of their own. A second ring is made only while two iterators are alive at once
    (and kept). Persistent worker processes serve one iterator at a time; an iterator made while they are busy gets processes of
    its own. An iterator that is left (``break``) stops when it is freed, or with :meth:`close`.

    Batches: what DGL's loader yields, on ``device``. On CUDA a batch is gathered on a side stream (unless
    ``use_alternate_streams=False``) and is ready on the stream current where ``next()`` returned it: that stream waits for the
    batch's event, on the device. Its feature tensors live in ring slots, valid until the loop has asked for ``prefetch + 1`` more
    batches (clone them to keep them longer; a warning says when a kept one was overwritten).

    Args:
        graph: a DGL graph (homogeneous or a heterograph) on the CPU.
        indices: what the sampler takes: node ids, edge ids for an edge-prediction sampler, partition ids for
            ``ClusterGCNSampler``; a 1-D int32/int64 tensor, or ``{type: ids}`` on a heterograph. Node and edge ids are range-checked
            per type and passed in the graph's id dtype.
        graph_sampler: any DGL sampler, used as it is (block, edge-prediction and subgraph samplers).
        device: where batches go (default: the graph's; with ``use_uva``, the current CUDA device).
        use_ddp: split the indices across the ``torch.distributed`` ranks, as DGL does (default False).
        ddp_seed: the seed of that split's shuffle (default 0).
        batch_size: indices per batch (a positive int; default 1).
        drop_last: drop the last, smaller batch (default False).
        shuffle: a new order each epoch (default False).
        use_prefetch_thread: DGL's: False means ``prefetch=0``, True at least 1; None (default): ``prefetch`` decides.
        use_alternate_streams: DGL's: False gathers on the default stream, like the training step (default: a side stream).
        pin_prefetcher: DGL's; rows are read from pinned memory on CUDA always (a warning where it would differ).
        use_uva: sample on the GPU (:mod:`.gpu_sampling`: DGL's ``NeighborSampler``, or our ``SnapshotSampler``, on a homogeneous
            graph); the sampled ids stay on the device and feed the gathers unchecked.
        gpu_cache: DGL's ``{"node": {name: rows}}`` (homogeneous graphs): a hot-row cache of that many rows in the store the
            loader makes for that feature, chosen by the degree the sampler follows.
        features: keyword-only, as are the rest: name (``(ntype, name)`` on a heterograph) -> :class:`FeatureStore` on ``device``,
            or a CPU tensor. For a block sampler they go in ``blocks[0].srcdata`` at the input nodes, and serve any mark of that name.
        labels: the same, for ``blocks[-1].dstdata`` at the output nodes.
        prefetch: batches prepared ahead on a background thread (default 2; 0: serial, sampling on the calling thread as DGL's
            loader does on the CPU).
        seed: None (default): shuffle with NumPy's global generator, as DGL; an int: epoch ``e`` is the permutation of
            ``numpy.random.default_rng([seed, e])`` (with DDP ``default_rng([ddp_seed, e])``, the same on every rank).
        blocks: ``"dgl"`` or ``"device"`` (blocks as :class:`~dgl_zerocopy.loading.blocks.DeviceBlock`, for a CUDA device with
            PyPI's CPU-only DGL); default: ``"device"`` exactly then.
        timer: a :class:`~dgl_zerocopy.loading.timing.StageTimer` to time the stages with (default: a new one).
        store_options: keyword arguments for the FeatureStores the loader makes.
        graph_placement: with ``use_uva``: ``"pinned"`` (default: the graph's CSC pinned in place) or ``"device"`` (a copy in GPU
            memory), held until :meth:`close`.
        read_ahead: for stores whose rows stay in their file (``FeatureStore(path, storage=StorageTier(N))``), sample each batch
            ``max(1, prefetch)`` batches before its gather and read its rows meanwhile (default True; docs/storage.md). Such a loader
            serves one epoch at a time: a new ``iter()`` ends an unfinished one, whose next ``next()`` raises RuntimeError.
        **kwargs: torch DataLoader keywords: ``num_workers > 0`` samples in worker processes, split and seeded as DGL's are
            (with ``persistent_workers``, ``worker_init_fn``, ``prefetch_factor``, ``timeout``, ``multiprocessing_context``,
            ``generator``); ``pin_memory``, ``pin_memory_device`` and ``in_order`` are accepted.

    Raises:
        TypeError: an unknown keyword argument.
        ValueError: a bad ``batch_size``, ``prefetch``, ``seed``, ``blocks``, ``num_workers``, ``gpu_cache`` or ``graph_placement``;
            a graph not on the CPU; ``blocks="dgl"`` on CUDA with a CPU build of DGL.
        IndexError: an index outside the graph's nodes or edges (per type), naming it.
        RuntimeError: ``use_ddp`` without a process group; ``use_uva`` without CUDA.
        MissingExtraError: DGL is not installed (the line names the extra that brings it).
    """

    def __init__(
        self,
        graph,
        indices,
        graph_sampler,
        device=None,
        use_ddp: bool = False,
        ddp_seed: int = 0,
        batch_size: int = 1,
        drop_last: bool = False,
        shuffle: bool = False,
        use_prefetch_thread: bool | None = None,
        use_alternate_streams: bool | None = None,
        pin_prefetcher: bool | None = None,
        use_uva: bool = False,
        gpu_cache: Mapping | None = None,
        *,
        features: Mapping | None = None,
        labels: Mapping | None = None,
        prefetch: int = 2,
        seed: int | None = None,
        blocks: str | None = None,
        timer: StageTimer | None = None,
        store_options: Mapping | None = None,
        graph_placement: str = "pinned",
        read_ahead: bool = True,
        **kwargs,
    ) -> None:
        import_dgl("dgl_zerocopy.DataLoader (DGL's DataLoader, for DGL graphs and samplers)")  # one line naming the extra where DGL is missing
        unknown = sorted(set(kwargs) - set(WORKER_KWARGS) - set(OTHER_TORCH_KWARGS))
        if unknown:
            raise TypeError(
                f"DataLoader got unexpected keyword argument(s) {unknown}: it takes DGL's arguments, torch "
                f"DataLoader's {list(WORKER_KWARGS + OTHER_TORCH_KWARGS)} and features=, labels=, prefetch=, "
                f"seed=, blocks=, timer=, store_options=, graph_placement=, read_ahead= (it makes its own batches, sampler and collate_fn)"
            )
        if use_uva:
            check_cuda(device)  # before anything touches the device
        elif graph_placement != "pinned":
            raise ValueError(f"graph_placement={graph_placement!r} places the graph for sampling on the GPU, which use_uva=True turns on")
        if use_uva and device is None and torch.cuda.is_available():
            device = torch.cuda.current_device()  # DGL's default with UVA
        self.device = resolve_device(device if device is not None else graph.device)
        cuda_dgl = self.device.type == "cuda" and dgl_has_cuda()
        if blocks is None:
            blocks = default_block_kind(self.device.type, cuda_dgl, use_uva)
        if blocks not in BLOCK_KINDS:
            raise ValueError(f"blocks must be 'dgl' or 'device', but got {blocks!r}")
        if not isinstance(prefetch, int) or prefetch < 0:
            raise ValueError(f"prefetch must be an integer >= 0 (0 = no background thread), but got {prefetch!r}")
        if not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size must be a positive integer, but got {batch_size!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"seed must be None (NumPy's global generator, as DGL) or an int, but got {seed!r}")
        if blocks == "dgl" and self.device.type == "cuda" and not cuda_dgl:
            raise ValueError(
                "blocks='dgl' on a CUDA device needs a CUDA build of DGL, and the installed DGL is a CPU build; "
                "pass blocks='device' (the default) to get device-side blocks for dgl_zerocopy.nn / dgl_zerocopy.training.models"
            )
        num_workers = kwargs.get("num_workers", 0)
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"num_workers must be an integer >= 0, but got {num_workers!r}")
        if use_ddp:
            import torch.distributed as dist

            if not (dist.is_available() and dist.is_initialized()):
                raise RuntimeError(
                    "use_ddp=True needs torch.distributed's process group: call "
                    "torch.distributed.init_process_group(...) in each process before making the DataLoader"
                )
            self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        else:
            self.rank, self.world_size = 0, 1
        if graph.device.type != "cpu":
            raise ValueError(
                f"the graph must be on the CPU (sampling runs there), but it is on {graph.device}; keep it on the CPU and pass device= for where the batches go"
            )
        self.graph, self.graph_sampler, self.indices = graph, graph_sampler, indices
        kind = index_kind(graph_sampler)
        partitions = len(graph_sampler.partition_offset) - 1 if kind == PARTITION else None
        self.seeds = SeedSet(indices, graph, kind, partitions)
        # DGL's own samplers return only node and edge ids of the graph they sample: no range checks.
        inner = getattr(graph_sampler, "sampler", None) if kind == EDGE else None
        self._trusted = is_dgl_sampler(graph_sampler) and (inner is None or is_dgl_sampler(inner))
        # GPU sampling checks what it cannot sample before any store is made.
        self._device_sampling = DeviceSampling(graph, graph_sampler, self.device, graph_placement, num_workers, blocks) if use_uva else None
        self._sources = Sources(graph, self.device, store_options or {}, gpu_cache_rows(gpu_cache, graph.num_nodes()), graph_sampler, device_ids=bool(use_uva))
        self._marks = (self._sources.add(features, "features"), self._sources.add(labels, "labels"))
        self._sources.declare(graph_sampler)
        self._sources.check_cached()
        self.batch_size, self.shuffle, self.drop_last = batch_size, shuffle, drop_last
        self.use_ddp, self.ddp_seed = bool(use_ddp), ddp_seed
        self.seed, self.blocks = seed, blocks
        self.read_ahead = bool(read_ahead)
        self._order = EpochOrder(len(self.seeds), batch_size, drop_last, shuffle, (self.rank, self.world_size) if use_ddp else None, seed, ddp_seed)
        self._move_graphs = cuda_dgl
        self.prefetch = apply_dgl_options(prefetch, self.device, use_prefetch_thread, pin_prefetcher, kwargs)
        self.timer = timer or StageTimer()
        self.epoch = 0
        self._worker_kwargs = {k: kwargs[k] for k in WORKER_KWARGS if k in kwargs}
        dgl_options.warn_frozen_snapshot(graph_sampler, self._worker_kwargs)
        self._workers = None  # the torch DataLoader of the sampling processes (num_workers > 0), made lazily
        self._positions = None  # its shared-memory seed positions, rewritten every epoch
        # The epoch that uses persistent processes: (its iterator, weakly; its worker thread).
        self._workers_user: tuple[weakref.ref, object] | None = None
        # use_alternate_streams=False: the worker queues on the default stream, like the step.
        self._rings = RingPool(functools.partial(SlotRing, self.device, self.prefetch, side_stream=use_alternate_streams is not False))
        _ = self._rings.first  # made now: a loop that runs alone uses it every epoch
        # Weak references: leaving the loop drops the epoch's iterator, whose finalizer stops the worker.
        self._live: weakref.WeakSet[EpochIterator] = weakref.WeakSet()
        # The sampler samples one batch at a time, whichever iterator asks: DGL's keep state between
        # calls (the fused NeighborSampler's node mapping), which two threads at once corrupt.
        self._sampling = threading.Lock()
        if self._device_sampling is not None:  # the graph is given back after the workers stopped
            weakref.finalize(self, _close_sampling, self._rings, self._device_sampling)

    @property
    def _ring(self) -> SlotRing:
        """The ring of a loop that runs alone (iterators alive at the same time take others)."""
        return self._rings.first

    @property
    def sampler(self):
        """The graph sampler (DGL's name: ``graph_sampler``)."""
        return self.graph_sampler

    @property
    def features(self) -> dict:
        """The node features served in ``blocks[0].srcdata``: name (``(ntype, name)`` on a
        heterograph) -> FeatureStore, or tensor for data indexed on the host."""
        return self._sources.features

    @property
    def labels(self) -> dict:
        """The node labels served in ``blocks[-1].dstdata``, keyed as :attr:`features`."""
        return self._sources.labels

    def attach_data(self, name: str, data) -> None:
        """DGL's: ``data`` (a tensor or FeatureStore) serves the LazyFeature leaves named ``name``
        that the sampler returns (``LazyFeature(name, ids)``)."""
        self._sources.attached[name] = data

    def set_epoch(self, epoch: int) -> None:
        """Make the next epoch number ``epoch`` (the order of ``seed=`` depends on it)."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self._order)

    # -- iteration -------------------------------------------------------------------------
    def __iter__(self) -> Iterator:
        # Another live iterator goes on (torch's semantics): this epoch takes a ring of its own. The
        # ring's previous worker may still be in its last step (close() does not wait for ever):
        # this one starts after it has stopped. Then every slot is released after the work the
        # consumer has queued so far (an epoch left by `break` released nothing).
        if self._reads_ahead():
            # Live epochs would share the store's one host buffer, each reserving slots for the batches it
            # sampled ahead, and starve each other (a gather then finds the buffer full): one at a time.
            for iterator in list(self._live):
                if not iterator.closed:
                    iterator.supersede()
        ring = self._rings.take()
        try:
            ring.begin_epoch()
            return self._start_epoch(ring)
        except BaseException:
            self._rings.give_back(ring)
            raise

    def _start_epoch(self, ring: SlotRing) -> EpochIterator:
        if self._device_sampling is not None:
            self._device_sampling.open()  # taken again after close()
        # Epoch hook: a sampler with per-epoch state (SnapshotSampler) updates it here,
        # after the previous epoch's sampling stopped and before this epoch's workers start; with
        # use_uva=True the GPU sampler does (its snapshot in device memory), never the CPU one.
        hook = self._device_sampling if self._device_sampling is not None else self.graph_sampler
        if callable(getattr(hook, "on_epoch_start", None)):
            with self._sampling:  # not while another live iterator samples
                hook.on_epoch_start(self.graph)
        positions = self._order.next_epoch(self.epoch)  # shuffled here, where DGL's loader shuffles
        self.epoch += 1
        shared_processes = False
        if self._worker_kwargs.get("num_workers", 0) > 0:
            tasks, shared_processes = self._sampled_by_workers(positions)
        else:
            # DGL's loader is a torch DataLoader, whose every iterator draws a seed from torch's
            # generator: drawing it too leaves torch's random stream where DGL's loader leaves it.
            torch.empty((), dtype=torch.int64).random_(generator=self._worker_kwargs.get("generator"))
            tasks = self._seed_batches(positions)
        if self._reads_ahead():
            tasks = self._read_ahead(tasks)
        iterator = EpochIterator(self, tasks, self._rings, ring)
        self._live.add(iterator)
        if shared_processes:
            self._workers_user = (weakref.ref(iterator), iterator.thread)
        return iterator

    def _reads_ahead(self) -> bool:
        """Whether an epoch reads its batches' rows ahead from storage (``read_ahead``, a store on storage)."""
        return self.read_ahead and self._device_sampling is None and self._sources.on_storage()

    def _seed_batches(self, positions: torch.Tensor) -> Iterator:
        """(index, _Seeds) of the epoch, made on the thread that samples."""
        for i in range(len(self)):
            yield i, _Seeds(self.seeds.batch(self._order.batch(positions, i)))

    def _sampled_by_workers(self, positions: torch.Tensor) -> tuple[Iterator, bool]:
        """(index, sampled output) of the epoch, sampled in worker processes by a torch DataLoader
        (DGL's split and order); the time spent waiting for them counts as ``sample``. Its iterator
        (the processes' start, and torch's seed draw) is made here, on the calling thread, as DGL's is.
        Returns the tasks and whether they come from the loader's persistent processes: those serve
        one epoch at a time, so an epoch made while another uses them gets processes of its own."""
        persistent = bool(self._worker_kwargs.get("persistent_workers"))
        user = self._workers_user
        iterator = user[0]() if user is not None else None
        if persistent and self._workers is not None and (iterator is None or iterator.closed):
            if user is not None and user[1] is not None:  # torch's iterator is reset below: its last reader must be gone
                wait_stopped(user[1], "the prefetch worker of the previous epoch")
            self._positions.copy_(positions)
            return sampled_batches(iter(self._workers), self.timer), True
        self.graph.create_formats_()  # once here, not once per worker
        shared = positions.clone().share_memory_()  # the workers see every epoch's order through it
        dataset = EpochBatches(self.graph, self.graph_sampler, self.seeds, shared, self.batch_size, len(self))
        if persistent and self._workers is None:
            self._workers, self._positions = torch.utils.data.DataLoader(dataset, batch_size=None, collate_fn=identity, **self._worker_kwargs), shared
            return sampled_batches(iter(self._workers), self.timer), True
        kwargs = {**self._worker_kwargs, "persistent_workers": False}  # this epoch's own: they stop when it ends
        workers = torch.utils.data.DataLoader(dataset, batch_size=None, collate_fn=identity, **kwargs)
        return sampled_batches(iter(workers), self.timer), False  # closing it stops the processes

    def close(self) -> None:
        """End every live iterator of this loader (their next batch is StopIteration) with its
        background worker, and stop the sampling processes (``num_workers > 0``, persistent ones
        too, gone when close() returns; iterating again starts new ones). Idempotent. A worker
        inside a step (sampling or gathering a batch) is not interrupted: close() waits for it a few
        seconds (:data:`dgl_zerocopy.loading.prefetch.JOIN_TIMEOUT`) and goes on; the next epoch on
        its ring waits for it to end, and persistent processes it reads from stop when it does.
        With ``use_uva=True`` it waits for the workers to end their step, then gives back the graph
        (the last user unpins it)."""
        for iterator in list(self._live):
            iterator.close()
        workers, user = self._workers, self._workers_user
        self._workers = self._positions = self._workers_user = None
        thread = user[1] if user is not None else None
        if workers is not None and (thread is None or not thread.is_alive()):
            stop_processes(workers)  # no thread reads them: now, whoever else holds torch's iterator
        if self._device_sampling is not None:
            _close_sampling(self._rings, self._device_sampling)

    def _produce(self, task) -> Batch:
        """Sample (unless a worker process did), move to the device and gather one batch into its
        ring slot (runs on the worker thread when prefetching). ``task``: (index, _Seeds, ring) or
        (index, the sampler's output from a worker process, ring), ``ring`` the epoch's."""
        index, work, ring = task
        timer = self.timer
        if self._device_sampling is not None:
            return self._produce_on_device(ring, index, work.ids)
        sampled = work if isinstance(work, _Sampled) else self._sample(work)
        try:
            with ring.fill(index) as fill:  # on the side stream, after the slot's release
                # Device stages are timed with events on the stream that runs them (no host sync).
                timed_on = torch.cuda.current_stream(self.device) if self.device.type == "cuda" else None
                with timer.stage("transfer", stream=timed_on):
                    output, graphs = move(sampled.output, self.device, self.blocks == "device", self._move_graphs, sampled.needs)
                with timer.stage("gather", stream=timed_on):
                    served = [self._sources.serve(need, fill, self._trusted, sampled.ahead.get(i)) for i, need in enumerate(sampled.needs)]
        finally:  # a batch that failed before its gathers gives its reads ahead back (idempotent)
            _release(sampled.ahead)
        return Batch(output, graphs, sampled.needs, served, fill)

    def _sample(self, work) -> _Sampled:
        """Sample a batch (unless a worker process did: ``work`` is then its output) and find its needs."""
        if isinstance(work, _Seeds):
            with self.timer.stage("sample"), self._sampling:
                output = self.graph_sampler.sample(self.graph, work.ids)
        else:
            output = restore_parent_columns(work, self.graph)
        mark_blocks(output, *self._marks)
        needs = find_needs(output)
        _name_slots(needs)
        return _Sampled(output, needs, {})

    def _read_ahead(self, tasks: Iterator) -> Iterator:
        """The epoch's tasks, each sampled ``max(1, prefetch)`` batches before it is gathered, with the
        storage reads of its rows started as soon as it is sampled (features left in their
        file, ``FeatureStore(path, storage=StorageTier(N))``): they fill the host buffer while earlier
        batches gather and train, and their rows stay reserved until their own gather. Runs on the
        thread that samples; closing it (after the last batch it gave was produced, or dropped: the
        prefetch worker may stop between the two) gives back the reads of the batches it still holds
        and of the last one it gave (a no-op once that one's gather has released them)."""
        held: deque = deque()
        given = None
        try:
            for index, work in tasks:
                sampled = self._sample(work)
                held.append((index, sampled._replace(ahead=self._sources.read_ahead(sampled.needs))))
                if len(held) > max(1, self.prefetch):
                    given = held.popleft()
                    yield given
            while held:
                given = held.popleft()
                yield given
        finally:
            for _, sampled in [*held, *([given] if given is not None else [])]:
                _release(sampled.ahead)
            close_iterator(tasks)

    def _produce_on_device(self, ring: SlotRing, index: int, seeds) -> Batch:
        """Sample on the device and gather, both inside the slot's fill (on the side stream); the
        ids stay on the device and are gathered unchecked (the sampler made them)."""
        with ring.fill(index) as fill:
            with self.timer.stage("sample"), self._sampling:  # wall time: it holds the per-layer size reads
                output, needs, pending = self._device_sampling.sample(seeds, list(self._sources.features), list(self._sources.labels))
            _name_slots(needs)
            timed_on = torch.cuda.current_stream(self.device) if self.device.type == "cuda" else None
            with self.timer.stage("gather", stream=timed_on):
                served = [self._sources.serve(need, fill, True) for need in needs]
        return Batch(output, output[2], needs, served, fill, pending)


def _close_sampling(rings: RingPool, sampling: DeviceSampling) -> None:
    """Give back the GPU sampling's graph once the rings' workers have stopped (their kernels read it)."""
    rings.stop_writers("the prefetch worker, before the graph it samples is unpinned")
    sampling.close()


class _Seeds(NamedTuple):
    """A batch of indices still to be sampled (a tensor or ``{type: ids}``)."""

    ids: object


class _Sampled(NamedTuple):
    """A sampled batch on the host: the sampler's output (marked), its needs (ring buffers named),
    and the storage reads started for them (position in ``needs`` -> ``ReadAhead``)."""

    output: object
    needs: list
    ahead: dict


def _release(ahead: dict) -> None:
    for handle in ahead.values():
        handle.release()


def _name_slots(needs: list) -> None:
    """Each need's ring buffer name: its column's name where that is unique in the batch (the
    usual ``"feat"``), else one that says where it is; the same in every batch of a sampler."""
    counts: dict[str, int] = {}
    for need in needs:
        counts[need.key] = counts.get(need.key, 0) + 1
    for need in needs:
        need.slot = need.key if counts[need.key] == 1 else need.slot_name
