"""Node and edge features of a PyG batch gathered by our store (:class:`dgl_zerocopy.FeatureStore`).

:func:`route_features` takes a loader's ``Data``/``HeteroData`` apart: the feature tables go to our
stores (zero-copy from pinned host memory on a GPU, compressed codes, hot-row cache, storage tier),
and a shallow copy of the data without them (the *shell*) goes to PyG, which slices the rest (labels,
masks, ids) as it always does. :meth:`FeatureRoute.attach` then adds each table's rows to a batch:
node tables by the batch's ``n_id``, edge tables by its ``e_id``, on the store's device.

Routed by default: every node- or edge-level attribute that is a 2-D floating-point tensor (``x``,
``edge_attr``, ...). ``features=`` adds or replaces tables: ``{name: table}`` for ``Data``,
``{(node_type, name): table}`` or ``{(edge_type, name): table}`` for ``HeteroData``, where a table is a
tensor, an array, a ``.npy`` path or a built :class:`dgl_zerocopy.FeatureStore`; ``features=False``
routes nothing (PyG slices everything).

The loader keeps the user's data as ``loader.data``, features and all (PyG's code reads ``loader.data.x``);
our stores are built over those same tensors, never a second copy. Each batch follows the data as PyG's does
(:meth:`FeatureRoute.view`): a table routed by default is gathered by our store while the data still holds
that very tensor; set a new one (``data.x = new``) and PyG slices the new one, as with PyG's loader (one
warning says our store no longer serves it); delete it and the batch has none. A table given in ``features=``
is always ours.

For worker processes started by ``spawn`` or ``forkserver`` (:func:`shareable`), a table in private memory
is moved into shared memory in place before its store is made (what torch does to any tensor it sends to a
worker), a table that maps a file is reopened from the file, and a table whose memory torch does not own (a
NumPy array's) is copied into shared memory once, with one warning naming its size.

A tensor that requires grad (a learnt embedding, ``torch.nn.Parameter``) is left to PyG, which slices it
with its autograd graph, as without us; our stores gather copies. Every routed table is checked, when the
loader is built, to have one row per node (or edge) of its type (:meth:`FeatureRoute.check_rows`).
"""

from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data, HeteroData

from ..store.feature_store import FeatureStore as TableStore
from ..store.host_files import mapped_file
from ..store.table_input import human_size

#: ``features=`` of a loader: tables by name (``Data``) or by ``(node_type | edge_type, name)`` (``HeteroData``);
#: ``False`` routes nothing; ``None`` routes the defaults
Features = Mapping[str | tuple[Hashable, str], torch.Tensor | np.ndarray | str | os.PathLike | TableStore] | bool | None


@dataclass
class FeatureRoute:
    """The tables a loader gathers itself: ``node[(group, name)]`` and ``edge[(group, name)]``, where
    ``group`` is ``None`` for ``Data`` and a node or edge type for ``HeteroData``."""

    node: dict[tuple[Hashable, str], TableStore] = field(default_factory=dict)
    edge: dict[tuple[Hashable, str], TableStore] = field(default_factory=dict)
    device: torch.device = torch.device("cpu")
    #: ids of the stores this route built (the others were passed in built, and their owner closes them)
    owned: set[int] = field(default_factory=set)
    #: the data's tensor each table routed by default was built from (a table given in features= has none: always ours)
    sources: dict[tuple[Hashable, str], torch.Tensor] = field(default_factory=dict)
    #: tables the data no longer holds as built, already warned about
    warned: set[tuple[Hashable, str]] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.node or self.edge)

    def attach(self, batch: Any, nodes: Any, edges: Any, ours: set | None = None) -> None:
        """Add each table's rows to ``batch``: ``nodes``/``edges`` are the batch's ``n_id``/``e_id`` (a tensor,
        or a dict by type for ``HeteroData``); ``ours``: the keys to gather (from :meth:`view`; None: all)."""
        for (group, name), store in self.node.items():
            ids = nodes if group is None else nodes.get(group)
            if ids is not None and (ours is None or (group, name) in ours):
                _target(batch, group)[name] = gather(store, ids)
        for (group, name), store in self.edge.items():
            ids = edges if group is None else (edges or {}).get(group)
            if ids is not None and (ours is None or (group, name) in ours):
                _target(batch, group)[name] = gather(store, ids)

    def view(self, data: Any, edge_index_device: torch.device | None = None, num_nodes: int | Mapping[str, int] | None = None) -> tuple[Any, set]:
        """``(shell, ours)``: a shallow copy of ``data`` for PyG to slice, without the tables our stores serve
        now (``ours``): every table given in ``features=``, and each table routed by default that ``data``
        still holds as the very tensor its store was built from (module docstring). With
        ``edge_index_device``, each ``edge_index`` of the shell is a placeholder of its shape there (no
        memory: stride 0, never read, made without a kernel), so that PyG stacks the batch's ``row``/``col``
        where the sampler left them; every node type then counts its nodes explicitly, from ``num_nodes``
        (the graph's count, or counts by node type), since PyG would count them from ``edge_index``."""
        shell = copy.copy(data)
        ours = set()
        for level, tables in (("node", self.node), ("edge", self.edge)):
            for key in tables:
                group, name = key
                held, shell_store = _held_value(data, group, name), _store_of(shell, group)
                source = self.sources.get(key)
                if source is None or held is source:
                    ours.add(key)
                    if held is not None:
                        if level == "node" and "num_nodes" not in shell_store:
                            shell_store.num_nodes = _store_of(data, group).num_nodes  # PyG counts nodes by their features otherwise
                        del shell_store[name]
                elif held is not None and key not in self.warned:
                    self.warned.add(key)
                    warnings.warn(
                        f"{_name(key)} was replaced after the loader was built: PyG slices the new tensor for each batch, as PyG's "
                        "loader does, and our store no longer serves it; build a new loader to gather it with our store",
                        stacklevel=4,
                    )
        if edge_index_device is not None:
            for store in shell.node_stores:
                if "num_nodes" not in store and num_nodes is not None:
                    store.num_nodes = num_nodes[store._key] if isinstance(num_nodes, Mapping) else num_nodes
            for store in shell.edge_stores:
                if "edge_index" in store:
                    store.edge_index = torch.empty((), dtype=torch.long, device=edge_index_device).expand(*store.edge_index.shape)
        return shell, ours

    def fixed(self, ours: set) -> FeatureRoute:
        """This route serving ``ours`` only, with no tie to the data's tensors: what a worker process is
        sent, beside the shell of :meth:`view` (the tensors stay in this process)."""
        return FeatureRoute(node={k: v for k, v in self.node.items() if k in ours}, edge={k: v for k, v in self.edge.items() if k in ours}, device=self.device)

    def check_rows(self, num_nodes: int | Mapping[Any, int], num_edges: int | Mapping[Any, int]) -> None:
        """Refuse a table whose row count is not its type's node (or edge) count: ``num_nodes`` and
        ``num_edges`` are counts, or dicts by node and edge type for ``HeteroData``.

        Raises:
            ValueError: naming the table's key and both counts.
        """
        for level, tables, counts in (("node", self.node, num_nodes), ("edge", self.edge, num_edges)):
            for (group, name), store in tables.items():
                key = name if group is None else (group, name)
                count = counts.get(group) if isinstance(counts, Mapping) else counts
                check_table_rows(key, len(store), count, level, "features", group)

    def take(self, table: Any, key: Any) -> TableStore:
        """``table`` as a store on this route's device, remembered as ours when built here."""
        store = as_store(table, self.device, key)
        if store is not table:
            self.owned.add(id(store))
        return store

    def close(self) -> None:
        """Close the stores this route built from tensors (pinned tables given back); a store passed in
        built (``features={name: store}``) stays open for its owner."""
        for store in [*self.node.values(), *self.edge.values()]:
            if id(store) in self.owned:
                store.close()


def gather(store: TableStore, ids: torch.Tensor) -> torch.Tensor:
    """Rows ``ids`` of ``store`` in a tensor of their own (the store's reused buffer is never handed out).

    Args:
        store: Our store.
        ids: Row ids (``int64``/``int32``, 1-D), on the CPU or the store's device.

    Returns:
        ``[len(ids), store.shape[1]]`` of the store's dtype, on the store's device.

    Raises:
        IndexError: from the store, for an id outside ``[0, len(store))``.
    """
    out = torch.empty((ids.numel(), store.shape[1]), dtype=store.dtype, device=store.device)
    if ids.numel():
        store.gather(ids, out=out)
    return out


def route_features(data: Any, features: Any, device: torch.device, *, share: bool = False) -> FeatureRoute:
    """The tables our stores gather for ``data`` (module docstring), each store built over the data's own tensor.

    Args:
        data: A loader's data: ``Data``, ``HeteroData``, or a ``(FeatureStore, GraphStore)`` pair (an empty route).
        features: A loader's ``features=`` (:data:`Features`).
        device: Where the stores gather.
        share: Worker processes will be started by ``spawn`` or ``forkserver`` (:func:`shareable`).

    Returns:
        The route; empty (false) when nothing is routed.

    Raises:
        ValueError: for ``features=`` with a ``(FeatureStore, GraphStore)`` pair, a ``HeteroData`` key that is
            not ``(type, name)``, or a table on a GPU.
        TypeError: for a table in ``features=`` that requires grad.
    """
    route = FeatureRoute(device=device)
    if not isinstance(data, (Data, HeteroData)) and features not in (None, False):
        raise ValueError(
            f"features= routes tables of a Data or HeteroData, but the data is a {type(data).__name__}; put the tables into the "
            "FeatureStore of the (feature_store, graph_store) pair instead (dgl_zerocopy.pyg.FeatureStore.put_tensor)"
        )
    if not isinstance(data, (Data, HeteroData)) or features is False:
        return route
    given = dict(features or {})
    if isinstance(data, Data):
        stores = [(None, data._store)]
    else:
        stores = [(store._key, store) for store in data.stores if store._key is not None]
    for group, store in stores:
        for name, value in list(store.items()):
            key = name if group is None else (group, name)
            table = given.pop(key, None)
            if table is None and not _is_feature_table(store, name, value):
                continue
            default = table is None
            table = value if default else table
            level = "node" if (group is None and store.is_node_attr(name)) or (group is not None and isinstance(group, str)) else "edge"
            getattr(route, level)[(group, name)] = route.take(shareable(table, key) if share else table, key)
            if default:
                route.sources[(group, name)] = value
    for key, table in given.items():  # tables the data does not hold
        group, name = (None, key) if isinstance(data, Data) else _split_key(key)
        level = "node" if group is None or isinstance(group, str) else "edge"
        getattr(route, level)[(group, name)] = route.take(shareable(table, key) if share else table, key)
    return route


def shareable(table: Any, key: Any) -> Any:
    """``table`` ready to be sent to a worker process without a copy per worker: a CPU tensor in private
    memory is moved into shared memory in place (``share_memory_()``: the tensor, ``data.x`` itself, then
    lives there), one that views a mapped file is reopened from the file (a ``np.memmap``), and one whose
    memory torch does not own (from ``torch.from_numpy``) is copied into shared memory, with one warning
    naming its size; so is a NumPy array in private memory. Anything else (a path, a built store, a shared
    tensor, a memory map) is returned as it is.

    Args:
        table: A table as ``features=`` takes it.
        key: Its key, for the warning.

    Returns:
        The table to build the store over (the same tensor moved into shared memory, a ``np.memmap``, a
        shared copy, or ``table`` itself).
    """
    foreign = isinstance(table, np.ndarray) and mapped_file(table) is None and table.flags.writeable
    if foreign:
        table = torch.from_numpy(np.ascontiguousarray(table))
    if not isinstance(table, torch.Tensor) or table.device.type != "cpu" or table.is_shared() or table.requires_grad:
        return table
    mapped = file_behind(table)
    if mapped is not None:
        return mapped
    if foreign or not _torch_owns(table):
        warnings.warn(
            f"the table {key!r} is in memory that torch does not own (a NumPy array's): it is copied once into shared memory "
            f"({human_size(table.untyped_storage().nbytes())}) for the worker processes; build it with torch, or pass a .npy "
            "path or a NumPy memory map, to avoid the copy",
            stacklevel=5,
        )
    return table.share_memory_()


def _torch_owns(table: torch.Tensor) -> bool:
    """Whether torch allocated ``table``'s memory (its storage is resizable; ``torch.from_numpy``'s is not).
    torch before 2.3 has no ``UntypedStorage.resizable``: there such a tensor counts as torch's, so a
    ``torch.from_numpy`` table is shared without the warning (a NumPy array given as such still warns)."""
    resizable = getattr(table.untyped_storage(), "resizable", None)
    return True if resizable is None else bool(resizable())


def file_behind(table: torch.Tensor) -> np.memmap | None:
    """A read-only ``np.memmap`` over the same file bytes as ``table`` when ``table`` views a file mapped
    into this process (``torch.from_numpy(np.load(path, mmap_mode="r"))``), found in ``/proc/self/maps``.

    Returns:
        The memory map, or None for anonymous or shared memory, or where that file cannot be read.
    """
    start = table.data_ptr()
    nbytes = table.numel() * table.element_size()
    try:
        with open("/proc/self/maps") as maps:
            lines = maps.readlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(maxsplit=5)
        low, high = (int(part, 16) for part in parts[0].split("-"))
        if low <= start < high:
            path = parts[5].strip() if len(parts) == 6 else ""
            if not path.startswith("/") or path.startswith("/dev/") or path.endswith("(deleted)") or start + nbytes > high:
                return None
            offset = int(parts[2], 16) + start - low
            try:
                return np.memmap(path, dtype=_NUMPY_DTYPES[table.dtype], mode="r", offset=offset, shape=tuple(table.shape))
            except (OSError, ValueError, KeyError):
                return None
    return None


_NUMPY_DTYPES = {torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16, torch.int8: np.int8, torch.uint8: np.uint8}


def as_store(table: Any, device: torch.device, key: Any) -> TableStore:
    """``table`` as our store on ``device`` (a built store is used as it is).

    Args:
        table: A CPU tensor, an array, a ``.npy`` path or a built store.
        device: Where the store gathers.
        key: The table's key, for the errors.

    Returns:
        The store.

    Raises:
        TypeError: for a tensor that requires grad (a store's rows carry no autograd graph).
        ValueError: for a tensor on a GPU (our stores gather from host memory).
    """
    if isinstance(table, TableStore):
        return table
    if isinstance(table, torch.Tensor) and table.requires_grad:
        raise TypeError(
            f"features[{key!r}] requires grad, but our stores gather copies with no autograd graph; leave it in the Data "
            "(PyG slices it with its gradient) or pass a table that does not require grad (.detach())"
        )
    if isinstance(table, torch.Tensor) and table.device.type != "cpu":
        raise ValueError(f"features[{key!r}] is on {table.device}; our stores gather from host memory: pass the CPU tensor")
    return TableStore(table, device=device)


def check_table_rows(key: Any, rows: int, count: int | None, level: str, where: str, group: Any = None) -> None:
    """Refuse a ``level`` (``"node"``/``"edge"``) table of ``rows`` rows where its type (``group``; None for a
    homogeneous graph) has ``count`` (None: unknown, nothing checked); ``where`` names the argument or store
    it came from.

    Raises:
        ValueError: naming ``where[key]``, ``rows`` and ``count``.
    """
    if count is not None and rows != int(count):
        of = "" if group is None else f" of type {group!r}"
        article = "an" if level == "edge" else "a"
        raise ValueError(
            f"{where}[{key!r}] has {rows} rows, but the graph has {int(count)} {level}s{of}; {article} {level} table needs one row "
            f"per {level}: pass one of {int(count)} rows"
        )


def _is_feature_table(store: Any, name: str, value: Any) -> bool:
    if not isinstance(value, torch.Tensor) or value.dim() != 2 or not value.is_floating_point() or value.device.type != "cpu":
        return False
    if value.requires_grad:  # PyG slices it with its autograd graph (module docstring)
        return False
    if name in ("edge_index", "edge_label_index", "pos"):
        return False
    return store.is_node_attr(name) or store.is_edge_attr(name)


def _split_key(key: Any) -> tuple[Any, str]:
    if not (isinstance(key, tuple) and len(key) == 2 and isinstance(key[1], str)):
        raise ValueError(f"features keys of HeteroData are (node_type, name) or (edge_type, name), but got {key!r}")
    return key


def _target(batch: Any, group: Any) -> Any:
    return batch if group is None else batch[group]


def _store_of(data: Any, group: Any) -> Any:
    """The storage of ``group`` in ``data`` (None when a ``HeteroData`` has no such type), never adding one."""
    if group is None:
        return data._store
    return data._node_store_dict.get(group) if isinstance(group, str) else data._edge_store_dict.get(group)


def _held_value(data: Any, group: Any, name: str) -> Any:
    store = _store_of(data, group)
    return None if store is None else store.get(name)


def _name(key: tuple[Hashable, str]) -> str:
    group, name = key
    return f"data.{name}" if group is None else f"data[{group!r}].{name}"


def node_and_edge_ids(batch: Any) -> tuple[Any, Any]:
    """The batch's ``n_id`` and ``e_id`` (tensors, or dicts by type for ``HeteroData``)."""
    if isinstance(batch, HeteroData):
        nodes = {t: batch[t].n_id for t in batch.node_types if "n_id" in batch[t]}
        edges = {t: batch[t].e_id for t in batch.edge_types if "e_id" in batch[t]}
        return nodes, edges
    return batch.n_id, getattr(batch, "e_id", None)


def check_mapping(features: Any) -> None:
    """Refuse a loader's ``features=`` that is neither a mapping nor ``None``/``False``.

    Raises:
        TypeError: naming the type given.
    """
    if features is not None and features is not False and not isinstance(features, Mapping):
        raise TypeError(f"features must be a dict of tables (or False), but got {type(features).__name__}")
