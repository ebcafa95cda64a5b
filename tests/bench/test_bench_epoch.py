"""bench/training/epoch.py on a tiny graph, written to a temporary path (never bench/results/)."""

import pytest
from conftest import CUDA
from script_runs import run_bench, run_cli


@pytest.mark.slow  # a benchmark smoke run; the routes yield the same batches in test_train
def test_epoch_bench_reports_every_route_with_median_and_spread(tmp_path):
    pytest.importorskip("dgl")  # the bench samples with DGL (in a subprocess with the same environment)
    stem = tmp_path / "epoch_tiny"
    args = ["--num-nodes", "1500", "--epochs", "3", "--batch-size", "128", "--hidden", "16", "--fanouts", "4,4"]
    r, result = run_bench("epoch", *args, out=stem)
    rows = result["rows"]
    routes = {(row["source"], row["prefetch"]) for row in rows}
    assert {("dgl", 0), ("dgl-storage", 0), ("cpu", 0), ("cpu", 2)} <= routes, routes
    for row in rows:
        assert 0 < row["epoch_min"] <= row["epoch_time"] <= row["epoch_max"], row
        assert 0 <= row["wait_share"] <= 1 and 0 <= row["test_acc"] <= 1, row
        assert row["compute"] > 0, row
    assert stem.with_suffix(".png").stat().st_size > 0 and stem.with_suffix(".csv").stat().st_size > 0
    assert "| dgl-storage | 0 |" in r.stdout


def test_epoch_bench_sources_are_checked(tmp_path):
    r = run_cli("bench", "epoch", "--sources", "cpu,magic", "--out", tmp_path / "e")
    assert r.returncode == 2 and "unknown source 'magic'" in r.stderr, r.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
@pytest.mark.skipif(CUDA, reason="the refusal is for a machine without CUDA")
def test_gpu_sampling_without_cuda_is_refused_in_one_line(tmp_path):
    r = run_cli("bench", "epoch", "--samplers", "cpu,gpu", "--out", tmp_path / "e")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == ["epoch.py: --samplers gpu samples on a CUDA GPU, but torch.cuda.is_available() is False; use --samplers cpu"], (
        r.stderr
    )
    assert not list(tmp_path.iterdir())
    bad = run_cli("bench", "epoch", "--samplers", "tpu", "--out", tmp_path / "e")
    assert bad.returncode == 2 and "unknown sampler 'tpu'" in bad.stderr, bad.stderr


@pytest.mark.slow  # two short trainings; the GPU sampler's CPU stand-in (the hidden test-only flag)
def test_the_sampler_dimension_measures_both_samplers_beside_dgls_path(tmp_path):
    pytest.importorskip("dgl")
    stem = tmp_path / "e"
    args = ["--num-nodes", "1500", "--epochs", "3", "--batch-size", "128", "--hidden", "16", "--fanouts", "4,4", "--prefetch", "2"]
    r, result = run_bench("epoch", *args, "--sources", "dgl,cpu", "--samplers", "cpu,gpu", "--emulate-gpu-sampler", out=stem)
    rows = result["rows"]
    # DGL's loader samples on the CPU only; each FeatureStore route with both samplers, same prefetches
    assert [(row["source"], row["sampler"], row["prefetch"]) for row in rows] == [
        ("dgl", "cpu", 0),
        ("cpu", "cpu", 0),
        ("cpu", "cpu", 2),
        ("cpu", "gpu", 0),
        ("cpu", "gpu", 2),
    ]
    for row in rows:
        assert row["status"] == "ok" and 0 < row["epoch_min"] <= row["epoch_time"] <= row["epoch_max"], row
    assert "| cpu | 2 | gpu |" in r.stdout and "samplers cpu,gpu" in r.stdout
