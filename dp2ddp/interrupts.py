"""Stopping a command on Ctrl-C, SIGTERM or SIGHUP: one way for ``convert``, ``check`` and ``verify``.

The first signal raises ``Interrupted`` in the main thread, wherever the command is; the code it
unwinds through stops what the command started (verify's launched runs, the worker processes of a
multi-file run) and the command says what was done and exits 128 + the signal number. Later signals
have no effect from then on: a second Ctrl-C while that cleanup runs, or while the process exits,
must not print a traceback or leave a process behind. Imports nothing but the standard library, so a
pre-commit hook pays nothing for it.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# SIGHUP: a closed terminal; there is none on Windows.
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


class Interrupted(BaseException):
    """A signal asked the command to stop; raised in the main thread, so each ``finally`` on the stack stops what
    it started."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def stopping_on_signals() -> Iterator[None]:
    """Ctrl-C, SIGTERM (a CI cancel, ``timeout``) and SIGHUP (a closed terminal) all raise ``Interrupted``.

    Without this a SIGTERM would end the process at once, and leave running whatever it started in
    processes of its own (verify's runs, which are process groups of their own; the workers of a
    multi-file run, which a SIGTERM to the parent alone does not reach).

    After the first signal the others are blocked, not ignored, and the handler stays: one that
    arrived meanwhile finds it and is dropped, where a handler switched to ``SIG_IGN`` under it
    makes Python print a traceback. They stay blocked when the block exits, however it exits
    (the command's own ``sys.exit`` after its message included): the process exits next.
    """
    stopped = False

    def interrupt(signum: int, frame: Any) -> None:
        nonlocal stopped
        if stopped:
            return
        stopped = True
        if hasattr(signal, "pthread_sigmask"):  # not on Windows
            signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        raise Interrupted(signum)

    previous = {signum: signal.signal(signum, interrupt) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        if not stopped:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
