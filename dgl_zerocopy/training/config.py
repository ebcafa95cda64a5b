"""Training configuration: YAML keys and CLI flags are the same names, validated in one place."""

from __future__ import annotations

import functools
import importlib.resources
import warnings
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, PositiveFloat, PositiveInt, ValidationError, ValidationInfo, field_validator, model_validator

from ..data import DATASETS, HETERO_DATASETS
from ..store.compression.codec import check_codec_name
from ..store.storage.policy import HOST_POLICIES

FEATURE_SOURCES = ("dgl", "dgl-storage", "cpu", "zerocopy", "gpu")
# The settings checked against a range: what the error says each must be, and the check.
_RANGES = {
    "prefetch": (">= 0 (0 = no background thread)", lambda v: v >= 0),
    "weight_decay": (">= 0", lambda v: v >= 0),
    "dropout": ("in [0, 1)", lambda v: 0.0 <= v < 1.0),
}


class ConfigError(ValueError):
    """A configuration problem, phrased as one line for the user (the CLI exits with code 2)."""


class TrainConfig(BaseModel):
    """Everything ``dgl-zerocopy train`` needs. Unknown keys are errors, not silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dataset: str = "synthetic"
    num_nodes: PositiveInt | None = None  # size of a generated dataset: synthetic's nodes, hetero-synthetic's papers
    data_root: str | None = None  # folder of the real datasets (all but synthetic)
    self_loop: bool = False  # add one self-loop per node before training (GCN's A + I)
    model: Literal["sage", "gcn", "rgcn"] = "sage"  # rgcn: heterographs only, and their default (see _model_follows_the_graph)
    # dgl: DGL's samplers and blocks, the model of dgl_zerocopy.nn; pyg: GraphSAGE of PyG's SAGEConv fed by
    # dgl_zerocopy.pyg.NeighborLoader (training/pyg_train.py), on the same data, split and settings
    frontend: Literal["dgl", "pyg"] = "dgl"
    fanouts: list[int] = [15, 10, 5]
    batch_size: PositiveInt = 1024
    eval_batch_size: PositiveInt = 4096
    eval_every: PositiveInt = 1  # evaluate val and test every N epochs (and after the last)
    hidden: PositiveInt = 256
    dropout: float = 0.5
    epochs: PositiveInt = 3
    lr: PositiveFloat = 0.003
    weight_decay: float = 0.0
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    feature_source: Literal["dgl", "dgl-storage", "cpu", "zerocopy", "gpu"] = "cpu"
    prefetch: int = 2
    nproc: PositiveInt = 1  # data-parallel processes (DDP): one per GPU on CUDA, gloo ranks on the CPU
    feature_compression: str | None = "none"  # host features stored as none, fp16, bf16 or int8, decoded to float32 in the gather
    feature_cache: str = "0"  # hot rows kept in device memory: a share of the rows ("10%") or a size ("512MiB", bytes); 0: none
    # which rows: "degree" (the degree sampling follows: out-degree for DGL's in-edge sampling), "in_degree",
    # "out_degree", or "presample" (most gathered in a presampled epoch)
    cache_policy: Literal["degree", "in_degree", "out_degree", "presample"] = "degree"
    # where neighbours are sampled: "cpu" (DGL's sampler), "gpu" (ours, use_uva=True: a CUDA GPU, our DataLoader), or
    # "snapshot" (SnapshotSampler on the CPU: the training batches from a cached sample of each node's in-edges)
    sampler: Literal["cpu", "gpu", "snapshot"] = "cpu"
    graph_placement: Literal["pinned", "device"] = "pinned"  # GPU sampling (gpu, snapshot on CUDA): the CSC pinned in place, or copied to GPU memory
    snapshot_size: int | None = None  # --sampler snapshot: in-edges kept per node (None: 2 x the largest fanout)
    snapshot_refresh: float | None = None  # --sampler snapshot: share of the snapshot redrawn per epoch, in [0, 1] (None: 0.25)
    # features left on storage (docs/storage.md): a .npy or compressed folder of one row per node, or "auto" (the
    # dataset's own features: the OGB cache's features.npy, else written once under the dataset cache); None: in memory
    feature_storage: str | None = None
    host_buffer: str | None = None  # with feature_storage: the host buffer, a share of the table's rows ("25%", bookkeeping on top) or a size ("2GiB", bytes)
    # with feature_storage: which rows the host buffer keeps (None: static, the degree ranking; docs/storage.md)
    host_buffer_policy: Literal[HOST_POLICIES] | None = None

    @model_validator(mode="before")
    @classmethod
    def _former_key_names(cls, values):
        """The keys of :data:`RENAMED_KEYS` still load under their former names (with a warning)."""
        return current_keys(values) if isinstance(values, dict) else values

    @model_validator(mode="before")
    @classmethod
    def _model_follows_the_graph(cls, values):
        """No model given: ``rgcn`` on a heterograph (the only model that reads typed blocks), else ``sage``."""
        if isinstance(values, dict) and values.get("model") is None and values.get("dataset") in HETERO_DATASETS:
            values = {**values, "model": "rgcn"}
        return values

    @model_validator(mode="after")
    def _fits_the_graph(self) -> TrainConfig:
        """The model and options that need one kind of graph get it (one line for each mismatch).

        Homogeneous models (sage, gcn) are refused on a heterograph rather than mapped onto
        RGCN's relations: a config that says ``sage`` would then train another model, with a
        weight per edge type, and its figures would be read as GraphSAGE's."""
        hetero = self.dataset in HETERO_DATASETS
        if hetero and self.model != "rgcn":
            raise ValueError(
                f"model {self.model!r} trains on homogeneous graphs, and dataset {self.dataset!r} is a heterograph; "
                f"use --model rgcn (one SAGEConv per edge type, summed per node type)"
            )
        if not hetero and self.model == "rgcn":
            raise ValueError(
                f"model 'rgcn' trains on heterographs, and dataset {self.dataset!r} is homogeneous; "
                f"use --model sage or gcn, or a heterograph ({', '.join(HETERO_DATASETS)})"
            )
        if hetero and self.feature_source == "dgl-storage":
            raise ValueError(
                f"feature source 'dgl-storage' (DGL's loader with our storage hook) serves homogeneous graphs only, and dataset "
                f"{self.dataset!r} is a heterograph; use --feature-source cpu (zerocopy or gpu on a GPU) or dgl"
            )
        if hetero and parse_cache_size(self.feature_cache)[1] != 0:
            raise ValueError(
                f"feature_cache {self.feature_cache!r}: the hot-row cache ranks the rows of a homogeneous graph, and dataset "
                f"{self.dataset!r} is a heterograph; leave --feature-cache at 0"
            )
        if hetero and self.self_loop:
            raise ValueError(
                f"self_loop adds a self-loop per node of a homogeneous graph, and dataset {self.dataset!r} is a heterograph "
                f"(RGCN's SAGEConv relations read each node's own features anyway); drop --self-loop"
            )
        return self

    @model_validator(mode="after")
    def _pyg_route_fits(self) -> TrainConfig:
        """``frontend: pyg`` trains GraphSAGE of PyG's SAGEConv through our PyG loader, in one process, from a store
        of the features in memory: what it cannot do is refused in one line, never silently ignored."""
        if self.frontend != "pyg":
            return self
        refused = [
            (self.model != "sage", f"model {self.model!r}", "GraphSAGE of PyG's SAGEConv", "use --model sage"),
            (
                self.feature_source in ("dgl", "dgl-storage"),
                f"feature source {self.feature_source!r}",
                "our store's backends",
                "use --feature-source cpu (zerocopy or gpu on a GPU)",
            ),
            (self.sampler == "snapshot", "sampler 'snapshot'", "our PyG loader's samplers (cpu, gpu)", "use --sampler cpu or gpu"),
            (
                parse_cache_size(self.feature_cache)[1] != 0,
                f"feature_cache {self.feature_cache!r}",
                "a store without the hot-row cache",
                "leave --feature-cache at 0",
            ),
            (
                self.feature_storage is not None,
                f"feature_storage {self.feature_storage!r}",
                "features held in memory",
                "drop --feature-storage and --host-buffer",
            ),
            (self.nproc > 1, f"nproc {self.nproc}", "one process", "use --nproc 1"),
        ]
        for bad, what, route, fix in refused:
            if bad:
                raise ValueError(f"frontend 'pyg' trains with {route}, and {what} is not on that route; {fix}, or --frontend dgl")
        return self

    @model_validator(mode="after")
    def _gpu_sampler_in_our_loader(self) -> TrainConfig:
        """``sampler: gpu`` samples in our DataLoader (``use_uva=True``), on homogeneous graphs."""
        if self.sampler != "gpu":
            return self
        if self.feature_source in ("dgl", "dgl-storage"):
            raise ValueError(
                f"sampler 'gpu' samples in our DataLoader, but feature source {self.feature_source!r} runs DGL's; "
                f"use --feature-source zerocopy (or cpu, gpu), or --sampler cpu"
            )
        if self.dataset in HETERO_DATASETS:
            raise ValueError(f"sampler 'gpu' samples homogeneous graphs, and dataset {self.dataset!r} is a heterograph; use --sampler cpu")
        return self

    @model_validator(mode="after")
    def _placement_where_the_gpu_samples(self) -> TrainConfig:
        """``graph_placement`` places the CSC our loader samples on the GPU: with ``sampler: gpu``, or ``snapshot``
        through our loader (sources cpu, zerocopy, gpu; on a CPU device the CLI refuses it too), given or not.
        Elsewhere it would be ignored (DGL's sampler) or fail after the dataset loads: refused, as ``snapshot_size``."""
        if "graph_placement" not in self.model_fields_set or self.sampler == "gpu":
            return self
        placement = self.graph_placement
        if self.sampler == "cpu":
            raise ValueError(
                f"graph_placement {placement!r} places the graph for sampling on the GPU, but sampler is 'cpu'; add --sampler gpu, or drop --graph-placement"
            )
        if self.feature_source in ("dgl", "dgl-storage"):
            raise ValueError(
                f"graph_placement {placement!r} places the graph for sampling on the GPU, but feature source {self.feature_source!r} samples the "
                f"snapshot on the CPU (DGL's loader); use --feature-source cpu, zerocopy or gpu on a CUDA device, or drop --graph-placement"
            )
        return self

    @model_validator(mode="after")
    def _snapshot_sampler_fits(self) -> TrainConfig:
        """``sampler: snapshot`` on a homogeneous graph with positive fanouts, a snapshot at least as
        large as the largest fanout and a refresh share in [0, 1]; its two keys only with it."""
        if self.sampler != "snapshot":
            given = [k for k in ("snapshot_size", "snapshot_refresh") if getattr(self, k) is not None]
            if given:
                flags = " and ".join(f"--{k.replace('_', '-')}" for k in given)
                raise ValueError(f"{' and '.join(given)} set the snapshot sampler, but sampler is {self.sampler!r}; add --sampler snapshot, or drop {flags}")
            return self
        if self.dataset in HETERO_DATASETS:
            raise ValueError(f"sampler 'snapshot' samples homogeneous graphs, and dataset {self.dataset!r} is a heterograph; use --sampler cpu")
        if -1 in self.fanouts:
            raise ValueError(
                f"sampler 'snapshot' keeps a few in-edges per node and cannot give all of them (fanout -1 in {self.fanouts}); "
                f"give positive fanouts, or use --sampler cpu for full neighbourhoods"
            )
        largest = max(self.fanouts)
        if self.snapshot_size is not None and self.snapshot_size < largest:
            raise ValueError(
                f"snapshot_size {self.snapshot_size} is below the largest fanout {largest}: a layer cannot draw more in-edges than the snapshot keeps; "
                f"use --snapshot-size {largest} or more (default {2 * largest}, twice the largest fanout)"
            )
        if self.snapshot_refresh is not None and not 0.0 <= self.snapshot_refresh <= 1.0:
            raise ValueError(
                f"snapshot_refresh {self.snapshot_refresh:g} must be a share in [0, 1]: the part of the snapshot redrawn per epoch "
                f"(0: static, 1: a new snapshot every epoch; default 0.25)"
            )
        return self

    @model_validator(mode="after")
    def _storage_fits(self) -> TrainConfig:
        """``feature_storage`` and ``host_buffer`` together, with a source that gathers from a
        FeatureStore that can leave rows in their file, on a homogeneous graph."""
        if self.feature_storage is None:
            if self.host_buffer_policy is not None:
                raise ValueError(
                    f"host_buffer_policy {self.host_buffer_policy!r} picks the rows the host buffer of features left on storage keeps, but "
                    f"feature_storage is not set; add --feature-storage PATH (or auto) and --host-buffer SIZE, or drop --host-buffer-policy"
                )
            if self.host_buffer is not None:
                raise ValueError(
                    f"host_buffer {self.host_buffer!r} sizes the host buffer of features left on storage, but feature_storage is not set; "
                    f"add --feature-storage PATH (or auto), or drop --host-buffer"
                )
            return self
        if self.host_buffer is None:
            raise ValueError("feature_storage leaves the features in a file and needs a host buffer for their rows; add --host-buffer SIZE (e.g. 25% or 2GiB)")
        if self.feature_source in ("dgl", "gpu"):
            why = "slices DGL's own g.ndata table" if self.feature_source == "dgl" else "copies the whole table to GPU memory"
            raise ValueError(
                f"feature source {self.feature_source!r} {why}, and feature_storage leaves the rows in their file; "
                f"use --feature-source cpu (zerocopy or dgl-storage on a GPU), or drop --feature-storage"
            )
        if self.dataset in HETERO_DATASETS:
            raise ValueError(
                f"feature_storage leaves one table in a file, and dataset {self.dataset!r} is a heterograph (a table per node type); drop --feature-storage"
            )
        if self.feature_storage != "auto" and self.feature_compression != "none":
            raise ValueError(
                f"feature_compression {self.feature_compression!r} with feature_storage {self.feature_storage!r}: a file is served as stored; "
                f"compress it once (dgl_zerocopy.compress(PATH, {self.feature_compression!r}, out=DIR)) and pass --feature-storage DIR, or use --feature-storage auto"
            )
        return self

    @field_validator("host_buffer", mode="before")
    @classmethod
    def _valid_host_buffer(cls, v):
        if v is None:
            return None
        if parse_cache_size(v, "host_buffer")[1] == 0:
            raise ValueError(f"host_buffer {v!r} holds no row; give a share of the table's rows (25%) or a size (2GiB)")
        return str(v).strip()

    @field_validator("feature_storage", mode="before")
    @classmethod
    def _storage_path(cls, v):
        return None if v is None else str(v)

    @field_validator("dataset")
    @classmethod
    def _known_dataset(cls, v: str) -> str:
        if v not in DATASETS:
            raise ValueError(f"unknown dataset {v!r}; choose from: {', '.join(DATASETS)}")
        return v

    @field_validator("feature_compression")
    @classmethod
    def _known_compression(cls, v: str | None) -> str:
        return check_codec_name(v) or "none"  # "unknown compression ...; use one of: ..." otherwise

    @field_validator("feature_cache", mode="before")
    @classmethod
    def _valid_cache_size(cls, v) -> str:
        parse_cache_size(v)  # "feature_cache ..." errors name the value and the forms
        return str(v).strip()

    @model_validator(mode="after")
    def _compression_needs_a_store(self) -> TrainConfig:
        if self.feature_source != "dgl":
            return self
        for key, value, used in (
            ("feature_compression", self.feature_compression, self.feature_compression != "none"),
            ("feature_cache", self.feature_cache, parse_cache_size(self.feature_cache)[1] != 0),
        ):
            if used:
                raise ValueError(
                    f"{key} {value!r} needs a FeatureStore feature source (dgl-storage, cpu, "
                    f"zerocopy or gpu), but got 'dgl', which slices DGL's own g.ndata table"
                )
        return self

    @field_validator("fanouts", mode="before")
    @classmethod
    def _parse_fanouts(cls, v):
        return parse_fanouts(v) if isinstance(v, str) else v

    @field_validator("fanouts")
    @classmethod
    def _valid_fanouts(cls, v: list[int]) -> list[int]:
        if not v or any(f == 0 or f < -1 for f in v):
            raise ValueError(f"fanouts must be one or more positive integers (or -1 for all neighbours), but got {v}")
        return v

    @field_validator(*_RANGES)
    @classmethod
    def _in_range(cls, v: float, info: ValidationInfo) -> float:
        rule, holds = _RANGES[info.field_name]
        if not holds(v):
            raise ValueError(f"{info.field_name} must be {rule}, but got {v}")
        return v


#: Former config keys (and ``train`` flags, dashed) -> their names now: the host buffer of features left on storage was
#: called a cache, a word that names the device cache of hot rows (``feature_cache``). A former name means the same.
RENAMED_KEYS = {"host_cache": "host_buffer", "host_cache_policy": "host_buffer_policy"}


class RenamedSettingWarning(DeprecationWarning):
    """A setting given by its former name (a config key or ``train`` flag of :data:`RENAMED_KEYS`), which still works."""


def warn_renamed(old: str, new: str, stacklevel: int = 2) -> None:
    """One :class:`RenamedSettingWarning`: ``old`` (a key, or a flag) is now called ``new``."""
    warnings.warn(f"{old} is deprecated: it is now {new}, the same setting under its new name", RenamedSettingWarning, stacklevel=stacklevel + 1)


def current_keys(values: dict) -> dict:
    """``values`` with each former key of :data:`RENAMED_KEYS` under its name now, one warning per former key.

    Raises:
        ConfigError: a setting given under both names.
    """
    renamed = dict(values)
    for old, new in RENAMED_KEYS.items():
        if old not in renamed:
            continue
        if new in renamed:
            raise ConfigError(f"{new} and {old} are one setting ({old} is its former name), and both are given; keep only {new}")
        warn_renamed(f"config key {old}", new, stacklevel=3)
        renamed[new] = renamed.pop(old)
    return renamed


def parse_fanouts(text: str) -> list[int]:
    """``"15,10,5"`` -> ``[15, 10, 5]``; anything else raises ConfigError naming the bad part."""
    parts = [p.strip() for p in str(text).split(",")]
    try:
        return [int(p) for p in parts]
    except ValueError:
        bad = next(p for p in parts if not p.lstrip("-").isdigit())
        raise ConfigError(f"fanouts {text!r}: {bad!r} is not an integer; write them comma-separated, e.g. 15,10,5") from None


_SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_cache_size(text, key: str = "feature_cache") -> tuple[str, float | int]:
    """A ``feature_cache`` (or ``key``: ``host_buffer``) value as ``("rows", fraction)`` for ``"10%"`` (a share of the
    table's rows) or ``("bytes", n)`` for ``"512MiB"``, ``"2GB"``, ``"1000000"`` or an int; ConfigError otherwise."""
    value = str(text).strip().lower().replace(" ", "")
    try:
        if value.endswith("%"):
            share = float(value[:-1]) / 100
            if not 0 <= share <= 1:
                raise ValueError
            return "rows", share
        number = value.rstrip("kmgib")
        unit = value[len(number) :]
        if unit not in _SIZE_UNITS:
            raise ValueError
        size = float(number) * _SIZE_UNITS[unit]
        if size < 0 or size != size:
            raise ValueError
        return "bytes", int(size)
    except (ValueError, OverflowError):
        share = "the table's rows (25%)" if key == "host_buffer" else "the rows (10%)"
        no_cache = "" if key == "host_buffer" else "; 0 means no cache"
        what = "a buffer size" if key == "host_buffer" else "a cache size"
        raise ConfigError(f"{key} {text!r} is not {what}: give a share of {share}, a size (512MiB, 2GB) or a byte count{no_cache}") from None


#: The package that holds the shipped configs: the repository's ``configs/``, installed as ``dgl_zerocopy.configs``
#: (pyproject.toml's package-dir), so that a wheel carries them and a checkout has one copy.
_CONFIGS_PACKAGE = "dgl_zerocopy.configs"
_CONFIG_SUFFIXES = (".yaml", ".yml")


@functools.cache
def shipped_configs() -> dict[str, Path]:
    """The configs that come with the package, by name (the file's stem, e.g. ``"cora-gcn"``), sorted by name.

    Found in the installed package ``dgl_zerocopy.configs``, else (an editable install made before that package
    existed) in the checkout's ``configs/``; empty where neither exists."""
    folder = None
    try:
        folder = Path(str(importlib.resources.files(_CONFIGS_PACKAGE)))
    except ModuleNotFoundError:
        pass
    if folder is None or not folder.is_dir():
        folder = Path(__file__).resolve().parents[2] / "configs"  # dgl_zerocopy/training/ -> the checkout
    if not folder.is_dir():
        return {}
    return {p.stem: p for p in sorted(folder.iterdir()) if p.suffix in _CONFIG_SUFFIXES and p.is_file()}


def resolve_config(config: str | Path) -> Path:
    """The YAML file that ``config`` names: a path to a file, or the name of a shipped config (``"cora-gcn"``,
    ``"cora-gcn.yaml"``; :func:`shipped_configs`). A file at the path wins over a shipped config of that name.

    Raises:
        ConfigError: ``config`` is neither a file nor a shipped config's name; the message lists the shipped names.
    """
    path = Path(config)
    if path.is_file():
        return path
    shipped = shipped_configs()
    name = path.name[: -len(path.suffix)] if path.suffix in _CONFIG_SUFFIXES else path.name
    if str(config) == path.name and name in shipped:  # a bare name, not a path to somewhere else
        return shipped[name]
    names = ", ".join(shipped) or "none (this installation has no dgl_zerocopy/configs)"
    if name in shipped:  # e.g. configs/cora-gcn.yaml outside a checkout: the shipped one has that name
        fix = f"--config {name} uses the shipped config of that name ({str(shipped[name])!r})"
    else:
        fix = "pass a path to a YAML file, or the name of a shipped config"
    raise ConfigError(f"config {str(config)!r} is neither a file nor a shipped config; {fix}; shipped configs: {names}")


def read_yaml(path: str | Path) -> dict:
    """Read a config file into a dict. ``path`` is a file or a shipped config's name (:func:`resolve_config`);
    a missing or malformed file raises ConfigError."""
    path = resolve_config(path)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"config file {str(path)!r} is not valid YAML{where}: {getattr(e, 'problem', e)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping of keys to values, but holds a {type(data).__name__}")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def build_config(file_values: dict, overrides: dict) -> TrainConfig:
    """Defaults, then the file's values, then the flags that were given (not None). A key of :data:`RENAMED_KEYS`
    may come under its former name (with a warning) from either; a flag overrides the file's key under either name."""
    values = {**current_keys(file_values), **current_keys({k: v for k, v in overrides.items() if v is not None})}
    try:
        return TrainConfig(**values)
    except ValidationError as e:
        raise ConfigError(_one_line(e)) from None


def _one_line(error: ValidationError) -> str:
    first = error.errors()[0]
    key = ".".join(str(p) for p in first["loc"])
    if first["type"] == "extra_forbidden":
        allowed = ", ".join(TrainConfig.model_fields)
        return f"unknown config key {key!r}; allowed keys: {allowed}"
    msg = first["msg"].removeprefix("Value error, ")
    if msg.startswith(
        (
            "unknown",
            "fanouts",
            "dropout",
            "prefetch",
            "weight_decay",
            "feature_compression",
            "feature_cache",
            "model",
            "feature source",
            "self_loop",
            "sampler",
            "snapshot",
            "host_buffer",
            "feature_storage",
            "graph_placement",
            "frontend",
        )
    ):
        return msg
    return f"{key}: {msg}, but got {first['input']!r}"
