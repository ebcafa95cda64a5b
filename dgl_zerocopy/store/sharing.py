"""A FeatureStore sent to another process: pickled by reference to the table's memory (shared
memory or the file it maps), never a copy; rebuilt unbound in the receiving process, which binds it
to its own device. (``FeatureStore.__reduce__`` calls :func:`reduce_store`.)"""

from __future__ import annotations

import numpy as np
import torch

from .backends import GatherOptions
from .compression import Codec, load_compressed
from .table_input import as_table, codes_view, human_size


def reduce_store(store) -> tuple:
    """``(rebuild_store, args)`` for pickling an open FeatureStore ``store`` (untyped: this module
    must not import the store's module, which imports it); ``TypeError`` when its table is in
    private memory (sending it would copy it)."""
    device_type = store._device.type if store._device is not None else store._device_type
    options = (store.options.variant, store.options.sort_ids, store.options.max_blocks)
    if store._storage is not None:  # sent as its file's name and options: each process buffers on its own
        return rebuild_storage_store, (type(store), store._storage, device_type, options)
    if store._file is not None:
        table = store._file
    elif store._table.is_shared():
        table = store._table  # torch.multiprocessing's reduction sends a handle to its shared memory
    else:
        # We never share_memory_() the table ourselves, nor hand a private tensor to torch's
        # ForkingPickler (whose reduction does the same): torch moves the storage into shared
        # memory in place and frees the old pages, which a zero-copy store has registered with
        # cudaHostRegister: the kernel would read freed memory and the registration would leak.
        raise TypeError(private_table_message(store._table, store._codec))
    compressed = None
    if store._codec is not None:
        params = (None, None) if store._path is not None or store._codec.scale is None else (_param_ref(store._codec.scale), _param_ref(store._codec.offset))
        compressed = {
            "name": store._codec.name,
            "axis": store._codec.axis,
            "method": store._method,
            "path": store._path,
            "scale": params[0],
            "offset": params[1],
            "out_dtype": store._out_dtype,
        }
    cache = (store._cache_rows, store._cache_policy) if store._cache_rows is not None else None
    return rebuild_store, (type(store), table, store.backend, device_type, options, compressed, cache)


def rebuild_store(cls: type, table, backend: str, device_type: str, options: tuple, compressed: dict | None = None, cache: tuple | None = None):
    """A pickled store (an instance of ``cls``) in the receiving process: unbound, over the same shared memory or file."""
    file = table if isinstance(table, tuple) else None
    if file is not None:
        table = _open_file_ref(file)
    table, read_only_array = as_table(table)
    codec = out_dtype = method = path = None
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
    store = cls.__new__(cls)
    cache_rows, cache_policy = cache if cache is not None else (None, None)
    store._init_unbound(table, read_only_array, file, backend, device_type, GatherOptions(*options), codec, out_dtype, method, path, cache_rows, cache_policy)
    return store


def rebuild_storage_store(cls: type, storage, device_type: str, options: tuple):
    """A pickled storage-backed store in the receiving process: unbound; binding opens the file and makes its own buffer."""
    store = cls.__new__(cls)
    table = torch.empty(storage.table.shape, dtype=storage.table.dtype, device="meta")
    codec, folder = storage.table.codec, storage.table.folder
    store._init_unbound(table, None, None, storage.backend, device_type, GatherOptions(*options), codec, storage.out_dtype, storage.table.method, folder, storage=storage)  # fmt: skip
    return store


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
