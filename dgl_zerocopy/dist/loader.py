"""A prefetching loader over DistDGL's ``DistNodeDataLoader``: batch i+1 is sampled (RPC to the
servers) and its rows fetched (local partition through a FeatureStore, remote rows over RPC)
on a background thread while batch i trains.

Per batch it yields what DGL yields, ``(input_nodes, seeds, blocks)``, with
``blocks[0].srcdata[name]`` (each of ``features``) and ``blocks[-1].dstdata[name]`` (each of
``labels``) filled on ``device``. On a CUDA device with PyPI's CPU-only DGL the blocks are
:class:`~dgl_zerocopy.loading.blocks.DeviceBlock` (as :class:`dgl_zerocopy.DataLoader` does).

Streams and buffers: the slot ring of :class:`dgl_zerocopy.DataLoader` (:mod:`dgl_zerocopy.loading.ring`,
the same mechanism). The features are fetched into ring slots on a side stream (CUDA,
``prefetch > 0``), so that the fetches overlap the training step; a batch's feature tensors are
valid until the loop has asked for ``prefetch + 1`` more batches (keep ``x.clone()`` to keep them
longer; a warning says when a kept one was overwritten). Labels and device blocks are tensors of
their own, ``record_stream``-ed on the consumer's stream. A new epoch starts only after the
previous epoch's worker has stopped (it shares the slots and DGL's RPC client).

Threads: DGL's RPC client is not thread-safe, so everything that talks to the servers for a
loader (sampling and fetching) runs on its one worker thread; the caller must not use the same
DistGraph's RPC (``g.ndata[...][ids]``, another loader) while an epoch is being iterated.
With ``prefetch=0`` everything runs on the caller's thread, without a watchdog.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch

from ..loading.dgl_options import dgl_has_cuda
from ..loading.prefetch import Prefetcher
from ..loading.ring import Fill, SlotRing
from ..loading.timing import StageTimer
from ..sampling.blocks import as_device_block
from .source import DistFeatureSource
from .watchdog import Watchdog

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchStats:
    """One batch: input rows fetched from the local partition and over RPC, and seconds spent
    sampling and fetching (on the worker thread, overlapped with training when ``prefetch > 0``)."""

    seeds: int
    local_rows: int
    remote_rows: int
    sample_s: float
    fetch_s: float


class DistLoader:
    """Minibatches of a ``DistGraph`` with features and labels fetched by :class:`DistFeatureSource`s.

    ``graph``: a ``dgl.distributed.DistGraph``; ``nodes``: this trainer's seed ids (e.g. from
    ``dgl.distributed.node_split``); ``sampler``: a DGL block sampler, or fanouts (a list of ints,
    ``-1``: all neighbours) for ``NeighborSampler``; ``features``/``labels``: name -> source;
    ``prefetch``: batches prepared ahead (0: serial); ``watchdog``: bounds each wait for a batch
    (default :meth:`Watchdog.from_env`); ``timer``: stages ``sample`` and ``gather`` are timed into it
    (on a GPU with ``prefetch > 0`` also ``wait``, the training stream's wait for a batch's fetch).
    ``stats`` holds one :class:`BatchStats` per batch of the last epoch."""

    def __init__(
        self,
        graph,
        nodes,
        sampler,
        *,
        features: Mapping[str, DistFeatureSource],
        labels: Mapping[str, DistFeatureSource] | None = None,
        batch_size: int = 1,
        shuffle: bool = False,
        drop_last: bool = False,
        prefetch: int = 2,
        device: str | torch.device | None = None,
        watchdog: Watchdog | None = None,
        timer: StageTimer | None = None,
    ) -> None:
        import dgl

        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, but got {batch_size!r}")
        if not isinstance(prefetch, int) or prefetch < 0:
            raise ValueError(f"prefetch must be an integer >= 0 (0: no background thread), but got {prefetch!r}")
        labels = dict(labels or {})
        for kind, sources in (("features", features), ("labels", labels)):
            for name, source in sources.items():
                if not isinstance(source, DistFeatureSource):
                    raise TypeError(
                        f"{kind}[{name!r}] must be a DistFeatureSource, but got {type(source).__name__}; "
                        f"wrap the DistTensor: DistFeatureSource(g.ndata[{name!r}])"
                    )
        if not features:
            raise ValueError("features is empty: pass at least one, e.g. {'feat': DistFeatureSource(g.ndata['feat'])}")
        if isinstance(sampler, Sequence):
            sampler = dgl.dataloading.NeighborSampler(list(sampler))
        self.graph, self.sampler = graph, sampler
        self.nodes = torch.as_tensor(nodes)
        self.features, self.labels = dict(features), labels
        sources = [*self.features.values(), *self.labels.values()]
        self.device = torch.device(device) if device is not None else sources[0].device
        if any(s.device != self.device for s in sources):
            raise ValueError(f"every source must return rows on {self.device}, but got {[str(s.device) for s in sources]}")
        self.batch_size, self.shuffle, self.drop_last, self.prefetch = batch_size, shuffle, drop_last, prefetch
        self.watchdog = watchdog if watchdog is not None else Watchdog.from_env()
        self.timer = timer if timer is not None else StageTimer()
        self.device_blocks = self.device.type == "cuda" and not dgl_has_cuda()
        self.stats: list[BatchStats] = []
        self._prefetcher: Prefetcher | None = None
        self._ring = SlotRing(self.device, prefetch)
        self._epoch: object | None = None  # the token of the epoch being iterated

    def __len__(self) -> int:
        n = len(self.nodes)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[tuple]:
        import dgl

        self.close()
        # The previous epoch's worker may still be in its last step (close() does not wait for
        # ever); it shares the slots and DGL's RPC client, so nothing starts before it has stopped.
        self._ring.begin_epoch()
        self.stats = []
        dist_loader = dgl.dataloading.DistNodeDataLoader(
            self.graph, self.nodes, self.sampler, batch_size=self.batch_size, shuffle=self.shuffle, drop_last=self.drop_last
        )
        tasks = enumerate(_TimedIter(iter(dist_loader), self.timer))
        # This epoch's own worker (None: prefetch=0) and token: an epoch's generator that a newer
        # epoch replaced (two iterators of one loader) stops and touches neither the ring nor the worker.
        prefetcher = None
        if self.prefetch > 0:
            prefetcher = self._prefetcher = Prefetcher(tasks, self._produce, self.prefetch, name="dgl-zerocopy-dist-prefetch")
            self._ring.set_writer(prefetcher)
        token = self._epoch = object()
        held = None
        try:
            for index in itertools.count():
                try:
                    if prefetcher is None:  # prefetch=0: on this thread, without a watchdog
                        batch = self._produce(next(tasks))
                    else:
                        batch = self.watchdog.wait(prefetcher, f"batch {index} of {len(self)}")
                except StopIteration:
                    return
                input_nodes, seeds, blocks, x, y, fill = batch
                # Features are in the slot; labels and blocks are not: record_stream-ed (the protocol).
                held = self._ring.hand_over(fill, x.values(), (input_nodes, seeds, blocks, y), self.timer)
                blocks[0].srcdata.update(x)
                blocks[-1].dstdata.update(y)
                yield input_nodes, seeds, blocks
                if self._epoch is not token:  # a newer epoch began: it released every slot
                    held = None
                    return
                self._ring.release([held])  # asked for the next batch: done with this one's slot
                held = None
        finally:
            if self._epoch is token:
                if held is not None:  # the epoch was left (break, error) while holding a batch
                    self._ring.release([held])
                self.close()

    def _produce(self, task) -> tuple[torch.Tensor, torch.Tensor, list, dict, dict, Fill]:
        """Fetch batch ``index``'s rows into its ring slot (the worker thread when prefetching)."""
        index, ((input_nodes, seeds, blocks), sample_s) = task
        start = time.perf_counter()
        before = [(s.counts.local, s.counts.remote) for s in self.features.values()]
        with self._ring.fill(index) as fill, self.timer.stage("gather"):  # on the side stream, after the slot's release
            x = {
                name: source.fetch(input_nodes, out=fill.slot.buffer(name, (len(input_nodes), *source.shape[1:]), source.dtype, source.device))
                for name, source in self.features.items()
            }
            y = {name: source.fetch(seeds) for name, source in self.labels.items()}
            if self.device_blocks:
                blocks = [as_device_block(b, self.device) for b in blocks]
        fetch_s = time.perf_counter() - start
        local = sum(s.counts.local - b[0] for s, b in zip(self.features.values(), before))
        remote = sum(s.counts.remote - b[1] for s, b in zip(self.features.values(), before))
        self.stats.append(BatchStats(len(seeds), local, remote, sample_s, fetch_s))
        return input_nodes, seeds, blocks, x, y, fill

    def close(self) -> None:
        """Stop the worker of an epoch in progress (idempotent)."""
        if self._prefetcher is not None:
            self._prefetcher.close()
            self._prefetcher = None


class _TimedIter:
    """Yields ``(item, seconds next() took)``: the sampling time of each DistNodeDataLoader batch
    (also added to the timer's ``sample`` stage)."""

    def __init__(self, it, timer: StageTimer) -> None:
        self._it, self._timer = it, timer

    def __iter__(self):
        return self

    def __next__(self):
        start = time.perf_counter()
        with self._timer.stage("sample"):
            item = next(self._it)
        return item, time.perf_counter() - start
