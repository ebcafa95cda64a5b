"""What the sampling processes (``num_workers > 0``) run: DGL's split of an epoch's batches among
them, DGL's setup of each process, and its way of sending sampled graphs back.

As DGL's loader does, worker ``w`` samples a contiguous run of the epoch's batches
(:func:`~dgl_zerocopy.loading.seeds.worker_batches`), and a sampled graph goes back without the
parent graph's tensors that its frames share (DGL's ``remove_parent_storage_columns``; the loader
puts them back with :func:`restore_parent_columns`). torch takes one batch from each process in
turn, so the epoch's batches come in DGL's order, each sampled with the random state DGL's would
have (the processes are forked where DGL's are, and torch runs each with one thread, which DGL's
loader also sets).
"""

from __future__ import annotations

import torch

from .seeds import SeedSet, worker_batches


class EpochBatches(torch.utils.data.IterableDataset):
    """The sampled batches of an epoch, for a torch DataLoader with ``batch_size=None``. ``order``
    (the epoch's seed positions, in batch order) is in shared memory: the loader rewrites it every
    epoch, and persistent processes see the new order."""

    def __init__(self, graph, sampler, seeds: SeedSet, order: torch.Tensor, batch_size: int, num_batches: int) -> None:
        self.graph, self.sampler, self.seeds, self.order = graph, sampler, seeds, order
        self.batch_size, self.num_batches = batch_size, num_batches

    def __iter__(self):
        from dgl.dataloading.dataloader import remove_parent_storage_columns
        from dgl.utils import recursive_apply

        info = torch.utils.data.get_worker_info()
        batches = worker_batches(self.num_batches, info.id, info.num_workers) if info is not None else range(self.num_batches)
        for i in batches:
            rows = self.order[i * self.batch_size : (i + 1) * self.batch_size]
            output = self.sampler.sample(self.graph, self.seeds.batch(rows))
            yield recursive_apply(output, remove_parent_storage_columns, self.graph)


def restore_parent_columns(output, graph):
    """``output`` (from a sampling process) with its frames' shared parent tensors put back."""
    from dgl.dataloading.dataloader import restore_parent_storage_columns
    from dgl.utils import recursive_apply

    return recursive_apply(output, restore_parent_storage_columns, graph)
