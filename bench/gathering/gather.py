"""Gather bandwidth per FeatureStore backend over a grid of feature widths, dtypes and batch sizes.

Correctness first: every method's output must equal ``table[ids]`` before it is timed. A method
that cannot be built or gives a wrong result becomes a failure row naming the error, the other
methods still run, and the script exits 1 after writing its results. Then warm-up, then the
median and spread of ``--repeats`` timed gathers: CUDA events on a GPU, ``perf_counter`` on the
CPU. Bandwidth counts useful bytes (rows x row bytes).

On a GPU: ``zerocopy`` (aligned kernel), ``zerocopy-naive`` (naive kernel), ``cpu`` (CPU gather
into pinned staging + async H2D copy) and ``gpu`` (table resident on the device), each against
``h2d``, a pinned host-to-device copy of the same bytes (the PCIe ceiling). At ``--tune-cols``
also ``zerocopy+sort_ids`` and ``zerocopy+max_blocks=N`` for each ``--max-blocks`` cap (``2sm``:
twice the device's SM count), the figures the kernel defaults are chosen from.
On the CPU: the cpu backend against ``torch.index_select`` and ``table[ids]`` fancy indexing,
with ``copy`` (a contiguous copy of the same bytes) as the ceiling.

``--codecs fp16,bf16,int8,int8-row`` (GPU) adds ``zerocopy-<codec>`` at the widths of
``--codec-cols``: the table compressed once per width (``dgl_zerocopy.compress``; ``int8-row``: one
scale per row) and gathered by the decoding kernel into rows of the table's dtype. Checked against
the reference decode (``Codec.decode``), and counted in bytes of the uncompressed rows: the
fp32-equivalent bandwidth, which can pass the h2d ceiling.

``--cache-fracs 0.1,0.25,0.5`` (GPU) adds, at ``--tune-cols``, ``zerocopy+cache=F`` and
``cpu+cache=F``: stores with a hot-row cache holding the share F of the rows (a random choice of
rows: with uniform ids the hit rate is about F, and the ``hit_rate`` column gives the measured
one). Their GB/s counts every row of the batch, hits and misses: what training receives.

Results survive a stop: the CSV (``STEM.csv``) gets each configuration's summary row (one width,
batch and method; ``wall_s`` its seconds, set-up included) as soon as it is measured, and is
rewritten in order with the JSON and PNG at the end. ``--time-limit S``: no width and no
configuration starts after S seconds; each one left becomes a row with status
``skipped: time limit``, which is not a failure (the exit code stays 0 when every other row is ok).
A line per configuration on stdout says how far the sweep got.

    python bench/gathering/gather.py [--rows 1000000] [--cols 100,128,256,602] [--batches 1024,16384,262144]
    dgl-zerocopy bench gather  (the same)
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: common.py
import common  # noqa: E402
from common import RESULTS, TIME_LIMIT_STATUS, append_csv_row, begin_csv, command_line, machine, summarize, time_cuda_events, time_repeated, write_results  # noqa: E402

DTYPES = {"fp32": torch.float32, "fp16": torch.float16}
GPU_METHODS = ("h2d", "zerocopy", "zerocopy-naive", "cpu", "gpu")
CPU_METHODS = ("copy", "cpu", "index_select", "fancy")
CEILINGS = ("h2d", "copy")
#: The columns of the summary rows, in the CSV's order.
SUMMARY_FIELDS = (
    "dtype",
    "dim",
    "row_bytes",
    "table_rows",
    "batch",
    "method",
    "gbps_median",
    "gbps_q1",
    "gbps_q3",
    "gbps_min",
    "gbps_max",
    "ratio_to_ceiling",
    "status",
    "hit_rate",
    "wall_s",
)
#: ``--codecs`` names -> (codec, int8 axis) of the compressed zero-copy methods ``zerocopy-<name>``.
CODECS = {"fp16": ("fp16", None), "bf16": ("bf16", None), "int8": ("int8", "column"), "int8-row": ("int8", "row")}
# The zero-copy methods gather in the ids' own order (sort_ids=False), as the link model reads them;
# ``+sort_ids`` sorts every batch and ``+sort_ids=auto`` lets the store's sort policy choose.
STORE_METHODS = {  # method -> the backend and GatherOptions fields
    "zerocopy": {"backend": "zerocopy", "sort_ids": False},
    "zerocopy-naive": {"backend": "zerocopy", "variant": "naive", "sort_ids": False},
    "cpu": {"backend": "cpu"},
    "gpu": {"backend": "gpu"},
}


def parse_ints(text: str) -> list[int]:
    """``"16,32,100"`` -> ``[16, 32, 100]``."""
    return [int(v) for v in text.split(",") if v.strip()]


def parse_max_blocks(text: str, sms: int) -> list[int]:
    """Grid caps from ``"none,0.5sm,1sm,264"``: ``Nsm`` is N times ``sms`` (rounded, at least 1),
    a bare integer is taken as is, ``none`` (the default, uncapped) is dropped: the plain
    ``zerocopy`` row is that case. Duplicates are dropped, order kept."""
    caps: list[int] = []
    for item in (v.strip().lower() for v in text.split(",")):
        if item in ("", "none"):
            continue
        try:
            cap = max(1, round(float(item[:-2]) * sms)) if item.endswith("sm") else int(item)
        except ValueError:
            raise ValueError(f"--max-blocks items must be integers, 'Nsm' (N times the SM count) or 'none', but got {item!r}") from None
        if cap < 1:
            raise ValueError(f"--max-blocks caps must be positive, but got {item!r}")
        if cap not in caps:
            caps.append(cap)
    return caps


def store_options(method: str) -> dict:
    """A store method's backend and kernel options (``GatherOptions`` fields): a name of ``STORE_METHODS``, optionally
    followed by ``+sort_ids``, ``+sort_ids=auto``, ``+max_blocks=N`` or ``+cache=F`` (``cache_fraction``: the share of
    the rows to cache, which :func:`open_method` turns into a budget)."""
    base, _, option = method.partition("+")
    if base not in STORE_METHODS:
        raise ValueError(f"unknown gather method {method!r}; store methods are {', '.join(STORE_METHODS)}")
    kwargs = dict(STORE_METHODS[base])
    if option == "sort_ids":
        kwargs["sort_ids"] = True
    elif option == "sort_ids=auto":
        kwargs["sort_ids"] = "auto"
    elif option.startswith("max_blocks="):
        kwargs["max_blocks"] = int(option.removeprefix("max_blocks="))
    elif option.startswith("cache=") and base in ("zerocopy", "cpu"):
        kwargs["cache_fraction"] = float(option.removeprefix("cache="))
    elif option:
        raise ValueError(f"unknown option {option!r} in gather method {method!r}; use +sort_ids, +sort_ids=auto, +max_blocks=N or (zerocopy, cpu) +cache=F")
    return kwargs


def methods_for(cuda: bool, tune: bool, max_blocks: list[int], codecs: tuple[str, ...] = (), cache_fracs: tuple[float, ...] = ()) -> list[str]:
    """The methods timed at one width, the ceiling first; ``tune`` adds the zero-copy options and
    the cached stores of ``cache_fracs``, ``codecs`` (GPU) the compressed zero-copy methods."""
    if not cuda:
        return list(CPU_METHODS)
    tuning = (
        ["zerocopy+sort_ids", *(f"zerocopy+max_blocks={b}" for b in max_blocks), *(f"{base}+cache={f:g}" for f in cache_fracs for base in ("zerocopy", "cpu"))]
        if tune
        else []
    )
    return [*GPU_METHODS, *(f"zerocopy-{c}" for c in codecs), *tuning]


def open_compressed(
    name: str, table: torch.Tensor, ids: torch.Tensor, out: torch.Tensor, compressed_tables: dict | None = None
) -> tuple[Callable[[], torch.Tensor], Callable[[], None], torch.Tensor]:
    """A compressed zero-copy method ``zerocopy-<codec>``: (one gather, release, the rows it must
    return: the reference decode of the same codes). ``compressed_tables`` keeps each compressed
    form of ``table`` for the next batch (the caller empties it for the next table)."""
    from dgl_zerocopy import FeatureStore, compress
    from dgl_zerocopy.store import Compression

    codec, axis = CODECS[name.removeprefix("zerocopy-")]
    cache = {} if compressed_tables is None else compressed_tables
    if name not in cache:
        cache[name] = compress(table, codec, **({"axis": axis} if axis else {}))
    compressed = cache[name]
    want = compressed.decode(ids, out.dtype).to(out.device)
    store = FeatureStore(compressed, backend="zerocopy", device=out.device, compression=Compression(out_dtype=out.dtype))
    return (lambda: store.gather(ids, out=out)), store.close, want


def table_rows(rows: int, row_bytes: int, table_gb: float | None) -> int:
    """``rows``, or fewer so that the table stays within ``table_gb`` GB (wide rows)."""
    return rows if not table_gb else max(1, min(rows, int(table_gb * 1e9) // row_bytes))


def make_table(rng: np.random.Generator, rows: int, dim: int, dtype: torch.dtype, cuda: bool) -> torch.Tensor:
    """A random host table. On a GPU it is drawn there (NumPy would take minutes for gigabytes)."""
    if cuda:
        gen = torch.Generator(device="cuda").manual_seed(int(rng.integers(2**31)))
        return torch.randn((rows, dim), generator=gen, device="cuda").to(dtype).cpu()
    return torch.from_numpy(rng.standard_normal((rows, dim), dtype=np.float32)).to(dtype)


def open_method(
    name: str, table: torch.Tensor, ids: torch.Tensor, out: torch.Tensor, stores: list | None = None
) -> tuple[Callable[[], torch.Tensor], Callable[[], None]]:
    """(one gather of ``ids`` as a zero-argument callable, a function that releases it). Store
    methods write into ``out``; the ids stay on the CPU, as they come from the sampler. A store
    made here is appended to ``stores`` (for its cache counters)."""
    if name == "h2d":
        src = torch.empty(out.shape, dtype=out.dtype, pin_memory=True)
        return (lambda: out.copy_(src, non_blocking=True)), (lambda: None)
    if name == "copy":
        src = torch.ones_like(out)  # the same bytes, contiguous: the ceiling a gather can approach
        return (lambda: out.copy_(src)), (lambda: None)
    if name == "index_select":
        return (lambda: torch.index_select(table, 0, ids)), (lambda: None)
    if name == "fancy":
        return (lambda: table[ids]), (lambda: None)
    from dgl_zerocopy import FeatureStore
    from dgl_zerocopy.store import DeviceCache, GatherOptions

    options = store_options(name)
    cache = None
    if "cache_fraction" in options:
        from dgl_zerocopy.store.cache import CachePolicy, budget_for_rows

        rows = round(options.pop("cache_fraction") * table.shape[0])
        order = torch.randperm(table.shape[0], generator=torch.Generator().manual_seed(rows))
        cache = DeviceCache(budget_for_rows(rows, table.shape[1] * table.element_size(), table.shape[0]), CachePolicy(order))
    backend = options.pop("backend")
    store = FeatureStore(table, backend, out.device, kernel=GatherOptions(**options), cache=cache)
    if stores is not None:
        stores.append(store)
    return (lambda: store.gather(ids, out=out)), store.close


def check_equal(got: torch.Tensor, want: torch.Tensor) -> None:
    """Raise AssertionError saying how many rows differ (and the first) unless ``got == want``."""
    if got.shape != want.shape or got.dtype != want.dtype or got.device != want.device:
        raise AssertionError(f"wrong result: {got.dtype} {tuple(got.shape)} on {got.device}, expected {want.dtype} {tuple(want.shape)} on {want.device}")
    bad = (got != want).flatten(1).any(1).nonzero().flatten()
    if bad.numel():
        raise AssertionError(f"wrong result: {bad.numel()} of {want.shape[0]} rows differ from table[ids], the first at position {int(bad[0])}")


def time_method(
    name: str,
    table: torch.Tensor,
    ids: torch.Tensor,
    reference: torch.Tensor,
    out: torch.Tensor,
    timer: Callable[[Callable[[], object], int], list[float]],
    repeats: int,
    compressed_tables: dict | None = None,
    extra: dict | None = None,
) -> list[float]:
    """Check ``name`` against ``reference`` (unless it is a ceiling; a compressed method against
    the reference decode), then time it. A cached store's hit rate over the timed gathers goes
    into ``extra["hit_rate"]``."""
    stores: list = []
    if name.removeprefix("zerocopy-") in CODECS:
        fn, close, reference = open_compressed(name, table, ids, out, compressed_tables)
    else:
        fn, close = open_method(name, table, ids, out, stores)
    try:
        if name not in CEILINGS:
            out.fill_(float("nan"))  # a gather that writes nothing must not pass on the last method's rows
            check_equal(fn(), reference)
        if stores and stores[0].cache is not None:
            stores[0].reset_cache_stats()
        times = timer(fn, repeats)
        if stores and stores[0].cache is not None and extra is not None:
            extra["hit_rate"] = stores[0].cache_stats()["hit_rate"]
        return times
    finally:
        close()


def failure_text(error: BaseException) -> str:
    """``failed: Type: first line of the message`` (short enough for a table cell)."""
    lines = str(error).strip().splitlines()
    return f"failed: {type(error).__name__}: {lines[0] if lines else ''}"[:300]


def main(argv: list[str] | None = None) -> int:
    cuda = torch.cuda.is_available()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000 if cuda else 200_000, help="table rows")
    parser.add_argument("--table-gb", type=float, default=None, help="cap on one table's size: wide rows get fewer rows (default: no cap)")
    parser.add_argument("--cols", "--dims", dest="dims", default="100,128,256,602", help="feature widths (columns), comma separated")
    parser.add_argument("--dtypes", default="fp32,fp16")
    parser.add_argument("--batches", default="1024,16384,262144", help="ids per gather")
    parser.add_argument("--codecs", default="", help=f"GPU: compressed zero-copy methods to add, comma separated ({', '.join(CODECS)})")
    parser.add_argument("--codec-cols", default="100,128", help="the widths at which --codecs are timed")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--tune-cols", default="128", help="GPU: the widths at which the zero-copy options are timed too, comma separated (0: none)")
    parser.add_argument("--max-blocks", default="0.5sm,1sm,2sm,4sm", help="GPU: grid caps timed at --tune-cols: integers or Nsm (N times the SM count)")
    parser.add_argument(
        "--cache-fracs", default="", help="GPU: shares of the rows cached by zerocopy+cache=F and cpu+cache=F at --tune-cols, e.g. 0.1,0.25,0.5"
    )
    parser.add_argument(
        "--raw",
        choices=("files", "json", "none"),
        default="files",
        help="per-repeat rows: STEM_raw.csv/.json (files), inside STEM.json (json), or not kept (none)",
    )
    parser.add_argument("--time-limit", type=float, default=0, help="seconds: after this, widths not started yet become skipped rows (0: no limit)")
    parser.add_argument("--out", default="gather", help="result file stem under bench/results/, or a path (without suffix) elsewhere")
    args = parser.parse_args(argv)
    dims, batches, codec_dims, tune_dims = parse_ints(args.dims), parse_ints(args.batches), parse_ints(args.codec_cols), set(parse_ints(args.tune_cols))
    if unknown := [d for d in args.dtypes.split(",") if d not in DTYPES]:
        parser.error(f"unknown dtype {unknown[0]!r}; choose from {', '.join(DTYPES)}")
    codecs = tuple(c.strip() for c in args.codecs.split(",") if c.strip())
    try:
        cache_fracs = tuple(float(f) for f in args.cache_fracs.split(",") if f.strip())
    except ValueError:
        parser.error(f"--cache-fracs must be numbers in (0, 1], but got {args.cache_fracs!r}")
    if any(not 0 < f <= 1 for f in cache_fracs):
        parser.error(f"--cache-fracs must be numbers in (0, 1], but got {args.cache_fracs!r}")
    if unknown := [c for c in codecs if c not in CODECS]:
        parser.error(f"unknown codec {unknown[0]!r}; choose from {', '.join(CODECS)}")

    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    sms = torch.cuda.get_device_properties(device).multi_processor_count if cuda else 0
    try:
        max_blocks = parse_max_blocks(args.max_blocks, sms) if cuda else []
    except ValueError as e:
        parser.error(str(e))
    if cuda:
        timer = lambda fn, n: time_cuda_events(fn, n, warmup=3)  # noqa: E731
    else:
        timer = lambda fn, n: time_repeated(fn, n, warmup=3)  # noqa: E731
    ceiling = "h2d" if cuda else "copy"
    meta = {
        "command": command_line(),
        "machine": machine(),
        "device": torch.cuda.get_device_name(device) if cuda else "cpu (no GPU)",
        "table_rows": args.rows,
        "table_gb": args.table_gb or "no cap",
        "repeats": args.repeats,
        "ceiling": ceiling,
        "timer": "CUDA events, device synchronized before each call" if cuda else "perf_counter",
        "sm_count": sms,
    }
    stem = Path(args.out) if Path(args.out).is_absolute() else RESULTS / args.out
    csv_path = stem.parent / f"{stem.name}.csv"
    begin_csv(csv_path, meta, SUMMARY_FIELDS)
    rng = np.random.default_rng(0)
    raw, failures, walls = [], [], {}
    started = time.perf_counter()
    out_of_time = lambda: args.time_limit and time.perf_counter() - started > args.time_limit  # noqa: E731

    def record(key: dict, batch: int, name: str, status: str | None, seconds: float) -> None:
        """Note one configuration's outcome (``status`` None: its timed rows are in ``raw``),
        append its summary row to the CSV and say so on stdout."""
        if status is not None:
            failures.append({**key, "batch": batch, "method": name, "status": status})
        walls[(key["dtype"], key["dim"], batch, name)] = seconds
        point = (key["dtype"], key["dim"], batch)
        rows = summarize_rows(
            [r for r in raw if (r["dtype"], r["dim"], r["batch"]) == point],
            [f for f in failures if (f["dtype"], f["dim"], f["batch"]) == point],
            ceiling,
            walls,
        )
        row = next(r for r in rows if r["method"] == name)
        append_csv_row(csv_path, row, SUMMARY_FIELDS)
        done = f"{row['gbps_median']:.2f} GB/s" if row["status"] == "ok" else row["status"]
        print(f"gather: {key['dtype']} {key['dim']} cols, batch {batch}, {name}: {done} ({seconds:.1f} s)", flush=True)

    for dtype_name in args.dtypes.split(","):
        dtype = DTYPES[dtype_name]
        for dim in dims:
            row_bytes = dim * torch.empty((), dtype=dtype).element_size()
            n_rows = table_rows(args.rows, row_bytes, args.table_gb)
            methods = methods_for(cuda, dim in tune_dims, max_blocks, codecs if dim in codec_dims else (), cache_fracs)
            compressed_tables: dict = {}
            key = {"dtype": dtype_name, "dim": dim, "row_bytes": row_bytes, "table_rows": n_rows}
            if out_of_time():
                for b in batches:
                    for m in methods:
                        record(key, b, m, TIME_LIMIT_STATUS, 0.0)
                continue
            try:
                table = make_table(rng, n_rows, dim, dtype, cuda)
            except Exception as e:  # noqa: BLE001 - e.g. out of memory, or a device left broken by an earlier failure
                for b in batches:
                    for m in methods:
                        record(key, b, m, failure_text(e), 0.0)
                continue
            for batch in batches:
                ids = torch.from_numpy(rng.integers(0, n_rows, batch))
                try:
                    reference = table[ids].to(device)
                    out = torch.empty_like(reference)
                except Exception as e:  # noqa: BLE001 - as above
                    for m in methods:
                        record(key, batch, m, failure_text(e), 0.0)
                    continue
                for name in methods:
                    if out_of_time():
                        record(key, batch, name, TIME_LIMIT_STATUS, 0.0)
                        continue
                    extra: dict = {}
                    begun = time.perf_counter()
                    try:
                        times = time_method(name, table, ids, reference, out, timer, args.repeats, compressed_tables, extra)
                    except Exception as e:  # noqa: BLE001 - recorded as a failure row; the other methods still run
                        record(key, batch, name, failure_text(e), time.perf_counter() - begun)
                        continue
                    raw += [{**key, "batch": batch, "method": name, "seconds": t, "gbps": batch * row_bytes / t / 1e9, **extra} for t in times]
                    record(key, batch, name, None, time.perf_counter() - begun)
                del reference, out
            del table, compressed_tables

    summary = summarize_rows(raw, failures, ceiling, walls)
    if args.raw == "files":
        write_results(f"{stem.name}_raw", raw, meta, stem.parent)
    csv_path, _ = write_results(stem.name, summary, meta, stem.parent, extra={"raw": raw} if args.raw == "json" else None)
    if any(s["gbps_median"] == s["gbps_median"] for s in summary):  # at least one number to draw (NaN != NaN)
        _plot(summary, meta, csv_path.with_suffix(".png"))
    print(f"# {meta['command']}\n# {meta['device']}; {meta['machine']}; table {args.rows:,} rows (cap {meta['table_gb']} GB)")
    print("| dtype | dim | batch | method | GB/s median | q1–q3 | ratio to ceiling | cache hit rate | status |\n|---|---|---|---|---|---|---|---|---|")
    for s in summary:
        hit_rate = f"{s['hit_rate']:.3f}" if s["hit_rate"] == s["hit_rate"] else "–"
        print(
            f"| {s['dtype']} | {s['dim']} | {s['batch']} | {s['method']} | {s['gbps_median']:.2f} | {s['gbps_q1']:.2f}–{s['gbps_q3']:.2f} | "
            f"{s['ratio_to_ceiling']:.2f} | {hit_rate} | {s['status']} |"
        )
    if skipped := sum(f["status"] == TIME_LIMIT_STATUS for f in failures):
        print(f"gather: {skipped} configurations {TIME_LIMIT_STATUS} (--time-limit {args.time_limit:g} s)", flush=True)
    return 1 if any(f["status"] != TIME_LIMIT_STATUS for f in failures) else 0


def summarize_rows(raw: list[dict], failures: list[dict], ceiling: str, walls: dict | None = None) -> list[dict]:
    """One row per (dtype, dim, batch, method), with the keys of :data:`SUMMARY_FIELDS`: GB/s
    median and spread, the ratio to ``ceiling`` at the same point, ``status`` (``ok``, the failure,
    or :data:`TIME_LIMIT_STATUS`; a method without timed rows has NaN numbers) and ``wall_s``, the
    configuration's seconds from ``walls`` (keyed by (dtype, dim, batch, method); NaN if absent)."""
    nan = float("nan")
    order = {}
    for r in raw + failures:
        order.setdefault((r["dtype"], r["dim"], r["batch"]), {}).setdefault(r["method"], r)
    summary = []
    for (dtype, dim, batch), methods in sorted(order.items(), key=lambda kv: kv[0]):
        group = [r for r in raw if (r["dtype"], r["dim"], r["batch"]) == (dtype, dim, batch)]
        top = [r["gbps"] for r in group if r["method"] == ceiling]
        top_median = summarize(top)["median"] if top else nan
        for method, first in methods.items():
            values = [r["gbps"] for r in group if r["method"] == method]
            stats = summarize(values) if values else dict.fromkeys(("median", "q1", "q3", "min", "max"), nan)
            summary.append(
                {
                    "dtype": dtype,
                    "dim": dim,
                    "row_bytes": first["row_bytes"],
                    "table_rows": first["table_rows"],
                    "batch": batch,
                    "method": method,
                    **{f"gbps_{k}": v for k, v in stats.items()},
                    "ratio_to_ceiling": stats["median"] / top_median,
                    "status": "ok" if values else first["status"],
                    "hit_rate": first.get("hit_rate", nan),
                    "wall_s": (walls or {}).get((dtype, dim, batch, method), nan),
                }
            )
    return summary


def _plot(summary: list[dict], meta: dict, path: Path) -> None:
    """Bars of GB/s (median, IQR) per width and method at the largest batch, one panel per dtype,
    and a panel of the zero-copy options where they were timed. Failed methods draw no bar."""
    plt = common.pyplot()

    batch = max(s["batch"] for s in summary)
    sel = [s for s in summary if s["batch"] == batch]
    panels = [(dtype, [s for s in sel if s["dtype"] == dtype and "+" not in s["method"]]) for dtype in dict.fromkeys(s["dtype"] for s in sel)]
    tuned = [s for s in sel if "+" in s["method"]]
    if tuned:  # the default zero-copy row beside its options, at the first width where they were timed
        dtype, dim = tuned[0]["dtype"], tuned[0]["dim"]
        panels.append(("options", [s for s in sel if (s["dtype"], s["dim"]) == (dtype, dim) and s["method"].split("+")[0] == "zerocopy"]))
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 3.8), squeeze=False)
    for ax, (title, rows) in zip(axes[0], panels):
        if title == "options":
            xs = np.arange(len(rows))
            err = [[s["gbps_median"] - s["gbps_q1"] for s in rows], [s["gbps_q3"] - s["gbps_median"] for s in rows]]
            ax.bar(xs, [s["gbps_median"] for s in rows], 0.6, yerr=err, capsize=3)
            ax.set_xticks(xs, [s["method"].removeprefix("zerocopy+") for s in rows], rotation=20, fontsize=7)
            ax.set_xlabel(f"zero-copy options ({rows[0]['dtype']}, {rows[0]['dim']} cols = {rows[0]['row_bytes']} B rows)")
            ax.set_title(f"{meta['device']}: {batch:,} random rows, SMs: {meta['sm_count']}", fontsize=9)
        else:
            dims = sorted({s["dim"] for s in rows})
            bars = {m: [next((s for s in rows if s["dim"] == d and s["method"] == m), None) for d in dims] for m in dict.fromkeys(s["method"] for s in rows)}
            width = 0.8 / len(bars)
            for i, (m, vals) in enumerate(bars.items()):
                med = [v["gbps_median"] if v else np.nan for v in vals]
                err = [[v["gbps_median"] - v["gbps_q1"] if v else np.nan for v in vals], [v["gbps_q3"] - v["gbps_median"] if v else np.nan for v in vals]]
                ax.bar(np.arange(len(dims)) + i * width, med, width, yerr=err, capsize=3, label=m)
            ax.set_xticks(np.arange(len(dims)) + 0.4 - width / 2, [str(d) for d in dims])
            ax.set_xlabel(f"feature dim ({title})")
            ax.set_title(f"{meta['device']}: gather of {batch:,} random rows", fontsize=9)
            ax.legend(fontsize=8)
        ax.set_ylabel("GB/s (median, IQR)")
    common.save_figure(fig, path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
