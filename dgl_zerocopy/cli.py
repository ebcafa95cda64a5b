"""The ``dgl-zerocopy`` command: ``train``, ``info``, ``bench``, ``generate`` and the distributed ``partition`` and ``launch-local``.

User mistakes (unknown names, malformed values, bad config files) print one line saying what is wrong and what is allowed, and exit with code 2,
without a traceback. Ctrl-C prints ``dgl-zerocopy: interrupted`` and exits with code 130; ``train`` and ``launch-local`` do the same on SIGTERM (what
``timeout``, ``kill`` and Slurm send) and SIGHUP (a closed terminal), with code 128 + the signal's number (143, 129), after stopping its processes and
removing its temporary folder. A ``train --nproc`` rank killed by a signal ends the job with one line naming the rank and the signal, code 1. A
feature file (``--feature-storage``) truncated, rewritten, replaced or removed while ``train`` reads it ends the run with one line, code 1 (a job that
failed while it ran); under ``--nproc`` a rank's own error of these kinds (and a refused config) gives the line and code of one process.
``partition``, ``launch-local`` and ``train`` on the DGL route run on DGL: where it is not installed, they print one line naming the extra that brings
it (``pip install "dgl-zerocopy[dgl]"``) and exit with code 2; ``train`` says so before any dataset is generated, and names the PyG route
(``--frontend pyg``) as the other way. ``train --config`` takes a YAML file or the name of a config shipped with the package (``--config cora-gcn``).
``generate`` onto a folder holding a graph made with other parameters refuses, naming ``--overwrite``; with the same parameters it keeps the graph
(one log line).
"""

from __future__ import annotations

import argparse
import logging
import runpy
import sys
import warnings
from pathlib import Path

from ._extras import MissingExtraError, import_dgl, install_hint
from .data import DATASETS, HETERO_DATASETS, DatasetError
from .training.config import (
    FEATURE_SOURCES,
    RENAMED_KEYS,
    ConfigError,
    RenamedSettingWarning,
    build_config,
    parse_fanouts,
    read_yaml,
    shipped_configs,
    warn_renamed,
)
from .training.models import MODELS
from .training.signals import Terminated, signals_unwind

log = logging.getLogger("dgl_zerocopy")

BENCH_DIR = Path(__file__).resolve().parent.parent / "bench"
#: ``dgl-zerocopy bench NAME``: each name's script in the checkout's bench/, whose folders group them by
#: question (bench/README.md): gathering, sampler, tiers, training, pcie.
BENCHMARKS = {
    "gather": "gathering/gather.py",
    "epoch": "training/epoch.py",
    "cpu_gather": "gathering/cpu_gather.py",
    "pcie_model": "pcie/pcie_model.py",
    "scaling": "training/scaling.py",
    "accuracy": "training/accuracy.py",
    "pyg_accuracy": "training/pyg_accuracy.py",
    "ddp": "training/ddp.py",
    "compression": "gathering/compression.py",
    "cache": "gathering/cache.py",
    "dist": "training/dist.py",
    "sampling": "sampler/sampling.py",
    "pcie_sampling": "pcie/pcie_sampling.py",
    "snapshot": "sampler/snapshot.py",
    "sampling_accuracy": "sampler/sampling_accuracy.py",
    "storage": "tiers/storage.py",
    "pyg_epoch": "training/pyg_epoch.py",
    "scale": "training/scale.py",
    "scale_sampling": "training/scale_sampling.py",
}


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


class _RenamedFlag(argparse.Action):
    """A flag under its former name (:data:`RENAMED_KEYS`): stores its value as the new flag does, with one warning."""

    def __init__(self, option_strings, dest, new_flag: str, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.new_flag = new_flag

    def __call__(self, parser, namespace, values, option_string=None):
        warn_renamed(option_string, self.new_flag)
        setattr(namespace, self.dest, values)


class _Parser(argparse.ArgumentParser):
    """argparse, but errors are one line: ``dgl-zerocopy: error: ...`` and exit 2."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"dgl-zerocopy: error: {message}\n")


def _fanouts(text: str) -> list[int]:
    try:
        return parse_fanouts(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dgl-zerocopy", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    t = sub.add_parser("train", help="train a GNN and print accuracy and a timing breakdown")
    t.add_argument(
        "--config",
        help=f"YAML file with the same keys as these flags (flags override it), or a shipped config's name: {', '.join(shipped_configs()) or 'none here'}",
    )
    t.add_argument(
        "--frontend",
        help="dgl (DGL's samplers and blocks, the default) or pyg (GraphSAGE of PyG's SAGEConv fed by dgl_zerocopy.pyg.NeighborLoader, "
        'on the same data and settings; needs pip install "dgl-zerocopy[pyg]")',
    )
    t.add_argument("--dataset", help=f"one of: {', '.join(DATASETS)} (default synthetic)")
    t.add_argument("--num-nodes", type=int, help="size of a generated dataset: synthetic's nodes, hetero-synthetic's papers (authors: 2/5 of them)")
    t.add_argument("--data-root", help="folder holding the real datasets (cora, coauthor-cs, ogbn-products, ...)")
    t.add_argument("--self-loop", action="store_const", const=True, help="add a self-loop to every node (GCN's A + I)")
    t.add_argument("--model", help=f"one of: {', '.join(MODELS)} (default sage; rgcn, and only rgcn, on a heterograph: {', '.join(HETERO_DATASETS)})")
    t.add_argument("--fanouts", type=_fanouts, help="neighbours sampled per layer, e.g. 15,10,5 (-1: all)")
    t.add_argument("--batch-size", type=int)
    t.add_argument("--eval-batch-size", type=int)
    t.add_argument("--eval-every", type=int, help="evaluate every N epochs and after the last (default 1)")
    t.add_argument("--hidden", type=int)
    t.add_argument("--dropout", type=float)
    t.add_argument("--epochs", type=int)
    t.add_argument("--lr", type=float)
    t.add_argument("--weight-decay", type=float)
    t.add_argument("--seed", type=int)
    t.add_argument("--device", help="auto, cpu or cuda (default auto)")
    t.add_argument("--feature-source", help=f"one of: {', '.join(FEATURE_SOURCES)} (default cpu)")
    t.add_argument("--prefetch", type=int, help="batches prepared ahead on a background thread (0: serial; default 2)")
    t.add_argument(
        "--sampler",
        help="cpu (DGL's sampler, the default), gpu (ours, on the GPU: use_uva=True; needs CUDA) or snapshot "
        "(training batches from a cached sample of each node's in-edges, refreshed in part each epoch; on the CPU)",
    )
    t.add_argument("--graph-placement", help="with --sampler gpu: pinned (the graph's CSC pinned in place, the default) or device (copied to GPU memory)")
    t.add_argument("--snapshot-size", type=int, help="with --sampler snapshot: in-edges kept per node, at least the largest fanout (default: twice it)")
    t.add_argument("--snapshot-refresh", type=float, help="with --sampler snapshot: share of the snapshot redrawn each epoch, in [0, 1] (default 0.25)")
    t.add_argument(
        "--feature-compression", help="host features stored as none, fp16, bf16 or int8 (per-column min/max), decoded to float32 in the gather (default none)"
    )
    t.add_argument("--feature-cache", help="hot rows kept in device memory: a share of the rows (10%%) or a size (512MiB, 2GB, bytes); 0: none (default)")
    t.add_argument(
        "--feature-storage",
        metavar="PATH",
        help="leave the features in a file and read their rows from it (docs/storage.md): a .npy or a folder written by "
        "dgl_zerocopy.compress(), one row per node; auto: the dataset's own features (the OGB cache's features.npy, else written "
        "once under $DGL_ZEROCOPY_CACHE/features); with --host-buffer; feature sources cpu, zerocopy, dgl-storage",
    )
    t.add_argument(
        "--host-buffer",
        metavar="SIZE",
        help="with --feature-storage: host memory for the rows, a share of the table's rows (25%%, its bookkeeping on top: 100%% holds "
        "the table) or a size (2GiB, bytes); it must hold a training and an evaluation batch's rows (checked before the first step)",
    )
    t.add_argument(
        "--host-buffer-policy",
        help="with --feature-storage: which rows the host buffer keeps: static (default: the degree sampling follows), "
        "dynamic (CLOCK over recent batches), hybrid (a static quarter, the rest CLOCK), lru, clock or fifo",
    )
    for old, new in RENAMED_KEYS.items():  # the former names, hidden from --help
        t.add_argument(_flag(old), dest=new, action=_RenamedFlag, new_flag=_flag(new), help=argparse.SUPPRESS)
    t.add_argument(
        "--cache-policy",
        help="which rows the cache holds: degree (default: the degree sampling follows, "
        "out-degree for DGL's in-edge sampling), in_degree, out_degree or presample",
    )
    t.add_argument(
        "--nproc", type=int, help="data-parallel processes (DDP): one per GPU on CUDA, gloo ranks on the CPU; --batch-size stays the global batch (default 1)"
    )
    t.add_argument("--no-progress", action="store_true", help="no progress bars")
    t.add_argument(
        "--dist",
        metavar="OUT",
        help="train on DistDGL partitions written by `partition` (standalone for one partition; under DGL's launch tool or `launch-local` for more)",
    )
    t.add_argument("--ip-config", help="DGL's file of server addresses for --dist (default $DGL_IP_CONFIG, set by the launchers)")

    sub.add_parser("info", help="versions, CUDA/NVRTC availability, pinned-memory limit")

    g = sub.add_parser("generate", help="write an ogbn-papers100M-shaped graph to a folder, at a fraction of its size (docs/benchmarks.md)")
    g.add_argument("out", help="the folder to write (made under a temporary name and renamed into place when whole)")
    g.add_argument("--fraction", type=float, default=0.01, help="of papers100M's 111,059,956 nodes and 3.2 B in-edges (default 0.01)")
    g.add_argument("--features", choices=("int8", "fp32"), default="int8", help="int8 codes in a compressed folder (default) or a float32 .npy")
    g.add_argument("--seed", type=int, default=0, help="the graph's seed (default 0): the same seed gives the same bytes")
    g.add_argument("--chunk-nodes", type=int, default=1 << 18, help="destinations generated at a time: memory only, never the graph (default 262144)")
    g.add_argument("--overwrite", action="store_true", help="generate again where a finished graph is already")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")

    p = sub.add_parser("partition", help="partition a dataset for DistDGL (DGL's partition_graph) into a folder")
    p.add_argument("--dataset", required=True, help=f"one of: {', '.join(DATASETS)}")
    p.add_argument("--data-root", help="folder holding the real datasets (all but synthetic)")
    p.add_argument("--num-nodes", type=int, help="node count of the generated dataset (synthetic only)")
    p.add_argument("--self-loop", action="store_true", help="add a self-loop to every node first (GCN's A + I)")
    p.add_argument("--seed", type=int, default=0, help="split seed of the GraphData graphs (default 0)")
    p.add_argument("--parts", type=int, required=True, help="number of partitions (machines)")
    p.add_argument("--out", required=True, help="empty or new folder for the partitions")
    p.add_argument("--method", choices=("metis", "random"), default="metis", help="node assignment (default metis)")
    p.add_argument("--overwrite", action="store_true", help="replace partitions written there before")

    ll = sub.add_parser("launch-local", help="run `train ... --dist OUT` as DistDGL servers and trainers on 127.0.0.1")
    ll.add_argument("--parts", type=int, required=True, help="partitions in the --dist folder: one server and one trainer each")
    ll.add_argument("--timeout", type=float, help="seconds for the whole job (default: no limit)")
    ll.add_argument("--log-dir", help="keep the servers' and other trainers' logs here (default: a temporary folder)")
    ll.add_argument("argv", nargs=argparse.REMAINDER, help="-- train ... --dist OUT")

    b = sub.add_parser("bench", help="run a benchmark from the checkout's bench/ folder")
    b.add_argument("name", choices=BENCHMARKS, help="which benchmark")
    b.add_argument("args", nargs=argparse.REMAINDER, help="its own flags (see `dgl-zerocopy bench NAME --help`)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one ``dgl-zerocopy`` command as the console script does (``train``, ``info``, ``generate``, ``partition``, ``launch-local``, ``bench``).

    Args:
        argv: the command line without the program's name (default: ``sys.argv[1:]``).

    Returns:
        The exit status: 0 done; 1 a job that failed while it ran; 2 a user mistake, printed as one line (a bad config or dataset, a
        missing extra); 130 Ctrl-C; 128 + the signal's number for SIGTERM and SIGHUP (``train``, ``launch-local``).

    Raises:
        SystemExit: argparse's, for unknown arguments (status 2) and ``--help`` (status 0).
    """
    with warnings.catch_warnings():
        if not sys.warnoptions:  # Python hides DeprecationWarnings outside __main__; a former flag or key name is the user's to see
            warnings.simplefilter("default", RenamedSettingWarning)
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    args = _parser().parse_args(_glue_negative_values(sys.argv[1:] if argv is None else argv))
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        if args.command == "train":
            return _train(args)
        if args.command == "bench":
            return _bench(args.name, args.args)
        if args.command == "partition":
            from .dist.commands import partition

            _homogeneous_only(args.dataset, "partition")
            import_dgl("dgl-zerocopy partition")
            return partition(args)
        if args.command == "launch-local":
            from .dist.commands import launch_local

            import_dgl("dgl-zerocopy launch-local")
            with signals_unwind():
                return launch_local(args)
        if args.command == "generate":
            with signals_unwind():
                return _generate(args)
        if args.command == "info":
            from .training.info import environment_report

            print(environment_report())
            return 0
    except (ConfigError, DatasetError, MissingExtraError) as e:
        print(f"dgl-zerocopy: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print("dgl-zerocopy: interrupted", file=sys.stderr)
        return 128 + e.signum if isinstance(e, Terminated) else 130
    return 2


#: Flags whose value may start with '-': ``--fanouts -1,-1`` (every neighbour), and sizes that are then refused in
#: a line of their own (``--host-buffer -5%``) rather than argparse's "expected one argument".
_DASHED_VALUES = ("--fanouts", "--host-buffer", "--host-cache", "--feature-cache")


def _glue_negative_values(argv: list[str]) -> list[str]:
    """``--fanouts -1,-1`` -> ``--fanouts=-1,-1`` (and the other :data:`_DASHED_VALUES`): argparse would read ``-1,-1`` as an unknown option."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1] in _DASHED_VALUES and arg[:1] == "-" and (arg[1:2].isdigit() or arg[1:2] == "."):
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def _train(args: argparse.Namespace) -> int:
    flags = {k: v for k, v in vars(args).items() if k not in ("command", "config", "no_progress", "dist", "ip_config")}
    cfg = build_config(read_yaml(args.config) if args.config else {}, flags)
    if cfg.frontend == "pyg":
        from .training.pyg_train import import_pyg

        if args.dist is not None:
            raise ConfigError("train --dist trains on DistDGL's route; drop --frontend pyg")
        import_pyg("dgl-zerocopy train --frontend pyg")  # one line naming the extra, before the dataset loads
    else:
        _dgl_route_needs_dgl(dist=args.dist is not None)  # before any dataset is generated or loaded
    if args.dist is not None:
        _homogeneous_only(cfg.dataset, "train --dist")
        if cfg.sampler in ("gpu", "snapshot"):
            raise ConfigError(f"train --dist samples with DistDGL's sampler on the CPU; drop --sampler {cfg.sampler}")
        if cfg.feature_storage is not None:
            raise ConfigError("train --dist reads the features DistDGL's servers hold; drop --feature-storage and --host-buffer")
        return _train_dist(cfg, args)
    with signals_unwind():
        return _train_local(cfg, args)


def _dgl_route_needs_dgl(dist: bool) -> None:
    """Where DGL is not installed, ``train`` on the DGL route (``--frontend dgl``, the default) stops in one line
    that says what to do: install the ``[dgl]`` extra, or (not with ``--dist``, which is DistDGL) train on the PyG
    route, whose extra is named where PyG is missing too."""
    import importlib.util

    try:
        import_dgl("train on the DGL route")  # training imports it anyway; a DGL that is there but broken says why
        return
    except MissingExtraError:
        pass
    if dist:
        raise MissingExtraError(f"train --dist runs on DistDGL, and DGL is not installed: {install_hint('dgl')}", name="dgl")
    pyg = "--frontend pyg" if importlib.util.find_spec("torch_geometric") is not None else f"--frontend pyg after {install_hint('pyg')}"
    raise MissingExtraError(
        f"train on the DGL route (--frontend dgl, the default) needs DGL, which is not installed: {install_hint('dgl')}, or train on the PyG route with {pyg}",
        name="dgl",
    )


def _train_local(cfg, args: argparse.Namespace) -> int:
    """``train`` in this process, or in ``--nproc`` DDP ranks."""
    from torch.multiprocessing.spawn import ProcessExitedException

    from .data import FeatureFile, HeteroSpec, SyntheticSpec, load_dataset
    from .data.feature_file import attach_feature_file
    from .store.storage import BufferFullError, StorageChangedError
    from .store.table_input import human_size
    from .training.train import best_epoch, resolve_device, timing_table

    device = resolve_device(cfg.device, cfg.feature_source, cfg.nproc, cfg.sampler)  # fail before the dataset loads
    _placement_is_used(cfg, device)
    stored = FeatureFile.open(cfg.feature_storage) if cfg.feature_storage not in (None, "auto") else None  # a bad file: before the dataset loads
    spec = SyntheticSpec(num_nodes=cfg.num_nodes) if cfg.num_nodes else SyntheticSpec()
    hetero = HeteroSpec.scaled(cfg.num_nodes) if cfg.num_nodes else None  # --num-nodes: papers
    auto = cfg.feature_storage == "auto"
    dataset = load_dataset(cfg.dataset, synthetic=spec, root=cfg.data_root, split_seed=cfg.seed, hetero=hetero, features_on_storage=auto)
    if stored is not None:
        dataset = attach_feature_file(dataset, stored)  # the dataset's own table is dropped here
    if cfg.self_loop:
        dataset = dataset.with_self_loops()
    print(dataset.summary())
    compressed = f", features stored as {cfg.feature_compression}" if cfg.feature_compression != "none" else ""
    on_storage = ""
    if isinstance(dataset.features, FeatureFile):
        on_storage = f", features on storage in {str(dataset.features.path)!r} ({human_size(dataset.features.nbytes)}), host buffer {cfg.host_buffer} ({cfg.host_buffer_policy or 'static'})"
    cached = f", cache {cfg.feature_cache} ({cfg.cache_policy})" if cfg.feature_cache != "0" else ""
    per_type = " per edge type" if cfg.dataset in HETERO_DATASETS else ""
    frontend = " of PyG's SAGEConv through dgl_zerocopy.pyg.NeighborLoader" if cfg.frontend == "pyg" else ""
    sampled = f", sampled on the GPU (graph {cfg.graph_placement})" if cfg.sampler == "gpu" else ""
    if cfg.sampler == "snapshot":
        from .training.sources import SamplerRequest

        request = SamplerRequest.of(cfg)
        size = request.snapshot_size or 2 * max(cfg.fanouts)
        # Our loader keeps the snapshot in GPU memory on a CUDA device; DGL's loader (sources dgl, dgl-storage) samples on the CPU.
        on_gpu = " in GPU memory" if device.type == "cuda" and cfg.feature_source not in ("dgl", "dgl-storage") else ""
        sampled = f", sampled from a snapshot{on_gpu} of {size} in-edges per node, refresh {request.refresh:g} per epoch (evaluation: the full graph)"
    print(
        f"model {cfg.model}{frontend}, fanouts {cfg.fanouts}{per_type}, batch {cfg.batch_size}, feature source {cfg.feature_source}{compressed}{on_storage}{cached}{sampled}"
    )
    if cfg.nproc > 1:
        from .training.ddp import share_dataset

        backend = "nccl, one GPU each" if device.type == "cuda" else "gloo on the CPU"
        print(
            f"{cfg.nproc} processes (DDP, {backend}), batch {-(-cfg.batch_size // cfg.nproc)} per process; "
            f"the lines below are rank 0's, loss and accuracy over all ranks"
        )
        dataset = share_dataset(dataset)  # the arrays move to shared memory once; the private copies are freed here
    try:
        history = _as_one_process(_route(cfg), cfg, dataset, on_epoch=_print_epoch, progress=not args.no_progress)
    except ProcessExitedException as e:  # a rank died without a Python error (a signal): launch's one line
        print(f"dgl-zerocopy: error: {e}", file=sys.stderr)
        return 1
    except BufferFullError as e:  # a batch larger than the batches sampled before the first step (host_budget)
        raise ConfigError(
            f"host_buffer {cfg.host_buffer!r} is too small for this run: {e}; raise --host-buffer, or lower --batch-size/--eval-batch-size"
        ) from None
    except StorageChangedError as e:  # the feature file truncated, rewritten, replaced or removed under the run: it failed while it ran
        print(f"dgl-zerocopy: error: {e}; the run stopped: train again once the file is complete (write a new one, then rename it into place)", file=sys.stderr)
        return 1
    best = best_epoch(history)
    print("\nstage times per epoch (s); wait = time the training step waited for its batch")
    print(timing_table(history))
    print(f"\nfinal test accuracy {history[-1].test_acc:.4f} (best val {best.val_acc:.4f} at epoch {best.epoch}, test {best.test_acc:.4f})")
    return 0


def _route(cfg):
    """The training loop of ``cfg.frontend``: the DGL route's, or the PyG route's (which imports PyG)."""
    if cfg.frontend == "pyg":
        from .training.pyg_train import train_pyg

        return train_pyg
    from .training.train import train

    return train


def _as_one_process(call, *args, **kwargs):
    """``call(*args, **kwargs)``, where a ``--nproc`` rank's own error of ours (a config, dataset, host buffer or
    feature file error), which reaches this process inside a ``ProcessRaisedException`` (``.error``), is raised
    again as itself: the same line and exit code as without ``--nproc``. Other errors keep the rank's traceback."""
    from torch.multiprocessing.spawn import ProcessRaisedException

    from .store.storage import BufferFullError, StorageChangedError

    try:
        return call(*args, **kwargs)
    except ProcessRaisedException as e:
        error = getattr(e, "error", None)
        if isinstance(error, (ConfigError, DatasetError, BufferFullError, StorageChangedError, MissingExtraError)):
            raise error from None
        raise


def _placement_is_used(cfg, device) -> None:
    """``--graph-placement`` with ``--sampler snapshot`` places the graph only where our loader samples the
    snapshot on the GPU (a CUDA device; the config refuses DGL's loader): refused on the CPU, before the dataset loads."""
    from .loading.gpu_sampling import stand_in

    if cfg.sampler == "snapshot" and "graph_placement" in cfg.model_fields_set and device.type != "cuda" and stand_in() is None:
        raise ConfigError(
            f"graph_placement {cfg.graph_placement!r} places the graph for sampling on the GPU, but the snapshot is sampled on the CPU "
            f"here (device {device.type!r}); drop --graph-placement, or train on a CUDA device"
        )


def _train_dist(cfg, args: argparse.Namespace) -> int:
    """``train --dist OUT``: one process of a DistDGL job (server, trainer, or standalone)."""
    from .dist.commands import train as train_dist
    from .training.train import best_epoch, timing_table

    history = train_dist(cfg, args.dist, args.ip_config, on_epoch=_print_epoch, progress=not args.no_progress)
    best = best_epoch(history)
    print("\nstage times per epoch (s); wait = time the training step waited for its batch")
    print(timing_table(history))
    print(f"\nfinal test accuracy {history[-1].test_acc:.4f} (best val {best.val_acc:.4f} at epoch {best.epoch}, test {best.test_acc:.4f})")
    return 0


def _homogeneous_only(dataset: str, command: str) -> None:
    """DistDGL partitions here hold homogeneous graphs: a heterograph is refused in one line."""
    if dataset in HETERO_DATASETS:
        raise ConfigError(
            f"`{command}` takes homogeneous datasets (DistDGL partitions of one node type), and {dataset!r} is a heterograph; train it without --dist"
        )


def _print_epoch(stats) -> None:
    """One line per epoch (a module-level function: with --nproc it runs in rank 0's process)."""
    print(stats.line(), flush=True)


def _generate(args: argparse.Namespace) -> int:
    from .data.disk_graph import open_disk_graph
    from .data.papers_disk import ExistingGraphError, existing_graph, generate_to_disk, papers100m_spec

    try:
        spec = papers100m_spec(args.fraction, seed=args.seed)
        if not args.overwrite and existing_graph(args.out, spec, features=args.features) is not None:
            log.info("%s holds a graph of these parameters already: kept (--overwrite generates it again)", args.out)
            out = Path(args.out)
        else:
            out = generate_to_disk(
                args.out, spec, features=args.features, chunk_nodes=args.chunk_nodes, progress=not args.no_progress, overwrite=args.overwrite
            )
    except ExistingGraphError as e:
        raise ConfigError(e.message("add --overwrite to replace it")) from None
    except ValueError as e:
        raise ConfigError(str(e)) from None
    graph = open_disk_graph(out)
    print(
        f"{out}: {graph.num_nodes:,} nodes, {graph.num_edges:,} in-edges ({graph.indices.dtype} indices), {graph.feat_dim}-dim "
        f"{graph.meta['feature_format']} features, {graph.num_classes} classes, train {len(graph.train_idx):,}; "
        f"{graph.nbytes_on_disk() / 1e9:.2f} GB on disk, generated in {graph.meta['generate_seconds']:.0f} s"
    )
    return 0


def _bench(name: str, args: list[str]) -> int:
    script = BENCH_DIR / BENCHMARKS[name]
    if not script.is_file():
        raise ConfigError(f"benchmark {str(script)!r} not found: benchmarks run from a source checkout (git clone, then make install)")
    sys.argv = [str(script), *args]
    sys.path.insert(0, str(script.parent))  # as `python bench/FOLDER/NAME.py` has it; the script adds bench/ for common.py
    runpy.run_path(str(script), run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
