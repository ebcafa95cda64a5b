"""The embedded default dataset: an ogbn-products-shaped graph generated from a seed; and
:meth:`SyntheticSpec.papers100m_like`, ogbn-papers100M's shape at a node count that fits one machine.

Degrees follow a power law (Chung-Lu: edge endpoints drawn in proportion to Pareto weights);
edges are homophilous (an endpoint keeps its partner's class with probability ``homophily``);
features are noisy class centroids. Features alone separate the classes only partly, so a GNN
that aggregates neighbours scores clearly higher than a per-node model: accuracy proves training.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

import numpy as np

from ..store.host_memory import host_array
from .base import GraphDataset, check_split_fractions, symmetric_csc

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SyntheticSpec:
    """Size and difficulty of the generated graph. Defaults: ogbn-products' shape at 1/12 scale."""

    num_nodes: int = 200_000
    avg_degree: float = 20.0
    feat_dim: int = 100
    num_classes: int = 47
    homophily: float = 0.8
    noise: float = 2.0
    power_law_exponent: float = 2.5
    train_frac: float = 0.08
    val_frac: float = 0.02
    test_frac: float = 0.10
    seed: int = 0

    def __post_init__(self) -> None:
        if self.num_nodes < 2 * self.num_classes:
            raise ValueError(f"num_nodes must be at least 2 * num_classes = {2 * self.num_classes}, got {self.num_nodes}")
        if not 0.0 < self.avg_degree < self.num_nodes:
            raise ValueError(f"avg_degree must be in (0, num_nodes), got {self.avg_degree}")
        if self.feat_dim < 1 or self.num_classes < 2:
            raise ValueError(f"feat_dim must be >= 1 and num_classes >= 2, got {self.feat_dim} and {self.num_classes}")
        if not 0.0 <= self.homophily <= 1.0:
            raise ValueError(f"homophily must be in [0, 1], got {self.homophily}")
        if self.power_law_exponent <= 2.0:
            raise ValueError(f"power_law_exponent must be > 2 (finite mean degree), got {self.power_law_exponent}")
        check_split_fractions(self.train_frac, self.val_frac, self.test_frac)

    def cache_name(self) -> str:
        """A folder name that carries every parameter, so a changed spec never reuses old arrays."""
        parts = [f"{k}{v:g}" if isinstance(v, float) else f"{k}{v}" for k, v in asdict(self).items()]
        return "synthetic-" + "-".join(p.replace("_", "") for p in parts)

    @classmethod
    def papers100m_like(cls, num_nodes: int = 4_000_000, feat_dim: int = 128, seed: int = 0) -> SyntheticSpec:
        """ogbn-papers100M's shape with fewer nodes: its average degree once bidirected, feature
        width, class count and split fractions (see :data:`PAPERS100M`). ``feat_dim`` may be
        changed for width sweeps (the graph and labels stay the same; the split is redrawn).
        Dropping duplicate edges trims the average degree in small graphs (~23 at 20k nodes, ~27 at
        400k, 28.5 at 4M). At the default 4M nodes: 114M stored edges and a 2 GB feature table;
        generating it took 227 s and 6.8 GB peak memory on a shared 2-core machine."""
        p = PAPERS100M
        return cls(
            num_nodes=num_nodes,
            avg_degree=round(2 * p["edges"] / p["nodes"], 1),  # citations stored both ways
            feat_dim=feat_dim,
            num_classes=p["classes"],
            train_frac=round(p["train"] / p["nodes"], 6),
            val_frac=round(p["val"] / p["nodes"], 6),
            test_frac=round(p["test"] / p["nodes"], 6),
            seed=seed,
        )


# ogbn-papers100M as OGB ships it: directed citation edges, 128-dim features, arXiv-subject labels
# on the ~1.4 % of papers that have one.
PAPERS100M = {"nodes": 111_059_956, "edges": 1_615_685_872, "feat_dim": 128, "classes": 172, "train": 1_207_179, "val": 125_265, "test": 214_338}

# Rows of features drawn per step: bounds the temporaries at one chunk instead of two full tables.
_FEATURE_CHUNK_ROWS = 65_536


def generate(spec: SyntheticSpec = SyntheticSpec()) -> GraphDataset:
    """Generate the dataset deterministically from ``spec.seed`` (same spec, same arrays)."""
    rng = np.random.default_rng(spec.seed)
    n, c = spec.num_nodes, spec.num_classes

    # Class sizes are skewed like real label distributions (a few large classes, a long tail).
    class_weight = 1.0 / np.arange(1, c + 1) ** 0.8
    labels = rng.choice(c, size=n, p=class_weight / class_weight.sum()).astype(np.int64)
    labels[:c] = np.arange(c)  # every class present, even in tiny graphs

    # Chung-Lu weights with a Pareto tail give a power-law degree distribution.
    weight = rng.pareto(spec.power_law_exponent - 1.0, size=n) + 1.0
    # Chung-Lu's condition (expected degree at most sqrt(total degree)) keeps hub pairs from
    # drawing the same edge many times, so the average degree survives de-duplication.
    np.minimum(weight, np.sqrt(n * spec.avg_degree) * weight.mean() / spec.avg_degree, out=weight)
    num_half_edges = int(round(n * spec.avg_degree / 2))  # each undirected edge stored both ways
    src = _draw_proportional(rng, weight, num_half_edges)

    # Homophily: the partner keeps the source's class with probability `homophily`.
    dst_class = np.where(rng.random(num_half_edges) < spec.homophily, labels[src], rng.integers(0, c, num_half_edges))
    dst = _draw_within_class(rng, weight, labels, dst_class)
    del dst_class

    indptr, indices = symmetric_csc(src, dst, n)
    del src, dst

    centroids = rng.standard_normal((c, spec.feat_dim)).astype(np.float32)
    features = _noisy_centroids(rng, centroids, labels, spec.noise)

    perm = rng.permutation(n)
    n_train, n_val, n_test = (int(n * f) for f in (spec.train_frac, spec.val_frac, spec.test_frac))
    train_idx = np.sort(perm[:n_train])
    val_idx = np.sort(perm[n_train : n_train + n_val])
    test_idx = np.sort(perm[n_train + n_val : n_train + n_val + n_test])
    return GraphDataset("synthetic", indptr, indices, features, labels, train_idx, val_idx, test_idx, c)


def _noisy_centroids(rng: np.random.Generator, centroids: np.ndarray, labels: np.ndarray, noise: float, chunk_rows: int = _FEATURE_CHUNK_ROWS) -> np.ndarray:
    """``centroids[labels] + noise * rng.standard_normal((n, dim), dtype=float32)``, bit for bit,
    built in place chunk by chunk: the generator fills the rows in order whatever the chunk size,
    and ``noise * z + centroid`` rounds as ``centroid + noise * z`` does."""
    n, dim = labels.shape[0], centroids.shape[1]
    features = host_array((n, dim), np.float32)  # 2 MB pages by default (store/host_memory.py)
    for start in range(0, n, chunk_rows):
        rows = features[start : start + chunk_rows]
        rng.standard_normal(out=rows, dtype=np.float32)
        rows *= np.float32(noise)
        rows += centroids[labels[start : start + chunk_rows]]
    return features


def _draw_proportional(rng: np.random.Generator, weight: np.ndarray, size: int) -> np.ndarray:
    cdf = np.cumsum(weight)
    return np.searchsorted(cdf, rng.random(size) * cdf[-1], side="right").astype(np.int64)


def _draw_within_class(rng: np.random.Generator, weight: np.ndarray, labels: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """For each entry of ``wanted`` (a class), a node of that class drawn in proportion to ``weight``."""
    order = np.argsort(labels, kind="stable")
    cdf = np.cumsum(weight[order])
    class_start = np.searchsorted(labels[order], np.arange(labels.max() + 2))
    lo = np.where(class_start[wanted] > 0, cdf[class_start[wanted] - 1], 0.0)
    hi = cdf[class_start[wanted + 1] - 1]
    pos = np.searchsorted(cdf, lo + rng.random(wanted.shape[0]) * (hi - lo), side="right")
    pos = np.clip(pos, class_start[wanted], class_start[wanted + 1] - 1)
    return order[pos].astype(np.int64)
