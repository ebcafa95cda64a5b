"""bench/training/scale_gpu.py, scale.py's GPU route: the check of our sampler's blocks against the graph's files
(it passes the reference backend's blocks and catches wrong ones), the route run on the CPU with the reference
backend standing in for CUDA (the row keys of the CPU route, and more), and on a GPU the route itself, its
picks equal to the reference backend's and every edge of a batch checked against the files (``gpu``)."""

import argparse
import sys

import numpy as np
import pytest
import torch
from conftest import REPO, requires_cuda

from dgl_zerocopy.data import papers_disk as pd
from dgl_zerocopy.data.disk_graph import open_disk_graph
from dgl_zerocopy.data.synthetic import SyntheticSpec
from dgl_zerocopy.sampling import GpuNeighborSampler
from dgl_zerocopy.sampling.blocks import EID, NID
from dgl_zerocopy.sampling.disk import sampling_graph

sys.path.insert(0, str(REPO / "bench" / "training"))
import scale  # noqa: E402
import scale_gpu  # noqa: E402

FANOUTS = [4, 3, 2]  # scale.py's order: the seeds' hop first


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    """A papers100M-shaped graph of 3,000 nodes on disk (under 1 MB)."""
    folder = tmp_path_factory.mktemp("scale_gpu") / "g"
    return open_disk_graph(pd.generate_to_disk(folder, SyntheticSpec.papers100m_like(num_nodes=3_000), block_nodes=1_000, progress=False))


def _args(**changes) -> argparse.Namespace:
    return argparse.Namespace(**{"seed": 0, "host_buffer": 1 << 20, "steps": 10, "hidden": 16, **changes})


def _batches(graph, size: int = 8) -> list[np.ndarray]:
    seeds = np.asarray(graph.train_idx)
    return [np.sort(seeds[i : i + size]) for i in range(0, min(len(seeds), 4 * size), size)]


def test_the_check_passes_the_reference_blocks_and_catches_wrong_ones(graph):
    seeds = np.array([3, 1, 2_000, 2_999])
    layers = list(reversed(FANOUTS))
    with sampling_graph(graph) as csc, GpuNeighborSampler(layers, device="reference") as sampler:
        _, _, blocks = sampler.sample_blocks(csc, seeds)
        assert scale_gpu.check_blocks(graph, blocks, layers) == 0  # reads the edge ids: while the graph is open
    with pytest.raises(AssertionError, match=r"min\(in-degree, 5\)"):
        scale_gpu.check_blocks(graph, blocks, [5, 5, 5])  # counts of other fanouts
    src = blocks[0].srcdata[NID]
    blocks[0].srcdata[NID] = src + 1  # every edge names the wrong source
    with pytest.raises(AssertionError, match="another source"):
        scale_gpu.check_blocks(graph, blocks, layers)
    blocks[0].srcdata[NID] = src
    pos = blocks[-1].edata[EID]
    blocks[-1].edata[EID] = torch.zeros_like(pos)
    with pytest.raises(AssertionError, match="sampled twice"):
        scale_gpu.check_blocks(graph, blocks, layers)


def test_the_gpu_route_on_the_cpu_gives_the_cpu_routes_row_and_more(graph):
    """The reference backend and the cpu store stand in for CUDA: the route runs end to end, its row has every
    key of the CPU route's row plus the pinning's and the GPU memory's, and says it is no GPU figure."""
    batches = _batches(graph)
    on_gpu_route = scale_gpu.run_route(_args(), graph, batches, FANOUTS, emulate=True)
    assert on_gpu_route["device"] == scale_gpu.EMULATED and on_gpu_route["gpu_peak_gb"] is None
    assert len(on_gpu_route["sample_s"]) == len(batches) == len(on_gpu_route["gather_s"]) and len(on_gpu_route["losses"]) == 10
    assert all(e > 0 for e in on_gpu_route["edges"]) and on_gpu_route["past"] == 0
    row = scale._row(graph, on_gpu_route, 0.01, 0.0, 10)
    cpu_row = scale._row(graph, scale._run_on_cpu(_args(), graph, batches, FANOUTS), 0.01, 0.0, 10)
    assert set(row) - set(cpu_row) == {"pin_s", "gpu_peak_gb"} and set(cpu_row) <= set(row)
    assert row["device"] == scale_gpu.EMULATED and cpu_row["device"] == "cpu"
    assert row["sampled_edges_per_batch"] > 0 and row["ns_per_sampled_edge"] > 0 and row["gathered_bytes_per_batch"] > 0


@pytest.mark.gpu
@requires_cuda
def test_the_gpu_route_samples_the_pinned_csc_as_the_reference_does_and_its_edges_are_in_the_files(graph):
    """On a GPU: the CSC pinned in place (read-only, or a copy-on-write map: the files unchanged), our kernels'
    blocks equal to the reference backend's for the same RNG keys, every edge checked against the files; then
    the whole route, which checks its first batch itself, trains on the GPU and unpins what it pinned."""
    files = {name: (graph.path / f"{name}.npy").read_bytes() for name in ("indptr", "indices")}
    seeds = np.array([3, 1, 2_000, 2_999])
    layers = list(reversed(FANOUTS))
    device = torch.device("cuda", torch.cuda.current_device())
    with sampling_graph(graph, "pinned", device) as pinned, GpuNeighborSampler(layers, device=device) as sampler:
        assert pinned.pinned
        torch.manual_seed(5)
        input_nodes, _, blocks = sampler.sample_blocks(pinned, seeds)
        assert input_nodes.device == device and scale_gpu.check_blocks(graph, blocks, layers) == 0
        with sampling_graph(graph) as host, GpuNeighborSampler(layers, device="reference") as reference:
            torch.manual_seed(5)
            expected_input, _, expected = reference.sample_blocks(host, seeds)
            assert torch.equal(input_nodes.cpu(), expected_input)
            for got, want in zip(blocks, expected):
                for a, b in ((got.indptr, want.indptr), (got.indices, want.indices), (got.srcdata[NID], want.srcdata[NID]), (got.edata[EID], want.edata[EID])):
                    assert torch.equal(a.cpu(), b)
    assert not pinned.pinned, "closed: the CSC's pages are unregistered"
    measured = scale_gpu.run_route(_args(), graph, _batches(graph), FANOUTS)
    row = scale._row(graph, measured, 0.01, 0.0, 10)
    assert row["device"] == f"{torch.cuda.get_device_name(device)} ({device})" and row["pin_s"] >= 0 and row["gpu_peak_gb"] > 0
    assert row["sampled_edges_per_batch"] > 0 and row["loss_falls"]
    assert all((graph.path / f"{name}.npy").read_bytes() == data for name, data in files.items()), "pinning never writes the files"
