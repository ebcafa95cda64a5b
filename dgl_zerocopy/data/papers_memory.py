"""An ogbn-papers100M-shaped graph generated straight into host memory, on all cores, with no disk round trip.

The graph is :mod:`~dgl_zerocopy.data.papers_disk`'s, bit for bit: the same
:class:`~dgl_zerocopy.data.papers_disk.GraphLayout`, and each block of ``block_nodes`` destinations drawn by
:func:`~dgl_zerocopy.data.papers_disk.draw_block` from its own random streams. Blocks are independent, so a pool of
threads draws them in any order (NumPy's generators, sorts and element-wise passes release the GIL) and the
arrays depend on the spec and ``block_nodes`` only, never on the number of workers.

Where the arrays live:
- the float32 feature table in a :class:`~dgl_zerocopy.store.huge_pages.HostTable` (2 MB pages where the
  kernel gives them: a GPU reading its rows zero-copy translates fewer pages), each block's rows written
  into their place by the worker that drew them;
- the in-edge CSC (int64 ``indptr`` and ``indices``: :class:`~dgl_zerocopy.data.GraphDataset`'s contract, one
  dtype for both as DGL requires), labels and splits as NumPy arrays. Each block's sources are kept until all blocks are drawn, then copied into one
  ``indices`` array: the peak is twice the edge array, never the features twice.

At 25 % of papers100M (27.8 M nodes, about 0.8 B edges, 128 columns): 14.2 GB of features, 6.5 GB of
indices.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ..store.huge_pages import HostTable
from .base import GraphDataset
from .papers_disk import BLOCK_NODES, GraphLayout, draw_block
from .synthetic import SyntheticSpec

__all__ = ["PapersInMemory", "generate_in_memory", "default_workers"]

log = logging.getLogger(__name__)


def default_workers() -> int:
    """The cores this process may run on (its affinity mask where the platform tells it, else the CPU count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@dataclass
class PapersInMemory:
    """A generated graph held in host memory; close it (or use it as a context manager) to unmap its features.

    Attributes:
        dataset: the graph as a :class:`~dgl_zerocopy.data.GraphDataset` (``features`` is :attr:`table`'s array).
        layout: the generator's layout (class ranges, node bijection, centroids): what regenerates any block.
        table: the host table behind ``dataset.features`` (float32, ``num_nodes x feat_dim``).
        seconds: wall time of the generation.
        workers: threads that drew the blocks.
    """

    dataset: GraphDataset
    layout: GraphLayout
    table: HostTable
    seconds: float
    workers: int

    def close(self) -> None:
        """Unmap the feature table (``dataset.features`` and views of it must be gone first: see
        :meth:`HostTable.close <dgl_zerocopy.store.huge_pages.HostTable.close>`). Idempotent."""
        self.dataset = None  # drops our view of the table
        self.table.close()

    def __enter__(self) -> PapersInMemory:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.dataset = None
        self.table.__exit__(exc_type, exc, tb)  # on an error, a view still alive is a warning, not a second error


def generate_in_memory(spec: SyntheticSpec, *, block_nodes: int = BLOCK_NODES, workers: int | None = None, pages: str = "huge") -> PapersInMemory:
    """Generate ``spec``'s papers100M-shaped graph (:func:`~dgl_zerocopy.data.papers_disk.papers100m_spec`) into host memory.

    Args:
        spec: the graph's shape and seed.
        block_nodes: destinations per random stream, part of the graph's definition (the default is
            :func:`~dgl_zerocopy.data.papers_disk.generate_to_disk`'s).
        workers: threads drawing blocks (default: :func:`default_workers`); the arrays do not depend on it.
        pages: the feature table's pages, ``"huge"`` or ``"small"`` (:class:`~dgl_zerocopy.store.huge_pages.HostTable`).

    Returns:
        A :class:`PapersInMemory`: the dataset (int64 CSC, sorted distinct sources per column), equal to
        :func:`~dgl_zerocopy.data.papers_disk.generate_arrays` of the same spec and ``block_nodes`` (whose
        ``indices`` are the narrowest dtype holding the ids: the same values).

    Raises:
        ValueError: ``workers`` below 1, or what :class:`~dgl_zerocopy.data.papers_disk.GraphLayout` and
            :class:`~dgl_zerocopy.store.huge_pages.HostTable` refuse.
        OSError: the feature table could not be mapped.
    """
    workers = default_workers() if workers is None else workers
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive integer, but got {workers!r}")
    started = time.perf_counter()
    layout = GraphLayout.of(spec, block_nodes)
    n, dim = spec.num_nodes, spec.feat_dim
    table = HostTable((n, dim), np.float32, pages=pages)
    try:
        dataset = _fill(layout, table.array, workers)
    except BaseException:
        table.close()
        raise
    seconds = time.perf_counter() - started
    log.info("generated %s in %.1f s on %d threads", dataset.summary(), seconds, workers)
    return PapersInMemory(dataset, layout, table, seconds, workers)


def _fill(layout: GraphLayout, features: np.ndarray, workers: int) -> GraphDataset:
    """Draw every block on ``workers`` threads (features written into ``features`` in place), then assemble the CSC."""

    def draw(b: int):
        block = draw_block(layout, b)
        features[block.first : block.first + len(block.labels)] = block.features
        return block.degree, block.indices, block.labels, block.split

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="papers-generate") as pool:
        parts = list(pool.map(draw, range(layout.num_blocks)))  # in block order, whatever order they finish in
        degree = np.concatenate([p[0] for p in parts])
        indptr = np.zeros(len(degree) + 1, np.int64)
        np.cumsum(degree, out=indptr[1:])
        indices = np.empty(int(indptr[-1]), np.int64)
        starts = indptr[np.arange(layout.num_blocks) * layout.block_nodes]

        def place(b: int) -> None:
            part = parts[b][1]
            indices[starts[b] : starts[b] + len(part)] = part
            parts[b] = (None, None, parts[b][2], parts[b][3])  # this block's sources are in place: freed

        list(pool.map(place, range(layout.num_blocks)))
    labels = np.concatenate([p[2] for p in parts])
    split = np.concatenate([p[3] for p in parts])
    train, val, test = (np.flatnonzero(split == code).astype(np.int64) for code in (0, 1, 2))
    return GraphDataset("papers100m-like", indptr, indices, features, labels, train, val, test, layout.spec.num_classes)
