"""The PCIe request model (dgl_zerocopy.cuda.gather.pcie_model) on emulated traces."""

from __future__ import annotations

import numpy as np
import pytest

from dgl_zerocopy.cuda.gather import gather_plan
from dgl_zerocopy.cuda.gather.emulator import Trace, emulate_gather
from dgl_zerocopy.cuda.gather.pcie_model import CODEC_VARIANTS, LINK_GBPS, TLP_OVERHEAD_BYTES, analyze, compare, compare_cached, compare_codecs, count_distinct


def one_row(row_bytes: int, offset: int, variant: str, dtype: str = "float32"):
    table = np.zeros((1, row_bytes // np.dtype(dtype).itemsize), dtype=dtype)
    _, trace = emulate_gather(table, np.array([0]), variant=variant, base_offset=offset, trace=True)
    return analyze(trace)


def test_512_byte_row_on_a_line_takes_four_requests():
    for variant in ("aligned", "naive"):
        metrics = one_row(512, 0, variant)
        assert metrics.requests == 4, variant
        assert metrics.fetched_bytes == 512
        assert metrics.bytes_per_useful_byte == 1.0
    assert one_row(512, 0, "aligned").instructions == 4  # the default: 8 lanes x 16 B, one line a step
    assert one_row(512, 0, "naive").instructions == 4  # 32 lanes x 4 B, four times


def test_400_byte_row_at_offset_16():
    aligned = one_row(400, 16, "aligned")
    naive = one_row(400, 16, "naive")
    # bytes 16..416 touch lines 0..3: the aligned kernel requests each once
    assert aligned.requests == 4
    assert aligned.fetched_bytes == 416  # sectors 0..12
    # naive warps read [16,144) [144,272) [272,400) [400,416): 2+2+2+1 requests
    assert naive.requests == 7
    assert naive.fetched_bytes == (5 + 5 + 5 + 1) * 32  # sectors 0-4, 4-8, 8-12, 12
    assert aligned.link_efficiency > naive.link_efficiency


def test_misaligned_long_row_is_read_in_whole_lines():
    # 1024 B starting 16 B into a line touches 9 lines: aligned asks for exactly those
    aligned = one_row(1024, 16, "aligned")
    assert aligned.requests == 9
    assert one_row(1024, 16, "naive").requests == 16


def test_short_rows_request_only_the_lines_they_touch():
    assert one_row(16, 0, "aligned").requests == 1
    assert one_row(16, 120, "aligned", dtype="uint8").requests == 2  # straddles a line
    assert one_row(64, 64, "aligned").requests == 1


@pytest.mark.parametrize("dtype", ["float32", "float16", "uint8"])
def test_aligned_never_issues_more_requests_than_naive_from_128_bytes(dtype):
    itemsize = np.dtype(dtype).itemsize
    for row_bytes in (128, 132, 258, 400, 512, 516, 1000, 1500, 4096):
        row_bytes -= row_bytes % itemsize
        for offset in (0, 1, 2, itemsize, 16, 100):
            result = compare(row_bytes, dtype=dtype, num_ids=32, num_rows=128, base_offset=offset)
            aligned, naive = result["aligned"], result["naive"]
            context = f"{dtype} row_bytes={row_bytes} offset={offset}"
            assert aligned.useful_bytes == naive.useful_bytes, context
            assert aligned.requests <= naive.requests, context
            assert aligned.fetched_bytes <= naive.fetched_bytes, context


def test_aligned_fetches_no_more_sectors_than_naive_at_any_width():
    for row_bytes in (4, 8, 12, 20, 36, 64, 100, 124):
        for offset in (0, 4, 16, 60):
            result = compare(row_bytes, num_ids=32, num_rows=128, base_offset=offset)
            assert result["aligned"].fetched_bytes <= result["naive"].fetched_bytes, (row_bytes, offset)


def test_metrics_are_consistent():
    result = compare(400, num_ids=64)
    assert list(result) == ["naive", "aligned"]
    for metrics in result.values():
        assert metrics.useful_bytes == 64 * 400
        assert metrics.requests_per_row == metrics.requests / 64
        assert metrics.link_efficiency == pytest.approx(metrics.useful_bytes / (metrics.fetched_bytes + TLP_OVERHEAD_BYTES * metrics.requests))
        assert metrics.as_dict()["variant"] == metrics.variant


def test_grouping_by_instruction_line_and_sector():
    plan = gather_plan.plan_gather(64, 0, 1, elem_size=4)
    trace = Trace(
        address=np.array([0, 16, 128, 0, 0, 4096], dtype=np.int64),
        nbytes=np.array([16, 16, 16, 16, 16, 16], dtype=np.int32),
        warp=np.array([0, 0, 0, 0, 1, 1], dtype=np.int64),
        slot=np.array([0, 0, 0, 1, 0, 0], dtype=np.int64),
        plan=plan,
        table_address=0,
        num_ids=1,
    )
    metrics = analyze(trace)
    # (w0,s0): lines 0 and 1; (w0,s1): line 0; (w1,s0): lines 0 and 32
    assert metrics.requests == 5
    assert metrics.instructions == 3
    # (w0,s0): sectors 0 and 4; (w0,s1): 0; (w1,s0): 0 and 128
    assert metrics.fetched_bytes == 5 * 32


def test_empty_trace():
    table = np.zeros((3, 4), dtype=np.float32)
    _, trace = emulate_gather(table, np.array([], dtype=np.int64), trace=True)
    metrics = analyze(trace)
    assert (metrics.requests, metrics.fetched_bytes, metrics.link_efficiency) == (0, 0, 0.0)


def test_compare_rejects_bad_widths():
    with pytest.raises(ValueError, match="row_bytes"):
        compare(6, dtype="float32")
    with pytest.raises(ValueError, match="row_bytes"):
        compare(0)


# ------------------------------------------------------------------ compressed rows


def test_int8_and_fp16_rows_of_128_columns_on_lines():
    """128 columns: fp32 512 B = 4 lines, fp16 2 lines, int8 1 line per row (table on a line)."""
    result = compare_codecs(128, num_ids=64, num_rows=4096)
    assert list(result) == list(CODEC_VARIANTS)
    fp32, fp16, bf16, col, row = result.values()
    assert (fp32.requests_per_row, fp32.fetched_bytes_per_row, fp32.link_bytes_per_row) == (4, 512, 512 + 4 * 24)
    assert (fp16.requests_per_row, fp16.fetched_bytes_per_row) == (2, 256) and bf16.link_bytes_per_row == fp16.link_bytes_per_row
    assert (col.requests_per_row, col.fetched_bytes_per_row, col.link_bytes_per_row) == (1, 128, 152)
    assert fp32.fp32_equivalent_gbps == pytest.approx(LINK_GBPS * 512 / 608)
    assert col.fp32_equivalent_gbps == pytest.approx(LINK_GBPS * 512 / 152)
    assert (fp32.vs_fp32, fp16.vs_fp32, col.vs_fp32) == (1.0, pytest.approx(2.0), pytest.approx(4.0))
    assert col.pair_requests_per_row == fp16.pair_requests_per_row == 0


def test_per_row_scales_in_host_memory_cost_one_request_and_one_sector_per_row():
    result = compare_codecs(128, codecs=("int8/column", "int8/row"), num_ids=64, num_rows=1 << 16)
    col, row = result["int8/column"], result["int8/row"]
    # random rows of a large table: their (scale, offset) pairs lie in distinct lines
    assert row.pair_requests_per_row == pytest.approx(1.0)
    assert row.requests_per_row == pytest.approx(col.requests_per_row + 1)
    assert row.link_bytes_per_row == pytest.approx(col.link_bytes_per_row + 32 + TLP_OVERHEAD_BYTES)
    assert np.isnan(row.vs_fp32)  # fp32 not modelled alongside


@pytest.mark.parametrize("columns", [100, 128, 602])
def test_fewer_bytes_over_the_link_at_the_headline_widths(columns):
    result = compare_codecs(columns, num_ids=128, num_rows=2048)
    link = {codec: m.link_bytes_per_row for codec, m in result.items()}
    assert link["int8/column"] < link["int8/row"] < link["fp16"] == link["bf16"] < link["fp32"]
    for m in result.values():
        assert m.link_bytes_per_row == pytest.approx(m.fetched_bytes_per_row + TLP_OVERHEAD_BYTES * m.requests_per_row)
        assert m.fp32_equivalent_gbps == pytest.approx(m.link_gbps * 4 * columns / m.link_bytes_per_row)
        assert m.as_dict()["codec"] == m.codec
    # what the kernels send, at least: the codes themselves
    assert result["int8/column"].fetched_bytes_per_row >= columns and result["fp16"].fetched_bytes_per_row >= 2 * columns
    assert result["int8/column"].vs_fp32 > 2.9  # docs/benchmarks.md: 3.0x (100), 4.0x (128), 3.3x (602)


def test_compare_codecs_checks_its_arguments():
    with pytest.raises(ValueError, match="codecs must be among"):
        compare_codecs(8, codecs=("int4",))
    with pytest.raises(ValueError, match="columns"):
        compare_codecs(0)


def test_bench_script_writes_its_table_and_plot(tmp_path):
    import sys

    from conftest import REPO

    sys.path.insert(0, str(REPO / "bench" / "pcie"))
    import pcie_codecs

    rows = pcie_codecs.run((100, 128), num_ids=32, num_rows=256, base_offset=0, seed=0, link_gbps=LINK_GBPS)
    assert [(r["columns"], r["codec"]) for r in rows] == [(c, codec) for c in (100, 128) for codec in CODEC_VARIANTS]
    table = pcie_codecs.markdown(rows)
    assert "| 128 (ogbn-papers100M) | fp32 | 512 | 16 | 4.00 | 0.00 | 608 | 21.1 | 1.00x |" in table
    assert "| 128 | int8/column | 128 | 16 | 1.00 | 0.00 | 152 | 84.2 | 4.00x |" in table
    assert "int8/column: 100 cols" in pcie_codecs.goal_lines(rows)
    pcie_codecs.plot(rows, tmp_path / "p.png", "test")
    assert (tmp_path / "p.png").stat().st_size > 0


# ------------------------------------------------------------------ hot-row cache: only host reads count


@pytest.mark.parametrize("codec", CODEC_VARIANTS)
def test_cached_gather_costs_the_link_only_its_misses(codec):
    result = compare_cached(128, (0.0, 0.1, 0.5, 1.0), codec=codec, num_ids=200, num_rows=2048)
    assert list(result) == [0.0, 0.1, 0.5, 1.0]
    none, _, half, every = result.values()
    # all misses: exactly the uncached kernel; all hits: nothing over the link
    assert (none.requests, none.fetched_bytes, none.link_bytes) == (none.uncached_requests, none.uncached_fetched_bytes, none.uncached_link_bytes)
    assert none.link_bytes_saved == 0.0 and none.hits == 0
    assert (every.requests, every.fetched_bytes, every.link_bytes, every.miss_bytes) == (0, 0, 0, 0)
    assert every.link_bytes_saved == 1.0 and every.hits == 200
    for h, m in result.items():
        assert m.hits == round(h * 200) and m.hit_rate == m.hits / 200
        assert m.miss_bytes == (200 - m.hits) * m.columns * {"fp32": 4, "fp16": 2, "bf16": 2}.get(codec, 1)
        assert m.link_bytes == m.fetched_bytes + TLP_OVERHEAD_BYTES * m.requests
        assert m.fetched_bytes >= m.miss_bytes and m.requests <= m.uncached_requests
        assert m.as_dict()["codec"] == codec
    # 128 columns, distinct ids, table on a line: every missed row costs its whole lines, no more
    lines = {"fp32": 4, "fp16": 2, "bf16": 2}.get(codec, 1)
    if codec == "int8/row":  # plus its (scale, offset) pair: one sector, unless two rows' pairs share one
        assert half.miss_bytes < half.fetched_bytes <= half.miss_bytes + 32 * 100
        assert lines * 100 < half.requests <= (lines + 1) * 100
    else:
        assert (half.requests, half.fetched_bytes) == (lines * 100, half.miss_bytes)
    assert half.link_bytes_saved == pytest.approx(0.5, abs=0.02)


def test_fp32_rows_of_a_line_cost_one_request_per_miss():
    for h, m in compare_cached(32, (0.0, 0.3, 0.9), num_ids=100, num_rows=512).items():
        assert m.requests == 100 - m.hits and m.fetched_bytes == 128 * (100 - m.hits), h


def test_compare_cached_checks_its_arguments():
    with pytest.raises(ValueError, match="codec must be one of"):
        compare_cached(8, codec="int4")
    with pytest.raises(ValueError, match="hit rates"):
        compare_cached(8, (0.5, 1.5))
    with pytest.raises(ValueError, match="cached_rows"):
        compare_cached(8, num_rows=10, cached_rows=11)
    with pytest.raises(ValueError, match="needs uncached rows"):
        compare_cached(8, (0.5,), num_rows=10, cached_rows=10)
    with pytest.raises(ValueError, match="needs cached rows"):
        compare_cached(8, (0.5,), num_rows=10, cached_rows=0)


def test_cache_bench_script_writes_its_table(tmp_path):
    import sys

    from conftest import REPO

    sys.path.insert(0, str(REPO / "bench" / "pcie"))
    import pcie_cache

    rows = pcie_cache.run((128,), (0.0, 0.5, 1.0), num_ids=64, num_rows=512, seed=0)
    assert [(r["codec"], r["target_hit_rate"]) for r in rows] == [(c, h) for c in CODEC_VARIANTS for h in (0.0, 0.5, 1.0)]
    table = pcie_cache.markdown(rows, (0.0, 0.5, 1.0))
    assert "| 128 (ogbn-papers100M) | fp32 | 608 (100%) | 304 (50%) | 0 (0%) |" in table
    assert "| 128 | int8/column | 152 (25%) | 76 (12%) | 0 (0%) |" in table
    assert pcie_cache.main(["--num-ids", "16", "--num-rows", "128", "--out", str(tmp_path / "c")]) == 0
    assert all((tmp_path / f"c.{ext}").stat().st_size > 0 for ext in ("csv", "json", "png"))


@pytest.mark.parametrize("columns", [1, 2, 4])
def test_count_distinct_counts_distinct_rows_of_the_columns(columns):
    """The one counter of both PCIe models (gather and sampling): equal to NumPy's unique rows."""
    rng = np.random.default_rng(columns)
    for size in (1, 2, 50, 1000):
        values = rng.integers(0, 4, size=(columns, size), dtype=np.int64)
        assert count_distinct(*values) == len(np.unique(values.T, axis=0))
    assert count_distinct(*np.zeros((columns, 0), dtype=np.int64)) == 0
    assert count_distinct(np.array([3, 3, 1]), np.array([7, 8, 7])) == 3  # (3, 7), (3, 8), (1, 7): distinct as pairs
