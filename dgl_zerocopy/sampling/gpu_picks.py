"""What a GPU-sampled layer picks besides "uniformly among every in-edge": PyG's hops, a time cut, weights.

The sampling kernels (``kernels/sample.cu``) plan a layer in passes (bounds, count, scan) and then pick and
fetch; the pieces here go between them (``plan_csc``'s ``narrow``/``count``, ``sample_csc_deferred``'s
``pick``), enqueued on the sampling device, reading nothing back:

- :func:`skip_expanded`: the first ``expanded`` destinations get no in-edges (an earlier layer gave them
  theirs): a node's in-edges are sampled once, at its hop, as PyG samples;
- :class:`TemporalPicks`: each destination's in-edges no later than its tree's seed time, the latest
  ``fanout`` of them for ``'last'`` (``kernels/sample_temporal.cu``'s cut, a binary search: times sorted
  within each neighbourhood);
- :class:`WeightedPicks`: picks in proportion to each in-edge's weight (that file's weighted count and pick,
  over the running sums of the weights within each neighbourhood; without replacement
  ``fanout <= MAX_WEIGHTED_FANOUT``).

The times, weights and sums are one value per CSC position, placed as the CSC is (:class:`EdgeValues`:
pinned in place and read zero-copy, copied to the device, or on the host for the emulator). They must
describe the CSC the sampler reads (the PyG front end builds both from PyG's CSC).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..cuda.sampling import temporal
from ..cuda.sampling.launch import CSCPlan
from .picks import TEMPORAL_STRATEGIES, check_times, check_weights, prefix_sums

__all__ = ["EdgeValues", "TemporalPicks", "WeightedPicks", "pick_keys", "seed_keys", "skip_expanded", "split_keys"]

#: Backends that run the temporal and weighted kernels (the NumPy reference of the uniform sampler has no twin of them).
KERNEL_BACKENDS = ("cuda", "emulator")


def skip_expanded(expanded: int | torch.Tensor) -> Callable[[torch.Tensor], None]:
    """A ``narrow`` that empties the ranges of the first ``expanded`` seeds (an int, or an int64 tensor of one
    element on the seeds' device): three device operations, no read."""

    def narrow(bounds: torch.Tensor) -> None:
        lo, hi = bounds[0::2], bounds[1::2]
        done = torch.arange(len(lo), device=bounds.device) < expanded
        hi.copy_(torch.where(done, lo, hi))

    return narrow


class EdgeValues:
    """One value per CSC position (times, weights), placed as the graph is: ``"pinned"`` (registered in
    place, read zero-copy by the GPU of ``device``), ``"device"`` (a copy in that GPU's memory) or ``"host"``
    (as it is, for the emulator). :meth:`close` unpins."""

    def __init__(self, values: torch.Tensor, placement: str, device: Any = None) -> None:
        values = values.contiguous()
        self._pin = None
        if placement == "device":
            values = values.to(device)
        elif placement == "pinned" and values.numel():
            from ..store.pinning import PinnedRange

            self._pin = PinnedRange(values.data_ptr(), values.numel() * values.element_size(), read_only=False)
        elif placement not in ("pinned", "host"):
            raise ValueError(f"placement must be 'host', 'pinned' or 'device', but got {placement!r}")
        self.tensor, self.placement = values, placement

    def close(self) -> None:
        if self._pin is not None:
            self._pin.unpin()
            self._pin = None


def _backend_check(backend: str, what: str) -> None:
    if backend not in KERNEL_BACKENDS:
        raise ValueError(f"{what} on the GPU sampler runs its kernels on 'cuda' or 'emulator', but the sampler's device is {backend!r}; use device='emulator'")


class TemporalPicks:
    """The time cut of a temporal sampler: ``times`` (one per CSC position of ``indptr``, int32/int64/
    float32/float64, sorted within each neighbourhood: checked here), ``strategy`` ``'uniform'`` (uniform
    among the in-edges no later than the seed's time) or ``'last'`` (the latest ``fanout`` of them).

    Raises:
        ValueError: an unknown strategy, times of the wrong length or out of order. TypeError: their dtype.
    """

    def __init__(self, indptr: Any, times: Any, strategy: str = "uniform", *, placement: str = "host", device: Any = None) -> None:
        if strategy not in TEMPORAL_STRATEGIES:
            raise ValueError(f"temporal_strategy must be one of {TEMPORAL_STRATEGIES}, but got {strategy!r}")
        times = check_times(_numpy(indptr), _numpy(times), "the CSC's times")
        temporal.cut_name(times.dtype)  # a dtype the kernel has an instantiation for (TypeError naming it)
        self.times = EdgeValues(torch.from_numpy(np.ascontiguousarray(times)), placement, device)
        self.strategy = strategy

    @property
    def dtype(self) -> torch.dtype:
        return self.times.tensor.dtype

    def narrow(self, dst_time: torch.Tensor, fanout: int, backend: str) -> Callable[[torch.Tensor], None]:
        """A ``narrow`` keeping each destination's in-edges no later than ``dst_time`` (one per destination,
        of the times' dtype, on the sampling device): one launch."""
        _backend_check(backend, "temporal sampling")

        def narrow(bounds: torch.Tensor) -> None:
            temporal.cut_by_time(bounds, self.times.tensor, dst_time, fanout, self.strategy, backend=backend)

        return narrow

    def close(self) -> None:
        self.times.close()


class WeightedPicks:
    """Weighted picks: ``weights`` (one per CSC position of ``indptr``, finite and >= 0: checked here), kept
    as float64 beside their running sums within each neighbourhood.

    Raises:
        ValueError: weights of the wrong length, negative or not finite. TypeError: not numbers.
    """

    def __init__(self, indptr: Any, weights: Any, *, placement: str = "host", device: Any = None) -> None:
        indptr = _numpy(indptr)
        weights = check_weights(indptr, _numpy(weights), "the CSC's weights")
        self.weights = EdgeValues(torch.from_numpy(np.ascontiguousarray(weights)), placement, device)
        self.sums = EdgeValues(torch.from_numpy(prefix_sums(indptr, weights)), placement, device)

    @staticmethod
    def check_fanout(fanout: int, replace: bool) -> None:
        """Raise ValueError for a fanout the weighted kernel cannot pick without replacement (above
        :data:`~dgl_zerocopy.cuda.sampling.temporal.MAX_WEIGHTED_FANOUT`)."""
        temporal.check_weighted(fanout, replace, torch.empty(0, dtype=torch.float64), torch.empty(0, dtype=torch.float64))

    def count(self, fanout: int, replace: bool, backend: str) -> Callable[[torch.Tensor, torch.Tensor], None]:
        """A ``count``: each destination's number of weighted picks (one launch)."""
        _backend_check(backend, "weighted sampling")

        def count(bounds: torch.Tensor, out_indptr: torch.Tensor) -> None:
            temporal.count_weighted(bounds, self.sums.tensor, fanout, replace, out_indptr, backend=backend)

        return count

    def pick(self, seed: int, backend: str) -> Callable[[CSCPlan, torch.Tensor], None]:
        """A ``pick``: the weighted picks of a plan made with :meth:`count` (one launch)."""
        _backend_check(backend, "weighted sampling")

        def pick(plan: CSCPlan, pos: torch.Tensor) -> None:
            weights, sums = self.weights.tensor, self.sums.tensor
            temporal.pick_weighted_into(plan.bounds, weights, sums, plan.out_indptr, plan.fanout, plan.replace, seed, pos, backend=backend)

        return pick

    def close(self) -> None:
        self.weights.close()
        self.sums.close()


def _numpy(values: Any) -> np.ndarray:
    return values.numpy() if isinstance(values, torch.Tensor) else np.asarray(values)


# -- disjoint trees: a node of tree t is the key t * num_nodes + node, numbered by the relabelling kernels ----------


def seed_keys(seeds: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """int64 keys of the seeds, seed ``i`` the root of tree ``i`` (a seed given twice roots two trees)."""
    return torch.arange(len(seeds), device=seeds.device) * num_nodes + seeds.long()


def pick_keys(src: torch.Tensor, out_indptr: torch.Tensor, trees: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """The keys of a layer's picks (``src``: ``capacity`` node ids, -1 in unused slots): each in its
    destination's tree (``trees``: one per destination of ``out_indptr``); -1 stays -1. No read back."""
    if src.numel() == 0 or trees.numel() == 0:
        return src.long()
    slot = torch.arange(src.numel(), device=src.device)
    owner = (torch.searchsorted(out_indptr, slot, right=True) - 1).clamp_(0, trees.numel() - 1)
    return torch.where(src >= 0, trees[owner] * num_nodes + src, -1)


def split_keys(keys: torch.Tensor, num_nodes: int, num_trees: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(node ids, trees)`` of a buffer of keys whose tail is unused (its trees clamped into range, so that
    reading a per-tree value there stays inside the array)."""
    trees = torch.div(keys, num_nodes, rounding_mode="floor").clamp_(0, max(num_trees - 1, 0))
    return keys.remainder(num_nodes), trees
