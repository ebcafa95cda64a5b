"""The parts a :class:`~dgl_zerocopy.store.FeatureStore` is built from, each a small frozen options
object with one job, checked when it is made (before any table is converted, pinned or ranked):

- :class:`GatherOptions` (``kernel=``): the zero-copy kernel's variant, id sort and grid cap;
- :class:`Compression` (``compression=``): the codec host memory holds and the dtype gathered rows get;
- :class:`DeviceCache` (``cache=``): hot rows in device memory and what ranks them;
- :class:`StorageTier` (``storage=``): rows left in their file behind a host buffer.

``FeatureStore(data, backend, device, kernel=..., compression=..., cache=..., storage=...)``; each
part left out (None) is its default: the aligned kernel, no compression, no cache, the table in memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .backends.base import GatherOptions
from .cache.policy import CACHE_POLICIES, DEFAULT_CACHE_POLICY, CachePolicy, check_budget, check_policy_name
from .compression.codec import CODECS, check_codec_name
from .storage.direct_reader import DEFAULT_THREADS
from .storage.policy import HOST_POLICIES

__all__ = ["Compression", "DeviceCache", "GatherOptions", "StorageTier", "as_compression"]

PRESAMPLE_OPTIONS = ("batch_size", "epochs", "seed")


@dataclass(frozen=True)
class Compression:
    """Compressed host features (:mod:`dgl_zerocopy.store.compression`).

    Args:
        codec: ``"fp16"``, ``"bf16"`` or ``"int8"``: the table is converted once, a slab of rows at a
            time, and the store holds only the codes; None (default): the table as given (a folder
            written by :func:`dgl_zerocopy.compress`, or a ``CompressedTable``, brings its own codec).
        out_dtype: what ``gather`` decodes to: ``torch.float32`` (default), ``float16`` or ``bfloat16``
            (for AMP). An uncompressed table gathers its own dtype.

    Raises:
        ValueError: an unknown codec name.
        TypeError: ``out_dtype`` that is not a ``torch.dtype``.
    """

    codec: str | None = None
    out_dtype: torch.dtype | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "codec", check_codec_name(self.codec))
        if self.out_dtype is not None and not isinstance(self.out_dtype, torch.dtype):
            raise TypeError(f"Compression(out_dtype=) must be a torch.dtype such as torch.float16, but got {self.out_dtype!r}")


def as_compression(compression: Compression | str | None) -> Compression:
    """``compression=`` as a :class:`Compression`: a codec name (``"fp16"``, ...) is ``Compression(name)``."""
    if compression is None or isinstance(compression, str):
        return Compression(compression)
    if not isinstance(compression, Compression):
        raise TypeError(f"compression must be a Compression, a codec name ({', '.join(CODECS)}) or None, but got {type(compression).__name__}")
    return compression


@dataclass(frozen=True, eq=False)
class DeviceCache:
    """A hot-row cache in device memory (:mod:`dgl_zerocopy.store.cache`), ranked once when the store is made.

    ``zerocopy`` reads hits from the cache and misses over PCIe in one fused kernel; ``cpu`` on a CUDA
    device gathers and copies only the misses; ``gpu`` holds every row already and ignores the cache
    with a warning. A compressed table caches its codes, so a budget holds 2-4x more rows.

    Args:
        bytes: device memory for the rows and the slot map together; never exceeded (0: no cache).
        policy: ``"degree"`` (default: the degree sampling follows in ``graph``: out-degree for DGL's
            in-edge sampling, in-degree when ``sampler`` has ``edge_dir="out"``), ``"in_degree"``,
            ``"out_degree"``, ``"presample"`` (the rows ``sampler`` gathers most over about an epoch of
            batches of ``seeds``), or a :class:`~dgl_zerocopy.store.cache.CachePolicy` (a ranking of
            all rows, best first; no graph needed).
        graph: the DGL graph whose node ids are the table's rows (named policies).
        sampler: the training sampler (``"presample"``; ``"degree"`` reads its ``edge_dir``).
        seeds: the training node ids (``"presample"``).
        presample_options: ``batch_size``, ``epochs`` and ``seed`` of the presampling pass.

    Raises:
        ValueError: a negative budget or an unknown policy name.
        TypeError: a budget that is not an int, or an unknown presample option.
    """

    bytes: int = 0
    policy: str | CachePolicy = DEFAULT_CACHE_POLICY
    graph: Any = None
    sampler: Any = None
    seeds: Any = None
    presample_options: Mapping | None = field(default=None)

    def __post_init__(self) -> None:
        object.__setattr__(self, "bytes", check_budget(self.bytes))
        if not isinstance(self.policy, CachePolicy):
            if not isinstance(self.policy, str):
                raise TypeError(f"DeviceCache(policy=) must be one of {CACHE_POLICIES} or a CachePolicy, but got {type(self.policy).__name__}")
            check_policy_name(self.policy)
        unknown = sorted(set(self.presample_options or {}) - set(PRESAMPLE_OPTIONS))
        if unknown:
            raise TypeError(f"presample_options takes {', '.join(PRESAMPLE_OPTIONS)}, but got {unknown}")

    @property
    def enabled(self) -> bool:
        return self.bytes > 0


@dataclass(frozen=True)
class StorageTier:
    """Rows left in their file (``data`` a ``.npy`` path or compressed folder), at most ``bytes`` of them
    in one host buffer; the device cache, if any, in front of it (docs/storage.md).

    Args:
        bytes: the host buffer's budget in bytes (a positive ``int``).
        policy: which rows the buffer keeps: one of ``HOST_POLICIES`` (``"static"``, ``"dynamic"``,
            ``"hybrid"``, ...); None: static where a ranking exists (``cache.graph`` or a
            ``CachePolicy``), else dynamic.
        threads: reader threads for the file (default 8).
        direct: read with ``O_DIRECT`` where the file system allows it (default True).

    Raises:
        ValueError: a budget that is not a positive int, an unknown policy or a thread count below 1.
        TypeError: ``direct`` that is not a bool.
    """

    bytes: int
    policy: str | None = None
    threads: int = DEFAULT_THREADS
    direct: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.bytes, bool) or not isinstance(self.bytes, (int, np.integer)) or self.bytes <= 0:
            raise ValueError(f"StorageTier(bytes=) must be a positive integer number of bytes (the host buffer's budget), but got {self.bytes!r}")
        object.__setattr__(self, "bytes", int(self.bytes))
        if self.policy is not None and self.policy not in HOST_POLICIES:
            raise ValueError(f"StorageTier(policy=) must be one of {', '.join(map(repr, HOST_POLICIES))} or None, but got {self.policy!r}")
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 1:
            raise ValueError(f"StorageTier(threads=) must be a positive int, but got {self.threads!r}")
        if not isinstance(self.direct, bool):
            raise TypeError(f"StorageTier(direct=) must be True or False, but got {self.direct!r}")
