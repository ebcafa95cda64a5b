"""Zero-copy gather: GPU threads read rows straight from the pinned host table over PCIe.

A compressed table (``codec``: fp16, bf16 or int8 codes, :mod:`dgl_zerocopy.store.compression`) is read
the same way, codes only, and decoded inside the kernel (``gather_decode``, kernels/gather.cu): the
link carries 2 or 4 times fewer bytes per row and the GPU receives ``out_dtype`` rows.

With a hot-row ``cache`` (:class:`dgl_zerocopy.store.cache.HotRowCache` on the backend's device), the same
kernels read each row whose slot map entry is >= 0 from the cache in device memory instead: one
fused launch for hits and misses, and only the misses cross PCIe.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..compression.codec import Codec
from ..pinning import PinnedRange
from ..transfer import to_device
from .base import GatherOptions

if TYPE_CHECKING:
    from ..cache import HotRowCache

#: The dtypes the decoding kernel writes.
OUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class ZeroCopyBackend:
    """Pins ``table`` in place and gathers with the CuPy kernel on a torch stream.

    The table is kept alive by this object for as long as it is pinned. A table that is
    page-locked already (``tensor.pin_memory()``, ``cudaHostAlloc``) is read as it is: never
    registered, never unregistered (:class:`~dgl_zerocopy.store.pinning.PinnedRange`). Each launch
    records its stream's event (one per stream, reused); :meth:`close` waits for those events
    before it unpins, so no kernel reads a range that is no longer registered.

    With a ``codec``, ``table`` holds its codes (``codec.stored_dtype``) and gathers return
    ``out_dtype`` rows equal to ``codec.decode(table[ids], ids, out_dtype)``. An int8 codec's
    (scale, offset) are packed into float32 pairs, so that one 8-byte load fetches both: per column
    they are copied to device memory (a few KB; the constructor waits for that copy), per row into
    pinned host memory (8 bytes per row, read over PCIe once per gathered row: a per-row table
    does not fit the device any better than the codes do).

    With a ``cache`` (rows of ``table``, so codes for a codec, and its slot map, on ``device``),
    :meth:`gather` runs the fused cached kernel and counts the batch's hits with
    ``cache.count(ids)`` on the gather's stream. An int8 per-row codec's pairs of the cached rows
    are copied to the device too (8 bytes per cached row), so a hit reads nothing over PCIe. The
    backend holds the cache until :meth:`close` has waited for the kernels that read it.
    """

    def __init__(
        self,
        table: torch.Tensor,
        device: torch.device,
        read_only: bool = False,
        options: GatherOptions = GatherOptions(),  # noqa: B008 (frozen: one immutable default)
        codec: Codec | None = None,
        out_dtype: torch.dtype | None = torch.float32,
        cache: HotRowCache | None = None,
    ) -> None:
        import cupy

        if codec is not None:
            out_dtype = torch.float32 if out_dtype is None else out_dtype
            _check_codec(table, codec, out_dtype, options)
        if cache is not None:
            _check_cache(table, device, cache, options)
        self.table = table
        self.device = device
        self.options = options
        self.codec = codec
        self.out_dtype = out_dtype if codec is not None else table.dtype
        self._cupy = cupy
        self._launched: dict[int, torch.cuda.Event] = {}  # stream handle -> event after its last launch
        self._pairs: torch.Tensor | None = None  # an int8 codec's (scale, offset) pairs, read by the kernel
        self._pairs_ptr = 0
        self.cache = cache  # read by the kernels: dropped only in close(), after them
        self._cache_pairs: torch.Tensor | None = None  # per-row int8: the cached rows' pairs, one per slot
        with cupy.cuda.Device(device.index):
            self._pinned = PinnedRange(table.data_ptr(), table.numel() * table.element_size(), read_only=read_only)
            try:
                if codec is not None and codec.name == "int8":
                    self._pairs, self._pairs_ptr = self._place_pairs(codec)
                    if cache is not None and codec.axis == "row":
                        self._cache_pairs = torch.stack((codec.scale[cache.row_ids], codec.offset[cache.row_ids]), dim=1).to(device)
                        torch.cuda.current_stream(device).synchronize()  # filled on this stream; gathers use others
                self._launch_cache = self._device_cache()
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

    def _device_cache(self):
        """The cache as the launcher takes it (made once: its tensors never move), or None."""
        from ...cuda.gather.launcher import DeviceCache

        cache = self.cache
        if cache is None:
            return None
        return DeviceCache(
            rows_ptr=cache.rows.data_ptr(),
            row_stride_bytes=cache.rows.stride(0) * cache.rows.element_size(),
            slot_map=_cupy_view(self._cupy, cache.slot_map),
            row_pairs_ptr=0 if self._cache_pairs is None else self._cache_pairs.data_ptr(),
        )

    def gather(self, ids: torch.Tensor, out: torch.Tensor | None, stream) -> torch.Tensor:
        """Enqueue the kernel for ``table[ids]`` on ``stream``. ids are already checked: int64/int32
        on the CPU or the device, within ``[0, num_rows)`` (device ids clamped there), so the launcher
        is told not to check them (nor the cache's slot map, checked once when the backend was made)."""
        from ...cuda.gather.launcher import launch_decode, launch_gather

        cupy = self._cupy
        table = self.table
        with torch.cuda.stream(stream), cupy.cuda.Device(self.device.index):
            # Allocated while `stream` is current, so the caching allocator ties them to it.
            ids = to_device(ids, self.device)
            if out is None:
                out = torch.empty((ids.shape[0], table.shape[1]), dtype=self.out_dtype, device=self.device)
            common = dict(stream=stream, sort=self.options.sort_ids, max_blocks=self.options.max_blocks, cache=self._launch_cache, unchecked=True)
            row_stride = table.stride(0) * table.element_size()
            if self.codec is None:
                launch_gather(
                    self._pinned.device_ptr,
                    tuple(table.shape),
                    table.element_size(),
                    row_stride,
                    _cupy_view(cupy, ids),
                    out.data_ptr(),
                    variant=self.options.variant,
                    **common,
                )
            else:
                launch_decode(
                    self._pinned.device_ptr,
                    tuple(table.shape),
                    self.codec.name,
                    row_stride,
                    _cupy_view(cupy, ids),
                    out.data_ptr(),
                    out_format=_format(self.out_dtype),
                    affine=self.codec.axis,
                    affine_ptr=self._pairs_ptr,
                    **common,
                )
            if self.cache is not None:
                self.cache.count(ids)  # on `stream` (current here), after the gather: no host sync
            event = self._launched.get(stream.cuda_stream)
            if event is None:  # one event per stream, made once and recorded again after each launch
                event = self._launched[stream.cuda_stream] = torch.cuda.Event()
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
            self._cache_pairs = None
            self._launch_cache = None
            self.cache = None


def _format(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _check_codec(table: torch.Tensor, codec: Codec, out_dtype: torch.dtype, options: GatherOptions) -> None:
    if table.dim() != 2 or table.dtype != codec.stored_dtype:
        raise TypeError(f"codec {codec.name!r} needs a 2-D table of {codec.stored_dtype} codes, but got {table.dtype} of shape {tuple(table.shape)}")
    if out_dtype not in OUT_DTYPES:
        raise ValueError(f"out_dtype must be one of {', '.join(map(str, OUT_DTYPES))}, but got {out_dtype}")
    if options.variant != "aligned":
        raise ValueError(
            f"variant={options.variant!r} is the uncompressed baseline kernel; a compressed table is "
            "gathered by the aligned decoding kernel: use variant='aligned'"
        )
    if codec.name == "int8":
        rows, columns = table.shape
        length = columns if codec.axis == "column" else rows
        if codec.scale.numel() != length:
            raise ValueError(f"an int8 codec per {codec.axis} needs {length} scales for a table of shape {tuple(table.shape)}, but has {codec.scale.numel()}")


def _check_cache(table: torch.Tensor, device: torch.device, cache: HotRowCache, options: GatherOptions) -> None:
    rows, slot_map = cache.rows, cache.slot_map
    if rows.device != device or slot_map.device != device:
        raise ValueError(
            f"the cache must be on the backend's device {device}, but its rows are on {rows.device} and its "
            f"slot map on {slot_map.device}: build it with device={str(device)!r}"
        )
    if rows.dim() != 2 or rows.dtype != table.dtype or rows.shape[1] != table.shape[1] or slot_map.shape != (table.shape[0],):
        raise ValueError(
            f"the cache must hold rows of this table ({table.dtype}, {table.shape[0]} rows of {table.shape[1]}): "
            f"got {rows.dtype} rows of shape {tuple(rows.shape)} and a slot map of {slot_map.shape[0]} entries"
        )
    if rows.shape[0] and rows.stride(1) != 1 or not slot_map.is_contiguous():
        raise ValueError("the cache's rows must each be contiguous, and its slot map contiguous")
    if options.variant != "aligned":
        raise ValueError(f"variant={options.variant!r} is the uncached baseline kernel; a cache is read by the aligned kernel: use variant='aligned'")


def _cupy_view(cupy, tensor: torch.Tensor):
    """A CuPy array over a CUDA tensor's memory, without the stream synchronisation that
    ``__cuda_array_interface__`` consumption adds (the launch is already ordered on the stream)."""
    memory = cupy.cuda.UnownedMemory(tensor.data_ptr(), tensor.numel() * tensor.element_size(), tensor, tensor.device.index)
    return cupy.ndarray(tuple(tensor.shape), dtype=str(tensor.dtype).removeprefix("torch."), memptr=cupy.cuda.MemoryPointer(memory, 0))
