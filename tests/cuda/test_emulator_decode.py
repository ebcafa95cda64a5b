"""The decoding gather kernel (``gather_decode`` in kernels/gather.cu) on the CPU emulator, against
the reference decode ``Codec.decode`` (dgl_zerocopy/store/compression/codec.py), bit for bit: every codec
(fp16, bf16, int8 per column and per row), every output format (float32, float16, bfloat16), rows
of 1 to 4099 columns, every table base alignment, int32 and int64 ids (unsorted, repeated)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dgl_zerocopy.cuda.gather import instantiations
from dgl_zerocopy.cuda.gather.emulator import emulate_decode
from dgl_zerocopy.cuda.gather.emulator_build import convert, emulator_flushes_subnormals, float_op
from dgl_zerocopy.cuda.kernel_source import gpu_flushes_subnormals
from dgl_zerocopy.store.compression import Codec
from dgl_zerocopy.store.compression.encode import encode_into

COLUMNS = (1, 2, 3, 31, 32, 100, 128, 602, 4099)
CODECS = ("fp16", "bf16", "int8/column", "int8/row")
OUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
TORCH_CODES = {"fp16": torch.float16, "bf16": torch.bfloat16, "int8": torch.int8}
ROWS = 13


def out_format(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def make_codec(name: str, rows: int, columns: int, seed: int) -> tuple[np.ndarray, Codec]:
    """Random codes (every bit pattern: for fp16/bf16 that includes subnormals, infinities and
    NaNs) and the codec that decodes them (int8: scales spanning 1e-3..1e3 per column or row)."""
    code, _, axis = name.partition("/")
    rng = np.random.default_rng(seed)
    if code == "int8":
        codes = rng.integers(-128, 128, size=(rows, columns), dtype=np.int8)
        length = columns if axis == "column" else rows
        scale = (10.0 ** rng.uniform(-3, 3, length) * rng.choice([-1, 1], length)).astype(np.float32)
        offset = rng.standard_normal(length).astype(np.float32) * 10
        return codes, Codec("int8", torch.from_numpy(scale), torch.from_numpy(offset), axis)
    codes = rng.integers(0, 2**16, size=(rows, columns), dtype=np.uint16)
    return codes, Codec(code)


def emulate(codes: np.ndarray, codec: Codec, ids: np.ndarray, out_dtype: torch.dtype, **kw) -> torch.Tensor:
    affine = {}
    if codec.name == "int8":
        affine = dict(scale=codec.scale.numpy(), offset=codec.offset.numpy(), affine=codec.axis)
    out = np.array(emulate_decode(codes, ids, code=codec.name, out_format=out_format(out_dtype), **affine, **kw))
    if out_dtype == torch.bfloat16:  # uint16 bits; torch before 2.3 takes no uint16 arrays
        return torch.from_numpy(out.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(out)


def reference(codes: np.ndarray, codec: Codec, ids: np.ndarray, out_dtype: torch.dtype) -> torch.Tensor:
    if codec.name == "int8":
        table = torch.from_numpy(codes)
    else:
        table = torch.from_numpy(codes.view(np.int16)).view(TORCH_CODES[codec.name])
    rows = torch.from_numpy(ids.astype(np.int64))
    return codec.decode(table[rows], rows, out_dtype=out_dtype)


def assert_same(got: torch.Tensor, want: torch.Tensor, context: str) -> None:
    """Equal bit for bit, except that any NaN equals any NaN (payloads are not promised)."""
    assert got.dtype == want.dtype and got.shape == want.shape, context
    bits = torch.int32 if got.element_size() == 4 else torch.int16
    nan = torch.isnan(want)
    assert torch.equal(torch.isnan(got), nan), f"{context}: NaN positions differ"
    differ = (got.view(bits) != want.view(bits)) & ~nan
    if differ.any():
        row, col = (int(i) for i in differ.nonzero()[0])
        pytest.fail(f"{context}: {int(differ.sum())} values differ, first at [{row}, {col}]: {float(got[row, col])!r} != {float(want[row, col])!r}")


def mixed_ids(rows: int, count: int, dtype, seed: int) -> np.ndarray:
    """Unsorted, repeated, and both ends of the table."""
    rng = np.random.default_rng(seed)
    return np.concatenate([[rows - 1, 0], rng.integers(0, rows, count), [rows - 1, rows - 1, 0]]).astype(dtype)


def code_offsets(code: str) -> range:
    """Every base offset in a 128-byte line that the codes' alignment allows."""
    return range(0, 128, instantiations.CODE_FORMATS[code][1])


# ------------------------------------------------------------------ conversions (shim and codecs.cuh)


def _torch_bits(values: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    return torch.from_numpy(values).to(dtype).view(torch.int16).numpy().view(np.uint16)


def _same_floats(got: np.ndarray, want: np.ndarray) -> bool:
    nan = np.isnan(want)
    return bool(np.array_equal(np.isnan(got), nan) and np.array_equal(got.view(np.uint32)[~nan], want.view(np.uint32)[~nan]))


def test_every_half_and_bfloat16_decodes_exactly():
    bits = np.arange(2**16, dtype=np.uint16)
    for name, dtype in (("fp16->float32", torch.float16), ("bf16->float32", torch.bfloat16)):
        want = torch.from_numpy(bits.view(np.int16)).view(dtype).float().numpy()
        assert _same_floats(convert(name, bits), want), name


def _boundary_floats(target_bits_as_float: np.ndarray) -> np.ndarray:
    """Floats at, between and one ulp around consecutive representable values of a 16-bit format
    (every rounding boundary and tie), plus specials and random floats of every exponent."""
    finite = np.sort(target_bits_as_float[np.isfinite(target_bits_as_float)].astype(np.float64))
    finite = np.unique(finite)
    midpoints = ((finite[1:] + finite[:-1]) / 2).astype(np.float32)  # exact in float32 for fp16 and bf16
    values = np.concatenate([finite.astype(np.float32), midpoints])
    around = np.concatenate([np.nextafter(values, np.float32(np.inf)), np.nextafter(values, np.float32(-np.inf))])
    rng = np.random.default_rng(0)
    random = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    specials = np.array(
        [
            0.0,
            -0.0,
            np.inf,
            -np.inf,
            np.nan,
            65504,
            65519.996,
            65520,
            -65520,
            2.0**-24,
            2.0**-25,
            1.5 * 2.0**-25,
            2.0**-26,
            3.4028235e38,
            1e-45,
            -1e-45,
            1.17549435e-38,
        ],
        dtype=np.float32,
    )
    return np.concatenate([values, around, random, specials]).astype(np.float32)


@pytest.mark.parametrize(("name", "dtype"), [("float32->fp16", torch.float16), ("float32->bf16", torch.bfloat16)])
def test_float_rounds_to_nearest_even_like_torch(name, dtype):
    every = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype).float().numpy()
    floats = _boundary_floats(every)
    got, want = convert(name, floats), _torch_bits(floats, dtype)
    nan = np.isnan(floats)
    assert np.array_equal(got[~nan], want[~nan]), f"{name}: {np.count_nonzero(got[~nan] != want[~nan])} differ"
    back = convert("fp16->float32" if dtype == torch.float16 else "bf16->float32", got[nan])
    assert np.isnan(back).all(), "NaN must stay NaN"


def test_convert_rejects_bad_input():
    with pytest.raises(ValueError, match="fp16->float32"):
        convert("fp8->float32", np.zeros(1, np.uint16))
    with pytest.raises(TypeError, match="float32"):
        convert("float32->fp16", np.zeros(1, np.float64))


# ------------------------------------------------------------------ subnormals under CuPy's -ftz=true

SMALLEST_NORMAL = np.float32(2.0**-126)


def _flushed(x: np.ndarray) -> np.ndarray:
    """What the GPU's .ftz instructions make of x: subnormals become a zero of the same sign."""
    return np.where(np.abs(x) < SMALLEST_NORMAL, np.copysign(np.float32(0), x), x).astype(np.float32)


def test_the_emulator_flushes_where_the_gpu_does():
    """CuPy compiles with -ftz=true, under which CUDA's __fmul_rn/__fadd_rn flush subnormal inputs
    and results to zero: the emulator's do too; the kernels' zc_mul_rn/zc_add_rn keep them."""
    assert gpu_flushes_subnormals() and emulator_flushes_subnormals()
    rng = np.random.default_rng(11)
    tiny = (rng.uniform(-1, 1, 1000) * 2.0**-126).astype(np.float32)  # subnormal (or zero)
    normal = (10.0 ** rng.uniform(-20, 20, 1000) * rng.choice([-1, 1], 1000)).astype(np.float32)
    a = np.concatenate([tiny, normal, normal, np.float32([2.0**-63, 2.0**-100])])
    b = np.concatenate([normal, tiny, normal[::-1], np.float32([-(2.0**-64), 2.0**-30])])
    with np.errstate(over="ignore", under="ignore"):
        product, total = a * b, a + b
    for name, exact in (("zc_mul_rn", product), ("zc_add_rn", total)):
        assert np.array_equal(float_op(name, a, b).view(np.uint32), exact.view(np.uint32)), name
    with np.errstate(over="ignore", under="ignore"):
        flushed_product = _flushed(_flushed(a) * _flushed(b))
        flushed_total = _flushed(_flushed(a) + _flushed(b))
    for name, flushed in (("__fmul_rn", flushed_product), ("__fadd_rn", flushed_total)):
        assert np.array_equal(float_op(name, a, b).view(np.uint32), flushed.view(np.uint32)), name
    # a product of two normals that is subnormal keeps its sign as a zero: -0.0
    assert float_op("__fmul_rn", a[-2:-1], b[-2:-1]).view(np.uint32)[0] == 0x80000000
    assert np.count_nonzero(flushed_product != product) > 1000  # the cases differ where it matters


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16], ids=out_format)
@pytest.mark.parametrize("axis", ["column", "row"])
def test_subnormal_features_decode_exactly(axis, out_dtype):
    """Columns (rows) of values below 2^-126 encode to a subnormal scale and offset and decode to
    subnormals; the decode keeps them although the GPU compiles with -ftz=true (with CUDA's
    __fmul_rn/__fadd_rn every one of them would be 0 here, as on the GPU). bf16 keeps float32's
    exponent range, so its subnormals must survive too."""
    rng = np.random.default_rng(4)
    rows, columns = 40, 70
    table = rng.standard_normal((rows, columns)).astype(np.float32)
    tiny = slice(0, columns, 3) if axis == "column" else slice(0, rows, 3)
    if axis == "column":
        table[:, tiny] *= np.float32(1e-39)
    else:
        table[tiny] *= np.float32(1e-39)
    codes = np.empty(table.shape, np.int8)
    codec = encode_into(table.copy(), "int8", codes, axis=axis)
    assert np.all(np.abs(codec.scale.numpy()[tiny]) < SMALLEST_NORMAL)  # the case under test
    ids = mixed_ids(rows, 60, np.int64, seed=4)
    want = reference(codes, codec, ids, out_dtype)
    decoded = want.float().numpy()
    subnormal = (decoded != 0) & (np.abs(decoded) < SMALLEST_NORMAL)
    assert subnormal.sum() > 500, "the reference must hold subnormal values"
    for offset in (0, 1, 4, 16):
        assert_same(
            emulate(codes, codec, ids, out_dtype, base_offset=offset), want, f"int8/{axis} -> {out_format(out_dtype)} with subnormal values, base +{offset}"
        )


# ------------------------------------------------------------------ the kernel against Codec.decode


@pytest.mark.parametrize("out_dtype", OUT_DTYPES, ids=out_format)
@pytest.mark.parametrize("codec_name", CODECS)
def test_every_codec_width_and_alignment(codec_name, out_dtype):
    """Every width of COLUMNS at a spread of base offsets (all 16-byte residues, which pick the
    vector, and positions across the 128-byte line, which move the windows), both id types."""
    code = codec_name.partition("/")[0]
    offsets = sorted({*range(0, 16, instantiations.CODE_FORMATS[code][1]), 16, 34, 64, 66, 100, 120, 126})
    for columns in COLUMNS:
        codes, codec = make_codec(codec_name, ROWS, columns, seed=columns)
        for i, offset in enumerate(offsets):
            id_dtype = (np.int32, np.int64)[i % 2]
            ids = mixed_ids(ROWS, 20, id_dtype, seed=offset)
            got = emulate(codes, codec, ids, out_dtype, base_offset=offset)
            assert_same(
                got,
                reference(codes, codec, ids, out_dtype),
                f"{codec_name} -> {out_format(out_dtype)}, {columns} columns, base +{offset}, {id_dtype.__name__} ids",
            )


@pytest.mark.parametrize("codec_name", ["fp16", "int8/row"])
def test_every_base_offset_in_a_line(codec_name):
    """All code-aligned base offsets 0..127, both id types, for 1- and 2-byte codes."""
    code = codec_name.partition("/")[0]
    for columns in (3, 100, 602):
        codes, codec = make_codec(codec_name, ROWS, columns, seed=7 * columns)
        for offset in code_offsets(code):
            for id_dtype in (np.int32, np.int64):
                ids = mixed_ids(ROWS, 8, id_dtype, seed=offset)
                got = emulate(codes, codec, ids, torch.float32, base_offset=offset)
                assert_same(got, reference(codes, codec, ids, torch.float32), f"{codec_name} {columns} cols +{offset} {id_dtype.__name__}")


def test_odd_output_offsets_narrow_the_stores():
    codes, codec = make_codec("int8/column", ROWS, 128, seed=3)
    ids = mixed_ids(ROWS, 10, np.int64, seed=3)
    for out_dtype in OUT_DTYPES:
        size = torch.empty((), dtype=out_dtype).element_size()
        for out_offset in (0, size, 2 * size, 8, 12):
            if out_offset % size:
                continue
            got = emulate(codes, codec, ids, out_dtype, out_offset=out_offset)
            assert_same(got, reference(codes, codec, ids, out_dtype), f"{out_dtype} out +{out_offset}")


@pytest.mark.parametrize("codec_name", CODECS)
@pytest.mark.parametrize("id_dtype", [np.int32, np.int64])
def test_degenerate_id_sets_capped_grid_and_permutation(codec_name, id_dtype):
    codes, codec = make_codec(codec_name, 10, 100, seed=5)
    cases = {"none": [], "one": [4], "duplicates": [7, 7, 7, 2, 7], "reversed": list(range(9, -1, -1))}
    for name, ids in cases.items():
        ids = np.asarray(ids, dtype=id_dtype)
        assert_same(emulate(codes, codec, ids, torch.float32), reference(codes, codec, ids, torch.float32), name)
    many = np.random.default_rng(2).integers(0, 10, 3000).astype(id_dtype)
    assert_same(emulate(codes, codec, many, torch.float16, max_blocks=1), reference(codes, codec, many, torch.float16), "capped grid")
    order = np.argsort(many, kind="stable")
    got = emulate(codes, codec, many[order], torch.bfloat16, perm=order)  # output row order[j] gets many[order][j]
    assert_same(got, reference(codes, codec, many, torch.bfloat16), "sorted ids written back through perm")


def test_empty_rows_and_identity_formats():
    codes, codec = make_codec("int8/column", 5, 0, seed=0)
    assert emulate(codes, codec, np.array([1, 2]), torch.float32).shape == (2, 0)
    # fp16 codes as float16 (bf16 as bfloat16) are copied by the raw gather, bit for bit
    for name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        codes, codec = make_codec(name, ROWS, 602, seed=1)
        ids = mixed_ids(ROWS, 10, np.int64, seed=1)
        out = emulate(codes, codec, ids, dtype, base_offset=2, trace=False)
        assert torch.equal(out.view(torch.int16), torch.from_numpy(codes[ids].view(np.int16)))


def test_trace_reads_each_code_once_and_each_row_pair_once_per_lane():
    codes, codec = make_codec("int8/row", 64, 100, seed=9)
    ids = np.random.default_rng(9).integers(0, 64, 50)
    pairs = dict(scale=codec.scale.numpy(), offset=codec.offset.numpy(), affine="row")
    out, trace = emulate_decode(codes, ids, code="int8", **pairs, base_offset=4, trace=True)
    assert_same(torch.from_numpy(out), reference(codes, codec, ids, torch.float32), "traced")
    inside = (trace.address >= trace.table_address) & (trace.address < trace.table_address + trace.table_bytes)
    assert trace.table_bytes == codes.nbytes and trace.useful_bytes == 50 * 100
    assert int(trace.nbytes[inside].sum()) == 50 * 100  # every code byte once
    relative = np.sort(trace.address[inside] - trace.table_address)
    vec = trace.plan.vector_bytes
    np.testing.assert_array_equal(relative, np.sort((ids[:, None] * 100 + np.arange(0, 100, vec)).reshape(-1)))
    outside = ~inside
    assert np.all(trace.nbytes[outside] == 8)  # one (scale, offset) pair per load
    assert int(outside.sum()) == 50 * trace.plan.threads_per_row  # every lane of the row's group
    # per column: the pairs live in device memory and are not traced
    codes, codec = make_codec("int8/column", 64, 100, seed=9)
    _, trace = emulate_decode(codes, ids, code="int8", scale=codec.scale.numpy(), offset=codec.offset.numpy(), affine="column", base_offset=4, trace=True)
    assert int(trace.nbytes.sum()) == 50 * 100


def test_bad_inputs_are_rejected():
    codes, codec = make_codec("int8/column", 4, 8, seed=0)
    scale, offset = codec.scale.numpy(), codec.offset.numpy()
    with pytest.raises(ValueError, match="affine"):
        emulate_decode(codes, np.array([0]), code="int8", scale=scale, offset=offset)
    with pytest.raises(ValueError, match="one per row"):
        emulate_decode(codes, np.array([0]), code="int8", scale=scale, offset=offset, affine="row")
    with pytest.raises(ValueError, match="take no affine"):
        emulate_decode(np.zeros((4, 8), np.uint16), np.array([0]), code="fp16", scale=scale, offset=offset, affine="column")
    with pytest.raises(TypeError, match="int8 codes"):
        emulate_decode(codes.astype(np.uint8), np.array([0]), code="int8", scale=scale, offset=offset, affine="column")
    with pytest.raises(ValueError, match="code must be"):
        emulate_decode(codes, np.array([0]), code="int4")
    with pytest.raises(ValueError, match="out_format"):
        emulate_decode(codes, np.array([0]), code="int8", out_format="float64", scale=scale, offset=offset, affine="column")
    with pytest.raises(ValueError, match="table_address must be a multiple of 2"):
        emulate_decode(np.zeros((4, 8), np.uint16), np.array([0]), code="fp16", base_offset=1)
    with pytest.raises(IndexError, match="out of range"):
        emulate_decode(codes, np.array([4]), code="int8", scale=scale, offset=offset, affine="column")
