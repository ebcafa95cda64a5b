"""The public names: what ``import dgl_zerocopy`` binds, the modules docs/api.md lists, and the old
paths of moved modules (a DeprecationWarning naming the new path, the same objects)."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest
from conftest import REPO

import dgl_zerocopy
from dgl_zerocopy._moved import MOVED

API_MD = Path(REPO) / "docs" / "api.md"
NEEDS_DGL = {"dgl_zerocopy.loading.dgl"}  # modules that import DGL themselves
NEEDS_PYG = {"dgl_zerocopy.pyg"}  # modules that import torch_geometric themselves (the [pyg] extra)


def _tables() -> tuple[dict[str, list[str]], dict[str, str]]:
    """docs/api.md's two tables: module -> its listed names, and old path -> new path."""
    public, moved = {}, {}
    for line in API_MD.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not re.fullmatch(r"`dgl_zerocopy[\w.]*`", cells[0]):
            continue
        module = cells[0].strip("`")
        if re.fullmatch(r"`dgl_zerocopy[\w.]*`", cells[1]):
            moved[module] = cells[1].strip("`")
        else:
            public[module] = re.findall(r"`(\w+)`", cells[1].split("(")[0])
    return public, moved


PUBLIC, MOVED_IN_DOCS = _tables()


def _import(module: str) -> types.ModuleType:
    if module in NEEDS_DGL:
        pytest.importorskip("dgl")
    if module in NEEDS_PYG:
        pytest.importorskip("torch_geometric")
    return importlib.import_module(module)


def test_the_api_page_lists_the_public_modules():
    assert {"dgl_zerocopy", "dgl_zerocopy.nn", "dgl_zerocopy.loading.dgl", "dgl_zerocopy.sampling.blocks"} <= set(PUBLIC)
    assert PUBLIC["dgl_zerocopy"] == ["DataLoader", "FeatureStore", "compress", "__version__"]


def test_the_top_level_binds_only_its_public_names_and_its_own_modules():
    """No stray module (``os``, ``sys``, ``types`` once were) and no helper without an underscore."""
    stray = []
    for name in dir(dgl_zerocopy):
        if name.startswith("_") or name in dgl_zerocopy.__all__:
            continue
        value = getattr(dgl_zerocopy, name)
        if not (isinstance(value, types.ModuleType) and value.__name__.startswith("dgl_zerocopy.")):
            stray.append(name)
    assert stray == [], f"dir(dgl_zerocopy) holds names users do not import: {stray}"
    assert not {"os", "sys", "types"} & set(dir(dgl_zerocopy))
    assert sorted(dgl_zerocopy.__all__) == sorted(PUBLIC["dgl_zerocopy"])


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_every_listed_name_and_every_name_in_all_imports(module):
    imported = _import(module)
    for name in PUBLIC[module] + list(getattr(imported, "__all__", [])):
        exec(f"from {module} import {name}", {})  # as a script would write it


def test_loading_blocks_gives_the_very_objects_of_sampling_blocks():
    from dgl_zerocopy.loading import blocks as loading_blocks
    from dgl_zerocopy.sampling import blocks as sampling_blocks

    for name in PUBLIC["dgl_zerocopy.loading.blocks"]:
        assert getattr(loading_blocks, name) is getattr(sampling_blocks, name), name


def test_the_block_types_and_layers_import_without_importing_dgl():
    """The sampling package imports its samplers (and so DGL) only when they are asked for: its
    block types, the layers and the top level stay light."""
    code = "import sys, dgl_zerocopy, dgl_zerocopy.nn, dgl_zerocopy.loading.blocks, dgl_zerocopy.training.models; print('dgl' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, encoding="utf-8", timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


# --------------------------------------------------------------------------- moved modules


def test_the_api_page_and_the_changelog_name_every_moved_module():
    assert MOVED_IN_DOCS == MOVED
    changelog = (Path(REPO) / "CHANGELOG.md").read_text(encoding="utf-8")
    missing = [f"{old} -> {new}" for old, new in MOVED.items() if f"`{old}`" not in changelog or f"`{new}`" not in changelog]
    assert missing == [], f"CHANGELOG.md does not name these moves: {missing}"


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_warns_naming_the_new_one_and_gives_the_same_module(old):
    new = MOVED[old]
    module = _import(new)
    parent, _, child = old.rpartition(".")
    sys.modules.pop(old, None)  # the warning comes with the first import in a process
    if child in vars(sys.modules[parent]):
        delattr(sys.modules[parent], child)
    namespace = {}
    with pytest.warns(DeprecationWarning, match=re.escape(f"{old} moved to {new}")) as caught:
        exec(compile(f"import {old} as aliased", __file__, "exec"), namespace)
    assert namespace["aliased"] is module
    ours = [w for w in caught if f"{old} moved to" in str(w.message)]
    assert len(ours) == 1 and ours[0].filename == __file__, "one warning, naming the importing line (not importlib's)"
    assert module.__spec__.name == new, "the module keeps its own spec"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # imported once: no second warning
        for name in PUBLIC.get(new, []):
            exec(f"from {old} import {name} as got", namespace)
            assert namespace["got"] is getattr(module, name)


def test_a_submodule_of_a_moved_package_is_the_new_one_not_a_copy():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = importlib.import_module("dgl_zerocopy.cache.policy")
    assert old is importlib.import_module("dgl_zerocopy.store.cache.policy")


@pytest.mark.slow
def test_no_file_at_an_old_path_shadows_the_real_dgl():
    """The old ``dgl_zerocopy.dgl`` is an import hook's answer, not a ``dgl.py``: a script run from
    inside the package folder still imports DGL itself for ``import dgl``."""
    for old in MOVED:
        path = Path(REPO, *old.split("."))
        assert not path.with_suffix(".py").exists() and not path.is_dir(), f"{path} would shadow a module"
    pytest.importorskip("dgl")
    code = "import dgl_zerocopy.dgl, dgl; print(hasattr(dgl, 'DGLGraph'), dgl.__name__)"
    result = subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", "-c", code],
        cwd=Path(REPO, "dgl_zerocopy"),
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "dgl"]


def test_the_api_page_links_to_headings_that_exist():
    usage = (Path(REPO) / "docs" / "usage.md").read_text(encoding="utf-8")
    headings = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", usage, re.MULTILINE)}
    anchors = set(re.findall(r"usage\.md#([\w-]+)", API_MD.read_text(encoding="utf-8")))
    assert anchors and anchors <= headings, sorted(anchors - headings)
