"""Shared fixtures: a small generated graph, a private dataset cache, and the `cuda` device gate."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

# Generated datasets go to a private cache, for subprocesses too; set before the package is imported.
# A cache made here is removed when the session ends (pytest_unconfigure); one given by the caller is kept.
_OWN_CACHE = None if "DGL_ZEROCOPY_CACHE" in os.environ else tempfile.mkdtemp(prefix="dgl-zerocopy-test-cache-")
if _OWN_CACHE is not None:
    os.environ["DGL_ZEROCOPY_CACHE"] = _OWN_CACHE
os.environ.setdefault("DGLBACKEND", "pytorch")

import torch  # noqa: E402

from dgl_zerocopy.data import SyntheticSpec, load_dataset  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

# Test modules share helpers across layers (test_ogb's raw OGB files, test_pinning's stand-in CUDA runtime,
# test_blocks' sampled blocks): every layer's folder is importable, whichever file pytest is asked to run.
sys.path[1:1] = [str(p) for p in sorted(REPO.joinpath("tests").iterdir()) if p.is_dir() and p.name.isidentifier() and str(p) not in sys.path]

SMALL = SyntheticSpec(num_nodes=3000, avg_degree=10, feat_dim=16, num_classes=5, noise=1.5, seed=0)

CUDA = torch.cuda.is_available()
requires_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")


def pytest_unconfigure(config) -> None:
    if _OWN_CACHE is not None:
        shutil.rmtree(_OWN_CACHE, ignore_errors=True)


def devices() -> list:
    """``cpu`` always, ``cuda`` when present (``cuda`` params carry the gpu marker)."""
    return ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, requires_cuda])]


@pytest.fixture(scope="session")
def small_dataset():
    return load_dataset("synthetic", synthetic=SMALL)
