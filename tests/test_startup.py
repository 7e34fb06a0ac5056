"""A pre-commit hook on a commit without DDP code imports no LibCST, torch or codemods.

Each case runs the CLI in a fresh interpreter and reads which modules it
loaded: timing is left to ``bench/startup.py``, this holds the behaviour
that makes it fast.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "check"

# Runs the click entry point as the console script does, then names the heavy modules it loaded.
RUN_CLI = """
import json, sys
from dp2ddp.cli import main
try:
    main(sys.argv[1:], prog_name="dp2ddp")
except SystemExit as stop:
    code = stop.code
heavy = sorted(
    name for name in sys.modules
    if name.partition(".")[0] in ("libcst", "torch")
    or name.startswith("dp2ddp.codemods")
    or name in ("dp2ddp.api", "dp2ddp.check", "dp2ddp.hazards", "dp2ddp.analysis.module", "dp2ddp.analysis.project")
)
print("\\n" + json.dumps({"exit": code, "heavy": heavy}))
"""

PLAIN = '''\
"""Running averages for the evaluation loop."""

import math


class Average:
    def __init__(self) -> None:
        self.total, self.count = 0.0, 0

    def update(self, value: float, n: int = 1) -> None:
        self.total += value * n
        self.count += n

    @property
    def value(self) -> float:
        return self.total / self.count if self.count else math.nan
'''

# Names DDP in a docstring and a type hint, and calls nothing distributed: the tokens settle it.
MENTIONS_DDP = '''\
"""Loads a checkpoint written by the DistributedDataParallel training job."""

import torch
from torch.nn.parallel import DistributedDataParallel


def unwrap(model: DistributedDataParallel) -> torch.nn.Module:
    return model.module
'''


def run_cli(arguments: list[str], cwd: Path) -> tuple[int, list[str], str]:
    """The exit status, the heavy modules loaded, and what the CLI printed."""
    completed = subprocess.run(
        [sys.executable, "-c", RUN_CLI, *arguments], cwd=cwd, capture_output=True, text=True, check=False, timeout=300
    )
    printed, _, last = completed.stdout.rstrip("\n").rpartition("\n")
    report = json.loads(last)
    return report["exit"], report["heavy"], printed + completed.stderr


@pytest.fixture
def commit(tmp_path: Path) -> Path:
    """A folder of ordinary modules, as a commit without DDP code stages them."""
    folder = tmp_path / "commit"
    folder.mkdir()
    (folder / "metrics.py").write_text(PLAIN)
    (folder / "checkpoints.py").write_text(MENTIONS_DDP)
    (folder / "__init__.py").write_text("")
    return folder


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param(["check", "commit/metrics.py"], id="check on a file without distributed code"),
        pytest.param(["check", "commit/checkpoints.py"], id="check on a file that only names DDP in text and hints"),
        pytest.param(["check", "commit/metrics.py", "commit/checkpoints.py", "commit/__init__.py"], id="check on a commit"),
        pytest.param(["check", "commit"], id="check on a folder, whose project roles are never read"),
        pytest.param(["check", "--format", "sarif", "commit"], id="check writing SARIF"),
        pytest.param(["convert", "--check", "commit/metrics.py"], id="convert on a file without DataParallel"),
        pytest.param(["explain", "DDP501"], id="explain"),
        pytest.param(["--help"], id="the top-level help"),
    ],
)
def test_a_run_without_ddp_code_imports_nothing_heavy(commit: Path, arguments: list[str]) -> None:
    code, heavy, printed = run_cli(arguments, commit.parent)
    assert code == 0, printed
    assert heavy == [], f"`dp2ddp {' '.join(arguments)}` imported {heavy}"


def test_a_commit_with_ddp_code_still_gets_its_findings(commit: Path) -> None:
    """The prefilter lets the DDP script through: it is parsed and analysed, and its findings reported."""
    shutil.copyfile(FIXTURES / "DDP501" / "case.py", commit / "train.py")
    code, heavy, printed = run_cli(["check", "commit"], commit.parent)
    # case.txt holds `line:col CODE message`; the text format writes `path:line:col: CODE message`.
    expected = [f"commit/train.py:{line.replace(' ', ': ', 1)}" for line in (FIXTURES / "DDP501" / "case.txt").read_text().splitlines()]
    assert code == 1
    assert "libcst" in heavy and "dp2ddp.check" in heavy
    assert [line for line in printed.splitlines() if line.startswith("commit/train.py:")] == expected
    assert "checked 4 files: 2 findings (2 warnings)" in printed


def test_an_unreadable_file_is_still_an_error_without_the_analysis(commit: Path) -> None:
    (commit / "latin.py").write_bytes(b"# caf\xe9\nx = 1\n")
    code, heavy, printed = run_cli(["check", "commit"], commit.parent)
    assert code == 2
    assert heavy == []
    assert "error: commit/latin.py:1: not valid utf-8 (byte 0xe9)" in printed
