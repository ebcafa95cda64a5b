"""A stand-in for a DistDGL server or trainer of tests/dist/test_faults_cluster.py: no DGL, starts in milliseconds.

``python fault_worker.py RESULTS MODE``, started by ``launch_local`` (its environment says the role
and the machine). Each process writes ``<role> <i>: started`` to stderr (what a job's processes say
must not reach the launcher's terminal when the job fails), creates a shared-memory segment under
its prefix, a server listens on its ip_config port, then it writes ``RESULTS/<role><i>`` (its pid).
On SIGTERM it does what DGL's handler does: prints DGL's two lines and takes 3 s to exit.
MODE ``run``: then it sleeps until killed, a trainer exits with 1 when the other trainer is gone (as
gloo fails when its peer's connection closes); ``finish``: a trainer warns on stderr and exits 0,
its server exits 0 when it sees ``RESULTS/done<i>``; ``deaf``: a server never listens.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path


def dgl_like_sigterm(signum, frame) -> None:
    sys.stderr.write("User pressed Ctrl+C, Exiting\nterminate called without an active exception\n")
    sys.stderr.flush()
    time.sleep(3)
    os._exit(1)


def main(results: Path, mode: str) -> None:
    role = "server" if os.environ.get("DGL_ROLE") == "server" else "trainer"
    index = int(os.environ["DGL_ZEROCOPY_MACHINE_ID"])
    signal.signal(signal.SIGTERM, dgl_like_sigterm)
    print(f"{role} {index}: started", file=sys.stderr, flush=True)
    if role == "server" and mode != "deaf":
        host, port = Path(os.environ["DGL_IP_CONFIG"]).read_text().splitlines()[index].split()
        listener = socket.create_server((host, int(port)))  # noqa: F841 - held open while the process lives
    Path("/dev/shm", os.environ["DGL_ZEROCOPY_SHM_PREFIX"] + role).write_bytes(b"segment")
    # Written whole, then renamed: a peer or the test polling for the file never reads it empty (int("")
    # raised in a trainer, which then exited 1 as if its peer were gone: a flaky test in CI).
    ready = results / f"{role}{index}"
    partial = ready.with_name(ready.name + ".partial")
    partial.write_text(str(os.getpid()))
    os.replace(partial, ready)
    if mode == "finish" and role == "trainer":
        print(f"trainer {index}: a warning", file=sys.stderr, flush=True)
        (results / f"done{index}").write_text("done")
        return
    peer = results / f"trainer{1 - index}"
    while not (mode == "finish" and (results / f"done{index}").exists()):
        if role == "trainer" and peer.exists() and not alive(int(peer.read_text())):
            sys.exit(1)
        time.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
