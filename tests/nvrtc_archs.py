"""The architectures the NVRTC found here compiles for (none without one), and the tier each compile test
runs in: the fast tier compiles for one architecture, sm_90 (H100/H200, the GPUs this is checked on; NVRTC
12 and 13 both support it), the slow tier for the others (several seconds each)."""

from __future__ import annotations

import pytest

from dgl_zerocopy.cuda import nvrtc


def _found_archs() -> tuple[str, ...]:
    try:
        return nvrtc.default_archs()
    except OSError:  # not found (FileNotFoundError) or not loadable
        return ()


ARCHS = _found_archs()
requires_nvrtc = pytest.mark.skipif(not ARCHS, reason="no NVRTC found (torch's CUDA wheels bring it; or pip install dgl-zerocopy[cuda12] or [cuda13])")
FAST_ARCH = "sm_90" if "sm_90" in ARCHS else ARCHS[-1] if ARCHS else "no-nvrtc"
#: A test parameter an architecture, all but FAST_ARCH in the slow tier ("no-nvrtc" where none is found: the test skips).
ARCH_PARAMS = [a if a == FAST_ARCH else pytest.param(a, marks=pytest.mark.slow) for a in ARCHS or ["no-nvrtc"]]
