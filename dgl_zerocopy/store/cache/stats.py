"""Hit/miss counters of a cache, safe to update from a prefetch thread while another thread reads."""

from __future__ import annotations

import threading

__all__ = ["CacheStats"]


class CacheStats:
    """Rows served from the cache (``hits``) and from host memory (``misses``) since the last
    :meth:`reset`. ``hit_rate`` is ``hits / (hits + misses)``, 0.0 before any lookup."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0

    def record(self, hits: int, misses: int) -> None:
        """Count one batch: ``hits`` rows read from the cache, ``misses`` from the host table."""
        if hits < 0 or misses < 0:
            raise ValueError(f"hits and misses must be >= 0, but got {hits} and {misses}")
        with self._lock:
            self._hits += int(hits)
            self._misses += int(misses)

    def reset(self) -> None:
        with self._lock:
            self._hits = self._misses = 0

    @property
    def hits(self) -> int:
        return self._hits

    @property
    def misses(self) -> int:
        return self._misses

    @property
    def hit_rate(self) -> float:
        hits, misses = self.snapshot()
        return hits / (hits + misses) if hits + misses else 0.0

    def snapshot(self) -> tuple[int, int]:
        """``(hits, misses)`` read together (consistent while another thread records)."""
        with self._lock:
            return self._hits, self._misses

    def as_dict(self) -> dict[str, float | int]:
        """``{"hits", "misses", "hit_rate"}``: what ``FeatureStore.cache_stats()`` returns."""
        hits, misses = self.snapshot()
        return {"hits": hits, "misses": misses, "hit_rate": hits / (hits + misses) if hits + misses else 0.0}

    def __repr__(self) -> str:
        d = self.as_dict()
        return f"CacheStats(hits={d['hits']}, misses={d['misses']}, hit_rate={d['hit_rate']:.4f})"
