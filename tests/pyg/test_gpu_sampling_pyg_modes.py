"""The PyG front end's GPU route (``device="cuda"``) for disjoint, temporal and weighted sampling.

On the CPU the route runs as on a GPU with the emulator backend standing in for CUDA (the same ``.cu``
kernels compiled by g++, on CPU tensors; the PyG sampler's own code builds the GPU sampler, its time and
weight tables and the graph). Held to the CPU sampler (the NumPy reference of ``dgl_zerocopy.sampling.picks``):
equal batches where the draws cannot differ ('last', a fanout covering every neighbourhood), and otherwise the
invariants: no neighbour later than its seed's time (the check shown able to fail), the trees of a disjoint
batch, chi-squared for the weights. With a GPU (``gpu`` marker) the CUDA route equals the emulated one.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

pytest.importorskip("torch_geometric")

from torch_geometric.data import Data  # noqa: E402

from dgl_zerocopy.cuda.sampling.op_count import count_ops  # noqa: E402
from dgl_zerocopy.cuda.sampling.temporal import MAX_WEIGHTED_FANOUT  # noqa: E402
from dgl_zerocopy.pyg.sampler import NeighborSampler  # noqa: E402
from dgl_zerocopy.sampling import neighbor  # noqa: E402

N, E = 200, 1600
SEEDS = torch.tensor([0, 5, 5, 17, 42, 199, 7, 120])


def make_data(seed: int = 0) -> Data:
    """Random edges (repeated pairs too); node times and edge times in [0, 50); weights with some zeros."""
    gen = torch.Generator().manual_seed(seed)
    src, dst = torch.randint(0, N, (E,), generator=gen), torch.randint(0, N, (E,), generator=gen)
    weight = torch.rand(E, generator=gen) * (torch.rand(E, generator=gen) > 0.2)
    return Data(
        edge_index=torch.stack([src, dst]),
        num_nodes=N,
        time=torch.randint(0, 50, (N,), generator=gen),
        edge_time=torch.randint(0, 50, (E,), generator=gen),
        weight=weight,
    )


@pytest.fixture
def emulated(monkeypatch):
    """``emulated(sampler)``: the sampler takes its GPU route (a CUDA device as far as the route is decided),
    its GPU sampler built by the route's own code with every option, on the emulator backend."""
    real = neighbor.GpuNeighborSampler

    def on_the_emulator(fanouts, **options):
        assert options.pop("device").type == "cuda" and options.pop("placement") == "host"
        return real(fanouts, device="emulator", **options)

    monkeypatch.setattr(neighbor, "GpuNeighborSampler", on_the_emulator)

    def route(sampler: NeighborSampler) -> NeighborSampler:
        sampler.device, sampler.graph_placement = torch.device("cuda"), "host"
        real_sample = sampler._sample

        def sample(*args, **kwargs):
            out = real_sample(*args, **kwargs)
            assert sampler._gpu is not None and sampler._gpu.backend == "emulator", "the batch came from the GPU route"
            return out

        sampler._sample = sample
        return sampler

    return route


def same_batches(cpu, gpu, perm) -> None:
    for name in ("node", "row", "col", "batch"):
        a, b = getattr(cpu, name), getattr(gpu, name)
        assert (a is None and b is None) or torch.equal(a, b), name
    assert torch.equal(perm[cpu.edge], gpu.edge), "the GPU route's edge ids are PyG's edge ids of the CPU route's positions"
    assert cpu.num_sampled_nodes == gpu.num_sampled_nodes and cpu.num_sampled_edges == gpu.num_sampled_edges


def later_neighbours(data: Data, out, seed_time: torch.Tensor, level: str) -> int:
    """Sampled edges whose time (the source node's, or the edge's) is later than the time of their tree's seed."""
    tree_time = seed_time[out.batch[out.col]]
    times = data.time[out.node[out.row]] if level == "node" else data.edge_time[out.edge]
    return int((times > tree_time).sum())


def check_latest(data: Data, out, seed_time: torch.Tensor) -> int:
    """'last' by its definition (node-level times): per sampled destination, no allowed in-edge left out is
    later than one picked. Returns the destinations checked."""
    checked = 0
    for c in out.col.unique().tolist():
        limit = seed_time[out.batch[c]]
        into = (data.edge_index[1] == out.node[c]).nonzero().flatten()
        allowed = into[data.time[data.edge_index[0, into]] <= limit]
        picked = out.edge[out.col == c]
        left = allowed[~torch.isin(allowed, picked)]
        if len(left):
            assert data.time[data.edge_index[0, left]].max() <= data.time[data.edge_index[0, picked]].min(), c
        checked += 1
    return checked


def check_trees(data: Data, out) -> None:
    """Every edge is the graph's, inside one tree, into a node of the hop before; seeds root their own trees."""
    assert torch.equal(data.edge_index[:, out.edge], torch.stack([out.node[out.row], out.node[out.col]]))
    assert torch.equal(out.batch[out.row], out.batch[out.col])
    assert torch.equal(out.batch[: len(SEEDS)], torch.arange(len(SEEDS)))
    keys = out.batch * N + out.node
    assert len(keys.unique()) == len(keys), "a node once per tree"


@pytest.mark.parametrize("level", ["node", "edge"])
def test_temporal_last_equals_the_cpu_sampler(emulated, level):
    """'last' draws nothing: the GPU route's batch is the CPU sampler's, element for element."""
    data = make_data()
    attr = "time" if level == "node" else "edge_time"
    seed_time = torch.randint(10, 50, (len(SEEDS),), generator=torch.Generator().manual_seed(1))
    cpu = NeighborSampler(data, [3, 2, 2], time_attr=attr, temporal_strategy="last")
    gpu = emulated(NeighborSampler(data, [3, 2, 2], time_attr=attr, temporal_strategy="last"))
    for times in (seed_time, None) if level == "node" else (seed_time,):  # None: the seeds' own times
        ours, ref = gpu._sample(SEEDS, times), cpu._sample(SEEDS, times)
        same_batches(ref, ours, cpu.perm)
        check_trees(data, ours)
        assert len(ours.row) > len(SEEDS)
        if level == "node":
            assert check_latest(data, ours, times if times is not None else data.time[SEEDS]) > len(SEEDS)


@pytest.mark.parametrize("link", [False, True], ids=["NeighborLoader", "LinkNeighborLoader"])
def test_temporal_loaders_on_the_gpu_route_equal_the_cpu_route(emulated, link):
    """The loaders around the sampler (input_time, edge_label_time, PyG's filter, the features): batch for batch."""
    from dgl_zerocopy.pyg import LinkNeighborLoader, NeighborLoader

    data = make_data()
    data.x = torch.randn(N, 4, generator=torch.Generator().manual_seed(5))
    times = torch.randint(10, 50, (E if link else N,), generator=torch.Generator().manual_seed(6))
    make = (
        (lambda: LinkNeighborLoader(data, [3, 2], time_attr="time", temporal_strategy="last", edge_label_time=times, batch_size=32))
        if link
        else (lambda: NeighborLoader(data, [3, 2], time_attr="time", temporal_strategy="last", input_time=times, batch_size=32))
    )
    cpu, gpu = make(), make()
    emulated(gpu.link_sampler if link else gpu.node_sampler)
    batches = 0
    for ref, ours in zip(cpu, gpu, strict=True):
        for name in ("n_id", "e_id", "edge_index", "batch", "x"):
            assert torch.equal(ref[name], ours[name]), name
        batches += 1
    assert batches == -(-(E if link else N) // 32)


@pytest.mark.parametrize("level", ["node", "edge"])
def test_temporal_uniform_never_picks_a_later_neighbour(emulated, level):
    data = make_data()
    attr = "time" if level == "node" else "edge_time"
    seed_time = torch.randint(10, 40, (len(SEEDS),), generator=torch.Generator().manual_seed(2))
    gpu = emulated(NeighborSampler(data, [4, 3], time_attr=attr))
    torch.manual_seed(0)
    ours = gpu._sample(SEEDS, seed_time)
    check_trees(data, ours)
    assert later_neighbours(data, ours, seed_time, level) == 0 and len(ours.row) > 2 * len(SEEDS)
    # The check can fail: the same seeds sampled without the cut (disjoint, uniform) pick later neighbours.
    untimed = emulated(NeighborSampler(data, [4, 3], disjoint=True))
    assert later_neighbours(data, untimed._sample(SEEDS), seed_time, level) > 0


def test_disjoint_without_time_gives_trees(emulated):
    data = make_data()
    gpu = emulated(NeighborSampler(data, [-1, 2], disjoint=True))
    ours = gpu._sample(SEEDS)
    check_trees(data, ours)
    cpu = NeighborSampler(data, [-1], disjoint=True)  # every in-edge: draws nothing, so equal to the CPU's
    same_batches(cpu._sample(SEEDS), emulated(NeighborSampler(data, [-1], disjoint=True))._sample(SEEDS), cpu.perm)


def test_weighted_equals_the_cpu_sampler_where_nothing_is_drawn(emulated):
    """A fanout covering every neighbourhood without replacement takes every in-edge, those of weight 0 too
    (pyg-lib's rule: all of a neighbourhood no larger than the fanout): no draw, the CPU's batch."""
    data = make_data()
    deg = int(torch.bincount(data.edge_index[1], minlength=N).max())
    cpu = NeighborSampler(data, [deg, deg], weight_attr="weight")
    gpu = emulated(NeighborSampler(data, [deg, deg], weight_attr="weight"))
    seeds = SEEDS[[0, 1, 3, 4, 5, 6, 7]]  # each once: a source reached as a repeated seed is numbered apart
    same_batches(cpu._sample(seeds), gpu._sample(seeds), cpu.perm)


@pytest.mark.parametrize("replace", [True, False])
def test_weighted_picks_follow_the_weights(emulated, replace):
    """A hub of 12 in-edges, seeded 300 times a batch: with replacement the picks are chi-squared
    against the weights; without, one pick each (fanout 1 without replacement is a weighted draw too)."""
    stats = pytest.importorskip("scipy.stats")
    weights = torch.tensor([0.5, 1.0, 2.0, 4.0, 8.0, 3.0, 1.5, 0.25, 0.0, 6.0, 2.5, 1.0])
    data = Data(edge_index=torch.stack([torch.arange(1, 13), torch.zeros(12, dtype=torch.long)]), num_nodes=13, weight=weights)
    fanout = 3 if replace else 1
    gpu = emulated(NeighborSampler(data, [fanout], weight_attr="weight", replace=replace))
    hits = torch.zeros(12, dtype=torch.long)
    torch.manual_seed(0)
    for _ in range(8):
        out = gpu._sample(torch.zeros(300, dtype=torch.long))
        hits += torch.bincount(out.edge, minlength=12)
    assert int(hits.sum()) == 8 * 300 * fanout and int(hits[8]) == 0, hits
    positive = weights > 0
    expected = hits.sum().double() * weights.double()[positive] / weights.double().sum()
    assert stats.chisquare(hits[positive].numpy(), expected.numpy()).pvalue > 1e-4, hits


def test_weighted_fanout_above_the_kernel_limit_is_refused():
    data = make_data()
    with pytest.raises(ValueError, match=f"\\[0, {MAX_WEIGHTED_FANOUT}\\]"):
        NeighborSampler(data, [MAX_WEIGHTED_FANOUT + 1], weight_attr="weight", device="cuda")
    NeighborSampler(data, [MAX_WEIGHTED_FANOUT + 1], weight_attr="weight", replace=True, device="cuda")  # with replacement: no limit
    NeighborSampler(data, [MAX_WEIGHTED_FANOUT + 1], weight_attr="weight")  # the CPU sampler: no limit


def test_the_pyg_cuda_route_reads_the_device_once_per_batch(emulated):
    """PyG's sampler on its GPU route, fanouts (15, 10, 5): one host read per batch (the batch's sizes)."""
    gen = torch.Generator().manual_seed(3)
    data = Data(edge_index=torch.randint(0, 2000, (2, 30_000), generator=gen), num_nodes=2000)
    gpu = emulated(NeighborSampler(data, [15, 10, 5]))
    seeds = torch.randint(0, 2000, (256,), generator=gen)
    gpu._sample(seeds)  # the graph and the emulator built, outside the count
    with count_ops() as count:
        out = gpu._sample(seeds)
    assert count.host_syncs == 1 and count.syncs == {"tolist": 1}, count.summary()
    assert sum(out.num_sampled_edges) == len(out.row) > 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("placement", ["pinned", "device"])
@pytest.mark.parametrize("mode", ["last", "uniform", "weighted"])
def test_cuda_route_equals_the_emulated_route(emulated, placement, mode):
    data = make_data()
    options = dict(weight_attr="weight") if mode == "weighted" else dict(time_attr="time", temporal_strategy=mode)
    seed_time = None if mode == "weighted" else torch.randint(10, 50, (len(SEEDS),), generator=torch.Generator().manual_seed(4))
    cuda = NeighborSampler(data, [4, 3], device="cuda", graph_placement=placement, **options)
    torch.manual_seed(0)
    ours = cuda._sample(SEEDS, seed_time)
    assert ours.node.device.type == "cuda"
    emulated_sampler = emulated(NeighborSampler(data, [4, 3], **options))
    torch.manual_seed(0)
    ref = emulated_sampler._sample(SEEDS, seed_time)
    for name in ("node", "row", "col", "edge") + (("batch",) if mode != "weighted" else ()):
        assert torch.equal(getattr(ours, name).cpu(), getattr(ref, name)), name
    if mode != "weighted":
        on_host = dataclasses.replace(ours, **{name: getattr(ours, name).cpu() for name in ("node", "row", "col", "edge", "batch")})
        assert later_neighbours(data, on_host, seed_time, "node") == 0
    cuda.close()


def test_gpu_sampler_refuses_what_its_modes_cannot_do():
    from dgl_zerocopy.sampling import GpuNeighborSampler, SamplingGraph
    from dgl_zerocopy.sampling.gpu_picks import TemporalPicks, WeightedPicks

    indptr, indices = torch.tensor([0, 2, 3, 3]), torch.tensor([1, 2, 0])
    times, weights = torch.tensor([1, 5, 2]), torch.tensor([0.5, 1.0, 2.0])
    temporal, weighted = TemporalPicks(indptr, times), WeightedPicks(indptr, weights)
    with pytest.raises(ValueError, match="needs disjoint=True"):
        GpuNeighborSampler([2], device="emulator", temporal=temporal)
    with pytest.raises(ValueError, match="together"):
        GpuNeighborSampler([2], device="emulator", disjoint=True, temporal=temporal, weighted=weighted)
    with pytest.raises(ValueError, match="'cuda' or 'emulator', but got 'reference'"):
        GpuNeighborSampler([2], device="reference", weighted=weighted)
    with pytest.raises(ValueError, match=f"fanout {MAX_WEIGHTED_FANOUT + 1} .* \\[0, {MAX_WEIGHTED_FANOUT}\\]"):
        GpuNeighborSampler([2, MAX_WEIGHTED_FANOUT + 1], device="emulator", weighted=weighted)
    graph = SamplingGraph(indptr, indices)
    sampler = GpuNeighborSampler([2], device="emulator", disjoint=True, temporal=temporal)
    with pytest.raises(ValueError, match="needs seed_time="):
        sampler.sample_blocks(graph, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"one time per seed \(2\), but has 3"):
        sampler.sample_blocks(graph, torch.tensor([0, 1]), seed_time=torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="seed_time= is for a temporal sampler"):
        GpuNeighborSampler([2], device="emulator").sample_blocks(graph, torch.tensor([0]), seed_time=torch.tensor([1]))
    _, _, blocks = sampler.sample_blocks(graph, torch.tensor([0, 0]), seed_time=torch.tensor([1, 5]))
    assert blocks[0].indices.numel() == 1 + 2  # node 0's in-edges at times 1 and 5: one for the first tree, both for the second
    with pytest.raises(ValueError, match="not sorted by time"):
        TemporalPicks(indptr, torch.tensor([5, 1, 2]))
    with pytest.raises(ValueError, match="temporal_strategy must be one of"):
        TemporalPicks(indptr, times, "first")
    with pytest.raises(TypeError, match="int32, int64, float32 or float64"):
        TemporalPicks(indptr, times.to(torch.int16))
    with pytest.raises(ValueError, match="not a finite number >= 0"):
        WeightedPicks(indptr, torch.tensor([0.5, -1.0, 2.0]))
