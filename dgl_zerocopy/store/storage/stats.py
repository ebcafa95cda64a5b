"""Counters of a storage-backed store: where each batch's rows came from, and what storage delivered."""

from __future__ import annotations

import threading

__all__ = ["StorageStats"]

#: The counters, in the order ``FeatureStore.storage_stats()`` lists them.
FIELDS = (
    "storage_bytes",  # bytes storage delivered (whole blocks; gathers and reads ahead)
    "storage_reads",  # read calls (one per run of blocks)
    "device_hits",  # distinct rows of gathered batches found in the device cache
    "host_hits",  # ... found in the host buffer (read earlier, by a gather or ahead)
    "storage_rows",  # ... read from storage by the gather itself (the batch waited for them)
    "read_ahead_rows",  # rows read from storage by read_ahead()
    "read_ahead_hits",  # distinct rows of gathered batches that a read_ahead() had brought (or was bringing) in
    "read_ahead_skipped",  # rows read_ahead() left to the gather: the buffer had no unreserved slot for them
    "evictions",  # rows dropped from the host buffer to make room
)


class StorageStats:
    """Thread-safe counters (a prefetch thread records while the trainer reads); see :data:`FIELDS`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(FIELDS, 0)

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, value in counts.items():
                self._counts[name] += int(value)

    def reset(self) -> None:
        with self._lock:
            self._counts = dict.fromkeys(FIELDS, 0)

    def as_dict(self) -> dict[str, int | float]:
        """The counters plus ``host_hit_rate``: the share of gathered rows found in memory (device or host)."""
        with self._lock:
            counts = dict(self._counts)
        rows = counts["device_hits"] + counts["host_hits"] + counts["storage_rows"]
        counts["hit_rate"] = (counts["device_hits"] + counts["host_hits"]) / rows if rows else 0.0
        return counts

    def __repr__(self) -> str:
        return "StorageStats(" + ", ".join(f"{k}={v}" for k, v in self.as_dict().items()) + ")"
