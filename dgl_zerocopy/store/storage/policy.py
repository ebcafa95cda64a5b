"""The host buffer's policy and size, decided once when a storage-backed store is made.

``StorageTier(policy=)``, the ``host_buffer_policy`` of :func:`plan_storage`:

- ``"static"`` (the default when a ranking exists: ``graph=`` given, or a ``CachePolicy``):
  every slot evictable, the row ranked last leaves first (measured best, below);
- ``"hybrid"``:
  :data:`HYBRID_STATIC_SHARE` of the slots belong to the rows the static ranking puts first (the
  store's ``cache_policy``: the degree sampling follows, by default), each filled on first use and
  never evicted; the other slots run :data:`DEFAULT_DYNAMIC`;
- ``"dynamic"`` (the default without a ranking): :data:`DEFAULT_DYNAMIC` over every slot;
- ``"lru"``, ``"clock"``, ``"fifo"``: that dynamic policy over every slot (for measurements).

The choice of :data:`DEFAULT_DYNAMIC` and :data:`HYBRID_STATIC_SHARE` is measured by
``bench/tiers/storage_eviction.py`` (docs/storage.md has the figures): on the products-shaped trace
(100,000 nodes, fanouts 15,10,5) misses per distinct row at a budget of 25 % / 50 % of the rows:
static 0.578 / 0.286, CLOCK 0.614 / 0.353, LRU 0.641 / 0.370, FIFO 0.641 / 0.400, hybrid-CLOCK
(share 0.25) 0.596 / 0.342: static ranking first, CLOCK the best dynamic policy.

The budget ``host_buffer_bytes`` (``StorageTier(bytes=)``) covers everything the buffer holds: the rows, the row -> slot map
(one int32 per row of the table), the static ranking when the ``static`` policy needs one (one
int32 per row), and the bookkeeping of each slot. It is never exceeded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..table_input import human_size
from .direct_reader import DEFAULT_THREADS
from .eviction import DYNAMIC_POLICIES, Eviction, make_eviction
from .host_buffer import SLOT_BYTES

HOST_POLICIES = ("static", "dynamic", "hybrid", *DYNAMIC_POLICIES)
#: The dynamic policy of ``"dynamic"`` and of the dynamic share of ``"hybrid"`` (measured: docs/storage.md).
DEFAULT_DYNAMIC = "clock"
#: The share of the slots ``"hybrid"`` gives to the rows ranked first (measured: docs/storage.md).
HYBRID_STATIC_SHARE = 0.25


@dataclass(frozen=True)
class StoragePlan:
    """What a :class:`~dgl_zerocopy.store.storage.tiers.StorageBackend` builds: ``capacity`` slots,
    ``eviction`` over the dynamic ones, ``static_rows`` owning slots ``0..``, ``rank`` (row ->
    position, for ``static``), the device cache's rows and policy name, reader threads, O_DIRECT."""

    policy: str
    capacity: int
    eviction: str
    static_rows: np.ndarray | None
    rank: np.ndarray | None
    cache_rows: torch.Tensor | None
    cache_policy: str | None
    threads: int
    direct: bool


def plan_storage(
    num_rows: int,
    row_bytes: int,
    host_buffer_bytes,
    host_buffer_policy: str | None,
    order: torch.Tensor | None,
    *,
    cache_rows: torch.Tensor | None = None,
    cache_policy: str | None = None,
    threads: int = DEFAULT_THREADS,
    direct: bool = True,
) -> StoragePlan:
    """Check the host buffer's arguments and size it. ``order``: the static ranking (all rows, best
    first) or None when the store has none (no ``graph=``)."""
    if isinstance(host_buffer_bytes, bool) or not isinstance(host_buffer_bytes, (int, np.integer)) or host_buffer_bytes <= 0:
        raise ValueError(f"host_buffer_bytes must be a positive integer number of bytes, but got {host_buffer_bytes!r}")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"storage threads must be a positive integer, but got {threads!r}")
    policy = host_buffer_policy if host_buffer_policy is not None else ("static" if order is not None else "dynamic")
    if policy not in HOST_POLICIES:
        raise ValueError(f"host_buffer_policy must be one of {', '.join(map(repr, HOST_POLICIES))}, but got {policy!r}")
    if policy in ("hybrid", "static") and order is None:
        raise ValueError(
            f"the host buffer's policy {policy!r} ranks rows statically: pass graph= (the DGL graph whose nodes are the table's rows) "
            "or a CachePolicy as cache_policy=, or use StorageTier(policy='dynamic')"
        )
    eviction = _eviction(policy)
    fixed, per_slot = _costs(num_rows, row_bytes, eviction)
    capacity = min(num_rows, max(0, (int(host_buffer_bytes) - fixed) // per_slot))
    if capacity < 1:
        raise ValueError(
            f"a host buffer of {host_buffer_bytes} bytes holds no row: the row -> slot map of {num_rows} rows takes {human_size(fixed)} and "
            f"a slot {per_slot} bytes; give at least {fixed + per_slot} (and room for a few batches of rows)"
        )
    rank = static_rows = None
    if eviction == "static":
        rank = np.empty(num_rows, dtype=np.int32)
        rank[order.numpy()] = np.arange(num_rows, dtype=np.int32)
    if policy == "hybrid":
        static_rows = order[: int(capacity * HYBRID_STATIC_SHARE)].numpy().astype(np.int64)
        if static_rows.size == capacity:  # keep one dynamic slot at least, for the rows ranked lower
            static_rows = static_rows[:-1]
    return StoragePlan(policy, capacity, eviction, static_rows, rank, cache_rows, cache_policy, threads, direct)


def budget_for_slots(num_rows: int, row_bytes: int, slots: int, host_buffer_policy: str | None = None, ranked: bool = True) -> int:
    """The smallest ``host_buffer_bytes`` whose buffer has ``slots`` slots (the inverse of :func:`plan_storage`'s
    capacity): ``slots = num_rows`` holds the whole table. ``ranked``: the store has a static ranking (``graph=``),
    which the default policy then uses."""
    policy = host_buffer_policy if host_buffer_policy is not None else ("static" if ranked else "dynamic")
    fixed, per_slot = _costs(num_rows, row_bytes, _eviction(policy))
    return fixed + max(1, min(int(slots), num_rows)) * per_slot


def _eviction(policy: str) -> str:
    """The eviction that ``policy`` runs over its dynamic slots (every slot but ``hybrid``'s static share)."""
    return "static" if policy == "static" else (DEFAULT_DYNAMIC if policy in ("hybrid", "dynamic") else policy)


def _costs(num_rows: int, row_bytes: int, eviction: str) -> tuple[int, int]:
    """``(fixed, per_slot)`` bytes of a buffer: the row -> slot map (and the ranking, for ``static``), and a slot."""
    fixed = num_rows * 4 + (num_rows * 4 if eviction == "static" else 0)
    return fixed, row_bytes + SLOT_BYTES + _policy_slot_bytes(eviction)


def _policy_slot_bytes(name: str) -> int:
    probe: Eviction = make_eviction(name, 1, np.zeros(1, dtype=np.int32))
    return probe.slot_bytes
