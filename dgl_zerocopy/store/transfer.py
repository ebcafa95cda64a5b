"""Host-to-device copies that never make the host wait for the stream.

A copy from pageable memory makes the host wait for everything queued on the stream first (CUDA
stages it through a bounce buffer), which stalls a worker whose stream waits on the training
step. From pinned memory the copy is asynchronous, and torch's pinned allocator keeps the host
buffer until the copy has run.
"""

from __future__ import annotations

import torch


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` on ``device``, copied on the current stream without blocking the host.

    Already there: returned as is. On a CUDA device the result is allocated on the current
    stream; the caller hands it to other streams by the stream protocol (docs/architecture.md).
    """
    if tensor.device == device:
        return tensor
    if device.type != "cuda":
        return tensor.to(device)
    if not tensor.is_pinned():
        tensor = tensor.pin_memory()
    return tensor.to(device, non_blocking=True)
