"""Feature tables larger than host memory: rows stay in a file, at most a budget of them in one host buffer.

``FeatureStore(path, ..., storage=StorageTier(N))`` gathers from three tiers: the device cache
(``cache_bytes``, :mod:`dgl_zerocopy.store.cache`), the host buffer (``N`` bytes), and storage.

- :mod:`.table_file`: where the rows lie in a ``.npy`` or a compressed folder's codes file;
- :mod:`.direct_reader`: ``O_DIRECT`` reads of rows, coalesced by block, many in flight;
- :mod:`.host_buffer`: the buffer, its row <-> slot maps and the reservations that keep rows;
- :mod:`.eviction`: which slot gives up its row (LRU, CLOCK, FIFO, static rank);
- :mod:`.policy`: the host policy (``hybrid``, ``static``, ``dynamic``) and the buffer's size;
- :mod:`.stats`: where rows came from (``store.storage_stats()``);
- :mod:`.tiers`: :class:`StorageBackend`, the three tiers behind one gather, and :class:`ReadAhead`.

docs/storage.md describes the tiers, the policies and their measurement, reading ahead and errors.
"""

from .direct_reader import StorageChangedError
from .host_buffer import BufferFullError
from .policy import DEFAULT_DYNAMIC, HOST_POLICIES, HYBRID_STATIC_SHARE, StoragePlan, plan_storage
from .table_file import TableFile, open_table_file
from .tiers import ReadAhead, StorageBackend

__all__ = [
    "DEFAULT_DYNAMIC",
    "HOST_POLICIES",
    "HYBRID_STATIC_SHARE",
    "BufferFullError",
    "ReadAhead",
    "StorageBackend",
    "StorageChangedError",
    "StoragePlan",
    "TableFile",
    "open_table_file",
    "plan_storage",
]
