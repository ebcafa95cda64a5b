"""Compressed host features, the host side: encoders, error bounds, chunked conversion, save/load.

The reference is :meth:`Codec.decode`; fp16/bf16 codes must equal torch's own casts bit for bit,
int8 must decode within half a step (``scale / 2``) of every value."""

import json
import os
import tracemalloc

import numpy as np
import pytest
import torch

import dgl_zerocopy
from dgl_zerocopy.store.compression import CODECS, Codec, compress, compressed_beside, is_compressed_dir, load_compressed
from dgl_zerocopy.store.compression.encode import encode_bf16

INT8_FORMS = [(a, m) for a in ("column", "row") for m in ("minmax", "absmax")]


def _table(rows=300, cols=37, seed=0) -> np.ndarray:
    """Columns of very different ranges and signs, some constant, a zero row."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)).astype(np.float32) * (10.0 ** rng.uniform(-3, 2, cols)).astype(np.float32)
    x += rng.uniform(-5, 5, cols).astype(np.float32)
    if cols > 3:
        x[:, 1] = 7.25  # constant column
        x[:, 2] = 0.0
    x[0] = 0.0
    return x


def _int8_bound(x: np.ndarray, codec: Codec) -> np.ndarray:
    """Half a step, plus the float32 rounding of the decode (a few ulps of the values involved)."""
    scale, offset = codec.scale.numpy().astype(np.float64), codec.offset.numpy().astype(np.float64)
    if codec.axis == "row":
        scale, offset = scale[:, None], offset[:, None]
    eps = np.finfo(np.float32).eps
    return scale / 2 + 4 * eps * (np.abs(x) + np.abs(offset) + 128 * scale)


def test_compress_is_exported_at_the_top():
    assert dgl_zerocopy.compress is compress
    assert "compress" in dgl_zerocopy.__all__


@pytest.mark.parametrize("codec, dtype", [("fp16", torch.float16), ("bf16", torch.bfloat16)])
def test_16bit_codes_equal_torchs_casts(codec, dtype):
    x = _table()
    # Ties and edge cases of rounding: halfway bit patterns, subnormals, signed zero, large values.
    bits = np.array([0x3F808000, 0x3F818000, 0xBF808000, 0x00000001, 0x80000000, 0x477FE000, 0x477FEFFF, 0x38000001], dtype=np.uint32)
    specials = bits.view(np.float32)
    x[1, : len(specials)] = specials
    table = compress(x, codec)
    assert table.codes.dtype == dtype and table.codec.name == codec and table.shape == x.shape
    assert torch.equal(table.codes.view(torch.int16), torch.from_numpy(x).to(dtype).view(torch.int16))
    assert torch.equal(table.decode(), torch.from_numpy(x).to(dtype).float())


def test_bf16_rounds_ties_to_even():
    ties = np.array([[1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, -(1.0 + 2.0**-8)]], dtype=np.float32)
    got = torch.from_numpy(encode_bf16(ties).copy()).view(torch.bfloat16).float()
    assert got.tolist() == [[1.0, 1.0 + 4 * 2.0**-8, -1.0]]


@pytest.mark.parametrize("axis, method", INT8_FORMS)
@pytest.mark.parametrize("cols", [1, 5, 129])
def test_int8_decodes_within_half_a_step(axis, method, cols):
    x = _table(cols=cols)
    table = compress(x, "int8", axis=axis, method=method)
    codec = table.codec
    assert table.codes.dtype == torch.int8 and codec.axis == axis and table.method == method
    assert codec.scale.shape == ((cols,) if axis == "column" else (len(x),))
    decoded = table.decode().numpy().astype(np.float64)
    assert np.all(np.abs(decoded - x) <= _int8_bound(x, codec))
    codes = table.codes.numpy()
    if method == "absmax":
        assert codes.min() >= -127 and np.all(codec.offset.numpy() == 0)
    else:  # the full range of codes: each column's (row's) minimum is -128 and maximum 127 unless constant
        lo, hi = (codes.min(0), codes.max(0)) if axis == "column" else (codes.min(1), codes.max(1))
        spread = (x.max(0) > x.min(0)) if axis == "column" else (x.max(1) > x.min(1))
        assert np.all(lo[spread] == -128) and np.all(hi[spread] == 127)


@pytest.mark.parametrize("axis, method", INT8_FORMS)
def test_constant_and_zero_columns_and_rows_decode_exactly(axis, method):
    x = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
    if axis == "column":
        x[:, 0], x[:, 1] = 0.0, -3.5
        keep = (slice(None), slice(0, 2))
    else:
        x[0], x[2] = 0.0, 0.125
        keep = ([0, 2], slice(None))
    table = compress(x, "int8", axis=axis, method=method)
    decoded = table.decode().numpy()
    assert table.codec.scale.numpy()[[0] if axis == "row" else [0]].tolist() == [0.0]  # an all-zero column/row
    if method == "minmax":  # a constant decodes from its offset, exactly; absmax's -3.5 is 127 steps of 3.5/127
        np.testing.assert_array_equal(decoded[keep], x[keep])
    else:
        np.testing.assert_array_equal(decoded[keep][..., 0] if axis == "column" else decoded[0], 0.0)
    assert np.all(np.isfinite(decoded))


def test_a_small_range_column_keeps_its_information_per_column():
    """Ten columns of range 200 and one of range 0.2: per-column scales keep the small one to 1/255
    of its range; a row-wide scale rounds it away (why the default is per column)."""
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.uniform(-100, 100, (2000, 10)), rng.uniform(-0.1, 0.1, (2000, 1))], axis=1).astype(np.float32)
    per_column = compress(x, "int8").decode().numpy()  # the default form
    per_row = compress(x, "int8", axis="row").decode().numpy()
    assert np.abs(per_column[:, 10] - x[:, 10]).max() <= 0.2 / 255 / 2 * 1.01
    assert np.corrcoef(per_column[:, 10], x[:, 10])[0, 1] > 0.999
    assert np.corrcoef(per_row[:, 10], x[:, 10])[0, 1] < 0.5  # per row, the small column is mostly rounding noise


def test_default_int8_form_is_column_minmax():
    table = compress(_table(), "int8")
    assert table.codec.axis == "column" and table.method == "minmax"


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_other_float_dtypes_convert_through_float32(dtype):
    x = (_table(cols=8) * 3).clip(0, 200).astype(dtype)
    for codec in CODECS:
        table = compress(x, codec)
        ref = torch.from_numpy(x.astype(np.float32))
        if codec == "int8":
            assert np.all(np.abs(table.decode().numpy() - x.astype(np.float32)) <= _int8_bound(x.astype(np.float32), table.codec))
        else:
            assert torch.equal(table.decode(), ref.to(table.codes.dtype).float())


def test_a_tensor_input_and_a_bf16_tensor():
    x = torch.from_numpy(_table())
    assert torch.equal(compress(x, "int8").codes, compress(x.numpy(), "int8").codes)
    b = x.to(torch.bfloat16)
    same = compress(b, "bf16")
    assert same.codes.data_ptr() == b.data_ptr()  # already bf16: used as it is
    assert torch.equal(compress(b, "fp16").codes, b.float().half())


def test_fp16_table_as_fp16_is_not_copied():
    x = _table().astype(np.float16)
    table = compress(x, "fp16")
    assert table.codes.data_ptr() == x.ctypes.data and table.array is x


@pytest.mark.parametrize("bad, error, words", [("zip", ValueError, "none, fp16, bf16, int8"), (None, ValueError, "needs a codec")])
def test_unknown_codec_lists_the_valid_ones(bad, error, words):
    with pytest.raises(error, match=words):
        compress(_table(), bad)


def test_bad_inputs_are_named():
    x = _table()
    y = x.copy()
    y[5, 3] = np.nan
    with pytest.raises(ValueError, match="row 5, column 3"):
        compress(y, "int8")
    y[5, 3] = np.inf
    with pytest.raises(ValueError, match="row 5, column 3"):
        compress(y, "fp16")
    big = x.copy()
    big[7, 2] = 65520.0  # the first value that rounds to fp16's infinity
    with pytest.raises(ValueError, match="65520.0 at row 7, column 2 is beyond fp16's range.*bf16"):
        compress(big, "fp16")
    assert torch.isfinite(compress(big, "bf16").decode()).all()
    with pytest.raises(ValueError, match="2-D"):
        compress(x[0], "int8")
    with pytest.raises(TypeError, match="cannot compress a table of bool with codec 'int8'"):
        compress(x > 0, "int8")
    with pytest.raises(TypeError, match="real floating-point numbers, but got complex64"):
        compress(x.astype(np.complex64), "int8")
    with pytest.raises(TypeError, match="numpy.ndarray"):
        compress([[1.0]], "int8")
    with pytest.raises(ValueError, match="axis must be one of column, row"):
        compress(x, "int8", axis="col")
    with pytest.raises(ValueError, match="method must be one of minmax, absmax"):
        compress(x, "int8", method="std")
    with pytest.raises(ValueError, match="int8 options"):
        compress(x, "fp16", axis="row")
    with pytest.raises(ValueError, match=".npy"):
        compress("features.csv", "int8")
    with pytest.raises(FileNotFoundError, match="no such feature file"):
        compress("/nonexistent/features.npy", "int8")
    with pytest.raises(ValueError, match="host memory"):
        compress(torch.zeros(2, 2, device="meta"), "int8")


EXACT_DTYPES = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("dtype", EXACT_DTYPES, ids=str)
def test_integer_and_bool_tables_are_refused_before_anything_is_written(tmp_path, codec, dtype):
    """Every codec is lossy: an integer (bool) table would come back as inexact floats (2 -> 1.992)."""
    table = torch.arange(24).reshape(6, 4).remainder(5).to(dtype)
    name = str(dtype).replace("torch.", "")
    message = (
        f"cannot compress a table of {name} with codec '{codec}': every codec \\(fp16, bf16, int8\\) is lossy.*"
        "cast the table to float32 first.*compression='none'"
    )
    np.save(tmp_path / "features.npy", table.numpy())
    out = tmp_path / "compressed"
    for data in (table, table.numpy(), tmp_path / "features.npy"):
        with pytest.raises(TypeError, match=message):
            compress(data, codec, out=out)
        with pytest.raises(TypeError, match=message):
            dgl_zerocopy.FeatureStore(data, backend="cpu", compression=codec)
    with pytest.raises(TypeError, match=message):
        compressed_beside(tmp_path / "features.npy", codec)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["features.npy"], "nothing written: no folder, no temporary one"
    # The fix the message names: cast to float32 (inexact values accepted) or keep it uncompressed.
    decoded = dgl_zerocopy.FeatureStore(table.float(), backend="cpu", compression=codec).gather(torch.arange(6))
    assert decoded.dtype == torch.float32 and torch.allclose(decoded, table.float(), atol=4 / 255)
    if dtype != torch.bool:  # an uncompressed store takes integer tables (not bool) and gathers them exactly
        assert torch.equal(dgl_zerocopy.FeatureStore(table, backend="cpu").gather(torch.arange(6)), table)


def test_codec_contract_errors():
    with pytest.raises(ValueError, match="per-row int8 decode needs the ids"):
        compress(_table(), "int8", axis="row").codec.decode(torch.zeros(2, 37, dtype=torch.int8))
    with pytest.raises(ValueError, match="none, fp16, bf16, int8"):
        Codec("int4")


@pytest.mark.parametrize("codec, form", [("fp16", {}), ("bf16", {}), ("int8", {}), ("int8", {"axis": "row"}), ("int8", {"method": "absmax"})])
def test_save_and_load_round_trip(tmp_path, codec, form):
    x = _table(rows=500, cols=33)
    src = tmp_path / "features.npy"
    np.save(src, x)
    out = tmp_path / "compressed"
    saved = compress(src, codec, out=out, chunk_bytes=4096, **form)  # many slabs
    in_memory = compress(x, codec, **form)
    assert is_compressed_dir(out) and saved.path == out
    meta = json.loads((out / "compression.json").read_text())
    assert meta["codec"] == codec and meta["shape"] == [500, 33] and meta["source"]["size"] == src.stat().st_size
    loaded = load_compressed(out)
    for table in (saved, loaded):
        assert isinstance(table.array, np.memmap) and not table.array.flags.writeable
        assert torch.equal(
            table.codes.view(torch.int8) if codec == "int8" else table.codes.view(torch.int16),
            in_memory.codes.view(torch.int8) if codec == "int8" else in_memory.codes.view(torch.int16),
        )
        assert torch.equal(table.decode(), in_memory.decode())
        assert table.nbytes == in_memory.nbytes
    assert sorted(os.listdir(out)) == sorted(["codes.npy", "compression.json", "digests.json"] + (["offset.npy", "scale.npy"] if codec == "int8" else []))
    # The codes are a plain .npy (bf16 as int16), readable without this package.
    assert np.load(out / "codes.npy").dtype == {"fp16": np.float16, "bf16": np.int16, "int8": np.int8}[codec]
    # Written again in place: replaced, never half-written.
    again = compress(x * 2, codec, out=out, **form)
    assert torch.equal(again.decode(), compress(x * 2, codec, **form).decode())
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left


def test_out_refuses_a_folder_with_other_files(tmp_path):
    (tmp_path / "mine.txt").write_text("keep me")
    with pytest.raises(ValueError, match="not a compressed table"):
        compress(_table(), "int8", out=tmp_path)
    assert (tmp_path / "mine.txt").read_text() == "keep me"
    with pytest.raises(FileNotFoundError, match="compress"):
        load_compressed(tmp_path)


def test_damaged_folders_are_refused(tmp_path):
    out = tmp_path / "c"
    compress(_table(), "int8", out=out)
    meta = json.loads((out / "compression.json").read_text())
    (out / "compression.json").write_text(json.dumps({**meta, "format": 99}))
    with pytest.raises(ValueError, match="format 99"):
        load_compressed(out)
    (out / "compression.json").write_text(json.dumps({**meta, "shape": [1, 1]}))
    with pytest.raises(ValueError, match="damaged"):
        load_compressed(out)


def test_compressed_beside_writes_once_and_follows_the_source(tmp_path):
    src = tmp_path / "features.npy"
    np.save(src, _table())
    folder = compressed_beside(src, "int8")
    assert folder == tmp_path / "features.int8-column-minmax"
    first = (folder / "codes.npy").stat().st_mtime_ns
    assert compressed_beside(src, "int8") == folder and (folder / "codes.npy").stat().st_mtime_ns == first  # reused
    assert compressed_beside(src, "fp16") == tmp_path / "features.fp16"
    np.save(src, _table() + 1)  # the source changed: written again
    os.utime(src, ns=(first + 10**9, first + 10**9))
    compressed_beside(src, "int8")
    assert torch.equal(load_compressed(folder).decode(), compress(_table() + 1, "int8").decode())


@pytest.mark.parametrize("codec, form", [("int8", {}), ("int8", {"axis": "row"}), ("fp16", {}), ("bf16", {})])
def test_conversion_memory_is_bounded_by_the_chunk(tmp_path, codec, form):
    """A 32 MiB float32 table converted in 1 MiB slabs: the memory Python allocates beside the codes
    stays a few slabs, never a float32 copy (NumPy reports its allocations to tracemalloc)."""
    x = np.random.default_rng(0).standard_normal((4096, 2048), dtype=np.float32)
    chunk = 1 << 20
    tracemalloc.start()
    try:
        compress(x, codec, out=tmp_path / "c", chunk_bytes=chunk, **form)  # codes go to a file map
        _, to_file = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        before, _ = tracemalloc.get_traced_memory()
        table = compress(x, codec, chunk_bytes=chunk, **form)  # codes in RAM
        _, in_ram = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    codes = table.codes.numel() * table.codes.element_size()
    assert to_file < 6 * chunk, to_file
    assert in_ram - before < codes + 4 * 4096 * 2 + 6 * chunk, (in_ram - before, codes)
    assert x.nbytes > codes + 6 * chunk  # the bound is well below a float32 copy


def test_share_memory_keeps_the_values():
    table = compress(_table(), "int8", axis="row")
    expected = table.decode()
    shared = table.share_memory_()
    assert shared.codes.is_shared() and shared.codec.scale.is_shared()
    assert torch.equal(shared.decode(), expected)


def test_ogb_loader_keeps_the_compressed_features_in_its_cache(tmp_path, monkeypatch):
    pytest.importorskip("dgl")
    from test_ogb import _raw_data, write_ogb

    from dgl_zerocopy import FeatureStore
    from dgl_zerocopy.data.ogb import compressed_features

    monkeypatch.setattr("builtins.input", lambda *a: pytest.fail("input() was called"))
    data = _raw_data()
    meta = write_ogb(tmp_path / "ds", "ogbn-arxiv", data)
    folder = compressed_features("ogbn-arxiv", tmp_path, "int8", meta_dict=meta)
    assert folder == tmp_path / "ds" / "dgl_zerocopy" / "features.int8-column-minmax"
    store = FeatureStore(folder, backend="cpu")
    expected = compress(data["feat"].astype(np.float32), "int8").decode()
    assert torch.equal(store.gather(torch.arange(store.shape[0])), expected)
    written = (folder / "codes.npy").stat().st_mtime_ns
    assert compressed_features("ogbn-arxiv", tmp_path, "int8", meta_dict=meta) == folder
    assert (folder / "codes.npy").stat().st_mtime_ns == written  # reused, not written again


BIG = float(np.finfo(np.float32).max)
TINY = float(np.finfo(np.float32).smallest_subnormal)


def _extremes() -> np.ndarray:
    """float32's largest of both signs, the smallest subnormals, zeros, and mixtures of them: each
    row a case (all ±max, max with -max, max with 0, subnormals alone, subnormals beside max, zeros,
    ordinary values beside -max); the tests use it and its transpose, so each is a row and a column."""
    cases = [
        [BIG, BIG, BIG, BIG],
        [-BIG, -BIG, -BIG, -BIG],
        [BIG, -BIG, BIG, -BIG],
        [BIG, 0.0, -0.0, BIG],
        [-BIG, 0.0, 1.0, -BIG],
        [TINY, -TINY, 2 * TINY, 0.0],
        [TINY, BIG, -TINY, 0.0],
        [0.0, 0.0, -0.0, 0.0],
        [1.5, -BIG, 2.5e-38, 3.0],
        [np.nextafter(np.float32(BIG), np.float32(0)), BIG, BIG, BIG],
    ]
    return np.array(cases, dtype=np.float32)


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("axis, method", INT8_FORMS)
def test_int8_extremes_decode_finite_within_half_a_step(axis, method):
    x = _extremes()
    for table_x in (x, x.T.copy()):
        with np.errstate(over="raise", invalid="raise", divide="raise"):
            table = compress(table_x, "int8", axis=axis, method=method)
        decoded = table.decode()
        ids = torch.arange(len(table_x))
        assert torch.equal(decoded, table.codec.decode(table.codes, ids))  # the reference decode
        got = decoded.numpy().astype(np.float64)
        assert np.isfinite(got).all(), got
        assert np.all(np.abs(got - table_x) <= _int8_bound(table_x, table.codec))
        assert np.all(np.sign(got[np.abs(table_x) == BIG]) == np.sign(table_x[np.abs(table_x) == BIG]))


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("codec, dtype", [("fp16", torch.float16), ("bf16", torch.bfloat16)])
def test_16bit_extremes_equal_torchs_casts_or_are_refused(codec, dtype):
    small = np.array([[TINY, -TINY, 0.0, -0.0], [2.0**-24, -(2.0**-25), 1e-40, 65504.0]], dtype=np.float32)
    table = compress(small, codec)
    assert torch.equal(table.decode(), torch.from_numpy(small).to(dtype).float())
    bf16_largest = float(torch.finfo(torch.bfloat16).max)
    fits = np.array([[bf16_largest, -bf16_largest, 2.0**128 - 2.0**119 - 2.0**104, 0.0]], dtype=np.float32)
    if codec == "bf16":
        assert torch.equal(compress(fits, codec).decode(), torch.from_numpy(fits).to(dtype).float())
    for value in (BIG, -BIG, 2.0**128 - 2.0**119):  # torch's cast of these is ±inf: refused, named
        over = np.zeros((1, 4), dtype=np.float32)
        over[0, 2] = value
        with pytest.raises(ValueError, match=f"at row 0, column 2 is beyond {codec}'s range"):
            compress(over, codec)


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("codec", CODECS)
def test_a_float64_value_beyond_float32_is_named_as_out_of_range(codec):
    x = _table().astype(np.float64)
    x[4, 6] = -1e300
    with pytest.raises(ValueError, match=r"-1e\+300 at row 4, column 6, out of float32's range"):
        compress(x, codec)
    with pytest.raises(ValueError, match=r"-1e\+300 at row 4, column 6, out of float32's range"):
        compress(torch.from_numpy(x), codec)
