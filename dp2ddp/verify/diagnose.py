"""Name the likely cause of a divergence from what the runs already recorded.

A gap alone says little; where and how the losses part says more. In order:

- **Fewer steps** than the reference: the converted ranks together trained on more samples per
  step (a per-process batch left at the global size), or on as many but an epoch held fewer
  steps (``drop_last``), or the converted run resumed from a file the reference run wrote.
- **A constant ratio** (the converted loss W or 1/W times the reference's): a loss scale.
- **The first step of the second epoch**: the sampler's epoch (``set_epoch``).
- **Random draws verify could not line up**, named with their lines, when there were any.
- **A gap at step 0** of a script without such draws: the batch per process, the loss's
  normalisation, or data that differs.

Each rests on evidence read from the runs' records (``Evidence``); nothing here runs anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dp2ddp.verify.checks import read_records
from dp2ddp.verify.compare import Comparison, StepComparison
from dp2ddp.verify.runner import Runs

# A ratio counts as exact within this relative difference: float64 agrees to about 1e-16, float32 to 1e-7.
_RATIO_TOLERANCE = 1e-4
_SHOWN = 3


@dataclass(frozen=True)
class Evidence:
    """What the runs recorded that bears on why the losses parted."""

    world: int
    epoch_starts: tuple[int, ...] = ()  # optimizer steps at which the converted run began another pass of its data
    unaligned: tuple[str, ...] = ()  # random draws verify could not line up: "torch.randint at train.py:57"
    reference_samples: tuple[int, ...] = ()  # samples the reference trained on, per optimizer step
    converted_samples: tuple[int, ...] = ()  # samples the converted ranks trained on together, per optimizer step
    loaded: tuple[str, ...] = ()  # files the converted run loaded with torch.load
    written: tuple[str, ...] = ()  # files the reference run left in the working directory


def gather(runs: Runs) -> Evidence:
    """Read the evidence while the runs' folders still exist."""
    converted = runs.converted
    world = len(converted.ranks) if converted is not None else 1
    unaligned: list[str] = []
    for run in runs.all:
        for rank in run.ranks:
            for draw in rank.facts.get("unaligned_draws", ()):
                if draw not in unaligned:
                    unaligned.append(draw)
    reference = runs.references[0].ranks[0].facts if runs.references and runs.references[0].ranks else {}
    starts: set[int] = set()
    summed: list[int] = []
    loaded: list[str] = []
    if converted is not None and converted.ranks:
        for record in read_records(Path(converted.out_dir) / "converted-rank0.samplers.jsonl"):
            if record.get("pass", 0) >= 1 and isinstance(record.get("step"), int):
                starts.add(record["step"])
        per_rank = [rank.facts.get("samples_per_step") for rank in converted.ranks]
        if all(isinstance(counts, list) for counts in per_rank):
            summed = [sum(counts) for counts in zip(*per_rank)]  # type: ignore[arg-type]
        loaded = [path for path in converted.ranks[0].facts.get("loaded", ()) if isinstance(path, str)]
    return Evidence(
        world=world, epoch_starts=tuple(sorted(starts)), unaligned=tuple(unaligned),
        reference_samples=tuple(reference.get("samples_per_step") or ()), converted_samples=tuple(summed),
        loaded=tuple(loaded), written=runs.written,
    )  # fmt: skip


def _ratio(step: StepComparison) -> float | None:
    if step.reference is None or step.converted is None or step.reference == 0:
        return None
    return step.converted / step.reference


def _scale(ratio: float, world: int) -> str | None:
    """``ratio`` as a loss scale: 'W' or '1/W' of the world size, or a small integer or its reciprocal."""
    for factor, name in ((world, f"{world} (the world size)"), (1 / world, f"1/{world} (one over the world size)"),
                         (2.0, "2"), (0.5, "1/2")):  # fmt: skip
        if factor != 1 and abs(ratio - factor) <= _RATIO_TOLERANCE * factor:
            return name
    return None


def _constant_ratio(comparison: Comparison, first: StepComparison, world: int) -> str | None:
    ratio = _ratio(first)
    scale = None if ratio is None else _scale(ratio, world)
    if scale is None or ratio is None:
        return None
    later = [_ratio(step) for step in comparison.steps if step is not first and step.reference is not None]
    every = bool(later) and all(r is not None and abs(r - ratio) <= _RATIO_TOLERANCE * ratio for r in later)
    where = "at every step" if every else f"at step {first.label}"
    if ratio > 1:
        why = ("a loss multiplied by the world size, or a sum over the batch scaled up where the reference took a "
               "mean; DDP already averages gradients over processes, so a mean loss needs no scaling")  # fmt: skip
    else:
        why = ("a loss divided by the world size (DDP already averages gradients over processes: do not divide), "
               "or a sum over the batch where the reference summed over W times as many samples")  # fmt: skip
    trained = "" if every else " (after it the scaled gradients train differently, so the ratio drifts)"
    return f"likely cause: the converted loss is {scale} times the reference's {where}{trained}: a loss scale: {why}"


def _samples(evidence: Evidence, step: int) -> tuple[int, int] | None:
    if step < len(evidence.reference_samples) and step < len(evidence.converted_samples):
        return evidence.reference_samples[step], evidence.converted_samples[step]
    return None


def _fewer_steps(comparison: Comparison, evidence: Evidence) -> str:
    reference = len({s.step for s in comparison.steps if s.reference is not None})
    converted = len({s.step for s in comparison.steps if s.converted is not None})
    counts = _samples(evidence, 0)
    if counts is not None and counts[1] > counts[0] > 0:
        per_rank = counts[1] // max(evidence.world, 1)
        return (f"likely cause: the converted run took {converted} steps where the reference took {reference}, and its "
                f"{evidence.world} processes together trained on {counts[1]} samples a step where the reference "
                f"trained on {counts[0]}: each process loads {per_rank} samples a step, so the global batch grew "
                f"{counts[1] / counts[0]:g} times; divide the per-process batch size by the world size")  # fmt: skip
    resumed = [path for path in evidence.loaded if Path(path).name in {Path(w).name for w in evidence.written}]
    if resumed:
        return _resumed(resumed, converted, reference)
    same = "" if counts is None else f" on the same {counts[0]} samples a step"
    return (f"likely cause: the converted run took {converted} steps where the reference took {reference}{same}: "
            "an epoch holds fewer steps per process, as drop_last=True on the per-process loader (or "
            "DistributedSampler(drop_last=True)) drops a remainder the reference trained on; or a stop condition "
            "counts something per process (samples, steps) that the reference counted over the whole batch")  # fmt: skip


def _resumed(files: Sequence[str], converted: int, reference: int) -> str:
    shown = ", ".join(files[:_SHOWN]) + (f" and {len(files) - _SHOWN} more" if len(files) > _SHOWN else "")
    return (f"likely cause: the converted run took {converted} steps where the reference took {reference}, and it "
            f"loaded {shown}, which the reference run left in the working directory: it resumed from the reference's "
            "checkpoint. Point the script's output somewhere fresh (an argument) or move the files away, and verify "
            "again")  # fmt: skip


def _unaligned(evidence: Evidence) -> str:
    shown = "; ".join(evidence.unaligned[:_SHOWN]) + (" and more" if len(evidence.unaligned) > _SHOWN else "")
    return (f"likely cause: the script draws random numbers that verify could not line up between one process and "
            f"{evidence.world} ({shown}): they differ per process by design. If that randomness is all that differs, "
            "compare with --statistical")  # fmt: skip


def cause(comparison: Comparison, evidence: Evidence) -> str | None:
    """The likely cause of the first divergence, or None when the comparison found none."""
    first = comparison.first_divergence
    if first is None or comparison.statistical:
        return None
    if first.reference is not None and first.converted is None and all(s.converted is None for s in comparison.steps
                                                                       if s.step >= first.step):  # fmt: skip
        return _fewer_steps(comparison, evidence)
    if first.reference is None or first.converted is None:
        return None
    scaled = _constant_ratio(comparison, first, evidence.world)
    if scaled is not None:
        return scaled
    earlier = [s for s in comparison.steps if s.step < first.step]
    if evidence.epoch_starts and first.step == evidence.epoch_starts[0] and earlier and all(s.ok for s in earlier):
        return (f"likely cause: the losses agree for the whole first epoch and part at step {first.step}, the first "
                "step of the second: the second epoch draws another order than the reference's; the sampler's epoch "
                "(call loader.sampler.set_epoch(epoch) at the start of every epoch, with the epoch number)")  # fmt: skip
    if evidence.unaligned:
        return _unaligned(evidence)
    counts = _samples(evidence, first.step)
    if counts is not None and counts[0] != counts[1]:
        return (f"likely cause: at step {first.label} the converted ranks together trained on {counts[1]} samples and "
                f"the reference on {counts[0]}: the batch per process is not the reference's batch divided by the "
                "world size")  # fmt: skip
    if first.step == 0:
        return ("likely cause: the script draws no random numbers that verify could not line up, so the gap at the "
                "very first step is deterministic: the loss's normalisation (a sum, or a mean over a count that "
                "differs per process), or data that differs from the reference's (each process builds, reads or "
                "augments its own)")  # fmt: skip
    return (f"likely cause: the script draws no random numbers that verify could not line up and the losses agree "
            f"until step {first.label}, so something the script does at that step differs: a learning-rate schedule "
            "or a counter stepped per process, a step taken on some ranks only, or a change made to the model "
            "outside DDP")  # fmt: skip
