"""The shipped configs/*.yaml: each one validates, the expected ones exist, and their settings are the published ones."""

import pytest
from conftest import REPO

from dgl_zerocopy.training.config import build_config, read_yaml

CONFIGS = sorted((REPO / "configs").glob("*.yaml"))
EXPECTED = {
    "ogbn-products-sage",
    "ogbn-products-gcn",
    "ogbn-arxiv-sage",
    "ogbn-papers100m-sage",
    "synthetic-sage",
    "cora-gcn",
    "coauthor-physics-sage",
    "hetero-synthetic-rgcn",
}


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_config_validates_and_explains_itself(path):
    cfg = build_config(read_yaml(path), {})
    assert path.read_text().startswith("# "), "the first line says what the config is and where its settings come from"
    assert path.stem.startswith(cfg.dataset.lower()), f"{path.name} trains on {cfg.dataset}"
    assert path.stem.endswith(cfg.model)


def test_expected_configs_exist():
    missing = EXPECTED - {p.stem for p in CONFIGS}
    assert not missing, f"missing configs: {sorted(missing)}"


def test_products_sage_has_dgls_example_settings():
    cfg = build_config(read_yaml(REPO / "configs" / "ogbn-products-sage.yaml"), {})
    assert cfg.dataset == "ogbn-products" and cfg.model == "sage"
    assert cfg.fanouts == [15, 10, 5]  # three layers
    assert (cfg.batch_size, cfg.hidden, cfg.lr, cfg.dropout) == (1024, 256, 0.003, 0.5)


def test_hetero_rgcn_has_the_rgcn_examples_settings():
    """configs/hetero-synthetic-rgcn.yaml: RGCN on the generated heterograph with examples/rgcn_hetero.py's settings."""
    from dgl_zerocopy.data import HETERO_DATASETS

    cfg = build_config(read_yaml(REPO / "configs" / "hetero-synthetic-rgcn.yaml"), {})
    assert cfg.dataset in HETERO_DATASETS and cfg.model == "rgcn" and cfg.feature_source == "cpu"
    assert (cfg.fanouts, cfg.batch_size, cfg.hidden, cfg.lr, cfg.weight_decay, cfg.dropout, cfg.epochs) == ([10, 10], 512, 64, 0.01, 5e-4, 0.5, 5)
    assert build_config(read_yaml(REPO / "configs" / "hetero-synthetic-rgcn.yaml"), {"feature_source": "dgl"}).model == "rgcn"


def test_ogb_configs_leave_the_data_root_to_the_user():
    # no machine-specific path baked in: --data-root (or a config of one's own) says where the data is
    for path in CONFIGS:
        if path.stem.startswith("ogbn-"):
            assert build_config(read_yaml(path), {}).data_root is None, path.name


def test_flags_override_a_shipped_config():
    cfg = build_config(read_yaml(REPO / "configs" / "ogbn-papers100m-sage.yaml"), {"feature_source": "cpu", "data_root": "/data"})
    assert cfg.feature_source == "cpu" and cfg.data_root == "/data" and cfg.fanouts == [10, 10, 10]


def test_the_cache_policy_defaults_to_the_degree_sampling_follows():
    """``cache_policy`` (``--cache-policy``) defaults to ``degree`` and takes exactly the cache's policy names."""
    import typing

    from dgl_zerocopy.store.cache import CACHE_POLICIES, DEFAULT_CACHE_POLICY
    from dgl_zerocopy.training.config import ConfigError, TrainConfig

    assert TrainConfig().cache_policy == DEFAULT_CACHE_POLICY == "degree"
    assert build_config({}, {"feature_cache": "10%"}).cache_policy == "degree"
    assert typing.get_args(TrainConfig.model_fields["cache_policy"].annotation) == CACHE_POLICIES
    for path in CONFIGS:  # no shipped config chooses another policy for the user
        assert build_config(read_yaml(path), {}).cache_policy == "degree", path.name
    for policy in CACHE_POLICIES:
        assert build_config({"cache_policy": policy}, {}).cache_policy == policy
    with pytest.raises(ConfigError, match="cache_policy"):
        build_config({}, {"cache_policy": "in-degree"})
