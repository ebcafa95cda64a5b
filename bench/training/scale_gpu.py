"""bench/training/scale.py's GPU route (``--device cuda``), and the check of sampled edges against the graph's
files that both of its routes run.

The route (:func:`run_route`) over a graph opened from its folder (memory maps):
  pin      ``sampling_graph(graph, "pinned", device)``: ``indptr.npy`` and ``indices.npy`` registered in place
           (read-only where the GPU can pin read-only pages, else through a copy-on-write map: the files
           are never written), read by the GPU over PCIe: no copy of the CSC in device memory;
  sample   ``GpuNeighborSampler`` (our kernels) over that CSC, ``scale.py --fanouts`` turned around (its list
           starts at the seeds, DGL's at the input layer); the first batch checked against the files
           (:func:`check_blocks`);
  gather   ``graph.feature_store(--host-buffer, backend="zerocopy")``: the storage tier reads the rows missing
           from its pinned host buffer out of the file, and the GPU gathers the batch's rows from the buffer
           (zero-copy, int8 codes decoded on the GPU);
  train    GraphSAGE steps on the GPU over the sampled blocks, each batch's rows gathered again (untimed).

Streams: every kernel runs on the device's current stream, in program order, so no tensor crosses from one
stream to another and DESIGN.md's protocol has nothing to order here. A phase is timed from a
``torch.cuda.synchronize`` before it to one after it: a CUDA call returns before its kernels have run, so
without them a time would be the launches', and the next phase would pay for this one's work.

Testing aid: ``emulate=True`` runs the same route on the CPU, the reference backend sampling the CSC as it is
and the ``cpu`` backend gathering: correctness tools, whose figures are not GPU figures.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable

import numpy as np
import torch

#: The row's ``device`` where the reference backend stood in for CUDA.
EMULATED = "cpu (the reference backend standing in for the GPU sampler: NOT a GPU figure)"


def check_edges(graph, pos: np.ndarray, src: np.ndarray, dst: np.ndarray, most: int = 20_000) -> int:
    """The sampled edges ``src -> dst`` at CSC positions ``pos`` (int64 arrays) are in the files: each position
    in its destination's column, and (for ``most`` of them, drawn at random) its source at its position of
    ``indices.npy``, read with plain file reads, not through the mapping. Returns the count of positions past
    2**31 checked."""
    pick = np.random.default_rng(0).permutation(len(pos))[:most]
    if not ((pos >= graph.indptr[dst]) & (pos < graph.indptr[dst + 1])).all():
        raise AssertionError("a sampled position lies outside its destination's column")
    pos, src = pos[pick], src[pick]
    itemsize, header = graph.indices.dtype.itemsize, graph.indices.offset
    with open(graph.path / "indices.npy", "rb") as f:
        for p, s in zip(pos.tolist(), src.tolist()):
            f.seek(header + p * itemsize)
            if int(np.frombuffer(f.read(itemsize), dtype=graph.indices.dtype)[0]) != s:
                raise AssertionError(f"position {p}: the file holds another source than the sampler gave")
    return int((pos >= 2**31).sum())


def check_blocks(graph, blocks: list, fanouts: list[int], most: int = 20_000) -> int:
    """Our sampler's ``blocks`` (input layer first; ``fanouts`` in the same order) against the files: each
    destination has ``min(in-degree, fanout)`` in-edges, no position twice (sampling without replacement), and
    :func:`check_edges` holds for every edge (``most`` per block read from the file). Returns the positions past
    2**31 checked."""
    from dgl_zerocopy.sampling.blocks import EID, NID

    past = 0
    for layer, (block, fanout) in enumerate(zip(blocks, fanouts)):
        counts = np.diff(block.indptr.cpu().numpy().astype(np.int64))
        dst_nodes = block.dstdata[NID].cpu().numpy().astype(np.int64)
        degree = graph.indptr[dst_nodes + 1] - graph.indptr[dst_nodes]
        if not np.array_equal(counts, degree if fanout < 0 else np.minimum(degree, fanout)):
            raise AssertionError(f"block {layer}: a destination has other than min(in-degree, {fanout}) sampled in-edges")
        pos = block.edata[EID].cpu().numpy().astype(np.int64)
        if np.unique(pos).size != pos.size:
            raise AssertionError(f"block {layer}: an in-edge was sampled twice (the sampler draws without replacement)")
        src = block.srcdata[NID].cpu().numpy().astype(np.int64)[block.indices.cpu().numpy()]
        past += check_edges(graph, pos, src, np.repeat(dst_nodes, counts), most)
    return past


def _synchronizer(device: torch.device) -> Callable[[], None]:
    """What ends a timed phase: the device's queue drained on CUDA (see the module's docstring); nothing on the CPU."""
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def run_route(args: argparse.Namespace, graph, batches: list[np.ndarray], fanouts: list[int], emulate: bool = False) -> dict:
    """The GPU route over ``graph`` for the seed ``batches`` (``fanouts`` as ``scale.py --fanouts``: the seeds'
    hop first), with ``args.seed``, ``args.host_buffer``, ``args.steps`` and ``args.hidden``. Returns what
    scale.py's row is made of: ``device``, ``pin_s`` and ``store_s`` (set-up), per batch ``sample_s``,
    ``gather_s``, ``edges``, ``rows`` and ``storage_bytes``, ``past`` (positions past 2**31 checked), per step
    ``step_s`` and ``losses``, and ``gpu_peak_gb``. Everything it pinned is unpinned when it returns or raises."""
    from dgl_zerocopy.sampling import GpuNeighborSampler
    from dgl_zerocopy.sampling.disk import sampling_graph
    from dgl_zerocopy.training.models import GraphSAGE

    torch.manual_seed(args.seed)  # the kernels' RNG keys are drawn from torch's generator
    device = torch.device("cpu") if emulate else torch.device("cuda", torch.cuda.current_device())
    sync = _synchronizer(device)
    layers = list(reversed(fanouts))  # DGL's order: the input layer first
    with contextlib.ExitStack() as cleanup:  # closed in reverse: the sampler, the store (unpins its buffer), the CSC
        sync()
        started = time.perf_counter()
        csc = sampling_graph(graph, "host" if emulate else "pinned", None if emulate else device)
        cleanup.callback(csc.close)  # waits for the device, then unregisters the CSC's pages
        pin_s = time.perf_counter() - started
        started = time.perf_counter()
        store = graph.feature_store(args.host_buffer, backend="cpu" if emulate else "zerocopy", device=device)
        cleanup.callback(store.close)
        store_s = time.perf_counter() - started
        sampler = cleanup.enter_context(GpuNeighborSampler(layers, device="reference" if emulate else device))
        # One untimed batch first (the last one's seeds) and a gather of a few of its rows: the kernels are
        # compiled (or loaded from CuPy's cache) there, which is no batch's cost.
        warm_up, _, _ = sampler.sample_blocks(csc, batches[-1])
        store.gather(warm_up[:1024])
        sample_s, gather_s, edges, rows, storage_bytes, samples = [], [], [], [], [], []
        past = 0
        for i, seeds in enumerate(batches):
            sync()
            started = time.perf_counter()
            input_nodes, output_nodes, blocks = sampler.sample_blocks(csc, seeds)
            sync()
            sample_s.append(time.perf_counter() - started)
            if i == 0:
                past += check_blocks(graph, blocks, layers)
            store.reset_storage_stats()
            sync()
            started = time.perf_counter()
            x = store.gather(input_nodes)
            sync()
            gather_s.append(time.perf_counter() - started)
            storage_bytes.append(int(store.storage_stats().get("storage_bytes", 0)))
            edges.append(sum(block.num_edges() for block in blocks))
            rows.append(int(input_nodes.numel()))
            samples.append((input_nodes, output_nodes, blocks))
            del x  # gathered again for its training step: only the ids and blocks are kept
        past += _check_past_2_31(graph, csc, "reference" if emulate else device)
        model = GraphSAGE(graph.feat_dim, args.hidden, graph.num_classes, num_layers=len(fanouts), dropout=0.0).to(device)
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
        losses, step_s = [], []
        for step in range(args.steps):
            input_nodes, output_nodes, blocks = samples[step % len(samples)]
            x = store.gather(input_nodes)  # host-buffer hits after the first pass
            y = torch.from_numpy(np.asarray(graph.labels[output_nodes.cpu().numpy()])).to(device)
            sync()
            started = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(model(blocks, x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sync()
            step_s.append(time.perf_counter() - started)
            losses.append(loss.item())
        named = EMULATED if emulate else f"{torch.cuda.get_device_name(device)} ({device})"
        peak = torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else None
    return {
        "device": named,
        "pin_s": pin_s,
        "store_s": store_s,
        "sample_s": sample_s,
        "gather_s": gather_s,
        "edges": edges,
        "rows": rows,
        "storage_bytes": storage_bytes,
        "past": past,
        "step_s": step_s,
        "losses": losses,
        "gpu_peak_gb": peak,
    }


def _check_past_2_31(graph, csc, device) -> int:
    """Where the CSC has positions past 2**31: sample the destinations whose columns lie there (one layer,
    fanout 15) and check those edges against the file (0 where the graph is smaller)."""
    if graph.num_edges <= 2**31:
        return 0
    from dgl_zerocopy.sampling import GpuNeighborSampler

    first = int(np.searchsorted(graph.indptr, 2**31, side="right"))
    seeds = np.arange(first, min(first + 256, graph.num_nodes))
    with GpuNeighborSampler([15], device=device) as sampler:
        _, _, blocks = sampler.sample_blocks(csc, seeds)
        return check_blocks(graph, blocks, [15])
