"""Sorting a batch of ids for the gather, over only the bits the ids and their positions need.

A sorted gather reads the rows in id order and writes each row back to its place in the batch, so
it needs the ids sorted and, for each, its position in the batch (the kernels' ``perm``: row ``j``
of the sorted ids goes to output row ``perm[j]``).

Why these keys: a radix sort (CUB's, under ``cupy.sort``/``cupy.argsort`` and under ``torch.sort``
on CUDA) makes one pass per 8 bits of its key type, over every bit of it, and neither library lets
a caller name fewer bits. So the fewest passes come from the narrowest key type that holds what the
order needs. :func:`sort_plan` picks, for ``n`` ids into ``num_rows`` rows (``b(x)``: the bits of
``x - 1``):

- ``"packed32"`` when ``b(num_rows) + b(n) <= 31``: one int32 key ``(id << b(n)) | position``,
  sorted alone (4 passes over 4-byte keys, no values); ``key >> b(n)`` is the sorted ids and
  ``key & (2**b(n) - 1)`` their positions. Keys are distinct, so the sort need not be stable.
- ``"ids32"`` when the ids fit int32 (``num_rows <= 2**31``) but the packed key does not (the
  common case: 111 M rows take 27 bits, 262,144 ids 18): the int32 ids sorted with their
  positions (4 passes over 4-byte keys carrying 8-byte positions), against 8 passes for any
  64-bit key.
- ``"packed64"`` otherwise: the packed key in int64 (8 passes over 8-byte keys, no values: half
  the bytes of sorting int64 ids with their positions, and no gather of the ids after).

The same code runs on CuPy arrays (on the device, on the caller's current stream), NumPy arrays and
torch tensors (CPU or CUDA): NumPy and CPU tensors stand in for the device in tests.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["SORT_PLANS", "sort_for_gather", "sort_plan"]

SORT_PLANS = ("packed32", "ids32", "packed64")


def _bits(count: int) -> int:
    """Bits of the largest value below ``count`` (0 for 0 or 1)."""
    return max(count - 1, 0).bit_length()


def sort_plan(num_ids: int, num_rows: int) -> str:
    """The key :func:`sort_for_gather` sorts for ``num_ids`` ids into ``num_rows`` rows (module docstring).

    Raises:
        ValueError: a negative count, or ids and positions that no 64-bit key holds.
    """
    if num_ids < 0 or num_rows < 0:
        raise ValueError(f"num_ids and num_rows must be >= 0, but got {num_ids}, {num_rows}")
    id_bits, position_bits = _bits(num_rows), _bits(num_ids)
    if id_bits + position_bits <= 31:
        return "packed32"
    if id_bits <= 31:
        return "ids32"
    if id_bits + position_bits <= 63:
        return "packed64"
    raise ValueError(f"{num_ids} ids into {num_rows} rows need {id_bits + position_bits} key bits; split the batch")


class _Ops:
    """The few array calls the sort needs, for one library: torch, CuPy or NumPy (CuPy's names are
    spelled out, so that the API-surface test checks them against the installed CuPy)."""

    def __init__(self, ids: Any) -> None:
        torch = sys.modules.get("torch")
        self.torch = torch is not None and isinstance(ids, torch.Tensor)
        module = type(ids).__module__.split(".")[0]
        if self.torch:
            self.lib, self.device = torch, ids.device
        elif module == "cupy":
            import cupy

            self.lib, self.device = cupy, None
            self._sort, self._argsort, self._arange = cupy.sort, cupy.argsort, cupy.arange
        elif module == "numpy":
            import numpy

            self.lib, self.device = numpy, None
            self._sort, self._argsort, self._arange = numpy.sort, numpy.argsort, numpy.arange
        else:
            raise TypeError(f"ids must be a torch tensor, a NumPy or a CuPy array, but got {type(ids).__name__}")

    def dtype(self, name: str) -> Any:
        return getattr(self.lib, name)

    def cast(self, array: Any, name: str) -> Any:
        return array.to(self.dtype(name)) if self.torch else array.astype(self.dtype(name), copy=False)

    def arange(self, n: int, name: str) -> Any:
        if self.torch:
            return self.lib.arange(n, dtype=self.dtype(name), device=self.device)
        return self._arange(n, dtype=self.dtype(name))

    def sort(self, keys: Any) -> Any:
        """Keys sorted alone (torch sorts with indices whatever it is asked; they are dropped)."""
        return self.lib.sort(keys).values if self.torch else self._sort(keys)

    def sort_with_positions(self, keys: Any) -> tuple[Any, Any]:
        if self.torch:
            values, positions = self.lib.sort(keys)
            return values, positions
        positions = self._argsort(keys)
        return keys[positions], positions


def sort_for_gather(ids: Any, num_rows: int) -> tuple[Any, Any]:
    """``(sorted_ids, positions)`` of a 1-D batch of ids: ``sorted_ids`` ascending, of the ids'
    dtype, and ``positions`` int64 with ``ids[positions[j]] == sorted_ids[j]``; ties in any order.

    Args:
        ids: 1-D int32 or int64 ids, each in ``[0, num_rows)`` (not checked: the caller has checked
            them), as a CuPy or NumPy array or a torch tensor; the results are of the same kind,
            on the same device (CuPy: on the current stream).
        num_rows: rows of the table the ids index.

    Raises:
        TypeError: ids of another kind or dtype. ValueError: ids that are not 1-D, or counts no
            64-bit key holds.
    """
    ops = _Ops(ids)
    dtype = str(ids.dtype).removeprefix("torch.")
    if dtype not in ("int32", "int64"):
        raise TypeError(f"ids must be int32 or int64, but got {dtype}")
    if ids.ndim != 1:
        raise ValueError(f"ids must be 1-D, but got shape {tuple(ids.shape)}")
    num_ids = int(ids.shape[0])
    plan = sort_plan(num_ids, num_rows)
    if plan == "ids32":
        sorted_ids, positions = ops.sort_with_positions(ops.cast(ids, "int32"))
        return ops.cast(sorted_ids, dtype), ops.cast(positions, "int64")
    key_type = "int32" if plan == "packed32" else "int64"
    shift = _bits(num_ids)
    keys = ops.sort((ops.cast(ids, key_type) << shift) | ops.arange(num_ids, key_type))
    sorted_ids = ops.cast(keys >> shift, dtype)
    positions = ops.cast(keys & ((1 << shift) - 1), "int64")
    return sorted_ids, positions
