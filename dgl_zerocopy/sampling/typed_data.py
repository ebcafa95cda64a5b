"""Per-type node and edge data of a typed block, read and written as DGL's ``srcdata``/``dstdata``/``edata``.

DGL's view of a heterograph's data maps a name to a ``{type: tensor}`` dict holding the types that
have that name, or to the tensor itself when the graph has one type of that kind. :class:`TypedData`
does the same over plain dicts (one ``{name: tensor}`` dict per type), so a relation's own
``srcdata`` can be the very dict of its source type: what is written through either is seen by both.

This module imports neither DGL nor the blocks that use it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

import torch

TypeKey = str | tuple[str, str, str]  # a node type, or a canonical edge type


class TypedData(MutableMapping):
    """``name -> {type: tensor}`` (or the tensor, for one type) over ``per_type[type][name]``.

    Contract: ``per_type`` holds one dict per type, in the block's type order; ``counts[type]`` is
    the number of nodes (or edges) of that type, the first dimension a tensor of that type must have;
    ``aliases`` maps other spellings of a type (an edge type's name) to its key. Reading a name no
    type has raises KeyError; writing checks the types and the first dimensions (no device sync).
    """

    def __init__(
        self, per_type: dict[TypeKey, dict[str, torch.Tensor]], counts: Mapping[TypeKey, int], kind: str, aliases: Mapping[str, TypeKey] | None = None
    ) -> None:
        self._per_type = per_type
        self._counts = counts
        self._kind = kind  # "node" or "edge", for messages
        self._aliases = dict(aliases or {})

    def __getitem__(self, name: str) -> torch.Tensor | dict[TypeKey, torch.Tensor]:
        found = {key: data[name] for key, data in self._per_type.items() if name in data}
        if not found:
            raise KeyError(name)
        if len(self._per_type) == 1:
            return next(iter(found.values()))
        return found

    def __setitem__(self, name: str, value: torch.Tensor | Mapping[TypeKey, torch.Tensor]) -> None:
        if isinstance(value, Mapping):
            items = [(self._key(key), tensor) for key, tensor in value.items()]
        elif len(self._per_type) == 1:
            items = [(next(iter(self._per_type)), value)]
        else:
            raise TypeError(
                f"this block has {len(self._per_type)} {self._kind} types ({', '.join(map(str, self._per_type))}); set {name!r} with a dict {{type: tensor}}"
            )
        for key, tensor in items:
            if not isinstance(tensor, torch.Tensor) or tensor.dim() < 1 or tensor.shape[0] != self._counts[key]:
                shape = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
                raise ValueError(f"{name!r} of {self._kind} type {key!r} must have {self._counts[key]} rows (one per {self._kind}), but got {shape}")
        for key, tensor in items:  # all checked first: nothing is half written
            self._per_type[key][name] = tensor

    def __delitem__(self, name: str) -> None:
        holders = [data for data in self._per_type.values() if name in data]
        if not holders:
            raise KeyError(name)
        for data in holders:
            del data[name]

    def __iter__(self) -> Iterator[str]:
        seen: dict[str, None] = {}
        for data in self._per_type.values():
            seen.update(dict.fromkeys(data))
        return iter(seen)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def _key(self, key: Any) -> TypeKey:
        if key in self._per_type:
            return key
        if key in self._aliases:
            return self._aliases[key]
        raise KeyError(f"{key!r} is not a {self._kind} type of this block; choose from: {', '.join(map(str, self._per_type))}")

    def __repr__(self) -> str:
        return f"TypedData({ {key: sorted(data) for key, data in self._per_type.items()} })"
