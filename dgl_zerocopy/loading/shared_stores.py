"""One FeatureStore per (tensor, device) in this process, so two loaders over the same tensor (train
and val) share it and the same memory is never pinned twice (CUDA refuses a second registration)."""

from __future__ import annotations

import weakref

import numpy as np
import torch

from ..store.feature_store import FeatureStore
from ..store.host_files import tensor_view

_SHARED_STORES: weakref.WeakValueDictionary[tuple, FeatureStore] = weakref.WeakValueDictionary()


def shared_store(tensor, device: torch.device, **options) -> FeatureStore:
    """The FeatureStore over ``tensor``'s memory on ``device``: the one made before in this
    process if it is still open, else a new one (``backend="auto"`` on CUDA, ``"cpu"`` on the CPU).
    ``options`` apply to a new store only."""
    if isinstance(tensor, np.ndarray):
        tensor = tensor_view(tensor)
    key = _memory_key(tensor, device)
    store = _SHARED_STORES.get(key)
    if store is None or store.closed:
        store = FeatureStore(tensor, backend="auto" if device.type == "cuda" else "cpu", device=device, **options)
        _SHARED_STORES[key] = store
    return store


def remember_store(store: FeatureStore) -> None:
    """Serve later requests for ``store``'s memory and device with ``store`` (unless one is held already)."""
    _SHARED_STORES.setdefault(_memory_key(store.table, store.device), store)


def _memory_key(tensor: torch.Tensor, device: torch.device) -> tuple:
    return (tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype, str(device))
