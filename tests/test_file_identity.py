"""Bad files and bad places to write: special files, links, read-only files, write errors and diff headers.

A run never hangs on a file it cannot read, never changes what a file is (a link stays a link, hard links
stay linked, the owner stays), never rewrites a read-only file unasked, and reports a write it could not
make with the path and the reason, exit 2, the file as it was and the other files still processed.

Tests that need an ordinary user skip as root; each such case is also tested in a form that works as
root, by making the system call fail.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from dp2ddp import files
from dp2ddp.cli import main
from tests.conftest import DP_SCRIPT, FIXTURES

CONVERTED = "wrap_ddp(nn.Linear(2, 2))"
# A script check finds a safe fix in (a shuffled loader with no sampler).
FIXABLE = (FIXTURES / "check" / "DDP505" / "case.py").read_text(encoding="utf-8")
AS_ROOT = os.geteuid() == 0


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    return result.exit_code, result.stdout, result.stderr


def run_process(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """In a process of its own, with a time limit: a run that waits on a FIFO fails the test instead of hanging it."""
    # A session of its own: what a hung run starts is kept apart from the test run's process group.
    return subprocess.run(
        [sys.executable, "-m", "dp2ddp", *args],
        capture_output=True, text=True, timeout=60, cwd=cwd, start_new_session=True,
    )  # fmt: skip


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(DP_SCRIPT, encoding="utf-8")
    return path


@pytest.fixture
def umask_022() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


# -- 1. FIFOs and other special files ----------------------------------------------------------------


@pytest.mark.parametrize("command", [["convert"], ["check"], ["convert", "--diff"]])
def test_a_fifo_named_is_refused_at_once(tmp_path: Path, command: list[str]) -> None:
    """Should say the FIFO is not a regular file and exit 2, not wait forever for a writer."""
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    done = run_process(*command, str(fifo))
    assert done.returncode == 2
    assert f"{fifo}: not a regular file" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("option", [[], ["--converted"]])
def test_verify_refuses_a_fifo_as_a_usage_error(script: Path, tmp_path: Path, option: list[str]) -> None:
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    args = [str(script), "--converted", str(fifo)] if option else [str(fifo)]
    done = run_process("verify", *args)
    assert done.returncode == 2
    assert "not a regular file" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("command", ["convert", "check"])
def test_a_fifo_in_a_folder_is_passed_over_with_a_note(script: Path, tmp_path: Path, command: str) -> None:
    """Should read only regular files under a folder, say which it passed over, and process the rest."""
    os.mkfifo(tmp_path / "pipe.py")
    done = run_process(command, str(tmp_path))
    assert f"note: {tmp_path / 'pipe.py'}: not a regular file, so not read" in done.stderr
    assert done.returncode == (0 if command == "convert" else 1)  # check: the converted script's DDP findings
    if command == "convert":
        assert CONVERTED in script.read_text(encoding="utf-8")


def test_reading_a_fifo_directly_does_not_block(tmp_path: Path) -> None:
    """Should refuse a FIFO that became one after it was found, on the open file, without waiting for a writer."""
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)

    def waited(signum: int, frame: object) -> None:
        raise TimeoutError("read_source waited on the FIFO")

    previous = signal.signal(signal.SIGALRM, waited)
    signal.alarm(10)
    try:
        with pytest.raises(files.SourceError, match="not a regular file"):
            files.read_source(fifo)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# -- 2. symbolic link loops ----------------------------------------------------------------------------


@pytest.fixture
def loop(tmp_path: Path) -> Path:
    (tmp_path / "a.py").symlink_to("b.py")
    (tmp_path / "b.py").symlink_to("a.py")
    return tmp_path / "a.py"


@pytest.mark.parametrize("command", ["convert", "check"])
def test_a_link_loop_named_is_a_clean_error(loop: Path, command: str) -> None:
    code, _, err = run(command, str(loop))
    assert code == 2
    assert f"{loop}: a symbolic link loop" in err and "Traceback" not in err


@pytest.mark.parametrize("command", ["convert", "check"])
def test_a_link_loop_in_a_folder_is_reported_and_the_rest_processed(loop: Path, script: Path, command: str) -> None:
    """Should name each looping link, exit 2, and still convert or check the real script (check raised RuntimeError)."""
    code, out, err = run(command, str(script.parent))
    assert code == 2
    assert f"error: {loop}: a symbolic link loop" in err and "Traceback" not in err
    if command == "convert":
        assert CONVERTED in script.read_text(encoding="utf-8")
    else:
        assert "could not be checked" in err


def test_a_link_to_a_parent_folder_is_not_followed(script: Path, tmp_path: Path) -> None:
    """Should check each file once: a link that loops back up the tree is not entered."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "up").symlink_to("..")
    code, _, err = run("check", str(tmp_path))
    assert code == 1
    assert "checked 1 file:" in err


# -- 3. symbolic links to files ------------------------------------------------------------------------


def test_a_link_named_is_written_through(script: Path, tmp_path: Path) -> None:
    """Should convert the link's target and leave the link a link (it was replaced by a copy, the target untouched)."""
    link = tmp_path / "link.py"
    link.symlink_to(script.name)
    code, _, err = run("convert", str(link))
    assert code == 0 and f"converted {link}" in err
    assert link.is_symlink() and os.readlink(link) == script.name
    assert CONVERTED in script.read_text(encoding="utf-8")
    assert not [path for path in tmp_path.iterdir() if path.name.endswith(".dp2ddp")]


def test_a_link_and_its_target_in_a_folder_are_one_file(script: Path, tmp_path: Path) -> None:
    """Should convert the target once, under its own name, and leave the link alone."""
    (tmp_path / "alias.py").symlink_to(script.name)
    code, _, err = run("convert", "--helpers", "inline", str(tmp_path))
    assert code == 0
    assert "1 file converted, 0 files unchanged" in err
    assert (tmp_path / "alias.py").is_symlink()
    assert script.read_text(encoding="utf-8").count("def wrap_ddp(") == 1


def test_the_same_file_named_twice_is_converted_once(script: Path, tmp_path: Path) -> None:
    (tmp_path / "alias.py").symlink_to(script.name)
    code, _, err = run("convert", str(script), str(tmp_path / "alias.py"))
    assert code == 0 and "1 file converted, 0 files unchanged" in err
    assert (tmp_path / "alias.py").is_symlink()
    assert script.read_text(encoding="utf-8").count("def wrap_ddp(") == 1


@pytest.mark.parametrize("command", ["convert", "check"])
def test_a_link_to_a_file_outside_the_folder_is_passed_over_with_a_note(tmp_path: Path, command: str) -> None:
    """Should leave a file of another tree alone (its other users lack this folder's helpers), and say so."""
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "train.py").write_text(DP_SCRIPT, encoding="utf-8")
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").symlink_to(shared / "train.py")
    code, _, err = run(command, str(project))
    assert code == 0
    assert f"note: {project / 'train.py'}: a link to {shared / 'train.py'}, outside the files searched" in err
    assert (shared / "train.py").read_text(encoding="utf-8") == DP_SCRIPT


# -- 4. hard links and owners ---------------------------------------------------------------------------


def test_a_file_with_hard_links_is_rewritten_in_place(script: Path, tmp_path: Path) -> None:
    """Should keep both names one file, converted, and say why it was not replaced."""
    other = tmp_path / "other_name.py"
    os.link(script, other)
    inode = script.stat().st_ino
    code, _, err = run("convert", str(script))
    assert code == 0
    assert f"converted {script} (in place, to keep its 2 hard links)" in err
    assert script.stat().st_ino == inode and other.stat().st_ino == inode and script.stat().st_nlink == 2
    assert CONVERTED in other.read_text(encoding="utf-8")


def test_a_shorter_text_rewritten_in_place_leaves_no_tail(tmp_path: Path) -> None:
    path = tmp_path / "long.py"
    path.write_text("x = 1\n" * 100, encoding="utf-8")
    os.link(path, tmp_path / "second.py")
    assert files.write_atomic(path, "y = 2\n", "utf-8") == "to keep its 2 hard links"
    assert (tmp_path / "second.py").read_text(encoding="utf-8") == "y = 2\n"


@pytest.mark.skipif(not AS_ROOT, reason="only root can give a file to another user")
def test_root_keeps_another_users_ownership(script: Path) -> None:
    """Should leave a file owned by another user owned by that user (it became root's)."""
    os.chown(script, 65534, 65534)
    code, _, _ = run("convert", str(script))
    assert code == 0 and CONVERTED in script.read_text(encoding="utf-8")
    assert (script.stat().st_uid, script.stat().st_gid) == (65534, 65534)


def test_a_file_whose_owner_a_new_file_cannot_take_is_rewritten_in_place(
    script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Should rewrite in place when the replacement cannot be given the file's owner, as for an ordinary user."""

    def refused(*args: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(files, "_same_owner", lambda temporary, existing: False)
    monkeypatch.setattr(files.os, "chown", refused)
    inode = script.stat().st_ino
    code, _, err = run("convert", str(script))
    assert code == 0
    assert f"converted {script} (in place, to keep its owner)" in err
    assert script.stat().st_ino == inode and CONVERTED in script.read_text(encoding="utf-8")
    assert not [path for path in script.parent.iterdir() if path.name.endswith(".dp2ddp")]


# -- 5. read-only files ----------------------------------------------------------------------------------


def test_a_read_only_file_is_refused_and_the_others_converted(script: Path, tmp_path: Path) -> None:
    locked = tmp_path / "locked.py"
    locked.write_text(DP_SCRIPT, encoding="utf-8")
    locked.chmod(0o444)
    code, _, err = run("convert", str(locked), str(script))
    assert code == 2
    assert f"error: {locked}: read-only; make it writable or pass --allow-read-only" in err
    assert locked.read_text(encoding="utf-8") == DP_SCRIPT
    assert CONVERTED in script.read_text(encoding="utf-8")
    assert "1 file converted, 0 files unchanged, 1 file failed" in err


def test_allow_read_only_rewrites_it_and_keeps_its_mode(script: Path) -> None:
    script.chmod(0o444)
    code, _, err = run("convert", "--allow-read-only", str(script))
    assert code == 0 and f"converted {script}" in err
    assert CONVERTED in script.read_text(encoding="utf-8")
    assert script.stat().st_mode & 0o777 == 0o444


@pytest.mark.parametrize("flag", ["--diff", "--check"])
def test_a_dry_run_never_refuses_a_read_only_file(script: Path, flag: str) -> None:
    script.chmod(0o444)
    code, _, err = run("convert", flag, str(script))
    assert code == (0 if flag == "--diff" else 1)
    assert "read-only" not in err


def test_check_fix_refuses_a_read_only_file_unless_allowed(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(FIXABLE, encoding="utf-8")
    path.chmod(0o444)
    code, _, err = run("check", "--fix", str(path))
    assert code == 2
    assert f"error: {path}: read-only; make it writable or pass --allow-read-only" in err
    assert path.read_text(encoding="utf-8") == FIXABLE
    code, _, err = run("check", "--fix", "--allow-read-only", str(path))
    assert code == 0 and "fixed 1 file" in err
    assert "shuffle=True" not in path.read_text(encoding="utf-8")


# -- 6. the mode of -o's output ---------------------------------------------------------------------------


@pytest.mark.parametrize("existing", [False, True], ids=["new output", "existing 0600 output"])
def test_output_takes_the_inputs_mode(script: Path, tmp_path: Path, umask_022: None, existing: bool) -> None:
    """Should make an executable input's output executable too, whether the output is new or was there."""
    script.chmod(0o755)
    target = tmp_path / "train_ddp.py"
    if existing:
        target.write_text("# an earlier conversion\n", encoding="utf-8")
        target.chmod(0o600)
    assert run("convert", str(script), "-o", str(target))[0] == 0
    assert target.stat().st_mode & 0o777 == 0o755
    assert CONVERTED in target.read_text(encoding="utf-8")


# -- 7. write errors ------------------------------------------------------------------------------------------


def test_output_into_a_missing_folder_is_a_usage_error(script: Path, tmp_path: Path) -> None:
    code, _, err = run("convert", str(script), "-o", str(tmp_path / "missing" / "train_ddp.py"))
    assert code == 2
    assert f"--output: no such directory: {tmp_path / 'missing'}" in err


def _refuse_new_files(monkeypatch: pytest.MonkeyPatch, only: str = "") -> None:
    """Make creating a file fail as it does in a folder without write permission (root is never refused)."""
    real = tempfile.mkstemp

    def mkstemp(*args: object, **kwargs: object) -> tuple[int, str]:
        if only in str(kwargs.get("prefix", "")):
            raise PermissionError(13, "Permission denied")
        return real(*args, **kwargs)  # type: ignore[call-overload,no-any-return]

    monkeypatch.setattr(files.tempfile, "mkstemp", mkstemp)


def test_a_folder_that_refuses_new_files_is_an_error_per_file(
    script: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "other.py"
    other.write_text(DP_SCRIPT, encoding="utf-8")
    _refuse_new_files(monkeypatch, only="train.py")
    code, _, err = run("convert", str(script), str(other))
    assert code == 2
    assert f"error: {script}: cannot write: cannot create a file in {tmp_path}: Permission denied" in err
    assert script.read_text(encoding="utf-8") == DP_SCRIPT
    assert CONVERTED in other.read_text(encoding="utf-8")
    assert "1 file converted, 0 files unchanged, 1 file failed" in err


def test_a_failed_replace_leaves_the_file_and_no_temporary(script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def replace(source: object, target: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(files.os, "replace", replace)
    code, _, err = run("convert", str(script))
    assert code == 2
    assert f"error: {script}: cannot write: Permission denied; it is unchanged" in err
    assert script.read_text(encoding="utf-8") == DP_SCRIPT
    assert [path.name for path in script.parent.iterdir()] == ["train.py"]


@pytest.mark.skipif(AS_ROOT, reason="root may write into a folder without write permission")
def test_a_read_only_folder_is_an_error_for_an_ordinary_user(script: Path, tmp_path: Path) -> None:
    tmp_path.chmod(0o555)
    try:
        code, _, err = run("convert", str(script))
    finally:
        tmp_path.chmod(0o755)
    assert code == 2
    assert f"{script}: cannot write: cannot create a file in {tmp_path}: Permission denied" in err
    assert script.read_text(encoding="utf-8") == DP_SCRIPT


def test_output_into_a_folder_that_refuses_it_is_an_error(
    script: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "out").mkdir()
    _refuse_new_files(monkeypatch)
    code, _, err = run("convert", str(script), "-o", str(tmp_path / "out" / "train_ddp.py"))
    assert code == 2 and "Traceback" not in err
    assert f"{tmp_path / 'out' / 'train_ddp.py'}: cannot write: cannot create a file in {tmp_path / 'out'}" in err


def test_a_report_that_cannot_be_written_is_an_error(
    script: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _refuse_new_files(monkeypatch, only="migration")
    code, _, err = run("convert", "--diff", "--report", str(tmp_path / "migration.md"), str(script))
    assert code == 2
    assert f"error: cannot write the migration report: {tmp_path / 'migration.md'}: cannot write" in err


def test_a_helpers_module_that_cannot_be_written_leaves_the_project_unchanged(
    script: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Should not write scripts that import a helpers module that is not there."""
    _refuse_new_files(monkeypatch, only="ddp_helpers")
    code, _, err = run("convert", str(tmp_path))
    assert code == 2
    assert f"error: cannot write the helpers module: {tmp_path / 'ddp_helpers.py'}: cannot write" in err
    assert f"error: {script}: not converted, since it would import" in err
    assert script.read_text(encoding="utf-8") == DP_SCRIPT
    assert not (tmp_path / "ddp_helpers.py").exists()


def test_check_fix_that_cannot_write_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "train.py"
    path.write_text(FIXABLE, encoding="utf-8")
    _refuse_new_files(monkeypatch)
    code, out, err = run("check", "--fix", str(path))
    assert code == 2
    assert f"error: {path}: cannot write: cannot create a file in {tmp_path}: Permission denied" in err
    assert "DDP505" in out  # its findings are still reported
    assert path.read_text(encoding="utf-8") == FIXABLE


# -- 8. diff headers that patch and git apply take ------------------------------------------------------------


def _applies(diff: str, where: Path) -> None:
    """Both `patch -p1` and `git apply` accept ``diff`` run in ``where``."""
    if shutil.which("patch") is not None:
        done = subprocess.run(["patch", "-p1", "--dry-run"], input=diff, capture_output=True, text=True, cwd=where)
        assert done.returncode == 0, done.stdout + done.stderr
    done = subprocess.run(["git", "apply", "--check", "-"], input=diff, capture_output=True, text=True, cwd=where)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("command", [["convert", "--diff"], ["check", "--diff"]])
@pytest.mark.parametrize("spelling", ["absolute under here", "absolute elsewhere", "relative"])
def test_a_diff_applies_with_patch_and_git_apply(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str], spelling: str
) -> None:
    """Should name the file relative to here, or absolute without its leading slash (`a//abs/x.py` applies nowhere)."""
    project = tmp_path / "project"
    project.mkdir()
    path = project / "train.py"
    path.write_text(DP_SCRIPT if command[0] == "convert" else FIXABLE, encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    here = elsewhere if spelling == "absolute elsewhere" else tmp_path
    monkeypatch.chdir(here)
    named = str(path) if spelling.startswith("absolute") else "project/train.py"
    code, out, _ = run(*command, named)
    assert code in (0, 1) and out.startswith("--- a/")
    assert "a//" not in out and "b//" not in out
    _applies(out, Path("/") if spelling == "absolute elsewhere" else here)


# -- 9 and 10. arguments that would be ignored, and folders with nothing to do -----------------------------------


@pytest.mark.parametrize("flag", ["--diff", "--check"])
def test_output_with_a_dry_run_is_a_usage_error(script: Path, tmp_path: Path, flag: str) -> None:
    target = tmp_path / "train_ddp.py"
    code, _, err = run("convert", flag, str(script), "-o", str(target))
    assert code == 2
    assert "--output writes the converted script, and --diff and --check write nothing" in err
    assert not target.exists()


@pytest.mark.parametrize("command", ["convert", "check"])
def test_a_folder_without_python_files_is_warned_about(tmp_path: Path, command: str) -> None:
    """Should exit 0 (nothing is wrong to fix) but say the folder holds no script, which is likely a wrong path."""
    (tmp_path / "notes.txt").write_text("DataParallel\n", encoding="utf-8")
    code, _, err = run(command, str(tmp_path))
    assert code == 0
    assert f"warning: no Python files found in {tmp_path}" in err
