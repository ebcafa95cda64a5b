"""The sorted zero-copy gather on a real GPU: every sort plan of id_sort and ``sort="auto"`` give
``table[ids]`` (skipped without CUDA and CuPy)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)", allow_module_level=True)
cupy = pytest.importorskip("cupy", reason="needs CuPy (pip package cupy-cuda12x)")

from dgl_zerocopy.cuda.gather.id_sort import sort_plan  # noqa: E402
from dgl_zerocopy.cuda.gather.launcher import launch_gather  # noqa: E402


@pytest.mark.parametrize("declared_rows, plan", [(4096, "packed32"), (2**28, "ids32"), (2**40, "packed64")])
@pytest.mark.parametrize("sort", [True, "auto"])
@pytest.mark.parametrize("columns", [100, 128, 1024])
def test_sorted_gather_equals_table_ids(declared_rows, plan, sort, columns):
    """A declared row count above the real table picks the wider keys; the ids stay inside the table."""
    g = torch.Generator().manual_seed(columns)
    table = torch.randn((4096, columns), generator=g).pin_memory()
    ids = torch.randint(0, 4096, (20000,), generator=g)
    ids[:3] = torch.tensor([4095, 0, 4095])
    assert sort_plan(ids.numel(), declared_rows) == plan
    out = torch.zeros((ids.numel(), columns), device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        ids_cuda = ids.cuda()
    launch_gather(table.data_ptr(), (declared_rows, columns), 4, 4 * columns, ids_cuda, out, stream=side, sort=sort)
    side.synchronize()
    assert torch.equal(out.cpu(), table[ids])
