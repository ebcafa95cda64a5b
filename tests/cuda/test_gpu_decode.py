"""The decoding gather on a real GPU: ``launch_decode`` and the zero-copy backend over compressed
tables, against ``Codec.decode`` bit for bit (skipped without CUDA and CuPy)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

from conftest import cupy_on_a_gpu  # noqa: E402

cupy_on_a_gpu()

from dgl_zerocopy.cuda.gather.launcher import launch_decode  # noqa: E402
from dgl_zerocopy.store.backends import GatherOptions  # noqa: E402
from dgl_zerocopy.store.backends.zerocopy import ZeroCopyBackend  # noqa: E402
from dgl_zerocopy.store.compression import Codec  # noqa: E402
from dgl_zerocopy.store.compression.encode import encode_into  # noqa: E402

CODECS = ("fp16", "bf16", "int8/column", "int8/row")
OUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
COLUMNS = (1, 3, 100, 128, 602, 1025)
STORED = {"fp16": torch.float16, "bf16": torch.bfloat16, "int8": torch.int8}


def make_codec(name: str, rows: int, columns: int, seed: int = 0) -> tuple[torch.Tensor, Codec]:
    """A CPU code table (every bit pattern for fp16/bf16: subnormals, infinities, NaNs) and its codec."""
    code, _, axis = name.partition("/")
    g = torch.Generator().manual_seed(seed)
    if code == "int8":
        codes = torch.randint(-128, 128, (rows, columns), dtype=torch.int8, generator=g)
        length = columns if axis == "column" else rows
        scale = 10.0 ** (torch.rand(length, generator=g) * 6 - 3)
        offset = torch.randn(length, generator=g) * 10
        return codes, Codec("int8", scale.float(), offset.float(), axis)
    bits = torch.randint(-(2**15), 2**15, (rows, columns), dtype=torch.int32, generator=g).to(torch.int16)
    return bits.view(STORED[code]), Codec(code)


def assert_same(got: torch.Tensor, want: torch.Tensor, context: str) -> None:
    """Bit for bit, except that any NaN equals any NaN."""
    got, want = got.cpu(), want.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape, context
    bits = torch.int32 if got.element_size() == 4 else torch.int16
    nan = torch.isnan(want)
    assert torch.equal(torch.isnan(got), nan), f"{context}: NaN positions differ"
    differ = (got.view(bits) != want.view(bits)) & ~nan
    assert not differ.any(), f"{context}: {int(differ.sum())} values differ"


def decode_on_side_stream(
    codes: torch.Tensor,
    codec: Codec,
    ids: torch.Tensor,
    out_dtype: torch.dtype,
    *,
    base_address: int | None = None,
    sort: bool = False,
    max_blocks: int | None = None,
) -> torch.Tensor:
    """launch_decode on a non-default stream over pinned ``codes``; the rows on the CPU."""
    pairs_ptr, keep = 0, None
    if codec.name == "int8":
        keep = torch.stack((codec.scale, codec.offset), 1)
        keep = keep.cuda() if codec.axis == "column" else keep.pin_memory()
        pairs_ptr = keep.data_ptr()
    out = torch.zeros((ids.numel(), codes.shape[1]), dtype=out_dtype, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    launch_decode(
        codes.data_ptr() if base_address is None else base_address,
        tuple(codes.shape),
        codec.name,
        codes.stride(0) * codes.element_size(),
        ids,
        out,
        out_format=str(out_dtype).removeprefix("torch."),
        affine=codec.axis,
        affine_ptr=pairs_ptr,
        stream=side,
        sort=sort,
        max_blocks=max_blocks,
    )
    side.synchronize()
    del keep
    return out.cpu()


@pytest.mark.parametrize("out_dtype", OUT_DTYPES, ids=str)
@pytest.mark.parametrize("codec_name", CODECS)
def test_launch_decode_matches_codec_decode(codec_name, out_dtype):
    for columns in COLUMNS:
        codes, codec = make_codec(codec_name, 257, columns, seed=columns)
        codes = codes.pin_memory()
        for id_dtype in (torch.int32, torch.int64):
            ids = torch.randint(0, 257, (1000,), dtype=id_dtype)
            ids[:3] = torch.tensor([256, 0, 256])
            want = codec.decode(codes[ids.long()], ids, out_dtype)
            for sort in (False, True):
                got = decode_on_side_stream(codes, codec, ids.cuda(), out_dtype, sort=sort)
                assert_same(got, want, f"{codec_name} -> {out_dtype}, {columns} columns, {id_dtype}, sort={sort}")


@pytest.mark.parametrize("out_dtype", (torch.float32, torch.bfloat16), ids=str)
@pytest.mark.parametrize("axis", ("column", "row"))
def test_subnormal_features_decode_exactly(axis, out_dtype):
    """Columns (rows) of values below 2^-126 have a subnormal scale and offset and decode to
    subnormals. CuPy compiles with -ftz=true, under which CUDA's __fmul_rn/__fadd_rn would flush
    them all to zero; the kernel's affine map keeps them (kernels/codecs.cuh)."""
    g = torch.Generator().manual_seed(4)
    table = torch.randn((300, 70), generator=g)
    tiny = slice(0, 70, 3) if axis == "column" else slice(0, 300, 3)
    if axis == "column":
        table[:, tiny] *= 1e-39
    else:
        table[tiny] *= 1e-39
    codes = torch.empty(table.shape, dtype=torch.int8)
    codec = encode_into(table.numpy().copy(), "int8", codes.numpy(), axis=axis)
    assert bool((codec.scale[tiny].abs() < 2.0**-126).all())
    codes = codes.pin_memory()
    ids = torch.randint(0, 300, (1000,), generator=g)
    want = codec.decode(codes[ids], ids, out_dtype)
    decoded = want.float()
    assert int(((decoded != 0) & (decoded.abs() < 2.0**-126)).sum()) > 5000, "the reference must hold subnormals"
    got = decode_on_side_stream(codes, codec, ids.cuda(), out_dtype)
    assert_same(got, want, f"int8/{axis} -> {out_dtype} with subnormal values")


@pytest.mark.parametrize("codec_name", CODECS)
def test_misaligned_bases_and_capped_grid(codec_name):
    code = codec_name.partition("/")[0]
    size = STORED[code].itemsize
    for columns in (7, 100, 602):
        backing, codec = make_codec(codec_name, 320, columns, seed=columns)  # room for 300 rows past any offset
        flat = backing.reshape(-1).pin_memory()
        for offset in (0, 1, 2, 4, 8, 16, 100):  # in codes
            rows = 300
            codes = flat[offset : offset + rows * columns].view(rows, columns)
            if codec.name == "int8" and codec.axis == "row":
                codec = Codec("int8", codec.scale[:rows].contiguous(), codec.offset[:rows].contiguous(), "row")
            ids = torch.randint(0, rows, (333,), device="cuda")
            for max_blocks in (None, 1):
                got = decode_on_side_stream(codes, codec, ids, torch.float32, base_address=flat.data_ptr() + offset * size, max_blocks=max_blocks)
                assert_same(got, codec.decode(codes[ids.cpu()], ids.cpu()), f"{codec_name} +{offset * size} B, {columns} cols")


@pytest.mark.parametrize("out_dtype", OUT_DTYPES, ids=str)
@pytest.mark.parametrize("codec_name", CODECS)
def test_backend_gathers_on_a_side_stream_into_out_and_allocated(codec_name, out_dtype):
    codes, codec = make_codec(codec_name, 1000, 100, seed=1)
    backend = ZeroCopyBackend(codes, torch.device("cuda", 0), codec=codec, out_dtype=out_dtype)
    try:
        assert backend.out_dtype == out_dtype
        ids = torch.randint(0, 1000, (4096,))
        want = codec.decode(codes[ids], ids, out_dtype)
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            got = backend.gather(ids, None, side)  # allocated on `side`: read it after `side`
        torch.cuda.current_stream().wait_stream(side)
        got.record_stream(torch.cuda.current_stream())
        assert_same(got, want, f"{codec_name} out=None")
        out = torch.full((4096, 100), float("nan"), device="cuda").to(out_dtype)
        # The conversion runs late on the current stream (behind the sleep); `side` must wait for it,
        # so it is enqueued before the wait (enqueued after it, the gather would read unwritten ids).
        device_ids = ids.cuda()
        torch.cuda._sleep(50_000_000)
        device_ids = device_ids.int()
        side.wait_stream(torch.cuda.current_stream())
        backend.gather(device_ids, out, side)
        side.synchronize()
        assert_same(out, want, f"{codec_name} into out, int32 ids on the device")
    finally:
        backend.close()
    assert not backend._pinned.pinned


def test_backend_sort_ids_and_max_blocks():
    codes, codec = make_codec("int8/row", 500, 602, seed=2)
    backend = ZeroCopyBackend(codes, torch.device("cuda", 0), options=GatherOptions(sort_ids=True, max_blocks=2), codec=codec)
    try:
        ids = torch.randint(0, 500, (2000,))
        stream = torch.cuda.current_stream()
        got = backend.gather(ids, None, stream)
        assert_same(got, codec.decode(codes[ids], ids), "sorted, capped")
    finally:
        backend.close()


def test_backend_rejects_mismatched_codecs():
    codes, codec = make_codec("int8/column", 10, 8)
    device = torch.device("cuda", 0)
    with pytest.raises(TypeError, match="int8 codes"):
        ZeroCopyBackend(codes.float(), device, codec=codec)
    with pytest.raises(ValueError, match="out_dtype"):
        ZeroCopyBackend(codes, device, codec=codec, out_dtype=torch.float64)
    with pytest.raises(ValueError, match="variant='aligned'"):
        ZeroCopyBackend(codes, device, options=GatherOptions(variant="naive"), codec=codec)
    with pytest.raises(ValueError, match="needs 10 scales"):
        ZeroCopyBackend(codes, device, codec=Codec("int8", codec.scale, codec.offset, "row"))
