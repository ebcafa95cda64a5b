"""Zero-copy gather: GPU threads read rows straight from the pinned host table over PCIe."""
from __future__ import annotations

import torch

from ..pinning import PinnedRange


class ZeroCopyBackend:
    """Pins ``table`` in place and gathers with the aligned CuPy kernel on a torch stream.

    The table is kept alive by this object for as long as it is pinned.
    """

    def __init__(self, table: torch.Tensor, device: torch.device, read_only: bool = False, variant: str = "aligned") -> None:
        import cupy

        self.table = table
        self.device = device
        self.variant = variant
        self._cupy = cupy
        with cupy.cuda.Device(device.index):
            self._pinned = PinnedRange(table.data_ptr(), table.numel() * table.element_size(), read_only=read_only)

    def gather(self, ids: torch.Tensor, out: torch.Tensor | None, stream) -> torch.Tensor:
        from ..cuda_gather import launch_gather

        cupy = self._cupy
        stream = stream or torch.cuda.current_stream(self.device)
        with torch.cuda.stream(stream), cupy.cuda.Device(self.device.index):
            # Allocated while `stream` is current, so the caching allocator ties them to it.
            ids = ids.to(self.device, non_blocking=True)
            if out is None:
                out = torch.empty((ids.shape[0], self.table.shape[1]), dtype=self.table.dtype, device=self.device)
            launch_gather(
                self._pinned.device_ptr, tuple(self.table.shape), self.table.element_size(), self.table.stride(0) * self.table.element_size(),
                _cupy_view(cupy, ids), out.data_ptr(),
                stream=cupy.cuda.ExternalStream(stream.cuda_stream, self.device.index), variant=self.variant,
            )
        return out

    def close(self) -> None:
        self._pinned.unpin()


def _cupy_view(cupy, tensor: torch.Tensor):
    """A CuPy array over a CUDA tensor's memory, without the stream synchronisation that
    ``__cuda_array_interface__`` consumption adds (the launch is already ordered on the stream)."""
    memory = cupy.cuda.UnownedMemory(tensor.data_ptr(), tensor.numel() * tensor.element_size(), tensor, tensor.device.index)
    return cupy.ndarray(tuple(tensor.shape), dtype=str(tensor.dtype).removeprefix("torch."), memptr=cupy.cuda.MemoryPointer(memory, 0))
