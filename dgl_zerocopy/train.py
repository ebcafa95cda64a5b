"""The training loop: minibatch node classification with a per-stage timing breakdown."""
from __future__ import annotations

import logging
import math
import random
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
from torch.nn import functional as F
from tqdm import tqdm

from .config import ConfigError, TrainConfig
from .data import GraphDataset
from .data.base import tensor_view
from .loader import dgl_has_cuda
from .models import build_model
from .sources import make_source
from .timing import STAGES, StageTimer

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

    def line(self) -> str:
        parts = " ".join(f"{s} {self.stages.get(s, 0.0):.2f}s" for s in STAGES)
        return (
            f"epoch {self.epoch:>3} | loss {self.loss:.4f} | acc train {self.train_acc:.4f} val {self.val_acc:.4f} "
            f"test {self.test_acc:.4f} | time {self.epoch_time:.2f}s ({parts}) | eval {self.eval_time:.2f}s"
        )


def resolve_device(name: str, feature_source: str) -> torch.device:
    """``auto`` -> CUDA when it can be used, else CPU. DGL's own path (``dgl``) needs a CUDA build
    of DGL on a GPU; our sources hand device-side blocks to the models instead."""
    needs_dgl_cuda = feature_source in ("dgl", "dgl-storage")  # DGL's own DataLoader moves DGL blocks
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() and (not needs_dgl_cuda or dgl_has_cuda()) else "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError("device 'cuda' requested but CUDA is not available here; use --device cpu or auto")
        if needs_dgl_cuda and not dgl_has_cuda():
            raise ConfigError(f"feature source {feature_source!r} on CUDA needs a CUDA build of DGL (PyPI's is CPU only); use --feature-source zerocopy or --device cpu")
    elif feature_source in ("zerocopy", "gpu"):
        raise ConfigError(f"feature source {feature_source!r} needs a CUDA GPU, and the device is {name!r}; use --feature-source cpu or dgl")
    return torch.device(name)


def seed_everything(seed: int) -> None:
    import dgl

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    dgl.seed(seed)


def train(
    cfg: TrainConfig,
    dataset: GraphDataset,
    on_epoch: Callable[[EpochStats], None] | None = None,
    progress: bool = True,
) -> list[EpochStats]:
    """Train ``cfg.model`` on ``dataset`` and return one :class:`EpochStats` per epoch."""
    device = resolve_device(cfg.device, cfg.feature_source)
    seed_everything(cfg.seed)
    timer = StageTimer()
    model = build_model(cfg.model, dataset.features.shape[1], cfg.hidden, dataset.num_classes, len(cfg.fanouts), cfg.dropout).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    source = make_source(cfg.feature_source, dataset, cfg.fanouts, device, prefetch=cfg.prefetch, seed=cfg.seed)
    train_idx = tensor_view(dataset.train_idx)
    history = []
    try:
        for epoch in range(cfg.epochs):
            model.train()
            timer.reset()
            loss_sum, correct, seen = 0.0, 0, 0
            start = time.perf_counter()
            batches = source.batches(train_idx, cfg.batch_size, shuffle=True, timer=timer)
            num_batches = -(-len(train_idx) // cfg.batch_size)
            bar = tqdm(timer.timed(batches, "wait"), total=num_batches, desc=f"epoch {epoch}", leave=False, disable=not progress)
            for blocks, x, y in bar:
                # On CUDA, the device time of the step (events; no synchronize in the loop).
                with timer.stage("compute", stream=torch.cuda.current_stream(device) if device.type == "cuda" else None):
                    logits = model(blocks, x.float())
                    loss = F.cross_entropy(logits, y)
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    optimizer.step()
                    loss_sum += loss.item() * len(y)
                    correct += int((logits.argmax(1) == y).sum())
                    seen += len(y)
                bar.set_postfix(loss=f"{loss.item():.3f}")
            epoch_time = time.perf_counter() - start
            stages = timer.reset()
            t0 = time.perf_counter()
            if (epoch + 1) % cfg.eval_every == 0 or epoch == cfg.epochs - 1:
                val_acc = evaluate(model, source, dataset.val_idx, cfg.eval_batch_size, dataset.evaluator)
                test_acc = evaluate(model, source, dataset.test_idx, cfg.eval_batch_size, dataset.evaluator)
            else:  # skipped (eval_every): on large test sets evaluation costs more than the epoch
                val_acc = test_acc = float("nan")
            stats = EpochStats(epoch, loss_sum / max(seen, 1), correct / max(seen, 1), val_acc, test_acc,
                               epoch_time, time.perf_counter() - t0, stages)
            history.append(stats)
            log.debug(stats.line())
            if on_epoch is not None:
                on_epoch(stats)
    finally:
        source.close()
    return history


def best_epoch(history: list[EpochStats]) -> EpochStats:
    """The model-selection rule: the evaluated epoch with the highest validation accuracy (the
    earliest on ties); epochs skipped by ``eval_every`` (NaN) never win. The last epoch if none was evaluated."""
    evaluated = [h for h in history if not math.isnan(h.val_acc)]
    return max(evaluated, key=lambda h: h.val_acc) if evaluated else history[-1]


@torch.no_grad()
def evaluate(model: torch.nn.Module, source, nodes: np.ndarray, batch_size: int, evaluator: str | None = None) -> float:
    """Accuracy on ``nodes`` with the same sampled neighbourhoods as training (dropout off);
    with ``evaluator`` (an OGB dataset name) computed by OGB's ``Evaluator``."""
    if len(nodes) == 0:
        return float("nan")
    model.eval()
    preds, truth = [], []
    for blocks, x, y in source.batches(tensor_view(nodes), batch_size, shuffle=False, timer=StageTimer()):
        preds.append(model(blocks, x.float()).argmax(1).cpu())
        truth.append(y.cpu())
    y_pred, y_true = torch.cat(preds), torch.cat(truth)
    if evaluator is not None:
        from ogb.nodeproppred import Evaluator

        return float(Evaluator(evaluator).eval({"y_true": y_true[:, None], "y_pred": y_pred[:, None]})["acc"])
    return float((y_pred == y_true).sum()) / len(nodes)


def timing_table(history: list[EpochStats]) -> str:
    """A plain-text table of the per-epoch stage times (seconds)."""
    cols = ["epoch", *STAGES, "epoch_time", "eval"]
    rows = [[str(h.epoch), *(f"{h.stages.get(s, 0.0):.2f}" for s in STAGES), f"{h.epoch_time:.2f}", f"{h.eval_time:.2f}"] for h in history]
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    fmt = lambda r: "  ".join(v.rjust(w) for v, w in zip(r, widths))  # noqa: E731
    return "\n".join([fmt(cols), fmt(["-" * w for w in widths]), *(fmt(r) for r in rows)])
