"""Typed (heterograph) blocks: HeteroDeviceBlock equals DGL's block, and dgl_zerocopy.nn's
HeteroGraphConv (and RGCN) over it equals DGL's HeteroGraphConv over the DGL block, forward and backward."""

from __future__ import annotations

import pytest
import torch
from conftest import devices, requires_cuda

from dgl_zerocopy import nn as ours_nn
from dgl_zerocopy.loading.blocks import DeviceBlock, HeteroDeviceBlock, as_device_block
from dgl_zerocopy.nn import load_dgl_weights
from dgl_zerocopy.training.models import RGCN

try:  # the typed blocks' own tests run without DGL (the GPU image has none); those comparing with DGL skip
    import dgl
    import dgl.nn as dglnn
except ImportError:
    dgl = dglnn = None
requires_dgl = pytest.mark.skipif(dgl is None, reason="needs DGL (pip install dgl)")

ETYPES = {
    ("author", "writes", "paper"): (30, 60, 90),
    ("paper", "written_by", "author"): (60, 30, 90),
    ("paper", "cites", "paper"): (60, 60, 150),
    ("field", "topic_of", "paper"): (5, 60, 60),
    ("paper", "has_topic", "field"): (60, 5, 60),
}
WIDTH = 6


def _graph(idtype=torch.int64) -> dgl.DGLGraph:
    gen = torch.Generator().manual_seed(0)
    data = {key: (torch.randint(0, ns, (m,), generator=gen), torch.randint(0, nd, (m,), generator=gen)) for key, (ns, nd, m) in ETYPES.items()}
    g = dgl.heterograph(data, num_nodes_dict={"author": 30, "paper": 60, "field": 5}, idtype=idtype)
    for ntype in g.ntypes:
        g.nodes[ntype].data["feat"] = torch.randn(g.num_nodes(ntype), WIDTH, generator=gen)
    return g


def _blocks(idtype=torch.int64) -> list:
    """Two sampled layers (per-edge-type fanouts: fields' papers capped low), one full layer, and
    one block of to_block, whose edges keep the graph's order (not the CSC order)."""
    dgl.seed(0)
    g = _graph(idtype)
    seeds = {"paper": torch.tensor([0, 5, 7, 59], dtype=idtype)}
    fanouts = [{"writes": 2, "written_by": 2, "cites": 3, "topic_of": 1, "has_topic": 1}] * 2
    blocks = dgl.dataloading.NeighborSampler(fanouts).sample(g, seeds)[2]
    blocks += dgl.dataloading.MultiLayerFullNeighborSampler(1).sample(g, seeds)[2]
    return blocks + [_unsorted_block(idtype)]


def _unsorted_block(idtype) -> dgl.DGLGraph:
    """A typed block whose edges are not in CSC order, with parent edge ids (EID) of its own."""
    gen = torch.Generator().manual_seed(3)
    counts = {"author": (6, 2), "paper": (9, 4), "field": (3, 1)}
    data = {key: (torch.randint(0, counts[key[0]][0], (12,), generator=gen), torch.randint(0, counts[key[2]][1], (12,), generator=gen)) for key in ETYPES}
    block = dgl.create_block(data, {t: n for t, (n, _) in counts.items()}, {t: n for t, (_, n) in counts.items()}, idtype=idtype)
    for key in ETYPES:
        block.edges[key].data[dgl.EID] = torch.randperm(1000, generator=gen)[:12].to(idtype)
    return block


@pytest.mark.parametrize("id_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("graph_idtype", [torch.int64, torch.int32])
@requires_dgl
def test_from_dgl_of_a_typed_block_equals_dgls_block(id_dtype, graph_idtype):
    for block in _blocks(graph_idtype):
        ours = DeviceBlock.from_dgl(block, "cpu", id_dtype=id_dtype)
        assert isinstance(ours, HeteroDeviceBlock) and ours.is_block
        assert ours.canonical_etypes == block.canonical_etypes and ours.idtype == id_dtype
        assert (ours.srctypes, ours.dsttypes) == (block.srctypes, block.dsttypes)
        for ntype in block.srctypes:
            assert ours.num_src_nodes(ntype) == block.num_src_nodes(ntype)
            assert ours.num_dst_nodes(ntype) == block.num_dst_nodes(ntype)
            if dgl.NID in block.srcnodes[ntype].data:  # create_block's has none
                assert torch.equal(ours.srcdata["_ID"][ntype], block.srcnodes[ntype].data[dgl.NID])
                assert torch.equal(ours.dstdata["_ID"][ntype], block.dstnodes[ntype].data[dgl.NID])
        assert ours.num_src_nodes() == block.num_src_nodes() and ours.num_edges() == block.num_edges()
        for key in block.canonical_etypes:
            indptr, indices, eids = block.adj_tensors("csc", etype=key)
            rel = ours[key]
            assert rel is ours[key[1]] and rel.dst_in_src == (key[0] == key[2])
            assert torch.equal(rel.indptr, indptr.to(id_dtype)) and torch.equal(rel.indices, indices.to(id_dtype))
            assert torch.equal(ours.edata["_ID"][key], block.edges[key].data[dgl.EID][eids])
            assert torch.equal(rel.in_degrees().long(), block.in_degrees(etype=key).long())
            assert torch.equal(rel.out_degrees().long(), block.out_degrees(etype=key).long())
        assert as_device_block(block, "cpu").canonical_etypes == ours.canonical_etypes
        assert as_device_block(ours, "cpu") is ours


@pytest.mark.parametrize("device", devices())
@requires_dgl
def test_to_moves_every_tensor_once_and_the_data_views_stay_shared(device):
    block = _blocks()[0]
    ours = HeteroDeviceBlock.from_dgl(block, "cpu")
    ours.srcdata["feat"] = {ntype: torch.ones(ours.num_src_nodes(ntype), 2) for ntype in ours.srctypes}
    moved = ours.to("meta" if device == "cpu" else device)
    assert moved is not ours and moved.device.type == ("meta" if device == "cpu" else "cuda")
    for key in moved.canonical_etypes:
        rel = moved[key]
        assert rel.indptr.device == moved.device and rel.edata["_ID"].device == moved.device
        assert rel.srcdata is moved._src[key[0]], "a relation reads its source type's data"
        assert rel.srcdata["feat"].device == moved.device
    assert moved.to(moved.device) is moved


@requires_dgl
def test_typed_data_reads_and_writes_as_dgls_views():
    ours = HeteroDeviceBlock.from_dgl(_blocks()[0], "cpu")
    n = ours.num_src_nodes("paper")
    ours.srcdata["h"] = {"paper": torch.zeros(n, 3)}
    assert set(ours.srcdata["h"]) == {"paper"}, "only the types that have a name are returned"
    assert ours["cites"].srcdata["h"] is ours.srcdata["h"]["paper"]
    with pytest.raises(TypeError, match=r"dict \{type: tensor\}"):
        ours.srcdata["h"] = torch.zeros(n, 3)
    with pytest.raises(ValueError, match=f"must have {n} rows"):
        ours.srcdata["g"] = {"paper": torch.zeros(n + 1, 3), "author": torch.zeros(ours.num_src_nodes("author"), 3)}
    assert "g" not in ours.srcdata, "nothing half written"
    with pytest.raises(KeyError, match="not a node type"):
        ours.srcdata["g"] = {"venue": torch.zeros(1)}
    ours.edata["w"] = {"cites": torch.ones(ours.num_edges("cites"))}  # an edge type's name stands for its canonical type
    assert set(ours.edata["w"]) == {("paper", "cites", "paper")}
    del ours.srcdata["h"]
    assert "h" not in ours["cites"].srcdata
    one_type = HeteroDeviceBlock.from_dgl(dgl.heterograph({("p", "c", "p"): ([0], [1]), ("p", "d", "p"): ([1], [0])}), "cpu")
    one_type.srcdata["x"] = torch.ones(2, 1)  # one node type: the tensor itself, as in DGL
    assert one_type.srcdata["x"].shape == (2, 1)


def _features(block, requires_grad=True) -> dict:
    gen = torch.Generator().manual_seed(1)
    return {nt: torch.randn(block.num_src_nodes(nt), WIDTH, generator=gen).requires_grad_(requires_grad) for nt in block.srctypes}


def _pair(kind: str, aggregate: str) -> tuple:
    """DGL's HeteroGraphConv and ours, with the same weights."""

    def layers(module):
        if kind == "sage":
            return {key[1]: module.SAGEConv(WIDTH, 4, "mean") for key in ETYPES}
        return {key[1]: module.GraphConv(WIDTH, 4, norm="both") for key in ETYPES}

    theirs = dglnn.HeteroGraphConv(layers(dglnn), aggregate=aggregate)
    ours = ours_nn.HeteroGraphConv(layers(ours_nn), aggregate=aggregate)
    load_dgl_weights(ours, theirs)
    return theirs, ours


def _assert_same(theirs_out, ours_out, theirs_in, ours_in, theirs_mod, ours_mod):
    assert set(theirs_out) == set(ours_out)
    for ntype in theirs_out:
        torch.testing.assert_close(ours_out[ntype], theirs_out[ntype], rtol=1e-5, atol=1e-5)
    weights = torch.Generator().manual_seed(2)
    probes = {nt: torch.randn(out.shape, generator=weights) for nt, out in theirs_out.items()}
    sum((theirs_out[nt] * probes[nt]).sum() for nt in probes).backward()
    sum((ours_out[nt] * probes[nt]).sum() for nt in probes).backward()
    for ntype in theirs_in:
        torch.testing.assert_close(ours_in[ntype].grad, theirs_in[ntype].grad, rtol=1e-5, atol=1e-5)
    theirs_grads = {name: p.grad for name, p in theirs_mod.named_parameters()}
    for name, p in ours_mod.named_parameters():
        torch.testing.assert_close(p.grad, theirs_grads[name], rtol=1e-5, atol=1e-5, msg=name)


@pytest.mark.parametrize("kind", ["sage", "gcn"])
@pytest.mark.parametrize("aggregate", ["sum", "mean", "max", "stack"])
@pytest.mark.parametrize("given", ["dgl", "device"])
@requires_dgl
def test_hetero_graph_conv_equals_dgls_forward_and_backward(kind, aggregate, given):
    for block in _blocks():
        theirs, ours = _pair(kind, aggregate)
        theirs_in, ours_in = _features(block), _features(block)
        graph = block if given == "dgl" else HeteroDeviceBlock.from_dgl(block, "cpu")
        _assert_same(theirs(block, theirs_in), ours(graph, ours_in), theirs_in, ours_in, theirs, ours)


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("kind", ["sage", "gcn"])
@requires_dgl
def test_hetero_graph_conv_on_cuda_equals_dgls_on_the_cpu(kind):
    for block in _blocks():
        theirs, ours = _pair(kind, "mean")
        ours = ours.cuda()
        typed = HeteroDeviceBlock.from_dgl(block, "cuda")
        typed.record_stream(torch.cuda.current_stream())
        theirs_in = _features(block)
        ours_in = {nt: v.detach().cuda().requires_grad_(True) for nt, v in theirs_in.items()}
        expected, got = theirs(block, theirs_in), ours(typed, ours_in)
        assert set(got) == set(expected)
        for ntype in expected:
            torch.testing.assert_close(got[ntype].cpu(), expected[ntype], rtol=1e-4, atol=1e-4)
        sum(v.sum() for v in expected.values()).backward()
        sum(v.sum() for v in got.values()).backward()
        for ntype in theirs_in:
            torch.testing.assert_close(ours_in[ntype].grad.cpu(), theirs_in[ntype].grad, rtol=1e-4, atol=1e-4)


@requires_dgl
def test_our_layers_work_inside_dgls_hetero_graph_conv_on_both_kinds_of_block():
    block = _blocks()[0]
    theirs, ours = _pair("sage", "sum")
    wrapped = dglnn.HeteroGraphConv({key[1]: ours.mods[key[1]] for key in ETYPES}, aggregate="sum")
    for graph in (block, HeteroDeviceBlock.from_dgl(block, "cpu")):
        theirs.zero_grad(), ours.zero_grad()
        theirs_in, ours_in = _features(block), _features(block)
        _assert_same(theirs(block, theirs_in), wrapped(graph, ours_in), theirs_in, ours_in, theirs, ours)


@requires_dgl
def test_a_src_dst_pair_and_a_custom_aggregate_and_missing_inputs_follow_dgl():
    block = _blocks()[0]
    theirs, ours = _pair("sage", lambda tensors, dsttype: tensors[-1] * 2)
    src = _features(block, requires_grad=False)
    dst = {nt: v[: block.num_dst_nodes(nt)] + 1 for nt, v in src.items()}
    del src["field"]  # relations from fields are left out
    expected, got = theirs(block, (src, dst)), ours(HeteroDeviceBlock.from_dgl(block, "cpu"), (src, dst))
    assert set(got) == set(expected)
    for ntype in expected:
        torch.testing.assert_close(got[ntype], expected[ntype], rtol=1e-5, atol=1e-5)


@requires_dgl
def test_rgcn_equals_the_same_model_built_from_dgl_layers():
    blocks = _blocks()[:2]
    for conv in ("sage", "gcn"):
        ours = RGCN(WIDTH, 5, 3, [key[1] for key in ETYPES], num_layers=2, dropout=0.0, conv=conv)
        theirs = torch.nn.Module()
        layer = (lambda a, b: dglnn.SAGEConv(a, b, "mean")) if conv == "sage" else (lambda a, b: dglnn.GraphConv(a, b, norm="right"))
        theirs.layers = torch.nn.ModuleList(dglnn.HeteroGraphConv({key[1]: layer(a, b) for key in ETYPES}) for a, b in ((WIDTH, 5), (5, 3)))
        load_dgl_weights(ours, theirs)
        x = _features(blocks[0], requires_grad=False)
        h = x
        for i, (mod, block) in enumerate(zip(theirs.layers, blocks)):
            h = mod(block, h)
            h = {k: torch.relu(v) for k, v in h.items()} if i == 0 else h
        device_blocks = [HeteroDeviceBlock.from_dgl(b, "cpu") for b in blocks]
        for given in (blocks, device_blocks):
            got = ours(given, x)
            assert got["paper"].shape == (4, 3)
            for ntype in h:
                torch.testing.assert_close(got[ntype], h[ntype], rtol=1e-5, atol=1e-5)


@requires_dgl
def test_typed_blocks_fail_clearly_where_they_do_not_fit():
    block = _blocks()[0]
    typed = HeteroDeviceBlock.from_dgl(block, "cpu")
    x = _features(block, requires_grad=False)
    with pytest.raises(TypeError, match="wrap the layer in HeteroGraphConv"):
        ours_nn.SAGEConv(WIDTH, 4, "mean")(block, x["paper"])
    relation = typed["writes"]  # authors -> papers
    with pytest.raises(ValueError, match=r"\(src, dst\) pair"):
        ours_nn.SAGEConv(WIDTH, 4, "mean")(relation, x["author"])
    with pytest.raises(ValueError, match="choose from: sum, max, min, mean, stack"):
        ours_nn.HeteroGraphConv({}, aggregate="median")
    with pytest.raises(TypeError, match="but got a DeviceBlock"):
        ours_nn.HeteroGraphConv({})(DeviceBlock(torch.tensor([0, 0]), torch.tensor([], dtype=torch.int64), 1), {"a": torch.zeros(1, 2)})
    with pytest.raises(KeyError, match="no module for edge type"):
        ours_nn.HeteroGraphConv({"writes": ours_nn.SAGEConv(WIDTH, 4, "mean")})(typed, x)
    with pytest.raises(ValueError, match="names a node type missing"):
        HeteroDeviceBlock({("a", "r", "b"): typed["cites"]}, {"a": 1}, {"a": 1})
    with pytest.raises(ValueError, match="sources"):
        HeteroDeviceBlock({("paper", "cites", "paper"): typed["cites"]}, {"paper": 1}, {"paper": 1})


@requires_dgl
def test_the_dgl_api_that_typed_blocks_read_exists_in_the_installed_dgl():
    """DeviceBlock.from_dgl of a typed block calls these (an API-surface check, as tests/api_surface.py does for CUDA)."""
    import inspect

    assert "etype" in inspect.signature(dgl.DGLGraph.adj_tensors).parameters
    for name in ("srcnodes", "dstnodes", "edges", "formats", "canonical_etypes", "srctypes", "dsttypes", "num_src_nodes", "num_dst_nodes"):
        assert hasattr(dgl.DGLGraph, name), name
    assert (dgl.NID, dgl.EID) == ("_ID", "_ID"), "blocks.py spells them out to run without DGL"


@pytest.mark.parametrize("device", devices())
def test_typed_blocks_built_without_dgl_give_the_same_result_on_every_device(device):
    """Two node types built by hand (no DGL): HeteroGraphConv on ``device`` equals it on the CPU."""
    gen = torch.Generator().manual_seed(4)
    writes = DeviceBlock(torch.tensor([0, 2, 3, 3]), torch.tensor([0, 2, 1]), 3, dst_in_src=False)  # 3 authors -> 3 papers
    cites = DeviceBlock(torch.tensor([0, 1, 1, 3]), torch.tensor([4, 0, 3]), 5)  # 5 papers -> the first 3
    typed = HeteroDeviceBlock({("author", "writes", "paper"): writes, ("paper", "cites", "paper"): cites}, {"author": 3, "paper": 5}, {"author": 0, "paper": 3})
    x = {"author": torch.randn(3, 4, generator=gen), "paper": torch.randn(5, 4, generator=gen)}
    conv = ours_nn.HeteroGraphConv({"writes": ours_nn.SAGEConv(4, 2, "mean"), "cites": ours_nn.GraphConv(4, 2)}, aggregate="mean")
    expected = conv(typed, x)["paper"]
    on_device = typed.to(device)
    if device == "cuda":
        on_device.record_stream(torch.cuda.current_stream())
    got = conv.to(device)(on_device, {k: v.to(device) for k, v in x.items()})
    assert set(got) == {"paper"}, "no relation reaches authors"
    torch.testing.assert_close(got["paper"].cpu(), expected, rtol=1e-5, atol=1e-5)
