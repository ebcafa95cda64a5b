"""Graph data checked where it enters: a CSC (or CSR) or an ``edge_index`` is refused, with one clear error,
before any sampling kernel reads it. The kernels index without bounds checks in their hot loops, so an id out of
range there reads (or writes) outside an array: a segfault, or a batch of garbage returned without a word.

- :func:`check_csc`: ``indptr`` starts at 0, never decreases and ends at ``len(indices)``; every index lies in
  ``[0, num_src_nodes)``. ``ValueError`` for a malformed ``indptr`` or wrong sizes, ``IndexError`` for an id out of
  range; both name the tensor, the first bad position and its value, and the fix.
- :func:`check_edge_index`: a ``[2, num_edges]`` COO with sources in ``[0, num_src_nodes)`` and destinations in
  ``[0, num_dst_nodes)``.

The cost is one pass over the arrays (min and max per chunk, the bad position found only in a failing chunk), once
per graph: a verdict is remembered for a tensor until its version changes (an in-place write bumps it) and for a
read-only NumPy array (a file mapped read-only) while it lives. Arrays may be NumPy (memory-mapped too) or torch
tensors on any device.
"""

from __future__ import annotations

import threading
import warnings
import weakref
from typing import Any

import numpy as np
import torch

__all__ = ["check_csc", "check_edge_index", "check_ids", "forget_checks"]

_TORCH_DTYPES = {np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.int32, np.int64)}

#: Elements per chunk of a pass: 64 Mi int64 is 512 MB, small beside the graphs this matters for.
_CHUNK = 1 << 26

#: Offsets per chunk of the monotonicity pass (its temporary: one bool per offset).
_COMPARE_CHUNK = 1 << 20

_lock = threading.Lock()
#: id(array) -> (a weak reference to it, its stamp, the check's key); an entry dies with its array.
_verdicts: dict[int, tuple[weakref.ref, tuple, tuple]] = {}


def check_csc(indptr: Any, indices: Any, num_src_nodes: int, *, name: str = "graph", num_dst_nodes: int | None = None, fix: str = "") -> None:
    """Refuse a compressed sparse graph that a kernel could not read safely.

    Args:
        indptr: 1-D offsets, ``num_dst_nodes + 1`` of them (NumPy or torch, integer).
        indices: 1-D node ids of the other end of each edge (NumPy or torch, integer).
        num_src_nodes: how many nodes ``indices`` may name: each must lie in ``[0, num_src_nodes)``.
        name: what the user calls this graph (a file, a relation), named by the error.
        num_dst_nodes: the expected ``len(indptr) - 1``, when known.
        fix: what the user should do, appended to the error (default: a generic hint).

    Raises:
        TypeError: an array that is not of an integer dtype.
        ValueError: ``indptr`` not 1-D, not starting at 0, decreasing, or not ending at ``len(indices)``; a
            ``num_dst_nodes`` that disagrees.
        IndexError: an index outside ``[0, num_src_nodes)``.
    """
    hint = fix or "rebuild the graph from valid edges"
    # The checks of shapes and dtypes cost nothing and run every time; the passes over the values run once.
    _check_integer(indptr, f"{name}'s indptr")
    _check_integer(indices, f"{name}'s indices")
    if indptr.ndim != 1 or indices.ndim != 1:
        raise ValueError(f"{name}'s indptr and indices must be 1-D, but got shapes {tuple(indptr.shape)} and {tuple(indices.shape)}; {hint}")
    if len(indptr) < 1:
        raise ValueError(f"{name}'s indptr is empty; it needs num_nodes + 1 offsets starting at 0; {hint}")
    if num_dst_nodes is not None and len(indptr) != num_dst_nodes + 1:
        raise ValueError(f"{name}'s indptr has {len(indptr)} offsets for {num_dst_nodes} nodes (it needs {num_dst_nodes + 1}); {hint}")
    # A verdict holds for the pair: each array's key names the other's length (its own is in its stamp), so
    # that callers who do and do not pass num_dst_nodes share one verdict.
    ptr_key, idx_key = ("csc", int(num_src_nodes), len(indices)), ("csc", int(num_src_nodes), len(indptr))
    if _known_good(indptr, ptr_key) and _known_good(indices, idx_key):
        return
    first, last = int(indptr[0]), int(indptr[-1])
    if first != 0:
        raise ValueError(f"{name}'s indptr starts at {first}, not 0; {hint}")
    if last != len(indices):
        raise ValueError(f"{name}'s indptr ends at {last}, but indices holds {len(indices)} entries; {hint}")
    _check_monotone(indptr, name, hint)
    _check_range(indices, int(num_src_nodes), f"{name}'s indices", hint)
    _remember(indptr, ptr_key)
    _remember(indices, idx_key)


def check_edge_index(edge_index: Any, num_src_nodes: int, num_dst_nodes: int | None = None, *, name: str = "edge_index", fix: str = "") -> None:
    """Refuse a ``[2, num_edges]`` COO whose sources (row 0) are not all in ``[0, num_src_nodes)`` or whose
    destinations (row 1) are not all in ``[0, num_dst_nodes)`` (default: ``num_src_nodes``).

    Raises:
        TypeError: not an integer tensor or array.
        ValueError: not of shape ``[2, num_edges]``.
        IndexError: an id out of range, named with its row, position and value.
    """
    num_dst_nodes = num_src_nodes if num_dst_nodes is None else num_dst_nodes
    key = ("coo", int(num_src_nodes), int(num_dst_nodes))
    if _known_good(edge_index, key):
        return
    hint = fix or "drop or renumber those edges, or pass the right num_nodes"
    _check_integer(edge_index, name)
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"{name} must have shape [2, num_edges], but got {tuple(edge_index.shape)}")
    _check_range(edge_index[0], int(num_src_nodes), f"{name}[0] (sources)", hint)
    _check_range(edge_index[1], int(num_dst_nodes), f"{name}[1] (destinations)", hint)
    _remember(edge_index, key)


def check_ids(ids: Any, num_nodes: int, *, name: str = "ids", fix: str = "") -> None:
    """Refuse a 1-D array of node ids (one side of a COO, seeds) with an id outside ``[0, num_nodes)``.

    Args:
        ids: 1-D integer ids (NumPy or torch).
        num_nodes: how many nodes they may name.
        name: what the user calls them, named by the error.
        fix: what the user should do, appended to the error (default: a generic hint).

    Raises:
        TypeError: not of an integer dtype.
        ValueError: not 1-D.
        IndexError: an id out of range, named with its position and value.
    """
    _check_integer(ids, name)
    if ids.ndim != 1:
        raise ValueError(f"{name} must be 1-D, but got shape {tuple(ids.shape)}")
    key = ("ids", int(num_nodes))
    if _known_good(ids, key):
        return
    _check_range(ids, int(num_nodes), name, fix or "drop or renumber those ids, or pass the right num_nodes")
    _remember(ids, key)


def forget_checks() -> None:
    """Forget every remembered verdict (tests; or after writing into an array behind its tensor's back)."""
    with _lock:
        _verdicts.clear()


# -- passes --------------------------------------------------------------------------------------


def _check_integer(array: Any, what: str) -> None:
    if isinstance(array, torch.Tensor):
        if array.dtype.is_floating_point or array.dtype.is_complex or array.dtype == torch.bool:
            raise TypeError(f"{what} must be an integer tensor (int32 or int64), but got {array.dtype}")
    elif isinstance(array, np.ndarray):
        if not np.issubdtype(array.dtype, np.integer):
            raise TypeError(f"{what} must be an integer array (int32 or int64), but got {array.dtype}")
    else:
        raise TypeError(f"{what} must be a torch tensor or a NumPy array, but got {type(array).__name__}")


def _chunks(n: int, size: int | None = None):
    size = size or _CHUNK
    for start in range(0, n, size):
        yield start, min(n, start + size)


def _minmax(part: Any) -> tuple[int, int]:
    # torch's aminmax reads the chunk once, on every intra-op thread: 1.2x NumPy's min() and max() on int64,
    # 2x on int32 (measured on 64 Mi ids); a NumPy array (a file's map too) is viewed as a tensor, no copy.
    tensor = part if isinstance(part, torch.Tensor) else _as_tensor(part)
    if tensor is None:
        return int(part.min()), int(part.max())
    lo, hi = torch.aminmax(tensor)
    return int(lo), int(hi)


def _as_tensor(array: np.ndarray) -> torch.Tensor | None:
    """A tensor viewing ``array`` (read only here), or None for a dtype torch does not hold."""
    if array.dtype.byteorder not in "=|" or array.dtype not in _TORCH_DTYPES:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "not writable": the view is only read
        return torch.from_numpy(array)


def _as_array(part: Any) -> Any:
    """A CPU tensor as a NumPy view (NumPy compares neighbours 4-6x faster than torch); anything else as it is."""
    if isinstance(part, torch.Tensor) and part.device.type == "cpu" and part.dtype in (torch.int32, torch.int64):
        return part.numpy()
    return part


def _first(mask: Any) -> int:
    if isinstance(mask, torch.Tensor):
        return int(torch.nonzero(mask)[0, 0])
    return int(np.flatnonzero(mask)[0])


def _check_range(values: Any, bound: int, what: str, hint: str) -> None:
    n = len(values)
    for start, stop in _chunks(n):
        part = values[start:stop]
        lo, hi = _minmax(part)
        if lo < 0 or hi >= bound:
            at = start + _first((part < 0) | (part >= bound))
            value = int(values[at])
            raise IndexError(f"{what}: id {value} at position {at} is out of range for {bound} nodes (ids must lie in [0, {bound})); {hint}")


def _check_monotone(indptr: Any, name: str, hint: str) -> None:
    n = len(indptr)
    # Chunks overlap by one offset, so that a decrease across a chunk boundary is seen. They are smaller than the
    # range pass's: the comparison's temporary then stays in the cache and in the heap (a 64 MB one is mapped
    # afresh by malloc, page by page: the first pass ran at a fifth of the speed).
    for start, stop in _chunks(max(n - 1, 0), min(_CHUNK, _COMPARE_CHUNK)):
        part = _as_array(indptr[start : stop + 1])
        drops = part[1:] < part[:-1]
        if bool(drops.any()):
            at = start + _first(drops) + 1
            raise ValueError(f"{name}'s indptr decreases at position {at} ({int(indptr[at - 1])} then {int(indptr[at])}); offsets must never decrease; {hint}")


# -- verdicts ------------------------------------------------------------------------------------


def _stamp(array: Any) -> tuple | None:
    """What must be unchanged for a verdict to hold, or None where nothing can tell a change."""
    if isinstance(array, torch.Tensor):
        return (array._version, array.data_ptr(), tuple(array.shape), array.dtype)
    if isinstance(array, np.ndarray) and not array.flags.writeable:
        return (array.ctypes.data, array.shape, array.dtype.str)
    return None


def _known_good(array: Any, key: tuple) -> bool:
    stamp = _stamp(array)
    if stamp is None:
        return False
    with _lock:
        entry = _verdicts.get(id(array))
    return entry is not None and entry[0]() is array and entry[1:] == (stamp, key)


def _remember(array: Any, key: tuple) -> None:
    stamp = _stamp(array)
    if stamp is None:
        return
    ident = id(array)
    try:
        ref = weakref.ref(array, lambda _, ident=ident: _forget(ident))
    except TypeError:  # not weakly referenceable: checked again next time
        return
    with _lock:
        _verdicts[ident] = (ref, stamp, key)


def _forget(ident: int) -> None:
    with _lock:
        _verdicts.pop(ident, None)
