"""The training loop: minibatch node classification with a per-stage timing breakdown.

``cfg.nproc > 1``: data-parallel training (``DistributedDataParallel``) in that many processes
started by :func:`dgl_zerocopy.training.ddp.launch`: one per GPU with NCCL, or gloo ranks on the CPU. The
dataset's arrays go to the ranks through shared memory (:func:`~dgl_zerocopy.training.ddp.share_dataset`),
so the feature table is in host memory once; each rank makes its own FeatureStore over it (on CUDA
pinned for its own GPU). ``batch_size`` stays the *global* batch: each rank trains on
``ceil(batch_size / nproc)`` seeds per step of its share (the loader's ``use_ddp`` split), DDP averages the
gradients, so a step sees as many seeds as with one process and an epoch takes as many steps:
``nproc`` changes the speed, not the optimisation. Evaluation is split too (see :func:`_fit`).

A heterograph (:class:`~dgl_zerocopy.data.hetero.HeteroGraphDataset`) trains the same way with
``model="rgcn"``: the seeds are the target type's nodes, the sources (:mod:`.hetero_sources`) serve
every node type's features and the target's labels, and the loss and accuracy are over the target's
logits; with DDP its parameters that a batch leaves unused (relations into types the last layer
does not predict) are allowed (``find_unused_parameters``).
"""

from __future__ import annotations

import logging
import math
import pickle
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.nn import functional as F
from tqdm import tqdm

from .._extras import import_dgl
from ..data import GraphDataset, HeteroGraphDataset
from ..data.base import tensor_view
from ..loading.dgl_options import dgl_has_cuda
from ..loading.gpu_sampling import stand_in
from ..loading.timing import STAGES, StageTimer
from ..store.table_input import human_size
from .config import ConfigError, TrainConfig
from .models import build_model
from .sources import CacheRequest, SamplerRequest, make_source

log = logging.getLogger(__name__)


@dataclass
class EpochStats:
    epoch: int
    loss: float
    train_acc: float
    val_acc: float
    test_acc: float
    epoch_time: float  # training only; evaluation is timed apart in eval_time
    eval_time: float
    stages: dict[str, float] = field(default_factory=dict)
    cache_hit_rate: float | None = None  # share of the training batches' rows read from the hot-row cache (None: no cache)
    storage: dict | None = None  # features left on storage: the training batches' storage_stats() (None: in memory)

    def line(self) -> str:
        parts = " ".join(f"{s} {self.stages.get(s, 0.0):.2f}s" for s in STAGES)
        cache = f" | cache hits {self.cache_hit_rate:.1%}" if self.cache_hit_rate is not None else ""
        return (
            f"epoch {self.epoch:>3} | loss {self.loss:.4f} | acc train {self.train_acc:.4f} val {self.val_acc:.4f} "
            f"test {self.test_acc:.4f} | time {self.epoch_time:.2f}s ({parts}) | eval {self.eval_time:.2f}s{cache}{self._storage_part()}"
        )

    def _storage_part(self) -> str:
        """`` | storage 12.0 MiB in 40 reads, rows in memory 61.2% (read ahead 35.0%, held 26.2%), read by the gather 38.8%``:
        what storage delivered (to reads ahead and gathers), and the training batches' rows: found in memory, of them
        those a read ahead had brought (read from storage this epoch, before their batch) and those held already
        (device cache, or the host buffer from earlier batches), and those the gathers read themselves."""
        if self.storage is None:
            return ""
        s = self.storage
        rows = s["device_hits"] + s["host_hits"] + s["storage_rows"]
        ahead = s["read_ahead_hits"] / rows if rows else 0.0
        gathered = s["storage_rows"] / rows if rows else 0.0
        return (
            f" | storage {human_size(s['storage_bytes'])} in {s['storage_reads']:,} reads, rows in memory {s['hit_rate']:.1%} "
            f"(read ahead {ahead:.1%}, held {max(0.0, s['hit_rate'] - ahead):.1%}), read by the gather {gathered:.1%}"
        )


@dataclass
class EpochTally:
    """The training batches' running totals over one epoch (each route's loop keeps one)."""

    loss_sum: float = 0.0  # the batches' mean losses weighted by their seeds
    correct: int = 0
    seen: int = 0
    start: float = field(default_factory=time.perf_counter)

    def step(self, optimizer: torch.optim.Optimizer, logits: torch.Tensor, y: torch.Tensor) -> float:
        """One optimisation step on the seeds' ``logits`` and labels ``y`` (same device): cross
        entropy, backward, ``optimizer.step()``; counts the batch and returns its mean loss."""
        loss = F.cross_entropy(logits, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        value = loss.item()
        self.loss_sum += value * len(y)
        self.correct += int((logits.argmax(1) == y).sum())
        self.seen += len(y)
        return value

    def stats(self, epoch: int, accuracies: tuple[float, float], epoch_time: float, eval_start: float, stages: dict, **extra) -> EpochStats:
        """The epoch's :class:`EpochStats`: mean loss and accuracy over the counted seeds,
        ``accuracies`` (validation, test), the evaluation timed from ``eval_start``; ``extra`` as
        :class:`EpochStats` names them (``cache_hit_rate``, ``storage``)."""
        seen = max(self.seen, 1)
        return EpochStats(epoch, self.loss_sum / seen, self.correct / seen, *accuracies, epoch_time, time.perf_counter() - eval_start, stages, **extra)


def evaluates(cfg: TrainConfig, epoch: int) -> bool:
    """Whether the run evaluates after ``epoch`` (every ``cfg.eval_every`` epochs, and after the last)."""
    return (epoch + 1) % cfg.eval_every == 0 or epoch == cfg.epochs - 1


def resolve_device(name: str, feature_source: str, nproc: int = 1, sampler: str = "cpu") -> torch.device:
    """``auto`` -> CUDA when it can be used, else CPU. DGL's own path (``dgl``) needs a CUDA build
    of DGL on a GPU; our sources hand device-side blocks to the models instead. On CUDA, ``nproc``
    processes need ``nproc`` GPUs (one rank per GPU); on the CPU, a core and about
    :data:`~dgl_zerocopy.training.ddp.RANK_BYTES` of memory each (:func:`~dgl_zerocopy.training.ddp.cpu_rank_limit`).
    ``sampler="gpu"`` needs the device to be CUDA (or the CPU stand-in of :func:`~dgl_zerocopy.loading.gpu_sampling.emulate_on_cpu`);
    ``"snapshot"``, like ``"cpu"``, samples on the CPU on any device."""
    needs_dgl_cuda = feature_source in ("dgl", "dgl-storage")  # DGL's own DataLoader moves DGL blocks
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() and (not needs_dgl_cuda or dgl_has_cuda()) else "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError("device 'cuda' requested but CUDA is not available here; use --device cpu or auto")
        if needs_dgl_cuda and not dgl_has_cuda():
            raise ConfigError(
                f"feature source {feature_source!r} on CUDA needs a CUDA build of DGL (PyPI's is CPU only); use --feature-source zerocopy or --device cpu"
            )
    elif feature_source in ("zerocopy", "gpu"):
        raise ConfigError(f"feature source {feature_source!r} needs a CUDA GPU, and the device is {name!r}; use --feature-source cpu or dgl")
    elif sampler == "gpu" and stand_in() is None:
        why = "CUDA is not available here" if not torch.cuda.is_available() else "the device is 'cpu'"
        raise ConfigError(f"sampler 'gpu' samples on a CUDA GPU, but {why}; use --sampler cpu")
    if name == "cuda" and nproc > torch.cuda.device_count():
        raise ConfigError(
            f"--nproc {nproc} runs one process per GPU, but this machine has {torch.cuda.device_count()} CUDA GPU(s); "
            f"use --nproc {torch.cuda.device_count()} or less, or --device cpu"
        )
    if name == "cpu" and nproc > 1:
        from .ddp import cpu_rank_limit

        if (limit := cpu_rank_limit(nproc)) is not None:
            raise ConfigError(f"--nproc {nproc} is more than this machine can run: {limit[1]}; use --nproc {limit[0]} or less")
    return torch.device(name)


def seed_everything(seed: int) -> None:
    dgl = import_dgl("training on the DGL route")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    dgl.seed(seed)


def train(cfg: TrainConfig, dataset: GraphDataset, on_epoch: Callable[[EpochStats], None] | None = None, progress: bool = True) -> list[EpochStats]:
    """Train ``cfg.model`` on ``dataset`` and return one :class:`EpochStats` per epoch.

    ``dataset`` may also be a :class:`~dgl_zerocopy.training.ddp.SharedDataset`. With ``cfg.nproc > 1``
    the training runs in ``cfg.nproc`` spawned processes (module docstring), the history returned
    is rank 0's, and ``on_epoch`` is called in rank 0's process, so it must be picklable (a
    module-level function, not a lambda). The DGL route only: ``cfg.frontend == "pyg"`` is
    :func:`~dgl_zerocopy.training.pyg_train.train_pyg`'s (a ValueError here)."""
    if cfg.frontend != "dgl":
        raise ValueError(f"train() runs the DGL route, but cfg.frontend is {cfg.frontend!r}; call dgl_zerocopy.training.pyg_train.train_pyg(cfg, dataset)")
    if cfg.nproc > 1:
        return _train_parallel(cfg, dataset, on_epoch, progress)
    if not isinstance(dataset, (GraphDataset, HeteroGraphDataset)):  # a SharedDataset (made for nproc > 1): its arrays, viewed here
        dataset = dataset.open()
    device = resolve_device(cfg.device, cfg.feature_source, sampler=cfg.sampler)
    return _fit(cfg, dataset, device, on_epoch, progress)[0]


def _fit(
    cfg: TrainConfig,
    dataset: GraphDataset,
    device: torch.device,
    on_epoch: Callable[[EpochStats], None] | None,
    progress: bool,
    rank: int = 0,
    world_size: int = 1,
) -> tuple[list[EpochStats], torch.nn.Module]:
    """The training loop of one process; with ``world_size > 1`` one DDP rank (the process group is up).

    DDP: the model is wrapped in ``DistributedDataParallel`` (which starts every rank from rank 0's
    parameters and averages the gradients); each rank trains on its share of the seeds each epoch.
    Evaluation: each rank evaluates its own disjoint slice of the val/test nodes, unpadded, and the
    correct counts are summed over the ranks (an all-reduce): every node counted once, as with one
    process, the work split ``world_size`` ways, and no rank idles at a barrier, where a long
    evaluation on rank 0 alone could outlast the collectives' timeout. The loss and train accuracy
    are summed over the ranks too. Times and stages are rank 0's. Returns the history and the
    (unwrapped) model."""
    parallel = world_size > 1
    seed_everything(cfg.seed)  # the same initial parameters everywhere (DDP also broadcasts rank 0's)
    timer = StageTimer()
    hetero = isinstance(dataset, HeteroGraphDataset)
    target = dataset.target if hetero else None
    model = _build(cfg, dataset).to(device)
    module = model
    if parallel:
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None, find_unused_parameters=hetero)
        # tqdm's default lock holds a multiprocessing RLock, in a spawned rank a named semaphore
        # that a rank killed by a signal leaves to the resource tracker's "leaked semaphore" warning;
        # one process draws the bars (rank 0), so a thread lock is all they need.
        tqdm.set_lock(threading.RLock())
        seed_everything(cfg.seed + rank)  # neighbour draws and dropout differ per rank; the seed split uses ddp_seed=cfg.seed
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    train_idx = tensor_view(dataset.train_idx)
    batch_size = -(-cfg.batch_size // world_size)  # per rank; the global batch stays cfg.batch_size
    cache = CacheRequest(
        cfg.feature_cache,
        cfg.cache_policy,
        seeds=train_idx,
        batch_size=batch_size,
        host_buffer=cfg.host_buffer,
        host_buffer_policy=cfg.host_buffer_policy,
        eval_batch_size=cfg.eval_batch_size,  # the host buffer serves evaluation batches too: checked before the first step
    )
    source = make_source(
        cfg.feature_source,
        dataset,
        cfg.fanouts,
        device,
        prefetch=cfg.prefetch,
        seed=cfg.seed,
        compression=cfg.feature_compression,
        cache=cache,
        sampling=SamplerRequest.of(cfg),
    )
    per_rank = -(-len(train_idx) // world_size)  # seeds per rank, padded as DGL's use_ddp does
    # This rank's slice of each evaluation set (disjoint, unpadded; made once, so the source keeps its loaders).
    eval_sets = {k: tensor_view(np.ascontiguousarray(getattr(dataset, k)[rank::world_size])) for k in ("val_idx", "test_idx")} if parallel else {}
    progress = progress and rank == 0
    history = []
    try:
        for epoch in range(cfg.epochs):
            model.train()
            timer.reset()
            source.reset_cache_stats()
            on_storage = getattr(source, "on_storage", False)  # features left in their file (heterograph sources: never)
            if on_storage:
                source.reset_storage_stats()
            tally = EpochTally()
            batches = source.batches(train_idx, batch_size, shuffle=True, timer=timer, ddp=parallel)
            num_batches = -(-per_rank // batch_size)
            bar = tqdm(timer.timed(batches, "wait"), total=num_batches, desc=f"epoch {epoch}", leave=False, disable=not progress)
            for blocks, x, y in bar:
                # On CUDA, the device time of the step (events; no synchronize in the loop).
                with timer.stage("compute", stream=torch.cuda.current_stream(device) if device.type == "cuda" else None):
                    loss = tally.step(optimizer, _logits(model, blocks, x, target), y)
                bar.set_postfix(loss=f"{loss:.3f}")
            if parallel:
                tally.loss_sum, tally.correct, tally.seen = _sum_over_ranks([tally.loss_sum, tally.correct, tally.seen], device)
            epoch_time = time.perf_counter() - tally.start
            stages = timer.reset()
            hit_rate = source.cache_stats()["hit_rate"] if source.has_cache else None  # this rank's training batches
            storage = source.storage_stats() if on_storage else None
            t0 = time.perf_counter()
            if evaluates(cfg, epoch):
                if parallel:  # DDP's forward may talk to the other ranks; the plain module does not
                    val_acc, test_acc = (
                        _evaluate_split(module, source, eval_sets[k], len(getattr(dataset, k)), cfg.eval_batch_size, device, target)
                        for k in ("val_idx", "test_idx")
                    )
                else:
                    evaluator = getattr(dataset, "evaluator", None)
                    val_acc = evaluate(model, source, dataset.val_idx, cfg.eval_batch_size, evaluator, target)
                    test_acc = evaluate(model, source, dataset.test_idx, cfg.eval_batch_size, evaluator, target)
            else:  # skipped (eval_every): on large test sets evaluation costs more than the epoch
                val_acc = test_acc = float("nan")
            stats = tally.stats(epoch, (val_acc, test_acc), epoch_time, t0, stages, cache_hit_rate=hit_rate, storage=storage)
            history.append(stats)
            log.debug(stats.line())
            if on_epoch is not None and rank == 0:
                on_epoch(stats)
    finally:
        source.close()
    return history, module


def _build(cfg: TrainConfig, dataset: GraphDataset | HeteroGraphDataset) -> torch.nn.Module:
    """``cfg.model`` for ``dataset``: on a heterograph RGCN over its edge types (names, or canonical
    types where names repeat), its inputs as wide as the target type's features (every type's are)."""
    if not isinstance(dataset, HeteroGraphDataset):
        return build_model(cfg.model, dataset.features.shape[1], cfg.hidden, dataset.num_classes, len(cfg.fanouts), cfg.dropout)
    names = dataset.etypes
    etypes = names if len(set(names)) == len(names) else list(dataset.edges)
    in_feats = dataset.features[dataset.target].shape[1]
    return build_model(cfg.model, in_feats, cfg.hidden, dataset.num_classes, len(cfg.fanouts), cfg.dropout, etypes=etypes)


def _logits(model: torch.nn.Module, blocks, x, target: str | None) -> torch.Tensor:
    """The model's logits of the batch's output nodes: on a heterograph (``x`` per node type) the
    target type's of the ``{ntype: logits}`` the model returns."""
    if isinstance(x, Mapping):
        return model(blocks, {ntype: v.float() for ntype, v in x.items()})[target]
    return model(blocks, x.float())


def _train_parallel(cfg: TrainConfig, dataset, on_epoch, progress: bool) -> list[EpochStats]:
    """``cfg.nproc`` DDP ranks over one shared copy of the dataset; rank 0's history."""
    from .ddp import launch, share_dataset

    device = resolve_device(cfg.device, cfg.feature_source, cfg.nproc, cfg.sampler)
    if on_epoch is not None:
        try:
            pickle.dumps(on_epoch)
        except Exception as e:  # noqa: BLE001 - pickle raises several types for unpicklable objects
            raise TypeError(
                f"with nproc > 1, on_epoch runs in rank 0's process and must be picklable (a module-level function), but {on_epoch!r} is not: {e}"
            ) from None
    backend = "nccl" if device.type == "cuda" else "gloo"
    results = launch(_train_rank, cfg.nproc, cfg, share_dataset(dataset), device.type, on_epoch, progress, backend=backend)
    return results[0]


def _train_rank(rank: int, world_size: int, cfg: TrainConfig, shared, device_type: str, on_epoch, progress: bool):
    """One DDP rank (run by :func:`~dgl_zerocopy.training.ddp.launch`): rank 0 returns the history, the others None."""
    device = torch.device("cuda", rank) if device_type == "cuda" else torch.device("cpu")
    history, _ = _fit(cfg, shared.open(), device, on_epoch, progress, rank, world_size)
    return history if rank == 0 else None


def _sum_over_ranks(values: list[float], device: torch.device) -> list[float]:
    import torch.distributed as dist

    total = torch.tensor(values, dtype=torch.float64, device=device)  # gloo reduces CPU tensors, NCCL CUDA ones
    dist.all_reduce(total)
    return total.tolist()


def best_epoch(history: list[EpochStats]) -> EpochStats:
    """The model-selection rule: the evaluated epoch with the highest validation accuracy (the
    earliest on ties); epochs skipped by ``eval_every`` (NaN) never win. The last epoch if none was evaluated."""
    evaluated = [h for h in history if not math.isnan(h.val_acc)]
    return max(evaluated, key=lambda h: h.val_acc) if evaluated else history[-1]


@torch.no_grad()
def evaluate(model: torch.nn.Module, source, nodes: np.ndarray, batch_size: int, evaluator: str | None = None, target: str | None = None) -> float:
    """Accuracy on ``nodes`` with the same sampled neighbourhoods as training (dropout off);
    with ``evaluator`` (an OGB dataset name) computed by OGB's ``Evaluator``; ``target``: on a
    heterograph, the node type of ``nodes`` (the model's logits of that type are read)."""
    if len(nodes) == 0:
        return float("nan")
    y_pred, y_true = _predict(model, source, tensor_view(nodes), batch_size, target)
    if evaluator is not None:
        from ogb.nodeproppred import Evaluator

        return float(Evaluator(evaluator).eval({"y_true": y_true[:, None], "y_pred": y_pred[:, None]})["acc"])
    return float((y_pred == y_true).sum()) / len(nodes)


@torch.no_grad()
def _predict(model: torch.nn.Module, source, nodes: torch.Tensor, batch_size: int, target: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Predicted and true classes of ``nodes`` (on the CPU), dropout off."""
    model.eval()
    preds, truth = [], []
    for blocks, x, y in source.batches(nodes, batch_size, shuffle=False, timer=StageTimer()):
        preds.append(_logits(model, blocks, x, target).argmax(1).cpu())
        truth.append(y.cpu())
    return torch.cat(preds), torch.cat(truth)


def _evaluate_split(model: torch.nn.Module, source, share: torch.Tensor, total: int, batch_size: int, device: torch.device, target: str | None = None) -> float:
    """Accuracy on a node set split over the ranks: this rank predicts ``share``, the correct
    counts are summed over the ranks. (OGB's node-classification ``Evaluator`` computes the same
    accuracy, the fraction correct, so it is not called here.)"""
    if total == 0:
        return float("nan")
    correct = 0
    if len(share):
        y_pred, y_true = _predict(model, source, share, batch_size, target)
        correct = int((y_pred == y_true).sum())
    return _sum_over_ranks([correct], device)[0] / total


def timing_table(history: list[EpochStats]) -> str:
    """A plain-text table of the per-epoch stage times (seconds)."""
    cols = ["epoch", *STAGES, "epoch_time", "eval"]
    rows = [[str(h.epoch), *(f"{h.stages.get(s, 0.0):.2f}" for s in STAGES), f"{h.epoch_time:.2f}", f"{h.eval_time:.2f}"] for h in history]
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    fmt = lambda r: "  ".join(v.rjust(w) for v, w in zip(r, widths))  # noqa: E731
    return "\n".join([fmt(cols), fmt(["-" * w for w in widths]), *(fmt(r) for r in rows)])
