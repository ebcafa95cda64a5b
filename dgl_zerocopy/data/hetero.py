"""A generated heterograph (papers, authors, fields of study) with a planted label signal.

Each paper has a class; its features are its class's centre plus strong noise, so features alone
classify it poorly. Its authors, its citations and its fields are drawn from its own class with
probability ``homophily`` (else uniformly), and authors and fields carry their class's centre in
their features too: a model that aggregates over the typed neighbourhood (RGCN) recovers the class
far better than one that reads the paper alone, so accuracy says whether the sampled blocks and
the features served with them are right. Nothing is downloaded; the same spec gives the same graph.

Edge types (each with its reverse, so messages reach every type): ``author -writes-> paper``,
``paper -written_by-> author``, ``paper -cites-> paper``, ``paper -cited_by-> paper``,
``paper -has_topic-> field``, ``field -topic_of-> paper``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._extras import import_dgl
from ..store.host_memory import host_copy
from .base import check_split_fractions

CanonicalEtype = tuple[str, str, str]
NTYPES = ("author", "field", "paper")
RELATIONS = (("author", "writes", "paper", "written_by"), ("paper", "cites", "paper", "cited_by"), ("paper", "has_topic", "field", "topic_of"))


@dataclass(frozen=True)
class HeteroSpec:
    """Sizes and signal of the generated heterograph. ``noise`` is the standard deviation of the
    features' noise around their class centre (whose entries have standard deviation 1), before
    the features are scaled to unit variance. The splits are fractions of the papers. With the
    defaults, a paper's own features give about 37 % accuracy (nearest class centre, 8 classes)."""

    num_papers: int = 20_000
    num_authors: int = 8_000
    num_fields: int = 64
    num_classes: int = 8
    feat_dim: int = 32
    cites_per_paper: int = 4
    authors_per_paper: int = 3
    fields_per_paper: int = 2
    homophily: float = 0.5
    noise: float = 6.0
    train_frac: float = 0.2
    val_frac: float = 0.1
    test_frac: float = 0.2
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("num_papers", "num_authors", "num_fields", "num_classes", "feat_dim", "cites_per_paper", "authors_per_paper", "fields_per_paper"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be at least 1, but got {getattr(self, name)}")
        if self.num_fields < self.num_classes:
            raise ValueError(f"num_fields ({self.num_fields}) must be at least num_classes ({self.num_classes}): every class needs a field")
        if not 0.0 <= self.homophily <= 1.0 or self.noise < 0:
            raise ValueError(f"homophily must be in [0, 1] and noise >= 0, but got homophily={self.homophily}, noise={self.noise}")
        check_split_fractions(self.train_frac, self.val_frac, self.test_frac)

    @classmethod
    def scaled(cls, num_papers: int, seed: int = 0) -> HeteroSpec:
        """The default graph's shape at ``num_papers`` papers: authors two fifths of them (at
        least one), fields and the rest as the defaults. What ``--num-nodes`` means for the
        ``hetero-synthetic`` dataset (and ``--num-papers`` for examples/rgcn_hetero.py)."""
        if int(num_papers) < 1:
            raise ValueError(f"num_papers must be at least 1, but got {num_papers}")
        return cls(num_papers=int(num_papers), num_authors=max(1, int(num_papers) * 2 // 5), seed=seed)


@dataclass(frozen=True)
class HeteroGraphDataset:
    """A node-classification heterograph held in host memory.

    Contract: ``edges[(stype, etype, dtype)] = (src, dst)``, int64 arrays of node ids of those
    types; ``features[ntype]`` a float32 ``(num_nodes[ntype], feat_dim)`` array for every type;
    ``labels`` int64 over the ``target`` type's nodes; the splits are sorted int64 ids of the
    target type.
    """

    name: str
    num_nodes: dict[str, int]
    edges: dict[CanonicalEtype, tuple[np.ndarray, np.ndarray]]
    features: dict[str, np.ndarray]
    labels: np.ndarray
    train_idx: np.ndarray
    val_idx: np.ndarray
    test_idx: np.ndarray
    num_classes: int
    target: str = "paper"

    @property
    def etypes(self) -> list[str]:
        return [key[1] for key in self.edges]

    def to_dgl(self, with_data: bool = True, idtype=None):
        """A ``dgl.heterograph`` of the edges (``idtype``: torch.int64 by default, or torch.int32);
        with ``with_data``, ``ndata["feat"]`` for every type and ``ndata["label"]`` for the target."""
        import torch

        dgl = import_dgl("HeteroGraphDataset.to_dgl")
        data = {key: (torch.from_numpy(src), torch.from_numpy(dst)) for key, (src, dst) in self.edges.items()}
        graph = dgl.heterograph(data, num_nodes_dict=dict(self.num_nodes), idtype=idtype or torch.int64)
        if with_data:
            for ntype, feat in self.features.items():
                graph.nodes[ntype].data["feat"] = torch.from_numpy(feat)
            graph.nodes[self.target].data["label"] = torch.from_numpy(self.labels)
        return graph

    def summary(self) -> str:
        nodes = ", ".join(f"{n} {t}" for t, n in self.num_nodes.items())
        edges = sum(len(src) for src, _ in self.edges.values())
        return f"{self.name}: {nodes}; {edges} edges of {len(self.edges)} types; {self.num_classes} classes of {self.target}"


def generate_hetero(spec: HeteroSpec | None = None) -> HeteroGraphDataset:
    """The heterograph of ``spec`` (the default spec when None): a few seconds at most for the default sizes."""
    spec = spec or HeteroSpec()
    rng = np.random.default_rng(spec.seed)
    k = spec.num_classes
    centres = rng.standard_normal((k, spec.feat_dim)).astype(np.float32)
    classes = {
        "paper": rng.integers(0, k, spec.num_papers),
        "author": rng.integers(0, k, spec.num_authors),
        "field": np.arange(spec.num_fields) % k,  # every class has fields
    }
    members = {ntype: _members(c, k) for ntype, c in classes.items()}
    per_paper = {"author": spec.authors_per_paper, "paper": spec.cites_per_paper, "field": spec.fields_per_paper}
    edges: dict[CanonicalEtype, tuple[np.ndarray, np.ndarray]] = {}
    for stype, etype, dtype, reverse in RELATIONS:
        # Each paper picks its authors, citations and fields; the relation is stored in its own direction.
        other = stype if dtype == "paper" else dtype
        papers = np.repeat(np.arange(spec.num_papers), per_paper[other])
        picked = _pick(rng, classes["paper"][papers], members[other], spec.homophily)
        src, dst = (picked, papers) if dtype == "paper" else (papers, picked)
        edges[(stype, etype, dtype)] = (src, dst)
        edges[(dtype, reverse, stype)] = (dst, src)
    scale = 1.0 / np.sqrt(1.0 + spec.noise**2)  # unit variance per entry
    features = {
        t: host_copy(((centres[classes[t]] + spec.noise * rng.standard_normal((len(classes[t]), spec.feat_dim))) * scale).astype(np.float32)) for t in NTYPES
    }
    order = rng.permutation(spec.num_papers)
    bounds = np.cumsum([int(spec.train_frac * spec.num_papers), int(spec.val_frac * spec.num_papers), int(spec.test_frac * spec.num_papers)])
    train, val, test = (np.sort(part).astype(np.int64) for part in np.split(order[: bounds[2]], bounds[:2]))
    return HeteroGraphDataset(
        name="hetero-synthetic",
        num_nodes={"author": spec.num_authors, "field": spec.num_fields, "paper": spec.num_papers},
        edges=edges,
        features=features,
        labels=classes["paper"].astype(np.int64),
        train_idx=train,
        val_idx=val,
        test_idx=test,
        num_classes=k,
    )


def _members(classes: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(ids sorted by class, first position of each class, count of each class)``."""
    order = np.argsort(classes, kind="stable")
    counts = np.bincount(classes, minlength=k)
    return order, np.concatenate([[0], np.cumsum(counts)[:-1]]), counts


def _pick(rng: np.random.Generator, wanted: np.ndarray, members: tuple[np.ndarray, np.ndarray, np.ndarray], homophily: float) -> np.ndarray:
    """One node per entry of ``wanted`` (a class): of that class with probability ``homophily``
    (uniform within the class), else uniform over all nodes; a class without nodes falls back to uniform."""
    order, start, count = members
    n = len(order)
    same = (rng.random(len(wanted)) < homophily) & (count[wanted] > 0)
    within = start[wanted] + np.floor(rng.random(len(wanted)) * np.maximum(count[wanted], 1)).astype(np.int64)
    anywhere = rng.integers(0, n, len(wanted))
    return np.where(same, order[np.minimum(within, n - 1)], order[anywhere]).astype(np.int64)
