"""The DGL-native route: DGL's own ``DataLoader`` gathers input features with a :class:`FeatureStore`.

For scripts that keep ``dgl.dataloading.DataLoader`` (``use_ddp``, subclasses, Lightning):

.. code:: python

    sampler = with_features(dgl.dataloading.NeighborSampler([15, 10, 5]), features=["feat"], labels=["label"])
    loader = dgl.dataloading.DataLoader(g, train_ids, sampler, device=device, batch_size=1024, shuffle=True)
    attach(loader, {"feat": store})          # store: a FeatureStore on `device`

How it plugs in (DGL 2.1): the sampler marks ``blocks[0].srcdata[name]`` with a ``LazyFeature``,
as DGL's ``prefetch_node_feats`` does. DGL's prefetcher resolves such a mark by asking its own
``loader.graph.get_node_storage(name)`` for a ``FeatureStorage`` and calling its ``fetch`` (and
``.wait()`` on what it returns), then writes the rows into the block itself, after moving the block
to the device. ``g.ndata`` cannot hold a custom storage (the frame wants a tensor), so
:func:`attach` gives the loader a view of its graph that answers ``get_node_storage`` from the
storages attached with ``loader.attach_data`` first, then from ``g.ndata``. The user's graph, the
sampler's graph and every other loader option are untouched.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch

from .._extras import missing_dgl
from ..store.feature_store import FeatureStore, resolve_device

try:  # the route is DGL's own DataLoader: without DGL, one line naming the extra that brings it
    import dgl
    from dgl.dataloading.base import LazyFeature
    from dgl.storages import FeatureStorage
except ModuleNotFoundError as error:
    raise missing_dgl(error, "dgl_zerocopy.loading.dgl (DGL's own DataLoader with a FeatureStore)") from None


class ZeroCopyStorage(FeatureStorage):
    """A DGL ``FeatureStorage`` over a :class:`FeatureStore`: ``fetch`` gathers on the store's backend.

    ``fetch(indices, device)``: ``indices`` 1-D int32/int64 node ids (CPU or the store's device);
    ``device`` must be the store's device. On the CPU it returns the rows, ``(len(indices), dim)``
    of the store's dtype, in a tensor of their own: DGL hands them to the user as the batch's
    features, which must survive later fetches (the store's reused buffer would not). On CUDA it
    returns a future: the gather is queued on a side stream of this storage, and ``wait()`` makes
    the calling thread's current stream wait on the gather's event (no host synchronisation) and
    returns the rows. ``pin_memory`` is ignored: results are already on the device.

    DGL calls ``fetch`` from its prefetch thread (``use_prefetch_thread=True``); calls are
    serialised by a lock, so one store may back several loaders.
    """

    def __init__(self, store: FeatureStore) -> None:
        if not isinstance(store, FeatureStore):
            raise TypeError(f"ZeroCopyStorage wraps a dgl_zerocopy.FeatureStore, but got {type(store).__name__}")
        self.store = store
        self._lock = threading.Lock()
        self._stream = torch.cuda.Stream(store.device) if store.device.type == "cuda" else None

    def __repr__(self) -> str:
        return f"ZeroCopyStorage({self.store!r})"

    def fetch(self, indices, device, pin_memory: bool = False, **kwargs):
        device = resolve_device(device)
        if device != self.store.device:
            raise ValueError(
                f"the DataLoader's device is {device} but this store gathers on {self.store.device}; create the FeatureStore with device={str(device)!r}"
            )
        with self._lock:
            if self._stream is None:
                out = torch.empty((len(indices), self.store.shape[1]), dtype=self.store.dtype)
                return self.store.gather(indices, out=out)
            # Ids made on the caller's stream (a GPU sampler) must be complete before the gather reads them.
            self._stream.wait_stream(torch.cuda.current_stream(self.store.device))
            with torch.cuda.stream(self._stream):  # fresh output, allocated on the gather stream
                rows = self.store.gather(indices, stream=self._stream)
                done = torch.cuda.Event()
                done.record(self._stream)
        return _GatherFuture(rows, done)


class _GatherFuture:
    """Rows being gathered on a side stream; ``wait()`` orders the current stream after them."""

    def __init__(self, rows: torch.Tensor, done: torch.cuda.Event) -> None:
        self._rows = rows  # keeps the output alive until the consumer's stream has it
        self._done = done

    def wait(self) -> torch.Tensor:
        stream = torch.cuda.current_stream(self._rows.device)
        stream.wait_event(self._done)
        # The memory came from the gather stream's pool: do not let it be reused while `stream` reads it.
        self._rows.record_stream(stream)
        return self._rows


@dataclass(frozen=True)
class AttachedName:
    """The name of a feature that must come from a storage attached to the loader, never ``g.ndata``.

    Its ``repr`` is the error message DGL shows (as a ``KeyError``) when the loader was not set up
    with :func:`attach`.
    """

    name: str

    def __repr__(self) -> str:
        return (
            f"{self.name!r}: the sampler takes this feature from a storage attached to the DataLoader; "
            f"call dgl_zerocopy.loading.dgl.attach(loader, {{{self.name!r}: store}}) after creating the loader"
        )


class FeatureSampler(dgl.dataloading.Sampler):
    """Wraps a DGL block sampler: the same ``(input_nodes, output_nodes, blocks)``, with
    ``blocks[0].srcdata[f]`` marked for each feature ``f`` (taken from the storage attached as ``f``)
    and ``blocks[-1].dstdata[l]`` for each label ``l`` (an attached storage, else ``g.ndata[l]``).
    DGL's loader fills them in before the batch reaches the loop. Homogeneous graphs only."""

    def __init__(self, sampler, features: Iterable[str] = ("feat",), labels: Iterable[str] = ()) -> None:
        super().__init__()
        if not callable(getattr(sampler, "sample", None)):
            raise TypeError(f"sampler must be a DGL block sampler with a sample() method, but got {type(sampler).__name__}")
        self.sampler = sampler
        self.features = _names(features, "features")
        self.labels = _names(labels, "labels")

    def sample(self, g, indices, *args, **kwargs):
        result = self.sampler.sample(g, indices, *args, **kwargs)
        if not (isinstance(result, tuple) and len(result) == 3 and isinstance(result[2], list) and result[2]):
            raise TypeError(
                f"{type(self.sampler).__name__}.sample() must return (input_nodes, output_nodes, blocks) "
                "like DGL's block samplers; with_features wraps block samplers only"
            )
        blocks = result[2]
        if len(blocks[0].srctypes) != 1 or len(blocks[-1].dsttypes) != 1:
            raise ValueError("with_features supports homogeneous graphs only; for heterographs use the sampler's prefetch_node_feats")
        blocks[0].srcdata.update({f: LazyFeature(AttachedName(f)) for f in self.features})
        blocks[-1].dstdata.update({name: LazyFeature(name) for name in self.labels})
        return result


def with_features(sampler, features: Iterable[str] = ("feat",), labels: Iterable[str] = ()) -> FeatureSampler:
    """``sampler`` whose batches carry ``features`` in ``blocks[0].srcdata`` and ``labels`` in
    ``blocks[-1].dstdata``, fetched by DGL's DataLoader from storages attached with :func:`attach`."""
    return FeatureSampler(sampler, features, labels)


class _AttachedGraph(dgl.DGLGraph):
    """The loader's view of its graph: same structure and frames (a shallow copy), but
    ``get_node_storage`` answers from the loader's attached storages first."""

    _storages: dict

    def get_node_storage(self, key, ntype=None):
        if isinstance(key, AttachedName):
            if key.name not in self._storages:
                attached = ", ".join(map(repr, self._storages)) or "none"
                raise KeyError(
                    f"no storage attached as {key.name!r} (attached: {attached}); "
                    f"call dgl_zerocopy.loading.dgl.attach(loader, {{{key.name!r}: store}}) or loader.attach_data({key.name!r}, ZeroCopyStorage(store))"
                )
            return self._storages[key.name]
        if key in self._storages:
            return self._storages[key]
        return super().get_node_storage(key, ntype)


def attach(loader: dgl.dataloading.DataLoader, storages: Mapping[str, object]) -> dgl.dataloading.DataLoader:
    """Attach feature storages to DGL's ``loader`` by name and let its prefetcher find them.

    ``storages``: name -> :class:`FeatureStore` (on the loader's device, one row per node),
    :class:`ZeroCopyStorage`, any DGL ``FeatureStorage``, or a tensor. Names then resolve from these
    storages before ``g.ndata``, for :func:`with_features` and for DGL's own ``prefetch_node_feats``;
    later ``loader.attach_data(name, storage)`` calls work the same. Returns ``loader``.
    """
    if not isinstance(loader, dgl.dataloading.DataLoader):
        raise TypeError(f"loader must be a dgl.dataloading.DataLoader, but got {type(loader).__name__}")
    graph = loader.graph
    if not isinstance(graph, _AttachedGraph):
        if not isinstance(graph, dgl.DGLGraph) or len(graph.ntypes) != 1:
            raise ValueError("attach needs a DataLoader over a homogeneous DGLGraph")
        view = _AttachedGraph.__new__(_AttachedGraph)
        view.__dict__.update(graph.__dict__)  # shares the C graph and the frames: g.ndata edits stay visible
        view._storages = loader.other_storages  # the dict attach_data writes to, read at every batch
        loader.graph = view
    for name, storage in storages.items():
        if isinstance(storage, FeatureStore):
            if len(storage) != graph.num_nodes():
                raise ValueError(f"storages[{name!r}] has {len(storage)} rows but the graph has {graph.num_nodes()} nodes; one row per node is needed")
            storage = ZeroCopyStorage(storage)
        loader.attach_data(name, storage)
    return loader


def _names(names, what: str) -> tuple[str, ...]:
    names = (names,) if isinstance(names, str) else tuple(names)
    bad = [n for n in names if not isinstance(n, str)]
    if bad:
        raise TypeError(f"{what} must be feature names (strings), but got {bad[0]!r}")
    return names
