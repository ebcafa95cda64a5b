"""Device operations and host synchronisations per sampled batch, counted: what our GPU samplers ask of
the device for one minibatch (``dgl_zerocopy.cuda.sampling.op_count``: torch operations that launch
work, our kernel launches, every value read back to the host), beside the times of
bench/sampler/sampling.py.

  gpu-pinned     GpuNeighborSampler on CUDA, the CSC pinned in place
  gpu-device     the same, the CSC in device memory
  gpu-snapshot   GpuSnapshotSampler on CUDA (a batch reads only the snapshot)
  pyg-gpu        the PyG loader's GPU route: the blocks, then PyG's output (sample_with_blocks)
  emulator       GpuNeighborSampler(device="emulator"): the GPU launcher's host logic on the CPU
  snapshot-emulator, pyg-emulator: the same for the snapshot and the PyG route

The counts do not depend on the graph's size (a fixed number per layer), so the graph is a small random
CSC. One batch is sampled untimed (kernels compiled, snapshot built), then one counted. Without CUDA the
emulator methods give the GPU's counts (the same driver and grids). Writes STEM.json
(``{"rows": [...]}``, one row per method) and prints one line per method.

    python bench/sampler/launch_count.py [--methods gpu-pinned,gpu-device,gpu-snapshot] [--fanouts 15,10,5]
        [--batch-size 1024] [--num-nodes 20000] [--out STEM]
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

import torch

METHODS = ("gpu-pinned", "gpu-device", "gpu-snapshot", "pyg-gpu", "emulator", "snapshot-emulator", "pyg-emulator")
#: The CPU stand-in of each GPU method (the same host logic, on the emulated kernels).
STAND_INS = {"gpu-pinned": "emulator", "gpu-device": "emulator", "gpu-snapshot": "snapshot-emulator", "pyg-gpu": "pyg-emulator"}


def random_csc(num_nodes: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """An in-edge CSC with degrees 0..40 and one hub (a tenth of the nodes' in-edges)."""
    gen = torch.Generator().manual_seed(seed)
    deg = torch.randint(0, 41, (num_nodes,), generator=gen)
    deg[0] = max(1, int(deg.sum()) // 10)
    indptr = torch.cat([torch.zeros(1, dtype=torch.int64), deg.cumsum(0)])
    return indptr, torch.randint(0, num_nodes, (int(indptr[-1]),), generator=gen)


def sampler_for(method: str, csc: tuple[torch.Tensor, torch.Tensor], fanouts: list[int]):
    """``(run, close)``: ``run(seeds)`` samples one batch by ``method``; ``close()`` gives everything back."""
    from dgl_zerocopy.sampling import GpuNeighborSampler, GpuSnapshotSampler, SamplingGraph

    emulated = not method.startswith(("gpu-", "pyg-gpu"))
    device = "emulator" if emulated else "cuda"
    placement = "device" if method == "gpu-device" else "pinned"
    graph = SamplingGraph(*csc) if emulated else SamplingGraph(*csc, placement=placement, device="cuda")
    if "snapshot" in method:
        sampler = GpuSnapshotSampler(fanouts, device=device)
        return (lambda seeds: sampler.sample_blocks(graph, seeds)), (lambda: (sampler.close(), graph.close()))
    sampler = GpuNeighborSampler(list(reversed(fanouts)) if method.startswith("pyg") else fanouts, device=device, placement=placement)
    if method.startswith("pyg"):
        from dgl_zerocopy.pyg.sampler import sample_with_blocks

        return (lambda seeds: sample_with_blocks(sampler, graph, seeds, fanouts)), (lambda: (sampler.close(), graph.close()))
    return (lambda seeds: sampler.sample_blocks(graph, seeds)), (lambda: (sampler.close(), graph.close()))


def count_method(method: str, csc: tuple[torch.Tensor, torch.Tensor], fanouts: list[int], batch_size: int) -> dict:
    """One row: the counted batch's launches and host syncs, by operation."""
    from dgl_zerocopy.cuda.sampling.op_count import count_ops

    run, close = sampler_for(method, csc, fanouts)
    seeds = torch.randint(0, len(csc[0]) - 1, (batch_size,), generator=torch.Generator().manual_seed(1))
    if method.startswith(("gpu-", "pyg-gpu")):
        seeds = seeds.cuda()
    try:
        run(seeds)  # compiled, built, warm
        with count_ops() as count:
            run(seeds)
    finally:
        close()
    return {
        "method": method,
        "fanouts": ",".join(map(str, fanouts)),
        "batch_size": batch_size,
        "launches_per_batch": count.launches,
        "host_syncs_per_batch": count.host_syncs,
        "kernels": dict(count.kernels),
        "torch_ops": dict(count.torch_ops),
        "syncs": dict(count.syncs),
        "status": "ok",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    cuda = torch.cuda.is_available()
    parser.add_argument("--methods", default="gpu-pinned,gpu-device,gpu-snapshot,pyg-gpu" if cuda else "emulator,snapshot-emulator,pyg-emulator")
    parser.add_argument("--fanouts", default="15,10,5")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--num-nodes", type=int, default=20_000)
    parser.add_argument("--out", type=Path, default=None, help="write STEM.json")
    args = parser.parse_args(argv)
    methods = [m for m in args.methods.split(",") if m]
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        parser.error(f"unknown method(s) {unknown}; choose from {', '.join(METHODS)}")
    fanouts = [int(f) for f in args.fanouts.split(",")]
    csc = random_csc(args.num_nodes)
    rows, failed = [], False
    for method in methods:
        if method.startswith(("gpu-", "pyg-gpu")) and not cuda:
            rows.append({"method": method, "status": "skipped: no CUDA GPU (torch.cuda.is_available() is False)"})
            continue
        try:
            rows.append(count_method(method, csc, fanouts, args.batch_size))
        except Exception as error:  # a row, not a crash: the other methods still count
            failed = True
            rows.append({"method": method, "status": f"failed: {type(error).__name__}: {error}"})
            traceback.print_exc()
        row = rows[-1]
        print(
            f"{method}: {row.get('launches_per_batch', '-')} launches, {row.get('host_syncs_per_batch', '-')} host syncs per batch ({row['status']})",
            flush=True,
        )
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        Path(f"{args.out}.json").write_text(
            json.dumps({"command": "python3 bench/sampler/launch_count.py " + " ".join(argv or sys.argv[1:]), "rows": rows}, indent=1)
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
