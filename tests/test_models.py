import dgl
import pytest
import torch

from dgl_zerocopy.models import GCN, GraphSAGE, build_model


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
