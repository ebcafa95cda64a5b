"""Where a sampled minibatch's time goes: torch.profiler over one method of bench/sampler/sampling.py.

    python bench/sampler/sampling_profile.py [--method gpu-pinned] [--num-nodes 200000] [--batches 10] [--out PATH]

The products-shaped graph and the seed batches of bench/sampler/sampling.py, a few warm-up batches, then
``--batches`` batches under ``torch.profiler`` (CPU, and CUDA where the method runs there). Prints
the operators by self time on the device (CUDA) or the CPU, and writes them to ``PATH.txt`` and
``PATH.json`` (one row per operator: calls, self and total milliseconds). Figures for finding the
cost, not for the record: the profiler itself slows the host side.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: common.py
import sampling  # noqa: E402
from common import RESULTS, command_line, machine  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="gpu-pinned", help=f"one of {', '.join(sampling.METHODS)}")
    parser.add_argument("--num-nodes", type=int, default=200_000)
    parser.add_argument("--fanouts", default="15,10,5")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--top", type=int, default=25, help="operators listed")
    parser.add_argument("--out", default=str(RESULTS / "sampling_profile"), help="result path without suffix")
    args = parser.parse_args(argv)
    if args.method not in sampling.METHODS:
        parser.error(f"unknown --method {args.method!r}; choose from {', '.join(sampling.METHODS)}")
    import torch
    from torch.profiler import ProfilerActivity, profile

    data = sampling.load_graph(args.num_nodes, 50.5, 0)
    indptr, indices = torch.from_numpy(data.indptr), torch.from_numpy(data.indices)
    fanouts = [int(f) for f in args.fanouts.split(",")]
    method = sampling.Method(args.method, indptr, indices, fanouts, replace=False)
    try:
        batches = [b.to(method.device) for b in sampling.seed_batches(data.train_idx, data.num_nodes, args.batch_size, args.warmup + args.batches, 0)]
        for b in batches[: args.warmup]:
            method.sample(b)
        method.sync()
        cuda = method.device.type == "cuda"
        activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
        with profile(activities=activities) as prof:
            start = time.perf_counter()
            for b in batches[args.warmup :]:
                method.sample(b)
            method.sync()
            wall = time.perf_counter() - start
    finally:
        method.close()
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    table = prof.key_averages().table(sort_by=key, row_limit=args.top)
    rows = [
        {
            "name": e.key,
            "calls": e.count,
            "self_cpu_ms": e.self_cpu_time_total / 1e3,
            "cpu_ms": e.cpu_time_total / 1e3,
            "self_device_ms": getattr(e, "self_device_time_total", 0.0) / 1e3,
        }
        for e in sorted(prof.key_averages(), key=lambda e: getattr(e, key, 0.0), reverse=True)[: args.top]
    ]
    head = f"# {command_line()}\n# {machine()}; {args.method}, {args.num_nodes:,} nodes, fanouts {args.fanouts}, batch {args.batch_size}: {wall / args.batches * 1e3:.2f} ms per batch under the profiler\n"
    print(head + table, flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".txt").write_text(head + table, encoding="utf-8")
    out.with_suffix(".json").write_text(json.dumps({"command": command_line(), "ms_per_batch": wall / args.batches * 1e3, "operators": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
