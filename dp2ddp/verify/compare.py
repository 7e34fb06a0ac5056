"""Turn recorded losses into a verdict: reference step k against the mean over ranks of converted step k."""

from __future__ import annotations

import math
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
    low: float | None = None  # statistical mode: the reference seeds' range, drawn in the plot
    high: float | None = None
    ok: bool = False
    noise: float | None = None  # how far rounding alone moved the reference by this step (the noise probe)
    compared: bool = True  # False: rounding alone moves the loss too far for this step to say anything
    gap_spread: float | None = None  # statistical mode: standard deviation of the paired gaps over the seeds

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
    probed: bool = False  # the tolerance grew with the rounding noise the probe measured
    paired: PairedTest | None = None  # statistical mode: the test of the seed pairs' gaps

    @property
    def chaotic_from(self) -> StepComparison | None:
        """The first step whose loss rounding alone moves too far to compare."""
        return next((step for step in self.steps if not step.compared), None)

    @property
    def shifted(self) -> bool:
        """Statistical mode: every step is there, but the paired gaps say the converted runs train differently."""
        return self.paired is not None and self.paired.rejects

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


# --- statistical mode: paired seeds ---------------------------------------------------------------------------

# Two-sided 1% critical values of Student's t by degrees of freedom (pairs - 1): with 5 pairs |t| > 4.604.
# At 1% the mean test fails a correct conversion about 1 verify in 100, well under the 1 in 20 allowed
# for both tests together.
_T_CRITICAL_1_PERCENT = {1: 63.657, 2: 9.925, 3: 5.841, 4: 4.604, 5: 4.032, 6: 3.707, 7: 3.499, 8: 3.355, 9: 3.250,
                         10: 3.169, 12: 3.055, 15: 2.947, 20: 2.845, 30: 2.750}  # fmt: skip
# The paired gaps' mean square over what two independent reference seeds differ by at the same step. A pair
# shares initial weights, data order and aligned noise, so a correct conversion gives at most about 1 (about
# 1 when the unaligned randomness is all there is); gaps larger than independent seeds' mean the converted
# runs train on something else: another data order (a missing set_epoch), other batches. 2 leaves room for
# what 5 seeds estimate: bench/statistical_power.py measured at most 1.36 over correct pairs and at least 2.72
# for a missing set_epoch (README, "Statistical mode").
SPREAD_LIMIT = 2.0


def t_critical(degrees: int) -> float:
    """The two-sided 1% critical value of t; between tabulated degrees, the next smaller one's (stricter)."""
    return _T_CRITICAL_1_PERCENT[max(key for key in _T_CRITICAL_1_PERCENT if key <= degrees)]


@dataclass(frozen=True)
class PairedTest:
    """What statistical mode tested: converted run k against reference seed k, k = 1..pairs.

    ``pair_means`` holds D_k, the mean over steps of the paired gap d_k(s) = converted_k(s) - reference_k(s)
    divided by the seeds' spread at step s; ``t`` is the one-sample t statistic of the D_k against 0, and
    ``spread_ratio`` the mean square of d_k(s) over twice the seeds' variance at s (a pair's gaps against
    two independent seeds'). ``exact``: every paired gap was within the exact tolerance, so no test was needed.
    """

    pairs: int
    steps: int
    pair_means: tuple[float, ...]
    t: float
    t_limit: float
    spread_ratio: float
    spread_limit: float = SPREAD_LIMIT
    exact: bool = False

    @property
    def rejects(self) -> bool:
        return not self.exact and (abs(self.t) > self.t_limit or self.spread_ratio > self.spread_limit)

    def as_json(self) -> dict[str, object]:
        return {"pairs": self.pairs, "steps": self.steps, "pair_means": list(self.pair_means), "t": self.t,
                "t_limit": self.t_limit, "spread_ratio": self.spread_ratio, "spread_limit": self.spread_limit,
                "exact": self.exact, "rejects": self.rejects}  # fmt: skip


def _variance(values: Sequence[float]) -> float:
    centre = sum(values) / len(values)
    return sum((value - centre) ** 2 for value in values) / (len(values) - 1) if len(values) > 1 else 0.0


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def paired_test(
    references: Sequence[dict[Key, float]], conversions: Sequence[dict[Key, float]], keys: Sequence[Key],
    tolerance: Tolerance,
) -> PairedTest:
    """The t test of the pairs' mean standardised gaps, and their mean square against the seeds' own.

    The D_k are independent across pairs whatever the correlation between steps within a run, which is
    why the test counts pairs, not steps. The scale at a step is the reference seeds' variance there,
    pooled half and half with the mean over steps (5 seeds estimate one step's spread poorly), floored
    at the exact tolerance; it does not depend on the converted runs, so a defect cannot widen it.
    """
    pairs = len(references)
    scales = {key: _variance([reference[key] for reference in references]) for key in keys}
    pooled = sum(scales.values()) / len(scales) if scales else 0.0
    gaps = {key: [conversion[key] - reference[key] for reference, conversion in zip(references, conversions)]
            for key in keys}  # fmt: skip
    exact = all(tolerance.allows(gap, references[k][key]) for key, row in gaps.items() for k, gap in enumerate(row))
    means, squares = [], []
    for k in range(pairs):
        standardised = []
        for key in keys:
            floor = tolerance.absolute + tolerance.relative * abs(references[k][key])
            scale = max(((scales[key] + pooled) / 2) ** 0.5, floor)
            standardised.append(gaps[key][k] / scale)
            squares.append(standardised[-1] ** 2 / 2)
        means.append(sum(standardised) / len(standardised) if standardised else 0.0)
    centre = sum(means) / pairs if pairs else 0.0
    error = (_variance(means) / pairs) ** 0.5 if pairs > 1 else 0.0
    t = centre / error if error > 0 else (0.0 if centre == 0 else math.copysign(math.inf, centre))
    ratio = sum(squares) / len(squares) if squares else 0.0
    return PairedTest(pairs, len(keys), tuple(means), t, t_critical(max(pairs - 1, 1)), ratio, exact=exact)


def compare_band(
    references: Sequence[Losses], conversions: Sequence[Sequence[Losses]], tolerance: Tolerance
) -> Comparison:
    """Statistical mode: converted run k (its ranks' losses) against reference seed k, for k pairs.

    Pair k shares everything verify lines up, so the gap d_k(s) holds only the randomness it cannot
    line up, plus whatever the conversion changed. A step some run lacks, or a loss that is not a
    finite number where the references' are, fails that step; otherwise the run fails when the
    paired test rejects (``paired_test``). Each step shows the seeds' mean reference and converted
    loss, the mean paired gap and its spread over the pairs.
    """
    if len(references) != len(conversions) or len(references) < 2:
        raise ValueError(f"statistical mode needs at least 2 pairs; got {len(references)} references and "
                         f"{len(conversions)} converted runs")  # fmt: skip
    expected = [keyed(reference) for reference in references]
    per_seed = [_converted(ranks) for ranks in conversions]
    converted = [{key: mean for key in keys if (mean := _mean([rank.get(key) for rank in ranks])) is not None}
                 for keys, ranks in per_seed]  # fmt: skip
    every = sorted(set().union(*expected, *(keys for keys, _ in per_seed)))
    steps, tested = [], []
    for key in every:
        rank_count = max(len(ranks) for _, ranks in per_seed)
        per_rank = tuple(_mean([ranks[r].get(key) if r < len(ranks) else None for _, ranks in per_seed])
                         for r in range(rank_count))  # fmt: skip
        seen = [reference.get(key) for reference in expected]
        ours = [conversion.get(key) for conversion in converted]
        reference, mean = _mean(seen), _mean(ours)
        if reference is None or mean is None:
            steps.append(StepComparison(key[0], key[1], reference, mean, per_rank))
            continue
        finite = all(_finite(value) for value in ours) or not all(_finite(value) for value in seen)
        gaps = [c - r for c, r in zip(ours, seen)]  # type: ignore[operator]
        spread = _variance(gaps) ** 0.5 if all(map(math.isfinite, gaps)) else None
        low, high = min(seen), max(seen)  # type: ignore[type-var]
        steps.append(StepComparison(key[0], key[1], reference, mean, per_rank, low, high, ok=finite,
                                    gap_spread=spread))  # fmt: skip
        if finite and all(_finite(value) for value in seen):
            tested.append(key)
    test = paired_test(expected, converted, tested, tolerance)
    return Comparison(tuple(steps), tolerance, statistical=True, paired=test)
