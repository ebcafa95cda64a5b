"""GraphSAGE link prediction with a dot-product scorer, in the shape of DGL 2.1's example
(``examples/pytorch/graphsage/link_pred.py``): edge ids as the loader's indices,
``as_edge_prediction_sampler`` with uniform negative sampling and the reverse edges excluded, on
Cora (read by dgl_zerocopy.data from --data-root) or a generated graph. A tenth of the edges is held
out; the test reports AUC and MRR of the held-out edges against uniformly drawn negatives.

As written it uses DGL's own DataLoader. To switch to dgl-zerocopy, change one line:

    from dgl.dataloading import DataLoader    ->    from dgl_zerocopy import DataLoader

On a GPU with PyPI's DGL (a CPU build, whose graphs cannot move to CUDA) change a second one:

    import dgl.nn as dglnn                    ->    import dgl_zerocopy.nn as dglnn

tests/training/test_examples_uses.py runs the versions side by side and checks they reach the same AUC.
"""

import argparse
import time

import dgl
import dgl.nn as dglnn
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from dgl.dataloading import DataLoader
from dgl.dataloading import MultiLayerFullNeighborSampler, NeighborSampler, as_edge_prediction_sampler, negative_sampler

from dgl_zerocopy.data import SyntheticSpec, load_dataset


class SAGE(nn.Module):
    def __init__(self, in_size, hid_size, num_layers=2):
        super().__init__()
        sizes = [in_size] + [hid_size] * num_layers
        self.layers = nn.ModuleList([dglnn.SAGEConv(a, b, "mean") for a, b in zip(sizes[:-1], sizes[1:])])
        self.dropout = nn.Dropout(0.2)

    def forward(self, blocks, x):
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h)
            if i != len(self.layers) - 1:
                h = self.dropout(F.relu(h))
        return h


def score(pair_graph, h):
    """Dot product of the two ends of each edge of ``pair_graph`` (its nodes: the batch's output nodes)."""
    src, dst = pair_graph.edges()
    src, dst = src.to(h.device).long(), dst.to(h.device).long()
    return (h[src] * h[dst]).sum(1)


def split_edges(dataset, test_frac, seed):
    """The undirected edges (each once, u < v) shuffled and split into train and test pairs."""
    dst = np.repeat(np.arange(dataset.num_nodes), np.diff(dataset.indptr))
    src = np.asarray(dataset.indices)
    once = src < dst
    u, v = torch.from_numpy(src[once]), torch.from_numpy(dst[once])
    perm = torch.randperm(len(u), generator=torch.Generator().manual_seed(seed))
    n_test = int(test_frac * len(u))
    test, train = perm[:n_test], perm[n_test:]
    return (u[train], v[train]), (u[test], v[test])


def embed(model, g, device, batch_size):
    """Every node's embedding from its full neighbourhood (one pass over all nodes)."""
    sampler = MultiLayerFullNeighborSampler(len(model.layers), prefetch_node_feats=["feat"])
    loader = DataLoader(g, torch.arange(g.num_nodes()), sampler, device=device, batch_size=batch_size, shuffle=False, drop_last=False, num_workers=0)
    model.eval()
    out = torch.empty(g.num_nodes(), model.layers[-1].fc_self.out_features)
    with torch.no_grad():
        for input_nodes, output_nodes, blocks in loader:
            out[output_nodes.cpu().long()] = model(blocks, blocks[0].srcdata["feat"]).cpu()
    return out


def auc_and_mrr(h, pos, num_nodes, k, seed):
    """AUC of the positive pairs against k uniform corruptions of each one's destination, and the
    MRR of each positive among its own k negatives."""
    u, v = pos
    gen = torch.Generator().manual_seed(seed)
    neg_v = torch.randint(0, num_nodes, (len(u), k), generator=gen)
    pos_score = (h[u] * h[v]).sum(1)
    neg_score = (h[u].unsqueeze(1) * h[neg_v]).sum(2)
    scores = torch.cat([pos_score, neg_score.flatten()])
    ranks = torch.empty_like(scores).scatter_(0, scores.argsort(), torch.arange(1, len(scores) + 1, dtype=scores.dtype))
    n_pos, n_neg = len(pos_score), neg_score.numel()
    auc = (ranks[:n_pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)
    mrr = (1.0 / (1 + (neg_score >= pos_score.unsqueeze(1)).sum(1)).float()).mean()
    return auc.item(), mrr.item()


def main(args):
    device = torch.device("cpu" if args.mode == "cpu" else "cuda")
    spec = SyntheticSpec(num_nodes=args.num_nodes) if args.num_nodes else None
    dataset = load_dataset(args.dataset, synthetic=spec, root=args.data_root)
    print(dataset.summary())
    (u, v), test_pairs = split_edges(dataset, 0.1, args.seed)
    # Both directions of each training edge: edge i and edge i + E are each other's reverse.
    E = len(u)
    g = dgl.graph((torch.cat([u, v]), torch.cat([v, u])), num_nodes=dataset.num_nodes)
    g.ndata["feat"] = torch.from_numpy(np.ascontiguousarray(dataset.features))
    reverse_eids = torch.cat([torch.arange(E, 2 * E), torch.arange(0, E)])
    sampler = NeighborSampler(args.fanouts, prefetch_node_feats=["feat"])
    sampler = as_edge_prediction_sampler(sampler, exclude="reverse_id", reverse_eids=reverse_eids, negative_sampler=negative_sampler.Uniform(args.neg))
    loader = DataLoader(g, torch.arange(2 * E), sampler, device=device, batch_size=args.batch_size, shuffle=True, drop_last=False, num_workers=0)
    model = SAGE(g.ndata["feat"].shape[1], args.hidden, num_layers=len(args.fanouts)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    for epoch in range(args.epochs):
        model.train()
        start, total_loss = time.perf_counter(), 0.0
        for it, (input_nodes, pair_graph, neg_pair_graph, blocks) in enumerate(loader):
            h = model(blocks, blocks[0].srcdata["feat"])
            pos, neg = score(pair_graph, h), score(neg_pair_graph, h)
            logits, labels = torch.cat([pos, neg]), torch.cat([torch.ones_like(pos), torch.zeros_like(neg)])
            loss = F.binary_cross_entropy_with_logits(logits, labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total_loss += loss.item()
        print(f"Epoch {epoch:03d} | Loss {total_loss / (it + 1):.4f} | {time.perf_counter() - start:.2f} s")
    h = embed(model, g, device, batch_size=4096)
    auc, mrr = auc_and_mrr(h, test_pairs, g.num_nodes(), k=args.eval_neg, seed=args.seed)
    print(f"Test AUC {auc:.4f} | Test MRR {mrr:.4f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", default="mixed", choices=["cpu", "mixed"])
    parser.add_argument("--dataset", default="cora", help="a dgl-zerocopy dataset name (cora needs --data-root)")
    parser.add_argument("--data-root", default=None, help="folder of the real datasets (holding planetoid/)")
    parser.add_argument("--num-nodes", type=int, default=None, help="size of the synthetic graph")
    parser.add_argument("--fanouts", type=lambda s: [int(f) for f in s.split(",")], default=[10, 10], help="per layer, e.g. 10,10")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--neg", type=int, default=1, help="negatives per positive edge in training")
    parser.add_argument("--eval-neg", type=int, default=50, help="negatives per held-out edge in the test")
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0, help="seeds the split, the model, shuffling and sampling")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        args.mode = "cpu"
    print(f"Training in {args.mode} mode.")
    torch.manual_seed(args.seed)
    dgl.seed(args.seed)
    main(args)
