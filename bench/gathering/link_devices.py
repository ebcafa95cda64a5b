"""Where bench/gathering/link_experiment.py runs its cells: the GPU (:class:`GpuDevice`) or, for a dry run,
the CPU with the kernels emulated (:class:`CpuEmulator`). Both give the same four operations:

- ``open_table(nbytes, memory, need_device_copy)``: a host table of random int32 words in
  ``HostTable`` memory of the kind asked (registered in place on the GPU), and a copy in device
  memory where a cell needs one; its ``report`` says what pages it got and what the set-up took;
- ``gather(table, row_bytes, ids, shape, on_device, sort)``: (one gather as a zero-argument callable
  returning its output, the output, ``table[ids]``, the launch facts) for our kernel in ``shape``;
  ``sort``: each call first sorts the ids on the device (``dgl_zerocopy.cuda.gather.id_sort``, the
  store's sort) and the kernel writes every row back through their positions;
- ``pinned_copy(table, nbytes)``: the same for a copy of the table's first ``nbytes``;
- ``check(gather, out, reference)``: the output set to the reference's complement, one gather,
  AssertionError unless it equals the reference.

Each cell's launch is planned once (:func:`plan_launch`: the plan and the kernel arguments, from the
buffers' own addresses), so a timed gather is one kernel launch and nothing else on the host (a sorting cell adds the sort); the dry
run hands the same plan and arguments to the emulator (``run_plan``) over the same kind of buffers.
"""

from __future__ import annotations

import functools
import gc
import time
import warnings
from pathlib import Path

import link_plan
import numpy as np
import torch

from dgl_zerocopy.cuda.gather import gather_plan, id_sort, sort_policy
from dgl_zerocopy.cuda.gather.emulator import emulate_gather, run_plan
from dgl_zerocopy.cuda.gather.pcie_model import analyze
from dgl_zerocopy.store.huge_pages import HostTable

#: SMs the dry run plans for (an H100/H200); the grid shapes scale with it.
DRY_SMS = 132
_CHUNK_WORDS = 1 << 26  # the fill writes 256 MB at a time


def shape_options(shape: dict, sms: int) -> dict:
    """A shape of :data:`link_plan.SHAPES` as ``plan_gather`` keywords for a device of ``sms`` SMs."""
    return {
        "variant": shape.get("variant", "aligned"),
        "threads_per_row": 32 // shape["rows_per_warp"] if "rows_per_warp" in shape else None,
        "max_blocks": shape["blocks_per_sm"] * sms if "blocks_per_sm" in shape else None,
        "threads_per_block": shape.get("block", 256),
    }


def plan_launch(row_bytes: int, table_address: int, ids_address: int, num_ids: int, out_address: int, shape: dict, sms: int):
    """(plan, kernel arguments) of one gather of ``num_ids`` int64 ids into a contiguous output:
    what the GPU launches and the dry run emulates, from the same addresses' alignment."""
    plan = gather_plan.plan_gather(
        row_bytes, table_address, num_ids, elem_size=4, num_sms=sms, row_stride=row_bytes, out_address=out_address, **shape_options(shape, sms)
    )
    return plan, _arguments(plan, table_address, ids_address, 0, out_address)


def _arguments(plan: gather_plan.GatherPlan, table_address: int, ids_address: int, perm_address: int, out_address: int) -> tuple:
    """The kernel arguments of ``plan`` over a table and output of contiguous rows."""
    row = plan.row_bytes
    return gather_plan.kernel_arguments(
        plan, table_address=table_address, row_stride=row, ids_address=ids_address, perm_address=perm_address, out_address=out_address, out_stride=row
    )


@functools.cache
def model_metrics(row_bytes: int, shape: str, sms: int) -> dict:
    """The PCIe request model's figures for ``shape`` at ``row_bytes`` (dgl_zerocopy.cuda.gather.pcie_model,
    over the emulator's trace of 512 distinct random rows of a small table starting on a 128-byte line,
    as ours does): PCIe read requests per row and the link efficiency (useful over link bytes)."""
    rng = np.random.default_rng(row_bytes)
    table = rng.integers(0, 2**30, (4096, row_bytes // 4), dtype=np.int32)
    ids = rng.permutation(len(table))[:512]
    options = shape_options(link_plan.SHAPES[shape], sms)
    out, trace = emulate_gather(table, ids, variant=options.pop("variant"), trace=True, **options)
    if not np.array_equal(out, table[ids]):
        raise AssertionError(f"the emulated {shape} gather of {row_bytes} B rows differs from table[ids]")
    metrics = analyze(trace)
    return {"model_requests_per_row": metrics.requests_per_row, "model_link_efficiency": round(metrics.link_efficiency, 4)}


def _facts(plan: gather_plan.GatherPlan, table_bytes: int, sort: bool) -> dict:
    """The launch's facts; ``sort_auto``: whether ``sort_ids="auto"`` would sort this batch (the policy
    on this plan and table), beside what the cell does (``sorted_on_device``)."""
    decided = sort_policy.should_sort(plan, table_bytes) if plan.variant == "aligned" else ""
    return {
        "kernel": plan.kernel,
        "threads_per_row": plan.threads_per_row,
        "grid": plan.grid,
        "block": plan.block,
        "sort_auto": decided,
        "sorted_on_device": sort,
    }


def _host_room(nbytes: int, meminfo: str = "/proc/meminfo") -> None:
    """Refuse a table that would not fit in the host's available memory with room to spare: the
    kernel would kill the process while it registers the pages, losing every result."""
    try:
        available = next(int(line.split()[1]) * 1024 for line in Path(meminfo).read_text().splitlines() if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return
    if nbytes > 0.85 * available - (2 << 30):
        raise MemoryError(
            f"a {nbytes / 1e9:.1f} GB table does not fit in this host's {available / 1e9:.1f} GB of available memory (MemAvailable) with room to spare; use --tables without it"
        )


class _Table:
    """One set-up table: the HostTable, its words as the device's array type, what it got."""

    def __init__(self, host: HostTable, words, report: dict, pinned=None, device_words=None, settle=None) -> None:
        self.host, self.words, self.report, self.pinned, self.device_words = host, words, report, pinned, device_words
        self.nbytes = host.nbytes
        self._settle = settle

    def close(self) -> None:
        """Wait for the device (``settle``: nothing may still read the table), free the device copy,
        unpin and unmap; views made by the cells are gone by now (each cell's are its locals)."""
        if self._settle is not None:
            self._settle()
        self.words = self.device_words = None
        if self._settle is not None:
            self._settle(free=True)
        try:
            self.host.close()
        except RuntimeError:  # a view in a reference cycle (a failed cell's traceback): collect, then again
            gc.collect()
            try:
                self.host.close()
            except RuntimeError as e:  # still alive somewhere: unmapped when it goes; the run goes on
                warnings.warn(str(e), ResourceWarning, stacklevel=2)


def _report(host: HostTable, **seconds: float) -> dict:
    pages = host.report()
    return {
        "pages": pages.method,
        "huge_share": round(pages.huge_share, 4),
        "fallback": pages.fallback or "",
        "kernel_page_bytes": pages.kernel_page_bytes,
        "vm_flags": " ".join(pages.vm_flags),
        **{k: round(v, 3) for k, v in seconds.items()},
    }


def _differences(same_rows: np.ndarray, total: int) -> str:
    bad = np.flatnonzero(~same_rows)
    return f"wrong result: {bad.size} of {total} rows differ from table[ids], the first at position {int(bad[0])}"


class CpuEmulator:
    """The dry run: tiny tables in real HostTable memory (not registered: no GPU), our kernels run
    by the CPU emulator on the plan and arguments the GPU would launch (over a second copy of the
    table for the device-memory gather), references by NumPy."""

    name = "cpu (dry run: kernels emulated, no GPU figures)"
    sms = DRY_SMS

    def open_table(self, nbytes: int, memory: str, need_device_copy: bool) -> _Table:
        begun = time.perf_counter()
        host = HostTable((nbytes // 4,), np.int32, pages=memory)
        allocated = time.perf_counter()
        rng = np.random.default_rng(nbytes)
        words = host.array
        for start in range(0, words.size, _CHUNK_WORDS):
            words[start : start + _CHUNK_WORDS] = rng.integers(-(2**30), 2**30, min(_CHUNK_WORDS, words.size - start), dtype=np.int32)
        filled = time.perf_counter()
        device_words = words.copy() if need_device_copy else None
        copied = time.perf_counter()
        seconds = {"alloc_s": allocated - begun, "pin_s": 0.0, "fill_s": filled - allocated, "device_copy_s": copied - filled}
        return _Table(host, words, _report(host, **seconds), device_words=device_words)

    def gather(self, table: _Table, row_bytes: int, ids: np.ndarray, shape: dict, on_device: bool, sort: bool = False):
        rows, cols = table.nbytes // row_bytes, row_bytes // 4
        reference = table.words[: rows * cols].reshape(rows, cols)[ids]
        out = np.empty_like(reference)
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        base = table.device_words if on_device else table.words  # a copy stands for device memory
        plan, args = plan_launch(row_bytes, int(base.ctypes.data), int(ids.ctypes.data), ids.size, int(out.ctypes.data), shape, self.sms)

        def gather(keep=(ids, base)) -> np.ndarray:  # keep: the buffers the kernel reads stay alive
            if sort:  # NumPy stands for CuPy: the same calls
                sorted_ids, positions = id_sort.sort_for_gather(ids, rows)
                run_plan(plan, _arguments(plan, int(base.ctypes.data), int(sorted_ids.ctypes.data), int(positions.ctypes.data), int(out.ctypes.data)))
            else:
                run_plan(plan, args)
            return out

        return gather, out, reference, _facts(plan, rows * row_bytes, sort)

    def pinned_copy(self, table: _Table, nbytes: int):
        src = table.words[: nbytes // 4]
        out = np.empty_like(src)
        return (lambda: np.copyto(out, src)), out, src.copy(), {"kernel": "contiguous copy (dry run)"}

    def check(self, gather, out: np.ndarray, reference: np.ndarray) -> None:
        np.invert(reference, out=out)
        gather()
        same = (out == reference).reshape(len(reference), -1).all(axis=1)
        if not same.all():
            raise AssertionError(_differences(same, len(reference)))


class GpuDevice:
    """The GPU run: tables registered in place (``HostTable.pin``), filled from the device, our
    kernels launched through CuPy on torch's current stream, references ``table[ids]`` computed by
    torch on the host and copied to the device."""

    def __init__(self) -> None:
        if not torch.cuda.is_available():
            raise SystemExit("link_experiment: no CUDA GPU here (torch.cuda.is_available() is False); run it with --dry-run to check the plan on the CPU")
        self.index = torch.cuda.current_device()
        self.device = torch.device("cuda", self.index)
        self.sms = torch.cuda.get_device_properties(self.device).multi_processor_count
        self.name = torch.cuda.get_device_name(self.device)

    def open_table(self, nbytes: int, memory: str, need_device_copy: bool) -> _Table:
        _host_room(nbytes)
        begun = time.perf_counter()
        host = HostTable((nbytes // 4,), np.int32, pages=memory)
        words = device_words = None
        try:
            allocated = time.perf_counter()
            pinned = host.pin()  # the driver faults in and locks every page
            registered = time.perf_counter()
            words = host.tensor()
            gen = torch.Generator(device=self.device).manual_seed(nbytes)
            for start in range(0, words.numel(), _CHUNK_WORDS):
                stop = min(start + _CHUNK_WORDS, words.numel())
                words[start:stop].copy_(torch.randint(-(2**30), 2**30, (stop - start,), dtype=torch.int32, device=self.device, generator=gen))
            torch.cuda.synchronize(self.device)
            filled = time.perf_counter()
            device_words = words.to(self.device) if need_device_copy else None
            torch.cuda.synchronize(self.device)
            copied = time.perf_counter()
        except BaseException:
            words = device_words = None  # noqa: F841 - our views go before the unmap
            try:
                host.close()  # unpins what pin() registered: nothing stays pinned after a failed set-up
            except RuntimeError:  # a view in the traceback: unpinned already, unmapped when it goes
                pass
            raise
        seconds = {"alloc_s": allocated - begun, "pin_s": registered - allocated, "fill_s": filled - registered, "device_copy_s": copied - filled}
        return _Table(host, words, _report(host, **seconds), pinned, device_words, settle=self._settle)

    def _settle(self, free: bool = False) -> None:
        """Wait for the device's work (before a table is unpinned); ``free``: give the cached
        device memory back (the next table's device copy needs it)."""
        torch.cuda.synchronize(self.device)
        if free:
            torch.cuda.empty_cache()

    def gather(self, table: _Table, row_bytes: int, ids: np.ndarray, shape: dict, on_device: bool, sort: bool = False):
        import cupy

        from dgl_zerocopy.cuda.gather.launcher import compile_gather_module, cupy_stream

        rows, cols = table.nbytes // row_bytes, row_bytes // 4
        host_ids = torch.from_numpy(ids)
        reference = table.words[: rows * cols].view(rows, cols)[host_ids].to(self.device)
        ids_on_device = host_ids.to(self.device)
        out = torch.empty_like(reference)
        base = table.device_words.data_ptr() if on_device else table.pinned.device_ptr
        plan, args = plan_launch(row_bytes, base, ids_on_device.data_ptr(), ids.size, out.data_ptr(), shape, self.sms)
        with cupy.cuda.Device(self.index):
            kernel = compile_gather_module(self.index, (plan.kernel,)).get_function(plan.kernel)
        types = {"ptr": np.uint64, "i64": np.int64, "i32": np.int32}
        args = tuple(types[kind](value) for kind, value in args)
        stream = cupy_stream(cupy, torch.cuda.current_stream(self.device), self.index)

        def gather(keep=(ids_on_device, table)):  # keep: what the launch reads stays alive while it can run
            with stream:
                if sort:  # temporaries on the stream: CuPy's pool reuses them there only after the kernel
                    sorted_ids, positions = id_sort.sort_for_gather(cupy.asarray(ids_on_device), rows)
                    call = _arguments(plan, base, int(sorted_ids.data.ptr), int(positions.data.ptr), out.data_ptr())
                    kernel((plan.grid,), (plan.block,), tuple(types[kind](value) for kind, value in call))
                else:
                    kernel((plan.grid,), (plan.block,), args)
            return out

        return gather, out, reference, _facts(plan, rows * row_bytes, sort)

    def pinned_copy(self, table: _Table, nbytes: int):
        src = table.words[: nbytes // 4]
        out = torch.empty(src.shape, dtype=src.dtype, device=self.device)
        kind = "pinned" if src.is_pinned() else "pageable (not pinned)"
        return (lambda: out.copy_(src, non_blocking=True)), out, src.to(self.device), {"kernel": f"copy_ from {kind} host memory"}

    def check(self, gather, out, reference) -> None:
        out.copy_(torch.bitwise_not(reference))
        gather()
        torch.cuda.synchronize(self.device)
        same = (out == reference).reshape(len(reference), -1).all(dim=1)
        if not bool(same.all()):
            raise AssertionError(_differences(same.cpu().numpy(), len(reference)))
