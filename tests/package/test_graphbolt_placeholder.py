"""The graphbolt placeholder: off where DGL has its library for this torch, on where it does not.

Each case runs in a fresh interpreter (``import dgl`` can happen once per process). The "missing"
case is made by pointing the hook at a torch version DGL has no library for.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("dgl")

REPO = Path(__file__).resolve().parents[2]


def _run(code: str) -> str:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "DGLBACKEND": "pytorch", "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, encoding="utf-8", env=env, cwd=REPO, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_installing_the_hook_imports_nothing_heavy():
    out = _run("""
        import sys
        import _dgl_zerocopy_graphbolt as hook
        hook.install(); hook.install()
        print(sorted(m for m in ("torch", "dgl", "numpy") if m in sys.modules))
        print(sum(type(f).__name__ == "_Finder" for f in sys.meta_path))
    """)
    assert out.split("\n")[:2] == ["[]", "1"]


def test_the_hook_is_off_where_dgl_has_the_library_and_on_where_it_has_not():
    """Decided by the library file for the running torch alone (here without importing torch or dgl)."""
    out = _run("""
        import sys
        import _dgl_zerocopy_graphbolt as hook
        finder = hook._Finder()
        hook._torch_version = lambda: "2.2.1"  # DGL 2.1 ships libgraphbolt_pytorch_2.2.1.so
        print(hook.needs_placeholder(), finder.find_spec("dgl.graphbolt") is None, hook.library_path().endswith("_2.2.1.so"))
        hook._torch_version = lambda: "9.9.9"
        print(hook.needs_placeholder(), finder.find_spec("dgl.graphbolt").origin, finder.find_spec("dgl.other") is None)
        print(sorted(m for m in ("torch", "dgl") if m in sys.modules))
    """)
    assert out.split("\n")[:3] == ["False True True", "True dgl-zerocopy placeholder True", "[]"]


@pytest.mark.slow
def test_the_real_graphbolt_or_the_placeholder_loads_as_the_library_says():
    """Where DGL has the library for this torch (the oldest stack, torch 2.2.1) the real graphbolt loads;
    where it has not (the newest stack) the placeholder does. Each CI stack runs one of the two branches."""
    out = _run("""
        import _dgl_zerocopy_graphbolt as hook
        hook.install()
        import dgl
        print(hook.needs_placeholder(), hook.active(), type(dgl.graphbolt).__name__)
        print(callable(getattr(dgl.graphbolt, "expand_indptr", None)))
    """)
    if out.startswith("False"):
        assert out.split("\n")[:2] == ["False False module", "True"]
    else:
        assert out.split("\n")[:2] == ["True True _Placeholder", "False"]


@pytest.mark.slow
def test_the_placeholder_stands_in_where_the_library_is_missing():
    out = _run("""
        import _dgl_zerocopy_graphbolt as hook
        hook._torch_version = lambda: "9.9.9"  # a torch DGL 2.1 ships no graphbolt library for
        hook.install()
        import dgl, torch
        print(hook.needs_placeholder(), hook.active())
        g = dgl.graph((torch.tensor([0, 1, 2, 3]), torch.tensor([1, 2, 3, 0])))
        loader = dgl.dataloading.DataLoader(g, torch.arange(4), dgl.dataloading.NeighborSampler([2]), batch_size=2)
        print(sum(len(out) for _, out, _ in loader))
        print(isinstance(g, dgl.graphbolt.FusedCSCSamplingGraph))
        try:
            dgl.graphbolt.expand_indptr
        except AttributeError as error:
            print("AttributeError:", error)
    """)
    lines = out.split("\n")
    assert lines[:3] == ["True True", "4", "False"]
    assert "torch 2.0.0-2.2.1" in lines[3] and "torch 9.9.9" in lines[3] and "placeholder" in lines[3]


def test_importing_the_package_installs_the_hook():
    out = _run("""
        import sys
        import dgl_zerocopy
        print(any(type(f).__name__ == "_Finder" for f in sys.meta_path))
    """)
    assert out.startswith("True")


def _installed() -> bool:
    import importlib.metadata

    try:
        importlib.metadata.distribution("dgl-zerocopy")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.slow
@pytest.mark.skipif(not _installed(), reason="dgl-zerocopy is not installed (make install); its .pth file is not in site-packages")
def test_a_script_whose_first_line_is_import_dgl_works():
    """The installed ``.pth`` file puts the hook in place at start-up, without importing torch or dgl;
    then ``import dgl`` works with the real graphbolt (torch <= 2.2.1) or the placeholder (newer)."""
    code = textwrap.dedent("""
        import sys
        print(any(type(f).__name__ == "_Finder" for f in sys.meta_path), sorted(m for m in ("torch", "dgl") if m in sys.modules))
        import dgl
        import _dgl_zerocopy_graphbolt as hook
        print(hook.needs_placeholder() == hook.active(), hasattr(dgl.dataloading, "DataLoader"))
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # only site-packages, as for a user's script
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, encoding="utf-8", env=env, cwd="/", timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.split("\n")[:2] == ["True []", "True True"]


@pytest.mark.slow
def test_a_benchmark_imports_dgl_first_without_the_pth():
    """A checkout on PYTHONPATH, as ``make gpu-check`` runs the benchmarks on a GPU image: no ``.pth``
    is read there, so ``bench/common.py`` (which every benchmark imports) installs the hook itself,
    and a benchmark may ``import dgl`` before ``dgl_zerocopy`` (bench/tiers/storage.py does). Where DGL has
    no graphbolt library for this torch (made so here), that import failed on the first GPU run."""
    out = _run(f"""
        import sys
        import _dgl_zerocopy_graphbolt as hook
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, hook._Finder)]  # as without the .pth
        hook._torch_version = lambda: "9.9.9"  # a torch DGL 2.1 ships no graphbolt library for
        sys.path.insert(0, {str(REPO / "bench")!r})
        import common
        print(sum(isinstance(f, hook._Finder) for f in sys.meta_path))
        import dgl
        print(hook.active(), hasattr(dgl.dataloading, "DataLoader"))
    """)
    assert out.split("\n")[:2] == ["1", "True True"]
