"""Without DGL, as on a GPU machine's stock image (torch and CuPy, no DGL): the suite collects with
no errors, the modules that need DGL are skipped, the rest still runs, and the package imports.

DGL is hidden from a subprocess by a ``dgl`` package first on PYTHONPATH whose import fails as a
missing module does (``ModuleNotFoundError``: since pytest 9, ``pytest.importorskip`` skips on that
alone and lets any other ImportError through).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from conftest import REPO

# Modules whose every test needs DGL: each must be skipped as a whole, not fail to collect.
DGL_MODULES = ("test_dgl_plugin", "test_loader", "test_models", "test_nn", "test_ogb", "test_train", "test_accuracy")
# DGL-free tests that must stay collected, so that a module-level skip cannot creep over them.
DGL_FREE = (
    "tests/test_blocks.py::test_constructor_checks_are_clear",
    "tests/test_blocks.py::test_to_moves_every_tensor[cpu]",
    "tests/test_store_cpu.py::",
    "tests/test_cuda_api_surface.py::",
    "tests/test_launch.py::",
    "tests/test_cli.py::test_info",
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
    skipped = set(re.findall(r"^SKIPPED \[\d+\] tests/(\w+)\.py:\d+: could not import 'dgl'", out, re.MULTILINE))
    assert set(DGL_MODULES) <= skipped, f"not skipped for want of DGL: {sorted(set(DGL_MODULES) - skipped)}\n{tail}"
    ids = r.stdout.splitlines()
    missing = [prefix for prefix in DGL_FREE if not any(line.startswith(prefix) for line in ids)]
    assert not missing, f"DGL-free tests not collected without DGL: {missing}"


def test_the_package_imports_without_dgl(env_without_dgl):
    code = (
        "try:\n"
        "    import dgl\n"
        "except ImportError as error:\n"
        "    assert 'hidden by the test' in str(error), error\n"
        "else:\n"
        "    raise SystemExit('dgl is still importable: ' + dgl.__file__)\n"
        "import torch\n"
        "import dgl_zerocopy\n"
        "from dgl_zerocopy import DataLoader, FeatureStore\n"
        "table = torch.arange(12.0).reshape(4, 3)\n"
        "with FeatureStore(table, backend='cpu', device='cpu') as store:\n"
        "    assert torch.equal(store.gather(torch.tensor([2, 0])), table[[2, 0]])\n"
        "print('ok')\n"
    )
    r = _python(env_without_dgl, "-c", code, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
