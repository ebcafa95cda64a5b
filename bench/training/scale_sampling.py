"""Where a sampled edge's cost goes as papers100M's shape grows: page faults, TLB, caches.

For each ``--fractions`` value, on the graph ``bench/training/scale.py`` generated into
``--data-dir/papers-<fraction>`` (the same folders), in a child process of its own:
  first       ``DiskGraph.populate()``, then ``--batches`` batches through a fresh ``HopSampler``
              (fanouts ``--fanouts``, ``--batch-size`` training seeds each): its first batches, scratch made;
  steady      the same sampler, ``--batches`` batches of new seeds after ``--batches`` of warm-up; also
              the ns per sampled edge of each compiled pass (counting, picks, numbering);
  A/B         the same sampler, ``2 * --batches`` new batches alternating the kernels as they are and
              as they were (``hop_kernels.MORE_READS_IN_FLIGHT`` off: ``indices`` read among the
              picks' draws, the numbering's scratch not prefetched): what more reads in flight save;
  after idle  (``--idle S``) the same sampler after S seconds untouched: whether the machine took the
              graph's pages back meanwhile (major faults per batch);
  scratch 4 KiB  steady, with the sampler's node-indexed scratch in 4 KiB pages (NumPy's huge-page
              advice for large arrays switched off while it is made): what the TLB costs it;
  CSC huge    (``--csc-huge``, where RAM allows) steady, with ``indptr``/``indices`` copied into
              anonymous memory advised to transparent huge pages (``DiskGraph.in_memory()``): what the
              TLB costs the graph's reads.
Each row: ns per sampled edge (median and quartiles over the batches), minor and major page faults per
batch, the bytes the random reads range over (CSC and scratch) beside the CPU's last-level cache, and
the anonymous huge pages the process held. Rows as CSV/JSON, ns per edge against the graph's edges as a
PNG (bench/results/scale_sampling.*).

    python bench/training/scale_sampling.py --fractions 0.01,0.1,1 --data-dir /tmp/scale_data --csc-huge
    dgl-zerocopy bench scale_sampling  (the same)
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: common.py
from common import RESULTS, command_line, machine, pyplot, save_figure, summarize, write_results  # noqa: E402


def last_level_cache_bytes() -> int | None:
    """The largest cache of CPU 0 as sysfs reports it (Linux), else None."""
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        sizes.append(int(text.rstrip("KMG")) * unit)
    return max(sizes) if sizes else None


def anon_huge_pages_bytes() -> int:
    """Anonymous transparent huge pages the process holds now (/proc/self/smaps_rollup; 0 elsewhere)."""
    try:
        lines = Path("/proc/self/smaps_rollup").read_text().splitlines()
    except OSError:
        return 0
    return sum(int(line.split()[1]) * 1024 for line in lines if line.startswith("AnonHugePages"))


def _numpy_huge_page_advice(on: bool) -> bool:
    """Switch NumPy's ``madvise(MADV_HUGEPAGE)`` on large allocations; returns the previous setting."""
    import importlib

    major = int(np.__version__.split(".")[0])
    multiarray = importlib.import_module("numpy._core.multiarray" if major >= 2 else ".".join(("numpy", "core", "multiarray")))  # moved in NumPy 2
    return bool(multiarray._set_madvise_hugepage(on))


def _batch(sampler, batch: np.ndarray, fanouts: list[int], seed: int, i: int) -> tuple[float, int, int, int]:
    """One batch: ns per sampled edge, minor and major page faults, sampled edges."""
    before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    out = sampler.sample({"_N": batch}, {"_E": fanouts}, rng=np.random.default_rng([seed, i]))
    elapsed, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_SELF)
    n = len(out.pos["_E"])
    if n == 0:
        raise ValueError(f"batch {i} sampled no edge: the graph's training seeds have no in-edges")
    return elapsed / n * 1e9, after.ru_minflt - before.ru_minflt, after.ru_majflt - before.ru_majflt, n


def _row(measured: list[tuple[float, int, int, int]]) -> dict:
    ns, minor, major, edges = (list(column) for column in zip(*measured))
    s = summarize(ns)
    return {
        "ns_per_sampled_edge_median": s["median"],
        "ns_per_sampled_edge_q1": s["q1"],
        "ns_per_sampled_edge_q3": s["q3"],
        "minor_faults_per_batch": float(np.median(minor)),
        "major_faults_per_batch": float(np.median(major)),
        "sampled_edges_per_batch": float(np.median(edges)),
        "sampled_edges": int(sum(edges)),
        "anon_huge_pages_mb": anon_huge_pages_bytes() / 2**20,
    }


class _KernelClock:
    """While active: the seconds spent in each of ``hop_kernels.count``, ``pick`` and ``number`` (the three
    compiled passes of a hop), by wrapping them; restored on exit."""

    NAMES = ("count", "pick", "number")

    def __enter__(self) -> _KernelClock:
        from dgl_zerocopy.sampling import hop_kernels

        self.module, self.seconds = hop_kernels, dict.fromkeys(self.NAMES, 0.0)
        self.saved = {name: getattr(hop_kernels, name) for name in self.NAMES}
        for name, kernel in self.saved.items():
            setattr(hop_kernels, name, self._timed(name, kernel))
        return self

    def _timed(self, name: str, kernel):
        def timed(*args):
            started = time.perf_counter()
            try:
                return kernel(*args)
            finally:
                self.seconds[name] += time.perf_counter() - started

        return timed

    def __exit__(self, *exc) -> None:
        for name, kernel in self.saved.items():
            setattr(self.module, name, kernel)

    def ns_per_edge(self, edges: int) -> dict:
        """Each kernel's ns per sampled edge (empty where none ran: the NumPy path, without numba)."""
        if not any(self.seconds.values()):
            return {}
        return {f"{name}_ns_per_sampled_edge": seconds / edges * 1e9 for name, seconds in self.seconds.items()}


def _pass(sampler, batches: list[np.ndarray], fanouts: list[int], seed: int) -> dict:
    """Sample ``batches``; per-batch ns per sampled edge and page faults."""
    return _row([_batch(sampler, batch, fanouts, seed, i) for i, batch in enumerate(batches)])


def _pass_reads(sampler, batches: list[np.ndarray], fanouts: list[int], seed: int) -> tuple[dict, dict]:
    """``hop_kernels.MORE_READS_IN_FLIGHT`` on and off on alternate batches, A B B A A B B A ...; a row each."""
    from dgl_zerocopy.sampling import hop_kernels

    previous, measured = hop_kernels.MORE_READS_IN_FLIGHT, {True: [], False: []}
    try:
        for i, batch in enumerate(batches):
            hop_kernels.MORE_READS_IN_FLIGHT = i % 4 in (0, 3)
            measured[hop_kernels.MORE_READS_IN_FLIGHT].append(_batch(sampler, batch, fanouts, seed, i))
    finally:
        hop_kernels.MORE_READS_IN_FLIGHT = previous
    return _row(measured[True]), _row(measured[False])


def stage_run(args, fraction: float) -> list[dict]:
    from dgl_zerocopy.data.disk_graph import open_disk_graph
    from dgl_zerocopy.sampling.disk import hop_sampler

    graph = open_disk_graph(args.data_dir / f"papers-{fraction:g}")
    fanouts = [int(f) for f in args.fanouts.split(",")]
    seeds = np.random.default_rng(args.seed).permutation(np.asarray(graph.train_idx))
    need = 8 * args.batches * args.batch_size  # first, warm-up, steady, twice for the A/B, after idle, warm-up and measured for scratch 4 KiB
    if len(seeds) < args.batch_size:
        raise ValueError(f"--batch-size {args.batch_size} is more than the {len(seeds)} training seeds of papers-{fraction:g}: pass a smaller one")
    # Where the passes need more seeds than the graph has (1 %: 12,216), they are drawn again (each
    # batch without repeats); the row says so. A small graph's CSC sits in the cache either way.
    reused = len(seeds) < need
    if reused:
        seeds = np.concatenate([np.random.default_rng([args.seed, i]).permutation(seeds) for i in range(-(-need // len(seeds)))])
    batches = [np.sort(seeds[i : i + args.batch_size]) for i in range(0, need, args.batch_size)]
    chunk = iter([batches[i : i + args.batches] for i in range(0, len(batches), args.batches)])
    started = time.perf_counter()
    graph.populate()
    csc_bytes = graph.indptr.nbytes + graph.indices.nbytes
    common = {"fraction": fraction, "nodes": graph.num_nodes, "edges": graph.num_edges, "populate_s": time.perf_counter() - started, "seeds_reused": reused}
    common |= {"csc_gb": csc_bytes / 1e9, "scratch_gb": graph.num_nodes * 4 / 1e9, "last_level_cache_mb": (last_level_cache_bytes() or 0) / 2**20}
    rows = []
    sampler = hop_sampler(graph)
    rows.append({**common, "variant": "first", **_pass(sampler, next(chunk), fanouts, 0)})
    _pass(sampler, next(chunk), fanouts, 1)
    with _KernelClock() as clock:
        steady = _pass(sampler, next(chunk), fanouts, 2)
    rows.append({**common, "variant": "steady", **steady, **clock.ns_per_edge(steady["sampled_edges"])})
    apart, among = _pass_reads(sampler, next(chunk) + next(chunk), fanouts, 8)
    rows.append({**common, "variant": "A/B: kernels now", **apart})
    rows.append({**common, "variant": "A/B: kernels before (fewer reads in flight)", **among})
    if args.idle > 0:
        time.sleep(args.idle)  # the machine may take back pages left untouched that long (proactive reclaim)
        rows.append({**common, "variant": f"steady after {args.idle:g} s idle", **_pass(sampler, next(chunk), fanouts, 7)})
    else:
        next(chunk)
    previous = _numpy_huge_page_advice(False)
    try:
        sampler = hop_sampler(graph)
        _pass(sampler, next(chunk), fanouts, 3)  # makes the scratch, in 4 KiB pages
    finally:
        _numpy_huge_page_advice(previous)
    rows.append({**common, "variant": "scratch 4 KiB", **_pass(sampler, next(chunk), fanouts, 4)})
    if args.csc_huge:
        try:
            in_memory = graph.in_memory(huge_pages=True)
        except MemoryError:
            rows.append({**common, "variant": "CSC huge", "status": f"skipped: a copy of the CSC needs {csc_bytes / 1e9:.1f} GB"})
        else:
            sampler = hop_sampler(in_memory)
            _pass(sampler, batches[-args.batches :], fanouts, 5)
            rows.append({**common, "variant": "CSC huge", **_pass(sampler, batches[-2 * args.batches : -args.batches], fanouts, 6)})
    return rows


def _child(args, fraction: float) -> list[dict]:
    cmd = [sys.executable, __file__, "--stage", "run", "--fractions", f"{fraction:g}", "--data-dir", str(args.data_dir)]
    cmd += [
        "--batches",
        str(args.batches),
        "--batch-size",
        str(args.batch_size),
        "--fanouts",
        args.fanouts,
        "--seed",
        str(args.seed),
        "--idle",
        str(args.idle),
    ] + (["--csc-huge"] if args.csc_huge else [])
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _plot(rows: list[dict], path: Path) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for variant in dict.fromkeys(r["variant"] for r in rows):
        shown = [r for r in rows if r["variant"] == variant and "ns_per_sampled_edge_median" in r]
        if shown:
            x = [r["edges"] for r in shown]
            y = [r["ns_per_sampled_edge_median"] for r in shown]
            err = [[a - r["ns_per_sampled_edge_q1"] for a, r in zip(y, shown)], [r["ns_per_sampled_edge_q3"] - a for a, r in zip(y, shown)]]
            ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=variant)
    ax.set(xscale="log", xlabel="graph edges", ylabel="ns per sampled edge (median, q1-q3)", title="HopSampler on papers100M-shaped graphs")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    save_figure(fig, path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fractions", default="0.01,0.1", help="fractions of papers100M's nodes, comma-separated, generated by scale.py (default 0.01,0.1)")
    p.add_argument("--data-dir", type=Path, default=Path("bench_data"), help="where scale.py generated them (default ./bench_data)")
    p.add_argument("--batches", type=int, default=4, help="batches per measured pass (default 4)")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--idle", type=float, default=0.0, help="seconds to wait, untouched, before one more steady pass (default 0: none)")
    p.add_argument("--csc-huge", action="store_true", help="also sample from a copy of the CSC in transparent huge pages (needs its size in free RAM)")
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    p.add_argument("--stem", default="scale_sampling")
    p.add_argument("--stage", choices=("run",), help=argparse.SUPPRESS)
    args = p.parse_args()
    fractions = [float(f) for f in args.fractions.split(",")]
    if args.stage == "run":
        print(json.dumps(stage_run(args, fractions[0])))
        return
    rows = []
    for fraction in fractions:
        for row in _child(args, fraction):
            print(json.dumps(row), flush=True)
            rows.append(row)
    meta = {"command": command_line(), "machine": machine(), "fanouts": args.fanouts, "batches": args.batches, "batch_size": args.batch_size}
    write_results(args.stem, rows, meta, args.out_dir)
    _plot(rows, Path(args.out_dir) / f"{args.stem}.png")


if __name__ == "__main__":
    main()
