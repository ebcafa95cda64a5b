"""Where a table's rows lie in a file: a ``.npy`` (its header read, never its data) or the codes
file of a folder written by :func:`dgl_zerocopy.compress`. Checks the file holds every row the
header promises (a truncated file is refused here, before anything is read or allocated)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..compression import Codec, load_compressed
from ..compression.table import is_compressed_dir
from ..table_input import SUPPORTED_DTYPES

#: NumPy dtype -> torch dtype of the tables a store gathers (NumPy has no bfloat16).
_TORCH_DTYPES = {torch.empty((), dtype=d).numpy().dtype: d for d in SUPPORTED_DTYPES if d != torch.bfloat16}


@dataclass(frozen=True)
class TableFile:
    """Rows of ``shape`` and ``dtype`` (the stored dtype: a compressed table's codes) at byte
    ``offset`` of ``path``, row after row. ``codec``/``method``/``folder`` describe a compressed
    folder (None for a plain ``.npy``)."""

    path: Path
    offset: int
    shape: tuple[int, int]
    dtype: torch.dtype
    codec: Codec | None = None
    method: str | None = None
    folder: Path | None = None

    @property
    def row_bytes(self) -> int:
        return self.shape[1] * torch.empty((), dtype=self.dtype).element_size()


def open_table_file(data) -> TableFile:
    """The :class:`TableFile` of ``data``: a ``.npy`` path or a compressed folder."""
    if not isinstance(data, (str, os.PathLike)):
        raise TypeError(
            f"storage=StorageTier(...) keeps the rows in a file: data must be a .npy path or a folder written by dgl_zerocopy.compress(), but got {type(data).__name__}"
        )
    path = Path(data)
    if path.is_dir():
        if not is_compressed_dir(path):
            raise FileNotFoundError(f"{str(path)!r} is a folder but not a compressed table (write one with dgl_zerocopy.compress(data, codec, out=DIR))")
        table = load_compressed(path)  # checks every file against compression.json
        codes = path / "codes.npy"
        offset, shape, _ = _npy_header(codes)
        return TableFile(codes, offset, shape, table.codec.stored_dtype, table.codec, table.method, path)
    if path.suffix != ".npy":
        raise ValueError(f"a path must name a .npy file, but got {str(path)!r}")
    if not path.exists():
        raise FileNotFoundError(f"no such feature file: {str(path)!r}")
    offset, shape, dtype = _npy_header(path)
    if dtype not in _TORCH_DTYPES:
        raise TypeError(f"{str(path)!r} holds {dtype}, which a FeatureStore does not gather; use one of: {', '.join(str(d) for d in _TORCH_DTYPES)}")
    return TableFile(path, offset, shape, _TORCH_DTYPES[dtype])


def _npy_header(path: Path) -> tuple[int, tuple[int, int], np.dtype]:
    """(data offset, 2-D shape, dtype) of a ``.npy`` file, after checking it holds all its rows."""
    with open(path, "rb") as f:
        try:
            version = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read(f)
        except ValueError as error:
            raise ValueError(f"{str(path)!r} is not a .npy file ({error}); write it with numpy.save") from None
        offset = f.tell()
    if len(shape) != 2:
        raise ValueError(f"{str(path)!r} holds an array of shape {shape}; a feature table must be 2-D (rows, features)")
    if fortran:
        raise ValueError(f"{str(path)!r} is stored column-major (Fortran order); save a row-major copy: numpy.save(path, numpy.ascontiguousarray(a))")
    need = offset + shape[0] * shape[1] * dtype.itemsize
    size = path.stat().st_size
    if size < need:
        raise ValueError(
            f"{str(path)!r} is truncated: its header says {shape[0]} rows of {shape[1]} {dtype} ({need} bytes with the header), "
            f"but the file has {size} bytes; write it again (numpy.save)"
        )
    return offset, (int(shape[0]), int(shape[1])), dtype
