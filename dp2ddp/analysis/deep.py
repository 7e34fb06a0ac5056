"""Room for deeply nested code: work run in a thread with a large stack and a raised recursion limit. Imports nothing.

LibCST visits, compares and prints its tree by recursion, a few Python frames
for each level of nesting, and the analysis reads it the same way: a sum of
400 terms passes the default recursion limit of 1000. Every parse, analysis
and conversion of a file runs here, where any nesting CPython admits fits.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# Measured with LibCST 1.x on CPython 3.11: the deepest sources CPython admits (about 2,900 nested operators:
# a sum of 2,900 terms, a chain of attributes, conditional expressions or lambdas) convert within 10,000 frames
# and 16 MiB of stack. Both are set well above that; a stack is address space, used only as deep as the code goes.
STACK_BYTES = 256 * 2**20
RECURSION_LIMIT = 50_000

_state = threading.local()
_limit_lock = threading.Lock()
_raised = 0
_saved_limit = 0


def run_deep(work: Callable[..., T], *args: object, **kwargs: object) -> T:
    """``work(*args, **kwargs)`` in a thread with ``STACK_BYTES`` of stack and ``RECURSION_LIMIT``; its result or its
    exception. Called again from inside such a thread, it simply calls ``work``."""
    if getattr(_state, "deep", False):
        return work(*args, **kwargs)
    outcome: list[object] = []
    failure: list[BaseException] = []

    def deeply() -> None:
        _state.deep = True
        try:
            outcome.append(work(*args, **kwargs))
        except BaseException as error:  # handed to the caller's thread, which raises it
            failure.append(error)

    _raise_limit()
    try:
        with _limit_lock:
            # The stack size applies to threads started after it is set: set it for this one alone.
            previous = threading.stack_size(STACK_BYTES)
            try:
                thread = threading.Thread(target=deeply, name="dp2ddp-deep", daemon=True)
                thread.start()
            finally:
                threading.stack_size(previous)
        thread.join()
    finally:
        _restore_limit()
    if failure:
        raise failure[0]
    return outcome[0]  # type: ignore[return-value]


def _raise_limit() -> None:
    # The limit is the interpreter's, not the thread's: raised while any deep work runs, then put back.
    global _raised, _saved_limit
    with _limit_lock:
        if _raised == 0:
            _saved_limit = sys.getrecursionlimit()
            sys.setrecursionlimit(max(_saved_limit, RECURSION_LIMIT))
        _raised += 1


def _restore_limit() -> None:
    global _raised
    with _limit_lock:
        _raised -= 1
        if _raised == 0:
            sys.setrecursionlimit(_saved_limit)
