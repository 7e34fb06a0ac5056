"""Which files ``check`` and ``convert`` must parse at all, settled from their tokens. Imports no LibCST.

Most files of a commit hold no distributed code. Deciding that from the
tokenizer alone lets ``check`` and ``convert`` answer for them before LibCST, the analysis
or the codemods are imported: a pre-commit hook on such a commit costs about
as much as starting Python.
"""

from __future__ import annotations

import io
import tokenize

from dp2ddp.analysis.names import WRAP_HELPER, is_data_parallel_like

# A file none of whose tokens is one of these has nothing check looks at.
# `get_world_size`: a loader module of a DDP program divides its batch by the world size (DDP530, DDP531).
_CANDIDATE_WORDS = frozenset(
    {"DataParallel", "data_parallel", "wrap_ddp", "DistributedDataParallel", "init_process_group", "get_world_size"}
)


def needs_check(source: str) -> bool:
    """Whether the code calls a name check looks for: a file that neither starts DDP nor wraps in DataParallel has no findings.

    Read from tokens, before any parse: ``DistributedDataParallel(``, ``init_process_group(``,
    ``get_world_size(``, or a name an import binds to one of them (``DistributedDataParallel as DDP`` ... ``DDP(``).
    A mention in a type hint, an ``isinstance`` test or a docstring is no call.
    """
    if not any(word in source for word in _CANDIDATE_WORDS):
        return False
    words = set(_CANDIDATE_WORDS)
    previous: list[str] = ["", ""]
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
                continue
            if token.type == tokenize.NAME and previous[1] == "as" and previous[0] in words:
                words.add(token.string)
            elif token.string == "(" and previous[1] in words:
                return True
            previous = [previous[1], token.string]
    except (tokenize.TokenError, SyntaxError):
        return True  # Let the parser name the error.
    return False


# Python spellings that can call or import DataParallel, or call a wrap dp2ddp made.
CONVERT_WORDS = ("DataParallel", "data_parallel", WRAP_HELPER)


def needs_analysis(source: str) -> bool:
    """Whether a DataParallel name, or dp2ddp's wrap, appears as code rather than in text: ``convert``'s prefilter.

    A docstring, a comment or a string that mentions DataParallel settles the
    file from its tokens, before any parse.
    """
    if not any(word in source for word in CONVERT_WORDS):
        return False
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.NAME and (token.string in CONVERT_WORDS or is_data_parallel_like(token.string)):
                return True
    except (tokenize.TokenError, SyntaxError):
        return True  # Let the parser name the error.
    return False


# What a script that already runs DDP calls: convert leaves it alone (DDP001).
_DISTRIBUTED_CALLS = ("DistributedDataParallel", "init_process_group")


def distributed_call(source: str) -> tuple[str, int, int] | None:
    """The first call of ``DistributedDataParallel`` or ``init_process_group`` in the code, by name or by an
    import's alias, as (name, line, column): how a script that never uses DataParallel says it runs DDP already.

    Read from tokens, before any parse; a ``def`` of that name is no call.
    """
    return _first_call(source, _DISTRIBUTED_CALLS)


def hand_parallel_call(source: str) -> tuple[str, int, int] | None:
    """The first call of ``parallel_apply`` (``torch.nn.parallel``), as (name, line, column): a script that
    replicates its model and splits its batch by hand, as DataParallel does inside, without DataParallel."""
    return _first_call(source, frozenset({"parallel_apply"}))


def _first_call(source: str, words: frozenset[str] | set[str]) -> tuple[str, int, int] | None:
    if not any(word in source for word in words):
        return None
    aliases = {word: word for word in words}
    previous: list[tokenize.TokenInfo | None] = [None, None]
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
                continue
            before, last = previous
            if token.type == tokenize.NAME and last is not None and last.string == "as" and before is not None:
                if before.string in aliases:
                    aliases[token.string] = aliases[before.string]
            elif token.string == "(" and last is not None and last.string in aliases:
                if before is None or before.string != "def":
                    return aliases[last.string], last.start[0], last.start[1] + 1
            previous = [last, token]
    except (tokenize.TokenError, SyntaxError):
        return None
    return None
