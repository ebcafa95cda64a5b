"""Zero-copy gather: GPU threads read rows straight from the pinned host table over PCIe.

A compressed table (``codec``: fp16, bf16 or int8 codes, :mod:`dgl_zerocopy.compression`) is read
the same way, codes only, and decoded inside the kernel (``gather_decode``, kernels/gather.cu): the
link carries 2 or 4 times fewer bytes per row and the GPU receives ``out_dtype`` rows.
"""
from __future__ import annotations

import torch

from ..compression.codec import Codec
from ..pinning import PinnedRange
from ..transfer import to_device
from . import GatherOptions

#: The dtypes the decoding kernel writes.
OUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class ZeroCopyBackend:
    """Pins ``table`` in place and gathers with the CuPy kernel on a torch stream.

    The table is kept alive by this object for as long as it is pinned. Each launch records an
    event on its stream; :meth:`close` waits for those events before it unpins, so no kernel
    reads a range that is no longer registered.

    With a ``codec``, ``table`` holds its codes (``codec.stored_dtype``) and gathers return
    ``out_dtype`` rows equal to ``codec.decode(table[ids], ids, out_dtype)``. An int8 codec's
    (scale, offset) are packed into float32 pairs, so that one 8-byte load fetches both: per column
    they are copied to device memory (a few KB; the constructor waits for that copy), per row into
    pinned host memory (8 bytes per row, read over PCIe once per gathered row: a per-row table
    does not fit the device any better than the codes do).
    """

    def __init__(self, table: torch.Tensor, device: torch.device, read_only: bool = False,
                 options: GatherOptions = GatherOptions(), codec: Codec | None = None,
                 out_dtype: torch.dtype | None = torch.float32) -> None:
        import cupy

        if codec is not None:
            out_dtype = torch.float32 if out_dtype is None else out_dtype
            _check_codec(table, codec, out_dtype, options)
        self.table = table
        self.device = device
        self.options = options
        self.codec = codec
        self.out_dtype = out_dtype if codec is not None else table.dtype
        self._cupy = cupy
        self._launched: dict[int, torch.cuda.Event] = {}  # stream handle -> event after its last launch
        self._pairs: torch.Tensor | None = None  # an int8 codec's (scale, offset) pairs, read by the kernel
        self._pairs_ptr = 0
        with cupy.cuda.Device(device.index):
            self._pinned = PinnedRange(table.data_ptr(), table.numel() * table.element_size(), read_only=read_only)
            try:
                if codec is not None and codec.name == "int8":
                    self._pairs, self._pairs_ptr = self._place_pairs(codec)
            except BaseException:
                self._pinned.unpin()
                raise

    def _place_pairs(self, codec: Codec) -> tuple[torch.Tensor, int]:
        """The (scale, offset) pairs where the kernel reads them, and the address it reads."""
        if codec.axis == "column":
            pairs = torch.stack((codec.scale, codec.offset), dim=1).to(self.device)
            # Allocated and filled on the current stream; gathers run on others: wait once, here.
            torch.cuda.current_stream(self.device).synchronize()
            return pairs, pairs.data_ptr()
        # Per row: filled in place in pinned memory (no pageable copy of the whole array first).
        pairs = torch.empty((codec.scale.numel(), 2), dtype=torch.float32, pin_memory=True)
        pairs[:, 0] = codec.scale
        pairs[:, 1] = codec.offset
        # The address kernels use, asked of the driver (equal to the host address under UVA).
        return pairs, int(self._cupy.cuda.runtime.pointerGetAttributes(pairs.data_ptr()).devicePointer)

    def gather(self, ids: torch.Tensor, out: torch.Tensor | None, stream) -> torch.Tensor:
        from ..cuda_gather import launch_decode, launch_gather

        cupy = self._cupy
        table = self.table
        with torch.cuda.stream(stream), cupy.cuda.Device(self.device.index):
            # Allocated while `stream` is current, so the caching allocator ties them to it.
            ids = to_device(ids, self.device)
            if out is None:
                out = torch.empty((ids.shape[0], table.shape[1]), dtype=self.out_dtype, device=self.device)
            common = dict(stream=stream, sort=self.options.sort_ids, max_blocks=self.options.max_blocks)
            row_stride = table.stride(0) * table.element_size()
            if self.codec is None:
                launch_gather(self._pinned.device_ptr, tuple(table.shape), table.element_size(), row_stride,
                              _cupy_view(cupy, ids), out.data_ptr(), variant=self.options.variant, **common)
            else:
                launch_decode(self._pinned.device_ptr, tuple(table.shape), self.codec.name, row_stride,
                              _cupy_view(cupy, ids), out.data_ptr(), out_format=_format(self.out_dtype),
                              affine=self.codec.axis, affine_ptr=self._pairs_ptr, **common)
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
            self._pairs = None  # after the kernels that read them (the events above)


def _format(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _check_codec(table: torch.Tensor, codec: Codec, out_dtype: torch.dtype, options: GatherOptions) -> None:
    if table.dim() != 2 or table.dtype != codec.stored_dtype:
        raise TypeError(f"codec {codec.name!r} needs a 2-D table of {codec.stored_dtype} codes, but got "
                        f"{table.dtype} of shape {tuple(table.shape)}")
    if out_dtype not in OUT_DTYPES:
        raise ValueError(f"out_dtype must be one of {', '.join(map(str, OUT_DTYPES))}, but got {out_dtype}")
    if options.variant != "aligned":
        raise ValueError(f"variant={options.variant!r} is the uncompressed baseline kernel; a compressed table is "
                         "gathered by the aligned decoding kernel: use variant='aligned'")
    if codec.name == "int8":
        rows, columns = table.shape
        length = columns if codec.axis == "column" else rows
        if codec.scale.numel() != length:
            raise ValueError(f"an int8 codec per {codec.axis} needs {length} scales for a table of shape "
                             f"{tuple(table.shape)}, but has {codec.scale.numel()}")


def _cupy_view(cupy, tensor: torch.Tensor):
    """A CuPy array over a CUDA tensor's memory, without the stream synchronisation that
    ``__cuda_array_interface__`` consumption adds (the launch is already ordered on the stream)."""
    memory = cupy.cuda.UnownedMemory(tensor.data_ptr(), tensor.numel() * tensor.element_size(), tensor, tensor.device.index)
    return cupy.ndarray(tuple(tensor.shape), dtype=str(tensor.dtype).removeprefix("torch."), memptr=cupy.cuda.MemoryPointer(memory, 0))
