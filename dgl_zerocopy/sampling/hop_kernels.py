"""Compiled kernels for :mod:`dgl_zerocopy.sampling.cpu_hops`: one hop's picks and the numbering, by numba.

The NumPy passes of :func:`~dgl_zerocopy.sampling.cpu_hops.pick` touch every sampled edge about ten times;
these kernels touch it once, and split a hop's destinations over the machine's cores (threads of the call
running ``nogil`` functions, so no numba threading layer is started: safe under fork and from many
threads at once). The draws are the same counter-based numbers as NumPy's path
(:func:`uniforms`: a hash of the call's seed, the destination's index and the draw's index), so both
paths give the same picks, element for element, whatever the split.

Why numba: it is on PyPI for every Python and NumPy we support, compiles these loops once per machine
(cached on disk), and needs no compiler. Where it is not installed, ``available`` is False and the NumPy
path runs.

Contracts: ``indptr`` int64 ``[num_dst + 1]``; ``indices`` int32 or int64; ``dst`` int64 global ids;
outputs int64. Every kernel trusts its caller to have checked ids (they index without bounds checks).
"""

from __future__ import annotations

import threading

import numpy as np
import torch

# splitmix64's constants: a Weyl step per destination and per draw, then its finaliser.
_ROW = np.uint64(0x9E3779B97F4A7C15)
_DRAW = np.uint64(0xD1B54A32D192ED03)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_UNIT = 1.0 / 9007199254740992.0  # 2**-53
_HALF_UNIT = _UNIT / 2

# A hop splits over threads only where it samples at least this many edges per thread: below it, the
# threads' start costs more than they save.
PARALLEL_EDGES = 32768

# Past the last-level cache (papers100M's CSC and scratch) most of a hop's time is waiting for reads; the
# kernels keep many in flight: the picks read ``indices`` in a loop of their own after a share's draws, and
# the numbering prefetches its scratch ``_AHEAD`` ids ahead (about the misses a core keeps in flight).
# False: both as before (the reads among the draws, no prefetch), kept so that
# bench/training/scale_sampling.py times both in one process.
MORE_READS_IN_FLIGHT = True
_AHEAD = 24

# Up to this fanout the picks' scratch is sized by the fanout; past it, by the hop's largest pick count.
_SMALL_WIDTH = 1024


def uniforms(seed: int, rows: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """Uniform floats in [0, 1): element ``[d, r]`` is draw ``draws[d]`` of destination index ``rows[r]``
    under ``seed`` (float64 ``[len(draws), len(rows)]``). The kernels' ``_uniform`` is the same function."""
    return uniforms_at(seed, np.asarray(rows)[None, :], np.asarray(draws)[:, None])


def uniforms_at(seed: int, rows: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """:func:`uniforms` element by element: draw ``draws[i]`` of destination index ``rows[i]`` (broadcast)."""
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + rows.astype(np.uint64) * _ROW + draws.astype(np.uint64) * _DRAW
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * _UNIT


def weight_keys(uniform: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Efraimidis and Spirakis' keys ``log(u) / w`` (the ``k`` largest are a weighted sample without
    replacement); ``u`` moved off 0 by half a step, a weight of 0 gets -inf (picked last)."""
    with np.errstate(divide="ignore"):
        return np.where(weights > 0, np.log(uniform + _HALF_UNIT) / np.where(weights > 0, weights, 1.0), -np.inf)


try:
    import numba
except ImportError:  # the NumPy path runs
    numba = None

available = numba is not None

if available:
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    _jit = numba.njit(nogil=True, cache=True)

    @intrinsic
    def _prefetch(typingctx, array, index):
        """``_prefetch(array, i)``: ask the CPU to bring ``array[i]``'s cache line in (LLVM's
        ``llvm.prefetch``, read, all cache levels); no bounds check, nothing returned, never faults."""
        if not isinstance(array, types.Array) or not isinstance(index, types.Integer):
            return None

        def codegen(context, builder, signature, args):
            array_type = signature.args[0]
            view = context.make_array(array_type)(context, builder, args[0])
            pointer = cgutils.get_item_pointer(context, builder, array_type, view, [args[1]], wraparound=False)
            byte_pointer, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
            # The unsuffixed name: LLVM gives it the pointer type's suffix itself (LLVM 14 to 22 tested).
            function = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32]), "llvm.prefetch")
            builder.call(function, [builder.bitcast(pointer, byte_pointer), ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
            return context.get_dummy_value()

        return types.void(array, index), codegen

    @_jit
    def _uniform(seed, row, draw):
        z = np.uint64(seed) + np.uint64(row) * _ROW + np.uint64(draw) * _DRAW
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        z = z ^ (z >> np.uint64(31))
        return np.float64(z >> np.uint64(11)) * _UNIT

    @_jit
    def _offsets(indptr, dst, fanout, replace, offset):
        """``offset[i]``: where destination ``i``'s picks start (``len(dst) + 1`` entries); returns the total."""
        total = 0
        for i in range(len(dst)):
            deg = indptr[dst[i] + 1] - indptr[dst[i]]
            offset[i] = total
            if fanout < 0:
                total += deg
            elif replace:
                total += fanout if deg > 0 else 0
            else:
                total += min(deg, fanout)
        offset[len(dst)] = total
        return total

    @_jit
    def _seen(table, mask, t):
        """Insert ``t`` into the open-addressing set ``table`` (``mask + 1`` slots, -1 empty); whether it was there."""
        h = (np.uint64(t) * _ROW) >> np.uint64(40)
        s = np.int64(h) & mask
        while table[s] >= 0:
            if table[s] == t:
                return True
            s = (s + 1) & mask
        table[s] = t
        return False

    @_jit
    def _pick(indptr, indices, dst, offset, fanout, replace, seed, lo, hi, first, pos, col, src, apart, width):
        """Destinations ``lo:hi``: their picks from ``offset[i]`` on, as CSC positions ``pos``, destinations
        ``col`` (``first + i``) and sources ``src`` (read after all the draws where ``apart``). ``width``: the
        most draws Floyd's algorithm makes for one destination (sizes its scratch)."""
        taken = np.empty(max(width, 1), dtype=np.int64)
        # Floyd's "is t taken" is a scan of the earlier draws for small fanouts, a hash set for large ones.
        size = 1
        while size < 2 * width:
            size *= 2
        table = np.empty(size if fanout > 32 else 1, dtype=np.int64)
        for i in range(lo, hi):
            start = indptr[dst[i]]
            deg = indptr[dst[i] + 1] - start
            o = offset[i]
            if fanout < 0 or (not replace and deg <= fanout):
                c = deg
                for e in range(deg):
                    pos[o + e] = start + e
            elif replace:
                c = fanout if deg > 0 else 0
                for d in range(c):
                    t = np.int64(_uniform(seed, i, d) * deg)
                    pos[o + d] = start + min(t, deg - 1)
            else:
                # Floyd: for j = deg - k .. deg - 1, draw t in [0, j]; keep t, or j where t is taken.
                c = fanout
                if fanout > 32:
                    table[:] = -1
                for d in range(fanout):
                    j = deg - fanout + d
                    t = min(np.int64(_uniform(seed, i, d) * (j + 1)), j)
                    if fanout > 32:
                        if _seen(table, size - 1, t):
                            t = j
                            _seen(table, size - 1, t)
                    else:
                        for prev in range(d):
                            if taken[prev] == t:
                                t = j
                                break
                        taken[d] = t
                    pos[o + d] = start + t
            for e in range(o, o + c):
                col[e] = first + i
                if not apart:
                    src[e] = indices[pos[e]]
        if not apart:
            return
        # The reads of ``indices`` in a loop of their own: the loop above spends hundreds of instructions
        # per destination on draws, which fill the CPU's reorder window while one destination's reads are
        # outstanding; this loop is a few instructions per read, so many cache misses overlap. Past the
        # last-level cache (papers100M's CSC) that is most of a pick's cost.
        for e in range(offset[lo], offset[hi]):
            src[e] = indices[pos[e]]

    @_jit
    def _number(local, ids, count, rows, fresh, ahead):
        """Local ids of ``ids`` into ``rows``, numbering each new id ``count, count + 1, ...`` in order of
        first occurrence (recorded in ``local`` and listed in ``fresh``); returns how many were new.
        Prefetches ``local`` ``ahead`` ids ahead (0: none)."""
        n = 0
        m = len(ids)
        for e in range(m):
            # Past the last-level cache each ``local[v]`` is a miss, and the branch below (new or seen,
            # unpredictable) discards the reads started after it when mispredicted; a prefetch is not.
            if ahead > 0 and e + ahead < m:
                _prefetch(local, ids[e + ahead])
            v = ids[e]
            r = local[v]
            if r < 0:
                r = count + n
                local[v] = r
                fresh[n] = v
                n += 1
            rows[e] = r
        return n


def threads() -> int:
    """How many threads a hop may use: torch's intra-op thread count (so ``torch.set_num_threads`` and
    DataLoader workers, which set it to 1, bound us as they bound torch's own kernels)."""
    return max(1, torch.get_num_threads())


def count(indptr: np.ndarray, dst: np.ndarray, fanout: int, replace: bool, offset: np.ndarray) -> int:
    """How many edges a hop picks for ``dst``; ``offset`` (``len(dst) + 1`` int64) gets where each
    destination's picks start."""
    return int(_offsets(indptr, dst, fanout, replace, offset))


def pick(
    indptr: np.ndarray,
    indices: np.ndarray,
    dst: np.ndarray,
    offset: np.ndarray,
    fanout: int,
    replace: bool,
    seed: int,
    first: int,
    pos: np.ndarray,
    col: np.ndarray,
    src: np.ndarray,
) -> None:
    """One hop of one relation, compiled, into ``pos``/``col``/``src`` (``offset[-1]`` int64 each, from
    :func:`count`): the CSC positions :func:`~dgl_zerocopy.sampling.cpu_hops.pick` gives under the same
    ``seed``, ``col = first + (index into dst)`` and ``src = indices[pos]``. Split over :func:`threads`
    threads where the hop is large, in equal shares of edges (degrees are skewed)."""
    total, apart = int(offset[-1]), bool(MORE_READS_IN_FLIGHT)
    # Floyd draws ``fanout`` offsets only for a destination of more in-edges than that, so its scratch never
    # needs more than the largest pick count: a fanout of 2**31 - 1 then costs what -1 costs, not 16 GB.
    width = 0 if replace else fanout if fanout <= _SMALL_WIDTH else int(np.max(np.diff(offset), initial=0))
    parts = min(threads(), total // PARALLEL_EDGES)
    if parts <= 1:
        _pick(indptr, indices, dst, offset, fanout, replace, seed, 0, len(dst), first, pos, col, src, apart, width)
        return
    bounds = np.searchsorted(offset[:-1], np.arange(parts + 1) * (total // parts), side="left")
    bounds[0], bounds[-1] = 0, len(dst)
    shares = [(int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:]) if hi > lo]
    # Threads of this call only (started and joined here, about 0.1 ms each against milliseconds of
    # picking): nothing outlives the call, nothing to re-create after a fork. The caller takes a share.
    errors: list[BaseException] = []

    def share(lo: int, hi: int) -> None:
        try:
            _pick(indptr, indices, dst, offset, fanout, replace, seed, lo, hi, first, pos, col, src, apart, width)
        except BaseException as e:  # noqa: BLE001 - raised below, in the caller's thread
            errors.append(e)

    helpers = [threading.Thread(target=share, args=part, name="dgl-zerocopy-hops") for part in shares[1:]]
    for helper in helpers:
        helper.start()
    share(*shares[0])
    for helper in helpers:
        helper.join()
    if errors:
        raise errors[0]


def number(local: np.ndarray, ids: np.ndarray, count: int, rows: np.ndarray, fresh: np.ndarray) -> int:
    """The local ids of ``ids`` into ``rows`` under the numbering ``local`` (node-indexed int32, -1 for
    unnumbered), numbering new ids from ``count`` in order of first occurrence and listing them at the
    start of ``fresh`` (``len(ids)`` slots); returns how many were new."""
    return int(_number(local, ids, count, rows, fresh, _AHEAD if MORE_READS_IN_FLIGHT else 0))
