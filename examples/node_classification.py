"""GraphSAGE node classification, in the shape of DGL 2.1's example
(``examples/pytorch/graphsage/node_classification.py``), on dgl-zerocopy's datasets.

As written it uses DGL's own DataLoader. To switch to dgl-zerocopy, change one line:

    from dgl.dataloading import DataLoader    ->    from dgl_zerocopy import DataLoader

On a GPU with PyPI's DGL (a CPU build, whose graphs cannot move to CUDA) change a second one:

    import dgl.nn as dglnn                    ->    import dgl_zerocopy.nn as dglnn

tests/loading/test_dropin.py runs all three versions and checks they reach the same accuracy.
"""

import argparse

import dgl
import dgl.nn as dglnn
import torch
import torch.nn as nn
import torch.nn.functional as F
import tqdm
from dgl.dataloading import DataLoader
from dgl.dataloading import MultiLayerFullNeighborSampler, NeighborSampler

from dgl_zerocopy.data import SyntheticSpec, load_dataset


class SAGE(nn.Module):
    def __init__(self, in_size, hid_size, out_size):
        super().__init__()
        self.layers = nn.ModuleList(
            [dglnn.SAGEConv(in_size, hid_size, "mean"), dglnn.SAGEConv(hid_size, hid_size, "mean"), dglnn.SAGEConv(hid_size, out_size, "mean")]
        )
        self.dropout = nn.Dropout(0.5)
        self.hid_size, self.out_size = hid_size, out_size

    def forward(self, blocks, x):
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h)
            if i != len(self.layers) - 1:
                h = self.dropout(F.relu(h))
        return h

    def inference(self, g, device, batch_size):
        """Layer-wise inference over all nodes: one layer at a time, full neighbourhoods."""
        feat = g.ndata["feat"]
        sampler = MultiLayerFullNeighborSampler(1, prefetch_node_feats=["feat"])
        dataloader = DataLoader(
            g, torch.arange(g.num_nodes()).to(g.device), sampler, device=device, batch_size=batch_size, shuffle=False, drop_last=False, num_workers=0
        )
        buffer_device = torch.device("cpu")
        pin_memory = buffer_device != device
        for i, layer in enumerate(self.layers):
            y = torch.empty(g.num_nodes(), self.hid_size if i != len(self.layers) - 1 else self.out_size, device=buffer_device, pin_memory=pin_memory)
            feat = feat.to(device)
            for input_nodes, output_nodes, blocks in tqdm.tqdm(dataloader, disable=None):
                h = layer(blocks[0], feat[input_nodes])
                if i != len(self.layers) - 1:
                    h = self.dropout(F.relu(h))
                y[output_nodes[0] : output_nodes[-1] + 1] = h.to(buffer_device)  # unshuffled: contiguous
            feat = y
        return y


def accuracy(logits, labels):
    return (logits.argmax(1) == labels).float().mean()


def evaluate(model, dataloader):
    model.eval()
    ys, y_hats = [], []
    with torch.no_grad():
        for input_nodes, output_nodes, blocks in dataloader:
            ys.append(blocks[-1].dstdata["label"])
            y_hats.append(model(blocks, blocks[0].srcdata["feat"]))
    return accuracy(torch.cat(y_hats), torch.cat(ys))


def layerwise_infer(device, g, nid, model, batch_size):
    model.eval()
    with torch.no_grad():
        pred = model.inference(g, device, batch_size)[nid]
        return accuracy(pred, g.ndata["label"][nid].to(pred.device))


def train(args, device, g, train_idx, val_idx, model):
    sampler = NeighborSampler([15, 10, 5], prefetch_node_feats=["feat"], prefetch_labels=["label"])
    use_uva = args.mode == "mixed"
    train_dataloader = DataLoader(g, train_idx, sampler, device=device, batch_size=1024, shuffle=True, drop_last=False, num_workers=0, use_uva=use_uva)
    val_dataloader = DataLoader(g, val_idx, sampler, device=device, batch_size=1024, shuffle=True, drop_last=False, num_workers=0, use_uva=use_uva)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=5e-4)
    for epoch in range(args.epochs):
        model.train()
        total_loss = 0
        for it, (input_nodes, output_nodes, blocks) in enumerate(train_dataloader):
            loss = F.cross_entropy(model(blocks, blocks[0].srcdata["feat"]), blocks[-1].dstdata["label"])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total_loss += loss.item()
        acc = evaluate(model, val_dataloader)
        print(f"Epoch {epoch:05d} | Loss {total_loss / (it + 1):.4f} | Accuracy {acc.item():.4f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", default="mixed", choices=["cpu", "mixed", "puregpu"])
    parser.add_argument("--dataset", default="synthetic", help="a dgl-zerocopy dataset name")
    parser.add_argument("--data-root", default=None, help="folder of the real datasets")
    parser.add_argument("--num-nodes", type=int, default=None, help="size of the synthetic graph")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        args.mode = "cpu"
    if args.mode == "puregpu":
        parser.error("puregpu needs a CUDA build of DGL; use mixed")
    print(f"Training in {args.mode} mode.")
    torch.manual_seed(args.seed)

    spec = SyntheticSpec(num_nodes=args.num_nodes) if args.num_nodes else None
    dataset = load_dataset(args.dataset, synthetic=spec, root=args.data_root)
    g = dataset.to_dgl(with_data=True)
    device = torch.device("cpu" if args.mode == "cpu" else "cuda")
    train_idx, val_idx, test_idx = (torch.from_numpy(dataset.train_idx), torch.from_numpy(dataset.val_idx), torch.from_numpy(dataset.test_idx))

    model = SAGE(g.ndata["feat"].shape[1], 256, dataset.num_classes).to(device)
    train(args, device, g, train_idx, val_idx, model)
    acc = layerwise_infer(device, g, test_idx.to(device), model, batch_size=4096)
    print(f"Test Accuracy {acc.item():.4f}")
