import numpy as np
import pytest
from conftest import SMALL

from dgl_zerocopy.data import SyntheticSpec, load_dataset
from dgl_zerocopy.data.synthetic import generate

ARRAYS = ("indptr", "indices", "features", "labels", "train_idx", "val_idx", "test_idx")


def test_same_seed_same_arrays():
    a, b = generate(SMALL), generate(SMALL)
    for name in ARRAYS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def test_different_seed_different_arrays():
    a = generate(SMALL)
    b = generate(SyntheticSpec(**{**SMALL.__dict__, "seed": 1}))
    assert not np.array_equal(a.indices, b.indices)
    assert not np.array_equal(a.features, b.features)
    assert not np.array_equal(a.labels, b.labels)


def test_shapes_and_dtypes(small_dataset):
    d = small_dataset
    assert d.features.shape == (SMALL.num_nodes, SMALL.feat_dim) and d.features.dtype == np.float32
    assert d.labels.shape == (SMALL.num_nodes,) and set(np.unique(d.labels)) == set(range(SMALL.num_classes))
    assert d.indptr.shape == (SMALL.num_nodes + 1,) and d.indptr[-1] == len(d.indices)
    assert d.indices.min() >= 0 and d.indices.max() < SMALL.num_nodes
    splits = np.concatenate([d.train_idx, d.val_idx, d.test_idx])
    assert len(np.unique(splits)) == len(splits), "splits overlap"


def test_graph_is_symmetric_without_self_loops(small_dataset):
    d = small_dataset
    dst = np.repeat(np.arange(d.num_nodes), np.diff(d.indptr))
    forward = set(zip(d.indices.tolist(), dst.tolist()))
    assert all((b, a) in forward for a, b in forward)
    assert not np.any(d.indices == dst)


@pytest.mark.slow  # generates the 200k-node default; test_synthetic_presets::test_default_dataset_is_unchanged pins it byte for byte
def test_default_shape_is_products_like():
    """The default graph: ~200k nodes, average degree ~20, heavy-tailed degrees, homophilous edges."""
    d = generate(SyntheticSpec())
    deg = np.diff(d.indptr)
    assert d.num_nodes == 200_000 and d.features.shape[1] == 100 and d.num_classes == 47
    assert 17 <= deg.mean() <= 23
    assert deg.max() > 40 * np.median(deg), "degrees should be heavy-tailed (power law)"
    dst = np.repeat(np.arange(d.num_nodes), deg)
    homophily = np.mean(d.labels[d.indices] == d.labels[dst])
    assert homophily > 0.6


def test_cache_round_trip(tmp_path):
    first = load_dataset("synthetic", synthetic=SMALL, cache=tmp_path)
    folder = tmp_path / SMALL.cache_name()
    assert folder.is_dir() and "numnodes3000" in folder.name and "seed0" in folder.name
    again = load_dataset("synthetic", synthetic=SMALL, cache=tmp_path)
    for name in ARRAYS:
        np.testing.assert_array_equal(getattr(first, name), getattr(again, name))
    assert again.num_classes == first.num_classes


def test_unknown_dataset_names_the_choices():
    with pytest.raises(ValueError, match="choose from: synthetic"):
        load_dataset("nope")


@pytest.mark.parametrize(
    "bad, said",
    [
        (dict(num_nodes=3), "num_nodes must be at least"),
        (dict(homophily=1.5), "homophily must be in"),
        (dict(power_law_exponent=1.5), "power_law_exponent must be > 2"),
        (dict(train_frac=0.9, test_frac=0.5), "sum to at most 1, but got train_frac=0.9"),
        (dict(val_frac=0.0), "must be positive"),
    ],
)
def test_bad_spec_is_rejected(bad, said):
    with pytest.raises(ValueError, match=said):
        SyntheticSpec(**bad)
