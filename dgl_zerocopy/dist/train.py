"""Node classification on DistDGL partitions: ``dgl-zerocopy train --dist OUT``.

One function serves every role of a DistDGL job, as DGL's launch tool expects of a training
script: in a server process (``DGL_ROLE=server``) :func:`train_dist` serves its partition and
never returns; in a trainer it connects to the servers and trains; with ``DGL_DIST_MODE`` unset
it runs standalone, in-process, on a single partition.

Each trainer trains on its own share of the training nodes (``dgl.distributed.node_split``, equal
shares, the trainer's own partition first), fetches rows through :class:`DistLoader`, and averages
gradients with ``DistributedDataParallel`` over gloo (``torch.distributed``'s environment comes
from DGL's launch tool or ``launch-local``). ``batch_size`` stays the global batch, split as in
:mod:`dgl_zerocopy.training.train`. Evaluation: each trainer predicts the val/test nodes of its partition,
the correct counts are summed, so every node is counted once.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

import torch

from .._extras import import_dgl
from ..loading.timing import StageTimer
from ..training.config import ConfigError, TrainConfig, parse_cache_size
from ..training.models import build_model
from ..training.train import EpochStats, EpochTally, evaluates, resolve_device, seed_everything
from .loader import DistLoader
from .partition import PartitionInfo, load_partition_info
from .single_host import install_from_env
from .source import DistFeatureSource

log = logging.getLogger(__name__)

BACKENDS = {"cpu": "cpu", "zerocopy": "zerocopy", "gpu": "gpu"}


def is_server() -> bool:
    """True in a process that DGL's launch tool (or ``launch-local``) started as a server."""
    return os.environ.get("DGL_ROLE", "client") == "server"


def is_standalone() -> bool:
    """True when ``DGL_DIST_MODE`` is unset or ``standalone``: one partition, in-process."""
    return os.environ.get("DGL_DIST_MODE", "standalone") == "standalone"


def connect(part_dir: str | Path, ip_config: str | None = None):
    """Join the DistDGL job of the partitions in ``part_dir``: returns ``(graph, info)`` in a trainer;
    in a server, serves and never returns. Installs the single-host fixes when launch-local asked for them.

    ``ip_config``: DGL's file of server addresses (default ``$DGL_IP_CONFIG``; not needed standalone)."""
    dgl = import_dgl("dgl_zerocopy.dist (DistDGL)")

    info = load_partition_info(part_dir)
    install_from_env()
    ip_config = ip_config or os.environ.get("DGL_IP_CONFIG")
    if is_standalone() and not is_server():
        if info.num_parts != 1:
            raise ConfigError(
                f"{str(info.folder)!r} holds {info.num_parts} partitions, but standalone mode (DGL_DIST_MODE unset) "
                f"runs one; use `dgl-zerocopy launch-local --parts {info.num_parts} -- train ... --dist {info.folder}` "
                f"or DGL's launch tool"
            )
    elif ip_config is None:
        raise ConfigError("distributed mode needs the servers' addresses: pass --ip-config FILE or set DGL_IP_CONFIG (DGL's launch tool and launch-local do)")
    dgl.distributed.initialize(ip_config)  # a server serves here and exits
    graph = dgl.distributed.DistGraph(info.graph_name, part_config=str(info.part_config))
    return graph, info


def train_dist(
    cfg: TrainConfig, part_dir: str | Path, ip_config: str | None = None, on_epoch: Callable[[EpochStats], None] | None = None, progress: bool = False
) -> tuple[list[EpochStats], PartitionInfo]:
    """Train ``cfg.model`` on the partitions in ``part_dir``; returns the history (every trainer
    holds the same summed accuracies) and the partitions' info. ``on_epoch`` runs on trainer 0 only.
    ``cfg``'s dataset fields are not used: the partitions carry the dataset."""
    import torch.distributed as tdist

    dgl = import_dgl("dgl_zerocopy.dist (DistDGL)")

    if cfg.feature_source not in BACKENDS:
        raise ConfigError(
            f"--dist fetches rows through a FeatureStore over the local partition: feature source must be one of "
            f"{', '.join(BACKENDS)}, but got {cfg.feature_source!r}"
        )
    for flag, value, unused in (
        ("--feature-compression", cfg.feature_compression, cfg.feature_compression != "none"),
        ("--feature-cache", cfg.feature_cache, parse_cache_size(cfg.feature_cache)[1] != 0),
        ("--nproc", cfg.nproc, cfg.nproc != 1),
    ):
        if unused:  # refused rather than ignored: the run would not be the one asked for
            raise ConfigError(
                f"{flag} {value} does not apply with --dist (the partitions' servers hold the features as "
                f"partitioned; DGL's launch tool starts the trainers): leave {flag} out"
            )
    device = resolve_device(cfg.device, cfg.feature_source)
    graph, info = connect(part_dir, ip_config)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    parallel = world > 1
    if parallel and not tdist.is_initialized():
        tdist.init_process_group("gloo")  # env:// from the launcher (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE)
    book = graph.get_partition_book()
    train_nids = dgl.distributed.node_split(graph.ndata["train_mask"], book, force_even=True)
    eval_nids = {k: dgl.distributed.node_split(graph.ndata[f"{k}_mask"], book, force_even=False) for k in ("val", "test")}
    # Every node is evaluated by one trainer (its partition's): the totals are the shares' sum.
    totals = dict(zip(("val", "test"), _sum([len(eval_nids["val"]), len(eval_nids["test"])], parallel)))
    seed_everything(cfg.seed)
    model = build_model(cfg.model, info.feat_dim, cfg.hidden, info.num_classes, len(cfg.fanouts), cfg.dropout).to(device)
    module = model
    if parallel:
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        seed_everything(cfg.seed + rank)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    feat = DistFeatureSource(graph.ndata["feat"], backend=BACKENDS[cfg.feature_source], device=device)
    label = DistFeatureSource(graph.ndata["label"], backend="cpu" if device.type == "cpu" else "zerocopy", device=device)
    timer = StageTimer()
    sources = {"features": {"feat": feat}, "labels": {"label": label}, "prefetch": cfg.prefetch, "device": device, "timer": timer}
    train_loader = DistLoader(graph, train_nids, cfg.fanouts, batch_size=-(-cfg.batch_size // world), shuffle=True, **sources)
    eval_loaders = {k: DistLoader(graph, v, cfg.fanouts, batch_size=cfg.eval_batch_size, **sources) for k, v in eval_nids.items()}
    history: list[EpochStats] = []
    try:
        for epoch in range(cfg.epochs):
            model.train()
            timer.reset()
            tally = EpochTally()
            for _, _, blocks in timer.timed(train_loader, "wait"):
                with timer.stage("compute"):
                    tally.step(optimizer, model(blocks, blocks[0].srcdata["feat"].float()), blocks[-1].dstdata["label"])
            tally.loss_sum, tally.correct, tally.seen = _sum([tally.loss_sum, tally.correct, tally.seen], parallel)
            epoch_time, stages = time.perf_counter() - tally.start, timer.reset()
            t0 = time.perf_counter()
            accuracies = (float("nan"), float("nan"))
            if evaluates(cfg, epoch):
                counts = _sum([_correct(module, eval_loaders[k]) for k in ("val", "test")], parallel)
                accuracies = tuple(c / totals[k] if totals[k] else float("nan") for c, k in zip(counts, ("val", "test")))
            stats = tally.stats(epoch, accuracies, epoch_time, t0, stages)
            history.append(stats)
            if on_epoch is not None and rank == 0:
                on_epoch(stats)
    finally:
        for loader in (train_loader, *eval_loaders.values()):
            loader.close()
        feat.close()
        label.close()
    if parallel:
        tdist.barrier()
        tdist.destroy_process_group()
    return history, info


@torch.no_grad()
def _correct(model: torch.nn.Module, loader: DistLoader) -> int:
    """Correctly classified seeds of ``loader`` (dropout off)."""
    model.eval()
    correct = 0
    for _, _, blocks in loader:
        logits = model(blocks, blocks[0].srcdata["feat"].float())
        correct += int((logits.argmax(1) == blocks[-1].dstdata["label"]).sum())
    return correct


def _sum(values: list[float], parallel: bool) -> list[float]:
    if not parallel:
        return [float(v) for v in values]
    import torch.distributed as tdist

    total = torch.tensor(values, dtype=torch.float64)
    tdist.all_reduce(total)
    return total.tolist()
