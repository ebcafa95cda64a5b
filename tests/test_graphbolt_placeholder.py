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

REPO = Path(__file__).resolve().parents[1]


def _run(code: str) -> str:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "DGLBACKEND": "pytorch", "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, encoding="utf-8",
                            env=env, cwd=REPO, timeout=240)
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


def test_the_real_graphbolt_loads_where_dgl_has_its_library():
    out = _run("""
        import _dgl_zerocopy_graphbolt as hook
        hook.install()
        import dgl
        print(hook.needs_placeholder(), hook.active(), type(dgl.graphbolt).__name__)
        print(callable(getattr(dgl.graphbolt, "expand_indptr", None)))
    """)
    assert out.split("\n")[:2] == ["False False module", "True"]


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
