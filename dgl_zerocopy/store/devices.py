"""Which device and backend a store gathers on: ``backend="auto"`` resolved, ``device`` checked."""

from __future__ import annotations

import warnings

import torch


def resolve_backend(backend: str, device=None) -> str:
    """``auto`` -> ``zerocopy`` where its kernel compiles for the CUDA device (``device``, else the
    current one), else ``cpu``: silently without CUDA or for ``device="cpu"``, with a warning that
    says why and how to fix it on a CUDA machine."""
    if backend != "auto":
        return backend
    if not torch.cuda.is_available() or (device is not None and torch.device(device).type != "cuda"):
        return "cpu"
    from .backends import zerocopy_problem

    problem = zerocopy_problem(resolve_device(device if device is not None else "cuda").index)
    if problem is None:
        return "zerocopy"
    warnings.warn(f"backend='auto' uses 'cpu', not 'zerocopy': {problem}", RuntimeWarning, stacklevel=3)
    return "cpu"


def resolve_device(device) -> torch.device:
    """``cpu`` or ``cuda:N`` (a bare ``cuda`` becomes the current device); CUDA must be available."""
    device = torch.device(device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"device {str(device)!r} needs CUDA, which is not available here; use device='cpu' (and backend='cpu' for a FeatureStore)")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    elif device.type != "cpu":
        raise ValueError(f"device must be 'cpu' or 'cuda[:N]', but got {str(device)!r}")
    return device


def resolve_store_device(device, backend: str) -> torch.device:
    """The device a store of ``backend`` gathers to: ``device``, else CUDA where available; checked."""
    device = resolve_device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    if backend in ("zerocopy", "gpu") and device.type != "cuda":
        raise RuntimeError(f"backend={backend!r} needs a CUDA device, but got {str(device)!r}; use backend='cpu' on machines without a GPU")
    return device
