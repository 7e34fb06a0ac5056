"""check agrees with convert: a hazard convert warns about and leaves in its output, check finds in that output.

For every golden fixture (single scripts and projects), each warning in
``report.txt`` is either fixed by the conversion (``NOT_IN_OUTPUT`` says why
none stays) or reported by check on the converted code under a code
``REPORTED_IN_OUTPUT`` names, at the line the warned line became. And check
reports nothing on converted code that convert did not warn about.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

import pytest

from dp2ddp.analysis.project import Project
from dp2ddp.check import Diagnostic, check_source
from dp2ddp.rules import EXPLAINED_IN_OUTPUT, NOT_IN_OUTPUT, REPORTED_IN_OUTPUT, RULES, is_check_rule
from tests.conftest import FIXTURES, fixture_cases

PROJECTS = FIXTURES / "projects"


@dataclass(frozen=True)
class Converted:
    """One converted file of a golden fixture: its source before and after, and convert's warnings (line, code)."""

    name: str
    before: str
    after: str
    warnings: tuple[tuple[int, str], ...]
    diagnostics: tuple[Diagnostic, ...]


def _warnings(lines: list[str]) -> tuple[tuple[int, str], ...]:
    found = []
    for line in lines:
        where, code = line.split(" ")[0], line.split(" ")[1]
        if RULES[code].severity == "warning":
            found.append((int(where.rstrip(":").split(":")[-2]), code))
    return tuple(found)


def _single_scripts() -> list[Converted]:
    converted = []
    for case in fixture_cases():
        if (case / "after.py").exists():
            after = (case / "after.py").read_text(encoding="utf-8")
            report = (case / "report.txt").read_text(encoding="utf-8").splitlines()
            converted.append(
                Converted(case.name, (case / "before.py").read_text(encoding="utf-8"), after, _warnings(report),
                          check_source(after).diagnostics)
            )  # fmt: skip
    return converted


def _project_files() -> list[Converted]:
    converted = []
    for case in sorted(path for path in PROJECTS.iterdir() if (path / "after").is_dir()):
        after_root = case / "after"
        sources = {path: path.read_text(encoding="utf-8") for path in sorted(after_root.rglob("*.py"))}
        roles = Project(after_root, sources).check_roles()
        report = (case / "report.txt").read_text(encoding="utf-8").splitlines()
        for path, after in sources.items():
            relative = path.relative_to(after_root).as_posix()
            before_path = case / "before" / relative
            before = before_path.read_text(encoding="utf-8") if before_path.exists() else ""
            mine = [line[len(relative) + 1 :] for line in report if line.startswith(f"{relative}:")]
            converted.append(
                Converted(f"{case.name}/{relative}", before, after, _warnings(mine),
                          check_source(after, role=roles.get(path)).diagnostics)
            )  # fmt: skip
    return converted


CONVERTED = _single_scripts() + _project_files()


def _after_lines(before: str, after: str, line: int) -> range:
    """The lines of ``after`` that line ``line`` of ``before`` became (1-based), as a diff matches them."""
    matcher = difflib.SequenceMatcher(None, before.splitlines(), after.splitlines(), autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if i1 <= line - 1 < i2:
            if tag == "equal":
                return range(j1 + (line - 1 - i1) + 1, j1 + (line - 1 - i1) + 2)
            return range(j1 + 1, max(j2, j1 + 1) + 1)
    return range(0)


@pytest.mark.parametrize("converted", [c for c in CONVERTED if c.warnings], ids=lambda c: c.name)
def test_check_finds_every_hazard_convert_warned_about_and_left(converted: Converted) -> None:
    for line, code in converted.warnings:
        if code in NOT_IN_OUTPUT:
            continue
        assert code in REPORTED_IN_OUTPUT, f"{code} is in neither REPORTED_IN_OUTPUT nor NOT_IN_OUTPUT"
        # A warning sits on an expression, check's finding on the statement around it: allow a few lines.
        lines = _after_lines(converted.before, converted.after, line)
        near = range(lines.start - 3, lines.stop + 3)
        found = [d for d in converted.diagnostics if d.code in REPORTED_IN_OUTPUT[code] and (d.line in near or d.end_line in near)]
        assert found, (
            f"convert warned {code} at line {line}, which became line(s) {list(lines)} of the output, but check "
            f"reports none of {sorted(REPORTED_IN_OUTPUT[code])} there; it reports {[(d.line, d.code) for d in converted.diagnostics]}"
        )


@pytest.mark.parametrize("converted", CONVERTED, ids=lambda c: c.name)
def test_check_reports_nothing_convert_did_not_warn_about(converted: Converted) -> None:
    allowed = set().union(
        *(REPORTED_IN_OUTPUT.get(code, frozenset()) | EXPLAINED_IN_OUTPUT.get(code, frozenset()) for _, code in converted.warnings)
    )
    assert {d.code for d in converted.diagnostics} <= allowed


def test_every_convert_warning_is_either_reported_by_check_or_fixed() -> None:
    warnings = {code for code, rule in RULES.items() if rule.severity == "warning" and not is_check_rule(code) and code != "DDP002"}
    assert not set(REPORTED_IN_OUTPUT) & set(NOT_IN_OUTPUT)
    assert set(EXPLAINED_IN_OUTPUT) <= set(NOT_IN_OUTPUT)
    assert set(REPORTED_IN_OUTPUT) | set(NOT_IN_OUTPUT) <= warnings
    for code, check_codes in REPORTED_IN_OUTPUT.items():
        assert check_codes and all(is_check_rule(c) or c == "DDP002" for c in check_codes), code
    missing = warnings - set(REPORTED_IN_OUTPUT) - set(NOT_IN_OUTPUT)
    assert not missing, f"convert warnings neither reported by check nor settled: {sorted(missing)}"


@pytest.mark.parametrize("code, says", [("DDP422", "reports what is left of it as DDP537"), ("DDP312", "Nothing is left")])
def test_explain_says_where_check_finds_a_convert_warning(code: str, says: str) -> None:
    from click.testing import CliRunner

    from dp2ddp.cli import main

    result = CliRunner().invoke(main, ["explain", code])
    assert result.exit_code == 0 and "## In the converted script" in result.stdout and says in result.stdout
