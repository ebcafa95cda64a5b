"""Whether a host buffer can serve a run's batches, known before the first step (features left on storage).

A gather needs a slot of the host buffer for each distinct row of its batch that the device cache does not
hold: a batch with more such rows than the buffer has slots fails (``BufferFullError``), and without this
check it failed where it came, after an epoch of training when the evaluation batches are the larger ones.
:func:`check_batches_fit` finds out when the source is made:

1. the bound: a batch of ``b`` seeds reads at most ``b * prod(1 + fanout)`` distinct rows (every row, with a
   fanout of -1), and never more than the table's; a buffer that holds that many serves every batch, and
   nothing is sampled;
2. otherwise one training batch (seeds drawn at random, as an epoch draws them) and one evaluation batch
   (seeds drawn from the larger of the validation and test sets) are sampled with the run's fanouts, on the CPU (``GpuNeighborSampler`` on its reference backend, under a forked torch
   generator and never DGL's, so the run's own draws are those it would make without the check), and their
   distinct rows counted.

A buffer with fewer slots than a sampled batch's rows is refused (:class:`~.config.ConfigError`) with the counts,
the ``--host-buffer`` that holds them and the flags that make batches smaller. The sampled batches are a
sample: a later batch may be somewhat larger, and a run that starts can still stop at that batch, in one line.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..store.storage.policy import budget_for_slots
from ..store.table_input import human_size
from .config import ConfigError

#: Headroom over the largest sampled batch in the size the refusal suggests (batches of a run differ a little).
HEADROOM = 1.02


def batch_bound(batch_size: int, fanouts: list[int], num_rows: int) -> int:
    """The most distinct rows a batch of ``batch_size`` seeds can read with ``fanouts`` (-1: every in-edge)."""
    if -1 in fanouts:
        return num_rows
    return min(num_rows, batch_size * math.prod(1 + f for f in fanouts))


def check_batches_fit(store, graph, dataset, fanouts: list[int], cache, row_bytes: int, seed: int = 0) -> None:
    """Refuse (:class:`ConfigError`) a storage-backed ``store`` whose host buffer cannot hold the distinct rows of
    one of the run's batches: the training batches of ``cache.batch_size`` seeds of ``cache.seeds`` and, where
    ``cache.eval_batch_size`` is given, the evaluation batches of ``dataset``'s validation and test nodes."""
    num_rows = dataset.num_nodes
    slots = store.nbytes // row_bytes
    batches = [("training", cache.seeds, cache.batch_size, ("--batch-size", "--fanouts"))]
    if cache.eval_batch_size is not None:
        evaluated = max((np.asarray(getattr(dataset, k)) for k in ("val_idx", "test_idx")), key=len)
        batches.append(("evaluation", torch.as_tensor(evaluated), cache.eval_batch_size, ("--eval-batch-size",)))
    batches = [(kind, seeds, min(size, len(seeds)), fix) for kind, seeds, size, fix in batches if seeds is not None and len(seeds)]
    if all(batch_bound(size, fanouts, num_rows) <= slots for _, _, size, _ in batches):
        return
    if store.cache_policy is not None:
        store.bind()  # the device cache's rows need no slot
    cached = store.cache.slot_map.cpu() if store.cache is not None else None
    counts = [(kind, size, _distinct_rows(graph, seeds, size, fanouts, cached, seed), fix) for kind, seeds, size, fix in batches]
    short = [(kind, size, rows, fix) for kind, size, rows, fix in counts if rows > slots]
    if not short:
        return
    needed = min(num_rows, math.ceil(max(rows for _, _, rows, _ in counts) * HEADROOM))
    share = min(100, math.ceil(100 * needed / num_rows))
    budget = human_size(budget_for_slots(num_rows, row_bytes, needed, cache.host_buffer_policy))
    said = ", ".join(
        f"{'an' if kind == 'evaluation' else 'a'} {kind} batch ({size:,} seeds{f', fanouts {fanouts}' if kind == 'training' else ''}) "
        f"reads about {rows:,} distinct rows"
        for kind, size, rows, _ in short
    )
    flags = [flag for *_, fix in short for flag in fix]
    lower = flags[0] if len(flags) == 1 else f"{', '.join(flags[:-1])} or {flags[-1]}"
    store.close()
    raise ConfigError(
        f"host_buffer {cache.host_buffer!r} holds {slots:,} of the {num_rows:,} rows, too few for this run's batches (sampled before the "
        f"first step): {said}; give --host-buffer {share}% (about {budget}) or more, or lower {lower}"
    )


def _distinct_rows(graph, seeds: torch.Tensor, batch_size: int, fanouts: list[int], cached: torch.Tensor | None, seed: int) -> int:
    """Distinct rows of one batch of ``batch_size`` of ``seeds`` (drawn at random) that the device cache does not hold."""
    from ..sampling import GpuNeighborSampler

    with torch.random.fork_rng(devices=[]):  # the run's own generator state is left as it was
        torch.manual_seed(seed)
        batch = seeds[torch.randperm(len(seeds))[:batch_size]]
        with GpuNeighborSampler(fanouts, device="reference") as sampler:
            rows = sampler.sample_blocks(graph, batch)[0].cpu()
    return int(rows.numel() if cached is None else (cached[rows] < 0).sum())
