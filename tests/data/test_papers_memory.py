"""The in-memory papers100M-shaped generator: the disk generator's graph, whatever the number of threads."""

from __future__ import annotations

import numpy as np
import pytest

from dgl_zerocopy.data.papers_disk import draw_block, generate_arrays, papers100m_spec
from dgl_zerocopy.data.papers_memory import PapersInMemory, default_workers, generate_in_memory

ARRAYS = ("indptr", "indices", "labels", "train_idx", "val_idx", "test_idx", "features")
BLOCK = 4096  # small blocks: several of them even in a small graph, so that threads share the work


@pytest.fixture(scope="module")
def spec():
    return papers100m_spec(0.0002, seed=3)  # 22,212 nodes: 6 blocks of 4,096


def test_equals_the_reference_generator(spec):
    reference = generate_arrays(spec, block_nodes=BLOCK)
    with generate_in_memory(spec, block_nodes=BLOCK, workers=3) as graph:
        for name in ARRAYS:
            got = getattr(graph.dataset, name)
            assert got.dtype == (np.int64 if name == "indices" else reference[name].dtype), name  # int64: GraphDataset's contract
            np.testing.assert_array_equal(got, reference[name], err_msg=name)
        assert np.shares_memory(graph.dataset.features, graph.table.array)  # the rows were written into the host table
        del got  # a view of the table: the context's close() unmaps it
        assert graph.workers == 3 and graph.seconds > 0


def test_the_same_arrays_on_any_number_of_threads(spec):
    with generate_in_memory(spec, block_nodes=BLOCK, workers=1) as one, generate_in_memory(spec, block_nodes=BLOCK, workers=4) as four:
        for name in ARRAYS:
            np.testing.assert_array_equal(getattr(one.dataset, name), getattr(four.dataset, name), err_msg=name)


def test_another_seed_gives_another_graph(spec):
    other = papers100m_spec(0.0002, seed=4)
    with generate_in_memory(spec, block_nodes=BLOCK, workers=2) as a, generate_in_memory(other, block_nodes=BLOCK, workers=2) as b:
        assert not np.array_equal(a.dataset.features[:100], b.dataset.features[:100])


def test_the_csc_is_sorted_and_distinct_and_a_block_regenerates(spec):
    with generate_in_memory(spec, block_nodes=BLOCK, workers=2) as graph:
        d = graph.dataset
        assert d.indptr[0] == 0 and d.indptr[-1] == d.num_edges and (np.diff(d.indptr) >= 0).all()
        for v in (0, 17, d.num_nodes - 1):
            column = d.indices[d.indptr[v] : d.indptr[v + 1]]
            assert (np.diff(column) > 0).all() and (column != v).all()
        block = draw_block(graph.layout, 2)  # the layout regenerates any block of the table
        np.testing.assert_array_equal(d.features[block.first : block.first + len(block.labels)], block.features)
        del d, column


def test_close_unmaps_and_is_idempotent(spec):
    graph = generate_in_memory(spec, block_nodes=BLOCK, workers=1)
    assert isinstance(graph, PapersInMemory)
    graph.close()
    graph.close()
    assert graph.table.closed


@pytest.mark.parametrize("workers", [0, -1, 1.5, True])
def test_bad_workers_are_refused(spec, workers):
    with pytest.raises(ValueError, match="workers must be a positive integer"):
        generate_in_memory(spec, workers=workers)


def test_default_workers_is_positive():
    assert default_workers() >= 1
