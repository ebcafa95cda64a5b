"""The DataLoader's data sources: one per (kind, type, name), and how each need is served.

A source answers the marks of :mod:`dgl_zerocopy.loading.collate` for one piece of the parent
graph's data: ``("node", ntype, name)``, ``("edge", canonical etype, name)``, or ``("leaf", None,
name)`` for a LazyFeature leaf (a storage given to ``attach_data``). Two ways to serve:

- **slot**: a 2-D table in a :class:`~dgl_zerocopy.FeatureStore` (the one the process shares for
  that tensor and device, or one given in ``features=``) gathers the rows into the batch's ring
  slot on the worker's stream: the fast path;
- **own**: anything else (labels, 1-D data such as edge weights or masks, dtypes a store does not
  hold) is indexed, ``tensor[ids]``, into a tensor of its own and copied to the device, as DGL's
  loader does; said once in the log, unless it is a label. With ``device_ids`` (the ids are sampled
  on the device, ``use_uva=True``) such data of a FeatureStore dtype, 1-D or 2-D, is gathered on the
  device instead, by a FeatureStore over it as a table (one column for 1-D data), so no id crosses
  back to the host; the rest (e.g. bool masks) is indexed on the host at the cost of a round trip.

Sources for the names a sampler declares (``prefetch_node_feats``, ``prefetch_labels``,
``prefetch_edge_feats``, ``prefetch_ndata``, ``prefetch_edata``, an edge-prediction wrapper's
``prefetch_labels`` and its inner sampler's) are made at construction, so a missing name fails
there; a mark nobody declared gets its source on first use. A batch whose ids came from DGL's own
sampler over the graph (its node or edge ids of that type) is gathered without a range check.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

import numpy as np
import torch

from ..data.base import tensor_view
from ..store.cache import budget_for_rows
from ..store.feature_store import FeatureStore
from ..store.legacy_keywords import CACHE_KEYWORDS
from ..store.options import DeviceCache
from ..store.table_input import SUPPORTED_DTYPES
from ..store.transfer import to_device
from .collate import Need
from .dgl_options import log_once, warn_once
from .ring import Fill
from .shared_stores import remember_store, shared_store

log = logging.getLogger(__name__)

#: The sampler attributes that name data to prefetch: (attribute, kind, role).
DECLARED = (
    ("prefetch_node_feats", "node", "features"),
    ("prefetch_ndata", "node", "features"),
    ("prefetch_labels", "node", "labels"),
    ("prefetch_edge_feats", "edge", "features"),
    ("prefetch_edata", "edge", "features"),
)


class Sources:
    """The sources of one loader over ``graph``, gathering onto ``device``. ``store_options``:
    keyword arguments of the FeatureStores it makes (parts: ``kernel=``, ``compression=``, ...); ``cached_rows``: ``gpu_cache``'s rows per node
    feature name (homogeneous graphs); ``sampler``: for the cache's degree ranking; ``device_ids``:
    the ids come on ``device`` (GPU sampling): data not served into a slot is gathered there too."""

    def __init__(self, graph, device: torch.device, store_options: Mapping, cached_rows: Mapping[str, int], sampler, device_ids: bool = False) -> None:
        self.graph, self.device, self._sampler = graph, device, sampler
        self.device_ids = device_ids
        self._store_options = dict(store_options)
        self._cached_rows = dict(cached_rows)
        self._sources: dict[tuple, tuple[object, bool]] = {}  # key -> (source, served into a slot)
        self._roles: dict[str, dict] = {"features": {}, "labels": {}}  # the loader's features/labels views
        self._lock = threading.Lock()  # sources made on first use, on the worker thread
        self.attached: dict[str, object] = {}  # attach_data: the sources of LazyFeature leaves
        if cached_rows and len(graph.ntypes) > 1:
            warn_once("gpu_cache_hetero", f"gpu_cache={dict(cached_rows)} applies to homogeneous graphs only; this heterograph's features are not cached")
            self._cached_rows = {}

    # -- the views the loader shows -----------------------------------------------------------
    @property
    def features(self) -> dict:
        """Node features served in ``blocks[0].srcdata`` (``features=``, ``prefetch_node_feats``): by
        name on a homogeneous graph, by ``(ntype, name)`` on a heterograph."""
        return dict(self._roles["features"])

    @property
    def labels(self) -> dict:
        """Node labels served in ``blocks[-1].dstdata`` (``labels=``, ``prefetch_labels``), keyed as :attr:`features`."""
        return dict(self._roles["labels"])

    def stores(self) -> list[FeatureStore]:
        return [source for source, _ in list(self._sources.values()) if isinstance(source, FeatureStore)]

    # -- construction -----------------------------------------------------------------------
    def add(self, given: Mapping | None, role: str) -> list[tuple[str, str]]:
        """``features=`` or ``labels=`` (``role``): name -> FeatureStore, tensor or array (a heterograph:
        ``(ntype, name)`` -> ...), checked. Returns the (ntype, name) pairs."""
        pairs = []
        for key, value in (given or {}).items():
            ntype, name = self._node_pair(key, role)
            source = self._checked("node", ntype, name, value, role)
            self._sources[("node", ntype, name)] = source
            self._roles[role][key] = source[0]
            pairs.append((ntype, name))
        return pairs

    def declare(self, sampler) -> None:
        """Make the sources of the names ``sampler`` declares (and an edge-prediction wrapper's
        inner sampler): a name the graph lacks raises KeyError here, not at the first batch."""
        from dgl.dataloading import EdgePredictionSampler

        if isinstance(sampler, EdgePredictionSampler):
            for etype, name in self._declared_pairs(sampler.prefetch_labels, "edge", "prefetch_labels of the edge-prediction sampler"):
                self._get("edge", etype, name, "labels")
            sampler = sampler.sampler
        for attribute, kind, role in DECLARED:
            for type_, name in self._declared_pairs(getattr(sampler, attribute, None), kind, attribute):
                source = self._get(kind, type_, name, role)
                if kind == "node" and role in self._roles:
                    self._roles[role].setdefault(name if len(self.graph.ntypes) == 1 else (type_, name), source[0])

    def check_cached(self) -> None:
        for name in self._cached_rows:
            if name not in self._roles["features"]:
                raise ValueError(
                    f"gpu_cache names node feature {name!r}, but the loader gathers {sorted(map(str, self._roles['features']))}: "
                    "name a feature of features= or of the sampler's prefetch_node_feats"
                )

    def _declared_pairs(self, names, kind: str, attribute: str) -> list[tuple]:
        """(type, name) pairs of a prefetch list (names for every type of ``kind`` that has them,
        or ``{type: names}``); a name no such type has raises KeyError."""
        if not names:
            return []
        types = self.graph.ntypes if kind == "node" else self.graph.canonical_etypes
        if isinstance(names, Mapping):
            listed = [(self._type(kind, type_), name) for type_, type_names in names.items() for name in type_names]
        else:
            listed = [(type_, name) for name in names for type_ in types if len(types) == 1 or name in self._data(kind, type_)]
            missing = [name for name in names if not any(n == name for _, n in listed)]
            listed += [(types[0], name) for name in missing]  # the check below says what is missing
        for type_, name in listed:
            if name not in self._data(kind, type_):
                of = f" of {kind} type {type_!r}" if len(types) > 1 else ""
                raise KeyError(
                    f"the sampler's {attribute} names {name!r}, but the graph's {kind} data{of} has no such tensor (it has {sorted(self._data(kind, type_))})"
                )
        return listed

    # -- serving -------------------------------------------------------------------------------
    def serve(self, need: Need, fill: Fill, trusted: bool, read_ahead=None) -> tuple[torch.Tensor, bool]:
        """The value of ``need`` on the device, and whether it lives in ``fill``'s slot. ``trusted``:
        the ids came from DGL's own sampler over the graph (no range check, unless the mark carried
        ids of its own). ``read_ahead``: the handle of :meth:`read_ahead` for this need, or None."""
        source, in_slot = self._get(need.kind, need.type, need.name, None)
        unchecked = trusted and not need.given
        ids = need.ids
        if in_slot:
            out = fill.slot.buffer(need.slot or need.slot_name, (len(ids), *source.shape[1:]), source.dtype, source.device)
            return source.gather(ids, out=out, stream=fill.stream, unchecked=unchecked, read_ahead=read_ahead), True
        if not unchecked and not isinstance(source, FeatureStore):  # a store checks its own ids
            _check_ids(ids, len(source), need)
        return own_rows(source, ids, self.device, unchecked), False

    def on_storage(self) -> bool:
        """Whether a source made so far serves rows left in their file (``FeatureStore.on_storage``)."""
        return any(in_slot and source.on_storage for source, in_slot in list(self._sources.values()))

    def read_ahead(self, needs: list[Need]) -> dict:
        """Start the storage reads of the needs served from a file-backed store (``FeatureStore.read_ahead``):
        position in ``needs`` -> handle, for :meth:`serve`."""
        handles = {}
        try:
            for i, need in enumerate(needs):
                source, in_slot = self._get(need.kind, need.type, need.name, None)
                if in_slot and source.on_storage:
                    handles[i] = source.read_ahead(need.ids)
        except BaseException:
            for handle in handles.values():
                handle.release()
            raise
        return handles

    def _get(self, kind: str, type_, name: str, role: str | None) -> tuple[object, bool]:
        key = (kind, type_, name)
        found = self._sources.get(key)
        if found is not None:
            return found
        with self._lock:
            if key not in self._sources:
                if kind == "leaf":
                    if name not in self.attached:
                        raise KeyError(f"the sampler returned LazyFeature({name!r}); attach its storage with loader.attach_data({name!r}, tensor)")
                    log_once(f"leaf:{name}", f"LazyFeature leaves {name!r} are served from attach_data by indexing, as DGL's loader does", log)
                    self._sources[key] = (self.attached[name], False)
                else:
                    data = self._data(kind, type_)
                    if name not in data:
                        raise KeyError(f"the sampler marked {kind} data {name!r} of type {type_!r}, but the graph has no such tensor (it has {sorted(data)})")
                    self._sources[key] = self._checked(kind, type_, name, data[name], role)
            return self._sources[key]

    def _checked(self, kind: str, type_, name: str, value, role: str | None) -> tuple[object, bool]:
        """(source, served into a slot) for ``value``, checked to have one row per node or edge of ``type_``."""
        what = f"{role}[{name!r}]" if role else f"the graph's {kind} data {name!r}"
        count = self.graph.num_nodes(type_) if kind == "node" else self.graph.num_edges(type_)
        if isinstance(value, np.ndarray):
            value = tensor_view(value)
        in_slot = isinstance(value, FeatureStore) and role != "labels"
        if isinstance(value, torch.Tensor):
            if role != "labels" and value.dim() == 2 and value.shape[1] > 0 and value.dtype in SUPPORTED_DTYPES:
                value, in_slot = self._make_store(kind, type_, name, value), True
            elif self.device_ids and value.dim() in (1, 2) and value.numel() > 0 and value.dtype in SUPPORTED_DTYPES:
                # Device ids: gathered on the device as a table (1-D data as one column), handed out as its own tensor.
                value = shared_store(value.contiguous().view(value.shape[0], -1), self.device)
            else:
                if role != "labels" or self.device_ids:
                    log_once(
                        f"own:{kind}:{type_}:{name}",
                        f"{kind} data {name!r} ({value.dtype}, shape {tuple(value.shape)}) is not a 2-D table of a FeatureStore dtype: "
                        "its rows are indexed on the host and copied, as DGL's loader does",
                        log,
                    )
                value = value.cpu()
        elif not isinstance(value, FeatureStore):
            raise TypeError(f"{what} must be a FeatureStore, a tensor or an array, but got {type(value).__name__}")
        rows = len(value) if isinstance(value, FeatureStore) else (value.shape[0] if value.dim() >= 1 else 0)
        if rows != count:
            of = f" of type {type_!r}" if (len(self.graph.ntypes) if kind == "node" else len(self.graph.canonical_etypes)) > 1 else ""
            unit = ("entries", "label") if role == "labels" else ("rows", "row")
            raise ValueError(f"{what} has {rows} {unit[0]} but the graph has {count} {kind}s{of}; one {unit[1]} per {kind} is needed")
        if isinstance(value, FeatureStore):
            try:
                value.bind(self.device)  # a store received from another process binds here, to this loader's device
            except ValueError as error:
                raise ValueError(
                    f"{what} gathers on {value.device} but the loader's device is {self.device}; create the store with device={str(self.device)!r}"
                ) from error
            remember_store(value)  # later loaders over that memory use it
        return value, in_slot

    def _make_store(self, kind: str, type_, name: str, tensor: torch.Tensor) -> FeatureStore:
        cached = self._cached_rows.get(name, 0) if kind == "node" else 0
        options = dict(self._store_options)
        if cached:  # DGL's gpu_cache counts rows: the budget that holds that many (in place of a cache in store_options)
            for name in ("cache", *CACHE_KEYWORDS):
                options.pop(name, None)
            budget = budget_for_rows(cached, tensor.shape[1] * tensor.dtype.itemsize, tensor.shape[0])
            options["cache"] = DeviceCache(budget, "degree", self.graph, self._sampler)
        store = shared_store(tensor, self.device, **options)
        if cached and store.cache is None and store.backend != "gpu":
            warn_once(
                "gpu_cache_shared", f"gpu_cache for {name!r}: the store over this tensor was made before without a cache and is shared, so no rows are cached"
            )
        return store

    # -- the graph ----------------------------------------------------------------------------
    def _data(self, kind: str, type_) -> Mapping:
        return self.graph.nodes[type_].data if kind == "node" else self.graph.edges[type_].data

    def _type(self, kind: str, type_):
        if kind == "node":
            if type_ not in self.graph.ntypes:
                raise KeyError(f"{type_!r} is not a node type of the graph (it has {self.graph.ntypes})")
            return type_
        try:
            return self.graph.to_canonical_etype(type_)
        except Exception as error:  # noqa: BLE001 - DGL raises its own error type for an unknown edge type
            raise KeyError(f"{type_!r} is not an edge type of the graph (it has {self.graph.canonical_etypes})") from error

    def _node_pair(self, key, role: str) -> tuple[str, str]:
        if isinstance(key, str) and len(self.graph.ntypes) == 1:
            return self.graph.ntypes[0], key
        if isinstance(key, tuple) and len(key) == 2 and all(isinstance(part, str) for part in key):
            return self._type("node", key[0]), key[1]
        raise TypeError(
            f"{role}= keys are names on a homogeneous graph and (node type, name) pairs on a heterograph "
            f"(this graph has node types {self.graph.ntypes}), but got {key!r}"
        )


def own_rows(source, ids: torch.Tensor, device: torch.device, unchecked: bool = False) -> torch.Tensor:
    """``source[ids]`` on ``device`` as a tensor of its own (a FeatureStore's ``(n, 1)`` rows squeezed,
    as labels). A host tensor indexed by device ids reads them back first (a host wait)."""
    if isinstance(source, FeatureStore):
        out = source.gather(ids, out=None, unchecked=unchecked).clone()
        return out.squeeze(1) if out.dim() == 2 and out.shape[1] == 1 else out
    if isinstance(source, torch.Tensor) and ids.device != source.device:
        ids = ids.to(source.device)
    return to_device(source[ids], device)


def _check_ids(ids: torch.Tensor, rows: int, need: Need) -> None:
    """Ids a sampler of one's own gave: in ``[0, rows)`` (torch would wrap a negative one around)."""
    ids = ids.cpu()
    if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= rows):
        bad = int(ids[(ids < 0) | (ids >= rows)][0])
        of = f" of type {need.type!r}" if need.type is not None else ""
        raise IndexError(f"the batch asks for {need.kind} data {need.name!r}{of} at id {bad}, outside its {rows} rows (valid: 0 to {rows - 1})")
