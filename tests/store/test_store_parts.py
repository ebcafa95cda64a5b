"""FeatureStore built from parts (kernel=, compression=, cache=, storage=): the parts' checks, the former
keywords (each still gathers the same rows, with a DeprecationWarning naming its part), and the spec
that pickling and sharing go through."""

from __future__ import annotations

import ast
import inspect
import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from dgl_zerocopy import FeatureStore, compress
from dgl_zerocopy.store import Compression, DeviceCache, GatherOptions, StorageTier, StoreSpec
from dgl_zerocopy.store.cache import CachePolicy, budget_for_rows
from dgl_zerocopy.store.legacy_keywords import MOVED

ROWS, DIM = 200, 12
PACKAGE = Path(__file__).resolve().parents[2] / "dgl_zerocopy"


@pytest.fixture(scope="module")
def graph():
    """Node v has ROWS - v in-edges: every degree policy ranks rows 0, 1, 2, ... first."""
    dgl = pytest.importorskip("dgl")  # the tests of the parts themselves run without DGL
    dst = torch.cat([torch.full((ROWS - v,), v) for v in range(ROWS)])
    src = dst[torch.randperm(dst.numel(), generator=torch.Generator().manual_seed(0))]
    return dgl.graph((src, dst), num_nodes=ROWS)


@pytest.fixture(scope="module")
def table() -> torch.Tensor:
    return torch.randn(ROWS, DIM, generator=torch.Generator().manual_seed(0))


@pytest.fixture
def npy(tmp_path, table) -> Path:
    path = tmp_path / "feat.npy"
    np.save(path, table.numpy())
    return path


IDS = torch.tensor([0, 5, 199, 5, 1, 120, 37], dtype=torch.int64)


def test_the_constructor_takes_at_most_eight_parameters():
    params = [p for p in inspect.signature(FeatureStore.__init__).parameters if p != "self"]
    assert len(params) <= 8, params
    assert params[:3] == ["data", "backend", "device"]


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: GatherOptions(variant="fast"), ValueError, r"variant must be one of \('aligned', 'naive'\), but got 'fast'"),
        (lambda: GatherOptions(sort_ids="yes"), TypeError, r"sort_ids must be True, False or 'auto'"),
        (lambda: GatherOptions(max_blocks=0), ValueError, r"max_blocks must be a positive integer or None"),
        (lambda: Compression("zstd"), ValueError, r"unknown compression 'zstd'; use one of: none, fp16, bf16, int8"),
        (lambda: Compression("fp16", out_dtype="float16"), TypeError, r"out_dtype=\) must be a torch.dtype"),
        (lambda: DeviceCache(bytes=-1), ValueError, r"cache_bytes must be >= 0"),
        (lambda: DeviceCache(bytes=1.5), TypeError, r"cache_bytes must be an integer"),
        (lambda: DeviceCache(bytes=10, policy="lru"), ValueError, r"cache_policy must be one of .* but got 'lru'"),
        (lambda: DeviceCache(bytes=10, policy=3), TypeError, r"policy=\) must be one of"),
        (lambda: DeviceCache(presample_options={"batchsize": 3}), TypeError, r"presample_options takes batch_size, epochs, seed"),
        (lambda: StorageTier(bytes=0), ValueError, r"StorageTier\(bytes=\) must be a positive integer number of bytes \(the host buffer.s budget\), but got 0"),
        (lambda: StorageTier(bytes=1 << 20, policy="mru"), ValueError, r"StorageTier\(policy=\) must be one of .* but got 'mru'"),
        (lambda: StorageTier(bytes=1 << 20, threads=0), ValueError, r"threads=\) must be a positive int, but got 0"),
        (lambda: StorageTier(bytes=1 << 20, direct="no"), TypeError, r"direct=\) must be True or False"),
    ],
)
def test_each_part_checks_its_values_when_made(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_a_part_of_the_wrong_kind_or_a_keyword_beside_its_part_is_refused_before_anything_is_made(table, monkeypatch):
    import dgl_zerocopy.store.feature_store as store_module

    made = []
    monkeypatch.setattr(store_module, "make_backend", lambda *a, **k: made.append(a))
    with pytest.raises(TypeError, match=r"cache= must be a DeviceCache"):
        FeatureStore(table, "cpu", "cpu", cache=4096)
    with pytest.raises(TypeError, match=r"compression must be a Compression, a codec name"):
        FeatureStore(table, "cpu", "cpu", compression=16)
    with pytest.raises(TypeError, match=r"got both cache= and cache_bytes="):
        FeatureStore(table, "cpu", "cpu", cache=DeviceCache(), cache_bytes=10)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'cache_size'"):
        FeatureStore(table, "cpu", "cpu", cache_size=10)
    assert made == []


def _new_and_old(graph, npy, table):
    """(old keywords, the same store written with parts) for every former keyword."""
    dgl = pytest.importorskip("dgl")
    budget = budget_for_rows(40, DIM * 4, ROWS)
    ranking = CachePolicy(torch.arange(ROWS - 1, -1, -1))
    sampler = dgl.dataloading.NeighborSampler([2])
    seeds = torch.arange(50, ROWS)
    presample = {"batch_size": 30, "epochs": 1.0, "seed": 1}
    return {
        "variant": (table, {"variant": "naive"}, {"kernel": GatherOptions(variant="naive")}),
        "sort_ids": (table, {"sort_ids": True}, {"kernel": GatherOptions(sort_ids=True)}),
        "max_blocks": (table, {"max_blocks": 4}, {"kernel": GatherOptions(max_blocks=4)}),
        "out_dtype": (table, {"compression": "fp16", "out_dtype": torch.float16}, {"compression": Compression("fp16", torch.float16)}),
        "cache_bytes": (table, {"cache_bytes": budget, "graph": graph}, {"cache": DeviceCache(budget, graph=graph)}),
        "cache_policy": (table, {"cache_bytes": budget, "cache_policy": ranking}, {"cache": DeviceCache(budget, ranking)}),
        "graph": (table, {"cache_bytes": budget, "cache_policy": "in_degree", "graph": graph}, {"cache": DeviceCache(budget, "in_degree", graph)}),
        "sampler": (
            table,
            {"cache_bytes": budget, "cache_policy": "presample", "graph": graph, "sampler": sampler, "seeds": seeds, "presample_options": presample},
            {"cache": DeviceCache(budget, "presample", graph, sampler, seeds, presample)},
        ),
        "host_cache_bytes": (npy, {"host_cache_bytes": 1 << 20}, {"storage": StorageTier(1 << 20)}),
        "host_cache_policy": (npy, {"host_cache_bytes": 1 << 20, "host_cache_policy": "lru"}, {"storage": StorageTier(1 << 20, "lru")}),
        "storage_options": (
            npy,
            {"host_cache_bytes": 1 << 20, "storage_options": {"threads": 2, "direct": False}},
            {"storage": StorageTier(1 << 20, threads=2, direct=False)},
        ),
    }


def test_every_former_keyword_is_covered():
    covered = {"variant", "sort_ids", "max_blocks", "out_dtype", "cache_bytes", "cache_policy", "graph", "sampler", "seeds"}
    covered |= {"presample_options", "host_cache_bytes", "host_cache_policy", "storage_options"}
    assert covered == set(MOVED)


@pytest.mark.parametrize("keyword", ["variant", "sort_ids", "max_blocks", "out_dtype", "cache_bytes", "cache_policy", "graph", "sampler"])
def test_a_former_keyword_gathers_the_same_rows_as_its_part_and_warns(graph, npy, table, keyword):
    _check_old_against_new(graph, npy, table, keyword)


@pytest.mark.parametrize("keyword", ["host_cache_bytes", "host_cache_policy", "storage_options"])
def test_a_former_storage_keyword_gathers_the_same_rows_as_its_part_and_warns(graph, npy, table, keyword):
    _check_old_against_new(graph, npy, table, keyword)


def _check_old_against_new(graph, npy, table, keyword):
    data, old, new = _new_and_old(graph, npy, table)[keyword]
    dgl = pytest.importorskip("dgl")
    dgl.seed(5)
    with pytest.warns(DeprecationWarning) as caught:
        old_store = FeatureStore(data, "cpu", "cpu", **old)
    messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(messages) == 1, messages  # one warning per call, naming every keyword's new place
    for name in old:
        if name != "compression":
            assert f"{name}= moves to {MOVED[name][2]}" in messages[0]
    dgl.seed(5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        new_store = FeatureStore(data, "cpu", "cpu", **new)
    assert old_store.options == new_store.options
    assert old_store.dtype == new_store.dtype and old_store.cache_policy == new_store.cache_policy
    if old_store.cache is not None:
        assert torch.equal(old_store.cache.row_ids, new_store.cache.row_ids)
    expected = table[IDS].to(old_store.dtype) if old_store.compression is None else table[IDS].half().to(old_store.dtype)
    for store in (old_store, new_store):
        assert torch.equal(store.gather(IDS), expected)
        store.close()


def test_the_storage_tier_ranks_its_static_rows_by_the_cache_part(graph, npy, table):
    store = FeatureStore(npy, "cpu", "cpu", storage=StorageTier(budget_for_rows(60, DIM * 4, ROWS) * 2, "static"), cache=DeviceCache(graph=graph))
    assert store.on_storage and store.cache is None
    assert torch.equal(store.gather(IDS), table[IDS])
    with pytest.raises(ValueError, match=r"ranks rows statically: pass graph="):
        FeatureStore(npy, "cpu", "cpu", storage=StorageTier(1 << 20, "static"))


@pytest.mark.parametrize("form", ["shared", "file", "compressed", "cached", "storage"])
def test_a_spec_opens_the_same_store_unbound_and_pickling_sends_it(graph, npy, table, form, tmp_path):
    budget = budget_for_rows(40, DIM * 4, ROWS)
    data, parts = {
        "shared": (table.clone().share_memory_(), {}),
        "file": (str(npy), {"kernel": GatherOptions(variant="naive", max_blocks=2)}),
        "compressed": (tmp_path / "feat.int8", {"compression": Compression(out_dtype=torch.bfloat16)}),
        "cached": (table.clone().share_memory_(), {"cache": DeviceCache(budget, graph=graph)}),
        "storage": (npy, {"storage": StorageTier(1 << 20)}),
    }[form]
    if form == "compressed":
        compress(npy, "int8", out=data)
    store = FeatureStore(data, "cpu", "cpu", **parts)
    spec = store.spec()
    assert isinstance(spec, StoreSpec) and spec.kernel == store.options
    for other in (FeatureStore.from_spec(spec), pickle.loads(pickle.dumps(store)), FeatureStore.from_spec(pickle.loads(pickle.dumps(spec)))):
        assert "unbound" in repr(other) and other.options == store.options and other.dtype == store.dtype
        assert torch.equal(other.gather(IDS), store.gather(IDS).clone())
        assert other.cache_policy == store.cache_policy and other.on_storage == store.on_storage
        other.close()
    store.close()


def test_a_private_table_has_no_spec_and_from_spec_takes_only_a_spec(table):
    store = FeatureStore(table.clone(), "cpu", "cpu")
    with pytest.raises(TypeError, match=r"is in private memory"):
        store.spec()
    with pytest.raises(TypeError, match=r"from_spec takes a StoreSpec"):
        FeatureStore.from_spec({"table": table})
    store.close()
    with pytest.raises(RuntimeError, match=r"closed"):
        store.spec()


def _private_names() -> set[str]:
    """The private attributes FeatureStore sets (``self._x = ...``) and its private methods."""
    tree = ast.parse((PACKAGE / "store" / "feature_store.py").read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self" and node.attr.startswith("_"):
            names.add(node.attr)
        if isinstance(node, ast.FunctionDef) and node.name.startswith("_") and not node.name.startswith("__"):
            names.add(node.name)
    return names


def _private_reads(package: Path) -> list[str]:
    """Outside ``package/store``: each ``<x>._name`` for a private name of FeatureStore where ``x`` is
    not ``self``/``cls`` and either names a store or the attribute is one only a store has."""
    private = _private_names()
    common = {"_lock", "_device", "_backend", "_cache", "_finalizer", "_made", "_path", "_file", "_close", "_gather"}
    found = []
    for path in package.rglob("*.py"):
        if (package / "store") in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Attribute) and node.attr in private):
                continue
            receiver = ast.unparse(node.value)
            if receiver not in ("self", "cls") and ("store" in receiver.lower() or node.attr not in common):
                found.append(f"{path.relative_to(package)}:{node.lineno}: {receiver}.{node.attr}")
    return found


def test_no_module_outside_the_store_reads_a_private_attribute_of_a_store():
    assert {"_table", "_init_unbound", "_storage", "_cache_rows"} <= _private_names()
    assert _private_reads(PACKAGE) == []


def test_the_scan_finds_a_private_read(tmp_path):
    """The scan sees what it looks for: the two reads the loader and the sharing module once made."""
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "inside.py").write_text("def key(store):\n    return store._table\n")
    (tmp_path / "loading.py").write_text("def key(store):\n    return store._table.data_ptr()\n\ndef new(s):\n    s._init_unbound(1)\n")
    assert sorted(_private_reads(tmp_path)) == ["loading.py:2: store._table", "loading.py:5: s._init_unbound"]
