"""Zero-copy gather: GPU threads read rows straight from the pinned host table over PCIe."""
from __future__ import annotations

import torch

from ..pinning import PinnedRange
from ..transfer import to_device
from . import GatherOptions


class ZeroCopyBackend:
    """Pins ``table`` in place and gathers with the CuPy kernel on a torch stream.

    The table is kept alive by this object for as long as it is pinned. Each launch records an
    event on its stream; :meth:`close` waits for those events before it unpins, so no kernel
    reads a range that is no longer registered.
    """

    def __init__(self, table: torch.Tensor, device: torch.device, read_only: bool = False,
                 options: GatherOptions = GatherOptions()) -> None:
        import cupy

        self.table = table
        self.device = device
        self.options = options
        self._cupy = cupy
        self._launched: dict[int, torch.cuda.Event] = {}  # stream handle -> event after its last launch
        with cupy.cuda.Device(device.index):
            self._pinned = PinnedRange(table.data_ptr(), table.numel() * table.element_size(), read_only=read_only)

    def gather(self, ids: torch.Tensor, out: torch.Tensor | None, stream) -> torch.Tensor:
        from ..cuda_gather import launch_gather

        cupy = self._cupy
        with torch.cuda.stream(stream), cupy.cuda.Device(self.device.index):
            # Allocated while `stream` is current, so the caching allocator ties them to it.
            ids = to_device(ids, self.device)
            if out is None:
                out = torch.empty((ids.shape[0], self.table.shape[1]), dtype=self.table.dtype, device=self.device)
            launch_gather(
                self._pinned.device_ptr, tuple(self.table.shape), self.table.element_size(), self.table.stride(0) * self.table.element_size(),
                _cupy_view(cupy, ids), out.data_ptr(),
                stream=stream, variant=self.options.variant, sort=self.options.sort_ids, max_blocks=self.options.max_blocks,
            )
            event = self._launched.setdefault(stream.cuda_stream, torch.cuda.Event())
            event.record(stream)
        return out

    def close(self) -> None:
        try:
            for event in self._launched.values():
                event.synchronize()
        finally:
            self._launched.clear()
            self._pinned.unpin()


def _cupy_view(cupy, tensor: torch.Tensor):
    """A CuPy array over a CUDA tensor's memory, without the stream synchronisation that
    ``__cuda_array_interface__`` consumption adds (the launch is already ordered on the stream)."""
    memory = cupy.cuda.UnownedMemory(tensor.data_ptr(), tensor.numel() * tensor.element_size(), tensor, tensor.device.index)
    return cupy.ndarray(tuple(tensor.shape), dtype=str(tensor.dtype).removeprefix("torch."), memptr=cupy.cuda.MemoryPointer(memory, 0))
