"""The distributed subcommands of ``dgl-zerocopy``: ``partition``, ``train --dist`` and ``launch-local``.

:mod:`dgl_zerocopy.cli` parses the flags and calls these; user mistakes raise ``ConfigError``
(one line, exit code 2).
"""

from __future__ import annotations

import argparse
import sys

from ..training.config import ConfigError, TrainConfig
from .watchdog import ServerLostError, exit_now


def partition(args: argparse.Namespace) -> int:
    """``dgl-zerocopy partition``: load the dataset, partition it with DGL, print where it went."""
    from ..data import SyntheticSpec, load_dataset
    from .partition import check_out, partition_dataset

    if args.parts < 1:
        raise ConfigError(f"--parts must be at least 1, but got {args.parts}")
    try:
        check_out(args.out, args.overwrite)  # before the dataset loads: a bad --out fails at once
    except ValueError as e:
        raise ConfigError(str(e)) from None
    spec = SyntheticSpec(num_nodes=args.num_nodes) if args.num_nodes else SyntheticSpec()
    dataset = load_dataset(args.dataset, synthetic=spec, root=args.data_root, split_seed=args.seed)
    if args.self_loop:
        dataset = dataset.with_self_loops()
    print(dataset.summary())
    try:
        info = partition_dataset(dataset, args.parts, args.out, method=args.method, overwrite=args.overwrite)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    print(f"{info.num_parts} partition(s) of {info.dataset} ({info.method}) in {info.folder}; DGL's config: {info.part_config}")
    return 0


def train(cfg: TrainConfig, part_dir: str, ip_config: str | None, on_epoch, progress: bool = False) -> list:
    """``dgl-zerocopy train --dist OUT`` in this process (server, trainer or standalone); the history.
    A lost server ends the process at once with a one-line error (DGL's exit hook would hang)."""
    from .train import train_dist

    try:
        history, info = train_dist(cfg, part_dir, ip_config=ip_config, on_epoch=on_epoch, progress=progress)
    except FileNotFoundError as e:
        raise ConfigError(str(e)) from None
    except ServerLostError as e:
        exit_now(e)
    print(f"trained on {info.num_parts} partition(s) of {info.dataset} in {info.folder}")
    return history


def launch_local(args: argparse.Namespace) -> int:
    """``dgl-zerocopy launch-local --parts K -- train ... --dist OUT``: servers and trainers on 127.0.0.1."""
    from .local_cluster import ClusterError
    from .local_cluster import launch_local as run
    from .partition import load_partition_info

    command = list(args.argv)
    if command and command[0] == "--":
        command = command[1:]
    if not command or command[0] != "train":
        raise ConfigError(
            f"launch-local runs `train ... --dist OUT` after `--`, but got {' '.join(command) or 'nothing'!r}; "
            f"e.g. dgl-zerocopy launch-local --parts 2 -- train --dist parts/ --epochs 3"
        )
    dist = _flag_value(command, "--dist")
    if dist is None:
        raise ConfigError("the train command after `--` needs --dist OUT, the folder written by `dgl-zerocopy partition`")
    try:
        info = load_partition_info(dist)
    except FileNotFoundError as e:
        raise ConfigError(str(e)) from None
    if args.parts != info.num_parts:
        raise ConfigError(f"--parts {args.parts} but {str(info.folder)!r} holds {info.num_parts} partitions; pass --parts {info.num_parts}")
    if "--no-progress" not in command:
        command.append("--no-progress")
    # SIGTERM/SIGHUP (a scheduler, a closed terminal) unwind like Ctrl-C: cli.main wraps this call
    # in its handler, so the launcher's finally stops every process (exit code 128 + the signal's).
    try:
        job = run([sys.executable, "-m", "dgl_zerocopy.cli", *command], info.part_config, info.num_parts, timeout=args.timeout, log_dir=args.log_dir)
    except ClusterError as e:
        print(f"dgl-zerocopy: error: {e}", file=sys.stderr)
        return 1
    print(f"launch-local: {info.num_parts} server(s) and {info.num_parts} trainer(s) on 127.0.0.1 finished in {job.seconds:.1f} s")
    return 0


def _flag_value(argv: list[str], flag: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None
