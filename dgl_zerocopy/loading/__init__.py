"""Loading: minibatches, their features gathered while the previous step trains.

- :mod:`.loader`: :class:`DataLoader`, DGL's sampler plus a :class:`~dgl_zerocopy.FeatureStore`.
- :mod:`.seeds`, :mod:`.collate`, :mod:`.feature_sources`, :mod:`.worker_dataset`: its indices and
  epoch order, the marks of a sampler's output and their sources, its sampling processes.
- :mod:`.prefetch`, :mod:`.ring`: the prefetch worker and the slot ring it fills (streams, events).
- :mod:`.blocks`: sampled blocks as plain device tensors (:class:`~.blocks.DeviceBlock`), re-exported from
  :mod:`dgl_zerocopy.sampling.blocks`, where they live.
- :mod:`.dgl`: the DGL-native route (``ZeroCopyStorage(store)``, ``attach``, ``with_features``).
- :mod:`.timing`: stage timers.

This layer imports the store, ``data`` and ``sampling``, never the reverse.
"""
