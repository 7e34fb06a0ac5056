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
    noise: float | None = None  # how far rounding alone moved the reference by this step (the noise probe)
    compared: bool = True  # False: rounding alone moves the loss too far for this step to say anything

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
    rms_z: float = 0.0  # statistical mode: root mean square of the standardised gaps
    rms_limit: float = 0.0
    probed: bool = False  # the tolerance grew with the rounding noise the probe measured

    @property
    def chaotic_from(self) -> StepComparison | None:
        """The first step whose loss rounding alone moves too far to compare."""
        return next((step for step in self.steps if not step.compared), None)

    @property
    def shifted(self) -> bool:
        """Statistical mode: no single step is an outlier, but the curve as a whole lies off the seeds'."""
        return self.statistical and self.rms_z > self.rms_limit

    @property
    def first_divergence(self) -> StepComparison | None:
        return next((step for step in self.steps if not step.ok), None)

    @property
    def equivalent(self) -> bool:
        return bool(self.steps) and self.first_divergence is None and not self.shifted


def keyed(losses: Losses) -> dict[Key, float]:
    """Losses by (optimizer step, which backward within it)."""
    result: dict[Key, float] = {}
    previous, index = None, 0
    for step, loss in losses:
        index = index + 1 if step == previous else 0
        result[(step, index)] = loss
        previous = step
    return result


def _converted(ranks: Sequence[Losses]) -> tuple[list[Key], list[dict[Key, float]]]:
    per_rank = [keyed(rank) for rank in ranks]
    keys = sorted(set().union(*per_rank)) if per_rank else []
    return keys, per_rank


def _mean(values: Sequence[float | None]) -> float | None:
    if not values or any(value is None for value in values):
        return None
    return sum(values) / len(values)  # type: ignore[arg-type]


# With a noise probe, a gap is noise up to this many times the largest gap rounding alone caused by
# that step; a step where that allowance passes _CHAOTIC of the loss is not compared at all.
NOISE_FACTOR = 10.0
_CHAOTIC = 0.1


def compare(
    reference: Losses, ranks: Sequence[Losses], tolerance: Tolerance, noise: Losses | None = None
) -> Comparison:
    """Every step either run recorded, in order; a step only one run has is a divergence.

    ``noise`` is the noise probe's losses: the reference again with a few units in the last place
    added before every step. Then the allowed gap at a step is also NOISE_FACTOR times the largest
    gap between the probe and the reference so far, and from the first step where that allowance
    passes a tenth of the loss, training is chaotic and steps are no longer compared.
    """
    expected = keyed(reference)
    probe = keyed(noise) if noise is not None else {}
    keys, ranks_keyed = _converted(ranks)
    steps, drift, chaotic = [], 0.0, False
    for key in sorted(set(expected) | set(keys)):
        per_rank = tuple(rank.get(key) for rank in ranks_keyed)
        converted = _mean(per_rank)
        wanted = expected.get(key)
        if wanted is not None and key in probe:
            drift = max(drift, abs(probe[key] - wanted))
        allowance = NOISE_FACTOR * drift if noise is not None else 0.0
        if wanted is not None and allowance > _CHAOTIC * abs(wanted):
            chaotic = True
        if chaotic:  # a step only one run has still diverges: that is not rounding
            present = wanted is not None and converted is not None
            steps.append(StepComparison(key[0], key[1], wanted, converted, per_rank, ok=present, noise=drift,
                                        compared=False))  # fmt: skip
            continue
        ok = (wanted is not None and converted is not None
              and (tolerance.allows(converted - wanted, wanted) or abs(converted - wanted) <= allowance))  # fmt: skip
        steps.append(StepComparison(key[0], key[1], wanted, converted, per_rank, ok=ok,
                                    noise=drift if noise is not None else None))  # fmt: skip
    return Comparison(tuple(steps), tolerance, probed=noise is not None)


# Statistical mode: a converted loss is an outlier beyond this many standard deviations of the reference
# seeds at its step; and the run as a whole diverges when the root mean square of those standardised gaps,
# which is about 1 for one more draw of the same process, passes _RMS_LIMIT (a shift that lasts).
_OUTLIER_Z = 6.0
_RMS_LIMIT = 2.0


def compare_band(references: Sequence[Losses], ranks: Sequence[Losses], tolerance: Tolerance) -> Comparison:
    """Statistical mode: the converted curve must look like one more seed of the reference.

    At each step the k reference seeds give a mean and a standard deviation. One step's
    deviation from 4 or 5 seeds is itself noisy, so it is pooled with the mean variance over
    all steps (half each). The converted loss's standardised gap z (its distance from the
    seed mean over that spread, scaled by sqrt(1 + 1/k) for the uncertainty of the mean)
    fails a step beyond _OUTLIER_Z; the run fails when the root mean square of z over all
    steps passes _RMS_LIMIT, which a lasting shift such as a missing set_epoch produces and
    one more draw of the same process does not. The band shown is mean +- _OUTLIER_Z spreads,
    never narrower than the exact tolerance.
    """
    expected = [keyed(reference) for reference in references]
    keys, ranks_keyed = _converted(ranks)
    count = len(expected)
    spreads: dict[Key, tuple[float, float]] = {}
    for key in sorted(set().union(*expected)):
        seen = [reference[key] for reference in expected if key in reference]
        if len(seen) == count and count >= 2:
            centre = sum(seen) / count
            spreads[key] = (centre, sum((value - centre) ** 2 for value in seen) / (count - 1))
    pooled = sum(variance for _, variance in spreads.values()) / len(spreads) if spreads else 0.0
    steps, squares = [], []
    for key in sorted(set().union(*expected) | set(keys)):
        per_rank = tuple(rank.get(key) for rank in ranks_keyed)
        converted = _mean(per_rank)
        if key not in spreads or converted is None:
            seen = [reference[key] for reference in expected if key in reference]
            steps.append(StepComparison(key[0], key[1], _mean(seen), converted, per_rank))
            continue
        centre, variance = spreads[key]
        spread = ((variance + pooled) / 2 * (1 + 1 / count)) ** 0.5
        floor = tolerance.absolute + tolerance.relative * abs(centre)
        z = (converted - centre) / spread if spread > 0 else (0.0 if abs(converted - centre) <= floor else float("inf"))
        squares.append(min(z * z, _OUTLIER_Z**2))
        half = max(_OUTLIER_Z * spread, floor)
        ok = abs(converted - centre) <= half
        steps.append(StepComparison(key[0], key[1], centre, converted, per_rank, centre - half, centre + half, ok))
    rms = (sum(squares) / len(squares)) ** 0.5 if squares else 0.0
    return Comparison(tuple(steps), tolerance, statistical=True, rms_z=rms, rms_limit=_RMS_LIMIT)
