"""How much ``dp2ddp check`` costs next to a bare LibCST parse, and next to torch-preflight 0.5.

Everything is measured in one run, on the same files (the Python sources of
the installed torch package by default, or ``--tree PATH``):

- in-process, single process: ``check_file`` over every file against
  ``libcst.parse_module`` of every file (both read each file from disk),
  alternated ``--repeat`` times; medians and their ratio, target at most 0.5;
- the CLI end to end, ``dp2ddp check --exit-zero -j1 TREE`` in a subprocess, once;
- torch-preflight 0.5 on the same files, installed into a throwaway venv
  (``pip install torch-preflight==0.5``) and run single-process; target:
  dp2ddp at least 10x faster (skipped with a note if it does not install);
- peak memory (``ru_maxrss``) of a child process that only checks, and of one
  that only parses;
- how many files, how many pass the cheap prefilter (``needs_check``), and
  how many findings.

The machine these numbers come from is usually shared: quote the medians and ratios.

    python bench/check_speed.py                          # the installed torch
    python bench/check_speed.py --tree .../torchvision   # another folder
    python bench/check_speed.py --files 200 --repeat 5   # a quick run
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

import libcst as cst

from dp2ddp.batch import check_file
from dp2ddp.check import Selection, needs_check
from dp2ddp.files import SourceError, discover, read_source

# Needs dp2ddp installed (pip install -e .); torch itself is only read, never imported.
RATIO_TARGET = 0.5
PREFLIGHT = "torch-preflight==0.5"
PREFLIGHT_TARGET = 10.0
SELECTION = Selection()


def default_tree() -> Path | None:
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent


def check_all(files: list[Path]) -> tuple[int, int]:
    """``dp2ddp check`` in this process, one file after another: (findings, files that could not be checked)."""
    findings = failed = 0
    for path in files:
        outcome = check_file(path, SELECTION)
        if outcome.result is None:
            failed += 1
        else:
            findings += len(outcome.result.diagnostics)
    return findings, failed


def parse_all(files: list[Path]) -> int:
    """A bare LibCST parse of every file, read from disk as check reads it: the files that do not parse."""
    failed = 0
    for path in files:
        try:
            cst.parse_module(read_source(path).text)
        except (SourceError, cst.ParserSyntaxError):
            failed += 1
    return failed


def peak_mib() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def child_peak(what: str, tree: Path, limit: int | None) -> float | None:
    """The peak memory of a fresh process that runs only ``what`` over the files, in MiB.

    ``imports`` reads no file: what importing libcst and dp2ddp alone costs.
    """
    command = [sys.executable, __file__, "--tree", str(tree), "--memory-child", what]
    if limit is not None:
        command += ["--files", str(limit)]
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    match = re.search(r"peak_mib=([0-9.]+)", completed.stdout)
    if completed.returncode != 0 or match is None:
        print(f"  ({what} child failed: {completed.stderr.strip().splitlines()[-1:] or completed.returncode})")
        return None
    return float(match.group(1))


def summary_line(stderr: str) -> str:
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def run_cli(targets: list[str], cwd: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    command = [sys.executable, "-m", "dp2ddp", "check", "--exit-zero", "-j1", *targets]
    start = time.perf_counter()
    # Run from an empty folder, so no [tool.dp2ddp] of the caller's project changes what is checked.
    completed = subprocess.run(command, capture_output=True, text=True, check=False, cwd=cwd)
    return time.perf_counter() - start, completed


def pip_reason(output: str) -> str:
    """pip's own one-line reason for a failed install."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:")]
    reason = errors[0] if errors else (lines[-1] if lines else "no output")
    return reason.removeprefix("ERROR: ")


def install_preflight(folder: Path) -> tuple[Path | None, str]:
    """torch-preflight 0.5 in a throwaway venv under ``folder``: its command, or None and pip's reason."""
    environment = folder / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(environment)
    python = environment / ("Scripts" if os.name == "nt" else "bin") / "python"
    try:
        completed = subprocess.run(
            [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", PREFLIGHT],
            capture_output=True, text=True, check=False, timeout=900,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return None, "pip did not finish within 15 minutes"
    if completed.returncode != 0:
        return None, pip_reason(completed.stderr + completed.stdout)
    command = shutil.which("torch-preflight", path=str(python.parent))
    if command is None:
        return None, "installed, but it put no torch-preflight command in the venv"
    return Path(command), ""


def preflight_command(command: Path, targets: list[str]) -> list[str] | None:
    """``torch-preflight check -j 1 -q TARGETS``, with only the options its ``check --help`` lists."""
    top = subprocess.run([str(command), "--help"], capture_output=True, text=True, check=False)
    if not re.search(r"\bcheck\b", top.stdout):
        return None
    usage = subprocess.run([str(command), "check", "--help"], capture_output=True, text=True, check=False).stdout
    options = []
    if re.search(r"(^|\s)(-j|--jobs)\b", usage):
        options += ["-j", "1"]  # single process, as dp2ddp's -j1
    if re.search(r"(^|\s)(-q|--quiet)\b", usage):
        options.append("-q")
    if "--no-color" in usage:
        options.append("--no-color")
    return [str(command), "check", *options, *targets]


def bench_preflight(targets: list[str], label: str, cwd: str, dp2ddp_seconds: float, timeout: float) -> None:
    print(f"{PREFLIGHT.replace('==', ' ')}:")
    with tempfile.TemporaryDirectory(prefix="check_speed-") as folder:
        start = time.perf_counter()
        command, reason = install_preflight(Path(folder))
        if command is None:
            print(f"  torch-preflight 0.5: not installable from the package index ({reason}); comparison skipped")
            return
        print(f"  installed into a throwaway venv in {time.perf_counter() - start:.0f} s")
        run = preflight_command(command, targets)
        if run is None:
            print("  torch-preflight 0.5: its --help lists no `check` command; comparison skipped")
            return
        shown = " ".join([*run[1 : -len(targets)], label])
        start = time.perf_counter()
        try:
            # A wide terminal, so rich does not wrap the summary line.
            wide = {**os.environ, "COLUMNS": "200"}
            completed = subprocess.run(run, capture_output=True, text=True, check=False, cwd=cwd, timeout=timeout, env=wide)
        except subprocess.TimeoutExpired:
            print(f"  `torch-preflight {shown}`: stopped after {timeout:.0f} s, unfinished")
            bound = timeout / dp2ddp_seconds
            verdict = "meets" if bound >= PREFLIGHT_TARGET else "cannot tell"
            print(f"  dp2ddp check -j1 is more than {bound:.1f}x faster (target >= {PREFLIGHT_TARGET:g}x: {verdict})")
            return
        seconds = time.perf_counter() - start
        # Its summary is the line that counts the files ("Found 3 errors in 185 file(s)."), not always the last.
        lines = [line.strip() for line in (completed.stdout + completed.stderr).splitlines() if "file" in line]
        said = lines[-1] if lines else summary_line(completed.stdout) or summary_line(completed.stderr)
        if completed.returncode not in (0, 1):
            print(f"  `torch-preflight {shown}` exited {completed.returncode}: {said}")
        counted = re.search(r"([0-9,]+) files?(\(s\))?", said)
        if counted is not None and int(counted.group(1).replace(",", "")) != len(targets):
            print(f"  warning: torch-preflight says it read {counted.group(1)} files, not the {len(targets)} given")
        print(f"  `torch-preflight {shown}`: {seconds:.1f} s ({said})")
        ratio = seconds / dp2ddp_seconds
        verdict = "meets" if ratio >= PREFLIGHT_TARGET else "misses"
        print(f"  dp2ddp check -j1 is {ratio:.1f}x faster (target >= {PREFLIGHT_TARGET:g}x: {verdict})")


def _listed(times: list[float]) -> str:
    return ", ".join(f"{t:.2f}" for t in times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, help="folder of Python sources (default: the installed torch package)")
    parser.add_argument("--repeat", type=int, default=3, help="alternated runs of check and parse; medians are reported (default 3)")
    parser.add_argument("--files", type=int, metavar="N", help="only the first N files, for a quick run")
    parser.add_argument("--no-preflight", action="store_true", help="skip the torch-preflight comparison")
    parser.add_argument(
        "--preflight-timeout", type=float, default=3600, metavar="S",
        help="stop torch-preflight after S seconds and report a lower bound (default 3600)",
    )  # fmt: skip
    parser.add_argument("--memory-child", choices=("check", "parse", "imports"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.repeat < 1 or (args.files is not None and args.files < 1):
        parser.error("--repeat and --files take a number of at least 1")
    tree = args.tree if args.tree is not None else default_tree()
    if tree is None:
        print("error: torch is not installed here; give a folder of Python sources with --tree PATH", file=sys.stderr)
        return 2
    if not tree.is_dir():
        print(f"error: --tree {tree}: not a folder", file=sys.stderr)
        return 2
    files = discover([tree.resolve()])  # absolute: the CLI runs start in another folder
    if args.files is not None:
        files = files[: args.files]
    if not files:
        print(f"error: no .py files under {tree}", file=sys.stderr)
        return 2

    if args.memory_child is not None:
        if args.memory_child == "check":
            check_all(files)
        elif args.memory_child == "parse":
            parse_all(files)
        print(f"peak_mib={peak_mib():.1f}")
        return 0

    # First, while this process is small: Linux keeps the parent's peak across fork and exec,
    # so a child started after the timings below would report this process's peak, not its own.
    peaks = {what: child_peak(what, tree, args.files) for what in ("check", "parse", "imports")}

    texts = []
    for path in files:
        try:
            texts.append(read_source(path).text)
        except SourceError:
            continue
    candidates = sum(needs_check(text) for text in texts)
    lines = sum(text.count("\n") for text in texts)
    print(f"tree: {tree}")
    print(f"  {len(files)} files ({lines} lines); {candidates} pass the prefilter (needs_check), {len(texts) - candidates} are skipped by it")

    # Alternate the two, so load on a shared machine hits both alike.
    checked, parsed = [], []
    findings = failed = unparsed = 0
    for _ in range(args.repeat):
        start = time.perf_counter()
        findings, failed = check_all(files)
        checked.append(time.perf_counter() - start)
        start = time.perf_counter()
        unparsed = parse_all(files)
        parsed.append(time.perf_counter() - start)
    check_median, parse_median = statistics.median(checked), statistics.median(parsed)
    ratio = check_median / parse_median
    verdict = "meets" if ratio <= RATIO_TARGET else "misses"
    print(f"in-process, single process, medians of {args.repeat} alternated runs:")
    print(f"  dp2ddp check (check_file):  median {check_median:.2f} s  (runs: {_listed(checked)})")
    print(f"  bare libcst.parse_module:   median {parse_median:.2f} s  (runs: {_listed(parsed)})")
    print(f"  ratio check/parse {ratio:.3f} (target <= {RATIO_TARGET}: {verdict})")
    print(f"  {findings} findings; {failed} files check could not read or parse ({unparsed} that libcst could not)")

    # Both CLIs get the same explicit list of files: torch-preflight skips a folder under site-packages
    # (it reports "0 file(s)" for the installed torch), and a list leaves neither to its own discovery.
    targets = [str(path) for path in files]
    with tempfile.TemporaryDirectory(prefix="check_speed-cwd-") as cwd:
        cli_seconds, completed = run_cli(targets, cwd)
        shown = f"<the {len(files)} files>"
        print("CLI end to end, once:")
        print(f"  `dp2ddp check --exit-zero -j1 {shown}`: {cli_seconds:.2f} s, exit {completed.returncode} ({summary_line(completed.stderr)})")
        if args.no_preflight:
            print("torch-preflight 0.5: skipped (--no-preflight)")
        else:
            bench_preflight(targets, shown, cwd, cli_seconds, args.preflight_timeout)

    print("peak memory (ru_maxrss of a fresh child process that runs only one of them):")
    for what, label in (("check", "dp2ddp check"), ("parse", "bare parse"), ("imports", "imports only (the floor of both)")):
        if peaks[what] is not None:
            print(f"  {label:<32} {peaks[what]:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
