"""The adjacency handed to cuSPARSE: each row's columns sorted, each (row, column) pair once.

The first GPU run (an H200) refused a hetero block's adjacency: ``cusparseCreateCsr(): dimension
mismatch, nnz (12) > matrix size (9)``, a 3x3 relation with repeated edges. On CUDA the block's
CSR is now canonical (:func:`canonical_csr`); here it is checked on the CPU against the plain CSR
and ``index_add``, on blocks with repeated and unsorted edges.
"""

from __future__ import annotations

import pytest
import torch

from dgl_zerocopy.sampling.blocks import canonical_csr


def _reference(crow, col, x):
    rows = torch.repeat_interleave(torch.arange(crow.numel() - 1), crow[1:] - crow[:-1])
    return torch.zeros(crow.numel() - 1, x.shape[1], dtype=x.dtype).index_add_(0, rows, x[col.long()])


@pytest.mark.parametrize("idtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_small_block_with_repeated_edges_becomes_sorted_and_unique(idtype, dtype):
    # 3 destinations, 3 sources, 12 edges: more pairs than the matrix has entries (cuSPARSE refused it)
    crow = torch.tensor([0, 5, 5, 12], dtype=idtype)
    col = torch.tensor([2, 0, 2, 2, 1, 1, 0, 1, 2, 0, 0, 1], dtype=idtype)
    values = torch.ones(12, dtype=dtype)
    adj = canonical_csr(crow, col, values, (3, 3))
    assert adj.layout == torch.sparse_csr and adj.shape == (3, 3) and adj.dtype == dtype
    assert adj.crow_indices().tolist() == [0, 3, 3, 6]
    assert adj.col_indices().tolist() == [0, 1, 2, 0, 1, 2]
    assert adj.values().tolist() == [1, 1, 3, 3, 3, 1]
    x = torch.randn(3, 5, dtype=dtype)
    torch.testing.assert_close(adj @ x, _reference(crow, col, x))
    torch.testing.assert_close(adj @ x, torch.sparse_csr_tensor(crow, col, values, size=(3, 3), check_invariants=False) @ x)


def test_a_sampled_block_gives_the_same_sums_with_or_without_canonical_form():
    gen = torch.Generator().manual_seed(3)
    dst, src, edges = 300, 1000, 4000
    rows = torch.sort(torch.randint(0, dst, (edges,), generator=gen)).values
    crow = torch.cat([torch.zeros(1, dtype=torch.int64), torch.bincount(rows, minlength=dst).cumsum(0)])
    col = torch.randint(0, src, (edges,), generator=gen)  # unsorted within rows, some pairs repeated
    values = torch.rand(edges, generator=gen, dtype=torch.float64)
    adj = canonical_csr(crow, col, values, (dst, src))
    c, k = adj.crow_indices(), adj.col_indices()
    for r in range(dst):
        row = k[c[r] : c[r + 1]]
        assert torch.all(row[1:] > row[:-1]), f"row {r}: columns not strictly increasing"
    x = torch.randn(src, 8, dtype=torch.float64, generator=gen)
    torch.testing.assert_close(adj @ x, torch.zeros(dst, 8, dtype=torch.float64).index_add_(0, rows, values.unsqueeze(1) * x[col]))


def test_an_empty_block():
    adj = canonical_csr(torch.zeros(4, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), torch.ones(0), (3, 2))
    assert adj.shape == (3, 2) and adj._nnz() == 0
    assert torch.equal(adj @ torch.ones(2, 4), torch.zeros(3, 4))
