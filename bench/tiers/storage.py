"""Feature tables larger than host memory: training from a table on this machine's disk
with a host budget of ``--share`` of it, against an mmap of the whole file under the same limit.

Workload: the products-shaped synthetic graph (:class:`dgl_zerocopy.data.SyntheticSpec`, ``--nodes``)
with ``--dim`` float32 features a row, written once to a ``.npy`` on this machine's disk (``--dir``);
GraphSAGE (``--fanouts``, hidden ``--hidden``) trained on the CPU through our DataLoader (``prefetch``
2, batches of ``--batch-size`` of the 8 % training nodes), ``--epochs`` epochs per run. Each run is
a fresh process; before it the file's pages are dropped from the page cache
(``posix_fadvise(DONTNEED)``; ``fincore`` confirms when installed). Runs:

- ``memory`` (when ``--runs`` names it): the whole table read into memory first, no limit: the
  wait and rows/s the pipeline has on this machine with no storage at all;
- ``mmap``: ``FeatureStore(np.load(path, mmap_mode="r"))``, the whole file mapped, the kernel's
  default read-around on page faults (what a user gets); ``mmap-random``: the same with
  ``madvise(MADV_RANDOM)`` (no read-around: a stronger baseline);
- ``static``, ``dynamic``, ``hybrid``: ``FeatureStore(path, storage=StorageTier(budget,
  policy))`` (docs/storage.md), each with the DataLoader reading ahead and without;
  ``static-int8``: the same budget over the table's int8 codes (``compressed_beside(path, "int8")``,
  written once beside the file, before the run), decoded in the gather, reading ahead.

``--device cuda`` trains on the GPU: the model and the batches there, our tiers with the ``zerocopy``
backend (the host buffer pinned, rows gathered by the GPU from it), ``memory`` the whole table
pinned and gathered the same way, the mmaps with the ``cpu`` backend (a CPU gather from the mapping
and a copy to the device: pinning a mapping would read the whole file); the step ends with
``torch.cuda.synchronize()`` so that the step and the wait are each the device's time too.
``make gpu-check`` runs it as its storage step (bench/gpu_check/gpu_check_storage.py), with ``--time-limit``:
no run starts after that many seconds of the script's clock, and each run's row is written as it
finishes (``status``: ``ok``, ``failed: ...``, ``skipped: time limit``).

Memory limit: each run joins a cgroup (v1 memory controller, where this process may make one)
whose limit, set after a warm-up that reads no row of the file (the graph's sampling formats, three
batches through the model on zeros), is its memory use then plus the budget plus ``--slack`` (the
batches in flight, reader scratch); the store is made after it. The page cache an mmap keeps is
charged to the cgroup, so every run gets the same memory for its rows. Where no cgroup can be made
the runs have no limit, and the results say so.

Reported per run (the last epoch; the first, which starts from a cold buffer, in the CSV too):
rows gathered per second, storage bytes per epoch (``/proc/self/io`` ``read_bytes``: what the
process made the disk read, mmap faults and direct reads alike), storage reads, hit rates per tier
(ours: ``storage_stats()``), the step (forward, backward, optimizer) and the wait (time the loop
waited for its next batch), both summed over the epoch, and the wait's share of the step. Our
tiers' host buffer (:func:`buffer_resident_bytes`): ``buffer_mib``, its size, and
``buffer_resident_mib``, what of it is resident at the epoch's end: the whole buffer from the
store's bind with the ``zerocopy`` backend (pinning makes every page resident at once: ``--device
cuda``), the slots filled so far with ``cpu`` (it grows to the whole); the cgroup's
``cgroup_setup_mib`` and ``cgroup_peak_mib`` measure the process around it.

    python bench/tiers/storage.py [--nodes 200000] [--dim 128] [--share 0.25] [--epochs 2] [--batch-size 64]
        [--repeats 3] [--reader-threads N] [--device cuda] [--time-limit S]

``--repeats R`` runs every name R times, in turn, and its rows give medians with min and max.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: common.py
from common import RESULTS, TIME_LIMIT_STATUS, command_line, machine, pyplot, save_figure, write_results  # noqa: E402

RUNS = (
    ("mmap-random", False),
    ("static-int8", True),
    ("static", True),
    ("static", False),
    ("dynamic", True),
    ("dynamic", False),
    ("hybrid", True),
    ("hybrid", False),
)
EXTRA_RUNS = (("mmap", False), ("memory", False), ("static-int8", False))  # only when --runs names them (see runs_left_out)
CGROUP_ROOT = Path("/sys/fs/cgroup/memory")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=128, help="float32 features a row")
    parser.add_argument("--share", type=float, default=0.25, help="host budget as a share of the table's bytes")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--fanouts", default="10,5")
    parser.add_argument("--max-batches", type=int, default=0, help="stop each epoch after this many batches (0: whole epochs)")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--slack", default=48 << 20, type=int, help="bytes of the memory limit above the budget (batches in flight)")
    parser.add_argument("--threads", type=int, default=1, help="torch's threads")
    parser.add_argument("--reader-threads", type=int, default=0, help="our tiers' storage reader threads (0: the store's default)")
    parser.add_argument("--runs", default=",".join(_run_name(*r) for r in RUNS), help="comma-separated run names")
    parser.add_argument("--dir", help="where the table is written (default: a temporary folder on /tmp's disk, removed after)")
    parser.add_argument("--out-dir", default=str(RESULTS))
    parser.add_argument("--stem", default="storage", help="result files' name: STEM.{csv,json,png}")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the model trains (cuda: our tiers gather with the zerocopy backend)")
    parser.add_argument("--time-limit", type=float, default=0, help="start no run after this many seconds of the script's clock (0: none)")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each name, taken in turn (side by side); rows give medians, min and max")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(run_child(args)), flush=True)
        # Skip the interpreter's teardown: a thread of DGL's still alive there can abort the process
        # (SIGABRT, "terminate called without an active exception") after the run has finished.
        os._exit(0)
    if not 0 < args.share < 1 or args.epochs < 1 or args.repeats < 1:
        parser.error("--share must be in (0, 1), --epochs and --repeats >= 1")
    if args.device == "cuda" and not _cuda_available():
        parser.error("--device cuda: no CUDA GPU here (torch.cuda.is_available() is False); leave it out to train on the CPU")
    began = time.monotonic()
    names = [n.strip() for n in args.runs.split(",") if n.strip()]
    known = {_run_name(*r): r for r in (*EXTRA_RUNS, *RUNS)}
    if not names or set(names) - set(known):
        parser.error(f"--runs must name some of {', '.join(known)}, but got {args.runs!r}")
    folder = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="dgl-zerocopy-storage-bench-"))
    out = Path(args.out_dir)
    rows: list[dict] = []
    if missing := _dgl_import_error():  # every run samples with DGL: each row says why it did not run
        rows = [{"run": name, "status": f"skipped: import dgl failed: {missing}"[:300]} for name in names]
        write_results(args.stem, rows, _meta(args, folder, rows), folder=out)
        print(f"storage: {rows[0]['status']}", flush=True)
        return
    samples: dict[str, list[dict]] = {name: [] for name in names}
    try:
        path = write_table(args, folder)
        for _ in range(args.repeats):  # in turn: a slow spell of the machine falls on every name alike
            for name in names:
                if args.time_limit and time.monotonic() - began > args.time_limit:
                    samples[name].append({"run": name, "status": TIME_LIMIT_STATUS})
                else:
                    samples[name].append(run_in_child(args, path, *known[name]))
                print(f"{name}: {_run_line(samples[name][-1])}", flush=True)
                rows = [_median_row(s) for s in samples.values() if s]
                write_results(args.stem, _uniform(rows), _meta(args, folder, rows), folder=out)  # each run's row as it finishes
    finally:
        if not args.dir:
            shutil.rmtree(folder, ignore_errors=True)
    measured = [r for r in rows if r["status"] == "ok"]
    if measured:
        plot(measured, _meta(args, folder, rows), out / f"{args.stem}.png")
    if failed := [r["run"] for r in rows if r["status"].startswith("failed")]:
        sys.exit(f"storage: {len(failed)} of {len(rows)} runs failed: {', '.join(failed)} (their rows say why)")


def _dgl_import_error() -> str | None:
    try:
        import dgl  # noqa: F401
    except Exception as e:  # noqa: BLE001 - ImportError, or a DGL whose libraries fail to load
        return f"{type(e).__name__}: {e}"
    return None


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


#: Figures a row of several repeats gives as the median, with ``_min`` and ``_max`` beside the first ones.
SPREAD = ("wait_over_step", "rows_per_s", "epoch_s", "storage_mib_per_epoch")
MEDIANS = (*SPREAD, "storage_kib_per_batch", "wait_s", "step_s", "host_hit_rate", "first_epoch_s", "first_storage_mib", "first_wait_over_step")


def _median_row(samples: list[dict]) -> dict:
    """One name's row over its repeats: the first failure as it is; else over the repeats that ran
    (a time limit may leave out the last ones; none ran: the skip as it is) the medians of
    :data:`MEDIANS` (counters from the first), min and max of :data:`SPREAD`, ``repeats``."""
    if failed := [s for s in samples if s["status"].startswith("failed")]:
        return failed[0]
    if not (ran := [s for s in samples if s["status"] == "ok"]):
        return samples[0]
    samples = ran
    row = {**samples[0], "repeats": len(samples)}
    for key in MEDIANS:
        values = [s[key] for s in samples]
        row[key] = statistics.median(values)
        if key in SPREAD:
            row[f"{key}_min"], row[f"{key}_max"] = min(values), max(values)
    return row


def _uniform(rows: list[dict]) -> list[dict]:
    """Rows with the same keys (a failed or skipped run has only ``run`` and ``status``): the CSV's columns."""
    keys = list(dict.fromkeys(k for r in sorted(rows, key=lambda r: r["status"] != "ok") for k in r))
    return [{k: r.get(k) for k in keys} for r in rows]


def _run_line(row: dict) -> str:
    if row["status"] != "ok":
        return row["status"]
    return f"{row['rows_per_s']:.0f} rows/s, {row['storage_mib_per_epoch']:.0f} MiB/epoch, wait {row['wait_over_step']:.2f} of the step"


def _meta(args, folder: Path, rows: list[dict]) -> dict:
    table_bytes = args.nodes * args.dim * 4
    limits = [r["memory_limit"] for r in rows if "memory_limit" in r and not r["memory_limit"].startswith("none: the whole")]
    return {
        "command": command_line(),
        "machine": machine(),
        "table": f"{args.nodes} rows x {args.dim} float32 = {table_bytes / 2**20:.0f} MiB on {disk_of(folder)}",
        "budget": f"{args.share:.0%} of the table = {int(table_bytes * args.share) / 2**20:.1f} MiB",
        "memory_limit": limits[0] if limits else "none",
        "workload": f"GraphSAGE fanouts {args.fanouts}, hidden {args.hidden}, batch {args.batch_size}, {args.epochs} epochs"
        + (f" of {args.max_batches} batches" if args.max_batches else "")
        + f", prefetch 2, {'GPU (zerocopy backend)' if args.device == 'cuda' else 'CPU'}",
        "rule": "each run a fresh process after the file's pages were dropped; figures of the last epoch"
        + (f"; {args.repeats} repeats of every run, taken in turn: medians, min and max" if args.repeats > 1 else ""),
        "runs_left_out": "plain mmap (read-around on faults) unless --runs names it: under the limit it reads ~32 pages per fault",
    }


def _run_name(method: str, ahead: bool) -> str:
    return method if method.startswith("mmap") or method == "memory" else f"{method}{'+ahead' if ahead else ''}"


def disk_of(folder: Path) -> str:
    try:
        return subprocess.run(["df", "--output=source,fstype", str(folder)], capture_output=True, text=True, check=True).stdout.split("\n")[1].strip()
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "unknown"


def write_table(args, folder: Path) -> Path:
    """The synthetic graph (saved with DGL) and its features as a .npy, made once per folder."""
    import numpy as np

    from dgl_zerocopy.data.synthetic import SyntheticSpec, generate

    path = folder / f"feat-{args.nodes}x{args.dim}.npy"
    if not path.exists():
        import dgl
        import torch

        data = generate(SyntheticSpec(num_nodes=args.nodes, feat_dim=args.dim))
        np.save(path, np.ascontiguousarray(data.features, dtype=np.float32))
        graph = data.to_dgl()
        graph.ndata["label"] = torch.from_numpy(data.labels)
        dgl.save_graphs(str(folder / "graph.bin"), [graph])
        np.save(folder / "train.npy", data.train_idx)
    if "static-int8" in args.runs:
        from dgl_zerocopy.store.compression import compressed_beside

        compressed_beside(path, "int8")  # written once; the runs find it
    return path


def run_in_child(args, path: Path, method: str, ahead: bool) -> dict:
    for table in path.parent.rglob("*.npy"):
        drop_cache(table)
    cached = cached_pages(path)
    cmd = [sys.executable, __file__, "--child", f"{method}:{int(ahead)}:{path}", *_child_flags(args)]
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
    try:
        out, err = child.communicate()
    finally:  # a child killed before it left its cgroup leaves it behind: removed once empty
        child.kill()
        child.wait()
        MemoryLimit.remove(child.pid)
    if child.returncode != 0 or not out.strip():
        last = next((line for line in reversed(err.splitlines()) if line.strip()), "no output")
        print(f"the {_run_name(method, ahead)} run failed (exit {child.returncode}):\n{err[-3000:]}", file=sys.stderr, flush=True)
        return {"run": _run_name(method, ahead), "status": f"failed: exit {child.returncode}: {last.strip()}"[:300]}
    row = json.loads(out.strip().splitlines()[-1])
    row["cached_before"] = cached
    return row


def _child_flags(args) -> list[str]:
    return [
        f"--nodes={args.nodes}",
        f"--dim={args.dim}",
        f"--share={args.share}",
        f"--epochs={args.epochs}",
        f"--batch-size={args.batch_size}",
        f"--fanouts={args.fanouts}",
        f"--max-batches={args.max_batches}",
        f"--hidden={args.hidden}",
        f"--slack={args.slack}",
        f"--threads={args.threads}",
        f"--reader-threads={args.reader_threads}",
        f"--device={args.device}",
    ]


def drop_cache(path: Path) -> None:
    """Drop the file's pages from the page cache (what reads it next comes from the disk): written
    back first (DONTNEED drops clean pages only; the file was just written)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def cached_pages(path: Path) -> str:
    """The file's resident size by ``fincore`` (after a drop: what the next run starts with), or ''."""
    if shutil.which("fincore") is None:
        return ""
    done = subprocess.run(["fincore", "--bytes", "--noheadings", "--output=RES", str(path)], capture_output=True, text=True)
    return done.stdout.strip()


# -- the run (a child process) ------------------------------------------------------------------


class MemoryLimit:
    """A cgroup (v1 memory controller) for this process alone, or nothing where none can be made."""

    @staticmethod
    def folder_of(pid: int) -> Path | None:
        """The cgroup a run of process ``pid`` makes (under this process's memory cgroup), or None."""
        try:
            mine = next(line.split(":", 2)[2] for line in Path("/proc/self/cgroup").read_text().splitlines() if ":memory:" in line)
        except (OSError, StopIteration):
            return None
        return CGROUP_ROOT / mine.lstrip("/") / f"dgl-zerocopy-bench-{pid}"

    @staticmethod
    def remove(pid: int) -> None:
        folder = MemoryLimit.folder_of(pid)
        if folder is not None and folder.exists():
            with contextlib.suppress(OSError):
                folder.rmdir()

    def __init__(self) -> None:
        self.folder = None
        self.setup = 0  # bytes in use when the limit was set
        try:
            folder = self.folder_of(os.getpid())
            if folder is None:
                return
            folder.mkdir()
            (folder / "cgroup.procs").write_text(str(os.getpid()))
            self.folder = folder
        except OSError:
            self.folder = None

    def limit(self, extra: int) -> str:
        if self.folder is None:
            return "none (no cgroup could be made)"
        usage = int((self.folder / "memory.usage_in_bytes").read_text())
        self.setup = usage
        (self.folder / "memory.limit_in_bytes").write_text(str(usage + extra))
        return f"cgroup: use after setup + {extra / 2**20:.0f} MiB"

    def peak(self) -> int:
        return int((self.folder / "memory.max_usage_in_bytes").read_text()) if self.folder is not None else 0

    def leave(self) -> None:
        """Back to the parent cgroup and remove this one (a cgroup with a process cannot be removed)."""
        if self.folder is None:
            return
        try:
            (self.folder.parent / "cgroup.procs").write_text(str(os.getpid()))
            self.folder.rmdir()
        except OSError:
            pass


def buffer_resident_bytes(backend: str, buffer_bytes: int, rows_read: int, row_bytes: int) -> int:
    """Bytes of a store's host buffer (``buffer_bytes``, ``FeatureStore.nbytes``) resident in memory
    after ``rows_read`` rows were read into it (docs/storage.md): the whole buffer with ``zerocopy``,
    which pins it when the store binds, before any row is read; with ``cpu`` about the slots filled so
    far (each row read fills one, and a filled slot is reused only when no empty one is left, save
    the static share's), at most the whole buffer."""
    if backend == "zerocopy":
        return buffer_bytes
    return min(buffer_bytes, rows_read * row_bytes)


def _io_read_bytes() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("read_bytes:"):
            return int(line.split()[1])
    return 0


def run_child(args) -> dict:
    import mmap

    import dgl
    import numpy as np
    import torch
    import torch.nn.functional as F

    from dgl_zerocopy import DataLoader, FeatureStore
    from dgl_zerocopy.store import DeviceCache, StorageTier
    from dgl_zerocopy.training.models import GraphSAGE

    method, ahead, path = args.child.split(":", 2)
    ahead, path = bool(int(ahead)), Path(path)
    device = torch.device(args.device)
    # On the GPU our tiers gather with the zerocopy kernel from the pinned host buffer; an mmap stays
    # with the cpu backend (pinning a mapping would read the whole file), as DGL's default path does.
    ours = "zerocopy" if device.type == "cuda" else "cpu"
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    memory = MemoryLimit()
    try:
        graph = dgl.load_graphs(str(path.parent / "graph.bin"))[0][0]
        labels = graph.ndata.pop("label")
        train = torch.from_numpy(np.load(path.parent / "train.npy"))
        table_bytes = args.nodes * args.dim * 4
        budget = int(table_bytes * args.share)
        fanouts = [int(f) for f in args.fanouts.split(",")]
        sampler = dgl.dataloading.NeighborSampler(fanouts)
        model = GraphSAGE(args.dim, args.hidden, int(labels.max()) + 1, num_layers=len(fanouts), dropout=0.5).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.003)
        # Warm up before the limit, on zeros (no row of the file read): the graph's sampling formats,
        # the model's and the optimizer's state, the allocator's arenas. The limit then covers the
        # same thing in every run: the store (rows, maps; or an mmap's page cache) and the batches.
        graph.create_formats_()
        for i in range(3):
            _, _, blocks = sampler.sample(graph, train[i * args.batch_size : (i + 1) * args.batch_size])
            loss = model(blocks, torch.zeros(blocks[0].num_src_nodes(), args.dim, device=device)).sum()  # DGL's blocks: the model moves them
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        reading = {"threads": args.reader_threads} if args.reader_threads else {}
        limit = memory.limit(budget + args.slack) if method != "memory" else "none: the whole table in memory (the reference)"
        if method == "memory":  # read whole before the epochs: no storage in the timed part
            store = FeatureStore(torch.from_numpy(np.load(path)), backend=ours, device=device)
        elif method.startswith("mmap"):
            array = np.load(path, mmap_mode="r")
            if method == "mmap-random":
                array._mmap.madvise(mmap.MADV_RANDOM)
            store = FeatureStore(array, backend="cpu", device=device)
        elif method == "static-int8":  # the int8 codes (a folder beside the file, written once), decoded in the gather
            from dgl_zerocopy.store.compression import compressed_beside

            tier = StorageTier(budget, "static", **reading)
            store = FeatureStore(compressed_beside(path, "int8"), backend=ours, device=device, storage=tier, cache=DeviceCache(graph=graph))
        else:
            store = FeatureStore(path, backend=ours, device=device, storage=StorageTier(budget, method, **reading), cache=DeviceCache(graph=graph))
        loader = DataLoader(
            graph,
            train,
            sampler,
            features={"feat": store},
            labels={"label": labels},
            device=device,
            batch_size=args.batch_size,
            shuffle=True,
            seed=0,
            read_ahead=ahead,
        )
        epochs = []
        rows_read = 0  # into the host buffer, over every epoch (its slots fill once, then are reused)
        row_bytes = store.shape[1] * torch.empty((), dtype=store.stored_dtype).element_size()
        for _ in range(args.epochs):
            if store.on_storage:
                store.reset_storage_stats()
            io0, start = _io_read_bytes(), time.perf_counter()
            wait = step = 0.0
            rows = batches = 0
            it = iter(loader)
            while not args.max_batches or batches < args.max_batches:
                t0 = time.perf_counter()
                try:
                    input_nodes, _, blocks = next(it)
                except StopIteration:
                    break
                t1 = time.perf_counter()
                logits = model(blocks, blocks[0].srcdata["feat"])
                loss = F.cross_entropy(logits, blocks[-1].dstdata["label"].long())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                if device.type == "cuda":  # the step's kernels counted in the step, not in the next wait
                    torch.cuda.synchronize()
                wait, step = wait + (t1 - t0), step + (time.perf_counter() - t1)
                rows, batches = rows + input_nodes.numel(), batches + 1
            seconds = time.perf_counter() - start
            stats = store.storage_stats() if store.on_storage else {}
            rows_read += stats.get("storage_rows", 0) + stats.get("read_ahead_rows", 0)
            resident = buffer_resident_bytes(store.backend, store.nbytes, rows_read, row_bytes) if store.on_storage else float("nan")
            epochs.append(
                {
                    "epoch_s": seconds,
                    "rows_per_s": rows / seconds,
                    "storage_mib_per_epoch": (_io_read_bytes() - io0) / 2**20,
                    "storage_kib_per_batch": (_io_read_bytes() - io0) / 2**10 / max(1, batches),
                    "wait_s": wait,
                    "step_s": step,
                    "wait_over_step": wait / step,
                    "batches": batches,
                    "rows": rows,
                    "host_hit_rate": stats.get("hit_rate", float("nan")),
                    "storage_reads": stats.get("storage_reads", float("nan")),
                    "storage_rows": stats.get("storage_rows", float("nan")),
                    "read_ahead_hits": stats.get("read_ahead_hits", float("nan")),
                    "read_ahead_skipped": stats.get("read_ahead_skipped", float("nan")),
                    "evictions": stats.get("evictions", float("nan")),
                    "buffer_mib": store.nbytes / 2**20 if store.on_storage else float("nan"),
                    "buffer_resident_mib": resident / 2**20,
                }
            )
        loader.close()
        store.close()
        last, first = epochs[-1], epochs[0]
        return {
            "run": _run_name(method, ahead),
            "status": "ok",
            "device": args.device,
            "backend": store.backend,
            "reader_threads": args.reader_threads or "default",
            "method": method,
            "read_ahead": ahead,
            **last,
            "first_epoch_s": first["epoch_s"],
            "first_storage_mib": first["storage_mib_per_epoch"],
            "first_wait_over_step": first["wait_over_step"],
            "first_buffer_resident_mib": first["buffer_resident_mib"],
            "memory_limit": limit,
            "cgroup_setup_mib": memory.setup / 2**20,
            "cgroup_peak_mib": memory.peak() / 2**20,
        }
    finally:
        memory.leave()


def plot(rows: list[dict], meta: dict, path: Path) -> None:
    plt = pyplot()

    names = [r["run"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, key, label in zip(
        axes,
        ("storage_mib_per_epoch", "rows_per_s", "wait_over_step"),
        ("storage MiB per epoch (last epoch)", "rows gathered per second", "wait / step (last epoch)"),
    ):
        heights = [r[key] for r in rows]
        # min-max whiskers where the rows are medians of repeats
        spread = [[h - r.get(f"{key}_min", h) for r, h in zip(rows, heights)], [r.get(f"{key}_max", h) - h for r, h in zip(rows, heights)]]
        ax.bar(names, heights, yerr=spread, capsize=3, color=["#999999" if n.startswith("mmap") else "#3b7dd8" for n in names])
        ax.set_title(label + (" median, min-max" if any("repeats" in r for r in rows) else ""), fontsize=10)
        ax.tick_params(axis="x", rotation=45)
    axes[2].axhline(0.05, color="red", lw=0.8, ls="--")
    fig.suptitle(f"{meta['table']}; budget {meta['budget']}; limit {meta['memory_limit']}", fontsize=9)
    save_figure(fig, path)


if __name__ == "__main__":
    main()
