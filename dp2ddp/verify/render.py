"""What verify prints and writes: the step table, the verdict, run failures, JSON and the loss plot."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from dp2ddp.verify import diagnose
from dp2ddp.verify.compare import NOISE_FACTOR, Comparison, StepComparison
from dp2ddp.verify.diagnose import Evidence
from dp2ddp.verify.runner import SEMANTICS, RankOutcome, RunOutcome, Runs

if TYPE_CHECKING:
    from dp2ddp.verify.checks import Finding

_HEAD, _AROUND, _TAIL = 8, 3, 3  # rows shown of a long table


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def _rows_shown(comparison: Comparison) -> list[int | None]:
    """Row indices to print, None for a gap: the start, around the first divergence, the end."""
    count = len(comparison.steps)
    if count <= _HEAD + 2 * _AROUND + _TAIL + 3:
        return list(range(count))
    wanted = set(range(_HEAD)) | set(range(count - _TAIL, count))
    first = comparison.first_divergence
    if first is not None:
        at = comparison.steps.index(first)
        wanted |= set(range(max(at - _AROUND, 0), min(at + _AROUND + 1, count)))
    shown: list[int | None] = []
    for index in sorted(wanted):
        if shown and shown[-1] is not None and index != shown[-1] + 1:
            shown.append(None)
        shown.append(index)
    return shown


def table(comparison: Comparison) -> str:
    if comparison.statistical:
        return paired_table(comparison)
    ranks = max((len(step.per_rank) for step in comparison.steps), default=0)
    header = ["step", "reference", "converted", *[f"rank {r}" for r in range(ranks)], "gap"]
    if comparison.probed:
        header.append("rounding")
    if comparison.statistical:
        header[1] = "reference (seed mean)"
        header.append("band")
    header.append("")
    rows = [header]
    for index in _rows_shown(comparison):
        if index is None:
            rows.append(["..."] + [""] * (len(header) - 1))
            continue
        step = comparison.steps[index]
        row = [step.label, _number(step.reference), _number(step.converted), *map(_number, step.per_rank)]
        row.append("-" if step.gap is None else f"{step.gap:+.2e}")
        if comparison.probed:
            row.append("-" if step.noise is None else f"{step.noise:.2e}")
        if comparison.statistical:
            row.append("-" if step.low is None else f"[{step.low:.6g}, {step.high:.6g}]")
        row.append(("ok" if step.compared else "not compared") if step.ok else "DIVERGES")
        rows.append(row)
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    return "\n".join("  ".join(cell.rjust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)


def paired_table(comparison: Comparison) -> str:
    """Statistical mode: per step the seeds' mean reference and converted loss, the mean paired gap
    (converted seed k minus reference seed k) and its standard deviation over the pairs."""
    header = ["step", "reference (seed mean)", "converted (seed mean)", "mean paired gap", "gap spread", ""]
    rows = [header]
    for index in _rows_shown(comparison):
        if index is None:
            rows.append(["..."] + [""] * (len(header) - 1))
            continue
        step = comparison.steps[index]
        rows.append([
            step.label, _number(step.reference), _number(step.converted),
            "-" if step.gap is None else f"{step.gap:+.2e}",
            "-" if step.gap_spread is None else f"{step.gap_spread:.2e}", "ok" if step.ok else "DIVERGES",
        ])  # fmt: skip
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    return "\n".join("  ".join(cell.rjust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)


def paired_summary(comparison: Comparison) -> str:
    """One line: what statistical mode tested, its statistics and their limits."""
    test = comparison.paired
    assert test is not None
    if test.exact:
        return (f"all {test.pairs} seed pairs agree within the exact tolerance at all {test.steps} steps "
                "(nothing verify cannot line up was drawn)")  # fmt: skip
    return (f"paired test of {test.pairs} seed pairs over {test.steps} steps (converted run k against reference "
            f"seed k): mean standardised gap t = {test.t:+.2f} (fails beyond +-{test.t_limit:g}, two-sided 1% "
            f"with {test.pairs - 1} degrees of freedom); paired gaps' mean square {test.spread_ratio:.2f}x two "
            f"independent seeds' (fails beyond {test.spread_limit:g}; a correct conversion gives at most about 1)")


def _why(step: StepComparison, comparison: Comparison) -> str:
    if step.reference is None:
        return "the reference run has no such step"
    if step.converted is None:
        missing = [str(rank) for rank, loss in enumerate(step.per_rank) if loss is None]
        return f"rank {', '.join(missing)} of the converted run has no such step"
    if comparison.statistical:
        return (f"a converted run's loss is not a finite number (seed mean {step.converted:.6g}) where every "
                f"reference seed's is (seed mean {step.reference:.6g})")  # fmt: skip
    allowed = comparison.tolerance.absolute + comparison.tolerance.relative * abs(step.reference)
    if step.noise is not None:
        allowed = max(allowed, NOISE_FACTOR * step.noise)
        rounding = f" (rounding alone moved the reference by {step.noise:.2e} by then)"
    else:
        rounding = ""
    return (f"reference {step.reference:.6g}, converted {step.converted:.6g}, gap {step.gap:+.2e} > "
            f"{allowed:.2e}{rounding}")


def verdict(comparison: Comparison, defects: Sequence[Finding] = (), evidence: Evidence | None = None) -> str:
    first = comparison.first_divergence
    count = len({step.step for step in comparison.steps})
    if defects:
        losses = "the losses agree" if first is None else f"the losses diverge at step {first.label}"
        return f"not equivalent ({losses}): {defects[0].message}"
    if first is None and comparison.shifted:
        return f"diverges: {paired_summary(comparison)}"
    chaotic = comparison.chaotic_from
    if first is None and chaotic is not None:
        compared = len({step.step for step in comparison.steps if step.compared})
        return (f"equivalent: {compared} steps within tolerance of the rounding noise; from step {chaotic.label} on "
                f"rounding alone moved the reference by {chaotic.noise:.2e} (re-run with a few units in the last "
                "place added before every step), more than a tenth of the loss, so the remaining "
                f"{count - compared} steps say nothing either way and were not compared")  # fmt: skip
    if first is None:
        if comparison.statistical:
            return f"equivalent: {paired_summary(comparison)}"
        kind = "within tolerance"
        widened = " or of the rounding noise the reference shows" if comparison.probed else ""
        return f"equivalent: {count} steps, every loss {kind}{widened}"
    why = None if evidence is None else diagnose.cause(comparison, evidence)
    return f"diverges at step {first.label}: {_why(first, comparison)}" + (f"\n{why}" if why else "")


def _resumed_hint(written: Sequence[str]) -> str:
    shown = ", ".join(written[:5]) + (f" and {len(written) - 5} more" if len(written) > 5 else "")
    return (f"the converted run took fewer steps than the reference, which left these in the working directory: {shown}. "
            "If the script resumes from a checkpoint it finds there, point its output somewhere fresh (an argument) "
            "or move them away, and verify again")  # fmt: skip


def no_losses(run: RunOutcome) -> str:
    """The reference finished without a backward: --help, a dry-run flag, or a script that does not train."""
    rank = run.ranks[0]
    said = "\n".join(rank.stdout.rstrip().splitlines()[-12:]) or rank.log_tail
    status = "" if rank.exit_status in (None, 0) or rank.exit_status == 0 else f" (sys.exit({rank.exit_status}))"
    return (f"no loss was recorded: {run.name} ended{status} after {rank.steps or 0} optimizer steps without calling "
            "backward() on a scalar loss (torch.autograd.backward and torch.autograd.grad count too)"
            + (f"; its last output:\n{said}" if said else ""))  # fmt: skip


def no_converted_losses(runs: Runs) -> str:
    assert runs.converted is not None
    steps = len({step for step, _ in runs.references[0].ranks[0].losses})
    message = f"the converted run recorded no loss, where the reference recorded {steps} steps"
    loaded = {Path(name).name for rank in runs.converted.ranks for name in rank.facts.get("loaded", ())}
    resumed = [name for name in runs.written if Path(name).name in loaded]  # only files it read back
    return message + ("\n" + _resumed_hint(resumed) if resumed else "")


def largest_gap(comparison: Comparison) -> tuple[float, float]:
    """(max |gap|, max |gap| / |reference|) over the steps both runs have."""
    gaps = [(abs(s.gap), abs(s.gap) / abs(s.reference) if s.reference else 0.0) for s in comparison.steps if s.gap is not None]
    return (max(g for g, _ in gaps), max(r for _, r in gaps)) if gaps else (0.0, 0.0)


# DDP's own runtime errors, what in a script causes them, and the fix.
_DDP_ERRORS = (
    (
        "Expected to have finished reduction in the prior iteration",
        (
            "DDP waited for gradients that never came: some parameters took no part in the loss (a branch of the "
            "model not used every step, a frozen head still in the optimizer) or a forward had no backward. Fix: "
            "find_unused_parameters=True in the DistributedDataParallel call, or make every forward reach every parameter"
        ),
    ),
    (
        "Expected to mark a variable ready only once",
        (
            "a parameter's gradient was produced twice in one backward: the model ran twice before one backward "
            "(two forwards, reentrant activation checkpointing) or backward ran twice per forward. Fix: "
            "static_graph=True in the DistributedDataParallel call, or run the extra passes under model.no_sync()"
        ),
    ),
    (
        "does not support create_graph",
        (
            "torch.autograd.grad(..., create_graph=True) through a DDP model: DDP cannot average higher-order "
            "gradients. Compute the penalty through model.module, or use static_graph=True"
        ),
    ),
    (
        "Double",
        (
            "on the CPU verify runs both scripts in float64 (--precision auto), and a tensor the script makes "
            "float32 explicitly (dtype=torch.float32, a numpy float32 array) met a float64 one. Verify again "
            "with --precision native"
        ),
    ),
    (
        "find_unused_parameters",
        (
            "some parameters received no gradient. Fix: find_unused_parameters=True in the DistributedDataParallel call",
        )
        ),

)


def explain(error: str) -> str | None:
    """The likely cause in the script of one of DDP's runtime errors, and the fix."""
    return next((why for needle, why in _DDP_ERRORS if needle in error), None)


def _rank_error(rank: RankOutcome) -> str:
    text = (rank.error or rank.log_tail or "(no output)").rstrip()
    if rank.error and rank.error.startswith("the script exited with status"):
        # argparse and friends print their reason on stderr before sys.exit(2).
        text += "\n" + (rank.log_tail or "(no output)")
    why = explain(text)
    return text + (f"\nlikely cause: {why}" if why else "")


def _left(rank: RankOutcome) -> str:
    at = f" at step {rank.steps}" if rank.steps is not None else ""
    if rank.outcome == "left":
        return f"rank {rank.rank} left{at}: its process ended without finishing the script (os._exit, a signal, out of memory)"
    status = "" if rank.exit_status is None else f" with sys.exit({rank.exit_status})"
    return f"rank {rank.rank} ended{status}{at} while the other ranks were still training"


def failure(run: RunOutcome) -> str:
    """Why a run did not give losses to compare: a hang (which ranks), a rank that left, or a crash."""
    lines = []
    if run.left_early is not None:
        lines.append(f"{run.name}: {run.left_early}; stopped at once")
        lines += [_left(rank) for rank in run.ranks if rank.outcome in ("left", "finished")]
        lines.append("ranks of a DDP run must take the same steps and reach the same collectives: "
                     "exit, return or break on all ranks together")  # fmt: skip
        for rank in run.ranks:
            if rank.outcome == "unfinished":
                lines.append(f"--- rank {rank.rank}, where it waits ---\n{rank.log_tail or '(no output)'}")
        return "\n".join(lines)
    if run.timed_out:
        stuck = [rank for rank in run.ranks if rank.outcome == "unfinished"]
        who = ", ".join(str(rank.rank) for rank in stuck) or "none"
        lines.append(f"{run.name} hung: stopped after {run.timeout_s:g} s; ranks that did not finish: {who}")
        for rank in stuck:
            lines.append(f"--- rank {rank.rank}, last output ---\n{rank.log_tail or '(no output)'}")
        return "\n".join(lines)
    left = [rank for rank in run.ranks if rank.outcome == "left"]
    crashed = sorted((rank for rank in run.ranks if rank.outcome == "error"), key=lambda rank: rank.ended_at or 0.0)
    if crashed:
        first, *then = crashed
        # A process that vanished on its own came first: the others fail when they next talk to it.
        lines += [_left(rank) + "; the others then failed without it" for rank in left]
        who = f"rank {first.rank} failed" + (" first" if then and not left else "") if len(run.ranks) > 1 else "failed"
        lines.append(f"{run.name}: {who}")
        lines.append(_rank_error(first))
        for rank in then:
            last = (rank.error or rank.log_tail).rstrip().splitlines()[-1:]
            lines.append(f"then rank {rank.rank} failed: {last[0] if last else '(no output)'}")
        stopped = [str(rank.rank) for rank in run.ranks if rank.outcome == "unfinished"]
        if stopped:
            lines.append(f"(rank {', '.join(stopped)} stopped when the launcher shut the run down)")
        return "\n".join(lines)
    lines.append(f"{run.name} exited with status {run.exit_code}")
    lines += [_left(rank) for rank in left]
    for rank in run.ranks:
        if not rank.ok:
            lines.append(f"--- rank {rank.rank}, last output ---\n{rank.log_tail or '(no output)'}")
    if run.launcher_tail:
        lines.append(f"--- launcher ---\n{run.launcher_tail}")
    return "\n".join(lines)


def as_json(
    runs: Runs, comparison: Comparison | None, status: str, message: str, findings: Sequence[Finding] = ()
) -> dict[str, Any]:
    def run(outcome: RunOutcome) -> dict[str, Any]:
        return {
            "name": outcome.name, "command": list(outcome.command), "exit_code": outcome.exit_code,
            "wall_s": round(outcome.wall_s, 3), "timed_out": outcome.timed_out,
            "ranks": [{"rank": r.rank, "outcome": r.outcome, "steps": len({s for s, _ in r.losses}), **r.facts}
                      for r in outcome.ranks],
            "exit_note": outcome.exit_note,
        }  # fmt: skip

    document: dict[str, Any] = {
        "verdict": status, "message": message, "semantics": SEMANTICS, "backend": runs.backend,
        "device": runs.device, "runs": [run(outcome) for outcome in runs.all],
        "checks": [finding.as_json() for finding in findings],
    }  # fmt: skip
    if len(runs.references) > 1:
        document["reference_losses"] = {
            run.name: [[step, loss] for step, loss in run.ranks[0].losses] for run in runs.references
        }
    if comparison is not None:
        first = comparison.first_divergence
        max_abs, max_rel = largest_gap(comparison)
        stepped = runs.references[0].ranks[0].stepped if runs.references and runs.references[0].ranks else ()
        document.update(
            tolerance={"absolute": comparison.tolerance.absolute, "relative": comparison.tolerance.relative},
            statistical=comparison.statistical,
            paired=comparison.paired.as_json() if comparison.paired is not None else None,
            first_divergence=None if first is None else first.label,
            max_abs_gap=max_abs, max_rel_gap=max_rel,
            steps=[
                {"step": s.step, "index": s.index, "reference": s.reference, "converted": s.converted,
                 "per_rank": list(s.per_rank), "gap": s.gap, "low": s.low, "high": s.high, "ok": s.ok,
                 "optimizer": stepped[s.step] if s.step < len(stepped) else None,
                 **({"gap_spread": s.gap_spread} if comparison.statistical else {})}
                for s in comparison.steps
            ],
        )  # fmt: skip
    return document


def loss_keys(comparison: Comparison, stepped: Sequence[str] = ()) -> dict[tuple[str, int], list[StepComparison]]:
    """The steps of each loss the script computes, in order: grouped by the optimizer that steps after the loss
    (a GAN's discriminator and generator) and by which backward within that step (gradient accumulation's parts)."""
    groups: dict[tuple[str, int], list[StepComparison]] = {}
    for step in comparison.steps:
        optimizer = stepped[step.step] if step.step < len(stepped) else ""
        groups.setdefault((optimizer, step.index), []).append(step)
    return groups


def plot(comparison: Comparison, path: Path, title: str, stepped: Sequence[str] = ()) -> None:
    """One panel per loss (``loss_keys``): a GAN's D and G losses apart, each against the optimizer step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    groups = loss_keys(comparison, stepped if len(set(stepped)) > 1 else ())
    figure, panels = plt.subplots(len(groups), 1, figsize=(8, 3.2 * len(groups)), squeeze=False, sharex=True)
    nan = float("nan")
    first = comparison.first_divergence
    for (optimizer, index), axes in zip(groups, panels[:, 0]):
        steps = groups[(optimizer, index)]
        x = [step.step for step in steps]
        if comparison.statistical:
            axes.fill_between(x, [nan if s.low is None else s.low for s in steps],
                              [nan if s.high is None else s.high for s in steps], alpha=0.25,
                              label="reference seeds' range")  # fmt: skip
        seeds = " (mean over seeds)" if comparison.statistical else ""
        axes.plot(x, [nan if s.reference is None else s.reference for s in steps], marker=".",
                  label=f"reference{seeds}")  # fmt: skip
        axes.plot(x, [nan if s.converted is None else s.converted for s in steps], "--", marker=".",
                  label=f"converted (mean over ranks){seeds}")  # fmt: skip
        if first is not None and first in steps:
            axes.axvline(first.step, color="red", linewidth=0.8, label=f"diverges at step {first.label}")
        which = [optimizer] if optimizer else []
        if any(key[1] for key in groups):
            which.append(f"backward {index + 1} of each step")
        axes.set_ylabel("loss" + (f": {', '.join(which)}" if which else ""), fontsize="small")
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.legend(fontsize="small")
    panels[-1, 0].set_xlabel("optimizer step")
    panels[0, 0].set_title(title)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


class ProgressLine:
    """One status line on a terminal, rewritten in place; on a pipe, one line per run."""

    def __init__(self, stream: TextIO = sys.stderr) -> None:
        self.stream = stream
        self.live = stream.isatty()
        self.current: str | None = None

    def __call__(self, name: str, steps: int) -> None:
        if name != self.current:
            if self.current is not None and self.live:
                self.stream.write("\n")
            self.current = name
            if not self.live:
                self.stream.write(f"running {name} ...\n")
                self.stream.flush()
        if self.live:
            self.stream.write(f"\rrunning {name}: step {steps}\033[K")
            self.stream.flush()

    def close(self) -> None:
        if self.live and self.current is not None:
            self.stream.write("\n")
            self.stream.flush()
        self.current = None
