"""FeatureStore with a hot-row cache (cache_bytes=): every gather equals features[ids] (or the
uncached store's decode) for every mix of cached and uncached rows, on every backend and device
that has one; the counters, the byte budget, the policies, pickling and the errors.

Device ``cpu`` runs the hit/miss logic with the cached rows in a separate CPU tensor; ``cuda``
(the ``cpu`` backend's misses-only copy and the ``zerocopy`` fused kernel) where a GPU exists."""

from __future__ import annotations

import pickle
import warnings
from multiprocessing.reduction import ForkingPickler

import pytest
import torch
from conftest import requires_cuda

from dgl_zerocopy import FeatureStore, compress
from dgl_zerocopy.store.cache import budget_for_rows, slot_map_nbytes

dgl = pytest.importorskip("dgl")

ROWS = 400
CODECS = [("fp16", {}), ("bf16", {}), ("int8", {}), ("int8", {"axis": "row"})]
# (backend, device): the cpu backend on both devices, the zero-copy kernel on CUDA.
PATHS = [
    ("cpu", "cpu"),
    pytest.param("cpu", "cuda", marks=[pytest.mark.gpu, requires_cuda]),
    pytest.param("zerocopy", "cuda", marks=[pytest.mark.gpu, requires_cuda]),
]


@pytest.fixture(scope="module")
def graph():
    """A graph whose degrees rank the rows strictly: node v has ROWS - v in-edges and as many
    out-edges, so ``degree`` (the default), ``in_degree`` and ``out_degree`` all cache rows 0, 1, 2,
    ... in that order."""
    dst = torch.cat([torch.full((ROWS - v,), v) for v in range(ROWS)])
    src = dst[torch.randperm(dst.numel(), generator=torch.Generator().manual_seed(0))]
    return dgl.graph((src, dst), num_nodes=ROWS)


def _table(cols: int = 37, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(ROWS, cols, generator=g) * 10.0 ** (torch.rand(cols, generator=g) * 2 - 1)


def _budget(table: torch.Tensor, rows: int) -> int:
    return budget_for_rows(rows, table.shape[1] * table.element_size(), table.shape[0])


def _mixes(cached: int) -> dict[str, torch.Tensor]:
    """Batches of every mix of hits (ids < cached) and misses (ids >= cached)."""
    g = torch.Generator().manual_seed(1)
    hits, misses = torch.arange(cached), torch.arange(cached, ROWS)
    return {
        "all hits": hits[torch.randperm(cached, generator=g)],
        "all misses": misses[torch.randperm(misses.numel(), generator=g)][:150],
        "alternating": torch.stack([hits[:50], misses[:50]], dim=1).flatten(),
        "random with repeats": torch.randint(0, ROWS, (333,), generator=g),
        "one hit": torch.tensor([0]),
        "one miss": torch.tensor([ROWS - 1]),
        "empty": torch.empty(0, dtype=torch.int64),
        "last row and first, twice": torch.tensor([ROWS - 1, 0, ROWS - 1, 0]),
    }


def _expected_hits(ids: torch.Tensor, cached: int) -> int:
    return int((ids < cached).sum())


@pytest.mark.parametrize("backend, device", PATHS)
@pytest.mark.parametrize("id_dtype", [torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("cols", [1, 37, 128])
def test_every_mix_of_hits_and_misses_equals_features_ids(graph, backend, device, id_dtype, cols):
    table, cached = _table(cols), 60
    store = FeatureStore(table, backend=backend, device=device, cache_bytes=_budget(table, cached), graph=graph)
    assert store.cache.num_cached == cached and torch.equal(store.cache.row_ids, torch.arange(cached))
    for name, ids in _mixes(cached).items():
        store.reset_cache_stats()
        ids = ids.to(id_dtype)
        got = store.gather(ids)
        assert got.device.type == device and torch.equal(got.cpu(), table[ids.long()]), name
        hits = _expected_hits(ids, cached)
        assert store.cache_stats() == {"hits": hits, "misses": ids.numel() - hits, "hit_rate": hits / ids.numel() if ids.numel() else 0.0}, name
        out = torch.full((ids.numel(), cols), float("nan"), device=device)  # into a caller's buffer, ids on the device
        assert store.gather(ids.to(device), out=out) is out and torch.equal(out.cpu(), table[ids.long()]), name
    store.close()


@pytest.mark.parametrize("backend, device", PATHS)
@pytest.mark.parametrize("codec, form", CODECS, ids=str)
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_a_compressed_table_caches_its_codes_and_decodes_hits_as_misses(graph, backend, device, codec, form, out_dtype):
    table = _table(45)
    codes = compress(table, codec, **form)
    plain = FeatureStore(codes, backend="cpu", device="cpu", out_dtype=out_dtype)
    row_bytes = 45 * codes.codes.element_size()
    store = FeatureStore(codes, backend=backend, device=device, out_dtype=out_dtype, graph=graph, cache_bytes=budget_for_rows(70, row_bytes, ROWS))
    assert store.cache.num_cached == 70 and store.cache.rows.dtype == store.stored_dtype  # codes, not decoded rows
    for name, ids in _mixes(70).items():
        got = store.gather(ids)
        assert got.dtype == out_dtype and torch.equal(got.cpu(), plain.gather(ids).clone()), name
    store.close()


def test_a_budget_holds_more_rows_of_codes_and_is_never_exceeded(graph):
    table = _table(64)
    budget = _budget(table, 50)
    for codec, rows in ((None, 50), ("fp16", 100), ("int8", 200)):
        store = FeatureStore(table, backend="cpu", device="cpu", compression=codec, cache_bytes=budget, graph=graph)
        assert store.cache.num_cached == rows, codec
        assert store.cache_nbytes == store.cache.nbytes == rows * 64 * store.stored_dtype.itemsize + slot_map_nbytes(ROWS, rows)
        assert store.cache_nbytes <= budget
    for budget in (0, 1, 4 * ROWS + 255, 4 * ROWS + 256, 10_000, 10**9):  # 0, too small, one row, ..., all rows
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "holds no row"
            store = FeatureStore(table, backend="cpu", device="cpu", cache_bytes=budget, graph=graph)
        assert store.cache_nbytes <= budget
        assert (store.cache is None) == (budget < 4 * ROWS + 256)


def test_without_a_cache_the_counters_stay_zero():
    store = FeatureStore(_table(), backend="cpu", device="cpu")
    store.gather(torch.arange(10))
    assert store.cache is None and store.cache_nbytes == 0 and store.cache_policy is None
    assert store.cache_stats() == {"hits": 0, "misses": 0, "hit_rate": 0.0}
    store.reset_cache_stats()


def test_a_budget_too_small_for_one_row_warns_and_caches_nothing(graph):
    with pytest.warns(UserWarning, match=r"cache_bytes=100 holds no row: the slot map takes 1600 bytes.*give at least 1748"):
        store = FeatureStore(_table(), backend="cpu", device="cpu", cache_bytes=100, graph=graph)
    assert store.cache is None and store.cache_nbytes == 0


def test_counters_accumulate_until_reset_and_rejected_batches_do_not_count(graph):
    table = _table()
    store = FeatureStore(table, backend="cpu", device="cpu", cache_bytes=_budget(table, 10), graph=graph)
    store.gather(torch.tensor([0, 1, 50]))
    store.gather(torch.tensor([9, 10]))
    assert store.cache_stats() == {"hits": 3, "misses": 2, "hit_rate": 0.6}
    with pytest.raises(IndexError, match=f"id {ROWS} at position 1"):
        store.gather(torch.tensor([0, ROWS]))
    assert store.cache_stats()["hits"] == 3
    store.reset_cache_stats()
    assert store.cache_stats() == {"hits": 0, "misses": 0, "hit_rate": 0.0}
    store.gather(torch.tensor([11]))
    assert store.cache_stats() == {"hits": 0, "misses": 1, "hit_rate": 0.0}


def test_presample_caches_the_rows_the_sampler_gathers_most(graph):
    from dgl_zerocopy.store.cache import presample_counts

    table, seeds = _table(), torch.arange(300, ROWS)
    sampler = dgl.dataloading.NeighborSampler([3])
    options = {"batch_size": 20, "epochs": 1.0, "seed": 3}
    dgl.seed(5)
    store = FeatureStore(
        table,
        backend="cpu",
        device="cpu",
        cache_bytes=_budget(table, 30),
        cache_policy="presample",
        graph=graph,
        sampler=sampler,
        seeds=seeds,
        presample_options=options,
    )
    dgl.seed(5)
    counts = presample_counts(graph, sampler, seeds, **options)
    assert store.cache_policy == "presample" and store.cache.num_cached == 30
    chosen = counts[store.cache.row_ids]
    assert int(chosen.min()) >= int(counts.sort(descending=True).values[29])  # the 30 most gathered rows
    ids = torch.randint(0, ROWS, (200,))
    assert torch.equal(store.gather(ids), table[ids])


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"cache_bytes": -1}, ValueError, r"cache_bytes must be >= 0"),
        ({"cache_bytes": 1.5}, TypeError, r"cache_bytes must be an integer"),
        (
            {"cache_bytes": 10**6, "cache_policy": "lru"},
            ValueError,
            r"cache_policy must be one of 'degree', 'in_degree', 'out_degree', 'presample', but got 'lru'",
        ),
        ({"cache_bytes": 10**6}, ValueError, r"needs graph="),
        ({"cache_bytes": 10**6, "graph": "other"}, ValueError, r"graph has 7 nodes but the feature table has 400 rows"),
        ({"cache_bytes": 10**6, "cache_policy": "presample", "graph": "own"}, ValueError, r"needs sampler= and seeds="),
        ({"cache_bytes": 10**6, "graph": "own", "presample_options": {"batchsize": 3}}, TypeError, r"presample_options takes batch_size"),
    ],
)
def test_bad_cache_arguments_fail_before_anything_is_made(graph, monkeypatch, kwargs, error, match):
    import dgl_zerocopy.store.feature_store as store_module

    made = []
    monkeypatch.setattr(store_module, "make_backend", lambda *a, **k: made.append(a))
    if kwargs.get("graph") == "own":
        kwargs = {**kwargs, "graph": graph}
    elif kwargs.get("graph") == "other":
        kwargs = {**kwargs, "graph": dgl.graph(([0], [1]), num_nodes=7)}
    with pytest.raises(error, match=match):
        FeatureStore(_table(), backend="cpu", device="cpu", **kwargs)
    assert made == []


def test_the_gpu_backend_ignores_a_cache_with_a_warning(graph):
    from dgl_zerocopy.store.feature_store import _rank_cache_rows

    table = _table()
    with pytest.warns(UserWarning, match=r"ignored with backend='gpu'"):
        assert _rank_cache_rows(table, "gpu", _budget(table, 10), "in_degree", graph, None, None, None) is None
    assert _rank_cache_rows(table, "cpu", _budget(table, 10), "in_degree", graph, None, None, None).tolist() == list(range(10))


@pytest.mark.parametrize("dumps", [pickle.dumps, ForkingPickler.dumps], ids=["pickle", "torch.multiprocessing"])
def test_a_pickled_store_sends_its_chosen_rows_and_builds_the_cache_where_it_binds(graph, tmp_path, dumps):
    import numpy as np

    table = _table()
    np.save(tmp_path / "feat.npy", table.numpy())
    store = FeatureStore(str(tmp_path / "feat.npy"), backend="cpu", device="cpu", cache_bytes=_budget(table, 25), graph=graph)
    clone = pickle.loads(dumps(store))
    assert clone.cache is None and clone.cache_nbytes == store.cache_nbytes  # unbound: known, not built
    ids = torch.randint(0, ROWS, (100,))
    assert torch.equal(clone.gather(ids), table[ids])
    assert clone.cache is not store.cache and torch.equal(clone.cache.row_ids, torch.arange(25))
    assert clone.cache_stats()["hits"] == _expected_hits(ids, 25)
    assert store.cache_stats()["hits"] == 0  # each process counts its own
    assert "cache=25 rows (degree)" in repr(clone)


def test_the_loader_maps_dgls_gpu_cache_rows_to_a_budget(graph, recwarn):
    from dgl_zerocopy import DataLoader

    table = _table()
    graph = graph.clone()
    graph.ndata["feat"] = table
    sampler = dgl.dataloading.NeighborSampler([4], prefetch_node_feats=["feat"])
    loader = DataLoader(graph, torch.arange(ROWS), sampler, batch_size=64, gpu_cache={"node": {"feat": 40}})
    store = loader.features["feat"]
    assert store.cache.num_cached == 40 and torch.equal(store.cache.row_ids, torch.arange(40))  # degree order
    assert store.cache_policy == "degree"
    seen = 0
    for input_nodes, _, blocks in loader:
        assert torch.equal(blocks[0].srcdata["feat"], table[input_nodes])
        seen += input_nodes.numel()
    stats = store.cache_stats()
    assert stats["hits"] + stats["misses"] == seen and stats["hits"] > 0
    assert not [w for w in recwarn if "gpu_cache" in str(w.message)]


@pytest.mark.parametrize("edge_dir", ["in", "out"])
def test_the_loader_caches_gpu_cache_rows_by_the_degree_its_sampler_follows(edge_dir):
    """On a directed graph DGL's gpu_cache rows are the highest out-degrees for in-edge sampling and the highest
    in-degrees for edge_dir="out"; with the in-degree ranking (the old choice) in-edge sampling would cache the
    rows it reads least."""
    from dgl_zerocopy import DataLoader

    src, dst = zip(*[(i, j) for i in range(40) for j in range(i + 1, 40)])  # i -> j for i < j: out-degree 39 - i, in-degree j
    graph = dgl.graph((torch.tensor(src), torch.tensor(dst)), num_nodes=40)
    graph.ndata["feat"] = torch.randn(40, 5)
    sampler = dgl.dataloading.NeighborSampler([3], edge_dir=edge_dir, prefetch_node_feats=["feat"])
    loader = DataLoader(graph, torch.arange(40), sampler, batch_size=8, gpu_cache={"node": {"feat": 10}})
    store = loader.features["feat"]
    expected = torch.arange(10) if edge_dir == "in" else torch.arange(39, 29, -1)
    assert store.cache_policy == "degree" and torch.equal(store.cache.row_ids, expected)
    for input_nodes, _, blocks in loader:
        assert torch.equal(blocks[0].srcdata["feat"], graph.ndata["feat"][input_nodes])


def test_the_store_ranks_by_out_degree_by_default_and_by_what_it_is_told(recwarn):
    src, dst = zip(*[(i, j) for i in range(40) for j in range(i + 1, 40)])
    graph = dgl.graph((torch.tensor(src), torch.tensor(dst)), num_nodes=40)
    table = torch.randn(40, 5)
    budget = budget_for_rows(10, 20, 40)
    rows = {
        policy: FeatureStore(table, backend="cpu", device="cpu", cache_bytes=budget, graph=graph, **kw).cache.row_ids.tolist()
        for policy, kw in [
            ("default", {}),
            ("in_degree", {"cache_policy": "in_degree"}),
            ("out_degree", {"cache_policy": "out_degree"}),
            ("degree, out-edges", {"sampler": dgl.dataloading.NeighborSampler([2], edge_dir="out")}),
        ]
    }
    assert rows == {
        "default": list(range(10)),
        "in_degree": list(range(39, 29, -1)),
        "out_degree": list(range(10)),
        "degree, out-edges": list(range(39, 29, -1)),
    }


@pytest.mark.parametrize(
    "gpu_cache, match",
    [
        ({"node": {"feat": -3}}, r"gpu_cache\['node'\]\['feat'\] must be a number of rows in \[0, 400\]"),
        ({"node": {"feat": 401}}, r"gpu_cache\['node'\]\['feat'\] must be a number of rows in \[0, 400\]"),
        ({"edge": {"w": 10}}, r"edge features are not cached"),
        ({"node": {"nope": 10}}, r"gpu_cache names node feature 'nope'"),
    ],
)
def test_the_loader_rejects_a_bad_gpu_cache(graph, gpu_cache, match):
    from dgl_zerocopy import DataLoader

    graph = graph.clone()
    graph.ndata["feat"] = _table()
    sampler = dgl.dataloading.NeighborSampler([4], prefetch_node_feats=["feat"])
    with pytest.raises(ValueError, match=match):
        DataLoader(graph, torch.arange(ROWS), sampler, batch_size=64, gpu_cache=gpu_cache)


def test_the_dgl_native_route_and_the_prefetch_pipeline_gather_through_the_cache(graph):
    from dgl_zerocopy import DataLoader
    from dgl_zerocopy.loading.dgl import ZeroCopyStorage

    table = _table()
    store = FeatureStore(table, backend="cpu", device="cpu", cache_bytes=_budget(table, 100), graph=graph)
    storage = ZeroCopyStorage(store)
    ids = torch.randint(0, ROWS, (77,))
    assert torch.equal(storage.fetch(ids, torch.device("cpu")), table[ids])
    store.reset_cache_stats()
    sampler = dgl.dataloading.NeighborSampler([5, 5])
    loader = DataLoader(graph, torch.arange(ROWS), sampler, batch_size=50, shuffle=True, features={"x": store}, prefetch=3)
    rows = 0
    for input_nodes, _, blocks in loader:
        assert torch.equal(blocks[0].srcdata["x"], table[input_nodes])
        rows += input_nodes.numel()
    stats = store.cache_stats()
    assert stats["hits"] + stats["misses"] == rows and 0 < stats["hit_rate"] < 1


@pytest.mark.gpu
@requires_cuda
def test_the_cpu_backend_on_cuda_copies_only_the_misses(graph):
    table = _table(64)
    store = FeatureStore(table, backend="cpu", device="cuda", cache_bytes=_budget(table, 100), graph=graph)
    ids = torch.cat([torch.arange(100), torch.arange(100, 130)])  # 100 hits, 30 misses
    got = store.gather(ids)
    torch.cuda.synchronize()
    assert torch.equal(got.cpu(), table[ids])
    assert store._backend._staging.shape[0] == 30  # the staging buffer (and the copy) held the misses only
    assert store.cache_nbytes <= _budget(table, 100) and torch.cuda.memory_allocated() >= store.cache_nbytes
    side = torch.cuda.Stream()
    out = store.gather(ids.cuda(), stream=side)
    torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(out.cpu(), table[ids])


# -- training: config, sources, CLI ----------------------------------------------------------


@pytest.mark.parametrize(
    "text, parsed",
    [
        ("10%", ("rows", 0.1)),
        ("0", ("bytes", 0)),
        (0, ("bytes", 0)),
        ("512MiB", ("bytes", 2**29)),
        ("2GB", ("bytes", 2 * 10**9)),
        ("1.5 KiB", ("bytes", 1536)),
        ("1000", ("bytes", 1000)),
    ],
)
def test_feature_cache_sizes_parse(text, parsed):
    from dgl_zerocopy.training.config import build_config, parse_cache_size

    assert parse_cache_size(text) == parsed
    assert build_config({}, {"feature_cache": text}).feature_cache == str(text).strip()


@pytest.mark.parametrize("text", ["x", "150%", "-1", "5TB", "inf", "nan", "-2%"])
def test_bad_feature_cache_sizes_are_one_line_errors(text):
    from dgl_zerocopy.training.config import ConfigError, build_config

    with pytest.raises(ConfigError, match=r"^feature_cache .* is not a cache size: give a share of the rows \(10%\)"):
        build_config({}, {"feature_cache": text})


def test_a_cache_needs_a_featurestore_source_and_a_known_policy():
    from dgl_zerocopy.training.config import ConfigError, build_config

    with pytest.raises(ConfigError, match="feature_cache '5%' needs a FeatureStore feature source"):
        build_config({}, {"feature_cache": "5%", "feature_source": "dgl"})
    assert build_config({}, {"feature_cache": "0", "feature_source": "dgl"}).feature_cache == "0"
    with pytest.raises(ConfigError, match="cache_policy"):
        build_config({}, {"cache_policy": "lru"})


@pytest.mark.parametrize("source_name", ["cpu", "dgl-storage"])
@pytest.mark.parametrize("policy, compression", [("in_degree", None), ("presample", None), ("in_degree", "int8")])
def test_sources_with_a_cache_yield_features_ids_and_count_every_row(small_dataset, source_name, policy, compression):
    from dgl_zerocopy.loading.timing import StageTimer
    from dgl_zerocopy.training.sources import CacheRequest, make_source

    nodes = torch.from_numpy(small_dataset.train_idx)
    features = torch.from_numpy(small_dataset.features)
    request = CacheRequest("20%", policy, seeds=nodes, batch_size=100)
    source = make_source(source_name, small_dataset, [5, 3], torch.device("cpu"), compression=compression, cache=request)
    store = source.features
    assert source.has_cache and store.cache.num_cached == round(0.2 * small_dataset.num_nodes)
    reference = make_source(source_name, small_dataset, [5, 3], torch.device("cpu"), compression=compression).features
    cached = torch.zeros(small_dataset.num_nodes, dtype=torch.bool)
    cached[store.cache.row_ids] = True
    source.reset_cache_stats()
    hits = rows = 0
    for blocks, x, _ in source.batches(nodes, 100, True, StageTimer()):
        input_ids = blocks[0].srcdata["_ID"]
        assert torch.equal(x, reference.gather(input_ids).clone() if compression else features[input_ids])
        hits, rows = hits + int(cached[input_ids].sum()), rows + input_ids.numel()
    assert source.cache_stats() == {"hits": hits, "misses": rows - hits, "hit_rate": hits / rows}
    source.close()
    reference.close()


def test_training_reports_the_cache_hit_rate_per_epoch(small_dataset, capsys):
    from dgl_zerocopy.cli import main
    from dgl_zerocopy.training.config import TrainConfig
    from dgl_zerocopy.training.train import train

    cfg = TrainConfig(fanouts=[5, 5], batch_size=64, hidden=32, epochs=2, lr=0.01, device="cpu", dropout=0.2, feature_cache="30%")
    history = train(cfg, small_dataset, progress=False)
    assert all(0.3 < h.cache_hit_rate < 1 for h in history)  # the hottest 30 % of rows are more than 30 % of the reads
    assert history[-1].test_acc > 1 / small_dataset.num_classes + 0.4
    assert "cache hits" in history[-1].line()
    assert train(cfg.model_copy(update={"feature_cache": "0", "epochs": 1}), small_dataset, progress=False)[0].cache_hit_rate is None
    assert (
        main(
            [
                "train",
                "--num-nodes",
                "3000",
                "--epochs",
                "1",
                "--fanouts",
                "5,5",
                "--batch-size",
                "256",
                "--hidden",
                "16",
                "--device",
                "cpu",
                "--no-progress",
                "--feature-cache",
                "10%",
                "--cache-policy",
                "presample",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "cache 10% (presample)" in out and "| cache hits " in out and "final test accuracy" in out


def test_a_ranking_of_your_own_needs_no_graph():
    from dgl_zerocopy.store.cache import CachePolicy

    table = _table()
    order = torch.randperm(ROWS, generator=torch.Generator().manual_seed(4))
    store = FeatureStore(table, backend="cpu", device="cpu", cache_bytes=_budget(table, 33), cache_policy=CachePolicy(order))
    assert store.cache_policy == "custom" and torch.equal(store.cache.row_ids, order[:33])
    ids = torch.randint(0, ROWS, (300,))
    assert torch.equal(store.gather(ids), table[ids])
    in_cache = torch.zeros(ROWS, dtype=torch.bool)
    in_cache[order[:33]] = True
    assert store.cache_stats()["hits"] == int(in_cache[ids].sum())
    with pytest.raises(ValueError, match="cache_policy ranks 10 rows but the feature table has 400"):
        FeatureStore(table, backend="cpu", device="cpu", cache_bytes=10**5, cache_policy=CachePolicy(torch.arange(10)))
    with pytest.raises(TypeError, match="order must be a 1-D int32/int64 tensor"):
        CachePolicy(torch.rand(5))
