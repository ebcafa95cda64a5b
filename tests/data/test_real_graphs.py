"""The six real graphs (Planetoid Cora/Citeseer, GraphData Amazon/Coauthor): counts, structure,
splits, and features against independent references (DGL's own Planetoid parser, SciPy)."""

from __future__ import annotations

import collections
import hashlib
import os
import pickle
import shutil

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import SHARED_DATA

from dgl_zerocopy.data import DatasetError, load_dataset
from dgl_zerocopy.data.graphdata import GRAPHDATA_FILES, TRAIN_PER_CLASS, VAL_PER_CLASS
from dgl_zerocopy.data.planetoid import PLANETOID_FILES, restricted_load

PLANETOID_DIR = SHARED_DATA / "planetoid"
GRAPHDATA_DIR = SHARED_DATA / "graphdata"
needs_data = pytest.mark.skipif(not SHARED_DATA.is_dir(), reason=f"real datasets not present at {SHARED_DATA}")

# nodes, directed edges after symmetrisation (self-loops and duplicates dropped), features, classes
# (data README; the Amazon graphs store one direction, so their edge counts are the symmetrised ones,
# checked independently against SciPy below).
EXPECTED = {
    "cora": (2708, 10556, 1433, 7),
    "citeseer": (3327, 9104, 3703, 6),
    "amazon-computers": (13752, 491722, 767, 10),
    "amazon-photo": (7650, 238162, 745, 8),
    "coauthor-cs": (18333, 163788, 6805, 15),
    "coauthor-physics": (34493, 495924, 8415, 5),
}
PLANETOID_SPLITS = {"cora": (140, 500, 1000), "citeseer": (120, 500, 1000)}
# The three largest (seconds each to load and check) in the slow tier; Cora, Citeseer (Planetoid's
# reader) and Amazon Photo (GraphData's) keep both readers checked in the fast tier.
LARGE = {"amazon-computers", "coauthor-cs", "coauthor-physics"}


def by_size(names) -> list:
    return [pytest.param(n, marks=pytest.mark.slow) if n in LARGE else n for n in names]


@pytest.fixture(scope="module")
def loaded():
    """Each dataset loaded once per module (Coauthor Physics densifies to 1.16 GB)."""
    cache = {}

    def get(name: str):
        if name not in cache:
            cache[name] = load_dataset(name, root=SHARED_DATA, split_seed=0)
        return cache[name]

    yield get
    cache.clear()


def _edge_keys(indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """dst * n + src of every CSC in-edge, in storage order."""
    n = len(indptr) - 1
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    return dst * n + indices


@needs_data
@pytest.mark.parametrize("name", by_size(EXPECTED))
def test_counts_and_contract(loaded, name):
    data = loaded(name)
    nodes, edges, feats, classes = EXPECTED[name]
    assert (data.num_nodes, data.num_edges, data.features.shape[1], data.num_classes) == (nodes, edges, feats, classes)
    assert data.features.shape == (nodes, feats) and data.features.dtype == np.float32 and data.features.flags.c_contiguous
    assert data.indptr.dtype == np.int64 and data.indices.dtype == np.int64 and data.labels.dtype == np.int64
    assert data.indptr[0] == 0 and data.indptr[-1] == edges and np.all(np.diff(data.indptr) >= 0)
    assert data.labels.shape == (nodes,) and data.labels.min() >= 0 and data.labels.max() == classes - 1
    assert np.isfinite(data.features).all()


@needs_data
@pytest.mark.parametrize("name", by_size(EXPECTED))
def test_graph_symmetric_without_self_loops_or_duplicates(loaded, name):
    data = loaded(name)
    n = data.num_nodes
    keys = _edge_keys(data.indptr, data.indices)
    assert np.all(np.diff(keys) > 0), "in-edges must be sorted by (dst, src) with no duplicate"
    dst, src = np.divmod(keys, n)
    assert not np.any(src == dst), "self-loops must be dropped (the config adds them)"
    assert np.array_equal(np.sort(src * n + dst), keys), "every edge must exist in both directions"


@needs_data
@pytest.mark.parametrize("name", by_size(EXPECTED))
def test_splits_disjoint_sorted_and_sized(loaded, name):
    data = loaded(name)
    splits = (data.train_idx, data.val_idx, data.test_idx)
    for s in splits:
        assert s.dtype == np.int64 and np.all(np.diff(s) > 0) and s.min() >= 0 and s.max() < data.num_nodes
    together = np.concatenate(splits)
    assert len(np.unique(together)) == len(together), "splits overlap"
    if name in PLANETOID_SPLITS:
        assert tuple(len(s) for s in splits) == PLANETOID_SPLITS[name]
        assert np.array_equal(data.train_idx, np.arange(PLANETOID_SPLITS[name][0]))
    else:
        counts = [np.bincount(data.labels[s], minlength=data.num_classes) for s in (data.train_idx, data.val_idx)]
        assert np.all(counts[0] == TRAIN_PER_CLASS) and np.all(counts[1] == VAL_PER_CLASS)
        assert len(together) == data.num_nodes, "every node not in train or val is a test node"


@needs_data
@pytest.mark.parametrize("name", by_size(["amazon-photo", "amazon-computers"]))
def test_random_split_reproducible_per_seed(loaded, name):
    first = loaded(name)  # split_seed 0
    again = load_dataset(name, root=SHARED_DATA, split_seed=0)
    other = load_dataset(name, root=SHARED_DATA, split_seed=1)
    assert np.array_equal(first.train_idx, again.train_idx) and np.array_equal(first.val_idx, again.val_idx)
    assert not np.array_equal(first.train_idx, other.train_idx)
    assert not np.array_equal(first.val_idx, other.val_idx)
    assert np.array_equal(first.features, other.features), "only the split depends on the seed"


def _dgl_planetoid(name: str, tmp_path):
    """DGL's own parser of the same files, offline: DGL looks in <raw_dir>/<name>_<sha1(url)[:8]>/
    for ind.<name>.*, with name cora_v2 for Cora (see the data README), and downloads nothing then."""
    dgl = pytest.importorskip("dgl")
    from dgl.data.citation_graph import CitationGraphDataset
    from dgl.data.utils import _get_dgl_url

    dgl_name = "cora_v2" if name == "cora" else name
    url = _get_dgl_url(CitationGraphDataset._urls[dgl_name])
    folder = tmp_path / f"{dgl_name}_{hashlib.sha1(url.encode()).hexdigest()[:8]}"
    folder.mkdir()
    for suffix in PLANETOID_FILES:
        os.symlink((PLANETOID_DIR / f"ind.{name}.{suffix}").resolve(), folder / f"ind.{dgl_name}.{suffix}")
    cls = dgl.data.CoraGraphDataset if name == "cora" else dgl.data.CiteseerGraphDataset
    return cls(raw_dir=str(tmp_path), verbose=False)[0]


@needs_data
@pytest.mark.parametrize("name", ["cora", "citeseer"])
def test_planetoid_equals_dgl_parser(loaded, name, tmp_path):
    ours = loaded(name)
    ref = _dgl_planetoid(name, tmp_path)
    assert ref.num_nodes() == ours.num_nodes
    np.testing.assert_allclose(ours.features, ref.ndata["feat"].numpy(), rtol=1e-6, atol=0)
    assert np.array_equal(ours.labels, ref.ndata["label"].numpy())
    for idx, mask in ((ours.train_idx, "train_mask"), (ours.val_idx, "val_mask"), (ours.test_idx, "test_mask")):
        assert np.array_equal(idx, np.flatnonzero(ref.ndata[mask].numpy())), mask
    # DGL keeps the files' self-loops (Citeseer has some); the edge sets agree once they are gone.
    u, v = (t.numpy() for t in ref.edges())
    keep = u != v
    assert np.array_equal(np.unique(v[keep] * ours.num_nodes + u[keep]), _edge_keys(ours.indptr, ours.indices))


@needs_data
def test_planetoid_rows_normalised_and_citeseer_isolated_rows_zero(loaded):
    cora, citeseer = loaded("cora"), loaded("citeseer")
    np.testing.assert_allclose(cora.features.sum(1), 1.0, rtol=1e-5)
    sums = citeseer.features.sum(1)
    zero = np.flatnonzero(sums == 0)
    # Citeseer's test range has ids that no test row names: zero features, in no split.
    assert len(zero) > 0 and not np.isin(zero, np.concatenate([citeseer.train_idx, citeseer.val_idx, citeseer.test_idx])).any()
    np.testing.assert_allclose(np.delete(sums, zero), 1.0, rtol=1e-5)


@needs_data
@pytest.mark.parametrize("name", by_size(GRAPHDATA_FILES))
def test_graphdata_equals_scipy(loaded, name):
    """Graph: SciPy's A + A^T with the diagonal removed; features: SciPy's densified CSR divided by
    its row sums, compared in row chunks so that Coauthor Physics needs no second full-size array."""
    ours = loaded(name)
    with np.load(GRAPHDATA_DIR / GRAPHDATA_FILES[name]) as z:
        n = int(z["num_nodes"])
        adj = sp.csr_matrix((np.ones(len(z["adj_indices"])), z["adj_indices"], z["adj_indptr"]), shape=(n, n))
        attr = sp.csr_matrix((z["attr_data"], z["attr_indices"], z["attr_indptr"]), shape=tuple(z["attr_shape"]))
        labels = z["labels"]
    sym = (adj + adj.T).tocsc()
    sym.setdiag(0)
    sym.eliminate_zeros()
    sym.sort_indices()
    assert np.array_equal(ours.indptr, sym.indptr) and np.array_equal(ours.indices, sym.indices)
    assert np.array_equal(ours.labels, labels)
    row_sum = np.asarray(attr.sum(1), dtype=np.float64)
    for start in range(0, n, 4096):
        chunk = attr[start : start + 4096].toarray() / np.maximum(row_sum[start : start + 4096], 1e-300)
        np.testing.assert_allclose(ours.features[start : start + 4096], chunk, rtol=1e-6, atol=0, err_msg=f"rows from {start}")


@needs_data
def test_files_accepted_directly_in_root():
    cora = load_dataset("cora", root=PLANETOID_DIR)
    photo = load_dataset("amazon-photo", root=GRAPHDATA_DIR, split_seed=3)
    assert cora.num_nodes == EXPECTED["cora"][0] and photo.num_nodes == EXPECTED["amazon-photo"][0]


@pytest.mark.parametrize("name", ["cora", "coauthor-cs"])
def test_missing_files_raise_dataset_error(tmp_path, name):
    with pytest.raises(DatasetError) as info:
        load_dataset(name, root=tmp_path)
    msg = str(info.value)
    assert str(tmp_path) in msg
    assert ("ind.cora.graph" in msg) if name == "cora" else ("coauthor_cs.npz" in msg)


def test_cli_reports_missing_dataset_in_one_line(tmp_path, capsys):
    from dgl_zerocopy.cli import main

    assert main(["train", "--dataset", "citeseer", "--data-root", str(tmp_path), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dgl-zerocopy: error:") and "ind.citeseer.x" in err and "\n" not in err


class _Exploit:
    """Pickles into a call of os.system: what a tampered dataset file could hold."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_restricted_unpickler_refuses_other_globals(tmp_path):
    marker = tmp_path / "pwned"
    payload = pickle.dumps({"x": _Exploit(marker)}, protocol=2)
    with pytest.raises(DatasetError, match="posix.system|os.system|nt.system"):
        restricted_load(payload, "evil.pickle")
    assert not marker.exists(), "the payload ran"
    # What the Planetoid graph files hold still loads (the real files are read in the tests above).
    graph = restricted_load(pickle.dumps(collections.defaultdict(list, {0: [1, 2], 1: [0]}), protocol=2))
    assert graph == {0: [1, 2], 1: [0]}


@needs_data
def test_tampered_planetoid_file_is_refused(tmp_path):
    for suffix in PLANETOID_FILES:
        shutil.copy(PLANETOID_DIR / f"ind.cora.{suffix}", tmp_path / f"ind.cora.{suffix}")
    marker = tmp_path / "pwned"
    (tmp_path / "ind.cora.graph").write_bytes(pickle.dumps(_Exploit(marker), protocol=2))
    with pytest.raises(DatasetError, match="ind.cora.graph"):
        load_dataset("cora", root=tmp_path)
    assert not marker.exists()
