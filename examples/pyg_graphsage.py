"""GraphSAGE node classification, in the shape of PyG 2.8's minibatch examples (``examples/ogbn_train.py``,
``examples/reddit.py``): ``SAGEConv`` layers, ``NeighborLoader`` over the training, validation and test
nodes, a train loop and a test loop, on dgl-zerocopy's datasets (Cora from ``--data-root`` by default;
nothing downloads).

As written it uses PyG's own NeighborLoader (which needs pyg-lib or torch-sparse, neither on PyPI).
To switch to dgl-zerocopy, change one line:

    from torch_geometric.loader import NeighborLoader    ->    from dgl_zerocopy.pyg import NeighborLoader

Our loader then samples without pyg-lib and gathers ``x`` through our store, on the CPU. On a GPU, pass
``device=device`` to our loaders as well to sample and gather there (zero-copy from pinned host memory).

tests/pyg/test_examples_pyg.py runs the switched script (and the original where PyG can sample).

    python examples/pyg_graphsage.py                           # Cora, on the CPU
    python examples/pyg_graphsage.py --dataset amazon-photo --epochs 30
    python examples/pyg_graphsage.py --device cuda
"""

import argparse
import time

import torch
import torch.nn.functional as F
import torch_geometric
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import SAGEConv

from dgl_zerocopy.data import SyntheticSpec, load_dataset
from dgl_zerocopy.pyg.datasets import to_pyg


class SAGE(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels, num_layers=2, dropout=0.5):
        super().__init__()
        self.convs = torch.nn.ModuleList()
        self.convs.append(SAGEConv(in_channels, hidden_channels))
        for _ in range(num_layers - 2):
            self.convs.append(SAGEConv(hidden_channels, hidden_channels))
        self.convs.append(SAGEConv(hidden_channels, out_channels))
        self.dropout = dropout

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = x.relu_()
                x = F.dropout(x, p=self.dropout, training=self.training)
        return x


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
def test(model, loader, device):
    model.eval()
    total_correct = total_examples = 0
    for batch in loader:
        batch = batch.to(device)
        batch_size = batch.num_sampled_nodes[0]
        out = model(batch.x, batch.edge_index)[:batch_size]
        pred = out.argmax(dim=-1)
        y = batch.y[:batch_size]
        total_correct += int((pred == y).sum())
        total_examples += y.size(0)
    return total_correct / total_examples


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="cora", help="a dgl-zerocopy dataset name: cora, citeseer, amazon-photo, coauthor-cs, synthetic, ...")
    parser.add_argument("--data-root", default="../shared/data", help="folder of the real datasets (default: ../shared/data, from the checkout's root)")
    parser.add_argument("--num-nodes", type=int, default=None, help="size of the synthetic graph")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--fanouts", type=lambda s: [int(f) for f in s.split(",")], default=[10, 10], help="neighbours per layer, e.g. 10,10")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0, help="seeds the split of the GraphData graphs, the model, shuffling and sampling")
    args = parser.parse_args()
    device = torch.device(args.device)
    spec = SyntheticSpec(num_nodes=args.num_nodes) if args.num_nodes else None
    torch_geometric.seed_everything(args.seed)

    dataset = load_dataset(args.dataset, synthetic=spec, root=args.data_root, split_seed=args.seed)
    data = to_pyg(dataset)  # x, y, edge_index and the split's masks: what a PyG dataset's [0] holds
    print(data)

    kwargs = {"batch_size": args.batch_size, "num_workers": args.num_workers, "persistent_workers": args.num_workers > 0}
    train_loader = NeighborLoader(data, input_nodes=data.train_mask, num_neighbors=args.fanouts, shuffle=True, **kwargs)
    val_loader = NeighborLoader(data, input_nodes=data.val_mask, num_neighbors=args.fanouts, shuffle=False, **kwargs)
    test_loader = NeighborLoader(data, input_nodes=data.test_mask, num_neighbors=args.fanouts, shuffle=False, **kwargs)

    model = SAGE(data.num_features, args.hidden, dataset.num_classes, num_layers=len(args.fanouts)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=5e-4)

    times = []
    for epoch in range(1, args.epochs + 1):
        start = time.time()
        loss, acc = train(model, train_loader, optimizer, device)
        times.append(time.time() - start)
        val_acc = test(model, val_loader, device)
        print(f"Epoch {epoch:02d}, Loss: {loss:.4f}, Approx. Train: {acc:.4f}, Val: {val_acc:.4f}")
    print(f"Median time per epoch: {torch.tensor(times).median():.4f}s")
    print(f"Test Accuracy {test(model, test_loader, device):.4f}")
