"""dgl_zerocopy.data.graph_check: a CSC or an edge_index is refused, naming the tensor, the position, the value and
the fix, and a verdict is remembered until the tensor changes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dgl_zerocopy.data import graph_check
from dgl_zerocopy.data.graph_check import check_csc, check_edge_index


@pytest.fixture(autouse=True)
def _fresh_verdicts():
    graph_check.forget_checks()
    yield
    graph_check.forget_checks()


def good():
    return torch.tensor([0, 2, 3, 3]), torch.tensor([1, 2, 0])


@pytest.mark.parametrize("as_numpy", [False, True])
def test_a_valid_csc_passes_as_tensors_and_as_arrays(as_numpy):
    indptr, indices = good()
    if as_numpy:
        indptr, indices = indptr.numpy(), indices.numpy().astype(np.int32)
    check_csc(indptr, indices, 3, num_dst_nodes=3)


@pytest.mark.parametrize(
    "indptr, indices, error, words",
    [
        ([0, 2, 1, 3], [1, 2, 0], ValueError, "decreases at position 2 (2 then 1)"),
        ([1, 2, 3, 3], [1, 2, 0], ValueError, "starts at 1, not 0"),
        ([0, 2, 3, 4], [1, 2, 0], ValueError, "ends at 4, but indices holds 3"),
        ([0, 2, 3, 3], [1, 5, 0], IndexError, "id 5 at position 1 is out of range for 3 nodes"),
        ([0, 2, 3, 3], [1, -1, 0], IndexError, "id -1 at position 1"),
    ],
)
def test_a_bad_csc_is_refused_naming_the_position_and_the_value(indptr, indices, error, words):
    with pytest.raises(error) as caught:
        check_csc(torch.tensor(indptr), torch.tensor(indices), 3, name="products", fix="regenerate it")
    assert words in str(caught.value)
    assert "products" in str(caught.value) and "regenerate it" in str(caught.value)


def test_a_decrease_across_a_chunk_boundary_is_found(monkeypatch):
    monkeypatch.setattr(graph_check, "_CHUNK", 4)
    indptr = torch.tensor([0, 1, 2, 3, 4, 2, 5, 6, 7])  # the drop 4 -> 2 is between chunks [0, 4] and [4, 8]
    with pytest.raises(ValueError, match="decreases at position 5"):
        check_csc(indptr, torch.zeros(7, dtype=torch.int64), 1)


def test_a_bad_id_past_the_first_chunk_is_named_at_its_own_position(monkeypatch):
    monkeypatch.setattr(graph_check, "_CHUNK", 4)
    indices = torch.zeros(10, dtype=torch.int64)
    indices[9] = 3
    with pytest.raises(IndexError, match="id 3 at position 9"):
        check_csc(torch.tensor([0, 10]), indices, 3)


def test_the_wrong_node_count_and_dtypes_are_refused():
    indptr, indices = good()
    with pytest.raises(ValueError, match="4 offsets for 5 nodes"):
        check_csc(indptr, indices, 3, num_dst_nodes=5)
    with pytest.raises(TypeError, match="indices must be an integer"):
        check_csc(indptr, indices.float(), 3)
    with pytest.raises(ValueError, match="1-D"):
        check_csc(indptr, indices.view(1, 3), 3)


def test_a_verdict_holds_until_the_tensor_is_written():
    indptr, indices = good()
    check_csc(indptr, indices, 3)
    assert graph_check._known_good(indices, ("csc", 3, 4))
    indices[1] = 7  # an in-place write bumps the version
    with pytest.raises(IndexError, match="id 7 at position 1"):
        check_csc(indptr, indices, 3)


def test_a_verdict_is_not_reused_for_another_node_count():
    indptr, indices = good()
    check_csc(indptr, indices, 3)
    with pytest.raises(IndexError, match="out of range for 2 nodes"):
        check_csc(indptr, indices, 2)


def test_a_writable_array_is_checked_every_time_and_a_read_only_one_once():
    indptr, indices = (t.numpy().copy() for t in good())
    check_csc(indptr, indices, 3)
    indices[0] = 9  # NumPy has no version counter: a writable array is never taken on trust
    with pytest.raises(IndexError, match="id 9 at position 0"):
        check_csc(indptr, indices, 3)
    indices[0] = 1
    indptr.setflags(write=False)
    indices.setflags(write=False)
    check_csc(indptr, indices, 3)
    assert graph_check._known_good(indices, ("csc", 3, 4))


def test_an_edge_index_out_of_range_names_its_row():
    with pytest.raises(IndexError, match=r"edge_index\[0\] \(sources\): id 1000000000 at position 2"):
        check_edge_index(torch.tensor([[0, 1, 10**9], [1, 2, 0]]), 100)
    with pytest.raises(IndexError, match=r"edge_index\[1\] \(destinations\): id -1 at position 0"):
        check_edge_index(torch.tensor([[0], [-1]]), 100)
    with pytest.raises(ValueError, match=r"shape \[2, num_edges\]"):
        check_edge_index(torch.zeros(3, 4, dtype=torch.long), 100)
    check_edge_index(torch.tensor([[0, 4], [1, 2]]), 5, 3)
