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
    (``..`` and ``../lib`` above); the caller keeps those that are folders of the project. A line that
    joins them to a folder named elsewhere (``join(cfg.root_dir, 'common')``, with ``root_dir`` the
    parent of the config's folder) may start from a folder above ``start``: those joins are candidates too.
    """
    if "sys.path" not in source:
        return
    for line in source.splitlines():
        if "sys.path" not in line and "path" not in line.lower():
            continue
        literals = _LITERAL.findall(line)
        # From a folder above, only names that go down into a folder (`'common'`): `'../..'` or `'./'` from
        # there names a folder around the repository.
        down = bool(literals) and all(part not in ("", ".", "..") for literal in literals for part in literal.strip("/").split("/"))
        for base in (start, start.parent, start.parent.parent) if down else (start,):
            joined = base
            for literal in literals:
                if literal.startswith("/"):
                    break  # an absolute path (or a separator, `.split("/")`) names no folder of the project
                joined = Path(os.path.normpath(joined / literal))
                yield joined
