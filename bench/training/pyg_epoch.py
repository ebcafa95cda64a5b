"""An epoch of GraphSAGE-style loading through four loaders, side by side: our PyG route, our DGL route, DGL's loader, PyG's loader.

On the products-shaped synthetic graph (``dgl-zerocopy train``'s default dataset: 200,000 nodes, mean
in-degree 19, 100-dim float32 features, 47 classes, 8 % training nodes), each route deals the training
nodes in shuffled batches of ``--batch-size`` seeds, samples ``--fanouts`` (input layer first, as DGL's;
PyG's ``num_neighbors`` is the same list turned around) and gathers every sampled node's feature row and
the seeds' labels:

  pyg        dgl_zerocopy.pyg.NeighborLoader(data, num_neighbors, input_nodes=train, batch_size, shuffle=True,
             device=, prefetch=): our NumPy sampler on the CPU (our kernels on a GPU), features by our store
  dgl-route  dgl_zerocopy.DataLoader(g, train, dgl.dataloading.NeighborSampler(fanouts, prefetch_node_feats=["feat"],
             prefetch_labels=["label"]), device=, prefetch=): the one-line change of a DGL script; DGL's sampler
             on the CPU (``use_uva=True``: our kernels, on a GPU), features by our store
  dgl        dgl.dataloading.DataLoader(g, train, NeighborSampler(fanouts, prefetch_node_feats=["feat"],
             prefetch_labels=["label"]), device=): DGL's own path (on a GPU it needs a CUDA build of DGL)
  pyg-own    torch_geometric.loader.NeighborLoader(data, ...): PyG's own; PyPI's torch-geometric without
             pyg-lib or torch-sparse raises ImportError at the first batch, and the row says so

``--model sage`` adds a forward and backward pass of a 3-layer GraphSAGE (hidden ``--hidden``, mean
aggregation) per batch: ``torch_geometric.nn.SAGEConv`` over the PyG batch (every sampled node, as PyG's
example does), ``dgl_zerocopy.nn.SAGEConv`` (dgl.nn's, in plain torch) over the DGL blocks; ``none`` (the
default) times the loading alone. Before timing, each route's first batch is checked: the seeds first
(PyG) or as output nodes (DGL), every feature row equal to the table's row of its node, every label
equal. Then ``--epochs`` epochs (epoch 0 warms up: threads, buffers, caches), one epoch of each route in turn,
so that the load of a shared machine, which comes and goes, falls on every route alike: per epoch its
seconds (the device synchronised before and after), the process's CPU-seconds (all threads: less disturbed
by other work on a shared machine), batches, sampled edges and nodes; per batch (CPU
only) the time between two batches handed over. Rows: epoch seconds median and spread over epochs 1.., each batch's ms median
and quartiles, sampled edges per second, and the ratio to DGL's loader (``x_dgl``). PyG's batches sample
each node once, at the hop where it joined; DGL's every node of the layer before again: DGL's batches
hold more edges (docs/pyg.md). ``--prefetch 0,2`` gives our routes a row per value (DGL's and PyG's
loaders run as they come). A route that raises becomes a row "failed: ..." (exit 1); one that cannot run
here a row "skipped: ...". The rows are written after every round of epochs; with ``--time-limit`` no
route is built and no round started after it, and the rows keep the rounds done.

    python bench/training/pyg_epoch.py [--num-nodes 200000] [--epochs 5] [--routes pyg,dgl-route,dgl,pyg-own] [--prefetch 0,2]
        [--model none|sage] [--device cpu|cuda] [--max-batches N] [--time-limit S] [--out STEM]
    dgl-zerocopy bench pyg_epoch   (the same)

Writes STEM.{csv,json,png} (default bench/results/pyg_epoch) with the exact command in their header;
prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import textwrap
import time
import traceback
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: common.py
from common import RESULTS, TIME_LIMIT_STATUS, chosen, command_line, machine, markdown_table, median_bars, pyplot, save_figure, write_results  # noqa: E402

ROUTES = ("pyg", "dgl-route", "dgl", "pyg-own")
OURS = ("pyg", "dgl-route")  # the routes with a prefetch knob
WHAT = {
    "pyg": "dgl_zerocopy.pyg.NeighborLoader (our PyG route)",
    "dgl-route": "dgl_zerocopy.DataLoader (our DGL route)",
    "dgl": "dgl.dataloading.DataLoader (DGL's own)",
    "pyg-own": "torch_geometric.loader.NeighborLoader (PyG's own)",
}
STATS = ("median", "q1", "q3", "min", "max")
NUMBERS = (*(f"epoch_s_{k}" for k in STATS), "batch_ms_median", "batch_ms_q1", "batch_ms_q3", "medges_per_s_median", "cpu_s_median")
KEYS = ("route", "what", "device", "prefetch", "model", "num_nodes", "num_edges", "fanouts", "batch_size", "epochs", *NUMBERS)
KEYS += ("batches_per_epoch", "edges_per_batch", "nodes_per_batch", "build_s", "x_dgl", "checked", "status", "wall_s")


# -- the routes ----------------------------------------------------------------------------------------


def unavailable(route: str, device: torch.device) -> str | None:
    """Why ``route`` cannot run here, or None."""
    needs = {"pyg": ("dgl_zerocopy.pyg",), "pyg-own": ("torch_geometric.loader",), "dgl-route": ("dgl",), "dgl": ("dgl",)}[route]
    for module in needs:
        try:
            __import__(module)
        except Exception as e:  # noqa: BLE001 - ImportError, or DGL failing to load its library
            return f"skipped: import {module} failed: {type(e).__name__}: {(str(e).splitlines() or [''])[0]}"[:300]
    if route == "dgl" and device.type == "cuda":
        from dgl_zerocopy.loading.dgl_options import dgl_has_cuda

        if not dgl_has_cuda():
            return "skipped: DGL's loader puts DGL blocks on the device, and this DGL is a CPU build (PyPI's)"
    return None


def pyg_data(dataset):
    """The dataset as PyG's ``Data``: ``x``, ``y`` and ``edge_index`` (sources, destinations) of the CSC."""
    from torch_geometric.data import Data

    from dgl_zerocopy.store.host_files import tensor_view

    indptr = torch.from_numpy(dataset.indptr)
    dst = torch.repeat_interleave(torch.arange(dataset.num_nodes), indptr[1:] - indptr[:-1], output_size=dataset.num_edges)
    edge_index = torch.stack([torch.from_numpy(dataset.indices).long(), dst])
    return Data(x=tensor_view(np.ascontiguousarray(dataset.features)), y=torch.from_numpy(dataset.labels), edge_index=edge_index, num_nodes=dataset.num_nodes)


def build_loader(route: str, dataset, graphs: dict, args, device: torch.device, prefetch: int | None):
    """The route's loader over the training nodes (module docstring); ``graphs`` caches the PyG data and DGL graph."""
    train = torch.from_numpy(dataset.train_idx)
    hops = list(reversed(args.fanouts))
    if route in ("pyg", "pyg-own"):
        if "pyg" not in graphs:
            graphs["pyg"] = pyg_data(dataset)
        if route == "pyg":
            from dgl_zerocopy.pyg import NeighborLoader

            return NeighborLoader(graphs["pyg"], hops, input_nodes=train, batch_size=args.batch_size, shuffle=True, device=device, prefetch=prefetch)
        from torch_geometric.loader import NeighborLoader as PygNeighborLoader

        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*without a 'pyg-lib' installation.*")
            return PygNeighborLoader(graphs["pyg"], hops, input_nodes=train, batch_size=args.batch_size, shuffle=True)
    import dgl

    if "dgl" not in graphs:
        graphs["dgl"] = dataset.to_dgl(with_data=True)
    g = graphs["dgl"]
    sampler = dgl.dataloading.NeighborSampler(args.fanouts, prefetch_node_feats=["feat"], prefetch_labels=["label"])
    if route == "dgl-route":  # the one-line change: our DataLoader, the same sampler and graph
        import dgl_zerocopy

        options = {"use_uva": True} if device.type == "cuda" else {}
        return dgl_zerocopy.DataLoader(g, train, sampler, device=device, batch_size=args.batch_size, shuffle=True, prefetch=prefetch, **options)
    return dgl.dataloading.DataLoader(g, train, sampler, device=device, batch_size=args.batch_size, shuffle=True)


def parts(route: str, batch, device: torch.device) -> dict:
    """A batch's pieces: ``x`` (every sampled node's row), ``y`` (the seeds' labels), ``nodes`` (ids of
    ``x``'s rows), ``seeds``, ``edges`` (sampled), and what the model reads (``graph``)."""
    if route in ("pyg", "pyg-own"):
        if batch.x.device != device:  # PyG's own loader leaves the batch on the CPU: the user's .to(device)
            batch = batch.to(device)
        seeds = batch.n_id[: batch.batch_size]
        return {"x": batch.x, "y": batch.y[: batch.batch_size], "nodes": batch.n_id, "seeds": seeds, "edges": batch.edge_index.size(1), "graph": batch}
    input_nodes, output_nodes, blocks = batch
    x, y = blocks[0].srcdata["feat"], blocks[-1].dstdata["label"]
    return {"x": x, "y": y, "nodes": input_nodes, "seeds": output_nodes, "edges": sum(int(b.num_edges()) for b in blocks), "graph": blocks}


def check_first(route: str, loader, dataset, device: torch.device) -> str:
    """Check the route's first batch against the tables (module docstring); what was checked."""
    torch.manual_seed(0)
    p = parts(route, next(iter(loader)), device)
    nodes, seeds = p["nodes"].long().cpu(), p["seeds"].long().cpu()
    train = torch.from_numpy(dataset.train_idx)
    if not bool(torch.isin(seeds, train).all()) or seeds.numel() == 0:
        raise AssertionError(f"{route}: the batch's seeds are not training nodes")
    if not torch.equal(nodes[: seeds.numel()], seeds):
        raise AssertionError(f"{route}: the batch's first nodes are not its seeds")
    if not torch.equal(p["x"].cpu(), torch.from_numpy(np.ascontiguousarray(dataset.features))[nodes]):
        raise AssertionError(f"{route}: a feature row differs from the table's row of its node")
    if not torch.equal(p["y"].long().cpu(), torch.from_numpy(dataset.labels)[seeds]):
        raise AssertionError(f"{route}: a label differs from the seed's label")
    return "batch 0: seeds first and training nodes, every feature row and label equal to the table's"


class Model(torch.nn.Module):
    """3-layer GraphSAGE (mean): PyG's ``SAGEConv`` over a PyG batch, ``dgl_zerocopy.nn.SAGEConv`` over blocks."""

    def __init__(self, pyg: bool, in_dim: int, hidden: int, classes: int, layers: int) -> None:
        super().__init__()
        dims = [in_dim] + [hidden] * (layers - 1) + [classes]
        if pyg:
            from torch_geometric.nn import SAGEConv

            self.convs = torch.nn.ModuleList(SAGEConv(a, b) for a, b in zip(dims[:-1], dims[1:]))
        else:
            from dgl_zerocopy.nn import SAGEConv

            self.convs = torch.nn.ModuleList(SAGEConv(a, b, "mean") for a, b in zip(dims[:-1], dims[1:]))
        self.pyg = pyg

    def forward(self, graph, x: torch.Tensor, seeds: int) -> torch.Tensor:
        for i, conv in enumerate(self.convs):
            x = conv(x, graph.edge_index) if self.pyg else conv(graph[i], x)
            if i < len(self.convs) - 1:
                x = torch.relu(x)
        return x[:seeds]


# -- one route, timed ----------------------------------------------------------------------------------


class Route:
    """One row's loader (built and checked), its model and optimizer (``--model sage``) and its raw figures:
    per epoch seconds, batches, sampled edges and nodes; per batch seconds (CPU, epochs 1..)."""

    def __init__(self, route: str, loader, dataset, args, device: torch.device) -> None:
        self.route, self.loader, self.device, self.max_batches = route, loader, device, args.max_batches
        self.model = self.optimizer = None
        if args.model == "sage":
            pyg = route in ("pyg", "pyg-own")
            self.model = Model(pyg, dataset.features.shape[1], args.hidden, int(dataset.num_classes), len(args.fanouts)).to(device)
            self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.raw = {"seconds": [], "cpu_seconds": [], "batches": [], "edges": [], "nodes": [], "batch_seconds": []}

    def epoch(self, epoch: int) -> None:
        """One epoch through the loader, timed (the device synchronised before and after)."""
        np.random.seed(epoch)  # DGL's loaders shuffle with NumPy's global generator, PyG's with torch's
        torch.manual_seed(epoch)
        sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
        sync()
        cpu_start, start = time.process_time(), time.perf_counter()
        last, batches, edges, nodes = start, 0, 0, 0
        for batch in self.loader:
            p = parts(self.route, batch, self.device)
            if self.model is not None:
                loss = torch.nn.functional.cross_entropy(self.model(p["graph"], p["x"], p["seeds"].numel()), p["y"].long())
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
            batches, edges, nodes = batches + 1, edges + p["edges"], nodes + p["nodes"].numel()
            if self.device.type == "cpu" and epoch > 0:  # on a GPU a batch ends at the epoch's sync
                now = time.perf_counter()
                self.raw["batch_seconds"].append(now - last)
                last = now
            if self.max_batches and batches >= self.max_batches:
                break
        sync()
        self.raw["seconds"].append(time.perf_counter() - start)
        self.raw["cpu_seconds"].append(time.process_time() - cpu_start)
        for key, value in (("batches", batches), ("edges", edges), ("nodes", nodes)):
            self.raw[key].append(value)


def spread(values: list[float]) -> dict[str, float]:
    """Median, quartiles (inclusive: within the values, however few) and extremes of ``values``."""
    q = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else [values[0]] * 3
    return {"median": statistics.median(values), "q1": q[0], "q3": q[2], "min": min(values), "max": max(values)}


def summary_row(row: dict, raw: dict) -> dict:
    """The row's figures from :func:`run_route`'s ``raw``, epoch 0 left out where there are more."""
    timed = slice(1, None) if len(raw["seconds"]) > 1 else slice(None)
    seconds, batches, edges, nodes = (raw[k][timed] for k in ("seconds", "batches", "edges", "nodes"))
    epoch = spread(seconds)
    one = spread([s * 1e3 for s in raw["batch_seconds"]]) if raw["batch_seconds"] else dict.fromkeys(STATS, float("nan"))
    return {
        **row,
        **{f"epoch_s_{k}": epoch[k] for k in STATS},
        **{f"batch_ms_{k}": one[k] for k in ("median", "q1", "q3")},
        "medges_per_s_median": float(np.median([e / s / 1e6 for e, s in zip(edges, seconds)])),
        "cpu_s_median": float(np.median(raw["cpu_seconds"][timed])),
        "batches_per_epoch": float(np.mean(batches)),
        "edges_per_batch": sum(edges) / max(sum(batches), 1),
        "nodes_per_batch": sum(nodes) / max(sum(batches), 1),
    }


# -- the run -------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-nodes", type=int, default=200_000, help="nodes of the generated graph (default 200,000: dgl-zerocopy train's)")
    parser.add_argument("--avg-degree", type=float, default=20.0, help="mean in-degree before duplicates are dropped (default 20, as train's)")
    parser.add_argument("--fanouts", default="15,10,5", help="per layer, input layer first, as DGL's NeighborSampler")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--epochs", type=int, default=5, help="epoch 0 warms up; the others are timed")
    parser.add_argument("--max-batches", type=int, default=0, help="stop each epoch after this many batches (0: the whole epoch)")
    parser.add_argument("--routes", default=",".join(ROUTES), help=f"comma separated, of {', '.join(ROUTES)} (default all)")
    parser.add_argument("--prefetch", default="0,2", help="comma separated: a row per value for our routes (default 0,2)")
    parser.add_argument("--model", choices=("none", "sage"), default="none", help="none: loading alone; sage: a forward and backward per batch")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--device", default="cpu", help="cpu, or cuda: our routes sample and gather there")
    parser.add_argument("--time-limit", type=float, default=0, help="seconds from the start: routes not started by then become skipped rows (0: none)")
    parser.add_argument("--out", default=str(RESULTS / "pyg_epoch"), help="result path without suffix (default bench/results/pyg_epoch)")
    args = parser.parse_args(argv)
    for flag, least, example in (("fanouts", 1, "15,10,5"), ("prefetch", 0, "0,2")):
        text = getattr(args, flag)
        try:
            values = [int(v) for v in text.split(",")]
        except ValueError:
            values = []
        if not values or min(values) < least:
            parser.error(f"--{flag} must be comma-separated ints >= {least}, e.g. {example}, but got {text!r}")
        setattr(args, flag, values)
    args.routes = chosen(parser, args.routes, ROUTES, "route")
    for flag in ("num_nodes", "batch_size", "epochs", "hidden"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1, but got {getattr(args, flag)}")
    if args.max_batches < 0:
        parser.error(f"--max-batches must be 0 or more, but got {args.max_batches}")
    try:
        args.device = torch.device(args.device)
    except RuntimeError:
        parser.error(f"--device must be cpu or cuda[:N], but got {args.device!r}")
    if args.device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda, but torch.cuda.is_available() is False; use --device cpu")
    return args


def main(argv: list[str] | None = None) -> int:
    began = time.perf_counter()
    args = parse_args(argv)
    from dgl_zerocopy.data import SyntheticSpec, load_dataset

    dataset = load_dataset("synthetic", synthetic=SyntheticSpec(num_nodes=args.num_nodes, avg_degree=args.avg_degree))
    device = args.device
    meta = {
        "command": command_line(),
        "machine": machine(),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (no GPU: every figure here is a CPU figure)",
        "graph": f"products-shaped synthetic (dgl_zerocopy.data): {dataset.summary()}",
        "loading": f"fanouts {args.fanouts} (input layer first; PyG's num_neighbors {list(reversed(args.fanouts))}), batch {args.batch_size}, "
        f"shuffled training nodes, model {args.model}, {args.epochs} epochs (epoch 0 warms up), the routes' epochs interleaved"
        + (f", at most {args.max_batches} batches an epoch" if args.max_batches else ""),
        "threads": f"torch {torch.get_num_threads()}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, {os.cpu_count()} CPUs",
        "load": "load average (1, 5, 15 min) at the start: " + ", ".join(f"{v:.2f}" for v in os.getloadavg()),
    }
    print(f"pyg_epoch: {meta['graph']}\npyg_epoch: {meta['loading']}", flush=True)
    named = str(device) if device.type == "cpu" else f"{torch.cuda.get_device_name(device)} ({device})"  # the GPU named in every row
    base = {"device": named, "model": args.model, "num_nodes": dataset.num_nodes, "num_edges": dataset.num_edges}
    base.update(fanouts=",".join(map(str, args.fanouts)), batch_size=args.batch_size, epochs=args.epochs)
    entries, graphs = [], {}  # per row: [row, Route or None, status or None, seconds it took]
    for route in args.routes:  # every loader built and checked first
        for prefetch in args.prefetch if route in OURS else [None]:
            row = {"route": route, "what": WHAT[route], **base, "prefetch": "-" if prefetch is None else prefetch}
            started = time.perf_counter()
            why = TIME_LIMIT_STATUS if args.time_limit and started - began > args.time_limit else unavailable(route, device)
            state = loader = None
            if why is None:
                try:
                    loader = build_loader(route, dataset, graphs, args, device, prefetch)
                    row["build_s"] = time.perf_counter() - started
                    row["checked"] = check_first(route, loader, dataset, device)
                    state = Route(route, loader, dataset, args, device)
                except Exception as e:  # noqa: BLE001 - a failing route becomes a row; the others still run
                    why = _failure(route, e)
                    _close(loader)
            entries.append([row, state, why, time.perf_counter() - started])
    for epoch in range(args.epochs):  # one epoch of each route in turn: a shared machine's load falls on all alike
        if epoch and args.time_limit and time.perf_counter() - began > args.time_limit:
            break
        for entry in entries:
            row, state, why, _ = entry
            if state is None or why is not None:
                continue
            started = time.perf_counter()
            try:
                state.epoch(epoch)
            except Exception as e:  # noqa: BLE001 - a failing route becomes a row; the others still run
                entry[2] = _failure(row["route"], e)
            entry[3] += time.perf_counter() - started
        rows = _rows(entries)
        done = [(r, e[1].raw["seconds"][-1]) for r, e in zip(rows, entries) if r["status"] == "ok"]
        print(f"pyg_epoch: epoch {epoch}: " + "; ".join(f"{_name(r)} {seconds:.2f} s" for r, seconds in done), flush=True)
        _save(Path(args.out), rows, meta, entries)
    for _, state, _, _ in entries:
        _close(state.loader if state else None)
    rows = _rows(entries)
    meta["load"] += "; at the end: " + ", ".join(f"{v:.2f}" for v in os.getloadavg())
    csv_path, _ = _save(Path(args.out), rows, meta, entries)
    _plot(rows, meta, csv_path.with_suffix(".png"))
    print("\n".join(f"pyg_epoch: {_line(r)}" for r in rows))
    print(f"\n# {meta['command']}\n# {meta['device']}; {meta['machine']}\n# {meta['graph']}\n# {meta['loading']}\n\n{markdown(rows)}")
    print("\nwrote " + ", ".join(os.path.relpath(p) for p in (csv_path, csv_path.with_suffix(".json"), csv_path.with_suffix(".png"))))
    return 1 if any(str(r["status"]).startswith("failed") for r in rows) else 0


def _rows(entries: list) -> list[dict]:
    """The rows from the epochs run so far: a route with none is skipped for time."""
    rows = []
    for row, state, why, seconds in entries:
        if why is None and (state is None or not state.raw["seconds"]):
            why = TIME_LIMIT_STATUS
        row = {**row, **dict.fromkeys(NUMBERS, float("nan")), "status": why} if why is not None else {**summary_row(row, state.raw), "status": "ok"}
        rows.append({k: row.get(k, "" if k == "checked" else float("nan")) for k in KEYS} | {"wall_s": seconds})
    return rows


def _close(loader) -> None:
    if hasattr(loader, "close"):
        loader.close()


def _failure(route: str, e: Exception) -> str:
    """A row's status for an error: PyG's own loader without pyg-lib or torch-sparse raises ImportError at its
    first batch (a PyPI install: skipped, as it is); anything else failed."""
    if route == "pyg-own" and isinstance(e, ImportError):
        return f"skipped: ImportError: {(str(e).splitlines() or [''])[0]}"[:300]
    traceback.print_exc()
    return f"failed: {type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"[:300]


def _save(stem: Path, rows: list[dict], meta: dict, entries: list):
    """Write the rows so far (each route's epoch seconds against DGL's loader's, where that ran) as CSV and JSON,
    each route's raw figures in the JSON."""
    dgl = next((r["epoch_s_median"] for r in rows if r["route"] == "dgl" and r["status"] == "ok"), float("nan"))
    for r in rows:
        r["x_dgl"] = dgl / r["epoch_s_median"]
    raws = {_name(r): state.raw for r, (_, state, _, _) in zip(rows, entries) if state is not None}
    return write_results(stem.name, rows, meta, stem.parent, extra={"raw": raws})


def _name(r: dict) -> str:
    return r["route"] if r["prefetch"] == "-" else f"{r['route']} prefetch {r['prefetch']}"


def _line(r: dict) -> str:
    if r["status"] != "ok":
        return f"{_name(r)}: {r['status']}"
    return (
        f"{_name(r)}: epoch {r['epoch_s_median']:.2f} s ({r['epoch_s_q1']:.2f}-{r['epoch_s_q3']:.2f}), batch {r['batch_ms_median']:.1f} ms, "
        f"{r['medges_per_s_median']:.2f} M sampled edges/s, {r['edges_per_batch']:,.0f} edges and {r['nodes_per_batch']:,.0f} nodes per batch "
        f"({r['wall_s']:.1f} s)"
    )


def markdown(rows: list[dict]) -> str:
    """The rows as a markdown table: epoch seconds and batch ms with their spread, edges/s, against DGL's loader."""
    header = (
        "| route | prefetch | epoch s median (q1–q3, min–max) | batch ms median (q1–q3) | CPU-s per epoch | M sampled edges/s | edges per batch "
        "| nodes per batch | DGL's epoch / this | status |"
    )
    return markdown_table(header, map(_table_row, rows), "llrrrrrrrl")


def _cell(v, fmt: str = ".2f") -> str:
    return "–" if not isinstance(v, (int, float)) or v != v else format(v, fmt)


def _table_row(r: dict) -> str:
    if r["status"] == "ok":
        return (
            f"| {r['route']} | {r['prefetch']} | {_cell(r['epoch_s_median'])} ({_cell(r['epoch_s_q1'])}–{_cell(r['epoch_s_q3'])}, "
            f"{_cell(r['epoch_s_min'])}–{_cell(r['epoch_s_max'])}) | {_cell(r['batch_ms_median'], '.1f')} ({_cell(r['batch_ms_q1'], '.1f')}–"
            f"{_cell(r['batch_ms_q3'], '.1f')}) | {_cell(r['cpu_s_median'])} | {_cell(r['medges_per_s_median'])} | {r['edges_per_batch']:,.0f} | "
            f"{r['nodes_per_batch']:,.0f} | {_cell(r['x_dgl'])} | ok |"
        )
    return f"| {r['route']} | {r['prefetch']} | – | – | – | – | – | – | – | {r['status']} |"


def _plot(rows: list[dict], meta: dict, path: Path) -> None:
    plt = pyplot()

    done = [r for r in rows if r["status"] == "ok"]
    fig, axes = plt.subplots(1, 2, figsize=(1.8 * max(len(done), 1) + 5, 4.2))
    colour = {"pyg": "tab:red", "dgl-route": "tab:blue", "dgl": "tab:orange", "pyg-own": "tab:green"}
    colours = [colour[r["route"]] for r in done]
    labels = [_name(r).replace(" prefetch ", "\nprefetch ") for r in done]
    for ax, key, label in ((axes[0], "epoch_s", "seconds per epoch"), (axes[1], "batch_ms", "ms per batch")):
        median_bars(ax, done, key, colours, labels)  # no per-batch figure on a GPU: an empty place
        ax.set_ylabel(label + " (median, q1–q3)")
    fig.suptitle("\n".join(textwrap.fill(meta[k], 170) for k in ("device", "graph", "loading")), fontsize=7)
    save_figure(fig, path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
