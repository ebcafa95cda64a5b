"""``train --feature-storage PATH|auto --host-buffer SIZE`` and the loaders' ``features_on_storage``:
the features left in their file, served by a storage-backed FeatureStore.

The end-to-end comparison runs the command twice with one thread for DGL and torch and
``--prefetch 0``: DGL's neighbour sampling on several threads (and a prefetch thread drawing while
dropout draws) is not reproducible run to run even in memory, but with those two settings it is,
and the rows read from storage are exact, so the runs must print the same losses and accuracies."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import torch
from conftest import SHARED_DATA
from test_cli_failures import one_line_exit_2
from test_ogb import _raw_data, write_ogb

from dgl_zerocopy import FeatureStore
from dgl_zerocopy.cli import main
from dgl_zerocopy.data import FeatureFile, SyntheticSpec, load_dataset
from dgl_zerocopy.data.feature_file import attach_feature_file
from dgl_zerocopy.data.ogb import load_ogb
from dgl_zerocopy.store import StorageTier
from dgl_zerocopy.training.config import build_config
from dgl_zerocopy.training.train import train

pytest.importorskip("dgl")

RUN = ["--dataset", "synthetic", "--num-nodes", "5000", "--device", "cpu", "--epochs", "2", "--no-progress", "--seed", "0"]
RUN += ["--batch-size", "64", "--eval-batch-size", "64", "--fanouts", "3,3", "--hidden", "32", "--prefetch", "0"]
SPEC = SyntheticSpec(num_nodes=5000)
SCORES = re.compile(r"^epoch +\d+ \| loss \S+ \| acc train \S+ val \S+ test \S+", re.M)


@pytest.fixture
def one_thread():
    """DGL's sampling and torch's kernels on one thread, as the module docstring says why."""
    import dgl

    before = torch.get_num_threads(), dgl.utils.get_num_threads()
    torch.set_num_threads(1)
    dgl.utils.set_num_threads(1)
    yield
    torch.set_num_threads(before[0])
    dgl.utils.set_num_threads(before[1])


def _train(capsys, *extra) -> str:
    assert main(["train", *RUN, *extra]) == 0
    return capsys.readouterr().out


def test_the_command_trains_from_storage_as_from_memory(tmp_path, monkeypatch, capsys, one_thread):
    """Same seed, same batches: the same losses and accuracies to the last digit, and each epoch
    line gives what storage delivered, the share of rows found in memory and read ahead."""
    monkeypatch.setenv("DGL_ZEROCOPY_CACHE", str(tmp_path))
    in_memory = _train(capsys)
    on_storage = _train(capsys, "--feature-storage", "auto", "--host-buffer", "50%")
    assert SCORES.findall(on_storage) == SCORES.findall(in_memory) and len(SCORES.findall(in_memory)) == 2
    assert in_memory.splitlines()[-1] == on_storage.splitlines()[-1]  # final test accuracy (best val ...)
    assert f"features on storage in '{tmp_path / SPEC.cache_name() / 'features.npy'}'" in on_storage  # the generated cache's own file
    lines = [line for line in on_storage.splitlines() if line.startswith("epoch ") and "|" in line]
    for line in lines:
        found = re.search(
            r"\| storage ([\d.]+ \w+) in [\d,]+ reads, rows in memory ([\d.]+)% \(read ahead ([\d.]+)%, held ([\d.]+)%\), read by the gather ([\d.]+)%$", line
        )
        read, rows, ahead, held, gathered = found.groups()
        assert read != "0 bytes" and 0 < float(rows) <= 100 and 0 < float(ahead) <= float(rows)  # read from storage, most of it ahead of the batch
        assert abs(float(ahead) + float(held) - float(rows)) < 0.2 and abs(float(rows) + float(gathered) - 100) < 0.2
    assert "| storage" not in in_memory


@pytest.fixture
def feature_npy(tmp_path, monkeypatch):
    """The synthetic dataset's features as a .npy of one's own (and the cache in tmp_path)."""
    monkeypatch.setenv("DGL_ZEROCOPY_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "feat.npy"
    np.save(path, load_dataset("synthetic", SPEC, cache=tmp_path / "cache").features)
    return path


def test_a_file_of_ones_own_is_trained_from_in_process(feature_npy, tmp_path, capsys):
    code = main(["train", *RUN[:-2], "--epochs", "1", "--feature-storage", str(feature_npy), "--host-buffer", "2MiB"])
    out = capsys.readouterr().out
    assert code == 0 and f"features on storage in '{feature_npy}' (1.9 MiB), host buffer 2MiB" in out
    assert "| storage " in out and "final test accuracy" in out


@pytest.mark.parametrize("policy", [None, "lru", "hybrid"])
def test_the_host_buffer_policy_reaches_the_store(policy, feature_npy, monkeypatch, capsys):
    import dgl_zerocopy.training.sources as sources

    seen = []

    def recording(*args, **kwargs):
        seen.append(kwargs["storage"].policy if "storage" in kwargs else "not given")
        return FeatureStore(*args, **kwargs)

    monkeypatch.setattr(sources, "FeatureStore", recording)
    chosen = ["--host-buffer-policy", policy] if policy else []
    code = main(["train", *RUN[:-2], "--epochs", "1", "--feature-storage", str(feature_npy), "--host-buffer", "2MiB", *chosen])
    out = capsys.readouterr().out
    assert code == 0 and f"host buffer 2MiB ({policy or 'static'})" in out and "| storage " in out
    assert seen and set(seen) == {policy}  # None: the store's default, static over the degree ranking


REFUSALS = {
    "missing file": (["--feature-storage", "{dir}/none.npy", "--host-buffer", "1MiB"], "no such feature file: '{dir}/none.npy'"),
    "wrong rows": (["--feature-storage", "{dir}/small.npy", "--host-buffer", "1MiB"], "holds 10 rows (shape (10, 4)), but synthetic has 5,000 nodes"),
    "gpu backend": (["--feature-storage", "{npy}", "--host-buffer", "1MiB", "--feature-source", "gpu"], "feature source 'gpu' copies the whole table"),
    "dgl's table": (["--feature-storage", "{npy}", "--host-buffer", "1MiB", "--feature-source", "dgl"], "feature source 'dgl' slices DGL's own"),
    "below a batch": (
        ["--feature-storage", "{npy}", "--host-buffer", "64KiB"],
        "holds 60 rows of 400 bytes beside its row -> slot map, fewer than one batch's 64 seeds",
    ),
    "holds no row": (["--feature-storage", "{npy}", "--host-buffer", "10KiB"], "holds no row: the row -> slot map of 5000 rows"),
    "a batch's neighbours": (
        ["--feature-storage", "{npy}", "--host-buffer", "200KiB"],
        "too few for this run's batches (sampled before the first step): a training batch (64 seeds, fanouts [3, 3]) reads about",
    ),
    "cache without storage": (
        ["--host-buffer", "1MiB"],
        "host_buffer '1MiB' sizes the host buffer of features left on storage, but feature_storage is not set",
    ),
    "storage without cache": (["--feature-storage", "auto"], "needs a host buffer for their rows; add --host-buffer SIZE"),
    "not a size": (["--feature-storage", "auto", "--host-buffer", "lots"], "host_buffer 'lots' is not a buffer size: give a share of the table's rows (25%)"),
    "zero": (["--feature-storage", "auto", "--host-buffer", "0"], "host_buffer '0' holds no row"),
    "a file compressed on the fly": (["--feature-storage", "{npy}", "--host-buffer", "1MiB", "--feature-compression", "int8"], "a file is served as stored"),
    "a heterograph": (["--dataset", "hetero-synthetic", "--feature-storage", "auto", "--host-buffer", "1MiB"], "is a heterograph (a table per node type)"),
    "policy without storage": (["--host-buffer-policy", "lru"], "host_buffer_policy 'lru' picks the rows the host buffer of features left on storage keeps"),
    "an unknown policy": (
        ["--feature-storage", "auto", "--host-buffer", "1MiB", "--host-buffer-policy", "mru"],
        "host_buffer_policy: Input should be 'static', 'dynamic', 'hybrid', 'lru', 'clock' or 'fifo', but got 'mru'",
    ),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_refusals_are_one_line_and_exit_2(case, feature_npy, tmp_path, capsys):
    np.save(tmp_path / "small.npy", np.zeros((10, 4), np.float32))
    args, message = REFUSALS[case]
    fill = {"dir": str(tmp_path), "npy": str(feature_npy)}
    argv = ["train", *RUN, "--epochs", "1", *(a.format(**fill) for a in args)]
    assert message.format(**fill) in one_line_exit_2(argv, capsys)


def test_the_yaml_keys_are_the_flags(tmp_path):
    (tmp_path / "c.yaml").write_text("feature_storage: auto\nhost_buffer: 25%\nhost_buffer_policy: clock\n")
    from dgl_zerocopy.training.config import read_yaml

    cfg = build_config(read_yaml(tmp_path / "c.yaml"), {})
    assert (cfg.feature_storage, cfg.host_buffer, cfg.host_buffer_policy) == ("auto", "25%", "clock")
    assert build_config({}, {"feature_storage": tmp_path / "f.npy", "host_buffer": 1 << 20}).host_buffer == str(1 << 20)


def test_features_on_storage_are_written_once_and_equal_the_dataset(tmp_path):
    """Cora's features (parsed in memory) go to <cache>/features/ once, then the same file is reused."""
    if not (SHARED_DATA / "planetoid").is_dir():
        pytest.skip("../shared/data/planetoid is not here")
    ds = load_dataset("cora", root=SHARED_DATA)
    stored = load_dataset("cora", root=SHARED_DATA, cache=tmp_path, features_on_storage=True)
    assert isinstance(stored.features, FeatureFile) and stored.features.path.parent == tmp_path / "features"
    assert stored.features.shape == ds.features.shape and stored.features.dtype == ds.features.dtype
    np.testing.assert_array_equal(np.load(stored.features.path), ds.features)
    written = stored.features.path.stat().st_mtime_ns
    again = load_dataset("cora", root=SHARED_DATA, cache=tmp_path, features_on_storage=True)
    assert again.features.path == stored.features.path and again.features.path.stat().st_mtime_ns == written
    path = stored.features.path  # no temporary file left: the file and its digest
    assert sorted(p.name for p in (tmp_path / "features").iterdir()) == [path.name, f"{path.name}.digests.json"]
    np.testing.assert_array_equal(stored.indptr, ds.indptr)


def test_attach_checks_the_rows_and_takes_a_compressed_folder(tmp_path):
    import dgl_zerocopy

    ds = load_dataset("synthetic", SPEC, cache=tmp_path)
    dgl_zerocopy.compress(np.asarray(ds.features), "int8", out=tmp_path / "int8")
    stored = attach_feature_file(ds, tmp_path / "int8")
    assert stored.features.codec == "int8" and stored.features.shape == ds.features.shape and stored.features.row_bytes == ds.features.shape[1]


def test_ogb_features_on_storage_are_the_caches_file_never_mapped(tmp_path, monkeypatch):
    """load_ogb(features_on_storage=True): the cache's features.npy as a FeatureFile; a storage-backed
    FeatureStore over it gathers the in-memory features' rows exactly."""
    meta = write_ogb(tmp_path / "ds", "ogbn-arxiv", _raw_data())
    in_memory = load_ogb("ogbn-arxiv", tmp_path, meta_dict=meta)
    stored = load_ogb("ogbn-arxiv", tmp_path, meta_dict=meta, features_on_storage=True)
    assert isinstance(stored.features, FeatureFile) and stored.features.path == tmp_path / "ds" / "dgl_zerocopy" / "features.npy"
    with FeatureStore(str(stored.features.path), backend="cpu", storage=StorageTier(4096)) as store:
        assert store.on_storage
        ids = torch.tensor([0, 59, 3, 3, 17])
        np.testing.assert_array_equal(store.gather(ids).numpy(), np.asarray(in_memory.features)[ids.numpy()])
    np.testing.assert_array_equal(stored.labels, in_memory.labels)


def test_the_command_trains_an_ogb_dataset_from_its_cache_file(tmp_path, monkeypatch, capsys):
    write_ogb(tmp_path / "ogbn_arxiv", "ogbn-arxiv", _raw_data())
    argv = ["train", "--dataset", "ogbn-arxiv", "--data-root", str(tmp_path), "--device", "cpu", "--no-progress", "--fanouts", "3,3"]
    argv += ["--batch-size", "8", "--hidden", "8", "--epochs", "1", "--feature-storage", "auto", "--host-buffer", "64KiB"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"features on storage in '{tmp_path / 'ogbn_arxiv' / 'dgl_zerocopy' / 'features.npy'}'" in out
    assert "| storage " in out and "final test accuracy" in out


def test_training_in_process_reads_the_file_not_the_dataset(tmp_path):
    """The dataset's FeatureFile is all the training sees: the source's store is on storage."""
    ds = load_dataset("synthetic", SPEC, cache=tmp_path, features_on_storage=True)
    cfg = build_config(
        {},
        {"fanouts": [3, 3], "batch_size": 64, "eval_batch_size": 64, "hidden": 16, "epochs": 1, "device": "cpu"}
        | {"feature_storage": "auto", "host_buffer": "50%"},
    )
    history = train(cfg, ds, progress=False)
    assert history[0].storage is not None and history[0].storage["storage_bytes"] > 0 and np.isfinite(history[0].loss)


# -- a budget that cannot serve the run's batches is refused before the first step ----------------


def _steps(monkeypatch) -> list:
    """Counts the training steps (the model's forward passes on a batch)."""
    import dgl_zerocopy.training.train as train_module

    steps, real = [], train_module._logits
    monkeypatch.setattr(train_module, "_logits", lambda *a, **k: steps.append(1) or real(*a, **k))
    return steps


def test_a_budget_too_small_for_the_evaluation_batches_is_refused_before_the_first_step(feature_npy, monkeypatch, capsys):
    """Training batches of 64 seeds fit half the rows, evaluation batches of 1,024 (500: the test set's 500 nodes) do
    not: refused before any step, naming the size that serves them and the flag (it trained an epoch, then failed at
    evaluation)."""
    steps = _steps(monkeypatch)
    argv = ["train", *RUN, "--epochs", "1", "--feature-storage", str(feature_npy), "--host-buffer", "50%", "--eval-batch-size", "1024"]
    err = one_line_exit_2(argv, capsys)
    assert not steps, "a step ran before the refusal"
    found = re.search(r"host_buffer '50%' holds 2,500 of the 5,000 rows, too few .*: an evaluation batch \(500 seeds\) reads about ([\d,]+) distinct rows", err)
    assert found and int(found[1].replace(",", "")) > 2500, err
    share = int(re.search(r"give --host-buffer (\d+)% \(about [\d.]+ \w+\) or more, or lower --eval-batch-size$", err)[1])
    assert share > 50
    assert main(["train", *RUN, "--epochs", "1", "--feature-storage", str(feature_npy), "--host-buffer", f"{share}%", "--eval-batch-size", "1024"]) == 0
    assert "final test accuracy" in capsys.readouterr().out  # the size it names serves the run


def test_a_budget_that_holds_every_batch_by_the_bound_samples_nothing(feature_npy, monkeypatch, capsys):
    """64 seeds, fanouts 3,3: at most 64 x 4 x 4 = 1,024 rows a batch, within 50 % of 5,000: no batch is sampled."""
    import dgl_zerocopy.training.host_budget as host_budget

    monkeypatch.setattr(host_budget, "_distinct_rows", lambda *a, **k: pytest.fail("sampled a batch where the bound sufficed"))
    assert main(["train", *RUN, "--epochs", "1", "--feature-storage", str(feature_npy), "--host-buffer", "50%"]) == 0
    assert "final test accuracy" in capsys.readouterr().out


def test_the_check_leaves_the_runs_own_draws_alone(monkeypatch):
    """The batches sampled for the check use a forked torch generator and never DGL's."""
    import dgl

    from dgl_zerocopy.training.host_budget import _distinct_rows

    ds = load_dataset("synthetic", SPEC)
    g = ds.to_dgl(with_data=False)
    torch.manual_seed(3)
    dgl.seed(3)
    expect = torch.rand(3), dgl.dataloading.NeighborSampler([3]).sample(g, torch.arange(10))[0]
    torch.manual_seed(3)
    dgl.seed(3)
    assert _distinct_rows(g, torch.as_tensor(ds.train_idx), 64, [3, 3], None, 0) > 64
    assert torch.equal(torch.rand(3), expect[0]) and torch.equal(dgl.dataloading.NeighborSampler([3]).sample(g, torch.arange(10))[0], expect[1])


@pytest.mark.parametrize("policy", [None, "static", "dynamic", "hybrid", "lru", "clock", "fifo"])
def test_a_share_of_host_buffer_is_a_share_of_the_rows_and_100_percent_holds_the_table(policy):
    """``--host-buffer P%`` gives P % of the rows a slot, the bookkeeping (slot map, ranking, per-slot state) on top:
    ``100%`` holds the whole table (it paid the bookkeeping out of the rows' bytes, and never could)."""
    from dgl_zerocopy.store.storage import plan_storage
    from dgl_zerocopy.training.sources import CacheRequest

    rows, row_bytes = 200_000, 400
    order = None if policy in ("dynamic", "lru", "clock", "fifo") else torch.arange(rows)
    for share, slots in (("100%", rows), ("25%", 50_000), ("7%", 14_000), ("0.001%", 2)):
        budget = CacheRequest(host_buffer=share, host_buffer_policy=policy).host_buffer_bytes(rows, row_bytes)
        assert plan_storage(rows, row_bytes, budget, policy, order).capacity == slots, (share, policy)
        assert plan_storage(rows, row_bytes, budget - 1, policy, order).capacity == slots - 1  # the smallest such budget


def test_the_epoch_line_shows_rows_read_ahead_apart_from_rows_held():
    """Rows read ahead count as in memory; the line shows both, and what the gathers read themselves
    ("rows in memory 100.0 %" while 266 MiB were read from storage that epoch)."""
    from dgl_zerocopy.training.train import EpochStats

    storage = {"storage_bytes": 266 << 20, "storage_reads": 2238, "device_hits": 0, "host_hits": 1000, "storage_rows": 0}
    storage |= {"read_ahead_hits": 1000, "read_ahead_rows": 1000, "hit_rate": 1.0}
    line = EpochStats(0, 1.0, 0.5, 0.5, 0.5, 1.0, 0.1, {}, None, storage).line()
    assert line.endswith("| storage 266.0 MiB in 2,238 reads, rows in memory 100.0% (read ahead 100.0%, held 0.0%), read by the gather 0.0%"), line
    storage |= {"host_hits": 600, "read_ahead_hits": 200, "storage_rows": 400, "hit_rate": 0.6}
    line = EpochStats(0, 1.0, 0.5, 0.5, 0.5, 1.0, 0.1, {}, None, storage).line()
    assert line.endswith("rows in memory 60.0% (read ahead 20.0%, held 40.0%), read by the gather 40.0%"), line


# -- the former names of the host buffer's settings (host_cache, --host-cache) still work, with a warning ------------

#: former config key -> (its name now, a value it takes)
FORMER_KEYS = {"host_cache": ("host_buffer", "25%"), "host_cache_policy": ("host_buffer_policy", "clock")}
STORED = {"feature_storage": "auto", "host_buffer": "25%", "host_buffer_policy": "clock"}


def _deprecations(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]


def _flags(values: dict) -> list[str]:
    return [part for key, value in values.items() for part in (f"--{key.replace('_', '-')}", value)]


def _cli_config(monkeypatch, flags: list[str]):
    """The TrainConfig that ``train FLAGS`` builds (the run itself stood in) and the DeprecationWarnings it gave."""
    import dgl_zerocopy.cli as cli

    seen = []
    monkeypatch.setattr(cli, "_train_local", lambda cfg, args: seen.append(cfg) or 0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["train", *flags]) == 0
    return seen[0], _deprecations(caught)


@pytest.mark.parametrize("old", list(FORMER_KEYS))
def test_a_former_flag_gives_the_config_of_its_new_name_with_one_warning(old, monkeypatch):
    new = FORMER_KEYS[old][0]
    former = {(old if key == new else key): value for key, value in STORED.items()}
    cfg, warned = _cli_config(monkeypatch, _flags(former))
    assert cfg == _cli_config(monkeypatch, _flags(STORED))[0] and (cfg.host_buffer, cfg.host_buffer_policy) == ("25%", "clock")
    old_flag, new_flag = (f"--{k.replace('_', '-')}" for k in (old, new))
    assert len(warned) == 1 and old_flag in warned[0] and f"now {new_flag}," in warned[0], warned


def test_the_new_flags_warn_nothing_and_help_names_only_them(monkeypatch, capsys):
    assert _cli_config(monkeypatch, _flags(STORED))[1] == []
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    assert "--host-buffer SIZE" in out and "--host-buffer-policy" in out and "--host-cache" not in out


@pytest.mark.parametrize("old", list(FORMER_KEYS))
def test_a_former_config_key_loads_as_its_new_name_with_one_warning(old, tmp_path):
    from dgl_zerocopy.training.config import TrainConfig, read_yaml

    new, value = FORMER_KEYS[old]
    former = {(old if key == new else key): v for key, v in STORED.items()}
    (tmp_path / "c.yaml").write_text("".join(f"{key}: {v}\n" for key, v in former.items()))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = build_config(read_yaml(tmp_path / "c.yaml"), {})
    assert cfg == build_config(STORED, {}) and getattr(cfg, new) == value
    warned = _deprecations(caught)
    assert len(warned) == 1 and f"config key {old} " in warned[0] and f"now {new}," in warned[0], warned
    with pytest.warns(DeprecationWarning, match=f"config key {old} is deprecated"):
        assert TrainConfig(**former) == TrainConfig(**STORED)  # a dict of the former keys, not through build_config


@pytest.mark.parametrize("old", list(FORMER_KEYS))
def test_a_key_under_both_names_is_an_error_naming_both(old, tmp_path, capsys):
    from pydantic import ValidationError

    from dgl_zerocopy.training.config import ConfigError, TrainConfig

    new, value = FORMER_KEYS[old]
    both = {**STORED, old: value}
    message = f"{new} and {old} are one setting ({old} is its former name), and both are given; keep only {new}"
    with pytest.raises(ConfigError) as refused:
        build_config(both, {})
    assert str(refused.value) == message
    with pytest.raises(ValidationError, match=re.escape(message)):
        TrainConfig(**both)
    (tmp_path / "c.yaml").write_text("".join(f"{key}: {v}\n" for key, v in both.items()))
    assert one_line_exit_2(["train", "--config", str(tmp_path / "c.yaml")], capsys).endswith(message)


def test_a_flag_overrides_the_files_key_under_its_former_name():
    with pytest.warns(DeprecationWarning, match="config key host_cache is deprecated"):
        cfg = build_config({"feature_storage": "auto", "host_cache": "25%"}, {"host_buffer": "50%"})
    assert cfg.host_buffer == "50%"
