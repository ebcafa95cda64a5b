"""What opening a graph from disk costs with its CSC checked: with the verdict the generator records, and without.

For each ``--fractions`` value: ``generate_to_disk(papers100m_spec(fraction))`` into a temporary folder (the
time of the generator's own check of what it wrote is taken apart), then ``open_disk_graph`` ``--repeats``
times with the recorded verdict (a ``stat`` per file, no pass) and ``--repeats`` times without it (the record
removed before each open: one ``check_csc`` pass over ``indptr.npy`` and ``indices.npy``, their pages in the
page cache as they are after generating). Correctness first: every open gives a ``checked`` graph, and the
passes are counted (none with the record, one each without). Rows as CSV/JSON (bench/results/open_graph.*).

    python bench/training/open_graph.py --fractions 0.01,0.05
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: common.py
from common import RESULTS, command_line, machine, summarize, write_results  # noqa: E402

from dgl_zerocopy.data import disk_check, graph_check  # noqa: E402
from dgl_zerocopy.data import papers_disk as pd  # noqa: E402
from dgl_zerocopy.data.disk_graph import open_disk_graph  # noqa: E402


def measure(fraction: float, repeats: int, folder: Path) -> dict:
    """One fraction's row: sizes, generate and check seconds, open milliseconds with and without the record."""
    spent = []
    real = pd.record_generated

    def timed(*args):
        start = time.perf_counter()
        real(*args)
        spent.append(time.perf_counter() - start)

    pd.record_generated = timed
    try:
        start = time.perf_counter()
        out = pd.generate_to_disk(folder / "g", pd.papers100m_spec(fraction), progress=False)
        generate = time.perf_counter() - start
    finally:
        pd.record_generated = real
    passes = [0]
    monotone = graph_check._check_monotone

    def counted(*args, **kwargs):
        passes[0] += 1
        return monotone(*args, **kwargs)

    graph_check._check_monotone = counted
    try:
        row = {}
        for label, drop in (("recorded", False), ("no_record", True)):
            times, before = [], passes[0]
            for _ in range(repeats):
                graph_check.forget_checks()  # no verdict remembered in memory: each open as in a new process
                if drop:
                    (out / disk_check.RECORD).unlink(missing_ok=True)
                start = time.perf_counter()
                graph = open_disk_graph(out)
                times.append(time.perf_counter() - start)
                assert graph.checked
                csc_bytes, nodes, edges = graph.indptr.nbytes + graph.indices.nbytes, graph.num_nodes, graph.num_edges
                del graph
            assert passes[0] - before == (repeats if drop else 0), (label, passes[0] - before)
            stats = summarize([t * 1e3 for t in times])
            row.update({f"open_ms_{label}": stats["median"], f"open_ms_{label}_min": stats["min"], f"open_ms_{label}_max": stats["max"]})
    finally:
        graph_check._check_monotone = monotone
    row = {"fraction": fraction, "nodes": nodes, "edges": edges, "csc_gb": csc_bytes / 1e9, "generate_s": generate, "generate_check_s": spent[0], **row}
    row["pass_gb_per_s"] = csc_bytes / 1e9 / (row["open_ms_no_record"] / 1e3)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fractions", default="0.01,0.05", help="fractions of papers100M's nodes, comma-separated (default: 0.01,0.05)")
    p.add_argument("--repeats", type=int, default=5, help="opens timed each way (default: 5)")
    p.add_argument("--out-dir", default=str(RESULTS), help="where the CSV/JSON go (default: bench/results)")
    p.add_argument("--stem", default="open_graph", help="the result files' name (default: open_graph)")
    args = p.parse_args(argv)
    rows = []
    for fraction in (float(f) for f in args.fractions.split(",")):
        folder = Path(tempfile.mkdtemp(prefix="open-graph-"))
        try:
            rows.append(measure(fraction, args.repeats, folder))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        r = rows[-1]
        print(
            f"fraction {fraction}: {r['nodes']:,} nodes, {r['edges']:,} edges, CSC {r['csc_gb']:.3f} GB; generated in {r['generate_s']:.1f} s "
            f"(its check {r['generate_check_s']:.2f} s); open {r['open_ms_recorded']:.2f} ms with the record, "
            f"{r['open_ms_no_record']:.1f} ms without ({r['pass_gb_per_s']:.2f} GB/s)",
            flush=True,
        )
    write_results(args.stem, rows, {"command": command_line(), "machine": machine(), "repeats": args.repeats}, folder=args.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
