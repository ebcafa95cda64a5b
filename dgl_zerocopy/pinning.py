"""Pin an existing host range in place (``cudaHostRegister``) so GPU threads can read it over PCIe.

Never a second copy: the pages the caller already owns are page-locked and mapped into the
device's address space. Failures say why and what to do; after a failure nothing stays registered.

Every CUDA runtime call goes through :func:`_runtime` (``cupy.cuda.runtime``), so the CPU tests can
stand in a fake with the same names, and ``tests/test_cuda_api_surface.py`` checks those names
against the installed CuPy.
"""
from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)

# cudaHostRegister flags (CUDA runtime API).
_PORTABLE, _MAPPED, _READ_ONLY = 0x01, 0x02, 0x08


def _runtime():
    from cupy.cuda import runtime

    return runtime


def read_only_register_supported(device_index: int) -> bool:
    """Whether ``device_index`` accepts ``cudaHostRegisterReadOnly``, the flag that pins a read-only
    mapping (a ``.npy`` opened with ``mmap_mode="r"``). Many x86 machines answer no."""
    runtime = _runtime()
    return bool(runtime.deviceGetAttribute(runtime.cudaDevAttrHostRegisterReadOnlySupported, int(device_index)))


class PinnedRange:
    """A registered host range; :meth:`unpin` (idempotent) releases it.

    ``device_ptr`` is the address device code uses to read the range (equal to the host address
    under UVA, but asked of the driver rather than assumed). ``read_only`` registers with
    ``cudaHostRegisterReadOnly``: the caller checks :func:`read_only_register_supported` first.
    """

    def __init__(self, host_ptr: int, nbytes: int, read_only: bool = False) -> None:
        runtime = _runtime()
        self.host_ptr, self.nbytes = host_ptr, nbytes
        self._registered = False
        if nbytes == 0:
            self.device_ptr = host_ptr
            return
        flags = _PORTABLE | _MAPPED | (_READ_ONLY if read_only else 0)
        try:
            runtime.hostRegister(host_ptr, nbytes, flags)
        except runtime.CUDARuntimeError as e:
            raise RuntimeError(_explain(e, nbytes, read_only)) from e
        self._registered = True
        try:
            # CuPy has no cudaHostGetDevicePointer binding; the pointer attributes carry the same address.
            self.device_ptr = int(runtime.pointerGetAttributes(host_ptr).devicePointer)
        except BaseException:
            self.unpin()  # nothing stays registered after a failure, so a retry can register again
            raise
        log.debug("pinned %d bytes at 0x%x", nbytes, host_ptr)

    @property
    def pinned(self) -> bool:
        return self._registered

    def unpin(self) -> None:
        if not self._registered:
            return
        self._registered = False
        _runtime().hostUnregister(self.host_ptr)
        log.debug("unpinned %d bytes at 0x%x", self.nbytes, self.host_ptr)


def _explain(error: Exception, nbytes: int, read_only: bool) -> str:
    text = str(error)
    size = f"{nbytes / 2**20:.1f} MiB"
    if "AlreadyRegistered" in text:
        return (f"cudaHostRegister failed: this host range ({size}) is already pinned, e.g. by another "
                f"FeatureStore over the same data; close that store first or share it ({text})")
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    if soft != resource.RLIM_INFINITY and soft < nbytes:
        return (f"cudaHostRegister failed to pin {size}: the locked-memory limit (RLIMIT_MEMLOCK) is "
                f"{soft / 2**20:.1f} MiB; raise it (`ulimit -l unlimited`, or memlock in "
                f"/etc/security/limits.conf) or use backend='cpu' ({text})")
    if read_only:
        return (f"cudaHostRegister could not pin the read-only table ({size}): load it with "
                f"numpy.load(path, mmap_mode='c') or into RAM (no mmap_mode), or use backend='cpu' ({text})")
    return (f"cudaHostRegister failed to pin {size} ({text}); if the table is a read-only view, pass a "
            f"writable one (numpy.load(path, mmap_mode='c')); or use backend='cpu' to gather on the CPU")
