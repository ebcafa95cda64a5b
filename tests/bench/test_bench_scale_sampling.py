"""bench/training/scale_sampling.py on a tiny generated graph, written to a temporary folder (never
bench/results/): every variant's row, its faults and its plot; the refusal of too few seeds."""

import json
import os
import sys

import pytest
from conftest import REPO
from script_runs import run_cli

from dgl_zerocopy.data import papers_disk as pd
from dgl_zerocopy.data.synthetic import SyntheticSpec

sys.path.insert(0, str(REPO / "bench" / "training"))
import scale_sampling  # noqa: E402

AB = ["A/B: kernels now", "A/B: kernels before (fewer reads in flight)"]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("scale_data")
    pd.generate_to_disk(folder / "papers-0.0002", SyntheticSpec.papers100m_like(num_nodes=22_212), block_nodes=4_096, progress=False)
    return folder


def _run(data_dir, out, *extra):
    args = ["--fractions", "0.0002", "--data-dir", str(data_dir), "--batches", "2", "--batch-size", "16", "--out-dir", str(out), *extra]
    return run_cli("bench", "scale_sampling", *args, timeout=300)


@pytest.mark.slow
def test_every_variant_is_measured_and_written(data_dir, tmp_path):
    r = _run(data_dir, tmp_path / "out", "--batch-size", "12", "--csc-huge", "--idle", "0.1", "--stem", "probe")  # 192 seeds of 221
    assert r.returncode == 0, r.stderr
    rows = json.loads((tmp_path / "out" / "probe.json").read_text())["rows"]
    assert [row["variant"] for row in rows] == ["first", "steady", *AB, "steady after 0.1 s idle", "scratch 4 KiB", "CSC huge"]
    for row in rows:
        assert row["nodes"] == 22_212 and row["edges"] > 0 and row["sampled_edges_per_batch"] > 0
        assert 0 < row["ns_per_sampled_edge_q1"] <= row["ns_per_sampled_edge_median"] <= row["ns_per_sampled_edge_q3"]
        assert row["minor_faults_per_batch"] >= 0 and row["major_faults_per_batch"] >= 0
        assert row["seeds_reused"] is False and row["csc_gb"] > 0 and row["scratch_gb"] == pytest.approx(22_212 * 4 / 1e9)
    steady = rows[1]
    from dgl_zerocopy.sampling import hop_kernels

    if hop_kernels.available:  # the compiled passes timed apart (none runs on the NumPy path)
        kernels = [steady[f"{name}_ns_per_sampled_edge"] for name in ("count", "pick", "number")]
        assert all(k > 0 for k in kernels) and sum(kernels) < steady["ns_per_sampled_edge_q3"] * 2  # a part of the batch's time
    assert all("pick_ns_per_sampled_edge" not in row for row in rows if row is not steady)
    for suffix in (".csv", ".json", ".png"):
        assert (tmp_path / "out" / f"probe{suffix}").stat().st_size > 0
        assert not (REPO / "bench" / "results" / f"probe{suffix}").exists()


@pytest.mark.slow
def test_seeds_are_drawn_again_where_the_passes_need_more_than_the_graph_has(data_dir, tmp_path):
    r = _run(data_dir, tmp_path / "out", "--batch-size", "100", "--batches", "3")  # 2,400 seeds of 221
    assert r.returncode == 0, r.stderr
    rows = json.loads((tmp_path / "out" / "scale_sampling.json").read_text())["rows"]
    assert [row["variant"] for row in rows] == ["first", "steady", *AB, "scratch 4 KiB"] and all(row["seeds_reused"] for row in rows)


@pytest.mark.slow
def test_a_batch_larger_than_the_training_seeds_is_refused_with_the_fix(data_dir, tmp_path):
    r = _run(data_dir, tmp_path / "out", "--batch-size", "100000")
    assert r.returncode != 0 and "pass a smaller one" in r.stderr
    assert not (tmp_path / "out").exists()


def test_numpy_huge_page_advice_is_switched_and_restored():
    previous = scale_sampling._numpy_huge_page_advice(False)
    try:
        assert scale_sampling._numpy_huge_page_advice(True) is False
        assert scale_sampling._numpy_huge_page_advice(True) is True
    finally:
        scale_sampling._numpy_huge_page_advice(previous)


def test_last_level_cache_is_read_on_linux():
    size = scale_sampling.last_level_cache_bytes()
    if sys.platform.startswith("linux") and os.path.isdir("/sys/devices/system/cpu/cpu0/cache"):
        assert size and size >= 1 << 16


@pytest.mark.parametrize("values", [[1.0, 100.0], [3.0, 1.0, 2.0], [5.0] * 4, [0.5, 9.0, 1.0, 7.0, 2.0]])
def test_summarize_keeps_the_quartiles_within_the_values(values):
    from common import summarize

    s = summarize(values)
    assert s["min"] <= s["q1"] <= s["median"] <= s["q3"] <= s["max"]
    assert s["min"] == min(values) and s["max"] == max(values)


def test_the_ab_alternates_the_picks_layouts_and_restores_the_default():
    import numpy as np

    from dgl_zerocopy.sampling import hop_kernels

    class Recorder:
        def __init__(self, fail_at=None):
            self.seen, self.fail_at = [], fail_at

        def sample(self, seeds, fanouts, rng):
            if len(self.seen) == self.fail_at:
                raise RuntimeError("boom")
            self.seen.append(hop_kernels.MORE_READS_IN_FLIGHT)
            return type("Out", (), {"pos": {"_E": np.arange(10)}})()

    default, batches = hop_kernels.MORE_READS_IN_FLIGHT, [np.arange(4)] * 8
    sampler = Recorder()
    apart, among = scale_sampling._pass_reads(sampler, batches, [2], 0)
    assert sampler.seen == [True, False, False, True, True, False, False, True]
    assert apart["sampled_edges_per_batch"] == among["sampled_edges_per_batch"] == 10
    assert hop_kernels.MORE_READS_IN_FLIGHT is default
    with pytest.raises(RuntimeError, match="boom"):
        scale_sampling._pass_reads(Recorder(fail_at=1), batches, [2], 0)
    assert hop_kernels.MORE_READS_IN_FLIGHT is default


def test_the_kernel_clock_times_each_kernel_and_restores_them():
    from dgl_zerocopy.sampling import hop_kernels

    saved = {name: getattr(hop_kernels, name) for name in scale_sampling._KernelClock.NAMES}
    with scale_sampling._KernelClock() as clock:
        assert all(getattr(hop_kernels, name) is not kernel for name, kernel in saved.items())
        with pytest.raises(TypeError):
            hop_kernels.count()  # a failing call is timed and raised
    assert all(getattr(hop_kernels, name) is kernel for name, kernel in saved.items())
    assert clock.seconds["count"] > 0 and clock.seconds["pick"] == clock.seconds["number"] == 0
    assert set(clock.ns_per_edge(10)) == {"count_ns_per_sampled_edge", "pick_ns_per_sampled_edge", "number_ns_per_sampled_edge"}
    with scale_sampling._KernelClock() as idle:
        pass
    assert idle.ns_per_edge(10) == {}
