"""convert's output is check-clean: check runs on every script convert produces, before it is written.

check finds in a converted script each hazard convert warned about and left
there (``rules.REPORTED_IN_OUTPUT``). Anything else check finds is a hazard
convert made or missed without a word:

- an error of check's, or a broken obligation of the conversion itself (a
  training loader not split, an epoch that never advances, the model's own
  method called on the wrapper), is ``DDP110``, an error: the file is left as
  it was, and the finding names what to fix;
- any other warning of check's is passed on as ``DDP111``, at the line of the
  original it came from;
- where check knows the edit that makes its finding right, convert makes it,
  and says so in a note, ``DDP112``.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from dp2ddp.analysis.roles import ModuleRole
from dp2ddp.check import Diagnostic, Selection, check_admitted
from dp2ddp.codemods._base import Finding
from dp2ddp.rules import EXPLAINED_IN_OUTPUT, REPORTED_IN_OUTPUT, RULES

# Check warnings that in a converted script mean training differs from DataParallel's, so convert must not
# leave them: the batches not split (DDP540), a split loader never advanced (DDP506), and a method of the
# model called on the DDP wrapper (DDP533).
BROKEN_OBLIGATIONS = frozenset({"DDP540", "DDP506", "DDP533"})


def unreported(
    source: str, output: str, findings: Iterable[Finding], role: ModuleRole | None
) -> tuple[str, list[Finding]]:
    """``output`` with check's fixes made for what it finds there and no warning among ``findings`` accounts
    for, and the findings about it, at lines of ``source``: a note for each fix, ``DDP110``/``DDP111`` for
    the rest.

    ``source`` and ``output`` are admitted already; this runs in the room ``api.deeply`` gives.
    """
    accounted = set().union(
        *(REPORTED_IN_OUTPUT.get(f.code, frozenset()) | EXPLAINED_IN_OUTPUT.get(f.code, frozenset()) for f in findings if f.severity == "warning")
    )
    lines = _original_lines(source, output)
    found: list[Finding] = []
    diagnostics = [d for d in check_admitted(output, role).diagnostics if d.code not in accounted]
    fixable = sorted({d.code for d in diagnostics if d.fixable})
    if fixable:
        # Check knows the edit that makes these right (`model.module` on both sides of a branch): make it.
        fixed = check_admitted(output, role, Selection(select=tuple(fixable))).fixed
        if fixed != output:
            found += [_finding("DDP112", d, lines) for d in diagnostics if d.fixable]
            output = fixed
            lines = _original_lines(source, output)
            diagnostics = [d for d in check_admitted(output, role).diagnostics if d.code not in accounted]
    for diagnostic in diagnostics:
        code = "DDP110" if diagnostic.severity == "error" or diagnostic.code in BROKEN_OBLIGATIONS else "DDP111"
        found.append(_finding(code, diagnostic, lines))
    return output, found


def _finding(code: str, diagnostic: Diagnostic, lines: dict[int, tuple[int, bool]]) -> Finding:
    rule = RULES[code]
    message = rule.message.format(check=diagnostic.code, line=diagnostic.line, message=diagnostic.message.rstrip("."))
    line, same = lines.get(diagnostic.line, (1, False))
    return Finding(code, message, line, diagnostic.column if same else 1, rule.severity)


def _original_lines(source: str, output: str) -> dict[int, tuple[int, bool]]:
    """For each line of ``output`` (1-based): the line of ``source`` it is, or that its edited block replaced
    or follows; and whether it is that line unchanged."""
    matcher = difflib.SequenceMatcher(None, source.splitlines(), output.splitlines(), autojunk=False)
    lines: dict[int, tuple[int, bool]] = {}
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        for offset, j in enumerate(range(j1, j2)):
            if tag == "equal":
                lines[j + 1] = (i1 + offset + 1, True)
            else:
                lines[j + 1] = (max(min(i1 + offset, i2 - 1), i1, 0) + (1 if i2 > i1 else 0), False)
    return lines
