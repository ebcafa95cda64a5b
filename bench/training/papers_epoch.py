"""A papers100M-shaped epoch through every route, side by side: all in GPU memory, ours, ours in int8, ours through
PyG, and the conventional CPU path, on one graph generated straight into host memory.

The graph: ``--fraction`` of ogbn-papers100M's nodes (:func:`~dgl_zerocopy.data.papers_disk.papers100m_spec`; 0.25:
27.8 M nodes, about 0.8 B in-edges, 128 float32 columns, 14.2 GB of features), drawn on all cores by
:func:`~dgl_zerocopy.data.papers_memory.generate_in_memory` into a 2 MB-paged host table, no file written. Then
GraphSAGE (``--fanouts`` 15,10,5, ``--batch-size`` 1024, ``--epochs`` 3: epoch 0 warms up, the median of the others
is reported) through each route of ``--routes``:

  a    everything in device memory: the features (``gpu`` backend) and the CSC (``graph_placement="device"``),
       our GPU sampler; the upper bound;
  b    ours: the CSC pinned in place, our GPU sampler, zero-copy gather, prefetch 2, float32 rows;
  b8   the same, the rows held as int8 codes (decoded in the gather);
  c    ours through the PyG front end (:class:`dgl_zerocopy.pyg.NeighborLoader`, GPU sampling, zero-copy);
  d    the conventional path: DGL's own DataLoader where DGL can move blocks to the GPU (a CUDA build), else our
       CPU route, named as such in the row: DGL's sampler on the CPU (its threads on all cores), rows gathered
       on the CPU into a pinned buffer and copied.

Before a route trains, its first batch (the first ``--batch-size`` training seeds, unshuffled) is checked against
the host tables and against the generator (bench/training/papers_check.py); a route whose check fails trains not,
and its row says why. A row: the epoch time (median, min-max), the wait's share of the step, test accuracy, peak
host memory (resident set, sampled every 0.2 s during the route) and peak device memory (torch's allocator), the
first batch's check counts. Writes ``--out``.csv/.json/.png, the command in their header.

``--plan-only`` prints the sizes and an estimate of each phase's seconds, from the per-unit costs in
:data:`PLAN_COSTS` (assumptions, not measurements; compare them with a run's rows), and exits.

Without CUDA every route runs its CPU stand-in, named in the row: the ``cpu`` backend for the ``gpu`` and
``zerocopy`` ones, the GPU sampler's reference backend for our kernels. That is the dry run, the same code at a tiny
fraction; its figures are not GPU figures.

    python bench/training/papers_epoch.py --fraction 0.25 [--routes a,b,b8,c,d] [--plan-only] [--out papers_epoch]
    python bench/training/papers_epoch.py --fraction 0.0005 --device cpu --out /tmp/papers_dry   (the dry run)
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import sys
import threading
import time
import traceback
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]  # bench/: common.py; bench/training/: papers_check.py
from common import TIME_LIMIT_STATUS, chosen, command_line, machine, pyplot, save_figure, synthetic_config, write_results  # noqa: E402
from papers_check import Regenerated, check_batch, dgl_batch, pyg_batch  # noqa: E402

ROUTES = ("a", "b", "b8", "c", "d")
TITLES = {
    "a": "all in GPU memory",
    "b": "ours: pinned CSC, GPU sampling, zero-copy",
    "b8": "ours, int8 rows",
    "c": "ours through PyG",
    "d": "conventional: CPU sampling, CPU gather + copy",
}
#: The plan's per-unit costs on the GPU machine (16 cores, H200): ASSUMPTIONS for the estimate, never results.
#: Generation: papers_disk.draw_block's 0.3 s per 65,536-node block on one core, at 70 % of linear scaling.
#: Per training batch: about 14 ms for UVA sampling + zero-copy rows and 150 ms for CPU sampling + CPU gather
#: (dmlc/dgl#3674's papers100M epochs, 4.09 s and 44.1 s over about 295 batches per GPU); route a at 0.8x ours.
PLAN_COSTS = {"block_s": 0.3, "scaling": 0.7, "batch_s": {"a": 0.011, "b": 0.014, "b8": 0.012, "c": 0.018, "d": 0.150}, "pyg_edges_per_s": 1.0e8}
FIELDS = ("route", "title", "status", "epoch_s", "epoch_min_s", "epoch_max_s", "wait_share", "test_acc", "host_peak_gb", "device_peak_gb")


def route_config(route: str, cuda: bool, dgl_cuda: bool) -> tuple[dict, str]:
    """``TrainConfig`` keys of ``route`` on this machine, and the row's note of what stood in where."""
    if route == "d":
        if dgl_cuda or not cuda:
            return {"feature_source": "dgl", "sampler": "cpu"}, "DGL's own DataLoader"
        return {
            "feature_source": "cpu",
            "sampler": "cpu",
        }, "our CPU route (DGL's CPU sampler, cpu backend: CPU gather + copy); DGL's own loader needs a CUDA build of DGL"
    keys = {"feature_source": "gpu" if route == "a" else "zerocopy", "sampler": "gpu"}
    if route == "a":
        keys["graph_placement"] = "device"
    if route == "b8":
        keys["feature_compression"] = "int8"
    if route == "c":
        keys["frontend"] = "pyg"
    if cuda:
        return keys, ""
    keys["feature_source"] = "cpu"
    keys.pop("graph_placement", None)
    return keys, "CPU stand-in: cpu backend, the GPU sampler's reference backend (not a GPU figure)"


def plan(args: argparse.Namespace, workers: int) -> dict:
    """The run's sizes and estimated seconds per phase (:data:`PLAN_COSTS`)."""
    from dgl_zerocopy.data.papers_disk import BLOCK_NODES, papers100m_spec

    spec = papers100m_spec(args.fraction, seed=args.seed)
    n = spec.num_nodes
    edges = n * spec.avg_degree
    blocks = -(-n // BLOCK_NODES)
    seconds = {"generate": (blocks + 1) * PLAN_COSTS["block_s"] / max(1.0, workers * PLAN_COSTS["scaling"])}
    batches = -(-round(n * spec.train_frac) // args.batch_size)
    for route in args.routes:
        extra = 2 * edges / PLAN_COSTS["pyg_edges_per_s"] if route == "c" else 0.0  # PyG's edge_index and its CSC, twice (check, run)
        seconds[route] = args.epochs * batches * PLAN_COSTS["batch_s"][route] + extra + 5.0  # + set-up and evaluation
    return {
        "nodes": n,
        "edges_about": int(edges),
        "features_gb": n * spec.feat_dim * 4 / 1e9,
        "indices_gb": edges * 8 / 1e9,  # int64: GraphDataset's CSC
        "batches_per_epoch": batches,
        "workers": workers,
        "seconds": seconds,
        "total_s": sum(seconds.values()),
    }


class PeakMemory:
    """The process's peak resident set while inside (``/proc/self/statm``, every ``interval`` s) and torch's peak device allocation."""

    def __init__(self, device: torch.device, interval: float = 0.2) -> None:
        self.device, self.interval, self.peak = device, interval, 0
        self._stop = threading.Event()

    def _rss(self) -> int:
        try:
            return int(Path("/proc/self/statm").read_text().split()[1]) * 4096
        except OSError:
            return 0

    def _watch(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, self._rss())

    def __enter__(self) -> PeakMemory:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        self.peak = self._rss()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="peak-rss")
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._rss())
        self.device_peak = torch.cuda.max_memory_allocated(self.device) if self.device.type == "cuda" else float("nan")


def first_batch(cfg, graph, device: torch.device, regenerated: Regenerated) -> dict[str, int]:
    """Build ``cfg``'s loader as the route builds it, take the batch of the first ``cfg.batch_size`` training
    seeds (unshuffled) and check it (bench/training/papers_check.py); everything built is closed again."""
    from dgl_zerocopy.data.base import tensor_view

    dataset = graph.dataset
    seeds = np.ascontiguousarray(dataset.train_idx[: cfg.batch_size])
    max_fanout = max(cfg.fanouts)
    if cfg.frontend == "pyg":
        from torch_geometric.data import Data

        from dgl_zerocopy.pyg import NeighborLoader, NeighborSampler
        from dgl_zerocopy.pyg.datasets import to_pyg
        from dgl_zerocopy.store.feature_store import FeatureStore
        from dgl_zerocopy.training.pyg_train import BACKENDS

        full = to_pyg(dataset, masks=False)
        data = Data(y=full.y, edge_index=full.edge_index, num_nodes=full.num_nodes)
        del full
        with FeatureStore(dataset.features, backend=BACKENDS[cfg.feature_source], device=device) as store:
            sampler = NeighborSampler(
                data, num_neighbors=list(cfg.fanouts), device=device if cfg.sampler == "gpu" else None, graph_placement=cfg.graph_placement
            )
            loader = NeighborLoader(
                data,
                input_nodes=tensor_view(seeds),
                batch_size=cfg.batch_size,
                neighbor_sampler=sampler,
                features={"x": store},
                device=device,
                num_neighbors=list(cfg.fanouts),
            )
            try:
                return check_batch(dataset, regenerated, pyg_batch(next(iter(loader)), cfg.fanouts), max_fanout=max_fanout)
            finally:
                loader.close()
    from dgl_zerocopy.training.sources import SamplerRequest, make_source

    source = make_source(
        cfg.feature_source, dataset, cfg.fanouts, device, prefetch=0, seed=cfg.seed, compression=cfg.feature_compression, sampling=SamplerRequest.of(cfg)
    )
    try:
        from dgl_zerocopy.loading.timing import StageTimer

        blocks, x, y = next(iter(source.batches(tensor_view(seeds), cfg.batch_size, shuffle=False, timer=StageTimer())))
        codec = source.features.codec if hasattr(source, "features") else None
        return check_batch(dataset, regenerated, dgl_batch(seeds, blocks, x, y, cfg.fanouts), codec=codec, max_fanout=max_fanout)
    finally:
        source.close()


def run_route(route: str, args: argparse.Namespace, graph, regenerated: Regenerated, cuda: bool, dgl_cuda: bool) -> dict:
    """Check ``route``'s first batch, then train it: its row (:data:`FIELDS` and the check's counts)."""
    from dgl_zerocopy.loading.gpu_sampling import emulate_on_cpu
    from dgl_zerocopy.training.pyg_train import train_pyg
    from dgl_zerocopy.training.train import train

    keys, note = route_config(route, cuda, dgl_cuda)
    cfg = synthetic_config(args, eval_batch_size=args.eval_batch_size, prefetch=args.prefetch, seed=args.seed, device="cuda" if cuda else "cpu", **keys)
    device = torch.device("cuda" if cuda else "cpu")
    row = {"route": route, "title": TITLES[route], "status": "ok", "note": note, **{k: v for k, v in keys.items()}}
    stand_in = emulate_on_cpu("reference") if cfg.sampler == "gpu" and not cuda else contextlib.nullcontext()
    with stand_in, PeakMemory(device) as memory:
        started = time.perf_counter()
        row.update({f"check_{k}": v for k, v in first_batch(cfg, graph, device, regenerated).items()})
        row["check_s"] = time.perf_counter() - started
        history = (train_pyg if cfg.frontend == "pyg" else train)(cfg, graph.dataset, progress=False)
    measured = history[1:] or history
    times = [h.epoch_time for h in measured]
    wait = float(np.median([h.stages.get("wait", 0.0) for h in measured]))
    compute = float(np.median([h.stages.get("compute", 0.0) for h in measured]))
    row.update(
        epoch_s=float(np.median(times)),
        epoch_min_s=min(times),
        epoch_max_s=max(times),
        wait_s=wait,
        compute_s=compute,
        wait_share=wait / (wait + compute) if wait + compute else float("nan"),
        test_acc=history[-1].test_acc,
        host_peak_gb=memory.peak / 1e9,
        device_peak_gb=memory.device_peak / 1e9,
        route_s=time.perf_counter() - started,
    )
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fraction", type=float, default=0.25, help="share of papers100M's nodes (default 0.25: 27.8 M nodes)")
    parser.add_argument("--routes", default=",".join(ROUTES), help=f"comma separated, in this order (default {','.join(ROUTES)})")
    parser.add_argument("--epochs", type=int, default=3, help="epoch 0 warms up; the median of the others is reported (default 3)")
    parser.add_argument("--fanouts", default="15,10,5", help="DGL's order: the input layer first (default 15,10,5)")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--eval-batch-size", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--prefetch", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, help="threads generating the graph (default: every core this process may use)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="cpu: every route's CPU stand-in (the dry run)")
    parser.add_argument("--time-limit", type=float, help="start no route after this many seconds (its row: skipped: time limit)")
    parser.add_argument("--plan-only", action="store_true", help="print the sizes and the estimated seconds, and exit")
    parser.add_argument("--out", default="papers_epoch", help="result file stem under bench/results/, or a path (without suffix) elsewhere")
    args = parser.parse_args(argv)
    began = time.monotonic()
    args.routes = chosen(parser, args.routes, ROUTES, "route")
    if not 0.0 < args.fraction <= 1.0:
        parser.error(f"--fraction must be in (0, 1], but got {args.fraction}")
    if args.epochs < 1 or (args.workers is not None and args.workers < 1):
        parser.error("--epochs and --workers must be positive")
    args.fanouts = [int(f) for f in args.fanouts.split(",")]
    from dgl_zerocopy.data.papers_disk import papers100m_spec
    from dgl_zerocopy.data.papers_memory import default_workers, generate_in_memory

    workers = args.workers or default_workers()
    estimate = plan(args, workers)
    print(
        f"papers_epoch plan: {args.fraction:g} of papers100M: {estimate['nodes']:,} nodes, about {estimate['edges_about'] / 1e9:.2f} B in-edges, "
        f"{estimate['features_gb']:.1f} GB of features + {estimate['indices_gb']:.1f} GB of indices; {estimate['batches_per_epoch']} batches an epoch; "
        f"estimated {estimate['total_s']:.0f} s (" + ", ".join(f"{k} {v:.0f} s" for k, v in estimate["seconds"].items()) + ") from PLAN_COSTS (assumptions)",
        flush=True,
    )
    if args.plan_only:
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        print("papers_epoch.py: --device cuda, but torch.cuda.is_available() is False; use --device cpu for the dry run", file=sys.stderr)
        return 2
    cuda = args.device != "cpu" and torch.cuda.is_available()
    dgl_cuda = False
    if cuda:
        with contextlib.suppress(Exception):  # no DGL: route d is our CPU route
            from dgl_zerocopy.loading.dgl_options import dgl_has_cuda

            dgl_cuda = dgl_has_cuda()
    graph = generate_in_memory(papers100m_spec(args.fraction, seed=args.seed), workers=workers)
    meta = {
        "command": command_line(),
        "machine": machine(),
        "device": torch.cuda.get_device_name() if cuda else "cpu (no GPU: every route's CPU stand-in, not GPU figures)",
        "graph": f"{graph.dataset.summary()}; generated in {graph.seconds:.1f} s on {workers} threads, features in {graph.table.method} pages",
        "setup": f"GraphSAGE, fanouts {args.fanouts}, batch {args.batch_size}, hidden {args.hidden}, prefetch {args.prefetch}; "
        f"median (min-max) over epochs 1..{args.epochs - 1} (epoch 0 warms up); test accuracy after the last",
        "plan_s": round(estimate["total_s"], 1),
    }
    print(f"papers_epoch: {meta['graph']}", flush=True)
    regenerated = Regenerated(graph.layout)
    rows = []
    try:
        for route in args.routes:
            if args.time_limit is not None and time.monotonic() - began > args.time_limit:
                rows.append({"route": route, "title": TITLES[route], "status": TIME_LIMIT_STATUS})
            else:
                try:
                    rows.append(run_route(route, args, graph, regenerated, cuda, dgl_cuda))
                except Exception as e:  # noqa: BLE001 - a failing route becomes a row; the others still run
                    traceback.print_exc()
                    rows.append(
                        {"route": route, "title": TITLES[route], "status": f"failed: {type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"[:300]}
                    )
                gc.collect()  # the route's stores and loaders: their views of the table go before the next route pins it
            print(f"papers_epoch route {route}: " + ", ".join(f"{k} {_text(rows[-1].get(k))}" for k in FIELDS[2:] if k in rows[-1]), flush=True)
            _save(args.out, rows, meta)  # each route's row as it finishes: a run stopped from outside keeps them
    finally:
        regenerated = None
        gc.collect()
        try:
            graph.close()
        except RuntimeError as e:  # a view still alive: unmapped at exit anyway
            print(f"papers_epoch: {e}", file=sys.stderr)
    csv_path, _ = _save(args.out, rows, meta)
    _plot(rows, meta, csv_path.with_suffix(".png"))
    print(f"\n# {meta['command']}\n# {meta['device']}; {meta['machine']}\n# {meta['graph']}\n# {meta['setup']}")
    return 0 if all(r["status"] == "ok" for r in rows) else 1


def _text(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _save(out: str, rows: list[dict], meta: dict):
    """The rows so far as CSV and JSON: ``out`` is a stem under bench/results/, or a path without suffix."""
    path = Path(out)
    if path.parent == Path("."):
        return write_results(out, rows, meta)
    return write_results(path.name, rows, meta, folder=path.parent)


def _plot(rows: list[dict], meta: dict, path: Path) -> None:
    plt = pyplot()

    done = [r for r in rows if r.get("status") == "ok"]
    fig, ax = plt.subplots(figsize=(1.8 * max(1, len(done)) + 2, 4))
    labels = [f"{r['route']}: {r['title']}".replace(": ", "\n", 1) for r in done]
    wait = np.array([min(r["wait_s"], r["epoch_s"]) for r in done])
    epoch = np.array([r["epoch_s"] for r in done])
    ax.bar(labels, epoch - wait, label="step (compute, optimizer, loop)")
    ax.bar(labels, wait, bottom=epoch - wait, label="waiting for the batch")
    for i, r in enumerate(done):
        ax.text(i, r["epoch_s"], f"acc {r['test_acc']:.3f}", ha="center", va="bottom", fontsize=7)
    ax.set_ylabel("seconds per epoch")
    ax.set_title(f"{meta['device']}\n{meta['graph']}", fontsize=7)
    ax.tick_params(axis="x", labelsize=7)
    ax.legend(fontsize=7)
    save_figure(fig, path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
