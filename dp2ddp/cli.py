"""The ``dp2ddp`` command line. Thin: parsing and printing only."""

from __future__ import annotations

import difflib
import functools
import importlib.util
import json
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import click

# Only what parsing the arguments needs is imported here: each command imports its machinery
# when it runs, and `check` only once a file passes the prefilter, so a pre-commit hook on a
# commit without DDP code never loads LibCST, the analysis or the codemods.
from dp2ddp import __version__
from dp2ddp.batch import CheckedFile, FileResult, located, check_file, convert_files, default_jobs, map_files, screen_file
from dp2ddp.config import ConfigError, find_config
from dp2ddp.conversion import (
    BATCH_MODES,
    DEFAULT_HELPERS_MODULE,
    NO_DATA_PARALLEL,
    BatchMode,
    ConversionError,
    ConvertOptions,
    HelpersMode,
)
from dp2ddp.diagnostics import Diagnostic, Selection, fails
from dp2ddp.files import (
    Found,
    SourceError,
    SourceFile,
    WriteError,
    find_sources,
    is_read_only,
    project_root,
    read_source,
    write_atomic,
)
from dp2ddp.analysis.roles import ModuleRole
from dp2ddp.formats import FORMATS, FileDiagnostics, as_json, github, sarif, text
from dp2ddp.interrupts import Interrupted, stopping_on_signals
from dp2ddp.prefilter import needs_analysis
from dp2ddp.report import EXIT_ERROR, EXIT_INTERRUPTED, Report
from dp2ddp.rules import NOT_IN_OUTPUT, REPORTED_IN_OUTPUT, RULES

if TYPE_CHECKING:
    from dp2ddp.verify.compare import Tolerance
    from dp2ddp.verify.runner import Runs

# Reference runs in statistical mode (see README, "Verifying a conversion").
STATISTICAL_SEEDS = 5
# A tree of more files than this shows a progress bar on a terminal.
PROGRESS_MINIMUM = 5


def _codemod_names(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    # `--only a,b` and `--only a --only b` mean the same.
    names = tuple(name.strip() for value in values for name in value.split(",") if name.strip())
    if not names:
        return names
    from dp2ddp.api import select_codemods

    try:
        select_codemods(names)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None
    return names


def _helpers_option(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[HelpersMode, str] | None:
    if value is None:
        return None
    mode, _, name = value.partition(":")
    if mode == "inline" and not name:
        return "inline", DEFAULT_HELPERS_MODULE
    if mode == "module" and (not name or name.isidentifier()):
        return "module", name or DEFAULT_HELPERS_MODULE
    raise click.BadParameter(f"{value!r}: give inline, module or module:NAME, where NAME is a Python module name")


@click.group(
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="""\b
Examples:
  dp2ddp convert train.py            rewrite train.py in place
  dp2ddp convert --diff train.py     show the change, write nothing
  dp2ddp convert --check src/        exit 1 if any script would change
  dp2ddp check src/                  report DDP hazards (a linter, and a pre-commit hook)
  dp2ddp verify train.py -- --epochs 1
                                     prove the converted script trains alike
""",
)
@click.version_option(__version__, prog_name="dp2ddp")
def main() -> None:
    """Migrate PyTorch training scripts from nn.DataParallel to DistributedDataParallel."""


class _ConvertCommand(click.Command):
    """``convert``, whose help ends with the list of codemods: built when the help is shown, so
    that no other command imports the codemods."""

    @property  # type: ignore[override]
    def epilog(self) -> str:
        from dp2ddp.codemods import codemods

        return self._epilog + "\n".join(f"  {name:<24} {cls.DESCRIPTION}" for name, cls in codemods().items())

    @epilog.setter
    def epilog(self, value: str | None) -> None:
        self._epilog = value or ""


def _stops_on_signals(said: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Run a command so that Ctrl-C, SIGTERM and SIGHUP stop it and exit 128 + the signal, with ``said``.

    The command's own handlers stop what it started (workers, launched runs) as the signal unwinds
    through them; ``said`` (formatted with ``signal``) is the last word where none had a count to give.
    From the first signal on the others are ignored, so a second Ctrl-C prints no traceback.
    """

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(command)
        def stoppable(*args: object, **kwargs: object) -> None:
            try:
                with stopping_on_signals():
                    command(*args, **kwargs)
            except Interrupted as stop:
                click.echo(said.format(signal=stop), err=True)
                sys.exit(_interrupted_status(stop))

        return stoppable

    return decorate


# Stopped where convert or check has no count of its own to give: reading the files, or writing the report.
_STOPS_WRITING = _stops_on_signals("interrupted by {signal}; every file is untouched or completely written")


@main.command(
    epilog="""\b
Examples:
  dp2ddp convert train.py
  dp2ddp convert --diff train.py | less
  dp2ddp convert train.py -o train_ddp.py
  dp2ddp convert --skip add_distributed_sampler src/
  dp2ddp convert --diff --report migration.md train.py
  dp2ddp convert --batch per-process train.py
  torchrun --standalone --nproc_per_node=2 -- train.py

\b
Codemods, in the order they run:
""",
    cls=_ConvertCommand,
)
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--diff", is_flag=True, help="Print a unified diff instead of writing files.")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if any file would change.")
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write the converted script here instead (one input file only).",
)
@click.option(
    "--allow-read-only",
    is_flag=True,
    help="Also rewrite files without write permission (by default they are refused, and the others converted).",
)
@click.option("--only", multiple=True, callback=_codemod_names, metavar="CODEMOD,...", help="Run only these codemods.")
@click.option("--skip", multiple=True, callback=_codemod_names, metavar="CODEMOD,...", help="Run all codemods but these.")
@click.option(
    "--batch",
    type=click.Choice(BATCH_MODES),
    default="global",
    show_default=True,
    help="global: each process loads batch_size // world_size, so a step sees the batch DataParallel saw. "
    "per-process: each process loads batch_size, the global batch grows by the world size, and every "
    "optimizer's learning rate is scaled by it (the linear scaling rule).",
)
# The option's old spelling, kept working for scripts that call dp2ddp.
@click.option("--keep-per-process-batch", is_flag=True, hidden=True)
@click.option(
    "--report",
    "report_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Also write a migration report for a pull request: what each codemod changed, what needs a human, "
    "batch-size consequences. Markdown for *.md, JSON for *.json.",
)
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(min=1),
    help="Convert files in this many processes (default: the number of CPUs); output order is unchanged.",
)
@click.option(
    "--project",
    is_flag=True,
    help="Convert the script named and the modules of its folder it imports as one project (a folder is one already).",
)
@click.option(
    "--helpers",
    default=None,
    callback=_helpers_option,
    metavar="inline|module[:NAME]",
    help="Where the distributed helpers go: inlined into each converted file (the default for a single file), or "
    f"once into a module of the project that every converted file imports (the default for a folder; NAME "
    f"defaults to {DEFAULT_HELPERS_MODULE}).",
)
@_STOPS_WRITING
def convert(
    paths: tuple[Path, ...],
    diff: bool,
    check: bool,
    output: Path | None,
    allow_read_only: bool,
    only: tuple[str, ...],
    skip: tuple[str, ...],
    batch: BatchMode,
    keep_per_process_batch: bool,
    report_path: Path | None,
    jobs: int | None,
    project: bool,
    helpers: tuple[HelpersMode, str] | None,
) -> None:
    """Rewrite DataParallel training scripts to use DistributedDataParallel.

    PATHS are scripts or directories. A directory is one project: its entry
    points are followed through the project's own imports, a model wrapped in
    one module and trained in another is converted across them, and the
    distributed helpers go once into a module of the project. Files are
    rewritten in place unless --diff, --check or --output is given.
    """
    if output is not None and (len(paths) != 1 or paths[0].is_dir()):
        raise click.UsageError("--output takes exactly one input file")
    if output is not None and (project or (helpers is not None and helpers[0] == "module")):
        raise click.UsageError("--output takes one file converted on its own: leave out --project and --helpers module")
    _check_output(output, diff=diff, check=check)
    report_format = _report_format(report_path) if report_path is not None else None
    if keep_per_process_batch:
        click.echo("warning: --keep-per-process-batch is deprecated; use --batch per-process", err=True)
        batch = "per-process"
    options = ConvertOptions(only=only, skip=skip, batch=batch)
    report = Report(dry_run=diff or check, check=check)
    files, projects = _find_for_convert(paths, project, helpers)
    if projects:
        try:
            outcomes = _convert_projects(projects, options, helpers, report, diff=diff, check=check,
                                         jobs=jobs or default_jobs(), allow_read_only=allow_read_only)  # fmt: skip
        except (KeyboardInterrupt, Interrupted) as stop:
            click.echo(f"interrupted: {report.summary()}; every other file is untouched", err=True)
            sys.exit(_interrupted_status(stop))
        click.echo(report.summary(), err=True)
        if report_path is not None and report_format is not None:
            _write_report(report_path, report_format, outcomes, options, written=not (diff or check))
        if not files:
            sys.exit(report.exit_code)
    show_progress = len(files) > PROGRESS_MINIMUM and sys.stderr.isatty()
    progress = click.progressbar(length=len(files), label="converting", file=sys.stderr) if show_progress else None

    def say(message: str) -> None:
        # Clear the progress line first, so the message does not run into it.
        click.echo(("\r\x1b[K" if progress is not None else "") + message, err=True)

    # Kept only for the report: each holds a file's source and output.
    outcomes = []
    try:
        for outcome in convert_files(files, options, jobs or default_jobs()):
            _finish_file(outcome, report, say, diff=diff, check=check, output=output, alone=len(files) == 1,
                         allow_read_only=allow_read_only)  # fmt: skip
            advice = _project_advice(outcome, options, alone=len(files) == 1)
            if advice is not None:
                say(advice)
            if report_path is not None:
                outcomes.append(outcome)
            if progress is not None:
                progress.update(1)
    except (KeyboardInterrupt, Interrupted) as stop:
        say(f"interrupted: {report.summary()}; every other file is untouched")
        sys.exit(_interrupted_status(stop))
    finally:
        if progress is not None:
            progress.render_finish()
    click.echo(report.summary(), err=True)
    if report_path is not None and report_format is not None:
        _write_report(report_path, report_format, outcomes, options, written=not (diff or check))
    sys.exit(report.exit_code)


# Findings that a file converted alone gets because what it needs lives in another module of its folder.
_OTHER_MODULE_CODES = frozenset({"DDP101", "DDP102", "DDP317", "DDP325"})


def _project_advice(outcome: FileResult, options: ConvertOptions, alone: bool) -> str | None:
    """The exact command that converts a file refused, left without setup or, named alone, left unchanged on
    its own, where its folder, read as one project, converts it: its modules say what the file alone cannot."""
    result = outcome.result
    if result is None:
        return None
    if not any(f.code in _OTHER_MODULE_CODES for f in result.findings) and not (alone and not result.changed):
        return None
    root = project_root(outcome.path)
    try:
        sources = {path: read_source(path).text for path in find_sources([root]).files}
    except SourceError:
        return None
    if not any(needs_analysis(source) for source in sources.values()):
        return None  # settled from tokens: no module of the folder wraps a model
    from dp2ddp.conversion import ConvertResult
    from dp2ddp.projects import ProjectError, convert_project

    try:
        converted = convert_project(root, sources, options)
    except ProjectError:
        return None
    entry = next((path for path in sources if os.path.samefile(path, outcome.path)), None)
    mine = converted.files.get(entry) if entry is not None else None
    if not isinstance(mine, ConvertResult) or not mine.changed or any(f.severity == "error" for f in mine.findings):
        return None
    project = converted.project
    module = project.by_path.get(entry) if project is not None else None
    command = f"--project {outcome.path}" if module is not None and module.entry else f"{root}"
    return f"hint: {outcome.path} converts with the rest of its project: dp2ddp convert {command}"


def _interrupted_status(stop: BaseException) -> int:
    """130 for Ctrl-C, 143 for SIGTERM: 128 + the signal, as a shell reports a process a signal ended."""
    return 128 + stop.signum if isinstance(stop, Interrupted) else EXIT_INTERRUPTED


def _crashed_conversion(work: object, why: str) -> ConversionError:
    # The caller names the file: a project's work item is its source, not its path.
    return ConversionError(f"{why} while converting it; convert this file on its own to see the cause")


def _check_output(output: Path | None, diff: bool, check: bool) -> None:
    """Refuse an --output that would be ignored, or could not be written, before any file is converted."""
    if output is None:
        return
    if diff or check:
        raise click.UsageError("--output writes the converted script, and --diff and --check write nothing: give one")
    if not output.parent.is_dir():
        raise click.UsageError(f"--output: no such directory: {output.parent}")


def _find_for_convert(
    paths: tuple[Path, ...], project: bool, helpers: tuple[HelpersMode, str] | None
) -> tuple[list[Path], list[tuple[Path, list[Path]]]]:
    """The files converted one by one, and each project's files; a path that cannot be read is a usage error."""
    try:
        direct = find_sources(path for path in paths if not _as_project(path, project, helpers))
        # A script named with --project is checked as the folders are: it must be a regular file.
        find_sources(path for path in paths if _as_project(path, project, helpers) and not path.is_dir())
        found = [(path, find_sources([_project_root(path)])) for path in paths if _as_project(path, project, helpers)]
    except SourceError as error:
        raise click.UsageError(str(error)) from None
    _say_found([direct, *(each for _, each in found)])
    return list(direct.files), [(path, list(each.files)) for path, each in found]


def _say_found(found: list[Found]) -> None:
    """What the search passed over, and each folder named that holds no Python file."""
    for each in found:
        for skipped in each.skipped:
            click.echo(f"note: {skipped}", err=True)
        for folder in each.empty:
            # A warning, not an error: a hook or a CI job over a folder that has no script yet has nothing to fix.
            click.echo(f"warning: no Python files found in {folder}", err=True)


def _as_project(path: Path, project: bool, helpers: tuple[HelpersMode, str] | None) -> bool:
    """A folder is one project; a script is one with --project, or when its helpers go into a module."""
    return path.is_dir() or project or (helpers is not None and helpers[0] == "module")


def _project_root(path: Path) -> Path:
    return path if path.is_dir() else project_root(path)


def _convert_projects(
    projects: list[tuple[Path, list[Path]]],
    options: ConvertOptions,
    helpers: tuple[HelpersMode, str] | None,
    report: Report,
    diff: bool,
    check: bool,
    jobs: int,
    allow_read_only: bool = False,
) -> list[FileResult]:
    """Convert each project as one program, then report and write its files in path order.

    Written, the helpers module goes first: an interrupted run never leaves a file that
    imports helpers from a module not there yet.
    """
    from dp2ddp.projects import ProjectError, convert_project

    mode, name = helpers if helpers is not None else ("module", DEFAULT_HELPERS_MODULE)
    outcomes: list[FileResult] = []
    for named, files in projects:
        root = _project_root(named)
        read: dict[Path, SourceFile] = {}
        failed: list[FileResult] = []
        for path in files:
            try:
                read[path] = read_source(path)
            except SourceError as error:
                failed.append(FileResult(path, error=str(error)))
        # A script named with --project, as the folder's search spelled it (`../tools/train.py` for `train.py`
        # typed in tools/): it is converted with what it imports, and the rest of its folder is not.
        entry = next((path for path in read if os.path.samefile(path, named)), named) if named.is_file() else None
        try:
            converted = convert_project(
                root, {path: source.text for path, source in read.items()}, options, mode, name,
                mapper=lambda work, items: map_files(work, items, jobs, crashed=_crashed_conversion), entry=entry,
            )  # fmt: skip
        except ProjectError as error:
            raise click.UsageError(str(error)) from None
        results: list[FileResult] = list(failed)
        for path, result in converted.files.items():
            if isinstance(result, ConversionError):
                results.append(FileResult(path, read[path].encoding, error=located(path, result)))
            else:
                results.append(FileResult(path, read[path].encoding, result, role=converted.roles.get(path)))
        if len(converted.entry_folders) > 1:
            folders = ", ".join(f"{folder.as_posix()}/" for folder in converted.entry_folders)
            click.echo(f"note: the converted entry points run from different folders ({folders}), so no one helpers "
                       "module serves them: each converted file keeps its helpers inline", err=True)  # fmt: skip
        helpers_module = converted.helpers
        if helpers_module is not None and not diff:
            written = _finish_helpers(helpers_module.path, helpers_module.before, helpers_module.after, diff=diff,
                                      check=check, allow_read_only=allow_read_only)  # fmt: skip
            if not written:
                _fail_without_helpers(results, helpers_module.path, report)
                continue
            helpers_module = None
        for outcome in sorted(results, key=lambda r: r.path):
            if helpers_module is not None and helpers_module.path < outcome.path:
                _finish_helpers(helpers_module.path, helpers_module.before, helpers_module.after, diff=diff, check=check)
                helpers_module = None
            _finish_file(outcome, report, partial(click.echo, err=True), diff=diff, check=check, output=None,
                         alone=outcome.path == entry, allow_read_only=allow_read_only)  # fmt: skip
            outcomes.append(outcome)
        if helpers_module is not None:
            _finish_helpers(helpers_module.path, helpers_module.before, helpers_module.after, diff=diff, check=check)
    return outcomes


def _finish_helpers(
    path: Path, before: str | None, after: str, diff: bool, check: bool, allow_read_only: bool = False
) -> bool:
    """Show or write the project's helpers module; False when it could not be written.

    The summary counts the user's files only.
    """
    if before == after:
        return True
    if diff:
        _print_diff(path, before or "", after)
    elif check:
        click.echo(f"would write the helpers module {path}", err=True)
    else:
        try:
            how = _write_file(path, after, "utf-8", allow_read_only)
        except WriteError as error:
            click.echo(f"error: cannot write the helpers module: {error}", err=True)
            return False
        click.echo(f"wrote the helpers module {path}" + (f" (in place, {how})" if how else ""), err=True)
    return True


def _fail_without_helpers(results: list[FileResult], helpers: Path, report: Report) -> None:
    """A project whose helpers module could not be written: its files would import a module that is not there."""
    for outcome in sorted(results, key=lambda r: r.path):
        if outcome.result is not None and outcome.result.changed:
            click.echo(f"error: {outcome.path}: not converted, since it would import {helpers}, which could not be "
                       "written; it is unchanged", err=True)  # fmt: skip
            report.fail()
        elif outcome.result is None:
            click.echo(f"error: {outcome.error}", err=True)
            report.fail()
        else:
            report.done(False)


def _write_file(path: Path, text: str, encoding: str, allow_read_only: bool, mode_of: Path | None = None) -> str | None:
    """Write ``path``, refusing a read-only file unless allowed; why it was rewritten in place, if it was."""
    if not allow_read_only and is_read_only(path):
        raise WriteError(f"{path}: read-only; make it writable or pass --allow-read-only")
    if mode_of is None:
        return write_atomic(path, text, encoding)
    return write_atomic(path, text, encoding, mode_of=mode_of)


def _report_format(path: Path) -> str:
    """The report's format; refuses a path it could not write before any file is converted."""
    from dp2ddp import migration

    try:
        found = migration.format_of(path)
    except ValueError as error:
        raise click.UsageError(f"--report: {error}") from None
    if not path.parent.is_dir():
        raise click.UsageError(f"--report: no such directory: {path.parent}")
    return found


def _write_report(path: Path, kind: str, outcomes: list[FileResult], options: ConvertOptions, written: bool) -> None:
    from dp2ddp import migration

    document = migration.build(outcomes, options, written)
    try:
        write_atomic(path, migration.render(document, kind), "utf-8")
    except WriteError as error:
        click.echo(f"error: cannot write the migration report: {error}", err=True)
        sys.exit(EXIT_ERROR)
    click.echo(f"wrote the migration report {path}", err=True)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _finish_file(
    outcome: FileResult,
    report: Report,
    say: Callable[[str], None],
    diff: bool,
    check: bool,
    output: Path | None,
    alone: bool,
    allow_read_only: bool = False,
) -> None:
    """Report one file's result and write it, in the order the files were named."""
    path, result = outcome.path, outcome.result
    if result is None:
        say(f"error: {outcome.error}")
        report.fail()
        return
    for finding in result.findings:
        say(f"{path}:{finding}")
    errors = [finding for finding in result.findings if finding.severity == "error"]
    refused = bool(errors) and not result.changed
    if refused:
        report.block()
        above = "the error above is" if len(errors) == 1 else f"the {len(errors)} errors above are"
        say(f"left {path} as it was: converting it would not be safe until {above} fixed by hand")
    elif result.reason is not None and (alone or result.reason != NO_DATA_PARALLEL):
        # In a tree most files never use DataParallel; the summary counts them.
        say(f"left {path} unchanged: {result.reason}")
    if diff:
        _print_diff(path, result.source, result.output)
    elif check:
        if result.changed:
            say(f"would convert {path}")
    elif output is not None and refused:
        # A copy of the unconverted script would pass for its conversion.
        stale = f"; the {output} already there is not from this run" if output.exists() else ""
        say(f"did not write {output}: {path} was left as it was{stale}")
    elif output is not None or result.changed:
        written = output if output is not None else path
        try:
            mode_of = path if output is not None else None
            how = _write_file(written, result.output, outcome.encoding, allow_read_only, mode_of=mode_of)
        except WriteError as error:
            # Counted as failed, not converted: the file is as it was.
            say(f"error: {error}")
            report.fail()
            return
        in_place = f" (in place, {how})" if how else ""
        say(f"wrote {output}{in_place}" if output is not None else f"converted {path}{in_place}")
    report.done(result.changed)


def _print_diff(path: Path, before: str, after: str) -> None:
    # A file convert creates (the helpers module) is new to git and patch too.
    named = _diff_name(path)
    old = f"a/{named}" if before or path.exists() else "/dev/null"
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True), old, f"b/{named}"
    )
    for line in lines:
        click.echo(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n", nl=False)


def _diff_name(path: Path) -> str:
    """The path a diff header names: relative to the current folder when under it, else absolute without its
    leading slash, so that `patch -p1` and `git apply` take it from here, or from / for a file elsewhere.

    `a//abs/path.py` is refused by both, and `a/../x.py` by both as unsafe.
    """
    absolute = Path(os.path.abspath(path))  # not resolved: the name the user gave, links included
    here = Path.cwd()
    if absolute.is_relative_to(here):
        return absolute.relative_to(here).as_posix()
    return absolute.as_posix().lstrip("/")


@main.command(
    epilog="""\b
Examples:
  dp2ddp explain DDP220     what DDP220 finds, why it matters, what to write instead
  dp2ddp explain --all      every code, one line each
"""
)
@click.argument("code", required=False)
@click.option("--all", "list_all", is_flag=True, help="List every code with its severity and name.")
def explain(code: str | None, list_all: bool) -> None:
    """Explain a finding's code: what it finds, why it matters, and what convert does about it."""
    if list_all or code is None:
        for rule in RULES.values():
            click.echo(f"{rule.code}  {rule.severity:<7}  {rule.name}")
        return
    rule = RULES.get(code.upper())
    if rule is None:
        raise click.UsageError(f"unknown code {code!r}; `dp2ddp explain --all` lists them")
    click.echo(f"# {rule.code} ({rule.name}, {rule.severity})\n")
    click.echo(f"Message: {rule.message}\n")
    click.echo(rule.doc.rstrip())
    if rule.code in REPORTED_IN_OUTPUT:
        found = ", ".join(sorted(REPORTED_IN_OUTPUT[rule.code]))
        click.echo(f"\n## In the converted script\n`dp2ddp check` reports what is left of it as {found}.")
    elif rule.code in NOT_IN_OUTPUT:
        click.echo(f"\n## In the converted script\nNothing is left for `dp2ddp check` to find: {NOT_IN_OUTPUT[rule.code]}.")


def _regular_file(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    # click.Path takes a FIFO for a file, and reading one waits for a writer forever.
    if value is not None and not stat.S_ISREG(value.stat().st_mode):
        raise click.BadParameter(f"{value}: not a regular file; name a Python script")
    return value


@main.command(
    epilog="""\b
Examples:
  dp2ddp verify train.py
  dp2ddp verify train.py --max-steps 50 -- --epochs 1 --batch-size 64
  dp2ddp verify train.py --converted train_ddp.py --json verify.json
  dp2ddp verify train.py --device cpu --synthetic-data --plot losses.png

\b
Exit status: 0 equivalent, 1 not equivalent (losses, replicas, data split),
2 error (a crash, a hang, a rank that left, bad arguments).
"""
)
@click.argument("script", type=click.Path(exists=True, dir_okay=False, path_type=Path), callback=_regular_file)
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option(
    "--converted",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    callback=_regular_file,
    help="The converted script to check; by default SCRIPT is converted in memory.",
)
@click.option("--nproc", default=2, show_default=True, type=click.IntRange(min=1), help="Processes for the converted run.")
@click.option("--backend", type=click.Choice(["auto", "nccl", "gloo"]), default="auto", show_default=True,
              help="auto: NCCL when --nproc GPUs are visible, else gloo on the CPU.")  # fmt: skip
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
              help="cpu maps .cuda(), .to('cuda'), torch.device('cuda') and is_available() onto the CPU in both runs.")  # fmt: skip
@click.option("--max-steps", type=click.IntRange(min=1), help="Stop both runs after this many optimizer steps.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1),
              help="Seconds each run may take; a run past it is killed and reported as hung. "
                   "Default: 600 s for the reference, 60 s + 4x the reference's time for the converted run.")  # fmt: skip
@click.option("--seed", default=0, show_default=True, help="Seed forced into random, numpy and torch at start-up.")
@click.option("--dropout", type=click.Choice(["mask", "off"]), default="mask", show_default=True,
              help="mask: dropout and per-sample noise drawn once for the global batch, each rank its rows; "
                   "off: no dropout in either run.")  # fmt: skip
@click.option("--precision", type=click.Choice(["auto", "float64", "native"]), default="auto", show_default=True,
              help="auto: both runs compute in float64 on the CPU (float noise ~1e-16, autocast off) and as "
                   "written on GPUs; native: as written.")  # fmt: skip
@click.option("--logs", type=click.Choice(["warn", "fail"]), default="fail", show_default=True,
              help="What a difference between the reference's printed report lines and rank 0's does: fail "
                   "verify (rank 0 printed its own share of a number), or only warn beside the verdict.")  # fmt: skip
@click.option("--atol", default=1e-5, show_default=True, help="Absolute tolerance per step.")
@click.option("--rtol", default=1e-4, show_default=True, help="Tolerance relative to the reference loss.")
@click.option("--statistical", is_flag=True,
              help="For scripts with randomness verify cannot line up (augmentation in the dataset): run the "
                   f"reference and the converted run with the same {STATISTICAL_SEEDS} seeds and test the paired "
                   "gaps (a t test of their mean, and their size against independent seeds').")  # fmt: skip
@click.option("--synthetic-data", is_flag=True, help="Replace torchvision datasets with FakeData of the same shape.")
@click.option("--synthetic-size", default=256, show_default=True, type=click.IntRange(min=1),
              help="Samples in each synthetic dataset.")  # fmt: skip
@click.option("--keep-logs", type=click.Path(file_okay=False, path_type=Path),
              help="Copy every process's output, the losses, the replica and sampler records and the converted "
                   "script into this folder.")  # fmt: skip
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), help="Write the result as JSON.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write a loss-curve plot (needs matplotlib: pip install matplotlib).")  # fmt: skip
@_stops_on_signals("\nverify: stopped by {signal}; every process it started has been stopped")
def verify(
    script: Path,
    script_args: tuple[str, ...],
    converted: Path | None,
    nproc: int,
    backend: str,
    device: str,
    max_steps: int | None,
    timeout_s: float | None,
    seed: int,
    dropout: str,
    precision: str,
    logs: str,
    atol: float,
    rtol: float,
    statistical: bool,
    synthetic_data: bool,
    synthetic_size: int,
    keep_logs: Path | None,
    json_path: Path | None,
    plot_path: Path | None,
) -> None:
    """Run SCRIPT and its DDP conversion and check that their per-step losses agree.

    The reference is SCRIPT in one process; the converted script runs under
    torchrun with --nproc processes. Arguments after -- go to both scripts.
    """
    from dp2ddp.verify import checks, diagnose, render
    from dp2ddp.verify.compare import Tolerance, compare, compare_band
    from dp2ddp.verify.logs import compare_logs
    from dp2ddp.verify.runner import Plan, VerifyError, converted_seed, reference_seeds, run_all, run_noise_probe

    if plot_path is not None and importlib.util.find_spec("matplotlib") is None:
        raise click.UsageError("--plot needs matplotlib: pip install matplotlib")
    unrunnable = _unrunnable(script, converted)
    if unrunnable is not None:
        if json_path is not None:
            document = {"script": str(script.resolve()), "converted": str(converted.resolve()) if converted else None,
                        "verdict": "error", "message": unrunnable}  # fmt: skip
            json_path.write_text(json.dumps(document, indent=2) + "\n")
        click.echo(f"error: {unrunnable}", err=True)
        sys.exit(EXIT_ERROR)
    with tempfile.TemporaryDirectory(prefix="dp2ddp-verify-") as temporary:
        work = Path(temporary)
        plan = Plan(
            original=script, converted=converted, args=script_args, nproc=nproc, backend=backend, device=device,
            max_steps=max_steps, timeout_s=timeout_s, seed=seed, dropout=dropout, synthetic_data=synthetic_data,
            synthetic_size=synthetic_size, statistical_seeds=STATISTICAL_SEEDS if statistical else 0, precision=precision,
        )  # fmt: skip
        context = {
            "script": str(script.resolve()), "converted": str(converted.resolve()) if converted else None,
            "arguments": list(script_args), "seed": seed, "nproc": nproc, "max_steps": max_steps,
            "reference_seeds": list(reference_seeds(plan)), "converted_seed": converted_seed(plan),
            "converted_seeds": list(reference_seeds(plan)) if statistical else [converted_seed(plan)],
        }  # fmt: skip
        progress = render.ProgressLine()
        try:
            convert = None if converted is not None else lambda: _convert_for_verify(script, work)
            runs = run_all(plan, work, progress, convert)
        except VerifyError as error:
            raise click.UsageError(str(error)) from None
        except (SourceError, ConversionError) as error:
            message = f"cannot convert {script}: {error}"
            if json_path is not None:
                json_path.write_text(json.dumps({**context, "verdict": "error", "message": message}, indent=2) + "\n")
            click.echo(f"error: {message}", err=True)
            sys.exit(2)
        finally:
            progress.close()
            if keep_logs is not None:
                shutil.copytree(work, keep_logs, dirs_exist_ok=True)
        # Read what the converted processes recorded before their folder goes.
        # The first defect heads the verdict: what changes training itself (the run, the batch, the rate,
        # the data) comes before what only a real run would suffer from (buffers, collectives, shared files).
        findings = [] if runs.converted is None or not runs.converted.ok else [
            *checks.distributed(runs.converted, nproc),
            *checks.batch(runs.references[0], runs.converted),
            *checks.learning_rates(runs.references[0], runs.converted),
            *checks.set_epoch(runs.converted),
            *checks.samplers(runs.converted, max_steps),
            *checks.loaders(runs.converted),
            *checks.replicas(runs.converted),
            *checks.buffers(runs.converted),
            *checks.collectives(runs.converted),
            *checks.writes(runs.converted),
            *checks.switched_off(runs.references[0]),
            *checks.reference_wrapped(runs.references[0]),
        ]  # fmt: skip
        evidence = diagnose.gather(runs)
        probe = None
        defective = any(finding.kind == "defect" for finding in findings)  # the verdict is settled already
        if not statistical and not defective and _diverges_by_a_gap(runs, Tolerance(absolute=atol, relative=rtol)):
            # Before calling it a divergence, measure how far rounding alone moves this training.
            progress = render.ProgressLine()
            try:
                probe = run_noise_probe(plan, runs, work, progress)
            finally:
                progress.close()
    failed = next((run for run in runs.all if not run.ok), None)
    if failed is not None:
        _finish(runs, None, "error", render.failure(failed), json_path, 2, context)
    for run in runs.all:
        if run.exit_note is not None:
            click.echo(f"note: {run.exit_note}", err=True)
    references = [tuple(run.ranks[0].losses) for run in runs.references]
    if not any(references):
        _finish(runs, None, "error", render.no_losses(runs.references[0]), json_path, 2, context)
    assert runs.converted is not None
    ranks = [rank.losses for rank in runs.converted.ranks]
    conversions = [[rank.losses for rank in run.ranks] for run in runs.conversions]
    if not any(ranks) or not all(any(run) for run in conversions):
        _finish(runs, None, "error", render.no_converted_losses(runs), json_path, 2, context)
    tolerance = Tolerance(absolute=atol, relative=rtol)
    noise = probe.ranks[0].losses if probe is not None and probe.ok else None
    if probe is not None and noise is None:
        click.echo(f"note: the noise probe did not finish, so the tolerance was not widened:\n{render.failure(probe)}",
                   err=True)  # fmt: skip
    if statistical:
        comparison = compare_band(references, conversions, tolerance)
    else:
        comparison = compare(references[0], ranks, tolerance, noise)
    click.echo(f"semantics: {render.SEMANTICS}")
    click.echo(render.table(comparison))
    if plot_path is not None:
        render.plot(comparison, plot_path, f"dp2ddp verify {script.name}", runs.references[0].ranks[0].stepped)
        click.echo(f"wrote {plot_path}", err=True)
    max_abs, max_rel = render.largest_gap(comparison)
    click.echo(f"largest gap: {max_abs:.2e} absolute, {max_rel:.2e} relative")
    if not statistical:  # other seeds print other numbers by design
        compared = compare_logs(runs.references[0].ranks[0].stdout, [rank.stdout for rank in runs.converted.ranks],
                                tolerance)  # fmt: skip
        # Where the losses part, the printed losses part with them: the divergence is the verdict, the log a warning.
        findings.append(checks.logs(compared, fail=logs == "fail" and comparison.equivalent))
    for finding in findings:
        click.echo(f"{finding.kind}: {finding.message}" if finding.kind != "note" else finding.message)
    defects = [finding for finding in findings if finding.kind == "defect"]
    equivalent = comparison.equivalent and not defects
    message = render.verdict(comparison, defects, evidence)
    if probe is not None:
        context["noise_probe"] = {"wall_s": round(probe.wall_s, 3), "losses": [list(pair) for pair in noise or ()]}
    # A check that failed makes the pair not equivalent whatever the losses did; "diverges" is for the losses.
    status = "equivalent" if equivalent else "not equivalent" if defects else "diverges"
    _finish(runs, comparison, status, message, json_path, 0 if equivalent else 1, context, findings)


def _diverges_by_a_gap(runs: Runs, tolerance: Tolerance) -> bool:
    """Both runs finished with losses and some step's gap exceeds the tolerance: rounding may explain it."""
    from dp2ddp.verify.compare import compare

    if runs.converted is None or not all(run.ok for run in runs.all) or not runs.references[0].ranks[0].losses:
        return False
    comparison = compare(runs.references[0].ranks[0].losses, [rank.losses for rank in runs.converted.ranks], tolerance)
    first = comparison.first_divergence
    return first is not None and first.gap is not None


def _unrunnable(script: Path, converted: Path | None) -> str | None:
    """Why SCRIPT or the converted script cannot run, found before any run: unreadable, not Python, nested
    deeper than Python parses; ``None`` when both parse."""
    from dp2ddp.nesting import syntax_error

    for path in (script, converted):
        if path is None:
            continue
        try:
            source = read_source(path)
        except SourceError as error:
            return f"{error}; Python cannot run it, so verify cannot either"
        refused = syntax_error(source.text)
        if refused is not None:
            return f"{located(path, refused)}; Python cannot run it, so verify cannot either"
    return None


def _convert_for_verify(script: Path, work: Path) -> Path:
    """Convert ``script`` into ``work/script/<same name>``; runs in a thread while the reference runs."""
    from dp2ddp.api import convert_source

    source = read_source(script)
    result = convert_source(source.text, ConvertOptions())
    if not result.changed:
        if any(finding.code == "DDP001" for finding in result.findings):
            raise ConversionError("it already uses torch.distributed (DDP001), so convert leaves it alone; "
                                  "verify a DDP script against its DataParallel original with --converted")  # fmt: skip
        # A wrap convert would not touch (refused on an error, or a sub-module's wrap left as it was) is named.
        found = [finding for finding in result.findings if finding.severity in ("error", "warning")]
        if found:
            listed = "\n".join(f"  {script}:{finding}" for finding in found)
            how = "refused it and left it" if any(finding.severity == "error" for finding in found) else "left it"
            raise ConversionError(f"convert {how} as it was:\n{listed}\nfollow each finding's advice (`dp2ddp "
                                  "explain CODE`) and verify again, or give a DDP script you converted yourself with "
                                  "--converted")  # fmt: skip
        why = result.reason or "it has nothing to convert (no nn.DataParallel)"
        raise ConversionError(f"{why}; give the DDP script with --converted")
    for finding in result.findings:
        click.echo(f"{script}:{finding}", err=True)
    folder = work / "script"
    folder.mkdir()
    converted = folder / script.name  # the same file name, so tracebacks read naturally
    converted.write_text(result.output, encoding=source.encoding)
    return converted


def _finish(runs, comparison, status: str, message: str, json_path: Path | None, exit_code: int, context,  # type: ignore[no-untyped-def]
            findings=()):
    from dp2ddp.verify import render

    if json_path is not None:
        document = {**context, **render.as_json(runs, comparison, status, message, findings)}
        json_path.write_text(json.dumps(document, indent=2) + "\n")
    click.echo(message if status != "error" else f"error: {message}", err=status == "error")
    sys.exit(exit_code)


def _codes(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    # `--select DDP5,DDP002` and `--select DDP5 --select DDP002` mean the same.
    return tuple(code.strip().upper() for value in values for code in value.split(",") if code.strip())


@main.command(
    epilog="""\b
Examples:
  dp2ddp check train.py               report DDP hazards, exit 1 if any
  dp2ddp check --diff src/            show the safe fixes, write nothing
  dp2ddp check --fix src/             apply the safe fixes
  dp2ddp check --select DDP5 --ignore DDP508 src/
  dp2ddp check --format sarif src/ > dp2ddp.sarif
  dp2ddp explain DDP502               what a code means and what to write instead

\b
Exit status: 0 no finding at or above --fail-on, 1 findings, 2 errors
(a file that does not parse, a bad option or configuration).
Configuration: [tool.dp2ddp] in pyproject.toml (select, ignore,
per-file-ignores, exclude); `# noqa: DDP501` on a line silences it.
"""
)
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--format", "output_format", type=click.Choice(FORMATS), default="text", show_default=True,
              help="text: path:line:col: CODE message ([*] marks a safe fix), with the source line on a "
                   "terminal; json; sarif (2.1.0, for code scanning); github (workflow annotations).")  # fmt: skip
@click.option("--fix", is_flag=True, help="Apply the safe fixes in place, then report what is left.")
@click.option("--allow-read-only", is_flag=True,
              help="With --fix, also rewrite files without write permission (by default they are refused).")
@click.option("--diff", is_flag=True, help="Print the safe fixes as a unified diff; write nothing.")
@click.option("--select", multiple=True, callback=_codes, metavar="CODE,...", help="Report only these codes or prefixes (DDP5).")
@click.option("--ignore", multiple=True, callback=_codes, metavar="CODE,...", help="Do not report these codes or prefixes.")
@click.option("--exclude", multiple=True, metavar="GLOB", help="Skip files and folders matching these patterns.")
@click.option("--fail-on", type=click.Choice(["error", "warning", "note"]), default="warning", show_default=True,
              help="The least severe finding that makes the exit status 1.")  # fmt: skip
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings (errors reading files still exit 2).")
@click.option("--show-source/--no-show-source", default=None,
              help="Show each finding's line with a caret and help (default: when stdout is a terminal).")  # fmt: skip
@click.option("-j", "--jobs", type=click.IntRange(min=1), help="Check files in this many processes (default: the number of CPUs).")
@_STOPS_WRITING
def check(
    paths: tuple[Path, ...],
    output_format: str,
    fix: bool,
    allow_read_only: bool,
    diff: bool,
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    exclude: tuple[str, ...],
    fail_on: str,
    exit_zero: bool,
    show_source: bool | None,
    jobs: int | None,
) -> None:
    """Report DDP hazards: unguarded side effects, collectives some ranks skip, unsplit data, and DataParallel still in use.

    PATHS are scripts or directories (searched recursively for *.py); the
    default is the current directory.
    """
    if fix and diff:
        raise click.UsageError("--fix writes the fixes and --diff only shows them: give one")
    try:
        config = find_config()
        selection = Selection(select or config.select or ("DDP",), (*config.ignore, *ignore))
    except (ConfigError, ValueError) as error:
        raise click.UsageError(str(error)) from None
    try:
        found = find_sources(paths or (Path("."),))
    except SourceError as error:
        raise click.UsageError(str(error)) from None
    _say_found([found])
    files = [path for path in found.files if not config.excludes(path, exclude)]
    checked: list[FileDiagnostics] = []
    failed = fixed = 0
    # Files the prefilter settles are answered here; only the rest are parsed and analysed, in
    # workers, and only their folders are read as projects. The output keeps the order of `files`.
    screened = [screen_file(path) for path in files]
    analysed = [path for path, settled in zip(files, screened) if settled is None]
    roles = _check_roles(paths, files, analysed)
    work = partial(check_file, selection=selection, config=config, roles=roles)
    try:
        for outcome in _in_order(screened, map_files(work, analysed, jobs or default_jobs(), crashed=_crashed_check)):
            if outcome.result is None:
                click.echo(f"error: {outcome.error}", err=True)
                failed += 1
                continue
            result = outcome.result
            if diff and result.fixable:
                _print_diff(outcome.path, result.source, result.fixed)
            if fix and result.fixable:
                try:
                    how = _write_file(outcome.path, result.fixed, outcome.encoding, allow_read_only)
                except WriteError as error:
                    click.echo(f"error: {error}", err=True)
                    failed += 1
                    checked.append(FileDiagnostics(outcome.path, result.source, result.diagnostics))
                    continue
                if how:
                    click.echo(f"fixed {outcome.path} (in place, {how})", err=True)
                fixed += 1
                left = check_file(outcome.path, selection, config, roles).result
                result = left if left is not None else result
            checked.append(FileDiagnostics(outcome.path, result.source, result.diagnostics))
    except (KeyboardInterrupt, Interrupted) as stop:
        fixes = f"; fixed {_count(fixed, 'file')}, every other file is untouched" if fix else ""
        done = len(checked) + failed
        click.echo(f"interrupted after checking {done} of {_count(len(files), 'file')}{fixes}", err=True)
        sys.exit(_interrupted_status(stop))
    diagnostics = [d for file in checked for d in file.diagnostics]
    if not diff:
        if output_format == "text":
            source = sys.stdout.isatty() if show_source is None else show_source
            click.echo(text(checked, source), nl=False)
        else:
            click.echo({"json": as_json, "sarif": sarif, "github": github}[output_format](checked), nl=False)
    click.echo(_check_summary(len(files), diagnostics, fixed, failed, fix), err=True)
    if failed:
        sys.exit(2)
    sys.exit(0 if exit_zero or not fails(diagnostics, fail_on) else 1)


def _crashed_check(path: Path, why: str) -> CheckedFile:
    return CheckedFile(path, error=f"{path}: {why} while checking it; check this file on its own to see the cause")


def _in_order(screened: list[CheckedFile | None], analysed: Iterator[CheckedFile]) -> Iterator[CheckedFile]:
    """Each file's outcome in the order named: settled by the prefilter, or the next one analysed."""
    for settled in screened:
        yield settled if settled is not None else next(analysed)


def _check_roles(paths: tuple[Path, ...], files: list[Path], analysed: list[Path]) -> dict[Path, ModuleRole]:
    """For each folder checked, what its modules' calls into one another do (a project, as convert reads it).

    Only a file check analyses reads its role, so a folder none of whose files passes the prefilter is not read.
    """
    if not analysed:
        return {}
    from dp2ddp.analysis.project import Project

    roles: dict[Path, ModuleRole] = {}
    for folder in [path for path in paths if path.is_dir() and any(file.is_relative_to(path) for file in analysed)]:
        sources = {}
        for path in files:
            if path.is_relative_to(folder):
                try:
                    sources[path] = read_source(path).text
                except SourceError:
                    continue  # the file's own check names the error
        roles.update(Project(folder, sources).check_roles())
    return roles


def _check_summary(files: int, diagnostics: list[Diagnostic], fixed: int, failed: int, fixing: bool) -> str:
    by_severity = ", ".join(
        _count(n, severity) for severity in ("error", "warning", "note")
        if (n := sum(d.severity == severity for d in diagnostics))
    )  # fmt: skip
    found = f"{_count(len(diagnostics), 'finding')}" + (f" ({by_severity})" if by_severity else "")
    fixable = sum(d.fixable for d in diagnostics)
    parts = [f"checked {_count(files, 'file')}: {found}"]
    if fixing:
        parts.append(f"fixed {_count(fixed, 'file')}")
    elif fixable:
        parts.append(f"{fixable} fixable with --fix [*]")
    if failed:
        parts.append(f"{_count(failed, 'file')} could not be checked")
    return "; ".join(parts)
