"""Temporal and weighted picks on the GPU (``kernels/sample_temporal.cu``), their CPU emulation and NumPy twins.

The kernels work on a layer's ``bounds`` (int64 ``[2 * num_seeds]``: seed ``i``'s in-edges are CSC positions
``bounds[2i]:bounds[2i + 1]``, as ``sample.cu``'s bounds pass writes them):

- :func:`cut_by_time`: shrinks the bounds to the in-edges no later than each seed's time (times sorted
  within each neighbourhood: a binary search), ``'last'``: to the latest ``fanout``; the uniform passes of
  ``sample.cu`` then pick inside the cut unchanged;
- :func:`pick_weighted`: ``(out_indptr, pos)``, the weighted picks (with replacement by inverse transform
  on the prefix sums, without by the largest keys ``log(u) / w``; ``fanout <= MAX_WEIGHTED_FANOUT``);
- :func:`fetch_sources`: ``indices[pos]``, read where the CSC lives.

``backend``: ``"cuda"`` (CuPy; the bounds and outputs on the GPU, the CSC's arrays pinned host memory or on
that GPU, read zero-copy; torch's current stream) or ``"emulator"`` (the same ``.cu`` compiled by g++ and
run on CPU tensors, traced for :func:`pcie_requests`). :func:`reference_pick_weighted` is the NumPy twin of
the weighted kernel (the same counter-based draws, :mod:`~dgl_zerocopy.cuda.sampling.rng`); the cut's twin is
:func:`dgl_zerocopy.sampling.picks.cut_by_time`.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from dgl_zerocopy.cuda.gather.emulator_build import RECORD_DTYPE, build_library, entry_symbol
from dgl_zerocopy.cuda.gather.pcie_model import LINE_BYTES
from dgl_zerocopy.cuda.nvrtc import compile_program
from dgl_zerocopy.cuda.sampling import rng
from dgl_zerocopy.cuda.sampling.op_count import observe_launch

SOURCE = "sample_temporal.cu"
MAX_WEIGHTED_FANOUT = 64  # ZC_WEIGHTED_MAX_FANOUT: the kept keys of a thread, in registers
TIME_TYPES = {np.dtype(np.int64): "long long", np.dtype(np.int32): "int", np.dtype(np.float64): "double", np.dtype(np.float32): "float"}
_ID_TYPES = {4: "int", 8: "long long"}
_BLOCK = 256
_build_lock = threading.Lock()


def cut_name(time_dtype: Any) -> str:
    """``sample_cut_by_time<TimeT>`` for a NumPy/torch time dtype (int32, int64, float32, float64)."""
    dtype = np.dtype(str(time_dtype).removeprefix("torch."))
    if dtype not in TIME_TYPES:
        raise TypeError(f"times must be int32, int64, float32 or float64 for the GPU cut, but got {time_dtype}")
    return f"sample_cut_by_time<{TIME_TYPES[dtype]}>"


def fetch_name(indices_bytes: int) -> str:
    return f"sample_fetch_positions<{_ID_TYPES[indices_bytes]}>"


def all_name_expressions() -> tuple[str, ...]:
    """Every instantiation: four cuts (time dtypes), the weighted count and pick, two fetches (id widths)."""
    return (*(f"sample_cut_by_time<{t}>" for t in TIME_TYPES.values()), "sample_count_weighted", "sample_pick_weighted", *(fetch_name(w) for w in _ID_TYPES))


def compile_check(arch: str, name_expressions: Sequence[str] | None = None) -> bytes:
    """NVRTC's cubin (``"sm_XX"``) or PTX (``"compute_XX"``) of every instantiation; no GPU needed."""
    return compile_program(SOURCE, arch, all_name_expressions() if name_expressions is None else name_expressions)


# -- running the kernels ---------------------------------------------------------------------------------------------


@functools.cache
def _library() -> ctypes.CDLL:
    unit = ['#include "cpu_shim.h"', f'#include "{SOURCE}"'] + [f"ZC_EMU_ENTRY({entry_symbol(n)}, {n})" for n in all_name_expressions()]
    with _build_lock:
        lib = ctypes.CDLL(str(build_library("sample_temporal", "\n".join(unit) + "\n")))
    lib.zc_emu_trace_size.restype = ctypes.c_longlong
    lib.zc_emu_trace_copy.argtypes = [ctypes.c_void_p]
    for name in all_name_expressions():
        getattr(lib, entry_symbol(name)).argtypes = [ctypes.c_uint, ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p)]
    return lib


_CTYPES = {"ptr": ctypes.c_void_p, "i64": ctypes.c_longlong, "i32": ctypes.c_int, "u64": ctypes.c_ulonglong}
_CUPY = {"ptr": np.uint64, "i64": np.int64, "i32": np.int32, "u64": np.uint64}


class _Emulator:
    """Runs a launch on the CPU; with ``trace``, keeps every traced load (address, bytes, warp, slot)."""

    def __init__(self, trace: bool = False) -> None:
        self.trace, self.loads = trace, []

    def address(self, tensor: torch.Tensor) -> int:
        if tensor.device.type != "cpu" or not tensor.is_contiguous():
            raise ValueError(f"backend 'emulator' reads contiguous CPU tensors, but got one on {tensor.device}; pass tensor.cpu().contiguous()")
        return int(tensor.data_ptr())

    def __call__(self, name: str, threads: int, args: list[tuple[str, int]]) -> None:
        if threads == 0:
            return
        observe_launch(name)
        lib = _library()
        values = [_CTYPES[kind](value) for kind, value in args]
        pointers = (ctypes.c_void_p * len(values))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values])
        if self.trace:
            lib.zc_emu_trace_begin()
        try:
            getattr(lib, entry_symbol(name))(-(-threads // _BLOCK), _BLOCK, pointers)
            if self.trace:
                loads = np.empty(lib.zc_emu_trace_size(), dtype=RECORD_DTYPE)
                lib.zc_emu_trace_copy(loads.ctypes.data)
                self.loads.append(loads)
        finally:
            if self.trace:
                lib.zc_emu_trace_end()


@functools.cache
def _module(device_id: int) -> Any:
    import cupy

    from dgl_zerocopy.cuda.kernel_source import kernel_options, read_kernel
    from dgl_zerocopy.cuda.nvrtc import preload_for_cupy

    preload_for_cupy(cupy)
    with cupy.cuda.Device(device_id):
        module = cupy.RawModule(code=read_kernel(SOURCE), options=kernel_options(), name_expressions=all_name_expressions())
        module.compile()
    return module


class _Cuda:
    """Runs a launch on the GPU of ``device`` on torch's current stream there."""

    def __init__(self, device: torch.device) -> None:
        import cupy

        from dgl_zerocopy.cuda.sampling.launcher import _kernel_address

        self.cupy, self.device, self._address = cupy, device, _kernel_address
        self.device_id = device.index if device.index is not None else torch.cuda.current_device()

    def address(self, tensor: torch.Tensor) -> int:
        return self._address(self.cupy, "the CSC's times or weights", tensor, self.device)

    def __call__(self, name: str, threads: int, args: list[tuple[str, int]]) -> None:
        if threads == 0:
            return
        observe_launch(name)
        from dgl_zerocopy.cuda.gather.launcher import cupy_stream

        kernel = _module(self.device_id).get_function(name)
        with self.cupy.cuda.Device(self.device_id), cupy_stream(self.cupy, torch.cuda.current_stream(self.device), self.device_id):
            kernel((-(-threads // _BLOCK),), (_BLOCK,), tuple(_CUPY[kind](value) for kind, value in args))


def _runner(backend: str, on: torch.Tensor, trace: bool = False) -> Any:
    if backend == "emulator":
        return _Emulator(trace)
    if backend == "cuda":
        if on.device.type != "cuda":
            raise ValueError(f"backend 'cuda' works on the GPU of the bounds, but they are on {on.device}; pass bounds.cuda()")
        return _Cuda(on.device)
    raise ValueError(f"backend must be 'cuda' or 'emulator', but got {backend!r}")


def cut_by_time(
    bounds: torch.Tensor, times: torch.Tensor, seed_time: torch.Tensor, fanout: int, strategy: str = "uniform", *, backend: str = "cuda", trace: bool = False
) -> Any:
    """Shrink ``bounds`` in place to each seed's in-edges no later than ``seed_time`` (one per seed, of
    ``times``' dtype); ``strategy`` ``'last'`` keeps the latest ``fanout``. Returns ``bounds`` (and, with
    ``trace`` on the emulator, the traced loads of ``times`` as a record array).

    Raises:
        ValueError: a strategy other than 'uniform'/'last', shapes that disagree, a backend or device mismatch.
        TypeError: a time dtype the kernel has no instantiation for.
    """
    if strategy not in ("uniform", "last"):
        raise ValueError(f"strategy must be 'uniform' or 'last', but got {strategy!r}")
    if bounds.dtype != torch.int64 or bounds.numel() != 2 * seed_time.numel():
        raise ValueError(f"bounds must be int64 of 2 entries per seed ({2 * seed_time.numel()}), but got {bounds.dtype} of {bounds.numel()}")
    seed_time = seed_time.to(device=bounds.device, dtype=times.dtype).contiguous()
    run = _runner(backend, bounds, trace)
    args = [("ptr", run.address(times)), ("ptr", int(seed_time.data_ptr())), ("i64", seed_time.numel()), ("i32", int(fanout)), ("i32", int(strategy == "last"))]
    run(cut_name(times.dtype), seed_time.numel(), [*args, ("ptr", int(bounds.data_ptr()))])
    if trace:
        return bounds, np.concatenate(run.loads) if run.loads else np.empty(0, dtype=RECORD_DTYPE)
    return bounds


def check_weighted(fanout: int, replace: bool, weights: torch.Tensor, sums: torch.Tensor) -> None:
    if fanout < -1 or (not replace and fanout > MAX_WEIGHTED_FANOUT):
        raise ValueError(
            f"fanout {fanout} for weighted picks without replacement on the GPU must be -1 or in [0, {MAX_WEIGHTED_FANOUT}] "
            f"(MAX_WEIGHTED_FANOUT: the keys a thread keeps); use a smaller fanout, replace=True, or sample on the CPU"
        )
    if weights.dtype != torch.float64 or sums.dtype != torch.float64:
        raise ValueError(f"weights and sums must be float64, but got {weights.dtype} and {sums.dtype}")


def count_weighted(bounds: torch.Tensor, sums: torch.Tensor, fanout: int, replace: bool, out_indptr: torch.Tensor, *, backend: str = "cuda") -> None:
    """Write ``out_indptr[0] = 0`` and seed ``i``'s number of weighted picks at ``i + 1`` (the scan is the
    caller's): every in-edge for -1 or ``deg <= fanout`` without replacement, ``fanout`` with replacement
    where the neighbourhood weighs more than 0. Enqueued; nothing read back."""
    num_seeds = bounds.numel() // 2
    if num_seeds == 0:
        out_indptr[:1].zero_()
        return
    run = _runner(backend, bounds)
    args = [("ptr", int(bounds.data_ptr())), ("ptr", run.address(sums)), ("i64", num_seeds), ("i32", int(fanout)), ("i32", int(replace))]
    run("sample_count_weighted", num_seeds, [*args, ("ptr", int(out_indptr.data_ptr()))])


def pick_weighted_into(
    bounds: torch.Tensor,
    weights: torch.Tensor,
    sums: torch.Tensor,
    out_indptr: torch.Tensor,
    fanout: int,
    replace: bool,
    seed: int,
    pos: torch.Tensor,
    *,
    backend: str = "cuda",
) -> None:
    """Write seed ``i``'s weighted picks, sorted CSC positions, at ``pos[out_indptr[i]:out_indptr[i + 1]]``
    (``out_indptr``: the scan of :func:`count_weighted`'s counts; ``pos`` int64 holding at least the total).
    Enqueued; nothing read back."""
    num_seeds = bounds.numel() // 2
    run = _runner(backend, bounds)
    args = [("ptr", int(bounds.data_ptr())), ("ptr", run.address(weights)), ("ptr", run.address(sums)), ("ptr", int(out_indptr.data_ptr()))]
    common = [("i64", num_seeds), ("i32", int(fanout)), ("i32", int(replace))]
    run("sample_pick_weighted", num_seeds, [*args, *common, ("u64", int(seed) % (1 << 64)), ("ptr", int(pos.data_ptr()))])


def pick_weighted(
    bounds: torch.Tensor, weights: torch.Tensor, sums: torch.Tensor, fanout: int, replace: bool, seed: int, *, backend: str = "cuda"
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out_indptr, pos)``: seed ``i``'s weighted picks are ``pos[out_indptr[i]:out_indptr[i + 1]]``, CSC
    positions sorted within each seed. ``weights``/``sums`` float64 per CSC position (sums: the running sum
    within each neighbourhood). One synchronisation on the GPU: the total, to size ``pos``.

    Raises:
        ValueError: ``fanout`` above :data:`MAX_WEIGHTED_FANOUT` without replacement, or below -1; dtypes.
    """
    check_weighted(fanout, replace, weights, sums)
    num_seeds = bounds.numel() // 2
    out_indptr = torch.empty(num_seeds + 1, dtype=torch.int64, device=bounds.device)
    if num_seeds == 0:
        return out_indptr.zero_(), torch.empty(0, dtype=torch.int64, device=bounds.device)
    count_weighted(bounds, sums, fanout, replace, out_indptr, backend=backend)
    torch.cumsum(out_indptr, 0, out=out_indptr)
    pos = torch.empty(int(out_indptr[-1]), dtype=torch.int64, device=bounds.device)
    pick_weighted_into(bounds, weights, sums, out_indptr, fanout, replace, seed, pos, backend=backend)
    return out_indptr, pos


def fetch_sources(indices: torch.Tensor, pos: torch.Tensor, *, backend: str = "cuda") -> torch.Tensor:
    """``indices[pos]`` as int64 on ``pos``'s device, read where ``indices`` lives (pinned or device)."""
    run = _runner(backend, pos)
    src = torch.empty(pos.numel(), dtype=torch.int64, device=pos.device)
    run(
        fetch_name(indices.element_size()),
        pos.numel(),
        [("ptr", run.address(indices)), ("ptr", int(pos.data_ptr())), ("i64", pos.numel()), ("ptr", int(src.data_ptr()))],
    )
    return src


# -- the NumPy twin and the PCIe model -----------------------------------------------------------------------------------


def reference_pick_weighted(bounds: np.ndarray, weights: np.ndarray, sums: np.ndarray, fanout: int, replace: bool, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """What :func:`pick_weighted`'s kernels compute, in NumPy and plain loops: ``(out_indptr, pos)``."""
    lo, end = bounds[0::2].astype(np.int64), bounds[1::2].astype(np.int64)
    counts, picks = [], []
    for i, (a, b) in enumerate(zip(lo.tolist(), end.tolist())):
        deg, key = b - a, rng.row_key(seed, np.array([i]))
        if fanout < 0 or (not replace and deg <= fanout):
            chosen = list(range(a, b))
        elif replace:
            total = sums[b - 1] if deg else 0.0
            unit = (rng.draw(key, np.arange(fanout)) >> np.uint64(11)).astype(np.float64) * 2.0**-53 if total > 0 else np.empty(0)
            chosen = sorted(min(int(np.searchsorted(sums[a:b], u * total, side="right")) + a, b - 1) for u in unit)
        else:
            unit = (rng.draw(key, np.arange(deg)) >> np.uint64(11)).astype(np.float64) * 2.0**-53 + 2.0**-54
            w = weights[a:b]
            keys = np.where(w > 0, np.log(unit) / np.where(w > 0, w, 1.0), -1.7976931348623157e308)
            chosen = sorted((a + np.lexsort((np.arange(deg), -keys))[:fanout]).tolist())
        counts.append(len(chosen))
        picks += chosen
    return np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]), np.asarray(picks, dtype=np.int64)


def pcie_requests(loads: np.ndarray) -> int:
    """PCIe read requests of traced loads (``RECORD_DTYPE``), the gather's model: a warp's load instruction
    (one ``(warp, slot)``) costs one request per distinct 128-byte line it touches."""
    if len(loads) == 0:
        return 0
    first = loads["address"].astype(np.int64)
    last = first + loads["bytes"].astype(np.int64) - 1
    rows = np.stack([np.concatenate([loads[f], loads[f]]).astype(np.int64) for f in ("warp", "slot")] + [np.concatenate([first, last]) // LINE_BYTES])
    return len(np.unique(rows, axis=1).T)
