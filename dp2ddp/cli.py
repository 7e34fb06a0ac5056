"""The ``dp2ddp`` command line. Thin: parsing and printing only."""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

import click

from dp2ddp import __version__
from dp2ddp.api import ConversionError, ConvertOptions, convert_source, select_codemods
from dp2ddp.codemods import codemods
from dp2ddp.files import SourceError, discover, read_source, write_atomic
from dp2ddp.report import Report


def _codemod_names(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    # `--only a,b` and `--only a --only b` mean the same.
    names = tuple(name.strip() for value in values for name in value.split(",") if name.strip())
    try:
        select_codemods(names)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None
    return names


@click.group(
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="""\b
Examples:
  dp2ddp convert train.py            rewrite train.py in place
  dp2ddp convert --diff train.py     show the change, write nothing
  dp2ddp convert --check src/        exit 1 if any script would change
""",
)
@click.version_option(__version__, prog_name="dp2ddp")
def main() -> None:
    """Migrate PyTorch training scripts from nn.DataParallel to DistributedDataParallel."""


@main.command(
    epilog="""\b
Examples:
  dp2ddp convert train.py
  dp2ddp convert --diff train.py | less
  dp2ddp convert train.py -o train_ddp.py
  dp2ddp convert --skip add_distributed_sampler src/
  torchrun --standalone --nproc_per_node=2 -- train.py

\b
Codemods, in the order they run:
"""
    + "\n".join(f"  {name:<24} {cls.DESCRIPTION}" for name, cls in codemods().items()),
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
@click.option("--only", multiple=True, callback=_codemod_names, metavar="CODEMOD,...", help="Run only these codemods.")
@click.option("--skip", multiple=True, callback=_codemod_names, metavar="CODEMOD,...", help="Run all codemods but these.")
@click.option(
    "--keep-per-process-batch",
    is_flag=True,
    help="Keep batch_size per process (effective batch x world size) instead of splitting the global batch.",
)
def convert(
    paths: tuple[Path, ...],
    diff: bool,
    check: bool,
    output: Path | None,
    only: tuple[str, ...],
    skip: tuple[str, ...],
    keep_per_process_batch: bool,
) -> None:
    """Rewrite DataParallel training scripts to use DistributedDataParallel.

    PATHS are scripts or directories (searched recursively for *.py). Files
    are rewritten in place unless --diff, --check or --output is given.
    """
    if output is not None and (len(paths) != 1 or paths[0].is_dir()):
        raise click.UsageError("--output takes exactly one input file")
    options = ConvertOptions(only=only, skip=skip, keep_per_process_batch=keep_per_process_batch)
    report = Report(dry_run=diff or check, check=check)
    try:
        files = discover(paths)
    except SourceError as error:
        raise click.UsageError(str(error)) from None
    for path in files:
        try:
            source = read_source(path)
            result = convert_source(source.text, options)
        except SourceError as error:
            click.echo(f"error: {error}", err=True)
            report.fail()
            continue
        except ConversionError as error:
            click.echo(f"error: {path}:{error}", err=True)
            report.fail()
            continue
        for finding in result.findings:
            click.echo(f"{path}:{finding}", err=True)
        report.done(result.changed)
        if diff:
            _print_diff(path, result.source, result.output)
        elif check:
            if result.changed:
                click.echo(f"would convert {path}", err=True)
        elif output is not None:
            write_atomic(output, result.output, source.encoding)
            click.echo(f"wrote {output}", err=True)
        elif result.changed:
            write_atomic(path, result.output, source.encoding)
            click.echo(f"converted {path}", err=True)
    click.echo(report.summary(), err=True)
    sys.exit(report.exit_code)


def _print_diff(path: Path, before: str, after: str) -> None:
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{path}", f"b/{path}"
    )
    for line in lines:
        click.echo(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n", nl=False)
