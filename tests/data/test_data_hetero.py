"""The generated heterograph of examples/rgcn_hetero.py: reproducible, well formed, with the label signal it promises."""

from __future__ import annotations

import numpy as np
import pytest

from dgl_zerocopy.data.hetero import HeteroSpec, generate_hetero

SMALL = HeteroSpec(num_papers=3000, num_authors=1000, num_fields=16)


def test_the_same_spec_gives_the_same_graph_and_another_seed_another():
    a, b = generate_hetero(SMALL), generate_hetero(SMALL)
    for key in a.edges:
        assert all(np.array_equal(x, y) for x, y in zip(a.edges[key], b.edges[key]))
    assert all(np.array_equal(a.features[t], b.features[t]) for t in a.features)
    c = generate_hetero(HeteroSpec(num_papers=3000, num_authors=1000, num_fields=16, seed=1))
    assert not np.array_equal(a.labels, c.labels)


def test_the_graph_is_well_formed():
    d = generate_hetero(SMALL)
    assert d.num_nodes == {"author": 1000, "field": 16, "paper": 3000}
    assert set(d.etypes) == {"writes", "written_by", "cites", "cited_by", "has_topic", "topic_of"}
    for (stype, etype, dtype), (src, dst) in d.edges.items():
        assert src.dtype == dst.dtype == np.int64 and len(src) == len(dst) > 0
        assert 0 <= src.min() and src.max() < d.num_nodes[stype] and 0 <= dst.min() and dst.max() < d.num_nodes[dtype], etype
    assert np.array_equal(d.edges[("author", "writes", "paper")][0], d.edges[("paper", "written_by", "author")][1]), "reverses mirror"
    for t, feat in d.features.items():
        assert feat.dtype == np.float32 and feat.shape == (d.num_nodes[t], SMALL.feat_dim)
        assert 0.8 < feat.std() < 1.2, "scaled to unit variance"
    splits = [d.train_idx, d.val_idx, d.test_idx]
    assert [len(s) for s in splits] == [600, 300, 600]
    together = np.concatenate(splits)
    assert len(np.unique(together)) == len(together) and together.max() < 3000
    assert all(np.array_equal(s, np.sort(s)) for s in splits)


def test_the_labels_are_planted_in_the_neighbourhood_more_than_in_the_features():
    d = generate_hetero(SMALL)
    y, k = d.labels, d.num_classes
    src, dst = d.edges[("paper", "cites", "paper")]
    chance = 1 / k
    expected = SMALL.homophily + (1 - SMALL.homophily) * chance
    assert abs((y[src] == y[dst]).mean() - expected) < 0.03
    x = d.features["paper"]

    def nearest_centre_accuracy(h):
        centres = np.stack([h[d.train_idx][y[d.train_idx] == c].mean(0) for c in range(k)])
        return (np.argmin(((h[:, None] - centres[None]) ** 2).sum(-1), 1) == y)[d.test_idx].mean()

    own = nearest_centre_accuracy(x)
    # Each paper's features plus the mean over its in-neighbours of every type (a one-hop aggregate).
    mixed = x.copy()
    for (stype, _, dtype), (src, dst) in d.edges.items():
        if dtype == "paper":
            sums = np.zeros_like(x)
            np.add.at(sums, dst, d.features[stype][src])
            mixed += sums / np.maximum(np.bincount(dst, minlength=len(y)), 1)[:, None]
    hop = nearest_centre_accuracy(mixed)
    assert chance < own < 0.5 and hop > own + 0.2, (own, hop)  # measured: 0.32 and 0.69


def test_to_dgl_carries_the_types_and_data():
    dgl = pytest.importorskip("dgl")
    torch = pytest.importorskip("torch")
    d = generate_hetero(SMALL)
    g = d.to_dgl(idtype=torch.int32)
    assert g.idtype == torch.int32 and set(g.ntypes) == set(d.num_nodes) and len(g.canonical_etypes) == 6
    assert torch.equal(g.nodes["paper"].data["label"], torch.from_numpy(d.labels))
    assert all(g.num_nodes(t) == n for t, n in d.num_nodes.items()) and isinstance(g, dgl.DGLGraph)


@pytest.mark.parametrize(
    "kw,phrase",
    [
        (dict(num_papers=0), "num_papers must be at least 1"),
        (dict(num_fields=4, num_classes=8), "every class needs a field"),
        (dict(homophily=1.5), "homophily"),
        (dict(test_frac=0.9), "sum to at most 1"),
    ],
)
def test_a_bad_spec_is_one_clear_error(kw, phrase):
    with pytest.raises(ValueError, match=phrase):
        HeteroSpec(**kw)
