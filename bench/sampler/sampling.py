"""Neighbour sampling: sampled edges/s and ms per minibatch, our GPU sampler against DGL's CPU sampler.

On the products-shaped synthetic graph (dgl_zerocopy.data's generator; by default ogbn-products'
full scale: 2,449,029 nodes and an average in-degree of 50.5, about 124 M stored edges), samples the
same minibatches (``--batch-size`` seed nodes from the training split, fanouts ``15,10,5``) with

  gpu-pinned          GpuNeighborSampler on CUDA, the in-edge CSC pinned in place (read over PCIe)  GPU
  gpu-device          the same with the CSC copied into device memory (the upper bound)             GPU
  gpu-snapshot        GpuSnapshotSampler on CUDA: a snapshot (2 x the largest fanout in-edges per   GPU
                      node) in device memory, built from the pinned CSC; batches read only it
  dgl-cpu             DGL's dgl.dataloading.NeighborSampler on the CPU (the baseline)                CPU
  reference           GpuNeighborSampler(device="reference"): our NumPy twin of the kernels          CPU
  emulator            GpuNeighborSampler(device="emulator"): the CUDA kernel source built with g++   CPU
  snapshot-reference  GpuSnapshotSampler(device="reference"): gpu-snapshot's CPU twin               CPU
  pyg-cpu             dgl_zerocopy.pyg.NeighborSampler.sample_from_nodes: a NeighborLoader batch's   CPU
                      sampling (PyG's layout: sampling_hops.py)
  hops-cpu            dgl_zerocopy.sampling.cpu_hops.HopSampler alone (numba; PyG's layout)          CPU
  hops-numpy          the same, its NumPy path alone (compiled=False)                                CPU

each side by side in one run, relabelling and blocks included (ours: unique/relabel and one
DeviceBlock per layer on the sampling device; DGL's: to_block). ``reference``, ``emulator`` and
``snapshot-reference`` are correctness tools run on the CPU: their figures are NOT GPU figures and
say nothing about GPU speed. The snapshot methods' timed batches are the snapshot's alone (its
build, and one refresh at the default share 0.25, are timed apart: ``build_s``, ``refresh_ms``).
Before timing, each method's first batch is checked: blocks chained as DGL's (destinations first,
``dstdata[NID]`` of the last block = the seeds), per destination ``min(in-degree, fanout)`` edges
(``fanout`` with ``--replace``), each edge an in-edge of the graph named by ``edata[EID]``, no edge
twice; ours also equal to the reference backend for the same RNG keys (``torch.manual_seed``); the
snapshot's edges each in its destination's snapshot. ``pyg-cpu`` and ``hops-cpu`` sample the PyG way (each
node once, at the hop where it joined: fewer edges per batch than DGL's blocks) and are checked as
bench/sampler/sampling_hops.py says.

Timing: ``--repeats`` times, the wall-clock time of sampling all ``--batches`` minibatches (after
``--warmup`` untimed ones), the device synchronised before and after; seeds are placed on the
sampling device beforehand, as a loader with its ids there does. Edge ids (``EID``) are computed
lazily by our sampler and not read in the timed loop unless ``--edge-ids`` (feature gathering
does not need them; DGL always computes them). Per method: ms per minibatch and millions of
sampled edges per second (edges = the sum of the blocks' edges), median and spread over repeats;
for CPU methods also each batch's ms (median and quartiles over every timed batch); for every method the
sampled edges per CPU-second of the process (``time.process_time``, all its threads: a figure that other
work on a shared machine disturbs less than wall-clock time). ``--interleave``
builds and checks every method first and then times one repeat of each in turn, so that the load of a
shared machine, which comes and goes, falls on every method alike (for side-by-side CPU figures).

    python bench/sampler/sampling.py [--num-nodes 2449029] [--avg-degree 50.5] [--fanouts 15,10,5] [--batch-size 1024]
        [--batches 10] [--repeats 5] [--methods gpu-pinned,gpu-device,dgl-cpu] [--idtype int64] [--interleave] [--time-limit S] [--out STEM]
    dgl-zerocopy bench sampling   (the same)
    python bench/sampler/sampling.py --num-nodes 200000 --methods dgl-cpu,pyg-cpu,hops-cpu --interleave --out bench/results/sampling_cpu_pyg
                                  (our CPU samplers against DGL's: docs/pyg.md)

Default methods: gpu-pinned, gpu-device and dgl-cpu where CUDA is, else dgl-cpu, reference and
emulator. A method that raises becomes a row "failed: ..." (exit 1); one that cannot run here
(no CUDA, no DGL) a row "skipped: ..."; with ``--time-limit``, methods not started by then
"skipped: time limit". Each row is written as soon as it is measured. Writes STEM.{csv,json,png}
(default bench/results/sampling) with the exact command in their header; prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import textwrap
import time
import traceback
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: common.py
import sampling_hops  # noqa: E402
from common import RESULTS, TIME_LIMIT_STATUS, command_line, machine, median_bars, pyplot, save_figure, summarize, table_head, write_results  # noqa: E402
from sampling_hops import HOP_METHODS, TREE_METHODS, check_hops, check_same, check_trees  # noqa: E402

METHODS = ("gpu-pinned", "gpu-device", "gpu-snapshot", "dgl-cpu", "reference", "emulator", "snapshot-reference", *HOP_METHODS)
GPU_METHODS = ("gpu-pinned", "gpu-device", "gpu-snapshot")
SNAPSHOT_METHODS = ("gpu-snapshot", "snapshot-reference")
OURS = ("gpu-pinned", "gpu-device", "reference", "emulator")  # GpuNeighborSampler, checked against its reference backend
#: What each method's figures are: written into every row, so that no CPU figure passes for a GPU one.
WHAT = {
    "gpu-pinned": "GPU measurement: our sampler, CSC pinned in place (read over PCIe)",
    "gpu-device": "GPU measurement: our sampler, CSC in device memory (upper bound)",
    "gpu-snapshot": "GPU measurement: our snapshot sampler, snapshot in device memory (batches read no PCIe)",
    "dgl-cpu": "CPU measurement: DGL's NeighborSampler (baseline)",
    "reference": "CPU run of our NumPy reference sampler (correctness tool): NOT a GPU figure",
    "emulator": "CPU emulation of our CUDA kernel (correctness tool): NOT a GPU figure",
    "snapshot-reference": "CPU run of our snapshot sampler on the NumPy reference (correctness tool): NOT a GPU figure",
    **sampling_hops.WHAT,
}
PRODUCTS = {"nodes": 2_449_029, "edges": 123_718_280}  # ogbn-products as DGL stores it (both directions)
NUMBERS = [f"{q}_{s}" for q in ("ms_per_batch", "medges_per_s") for s in ("median", "q1", "q3", "min", "max")]


class CheckError(AssertionError):
    """A sampled batch that breaks the sampler's contract (raised before anything is timed)."""


# -- the graph and the seeds ----------------------------------------------------------------------


def load_graph(num_nodes: int, avg_degree: float, seed: int):
    """The products-shaped synthetic dataset (one feature column: only the graph is sampled), cached
    by dgl_zerocopy.data as every generated dataset is."""
    from dgl_zerocopy.data import SyntheticSpec, load_dataset

    return load_dataset("synthetic", synthetic=SyntheticSpec(num_nodes=num_nodes, avg_degree=avg_degree, feat_dim=1, seed=seed))


def seed_batches(train_idx: np.ndarray, num_nodes: int, batch_size: int, batches: int, seed: int) -> list[torch.Tensor]:
    """``batches`` minibatches of ``batch_size`` distinct seed nodes: consecutive slices of a shuffled
    training split (of every node when the split is too small), as a shuffling loader deals them."""
    pool = torch.from_numpy(np.asarray(train_idx, dtype=np.int64))
    if pool.numel() < batch_size:
        pool = torch.arange(num_nodes)
    if pool.numel() < batch_size:
        raise ValueError(f"--batch-size {batch_size} is larger than the graph's {num_nodes} nodes; pass a smaller --batch-size or a larger --num-nodes")
    gen, per_pass, out = torch.Generator().manual_seed(seed), pool.numel() // batch_size, []
    while len(out) < batches:  # a pass deals whole batches of one permutation; another pass starts afresh
        perm = pool[torch.randperm(pool.numel(), generator=gen)]
        out += [perm[i * batch_size : (i + 1) * batch_size] for i in range(min(per_pass, batches - len(out)))]
    return out


# -- the samplers -----------------------------------------------------------------------------------


class Method:
    """One way to sample: ``sample(seeds) -> (input_nodes, output_nodes, blocks)`` (PyG's layout for
    :data:`HOP_METHODS`: bench/sampler/sampling_hops.py); ``counts(sampled)`` its edges per layer and input
    nodes; ``sync()`` waits for its device; ``close()`` gives back what it holds (pinned pages, device copies)."""

    def __init__(self, name: str, indptr: torch.Tensor, indices: torch.Tensor, fanouts: list[int], replace: bool) -> None:
        self.name, self.fanouts = name, fanouts
        self.device = torch.device("cuda") if name in GPU_METHODS else torch.device("cpu")
        self._closers = []
        self.snapshot, self.build_s = None, float("nan")
        if name in HOP_METHODS:
            self.sample = sampling_hops.build(name, indptr, indices, fanouts, replace)
        elif name in SNAPSHOT_METHODS:
            from dgl_zerocopy.sampling import GpuSnapshotSampler, SamplingGraph

            gpu = name in GPU_METHODS
            self.graph = SamplingGraph(indptr, indices, placement="pinned" if gpu else "host", device=self.device if gpu else None)
            self.snapshot = GpuSnapshotSampler(fanouts, device="cuda" if gpu else "reference")
            self._closers = [self.snapshot.close, self.graph.close]
            self.sync()
            start = time.perf_counter()
            self.snapshot.refresh_snapshot(self.graph)  # the build: sample_csc over the pinned CSC
            self.sync()
            self.build_s = time.perf_counter() - start
            self.sample = lambda seeds: self.snapshot.sample_blocks(self.graph, seeds)
        elif name == "dgl-cpu":
            import dgl  # after dgl_zerocopy (imported by load_graph), which lets PyPI's DGL load on any torch

            self.graph = dgl.graph(("csc", (indptr, indices, torch.zeros(0, dtype=indices.dtype))), num_nodes=indptr.numel() - 1, idtype=indices.dtype)
            self._sampler = dgl.dataloading.NeighborSampler(fanouts, replace=replace)
            self.sample = lambda seeds: self._sampler.sample_blocks(self.graph, seeds.to(indices.dtype))
        else:
            from dgl_zerocopy.sampling import GpuNeighborSampler, SamplingGraph

            placement = {"gpu-pinned": "pinned", "gpu-device": "device"}.get(name, "host")
            self.graph = SamplingGraph(indptr, indices, placement=placement, device=self.device if name in GPU_METHODS else None)
            backend = "cuda" if name in GPU_METHODS else name
            self._sampler = GpuNeighborSampler(fanouts, replace=replace, device=backend)
            self._closers = [self._sampler.close, self.graph.close]
            self.sample = lambda seeds: self._sampler.sample_blocks(self.graph, seeds)

    def counts(self, sampled, edge_ids: bool = False) -> tuple[list[int], int]:
        """Edges per layer (input layer first) and input nodes of a batch; ``edge_ids``: read every
        block's edge ids first (ours computes them lazily; PyG's layout has them always)."""
        if self.name in HOP_METHODS:
            return sampling_hops.counts(sampled)
        from dgl_zerocopy.loading.blocks import EID

        input_nodes, _, blocks = sampled
        if edge_ids:
            for block in blocks:
                block.edata[EID]
        return [int(block.num_edges()) for block in blocks], int(input_nodes.numel())

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def refresh_ms(self) -> float:
        """One refresh of the snapshot (its default share), device synchronised; NaN for the other methods."""
        if self.snapshot is None:
            return float("nan")
        self.sync()
        start = time.perf_counter()
        self.snapshot.refresh_snapshot()
        self.sync()
        return (time.perf_counter() - start) * 1e3

    def close(self) -> None:
        for close in self._closers:
            close()


def unavailable(name: str, replace: bool = False) -> str | None:
    """Why ``name`` cannot run on this machine (or with ``--replace``), or None."""
    if name in GPU_METHODS and not torch.cuda.is_available():
        return "skipped: no CUDA GPU here (torch.cuda.is_available() is False)"
    if name in SNAPSHOT_METHODS and replace:
        return "skipped: the snapshot samples without replacement (--replace)"
    if name in HOP_METHODS:
        return sampling_hops.unavailable(name)
    if name == "dgl-cpu":
        try:
            import dgl  # noqa: F401
        except Exception as e:  # noqa: BLE001 - ImportError, or DGL failing to load its library
            return f"skipped: import dgl failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
    return None


# -- the correctness check -------------------------------------------------------------------------------


def block_coo(block) -> tuple[torch.Tensor, ...]:
    """``(src, dst, src_nid, dst_nid, eid)`` of a block (ours or DGL's), int64 on the CPU: its edges
    as local ids, its nodes' ids in the graph, and each edge's id in the graph, in one edge order."""
    from dgl_zerocopy.loading.blocks import EID, NID

    if hasattr(block, "indptr"):  # our DeviceBlock: CSC over its destinations
        indptr = block.indptr.long().cpu()
        dst = torch.repeat_interleave(torch.arange(indptr.numel() - 1), indptr[1:] - indptr[:-1])
        src = block.indices.long().cpu()
    else:
        src, dst = (t.long() for t in block.edges(order="eid"))
    return src, dst, *(t.long().cpu() for t in (block.srcdata[NID], block.dstdata[NID], block.edata[EID]))


def check_batch(indptr: torch.Tensor, indices: torch.Tensor, seeds: torch.Tensor, sampled, fanouts: list[int], replace: bool) -> None:
    """Raise :class:`CheckError` unless ``sampled`` (``(input_nodes, output_nodes, blocks)``) is a
    valid sample of ``seeds`` from the CSC ``(indptr, indices)``, the edge ids being CSC positions."""
    input_nodes, output_nodes, blocks = sampled
    indptr, indices, seeds = indptr.long(), indices.long(), seeds.long().cpu()
    degree = indptr[1:] - indptr[:-1]
    if len(blocks) != len(fanouts):
        raise CheckError(f"{len(blocks)} blocks for {len(fanouts)} fanouts")
    if not torch.equal(output_nodes.long().cpu(), seeds):
        raise CheckError("output_nodes differ from the seeds")
    dst_expected = seeds
    for layer in range(len(blocks) - 1, -1, -1):
        src, dst, src_nid, dst_nid, eid = block_coo(blocks[layer])
        fanout, where = fanouts[layer], f"block {layer}"
        if not torch.equal(dst_nid, dst_expected):
            raise CheckError(f"{where}: its destinations are not the sources of the block after it (or the seeds)")
        if not torch.equal(src_nid[: dst_nid.numel()], dst_nid):
            raise CheckError(f"{where}: the destinations are not the first source nodes")
        if torch.unique(src_nid).numel() != src_nid.numel():
            raise CheckError(f"{where}: a source node appears twice")
        got = torch.bincount(dst, minlength=dst_nid.numel())
        deg = degree[dst_nid]
        want = deg if fanout == -1 else torch.where(deg > 0, fanout, 0) if replace else deg.clamp(max=fanout)
        if not torch.equal(got, want):
            bad = int((got != want).nonzero()[0, 0])
            raise CheckError(f"{where}: node {int(dst_nid[bad])} (in-degree {int(deg[bad])}) has {int(got[bad])} sampled in-edges, expected {int(want[bad])}")
        gdst, gsrc = dst_nid[dst], src_nid[src]
        if eid.numel() and not (bool(((eid >= indptr[gdst]) & (eid < indptr[gdst + 1])).all()) and torch.equal(indices[eid], gsrc)):
            raise CheckError(f"{where}: an edge (src, dst, EID) is not an in-edge of the graph")
        if not replace and torch.unique(eid).numel() != eid.numel():
            raise CheckError(f"{where}: an edge sampled twice without replacement")
        dst_expected = src_nid
    if not torch.equal(input_nodes.long().cpu(), dst_expected):
        raise CheckError("input_nodes differ from the first block's source nodes")


def check_same_as(sampled, expected) -> None:
    """Raise :class:`CheckError` unless two samples of ours (same seeds, same RNG keys) are equal."""
    for layer, (a, b) in enumerate(zip(sampled[2], expected[2])):
        for x, y, what in zip(block_coo(a), block_coo(b), ("sources", "destinations", "source ids", "destination ids", "edge ids")):
            if not torch.equal(x, y):
                raise CheckError(f"block {layer}: {what} differ from the reference backend's for the same RNG keys")


def check_method(method: Method, host: tuple[torch.Tensor, torch.Tensor], seeds: torch.Tensor, replace: bool, seed: int) -> str:
    """Check ``method`` on one batch (see the module's docstring); returns what was checked."""
    torch.manual_seed(seed)
    sampled = method.sample(seeds.to(method.device))
    if method.name in TREE_METHODS:
        return check_trees(method.name, *host, seeds, sampled, method.fanouts, replace, seed)
    if method.name in HOP_METHODS:
        check_hops(*host, seeds, sampled, method.fanouts, replace)
        said = "batch 0: seeds first, each node once, min(in-degree, fanout) in-edges of each node new at the hop before, each an in-edge"
        if method.name in ("pyg-cpu", "hops-numpy"):
            torch.manual_seed(seed)
            check_same(sampled, sampling_hops.build("hops-cpu", *host, method.fanouts, replace)(seeds))
            said += "; equal to hops-cpu"
        return said
    check_batch(*host, seeds, sampled, method.fanouts, replace)
    said = "batch 0: chained blocks, min(in-degree, fanout) edges per destination, each an in-edge named by EID"
    if method.snapshot is not None:
        check_in_snapshot(method.snapshot, sampled)
        said += "; each edge in its destination's snapshot"
    if method.name in OURS and method.name != "reference":
        from dgl_zerocopy.sampling import GpuNeighborSampler, SamplingGraph

        torch.manual_seed(seed)
        with SamplingGraph(*host) as graph, GpuNeighborSampler(method.fanouts, replace=replace, device="reference") as ref:
            check_same_as(sampled, ref.sample_blocks(graph, seeds))
        said += "; equal to the reference backend"
    return said


def check_in_snapshot(sampler, sampled) -> None:
    """Raise :class:`CheckError` unless every edge of ``sampled`` is in its destination's current
    snapshot (``sampler``: a GpuSnapshotSampler; its snapshot's edge ids are the CSC positions here)."""
    snap = sampler.snapshot
    indptr, eid = snap.indptr.long().cpu(), snap.eid.long().cpu()
    owner = torch.repeat_interleave(torch.arange(indptr.numel() - 1), indptr[1:] - indptr[:-1])
    held = owner * (int(eid.max()) + 1) + eid
    for layer, block in enumerate(sampled[2]):
        _, dst, _, dst_nid, edge = block_coo(block)
        if not bool(torch.isin(dst_nid[dst] * (int(eid.max()) + 1) + edge, held).all()):
            raise CheckError(f"block {layer}: an edge that is not in its destination's snapshot")


# -- timing -----------------------------------------------------------------------------------------


def time_method(method: Method, batches: list[torch.Tensor], repeats: int, warmup: int, edge_ids: bool) -> dict:
    """Seconds and sampled edges of each repeat (all ``batches``), and each batch's edges per layer
    and input nodes (first repeat). Edges are counted from the blocks (no device read: their sizes
    are on the host)."""
    placed = [b.to(method.device) for b in batches]
    for b in placed[:warmup]:
        method.sample(b)
    seconds, edges, layers, inputs, per_batch, cpu = [], [], [], [], [], []
    for r in range(repeats):
        method.sync()
        cpu_start, start = time.process_time(), time.perf_counter()
        last, total = start, 0
        for b in placed:
            counts, input_nodes = method.counts(method.sample(b), edge_ids)
            total += sum(counts)
            if method.device.type == "cpu":  # a GPU method's batch ends at the sync, after the repeat
                now = time.perf_counter()
                per_batch.append(now - last)
                last = now
            if r == 0:
                layers.append(counts)
                inputs.append(input_nodes)
        method.sync()
        seconds.append(time.perf_counter() - start)
        cpu.append(time.process_time() - cpu_start)
        edges.append(total)
    return {"seconds": seconds, "edges": edges, "layer_edges": layers, "input_nodes": inputs, "batch_seconds": per_batch, "cpu_seconds": cpu}


def time_interleaved(methods: list[Method], batches: list[torch.Tensor], repeats: int, warmup: int, edge_ids: bool) -> dict[str, dict]:
    """:func:`time_method`'s ``raw`` per method, one repeat of each method in turn for ``repeats`` rounds
    (``--interleave``): a load that comes and goes on a shared machine falls on every method alike."""
    raws: dict[str, dict] = {}
    for r in range(repeats):
        for method in methods:
            raw = time_method(method, batches, 1, warmup if r == 0 else 0, edge_ids)
            if method.name in raws:
                for key in ("seconds", "edges", "batch_seconds", "cpu_seconds"):
                    raws[method.name][key] += raw[key]
            else:
                raws[method.name] = raw
    return raws


def _measured(row: dict, raw: dict, method: Method, checked: str, batches: int) -> dict:
    return {**summary_row(row, raw, batches), "checked": checked, "status": "ok", "build_s": method.build_s, "refresh_ms": method.refresh_ms()}


def _failure(e: Exception) -> str:
    traceback.print_exc()
    return f"failed: {type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"[:300]


def _per_cpu_second(raw: dict) -> float:
    """Median over repeats of M sampled edges per CPU-second of the process (NaN without a CPU time)."""
    rates = [e / c / 1e6 for e, c in zip(raw["edges"], raw.get("cpu_seconds", [])) if c > 0]
    return statistics.median(rates) if rates else float("nan")


def summary_row(base: dict, raw: dict, batches: int) -> dict:
    """The row's figures from :func:`time_method`'s ``raw``: ms per batch and M edges/s per repeat,
    median and spread; each batch's ms over all repeats (CPU methods; NaN for GPU ones); edges per
    batch (mean), per layer (input layer first), seed-layer total."""
    ms = summarize([s / batches * 1e3 for s in raw["seconds"]])
    one = summarize([s * 1e3 for s in raw["batch_seconds"]]) if raw.get("batch_seconds") else dict.fromkeys(("median", "q1", "q3"), float("nan"))
    rate = summarize([e / s / 1e6 for e, s in zip(raw["edges"], raw["seconds"])])
    layers = np.asarray(raw["layer_edges"], dtype=np.float64)
    return {
        **base,
        **{f"ms_per_batch_{k}": v for k, v in ms.items()},
        **{f"medges_per_s_{k}": v for k, v in rate.items()},
        **{f"batch_ms_{k}": one[k] for k in ("median", "q1", "q3")},
        "medges_per_cpu_s_median": _per_cpu_second(raw),
        "edges_per_batch": float(layers.sum(axis=1).mean()),
        "layer_edges": "/".join(f"{v:.0f}" for v in layers.mean(axis=0)),
        "seed_layer_edges": int(layers[:, -1].sum()),
        "input_nodes_per_batch": float(np.mean(raw["input_nodes"])),
    }


# -- the run ------------------------------------------------------------------------------------------


def default_methods() -> list[str]:
    return ["gpu-pinned", "gpu-device", "gpu-snapshot", "dgl-cpu"] if torch.cuda.is_available() else ["dgl-cpu", "reference", "emulator"]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-nodes", type=int, default=PRODUCTS["nodes"], help="nodes of the generated graph (default ogbn-products' 2,449,029)")
    parser.add_argument("--avg-degree", type=float, default=50.5, help="mean in-degree before duplicates are dropped (products: 50.5)")
    parser.add_argument("--fanouts", default="15,10,5", help="per layer, input layer first, as DGL's NeighborSampler (-1: all)")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=10, help="minibatches per timed repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2, help="untimed minibatches first (kernel compiles, allocator)")
    parser.add_argument("--methods", help=f"comma separated, of {', '.join(METHODS)} (default: {', '.join(default_methods())} here)")
    parser.add_argument("--idtype", choices=("int64", "int32"), default="int64", help="the CSC's id dtype")
    parser.add_argument("--replace", action="store_true", help="sample with replacement")
    parser.add_argument("--edge-ids", action="store_true", help="read every block's edge ids in the timed loop (ours computes them lazily)")
    parser.add_argument("--seed", type=int, default=0, help="graph and seed-batch seed")
    parser.add_argument(
        "--interleave",
        action="store_true",
        help="build and check every method first, then time one repeat of each in turn (a shared machine's load falls on all alike)",
    )
    parser.add_argument("--time-limit", type=float, default=0, help="seconds from the start: methods not started by then become skipped rows (0: none)")
    parser.add_argument("--out", default=str(RESULTS / "sampling"), help="result path without suffix (default bench/results/sampling)")
    args = parser.parse_args(argv)
    try:
        args.fanouts = [int(f) for f in args.fanouts.split(",")]
        if not args.fanouts or any(f < -1 or f == 0 for f in args.fanouts):
            raise ValueError
    except ValueError:
        parser.error(f"--fanouts must be comma-separated ints >= 1 (or -1: every in-edge), e.g. 15,10,5, but got {args.fanouts!r}")
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()] if args.methods else default_methods()
    if unknown := [m for m in args.methods if m not in METHODS]:
        parser.error(f"unknown method {unknown[0]!r}; choose from {', '.join(METHODS)}")
    for flag in ("num_nodes", "batch_size", "batches", "repeats"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1, but got {getattr(args, flag)}")
    if args.warmup < 0:
        parser.error(f"--warmup must be 0 or more, but got {args.warmup}")
    return args


def main(argv: list[str] | None = None) -> int:
    began = time.perf_counter()  # --time-limit counts from here: the graph's generation is inside it
    args = parse_args(argv)
    command, stem = command_line(), Path(args.out)
    try:
        dataset = load_graph(args.num_nodes, args.avg_degree, args.seed)
        batches = seed_batches(dataset.train_idx, dataset.num_nodes, args.batch_size, args.batches, args.seed)
    except ValueError as e:
        print(f"sampling: error: {e}", file=sys.stderr)
        return 2
    dtype = getattr(torch, args.idtype)
    indptr, indices = torch.from_numpy(dataset.indptr).to(dtype), torch.from_numpy(dataset.indices).to(dtype)
    num_nodes, num_edges = dataset.num_nodes, dataset.num_edges
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    meta = {
        "command": command,
        "machine": machine(),
        "device": gpu or "cpu (no GPU: every figure here is a CPU figure)",
        "graph": f"products-shaped synthetic (dgl_zerocopy.data, seed {args.seed}): {num_nodes:,} nodes, {num_edges:,} edges "
        f"(mean in-degree {num_edges / num_nodes:.1f}, max {int((indptr[1:] - indptr[:-1]).max())}), {args.idtype} CSC; "
        f"ogbn-products: {PRODUCTS['nodes']:,} nodes, {PRODUCTS['edges']:,} edges",
        "sampling": f"fanouts {args.fanouts} (input layer first), batch {args.batch_size} training seeds, {args.batches} batches per repeat, "
        f"{args.repeats} repeats after {args.warmup} warm-up batches, {'with' if args.replace else 'without'} replacement, "
        f"edge ids {'read in the timed loop' if args.edge_ids else 'not read (lazy in ours; DGL computes them always)'}",
        "timing": "wall clock of each repeat, device synchronised before and after: sampling, unique/relabel and blocks; seeds already on the "
        "sampling device; DGL's blocks stay on the CPU (no copy to a GPU counted)"
        + ("; methods interleaved: one repeat of each in turn (wall_s then counts the others' rounds too)" if args.interleave else ""),
        "note": "reference and emulator rows are CPU runs of our correctness tools: NOT GPU figures"
        + ("; " + HOPS_NOTE if any(m in HOP_METHODS for m in args.methods) else ""),
        "threads": f"torch {torch.get_num_threads()}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, {os.cpu_count()} CPUs",
        "load": "load average (1, 5, 15 min) at the start: " + ", ".join(f"{v:.2f}" for v in os.getloadavg()),
    }
    print(f"sampling: {meta['graph']}\nsampling: {meta['sampling']}", flush=True)
    base = {"num_nodes": num_nodes, "num_edges": num_edges, "idtype": args.idtype, "fanouts": ",".join(map(str, args.fanouts)), "batch_size": args.batch_size}
    base.update(batches=args.batches, repeats=args.repeats)
    rows, raws = [], {}
    ready = []  # with --interleave: (row, method, checked, started), timed together once every method is checked

    def add(row: dict, why: str | None, started: float) -> None:
        if why is not None:
            row = {**row, **dict.fromkeys(NUMBERS, float("nan")), "status": why}
        row["wall_s"] = time.perf_counter() - started
        rows.append(_complete(row))
        print(f"sampling: {_line(rows[-1])}", flush=True)
        _save(stem, rows, meta, raws)

    for name in args.methods:
        row = {"method": name, "what": WHAT[name], **base}
        started = time.perf_counter()
        why = TIME_LIMIT_STATUS if args.time_limit and started - began > args.time_limit else unavailable(name, args.replace)
        if why is None:
            method = None
            try:
                method = Method(name, indptr, indices, args.fanouts, args.replace)
                checked = check_method(method, (indptr, indices), batches[0], args.replace, args.seed)
                if args.interleave:
                    ready.append((row, method, checked, started))
                    continue
                raws[name] = time_method(method, batches, args.repeats, args.warmup, args.edge_ids)
                row = _measured(row, raws[name], method, checked, args.batches)
            except Exception as e:  # noqa: BLE001 - a failing method becomes a row; the others still run
                why = _failure(e)
            finally:
                if method is not None and not (args.interleave and why is None):
                    method.close()
        add(row, why, started)
    if ready:
        try:
            raws.update(time_interleaved([method for _, method, _, _ in ready], batches, args.repeats, args.warmup, args.edge_ids))
            why = None
        except Exception as e:  # noqa: BLE001 - every method timed together fails with it
            why = _failure(e)
        for row, method, checked, started in ready:
            add(row if why else _measured(row, raws[method.name], method, checked, args.batches), why, started)
            method.close()
    meta["load"] += "; at the end: " + ", ".join(f"{v:.2f}" for v in os.getloadavg())
    csv_path, _ = _save(stem, rows, meta, raws)
    _plot(rows, meta, csv_path.with_suffix(".png"))
    print(f"\n# {command}\n# {meta['device']}; {meta['machine']}\n# {meta['graph']}\n# {meta['sampling']}\n\n{markdown(rows)}")
    print("\nwrote " + ", ".join(os.path.relpath(p) for p in (csv_path, csv_path.with_suffix(".json"), csv_path.with_suffix(".png"))))
    return 1 if any(r["status"].startswith("failed") for r in rows) else 0


#: Every row's keys in one order (a skipped row has the numbers as NaN), so the CSV has one header.
KEYS = (
    "method",
    "what",
    "num_nodes",
    "num_edges",
    "idtype",
    "fanouts",
    "batch_size",
    "batches",
    "repeats",
    *NUMBERS,
    "batch_ms_median",
    "batch_ms_q1",
    "batch_ms_q3",
    "medges_per_cpu_s_median",
)
KEYS += ("edges_per_batch", "layer_edges", "seed_layer_edges", "input_nodes_per_batch", "x_dgl_cpu", "build_s", "refresh_ms", "checked", "status", "wall_s")


def _complete(row: dict) -> dict:
    filler = {"edges_per_batch": float("nan"), "layer_edges": "", "seed_layer_edges": -1, "input_nodes_per_batch": float("nan"), "checked": ""}
    return {k: row.get(k, filler.get(k, float("nan"))) for k in KEYS}


def _save(stem: Path, rows: list[dict], meta: dict, raws: dict):
    """Write the rows so far (each method's edges/s over DGL's CPU sampler's, where that ran) as CSV and JSON."""
    dgl_rate = next((r["medges_per_s_median"] for r in rows if r["method"] == "dgl-cpu" and r["status"] == "ok"), float("nan"))
    for r in rows:
        r["x_dgl_cpu"] = r["medges_per_s_median"] / dgl_rate
    return write_results(stem.name, rows, meta, stem.parent, extra={"raw": raws})


def _line(r: dict) -> str:
    if r["status"] != "ok":
        return f"{r['method']}: {r['status']}"
    snapshot = "" if np.isnan(r["build_s"]) else f", snapshot built in {r['build_s']:.2f} s, a refresh {r['refresh_ms']:.1f} ms"
    return (
        f"{r['method']}: {r['ms_per_batch_median']:.2f} ms per batch ({r['ms_per_batch_q1']:.2f}-{r['ms_per_batch_q3']:.2f}), "
        f"{r['medges_per_s_median']:.2f} M edges/s, {r['edges_per_batch']:,.0f} edges per batch{snapshot} ({r['wall_s']:.1f} s) [{r['what']}]"
    )


def markdown(rows: list[dict]) -> str:
    """The rows as a markdown table: figures with their interquartile range, what each is."""
    lines = table_head(
        "| method | ms per batch median (q1–q3) | M sampled edges/s median (q1–q3) | × DGL CPU | M edges per CPU-s | edges per batch (layers) "
        "| input nodes | what | status |",
        "lrrrrrrll",
    )
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"| {r['method']} | – | – | – | – | – | – | {r['what']} | {r['status']} |")
            continue
        lines.append(
            f"| {r['method']} | {r['ms_per_batch_median']:.2f} ({r['ms_per_batch_q1']:.2f}–{r['ms_per_batch_q3']:.2f}) | "
            f"{r['medges_per_s_median']:.2f} ({r['medges_per_s_q1']:.2f}–{r['medges_per_s_q3']:.2f}) | "
            f"{'–' if np.isnan(r['x_dgl_cpu']) else format(r['x_dgl_cpu'], '.2f')} | {r['medges_per_cpu_s_median']:.2f} | "
            f"{r['edges_per_batch']:,.0f} ({r['layer_edges']}) | "
            f"{r['input_nodes_per_batch']:,.0f} | {r['what']} | ok |"
        )
    if (ratio := snapshot_ratio(rows)) is not None:
        lines += ["", snapshot_line(ratio, next(r for r in rows if r["method"] == "gpu-snapshot"))]
    if any(r["method"] in HOP_METHODS for r in rows):
        lines += ["", HOPS_NOTE]
    return "\n".join(lines)


#: What the PyG-layout rows' edge counts mean beside DGL's.
HOPS_NOTE = (
    "pyg-cpu and hops-* sample PyG's way: each node once, at the hop where it joined (num_neighbors = the fanouts "
    "turned around, the seeds' hop first); DGL samples every node of the layer before again, so its batches hold more edges."
)


def snapshot_ratio(rows: list[dict]) -> float | None:
    """UVA sampling of the full CSC (``gpu-pinned``) over the device-resident snapshot
    (``gpu-snapshot``), ms per batch, where both ran; else None."""
    by = {r["method"]: r for r in rows if r.get("status") == "ok"}
    if "gpu-pinned" in by and "gpu-snapshot" in by:
        return by["gpu-pinned"]["ms_per_batch_median"] / by["gpu-snapshot"]["ms_per_batch_median"]
    return None


def snapshot_line(ratio: float, row: dict) -> str:
    return (
        f"Device-resident snapshot: {ratio:.2f}x faster per batch than UVA sampling of the full CSC (the goal: at least 3x); "
        f"its build took {row['build_s']:.2f} s, one refresh (share 0.25) {row['refresh_ms']:.1f} ms."
    )


def _plot(rows: list[dict], meta: dict, path: Path) -> None:
    plt = pyplot()

    done = [r for r in rows if r["status"] == "ok"]
    fig, axes = plt.subplots(1, 2, figsize=(2.2 * max(len(done), 1) + 5, 4.2))
    colour = {"gpu-pinned": "tab:blue", "gpu-device": "tab:green", "gpu-snapshot": "tab:purple", "dgl-cpu": "tab:orange", "pyg-cpu": "tab:red"}
    colour["hops-cpu"] = "tab:brown"
    colour["hops-numpy"] = "tab:pink"
    cpu_tool = [r["method"] not in colour for r in done]  # a CPU tool's bar: grey and hatched
    colours = [colour.get(r["method"], "lightgrey") for r in done]
    labels = [r["method"] + ("\n(CPU tool, not GPU)" if cpu else "") for r, cpu in zip(done, cpu_tool)]
    for ax, key, label in ((axes[0], "medges_per_s", "M sampled edges/s (log)"), (axes[1], "ms_per_batch", "ms per minibatch (log)")):
        median_bars(ax, done, key, colours, labels, ["//" if cpu else None for cpu in cpu_tool])
        ax.set_yscale("log")
        ax.set_ylabel(label)
    fig.suptitle("\n".join(textwrap.fill(meta[k], 170) for k in ("device", "graph", "sampling")), fontsize=7)
    save_figure(fig, path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
