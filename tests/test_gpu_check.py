"""bench/gpu_check.py on a machine without a GPU: one line and exit 2, no network install in
`make gpu-check`, and its pure parts (pytest counts, summary files, transfer rules, time limits)."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import CUDA, REPO

sys.path.insert(0, str(REPO / "bench"))
import gpu_check  # noqa: E402
from gpu_check import Part  # noqa: E402


@pytest.mark.skipif(CUDA, reason="checks the machine without a GPU")
def test_without_cuda_it_prints_one_line_and_exits_2(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DGL_ZEROCOPY_GPU_CHECK_ON_CPU"}
    env["PYTHONIOENCODING"] = "utf-8"
    r = subprocess.run([sys.executable, str(REPO / "bench" / "gpu_check.py"), "--out", str(tmp_path / "res")],
                       capture_output=True, text=True, encoding="utf-8", cwd=REPO, env=env, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = (r.stdout + r.stderr).strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("gpu-check: no CUDA GPU here (torch.cuda.is_available() is False)")
    assert not (tmp_path / "res").exists(), "nothing may be done before the CUDA check"


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_gpu_check_uses_no_network_and_not_the_venv():
    r = subprocess.run(["make", "-n", "gpu-check"], capture_output=True, text=True, encoding="utf-8", cwd=REPO, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "bench/gpu_check.py" in r.stdout
    assert ".venv" not in r.stdout and "venv" not in r.stdout, r.stdout
    for line in r.stdout.splitlines():
        if "pip" in line and "install" in line:
            assert "--no-index" in line, line
    cmd = gpu_check.pip_install_command("python3", [REPO / ".whl" / "x-1.0-py3-none-any.whl"], REPO / "site")
    assert cmd[:4] == ["python3", "-m", "pip", "install"]
    assert {"--no-index", "--no-deps", "--target"} <= set(cmd)


def test_pytest_counts_and_summary_lines():
    text = "\n".join([
        "..s.F", "=========================== short test summary info ============================",
        "FAILED tests/test_store_gpu.py::test_x[zerocopy] - RuntimeError: boom",
        "SKIPPED [2] tests/test_nn.py:55: needs a CUDA GPU",
        "ERROR tests/test_dgl_plugin.py - ModuleNotFoundError: No module named 'dgl'",
        "1 failed, 41 passed, 2 skipped, 500 deselected, 1 error, 3 warnings in 35.20s",
    ])
    assert gpu_check.parse_pytest_counts(text) == {"failed": 1, "passed": 41, "skipped": 2, "deselected": 500, "errors": 1, "warnings": 3}
    assert gpu_check.parse_pytest_counts("no tests ran in 0.01s") == {}
    assert gpu_check.pytest_short_summary(text) == [
        "FAILED tests/test_store_gpu.py::test_x[zerocopy] - RuntimeError: boom",
        "SKIPPED [2] tests/test_nn.py:55: needs a CUDA GPU",
        "ERROR tests/test_dgl_plugin.py - ModuleNotFoundError: No module named 'dgl'",
    ]


def _made_up_summary(out):
    nan = float("nan")
    gather = []
    for dim, gbps in ((16, 10.0), (100, 18.0), (128, 20.0), (1024, 24.0)):
        for method, factor in (("h2d", 1.0), ("zerocopy", 0.9), ("zerocopy-naive", 0.7), ("cpu", 0.3), ("gpu", 50.0)):
            gather.append({"dtype": "fp32", "dim": dim, "row_bytes": 4 * dim, "table_rows": 1000, "batch": 262144, "method": method,
                           "gbps_median": gbps * factor, "gbps_q1": gbps * factor * 0.95, "gbps_q3": gbps * factor * 1.05, "ratio_to_ceiling": factor,
                           "status": "ok"})
    gather[2].update(gbps_median=nan, gbps_q1=nan, gbps_q3=nan, ratio_to_ceiling=nan,
                     status="failed: TypeError: FeatureStore.__init__() got an unexpected keyword argument 'variant'")
    for option, factor in (("zerocopy+sort_ids", 0.8), ("zerocopy+max_blocks=132", 0.85)):
        gather.append({**gather[11], "method": option, "gbps_median": 20.0 * factor, "ratio_to_ceiling": factor})
    epoch = [{"source": s, "prefetch": p, "epoch_time": t, "epoch_min": t * 0.9, "epoch_max": t * 1.1, "wait_share": 0.05, "test_acc": 0.99, "status": "ok"}
             for s, p, t in (("cpu", 0, 3.0), ("cpu", 2, 2.5), ("zerocopy", 0, 1.5), ("zerocopy", 2, 1.0))]
    epoch.append({"source": "gpu", "prefetch": 0, **dict.fromkeys(("epoch_time", "epoch_min", "epoch_max", "wait_share", "test_acc"), nan),
                  "status": "failed: RuntimeError: CUDA out of memory"})
    parts = [Part("wheels", "ok", "6 wheels", 2.0), Part("pytest", "ok", "41 passed, 2 skipped", 60.0),
             Part("gather", "failed", "1 of 42 results failed", 150.0), Part("epoch", "skipped", "import dgl failed: ModuleNotFoundError", 3.0)]
    return {"command": "python3 bench/gpu_check.py", "started": "2026-01-01T00:00:00+00:00", "seconds": 215.0, "out": str(out),
            "mode": "full", "exit_code": gpu_check.exit_code(parts), "ceiling": "h2d",
            "environment": {"device": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "sm_count": 132, "torch": "2.11.0", "cupy": "14.2.0"},
            "parts": [gpu_check.asdict(p) for p in parts],
            "figures": {"gather": gpu_check.gather_figures(gather), "epoch": gpu_check.epoch_figures(epoch)}}


def test_summary_files_from_made_up_rows(tmp_path):
    summary = _made_up_summary(tmp_path)
    assert summary["exit_code"] == 1
    logs = {"pytest": "....\n41 passed, 2 skipped in 60.0s\n", "gather": "Traceback ...\nTypeError: variant\n"}
    json_path, md_path = gpu_check.write_summary(tmp_path, summary, logs)
    assert {p.name for p in tmp_path.iterdir()} == {"summary.json", "summary.md"}
    data = json.loads(json_path.read_text(), parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    assert data["environment"]["device"] == "NVIDIA H100 80GB HBM3"
    assert [p["status"] for p in data["parts"]] == ["ok", "ok", "failed", "skipped"]
    assert data["figures"]["epoch"][-1]["epoch_time"] is None
    md = md_path.read_text(encoding="utf-8")
    assert md.startswith("# gpu-check on NVIDIA H100 80GB HBM3: NOT PASSED (exit 1)")
    assert "| row bytes | cols | h2d | zerocopy | zerocopy-naive | cpu | gpu |" in md
    assert "| 64 | 16 | 10.00 (1.00) | 9.00 (0.90) | failed | 3.00 (0.30) | 500.00 (50.00) |" in md
    assert "Not measured: zerocopy-naive at 64 B: failed: TypeError: FeatureStore.__init__() got an unexpected keyword argument 'variant'" in md
    assert "| zerocopy+max_blocks=132 | 17.00" in md and "Zero-copy options at 512 B rows" in md
    assert "| zerocopy | 2 | 1.00 (0.90–1.10) | 5.0 % | 0.9900 | ok |" in md
    assert "| gpu | 0 | – | – | – | failed: RuntimeError: CUDA out of memory |" in md
    assert "## gather: the last lines of its output" in md and "## pytest -m gpu output" in md
    assert "41 passed, 2 skipped in 60.0s" in md
    assert gpu_check.transfer_problems(tmp_path) == []


def test_transfer_rules(tmp_path):
    for i in range(9):
        (tmp_path / f"f{i}.txt").write_text("x")
    (tmp_path / "bad name.txt").write_text("x")
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    (deep / "x.txt").write_text("x")
    problems = gpu_check.transfer_problems(tmp_path)
    assert "11 files, more than 8" in problems
    assert any(p.startswith("bad name.txt: a name") for p in problems)
    assert any(p.startswith("a/b/c/x.txt: more than 2 folders down") for p in problems)
    assert set(gpu_check.RESULT_FILES) == {f for f in gpu_check.RESULT_FILES if gpu_check.SAFE_NAME.match(f)}
    assert len(gpu_check.RESULT_FILES) <= gpu_check.TRANSFER["files"]


def test_exit_code_and_budgets():
    assert gpu_check.exit_code([Part("pytest", "ok"), Part("gather", "ok"), Part("epoch", "not run")]) == 0
    assert gpu_check.exit_code([Part("pytest", "ok"), Part("epoch", "skipped")]) == 1
    assert gpu_check.exit_code([Part("wheels", "failed"), Part("pytest", "ok")]) == 1
    assert sum(gpu_check.BUDGETS.values()) <= 540, "the parts and start-up must fit in the 10 minutes of one command"
    assert gpu_check.GATHER_RESERVE < gpu_check.BUDGETS["gather"]


def test_a_hung_part_is_killed_at_its_time_limit():
    code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); print('started', flush=True); time.sleep(60)"
    run = gpu_check.run_bounded([sys.executable, "-c", code], timeout=3, echo=False)
    assert run.returncode is None and "started" in run.output
    assert run.seconds < 30, "the reader must not wait for the killed grandchild"


def test_cuda_versions_and_last_lines():
    assert gpu_check.cuda_version_text(13000) == "13.0" and gpu_check.cuda_version_text(12090) == "12.9"
    assert gpu_check.last_line("Traceback\n  File x\nModuleNotFoundError: No module named 'dgl'\n\n") == "ModuleNotFoundError: No module named 'dgl'"
    assert gpu_check.last_line("", -11) == "exit code -11"


def test_the_gather_part_checks_every_compressed_kernel_like_fp32():
    """Both modes time the compressed zero-copy methods (every codec, int8 per column and per row)
    at widths the fp32 methods run at, with the same correctness check first (bench/gather.py)."""
    sys.path.insert(0, str(REPO / "bench"))
    import gather

    for mode, args in gpu_check.GATHER_ARGS.items():
        codecs = args[args.index("--codecs") + 1].split(",")
        assert set(codecs) == set(gather.CODECS) == {"fp16", "bf16", "int8", "int8-row"}, mode
        widths = set(args[args.index("--cols") + 1].split(","))
        assert set(args[args.index("--codec-cols") + 1].split(",")) <= widths, mode
        methods = gather.methods_for(True, tune=False, max_blocks=[], codecs=tuple(codecs))
        assert methods[:5] == list(gather.GPU_METHODS) and methods[5:] == [f"zerocopy-{c}" for c in codecs]


def test_compressed_methods_show_in_the_gather_table(tmp_path):
    summary = _made_up_summary(tmp_path)
    extra = {**summary["figures"]["gather"][6], "method": "zerocopy-int8", "gbps_median": 60.0, "ratio_to_ceiling": 3.0}
    summary["figures"]["gather"].append(extra)
    md = gpu_check.render_markdown(summary)
    assert "| row bytes | cols | h2d | zerocopy | zerocopy-naive | cpu | gpu | zerocopy-int8 |" in md
    assert "| 400 | 100 | 18.00 (1.00) | 16.20 (0.90) | 12.60 (0.70) | 5.40 (0.30) | 900.00 (50.00) | 60.00 (3.00) |" in md
    assert "| 64 | 16 | 10.00 (1.00) | 9.00 (0.90) | failed | 3.00 (0.30) | 500.00 (50.00) | – |" in md


def test_the_ddp_part_needs_two_gpus_and_reads_the_train_output():
    from dgl_zerocopy.train import EpochStats

    for gpus in (0, 1):
        part, log = gpu_check.ddp_part({}, 60, "quick", gpus)
        assert (part.status, log) == ("not run", "")
        assert part.reason == f"skipped: {gpus} CUDA GPU(s) here; the multi-GPU DDP run needs 2 or more"
        assert gpu_check.exit_code([Part("pytest", "ok"), part]) == 0, "a machine with one GPU still passes"
    lines = [EpochStats(e, 3.0, 0.5, 0.9, 0.91, t, 0.2, {"sample": 0.1}).line() for e, t in ((0, 2.5), (1, 1.25))]
    text = "\n".join(["synthetic: 50,000 nodes", *lines, "", "stage times per epoch (s)", "epoch  sample", "    0    0.10",
                      "", "final test accuracy 0.9712 (best val 0.9000 at epoch 1, test 0.9100)"])
    assert gpu_check.parse_train_output(text) == {"epoch_times": [2.5, 1.25], "test_acc": 0.9712}
    assert gpu_check.parse_train_output("Traceback ...\nRuntimeError: NCCL error") == {"epoch_times": [], "test_acc": None}
    assert "ddp" in gpu_check.PARTS and gpu_check.BUDGETS["ddp"] >= 45


def test_cached_methods_get_their_own_table_with_hit_rates(tmp_path):
    summary = _made_up_summary(tmp_path)
    rows = summary["figures"]["gather"]
    at = next(g for g in rows if g["method"] == "zerocopy" and g["dim"] == 128)
    cpu = next(g for g in rows if g["method"] == "cpu" and g["dim"] == 128)
    rows += [{**at, "method": "zerocopy+cache=0.25", "gbps_median": 2 * at["gbps_median"], "hit_rate": 0.2501},
             {**cpu, "method": "cpu+cache=0.25", "gbps_median": float("nan"), "status": "failed: RuntimeError: x", "hit_rate": None}]
    md = gpu_check.render_markdown(summary)
    assert "## Hot-row cache at 512 B rows (128 cols; uniform ids, random cached rows)" in md
    assert f"| zerocopy | 0.25 | 0.250 | {2 * at['gbps_median']:.2f} (" in md and "| 2.00 | ok |" in md
    assert "| cpu | 0.25 | – | – | – | failed: RuntimeError: x |" in md
    options = md.split("Zero-copy options")[1]
    assert "cache" not in options.split("##")[0]  # the options table stays the kernel's options
    for mode, args in gpu_check.GATHER_ARGS.items():
        assert "--cache-fracs" in args, mode
