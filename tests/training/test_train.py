import numpy as np
import pytest
import torch

pytest.importorskip("dgl")  # train() and the 'dgl' source sample with DGL

from dgl_zerocopy.loading.timing import StageTimer
from dgl_zerocopy.training.config import TrainConfig
from dgl_zerocopy.training.sources import make_source
from dgl_zerocopy.training.train import timing_table, train


@pytest.mark.parametrize("model", ["sage", "gcn"])
def test_short_training_learns(small_dataset, model):
    cfg = TrainConfig(model=model, fanouts=[5, 5], batch_size=64, hidden=32, epochs=4, lr=0.01, device="cpu", dropout=0.2)
    history = train(cfg, small_dataset, progress=False)
    chance = 1.0 / small_dataset.num_classes
    assert history[-1].loss < history[0].loss
    assert history[-1].test_acc > chance + 0.4, f"test accuracy {history[-1].test_acc:.3f} is near chance {chance:.3f}"
    stages = history[-1].stages
    assert stages["compute"] > 0 and stages["sample"] > 0 and stages["gather"] > 0
    assert "epoch" in timing_table(history)


def test_feature_sources_yield_the_same_batches(small_dataset):
    """DGL's prefetch path (the reference) and our loader with the CPU gather: each covers every
    training node once per epoch, and in both, features and labels equal the tables indexed at the
    sampled ids. (Each shuffles with its own generator, and DGL's neighbour draws are not
    reproducible across threads, so batches are compared per source, not pairwise.)"""
    nodes = torch.from_numpy(small_dataset.train_idx)
    features, labels = torch.from_numpy(small_dataset.features), torch.from_numpy(small_dataset.labels)
    seeds = {}
    for name in ("dgl", "cpu", "cpu-prefetch"):
        np.random.seed(7)  # DGL shuffles with NumPy's global generator
        source = make_source(name.split("-")[0], small_dataset, [5, 3], torch.device("cpu"), prefetch=2 if "prefetch" in name else 0)
        seeds[name] = []
        for blocks, x, y in source.batches(nodes, 100, True, StageTimer()):
            input_ids, output_ids = blocks[0].srcdata["_ID"], blocks[-1].dstdata["_ID"]
            torch.testing.assert_close(x, features[input_ids], rtol=0, atol=0)
            torch.testing.assert_close(y, labels[output_ids], rtol=0, atol=0)
            seeds[name].append(output_ids.clone())
        source.close()
    for name, batches in seeds.items():
        assert len(batches) == -(-len(nodes) // 100), name
        assert torch.equal(torch.sort(torch.cat(batches)).values, torch.sort(nodes).values), name
