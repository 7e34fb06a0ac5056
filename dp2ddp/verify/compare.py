"""Turn recorded losses into a verdict: reference step k against the mean over ranks of converted step k."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# (optimizer step, loss): what capture.LossRecorder writes, in order.
Losses = Sequence[tuple[int, float]]
Key = tuple[int, int]  # (optimizer step, which backward within that step)


@dataclass(frozen=True)
class Tolerance:
    """A gap is noise when ``|converted - reference| <= absolute + relative * |reference|``."""

    absolute: float = 1e-5
    relative: float = 1e-4

    def allows(self, gap: float, reference: float) -> bool:
        return abs(gap) <= self.absolute + self.relative * abs(reference)


@dataclass(frozen=True)
class StepComparison:
    step: int
    index: int  # several backward calls in one optimizer step are compared one by one
    reference: float | None  # None: the reference has no such step
    converted: float | None  # the mean over ranks; None: some rank has no such step
    per_rank: tuple[float | None, ...]
    low: float | None = None  # the accepted band, in statistical mode
    high: float | None = None
    ok: bool = False

    @property
    def gap(self) -> float | None:
        if self.reference is None or self.converted is None:
            return None
        return self.converted - self.reference

    @property
    def label(self) -> str:
        return f"{self.step}" if self.index == 0 else f"{self.step}.{self.index}"


@dataclass(frozen=True)
class Comparison:
    steps: tuple[StepComparison, ...]
    tolerance: Tolerance
    statistical: bool = False

    @property
    def first_divergence(self) -> StepComparison | None:
        return next((step for step in self.steps if not step.ok), None)

    @property
    def equivalent(self) -> bool:
        return bool(self.steps) and self.first_divergence is None


def _keyed(losses: Losses) -> dict[Key, float]:
    keyed: dict[Key, float] = {}
    previous, index = None, 0
    for step, loss in losses:
        index = index + 1 if step == previous else 0
        keyed[(step, index)] = loss
        previous = step
    return keyed


def _converted(ranks: Sequence[Losses]) -> tuple[list[Key], list[dict[Key, float]]]:
    keyed = [_keyed(rank) for rank in ranks]
    keys = sorted(set().union(*keyed)) if keyed else []
    return keys, keyed


def _mean(values: Sequence[float | None]) -> float | None:
    if not values or any(value is None for value in values):
        return None
    return sum(values) / len(values)  # type: ignore[arg-type]


def compare(reference: Losses, ranks: Sequence[Losses], tolerance: Tolerance) -> Comparison:
    """Every step either run recorded, in order; a step only one run has is a divergence."""
    expected = _keyed(reference)
    keys, keyed = _converted(ranks)
    steps = []
    for key in sorted(set(expected) | set(keys)):
        per_rank = tuple(rank.get(key) for rank in keyed)
        converted = _mean(per_rank)
        wanted = expected.get(key)
        ok = wanted is not None and converted is not None and tolerance.allows(converted - wanted, wanted)
        steps.append(StepComparison(key[0], key[1], wanted, converted, per_rank, ok=ok))
    return Comparison(tuple(steps), tolerance)


def compare_band(references: Sequence[Losses], ranks: Sequence[Losses], tolerance: Tolerance) -> Comparison:
    """Statistical mode: the converted curve must lie in the band the reference spans over seeds.

    The band at each step runs from the lowest to the highest reference loss, widened
    on each side by half its width and by the tolerance: with two or three seeds the
    observed spread understates the true one.
    """
    expected = [_keyed(reference) for reference in references]
    keys, keyed = _converted(ranks)
    steps = []
    for key in sorted(set().union(*expected) | set(keys)):
        per_rank = tuple(rank.get(key) for rank in keyed)
        converted = _mean(per_rank)
        seen = [reference[key] for reference in expected if key in reference]
        if len(seen) < len(expected) or converted is None:
            steps.append(StepComparison(key[0], key[1], _mean(seen), converted, per_rank))
            continue
        centre = sum(seen) / len(seen)
        margin = (max(seen) - min(seen)) / 2 + tolerance.absolute + tolerance.relative * abs(centre)
        low, high = min(seen) - margin, max(seen) + margin
        steps.append(StepComparison(key[0], key[1], centre, converted, per_rank, low, high, low <= converted <= high))
    return Comparison(tuple(steps), tolerance, statistical=True)
