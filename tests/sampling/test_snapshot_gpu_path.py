"""The GPU path of snapshot sampling: GpuSnapshotSampler, the snapshot in device memory.

On the CPU the sampler runs with the kernels' CPU backends (``emulator``: the CUDA source built with
g++; ``reference``: NumPy), and its blocks meet the CPU SnapshotSampler's contract, checked with
tests/sampling/test_snapshot.py's helpers: per destination min(in-degree, fanout) distinct in-edges, each
from the node's current snapshot, edge ids of the original graph; the snapshot laid out as the CPU
one; a static snapshot never gives more than snapshot_size edges of a node; picks uniform; a
refresh redraws exactly the planned nodes; a batch reads only the snapshot (the refresh reads the
full CSC). The DataLoader with use_uva=True takes a SnapshotSampler (the stand-in on the CPU), and
the stream order of refresh and batches is checked against tests/stream_model.py. With a GPU
(``gpu`` marker): the CUDA path with the full CSC pinned in place, equal to the reference backend,
and a batch's kernels read no pinned memory.
"""

from __future__ import annotations

import math
import re
import time

import pytest
import torch

dgl = pytest.importorskip("dgl")

import stream_model  # noqa: E402
from conftest import requires_cuda  # noqa: E402
from stream_model import CudaModel, ModelStream  # noqa: E402
from test_snapshot import check_bad_calls_refused, check_blocks, check_pick_rate, pick_counts, random_graph, stars  # noqa: E402

from dgl_zerocopy.loading.blocks import EID, NID  # noqa: E402
from dgl_zerocopy.loading.gpu_sampling import emulate_on_cpu, to_dgl_block  # noqa: E402
from dgl_zerocopy.loading.loader import DataLoader  # noqa: E402
from dgl_zerocopy.sampling import GpuSnapshotSampler, SamplingGraph, SnapshotSampler, neighbor, snapshot_gpu  # noqa: E402
from dgl_zerocopy.sampling import graph as graph_module  # noqa: E402
from dgl_zerocopy.sampling.snapshot_csc import RefreshOrder  # noqa: E402

BACKENDS = ["emulator", "reference"]


def as_dgl(output):
    """``(input_nodes, output_nodes, blocks)`` with the blocks (DeviceBlocks, or DGL blocks where a
    CUDA build of DGL gets them) as DGL blocks on the CPU."""
    input_nodes, output_nodes, blocks = output
    blocks = [block.to("cpu") if isinstance(block, dgl.DGLGraph) else to_dgl_block(block.to("cpu")) for block in blocks]
    return input_nodes.cpu(), output_nodes.cpu(), blocks


def slot_edges(sampler, node: int) -> set[int]:
    snap = sampler.snapshot
    lo, hi = int(snap.indptr[node]), int(snap.indptr[node + 1])
    return set(snap.eid[lo:hi].cpu().tolist())


def check_from_snapshot(sampler, output) -> None:
    """Every edge of every block (DGL blocks on the CPU) is in its destination's current snapshot."""
    snap = sampler.snapshot
    indptr, eid = snap.indptr.cpu().long(), snap.eid.cpu().long()
    owner = torch.repeat_interleave(torch.arange(indptr.numel() - 1), indptr[1:] - indptr[:-1])
    held = owner * (int(eid.max()) + 1) + eid
    for block in output[2]:
        _, v = block.edges(order="eid")
        picked = block.dstdata[NID].long()[v.long()] * (int(eid.max()) + 1) + block.edata[EID].long()
        assert bool(torch.isin(picked, held).all()), "a destination got an edge outside its current snapshot"


def check_layout(g, sampler) -> None:
    """The CPU snapshot's layout: min(deg, size) slots per node, each a distinct in-edge (source, edge id)."""
    snap = sampler.snapshot
    indptr, src, eid = (t.cpu().long() for t in snap)
    deg = g.in_degrees()
    assert torch.equal(indptr[1:] - indptr[:-1], deg.clamp(max=sampler.snapshot_size))
    dst = torch.repeat_interleave(torch.arange(g.num_nodes()), indptr[1:] - indptr[:-1])
    gu, gv = g.find_edges(eid.to(g.idtype))
    assert torch.equal(gv.long(), dst) and torch.equal(gu.long(), src), "each slot holds an in-edge of its node"
    assert (dst * g.num_edges() + eid).unique().numel() == eid.numel(), "distinct in-edges per node"


# -- the sampler on the CPU backends ------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("idtype", [torch.int64, torch.int32], ids=["int64", "int32"])
def test_blocks_meet_the_cpu_samplers_contract(backend, idtype):
    g = random_graph().int() if idtype == torch.int32 else random_graph()
    torch.manual_seed(0)
    sampler = GpuSnapshotSampler([4, 3], snapshot_size=6, refresh=0.5, device=backend)
    seeds = torch.randperm(g.num_nodes())[:50].to(idtype)
    for _ in range(3):
        output = sampler.sample(g, seeds)
        assert output[0].dtype == idtype and all(b.idtype == idtype and b.edata[EID].dtype == idtype for b in output[2])
        check_blocks(g, seeds, [4, 3], *as_dgl(output))
        check_from_snapshot(sampler, as_dgl(output))
        check_layout(g, sampler)
        sampler.refresh_snapshot()
    snap = sampler.snapshot
    assert snap.indptr.dtype == snap.src.dtype == snap.eid.dtype == torch.int32, "int32 where the ids fit, as on the CPU"
    assert sampler.snapshot_nbytes == sum(t.numel() * t.element_size() for t in snap) < sampler.full_csc_nbytes
    sampler.close()
    assert sampler.snapshot is None and graph_module._shared.get(g) in (None, {})


def test_the_emulated_kernels_and_the_reference_give_the_same_snapshot_and_blocks():
    g = random_graph()
    results = []
    for backend in BACKENDS:
        torch.manual_seed(7)
        with GpuSnapshotSampler([4, 3], snapshot_size=5, refresh=0.25, device=backend) as sampler:
            first = sampler.sample(g, torch.arange(40))
            sampler.refresh_snapshot()
            second = sampler.sample(g, torch.arange(40))
            results.append(([t.clone() for t in sampler.snapshot], [as_dgl(first), as_dgl(second)]))
    (snap_a, out_a), (snap_b, out_b) = results
    assert all(torch.equal(a, b) for a, b in zip(snap_a, snap_b))
    for a, b in zip(out_a, out_b):
        assert torch.equal(a[0], b[0]) and all(torch.equal(x.edata[EID], y.edata[EID]) for x, y in zip(a[2], b[2]))


def test_a_sampling_graph_of_the_full_csc_positions_as_edge_ids():
    """What bench/sampler/sampling.py gives it: a SamplingGraph without edge ids (the positions are the ids)."""
    g = random_graph()
    indptr, indices, _ = g.adj_tensors("csc")
    torch.manual_seed(1)
    with SamplingGraph(indptr, indices) as full, GpuSnapshotSampler([3, 2], device="reference") as sampler:
        _, _, blocks = sampler.sample(full, torch.arange(30))
        assert sampler.snapshot_size == 6 and sampler.full_csc_nbytes == (indptr.numel() + indices.numel()) * 8
        pos = sampler.snapshot.eid.long()
        dst = torch.repeat_interleave(torch.arange(g.num_nodes()), (sampler.snapshot.indptr[1:] - sampler.snapshot.indptr[:-1]).long())
        assert bool(((pos >= indptr[dst]) & (pos < indptr[dst + 1])).all()) and torch.equal(indices[pos], sampler.snapshot.src.long())
        for block in blocks:
            assert block.edata[EID].dtype == torch.int64


@pytest.mark.parametrize("backend", BACKENDS)
def test_edge_ids_past_2_31_do_not_wrap_with_int32_node_ids(tmp_path, backend):
    """A graph of int32 node ids and 2**31 + 10 edges (tests/sampling/test_sampling.py's sparse file): node 1's
    in-edges sit past 2**31. The snapshot holds their ids as they are, and the blocks give them in
    int64; node ids stay int32."""
    if backend == "emulator":
        pytest.importorskip("dgl_zerocopy.cuda.sampling.emulator")
    from test_sampling import PAST_INT32, graph_past_int32

    past = torch.arange(2**31, PAST_INT32)
    with graph_past_int32(tmp_path) as full, GpuSnapshotSampler([4], snapshot_size=10, device=backend) as sampler:
        input_nodes, _, blocks = sampler.sample(full, torch.tensor([1]))
        assert torch.equal(sampler.snapshot.eid[10:].long().sort().values, past), "node 1 keeps its 10 in-edges"
        eids = blocks[0].edata[EID]
        assert input_nodes.dtype == torch.int32 and eids.dtype == torch.int64 and eids.numel() == 4
        assert bool(((eids >= 2**31) & (eids < PAST_INT32)).all()), eids


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_fanouts_give_blocks_without_edges_as_the_other_samplers_do(backend):
    """Every fanout 0 makes snapshot_size 0 (check_options accepts it): no slot to draw and blocks
    without edges whose sources are their destinations, as GpuNeighborSampler([0, 0]) and the CPU
    SnapshotSampler([0, 0]) give; refreshes count their nodes as the CPU sampler's do."""
    from dgl_zerocopy.sampling import GpuNeighborSampler

    g, seeds = random_graph(), torch.tensor([3, 7, 9])
    cpu = SnapshotSampler([0, 0])
    with GpuSnapshotSampler([0, 0], device=backend) as sampler, GpuNeighborSampler([0, 0], device=backend) as plain:
        for output in (sampler.sample(g, seeds), plain.sample(g, seeds), cpu.sample(g, seeds)):
            input_nodes, output_nodes, blocks = output if isinstance(output[2][0], dgl.DGLGraph) else as_dgl(output)
            assert torch.equal(input_nodes, seeds) and torch.equal(output_nodes, seeds)
            for block in blocks:
                assert block.num_edges() == 0 and torch.equal(block.srcdata[NID], seeds) and torch.equal(block.dstdata[NID], seeds)
        assert sampler.snapshot_size == 0 and sampler.snapshot.src.numel() == 0
        assert sampler.refresh_snapshot() == cpu.refresh_snapshot() > 0


@pytest.mark.parametrize("refresh", [0.25, 1.0])
def test_every_edge_is_picked_with_probability_fanout_over_degree(refresh):
    """tests/sampling/test_snapshot.py's guarantee test, on the GPU path (its bound and its reasoning)."""
    torch.manual_seed(3)
    check_pick_rate(lambda f, k: GpuSnapshotSampler([f], snapshot_size=k, refresh=refresh, device="reference"), refresh, epochs=300)


def test_a_static_snapshot_never_gives_more_than_snapshot_size_edges():
    torch.manual_seed(4)
    centres, d, k, f = 16, 12, 6, 3
    g = stars(centres, d)
    sampler = GpuSnapshotSampler([f], snapshot_size=k, refresh=0, device="emulator")
    counts = pick_counts(sampler, g, 100, centres)
    assert ((counts > 0).view(centres, d).sum(1) == k).all()
    assert sampler.nodes_refreshed == 0


def test_a_refresh_redraws_exactly_the_planned_nodes(monkeypatch):
    g = stars(10, 12)
    planned = []
    original = RefreshOrder.take

    def take(self, count):
        planned.append(original(self, count))
        return planned[-1]

    monkeypatch.setattr(RefreshOrder, "take", take)
    torch.manual_seed(5)
    sampler = GpuSnapshotSampler([2], snapshot_size=4, refresh=0.3, device="emulator")
    assert sampler.refresh_snapshot() == 0, "nothing built yet: nothing to refresh"
    sampler.sample(g, torch.arange(3))
    changed_ever = set()
    for _ in range(4):
        before = [slot_edges(sampler, v) for v in range(g.num_nodes())]
        assert sampler.refresh_snapshot() == math.ceil(0.3 * 10) == planned[-1].numel()
        after = [slot_edges(sampler, v) for v in range(g.num_nodes())]
        changed = {v for v in range(g.num_nodes()) if before[v] != after[v]}
        assert changed <= set(planned[-1].tolist()), "a node outside the plan was redrawn"
        changed_ever |= changed
        check_layout(g, sampler)
    assert len(changed_ever) >= 8, "the planned nodes were redrawn (a redraw equal to the old snapshot has probability 1/495)"
    assert torch.cat(planned).unique().numel() == 10, "ceil(1 / 0.3) epochs cover every partial node"
    assert sampler.nodes_refreshed == 12


def test_a_batch_reads_only_the_snapshot_and_a_refresh_the_full_csc(monkeypatch):
    """Which CSC each kernel call reads: a batch's layers the snapshot's; the build and the refreshes
    the full CSC, with fanout snapshot_size at the nodes to redraw."""
    g = random_graph()
    reads = []
    layer, deferred = snapshot_gpu.sample_layer, neighbor.sample_layer_deferred
    monkeypatch.setattr(
        snapshot_gpu, "sample_layer", lambda graph, seeds, fanout, *a: reads.append(("refresh", graph, fanout)) or layer(graph, seeds, fanout, *a)
    )
    monkeypatch.setattr(neighbor, "sample_layer_deferred", lambda graph, *a, **k: reads.append(("batch", graph, a[1])) or deferred(graph, *a, **k))
    sampler = GpuSnapshotSampler([4, 3], snapshot_size=5, refresh=1.0, device="emulator")
    sampler.sample(g, torch.arange(20))
    full = sampler._full
    assert full.indptr.data_ptr() == g.adj_tensors("csc")[0].data_ptr(), "the full CSC as the graph holds it"
    assert [(kind, fanout) for kind, _, fanout in reads] == [("refresh", 5), ("batch", 3), ("batch", 4)]
    assert reads[0][1] is full and all(graph is sampler._graph and graph.indices is sampler.snapshot.src for _, graph, _ in reads[1:])
    reads.clear()
    sampler.refresh_snapshot()
    assert [(kind, graph, fanout) for kind, graph, fanout in reads] == [("refresh", full, 5)]


def test_bad_options_and_calls_are_refused():
    for kwargs, message in (
        ({"fanouts": [5, 10], "snapshot_size": 7}, "snapshot_size=7 is below the largest fanout 10"),
        ({"fanouts": [5], "refresh": 1.5}, "refresh=1.5 must be a share in [0, 1]"),
        ({"fanouts": [5, -1]}, "fanouts[1] is -1 (every in-edge)"),
        ({"fanouts": [5], "placement": "disk"}, "placement must be 'pinned' or 'device'"),
        ({"fanouts": [5], "device": "tpu"}, "device must be 'cuda'"),
    ):
        with pytest.raises(ValueError, match=re.escape(message)):
            GpuSnapshotSampler(**{"device": "emulator", **kwargs})
    check_bad_calls_refused(GpuSnapshotSampler([3], device="reference"), outside="300")


# -- the DataLoader with use_uva=True ---------------------------------------------------------------------


def snapshot_loader(g, seeds, graph_sampler, backend="emulator", **kwargs) -> DataLoader:
    options = dict(device="cpu", batch_size=16, use_uva=True, shuffle=True)
    options.update(kwargs)
    with emulate_on_cpu(backend):
        return DataLoader(g, seeds, graph_sampler, **options)


@pytest.mark.parametrize("blocks", ["device", "dgl"])
def test_the_loader_samples_a_snapshot_sampler_on_the_gpu_path_and_refreshes_it_per_epoch(blocks):
    g = random_graph()
    feat = torch.randn(g.num_nodes(), 4)
    cpu_sampler = SnapshotSampler([4, 3], snapshot_size=4, refresh=0.25)
    loader = snapshot_loader(g, torch.arange(64), cpu_sampler, features={"feat": feat}, labels={"label": torch.arange(g.num_nodes())}, blocks=blocks)
    gpu = loader._device_sampling.sampler
    assert isinstance(gpu, GpuSnapshotSampler) and (gpu.fanouts, gpu.snapshot_size, gpu.refresh) == ([4, 3], 4, 0.25)
    partial = int((g.in_degrees() > 4).sum())
    for epoch in range(3):
        for input_nodes, output_nodes, sampled in loader:
            output = (input_nodes, output_nodes, sampled) if blocks == "dgl" else as_dgl((input_nodes, output_nodes, sampled))
            check_blocks(g, output_nodes, [4, 3], *output)
            check_from_snapshot(gpu, output)
            assert torch.equal(sampled[0].srcdata["feat"], feat[input_nodes]) and torch.equal(sampled[-1].dstdata["label"], output_nodes)
        assert gpu.nodes_refreshed == epoch * math.ceil(0.25 * partial), "built at epoch 0, refreshed at each later start"
    assert cpu_sampler.snapshot is None, "the CPU sampler builds nothing: its GPU twin holds the snapshot"
    loader.close()
    assert gpu.snapshot is None and graph_module._shared.get(g) in (None, {}), "close frees the snapshot and gives back the full CSC"
    assert len(list(loader)) == 4 and gpu.snapshot is not None, "iterating again builds a new one"
    loader.close()


class MySnapshotSampler(SnapshotSampler):
    pass


def test_what_the_loader_cannot_sample_on_the_gpu_path_is_refused():
    g = random_graph()
    with pytest.raises(ValueError, match=r"num_workers must be 0"):
        snapshot_loader(g, torch.arange(8), SnapshotSampler([3]), num_workers=2)
    with pytest.raises(ValueError, match=r"the sampler is MySnapshotSampler.*use_uva=False"):
        snapshot_loader(g, torch.arange(8), MySnapshotSampler([3]))


def test_use_uva_without_cuda_is_refused_for_a_snapshot_sampler_too(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for device in (None, "cuda", "cpu"):
        with pytest.raises(RuntimeError, match=r"CUDA.*torch\.cuda\.is_available\(\) is False.*use_uva=False"):
            DataLoader(random_graph(), torch.arange(8), SnapshotSampler([3]), device=device, use_uva=True)


def test_refresh_and_batches_are_ordered_on_the_device(monkeypatch):
    """Against the model of streams: each batch is sampled on the side stream after waiting for the
    event recorded after the snapshot's last write (build or refresh); each refresh, on the consumer's
    stream, first waits for the event recorded after the last batch sampled on the side stream (a
    batch prefetched but never consumed included: the epoch is left by break); the ring's protocol holds."""
    model = CudaModel().install(monkeypatch)
    log = []  # (what, stream, event, when the event was recorded, now): one clock with the model's events
    original_wait = ModelStream.wait_event

    def wait_event(self, event):
        log.append(("wait", self.name, event, event.recorded_at, next(stream_model._clock)))
        original_wait(self, event)

    order = snapshot_gpu.StreamOrder
    after_read, after_write = order.after_read, order.after_write
    # The model stands in for CUDA: the reference backend's snapshot is ordered as the cuda backend's.
    init = order.__init__
    monkeypatch.setattr(order, "__init__", lambda self, device, backend: init(self, device, "cuda"))

    def read_done(self):
        after_read(self)
        stream = torch.cuda.current_stream()
        event = self.reads[id(stream)][1]
        log.append(("read", stream.name, event, event.recorded_at, next(stream_model._clock)))

    def write_done(self):
        after_write(self)
        log.append(("write", torch.cuda.current_stream().name, self.written, self.written.recorded_at, next(stream_model._clock)))

    monkeypatch.setattr(ModelStream, "wait_event", wait_event)
    monkeypatch.setattr(order, "after_read", read_done)
    monkeypatch.setattr(order, "after_write", write_done)
    g = random_graph()
    loader = snapshot_loader(g, torch.arange(64), SnapshotSampler([4, 3], snapshot_size=4, refresh=0.5), backend="reference", prefetch=2)
    loader._ring.side = ModelStream("side", model)
    for epoch in range(3):
        for i, (input_nodes, output_nodes, blocks) in enumerate(loader):
            model.take(loader._ring, [], [input_nodes, output_nodes, *blocks])
            if epoch == 1 and i == 0:
                deadline = time.monotonic() + 10
                while sum(e[0] == "read" for e in log) < 4 + 3 and time.monotonic() < deadline:
                    time.sleep(0.01)  # the worker samples batches 1 and 2 ahead (prefetch 2)
                break  # they stay prefetched: sampled, never consumed
    loader.close()
    assert model.violations == []
    writes = [e for e in log if e[0] == "write"]
    reads = [e for e in log if e[0] == "read"]
    assert len(writes) == 3 and {w[1] for w in writes} == {"consumer"} and {r[1] for r in reads} == {"side"}
    assert len(reads) >= 4 + 3 + 4, "epoch 1's prefetched batches were sampled"
    for w in writes[1:]:  # a refresh first waits for the read event as the last batch before it recorded it
        last = max((r for r in reads if r[4] < w[4]), key=lambda r: r[4])
        assert any(e[0] == "wait" and e[1] == "consumer" and e[2] is last[2] and e[3] == last[3] and last[4] < e[4] < w[4] for e in log), w
    for r in reads:  # a batch first waits for the event of the snapshot's last write
        last = max((w for w in writes if w[4] < r[4]), key=lambda w: w[4])
        assert any(e[0] == "wait" and e[1] == "side" and e[2] is last[2] and e[3] == last[3] and last[4] < e[4] < r[4] for e in log), r


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_cpu_backends_ask_for_no_cuda_stream_or_event(monkeypatch, backend):
    """Where CUDA is available, a snapshot sampled on a CPU backend still orders nothing on CUDA
    streams: asking for one would create a CUDA context and events that nothing waits on."""
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a, **k: calls.append("current_stream"))
    monkeypatch.setattr(torch.cuda, "Event", lambda *a, **k: calls.append("Event"))
    g = random_graph()
    with GpuSnapshotSampler([3, 2], snapshot_size=4, refresh=0.5, device=backend) as sampler:
        sampler.sample(g, torch.arange(20))
        assert sampler.refresh_snapshot() > 0
        sampler.sample(g, torch.arange(20))
    assert calls == []


# -- the PCIe model of the device snapshot ---------------------------------------------------------------


def test_pcie_model_of_a_refresh_counts_its_picks_and_their_edge_ids():
    """Two nodes of 64 in-edges (int32, two lines each) redrawn at snapshot_size 64: the flat fetch
    reads each node's 64 picks in two instructions of 32 lanes (one line each), the edge ids
    likewise, the offsets in one request; the node list is uploaded (4 B a node)."""
    from dgl_zerocopy.cuda.sampling import pcie_model

    indptr = torch.tensor([0, 64, 128], dtype=torch.int32)
    indices = torch.zeros(128, dtype=torch.int32)
    m = pcie_model.model_refresh(indptr, indices, [0, 1], 64)
    assert (m.nodes, m.picks) == (2, 128)
    assert (m.indices_requests, m.indices_fetched) == (4, 512) and (m.eid_requests, m.eid_fetched) == (4, 512)
    assert m.indptr_requests == 1 and m.upload_bytes == 8
    assert m.link_bytes == m.indptr_fetched + 1024 + 24 * m.requests + 8
    assert pcie_model.snapshot_link_per_edge(m, 10, 1000.0) == pytest.approx(m.link_bytes / 2 * 10 / 1000)
    assert pcie_model.snapshot_link_per_edge(m, 0, 1000.0) == 0.0


def test_bench_pcie_snapshot_rows(tmp_path):
    """bench/pcie/pcie_sampling.py --parts snapshot at a small size: UVA rows per CSC dtype, snapshot rows
    whose batches read nothing and whose refresh grows with the share; int64 costs more than int32."""
    import json
    import sys

    from conftest import REPO

    sys.path.insert(0, str(REPO / "bench" / "pcie"))
    import pcie_sampling

    stem = tmp_path / "snap"
    args = ["--num-nodes", "3000", "--batches", "1", "--batch-size", "128", "--parts", "snapshot", "--refresh-sample", "256", "--snapshot-out", str(stem)]
    assert pcie_sampling.main(args) == 0
    rows = json.loads(stem.with_suffix(".json").read_text())["rows"]
    assert stem.with_suffix(".csv").is_file() and not (tmp_path / "pcie_sampling.json").exists()
    for csc in ("int32", "int64"):
        mine = [r for r in rows if r["csc"] == csc]
        uva = next(r for r in mine if r["method"] == "UVA, full CSC pinned")
        snaps = [r for r in mine if r["method"] == "snapshot in device memory"]
        assert [r["refresh"] for r in snaps] == [0, 0.1, 0.25, 1] and all(r["batch_link_bytes_per_edge"] == 0 for r in snaps)
        links = [r["link_bytes_per_edge"] for r in snaps]
        assert links[0] == 0 and links == sorted(links) and links[-1] > 0
        assert uva["batch_link_bytes_per_edge"] > 0 and snaps[2]["uva_over_this"] == pytest.approx(uva["link_bytes_per_edge"] / links[2])
        assert snaps[2]["refreshed_nodes_per_epoch"] == math.ceil(0.25 * uva["partial_nodes"])
    by = {(r["csc"], r["refresh"]): r for r in rows if r["method"] == "snapshot in device memory"}
    assert by["int64", 1.0]["refresh_link_bytes_per_node"] > by["int32", 1.0]["refresh_link_bytes_per_node"]


# -- on a GPU ----------------------------------------------------------------------------------------------


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("idtype", [torch.int64, torch.int32], ids=["int64", "int32"])
def test_cuda_snapshot_in_device_memory_equals_the_reference_backend(idtype):
    g = random_graph().int() if idtype == torch.int32 else random_graph()
    seeds = torch.randperm(g.num_nodes(), generator=torch.Generator().manual_seed(0))[:64].to(idtype)
    outputs = {}
    for backend in ("cuda", "reference"):
        torch.manual_seed(11)
        with GpuSnapshotSampler([4, 3], snapshot_size=5, refresh=0.5, device=backend, placement="pinned") as sampler:
            first = as_dgl(sampler.sample(g, seeds))
            sampler.refresh_snapshot()
            out = sampler.sample(g, seeds)
            if backend == "cuda":
                assert all(t.is_cuda for t in sampler.snapshot), "the snapshot lives in device memory"
                assert sampler._full.placement == "pinned" and g.adj_tensors("csc")[0].is_pinned(), "the full CSC pinned in place"
                assert out[0].is_cuda and all(b.device.type == "cuda" for b in out[2])
                check_from_snapshot(sampler, as_dgl(out))
            check_blocks(g, seeds, [4, 3], *as_dgl(out))
            outputs[backend] = (first, as_dgl(out), [t.cpu() for t in sampler.snapshot])
    assert not g.adj_tensors("csc")[0].is_pinned(), "given back at close: unpinned"
    (a1, a2, snap_a), (b1, b2, snap_b) = outputs["cuda"], outputs["reference"]
    assert all(torch.equal(x, y) for x, y in zip(snap_a, snap_b))
    for a, b in ((a1, b1), (a2, b2)):
        assert torch.equal(a[0], b[0]) and all(torch.equal(x.edata[EID], y.edata[EID]) for x, y in zip(a[2], b[2]))


@pytest.mark.gpu
@requires_cuda
def test_a_cuda_batch_reads_no_pinned_memory(monkeypatch):
    """Every array the sampling kernels address during a batch is in device memory; the refresh reads
    the pinned full CSC."""
    from dgl_zerocopy.cuda.sampling import launcher

    addressed = []
    original = launcher._kernel_address
    monkeypatch.setattr(
        launcher, "_kernel_address", lambda cupy, name, tensor, device: addressed.append(tensor.device.type) or original(cupy, name, tensor, device)
    )
    g = random_graph()
    with GpuSnapshotSampler([4, 3], snapshot_size=5, refresh=1.0, device="cuda") as sampler:
        sampler.sample(g, torch.arange(10))  # builds: reads the pinned CSC
        assert "cpu" in addressed
        addressed.clear()
        for _ in range(3):
            _, _, blocks = sampler.sample(g, torch.randperm(g.num_nodes())[:64].cuda())
        assert addressed and set(addressed) == {"cuda"}, "a batch read pinned host memory"
        addressed.clear()
        sampler.refresh_snapshot()
        assert "cpu" in addressed, "the refresh reads the full CSC over PCIe"
    torch.cuda.synchronize()


@pytest.mark.gpu
@requires_cuda
def test_the_loader_samples_from_the_device_snapshot_on_cuda():
    g = random_graph()
    feat = torch.randn(g.num_nodes(), 4)
    loader = DataLoader(
        g, torch.arange(64), SnapshotSampler([4, 3], snapshot_size=4, refresh=0.5), device="cuda", use_uva=True, batch_size=16, features={"feat": feat}
    )
    gpu = loader._device_sampling.sampler
    for _ in range(2):
        for input_nodes, output_nodes, blocks in loader:
            output = as_dgl((input_nodes, output_nodes, blocks))
            check_blocks(g, output_nodes.cpu(), [4, 3], *output)
            check_from_snapshot(gpu, output)
            assert torch.equal(blocks[0].srcdata["feat"].cpu(), feat[input_nodes.cpu()])
    assert all(t.is_cuda for t in gpu.snapshot)
    loader.close()
