"""Storage-backed FeatureStore: every gather equals the file's rows, ``np.load(path)[ids]``,
for every mix of tiers (device cache, host buffer, storage), host policies, compressed codes, id
dtypes, duplicates, empty batches; bad ids raise ``IndexError`` naming the id."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import dgl_zerocopy
from dgl_zerocopy import FeatureStore
from dgl_zerocopy.store import StorageTier
from dgl_zerocopy.store.cache import CachePolicy
from dgl_zerocopy.store.storage import HOST_POLICIES

ROWS, DIM = 3000, 37  # 148-byte rows: rows straddle 4 KiB blocks


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    path = tmp_path_factory.mktemp("storage") / "feat.npy"
    rng = np.random.default_rng(0)
    np.save(path, rng.standard_normal((ROWS, DIM)).astype(np.float32))
    return path


def _ranking() -> CachePolicy:
    return CachePolicy(torch.from_numpy(np.random.default_rng(1).permutation(ROWS)))


def _batches(seed: int, n: int = 12, size: int = 400, dtype=torch.int64):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        yield torch.from_numpy(rng.integers(0, ROWS, size)).to(dtype)
    yield torch.empty(0, dtype=dtype)
    yield torch.tensor([5, 5, 5, ROWS - 1, 0, 5], dtype=dtype)  # duplicates, first and last rows


@pytest.mark.parametrize("policy", HOST_POLICIES)
@pytest.mark.parametrize("cache", [False, True])
def test_rows_equal_the_file_for_every_policy_and_tier_mix(table, policy, cache):
    expect = np.load(table)
    budget = ROWS * 4 + 1000 * (DIM * 4 + 30)  # about 1000 slots: a third of the table
    kwargs = dict(cache_bytes=100 * DIM * 4 + ROWS * 4, cache_policy=_ranking()) if cache else {}
    if policy in ("hybrid", "static") and not cache:
        kwargs["cache_policy"] = _ranking()
    with FeatureStore(table, backend="cpu", storage=StorageTier(budget, policy), **kwargs) as store:
        for ids in _batches(2):
            assert torch.equal(store.gather(ids), torch.from_numpy(expect[ids.numpy()]))
        stats = store.storage_stats()
        assert stats["storage_rows"] > 0 and stats["host_hits"] > 0 and stats["evictions"] > 0
        assert (stats["device_hits"] > 0) == cache
        if cache:
            assert store.cache_stats()["hits"] > 0
        assert store.nbytes <= budget


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_int32_and_int64_ids_numpy_ids_and_out(table, dtype):
    expect = np.load(table)
    with FeatureStore(table, storage=StorageTier(1 << 20)) as store:  # backend auto: cpu here
        ids = torch.tensor([7, 2999, 7, 0, 1500], dtype=dtype)
        out = torch.empty((5, DIM))
        assert store.gather(ids, out=out) is out
        assert torch.equal(out, torch.from_numpy(expect[ids.long().numpy()]))
        assert torch.equal(store.gather(ids.numpy()), out)
        assert store.gather(torch.empty(0, dtype=dtype)).shape == (0, DIM)


def test_whole_table_in_budget_reads_each_block_once(table):
    with FeatureStore(table, backend="cpu", storage=StorageTier(ROWS * (DIM * 4 + 40) + ROWS * 4)) as store:
        for ids in _batches(3):
            store.gather(ids)
        first = store.storage_stats()["storage_bytes"]
        store.gather(torch.arange(ROWS))
        stats = store.storage_stats()
        assert stats["evictions"] == 0
        assert stats["storage_bytes"] - first <= table.stat().st_size + 4096  # the rest, never twice


@pytest.mark.parametrize("ids", [[0, ROWS], [-1], [3, 4, ROWS + 7]])
def test_out_of_range_ids_name_the_id(table, ids):
    with FeatureStore(table, storage=StorageTier(1 << 20)) as store:
        with pytest.raises(IndexError, match=str(ids[-1])):
            store.gather(torch.tensor(ids))
        with pytest.raises(IndexError, match=str(ids[-1])):
            store.read_ahead(torch.tensor(ids))


@pytest.mark.parametrize("codec, axis", [("fp16", None), ("bf16", None), ("int8", "column"), ("int8", "row")])
def test_compressed_codes_on_storage_decode_like_the_codec(table, tmp_path, codec, axis):
    folder = tmp_path / "codes"
    compressed = dgl_zerocopy.compress(str(table), codec, out=folder, **({"axis": axis} if axis else {}))
    plain = FeatureStore(table, storage=StorageTier(1 << 18))
    with FeatureStore(
        folder, backend="cpu", storage=StorageTier(ROWS * 4 + 1000 * (DIM * 2 + 30)), cache_bytes=50 * DIM * 2 + ROWS * 4, cache_policy=_ranking()
    ) as store:
        assert store.compression == codec
        for ids in _batches(4):
            assert torch.equal(store.gather(ids), compressed.decode(ids))
        code_bytes = store.storage_stats()["storage_bytes"]
    for ids in _batches(4):
        plain.gather(ids)
    plain_bytes = plain.storage_stats()["storage_bytes"]
    plain.close()
    assert code_bytes < plain_bytes  # fewer bytes per row on storage
