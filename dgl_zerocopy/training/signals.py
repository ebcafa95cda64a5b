"""SIGTERM and SIGHUP unwound as Ctrl-C is, so that a command's ``finally`` clauses run (DDP ranks stopped,
their folder removed) where the default action would end the process on the spot."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager


class Terminated(KeyboardInterrupt):
    """A SIGTERM or SIGHUP, raised where the program is, so that it unwinds as from Ctrl-C."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def terminate(signum: int, frame) -> None:
    signal.signal(signum, signal.SIG_IGN)  # a second one must not cut the clean-up short
    raise Terminated(signum)


@contextmanager
def signals_unwind():
    """Within the block SIGTERM and SIGHUP raise :class:`Terminated`: the ``finally`` clauses run
    (DDP ranks stopped, their folder removed) where the default action would end the process on
    the spot. Only in the main thread (where Python runs signal handlers), and only for a signal
    whose default action is in place: one ignored by the caller (``nohup``) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is signal.SIG_DFL:
            previous[signum] = signal.signal(signum, terminate)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
