"""Stopping a command on Ctrl-C, SIGTERM or SIGHUP: one way for ``convert``, ``check`` and ``verify``.

The first signal raises ``Interrupted`` in the main thread, wherever the command is; the code it
unwinds through stops what the command started (verify's launched runs, the worker processes of a
multi-file run) and the command says what was done and exits 128 + the signal number. Later signals
are ignored from then on: a second Ctrl-C while that cleanup runs, or while the process exits, must
not print a traceback or leave a process behind. Imports nothing but the standard library, so a
pre-commit hook pays nothing for it.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(BaseException):
    """A signal asked the command to stop; raised in the main thread, so each ``finally`` on the stack stops what it started."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def stopping_on_signals() -> Iterator[None]:
    """Ctrl-C, SIGTERM (a CI cancel, ``timeout``) and SIGHUP (a closed terminal) all raise ``Interrupted``.

    Without this a SIGTERM would end the process at once, and leave running whatever it started in
    processes of its own (verify's runs, which are process groups of their own; the workers of a
    multi-file run, which a SIGTERM to the parent alone does not reach).
    """

    def interrupt(signum: int, frame: Any) -> None:
        for other in STOP_SIGNALS:
            signal.signal(other, signal.SIG_IGN)
        raise Interrupted(signum)

    previous = {signum: signal.signal(signum, interrupt) for signum in STOP_SIGNALS}
    try:
        yield
    except Interrupted:
        # The signals stay ignored: the command exits next, and a signal during the exit would print a traceback.
        raise
    except BaseException:
        _restore(previous)
        raise
    else:
        _restore(previous)


def _restore(previous: dict[signal.Signals, Any]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)
