"""Snapshot sampling at its limits: memory bounded by the graph, whatever
``snapshot_size`` asks (a node never holds more slots than in-edges; the pick tables stop at
``TABLE_SLOTS``), and a graph changed in place (``remove_edges``, ``add_nodes``) announced and sampled
as it is now, never from a stale snapshot; persistent workers, which never see a refresh, warned of."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

dgl = pytest.importorskip("dgl")

from test_snapshot import check_blocks, random_graph, stars  # noqa: E402

from dgl_zerocopy.sampling import GpuSnapshotSampler, SnapshotSampler, release, shared_graph, snapshot_gpu  # noqa: E402
from dgl_zerocopy.sampling.snapshot_csc import TABLE_SLOTS, PickTables, Snapshot  # noqa: E402


def issue_graph():
    """The issue's graph: 2,000 nodes, 40,000 random edges (largest in-degree about 40)."""
    return random_graph(num_nodes=2000, num_edges=40_000, seed=0)


def holds_every_in_edge(g, snap) -> bool:
    return torch.equal((snap.indptr[1:] - snap.indptr[:-1]).long().cpu(), g.in_degrees().long()) and snap.eid.numel() == g.num_edges()


# -- item 4: memory bounded by the graph --------------------------------------------------------------


@pytest.mark.parametrize("size", [10**6, 10**9, 10**30])
def test_a_snapshot_size_above_every_in_degree_costs_what_the_largest_in_degree_costs(size):
    """Before: 10**6 held 7.2 GB (pick tables of snapshot_size rows), 10**9 asked for 7 TB."""
    g = issue_graph()
    largest = int(g.in_degrees().max())
    torch.manual_seed(0)
    tight = SnapshotSampler([7, 3], snapshot_size=largest)
    tight.sample(g, torch.arange(64))
    torch.manual_seed(0)
    sampler = SnapshotSampler([7, 3], snapshot_size=size)
    assert sampler.snapshot_size == size  # the option as given; the memory follows the graph
    seeds = torch.randperm(g.num_nodes())[:200]
    check_blocks(g, seeds, [7, 3], *sampler.sample(g, seeds))
    assert holds_every_in_edge(g, sampler.snapshot)
    assert sampler.state_nbytes == tight.state_nbytes < 2 * 2**20
    assert sampler.refresh_snapshot() == 0, "every node holds all its in-edges: nothing to redraw"


def test_nodes_of_more_slots_than_the_tables_hold_are_picked_uniformly():
    """Slot counts above TABLE_SLOTS are drawn at each visit (draw_subsets): each slot picked in a share
    fanout / slots of the visits, none twice per visit; the tables stay TABLE_SLOTS deep."""
    slots, fanout, visits = TABLE_SLOTS + 44, 3, 20_000
    snap = Snapshot(torch.tensor([0, slots], dtype=torch.int32), torch.arange(slots, dtype=torch.int32), torch.arange(slots, dtype=torch.int32))
    torch.manual_seed(1)
    tables = PickTables(10**6, 8)
    assert tables.limit == TABLE_SLOTS and tables.nbytes <= TABLE_SLOTS * tables.rows * 8 * 2
    indptr, src, eid = tables.pick(snap, torch.zeros(visits, dtype=torch.int64), fanout)
    assert torch.equal(indptr, torch.arange(0, fanout * visits + 1, fanout)) and torch.equal(src.long(), eid.long())
    rows = src.view(visits, fanout).long().sort(1).values
    assert (rows[:, 1:] != rows[:, :-1]).all(), "a slot twice in one visit"
    counts = torch.bincount(src.long(), minlength=slots).double()
    p = fanout / slots
    assert (counts - visits * p).abs().max() <= 5 * math.sqrt(visits * p * (1 - p)), counts


def test_a_frontier_mixing_nodes_above_and_below_the_table_limit_gives_valid_blocks():
    """Hubs of 300 and 700 in-edges (above TABLE_SLOTS) beside small nodes, in one layer: every
    destination gets min(in-degree, fanout) distinct in-edges of its own, with their edge ids."""
    hubs = stars(2, 700)
    src, dst = hubs.edges()
    dst = torch.where((dst == 1) & (src % 7 < 3), torch.full_like(dst, 2), dst)  # node 2: about 300 of node 1's edges
    extra_src, extra_dst = torch.randint(0, 1400, (3000,), generator=torch.Generator().manual_seed(2)), torch.randint(3, 1400, (3000,))
    g = dgl.graph((torch.cat([src, extra_src]), torch.cat([dst, extra_dst])), num_nodes=hubs.num_nodes())
    assert int((g.in_degrees() > TABLE_SLOTS).sum()) >= 2
    torch.manual_seed(3)
    sampler = SnapshotSampler([5, 400], snapshot_size=10**6, refresh=0.5)
    seeds = torch.cat([torch.arange(3), torch.randint(3, 1400, (40,)).unique()])
    for _ in range(3):
        check_blocks(g, seeds, [5, 400], *sampler.sample(g, seeds))
        sampler.refresh_snapshot()


def test_the_gpu_build_asks_the_kernels_for_at_most_the_largest_in_degree(monkeypatch):
    """Before: a fanout of snapshot_size per build pass (an int32 kernel argument) and one node per
    pass (CHUNK_PICKS // snapshot_size = 0): 2,000 passes here, one per node of a large graph."""
    g = issue_graph()
    largest = int(g.in_degrees().max())
    asked = []
    real = snapshot_gpu.sample_layer

    def record(graph, seeds, fanout, *args):
        asked.append((seeds.numel(), fanout))
        return real(graph, seeds, fanout, *args)

    monkeypatch.setattr(snapshot_gpu, "sample_layer", record)
    torch.manual_seed(0)
    sampler = GpuSnapshotSampler([7, 3], snapshot_size=10**12, device="reference")
    sampler.sample(g, torch.arange(64))
    assert asked == [(g.num_nodes(), largest)], asked[:3]
    assert holds_every_in_edge(g, sampler.snapshot)
    sampler.close()


@pytest.mark.slow  # a training run in a process of its own (~10 s)
def test_train_with_an_absurd_snapshot_size_runs_and_says_what_it_keeps():
    """Before: ``train --sampler snapshot --snapshot-size 100000000`` was a traceback (400 GB asked)."""
    from test_cli import TINY, run_cli

    r = run_cli("train", *TINY, "--device", "cpu", "--sampler", "snapshot", "--snapshot-size", "100000000")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    assert "snapshot_size 100000000 is above the graph's largest in-degree" in r.stderr
    assert "final test accuracy" in r.stdout


# -- item 9: a graph changed in place --------------------------------------------------------------------


def changes():
    """In-place changes of a DGL graph, each with a description the warning gives."""
    return [
        ("remove_edges", lambda g: g.remove_edges(torch.arange(0, g.num_edges(), 3)), "edges then"),
        ("add_nodes", lambda g: g.add_nodes(50), "nodes and"),
        ("same counts", lambda g: (g.remove_edges(torch.tensor([0])), g.add_edges(torch.tensor([5]), torch.tensor([7]))), "its edges changed"),
    ]


@pytest.mark.parametrize("name,change,said", changes(), ids=[c[0] for c in changes()])
@pytest.mark.parametrize("kind", ["cpu", "reference"])
def test_a_graph_changed_in_place_is_announced_and_sampled_as_it_is_now(kind, name, change, said):
    """Before: edge ids past the graph's end, IndexError for new nodes, or edges no longer there.
    Now: a warning, and a snapshot of the graph as it is (what a DGL sampler, with no state, samples)."""
    g = random_graph()
    sampler = SnapshotSampler([4, 3], snapshot_size=6) if kind == "cpu" else GpuSnapshotSampler([4, 3], snapshot_size=6, device="reference")
    torch.manual_seed(0)
    sampler.sample(g, torch.arange(20))
    change(g)
    seeds = torch.arange(g.num_nodes() - 30, g.num_nodes())  # the new nodes, where there are some
    with pytest.warns(UserWarning, match=f"the graph was changed in place since {type(sampler).__name__} built its snapshot .*{said}") as caught:
        output = sampler.sample(g, seeds)
    assert len(caught) == 1
    if kind != "cpu":
        from test_snapshot_gpu_path import as_dgl

        output = as_dgl(output)
    check_blocks(g, seeds, [4, 3], *output)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new snapshot is the graph's: no second warning
        sampler.refresh_snapshot()
        sampler.sample(g, seeds)
    if kind != "cpu":
        sampler.close()


@pytest.mark.parametrize("kind", ["cpu", "reference"])
def test_a_refresh_after_a_change_rebuilds_instead_of_redrawing_a_stale_layout(kind):
    g = random_graph()
    sampler = SnapshotSampler([3], snapshot_size=4, refresh=1.0) if kind == "cpu" else GpuSnapshotSampler([3], snapshot_size=4, refresh=1.0, device="reference")
    sampler.sample(g, torch.arange(8))
    g.remove_edges(torch.arange(0, g.num_edges(), 2))
    with pytest.warns(UserWarning, match="changed in place"):
        assert sampler.refresh_snapshot() == 0, "a build, not a refresh"
    snap = sampler.snapshot
    assert torch.equal((snap.indptr[1:] - snap.indptr[:-1]).long().cpu(), g.in_degrees().clamp(max=4))
    assert int(snap.eid.max()) < g.num_edges()
    if kind != "cpu":
        sampler.close()


def test_an_unchanged_graph_is_never_rebuilt():
    g = random_graph()
    g.ndata["feat"] = torch.zeros(g.num_nodes(), 2)  # data is not structure
    sampler = SnapshotSampler([3], snapshot_size=4, refresh=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sampler.sample(g, torch.arange(8))
        snap = sampler.snapshot
        g.ndata["other"] = torch.ones(g.num_nodes())
        g.create_formats_()
        for _ in range(3):
            sampler.refresh_snapshot()
            sampler.sample(g, torch.arange(8))
    assert sampler.snapshot is snap and sampler.nodes_refreshed == 3 * math.ceil(0.5 * int((g.in_degrees() > 4).sum()))


def test_a_shared_graph_of_a_graph_changed_in_place_is_made_again():
    """shared_graph kept one SamplingGraph per (graph, placement, counts): a change that keeps the
    counts got the old CSC back."""
    g = random_graph()
    first = shared_graph(g, "host")
    g.remove_edges(torch.tensor([0]))
    g.add_edges(torch.tensor([5]), torch.tensor([7]))
    second = shared_graph(g, "host")
    assert second is not first and not first.closed, "the old one stays with its users"
    indptr, indices, _ = g.adj_tensors("csc")
    assert torch.equal(second.indptr, indptr) and torch.equal(second.indices, indices)
    release(first)
    release(second)
    assert first.closed and second.closed


# -- item 9: persistent workers keep their first snapshot ---------------------------------------------------


@pytest.mark.parametrize(
    "refresh,options,warned",
    [
        (0.25, {"num_workers": 1, "persistent_workers": True}, True),
        (0.0, {"num_workers": 1, "persistent_workers": True}, False),  # a static snapshot: nothing is missed
        (0.25, {"num_workers": 1}, False),  # new workers every epoch, with the refreshed snapshot
        (0.25, {}, False),
    ],
)
def test_persistent_workers_with_a_refreshed_snapshot_are_warned_of(refresh, options, warned):
    from dgl_zerocopy import DataLoader

    g = random_graph()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = DataLoader(g, torch.arange(32), SnapshotSampler([3], refresh=refresh), batch_size=8, **options)
    said = [str(w.message) for w in caught if "persistent_workers=True" in str(w.message)]
    assert len(said) == (1 if warned else 0), said
    if warned:
        assert "never reaches them" in said[0] and "persistent_workers=False" in said[0] and caught[0].filename == __file__
    loader.close()
