"""A FeatureStore described for another process: :class:`StoreSpec` names the table's memory (shared
memory or the file it maps), never a copy of it, and its parts; ``FeatureStore.spec()`` makes one,
``FeatureStore.from_spec(spec)`` opens it unbound in the receiving process, which binds it to its own
device. Pickling a store sends its spec."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .backends import GatherOptions
from .compression import Codec, load_compressed
from .table_input import as_table, codes_view, human_size


@dataclass(frozen=True)
class TableState:
    """What a store holds of its table, as :func:`make_spec` reads it (the store passes its own)."""

    table: torch.Tensor
    file: tuple | None
    storage: Any  # a PreparedStorage: rows left in their file
    codec: Codec | None
    method: str | None
    path: Path | None
    out_dtype: torch.dtype


@dataclass(frozen=True, eq=False)
class StoreSpec:
    """A picklable description of a FeatureStore, made by ``FeatureStore.spec()`` and opened by
    ``FeatureStore.from_spec``; it names the table's memory and never holds a copy of it.

    Args:
        table: ``(filename, offset, dtype, shape, mode)`` of a file map, a tensor in shared memory
            (``torch.multiprocessing`` sends a handle to it), or the storage tier's prepared file
            (opened again by name).
        backend: the backend's name (``"zerocopy"``, ``"cpu"`` or ``"gpu"``).
        device_type: ``"cuda"`` (the receiver binds to its current CUDA device) or ``"cpu"``.
        kernel: the zero-copy kernel's :class:`~dgl_zerocopy.store.GatherOptions`.
        compressed: the codec's name, axis, method, folder, int8 parameters and ``out_dtype``; None
            for an uncompressed table.
        cache_rows: the device cache's ranked rows (int64, CPU), or None: no cache.
        cache_policy: the name of the policy that ranked them.
        on_storage: True when ``table`` is a storage tier's file (rows left in the file).
    """

    table: Any
    backend: str
    device_type: str
    kernel: GatherOptions
    compressed: dict | None = None
    cache_rows: torch.Tensor | None = None
    cache_policy: str | None = None
    on_storage: bool = False


def make_spec(state: TableState, backend: str, device_type: str, kernel: GatherOptions, cache_rows=None, cache_policy=None) -> StoreSpec:
    """The spec of a store; ``TypeError`` when its table is in private memory (sending it would copy it)."""
    if state.storage is not None:  # sent as its file's name and options: each process buffers on its own
        return StoreSpec(state.storage, state.storage.backend, device_type, kernel, on_storage=True)
    if state.file is not None:
        table = state.file
    elif state.table.is_shared():
        table = state.table  # torch.multiprocessing's reduction sends a handle to its shared memory
    else:
        # We never share_memory_() the table ourselves, nor hand a private tensor to torch's
        # ForkingPickler (whose reduction does the same): torch moves the storage into shared
        # memory in place and frees the old pages, which a zero-copy store has registered with
        # cudaHostRegister: the kernel would read freed memory and the registration would leak.
        raise TypeError(private_table_message(state.table, state.codec))
    compressed = None
    if state.codec is not None:
        codec = state.codec
        params = (None, None) if state.path is not None or codec.scale is None else (_param_ref(codec.scale), _param_ref(codec.offset))
        compressed = {"name": codec.name, "axis": codec.axis, "method": state.method, "path": state.path, "scale": params[0], "offset": params[1]}
        compressed["out_dtype"] = state.out_dtype
    return StoreSpec(table, backend, device_type, kernel, compressed, cache_rows, cache_policy)


def open_spec(spec: StoreSpec) -> tuple:
    """The arguments of ``FeatureStore._init_unbound`` for ``spec`` in this process: the same shared memory or file."""
    if spec.on_storage:
        storage = spec.table
        table = torch.empty(storage.table.shape, dtype=storage.table.dtype, device="meta")
        codec, folder = storage.table.codec, storage.table.folder
        return (table, None, None, storage.backend, spec.device_type, spec.kernel, codec, storage.out_dtype, storage.table.method, folder, None, None, storage)
    table = spec.table
    file = table if isinstance(table, tuple) else None
    if file is not None:
        table = _open_file_ref(file)
    table, read_only_array = as_table(table)
    codec = out_dtype = method = path = None
    compressed = spec.compressed
    if compressed is not None:
        method, path, out_dtype = compressed["method"], compressed["path"], compressed["out_dtype"]
        if path is not None:
            codec = load_compressed(path).codec  # the scales map the folder's files again
        elif compressed["scale"] is not None:
            scale, offset = (_open_param(compressed[k]) for k in ("scale", "offset"))
            codec = Codec(compressed["name"], scale, offset, compressed["axis"])
        else:
            codec = Codec(compressed["name"])
        table = codes_view(table, codec)
    return (table, read_only_array, file, spec.backend, spec.device_type, spec.kernel, codec, out_dtype, method, path, spec.cache_rows, spec.cache_policy, None)


def _open_file_ref(file: tuple) -> np.memmap:
    filename, offset, dtype, shape, mode = file
    return np.memmap(filename, dtype=np.dtype(dtype), mode=mode, offset=offset, shape=tuple(shape))


def _param_ref(param: torch.Tensor):
    """An int8 scale/offset as pickled: the tensor itself when in shared memory (torch.multiprocessing
    sends a handle), else a NumPy copy (they are a small part of the table: 8 bytes per row or column)."""
    return param if param.is_shared() else param.numpy().copy()


def _open_param(param) -> torch.Tensor:
    return param if isinstance(param, torch.Tensor) else torch.from_numpy(param)


def private_table_message(table: torch.Tensor, codec: Codec | None = None) -> str:
    rows, cols = table.shape
    dtype = str(table.dtype).removeprefix("torch.")
    if codec is not None:
        return (
            f"cannot pickle this FeatureStore: its {codec.name} codes ({rows} x {cols} {dtype}, "
            f"{human_size(table.numel() * table.element_size())}) are in private memory, and sending them would copy them into "
            f"every process. Compress once into a folder, dgl_zerocopy.compress(data, {codec.name!r}, out=DIR), and build "
            f"FeatureStore(DIR) (it is sent as its files); or share the codes, FeatureStore(dgl_zerocopy.compress(data, "
            f"{codec.name!r}).share_memory_()); or create the FeatureStore in each process"
        )
    return (
        f"cannot pickle this FeatureStore: its table ({rows} x {cols} {dtype}, {human_size(table.numel() * table.element_size())}) "
        f"is in private memory, and sending it would copy it into every process. Share it instead: build the store "
        f"over shared memory, FeatureStore(feat.share_memory_(), ...), calling share_memory_() before any store is made "
        f"over feat (it moves the storage, so it must happen before the table is pinned); or from a .npy file "
        f"(FeatureStore('feat.npy') or numpy.load(path, mmap_mode='r')); or create the FeatureStore in each process"
    )
