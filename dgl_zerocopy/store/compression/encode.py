"""Encoders: a float table to codes, a slab of rows at a time.

Extra memory is bounded by the chunk (``chunk_bytes`` of float32 rows, default 32 MiB; a few
temporaries of that size), whatever the table's size: the source is read slab by slab (a ``.npy``
memory map is never read whole) and each slab's codes are written into the destination before the
next slab is read. There is never a full float32 copy beside the codes.

int8 is affine, ``x ~ code * scale[k] + offset[k]``, with ``k`` a column or a row (``axis``) and
the range taken from (``method``):

- ``minmax``: the smallest and largest value of the column/row map to codes -128 and 127 (all 256
  codes used; a column of values in [a, b] keeps a resolution of (b - a) / 255).
- ``absmax``: symmetric around 0, offset 0, codes -127..127 from the largest magnitude.

Every element then decodes within ``scale / 2`` of its value (rounding to the nearest code), plus
float32 rounding of the decode itself. A constant column/row gets ``scale`` 0 and decodes exactly.
Values up to ±float32's largest decode finite (:func:`int8_params`).
The default, per column and min/max, and the measurements behind it are in docs/benchmarks.md.

fp16 and bf16 round to nearest even, as ``tensor.to(torch.float16 / torch.bfloat16)`` does;
bf16 is computed on the float32 bit pattern (NumPy has no bf16), so codes are written as int16.
A value either cast turns into an infinity is refused with a ValueError naming it.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from ..host_files import tensor_view
from .codec import AXES, Codec

#: The int8 ranges: see the module docstring.
INT8_METHODS = ("minmax", "absmax")
#: The int8 form used when none is named: chosen by measurement (docs/benchmarks.md, "Compressed features").
DEFAULT_AXIS, DEFAULT_METHOD = "column", "minmax"
#: Float32 bytes converted per slab of rows.
CHUNK_BYTES = 32 << 20

# NumPy dtypes the codes are written in (bf16 as its 16-bit pattern).
CODE_NUMPY_DTYPES = {"fp16": np.dtype(np.float16), "bf16": np.dtype(np.int16), "int8": np.dtype(np.int8)}


def check_int8_form(axis: str | None, method: str | None) -> tuple[str, str]:
    """``(axis, method)`` with the defaults filled in; a ValueError naming the valid values otherwise."""
    axis = DEFAULT_AXIS if axis is None else axis
    method = DEFAULT_METHOD if method is None else method
    if axis not in AXES:
        raise ValueError(f"int8 axis must be one of {', '.join(AXES)}, but got {axis!r}")
    if method not in INT8_METHODS:
        raise ValueError(f"int8 method must be one of {', '.join(INT8_METHODS)}, but got {method!r}")
    return axis, method


def chunk_rows(num_columns: int, chunk_bytes: int = CHUNK_BYTES) -> int:
    """Rows per slab: ``chunk_bytes`` of float32, at least one row."""
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be positive, but got {chunk_bytes}")
    return max(1, chunk_bytes // max(1, 4 * num_columns))


def float_chunks(table, chunk_bytes: int = CHUNK_BYTES) -> Iterator[tuple[int, np.ndarray]]:
    """``(first_row, rows)`` of ``table`` (2-D NumPy array or CPU tensor) as fresh, writable float32
    NumPy arrays of at most ``chunk_rows`` rows; raises ValueError on a value that is not finite."""
    step = chunk_rows(table.shape[1], chunk_bytes)
    for start in range(0, table.shape[0], step):
        part = table[start : start + step]
        with np.errstate(over="ignore"):  # a float64 value beyond float32's range: named below
            if isinstance(part, torch.Tensor):
                rows = part.to(torch.float32, copy=True).numpy()
            else:
                rows = np.array(part, dtype=np.float32, copy=True)
        if not np.isfinite(rows).all():
            r, c = np.argwhere(~np.isfinite(rows))[0]
            value = float(part[r, c])
            if np.isfinite(value):  # finite in the source's dtype, infinite as float32
                raise ValueError(
                    f"the features hold {value} at row {start + r}, column {c}, out of float32's range "
                    f"(±{np.finfo(np.float32).max}): codes decode to float32; rescale the features first"
                )
            raise ValueError(f"the features hold {value} at row {start + r}, column {c}: only finite values can be compressed; fix or drop those values first")
        yield start, rows


def encode_fp16(rows: np.ndarray, first_row: int = 0) -> np.ndarray:
    """float32 rows -> float16 codes (round to nearest even); ValueError where a value rounds beyond fp16's range."""
    with np.errstate(over="ignore"):
        codes = rows.astype(np.float16)
    over = np.isinf(codes)  # the rows are finite: an infinity is an overflow (|x| >= 65520)
    if over.any():
        r, c = np.argwhere(over)[0]
        raise ValueError(f"{rows[r, c]} at row {first_row + r}, column {c} is beyond fp16's range (±65504): use compression 'bf16' or 'int8' for this table")
    return codes


def encode_bf16(rows: np.ndarray, first_row: int = 0) -> np.ndarray:
    """float32 rows -> bf16 bit patterns as int16, rounding to nearest even as torch does;
    ValueError where a value rounds beyond bf16's range (|x| >= 2**128 - 2**119, torch's cast gives inf)."""
    bits = rows.view(np.uint32)
    rounded = (bits >> 16) & 1
    rounded += bits
    rounded += 0x7FFF  # wraps only for NaN/inf patterns, which float_chunks has refused
    rounded >>= 16
    over = (rounded & 0x7FFF) == 0x7F80  # the rows are finite: an infinity is an overflow
    if over.any():
        r, c = np.argwhere(over)[0]
        raise ValueError(f"{rows[r, c]} at row {first_row + r}, column {c} is beyond bf16's range (±3.3895314e+38): use compression 'int8' for this table")
    return rounded.astype(np.uint16).view(np.int16)


def int8_params(low: np.ndarray, high: np.ndarray, method: str) -> tuple[np.ndarray, np.ndarray]:
    """float32 ``(scale, offset)`` for ranges ``[low, high]`` (float64 arrays of one axis).

    Computed in float64, so that nothing overflows however close the values come to float32's
    largest (±3.4e38). ``scale`` is rounded up to the next float32, so that the extreme values stay
    within the codes, unless the reference decode (float32 ``code * scale + offset``) of the extreme
    codes would then round beyond float32's range: those scales (offsets) step back an ulp, and the
    extreme values clip by less than a few ulps of themselves. A ``minmax`` range wider than 255/128
    of float32's largest (both ends near ±3.4e38) cannot use code -128 (``128 * scale`` would
    overflow): it takes the ``absmax`` form (offset 0, codes -127..127), whose half step is within
    0.8 % of the ``minmax`` one there."""
    low, high = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
    biggest = float(np.finfo(np.float32).max)
    if method == "minmax":
        scale64 = (high - low) / 255.0
        symmetric = scale64 > biggest / 128
    else:
        scale64 = np.zeros_like(low)
        symmetric = np.ones(low.shape, dtype=bool)
    scale64[symmetric] = np.maximum(np.abs(low), np.abs(high))[symmetric] / 127.0
    scale = scale64.astype(np.float32)  # at most float32's largest / 127: no overflow
    short = scale.astype(np.float64) < scale64
    scale[short] = np.nextafter(scale[short], np.float32(np.inf))
    lowest = np.where(symmetric, np.float32(-127), np.float32(-128))
    offset = np.where(symmetric, 0.0, low - lowest * scale.astype(np.float64)).astype(np.float32)
    offset[scale == 0] = low[scale == 0].astype(np.float32)  # a constant decodes to itself exactly
    for _ in range(8):  # one or two steps suffice; each moves an extreme decode by about an ulp
        with np.errstate(over="ignore"):  # the overflow is what is looked for here
            bottom, top = lowest * scale, np.float32(127) * scale
            product_over = ~np.isfinite(bottom) | ~np.isfinite(top)
            bottom_over = ~np.isfinite(bottom + offset) & ~product_over
            top_over = ~np.isfinite(top + offset) | product_over
        if not (bottom_over.any() or top_over.any()):
            break
        offset[bottom_over] = np.nextafter(offset[bottom_over], np.float32(np.inf))  # the lowest decode moves up
        scale[top_over] = np.nextafter(scale[top_over], np.float32(0))  # the products and the highest decode move in
    return scale, offset


def encode_int8(rows: np.ndarray, scale: np.ndarray, offset: np.ndarray, method: str) -> np.ndarray:
    """float32 rows -> int8 codes, ``rint((x - offset) / scale)`` clipped to the method's codes.
    ``scale``/``offset`` broadcast against ``rows`` (shape ``(C,)`` or ``(n, 1)``); ``rows`` is overwritten."""
    rows -= offset
    np.divide(rows, np.where(scale == 0, np.float32(1), scale), out=rows)
    np.rint(rows, out=rows)
    np.clip(rows, -128 if method == "minmax" else -127, 127, out=rows)
    return rows.astype(np.int8)


def column_ranges(table, chunk_bytes: int = CHUNK_BYTES) -> tuple[np.ndarray, np.ndarray]:
    """Per-column (min, max) as float64, one slab at a time."""
    cols = table.shape[1]
    low, high = np.full(cols, np.inf), np.full(cols, -np.inf)
    for _, rows in float_chunks(table, chunk_bytes):
        np.minimum(low, rows.min(axis=0), out=low)
        np.maximum(high, rows.max(axis=0), out=high)
    if table.shape[0] == 0:
        low[:], high[:] = 0.0, 0.0
    return low, high


def encode_into(
    table,
    name: str,
    codes: np.ndarray,
    *,
    axis: str | None = None,
    method: str | None = None,
    chunk_bytes: int = CHUNK_BYTES,
    scale: np.ndarray | None = None,
    offset: np.ndarray | None = None,
) -> Codec:
    """Encode ``table`` as codec ``name`` into ``codes`` (a preallocated NumPy array of the table's
    shape and :data:`CODE_NUMPY_DTYPES` ``[name]``: in RAM or a ``.npy`` memory map) and return the
    :class:`Codec` that decodes it. int8 per row writes ``scale``/``offset`` (float32, ``(N,)``)
    into the given arrays when passed (e.g. memory maps), else into new ones."""
    if tuple(codes.shape) != tuple(table.shape) or codes.dtype != CODE_NUMPY_DTYPES[name]:
        raise ValueError(f"codes must be {CODE_NUMPY_DTYPES[name]} of shape {tuple(table.shape)}, but got {codes.dtype} {tuple(codes.shape)}")
    if name == "fp16":
        for start, rows in float_chunks(table, chunk_bytes):
            codes[start : start + len(rows)] = encode_fp16(rows, start)
        return Codec("fp16")
    if name == "bf16":
        for start, rows in float_chunks(table, chunk_bytes):
            codes[start : start + len(rows)] = encode_bf16(rows, start)
        return Codec("bf16")
    axis, method = check_int8_form(axis, method)
    if axis == "column":
        scale, offset = int8_params(*column_ranges(table, chunk_bytes), method)
        for start, rows in float_chunks(table, chunk_bytes):
            codes[start : start + len(rows)] = encode_int8(rows, scale, offset, method)
    else:
        n = table.shape[0]
        scale = np.empty(n, dtype=np.float32) if scale is None else scale
        offset = np.empty(n, dtype=np.float32) if offset is None else offset
        for start, rows in float_chunks(table, chunk_bytes):
            stop = start + len(rows)
            if rows.shape[1] == 0:
                s, o = np.zeros(len(rows), np.float32), np.zeros(len(rows), np.float32)
            else:
                s, o = int8_params(rows.min(axis=1).astype(np.float64), rows.max(axis=1).astype(np.float64), method)
            scale[start:stop], offset[start:stop] = s, o
            codes[start:stop] = encode_int8(rows, s[:, None], o[:, None], method)
    return Codec("int8", tensor_view(np.asarray(scale)), tensor_view(np.asarray(offset)), axis)
