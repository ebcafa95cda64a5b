"""What a user who installed the package with pip has: the shipped configs, found by name from any folder; a
``train`` without DGL that says what to do before it generates anything; a ``generate`` onto an existing graph
that keeps it only where the parameters are the same, and otherwise names ``--overwrite``."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import zipfile

import pytest
from conftest import REPO

from dgl_zerocopy.cli import main
from dgl_zerocopy.data import papers_disk as pd
from dgl_zerocopy.data.disk_graph import META
from dgl_zerocopy.training.config import ConfigError, read_yaml, resolve_config, shipped_configs

REPO_CONFIGS = sorted(p.name for p in (REPO / "configs").glob("*.yaml"))


def _python(*args, env=None, cwd=REPO, timeout=120):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, encoding="utf-8", cwd=cwd, env=env, timeout=timeout)


# --- the shipped configs ---------------------------------------------------------------------------------------


def test_a_config_is_found_by_its_name():
    assert sorted(p.name for p in shipped_configs().values()) == REPO_CONFIGS
    for given in ("cora-gcn", "cora-gcn.yaml"):
        assert resolve_config(given).read_bytes() == (REPO / "configs" / "cora-gcn.yaml").read_bytes(), given
    assert read_yaml("cora-gcn") == read_yaml(REPO / "configs" / "cora-gcn.yaml")


def test_a_file_wins_over_a_shipped_name(tmp_path, monkeypatch):
    (tmp_path / "cora-gcn").write_text("epochs: 1\n")
    monkeypatch.chdir(tmp_path)
    assert read_yaml("cora-gcn") == {"epochs": 1}


def test_an_unknown_config_lists_the_shipped_names():
    with pytest.raises(ConfigError) as error:
        resolve_config("cora-gnc")
    message = str(error.value)
    assert "'cora-gnc' is neither a file nor a shipped config" in message and "\n" not in message
    assert message.endswith("shipped configs: " + ", ".join(name.removesuffix(".yaml") for name in REPO_CONFIGS)), message


def test_a_missing_configs_path_names_the_shipped_config(tmp_path):
    """README's ``--config configs/cora-gcn.yaml``, run outside a checkout: the error names ``--config cora-gcn``."""
    with pytest.raises(ConfigError, match=r"'elsewhere/cora-gcn.yaml' is neither a file nor a shipped config; --config cora-gcn uses the shipped"):
        resolve_config("elsewhere/cora-gcn.yaml")


def test_train_takes_a_config_name_from_any_folder(tmp_path):
    """The command line, from a folder without configs/: the name is resolved (an unknown one exits 2 listing them)."""
    r = _python("-m", "dgl_zerocopy.cli", "train", "--config", "no-such-config", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == (
        "dgl-zerocopy: error: config 'no-such-config' is neither a file nor a shipped config; pass a path to a YAML file, or the name "
        "of a shipped config; shipped configs: " + ", ".join(name.removesuffix(".yaml") for name in REPO_CONFIGS)
    )


@pytest.fixture(scope="module")
def installed_wheel(tmp_path_factory):
    """The package built as a wheel and installed into a folder of its own (``pip install`` without the checkout)."""
    tmp = tmp_path_factory.mktemp("wheel")
    build = _python("-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp / "dist"), str(REPO), timeout=300)
    assert build.returncode == 0, build.stderr
    (wheel,) = (tmp / "dist").glob("dgl_zerocopy-*.whl")
    install = _python("-m", "pip", "install", "--no-deps", "-q", "--target", str(tmp / "site"), str(wheel), timeout=300)
    assert install.returncode == 0, install.stderr
    return wheel, tmp / "site"


@pytest.mark.slow
def test_the_wheel_ships_the_configs(installed_wheel):
    wheel, _ = installed_wheel
    archive = zipfile.ZipFile(wheel)
    shipped = sorted(name.rsplit("/", 1)[1] for name in archive.namelist() if name.startswith("dgl_zerocopy/configs/") and name.endswith(".yaml"))
    assert shipped == REPO_CONFIGS
    for name in REPO_CONFIGS:
        assert archive.read(f"dgl_zerocopy/configs/{name}") == (REPO / "configs" / name).read_bytes(), f"{name}: the wheel's copy differs"


@pytest.mark.slow
def test_the_installed_package_finds_its_configs_by_name(installed_wheel, tmp_path):
    _, site = installed_wheel
    code = "from dgl_zerocopy.training.config import resolve_config; print(resolve_config('cora-gcn'))"
    r = _python("-c", code, env={**os.environ, "PYTHONPATH": str(site)}, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    found = r.stdout.strip()
    assert found == str(site / "dgl_zerocopy" / "configs" / "cora-gcn.yaml"), f"found {found}, not in the installed package"


# --- train without DGL -----------------------------------------------------------------------------------------

#: Run with DGL (and, given argv[1] == "no-pyg", PyG) hidden: a bare ``train``; prints its exit code, its stderr and
#: what the dataset cache holds afterwards.
_BARE_TRAIN = """
import contextlib, io, json, os, sys
sys.modules["dgl"] = None
if sys.argv[1] == "no-pyg":
    sys.modules["torch_geometric"] = None
from dgl_zerocopy.cli import main
said = io.StringIO()
with contextlib.redirect_stderr(said), contextlib.redirect_stdout(io.StringIO()):
    code = main(["train", "--no-progress"])
print(json.dumps({"code": code, "stderr": said.getvalue(), "cache": sorted(os.listdir(os.environ["DGL_ZEROCOPY_CACHE"]))}))
"""

_NEEDS_DGL = 'dgl-zerocopy: error: train on the DGL route (--frontend dgl, the default) needs DGL, which is not installed: pip install "dgl-zerocopy[dgl]"'


def _bare_train(tmp_path, pyg: str) -> dict:
    (tmp_path / "cache").mkdir()
    env = {**os.environ, "DGL_ZEROCOPY_CACHE": str(tmp_path / "cache"), "PYTHONIOENCODING": "utf-8"}
    r = _python("-W", "ignore", "-c", _BARE_TRAIN, pyg, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_bare_train_without_dgl_says_what_to_do_before_generating(tmp_path):
    done = _bare_train(tmp_path, "pyg")
    assert done["code"] == 2
    assert done["stderr"] == f"{_NEEDS_DGL}, or train on the PyG route with --frontend pyg\n", "one line, and nothing logged before it"
    assert done["cache"] == [], "a dataset was generated before the error"


def test_a_bare_train_without_dgl_or_pyg_names_both_extras(tmp_path):
    done = _bare_train(tmp_path, "no-pyg")
    assert done["code"] == 2
    assert done["stderr"] == f'{_NEEDS_DGL}, or train on the PyG route with --frontend pyg after pip install "dgl-zerocopy[pyg]"\n'
    assert done["cache"] == []


# --- generate onto an existing graph ---------------------------------------------------------------------------

FRACTION = 1e-5  # papers100m_spec's smallest graph: 1,110 nodes, generated in a fraction of a second


@pytest.fixture
def generated(tmp_path):
    out = pd.generate_to_disk(tmp_path / "g", pd.papers100m_spec(FRACTION), progress=False)
    return out, (out / META).read_bytes(), (out / META).stat().st_mtime_ns


def test_generate_with_other_parameters_refuses_naming_overwrite(generated, capsys):
    out, meta, stamp = generated
    assert main(["generate", str(out), "--fraction", str(2 * FRACTION), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"dgl-zerocopy: error: {str(out)!r} holds a graph generated with other parameters (num_nodes 1,111 (fraction 1e-05) where 2,221 "
        "(fraction 2e-05) was asked); add --overwrite to replace it, or choose another folder\n"
    )
    assert (out / META).read_bytes() == meta and (out / META).stat().st_mtime_ns == stamp, "the graph there was touched"


def test_generate_names_each_parameter_that_differs(generated, capsys):
    out, meta, _ = generated
    assert main(["generate", str(out), "--fraction", str(FRACTION), "--seed", "3", "--features", "fp32", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "(seed 0 where 3 was asked; feature_format 'int8' where 'fp32' was asked); add --overwrite" in err and "overwrite=True" not in err, err
    assert (out / META).read_bytes() == meta


def test_generate_with_the_same_parameters_keeps_the_graph_and_says_so(generated, capsys, caplog):
    out, meta, stamp = generated
    with caplog.at_level(logging.INFO, logger="dgl_zerocopy"):
        assert main(["generate", str(out), "--fraction", str(FRACTION), "--no-progress"]) == 0
    said = [r.getMessage() for r in caplog.records]
    assert f"{out} holds a graph of these parameters already: kept (--overwrite generates it again)" in said, said
    assert not any("overwrite=True" in line for line in said), said
    assert (out / META).stat().st_mtime_ns == stamp and f"{out}: 1,111 nodes" in capsys.readouterr().out


def test_generate_overwrite_replaces_a_graph_of_other_parameters(generated):
    out, _, _ = generated
    assert main(["generate", str(out), "--fraction", str(2 * FRACTION), "--overwrite", "--no-progress"]) == 0
    assert json.loads((out / META).read_text())["num_nodes"] == 2_221


def test_the_python_api_refuses_a_graph_of_other_parameters_naming_overwrite_true(generated):
    out, meta, _ = generated
    with pytest.raises(pd.ExistingGraphError, match=r"\(seed 0 where 1 was asked\); pass overwrite=True to replace it") as error:
        pd.generate_to_disk(out, pd.papers100m_spec(FRACTION, seed=1), progress=False)
    assert error.value.differences == [("seed", 0, 1)] and isinstance(error.value, ValueError)
    assert (out / META).read_bytes() == meta
    assert pd.generate_to_disk(out, pd.papers100m_spec(FRACTION), progress=False) == out  # the same parameters: kept
