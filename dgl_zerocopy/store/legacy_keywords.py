"""``FeatureStore``'s former keyword arguments (``cache_bytes=``, ``variant=``, ...), mapped onto its
parts (:mod:`.options`) with one ``DeprecationWarning`` per call that names where each one moved."""

from __future__ import annotations

import warnings

from .options import Compression, DeviceCache, GatherOptions, StorageTier, as_compression
from .storage.direct_reader import DEFAULT_THREADS

_PART_CLASSES = {"kernel": "GatherOptions", "compression": "Compression", "cache": "DeviceCache", "storage": "StorageTier"}
#: part -> {old keyword: the part's field (None: the part's threads= and direct=)}
_FIELDS = {
    "kernel": {"variant": "variant", "sort_ids": "sort_ids", "max_blocks": "max_blocks"},
    "compression": {"out_dtype": "out_dtype"},
    "cache": {
        "cache_bytes": "bytes",
        "cache_policy": "policy",
        "graph": "graph",
        "sampler": "sampler",
        "seeds": "seeds",
        "presample_options": "presample_options",
    },
    "storage": {"host_cache_bytes": "bytes", "host_cache_policy": "policy", "storage_options": None},
}


def _new_form(part: str, field: str | None) -> str:
    inside = "threads=..., direct=..." if field is None else ("codec, " if part == "compression" else "") + f"{field}=..."
    return f"{part}={_PART_CLASSES[part]}({inside})"


#: old keyword -> (part, field of the part, how the new form is written)
MOVED = {name: (part, field, _new_form(part, field)) for part, fields in _FIELDS.items() for name, field in fields.items()}
#: the former keywords of the device cache (what ``cache=DeviceCache(...)`` replaces)
CACHE_KEYWORDS = tuple(_FIELDS["cache"])
STORAGE_OPTIONS = {"threads": DEFAULT_THREADS, "direct": True}


def parts_from_keywords(
    legacy: dict,
    kernel: GatherOptions | None,
    compression: Compression | str | None,
    cache: DeviceCache | None,
    storage: StorageTier | None,
    stacklevel: int = 3,
) -> tuple[GatherOptions, Compression, DeviceCache, StorageTier | None]:
    """The store's parts: those given, or those the old keywords in ``legacy`` describe (with a warning).

    Raises:
        TypeError: an unknown keyword, a keyword given together with the part it moved to, or a part of the wrong type.
    """
    unknown = sorted(set(legacy) - set(MOVED))
    if unknown:
        raise TypeError(f"FeatureStore() got an unexpected keyword argument {unknown[0]!r}; its parts are kernel=, compression=, cache= and storage=")
    _check_part("kernel", kernel, GatherOptions)
    _check_part("cache", cache, DeviceCache)
    _check_part("storage", storage, StorageTier)
    compression = as_compression(compression)
    given = {"kernel": kernel, "cache": cache, "storage": storage}
    fields: dict[str, dict] = {"kernel": {}, "compression": {}, "cache": {}, "storage": {}}
    for name, value in legacy.items():
        part, field, _ = MOVED[name]
        if given.get(part) is not None:
            raise TypeError(f"FeatureStore() got both {part}= and {name}=; set it in the part: {MOVED[name][2]}")
        if name == "storage_options" and value is not None:
            fields[part].update(_storage_options(value))
        elif not (part == "storage" and value is None):  # host_cache_bytes=None was the old "in memory"
            fields[part][field] = value
    if legacy:
        moves = "; ".join(f"{name}= moves to {MOVED[name][2]}" for name in legacy)
        warnings.warn(f"FeatureStore keyword arguments are deprecated: {moves}", DeprecationWarning, stacklevel=stacklevel)
    if fields["compression"]:
        compression = Compression(compression.codec, **fields["compression"])
    kernel = kernel if kernel is not None else GatherOptions(**fields["kernel"])
    cache = cache if cache is not None else DeviceCache(**fields["cache"])
    if storage is None and fields["storage"]:
        if "bytes" not in fields["storage"]:
            raise TypeError("host_cache_policy= and storage_options= need host_cache_bytes= (the host buffer's budget); write storage=StorageTier(bytes=...)")
        storage = StorageTier(**fields["storage"])
    return kernel, compression, cache, storage


def _check_part(name: str, part, kind: type) -> None:
    if part is not None and not isinstance(part, kind):
        raise TypeError(f"{name}= must be a {kind.__name__} (dgl_zerocopy.store.{kind.__name__}) or None, but got {type(part).__name__}")


def _storage_options(options) -> dict:
    options = dict(options or {})
    unknown = sorted(set(options) - set(STORAGE_OPTIONS))
    if unknown:
        raise TypeError(f"storage_options takes {', '.join(STORAGE_OPTIONS)}, but got {unknown}")
    return options
