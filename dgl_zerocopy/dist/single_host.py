"""Several DistDGL "machines" on one host: the two fixes DGL 2.1 needs for that.

DGL 2.1 assumes one server machine per host:

1. **Machine id.** A trainer finds its machine id as the first ``ip_config`` line whose address
   is one of the host's own (``dgl.distributed.rpc_client.get_local_machine_id``). With every
   line ``127.0.0.1``, every trainer believes it is machine 0, so all read partition 0's shared
   memory as their "local" partition and send no request for partition 0's rows.
2. **Shared-memory names.** A server publishes its partition (graph structure, partition book,
   feature tensors) in POSIX shared memory under names made from the graph and tensor names
   only (``/cora_node_inner_node``, ``node~_N~feat-kvdata-``): two servers on one host
   overwrite each other's segments.

:func:`install` fixes both in the calling process, before ``dgl.distributed.initialize``: the
machine id is the one given, and every shared-memory name DGL creates or opens is prefixed with
a per-machine tag. A server and the trainers of the same machine install the same tag, so they
still meet in shared memory; the machines of one job, and other jobs, stay apart.
:func:`remove_segments` unlinks what a job left behind (a killed server cannot unlink its own).

:func:`install_from_env` reads :data:`MACHINE_ID_ENV` and :data:`SHM_PREFIX_ENV`, which
``dgl-zerocopy launch-local`` sets for each process; on a real cluster (one machine per host)
neither is set and nothing is changed.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

log = logging.getLogger(__name__)

MACHINE_ID_ENV = "DGL_ZEROCOPY_MACHINE_ID"
SHM_PREFIX_ENV = "DGL_ZEROCOPY_SHM_PREFIX"
SHM_DIR = Path("/dev/shm")
_PREFIX_RE = re.compile(r"^[A-Za-z0-9_]{1,64}$")

_installed: dict[str, object] = {}  # what this process installed: {"machine_id": int, "prefix": str}


def install(machine_id: int, shm_prefix: str) -> None:
    """Make this process machine ``machine_id`` and prefix DGL's shared-memory names with ``shm_prefix``.

    Call before ``dgl.distributed.initialize``. Calling again with the same values does nothing;
    other values raise ``RuntimeError`` (DGL has opened segments under the first ones)."""
    if not isinstance(machine_id, int) or machine_id < 0:
        raise ValueError(f"machine_id must be a non-negative integer, but got {machine_id!r}")
    if not isinstance(shm_prefix, str) or not _PREFIX_RE.match(shm_prefix):
        raise ValueError(f"shm_prefix must be 1-64 letters, digits or underscores, but got {shm_prefix!r}")
    if _installed:
        if _installed == {"machine_id": machine_id, "prefix": shm_prefix}:
            return
        raise RuntimeError(f"single-host fixes already installed as {_installed}; one process is one machine")
    import dgl
    from dgl import heterograph_index, ndarray
    from dgl._ffi import ndarray as ffi_ndarray
    from dgl.distributed import rpc_client

    def rename(name: str) -> str:
        stripped = name.lstrip("/")
        return name[: len(name) - len(stripped)] + shm_prefix + stripped

    original_empty = ffi_ndarray.empty_shared_mem

    def empty_shared_mem(name, is_create, shape, dtype="float32"):
        return original_empty(rename(name), is_create, shape, dtype)

    # `from .._ffi.ndarray import empty_shared_mem` copied the function into several modules.
    for module in [m for k, m in list(__import__("sys").modules.items()) if k == "dgl" or k.startswith("dgl.")]:
        if getattr(module, "empty_shared_mem", None) is original_empty:
            module.empty_shared_mem = empty_shared_mem
    _wrap_first_arg(ndarray, "_CAPI_DGLExistSharedMemArray", rename)
    _wrap_first_arg(heterograph_index, "_CAPI_DGLHeteroCreateFromSharedMem", rename)
    copy_to_shm = heterograph_index._CAPI_DGLHeteroCopyToSharedMem
    heterograph_index._CAPI_DGLHeteroCopyToSharedMem = lambda g, name, *rest: copy_to_shm(g, rename(name), *rest)
    rpc_client.get_local_machine_id = lambda server_namebook: _checked_machine_id(machine_id, server_namebook)
    _installed.update(machine_id=machine_id, prefix=shm_prefix)
    log.debug("DGL %s: machine id %d, shared memory prefix %s", dgl.__version__, machine_id, shm_prefix)


def install_from_env() -> int | None:
    """:func:`install` with the values of :data:`MACHINE_ID_ENV` and :data:`SHM_PREFIX_ENV` when set
    (both or neither); returns the machine id installed, or None."""
    machine, prefix = os.environ.get(MACHINE_ID_ENV), os.environ.get(SHM_PREFIX_ENV)
    if machine is None and prefix is None:
        return None
    if machine is None or prefix is None:
        raise RuntimeError(
            f"set both {MACHINE_ID_ENV} and {SHM_PREFIX_ENV} (one machine of a single-host job), or neither; "
            f"got {MACHINE_ID_ENV}={machine!r}, {SHM_PREFIX_ENV}={prefix!r}"
        )
    try:
        machine_id = int(machine)
    except ValueError:
        raise RuntimeError(f"{MACHINE_ID_ENV} must be an integer, but got {machine!r}") from None
    install(machine_id, prefix)
    return machine_id


def installed() -> dict[str, object]:
    """``{"machine_id": ..., "prefix": ...}`` as installed in this process, or ``{}``."""
    return dict(_installed)


def segments(prefix: str) -> list[Path]:
    """The shared-memory segments whose names start with ``prefix`` (as :func:`install` makes them)."""
    if not _PREFIX_RE.match(prefix):
        raise ValueError(f"prefix must be 1-64 letters, digits or underscores, but got {prefix!r}")
    return sorted(SHM_DIR.glob(prefix + "*")) if SHM_DIR.is_dir() else []


def remove_segments(prefix: str) -> int:
    """Unlink every segment of :func:`segments`; returns how many were removed."""
    removed = 0
    for path in segments(prefix):
        try:
            path.unlink()
            removed += 1
        except FileNotFoundError:
            pass
    return removed


def _wrap_first_arg(module, name: str, rename) -> None:
    original = getattr(module, name)
    setattr(module, name, lambda first, *rest: original(rename(first), *rest))


def _checked_machine_id(machine_id: int, server_namebook: dict) -> int:
    machines = {entry[0] for entry in server_namebook.values()}
    if machine_id not in machines:
        raise RuntimeError(
            f"{MACHINE_ID_ENV}={machine_id} but the ip_config lists machines {sorted(machines)}; give each process the index of its ip_config line"
        )
    return machine_id
