"""Source text in, converted text and findings out. No printing, no file I/O."""

from __future__ import annotations

import difflib
import inspect
from dataclasses import dataclass
from typing import Iterable, Sequence

import libcst as cst
from libcst.codemod import Codemod, CodemodContext, SkipFile

from dp2ddp.codemods import codemods
from dp2ddp.codemods._base import FINDINGS_KEY, Finding
from dp2ddp.codemods._names import WRAP_HELPER

# Every codemod needs a DataParallel name or a converted wrap, and no Python
# spelling of either avoids these words; files without them are not parsed.
PREFILTER = ("DataParallel", "data_parallel", WRAP_HELPER)


class ConversionError(Exception):
    """The source cannot be converted; ``line``/``column`` point at the cause when known."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column

    def __str__(self) -> str:
        where = f"{self.line}:{self.column}: " if self.line is not None else ""
        return f"{where}{self.message}"


@dataclass(frozen=True)
class ConvertOptions:
    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    keep_per_process_batch: bool = False


@dataclass(frozen=True)
class ConvertResult:
    source: str
    output: str
    # Positions refer to the source as given, not to the output.
    findings: tuple[Finding, ...]

    @property
    def changed(self) -> bool:
        return self.output != self.source


def select_codemods(only: Sequence[str] = (), skip: Sequence[str] = ()) -> list[type[Codemod]]:
    """The codemods to run, in registry order; unknown names raise ``ValueError``."""
    unknown = sorted((set(only) | set(skip)) - codemods().keys())
    if unknown:
        raise ValueError(f"unknown codemod {', '.join(unknown)}; choose from {', '.join(codemods())}")
    return [cls for name, cls in codemods().items() if (not only or name in only) and name not in skip]


def _run(source: str, codemods: Iterable[type[Codemod]], options: ConvertOptions) -> tuple[str, list[Finding]]:
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as error:
        # CPython's own message and position are the ones users know; LibCST's
        # stand in only for syntax that CPython accepts and LibCST does not.
        try:
            compile(source, "<script>", "exec")
        except SyntaxError as python_error:
            raise ConversionError(
                f"syntax error: {python_error.msg}", python_error.lineno, python_error.offset
            ) from None
        raise ConversionError(f"cannot parse: {error.message}", error.raw_line, error.raw_column + 1) from None
    code = source
    # Each codemod reports positions in the code it was given; map them back
    # through the edits of the codemods before it to positions in `source`.
    edits: list[list[tuple[str, int, int, int, int]]] = []
    findings: list[Finding] = []
    for codemod in codemods:
        context = CodemodContext()
        kwargs = {}
        if "keep_per_process_batch" in inspect.signature(codemod.__init__).parameters:
            kwargs["keep_per_process_batch"] = options.keep_per_process_batch
        try:
            module = codemod(context, **kwargs).transform_module(module)
        except SkipFile:
            pass
        except Exception as error:  # a codemod bug must not cost the user a traceback or a half-written file
            name = codemod.__module__.rsplit(".", 1)[-1]
            raise ConversionError(
                f"internal error in codemod {name} ({type(error).__name__}); the file is left unchanged: "
                "please report this script, or run with --skip " + name
            ) from error
        for finding in context.scratch.get(FINDINGS_KEY, []):
            line = finding.line
            for opcodes in reversed(edits):
                line = _line_before(line, opcodes)
            findings.append(Finding(finding.code, finding.message, line, finding.column, finding.severity))
        if module.code != code:
            before, code = code, module.code
            edits.append(
                difflib.SequenceMatcher(None, before.splitlines(), code.splitlines(), autojunk=False).get_opcodes()
            )
    unique = sorted(set(findings), key=lambda f: (f.line, f.column, f.code))
    return code, unique


def _line_before(line: int, opcodes: list[tuple[str, int, int, int, int]]) -> int:
    """The 1-based line in the old text that became ``line`` in the new one."""
    index = line - 1
    for tag, old_start, _old_end, new_start, new_end in opcodes:
        if new_start <= index < new_end:
            return old_start + (index - new_start if tag == "equal" else 0) + 1
    return line


def convert_source(source: str, options: ConvertOptions = ConvertOptions()) -> ConvertResult:
    """Convert one DataParallel script to DDP.

    Raises ``ValueError`` for unknown codemod names and ``ConversionError``
    when the source does not parse or the conversion would not be sound.
    """
    codemods = select_codemods(options.only, options.skip)
    if not any(word in source for word in PREFILTER):
        return ConvertResult(source, source, ())
    output, findings = _run(source, codemods, options)
    if output != source:
        # black's rule: a second pass must change nothing, and the result must compile.
        again, _ = _run(output, codemods, options)
        if again != output:
            raise ConversionError("internal error: the conversion is not stable; please report this script")
        try:
            compile(output, "<converted>", "exec")
        except SyntaxError as error:
            raise ConversionError(f"internal error: the converted script does not compile: {error.msg}") from None
    return ConvertResult(source, output, tuple(findings))
