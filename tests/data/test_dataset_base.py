"""GraphDataset helpers and the dataset registry's errors (no files needed)."""

import numpy as np
import pytest

from dgl_zerocopy.data import REAL_DATASETS, DatasetError, GraphDataset, load_dataset


def _tiny() -> GraphDataset:
    # in-edges (CSC): node 0 <- 1, 2; node 1 <- 1 (a self-loop already); node 2 <- none
    indptr = np.array([0, 2, 3, 3], dtype=np.int64)
    indices = np.array([1, 2, 1], dtype=np.int64)
    ids = np.arange(3, dtype=np.int64)
    return GraphDataset("tiny", indptr, indices, np.eye(3, dtype=np.float32), ids, ids[:1], ids[1:2], ids[2:], 3)


def test_with_self_loops_adds_exactly_one_per_node():
    data = _tiny().with_self_loops()
    edges = {(int(d), int(s)) for d in range(3) for s in data.indices[data.indptr[d] : data.indptr[d + 1]]}
    assert edges == {(0, 0), (0, 1), (0, 2), (1, 1), (2, 2)}
    assert data.num_edges == 5
    assert data.indices.dtype == np.int64 and data.indptr.dtype == np.int64
    assert np.all(np.diff(data.indptr) >= 1)


@pytest.mark.parametrize("name", REAL_DATASETS)
def test_real_dataset_without_root_names_the_flag(name):
    with pytest.raises(DatasetError, match="--data-root"):
        load_dataset(name)
