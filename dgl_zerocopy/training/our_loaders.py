"""The loaders of a training source that gathers with our :class:`~dgl_zerocopy.loading.loader.DataLoader`,
shared by the homogeneous and the heterograph store sources."""

from __future__ import annotations

from ..loading.loader import DataLoader
from ..loading.timing import StageTimer


class OurLoaders:
    """The loaders of a source that gathers with our :class:`DataLoader`: one per node set and batching, so its
    epoch counter reshuffles (and re-splits under DDP), each closed with the source. The source has ``graph``,
    ``device``, ``prefetch``, ``seed`` and ``_loaders`` (a dict)."""

    def _loader(self, nodes, indices, batch_size: int, shuffle: bool, ddp: bool, timer: StageTimer, sampler, **options) -> DataLoader:
        """The loader of ``nodes`` (``indices``: as the loader takes them), timed by ``timer``; ``sampler()`` and
        ``options`` (features, labels, blocks, ...) make it the first time."""
        key = (nodes.data_ptr(), len(nodes), batch_size, shuffle, ddp)
        if key not in self._loaders:
            self._loaders[key] = DataLoader(
                self.graph,
                indices,
                sampler(),
                device=self.device,
                use_ddp=ddp,
                ddp_seed=self.seed,
                batch_size=batch_size,
                shuffle=shuffle,
                prefetch=self.prefetch,
                seed=self.seed,
                **options,
            )
        loader = self._loaders[key]
        loader.timer = timer
        return loader

    def _close_loaders(self) -> None:
        for loader in self._loaders.values():
            loader.close()
