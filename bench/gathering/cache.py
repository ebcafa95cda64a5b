"""GPU feature cache: hit rate and modelled PCIe bytes per epoch, per policy and cache size.

For each graph: the policies of dgl_zerocopy/store/cache/ (``"degree"``: the degree sampling follows,
out-degree for DGL's in-edge sampling; ``"in_degree"``; ``"out_degree"``; ``"presample"``) choose
the cached rows for caches of 1, 5, 10, 20 and 50 % of the rows (one byte budget per size, the same
for every policy: the rows and the slot map); then one training epoch is sampled with another seed
than the presampling pass (its own batch order and neighbour draws: no leakage) and every batch's
input nodes are split into hits and misses by the cache's own slot map (``split_hits``).
``oracle`` is no policy: the rows ranked by how often the evaluated epoch's own batches read them,
the best any static cache of that size could do on that epoch. Checked first: the cached gather
of a sampled batch equals ``features[input_nodes]``. On a bidirected graph (all but ``directed``
below) in- and out-degree are equal, so ``degree``, ``in_degree`` and ``out_degree`` cache the
same rows.

PCIe bytes per epoch = rows read from host memory x modelled link bytes per row of the aligned
zero-copy kernel (dgl_zerocopy/cuda/gather/pcie_model.py: 32-byte sectors fetched plus 24 bytes of TLP
overhead per 128-byte-line request, from the emulated kernel's loads). Every row costs the same, so
the share of bytes a cache saves is its hit rate. A model, not a measurement.

Workloads: the products-shaped and papers100M-shaped synthetic graphs, scaled down: fewer nodes
and the batch scaled by the same factor (products: 1024 seeds at 2,449,029 nodes, fanouts
15,10,5; papers100M: 1024 seeds at 111,059,956 nodes, fanouts 10,10,10), which keeps the batches
per epoch and the share of the graph one batch reaches, on which the hit rate depends; ``directed``,
a directed graph (directed Chung-Lu: each edge's source drawn in proportion to one set of Pareto
weights, its destination to another, independent set, exponent 2.5, 10 out-edges per node on
average, duplicates dropped; 100 float32 features), fanouts 5,5, batches of 64, seeds a random
10 % of the nodes: the case where in- and out-degree disagree; and the real graphs of --data-root
with their shipped configs (fanouts, batch size, training split; with --real-seeds all, every node
is a seed, for many batches an epoch). ``amazon-computers-stored`` and ``amazon-photo-stored``:
those graphs as their files store them, one direction per edge for most pairs (the datasets
symmetrise them), with the same features and seeds, sampled as ``directed`` (fanouts 5,5, batches of
64; their shipped configs take full neighbourhoods, under which every policy caches alike): the
nearest thing to a real directed graph in ../shared/data (ogbn-arxiv is not there).

Repeats (``--repeats R``): repeat ``r`` presamples with seed ``presample_seed + 2r`` and evaluates
with ``eval_seed + 2r``; the directed graph is generated again from seed ``r``. Every repeat is a
row of the CSV; the table printed (and ``summary`` in the JSON) gives the median and the range.

Compressed host features (``--feature-compression fp16,int8``): the cache can hold the host's
codes or decoded rows. For each codec and size, the same byte budget as the fp32 cache of that
size (``cache_mib``) is filled with code rows (``stored`` = ``int8 codes``: 4x the rows for int8)
or with decoded float32 rows (``int8 decoded``: as many rows as fp32); misses cost the link bytes
of a code row either way (the decoding kernel reads codes). Presample policy.

    python bench/gathering/cache.py [--graphs products,papers100m,directed,cora,...] [--products-nodes 200000]
        [--papers-nodes 1000000] [--directed-nodes 50000] [--sizes 1,5,10,20,50] [--data-root ../shared/data]
        [--real-seeds train|all] [--presample-seed 1] [--eval-seed 2] [--repeats 1] [--feature-compression fp16,int8]
        [--out cache]
    dgl-zerocopy bench cache  (the same)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import textwrap
import time
from pathlib import Path

# Hit rates do not depend on speed: sample on one thread, so that the neighbour draws are the same on
# every machine and DGL's OpenMP threads do not spin against other work on a shared one (100 ms per
# batch instead of 2 ms on a busy 2-core machine). Set before DGL and torch load OpenMP.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: common.py
from common import REAL_GRAPH_CONFIGS, command_line, machine, pyplot, save_figure, write_results  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SYNTHETIC = {  # full-size node count, fanouts and batch of the graph each preset is shaped after
    "products": {"full_nodes": 2_449_029, "fanouts": [15, 10, 5], "batch": 1024, "nodes_default": 200_000},
    "papers100m": {"full_nodes": 111_059_956, "fanouts": [10, 10, 10], "batch": 1024, "nodes_default": 1_000_000},
}
# The directed graph: where ranking by in-degree and by the degree sampling follows part ways.
DIRECTED = {"avg_degree": 10.0, "exponent": 2.5, "feat_dim": 100, "fanouts": [5, 5], "batch": 64, "seed_share": 0.1, "nodes_default": 50_000}
REAL = REAL_GRAPH_CONFIGS  # dataset -> its shipped config (as bench/training/accuracy.py trains it)
# The Amazon graphs as their files store them: one direction per edge for most pairs (the datasets
# symmetrise them); the nearest thing to a real directed graph in ../shared/data.
AS_STORED = {"amazon-computers-stored": "amazon-computers", "amazon-photo-stored": "amazon-photo"}
GRAPHS = (*SYNTHETIC, "directed", *REAL, *AS_STORED)
POLICIES = ("degree", "in_degree", "out_degree", "presample")
STYLES = {"degree": "o-", "in_degree": "v--", "out_degree": "^:", "presample": "s-", "oracle": "k:"}
CODE_DTYPES = {"fp16": np.float16, "bf16": np.int16, "int8": np.int8}  # the codes as NumPy holds them (bf16: its bits)
CODE_BYTES = {codec: np.dtype(dtype).itemsize for codec, dtype in CODE_DTYPES.items()}  # bytes per column of a code row


def link_bytes_per_row(row_bytes: int, dtype: np.dtype) -> float:
    """Modelled PCIe link bytes (payload sectors + TLP overhead) per row of the aligned kernel."""
    from dgl_zerocopy.cuda.gather.pcie_model import TLP_OVERHEAD_BYTES, compare

    num_ids = 256
    m = compare(row_bytes, dtype=dtype, num_ids=num_ids, num_rows=1024)["aligned"]
    return (m.fetched_bytes + m.requests * TLP_OVERHEAD_BYTES) / num_ids


def directed_graph(num_nodes: int, seed: int, avg_degree: float = DIRECTED["avg_degree"], exponent: float = DIRECTED["exponent"]):
    """A directed power-law graph (DGL, int64 ids): ``num_nodes * avg_degree`` edges, each source drawn in
    proportion to Pareto weights (tail exponent ``exponent``) and each destination in proportion to
    another, independent set of them; duplicate edges dropped. Out- and in-degrees both follow a power
    law, uncorrelated: a node read often by in-edge sampling (high out-degree) is no more likely to be
    cited often (high in-degree) than any other."""
    import dgl

    rng = np.random.default_rng(seed)
    weights = rng.pareto(exponent - 1.0, size=(2, num_nodes)) + 1.0  # out-weights, in-weights
    edges = int(round(num_nodes * avg_degree))
    src, dst = (np.minimum(np.searchsorted(np.cumsum(w), rng.random(edges) * w.sum(), side="right"), num_nodes - 1) for w in weights)
    return dgl.to_simple(dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=num_nodes))


def workload(name: str, args, repeat: int = 0) -> dict:
    """The graph (DGL), feature table (2-D CPU tensor), seeds, fanouts, batch size and description
    of graph ``name``; ``repeat`` picks the directed graph's seed (the others are the same every repeat)."""
    from dgl_zerocopy.data import SyntheticSpec, load_dataset
    from dgl_zerocopy.data.base import tensor_view

    if name == "directed":
        n, d = args.directed_nodes, DIRECTED
        graph = directed_graph(n, seed=repeat)
        rng = np.random.default_rng([repeat, 1])
        table = torch.from_numpy(rng.standard_normal((n, d["feat_dim"]), dtype=np.float32))
        seeds = torch.from_numpy(np.sort(rng.permutation(n)[: round(d["seed_share"] * n)]))
        how = (
            f"directed power-law graph, {n:,} nodes, {d['avg_degree']:g} edges per node drawn (Chung-Lu, independent out-/in-weights, "
            f"exponent {d['exponent']}, graph seed = repeat), fanouts {','.join(map(str, d['fanouts']))}, batch {d['batch']}, "
            f"seeds: a random {d['seed_share']:.0%} of the nodes"
        )
        return {"graph": graph, "table": table, "fanouts": d["fanouts"], "batch": d["batch"], "how": how, "seeds": seeds}
    if name in SYNTHETIC:
        s = SYNTHETIC[name]
        nodes = args.products_nodes if name == "products" else args.papers_nodes
        spec = SyntheticSpec(num_nodes=nodes) if name == "products" else SyntheticSpec.papers100m_like(num_nodes=nodes)
        batch = max(1, round(s["batch"] * nodes / s["full_nodes"]))
        data = load_dataset("synthetic", synthetic=spec)
        how = (
            f"{name}-shaped synthetic, {nodes:,} nodes (1/{s['full_nodes'] / nodes:.0f} scale), fanouts "
            f"{','.join(map(str, s['fanouts']))}, batch {batch} (= {s['batch']} x the scale), seeds: the training split"
        )
        return {
            "graph": data.to_dgl(),
            "table": tensor_view(np.ascontiguousarray(data.features)),
            "fanouts": s["fanouts"],
            "batch": batch,
            "how": how,
            "seeds": torch.from_numpy(data.train_idx),
        }
    from dgl_zerocopy.training.config import build_config, read_yaml

    if args.data_root is None:
        raise SystemExit(f"graph {name!r} is read from --data-root (e.g. ../shared/data)")
    dataset = AS_STORED.get(name, name)
    cfg = build_config(read_yaml(REPO / "configs" / REAL[dataset]), {"dataset": dataset, "data_root": args.data_root})
    data = load_dataset(dataset, root=args.data_root, split_seed=0)
    graph = stored_graph(dataset, args.data_root) if name in AS_STORED else None
    if cfg.self_loop:
        data = data.with_self_loops()
    if graph is None:
        graph = data.to_dgl()
    elif cfg.self_loop:
        import dgl

        graph = dgl.add_self_loop(graph)
    seeds = torch.from_numpy(data.train_idx) if args.real_seeds == "train" else torch.arange(data.num_nodes)
    # The shipped configs of these graphs take full neighbourhoods, which read every row of a 2-hop
    # neighbourhood whatever its degree; as stored, they are sampled as the directed graph is.
    fanouts, batch = (DIRECTED["fanouts"], DIRECTED["batch"]) if name in AS_STORED else (cfg.fanouts, cfg.batch_size)
    setting = "the graph as its file stores it (one direction per edge for most pairs), features and split of " if name in AS_STORED else ""
    how = (
        f"{name}: {setting}config {REAL[dataset]} (fanouts {','.join(map(str, fanouts))}{', self-loops' if cfg.self_loop else ''}), "
        f"batch {batch}, seeds: {'the training split' if args.real_seeds == 'train' else 'every node'}"
    )
    return {"graph": graph, "table": tensor_view(np.ascontiguousarray(data.features)), "fanouts": fanouts, "batch": batch, "how": how, "seeds": seeds}


def stored_graph(dataset: str, data_root: str):
    """The GraphData file's adjacency of ``dataset`` as stored (row -> column: an edge from the row's node),
    self-loops and duplicate edges dropped, not symmetrised (DGL graph)."""
    import dgl

    from dgl_zerocopy.data.graphdata import GRAPHDATA_FILES

    name = GRAPHDATA_FILES[dataset]
    path = next((p for p in (Path(data_root) / "graphdata" / name, Path(data_root) / name) if p.is_file()), None)
    if path is None:
        raise SystemExit(f"{name} is not in {data_root}/graphdata/ nor {data_root}/")
    with np.load(path) as npz:
        n, indptr, dst = int(npz["num_nodes"]), npz["adj_indptr"].astype(np.int64), npz["adj_indices"].astype(np.int64)
    src = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    return dgl.to_simple(dgl.remove_self_loop(dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=n)))


def epoch_batches(graph, sampler, seeds: torch.Tensor, batch: int, seed: int):
    """The input nodes of one epoch's batches: seeds shuffled by ``default_rng(seed)``, neighbours drawn after ``dgl.seed(seed)``."""
    import dgl

    dgl.seed(seed)
    order = seeds[torch.from_numpy(np.random.default_rng(seed).permutation(seeds.numel()))]
    for start in range(0, order.numel(), batch):
        yield sampler.sample(graph, order[start : start + batch])[0]


def run_graph(name: str, args, sizes: list[float]) -> tuple[list[dict], dict]:
    """Rows of every repeat of graph ``name`` (``repeat`` in each) and what the workload was."""
    rows, w = [], None
    for repeat in range(args.repeats):
        if w is None or name == "directed":  # only the directed graph changes with the repeat
            w = workload(name, args, repeat)
        r, info = run_repeat(name, w, args, sizes, repeat)
        rows += r
    return rows, info


def run_repeat(name: str, w: dict, args, sizes: list[float], repeat: int) -> tuple[list[dict], dict]:
    import dgl

    from dgl_zerocopy.store.cache import HotRowCache, budget_for_rows, build_slot_map, cache_capacity, make_policy, split_hits

    graph, table, seeds = w["graph"], w["table"], w["seeds"]
    presample_seed, eval_seed = args.presample_seed + 2 * repeat, args.eval_seed + 2 * repeat
    n, row_bytes = table.shape[0], table.shape[1] * table.element_size()
    per_row = link_bytes_per_row(row_bytes, table.numpy().dtype)  # first: a broken model fails before the sampling
    sampler = dgl.dataloading.NeighborSampler(w["fanouts"])

    # Correctness first: the cached gather of a sampled batch is features[input_nodes].
    policies = {p: make_policy(p, graph, sampler=sampler) for p in ("degree", "in_degree", "out_degree")}
    input_nodes = next(epoch_batches(graph, sampler, seeds, w["batch"], eval_seed))
    check = HotRowCache(table, policies["degree"].order[: max(1, n // 10)])
    if not torch.equal(check.gather(input_nodes, table), table[input_nodes]):
        raise RuntimeError(f"{name}: the cached gather differs from features[ids]")
    del check

    start = time.perf_counter()
    dgl.seed(presample_seed)
    policies["presample"] = make_policy("presample", graph, sampler=sampler, seeds=seeds, batch_size=w["batch"], seed=presample_seed)
    presample_s = time.perf_counter() - start
    cached = [min(n, round(f * n)) for f in sizes]
    # Compressed: the fp32 budget of each size holds this many code rows (or as many decoded rows as fp32).
    codes = {c: [cache_capacity(budget_for_rows(k, row_bytes, n), table.shape[1] * CODE_BYTES[c], n) if k else 0 for k in cached] for c in args.codecs}
    slot_maps = {(p, k): build_slot_map(policies[p].order[:k], n) for p in POLICIES for k in cached}
    slot_maps.update({("presample", k): build_slot_map(policies["presample"].order[:k], n) for ks in codes.values() for k in ks})

    start = time.perf_counter()
    hits = dict.fromkeys(slot_maps, 0)
    counts = torch.zeros(n, dtype=torch.int64)  # the evaluated epoch's own counts, for the oracle
    gathered = batches = 0
    for input_nodes in epoch_batches(graph, sampler, seeds, w["batch"], eval_seed):
        batches += 1
        gathered += input_nodes.numel()
        counts[input_nodes.long()] += 1  # input nodes are distinct within a batch
        for key, slot_map in slot_maps.items():
            hits[key] += split_hits(input_nodes, slot_map, unchecked=True).hit_positions.numel()
    eval_s = time.perf_counter() - start
    top = torch.sort(counts, descending=True).values.cumsum(0)
    for k in cached:
        hits[("oracle", k)] = int(top[k - 1]) if k else 0

    rows = []
    run = {
        "graph": name,
        "repeat": repeat,
        "presample_seed": presample_seed,
        "eval_seed": eval_seed,
        "nodes": n,
        "edges": int(graph.num_edges()),
        "row_bytes": row_bytes,
        "batch": w["batch"],
        "batches": batches,
    }
    for policy in (*POLICIES, "oracle"):
        for f, k in zip(sizes, cached):
            h = hits[(policy, k)]
            misses = gathered - h
            rows.append(
                {
                    **run,
                    "policy": policy,
                    "cache_pct": 100 * f,
                    "cache_rows": k,
                    "cache_mib": budget_for_rows(k, row_bytes, n) / 2**20,
                    "stored": "fp32",
                    "rows_per_epoch": gathered,
                    "hit_rate": h / gathered if gathered else 0.0,
                    "misses_per_epoch": misses,
                    "link_bytes_per_row": per_row,
                    "pcie_gb_no_cache": gathered * per_row / 1e9,
                    "pcie_gb_cached": misses * per_row / 1e9,
                    "pcie_saved": h / gathered if gathered else 0.0,
                }
            )
    for codec, ks in codes.items():
        code_link = link_bytes_per_row(table.shape[1] * CODE_BYTES[codec], CODE_DTYPES[codec])
        for f, k_fp32, k in zip(sizes, cached, ks):
            for stored, rows_cached in ((f"{codec} codes", k), (f"{codec} decoded", k_fp32)):
                h = hits[("presample", rows_cached)]
                rows.append(
                    {
                        **run,
                        "policy": "presample",
                        "cache_pct": 100 * f,
                        "cache_rows": rows_cached,
                        "cache_mib": budget_for_rows(k_fp32, row_bytes, n) / 2**20,
                        "stored": stored,
                        "rows_per_epoch": gathered,
                        "hit_rate": h / gathered if gathered else 0.0,
                        "misses_per_epoch": gathered - h,
                        "link_bytes_per_row": code_link,
                        "pcie_gb_no_cache": gathered * per_row / 1e9,
                        "pcie_gb_cached": (gathered - h) * code_link / 1e9,
                        "pcie_saved": 1 - (gathered - h) * code_link / (gathered * per_row),
                    }
                )
    info = {
        "graph": name,
        "how": w["how"],
        "fanouts": w["fanouts"],
        "rows_per_batch": gathered / max(batches, 1),
        "share_of_nodes_per_batch": gathered / max(batches, 1) / n,
        "presample_s": presample_s,
        "eval_s": eval_s,
    }
    print(
        f"{name} (repeat {repeat}): {w['how']}; {batches} batches of {info['rows_per_batch']:,.0f} input rows "
        f"({info['share_of_nodes_per_batch']:.1%} of the nodes); presample {presample_s:.1f} s, evaluation {eval_s:.1f} s",
        flush=True,
    )
    return rows, info


def summary(rows: list[dict]) -> list[dict]:
    """Median, min and max over the repeats of every (graph, stored, policy, size): hit rate and PCIe GB."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["graph"], r["stored"], r["policy"], r["cache_pct"]), []).append(r)
    out = []
    for (graph, stored, policy, pct), rs in groups.items():
        rates, gbs = [r["hit_rate"] for r in rs], [r["pcie_gb_cached"] for r in rs]
        out.append(
            {
                "graph": graph,
                "stored": stored,
                "policy": policy,
                "cache_pct": pct,
                "repeats": len(rs),
                "hit_rate_median": statistics.median(rates),
                "hit_rate_min": min(rates),
                "hit_rate_max": max(rates),
                "pcie_gb_cached_median": statistics.median(gbs),
                "pcie_saved_median": statistics.median(r["pcie_saved"] for r in rs),
                **{k: rs[0][k] for k in ("nodes", "row_bytes", "link_bytes_per_row", "rows_per_epoch", "pcie_gb_no_cache", "cache_rows")},
            }
        )
    return out


def _rate(s: dict) -> str:
    """A hit rate as the table shows it: the median, and the range when there are repeats."""
    if s["repeats"] == 1:
        return f"{s['hit_rate_median']:.1%}"
    return f"{s['hit_rate_median']:.1%} [{100 * s['hit_rate_min']:.1f}-{100 * s['hit_rate_max']:.1f}]"


def markdown(rows: list[dict], sizes: list[float]) -> str:
    """Hit rates per graph, policy and size (median [min-max] over the repeats); then the modelled PCIe
    GB per epoch of the presample cache (and with compressed features, of the codes and decoded caches)."""
    summ = summary(rows)
    fp32 = [s for s in summ if s["stored"] == "fp32"]
    compressed = [s for s in summ if s["stored"] != "fp32"]
    repeats = max(s["repeats"] for s in summ)
    head = "| graph | policy | " + " | ".join(f"{100 * f:g} %" for f in sizes) + " |"
    spread = f", median [min-max] of {repeats} repeats" if repeats > 1 else ""
    lines = [f"hit rate (= share of PCIe bytes saved) by cache size (% of rows){spread}", "", head, "|---|---|" + "---:|" * len(sizes)]
    graphs = list(dict.fromkeys(s["graph"] for s in fp32))
    for graph in graphs:
        for policy in dict.fromkeys(s["policy"] for s in fp32 if s["graph"] == graph):
            ss = [s for s in fp32 if s["graph"] == graph and s["policy"] == policy]
            lines.append(f"| {graph} | {policy} | " + " | ".join(_rate(s) for s in ss) + " |")
    lines += [
        "",
        "modelled PCIe GB per epoch, no cache and with the presample cache (median)",
        "",
        "| graph | row B | link B/row | rows/epoch | no cache | " + " | ".join(f"{100 * f:g} %" for f in sizes) + " |",
        "|---|---:|---:|---:|---:|" + "---:|" * len(sizes),
    ]
    for graph in graphs:
        ss = [s for s in fp32 if s["graph"] == graph and s["policy"] == "presample"]
        lines.append(
            f"| {graph} | {ss[0]['row_bytes']} | {ss[0]['link_bytes_per_row']:.0f} | {ss[0]['rows_per_epoch']:,} | "
            f"{ss[0]['pcie_gb_no_cache']:.3g} | " + " | ".join(f"{s['pcie_gb_cached_median']:.3g}" for s in ss) + " |"
        )
    if compressed:
        lines += [
            "",
            "compressed features, presample: the fp32 cache's byte budget holding code rows or decoded rows; "
            "hit rate / share of the uncompressed, uncached PCIe bytes saved (medians)",
            "",
            "| graph | stored in the cache | " + " | ".join(f"{100 * f:g} %" for f in sizes) + " |",
            "|---|---|" + "---:|" * len(sizes),
        ]
        for graph in graphs:
            for stored in dict.fromkeys(s["stored"] for s in compressed if s["graph"] == graph):
                ss = [s for s in compressed if s["graph"] == graph and s["stored"] == stored]
                lines.append(f"| {graph} | {stored} | " + " | ".join(f"{s['hit_rate_median']:.1%} / {s['pcie_saved_median']:.1%}" for s in ss) + " |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path, title: str) -> None:
    """Hit rate against cache size per graph, a line per policy (median; the band spans min to max of the repeats)."""
    plt = pyplot()

    summ = [s for s in summary(rows) if s["stored"] == "fp32"]
    graphs = list(dict.fromkeys(s["graph"] for s in summ))
    cols = min(4, len(graphs))
    fig, axes = plt.subplots((len(graphs) + cols - 1) // cols, cols, figsize=(3.6 * cols, 3.1 * ((len(graphs) + cols - 1) // cols)), squeeze=False, sharey=True)
    for ax, graph in zip(axes.flat, graphs):
        for policy in dict.fromkeys(s["policy"] for s in summ if s["graph"] == graph):
            ss = [s for s in summ if s["graph"] == graph and s["policy"] == policy]
            x = [s["cache_pct"] for s in ss]
            (line,) = ax.plot(x, [100 * s["hit_rate_median"] for s in ss], STYLES.get(policy, "-"), label=policy, markersize=3)
            if ss[0]["repeats"] > 1:
                ax.fill_between(x, [100 * s["hit_rate_min"] for s in ss], [100 * s["hit_rate_max"] for s in ss], color=line.get_color(), alpha=0.15, lw=0)
        s0 = next(s for s in summ if s["graph"] == graph)
        ax.set_title(f"{graph} ({s0['nodes']:,} rows of {s0['row_bytes']} B)", fontsize=8)
        ax.axhline(50, color="tab:red", lw=0.6, ls="--")
        ax.set_xscale("log")
        ax.set_xticks([1, 5, 10, 20, 50], ["1", "5", "10", "20", "50"])
        ax.set_ylim(0, 100)
        ax.grid(True, alpha=0.3)
        ax.set_xlabel("cache size (% of rows)", fontsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel("hit rate = PCIe bytes saved (%)", fontsize=8)
    for ax in list(axes.flat)[len(graphs) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle("\n".join(textwrap.wrap(title, width=int(16 * fig.get_figwidth()))), fontsize=8)  # a lone panel is narrow
    save_figure(fig, path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", default=",".join(GRAPHS), help=f"comma-separated, from: {', '.join(GRAPHS)}")
    parser.add_argument("--products-nodes", type=int, default=SYNTHETIC["products"]["nodes_default"])
    parser.add_argument("--papers-nodes", type=int, default=SYNTHETIC["papers100m"]["nodes_default"])
    parser.add_argument("--directed-nodes", type=int, default=DIRECTED["nodes_default"])
    parser.add_argument("--sizes", default="1,5,10,20,50", help="cache sizes in %% of the rows")
    parser.add_argument("--data-root", default=str(REPO.parent / "shared" / "data"), help="folder of the real graphs")
    parser.add_argument(
        "--real-seeds",
        choices=("train", "all"),
        default="train",
        help="seeds of the real graphs: their training split (default; one or two batches an epoch) or every node",
    )
    parser.add_argument("--presample-seed", type=int, default=1, help="batch order and neighbour draws of the presampling pass")
    parser.add_argument("--eval-seed", type=int, default=2, help="... of the evaluated epoch (must differ: no leakage)")
    parser.add_argument("--repeats", type=int, default=1, help="repeats with other seeds (median and range reported; default 1)")
    parser.add_argument(
        "--feature-compression",
        dest="compression",
        default="",
        help="codecs (fp16,bf16,int8): also the cache of codes against the cache of decoded rows, at the same bytes",
    )
    parser.add_argument("--out", default="cache", help="result file stem under bench/results/, or a path (without suffix) elsewhere")
    args = parser.parse_args(argv)
    names = [g.strip() for g in args.graphs.split(",") if g.strip()]
    if not names or any(g not in GRAPHS for g in names):
        parser.error(f"--graphs must name some of {', '.join(GRAPHS)}, but got {args.graphs!r}")
    try:
        sizes = [float(s) / 100 for s in args.sizes.split(",")]
    except ValueError:
        parser.error(f"--sizes must be comma-separated percentages, but got {args.sizes!r}")
    if not sizes or not all(0 < f <= 1 for f in sizes):
        parser.error(f"--sizes must be percentages in (0, 100], but got {args.sizes!r}")
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, but got {args.repeats}")
    if args.directed_nodes < 2:
        parser.error(f"--directed-nodes must be >= 2, but got {args.directed_nodes}")
    args.codecs = [c.strip() for c in args.compression.split(",") if c.strip() and c.strip() != "none"]
    if any(c not in CODE_BYTES for c in args.codecs):
        parser.error(f"--feature-compression must name some of {', '.join(CODE_BYTES)}, but got {args.compression!r}")
    if args.presample_seed == args.eval_seed:
        parser.error("--presample-seed and --eval-seed must differ: the evaluated epoch must not be the presampled one")
    if any(g in REAL or g in AS_STORED for g in names) and not Path(args.data_root).is_dir():
        parser.error(f"the real graphs are read from --data-root, and {args.data_root!r} is not a folder")
    torch.manual_seed(0)

    rows, infos = [], []
    for name in names:
        r, info = run_graph(name, args, sizes)
        rows += r
        infos.append(info)
    meta = {
        "command": command_line(),
        "machine": machine(),
        "model": "PCIe bytes = rows read from host x link bytes per row of the aligned kernel (pcie_model.py: "
        "32-B sectors + 24 B per 128-B-line request); bytes saved = hit rate",
        "evaluation": f"one epoch per repeat, sampled with seed {args.eval_seed} + 2 x repeat; presample pass with seed "
        f"{args.presample_seed} + 2 x repeat; {args.repeats} repeat(s); every policy of a size has the same byte "
        "budget (rows + slot map); oracle = the rows ranked by the evaluated epoch's own counts (an upper bound, not a policy)",
        "workloads": "; ".join(i["how"] for i in infos),
    }
    csv_path, _ = write_results(args.out, rows, meta, extra={"graphs": infos, "summary": summary(rows)})
    png = csv_path.with_suffix(".png")
    spread = f", median and range of {args.repeats} repeats" if args.repeats > 1 else ""
    plot(rows, png, f"GPU feature cache: hit rate of one sampled epoch{spread} (red: half the PCIe bytes gone)")
    print(f"\n# {meta['command']}\n# {meta['machine']}\n")
    print(markdown(rows, sizes))
    print(f"\nwrote {csv_path}, {csv_path.with_suffix('.json')}, {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
