"""An ogbn-papers100M-shaped graph generated straight to disk, destination chunk by destination chunk.

:func:`generate_to_disk` writes the folder :mod:`~dgl_zerocopy.data.disk_graph` opens: the in-edge CSC
(int64 ``indptr``, ``indices`` in the narrowest dtype holding the node ids), labels, splits and features
(int8 codes in ``dgl_zerocopy.compress``'s folder layout by default, float32 on request) at any
``fraction`` of papers100M (:func:`papers100m_spec`: 111,059,956 nodes and 3.2 B in-edges at 1.0).

No step needs the whole graph: the CSC is generated a destination block at a time (no sort of all edges),
and every per-node quantity is a function of the node id (no node-sized table), so peak memory is a
few chunks' worth whatever the size. The graph (a :class:`~dgl_zerocopy.data.synthetic.SyntheticSpec`):

- **classes** (skewed sizes, as :func:`~dgl_zerocopy.data.synthetic.generate` draws them) occupy ranges of
  positions ``[class_start[c], class_start[c + 1])``; node ``v`` sits at position ``(a * v + b) mod n``
  (an affine bijection from the seed), so a node's class is arithmetic and the classes are scattered over ids;
- **in-degrees** follow a power law (Pareto with exponent ``power_law_exponent - 1``, floored, capped),
  whose scale is solved so that the expected degree is ``avg_degree``;
- **sources** are homophilous, as in the in-memory generator: with probability ``homophily`` a source
  of the destination's class, else of a uniform class; within a class, rank ``k`` is drawn with weight
  ``(k + 1) ** -(1 / (exponent - 1))`` (the rank-ordered Chung-Lu weights: a power law of out-degrees);
  self-loops and repeated sources of one destination are dropped, so columns are sorted and distinct;
- **features** are noisy class centroids (``centroid[label] + noise * N(0, 1)``); int8 codes use a fixed
  per-column range (the centroids' range widened by ``5 * noise``: a value beyond it, about 6 in 10
  million, is clipped to the end code), written with the repository's encoder;
- **splits**: each node is train/val/test with probability ``train_frac``/``val_frac``/``test_frac``.

Draws come from ``numpy.random.default_rng([seed, stream, block])`` per block of ``block_nodes``
destinations: the graph depends on the spec and ``block_nodes`` only, never on ``chunk_nodes`` (the memory
knob: a multiple of blocks generated and written at a time). The folder is written under a temporary name
and renamed into place at the end; partial folders of dead writers are removed by the next run.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..store.cache_files import partial_prefix, sweep_partials
from ..store.compression.encode import encode_int8, int8_params
from ..store.host_files import replace_dir
from .disk_check import record_generated
from .disk_graph import FORMAT, META, NpyAppender
from .synthetic import PAPERS100M, SyntheticSpec

__all__ = ["papers100m_spec", "generate_to_disk", "existing_graph", "ExistingGraphError", "generate_arrays", "GraphLayout", "FEATURE_FORMATS"]

log = logging.getLogger(__name__)

FEATURE_FORMATS = ("int8", "fp32")
BLOCK_NODES = 1 << 16  # destinations per random stream: part of the graph's definition
CHUNK_NODES = 1 << 18  # destinations generated and written at a time: memory only
MAX_IN_DEGREE = 50_000
_EDGES, _FEATURES, _SPLITS = 1, 2, 3  # stream ids
_CLIP_SIGMAS = 5.0


def papers100m_spec(fraction: float = 1.0, seed: int = 0, feat_dim: int = PAPERS100M["feat_dim"]) -> SyntheticSpec:
    """ogbn-papers100M's shape at ``fraction`` of its nodes (1.0: 111,059,956 nodes; the average
    in-degree, 29.1, stays, so the edges scale with the nodes: about 3.23 B at 1.0)."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], but got {fraction}")
    return SyntheticSpec.papers100m_like(num_nodes=max(1_000, round(PAPERS100M["nodes"] * fraction)), feat_dim=feat_dim, seed=seed)


@dataclass(frozen=True)
class GraphLayout:
    """What every block needs to know of the whole graph, all O(classes): class ranges, the node
    bijection, the degree law's scale, the centroids and the int8 map."""

    spec: SyntheticSpec
    block_nodes: int
    class_start: np.ndarray  # int64 [C + 1]
    mul: int  # position = (mul * node + add) mod n
    add: int
    inv: int  # node = inv * (position - add) mod n
    degree_scale: float
    max_degree: int
    centroids: np.ndarray  # float32 [C, dim]
    scale: np.ndarray  # int8 map per column
    offset: np.ndarray

    @classmethod
    def of(cls, spec: SyntheticSpec, block_nodes: int = BLOCK_NODES) -> GraphLayout:
        n, c = spec.num_nodes, spec.num_classes
        if n * n >= 2**63:
            raise ValueError(f"num_nodes must be below 3e9 (int64 position arithmetic), but got {n}")
        if block_nodes < 1:
            raise ValueError(f"block_nodes must be positive, but got {block_nodes}")
        rng = np.random.default_rng([spec.seed, 0])
        weight = 1.0 / np.arange(1, c + 1) ** 0.8  # the in-memory generator's class skew
        sizes = np.maximum(2, np.floor(weight / weight.sum() * n)).astype(np.int64)
        sizes[0] += n - sizes.sum()  # the largest class absorbs the rounding
        class_start = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        mul = int(rng.integers(n // 3, n)) if n > 3 else 1
        while math.gcd(mul, n) != 1:
            mul += 1
        add = int(rng.integers(0, n))
        max_degree = int(min(MAX_IN_DEGREE, (n - 1) // 2))
        centroids = rng.standard_normal((c, spec.feat_dim)).astype(np.float32)
        spread = _CLIP_SIGMAS * spec.noise
        scale, offset = int8_params(centroids.min(axis=0).astype(np.float64) - spread, centroids.max(axis=0).astype(np.float64) + spread, "minmax")
        alpha = spec.power_law_exponent - 1.0
        layout = cls(spec, block_nodes, class_start, mul % n, add, pow(mul % n, -1, n), _solve_degree_scale(spec.avg_degree, alpha, max_degree), max_degree, centroids, scale, offset)  # fmt: skip
        # Dropping repeated sources (hubs drawn twice by one column) and self-loops trims the mean
        # (4-5 % at papers100M's shape): block 0, drawn as a pilot, gives the share kept, and the
        # degree law aims that much higher.
        pilot = draw_block(layout, 0, features=False)
        kept = len(pilot.indices) / max(1.0, float(pilot.drawn))
        if 0.0 < kept < 1.0:
            object.__setattr__(layout, "degree_scale", _solve_degree_scale(min(spec.avg_degree / kept, max_degree / 2), alpha, max_degree))
        return layout

    @property
    def num_blocks(self) -> int:
        return -(-self.spec.num_nodes // self.block_nodes)

    @property
    def index_dtype(self) -> np.dtype:
        return np.dtype(np.int32) if self.spec.num_nodes - 1 <= np.iinfo(np.int32).max else np.dtype(np.int64)

    def labels_of(self, nodes: np.ndarray) -> np.ndarray:
        position = (nodes * self.mul + self.add) % self.spec.num_nodes
        return np.searchsorted(self.class_start, position, side="right") - 1

    def nodes_at(self, position: np.ndarray) -> np.ndarray:
        return ((position - self.add) % self.spec.num_nodes) * self.inv % self.spec.num_nodes


def _solve_degree_scale(mean: float, alpha: float, cap: int) -> float:
    """``x_m`` with ``E[min(floor(X), cap)] = mean`` for ``X ~ Pareto(alpha, x_m)`` (bisection; the
    expectation is ``sum_k P(X >= k)`` for ``k = 1 .. cap``)."""
    k = np.arange(1, cap + 1, dtype=np.float64)
    lo, hi = 1e-6, float(mean)
    for _ in range(80):
        mid = (lo + hi) / 2
        if np.minimum(1.0, (mid / k) ** alpha).sum() < mean:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass
class Block:
    """One block's arrays: the CSC columns of nodes ``[first, first + len(degree))``."""

    first: int
    degree: np.ndarray  # int64 per destination
    indices: np.ndarray  # sources, column by column, sorted within a column
    labels: np.ndarray
    split: np.ndarray  # int8: 0 train, 1 val, 2 test, -1 none
    features: np.ndarray  # float32 rows
    drawn: int = 0  # edges drawn before repeats and self-loops were dropped


def draw_block(layout: GraphLayout, block: int, features: bool = True) -> Block:
    """Block ``block``'s destinations, edges, labels, splits and (float32) features, from its own streams."""
    spec, n = layout.spec, layout.spec.num_nodes
    first = block * layout.block_nodes
    dst = np.arange(first, min(first + layout.block_nodes, n), dtype=np.int64)
    labels = layout.labels_of(dst)
    rng = np.random.default_rng([spec.seed, _EDGES, block])
    alpha = spec.power_law_exponent - 1.0
    raw = layout.degree_scale * (1.0 - rng.random(len(dst))) ** (-1.0 / alpha)
    degree = np.minimum(np.floor(raw), layout.max_degree).astype(np.int64)
    local = np.repeat(np.arange(len(dst), dtype=np.int64), degree)
    drawn = len(local)
    same = rng.random(len(local)) < spec.homophily
    cls = np.where(same, labels[local], rng.integers(0, spec.num_classes, len(local)))
    del same
    start, size = layout.class_start[cls], layout.class_start[cls + 1] - layout.class_start[cls]
    del cls
    rank = _power_law_rank(rng.random(len(local)), size, 1.0 / alpha)
    src = layout.nodes_at(start + rank)
    del start, size, rank
    key = local * n + src
    key = key[src != dst[local]]
    key.sort()  # by column, then source (a sort and a mask: np.unique's hash path is 10x slower here)
    key = key[np.concatenate([[True], key[1:] != key[:-1]])]  # repeats and self-loops dropped
    del src, local
    column = key // n
    degree = np.bincount(column, minlength=len(dst)).astype(np.int64)
    indices = (key - column * n).astype(layout.index_dtype)
    del key, column
    split = _draw_split(np.random.default_rng([spec.seed, _SPLITS, block]), len(dst), spec)
    rows = _draw_features(np.random.default_rng([spec.seed, _FEATURES, block]), layout, labels) if features else np.empty((0, spec.feat_dim), np.float32)
    return Block(first, degree, indices, labels.astype(np.int64), split, rows, drawn)


def _power_law_rank(u: np.ndarray, size: np.ndarray, beta: float) -> np.ndarray:
    """Ranks ``k`` in ``[0, size)`` with density ``(x + 1) ** -beta`` (inverse CDF, ``beta`` < 1)."""
    e = 1.0 - beta
    x = (1.0 + u * ((size + 1.0) ** e - 1.0)) ** (1.0 / e) - 1.0
    return np.minimum(x.astype(np.int64), size - 1)


def _draw_split(rng: np.random.Generator, count: int, spec: SyntheticSpec) -> np.ndarray:
    u = rng.random(count)
    edges = np.cumsum([spec.train_frac, spec.val_frac, spec.test_frac])
    split = np.searchsorted(edges, u, side="right").astype(np.int8)
    split[split == 3] = -1
    return split


def _draw_features(rng: np.random.Generator, layout: GraphLayout, labels: np.ndarray) -> np.ndarray:
    rows = rng.standard_normal((len(labels), layout.spec.feat_dim), dtype=np.float32)
    rows *= np.float32(layout.spec.noise)
    rows += layout.centroids[labels]
    return rows


def int8_codes(layout: GraphLayout, rows: np.ndarray) -> np.ndarray:
    """float32 feature rows -> the int8 codes written (``rows`` is overwritten)."""
    return encode_int8(rows, layout.scale, layout.offset, "minmax")


def generate_arrays(spec: SyntheticSpec, block_nodes: int = BLOCK_NODES, features: str = "fp32") -> dict[str, np.ndarray]:
    """The whole graph in memory, in one go (the reference the chunked writer must equal; small
    graphs only): ``indptr``, ``indices``, ``labels``, the splits and ``features`` (float32 or int8 codes)."""
    _check_features(features)
    layout = GraphLayout.of(spec, block_nodes)
    blocks = [draw_block(layout, b) for b in range(layout.num_blocks)]
    degree = np.concatenate([b.degree for b in blocks])
    split = np.concatenate([b.split for b in blocks])
    rows = np.concatenate([b.features for b in blocks])
    return {
        "indptr": np.concatenate([[0], np.cumsum(degree)]).astype(np.int64),
        "indices": np.concatenate([b.indices for b in blocks]),
        "labels": np.concatenate([b.labels for b in blocks]),
        "train_idx": np.flatnonzero(split == 0).astype(np.int64),
        "val_idx": np.flatnonzero(split == 1).astype(np.int64),
        "test_idx": np.flatnonzero(split == 2).astype(np.int64),
        "features": int8_codes(layout, rows) if features == "int8" else rows,
    }


def _check_features(features: str) -> None:
    if features not in FEATURE_FORMATS:
        raise ValueError(f"features must be one of {', '.join(FEATURE_FORMATS)}, but got {features!r}")


class ExistingGraphError(ValueError):
    """``out`` holds a finished graph generated with other parameters than asked for.

    Attributes:
        out: the folder.
        differences: ``(key, there, asked)`` for each parameter that differs (a key of the spec,
            ``block_nodes`` or ``feature_format``).
    """

    def __init__(self, out: Path, differences: list[tuple[str, object, object]]) -> None:
        self.out = out
        self.differences = differences
        super().__init__(self.message("pass overwrite=True to replace it"))

    def message(self, fix: str) -> str:
        """The error's line with ``fix`` (how the caller's interface replaces a graph: ``overwrite=True``, ``--overwrite``)."""

        def value(key: str, v: object) -> str:
            share = f" (fraction {v / PAPERS100M['nodes']:.4g})" if key == "num_nodes" and isinstance(v, int) else ""
            return f"{v:,}{share}" if isinstance(v, int) and not isinstance(v, bool) else f"{v!r}"

        said = "; ".join(f"{key} {value(key, there)} where {value(key, asked)} was asked" for key, there, asked in self.differences)
        return f"{str(self.out)!r} holds a graph generated with other parameters ({said}); {fix}, or choose another folder"


def existing_graph(out: str | os.PathLike, spec: SyntheticSpec, *, features: str = "int8", block_nodes: int = BLOCK_NODES) -> Path | None:
    """``out`` where it holds a finished graph generated from ``spec`` with ``features`` and ``block_nodes`` (what
    :func:`generate_to_disk` would write there), ``None`` where it holds no finished graph.

    Raises:
        ExistingGraphError: ``out`` holds a finished graph of other parameters, or one whose record is unreadable.
    """
    out = Path(out)
    if not (out / META).is_file():
        return None
    asked = {**json.loads(json.dumps(asdict(spec))), "block_nodes": block_nodes, "feature_format": features}
    try:
        meta = json.loads((out / META).read_text())
        there = {**meta["spec"], "block_nodes": meta["block_nodes"], "feature_format": meta["feature_format"]}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ExistingGraphError(out, [(META, f"unreadable ({type(e).__name__})", "a graph's record")]) from None
    differences = [(key, there.get(key), value) for key, value in asked.items() if there.get(key) != value]
    if differences:
        raise ExistingGraphError(out, differences)
    return out


def generate_to_disk(
    out: str | os.PathLike,
    spec: SyntheticSpec,
    *,
    features: str = "int8",
    block_nodes: int = BLOCK_NODES,
    chunk_nodes: int = CHUNK_NODES,
    progress: bool = True,
    overwrite: bool = False,
) -> Path:
    """Generate ``spec``'s graph into folder ``out`` (layout: :mod:`~dgl_zerocopy.data.disk_graph`) and
    return it. ``chunk_nodes`` (rounded up to whole blocks) bounds the memory; it never changes the graph.
    A finished ``out`` generated with the same parameters is kept (returned as it is) unless ``overwrite``; one
    generated with others raises :class:`ExistingGraphError`; anything else at ``out`` is refused."""
    _check_features(features)
    out = Path(out)
    if not overwrite and existing_graph(out, spec, features=features, block_nodes=block_nodes) is not None:
        log.info("%s holds a finished graph of these parameters already: kept (overwrite=True generates it again)", out)
        return out
    if out.exists() and not (out / META).is_file() and not (out.is_dir() and not any(out.iterdir())):
        raise ValueError(f"out={str(out)!r} exists and is not a generated graph (or an empty folder); choose a new folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    swept = sweep_partials(out.parent)
    if swept:
        log.info("removed %d partial folder(s) of interrupted runs: %s", len(swept), ", ".join(p.name for p in swept))
    layout = GraphLayout.of(spec, block_nodes)
    per_chunk = max(1, -(-chunk_nodes // block_nodes))
    tmp = Path(tempfile.mkdtemp(prefix=partial_prefix(out.name), dir=out.parent))
    try:
        meta = _write(tmp, layout, features, per_chunk, progress)
        record_generated(tmp, meta)  # one check_csc pass over the files written; open_disk_graph then skips it
        (tmp / META).write_text(json.dumps(meta, indent=1) + "\n")  # written last
        if out.is_dir() and not any(out.iterdir()):
            out.rmdir()
        replace_dir(tmp, out, marker=META)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _write(tmp: Path, layout: GraphLayout, features: str, per_chunk: int, progress: bool) -> dict:
    from tqdm.auto import tqdm

    spec = layout.spec
    started = time.perf_counter()
    dim = spec.feat_dim
    files = {
        "indptr": NpyAppender(tmp / "indptr.npy", np.int64),
        "indices": NpyAppender(tmp / "indices.npy", layout.index_dtype),
        "labels": NpyAppender(tmp / "labels.npy", np.int64),
        "train_idx": NpyAppender(tmp / "train_idx.npy", np.int64),
        "val_idx": NpyAppender(tmp / "val_idx.npy", np.int64),
        "test_idx": NpyAppender(tmp / "test_idx.npy", np.int64),
    }
    if features == "int8":
        (tmp / "features").mkdir()
        files["features"] = NpyAppender(tmp / "features" / "codes.npy", np.int8, (dim,))
    else:
        files["features"] = NpyAppender(tmp / "features.npy", np.float32, (dim,))
    try:
        files["indptr"].append(np.zeros(1, np.int64))
        edges = 0
        bar = tqdm(total=spec.num_nodes, unit=" nodes", unit_scale=True, desc=f"generating {spec.num_nodes:,} nodes", disable=not progress)
        with bar:
            for first_block in range(0, layout.num_blocks, per_chunk):
                blocks = [draw_block(layout, b) for b in range(first_block, min(first_block + per_chunk, layout.num_blocks))]
                edges = _write_chunk(files, layout, blocks, edges, features)
                bar.update(sum(len(b.labels) for b in blocks))
                bar.set_postfix(edges=f"{edges:,}", refresh=False)
        for f in files.values():
            f.close()
    except BaseException:
        for f in files.values():
            f.abandon()
        raise
    if features == "int8":
        np.save(tmp / "features" / "scale.npy", layout.scale)
        np.save(tmp / "features" / "offset.npy", layout.offset)
        codec_meta = {"format": 1, "codec": "int8", "axis": "column", "method": "minmax", "shape": [spec.num_nodes, dim], "source": None}
        (tmp / "features" / "compression.json").write_text(json.dumps(codec_meta, indent=1) + "\n")
    return {
        "format": FORMAT,
        "name": "papers100m-like",
        "spec": asdict(spec),
        "block_nodes": layout.block_nodes,
        "num_nodes": spec.num_nodes,
        "num_edges": edges,
        "index_dtype": str(layout.index_dtype),
        "num_classes": spec.num_classes,
        "feat_dim": dim,
        "features": "features" if features == "int8" else "features.npy",
        "feature_format": features,
        "num_train": files["train_idx"].rows,
        "num_val": files["val_idx"].rows,
        "num_test": files["test_idx"].rows,
        "generate_seconds": round(time.perf_counter() - started, 3),
    }


def _write_chunk(files: dict, layout: GraphLayout, blocks: list[Block], edges: int, features: str) -> int:
    """Append one chunk of blocks to every file; returns the edges written so far."""
    degree = np.concatenate([b.degree for b in blocks])
    files["indptr"].append(edges + np.cumsum(degree))
    files["indices"].append(np.concatenate([b.indices for b in blocks]))
    files["labels"].append(np.concatenate([b.labels for b in blocks]))
    for b in blocks:
        for code, name in enumerate(("train_idx", "val_idx", "test_idx")):
            files[name].append(b.first + np.flatnonzero(b.split == code))
        files["features"].append(int8_codes(layout, b.features) if features == "int8" else b.features)
    return edges + int(degree.sum())
