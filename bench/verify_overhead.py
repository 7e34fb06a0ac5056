"""How much time ``dp2ddp verify`` adds to the two runs it launches.

For each repetition, one ``dp2ddp verify`` on a bundled fixture is timed from
the outside, and its ``--json`` says how long the converted run (torchrun) and
the reference run took, measured by verify around each launch. The ratio

    verify wall time / (converted run + reference run)

is what verify costs on top of the runs: its own start, the conversion (done
while the reference runs, so it shows up partly as a slower reference), the
comparison and the report. Target: a median of at most 1.3. The machines are
shared and noisy, so the medians are what to quote; the absolute verify time
is printed too, because overlapping work moves cost between the two columns.

Usage: python bench/verify_overhead.py [--repeat 5] [--fixture mnist_argparse] [-- SCRIPT ARGS]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
TARGET = 1.3


def measure(fixture: str, script_args: list[str]) -> tuple[float, float, float]:
    """(verify wall, converted run, reference run) in seconds, for one verify."""
    with tempfile.TemporaryDirectory(prefix="dp2ddp-bench-") as folder:
        work = Path(folder)
        script = work / "train.py"
        shutil.copy(FIXTURES / fixture / "before.py", script)
        result = work / "verify.json"
        command = [sys.executable, "-m", "dp2ddp", "verify", "--json", str(result), str(script), "--", *script_args]
        started = time.perf_counter()
        completed = subprocess.run(command, cwd=work, capture_output=True, text=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
        wall = time.perf_counter() - started
        if completed.returncode != 0:
            sys.exit(f"verify failed ({completed.returncode}):\n{completed.stdout}{completed.stderr}")
        converted, reference = (run["wall_s"] for run in json.loads(result.read_text())["runs"])
        return wall, converted, reference


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--fixture", default="mnist_argparse")
    parser.add_argument("script_args", nargs="*")
    args = parser.parse_args()

    ratios, walls, runs = [], [], []
    print(f"fixture {args.fixture}, {args.repeat} repetitions, {os.cpu_count()} CPUs")
    print(f"{'#':>2}  {'verify s':>9}  {'converted s':>11}  {'reference s':>11}  {'ratio':>6}")
    for repetition in range(1, args.repeat + 1):
        wall, converted, reference = measure(args.fixture, args.script_args)
        ratio = wall / (converted + reference)
        ratios.append(ratio)
        walls.append(wall)
        runs.append(converted + reference)
        print(f"{repetition:>2}  {wall:>9.2f}  {converted:>11.2f}  {reference:>11.2f}  {ratio:>6.3f}")
    median = statistics.median(ratios)
    print(f"median verify {statistics.median(walls):.2f} s, median runs {statistics.median(runs):.2f} s")
    print(f"median ratio {median:.3f} (target <= {TARGET}): {'ok' if median <= TARGET else 'OVER TARGET'}")
    sys.exit(0 if median <= TARGET else 1)


if __name__ == "__main__":
    main()
