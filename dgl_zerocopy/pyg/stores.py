"""PyG's remote-backend interfaces over our store and CSC: ``NeighborLoader((feature_store, graph_store), ...)``.

- :class:`FeatureStore`: ``torch_geometric.data.FeatureStore`` whose 2-D floating-point tables are our
  stores (:class:`dgl_zerocopy.FeatureStore`: zero-copy on a GPU, compressed codes, caches, the storage
  tier); other tensors (labels, ids, masks) are kept as they are. Edge features live beside them
  (:meth:`FeatureStore.put_edge_tensor`) and reach the batch by its ``e_id`` through our loaders, which
  PyG's own filtering of a remote backend cannot do (pyg-team/pytorch_geometric#9566).
- :class:`GraphStore`: ``torch_geometric.data.GraphStore`` holding each edge type's index as given
  (COO, CSR or CSC), checked when it is put (ids within the ``size`` given, offsets from 0, never
  decreasing, ending at the number of edges); PyG's ``csc()`` converts once, when the sampler is built.

``FeatureStore.share_memory_()`` readies its tables for worker processes started by ``spawn``/``forkserver``
(our loaders call it). ``FeatureStore.from_data(data)`` and ``GraphStore.from_data(data)`` split a ``Data``/``HeteroData`` into the
pair.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

import torch
from torch_geometric.data import Data, EdgeAttr, HeteroData, TensorAttr
from torch_geometric.data import FeatureStore as PygFeatureStore
from torch_geometric.data import GraphStore as PygGraphStore

from ..data.graph_check import check_csc, check_ids
from ..store.feature_store import FeatureStore as TableStore
from .features import as_store, check_table_rows, gather, shareable

_HOMOGENEOUS_EDGES = None  # the edge group of a homogeneous graph


class FeatureStore(PygFeatureStore):
    """Node tables by ``(group_name, attr_name)`` (``group_name`` ``None`` for a homogeneous graph, else a node
    type) and edge tables by ``(edge_type, attr_name)``.

    A 2-D floating-point CPU tensor put here becomes our store (rows gathered on ``device``, in tensors of
    their own); any other tensor (labels, ids, masks, a tensor that requires grad) is kept and indexed as it
    is. ``put_tensor`` with an ``index`` is refused (put whole tables): our store serves whole tables.

    Args:
        device: Where our stores gather: ``None``/``"cpu"``, or ``"cuda"``/``"cuda:N"`` (zero-copy from
            pinned host memory).

    Raises:
        ValueError: from ``put_tensor`` for a table put with an ``index``.
        KeyError: from ``get_tensor``/:meth:`get_edge_tensor` for a table never put.
    """

    def __init__(self, device: Any = None) -> None:
        super().__init__()
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self._nodes: dict[tuple[Hashable, str], Any] = {}
        self._edges: dict[tuple[Hashable, str], Any] = {}
        # the tensor each store was built from here, by (tables, key): what share_memory_() rebuilds it over
        self._sources: dict[tuple[str, tuple[Hashable, str]], torch.Tensor] = {}

    # -- PyG's interface (node tables) ---------------------------------------------------------------

    def _put_tensor(self, tensor: Any, attr: TensorAttr) -> bool:
        if attr.index is not None and not (isinstance(attr.index, slice) and attr.index == slice(None)):
            raise ValueError(f"put whole tables into dgl_zerocopy.pyg.FeatureStore (index=None), but {attr.attr_name!r} came with index={attr.index!r}")
        self._put("_nodes", (attr.group_name, attr.attr_name), tensor)
        return True

    def _put(self, tables: str, key: tuple[Hashable, str], tensor: Any) -> None:
        held = _held(tensor, self.device, key[1])
        getattr(self, tables)[key] = held
        if held is not tensor and isinstance(held, TableStore):
            self._sources[(tables, key)] = tensor
        else:
            self._sources.pop((tables, key), None)

    def share_memory_(self) -> FeatureStore:
        """Make every table this store built from a tensor ready to be sent to worker processes started by
        ``spawn`` or ``forkserver`` (our loaders call it when theirs will be): its store is rebuilt over the
        tensor moved into shared memory in place, or over the file it maps (as a loader's own tables,
        :func:`dgl_zerocopy.pyg.features.shareable`). Tables put as built stores are left to their owner.

        Returns:
            This store.
        """
        for (tables, key), tensor in list(self._sources.items()):
            if not tensor.is_shared():
                getattr(self, tables)[key].close()  # before the memory moves: a store on a GPU has it registered
                getattr(self, tables)[key] = as_store(shareable(tensor, key[1]), self.device, key[1])
            del self._sources[(tables, key)]  # ready: nothing more to do for it
        return self

    def _get_tensor(self, attr: TensorAttr) -> torch.Tensor | None:
        key = (attr.group_name, attr.attr_name)
        if key not in self._nodes:
            raise KeyError(f"no table {attr.attr_name!r} of group {attr.group_name!r} in this FeatureStore; put it with put_tensor first")
        return _rows(self._nodes[key], attr.index)

    def _remove_tensor(self, attr: TensorAttr) -> bool:
        self._sources.pop(("_nodes", (attr.group_name, attr.attr_name)), None)
        return self._nodes.pop((attr.group_name, attr.attr_name), None) is not None

    def _get_tensor_size(self, attr: TensorAttr) -> tuple[int, ...] | None:
        value = self._nodes.get((attr.group_name, attr.attr_name))
        return None if value is None else tuple(value.shape)

    def get_all_tensor_attrs(self) -> list[TensorAttr]:
        return [self._tensor_attr_cls.cast(group, name) for group, name in self._nodes]

    # -- edge tables ---------------------------------------------------------------------------------

    def put_edge_tensor(self, tensor: Any, attr_name: str, edge_type: Any = _HOMOGENEOUS_EDGES) -> None:
        """Put an edge table, which our loaders attach to each batch by its ``e_id``.

        Args:
            tensor: One row per edge, in edge-id order (the order of the graph's ``edge_index``): a 2-D
                floating-point CPU tensor becomes our store, anything else is kept as it is.
            attr_name: The batch attribute it fills (``edge_attr``, ...).
            edge_type: The edge type; ``None`` for a homogeneous graph.
        """
        self._put("_edges", (edge_type, attr_name), tensor)

    def get_edge_tensor(self, attr_name: str, index: Any = None, edge_type: Any = _HOMOGENEOUS_EDGES) -> torch.Tensor:
        """Rows of an edge table.

        Args:
            attr_name: The table's name, as put.
            index: Edge ids (a tensor or a list, on any device); ``None`` or ``slice(None)``: every row.
            edge_type: The edge type; ``None`` for a homogeneous graph.

        Returns:
            The rows, in a tensor of their own on this store's device for our stores (the kept tensor's
            device otherwise).

        Raises:
            KeyError: for a table never put.
        """
        key = (edge_type, attr_name)
        if key not in self._edges:
            raise KeyError(f"no edge table {attr_name!r} of edge type {edge_type!r}; put it with put_edge_tensor first")
        return _rows(self._edges[key], index)

    def edge_tensor_attrs(self) -> list[tuple[Any, str]]:
        """``(edge_type, attr_name)`` of every edge table (``edge_type`` ``None`` for a homogeneous graph)."""
        return list(self._edges)

    def attach_edge_features(self, batch: Any) -> None:
        """Add every edge table's rows to ``batch`` by its ``e_id`` (per edge type for ``HeteroData``)."""
        for edge_type, name in self._edges:
            target = batch if edge_type is None else batch[edge_type] if edge_type in batch.edge_types else None
            if target is not None and "e_id" in target:
                target[name] = self.get_edge_tensor(name, target.e_id, edge_type)

    def check_rows(self, num_nodes: int | Mapping[Any, int], num_edges: int | Mapping[Any, int]) -> None:
        """Refuse a table whose row count is not its type's node (or edge) count, as a loader over this
        store is built: ``num_nodes``/``num_edges`` are counts, or dicts by node and edge type. Only
        tables with a type the graph has are checked (others are never gathered).

        Raises:
            ValueError: naming the table's key and both counts.
        """
        for level, tables, counts in (("node", self._nodes, num_nodes), ("edge", self._edges, num_edges)):
            for (group, name), value in tables.items():
                count = counts.get(group) if isinstance(counts, Mapping) else counts
                if value is not None and hasattr(value, "shape") and len(value.shape) >= 1:
                    key = name if group is None else (group, name)
                    check_table_rows(key, value.shape[0], count, level, "FeatureStore", group)

    def close(self) -> None:
        """Give back our stores' pinned memory."""
        for value in [*self._nodes.values(), *self._edges.values()]:
            if isinstance(value, TableStore):
                value.close()

    @classmethod
    def from_data(cls, data: Data | HeteroData, device: Any = None) -> FeatureStore:
        """A store holding every node- and edge-level tensor attribute of ``data`` but the graph's structure
        (``edge_index``, ``adj``, ``adj_t``, ``num_nodes``).

        Args:
            data: A ``Data`` or ``HeteroData`` on the CPU.
            device: Where our stores gather, as in the constructor.

        Returns:
            The store; pair it with :meth:`GraphStore.from_data` as a loader's ``data``.
        """
        store = cls(device)
        if isinstance(data, Data):
            groups = [(None, data._store, data.is_node_attr, data.is_edge_attr)]
        else:
            groups = [(s._key, s, s.is_node_attr, s.is_edge_attr) for s in data.stores if s._key is not None]
        for group, values, is_node, is_edge in groups:
            for name, value in values.items():
                if not isinstance(value, torch.Tensor) or name in ("edge_index", "adj", "adj_t", "num_nodes"):
                    continue
                if (group is None or isinstance(group, str)) and is_node(name):
                    store.put_tensor(value, group_name=group, attr_name=name, index=None)
                elif is_edge(name):
                    store.put_edge_tensor(value, name, group)
        return store


class GraphStore(PygGraphStore):
    """Edge indices by edge type (``None`` for a homogeneous graph), in the layout given (``"coo"``:
    ``(row, col)``, ``"csr"``: ``(rowptr, col)``, ``"csc"``: ``(row, colptr)``; integer CPU tensors).

    A put is refused, naming the edge type, the array, the first bad position and its value, when a sampling
    kernel could not read what it describes.

    Raises:
        IndexError: from ``put_edge_index`` for an id outside ``size`` (``[0, size[0])`` for sources,
            ``[0, size[1])`` for destinations; without a ``size``, only for a negative id).
        ValueError: from ``put_edge_index`` for offsets (CSR's row pointer, CSC's column pointer) that do not
            start at 0, decrease, or end elsewhere than at the number of edges, for arrays of different
            lengths, or for an ``edge_index`` that is not a pair.
        TypeError: from ``put_edge_index`` for a non-integer dtype.
    """

    def __init__(self) -> None:
        super().__init__()
        self._indices: dict[tuple, Any] = {}

    def _put_edge_index(self, edge_index: Any, edge_attr: EdgeAttr) -> bool:
        check_put(edge_index, edge_attr)
        self._indices[(edge_attr.edge_type, edge_attr.layout.value, edge_attr.is_sorted, edge_attr.size)] = edge_index
        return True

    def _get_edge_index(self, edge_attr: EdgeAttr) -> Any:
        return self._indices.get((edge_attr.edge_type, edge_attr.layout.value, edge_attr.is_sorted, edge_attr.size))

    def _remove_edge_index(self, edge_attr: EdgeAttr) -> bool:
        return self._indices.pop((edge_attr.edge_type, edge_attr.layout.value, edge_attr.is_sorted, edge_attr.size), None) is not None

    def get_all_edge_attrs(self) -> list[EdgeAttr]:
        return [EdgeAttr(*key) for key in self._indices]

    @classmethod
    def from_data(cls, data: Data | HeteroData) -> GraphStore:
        """A store holding ``data``'s ``edge_index`` of every edge type, as COO with its node counts as ``size``.

        Args:
            data: A ``Data`` or ``HeteroData`` on the CPU.

        Returns:
            The store; pair it with :meth:`FeatureStore.from_data` as a loader's ``data``.

        Raises:
            IndexError: for an edge whose source or destination is outside its node type's count.
        """
        store = cls()
        if isinstance(data, Data):
            store.put_edge_index((data.edge_index[0], data.edge_index[1]), edge_type=None, layout="coo", size=(data.num_nodes, data.num_nodes))
        else:
            for edge_type in data.edge_types:
                src, _, dst = edge_type
                edge_index = data[edge_type].edge_index
                size = (data[src].num_nodes, data[dst].num_nodes)
                store.put_edge_index((edge_index[0], edge_index[1]), edge_type=edge_type, layout="coo", size=size)
        return store


def check_put(edge_index: Any, edge_attr: EdgeAttr) -> None:
    """Refuse an ``edge_index`` put under ``edge_attr`` that does not describe a graph of ``edge_attr.size``
    (the errors of :class:`GraphStore`): a pair ``(row, col)`` (COO), ``(rowptr, col)`` (CSR) or
    ``(row, colptr)`` (CSC)."""
    layout, size = edge_attr.layout.value, edge_attr.size
    name = f"the {layout.upper()} edge_index put for edge type {edge_attr.edge_type!r}"
    if not isinstance(edge_index, tuple | list) or len(edge_index) != 2:
        raise ValueError(f"{name} must be a pair of 1-D tensors ({_PARTS[layout]}), but got {type(edge_index).__name__}")
    first, second = edge_index
    num_src, num_dst = (int(size[0]), int(size[1])) if size is not None else (_UNBOUNDED, _UNBOUNDED)
    fix = f"drop or renumber those edges, or put it with the right size (now {size})" if size is not None else "drop or renumber those edges"
    if layout == "coo":
        check_ids(first, num_src, name=f"{name}: row (sources)", fix=fix)
        check_ids(second, num_dst, name=f"{name}: col (destinations)", fix=fix)
        if len(first) != len(second):
            raise ValueError(f"{name}: row holds {len(first)} ids but col {len(second)}; give one source and one destination per edge")
    elif layout == "csr":
        check_csc(first, second, num_dst, name=name, num_dst_nodes=None if size is None else num_src, fix=fix)
    else:
        check_csc(second, first, num_src, name=name, num_dst_nodes=None if size is None else num_dst, fix=fix)


_PARTS = {"coo": "row, col", "csr": "rowptr, col", "csc": "row, colptr"}
_UNBOUNDED = 2**63 - 1  # no size given: ids are only required to be >= 0


def _held(tensor: Any, device: torch.device, name: str) -> Any:
    """Our store for a feature table (2-D floating point), the tensor itself for anything else (and for a
    tensor that requires grad, which PyG serves with its autograd graph)."""
    if isinstance(tensor, TableStore):
        return tensor
    if isinstance(tensor, torch.Tensor) and not tensor.requires_grad and tensor.dim() == 2 and tensor.is_floating_point() and tensor.device.type == "cpu":
        return as_store(tensor, device, name)
    return tensor


def _rows(value: Any, index: Any) -> torch.Tensor:
    whole = index is None or (isinstance(index, slice) and index == slice(None))
    if isinstance(value, TableStore):
        ids = torch.arange(len(value)) if whole else torch.as_tensor(index)
        return gather(value, ids)
    if whole:
        return value
    return value[torch.as_tensor(index).to(value.device) if isinstance(value, torch.Tensor) else index]
