"""The fused cached gather on a real GPU: ``launch_gather``/``launch_decode`` with a
``DeviceCache`` and the zero-copy backend with a ``HotRowCache``, against ``table[ids]`` (and
``Codec.decode``) for every mix of hits and misses, on a side stream (skipped without CUDA and CuPy)."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

# test_gpu_decode skips itself at import without a CUDA GPU or CuPy; importing its helpers skips
# this module for the same reason.
from test_gpu_decode import CODECS, assert_same, make_codec  # noqa: E402

from dgl_zerocopy.cuda.gather.launcher import DeviceCache, launch_decode, launch_gather  # noqa: E402
from dgl_zerocopy.store.backends import GatherOptions  # noqa: E402
from dgl_zerocopy.store.backends.zerocopy import ZeroCopyBackend  # noqa: E402
from dgl_zerocopy.store.cache import HotRowCache  # noqa: E402

DEVICE = torch.device("cuda", 0)
ROWS = 1000
CACHED = torch.arange(0, ROWS, 3)  # every third row


def id_mixes(id_dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """All hits, all misses, alternating, random, empty, one row, duplicates (CPU ids)."""
    g = torch.Generator().manual_seed(0)
    missed = torch.tensor([row for row in range(ROWS) if row % 3])
    mixes = {
        "all hits": CACHED[torch.randint(0, CACHED.numel(), (777,), generator=g)],
        "all misses": missed[torch.randint(0, missed.numel(), (777,), generator=g)],
        "alternating": torch.stack((CACHED[:300], missed[:300]), 1).reshape(-1),
        "random": torch.randint(0, ROWS, (4096,), generator=g),
        "empty": torch.empty(0, dtype=torch.int64),
        "one hit": torch.tensor([CACHED[5]]),
        "one miss": torch.tensor([missed[-1]]),
        "duplicates": torch.tensor([3, 3, 3, 4, 4, 3, 999, 999]),
    }
    return {name: ids.to(id_dtype) for name, ids in mixes.items()}


def device_cache(cache: HotRowCache, rows: torch.Tensor | None = None, slot_dtype: torch.dtype = torch.int32, pairs: torch.Tensor | None = None) -> DeviceCache:
    """``cache`` as the launcher takes it (optionally with other rows, to see where hits come from)."""
    rows = cache.rows if rows is None else rows
    return DeviceCache(rows.data_ptr(), rows.stride(0) * rows.element_size(), cache.slot_map.to(slot_dtype), 0 if pairs is None else pairs.data_ptr())


def mixed_rows(table: torch.Tensor, cache: HotRowCache, rows: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """table[ids] with each hit replaced by its cache row (CPU)."""
    want = table[ids.long()].clone()
    slots = cache.slot_map.cpu()[ids.long()]
    hit = slots >= 0
    want[hit] = rows.cpu()[slots[hit].long()]
    return want


@pytest.mark.parametrize("slot_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.uint8, torch.float64])
def test_launch_gather_reads_hits_from_the_cache_and_misses_from_the_host(dtype, slot_dtype):
    for columns in (1, 7, 100, 128, 129):
        table = (torch.randint(0, 100, (ROWS, columns)) if dtype == torch.uint8 else torch.randn(ROWS, columns)).to(dtype)
        table = table.pin_memory()
        cache = HotRowCache(table, CACHED, DEVICE)
        other = (cache.rows + 1).contiguous()  # unlike the table: a hit read from the host would show
        for id_dtype in (torch.int32, torch.int64):
            for name, ids in id_mixes(id_dtype).items():
                for rows, want in ((cache.rows, table[ids.long()]), (other, mixed_rows(table, cache, other, ids))):
                    # everything the side stream reads is made on the current stream, before it waits
                    out = torch.zeros((ids.numel(), columns), dtype=dtype, device=DEVICE)
                    device_ids, on_device = ids.to(DEVICE), device_cache(cache, rows, slot_dtype)
                    side = torch.cuda.Stream()
                    side.wait_stream(torch.cuda.current_stream())
                    plan = launch_gather(
                        table.data_ptr(),
                        tuple(table.shape),
                        table.element_size(),
                        table.stride(0) * table.element_size(),
                        device_ids,
                        out,
                        stream=side,
                        sort=name == "random",
                        cache=on_device,
                    )
                    side.synchronize()
                    assert plan.cached or plan.grid == 0
                    assert torch.equal(out.cpu(), want), f"{dtype} {columns} cols, {id_dtype} ids, {name}"


@pytest.mark.parametrize("codec_name", CODECS)
def test_launch_decode_decodes_hits_like_misses(codec_name):
    for columns in (3, 100, 602):
        codes, codec = make_codec(codec_name, ROWS, columns, seed=columns)
        codes = codes.pin_memory()
        cache = HotRowCache(codes, CACHED, DEVICE)
        pairs_ptr, keep, cached_pairs = 0, None, None
        if codec.name == "int8":
            keep = torch.stack((codec.scale, codec.offset), 1)
            keep = keep.to(DEVICE) if codec.axis == "column" else keep.pin_memory()
            pairs_ptr = keep.data_ptr()
            if codec.axis == "row":
                cached_pairs = torch.stack((codec.scale[CACHED], codec.offset[CACHED]), 1).to(DEVICE)
        for pairs in (None, cached_pairs) if cached_pairs is not None else (None,):
            for name, ids in id_mixes(torch.int64).items():
                # everything the side stream reads is made on the current stream, before it waits
                out = torch.zeros((ids.numel(), columns), device=DEVICE)
                device_ids, on_device = ids.to(DEVICE), device_cache(cache, pairs=pairs)
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                launch_decode(
                    codes.data_ptr(),
                    tuple(codes.shape),
                    codec.name,
                    codes.stride(0) * codes.element_size(),
                    device_ids,
                    out,
                    affine=codec.axis,
                    affine_ptr=pairs_ptr,
                    stream=side,
                    cache=on_device,
                )
                side.synchronize()
                assert_same(out, codec.decode(codes[ids], ids), f"{codec_name} {columns} cols, {name}, pairs cached: {pairs is not None}")
        del keep


@pytest.mark.parametrize("codec_name", [None, *CODECS])
def test_backend_with_a_cache_gathers_on_a_side_stream_and_counts_hits(codec_name):
    if codec_name is None:
        table, codec = torch.randn(ROWS, 100), None
    else:
        table, codec = make_codec(codec_name, ROWS, 100, seed=1)
    cache = HotRowCache(table, CACHED, DEVICE)
    backend = ZeroCopyBackend(table, DEVICE, codec=codec, cache=cache)
    try:
        hits = misses = 0
        side = torch.cuda.Stream()
        for name, ids in id_mixes(torch.int64).items():
            want = table[ids] if codec is None else codec.decode(table[ids], ids)
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                got = backend.gather(ids, None, side)  # allocated on `side`: read it after `side`
            torch.cuda.current_stream().wait_stream(side)
            got.record_stream(torch.cuda.current_stream())
            assert_same(got, want, f"{codec_name} {name}")
            hit = int((ids % 3 == 0).sum())
            hits, misses = hits + hit, misses + ids.numel() - hit
        stats = cache.stats_dict()
        assert (stats["hits"], stats["misses"]) == (hits, misses)
        ids = torch.randint(0, ROWS, (2048,), device=DEVICE, dtype=torch.int32)  # device int32 ids, into out
        out = torch.full((2048, 100), float("nan"), device=DEVICE).to(backend.out_dtype)
        side.wait_stream(torch.cuda.current_stream())
        backend.gather(ids, out, side)
        side.synchronize()
        cpu_ids = ids.cpu().long()
        assert_same(out, table[cpu_ids] if codec is None else codec.decode(table[cpu_ids], cpu_ids), f"{codec_name} into out")
    finally:
        backend.close()
    assert not backend._pinned.pinned and backend.cache is None


def test_backend_cache_with_sorted_ids_and_capped_grid():
    table = torch.randn(ROWS, 602)
    cache = HotRowCache(table, CACHED, DEVICE)
    backend = ZeroCopyBackend(table, DEVICE, options=GatherOptions(sort_ids=True, max_blocks=2), cache=cache)
    try:
        ids = torch.randint(0, ROWS, (3000,))
        got = backend.gather(ids, None, torch.cuda.current_stream())
        assert torch.equal(got.cpu(), table[ids])
    finally:
        backend.close()


def test_backend_rejects_a_cache_it_cannot_read():
    table = torch.randn(100, 8)
    with pytest.raises(ValueError, match="backend's device"):
        ZeroCopyBackend(table, DEVICE, cache=HotRowCache(table, torch.arange(5), "cpu"))
    with pytest.raises(ValueError, match="rows of this table"):
        ZeroCopyBackend(table, DEVICE, cache=HotRowCache(torch.randn(100, 4), torch.arange(5), DEVICE))
    with pytest.raises(ValueError, match="variant='aligned'"):
        ZeroCopyBackend(table, DEVICE, options=GatherOptions(variant="naive"), cache=HotRowCache(table, torch.arange(5), DEVICE))


def test_launcher_rejects_a_bad_slot_map():
    table = torch.randn(100, 8).pin_memory()
    cache = HotRowCache(table, torch.arange(5), DEVICE)
    ids = torch.arange(10, device=DEVICE)
    out = torch.empty((10, 8), device=DEVICE)
    args = (table.data_ptr(), tuple(table.shape), 4, 32, ids, out)
    with pytest.raises(ValueError, match="one entry per table row"):
        launch_gather(*args, cache=DeviceCache(cache.rows.data_ptr(), 32, cache.slot_map[:50]))
    with pytest.raises(TypeError, match="int32 or int64"):
        launch_gather(*args, cache=DeviceCache(cache.rows.data_ptr(), 32, cache.slot_map.float()))
    with pytest.raises(ValueError, match="aligned"):
        launch_gather(*args, variant="naive", cache=device_cache(cache))
