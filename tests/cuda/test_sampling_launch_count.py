"""What one GPU-sampled batch asks of the device, counted on the CPU: the emulator backend runs the GPU
launcher's driver (same passes, grids and torch operations between them) on CPU tensors, and
:func:`~dgl_zerocopy.cuda.sampling.op_count.count_ops` counts the torch operations that launch work,
our kernel launches and every value read back. Bounds per batch for the DGL route
(``GpuNeighborSampler.sample_blocks``) and the PyG route (``sample_with_blocks``, what the PyG
loader's GPU route runs: one host read per batch, as the DGL route), for fanouts (15, 10, 5) and (25, 10),
and for a temporal (disjoint) and a weighted batch on the PyG route; the batches stay equal to the
reference backend's. The relabelling kernels are checked against their NumPy twin and the torch
relabelling, and the snapshot sampler issues no more than the pinned path.
"""

from __future__ import annotations

import pytest
import torch

from dgl_zerocopy.cuda.sampling import relabel_layer
from dgl_zerocopy.cuda.sampling.op_count import count_ops, host_side
from dgl_zerocopy.sampling import GpuNeighborSampler, GpuSnapshotSampler, SamplingGraph, neighbor
from dgl_zerocopy.sampling.blocks import EID, NID
from dgl_zerocopy.sampling.relabel import relabel_deferred

N = 20_000
#: Device operations a layer may issue on the DGL route: plan (bounds, count, scan), picks (pick,
#: fetch), relabelling (table fill, insert, mark, scan, write).
PER_LAYER = 10
#: And per batch: the fill of the batch's sizes (and one to spare).
PER_BATCH = 2
#: The PyG route's translation of the blocks per layer (degrees, positions, destinations, edge ids,
#: and the concatenations at the end), and its emptying of the destinations an earlier hop expanded
#: (an index, a comparison, a select: the layers after the first).
PYG_PER_LAYER = 6 + 3
#: A disjoint layer: its picks' tree keys (slot, owner search, clamp, tree, key, mask), the keys split into
#: node ids and trees; temporal: the destinations' seed times and the cut.
DISJOINT_PER_LAYER = 15
#: And per disjoint batch: the seeds' keys and trees.
DISJOINT_PER_BATCH = 4
FANOUTS = [(15, 10, 5), (25, 10)]


@pytest.fixture(scope="module")
def graph():
    gen = torch.Generator().manual_seed(0)
    deg = torch.randint(0, 41, (N,), generator=gen)
    deg[7] = 5000  # a hub
    indptr = torch.cat([torch.zeros(1, dtype=torch.int64), deg.cumsum(0)])
    indices = torch.randint(0, N, (int(indptr[-1]),), generator=gen)
    with SamplingGraph(indptr, indices, torch.randperm(len(indices), generator=gen)) as g:
        yield g


def seeds_of(size: int = 1024, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, N, (size,), generator=torch.Generator().manual_seed(seed))


def keyed(monkeypatch, start: int = 11) -> None:
    keys = iter(range(start, start + 1000))
    monkeypatch.setattr(neighbor, "draw_seed", lambda: next(keys))


def counted(run):
    run()  # the emulator built and the graph taken, outside the count
    with count_ops() as count:
        out = run()
    return count, out


def same_blocks(ours, ref) -> None:
    assert torch.equal(ours[0], ref[0]) and torch.equal(ours[1], ref[1])
    for a, b in zip(ours[2], ref[2], strict=True):
        for name in ("indptr", "indices"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name
        assert torch.equal(a.srcdata[NID], b.srcdata[NID]) and torch.equal(a.dstdata[NID], b.dstdata[NID])
        assert torch.equal(a.edata[EID], b.edata[EID])


@pytest.mark.parametrize("fanouts", FANOUTS, ids=str)
def test_dgl_route_launches_and_one_host_sync_per_batch(graph, monkeypatch, fanouts):
    sampler = GpuNeighborSampler(list(fanouts), device="emulator")
    seeds = seeds_of()
    keyed(monkeypatch)
    count, ours = counted(lambda: sampler.sample_blocks(graph, seeds))
    assert count.host_syncs == 1 and count.syncs == {"tolist": 1}, count.summary()
    assert count.launches <= PER_LAYER * len(fanouts) + PER_BATCH, count.summary()
    # Every kernel of the layer ran once per layer: nothing folded away by an empty layer.
    assert all(n == len(fanouts) for n in count.kernels.values()) and len(count.kernels) == 7, count.kernels
    keyed(monkeypatch, 11 + len(fanouts))  # the keys the counted (second) batch drew
    same_blocks(ours, GpuNeighborSampler(list(fanouts), device="reference").sample_blocks(graph, seeds))


@pytest.mark.parametrize("fanouts", FANOUTS, ids=str)
def test_pyg_route_launches_and_one_host_sync_per_batch(graph, monkeypatch, fanouts):
    """The PyG loader's GPU route: the block sampler sampling each node at its hop (``expand_once``: the
    destinations an earlier hop expanded get no picks, so no offset is read per layer), then its
    translation to PyG's output: one host read per batch, as the DGL route."""
    pytest.importorskip("torch_geometric")
    from dgl_zerocopy.pyg.sampler import sample_with_blocks

    hops = list(fanouts)
    sampler = GpuNeighborSampler(list(reversed(hops)), device="emulator", expand_once=True)
    seeds = seeds_of()
    keyed(monkeypatch)
    count, ours = counted(lambda: sample_with_blocks(sampler, graph, seeds, hops))
    assert count.host_syncs == 1 and count.syncs == {"tolist": 1}, count.summary()
    assert count.launches <= (PER_LAYER + PYG_PER_LAYER) * len(hops) + PER_BATCH, count.summary()
    keyed(monkeypatch, 11 + len(hops))
    ref = sample_with_blocks(GpuNeighborSampler(list(reversed(hops)), device="reference", expand_once=True), graph, seeds, hops)
    for name in ("node", "row", "col", "edge"):
        assert torch.equal(getattr(ours, name), getattr(ref, name)), name
    assert ours.num_sampled_nodes == ref.num_sampled_nodes and ours.num_sampled_edges == ref.num_sampled_edges


@pytest.mark.parametrize("mode", ["temporal", "weighted"])
def test_pyg_route_temporal_and_weighted_batches_read_the_device_once(graph, monkeypatch, mode):
    """A temporal (disjoint trees, the time cut) and a weighted batch of the PyG route, fanouts (15, 10, 5):
    one host read, launches bounded; the weighted kernels replace the uniform count and pick one for one."""
    pytest.importorskip("torch_geometric")
    from dgl_zerocopy.pyg.sampler import sample_with_blocks
    from dgl_zerocopy.sampling.gpu_picks import TemporalPicks, WeightedPicks

    hops, gen = [15, 10, 5], torch.Generator().manual_seed(5)
    num_edges = len(graph.indices)
    if mode == "temporal":
        times = torch.sort(torch.randint(0, 100, (num_edges,), generator=gen)).values  # sorted in every neighbourhood
        options, seed_time = dict(disjoint=True, temporal=TemporalPicks(graph.indptr, times, "uniform")), torch.randint(0, 100, (1024,), generator=gen)
        bound = (PER_LAYER + PYG_PER_LAYER + DISJOINT_PER_LAYER) * len(hops) + PER_BATCH + DISJOINT_PER_BATCH
    else:
        options, seed_time = dict(weighted=WeightedPicks(graph.indptr, torch.rand(num_edges, generator=gen))), None
        bound = (PER_LAYER + PYG_PER_LAYER) * len(hops) + PER_BATCH
    sampler = GpuNeighborSampler(list(reversed(hops)), device="emulator", expand_once=True, **options)
    seeds = seeds_of()
    count, out = counted(lambda: sample_with_blocks(sampler, graph, seeds, hops, seed_time=seed_time))
    assert count.host_syncs == 1 and count.syncs == {"tolist": 1}, count.summary()
    assert count.launches <= bound, count.summary()
    if mode == "temporal":
        assert count.kernels["sample_cut_by_time<long long>"] == len(hops), count.kernels
    else:  # the weighted count and pick instead of the uniform ones
        assert count.kernels["sample_pick_weighted"] == count.kernels["sample_count_weighted"] == len(hops), count.kernels
        assert "sample_pick" not in count.kernels and "sample_count" not in count.kernels, count.kernels
    assert sum(out.num_sampled_edges) == len(out.row) > 0


def test_snapshot_batch_issues_no_more_than_the_pinned_path(graph):
    """Same fanouts, same seeds: a batch from the device snapshot launches no more than one from
    the full CSC, and reads back as often (its edge ids are read at once, the pinned path's lazily:
    both counted here with the edge ids read)."""
    fanouts, seeds = [15, 10, 5], seeds_of()
    pinned = GpuNeighborSampler(fanouts, device="emulator")
    with GpuSnapshotSampler(fanouts, device="emulator") as snapshot:
        snapshot.sample_blocks(graph, seeds)  # built outside the count

        def with_edge_ids(sampler):
            def run():
                out = sampler.sample_blocks(graph, seeds)
                for block in out[2]:
                    block.edata[EID]
                return out

            return run

        full, _ = counted(with_edge_ids(pinned))
        snap, _ = counted(with_edge_ids(snapshot))
    assert snap.launches <= full.launches, (snap.summary(), full.summary())
    assert snap.host_syncs <= full.host_syncs, (snap.summary(), full.summary())


@pytest.mark.parametrize(
    "node_dtype,id_dtype", [(torch.int64, torch.int64), (torch.int32, torch.int32), (torch.int64, torch.int32), (torch.int32, torch.int64)]
)
def test_relabel_kernels_equal_their_twin_and_torchs_relabelling(node_dtype, id_dtype):
    gen = torch.Generator().manual_seed(3)
    for trial in range(12):
        num_dst, num_src = int(torch.randint(1, 60, (), generator=gen)), int(torch.randint(0, 400, (), generator=gen))
        dst = torch.randint(0, 120, (num_dst,), generator=gen).to(node_dtype)  # duplicates among the destinations too
        src = torch.randint(-1, 120, (num_src,), generator=gen).to(id_dtype)  # -1: unused slots
        live = int(torch.randint(0, num_dst + 1, (), generator=gen)) if trial % 2 else num_dst
        count = torch.tensor([live]) if trial % 2 else None
        out_indptr = torch.tensor([0, num_src // 2, num_src])
        runs = {}
        for backend, num_nodes in (("emulator", None), ("reference", None), ("bounded", 120)):  # ids < 120: a table of 256 slots
            sizes = torch.full((2,), -7, dtype=torch.int64)
            runs[backend] = relabel_layer(dst, count, src, out_indptr, sizes, backend="emulator" if num_nodes else backend, num_nodes=num_nodes)
        emu, ref, bounded = runs["emulator"], runs["reference"], runs["bounded"]
        total, num_nodes = emu.sizes.tolist()
        assert ref.sizes.tolist() == [total, num_nodes] and total == num_src
        assert emu.nodes.dtype == emu.local.dtype == emu.indptr.dtype == node_dtype
        assert torch.equal(emu.nodes[:num_nodes], ref.nodes[:num_nodes]) and torch.equal(emu.local, ref.local)
        assert torch.equal(bounded.nodes[:num_nodes], ref.nodes[:num_nodes]) and torch.equal(bounded.local, ref.local)
        assert torch.equal(emu.indptr.long(), out_indptr)
        nodes, local, torch_count = relabel_deferred(dst[:live], src.to(node_dtype))
        used = src >= 0
        assert int(torch_count) == num_nodes and torch.equal(nodes[:num_nodes], emu.nodes[:num_nodes])
        assert torch.equal(local[used], emu.local[used].long()) and bool((emu.local[~used] == -1).all())


def test_relabel_layer_refuses_bad_arguments():
    ids = torch.arange(4)
    with pytest.raises(TypeError, match="sizes must be a 1-D int64 tensor of 2 elements"):
        relabel_layer(ids, None, ids, torch.zeros(3, dtype=torch.int64), torch.zeros(3, dtype=torch.int64), backend="emulator")
    with pytest.raises(TypeError, match="dst must be int32 or int64"):
        relabel_layer(ids.float(), None, ids, torch.zeros(3, dtype=torch.int64), torch.zeros(2, dtype=torch.int64), backend="emulator")
    with pytest.raises(ValueError, match="backend must be one of"):
        relabel_layer(ids, None, ids, torch.zeros(3, dtype=torch.int64), torch.zeros(2, dtype=torch.int64), backend="gpu")


def test_count_ops_counts_launches_reads_and_leaves_views_out():
    x = torch.arange(10)
    with count_ops() as count:
        y = x + 1  # one launch
        y[2:5].view(-1)  # views: none
        torch.empty(3)  # an allocation: none
        y.tolist()  # a read back
        int(y[0])  # a read back (its _local_scalar_dense not counted twice)
        torch.nonzero(y > 4)  # a comparison and a data-dependent size: two launches, one sync
        with host_side():
            torch.randint(0, 5, ()).item()  # host work: left out
    assert count.torch_ops == {"add": 1, "gt": 1, "nonzero": 1}, count.torch_ops
    assert count.syncs == {"tolist": 1, "int": 1, "nonzero": 1}, count.syncs
    assert count.launches == 3 and count.host_syncs == 3
    assert torch.Tensor.tolist is not None and x.tolist() == list(range(10))  # restored
    with count_ops(), pytest.raises(RuntimeError, match="already counting"):
        with count_ops():
            pass
