"""The slot map, the hit/miss split, and the CPU reference of the cached gather.

A cache holds ``k`` rows in a tensor ``cache_rows`` of shape ``(k, dim)``: slot ``i`` holds table
row ``row_ids[i]``. The slot map is a tensor of length ``num_rows`` (the table's rows) giving each
row's slot, or -1 for a row that is not cached; it is int32 (int64 only beyond 2**31 - 1 cached
rows). A batch of ids then splits into hits (read from ``cache_rows``) and misses (read from the
host table); :func:`cached_gather` puts both into one output and equals ``table[ids]`` for every
mix. It is what a store on device ``cpu`` runs, and what the fused CUDA kernel is tested against.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..id_check import check_host_ids

__all__ = ["SLOTS_INT32", "SplitHits", "build_slot_map", "cached_gather", "gather_split", "slot_dtype", "split_hits"]

#: Most cached rows an int32 slot map can number (slots 0 .. SLOTS_INT32 - 1).
SLOTS_INT32 = 2**31 - 1


def slot_dtype(num_cached: int) -> torch.dtype:
    """int32 while the slots fit in it, else int64."""
    return torch.int32 if num_cached <= SLOTS_INT32 else torch.int64


def build_slot_map(row_ids: torch.Tensor, num_rows: int, device: str | torch.device = "cpu") -> torch.Tensor:
    """The slot map of a cache holding rows ``row_ids`` (slot ``i`` holds ``row_ids[i]``):
    ``slot_map[row_ids[i]] == i``, -1 elsewhere, on ``device``. Ids must be distinct and in range."""
    row_ids = torch.as_tensor(row_ids)
    if row_ids.dim() != 1 or row_ids.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"row_ids must be a 1-D int32/int64 tensor, but got {row_ids.dtype} of shape {tuple(row_ids.shape)}")
    k = row_ids.numel()
    if k > num_rows:
        raise ValueError(f"cannot cache {k} rows of a {num_rows}-row table")
    if k and (int(row_ids.min()) < 0 or int(row_ids.max()) >= num_rows):
        raise IndexError(f"row_ids must lie in [0, {num_rows}), but they span [{int(row_ids.min())}, {int(row_ids.max())}]")
    row_ids = row_ids.to("cpu", torch.int64)
    dtype = slot_dtype(k)
    slot_map = torch.full((num_rows,), -1, dtype=dtype)
    slot_map[row_ids] = torch.arange(k, dtype=dtype)
    if int((slot_map >= 0).sum()) != k:
        raise ValueError("row_ids must be distinct: a row takes one slot")
    return slot_map.to(device)


class SplitHits(NamedTuple):
    """Where each id of a batch is read from. Positions index the batch (int64); ``hit_slots`` are
    cache slots (the slot map's dtype); ``miss_ids`` are table rows (the ids' dtype)."""

    hit_positions: torch.Tensor
    hit_slots: torch.Tensor
    miss_positions: torch.Tensor
    miss_ids: torch.Tensor


def split_hits(ids: torch.Tensor, slot_map: torch.Tensor, *, unchecked: bool = False) -> SplitHits:
    """Split a batch of row ids into cache hits and misses, each in batch order.

    Args:
        ids: 1-D int32/int64 tensor on the slot map's device, within ``[0, len(slot_map))``.
        slot_map: the cache's slot map (:func:`build_slot_map`).
        unchecked: True for a caller that checked ``ids`` already (a store's backend: they come
            from :func:`dgl_zerocopy.store.id_check.check_ids`); nothing is checked then.

    Returns:
        The :class:`SplitHits` of the batch, on the slot map's device.

    Raises:
        TypeError: ids that are not a 1-D int32/int64 tensor.
        ValueError: ids on another device than the slot map.
        IndexError: an id out of range, naming the first (it reads the ids on the host).
    """
    if not unchecked:
        _check_split_ids(ids, slot_map)
    slots = slot_map[ids]
    hit = slots >= 0
    hit_positions = hit.nonzero().flatten()
    miss_positions = (~hit).nonzero().flatten()
    return SplitHits(hit_positions, slots[hit_positions], miss_positions, ids[miss_positions])


def _check_split_ids(ids, slot_map: torch.Tensor) -> None:
    if not isinstance(ids, torch.Tensor) or ids.dtype not in (torch.int32, torch.int64) or ids.dim() != 1:
        what = f"{ids.dtype} of shape {tuple(ids.shape)}" if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise TypeError(f"ids must be a 1-D int32/int64 tensor, but got {what}")
    if ids.device != slot_map.device:
        raise ValueError(f"ids are on {ids.device} but the slot map is on {slot_map.device}; move them with ids.to({str(slot_map.device)!r})")
    check_host_ids(ids, slot_map.shape[0])


def gather_split(split: SplitHits, table: torch.Tensor, cache_rows: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Fill ``out`` (``(batch, dim)``) from a split: hits from ``cache_rows``, misses from ``table``."""
    if split.hit_positions.numel():
        out.index_copy_(0, split.hit_positions, cache_rows.index_select(0, split.hit_slots))
    if split.miss_positions.numel():
        out.index_copy_(0, split.miss_positions, table.index_select(0, split.miss_ids))
    return out


def cached_gather(
    ids: torch.Tensor, table: torch.Tensor, cache_rows: torch.Tensor, slot_map: torch.Tensor, out: torch.Tensor | None = None, *, unchecked: bool = False
) -> torch.Tensor:
    """``table[ids]``, reading cached rows from ``cache_rows`` (via ``slot_map``) and the others from
    ``table``: the CPU reference of the fused hit/miss gather. All tensors on one device;
    ``out`` (optional) is a ``(len(ids), dim)`` tensor of the table's dtype. ``ids`` are checked
    as :func:`split_hits` checks them, unless ``unchecked=True``."""
    if cache_rows.dim() != 2 or table.dim() != 2 or cache_rows.shape[1] != table.shape[1] or cache_rows.dtype != table.dtype:
        raise ValueError(
            f"cache_rows must be rows of the table: got {cache_rows.dtype} {tuple(cache_rows.shape)} for a {table.dtype} {tuple(table.shape)} table"
        )
    if slot_map.shape != (table.shape[0],):
        raise ValueError(f"the slot map must have one entry per table row ({table.shape[0]}), but has shape {tuple(slot_map.shape)}")
    split = split_hits(ids, slot_map, unchecked=unchecked)
    if out is None:
        out = torch.empty((ids.shape[0], table.shape[1]), dtype=table.dtype, device=table.device)
    elif out.shape != (ids.shape[0], table.shape[1]) or out.dtype != table.dtype:
        raise ValueError(f"out must be a {table.dtype} tensor of shape {(ids.shape[0], table.shape[1])}, but got {out.dtype} {tuple(out.shape)}")
    return gather_split(split, table, cache_rows, out)
