"""Source text in, diagnostics and the safely fixed text out, for ``dp2ddp check``. No printing, no file I/O.

``check`` reads the same analysis ``convert`` plans against, and finds in a
converted script every hazard convert warned about and left there
(``rules.REPORTED_IN_OUTPUT``; tests/test_agreement.py holds the goldens to it):

- a script that still wraps a model in ``nn.DataParallel`` gets ``DDP002``
  at each wrap, fixed by converting the file, and convert's own errors, the
  hazards that stop a conversion;
- a script that starts a process group or builds DDP (converted or written
  by hand) gets the hazards ``dp2ddp/hazards.py`` finds.
"""

from __future__ import annotations

import io
import re
import tokenize

import libcst as cst

from dp2ddp.api import ConversionError, admit, convert_source, deeply, parse_admitted
from dp2ddp.analysis import names
from dp2ddp.analysis.module import Analysis
from dp2ddp.analysis.script import ScriptFacts
from dp2ddp.analysis.roles import ModuleRole
from dp2ddp.hazards import DistributedHazards
from dp2ddp.rules import RULES
# What check reports, and its prefilter, live where the CLI reads them without LibCST; importable from here too.
from dp2ddp.diagnostics import SEVERITY_ORDER, CheckResult, Diagnostic, Selection, fails  # noqa: F401
from dp2ddp.prefilter import needs_check

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)


def check_source(source: str, selection: Selection = Selection(), role: ModuleRole | None = None) -> CheckResult:
    """The diagnostics of one script; ``role`` says what the project's other modules do. Raises
    ``ConversionError`` when it does not parse."""
    admit(source)
    if not needs_check(source):
        return CheckResult(source, (), source)
    return deeply(source, _check_admitted, source, selection, role)


def check_admitted(source: str, role: ModuleRole | None = None, selection: Selection = Selection()) -> CheckResult:
    """``check_source`` for a source admitted already, in the room ``api.deeply`` gave: convert's output."""
    if not needs_check(source):
        return CheckResult(source, (), source)
    return _check_admitted(source, selection, role)


def _check_admitted(source: str, selection: Selection, role: ModuleRole | None) -> CheckResult:
    analysis = Analysis(parse_admitted(source), role)
    found: dict[Diagnostic, cst.CSTNode | None] = {}
    facts = analysis.script_facts
    converted: str | None = None
    # A converted script (it calls dp2ddp's helpers) runs DDP: what DataParallel convert left in it is a DDP hazard.
    if facts.mentions_data_parallel and facts.existing_distributed is None and not _converted(facts):
        converted = _data_parallel(analysis, source, found)
    else:
        try:
            hazards = DistributedHazards(analysis)
        except RecursionError:
            raise  # deep code, not a rule's bug: check_source says so
        except Exception as error:  # a rule's bug must not cost the user a traceback
            raise ConversionError(
                f"internal error in check ({type(error).__name__}: {error}); please report this script, "
                "or leave it out with --exclude"
            ) from error
        for hazard in hazards.hazards:
            rule = RULES[hazard.code]
            where = analysis.position(hazard.node)
            fix = next((node for node in hazards.fixes if _within(analysis, hazard.node, node)), None)
            diagnostic = Diagnostic(
                hazard.code, rule.message.format(**dict(hazard.values)), where.start.line, where.start.column + 1,
                where.end.line, where.end.column + 1, rule.severity, fix is not None,
            )  # fmt: skip
            found.setdefault(diagnostic, fix)
        fixes = hazards.fixes
    suppressed = _noqa(source)
    kept = sorted(
        (d for d in found if selection.wants(d.code) and not _suppressed(d, suppressed)),
        key=lambda d: (d.line, d.column, d.code),
    )
    fixed = source
    if any(d.fixable for d in kept):
        if converted is not None:
            fixed = converted
        else:
            wanted = {found[d]: fixes[found[d]] for d in kept if found[d] is not None}  # type: ignore[index]
            fixed = analysis.module.visit(_Replace(wanted)).code
    return CheckResult(source, tuple(kept), fixed)


def _converted(facts: ScriptFacts) -> bool:
    return facts.helper_wraps > 0 or names.SETUP_HELPER in facts.helpers


def _within(analysis: Analysis, node: cst.CSTNode, container: cst.CSTNode) -> bool:
    return analysis.index[container] <= analysis.index[node] <= analysis.last[container]


def _data_parallel(analysis: Analysis, source: str, found: dict[Diagnostic, cst.CSTNode | None]) -> str | None:
    """``DDP002`` at each DataParallel wrap, fixable when convert changes the file, and convert's errors."""
    try:
        result = convert_source(source)
    except ConversionError:
        result = None  # convert cannot: the wraps are still reported, with no fix
    fixable = result is not None and result.changed
    facts = analysis.script_facts
    rule = RULES["DDP002"]
    for call in sorted({*facts.model_wraps, *facts.submodule_wraps}, key=lambda c: analysis.index[c]):
        where = analysis.position(call)
        diagnostic = Diagnostic(
            "DDP002", rule.message.format(call=_spelled(call)), where.start.line, where.start.column + 1,
            where.end.line, where.end.column + 1, rule.severity, fixable,
        )  # fmt: skip
        found[diagnostic] = None
    for finding in result.findings if result is not None else ():
        if finding.severity == "error":
            diagnostic = Diagnostic(finding.code, finding.message, finding.line, finding.column, finding.line,
                                    finding.column, finding.severity)  # fmt: skip
            found[diagnostic] = None
    return result.output if fixable and result is not None else None


def _spelled(call: cst.Call) -> str:
    return cst.Module([]).code_for_node(call.func)


def _noqa(source: str) -> dict[int, frozenset[str] | None]:
    """Line -> the codes its ``# noqa: CODE`` comment suppresses; ``None`` for a bare ``# noqa`` (every code)."""
    found: dict[int, frozenset[str] | None] = {}
    if "noqa" not in source:
        return found
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type != tokenize.COMMENT:
                continue
            match = _NOQA.search(token.string)
            if match is not None:
                codes = match.group("codes")
                found[token.start[0]] = None if codes is None else frozenset(re.split(r"[\s,]+", codes.upper()))
    except (tokenize.TokenError, SyntaxError):
        pass
    return found


def _suppressed(diagnostic: Diagnostic, suppressed: dict[int, frozenset[str] | None]) -> bool:
    """A ``# noqa`` on any line the flagged node spans, as flake8 reads one on a multi-line statement's lines."""
    for line in range(diagnostic.line, diagnostic.end_line + 1):
        if line in suppressed:
            codes = suppressed[line]
            if codes is None or diagnostic.code in codes:
                return True
    return False


class _Replace(cst.CSTTransformer):
    def __init__(self, replacements: dict[cst.CSTNode, cst.CSTNode]) -> None:
        self.replacements = replacements

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> cst.CSTNode:  # type: ignore[override]
        return self.replacements.get(original_node, updated_node)
