"""The DataLoader's indices: what they mean for its sampler, their checks, and each epoch's batches.

DGL 2.1's ``DataLoader`` leaves the meaning of ``indices`` to the sampler: node ids for a block
sampler or ``ShaDowKHopSampler``, edge ids for ``as_edge_prediction_sampler``, partition ids for
``ClusterGCNSampler``, nothing for ``SAINTSampler`` (one batch per index). :func:`index_kind` reads
that from the sampler, and :class:`SeedSet` checks the indices by it: a tensor, or a dict
``{type: tensor}`` on a heterograph, each id in range for its type (an ``IndexError`` names the type
and the id).

:class:`EpochOrder` says which seeds each epoch visits, in batch order, exactly as DGL's
``TensorizedDataset``/``DDPTensorizedDataset`` do (same ids per rank and batch for the same NumPy
state): a permutation of the positions kept from epoch to epoch and shuffled in place with
``numpy.random.shuffle`` (NumPy's global generator) at the start of each shuffled epoch; with DDP,
rank ``r`` keeps the ``r``-th contiguous chunk of the *unshuffled* indices (``ceil(n / world)`` of
them, or ``floor`` with ``drop_last``), shuffles its own part each epoch and pads it to the chunk
size from the part's own start. ``seed=`` (an int, opt-in) replaces NumPy's global generator by
``numpy.random.default_rng([seed, epoch])`` for a permutation of all indices, a pure function of
the epoch; with DDP that permutation (by ``ddp_seed``, the same on every rank) is dealt out anew
each epoch. :func:`worker_batches` splits an epoch's batches among worker processes as DGL does.

CPU only; nothing here imports DGL except :func:`index_kind` and :class:`SeedSet`, which are given
its objects.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from ..data.base import tensor_view

#: What a sampler's indices are: node ids, edge ids, partition ids, or anything (not checked).
NODE, EDGE, PARTITION, ANY = "node", "edge", "partition", "any"


def index_kind(sampler) -> str:
    """What ``sampler`` takes as indices (:data:`NODE`, :data:`EDGE`, :data:`PARTITION` or
    :data:`ANY`), from its DGL class: a sampler of one's own (not derived from a DGL class that
    says) gets :data:`ANY`, since DGL leaves the meaning to the sampler's ``sample``."""
    from dgl import dataloading

    if isinstance(sampler, dataloading.EdgePredictionSampler):
        return EDGE
    if isinstance(sampler, dataloading.ClusterGCNSampler):
        return PARTITION
    if isinstance(sampler, (dataloading.BlockSampler, dataloading.ShaDowKHopSampler)):
        return NODE
    return ANY


class SeedSet:
    """The loader's ``indices`` checked and flattened, as DGL's dataset holds them.

    ``indices``: a 1-D int32/int64 tensor (or array, or list), or a dict ``{type: ids}``. Node and
    edge ids are range-checked per type against ``graph`` and converted to the graph's id dtype
    (DGL's samplers refuse any other); partition ids are checked against the sampler's partition
    count. A dict is held as DGL holds it: rows ``(type position, id)`` in the dict's order, and
    :meth:`batch` turns a batch of rows back into a dict of the types present, in that order.
    """

    def __init__(self, indices, graph, kind: str, num_partitions: int | None = None) -> None:
        self.kind = kind
        if isinstance(indices, Mapping):
            if not indices:
                raise ValueError("indices is an empty dict: give at least one type's ids")
            self.keys: list | None = list(indices)
            parts = [self._checked(indices[key], graph, key, num_partitions) for key in self.keys]
            dtype = parts[0].dtype  # DGL's pairs take the first type's dtype
            self.ids = torch.cat([torch.stack([torch.full_like(p, i, dtype=dtype), p.to(dtype)], 1) for i, p in enumerate(parts)])
        else:
            self.keys = None
            self.ids = self._checked(indices, graph, None, num_partitions)

    def __len__(self) -> int:
        return self.ids.shape[0]

    def batch(self, rows: torch.Tensor):
        """The sampler's indices for the seeds at ``rows`` (positions into this set): a tensor of
        its own, or for a dict the ``{type: ids}`` of the types present, in the dict's order."""
        ids = self.ids[rows]
        if self.keys is None:
            return ids
        # DGL groups a batch's rows by type (stably, so each type keeps the batch's order).
        order = torch.sort(ids[:, 0], stable=True).indices
        types, counts = torch.unique_consecutive(ids[order, 0], return_counts=True)
        grouped = ids[order, 1]
        out, start = {}, 0
        for position, count in zip(types.tolist(), counts.tolist()):
            out[self.keys[position]] = grouped[start : start + count].clone()
            start += count
        return out

    def _checked(self, ids, graph, key, num_partitions: int | None) -> torch.Tensor:
        where = "indices" if key is None else f"indices[{key!r}]"
        if isinstance(ids, np.ndarray):
            ids = tensor_view(ids)
        elif not isinstance(ids, torch.Tensor):
            try:
                ids = torch.tensor(ids)
            except (TypeError, ValueError, RuntimeError):
                raise TypeError(f"{where} must be a 1-D int32/int64 tensor of ids, but got {type(ids).__name__}") from None
        if ids.dtype not in (torch.int32, torch.int64) or ids.dim() != 1:
            raise TypeError(f"{where} must be a 1-D int32/int64 tensor of ids, but got {ids.dtype} of shape {tuple(ids.shape)}")
        ids = ids.cpu()
        if self.kind == NODE:
            ntype = self._type(graph.ntypes, key, "node", graph)
            _check_range(ids, graph.num_nodes(ntype), where, "node", ntype if len(graph.ntypes) > 1 else None)
            return ids.to(graph.idtype)
        if self.kind == EDGE:
            etype = self._type(graph.canonical_etypes, key, "edge", graph)
            _check_range(ids, graph.num_edges(etype), where, "edge", etype if len(graph.canonical_etypes) > 1 else None)
            return ids.to(graph.idtype)
        if self.kind == PARTITION and num_partitions is not None:
            _check_range(ids, num_partitions, where, "partition", None)
        return ids

    def _type(self, types: list, key, what: str, graph):
        """The node or edge type ``key`` names (None: the graph's one type)."""
        if key is None:
            if len(types) != 1:
                raise TypeError(f"the graph has {len(types)} {what} types {types}: give indices as a dict {{{what} type: ids}}, as DGL's samplers need")
            return types[0]
        if what == "node":
            if key not in types:
                raise KeyError(f"indices has the key {key!r}, which is not a node type of the graph (it has {types})")
            return key
        try:
            return graph.to_canonical_etype(key)
        except Exception as error:  # noqa: BLE001 - DGL raises its own error type for an unknown edge type
            raise KeyError(f"indices has the key {key!r}, which is not an edge type of the graph (it has {types})") from error


def _check_range(ids: torch.Tensor, count: int, where: str, what: str, type_) -> None:
    if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= count):
        bad = int(ids[(ids < 0) | (ids >= count)][0])
        of = (
            f"the {count} {what}s of type {type_!r}"
            if type_ is not None
            else f"the graph's {count} {what}s"
            if what != "partition"
            else f"the sampler's {count} partitions"
        )
        raise IndexError(f"{where} contain {what} {bad}, outside {of} (valid: 0 to {count - 1})")


class EpochOrder:
    """The positions (into a :class:`SeedSet` of ``n`` seeds) each epoch visits, in batch order,
    for this rank: DGL 2.1's rules (module docstring), or ``seed``'s when it is an int.

    ``ddp``: ``(rank, world_size)`` to split the seeds across ranks, or None. Every rank has the
    same number of seeds (``ceil(n / world_size)``, ``floor`` with ``drop_last``), so as many
    batches. A rank whose chunk lies wholly past the seeds (``n`` much smaller than the world; DGL
    reads uninitialised memory or fails there) takes its padding from the start of all seeds.
    """

    def __init__(
        self, n: int, batch_size: int, drop_last: bool, shuffle: bool, ddp: tuple[int, int] | None = None, seed: int | None = None, ddp_seed: int = 0
    ) -> None:
        self.n, self.batch_size, self.drop_last, self.shuffle = n, batch_size, drop_last, shuffle
        self.ddp, self.seed, self.ddp_seed = ddp, seed, ddp_seed
        if ddp is None:
            self.lower, self.num_samples = 0, n
        else:
            rank, world = ddp
            per_rank = n // world if drop_last else -(-n // world)
            self.lower, self.num_samples = rank * per_rank, per_rank
        self.own = max(0, min(self.num_samples, n - self.lower))  # this rank's seeds before padding
        # DGL's permutation of the rank's own seeds, kept and reshuffled in place every epoch.
        self._local = torch.arange(self.own, dtype=torch.int64)

    def __len__(self) -> int:
        """Batches per epoch (DGL's count: a last partial batch counts unless ``drop_last``)."""
        return self.num_samples // self.batch_size if self.drop_last else -(-self.num_samples // self.batch_size)

    def next_epoch(self, epoch: int) -> torch.Tensor:
        """The positions of epoch ``epoch``, ``num_samples`` of them, in batch order (batch ``i``:
        ``[i * batch_size, (i + 1) * batch_size)``). DGL's rules shuffle with NumPy's global
        generator *now* (call it where DGL's loader shuffles: when the epoch's iterator is made)."""
        if self.seed is not None:
            return self._seeded(epoch)
        if self.shuffle:
            np.random.shuffle(self._local.numpy())  # in place, as DGL: each epoch permutes the last one's order
        positions = self.lower + self._local
        pad = self.num_samples - self.own
        if pad <= 0:
            return positions
        if self.own == 0:  # nothing of its own to pad from: the start of all seeds
            return torch.arange(pad, dtype=torch.int64) % max(self.n, 1)
        return torch.cat([positions, positions[torch.arange(pad) % self.own]])

    def _seeded(self, epoch: int) -> torch.Tensor:
        """``seed=``'s order: ``default_rng([seed, epoch])`` permutes all seeds; with DDP
        ``default_rng([ddp_seed, epoch])`` (the same on every rank), padded from its start and cut
        into one chunk per rank."""
        order = torch.arange(self.n, dtype=torch.int64)
        if self.shuffle:
            rng = np.random.default_rng([self.ddp_seed if self.ddp is not None else self.seed, epoch])
            order = torch.from_numpy(rng.permutation(self.n))
        if self.ddp is None:
            return order
        total = self.num_samples * self.ddp[1]
        if 0 < self.n < total:
            order = order.repeat(-(-total // self.n))
        return order[self.lower : self.lower + self.num_samples]

    def batch(self, positions: torch.Tensor, i: int) -> torch.Tensor:
        """Batch ``i``'s positions out of an epoch's ``positions``."""
        return positions[i * self.batch_size : (i + 1) * self.batch_size]


def worker_batches(num_batches: int, worker: int, num_workers: int) -> range:
    """The batches worker ``worker`` of ``num_workers`` samples: DGL's split, a contiguous run each,
    the first ``num_batches % num_workers`` workers one more. A torch DataLoader takes one batch
    from each worker in turn, so with workers the epoch's batches come in that interleaved order."""
    per_worker, left_over = divmod(num_batches, num_workers)
    start = per_worker * worker + min(left_over, worker)
    return range(start, start + per_worker + (worker < left_over))


def interleaved(num_batches: int, num_workers: int) -> list[int]:
    """The order in which a torch DataLoader with ``num_workers`` processes hands out the batches
    split by :func:`worker_batches` (one from each worker in turn, skipping finished ones)."""
    runs = [list(worker_batches(num_batches, w, num_workers)) for w in range(num_workers)]
    return [run[j] for j in range(max(map(len, runs), default=0)) for run in runs if j < len(run)]
