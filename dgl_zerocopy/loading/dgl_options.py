"""DGL's DataLoader arguments, mapped to what :class:`~dgl_zerocopy.loading.loader.DataLoader` does:
the torch keywords it forwards, its prefetcher and ``gpu_cache`` options (``use_uva``: :mod:`.gpu_sampling`), and what the
installed DGL can do (CUDA graphs or not); messages said once. CPU only.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping

import numpy as np
import torch

#: torch DataLoader keywords that DGL forwards and that apply to the sampling workers here.
WORKER_KWARGS = ("num_workers", "persistent_workers", "worker_init_fn", "prefetch_factor", "timeout", "multiprocessing_context", "generator")
#: torch DataLoader keywords that have a nearest equivalent (or none) here; accepted, see apply_dgl_options.
OTHER_TORCH_KWARGS = ("pin_memory", "pin_memory_device", "in_order")

_WARNED: set[str] = set()
_LOGGED: set[str] = set()


def is_dgl_sampler(sampler) -> bool:
    """Whether ``sampler`` is an instance of DGL's own classes (every class of its type's MRO but
    ``object`` defined in DGL): those return only node ids of the graph they sample. A subclass of
    one's own may override anything, so it does not count."""
    return all(cls is object or cls.__module__.split(".")[0] == "dgl" for cls in type(sampler).__mro__)


def apply_dgl_options(prefetch: int, device: torch.device, use_prefetch_thread, pin_prefetcher, kwargs: Mapping) -> int:
    """Map DGL's prefetcher and pinning options to what happens here; warn once where one cannot
    apply. Returns the prefetch depth. (``use_uva`` is :mod:`.gpu_sampling`'s, ``gpu_cache``
    :func:`gpu_cache_rows`'.)"""
    if use_prefetch_thread is False:
        prefetch = 0  # DGL: no prefetch thread; here: no background thread either
    elif use_prefetch_thread is True and prefetch == 0:
        prefetch = 1
    pin = pin_prefetcher if pin_prefetcher is not None else kwargs.get("pin_memory")
    if pin is not None and (pin is False) == (device.type == "cuda"):
        warn_once(
            "pin",
            f"pin_prefetcher/pin_memory={pin} has no effect here: on a CUDA device the rows are read from pinned "
            "host memory or staged in a pinned buffer always; on the CPU nothing needs pinning",
        )
    return prefetch


def gpu_cache_rows(gpu_cache: Mapping | None, num_nodes: int) -> dict[str, int]:
    """DGL's ``gpu_cache`` (``{"node": {name: rows}, "edge": {...}}``) as rows to cache per node
    feature, checked. DGL caches rows as they are fetched (a HugeCTR cache); here the same number
    of rows is chosen once, by the degree sampling follows (:mod:`dgl_zerocopy.store.cache`), which needs no
    second copy."""
    if not gpu_cache:
        return {}
    if not isinstance(gpu_cache, Mapping) or set(gpu_cache) - {"node", "edge"}:
        raise ValueError(f"gpu_cache must be a dict like {{'node': {{'feat': 100000}}}}, but got {gpu_cache!r}")
    if any(rows for rows in (gpu_cache.get("edge") or {}).values()):
        raise ValueError(f"gpu_cache={dict(gpu_cache)}: edge features are not cached (the loader gathers node features only); leave out the 'edge' entry")
    rows = {}
    for name, count in (gpu_cache.get("node") or {}).items():
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or not 0 <= count <= num_nodes:
            raise ValueError(f"gpu_cache['node'][{name!r}] must be a number of rows in [0, {num_nodes}], but got {count!r}")
        if count:
            rows[name] = int(count)
    return rows


def warn_frozen_snapshot(sampler, worker_kwargs: Mapping) -> None:
    """Warn (once per loader) where persistent sampling processes would sample a snapshot sampler's
    first snapshot for ever: a sampler with ``refresh > 0`` (``SnapshotSampler``) is refreshed, and
    rebuilt after its graph changes, in the main process, which persistent workers never see again."""
    persistent = worker_kwargs.get("num_workers", 0) > 0 and worker_kwargs.get("persistent_workers")
    if persistent and getattr(sampler, "refresh", 0) and callable(getattr(sampler, "refresh_snapshot", None)):
        warnings.warn(
            f"persistent_workers=True with {sampler!r}: the worker processes keep the snapshot they start with, so its refresh "
            f"(and a rebuild after the graph changes) never reaches them; pass persistent_workers=False to sample every epoch from "
            f"the refreshed snapshot, or refresh=0 for a snapshot meant to stay as it is",
            stacklevel=3,
        )


def warn_once(key: str, message: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, stacklevel=4)


def log_once(key: str, message: str, logger: logging.Logger) -> None:
    """``message`` at INFO level on ``logger``, once per process for ``key``: what the loader does
    in a case its fast path does not serve (it still gives DGL's result)."""
    if key not in _LOGGED:
        _LOGGED.add(key)
        logger.info(message)


def dgl_has_cuda() -> bool:
    """Whether the installed DGL can move graphs to CUDA (PyPI's dgl cannot: it is a CPU build)."""
    import dgl

    try:
        dgl.graph(([0], [0])).to("cuda")
        return True
    except Exception:  # noqa: BLE001 - DGL raises its own error types for a CPU build
        return False


def default_block_kind(device_type: str, dgl_can_use_device: bool, use_uva: bool) -> str:
    """The loader's ``blocks=`` when the user names none: DGL blocks wherever DGL can hold them (the
    CPU, or a CUDA device with a CUDA build of DGL, GPU-sampled or not: a DGL script gets what it
    expects); ``"device"`` blocks on a CUDA device with PyPI's CPU-only DGL, and for the GPU
    sampler's CPU stand-in (``use_uva`` on a CPU device), whose blocks are made as DeviceBlocks."""
    if dgl_can_use_device:
        return "dgl"
    return "device" if use_uva or device_type == "cuda" else "dgl"
