"""Data-parallel GraphSAGE over several processes (one per GPU, or gloo ranks on the CPU), in the
shape of DGL 2.1's multi-GPU example (``examples/multigpu/node_classification_sage.py``).

As written it uses DGL's own DataLoader. To switch to dgl-zerocopy, change one line:

    from dgl.dataloading import DataLoader    ->    from dgl_zerocopy import DataLoader

(and on GPUs with PyPI's DGL: ``import dgl.nn as dglnn`` -> ``import dgl_zerocopy.nn as dglnn``).
The feature table is held once in host memory: ``mp.spawn`` hands ``g.ndata["feat"]`` to every
process through shared memory, and each process's loader pins it for its own GPU.

    python examples/multi_gpu_node_classification.py --gpu 0,1,2,3      # four GPUs
    python examples/multi_gpu_node_classification.py --cpu-procs 2      # two gloo ranks on the CPU
"""

import argparse
import os

import dgl
import dgl.nn as dglnn
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from dgl.dataloading import DataLoader
from dgl.dataloading import NeighborSampler
from torch.nn.parallel import DistributedDataParallel

from dgl_zerocopy.data import SyntheticSpec, load_dataset


class SAGE(nn.Module):
    def __init__(self, in_size, hid_size, out_size):
        super().__init__()
        self.layers = nn.ModuleList(
            [dglnn.SAGEConv(in_size, hid_size, "mean"), dglnn.SAGEConv(hid_size, hid_size, "mean"), dglnn.SAGEConv(hid_size, out_size, "mean")]
        )
        self.dropout = nn.Dropout(0.5)

    def forward(self, blocks, x):
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h)
            if i != len(self.layers) - 1:
                h = self.dropout(F.relu(h))
        return h


def evaluate(model, dataloader, device):
    """This rank's correct predictions and count (summed over ranks by the caller)."""
    model.eval()
    correct, total = torch.zeros((), device=device), torch.zeros((), device=device)
    with torch.no_grad():
        for input_nodes, output_nodes, blocks in dataloader:
            y_hat = model(blocks, blocks[0].srcdata["feat"])
            correct += (y_hat.argmax(1) == blocks[-1].dstdata["label"]).sum()
            total += len(output_nodes)
    return correct, total


def run(proc_id, nprocs, devices, g, data, args):
    device = torch.device(f"cuda:{devices[proc_id]}" if devices else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo", init_method=f"tcp://127.0.0.1:{args.port}", world_size=nprocs, rank=proc_id)
    num_classes, train_idx, val_idx, test_idx = data
    torch.manual_seed(args.seed)
    model = SAGE(g.ndata["feat"].shape[1], 256, num_classes).to(device)
    model = DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
    sampler = NeighborSampler([10, 10, 10], prefetch_node_feats=["feat"], prefetch_labels=["label"])
    use_uva = device.type == "cuda"
    loaders = {
        name: DataLoader(
            g, idx, sampler, device=device, batch_size=1024, shuffle=name == "train", drop_last=False, num_workers=0, use_ddp=True, use_uva=use_uva
        )
        for name, idx in (("train", train_idx), ("val", val_idx), ("test", test_idx))
    }
    opt = torch.optim.Adam(model.parameters(), lr=0.001, weight_decay=5e-4)
    for epoch in range(args.epochs):
        model.train()
        total_loss = 0
        for it, (_, _, blocks) in enumerate(loaders["train"]):
            loss = F.cross_entropy(model(blocks, blocks[0].srcdata["feat"]), blocks[-1].dstdata["label"])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total_loss += loss.item()
        correct, total = evaluate(model, loaders["val"], device)
        dist.all_reduce(correct), dist.all_reduce(total)
        if proc_id == 0:
            print(f"Epoch {epoch:05d} | Loss {total_loss / (it + 1):.4f} | Accuracy {(correct / total).item():.4f}", flush=True)
    correct, total = evaluate(model, loaders["test"], device)
    dist.all_reduce(correct), dist.all_reduce(total)
    if proc_id == 0:
        print(f"Test accuracy {(correct / total).item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpu", default=None, help="GPU ids, e.g. 0,1,2,3 (default: all GPUs, or the CPU)")
    parser.add_argument("--cpu-procs", type=int, default=2, help="gloo ranks when no GPU is used")
    parser.add_argument("--dataset", default="synthetic")
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--num-nodes", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--port", type=int, default=12345)
    args = parser.parse_args()
    if args.gpu is not None:
        devices = [int(d) for d in args.gpu.split(",")]
    else:
        devices = list(range(torch.cuda.device_count()))
    nprocs = len(devices) or args.cpu_procs
    print(f"Training with {nprocs} process(es) on {'GPUs ' + str(devices) if devices else 'the CPU'}")

    spec = SyntheticSpec(num_nodes=args.num_nodes) if args.num_nodes else None
    dataset = load_dataset(args.dataset, synthetic=spec, root=args.data_root)
    g = dataset.to_dgl(with_data=True)
    g.create_formats_()  # once here rather than in every process
    os.environ["OMP_NUM_THREADS"] = str(max(1, mp.cpu_count() // nprocs))  # the ranks share the cores
    data = (dataset.num_classes, torch.from_numpy(dataset.train_idx), torch.from_numpy(dataset.val_idx), torch.from_numpy(dataset.test_idx))
    mp.spawn(run, args=(nprocs, devices, g, data, args), nprocs=nprocs)
