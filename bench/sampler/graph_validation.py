"""What checking a graph costs where it enters a sampler: one pass at open, nothing per batch.

For each shape, correctness first (the valid graph passes; an id planted out of range, and a decrease planted in
``indptr``, are found at their positions), then ``--repeats`` timed passes with no verdict remembered
(``forget_checks`` before each), then the cost of a second check of the same unchanged arrays (the verdict
remembered: what a second sampler, or a batch, pays). Shapes:

- ``products``: ogbn-products' (2,449,029 nodes, 123,718,280 edges): ``check_edge_index`` of a PyG
  ``edge_index`` (``[2, E]`` int64, what the PyG route checks) and ``check_csc`` of its CSC as torch tensors
  (``indptr`` int64, ``indices`` int64: a ``SamplingGraph``) and as NumPy arrays (a ``HopSampler``).
- ``papers``: ogbn-papers100M's node count (111,059,956) with ``--papers-edges`` int32 edges (default 1.6 B,
  half of its 3.2 B bidirected edges: what fits here beside the other work), ``check_csc`` of NumPy arrays (what
  a graph opened from disk is); the time for 3.2 B edges is extrapolated from the GB/s, and said to be.

Rows as CSV/JSON (bench/results/graph_check/graph_validation.*), with the command and the machine.

    python bench/sampler/graph_validation.py --shapes products,papers --repeats 5
"""

from __future__ import annotations

import argparse
import functools
import gc
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: common.py
from common import RESULTS, command_line, machine, summarize, write_results  # noqa: E402

from dgl_zerocopy.data import graph_check  # noqa: E402
from dgl_zerocopy.data.graph_check import check_csc, check_edge_index  # noqa: E402

PRODUCTS = (2_449_029, 123_718_280)
PAPERS_NODES = 111_059_956
PAPERS_FULL_EDGES = 3_228_124_712  # bidirected
_CHUNK = 1 << 26


def random_ids(n: int, bound: int, dtype: np.dtype, seed: int) -> np.ndarray:
    """``n`` ids uniform in ``[0, bound)``, made a chunk at a time (no int64 temporary of the whole)."""
    out = np.empty(n, dtype=dtype)
    rng = np.random.default_rng(seed)
    for start in range(0, n, _CHUNK):
        stop = min(n, start + _CHUNK)
        out[start:stop] = rng.integers(0, bound, stop - start, dtype=dtype)
    return out


def even_indptr(num_nodes: int, num_edges: int) -> np.ndarray:
    """Offsets of ``num_edges`` edges spread over ``num_nodes`` destinations (the pass reads every offset
    whatever the degrees, so their spread does not matter)."""
    return (np.arange(num_nodes + 1, dtype=np.int64) * num_edges) // num_nodes


def timed(fn, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        graph_check.forget_checks()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def cached_us(fn, repeats: int = 200) -> float:
    """Microseconds of a check whose verdict is remembered (median of ``repeats``)."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e6)


def expect_refusal(fn, error: type, words: str) -> None:
    graph_check.forget_checks()
    try:
        fn()
    except error as caught:
        assert words in str(caught), str(caught)
        return
    raise AssertionError(f"no {error.__name__} for {words!r}")


def row(shape: str, what: str, nbytes: int, nodes: int, edges: int, times: list[float], cached: float, **extra) -> dict:
    stats = summarize(times)
    return {
        "shape": shape,
        "what": what,
        "nodes": nodes,
        "edges": edges,
        "gb": nbytes / 1e9,
        "seconds_median": stats["median"],
        "seconds_min": stats["min"],
        "seconds_max": stats["max"],
        "gb_per_s": nbytes / 1e9 / stats["median"],
        "second_check_us": cached,
        **extra,
    }


def products(repeats: int) -> list[dict]:
    nodes, edges = PRODUCTS
    rows = []
    indptr = even_indptr(nodes, edges)
    indices = random_ids(edges, nodes, np.int64, 0)
    # A PyG edge_index: sources, then destinations (the CSC's, expanded).
    edge_index = torch.empty(2, edges, dtype=torch.int64)
    edge_index[0] = torch.from_numpy(indices)
    edge_index[1] = torch.repeat_interleave(torch.arange(nodes), torch.from_numpy(np.diff(indptr)))
    at = edges // 3
    edge_index[1, at] = nodes
    check = functools.partial(check_edge_index, edge_index, nodes)
    expect_refusal(check, IndexError, f"id {nodes} at position {at}")
    edge_index[1, at] = 0
    rows.append(row("products", "edge_index int64 (PyG Data)", edge_index.numel() * 8, nodes, edges, timed(check, repeats), cached_us(check)))
    del edge_index, check
    gc.collect()
    for kind in ("torch", "numpy"):
        ptr, idx = (torch.from_numpy(indptr), torch.from_numpy(indices)) if kind == "torch" else (indptr, indices)
        check = functools.partial(check_csc, ptr, idx, nodes)
        idx[at] = -5
        expect_refusal(check, IndexError, f"id -5 at position {at}")
        idx[at] = 0
        ptr[nodes // 2] += edges
        expect_refusal(check, ValueError, f"decreases at position {nodes // 2 + 1}")
        ptr[nodes // 2] -= edges
        if kind == "numpy":  # NumPy has no version counter: only a read-only array (a file's map) is remembered
            ptr.setflags(write=False)
            idx.setflags(write=False)
        what = "CSC int64 as torch tensors (SamplingGraph)" if kind == "torch" else "CSC int64 as read-only NumPy arrays (HopSampler)"
        nbytes = indptr.nbytes + indices.nbytes
        rows.append(row("products", what, nbytes, nodes, edges, timed(check, repeats), cached_us(check)))
    return rows


def papers(repeats: int, num_edges: int) -> list[dict]:
    nodes = PAPERS_NODES
    indptr = even_indptr(nodes, num_edges)
    indices = random_ids(num_edges, nodes, np.int32, 1)
    at = num_edges - 12345
    indices[at] = nodes
    expect_refusal(functools.partial(check_csc, indptr, indices, nodes), IndexError, f"id {nodes} at position {at}")
    indices[at] = 0
    indptr.setflags(write=False)
    indices.setflags(write=False)
    check = functools.partial(check_csc, indptr, indices, nodes)
    nbytes = indptr.nbytes + indices.nbytes
    out = row(
        "papers", "CSC int64 indptr, int32 indices, read-only NumPy (a graph file's map)", nbytes, nodes, num_edges, timed(check, repeats), cached_us(check)
    )
    full_bytes = indptr.nbytes + PAPERS_FULL_EDGES * 4
    out["extrapolated_full_edges"] = PAPERS_FULL_EDGES
    out["extrapolated_full_seconds"] = full_bytes / 1e9 / out["gb_per_s"]
    return [out]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default="products,papers", help="comma-separated: products, papers (default: both)")
    p.add_argument("--repeats", type=int, default=5, help="timed passes per row (default: 5)")
    p.add_argument("--papers-edges", type=int, default=1_600_000_000, help="int32 edges of the papers-sized CSC (default: 1.6 B)")
    p.add_argument("--out", type=Path, default=RESULTS / "graph_check", help="folder of the CSV/JSON (default: bench/results/graph_check)")
    args = p.parse_args(argv)
    shapes = [s for s in args.shapes.split(",") if s]
    unknown = set(shapes) - {"products", "papers"}
    if unknown:
        p.error(f"unknown shapes {sorted(unknown)}; choose from products, papers")
    rows = []
    for shape in shapes:
        rows += products(args.repeats) if shape == "products" else papers(args.repeats, args.papers_edges)
        gc.collect()
        for r in rows[-3:] if shape == "products" else rows[-1:]:
            print(
                f"{r['shape']:9} {r['what'][:60]:60} {r['gb']:6.2f} GB  {r['seconds_median']:7.3f} s  {r['gb_per_s']:5.2f} GB/s  second check {r['second_check_us']:.1f} us"
            )
    meta = {"command": command_line(), "machine": machine(), "torch_threads": torch.get_num_threads(), "repeats": args.repeats}
    csv_path, _ = write_results("graph_validation", rows, meta, args.out)
    print(f"wrote {csv_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
