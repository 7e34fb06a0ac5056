"""Finding scripts, and reading and writing them without changing their encoding."""

from __future__ import annotations

import io
import os
import tempfile
import tokenize
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

SKIPPED_DIRECTORIES = frozenset(
    {".git", ".hg", ".tox", ".nox", ".venv", "venv", "__pycache__", "node_modules", "site-packages", "build", "dist"}
)


class SourceError(Exception):
    """A file that cannot be read as Python source."""


@dataclass(frozen=True)
class SourceFile:
    path: Path
    text: str
    # As `tokenize.detect_encoding` names it: "utf-8-sig" keeps a BOM.
    encoding: str


def discover(paths: Iterable[Path]) -> list[Path]:
    """The ``.py`` files named, or found recursively under the directories named."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            for root, directories, files in os.walk(path):
                directories[:] = sorted(d for d in directories if d not in SKIPPED_DIRECTORIES and not d.startswith("."))
                found.extend(Path(root, name) for name in sorted(files) if name.endswith(".py"))
        elif path.exists():
            found.append(path)
        else:
            raise SourceError(f"{path}: no such file or directory")
    return found


def read_source(path: Path) -> SourceFile:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise SourceError(f"{path}: cannot read: {error.strerror}") from None
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as error:
        if "unknown encoding" in str(error):
            raise SourceError(f"{path}: {error}") from None
        # Undecodable bytes in the first two lines: the UTF-8 decode below says where.
        encoding = "utf-8"
    try:
        # Decoding bytes keeps "\r\n" as it is, so the newline style survives.
        text = data.decode(encoding)
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise SourceError(
            f"{path}:{line}: not valid {encoding} (byte 0x{data[error.start]:02x}); "
            "save it as UTF-8 or declare its encoding with a `# -*- coding: ... -*-` line"
        ) from None
    return SourceFile(path, text, encoding)


def write_atomic(path: Path, text: str, encoding: str, mode_of: Path | None = None) -> None:
    """Replace ``path`` with ``text`` in one step, so a crash never leaves half a file.

    The file keeps the mode of the one it replaces. With ``mode_of`` (the input
    of ``convert -o``) it takes that file's permission bits instead, less the
    umask, as ``cp`` does; a new file gets what ``open()`` would give it.
    """
    data = text.encode(encoding)
    if mode_of is not None:
        mode = mode_of.stat().st_mode & 0o777 & ~_umask()
    elif path.exists():
        mode = path.stat().st_mode & 0o7777
    else:
        # mkstemp makes its file 0600, private to the user, where open() would follow the umask.
        mode = 0o666 & ~_umask()
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".dp2ddp", dir=path.parent or ".")
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _umask() -> int:
    # The umask can only be read by setting it; put it straight back.
    current = os.umask(0o022)
    os.umask(current)
    return current
