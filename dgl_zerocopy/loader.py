"""DataLoader: DGL's loader signature plus ``features=``/``labels=``; the next batches are sampled and
gathered on a background thread while the current one trains.

Per batch it yields what DGL yields, ``(input_nodes, output_nodes, blocks)``, with
``blocks[0].srcdata[name]`` and ``blocks[-1].dstdata[name]`` already filled on ``device``.
The feature tensors live in a ring of reused output buffers: a batch's tensors are valid until the
loop asks for the next batch (clone them to keep them longer).

Streams (CUDA, ``prefetch > 0``; the table is in docs/architecture.md): the worker gathers and
copies on a side stream and records the batch's ready event; the consumer's stream waits on it.
Feature buffers live in ring slots, reused only after the slot's release event, which the consumer
records when it asks for the next batch, when the epoch ends or is left, and before a new epoch
starts. Everything else the worker hands over (labels, block index tensors) is ``record_stream``-ed
on the consumer's stream before the batch is returned.
"""
from __future__ import annotations

import logging
import weakref
from contextlib import nullcontext
from typing import Iterator, Mapping

import numpy as np
import torch

from .data.base import tensor_view
from .prefetch import Prefetcher
from .store import FeatureStore, resolve_device
from .timing import StageTimer
from .transfer import to_device

log = logging.getLogger(__name__)

BLOCK_KINDS = ("dgl", "device")


class DataLoader:
    """Minibatches of sampled blocks with features and labels gathered onto ``device``.

    ``graph``: a DGL graph (CPU). ``indices``: seed node ids (1-D ints). ``sampler``: any DGL block
    sampler (``NeighborSampler``, ``MultiLayerFullNeighborSampler``, ...). ``features``: name ->
    :class:`FeatureStore` on ``device`` (or a CPU tensor, wrapped in one). ``labels``: name -> 1-D
    tensor or FeatureStore. ``prefetch``: batches prepared ahead on a thread (0: serial, no thread).
    ``blocks``: ``"dgl"`` (DGL blocks; a CUDA device needs a CUDA build of DGL) or ``"device"``
    (:class:`dgl_zerocopy.blocks.DeviceBlock`, for PyPI's CPU-only DGL). Shuffling is
    deterministic: epoch ``e`` uses ``numpy.random.default_rng([seed, e])``. ``store_options``:
    keyword arguments for the FeatureStores the loader makes from tensors (e.g.
    ``{"sort_ids": True, "max_blocks": 132}``).
    """

    def __init__(self, graph, indices, sampler, features: Mapping | None = None, labels: Mapping | None = None,
                 device: str | torch.device = "cpu", batch_size: int = 1024, shuffle: bool = True, drop_last: bool = False,
                 prefetch: int = 2, seed: int = 0, blocks: str = "dgl", timer: StageTimer | None = None,
                 store_options: Mapping | None = None) -> None:
        self.device = resolve_device(device)
        if blocks not in BLOCK_KINDS:
            raise ValueError(f"blocks must be 'dgl' or 'device', but got {blocks!r}")
        if not isinstance(prefetch, int) or prefetch < 0:
            raise ValueError(f"prefetch must be an integer >= 0 (0 = no background thread), but got {prefetch!r}")
        if not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size must be a positive integer, but got {batch_size!r}")
        if blocks == "dgl" and self.device.type == "cuda" and not dgl_has_cuda():
            raise ValueError("blocks='dgl' on a CUDA device needs a CUDA build of DGL, and the installed DGL is a CPU build; "
                             "pass blocks='device' to get device-side blocks for dgl_zerocopy.nn / dgl_zerocopy.models")
        self.graph = graph
        self.num_nodes = int(graph.num_nodes())
        self.indices = _node_ids(indices, self.num_nodes)
        self.sampler = sampler
        self._store_options = dict(store_options or {})
        self.features = {k: self._store(k, v) for k, v in (features or {}).items()}
        self.labels = {k: self._labels(k, v) for k, v in (labels or {}).items()}
        self.batch_size, self.shuffle, self.drop_last = batch_size, shuffle, drop_last
        self.prefetch, self.seed, self.blocks = prefetch, seed, blocks
        self.timer = timer or StageTimer()
        self.epoch = 0
        # prefetch + 2 slots: `prefetch` queued, one being produced, one held by the training step.
        self._ring = [_Slot() for _ in range(prefetch + 2)]
        self._side = torch.cuda.Stream(self.device) if self.device.type == "cuda" and prefetch > 0 else None
        # A weak reference: leaving the loop drops the epoch's iterator, whose finalizer stops the worker.
        self._active: weakref.ref | None = None

    # -- validation ------------------------------------------------------------------------
    def _store(self, name: str, store) -> FeatureStore:
        if isinstance(store, (torch.Tensor, np.ndarray)):
            store = FeatureStore(store, backend="auto" if self.device.type == "cuda" else "cpu", device=self.device, **self._store_options)
        if not isinstance(store, FeatureStore):
            raise TypeError(f"features[{name!r}] must be a FeatureStore or a tensor, but got {type(store).__name__}")
        if len(store) != self.num_nodes:
            raise ValueError(f"features[{name!r}] has {len(store)} rows but the graph has {self.num_nodes} nodes; one row per node is needed")
        if store.device != self.device:
            raise ValueError(f"features[{name!r}] gathers on {store.device} but the loader's device is {self.device}; create the store with device={str(self.device)!r}")
        return store

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
    def __len__(self) -> int:
        n = len(self.indices)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator:
        self.close()  # a new epoch ends an unfinished one
        # An epoch left without close() (a `break`, then garbage collection) recorded no release of
        # its last slot: release every slot after the work the consumer has queued so far.
        self._release(self._ring)
        order = self.indices
        if self.shuffle:
            order = order[torch.from_numpy(np.random.default_rng([self.seed, self.epoch]).permutation(len(order)))]
        seeds = [order[i * self.batch_size : (i + 1) * self.batch_size] for i in range(len(self))]
        self.epoch += 1
        iterator = _EpochIterator(self, list(enumerate(seeds)))
        self._active = weakref.ref(iterator)
        return iterator

    def close(self) -> None:
        """Stop the background worker of the current epoch, if any (idempotent)."""
        iterator = self._active() if self._active is not None else None
        if iterator is not None:
            iterator.close()
        self._active = None

    def _release(self, slots) -> None:
        """Record the release event of ``slots`` on the calling thread's current stream (the
        consumer's): the worker reuses a slot only after the work queued there so far."""
        if self._side is None:
            return
        stream = torch.cuda.current_stream(self.device)
        for slot in slots:
            slot.released.record(stream)

    def _produce(self, task) -> tuple:
        """Sample and gather one batch into its ring slot (runs on the worker thread when prefetching)."""
        index, seeds = task
        timer, slot = self.timer, self._ring[index % len(self._ring)]
        with timer.stage("sample"):
            input_nodes, output_nodes, blocks = self.sampler.sample(self.graph, seeds)
        stream = self._side
        with torch.cuda.stream(stream) if stream is not None else nullcontext():
            if stream is not None:  # the training step may still read this slot's previous batch
                stream.wait_event(slot.released)
            # Device stages are timed with events on the stream that runs them (no host sync).
            timed_on = torch.cuda.current_stream(self.device) if self.device.type == "cuda" else None
            with timer.stage("gather", stream=timed_on):
                src = {k: store.gather(input_nodes, out=slot.buffer(k, len(input_nodes), store), stream=stream) for k, store in self.features.items()}
            with timer.stage("transfer", stream=timed_on):
                dst = {k: _gather_labels(v, output_nodes, self.device) for k, v in self.labels.items()}
                if self.blocks == "device":
                    from .blocks import DeviceBlock

                    blocks = [DeviceBlock.from_dgl(b, self.device) for b in blocks]
                elif self.device.type == "cuda":
                    blocks = [b.to(self.device) for b in blocks]
            ready = None
            if stream is not None:
                ready = torch.cuda.Event()
                ready.record(stream)
        return input_nodes, output_nodes, blocks, src, dst, ready


class _Slot:
    """One ring entry: reusable output buffers per feature name, and the event that frees it."""

    def __init__(self) -> None:
        self.buffers: dict[str, torch.Tensor] = {}
        self.released = torch.cuda.Event() if torch.cuda.is_available() else None

    def buffer(self, name: str, rows: int, store: FeatureStore) -> torch.Tensor:
        buf = self.buffers.get(name)
        if buf is None or buf.shape[0] < rows:  # grow (with headroom) only when a larger batch arrives
            cap = max(rows, int(1.25 * buf.shape[0])) if buf is not None else rows
            buf = torch.empty((cap, store.shape[1]), dtype=store.dtype, device=store.device)
            self.buffers[name] = buf
        return buf[:rows]


class _EpochIterator:
    def __init__(self, loader: DataLoader, tasks: list) -> None:
        self._loader = loader
        self._held: _Slot | None = None
        self._index = 0
        if loader.prefetch > 0:
            # The worker must not keep the loader alive, or it could never be collected and stopped.
            produce = weakref.WeakMethod(loader._produce)
            self._source = Prefetcher(tasks, lambda task: _call(produce, task), depth=loader.prefetch)
        else:
            self._source = map(loader._produce, tasks)

    def __iter__(self) -> "_EpochIterator":
        return self

    def __next__(self):
        loader = self._loader
        # Release the slot of the previous batch before taking the next one: the worker may reuse
        # it as soon as the queue has room (on CUDA, only after the work queued so far finishes).
        self._release_held()
        try:
            input_nodes, output_nodes, blocks, src, dst, ready = next(self._source)
        except StopIteration:
            self.close()
            raise
        self._held = loader._ring[self._index % len(loader._ring)]
        self._index += 1
        if ready is not None:
            consumer = torch.cuda.current_stream(loader.device)
            with loader.timer.stage("wait", stream=consumer):  # the device-side wait for the gather
                consumer.wait_event(ready)
            # Not in a slot: the consumer's stream frees these, so their memory (from the side
            # stream's pool) must not be reused before this stream is done with them.
            _record_stream((dst, blocks), consumer)
        for k, v in src.items():
            blocks[0].srcdata[k] = v
        for k, v in dst.items():
            blocks[-1].dstdata[k] = v
        return input_nodes, output_nodes, blocks

    def _release_held(self) -> None:
        if self._held is not None:
            self._loader._release([self._held])
            self._held = None

    def close(self) -> None:
        """Stop the worker and release the slot of the batch last handed out (idempotent)."""
        if isinstance(self._source, Prefetcher):
            self._source.close()
        self._release_held()

    @property
    def worker_alive(self) -> bool:
        return isinstance(self._source, Prefetcher) and self._source.alive


def _call(method: weakref.WeakMethod, task):
    fn = method()
    if fn is None:
        raise RuntimeError("the DataLoader was garbage-collected during its epoch")
    return fn(task)


def _gather_labels(labels, ids: torch.Tensor, device: torch.device) -> torch.Tensor:
    if isinstance(labels, FeatureStore):
        out = labels.gather(ids, out=None).clone()
        return out.squeeze(1) if out.dim() == 2 and out.shape[1] == 1 else out
    return to_device(labels[ids], device)


def _record_stream(obj, stream: torch.cuda.Stream) -> None:
    """``record_stream`` every CUDA tensor in ``obj``: tensors, DGL graphs and DeviceBlocks (their
    ``record_stream`` method), and dicts, lists and tuples of them."""
    if isinstance(obj, torch.Tensor):
        if obj.is_cuda:
            obj.record_stream(stream)
    elif isinstance(obj, dict):
        for value in obj.values():
            _record_stream(value, stream)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            _record_stream(value, stream)
    elif hasattr(obj, "record_stream") and getattr(getattr(obj, "device", None), "type", None) == "cuda":
        obj.record_stream(stream)


def _node_ids(indices, num_nodes: int) -> torch.Tensor:
    if isinstance(indices, np.ndarray):
        indices = tensor_view(indices)
    if not isinstance(indices, torch.Tensor) or indices.dtype not in (torch.int32, torch.int64) or indices.dim() != 1:
        raise TypeError(f"indices must be a 1-D int32/int64 tensor or array of seed node ids, but got {getattr(indices, 'dtype', type(indices).__name__)}")
    indices = indices.cpu().long()
    if len(indices) and (int(indices.min()) < 0 or int(indices.max()) >= num_nodes):
        bad = indices[(indices < 0) | (indices >= num_nodes)][0]
        raise IndexError(f"indices contain node {int(bad)}, outside the graph's {num_nodes} nodes (valid: 0 to {num_nodes - 1})")
    return indices


def dgl_has_cuda() -> bool:
    """Whether the installed DGL can move graphs to CUDA (PyPI's dgl cannot: it is a CPU build)."""
    import dgl

    try:
        dgl.graph(([0], [0])).to("cuda")
        return True
    except Exception:  # noqa: BLE001 - DGL raises its own error types for a CPU build
        return False
