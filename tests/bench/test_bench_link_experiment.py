"""bench/gathering/link_experiment.py: its plan (link_plan.py) holds every axis of the experiment within the
GPU budget, and its dry run goes through the whole pipeline on the CPU (plan, check, time, write, plot),
labelled as a dry run, into a temporary folder."""

from __future__ import annotations

import csv
import json
import sys

import numpy as np
import pytest
import torch
from conftest import REPO

sys.path.insert(0, str(REPO / "bench" / "gathering"))
import link_devices  # noqa: E402
import link_experiment  # noqa: E402
import link_plan  # noqa: E402


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    stem = tmp_path_factory.mktemp("link") / "link"
    code = link_experiment.main(["--dry-run", "--out", str(stem)])
    payload = json.loads(stem.with_suffix(".json").read_text())
    return code, stem, payload["meta"], payload["rows"], payload["tables"]


def test_the_dry_run_writes_every_output_and_checks_every_cell(dry_run):
    code, stem, meta, rows, _ = dry_run
    assert code == 0
    for suffix in (".csv", ".json", ".png"):
        assert stem.with_suffix(suffix).stat().st_size > 0, suffix
    assert len(rows) == meta["cells"] == len(link_plan.prune(link_plan.plan(), meta["budget_s"] - link_plan.STARTUP_S, 10, 3)[0])
    assert all(r["status"] == "ok" and r["checked"] is True for r in rows), [r for r in rows if r["status"] != "ok" or not r["checked"]][:2]
    assert all(r["gbps_median"] > 0 and r["gbps_q1"] <= r["gbps_median"] <= r["gbps_q3"] for r in rows)
    assert "link_experiment.py --dry-run" in meta["command"]


def test_the_dry_run_says_so_everywhere(dry_run):
    _, stem, meta, rows, _ = dry_run
    assert meta["dry_run"] is True and "dry run" in meta["device"] and "dry run" in meta["sizes"]
    assert all(r["dry_run"] is True for r in rows)
    assert "# dry_run: True" in stem.with_suffix(".csv").read_text()


def test_the_plan_fits_the_gpu_budget(dry_run):
    _, _, meta, _, _ = dry_run
    assert meta["budget_s"] == 150 and 0 < meta["gpu_estimate_s"] <= meta["budget_s"]
    assert meta["pruned"] == 0  # the whole plan fits: nothing of the grid is left out by default


def test_every_axis_is_measured(dry_run):
    rows = dry_run[3]
    zerocopy = [r for r in rows if r["method"] == "zerocopy"]
    assert {r["table_gb"] for r in zerocopy} == set(link_plan.TABLE_GB)
    assert {r["memory"] for r in zerocopy} == set(link_plan.MEMORY)
    assert {r["order"] for r in zerocopy} == set(link_plan.ORDERS)
    assert {r["row_bytes"] for r in zerocopy} == set(link_plan.ROW_BYTES)
    assert {r["batch"] * link_experiment.DRY_BATCH_SCALE for r in zerocopy} == set(link_plan.BATCHES)
    assert {r["shape"] for r in zerocopy} == set(link_plan.SHAPES)
    assert {r["method"] for r in rows} == set(link_plan.METHODS)
    shapes = {r["shape"]: r for r in zerocopy if r["row_bytes"] == 512 and r["question"] == "kernel shape"}
    default_512 = next(r for r in zerocopy if r["row_bytes"] == 512 and r["shape"] == "default")
    assert default_512["threads_per_row"] == 8 and shapes["rows/warp=1"]["threads_per_row"] == 32  # the default and the shape first measured
    assert shapes["naive"]["kernel"].startswith("gather_naive<")
    assert shapes["grid=1/SM"]["grid"] <= link_devices.DRY_SMS and shapes["block=1024"]["block"] == 1024
    # the PCIe model beside each measured shape: four lines of a 512 B row, one request each, for the aligned shapes
    assert {name: r["model_requests_per_row"] for name, r in shapes.items() if name != "naive"} == dict.fromkeys(set(shapes) - {"naive"}, 4.0)
    assert shapes["naive"]["model_requests_per_row"] >= 4.0 and all(0 < r["model_link_efficiency"] <= 1 for r in zerocopy)
    assert all(r["model_requests_per_row"] == "" for r in rows if r["method"] != "zerocopy")


def test_the_sort_policy_cells_sort_on_the_device_and_say_what_auto_chooses(dry_run):
    rows = [r for r in dry_run[3] if r["question"] == "sort policy"]
    assert {(r["order"], r["sorted_on_device"]) for r in rows} == {("random", False), ("device-sorted", True)}
    assert {r["row_bytes"] for r in rows} == set(link_plan.ROW_BYTES) and {r["batch"] * link_experiment.DRY_BATCH_SCALE for r in rows} == set(link_plan.BATCHES)
    assert all(r["checked"] is True and r["sort_auto"] in (True, False) for r in rows)  # each written back to its place, checked
    # what auto decides follows the policy on the cell's own plan (the dry run's sizes)
    cell = next(r for r in rows if r["order"] == "device-sorted")
    plan = link_devices.gather_plan.plan_gather(cell["row_bytes"], 0, cell["batch"], elem_size=4, num_sms=link_devices.DRY_SMS)
    assert cell["sort_auto"] == link_devices.sort_policy.should_sort(plan, cell["table_bytes"] // cell["row_bytes"] * cell["row_bytes"])


def test_shapes_become_launch_options_scaled_by_the_sm_count():
    options = {name: link_devices.shape_options(shape, 132) for name, shape in link_plan.SHAPES.items()}
    assert options["default"] == {"variant": "aligned", "threads_per_row": None, "max_blocks": None, "threads_per_block": 256}
    assert options["rows/warp=2"]["threads_per_row"] == 16 and options["grid=4/SM"]["max_blocks"] == 528
    plan = link_devices.gather_plan.plan_gather(512, 0, 262144, elem_size=4, num_sms=132, **options["grid=1/SM"])
    assert plan.grid == 132  # at the GPU batch the cap binds (the dry run's batch is smaller than one wave)


def test_each_memory_kind_has_one_table_of_the_largest_size_that_reports_its_pages(dry_run):
    tables, rows = dry_run[4], dry_run[3]
    big = int(max(link_plan.TABLE_GB) * 1e9) // link_experiment.DRY_TABLE_SCALE
    assert [(t["memory"], t["table_bytes"]) for t in tables] == [(m, big) for m in link_plan.MEMORY]
    for t in tables:
        assert t["status"] == "ok" and {"alloc_s", "pin_s", "fill_s", "device_copy_s", "huge_share", "fallback", "vm_flags"} <= set(t)
        if t["memory"] == "small":
            assert t["pages"] == "small" and t["huge_share"] == 0
        else:
            assert t["pages"] in ("hugetlb", "thp", "small") and (t["pages"] == "hugetlb" or "MAP_HUGETLB" in t["fallback"])
    # a smaller table is the span its ids fall in: its first table_bytes
    for r in rows:
        assert r["table_bytes"] == int(r["table_gb"] * 1e9) // link_experiment.DRY_TABLE_SCALE
        assert r["pages"] == next(t["pages"] for t in tables if t["memory"] == r["memory"])


def test_ids_stay_inside_the_span_of_their_table(monkeypatch):
    seen = []
    real = link_experiment.make_ids
    monkeypatch.setattr(link_experiment, "make_ids", lambda rng, order, rows, batch: seen.append(rows) or real(rng, order, rows, batch))
    device = link_devices.CpuEmulator()
    table = device.open_table(1 << 20, "small", need_device_copy=False)
    try:
        cell = link_plan.Cell("q", 1, "small", 512, "random", 64)
        facts, seconds = link_experiment.measure_cell(device, table, cell, 64 * 512, 64, np.random.default_rng(0), lambda fn, n: [1.0] * n, 2)
    finally:
        table.close()
    assert seen == [64] and facts["checked"] is True and facts["pages_4k"] <= 8


def test_pruning_keeps_the_first_cells_within_the_budget_and_counts_a_table_once():
    """One table per memory kind, of the largest size of the cells, is counted with its first cell."""
    cells = link_plan.plan()
    kept, pruned, estimate = link_plan.prune(cells, 60, 10, 3)
    assert kept and pruned and estimate <= 60 and kept[0] == cells[0]
    assert len(kept) + len(pruned) == len(cells)
    one, two = cells[0], cells[1]  # the same table and memory
    assert (one.table_gb, one.memory) == (two.table_gb, two.memory)
    expected = link_plan.table_seconds(one.table_gb) + link_plan.cell_seconds(one, 10, 3) + link_plan.cell_seconds(two, 10, 3)
    assert link_plan.prune([one, two], 1e9, 10, 3)[2] == pytest.approx(expected)
    big = link_plan.Cell("q", 56, one.memory, 512, "random", 1024)
    other = link_plan.Cell("q", 1, "huge" if one.memory == "small" else "small", 512, "random", 1024)
    expected = 2 * link_plan.table_seconds(56) + sum(link_plan.cell_seconds(c, 10, 3) for c in (one, big, other))
    assert link_plan.prune([one, big, other], 1e9, 10, 3)[2] == pytest.approx(expected)


def test_cells_run_one_table_at_a_time_in_plan_order():
    cells = link_plan.plan()
    order = link_plan.run_order(cells)
    kinds = [c.memory for c in order]
    assert kinds == sorted(kinds, key=link_plan.MEMORY.index)  # each kind's table is set up once
    for memory in link_plan.MEMORY:
        assert [c for c in order if c.memory == memory] == [c for c in cells if c.memory == memory]


def test_a_gather_that_writes_nothing_fails_its_check_and_the_run_exits_1(tmp_path, monkeypatch):
    real = link_devices.CpuEmulator.gather

    def broken(self, table, row_bytes, ids, shape, on_device, sort=False):
        gather, out, reference, facts = real(self, table, row_bytes, ids, shape, on_device, sort)
        return ((lambda: out) if shape.get("rows_per_warp") == 2 else gather), out, reference, facts

    monkeypatch.setattr(link_devices.CpuEmulator, "gather", broken)
    stem = tmp_path / "broken"
    assert link_experiment.main(["--dry-run", "--tables", "32", "--out", str(stem)]) == 1
    rows = json.loads(stem.with_suffix(".json").read_text())["rows"]
    bad = [r for r in rows if r["status"] != "ok"]
    assert {r["shape"] for r in bad} == {"rows/warp=2"} and len(bad) == 4  # 2 row sizes x 2 memory kinds
    assert all(r["status"].startswith("failed: AssertionError: wrong result:") and r["checked"] is False for r in bad)
    assert all(r["gbps_median"] != r["gbps_median"] for r in bad)  # NaN: nothing timed


def test_a_time_limit_skips_what_it_leaves_out_and_is_no_failure(tmp_path):
    stem = tmp_path / "short"
    assert link_experiment.main(["--dry-run", "--tables", "1,8", "--time-limit", "1e-9", "--out", str(stem)]) == 0
    rows = json.loads(stem.with_suffix(".json").read_text())["rows"]
    assert rows and all(r["status"] == "skipped: time limit" for r in rows)


def test_plan_only_prints_the_plan_and_measures_nothing(tmp_path, capsys):
    assert link_experiment.main(["--plan-only", "--budget", "60", "--out", str(tmp_path / "x")]) == 0
    text = capsys.readouterr().out
    assert "estimated" in text and "(budget 60 s)" in text and "pruned" in text
    assert not list(tmp_path.iterdir())


def test_ids_of_each_order_and_the_pages_they_touch():
    rng = np.random.default_rng(0)
    run = link_experiment.make_ids(rng, "contiguous", 1000, 100)
    assert np.array_equal(np.diff(run), np.ones(99)) and run.dtype == np.int64
    assert np.all(np.diff(link_experiment.make_ids(rng, "sorted", 1000, 100)) >= 0)
    assert link_experiment.distinct_pages(np.array([0, 1, 7]), 512, 4096) == 1  # rows 0..7 of 512 B: one page
    assert link_experiment.distinct_pages(np.array([7, 8]), 512, 4096) == 2
    assert link_experiment.distinct_pages(np.array([2]), 1536, 4096) == 2  # a row across a page boundary counts both


def test_a_budget_that_holds_no_cell_is_refused_with_the_fix(capsys):
    with pytest.raises(SystemExit):
        link_experiment.main(["--budget", "30", "--plan-only"])
    assert "--budget 30 holds no cell of the plan" in capsys.readouterr().err


def test_bad_table_sizes_are_refused_by_name(capsys):
    with pytest.raises(SystemExit):
        link_experiment.main(["--tables", "1,big", "--plan-only"])
    assert "--tables must be whole GB, comma separated, but got '1,big'" in capsys.readouterr().err


# -- the GPU check's link step (bench/gpu_check/gpu_check_link.py) ---------------------------------

sys.path[:0] = [str(REPO / "bench" / "gpu_check"), str(REPO / "bench")]
import gpu_check_link  # noqa: E402
import gpu_check_main  # noqa: E402
from gpu_check_setup import Run  # noqa: E402


def test_the_link_step_is_not_in_the_default_pass_and_not_beside_gather_or_epoch(capsys):
    assert "link" not in gpu_check_main.PARTS and "link" in gpu_check_main.OPTIONAL_PARTS
    assert gpu_check_link.LINK_LIMIT - gpu_check_link.LINK_RESERVE >= 150  # the plan's budget fits the step
    for parts in ("gather,link", "link,epoch"):
        with pytest.raises(SystemExit):
            gpu_check_main.main(["--parts", parts, "--probe"])
        assert "--parts link writes 3 result files of its own: run it without" in capsys.readouterr().err


@pytest.mark.slow
def test_the_link_step_runs_the_dry_run_without_cuda_and_its_files_come_back(tmp_path, monkeypatch):
    monkeypatch.setenv("DGL_ZEROCOPY_GPU_CHECK_ON_CPU", "1")
    monkeypatch.setattr(sys, "path", list(sys.path))
    out = tmp_path / "out"
    assert gpu_check_main.main(["--out", str(out), "--wheels", str(tmp_path / "none"), "--parts", "link"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    link = next(p for p in summary["parts"] if p["name"] == "link")
    assert link["status"] == "ok" and "dry run: no GPU figures" in link["reason"] and "--dry-run" in link["details"]["command"]
    assert link["details"]["failed"] == 0 and link["details"]["measured"] == link["details"]["cells"] > 0
    assert {p.name for p in out.iterdir()} >= set(gpu_check_link.LINK_FILES) and gpu_check_main.transfer_problems(out) == []
    assert all(p["status"] == "not run" for p in summary["parts"] if p["name"] not in ("link", "wheels"))


def _rows(*statuses: str) -> list[dict]:
    return [{"status": s, "method": "zerocopy", "row_bytes": 512, "dry_run": False} for s in statuses]


@pytest.mark.parametrize(
    "run, rows, status, reason",
    [
        (Run(0, "", 100.0), _rows("ok", "ok"), "ok", "2 cells, each equal to table[ids] before timing"),
        (
            Run(1, "", 100.0),
            _rows("ok", "failed: AssertionError: wrong result: 3 of 9 rows differ"),
            "failed",
            "1 of 2 cells failed: zerocopy at 512 B: failed: AssertionError",
        ),
        (Run(0, "", 100.0), _rows("ok", "skipped: time limit"), "partial", "1 cells, each equal to table[ids] before timing; 1 skipped: time limit"),
        (Run(None, "link: 32 GB small", 180.0), [], "failed", "killed at its time limit (180 s) after 0 cells"),
        (Run(None, "link: 32 GB small", 180.0), _rows("ok"), "failed", "killed at its time limit (180 s) after 1 cells (the CSV keeps them)"),
        (Run(1, "Traceback\nRuntimeError: boom", 5.0), [], "failed", "boom"),
    ],
)
def test_the_link_step_is_judged_from_its_rows(run, rows, status, reason):
    part = gpu_check_link.judge_link(run, rows, 180.0)
    assert part.status == status and reason in part.reason, part.reason


def test_the_experiments_cuda_calls_are_scanned_and_resolve():
    """The GPU half of the experiment runs nowhere here: every CuPy and torch.cuda name it takes must
    be found by the API-surface scan (tests/api_surface.py) and exist in the installed libraries."""
    pytest.importorskip("cupy", reason="needs CuPy to check the names against")
    sys.path.insert(0, str(REPO / "tests"))
    from api_surface import problems, scan_tree

    refs = [r for r in scan_tree(REPO, ["bench/gathering", "bench/gpu_check"]) if "/link_" in r.path or r.path.endswith("gpu_check_link.py")]
    chains = {r.chain for r in refs}
    expected = {
        "torch.cuda.is_available",
        "torch.cuda.current_device",
        "torch.cuda.get_device_properties",
        "torch.cuda.get_device_name",
        "torch.cuda.synchronize",
        "torch.cuda.empty_cache",
        "torch.cuda.current_stream",
        "cupy.cuda.Device",
    }
    assert expected <= chains, sorted(expected - chains)
    assert not problems(refs, {}), problems(refs, {})


def test_each_cell_reaches_the_csv_as_it_is_measured(tmp_path, monkeypatch):
    """A run stopped before its end (here: at the final write) keeps the rows measured so far."""

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(link_experiment, "write_results", stopped)
    stem = tmp_path / "stopped"
    with pytest.raises(KeyboardInterrupt):
        link_experiment.main(["--dry-run", "--tables", "1", "--out", str(stem)])
    lines = [ln for ln in stem.with_suffix(".csv").read_text().splitlines() if not ln.startswith("#")]
    rows = list(csv.DictReader(lines))
    assert len(rows) == len(link_plan.plan((1,))) and {r["status"] for r in rows} == {"ok"} and {r["checked"] for r in rows} == {"True"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a GPU")
def test_without_a_gpu_the_run_says_to_use_the_dry_run(tmp_path, capsys):
    with pytest.raises(SystemExit, match=r"no CUDA GPU here .*run it with --dry-run"):
        link_experiment.main(["--tables", "1", "--out", str(tmp_path / "x")])
    assert "estimated" in capsys.readouterr().out  # the plan is printed first
    assert not list(tmp_path.iterdir())


def test_a_table_past_the_hosts_available_memory_is_refused_before_it_is_touched(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       131072000 kB\nMemAvailable:    50000000 kB\n")
    with pytest.raises(MemoryError, match=r"a 56.0 GB table does not fit in this host's 51.2 GB of available memory \(MemAvailable\).*--tables"):
        link_devices._host_room(56 * 10**9, str(meminfo))
    link_devices._host_room(32 * 10**9, str(meminfo))  # fits with room to spare
    link_devices._host_room(56 * 10**9, str(tmp_path / "missing"))  # unknown: not refused
