"""Launch plan of the sampling kernels (``kernels/sample.cu``) and the passes that run them.

:func:`run_passes` is the one driver of the four passes (bounds, count, pick, fetch) and the scan
between them, for the GPU launcher and the CPU emulator alike: both hand it a ``launch(step,
args)`` callable that runs one kernel, and the torch operations in between (the scan, the one
read of the total, the allocations) run on the tensors' device. So the emulator runs the GPU's
grids, blocks, arguments and host logic, not a copy of them. Pure Python and torch: no CUDA needed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from dgl_zerocopy.cuda.sampling import instantiations

__all__ = ["BLOCK", "MAX_THREADS_PER_SM", "PICK_BLOCK", "Step", "grid_for", "run_passes"]

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
    """Sample with the kernels of ``kernels/sample.cu``; the outputs on ``seeds``' device.

    ``indptr`` and ``indices`` must be readable by the kernels (device memory or pinned host
    memory for the GPU; any CPU memory for the emulator), contiguous, arguments checked
    (:func:`~dgl_zerocopy.cuda.sampling.api.sample_csc`). ``csc_addresses``: the addresses the
    kernels read them at (default their ``data_ptr()``; the GPU's mapping of pinned host memory).
    One host synchronisation: the total and the bad-seed flag, read together after the scan.

    Raises:
        IndexError: a seed outside ``[0, len(indptr) - 1)`` (found by the bounds pass).
    """
    device = seeds.device
    num_seeds = len(seeds)
    num_nodes = len(indptr) - 1
    long = dict(dtype=torch.int64, device=device)
    bounds = torch.empty(2 * num_seeds, **long)
    counts = torch.empty(num_seeds, **long)
    bad = torch.full((1,), -1, **long)
    out_indptr = torch.zeros(num_seeds + 1, **long)
    if num_seeds == 0:  # nothing to launch, nothing to read back
        return out_indptr, torch.empty(0, dtype=indices.dtype, device=device), torch.empty(0, **long)
    indptr_arg, indices_arg = (_ptr(indptr), _ptr(indices)) if csc_addresses is None else (("ptr", csc_addresses[0]), ("ptr", csc_addresses[1]))
    launch(
        Step(
            instantiations.bounds_name(indptr.element_size(), seeds.element_size()),
            grid_for(2 * num_seeds, BLOCK, num_sms=num_sms, max_blocks=max_blocks),
            BLOCK,
            (indptr_arg, ("i64", num_nodes), _ptr(seeds), ("i64", num_seeds), _ptr(bounds), _ptr(bad)),
        )
    )
    launch(
        Step(
            instantiations.count_name(),
            grid_for(num_seeds, BLOCK, num_sms=num_sms, max_blocks=max_blocks),
            BLOCK,
            (_ptr(bounds), ("i64", num_seeds), ("i32", fanout), ("i32", int(replace)), _ptr(counts)),
        )
    )
    torch.cumsum(counts, 0, out=out_indptr[1:])
    total, bad_position = torch.stack((out_indptr[-1], bad[0])).tolist()  # the one host read
    if bad_position >= 0:
        value = int(seeds[bad_position])
        raise IndexError(
            f"seed node id {value} is out of range for a CSC of {num_nodes} nodes (indptr has {num_nodes + 1} entries); pass node ids in [0, {num_nodes})"
        )
    pos = torch.empty(total, **long)
    src = torch.empty(total, dtype=indices.dtype, device=device)
    if total == 0:
        return out_indptr, src, pos
    flags = (("i32", fanout), ("i32", int(replace)))
    if fanout != -1:
        launch(
            Step(
                instantiations.pick_name(),
                grid_for(num_seeds, PICK_BLOCK, num_sms=num_sms, max_blocks=max_blocks),
                PICK_BLOCK,
                (_ptr(bounds), _ptr(out_indptr), ("i64", num_seeds), *flags, ("u64", seed), _ptr(pos)),
            )
        )
    name = instantiations.fetch_name(indices.element_size(), fetch_variant)
    if fetch_variant == "flat":
        grid, size = grid_for(total, BLOCK, num_sms=num_sms, max_blocks=max_blocks), ("i64", total)
    else:  # per_seed: every lane loops as long as the largest count (the model only)
        grid, size = grid_for(num_seeds, BLOCK, num_sms=num_sms, max_blocks=max_blocks), ("i64", int(counts.max()))
    args = (indices_arg, _ptr(bounds), _ptr(out_indptr), ("i64", num_seeds), size, *flags, _ptr(pos), _ptr(src))
    launch(Step(name, grid, BLOCK, args))
    return out_indptr, src, pos
