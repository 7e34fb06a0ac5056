"""``[tool.dp2ddp]`` in ``pyproject.toml``: select, ignore, per-file-ignores and exclude for ``dp2ddp check``.

The nearest ``pyproject.toml`` with a ``[tool.dp2ddp]`` table, from the
current directory upwards, applies; patterns are relative to its folder.
"""

from __future__ import annotations

import fnmatch
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the backport has the same API
    import tomli as tomllib

KEYS = frozenset({"select", "ignore", "per-file-ignores", "exclude"})


class ConfigError(Exception):
    """A ``[tool.dp2ddp]`` table dp2ddp cannot use."""


@dataclass(frozen=True)
class Config:
    root: Path = field(default_factory=Path.cwd)
    path: Path | None = None
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    exclude: tuple[str, ...] = ()

    def ignored_in(self, path: Path) -> tuple[str, ...]:
        relative = self._relative(path)
        return tuple(code for pattern, codes in self.per_file_ignores if _matches(relative, pattern) for code in codes)

    def excludes(self, path: Path, patterns: tuple[str, ...] = ()) -> bool:
        relative = self._relative(path)
        return any(_matches(relative, pattern) for pattern in (*self.exclude, *patterns))

    def _relative(self, path: Path) -> str:
        # realpath, not resolve(): a link loop is a file check reports, not a RuntimeError here.
        resolved = Path(os.path.realpath(path))
        try:
            return resolved.relative_to(self.root.resolve()).as_posix()
        except ValueError:
            return path.as_posix()


def _matches(relative: str, pattern: str) -> bool:
    """A glob against the path, or against any trailing part of it: ``tests/*``, ``*_test.py``, ``legacy``."""
    pattern = pattern.rstrip("/")
    parts = relative.split("/")
    return any(fnmatch.fnmatch("/".join(parts[i:]), pattern) or fnmatch.fnmatch("/".join(parts[: i + 1]), pattern)
               for i in range(len(parts)))  # fmt: skip


def find_config(start: Path | None = None) -> Config:
    """The nearest ``[tool.dp2ddp]`` table from ``start`` (the current directory) upwards, or the defaults."""
    folder = (start or Path.cwd()).resolve()
    for candidate in (folder, *folder.parents):
        pyproject = candidate / "pyproject.toml"
        if not pyproject.is_file():
            continue
        try:
            table = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("tool", {}).get("dp2ddp")
        except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError) as error:
            raise ConfigError(f"{pyproject}: cannot read it: {error}") from None
        if table is not None:
            return _config(pyproject, table)
    return Config()


def _config(pyproject: Path, table: object) -> Config:
    where = f"{pyproject}: [tool.dp2ddp]"
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    unknown = sorted(set(table) - KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key {', '.join(map(repr, unknown))}; known keys: {', '.join(sorted(KEYS))}")
    per_file = table.get("per-file-ignores", {})
    if not isinstance(per_file, dict) or not all(_strings(codes) for codes in per_file.values()):
        raise ConfigError(f"{where}: per-file-ignores must map glob patterns to lists of codes")
    for key in ("select", "ignore", "exclude"):
        if not _strings(table.get(key, [])):
            raise ConfigError(f"{where}: {key} must be a list of strings")
    return Config(
        root=pyproject.parent,
        path=pyproject,
        select=tuple(table.get("select", ())),
        ignore=tuple(table.get("ignore", ())),
        per_file_ignores=tuple((pattern, tuple(codes)) for pattern, codes in per_file.items()),
        exclude=tuple(table.get("exclude", ())),
    )


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)
