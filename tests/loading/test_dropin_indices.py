"""dgl_zerocopy.DataLoader's indices against DGL 2.1's loader: their checks per type (node, edge and
partition ids, dicts), DDP's split rank by rank against DGL's own ``DDPTensorizedDataset`` (and a
real run of 2 gloo ranks on 127.0.0.1), the split among worker processes, ``seed=``'s opt-in order,
and the data checks at construction. The graphs, uses and comparisons are tests/loading/test_dropin_uses.py's.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest
import torch

dgl = pytest.importorskip("dgl")

from conftest import requires_cuda  # noqa: E402
from test_dropin_uses import (  # noqa: E402
    IDTYPES,
    USES,
    _LeafSampler,
    assert_both_fail_on_int32,
    assert_same,
    cluster_gcn,
    hetero,
    hetero_node_classification,
    homogeneous,
    ids,
    link_prediction_reverse_id,
    node_classification,
    run_both,
    saint,
    seed_all,
)

from dgl_zerocopy import DataLoader  # noqa: E402
from dgl_zerocopy.loading import dgl_options  # noqa: E402
from dgl_zerocopy.loading.seeds import EpochOrder, interleaved, worker_batches  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_messages(monkeypatch):
    monkeypatch.setattr(dgl_options, "_WARNED", set())
    monkeypatch.setattr(dgl_options, "_LOGGED", set())


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("n,world,batch", [(103, 3, 8), (8, 4, 3), (10, 2, 4)])
def test_ddp_split_is_dgls(monkeypatch, n, world, batch, drop_last, shuffle):
    """Each rank's ids, epoch by epoch, against DGL's DDPTensorizedDataset for that rank (its rank
    and world size given through torch.distributed's functions)."""
    from dgl.dataloading.dataloader import DDPTensorizedDataset

    indices = torch.arange(n) * 7 + 3
    for rank in range(world):
        monkeypatch.setattr(torch.distributed, "get_rank", lambda rank=rank: rank)
        monkeypatch.setattr(torch.distributed, "get_world_size", lambda: world)
        theirs = DDPTensorizedDataset(indices, batch, drop_last, 0, shuffle)
        ours = EpochOrder(n, batch, drop_last, shuffle, ddp=(rank, world))
        assert len(ours) == len(theirs)
        for epoch in range(3):
            np.random.seed(epoch)
            if shuffle:
                theirs.shuffle()
            expected = list(iter(theirs))
            np.random.seed(epoch)
            positions = ours.next_epoch(epoch)
            got = [indices[ours.batch(positions, i)] for i in range(len(ours))]
            assert [b.tolist() for b in got] == [b.tolist() for b in expected], f"rank {rank} epoch {epoch}"


def test_ddp_split_of_dict_indices_is_dgls(monkeypatch):
    from dgl.dataloading.dataloader import DDPTensorizedDataset

    g = hetero(torch.int64)
    indices = {"user": torch.arange(0, 50, 3), "item": torch.arange(0, 40, 4)}
    loader = DataLoader(g, indices, dgl.dataloading.NeighborSampler([1]), batch_size=5, shuffle=True, prefetch=0)
    for rank in range(3):
        monkeypatch.setattr(torch.distributed, "get_rank", lambda rank=rank: rank)
        monkeypatch.setattr(torch.distributed, "get_world_size", lambda: 3)
        theirs = DDPTensorizedDataset(indices, 5, False, 0, True)
        ours = EpochOrder(len(loader.seeds), 5, False, True, ddp=(rank, 3))
        np.random.seed(rank)
        theirs.shuffle()
        expected = list(iter(theirs))
        np.random.seed(rank)
        positions = ours.next_epoch(0)
        got = [loader.seeds.batch(ours.batch(positions, i)) for i in range(len(ours))]
        assert_same(got, expected, f"rank {rank}")


def test_a_rank_past_the_end_pads_from_the_start():
    """n < world: DGL reads uninitialised memory (or fails) for a rank with no seeds of its own."""
    orders = [EpochOrder(2, 1, False, True, ddp=(rank, 3)).next_epoch(0).tolist() for rank in range(3)]
    assert orders[2] == [0] and sorted(orders[0] + orders[1]) == [0, 1]


def test_worker_split_and_order_are_dgls():
    """DGL's _divide_by_worker: contiguous runs, the first workers one more; torch takes one from each in turn."""
    assert [list(worker_batches(7, w, 3)) for w in range(3)] == [[0, 1, 2], [3, 4], [5, 6]]
    assert interleaved(7, 3) == [0, 3, 5, 1, 4, 6, 2]
    assert interleaved(2, 4) == [0, 1]


def test_seed_opt_in_is_a_pure_function_of_the_epoch():
    a, b = EpochOrder(50, 8, False, True, seed=5), EpochOrder(50, 8, False, True, seed=5)
    np.random.seed(0)
    first = a.next_epoch(3)
    np.random.seed(1)
    assert torch.equal(first, b.next_epoch(3)) and not torch.equal(first, a.next_epoch(4))


@pytest.mark.parametrize(
    "indices,match",
    [
        (torch.tensor([0, 120]), "indices contain node 120, outside the graph's 120 nodes"),
        (torch.tensor([-1]), "indices contain node -1"),
        (torch.tensor([[1]]), "1-D"),
        (torch.tensor([0.5]), "int32/int64"),
    ],
)
def test_bad_node_ids_fail_at_construction(indices, match):
    g = homogeneous(torch.int64)
    with pytest.raises((IndexError, TypeError), match=match):
        DataLoader(g, indices, dgl.dataloading.NeighborSampler([2]))


def test_edge_ids_are_checked_as_edges_and_types_by_name(tmp_path):
    g, h = homogeneous(torch.int64), hetero(torch.int64)
    edges = dgl.dataloading.as_edge_prediction_sampler(dgl.dataloading.NeighborSampler([2]))
    DataLoader(g, torch.tensor([g.num_nodes(), g.num_edges() - 1]), edges)  # edge ids beyond the node count are fine
    with pytest.raises(IndexError, match=f"edge {g.num_edges()}, outside the graph's {g.num_edges()} edges"):
        DataLoader(g, torch.tensor([g.num_edges()]), edges)
    with pytest.raises(IndexError, match=r"indices\['item'\] contain node 40, outside the 40 nodes of type 'item'"):
        DataLoader(h, {"item": torch.tensor([40])}, dgl.dataloading.NeighborSampler([2]))
    with pytest.raises(IndexError, match=r"edge 300, outside the 300 edges of type \('user', 'click', 'item'\)"):
        DataLoader(h, {"click": torch.tensor([300])}, edges)
    with pytest.raises(KeyError, match="'shop'"):
        DataLoader(h, {"shop": torch.tensor([0])}, dgl.dataloading.NeighborSampler([2]))
    with pytest.raises(TypeError, match="give indices as a dict"):
        DataLoader(h, torch.tensor([0]), dgl.dataloading.NeighborSampler([2]))
    with pytest.raises(IndexError, match="partition 6, outside the sampler's 6 partitions"):
        DataLoader(g, torch.tensor([6]), cluster_gcn(torch.int64, tmp_path)[2])


def test_data_indexed_on_the_host_is_said_once(caplog):
    g = homogeneous(torch.int64)
    sampler = dgl.dataloading.NeighborSampler([2], prefetch_node_feats=["feat"], prefetch_edge_feats=["w"])
    with caplog.at_level(logging.INFO, logger="dgl_zerocopy.loading"):
        for _ in range(2):
            for _ in DataLoader(g, ids(40, torch.int64), sampler, batch_size=16, prefetch=0):
                pass
    said = [r for r in caplog.records if "'w'" in r.getMessage() and "indexed on the host" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in caplog.records]


def test_lazy_feature_leaves_served_by_indexing_are_said_once(caplog):
    """A sampler's LazyFeature leaves come from attach_data by indexing (no FeatureStore): said once
    through logging for two loaders, and the batches are DGL's loader's."""
    graph = homogeneous(torch.int64)
    score = torch.randn(graph.num_nodes(), 2)
    theirs_loader = dgl.dataloading.DataLoader(graph, ids(50, torch.int64), _LeafSampler(), batch_size=16, shuffle=True)
    theirs_loader.attach_data("score", score)
    seed_all(0)
    theirs = [tuple(batch) for batch in theirs_loader]
    with caplog.at_level(logging.INFO, logger="dgl_zerocopy.loading"):
        for _ in range(2):
            ours_loader = DataLoader(graph, ids(50, torch.int64), _LeafSampler(), batch_size=16, shuffle=True, prefetch=0)
            ours_loader.attach_data("score", score)
            seed_all(0)
            assert_same([(i.clone(), {"score": d["score"].clone()}) for i, d in ours_loader], theirs)
    said = [r.getMessage() for r in caplog.records if "LazyFeature leaves 'score'" in r.getMessage() and "by indexing" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in caplog.records]


def test_a_graph_dgl_cannot_move_is_said_once(caplog):
    """PyPI's DGL (a CPU build) cannot move a graph to CUDA: a subgraph sampler's graph stays on the
    CPU, said once through logging. collate.move as the loader calls it for a CUDA device, here on
    the CPU (nothing in a lone graph is moved: the loader on a GPU is the gpu test below)."""
    from dgl_zerocopy.loading.collate import move

    graph = homogeneous(torch.int64)
    subgraph = dgl.node_subgraph(graph, torch.arange(10))
    with caplog.at_level(logging.INFO, logger="dgl_zerocopy.loading"):
        for _ in range(2):
            output, graphs = move(subgraph, torch.device("cuda"), False, False, [])
            assert output is subgraph and graphs == [subgraph]
    said = [r.getMessage() for r in caplog.records if "stays on the CPU" in r.getMessage()]
    assert len(said) == 1 and "a graph of the sampler's output" in said[0], [r.getMessage() for r in caplog.records]


@pytest.mark.gpu
@requires_cuda
def test_a_subgraph_left_on_the_cpu_has_dgls_data_on_the_gpu(caplog, tmp_path):
    """The loader on a CUDA device with a CPU build of DGL: ClusterGCN's subgraphs stay on the CPU
    (said once), the same as DGL's loader's on the CPU, their marked data gathered onto the GPU."""
    if dgl_options.dgl_has_cuda():
        pytest.skip("a CUDA build of DGL moves the graph")
    graph, indices, sampler, kw = cluster_gcn(torch.int64, tmp_path)
    theirs = list(dgl.dataloading.DataLoader(graph, indices, sampler, **kw))
    with caplog.at_level(logging.INFO, logger="dgl_zerocopy.loading"):
        count = 0
        for ours in DataLoader(graph, indices, sampler, device="cuda", prefetch=0, **kw):
            dgls = theirs[count]
            assert ours.device == torch.device("cpu") and ours.ndata["feat"].is_cuda
            assert_same(ours.edges(form="all", order="eid"), dgls.edges(form="all", order="eid"), f"batch {count} edges")
            for view in ("ndata", "edata"):
                mine, reference = getattr(ours, view), getattr(dgls, view)
                assert sorted(mine.keys()) == sorted(reference.keys()), view
                for key in reference.keys():
                    assert_same(mine[key].cpu(), reference[key], f"batch {count} {view}[{key!r}]")
            count += 1
    assert count == len(theirs) > 1
    said = [r.getMessage() for r in caplog.records if "stays on the CPU" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in caplog.records]


def test_a_missing_name_fails_at_construction_naming_its_type():
    h = hetero(torch.int64)
    with pytest.raises(KeyError, match="'label'.*node type 'item'"):
        DataLoader(h, {"user": torch.tensor([0])}, dgl.dataloading.NeighborSampler([2], prefetch_labels={"item": ["label"]}))
    with pytest.raises(KeyError, match="'nope'"):
        DataLoader(
            h,
            {"click": torch.tensor([0])},
            dgl.dataloading.as_edge_prediction_sampler(dgl.dataloading.NeighborSampler([2]), prefetch_labels={"click": ["nope"]}),
        )


def test_features_and_labels_by_type_on_a_heterograph():
    h = hetero(torch.int64)
    loader = DataLoader(
        h,
        {"user": ids(30, torch.int64), "item": ids(20, torch.int64)},
        dgl.dataloading.NeighborSampler([2, 2]),
        features={("user", "feat"): h.nodes["user"].data["feat"], ("item", "feat"): h.nodes["item"].data["feat"]},
        labels={("user", "label"): h.nodes["user"].data["label"]},
        batch_size=8,
        prefetch=2,
    )
    assert set(loader.features) == {("user", "feat"), ("item", "feat")} and set(loader.labels) == {("user", "label")}
    for input_nodes, output_nodes, blocks in loader:
        for ntype in ("user", "item"):
            assert torch.equal(blocks[0].srcnodes[ntype].data["feat"], h.nodes[ntype].data["feat"][input_nodes[ntype]])
        if "user" in output_nodes:
            assert torch.equal(blocks[-1].dstnodes["user"].data["label"], h.nodes["user"].data["label"][output_nodes["user"]])
    with pytest.raises(TypeError, match=r"\(node type, name\) pairs on a heterograph"):
        DataLoader(h, {"user": ids(3, torch.int64)}, dgl.dataloading.NeighborSampler([2]), features={"feat": h.nodes["user"].data["feat"]})
    with pytest.raises(ValueError, match=r"has 40 rows but the graph has 60 nodes of type 'user'"):
        DataLoader(h, {"user": ids(3, torch.int64)}, dgl.dataloading.NeighborSampler([2]), features={("user", "feat"): h.nodes["item"].data["feat"]})


def _note_worker(worker_id: int) -> None:
    open(os.path.join(os.environ["DGL_ZEROCOPY_TEST_WORKERS"], f"{os.getpid()}-{worker_id}"), "w").close()


@pytest.mark.slow
def test_worker_init_fn_runs_in_each_sampling_process(tmp_path, monkeypatch):
    monkeypatch.setenv("DGL_ZEROCOPY_TEST_WORKERS", str(tmp_path))
    g = homogeneous(torch.int64)
    loader = DataLoader(g, ids(64, torch.int64), dgl.dataloading.NeighborSampler([2]), batch_size=8, num_workers=2, worker_init_fn=_note_worker, timeout=60)
    try:
        assert sum(1 for _ in loader) == len(loader)
    finally:
        loader.close()
    notes = sorted(p.name for p in tmp_path.iterdir())
    assert len(notes) == 2 and {n.split("-")[1] for n in notes} == {"0", "1"} and len({n.split("-")[0] for n in notes}) == 2, notes


def test_dgl_names_the_loader_relies_on_exist():
    """DGL's private names the collation uses, present in the installed DGL."""
    from dgl.dataloading import dataloader as dgl_loader
    from dgl.frame import Frame, LazyFeature

    g = dgl.graph(([0], [1]))
    assert isinstance(g._node_frames[0], Frame) and isinstance(g._edge_frames[0], Frame) and isinstance(g._node_frames[0]._columns, dict)
    assert {"name", "id_"} <= set(LazyFeature.__slots__)
    assert callable(dgl_loader.remove_parent_storage_columns) and callable(dgl_loader.restore_parent_storage_columns)
    assert callable(dgl.utils.recursive_apply)
    assert callable(dgl.dataloading.dataloader.DDPTensorizedDataset)  # the reference of the split tests


# -- a real 2-rank DDP run: every use, drop_last on and off, on 127.0.0.1 ------------------------------

# Also run with num_workers=2, drop_last off (DGL's padding) or on: (use, drop_last). A few, as each
# case forks 2 processes per loader and epoch (about 3 s on 2 cores).
DDP_WORKER_CASES = {(node_classification, False), (hetero_node_classification, False), (link_prediction_reverse_id, True), (saint, True)}


def _ddp_cases():
    """(use, drop_last, num_workers) for every use of tests/loading/test_dropin_uses.py."""
    return [(u, d, w) for u in USES for d in (False, True) for w in ((0, 2) if (u, d) in DDP_WORKER_CASES else (0,))]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _odd(indices):
    """``indices`` less their last id where their count is even: an odd count does not split evenly
    over 2 ranks (nor into whole batches), so DGL pads the last rank's share from its start
    (drop_last off) or drops an id (on), and the last batch of a share is a partial one."""
    if isinstance(indices, Mapping):
        last = list(indices)[-1]
        return indices if sum(len(v) for v in indices.values()) % 2 else {**indices, last: indices[last][:-1]}
    return indices if len(indices) % 2 else indices[:-1]


def _ddp_case(use, idtype, drop_last: bool, workers: int, tmp_path: Path) -> tuple[str, int]:
    graph, indices, sampler, kw = use(idtype, tmp_path)
    indices = _odd(indices)
    kw = {"batch_size": 16, "shuffle": True, **kw, "drop_last": drop_last, "use_ddp": True}
    if workers:
        # A process started by spawn (each rank here, as torch.multiprocessing.spawn starts ranks)
        # inherits spawn as its start method, so torch's DataLoader spawns its workers too: DGL's
        # generator is then seeded afresh in each, not from the rank's dgl.seed, and DGL's own
        # loader does not even repeat itself. Forked, each worker has the rank's DGL state, as
        # without DDP, and both loaders draw the same samples.
        kw.update(num_workers=workers, timeout=60, multiprocessing_context="fork")
    if use is cluster_gcn and idtype == torch.int32:
        assert_both_fail_on_int32(graph, indices, sampler, kw, prefetch=0)
        return "both raised", 0
    return "compared", run_both(graph, indices, sampler, dgl_kw=kw, prefetch=2 if workers else 0)


def _ddp_rank(rank: int, world: int, port: int, idtype: torch.dtype, tmp: str, out: str) -> None:
    """One rank: each use of tests/loading/test_dropin_uses.py with drop_last off and on (and num_workers=2
    for DDP_WORKER_CASES), our batches against DGL's loader's; every case runs, its outcome saved."""
    import datetime
    import traceback

    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    results = {}
    own = Path(tmp) / f"rank{rank}"  # the ClusterGCN sampler's cache, one per rank
    own.mkdir()
    try:
        dgl.utils.set_num_threads(1)
        for use, drop_last, workers in _ddp_cases():
            case = f"{use.__name__} drop_last={drop_last} num_workers={workers}"
            try:
                results[case] = _ddp_case(use, idtype, drop_last, workers, own)
            except Exception:  # every case runs; the test names each that failed
                results[case] = ("failed", traceback.format_exc(limit=-3))
    finally:
        torch.save(results, out)
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("idtype", IDTYPES, ids=["int64", "int32"])
def test_two_gloo_ranks_get_dgls_batches(tmp_path, idtype):
    """A real DDP run of 2 gloo ranks (one spawn per id dtype): in each rank, each use's batches
    against DGL's loader's, epoch by epoch from the same seed, an odd count of indices (DGL's padding)."""
    import torch.multiprocessing as mp

    port = _free_port()
    context = mp.get_context("spawn")
    outs = [str(tmp_path / f"rank{r}.pt") for r in range(2)]
    # Not daemonic: a rank starts its loaders' worker processes (killed below if it outlives the test).
    procs = [context.Process(target=_ddp_rank, args=(r, 2, port, idtype, str(tmp_path), outs[r])) for r in range(2)]
    for p in procs:
        p.start()
    try:
        deadline = time.monotonic() + 300
        for p in procs:
            p.join(max(1.0, deadline - time.monotonic()))
        assert [p.exitcode for p in procs] == [0, 0], "a rank failed or ran past 300 s"
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(10)
    results = [torch.load(out) for out in outs]
    cases = [f"{u.__name__} drop_last={d} num_workers={w}" for u, d, w in _ddp_cases()]
    for rank, outcome in enumerate(results):
        assert list(outcome) == cases, f"rank {rank} ran {list(outcome)}"
        failed = {case: text for case, (kind, text) in outcome.items() if kind == "failed"}
        assert not failed, f"rank {rank}:\n" + "\n".join(f"{case}: {text}" for case, text in failed.items())
        for case, (kind, compared) in outcome.items():
            int32_cluster = case.startswith("cluster_gcn") and idtype == torch.int32
            assert (kind, compared > 0) == (("both raised", False) if int32_cluster else ("compared", True)), f"rank {rank} {case}: {kind} {compared}"
    assert results[0] == results[1], "as many batches on each rank (DGL pads the shorter share)"
