"""bench/training/papers_epoch.py's check of a route's first batch against the tables and against the generator.

A batch is checked twice:
- **against the host tables** the route reads (``dataset.features``, the CSC, the labels): each feature row
  equals ``features[input_nodes]`` (float32 exactly; int8 codes within half a code step of their column), each
  label is ``labels[output_nodes]``, each sampled edge is in its destination's CSC column, no in-edge twice;
- **against the generator**, which a damaged table cannot fool: the blocks of
  :func:`~dgl_zerocopy.data.papers_disk.draw_block` that hold the batch's seeds (and a few more of its input
  nodes) are drawn again, and the rows, labels and CSC columns of those nodes must equal what was drawn.

Each check raises ``AssertionError`` naming what differs; :func:`check_batch` returns the counts checked, which
the result row keeps (a check that checked nothing fails too).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

#: Sampled edges read back per batch against the table's CSC (all of them below this count).
MOST_EDGES = 20_000
#: Generator blocks drawn again per batch, besides those of the seeds (each about 0.3 s of one core).
EXTRA_BLOCKS = 2


@dataclass
class Batch:
    """One batch as the checks read it (NumPy, host): global ids and the sampled edges in global ids.

    ``fanouts`` gives, per layer of ``layers``, the fanout its destinations were sampled with (None: at most
    the largest fanout, as PyG's per-hop edge lists are not split by layer here)."""

    seeds: np.ndarray
    input_nodes: np.ndarray
    x: np.ndarray
    y: np.ndarray
    layers: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]  # (src, dst, the layer's destinations, their in-edge counts), global ids
    fanouts: list[int | None]


def _numpy(t) -> np.ndarray:
    return t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)


def dgl_batch(seeds: np.ndarray, blocks: list, x, y, fanouts: list[int]) -> Batch:
    """A :class:`Batch` of a DGL-route batch: DGL blocks or :class:`~dgl_zerocopy.sampling.blocks.DeviceBlock`
    (input layer first, ``fanouts`` in the same order), the input rows ``x`` and the seeds' labels ``y``."""
    nid = "_ID"
    layers = []
    for block in blocks:
        src_ids, dst_ids = _numpy(block.srcdata[nid]).astype(np.int64), _numpy(block.dstdata[nid]).astype(np.int64)
        if hasattr(block, "indptr"):  # our DeviceBlock: CSC over local ids
            counts = np.diff(_numpy(block.indptr).astype(np.int64))
            u, v = _numpy(block.indices).astype(np.int64), np.repeat(np.arange(len(dst_ids)), counts)
        else:  # a DGL block
            u, v = (_numpy(t).astype(np.int64) for t in block.edges())
        layers.append((src_ids[u], dst_ids[v], dst_ids, np.bincount(v, minlength=len(dst_ids))))
    return Batch(seeds, _numpy(blocks[0].srcdata[nid]).astype(np.int64), _numpy(x), _numpy(y), layers, list(fanouts))


def pyg_batch(batch, fanouts: list[int]) -> Batch:
    """A :class:`Batch` of a PyG-route ``Data`` (``n_id``, ``edge_index`` in local ids, ``x``, ``y``, ``batch_size``)."""
    n_id = _numpy(batch.n_id).astype(np.int64)
    edge_index = _numpy(batch.edge_index).astype(np.int64)
    seeds = n_id[: batch.batch_size]
    src, dst = n_id[edge_index[0]], n_id[edge_index[1]]
    dsts, counts = np.unique(dst, return_counts=True)
    return Batch(seeds, n_id, _numpy(batch.x), _numpy(batch.y)[: batch.batch_size], [(src, dst, dsts, counts)], [None if len(fanouts) > 1 else fanouts[0]])


class Regenerated:
    """The generator's blocks drawn again, kept for the routes after the first (the same seeds' blocks)."""

    def __init__(self, layout) -> None:
        self.layout = layout
        self._blocks: dict[int, object] = {}

    def block(self, b: int):
        from dgl_zerocopy.data.papers_disk import draw_block

        if b not in self._blocks:
            self._blocks[b] = draw_block(self.layout, b)
        return self._blocks[b]


def check_batch(dataset, regenerated: Regenerated, batch: Batch, codec=None, max_fanout: int | None = None) -> dict[str, int]:
    """Check ``batch`` against ``dataset``'s tables and against the generator (module docstring); ``codec``: the
    store's int8 :class:`~dgl_zerocopy.store.compression.Codec` where the route reads codes. Returns the counts
    checked: ``rows``, ``rows_regenerated``, ``labels``, ``edges`` and ``edges_regenerated``.

    Raises:
        AssertionError: a row, label or edge differs from the table or the generator, or nothing was checked.
    """
    features, n = dataset.features, dataset.num_nodes
    ids = batch.input_nodes
    if ids.size == 0 or ids.min() < 0 or ids.max() >= n:
        raise AssertionError(f"the batch's input node ids lie outside [0, {n}) or are none")
    if batch.x.shape != (len(ids), features.shape[1]):
        raise AssertionError(f"the batch's rows have shape {batch.x.shape}, {(len(ids), features.shape[1])} expected")
    tolerance = _tolerance(codec, features.shape[1])
    _close(batch.x, np.asarray(features[ids]), tolerance, "the table's rows")
    labels = np.asarray(dataset.labels)
    if not np.array_equal(batch.y.astype(np.int64), labels[batch.seeds]):
        raise AssertionError("a seed's label differs from the table's")
    if not np.array_equal(batch.y.astype(np.int64), regenerated.layout.labels_of(batch.seeds)):
        raise AssertionError("a seed's label differs from the generator's")
    edges = 0
    for (src, dst, dsts, counts), fanout in zip(batch.layers, batch.fanouts):
        edges += _check_layer(dataset, src, dst, dsts, counts, fanout, max_fanout)
    rows_regen, edges_regen = _against_generator(regenerated, batch, tolerance)
    counts = {"rows": int(len(ids)), "rows_regenerated": rows_regen, "labels": int(len(batch.seeds)), "edges": edges, "edges_regenerated": edges_regen}
    if min(counts.values()) == 0:
        raise AssertionError(f"the first batch's check checked nothing of one kind: {counts}")
    return counts


def _tolerance(codec, dim: int) -> np.ndarray:
    """Per column: 0 for float32 rows, half an int8 code step (and a rounding margin) for codes."""
    if codec is None or codec.name != "int8":
        return np.zeros(dim, np.float32)
    return (0.5 * np.abs(codec.scale.numpy()) * 1.001 + 1e-5).astype(np.float32)


def _close(got: np.ndarray, want: np.ndarray, tolerance: np.ndarray, what: str) -> None:
    bad = np.abs(got.astype(np.float32) - want.astype(np.float32)) > tolerance
    if bad.any():
        row, col = (int(i) for i in np.argwhere(bad)[0])
        raise AssertionError(
            f"{bad.any(axis=1).sum()} gathered rows differ from {what} (first: row {row}, column {col}: {got[row, col]} against {want[row, col]})"
        )


def _check_layer(dataset, src: np.ndarray, dst: np.ndarray, dsts: np.ndarray, counts: np.ndarray, fanout: int | None, max_fanout: int | None) -> int:
    """One layer's edges in the table's CSC, none twice, ``min(in-degree, fanout)`` per destination; returns the edges read."""
    indptr, indices = dataset.indptr, dataset.indices
    key = dst * dataset.num_nodes + src
    if np.unique(key).size != key.size:
        raise AssertionError("an in-edge was sampled twice in one layer (the samplers draw without replacement)")
    degree = indptr[dsts + 1] - indptr[dsts]
    cap = fanout if fanout is not None else max_fanout
    if fanout is not None and not np.array_equal(counts, np.minimum(degree, fanout)):
        raise AssertionError(f"a destination has other than min(in-degree, {fanout}) sampled in-edges")
    if cap is not None and (counts > np.minimum(degree, cap)).any():
        raise AssertionError(f"a destination has more sampled in-edges than min(in-degree, {cap})")
    pick = np.random.default_rng(0).permutation(len(src))[:MOST_EDGES]
    for s, d in zip(src[pick].tolist(), dst[pick].tolist()):
        column = indices[indptr[d] : indptr[d + 1]]  # sorted: the generator sorts each column
        at = int(np.searchsorted(column, s))
        if at >= len(column) or int(column[at]) != s:
            raise AssertionError(f"sampled edge {s} -> {d} is not in the table's CSC")
    return int(len(pick))


def _against_generator(regenerated: Regenerated, batch: Batch, tolerance: np.ndarray) -> tuple[int, int]:
    """Rows and in-edges of the batch's nodes in the seeds' blocks (and :data:`EXTRA_BLOCKS` more) against those blocks drawn again."""
    size = regenerated.layout.block_nodes
    blocks = list(dict.fromkeys((batch.seeds // size).tolist()))
    others, count = np.unique(batch.input_nodes // size, return_counts=True)
    blocks += [int(b) for b in others[np.argsort(-count)] if int(b) not in blocks][:EXTRA_BLOCKS]
    rows = edges = 0
    for b in blocks:
        drawn = regenerated.block(b)
        inside = batch.input_nodes // size == b
        local = batch.input_nodes[inside] - drawn.first
        _close(batch.x[inside], drawn.features[local], tolerance, f"the generator's block {b}")
        rows += int(inside.sum())
        starts = np.concatenate([[0], np.cumsum(drawn.degree)])
        for src, dst, _, _ in batch.layers:
            here = dst // size == b
            for s, d in zip(src[here][:MOST_EDGES].tolist(), (dst[here][:MOST_EDGES] - drawn.first).tolist()):
                column = drawn.indices[starts[d] : starts[d + 1]]
                at = int(np.searchsorted(column, s))
                if at >= len(column) or int(column[at]) != s:
                    raise AssertionError(f"sampled edge {s} -> {d + drawn.first} is not one the generator drew")
                edges += 1
    return rows, edges
