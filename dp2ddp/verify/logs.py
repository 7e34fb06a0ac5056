"""Compare what the runs printed: the reference's stdout against each rank of the converted run.

Users read the report lines a training script prints (loss, accuracy, sample counts), so a
conversion that keeps the losses equal but prints a per-rank sample count, or prints every line
once per process, still breaks what they see. This module checks exactly that, from the
captured stdout alone (no torch, no LibCST):

1. The reference's lines against converted rank 0's, aligned by *shape* (the text with every
   number replaced by a placeholder) with ``difflib.SequenceMatcher``; aligned pairs have equal
   text by construction and must print the same numbers, within the ``Tolerance`` or within one
   unit in the last printed place of either number (printing rounds: 0.12345 vs 0.12346 agree).
   Integers follow the same rule, so 95 vs 96 (a rounded percentage) agree, but 10000 vs 5000 do
   not. Lines only in one log are listed but do not make the logs disagree: a script may
   legitimately print a line about its process group.
2. Lines another rank prints that the reference prints too (an unguarded ``print`` under DDP),
   and report lines rank 0 prints more often than the reference did.

Alignment stays fast on long, repetitive logs: runs of one shape (a progress line every N
batches) are matched as wholes first, the common head and tail directly, and Myers' diff takes
over from SequenceMatcher where a middle repeats one shape so often that SequenceMatcher would be
quadratic in it.

Timings and other run-to-run noise are *masked*, not dropped: only the noisy span (``12.3s``,
``75 it/s``, ``0:01:23``, a timestamp, a ``0x7f...`` address, a temporary path, the number after
``time``/``elapsed``/``ETA``) becomes a placeholder, and the rest of the line is compared. Scripts
often print the loss and the epoch time on the same line (``epoch 3 loss 0.234 time 12.3s``);
dropping such a line would hide a loss or count defect on exactly the lines users read. A line
with nothing left after masking (a bare timestamp, a tqdm bar, a Python warning) is dropped.
Masking is applied to both logs alike, so a rule that masks too much can only hide a difference,
never invent one.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from difflib import SequenceMatcher

from dp2ddp.verify.compare import Tolerance

_SHOWN = 5  # duplicates of each kind kept in the result; the terminal shows them all
_QUOTED = 100  # characters of a log line quoted in the summary
_WORK = 2_000_000  # element comparisons one alignment may cost: about a second at worst
_Opcode = tuple[str, int, int, int, int]  # SequenceMatcher's: tag, reference start and end, converted start and end

_NOISE = "\x01"  # stands for a masked span; control characters never appear in printed report text
_NUMBER = "\x00"  # stands for a number in a line's shape

# A printed number: int, float, scientific, with its sign, or nan/inf. Digits glued to a letter or a
# dot (resnet50, layer1.weight, the 0 of 1.2.0) are text, the same on both sides.
NUMBER = re.compile(r"(?<![\w.])[-+]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|(?i:nan|inf(?:inity)?)\b)")
_N = NUMBER.pattern
_PER = r"(?:it(?:er)?|step|batch|epoch)"  # seconds per...: only these, or 'loss/acc' would read as s/acc

PYTHON_WARNING = re.compile(r"Warning:")  # UserWarning:, FutureWarning:, ...: the warnings module's format

# Run-to-run noise, applied in this order. A match is masked; where a rule has a group named
# "noise", only that group is (the keyword before the number stays part of the compared text).
IGNORED: tuple[re.Pattern[str], ...] = (
    # tqdm-style progress bars: their counts and rates differ per rank and per run, so the whole line goes
    re.compile(r"^.*(?:\|█|%\|).*$"),
    # Python warnings: 'path.py:12: UserWarning: ...'; the indented source line after one goes too
    re.compile(rf"^.*{PYTHON_WARNING.pattern}.*$"),
    # wall-clock dates and timestamps: 2026-11-22, 2026-11-22 10:00:00,123, 2026-11-22T10:00:00Z
    re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"),
    # clock times and durations: 10:00:00, 0:01:23, 00:12, 00:12.5
    re.compile(r"(?<![\w.:])\d{1,3}:\d{2}(?::\d{2})?(?:\.\d+)?(?![\w:])"),
    # rates with the number first: 12 it/s, 75.3it/s, 1.2s/it, 300 samples/s, 80 img/s, 9 tokens/sec
    re.compile(rf"{_N}\s*(?:[A-Za-z]+/s(?:ec)?|s/{_PER})\b"),
    # rates with the label first: samples/s: 1234, it/s=12
    re.compile(rf"(?:[A-Za-z]+/s(?:ec)?|(?<![A-Za-z])s/{_PER})\b\s*[:=]?\s*(?P<noise>{_N})"),
    # a number with a time unit: 12.3s, 0.5 sec, 40 ms, 3 seconds, 2 min; a bare 's' must touch the number
    re.compile(rf"{_N}(?:\s*(?:ms|us|µs|ns|secs?|seconds?|mins?|minutes?|hrs?|hours?)|s)\b"),
    # the number after a time keyword: 'time 12.3', 'Time per batch: 0.12', 'elapsed=4', 'ETA 37', 'duration 3';
    # with the running average a meter prints after it: 'Time  0.667 ( 0.701)'
    re.compile(rf"(?i:time|(?<![A-Za-z])(?:elapsed|eta|duration))\b[^\d\n{_NOISE},;|]{{0,20}}?"
               rf"(?P<noise>{_N}(?:\s*\(\s*{_N}\s*\))?)"),
    # a data-loading time meter, value and running average: 'Data  0.020 ( 0.031)'
    re.compile(rf"(?<![A-Za-z])Data\s+(?P<noise>{_N}\s*\(\s*{_N}\s*\))"),
    # memory addresses: <object at 0x7f3a2c1b0d60>
    re.compile(r"\b0x[0-9a-fA-F]+\b"),
    # temporary paths, the verifier's own working folders included: /tmp/dp2ddp-verify-x1y2/ckpt.pt
    re.compile(r"(?<!\S)\S*?(?:/tmp/|dp2ddp-verify-)\S*"),
)


# What a printed tensor says about its autograd graph: a loss averaged over processes before it is printed
# (`print(loss)` under DDP) is a new tensor without one, whose value is the same. Removed from both logs.
TENSOR_GRAPH = re.compile(r",\s*(?:grad_fn=<\w+>|requires_grad=True)(?=[,)])")
# A printed model: the conversion's wrapper is the point of it, not a difference. Read as the original's.
DDP_WRAPPER = re.compile(r"\bDistributedDataParallel\(")


@dataclass(frozen=True)
class LogLine:
    number: int  # 1-based line number in the original text
    text: str  # the line as a terminal shows it, surrounding whitespace removed


@dataclass(frozen=True)
class NumberMismatch:
    reference: LogLine
    converted: LogLine
    reference_value: str  # the first number of the pair that differs, as printed
    converted_value: str


@dataclass(frozen=True)
class Duplicate:
    rank: int
    line: LogLine  # in that rank's stdout
    why: str  # "printed by rank 1 too" / "printed 2 times, the reference printed it once"


@dataclass(frozen=True)
class LogComparison:
    compared: int  # aligned line pairs compared
    first_mismatch: NumberMismatch | None
    mismatches: int  # how many aligned pairs differ in some number
    only_reference: tuple[LogLine, ...]
    only_converted: tuple[LogLine, ...]  # converted rank 0's
    duplicates: tuple[Duplicate, ...]  # the first few of each kind
    ignored: int  # lines, across all logs, dropped or masked in part as timings or noise; blank lines not counted

    @property
    def agrees(self) -> bool:
        """Lines only in one log do not count: a converted script may add a line about its process group."""
        return self.first_mismatch is None and not self.duplicates

    def summary(self) -> list[str]:
        lines = []
        if self.agrees:
            ignored = f" (timings or noise ignored on {_count(self.ignored, 'line')})" if self.ignored else ""
            if self.compared:
                verb = "agrees" if self.compared == 1 else "agree"
                lines.append(f"logs: {_count(self.compared, 'report line')} {verb} with the reference{ignored}")
            else:
                lines.append(f"logs: no report lines to compare{ignored}")
        first = self.first_mismatch
        if first is not None:
            more = f"; {self.mismatches} of {self.compared} aligned lines differ" if self.mismatches > 1 else ""
            lines.append(
                f"logs differ at reference line {first.reference.number} / converted line {first.converted.number}: "
                f"{_quoted(first.reference.text)} vs {_quoted(first.converted.text)} "
                f"({first.reference_value} vs {first.converted_value}){more}"
            )
        for duplicate in self.duplicates:
            where = f"rank {duplicate.rank} line {duplicate.line.number}"
            hint = ": guard it with is_main_process()" if duplicate.rank != 0 else ""
            lines.append(f"logs: {_quoted(duplicate.line.text)} {duplicate.why} ({where}){hint}")
        for only, where in ((self.only_reference, "the reference"), (self.only_converted, "the converted rank 0")):
            if only:
                lines.append(
                    f"logs: {_count(len(only), 'line')} only in {where}, "
                    f"first: line {only[0].number} {_quoted(only[0].text)}"
                )
        return lines


def _count(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _quoted(text: str) -> str:
    return repr(text if len(text) <= _QUOTED else text[: _QUOTED - 3] + "...")


@dataclass(frozen=True)
class _ReportLine:
    line: LogLine
    shape: str  # the masked text, numbers replaced, whitespace normalised: what alignment matches on
    numbers: tuple[str, ...]

    @property
    def printed(self) -> tuple[str, tuple[str, ...]]:
        """Equal for lines that print the same text and the same digits: an exact repeat."""
        return self.shape, self.numbers


def _visible(raw: str) -> str:
    """What a terminal leaves of a line rewritten with carriage returns: its last non-empty segment."""
    segments = [segment for segment in raw.split("\r") if segment.strip()]
    return segments[-1] if segments else ""


def _mask(text: str) -> str:
    for rule in IGNORED:
        if "noise" in rule.groupindex:
            text = rule.sub(lambda match: _masked_group(match, "noise"), text)
        else:
            text = rule.sub(_NOISE, text)
    return text


def _masked_group(match: re.Match[str], group: str) -> str:
    start, end = match.start(group) - match.start(), match.end(group) - match.start()
    whole = match.group()
    return whole[:start] + _NOISE + whole[end:]


def _parse(log: str) -> tuple[list[_ReportLine], int]:
    """The report lines of one stdout, and how many lines were dropped or masked as noise."""
    lines: list[_ReportLine] = []
    ignored = 0
    after_warning = False
    for number, raw in enumerate(log.split("\n"), start=1):
        visible = _visible(raw)
        if not visible.strip():
            after_warning = False
            continue
        if after_warning and visible[0].isspace():
            # the source line the warnings module prints, indented, under 'path.py:12: UserWarning: ...'
            ignored += 1
            after_warning = False
            continue
        after_warning = PYTHON_WARNING.search(visible) is not None
        compared = DDP_WRAPPER.sub("DataParallel(", TENSOR_GRAPH.sub("", visible))  # not noise: not counted
        masked = _mask(compared)
        if masked != compared:
            ignored += 1
        if not masked.replace(_NOISE, "").strip():
            continue
        numbers = tuple(match.group() for match in NUMBER.finditer(masked))
        shape = " ".join(NUMBER.sub(_NUMBER, masked).split())
        lines.append(_ReportLine(LogLine(number, visible.strip()), shape, numbers))
    return lines, ignored


def _last_place(value: Decimal) -> Decimal:
    exponent = value.as_tuple().exponent
    assert isinstance(exponent, int)  # finite values only
    return Decimal(1).scaleb(exponent)


def _agree(reference: str, converted: str, tolerance: Tolerance) -> bool:
    a, b = Decimal(reference), Decimal(converted)
    if not (a.is_finite() and b.is_finite()):
        return (a.is_nan() and b.is_nan()) or a == b
    gap = b - a  # Decimal: 95.4 - 95.3 is exactly 0.1, one unit in the last place
    if tolerance.allows(float(gap), float(a)):
        return True
    return abs(gap) <= max(_last_place(a), _last_place(b))


def _first_difference(reference: _ReportLine, converted: _ReportLine, tolerance: Tolerance) -> tuple[str, str] | None:
    for a, b in zip(reference.numbers, converted.numbers, strict=True):  # one shape: as many numbers
        if not _agree(a, b, tolerance):
            return a, b
    return None


def _repeats(reference: list[_ReportLine], rank0: list[_ReportLine]) -> tuple[set[int], list[Duplicate]]:
    """Rank 0's report lines printed more often than in the reference, and which to leave out of alignment.

    An exact repeat of the line just before it (a logging handler added twice prints every line
    twice) is left out of alignment, up to the excess: kept in, it would shift every later line of
    that shape by one and surface as a spurious number mismatch.
    """
    expected = Counter(line.shape for line in reference)
    printed = Counter(line.shape for line in rank0)
    excess = {shape: printed[shape] - count for shape, count in expected.items() if printed[shape] > count}
    left_out: set[int] = set()
    first_extra: dict[str, _ReportLine] = {}
    seen: Counter[str] = Counter()
    for index, line in enumerate(rank0):
        seen[line.shape] += 1
        if line.shape not in excess:
            continue
        if index and rank0[index - 1].printed == line.printed and excess[line.shape] > 0:
            left_out.add(index)
            excess[line.shape] -= 1
            first_extra.setdefault(line.shape, line)
        elif seen[line.shape] == expected[line.shape] + 1:
            first_extra.setdefault(line.shape, line)
    duplicates = []
    for shape, line in sorted(first_extra.items(), key=lambda item: item[1].line.number)[:_SHOWN]:
        times = "once" if expected[shape] == 1 else f"{expected[shape]} times"
        why = f"printed {printed[shape]} times, the reference printed it {times}"
        duplicates.append(Duplicate(0, line.line, why))
    return left_out, duplicates


def _printed_by_other_ranks(reference: list[_ReportLine], others: Sequence[list[_ReportLine]]) -> list[Duplicate]:
    """The first line of each reference shape another rank prints too: each is one unguarded print."""
    shapes = {line.shape for line in reference}
    reported: set[str] = set()
    duplicates = []
    for rank, lines in enumerate(others, start=1):
        for line in lines:
            if line.shape in shapes and line.shape not in reported:
                reported.add(line.shape)
                duplicates.append(Duplicate(rank, line.line, f"printed by rank {rank} too"))
    return duplicates[:_SHOWN]


def _trimmed_opcodes(a: Sequence[Hashable], b: Sequence[Hashable]) -> list[_Opcode]:
    """Opcodes aligning a with b, with the common head and tail matched first, in linear time.

    Most differences between the two logs are few and local, so matching the equal head and tail
    directly leaves a small middle for SequenceMatcher.
    """
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    opcodes: list[_Opcode] = [("equal", 0, head, 0, head)] if head else []
    for tag, i1, i2, j1, j2 in _middle_opcodes(a[head : len(a) - tail], b[head : len(b) - tail]):
        opcodes.append((tag, i1 + head, i2 + head, j1 + head, j2 + head))
    if tail:
        opcodes.append(("equal", len(a) - tail, len(a), len(b) - tail, len(b)))
    return opcodes


def _middle_opcodes(a: Sequence[Hashable], b: Sequence[Hashable]) -> list[_Opcode]:
    """SequenceMatcher's opcodes where they come cheap, else Myers' diff, else the whole middle replaced.

    SequenceMatcher visits every pair of equal elements (quadratic in a log that repeats one or two
    shapes, and autojunk would refuse to match such a shape at all); Myers' diff costs the lengths
    times the edits, small for two similar logs whatever they repeat. Logs too different for
    either within _WORK are left unaligned: only-in-one lines, not a stall of the verifier.
    """
    if not a or not b:
        return [("delete" if a else "insert", 0, len(a), 0, len(b))] if a or b else []
    counts = Counter(b)
    if sum(counts[element] for element in a) <= _WORK:
        return SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    matched = _myers(a, b, max_edits=_WORK // (len(a) + len(b)))
    if matched is None:
        return [("replace", 0, len(a), 0, len(b))]
    opcodes: list[_Opcode] = []
    i = j = 0
    for x, y in [*matched, (len(a), len(b))]:
        if x > i or y > j:
            opcodes.append(("replace" if x > i and y > j else "delete" if x > i else "insert", i, x, j, y))
        if (x, y) == (len(a), len(b)):
            break
        if opcodes and opcodes[-1][0] == "equal" and opcodes[-1][2] == x and opcodes[-1][4] == y:
            opcodes[-1] = ("equal", opcodes[-1][1], x + 1, opcodes[-1][3], y + 1)
        else:
            opcodes.append(("equal", x, x + 1, y, y + 1))
        i, j = x + 1, y + 1
    return opcodes


def _myers(a: Sequence[Hashable], b: Sequence[Hashable], max_edits: int) -> list[tuple[int, int]] | None:
    """The pairs (i, j) with a[i] == b[j] of a longest common subsequence, in order; None past max_edits.

    Myers (1986), "An O(ND) difference algorithm": v[k] is the furthest x reached on diagonal
    k = x - y with d edits; keeping each round's v lets the path be walked back.
    """
    n, m = len(a), len(b)
    v = [0] * (2 * max_edits + 3)  # indexed by k in -(max_edits + 1)..max_edits + 1, negatives from the end
    trace: list[list[int]] = []
    for edits in range(max_edits + 1):
        trace.append(v.copy())
        for k in range(-edits, edits + 1, 2):
            x = v[k + 1] if k == -edits or (k != edits and v[k - 1] < v[k + 1]) else v[k - 1] + 1
            y = x - k
            while x < n and y < m and a[x] == b[y]:
                x, y = x + 1, y + 1
            v[k] = x
            if x >= n and y >= m:
                return _walk_back(trace, n, m)
    return None


def _walk_back(trace: list[list[int]], n: int, m: int) -> list[tuple[int, int]]:
    pairs: list[tuple[int, int]] = []
    x, y = n, m
    for edits in range(len(trace) - 1, -1, -1):
        v = trace[edits]
        k = x - y
        previous = k + 1 if k == -edits or (k != edits and v[k - 1] < v[k + 1]) else k - 1
        start_x = v[previous] if edits else 0
        start_y = start_x - previous if edits else 0
        while x > start_x and y > start_y:  # the snake: equal elements after the edit
            x, y = x - 1, y - 1
            pairs.append((x, y))
        x, y = start_x, start_y
    return pairs[::-1]


def _runs(shapes: Sequence[str]) -> tuple[list[tuple[str, int]], list[int]]:
    """Consecutive equal shapes as (shape, how many), and the index each run starts at, then the end."""
    runs: list[tuple[str, int]] = []
    starts: list[int] = []
    for index, shape in enumerate(shapes):
        if runs and runs[-1][0] == shape:
            runs[-1] = (shape, runs[-1][1] + 1)
        else:
            runs.append((shape, 1))
            starts.append(index)
    return runs, [*starts, len(shapes)]


def _opcodes(reference: Sequence[str], converted: Sequence[str]) -> list[_Opcode]:
    """Align two sequences of shapes: runs first, then line by line where the runs differ.

    A script prints one shape many times in a row (a progress line every N batches), so the runs
    of one shape, as (shape, count), are tens where the lines are thousands. Runs equal in shape
    and count pair up line by line; where runs differ (a run cut short, a line inserted into one)
    their lines are aligned one by one, which pairs what the runs alone could not.
    """
    runs_a, starts_a = _runs(reference)
    runs_b, starts_b = _runs(converted)
    opcodes: list[_Opcode] = []
    for tag, i1, i2, j1, j2 in _trimmed_opcodes(runs_a, runs_b):
        a1, a2, b1, b2 = starts_a[i1], starts_a[i2], starts_b[j1], starts_b[j2]
        if tag == "equal":
            opcodes.append((tag, a1, a2, b1, b2))
            continue
        for line_tag, k1, k2, l1, l2 in _trimmed_opcodes(reference[a1:a2], converted[b1:b2]):
            opcodes.append((line_tag, k1 + a1, k2 + a1, l1 + b1, l2 + b1))
    return opcodes


def compare_logs(reference: str, ranks: Sequence[str], tolerance: Tolerance) -> LogComparison:
    """``ranks[0]`` is converted rank 0's stdout, ``ranks[1:]`` the other ranks'."""
    expected, ignored = _parse(reference)
    parsed = []
    for log in ranks or [""]:
        lines, noise = _parse(log)
        parsed.append(lines)
        ignored += noise
    left_out, duplicates = _repeats(expected, parsed[0])
    duplicates += _printed_by_other_ranks(expected, parsed[1:])
    rank0 = [line for index, line in enumerate(parsed[0]) if index not in left_out]
    only_converted = [parsed[0][index].line for index in left_out]

    compared = mismatches = 0
    first: NumberMismatch | None = None
    only_reference: list[LogLine] = []
    for tag, i1, i2, j1, j2 in _opcodes([line.shape for line in expected], [line.shape for line in rank0]):
        if tag != "equal":
            # shapes differ, so the text differs: neither line is a report line of the other log
            only_reference += [line.line for line in expected[i1:i2]]
            only_converted += [line.line for line in rank0[j1:j2]]
            continue
        for a, b in zip(expected[i1:i2], rank0[j1:j2], strict=True):
            compared += 1
            difference = _first_difference(a, b, tolerance)
            if difference is None:
                continue
            mismatches += 1
            if first is None:
                first = NumberMismatch(a.line, b.line, *difference)
    return LogComparison(
        compared=compared,
        first_mismatch=first,
        mismatches=mismatches,
        only_reference=tuple(only_reference),
        only_converted=tuple(sorted(only_converted, key=lambda line: line.number)),
        duplicates=tuple(duplicates),
        ignored=ignored,
    )
