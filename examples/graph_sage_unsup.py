"""Unsupervised GraphSAGE on Cora, in the shape of PyG 2.8's ``examples/graph_sage_unsup.py``: a
``LinkNeighborLoader`` over every edge with as many random negatives, a dot-product link loss, then a
logistic regression on the frozen full-graph embeddings (the Planetoid split) for the accuracy.

As written it uses PyG's own LinkNeighborLoader (which needs pyg-lib or torch-sparse, neither on PyPI).
To switch to dgl-zerocopy, change one line:

    from torch_geometric.loader import LinkNeighborLoader    ->    from dgl_zerocopy.pyg import LinkNeighborLoader

PyG's ``Planetoid`` reads the raw Planetoid files from ``<root>/Cora/raw``; ``--raw-from DIR`` links the
``ind.cora.*`` files of ``DIR`` there first (``dgl_zerocopy.pyg.datasets.place_planetoid_raw``), so nothing downloads. Needs scikit-learn, as PyG's example does.
tests/pyg/test_examples_pyg.py runs the switched script.

    python examples/graph_sage_unsup.py --root /tmp/planetoid --raw-from ../shared/data/planetoid
"""

import argparse
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import torch_geometric
import torch_geometric.transforms as T
from sklearn.linear_model import LogisticRegression
from torch_geometric.datasets import Planetoid
from torch_geometric.loader import LinkNeighborLoader
from torch_geometric.nn import GraphSAGE

from dgl_zerocopy.pyg.datasets import place_planetoid_raw


def train(model, loader, optimizer, device):
    model.train()
    total_loss = total_examples = 0
    for batch in loader:
        batch = batch.to(device)
        optimizer.zero_grad()
        h = model(batch.x, batch.edge_index)
        src, dst = batch.edge_label_index
        score = (h[src] * h[dst]).sum(dim=-1)
        loss = F.binary_cross_entropy_with_logits(score, batch.edge_label)
        loss.backward()
        optimizer.step()
        total_loss += loss.item() * score.numel()
        total_examples += score.numel()
    return total_loss / total_examples


@torch.no_grad()
def test(model, data, device):
    model.eval()
    out = model(data.x.to(device), data.edge_index.to(device)).cpu()
    classifier = LogisticRegression(max_iter=1000)
    classifier.fit(out[data.train_mask], data.y[data.train_mask])
    val_acc = classifier.score(out[data.val_mask], data.y[data.val_mask])
    test_acc = classifier.score(out[data.test_mask], data.y[data.test_mask])
    return val_acc, test_acc


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("data/Planetoid"), help="Planetoid's root folder (it reads <root>/Cora/raw)")
    parser.add_argument("--raw-from", type=Path, default=None, help="a folder holding the raw ind.cora.* files, linked into <root>/Cora/raw")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    device = torch.device(args.device)
    torch_geometric.seed_everything(args.seed)
    if args.raw_from is not None:
        place_planetoid_raw(args.raw_from, args.root, "Cora")

    dataset = Planetoid(str(args.root), "Cora", transform=T.NormalizeFeatures())
    data = dataset[0]
    print(data)

    train_loader = LinkNeighborLoader(data, batch_size=args.batch_size, shuffle=True, neg_sampling_ratio=1.0, num_neighbors=[10, 10])
    model = GraphSAGE(data.num_node_features, hidden_channels=64, num_layers=2).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

    times = []
    for epoch in range(1, args.epochs + 1):
        start = time.time()
        loss = train(model, train_loader, optimizer, device)
        times.append(time.time() - start)
        if epoch % 10 == 0 or epoch == args.epochs:
            val_acc, test_acc = test(model, data, device)
            print(f"Epoch {epoch:03d}, Loss: {loss:.4f}, Val: {val_acc:.4f}, Test: {test_acc:.4f}")
    print(f"Median time per epoch: {torch.tensor(times).median():.4f}s")
    print(f"Test Accuracy {test(model, data, device)[1]:.4f}")
