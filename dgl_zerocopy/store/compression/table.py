"""A compressed feature table in memory or on disk: :func:`compress`, :func:`load`, :class:`CompressedTable`.

On disk a compressed table is a folder::

    DIR/compression.json   {"format", "codec", "axis", "method", "shape", "source"}: written last
    DIR/codes.npy          (N, C) codes: float16, int8, or bf16 as its int16 bit pattern
    DIR/scale.npy          int8 only: float32, (C,) per column or (N,) per row
    DIR/offset.npy         int8 only: the same shape
    DIR/digests.json       each array's size and digest (:mod:`dgl_zerocopy.store.cache_files`)

Every array is a plain ``.npy``, memory-mapped read-only on load: ``FeatureStore(DIR)`` pins the
codes in place like any mapped table. A folder is written under a temporary name and renamed into
place, so a reader never sees half of one. A folder kept beside its ``.npy`` (:func:`compressed_beside`,
a cache) is reused only while its arrays are the bytes written (their digests); a folder opened
directly (:func:`load`) is checked for its dtypes and shapes only.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..cache_files import MANIFEST, DamagedFile, check_digests, partial_prefix, record_digests, sweep_partials
from ..host_files import npy_file, replace_dir, tensor_view
from ..host_memory import host_array
from .codec import CODECS, Codec, check_codec_name
from .encode import CHUNK_BYTES, CODE_NUMPY_DTYPES, check_int8_form, encode_into

log = logging.getLogger(__name__)

FORMAT = 1
META = "compression.json"
Source = torch.Tensor | np.ndarray | str | os.PathLike


@dataclass(frozen=True, eq=False)
class CompressedTable:
    """Codes plus the :class:`Codec` that decodes them. ``codes`` is a CPU tensor of
    ``codec.stored_dtype``; ``array`` the NumPy array it views, if any (a memory map when loaded from
    a folder: a FeatureStore pins and pickles it as a file); ``method`` the int8 range rule;
    ``path`` the folder it was loaded from."""

    codes: torch.Tensor
    codec: Codec
    method: str | None = None
    array: np.ndarray | None = None
    path: Path | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.codes.shape)  # type: ignore[return-value]

    @property
    def nbytes(self) -> int:
        """Host bytes: the codes plus the int8 scales and offsets."""
        return self.codes.numel() * self.codes.element_size() + params_nbytes(self.codec)

    def decode(self, ids=None, out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Rows ``ids`` (all rows when None) decoded by the reference :meth:`Codec.decode`."""
        if ids is None:
            ids = torch.arange(self.codes.shape[0])
        ids = torch.as_tensor(ids)
        return self.codec.decode(self.codes[ids.long()], ids, out_dtype)

    def share_memory_(self) -> CompressedTable:
        """Move the codes (and scales) into shared memory, so that stores over this table can be sent
        to other processes without a copy (call it before any FeatureStore pins the codes). A table
        loaded from a folder is shared as files already."""
        if self.path is None:
            self.codes.share_memory_()
            if self.codec.scale is not None:
                self.codec.scale.share_memory_()
                self.codec.offset.share_memory_()
            object.__setattr__(self, "array", None)  # the codes moved: the old array is not their memory
        return self

    def __repr__(self) -> str:
        form = f", axis={self.codec.axis!r}, method={self.method!r}" if self.codec.name == "int8" else ""
        where = f", path={str(self.path)!r}" if self.path is not None else ""
        return f"CompressedTable(shape={self.shape}, codec={self.codec.name!r}{form}{where})"


def params_nbytes(codec: Codec) -> int:
    if codec.scale is None:
        return 0
    return 4 * (codec.scale.numel() + codec.offset.numel())


def compress(
    data: Source,
    codec: str = "int8",
    out: str | os.PathLike | None = None,
    *,
    axis: str | None = None,
    method: str | None = None,
    chunk_bytes: int = CHUNK_BYTES,
) -> CompressedTable:
    """Compress a 2-D feature table with ``codec`` (``"fp16"``, ``"bf16"`` or ``"int8"``).

    ``data``: a CPU tensor, a NumPy array or a ``.npy`` path (memory-mapped, read a slab at a time),
    of floating-point values: every codec is lossy and decodes to floats, so an integer or bool
    table is refused with a ``TypeError`` (cast it to float first where inexact values will do).
    int8 options: ``axis`` ``"column"`` (default) or ``"row"``, ``method`` ``"minmax"`` (default)
    or ``"absmax"`` (see :mod:`dgl_zerocopy.store.compression.encode`). The conversion runs in slabs of
    ``chunk_bytes`` float32 bytes: the extra memory is a few slabs, never a float32 copy.

    ``out``: a folder to write (codes ``.npy`` plus scales and ``compression.json``; replaced if it
    holds a compressed table, refused if it holds anything else); the result then maps its files
    and ``FeatureStore(out)`` loads it later. Without ``out`` the codes are in RAM; an fp16 (bf16)
    table compressed as fp16 (bf16) is then used as it is, without a copy.
    """
    name = check_codec_name(codec)
    if name is None:
        raise ValueError("compress() needs a codec: one of fp16, bf16, int8")
    table, source = _source_table(data, name)
    if name == "int8":
        axis, method = check_int8_form(axis, method)
    elif axis is not None or method is not None:
        raise ValueError(f"axis and method are int8 options; codec {name!r} takes neither")
    if out is not None:
        return _write(table, name, Path(out), axis, method, chunk_bytes, source)
    same = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(name)
    if same is not None and _dtype_of(table) == same:
        return CompressedTable(_as_tensor(table), Codec(name), array=table if isinstance(table, np.ndarray) else None)
    codes = host_array(table.shape, CODE_NUMPY_DTYPES[name])  # the table FeatureStore pins: 2 MB pages by default
    result = encode_into(table, name, codes, axis=axis, method=method, chunk_bytes=chunk_bytes)
    return CompressedTable(_codes_tensor(codes, name), result, method=method, array=codes)


def load(path: str | os.PathLike) -> CompressedTable:
    """The compressed table in folder ``path`` (written by :func:`compress`), its arrays memory-mapped
    read-only. A file of it that does not open, or disagrees with ``compression.json`` (a file cut
    short, the wrong dtype or shape), raises :class:`DamagedTableError` naming the file and the fix."""
    path = Path(path)
    meta = read_meta(path)
    name, shape = meta["codec"], tuple(meta["shape"])
    codes = _open_array(path / "codes.npy", CODE_NUMPY_DTYPES[name], shape)
    if name == "int8":
        n = shape[1] if meta["axis"] == "column" else shape[0]
        scale, offset = (_open_array(path / f"{k}.npy", np.float32, (n,)) for k in ("scale", "offset"))
        codec = Codec("int8", tensor_view(scale), tensor_view(offset), meta["axis"])
    else:
        codec = Codec(name)
    return CompressedTable(_codes_tensor(codes, name), codec, method=meta.get("method"), array=codes, path=path)


class DamagedTableError(ValueError):
    """A file of a compressed-table folder does not open or disagrees with ``compression.json``:
    ``path`` is the file, ``reason`` what is wrong with it."""

    def __init__(self, path: Path, reason: str):
        super().__init__(
            f"the compressed table file {str(path)!r} is damaged ({reason}); "
            f"write the folder again with dgl_zerocopy.compress(data, codec, out={str(path.parent)!r})"
        )
        self.path, self.reason = path, reason


def is_compressed_dir(path) -> bool:
    """True when ``path`` is a folder written by :func:`compress`."""
    return isinstance(path, (str, os.PathLike)) and (Path(path) / META).is_file()


def read_meta(path: Path) -> dict:
    try:
        meta = json.loads((path / META).read_text())
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{str(path)!r} is not a compressed table: it has no {META} (write one with dgl_zerocopy.compress(data, codec, out=DIR))"
        ) from None
    except ValueError as e:
        raise DamagedTableError(path / META, f"not valid JSON: {e}") from None
    if not isinstance(meta, dict):
        raise DamagedTableError(path / META, f"holds a {type(meta).__name__}, not an object")
    if meta.get("format") != FORMAT:
        raise ValueError(f"{str(path)!r} holds compressed format {meta.get('format')!r}, this version reads {FORMAT}; compress the table again")
    shape = meta.get("shape")
    if meta.get("codec") not in CODECS:
        raise DamagedTableError(path / META, f"codec {meta.get('codec')!r} is none of {', '.join(CODECS)}")
    if not (isinstance(shape, list) and len(shape) == 2 and all(type(v) is int and v >= 0 for v in shape)):
        raise DamagedTableError(path / META, f"shape {shape!r} is not two row and column counts")
    if meta["codec"] == "int8" and meta.get("axis") not in ("column", "row"):
        raise DamagedTableError(path / META, f"int8 axis {meta.get('axis')!r} is neither 'column' nor 'row'")
    return meta


def compressed_beside(npy_path: str | os.PathLike, codec: str, *, axis: str | None = None, method: str | None = None, chunk_bytes: int = CHUNK_BYTES) -> Path:
    """The compressed form of the ``.npy`` file ``npy_path``, kept beside it as ``<stem>.<codec>/``
    (int8: ``<stem>.int8-<axis>-<method>/``): written on first use, reused while the source file is
    unchanged (same size and modification time) and its own arrays are the bytes written (their
    digests, :mod:`~dgl_zerocopy.store.cache_files`); rewritten when the source changed, and with a
    warning naming the file when the folder is damaged. Partial folders of writers that died are
    removed. Returns the folder."""
    npy_path = Path(npy_path)
    name = check_codec_name(codec)
    if name is None:
        raise ValueError("compressed_beside() needs a codec: one of fp16, bf16, int8")
    if name == "int8":
        axis, method = check_int8_form(axis, method)
    _source_table(npy_path, name)  # an integer table is refused, even where an older run compressed it
    folder = npy_path.with_name(f"{npy_path.stem}.{name}" + (f"-{axis}-{method}" if name == "int8" else ""))
    sweep_partials(folder.parent)
    if _matches(folder, npy_path):
        return folder
    log.info("compressing %s as %s into %s (once; later runs reuse it)", npy_path, folder.name.split(".", 1)[1], folder)
    compress(npy_path, name, out=folder, axis=axis, method=method, chunk_bytes=chunk_bytes)
    return folder


# -- internals ------------------------------------------------------------------------------


def _source_table(data: Source, codec: str) -> tuple[torch.Tensor | np.ndarray, dict | None]:
    """The 2-D floating-point table to read slab by slab, and a description of its file (when it is
    one). Checks only: nothing is read but a ``.npy`` header, nothing is written."""
    source = None
    if isinstance(data, (str, os.PathLike)):
        path = npy_file(data)
        stat = path.stat()
        source = {"path": str(path.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
        data = np.load(path, mmap_mode="r")
    if isinstance(data, torch.Tensor):
        if data.device.type != "cpu":
            raise ValueError(f"the features must be in host memory, but they are on {data.device}; pass data.cpu()")
        exact = not data.dtype.is_floating_point and not data.dtype.is_complex  # integers and bool
        ok = data.dtype.is_floating_point
    elif isinstance(data, np.ndarray):
        exact, ok = data.dtype.kind in "iub", data.dtype.kind == "f"
    else:
        raise TypeError(f"data must be a CPU torch.Tensor, a numpy.ndarray or a .npy path, but got {type(data).__name__}")
    if data.ndim != 2:
        raise ValueError(f"data must be 2-D (rows, features), but got shape {tuple(data.shape)}")
    dtype = str(data.dtype).replace("torch.", "")
    if exact:
        raise TypeError(
            f"cannot compress a table of {dtype} with codec {codec!r}: every codec ({', '.join(CODECS)}) is lossy and decodes to floats, "
            "so its values would come back as floats, and inexact (2 as 1.992 with int8); cast the table to float32 first if inexact "
            "values are acceptable (table.float(), array.astype(numpy.float32)), or keep it uncompressed (compression='none', the default) "
            "to gather it exactly"
        )
    if not ok:
        raise TypeError(f"data must hold real floating-point numbers, but got {dtype}")
    return data, source


def _dtype_of(table) -> torch.dtype | None:
    if isinstance(table, torch.Tensor):
        return table.dtype
    return torch.float16 if table.dtype == np.float16 else None


def _as_tensor(table) -> torch.Tensor:
    return tensor_view(table) if isinstance(table, np.ndarray) else table


def _codes_tensor(codes: np.ndarray, name: str) -> torch.Tensor:
    tensor = tensor_view(codes)
    return tensor.view(torch.bfloat16) if name == "bf16" else tensor


def _write(table, name: str, out: Path, axis, method, chunk_bytes: int, source: dict | None) -> CompressedTable:
    if out.exists() and not (out.is_dir() and (is_compressed_dir(out) or not any(out.iterdir()))):
        raise ValueError(
            f"out={str(out)!r} exists and is not a compressed table (or an empty folder); choose a new folder, so that nothing else in it is replaced"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=partial_prefix(out.name), dir=out.parent))
    try:
        codes = np.lib.format.open_memmap(tmp / "codes.npy", mode="w+", dtype=CODE_NUMPY_DTYPES[name], shape=tuple(table.shape))
        scale = offset = None
        if name == "int8" and axis == "row":
            scale, offset = (np.lib.format.open_memmap(tmp / f"{k}.npy", mode="w+", dtype=np.float32, shape=(table.shape[0],)) for k in ("scale", "offset"))
        codec = encode_into(table, name, codes, axis=axis, method=method, chunk_bytes=chunk_bytes, scale=scale, offset=offset)
        codes.flush()
        del codes
        if name == "int8":
            if axis == "row":
                scale.flush()
                offset.flush()
                del scale, offset
            else:
                np.save(tmp / "scale.npy", codec.scale.numpy())
                np.save(tmp / "offset.npy", codec.offset.numpy())
        del codec
        arrays = ["codes.npy", *(("scale.npy", "offset.npy") if name == "int8" else ())]
        record_digests({k: tmp / k for k in arrays}, tmp / MANIFEST)
        meta = {"format": FORMAT, "codec": name, "axis": axis, "method": method, "shape": list(table.shape), "source": source}
        (tmp / META).write_text(json.dumps(meta, indent=1) + "\n")  # written last: marks a whole table
        replace_dir(tmp, out, marker=META)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return load(out)


def _open_array(path: Path, dtype, shape: tuple) -> np.ndarray:
    """The ``.npy`` file ``path`` mapped read-only, checked to hold ``dtype`` of ``shape``."""
    try:
        array = np.load(path, mmap_mode="r")
    except (FileNotFoundError, ValueError, EOFError) as e:  # missing, cut short, not a .npy
        raise DamagedTableError(path, str(e) or type(e).__name__) from None
    if array.dtype != dtype or array.shape != shape:
        raise DamagedTableError(path, f"it holds {array.dtype} {array.shape}, {META} says {np.dtype(dtype)} {shape}")
    return array


def _matches(folder: Path, npy_path: Path) -> bool:
    """True when ``folder`` holds a whole compressed form of the current ``npy_path``. A damaged
    folder is reported with a warning naming the file (the caller writes it again from the source)."""
    try:
        meta = read_meta(folder)
        stat = npy_path.stat()
        source = meta.get("source") or {}
        if source.get("size") != stat.st_size or source.get("mtime_ns") != stat.st_mtime_ns:
            return False  # the source changed: rewritten, nothing to warn about
        load(folder)  # every file opens with the dtype and shape compression.json gives
        check_digests(folder)  # and holds the bytes written
    except (DamagedTableError, DamagedFile) as e:
        warnings.warn(
            f"the compressed features file {str(e.path)!r} is damaged ({e.reason}); writing {str(folder)!r} again from {str(npy_path)!r}", stacklevel=3
        )
        return False
    except (OSError, ValueError):  # no folder yet, or another format
        return False
    return True
