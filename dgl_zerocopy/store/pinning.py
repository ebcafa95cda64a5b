"""Pin an existing host range in place (``cudaHostRegister``) so GPU threads can read it over PCIe.

Never a second copy: the pages the caller already owns are page-locked and mapped into the
device's address space. Failures say why and what to do; after a failure nothing stays registered.

A range that is page-locked already (``tensor.pin_memory()``, ``cudaHostAlloc``, or registered by
someone else) is used as it is: the runtime says so (``cudaPointerGetAttributes`` reports host
memory), and its device address is asked of the runtime; this module never registers it and never
unregisters it. Whoever pinned it keeps it pinned (and alive) for as long as it is read.

Every CUDA runtime call goes through :func:`_runtime` (``cupy.cuda.runtime``), so the CPU tests can
stand in a fake with the same names, and ``tests/cuda/test_cuda_api_surface.py`` checks those names
against the installed CuPy.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from .host_files import human_size

log = logging.getLogger(__name__)

# cudaHostRegister flags (CUDA runtime API).
_PORTABLE, _MAPPED, _READ_ONLY = 0x01, 0x02, 0x08

# The ranges this process registered and has not unregistered yet: host address -> bytes. A range
# that overlaps one of them belongs to another PinnedRange (another FeatureStore), which will
# unregister it on close: it must not be borrowed, only refused.
_registered: dict[int, int] = {}
_registered_lock = threading.Lock()

_MEMINFO = "/proc/meminfo"


def _runtime():
    from cupy.cuda import runtime

    return runtime


def read_only_register_supported(device_index: int) -> bool:
    """Whether ``device_index`` accepts ``cudaHostRegisterReadOnly``, the flag that pins a read-only
    mapping (a ``.npy`` opened with ``mmap_mode="r"``). Many x86 machines answer no."""
    runtime = _runtime()
    return bool(runtime.deviceGetAttribute(runtime.cudaDevAttrHostRegisterReadOnlySupported, int(device_index)))


class PinnedRange:
    """A host range readable by the device; :meth:`unpin` (idempotent) releases what this object pinned.

    ``device_ptr`` is the address device code uses to read the range (equal to the host address
    under UVA, but asked of the driver rather than assumed). ``read_only`` registers with
    ``cudaHostRegisterReadOnly``: the caller checks :func:`read_only_register_supported` first.

    ``borrowed`` is True when the range was page-locked already (``tensor.pin_memory()``,
    ``cudaHostAlloc``): nothing is registered then, and :meth:`unpin` leaves it pinned.
    """

    def __init__(self, host_ptr: int, nbytes: int, read_only: bool = False) -> None:
        runtime = _runtime()
        self.host_ptr, self.nbytes = host_ptr, nbytes
        self._registered = False
        self.borrowed = False
        if nbytes == 0:
            self.device_ptr = host_ptr
            return
        if _pinned_already(runtime, host_ptr, nbytes):
            self.device_ptr = _device_pointer(runtime, host_ptr)
            self.borrowed = True
            log.debug("using %d bytes at 0x%x as they are: page-locked already", nbytes, host_ptr)
            return
        flags = _PORTABLE | _MAPPED | (_READ_ONLY if read_only else 0)
        try:
            runtime.hostRegister(host_ptr, nbytes, flags)
        except runtime.CUDARuntimeError as e:
            raise RuntimeError(_explain(e, nbytes, read_only)) from e
        self._registered = True
        with _registered_lock:
            _registered[host_ptr] = nbytes
        try:
            self.device_ptr = _device_pointer(runtime, host_ptr)
        except BaseException:
            self.unpin()  # nothing stays registered after a failure, so a retry can register again
            raise
        log.debug("pinned %d bytes at 0x%x", nbytes, host_ptr)

    @property
    def pinned(self) -> bool:
        """True while the range is registered by this object (False for a borrowed range)."""
        return self._registered

    def unpin(self) -> None:
        if not self._registered:
            return
        self._registered = False
        with _registered_lock:
            _registered.pop(self.host_ptr, None)
        _runtime().hostUnregister(self.host_ptr)
        log.debug("unpinned %d bytes at 0x%x", self.nbytes, self.host_ptr)


def _pinned_already(runtime, host_ptr: int, nbytes: int) -> bool:
    """Whether ``[host_ptr, host_ptr + nbytes)`` is page-locked by someone else already, asked of the
    runtime for its first and last byte. Raises ``RuntimeError`` when the range is pinned by
    another PinnedRange of this process, or when only one end of it is page-locked."""
    with _registered_lock:
        ours = [(start, size) for start, size in _registered.items() if start < host_ptr + nbytes and host_ptr < start + size]
    if ours:
        raise RuntimeError(
            f"this host range ({human_size(nbytes)} at 0x{host_ptr:x}) is already pinned by another FeatureStore over the "
            f"same data (it registered {human_size(ours[0][1])} at 0x{ours[0][0]:x}); close that store first, or share it "
            f"instead of making a second one"
        )
    first, last = _is_host_memory(runtime, host_ptr), _is_host_memory(runtime, host_ptr + nbytes - 1)
    if first != last:
        raise RuntimeError(
            f"only part of this host range ({human_size(nbytes)} at 0x{host_ptr:x}) is page-locked (its "
            f"{'first' if first else 'last'} byte is, its {'last' if first else 'first'} is not): it cannot be used "
            f"as it is nor registered. Pass the whole pinned tensor, or a table in ordinary (pageable) memory"
        )
    return first


def _is_host_memory(runtime, address: int) -> bool:
    """True when the runtime reports ``address`` as page-locked host memory (``cudaMemoryTypeHost``).
    Ordinary pageable memory is ``cudaMemoryTypeUnregistered`` (an error before CUDA 11)."""
    try:
        return runtime.pointerGetAttributes(address).type == runtime.memoryTypeHost
    except runtime.CUDARuntimeError:
        return False


def _device_pointer(runtime, host_ptr: int) -> int:
    # CuPy has no cudaHostGetDevicePointer binding; the pointer attributes carry the same address.
    device_ptr = int(runtime.pointerGetAttributes(host_ptr).devicePointer)
    if device_ptr == 0:
        raise RuntimeError(
            f"host memory at 0x{host_ptr:x} is page-locked but not mapped into the device's address "
            "space (cudaHostAlloc without cudaHostAllocMapped on a system without unified addressing); "
            "pass a table in ordinary memory, which is registered mapped"
        )
    return device_ptr


def _explain(error: Exception, nbytes: int, read_only: bool) -> str:
    text = str(error)
    size = f"{human_size(nbytes)} ({nbytes} bytes)"
    if "AlreadyRegistered" in text:
        return (
            f"cudaHostRegister failed: part of this host range ({size}) is already pinned, e.g. by a "
            f"FeatureStore over an overlapping slice of the same data; close that store first or share it ({text})"
        )
    if "MemoryAllocation" in text:
        return (
            f"cudaHostRegister could not page-lock {size}: the host could not lock that much memory "
            f"(the driver locks the pages itself, so `ulimit -l` (RLIMIT_MEMLOCK) is not what limits them). "
            f"{_host_memory()}. The pages stay resident while the table is pinned, so they must fit beside "
            f"everything else; free host memory, make the table smaller (compression='fp16' or 'int8' "
            f"halves or quarters it), or use backend='cpu' ({text})"
        )
    if read_only:
        return (
            f"cudaHostRegister could not pin the read-only table ({size}): load it with "
            f"numpy.load(path, mmap_mode='c') or into RAM (no mmap_mode), or use backend='cpu' ({text})"
        )
    return (
        f"cudaHostRegister failed to pin {size} ({text}). {_host_memory()}. If the table is a read-only "
        f"view, pass a writable one (numpy.load(path, mmap_mode='c')); or use backend='cpu' to gather on the CPU"
    )


def _host_memory() -> str:
    """What the kernel reports of host memory (``/proc/meminfo``), and the cgroup's limit when one is set."""
    info = {}
    try:
        with open(_MEMINFO) as f:
            for line in f:
                key, _, value = line.partition(":")
                info[key] = int(value.split()[0]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return "Free host memory is unknown here (no /proc/meminfo)"
    text = f"Host memory: {human_size(info.get('MemAvailable', info.get('MemFree', 0)))} available of {human_size(info.get('MemTotal', 0))} (/proc/meminfo)"
    limit = _cgroup_room()
    if limit is not None:
        text += f"; this process's cgroup may use {human_size(limit[0])} more of its {human_size(limit[1])} limit"
    return text


def _cgroup_room(proc_cgroup: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> tuple[int, int] | None:
    """(bytes left, limit) under this process's cgroup memory limit (v2 ``memory.max``, or v1
    ``memory.limit_in_bytes``), or None without a limit or where it cannot be read."""
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return None
    candidates = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # cgroup v2
            candidates += [(Path(root, path.lstrip("/")), "memory.max", "memory.current")]
        elif "memory" in controllers.split(","):  # cgroup v1; in a container the root is the container's own
            for folder in (Path(root, "memory", path.lstrip("/")), Path(root, "memory")):
                candidates.append((folder, "memory.limit_in_bytes", "memory.usage_in_bytes"))
    for folder, limit_file, usage_file in candidates:
        try:
            limit, usage = ((folder / name).read_text().strip() for name in (limit_file, usage_file))
            limit, usage = (2**63 if limit == "max" else int(limit)), int(usage)
        except (OSError, ValueError):
            continue
        if limit >= 2**62:  # "max" (v2) or v1's page-rounded LLONG_MAX: no limit
            return None
        return max(0, limit - usage), limit
    return None
