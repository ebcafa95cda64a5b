"""GraphSAGE on Cora with layer-wise inference, in the shape of PyG 2.8's ``examples/reddit.py``: minibatch
training from a ``NeighborLoader`` over the training nodes, then PyG's ``BasicGNN.inference``, one layer at a
time over every node, from a second ``NeighborLoader`` that takes each node's whole in-neighbourhood
(``num_neighbors=[-1]``) and reads ``loader.data.x`` (the Planetoid split's accuracy).

As written it uses PyG's own NeighborLoader (which needs pyg-lib or torch-sparse, neither on PyPI).
To switch to dgl-zerocopy, change one line:

    from torch_geometric.loader import NeighborLoader    ->    from dgl_zerocopy.pyg import NeighborLoader

PyG's ``Planetoid`` reads the raw Planetoid files from ``<root>/Cora/raw``; ``--raw-from DIR`` links the
``ind.cora.*`` files of ``DIR`` there first (``dgl_zerocopy.pyg.datasets.place_planetoid_raw``), so nothing downloads. tests/pyg/test_examples_pyg.py runs the
switched script.

    python examples/graph_sage_inference.py --root /tmp/planetoid --raw-from ../shared/data/planetoid
"""

import argparse
import copy
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import torch_geometric
import torch_geometric.transforms as T
from torch_geometric.datasets import Planetoid
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn.models import GraphSAGE

from dgl_zerocopy.pyg.datasets import place_planetoid_raw


def train(model, loader, optimizer, device):
    model.train()
    total_loss = total_correct = total_examples = 0
    for batch in loader:
        batch = batch.to(device)
        optimizer.zero_grad()
        out = model(batch.x, batch.edge_index)[: batch.batch_size]
        y = batch.y[: batch.batch_size]
        loss = F.cross_entropy(out, y)
        loss.backward()
        optimizer.step()
        total_loss += loss.item() * batch.batch_size
        total_correct += int((out.argmax(dim=-1) == y).sum())
        total_examples += batch.batch_size
    return total_loss / total_examples, total_correct / total_examples


@torch.no_grad()
def test(model, data, subgraph_loader, device):
    model.eval()
    pred = model.inference(subgraph_loader, device=device, progress_bar=False).argmax(dim=-1).cpu()
    return [float((pred[mask] == data.y[mask]).float().mean()) for mask in (data.train_mask, data.val_mask, data.test_mask)]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("data/Planetoid"), help="Planetoid's root folder (it reads <root>/Cora/raw)")
    parser.add_argument("--raw-from", type=Path, default=None, help="a folder holding the raw ind.cora.* files, linked into <root>/Cora/raw")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    device = torch.device(args.device)
    torch_geometric.seed_everything(args.seed)
    if args.raw_from is not None:
        place_planetoid_raw(args.raw_from, args.root, "Cora")

    dataset = Planetoid(str(args.root), "Cora", transform=T.NormalizeFeatures())
    data = dataset[0]
    print(data)

    train_loader = NeighborLoader(data, input_nodes=data.train_mask, num_neighbors=[25, 10], shuffle=True, batch_size=args.batch_size)
    subgraph_loader = NeighborLoader(copy.copy(data), input_nodes=None, num_neighbors=[-1], shuffle=False, batch_size=512)

    model = GraphSAGE(dataset.num_features, hidden_channels=64, num_layers=2, out_channels=dataset.num_classes, dropout=0.5).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)

    times = []
    for epoch in range(1, args.epochs + 1):
        start = time.time()
        loss, acc = train(model, train_loader, optimizer, device)
        times.append(time.time() - start)
        if epoch % 10 == 0 or epoch == args.epochs:
            train_acc, val_acc, test_acc = test(model, data, subgraph_loader, device)
            print(f"Epoch {epoch:02d}, Loss: {loss:.4f}, Train: {train_acc:.4f}, Val: {val_acc:.4f}, Test: {test_acc:.4f}")
    print(f"Median time per epoch: {torch.tensor(times).median():.4f}s")
    print(f"Test Accuracy {test(model, data, subgraph_loader, device)[2]:.4f}")
