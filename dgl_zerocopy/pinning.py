"""Pin an existing host range in place (``cudaHostRegister``) so GPU threads can read it over PCIe.

Never a second copy: the pages the caller already owns are page-locked and mapped into the
device's address space. Failures say why and what to do; after a failure nothing stays registered.
"""
from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)

# cudaHostRegister flags (CUDA runtime API).
_PORTABLE, _MAPPED, _READ_ONLY = 0x01, 0x02, 0x08


class PinnedRange:
    """A registered host range; :meth:`unpin` (idempotent) releases it.

    ``device_ptr`` is the address device code uses to read the range (equal to the host address
    under UVA, but asked of the driver rather than assumed).
    """

    def __init__(self, host_ptr: int, nbytes: int, read_only: bool = False) -> None:
        from cupy.cuda import runtime

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
            self.device_ptr = int(runtime.hostGetDevicePointer(host_ptr, 0))
        except runtime.CUDARuntimeError:
            self.unpin()
            raise
        log.debug("pinned %d bytes at 0x%x", nbytes, host_ptr)

    @property
    def pinned(self) -> bool:
        return self._registered

    def unpin(self) -> None:
        if not self._registered:
            return
        from cupy.cuda import runtime

        self._registered = False
        runtime.hostUnregister(self.host_ptr)
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
        return (f"cudaHostRegister could not pin the memory-mapped file ({size}); this OS/driver does "
                f"not allow pinning a file mapping: load the table into RAM (numpy.load without "
                f"mmap_mode) or use backend='cpu' ({text})")
    return f"cudaHostRegister failed to pin {size} ({text}); use backend='cpu' to gather on the CPU instead"
