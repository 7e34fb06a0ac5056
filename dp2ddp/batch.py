"""Converting many files: read and convert in worker processes, results in input order.

Workers only read and convert; they never write. The caller writes each
result itself, one file at a time and atomically, so an interrupted run
leaves every file either untouched or fully written.

LibCST, the analysis and the codemods are imported only once a file passes
its prefilter: a run over files with no DataParallel or DDP code never loads them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TypeVar

from dp2ddp.analysis.roles import ModuleRole
from dp2ddp.config import Config
from dp2ddp.conversion import ConversionError, ConvertOptions, ConvertResult, unconverted
from dp2ddp.diagnostics import CheckResult, Selection
from dp2ddp.files import SourceError, SourceFile, read_source
from dp2ddp.nesting import syntax_error, too_deep
from dp2ddp.prefilter import needs_analysis, needs_check

T = TypeVar("T")
W = TypeVar("W")
# Below this many files a pool costs more than it saves.
PARALLEL_MINIMUM = 4


@dataclass(frozen=True)
class FileResult:
    path: Path
    encoding: str = "utf-8"
    result: ConvertResult | None = None
    # Set instead of ``result`` when the file could not be read or converted.
    error: str | None = None
    # What the project said about the file, when it was converted as part of one.
    role: ModuleRole | None = None


def convert_file(path: Path, options: ConvertOptions) -> FileResult:
    try:
        source = read_source(path)
    except SourceError as error:
        return FileResult(path, error=str(error))
    if not needs_analysis(source.text):
        # What convert_source answers from the same tokens, without importing the codemods.
        refused = syntax_error(source.text)
        if refused is not None:
            return FileResult(path, source.encoding, error=located(path, refused))
        return FileResult(path, source.encoding, unconverted(source.text))
    from dp2ddp.api import convert_source

    try:
        return FileResult(path, source.encoding, convert_source(source.text, options))
    except ConversionError as error:
        return FileResult(path, source.encoding, error=located(path, error))
    except RecursionError:  # convert_source gives deep code room and names what is still too deep: a last net
        return FileResult(path, source.encoding, error=located(path, too_deep(source.text)))


@dataclass(frozen=True)
class CheckedFile:
    path: Path
    result: CheckResult | None = None
    encoding: str = "utf-8"
    # Set instead of ``result`` when the file could not be read or parsed.
    error: str | None = None


def screen_file(path: Path) -> CheckedFile | None:
    """A file's outcome when reading it or the prefilter settles it, with nothing heavy imported;
    ``None`` when it needs ``check_file``."""
    read = _read_for_check(path)
    return read if isinstance(read, CheckedFile) else None


def check_file(
    path: Path, selection: Selection, config: Config | None = None, roles: Mapping[Path, ModuleRole] | None = None
) -> CheckedFile:
    if config is not None:
        selection = selection.also_ignoring(config.ignored_in(path))
    source = _read_for_check(path)
    if isinstance(source, CheckedFile):
        return source
    from dp2ddp.check import check_source

    try:
        return CheckedFile(path, check_source(source.text, selection, (roles or {}).get(path)), source.encoding)
    except ConversionError as error:
        return CheckedFile(path, error=located(path, error))
    except RecursionError:  # check_source gives deep code room and names what is still too deep: a last net
        return CheckedFile(path, error=located(path, too_deep(source.text)))


def _read_for_check(path: Path) -> SourceFile | CheckedFile:
    """The file's source when check must parse it; else its outcome: no findings, or why it could not be read.

    A file the prefilter settles gets what ``check_source`` answers from the same tokens, without LibCST:
    no findings, or the syntax error Python reports for it.
    """
    try:
        source = read_source(path)
    except SourceError as error:
        return CheckedFile(path, error=str(error))
    if needs_check(source.text):
        return source
    refused = syntax_error(source.text)
    if refused is not None:
        return CheckedFile(path, error=located(path, refused))
    return CheckedFile(path, CheckResult(source.text, (), source.text), source.encoding)


def located(path: Path, error: ConversionError) -> str:
    """``train.py:3:7: syntax error ...``, or ``train.py: internal error ...`` where no line is known."""
    return f"{path}:{error}" if error.line is not None else f"{path}: {error}"


def default_jobs() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def convert_files(paths: Sequence[Path], options: ConvertOptions, jobs: int) -> Iterator[FileResult]:
    """Each file's result, in the order of ``paths``, converted by up to ``jobs`` processes."""
    return map_files(partial(convert_file, options=options), paths, jobs, crashed=_crashed)


def _crashed(path: Path, why: str) -> FileResult:
    return FileResult(path, error=f"{path}: {why} while converting it; convert this file on its own to see the cause")


def map_files(
    work: Callable[[W], T], paths: Sequence[W], jobs: int, crashed: Callable[[W, str], T] | None = None
) -> Iterator[T]:
    """``work(path)`` for each path (or other picklable item), in the order of ``paths``, in up to ``jobs`` processes.

    A worker that dies (killed, or a crash in native code) costs only the item it was working on:
    ``crashed(item, why)`` stands for its result, or without ``crashed`` the run stops with
    ``WorkerCrashed``. Closing the iterator, or an exception in it (Ctrl-C), kills the workers at once.
    """
    if jobs <= 1 or len(paths) < PARALLEL_MINIMUM:
        for path in paths:
            yield work(path)
        return
    # Imported here: most runs (one file, or a commit without DDP code) never need a pool.
    from dp2ddp.pool import WorkerCrashed, pooled

    workers = min(jobs, len(paths))
    chunk = max(1, min(16, len(paths) // (workers * 4)))
    for item, outcome in pooled(work, paths, workers, chunk):
        if isinstance(outcome, WorkerCrashed):
            if crashed is None:
                raise outcome
            yield crashed(item, outcome.why)
        else:
            yield outcome
