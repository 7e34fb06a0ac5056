"""Finding scripts, and reading and writing them without changing their encoding or their identity.

Only regular files are read: a FIFO or a device would block the read forever. A rewrite keeps what
makes the file the same file to its owner: a symbolic link stays a link and its target is rewritten,
and a file with other hard links, or whose owner a new file could not take, is rewritten in place.
"""

from __future__ import annotations

import errno
import io
import os
import re
import stat
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


class WriteError(Exception):
    """A file that could not be written; the file is as it was."""


@dataclass(frozen=True)
class SourceFile:
    path: Path
    text: str
    # As `tokenize.detect_encoding` names it: "utf-8-sig" keeps a BOM.
    encoding: str


@dataclass(frozen=True)
class Found:
    """The files to read, and what the search passed over that a user should hear about."""

    files: tuple[Path, ...]
    # "path: why it was skipped", for files found in a folder and not read.
    skipped: tuple[str, ...] = ()
    # Folders named that hold no Python file at all.
    empty: tuple[Path, ...] = ()


def discover(paths: Iterable[Path]) -> list[Path]:
    """The ``.py`` files named, or found recursively under the directories named."""
    return list(find_sources(paths).files)


def find_sources(paths: Iterable[Path]) -> Found:
    """The files named and the ``.py`` files under the folders named, each real file once.

    A path named that is neither a folder nor a regular file raises ``SourceError``. In a folder,
    files that are not regular (FIFOs, sockets, devices) are passed over; a link to a file the search
    finds anyway is that file, read once under its own name (the name a project imports it by); and a
    link to any other file is passed over with a note. A broken link (dangling, or a loop) is kept, so
    that reading it names the error.
    """
    found: dict[str, Path] = {}  # by real path: a file named twice, or through a link, is read once
    skipped: list[str] = []
    empty: list[Path] = []
    for path in paths:
        kind = _kind(path)
        if kind == "file":
            found.setdefault(os.path.realpath(path), path)
            continue
        if kind != "folder":
            raise SourceError(kind)
        inside, special = _walk(path)
        skipped.extend(f"{file}: not a regular file, so not read" for file in special)
        if not inside and not special:
            empty.append(path)
        links = [file for file in inside if file.is_symlink()]
        for file in inside:
            if not file.is_symlink():
                found.setdefault(os.path.realpath(file), file)
        for link in links:
            real = os.path.realpath(link)
            if not link.exists():
                found.setdefault(os.path.abspath(link), link)
            elif real not in found:
                # Converting through the link would rewrite a file outside the tree searched, which
                # other projects may share; and a folder's conversion makes its files import the
                # folder's helpers module, which those other users of the file do not have.
                skipped.append(f"{link}: a link to {real}, outside the files searched; convert that file where it is")
    return Found(tuple(found.values()), tuple(skipped), tuple(empty))


def project_root(script: Path) -> Path:
    """The folder a script named with ``--project`` is converted in, spelled as the user spelled the script.

    Its own folder, widened to what its imports can reach from there: above each package it sits in that
    it imports by its full name (``from tools.utils import ...``, run as ``python -m tools.train`` from the
    folder that holds ``tools``), and to the folders it or a module beside it puts on ``sys.path``
    (``_init_paths.py`` adding ``../lib``). The same script named from anywhere gets the same folder.
    """
    from dp2ddp.analysis.paths import sys_path_folders

    folder = Path(os.path.abspath(script)).parent
    texts: list[str] = []
    for neighbour in sorted(folder.glob("*.py")):
        try:
            texts.append(read_source(neighbour).text)
        except SourceError:
            continue  # converting it says why
    top = folder
    # Up through the packages the scripts import by their full name (`from tools.utils import ...`), and no
    # further: a repository whose top folder has an `__init__.py` is not part of the folder above it.
    while (top / "__init__.py").is_file() and top.parent != top and any(
        re.search(rf"^\s*(?:from|import)\s+{re.escape(top.name)}\b", text, re.M) for text in texts
    ):
        top = top.parent
    # A package the scripts import that is not beside them but at the top of a repository above them, where
    # a setup.py or pyproject.toml installs it (`pip install -e .`): DrQA's scripts/reader/train.py importing
    # `drqa`. The repository's top holds the code the script runs.
    imported = {name for text in texts for name in re.findall(r"^\s*(?:from|import)\s+([A-Za-z_]\w*)", text, re.M)}
    for above in list(top.parents)[:3]:
        if not any((above / marker).is_file() for marker in ("setup.py", "setup.cfg", "pyproject.toml")):
            continue
        if any((above / name / "__init__.py").is_file() and not (top / name).exists() and not (top / f"{name}.py").exists() for name in imported):
            top = above
            break
    # `sys.path.append(".")` names the folder the script is run from, which is where convert is run from
    # when that folder holds the script's own (`python tools/train.py` from the repository's top).
    here = Path(os.path.abspath("."))
    starts = [folder] + ([here] if here in list(folder.parents)[:2] else [])
    # Never above the repository the script is in: a folder around it holds other projects.
    repository = next((above for above in (folder, *folder.parents) if (above / ".git").exists()), None)
    for text in texts:
        for added in (joined for start in starts for joined in sys_path_folders(text, start)):
            # Only a folder of Python code widens the project: any other name on such a line is no import root.
            if repository is not None and not added.is_relative_to(repository):
                continue
            if added.is_dir() and (next(added.glob("*.py"), None) or next(added.glob("*/__init__.py"), None)):
                top = Path(os.path.commonpath([top, added]))
    if script.is_absolute():
        return top
    return Path(os.path.relpath(top))


def _kind(path: Path) -> str:
    """Whether the path named is a "folder" or a "file", or else why it cannot be read."""
    try:
        mode = path.stat().st_mode
    except OSError as error:
        if error.errno == errno.ELOOP:
            return f"{path}: a symbolic link loop; point the link at a file"
        if path.is_symlink():
            return f"{path}: a broken symbolic link (to {os.readlink(path)}); point it at a file"
        return f"{path}: no such file or directory"
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISREG(mode):
        return "file"
    return f"{path}: not a regular file; name a Python script or a folder"


def _walk(folder: Path) -> tuple[list[Path], list[Path]]:
    """The ``.py`` files under ``folder`` worth reading, in walk order, and the special files passed over.

    ``os.walk`` does not follow links to folders, so a link that loops back up the tree is not entered.
    """
    files: list[Path] = []
    special: list[Path] = []
    for root, directories, names in os.walk(folder):
        directories[:] = sorted(d for d in directories if d not in SKIPPED_DIRECTORIES and not d.startswith("."))
        for name in sorted(name for name in names if name.endswith(".py")):
            path = Path(root, name)
            if _is_regular(path) or _is_broken_link(path):
                files.append(path)
            else:
                special.append(path)
    return files, special


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def _is_broken_link(path: Path) -> bool:
    return path.is_symlink() and not path.exists()


def read_source(path: Path) -> SourceFile:
    data = _read_regular(path)
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


def _read_regular(path: Path) -> bytes:
    """The bytes of ``path``, refused unless it is a regular file.

    Opened without blocking, then checked on the open file: opening a FIFO for reading would wait
    for a writer forever, and checking before opening leaves a moment in which the file can change.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise SourceError(f"{path}: a symbolic link loop; point the link at a file") from None
        raise SourceError(f"{path}: cannot read: {error.strerror}") from None
    with os.fdopen(descriptor, "rb") as handle:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise SourceError(f"{path}: not a regular file; name a Python script or a folder")
        try:
            return handle.read()
        except OSError as error:
            raise SourceError(f"{path}: cannot read: {error.strerror}") from None


def is_read_only(path: Path) -> bool:
    """Whether ``path`` is a file its owner marked read-only, or one this user may not write.

    Root may write any file, so a file with no write bit at all counts as read-only for root too: the
    mode says someone meant it not to change.
    """
    try:
        mode = path.stat().st_mode
    except OSError:
        return False  # not there yet: writing creates it
    return not mode & 0o222 or not os.access(path, os.W_OK)


def write_atomic(path: Path, text: str, encoding: str, mode_of: Path | None = None) -> str | None:
    """Replace ``path`` with ``text`` in one step, so a crash never leaves half a file.

    A link is written through: its target is rewritten and the link stays. The file keeps the mode of
    the one it replaces, and its owner and group. With ``mode_of`` (the input of ``convert -o``) it
    takes that file's permission bits instead, less the umask, as ``cp`` does; a new file gets what
    ``open()`` would give it.

    A replacement is a new file: it would break the file's other hard links, and only root can give
    it another user's ownership. Such a file is rewritten in place instead, which keeps both but is
    not one step. Returns ``None`` when the file was replaced, or why it was rewritten in place
    ("to keep its 2 hard links"). Raises ``WriteError`` naming the path and the reason; the file is
    then as it was.
    """
    data = text.encode(encoding)
    target = Path(os.path.realpath(path))
    try:
        existing = target.stat()
    except FileNotFoundError:
        existing = None
    except OSError as error:
        raise WriteError(f"{path}: cannot write: {error.strerror}") from None
    if mode_of is not None:
        mode = mode_of.stat().st_mode & 0o777 & ~_umask()
    elif existing is not None:
        mode = existing.st_mode & 0o7777
    else:
        # mkstemp makes its file 0600, private to the user, where open() would follow the umask.
        mode = 0o666 & ~_umask()
    if existing is not None and existing.st_nlink > 1:
        _rewrite_in_place(path, target, data, existing.st_size)
        return f"to keep its {existing.st_nlink} hard links"
    folder = target.parent
    shown = folder if path.is_symlink() else path.parent  # the folder as the user named it
    try:
        descriptor, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".dp2ddp", dir=folder)
    except OSError as error:
        raise WriteError(f"{path}: cannot write: cannot create a file in {shown}: {error.strerror}") from None
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if existing is not None and not _same_owner(temporary, existing):
            try:
                # Before chmod: a change of owner clears the set-user-ID and set-group-ID bits.
                os.chown(temporary, existing.st_uid, existing.st_gid)
            except PermissionError:
                Path(temporary).unlink(missing_ok=True)
                _rewrite_in_place(path, target, data, existing.st_size)
                return "to keep its owner"
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except OSError as error:
        Path(temporary).unlink(missing_ok=True)
        raise WriteError(f"{path}: cannot write: {error.strerror}; it is unchanged") from None
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return None


def _same_owner(temporary: str, existing: os.stat_result) -> bool:
    made = os.stat(temporary)
    return (made.st_uid, made.st_gid) == (existing.st_uid, existing.st_gid)


def _rewrite_in_place(path: Path, target: Path, data: bytes, size: int) -> None:
    """Overwrite ``target``'s bytes, so that the file (its inode, links, owner and mode) stays the same.

    Space for the longer of the old and new text is reserved first, so a full disk refuses the write
    before any byte changes; after that a crash mid-write is the only way to leave a mixed file.
    """
    try:
        descriptor = os.open(target, os.O_WRONLY)
    except OSError as error:
        raise WriteError(f"{path}: cannot write: {error.strerror}; it is unchanged") from None
    try:
        if hasattr(os, "posix_fallocate") and len(data) > size:
            try:
                os.posix_fallocate(descriptor, 0, len(data))
            except OSError as error:
                if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENODEV):
                    raise WriteError(f"{path}: cannot write: {error.strerror}; it is unchanged") from None
        written = 0
        while written < len(data):
            written += os.write(descriptor, data[written:])
        os.ftruncate(descriptor, len(data))
        os.fsync(descriptor)
    except OSError as error:
        raise WriteError(f"{path}: cannot write: {error.strerror} while rewriting it in place") from None
    finally:
        os.close(descriptor)


def _umask() -> int:
    # The umask can only be read by setting it; put it straight back.
    current = os.umask(0o022)
    os.umask(current)
    return current
