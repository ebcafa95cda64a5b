"""GPU launcher of the sampling kernels (``kernels/sample.cu``): backend ``"cuda"``, and their NVRTC
compile check.

The passes and the scan between them are :func:`~dgl_zerocopy.cuda.sampling.launch.run_passes`,
the emulator's driver too; here each pass is a CuPy ``RawModule`` kernel launched on torch's
current stream of the seeds' device (so a caller samples on a side stream with
``torch.cuda.stream(side)``). The CSC is read where it lies: pinned host memory over PCIe
(zero-copy, UVA: the host address is the device address) or device memory. One host
synchronisation per :func:`launch_sample`: the total (and the bad-seed flag) after the scan;
none in :func:`launch_plan` and :func:`launch_pick_and_fetch` (the two halves, for a caller that
reads the sizes with its own).

CuPy is imported lazily, inside the functions that launch, so this module imports on machines
without CUDA; :func:`compile_check` needs no GPU.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from dgl_zerocopy.cuda.gather.launcher import cupy_stream
from dgl_zerocopy.cuda.kernel_source import kernel_options, read_kernel
from dgl_zerocopy.cuda.nvrtc import compile_program, preload_for_cupy
from dgl_zerocopy.cuda.sampling import instantiations
from dgl_zerocopy.cuda.sampling.launch import CSCPlan, Relabelled, Step, pick_and_fetch, plan_passes, relabel_passes, run_passes
from dgl_zerocopy.cuda.sampling.op_count import observe_launch

__all__ = ["compile_check", "compile_sample_module", "launch_pick_and_fetch", "launch_plan", "launch_relabel", "launch_sample"]

logger = logging.getLogger(__name__)


def compile_check(arch: str, name_expressions: Sequence[str] | None = None) -> bytes:
    """Compile every sampling instantiation (or ``name_expressions``) of ``sample.cu`` for ``arch``
    with NVRTC and CuPy's options (:func:`dgl_zerocopy.cuda.nvrtc.compile_program`): the cubin for
    ``"sm_XX"``, the PTX for ``"compute_XX"``. Needs no GPU; raises as ``compile_program``."""
    names = instantiations.all_name_expressions() if name_expressions is None else name_expressions
    return compile_program(instantiations.SOURCE, arch, names)


def _cupy() -> Any:
    try:
        import cupy
    except ImportError as error:
        raise RuntimeError(
            "backend 'cuda' of sample_csc needs CuPy and a CUDA GPU: pip install dgl-zerocopy[cuda12] or "
            "dgl-zerocopy[cuda13], matching torch's CUDA; without a GPU use backend='emulator'"
        ) from error
    return cupy


@functools.cache
def compile_sample_module(device_id: int, name_expressions: tuple[str, ...] | None = None) -> Any:
    """The ``cupy.RawModule`` of ``kernels/sample.cu`` for CUDA device ``device_id`` holding
    ``name_expressions`` (default all), compiled once per device and names (memoized)."""
    cupy = _cupy()
    preload_for_cupy(cupy)
    names = instantiations.all_name_expressions() if name_expressions is None else tuple(name_expressions)
    with cupy.cuda.Device(device_id):
        module = cupy.RawModule(code=read_kernel(instantiations.SOURCE), options=kernel_options(), name_expressions=names)
        module.compile()
    logger.info("compiled %d kernel(s) of %s for CUDA device %d", len(names), instantiations.SOURCE, device_id)
    return module


@functools.cache
def _kernel(device_id: int, names: tuple[str, ...], name: str) -> Any:
    return compile_sample_module(device_id, names).get_function(name)


@functools.cache
def _num_sms(device_id: int) -> int:
    return int(_cupy().cuda.Device(device_id).attributes["MultiProcessorCount"])


def _names(indptr_size: int, indices_size: int, seed_size: int) -> tuple[str, ...]:
    """The four instantiations one call launches (compiled together: one NVRTC run per dtype mix)."""
    return (
        instantiations.bounds_name(indptr_size, seed_size),
        instantiations.count_name(),
        instantiations.pick_name(),
        instantiations.fetch_name(indices_size),
    )


_SCALARS = {"ptr": np.uint64, "i64": np.int64, "i32": np.int32, "u64": np.uint64}


def _kernel_address(cupy: Any, name: str, tensor: torch.Tensor, device: torch.device) -> int:
    """The address the kernels read ``tensor`` at: its own on the seeds' GPU; for pinned host
    memory the device's mapping of it, asked of the runtime (equal to the host address under UVA)."""
    if not tensor.is_contiguous():
        raise ValueError(f"{name} must be contiguous (the kernels read it in place); pass {name}.contiguous()")
    if tensor.device == device:
        return int(tensor.data_ptr())
    if tensor.device.type != "cpu":
        raise ValueError(f"{name} is on {tensor.device} but the seeds are on {device}; put the CSC on {device} or in pinned host memory")
    if tensor.numel() == 0:
        return int(tensor.data_ptr())
    runtime = cupy.cuda.runtime
    try:
        attributes = runtime.pointerGetAttributes(int(tensor.data_ptr()))
        pinned = attributes.type == runtime.memoryTypeHost
    except runtime.CUDARuntimeError:  # pageable memory, before CUDA 11
        pinned = False
    if not pinned:
        raise ValueError(
            f"{name} is in pageable host memory, which the GPU cannot read: pin it in place "
            f"(dgl_zerocopy.store.pinning.PinnedRange, or {name}.pin_memory() for a pinned copy) or move it to {device}"
        )
    address = int(attributes.devicePointer)
    if address == 0:
        raise ValueError(f"{name} is page-locked but not mapped into the GPU's address space; register it mapped (PinnedRange) or move it to {device}")
    return address


class _Launch:
    """What one call needs to launch on the GPU of ``on`` (a tensor there): the kernels' runner, the
    SM count, and the addresses the kernels read the CSC's arrays at; used inside ``with self.context():``.
    The widths pick the module (compiled once per mix: the sampler's seeds have the indices' width)."""

    def __init__(self, on: torch.Tensor, indptr_size: int, indices_size: int, seed_size: int, names: tuple[str, ...] | None = None) -> None:
        if on.device.type != "cuda":
            raise ValueError(f"backend 'cuda' samples on the seeds' GPU, but seeds are on {on.device}; pass seeds.cuda() or backend='emulator'")
        self.device = on.device
        self.cupy = _cupy()
        self.device_id = self.device.index if self.device.index is not None else torch.cuda.current_device()
        self.names = _names(indptr_size, indices_size, seed_size) if names is None else names
        self.num_sms = _num_sms(self.device_id)

    @contextlib.contextmanager
    def context(self) -> Iterator[None]:
        """CuPy's current device and stream: torch's current stream of the device."""
        stream = cupy_stream(self.cupy, torch.cuda.current_stream(self.device), self.device_id)
        with self.cupy.cuda.Device(self.device_id), stream:
            yield

    def address(self, name: str, tensor: torch.Tensor) -> int:
        return _kernel_address(self.cupy, name, tensor, self.device)

    def run(self, step: Step) -> None:
        if step.grid == 0:
            return
        observe_launch(step.kernel)
        kernel = _kernel(self.device_id, self.names, step.kernel)
        logger.debug("launch %s grid=%d block=%d", step.kernel, step.grid, step.block)
        kernel((step.grid,), (step.block,), tuple(_SCALARS[kind](value) for kind, value in step.args))


def launch_sample(
    indptr: torch.Tensor, indices: torch.Tensor, seeds: torch.Tensor, fanout: int, *, replace: bool = False, seed: int = 0, max_blocks: int | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(out_indptr, src, pos)`` of :func:`~dgl_zerocopy.cuda.sampling.sample_csc` on the GPU of
    ``seeds``, enqueued on torch's current stream there (one synchronisation: the total).

    ``indptr`` and ``indices`` (checked by ``sample_csc``) are contiguous, and pinned host memory
    or on the seeds' device; they and ``seeds`` must not change until the stream has run the kernels.

    Raises:
        ValueError: seeds not on a GPU, or the CSC pageable, strided or on another GPU.
        IndexError: a seed outside ``[0, N)``. RuntimeError: CuPy or CUDA unavailable.
    """
    seeds = seeds.contiguous()
    gpu = _Launch(seeds, indptr.element_size(), indices.element_size(), seeds.element_size())
    with gpu.context():
        addresses = (gpu.address("indptr", indptr), gpu.address("indices", indices))
        return run_passes(indptr, indices, seeds, fanout, replace, seed, gpu.run, num_sms=gpu.num_sms, max_blocks=max_blocks, csc_addresses=addresses)


def launch_plan(
    indptr: torch.Tensor,
    seeds: torch.Tensor,
    fanout: int,
    replace: bool,
    *,
    num_valid: torch.Tensor | None = None,
    max_blocks: int | None = None,
    bad: torch.Tensor | None = None,
    narrow: Any = None,
    count: Any = None,
) -> CSCPlan:
    """:func:`~dgl_zerocopy.cuda.sampling.launch.plan_passes` on the GPU of ``seeds`` (torch's current
    stream; no synchronisation). ``indptr`` as for :func:`launch_sample`; ``num_valid`` on the seeds' GPU."""
    seeds = seeds.contiguous()
    gpu = _Launch(seeds, indptr.element_size(), seeds.element_size(), seeds.element_size())
    with gpu.context():
        address = gpu.address("indptr", indptr)
        return plan_passes(
            indptr,
            seeds,
            fanout,
            replace,
            gpu.run,
            num_sms=gpu.num_sms,
            max_blocks=max_blocks,
            indptr_address=address,
            num_valid=num_valid,
            bad=bad,
            narrow=narrow,
            count=count,
        )


def launch_pick_and_fetch(
    plan: CSCPlan,
    indptr_size: int,
    indices: torch.Tensor,
    seed: int,
    capacity: int,
    *,
    max_blocks: int | None = None,
    edge_ids: torch.Tensor | None = None,
    pick: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`~dgl_zerocopy.cuda.sampling.launch.pick_and_fetch` on the GPU of ``plan`` (torch's
    current stream; no synchronisation). ``indptr_size``: the CSC's offset width (which module);
    ``edge_ids``: None, or on the plan's GPU (the fetch writes the picks' edge ids into ``pos``)."""
    gpu = _Launch(plan.bounds, indptr_size, indices.element_size(), indices.element_size())
    if edge_ids is not None and edge_ids.device != plan.bounds.device:
        raise ValueError(f"edge_ids is on {edge_ids.device} but the sampler on {plan.bounds.device}; put them in its device memory")
    with gpu.context():
        address = gpu.address("indices", indices)
        return pick_and_fetch(
            plan, indices, seed, capacity, gpu.run, num_sms=gpu.num_sms, max_blocks=max_blocks, indices_address=address, edge_ids=edge_ids, pick=pick
        )


def launch_relabel(
    dst: torch.Tensor, dst_count: torch.Tensor | None, src: torch.Tensor, out_indptr: torch.Tensor, sizes: torch.Tensor, **options: Any
) -> Relabelled:
    """:func:`~dgl_zerocopy.cuda.sampling.launch.relabel_passes` on the GPU of ``dst`` (torch's
    current stream; no synchronisation); every tensor on that GPU, contiguous. ``options``: its
    ``max_blocks`` and ``num_nodes``."""
    names = instantiations.relabel_names(dst.element_size(), src.element_size())
    gpu = _Launch(dst, dst.element_size(), src.element_size(), dst.element_size(), names=names)
    with gpu.context():
        return relabel_passes(dst, dst_count, src, out_indptr, sizes, gpu.run, num_sms=gpu.num_sms, **options)
