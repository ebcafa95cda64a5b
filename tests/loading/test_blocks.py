"""DeviceBlock: built from DGL blocks equal to DGL's own CSC view, moved between devices, validated."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from conftest import REPO, devices, requires_cuda

from dgl_zerocopy.loading.blocks import DeviceBlock, as_device_block

try:  # DeviceBlock's own tests run without DGL (the GPU image has none); those that build DGL graphs skip
    import dgl
except ImportError:
    dgl = None
requires_dgl = pytest.mark.skipif(dgl is None, reason="needs DGL (pip install dgl)")


def _graph(num_nodes: int = 40, num_edges: int = 120, isolated: int = 8, seed: int = 0) -> dgl.DGLGraph:
    """A random graph whose last ``isolated`` nodes have no in-edges (zero-in-degree seeds)."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_nodes, (num_edges,), generator=gen)
    dst = torch.randint(0, num_nodes - isolated, (num_edges,), generator=gen)
    return dgl.graph((src, dst), num_nodes=num_nodes)


def _sampled_blocks() -> list:
    """One block from to_block, two from NeighborSampler, two from the full-neighbour sampler."""
    dgl.seed(0)  # reproducible neighbour draws
    g = _graph()
    seeds = torch.tensor([0, 3, 5, 34, 36, 39])
    blocks = [dgl.to_block(dgl.in_subgraph(g, seeds), seeds)]
    blocks += dgl.dataloading.NeighborSampler([3, 2]).sample(g, seeds)[2]
    blocks += dgl.dataloading.MultiLayerFullNeighborSampler(2).sample(g, seeds)[2]
    return blocks


def _dense(indptr: torch.Tensor, indices: torch.Tensor, num_src: int) -> torch.Tensor:
    """Edge counts ``(num_dst, num_src)`` of a CSC structure: order within a column ignored."""
    rows = torch.repeat_interleave(torch.arange(indptr.numel() - 1), (indptr[1:] - indptr[:-1]).long())
    out = torch.zeros(indptr.numel() - 1, num_src)
    return out.index_put_((rows, indices.long()), torch.ones(indices.numel()), accumulate=True)


@requires_dgl
@pytest.mark.parametrize("id_dtype", [torch.int64, torch.int32])
def test_from_dgl_equals_dgl_csc(id_dtype):
    for block in _sampled_blocks():
        ours = DeviceBlock.from_dgl(block, "cpu", id_dtype=id_dtype)
        indptr, indices, _ = block.adj_tensors("csc")
        assert ours.indptr.dtype == ours.indices.dtype == ours.idtype == id_dtype
        torch.testing.assert_close(ours.indptr, indptr.to(id_dtype), rtol=0, atol=0)
        torch.testing.assert_close(ours.indices, indices.to(id_dtype), rtol=0, atol=0)
        assert ours.num_src_nodes() == block.num_src_nodes()
        assert ours.num_dst_nodes() == block.num_dst_nodes()
        assert ours.num_edges() == block.num_edges()
        torch.testing.assert_close(ours.in_degrees().long(), block.in_degrees(), rtol=0, atol=0)
        torch.testing.assert_close(ours.out_degrees().long(), block.out_degrees(), rtol=0, atol=0)
        torch.testing.assert_close(ours.srcdata["_ID"], block.srcdata[dgl.NID], rtol=0, atol=0)
        torch.testing.assert_close(ours.dstdata["_ID"], block.dstdata[dgl.NID], rtol=0, atol=0)
        assert ours.device == torch.device("cpu") and ours.is_block


@requires_dgl
def test_the_sample_has_zero_in_degree_destinations():
    # The layer tests rely on it: the isolated seeds 34, 36 and 39 have no in-edges.
    for block in _sampled_blocks():
        assert (block.in_degrees() == 0).any()


@requires_dgl
def test_adjacency_and_edge_dst_describe_the_edges():
    for block in _sampled_blocks():
        ours = DeviceBlock.from_dgl(block)
        src, dst = block.edges()
        expected = torch.zeros(block.num_dst_nodes(), block.num_src_nodes()).index_put_((dst, src), torch.ones(block.num_edges()), accumulate=True)
        torch.testing.assert_close(ours.adjacency().to_dense(), expected, rtol=0, atol=0)
        torch.testing.assert_close(ours.adjacency(transpose=True).to_dense(), expected.T, rtol=0, atol=0)
        assert ours.adjacency(torch.float64).dtype == torch.float64
        torch.testing.assert_close(ours.edge_dst(), torch.sort(dst).values, rtol=0, atol=0)


@requires_dgl
def test_a_coo_only_block_gives_the_same_structure():
    """DGL refuses CSC for a block restricted to COO; from_dgl then sorts the edges itself."""
    for block in _sampled_blocks():
        full = DeviceBlock.from_dgl(block)
        coo = DeviceBlock.from_dgl(block.formats(["coo"]))
        torch.testing.assert_close(coo.indptr, full.indptr, rtol=0, atol=0)
        n = block.num_src_nodes()
        torch.testing.assert_close(_dense(coo.indptr, coo.indices, n), _dense(full.indptr, full.indices, n), rtol=0, atol=0)


@requires_dgl
def test_a_graph_without_ids_or_edges():
    g = dgl.graph((torch.tensor([], dtype=torch.int64), torch.tensor([], dtype=torch.int64)), num_nodes=5)
    ours = DeviceBlock.from_dgl(g)
    assert (ours.num_src_nodes(), ours.num_dst_nodes(), ours.num_edges()) == (5, 5, 0)
    assert ours.srcdata == {} and ours.dstdata == {}
    assert int(ours.in_degrees().sum()) == int(ours.out_degrees().sum()) == 0
    torch.testing.assert_close(ours.adjacency() @ torch.ones(5, 2), torch.zeros(5, 2))


def _handmade_block() -> DeviceBlock:
    """Three destinations over five sources, with node ids, built without DGL."""
    ids = torch.tensor([10, 11, 12, 13, 14])
    return DeviceBlock(torch.tensor([0, 2, 3, 3]), torch.tensor([1, 4, 0]), 5, srcdata={"_ID": ids}, dstdata={"_ID": ids[:3]})


@pytest.mark.parametrize("device", devices())
def test_to_moves_every_tensor(device):
    block = _handmade_block()
    assert block.to("cpu") is block
    target = "meta" if device == "cpu" else device  # meta: a second device that every machine has
    moved = block.to(target)
    assert moved is not block and moved.device.type == target
    for t in (moved.indptr, moved.indices, *moved.srcdata.values(), *moved.dstdata.values()):
        assert t.device.type == target
    assert (moved.num_src_nodes(), moved.num_dst_nodes(), moved.num_edges()) == (block.num_src_nodes(), block.num_dst_nodes(), block.num_edges())
    if device == "cuda":
        back = moved.to("cpu")
        torch.testing.assert_close(back.indices, block.indices, rtol=0, atol=0)
        torch.testing.assert_close(back.srcdata["_ID"], block.srcdata["_ID"], rtol=0, atol=0)
        torch.testing.assert_close(moved.out_degrees().cpu(), block.out_degrees(), rtol=0, atol=0)


@requires_dgl
@pytest.mark.gpu
@requires_cuda
def test_from_dgl_onto_cuda():
    block = _sampled_blocks()[1]
    ours = DeviceBlock.from_dgl(block, "cuda", id_dtype=torch.int32)
    assert ours.device.type == "cuda" and ours.srcdata["_ID"].device.type == "cuda"
    assert as_device_block(ours, "cuda") is ours
    torch.testing.assert_close(ours.indices.cpu(), block.adj_tensors("csc")[1].int(), rtol=0, atol=0)


@requires_dgl
def test_as_device_block_converts_dgl_and_passes_ours():
    block = _sampled_blocks()[0]
    ours = as_device_block(block, "cpu")
    assert isinstance(ours, DeviceBlock)
    assert as_device_block(ours, "cpu") is ours


def test_constructor_checks_are_clear():
    ip, ix = torch.tensor([0, 1, 2]), torch.tensor([0, 2])
    with pytest.raises(TypeError, match="int32 or int64"):
        DeviceBlock(ip.float(), ix, 3)
    with pytest.raises(TypeError, match="share one dtype"):
        DeviceBlock(ip.int(), ix, 3)
    with pytest.raises(TypeError, match="1-D"):
        DeviceBlock(ip.view(1, 3), ix, 3)
    with pytest.raises(ValueError, match="num_src"):
        DeviceBlock(ip, ix, 1)
    with pytest.raises(ValueError, match="empty"):
        DeviceBlock(ip[:0], ix[:0], 0)
    with pytest.raises(ValueError, match="move both"):
        DeviceBlock(ip, ix.to("meta"), 3)


@requires_dgl
def test_from_dgl_checks_are_clear():
    with pytest.raises(TypeError, match="expected a DGL block"):
        DeviceBlock.from_dgl(torch.zeros(3))
    with pytest.raises(TypeError, match="id_dtype"):
        DeviceBlock.from_dgl(_graph(), id_dtype=torch.float32)
    hetero = dgl.heterograph({("u", "a", "u"): ([0], [1]), ("u", "b", "v"): ([1], [0])})
    assert type(DeviceBlock.from_dgl(hetero)).__name__ == "HeteroDeviceBlock"  # typed blocks: tests/training/test_nn_hetero.py


def test_core_modules_import_without_dgl():
    code = (
        "import sys; sys.modules['dgl'] = None\n"  # makes `import dgl` fail
        "import torch\n"
        "from dgl_zerocopy.loading.blocks import DeviceBlock\n"
        "from dgl_zerocopy.training.models import build_model\n"
        "b = DeviceBlock(torch.tensor([0, 2, 2]), torch.tensor([1, 3]), 4)\n"
        "for name in ('sage', 'gcn'):\n"
        "    assert build_model(name, 3, 4, 2, 1, 0.0)([b], torch.randn(4, 3)).shape == (2, 2)\n"
        "try:\n"
        "    DeviceBlock.from_dgl(object())\n"
        "except ImportError as err:\n"
        "    assert 'needs DGL' in str(err)\n"
        "else:\n"
        "    raise SystemExit('from_dgl did not say that DGL is missing')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, encoding="utf-8", timeout=120)
    assert result.returncode == 0, result.stderr
