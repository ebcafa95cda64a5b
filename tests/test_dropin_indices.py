"""dgl_zerocopy.DataLoader's indices against DGL 2.1's loader: their checks per type (node, edge and
partition ids, dicts), DDP's split rank by rank against DGL's own ``DDPTensorizedDataset`` (and a
real run of 2 gloo ranks on 127.0.0.1), the split among worker processes, ``seed=``'s opt-in order,
and the data checks at construction. The graphs, uses and comparisons are tests/test_dropin_uses.py's.
"""

from __future__ import annotations

import logging
import os
import socket

import numpy as np
import pytest
import torch

dgl = pytest.importorskip("dgl")

from test_dropin_uses import assert_same, cluster_gcn, hetero, homogeneous, ids, node_classification, seed_all  # noqa: E402

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


# -- a real 2-rank DDP run ------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ddp_rank(rank: int, world: int, port: int, drop_last: bool, out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=__import__("datetime").timedelta(seconds=60))
    try:
        dgl.utils.set_num_threads(1)
        graph, indices, sampler, _ = node_classification(torch.int64, None)
        kw = {"batch_size": 16, "shuffle": True, "drop_last": drop_last, "use_ddp": True}
        theirs_loader = dgl.dataloading.DataLoader(graph, indices, sampler, device="cpu", **kw)
        ours_loader = DataLoader(graph, indices, sampler, prefetch=0, **kw)
        seen = []
        for epoch in range(2):
            seed_all(epoch)
            theirs = list(theirs_loader)
            seed_all(epoch)
            count = 0
            for batch in ours_loader:
                assert_same(batch, theirs[count], f"rank {rank} epoch {epoch} batch {count}")
                seen.append(batch[1].tolist())
                count += 1
            assert count == len(theirs) == len(ours_loader)
        torch.save(seen, out)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("drop_last", [False, True])
def test_two_gloo_ranks_get_dgls_batches(tmp_path, drop_last):
    import torch.multiprocessing as mp

    port = _free_port()
    context = mp.get_context("spawn")
    outs = [str(tmp_path / f"rank{r}.pt") for r in range(2)]
    procs = [context.Process(target=_ddp_rank, args=(r, 2, port, drop_last, outs[r]), daemon=True) for r in range(2)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(120)
            assert p.exitcode == 0, f"rank exited with {p.exitcode}"
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
    seen = [torch.load(out) for out in outs]
    counts = [sum(len(b) for b in rank_batches) for rank_batches in seen]
    assert counts[0] == counts[1] > 0, "as many seeds on each rank"
    mine = [{i for b in rank_batches for i in b} for rank_batches in seen]
    assert not mine[0] & mine[1], "each rank keeps its own chunk of the seeds (90 of them: no padding)"
