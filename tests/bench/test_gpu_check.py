"""bench/gpu_check.py without a GPU: the one line and exit 2 (with make and without), the header
it prints first, its time limits (a step that overruns keeps what it finished and reports the rest
as skipped for time, with stand-ins for the GPU steps), and the pure parts that read and write results."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
import torch
from conftest import CUDA, REPO
from script_runs import run_python

from dgl_zerocopy.cuda.gather import instantiations

# the check's modules (bench/gpu_check/), common.py (bench/), and the gather and epoch benchmarks the tests drive
sys.path[:0] = [str(REPO / "bench" / folder) for folder in ("gpu_check", ".", "gathering", "training")]
import gpu_check_main as gpu_check  # noqa: E402
import gpu_check_pytest  # noqa: E402
from gpu_check_main import Part  # noqa: E402

# -- without CUDA, with make and without ---------------------------------------------------------


def _env_without_pythonpath() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DGL_ZEROCOPY_GPU_CHECK_ON_CPU", "PYTHONPATH")}
    env["PYTHONIOENCODING"] = "utf-8"
    return env


@pytest.mark.skipif(CUDA, reason="checks the machine without a GPU")
def test_without_cuda_it_prints_one_line_and_exits_2_from_any_folder(tmp_path):
    """``python3 bench/gpu_check.py`` needs neither make nor PYTHONPATH nor the checkout as its folder."""
    r = run_python(REPO / "bench" / "gpu_check.py", "--out", tmp_path / "res", cwd=tmp_path, env=_env_without_pythonpath(), timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = (r.stdout + r.stderr).strip().splitlines()
    assert lines == ["gpu-check: no CUDA GPU here (torch.cuda.is_available() is False); run it on a machine with one"]
    assert not (tmp_path / "res").exists(), "nothing may be done before the CUDA check"


@pytest.mark.skipif(CUDA or shutil.which("make") is None, reason="checks make on a machine without a GPU")
def test_make_gpu_check_without_cuda_is_one_line_and_exit_2():
    for python, why in (
        (sys.executable, "no CUDA GPU here (torch.cuda.is_available() is False)"),
        ("/nonexistent/python3", "gpu-check: /nonexistent/python3 could not run (exit 127)"),
    ):
        r = subprocess.run(
            ["make", "--no-print-directory", "gpu-check", f"PYTHON={python}"],
            capture_output=True,
            text=True,
            encoding="utf-8",
            cwd=REPO,
            env=_env_without_pythonpath(),
            timeout=120,
        )
        lines = (r.stdout + r.stderr).strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1, (python, lines)
        assert why in lines[0] and "Error" not in lines[0], lines


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_runs_what_the_docs_say_to_run_without_make():
    """make adds nothing to ``python3 bench/gpu_check.py ARGS`` but its CUDA probe: no PYTHONPATH,
    no venv, no network; docs/gpu.md and the Makefile both say python3."""
    r = subprocess.run(
        ["make", "-n", "--no-print-directory", "gpu-check", "GPU_CHECK_PROBE=true", "GPU_CHECK_ARGS=--out /x --quick"],
        capture_output=True,
        text=True,
        encoding="utf-8",
        cwd=REPO,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines() == ["python3 bench/gpu_check.py --out /x --quick"]
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^PYTHON \?= python3$", makefile, re.M)
    assert re.search(r"^GPU_CHECK_PROBE \?= \{ \$\(PYTHON\) bench/gpu_check.py --probe \|\| ", makefile, re.M)
    docs = (REPO / "docs" / "gpu.md").read_text(encoding="utf-8")
    assert "python3 bench/gpu_check.py" in docs
    assert not re.search(r"(?<![\w/.-])python bench/", docs), "docs/gpu.md must say python3, as the Makefile does"
    for line in r.stdout.splitlines():
        if "pip" in line and "install" in line:
            assert "--no-index" in line, line
    cmd = gpu_check.pip_install_command("python3", [REPO / ".whl" / "x-1.0-py3-none-any.whl"], REPO / "site")
    assert cmd[:4] == ["python3", "-m", "pip", "install"]
    assert {"--no-index", "--no-deps", "--target"} <= set(cmd)


@pytest.mark.skipif(CUDA, reason="checks the machine without a GPU")
def test_probe_prints_the_line_and_exits_0():
    r = run_python(REPO / "bench" / "gpu_check.py", "--probe", env=_env_without_pythonpath(), timeout=120)
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout.startswith("gpu-check: no CUDA GPU here")


def test_pytest_counts_and_summary_lines():
    text = "\n".join(
        [
            "..s.F",
            "=========================== short test summary info ============================",
            "FAILED tests/store/test_store_gpu.py::test_x[zerocopy] - RuntimeError: boom",
            "SKIPPED [2] tests/training/test_nn.py:55: needs a CUDA GPU",
            "ERROR tests/loading/test_dgl_plugin.py - ModuleNotFoundError: No module named 'dgl'",
            "1 failed, 41 passed, 2 skipped, 500 deselected, 1 error, 3 warnings in 35.20s",
        ]
    )
    assert gpu_check.parse_pytest_counts(text) == {"failed": 1, "passed": 41, "skipped": 2, "deselected": 500, "errors": 1, "warnings": 3}
    assert gpu_check.parse_pytest_counts("no tests ran in 0.01s") == {}
    assert gpu_check.pytest_short_summary(text) == [
        "FAILED tests/store/test_store_gpu.py::test_x[zerocopy] - RuntimeError: boom",
        "SKIPPED [2] tests/training/test_nn.py:55: needs a CUDA GPU",
        "ERROR tests/loading/test_dgl_plugin.py - ModuleNotFoundError: No module named 'dgl'",
    ]


def _made_up_summary(out):
    nan = float("nan")
    gather = []
    for dim, gbps in ((16, 10.0), (100, 18.0), (128, 20.0), (1024, 24.0)):
        for method, factor in (("h2d", 1.0), ("zerocopy", 0.9), ("zerocopy-naive", 0.7), ("cpu", 0.3), ("gpu", 50.0)):
            gather.append(
                {
                    "dtype": "fp32",
                    "dim": dim,
                    "row_bytes": 4 * dim,
                    "table_rows": 1000,
                    "batch": 262144,
                    "method": method,
                    "gbps_median": gbps * factor,
                    "gbps_q1": gbps * factor * 0.95,
                    "gbps_q3": gbps * factor * 1.05,
                    "ratio_to_ceiling": factor,
                    "status": "ok",
                }
            )
    gather[2].update(
        gbps_median=nan,
        gbps_q1=nan,
        gbps_q3=nan,
        ratio_to_ceiling=nan,
        status="failed: TypeError: FeatureStore.__init__() got an unexpected keyword argument 'variant'",
    )
    for option, factor in (("zerocopy+sort_ids", 0.8), ("zerocopy+max_blocks=132", 0.85)):
        gather.append({**gather[11], "method": option, "gbps_median": 20.0 * factor, "ratio_to_ceiling": factor})
    epoch = [
        {"source": s, "prefetch": p, "epoch_time": t, "epoch_min": t * 0.9, "epoch_max": t * 1.1, "wait_share": 0.05, "test_acc": 0.99, "status": "ok"}
        for s, p, t in (("cpu", 0, 3.0), ("cpu", 2, 2.5), ("zerocopy", 0, 1.5), ("zerocopy", 2, 1.0))
    ]
    epoch.append(
        {
            "source": "gpu",
            "prefetch": 0,
            **dict.fromkeys(("epoch_time", "epoch_min", "epoch_max", "wait_share", "test_acc"), nan),
            "status": "failed: RuntimeError: CUDA out of memory",
        }
    )
    parts = [
        Part("wheels", "ok", "6 wheels", 2.0),
        Part("pytest", "ok", "41 passed, 2 skipped", 60.0),
        Part("gather", "failed", "1 of 42 results failed", 150.0),
        Part("epoch", "skipped", "import dgl failed: ModuleNotFoundError", 3.0),
    ]
    return {
        "command": "python3 bench/gpu_check.py",
        "started": "2026-01-01T00:00:00+00:00",
        "seconds": 215.0,
        "out": str(out),
        "mode": "full",
        "exit_code": gpu_check.exit_code(parts),
        "ceiling": "h2d",
        "environment": {"device": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "sm_count": 132, "torch": "2.11.0", "cupy": "14.2.0"},
        "parts": [gpu_check.asdict(p) for p in parts],
        "figures": {"gather": gpu_check.gather_figures(gather), "epoch": gpu_check.epoch_figures(epoch)},
    }


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


def test_exit_code():
    assert gpu_check.exit_code([Part("pytest", "ok"), Part("gather", "ok"), Part("epoch", "not run")]) == 0
    assert gpu_check.exit_code([Part("pytest", "ok"), Part("gather", "partial")]) == 0, "time skips are no failure"
    assert gpu_check.exit_code([Part("pytest", "ok"), Part("epoch", "skipped")]) == 1
    assert gpu_check.exit_code([Part("wheels", "failed"), Part("pytest", "ok")]) == 1


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
    at widths the fp32 methods run at, with the same correctness check first (bench/gathering/gather.py)."""
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
    from dgl_zerocopy.training.train import EpochStats

    for gpus in (0, 1):
        part, log = gpu_check.ddp_part({}, 60, "quick", gpus)
        assert (part.status, log) == ("not run", "")
        assert part.reason == f"skipped: {gpus} CUDA GPU(s) here; the multi-GPU DDP run needs 2 or more"
        assert gpu_check.exit_code([Part("pytest", "ok"), part]) == 0, "a machine with one GPU still passes"
    lines = [EpochStats(e, 3.0, 0.5, 0.9, 0.91, t, 0.2, {"sample": 0.1}).line() for e, t in ((0, 2.5), (1, 1.25))]
    text = "\n".join(
        [
            "synthetic: 50,000 nodes",
            *lines,
            "",
            "stage times per epoch (s)",
            "epoch  sample",
            "    0    0.10",
            "",
            "final test accuracy 0.9712 (best val 0.9000 at epoch 1, test 0.9100)",
        ]
    )
    assert gpu_check.parse_train_output(text) == {"epoch_times": [2.5, 1.25], "test_acc": 0.9712}
    assert gpu_check.parse_train_output("Traceback ...\nRuntimeError: NCCL error") == {"epoch_times": [], "test_acc": None}
    assert "ddp" in gpu_check.PARTS and gpu_check.LIMITS["ddp"] >= 45 and gpu_check.FULL_LIMITS["ddp"] >= 45


def test_cached_methods_get_their_own_table_with_hit_rates(tmp_path):
    summary = _made_up_summary(tmp_path)
    rows = summary["figures"]["gather"]
    at = next(g for g in rows if g["method"] == "zerocopy" and g["dim"] == 128)
    cpu = next(g for g in rows if g["method"] == "cpu" and g["dim"] == 128)
    rows += [
        {**at, "method": "zerocopy+cache=0.25", "gbps_median": 2 * at["gbps_median"], "hit_rate": 0.2501},
        {**cpu, "method": "cpu+cache=0.25", "gbps_median": float("nan"), "status": "failed: RuntimeError: x", "hit_rate": None},
    ]
    md = gpu_check.render_markdown(summary)
    assert "## Hot-row cache at 512 B rows (128 cols; uniform ids, random cached rows)" in md
    assert f"| zerocopy | 0.25 | 0.250 | {2 * at['gbps_median']:.2f} (" in md and "| 2.00 | ok |" in md
    assert "| cpu | 0.25 | – | – | – | failed: RuntimeError: x |" in md
    options = md.split("Zero-copy options")[1]
    assert "cache" not in options.split("##")[0]  # the options table stays the kernel's options
    for mode, args in gpu_check.GATHER_ARGS.items():
        assert "--cache-fracs" in args, mode


# -- the header, printed first ---------------------------------------------------------------------


def _tiny_wheel(folder, name="gpucheckdemo", version="1.0"):
    """A real pure-Python wheel, to be installed offline as the check installs DGL's."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": "VALUE = 1\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(path, "w") as z:
        for arcname, text in files.items():
            z.writestr(arcname, text)
        z.writestr(f"{info}/RECORD", "".join(f"{a},,\n" for a in files) + f"{info}/RECORD,,\n")
    return path


def _fake_step(name, status="ok", reason="fake"):
    def step(env, limit, *args, **kwargs):
        print(f"step {name} runs with a limit of {limit:.0f} s", flush=True)
        part = gpu_check.Part(name, status, reason, 1.0, limit=limit)
        return (part, "log", "2.1.0") if name == "epoch" else (part, "log")

    return step


@pytest.fixture
def on_cpu(monkeypatch):
    """main() in this process, its steps replaced by stand-ins; sys.path restored afterwards."""
    monkeypatch.setenv("DGL_ZEROCOPY_GPU_CHECK_ON_CPU", "1")
    monkeypatch.delenv("CUPY_CACHE_DIR", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in ("pytest", "gather", "sampling", "storage", "epoch", "pyg", "scale", "ddp"):
        monkeypatch.setattr(gpu_check, f"{name}_part", _fake_step(name))
    return monkeypatch


def test_the_header_comes_first_and_names_the_wheels_installed(on_cpu, tmp_path, capsys):
    _tiny_wheel(tmp_path / "whl")
    site = tmp_path / "site"
    code = gpu_check.main(["--out", str(tmp_path / "out"), "--wheels", str(tmp_path / "whl"), "--site", str(site), "--parts", "pytest,gather,epoch"])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0
    assert lines[0] == f"gpu-check: wheels installed: gpucheckdemo-1.0 (offline, into {site})"
    assert (site / "gpucheckdemo.py").is_file()
    assert lines[1].startswith("gpu-check: GPU: ")
    assert lines[2].startswith("gpu-check: driver ") and "CUDA runtime" in lines[2] and "torch built with CUDA" in lines[2]
    assert lines[3].startswith("gpu-check: NVRTC ") and "(CuPy)" in lines[3]
    import cupy
    import numpy

    assert lines[4].startswith(f"gpu-check: CuPy {cupy.__version__}, torch {torch.__version__}, NumPy {numpy.__version__}")
    assert lines[5].startswith("gpu-check: kernel cache ") and lines[5].endswith("cold (empty)")
    pytest_limit = gpu_check.LIMITS["pytest"]
    assert lines[6].startswith("gpu-check: quick run into ") and f"pytest {pytest_limit} s" in lines[6]
    assert lines.index(f"step pytest runs with a limit of {pytest_limit} s") > 6
    md = (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")
    assert lines[0] in md and lines[3] in md


def test_without_wheels_the_header_says_none(on_cpu, tmp_path, capsys):
    assert gpu_check.main(["--out", str(tmp_path / "out"), "--wheels", str(tmp_path / "none"), "--parts", "pytest"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == f"gpu-check: wheels installed: none: no wheels in {tmp_path / 'none'}"


# -- time limits ----------------------------------------------------------------------------------


def test_step_limits_keep_the_later_steps_their_time():
    assert gpu_check.step_limit(230, left=530, later=260) == 230
    assert gpu_check.step_limit(230, left=400, later=260) == 140  # a slow setup shortens this step, not the later ones
    assert gpu_check.step_limit(100, left=50, later=0) == 50
    assert gpu_check.step_limit(100, left=10, later=60) == 0
    one_gpu = ("wheels", "pytest", "gather", "sampling", "storage", "epoch", "pyg", "scale")
    assert set(gpu_check.LIMITS) == set(gpu_check.FULL_LIMITS) == {*one_gpu, "ddp"}
    assert sum(gpu_check.LIMITS[s] for s in one_gpu) <= gpu_check.TOTAL_LIMIT <= 300, "the default pass: a run, a fix and a second run take minutes"
    assert sum(gpu_check.FULL_LIMITS[s] for s in one_gpu) <= gpu_check.FULL_TOTAL_LIMIT <= 600 - 45, "--full: one 10-minute command"
    for mode, limits in (("quick", gpu_check.LIMITS), ("full", gpu_check.FULL_LIMITS)):
        assert gpu_check.GATHER_RESERVE[mode] < limits["gather"] and gpu_check.PYTEST_GRACE < limits["pytest"]
        assert limits["pytest"] == max(limits.values()), "correctness first: the GPU tests get the most time"


def test_kernels_compiled_are_counted_from_cupys_cache(tmp_path):
    for name in ("a.cubin", "b.ltoir", "a.cubin.cu", "tmpk2j3h"):  # a saved source and a write in progress are no kernels
        (tmp_path / name).write_bytes(b"x")
    assert gpu_check.cache_entries(tmp_path) == 2
    assert gpu_check.cache_entries(tmp_path / "missing") == 0 and gpu_check.cache_entries(None) == 0


def test_a_step_left_without_time_is_reported_not_failed(on_cpu, tmp_path, capsys):
    on_cpu.setattr(gpu_check, "LIMITS", {**gpu_check.LIMITS, "pytest": 100, "gather": 10, "epoch": 10})
    code = gpu_check.main(["--out", str(tmp_path / "out"), "--wheels", str(tmp_path / "none"), "--time-limit", "200", "--parts", "pytest,gather,epoch"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "step pytest runs with a limit of 100 s" in out and "step gather" not in out
    assert "gpu-check [2/3] gather: skipped: time limit" in out
    data = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [(p["name"], p["status"]) for p in data["parts"]] == [
        ("wheels", "ok"),
        ("pytest", "ok"),
        ("gather", "partial"),
        ("sampling", "not run"),
        ("storage", "not run"),
        ("epoch", "partial"),
        ("pyg", "not run"),
        ("scale", "not run"),
        ("ddp", "not run"),
    ]
    assert data["parts"][-1]["reason"] == "not in --parts"
    md = (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")
    assert ": passed, parts skipped for time (see below)" in md.splitlines()[0]
    assert "## Skipped for time (not failures)" in md and "- gather: not started: time limit" in md


def _fake_pytest_tests(folder, slow_test_body):
    folder.mkdir()
    (folder / "test_fake.py").write_text(
        textwrap.dedent(f"""
        import signal, time
        import pytest
        pytestmark = pytest.mark.gpu
        def test_a(): pass
        def test_b(): pytest.skip("needs two GPUs")
        def test_slow():
            {slow_test_body}
        def test_after(): pass
    """)
    )
    return folder


@pytest.fixture(params=["terminal", "ignored"])
def sigint(request):
    """SIGINT as the check inherits it: a terminal's (KeyboardInterrupt), or ignored, as a shell
    without job control (`make test &`, a CI script) leaves it; restored after the test."""
    previous = signal.getsignal(signal.SIGINT)
    yield signal.default_int_handler if request.param == "terminal" else signal.SIG_IGN
    signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)


@pytest.mark.parametrize(
    "slow_test_body, stop", [("time.sleep(60)", "interrupted"), ("signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(60)", "killed")]
)
@pytest.mark.slow
def test_pytest_stopped_at_its_limit_keeps_what_finished(tmp_path, monkeypatch, slow_test_body, stop, sigint):
    """pytest interrupted at its limit (or killed, when it ignores SIGINT): the tests that finished
    keep their outcomes, the one cut off and those after it are not run for time, the step is
    partial and the check still passes. Also where the check itself was started with SIGINT ignored
    (a shell without job control: its children inherit that): the plugin restores it in pytest."""
    signal.signal(signal.SIGINT, sigint)
    monkeypatch.setattr(gpu_check, "PYTEST_GRACE", 3)
    runs = []
    run_bounded = gpu_check.run_bounded
    monkeypatch.setattr(gpu_check, "run_bounded", lambda *args, **kwargs: runs.append(run_bounded(*args, **kwargs)) or runs[-1])
    folder = _fake_pytest_tests(tmp_path / "t", slow_test_body)
    part, log = gpu_check.pytest_part(gpu_check.child_env(None), 9, tmp_path, cwd=folder)
    (run,) = runs
    assert part.status == "partial", (part, log)
    assert part.details["counts"] == {"passed": 1, "failed": 0, "errors": 0, "skipped": 1, "not run (time limit)": 2, "selected": 4}
    assert part.details["in_flight"] == "test_fake.py::test_slow"
    assert part.details["not_run"] == ["test_fake.py::test_after"]
    assert part.reason.startswith("time limit (9 s): 1 passed, 1 skipped, 2 not run (time limit); test_fake.py::test_slow cut off")
    assert gpu_check.exit_code([part]) == 0
    assert run.interrupted  # sent SIGINT at 6 s: its limit (9 s) less the grace (3 s)
    if stop == "interrupted":  # pytest ended its session itself before the kill (0.2 s after the SIGINT, idle): its own summary is there too
        assert run.returncode == 2, (run.returncode, run.seconds)  # pytest's exit code when interrupted; None: killed
        assert "KeyboardInterrupt" in log and "slowest 15 durations" in log
    else:  # ignoring SIGINT, it was killed (no exit code) at its limit, not before
        assert run.returncode is None and part.seconds > 8.9, (run.returncode, run.seconds)
    summary = {"parts": [gpu_check.asdict(part)], "figures": {"gather": []}}
    assert gpu_check.render_markdown.__module__ == "gpu_check_report"
    from gpu_check_report import time_skips

    assert time_skips(summary) == ["pytest: 1 tests not run: test_fake.py::test_after; cut off while running: test_fake.py::test_slow"]


def _progress(**outcomes):
    p = gpu_check_pytest.Progress(selected=list(outcomes), outcomes={t: o for t, o in outcomes.items() if o}, finished=True, exitstatus=0)
    p.not_run = [t for t, o in outcomes.items() if not o]
    return p


def test_judging_pytest_failures_hangs_and_time():
    run = gpu_check.Run(0, "", 10.0)
    ok = gpu_check.judge_pytest(run, _progress(a="passed", b="skipped"), 230)
    assert (ok.status, ok.reason) == ("ok", "1 passed, 1 skipped")
    failed = gpu_check.judge_pytest(gpu_check.Run(1, "", 10.0), _progress(a="passed", b="failed"), 230)
    assert failed.status == "failed" and "b (failed)" in failed.reason
    # a failure before the time limit still fails the step
    stopped = gpu_check.Run(2, "", 210.0, interrupted=True, ended=1000.0)
    assert gpu_check.judge_pytest(stopped, _progress(a="failed", b=None), 230).status == "failed"
    # the test cut off had run longer than a test may: hung, not a matter of time
    hung = _progress(a="passed", b=None)
    hung.in_flight, hung.in_flight_since, hung.not_run = "b", 1000.0 - gpu_check.PYTEST_TEST_TIMEOUT - 5, []
    part = gpu_check.judge_pytest(stopped, hung, 230)
    assert part.status == "failed" and "b still running after 125 s (hung?)" in part.reason
    hung.in_flight_since = 990.0
    assert gpu_check.judge_pytest(stopped, hung, 230).status == "partial"
    assert gpu_check.judge_pytest(gpu_check.Run(0, "", 5.0), _progress(a="skipped"), 230).reason == "no GPU test passed (1 skipped)"
    assert gpu_check.judge_pytest(gpu_check.Run(None, "", 230.0), None, 230).status == "failed"
    assert gpu_check.exit_code([gpu_check.Part("pytest", "partial"), gpu_check.Part("ddp", "not run")]) == 0


class _Clock:
    """A stand-in for the time module in bench/gathering/gather.py: each configuration takes 10 s."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now


def test_gather_skips_for_time_and_appends_each_row_as_it_comes(tmp_path, monkeypatch):
    import gather

    clock, stem, seen = _Clock(), tmp_path / "g", []

    def configuration(name, table, ids, reference, out, timer, repeats, *rest):
        seen.append(len([ln for ln in stem.with_suffix(".csv").read_text().splitlines() if not ln.startswith("#")]))
        clock.now += 10
        return [1e-3] * repeats

    monkeypatch.setattr(gather, "time", clock)
    monkeypatch.setattr(gather, "time_method", configuration)
    code = gather.main(
        ["--rows", "100", "--cols", "16,32", "--dtypes", "fp32", "--batches", "50", "--repeats", "2", "--raw", "json", "--time-limit", "25", "--out", str(stem)]
    )
    assert code == 0, "rows skipped for time are no failure"
    assert seen == [1, 2, 3], "the CSV holds its header and every configuration measured before the next starts"
    rows = gpu_check.result_rows(tmp_path, "g")
    assert [(r["dim"], r["method"], r["status"]) for r in rows] == [
        (16, "copy", "ok"),
        (16, "cpu", "ok"),
        (16, "index_select", "ok"),
        (16, "fancy", gather.TIME_LIMIT_STATUS),
        *((32, m, gather.TIME_LIMIT_STATUS) for m in gather.CPU_METHODS),
    ]
    assert [r["wall_s"] for r in rows[:3]] == [10, 10, 10]
    stem.with_suffix(".json").unlink()  # as if killed before the end: the CSV alone has them
    assert [r["status"] for r in gpu_check.result_rows(tmp_path, "g")] == [r["status"] for r in rows]
    part = gpu_check.judge_gather(gpu_check.Run(0, "", 30.0), rows, 160)
    assert part.status == "partial" and "3 results" in part.reason and f"5 configurations {gather.TIME_LIMIT_STATUS} (at 64 B, 128 B)" in part.reason
    assert gpu_check.exit_code([part]) == 0
    summary = {"parts": [gpu_check.asdict(part)], "figures": {"gather": gpu_check.gather_figures(rows)}}
    from gpu_check_report import time_skips

    assert time_skips(summary)[0].startswith("gather: 5 configurations at 64 B, 128 B: fancy at 64 B, copy at 128 B")


def test_a_killed_gather_keeps_its_rows_and_a_failed_row_fails(tmp_path, monkeypatch):
    import gather

    calls = []

    def configuration(name, *args):
        calls.append(name)
        if len(calls) == 3:
            raise KeyboardInterrupt  # the process dies here, as at a kill
        return [1e-3] * 2

    monkeypatch.setattr(gather, "time_method", configuration)
    with pytest.raises(KeyboardInterrupt):
        gather.main(["--rows", "100", "--cols", "16", "--dtypes", "fp32", "--batches", "50", "--repeats", "2", "--out", str(tmp_path / "g")])
    rows = gpu_check.result_rows(tmp_path, "g")
    assert [(r["method"], r["status"]) for r in rows] == [("copy", "ok"), ("cpu", "ok")]
    killed = gpu_check.judge_gather(gpu_check.Run(None, "gather: fp32 16 cols, batch 50, cpu: 1.00 GB/s (0.0 s)\n", 160.0), rows, 160)
    assert killed.status == "failed" and "killed at its time limit (160 s) after 2 results" in killed.reason
    assert killed.reason.endswith("the last finished: fp32 16 cols, batch 50, cpu: 1.00 GB/s (0.0 s)")
    bad = [*rows, {**rows[0], "method": "zerocopy", "status": "failed: RuntimeError: boom"}]
    assert gpu_check.judge_gather(gpu_check.Run(1, "", 9.0), bad, 160).status == "failed"


def test_the_sweep_is_sized_as_docs_gpu_md_says():
    plan = gpu_check.gather_plan("full", 132)
    assert plan["configurations"] == 59 and plan["gathers"] == 59 * 19
    docs = (REPO / "docs" / "gpu.md").read_text(encoding="utf-8")
    assert "59 configurations" in docs and f"{plan['gathers']:,} gathers" in docs
    assert f"{len(instantiations.all_name_expressions())} instantiations" in docs
    cols = gpu_check.GATHER_ARGS["full"][gpu_check.GATHER_ARGS["full"].index("--cols") + 1].split(",")
    assert cols[:2] == ["128", "256"], "512 B and 1 KB rows are measured first"


# -- NumPy 2 ----------------------------------------------------------------------------------------

#: Names NumPy 2.0 removed, or deprecated for removal in 2.x (the GPU image runs NumPy 2.5).
NUMPY_1_ONLY = [
    "float_",
    "complex_",
    "NaN",
    "PINF",
    "NINF",
    "Inf",
    "product",
    "cumproduct",
    "alltrue",
    "sometrue",
    "in1d",
    "row_stack",
    "trapz",
    "round_",
    "asfarray",
    "find_common_type",
    "msort",
    "int0",
    "uint0",
    "bool8",
    "string_",
    "unicode_",
    "sctypes",
    "issubsctype",
    "maximum_sctype",
    "cast",
    "core",
    "compat",
    "safe_eval",
    "lookfor",
    "set_string_function",
    "byte_bounds",
    "fastCopyAndTranspose",
    "DataSource",
    "longfloat",
    "singlecomplex",
    "cfloat",
    "longcomplex",
    "clongfloat",
    "tracemalloc_domain",
    "recfromcsv",
    "recfromtxt",
    "disp",
    "deprecate",
]


def test_the_code_the_check_runs_uses_no_numpy_1_only_api():
    pattern = re.compile(r"\b(?:np|numpy)\.(" + "|".join(NUMPY_1_ONLY) + r")\b(?!\w)")
    here = Path(__file__).resolve()
    found = [
        f"{p.relative_to(REPO)}:{i}: {m.group(0)}"
        for folder in ("bench", "dgl_zerocopy", "tests")
        for p in sorted((REPO / folder).rglob("*.py"))
        if p != here
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        for m in pattern.finditer(line)
        if "_reconstruct" not in line
    ]  # numpy.core.multiarray._reconstruct: the name old pickles carry, kept by NumPy 2
    assert not found, found
    assert pattern.search("x = np.in1d(a, b)") and pattern.search("numpy.float_") and not pattern.search("np.float32")


def _epoch_row(source, prefetch, status="ok"):
    return {"source": source, "prefetch": prefetch, "epoch_time": 1.0, "epoch_min": 0.9, "epoch_max": 1.1, "wait_share": 0.1, "test_acc": 0.9, "status": status}


@pytest.mark.parametrize("finished, status", [([("cpu", 0), ("cpu", 2)], "partial"), ([], "partial"), ([("cpu", 0, "failed: boom")], "failed")])
def test_an_epoch_step_stopped_at_its_limit_keeps_the_routes_that_finished(tmp_path, monkeypatch, finished, status):
    """bench/training/epoch.py writes each route's row as it finishes; the check stopped at its limit reports
    those and calls the rest skipped for time (a route that failed still fails the step)."""
    monkeypatch.setattr(gpu_check, "probe_dgl", lambda part, env, timeout: (gpu_check.Run(0, "", 2.0), "2.1.0"))

    def killed_at_the_limit(cmd, timeout, env=None, **kwargs):
        from common import write_results

        write_results(cmd[cmd.index("--out") + 1], [_epoch_row(*f) for f in finished], {"command": "epoch"})
        return gpu_check.Run(None, "", timeout)

    monkeypatch.setattr(gpu_check, "run_bounded", killed_at_the_limit)
    part, _, version = gpu_check.epoch_part({}, 100, tmp_path, "quick" if "quick" in gpu_check.EPOCH_ARGS else next(iter(gpu_check.EPOCH_ARGS)), "cpu")
    assert (part.status, version) == (status, "2.1.0"), part.reason
    if status == "partial":
        assert "time limit (100 s)" in part.reason and "skipped: time limit" in part.reason
        assert all(f"{s} prefetch {p}" in part.reason for s, p in finished)
    assert gpu_check.exit_code([part]) == (0 if status == "partial" else 1)


def test_the_epoch_bench_writes_each_route_as_it_finishes(tmp_path, monkeypatch):
    """A run killed after its first route still has that route's row on disk."""
    import epoch

    stem, calls = tmp_path / "e", []

    class Stop(BaseException):
        pass

    def train(cfg, dataset, progress):
        calls.append(cfg.feature_source)
        if len(calls) == 2:
            assert [r["source"] for r in gpu_check.result_rows(tmp_path, "e")] == ["cpu"]
            raise Stop  # as a kill: nothing after this point runs
        return [
            EpochStats(epoch=e, loss=1.0, train_acc=0.5, val_acc=0.5, test_acc=0.5, epoch_time=1.0 + e, eval_time=0.0, stages={"compute": 1.0})
            for e in range(3)
        ]

    import dgl_zerocopy.data
    import dgl_zerocopy.training.train
    from dgl_zerocopy.training.train import EpochStats

    monkeypatch.setattr(dgl_zerocopy.training.train, "train", train)  # epoch.main imports them when it runs
    monkeypatch.setattr(dgl_zerocopy.data, "load_dataset", lambda *a, **k: None)
    with pytest.raises(Stop):
        epoch.main(["--sources", "cpu", "--prefetch", "2", "--epochs", "3", "--out", str(stem)])
    assert len(calls) == 2


# -- the sampling step: bench/sampler/sampling.py's rows in the summary ---------------------------------


def _sampling_row(method, ms, status="ok", **extra):
    nan = float("nan")
    figures = (
        {"ms_per_batch_median": ms, "ms_per_batch_q1": 0.9 * ms, "ms_per_batch_q3": 1.1 * ms}
        | {"medges_per_s_median": 800 / ms, "medges_per_s_q1": 700 / ms, "medges_per_s_q3": 900 / ms}
        | {"edges_per_batch": 800_000.0, "layer_edges": "740000/55000/5000", "x_dgl_cpu": 40.0 / ms}
        if status == "ok"
        else dict.fromkeys(("ms_per_batch_median", "ms_per_batch_q1", "ms_per_batch_q3", "medges_per_s_median", "medges_per_s_q1", "medges_per_s_q3"), nan)
        | {"edges_per_batch": nan, "layer_edges": "", "x_dgl_cpu": nan}
    )
    what = "CPU measurement: DGL's NeighborSampler (baseline)" if method == "dgl-cpu" else f"GPU measurement: {method}"
    return {
        "method": method,
        "what": what,
        "num_nodes": 250000,
        "num_edges": 12_000_000,
        "fanouts": "15,10,5",
        "batch_size": 1024,
        **figures,
        "status": status,
        **extra,
    }


def test_the_sampling_step_is_judged_from_its_rows():
    """ok with the figures and pinned against device; a failed method fails it; methods left out for
    time (or a kill) make it partial and keep what finished; a method that cannot run here is named."""
    import gpu_check_sampling as gs

    ok = [_sampling_row("gpu-pinned", 2.0), _sampling_row("gpu-device", 1.6), _sampling_row("dgl-cpu", 40.0)]
    part = gpu_check.judge_sampling(gpu_check.Run(0, "", 30.0), ok, 50)
    assert part.status == "ok" and part.details == {"results": 3, "skipped_for_time": 0, "skipped": 0, "failed": 0}
    assert part.reason.startswith("gpu-pinned 2.00 ms/batch, 400.0 M edges/s; gpu-device 1.60 ms/batch, 500.0 M edges/s; dgl-cpu 40.00 ms/batch")
    assert "device-resident 1.25x pinned" in part.reason and part.reason.endswith("each checked before timing")
    failed = gpu_check.judge_sampling(gpu_check.Run(1, "", 30.0), [ok[0], _sampling_row("gpu-device", 0, "failed: CheckError: block 2: boom")], 50)
    assert failed.status == "failed" and failed.reason == "1 of 2 methods failed: gpu-device: failed: CheckError: block 2: boom"
    for_time = gpu_check.judge_sampling(gpu_check.Run(0, "", 31.0), [ok[0], _sampling_row("dgl-cpu", 0, gs.TIME_LIMIT_STATUS)], 50)
    assert for_time.status == "partial" and for_time.reason.endswith("; dgl-cpu skipped: time limit")
    killed = gpu_check.judge_sampling(gpu_check.Run(None, "", 50.0), ok[:1], 50)
    assert killed.status == "partial" and killed.reason.startswith("time limit (50 s) reached; methods finished: gpu-pinned; the rest skipped")
    no_dgl = gpu_check.judge_sampling(gpu_check.Run(0, "", 20.0), [*ok[:2], _sampling_row("dgl-cpu", 0, "skipped: import dgl failed: ModuleNotFoundError")], 50)
    assert no_dgl.status == "ok" and no_dgl.reason.endswith("; dgl-cpu skipped: import dgl failed: ModuleNotFoundError")
    crashed = gpu_check.judge_sampling(gpu_check.Run(1, "Traceback\nMemoryError: x\n", 5.0), [], 50)
    assert (crashed.status, crashed.reason) == ("failed", "MemoryError: x")
    assert [gpu_check.exit_code([p]) for p in (part, failed, for_time, killed, no_dgl, crashed)] == [0, 1, 0, 0, 0, 1]
    assert gs.sampling_methods(True) == "gpu-pinned,gpu-device,gpu-snapshot,dgl-cpu" and gs.sampling_methods(False) == "reference,snapshot-reference,dgl-cpu"
    snapshot = gpu_check.judge_sampling(gpu_check.Run(0, "", 30.0), [*ok, _sampling_row("gpu-snapshot", 0.5)], 50)
    assert snapshot.status == "ok" and "; device snapshot 4.00x faster per batch than pinned (goal at least 3x)" in snapshot.reason
    assert "device snapshot" not in part.reason
    assert gs.SAMPLING_RESERVE["quick"] < gpu_check.LIMITS["sampling"] and gs.SAMPLING_RESERVE["full"] < gpu_check.FULL_LIMITS["sampling"]


def test_the_sampling_rows_are_in_summary_json_and_md(tmp_path):
    """The rows travel in the two summaries (the folder holds at most 8 files); no CPU row passes for a GPU one."""
    summary = _made_up_summary(tmp_path)
    rows = [_sampling_row("gpu-pinned", 2.0), _sampling_row("gpu-device", 1.6), _sampling_row("dgl-cpu", 40.0, wall_s=9.0)]
    rows.insert(2, _sampling_row("gpu-snapshot", 0.5, build_s=1.25, refresh_ms=30.0))
    rows.append(
        {**_sampling_row("gpu-device", 0, "failed: x|y"), "method": "emulator", "what": "CPU emulation of our CUDA kernel (correctness tool): NOT a GPU figure"}
    )
    summary["figures"]["sampling"] = gpu_check.sampling_figures(rows)
    json_path, md_path = gpu_check.write_summary(tmp_path, summary, {})
    data = json.loads(json_path.read_text())
    assert [f["method"] for f in data["figures"]["sampling"]] == ["gpu-pinned", "gpu-device", "gpu-snapshot", "dgl-cpu", "emulator"]
    assert data["figures"]["sampling"][3]["wall_s"] == 9.0 and data["figures"]["sampling"][4]["ms_per_batch_median"] is None
    assert data["figures"]["sampling"][2]["build_s"] == 1.25 and data["figures"]["sampling"][0]["build_s"] is None
    md = md_path.read_text(encoding="utf-8")
    assert "## Sampling: our sampler against DGL's CPU sampler (250,000 nodes, 12,000,000 edges, fanouts 15,10,5, batch 1024;" in md
    assert "| gpu-pinned | 2.00 (1.80–2.20) | 400.00 (350.00–450.00) | 20.00 | 800,000 (740000/55000/5000) | GPU measurement: gpu-pinned | ok |" in md
    assert "| emulator | – | – | – | – | CPU emulation of our CUDA kernel (correctness tool): NOT a GPU figure | failed: x/y |" in md
    assert "Pinned in place takes 1.25x the time per batch of device-resident (the goal: within 1.5x)." in md
    assert (
        "UVA sampling of the full CSC (pinned) takes 4.00x the time per batch of sampling the snapshot in device memory "
        "(the goal: at least 3x); the snapshot was built in 1.25 s, one refresh (share 0.25) took 30.0 ms." in md
    )
    assert "The end-to-end epoch table (GPU sampling against CPU sampling, DGL's default path) is under the epoch table." in md
    assert gpu_check.transfer_problems(tmp_path) == [] and not any("sampling" in f for f in gpu_check.RESULT_FILES)
    assert "## Sampling" not in gpu_check.render_markdown({**summary, "figures": {**summary["figures"], "sampling": []}})


@pytest.mark.slow
def test_the_sampling_step_runs_bench_sampling_with_the_reference_backend(tmp_path, monkeypatch):
    """The real step without CUDA: bench/sampler/sampling.py in a subprocess, the reference backend standing in
    for the GPU sampler beside DGL's; its rows read back from the work folder; killed at its limit, partial."""
    import gpu_check_sampling as gs

    monkeypatch.setitem(gs.SAMPLING_ARGS, "quick", ["--num-nodes", "3000", "--batch-size", "64", "--batches", "2", "--repeats", "2"])
    env = {**gpu_check.child_env(None), "DGL_ZEROCOPY_CACHE": str(tmp_path / "cache")}
    part, log = gs.sampling_part(env, 240, tmp_path, "quick", cuda=False)
    assert part.status == "ok", (part, log)
    assert (
        part.details["command"].startswith("python3 bench/sampler/sampling.py --num-nodes 3000")
        and "--methods reference,snapshot-reference,dgl-cpu" in part.details["command"]
    )
    rows = gpu_check.result_rows(tmp_path, "sampling")
    assert [(r["method"], r["status"]) for r in rows] == [("reference", "ok"), ("snapshot-reference", "ok"), ("dgl-cpu", "ok")]
    assert all(r["ms_per_batch_median"] > 0 and r["medges_per_s_median"] > 0 for r in rows)
    assert rows[0]["what"].endswith("NOT a GPU figure")
    figures = gpu_check.sampling_figures(rows)
    assert "| reference |" in "\n".join(gs.sampling_markdown(figures))
    killed, _ = gs.sampling_part(env, 0.5, tmp_path / "killed", "quick", cuda=False)
    assert killed.status == "partial" and "methods finished: none" in killed.reason


# -- the storage step: bench/tiers/storage.py's rows in the summary ----------------------------------


def _storage_row(run, mib, wait, status="ok", **extra):
    if status != "ok":
        return {"run": run, "status": status}
    figures = {"epoch_s": 2.0, "rows_per_s": 250_000.0, "storage_mib_per_epoch": mib, "first_storage_mib": 1.5 * mib, "wait_s": wait, "step_s": 1.0}
    figures |= {"wait_over_step": wait, "first_wait_over_step": 2 * wait, "host_hit_rate": 0.6, "storage_reads": 1000, "read_ahead_hits": 10, "batches": 25}
    if not run.startswith("mmap"):  # our tiers' host buffer (made-up figures): 8 MiB, 6 of it resident at the first epoch's end
        figures |= {"buffer_mib": 8.0, "buffer_resident_mib": 8.0, "first_buffer_resident_mib": 6.0}
    return {
        "run": run,
        "status": status,
        "device": "cuda",
        "backend": "cpu" if run.startswith("mmap") else "zerocopy",
        **figures,
        "memory_limit": "none",
        **extra,
    }


def test_the_storage_step_is_judged_from_its_rows():
    import gpu_check_storage as gst

    ok = [_storage_row("static+ahead", 30.0, 0.04), _storage_row("static", 31.0, 0.9), _storage_row("mmap-random", 120.0, 3.0)]
    part = gpu_check.judge_storage(gpu_check.Run(0, "", 30.0), ok, 40)
    assert part.status == "ok" and part.details == {"results": 3, "skipped_for_time": 0, "skipped": 0, "failed": 0}
    assert part.reason.startswith("static+ahead 30 MiB/epoch, wait 0.04 of the step; static 31 MiB/epoch, wait 0.90 of the step; mmap-random 120")
    assert part.reason.endswith("; reading ahead: wait 4.0% of the step (goal at most 5 %)")
    failed = gpu_check.judge_storage(gpu_check.Run(1, "", 30.0), [ok[0], _storage_row("static", 0, 0, "failed: exit 1: BufferFullError: x")], 40)
    assert failed.status == "failed" and failed.reason == "1 of 2 runs failed: static: failed: exit 1: BufferFullError: x"
    for_time = gpu_check.judge_storage(gpu_check.Run(0, "", 31.0), [ok[0], _storage_row("mmap-random", 0, 0, gst.TIME_LIMIT_STATUS)], 40)
    assert for_time.status == "partial" and for_time.reason.endswith("; mmap-random skipped: time limit") and gpu_check.exit_code([for_time]) == 0
    killed = gpu_check.judge_storage(gpu_check.Run(None, "", 40.0), ok[:1], 40)
    assert killed.status == "partial" and killed.reason == "time limit (40 s) reached; runs finished: static+ahead; the rest skipped: time limit"
    no_dgl = [_storage_row(run, 0, 0, "skipped: import dgl failed: ModuleNotFoundError: No module named 'dgl'") for run in ("static+ahead", "static")]
    skipped = gpu_check.judge_storage(gpu_check.Run(0, "", 2.0), no_dgl, 40)
    assert skipped.status == "skipped" and skipped.reason == "import dgl failed: ModuleNotFoundError: No module named 'dgl'"
    crashed = gpu_check.judge_storage(gpu_check.Run(1, "Traceback\nMemoryError: x\n", 5.0), [], 40)
    assert crashed.status == "failed" and "MemoryError: x" in crashed.reason
    assert gst.STORAGE_RESERVE["quick"] < gpu_check.LIMITS["storage"] and gst.STORAGE_RESERVE["full"] < gpu_check.FULL_LIMITS["storage"]
    assert gst.STORAGE_RUNS.split(",")[0] == "static+ahead"  # the goal's run first: a time limit cuts the others


def test_the_storage_rows_are_in_summary_json_and_md(tmp_path):
    """The rows travel in the two summaries (the folder holds at most 8 files)."""
    summary = _made_up_summary(tmp_path)
    rows = [_storage_row("static+ahead", 30.0, 0.04), _storage_row("static", 31.0, 0.9), _storage_row("mmap-random", 0, 0, "skipped: time limit")]
    summary["figures"]["storage"] = gpu_check.storage_figures(rows)
    json_path, md_path = gpu_check.write_summary(tmp_path, summary, {})
    data = json.loads(json_path.read_text())
    assert [f["run"] for f in data["figures"]["storage"]] == ["static+ahead", "static", "mmap-random"]
    assert data["figures"]["storage"][0]["wait_over_step"] == 0.04 and data["figures"]["storage"][2]["storage_mib_per_epoch"] is None
    md = md_path.read_text(encoding="utf-8")
    assert "## Tables larger than host memory: a table 4x its host budget on this machine's disk" in md
    assert "| static+ahead | zerocopy | 30.0 (45.0) | 250,000 | 0.60 | 0.04 (0.08) | 8.0 (6.0) of 8.0 | ok |" in md
    assert "| mmap-random | – | – | – | – | – | – | skipped: time limit |" in md
    assert data["figures"]["storage"][0]["first_buffer_resident_mib"] == 6.0 and data["figures"]["storage"][0]["buffer_mib"] == 8.0
    assert "With reading ahead the loop waited 4.0% of the step for its next batch (the goal: at most 5 %)." in md
    assert gpu_check.transfer_problems(tmp_path) == [] and not any("storage" in f for f in gpu_check.RESULT_FILES)
    assert "## Tables larger" not in gpu_check.render_markdown({**summary, "figures": {**summary["figures"], "storage": []}})


@pytest.mark.parametrize("step, after, place", [("sampling", "gather", 3), ("pyg", "epoch", 6), ("storage", "sampling", 4), ("scale", "pyg", 7)])
def test_main_runs_a_step_after_the_one_before_it_with_its_limit(on_cpu, tmp_path, capsys, step, after, place):
    """``--parts STEP,AFTER`` runs them in the check's order (AFTER first), STEP with its own limit."""
    code = gpu_check.main(["--out", str(tmp_path / "out"), "--wheels", str(tmp_path / "none"), "--parts", f"{step},{after}"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.index(f"step {after} runs") < out.index(f"step {step} runs with a limit of {gpu_check.LIMITS[step]} s")
    assert f"gpu-check [2/2] {step}: ok" in out and f"{step} {gpu_check.LIMITS[step]} s" in out.splitlines()[6]
    data = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [p["name"] for p in data["parts"]] == ["wheels", "pytest", "gather", "sampling", "storage", "epoch", "pyg", "scale", "ddp"]
    assert data["figures"][step] == [] and data["parts"][place]["name"] == step


@pytest.mark.slow
def test_the_storage_step_runs_bench_storage_on_the_cpu(tmp_path, monkeypatch):
    """The real step without CUDA: bench/tiers/storage.py in a subprocess (the cpu backend stands in for the
    zerocopy one), its rows read back from the work folder; a run past the soft limit is skipped for
    time; killed at its limit, partial."""
    pytest.importorskip("dgl")
    import gpu_check_storage as gst

    monkeypatch.setitem(
        gst.STORAGE_ARGS, "quick", ["--nodes", "6000", "--dim", "32", "--epochs", "2", "--max-batches", "3", "--batch-size", "8", "--hidden", "8"]
    )
    part, log = gst.storage_part(gpu_check.child_env(None), 300, tmp_path, "quick", cuda=False)
    assert part.status == "ok", (part, log)
    assert part.details["command"].startswith("python3 bench/tiers/storage.py --nodes 6000") and "--device cpu" in part.details["command"]
    rows = gpu_check.result_rows(tmp_path, "storage")
    assert [(r["run"], r["status"], r["device"], r["backend"]) for r in rows] == [
        (name, "ok", "cpu", "cpu") for name in ("static+ahead", "static", "mmap-random", "static-int8+ahead")
    ]
    assert rows[0]["read_ahead_hits"] > 0 and rows[1]["read_ahead_hits"] == 0 and all(r["batches"] == 3 for r in rows)
    assert "| static+ahead | cpu |" in "\n".join(gst.storage_markdown(gpu_check.storage_figures(rows)))
    monkeypatch.setitem(gst.STORAGE_RESERVE, "quick", 299.5)  # a soft limit of 1 s: the table is written, no run starts
    skipped, _ = gst.storage_part(gpu_check.child_env(None), 300, tmp_path / "late", "quick", cuda=False)
    assert skipped.status == "partial" and skipped.details["skipped_for_time"] == 4, skipped
    monkeypatch.setitem(gst.STORAGE_RESERVE, "quick", 12)
    killed, _ = gst.storage_part(gpu_check.child_env(None), 0.5, tmp_path / "killed", "quick", cuda=False)
    assert killed.status == "partial" and "runs finished: none" in killed.reason


# -- the end-to-end epoch rows: GPU sampling against CPU sampling and DGL's default path ----------


def _sampled_row(source, sampler, prefetch, t, acc=0.9, status="ok"):
    return {**_epoch_row(source, prefetch, status), "sampler": sampler, "epoch_time": t, "epoch_min": 0.9 * t, "epoch_max": 1.1 * t, "test_acc": acc}


def test_the_end_to_end_rows_are_judged_and_in_summary_json_and_md(tmp_path):
    """The three rows (GPU sampling + zero-copy gather, CPU sampling + zero-copy gather, DGL's default
    path) and the ratio GPU / CPU sampling: in the step's reason, summary.json and summary.md."""
    import gpu_check_report

    rows = [
        _sampled_row("dgl", "cpu", 0, 9.0, 0.91),
        *(_sampled_row("zerocopy", "cpu", p, t) for p, t in ((0, 8.0), (2, 6.0))),
        *(_sampled_row("zerocopy", "gpu", p, t, 0.92) for p, t in ((0, 2.5), (2, 1.5))),
        _sampled_row("gpu", "gpu", 2, 1.2),
    ]
    e2e = gpu_check.end_to_end(gpu_check.epoch_figures(rows))
    assert (e2e["source"], e2e["prefetch"], e2e["ratio"]) == ("zerocopy", 2, 0.25)
    assert (e2e["gpu_sampling"]["epoch_time"], e2e["cpu_sampling"]["epoch_time"], e2e["dgl_default"]["epoch_time"]) == (1.5, 6.0, 9.0)
    summary = _made_up_summary(tmp_path)
    summary["figures"].update(epoch=gpu_check.epoch_figures(rows), end_to_end=e2e)
    json_path, md_path = gpu_check.write_summary(tmp_path, summary, {})
    assert json.loads(json_path.read_text())["figures"]["end_to_end"]["ratio"] == 0.25
    md = md_path.read_text(encoding="utf-8")
    assert "| zerocopy | gpu | 2 | 1.50 (1.35–1.65) | 10.0 % | 0.9200 | ok |" in md and "| dgl | cpu | 0 | 9.00" in md
    assert "## End to end: GPU sampling against CPU sampling (zerocopy gather, prefetch 2) and DGL's default path" in md
    assert "| GPU sampling + zerocopy gather | 1.50 (1.35–1.65) | 0.9200 | ok |" in md
    assert "| CPU sampling + zerocopy gather | 6.00 (5.40–6.60) | 0.9000 | ok |" in md
    assert "| DGL's default path (its DataLoader, CPU sampling) | 9.00 (8.10–9.90) | 0.9100 | ok |" in md
    assert "GPU-sampling epoch / CPU-sampling epoch: 0.25 (4.00x faster; the goal: at least 3x" in md
    # on a GPU with PyPI's DGL (no CUDA build) DGL's loader does not run: said so, not failed
    no_dgl = gpu_check.end_to_end(gpu_check.epoch_figures(rows[1:]))
    assert no_dgl["dgl_default"] is None and "| DGL's default path (its DataLoader, CPU sampling) | – | – | not run here" in "\n".join(
        gpu_check_report.end_to_end_markdown(no_dgl)
    )
    # a GPU-sampling route that failed: no ratio; rows without a sampler (older files) read as CPU sampling
    failed = gpu_check.end_to_end(gpu_check.epoch_figures([rows[2], _sampled_row("zerocopy", "gpu", 2, float("nan"), status="failed: x")]))
    assert failed["ratio"] is None and failed["gpu_sampling"]["status"] == "failed: x"
    assert gpu_check.end_to_end(gpu_check.epoch_figures([_epoch_row("cpu", 0)])) is None
    assert gpu_check.epoch_figures([_epoch_row("cpu", 0)])[0]["sampler"] == "cpu"


def test_the_epoch_step_passes_the_samplers_and_reports_the_ratio(tmp_path, monkeypatch):
    """On a GPU: sources dgl, zerocopy, gpu with --samplers cpu,gpu; the stand-in flag only under
    DGL_ZEROCOPY_GPU_CHECK_ON_CPU; the ratio in the step's reason."""
    monkeypatch.setattr(gpu_check, "probe_dgl", lambda part, env, timeout: (gpu_check.Run(0, "", 2.0), "2.1.0"))
    commands = []

    def finished(cmd, timeout, env=None, **kwargs):
        from common import write_results

        commands.append(cmd)
        rows = [_sampled_row("zerocopy", "cpu", 2, 6.0), _sampled_row("zerocopy", "gpu", 2, 1.5)]
        write_results(cmd[cmd.index("--out") + 1], rows, {"command": "epoch"})
        return gpu_check.Run(0, "", 10.0)

    monkeypatch.setattr(gpu_check, "run_bounded", finished)
    assert gpu_check.epoch_sources(True) == ("dgl,zerocopy,gpu", "cpu,gpu")
    monkeypatch.delenv("DGL_ZEROCOPY_GPU_CHECK_ON_CPU", raising=False)
    part, _, _ = gpu_check.epoch_part({}, 100, tmp_path, "full", *gpu_check.epoch_sources(True))
    assert part.status == "ok", part.reason
    assert "zerocopy gpu-sampled prefetch 2" in part.reason and part.reason.endswith(
        "GPU-sampling epoch / CPU-sampling epoch 0.25 (zerocopy, prefetch 2; goal at most 0.33)"
    )
    cmd = commands[-1]
    assert cmd[cmd.index("--sources") + 1] == "dgl,zerocopy,gpu" and cmd[cmd.index("--samplers") + 1] == "cpu,gpu" and "--emulate-gpu-sampler" not in cmd
    monkeypatch.setenv("DGL_ZEROCOPY_GPU_CHECK_ON_CPU", "1")
    gpu_check.epoch_part({}, 100, tmp_path, "full", *gpu_check.epoch_sources(False))
    assert "--emulate-gpu-sampler" in commands[-1] and commands[-1][commands[-1].index("--sources") + 1] == "cpu"


# -- the PyG step: bench/training/pyg_epoch.py's rows in the summary ----------------------------------


def _pyg_row(route, prefetch, seconds, status="ok"):
    figures = {"epoch_s_median": seconds, "epoch_s_q1": 0.9 * seconds, "epoch_s_q3": 1.1 * seconds, "epoch_s_min": 0.8 * seconds}
    figures |= {"epoch_s_max": 1.2 * seconds, "medges_per_s_median": 8.0 / seconds if seconds else 0.0, "batches_per_epoch": 16.0}
    figures |= {"edges_per_batch": 550_000.0, "nodes_per_batch": 160_000.0, "build_s": 0.5}
    if status != "ok":
        figures = dict.fromkeys(figures, float("nan"))
    base = {"route": route, "what": route, "device": "NVIDIA H100 80GB HBM3", "prefetch": prefetch, "num_nodes": 200000, "num_edges": 3_800_000}
    return {**base, "fanouts": "15,10,5", "batch_size": 1024, **figures, "status": status, "wall_s": 5.0}


def test_the_pyg_step_is_judged_from_its_rows():
    """ok with the figures and the PyG route against the DGL route; a failed route fails it; routes left out
    for time (or a kill) make it partial; PyG's own loader without pyg-lib is named; nothing measured: skipped."""
    import gpu_check_pyg as gp

    own = _pyg_row("pyg-own", "-", 0, "skipped: ImportError: 'NeighborSampler' requires either 'pyg-lib' or 'torch-sparse'")
    ok = [_pyg_row("pyg", 0, 1.0), _pyg_row("pyg", 2, 0.5), _pyg_row("dgl-route", 0, 1.25), _pyg_row("dgl-route", 2, 0.4), own]
    part = gpu_check.judge_pyg(gpu_check.Run(0, "", 20.0), ok, 40)
    assert part.status == "ok" and part.details == {"results": 4, "skipped_for_time": 0, "skipped": 1, "failed": 0}
    assert part.reason.startswith("pyg prefetch 0 1.000 s/epoch, 8.0 M edges/s; pyg prefetch 2 0.500 s/epoch, 16.0 M edges/s")
    assert "; PyG route / DGL route 1.25 (epoch, prefetch 2); pyg-own skipped: ImportError: 'NeighborSampler' requires" in part.reason
    failed = gpu_check.judge_pyg(gpu_check.Run(1, "", 20.0), [ok[0], _pyg_row("dgl-route", 0, 0, "failed: AssertionError: x")], 40)
    assert failed.status == "failed" and failed.reason == "1 of 2 routes failed: dgl-route prefetch 0: failed: AssertionError: x"
    for_time = gpu_check.judge_pyg(gpu_check.Run(0, "", 30.0), [ok[0], _pyg_row("dgl-route", 0, 0, gp.TIME_LIMIT_STATUS)], 40)
    assert for_time.status == "partial" and for_time.reason.endswith("; dgl-route prefetch 0 skipped: time limit")
    killed = gpu_check.judge_pyg(gpu_check.Run(None, "", 40.0), ok[:1], 40)
    assert killed.status == "partial" and killed.reason.startswith("time limit (40 s) reached; routes measured: pyg prefetch 0; the rest")
    nothing = gpu_check.judge_pyg(gpu_check.Run(0, "", 3.0), [own], 40)
    assert nothing.status == "skipped" and nothing.reason.startswith("ImportError: 'NeighborSampler'")
    crashed = gpu_check.judge_pyg(gpu_check.Run(1, "Traceback\nMemoryError: x\n", 5.0), [], 40)
    assert (crashed.status, crashed.reason) == ("failed", "MemoryError: x")
    assert [gpu_check.exit_code([p]) for p in (part, failed, for_time, killed, nothing, crashed)] == [0, 1, 0, 0, 1, 1]
    for mode, limits in (("quick", gpu_check.LIMITS), ("full", gpu_check.FULL_LIMITS)):
        assert gp.PYG_RESERVE[mode] < limits["pyg"] and gpu_check.MIN_STEP <= limits["pyg"]
    assert gp.PYG_ROUTES.split(",")[:2] == ["pyg", "dgl-route"]  # ours first: a time limit cuts PyG's own


def test_the_pyg_rows_are_in_summary_json_and_md(tmp_path):
    summary = _made_up_summary(tmp_path)
    rows = [_pyg_row("pyg", 2, 0.5), _pyg_row("dgl-route", 2, 0.4), _pyg_row("pyg-own", "-", 0, "skipped: ImportError: x|y")]
    summary["figures"]["pyg"] = gpu_check.pyg_figures(rows)
    json_path, md_path = gpu_check.write_summary(tmp_path, summary, {})
    data = json.loads(json_path.read_text())
    assert [f["route"] for f in data["figures"]["pyg"]] == ["pyg", "dgl-route", "pyg-own"] and data["figures"]["pyg"][2]["epoch_s_median"] is None
    md = md_path.read_text(encoding="utf-8")
    assert "## PyG route: our PyG loader against our DGL route (loading only: sample + gather; NVIDIA H100 80GB HBM3; 200,000 nodes," in md
    assert "| pyg | 2 | 0.500 (0.450–0.550) | 16.00 | 550,000 | 160,000 | ok |" in md
    assert "| pyg-own | - | – | – | – | – | skipped: ImportError: x/y |" in md
    assert "Our PyG route's epoch takes 1.25x our DGL route's (prefetch 2, the same kernels and store)." in md
    assert gpu_check.transfer_problems(tmp_path) == [] and not any("pyg" in f for f in gpu_check.RESULT_FILES)
    assert "## PyG route" not in gpu_check.render_markdown({**summary, "figures": {**summary["figures"], "pyg": []}})


@pytest.mark.slow
def test_the_pyg_step_runs_bench_pyg_epoch_on_the_cpu(tmp_path, monkeypatch):
    """The real step without CUDA: bench/training/pyg_epoch.py in a subprocess on the CPU, its rows read back from
    the work folder (PyG's own loader skipped with its ImportError on a PyPI install); killed at its limit, partial."""
    pytest.importorskip("torch_geometric")
    import gpu_check_pyg as gp

    monkeypatch.setitem(gp.PYG_ARGS, "quick", ["--num-nodes", "2000", "--epochs", "2", "--batch-size", "32", "--max-batches", "2", "--prefetch", "1"])
    env = {**gpu_check.child_env(None), "DGL_ZEROCOPY_CACHE": str(tmp_path / "cache")}
    part, log = gp.pyg_part(env, 300, tmp_path, "quick", cuda=False)
    assert part.status == "ok", (part, log)
    assert part.details["command"].startswith("python3 bench/training/pyg_epoch.py --num-nodes 2000") and "--device cpu" in part.details["command"]
    rows = gpu_check.result_rows(tmp_path, "pyg_epoch")
    assert [(r["route"], r["prefetch"]) for r in rows] == [("pyg", 1), ("dgl-route", 1), ("pyg-own", "-")]
    assert rows[0]["status"] == "ok" and rows[0]["device"] == "cpu" and rows[0]["epoch_s_median"] > 0
    assert "PyG route / DGL route" in part.reason or rows[1]["status"].startswith("skipped: import dgl")
    assert "| pyg | 1 |" in "\n".join(gp.pyg_markdown(gpu_check.pyg_figures(rows)))
    killed, _ = gp.pyg_part(env, 0.5, tmp_path / "killed", "quick", cuda=False)
    assert killed.status == "partial" and "routes measured: none" in killed.reason


# -- the scale step: bench/training/scale.py --device cuda, its row in the summary -----------------


def _scale_row(status="ok", **extra):
    figures = {"nodes": 1_110_600, "edges": 32_711_608, "index_dtype": "int32", "disk_gb": 0.29, "generate_s": 4.5, "open_s": 0.4, "pin_s": 0.21}
    figures |= {"gpu_peak_gb": 1.5, "run_peak_rss_gb": 2.5, "sample_ms_median": 3.0, "sample_ms_q1": 2.8, "sample_ms_q3": 3.3, "gather_ms_median": 250.0}
    figures |= {"gather_ms_q1": 240.0, "gather_ms_q3": 270.0, "sampled_edges_per_batch": 678_112.0, "sampled_edges_per_s": 2.2e8, "ns_per_sampled_edge": 4.4}
    figures |= {"gathered_bytes_per_batch": 4.9e7, "storage_bytes_per_batch": 1.6e7, "ns_per_gathered_byte": 5.1, "positions_past_2_31_checked": 0}
    figures |= {"steps": 10, "step_ms_median": 12.0, "loss_first5": 9.1, "loss_last5": 2.5, "loss_falls": True}
    if status == gpu_check.TIME_LIMIT_STATUS:  # generated, never run
        figures = {k: figures[k] for k in ("disk_gb", "generate_s")}
    elif status != "ok":
        figures = {}
    return {"fraction": 0.01, "generate_reused": False, **figures, "device": "NVIDIA H200 (cuda:0)", **extra, "status": status}


def test_the_scale_step_is_judged_from_its_row():
    """ok with the figures; a failed stage or a loss that does not fall fails it; a run left out for time, or a kill,
    makes it partial (saying where it stopped); the limits leave the run stage its reserve."""
    import gpu_check_scale as gsc

    part = gpu_check.judge_scale(gpu_check.Run(0, "", 25.0), [_scale_row()], 30)
    assert part.status == "ok" and part.details == {"fraction": 0.01, "device": "NVIDIA H200 (cuda:0)", "status": "ok"}
    assert part.reason == (
        "1 % of papers100M (1,110,600 nodes, 32.7 M edges) on NVIDIA H200 (cuda:0): generated in 4 s, CSC pinned in 0.21 s; "
        "sample 3.0 ms/batch (4.4 ns per sampled edge), gather 250.0 ms/batch (5.10 ns per byte); loss 9.10 -> 2.50"
    )
    failed = gpu_check.judge_scale(gpu_check.Run(1, "", 9.0), [_scale_row("failed: run: AssertionError: block 0: boom")], 30)
    assert failed.status == "failed" and failed.reason == "1 % of papers100M: failed: run: AssertionError: block 0: boom"
    flat = gpu_check.judge_scale(gpu_check.Run(0, "", 25.0), [_scale_row(loss_last5=9.5, loss_falls=False)], 30)
    assert flat.status == "failed" and flat.reason.startswith("the loss did not fall on NVIDIA H200 (cuda:0): 1 % of papers100M")
    for_time = gpu_check.judge_scale(gpu_check.Run(0, "", 20.0), [_scale_row(gpu_check.TIME_LIMIT_STATUS)], 30)
    assert (for_time.status, for_time.reason) == ("partial", "1 % of papers100M generated in 4 s; the run skipped: time limit")
    output = "scale 0.01: generate (0 s in)\nscale 0.01: run (6 s in)\n  tqdm ...\n"
    killed = gpu_check.judge_scale(gpu_check.Run(None, output, 30.0), [], 30)
    assert (killed.status, killed.reason) == ("partial", "time limit (30 s) reached in the run stage")
    assert gsc.stage_reached("") is None and gsc.stage_reached(output) == "run"
    crashed = gpu_check.judge_scale(gpu_check.Run(1, "Traceback\nMemoryError: x\n", 5.0), [], 30)
    assert (crashed.status, crashed.reason) == ("failed", "MemoryError: x")
    assert [gpu_check.exit_code([p]) for p in (part, failed, flat, for_time, killed, crashed)] == [0, 1, 1, 0, 0, 1]
    for mode, limits in (("quick", gpu_check.LIMITS), ("full", gpu_check.FULL_LIMITS)):
        assert gsc.SCALE_RESERVE[mode] < limits["scale"] and gpu_check.MIN_STEP <= limits["scale"]
    fractions = {mode: args[args.index("--fractions") + 1] for mode, args in gsc.SCALE_ARGS.items()}
    assert fractions == {"quick": "0.01", "full": "0.1"}, "one fraction a mode: the largest the step's limit holds (docs/gpu.md)"


def test_the_scale_row_is_in_summary_json_and_md(tmp_path):
    summary = _made_up_summary(tmp_path)
    summary["figures"]["scale"] = gpu_check.scale_figures([_scale_row(extra_key="not kept")])
    json_path, md_path = gpu_check.write_summary(tmp_path, summary, {})
    data = json.loads(json_path.read_text())
    (figures,) = data["figures"]["scale"]
    assert figures["device"] == "NVIDIA H200 (cuda:0)" and figures["pin_s"] == 0.21 and figures["loss_falls"] is True and "extra_key" not in figures
    md = md_path.read_text(encoding="utf-8")
    assert "## papers100M at scale: generated to this machine's disk, sampled and gathered on NVIDIA H200 (cuda:0)" in md
    assert "| 1 % | 1,110,600 | 32.7 M | 0.29 | 4.5 | 0.21 | 3.0 (2.8–3.3) | 250.0 (240.0–270.0) | 4.4 | 5.10 | 12.0 | 9.10 -> 2.50 | 2.50 | 1.50 | ok |" in md
    assert gpu_check.transfer_problems(tmp_path) == [] and not any("scale" in f for f in gpu_check.RESULT_FILES)
    time_row = gpu_check.render_markdown({**summary, "figures": {**summary["figures"], "scale": gpu_check.scale_figures([_scale_row("skipped: time limit")])}})
    assert "| 1 % | – | – | 0.29 | 4.5 | – | – | – | – |" in time_row and "| skipped: time limit |" in time_row
    assert "## papers100M at scale" not in gpu_check.render_markdown({**summary, "figures": {**summary["figures"], "scale": []}})


def test_a_scale_step_killed_at_its_limit_is_partial(tmp_path, monkeypatch):
    import gpu_check_scale as gsc

    monkeypatch.setitem(gsc.SCALE_ARGS, "quick", TINY_SCALE)
    killed, _ = gsc.scale_part(gpu_check.child_env(None), 0.5, tmp_path, "quick", cuda=False)
    assert (killed.status, killed.reason) == ("partial", "time limit (0 s) reached")
    assert "--emulate-gpu-sampler" in killed.details["command"] and not (tmp_path / "scale-data").exists()


#: The step's arguments for the tests: a graph of 11,106 nodes (about 3 MB on disk), 2 batches of 32 seeds.
TINY_SCALE = ["--fractions", "0.0001", "--batches", "2", "--batch-size", "32", "--steps", "10", "--hidden", "16", "--host-buffer", str(4 << 20)]


@pytest.mark.slow
def test_the_scale_step_runs_bench_scale_on_the_cpu_into_the_summary(tmp_path, monkeypatch):
    """The real step without CUDA, through main(): scale.py's GPU route with the reference backend standing in,
    the graph generated into the work folder and removed, its row in summary.json and summary.md (12 s here:
    scale.py and its two child processes each import torch)."""
    import gpu_check_scale as gsc

    monkeypatch.setenv("DGL_ZEROCOPY_GPU_CHECK_ON_CPU", "1")
    monkeypatch.delenv("CUPY_CACHE_DIR", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setitem(gsc.SCALE_ARGS, "quick", TINY_SCALE)
    monkeypatch.setattr(gpu_check, "LIMITS", {**gpu_check.LIMITS, "scale": 250})
    code = gpu_check.main(["--out", str(tmp_path / "out"), "--wheels", str(tmp_path / "none"), "--parts", "scale", "--time-limit", "280"])
    data = json.loads((tmp_path / "out" / "summary.json").read_text())
    (part,) = [p for p in data["parts"] if p["name"] == "scale"]
    assert code == 0 and part["status"] == "ok", part
    assert part["details"]["command"].startswith("python3 bench/training/scale.py --fractions 0.0001") and "--emulate-gpu-sampler" in part["details"]["command"]
    (row,) = data["figures"]["scale"]
    assert row["status"] == "ok" and row["nodes"] == 11_106 and row["device"].startswith("cpu (the reference backend") and row["loss_falls"]
    assert row["sampled_edges_per_batch"] > 0 and row["pin_s"] >= 0 and row["gpu_peak_gb"] is None
    assert "## papers100M at scale" in (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_a_scale_run_past_its_soft_limit_is_skipped_for_time(tmp_path, monkeypatch):
    """A soft limit of 1 s: the graph is generated (its stage starts at once), the run stage is not started."""
    import gpu_check_scale as gsc

    monkeypatch.setitem(gsc.SCALE_ARGS, "quick", TINY_SCALE)
    monkeypatch.setitem(gsc.SCALE_RESERVE, "quick", 299.5)
    part, log = gsc.scale_part(gpu_check.child_env(None), 300, tmp_path, "quick", cuda=False)
    assert part.status == "partial" and part.reason.startswith("0.01 % of papers100M generated in ") and part.reason.endswith("the run skipped: time limit")
    (row,) = gpu_check.result_rows(tmp_path, "scale")
    assert row["status"] == "skipped: time limit" and row["disk_gb"] > 0 and "sample_ms_median" not in row
    assert not (tmp_path / "scale-data").exists()
