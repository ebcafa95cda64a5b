"""Where rows live: one host feature table, gathered by row ids.

- :mod:`.feature_store`: :class:`FeatureStore`, the public face (input checks, then a backend).
- :mod:`.options`: the parts a store is built from (``GatherOptions``, ``Compression``, ``DeviceCache``,
  ``StorageTier``); :mod:`.legacy_keywords` maps the former keywords onto them; :mod:`.sharing`: ``StoreSpec``.
- :mod:`.table_input`, :mod:`.devices`: what a store takes as its table; which device and backend.
- :mod:`.backends`: the gather backends (``cpu``, ``gpu``, ``zerocopy``: the kernels of
  :mod:`dgl_zerocopy.cuda`).
- :mod:`.cache`: the hot-row device cache and the policies that rank rows.
- :mod:`.compression`: fp16 / bf16 / int8 tables and their decoders.
- :mod:`.pinning`, :mod:`.host_files`: pinning host memory in place; shared file maps.
- :mod:`.id_check`, :mod:`.transfer`: the row-id range check; host-to-device copies.

This layer imports the kernel layer (:mod:`dgl_zerocopy.cuda`) and nothing above it: loading and
the DGL-native route (:mod:`dgl_zerocopy.loading.dgl`, ``ZeroCopyStorage(store)``) build on it.
"""

from .feature_store import FeatureStore
from .options import Compression, DeviceCache, GatherOptions, StorageTier
from .sharing import StoreSpec

__all__ = ["Compression", "DeviceCache", "FeatureStore", "GatherOptions", "StorageTier", "StoreSpec"]
