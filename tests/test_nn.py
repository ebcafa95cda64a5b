"""Our SAGEConv and GraphConv against dgl.nn's with the same weights: outputs and every gradient,
on sampled blocks with zero-in-degree destinations, given DGL blocks and DeviceBlocks."""
import pytest
import torch
from conftest import devices

from dgl_zerocopy import nn as ours_nn
from dgl_zerocopy.blocks import DeviceBlock

dgl = pytest.importorskip("dgl")  # every test here needs DGL, which the GPU image lacks
import dgl.nn  # noqa: E402
from test_blocks import _sampled_blocks  # noqa: E402

# name -> (our layer, DGL's layer), built with the same options
LAYERS = {
    "sage": (lambda i, o: ours_nn.SAGEConv(i, o, "mean"), lambda i, o: dgl.nn.SAGEConv(i, o, "mean")),
    "sage-nobias": (
        lambda i, o: ours_nn.SAGEConv(i, o, "mean", bias=False),
        lambda i, o: dgl.nn.SAGEConv(i, o, "mean", bias=False),
    ),
    **{
        f"gcn-{norm}": (
            lambda i, o, norm=norm: ours_nn.GraphConv(i, o, norm=norm),
            lambda i, o, norm=norm: dgl.nn.GraphConv(i, o, norm=norm, allow_zero_in_degree=True),
        )
        for norm in ("both", "right", "left", "none")
    },
}
# (in, out): projection after the aggregation, and (64, 2) before it on some of the blocks
# (ours switches on the operation count, DGL on in > out; test_both_orders_are_exercised checks it)
WIDTHS = [(3, 7), (7, 3), (64, 2)]


def _pair(name: str, in_feats: int, out_feats: int, seed: int = 0):
    make_ours, make_theirs = LAYERS[name]
    torch.manual_seed(seed)
    theirs = make_theirs(in_feats, out_feats)
    with torch.no_grad():  # random values everywhere, biases included (GraphConv's start at zero)
        for p in theirs.parameters():
            p.copy_(torch.randn_like(p))
    ours = make_ours(in_feats, out_feats)
    ours_nn.load_dgl_weights(ours, theirs)
    return ours, theirs


def _run(layer, block, x: torch.Tensor, grad_out: torch.Tensor):
    """Output, input gradient and parameter gradients (by name) of one forward and backward."""
    x = x.clone().requires_grad_(True)
    layer.zero_grad(set_to_none=True)
    out = layer(block, x)
    out.backward(grad_out)
    return out.detach().cpu(), x.grad.cpu(), {n: p.grad.cpu() for n, p in layer.named_parameters()}


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("as_device_block", [False, True], ids=["dgl-block", "device-block"])
@pytest.mark.parametrize("in_feats,out_feats", WIDTHS)
@pytest.mark.parametrize("name", list(LAYERS))
def test_layer_equals_dgl(name, in_feats, out_feats, as_device_block, device):
    ours, theirs = _pair(name, in_feats, out_feats)
    ours.to(device)
    assert {n for n, _ in ours.named_parameters()} == {n for n, _ in theirs.named_parameters()}
    gen = torch.Generator().manual_seed(1)
    for block in _sampled_blocks():
        x = torch.randn(block.num_src_nodes(), in_feats, generator=gen)
        grad_out = torch.randn(block.num_dst_nodes(), out_feats, generator=gen)
        expected = _run(theirs, block, x, grad_out)
        given = DeviceBlock.from_dgl(block, device) if as_device_block else block
        got = _run(ours, given, x.to(device), grad_out.to(device))
        torch.testing.assert_close(got[0], expected[0])
        torch.testing.assert_close(got[1], expected[1])
        assert got[2].keys() == expected[2].keys()
        for pname in expected[2]:
            torch.testing.assert_close(got[2][pname], expected[2][pname], msg=lambda m, p=pname: f"{name} {p}: {m}")


def test_both_orders_are_exercised_and_the_cheaper_one_is_chosen():
    from dgl_zerocopy.nn import _project_first

    blocks = [DeviceBlock.from_dgl(b) for b in _sampled_blocks()]
    assert {_project_first(b, i, o) for b in blocks for i, o in WIDTHS} == {True, False}
    # A sampled block of 400k sources, 60k destinations and 600k edges at 512 -> 256 features:
    # projecting first costs 52 G multiply-adds, aggregating first 8 G.
    wide = DeviceBlock(torch.arange(0, 600_001, 10), torch.zeros(600_000, dtype=torch.int64), 400_000)
    assert not _project_first(wide, 512, 256)
    # A full-graph block (sources = destinations) with 10 in-edges each, 512 -> 8: project first.
    assert _project_first(DeviceBlock(torch.arange(0, 1001, 10), torch.zeros(1000, dtype=torch.int64), 100), 512, 8)


def test_zero_in_degree_destinations():
    """SAGE: the self term alone; GraphConv: the bias alone (as DGL with allow_zero_in_degree=True)."""
    block = DeviceBlock.from_dgl(_sampled_blocks()[0])
    lonely = (block.in_degrees() == 0).nonzero().flatten()
    assert lonely.numel() > 0
    x = torch.randn(block.num_src_nodes(), 4)
    sage, _ = _pair("sage", 4, 5)
    torch.testing.assert_close(sage(block, x)[lonely], sage.fc_self(x[lonely]))
    gcn, _ = _pair("gcn-both", 4, 5)
    torch.testing.assert_close(gcn(block, x)[lonely], gcn.bias.expand(lonely.numel(), 5))
    strict = ours_nn.GraphConv(4, 5, allow_zero_in_degree=False)
    with pytest.raises(ValueError, match="allow_zero_in_degree=True"):
        strict(block, x)


def test_graphconv_without_weight_equals_dgl():
    ours, theirs = ours_nn.GraphConv(4, 4, weight=False), dgl.nn.GraphConv(4, 4, weight=False, allow_zero_in_degree=True)
    with torch.no_grad():
        theirs.bias.normal_()
    ours_nn.load_dgl_weights(ours, theirs)
    block = _sampled_blocks()[1]
    x = torch.randn(block.num_src_nodes(), 4)
    torch.testing.assert_close(ours(block, x), theirs(block, x))


@pytest.mark.parametrize("name", ["sage", "gcn-both"])
def test_half_precision_path(name):
    """bfloat16 takes the gather + index_add path (the CPU SpMM has no half types): it must agree
    with the float32 SpMM path to bfloat16 precision."""
    ours, _ = _pair(name, 6, 3)
    block = DeviceBlock.from_dgl(_sampled_blocks()[1])
    x = torch.randn(block.num_src_nodes(), 6)
    expected = ours(block, x)
    got = ours.to(torch.bfloat16)(block, x.bfloat16())
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), expected, rtol=0.05, atol=0.2)


def test_int32_blocks_give_the_same_result():
    block = _sampled_blocks()[2]
    x = torch.randn(block.num_src_nodes(), 4)
    for name in ("sage", "gcn-both"):
        ours, _ = _pair(name, 4, 3)
        torch.testing.assert_close(
            ours(DeviceBlock.from_dgl(block, id_dtype=torch.int32), x), ours(DeviceBlock.from_dgl(block), x)
        )


def test_input_errors_name_the_fix():
    block = DeviceBlock.from_dgl(_sampled_blocks()[1])
    layer = ours_nn.SAGEConv(4, 2)
    with pytest.raises(ValueError, match="source nodes"):
        layer(block, torch.randn(block.num_src_nodes() + 1, 4))
    with pytest.raises(ValueError, match="in_feats=4"):
        layer(block, torch.randn(block.num_src_nodes(), 5))
    with pytest.raises(TypeError, match="2-D tensor"):
        layer(block, torch.randn(block.num_src_nodes()))
    with pytest.raises(ValueError, match=r"block.to\(x.device\)"):
        layer(block.to("meta"), torch.randn(block.num_src_nodes(), 4))
    with pytest.raises(TypeError, match="expected a DGL block"):
        layer("not a block", torch.randn(3, 4))


def test_construction_errors_name_the_choices():
    with pytest.raises(ValueError, match="choose from: mean"):
        ours_nn.SAGEConv(4, 2, "pool")
    with pytest.raises(ValueError, match="choose from: both, right, left, none"):
        ours_nn.GraphConv(4, 2, norm="sym")
    with pytest.raises(ValueError, match="weight=False"):
        ours_nn.GraphConv(4, 2, weight=False)
    with pytest.raises(ValueError, match="positive int"):
        ours_nn.SAGEConv(0, 2)


def test_load_dgl_weights_refuses_a_different_layer():
    with pytest.raises(ValueError, match="norm='right'"):
        ours_nn.load_dgl_weights(ours_nn.GraphConv(4, 2, norm="both"), dgl.nn.GraphConv(4, 2, norm="right"))
    with pytest.raises(ValueError, match="do not match"):
        ours_nn.load_dgl_weights(ours_nn.GraphConv(4, 2), dgl.nn.GraphConv(4, 3))
    with pytest.raises(ValueError, match="do not match"):
        ours_nn.load_dgl_weights(ours_nn.SAGEConv(4, 2, bias=False), dgl.nn.SAGEConv(4, 2, "mean"))
