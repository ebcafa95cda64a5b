"""papers100M's shape from 1 % to 100 %: generated to disk, opened without a copy, sampled, gathered and trained.

For each ``--fractions`` value (of ogbn-papers100M's 111,059,956 nodes; about 29 in-edges per node):
  generate  ``generate_to_disk`` into ``--data-dir/papers-<fraction>`` (reused when finished there already;
            its time is then the one recorded when it was written), in a child process: time, peak RSS,
            bytes on disk;
  run       in a second child process (its own peak RSS): open (memory maps, no copy), then ``--batches``
            batches of ``--batch-size`` training seeds through ``HopSampler`` (fanouts ``--fanouts``),
            each checked edge by edge against the files for the first batch, and the input nodes' rows
            gathered through ``FeatureStore(features, storage=StorageTier(--host-buffer))`` (int8 codes, decoded);
            per-batch sample and gather times (median and quartiles), sampled edges/s, storage bytes per
            batch; the sampled positions past 2**31 (where the graph has them) checked against
            ``indices.npy`` read with plain file reads; then ``--steps`` GraphSAGE steps (3 layers,
            hidden ``--hidden``, Adam) cycling through those batches (their rows gathered again, not timed
            in the step), whose loss must fall.
``--device cuda`` runs the same on a GPU (bench/training/scale_gpu.py): the CSC pinned in place (``pin_s``), our
GPU sampler reading it over PCIe, the rows gathered zero-copy onto the GPU from the store's pinned host buffer,
the steps on the GPU, every phase timed between two device synchronisations; the first batch's blocks checked
against the files as well (in-degrees, no edge twice, each edge at its position). Each row names its device.
The cost per sampled edge (sample seconds / edges) and per gathered byte (gather seconds / bytes) against
the graph's edge count is drawn as a PNG; rows are saved as CSV/JSON (bench/results/scale.*), after each
fraction. A row's ``status``: ok; ``failed: <stage>: <error>``; or ``skipped: time limit`` where
``--time-limit`` seconds had passed before its next stage (``make gpu-check`` bounds its scale step so).

The RAM budget: the host buffer of feature rows is ``--host-buffer`` bytes (default 2 GiB); the graph's
pages (indptr, indices) and the rest of the feature file live in the kernel's page cache, which takes
what the machine has left and gives it back under pressure, so the process's own RSS stays small.
``--dgl`` adds DGL's own ``NeighborSampler`` over the same CSC and seed batches, after the rest (its peak
RSS apart), where a DGL graph of the CSC (int64 ids, copied in: :func:`dgl_graph_bytes`) fits in 80 % of
the memory then available; otherwise the row says how much it would need.

    python bench/training/scale.py --fractions 0.01,0.1 [--data-dir DIR] [--batches 20] [--steps 50] [--device cuda]
    dgl-zerocopy bench scale  (the same)
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: common.py
import scale_gpu  # noqa: E402 - beside this file: the GPU route, and the check of sampled edges against the files
from common import RESULTS, TIME_LIMIT_STATUS, command_line, machine, pyplot, save_figure, summarize, write_results  # noqa: E402


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def _rss_split_gb() -> dict:
    """Resident memory now, anonymous (the process's own) and file-backed (mapped pages of the graph's
    files: clean page cache, given back under pressure), from /proc/self/status (Linux; empty elsewhere)."""
    try:
        lines = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return {}
    fields = dict(line.split(":", 1) for line in lines if line.startswith(("RssAnon", "RssFile")))
    return {f"end_{k.lower()}_gb": int(v.split()[0]) * 1024 / 1e9 for k, v in fields.items()}


def _folder(data_dir: Path, fraction: float) -> Path:
    return data_dir / f"papers-{fraction:g}"


def stage_generate(fraction: float, data_dir: Path, seed: int, features: str) -> dict:
    from dgl_zerocopy.data.disk_graph import open_disk_graph
    from dgl_zerocopy.data.papers_disk import generate_to_disk, papers100m_spec

    folder = _folder(data_dir, fraction)
    reused = (folder / "graph.json").is_file()
    started = time.perf_counter()
    generate_to_disk(folder, papers100m_spec(fraction, seed=seed), features=features)
    wall = time.perf_counter() - started
    graph = open_disk_graph(folder)
    return {
        "generate_s": float(graph.meta["generate_seconds"]) if reused else wall,
        "generate_reused": reused,
        "generate_peak_rss_gb": None if reused else _peak_rss_bytes() / 1e9,
        "disk_gb": graph.nbytes_on_disk() / 1e9,
    }


def _blocks(sampled, num_layers: int):
    """DeviceBlocks (outermost first) of a HopSampler neighbourhood with one node numbering: the block
    of layer ``i`` has the nodes reached within ``L - 1 - i`` hops as destinations and every edge
    sampled up to the next hop."""
    from dgl_zerocopy.sampling.blocks import DeviceBlock

    per_hop = np.cumsum(sampled.nodes_per_hop["_N"])
    edges = np.cumsum(sampled.edges_per_hop["_E"])
    row, col = sampled.row["_E"], sampled.col["_E"]
    blocks = []
    for k in reversed(range(num_layers)):
        num_dst, num_src, e = int(per_hop[k]), int(per_hop[k + 1]), int(edges[k])
        order = np.argsort(col[:e], kind="stable")
        indptr = np.concatenate([[0], np.cumsum(np.bincount(col[:e], minlength=num_dst))])
        blocks.append(DeviceBlock(torch.from_numpy(indptr), torch.from_numpy(row[:e][order]), num_src))
    return blocks


def _check_against_files(graph, sampled, most: int = 20_000) -> int:
    """A HopSampler neighbourhood's edges are in the files (:func:`scale_gpu.check_edges`). Returns the count
    of positions past 2**31 checked."""
    nodes, pos = sampled.nodes["_N"], sampled.pos["_E"]
    return scale_gpu.check_edges(graph, pos, nodes[sampled.row["_E"]], nodes[sampled.col["_E"]], most)


def stage_run(args, fraction: float) -> dict:
    from dgl_zerocopy.data.disk_graph import open_disk_graph

    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)
    started = time.perf_counter()
    graph = open_disk_graph(_folder(args.data_dir, fraction))
    open_s = time.perf_counter() - started
    populate_s = 0.0
    if args.populate:
        started = time.perf_counter()
        graph.populate()
        populate_s = time.perf_counter() - started
    fanouts = [int(f) for f in args.fanouts.split(",")]
    seeds = rng.permutation(np.asarray(graph.train_idx))
    batches = [np.sort(seeds[i * args.batch_size : (i + 1) * args.batch_size]) for i in range(args.batches)]
    batches = [b for b in batches if len(b)]
    if args.device == "cuda" or args.emulate_gpu_sampler:
        measured = scale_gpu.run_route(args, graph, batches, fanouts, emulate=args.device != "cuda")
    else:
        measured = _run_on_cpu(args, graph, batches, fanouts)
    row = _row(graph, measured, open_s, populate_s, args.steps)
    return {**row, **(_dgl_side_by_side(graph, batches, fanouts) if args.dgl else {})}


def _run_on_cpu(args, graph, batches: list[np.ndarray], fanouts: list[int]) -> dict:
    """The CPU route: HopSampler over the mapped CSC, the ``cpu`` store, GraphSAGE on the CPU. Returns the
    figures :func:`scale_gpu.run_route` returns (no pinning, no GPU memory)."""
    from dgl_zerocopy.sampling.disk import hop_sampler
    from dgl_zerocopy.training.models import GraphSAGE

    started = time.perf_counter()
    sampler = hop_sampler(graph)
    store = graph.feature_store(host_buffer_bytes=args.host_buffer)
    store_s = time.perf_counter() - started
    # One untimed batch first (the last one's seeds): the kernels' first call loads them from numba's
    # cache (or compiles them), which is no batch's cost.
    sampler.sample({"_N": batches[-1]}, {"_E": fanouts}, rng=np.random.default_rng([args.seed, len(batches)]))
    sample_s, gather_s, edges, rows, storage_bytes, samples = [], [], [], [], [], []
    past = 0
    for i, b in enumerate(batches):
        t = time.perf_counter()
        s = sampler.sample({"_N": b}, {"_E": fanouts}, rng=np.random.default_rng([args.seed, i]))
        sample_s.append(time.perf_counter() - t)
        if i == 0:
            past += _check_against_files(graph, s)
        store.reset_storage_stats()
        t = time.perf_counter()
        x = store.gather(torch.from_numpy(s.nodes["_N"]))
        gather_s.append(time.perf_counter() - t)
        storage_bytes.append(int(store.storage_stats().get("storage_bytes", 0)))
        edges.append(len(s.pos["_E"]))
        rows.append(len(s.nodes["_N"]))
        samples.append(s)
        del x  # gathered again for its training step: only the ids are kept
    past += _check_past_2_31(graph, sampler, args.seed)
    model = GraphSAGE(graph.feat_dim, args.hidden, graph.num_classes, num_layers=len(fanouts), dropout=0.0)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses, step_s = [], []
    for step in range(args.steps):
        s = samples[step % len(samples)]
        x = store.gather(torch.from_numpy(s.nodes["_N"]))  # host-buffer hits after the first pass
        y = torch.from_numpy(np.asarray(graph.labels[s.nodes["_N"][: s.nodes_per_hop["_N"][0]]]))
        t = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(_blocks(s, len(fanouts)), x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step_s.append(time.perf_counter() - t)
        losses.append(loss.item())
    store.close()
    measured = {"sample_s": sample_s, "gather_s": gather_s, "edges": edges, "rows": rows, "storage_bytes": storage_bytes}
    return {"device": "cpu", "store_s": store_s, **measured, "past": past, "step_s": step_s, "losses": losses}


def _row(graph, m: dict, open_s: float, populate_s: float, steps: int) -> dict:
    """A fraction's figures from a route's measurements ``m`` (:func:`scale_gpu.run_route`'s keys). ``open_s``:
    the graph opened and its feature store made; ``pin_s`` (the GPU route's): the CSC registered in place."""
    head, tail = float(np.mean(m["losses"][:5])), float(np.mean(m["losses"][-5:]))
    sample, gather = summarize(m["sample_s"]), summarize(m["gather_s"])
    row_bytes = graph.feat_dim  # int8 codes
    on_gpu = {"pin_s": m["pin_s"], "gpu_peak_gb": m["gpu_peak_gb"]} if "pin_s" in m else {}
    return {
        "nodes": graph.num_nodes,
        "edges": graph.num_edges,
        "index_dtype": str(graph.indices.dtype),
        "device": m["device"],
        "open_s": open_s + m["store_s"],
        "populate_s": populate_s,
        **on_gpu,
        "run_peak_rss_gb": _peak_rss_bytes() / 1e9,
        **_rss_split_gb(),
        "sample_ms_median": sample["median"] * 1e3,
        "sample_ms_q1": sample["q1"] * 1e3,
        "sample_ms_q3": sample["q3"] * 1e3,
        "gather_ms_median": gather["median"] * 1e3,
        "gather_ms_q1": gather["q1"] * 1e3,
        "gather_ms_q3": gather["q3"] * 1e3,
        "sampled_edges_per_batch": float(np.median(m["edges"])),
        "sampled_edges_per_s": float(np.sum(m["edges"]) / np.sum(m["sample_s"])),
        "gathered_bytes_per_batch": float(np.median(m["rows"])) * row_bytes,
        "storage_bytes_per_batch": float(np.median(m["storage_bytes"])),
        "ns_per_sampled_edge": float(np.sum(m["sample_s"]) / np.sum(m["edges"]) * 1e9),
        "ns_per_gathered_byte": float(np.sum(m["gather_s"]) / (np.sum(m["rows"]) * row_bytes) * 1e9),
        "positions_past_2_31_checked": m["past"],
        "steps": steps,
        "step_ms_median": summarize(m["step_s"])["median"] * 1e3,
        "loss_first5": head,
        "loss_last5": tail,
        "loss_falls": tail < head,
    }


def dgl_graph_bytes(num_nodes: int, num_edges: int) -> int:
    """What a DGL graph built from the CSC holds at the least: int64 ``indptr``, ``indices`` and edge ids
    (DGL keeps 64-bit ids for a graph past 2**31 edges, and copies the arrays in)."""
    return 8 * (num_nodes + 1) + 16 * num_edges


def _dgl_side_by_side(graph, batches: list[np.ndarray], fanouts: list[int]) -> dict:
    """DGL's own ``NeighborSampler`` over the same CSC and seeds, where its graph fits in the memory
    available now; else why not. Its fanouts are turned around (DGL's list is input layer first)."""
    try:
        import dgl
        import psutil
    except ImportError as e:
        return {"dgl_status": f"skipped: {e}"}
    need, free = dgl_graph_bytes(graph.num_nodes, graph.num_edges), psutil.virtual_memory().available
    if need > 0.8 * free:
        return {"dgl_status": f"does not fit: a DGL graph needs at least {need / 1e9:.1f} GB, {free / 1e9:.1f} GB available", "dgl_graph_gb": need / 1e9}
    started = time.perf_counter()
    indptr = torch.from_numpy(np.asarray(graph.indptr, dtype=np.int64))
    indices = torch.from_numpy(np.asarray(graph.indices, dtype=np.int64))
    g = dgl.graph(("csc", (indptr, indices, torch.arange(graph.num_edges))), num_nodes=graph.num_nodes)
    del indptr, indices
    build_s = time.perf_counter() - started
    sampler = dgl.dataloading.NeighborSampler(list(reversed(fanouts)))
    sampler.sample_blocks(g, torch.from_numpy(batches[-1]))  # untimed, as ours: its threads start
    times, edges = [], []
    for b in batches:
        t = time.perf_counter()
        _, _, blocks = sampler.sample_blocks(g, torch.from_numpy(b))
        times.append(time.perf_counter() - t)
        edges.append(sum(block.num_edges() for block in blocks))
    return {
        "dgl_status": "ok",
        "dgl_graph_gb": need / 1e9,
        "dgl_build_s": build_s,
        "dgl_peak_rss_gb": _peak_rss_bytes() / 1e9,
        "dgl_sample_ms_median": summarize(times)["median"] * 1e3,
        "dgl_sampled_edges_per_batch": float(np.median(edges)),
        "dgl_ns_per_sampled_edge": float(np.sum(times) / np.sum(edges) * 1e9),
    }


def _check_past_2_31(graph, sampler, seed: int) -> int:
    """Where the CSC has positions past 2**31: sample the destinations whose columns lie there and check
    those edges against the file (0 where the graph is smaller)."""
    if graph.num_edges <= 2**31:
        return 0
    first = int(np.searchsorted(graph.indptr, 2**31, side="right"))
    seeds = np.arange(first, min(first + 256, graph.num_nodes))
    s = sampler.sample({"_N": seeds}, {"_E": [15]}, rng=np.random.default_rng(seed))
    return _check_against_files(graph, s)


class StageFailed(Exception):
    """A child stage that ended with an error (its message) or a signal."""


def _child(args, stage: str, fraction: float) -> dict:
    """Run ``stage`` for ``fraction`` in a child process (its own peak RSS): its figures, from the last line of its
    stdout. Its stderr (progress, a traceback) passes through; a failure raises :class:`StageFailed`."""
    cmd = [sys.executable, __file__, "--stage", stage, "--fractions", f"{fraction:g}"]
    for k in ("data_dir", "seed", "features", "batches", "batch_size", "fanouts", "steps", "hidden", "host_buffer", "device"):
        cmd += [f"--{k.replace('_', '-')}", str(getattr(args, k))]
    cmd += ["--populate"] if args.populate else []
    cmd += ["--dgl"] if args.dgl else []
    cmd += ["--emulate-gpu-sampler"] if args.emulate_gpu_sampler else []
    run = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    lines = run.stdout.strip().splitlines()
    try:
        said = json.loads(lines[-1]) if lines else {}
    except ValueError:
        said = {}
    if run.returncode != 0:
        raise StageFailed(said.get("error") or f"exit {run.returncode}")
    return said


def _stage_main(args, fraction: float) -> None:
    """In the child: the stage's figures as the last line of stdout; an error as ``{"error": ...}`` there too
    (for the row), then raised again (its traceback on stderr)."""
    try:
        result = stage_generate(fraction, args.data_dir, args.seed, args.features) if args.stage == "generate" else stage_run(args, fraction)
    except Exception as e:
        print(json.dumps({"error": f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"[:300]}), flush=True)
        raise
    print(json.dumps(result), flush=True)


def _plot(rows: list[dict], path: Path) -> None:
    plt = pyplot()

    edges = [r["edges"] for r in rows]
    on = rows[0].get("device", "cpu")
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    ax[0].plot(edges, [r["ns_per_sampled_edge"] for r in rows], "o-", label="ours (HopSampler)" if on == "cpu" else "ours (GpuNeighborSampler)")
    fit = [r for r in rows if r.get("dgl_status") == "ok"]
    if fit:
        ax[0].plot([r["edges"] for r in fit], [r["dgl_ns_per_sampled_edge"] for r in fit], "s--", color="C2", label="DGL's NeighborSampler")
        for r in rows:
            if str(r.get("dgl_status", "")).startswith("does not fit"):
                ax[0].axvline(r["edges"], color="C2", linestyle=":", label=f"DGL's graph does not fit ({r['dgl_graph_gb']:.0f} GB)")
        ax[0].legend(fontsize=8)
    ax[0].set(xscale="log", xlabel="graph edges", ylabel="ns per sampled edge", title=f"sampling ({'CPU' if on == 'cpu' else on})")
    ax[1].plot(edges, [r["ns_per_gathered_byte"] for r in rows], "o-", color="C1")
    ax[1].set(xscale="log", xlabel="graph edges", ylabel="ns per gathered byte", title="gather (storage tier, int8)")
    for a, r in ((a, r) for a in ax for r in rows):
        a.annotate(f"{r['fraction']:g}", (r["edges"], r["ns_per_sampled_edge"] if a is ax[0] else r["ns_per_gathered_byte"]))
    for a in ax:
        a.set_ylim(bottom=0)
    fig.suptitle("papers100M-shaped graphs on disk: flat = cost linear in the work")
    save_figure(fig, path)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fractions", default="0.01,0.1", help="fractions of papers100M's nodes, comma-separated (default 0.01,0.1)")
    p.add_argument("--data-dir", type=Path, default=Path("bench_data"), help="where the graphs are generated (default ./bench_data)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--features", default="int8", choices=("int8",), help="feature layout (the run gathers int8 codes)")
    p.add_argument("--batches", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--host-buffer", type=int, default=2 << 30, help="bytes of feature rows kept in the host buffer (default 2 GiB)")
    p.add_argument("--populate", action="store_true", help="fault the CSC's pages in after opening (DiskGraph.populate): no page fault per batch")
    p.add_argument("--dgl", action="store_true", help="DGL's own NeighborSampler over the same CSC and seeds, where its graph fits in memory")
    p.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu", help="cuda: the CSC pinned, our GPU sampler, zero-copy gathers, training on the GPU (default cpu)"
    )
    p.add_argument("--time-limit", type=float, help="seconds: no stage starts after them (its row reads 'skipped: time limit')")
    # Testing aid, not for users: the GPU route on the CPU, our sampler's reference backend standing in for CUDA (figures mean nothing).
    p.add_argument("--emulate-gpu-sampler", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    p.add_argument("--stem", default="scale")
    p.add_argument("--stage", choices=("generate", "run"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.device == "cuda" and args.emulate_gpu_sampler:
        p.error("--emulate-gpu-sampler runs the GPU route on the CPU: leave out --device cuda")
    if args.device == "cuda" and not torch.cuda.is_available():
        # one line, before any work: there is no GPU route to time without a GPU
        print("scale.py: --device cuda needs a CUDA GPU, but torch.cuda.is_available() is False here; leave --device out to run on the CPU", file=sys.stderr)
        return 2
    fractions = [float(f) for f in args.fractions.split(",")]
    if args.stage:
        _stage_main(args, fractions[0])
        return 0
    began = time.monotonic()
    meta = {"command": command_line(), "machine": machine(), "fanouts": args.fanouts, "batch_size": args.batch_size, "host_buffer_bytes": args.host_buffer}
    rows = []
    for fraction in fractions:
        row, status = {"fraction": fraction}, "ok"
        for stage in ("generate", "run"):
            if args.time_limit is not None and time.monotonic() - began > args.time_limit:
                status = TIME_LIMIT_STATUS
                break
            print(f"scale {fraction:g}: {stage} ({time.monotonic() - began:.0f} s in)", flush=True)
            try:
                row.update(_child(args, stage, fraction))
            except StageFailed as e:
                status = f"failed: {stage}: {e}"
                break
        row.setdefault("device", args.device)  # the run names the GPU; a row it never reached names what was asked
        row["status"] = status
        print(json.dumps(row), flush=True)
        rows.append(row)
        write_results(args.stem, rows, meta, args.out_dir)  # after each fraction: a run stopped later keeps it
    if measured := [r for r in rows if r["status"] == "ok"]:
        _plot(measured, Path(args.out_dir) / f"{args.stem}.png")
    return 0 if all(r["status"] in ("ok", TIME_LIMIT_STATUS) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
