"""Without DGL, as on a GPU machine's stock image (torch and CuPy, no DGL) and after ``pip install dgl-zerocopy``
(DGL is the ``[dgl]`` extra): the suite collects with no errors, the modules that need DGL are skipped, the rest
still runs, and the package imports: the core, the storage tier and the PyG front end; DGL's route and the
commands built on DGL say in one line which extra brings it.

DGL is hidden from a subprocess by a ``dgl`` package first on PYTHONPATH whose import fails as a
missing module does (``ModuleNotFoundError``: since pytest 9, ``pytest.importorskip`` skips on that
alone and lets any other ImportError through).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import REPO
from test_layout import FRAMEWORK, MODULES, PACKAGE, install_hint, needed_extra

# Modules whose every test needs DGL: each must be skipped as a whole, not fail to collect.
DGL_MODULES = ("test_dgl_plugin", "test_loader", "test_models", "test_nn", "test_ogb", "test_train", "test_accuracy")
# DGL-free tests that must stay collected, so that a module-level skip cannot creep over them.
DGL_FREE = (
    "tests/loading/test_blocks.py::test_constructor_checks_are_clear",
    "tests/loading/test_blocks.py::test_to_moves_every_tensor[cpu]",
    "tests/store/test_store_cpu.py::",
    "tests/cuda/test_cuda_api_surface.py::",
    "tests/cuda/test_launch.py::",
    "tests/training/test_cli.py::test_info",
)


@pytest.fixture(scope="module")
def env_without_dgl(tmp_path_factory):
    shadow = tmp_path_factory.mktemp("no-dgl")
    (shadow / "dgl").mkdir()
    (shadow / "dgl" / "__init__.py").write_text('raise ModuleNotFoundError("dgl hidden by the test", name="dgl")\n')
    path = os.pathsep.join(p for p in (str(shadow), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, "PYTHONIOENCODING": "utf-8"}


def _python(env, *args, timeout):
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, encoding="utf-8", timeout=timeout)


@pytest.mark.slow  # collects every test file; the package itself imports without DGL in the test below
def test_the_suite_collects_without_dgl(env_without_dgl):
    r = _python(env_without_dgl, "-m", "pytest", "--collect-only", "-q", "-rs", "-p", "no:cacheprovider", "tests", timeout=300)
    out = r.stdout + r.stderr
    tail = out[-6000:]
    assert r.returncode == 0, f"collection failed (exit {r.returncode}):\n{tail}"
    assert "ERROR collecting" not in out and not re.search(r"\d+ errors?\b", out), tail
    counted = re.search(r"^(\d+) tests? collected", out, re.MULTILINE)
    assert counted, f"no collection summary in the output:\n{tail}"
    assert int(counted.group(1)) >= 200, f"only {counted.group(1)} tests collected without DGL:\n{tail}"
    skipped = set(re.findall(r"^SKIPPED \[\d+\] tests/(?:\w+/)?(\w+)\.py:\d+: could not import 'dgl'", out, re.MULTILINE))
    assert set(DGL_MODULES) <= skipped, f"not skipped for want of DGL: {sorted(set(DGL_MODULES) - skipped)}\n{tail}"
    ids = r.stdout.splitlines()
    missing = [prefix for prefix in DGL_FREE if not any(line.startswith(prefix) for line in ids)]
    assert not missing, f"DGL-free tests not collected without DGL: {missing}"


#: Run with DGL hidden: the package imports (its core, the storage tier), a store gathers, ``--help`` works, and
#: ``train`` (on the DGL route) and DGL's route each print the one line that says which extra brings DGL.
_WITHOUT_DGL = """
import contextlib, io
try:
    import dgl
except ImportError as error:
    assert "hidden by the test" in str(error), error
else:
    raise SystemExit("dgl is still importable: " + dgl.__file__)
import torch
import dgl_zerocopy, dgl_zerocopy.data, dgl_zerocopy.sampling, dgl_zerocopy.store
from dgl_zerocopy import DataLoader, FeatureStore
from dgl_zerocopy.cli import main

table = torch.arange(40.0).reshape(10, 4)
with FeatureStore(table, backend="cpu", device="cpu") as store:
    assert torch.equal(store.gather(torch.tensor([7, 0, 7])), table[[7, 0, 7]])
shown = io.StringIO()
with contextlib.redirect_stdout(shown):
    try:
        main(["--help"])
    except SystemExit as done:
        assert done.code == 0, done.code
assert "train" in shown.getvalue(), shown.getvalue()
said = io.StringIO()
with contextlib.redirect_stderr(said), contextlib.redirect_stdout(io.StringIO()):  # stdout: the dataset's summary
    assert main(["train", "--dataset", "synthetic", "--num-nodes", "300", "--epochs", "1", "--no-progress"]) == 2
print(said.getvalue().strip())  # the error, one line, before any dataset is generated
for statement in ("from dgl_zerocopy.loading.dgl import ZeroCopyStorage, attach, with_features", "import dgl_zerocopy.dgl", "DataLoader(None, None, None)"):
    try:
        exec(statement)
    except ImportError as error:
        print(error)
    else:
        raise SystemExit(statement + " ran without DGL")
"""


def test_the_package_works_without_dgl_and_its_dgl_parts_say_what_to_install(env_without_dgl):
    r = _python(env_without_dgl, "-W", "ignore::DeprecationWarning", "-c", _WITHOUT_DGL, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    said = r.stdout.splitlines()
    missing = f"needs DGL, which is not installed: {install_hint('dgl')}"
    # "--frontend pyg", followed by the [pyg] extra's install command where PyG is missing too
    assert said[0].startswith(
        f"dgl-zerocopy: error: train on the DGL route (--frontend dgl, the default) {missing}, or train on the PyG route with --frontend pyg"
    ), said
    assert len(said) == 4 and all(line.endswith(missing) for line in said[1:]), said
    assert said[1].startswith(f"{PACKAGE}.loading.dgl (") and said[3].startswith(f"{PACKAGE}.DataLoader ("), said


#: Run with DGL hidden: import each module named in argv[1]; print the errors, and which frameworks of argv[2] import.
_IMPORT_EACH = """
import importlib, json, sys

failed = {}
for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except Exception as error:
        failed[name] = f"{type(error).__name__}: {error}"
installed = {}
for framework in json.loads(sys.argv[2]):
    try:
        importlib.import_module(framework)
        installed[framework] = True
    except ModuleNotFoundError:
        installed[framework] = False
print(json.dumps({"failed": failed, "installed": installed}))
"""


@pytest.mark.slow
def test_every_module_imports_without_dgl_but_the_dgl_route(env_without_dgl):
    """Every module of the package imports without DGL, the PyG front end included, except DGL's own route
    (``NEEDS_EXTRA`` of test_layout.py), which raises one ImportError naming the ``[dgl]`` extra. A module that
    starts needing DGL at import fails here, and so does a module listed as needing it that imports."""
    frameworks = sorted(set(FRAMEWORK.values()))
    r = _python(env_without_dgl, "-W", "ignore", "-c", _IMPORT_EACH, json.dumps(sorted(MODULES)), json.dumps(frameworks), timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["installed"]["dgl"] is False, "DGL is not hidden"
    # A module whose framework is missing must say so; the framework of the PyG front end may be missing too.
    expected = {name: extra for name in MODULES if (extra := needed_extra(name)) and not report["installed"][FRAMEWORK[extra]]}
    assert f"{PACKAGE}.loading.dgl" in expected
    failed = report["failed"]
    unexpected = {name: error for name, error in failed.items() if name not in expected}
    assert unexpected == {}, "modules that do not import without DGL:\n" + "\n".join(f"{n}: {e}" for n, e in sorted(unexpected.items()))
    for name, extra in sorted(expected.items()):
        error = failed.get(name, "it imported")
        assert error.split(":")[0] in ("ImportError", "MissingExtraError") and install_hint(extra) in error and "\n" not in error, f"{name}: {error}"


@pytest.mark.slow
def test_the_documented_imports_without_dgl(env_without_dgl):
    """test_layout.py's check of every import the docs show, without DGL: the DGL route's (docs/usage.md) raises
    the one line naming the ``[dgl]`` extra, and every other import works."""
    args = ("-m", "pytest", "-q", "-rf", "-p", "no:cacheprovider", "-k", "documented_import", "tests/package/test_layout.py")
    r = _python(env_without_dgl, *args, timeout=240)
    tail = (r.stdout + r.stderr)[-4000:]
    assert r.returncode == 0 and re.search(r"^\d+ passed", r.stdout, re.MULTILINE), tail
    assert "from dgl_zerocopy.loading.dgl import" in (REPO / "docs" / "usage.md").read_text(encoding="utf-8")
