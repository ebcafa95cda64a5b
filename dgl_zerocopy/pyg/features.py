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

A tensor that requires grad (a learnt embedding, ``torch.nn.Parameter``) is left to PyG, which slices it
with its autograd graph, as without us; our stores gather copies. Every routed table is checked, when the
loader is built, to have one row per node (or edge) of its type (:meth:`FeatureRoute.check_rows`).
"""

from __future__ import annotations

import copy
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch_geometric.data import Data, HeteroData

from ..store.feature_store import FeatureStore as TableStore


@dataclass
class FeatureRoute:
    """The tables a loader gathers itself: ``node[(group, name)]`` and ``edge[(group, name)]``, where
    ``group`` is ``None`` for ``Data`` and a node or edge type for ``HeteroData``."""

    node: dict[tuple[Hashable, str], TableStore] = field(default_factory=dict)
    edge: dict[tuple[Hashable, str], TableStore] = field(default_factory=dict)
    device: torch.device = torch.device("cpu")
    #: ids of the stores this route built (the others were passed in built, and their owner closes them)
    owned: set[int] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.node or self.edge)

    def attach(self, batch: Any, nodes: Any, edges: Any) -> None:
        """Add each table's rows to ``batch``: ``nodes``/``edges`` are the batch's ``n_id``/``e_id`` (a tensor,
        or a dict by type for ``HeteroData``)."""
        for (group, name), store in self.node.items():
            ids = nodes if group is None else nodes.get(group)
            if ids is not None:
                _target(batch, group)[name] = gather(store, ids)
        for (group, name), store in self.edge.items():
            ids = edges if group is None else (edges or {}).get(group)
            if ids is not None:
                _target(batch, group)[name] = gather(store, ids)

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
    """Rows ``ids`` of ``store`` in a tensor of their own (the store's reused buffer is never handed out)."""
    out = torch.empty((ids.numel(), store.shape[1]), dtype=store.dtype, device=store.device)
    if ids.numel():
        store.gather(ids, out=out)
    return out


def route_features(data: Any, features: Any, device: torch.device) -> tuple[Any, FeatureRoute]:
    """``(shell, route)``: what PyG is given in place of ``data``, and the tables our stores gather
    (module docstring). ``data`` that is neither ``Data`` nor ``HeteroData`` (a ``(FeatureStore,
    GraphStore)`` pair) is returned as it is, with an empty route."""
    route = FeatureRoute(device=device)
    if not isinstance(data, (Data, HeteroData)):
        return data, route
    shell = copy.copy(data)  # never the user's object: a GPU loader takes edge_index out of it
    if features is False:
        return shell, route
    given = dict(features or {})
    if isinstance(data, Data):
        stores = [(None, data._store, shell._store)]
    else:
        stores = [(store._key, store, shell[store._key]) for store in data.stores if store._key is not None]
    for group, store, shell_store in stores:
        for name, value in list(store.items()):
            key = name if group is None else (group, name)
            table = given.pop(key, None)
            if table is None and not _is_feature_table(store, name, value):
                continue
            table = value if table is None else table
            level = "node" if (group is None and store.is_node_attr(name)) or (group is not None and isinstance(group, str)) else "edge"
            getattr(route, level)[(group, name)] = route.take(table, key)
            if level == "node" and "num_nodes" not in shell_store:
                shell_store.num_nodes = store.num_nodes  # PyG counts nodes by their features otherwise
            del shell_store[name]
    for key, table in given.items():  # tables the data does not hold
        group, name = (None, key) if isinstance(data, Data) else _split_key(key)
        level = "node" if group is None or isinstance(group, str) else "edge"
        getattr(route, level)[(group, name)] = route.take(table, key)
    return shell, route


def as_store(table: Any, device: torch.device, key: Any) -> TableStore:
    """``table`` as our store on ``device`` (a built store is used as it is). Raises TypeError for a tensor
    that requires grad (a store's rows carry no autograd graph)."""
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
    it came from."""
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


def node_and_edge_ids(batch: Any) -> tuple[Any, Any]:
    """The batch's ``n_id`` and ``e_id`` (tensors, or dicts by type for ``HeteroData``)."""
    if isinstance(batch, HeteroData):
        nodes = {t: batch[t].n_id for t in batch.node_types if "n_id" in batch[t]}
        edges = {t: batch[t].e_id for t in batch.edge_types if "e_id" in batch[t]}
        return nodes, edges
    return batch.n_id, getattr(batch, "e_id", None)


def check_mapping(features: Any) -> None:
    if features is not None and features is not False and not isinstance(features, Mapping):
        raise TypeError(f"features must be a dict of tables (or False), but got {type(features).__name__}")
