import pytest
import torch
from conftest import requires_cuda

from dgl_zerocopy.loading.blocks import DeviceBlock
from dgl_zerocopy.nn import load_dgl_weights
from dgl_zerocopy.training.models import GCN, GraphSAGE, _BlockGNN, build_model

dgl = pytest.importorskip("dgl")  # every test here needs DGL, which the GPU image lacks
import dgl.nn  # noqa: E402, F811 (the submodule, on the module importorskip gave)


def _blocks(dataset, fanouts):
    graph = dataset.to_dgl()
    sampler = dgl.dataloading.NeighborSampler(fanouts)
    seeds = torch.arange(64)
    input_nodes, output_nodes, blocks = sampler.sample(graph, seeds)
    return input_nodes, output_nodes, blocks


@pytest.mark.parametrize("name", ["sage", "gcn"])
@pytest.mark.parametrize("num_layers", [1, 2, 3])
def test_forward_shapes(small_dataset, name, num_layers):
    input_nodes, output_nodes, blocks = _blocks(small_dataset, [4] * num_layers)
    model = build_model(name, small_dataset.features.shape[1], 32, small_dataset.num_classes, num_layers, dropout=0.5)
    x = torch.from_numpy(small_dataset.features)[input_nodes]
    out = model(blocks, x)
    assert out.shape == (len(output_nodes), small_dataset.num_classes)
    assert torch.isfinite(out).all()


def test_dropout_only_in_training(small_dataset):
    input_nodes, _, blocks = _blocks(small_dataset, [4, 4])
    x = torch.from_numpy(small_dataset.features)[input_nodes]
    model = GraphSAGE(x.shape[1], 32, small_dataset.num_classes, num_layers=2, dropout=0.5)
    model.eval()
    torch.testing.assert_close(model(blocks, x), model(blocks, x))
    model.train()
    assert not torch.equal(model(blocks, x), model(blocks, x))


def test_layer_block_mismatch_is_a_clear_error(small_dataset):
    input_nodes, _, blocks = _blocks(small_dataset, [4, 4])
    model = GCN(small_dataset.features.shape[1], 8, small_dataset.num_classes, num_layers=3)
    with pytest.raises(ValueError, match="3 layers but got 2 blocks"):
        model(blocks, torch.from_numpy(small_dataset.features)[input_nodes])


def test_unknown_model():
    with pytest.raises(ValueError, match="choose from: sage, gcn"):
        build_model("gat", 4, 4, 2, 2, 0.0)


@pytest.mark.parametrize("name", ["sage", "gcn"])
def test_dgl_blocks_and_device_blocks_give_identical_outputs(small_dataset, name):
    input_nodes, _, blocks = _blocks(small_dataset, [4, 4])
    x = torch.from_numpy(small_dataset.features)[input_nodes]
    model = build_model(name, x.shape[1], 16, small_dataset.num_classes, 2, dropout=0.5).eval()
    device_blocks = [DeviceBlock.from_dgl(b, x.device) for b in blocks]
    torch.testing.assert_close(model(device_blocks, x), model(blocks, x), rtol=0, atol=0)


@pytest.mark.parametrize("name", ["sage", "gcn"])
def test_equal_to_the_same_model_built_from_dgl_nn(small_dataset, name):
    """A model of dgl.nn layers (what models.py used before) loads into ours and computes the same."""
    input_nodes, _, blocks = _blocks(small_dataset, [4, 4])
    x = torch.from_numpy(small_dataset.features)[input_nodes]
    dims = [x.shape[1], 16, small_dataset.num_classes]
    if name == "sage":
        layers = [dgl.nn.SAGEConv(a, b, "mean") for a, b in zip(dims[:-1], dims[1:])]
    else:
        layers = [dgl.nn.GraphConv(a, b, norm="right", allow_zero_in_degree=True) for a, b in zip(dims[:-1], dims[1:])]
    reference = _BlockGNN(layers, dropout=0.5).eval()
    model = build_model(name, x.shape[1], 16, small_dataset.num_classes, 2, dropout=0.5).eval()
    load_dgl_weights(model, reference)
    torch.testing.assert_close(model(blocks, x), reference(blocks, x))


def test_gcn_output_does_not_depend_on_the_batch(small_dataset):
    """A node's GCN output is the same whether its batch holds 8 seeds or all of them."""
    graph = small_dataset.to_dgl()
    features = torch.from_numpy(small_dataset.features)
    seeds = torch.arange(64)
    model = build_model("gcn", features.shape[1], 16, small_dataset.num_classes, 2, dropout=0.0).eval()
    sampler = dgl.dataloading.MultiLayerFullNeighborSampler(2)

    def outputs(batch):
        rows = {}
        for start in range(0, len(seeds), batch):
            input_nodes, output_nodes, blocks = sampler.sample(graph, seeds[start : start + batch])
            for node, row in zip(output_nodes.tolist(), model(blocks, features[input_nodes])):
                rows[node] = row
        return torch.stack([rows[n] for n in seeds.tolist()])

    torch.testing.assert_close(outputs(8), outputs(64))


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("name", ["sage", "gcn"])
def test_device_blocks_on_cuda_equal_the_cpu(small_dataset, name):
    input_nodes, _, blocks = _blocks(small_dataset, [4, 4])
    x = torch.from_numpy(small_dataset.features)[input_nodes]
    model = build_model(name, x.shape[1], 16, small_dataset.num_classes, 2, dropout=0.5).eval()
    expected = model(blocks, x)
    cuda_blocks = [DeviceBlock.from_dgl(b, "cuda") for b in blocks]
    torch.testing.assert_close(model.cuda()(cuda_blocks, x.cuda()).cpu(), expected)
