"""Launch plans of the gather kernels (dgl_zerocopy.cuda.gather.gather_plan): pure Python, no CUDA."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from dgl_zerocopy.cuda.gather.gather_plan import LINE_BYTES, GatherPlan, kernel_arguments, plan_decode, plan_gather
from dgl_zerocopy.cuda.gather.instantiations import CODE_FORMATS, OUT_FORMATS, all_name_expressions, decode_name_expression, name_expression


def aligned(row_bytes: int, address: int = 0, num_ids: int = 1000, **kw) -> GatherPlan:
    return plan_gather(row_bytes, address, num_ids, elem_size=kw.pop("elem_size", 1), **kw)


@pytest.mark.parametrize(
    ("row_bytes", "address", "vector"),
    [
        (400, 0, 16),  # ogbn-products: 100 fp32
        (512, 0, 16),  # ogbn-papers100M: 128 fp32
        (400, 8, 8),  # base only 8-byte aligned
        (400, 4, 4),
        (400, 2, 2),
        (400, 1, 1),
        (12, 0, 4),  # 3 fp32: the stride allows only 4-byte vectors
        (24, 0, 8),
        (258, 0, 2),
        (129, 0, 1),
        (4099, 0, 1),
    ],
)
def test_widest_vector_allowed_by_stride_and_base(row_bytes, address, vector):
    assert aligned(row_bytes, address).vector_bytes == vector


def test_output_alignment_and_strides_limit_the_vector():
    assert aligned(400, out_address=4).vector_bytes == 4
    assert aligned(400, row_stride=404).vector_bytes == 4
    assert aligned(400, out_stride=408).vector_bytes == 8


def test_short_rows_use_a_sub_warp_from_the_row_start():
    plan = aligned(16)
    assert (plan.vector_bytes, plan.threads_per_row, plan.steps_per_row) == (16, 1, 1)
    plan = aligned(48)  # 3 vectors -> 4 lanes
    assert (plan.threads_per_row, plan.window_bytes, plan.align_bytes) == (4, 64, 16)
    assert aligned(128).threads_per_row == 8  # one line: one window of 8 lanes
    # rows of 129-512 B: a window of one line (4 rows per warp), not one window per row
    assert [aligned(w).threads_per_row for w in (144, 256, 400, 512, 528)] == [8, 8, 8, 8, 32]
    assert aligned(200).vector_bytes == 8 and aligned(200).threads_per_row == 16  # 8-byte vectors: 16 lanes make a line


def test_long_rows_use_line_aligned_windows():
    plan = aligned(4096)
    assert (plan.threads_per_row, plan.window_bytes, plan.align_bytes) == (32, 512, LINE_BYTES)
    # worst case: the row starts 112 bytes into a line -> (112 + 4096) / 512 -> 9 steps
    assert plan.steps_per_row == 9
    plan = aligned(4099)  # 1-byte vectors: 32-byte windows aligned to themselves
    assert (plan.window_bytes, plan.align_bytes, plan.steps_per_row) == (32, 32, 130)


def test_row_that_fits_one_window_is_not_shifted():
    plan = aligned(400, threads_per_row=32)
    assert (plan.window_bytes, plan.align_bytes, plan.steps_per_row) == (512, 16, 1)
    plan = aligned(400)  # the default line windows: shifted to the line, (112 + 400) / 128 steps
    assert (plan.window_bytes, plan.align_bytes, plan.steps_per_row) == (128, 128, 4)


@pytest.mark.parametrize("row_bytes", [1, 2, 3, 7, 12, 48, 100, 127, 128, 129, 400, 512, 528, 4096, 4099])
@pytest.mark.parametrize("address", [0, 1, 2, 4, 8, 16])
def test_windows_cover_the_row_at_every_alignment(row_bytes, address):
    """The kernel's steps reach the row end wherever in an aligned block the row starts."""
    plan = aligned(row_bytes, address)
    vec, window, align = plan.vector_bytes, plan.window_bytes, plan.align_bytes
    assert align % vec == 0 and (align & (align - 1)) == 0 and align <= LINE_BYTES
    for src in range(address, address + 2 * LINE_BYTES, vec):
        start = src - src % align
        assert start + plan.steps_per_row * window >= src + row_bytes
    if row_bytes > window:  # multi-step rows: no window straddles a 128-byte line
        assert LINE_BYTES % window == 0 or window % LINE_BYTES == 0


def test_naive_loads_one_element_unless_misaligned():
    plan = plan_gather(400, 0, 10, variant="naive", elem_size=4)
    assert (plan.vector_bytes, plan.threads_per_row, plan.align_bytes) == (4, 100, 4)
    assert plan.kernel == "gather_naive<unsigned int, long long>"
    assert plan_gather(400, 2, 10, variant="naive", elem_size=4).vector_bytes == 2
    assert plan_gather(16, 0, 10, variant="naive", elem_size=8).vector_bytes == 8
    assert plan_gather(6, 0, 10, variant="naive", elem_size=6).vector_bytes == 2


def test_grid_covers_the_work_up_to_one_wave():
    assert aligned(400, num_ids=1).grid == 1
    assert aligned(400, num_ids=33).grid == 2  # 8 warps of 256 threads, 4 rows each
    assert aligned(528, num_ids=9).grid == 2  # past 512 B: one row per warp
    assert aligned(16, num_ids=256).grid == 1  # one lane per row: 256 rows per block
    assert aligned(400, num_ids=10**7, num_sms=132).grid == 132 * 8
    assert aligned(400, num_ids=10**7, num_sms=10, threads_per_block=1024).grid == 20
    naive = plan_gather(400, 0, 1000, variant="naive", elem_size=4)
    assert naive.grid == -(-1000 * 100 // 256)


def test_max_blocks_caps_the_grid():
    plan = aligned(400, num_ids=10**6, max_blocks=7)
    assert plan.grid == 7 and plan.threads == 7 * 256
    assert aligned(400, num_ids=3, max_blocks=7).grid == 1


def test_nothing_to_launch():
    assert aligned(400, num_ids=0).grid == 0
    assert aligned(0, num_ids=10).grid == 0
    assert plan_gather(0, 0, 10, variant="naive", elem_size=4).grid == 0


def test_id_width_selects_the_instantiation():
    assert aligned(400, id_bytes=4).kernel == "gather_aligned<uint4, int>"
    assert aligned(400, id_bytes=8).kernel == "gather_aligned<uint4, long long>"


def test_every_plan_uses_a_compiled_instantiation():
    names = set(all_name_expressions())
    # raw: 2 variants x 5 widths x 2 id types; decode (id width an argument): fp16 and bf16
    # codes: 4 widths x 2 outputs; int8: 5 widths x 3 outputs
    assert len(names) == len(all_name_expressions()) == 20 + 2 * 4 * 2 + 5 * 3
    for variant, row_bytes, address, id_bytes in itertools.product(("aligned", "naive"), (1, 2, 4, 8, 16, 400), (0, 1, 2, 4, 8), (4, 8)):
        plan = plan_gather(row_bytes, address, 5, variant=variant, elem_size=1, id_bytes=id_bytes)
        assert plan.kernel in names
    for code, out, columns, address, id_bytes in itertools.product(CODE_FORMATS, OUT_FORMATS, (1, 3, 100, 128, 602), (0, 2, 4, 8, 16), (4, 8)):
        plan = plan_decode(columns, address, 5, code=code, out_format=out, id_bytes=id_bytes, affine="row" if code == "int8" else None)
        assert plan.kernel in names, plan.kernel


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"variant": "fast"}, "variant"),
        ({"threads_per_block": 100}, "threads_per_block"),
        ({"threads_per_block": 2048}, "threads_per_block"),
        ({"id_bytes": 2}, "id_bytes"),
        ({"max_blocks": 0}, "max_blocks"),
        ({"elem_size": 3}, "multiple of elem_size"),
        ({"row_stride": 399}, "row_stride"),
        ({"num_sms": 0}, "num_sms"),
    ],
)
def test_bad_arguments_raise_value_error(kwargs, match):
    args = {"elem_size": 4, **kwargs}
    with pytest.raises(ValueError, match=match):
        plan_gather(400, 0, 10, **args)


def test_negative_sizes_raise_value_error():
    with pytest.raises(ValueError, match="num_ids"):
        plan_gather(400, 0, -1, elem_size=4)
    with pytest.raises(ValueError, match="name_expression|load_bytes"):
        name_expression("aligned", 3, 8)


# The kinds of an aligned kernel's arguments (kernels/gather.cu): table, row stride and bytes, ids, permutation,
# id count, output and its stride; the optional cache (slot map, slot bytes, cache rows, their stride; null: none);
# a decoding kernel's own; last, how the rows are split (threads per row, alignment, steps per row).
ROWS_IDS_OUT = ["ptr", "i64", "i64", "ptr", "ptr", "i64", "ptr", "i64"]
OPTIONAL_CACHE = ["ptr", "i32", "ptr", "i64"]
DECODING = ["ptr", "i32", "ptr", "i32", "i32"]  # a decoding kernel's: affine pairs, per row or not, cached pairs, store and id bytes
SPLIT_ROWS = ["i32", "i64", "i64"]


def test_kernel_arguments_follow_the_kernel_signatures():
    common = dict(table_address=1024, row_stride=400, ids_address=2048, perm_address=0, out_address=4096, out_stride=400)
    plan = aligned(400, num_ids=5, elem_size=4)
    args = kernel_arguments(plan, **common)
    assert [kind for kind, _ in args] == [*ROWS_IDS_OUT, *OPTIONAL_CACHE, *SPLIT_ROWS]
    assert [value for _, value in args] == [1024, 400, 400, 2048, 0, 5, 4096, 400, 0, 0, 0, 0, plan.threads_per_row, plan.align_bytes, plan.steps_per_row]
    naive = plan_gather(400, 0, 5, variant="naive", elem_size=4)
    assert len(kernel_arguments(naive, **common)) == 8


def decode(columns: int, address: int = 0, code: str = "int8", out: str = "float32", **kw) -> GatherPlan:
    affine = kw.pop("affine", "column" if code == "int8" else None)
    return plan_decode(columns, address, 1000, code=code, out_format=out, affine=affine, **kw)


@pytest.mark.parametrize(
    ("columns", "code", "address", "vector", "store"),
    [
        (128, "int8", 0, 16, 16),  # 128 B of codes: 8 lanes x 16 B; each lane writes 64 B of fp32
        (100, "int8", 0, 4, 16),  # 100 B: 4-byte loads, 16 B of fp32 per lane
        (602, "int8", 0, 2, 8),  # 602 B: 2-byte loads
        (4099, "int8", 0, 1, 4),
        (3, "int8", 0, 1, 4),
        (128, "int8", 8, 8, 16),  # the base limits the loads, not the stores
        (100, "fp16", 0, 8, 16),  # 200 B of codes
        (602, "bf16", 0, 4, 8),
        (31, "fp16", 0, 2, 4),
        (128, "fp16", 2, 2, 4),
    ],
)
def test_decode_reads_codes_with_the_aligned_scheme(columns, code, address, vector, store):
    plan = decode(columns, address, code)
    code_bytes = CODE_FORMATS[code][1]
    raw = plan_gather(columns * code_bytes, address, 1000, elem_size=code_bytes)
    assert (plan.vector_bytes, plan.store_bytes) == (vector, store)
    assert plan.kernel == decode_name_expression(code, "float32", vector) and plan.decodes
    # the loads are exactly the raw gather's over the code row: same lanes, windows and steps
    assert (plan.vector_bytes, plan.threads_per_row, plan.window_bytes, plan.align_bytes, plan.steps_per_row, plan.grid) == (
        raw.vector_bytes,
        raw.threads_per_row,
        raw.window_bytes,
        raw.align_bytes,
        raw.steps_per_row,
        raw.grid,
    )
    assert (plan.row_bytes, plan.out_row_bytes) == (columns * code_bytes, columns * 4)


def test_decode_store_width_follows_the_output_not_the_loads():
    assert decode(128, out_address=4).store_bytes == 4
    assert decode(128, out_address=4).vector_bytes == 16
    assert decode(128, out="float16").store_bytes == 16  # 16 codes -> 32 B of halves
    assert decode(128, out="bfloat16", out_address=2).store_bytes == 2
    assert decode(128, out_stride=1000).store_bytes == 8
    assert decode(1).store_bytes == 4 and decode(2).store_bytes == 8


def test_identity_formats_use_the_raw_gather():
    for code, out in (("fp16", "float16"), ("bf16", "bfloat16")):
        plan = decode(128, code=code, out=out)
        assert plan.kernel == "gather_aligned<uint4, long long>" and not plan.decodes
        assert (plan.code, plan.out_format) == (code, out)
        with pytest.raises(ValueError, match="gather_aligned"):
            decode_name_expression(code, out, 16)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"code": "int4"}, "code must be"),
        ({"out": "float64"}, "out_format"),
        ({"affine": None}, "affine='column' or 'row'"),
        ({"code": "fp16", "affine": "row"}, "take no affine"),
        ({"code": "fp16", "address": 1}, "table_address must be a multiple of 2"),
        ({"out_address": 2}, "out_address must be a multiple of 4"),
        ({"row_stride": 99}, "row_stride"),
        ({"out_stride": 398}, "out_stride"),
        ({"id_bytes": 2}, "id_bytes"),
    ],
)
def test_bad_decode_arguments_raise_value_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        decode(100, **kwargs)


def test_decode_kernel_arguments():
    common = dict(table_address=1024, row_stride=100, ids_address=2048, perm_address=0, out_address=4096, out_stride=400)
    plan = decode(100, affine="row")
    args = kernel_arguments(plan, **common, affine_address=8192)
    assert [kind for kind, _ in args] == [*ROWS_IDS_OUT, *OPTIONAL_CACHE, *DECODING, *SPLIT_ROWS]
    assert [value for _, value in args][8:12] == [0, 0, 0, 0]  # no cache
    assert [value for _, value in args][12:] == [8192, 1, 0, plan.store_bytes, 8, plan.threads_per_row, plan.align_bytes, plan.steps_per_row]
    assert kernel_arguments(decode(100, id_bytes=4), **common, affine_address=8192)[16] == ("i32", 4)
    assert [value for _, value in kernel_arguments(decode(100), **common, affine_address=8192)][12:14] == [8192, 0]
    assert [value for _, value in kernel_arguments(decode(100, code="fp16"), **common)][12:14] == [0, 0]
    with pytest.raises(ValueError, match="scale, offset"):
        kernel_arguments(plan, **common)
    identity = decode(100, code="fp16", out="float16")
    assert len(kernel_arguments(identity, **common)) == 15


# ------------------------------------------------------------------ the hot-row cache (fused hit/miss gather)


def test_cached_plans_pick_a_vector_that_suits_the_cache_rows_too():
    # 400-byte rows on 16-byte boundaries: 16-byte loads, unless the cache base or stride forbids them
    assert aligned(400, 1024, elem_size=4, cache_address=2048).vector_bytes == 16
    assert aligned(400, 1024, elem_size=4, cache_address=2052).vector_bytes == 4
    assert aligned(400, 1024, elem_size=4, cache_address=2048, cache_stride=408).vector_bytes == 8
    plan = aligned(400, 1024, elem_size=4, cache_address=2048, slot_bytes=8)
    assert plan.cached and plan.slot_bytes == 8 and plan.kernel == "gather_aligned<uint4, long long>"
    assert not aligned(400, 1024, elem_size=4).cached
    # the geometry is the uncached plan's: same windows and steps for hits and misses
    assert dataclasses.replace(plan, slot_bytes=0) == aligned(400, 1024, elem_size=4)
    # decoding: the code rows of table and cache limit the loads; the output only the stores
    assert decode(128, cache_address=4096).vector_bytes == 16
    assert decode(128, cache_address=4100).vector_bytes == 4
    assert decode(128, cache_address=4096, cache_stride=130).vector_bytes == 2
    assert decode(128, cache_address=4096).cached
    identity = decode(100, code="fp16", out="float16", cache_address=8, slot_bytes=4)
    assert identity.kernel.startswith("gather_aligned<") and identity.cached and identity.vector_bytes == 8


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(cache_address=0, slot_bytes=2), "slot_bytes"),
        (dict(cache_address=0, cache_stride=100), "cache_stride"),
        (dict(cache_stride=400), "without cache_address"),
        (dict(cache_address=-16), "cache_address"),
        (dict(cache_address=0, variant="naive"), "aligned"),
    ],
)
def test_bad_cache_arguments_raise_value_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        plan_gather(400, 0, 5, elem_size=4, **kwargs)


def test_cached_decode_rejects_a_cache_not_aligned_to_its_codes():
    with pytest.raises(ValueError, match="cache_address must be a multiple of 2"):
        decode(100, code="fp16", cache_address=3)
    with pytest.raises(ValueError, match="cache_stride must be a multiple of 2"):
        decode(100, code="fp16", cache_address=4, cache_stride=201)


def test_cached_kernel_arguments():
    common = dict(table_address=1024, row_stride=400, ids_address=2048, perm_address=0, out_address=4096, out_stride=400)
    plan = aligned(400, 1024, num_ids=5, elem_size=4, cache_address=8192, cache_stride=416)
    cache = dict(slot_map_address=12288, cache_address=8192, cache_stride=416)
    args = kernel_arguments(plan, **common, **cache)
    assert args[8:12] == (("ptr", 12288), ("i32", 4), ("ptr", 8192), ("i64", 416))
    with pytest.raises(ValueError, match="slot_map_address"):
        kernel_arguments(plan, **common)
    with pytest.raises(ValueError, match="made without a cache"):
        kernel_arguments(aligned(400, 1024, num_ids=5, elem_size=4), **common, **cache)
    row = decode(100, affine="row", cache_address=8192, slot_bytes=8)
    args = kernel_arguments(row, **dict(common, row_stride=100), affine_address=1 << 20, cache_affine_address=1 << 21, **cache)
    assert args[8:15] == (("ptr", 12288), ("i32", 8), ("ptr", 8192), ("i64", 416), ("ptr", 1 << 20), ("i32", 1), ("ptr", 1 << 21))
    # per-column pairs are device memory already: no cached copy is passed
    column = decode(100, cache_address=8192)
    assert kernel_arguments(column, **dict(common, row_stride=100), affine_address=1 << 20, cache_affine_address=1 << 21, **cache)[14] == ("ptr", 0)


@pytest.mark.parametrize("threads_per_block, id_bytes, max_blocks, num_sms", [(128, 4, None, 1), (1024, 8, 5, 132), (256, 8, None, 132), (64, 4, 3, 2)])
def test_raw_and_decoding_plans_carry_the_same_launch_values(threads_per_block, id_bytes, max_blocks, num_sms):
    """Both plans are made in one place: the block, id width, cache slot width and grid cap reach each alike."""
    launch = {"threads_per_block": threads_per_block, "id_bytes": id_bytes, "max_blocks": max_blocks, "num_sms": num_sms}
    cache = {"cache_address": 1 << 20, "slot_bytes": 8}
    raw = plan_gather(256, 0, 100_000, elem_size=1, **launch, **cache)
    decoding = plan_decode(256, 0, 100_000, code="int8", affine="row", **launch, **cache)
    full_wave = num_sms * (2048 // threads_per_block)
    for plan in (raw, decoding):
        rows_per_block = threads_per_block // 32 * (32 // plan.threads_per_row)
        work = -(-100_000 // rows_per_block)
        assert (plan.block, plan.id_bytes, plan.slot_bytes, plan.num_ids, plan.row_bytes) == (threads_per_block, id_bytes, 8, 100_000, 256)
        assert plan.grid == min(work, full_wave, max_blocks or full_wave)
    assert (raw.out_row_bytes, decoding.out_row_bytes, decoding.code, decoding.affine, raw.code) == (256, 1024, "int8", "row", None)
