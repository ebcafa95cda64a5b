"""Our SAGEConv and GraphConv against dgl.nn's with the same weights: outputs and every gradient,
on sampled blocks with zero-in-degree destinations, given DGL blocks and DeviceBlocks; the same
constructor and forward signatures as dgl.nn's, and each of their arguments doing what DGL's does."""

import inspect

import pytest
import torch
from conftest import devices
from torch import nn
from torch.nn import functional as F

from dgl_zerocopy import nn as ours_nn
from dgl_zerocopy.loading.blocks import DeviceBlock

dgl = pytest.importorskip("dgl")  # every test here needs DGL, which the GPU image lacks
import dgl.nn  # noqa: E402, F811 (the submodule, on the module importorskip gave)
from test_blocks import _graph, _sampled_blocks  # noqa: E402

# name -> (our layer, DGL's layer), built with the same options
LAYERS = {
    "sage": (lambda i, o: ours_nn.SAGEConv(i, o, "mean"), lambda i, o: dgl.nn.SAGEConv(i, o, "mean")),
    "sage-nobias": (lambda i, o: ours_nn.SAGEConv(i, o, "mean", bias=False), lambda i, o: dgl.nn.SAGEConv(i, o, "mean", bias=False)),
    # Modules with parameters of their own (their state-dict keys must match DGL's too), applied in
    # DGL's order: activation, then norm (the two do not commute).
    "sage-prelu-layernorm": (
        lambda i, o: ours_nn.SAGEConv(i, o, "mean", activation=nn.PReLU(), norm=nn.LayerNorm(o)),
        lambda i, o: dgl.nn.SAGEConv(i, o, "mean", activation=nn.PReLU(), norm=nn.LayerNorm(o)),
    ),
    "sage-functions": (  # plain functions, positionally as DGL's signature orders them
        lambda i, o: ours_nn.SAGEConv(i, o, "mean", 0.0, True, F.normalize, torch.tanh),
        lambda i, o: dgl.nn.SAGEConv(i, o, "mean", 0.0, True, F.normalize, torch.tanh),
    ),
    **{
        f"gcn-{norm}": (
            lambda i, o, norm=norm: ours_nn.GraphConv(i, o, norm=norm, allow_zero_in_degree=True),
            lambda i, o, norm=norm: dgl.nn.GraphConv(i, o, norm=norm, allow_zero_in_degree=True),
        )
        for norm in ("both", "right", "left", "none")
    },
    "gcn-prelu": (
        lambda i, o: ours_nn.GraphConv(i, o, activation=nn.PReLU(o), allow_zero_in_degree=True),
        lambda i, o: dgl.nn.GraphConv(i, o, activation=nn.PReLU(o), allow_zero_in_degree=True),
    ),
}
# (in, out): projection after the aggregation, and (64, 2) before it on some of the blocks
# (ours switches on the operation count, DGL on in > out; test_both_orders_are_exercised checks it)
WIDTHS = [(3, 7), (7, 3), (64, 2)]
# Compared in float64: a LayerNorm over 2 outputs amplifies the rounding in which the two layers'
# aggregation orders differ (input gradients up to 43 here, off by 7e-3 in float32, 1e-11 in float64).
FLOAT64 = {"sage-prelu-layernorm"}
# Each comparison with DGL runs on its DGL blocks as they are and on their DeviceBlocks.
block_kinds = pytest.mark.parametrize("as_device_block", [False, True], ids=["dgl-block", "device-block"])


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


def _given(block, as_device_block: bool, device="cpu"):
    """What our layer is handed: the DGL block itself, or its DeviceBlock on ``device``."""
    return DeviceBlock.from_dgl(block, device) if as_device_block else block


@pytest.mark.parametrize("device", devices())
@block_kinds
@pytest.mark.parametrize("in_feats,out_feats", WIDTHS)
@pytest.mark.parametrize("name", list(LAYERS))
def test_layer_equals_dgl(name, in_feats, out_feats, as_device_block, device):
    ours, theirs = _pair(name, in_feats, out_feats)
    dtype = torch.float64 if name in FLOAT64 else torch.float32
    ours.to(device, dtype)
    theirs.to(dtype)
    assert {n for n, _ in ours.named_parameters()} == {n for n, _ in theirs.named_parameters()}
    gen = torch.Generator().manual_seed(1)
    for block in _sampled_blocks():
        x = torch.randn(block.num_src_nodes(), in_feats, generator=gen, dtype=dtype)
        grad_out = torch.randn(block.num_dst_nodes(), out_feats, generator=gen, dtype=dtype)
        expected = _run(theirs, block, x, grad_out)
        got = _run(ours, _given(block, as_device_block, device), x.to(device), grad_out.to(device))
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


def _params(function) -> list:
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


def test_signatures_equal_dgls():
    """Names, order, kinds and defaults, parameter by parameter: a script's dgl.nn calls work unchanged."""
    dgl = pytest.importorskip("dgl")  # the module skips without DGL too; this test must stand alone
    import dgl.nn  # noqa: F811 (the submodule, on the module importorskip gave)

    for ours, theirs, methods in (
        (ours_nn.SAGEConv, dgl.nn.SAGEConv, ("__init__", "forward")),
        (ours_nn.GraphConv, dgl.nn.GraphConv, ("__init__", "forward", "set_allow_zero_in_degree")),
    ):
        for method in methods:
            assert _params(getattr(ours, method)) == _params(getattr(theirs, method)), f"{ours.__name__}.{method}"


@pytest.mark.parametrize("device", devices())
@block_kinds
def test_feat_drop_as_dgl(as_device_block, device):
    """In eval mode dropout is off: the same output as DGL's. In training, seeded alike, ours drops
    the same entries as DGL's (one dropout over the sources, whose first rows are the
    destinations; or one per tensor of a (src, dst) pair)."""
    torch.manual_seed(0)
    theirs = dgl.nn.SAGEConv(5, 3, "mean", feat_drop=0.5)
    ours = ours_nn.SAGEConv(5, 3, "mean", feat_drop=0.5)
    ours_nn.load_dgl_weights(ours, theirs)
    ours.to(device)
    gen = torch.Generator().manual_seed(1)
    for block in _sampled_blocks():
        x = torch.randn(block.num_src_nodes(), 5, generator=gen)
        given = _given(block, as_device_block, device)
        ours.eval()
        theirs.eval()
        evaluated = ours(given, x.to(device)).cpu()
        torch.testing.assert_close(evaluated, theirs(block, x))
        ours.train()
        theirs.train()
        assert not torch.allclose(ours(given, x.to(device)).cpu(), evaluated), "no dropout in training"
        if device != "cpu":
            continue  # another device draws other random numbers
        dst = torch.randn(block.num_dst_nodes(), 5, generator=gen)
        for feat in (x, (x, dst)):
            torch.manual_seed(2)
            expected = theirs(block, feat)
            torch.manual_seed(2)
            torch.testing.assert_close(ours(given, feat), expected)


def test_feat_drop_reaches_sources_and_destinations():
    """With every input entry dropped, the output is the bias alone."""
    block = DeviceBlock.from_dgl(_sampled_blocks()[1])
    layer = ours_nn.SAGEConv(4, 3, "mean", feat_drop=1.0)
    x = torch.randn(block.num_src_nodes(), 4)
    torch.testing.assert_close(layer(block, x), layer.fc_self.bias.expand(block.num_dst_nodes(), 3))
    assert not torch.equal(layer.eval()(block, x), layer.fc_self.bias.expand(block.num_dst_nodes(), 3))


@block_kinds
@pytest.mark.parametrize("name", ["sage", "gcn-both"])
def test_pair_features_equal_dgl(name, as_device_block):
    """feat as a (src, dst) pair: SAGEConv's self term reads dst, GraphConv ignores it, as in DGL."""
    ours, theirs = _pair(name, 5, 3)
    for block in _sampled_blocks():
        feat = (torch.randn(block.num_src_nodes(), 5), torch.randn(block.num_dst_nodes(), 5))
        torch.testing.assert_close(ours(_given(block, as_device_block), feat), theirs(block, feat))


@pytest.mark.parametrize("device", devices())
@block_kinds
@pytest.mark.parametrize("in_feats,out_feats", WIDTHS)
def test_graphconv_external_weight_equals_dgl(in_feats, out_feats, as_device_block, device):
    """weight=False, the weight passed to forward: DGL's output, and the gradient reaches that weight."""
    theirs = dgl.nn.GraphConv(in_feats, out_feats, weight=False, allow_zero_in_degree=True)
    ours = ours_nn.GraphConv(in_feats, out_feats, weight=False, allow_zero_in_degree=True)
    with torch.no_grad():
        theirs.bias.normal_()
    ours_nn.load_dgl_weights(ours, theirs)
    ours.to(device)
    assert ours.weight is None and [n for n, _ in ours.named_parameters()] == ["bias"]
    gen = torch.Generator().manual_seed(1)
    for block in _sampled_blocks():
        x = torch.randn(block.num_src_nodes(), in_feats, generator=gen)
        weight = torch.randn(in_feats, out_feats, generator=gen)
        grad_out = torch.randn(block.num_dst_nodes(), out_feats, generator=gen)
        results = []
        for layer, graph, dev in ((theirs, block, "cpu"), (ours, _given(block, as_device_block, device), device)):
            # a copy on both devices: on the CPU .to() returns `weight` itself, and marking it would make
            # the CUDA pass's .to() a non-leaf whose .grad stays None
            w = weight.to(dev, copy=True).requires_grad_(True)
            out = layer(graph, x.to(dev), weight=w)
            out.backward(grad_out.to(dev))
            results.append((out.detach().cpu(), w.grad.cpu(), layer.bias.grad.cpu()))
            layer.zero_grad(set_to_none=True)
        for got, expected in zip(results[1], results[0]):
            torch.testing.assert_close(got, expected)


@block_kinds
@pytest.mark.parametrize("in_feats,out_feats,bias", [(4, 4, True), (4, 3, False)])
def test_graphconv_without_any_weight_equals_dgl(in_feats, out_feats, bias, as_device_block):
    """No weight at all: the rows are aggregated unprojected (in_feats wide, as in DGL)."""
    theirs = dgl.nn.GraphConv(in_feats, out_feats, weight=False, bias=bias, allow_zero_in_degree=True)
    ours = ours_nn.GraphConv(in_feats, out_feats, weight=False, bias=bias, allow_zero_in_degree=True)
    if bias:
        with torch.no_grad():
            theirs.bias.normal_()
    ours_nn.load_dgl_weights(ours, theirs)
    for block in _sampled_blocks():
        x = torch.randn(block.num_src_nodes(), in_feats)
        got = ours(_given(block, as_device_block), x)
        assert got.shape == (block.num_dst_nodes(), in_feats)
        torch.testing.assert_close(got, theirs(block, x))


def test_graphconv_weight_errors():
    block = DeviceBlock.from_dgl(_sampled_blocks()[1])
    x = torch.randn(block.num_src_nodes(), 4)
    with pytest.raises(ValueError, match="build it with weight=False"):
        ours_nn.GraphConv(4, 3, allow_zero_in_degree=True)(block, x, weight=torch.randn(4, 3))
    with pytest.raises(dgl.DGLError, match="weight=False"):  # DGL refuses it too
        dgl.nn.GraphConv(4, 3, allow_zero_in_degree=True)(_sampled_blocks()[1], x, weight=torch.randn(4, 3))
    no_weight = ours_nn.GraphConv(4, 3, weight=False, allow_zero_in_degree=True)
    with pytest.raises(ValueError, match=r"weight=W\) with W of shape \(4, 3\)"):
        no_weight(block, x)
    with pytest.raises(ValueError, match=r"shape \(in_feats=4, out\)"):
        no_weight(block, x, weight=torch.randn(5, 3))
    with pytest.raises(ValueError, match=r"shape \(4, 3\)"):
        no_weight(block, x, weight=torch.randn(4, 2))
    with pytest.raises(TypeError, match="torch tensor"):
        no_weight(block, x, weight=[[1.0] * 3] * 4)


@pytest.mark.parametrize("device", devices())
@block_kinds
def test_zero_in_degree_is_an_error_unless_allowed_as_in_dgl(as_device_block, device):
    """DGL's default refuses blocks with zero-in-degree destinations (DGLError there, ValueError
    here); allow_zero_in_degree=True, or set_allow_zero_in_degree(True), accepts them."""
    torch.manual_seed(0)
    theirs, ours = dgl.nn.GraphConv(4, 3), ours_nn.GraphConv(4, 3)
    ours_nn.load_dgl_weights(ours, theirs)
    ours.to(device)
    block = _sampled_blocks()[1]  # NeighborSampler's; isolated seeds have no in-edges
    given = _given(block, as_device_block, device)
    x = torch.randn(block.num_src_nodes(), 4)
    with pytest.raises(dgl.DGLError, match="0-in-degree"):
        theirs(block, x)
    with pytest.raises(ValueError, match="allow_zero_in_degree=True"):
        ours(given, x.to(device))
    theirs.set_allow_zero_in_degree(True)
    ours.set_allow_zero_in_degree(True)
    torch.testing.assert_close(ours(given, x.to(device)).cpu(), theirs(block, x))
    allowed = ours_nn.GraphConv(4, 3, allow_zero_in_degree=True).to(device)
    assert allowed(given, x.to(device)).shape == (block.num_dst_nodes(), 3)


@block_kinds
def test_blocks_without_zero_in_degree_pass_the_default_check(as_device_block):
    dgl.seed(0)
    graph = dgl.add_self_loop(_graph())
    blocks = dgl.dataloading.NeighborSampler([3, 2]).sample(graph, torch.tensor([0, 3, 5, 34, 36, 39]))[2]
    torch.manual_seed(0)
    theirs, ours = dgl.nn.GraphConv(4, 3), ours_nn.GraphConv(4, 3)
    ours_nn.load_dgl_weights(ours, theirs)
    for block in blocks:
        assert (block.in_degrees() > 0).all()
        x = torch.randn(block.num_src_nodes(), 4)
        torch.testing.assert_close(ours(_given(block, as_device_block), x), theirs(block, x))


@block_kinds
def test_edge_weight_is_refused_clearly(as_device_block):
    block = _sampled_blocks()[1]
    given = _given(block, as_device_block)
    x, edge_weight = torch.randn(block.num_src_nodes(), 4), torch.rand(block.num_edges())
    for layer in (ours_nn.SAGEConv(4, 3, "mean"), ours_nn.GraphConv(4, 3, allow_zero_in_degree=True)):
        with pytest.raises(NotImplementedError, match="edge_weight"):
            layer(given, x, edge_weight=edge_weight)


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
    strict = ours_nn.GraphConv(4, 5)  # allow_zero_in_degree=False, DGL's default
    with pytest.raises(ValueError, match="allow_zero_in_degree=True"):
        strict(block, x)


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
        torch.testing.assert_close(ours(DeviceBlock.from_dgl(block, id_dtype=torch.int32), x), ours(DeviceBlock.from_dgl(block), x))


def test_input_errors_name_the_fix():
    block = DeviceBlock.from_dgl(_sampled_blocks()[1])
    layer = ours_nn.SAGEConv(4, 2, "mean")
    with pytest.raises(ValueError, match="source nodes"):
        layer(block, torch.randn(block.num_src_nodes() + 1, 4))
    with pytest.raises(ValueError, match="in_feats=4"):
        layer(block, torch.randn(block.num_src_nodes(), 5))
    with pytest.raises(TypeError, match="2-D tensor"):
        layer(block, torch.randn(block.num_src_nodes()))
    with pytest.raises(ValueError, match=r"block.to\(feat.device\)"):
        layer(block.to("meta"), torch.randn(block.num_src_nodes(), 4))
    with pytest.raises(TypeError, match="expected a DGL block"):
        layer("not a block", torch.randn(3, 4))
    x = torch.randn(block.num_src_nodes(), 4)
    with pytest.raises(ValueError, match=r"dst must have shape \(num_dst_nodes="):
        layer(block, (x, x))
    with pytest.raises(TypeError, match="dst must be a 2-D tensor"):
        layer(block, (x, None))
    with pytest.raises(ValueError, match="pair of tensors"):
        layer(block, (x,))


def test_construction_errors_name_the_choices():
    for aggregator in ("pool", "lstm", "gcn"):  # DGL's other aggregators
        with pytest.raises(ValueError, match="choose from: mean"):
            ours_nn.SAGEConv(4, 2, aggregator)
    with pytest.raises(TypeError, match="aggregator_type"):  # no default, as in DGL
        ours_nn.SAGEConv(4, 2)
    with pytest.raises(ValueError, match="choose from: both, right, left, none"):
        ours_nn.GraphConv(4, 2, norm="sym")
    with pytest.raises(TypeError, match="norm must be a callable"):  # GraphConv's norm is a string, SAGEConv's not
        ours_nn.SAGEConv(4, 2, "mean", norm="both")
    with pytest.raises(TypeError, match="activation must be a callable"):
        ours_nn.GraphConv(4, 2, activation="relu")
    with pytest.raises(ValueError, match="between 0 and 1"):
        ours_nn.SAGEConv(4, 2, "mean", feat_drop=1.5)
    with pytest.raises(ValueError, match="positive int"):
        ours_nn.SAGEConv(0, 2, "mean")
    with pytest.raises(ValueError, match="pair of sizes is not supported"):
        ours_nn.SAGEConv((4, 3), 2, "mean")
    # weight=False with other widths is DGL's way to take the weight in forward: no error here
    assert ours_nn.GraphConv(4, 2, weight=False).weight is None


def test_load_dgl_weights_refuses_a_different_layer():
    with pytest.raises(ValueError, match="norm='right'"):
        ours_nn.load_dgl_weights(ours_nn.GraphConv(4, 2, norm="both"), dgl.nn.GraphConv(4, 2, norm="right"))
    with pytest.raises(ValueError, match="do not match"):
        ours_nn.load_dgl_weights(ours_nn.GraphConv(4, 2), dgl.nn.GraphConv(4, 3))
    with pytest.raises(ValueError, match="do not match"):
        ours_nn.load_dgl_weights(ours_nn.SAGEConv(4, 2, "mean", bias=False), dgl.nn.SAGEConv(4, 2, "mean"))
