"""verify names the likely cause of a divergence from the evidence the runs recorded (no runs here)."""

from __future__ import annotations

from dp2ddp.verify.compare import Tolerance, compare
from dp2ddp.verify.diagnose import Evidence, cause
from dp2ddp.verify.render import verdict

REFERENCE = [(step, 2.0 - 0.1 * step) for step in range(8)]


def _ranks(losses: list[tuple[int, float]]) -> list[list[tuple[int, float]]]:
    return [losses, losses]  # both ranks record the mean: what matters here is the mean over ranks


def test_a_loss_twice_the_reference_at_every_step_is_a_loss_scale() -> None:
    comparison = compare(REFERENCE, _ranks([(s, 2 * loss) for s, loss in REFERENCE]), Tolerance())
    said = cause(comparison, Evidence(world=2))
    assert said is not None
    assert "2 (the world size) times the reference's at every step" in said
    assert "randomness" not in said and "random numbers" not in said


def test_half_the_reference_at_the_first_step_only_is_still_named() -> None:
    """SGD trains on the halved gradient, so only step 0 keeps the exact ratio."""
    converted = [(0, 1.0)] + [(s, loss * 0.7) for s, loss in REFERENCE[1:]]
    said = cause(compare(REFERENCE, _ranks(converted), Tolerance()), Evidence(world=2))
    assert said is not None and "1/2 (one over the world size) times the reference's at step 0" in said
    assert "divided by the world size" in said


def test_a_first_divergence_at_the_second_epoch_s_first_step_names_set_epoch() -> None:
    converted = REFERENCE[:4] + [(s, loss + 0.3) for s, loss in REFERENCE[4:]]
    said = cause(compare(REFERENCE, _ranks(converted), Tolerance()), Evidence(world=2, epoch_starts=(4,)))
    assert said is not None and "set_epoch" in said and "first step of the second" in said


def test_a_step_0_gap_without_unaligned_randomness_is_deterministic() -> None:
    converted = [(s, loss + 0.01) for s, loss in REFERENCE]
    comparison = compare(REFERENCE, _ranks(converted), Tolerance())
    said = cause(comparison, Evidence(world=2))
    assert said is not None and "deterministic" in said and "normalisation" in said
    message = verdict(comparison, (), Evidence(world=2))
    assert "--statistical" not in message  # the hint that sent users to a mode that accepts the defect
    counted = cause(comparison, Evidence(world=2, reference_samples=(8,) * 8, converted_samples=(16,) * 8))
    assert counted is not None and "trained on 16 samples and the reference on 8" in counted


def test_randomness_is_blamed_only_where_a_draw_could_not_be_lined_up() -> None:
    converted = [(s, loss + 0.01) for s, loss in REFERENCE]
    comparison = compare(REFERENCE, _ranks(converted), Tolerance())
    evidence = Evidence(world=2, unaligned=("torch.randint at train.py:57",))
    said = cause(comparison, evidence)
    assert said is not None and "torch.randint at train.py:57" in said and "--statistical" in said


def test_fewer_steps_with_twice_the_samples_is_the_undivided_batch() -> None:
    converted = REFERENCE[:4]
    evidence = Evidence(world=2, reference_samples=(8,) * 8, converted_samples=(16,) * 4)
    said = cause(compare(REFERENCE, _ranks(converted), Tolerance()), evidence)
    assert said is not None and "took 4 steps where the reference took 8" in said
    assert "divide the per-process batch size by the world size" in said
    assert "checkpoint" not in said


def test_fewer_steps_names_a_checkpoint_only_when_the_converted_run_loaded_it() -> None:
    comparison = compare(REFERENCE, _ranks(REFERENCE[:4]), Tolerance())
    unread = cause(comparison, Evidence(world=2, written=("last.pt",)))
    assert unread is not None and "last.pt" not in unread and "drop_last" in unread
    read = cause(comparison, Evidence(world=2, written=("last.pt",), loaded=("last.pt",)))
    assert read is not None and "loaded last.pt" in read and "resumed" in read


def test_a_gan_s_two_losses_get_a_panel_each() -> None:
    """D and G each take one backward per optimizer step: told apart by the optimizer that steps after them."""
    from dp2ddp.verify.render import loss_keys

    reference = [(step, 1.0 if step % 2 == 0 else 5.0) for step in range(6)]
    comparison = compare(reference, _ranks(reference), Tolerance())
    stepped = ["optimizer 1 (Adam)", "optimizer 2 (Adam)"] * 3
    groups = loss_keys(comparison, stepped)
    assert list(groups) == [("optimizer 1 (Adam)", 0), ("optimizer 2 (Adam)", 0)]
    assert [step.reference for step in groups[("optimizer 2 (Adam)", 0)]] == [5.0, 5.0, 5.0]
    assert len(loss_keys(comparison)) == 1  # without the optimizers: one curve, as before
