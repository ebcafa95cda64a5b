"""``sample_csc``: uniform neighbour sampling of one layer from an in-edge CSC, on three backends.

The contract (``/tmp/team/sampling_contract.md``, docs/kernels.md "Neighbour sampling"): per seed
node, ``min(deg, fanout)`` distinct in-edges without replacement, ``fanout`` draws with
replacement (none for an isolated node), every in-edge at ``fanout == -1``; the picks a pure
function of ``(seed, position in seeds, draw index, deg)``, so the backends ``"cuda"``,
``"emulator"`` and ``"reference"`` return identical results.

:func:`sample_csc` reads the total back to size its outputs (one host synchronisation).
:func:`plan_csc` and :func:`sample_csc_deferred` read nothing: for a caller that reads the sizes
together with its own values (the sampler reads one per layer), the outputs sized by a capacity
it knows and the total left on the device.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import NamedTuple

import torch

from dgl_zerocopy.cuda.sampling.launch import CSCPlan, Relabelled, bad_seed_error

__all__ = ["BACKENDS", "CSCPlan", "DeferredCSC", "Relabelled", "SampledCSC", "plan_csc", "relabel_layer", "sample_csc", "sample_csc_deferred"]

BACKENDS = ("cuda", "emulator", "reference")
_ID_DTYPES = (torch.int32, torch.int64)


class SampledCSC(NamedTuple):
    """One sampled layer, in CSC form over the seeds (all on the device that ran the sampler).

    Attributes:
        indptr: int64, ``len(seeds) + 1``: seed ``i``'s picks are ``[indptr[i], indptr[i + 1])``.
        src: the picked source node ids (``indices``' dtype), each seed's in increasing position.
        pos: int64, the CSC position of each pick (``eids[pos]`` gives edge ids when asked for).
    """

    indptr: torch.Tensor
    src: torch.Tensor
    pos: torch.Tensor


class DeferredCSC(NamedTuple):
    """One sampled layer whose total is still on the device (:func:`sample_csc_deferred`).

    Attributes:
        indptr: int64, ``len(seeds) + 1``, exact; ``indptr[-1]`` is the total.
        src, pos: ``capacity`` entries: the first ``indptr[-1]`` as :class:`SampledCSC`'s, the
            others -1 (all -1 if the total exceeds the capacity).
        bad: int64 ``(1,)``: the position in ``seeds`` of a seed outside ``[0, N)`` (one of them,
            which one unspecified), or -1; no backend raises for it here.
    """

    indptr: torch.Tensor
    src: torch.Tensor
    pos: torch.Tensor
    bad: torch.Tensor

    def sizes(self) -> torch.Tensor:
        """``[total, bad position]`` as one int64 tensor on the device, to read with other values."""
        return torch.cat((self.indptr[-1:], self.bad))

    def trimmed(self, total: int) -> SampledCSC:
        """The :class:`SampledCSC` once the total is known on the host (views, no copy)."""
        if total > len(self.src):
            raise ValueError(f"the total {total} exceeds the capacity {len(self.src)}: nothing was sampled; pass a capacity >= the total")
        return SampledCSC(self.indptr, self.src[:total], self.pos[:total])


def _check_ids(name: str, tensor: object) -> torch.Tensor:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, but got {type(tensor).__name__}")
    if tensor.dim() != 1:
        raise ValueError(f"{name} must be 1-D, but got shape {tuple(tensor.shape)}")
    if tensor.dtype not in _ID_DTYPES:
        raise TypeError(f"{name} must be int32 or int64, but got {tensor.dtype}; convert it with .long()")
    return tensor


def _check_scalars(fanout: object, replace: object, seed: object, backend: object) -> tuple[int, bool, int]:
    if isinstance(fanout, bool) or not isinstance(fanout, int) or not (fanout == -1 or fanout >= 1):
        raise ValueError(f"fanout must be an int >= 1 or -1 (every in-edge), but got {fanout!r}")
    if not isinstance(replace, bool):
        raise TypeError(f"replace must be a bool, but got {replace!r}")
    if fanout == -1:
        replace = False  # every in-edge, with or without: one meaning, one plan
    try:
        seed = operator.index(seed)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"seed must be an int in [0, 2**64), but got {seed!r}") from None
    if not 0 <= seed < 1 << 64:
        raise ValueError(f"seed must be in [0, 2**64), but got {seed}; take it modulo 2**64")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, but got {backend!r}")
    return fanout, replace, seed


def _check_num_valid(num_valid: object, seeds: torch.Tensor) -> torch.Tensor | None:
    if num_valid is None:
        return None
    if not isinstance(num_valid, torch.Tensor) or num_valid.dtype != torch.int64 or num_valid.numel() != 1:
        raise TypeError(f"num_valid must be None or an int64 tensor of one element (a count on the device), but got {num_valid!r}")
    if num_valid.device != seeds.device:
        raise ValueError(f"num_valid is on {num_valid.device} but the seeds are on {seeds.device}; put it beside the seeds")
    return num_valid.reshape(1).contiguous()


def _check_cpu(backend: str, **tensors: torch.Tensor) -> None:
    for name, tensor in tensors.items():
        if tensor.device.type != "cpu":
            raise ValueError(f"backend {backend!r} runs on the CPU, but {name} is on {tensor.device}; pass CPU tensors (.cpu()) or use backend='cuda'")


def check_seed_range(seeds: torch.Tensor, num_nodes: int) -> None:
    """Raise ``IndexError`` naming the first seed outside ``[0, num_nodes)`` (CPU tensors)."""
    if len(seeds) == 0:
        return
    bad = (seeds < 0) | (seeds >= num_nodes)
    if bool(bad.any()):
        value = int(seeds[bad.nonzero()[0, 0]])
        raise bad_seed_error(value, num_nodes)


def sample_csc(
    indptr: torch.Tensor, indices: torch.Tensor, seeds: torch.Tensor, fanout: int, *, replace: bool = False, seed: int = 0, backend: str = "cuda"
) -> SampledCSC:
    """Sample up to ``fanout`` in-edges of every node of ``seeds`` from the CSC ``(indptr, indices)``.

    Args:
        indptr: 1-D int32/int64, ``N + 1`` offsets. For ``"cuda"``: pinned host memory (read
            zero-copy) or on the seeds' GPU; otherwise on the CPU.
        indices: 1-D int32/int64, the source node of each CSC position; placed as ``indptr``.
        seeds: 1-D int32/int64 node ids, on the device that runs the sampler (CPU for
            ``"emulator"`` and ``"reference"``). Duplicates are sampled independently.
        fanout: picks per seed (an int >= 1), or -1 for every in-edge.
        replace: uniform with replacement (``fanout`` picks for every seed with in-edges).
        seed: the RNG key, an int in ``[0, 2**64)``; equal arguments give equal picks on every backend.
        backend: ``"cuda"`` (CuPy, NVRTC), ``"emulator"`` (the CUDA source built with g++, on the
            CPU) or ``"reference"`` (NumPy).

    Returns:
        :class:`SampledCSC` on the seeds' device; each seed's picks sorted by CSC position.

    Raises:
        IndexError: a seed outside ``[0, N)`` (on CUDA found by the kernel, read with the total).
        TypeError / ValueError: an argument of the wrong type, dtype, shape, value or device.
    """
    fanout, replace, seed = _check_scalars(fanout, replace, seed, backend)
    indptr = _check_ids("indptr", indptr)
    indices = _check_ids("indices", indices)
    seeds = _check_ids("seeds", seeds)
    if len(indptr) == 0:
        raise ValueError("indptr must have N + 1 >= 1 entries (CSC offsets), but it is empty")
    if indptr.device.type == "cpu" and int(indptr[-1]) > len(indices):  # host memory: no sync
        raise ValueError(f"indptr[-1] is {int(indptr[-1])} but indices has only {len(indices)} entries; pass a matching CSC")
    if backend == "cuda":
        from dgl_zerocopy.cuda.sampling.launcher import launch_sample

        return SampledCSC(*launch_sample(indptr, indices, seeds, fanout, replace=replace, seed=seed))
    _check_cpu(backend, indptr=indptr, indices=indices, seeds=seeds)
    indptr, indices, seeds = indptr.contiguous(), indices.contiguous(), seeds.contiguous()
    check_seed_range(seeds, len(indptr) - 1)
    if backend == "emulator":
        from dgl_zerocopy.cuda.sampling.emulator import emulate_sample

        return SampledCSC(*emulate_sample(indptr, indices, seeds, fanout, replace=replace, seed=seed))
    from dgl_zerocopy.cuda.sampling.reference import sample_reference

    return SampledCSC(*sample_reference(indptr, indices, seeds, fanout, replace, seed))


def plan_csc(
    indptr: torch.Tensor,
    seeds: torch.Tensor,
    fanout: int,
    *,
    replace: bool = False,
    num_valid: torch.Tensor | None = None,
    backend: str = "cuda",
    bad: torch.Tensor | None = None,
    narrow: Callable[[torch.Tensor], None] | None = None,
    count: Callable[[torch.Tensor, torch.Tensor], None] | None = None,
) -> CSCPlan:
    """The first half of :func:`sample_csc` for ``seeds``: their CSC ranges, pick counts and output
    offsets (:class:`CSCPlan`), enqueued on the seeds' device; no host read. ``plan.out_indptr[-1]``
    (the total) and ``plan.bad`` stay on the device for the caller to read with its own values;
    :func:`sample_csc_deferred` takes the plan (or its :meth:`~CSCPlan.head`) to finish.

    Args:
        indptr, seeds, fanout, replace, backend: as for :func:`sample_csc`.
        num_valid: None, or an int64 tensor of one element on the seeds' device: only that many
            leading entries of ``seeds`` are seeds; the others get no picks and are never read
            (a buffer sized for more than it holds, whose count is on the device).
        bad: None, or an int64 tensor of one element on the seeds' device holding -1, to report a
            bad seed in (it becomes ``plan.bad``; a view into the caller's sizes saves a fill).
        narrow: None, or ``narrow(bounds)``: shrinks the seeds' CSC ranges in place after the bounds
            pass (a time cut; destinations to skip), on the seeds' device, reading nothing back.
        count: None (uniform counts), or ``count(bounds, out_indptr)``: writes 0 and then each seed's
            number of picks (weighted counts); the offsets are its scan. ``"cuda"``/``"emulator"`` only.

    Raises:
        TypeError / ValueError: an argument of the wrong type, dtype, shape, value or device.
        (A bad seed is reported in ``plan.bad``, not raised.)
    """
    fanout, replace, _ = _check_scalars(fanout, replace, 0, backend)
    indptr, seeds = _check_ids("indptr", indptr), _check_ids("seeds", seeds)
    if len(indptr) == 0:
        raise ValueError("indptr must have N + 1 >= 1 entries (CSC offsets), but it is empty")
    num_valid = _check_num_valid(num_valid, seeds)
    if backend == "cuda":
        from dgl_zerocopy.cuda.sampling.launcher import launch_plan

        return launch_plan(indptr, seeds, fanout, replace, num_valid=num_valid, bad=bad, narrow=narrow, count=count)
    _check_cpu(backend, indptr=indptr, seeds=seeds)
    indptr, seeds = indptr.contiguous(), seeds.contiguous()
    if backend == "emulator":
        from dgl_zerocopy.cuda.sampling.emulator import emulate_plan

        return emulate_plan(indptr, seeds, fanout, replace, num_valid=num_valid, bad=bad, narrow=narrow, count=count)
    if count is not None:
        raise ValueError("count= (weighted counts) runs its kernels on backend 'cuda' or 'emulator', not 'reference'")
    from dgl_zerocopy.cuda.sampling.reference import reference_plan, reference_recount

    plan = reference_plan(indptr, seeds, fanout, replace, num_valid)
    if narrow is not None:
        narrow(plan.bounds)
        reference_recount(plan)
    if bad is not None:
        bad.copy_(plan.bad)
        plan = plan._replace(bad=bad)
    return plan


def sample_csc_deferred(
    indptr: torch.Tensor,
    indices: torch.Tensor,
    seeds: torch.Tensor,
    fanout: int,
    *,
    replace: bool = False,
    seed: int = 0,
    backend: str = "cuda",
    capacity: int | None = None,
    plan: CSCPlan | None = None,
    edge_ids: torch.Tensor | None = None,
    pick: Callable[[CSCPlan, torch.Tensor], None] | None = None,
) -> DeferredCSC:
    """:func:`sample_csc` without its host read: the outputs hold ``capacity`` entries, the picks
    first (``indptr[-1]`` of them, a count left on the device) and -1 after; a bad seed is reported
    in ``bad``, not raised. Equal arguments give :func:`sample_csc`'s picks on every backend.

    Args:
        indptr, indices, seeds, fanout, replace, seed, backend: as for :func:`sample_csc`; the
            CSC is trusted to be consistent (``indptr[-1] <= len(indices)``, checked by
            :func:`sample_csc` only: here it would cost a read).
        capacity: entries of ``src`` and ``pos``, at least the total: default
            ``len(seeds) * fanout`` (enough for any picks); required for ``fanout == -1`` (the
            total, e.g. ``plan.out_indptr[-1]`` read back). A smaller one gives no picks at all.
        plan: :func:`plan_csc` of these seeds over this CSC with this fanout and replace (its
            :meth:`~CSCPlan.head` when it was planned for a longer buffer); default: planned here.
        edge_ids: None, or the edge id of each CSC position (1-D int32/int64, on the seeds' device):
            then ``pos`` holds each pick's edge id (int64) instead of its position, read by the
            fetch pass (for a CSC rewritten after the call, whose positions would name other edges).
        pick: None (uniform picks), or ``pick(plan, pos)``: writes each seed's picked CSC positions,
            sorted, at ``pos[plan.out_indptr[i]:]`` (weighted picks); ``"cuda"``/``"emulator"`` only.

    Raises:
        TypeError / ValueError: an argument of the wrong type, dtype, shape, value or device, or a
        plan made for another fanout or number of seeds.
    """
    fanout, replace, seed = _check_scalars(fanout, replace, seed, backend)
    indices, seeds = _check_ids("indices", indices), _check_ids("seeds", seeds)
    if capacity is None:
        if fanout == -1:
            raise ValueError("fanout -1 needs capacity= (the total: every in-edge of the seeds, e.g. plan_csc(...).out_indptr[-1] read back)")
        capacity = len(seeds) * fanout
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
        raise ValueError(f"capacity must be an int >= 0, but got {capacity!r}")
    if plan is None:
        plan = plan_csc(indptr, seeds, fanout, replace=replace, backend=backend)
    elif not isinstance(plan, CSCPlan) or (plan.fanout, plan.replace, len(plan.out_indptr)) != (fanout, replace, len(seeds) + 1):
        got = (plan.fanout, plan.replace, len(plan.out_indptr) - 1) if isinstance(plan, CSCPlan) else type(plan).__name__
        raise ValueError(f"plan must be plan_csc(...) of these {len(seeds)} seeds with fanout={fanout}, replace={replace}, but got {got}")
    else:
        _check_ids("indptr", indptr)
    if edge_ids is not None:
        edge_ids = _check_ids("edge_ids", edge_ids).contiguous()
        if len(edge_ids) != len(indices):
            raise ValueError(f"edge_ids must hold one edge id per CSC position ({len(indices)}), but has {len(edge_ids)}")
    if backend == "cuda":
        from dgl_zerocopy.cuda.sampling.launcher import launch_pick_and_fetch

        src, pos = launch_pick_and_fetch(plan, indptr.element_size(), indices, seed, capacity, edge_ids=edge_ids, pick=pick)
    else:
        _check_cpu(backend, indices=indices, plan=plan.bounds)
        indices = indices.contiguous()
        if backend == "emulator":
            from dgl_zerocopy.cuda.sampling.emulator import emulate_pick_and_fetch

            src, pos = emulate_pick_and_fetch(plan, indices, seed, capacity, edge_ids=edge_ids, pick=pick)
        elif pick is not None:
            raise ValueError("pick= (weighted picks) runs its kernels on backend 'cuda' or 'emulator', not 'reference'")
        else:
            from dgl_zerocopy.cuda.sampling.reference import reference_pick_and_fetch

            src, pos = reference_pick_and_fetch(plan, indices, seed, capacity, edge_ids)
    return DeferredCSC(plan.out_indptr, src, pos, plan.bad)


def relabel_layer(
    dst: torch.Tensor,
    dst_count: torch.Tensor | None,
    src: torch.Tensor,
    out_indptr: torch.Tensor,
    sizes: torch.Tensor,
    *,
    backend: str = "cuda",
    num_nodes: int | None = None,
) -> Relabelled:
    """DGL's ``to_block`` numbering of one sampled layer, on the device, reading nothing back.

    Args:
        dst: 1-D int32/int64, the destinations (a buffer: only its first ``dst_count`` entries are).
        dst_count: None (every entry of ``dst``) or an int64 tensor of one element beside ``dst``.
        src: 1-D int32/int64, the picks (``sample_csc_deferred``'s ``src``: -1 in unused slots).
        out_indptr: the layer's int64 offsets (``len(seeds) + 1``; ``out_indptr[-1]`` the total).
        sizes: an int64 tensor of two elements beside ``dst``; receives ``[total, source node count]``.
        backend: ``"cuda"``, ``"emulator"`` or ``"reference"``; equal results on each.
        num_nodes: the graph's node count, if known (every id is below it): bounds the hash table
            by the distinct ids rather than by the candidates.

    Returns:
        :class:`~dgl_zerocopy.cuda.sampling.launch.Relabelled`: the source nodes (destinations
        first, then the picks' other nodes by first appearance), each pick's index among them, and
        the offsets, in ``dst``'s dtype.

    Raises:
        TypeError / ValueError: an argument of the wrong type, dtype, shape, device or backend.
    """
    dst, src = _check_ids("dst", dst).contiguous(), _check_ids("src", src).contiguous()
    dst_count = _check_num_valid(dst_count, dst)
    for name, tensor, length in (("out_indptr", out_indptr, None), ("sizes", sizes, 2)):
        if not isinstance(tensor, torch.Tensor) or tensor.dtype != torch.int64 or tensor.dim() != 1 or (length is not None and tensor.numel() != length):
            raise TypeError(f"{name} must be a 1-D int64 tensor{f' of {length} elements' if length else ''}, but got {tensor!r}")
    if len({t.device for t in (dst, src, out_indptr, sizes)}) != 1:
        raise ValueError(f"dst, src, out_indptr and sizes must share a device, but got {[str(t.device) for t in (dst, src, out_indptr, sizes)]}")
    if backend == "cuda":
        from dgl_zerocopy.cuda.sampling.launcher import launch_relabel

        return launch_relabel(dst, dst_count, src, out_indptr, sizes, num_nodes=num_nodes)
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, but got {backend!r}")
    _check_cpu(backend, dst=dst)
    if backend == "emulator":
        from dgl_zerocopy.cuda.sampling.emulator import emulate_relabel

        return emulate_relabel(dst, dst_count, src, out_indptr.contiguous(), sizes, num_nodes=num_nodes)
    from dgl_zerocopy.cuda.sampling.reference import reference_relabel

    return reference_relabel(dst, dst_count, src, out_indptr, sizes)
