"""Converting many files: read and convert in worker processes, results in input order.

Workers only read and convert; they never write. The caller writes each
result itself, one file at a time and atomically, so an interrupted run
leaves every file either untouched or fully written.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from dp2ddp.api import ConversionError, ConvertOptions, ConvertResult, convert_source
from dp2ddp.files import SourceError, read_source

# Below this many files a pool costs more than it saves.
PARALLEL_MINIMUM = 4


@dataclass(frozen=True)
class FileResult:
    path: Path
    encoding: str = "utf-8"
    result: ConvertResult | None = None
    # Set instead of ``result`` when the file could not be read or converted.
    error: str | None = None


def convert_file(path: Path, options: ConvertOptions) -> FileResult:
    try:
        source = read_source(path)
    except SourceError as error:
        return FileResult(path, error=str(error))
    try:
        return FileResult(path, source.encoding, convert_source(source.text, options))
    except ConversionError as error:
        return FileResult(path, source.encoding, error=f"{path}:{error}")


def default_jobs() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def convert_files(paths: Sequence[Path], options: ConvertOptions, jobs: int) -> Iterator[FileResult]:
    """Each file's result, in the order of ``paths``, converted by up to ``jobs`` processes."""
    if jobs <= 1 or len(paths) < PARALLEL_MINIMUM:
        for path in paths:
            yield convert_file(path, options)
        return
    workers = min(jobs, len(paths))
    executor = ProcessPoolExecutor(max_workers=workers, initializer=_ignore_interrupts)
    try:
        chunk = max(1, min(16, len(paths) // (workers * 4)))
        yield from executor.map(convert_file, paths, [options] * len(paths), chunksize=chunk)
    finally:
        # On Ctrl-C (or any early exit) drop the work not yet started and stop the workers.
        executor.shutdown(wait=True, cancel_futures=True)


def _ignore_interrupts() -> None:
    # Ctrl-C goes to the whole process group; only the parent decides what to do about it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
