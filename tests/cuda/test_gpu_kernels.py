"""The gather kernels on a real GPU, against torch indexing (skipped without CUDA and CuPy)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

from conftest import cupy_on_a_gpu  # noqa: E402

cupy = cupy_on_a_gpu()

from dgl_zerocopy.cuda.gather.launcher import compile_gather_module, launch_gather  # noqa: E402

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]
COLUMNS = [1, 3, 100, 128, 129, 1025]


def pinned_table(rows: int, columns: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 255, (rows * columns * dtype.itemsize,), dtype=torch.uint8, generator=g)
    return raw.view(dtype).reshape(rows, columns).pin_memory()


def gather_on_side_stream(table, ids, *, variant="aligned", sort=False, max_blocks=None, base_address=None, shape=None):
    """Run launch_gather on a non-default stream and return the rows on the CPU."""
    shape = tuple(table.shape) if shape is None else shape
    row_bytes = table.element_size() * shape[1]
    out = torch.full((ids.numel(), shape[1]), 0, dtype=table.dtype, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    launch_gather(
        table.data_ptr() if base_address is None else base_address,
        shape,
        table.element_size(),
        row_bytes,
        ids,
        out,
        stream=side,
        variant=variant,
        sort=sort,
        max_blocks=max_blocks,
    )
    side.synchronize()
    return out.cpu()


def test_module_compiles_once_per_device():
    assert compile_gather_module(0) is compile_gather_module(0)


def test_a_launch_compiles_only_its_instantiation():
    table = pinned_table(64, 4, torch.float32)
    ids = torch.arange(64, device="cuda")
    plan = launch_gather(table.data_ptr(), table.shape, 4, 16, ids, torch.empty((64, 4), device="cuda"))
    assert compile_gather_module.cache_info().currsize >= 1
    module = compile_gather_module(0, (plan.kernel,))  # memoized: the launch compiled exactly this one
    assert module.name_expressions == (plan.kernel,)


def test_streams_from_torch_and_cupy_are_accepted_without_deprecation_warnings():
    import warnings

    from dgl_zerocopy.cuda.gather.launcher import cupy_stream

    side = torch.cuda.Stream()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # CuPy 14 warns on ExternalStream: the launcher must not use it there
        wrapped = cupy_stream(cupy, side, 0)
    assert wrapped.ptr == side.cuda_stream
    assert cupy_stream(cupy, wrapped, 0) is wrapped


@pytest.mark.parametrize("variant", ["aligned", "naive"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matches_torch_indexing(dtype, variant):
    for columns in COLUMNS:
        table = pinned_table(257, columns, dtype, seed=columns)
        for id_dtype in (torch.int32, torch.int64):
            ids = torch.randint(0, 257, (1000,), dtype=id_dtype)
            ids[:2] = torch.tensor([0, 256])
            for sort in (False, True):
                got = gather_on_side_stream(table, ids.cuda(), variant=variant, sort=sort)
                assert torch.equal(got.view(torch.uint8), table[ids.long()].view(torch.uint8)), f"{dtype} columns={columns} ids={id_dtype} sort={sort}"


@pytest.mark.parametrize("variant", ["aligned", "naive"])
def test_misaligned_bases_and_capped_grid(variant):
    backing = pinned_table(1, 64 * 1000 + 256, torch.uint8)
    for offset in (0, 1, 2, 4, 8, 16, 100):
        for width in (7, 100, 400, 513):
            rows = (backing.numel() - 128) // width
            table = backing[0, offset : offset + rows * width].reshape(rows, width)
            ids = torch.randint(0, rows, (333,), device="cuda")
            for max_blocks in (None, 1):
                got = gather_on_side_stream(table, ids, variant=variant, max_blocks=max_blocks, base_address=backing.data_ptr() + offset, shape=(rows, width))
                assert torch.equal(got, table[ids.cpu()]), (offset, width, max_blocks)


def test_empty_ids_launch_nothing():
    table = pinned_table(10, 4, torch.float32)
    out = torch.empty((0, 4), device="cuda")
    plan = launch_gather(table.data_ptr(), table.shape, 4, 16, torch.empty(0, dtype=torch.int64, device="cuda"), out)
    assert plan.grid == 0


def test_the_nvrtc_compile_check_uses_the_options_cupy_passes(monkeypatch):
    """On a real GPU, nothing stood in: the options CuPy hands NVRTC for a RawModule of gather.cu
    (-ftz=true, its include paths, the architecture it picks for this device) are the options of
    compile_check (kernel_source.nvrtc_options), so the CPU compile check compiles what runs here."""
    from cupy.cuda import compiler

    from dgl_zerocopy.cuda.kernel_source import kernel_options, nvrtc_options, read_kernel

    seen = []
    real_compile = compiler._NVRTCProgram.compile

    def recording(self, options=(), log_stream=None):
        if self.src:  # not CuPy's probe of the compiler version (an empty source)
            seen.append(tuple(options))
        return real_compile(self, options, log_stream)

    monkeypatch.setattr(compiler._NVRTCProgram, "compile", recording)
    monkeypatch.setenv("CUPY_CACHE_IN_MEMORY", "1")  # compile now, never read a disk cache
    names = ("gather_aligned<uint2, int>", "gather_naive<unsigned char, int>")  # a module no launch builds
    cupy.RawModule(code=read_kernel("gather.cu"), options=kernel_options(), name_expressions=names).compile()
    assert len(seen) == 1, seen
    [arch] = [option.removeprefix("-arch=") for option in seen[0] if option.startswith("-arch=")]  # sm_90 on an H100
    assert sorted(seen[0]) == sorted(nvrtc_options(arch)), f"CuPy: {seen[0]}\nours: {nvrtc_options(arch)}"
    assert "-ftz=true" in seen[0]
