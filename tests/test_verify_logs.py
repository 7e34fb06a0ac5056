"""``dp2ddp.verify.logs``: the reference's stdout against the converted ranks', from strings alone; then, end to
end, that converted rank 0 prints the original's numbers and that one process's share printed as the whole fails."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from dp2ddp.verify import checks, logs
from dp2ddp.verify.compare import Tolerance
from dp2ddp.verify.logs import Duplicate, LogLine, NumberMismatch, compare_logs
from tests.test_verify import fixture, planted, run_verify

MNIST = """\
Train Epoch: 1 [0/60000 (0%)]\tLoss: 2.301234
Train Epoch: 1 [6400/60000 (11%)]\tLoss: 0.512345

Test set: Average loss: 0.2310, Accuracy: 9500/10000 (95%)

Train Epoch: 2 [0/60000 (0%)]\tLoss: 0.301234
Train Epoch: 2 [6400/60000 (11%)]\tLoss: 0.212345

Test set: Average loss: 0.1210, Accuracy: 9700/10000 (97%)
"""


def _compare(reference: str, *ranks: str, tolerance: Tolerance | None = None) -> logs.LogComparison:
    return compare_logs(reference, list(ranks), tolerance or Tolerance())


# --- agreeing logs -------------------------------------------------------------------------------


def test_equal_logs_agree() -> None:
    comparison = _compare(MNIST, MNIST, "")
    assert comparison.agrees
    assert comparison.compared == 6
    assert (comparison.mismatches, comparison.first_mismatch, comparison.duplicates) == (0, None, ())
    assert comparison.only_reference == comparison.only_converted == ()
    assert comparison.summary() == ["logs: 6 report lines agree with the reference"]


@pytest.mark.parametrize(
    "reference, converted",
    [
        pytest.param("", "", id="both logs are empty"),
        pytest.param("\n\n   \n", "\n", id="both logs are blank lines only"),
        pytest.param("", "12.3s\n10:00:00\n", id="the converted log holds nothing but timings"),
    ],
)
def test_logs_without_report_lines_agree_with_nothing_compared(reference: str, converted: str) -> None:
    comparison = _compare(reference, converted, "")
    assert comparison.agrees
    assert comparison.compared == 0
    assert comparison.summary()[0].startswith("logs: no report lines to compare")


def test_no_ranks_at_all_reads_as_an_empty_rank_0() -> None:
    comparison = compare_logs("loss 0.5\n", [], Tolerance())
    assert comparison.agrees
    assert comparison.only_reference == (LogLine(1, "loss 0.5"),)


# --- numbers -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reference, converted",
    [
        pytest.param("loss 0.12345", "loss 0.12346", id="a float one unit off in its last digit agrees"),
        pytest.param("test accuracy 95.3%", "test accuracy 95.4%", id="a percentage one unit off agrees"),
        pytest.param("accuracy 95%", "accuracy 96%", id="a rounded integer percentage one off agrees"),
        pytest.param("lr 1.5e-3", "lr 1.6e-3", id="scientific notation one unit off agrees"),
        pytest.param("loss 1e-3", "loss 0.001", id="the same value printed differently agrees"),
        pytest.param("accuracy 95.3", "accuracy 95", id="printed at a coarser precision agrees"),
        pytest.param("loss -0.250", "loss -0.251", id="negative numbers one unit off agree"),
        pytest.param("loss 1.000001", "loss 1.000004", id="a gap inside the tolerance agrees"),
        pytest.param("loss nan", "loss nan", id="nan printed by both agrees"),
        pytest.param("loss:   0.5\t", "loss: 0.5", id="whitespace is normalised"),
        pytest.param("epoch 3/10", "epoch 3/10", id="epoch 3/10 is two equal numbers"),
    ],
)
def test_numbers_that_agree(reference: str, converted: str) -> None:
    comparison = _compare(reference, converted)
    assert comparison.agrees, comparison.summary()
    assert comparison.compared == 1


@pytest.mark.parametrize(
    "reference, converted, values",
    [
        pytest.param("test accuracy 95.3%", "test accuracy 96.3%", ("95.3", "96.3"), id="ten units off differs"),
        pytest.param("samples 10000", "samples 5000", ("10000", "5000"), id="a halved sample count differs"),
        pytest.param("loss 0.5", "loss -0.5", ("0.5", "-0.5"), id="a flipped sign differs"),
        pytest.param("loss 0.5", "loss nan", ("0.5", "nan"), id="nan against a number differs"),
        pytest.param("epoch 3/10", "epoch 3/20", ("10", "20"), id="the second number of epoch 3/10 differs"),
        pytest.param("accuracy 95.3", "accuracy 95.5", ("95.3", "95.5"), id="two units off differs"),
    ],
)
def test_numbers_that_differ(reference: str, converted: str, values: tuple[str, str]) -> None:
    comparison = _compare(reference, converted)
    assert not comparison.agrees
    assert comparison.first_mismatch == NumberMismatch(LogLine(1, reference.strip()), LogLine(1, converted), *values)


def test_the_tolerance_is_used() -> None:
    assert _compare("loss 1000.00", "loss 1000.05").agrees  # 5e-5 relative, inside 1e-4
    assert not _compare("loss 1000.00", "loss 1000.05", tolerance=Tolerance(0.0, 0.0)).agrees


def test_a_per_rank_sample_count_names_the_first_line_that_differs() -> None:
    converted = MNIST.replace("9500/10000", "4750/5000").replace("9700/10000", "4850/5000")
    comparison = _compare(MNIST, converted)
    assert not comparison.agrees
    assert comparison.mismatches == 2
    line = "Test set: Average loss: 0.2310, Accuracy: 9500/10000 (95%)"
    assert comparison.first_mismatch == NumberMismatch(
        LogLine(4, line), LogLine(4, line.replace("9500/10000", "4750/5000")), "9500", "4750"
    )
    assert comparison.summary()[0] == (
        f"logs differ at reference line 4 / converted line 4: {line!r} vs "
        f"{line.replace('9500/10000', '4750/5000')!r} (9500 vs 4750); 2 of 6 aligned lines differ"
    )


def test_line_numbers_count_every_line_of_the_original_log() -> None:
    reference = "start\n\n2026-11-22 10:00:00\ntest accuracy 95.3%\n"
    converted = "start\nepoch time 3.2s\n\n\ntest accuracy 47.6%\n"
    comparison = _compare(reference, converted)
    assert comparison.first_mismatch is not None
    assert (comparison.first_mismatch.reference.number, comparison.first_mismatch.converted.number) == (4, 5)
    assert comparison.summary()[0] == (
        "logs differ at reference line 4 / converted line 5: 'test accuracy 95.3%' vs 'test accuracy 47.6%' "
        "(95.3 vs 47.6)"
    )


# --- timings and noise ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reference, converted",
    [
        pytest.param(
            " 50%|█████     | 469/938 [00:06<00:06, 75.3it/s]\n100%|██████████| 938/938 [00:12<00:00, 75.3it/s]\n",
            "100%|██████████| 469/469 [00:05<00:00, 80.1it/s]\n",
            id="tqdm bars with different counts are ignored",
        ),
        pytest.param("epoch time 12.3s\n", "epoch time 6.1s\n", id="an epoch time in seconds is ignored"),
        pytest.param("12 it/s\n", "25 it/s\n", id="iterations per second are ignored"),
        pytest.param("throughput 300 samples/s\n", "throughput 612.5 samples/s\n", id="samples per second are ignored"),
        pytest.param("samples/sec: 1234\n", "samples/sec: 2468\n", id="a rate label before its number is ignored"),
        pytest.param("1.20s/it\n", "0.61s/it\n", id="seconds per iteration are ignored"),
        pytest.param("step 5 took 40 ms\n", "step 5 took 21 ms\n", id="milliseconds are ignored"),
        pytest.param("Time per batch: 0.12\n", "Time per batch: 0.06\n", id="the number after Time is ignored"),
        pytest.param("elapsed=4.5, loss 0.3\n", "elapsed=2.2, loss 0.3\n", id="the number after elapsed is ignored"),
        pytest.param("ETA 0:01:23\n", "ETA 0:00:41\n", id="an ETA duration is ignored"),
        pytest.param(
            "2026-11-22 10:00:00,123 INFO epoch 1 loss 0.5\n",
            "2026-11-22 10:04:07,999 INFO epoch 1 loss 0.5\n",
            id="a logging timestamp is ignored",
        ),
        pytest.param("[10:00:00] epoch 1\n", "[11:59:59] epoch 1\n", id="a clock time is ignored"),
        pytest.param(
            "model <Net object at 0x7f3a2c1b0d60>\n",
            "model <Net object at 0x7f00deadbeef>\n",
            id="a memory address is ignored",
        ),
        pytest.param(
            "saved /tmp/dp2ddp-verify-ab12/reference/ckpt.pt\n",
            "saved /tmp/dp2ddp-verify-ab12/converted/ckpt.pt\n",
            id="a temporary path is ignored",
        ),
    ],
)
def test_timings_and_noise_are_ignored(reference: str, converted: str) -> None:
    comparison = _compare(reference + "loss 0.5\n", converted + "loss 0.5\n")
    assert comparison.agrees, comparison.summary()
    assert comparison.ignored >= 2
    assert comparison.only_reference == comparison.only_converted == ()
    assert "ignored on" in comparison.summary()[0]


def test_only_the_timing_is_masked_so_a_loss_on_the_same_line_is_still_compared() -> None:
    comparison = _compare("epoch 1 loss 0.500 time 12.3s\n", "epoch 1 loss 0.900 time 6.1s\n")
    assert comparison.first_mismatch is not None
    assert (comparison.first_mismatch.reference_value, comparison.first_mismatch.converted_value) == ("0.500", "0.900")


def test_python_warnings_and_their_source_lines_are_ignored() -> None:
    warning = (
        "/opt/venv/lib/python3.11/site-packages/torch/nn/parallel/distributed.py:1234: UserWarning: find_unused\n"
        "  warnings.warn(\n"
    )
    comparison = _compare(MNIST, warning + MNIST)
    assert comparison.agrees
    assert comparison.ignored == 2
    assert comparison.only_converted == ()


def test_an_indented_line_not_after_a_warning_is_kept() -> None:
    comparison = _compare("results:\n  accuracy 95%\n", "results:\n")
    assert comparison.only_reference == (LogLine(2, "accuracy 95%"),)


@pytest.mark.parametrize(
    "reference, converted",
    [
        pytest.param("loading\rloss 0.5\n", "loss 0.5\n", id="a carriage return keeps the last segment"),
        pytest.param("\r 10%|#  | 1/10\r100%|###| 10/10\rloss 0.5\n", "loss 0.5\n", id="a rewritten bar then a line"),
        pytest.param("loss 0.5\r\n", "loss 0.5\n", id="Windows line endings"),
        pytest.param("loss 0.5\r\r\n", "loss 0.5\n", id="a trailing carriage return keeps the text on screen"),
    ],
)
def test_carriage_return_progress_lines(reference: str, converted: str) -> None:
    comparison = _compare(reference, converted)
    assert comparison.agrees
    assert comparison.compared == 1
    assert comparison.only_reference == comparison.only_converted == ()


# --- structure -----------------------------------------------------------------------------------


def test_a_line_only_in_one_log_does_not_disagree_but_is_listed() -> None:
    reference = MNIST.replace("Train Epoch: 2 [0/", "saving checkpoint\nTrain Epoch: 2 [0/")
    converted = "Initialized process group: world size 2\n" + MNIST
    comparison = _compare(reference, converted)
    assert comparison.agrees
    assert comparison.compared == 6
    assert comparison.only_reference == (LogLine(6, "saving checkpoint"),)
    assert comparison.only_converted == (LogLine(1, "Initialized process group: world size 2"),)
    assert comparison.summary()[1:] == [
        "logs: 1 line only in the reference, first: line 6 'saving checkpoint'",
        "logs: 1 line only in the converted rank 0, first: line 1 'Initialized process group: world size 2'",
    ]


def test_a_line_inserted_into_a_run_of_one_shape_keeps_the_run_paired() -> None:
    batches = [f"batch {index} loss 0.{index}" for index in range(1, 6)]
    converted = [*batches[:2], "rank 0 synchronised", *batches[2:]]
    comparison = _compare("\n".join(batches), "\n".join(converted))
    assert comparison.agrees
    assert comparison.compared == 5
    assert comparison.only_converted == (LogLine(3, "rank 0 synchronised"),)


def test_a_run_cut_short_pairs_its_first_lines_and_lists_the_rest() -> None:
    """Rank 0 iterating half the batches prints half the progress lines of each epoch."""
    epoch = [f"batch {index} loss 0.5" for index in range(4)]
    reference = [*epoch, "epoch 1 accuracy 95%", *epoch, "epoch 2 accuracy 96%"]
    converted = [*epoch[:2], "epoch 1 accuracy 95%", *epoch[:2], "epoch 2 accuracy 96%"]
    comparison = _compare("\n".join(reference), "\n".join(converted))
    assert comparison.compared == 6
    assert comparison.first_mismatch is None
    assert [line.number for line in comparison.only_reference] == [3, 4, 8, 9]


@pytest.mark.parametrize(
    "work, compared",
    [
        pytest.param(500, 40, id="Myers' diff aligns a repetitive middle too costly for SequenceMatcher"),
        pytest.param(1, 0, id="logs too different to align within the budget are left unpaired"),
    ],
)
def test_alignment_within_a_work_budget(monkeypatch: pytest.MonkeyPatch, work: int, compared: int) -> None:
    steps = [f"step {step} loss 0.{step}\nstep {step} lr 0.1" for step in range(20)]
    reference = "\n".join(["header", *steps, "footer"])
    converted = "\n".join(["process group ready", *steps[:7], "checkpoint", *steps[7:], "done"])
    monkeypatch.setattr(logs, "_WORK", work)  # SequenceMatcher: 20 x 20 pairs of each shape; Myers: 85 lines x 5 edits
    comparison = _compare(reference, converted)
    assert comparison.first_mismatch is None
    assert comparison.compared == compared
    assert len(comparison.only_reference) == 42 - compared
    assert len(comparison.only_converted) == 43 - compared


def test_lines_whose_text_differs_are_not_paired() -> None:
    comparison = _compare("test accuracy 95.3%\n", "test acc 95.3%\n")
    assert comparison.compared == 0
    assert comparison.agrees
    assert comparison.only_reference == (LogLine(1, "test accuracy 95.3%"),)
    assert comparison.only_converted == (LogLine(1, "test acc 95.3%"),)


# --- duplicates ----------------------------------------------------------------------------------


def test_a_report_line_printed_by_rank_1_too_is_a_duplicate() -> None:
    reference = "epoch 1 loss 0.234\nepoch 2 loss 0.123\n"
    rank1 = "rank 1 ready\nepoch 1 loss 0.241\nepoch 2 loss 0.130\n"
    comparison = _compare(reference, reference, rank1)
    assert not comparison.agrees
    assert comparison.first_mismatch is None
    # one entry per unguarded print, not one per epoch
    assert comparison.duplicates == (Duplicate(1, LogLine(2, "epoch 1 loss 0.241"), "printed by rank 1 too"),)
    assert comparison.summary() == [
        "logs: 'epoch 1 loss 0.241' printed by rank 1 too (rank 1 line 2): guard it with is_main_process()"
    ]


def test_lines_only_other_ranks_print_are_not_duplicates() -> None:
    comparison = _compare("loss 0.5\n", "rank 0 ready\nloss 0.5\n", "rank 1 ready\n", "rank 2 ready\n")
    assert comparison.agrees


def test_each_unguarded_print_is_reported_once_across_ranks() -> None:
    reference = "loss 0.5\naccuracy 95%\n"
    comparison = _compare(reference, reference, "loss 0.5\n", "loss 0.5\naccuracy 95%\n")
    assert [(duplicate.rank, duplicate.line.text) for duplicate in comparison.duplicates] == [
        (1, "loss 0.5"),
        (2, "accuracy 95%"),
    ]


def test_a_line_printed_twice_by_rank_0_is_a_duplicate() -> None:
    reference = "epoch 1 loss 0.5\ntest accuracy 95%\n"
    converted = "epoch 1 loss 0.5\ntest accuracy 95%\ntest accuracy 95%\n"
    comparison = _compare(reference, converted)
    assert not comparison.agrees
    assert comparison.first_mismatch is None
    assert comparison.duplicates == (
        Duplicate(0, LogLine(3, "test accuracy 95%"), "printed 2 times, the reference printed it once"),
    )
    assert comparison.only_converted == (LogLine(3, "test accuracy 95%"),)
    assert comparison.summary() == [
        "logs: 'test accuracy 95%' printed 2 times, the reference printed it once (rank 0 line 3)",
        "logs: 1 line only in the converted rank 0, first: line 3 'test accuracy 95%'",
    ]


def test_every_line_printed_twice_is_a_duplicate_and_not_a_number_mismatch() -> None:
    """A logging handler added twice: each line twice in a row; kept in, each would pair with the next epoch's."""
    reference = "epoch 1 loss 0.5\nepoch 2 loss 0.4\nepoch 3 loss 0.3\n"
    converted = "".join(line + "\n" + line + "\n" for line in reference.splitlines())
    comparison = _compare(reference, converted)
    assert comparison.first_mismatch is None
    assert comparison.compared == 3
    assert comparison.duplicates == (
        Duplicate(0, LogLine(2, "epoch 1 loss 0.5"), "printed 6 times, the reference printed it 3 times"),
    )
    assert [line.number for line in comparison.only_converted] == [2, 4, 6]


def test_a_line_the_reference_repeats_is_not_a_duplicate() -> None:
    log = "loss 0.50\nloss 0.50\nloss 0.49\n"
    assert _compare(log, log).agrees


def test_a_shape_printed_more_often_but_not_in_a_row_names_the_first_extra_line() -> None:
    comparison = _compare("loss 0.5\ndone\n", "loss 0.5\ndone\nloss 0.4\n")
    assert comparison.duplicates == (
        Duplicate(0, LogLine(3, "loss 0.4"), "printed 2 times, the reference printed it once"),
    )


# --- the summary and the module ------------------------------------------------------------------


def test_a_long_line_is_shortened_in_the_summary() -> None:
    line = "loss " + "x" * 300 + " 0.5"
    summary = _compare(line, line.replace("0.5", "0.9")).summary()[0]
    assert len(summary) < 300
    assert "..." in summary


def test_the_summary_counts_ignored_lines_and_uses_the_singular() -> None:
    assert _compare("loss 0.5\n12.3s\n", "loss 0.5\n").summary() == [
        "logs: 1 report line agrees with the reference (timings or noise ignored on 1 line)"
    ]


def test_the_module_imports_only_the_standard_library_and_dp2ddp() -> None:
    """verify compares logs without torch or LibCST installed."""
    tree = ast.parse(Path(logs.__file__).read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    roots = {name.split(".")[0] for name in imported}
    assert roots <= set(sys.stdlib_module_names) | {"__future__", "dp2ddp"}


# --- end to end: converted rank 0 prints what the original printed --------------------------------


def test_a_difference_fails_by_default_and_names_the_cause_and_the_fix() -> None:
    comparison = _compare("test accuracy 95.3%\n", "test accuracy 47.6%\n", "")
    finding = checks.logs(comparison, fail=True)
    assert finding.kind == "defect"
    assert "'test accuracy 95.3%' vs 'test accuracy 47.6%' (95.3 vs 47.6)" in finding.message
    assert "all_reduce_sum" in finding.message and "--logs warn" in finding.message
    assert checks.logs(comparison, fail=False).kind == "warning"
    assert checks.logs(_compare(MNIST, MNIST), fail=True).kind == "note"


def test_a_line_printed_twice_with_the_right_numbers_is_only_a_warning() -> None:
    """A banner or a list of model names that rank 1 prints too: seen twice, nothing printed is wrong."""
    banner = "['resnet20', 'resnet32']\nepoch 1 loss 0.241\n"
    comparison = _compare(banner, banner, "['resnet20', 'resnet32']\n")
    assert comparison.duplicates and comparison.first_mismatch is None
    finding = checks.logs(comparison, fail=True)
    assert finding.kind == "warning" and "printed by rank 1 too" in finding.message


def test_a_printed_tensor_is_compared_without_its_autograd_graph() -> None:
    # convert averages `print(loss)`'s tensor over processes: the same value, without grad_fn.
    reference = "step 0 loss tensor(0.6632, grad_fn=<NllLossBackward0>)\n"
    assert _compare(reference, "step 0 loss tensor(0.6632)\n").agrees
    comparison = _compare(reference, "step 0 loss tensor(0.5913)\n")
    first = comparison.first_mismatch
    assert first is not None and (first.reference_value, first.converted_value) == ("0.6632", "0.5913")
    assert comparison.ignored == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "lines"),
    [
        pytest.param("samples_seen_printed", 4, id="batch_idx * len(x), x.shape[0] and a summed count of samples seen"),
        pytest.param("progress_meter_reduced", 6, id="an AverageMeter's val and avg every other step"),
        pytest.param("loss_printed_after_loop", 6, id="print(loss) of the tensor, and the last loss after the loop"),
    ],
)
def test_converted_rank_0_prints_the_original_numbers(case: str, lines: int, tmp_path: Path) -> None:
    code, output, document = run_verify(tmp_path, str(fixture(case, tmp_path)))
    assert code == 0, output
    assert document["verdict"] == "equivalent"
    assert f"logs: {lines} report lines agree with the reference" in output, output


@pytest.mark.slow
def test_an_evaluation_accuracy_of_rank_0_s_shard_fails_verify(tmp_path: Path) -> None:
    """The converted script's sum over processes of the test counts removed: rank 0 prints its half as the whole."""
    removed = ("        test_loss, correct = all_reduce_sum(test_loss, correct)\n", "")
    converted = planted("mnist_argparse", tmp_path, "shard_only", removed)
    original = fixture("mnist_argparse", tmp_path)
    code, output, document = run_verify(tmp_path, str(original), "--converted", str(converted))
    assert code == 1, output
    assert document["verdict"] == "not equivalent"  # the losses agree; a check failed
    message = document["message"]
    assert message.startswith("not equivalent (the losses agree): logs differ at reference line 3 / converted line 3: ")
    line = r"'Test set: Average loss: [\d.]+, Accuracy: \d+/50'"
    assert re.search(f"{line} vs {line}", message), message
    assert "all_reduce_sum" in message


def test_a_meter_s_time_and_data_columns_and_their_averages_are_masked_but_its_loss_is_not() -> None:
    """The ImageNet example's progress line: 'Time  val ( avg)' and 'Data  val ( avg)' are clocks on every run."""
    reference = "Epoch: [0][ 1/10]\tTime  0.667 ( 0.667)\tData  0.020 ( 0.020)\tLoss 2.3026e+00 (2.3026e+00)\n"
    converted = "Epoch: [0][ 1/10]\tTime  0.412 ( 0.530)\tData  0.011 ( 0.015)\tLoss 2.3026e+00 (2.3026e+00)\n"
    assert compare_logs(reference, [converted, ""], Tolerance()).agrees
    wrong = converted.replace("Loss 2.3026e+00 (2.3026e+00)", "Loss 2.5026e+00 (2.3026e+00)")
    compared = compare_logs(reference, [wrong, ""], Tolerance())
    assert not compared.agrees and compared.first_mismatch is not None
    assert compared.first_mismatch.converted_value == "2.5026e+00"


def test_a_printed_model_reads_the_same_wrapped_in_ddp() -> None:
    reference = "DataParallel(\n  (module): Linear(in_features=4, out_features=1, bias=True)\n)\nloss 0.5\n"
    converted = reference.replace("DataParallel(", "DistributedDataParallel(")
    compared = compare_logs(reference, [converted, ""], Tolerance())
    assert compared.agrees and not compared.only_converted and not compared.only_reference
