"""The counter-based random numbers of the sampling kernels, in NumPy (``kernels/sample_rng.cuh``).

Every pick of :func:`~dgl_zerocopy.cuda.sampling.sample_csc` is a pure function of the
``seed`` argument, the seed node's position ``i`` in ``seeds``, the draw index ``d`` and the
range it draws from; no state is carried between draws, threads or launches. That is what lets
the CUDA kernel, its g++ build (the emulator) and the NumPy reference return identical picks:

    mix(z)          = SplitMix64's finaliser (xor-shift 30, * M1, xor-shift 27, * M2, xor-shift 31)
    row_key(seed,i) = mix(mix(seed + G) + (i + 1) * G)           G = 0x9E3779B97F4A7C15
    draw(key, d)    = mix(key + (d + 1) * G)
    uniform(r, n)   = high 64 bits of the 128-bit product r * n   (an integer in [0, n))

all arithmetic modulo 2^64. ``draw`` over ``d`` is SplitMix64's own output stream started at
``row_key``; ``row_key`` is that stream, keyed by ``seed``, at step ``i + 1``. ``uniform`` is the
multiply-shift map: its bias is below ``n / 2^64`` (2^-44 for a degree of 10^6), far under what
any test can see. NVRTC and g++ compute it with ``__umul64hi``; NumPy, below, from 32-bit halves.
"""

from __future__ import annotations

import numpy as np

__all__ = ["GOLDEN", "draw", "mix", "mulhi", "row_key", "uniform"]

GOLDEN = 0x9E3779B97F4A7C15
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_LOW32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)


def _u64(values: np.ndarray | int) -> np.ndarray:
    """``values`` as a uint64 array, Python ints taken modulo 2^64."""
    if isinstance(values, int):
        return np.asarray(values % (1 << 64), dtype=np.uint64)
    return np.asarray(values).astype(np.uint64, copy=False)


def mix(z: np.ndarray | int) -> np.ndarray:
    """SplitMix64's finaliser, elementwise, modulo 2^64 (``zc_mix64`` in the kernel)."""
    z = _u64(z).copy()
    # NumPy wraps uint64 array arithmetic silently; 0-d arrays would warn, so work on 1-d.
    shape = z.shape
    z = z.reshape(-1)
    z ^= z >> np.uint64(30)
    z *= _M1
    z ^= z >> np.uint64(27)
    z *= _M2
    z ^= z >> np.uint64(31)
    return z.reshape(shape)


def row_key(seed: int, rows: np.ndarray) -> np.ndarray:
    """The key of each seed node from the RNG seed and its position in ``seeds`` (``zc_row_key``)."""
    rows = _u64(rows).reshape(-1)
    base = mix(_u64(seed + GOLDEN))
    return mix(base + (rows + np.uint64(1)) * np.uint64(GOLDEN))


def draw(keys: np.ndarray, d: np.ndarray | int) -> np.ndarray:
    """Draw ``d`` (0, 1, ...) of the rows keyed ``keys`` (``zc_draw``); broadcasts."""
    keys = _u64(keys)
    if isinstance(d, int):
        return mix(keys + _u64((d + 1) * GOLDEN))  # a Python int: no NumPy scalar overflow warning
    return mix(keys + (_u64(d) + np.uint64(1)) * np.uint64(GOLDEN))


def mulhi(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The high 64 bits of the 128-bit products ``a * b`` (``__umul64hi``), elementwise."""
    a, b = np.broadcast_arrays(_u64(a), _u64(b))
    shape = a.shape
    a = a.reshape(-1)
    b = b.reshape(-1)
    a_hi, a_lo = a >> _S32, a & _LOW32
    b_hi, b_lo = b >> _S32, b & _LOW32
    lo_lo = a_lo * b_lo
    lo_hi = a_lo * b_hi
    hi_lo = a_hi * b_lo
    middle = (lo_lo >> _S32) + (lo_hi & _LOW32) + (hi_lo & _LOW32)  # < 3 * 2^32: no wrap
    high = a_hi * b_hi + (lo_hi >> _S32) + (hi_lo >> _S32) + (middle >> _S32)
    return high.reshape(shape)


def uniform(r: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Integers in ``[0, n)`` from 64-bit draws ``r`` (``zc_uniform``), as int64; ``n >= 1``."""
    return mulhi(r, n).astype(np.int64)
