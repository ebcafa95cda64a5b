"""``dgl-zerocopy info``: what this machine offers the zero-copy path."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import platform
import resource
import sys
import warnings

from .._extras import install_hint


def _version(module: str, extra: str | None = None) -> str:
    """``module``'s version; where it is missing and ``extra`` brings it, the command that installs it."""
    try:
        with warnings.catch_warnings():  # a report, not the place for a library's notices (torch_geometric's on torch.jit)
            warnings.simplefilter("ignore")
            return getattr(importlib.import_module(module), "__version__", "installed")
    except Exception as e:  # noqa: BLE001 - report whatever stops the import, e.g. a torch/dgl mismatch
        if extra is not None and isinstance(e, ModuleNotFoundError) and e.name == module:
            return f"not installed ({install_hint(extra)})"
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
    from ..cuda.nvrtc import find_nvrtc, nvrtc_version

    try:
        library = find_nvrtc()
        major, minor = nvrtc_version()
    except OSError as e:
        return f"not available ({e})"
    return f"{major}.{minor} at {library.path} (found by: {library.source})"


def _dgl() -> str:
    """DGL's version, and whether its graphbolt is the real one or dgl-zerocopy's placeholder."""
    version = _version("dgl", "dgl")
    if version.startswith(("not usable", "not installed")):
        return version
    try:
        import _dgl_zerocopy_graphbolt as hook
    except ImportError:  # the hook module is not installed: DGL imported by itself
        return f"{version} (graphbolt: native)"
    if hook.active():
        import torch

        torch_version = torch.__version__.split("+", maxsplit=1)[0]
        return f"{version} (graphbolt: placeholder, DGL ships no library for torch {torch_version})"
    if "dgl.graphbolt" in sys.modules:
        return f"{version} (graphbolt: native)"
    return f"{version} (graphbolt: not imported)"


def _cupy() -> str:
    """CuPy's version, its wheel and the CUDA runtime it loaded."""
    try:
        import cupy
    except ImportError:
        return "not installed (pip install dgl-zerocopy[cuda12] or dgl-zerocopy[cuda13], matching torch's CUDA)"
    except Exception as e:  # noqa: BLE001 - e.g. CuPy finding no CUDA libraries
        return f"not usable ({type(e).__name__}: {str(e).splitlines()[0][:80]})"
    # The wheel's name (cupy-cuda12x, cupy-cuda13x) says the CUDA major CuPy is built for.
    details = sorted({d.metadata["Name"] for d in importlib.metadata.distributions() if (d.metadata["Name"] or "").startswith("cupy-cuda")})
    try:
        runtime = int(cupy.cuda.get_local_runtime_version())  # needs no driver
        details.append(f"CUDA runtime {runtime // 1000}.{runtime % 1000 // 10}")
    except Exception as e:  # noqa: BLE001 - report what CuPy says instead of the runtime version
        details.append(f"CUDA runtime unknown: {type(e).__name__}")
    return f"{cupy.__version__} ({', '.join(details)})"


def _gpu_sampling(cuda_available: bool) -> str:
    """Whether ``GpuNeighborSampler(device="cuda")`` can sample here: a CUDA GPU, CuPy, and NVRTC
    compiling the sampling kernels (one instantiation of ``kernels/sample.cu``, for GPU 0's
    architecture: a fraction of a second)."""
    if not cuda_available:
        return "not available: no CUDA GPU (torch.cuda.is_available() is False); device='emulator' runs the same kernels on the CPU"
    try:
        import cupy  # noqa: F401
    except Exception as e:  # noqa: BLE001 - ImportError, or CuPy finding no CUDA libraries
        return f"not available: CuPy is not usable ({type(e).__name__}); pip install dgl-zerocopy[cuda12] or dgl-zerocopy[cuda13], matching torch's CUDA"
    import torch

    from ..cuda.sampling import instantiations
    from ..cuda.sampling.launcher import compile_check

    arch = "sm_%d%d" % torch.cuda.get_device_capability(0)
    try:
        compile_check(arch, (instantiations.count_name(),))
    except Exception as e:  # noqa: BLE001 - no NVRTC, an architecture it does not know, a compile error
        return f"not available: NVRTC cannot compile the sampling kernels for {arch} ({type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''})"
    return f"available (CUDA, CuPy, NVRTC compiles kernels/sample.cu for {arch}): GpuNeighborSampler(device='cuda')"


def environment_report() -> str:
    """A few aligned ``key: value`` lines."""
    cuda, gpus = _cuda()
    rows = [
        ("python", platform.python_version()),
        ("torch", _version("torch")),
        ("dgl", _dgl()),
        ("torch_geometric", _version("torch_geometric", "pyg")),
        ("cupy", _cupy()),
        ("numpy", _version("numpy")),
        ("CUDA", cuda),
        ("NVRTC", _nvrtc()),
        ("GPU", gpus),
        ("GPU sampling", _gpu_sampling(cuda.startswith("available"))),
        ("RLIMIT_MEMLOCK", _memlock()),
        ("CPU count", str(os.cpu_count())),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)} : {v}" for k, v in rows)
