"""Count what a piece of host code asks of the device: torch operations that launch work, our kernel
launches, and host synchronisations (values read back). A CPU test holds a sampled batch to a bound
with it, and the GPU check reports the same numbers beside the times.

:func:`count_ops` counts on the calling thread, inside its ``with`` block:

- **torch operations**, seen by a ``TorchDispatchMode``: every aten operation except views and
  allocations (``empty``, ``empty_like``, ...), which launch nothing;
- **our kernels**: each :class:`~dgl_zerocopy.cuda.sampling.launch.Step` that the GPU launcher or
  the CPU emulator runs (:func:`observe_launch`; grids of size 0 launch nothing and are not counted);
- **host synchronisations**: ``Tensor.tolist``, ``item``, ``cpu``, ``numpy``, ``int()``, ``bool()``,
  ``float()``, ``index()`` of a tensor, and the aten operations whose output size depends on the
  data (``nonzero``, ``masked_select``, ``unique``, ``repeat_interleave`` without ``output_size``).

With CPU tensors standing in for device ones (the emulator backend), the counts are those that the
same code issues on a GPU: the host logic and the kernels' grids are the GPU launcher's. A read of
a host tensor counts as a synchronisation too (on the CPU the two cannot be told apart), so a bound
states what the code reads, host or device. Not thread-safe across counters: one at a time.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["OpCount", "count_ops", "host_side", "observe_launch"]

#: aten operations that allocate or describe a tensor and launch no device work.
FREE_OPS = frozenset(
    {"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided", "is_pinned", "lift_fresh", "detach", "alias", "set_", "resize_", "_pin_memory"}
)
#: aten operations whose output size is read back from the device (a host synchronisation on CUDA).
SYNC_OPS = frozenset({"_local_scalar_dense", "nonzero", "masked_select", "_unique", "_unique2", "unique_dim", "unique_consecutive", "is_nonzero"})
#: ``Tensor`` methods that read values back to the host.
READ_BACKS = ("tolist", "item", "cpu", "numpy", "__int__", "__bool__", "__float__", "__index__")

_active: list[OpCount] = []
_lock = threading.Lock()
_paused = threading.local()


@dataclass
class OpCount:
    """What the code inside one :func:`count_ops` asked of the device, by name.

    Attributes:
        torch_ops: aten operation name -> calls that launch work.
        kernels: our kernels' name expressions -> launches.
        syncs: what read back (a ``Tensor`` method or an aten operation) -> calls.
    """

    torch_ops: Counter = field(default_factory=Counter)
    kernels: Counter = field(default_factory=Counter)
    syncs: Counter = field(default_factory=Counter)

    @property
    def launches(self) -> int:
        """Device operations issued: torch operations plus our kernels."""
        return sum(self.torch_ops.values()) + sum(self.kernels.values())

    @property
    def host_syncs(self) -> int:
        """Values read back to the host."""
        return sum(self.syncs.values())

    def summary(self) -> str:
        """One line: the totals, then the most frequent operations."""
        top = (self.torch_ops + self.kernels).most_common(6)
        return f"{self.launches} launches, {self.host_syncs} host syncs ({dict(self.syncs)}); most: {top}"


def observe_launch(kernel: str) -> None:
    """Called by a runner for each kernel it launches (``kernel``: the name expression)."""
    if getattr(_paused, "depth", 0):
        return
    for counter in _active:
        counter.kernels[kernel] += 1


@contextlib.contextmanager
def host_side() -> Iterator[None]:
    """Leave the block's operations out of any count: host work on host tensors (e.g. an RNG key drawn
    from torch's CPU generator), which the CPU stand-in could not tell from device work."""
    _paused.depth = getattr(_paused, "depth", 0) + 1
    try:
        yield
    finally:
        _paused.depth -= 1


def _counting(reading: list[int]) -> bool:
    return not reading[0] and not getattr(_paused, "depth", 0)


class _Dispatch(TorchDispatchMode):
    def __init__(self, counter: OpCount, reading: list[int]) -> None:
        super().__init__()
        self.counter, self.reading = counter, reading

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        name = func.overloadpacket.__name__
        if name in SYNC_OPS or (name == "repeat_interleave" and (kwargs or {}).get("output_size") is None and len(args) < 3):
            if _counting(self.reading):
                self.counter.syncs[name] += 1
                if name not in ("_local_scalar_dense", "is_nonzero"):
                    self.counter.torch_ops[name] += 1
        elif _counting(self.reading) and not (func.is_view or name in FREE_OPS):
            self.counter.torch_ops[name] += 1
        return func(*args, **(kwargs or {}))


def _read_back(original: Callable, method: str, counter: OpCount, reading: list[int]) -> Callable:
    def read(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if _counting(reading):
            counter.syncs[method.strip("_")] += 1
        reading[0] += 1
        try:
            return original(self, *args, **kwargs)
        finally:
            reading[0] -= 1

    return read


@contextlib.contextmanager
def count_ops() -> Iterator[OpCount]:
    """Count the device operations and host synchronisations of the calling thread in the block.

    Returns:
        The :class:`OpCount`, filled as the block runs.

    Raises:
        RuntimeError: another :func:`count_ops` is open (they patch ``torch.Tensor``'s read-backs).
    """
    counter, reading = OpCount(), [0]
    with _lock:
        if _active:
            raise RuntimeError("count_ops() is already counting; close the other block first (counters patch torch.Tensor)")
        _active.append(counter)
    originals = {method: getattr(torch.Tensor, method) for method in READ_BACKS}
    try:
        for method, original in originals.items():
            setattr(torch.Tensor, method, _read_back(original, method, counter, reading))
        with _Dispatch(counter, reading):
            yield counter
    finally:
        for method, original in originals.items():
            setattr(torch.Tensor, method, original)
        with _lock:
            _active.remove(counter)
