"""Run the sampling kernels (``kernels/sample.cu``) on the CPU: backend ``"emulator"``.

The same ``.cu`` is compiled unchanged by g++ through ``kernels/cpu_shim.h``
(:func:`dgl_zerocopy.cuda.gather.emulator_build.build_library`, cached beside the gather's
library) and driven by :mod:`~dgl_zerocopy.cuda.sampling.launch` (``run_passes``, ``plan_passes``,
``pick_and_fetch``), the GPU launcher's driver: same passes, grids, blocks and arguments, on CPU tensors. With ``trace=True`` every load
of the CSC (``indptr`` by the bounds pass, ``indices`` by the fetch pass) is recorded for
:mod:`dgl_zerocopy.cuda.sampling.pcie_model`.

Faithful for kernels whose threads do not communicate (threads run one after another): it checks
results and addresses, not timing or races.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from dgl_zerocopy.cuda.gather.emulator_build import RECORD_DTYPE, build_library, entry_symbol, load_columns
from dgl_zerocopy.cuda.sampling import instantiations
from dgl_zerocopy.cuda.sampling.launch import CSCPlan, Relabelled, Step, pick_and_fetch, plan_passes, relabel_passes, run_passes
from dgl_zerocopy.cuda.sampling.op_count import observe_launch

__all__ = ["SampleTrace", "emulate_pick_and_fetch", "emulate_plan", "emulate_relabel", "emulate_sample", "library"]

logger = logging.getLogger(__name__)

_ARG_CTYPES = {"ptr": ctypes.c_void_p, "i64": ctypes.c_longlong, "i32": ctypes.c_int, "u64": ctypes.c_ulonglong}
#: SMs of the modelled GPU (an H100's 132): the grids the emulator runs are the GPU's.
NUM_SMS = 132
_build_lock = threading.Lock()


def _translation_unit() -> str:
    lines = ['#include "cpu_shim.h"', f'#include "{instantiations.SOURCE}"']
    lines += [f"ZC_EMU_ENTRY({entry_symbol(name)}, {name})" for name in instantiations.all_name_expressions()]
    return "\n".join(lines) + "\n"


@functools.cache
def library() -> ctypes.CDLL:
    """The sampling kernels' emulator library, built once per process, its entry points typed."""
    with _build_lock:
        lib = ctypes.CDLL(str(build_library("sample", _translation_unit())))
    lib.zc_emu_record_bytes.restype = ctypes.c_int
    lib.zc_emu_trace_size.restype = ctypes.c_longlong
    lib.zc_emu_trace_copy.argtypes = [ctypes.c_void_p]
    if lib.zc_emu_record_bytes() != RECORD_DTYPE.itemsize:
        raise RuntimeError("kernels/cpu_shim.h zc_load_record does not match emulator_build.RECORD_DTYPE")
    for name in instantiations.all_name_expressions():
        entry = getattr(lib, entry_symbol(name))
        entry.argtypes = [ctypes.c_uint, ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p)]
        entry.restype = None
    return lib


@dataclass(frozen=True)
class SampleTrace:
    """The CSC loads of one emulated sample, one entry per active lane load.

    ``(launch, warp, slot)`` identifies one warp-wide load instruction (``slot`` numbers a
    thread's passes through load sites, masked ones included; ``launch`` numbers the kernel
    launches, whose warps are distinct).

    Attributes:
        address, nbytes, warp, slot: per load (int64; nbytes int32).
        launch: per load, the index into :attr:`kernels` of the launch that made it.
        kernels: the name expressions of the traced launches, in order.
        indptr_range, indices_range: ``(start, end)`` addresses of the CSC's two arrays.
    """

    address: np.ndarray
    nbytes: np.ndarray
    warp: np.ndarray
    slot: np.ndarray
    launch: np.ndarray
    kernels: tuple[str, ...]
    indptr_range: tuple[int, int]
    indices_range: tuple[int, int]

    def within(self, start_end: tuple[int, int]) -> np.ndarray:
        """Which loads fall inside the address range ``start_end``."""
        return (self.address >= start_end[0]) & (self.address < start_end[1])


def _runner(trace: bool, records: list[tuple[str, np.ndarray]]):
    lib = library()

    def run(step: Step) -> None:
        if step.grid == 0:
            return
        observe_launch(step.kernel)
        values = [_ARG_CTYPES[kind](value) for kind, value in step.args]
        pointers = (ctypes.c_void_p * len(values))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values])
        logger.debug("emulating %s grid=%d block=%d", step.kernel, step.grid, step.block)
        if trace:
            lib.zc_emu_trace_begin()
        try:
            getattr(lib, entry_symbol(step.kernel))(step.grid, step.block, pointers)
            if trace:
                loads = np.empty(lib.zc_emu_trace_size(), dtype=RECORD_DTYPE)
                lib.zc_emu_trace_copy(loads.ctypes.data)
                records.append((step.kernel, loads))
        finally:
            if trace:
                lib.zc_emu_trace_end()

    return run


def emulate_sample(
    indptr: torch.Tensor,
    indices: torch.Tensor,
    seeds: torch.Tensor,
    fanout: int,
    *,
    replace: bool = False,
    seed: int = 0,
    trace: bool = False,
    max_blocks: int | None = None,
    fetch_variant: str = "flat",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | tuple[torch.Tensor, torch.Tensor, torch.Tensor, SampleTrace]:
    """``(out_indptr, src, pos)`` of :func:`~dgl_zerocopy.cuda.sampling.sample_csc`, computed by
    the CUDA kernels run on the CPU; arguments as checked by ``sample_csc`` (CPU, contiguous).

    Args:
        trace: also return the :class:`SampleTrace` of the CSC loads.
        max_blocks: grid cap, as on the GPU (grid-stride loops still cover everything).
        fetch_variant: ``"flat"`` (what sample_csc runs) or ``"per_seed"`` (the model's baseline).
    """
    records: list[tuple[str, np.ndarray]] = []
    out = run_passes(
        indptr, indices, seeds, fanout, replace, seed, _runner(trace, records), num_sms=NUM_SMS, max_blocks=max_blocks, fetch_variant=fetch_variant
    )
    if not trace:
        return out
    kernels = tuple(kernel for kernel, _ in records)
    loads = np.concatenate([r for _, r in records]) if records else np.empty(0, dtype=RECORD_DTYPE)
    launch = np.repeat(np.arange(len(records)), [len(r) for _, r in records])
    start, istart = int(indptr.data_ptr()), int(indices.data_ptr())
    return (
        *out,
        SampleTrace(
            **load_columns(loads),
            launch=launch,
            kernels=kernels,
            indptr_range=(start, start + indptr.numel() * indptr.element_size()),
            indices_range=(istart, istart + indices.numel() * indices.element_size()),
        ),
    )


def emulate_plan(indptr: torch.Tensor, seeds: torch.Tensor, fanout: int, replace: bool, **options: Any) -> CSCPlan:
    """:func:`~dgl_zerocopy.cuda.sampling.launch.plan_passes` run by the emulated kernels (CPU
    tensors, contiguous); ``options``: its ``num_valid`` (an int64 tensor of one element, or None),
    ``bad`` and ``max_blocks``."""
    return plan_passes(indptr, seeds, fanout, replace, _runner(False, []), num_sms=NUM_SMS, **options)


def emulate_relabel(
    dst: torch.Tensor, dst_count: torch.Tensor | None, src: torch.Tensor, out_indptr: torch.Tensor, sizes: torch.Tensor, **options: Any
) -> Relabelled:
    """:func:`~dgl_zerocopy.cuda.sampling.launch.relabel_passes` run by the emulated kernels (CPU
    tensors, contiguous; ``options``: its ``max_blocks`` and ``num_nodes``)."""
    return relabel_passes(dst, dst_count, src, out_indptr, sizes, _runner(False, []), num_sms=NUM_SMS, **options)


def emulate_pick_and_fetch(plan: CSCPlan, indices: torch.Tensor, seed: int, capacity: int, **options: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`~dgl_zerocopy.cuda.sampling.launch.pick_and_fetch` run by the emulated kernels
    (``options``: its ``max_blocks`` and ``edge_ids``)."""
    return pick_and_fetch(plan, indices, seed, capacity, _runner(False, []), num_sms=NUM_SMS, **options)
