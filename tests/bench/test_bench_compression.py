"""The compression benchmarks on small inputs, written to a temporary path (never bench/results/)."""

import pytest
from conftest import SHARED_DATA
from script_runs import run_bench


@pytest.mark.slow
@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason=f"real datasets not present at {SHARED_DATA}")
def test_reconstruction_bench_checks_and_reports_every_form(tmp_path):
    stem = tmp_path / "compression_tiny"
    args = ["--datasets", "cora,hetero", "--num-nodes", "3000", "--data-root", SHARED_DATA]
    _, result = run_bench("compression", *args, out=stem)
    rows = result["rows"]
    forms = {(row["dataset"], row["form"]): row for row in rows}
    assert len(forms) == 12
    # Row-normalised binary features: one scale per row is exact; per column every column survives.
    assert forms["cora", "int8-row-minmax"]["col_error_mean"] < 1e-6
    assert all(row["cols_lost"] == 0 for (d, f), row in forms.items() if "row" not in f)
    assert forms["hetero", "int8-row-minmax"]["cols_lost"] > 0  # a row-wide scale loses small columns
    assert forms["cora", "fp16"]["col_error_mean"] < forms["cora", "bf16"]["col_error_mean"]
    assert stem.with_suffix(".png").stat().st_size > 0


@pytest.mark.slow  # a benchmark smoke run; the compressed gathers equal the reference in test_store_compressed
def test_cpu_gather_bench_checks_compressed_methods_first(tmp_path):
    pytest.importorskip("dgl")
    stem = tmp_path / "cg_tiny"
    args = ["--num-nodes", "3000", "--batches", "1", "--repeats", "1", "--threads", "1", "--feature-compression", "fp16,int8"]
    _, result = run_bench("bench/gathering/cpu_gather.py", *args, out=stem)
    methods = {row["method"]: row for row in result["rows"]}
    assert {"store", "store_fp16", "tiled_fp16", "twostep_fp16", "naive_fp16", "store_int8", "twostep_int8"} <= set(methods)
    assert methods["store"]["ratio_to_store"] == 1.0 and methods["store_int8"]["gbps_median"] > 0
