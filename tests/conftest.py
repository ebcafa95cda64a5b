"""Shared fixtures: a small generated graph, a private dataset cache, the `cuda` device gate, one torch
thread, a table saved as each source a store opens, and whether an address range is mapped. Running
scripts, the command line and the benchmarks: script_runs.py."""

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


def cupy_on_a_gpu():
    """CuPy, for a test module that runs on a real GPU; called at the module's top, it skips the whole
    module unless torch sees a CUDA GPU, CuPy imports, and CuPy sees a device."""
    if not CUDA:
        pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)", allow_module_level=True)
    cupy = pytest.importorskip("cupy", reason="needs CuPy (pip package cupy-cuda12x or cupy-cuda13x)")
    if cupy.cuda.runtime.getDeviceCount() == 0:
        pytest.skip("CuPy sees no CUDA device", allow_module_level=True)
    return cupy


def pytest_unconfigure(config) -> None:
    if _OWN_CACHE is not None:
        shutil.rmtree(_OWN_CACHE, ignore_errors=True)


def devices() -> list:
    """``cpu`` always, ``cuda`` when present (``cuda`` params carry the gpu marker)."""
    return ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, requires_cuda])]


@pytest.fixture(scope="session")
def small_dataset():
    return load_dataset("synthetic", synthetic=SMALL)


@pytest.fixture
def one_thread():
    """One torch thread for the test, restored after: on shared cores more threads only wait for each
    other, and a subprocess run beside it gets one too."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def saved_table(tmp_path: Path, data, source: str):
    """``data`` (a float32 NumPy table) saved under ``tmp_path`` as the ``source`` a store opens: ``"path"``
    (the .npy file's path), ``"compressed"`` (an fp16 folder's path) or a ``np.load`` mmap_mode (``"r"``,
    ``"r+"``, ``"c"``: the file mapped so). Returns what to open, the file the store maps, and the rows
    a gather must give (fp16's rounding for the compressed one)."""
    import numpy as np

    from dgl_zerocopy import compress

    np.save(tmp_path / "f.npy", data)
    if source == "compressed":
        compress(tmp_path / "f.npy", "fp16", out=tmp_path / "f.fp16")
        path, want = tmp_path / "f.fp16" / "codes.npy", torch.from_numpy(data).half().float()
    else:
        path, want = tmp_path / "f.npy", torch.from_numpy(data)
    named = {"path": tmp_path / "f.npy", "compressed": tmp_path / "f.fp16"}.get(source)
    return (named if named is not None else np.load(path, mmap_mode=source)), path, want


def mapped(start: int, end: int) -> bool:
    """Whether any byte of ``[start, end)`` is mapped in this process (/proc/self/maps)."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        low, high = (int(x, 16) for x in line.split()[0].split("-"))
        if low < end and start < high:
            return True
    return False
