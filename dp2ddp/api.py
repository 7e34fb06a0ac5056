"""Source text in, converted text and findings out. No printing, no file I/O."""

from __future__ import annotations

import ast
import difflib
import inspect
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import libcst as cst
import libcst.matchers as m
from libcst.codemod import Codemod, CodemodContext, SkipFile

from dp2ddp.codemods import codemods, groups
from dp2ddp.analysis.module import Analysis
from dp2ddp.analysis.names import is_data_parallel_like
from dp2ddp.analysis.project import runs_inference_only
from dp2ddp.analysis.roles import ModuleRole
from dp2ddp.codemods._base import FINDINGS_KEY, QUIET_KEY, Finding
from dp2ddp.analysis import names
from dp2ddp.analysis.loaders import is_training_loader
from dp2ddp.analysis.syntax import call_to, code_of
from dp2ddp.rules import RULES
from dp2ddp.codemods._chain import ChainedTransformer, apply_queued_imports
# What convert takes and gives back, and its prefilter, load without LibCST; importable from here too.
from dp2ddp.conversion import (  # noqa: F401
    BATCH_MODES,
    INFERENCE_ONLY,
    NO_DATA_PARALLEL,
    BatchMode,
    ConversionError,
    ConvertOptions,
    ConvertResult,
    unconverted,
)
from dp2ddp.nesting import run_deep, syntax_error, too_deep
from dp2ddp.prefilter import CONVERT_WORDS, needs_analysis

T = TypeVar("T")


def select_codemods(only: Sequence[str] = (), skip: Sequence[str] = ()) -> list[type[Codemod]]:
    """The codemods to run, in registry order; unknown names raise ``ValueError``."""
    unknown = sorted((set(only) | set(skip)) - codemods().keys())
    if unknown:
        raise ValueError(f"unknown codemod {', '.join(unknown)}; choose from {', '.join(codemods())}")
    return [cls for name, cls in codemods().items() if (not only or name in only) and name not in skip]


def _selected_groups(options: ConvertOptions) -> list[list[type[Codemod]]]:
    selected = set(select_codemods(options.only, options.skip))
    found = [[codemods()[name] for name in group if codemods()[name] in selected] for group in groups()]
    return [group for group in found if group]


def convert_source(source: str, options: ConvertOptions = ConvertOptions(), role: ModuleRole | None = None) -> ConvertResult:
    """Convert one DataParallel script to DDP; ``role`` is what a project says about this module.

    Raises ``ValueError`` for unknown codemod names and ``ConversionError``
    when the source does not parse or the conversion would not be sound.
    """
    codemod_groups = _selected_groups(options)
    admit(source)
    if not _role_needs_analysis(role, source) and not needs_analysis(source):
        # Settled from tokens, before LibCST.
        return unconverted(source)
    return deeply(source, _convert_admitted, source, codemod_groups, options, role)


def _role_needs_analysis(role: ModuleRole | None, source: str) -> bool:
    """Whether the project makes this module's analysis needed whatever it wraps: it converts for the program,
    wraps in a project class, or may test a model it is handed with ``isinstance(m, nn.DataParallel)``."""
    if role is None:
        return False
    return role.converts or bool(role.subclass_wraps) or (role.meets_wrapped_models and "DataParallel" in source)


def admit(source: str) -> None:
    """Raise CPython's own error in ``source`` before LibCST sees it: a syntax error, or nesting Python refuses.

    Run in the caller's thread, at the interpreter's own recursion limit, so
    that what passes is no deeper than Python itself runs.
    """
    error = syntax_error(source)
    if error is not None:
        raise error


def deeply(source: str, work: Callable[..., T], *args: object) -> T:
    """``work(*args)`` on an admitted ``source``, with room for its nesting; past that, a ``ConversionError``
    that says so."""
    try:
        return run_deep(work, *args)
    except RecursionError:
        raise too_deep(source) from None


def _convert_admitted(
    source: str, codemod_groups: list[list[type[Codemod]]], options: ConvertOptions, role: ModuleRole | None
) -> ConvertResult:
    module = None
    if not _role_needs_analysis(role, source):
        # Settled from the bare tree, before any metadata is resolved.
        if not _wraps_or_imports_data_parallel(module := parse_admitted(source)):
            return unconverted(source)
    analysis = Analysis(module if module is not None else parse_admitted(source), role)
    if role is None and analysis.script_facts.model_wraps and runs_inference_only(ast.parse(source)):
        return ConvertResult(source, source, (), INFERENCE_ONLY)
    output, findings = _convert(analysis, codemod_groups, options)
    if output != source:
        _check_stable(source, output, codemod_groups, options, role)
        if role is None and not options.attributing:
            # A project's files are checked together, once their helpers have moved to the project's module.
            output, findings = with_output_checked(source, output, findings, role)
    unique = sorted(set(findings), key=lambda f: (f.line, f.column, f.code))
    reason = None if output != source or any(f.severity == "error" for f in unique) else _unchanged(analysis, unique)
    return ConvertResult(source, output, tuple(unique), reason)


def with_output_checked(
    source: str, output: str, findings: list[Finding], role: ModuleRole | None
) -> tuple[str, list[Finding]]:
    """``output`` and ``findings`` with what check finds in the output and convert did not report; the source
    unchanged, with every error and warning, when check finds an error there."""
    from dp2ddp.output_check import unreported  # check reads convert's results: imported once both are loaded

    checked, found = unreported(source, output, findings, role)
    if any(finding.severity == "error" for finding in found):
        return source, [finding for finding in findings + found if finding.severity != "note"]
    return checked, findings + found


def _unchanged(analysis: Analysis, findings: list[Finding]) -> str | None:
    """Why convert changed nothing in a file that mentions DataParallel, unless a finding says so."""
    facts = analysis.script_facts
    if facts.existing_distributed is not None or facts.unresolved_wraps:
        return None  # DDP001 or DDP102 says why.
    if facts.helper_wraps:
        return "converted already: nothing is left to change"
    if not facts.model_wraps:
        return "it mentions DataParallel but wraps no whole model in it: nothing to convert"
    return None


# -- deciding early -------------------------------------------------------------------

# Python spellings that can call or import DataParallel, or call a wrap dp2ddp made.
_CANDIDATE_WORDS = CONVERT_WORDS

def _wraps_or_imports_data_parallel(module: cst.Module) -> bool:
    """Whether the tree calls, imports or subclasses a DataParallel name (by spelling).

    A file that only tests ``isinstance(m, nn.DataParallel)`` or reads the
    name otherwise wraps nothing, so it needs no metadata at all.
    """
    finder = _CandidateFinder()
    module.visit(finder)
    return finder.found


class _CandidateFinder(cst.CSTVisitor):
    def __init__(self) -> None:
        self.found = False

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.Call):
            self.found |= _spelled(node.func)
        elif isinstance(node, cst.ImportAlias):
            self.found |= any(part in _CANDIDATE_WORDS for part in code_of(node.name).split("."))
        elif isinstance(node, cst.ClassDef):
            self.found |= any(_spelled(base.value) for base in node.bases)
        return not self.found


def _spelled(expression: cst.BaseExpression) -> bool:
    name = expression.attr if isinstance(expression, cst.Attribute) else expression
    return isinstance(name, cst.Name) and (name.value in _CANDIDATE_WORDS or is_data_parallel_like(name.value))


# -- converting -------------------------------------------------------------------------


def parse_source(source: str) -> cst.Module:
    """The tree of ``source``; a syntax error raises ``ConversionError`` at CPython's position.

    Visiting the tree of deeply nested code needs ``run_deep``'s room, as ``check_source`` gives it.
    """
    admit(source)
    return deeply(source, parse_admitted, source)


def parse_admitted(source: str) -> cst.Module:
    """LibCST's tree of a source ``admit`` passed; its own syntax errors raise ``ConversionError``."""
    try:
        return cst.parse_module(source)
    except cst.ParserSyntaxError as error:
        # CPython accepted the source (``admit``), so this is syntax LibCST alone refuses.
        mixed = _first_mixed_indentation(source)
        if mixed is not None:
            raise ConversionError(
                "cannot parse a file CPython accepts: this line's indentation mixes tabs and spaces, which "
                "CPython reads with tabs 8 columns wide and LibCST may not; re-indent the file with spaces "
                "(for example `expand -i -t 8`), then run convert again",
                mixed,
                1,
            ) from None
        raise ConversionError(f"cannot parse: {error.message}", error.raw_line, error.raw_column + 1) from None


def _first_mixed_indentation(source: str) -> int | None:
    """The first line whose indentation holds both a tab and a space, if any."""
    for number, line in enumerate(source.splitlines(), 1):
        indent = line[: len(line) - len(line.lstrip(" \t"))]
        if "\t" in indent and " " in indent and line.strip():
            return number
    return None


def _convert(
    analysis: Analysis, codemod_groups: list[list[type[Codemod]]], options: ConvertOptions
) -> tuple[str, list[Finding]]:
    """Apply each group of codemods in one traversal; one analysis per group that changes the code."""
    facts = analysis.script_facts
    if facts.existing_distributed is not None or not (facts.converts_to_ddp or analysis.role.converts):
        # Settled by this analysis: the script is left as it is, and the codemods say why.
        settled = [finding for group in codemod_groups for finding in _plan_only(analysis, group, options)]
        if facts.unresolved_wraps and facts.existing_distributed is None:
            settled += _findings_with_torch_assumed(analysis, codemod_groups, options)
        if (facts.subclass_wraps or facts.foreign_wraps) and not facts.model_wraps and facts.existing_distributed is None:
            settled += _findings_with_wraps_assumed(analysis, codemod_groups, options)
        return _accepting_ddp(analysis, codemod_groups, options), settled
    if analysis.lifecycle.blocked:
        refusal = [finding for group in codemod_groups for finding in _plan_only(analysis, group, options)]
        return analysis.code, refusal + _findings_past_the_refusal(analysis, codemod_groups, options)
    code, findings = analysis.code, ([] if options.attributing else _left_open(analysis, codemod_groups))
    for code, reported in _groups_applied(analysis, codemod_groups, options):
        findings += reported
    if any(finding.severity == "error" for finding in findings):
        # A codemod found something no edit makes safe (an unsplit training loader): the file stays as it
        # was, and every error and warning is listed at once. Notes said what was changed, so they go.
        return analysis.code, [finding for finding in findings if finding.severity != "note"]
    return code, findings


# Codemods whose work the rest of a conversion relies on: what each leaves open when an option leaves it out.
_REQUIRED = {
    "replace_data_parallel": (
        "the model stays in DataParallel",
        "under torchrun each process would train its own replica on its share of the data, and the replicas "
        "would never synchronise",
    ),
    "add_distributed_sampler": (
        "this training loader is not split across processes",
        "every process would train on all the data, each epoch the same for every process",
    ),
}


def _left_open(analysis: Analysis, codemod_groups: list[list[type[Codemod]]]) -> list[Finding]:
    """An error at each wrap or training loader whose codemod ``--skip``/``--only`` left out."""
    selected = {codemod.__module__.rsplit(".", 1)[-1] for group in codemod_groups for codemod in group}
    found: list[Finding] = []
    for codemod, (what, why) in _REQUIRED.items():
        if codemod in selected:
            continue
        if codemod == "replace_data_parallel":
            sites: list[cst.CSTNode] = list(analysis.script_facts.model_wraps)
        else:
            loaders = [call for call in analysis.nodes(cst.Call) if analysis.matches(call, call_to(names.DATA_LOADER))]
            sites = [call for call in loaders if is_training_loader(call, _bound_to(analysis, call), len(loaders) == 1)]
        rule = RULES["DDP107"]
        for site in sites:
            start = analysis.position(site).start
            message = rule.message.format(what=what, codemod=codemod, why=why)
            found.append(Finding("DDP107", message, start.line, start.column + 1, rule.severity))
    return found


def _bound_to(analysis: Analysis, call: cst.Call) -> cst.BaseExpression | None:
    parent = analysis.parents.get(call)
    return parent.targets[0].target if isinstance(parent, cst.Assign) and len(parent.targets) == 1 else None


def _groups_applied(
    analysis: Analysis, codemod_groups: list[list[type[Codemod]]], options: ConvertOptions
) -> Iterator[tuple[str, list[Finding]]]:
    """The code after each group, and what the group reported.

    Findings are placed in the source as given: each group reports positions
    in the code it analysed, mapped back through the edits of the groups before it.
    """
    code = analysis.code
    edits: list[list[tuple[str, int, int, int, int]]] = []
    added_imports: set[object] = set()
    for position, group in enumerate(codemod_groups):
        if position and code != analysis.code:
            analysis = Analysis(_parse_output(code), analysis.role)
        output, reported = _apply_group(analysis, group, options, added_imports)
        findings = []
        for finding in reported:
            line = finding.line
            for opcodes in reversed(edits):
                line = _line_before(line, opcodes)
            findings.append(Finding(finding.code, finding.message, line, finding.column, finding.severity))
        if output != code:
            edits.append(difflib.SequenceMatcher(None, code.splitlines(), output.splitlines(), autojunk=False).get_opcodes())
            code = output
        yield code, findings


def _findings_with_wraps_assumed(
    analysis: Analysis, codemod_groups: list[list[type[Codemod]]], options: ConvertOptions
) -> list[Finding]:
    """What the conversion would also report once each wrap in a DataParallel subclass or look-alike is a plain
    ``nn.DataParallel(model)`` (DDP229's and DDP234's advice), so that following it surfaces nothing new.

    Each such call, on one line, becomes ``torch.nn.DataParallel(<its model>)`` in place, and ``torch`` is
    imported on the line of the last top-level import: every line stays where it is. Notes go: nothing was changed.
    """
    facts = analysis.script_facts
    calls = {*facts.subclass_wraps, *facts.foreign_wraps}
    if any(analysis.position(call).start.line != analysis.position(call).end.line or not call.args for call in calls):
        return []

    class Plain(cst.CSTTransformer):
        def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
            if original not in calls:
                return updated
            model = updated.args[0].with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT, comma=cst.MaybeSentinel.DEFAULT)
            return updated.with_changes(func=cst.parse_expression("torch.nn.DataParallel"), args=[model])

    imports = [s for s in analysis.module.body if m.matches(s, m.SimpleStatementLine(body=[m.Import() | m.ImportFrom()]))]
    if not imports:
        return []
    line = analysis.position(imports[-1]).end.line
    lines = analysis.module.visit(Plain()).code.splitlines(keepends=True)
    text = lines[line - 1]
    lines[line - 1] = text.rstrip("\r\n") + "; import torch" + text[len(text.rstrip("\r\n")) :]
    try:
        assumed = Analysis(parse_admitted("".join(lines)), analysis.role)
        _, found = _convert(assumed, codemod_groups, options)
    except Exception:  # extra findings only: DDP229 or DDP234 alone still says why the file was left as it was
        return []
    return [finding for finding in found if finding.severity != "note" and finding.code not in ("DDP229", "DDP234")]


def _findings_with_torch_assumed(
    analysis: Analysis, codemod_groups: list[list[type[Codemod]]], options: ConvertOptions
) -> list[Finding]:
    """What the conversion would also report once `torch` is imported by name (DDP102's advice), so that
    following that advice surfaces nothing new: the file analysed with the usual torch names bound on the
    line of its last star import, which keeps every line where it is. Notes go: nothing was changed."""
    stars = [
        node for node in analysis.nodes(cst.ImportFrom)
        if isinstance(node.names, cst.ImportStar) and isinstance(analysis.parents.get(node), cst.SimpleStatementLine)
    ]  # fmt: skip
    if not stars:
        return []
    line = analysis.position(stars[-1]).end.line
    lines = analysis.code.splitlines(keepends=True)
    text = lines[line - 1]
    ending = text[len(text.rstrip("\r\n")) :]
    lines[line - 1] = text.rstrip("\r\n") + "; import torch; import torch.nn as nn; import torch.nn.functional as F" + ending
    try:
        assumed = Analysis(parse_admitted("".join(lines)), analysis.role)
        _, found = _convert(assumed, codemod_groups, options)
    except Exception:  # extra findings only: DDP102 alone still says why the file was left as it was
        return []
    return [finding for finding in found if finding.severity != "note" and finding.code != "DDP102"]


def _findings_past_the_refusal(
    analysis: Analysis, codemod_groups: list[list[type[Codemod]]], options: ConvertOptions
) -> list[Finding]:
    """The errors and warnings the conversion would also report once the life-cycle's blockers are fixed.

    A refused file is left as it was, but its other hazards should not surface
    one fix by hand at a time. So every group plans and edits in memory as if
    the blockers were absent, and the output is thrown away. Notes are dropped:
    they say what convert changed, and here it changed nothing. These findings
    are extra, so a codemod that fails on a tree it would never have edited
    costs only the findings after it, never the refusal itself.
    """
    found: list[Finding] = []
    analysis.lifecycle.blockers_waived = True
    try:
        for _, reported in _groups_applied(analysis, codemod_groups, options):
            found += reported
    except Exception:  # the refusal's own findings still say why the file was left as it was
        pass
    finally:
        analysis.lifecycle.blockers_waived = False
    return [finding for finding in found if finding.severity != "note"]


def _apply_group(
    analysis: Analysis,
    group: list[type[Codemod]],
    options: ConvertOptions,
    added_imports: set[object],
    quiet: bool = False,
) -> tuple[str, list[Finding]]:
    """Plan every codemod of ``group`` against ``analysis``, then make their edits in one traversal."""
    planned = []
    contexts: list[CodemodContext] = []
    name = ""
    chain: ChainedTransformer | None = None
    try:
        for codemod in group:
            name = codemod.__module__.rsplit(".", 1)[-1]
            kwargs = {}
            if "batch" in inspect.signature(codemod.__init__).parameters:
                kwargs["batch"] = options.batch
            # One context each: LibCST's runner adds each codemod's imports after it ran,
            # and their order in the output follows from that.
            context = CodemodContext(scratch={QUIET_KEY: True} if quiet else {})
            contexts.append(context)
            instance = codemod(context, **kwargs)
            try:
                instance.plan(analysis)  # type: ignore[attr-defined]
            except SkipFile:
                continue
            planned.append(instance)
        chain = ChainedTransformer(planned)
        rebuilt = analysis.module.visit(chain) if planned else analysis.module
        name = ""  # past the codemods: the imports they queued
        tree = apply_queued_imports(rebuilt, contexts, added_imports)
    except RecursionError:
        raise  # deep code, not a codemod bug: the caller says so
    except Exception as error:  # a codemod bug must not cost the user a traceback or a half-written file
        if chain is not None and chain.active is not None:
            name = type(chain.active).__module__.rsplit(".", 1)[-1]
        # No option is suggested: skipping a codemod leaves its part of the program unconverted (DDP107).
        where = f"codemod {name}" if name in codemods() else "adding imports"
        raise ConversionError(
            f"internal error in {where} ({type(error).__name__}); the file is left unchanged: please report this script"
        ) from error
    # A traversal in which no codemod returned a new node, and no import was added, rebuilt the
    # tree it was given: its code is the analysed code, which is generated once (the stability
    # check's usual case: a stable output gives each group nothing to do).
    unchanged = tree is rebuilt and not chain.edited
    code = analysis.code if unchanged else tree.code
    return code, [finding for context in contexts for finding in context.scratch.get(FINDINGS_KEY, [])]


def _accepting_ddp(analysis: Analysis, codemod_groups: list[list[type[Codemod]]], options: ConvertOptions) -> str:
    """A module of a DDP program that wraps nothing itself, with its ``isinstance(m, nn.DataParallel)`` tests
    made to hold for the DDP model it is handed (``is_model_2d(model)``); any other module as it is."""
    replacing = [c for group in codemod_groups for c in group if c.__name__ == "ReplaceDataParallelCommand"]
    if not (replacing and analysis.role.meets_wrapped_models and analysis.script_facts.existing_distributed is None):
        return analysis.code
    code = analysis.code
    for code, _ in _groups_applied(analysis, [replacing], options):
        pass
    return code


def _plan_only(analysis: Analysis, group: list[type[Codemod]], options: ConvertOptions) -> list[Finding]:
    """What the codemods that look at any DataParallel mention report, without editing."""
    context = CodemodContext()
    for codemod in group:
        if getattr(codemod, "RUNS_ON_MENTION", False):
            name = codemod.__module__.rsplit(".", 1)[-1]
            try:
                codemod(context).plan(analysis)  # type: ignore[attr-defined]
            except SkipFile:
                pass
            except RecursionError:
                raise  # deep code, not a codemod bug: the caller says so
            except Exception as error:  # a codemod bug must not cost the user a traceback
                raise ConversionError(
                    f"internal error in codemod {name} ({type(error).__name__}); the file is left unchanged: "
                    "please report this script"
                ) from error
    return list(context.scratch.get(FINDINGS_KEY, []))


def _parse_output(code: str) -> cst.Module:
    try:
        return cst.parse_module(code)
    except cst.ParserSyntaxError as error:
        raise ConversionError(f"internal error: the converted script does not parse: {error.message}") from None


def _check_stable(
    source: str,
    output: str,
    codemod_groups: list[list[type[Codemod]]],
    options: ConvertOptions,
    role: ModuleRole | None = None,
) -> None:
    """black's rule: the result compiles, and converting it again changes nothing.

    Converting a stable result changes nothing in any group, so every group
    plans against the one analysis of the output, and all the codemods, group
    after group, make their edits in one traversal of it: the second group's
    tree is the first group's output, which a stable first group returns
    unchanged. Any edit, in either group, makes the traversal's code differ
    from the output, and the check fails as it would group by group.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the script's own `x is 1` is not the conversion's business
            compile(output, "<converted>", "exec", dont_inherit=True)
    except SyntaxError as error:
        # CPython compiled the script (``admit``): the conversion broke it.
        raise ConversionError(f"internal error: the converted script does not compile: {error.msg}") from None
    analysis = Analysis(_parse_output(output), role)
    again, _ = _apply_group(analysis, [codemod for group in codemod_groups for codemod in group], options, set(), quiet=True)
    if again != output:
        raise ConversionError("internal error: the conversion is not stable; please report this script")


def _line_before(line: int, opcodes: list[tuple[str, int, int, int, int]]) -> int:
    """The 1-based line in the old text that became ``line`` in the new one."""
    index = line - 1
    for tag, old_start, _old_end, new_start, new_end in opcodes:
        if new_start <= index < new_end:
            return old_start + (index - new_start if tag == "equal" else 0) + 1
    return line
