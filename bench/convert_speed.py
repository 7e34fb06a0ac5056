"""How much convert costs next to a bare LibCST parse of the same code.

Two measurements, each a ratio taken side by side in one run:

- per fixture: in-process ``convert_source`` time divided by
  ``libcst.parse_module(source).code`` (parse + codegen) of the same source,
  medians of ``--runs`` runs each; targets: median at most 15x on files that
  change, at most 3x on files that do not;
- over installed library trees (torch/nn, torch/utils, torch/distributed,
  torchvision): ``dp2ddp convert --check`` wall time divided by a bare LibCST
  parse of every file in the same trees; target at most 0.5.

    python bench/convert_speed.py               # both, 5 runs
    python bench/convert_speed.py --no-tree     # fixtures only
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import libcst as cst

from dp2ddp.api import convert_source
from dp2ddp.files import discover

# Needs dp2ddp installed (pip install -e '.[dev]'); the fixtures are read from this checkout.
ROOT = Path(__file__).resolve().parent.parent

FIXTURE_TARGETS = {"changes": 15.0, "unchanged": 3.0}
TREE_TARGET = 0.5


def median_time(function: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_fixtures(runs: int) -> bool:
    print(f"per fixture: convert / (parse + codegen), medians of {runs} runs")
    print(f"  {'fixture':<24} {'lines':>5} {'bare ms':>8} {'convert ms':>11} {'ratio':>7}  kind")
    ratios: dict[str, list[float]] = {"changes": [], "unchanged": []}
    for case in sorted((ROOT / "fixtures").iterdir()):
        before = case / "before.py"
        if not before.is_file():
            continue
        source = before.read_text(encoding="utf-8")
        kind = "changes" if convert_source(source).changed else "unchanged"
        # Interleave the two, so load on a shared machine hits both alike.
        bare, converted = [], []
        for _ in range(runs):
            bare.append(median_time(lambda: cst.parse_module(source).code, 1))
            converted.append(median_time(lambda: convert_source(source), 1))
        ratio = statistics.median(converted) / statistics.median(bare)
        ratios[kind].append(ratio)
        lines = source.count("\n")
        print(
            f"  {case.name:<24} {lines:>5} {statistics.median(bare) * 1e3:>8.1f} "
            f"{statistics.median(converted) * 1e3:>11.1f} {ratio:>6.1f}x  {kind}"
        )
    ok = True
    for kind, values in ratios.items():
        if not values:
            continue
        median, worst = statistics.median(values), max(values)
        target = FIXTURE_TARGETS[kind]
        verdict = "meets" if median <= target else "misses"
        ok &= median <= target
        print(f"  files that {kind:<9}: median {median:.1f}x, worst {worst:.1f}x (target median <= {target:g}x: {verdict})")
    return ok


def library_trees() -> list[Path]:
    trees = []
    for package, parts in (("torch", ("nn",)), ("torch", ("utils",)), ("torch", ("distributed",)), ("torchvision", ())):
        spec = importlib.util.find_spec(package)
        if spec is None or spec.origin is None:
            continue
        trees.append(Path(spec.origin).parent.joinpath(*parts))
    return trees


def bench_tree(runs: int, jobs: int | None) -> bool:
    trees = library_trees()
    if not trees:
        print("tree: torch and torchvision are not installed; skipped (pip install -e '.[verify]')")
        return True
    files = discover(trees)
    sources = []
    for path in files:
        try:
            sources.append(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            continue

    def parse_all() -> None:
        for source in sources:
            try:
                cst.parse_module(source)
            except cst.ParserSyntaxError:
                pass

    command = [sys.executable, "-m", "dp2ddp", "convert", "--check", *map(str, trees)]
    if jobs is not None:
        command[4:4] = ["--jobs", str(jobs)]

    def check_all() -> None:
        # Exit 1 (work found) and 2 (a file failed) are answers, not failures of the benchmark.
        subprocess.run(command, capture_output=True, check=False)

    bare, checked = [], []
    for _ in range(runs):
        bare.append(median_time(parse_all, 1))
        checked.append(median_time(check_all, 1))
    ratio = statistics.median(checked) / statistics.median(bare)
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    summary = completed.stderr.strip().splitlines()[-1] if completed.stderr.strip() else ""
    print(f"tree: {len(files)} files under {', '.join(str(t) for t in trees)}")
    print(f"  bare parse of every file: median {statistics.median(bare):.1f} s over {runs} runs")
    print(f"  dp2ddp convert --check:   median {statistics.median(checked):.1f} s ({summary})")
    verdict = "meets" if ratio <= TREE_TARGET else "misses"
    print(f"  ratio {ratio:.2f} (target <= {TREE_TARGET}: {verdict})")
    return ratio <= TREE_TARGET


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="runs per measurement; medians are reported (default 5)")
    parser.add_argument("--no-tree", action="store_true", help="skip the installed-library tree measurement")
    parser.add_argument("--no-fixtures", action="store_true", help="skip the per-fixture measurement")
    parser.add_argument("--jobs", type=int, help="--jobs for convert --check (default: its own default)")
    args = parser.parse_args()
    ok = True
    if not args.no_fixtures:
        ok &= bench_fixtures(args.runs)
    if not args.no_tree:
        ok &= bench_tree(args.runs, args.jobs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
