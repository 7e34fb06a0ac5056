"""CPython's verdict on a source, before LibCST sees it, and the error for code nested too deeply. Imports no LibCST.

LibCST parses in native code: 3,000 nested parentheses overflow its stack and
kill the process. So a file is first parsed by CPython, at the interpreter's
own limits (``syntax_error``). What Python itself refuses (more than 200
nested brackets, 100 levels of indentation, about 3,000 nested operators) is
an error at its line, as running the script would be. What it admits is
bounded in depth, and is then parsed, analysed and converted with
``run_deep``'s room (``dp2ddp.analysis.deep``), where LibCST follows any
nesting CPython does.
"""

from __future__ import annotations

import re
import threading
import warnings
from collections.abc import Callable
from typing import TypeVar

from dp2ddp.analysis.deep import run_deep
from dp2ddp.conversion import ConversionError

T = TypeVar("T")

TOO_DEEP = (
    "too deeply nested for the parser ({why}); split the expression or statement into smaller ones "
    "(for example, sum a long list of terms with `sum([...])`), or leave the file out"
)


def syntax_error(source: str) -> ConversionError | None:
    """CPython's own error in ``source``, as running it would report it; ``None`` when Python compiles it.

    The whole compile, to bytecode, costs about 7% of a LibCST parse, less
    than a parse to an AST alone (which builds Python objects for every node),
    and finds what only the compiler does (a ``return`` outside a function).
    At the interpreter's limits: call it outside ``run_deep``.
    """
    try:
        try:
            _compile(source)
        except RecursionError:
            # CPython's limit counts the frames of its caller too: ask again from the top of a thread of its
            # own, as running the script would, so the verdict does not depend on who asks.
            _in_fresh_thread(_compile, source)
    except SyntaxError as error:
        message = error.msg
        hint = older_python(source, error)
        if hint is not None:
            message = f"{message}{'' if message.endswith(('.', '?')) else '.'} {hint}"
        column = error.offset or (1 if error.lineno is not None else None)
        return ConversionError(f"syntax error: {message}", error.lineno, column)
    except ValueError as error:  # a null byte, before Python 3.12 made that a SyntaxError
        return ConversionError(f"syntax error: {error}")
    except (RecursionError, MemoryError) as error:
        # Python's parser ran out of its own stack (MemoryError) or of recursion: the script cannot run either.
        why = "Python itself refuses it: " + (str(error) or "its parser ran out of stack")
        return ConversionError(TOO_DEEP.format(why=why), *deepest_place(source))
    return None


def _compile(source: str) -> None:
    with warnings.catch_warnings():
        # `x is 1`, "\d": the compiler's warnings are the script's business, not a verdict on it.
        warnings.simplefilter("ignore")
        compile(source, "<script>", "exec", dont_inherit=True)


def too_deep(source: str) -> ConversionError:
    """The error for a source CPython admits and LibCST's recursion still cannot follow."""
    return ConversionError(TOO_DEEP.format(why="it nests deeper than LibCST can follow"), *deepest_place(source))


def deepest_place(source: str) -> tuple[int | None, int | None]:
    """Line and column of the most deeply nested node, read from CPython's tree in a deep thread; ``None``
    if unknown."""

    import ast  # only once a file has failed: the pre-commit path never loads it

    def deepest() -> tuple[int | None, int | None]:
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None, None
        place: tuple[int | None, int | None] = (None, None)
        most = -1
        todo: list[tuple[object, int]] = [(tree, 0)]
        while todo:  # by hand: a recursive walk would fail on the very depth it measures
            node, depth = todo.pop()
            if depth > most and hasattr(node, "lineno"):
                place, most = (node.lineno, node.col_offset + 1), depth
            todo.extend((child, depth + 1) for child in ast.iter_child_nodes(node))  # type: ignore[arg-type]
        return place

    try:
        return run_deep(deepest)
    except (RecursionError, MemoryError):
        return None, None


def _in_fresh_thread(work: Callable[..., object], *args: object) -> None:
    """``work(*args)`` in a new thread with the default stack and recursion limit; raises what it raised."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            work(*args)
        except BaseException as error:  # handed to the caller's thread, which raises it
            failure.append(error)

    thread = threading.Thread(target=run, name="dp2ddp-compile", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


# Spellings of Python 2, or of Python 3 before 3.7, that old training scripts still carry.
_ASYNC_ARGUMENT = re.compile(r"(?<=[(,])\s*async\s*=")
_ASYNC = re.compile(r"\basync\b(?!\s+(?:def|with|for)\b)")
_EXCEPT_COMMA = re.compile(r"^\s*except\s+[^:]+,\s*\w+\s*:")


def older_python(source: str, error: SyntaxError) -> str | None:
    """What to do about a syntax error that says the script predates the Python running dp2ddp, if it does."""
    if error.msg.startswith("Missing parentheses in call to"):
        return "This is Python 2 source (a print or exec statement): port it to Python 3 first, then run dp2ddp again"
    lines = source.splitlines()
    line = lines[error.lineno - 1] if error.lineno is not None and 0 < error.lineno <= len(lines) else ""
    if _EXCEPT_COMMA.match(line):
        return (
            "`except E, name:` is Python 2 source: port it to Python 3 first (`except E as name:`), "
            "then run dp2ddp again"
        )
    # Only an `async` at or before the place CPython points at explains the error.
    column = (error.offset or len(line) + 1) - 1
    if any(match.start() <= column for match in _ASYNC_ARGUMENT.finditer(line)):
        return (
            "`async=` is pre-3.7 (or Python 2) source: `async` has been a keyword since Python 3.7, and "
            "PyTorch 0.4 renamed the argument, so rename every `async=` to `non_blocking=`"
        )
    if any(match.start() <= column for match in _ASYNC.finditer(line)):
        return "`async` has been a keyword since Python 3.7, so this is older source: rename it"
    return None
