"""RGCN-style node classification on a heterograph, in the shape of DGL 2.1's minibatch RGCN
examples: papers, authors and fields of study (dgl_zerocopy.data.hetero: generated, with a planted
label signal), one SAGEConv per edge type in a HeteroGraphConv, per-edge-type fanouts and
features prefetched per node type.

As written it uses DGL's own DataLoader. To switch to dgl-zerocopy, change one line:

    from dgl.dataloading import DataLoader    ->    from dgl_zerocopy import DataLoader

On a GPU with PyPI's DGL (a CPU build, whose graphs cannot move to CUDA) change a second one:

    import dgl.nn as dglnn                    ->    import dgl_zerocopy.nn as dglnn

tests/training/test_examples_uses.py runs the versions side by side and checks they reach the same accuracy.
"""

import argparse
import time

import dgl
import dgl.nn as dglnn
import torch
import torch.nn as nn
import torch.nn.functional as F
from dgl.dataloading import DataLoader
from dgl.dataloading import NeighborSampler

from dgl_zerocopy.data.hetero import HeteroSpec, generate_hetero


class RGCN(nn.Module):
    def __init__(self, in_size, hid_size, out_size, etypes, num_layers=2):
        super().__init__()
        sizes = [in_size] + [hid_size] * (num_layers - 1) + [out_size]
        self.layers = nn.ModuleList(
            [dglnn.HeteroGraphConv({etype: dglnn.SAGEConv(a, b, "mean") for etype in etypes}, aggregate="sum") for a, b in zip(sizes[:-1], sizes[1:])]
        )
        self.dropout = nn.Dropout(0.5)

    def forward(self, blocks, x):
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h)
            if i != len(self.layers) - 1:
                h = {ntype: self.dropout(F.relu(v)) for ntype, v in h.items()}
        return h


def evaluate(model, dataloader, target):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for input_nodes, output_nodes, blocks in dataloader:
            logits = model(blocks, blocks[0].srcdata["feat"])[target]
            labels = blocks[-1].dstdata["label"][target]
            correct += int((logits.argmax(1) == labels).sum())
            total += len(labels)
    return correct / total


def main(args):
    device = torch.device("cpu" if args.mode == "cpu" else "cuda")
    data = generate_hetero(HeteroSpec(num_papers=args.num_papers, num_authors=max(1, args.num_papers * 2 // 5), seed=args.data_seed))
    g = data.to_dgl()
    print(data.summary())
    target = data.target
    # Per-edge-type fanouts: a field has thousands of papers, so fewer of them are drawn.
    fanouts = [{etype: (max(1, f // 2) if etype == "topic_of" else f) for etype in g.etypes} for f in args.fanouts]
    sampler = NeighborSampler(fanouts, prefetch_node_feats={ntype: ["feat"] for ntype in g.ntypes}, prefetch_labels={target: ["label"]})
    train_idx, val_idx, test_idx = (torch.from_numpy(i) for i in (data.train_idx, data.val_idx, data.test_idx))

    def loader(idx, shuffle):
        return DataLoader(g, {target: idx}, sampler, device=device, batch_size=args.batch_size, shuffle=shuffle, drop_last=False, num_workers=0)

    train_loader, val_loader, test_loader = loader(train_idx, True), loader(val_idx, False), loader(test_idx, False)
    model = RGCN(data.features[target].shape[1], args.hidden, data.num_classes, g.etypes, num_layers=len(fanouts)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=5e-4)
    for epoch in range(args.epochs):
        model.train()
        start, total_loss = time.perf_counter(), 0.0
        for it, (input_nodes, output_nodes, blocks) in enumerate(train_loader):
            logits = model(blocks, blocks[0].srcdata["feat"])[target]
            loss = F.cross_entropy(logits, blocks[-1].dstdata["label"][target])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total_loss += loss.item()
        acc = evaluate(model, val_loader, target)
        print(f"Epoch {epoch:03d} | Loss {total_loss / (it + 1):.4f} | Val Accuracy {acc:.4f} | {time.perf_counter() - start:.2f} s")
    print(f"Test Accuracy {evaluate(model, test_loader, target):.4f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", default="mixed", choices=["cpu", "mixed"])
    parser.add_argument("--num-papers", type=int, default=20_000, help="papers in the generated graph (authors: 2/5 of them)")
    parser.add_argument("--fanouts", type=lambda s: [int(f) for f in s.split(",")], default=[10, 10], help="per layer, e.g. 10,10")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0, help="seeds the model, shuffling and sampling")
    parser.add_argument("--data-seed", type=int, default=0, help="seeds the generated graph")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        args.mode = "cpu"
    print(f"Training in {args.mode} mode.")
    torch.manual_seed(args.seed)
    dgl.seed(args.seed)
    main(args)
