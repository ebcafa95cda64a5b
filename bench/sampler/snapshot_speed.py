"""The speed and memory part of bench/sampler/snapshot.py (``--parts speed``; its docstring says what is measured)."""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: common.py
from common import markdown_table, pyplot, save_figure, summarize, write_results  # noqa: E402

FANOUTS = [15, 10, 5]  # DGL's ogbn-products example
TRAIN_SHARE = 0.08  # ogbn-products: 196,615 training nodes of 2,449,029


def samplers() -> dict:
    """The samplers compared, by row name: DGL's, then the snapshot at refresh 0.25 (the issue's goal)
    with the default size (2 x 15) and with the largest fanout (the memory goal), and refresh 0 and 1."""
    import dgl

    from dgl_zerocopy.sampling import SnapshotSampler

    return {
        "neighbor": dgl.dataloading.NeighborSampler(FANOUTS),
        "snapshot r=0.25": SnapshotSampler(FANOUTS, refresh=0.25),
        "snapshot r=0.25 K=15": SnapshotSampler(FANOUTS, snapshot_size=15, refresh=0.25),
        "snapshot r=0": SnapshotSampler(FANOUTS, refresh=0.0),
        "snapshot r=1": SnapshotSampler(FANOUTS, refresh=1.0),
    }


def products_graph(num_nodes: int):
    """The products-shaped graph, built from its CSC (the format DGL samples in-edges from)."""
    import dgl
    import torch

    from dgl_zerocopy.cuda.sampling.pcie_model import products_like_csc

    indptr, indices = products_like_csc(num_nodes, seed=0)
    return dgl.graph(("csc", (indptr, indices, torch.empty(0, dtype=torch.int64))), num_nodes=num_nodes)


def check_batch(g, seeds, output) -> None:
    """Correctness first: every block edge is an edge of ``g`` with the edge id it carries, and each
    destination has ``min(in-degree, fanout)`` in-edges."""
    import dgl
    import torch

    input_nodes, output_nodes, blocks = output
    deg = g.in_degrees()
    if not (torch.equal(output_nodes, seeds) and torch.equal(input_nodes, blocks[0].srcdata[dgl.NID])):
        raise SystemExit("a sampler's input or output nodes are not its blocks'")
    for block, fanout in zip(blocks, FANOUTS):
        u, v = block.edges()
        gu, gv = g.find_edges(block.edata[dgl.EID])
        if not (torch.equal(gu, block.srcdata[dgl.NID][u]) and torch.equal(gv, block.dstdata[dgl.NID][v])):
            raise SystemExit("a sampled edge is not the graph's edge of its id")
        if not torch.equal(block.in_degrees(), deg[block.dstdata[dgl.NID]].clamp(max=fanout)):
            raise SystemExit("a destination does not have min(in-degree, fanout) in-edges")


def epoch(sampler, g, seeds, batch_size: int, gen) -> tuple[float, float, int]:
    """(seconds, of which the refresh, sampled edges) of one epoch over ``seeds``, shuffled by ``gen``."""
    import torch

    start = time.perf_counter()
    if hasattr(sampler, "on_epoch_start"):
        sampler.on_epoch_start(g)  # what our DataLoader calls at each epoch's start
    refresh = time.perf_counter() - start
    order = seeds[torch.randperm(seeds.numel(), generator=gen)]
    edges = 0
    for i in range(0, order.numel(), batch_size):
        _, _, blocks = sampler.sample(g, order[i : i + batch_size])
        edges += sum(block.num_edges() for block in blocks)
    return time.perf_counter() - start, refresh, edges


def _status_kb(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return float(line.split()[1])
    return math.nan


def memory_child(name: str, nodes: int, batch_size: int) -> dict:
    """In a fresh process (``python bench/sampler/snapshot_speed.py NAME NODES BATCH``): the resident memory
    that sampler ``name`` adds at its peak over the graph with its CSC and the seeds, in its first
    epoch (a snapshot is built there) and in the next one (over the same baseline: what the sampler
    keeps plus that epoch's scratch). Peaks are ``VmHWM`` after ``clear_refs`` reset it (Linux). The
    parent sets ``MALLOC_MMAP_THRESHOLD_`` so that freed large blocks go back to the system and the
    resident size follows what is allocated."""
    import torch

    g = products_graph(nodes)
    gen = torch.Generator().manual_seed(0)
    seeds = torch.randperm(nodes, generator=gen)[: round(TRAIN_SHARE * nodes)]
    sampler = samplers()[name]
    peaks = []
    before = _status_kb("VmRSS")
    for _ in range(2):
        Path("/proc/self/clear_refs").write_text("5")
        epoch(sampler, g, seeds, batch_size, gen)
        peaks.append((_status_kb("VmHWM") - before) / 1024)
    return {"baseline_mib": before / 1024, "first_epoch_peak_mib": peaks[0], "epoch_peak_mib": peaks[1]}


def measure_memory(name: str, args) -> dict:
    """:func:`memory_child` of ``name`` in a subprocess; NaN figures where it cannot run."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    cmd = [sys.executable, str(Path(__file__).resolve()), name, str(args.nodes), str(args.batch_size)]
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=True).stdout
        return json.loads(out.strip().splitlines()[-1])
    except (subprocess.SubprocessError, OSError, ValueError, IndexError) as e:
        print(f"  memory of {name}: not measured ({type(e).__name__}: {str(e)[:200]})", flush=True)
        return {"baseline_mib": math.nan, "first_epoch_peak_mib": math.nan, "epoch_peak_mib": math.nan}


def state_bytes(name: str, sampler, full: int) -> tuple[float, float]:
    """(snapshot bytes, everything the sampler keeps) for a row: DGL's samples the full CSC and keeps
    its node map between batches (``mapping``)."""
    if not name.startswith("snapshot"):
        kept = sum(t.numel() * t.element_size() for t in getattr(sampler, "mapping", {}).values() if hasattr(t, "numel"))
        return math.nan, float(full + kept)
    return float(sampler.snapshot_nbytes), float(sampler.state_nbytes)


def run_speed(args, base: dict) -> None:
    import torch

    load_start = f"{os.getloadavg()[0]:.2f}"  # the machine is shared: say how busy it was
    g = products_graph(args.nodes)
    gen = torch.Generator().manual_seed(0)
    seeds = torch.randperm(args.nodes, generator=gen)[: round(TRAIN_SHARE * args.nodes)]
    indptr, indices, eids = g.adj_tensors("csc")
    full = sum(t.numel() * t.element_size() for t in (indptr, indices, eids))
    print(
        f"products-shaped graph: {g.num_nodes():,} nodes, {g.num_edges():,} edges (mean in-degree {g.num_edges() / g.num_nodes():.1f}); full CSC {full / 2**20:.1f} MiB",
        flush=True,
    )
    for sampler in samplers().values():
        check_batch(g, seeds[: args.batch_size], sampler.sample(g, seeds[: args.batch_size]))
    chosen = samplers()  # new ones: the check's snapshots are dropped, the first epoch builds them
    first = {name: epoch(sampler, g, seeds, args.batch_size, gen)[0] for name, sampler in chosen.items()}
    times = {name: [] for name in chosen}
    refreshes = {name: [] for name in chosen}
    edges = {name: [] for name in chosen}
    names = list(chosen)
    for r in range(args.repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:  # rotated: no sampler always first
            seconds, refresh, count = epoch(chosen[name], g, seeds, args.batch_size, gen)
            times[name].append(seconds)
            refreshes[name].append(refresh)
            edges[name].append(count)
        print(f"  round {r}: " + ", ".join(f"{n} {times[n][-1]:.3f}s" for n in names), flush=True)
    memory = {name: measure_memory(name, args) for name in chosen}
    batches = math.ceil(seeds.numel() / args.batch_size)
    rows = []
    for name, sampler in chosen.items():
        t = summarize(times[name])
        ratios = [a / b for a, b in zip(times[name], times["neighbor"])]  # per round: measured side by side
        snap, kept = state_bytes(name, sampler, full)
        rows.append(
            {
                "sampler": name,
                "refresh": getattr(sampler, "refresh", math.nan),
                "snapshot_size": getattr(sampler, "snapshot_size", math.nan),
                "epoch_s_median": t["median"],
                "epoch_s_q1": t["q1"],
                "epoch_s_q3": t["q3"],
                "epoch_s_min": t["min"],
                "epoch_s_max": t["max"],
                "batch_ms_median": 1e3 * t["median"] / batches,
                "refresh_s_median": statistics.median(refreshes[name]),
                "ratio_to_neighbor_median": statistics.median(ratios),
                "ratio_to_neighbor_min": min(ratios),
                "ratio_to_neighbor_max": max(ratios),
                "first_epoch_s": first[name],
                "edges_per_epoch": statistics.median(edges[name]),
                "snapshot_mib": snap / 2**20,
                "state_mib": kept / 2**20,
                "full_csc_mib": full / 2**20,
                "snapshot_over_full_csc": snap / full,
                "state_over_full_csc": kept / full,
                "peak_added_mib_first_epoch": memory[name]["first_epoch_peak_mib"],
                "peak_added_mib": memory[name]["epoch_peak_mib"],
                "graph_process_mib": memory[name]["baseline_mib"],
            }
        )
    meta = {
        **base,
        "graph": f"products_like_csc({args.nodes}): {g.num_nodes()} nodes, {g.num_edges()} edges",
        "workload": f"fanouts {FANOUTS}, batch {args.batch_size}, {seeds.numel()} seeds ({TRAIN_SHARE:.0%}) per epoch, {batches} batches",
        "load_average_start_end": f"{load_start} / {os.getloadavg()[0]:.2f}",
        "rule": f"{args.repeats} rounds, one epoch per sampler per round in rotated order; a snapshot epoch includes its refresh",
    }
    folder = Path(args.out_dir)
    csv_path, _ = write_results("snapshot_speed", rows, meta, folder)
    plot_speed(rows, meta, csv_path.with_suffix(".png"))
    print(
        f"\n# {meta['command']}\n# {meta['machine']}; threads {meta['threads']}; load {meta['load_average_start_end']}; {meta['graph']}; {meta['workload']}; {meta['rule']}"
    )
    print(results_table(rows))
    print(f"full CSC: {full / 2**20:.1f} MiB")


def results_table(rows: list[dict]) -> str:
    """The printed table: a row per sampler, its epoch against the neighbor sampler's and the memory it keeps."""
    header = "| sampler | epoch s median (q1-q3) | ms/batch | x neighbor median (min-max) | refresh s | first epoch s | snapshot MiB | state MiB | / full CSC | peak added MiB |"
    lines = [
        f"| {r['sampler']} | {r['epoch_s_median']:.3f} ({r['epoch_s_q1']:.3f}-{r['epoch_s_q3']:.3f}) | {r['batch_ms_median']:.1f} | "
        f"{r['ratio_to_neighbor_median']:.2f} ({r['ratio_to_neighbor_min']:.2f}-{r['ratio_to_neighbor_max']:.2f}) | {r['refresh_s_median']:.3f} | "
        f"{r['first_epoch_s']:.2f} | {r['snapshot_mib']:.1f} | {r['state_mib']:.1f} | {r['state_over_full_csc']:.2f} | {r['peak_added_mib']:.1f} ({r['peak_added_mib_first_epoch']:.1f}) |"
        for r in rows
    ]
    return markdown_table(header, lines)


def plot_speed(rows: list[dict], meta: dict, path: Path) -> None:
    plt = pyplot()

    names = [r["sampler"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    med = [r["epoch_s_median"] for r in rows]
    err = [[m - r["epoch_s_q1"] for m, r in zip(med, rows)], [r["epoch_s_q3"] - m for m, r in zip(med, rows)]]
    left.bar(names, med, yerr=err, capsize=3, color=["tab:gray"] + ["tab:blue"] * (len(rows) - 1))
    for i, r in enumerate(rows):
        left.text(i, med[i], f"{r['ratio_to_neighbor_median']:.2f}x", ha="center", va="bottom", fontsize=8)
    left.set_ylabel("sampling s per epoch (median, q1-q3)")
    left.tick_params(axis="x", labelrotation=30, labelsize=8)
    full = rows[0]["full_csc_mib"]
    right.bar(names, [r["state_mib"] for r in rows], color="tab:orange", label="everything the sampler keeps")
    right.bar(names, [0 if math.isnan(r["snapshot_mib"]) else r["snapshot_mib"] for r in rows], color="tab:blue", label="snapshot (compact CSC)")
    right.axhline(full, color="black", linestyle="--", label=f"full CSC {full:.0f} MiB")
    right.set_ylabel("MiB")
    right.tick_params(axis="x", labelrotation=30, labelsize=8)
    right.legend(fontsize=8)
    fig.suptitle(f"{meta['graph']}; {meta['workload']}; threads {meta['threads']}", fontsize=8)
    save_figure(fig, path)


if __name__ == "__main__":  # the memory child: NAME NODES BATCH
    print(json.dumps(memory_child(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))))
