"""What checking convert's own output costs: convert with the output check next to convert without it.

Every golden fixture's ``before.py`` is converted in-process, alternately with
and without the check of its output (``dp2ddp.output_check.unreported``, which
convert runs on every file it changes), ``--repeat`` times. The script prints
the median time of each per file, summed over the fixtures, and their ratio.

The machine these numbers come from is usually shared: quote the medians and the ratio.

    python bench/output_check.py
    python bench/output_check.py --repeat 7
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from unittest import mock

from dp2ddp import output_check
from dp2ddp.api import convert_source

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _timed(source: str, checked: bool) -> float:
    start = time.perf_counter()
    if checked:
        convert_source(source)
    else:
        with mock.patch.object(output_check, "unreported", lambda source, output, findings, role: (output, [])):
            convert_source(source)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    sources = [path.read_text(encoding="utf-8") for path in sorted(FIXTURES.glob("*/before.py"))]
    with_check: list[float] = []
    without: list[float] = []
    for source in sources:
        convert_source(source)  # warm: imports, caches
        times = {True: [], False: []}
        for _ in range(args.repeat):
            for checked in (False, True):
                times[checked].append(_timed(source, checked))
        with_check.append(statistics.median(times[True]))
        without.append(statistics.median(times[False]))
    print(f"{len(sources)} fixtures, {args.repeat} alternated runs each, medians per file summed")
    print(f"convert without the output check: {sum(without):.2f} s")
    print(f"convert with the output check:    {sum(with_check):.2f} s")
    print(f"ratio (with / without):           {sum(with_check) / sum(without):.2f}")
    ratios = sorted(w / o for w, o in zip(with_check, without))
    print(f"per file, median ratio {statistics.median(ratios):.2f}, largest {ratios[-1]:.2f}")


if __name__ == "__main__":
    main()
