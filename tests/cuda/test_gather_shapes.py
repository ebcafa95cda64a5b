"""Kernel shapes of the aligned gather: lanes per row (rows per warp) and threads per block, chosen
in the launch plan, run by the emulator against ``table[ids]`` and counted by the PCIe model.

No new kernel: ``gather_aligned`` takes ``threads_per_row`` as an argument, so every shape runs the
instantiations that tests/cuda/test_kernels_nvrtc.py compiles for both CUDA majors.
"""

from __future__ import annotations

import numpy as np
import pytest

from dgl_zerocopy.cuda.gather import gather_plan
from dgl_zerocopy.cuda.gather.emulator import emulate_gather
from dgl_zerocopy.cuda.gather.pcie_model import analyze

ROW_BYTES = (128, 400, 512, 1024)  # the widths of bench/gathering/link_experiment.py


@pytest.mark.parametrize("row_bytes", ROW_BYTES)
@pytest.mark.parametrize("threads_per_row", [1, 2, 4, 8, 16, 32])
def test_every_shape_gathers_table_ids_at_every_alignment(row_bytes, threads_per_row):
    rng = np.random.default_rng(row_bytes + threads_per_row)
    table = rng.integers(-(2**31), 2**31, (700, row_bytes // 4), dtype=np.int32)
    ids = rng.integers(0, len(table), 333)  # not a multiple of the rows per warp or block
    for base_offset in (0, 4, 16, 100):
        for block in (64, 256):
            out = emulate_gather(table, ids, threads_per_row=threads_per_row, base_offset=base_offset, threads_per_block=block, max_blocks=3)
            np.testing.assert_array_equal(out, table[ids], err_msg=f"threads_per_row={threads_per_row} offset={base_offset} block={block}")


def test_the_plan_takes_the_lanes_per_row_it_is_given():
    plan = gather_plan.plan_gather(512, 0, 1000, elem_size=4, threads_per_row=8)
    assert (plan.threads_per_row, plan.vector_bytes, plan.window_bytes, plan.align_bytes) == (8, 16, 128, 128)
    assert plan.steps_per_row == 5  # (128 - 16 + 512) / 128, rounded up: the worst row alignment
    default = gather_plan.plan_gather(512, 0, 1000, elem_size=4)
    assert default == plan and gather_plan.plan_gather(512, 0, 1000, elem_size=4, threads_per_row=None) == default  # 8: the small-row default
    one_per_warp = gather_plan.plan_gather(512, 0, 1000, elem_size=4, threads_per_row=32)
    # 4 rows per warp: a block of 256 threads covers 32 rows, so 1000 rows need 32 blocks (not 125)
    assert plan.grid == 32 and one_per_warp.grid == 125


@pytest.mark.parametrize("bad", [0, 3, 64, 12, True, 2.0])
def test_lanes_per_row_must_be_a_power_of_two_up_to_a_warp(bad):
    with pytest.raises(ValueError, match=r"threads_per_row must be"):
        gather_plan.plan_gather(512, 0, 10, elem_size=4, threads_per_row=bad)


def test_lanes_per_row_is_for_the_aligned_kernel_only():
    with pytest.raises(ValueError, match=r"for the aligned variant only, but got 8 \(naive\)"):
        gather_plan.plan_gather(512, 0, 10, elem_size=4, variant="naive", threads_per_row=8)


@pytest.mark.parametrize("row_bytes", [512, 1024])
def test_the_model_counts_one_request_per_line_down_to_eight_lanes_and_twice_below(row_bytes):
    """With 16-byte loads a window of 8 lanes is one 128-byte line, so 1, 2 or 4 rows per warp
    request each line of a row once, as the default does; 4 lanes split each line in two requests.
    The shapes the experiment compares therefore differ in rows and loads in flight, not in requests."""
    rng = np.random.default_rng(row_bytes)
    table = rng.integers(0, 100, (2048, row_bytes // 4), dtype=np.int32)
    ids = rng.permutation(len(table))[:256]  # distinct rows: a warp never meets a line twice
    lines = row_bytes // 128
    per_row = {}
    for threads_per_row in (32, 16, 8, 4):
        out, trace = emulate_gather(table, ids, threads_per_row=threads_per_row, trace=True)
        np.testing.assert_array_equal(out, table[ids])
        per_row[threads_per_row] = analyze(trace).requests_per_row
    assert per_row == {32: lines, 16: lines, 8: lines, 4: 2 * lines}
