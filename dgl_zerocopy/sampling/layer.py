"""One layer of neighbour sampling on a :class:`~.graph.SamplingGraph`: the checks every entry point
shares (device, seeds, RNG key; the fanout's is :func:`.fanout.check_fanout`) and the call of the kernel layer's ``sample_csc``.

Devices (``device=``): ``"cuda"`` (or ``"cuda:N"``, a ``torch.device``): the CUDA kernel on that
GPU; ``"emulator"``: the same kernel source compiled for the CPU by the gather emulator's build;
``"reference"``: the NumPy/torch twin. The three give identical picks for the same arguments.

:func:`sample_layer` reads its total back (one host read); :func:`plan_layer`,
:func:`sample_layer_deferred` and :func:`relabel_picks` read nothing: the sampler reads the sizes of
every layer together, once per batch (once more per fanout -1 layer, whose total sizes its picks).
"""

from __future__ import annotations

import contextlib
from typing import Any, NamedTuple

import numpy as np
import torch

from ..cuda.sampling import CSCPlan, DeferredCSC, Relabelled
from ..cuda.sampling.launch import bad_seed_error
from ..cuda.sampling.op_count import host_side
from .graph import SamplingGraph

CPU_BACKENDS = ("emulator", "reference")
_U64 = 2**64


class Picks(NamedTuple):
    """What one layer sampled, as ``sample_csc`` returns it: per seed ``i`` the picks
    ``src[indptr[i]:indptr[i + 1]]`` (int64 ``indptr``; sources in the graph's id dtype) and their CSC
    positions ``pos`` (int64), on the device that sampled."""

    indptr: torch.Tensor
    src: torch.Tensor
    pos: torch.Tensor


def resolve_device(device: Any) -> tuple[str, torch.device]:
    """``(backend, the device that runs it)`` for a ``device=`` argument; raises ValueError for an
    unknown one and RuntimeError for CUDA on a machine without it."""
    if isinstance(device, str) and device in CPU_BACKENDS:
        return device, torch.device("cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        resolved = None
    if resolved is None or resolved.type != "cuda":
        raise ValueError(f"device must be 'cuda' (or 'cuda:N'), 'emulator' or 'reference', but got {device!r}; 'emulator' runs the CUDA kernel on the CPU")
    if not torch.cuda.is_available():
        raise RuntimeError(
            f"device={device!r} samples on a CUDA GPU, but torch sees none (torch.cuda.is_available() is False); "
            f"use device='emulator' (the same kernel on the CPU) or DGL's CPU sampler"
        )
    return "cuda", torch.device("cuda", resolved.index if resolved.index is not None else torch.cuda.current_device())


def check_seed(seed: Any) -> int:
    """An RNG key given by the caller: an int (any, taken modulo 2**64)."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise TypeError(f"seed must be an int (or None: drawn from torch's generator), but got {type(seed).__name__}")
    return int(seed) % _U64


def draw_seed() -> int:
    """A fresh RNG key for the kernels, drawn from torch's default (CPU) generator: ``torch.manual_seed``
    makes the picks reproducible (``dgl.seed`` seeds DGL's own generator, which these kernels do not use)."""
    with host_side():  # torch's CPU generator: host work, never a device operation
        return int(torch.randint(0, 2**63 - 1, (), dtype=torch.int64))


def as_seeds(nodes: Any, graph: SamplingGraph, device: torch.device, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``nodes`` (a tensor, NumPy array, sequence or int of node ids) as a 1-D tensor in ``dtype``
    (default: the graph's id dtype) on ``device`` (copied there without a host sync). Ranges are
    checked by the kernel (IndexError naming the id); ids that a narrower id dtype cannot hold
    become -1 first, so they are reported rather than wrapped around."""
    if isinstance(nodes, np.ndarray):
        nodes = torch.from_numpy(nodes)
    elif not isinstance(nodes, torch.Tensor):
        nodes = torch.as_tensor(nodes)
    if nodes.dim() == 0:
        nodes = nodes.reshape(1)
    if nodes.dim() != 1:
        raise ValueError(f"nodes must be 1-D node ids, but got shape {tuple(nodes.shape)}")
    if nodes.dtype not in (torch.int32, torch.int64, torch.int16, torch.int8, torch.uint8):
        raise TypeError(f"nodes must be integer node ids, but got {nodes.dtype}; convert them with .long()")
    dtype = graph.idtype if dtype is None else dtype
    if nodes.dtype == torch.int64 and dtype == torch.int32:
        nodes = torch.where((nodes < 0) | (nodes >= graph.num_nodes), -1, nodes)
    nodes = nodes.to(dtype=dtype).contiguous()
    if device.type == "cuda" and nodes.device.type == "cpu":
        # From pageable memory a copy waits for the device (a host sync); from pinned memory it is
        # enqueued. A pinned tensor is read in place: it must not change until the stream has run.
        return (nodes if nodes.is_pinned() else nodes.pin_memory()).to(device, non_blocking=True)
    return nodes.to(device)


def given_seed_error(given: Any, num_nodes: int, error: IndexError) -> IndexError:
    """The IndexError to raise for ``error``, a bad seed found while sampling the caller's ids ``given``:
    the first of ``given`` outside ``[0, num_nodes)``, by its own value. :func:`as_seeds` turns an id
    that the graph's id dtype cannot hold into -1 (so that it cannot wrap around into a valid id), and
    the kernels then name that -1. ``error`` itself when none of ``given`` is bad (an error path: the
    host reads the ids)."""
    ids = torch.from_numpy(np.asarray(given)) if not isinstance(given, torch.Tensor) else given
    ids = ids.reshape(-1).cpu().to(torch.int64)
    bad = ((ids < 0) | (ids >= num_nodes)).nonzero()
    if len(bad) == 0:
        return error
    return bad_seed_error(int(ids[bad[0, 0]]), num_nodes)


def check_placement(graph: SamplingGraph, backend: str, device: torch.device) -> None:
    """Raise ValueError when ``backend`` on ``device`` cannot read ``graph`` where it is placed."""
    if graph.closed:
        raise ValueError("this SamplingGraph is closed; sample from an open one")
    if backend == "cuda" and (graph.placement == "host" or graph.device != device):
        raise ValueError(
            f"the CUDA sampler on {device} reads a graph pinned for or placed on that GPU, but this one is "
            f"{graph.placement!r} on {graph.device}; make it with placement='pinned' (or 'device') and device={str(device)!r}"
        )
    if backend != "cuda" and graph.placement == "device":
        raise ValueError(f"device={backend!r} samples on the CPU, but this graph lives on {graph.device}; make one with placement='host'")


def sample_layer(graph: SamplingGraph, seeds: torch.Tensor, fanout: int, replace: bool, seed: int, backend: str) -> Picks:
    """One layer: per seed, ``min(deg, fanout)`` distinct in-edges (``fanout`` draws per seed with
    in-edges when ``replace``; every in-edge at -1; none at 0), in increasing CSC position per seed.
    Reads one size back from the device (inside ``sample_csc``); none for no seeds or fanout 0."""
    if fanout == 0 or seeds.numel() == 0:
        empty = torch.zeros(0, dtype=torch.int64, device=seeds.device)
        return Picks(torch.zeros(seeds.numel() + 1, dtype=torch.int64, device=seeds.device), empty.to(graph.idtype), empty)
    from ..cuda.sampling import sample_csc

    with _on_device(seeds, backend):
        out = sample_csc(graph.indptr, graph.indices, seeds, fanout, replace=replace, seed=seed, backend=backend)
    return Picks(out.indptr, out.src, out.pos)


def _on_device(seeds: torch.Tensor, backend: str) -> contextlib.AbstractContextManager:
    """The CUDA device of ``seeds`` made current for a CUDA backend (the kernels launch there)."""
    return torch.cuda.device(seeds.device) if backend == "cuda" else contextlib.nullcontext()


def sample_layer_deferred(
    graph: SamplingGraph,
    seeds: torch.Tensor,
    fanout: int,
    replace: bool,
    seed: int,
    backend: str,
    *,
    capacity: int | None = None,
    plan: CSCPlan | None = None,
    edge_ids: torch.Tensor | None = None,
    pick: Any = None,
) -> DeferredCSC:
    """One layer as :func:`sample_layer` picks it, without a host read (``sample_csc_deferred``):
    ``src``/``pos`` hold ``capacity`` entries (default ``len(seeds) * fanout``; for ``fanout == -1``
    the total, read back earlier from ``plan``), the picks first and -1 after; the total and a bad
    seed's position stay on the device (``DeferredCSC.sizes()``). Fanout 0: no picks. ``edge_ids``:
    each CSC position's edge id, read by the fetch into ``pos`` (then edge ids, not positions).
    ``pick``: ``sample_csc_deferred``'s (weighted picks; None: uniform)."""
    if fanout == 0:
        zeros = torch.zeros(seeds.numel() + 1, dtype=torch.int64, device=seeds.device)
        empty = torch.zeros(0, dtype=torch.int64, device=seeds.device)
        return DeferredCSC(zeros, empty.to(graph.idtype), empty, torch.full((1,), -1, dtype=torch.int64, device=seeds.device))
    from ..cuda.sampling import sample_csc_deferred

    with _on_device(seeds, backend):
        return sample_csc_deferred(
            graph.indptr, graph.indices, seeds, fanout, replace=replace, seed=seed, backend=backend, capacity=capacity, plan=plan, edge_ids=edge_ids, pick=pick
        )


def plan_layer(
    graph: SamplingGraph,
    nodes: torch.Tensor,
    fanout: int,
    replace: bool,
    count: torch.Tensor | None,
    backend: str,
    bad: torch.Tensor | None = None,
    *,
    narrow: Any = None,
    count_picks: Any = None,
) -> CSCPlan:
    """The plan of a layer (fanout >= 1 or -1) over the first ``count`` entries of ``nodes`` (``count``:
    a one-element int64 tensor on their device; None: all), no host read. A fanout -1 layer's total,
    ``plan.out_indptr[-1]``, is read back with the batch's sizes so far, and sizes the picks.
    ``bad``: where the bounds pass flags a bad seed (a view of the batch's sizes; default its own).
    ``narrow``/``count_picks``: ``plan_csc``'s ``narrow``/``count`` (time cut, skipped destinations,
    weighted counts; None: uniform over every in-edge)."""
    from ..cuda.sampling import plan_csc

    with _on_device(nodes, backend):
        return plan_csc(graph.indptr, nodes, fanout, replace=replace, num_valid=count, backend=backend, bad=bad, narrow=narrow, count=count_picks)


def relabel_picks(
    graph: SamplingGraph, dst: torch.Tensor, count: torch.Tensor | None, picks: DeferredCSC, sizes: torch.Tensor, backend: str, *, bounded: bool = True
) -> Relabelled:
    """A layer's ``to_block`` numbering on the sampling device, no host read (the kernel layer's
    ``relabel_layer``): ``dst``'s first ``count`` entries (None: all) and then the picks' new nodes;
    ``sizes`` (int64 ``(2,)``) receives ``[picks, source nodes]``. ``bounded``: the ids are the graph's
    node ids (at most ``num_nodes`` distinct, which bounds the hash table); False for other keys (trees')."""
    from ..cuda.sampling import relabel_layer

    with _on_device(dst, backend):
        return relabel_layer(dst, count, picks.src, picks.indptr, sizes, backend=backend, num_nodes=graph.num_nodes if bounded else None)
