"""FeatureStore over compressed host features: every gather path equals the reference decode.

Reference: ``codec.decode(codes[ids], ids, out_dtype)``; for fp16/bf16 also torch's own
``features[ids].to(fp16 or bf16).to(out_dtype)``. Every mix of codec, int8 form, output dtype, id
dtype and row width (1 to 4099 columns) on the ``cpu`` backend; the CUDA paths where a GPU exists."""

import pickle
import re
import warnings

import numpy as np
import pytest
import torch
from conftest import SMALL, devices

from dgl_zerocopy import FeatureStore, compress
from dgl_zerocopy.store.compression import CompressedTable, DamagedTableError, compressed_beside
from dgl_zerocopy.training.config import ConfigError, build_config

CASES = [("fp16", {}), ("bf16", {}), ("int8", {}), ("int8", {"axis": "row"}), ("int8", {"method": "absmax"}), ("int8", {"axis": "row", "method": "absmax"})]
OUT_DTYPES = [torch.float32, torch.float16, torch.bfloat16]
WIDTHS = [1, 3, 100, 129, 4099]
SIXTEEN = {"fp16": torch.float16, "bf16": torch.bfloat16}


def _features(rows: int, cols: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    scales = 10.0 ** (torch.rand(cols, generator=g) * 4 - 2)  # columns 100x apart and more
    return torch.randn(rows, cols, generator=g) * scales + torch.randn(cols, generator=g)


def _ids(rows: int, n: int, dtype: torch.dtype, seed: int = 1) -> torch.Tensor:
    ids = torch.randint(0, rows, (n,), generator=torch.Generator().manual_seed(seed)).to(dtype)
    ids[:3] = torch.tensor([rows - 1, 0, rows - 1], dtype=dtype)  # both ends and a repeat
    return ids


def _reference(store: FeatureStore, ids: torch.Tensor) -> torch.Tensor:
    return store.codec.decode(store._table[ids.long()], ids, store.dtype)


@pytest.mark.parametrize("codec, form", CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("out_dtype", OUT_DTYPES, ids=str)
@pytest.mark.parametrize("id_dtype", [torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("cols", WIDTHS)
def test_cpu_gather_equals_the_reference_decode(codec, form, out_dtype, id_dtype, cols):
    rows = 40
    x = _features(rows, cols)
    store = FeatureStore(compress(x, codec, **form), backend="cpu", device="cpu", out_dtype=out_dtype)
    ids = _ids(rows, 25, id_dtype)
    got = store.gather(ids)
    assert got.dtype == out_dtype and got.shape == (25, cols)
    assert torch.equal(got, _reference(store, ids))
    if codec in SIXTEEN:
        assert torch.equal(got, x[ids.long()].to(SIXTEEN[codec]).to(out_dtype))
    out = torch.empty(25, cols, dtype=out_dtype)
    assert store.gather(ids, out=out) is out and torch.equal(out, _reference(store, ids))
    assert store.gather(ids[:1]).shape == (1, cols)
    assert store.gather(ids[:0]).shape == (0, cols)


@pytest.mark.parametrize("codec, form", CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("tile_bytes", [1, 100, 4096])
def test_cpu_decode_tile_by_tile_equals_the_reference(monkeypatch, codec, form, tile_bytes):
    """The CPU backend gathers and decodes a tile of rows at a time: tiles of one row, of a few rows
    with a ragged last tile, and many rows, all give the reference."""
    monkeypatch.setattr("dgl_zerocopy.store.backends.cpu.TILE_BYTES", tile_bytes)
    x = _features(500, 37)
    store = FeatureStore(compress(x, codec, **form), backend="cpu")
    for ids in (_ids(500, 999, torch.int64), _ids(500, 7, torch.int32)):
        assert torch.equal(store.gather(ids), _reference(store, ids))


@pytest.mark.parametrize("codec", ["fp16", "bf16", "int8"])
def test_compression_argument_equals_compress_then_store(codec):
    x = _features(300, 17)
    a = FeatureStore(x, backend="cpu", compression=codec)
    b = FeatureStore(compress(x, codec), backend="cpu")
    ids = _ids(300, 200, torch.int64)
    assert torch.equal(a.gather(ids), b.gather(ids))
    assert torch.equal(a.gather(ids), _reference(a, ids))
    # A NumPy array and a .npy path convert the same way.
    assert torch.equal(FeatureStore(x.numpy(), backend="cpu", compression=codec).gather(ids), a.gather(ids))


def test_int8_rows_stay_within_half_a_step():
    x = _features(500, 64)
    store = FeatureStore(x, backend="cpu", compression="int8")
    ids = torch.arange(500)
    err = (store.gather(ids).double() - x.double()).abs()
    assert torch.all(err <= store.codec.scale.double() / 2 + 1e-6 * (x.double().abs() + store.codec.offset.double().abs() + 1))


def test_properties_describe_host_and_gathered_dtypes():
    x = _features(1000, 100)
    plain = FeatureStore(x, backend="cpu")
    assert (plain.dtype, plain.stored_dtype, plain.compression, plain.codec, plain.nbytes) == (torch.float32, torch.float32, None, None, 400_000)
    fp16 = FeatureStore(x, backend="cpu", compression="fp16")
    assert (fp16.dtype, fp16.stored_dtype, fp16.compression, fp16.nbytes) == (torch.float32, torch.float16, "fp16", 200_000)
    bf16 = FeatureStore(x, backend="cpu", compression="bf16", out_dtype=torch.bfloat16)
    assert (bf16.dtype, bf16.stored_dtype, bf16.nbytes) == (torch.bfloat16, torch.bfloat16, 200_000)
    col = FeatureStore(x, backend="cpu", compression="int8")
    assert (col.dtype, col.stored_dtype, col.nbytes) == (torch.float32, torch.int8, 100_000 + 2 * 4 * 100)
    row = FeatureStore(compress(x, "int8", axis="row"), backend="cpu", out_dtype=torch.float16)
    assert (row.dtype, row.nbytes, row.shape, len(row)) == (torch.float16, 100_000 + 2 * 4 * 1000, (1000, 100), 1000)
    assert "compression='int8' (stored torch.int8)" in repr(col) and "dtype=torch.float16" in repr(row)
    assert "compression" not in repr(plain)


def test_an_fp16_table_stored_as_fp16_is_not_copied():
    x = _features(50, 8).half()
    store = FeatureStore(x, backend="cpu", compression="fp16")
    assert store._table.data_ptr() == x.data_ptr()
    assert torch.equal(store.gather(torch.arange(50)), x.float())


def test_bad_arguments_name_the_fix(tmp_path):
    x = _features(20, 4)
    with pytest.raises(ValueError, match="unknown compression 'zstd'; use one of: none, fp16, bf16, int8"):
        FeatureStore(x, backend="cpu", compression="zstd")
    with pytest.raises(ValueError, match="out_dtype=torch.float16 needs a compressed table.*compression="):
        FeatureStore(x, backend="cpu", out_dtype=torch.float16)
    assert FeatureStore(x, backend="cpu", out_dtype=torch.float32).dtype == torch.float32  # its own dtype is fine
    with pytest.raises(ValueError, match="out_dtype must be one of float32, float16, bfloat16"):
        FeatureStore(x, backend="cpu", compression="int8", out_dtype=torch.int8)
    with pytest.raises(ValueError, match="compressed as 'fp16'"):
        FeatureStore(compress(x, "fp16"), backend="cpu", compression="int8")
    store = FeatureStore(x, backend="cpu", compression="int8")
    with pytest.raises(ValueError, match="contiguous torch.float32 tensor of shape"):
        store.gather(torch.arange(3), out=torch.empty(3, 4, dtype=torch.float16))
    with pytest.raises(IndexError, match="id 20 at position 1"):
        store.gather(torch.tensor([0, 20]))
    (tmp_path / "other").mkdir()
    with pytest.raises(FileNotFoundError, match="compress"):
        FeatureStore(tmp_path / "other", backend="cpu")
    assert FeatureStore(x, backend="cpu", compression="none").compression is None


@pytest.mark.parametrize("codec, form", CASES, ids=lambda v: str(v))
def test_store_from_a_folder_maps_and_pickles_by_file(tmp_path, codec, form):
    x = _features(300, 33)
    folder = tmp_path / "feat"
    compress(x.numpy(), codec, out=folder, **form)
    store = FeatureStore(folder, backend="cpu", device="cpu")
    same = FeatureStore(str(folder), backend="cpu", compression=codec)  # naming the codec it holds is fine
    ids = _ids(300, 120, torch.int32)
    expected = compress(x, codec, **form).decode(ids)
    assert torch.equal(store.gather(ids), expected) and torch.equal(same.gather(ids), expected)
    assert store._file is not None and store._file[0] == str(folder / "codes.npy")
    blob = pickle.dumps(store)
    assert len(blob) < 4096  # the file's name, not its bytes (nor the scales)
    clone = pickle.loads(blob)
    assert clone.compression == codec and clone.stored_dtype == store.stored_dtype and clone.dtype == torch.float32
    assert torch.equal(clone.gather(ids), expected)


def test_a_shared_compressed_table_pickles_and_a_private_one_says_how():
    x = _features(200, 16)
    ids = _ids(200, 50, torch.int64)
    shared = FeatureStore(compress(x, "int8", axis="row").share_memory_(), backend="cpu", out_dtype=torch.bfloat16)
    clone = pickle.loads(pickle.dumps(shared))
    assert clone.dtype == torch.bfloat16 and torch.equal(clone.gather(ids), shared.gather(ids))
    private = FeatureStore(x, backend="cpu", compression="int8")
    with pytest.raises(TypeError, match=r"int8 codes .* private memory.*compress\(data, 'int8', out=DIR\)"):
        pickle.dumps(private)


def test_a_mapped_npy_is_compressed_beside_it_once(tmp_path, small_dataset):
    from dataclasses import replace

    from dgl_zerocopy.training.sources import feature_table

    path = tmp_path / "features.npy"
    np.save(path, small_dataset.features)
    mapped = replace(small_dataset, features=np.load(path, mmap_mode="r"))
    data, codec = feature_table(mapped, "int8")
    assert data == tmp_path / "features.int8-column-minmax" and codec is None
    assert feature_table(mapped, "int8")[0] == data  # reused
    _damage(data, "header")  # what `train --feature-compression int8` meets: written again, with a warning
    with pytest.warns(UserWarning, match="codes.npy' is damaged"):
        assert feature_table(mapped, "int8") == (data, None)
    assert FeatureStore(data, backend="cpu").shape == small_dataset.features.shape
    in_memory, codec = feature_table(small_dataset, "fp16")  # not a file: the store compresses it
    assert in_memory is small_dataset.features and codec == "fp16"
    assert feature_table(small_dataset, None) == (small_dataset.features, None)
    assert compressed_beside(path, "int8") == data


@pytest.mark.parametrize("source", ["cpu", "dgl-storage"])
def test_training_sources_gather_decoded_rows(small_dataset, source):
    from dgl_zerocopy.loading.timing import StageTimer
    from dgl_zerocopy.training.sources import make_source

    src = make_source(source, small_dataset, [5, 5], torch.device("cpu"), compression="int8")
    try:
        assert src.features.compression == "int8"
        blocks, x, _ = next(iter(src.batches(torch.from_numpy(small_dataset.train_idx), 64, False, StageTimer())))
        ids = blocks[0].srcdata["_ID"]
        assert x.dtype == torch.float32 and torch.equal(x, _reference(src.features, ids))
    finally:
        src.close()
    with pytest.raises(ValueError, match="FeatureStore source"):
        make_source("dgl", small_dataset, [5, 5], torch.device("cpu"), compression="int8")


def test_config_and_cli_flag(capsys):
    assert build_config({}, {"feature_compression": "int8"}).feature_compression == "int8"
    assert build_config({}, {}).feature_compression == "none"
    assert build_config({"feature_compression": None}, {}).feature_compression == "none"
    with pytest.raises(ConfigError, match="^unknown compression 'int4'; use one of: none, fp16, bf16, int8$"):
        build_config({}, {"feature_compression": "int4"})
    with pytest.raises(ConfigError, match="feature_compression 'fp16' needs a FeatureStore feature source"):
        build_config({}, {"feature_compression": "fp16", "feature_source": "dgl"})

    from dgl_zerocopy.cli import main

    code = main(
        [
            "train",
            "--num-nodes",
            str(SMALL.num_nodes),
            "--epochs",
            "1",
            "--fanouts",
            "3,3",
            "--batch-size",
            "512",
            "--hidden",
            "16",
            "--device",
            "cpu",
            "--prefetch",
            "0",
            "--no-progress",
            "--feature-compression",
            "int8",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and "features stored as int8" in out
    assert main(["train", "--feature-compression", "zip"]) == 2
    assert "unknown compression 'zip'" in capsys.readouterr().err


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("backend", ["cpu", "gpu"])
@pytest.mark.parametrize("codec, form", CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("out_dtype", OUT_DTYPES, ids=str)
def test_device_gathers_equal_the_reference(device, backend, codec, form, out_dtype):
    if device == "cpu" and backend == "gpu":
        pytest.skip("the gpu backend needs CUDA")
    x = _features(600, 129)
    store = FeatureStore(compress(x, codec, **form), backend=backend, device=device, out_dtype=out_dtype)
    for ids in (_ids(600, 300, torch.int32), _ids(600, 300, torch.int64).to(device)):
        got = store.gather(ids)
        assert got.device.type == device and got.dtype == out_dtype
        assert torch.equal(got.cpu(), _reference(store, ids.cpu()))
    store.close()


def test_compressed_table_repr_and_decode():
    table = compress(_features(10, 3).numpy(), "int8", axis="row", method="absmax")
    assert isinstance(table, CompressedTable)
    assert repr(table) == "CompressedTable(shape=(10, 3), codec='int8', axis='row', method='absmax')"
    assert torch.equal(table.decode([1, 2]), table.decode()[1:3])


def _damage(folder, how: str):
    """Damage one file of a compressed folder; return the file."""
    name = {"header": "codes.npy", "short": "codes.npy", "scale": "scale.npy", "dtype": "offset.npy", "meta": "compression.json"}[how]
    path = folder / name
    if how == "dtype":
        np.save(path, np.zeros(np.load(path).shape, dtype=np.float64))
    else:
        with open(path, "r+b") as f:  # cut short: inside the header, or one byte of the codes gone
            f.truncate({"header": 50, "short": path.stat().st_size - 1}.get(how, 20))
    return path


@pytest.mark.parametrize("how", ["header", "short", "scale", "dtype", "meta"])
def test_a_damaged_folder_beside_a_npy_is_written_again_with_a_warning(tmp_path, how):
    x = _features(300, 20).numpy()
    np.save(tmp_path / "features.npy", x)
    folder = compressed_beside(tmp_path / "features.npy", "int8")
    path = _damage(folder, how)
    with pytest.warns(UserWarning, match=f"the compressed features file {str(path)!r} is damaged .*; writing .* again from"):
        assert compressed_beside(tmp_path / "features.npy", "int8") == folder
    ids = _ids(300, 100, torch.int64)
    assert torch.equal(FeatureStore(folder, backend="cpu").gather(ids), compress(x, "int8").decode(ids))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # whole again: reused without a word
        assert compressed_beside(tmp_path / "features.npy", "int8") == folder


@pytest.mark.parametrize("how", ["header", "short", "scale", "dtype", "meta"])
def test_a_damaged_folder_opened_directly_names_the_file_and_the_fix(tmp_path, how):
    folder = tmp_path / "feat"
    compress(_features(300, 20), "int8", out=folder)
    path = _damage(folder, how)
    fix = re.escape(f"write the folder again with dgl_zerocopy.compress(data, codec, out={str(folder)!r})")
    with pytest.raises(DamagedTableError, match=f"^the compressed table file {re.escape(repr(str(path)))} is damaged \\(.+\\); {fix}$"):
        FeatureStore(folder, backend="cpu")
