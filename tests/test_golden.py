"""Golden before/after scripts: each pair is checked four ways."""

from __future__ import annotations

from pathlib import Path

import pytest

from dp2ddp.api import convert_source
from dp2ddp.check import check_source
from dp2ddp.rules import REPORTED_IN_OUTPUT, RULES
from tests.conftest import fixture_cases


def _expected_output(case: Path) -> str:
    after = case / "after.py"
    return after.read_text(encoding="utf-8") if after.exists() else (case / "before.py").read_text(encoding="utf-8")


def _report(findings: object) -> str:
    return "".join(f"{finding}\n" for finding in findings)  # type: ignore[attr-defined]


@pytest.mark.parametrize("case", fixture_cases(), ids=lambda case: case.name)
def test_convert_matches_golden(case: Path, update_goldens: bool) -> None:
    before = (case / "before.py").read_text(encoding="utf-8")
    result = convert_source(before)
    if update_goldens:
        if result.changed:
            (case / "after.py").write_text(result.output, encoding="utf-8")
        (case / "report.txt").write_text(_report(result.findings), encoding="utf-8")
    assert result.output == _expected_output(case)
    assert _report(result.findings) == (case / "report.txt").read_text(encoding="utf-8")


@pytest.mark.parametrize("case", fixture_cases(), ids=lambda case: case.name)
def test_converting_the_golden_again_changes_nothing_and_keeps_its_warnings(case: Path) -> None:
    """Converting in place twice must not lose the hazards the first run named: the second run names them
    again, or, where the script is a DDP script now, check does (tests/test_agreement.py pins the line)."""
    after = _expected_output(case)
    again = convert_source(after)
    assert again.output == after
    first = (case / "report.txt").read_text(encoding="utf-8").splitlines()
    warned = {line.split(" ")[1] for line in first if RULES[line.split(" ")[1]].severity != "note"}
    checked = {d.code for d in check_source(after).diagnostics}
    named = {f.code for f in again.findings} | {code for code, found in REPORTED_IN_OUTPUT.items() if found & checked}
    assert warned <= named


@pytest.mark.parametrize("case", fixture_cases(), ids=lambda case: case.name)
def test_golden_compiles(case: Path) -> None:
    compile(_expected_output(case), str(case / "after.py"), "exec")


def test_unchanged_cases_have_no_after_file() -> None:
    """A case whose after.py equals before.py should say so by having none."""
    for case in fixture_cases():
        after = case / "after.py"
        if after.exists():
            assert after.read_text(encoding="utf-8") != (case / "before.py").read_text(encoding="utf-8"), case.name
