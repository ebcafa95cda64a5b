"""Static cache policies: which rows deserve a place in GPU memory, best first, and how many fit.

A policy ranks every row of the table once (:attr:`CachePolicy.order`, a permutation of the row
ids, most valuable first); a byte budget then keeps a prefix of that ranking
(:meth:`CachePolicy.rows_for_budget`), so one ranking serves every cache size.

Which rows does sampling read? DGL's neighbour samplers (``edge_dir="in"``, their default) take
the *in*-edges of each frontier node, so a row is gathered when its node is the *source* of a
sampled edge: nodes are reached in proportion to their *out*-degree. A sampler with
``edge_dir="out"`` takes out-edges and reaches nodes by their in-degree. On a bidirected graph
(every edge stored both ways) the two degrees are equal; on a directed one (ogbn-arxiv,
ogbn-papers100M as shipped) they are not, and ranking by the wrong one caches rows that are rarely
read.

- ``"degree"`` (the default wherever a policy is chosen for the user): the degree that sampling
  follows: out-degree for in-edge sampling, in-degree for ``edge_dir="out"``. The direction is the
  ``edge_dir`` of the ``sampler`` given (``"in"`` when none is given, or when it has no
  ``edge_dir``). Ties: lower node id first.
- ``"in_degree"``: rows of the nodes with the most in-edges first (exactly that, whatever the
  sampler). Ties: lower node id first.
- ``"out_degree"``: rows of the nodes with the most out-edges first. Ties: lower node id first.
- ``"presample"`` (GNNLab, Yang et al., EuroSys 2022): run the training sampler over batches of the
  training seeds for about one epoch and count how often each row is gathered, i.e. how many
  batches have it among their input nodes (``blocks[0].srcdata[dgl.NID]``); most often first.
  Ties (rows seen equally often, including never): the higher degree that the sampler follows
  first (as ``"degree"``), then lower node id.

The budget covers all the device memory a cache takes: the cached rows and the slot map (one
int32 per node of the table, see :mod:`.slots`), so ``cache_nbytes <= cache_bytes`` always. A
budget too small for the map plus one row caches nothing (and needs no map).
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
import torch

from .slots import SLOTS_INT32, slot_dtype

__all__ = [
    "CACHE_POLICIES",
    "DEFAULT_CACHE_POLICY",
    "CachePolicy",
    "DegreePolicy",
    "InDegreePolicy",
    "OutDegreePolicy",
    "PresamplePolicy",
    "SamplingDegreePolicy",
    "budget_for_rows",
    "cache_capacity",
    "check_budget",
    "check_policy_name",
    "graph_num_nodes",
    "in_degrees",
    "make_policy",
    "node_degrees",
    "out_degrees",
    "presample_counts",
    "sampled_degree",
    "sampling_edge_dir",
    "slot_map_nbytes",
]

log = logging.getLogger(__name__)

CACHE_POLICIES = ("degree", "in_degree", "out_degree", "presample")
DEFAULT_CACHE_POLICY = "degree"  # the degree sampling follows: right on directed and bidirected graphs alike
EDGE_DIRS = ("in", "out")


def check_policy_name(policy: str) -> str:
    """``policy`` if it names a policy, else ``ValueError`` listing the valid names."""
    if policy not in CACHE_POLICIES:
        raise ValueError(f"cache_policy must be one of {', '.join(repr(p) for p in CACHE_POLICIES)}, but got {policy!r}")
    return policy


def check_budget(cache_bytes: Any) -> int:
    """``cache_bytes`` as an int, after checking it is a non-negative integer."""
    if isinstance(cache_bytes, bool) or not isinstance(cache_bytes, (int, np.integer)):
        raise TypeError(f"cache_bytes must be an integer number of bytes (0: no cache), but got {cache_bytes!r}")
    if cache_bytes < 0:
        raise ValueError(f"cache_bytes must be >= 0 (0: no cache), but got {cache_bytes}")
    return int(cache_bytes)


def _check_row_bytes(row_bytes: Any) -> int:
    if isinstance(row_bytes, bool) or not isinstance(row_bytes, (int, np.integer)) or row_bytes <= 0:
        raise ValueError(f"row_bytes must be a positive integer, but got {row_bytes!r}")
    return int(row_bytes)


def slot_map_nbytes(num_rows: int, num_cached: int) -> int:
    """Bytes of the slot map of a ``num_rows``-row table with ``num_cached`` rows cached (none without a cache)."""
    return num_rows * torch.empty((), dtype=slot_dtype(num_cached)).element_size() if num_cached else 0


def cache_capacity(cache_bytes: int, row_bytes: int, num_rows: int) -> int:
    """How many rows of ``row_bytes`` a budget of ``cache_bytes`` holds, beside the slot map of a
    ``num_rows``-row table (at most ``num_rows``; 0 when the map and one row do not fit)."""
    cache_bytes, row_bytes = check_budget(cache_bytes), _check_row_bytes(row_bytes)
    if num_rows < 0:
        raise ValueError(f"num_rows must be >= 0, but got {num_rows}")
    best = 0
    for bound in (SLOTS_INT32, num_rows):  # an int32 map up to SLOTS_INT32 cached rows, an int64 map beyond
        k = min(num_rows, bound, max(0, (cache_bytes - slot_map_nbytes(num_rows, bound)) // row_bytes))
        if k and k * row_bytes + slot_map_nbytes(num_rows, k) <= cache_bytes:
            best = max(best, k)
    return int(best)


def budget_for_rows(num_cached: int, row_bytes: int, num_rows: int) -> int:
    """The smallest ``cache_bytes`` that holds ``num_cached`` rows (with their slot map):
    the inverse of :func:`cache_capacity`, e.g. for DGL's ``gpu_cache`` given in rows."""
    row_bytes = _check_row_bytes(row_bytes)
    if not 0 <= num_cached <= num_rows:
        raise ValueError(f"num_cached must be in [0, num_rows={num_rows}], but got {num_cached}")
    return num_cached * row_bytes + slot_map_nbytes(num_rows, num_cached)


def graph_num_nodes(graph) -> int:
    """Node count of a homogeneous DGL graph, with clear errors for anything else."""
    if graph is None:
        raise ValueError("a cache policy needs graph=: the DGL graph whose node ids are the table's rows")
    if not all(hasattr(graph, name) for name in ("num_nodes", "in_degrees", "out_degrees")):
        raise TypeError(f"graph must be a DGL graph, but got {type(graph).__name__}")
    if len(getattr(graph, "ntypes", ("_N",))) != 1:
        raise ValueError(f"graph must have one node type (one feature table), but it has {list(graph.ntypes)}")
    return int(graph.num_nodes())


def in_degrees(graph) -> np.ndarray:
    """In-degree of every node of ``graph`` as int64 NumPy."""
    graph_num_nodes(graph)
    return graph.in_degrees().numpy().astype(np.int64, copy=False)


def out_degrees(graph) -> np.ndarray:
    """Out-degree of every node of ``graph`` as int64 NumPy."""
    graph_num_nodes(graph)
    return graph.out_degrees().numpy().astype(np.int64, copy=False)


def node_degrees(graph, kind: str) -> np.ndarray:
    """``kind`` (``"in_degree"`` or ``"out_degree"``) of every node of ``graph``, int64 NumPy."""
    if kind == "in_degree":
        return in_degrees(graph)
    if kind == "out_degree":
        return out_degrees(graph)
    raise ValueError(f"kind must be 'in_degree' or 'out_degree', but got {kind!r}")


def sampling_edge_dir(sampler=None) -> str:
    """The edges ``sampler`` takes from a frontier node: its ``edge_dir`` (``"in"`` or ``"out"``, as
    DGL's ``NeighborSampler`` and ``LaborSampler`` hold it); ``"in"`` for no sampler or one without
    ``edge_dir`` (DGL's default, and what ``ShaDowKHopSampler`` always does)."""
    edge_dir = getattr(sampler, "edge_dir", None) if sampler is not None else None
    if edge_dir is None:
        return "in"
    if edge_dir not in EDGE_DIRS:
        raise ValueError(f"the sampler's edge_dir must be 'in' or 'out', but got {edge_dir!r}")
    return edge_dir


def sampled_degree(edge_dir: str = "in") -> str:
    """The degree by which sampling with ``edge_dir`` reaches a node: ``"out_degree"`` for ``"in"``
    (a frontier's in-edges start at the nodes it reads), ``"in_degree"`` for ``"out"``."""
    if edge_dir not in EDGE_DIRS:
        raise ValueError(f"edge_dir must be 'in' or 'out', but got {edge_dir!r}")
    return "out_degree" if edge_dir == "in" else "in_degree"


class CachePolicy:
    """A ranking of all ``num_rows`` rows, most valuable first (``order``, int64 CPU tensor). Made
    directly, it is a ranking of the caller's own (e.g. from access counts of a previous run)."""

    name = "custom"

    def __init__(self, order: torch.Tensor) -> None:
        order = torch.as_tensor(order)
        if order.dim() != 1 or order.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"order must be a 1-D int32/int64 tensor of row ids, but got {order.dtype} of shape {tuple(order.shape)}")
        self.order = order.to(torch.int64)

    @property
    def num_rows(self) -> int:
        return int(self.order.shape[0])

    def rows_for_budget(self, cache_bytes: int, row_bytes: int) -> torch.Tensor:
        """The row ids to cache for ``cache_bytes`` with rows of ``row_bytes``, in priority order
        (slot ``i`` holds row ``result[i]``): the first :func:`cache_capacity` rows of ``order``."""
        return self.order[: cache_capacity(cache_bytes, row_bytes, self.num_rows)]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_rows={self.num_rows})"


class DegreePolicy(CachePolicy):
    """Rows by ``kind`` (``"in_degree"`` or ``"out_degree"``) in ``graph``, highest first; ties by
    lower node id. ``degrees`` holds the degree of every node (int64 NumPy)."""

    def __init__(self, graph, kind: str) -> None:
        self.kind = kind
        self.degrees = node_degrees(graph, kind)
        super().__init__(torch.from_numpy(np.argsort(-self.degrees, kind="stable")))


class InDegreePolicy(DegreePolicy):
    """Rows by in-degree in ``graph``, highest first; ties by lower node id."""

    name = "in_degree"

    def __init__(self, graph) -> None:
        super().__init__(graph, "in_degree")


class OutDegreePolicy(DegreePolicy):
    """Rows by out-degree in ``graph``, highest first; ties by lower node id."""

    name = "out_degree"

    def __init__(self, graph) -> None:
        super().__init__(graph, "out_degree")


class SamplingDegreePolicy(DegreePolicy):
    """Rows by the degree that ``sampler`` reaches nodes by (:func:`sampled_degree` of its
    :func:`sampling_edge_dir`): out-degree for in-edge sampling (DGL's default, and with no
    sampler), in-degree for ``edge_dir="out"``. ``kind`` says which one it used."""

    name = "degree"

    def __init__(self, graph, sampler=None) -> None:
        self.edge_dir = sampling_edge_dir(sampler)
        super().__init__(graph, sampled_degree(self.edge_dir))
        log.debug("cache_policy='degree': rows by %s (the sampler takes %s-edges)", self.kind, self.edge_dir)


class PresamplePolicy(CachePolicy):
    """Rows by how often ``sampler`` gathered them over about ``epochs`` epochs of ``seeds``
    (``counts``, int64 per node), most often first; ties by the degree ``sampler`` follows
    (``degrees``, as :class:`SamplingDegreePolicy`), then lower node id. See
    :func:`presample_counts` for the arguments."""

    name = "presample"

    def __init__(self, graph, sampler, seeds, *, batch_size: int = 1024, epochs: float = 1.0, seed: int = 0) -> None:
        self.counts = presample_counts(graph, sampler, seeds, batch_size=batch_size, epochs=epochs, seed=seed)
        self.degrees = node_degrees(graph, sampled_degree(sampling_edge_dir(sampler)))
        super().__init__(torch.from_numpy(np.lexsort((-self.degrees, -self.counts.numpy()))))


def presample_counts(graph, sampler, seeds, *, batch_size: int = 1024, epochs: float = 1.0, seed: int = 0) -> torch.Tensor:
    """How many sampled batches gather each row: int64 tensor of length ``graph.num_nodes()``.

    ``sampler`` is a DGL block sampler (``sampler.sample(graph, seed_nodes)`` returns
    ``(input_nodes, output_nodes, blocks)``, as ``dgl.dataloading.NeighborSampler`` does); the
    rows a batch gathers are its ``input_nodes`` (= ``blocks[0].srcdata[dgl.NID]``). ``seeds``
    (1-D node ids) are shuffled by ``numpy.random.default_rng(seed)`` and cut into batches of
    ``batch_size``; ``ceil(epochs * batches per epoch)`` batches run, reshuffling every epoch.
    The neighbours drawn follow DGL's own random state (``dgl.seed``), which this does not touch.
    """
    num_nodes = graph_num_nodes(graph)
    if sampler is None or not hasattr(sampler, "sample"):
        raise ValueError(
            f"cache_policy='presample' needs sampler=: a DGL block sampler such as dgl.dataloading.NeighborSampler([15, 10, 5]), but got {sampler!r}"
        )
    if seeds is None:
        raise ValueError("cache_policy='presample' needs seeds=: the training node ids the sampler starts from")
    seeds = torch.as_tensor(seeds)
    if seeds.dim() != 1 or seeds.dtype not in (torch.int32, torch.int64) or seeds.numel() == 0:
        raise ValueError(f"seeds must be a non-empty 1-D tensor of int32/int64 node ids, but got {seeds.dtype} of shape {tuple(seeds.shape)}")
    if int(seeds.min()) < 0 or int(seeds.max()) >= num_nodes:
        raise IndexError(f"seeds must be node ids in [0, {num_nodes}), but they span [{int(seeds.min())}, {int(seeds.max())}]")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise ValueError(f"batch_size must be a positive integer, but got {batch_size!r}")
    if not epochs > 0:
        raise ValueError(f"epochs must be > 0, but got {epochs!r}")
    seeds = seeds.to(graph.idtype)
    per_epoch = math.ceil(seeds.numel() / batch_size)
    remaining = math.ceil(epochs * per_epoch)
    rng = np.random.default_rng(seed)
    counts = torch.zeros(num_nodes, dtype=torch.int64)
    while remaining:
        order = seeds[torch.from_numpy(rng.permutation(seeds.numel()))]
        for start in range(0, order.numel(), batch_size):
            input_nodes = sampler.sample(graph, order[start : start + batch_size])[0]
            if isinstance(input_nodes, dict):
                raise ValueError("the sampler returned input nodes per node type: a cache serves one node type (a homogeneous graph)")
            counts.index_add_(0, input_nodes.long(), torch.ones(input_nodes.numel(), dtype=torch.int64))
            remaining -= 1
            if not remaining:
                break
    return counts


def make_policy(policy: str, graph, *, sampler=None, seeds=None, batch_size: int = 1024, epochs: float = 1.0, seed: int = 0) -> CachePolicy:
    """The policy named ``policy`` over ``graph``. ``"degree"`` reads the ``edge_dir`` of ``sampler``
    (if given); ``"presample"`` runs ``sampler`` over ``seeds``; ``"in_degree"`` and
    ``"out_degree"`` ignore them."""
    check_policy_name(policy)
    if policy == "degree":
        return SamplingDegreePolicy(graph, sampler)
    if policy == "in_degree":
        return InDegreePolicy(graph)
    if policy == "out_degree":
        return OutDegreePolicy(graph)
    return PresamplePolicy(graph, sampler, seeds, batch_size=batch_size, epochs=epochs, seed=seed)
