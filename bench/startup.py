"""What ``dp2ddp check`` costs a pre-commit hook, next to ``python -c "import libcst"``.

A pre-commit hook runs on every commit, and most commits touch no DDP code:
there, ``dp2ddp check`` should cost no more than starting Python and
importing LibCST. Each command below runs in a fresh process, in turn, once
per round (alternated, so load on a shared machine hits them alike); the
medians of ``--repeat`` rounds are printed side by side:

(i)   ``python -c "import libcst"``, the yardstick;
(ii)  ``dp2ddp check FILE`` on one ordinary module with no distributed code;
(iii) ``dp2ddp check`` on a 20-file "commit" of ordinary modules, none of them DDP;
(iv)  the same commit with 2 of its files replaced by DDP scripts (copies of
      ``fixtures/check/*/case.py``), which are parsed and analysed;
(v)   ``python -c "import dp2ddp.cli"``, what any command pays before it starts.

It runs the ``dp2ddp`` console script next to ``sys.executable``, which is what
pre-commit runs, from a temporary folder (so no ``[tool.dp2ddp]`` of the
caller applies) holding the generated modules. Target: (ii)/(i) <= 1.0.

    python bench/startup.py               # 15 alternated rounds
    python bench/startup.py --repeat 5    # a quick run
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

RATIO_TARGET = 1.0
COMMIT_SIZE = 20
# Two DDP scripts with findings, both past the prefilter: the hook's cost when a commit touches DDP code.
DDP_CASES = ("DDP501", "DDP502")
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "check"


def _settings(index: int) -> str:
    return textwrap.dedent(f'''\
        """Settings for experiment group {index}, read from the environment with defaults."""

        from __future__ import annotations

        import os
        from dataclasses import dataclass, field


        @dataclass(frozen=True)
        class Settings{index}:
            data_root: str = "data/group{index}"
            batch_size: int = {32 + index}
            learning_rate: float = {0.001 * (index + 1):.4f}
            epochs: int = {10 + index}
            tags: tuple[str, ...] = field(default_factory=tuple)

            @classmethod
            def from_environment(cls) -> "Settings{index}":
                return cls(
                    data_root=os.environ.get("DATA_ROOT", cls.data_root),
                    batch_size=int(os.environ.get("BATCH_SIZE", cls.batch_size)),
                    learning_rate=float(os.environ.get("LEARNING_RATE", cls.learning_rate)),
                    epochs=int(os.environ.get("EPOCHS", cls.epochs)),
                )

            def describe(self) -> str:
                return f"{{self.data_root}}: {{self.epochs}} epochs of {{self.batch_size}} at {{self.learning_rate}}"
        ''')


def _text_utilities(index: int) -> str:
    return textwrap.dedent(f'''\
        """Small text helpers used by the report writers (set {index})."""

        import re
        import unicodedata
        from collections import Counter

        _WORD = re.compile(r"[A-Za-z0-9_]+")


        def slugify(text: str, limit: int = {40 + index}) -> str:
            normal = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
            words = _WORD.findall(normal.lower())
            return "-".join(words)[:limit].rstrip("-")


        def top_words(lines, count=10):
            counter = Counter()
            for line in lines:
                counter.update(word.lower() for word in _WORD.findall(line))
            return counter.most_common(count)


        def wrap(text: str, width: int = 72) -> list[str]:
            lines, current = [], []
            for word in text.split():
                if sum(len(w) + 1 for w in current) + len(word) > width:
                    lines.append(" ".join(current))
                    current = []
                current.append(word)
            if current:
                lines.append(" ".join(current))
            return lines


        def table(rows: list[tuple[str, float]]) -> str:
            width = max((len(name) for name, _ in rows), default=0)
            return "\\n".join(f"{{name:<{{width}}}}  {{value:8.3f}}" for name, value in rows)
        ''')


def _model(index: int) -> str:
    return textwrap.dedent(f'''\
        """A small convolutional classifier (variant {index}) for the tutorial notebooks."""

        import torch
        import torch.nn as nn
        import torch.nn.functional as F


        class Block{index}(nn.Module):
            def __init__(self, channels: int) -> None:
                super().__init__()
                self.conv = nn.Conv2d(channels, channels, 3, padding=1)
                self.norm = nn.BatchNorm2d(channels)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return F.relu(self.norm(self.conv(x))) + x


        class Classifier{index}(nn.Module):
            def __init__(self, classes: int = 10, width: int = {16 + index}) -> None:
                super().__init__()
                self.stem = nn.Conv2d(3, width, 3, padding=1)
                self.blocks = nn.Sequential(*(Block{index}(width) for _ in range(3)))
                self.head = nn.Linear(width, classes)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                x = self.blocks(F.relu(self.stem(x)))
                return self.head(x.mean(dim=(2, 3)))


        def count_parameters(model: nn.Module) -> int:
            return sum(p.numel() for p in model.parameters() if p.requires_grad)
        ''')


def _metrics(index: int) -> str:
    return textwrap.dedent(f'''\
        """Running averages and a confusion matrix for evaluation loops (set {index})."""

        from __future__ import annotations

        import math


        class Average:
            def __init__(self) -> None:
                self.total = 0.0
                self.count = 0

            def update(self, value: float, n: int = 1) -> None:
                self.total += value * n
                self.count += n

            @property
            def value(self) -> float:
                return self.total / self.count if self.count else math.nan


        class Confusion:
            def __init__(self, classes: int = {5 + index}) -> None:
                self.cells = [[0] * classes for _ in range(classes)]

            def add(self, truth: int, guess: int) -> None:
                self.cells[truth][guess] += 1

            def accuracy(self) -> float:
                right = sum(self.cells[i][i] for i in range(len(self.cells)))
                seen = sum(map(sum, self.cells))
                return right / seen if seen else 0.0

            def recall(self, label: int) -> float:
                row = self.cells[label]
                return row[label] / sum(row) if sum(row) else 0.0
        ''')


def _command(index: int) -> str:
    return textwrap.dedent(f'''\
        """Export the results of run {index} to CSV.

        The cluster jobs train with DistributedDataParallel; this tool only reads what they wrote.
        """

        import argparse
        import csv
        import json
        import sys
        from pathlib import Path


        def parse_arguments(argv=None):
            parser = argparse.ArgumentParser(description=__doc__)
            parser.add_argument("results", type=Path)
            parser.add_argument("--output", type=Path, default=Path("results-{index}.csv"))
            parser.add_argument("--metric", default="accuracy")
            return parser.parse_args(argv)


        def rows(folder: Path, metric: str):
            for path in sorted(folder.glob("*.json")):
                record = json.loads(path.read_text())
                yield path.stem, record.get(metric)


        def main(argv=None) -> int:
            arguments = parse_arguments(argv)
            with arguments.output.open("w", newline="") as handle:
                writer = csv.writer(handle)
                writer.writerow(["run", arguments.metric])
                writer.writerows(rows(arguments.results, arguments.metric))
            return 0


        if __name__ == "__main__":
            sys.exit(main())
        ''')


KINDS: tuple[tuple[str, Callable[[int], str]], ...] = (
    ("settings", _settings), ("text", _text_utilities), ("model", _model), ("metrics", _metrics), ("export", _command),
)  # fmt: skip


def write_commit(folder: Path, with_ddp: bool) -> list[Path]:
    """A commit of ``COMMIT_SIZE`` ordinary modules; with ``with_ddp`` the last files are DDP scripts instead."""
    folder.mkdir()
    paths = []
    for index in range(COMMIT_SIZE):
        kind, template = KINDS[index % len(KINDS)]
        path = folder / f"{kind}_{index:02d}.py"
        path.write_text(template(index))
        paths.append(path)
    if with_ddp:
        for path, case in zip(paths[-len(DDP_CASES) :], DDP_CASES):
            path.unlink()
            replacement = path.with_name(f"train_{case.lower()}.py")
            shutil.copyfile(FIXTURES / case / "case.py", replacement)
            paths[paths.index(path)] = replacement
    return paths


def timed(command: list[str], cwd: Path, expected: tuple[int, ...]) -> float:
    start = time.perf_counter()
    completed = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if completed.returncode not in expected:
        raise SystemExit(f"`{' '.join(command)}` exited {completed.returncode}:\n{completed.stderr}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=15, help="alternated rounds; medians are reported (default 15)")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat takes a number of at least 1")
    dp2ddp = Path(sys.executable).parent / "dp2ddp"
    if not dp2ddp.exists():
        print(f"error: no dp2ddp console script next to {sys.executable}; pip install -e . first", file=sys.stderr)
        return 2
    python = sys.executable
    with tempfile.TemporaryDirectory(prefix="dp2ddp-startup-") as temporary:
        work = Path(temporary)
        plain = write_commit(work / "plain", with_ddp=False)
        mixed = write_commit(work / "mixed", with_ddp=True)
        relative = lambda paths: [str(p.relative_to(work)) for p in paths]  # noqa: E731 - as pre-commit names them
        # label, command, the exit statuses that mean it ran as intended (findings exit 1)
        commands: list[tuple[str, list[str], tuple[int, ...]]] = [
            ('(i)   python -c "import libcst"', [python, "-c", "import libcst"], (0,)),
            ("(ii)  dp2ddp check FILE (no DDP code)", [str(dp2ddp), "check", relative(plain)[2]], (0,)),
            (f"(iii) dp2ddp check, {COMMIT_SIZE} files, no DDP", [str(dp2ddp), "check", *relative(plain)], (0,)),
            (f"(iv)  dp2ddp check, {COMMIT_SIZE} files, {len(DDP_CASES)} DDP", [str(dp2ddp), "check", *relative(mixed)], (1,)),
            ('(v)   python -c "import dp2ddp.cli"', [python, "-c", "import dp2ddp.cli"], (0,)),
        ]
        # One unmeasured round first: the first run of each pays for cold caches and .pyc writes.
        for _, command, expected in commands:
            timed(command, work, expected)
        times: list[list[float]] = [[] for _ in commands]
        for round_number in range(args.repeat):
            # Rotate the order each round, so no command always follows the same one.
            order = list(range(len(commands)))
            order = order[round_number % len(order) :] + order[: round_number % len(order)]
            for position in order:
                _, command, expected = commands[position]
                times[position].append(timed(command, work, expected))
    medians = [statistics.median(found) for found in times]
    print(f"wall time of a fresh process, medians of {args.repeat} alternated rounds ({sys.executable}):")
    for (label, _, _), median, found in zip(commands, medians, times):
        print(f"  {label:<40} {median * 1000:7.0f} ms  (min {min(found) * 1000:.0f}, max {max(found) * 1000:.0f})")
    ratio = medians[1] / medians[0]
    verdict = "meets" if ratio <= RATIO_TARGET else "misses"
    print("ratios to (i):")
    print(f"  (ii)/(i)  {ratio:.2f}  (target <= {RATIO_TARGET:g}: {verdict})")
    for position, name in ((2, "(iii)"), (3, "(iv)"), (4, "(v)")):
        print(f"  {name + '/(i)':<9} {medians[position] / medians[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
