"""The checks and decisions of ``FeatureStore(path, ..., storage=StorageTier(N))`` before anything is
allocated, pinned or read (beyond a ``.npy`` header): :func:`prepare_storage`."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..cache import CachePolicy, make_policy, policy_name
from ..cache.hot_rows import check_cache_args, rank_cache_rows
from ..devices import resolve_backend, resolve_store_device
from ..options import Compression, DeviceCache, StorageTier
from ..table_input import check_out_dtype
from .policy import StoragePlan, plan_storage
from .table_file import TableFile, open_table_file


@dataclass(frozen=True)
class PreparedStorage:
    """What the store keeps of a storage-backed table (and what pickling sends)."""

    table: TableFile
    plan: StoragePlan
    backend: str
    device: torch.device
    out_dtype: torch.dtype

    def __reduce__(self):
        # The file again by name (each process opens, reads and buffers on its own); the plan as it is.
        source = self.table.folder if self.table.folder is not None else self.table.path
        return _reopen, (str(source), self.plan, self.backend, self.device, self.out_dtype)


def _reopen(source: str, plan: StoragePlan, backend: str, device: torch.device, out_dtype: torch.dtype) -> PreparedStorage:
    return PreparedStorage(open_table_file(source), plan, backend, device, out_dtype)


def prepare_storage(data, backend: str, device, compression: Compression, storage: StorageTier, cache: DeviceCache) -> PreparedStorage:
    """Open ``data`` (a ``.npy`` path or compressed folder), check every part, rank rows once
    (the device cache and the host buffer's static share use the same ranking: ``cache``'s policy)
    and size the buffer."""
    table = open_table_file(data)
    codec, out_dtype = compression.codec, compression.out_dtype
    cache_bytes, cache_policy, graph, sampler, seeds = cache.bytes, cache.policy, cache.graph, cache.sampler, cache.seeds
    if codec is not None and (table.codec is None or table.codec.name != codec):
        raise ValueError(
            f"compression={codec!r} with storage=StorageTier(...): the rows are read from the file as they are stored, so compress the file first, "
            f"dgl_zerocopy.compress({str(table.path)!r}, {codec!r}, out=DIR), and pass DIR"
        )
    out_dtype = check_out_dtype(out_dtype, table.codec.name if table.codec is not None else None, table.dtype)
    if backend == "gpu":
        raise ValueError("backend='gpu' copies the whole table to the device; with storage=StorageTier(...) use 'zerocopy', 'cpu' or 'auto'")
    rows = table.shape[0]
    check_cache_args(cache_bytes, cache_policy, rows, graph, sampler, seeds)
    backend = resolve_backend(backend, device)
    device = resolve_store_device(device, backend)
    order = None
    if isinstance(cache_policy, CachePolicy):
        order = cache_policy.order
    elif graph is not None and storage.policy not in ("dynamic", "lru", "clock", "fifo"):
        cache_policy = make_policy(cache_policy, graph, sampler=sampler, seeds=seeds, **(cache.presample_options or {}))
        order = cache_policy.order  # ranked once: the device cache below takes its prefix
    meta = torch.empty(table.shape, dtype=table.dtype, device="meta")
    cache_rows = rank_cache_rows(meta, backend, cache_bytes, cache_policy, graph, sampler, seeds, cache.presample_options, stacklevel=5)
    plan = plan_storage(
        rows,
        table.row_bytes,
        storage.bytes,
        storage.policy,
        order,
        cache_rows=cache_rows,
        cache_policy=policy_name(cache_policy) if cache_rows is not None else None,
        threads=storage.threads,
        direct=storage.direct,
    )
    return PreparedStorage(table, plan, backend, device, out_dtype)
