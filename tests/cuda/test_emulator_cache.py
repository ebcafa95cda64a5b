"""The fused cached gather (kernels/gather.cu with a slot map: hits from a device cache, misses from
the host table) on the CPU emulator, for every mix of hits and misses: raw rows against NumPy and
``dgl_zerocopy.store.cache.cached_gather``, compressed rows against ``Codec.decode`` bit for bit, and
traces whose host loads are exactly the misses' rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_emulator import assert_same_bytes, make_table
from test_emulator_decode import CODECS, OUT_DTYPES, TORCH_CODES, assert_same, make_codec, out_format

from dgl_zerocopy.cuda.gather.emulator import emulate_decode, emulate_gather
from dgl_zerocopy.cuda.gather.pcie_model import analyze
from dgl_zerocopy.store.cache import HotRowCache, cached_gather

SLOT_DTYPES = (np.int32, np.int64)
ID_DTYPES = (np.int32, np.int64)
ROWS = 16


def make_cache(num_rows: int, cached: list[int], slot_dtype) -> np.ndarray:
    """The slot map of a cache holding rows ``cached`` (slot i holds row cached[i]), in reverse
    slot order so that slot numbers differ from row numbers."""
    slot_map = np.full(num_rows, -1, dtype=slot_dtype)
    slot_map[cached] = np.arange(len(cached))[::-1]
    return slot_map


def cache_rows_for(table: np.ndarray, slot_map: np.ndarray, faithful: bool, seed: int = 9) -> np.ndarray:
    """Rows for every slot: the table's own rows (faithful) or other bytes, so that a test sees
    which source each output row came from."""
    num_cached = int(slot_map.max()) + 1 if slot_map.size else 0
    rows = np.flatnonzero(slot_map >= 0)
    if faithful:
        out = np.empty((num_cached,) + table.shape[1:], dtype=table.dtype)
        out[slot_map[rows]] = table[rows]
        return out
    return make_table(num_cached, table[:1].nbytes, "uint8", seed=seed).view(table.dtype).reshape((num_cached,) + table.shape[1:])


def mixed_reference(table: np.ndarray, cache_rows: np.ndarray, slot_map: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """What the fused kernel must write: the cache row for a hit, the table row for a miss."""
    out = table[ids].copy()
    slots = slot_map[ids]
    hit = slots >= 0
    out[hit] = cache_rows[slots[hit]]
    return out


def id_mixes(num_rows: int, cached: list[int], dtype) -> dict[str, np.ndarray]:
    """Every mix of hits and misses the issue asks for, over a table of ``num_rows`` rows."""
    rng = np.random.default_rng(num_rows)
    missed = [row for row in range(num_rows) if row not in cached]
    alternating = [row for pair in zip(cached, missed) for row in pair]
    mixes = {
        "all hits": rng.choice(cached, 40),
        "all misses": rng.choice(missed, 40),
        "alternating": alternating * 3,
        "random": rng.integers(0, num_rows, 60),
        "empty": [],
        "one hit": [cached[0]],
        "one miss": [missed[-1]],
        "duplicates": [cached[1]] * 5 + [missed[0]] * 4 + [cached[1], missed[0]],
    }
    return {name: np.asarray(ids, dtype=dtype) for name, ids in mixes.items()}


CACHED = [0, 3, 4, 5, 9, 15]


@pytest.mark.parametrize("slot_dtype", SLOT_DTYPES)
@pytest.mark.parametrize("dtype", ["float32", "float16", "uint8", "float64", "int64"])
def test_every_mix_width_and_alignment(dtype, slot_dtype):
    itemsize = np.dtype(dtype).itemsize
    slot_map = make_cache(ROWS, CACHED, slot_dtype)
    for columns in (1, 3, 7, 25, 100, 128, 129):
        table = make_table(ROWS, columns * itemsize, dtype, seed=columns)
        cache_rows = cache_rows_for(table, slot_map, faithful=False, seed=columns + 1)
        for i, (offset, cache_offset) in enumerate([(0, 0), (itemsize, 0), (0, 4 * itemsize), (64, 100 - 100 % itemsize), (16 + itemsize, 16)]):
            for name, ids in id_mixes(ROWS, CACHED, ID_DTYPES[i % 2]).items():
                out = emulate_gather(table, ids, base_offset=offset, cache_rows=cache_rows, slot_map=slot_map, cache_offset=cache_offset)
                context = f"{dtype} {columns} cols, table +{offset}, cache +{cache_offset}, {ids.dtype} ids, {name}"
                assert_same_bytes(out, mixed_reference(table, cache_rows, slot_map, ids), context)


@pytest.mark.parametrize("slot_dtype", SLOT_DTYPES)
def test_a_faithful_cache_gives_table_rows_like_cached_gather(slot_dtype):
    """The cache as HotRowCache builds it (rows copied from the table) gives table[ids]: the same
    answer as the CPU reference path for every mix."""
    table = torch.from_numpy(make_table(40, 100 * 4, "float32", seed=4))
    cache = HotRowCache(table, torch.tensor([39, 7, 0, 12, 13, 30]))
    slot_map = cache.slot_map.numpy().astype(slot_dtype)
    for name, ids in id_mixes(40, [39, 7, 0, 12, 13, 30], np.int64).items():
        out = emulate_gather(table.numpy(), ids, cache_rows=cache.rows.numpy(), slot_map=slot_map, base_offset=4)
        want = cached_gather(torch.from_numpy(ids), table, cache.rows, cache.slot_map)
        assert_same_bytes(out, want.numpy(), name)
        assert_same_bytes(out, table.numpy()[ids], name)


def test_padded_cache_stride_capped_grid_and_permutation():
    table = make_table(50, 400, "float32", seed=5)
    slot_map = make_cache(50, list(range(0, 50, 3)), np.int32)
    ids = np.random.default_rng(5).integers(0, 50, 3000)
    for stride in (400, 404, 408, 416, 512):
        cache_rows = cache_rows_for(table, slot_map, faithful=False)
        out, trace = emulate_gather(table, ids, cache_rows=cache_rows, slot_map=slot_map, cache_stride=stride, max_blocks=2, trace=True)
        assert_same_bytes(out, mixed_reference(table, cache_rows, slot_map, ids), f"stride {stride}")
        assert trace.plan.vector_bytes == {400: 16, 404: 4, 408: 8, 416: 16, 512: 16}[stride]
    order = np.argsort(ids, kind="stable")
    out = emulate_gather(table, ids[order], perm=order, cache_rows=cache_rows, slot_map=slot_map)
    assert_same_bytes(out, mixed_reference(table, cache_rows, slot_map, ids), "sorted ids through perm")


def test_the_cache_alignment_limits_the_vector():
    table = make_table(8, 512, "float32")
    slot_map = make_cache(8, [1, 2], np.int32)
    cache_rows = cache_rows_for(table, slot_map, faithful=True)
    for cache_offset, vector in ((0, 16), (8, 8), (4, 4), (64, 16)):
        _, trace = emulate_gather(table, np.array([1, 5]), cache_rows=cache_rows, slot_map=slot_map, cache_offset=cache_offset, trace=True)
        assert trace.plan.vector_bytes == vector, cache_offset
        assert trace.plan.cached and trace.plan.slot_bytes == 4


def test_an_empty_cache_reads_everything_from_the_table():
    table = make_table(10, 12, "uint8")
    cache_rows = np.empty((0, 12), dtype=np.uint8)
    ids = np.arange(10)
    out, trace = emulate_gather(table, ids, cache_rows=cache_rows, slot_map=np.full(10, -1, np.int64), trace=True)
    assert_same_bytes(out, table, "no row cached")
    assert trace.hits == 0 and trace.host_mask().all()


# ------------------------------------------------------------------ traces: host loads are the misses' rows


@pytest.mark.parametrize(("row_bytes", "offset"), [(400, 0), (400, 16), (12, 4), (129, 3), (512, 0), (4, 0)])
def test_host_loads_are_exactly_the_missed_rows(row_bytes, offset):
    table = make_table(64, row_bytes, "uint8", seed=row_bytes)
    cached = list(range(0, 64, 2))
    slot_map = make_cache(64, cached, np.int32)
    cache_rows = cache_rows_for(table, slot_map, faithful=True)
    ids = np.random.default_rng(6).integers(0, 64, 200)
    out, trace = emulate_gather(table, ids, base_offset=offset, cache_rows=cache_rows, slot_map=slot_map, trace=True)
    assert_same_bytes(out, table[ids], "traced")
    hit = slot_map[ids] >= 0
    host = trace.host_mask()
    assert trace.hits == int(hit.sum()) and trace.useful_bytes == int((~hit).sum()) * row_bytes
    vec = trace.plan.vector_bytes
    relative = np.sort(trace.address[host] - trace.table_address)
    np.testing.assert_array_equal(relative, np.sort((ids[~hit, None] * row_bytes + np.arange(0, row_bytes, vec)).reshape(-1)))
    # the hits' loads read the cache rows, each byte once
    assert int(trace.nbytes[~host].sum()) == int(hit.sum()) * row_bytes
    cache_start = trace.address[~host].min()
    relative = np.sort(trace.address[~host] - cache_start)
    slots = slot_map[ids[hit]] - slot_map[ids[hit]].min()
    np.testing.assert_array_equal(relative, np.sort((slots[:, None] * row_bytes + np.arange(0, row_bytes, vec)).reshape(-1)))


def test_all_hits_cost_no_request_and_all_misses_cost_what_the_uncached_kernel_does():
    for row_bytes in (12, 100, 400, 1000):
        table = make_table(64, row_bytes, "uint8", seed=row_bytes)
        cached = list(range(32))
        slot_map = make_cache(64, cached, np.int64)
        cache = dict(cache_rows=cache_rows_for(table, slot_map, faithful=True), slot_map=slot_map)
        rng = np.random.default_rng(row_bytes)
        hits, misses = rng.integers(0, 32, 100), rng.integers(32, 64, 100)
        _, trace = emulate_gather(table, hits, trace=True, base_offset=4, **cache)
        metrics = analyze(trace)
        assert (metrics.requests, metrics.fetched_bytes, metrics.instructions) == (0, 0, 0), row_bytes
        _, cached_trace = emulate_gather(table, misses, trace=True, base_offset=4, **cache)
        _, plain_trace = emulate_gather(table, misses, trace=True, base_offset=4)
        assert analyze(cached_trace) == analyze(plain_trace), row_bytes


def test_rows_of_a_warp_each_pay_their_own_requests():
    """512-byte rows, one warp per row (32 lanes): a mix costs exactly the uncached gather of its misses."""
    table = make_table(256, 512, "uint8", seed=1)
    slot_map = make_cache(256, list(range(0, 256, 4)), np.int32)
    cache = dict(cache_rows=cache_rows_for(table, slot_map, faithful=True), slot_map=slot_map)
    ids = np.random.default_rng(1).integers(0, 256, 300)
    _, trace = emulate_gather(table, ids, trace=True, threads_per_row=32, **cache)
    _, misses_only = emulate_gather(table, ids[slot_map[ids] < 0], trace=True, threads_per_row=32)
    cached, plain = analyze(trace), analyze(misses_only)
    assert (cached.requests, cached.fetched_bytes) == (plain.requests, plain.fetched_bytes) == (4 * plain.num_ids, 512 * plain.num_ids)
    assert cached.useful_bytes == plain.useful_bytes and cached.link_efficiency == plain.link_efficiency


# ------------------------------------------------------------------ compressed rows: hits decode like misses


def decoded(row_codes: np.ndarray, codec, ids: np.ndarray, out_dtype: torch.dtype) -> torch.Tensor:
    """``Codec.decode`` of gathered code rows (rows of table ``ids``)."""
    if codec.name == "int8":
        rows = torch.from_numpy(row_codes)
    else:
        rows = torch.from_numpy(np.ascontiguousarray(row_codes).view(np.int16)).view(TORCH_CODES[codec.name])
    return codec.decode(rows, torch.from_numpy(ids.astype(np.int64)), out_dtype=out_dtype)


def emulate_cached_decode(codes, codec, ids, out_dtype, cache_rows, slot_map, **kw) -> torch.Tensor:
    affine = {}
    if codec.name == "int8":
        affine = dict(scale=codec.scale.numpy(), offset=codec.offset.numpy(), affine=codec.axis)
    out = np.array(emulate_decode(codes, ids, code=codec.name, out_format=out_format(out_dtype), cache_rows=cache_rows, slot_map=slot_map, **affine, **kw))
    if out_dtype == torch.bfloat16:
        return torch.from_numpy(out.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(out)


@pytest.mark.parametrize("out_dtype", OUT_DTYPES, ids=out_format)
@pytest.mark.parametrize("codec_name", CODECS)
def test_every_codec_and_mix_decodes_hits_like_misses(codec_name, out_dtype):
    """Cache codes unlike the table's: a hit must decode the cache's codes (with its row's
    scale and offset), a miss the table's; fp16 -> float16 and bf16 -> bfloat16 are raw copies."""
    code_size = 1 if codec_name.startswith("int8") else 2
    for columns, offset, cache_offset in ((3, 0, 0), (100, code_size, 16), (128, 0, 8), (602, 64, 6)):
        codes, codec = make_codec(codec_name, ROWS, columns, seed=columns)
        slot_map = make_cache(ROWS, CACHED, SLOT_DTYPES[columns % 2])
        cache_rows = cache_rows_for(codes, slot_map, faithful=False, seed=columns)
        for i, (name, ids) in enumerate(id_mixes(ROWS, CACHED, np.int32).items()):
            ids = ids.astype(ID_DTYPES[i % 2])
            got = emulate_cached_decode(codes, codec, ids, out_dtype, cache_rows, slot_map, base_offset=offset, cache_offset=cache_offset)
            want = decoded(mixed_reference(codes, cache_rows, slot_map, ids), codec, ids, out_dtype)
            assert_same(got, want, f"{codec_name} -> {out_format(out_dtype)}, {columns} cols, +{offset}/+{cache_offset}, {name}")


@pytest.mark.parametrize("cache_pairs", [True, False])
def test_per_row_pairs_of_hits_come_from_the_cache_or_the_host(cache_pairs):
    codes, codec = make_codec("int8/row", 64, 100, seed=3)
    slot_map = make_cache(64, list(range(0, 64, 2)), np.int32)
    cache_rows = cache_rows_for(codes, slot_map, faithful=True)
    pairs = dict(scale=codec.scale.numpy(), offset=codec.offset.numpy(), affine="row", cache_pairs=cache_pairs)
    hits = np.arange(0, 64, 2)
    out, trace = emulate_decode(codes, hits, code="int8", cache_rows=cache_rows, slot_map=slot_map, trace=True, **pairs)
    assert_same(torch.from_numpy(out), decoded(codes[hits], codec, hits, torch.float32), "all hits")
    host = trace.host_mask()
    inside = (trace.address >= trace.table_address) & (trace.address < trace.table_address + trace.table_bytes)
    assert not inside.any()  # no code byte from the host
    if cache_pairs:
        assert not host.any() and analyze(trace).requests == 0
    else:  # each hit still reads its (scale, offset) pair from host: one request per row
        assert int(host.sum()) == hits.size * trace.plan.threads_per_row and np.all(trace.nbytes[host] == 8)
        assert analyze(trace).requests == hits.size


def test_decode_misses_cost_what_the_uncached_decode_does():
    for codec_name in CODECS:
        codes, codec = make_codec(codec_name, 64, 100, seed=2)
        slot_map = make_cache(64, list(range(32)), np.int32)
        cache_rows = cache_rows_for(codes, slot_map, faithful=True)
        misses = np.random.default_rng(2).integers(32, 64, 100)
        kw = dict(code=codec.name, trace=True, base_offset=2)
        if codec.name == "int8":
            kw.update(scale=codec.scale.numpy(), offset=codec.offset.numpy(), affine=codec.axis)
        _, cached = emulate_decode(codes, misses, cache_rows=cache_rows, slot_map=slot_map, **kw)
        _, plain = emulate_decode(codes, misses, **kw)
        assert analyze(cached) == analyze(plain), codec_name


# ------------------------------------------------------------------ bad inputs


def test_bad_cache_inputs_are_rejected():
    table = make_table(10, 8, "float32")
    rows = table[:2].copy()
    slot_map = make_cache(10, [1, 2], np.int32)
    ids = np.array([1, 3])
    with pytest.raises(ValueError, match="go together"):
        emulate_gather(table, ids, cache_rows=rows)
    with pytest.raises(ValueError, match="go together"):
        emulate_gather(table, ids, slot_map=slot_map)
    with pytest.raises(ValueError, match="place a cache"):
        emulate_gather(table, ids, cache_offset=4)
    with pytest.raises(TypeError, match="rows of the table"):
        emulate_gather(table, ids, cache_rows=rows.astype(np.float64), slot_map=slot_map)
    with pytest.raises(TypeError, match="rows of the table"):
        emulate_gather(table, ids, cache_rows=rows[:, :1], slot_map=slot_map)
    with pytest.raises(TypeError, match="10 entries"):
        emulate_gather(table, ids, cache_rows=rows, slot_map=slot_map[:9])
    with pytest.raises(TypeError, match="int32 or int64"):
        emulate_gather(table, ids, cache_rows=rows, slot_map=slot_map.astype(np.float32))
    for bad in (-2, 2):
        wrong = slot_map.copy()
        wrong[7] = bad
        with pytest.raises(ValueError, match=rf"slot_map\[7\] = {bad} is not a slot of a 2-row cache"):
            emulate_gather(table, ids, cache_rows=rows, slot_map=wrong)
    with pytest.raises(ValueError, match="cache_offset"):
        emulate_gather(table, ids, cache_rows=rows, slot_map=slot_map, cache_offset=128)
    with pytest.raises(ValueError, match="cache_stride"):
        emulate_gather(table, ids, cache_rows=rows, slot_map=slot_map, cache_stride=4)
    with pytest.raises(ValueError, match="aligned"):
        emulate_gather(table, ids, variant="naive", cache_rows=rows, slot_map=slot_map)
    with pytest.raises(ValueError, match="cache_address must be a multiple of 2"):
        emulate_decode(np.zeros((10, 8), np.uint16), ids, code="fp16", cache_rows=np.zeros((2, 8), np.uint16), slot_map=slot_map, cache_offset=1)
