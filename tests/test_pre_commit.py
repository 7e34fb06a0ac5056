"""The pre-commit hooks in .pre-commit-hooks.yaml, run by the real pre-commit in a throwaway git repository.

pre-commit installs this repository into a virtualenv of its own with a plain
`pip install .`, so these tests also catch what an editable install hides
(a package missing from the wheel).

Two ways in, because `pre-commit try-repo` always installs the hook
environment afresh (its store is a temporary directory; PRE_COMMIT_HOME does
not apply to it), which costs tens of seconds a call:

- one test runs `pre-commit try-repo <repo root>`, the command a hook author
  tries hooks with;
- the others run `pre-commit run` with a `.pre-commit-config.yaml` like the
  README's, against a committed snapshot of this checkout, so that one hook
  environment under a session-wide PRE_COMMIT_HOME serves them all.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

try:
    import pre_commit  # noqa: F401  (only its presence matters: the tests run it as a program)
except ImportError as error:  # a dev dependency: fail the run, never skip these tests
    raise ImportError("the pre-commit hook tests need pre-commit: pip install -e '.[dev]'") from error

ROOT = Path(__file__).resolve().parent.parent
PRE_COMMIT = [sys.executable, "-m", "pre_commit"]

# A DDP script whose training loop writes a checkpoint on every rank (DDP501).
# {save} is the indented block that writes the checkpoint.
DDP_TEMPLATE = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    dist.init_process_group("gloo")
    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        optimizer.zero_grad()
        loss = model(torch.randn(8, 4)).sum()
        loss.backward()
        optimizer.step()
{save}
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""
SAVE = 'torch.save(model.state_dict(), "model.pt")'

UNGUARDED_SAVE = DDP_TEMPLATE.format(save=textwrap.indent(SAVE, " " * 8))
GUARDED_SAVE = DDP_TEMPLATE.format(
    save=textwrap.indent(textwrap.dedent(f"""\
        if dist.get_rank() == 0:
            {SAVE}"""), " " * 8)
)
# The other ranks never reach this barrier: they wait for rank 0 forever (DDP502).
GUARDED_BARRIER = DDP_TEMPLATE.format(
    save=textwrap.indent(textwrap.dedent(f"""\
        if dist.get_rank() == 0:
            {SAVE}
            dist.barrier()"""), " " * 8)
)

DATA_PARALLEL = textwrap.dedent("""\
    import torch


    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(4, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x)


    def main() -> None:
        model = torch.nn.DataParallel(Net())
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            optimizer.zero_grad()
            loss = model(torch.randn(8, 4)).sum()
            loss.backward()
            optimizer.step()


    if __name__ == "__main__":
        main()
    """)

PLAIN = textwrap.dedent("""\
    def add(a: int, b: int) -> int:
        \"\"\"Nothing here for dp2ddp: no DataParallel, no distributed calls.\"\"\"
        return a + b
    """)


def _without_git_variables() -> dict[str, str]:
    # GIT_DIR, GIT_INDEX_FILE and the like, set when these tests themselves run
    # inside a git hook, would point git at the wrong repository.
    return {name: value for name, value in os.environ.items() if not name.startswith("GIT_")}


def _environment(pre_commit_home: Path) -> dict[str, str]:
    """The environment pre-commit runs in: the session's own cache, no inherited git variables."""
    return {**_without_git_variables(), "PRE_COMMIT_HOME": str(pre_commit_home)}


def _git(cwd: Path, *args: str) -> str:
    completed = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True,
                               env=_without_git_variables())  # fmt: skip
    return completed.stdout.strip()


def _new_repository(path: Path) -> None:
    """A git repository with its own identity and one commit, as a user's project would be."""
    path.mkdir(parents=True, exist_ok=True)
    _git(path, "init", "-q")
    _git(path, "config", "user.name", "dp2ddp tests")
    _git(path, "config", "user.email", "tests@dp2ddp.invalid")
    _git(path, "config", "commit.gpgsign", "false")


def line_of(source: str, text: str) -> int:
    """The 1-based line of the first line of source that contains text."""
    return next(number for number, line in enumerate(source.splitlines(), 1) if text in line)


@pytest.fixture(scope="session")
def pre_commit_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One pre-commit cache for the session: clean at the start, the hook environment installed once."""
    return tmp_path_factory.mktemp("pre-commit-home")


@pytest.fixture(scope="session")
def hook_repository(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """This checkout as it is on disk, committed into a repository of its own: (path, commit).

    pre-commit clones a hook repository at a commit, so it would test HEAD
    and miss the changes being worked on. try-repo makes up for that with a
    shadow clone, but it leaves out untracked files (a new hooks file that is
    not yet `git add`ed included). The snapshot holds every file git does not
    ignore, so the tests see the working tree, in a fresh clone and in one
    with uncommitted work alike.
    """
    snapshot = tmp_path_factory.mktemp("hook-repository")
    listed = _git(ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # a file deleted but not yet `git rm`ed is listed too
            (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, snapshot / name)
    _new_repository(snapshot)
    _git(snapshot, "add", "-A")
    _git(snapshot, "commit", "-q", "-m", "snapshot of the dp2ddp checkout under test")
    return snapshot, _git(snapshot, "rev-parse", "HEAD")


@pytest.fixture
def project(tmp_path: Path, hook_repository: tuple[Path, str]) -> Path:
    """A user's repository whose committed .pre-commit-config.yaml is the README's, pointed at this checkout."""
    repository, commit = hook_repository
    path = tmp_path / "project"
    _new_repository(path)
    (path / ".pre-commit-config.yaml").write_text(readme_configuration(repository, commit), encoding="utf-8")
    _git(path, "add", ".pre-commit-config.yaml")
    _git(path, "commit", "-q", "-m", "initial commit")
    return path


def readme_configuration(repository: Path, commit: str) -> str:
    """The README's `.pre-commit-config.yaml`, with this checkout's snapshot and commit put in for its placeholders."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("\n## pre-commit\n"):]
    snippet = section[section.index("```yaml\n") + len("```yaml\n"):section.index("\n```\n")] + "\n"
    for placeholder in ("/path/to/dp2ddp ", "0123456789abcdef0123456789abcdef01234567 "):
        assert placeholder in snippet, f"the README's pre-commit snippet no longer has the placeholder {placeholder!r}"
    return snippet.replace("/path/to/dp2ddp ", f"{repository} ").replace(
        "0123456789abcdef0123456789abcdef01234567 ", f"{commit} "
    )


def stage(project: Path, name: str, source: str) -> Path:
    """Write a file into the project and `git add` it, as before a commit."""
    path = project / name
    path.write_text(source, encoding="utf-8")
    _git(project, "add", name)
    return path


def run_hook(project: Path, hook: str, *files: str, home: Path) -> subprocess.CompletedProcess[str]:
    """`pre-commit run HOOK --files FILES` in the project, with its output kept for the assertions."""
    return subprocess.run([*PRE_COMMIT, "run", hook, "--color", "never", "--files", *files],
                          cwd=project, capture_output=True, text=True, env=_environment(home))  # fmt: skip


def describe(completed: subprocess.CompletedProcess[str]) -> str:
    """The exit status and output, for an assertion's message."""
    return f"exit {completed.returncode}\n--- stdout\n{completed.stdout}\n--- stderr\n{completed.stderr}"


def test_try_repo_from_the_repository_root(tmp_path: Path, pre_commit_home: Path) -> None:
    """`pre-commit try-repo <this repository> dp2ddp-check` works as a hook author would run it."""
    project = tmp_path / "project"
    _new_repository(project)
    stage(project, "README.md", "a project\n")
    _git(project, "commit", "-q", "-m", "initial commit")
    stage(project, "train.py", UNGUARDED_SAVE)
    completed = subprocess.run(
        [*PRE_COMMIT, "try-repo", str(ROOT), "dp2ddp-check", "--color", "never", "--files", "train.py"],
        cwd=project, capture_output=True, text=True, env=_environment(pre_commit_home),
    )  # fmt: skip
    assert completed.returncode == 1, describe(completed)
    assert f"train.py:{line_of(UNGUARDED_SAVE, SAVE)}:" in completed.stdout, describe(completed)
    assert "DDP501" in completed.stdout, describe(completed)


def test_check_fails_on_a_checkpoint_every_rank_writes(project: Path, pre_commit_home: Path) -> None:
    stage(project, "train.py", UNGUARDED_SAVE)
    completed = run_hook(project, "dp2ddp-check", "train.py", home=pre_commit_home)
    assert completed.returncode == 1, describe(completed)
    assert "dp2ddp check (DDP hazards)" in completed.stdout and "Failed" in completed.stdout, describe(completed)
    assert f"train.py:{line_of(UNGUARDED_SAVE, SAVE)}:9: DDP501" in completed.stdout, describe(completed)


def test_check_fails_on_a_barrier_only_rank_0_reaches(project: Path, pre_commit_home: Path) -> None:
    stage(project, "train.py", GUARDED_BARRIER)
    completed = run_hook(project, "dp2ddp-check", "train.py", home=pre_commit_home)
    assert completed.returncode == 1, describe(completed)
    assert f"train.py:{line_of(GUARDED_BARRIER, 'dist.barrier()')}:" in completed.stdout, describe(completed)
    assert "DDP502" in completed.stdout, describe(completed)
    assert "DDP501" not in completed.stdout, describe(completed)  # the save itself is guarded


def test_check_passes_a_checkpoint_written_on_rank_0(project: Path, pre_commit_home: Path) -> None:
    stage(project, "train.py", GUARDED_SAVE)
    completed = run_hook(project, "dp2ddp-check", "train.py", home=pre_commit_home)
    assert completed.returncode == 0, describe(completed)
    assert "Passed" in completed.stdout, describe(completed)


def test_convert_rewrites_data_parallel_then_passes(project: Path, pre_commit_home: Path) -> None:
    """Like pyupgrade: the rewrite fails the commit, the user stages it, and the next run passes."""
    script = stage(project, "train.py", DATA_PARALLEL)
    first = run_hook(project, "dp2ddp-convert", "train.py", home=pre_commit_home)
    assert first.returncode == 1, describe(first)
    assert "files were modified by this hook" in first.stdout, describe(first)
    converted = script.read_text(encoding="utf-8")
    assert "DataParallel(Net())" not in converted
    assert "DistributedDataParallel" in converted and "model = wrap_ddp(Net())" in converted

    _git(project, "add", "train.py")
    again = run_hook(project, "dp2ddp-convert", "train.py", home=pre_commit_home)
    assert again.returncode == 0, describe(again)
    assert script.read_text(encoding="utf-8") == converted


def test_convert_leaves_a_file_without_data_parallel_byte_identical(project: Path, pre_commit_home: Path) -> None:
    # The hook gets every staged Python file, most of which have no DataParallel.
    path = stage(project, "util.py", PLAIN)
    before = path.read_bytes()
    completed = run_hook(project, "dp2ddp-convert", "util.py", home=pre_commit_home)
    assert completed.returncode == 0, describe(completed)
    assert "Passed" in completed.stdout, describe(completed)
    assert path.read_bytes() == before
