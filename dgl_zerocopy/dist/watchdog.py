"""Fail fast, with a clear error, when a DistDGL server is gone.

DGL 2.1's RPC client waits forever for a response from a server that died: its trainers hang.
A :class:`Watchdog` bounds every wait of the distributed loader: while a batch is awaited it checks,
every ``poll`` seconds, that the listed server processes (``dgl-zerocopy launch-local`` passes the
pids of the servers it started, :data:`SERVER_PIDS_ENV`) still exist, and that no single batch
takes longer than ``stall_timeout`` seconds (:data:`STALL_TIMEOUT_ENV`; on a cluster, where the
servers are remote, that timeout is the only signal). Either raises :class:`ServerLostError`.

After that error, this process's DGL client cannot go on: the lost server never answers, and
DGL's exit hook (``exit_client``, run at interpreter exit) waits for every trainer at a barrier.
:func:`exit_now` prints the message and ends the process at once (``os._exit``), skipping that hook.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from .reaper import process_exists

log = logging.getLogger(__name__)

SERVER_PIDS_ENV = "DGL_ZEROCOPY_SERVER_PIDS"
STALL_TIMEOUT_ENV = "DGL_ZEROCOPY_STALL_TIMEOUT"
DEFAULT_STALL_TIMEOUT = 600.0


class ServerLostError(RuntimeError):
    """A DistDGL server is gone (or silent for longer than the stall timeout): the job cannot go on."""


class Watchdog:
    """Checks made while a trainer waits on DistDGL (see the module docstring).

    ``server_pids``: processes on this host that must stay alive (machine index -> pid order);
    ``stall_timeout``: seconds one wait may last (None: no limit); ``poll``: seconds between checks."""

    def __init__(self, server_pids: Sequence[int] = (), stall_timeout: float | None = DEFAULT_STALL_TIMEOUT, poll: float = 0.2) -> None:
        if stall_timeout is not None and stall_timeout <= 0:
            raise ValueError(f"stall_timeout must be positive seconds or None, but got {stall_timeout!r}")
        if poll <= 0:
            raise ValueError(f"poll must be positive seconds, but got {poll!r}")
        self.server_pids = [int(p) for p in server_pids]
        self.stall_timeout = stall_timeout
        self.poll = poll

    @classmethod
    def from_env(cls, poll: float = 0.2) -> Watchdog:
        """Server pids from :data:`SERVER_PIDS_ENV` (comma-separated), the stall timeout from
        :data:`STALL_TIMEOUT_ENV` (seconds; default :data:`DEFAULT_STALL_TIMEOUT`, ``0``: none)."""
        pids_text = os.environ.get(SERVER_PIDS_ENV, "")
        timeout_text = os.environ.get(STALL_TIMEOUT_ENV)
        try:
            pids = [int(p) for p in pids_text.split(",") if p.strip()]
        except ValueError:
            raise ValueError(f"{SERVER_PIDS_ENV} must be comma-separated process ids, but got {pids_text!r}") from None
        try:
            timeout = DEFAULT_STALL_TIMEOUT if timeout_text is None else float(timeout_text)
        except ValueError:
            raise ValueError(f"{STALL_TIMEOUT_ENV} must be seconds (0: no limit), but got {timeout_text!r}") from None
        return cls(pids, timeout if timeout > 0 else None, poll)

    def check(self, waited: float, what: str) -> None:
        """Raise :class:`ServerLostError` if a listed server is gone or ``waited`` exceeds the stall timeout."""
        for machine, pid in enumerate(self.server_pids):
            if not _alive(pid):
                raise ServerLostError(
                    f"DistDGL server of machine {machine} (pid {pid}) is gone while waiting for {what}; "
                    f"its partition's rows and neighbours cannot be fetched, so this trainer stops"
                )
        if self.stall_timeout is not None and waited > self.stall_timeout:
            raise ServerLostError(
                f"no response from the DistDGL servers for {waited:.0f} s while waiting for {what} "
                f"(stall timeout {self.stall_timeout:.0f} s, {STALL_TIMEOUT_ENV}); a server may have died"
            )

    def wait(self, prefetcher, what: str):
        """``next(prefetcher)`` (a :class:`~dgl_zerocopy.loading.prefetch.Prefetcher`), checking every ``poll`` seconds."""
        start = time.monotonic()
        while True:
            try:
                return prefetcher.next(timeout=self.poll)
            except TimeoutError:
                self.check(time.monotonic() - start, what)


def _alive(pid: int) -> bool:
    if not process_exists(pid):
        return False
    try:  # a zombie (exited, not yet reaped by its parent) is gone too
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def exit_now(error: BaseException, code: int = 1) -> None:
    """Print ``error`` to stderr and end the process with ``code`` without running exit hooks
    (DGL's would wait for the lost server). Flushes stdout and stderr first."""
    print(f"dgl-zerocopy: error: {error}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
