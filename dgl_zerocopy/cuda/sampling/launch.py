"""Launch plan of the sampling kernels (``kernels/sample.cu``) and the passes that run them.

:func:`plan_passes` (bounds, count, and the scan of the counts) and :func:`pick_and_fetch` (pick,
fetch) are the one driver of the four passes, for the GPU launcher and the CPU emulator alike: both
hand them a ``launch(step)`` callable that runs one kernel, and the torch operations in between
(the scan, the allocations) run on the tensors' device. So the emulator runs the GPU's grids,
blocks, arguments and host logic, not a copy of them. Neither reads anything back: the outputs
are sized by a capacity the caller knows, the kernels read the total on the device.
:func:`run_passes` joins them with the one read of the total between them (exact sizes).
Pure Python and torch: no CUDA needed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch

from dgl_zerocopy.cuda.sampling import instantiations

__all__ = [
    "BLOCK",
    "MAX_THREADS_PER_SM",
    "PICK_BLOCK",
    "CSCPlan",
    "Relabelled",
    "Step",
    "bad_seed_error",
    "grid_for",
    "pick_and_fetch",
    "plan_passes",
    "relabel_passes",
    "run_passes",
]

#: Threads per block of the passes that read the CSC (bounds, fetch) and of the count pass.
BLOCK = 256
#: Threads per block of the pick pass: a thread per seed doing up to fanout draws, so smaller
#: blocks spread a batch of 1024 seeds over 16 SMs rather than 4.
PICK_BLOCK = 64
#: Resident threads per SM on sm_70 .. sm_100: one full wave of a grid-stride kernel.
MAX_THREADS_PER_SM = 2048

#: One kernel argument: (kind, value); kind ``"ptr"`` (an address), ``"i64"``, ``"i32"`` or ``"u64"``.
KernelArg = tuple[str, int]


@dataclass(frozen=True)
class Step:
    """One kernel launch of a sampling pass.

    Attributes:
        kernel: the instantiation's name expression (``instantiations``), e.g. ``"sample_fetch<int>"``.
        grid, block: blocks and threads per block; ``grid == 0``: nothing to launch.
        args: the kernel's arguments in signature order.
    """

    kernel: str
    grid: int
    block: int
    args: tuple[KernelArg, ...]


def grid_for(work: int, block: int, *, num_sms: int, max_blocks: int | None = None) -> int:
    """Blocks for ``work`` threads' worth of items: enough for all, at most one full wave
    (``num_sms * 2048 / block``) and ``max_blocks``; 0 for no work. The kernels are grid-stride."""
    if work <= 0:
        return 0
    grid = min(-(-work // block), max(1, num_sms * (MAX_THREADS_PER_SM // block)))
    return max(1, min(grid, max_blocks)) if max_blocks is not None else grid


def _ptr(tensor: torch.Tensor) -> KernelArg:
    return ("ptr", int(tensor.data_ptr()))


class CSCPlan(NamedTuple):
    """Passes 1 and 2 and the scan, run for ``S`` seeds (:func:`plan_passes`), tensors on the seeds'
    device; what passes 3 and 4 need besides ``indices``.

    Attributes:
        bounds: int64 ``2 * S``: seed ``i``'s CSC range ``[bounds[2i], bounds[2i + 1])`` (empty for
            a bad or skipped seed).
        out_indptr: int64 ``S + 1``: the output offsets; ``out_indptr[-1]`` is the total.
        bad: int64 ``(1,)``: the position of a seed outside ``[0, N)``, or -1.
        fanout, replace: what the counts were computed for (the picks must use the same).
    """

    bounds: torch.Tensor
    out_indptr: torch.Tensor
    bad: torch.Tensor
    fanout: int
    replace: bool

    def head(self, n: int) -> CSCPlan:
        """The plan of the first ``n`` seeds (views): equal to planning them alone when the seeds
        past ``n`` got no picks (skipped by ``num_valid``, as a buffer's unused tail is)."""
        if not 0 <= n <= len(self.out_indptr) - 1:
            raise ValueError(f"n must be in [0, {len(self.out_indptr) - 1}] (the planned seeds), but got {n}")
        return self._replace(bounds=self.bounds[: 2 * n], out_indptr=self.out_indptr[: n + 1])


def plan_passes(
    indptr: torch.Tensor,
    seeds: torch.Tensor,
    fanout: int,
    replace: bool,
    launch: Callable[[Step], None],
    *,
    num_sms: int,
    max_blocks: int | None = None,
    indptr_address: int | None = None,
    num_valid: torch.Tensor | None = None,
    bad: torch.Tensor | None = None,
    narrow: Callable[[torch.Tensor], None] | None = None,
    count: Callable[[torch.Tensor, torch.Tensor], None] | None = None,
) -> CSCPlan:
    """The bounds and count passes and the in-place scan of the counts (three launches), enqueued;
    nothing read back.

    ``narrow``: None, or ``narrow(bounds)``, run after the bounds pass, shrinking each seed's range in
    place (a time cut, destinations to skip); ``count``: None (the uniform count pass), or
    ``count(bounds, out_indptr)`` writing ``out_indptr[0] = 0`` and seed ``i``'s picks at ``i + 1``
    (weighted counts). Both enqueue on the seeds' device and read nothing back.

    ``num_valid``: None, or an int64 tensor of one element on the seeds' device: only that many
    leading seeds are sampled, the others get no picks (and are never read: a buffer may be
    longer than its valid prefix). ``indptr_address``: the address the kernels read ``indptr`` at
    (default its ``data_ptr()``). ``bad``: the int64 ``(1,)`` flag to report a bad seed in, holding
    -1 (a view into a caller's buffer of sizes saves its fill); default a new one.
    """
    device = seeds.device
    num_seeds = len(seeds)
    long = dict(dtype=torch.int64, device=device)
    bounds = torch.empty(2 * num_seeds, **long)
    bad = torch.full((1,), -1, **long) if bad is None else bad
    if num_seeds == 0:  # nothing to launch
        return CSCPlan(bounds, torch.zeros(1, **long), bad, fanout, replace)
    out_indptr = torch.empty(num_seeds + 1, **long)  # the count pass writes every entry
    indptr_arg = ("ptr", int(indptr.data_ptr()) if indptr_address is None else indptr_address)
    limit = ("ptr", 0) if num_valid is None else _ptr(num_valid)
    launch(
        Step(
            instantiations.bounds_name(indptr.element_size(), seeds.element_size()),
            grid_for(2 * num_seeds, BLOCK, num_sms=num_sms, max_blocks=max_blocks),
            BLOCK,
            (indptr_arg, ("i64", len(indptr) - 1), _ptr(seeds), ("i64", num_seeds), limit, _ptr(bounds), _ptr(bad)),
        )
    )
    if narrow is not None:
        narrow(bounds)
    if count is not None:
        count(bounds, out_indptr)
    else:
        launch(
            Step(
                instantiations.count_name(),
                grid_for(num_seeds, BLOCK, num_sms=num_sms, max_blocks=max_blocks),
                BLOCK,
                (_ptr(bounds), ("i64", num_seeds), ("i32", fanout), ("i32", int(replace)), _ptr(out_indptr)),
            )
        )
    out_indptr.cumsum_(0)
    return CSCPlan(bounds, out_indptr, bad, fanout, replace)


def pick_and_fetch(
    plan: CSCPlan,
    indices: torch.Tensor,
    seed: int,
    capacity: int,
    launch: Callable[[Step], None],
    *,
    num_sms: int,
    max_blocks: int | None = None,
    indices_address: int | None = None,
    fetch_variant: str = "flat",
    edge_ids: torch.Tensor | None = None,
    pick: Callable[[CSCPlan, torch.Tensor], None] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Passes 3 and 4 over ``plan``: ``(src, pos)`` of ``capacity`` entries, the first
    ``plan.out_indptr[-1]`` the picks, the others -1 (all -1 when the total exceeds ``capacity``).
    Reads nothing back: the kernels read the total on the device. The per-seed fetch (the model's
    baseline) needs ``capacity`` equal to the total and reads the largest count back.
    ``edge_ids``: None, or each CSC position's edge id (int32/int64, beside the plan, contiguous):
    then ``pos`` holds the picks' edge ids (the flat fetch only). ``pick``: None (the uniform pick
    pass), or ``pick(plan, pos)`` writing each seed's picked positions, sorted, at ``pos[out_indptr[i]:]``
    (weighted picks; the fetch then reads them as the uniform pass's)."""
    device = plan.bounds.device
    num_seeds = len(plan.out_indptr) - 1
    long = dict(dtype=torch.int64, device=device)
    pos = torch.empty(capacity, **long)
    src = torch.empty(capacity, dtype=indices.dtype, device=device)
    if capacity == 0:
        return src, pos
    indices_arg = ("ptr", int(indices.data_ptr()) if indices_address is None else indices_address)
    flags = (("i32", plan.fanout), ("i32", int(plan.replace)))
    bounds, out_indptr = _ptr(plan.bounds), _ptr(plan.out_indptr)
    if plan.fanout != -1 and pick is not None:
        pick(plan, pos)
    elif plan.fanout != -1:
        launch(
            Step(
                instantiations.pick_name(),
                grid_for(num_seeds, PICK_BLOCK, num_sms=num_sms, max_blocks=max_blocks),
                PICK_BLOCK,
                (bounds, out_indptr, ("i64", num_seeds), ("i64", capacity), *flags, ("u64", seed), _ptr(pos)),
            )
        )
    name = instantiations.fetch_name(indices.element_size(), fetch_variant)
    if fetch_variant == "flat":
        grid, size = grid_for(capacity, BLOCK, num_sms=num_sms, max_blocks=max_blocks), ("i64", capacity)
        ids = (("ptr", 0), ("i32", 8)) if edge_ids is None else (_ptr(edge_ids), ("i32", edge_ids.element_size()))
    else:  # per_seed: every lane loops as long as the largest count (the model only)
        if edge_ids is not None:
            raise ValueError("edge_ids= is read by the flat fetch only; pass fetch_variant='flat'")
        grid, size = grid_for(num_seeds, BLOCK, num_sms=num_sms, max_blocks=max_blocks), ("i64", int(plan.out_indptr.diff().max()))
        ids = ()
    launch(Step(name, grid, BLOCK, (indices_arg, bounds, out_indptr, ("i64", num_seeds), size, *flags, *ids, _ptr(pos), _ptr(src))))
    return src, pos


def bad_seed_error(value: int, num_nodes: int) -> IndexError:
    """The error for seed node id ``value`` outside ``[0, num_nodes)``, every backend's words."""
    return IndexError(
        f"seed node id {value} is out of range for a CSC of {num_nodes} nodes (indptr has {num_nodes + 1} entries); pass node ids in [0, {num_nodes})"
    )


def run_passes(
    indptr: torch.Tensor,
    indices: torch.Tensor,
    seeds: torch.Tensor,
    fanout: int,
    replace: bool,
    seed: int,
    launch: Callable[[Step], None],
    *,
    num_sms: int,
    max_blocks: int | None = None,
    fetch_variant: str = "flat",
    csc_addresses: tuple[int, int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sample with the kernels of ``kernels/sample.cu``; the outputs on ``seeds``' device, sized exactly.

    ``indptr`` and ``indices`` must be readable by the kernels (device memory or pinned host
    memory for the GPU; any CPU memory for the emulator), contiguous, arguments checked
    (:func:`~dgl_zerocopy.cuda.sampling.api.sample_csc`). ``csc_addresses``: the addresses the
    kernels read them at (default their ``data_ptr()``; the GPU's mapping of pinned host memory).
    One host synchronisation: the total and the bad-seed flag, read together after the scan.

    Raises:
        IndexError: a seed outside ``[0, len(indptr) - 1)`` (found by the bounds pass).
    """
    addresses = csc_addresses or (None, None)
    kw = dict(num_sms=num_sms, max_blocks=max_blocks)
    plan = plan_passes(indptr, seeds, fanout, replace, launch, indptr_address=addresses[0], **kw)
    if len(seeds) == 0:  # nothing launched, nothing to read back
        return plan.out_indptr, torch.empty(0, dtype=indices.dtype, device=seeds.device), torch.empty(0, dtype=torch.int64, device=seeds.device)
    total, bad_position = torch.stack((plan.out_indptr[-1], plan.bad[0])).tolist()  # the one host read
    if bad_position >= 0:
        raise bad_seed_error(int(seeds[bad_position]), len(indptr) - 1)
    src, pos = pick_and_fetch(plan, indices, seed, total, launch, indices_address=addresses[1], fetch_variant=fetch_variant, **kw)
    return plan.out_indptr, src, pos


class Relabelled(NamedTuple):
    """One layer relabelled (:func:`relabel_passes`), tensors on the layer's device.

    Attributes:
        nodes: the destinations' dtype, ``D + S`` entries: the block's source nodes first (their
            count in ``sizes[1]``), the rest unspecified.
        local: that dtype, ``S``: each pick as an index into ``nodes``; -1 for an unused slot.
        indptr: the block's offsets (``num_seeds + 1``) in that dtype (``out_indptr`` itself for int64).
        sizes: the int64 ``(2,)`` given: ``[total picks, number of source nodes]``.
    """

    nodes: torch.Tensor
    local: torch.Tensor
    indptr: torch.Tensor
    sizes: torch.Tensor


def table_slots(entries: int) -> int:
    """Slots of the relabelling's hash table for ``entries`` candidates: a power of two, at least twice as many."""
    return 1 << max(1, (2 * entries - 1).bit_length())


def relabel_passes(
    dst: torch.Tensor,
    dst_count: torch.Tensor | None,
    src: torch.Tensor,
    out_indptr: torch.Tensor,
    sizes: torch.Tensor,
    launch: Callable[[Step], None],
    *,
    num_sms: int,
    max_blocks: int | None = None,
    num_nodes: int | None = None,
) -> Relabelled:
    """DGL's ``to_block`` numbering of a layer with the relabelling kernels of ``kernels/sample.cu``:
    a table fill, insert, mark, a scan, write (five launches); nothing read back. ``num_nodes``: the
    graph's node count, if known: the table holds twice the distinct ids, at most that many.

    ``dst``: the destinations (int32/int64; the first ``dst_count`` entries, a device int64 ``(1,)``,
    or all when None); ``src``: the picks in the graph's id dtype (-1: an unused slot);
    ``out_indptr``: the layer's offsets (int64); ``sizes``: an int64 ``(2,)`` on the device that
    receives ``[total picks, number of source nodes]``. All on one device, contiguous.
    """
    device = dst.device
    num_dst, num_src = len(dst), len(src)
    slots = table_slots(min(num_dst + num_src, num_nodes) if num_nodes is not None else num_dst + num_src)
    table = torch.full((2 * slots,), -1, dtype=torch.int64, device=device)
    nodes = torch.empty(num_dst + num_src, dtype=dst.dtype, device=device)
    local = torch.empty(num_src, dtype=dst.dtype, device=device)
    is_new = torch.empty(num_src, dtype=torch.int64, device=device)
    indptr = out_indptr if dst.dtype == torch.int64 else torch.empty(len(out_indptr), dtype=dst.dtype, device=device)
    insert, mark, write = instantiations.relabel_names(dst.element_size(), src.element_size())
    count = ("ptr", 0) if dst_count is None else _ptr(dst_count)
    mask = ("i64", slots - 1)
    kw = dict(num_sms=num_sms, max_blocks=max_blocks)
    launch(Step(insert, grid_for(num_dst + num_src, BLOCK, **kw), BLOCK, (_ptr(dst), ("i64", num_dst), count, _ptr(src), ("i64", num_src), _ptr(table), mask)))
    launch(Step(mark, grid_for(num_src, BLOCK, **kw), BLOCK, (_ptr(src), ("i64", num_src), ("i64", num_dst), _ptr(table), mask, _ptr(is_new))))
    rank = torch.cumsum(is_new, 0) if num_src else is_new
    block_indptr = ("ptr", 0) if indptr is out_indptr else _ptr(indptr)
    work = max(num_dst, num_src, len(out_indptr))
    args = (_ptr(dst), ("i64", num_dst), count, _ptr(src), ("i64", num_src), _ptr(table), mask, _ptr(rank), _ptr(out_indptr), ("i64", len(out_indptr) - 1))
    launch(Step(write, grid_for(work, BLOCK, **kw), BLOCK, (*args, block_indptr, _ptr(nodes), _ptr(local), _ptr(sizes))))
    return Relabelled(nodes, local, indptr, sizes)
