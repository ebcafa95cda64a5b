"""GraphSAGE link prediction, in the shape of PyG 2.8's minibatch link-prediction examples (the
``LinkNeighborLoader`` tutorial, ``examples/hetero/..._link_pred.py`` made homogeneous): ``RandomLinkSplit`` into
training, validation and test edges, ``LinkNeighborLoader`` with ``neg_sampling_ratio``, a ``SAGEConv`` encoder
and a dot-product decoder, ROC AUC on the held-out edges against as many sampled non-edges. On
dgl-zerocopy's datasets (Cora from ``--data-root`` by default; nothing downloads).

As written it uses PyG's own LinkNeighborLoader (which needs pyg-lib or torch-sparse, neither on PyPI).
To switch to dgl-zerocopy, change one line:

    from torch_geometric.loader import LinkNeighborLoader    ->    from dgl_zerocopy.pyg import LinkNeighborLoader

Our loader then samples without pyg-lib and gathers ``x`` through our store, on the CPU. On a GPU, pass
``device=device`` to our loaders as well to sample and gather there (zero-copy from pinned host memory).

tests/pyg/test_examples_pyg.py runs the switched script (and the original where PyG can sample).

    python examples/pyg_link_pred.py                           # Cora, on the CPU
    python examples/pyg_link_pred.py --device cuda
"""

import argparse
import time

import torch
import torch.nn.functional as F
import torch_geometric
import torch_geometric.transforms as T
from sklearn.metrics import roc_auc_score
from torch_geometric.loader import LinkNeighborLoader
from torch_geometric.nn import SAGEConv

from dgl_zerocopy.data import SyntheticSpec, load_dataset
from dgl_zerocopy.pyg.datasets import to_pyg


class Encoder(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, num_layers=2, dropout=0.2):
        super().__init__()
        sizes = [in_channels] + [hidden_channels] * num_layers
        self.convs = torch.nn.ModuleList([SAGEConv(a, b) for a, b in zip(sizes[:-1], sizes[1:])])
        self.dropout = dropout

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = x.relu_()
                x = F.dropout(x, p=self.dropout, training=self.training)
        return x


class Model(torch.nn.Module):
    """Encoder, then the dot product of the two ends of each edge of ``edge_label_index``."""

    def __init__(self, in_channels, hidden_channels, num_layers=2):
        super().__init__()
        self.encoder = Encoder(in_channels, hidden_channels, num_layers)

    def forward(self, batch):
        h = self.encoder(batch.x, batch.edge_index)
        src, dst = batch.edge_label_index
        return (h[src] * h[dst]).sum(dim=-1)


def train(model, loader, optimizer, device):
    model.train()
    total_loss = total_examples = 0
    for batch in loader:
        batch = batch.to(device)
        optimizer.zero_grad()
        pred = model(batch)
        loss = F.binary_cross_entropy_with_logits(pred, batch.edge_label)
        loss.backward()
        optimizer.step()
        total_loss += loss.item() * pred.numel()
        total_examples += pred.numel()
    return total_loss / total_examples


@torch.no_grad()
def test(model, loader, device):
    model.eval()
    preds, labels = [], []
    for batch in loader:
        batch = batch.to(device)
        preds.append(model(batch).sigmoid().cpu())
        labels.append(batch.edge_label.cpu())
    return roc_auc_score(torch.cat(labels).numpy(), torch.cat(preds).numpy())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="cora", help="a dgl-zerocopy dataset name: cora, citeseer, amazon-photo, synthetic, ...")
    parser.add_argument("--data-root", default="../shared/data", help="folder of the real datasets (default: ../shared/data, from the checkout's root)")
    parser.add_argument("--num-nodes", type=int, default=None, help="size of the synthetic graph")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--fanouts", type=lambda s: [int(f) for f in s.split(",")], default=[10, 10], help="neighbours per layer, e.g. 10,10")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--lr", type=float, default=0.005)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0, help="seeds the edge split, the model, shuffling, negatives and sampling")
    args = parser.parse_args()
    device = torch.device(args.device)
    spec = SyntheticSpec(num_nodes=args.num_nodes) if args.num_nodes else None
    torch_geometric.seed_everything(args.seed)  # random, NumPy and torch (RandomLinkSplit draws with random)

    data = to_pyg(load_dataset(args.dataset, synthetic=spec, root=args.data_root, split_seed=args.seed), masks=False)
    # Held-out edges (both directions removed from the graph) with as many negatives; training edges get
    # their negatives from the loader, new ones each batch.
    transform = T.RandomLinkSplit(num_val=0.1, num_test=0.1, is_undirected=True, add_negative_train_samples=False)
    train_data, val_data, test_data = transform(data)
    print(train_data)

    train_loader = LinkNeighborLoader(
        train_data,
        num_neighbors=args.fanouts,
        neg_sampling_ratio=1.0,
        edge_label_index=train_data.edge_label_index,
        edge_label=train_data.edge_label,
        batch_size=args.batch_size,
        shuffle=True,
    )
    val_loader, test_loader = (
        LinkNeighborLoader(
            split,
            num_neighbors=args.fanouts,
            edge_label_index=split.edge_label_index,
            edge_label=split.edge_label,
            batch_size=3 * args.batch_size,
            shuffle=False,
        )
        for split in (val_data, test_data)
    )

    model = Model(data.num_features, args.hidden, num_layers=len(args.fanouts)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    for epoch in range(1, args.epochs + 1):
        start = time.time()
        loss = train(model, train_loader, optimizer, device)
        print(f"Epoch {epoch:03d}, Loss: {loss:.4f}, Val AUC: {test(model, val_loader, device):.4f}, {time.time() - start:.2f} s")
    print(f"Test AUC {test(model, test_loader, device):.4f}")
