"""DataLoader: DGL 2.1's ``dgl.dataloading.DataLoader`` signature and defaults, plus ``features=``,
``labels=`` and ``prefetch=``; the next batches are sampled and gathered on a background thread
while the current one trains.

Per batch it yields what DGL yields, ``(input_nodes, output_nodes, blocks)`` on ``device``, with
``blocks[0].srcdata[name]`` and ``blocks[-1].dstdata[name]`` already filled. The sampler's own
``prefetch_node_feats``/``prefetch_labels`` are served from ``graph.ndata`` through FeatureStores
the loader makes itself (one per tensor and device, shared by every loader in the process). The
feature tensors live in a ring of reused output buffers: a batch's tensors are valid until the
loop has asked for ``prefetch + 1`` more batches (clone them to keep them longer; a warning says
when a kept one was overwritten).

Streams (CUDA, ``prefetch > 0``; the table is in docs/architecture.md): the worker gathers and
copies on a side stream and records the batch's ready event; the consumer's stream waits on it.
Feature buffers live in ring slots, reused only after the slot's release event, which the consumer
records when it asks for the next batch, when the epoch ends or is left, and before a new epoch
starts. Everything else the worker hands over (node ids, labels, 1-D node data, block index
tensors) is ``record_stream``-ed on the consumer's stream before the batch is returned. The ring,
its side stream and events are :mod:`dgl_zerocopy.loading.ring`, shared with the DistDGL loader. A new
epoch starts only after the previous epoch's worker has stopped.

Ids: the feature and label stores are gathered with ``unchecked=True`` when the sampler is one of
DGL's own classes (its ids are nodes of the graph, and every store has one row per node); a
sampler of one's own is range-checked by the store.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterator, Mapping
from typing import NamedTuple

import numpy as np
import torch

from ..data.base import tensor_view
from ..store.cache import budget_for_rows
from ..store.feature_store import FeatureStore, resolve_device
from ..store.transfer import to_device
from .dgl_options import OTHER_TORCH_KWARGS, WORKER_KWARGS, apply_dgl_options, dgl_has_cuda, gpu_cache_rows, is_dgl_sampler, warn_once, without_prefetch_lists
from .prefetch import Prefetcher, close_iterator
from .ring import Fill, Slot, SlotRing
from .shared_stores import remember_store, shared_store
from .timing import StageTimer
from .workers import SampleBatches, identity, sampled_batches

log = logging.getLogger(__name__)

BLOCK_KINDS = ("dgl", "device")


class DataLoader:
    """Minibatches of sampled blocks with features and labels gathered onto ``device``.

    The arguments up to ``gpu_cache`` are DGL 2.1's, in its order and with its defaults:
    ``graph`` (a DGL graph on the CPU), ``indices`` (seed node ids, 1-D int32/int64, in the graph's
    id dtype on output), ``graph_sampler`` (any DGL block sampler; its ``prefetch_node_feats`` and
    ``prefetch_labels`` are honoured), ``device`` (default: the graph's), ``use_ddp``/``ddp_seed``
    (split the seeds across the ``torch.distributed`` ranks every epoch), ``batch_size``,
    ``drop_last``, ``shuffle``, and DGL's options of its prefetcher and UVA, each mapped to
    its nearest equivalent here (a one-time warning says so where one cannot apply). ``gpu_cache``
    (``{"node": {name: rows}}``) gives the store the loader makes for that feature a hot-row cache
    of that many rows, chosen by the degree the sampler follows (``FeatureStore(cache_bytes=...,
    cache_policy="degree")``: out-degree for in-edge sampling, in-degree for ``edge_dir="out"``). torch
    DataLoader keywords: ``num_workers > 0`` samples in worker processes that feed the gather
    thread (with ``persistent_workers``, ``worker_init_fn``, ``prefetch_factor``, ``timeout``,
    ``multiprocessing_context``).

    Extras, keyword-only: ``features`` (name -> :class:`FeatureStore` on ``device``, or a CPU
    tensor), ``labels`` (name -> 1-D tensor or FeatureStore), ``prefetch`` (batches prepared ahead
    on a thread; 0: serial), ``seed`` (shuffling without DDP: epoch ``e`` uses
    ``numpy.random.default_rng([seed, e])``; with DDP ``ddp_seed`` takes its place, the same on every
    rank), ``blocks`` (``"dgl"``; ``"device"``: :class:`dgl_zerocopy.loading.blocks.DeviceBlock`, for a
    CUDA device with PyPI's CPU-only DGL; default: ``"device"`` exactly then), ``timer``,
    ``store_options`` (keyword arguments for the FeatureStores the loader makes).
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
        seed: int = 0,
        blocks: str | None = None,
        timer: StageTimer | None = None,
        store_options: Mapping | None = None,
        **kwargs,
    ) -> None:
        unknown = sorted(set(kwargs) - set(WORKER_KWARGS) - set(OTHER_TORCH_KWARGS))
        if unknown:
            raise TypeError(
                f"DataLoader got unexpected keyword argument(s) {unknown}: it takes DGL's arguments, torch "
                f"DataLoader's {list(WORKER_KWARGS + OTHER_TORCH_KWARGS)} and features=, labels=, prefetch=, "
                f"seed=, blocks=, timer=, store_options= (it makes its own batches, sampler and collate_fn)"
            )
        if use_uva and device is None and torch.cuda.is_available():
            device = torch.cuda.current_device()  # DGL's default with UVA
        self.device = resolve_device(device if device is not None else graph.device)
        if blocks is None:
            blocks = "device" if self.device.type == "cuda" and not dgl_has_cuda() else "dgl"
        if blocks not in BLOCK_KINDS:
            raise ValueError(f"blocks must be 'dgl' or 'device', but got {blocks!r}")
        if not isinstance(prefetch, int) or prefetch < 0:
            raise ValueError(f"prefetch must be an integer >= 0 (0 = no background thread), but got {prefetch!r}")
        if not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size must be a positive integer, but got {batch_size!r}")
        if blocks == "dgl" and self.device.type == "cuda" and not dgl_has_cuda():
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
        self.graph = graph
        self.num_nodes = int(graph.num_nodes())
        self.indices = _node_ids(indices, self.num_nodes, graph.idtype)
        self.graph_sampler, prefetched = without_prefetch_lists(graph_sampler)
        # DGL's own samplers return only node ids of the graph they sample: see _unchecked.
        self._sampler_is_dgls = is_dgl_sampler(self.graph_sampler)
        self._store_options = dict(store_options or {})
        self._cached_rows = gpu_cache_rows(gpu_cache, self.num_nodes)
        self.features = {k: self._store(k, v) for k, v in (features or {}).items()}
        self.labels = {k: self._labels(k, v) for k, v in (labels or {}).items()}
        self._add_prefetched(*prefetched)
        for name in self._cached_rows:
            if name not in self.features:
                raise ValueError(
                    f"gpu_cache names node feature {name!r}, but the loader gathers {sorted(self.features)}: "
                    "name a feature of features= or of the sampler's prefetch_node_feats"
                )
        self.batch_size, self.shuffle, self.drop_last = batch_size, shuffle, drop_last
        self.use_ddp, self.ddp_seed = bool(use_ddp), ddp_seed
        self.seed, self.blocks = seed, blocks
        self.prefetch = apply_dgl_options(prefetch, self.device, use_prefetch_thread, pin_prefetcher, use_uva, gpu_cache, kwargs)
        self.timer = timer or StageTimer()
        self.epoch = 0
        self._worker_kwargs = {k: kwargs[k] for k in WORKER_KWARGS if k in kwargs}
        self._workers = None  # the torch DataLoader of the sampling processes (num_workers > 0), made lazily
        self._order = None  # its shared-memory seed order, rewritten every epoch
        # use_alternate_streams=False: the worker queues on the default stream, like the step.
        self._ring = SlotRing(self.device, self.prefetch, side_stream=use_alternate_streams is not False)
        # A weak reference: leaving the loop drops the epoch's iterator, whose finalizer stops the worker.
        self._active: weakref.ref | None = None

    @property
    def sampler(self):
        """The graph sampler (DGL's name: ``graph_sampler``)."""
        return self.graph_sampler

    def set_epoch(self, epoch: int) -> None:
        """Make the next epoch number ``epoch`` (the shuffle and the DDP split depend on it)."""
        self.epoch = int(epoch)

    # -- validation ------------------------------------------------------------------------
    def _store(self, name: str, store) -> FeatureStore:
        cached = self._cached_rows.get(name, 0)
        if isinstance(store, (torch.Tensor, np.ndarray)):
            options = dict(self._store_options)
            if cached and store.ndim == 2:  # DGL's gpu_cache counts rows: the budget that holds that many
                options.update(
                    cache_bytes=budget_for_rows(cached, store.shape[1] * store.dtype.itemsize, store.shape[0]),
                    cache_policy="degree",
                    graph=self.graph,
                    sampler=self.graph_sampler,
                )
            store = shared_store(store, self.device, **options)
            if cached and store.cache is None and store.backend != "gpu":
                warn_once(
                    "gpu_cache_shared",
                    f"gpu_cache for {name!r}: the store over this tensor was made before without a cache and is shared, so no rows are cached",
                )
        elif cached and isinstance(store, FeatureStore) and store.cache_policy is None:
            warn_once(
                "gpu_cache_store", f"gpu_cache for {name!r} does not apply to a FeatureStore you pass: give it cache_bytes= (and graph=) when you make it"
            )
        if not isinstance(store, FeatureStore):
            raise TypeError(f"features[{name!r}] must be a FeatureStore or a tensor, but got {type(store).__name__}")
        if len(store) != self.num_nodes:
            raise ValueError(f"features[{name!r}] has {len(store)} rows but the graph has {self.num_nodes} nodes; one row per node is needed")
        try:
            store.bind(self.device)  # a store received from another process binds here, to this loader's device
        except ValueError as error:
            raise ValueError(
                f"features[{name!r}] gathers on {store.device} but the loader's device is {self.device}; create the store with device={str(self.device)!r}"
            ) from error
        remember_store(store)  # later loaders over that memory use it
        return store

    def _add_prefetched(self, node_feats: list, labels: list) -> None:
        """The sampler's ``prefetch_node_feats``/``prefetch_labels``, taken from ``graph.ndata``."""
        for name in [*node_feats, *labels]:
            if name not in self.graph.ndata:
                raise KeyError(f"the sampler prefetches {name!r}, but graph.ndata has no such tensor (it has {sorted(self.graph.ndata)})")
        for name in node_feats:
            if name not in self.features:
                tensor = self.graph.ndata[name]
                # A 2-D table goes through a (shared) FeatureStore; anything else is indexed like a label.
                self.features[name] = self._store(name, tensor) if tensor.dim() == 2 else self._labels(name, tensor)
        for name in labels:
            if name not in self.labels:
                self.labels[name] = self._labels(name, self.graph.ndata[name])

    def _labels(self, name: str, labels):
        if isinstance(labels, np.ndarray):
            labels = tensor_view(labels)
        if isinstance(labels, FeatureStore):
            n = len(labels)
        elif isinstance(labels, torch.Tensor):
            n = labels.shape[0] if labels.dim() >= 1 else 0
        else:
            raise TypeError(f"labels[{name!r}] must be a tensor or a FeatureStore, but got {type(labels).__name__}")
        if n != self.num_nodes:
            raise ValueError(f"labels[{name!r}] has {n} entries but the graph has {self.num_nodes} nodes; one label per node is needed")
        return labels

    # -- iteration -------------------------------------------------------------------------
    def _seeds_per_rank(self) -> int:
        n = len(self.indices)
        if not self.use_ddp:
            return n
        return n // self.world_size if self.drop_last else -(-n // self.world_size)

    def __len__(self) -> int:
        n = self._seeds_per_rank()
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def epoch_seeds(self, epoch: int) -> torch.Tensor:
        """This rank's seeds of epoch ``epoch``, in batch order (a pure function of its arguments).

        Without DDP: all indices, permuted by ``default_rng([seed, epoch])`` when shuffling. With
        DDP (DGL's rules): the permutation by ``default_rng([ddp_seed, epoch])``, the same on every
        rank, is cut into ``world_size`` equal parts; ``drop_last`` drops the remainder, otherwise the
        order is padded by repeating it from its start. So every rank has as many batches."""
        order = self.indices
        if self.shuffle:
            rng = np.random.default_rng([self.ddp_seed if self.use_ddp else self.seed, epoch])
            order = order[torch.from_numpy(rng.permutation(len(order)))]
        if not self.use_ddp:
            return order
        per_rank = self._seeds_per_rank()
        total = per_rank * self.world_size
        if 0 < len(order) < total:
            order = order.repeat(-(-total // len(order)))
        return order[self.rank * per_rank : (self.rank + 1) * per_rank]

    def __iter__(self) -> Iterator:
        self._end_epoch()  # a new epoch ends an unfinished one (persistent sampling processes go on)
        # The previous epoch's worker may still be in its last step (close() does not wait for
        # ever): the new one starts after it has stopped. Then every slot is released after the
        # work the consumer has queued so far (an epoch left by `break` released nothing).
        self._ring.begin_epoch()
        order = self.epoch_seeds(self.epoch)
        self.epoch += 1
        if self._worker_kwargs.get("num_workers", 0) > 0:
            tasks = self._sampled_by_workers(order)
        else:
            tasks = enumerate(order[i * self.batch_size : (i + 1) * self.batch_size] for i in range(len(self)))
        iterator = _EpochIterator(self, tasks)
        self._active = weakref.ref(iterator)
        return iterator

    def _sampled_by_workers(self, order: torch.Tensor) -> Iterator:
        """(index, (input_nodes, output_nodes, blocks)) of the epoch, sampled in worker processes
        by a torch DataLoader; the time spent waiting for them counts as ``sample``."""
        if self._workers is None or len(self._order) != len(order) or not self._worker_kwargs.get("persistent_workers"):
            self.graph.create_formats_()  # once here, not once per worker
            self._order = order.clone().share_memory_()  # the workers see every epoch's order through it
            dataset = SampleBatches(self.graph, self.graph_sampler, self._order, self.batch_size, len(self))
            self._workers = torch.utils.data.DataLoader(dataset, batch_size=None, shuffle=False, collate_fn=identity, **self._worker_kwargs)
        else:
            self._order.copy_(order)
        return sampled_batches(self._workers, self.timer)  # closing it stops non-persistent processes

    def close(self) -> None:
        """Stop the background worker of the current epoch, if any, and the sampling processes
        (``num_workers > 0``, persistent ones too; iterating again starts new ones). Idempotent. A
        worker inside a step (sampling or gathering a batch) is not interrupted: close() waits for it
        a few seconds (:data:`dgl_zerocopy.loading.prefetch.JOIN_TIMEOUT`) and goes on; the next epoch
        waits for it to end, and the processes stop when it does."""
        self._end_epoch()
        self._workers = self._order = None  # torch stops its processes when its iterator is freed

    def _end_epoch(self) -> None:
        iterator = self._active() if self._active is not None else None
        if iterator is not None:
            iterator.close()
        self._active = None

    def _unchecked(self, store) -> bool:
        """Whether gathers from ``store`` may skip the range check: its ids come from DGL's own
        sampler over ``self.graph`` (only node ids of that graph; output nodes are the seeds,
        checked at construction) and it has one row per node of that graph."""
        return self._sampler_is_dgls and isinstance(store, FeatureStore) and len(store) == self.num_nodes

    def _produce(self, task) -> _Batch:
        """Sample (unless a worker process did) and gather one batch into its ring slot (runs on the
        worker thread when prefetching). ``task``: (index, seeds) or (index, (input_nodes, output_nodes, blocks))."""
        index, work = task
        timer = self.timer
        if isinstance(work, torch.Tensor):
            with timer.stage("sample"):
                input_nodes, output_nodes, blocks = self.graph_sampler.sample(self.graph, work)
        else:
            input_nodes, output_nodes, blocks = work
        with self._ring.fill(index) as fill:  # on the side stream, after the slot's release
            # Device stages are timed with events on the stream that runs them (no host sync).
            timed_on = torch.cuda.current_stream(self.device) if self.device.type == "cuda" else None
            with timer.stage("gather", stream=timed_on):
                src, in_slot = {}, []
                for k, store in self.features.items():
                    if isinstance(store, FeatureStore):
                        out = fill.slot.buffer(k, (len(input_nodes), *store.shape[1:]), store.dtype, store.device)
                        src[k] = store.gather(input_nodes, out=out, stream=fill.stream, unchecked=self._unchecked(store))
                        in_slot.append(k)
                    else:  # 1-D node data: a new tensor, not in the slot (record_stream-ed at hand-over)
                        src[k] = _gather_labels(store, input_nodes, self.device)
            with timer.stage("transfer", stream=timed_on):
                dst = {k: _gather_labels(v, output_nodes, self.device, self._unchecked(v)) for k, v in self.labels.items()}
                if self.blocks == "device":
                    from .blocks import DeviceBlock

                    blocks = [DeviceBlock.from_dgl(b, self.device) for b in blocks]
                elif self.device.type == "cuda":
                    blocks = [b.to(self.device) for b in blocks]
                # DGL hands out the node ids on the output device too.
                input_nodes, output_nodes = to_device(input_nodes, self.device), to_device(output_nodes, self.device)
        return _Batch(input_nodes, output_nodes, blocks, src, tuple(in_slot), dst, fill)


class _Batch(NamedTuple):
    """What the worker hands over: ``src[name]`` for each name in ``in_slot`` is a view of
    ``fill.slot``'s buffer; everything else is a tensor (or block) of its own."""

    input_nodes: torch.Tensor
    output_nodes: torch.Tensor
    blocks: list
    src: dict
    in_slot: tuple
    dst: dict
    fill: Fill


class _EpochIterator:
    def __init__(self, loader: DataLoader, tasks: Iterator) -> None:
        self._loader = loader
        self._held: Slot | None = None
        self._closed = False  # closed: by its end, or by the next epoch (it writes the ring no more)
        if loader.prefetch > 0:
            # The worker must not keep the loader alive, or it could never be collected and stopped.
            produce = weakref.WeakMethod(loader._produce)
            self._source = Prefetcher(tasks, lambda task: _call(produce, task), depth=loader.prefetch)
            loader._ring.set_writer(self._source)  # the next epoch waits for this worker's end
        else:
            self._source = map(loader._produce, tasks)
        self._tasks = None if loader.prefetch > 0 else tasks  # the worker thread closes its own

    def __iter__(self) -> _EpochIterator:
        return self

    def __next__(self):
        loader = self._loader
        if self._closed:
            raise StopIteration
        # Release the slot of the previous batch before taking the next one: the worker may reuse
        # it as soon as the queue has room (on CUDA, only after the work queued so far finishes).
        self._release_held()
        try:
            batch = next(self._source)
        except StopIteration:
            self.close()
            # The host waits here anyway: the range checks of device ids (a store's deferred errors)
            # are read now, so a bad id of this epoch is raised before the next one starts.
            for store in (*loader.features.values(), *loader.labels.values()):
                if isinstance(store, FeatureStore):
                    store.raise_deferred_errors()
            raise
        except BaseException:  # an error ends the epoch: its sampling source is released now
            self.close()
            raise
        src, blocks = batch.src, batch.blocks
        # Everything not in the slot is record_stream-ed on the consumer's stream (the protocol).
        loose = (batch.input_nodes, batch.output_nodes, blocks, batch.dst, {k: v for k, v in src.items() if k not in batch.in_slot})
        self._held = loader._ring.hand_over(batch.fill, [src[k] for k in batch.in_slot], loose, loader.timer)
        for k, v in src.items():
            blocks[0].srcdata[k] = v
        for k, v in batch.dst.items():
            blocks[-1].dstdata[k] = v
        return batch.input_nodes, batch.output_nodes, blocks

    def _release_held(self) -> None:
        if self._held is not None:
            self._loader._ring.release([self._held])
            self._held = None

    def close(self) -> None:
        """Stop the worker and release the slot of the batch last handed out (idempotent)."""
        self._closed = True
        if isinstance(self._source, Prefetcher):
            self._source.close()
        close_iterator(self._tasks)
        self._release_held()

    @property
    def worker_alive(self) -> bool:
        return isinstance(self._source, Prefetcher) and self._source.alive


def _call(method: weakref.WeakMethod, task):
    fn = method()
    if fn is None:
        raise RuntimeError("the DataLoader was garbage-collected during its epoch")
    return fn(task)


def _gather_labels(labels, ids: torch.Tensor, device: torch.device, unchecked: bool = False) -> torch.Tensor:
    """``labels[ids]`` on ``device`` as a tensor of its own (a FeatureStore's ``(n, 1)`` rows squeezed)."""
    if isinstance(labels, FeatureStore):
        out = labels.gather(ids, out=None, unchecked=unchecked).clone()
        return out.squeeze(1) if out.dim() == 2 and out.shape[1] == 1 else out
    return to_device(labels[ids], device)


def _node_ids(indices, num_nodes: int, idtype: torch.dtype = torch.int64) -> torch.Tensor:
    """The seeds as a 1-D CPU tensor in the graph's id dtype (DGL's samplers require it)."""
    if isinstance(indices, np.ndarray):
        indices = tensor_view(indices)
    if not isinstance(indices, torch.Tensor) or indices.dtype not in (torch.int32, torch.int64) or indices.dim() != 1:
        raise TypeError(f"indices must be a 1-D int32/int64 tensor or array of seed node ids, but got {getattr(indices, 'dtype', type(indices).__name__)}")
    indices = indices.cpu()
    if len(indices) and (int(indices.min()) < 0 or int(indices.max()) >= num_nodes):
        bad = indices[(indices < 0) | (indices >= num_nodes)][0]
        raise IndexError(f"indices contain node {int(bad)}, outside the graph's {num_nodes} nodes (valid: 0 to {num_nodes - 1})")
    return indices.to(idtype)
