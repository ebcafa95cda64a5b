"""``dgl-zerocopy info``: what this machine offers the zero-copy path."""
from __future__ import annotations

import importlib
import os
import platform
import resource


def _version(module: str) -> str:
    try:
        return getattr(importlib.import_module(module), "__version__", "installed")
    except Exception as e:  # noqa: BLE001 - report whatever stops the import, e.g. a torch/dgl mismatch
        return f"not usable ({type(e).__name__}: {str(e).splitlines()[0][:80]})"


def _memlock() -> str:
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    fmt = lambda v: "unlimited" if v == resource.RLIM_INFINITY else f"{v / 2**20:.1f} MiB"  # noqa: E731
    return f"soft {fmt(soft)}, hard {fmt(hard)}"


def _cuda() -> tuple[str, str]:
    import torch

    if not torch.cuda.is_available():
        return "not available", "none"
    names = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    return f"available (runtime {torch.version.cuda}, {torch.cuda.device_count()} device(s))", names


def _nvrtc() -> str:
    from .kernels import nvrtc_version

    try:
        major, minor = nvrtc_version()
        return f"available ({major}.{minor})"
    except OSError as e:
        return f"not available ({e})"


def environment_report() -> str:
    """A few aligned ``key: value`` lines."""
    cuda, gpus = _cuda()
    rows = [
        ("python", platform.python_version()),
        ("torch", _version("torch")),
        ("dgl", _version("dgl")),
        ("cupy", _version("cupy")),
        ("numpy", _version("numpy")),
        ("CUDA", cuda),
        ("NVRTC", _nvrtc()),
        ("GPU", gpus),
        ("RLIMIT_MEMLOCK", _memlock()),
        ("CPU count", str(os.cpu_count())),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)} : {v}" for k, v in rows)
