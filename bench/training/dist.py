"""DistDGL feature fetching: local against remote rows per batch and time per batch, 1 against 2 partitions.

The synthetic graph is partitioned (DGL's ``partition_graph``, METIS) into 1 and into 2 parts, and
each job runs on 127.0.0.1 through ``launch_local`` (one server and one trainer per partition, the
single-host fixes on). Each trainer takes its share of the training nodes (``node_split``, as
training does) and runs ``--epochs`` epochs of :class:`dgl_zerocopy.dist.DistLoader` batches with
``prefetch=0`` (so sampling and fetching are timed apart, on the caller's thread); per batch it
records the input rows served by its local partition and over RPC, the seconds to sample, to fetch
with :class:`DistFeatureSource` (local rows through the FeatureStore while the remote ones are
pulled), and, as the baseline, to pull the same ids with DGL's own ``g.ndata['feat'][input_nodes]``:
the two fetches side by side, in alternating order. Every batch is checked: both fetches and the
loader's rows must be equal. Epoch 0 warms up and is not reported. Trainers run launch-local's
OpenMP thread count (DGL's launch-tool rule; ``threads`` in the results).

Reported per (parts, trainer): batches, median rows per batch (local, remote, remote fraction),
median seconds per batch (sample, our fetch, DGL's pull) and the median per-batch ratio of our fetch
to DGL's pull, with quartiles. Writes
``dist.csv``/``dist.json`` (per-batch rows in the JSON as ``raw``) and ``dist.png``.

    python bench/training/dist.py [--num-nodes 50000] [--epochs 11] [--batch-size 1024] [--fanouts 10,5] [--out STEM or /path/STEM]
    dgl-zerocopy bench dist  (the same)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: common.py
from common import RESULTS, command_line, machine, pyplot, save_figure, summarize, write_results  # noqa: E402

os.environ.setdefault("DGLBACKEND", "pytorch")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-nodes", type=int, default=50_000, help="synthetic graph size (default 50,000)")
    parser.add_argument("--epochs", type=int, default=11, help="epochs per trainer; epoch 0 warms up (at least 2)")
    parser.add_argument("--batch-size", type=int, default=1024, help="seeds per batch per trainer")
    parser.add_argument("--fanouts", default="10,5")
    parser.add_argument("--parts", default="1,2", help="partition counts to compare (default 1,2)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per job")
    parser.add_argument("--out", default="dist", help="result file stem under bench/results/, or a path (without suffix) elsewhere")
    parser.add_argument("--worker", nargs=2, metavar=("PARTS", "RESULT"), help=argparse.SUPPRESS)  # a trainer or server of a job
    args = parser.parse_args(argv)
    fanouts = [int(f) for f in args.fanouts.split(",")]
    if args.worker:
        return _worker(Path(args.worker[0]), Path(args.worker[1]), args.epochs, args.batch_size, fanouts)
    parts_list = [int(p) for p in args.parts.split(",")]
    if args.epochs < 2 or min(args.num_nodes, args.batch_size, *parts_list) < 1:
        parser.error("--epochs must be >= 2; --num-nodes, --batch-size and every --parts >= 1")

    import dgl_zerocopy  # noqa: F401 - DGL's import hook
    from dgl_zerocopy.data import SyntheticSpec, load_dataset
    from dgl_zerocopy.dist import launch_local, partition_dataset

    dataset = load_dataset("synthetic", synthetic=SyntheticSpec(num_nodes=args.num_nodes))
    raw: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="dgl-zerocopy-bench-dist-") as tmp:
        for parts in parts_list:
            info = partition_dataset(dataset, parts, Path(tmp) / f"p{parts}", method="metis")
            results = Path(tmp) / f"r{parts}"
            results.mkdir()
            start = time.perf_counter()
            job = launch_local(
                [
                    sys.executable,
                    __file__,
                    "--worker",
                    str(info.folder),
                    str(results),
                    "--epochs",
                    str(args.epochs),
                    "--batch-size",
                    str(args.batch_size),
                    "--fanouts",
                    args.fanouts,
                ],
                info.part_config,
                parts,
                timeout=args.timeout,
            )
            print(f"{parts} partition(s): job took {time.perf_counter() - start:.1f} s, {job.trainer_threads} thread(s) per trainer", flush=True)
            for trainer in range(parts):
                for row in json.loads((results / f"trainer{trainer}.json").read_text()):
                    raw.append({"parts": parts, "trainer": trainer, **row})
    rows = _summarize(raw)
    meta = {
        "command": command_line(),
        "machine": machine(),
        "dataset": dataset.summary(),
        "fanouts": args.fanouts,
        "batch_size": args.batch_size,
        "epochs_reported": args.epochs - 1,
        "note": "prefetch=0: sample and fetch timed apart; fetch = DistFeatureSource.fetch and DGL pull = "
        "g.ndata['feat'][input_nodes] of the same batch, side by side in alternating order; "
        "trainers run launch-local's OpenMP thread count (threads column)",
    }
    out = Path(args.out)
    folder, stem = (out.parent, out.name) if out.parent != Path(".") else (RESULTS, args.out)
    csv_path, json_path = write_results(stem, rows, meta, folder=folder, extra={"raw": raw})
    png = folder / f"{stem}.png"
    _plot(rows, png, meta)
    for r in rows:
        print(
            f"{r['parts']} part(s), trainer {r['trainer']}: {r['batches']} batches, rows/batch local {r['local_rows']:.0f} "
            f"remote {r['remote_rows']:.0f} ({r['remote_fraction']:.1%}), s/batch sample {r['sample_s']:.4f} "
            f"fetch {r['fetch_s']:.4f} (DGL pull {r['dgl_pull_s']:.4f}; ours/DGL per batch {r['fetch_over_pull']:.2f}, "
            f"quartiles {r['fetch_over_pull_q1']:.2f}-{r['fetch_over_pull_q3']:.2f})"
        )
    print(f"wrote {csv_path}, {json_path}, {png}")
    return 0


def _worker(parts: Path, results: Path, epochs: int, batch_size: int, fanouts: list[int]) -> int:
    """One process of a job: a server serves in ``connect``; a trainer measures and writes its rows."""
    import dgl
    import torch

    import dgl_zerocopy  # noqa: F401
    from dgl_zerocopy.dist import DistFeatureSource, DistLoader, connect, installed

    graph, _ = connect(parts)
    machine_id = installed().get("machine_id", 0)
    seeds = dgl.distributed.node_split(graph.ndata["train_mask"], graph.get_partition_book(), force_even=True)
    feat = DistFeatureSource(graph.ndata["feat"], device="cpu")
    loader = DistLoader(graph, seeds, fanouts, features={"feat": feat}, batch_size=batch_size, shuffle=True, prefetch=0)
    rows = []
    fetches = {"fetch_s": feat.fetch, "dgl_pull_s": graph.ndata["feat"].__getitem__}  # DGL's own path: KVClient.pull of every id
    for epoch in range(epochs):
        for batch, (input_nodes, _, blocks) in enumerate(loader):
            # Both fetches of the batch's ids, side by side, in alternating order (the first after
            # sampling would otherwise always be the one that meets the servers' state first).
            seconds, rows_of = {}, {}
            for name in list(fetches) if batch % 2 == 0 else list(fetches)[::-1]:
                start = time.perf_counter()
                rows_of[name] = fetches[name](input_nodes)
                seconds[name] = time.perf_counter() - start
            if not (torch.equal(rows_of["fetch_s"], rows_of["dgl_pull_s"]) and torch.equal(rows_of["fetch_s"], blocks[0].srcdata["feat"])):
                raise AssertionError(f"trainer {machine_id}, epoch {epoch}, batch {batch}: DistFeatureSource rows differ from DGL's pull")
            if epoch == 0:
                continue
            s = loader.stats[batch]
            rows.append(
                {
                    "epoch": epoch,
                    "batch": batch,
                    "seeds": s.seeds,
                    "local_rows": s.local_rows,
                    "remote_rows": s.remote_rows,
                    "sample_s": s.sample_s,
                    "loader_fetch_s": s.fetch_s,
                    "threads": torch.get_num_threads(),
                    **seconds,
                    "fetch_over_pull": seconds["fetch_s"] / seconds["dgl_pull_s"],
                }
            )
    (results / f"trainer{machine_id}.json").write_text(json.dumps(rows))
    feat.close()
    return 0


def _summarize(raw: list[dict]) -> list[dict]:
    rows = []
    for key in sorted({(r["parts"], r["trainer"]) for r in raw}):
        mine = [r for r in raw if (r["parts"], r["trainer"]) == key]
        local = statistics.median(r["local_rows"] for r in mine)
        remote = statistics.median(r["remote_rows"] for r in mine)
        fraction = statistics.median(r["remote_rows"] / max(r["local_rows"] + r["remote_rows"], 1) for r in mine)
        row = {
            "parts": key[0],
            "trainer": key[1],
            "batches": len(mine),
            "threads": mine[0]["threads"],
            "local_rows": float(local),
            "remote_rows": float(remote),
            "remote_fraction": fraction,
        }
        for k in ("sample_s", "fetch_s", "dgl_pull_s", "fetch_over_pull"):
            s = summarize([r[k] for r in mine])
            row[k], row[f"{k}_q1"], row[f"{k}_q3"] = s["median"], s["q1"], s["q3"]
        rows.append(row)
    return rows


def _plot(rows: list[dict], path: Path, meta: dict) -> None:
    plt = pyplot()

    labels = [f"{r['parts']} part{'s' if r['parts'] > 1 else ''}\ntrainer {r['trainer']}" for r in rows]
    x = range(len(rows))
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    a.bar(x, [r["local_rows"] for r in rows], label="local partition (FeatureStore)", color="tab:green")
    a.bar(x, [r["remote_rows"] for r in rows], bottom=[r["local_rows"] for r in rows], label="remote (DGL RPC)", color="tab:orange")
    a.set_xticks(list(x), labels)
    a.set_ylabel("input rows per batch (median)")
    a.legend(fontsize=8)
    width = 0.27
    for i, (k, name) in enumerate((("sample_s", "sample"), ("fetch_s", "fetch: ours"), ("dgl_pull_s", "fetch: DGL pull"))):
        med = [r[k] * 1e3 for r in rows]
        err = [[(r[k] - r[f"{k}_q1"]) * 1e3 for r in rows], [(r[f"{k}_q3"] - r[k]) * 1e3 for r in rows]]
        b.bar([j + (i - 1) * width for j in x], med, width, yerr=err, capsize=3, label=name)
    b.set_xticks(list(x), labels)
    b.set_ylabel("ms per batch (median, quartiles)")
    b.legend(fontsize=8)
    fig.suptitle(f"DistDGL on 127.0.0.1: {meta['dataset'].split(' nodes')[0]} nodes, fanouts {meta['fanouts']}, batch {meta['batch_size']}", fontsize=10)
    save_figure(fig, path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
