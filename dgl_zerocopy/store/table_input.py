"""What a :class:`~dgl_zerocopy.store.feature_store.FeatureStore` takes as its table: the checks and
conversions of its ``data`` (tensor, NumPy array, ``.npy`` path, compressed table or folder) and
of the dtype its rows are gathered as. CPU only; no device is touched here.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import torch

from .compression import CODECS, Codec, CompressedTable, compress, load_compressed
from .host_files import human_size, is_shared_file_map, npy_file, tensor_view  # noqa: F401 - human_size is imported from here by much of the package

ArrayLike = torch.Tensor | np.ndarray | str | os.PathLike | CompressedTable
#: The dtypes a compressed table may be gathered as (``out_dtype``).
OUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)


def as_table(data: ArrayLike) -> tuple[torch.Tensor, np.ndarray | None]:
    """The table as a 2-D contiguous CPU tensor, and the NumPy array it views when that memory must
    not be written (a read-only array, or a shared file map), else None."""
    read_only = None
    if isinstance(data, (str, os.PathLike)):
        data = np.load(npy_file(data), mmap_mode="r")
    if isinstance(data, np.ndarray):
        # Pages the store must never write: a read-only array, or a shared file map of any mode
        # (pinning it writable would mark its pages dirty and write them back to the file).
        read_only = data if not data.flags.writeable or is_shared_file_map(data) else None
        data = tensor_view(data)  # a read-only memory map is fine: the store never writes to it
    if not isinstance(data, torch.Tensor):
        raise TypeError(f"data must be a CPU torch.Tensor, a numpy.ndarray or a .npy path, but got {type(data).__name__}")
    if data.device.type != "cpu":
        raise ValueError(f"data must live in host memory, but it is on {data.device}; pass data.cpu() or use backend='gpu' with a host copy")
    if data.dim() != 2:
        raise ValueError(f"data must be 2-D (rows, features), but got shape {tuple(data.shape)}; reshape it, e.g. data.reshape(len(data), -1)")
    if data.dtype not in SUPPORTED_DTYPES:
        names = ", ".join(str(d).replace("torch.", "") for d in SUPPORTED_DTYPES)
        raise TypeError(f"data dtype {data.dtype} is not supported; use one of: {names}")
    if not data.is_contiguous():
        warnings.warn("data is not contiguous: FeatureStore keeps a contiguous copy (pass a contiguous table to avoid it)", stacklevel=3)
        data, read_only = data.contiguous(), None
    return data, read_only


def num_rows(data) -> int | None:
    """The row count of ``data`` when it is known without reading it (a tensor, array, .npy file or
    compressed table), so that the cache arguments are checked before anything else is done."""
    if isinstance(data, CompressedTable):
        return int(data.shape[0])
    if isinstance(data, (torch.Tensor, np.ndarray)) and data.ndim == 2:
        return int(data.shape[0])
    return None


def compressed_table(data, codec: str | None) -> CompressedTable | None:
    """``data`` as a compressed table when it is one (a :class:`CompressedTable` or a folder written by
    :func:`~dgl_zerocopy.compress`) or when ``codec`` asks to compress it (once, in slabs); else None."""
    if isinstance(data, (str, os.PathLike)) and Path(data).is_dir():
        data = load_compressed(data)  # raises FileNotFoundError naming compress() if it is another folder
    if isinstance(data, CompressedTable):
        if codec is not None and codec != data.codec.name:
            raise ValueError(
                f"compression={codec!r}, but the table is compressed as {data.codec.name!r}; leave compression out (or None) for a compressed table"
            )
        return data
    if codec is None:
        return None
    return compress(data, codec)


def codes_view(table: torch.Tensor, codec: Codec) -> torch.Tensor:
    """The codes as ``codec.stored_dtype`` (bf16 codes are stored as their int16 bit pattern)."""
    if table.dtype != codec.stored_dtype:
        if codec.name == "bf16" and table.dtype == torch.int16:
            return table.view(torch.bfloat16)
        raise TypeError(f"codec {codec.name!r} needs {codec.stored_dtype} codes, but the table holds {table.dtype}")
    return table


def check_out_dtype(out_dtype, codec: str | None, table_dtype: torch.dtype | None = None) -> torch.dtype:
    """The dtype gathered rows have: a compressed table's ``out_dtype`` (default float32), or the
    table's own dtype for an uncompressed one (which cannot convert)."""
    if codec is None:
        if out_dtype is not None and out_dtype != table_dtype:
            raise ValueError(
                f"out_dtype={out_dtype} needs a compressed table: an uncompressed store gathers its own dtype "
                f"({table_dtype}); pass compression= one of {', '.join(CODECS)} as well"
            )
        return table_dtype
    if out_dtype is None:
        return torch.float32
    if out_dtype not in OUT_DTYPES:
        names = ", ".join(str(d).replace("torch.", "") for d in OUT_DTYPES)
        raise ValueError(f"out_dtype must be one of {names} for a compressed table, but got {out_dtype!r}")
    return out_dtype


def check_out_tensor(out, want: tuple[int, int], dtype: torch.dtype, device: torch.device) -> None:
    """Refuse a gather's ``out`` that is not a contiguous ``dtype`` tensor of shape ``want`` on ``device``."""
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor, but got {type(out).__name__}")
    if tuple(out.shape) != want or out.dtype != dtype or out.device != device or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous {dtype} tensor of shape {want} on {device}, but got {out.dtype} {tuple(out.shape)} on {out.device}")
