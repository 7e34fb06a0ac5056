"""What ``dp2ddp check`` reports, and which of it the user asked for. Imports no LibCST.

The CLI, the output formats and the pre-commit path read these without the
analysis that produces them, so a file the prefilter settles never loads it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from dp2ddp.rules import RULES, Severity

SEVERITY_ORDER: dict[str, int] = {"note": 0, "warning": 1, "error": 2}


@dataclass(frozen=True)
class Diagnostic:
    """One finding of ``check``; lines and columns are 1-based, the end is exclusive."""

    code: str
    message: str
    line: int
    column: int
    end_line: int
    end_column: int
    severity: Severity
    fixable: bool = False

    @property
    def name(self) -> str:
        return RULES[self.code].name


@dataclass(frozen=True)
class CheckResult:
    source: str
    diagnostics: tuple[Diagnostic, ...]
    # The source with the safe fixes of the reported, fixable diagnostics applied.
    fixed: str

    @property
    def fixable(self) -> bool:
        return self.fixed != self.source


@dataclass(frozen=True)
class Selection:
    """Which codes to report: ``select``/``ignore`` are code prefixes; the more specific prefix wins."""

    select: tuple[str, ...] = ("DDP",)
    ignore: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for prefix in (*self.select, *self.ignore):
            if prefix != "ALL" and not any(code.startswith(prefix) for code in RULES):
                raise ValueError(f"unknown code or prefix {prefix!r}; `dp2ddp explain --all` lists the codes")

    def wants(self, code: str) -> bool:
        chosen = max((_length(p) for p in self.select if _covers(p, code)), default=-1)
        dropped = max((_length(p) for p in self.ignore if _covers(p, code)), default=-1)
        return chosen >= 0 and chosen > dropped

    def also_ignoring(self, codes: Iterable[str]) -> Selection:
        return Selection(self.select, (*self.ignore, *codes))


def _covers(prefix: str, code: str) -> bool:
    return prefix == "ALL" or code.startswith(prefix)


def _length(prefix: str) -> int:
    return 0 if prefix == "ALL" else len(prefix)


def fails(diagnostics: Collection[Diagnostic], fail_on: str) -> bool:
    """Whether any diagnostic is at least as severe as ``fail_on``."""
    return any(SEVERITY_ORDER[d.severity] >= SEVERITY_ORDER[fail_on] for d in diagnostics)
