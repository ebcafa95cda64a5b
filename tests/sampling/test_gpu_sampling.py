"""The sampler layer on a real GPU: the CSC pinned in place or placed in device memory, the CUDA
kernels' blocks equal to the reference backend's bit for bit, and one host synchronisation per
batch in ``sample_blocks`` (torch's sync debug mode raises on any other); the relabelling kernels
equal to their twin, and the launches of a batch counted on the device.

Skipped without CUDA. Runs without DGL (the GPU image has none): graphs are built as CSC tensors;
the tests that compare DGL frontiers skip where DGL is missing.
"""

from __future__ import annotations

import pytest
import torch
from conftest import requires_cuda

from dgl_zerocopy.cuda.sampling import relabel_layer
from dgl_zerocopy.cuda.sampling.op_count import count_ops
from dgl_zerocopy.loading.blocks import EID, NID
from dgl_zerocopy.sampling import GpuNeighborSampler, SamplingGraph, neighbor, relabel, sample_neighbors

pytestmark = [pytest.mark.gpu, requires_cuda]

N = 5000


def csc(idtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A random in-edge CSC (degrees 0..40, one hub of 3000, the last node isolated) and shuffled edge ids."""
    gen = torch.Generator().manual_seed(seed)
    deg = torch.randint(0, 41, (N,), generator=gen)
    deg[0], deg[-1] = 3000, 0
    indptr = torch.cat([torch.zeros(1, dtype=torch.int64), deg.cumsum(0)])
    indices = torch.randint(0, N, (int(indptr[-1]),), generator=gen).to(idtype)
    eids = torch.randperm(indices.numel(), generator=gen).to(idtype)
    return indptr.to(idtype), indices, eids


def sample(graph, device, seeds, fanouts, replace):
    """GpuNeighborSampler(...).sample_blocks(graph, seeds) with the per-layer RNG keys 7, 8, ...: equal
    arguments give equal picks on every backend."""
    keys = iter(range(7, 1000))
    original = neighbor.draw_seed
    neighbor.draw_seed = lambda: next(keys)
    try:
        return GpuNeighborSampler(fanouts, replace=replace, device=device).sample_blocks(graph, seeds)
    finally:
        neighbor.draw_seed = original


@pytest.mark.parametrize("idtype", [torch.int64, torch.int32], ids=["int64", "int32"])
def test_pinned_graph_is_the_csc_itself_registered_then_unregistered(idtype):
    indptr, indices, eids = csc(idtype)
    assert not indptr.is_pinned() and not indices.is_pinned()
    graph = SamplingGraph(indptr, indices, eids, placement="pinned", device="cuda")
    assert graph.indptr.data_ptr() == indptr.data_ptr() and graph.indices.data_ptr() == indices.data_ptr()  # no copy
    assert indptr.is_pinned() and indices.is_pinned() and graph.pinned  # registered in place
    sample(graph, "cuda", torch.arange(0, N, 7, device="cuda", dtype=idtype), [10, 5], False)
    graph.close()
    assert not indptr.is_pinned() and not indices.is_pinned() and not graph.pinned


def test_dgl_graph_pinned_in_place():
    dgl = pytest.importorskip("dgl")
    indptr, indices, _ = csc(torch.int64)
    g = dgl.graph(("csc", (indptr, indices, torch.tensor([], dtype=torch.int64))), num_nodes=N)
    own = g.adj_tensors("csc")
    with SamplingGraph.from_dgl(g, "pinned", "cuda") as graph:
        assert graph.indptr.data_ptr() == own[0].data_ptr() and graph.indices.data_ptr() == own[1].data_ptr()
        assert own[0].is_pinned() and own[1].is_pinned()
    assert not own[0].is_pinned()


@pytest.mark.parametrize("placement", ["pinned", "device"])
@pytest.mark.parametrize("idtype", [torch.int64, torch.int32], ids=["int64", "int32"])
@pytest.mark.parametrize("fanouts,replace", [([15, 10, 5], False), ([15, 10, 5], True), ([-1, 3], False), ([4, -1], False), ([-1, 3, -1], True)])
def test_cuda_blocks_equal_reference(placement, idtype, fanouts, replace):
    indptr, indices, eids = csc(idtype)
    seeds = torch.cat([torch.tensor([0, N - 1, 3, 3]), torch.randint(0, N, (500,), generator=torch.Generator().manual_seed(1))]).to(idtype)
    host = SamplingGraph(indptr, indices, eids)
    with SamplingGraph(indptr, indices, eids, placement=placement, device="cuda") as graph:
        if placement == "device":
            assert graph.indptr.is_cuda and graph.indices.is_cuda and not indptr.is_pinned()
        ours = sample(graph, "cuda", seeds.cuda(), fanouts, replace)
        ref = sample(host, "reference", seeds, fanouts, replace)
        assert torch.equal(ours[0].cpu(), ref[0]) and torch.equal(ours[1].cpu(), ref[1])
        for a, b in zip(ours[2], ref[2]):
            assert a.device.type == "cuda" and a.idtype == idtype
            for name in ("indptr", "indices"):
                assert torch.equal(getattr(a, name).cpu(), getattr(b, name)), name
            assert torch.equal(a.srcdata[NID].cpu(), b.srcdata[NID]) and torch.equal(a.dstdata[NID].cpu(), b.dstdata[NID])
            assert a.edata.pending() == [EID]
            eid = a.edata[EID]  # pinned: a zero-copy gather over PCIe; device: from a device copy
            assert eid.is_cuda and torch.equal(eid.cpu(), b.edata[EID])


@pytest.mark.parametrize("seeds_on", ["cuda", "cpu"])
@pytest.mark.parametrize("fanouts,reads", [([15, 10, 5], 1), ([-1, 10, 5], 2), ([10, -1, 5], 2), ([15, -1], 2), ([-1, -1], 3)])
def test_one_host_sync_per_batch(monkeypatch, fanouts, reads, seeds_on):
    """torch's sync debug mode raises on any synchronising call; it is lifted only inside
    relabel.read_sizes, which runs once per batch (once more before each fanout -1 layer).
    Seeds from the CPU go to the GPU from pinned memory, without a sync."""
    indptr, indices, eids = csc(torch.int64)
    calls = []
    original = relabel.read_sizes

    def read_sizes(values):
        calls.append(values.numel())
        torch.cuda.set_sync_debug_mode(0)
        try:
            return original(values)
        finally:
            torch.cuda.set_sync_debug_mode("error")

    monkeypatch.setattr(relabel, "read_sizes", read_sizes)
    monkeypatch.setattr(neighbor, "draw_seed", lambda: 5)  # torch's CPU generator: not a device sync, but keep it out
    with SamplingGraph(indptr, indices, eids, placement="pinned", device="cuda") as graph:
        sampler = GpuNeighborSampler(fanouts, device="cuda")
        seeds = torch.randint(0, N, (1024,), generator=torch.Generator().manual_seed(0)).to(seeds_on)
        sampler.sample_blocks(graph, seeds)  # compiled and warm, outside the check
        calls.clear()
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            _, _, blocks = sampler.sample_blocks(graph, seeds)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    assert len(calls) == reads, calls
    assert len(blocks) == len(fanouts) and all(b.indices.is_cuda for b in blocks)


def test_output_device_keeps_edge_ids_lazy():
    indptr, indices, eids = csc(torch.int64)
    host = SamplingGraph(indptr, indices, eids)
    with SamplingGraph(indptr, indices, eids, placement="pinned", device="cuda") as graph:
        torch.manual_seed(0)
        input_nodes, _, blocks = GpuNeighborSampler([5, 5], device="cuda", output_device="cpu").sample_blocks(graph, torch.arange(64))
        torch.manual_seed(0)
        ref = GpuNeighborSampler([5, 5], device="reference").sample_blocks(host, torch.arange(64))
        assert input_nodes.device.type == "cpu" and all(b.device.type == "cpu" for b in blocks)
        assert blocks[0].edata.pending() == [EID]
        assert torch.equal(blocks[0].edata[EID], ref[2][0].edata[EID])


def test_sample_neighbors_cuda_equals_reference():
    dgl = pytest.importorskip("dgl")
    indptr, indices, _ = csc(torch.int32)
    g = dgl.graph(("csc", (indptr, indices, torch.tensor([], dtype=torch.int32))), num_nodes=N, idtype=torch.int32)
    seeds = torch.arange(0, N, 5, dtype=torch.int32)
    for fanout, replace in ((10, False), (10, True), (-1, False)):
        a = sample_neighbors(g, seeds.cuda(), fanout, replace=replace, seed=3, device="cuda")
        b = sample_neighbors(g, seeds, fanout, replace=replace, seed=3, device="reference")
        assert a.device.type == "cpu" and a.idtype == torch.int32
        assert torch.equal(a.edata[dgl.EID], b.edata[dgl.EID]) and all(torch.equal(x, y) for x, y in zip(a.edges(), b.edges()))
    with pytest.raises(IndexError):
        sample_neighbors(g, torch.tensor([N], device="cuda"), 3, device="cuda")


@pytest.mark.parametrize("node_dtype,id_dtype", [(torch.int64, torch.int64), (torch.int32, torch.int32), (torch.int64, torch.int32)])
def test_relabel_kernels_on_cuda_equal_the_reference(node_dtype, id_dtype):
    """The hash table's atomics on a real GPU: many threads claim slots of the same nodes at once."""
    gen = torch.Generator().manual_seed(4)
    dst = torch.randint(0, 5000, (3000,), generator=gen).to(node_dtype)
    src = torch.randint(-1, 5000, (200_000,), generator=gen).to(id_dtype)
    count, out_indptr = torch.tensor([2500]), torch.tensor([0, 100_000, 200_000])
    ref = relabel_layer(dst, count, src, out_indptr, torch.zeros(2, dtype=torch.int64), backend="reference")
    ours = relabel_layer(dst.cuda(), count.cuda(), src.cuda(), out_indptr.cuda(), torch.zeros(2, dtype=torch.int64, device="cuda"), backend="cuda")
    total, num_nodes = ours.sizes.tolist()
    assert [total, num_nodes] == ref.sizes.tolist()
    assert torch.equal(ours.nodes[:num_nodes].cpu(), ref.nodes[:num_nodes]) and torch.equal(ours.local.cpu(), ref.local)
    assert torch.equal(ours.indptr.cpu().long(), out_indptr)


@pytest.mark.parametrize("fanouts", [[15, 10, 5], [25, 10]], ids=str)
def test_launches_and_host_syncs_counted_on_the_device(fanouts):
    """The CPU test's bound (tests/cuda/test_sampling_launch_count.py) holds on the GPU too: about ten
    device operations a layer and the one size read per batch, seeds already on the device."""
    indptr, indices, eids = csc(torch.int64)
    with SamplingGraph(indptr, indices, eids, placement="pinned", device="cuda") as graph:
        sampler = GpuNeighborSampler(fanouts, device="cuda")
        seeds = torch.randint(0, N, (1024,), generator=torch.Generator().manual_seed(0)).cuda()
        sampler.sample_blocks(graph, seeds)
        with count_ops() as count:
            sampler.sample_blocks(graph, seeds)
    assert count.host_syncs == 1 and count.launches <= 10 * len(fanouts) + 2, count.summary()
