"""dgl_zerocopy.DataLoader as a drop-in for DGL 2.1's: the signature, DGL's keywords, the sampler's
prefetch lists, int32 graphs, worker processes, and DGL's own example switched by one line."""

from __future__ import annotations

import difflib
import inspect
import multiprocessing
import os
import re
import warnings

import numpy as np
import pytest
import torch

dgl = pytest.importorskip("dgl")

from conftest import REPO  # noqa: E402
from script_runs import metric, run_side_by_side, start_in_own_session  # noqa: E402

from dgl_zerocopy import DataLoader, FeatureStore  # noqa: E402
from dgl_zerocopy.loading import dgl_options  # noqa: E402
from dgl_zerocopy.loading.seeds import EpochOrder, interleaved  # noqa: E402


@pytest.fixture
def graph(small_dataset):
    return small_dataset.to_dgl(with_data=True)


@pytest.fixture
def train_idx(small_dataset):
    return torch.from_numpy(small_dataset.train_idx)


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(dgl_options, "_WARNED", set())


def _prefetching_sampler(fanouts=(4, 2)):
    return dgl.dataloading.NeighborSampler(list(fanouts), prefetch_node_feats=["feat"], prefetch_labels=["label"])


def test_signature_is_dgls_up_to_its_last_argument():
    ours = list(inspect.signature(DataLoader.__init__).parameters.values())
    theirs = list(inspect.signature(dgl.dataloading.DataLoader.__init__).parameters.values())
    positional = [p for p in theirs if p.kind is not p.VAR_KEYWORD]
    assert [(p.name, p.default) for p in ours[: len(positional)]] == [(p.name, p.default) for p in positional]
    assert ours[-1].kind is inspect.Parameter.VAR_KEYWORD
    extras = [p for p in ours[len(positional) : -1]]
    assert all(p.kind is p.KEYWORD_ONLY for p in extras) and {"features", "labels", "prefetch"} <= {p.name for p in extras}


def test_dgls_call_with_every_keyword_runs_and_matches_the_graph(graph, train_idx):
    """The call of DGL's examples, verbatim, plus the torch keywords DGL forwards."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pin_prefetcher warns; tested below
        loader = DataLoader(
            graph,
            train_idx,
            _prefetching_sampler(),
            device="cpu",
            use_ddp=False,
            ddp_seed=0,
            batch_size=256,
            drop_last=False,
            shuffle=True,
            use_prefetch_thread=None,
            use_alternate_streams=None,
            pin_prefetcher=None,
            use_uva=False,
            gpu_cache=None,
            num_workers=0,
            persistent_workers=False,
            timeout=0,
            worker_init_fn=None,
        )
    seen = []
    for input_nodes, output_nodes, blocks in loader:
        torch.testing.assert_close(blocks[0].srcdata["feat"], graph.ndata["feat"][input_nodes])
        torch.testing.assert_close(blocks[-1].dstdata["label"], graph.ndata["label"][output_nodes])
        seen.append(output_nodes)
    assert len(seen) == len(loader) == -(-len(train_idx) // 256)
    assert torch.equal(torch.cat(seen).sort().values, train_idx.sort().values)


def test_defaults_are_dgls(graph, train_idx):
    loader = DataLoader(graph, train_idx, dgl.dataloading.NeighborSampler([2]))
    assert (loader.batch_size, loader.shuffle, loader.drop_last, loader.device) == (1, False, False, torch.device("cpu"))
    iterator = iter(loader)
    first = [next(iterator)[1] for _ in range(3)]  # batches of one seed, in order
    assert torch.cat(first).tolist() == train_idx[:3].tolist()


def test_unknown_keywords_fail_like_a_python_call(graph, train_idx):
    with pytest.raises(TypeError, match="no_such_option"):
        DataLoader(graph, train_idx, dgl.dataloading.NeighborSampler([2]), no_such_option=1)
    with pytest.raises(TypeError, match="collate_fn"):
        DataLoader(graph, train_idx, dgl.dataloading.NeighborSampler([2]), collate_fn=lambda x: x)


@pytest.mark.parametrize("kw,phrase", [(dict(pin_prefetcher=True), "has no effect")])  # use_uva: tests/loading/test_loader_gpu_sampling.py
def test_options_that_cannot_apply_warn_once(graph, train_idx, kw, phrase):
    with pytest.warns(UserWarning, match=phrase):
        DataLoader(graph, train_idx, dgl.dataloading.NeighborSampler([2]), device="cpu", **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        DataLoader(graph, train_idx, dgl.dataloading.NeighborSampler([2]), device="cpu", **kw)


def test_use_prefetch_thread_false_means_no_thread(graph, train_idx):
    assert DataLoader(graph, train_idx, dgl.dataloading.NeighborSampler([2]), use_prefetch_thread=False).prefetch == 0
    assert DataLoader(graph, train_idx, dgl.dataloading.NeighborSampler([2]), use_prefetch_thread=True, prefetch=0).prefetch == 1


def test_the_samplers_prefetch_lists_are_served_and_the_sampler_left_alone(graph, train_idx):
    sampler = _prefetching_sampler()
    train = DataLoader(graph, train_idx, sampler, batch_size=100, shuffle=True)
    val = DataLoader(graph, train_idx[:50], sampler, batch_size=100)
    assert train.features["feat"] is val.features["feat"], "two loaders over one tensor share one store"
    assert sampler.prefetch_node_feats == ["feat"] and sampler.prefetch_labels == ["label"]
    input_nodes, output_nodes, blocks = next(iter(val))
    torch.testing.assert_close(blocks[0].srcdata["feat"], graph.ndata["feat"][input_nodes])
    torch.testing.assert_close(blocks[-1].dstdata["label"], graph.ndata["label"][output_nodes])
    # DGL's own loader still works with the same sampler (its lazy features are still requested).
    _, _, dgl_blocks = next(iter(dgl.dataloading.DataLoader(graph, train_idx[:50], sampler, batch_size=100)))
    torch.testing.assert_close(dgl_blocks[0].srcdata["feat"], graph.ndata["feat"][dgl_blocks[0].srcdata[dgl.NID]])


def test_a_store_given_explicitly_is_the_one_the_prefetch_list_uses(graph, train_idx):
    store = FeatureStore(graph.ndata["feat"], backend="cpu", device="cpu")
    explicit = DataLoader(graph, train_idx, dgl.dataloading.NeighborSampler([2]), features={"feat": store})
    implicit = DataLoader(graph, train_idx, _prefetching_sampler())
    assert explicit.features["feat"] is store and implicit.features["feat"] is store


def test_a_missing_prefetch_name_fails_at_construction(graph, train_idx):
    with pytest.raises(KeyError, match="'h'"):
        DataLoader(graph, train_idx, dgl.dataloading.NeighborSampler([2], prefetch_node_feats=["h"]))
    with pytest.raises(KeyError, match="prefetch_edge_feats names 'w'"):
        DataLoader(graph, train_idx, dgl.dataloading.NeighborSampler([2], prefetch_edge_feats=["w"]))


def test_int32_graphs_and_seeds_work_as_in_dgl(graph, train_idx):
    g32 = graph.int()
    loader = DataLoader(g32, train_idx.int(), _prefetching_sampler(), batch_size=128, shuffle=True, prefetch=1)
    batches = 0
    for input_nodes, output_nodes, blocks in loader:
        assert input_nodes.dtype == output_nodes.dtype == torch.int32
        torch.testing.assert_close(blocks[0].srcdata["feat"], g32.ndata["feat"][input_nodes.long()])
        batches += 1
    assert batches == len(loader)


def test_a_kept_feature_tensor_that_gets_overwritten_warns_once(graph, train_idx):
    loader = DataLoader(graph, train_idx, _prefetching_sampler(), batch_size=32, prefetch=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in loader:  # the usual loop keeps nothing
            pass
        for _ in loader:  # nor does a second epoch, though the loop variable still holds the last batch
            pass
    kept = []
    with pytest.warns(UserWarning, match="still referenced") as record:
        for _, _, blocks in loader:
            kept.append(blocks[0].srcdata["feat"])
    assert len([w for w in record if "still referenced" in str(w.message)]) == 1


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("n,world", [(103, 3), (8, 4), (2, 3)])
def test_seeded_ddp_split_deals_all_seeds_anew_each_epoch(n, world, drop_last):
    """seed= (opt-in): every epoch one permutation of all seeds by ddp_seed, the same on every rank,
    cut into equal parts (DGL's own split, the default, is tested in tests/loading/test_dropin_uses.py)."""
    ranks = [EpochOrder(n, 4, drop_last, True, ddp=(rank, world), seed=0, ddp_seed=11) for rank in range(world)]
    per_rank = n // world if drop_last else -(-n // world)
    for epoch in range(2):
        parts = [order.next_epoch(epoch) for order in ranks]
        assert {len(p) for p in parts} == {per_rank}
        assert len({len(order) for order in ranks}) == 1, "every rank has as many batches"
        together = torch.cat(parts)
        if drop_last:
            assert len(set(together.tolist())) == len(together) == per_rank * world  # disjoint, the rest dropped
        else:
            assert set(together.tolist()) == set(range(n))  # covered; the padding repeats seeds
    assert not torch.equal(ranks[0].next_epoch(0), ranks[0].next_epoch(1)) or n < 4, "reshuffled every epoch"


def _children():
    return {p.pid for p in multiprocessing.active_children()} | _psutil_children()


def _psutil_children():
    import psutil

    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.mark.slow
@pytest.mark.parametrize("persistent", [False, True])
def test_worker_processes_sample_the_same_seeds(graph, train_idx, persistent):
    """The same seeds in the same batches, in DGL's order with processes: each samples a
    contiguous run of the epoch's batches and torch takes one from each in turn."""
    serial = DataLoader(graph, train_idx, _prefetching_sampler(), batch_size=100, shuffle=True, seed=5)
    workers = DataLoader(
        graph, train_idx, _prefetching_sampler(), batch_size=100, shuffle=True, seed=5, num_workers=2, persistent_workers=persistent, timeout=60
    )
    before = _children()
    for epoch in range(2):
        in_order = [output_nodes for _, output_nodes, _ in serial]
        expected = [in_order[i] for i in interleaved(len(in_order), 2)]
        got = []
        for input_nodes, output_nodes, blocks in workers:
            torch.testing.assert_close(blocks[0].srcdata["feat"], graph.ndata["feat"][input_nodes])
            got.append(output_nodes)
        assert [o.tolist() for o in got] == [o.tolist() for o in expected], f"epoch {epoch}"
    if not persistent:
        assert _children() == before, "no sampling process is left after the epochs"
    for _ in zip(range(2), workers):  # leave an epoch early
        pass
    workers.close()
    del workers
    import gc

    gc.collect()
    assert _children() <= before | set(), "no sampling process is left after the loader is gone"


# -- DGL's GraphSAGE example, switched by one line (two on a GPU with PyPI's DGL) -----------------

EXAMPLE = REPO / "examples" / "node_classification.py"
ONE_LINE = ("from dgl.dataloading import DataLoader\n", "from dgl_zerocopy import DataLoader\n")
NN_LINE = ("import dgl.nn as dglnn\n", "import dgl_zerocopy.nn as dglnn\n")


def _variant(tmp_path, *changes) -> tuple:
    text = EXAMPLE.read_text()
    for old, new in changes:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path = tmp_path / f"example_{len(changes)}.py"
    path.write_text(text)
    changed = [
        line
        for line in difflib.unified_diff(EXAMPLE.read_text().splitlines(), text.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    return path, changed


def _test_accuracies(scripts, seed: int) -> list[float]:
    """Run the scripts side by side (CPU) and read their test accuracies."""
    outputs = run_side_by_side(scripts, ["--num-nodes", "20000", "--seed", seed, "--mode", "cpu"])
    return [metric(r"Test Accuracy ([0-9.]+)", out) for out in outputs]


@pytest.mark.slow
def test_dgls_example_switched_by_one_line_reaches_its_accuracy(tmp_path):
    one_line, changed = _variant(tmp_path, ONE_LINE)
    assert len(changed) == 2, changed  # one line out, one line in
    two_lines, changed = _variant(tmp_path, ONE_LINE, NN_LINE)
    assert len(changed) == 4, changed
    # Seeds 0-3, the mean of each version. Measured here, seeds 0-13 (13 s a seed, three at a time): the
    # original 0.66-0.71; a seed's difference from it has a spread (sd) of 0.009 with our DataLoader and
    # 0.020 with our layers too (reaching 0.044), so one seed bounded by 0.05 was a 2.5-sd bound. The mean
    # of four seeds has sd 0.010: 0.05 is a 5-sd bound.
    figures = np.array([_test_accuracies([EXAMPLE, one_line, two_lines], seed) for seed in range(4)])
    assert figures.min() > 0.5, figures  # 47 classes: chance is about 0.02
    original, switched, with_our_layers = figures.mean(axis=0)
    assert abs(switched - original) < 0.05, figures
    assert abs(with_our_layers - original) < 0.05, figures


MULTI = REPO / "examples" / "multi_gpu_node_classification.py"


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_dgls_multi_gpu_example_switched_by_one_line_trains_with_ddp(tmp_path):
    """Two gloo ranks on 127.0.0.1 each, DGL's loader against ours with use_ddp=True."""
    text = MULTI.read_text()
    assert text.count(ONE_LINE[0]) == 1
    switched = tmp_path / "multi_switched.py"
    switched.write_text(text.replace(*ONE_LINE))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    runs = [
        start_in_own_session(script, "--cpu-procs", "2", "--num-nodes", "20000", "--epochs", "5", "--port", _free_port(), env=env)
        for script in (MULTI, switched)
    ]
    accuracies = []
    try:
        for run, dgls_own in zip(runs, (True, False)):
            out, err = run.communicate(timeout=300)
            # DGL's own loader (the unswitched script, the baseline) now and then aborts a rank at exit, after the
            # job printed its test accuracy: a C++ thread of DGL's still alive when the interpreter ends ("terminate
            # called without an active exception", SIGABRT; seen once in three CI runs). Its figure stands; ours must exit 0.
            aborted_at_exit = dgls_own and "terminate called without an active exception" in err and "Test accuracy" in out
            assert run.returncode == 0 or aborted_at_exit, out[-2000:] + err[-4000:]
            accuracies.append(float(re.search(r"Test accuracy ([0-9.]+)", out).group(1)))
    finally:
        for run in runs:
            if run.poll() is None:
                os.killpg(run.pid, 9)  # the spawned ranks too
    original, ours = accuracies
    assert original > 0.3, original  # 5 epochs, 47 classes: chance is about 0.02
    assert abs(ours - original) < 0.05, accuracies
