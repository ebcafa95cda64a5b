"""Small helpers every benchmark shares: repeated timing, summary statistics, result files."""

from __future__ import annotations

import csv
import json
import math
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path


def _install_graphbolt_placeholder() -> None:
    """Let a benchmark ``import dgl`` before ``dgl_zerocopy`` on a torch without DGL's graphbolt
    library. An installed dgl-zerocopy does this at interpreter start (its ``.pth``); a checkout on
    ``PYTHONPATH`` (``make gpu-check`` on a GPU image) has no ``.pth`` that Python would read, and
    there ``import dgl`` failed (``No module named 'torchdata'``) until this hook was installed."""
    try:
        import _dgl_zerocopy_graphbolt
    except ImportError:  # no checkout on the path: dgl_zerocopy is not importable either
        return
    _dgl_zerocopy_graphbolt.install()


_install_graphbolt_placeholder()
RESULTS = Path(__file__).resolve().parent / "results"
#: The status of a row that ``--time-limit`` left out (not a failure of the code).
TIME_LIMIT_STATUS = "skipped: time limit"


def command_line() -> str:
    """The exact command that produced a result, for the record beside it."""
    return " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv])


def time_repeated(fn: Callable[[], object], repeats: int, warmup: int = 2, sync: Callable[[], None] | None = None) -> list[float]:
    """Seconds per call of ``fn`` for ``repeats`` calls after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if sync:
            sync()
        start = time.perf_counter()
        fn()
        if sync:
            sync()
        times.append(time.perf_counter() - start)
    return times


def time_cuda_events(fn: Callable[[], object], repeats: int, warmup: int = 2) -> list[float]:
    """Seconds per call of ``fn``, read from CUDA events recorded on the current stream around it.

    The device is synchronized before each timed call, so its start event runs at once and the
    interval holds ``fn``'s host work too (a CPU gather before its copy) and no earlier work.
    ``fn`` must enqueue its device work on the current stream."""
    import torch

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)  # milliseconds -> seconds
    return times


def summarize(values: list[float]) -> dict[str, float]:
    """Median and spread (quartiles, min, max) of ``values``. The quartiles interpolate between the
    values (``method="inclusive"``, as ``np.percentile``): they stay within min..max however few
    values there are, where the default method extrapolates past them (below zero for two timings)."""
    q = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else [values[0]] * 3
    return {"median": statistics.median(values), "q1": q[0], "q3": q[2], "min": min(values), "max": max(values)}


def machine() -> str:
    import os

    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"


def begin_csv(path: Path, meta: dict, fields: list[str]) -> None:
    """Start ``path`` as :func:`write_results` writes it (``# key: value`` lines, then the header ``fields``),
    for :func:`append_csv_row` to fill as results come."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        f.writelines(f"# {k}: {v}\n" for k, v in meta.items())
        csv.writer(f, lineterminator="\n").writerow(fields)


def append_csv_row(path: Path, row: dict, fields: list[str]) -> None:
    """Append one row (its ``fields``) to ``path`` and close it, so that a killed run keeps it."""
    with path.open("a", newline="") as f:
        csv.writer(f, lineterminator="\n").writerow([f"{row[k]:.6g}" if isinstance(row[k], float) else str(row[k]) for k in fields])


def write_results(stem: str, rows: list[dict], meta: dict, folder: str | Path = RESULTS, extra: dict | None = None) -> tuple[Path, Path]:
    """Write ``rows`` as CSV (``# key: value`` header lines first) and JSON under ``folder``
    (default bench/results/; tests pass a temporary one so the committed results stay).
    The CSV's columns are every row's keys in order of first appearance; a row without one (a
    side-by-side run that did not fit) leaves its cell empty.
    ``extra`` adds keys to the JSON only (e.g. raw per-repeat rows, kept out of the CSV)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    csv_path, json_path = folder / f"{stem}.csv", folder / f"{stem}.json"
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with csv_path.open("w", newline="") as f:
        for k, v in meta.items():
            f.write(f"# {k}: {v}\n")
        writer = csv.writer(f, lineterminator="\n")  # quotes a field only where it holds a comma (an error message)
        writer.writerow(keys)
        for r in rows:
            writer.writerow([_cell(r.get(k, "")) for k in keys])
    json_path.write_text(json.dumps({"meta": meta, "rows": rows, **(extra or {})}, indent=1))
    return csv_path, json_path


def _cell(value) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def chosen(parser, text: str, choices, what: str) -> list[str]:
    """The names in the comma-separated ``text``; ``parser.error`` (exit 2) names one not among
    ``choices`` (the ``what``: ``"dataset"``) and lists them."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        if name not in choices:
            parser.error(f"unknown {what} {name!r}; choose from {', '.join(choices)}")
    return names


def synthetic_config(args, **keys):
    """The ``TrainConfig`` of a benchmark's training on the synthetic graph: ``args``' fanouts, batch
    size, hidden width and epochs, evaluated once (after the last epoch), and ``keys``."""
    from dgl_zerocopy.training.config import TrainConfig

    return TrainConfig(
        dataset="synthetic", fanouts=args.fanouts, batch_size=args.batch_size, hidden=args.hidden, epochs=args.epochs, eval_every=args.epochs, **keys
    )


class SeedRuns:
    """The training runs of one setting, a seed each: the test accuracy at each run's best
    validation epoch (``accs``), epoch times past the first (it warms up), the evaluations' times
    and each run's seconds."""

    def __init__(self) -> None:
        self.accs: list[float] = []
        self.epoch_times: list[float] = []
        self.eval_times: list[float] = []
        self.seconds: list[float] = []

    def add(self, history: list, start: float, what: str) -> None:
        """Count a run's ``history`` (``EpochStats`` per epoch) begun at ``start`` (``time.perf_counter()``)
        and print one line on it, ``what`` first."""
        from dgl_zerocopy.training.train import best_epoch

        best = best_epoch(history)
        self.accs.append(best.test_acc)
        self.epoch_times += [h.epoch_time for h in history[1:] or history]  # epoch 0 warms up
        self.eval_times += [h.eval_time for h in history if not math.isnan(h.val_acc)]  # the evaluated epochs
        self.seconds.append(time.perf_counter() - start)
        print(f"  {what}: test {best.test_acc:.4f} at epoch {best.epoch} (val {best.val_acc:.4f}), {self.seconds[-1]:.0f}s", flush=True)

    def accuracy(self, ddof: int = 0) -> dict[str, float | str]:
        """The runs' test accuracies as a row's columns: their mean, their standard deviation (``ddof``
        degrees of freedom; 0.0 where there are no more runs than ``ddof``) and each to four places."""
        import numpy as np

        return {
            "test_acc_mean": float(np.mean(self.accs)),
            "test_acc_std": float(np.std(self.accs, ddof=ddof)) if len(self.accs) > ddof else 0.0,
            "test_accs": " ".join(f"{a:.4f}" for a in self.accs),
        }

    def times(self, quartiles: bool = False) -> dict[str, float]:
        """The runs' epoch and evaluation seconds as a row's columns: their medians, and with ``quartiles``
        the epochs' first and third quartiles."""
        epoch = summarize(self.epoch_times)
        columns = {"epoch_time_median": epoch["median"]}
        if quartiles:
            columns.update(epoch_time_q1=epoch["q1"], epoch_time_q3=epoch["q3"])
        return {**columns, "eval_time_median": summarize(self.eval_times)["median"]}


def table_head(header: str, align: str | None = None) -> list[str]:
    """A Markdown table's first two lines: ``header`` (``"| a | b |"``) and its rule, a column per
    letter of ``align``: ``r`` right-aligned (numbers), ``l`` left; without ``align`` every column of
    ``header`` is left (a plain ``|---|`` rule)."""
    align = align or "l" * (header.count("|") - 1)
    return [header, "|" + "|".join({"r": "---:", "l": "---"}[a] for a in align) + "|"]


def markdown_table(header: str, lines: Iterable[str], align: str | None = None) -> str:
    """A Markdown table as one text: :func:`table_head` of ``header`` and ``align``, then ``lines``, a row each."""
    return "\n".join([*table_head(header, align), *lines])


def paired_cells(row: dict, base: str, diff: str, within: str) -> tuple[str, str]:
    """A sampler's row of an accuracy table against the ``base`` sampler trained on the same seeds:
    its difference ``row[diff]`` in points ± the paired differences' std (``row["diff_std"]``), and
    whether ``row[within]`` holds (``yes``/``no``); two dashes on the base's own row."""
    if row["sampler"] == base:
        return "-", "-"
    return f"{100 * row[diff]:+.2f} ± {100 * row['diff_std']:.2f}", "yes" if row[within] else "no"


def pyplot():
    """matplotlib's ``pyplot`` drawing to files only (the Agg backend: benchmarks run without a display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path, dpi: int = 110) -> None:
    """Write ``fig`` to ``path`` (its folder made if need be) laid out tight, and free it."""
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)


def median_bars(ax, rows: list[dict], key: str, colours: list, labels: list[str], hatches: list | None = None) -> None:
    """A bar per row at its ``{key}_median``, its ``{key}_q1``–``{key}_q3`` as the error bar and the median written
    above it; a row whose median is NaN (no such figure) leaves its place empty. ``colours``, ``labels`` (the x
    ticks) and ``hatches`` hold a value per row."""
    for i, r in enumerate(rows):
        med = r[f"{key}_median"]
        if med != med:
            continue
        err = [[med - r[f"{key}_q1"]], [r[f"{key}_q3"] - med]]
        ax.bar(i, med, yerr=err, capsize=4, color=colours[i], hatch=hatches[i] if hatches else None, edgecolor="black")
        ax.annotate(f"{med:.3g}", (i, med), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(rows)), labels, fontsize=8)


def width_axes(axes, label: str, marks: dict) -> None:
    """Each of ``axes`` as a log2 axis of widths named ``label``, a green line and name at each of
    ``marks`` (``{width: name}``: the datasets' widths), a grid and a legend."""
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel(label)
        for width, name in marks.items():
            ax.axvline(width, color="tab:green", lw=0.8, alpha=0.6)
            ax.text(width, ax.get_ylim()[1] * 0.97, f" {name}", rotation=90, va="top", fontsize=7, color="tab:green")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="best")


def grouped_bars(
    rows: list[dict],
    key: str,
    height: Callable[[dict], float],
    label: Callable[[str], str] = str,
    inch_per_dataset: float = 1.5,
    margin: float = 2.0,
    error: Callable[[dict], float] | None = None,
    capsize: int = 3,
):
    """A bar chart grouped by dataset (in the rows' order): one bar per value of the rows' ``key``
    (legend ``label(value)``), ``height(row)`` high, with error bars ``error(row)`` if given (a
    missing dataset and value draws nothing). Returns ``(fig, ax, x, datasets)``: the caller names
    the axes and saves it (:func:`save_figure`)."""
    import numpy as np

    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    kinds = list(dict.fromkeys(r[key] for r in rows))
    width = 0.8 / len(kinds)
    x = np.arange(len(datasets))
    fig, ax = pyplot().subplots(figsize=(inch_per_dataset * len(datasets) + margin, 4))
    for i, kind in enumerate(kinds):
        mine = [next((r for r in rows if r["dataset"] == d and r[key] == kind), None) for d in datasets]
        yerr = None if error is None else [error(r) if r else 0 for r in mine]
        ax.bar(x + (i - (len(kinds) - 1) / 2) * width, [height(r) if r else 0 for r in mine], width, yerr=yerr, capsize=capsize, label=label(kind))
    return fig, ax, x, datasets


def accuracy_pct(row: dict) -> float:
    """A row's mean test accuracy in % (a bar of :func:`grouped_bars`)."""
    return 100 * row["test_acc_mean"]


def accuracy_std_pct(row: dict) -> float:
    """A row's test accuracy's standard deviation in % (its error bar)."""
    return 100 * row["test_acc_std"]


def accuracy_bars(rows: list[dict], key: str, label: Callable[[str], str] = str, inch_per_dataset: float = 1.5, capsize: int = 3):
    """:func:`grouped_bars` of the rows' mean test accuracy in %, its standard deviation the error bar."""
    return grouped_bars(rows, key, accuracy_pct, label, inch_per_dataset, error=accuracy_std_pct, capsize=capsize)


#: The real graphs of ../shared/data and the shipped config each is trained with (bench/training/accuracy.py).
REAL_GRAPH_CONFIGS = {
    "cora": "cora-gcn.yaml",
    "citeseer": "cora-gcn.yaml",
    "amazon-computers": "amazon-computers-sage.yaml",
    "amazon-photo": "amazon-computers-sage.yaml",
    "coauthor-cs": "coauthor-physics-sage.yaml",
    "coauthor-physics": "coauthor-physics-sage.yaml",
}
