"""The folders a module puts on ``sys.path``, read from its text: no parse, no I/O."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

_LITERAL = re.compile(r"""['"]([\w./-]+)['"]""")


def sys_path_folders(source: str, start: Path) -> Iterator[Path]:
    """Each folder a line that changes ``sys.path`` can name, read from ``start``.

    HRNet's ``_init_paths.py`` inserts ``join(dirname(__file__), '..', 'lib')``; RAFT appends ``'core'``.
    The string literals of such a line are joined in order, and every prefix of the join is a candidate
    (``..`` and ``../lib`` above); the caller keeps those that are folders of the project.
    """
    if "sys.path" not in source:
        return
    for line in source.splitlines():
        if "sys.path" not in line and "path" not in line.lower():
            continue
        joined = start
        for literal in _LITERAL.findall(line):
            if literal.startswith("/"):
                break  # an absolute path (or a separator, `.split("/")`) names no folder of the project
            joined = Path(os.path.normpath(joined / literal))
            yield joined
