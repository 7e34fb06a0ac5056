"""Ctrl-C, SIGTERM and a dying worker during a multi-file run: it stops within a second, says what it did,
exits 128 + the signal, leaves no process behind and no file half-written; a dead worker costs one file.

The runs are real: ``python -m dp2ddp`` in a session of its own over 200 copies of a training script,
signalled the way a terminal (the whole process group) or a supervisor (the parent alone) does it.
"""

from __future__ import annotations

import faulthandler
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dp2ddp.batch import map_files
from dp2ddp.pool import WorkerCrashed
from tests.conftest import FIXTURES

SCRIPT = FIXTURES / "mnist_argparse" / "before.py"
CONVERTED = FIXTURES / "mnist_argparse" / "after.py"  # a script converted on its own, helpers inline
COPIES = 200
PARALLEL_COPIES = 4  # the fewest a run converts in workers
# From the signal to the exit: killing the workers and saying so takes milliseconds; the rest is a loaded machine.
STOP_WITHIN_S = 2.0

# The processes of a session are found in /proc.
pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc (Linux)")


def _tree(folder: Path, copies: int = COPIES) -> list[Path]:
    folder.mkdir()
    paths = [folder / f"train_{index:03d}.py" for index in range(copies)]
    for path in paths:
        shutil.copyfile(SCRIPT, path)
    return paths


def _start(*args: str) -> subprocess.Popen[str]:
    # A session of its own, as a terminal gives a command: its process group gets the terminal's Ctrl-C.
    return subprocess.Popen(
        [sys.executable, "-m", "dp2ddp", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _in_session(session: int) -> list[int]:
    """The processes still alive in ``session``, zombies included (they are not reaped yet)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue  # it ended while we looked
        if int(fields[3]) == session:
            found.append(int(entry.name))
    return found


def _wait_until(condition, timeout: float = 120.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the run never got under way"
        time.sleep(0.05)


def _workers_running(process: subprocess.Popen[str]) -> bool:
    assert process.poll() is None, "it ended before it was signalled"
    return len(_in_session(process.pid)) > 1


def _converted(paths: list[Path], original: bytes) -> int:
    return sum(path.read_bytes() != original for path in paths)


def _stop(process: subprocess.Popen[str], *signals: tuple[float, signal.Signals, bool]) -> tuple[float, str]:
    """Send each (delay, signal, to the whole group?) in turn; the seconds from the first to the exit, and stderr."""
    started = time.monotonic()
    for delay, signum, group in signals:
        time.sleep(delay)
        try:
            os.killpg(process.pid, signum) if group else os.kill(process.pid, signum)
        except ProcessLookupError:
            pass  # it has stopped already
    try:
        _, err = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        _, err = process.communicate()
        pytest.fail(f"still running 60 s after the signal:\n{err}")
    return time.monotonic() - started, err


def _assert_stopped_cleanly(process: subprocess.Popen[str], elapsed: float, err: str, status: int) -> None:
    assert process.returncode == status, err
    assert elapsed < STOP_WITHIN_S, f"took {elapsed:.1f} s to stop"
    assert "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith("interrupted"), err
    # The workers were killed and waited for before the parent exited.
    assert _in_session(process.pid) == []


@pytest.fixture(scope="module")
def folder_reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """What a complete folder conversion writes: each script (importing its helpers) and the helpers module."""
    folder = tmp_path_factory.mktemp("reference") / "tree"
    _tree(folder, copies=PARALLEL_COPIES)
    done = subprocess.run(
        [sys.executable, "-m", "dp2ddp", "convert", "-j", "2", str(folder)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return {path.name: path.read_bytes() for path in folder.iterdir()}


def _assert_untouched_or_converted(folder: Path, reference: dict[str, bytes] | None) -> None:
    original = SCRIPT.read_bytes()
    converted = CONVERTED.read_bytes() if reference is None else reference["train_000.py"]
    names = set()
    for path in folder.iterdir():
        names.add(path.name)
        if path.name.startswith("train_"):
            assert path.read_bytes() in (original, converted), f"{path.name} is neither the original nor converted"
    assert not [name for name in names if name.startswith(".")], "a temporary file was left behind"
    scripts = [folder / name for name in names if name.startswith("train_")]
    if reference is not None and any(path.read_bytes() == converted for path in scripts):
        # A converted script imports its helpers: the module is written before any script that needs it.
        assert (folder / "ddp_helpers.py").read_bytes() == reference["ddp_helpers.py"]


@pytest.mark.slow
def test_ctrl_c_stops_a_folder_conversion_at_once_with_no_worker_left(
    tmp_path: Path, folder_reference: dict[str, bytes]
) -> None:
    """A folder is one project, converted in workers: Ctrl-C while they work stops it within a second."""
    folder = tmp_path / "tree"
    _tree(folder)
    process = _start("convert", "-j", "2", str(folder))
    _wait_until(lambda: _workers_running(process))
    time.sleep(1.0)  # well into the first chunk of 16 files
    elapsed, err = _stop(process, (0, signal.SIGINT, True))
    _assert_stopped_cleanly(process, elapsed, err, 130)
    _assert_untouched_or_converted(folder, folder_reference)


def test_ctrl_c_to_the_parent_alone_stops_its_workers_too(tmp_path: Path) -> None:
    """``kill -INT`` reaches the parent only: it kills the workers itself; files are untouched or fully converted."""
    paths = _tree(tmp_path / "tree")
    original = SCRIPT.read_bytes()
    process = _start("convert", "-j", "2", *map(str, paths))
    _wait_until(lambda: _converted(paths, original) >= 2)
    elapsed, err = _stop(process, (0, signal.SIGINT, False))
    _assert_stopped_cleanly(process, elapsed, err, 130)
    _assert_untouched_or_converted(tmp_path / "tree", None)
    # The summary counts what was written.
    assert f"interrupted: {_converted(paths, original)} files converted" in err


def test_a_second_and_third_ctrl_c_print_no_traceback(tmp_path: Path) -> None:
    paths = _tree(tmp_path / "tree")
    original = SCRIPT.read_bytes()
    process = _start("convert", "-j", "2", *map(str, paths))
    _wait_until(lambda: _converted(paths, original) >= 1)
    elapsed, err = _stop(process, (0, signal.SIGINT, True), (0.1, signal.SIGINT, True), (0.1, signal.SIGINT, True))
    _assert_stopped_cleanly(process, elapsed, err, 130)
    assert err.count("interrupted") == 1, err
    _assert_untouched_or_converted(tmp_path / "tree", None)


@pytest.mark.parametrize("group", [False, True], ids=["to the parent", "to the group"])
def test_sigterm_stops_a_run_as_ctrl_c_does_with_exit_143(tmp_path: Path, group: bool) -> None:
    """A CI cancel or ``timeout`` sends SIGTERM to the parent alone: without a handler the workers would outlive it."""
    paths = _tree(tmp_path / "tree")
    original = SCRIPT.read_bytes()
    process = _start("convert", "-j", "2", *map(str, paths))
    _wait_until(lambda: _converted(paths, original) >= 1)
    elapsed, err = _stop(process, (0, signal.SIGTERM, group))
    _assert_stopped_cleanly(process, elapsed, err, 143)
    assert ", 0 files failed;" in err, "a worker the signal ended is not a file that failed"
    _assert_untouched_or_converted(tmp_path / "tree", None)


def test_ctrl_c_stops_check_at_once(tmp_path: Path) -> None:
    folder = tmp_path / "tree"
    _tree(folder)
    process = _start("check", "-j", "2", str(folder))
    _wait_until(lambda: _workers_running(process))
    time.sleep(1.0)
    elapsed, err = _stop(process, (0, signal.SIGINT, True))
    _assert_stopped_cleanly(process, elapsed, err, 130)
    assert "interrupted after checking" in err and f"of {COPIES} files" in err
    assert [path.read_bytes() for path in folder.iterdir()] == [SCRIPT.read_bytes()] * COPIES


@pytest.mark.slow
@pytest.mark.parametrize("as_project", [False, True], ids=["files", "a folder"])
def test_a_worker_killed_mid_run_costs_one_file_and_the_run_goes_on(tmp_path: Path, as_project: bool) -> None:
    paths = _tree(tmp_path / "tree", copies=12)
    original, converted = SCRIPT.read_bytes(), None if as_project else CONVERTED.read_bytes()
    process = _start("convert", "-j", "2", *([str(tmp_path / "tree")] if as_project else map(str, paths)))
    _wait_until(lambda: _workers_running(process))
    time.sleep(0.5)
    worker = next(pid for pid in _in_session(process.pid) if pid != process.pid)
    os.kill(worker, signal.SIGKILL)
    _, err = process.communicate(timeout=300)
    assert process.returncode == 2, err
    (error,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert "the worker process was killed by SIGKILL while converting it" in error, err
    lost = Path(error.removeprefix("error: ").split(":")[0])
    assert lost.read_bytes() == original
    assert "11 files converted, 0 files unchanged, 1 file failed" in err
    for path in paths:
        if path != lost:
            assert path.read_bytes() != original
            assert converted is None or path.read_bytes() == converted


# -- the pool itself ---------------------------------------------------------------------


def _dies_on_three(item: int) -> int:
    if item == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    if item == 5:
        faulthandler.disable()  # pytest's, inherited: its dump of the stack is noise here
        os.kill(os.getpid(), signal.SIGSEGV)  # what a crash in native code (a parser's stack overflow) looks like
    return item * 10


def test_a_worker_that_dies_costs_only_the_item_it_was_on() -> None:
    results = list(map_files(_dies_on_three, range(12), 2, crashed=lambda item, why: (item, why)))
    assert results[:3] == [0, 10, 20]
    assert results[3] == (3, "the worker process was killed by SIGKILL")
    assert results[5] == (5, "the worker process was killed by SIGSEGV")
    assert results[6:] == [60, 70, 80, 90, 100, 110]


def test_a_worker_that_dies_stops_the_run_with_why_when_no_stand_in_is_given() -> None:
    with pytest.raises(WorkerCrashed, match="killed by SIGKILL"):
        list(map_files(_dies_on_three, range(12), 2))


def _pid_or_sleep(item: int) -> int:
    if item < 2:
        time.sleep(0.2)  # so that each worker takes one of these two
        return os.getpid()
    time.sleep(60)
    return item


def test_closing_the_results_kills_the_workers_at_once() -> None:
    """What Ctrl-C does to a run: its workers are killed mid-chunk, not waited for."""
    results: Iterator[int] = map_files(_pid_or_sleep, [0, 1, 2, 3, 4, 5, 6, 7], 2)
    workers = {next(results), next(results)}
    started = time.monotonic()
    results.close()  # type: ignore[attr-defined]
    assert time.monotonic() - started < 1.0
    for pid in workers:
        assert not Path(f"/proc/{pid}").exists(), "a worker outlived the run"


def _raises(item: int) -> int:
    if item == 2:
        raise ValueError(f"bad item {item}")
    return item


def test_an_exception_in_a_worker_is_raised_as_it_is_without_a_pool() -> None:
    with pytest.raises(ValueError, match="bad item 2"):
        list(map_files(_raises, range(8), 2))
