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

With ``--statistical`` it also times ``verify --statistical`` (5 reference seeds) on the same
fixture, side by side with each exact verify, and prints the median ratio statistical / exact:
target at most 3.

Usage: python bench/verify_overhead.py [--repeat 5] [--fixture mnist_argparse] [--statistical] [-- SCRIPT ARGS]
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
STATISTICAL_TARGET = 3.0


def measure(fixture: str, script_args: list[str], *options: str) -> tuple[float, float, float]:
    """(verify wall, converted run, reference runs) in seconds, for one verify."""
    with tempfile.TemporaryDirectory(prefix="dp2ddp-bench-") as folder:
        work = Path(folder)
        script = work / "train.py"
        shutil.copy(FIXTURES / fixture / "before.py", script)
        result = work / "verify.json"
        command = [sys.executable, "-m", "dp2ddp", "verify", *options, "--json", str(result), str(script), "--",
                   *script_args]  # fmt: skip
        started = time.perf_counter()
        completed = subprocess.run(command, cwd=work, capture_output=True, text=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
        wall = time.perf_counter() - started
        if completed.returncode != 0:
            sys.exit(f"verify failed ({completed.returncode}):\n{completed.stdout}{completed.stderr}")
        *references, converted = (run["wall_s"] for run in json.loads(result.read_text())["runs"])
        return wall, converted, sum(references)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--fixture", default="mnist_argparse")
    parser.add_argument("--statistical", action="store_true", help="also time verify --statistical")
    parser.add_argument("script_args", nargs="*")
    args = parser.parse_args()

    ratios, walls, runs, statistical = [], [], [], []
    print(f"fixture {args.fixture}, {args.repeat} repetitions, {os.cpu_count()} CPUs")
    print(f"{'#':>2}  {'verify s':>9}  {'converted s':>11}  {'reference s':>11}  {'ratio':>6}")
    for repetition in range(1, args.repeat + 1):
        wall, converted, reference = measure(args.fixture, args.script_args)
        ratio = wall / (converted + reference)
        ratios.append(ratio)
        walls.append(wall)
        runs.append(converted + reference)
        line = f"{repetition:>2}  {wall:>9.2f}  {converted:>11.2f}  {reference:>11.2f}  {ratio:>6.3f}"
        if args.statistical:
            seeds_wall = measure(args.fixture, args.script_args, "--statistical")[0]
            statistical.append(seeds_wall / wall)
            line += f"  statistical {seeds_wall:.2f} s = {statistical[-1]:.2f}x"
        print(line)
    median = statistics.median(ratios)
    print(f"median verify {statistics.median(walls):.2f} s, median runs {statistics.median(runs):.2f} s")
    print(f"median ratio {median:.3f} (target <= {TARGET}): {'ok' if median <= TARGET else 'OVER TARGET'}")
    ok = median <= TARGET
    if statistical:
        times = statistics.median(statistical)
        print(f"median statistical / exact {times:.2f} (target <= {STATISTICAL_TARGET}): "
              f"{'ok' if times <= STATISTICAL_TARGET else 'OVER TARGET'}")  # fmt: skip
        ok = ok and times <= STATISTICAL_TARGET
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
