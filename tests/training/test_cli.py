"""The console script, run as a user would: a subprocess, exit codes, one-line errors."""

import pytest
import torch
from script_runs import run_cli, run_python

TINY = ["--num-nodes", "1500", "--fanouts", "4,4", "--batch-size", "128", "--hidden", "16", "--epochs", "1", "--no-progress"]


# "dgl" in the slow tier: the same run through another source; test_train checks the sources give the same batches.
@pytest.mark.parametrize("source", ["cpu", pytest.param("dgl", marks=pytest.mark.slow)])
def test_train_one_short_epoch(source):
    pytest.importorskip("dgl")  # training samples with DGL
    r = run_cli("train", *TINY, "--feature-source", source, "--device", "cpu")
    assert r.returncode == 0, r.stderr
    assert "epoch   0 | loss" in r.stdout
    for stage in ("sample", "gather", "transfer", "compute", "wait", "epoch_time"):
        assert stage in r.stdout
    assert "final test accuracy" in r.stdout


@pytest.mark.slow
def test_config_file_and_flags_override(tmp_path):
    pytest.importorskip("dgl")  # training samples with DGL
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model: gcn\nfanouts: [3, 3]\nbatch_size: 64\nhidden: 8\nepochs: 2\n")
    r = run_cli("train", "--config", str(cfg), "--num-nodes", "1000", "--epochs", "1", "--no-progress", "--device", "cpu")
    assert r.returncode == 0, r.stderr
    assert "model gcn, fanouts [3, 3], batch 64" in r.stdout
    assert "epoch   1" not in r.stdout, "--epochs 1 should override the file's 2"


@pytest.mark.slow
def test_all_neighbour_fanouts_can_be_written_with_a_minus():
    """``--fanouts -1,-1`` (full neighbourhoods) must not be taken for an unknown option."""
    pytest.importorskip("dgl")  # training samples with DGL
    r = run_cli(
        "train", "--num-nodes", "1000", "--fanouts", "-1,-1", "--batch-size", "256", "--hidden", "8", "--epochs", "1", "--no-progress", "--device", "cpu"
    )
    assert r.returncode == 0, r.stderr
    assert "fanouts [-1, -1]" in r.stdout


def _info_lines(code_before: str = "") -> dict[str, str]:
    code = f"{code_before}\nimport sys\nfrom dgl_zerocopy.cli import main\nsys.exit(main(['info']))\n"
    r = run_python("-c", code)
    assert r.returncode == 0, r.stderr
    return dict(tuple(part.strip() for part in line.split(" : ", 1)) for line in r.stdout.splitlines() if " : " in line)


@pytest.mark.slow
def test_info():
    r = run_cli("info")
    assert r.returncode == 0, r.stderr
    for key in ("python", "torch", "dgl", "torch_geometric", "cupy", "numpy", "CUDA", "NVRTC", "GPU", "RLIMIT_MEMLOCK", "CPU count"):
        assert key in r.stdout, key


@pytest.mark.slow
def test_info_says_how_dgl_runs():
    """Native graphbolt where DGL ships the library for this torch, else the placeholder."""
    dgl = pytest.importorskip("dgl")
    hook = pytest.importorskip("_dgl_zerocopy_graphbolt")
    line = _info_lines()["dgl"]
    if hook.needs_placeholder():
        torch_version = torch.__version__.split("+")[0]
        assert line == f"{dgl.__version__} (graphbolt: placeholder, DGL ships no library for torch {torch_version})"
    else:
        assert line == f"{dgl.__version__} (graphbolt: native)"


@pytest.mark.slow
def test_info_names_the_nvrtc_and_the_lookup_that_found_it():
    from dgl_zerocopy.cuda import nvrtc

    line = _info_lines()["NVRTC"]
    try:
        found = nvrtc.find_nvrtc()
    except FileNotFoundError:
        assert line.startswith("not available (NVRTC (libnvrtc.so.12 or .13) was not found"), line
        return
    major, minor = nvrtc.nvrtc_version()
    assert line == f"{major}.{minor} at {found.path} (found by: {found.source})"


@pytest.mark.slow
def test_info_shows_cupy_with_its_cuda():
    """The wheel's name tells the CUDA major CuPy is built for; the runtime is the one it loaded."""
    import importlib.metadata

    cupy = pytest.importorskip("cupy")
    wheels = sorted({d.metadata["Name"] for d in importlib.metadata.distributions() if (d.metadata["Name"] or "").startswith("cupy-cuda")})
    assert wheels, "CuPy imports, so one of its wheels is installed"
    runtime = cupy.cuda.get_local_runtime_version()
    assert _info_lines()["cupy"] == f"{cupy.__version__} ({', '.join(wheels)}, CUDA runtime {runtime // 1000}.{runtime % 1000 // 10})"


@pytest.mark.slow
def test_info_without_cupy_says_what_to_install():
    lines = _info_lines("import sys; sys.modules['cupy'] = None")
    assert lines["cupy"] == "not installed (pip install dgl-zerocopy[cuda12] or dgl-zerocopy[cuda13], matching torch's CUDA)"
    assert lines["NVRTC"]  # the NVRTC lookup does not need CuPy


@pytest.mark.slow
def test_info_without_the_frameworks_says_which_extra_brings_each():
    lines = _info_lines("import sys; sys.modules['dgl'] = None; sys.modules['torch_geometric'] = None")
    assert lines["dgl"] == 'not installed (pip install "dgl-zerocopy[dgl]")'
    assert lines["torch_geometric"] == 'not installed (pip install "dgl-zerocopy[pyg]")'


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


BAD = {
    "unknown dataset": (["--dataset", "nope"], "unknown dataset 'nope'; choose from: synthetic"),
    "unknown model": (["--model", "gat"], "'sage', 'gcn' or 'rgcn'"),
    "malformed fanouts": (["--fanouts", "15,x"], "'x' is not an integer"),
    "zero fanout": (["--fanouts", "15,0"], "positive integers"),
    "batch size zero": (["--batch-size", "0"], "batch_size: Input should be greater than 0, but got 0"),
    "batch size negative": (["--batch-size", "-5"], "greater than 0"),
    "missing config": (["--config", "/no/such.yaml"], "config '/no/such.yaml' is neither a file nor a shipped config"),
    "unknown feature source": (["--feature-source", "magic"], "'dgl', 'dgl-storage', 'cpu', 'zerocopy' or 'gpu'"),
    "negative prefetch": (["--prefetch", "-1"], "prefetch must be >= 0"),
    "zerocopy without a GPU": (["--feature-source", "zerocopy", "--device", "cpu"], "needs a CUDA GPU"),
    "unknown cache policy": (["--cache-policy", "lru"], "'degree', 'in_degree', 'out_degree' or 'presample'"),
    "unknown sampler": (["--sampler", "tpu"], "sampler: Input should be 'cpu', 'gpu' or 'snapshot'"),
    "snapshot size without the snapshot sampler": (["--snapshot-size", "20"], "add --sampler snapshot, or drop --snapshot-size"),
    "snapshot refresh without the snapshot sampler": (["--sampler", "cpu", "--snapshot-refresh", "0.5"], "add --sampler snapshot, or drop --snapshot-refresh"),
    "snapshot below the largest fanout": (
        ["--sampler", "snapshot", "--fanouts", "10,5", "--snapshot-size", "8"],
        "snapshot_size 8 is below the largest fanout 10",
    ),
    "snapshot refresh above 1": (["--sampler", "snapshot", "--snapshot-refresh", "2"], "snapshot_refresh 2 must be a share in [0, 1]"),
    "snapshot refresh not a number": (["--sampler", "snapshot", "--snapshot-refresh", "often"], "--snapshot-refresh: invalid float value: 'often'"),
    "snapshot of full neighbourhoods": (["--sampler", "snapshot", "--fanouts", "-1,5"], "cannot give all of them (fanout -1"),
    "snapshot of a heterograph": (["--sampler", "snapshot", "--dataset", "hetero-synthetic"], "sampler 'snapshot' samples homogeneous graphs"),
    "snapshot with --dist": (
        ["--sampler", "snapshot", "--dist", "/no/such/partitions"],
        "train --dist samples with DistDGL's sampler on the CPU; drop --sampler snapshot",
    ),
    # --graph-placement only where our loader samples on the GPU, refused before the dataset
    # loads (cora without --data-root would fail on that instead)
    "graph placement without the gpu sampler": (
        ["--graph-placement", "device", "--dataset", "cora"],
        "graph_placement 'device' places the graph for sampling on the GPU, but sampler is 'cpu'; add --sampler gpu, or drop --graph-placement",
    ),
    "graph placement pinned without the gpu sampler": (["--graph-placement", "pinned"], "graph_placement 'pinned' places the graph for sampling on the GPU"),
    "graph placement with DGL's loader of snapshots": (
        ["--graph-placement", "device", "--sampler", "snapshot", "--feature-source", "dgl", "--dataset", "cora"],
        "feature source 'dgl' samples the snapshot on the CPU (DGL's loader)",
    ),
    "graph placement of snapshots on the CPU": (
        ["--graph-placement", "device", "--sampler", "snapshot", "--device", "cpu", "--dataset", "cora"],
        "the snapshot is sampled on the CPU here (device 'cpu')",
    ),
    # a value with a leading '-' reaches the check (argparse took it for an option)
    "negative host buffer": (["--feature-storage", "auto", "--host-buffer", "-5%"], "host_buffer '-5%' is not a buffer size"),
    "negative feature cache": (["--feature-cache", "-5%"], "feature_cache '-5%' is not a cache size"),
}


@pytest.mark.parametrize("args,message", BAD.values(), ids=BAD.keys())
def test_bad_input_is_one_line_and_exit_2_in_process(args, message, capsys):
    """Every case of BAD through ``main``, in this process (milliseconds each); the console script in
    a process of its own is checked on each case in the slow tier, on the bad config files below in both."""
    from dgl_zerocopy.cli import main

    try:
        code = main(["train", *args])
    except SystemExit as exit_:  # argparse's errors
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.slow  # a process each (~2 s); the test above checks every case in the fast tier
@pytest.mark.parametrize("args,message", BAD.values(), ids=BAD.keys())
def test_bad_input_is_one_line_and_exit_2(args, message):
    r = run_cli("train", *args)
    assert r.returncode == 2
    assert message in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.parametrize(
    "text,message",
    [
        ("model: [unclosed\n", "not valid YAML at line"),
        ("- a\n- b\n", "must hold a mapping"),
        ("model: sage\nbogus_key: 1\n", "unknown config key 'bogus_key'; allowed keys: dataset"),
    ],
)
@pytest.mark.slow
def test_bad_config_file_is_one_line_and_exit_2(tmp_path, text, message):
    r = run_cli("train", "--config", _write(tmp_path, "c.yaml", text))
    assert r.returncode == 2
    assert message in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_the_feature_cache_ranks_by_the_degree_sampling_follows_unless_told(capsys):
    """``--feature-cache`` without ``--cache-policy`` chooses ``degree`` (out-degree for DGL's in-edge sampling)."""
    from dgl_zerocopy.cli import _parser
    from dgl_zerocopy.training.config import build_config

    def policy(*flags):
        args = _parser().parse_args(["train", "--feature-cache", "10%", *flags])
        return build_config({}, {k: v for k, v in vars(args).items() if k not in ("command", "config", "no_progress", "dist", "ip_config")}).cache_policy

    assert policy() == "degree"
    assert [policy("--cache-policy", p) for p in ("in_degree", "out_degree", "presample")] == ["in_degree", "out_degree", "presample"]
    with pytest.raises(SystemExit):
        _parser().parse_args(["train", "--help"])
    assert "degree (default" in " ".join(capsys.readouterr().out.split())


@pytest.mark.slow
def test_training_with_a_feature_cache_says_which_policy_it_uses():
    pytest.importorskip("dgl")  # training samples with DGL
    r = run_cli("train", *TINY, "--device", "cpu", "--feature-cache", "10%")
    assert r.returncode == 0, r.stderr
    assert "cache 10% (degree)" in r.stdout and "| cache hits " in r.stdout


def test_every_benchmark_the_command_names_exists_and_the_docs_list_them_all():
    from dgl_zerocopy.cli import BENCH_DIR, BENCHMARKS

    assert all((BENCH_DIR / script).is_file() and script.endswith(f"/{name}.py") for name, script in BENCHMARKS.items())
    line = next(line for line in (BENCH_DIR.parent / "docs" / "usage.md").read_text(encoding="utf-8").splitlines() if line.startswith("dgl-zerocopy bench "))
    assert line.split()[2].split("|") == list(BENCHMARKS)
