"""A static hot-row cache: the most often gathered rows of the host table kept in device memory.

- :mod:`.policy`: which rows, best first (``"degree"``: the degree sampling follows, out-degree
  for DGL's in-edge sampling, the default; ``"in_degree"``, ``"out_degree"``, ``"presample"``), and
  how many fit a byte budget (the budget covers the cached rows *and* the slot map; it is never
  exceeded);
- :mod:`.slots`: the slot map (row -> slot or -1), the hit/miss split, and the CPU reference of
  the cached gather (equal to ``table[ids]`` for every mix of hits and misses);
- :mod:`.stats`: hit/miss counters;
- :mod:`.hot_rows`: :class:`HotRowCache` (rows + slot map + counters on one device) and
  :func:`build_cache`, the factory the store calls.

How :class:`dgl_zerocopy.FeatureStore` uses it:

``FeatureStore(data, ..., cache=DeviceCache(bytes=0, policy="degree", graph=None, sampler=None, seeds=None))``
calls :func:`check_cache_args` in its constructor, before anything is pinned (bad policy name,
negative budget, missing graph/sampler/seeds, a sampler's edge_dir neither "in" nor "out", node
count != table rows: clear errors at once), and
:func:`build_cache` in ``bind()`` on the bound device, so a pickled store sends only its arguments
(or the cached ``row_ids``) and each process builds its own cache on its own GPU. Then:

- ``store.cache_nbytes`` is ``cache.nbytes`` (0 without a cache);
- ``store.cache_stats()`` is ``cache.stats.as_dict()`` (``hits``, ``misses``, ``hit_rate``) and
  ``store.reset_cache_stats()`` is ``cache.stats.reset()``;
- ``gather`` on device ``cpu``: ``cache.gather(ids, table, out)`` after the store's id check
  (``unchecked=True``): hits from the cache's separate CPU copy, misses from the table;
- ``backend="cpu"`` on CUDA: ``cache.split(ids)`` (ids on the CPU), only ``miss_ids`` gathered into
  the pinned staging buffer and copied, then on the device ``out[miss_positions] = staged`` and
  ``out[hit_positions] = cache.rows[hit_slots]``: the hits leave the host-to-device copy;
- ``backend="zerocopy"``: one fused kernel reads ``slot_map[id]`` per row and copies the row from
  ``cache.rows`` (device memory) or from the pinned table (the aligned, vectorised host read) into
  the same output; it counts hits on the device, and the store adds them to ``cache.stats``.

For a compressed table the store passes its host codes as ``table``: the cache then holds codes,
and ``row_bytes`` (so the rows a budget holds) is the code width.
"""

from .hot_rows import HotRowCache, build_cache, check_cache_args, choose_rows, policy_name
from .policy import (
    CACHE_POLICIES,
    DEFAULT_CACHE_POLICY,
    CachePolicy,
    DegreePolicy,
    InDegreePolicy,
    OutDegreePolicy,
    PresamplePolicy,
    SamplingDegreePolicy,
    budget_for_rows,
    cache_capacity,
    make_policy,
    presample_counts,
    sampled_degree,
    sampling_edge_dir,
    slot_map_nbytes,
)
from .slots import SplitHits, build_slot_map, cached_gather, split_hits
from .stats import CacheStats

__all__ = [
    "CACHE_POLICIES",
    "DEFAULT_CACHE_POLICY",
    "CachePolicy",
    "CacheStats",
    "DegreePolicy",
    "HotRowCache",
    "InDegreePolicy",
    "OutDegreePolicy",
    "PresamplePolicy",
    "SamplingDegreePolicy",
    "SplitHits",
    "budget_for_rows",
    "build_cache",
    "build_slot_map",
    "cache_capacity",
    "cached_gather",
    "check_cache_args",
    "choose_rows",
    "make_policy",
    "policy_name",
    "presample_counts",
    "sampled_degree",
    "sampling_edge_dir",
    "slot_map_nbytes",
    "split_hits",
]
