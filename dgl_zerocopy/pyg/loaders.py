"""PyG's ``NeighborLoader`` and ``LinkNeighborLoader``, sampling with our samplers and gathering with our store.

Both are PyG's own classes (every argument, every batch field, PyG's order) with three things of ours:

- the sampler: :class:`~dgl_zerocopy.pyg.sampler.NeighborSampler` (NumPy on the CPU, our kernels on a GPU);
- the features: the data's feature tables gathered by our store (:mod:`.features`), on ``device``;
- ``prefetch=N`` (with ``num_workers=0``): the next ``N`` batches sampled and gathered on a thread while
  the step trains, on a side CUDA stream, handed over on the ring's stream protocol
  (:mod:`dgl_zerocopy.loading.ring`): the consumer's stream waits for a batch's event, and every CUDA
  tensor of the batch is ``record_stream``-ed there. A batch owns its tensors: it stays valid for as
  long as it is referenced. With ``num_workers > 0`` the workers prefetch, as in PyG. Every ``iter()``
  gets its own worker thread and ring, as torch's DataLoader gives every ``iter()`` its own iterator:
  iterators alive at the same time (``zip(loader, loader)``, nested loops, one per thread) each give a
  whole epoch.

Extra keyword arguments (all optional): ``device`` (``None``/``"cpu"``, or ``"cuda"``/``"cuda:N"``: sample
and gather there), ``graph_placement`` (``"pinned"``/``"device"``: where the GPU reads the CSC),
``features`` (see :mod:`.features`), ``prefetch`` (default 1 on a GPU, 0 on the CPU; refused with ``num_workers > 0``,
whose worker processes read ahead).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import multiprocessing
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch_geometric.data import Data, GraphStore, HeteroData
from torch_geometric.data import FeatureStore as TorchFeatureStore
from torch_geometric.loader import LinkNeighborLoader as PygLinkNeighborLoader
from torch_geometric.loader import NeighborLoader as PygNeighborLoader
from torch_geometric.sampler import HeteroSamplerOutput, NegativeSampling, SamplerOutput
from torch_geometric.sampler import NeighborSampler as PygNeighborSampler
from torch_geometric.sampler.base import SubgraphType
from torch_geometric.typing import EdgeType, InputEdges, InputNodes, OptTensor

from ..loading.prefetch import Prefetcher
from ..loading.ring import RingPool, SlotRing
from ..loading.timing import StageTimer
from ..loading.workers import stop_processes
from .features import FeatureRoute, Features, check_mapping, node_and_edge_ids, route_features
from .sampler import NeighborSampler
from .stores import FeatureStore


class _OurRoute:
    """What both loaders add to PyG's: the feature route, the device, the prefetching iterator.

    ``loader.data`` is the ``Data``/``HeteroData`` the user passed in, features and all, as in PyG. PyG's
    ``filter_fn`` slices ``self.data``; while it runs for a batch, ``self.data`` on that thread is the
    route's shell of the data instead (:meth:`FeatureRoute.view`: without the tables our stores gather), so
    that PyG slices the rest and never the tables."""

    route: FeatureRoute
    device: torch.device
    prefetch: int
    _rings: RingPool
    _data: Data | HeteroData | tuple[TorchFeatureStore, GraphStore]

    @property
    def data(self) -> Data | HeteroData | tuple[TorchFeatureStore, GraphStore]:
        if getattr(_FILTERING, "loader", None) is self:
            return _FILTERING.shell
        return self._data

    @data.setter
    def data(self, data: Data | HeteroData | tuple[TorchFeatureStore, GraphStore]) -> None:
        self._data = data

    def _build(self, arguments: dict[str, Any]) -> None:
        """The constructor of both loaders: ``arguments`` is the constructor's ``locals()`` (PyG's arguments
        by PyG's names, ours, ``kwargs`` for torch's ``DataLoader``). Our sampler is built unless
        ``neighbor_sampler`` is given, then the feature route, then PyG's constructor with PyG's arguments."""
        pyg = {name: value for name, value in arguments.items() if name not in ("self", "__class__", "kwargs", *_OURS)}
        ours, kwargs = {name: arguments[name] for name in _OURS}, arguments["kwargs"]
        data = pyg.pop("data")
        if pyg["neighbor_sampler"] is None:
            pyg["neighbor_sampler"] = _our_sampler(data, pyg, ours, kwargs)
        self._take_over(data, ours["device"], ours["graph_placement"], ours["features"], ours["prefetch"], kwargs)
        super().__init__(data, **pyg, **kwargs)
        self._after_pyg_init()

    def _take_over(self, data: Data | HeteroData | tuple, device: torch.device | str | None, graph_placement: str, features: Features, prefetch: int | None, kwargs: dict) -> None:  # fmt: skip
        check_mapping(features)
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"device={device!r} but CUDA is not available here; pass device=None to sample and gather on the CPU")
        if graph_placement == "device" and self.device.type != "cuda":
            raise ValueError(
                f"graph_placement='device' puts the graph in GPU memory, but device={device!r} samples on the CPU; pass a CUDA device "
                "or leave graph_placement at its default"
            )
        workers = kwargs.get("num_workers", 0)
        if prefetch is None:
            prefetch = 1 if self.device.type == "cuda" and workers == 0 else 0
        if not isinstance(prefetch, int) or isinstance(prefetch, bool) or prefetch < 0:
            raise ValueError(f"prefetch must be an int >= 0, but got {prefetch!r}")
        if prefetch > 0 and workers > 0:
            raise ValueError(
                f"prefetch={prefetch} with num_workers={workers}: the worker processes read ahead (torch's prefetch_factor); "
                "pass prefetch=None (or 0) with workers, or num_workers=0 to read ahead on a thread"
            )
        self.prefetch = prefetch
        # A ring per live prefetching iterator, made on its first use (none without prefetching).
        self._rings = RingPool(functools.partial(SlotRing, self.device, prefetch))
        sent = workers_are_sent_data(kwargs)
        self.route = route_features(data, features, self.device, share=sent)
        if sent and isinstance(data, tuple) and isinstance(data[0], FeatureStore):
            data[0].share_memory_()
        self._had_num_nodes = _explicit_num_nodes(data)

    def _after_pyg_init(self) -> None:
        """After PyG's constructor: the user's ``transform`` runs in our :meth:`filter_fn`, after the
        features are attached (PyG's would run it on a batch without them)."""
        self._transform, self.transform = self.transform, None
        self._check_table_rows()
        # On a GPU, PyG stacks the batch's edge_index where the sampler left row/col (the shell's edge_index
        # is a placeholder there), never on the host.
        self._own_edge_index = self.device.type == "cuda" and isinstance(self._data, (Data, HeteroData))
        sampler = getattr(self, "node_sampler", None) or getattr(self, "link_sampler", None)
        self._graph_num_nodes = getattr(sampler, "num_nodes", None)  # counted once (PyG would count from edge_index)

    def __getstate__(self) -> dict:
        """What a worker process started by ``spawn``/``forkserver`` is sent: the data's shell and the route
        of the tables served now (the tables themselves travel as our stores do: by reference to shared
        memory or their file, never copied); PyG's loader sends all of ``data``."""
        state = self.__dict__.copy()
        del state["_rings"]  # this process's prefetching threads; a worker makes its own
        if self.route and isinstance(self._data, (Data, HeteroData)):
            shell, ours = self.route.view(self._data)
            state["_data"], state["route"] = shell, self.route.fixed(ours)
        return state

    def __copy__(self) -> _OurRoute:
        """A shallow copy that keeps the data (``__getstate__`` is what a worker is sent, not a copy)."""
        twin = type(self).__new__(type(self))
        twin.__dict__.update(self.__dict__)
        return twin

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._rings = RingPool(functools.partial(SlotRing, self.device, self.prefetch))

    def _check_table_rows(self) -> None:
        """Every table we gather has one row per node (or edge) of its type, checked now rather than
        at the first batch (whose error could name neither the table nor the graph's count)."""
        sampler = getattr(self, "node_sampler", None) or getattr(self, "link_sampler", None)
        if not isinstance(sampler, NeighborSampler):
            return
        if sampler.is_hetero:
            num_edges = {edge_type: sampler.row_dict[sampler.to_rel_type[edge_type]].numel() for edge_type in sampler.edge_types}
        else:
            num_edges = sampler.row.numel()
        self.route.check_rows(sampler.num_nodes, num_edges)
        if isinstance(self.data, tuple) and isinstance(self.data[0], FeatureStore):
            self.data[0].check_rows(sampler.num_nodes, num_edges)

    def filter_fn(self, out: SamplerOutput | HeteroSamplerOutput) -> Data | HeteroData:
        shell, ours = self._data, None
        if isinstance(self._data, (Data, HeteroData)) and (self.route or self._own_edge_index):
            shell, ours = self.route.view(self._data, *((self.device, self._graph_num_nodes) if self._own_edge_index else ()))
        with _filtering(self, shell):
            batch = super().filter_fn(out)
        if isinstance(self._data, tuple) and isinstance(self._data[0], FeatureStore):
            self._data[0].attach_edge_features(batch)
        if self.route:
            nodes, edges = node_and_edge_ids(batch)
            self.route.attach(batch, nodes, edges, ours)
        if shell is not self._data:
            _drop_added_num_nodes(batch, self._had_num_nodes)
        return batch if self._transform is None else self._transform(batch)

    @property
    def _ring(self) -> SlotRing | None:
        """The ring of a prefetching loop that runs alone (None before the first one); iterators
        alive at the same time take others from the pool."""
        rings = self._rings.rings
        return rings[0] if rings else None

    @_ring.setter
    def _ring(self, ring: SlotRing) -> None:
        self._rings.first = ring

    def _get_iterator(self) -> Iterator:
        if self.prefetch == 0 or self.num_workers > 0:
            return super()._get_iterator()
        # torch's iterator draws its workers' base seed when it is made, so this one does too: the
        # same torch.manual_seed gives the batches of prefetch=0, with several iterators alive too.
        torch.empty((), dtype=torch.int64).random_(generator=self.generator)
        return _prefetched(self, self._rings)

    def close(self) -> None:
        """Give back what the loader holds: every live prefetching iterator ends (its next batch is
        StopIteration) once its worker has stopped, persistent worker processes (``num_workers > 0,
        persistent_workers=True``) are shut down (gone when close() returns), then the pinned tables
        and the GPU sampler's CSC, which the workers read, are given back. Idempotent."""
        self._rings.stop_writers()
        stop_processes(self)
        self.route.close()
        sampler = getattr(self, "neighbor_sampler", None) or getattr(self, "node_sampler", None) or getattr(self, "link_sampler", None)
        if isinstance(sampler, NeighborSampler):
            sampler.close()


_FILTERING = threading.local()  # .loader, .shell: the loader whose filter_fn runs on this thread, and its data's shell


@contextlib.contextmanager
def _filtering(loader: Any, shell: Any) -> Iterator[None]:
    """``loader.data`` is ``shell`` on this thread for the block (PyG's ``filter_fn`` slices it)."""
    before = getattr(_FILTERING, "loader", None), getattr(_FILTERING, "shell", None)
    _FILTERING.loader, _FILTERING.shell = loader, shell
    try:
        yield
    finally:
        _FILTERING.loader, _FILTERING.shell = before


def workers_are_sent_data(kwargs: dict) -> bool:
    """True when ``kwargs`` (torch ``DataLoader`` keywords) start worker processes that are sent the loader
    by pickling (``spawn``, ``forkserver``: Python 3.14's default on Linux), False for none or ``fork``."""
    if kwargs.get("num_workers", 0) <= 0:
        return False
    context = kwargs.get("multiprocessing_context")
    if context is None:
        method = multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]
    else:
        method = context if isinstance(context, str) else context.get_start_method()
    return method != "fork"


_OURS = ("device", "graph_placement", "features", "prefetch")  # the loaders' keyword arguments that PyG's lack
_SAMPLER_ARGUMENTS = ("num_neighbors", "replace", "subgraph_type", "disjoint", "temporal_strategy", "time_attr", "weight_attr", "is_sorted", "directed")


def _our_sampler(data: Any, pyg: dict[str, Any], ours: dict[str, Any], kwargs: dict[str, Any]) -> NeighborSampler:
    """Our sampler for a loader's PyG arguments ``pyg`` and our ``device``/``graph_placement``, as PyG's loader
    builds its own (its CSC in shared memory when workers will read it)."""
    return NeighborSampler(
        data,
        **{name: pyg[name] for name in _SAMPLER_ARGUMENTS},
        share_memory=kwargs.get("num_workers", 0) > 0,
        device=ours["device"],
        graph_placement=ours["graph_placement"],
    )


def _prefetched(loader: Any, rings: RingPool) -> Iterator:
    """The epoch's batches, ``loader.prefetch`` ahead on a worker thread with a ring taken from ``rings``
    for the epoch (module docstring). Starts at the first batch asked for, as torch's iterator does."""
    batches = iter(loader.batch_sampler)
    # The first seeds are drawn here, on the consumer's thread (a shuffled order is drawn with them),
    # where torch's iterator draws them, and not on the worker, beside other iterators' draws.
    first = next(batches, None)
    if first is None:
        return
    ring = rings.take()
    try:
        ring.begin_epoch()  # after the ring's previous worker has stopped
        yield from _prefetch_on(loader, ring, itertools.chain([first], batches))
    finally:
        rings.give_back(ring)


def _prefetch_on(loader: Any, ring: SlotRing, batches: Iterator) -> Iterator:
    """The batches of ``batches`` (seed index lists), produced on a worker thread into ``ring``."""
    timer = StageTimer()

    def produce(task: tuple[int, list[int]]) -> Any:
        index, indices = task
        with ring.fill(index) as fill:
            out = loader.collate_fn([loader.dataset[i] for i in indices])
            batch = out if loader.filter_per_worker else loader.filter_fn(out)
        return fill, batch

    worker = Prefetcher(zip(itertools.count(), batches), produce, loader.prefetch, name="dgl-zerocopy-pyg-prefetch")
    ring.set_writer(worker)
    held: list = []
    try:
        for fill, batch in worker:
            ring.release(held)
            held = [ring.hand_over(fill, [], _tensors(batch), timer)]
            yield batch
    finally:
        ring.release(held)
        worker.close()


def _tensors(batch: Any) -> Any:
    return batch.to_dict() if hasattr(batch, "to_dict") else batch


def _explicit_num_nodes(data: Any) -> Any:
    if isinstance(data, HeteroData):
        return {t: "num_nodes" in data[t] for t in data.node_types}
    return "num_nodes" in getattr(data, "_store", {})


def _drop_added_num_nodes(batch: Any, had: Any) -> None:
    # The shell counts its nodes explicitly (its feature tables are gone); the batch has them back.
    if isinstance(batch, HeteroData):
        for t in batch.node_types:
            if not had.get(t, False) and "num_nodes" in batch[t] and len(batch[t].keys()) > 1:
                del batch[t].num_nodes
    elif not had and "num_nodes" in batch._store and len(batch.keys()) > 1:
        del batch.num_nodes


class NeighborLoader(_OurRoute, PygNeighborLoader):
    """``torch_geometric.loader.NeighborLoader`` with our sampler, store and prefetch (module docstring).

    Each batch is PyG's: a ``Data``/``HeteroData`` with ``n_id``, ``e_id``, ``batch_size``, ``input_id``,
    ``num_sampled_nodes``/``num_sampled_edges`` and the features of its nodes and edges.

    Args:
        data: A ``Data``, a ``HeteroData`` or a ``(feature_store, graph_store)`` pair (ours or any PyG
            remote backend); tensors on the CPU.
        num_neighbors: Neighbours per node and hop (a list, or a dict of lists by edge type); ``-1`` takes all.
        input_nodes: The seeds: ids (``int64`` or ``int32`` tensor), a boolean mask, a node type, or
            ``(node_type, ids)``; ``None``: every node.
        input_time: The seeds' times (one per seed) for temporal sampling; needs ``time_attr``.
        replace: Draw with replacement.
        subgraph_type: ``"directional"``, ``"bidirectional"`` or ``"induced"`` (the last on the CPU).
        disjoint: One tree per seed, each numbering its own nodes (``batch`` says whose a node is).
        temporal_strategy: ``"uniform"`` or ``"last"`` (the most recent neighbours).
        time_attr: A node- or edge-level time attribute: no neighbour is later than its seed's time.
        weight_attr: An edge attribute of non-negative finite weights: neighbours drawn in proportion.
        transform: Applied to each batch after its features are attached.
        transform_sampler_output: Applied to each sampler output, as in PyG.
        is_sorted: ``edge_index`` is already sorted by destination (PyG's meaning; the CSC it builds is
            then checked by us).
        filter_per_worker: Where the batch is built from the sampler output, as in PyG.
        neighbor_sampler: A sampler to use instead of ours (PyG's or ours, built by the caller).
        directed: Deprecated in PyG; ``False`` means ``subgraph_type="bidirectional"``.
        device: Where to sample and gather: ``None``/``"cpu"`` (NumPy and numba on the CPU, batches in host
            memory) or ``"cuda"``/``"cuda:N"`` (our kernels for homogeneous directional/bidirectional graphs, the
            CPU sampler otherwise; ``n_id``, ``e_id``, ``edge_index`` and the gathered tables on that device).
        graph_placement: ``"pinned"`` (the GPU reads the CSC pinned in host memory) or ``"device"`` (copied into
            GPU memory once); ``"device"`` needs a CUDA ``device``.
        features: The tables our store gathers (:mod:`dgl_zerocopy.pyg.features`): ``None`` routes every 2-D
            floating-point node or edge attribute on the CPU, a dict adds or replaces tables (tensors, arrays,
            ``.npy`` paths or built :class:`dgl_zerocopy.FeatureStore`, one row per node or edge, by name for
            ``Data`` and by ``(type, name)`` for ``HeteroData``), ``False`` routes nothing.
        prefetch: Batches sampled and gathered ahead on a thread (side CUDA stream on a GPU); default 1 on a
            GPU and 0 on the CPU; must be 0 or ``None`` with ``num_workers > 0``.
        **kwargs: torch ``DataLoader`` arguments (``batch_size``, ``shuffle``, ``num_workers``, ...), as in PyG.

    Raises:
        ValueError: for what docs/pyg.md lists as refused (``time_attr`` with ``weight_attr``, temporal or
            ``disjoint`` sampling with induced subgraphs, an unknown ``temporal_strategy``, ``prefetch > 0``
            with ``num_workers > 0``, ``graph_placement="device"`` on the CPU, ``features=`` with a
            ``(feature_store, graph_store)`` pair), for a ``num_neighbors`` value outside -1 to 2**31 - 1,
            for a ``time_attr``/``weight_attr`` the data lacks, and for a table whose rows are not one per
            node (or edge) of its type.
        IndexError: for an ``edge_index`` or a seed outside its node type's range.
        TypeError: for a ``features`` that is not a dict (or ``False``), or a table that requires grad.
        RuntimeError: for a CUDA ``device`` where CUDA is not available.
    """

    def __init__(
        self,
        data: Data | HeteroData | tuple[TorchFeatureStore, GraphStore],
        num_neighbors: list[int] | dict[EdgeType, list[int]],
        input_nodes: InputNodes = None,
        input_time: OptTensor = None,
        replace: bool = False,
        subgraph_type: SubgraphType | str = "directional",
        disjoint: bool = False,
        temporal_strategy: str = "uniform",
        time_attr: str | None = None,
        weight_attr: str | None = None,
        transform: Callable | None = None,
        transform_sampler_output: Callable | None = None,
        is_sorted: bool = False,
        filter_per_worker: bool | None = None,
        neighbor_sampler: PygNeighborSampler | None = None,
        directed: bool = True,
        *,
        device: torch.device | str | None = None,
        graph_placement: str = "pinned",
        features: Features = None,
        prefetch: int | None = None,
        **kwargs: Any,
    ) -> None:
        self._build(locals())


class LinkNeighborLoader(_OurRoute, PygLinkNeighborLoader):
    """``torch_geometric.loader.LinkNeighborLoader`` with our sampler, store and prefetch (module docstring).

    Each batch is PyG's: the subgraph around the seed links' endpoints with ``n_id``, ``e_id``,
    ``edge_label_index`` (renumbered into the batch), ``edge_label`` and ``input_id`` (``src_index``,
    ``dst_pos_index``, ``dst_neg_index`` for triplet negatives).

    Args:
        data: A ``Data``, a ``HeteroData`` or a ``(feature_store, graph_store)`` pair; tensors on the CPU.
        num_neighbors: Neighbours per node and hop (a list, or a dict of lists by edge type); ``-1`` takes all.
        edge_label_index: The seed links, ``[2, num_links]`` (or ``(edge_type, index)``); ``None``: every edge.
        edge_label: One label per seed link; with binary negatives, 0-based labels are shifted by one and the
            negatives labelled 0 (PyG's rule); ``None`` with triplet negatives.
        edge_label_time: The seed links' times for temporal sampling; given if and only if ``time_attr`` is.
        replace: Draw with replacement.
        subgraph_type: ``"directional"``, ``"bidirectional"`` or ``"induced"`` (the last on the CPU).
        disjoint: One tree per seed link.
        temporal_strategy: ``"uniform"`` or ``"last"`` (the most recent neighbours).
        neg_sampling: PyG's ``NegativeSampling`` (``"binary"`` or ``"triplet"``, an amount, a weight).
        neg_sampling_ratio: Deprecated in PyG; binary negatives per seed link.
        time_attr: A node- or edge-level time attribute: no neighbour is later than its seed link's time.
        weight_attr: An edge attribute of non-negative finite weights: neighbours drawn in proportion.
        transform: Applied to each batch after its features are attached.
        transform_sampler_output: Applied to each sampler output, as in PyG.
        is_sorted: ``edge_index`` is already sorted by destination (PyG's meaning; checked by us).
        filter_per_worker: Where the batch is built from the sampler output, as in PyG.
        neighbor_sampler: A sampler to use instead of ours.
        directed: Deprecated in PyG; ``False`` means ``subgraph_type="bidirectional"``.
        device: As in :class:`NeighborLoader`.
        graph_placement: As in :class:`NeighborLoader`.
        features: As in :class:`NeighborLoader`.
        prefetch: As in :class:`NeighborLoader`.
        **kwargs: torch ``DataLoader`` arguments, as in PyG.

    Raises:
        ValueError: as :class:`NeighborLoader` does, and (PyG's) for ``edge_label_time`` without ``time_attr``
            or the other way round, and for ``edge_label`` with triplet negatives.
        IndexError: for an ``edge_index`` or a seed link's endpoint outside its node type's range.
        TypeError: as :class:`NeighborLoader` does.
        RuntimeError: for a CUDA ``device`` where CUDA is not available.
    """

    def __init__(
        self,
        data: Data | HeteroData | tuple[TorchFeatureStore, GraphStore],
        num_neighbors: list[int] | dict[EdgeType, list[int]],
        edge_label_index: InputEdges = None,
        edge_label: OptTensor = None,
        edge_label_time: OptTensor = None,
        replace: bool = False,
        subgraph_type: SubgraphType | str = "directional",
        disjoint: bool = False,
        temporal_strategy: str = "uniform",
        neg_sampling: NegativeSampling | None = None,
        neg_sampling_ratio: int | float | None = None,
        time_attr: str | None = None,
        weight_attr: str | None = None,
        transform: Callable | None = None,
        transform_sampler_output: Callable | None = None,
        is_sorted: bool = False,
        filter_per_worker: bool | None = None,
        neighbor_sampler: PygNeighborSampler | None = None,
        directed: bool = True,
        *,
        device: torch.device | str | None = None,
        graph_placement: str = "pinned",
        features: Features = None,
        prefetch: int | None = None,
        **kwargs: Any,
    ) -> None:
        self._build(locals())
