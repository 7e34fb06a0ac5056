"""The migration report ``convert --report`` writes for a pull request. No printing, no file I/O.

For each file it says what each codemod changed, at which lines of the script
as written; which findings need a human, with why and what to write instead;
and what the conversion does to the batch size and the learning rate.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from dp2ddp import __version__
from dp2ddp.analysis.roles import ModuleRole
from dp2ddp.api import ConversionError, ConvertOptions, convert_source, select_codemods
from dp2ddp.batch import FileResult
from dp2ddp.codemods import codemods
from dp2ddp.codemods._base import Finding
from dp2ddp.rules import RULES, section, values_of

# Suffix -> format; the suffix alone decides, so a report never needs a second option.
FORMATS: dict[str, str] = {".md": "markdown", ".json": "json"}

# Stands in for a codemod's name when the changes could not be attributed one codemod at a time.
ALL_CODEMODS = "all codemods"
# The last step of a project's conversion: the helpers leave the file for the helpers module.
HELPERS_MODULE = "helpers module"

# The findings that change the batch a step sees or the scale of its gradient, and what that means
# for the training run. Worded after the rules' messages; the findings' own messages carry the numbers.
BATCH_CONSEQUENCES: dict[str, str] = {
    "DDP307": (
        "Each process loads `batch_size // world_size` samples, so one optimizer step still sees the global "
        "batch DataParallel saw, and the learning rate needs no change. Where the batch does not divide by "
        "the number of processes, the remainder is dropped and the global batch shrinks slightly."
    ),
    "DDP308": (
        "Each process loads the whole batch (under `--batch per-process`, for a batch of 1, which cannot be "
        "split, or for a batch value that also sizes something per step), so one optimizer step sees world_size "
        "times the batch DataParallel saw. A learning rate tuned for the old batch may now be too small: under "
        "`--batch per-process` convert scales each optimizer's rate by the world size. Under `--batch global`, "
        "the default, convert divides a batch larger than 1 and keeps the global batch."
    ),
    "DDP309": (
        "On the process counts named, each process loads `batch_size // world_size` and the remainder is lost: "
        "the global batch, and the gradient's scale with it, shrink there. A batch that is a multiple of the "
        "process count keeps it exact."
    ),
    "DDP330": (
        "The linear scaling rule: the global batch grows by the world size, so the learning rate does too. "
        "The run takes world_size times fewer steps per epoch, each on world_size times the samples."
    ),
    "DDP331": (
        "This optimizer keeps the rate tuned for DataParallel's batch while each step now sees world_size times "
        "the samples: training is slower and differs from the DataParallel run until the rate is scaled by hand."
    ),
    "DDP332": (
        "The scheduler sets the rate from its own bounds on every step, so the optimizer's scaled rate has no "
        "effect until the bounds are scaled too."
    ),
    "DDP333": (
        "Each epoch has world_size times fewer steps under `--batch per-process`: the step count that sizes a "
        "schedule is divided by the world size, so the schedule still ends with the last epoch."
    ),
    "DDP334": (
        "If this counts steps per epoch, it is world_size times too large under `--batch per-process`, and a "
        "schedule built on it never reaches its end."
    ),
    "DDP335": (
        "The GPU count that scaled DataParallel's batch is now the world size: the same number on one node, and "
        "the right one on several. A worker count loses the factor, since each process has its own loader."
    ),
    "DDP318": (
        "The script scales a batch size or a worker count by the GPU count, as DataParallel needed. Under DDP "
        "every process has its own loader: a scaled worker count starts that many workers in each process, and "
        "a GPU count read on one node is not the world size on several. The line is left as it was."
    ),
    "DDP310": (
        "The loss sums over the batch and DDP averages gradients over processes, so backward now runs on "
        "`loss * world_size`: the gradient is the whole batch's sum, as under DataParallel, and the learning "
        "rate needs no change. The logged loss is unchanged."
    ),
    "DDP421": (
        "A counter of this process's share of the data sets the learning rate, so the schedule sees "
        "1/world_size of the data, and processes whose shares differ get different rates and drift apart. "
        "Sum the counter's increment over processes."
    ),
}

# What each `--batch` mode does, for the report's summary.
BATCH_MODES: dict[str, str] = {
    "global": "each process loads `batch_size // world_size`, so a step sees the global batch DataParallel saw",
    "per-process": (
        "each process loads `batch_size`, so a step sees world_size times DataParallel's batch, and the "
        "learning rates are scaled by the world size"
    ),
}

# blocked: unchanged because of an error finding, which a human must fix first.
Status = Literal["changed", "unchanged", "blocked", "failed"]
STATUSES: tuple[Status, ...] = ("changed", "unchanged", "blocked", "failed")


def format_of(path: Path) -> str:
    """``"markdown"`` or ``"json"``, from the report path's suffix; ``ValueError`` for any other."""
    found = FORMATS.get(path.suffix.lower())
    if found is None:
        raise ValueError(
            f"cannot tell the report's format from {path.name!r}: name it *.md for Markdown or *.json for JSON"
        )
    return found


@dataclass(frozen=True)
class Lines:
    """Where a change sits in the script as written, before any codemod ran."""

    # 1-based and inclusive; None for code that only earlier codemods added.
    first: int | None = None
    last: int | None = None
    # For code added between original lines: the line it follows (0: the top of the file).
    after: int | None = None

    def __str__(self) -> str:
        if self.first is not None and self.last is not None:
            return f"line {self.first}" if self.first == self.last else f"lines {self.first}-{self.last}"
        return "at the top" if not self.after else f"after line {self.after}"


@dataclass(frozen=True)
class Change:
    lines: Lines
    removed: tuple[str, ...]
    added: tuple[str, ...]


@dataclass(frozen=True)
class CodemodChanges:
    codemod: str
    description: str
    changes: tuple[Change, ...]


@dataclass(frozen=True)
class Item:
    """A finding, with the rule's reasoning when it has one."""

    code: str
    name: str
    severity: str
    line: int
    column: int
    message: str
    # "Why is this bad?" and the code of "Use instead", from the rule's documentation.
    why: str | None = None
    suggestion: str | None = None


@dataclass(frozen=True)
class Consequence:
    code: str
    name: str
    severity: str
    line: int
    column: int
    message: str
    consequence: str


@dataclass(frozen=True)
class LoaderBatch:
    """A training loader's global batch under DataParallel and after the conversion, from its DDP307 or DDP308."""

    line: int
    column: int
    before: str
    after: str
    # What each process loads per step.
    per_process: str


@dataclass(frozen=True)
class FileReport:
    path: str
    status: Status
    # Why an unchanged or blocked file was left as it was; for a failed file, the error.
    reason: str | None = None
    # False when per-codemod attribution did not reproduce the conversion: then one entry, ALL_CODEMODS.
    attributed: bool = True
    changes: tuple[CodemodChanges, ...] = ()
    needs_human: tuple[Item, ...] = ()
    batch: tuple[Consequence, ...] = ()
    # Notes, less those the batch section already explains.
    review: tuple[Item, ...] = ()
    # Each training loader's global batch, before and after.
    global_batch: tuple[LoaderBatch, ...] = ()


@dataclass(frozen=True)
class MigrationReport:
    tool: str
    # False under --diff and --check: the report describes changes that were not written.
    written: bool
    # Kept for readers of earlier reports: true exactly when `batch` is "per-process".
    keep_per_process_batch: bool
    files: tuple[FileReport, ...]
    # `--batch`: "global" (each process loads batch // world_size) or "per-process".
    batch: str = "global"


# -- building -------------------------------------------------------------------------------


def build(outcomes: Iterable[FileResult], options: ConvertOptions, written: bool) -> MigrationReport:
    """One report for every file, in the order given.

    Converts each changed file again once per codemod, to attribute the changes.
    """
    files = tuple(file_report(outcome, options) for outcome in outcomes)
    return MigrationReport(f"dp2ddp {__version__}", written, options.keep_per_process_batch, files, options.batch)


def file_report(outcome: FileResult, options: ConvertOptions) -> FileReport:
    path, result = str(outcome.path), outcome.result
    if result is None:
        return FileReport(path, "failed", reason=outcome.error)
    needs_human = tuple(_item(f) for f in result.findings if f.severity in ("error", "warning"))
    batch = tuple(_consequence(f) for f in result.findings if f.code in BATCH_CONSEQUENCES)
    review = tuple(_item(f) for f in result.findings if f.severity == "note" and f.code not in BATCH_CONSEQUENCES)
    loaders = tuple(filter(None, map(_loader_batch, result.findings)))
    if result.changed:
        changes, attributed = attribute(result.source, result.output, options, outcome.role)
        return FileReport(path, "changed", None, attributed, changes, needs_human, batch, review, loaders)
    errors = sum(f.severity == "error" for f in result.findings)
    if errors:
        which = "the error below is" if errors == 1 else f"the {errors} errors below are"
        reason = f"converting it would not be safe until {which} fixed by hand"
        return FileReport(path, "blocked", reason, True, (), needs_human, batch, review)
    # No reason and no error: a finding (DDP001) says why.
    return FileReport(path, "unchanged", result.reason, True, (), needs_human, batch, review, loaders)


def _loader_batch(finding: Finding) -> LoaderBatch | None:
    """The global batch a DDP307 (divided) or DDP308 (kept per process) states; None for any other finding."""
    if finding.code not in ("DDP307", "DDP308"):
        return None
    values = values_of(finding.code, finding.message)
    if values is None:
        return None
    batch = values["batch"]
    if finding.code == "DDP307":
        return LoaderBatch(finding.line, finding.column, batch, batch, f"{batch} // world_size")
    return LoaderBatch(finding.line, finding.column, batch, f"{batch} * world_size", batch)


def attribute(
    source: str, output: str, options: ConvertOptions, role: ModuleRole | None = None
) -> tuple[tuple[CodemodChanges, ...], bool]:
    """Each codemod's changes, and whether attributing them reproduced ``output``.

    Converting with the first k codemods for each k is consistent because a
    codemod reads only the plans of codemods before it; the difference between
    consecutive prefixes is the k-th codemod's work.
    """
    selected = set(select_codemods(options.only, options.skip))
    names = [name for name, cls in codemods().items() if cls in selected]
    original = source.splitlines()
    found: list[CodemodChanges] = []
    before: str | None = source
    for count, name in enumerate(names, start=1):
        prefix = dataclasses.replace(options, only=tuple(names[:count]), skip=(), attributing=True)
        try:
            after = convert_source(source, prefix, role).output
        except ConversionError:
            # A prefix that converts unsoundly alone says nothing about the whole conversion.
            before = None
            break
        changes = _changes(original, (before or "").splitlines(), after.splitlines())
        if changes:
            found.append(CodemodChanges(name, codemods()[name].DESCRIPTION, changes))
        before = after
    if before is not None and before != output and role is not None and role.helpers_module is not None:
        # In a project the helpers the codemods added move to the project's helpers module.
        changes = _changes(original, before.splitlines(), output.splitlines())
        found.append(CodemodChanges(HELPERS_MODULE, f"The added helpers move to `{role.helpers_module}`, imported here.", changes))
        before = output
    if before != output:
        # Better no attribution than a wrong one.
        everything = _changes(original, original, output.splitlines())
        return (CodemodChanges(ALL_CODEMODS, "The whole conversion, in one piece.", everything),), False
    return tuple(found), True


def _changes(original: list[str], before: list[str], after: list[str]) -> tuple[Change, ...]:
    """What turned ``before`` into ``after``, placed in ``original`` (of which ``before`` is a conversion)."""
    origin = _Origin(original, before)
    found = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        spans = [span for span in map(origin.lines, range(i1, i2)) if span is not None]
        if spans:
            lines = Lines(first=min(s[0] for s in spans), last=max(s[1] for s in spans))
        else:
            lines = Lines(after=origin.preceding(i1))
        found.append(Change(lines, tuple(before[i1:i2]), tuple(after[j1:j2])))
    return tuple(found)


class _Origin:
    """Maps lines of a partly converted text back to the script as written."""

    def __init__(self, original: list[str], text: list[str]) -> None:
        self._opcodes = difflib.SequenceMatcher(None, original, text, autojunk=False).get_opcodes()
        self._length = len(original)

    def lines(self, index: int) -> tuple[int, int] | None:
        """The 1-based original lines that ``text[index]`` stands for; None for a line a codemod added."""
        for tag, i1, i2, j1, j2 in self._opcodes:
            if j1 <= index < j2:
                if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
                    return i1 + index - j1 + 1, i1 + index - j1 + 1
                # A rewrite that changed the line count: the line stands for the whole rewritten block.
                return (i1 + 1, i2) if tag == "replace" else None
        return None

    def preceding(self, index: int) -> int:
        """How many original lines come before ``text[index]``: code inserted there is "after line N"."""
        for tag, i1, i2, j1, j2 in self._opcodes:
            if j1 <= index < j2:
                if tag == "equal":
                    return i1 + index - j1
                return i1 if tag == "insert" or index == j1 else i2
        return self._length


def _item(finding: Finding) -> Item:
    rule = RULES.get(finding.code)
    if rule is None:
        return Item(finding.code, "", finding.severity, finding.line, finding.column, finding.message)
    instead = section(rule.doc, "Use instead")
    return Item(
        finding.code, rule.name, finding.severity, finding.line, finding.column, finding.message,
        section(rule.doc, "Why is this bad?"), _code(instead) if instead is not None else None,
    )  # fmt: skip


def _code(markdown: str) -> str:
    """The code of the first fenced block in ``markdown``, or the text itself when it has none."""
    match = re.search(r"^(`{3,})[^\n]*\n(.*?)\n\1[ \t]*$", markdown, re.MULTILINE | re.DOTALL)
    return match.group(2) if match else markdown


def _consequence(finding: Finding) -> Consequence:
    rule = RULES.get(finding.code)
    return Consequence(
        finding.code, rule.name if rule is not None else "", finding.severity, finding.line, finding.column,
        finding.message, BATCH_CONSEQUENCES[finding.code],
    )  # fmt: skip


# -- rendering ------------------------------------------------------------------------------


def render(report: MigrationReport, kind: str) -> str:
    """The report as ``kind`` (a value of ``FORMATS``)."""
    return to_json(report) if kind == "json" else to_markdown(report)


def to_json(report: MigrationReport) -> str:
    return json.dumps(dataclasses.asdict(report), indent=2, ensure_ascii=False) + "\n"


# A change longer than this many lines is folded, so the report's outline stays readable.
FOLD_LINES = 12


def to_markdown(report: MigrationReport) -> str:
    out: list[str] = ["# DataParallel to DistributedDataParallel: migration report", "", _summary(report), ""]
    if not report.written:
        out += ["Nothing was written (`--diff` or `--check`): the changes below are those `convert` would make.", ""]
    if any(file.changes for file in report.files):
        out += ["Line numbers refer to each script as it was before the conversion.", ""]
    for file in report.files:
        out += _file_markdown(file, report.written)
    return "\n".join(out).rstrip("\n") + "\n"


def _summary(report: MigrationReport) -> str:
    counts = {status: sum(f.status == status for f in report.files) for status in STATUSES}
    files = [f"{counts['changed']} {_changed(report.written)}", f"{counts['unchanged']} unchanged"]
    if counts["blocked"]:
        kept = "it was" if counts["blocked"] == 1 else "they were"
        files.append(f"{counts['blocked']} left as {kept} (not safe to convert)")
    files.append(f"{counts['failed']} failed")
    human = sum(len(f.needs_human) for f in report.files)
    batch = sum(len(f.batch) for f in report.files)
    return "\n".join(
        [
            f"{report.tool}, {_count(len(report.files), 'file')}:",
            "",
            f"- {', '.join(files)}",
            f"- {_count(human, 'finding')} {'needs' if human == 1 else 'need'} a human",
            f"- {_count(batch, 'finding')} {'concerns' if batch == 1 else 'concern'} the batch size or learning rate",
            f"- `--batch {report.batch}`: {BATCH_MODES[report.batch]}",
        ]
    )


def _file_markdown(file: FileReport, written: bool) -> list[str]:
    status = {
        "changed": _changed(written),
        "unchanged": "unchanged",
        "blocked": "left as it was",
        "failed": "failed",
    }[file.status]
    out = [f"## {_inline(file.path)}: {status}", ""]
    if file.status == "failed":
        return out + [_fenced(file.reason or "unknown error", ""), ""]
    if file.reason is not None:
        left = "Left unchanged" if file.status == "unchanged" else "Left as it was"
        out += [f"{left}: {file.reason}.", ""]
    elif file.status == "unchanged":
        out += ["Left unchanged: the findings below say why.", ""]
    if file.changes:
        out += ["### What changed", ""]
        if not file.attributed:
            out += ["The changes could not be told apart codemod by codemod, so they are shown together.", ""]
        for group in file.changes:
            out += [f"#### {group.codemod}", "", group.description, ""]
            for change in group.changes:
                out += _change_markdown(change)
    if file.needs_human:
        out += [f"### Needs a human ({len(file.needs_human)})", ""]
        for item in file.needs_human:
            out += _item_markdown(item)
    if file.global_batch:
        out += ["### Global batch", "", "| Line | DataParallel | DDP | Each process loads |", "| --- | --- | --- | --- |"]
        out += [
            f"| {loader.line} | {_cell(loader.before)} | {_cell(loader.after)} | {_cell(loader.per_process)} |"
            for loader in file.global_batch
        ]
        out.append("")
    if file.batch:
        out += ["### Batch size and learning rate", ""]
        for consequence in file.batch:
            out += [
                f"- **{_where(consequence.line, consequence.column)}**, {consequence.code} {consequence.name} "
                + f"({consequence.severity}): {consequence.message}",
                "",
                f"  {consequence.consequence}",
                "",
            ]
    if file.review:
        out += ["### For review", ""]
        out += [f"- **{_where(i.line, i.column)}**, {i.code} {i.name}: {i.message}" for i in file.review]
        out.append("")
    return out


def _change_markdown(change: Change) -> list[str]:
    removed, added = len(change.removed), len(change.added)
    if removed and added:
        what = f"{_count(removed, 'line')} " + ("changed" if removed == added else f"replaced by {added}")
    else:
        what = f"{_count(removed, 'line')} removed" if removed else f"{_count(added, 'line')} added"
    where = str(change.lines)
    title = f"{where[0].upper()}{where[1:]} ({what})"
    diff = _fenced("\n".join(["-" + line for line in change.removed] + ["+" + line for line in change.added]), "diff")
    if removed + added > FOLD_LINES:
        # An HTML block needs blank lines around the fence for GitHub to render the fence inside it.
        return [f"<details><summary>{title}</summary>", "", diff, "", "</details>", ""]
    return [f"{title}:", "", diff, ""]


def _item_markdown(item: Item) -> list[str]:
    name = f" {item.name}" if item.name else ""
    out = [f"#### {_where(item.line, item.column)}: {item.code}{name} ({item.severity})", "", item.message, ""]
    if item.why is not None:
        out += [f"**Why:** {item.why}", ""]
    if item.suggestion is not None:
        out += [f"**Suggested change** (`dp2ddp explain {item.code}` has more):", ""]
        out += [_fenced(item.suggestion, "python"), ""]
    return out


def _changed(written: bool) -> str:
    return "converted" if written else "would be converted"


def _where(line: int, column: int) -> str:
    return f"Line {line}, column {column}"


def _fenced(text: str, language: str) -> str:
    # A fence longer than any run of backticks in the text, so the text cannot close it.
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
    return f"{fence}{language}\n{text}\n{fence}"


def _inline(text: str) -> str:
    fence = "`" * (1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
    return f"{fence}{text}{fence}" if "`" not in text else f"{fence} {text} {fence}"


def _cell(code: str) -> str:
    """Code in a table cell, where a ``|`` would end the cell."""
    return _inline(code).replace("|", "\\|")


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"

