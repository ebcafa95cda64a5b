"""HotRowCache: the chosen rows copied to a device, the slot map that finds them, and counters;
:func:`choose_rows` (which rows a budget holds; a FeatureStore calls it once) and :func:`build_cache`."""

from __future__ import annotations

import logging
import threading
import warnings

import torch

from ..table_input import human_size
from .policy import DEFAULT_CACHE_POLICY, CachePolicy, cache_capacity, check_budget, check_policy_name, graph_num_nodes, make_policy, sampling_edge_dir
from .slots import SplitHits, build_slot_map, gather_split, split_hits
from .stats import CacheStats

__all__ = ["HotRowCache", "build_cache", "check_cache_args", "choose_rows", "policy_name", "rank_cache_rows"]

log = logging.getLogger(__name__)


class HotRowCache:
    """Rows ``row_ids`` of ``table`` held on ``device`` (slot ``i`` holds row ``row_ids[i]``).

    ``rows`` is always a copy, also on the CPU (a separate tensor, so the hit/miss logic runs there
    as it will on a GPU); ``slot_map`` is on ``device``; ``nbytes`` counts both.

    Counting: :meth:`split` (and so :meth:`gather`) counts on the host at once; :meth:`count` counts
    a batch of device ids on the current CUDA stream without waiting for it (a fused kernel's
    batch). :meth:`stats_dict` and :meth:`reset_stats` fold both (they wait for the device).
    """

    def __init__(
        self, table: torch.Tensor, row_ids: torch.Tensor, device: str | torch.device = "cpu", policy: str = "", rows: torch.Tensor | None = None
    ) -> None:
        if not isinstance(table, torch.Tensor) or table.dim() != 2:
            raise TypeError(f"table must be a 2-D torch.Tensor, but got {getattr(table, 'shape', type(table).__name__)}")
        self.policy = policy
        self.row_ids = torch.as_tensor(row_ids).to("cpu", torch.int64)
        self.slot_map = build_slot_map(self.row_ids, table.shape[0], device)  # checks the ids first
        # ``rows``: the rows read already (a storage-backed store reads them from its file; ``table``
        # then only gives the shape and dtype, e.g. a tensor on the "meta" device).
        self.rows = (rows if rows is not None else table.index_select(0, self.row_ids.to(table.device))).to(device)
        if self.rows.device.type == "cuda":  # filled on the current stream; gathers run on others: wait once, here
            torch.cuda.current_stream(self.rows.device).synchronize()
        self.stats = CacheStats()
        self._counters: dict[int, torch.Tensor] = {}  # CUDA stream handle -> hits counted on it (int64, on device)
        self._counter_lock = threading.Lock()
        self._lookups = 0  # ids passed to count() (host side, at enqueue)
        self._base = (0, 0)  # (device hits, lookups) at the last reset_stats()

    @property
    def device(self) -> torch.device:
        return self.rows.device

    @property
    def num_cached(self) -> int:
        return int(self.row_ids.shape[0])

    @property
    def nbytes(self) -> int:
        """Device memory the cache takes: the cached rows and the slot map."""
        return self.rows.numel() * self.rows.element_size() + self.slot_map.numel() * self.slot_map.element_size()

    def split(self, ids: torch.Tensor, *, unchecked: bool = False) -> SplitHits:
        """:func:`split_hits` of ``ids`` (on :attr:`device`), counted in :attr:`stats`; ``unchecked=True``:
        ids already checked (int32/int64 on :attr:`device`, within ``[0, rows)``), not checked again."""
        split = split_hits(ids, self.slot_map, unchecked=unchecked)
        self.stats.record(split.hit_positions.numel(), split.miss_positions.numel())
        return split

    def count(self, ids: torch.Tensor) -> None:
        """Count the hits among ``ids`` (on :attr:`device`, in range) without synchronising.

        On CUDA the count is added, on the current stream, to a counter of that stream (only that
        stream writes it, so gathers on several streams never race); on the CPU it is recorded at once."""
        if ids.device.type != "cuda":
            hits = int((self.slot_map.index_select(0, ids) >= 0).sum())
            self.stats.record(hits, ids.numel() - hits)
            return
        stream = torch.cuda.current_stream(ids.device)
        with self._counter_lock:
            counter = self._counters.get(stream.cuda_stream)
            if counter is None:  # allocated on `stream`: its first use is there
                counter = self._counters[stream.cuda_stream] = torch.zeros((), dtype=torch.int64, device=ids.device)
            self._lookups += ids.numel()
        counter.add_((self.slot_map.index_select(0, ids) >= 0).sum())

    def _device_counts(self) -> tuple[int, int]:
        """(hits, lookups) counted by :meth:`count` since the cache was made, once the device has run them."""
        with self._counter_lock:
            counters, lookups = list(self._counters.values()), self._lookups
        if counters:
            torch.cuda.synchronize(self.slot_map.device)
        return sum(int(c) for c in counters), lookups

    def stats_dict(self) -> dict[str, float | int]:
        """``{"hits", "misses", "hit_rate"}`` since the last :meth:`reset_stats`: what
        ``FeatureStore.cache_stats()`` returns. Waits for the device's counts (exact once the
        gathers enqueued before the call have run)."""
        device_hits, lookups = self._device_counts()
        device_hits, lookups = device_hits - self._base[0], lookups - self._base[1]
        host_hits, host_misses = self.stats.snapshot()
        hits, misses = host_hits + device_hits, host_misses + lookups - device_hits
        return {"hits": hits, "misses": misses, "hit_rate": hits / (hits + misses) if hits + misses else 0.0}

    def reset_stats(self) -> None:
        """Start counting again from zero (device counters are never written here: their streams own them)."""
        self._base = self._device_counts()
        self.stats.reset()

    def gather(self, ids: torch.Tensor, table: torch.Tensor, out: torch.Tensor | None = None, *, unchecked: bool = False) -> torch.Tensor:
        """``table[ids]`` with hits read from :attr:`rows`: the reference path (``table``, ``ids`` and
        ``out`` on :attr:`device`; on ``cpu`` that is the store's own path). ``ids`` are checked as
        :func:`split_hits` checks them, unless ``unchecked=True`` (the store's backends: ids already
        checked, int32/int64 on :attr:`device`, within ``[0, rows)``)."""
        if table.shape[1:] != self.rows.shape[1:] or table.dtype != self.rows.dtype or table.shape[0] != self.slot_map.shape[0]:
            raise ValueError(
                f"table {table.dtype} {tuple(table.shape)} is not the table this cache was built from "
                f"({self.rows.dtype}, {self.slot_map.shape[0]} rows of {tuple(self.rows.shape[1:])})"
            )
        split = self.split(ids, unchecked=unchecked)
        if out is None:
            out = torch.empty((ids.shape[0], table.shape[1]), dtype=table.dtype, device=table.device)
        return gather_split(split, table, self.rows, out)

    def __repr__(self) -> str:
        return f"HotRowCache(policy={self.policy!r}, rows={self.num_cached} of {self.slot_map.shape[0]}, nbytes={self.nbytes}, device={str(self.device)!r})"


def check_cache_args(cache_bytes, cache_policy: str | CachePolicy, num_rows: int, graph=None, sampler=None, seeds=None) -> int:
    """Check a store's cache arguments before anything is built (or pinned); returns the budget.

    Always checked: the policy (a name, or a :class:`CachePolicy` ranking ``num_rows`` rows) and the
    budget. With a named policy and a budget > 0 also: ``graph`` given, with one node per table
    row; for ``"presample"`` a ``sampler`` and ``seeds``; for ``"degree"`` the ``edge_dir`` of a
    ``sampler`` if one is given."""
    if isinstance(cache_policy, CachePolicy):
        if cache_policy.num_rows != num_rows:
            raise ValueError(f"cache_policy ranks {cache_policy.num_rows} rows but the feature table has {num_rows}")
        return check_budget(cache_bytes)
    check_policy_name(cache_policy)
    cache_bytes = check_budget(cache_bytes)
    if cache_bytes == 0:
        return 0
    if graph is None:
        raise ValueError(
            f"cache_bytes={cache_bytes} with cache_policy={cache_policy!r} needs graph=: the DGL graph whose "
            f"node ids are the table's rows (or pass cache_bytes=0 for no cache)"
        )
    nodes = graph_num_nodes(graph)
    if nodes != num_rows:
        raise ValueError(f"graph has {nodes} nodes but the feature table has {num_rows} rows: the cache needs one row per node")
    if cache_policy == "presample" and (sampler is None or seeds is None):
        missing = " and ".join(name for name, v in (("sampler=", sampler), ("seeds=", seeds)) if v is None)
        raise ValueError(
            f"cache_policy='presample' needs {missing}: the training sampler (e.g. "
            f"dgl.dataloading.NeighborSampler([15, 10, 5])) and the training node ids it starts from"
        )
    if cache_policy == "degree":
        sampling_edge_dir(sampler)
    return cache_bytes


def choose_rows(
    num_rows: int,
    row_bytes: int,
    cache_bytes,
    cache_policy: str | CachePolicy = DEFAULT_CACHE_POLICY,
    *,
    graph=None,
    sampler=None,
    seeds=None,
    batch_size: int = 1024,
    epochs: float = 1.0,
    seed: int = 0,
    stacklevel: int = 2,
) -> torch.Tensor | None:
    """The rows a cache of ``cache_bytes`` holds for a ``num_rows``-row table of ``row_bytes``-byte
    rows, best first (int64 CPU; slot ``i`` holds row ``result[i]``), or None for ``cache_bytes=0``
    (or a budget that holds no row, with a warning). Rows and slot map never exceed the budget.

    ``batch_size``, ``epochs`` and ``seed`` shape the presampling pass (see
    :func:`dgl_zerocopy.store.cache.policy.presample_counts`); the degree policies ignore them and ``seeds``
    (``"degree"`` reads only ``sampler.edge_dir``).
    ``stacklevel`` places the warning as ``warnings.warn`` does, counted from the caller."""
    cache_bytes = check_cache_args(cache_bytes, cache_policy, num_rows, graph, sampler, seeds)
    if cache_bytes == 0:
        return None
    if row_bytes == 0 or cache_capacity(cache_bytes, row_bytes, num_rows) == 0:
        warnings.warn(
            f"cache_bytes={cache_bytes} holds no row: the slot map takes {4 * num_rows} bytes and a row "
            f"{row_bytes}; no cache is made (give at least {4 * num_rows + row_bytes})",
            stacklevel=stacklevel + 1,
        )
        return None
    policy = (
        cache_policy
        if isinstance(cache_policy, CachePolicy)
        else make_policy(cache_policy, graph, sampler=sampler, seeds=seeds, batch_size=batch_size, epochs=epochs, seed=seed)
    )
    return policy.rows_for_budget(cache_bytes, row_bytes).clone()  # not a view of the whole ranking


def build_cache(
    table: torch.Tensor,
    cache_bytes: int,
    cache_policy: str | CachePolicy = DEFAULT_CACHE_POLICY,
    *,
    graph=None,
    sampler=None,
    seeds=None,
    device: str | torch.device = "cpu",
    **presample,
) -> HotRowCache | None:
    """The cache a store with these arguments holds on ``device`` (rows from :func:`choose_rows`),
    or None. Its ``nbytes`` never exceeds ``cache_bytes``."""
    rows = choose_rows(
        table.shape[0], table.shape[1] * table.element_size(), cache_bytes, cache_policy, graph=graph, sampler=sampler, seeds=seeds, stacklevel=3, **presample
    )
    return HotRowCache(table, rows, device, policy=policy_name(cache_policy)) if rows is not None else None


def policy_name(cache_policy: str | CachePolicy) -> str:
    """The name a policy is reported by: its own, or its class's ``name`` for a ranking."""
    return cache_policy if isinstance(cache_policy, str) else cache_policy.name


def rank_cache_rows(
    table: torch.Tensor,
    backend: str,
    cache_bytes: int,
    cache_policy: str | CachePolicy,
    graph,
    sampler,
    seeds,
    presample_options: dict | None,
    stacklevel: int = 3,
) -> torch.Tensor | None:
    """The rows the cache holds, best first (int64 CPU), or None for no cache. ``table`` holds what
    the cache copies (a compressed table's codes), so its row width decides how many rows fit; only
    its shape and dtype are read (a "meta" tensor will do). ``stacklevel`` places the warnings."""
    options = dict(presample_options or {})
    unknown = sorted(set(options) - {"batch_size", "epochs", "seed"})
    if unknown:
        raise TypeError(f"presample_options takes batch_size, epochs and seed, but got {unknown}")
    if check_cache_args(cache_bytes, cache_policy, table.shape[0], graph, sampler, seeds) and backend == "gpu":
        warnings.warn(f"cache_bytes={cache_bytes} is ignored with backend='gpu': that backend holds every row in device memory already", stacklevel=stacklevel)
        return None
    rows = choose_rows(
        table.shape[0],
        table.shape[1] * table.element_size(),
        cache_bytes,
        cache_policy,
        graph=graph,
        sampler=sampler,
        seeds=seeds,
        stacklevel=stacklevel + 1,
        **options,
    )
    if rows is not None:
        log.info(
            "cache: %d of %d rows (%s), %s of device memory",
            rows.numel(),
            table.shape[0],
            policy_name(cache_policy),
            human_size(rows.numel() * table.shape[1] * table.element_size()),
        )
    return rows
