"""DistDGL with the zero-copy gather: features of the local partition gathered through a
FeatureStore, remote rows pulled over DGL's RPC, batches prefetched on a thread.

- :func:`partition_dataset` / :func:`load_partition_info`: DGL's ``partition_graph`` on a dataset,
  with the id mapping back to the original nodes;
- :class:`DistFeatureSource`: rows of a ``DistTensor`` for global ids, local/remote counted;
- :class:`DistLoader`: ``DistNodeDataLoader`` batches with features and labels, prefetched;
- :func:`connect` / :func:`train_dist`: join a DistDGL job (server, trainer, standalone) and train;
- :func:`launch_local`: servers and trainers on 127.0.0.1, with :mod:`.single_host`'s two fixes;
- :class:`Watchdog` / :class:`ServerLostError`: a lost server fails the trainers within seconds.

Importing this package does not import DGL's distributed module's state: nothing connects until
:func:`connect` (or ``dgl.distributed.initialize``) is called.
"""

from .loader import BatchStats, DistLoader
from .local_cluster import ClusterError, LocalJob, launch_local, trainer_threads
from .partition import PartitionInfo, load_partition_info, partition_dataset
from .single_host import install, install_from_env, installed, remove_segments
from .source import DistFeatureSource, RowCounts
from .train import connect, train_dist
from .watchdog import ServerLostError, Watchdog, exit_now

__all__ = [
    "BatchStats",
    "ClusterError",
    "DistFeatureSource",
    "DistLoader",
    "LocalJob",
    "PartitionInfo",
    "RowCounts",
    "ServerLostError",
    "Watchdog",
    "connect",
    "exit_now",
    "install",
    "install_from_env",
    "installed",
    "launch_local",
    "load_partition_info",
    "partition_dataset",
    "remove_segments",
    "train_dist",
    "trainer_threads",
]
