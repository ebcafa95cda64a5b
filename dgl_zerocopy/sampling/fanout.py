"""The one check of a fanout (picks per node and layer) that every sampler shares: the CPU hop sampler, the
GPU sampler, the snapshot samplers and the PyG front end's ``num_neighbors``.

A fanout is an int in ``[0, MAX_FANOUT]``, or -1 for every in-edge. The kernels count picks in 32-bit
integers and size their scratch by the fanout, so a larger one cannot be honoured: it is refused, by its
value, rather than ending in an overflow or a ``MemoryError`` that names nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["MAX_FANOUT", "check_fanout", "check_num_neighbors"]

#: The largest fanout: what a signed 32-bit count holds.
MAX_FANOUT = 2**31 - 1


def check_fanout(fanout: Any, where: str = "fanout") -> int:
    """``fanout`` as an int.

    Args:
        fanout: picks per node (``0 .. MAX_FANOUT``), or -1 for every in-edge; a Python or NumPy integer.
        where: how the caller names the value in the error (``"num_neighbors[1]"``).

    Returns:
        The fanout as a Python int.

    Raises:
        ValueError: not an integer (a bool, a float, a string), below -1, or above :data:`MAX_FANOUT`.
    """
    if isinstance(fanout, bool) or not isinstance(fanout, int | np.integer) or not -1 <= fanout <= MAX_FANOUT:
        raise ValueError(
            f"{where} must be an int from 0 to {MAX_FANOUT} (2**31 - 1), or -1 for every in-edge, but got {fanout!r}; "
            f"pass the number of neighbours to sample per node, or -1 for all of them"
        )
    return int(fanout)


def check_num_neighbors(num_neighbors: Any, where: str = "num_neighbors") -> None:
    """Check every fanout of a PyG-style ``num_neighbors``: a list of ints (one per hop), a dict from edge type
    to such a list, or an object with such a ``values`` attribute (PyG's ``NumNeighbors``).

    Args:
        num_neighbors: the value to check.
        where: how the caller names it in the error.

    Raises:
        ValueError: a fanout :func:`check_fanout` refuses, named with its place (``num_neighbors[('a', 'to',
            'b')][0]``), or a value that is neither a list nor a dict of lists.
    """
    values = num_neighbors if isinstance(num_neighbors, Mapping | list | tuple) else getattr(num_neighbors, "values", num_neighbors)
    if isinstance(values, Mapping):
        for key, hops in values.items():
            _check_list(hops, f"{where}[{key!r}]")
    else:
        _check_list(values, where)


def _check_list(hops: Any, where: str) -> None:
    if isinstance(hops, str | bytes | Mapping) or not hasattr(hops, "__iter__"):
        raise ValueError(f"{where} must be a list of ints, one fanout per hop, but got {hops!r}")
    for i, fanout in enumerate(hops):
        check_fanout(fanout, f"{where}[{i}]")
