"""``sample_csc``: uniform neighbour sampling of one layer from an in-edge CSC, on three backends.

The contract (``/tmp/team/sampling_contract.md``, docs/kernels.md "Neighbour sampling"): per seed
node, ``min(deg, fanout)`` distinct in-edges without replacement, ``fanout`` draws with
replacement (none for an isolated node), every in-edge at ``fanout == -1``; the picks a pure
function of ``(seed, position in seeds, draw index, deg)``, so the backends ``"cuda"``,
``"emulator"`` and ``"reference"`` return identical results.
"""

from __future__ import annotations

import operator
from typing import NamedTuple

import torch

__all__ = ["BACKENDS", "SampledCSC", "sample_csc"]

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
    try:
        seed = operator.index(seed)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"seed must be an int in [0, 2**64), but got {seed!r}") from None
    if not 0 <= seed < 1 << 64:
        raise ValueError(f"seed must be in [0, 2**64), but got {seed}; take it modulo 2**64")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, but got {backend!r}")
    return fanout, replace, seed


def check_seed_range(seeds: torch.Tensor, num_nodes: int) -> None:
    """Raise ``IndexError`` naming the first seed outside ``[0, num_nodes)`` (CPU tensors)."""
    if len(seeds) == 0:
        return
    bad = (seeds < 0) | (seeds >= num_nodes)
    if bool(bad.any()):
        value = int(seeds[bad.nonzero()[0, 0]])
        raise IndexError(
            f"seed node id {value} is out of range for a CSC of {num_nodes} nodes (indptr has {num_nodes + 1} entries); pass node ids in [0, {num_nodes})"
        )


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
    for name, tensor in (("indptr", indptr), ("indices", indices), ("seeds", seeds)):
        if tensor.device.type != "cpu":
            raise ValueError(f"backend {backend!r} runs on the CPU, but {name} is on {tensor.device}; pass CPU tensors (.cpu()) or use backend='cuda'")
    indptr, indices, seeds = indptr.contiguous(), indices.contiguous(), seeds.contiguous()
    check_seed_range(seeds, len(indptr) - 1)
    if backend == "emulator":
        from dgl_zerocopy.cuda.sampling.emulator import emulate_sample

        return SampledCSC(*emulate_sample(indptr, indices, seeds, fanout, replace=replace, seed=seed))
    from dgl_zerocopy.cuda.sampling.reference import sample_reference

    return SampledCSC(*sample_reference(indptr, indices, seeds, fanout, replace, seed))
