"""Every shell command the README shows a user runs as written, so that the README cannot drift from the tool.

The usage block's commands run in a workspace like the one they name: `train.py`
(the bundled MNIST example, with a `--data` option as the README's example passes),
`train_ddp.py` (its conversion) and `src/` (a small project of three modules).
Each command runs in a fresh copy of that workspace, through bash as a user would
type it, and must exit with the status this file expects for it; a command added
to the README without an expectation here fails, so the two are kept together.
The commands that train (verify) are slow; the quick start's verify run also checks
the output the README shows for it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
EXAMPLE = ROOT / "fixtures" / "mnist_argparse" / "before.py"
PROJECT = ROOT / "fixtures" / "projects" / "trainer_with_driver" / "before"

# What each usage command must exit with in the workspace, and a phrase its output must hold.
EXPECTED: dict[str, tuple[int, str]] = {
    "dp2ddp convert train.py": (0, "converted train.py"),
    "dp2ddp convert --diff train.py": (0, "+    setup_distributed()"),
    "dp2ddp convert --check src/": (1, "would convert src/trainer.py"),
    "dp2ddp convert src/": (0, "wrote the helpers module src/ddp_helpers.py"),
    "dp2ddp convert --project train.py": (0, "converted train.py"),
    "dp2ddp convert --helpers inline src/": (0, "converted src/trainer.py"),
    "dp2ddp convert train.py -o ddp.py": (0, "wrote ddp.py"),
    "dp2ddp convert --skip download_once src/": (0, "converted src/trainer.py"),
    "dp2ddp convert --batch per-process train.py": (0, "converted train.py"),
    "dp2ddp convert --check -j 8 src/": (1, "would convert src/trainer.py"),
    "dp2ddp convert --diff --report pr.md train.py": (0, "wrote the migration report pr.md"),
    "dp2ddp verify train.py": (0, "equivalent: 8 steps"),
    "dp2ddp verify train.py --max-steps 50 -- --epochs 1 --data ./imagenet": (0, "equivalent: 4 steps"),
    "dp2ddp verify train.py --converted train_ddp.py --json result.json --plot losses.png": (0, "wrote losses.png"),
    "dp2ddp verify train.py --device cpu --synthetic-data": (0, "equivalent: 8 steps"),
    "dp2ddp verify train.py --statistical": (0, "equivalent: all 5 seed pairs agree"),
    "dp2ddp check src/": (1, "DDP002"),
    "dp2ddp check --diff src/": (1, "+++ b/src/trainer.py"),
    "dp2ddp check --fix src/": (0, "fixed 1 file"),
    "dp2ddp check --select DDP5 --ignore DDP508 --format sarif src/ > dp2ddp.sarif": (0, "checked 3 files: 0 findings"),
    "dp2ddp explain DDP316": (0, "# DDP316"),
    "dp2ddp explain --all": (0, "DDP001"),
    # The GitHub Actions workflow's steps, after its install.
    "dp2ddp check --format github .": (1, "::warning file=src/trainer.py"),
    "dp2ddp check --format sarif --exit-zero . > dp2ddp.sarif": (0, "checked"),
}


def code_block_after(heading: str, language: str = "") -> str:
    """The first fenced block (of ``language``) after ``heading`` in the README."""
    section = README[README.index(f"\n{heading}\n"):]
    start = section.index(f"```{language}\n") + len(f"```{language}\n")
    return section[start:section.index("\n```\n", start)]


def usage_commands() -> list[str]:
    """The usage block's commands, without the explanation each line ends with (after two spaces or more)."""
    lines = code_block_after("## Usage").splitlines()
    return [re.split(r"\s{2,}", line)[0] for line in lines if line.startswith("dp2ddp ")]


def workflow_commands() -> list[str]:
    """The `run:` steps of the GitHub Actions workflow that call dp2ddp."""
    workflow = code_block_after("## Checking DDP scripts", "yaml")
    return [line.split("- run: ", 1)[1] for line in workflow.splitlines() if "- run: dp2ddp " in line]


README_COMMANDS = usage_commands() + workflow_commands()


def test_every_readme_command_has_an_expectation() -> None:
    """A command added to the README, or one whose spelling changed, is run by this file too."""
    assert len(README_COMMANDS) >= 20
    assert sorted(set(README_COMMANDS) - set(EXPECTED)) == []
    assert sorted(set(EXPECTED) - set(README_COMMANDS)) == [], "a command was taken out of the README"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`train.py`, `train_ddp.py` and `src/`, as the usage commands name them."""
    path = tmp_path_factory.mktemp("readme-workspace")
    source = EXAMPLE.read_text(encoding="utf-8")
    epochs = '    parser.add_argument("--epochs", type=int, default=2)\n'
    assert epochs in source
    data = '    parser.add_argument("--data", default=".", help="where the data would be; FakeData needs none")\n'
    (path / "train.py").write_text(source.replace(epochs, epochs + data), encoding="utf-8")
    shutil.copytree(PROJECT, path / "src")
    converted = dp2ddp("dp2ddp convert train.py -o train_ddp.py", path)
    assert converted.returncode == 0, converted.stderr
    return path


def dp2ddp(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A README command line through bash, with this interpreter's dp2ddp first on PATH."""
    environment = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, env=environment,
                          timeout=600)  # fmt: skip


@pytest.mark.parametrize(
    "command",
    [pytest.param(c, marks=pytest.mark.slow) if c.startswith("dp2ddp verify") else c for c in README_COMMANDS],
)
def test_readme_command_runs_as_written(command: str, workspace: Path, tmp_path: Path) -> None:
    """Each command of the README, in a fresh copy of the workspace: its exit status and what it says."""
    if command not in EXPECTED:
        pytest.fail(f"the README shows {command!r}, which this file has no expectation for")
    shutil.copytree(workspace, tmp_path / "work")
    completed = dp2ddp(command, tmp_path / "work")
    output = completed.stdout + completed.stderr
    status, phrase = EXPECTED[command]
    assert "Traceback" not in output
    assert completed.returncode == status, output
    written = (tmp_path / "work" / "dp2ddp.sarif").read_text(encoding="utf-8") if "> dp2ddp.sarif" in command else ""
    assert phrase in output + written, output


def test_the_opening_diff_is_part_of_the_example_s_real_diff() -> None:
    """Every line the README's opening diff adds or removes is in `convert --diff` of the bundled example."""
    shown = code_block_after("with `path:line:col` what it could not convert safely.", "diff")
    real = subprocess.run([sys.executable, "-m", "dp2ddp", "convert", "--diff", str(EXAMPLE)],
                          capture_output=True, text=True, check=True).stdout.splitlines()  # fmt: skip
    changed = [line for line in shown.splitlines() if line.startswith(("+", "-"))]
    assert len(changed) >= 10
    assert [line for line in changed if line not in real] == []
    # Lines left out are marked, never silently dropped.
    assert "     …" in shown


def test_the_test_commands_are_what_ci_runs() -> None:
    """CI runs exactly the README's commands for a fresh machine's tests."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    for line in code_block_after("## Run the tests (fresh machine)", "sh").splitlines():
        assert line in ci


@pytest.mark.slow
def test_quick_start_runs_as_written_and_prints_what_the_readme_shows(tmp_path: Path) -> None:
    """The quick start after its install, word for word, with the output the README quotes for verify."""
    line = code_block_after("## Try it (fresh machine)", "sh")
    install = "python3 -m venv .venv && .venv/bin/pip install -q -e '.[verify]' && "
    assert line.startswith(install)
    # The install is what CI itself does. The rest runs as written in a folder where `.venv` is the
    # environment these tests run in and `fixtures` this checkout's.
    (tmp_path / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    (tmp_path / "fixtures").symlink_to(ROOT / "fixtures", target_is_directory=True)
    completed = subprocess.run(["bash", "-c", line[len(install):]], cwd=tmp_path, capture_output=True, text=True,
                               timeout=600)  # fmt: skip
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "+    setup_distributed()" in completed.stdout
    shown = code_block_after("## Verifying a conversion")
    printed = completed.stdout.splitlines()
    for expected in shown.splitlines():
        if expected.strip() == "...":
            continue
        if re.match(r"\s+\d+ ", expected):  # a step's row: the losses agree; a gap's last bits may not
            assert any(row.split()[:5] == expected.split()[:5] for row in printed), expected
        else:
            assert expected in printed
