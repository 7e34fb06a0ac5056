"""Converted fixtures really train under torchrun: 2 processes, gloo, CPU, synthetic data."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import FIXTURES

pytest.importorskip("torchvision")
pytestmark = pytest.mark.slow

PROBE = Path(__file__).resolve().parent / "rank_probe.py"
SHARDED_PAIR = Path(__file__).resolve().parent / "data" / "sharded_sampler"
GLOO_EXIT_ABORT = "terminate called without an active exception"
TIMEOUT_S = 240
# Converted fixtures the suite trains, one of each launch and loader shape.
TRAINED = [
    "imagenet_meters", "mnist_argparse", "first_gpu_of_device_ids", "shared_train_and_val_function", "run_folder_must_be_new", "batch_handed_to_a_sizing_helper", "batch_bound_small_for_evaluation", "dataset_seeds_workers_by_id", "wrap_once_then_evaluate_at_top_level", "step_skipped_on_a_loss_spike", "architecture_weights_registered", "frozen_around_evaluation", "collate_cuts_fixed_groups", "loss_nan_returns", "wrap_chosen_by_an_option_or_raise", "gpu_wrap_nested_with_an_else", "resume_after_a_moved_wrap", "evaluation_divided_by_its_batch_count", "evaluation_loss_per_batch_over_the_dataset", "summed_criterion_moved_to_gpu", "progress_bar_shows_the_loss", "evaluation_loader_built_with_kwargs", "loader_options_from_a_conditional_dict", "logger_held_by_a_run_object", "mixup_or_plain_forward", "wrap_chosen_by_a_config_name", "checkpoints_pruned_in_try", "print_in_a_one_line_else", "latest_checkpoint_linked", "train_score_summed_per_batch", "cifar_resnet", "toplevel_script", "conditional_dp", "gan_two_models",
    "detectron_launch", "resume_before_wrap", "use_cuda_branches", "unused_pooler", "summed_criterion_class",
    "batch_sized_criterion", "eval_with_grad", "gpu_argument", "batch_of_one", "sampler_placeholder", "iteration_loop_restart",
    "eval_kept_whole", "plateau_on_losses", "eval_kwargs_kept_whole", "rebound_model_name", "nested_gpu_conditions",
    "init_after_wrap_moved", "reinit_after_wrap", "gpu_argument_guarded_print", "loss_skip_agreed",
    "dist_bound_in_function", "dataset_downloads_once", "device_from_helper", "step_counter_stop", "wrap_branch_with_else",
    "set_device_first_gpu", "gan_noise_batch", "random_sampler_explicit", "unpacked_loader_kwargs", "weighted_loss_reported",
    "contrastive_in_batch_reported", "loader_from_factory", "part_replaced_after_wrap", "loop_filtered_wraps",
    "loader_kwargs_beside_shuffle", "eval_loader_in_kept_tuple", "loader_param_alias", "batch_option_default_one",
    "frozen_feature_network", "meter_sums_per_class", "partial_batchnorm_frozen_in_train", "results_file_read_back",
    "startup_split_unseeded", "count_through_batch_name", "worker_init_seeds_without_rank",
    "loader_through_kwargs", "center_table_per_process", "pathlib_directories_made_everywhere",
    "augmented_without_workers",
    "forward_stops_before_the_head", "identity_head_after_wrap", "part_wrap_beside_whole_wrap", "data_parallel_left_inside",
    "noise_drawn_per_process", "parameters_frozen_after_wrap", "loaders_returned_in_a_dict", "parallel_flag_gan",
    "model_rebuilt_under_phase_flag", "module_list_read_in_part", "loading_wrap_returned",
    "per_process_run_dir", "model_unwrapped_and_wrapped_again", "losses_listed_per_step", "gpu_option_else_wraps",
    "test_only_branch_exits", "resume_skip_with_loss_skip", "penalty_returned_through_a_helper",
    "step_taken_by_a_loss_object", "step_taken_in_a_helper", "state_dict_filled_by_train",
    "two_forwards_one_backward",
]  # fmt: skip


def _cpu_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["CUDA_VISIBLE_DEVICES"] = ""  # gloo on CPU, even where a GPU is present
    return env


def run_bounded(command: list[str], workdir: Path) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in its own process group; on timeout kill the group and fail with its output."""
    process = subprocess.Popen(
        command, cwd=workdir, env=_cpu_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        stdout, stderr = process.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # torchrun and every rank, no orphans
        stdout, stderr = process.communicate()
        pytest.fail(f"{' '.join(command)} hung for {TIMEOUT_S}s; every rank's output:\n{stdout}\n{stderr}")
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def run_under_torchrun(
    script: Path, workdir: Path, *args: str, nproc: int = 2, probe: str = "probe"
) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    out = workdir / probe
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
        "--", str(PROBE), str(out), str(script), *args,
    ]  # fmt: skip
    for _ in range(3):
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        completed = run_bounded(command, workdir)
        # gloo now and then aborts a process at exit, after the script has finished (README, "Not yet");
        # more runs tell that known defect of the exit apart from a failure of what is tested here.
        if completed.returncode == 0 or GLOO_EXIT_ABORT not in completed.stdout + completed.stderr:
            break
    ranks = [json.loads(path.read_text()) for path in sorted(out.glob("rank*.json"))]
    return finished_despite_exit_abort(completed, len(ranks) == nproc), ranks


def finished_despite_exit_abort(
    completed: subprocess.CompletedProcess[str], every_rank_finished: bool
) -> subprocess.CompletedProcess[str]:
    """``completed`` with exit status 0 when its only failure is gloo's abort after every rank finished.

    Each rank records its result in an atexit hook that runs after the script's own, so a record from
    every rank proves the script ran to its end, process group destroyed; "terminate called without
    an active exception" after that is the interpreter's teardown, not the script.
    """
    aborted_at_exit = completed.returncode != 0 and GLOO_EXIT_ABORT in completed.stdout + completed.stderr
    if aborted_at_exit and every_rank_finished:
        return subprocess.CompletedProcess(completed.args, 0, completed.stdout, completed.stderr)
    return completed


@pytest.mark.parametrize("case", TRAINED)
def test_converted_fixture_trains_on_two_processes_with_disjoint_data(case: str, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    shutil.copy(FIXTURES / case / "after.py", script)
    completed, ranks = run_under_torchrun(script, tmp_path)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert [rank["world_size"] for rank in ranks] == [2, 2]

    sharded = [
        [p for p in rank["passes"] if p["sampler"] == "DistributedSampler"] for rank in ranks
    ]
    assert sharded[0], "the converted script never loaded data through a DistributedSampler"
    assert len(sharded[0]) == len(sharded[1])
    passes = list(zip(*sharded))
    for number, (first, second) in enumerate(passes):
        size = first["dataset_size"]
        assert set(first["indices"]).isdisjoint(second["indices"])
        if number == len(passes) - 1 and len(first["indices"]) < size // 2:
            # A script that counts iterations may stop in the middle of its last pass.
            assert len(first["indices"]) == len(second["indices"])
            continue
        assert len(first["indices"]) == len(second["indices"]) == size // 2
        assert sorted(first["indices"] + second["indices"]) == list(range(size))
    if len(sharded[0]) > 1 and sharded[0][0]["shuffle"]:
        # set_epoch reshuffles: the second epoch does not repeat the first one's order.
        assert sharded[0][0]["indices"] != sharded[0][1]["indices"]
    # DDP kept every replica identical: bitwise-equal parameters on both ranks at the end.
    assert ranks[0]["replicas"], "the converted script built no DDP model"
    assert ranks[0]["replicas"] == ranks[1]["replicas"], "the ranks ended with different weights"


def test_batch_per_process_keeps_each_processs_batch_and_scales_the_learning_rate(tmp_path: Path) -> None:
    """Under --batch per-process each rank loads its own half in DataParallel's whole batches, at W times the rate."""
    from dp2ddp.api import ConvertOptions, convert_source

    script = tmp_path / "train.py"
    before = (FIXTURES / "mnist_argparse" / "before.py").read_text(encoding="utf-8")
    script.write_text(convert_source(before, ConvertOptions(batch="per-process")).output, encoding="utf-8")
    completed, ranks = run_under_torchrun(script, tmp_path, "--batch-size", "8", "--train-size", "48", "--lr", "0.05")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert [rank["world_size"] for rank in ranks] == [2, 2]
    sharded = [[p for p in rank["passes"] if p["sampler"] == "DistributedSampler"] for rank in ranks]
    assert len(sharded[0]) == len(sharded[1]) == 2  # two epochs
    for first, second in zip(*sharded):
        assert set(first["indices"]).isdisjoint(second["indices"])
        assert sorted(first["indices"] + second["indices"]) == list(range(48))
        # Each process steps on the original batch of 8, so a step sees 16 samples in all.
        assert first["batch_sizes"] == second["batch_sizes"] == [8, 8, 8]
    assert [rank["learning_rates"] for rank in ranks] == [[0.1], [0.1]]
    assert ranks[0]["replicas"] == ranks[1]["replicas"], "the ranks ended with different weights"


# Pairs whose training sampler convert shards with the generic ShardedSampler: every fixture whose
# after.py builds one, found rather than listed, so a fixture added for a new sampler shape is trained
# here without editing this file; and the hand-written pair under tests/data, so the test means
# something before any fixture has one.
SAMPLED = [SHARDED_PAIR] + sorted(
    path.parent for path in FIXTURES.glob("*/after.py") if "ShardedSampler(" in path.read_text(encoding="utf-8")
)


def _sharded_passes(rank: dict) -> list[dict]:
    """This rank's passes over the first ShardedSampler it iterated (the training loader's)."""
    sharded = [p for p in rank["passes"] if p["sampler"] == "ShardedSampler"]
    assert sharded, "the converted script never loaded data through a ShardedSampler"
    first = sharded[0]
    return [p for p in sharded if (p["inner"], p["dataset_size"]) == (first["inner"], first["dataset_size"])]


def _batches(record: dict) -> list[list[int]]:
    indices, batches = iter(record["indices"]), []
    for size in record["batch_sizes"]:
        batches.append([next(indices) for _ in range(size)])
    return batches


def assert_sampler_split(reference: dict, ranks: list[dict]) -> None:
    """The ranks' ShardedSampler passes split what the original's loader drew; fails with the reason."""
    world = len(ranks)
    per_rank = [_sharded_passes(rank) for rank in ranks]
    drawn_by = per_rank[0][0]
    drew = (drawn_by["inner"], drawn_by["dataset_size"])
    original = [p for p in reference["passes"] if (p["sampler"], p["dataset_size"]) == drew]
    assert original, f"the original never iterated a {drawn_by['inner']} over {drawn_by['dataset_size']} samples"
    expected = original[0]["indices"]
    first = [passes[0]["indices"] for passes in per_rank]
    drawn = [index for indices in first for index in indices]
    if drawn_by.get("endless"):
        # An endless sampler's one pass, drawn alike in both runs: each step the ranks' parts make the original's batch.
        steps = list(zip(*(_batches(passes[0]) for passes in per_rank)))
        assert steps and [sorted(sum(step, [])) for step in steps] == [sorted(b) for b in _batches(original[0])[: len(steps)]]
        assert all(len({len(part) for part in step}) == 1 for step in steps), "the ranks took batches of different sizes"
        assert all(rank["replicas"] == ranks[0]["replicas"] for rank in ranks), "the ranks ended with different weights"
        return
    if drawn_by["replacement"]:
        # Draws with replacement repeat samples by design: the ranks share one sequence of the original's
        # length (padded to a multiple of the world size), each an equal part, and not each the whole.
        assert 0 <= len(drawn) - len(expected) < world, (len(drawn), len(expected))
        assert all(len(indices) == -(-len(expected) // world) for indices in first), [len(i) for i in first]
        assert all(indices != first[0] for indices in first[1:]), "every rank drew the same sequence"
    else:
        if drawn_by["split_batches"]:
            # A batch shorter than the world size is lent to the ranks it cannot feed: one sample each.
            steps = zip(*(_batches(passes[0]) for passes in per_rank))
            padding = sum(
                world - len({i for batch in step for i in batch}) for step in steps if all(len(b) == 1 for b in step)
            )
        else:
            padding = world - 1  # the sequence is padded from its start to a multiple of the world size
            assert len({len(indices) for indices in first}) == 1, [len(i) for i in first]
        repeated = len(drawn) - len(set(drawn))
        assert repeated <= padding, f"the ranks drew {repeated} samples in common in their first epoch"
        if original[0]["complete"] and all(passes[0]["complete"] for passes in per_rank):
            assert set(drawn) == set(expected), "together the ranks did not draw what the original's loader drew"
        else:
            # A pass cut short (next(iter(loader)) peeks, a step-counted loop) holds other samples in each
            # run; the same steps hold as many.
            assert len(drawn) == len(expected), (len(drawn), len(expected))
    for rank, passes in enumerate(per_rank):
        assert len(passes) >= 2, f"rank {rank} ran {len(passes)} epoch(s); the fixture must train two"
        assert passes[0]["indices"] != passes[1]["indices"], f"rank {rank} drew the same order in both epochs"
    assert ranks[0]["replicas"], "the converted script built no DDP model"
    assert all(rank["replicas"] == ranks[0]["replicas"] for rank in ranks), "the ranks ended with different weights"


def _pass(sampler: str, indices: list[int], inner: str | None = None, size: int = 8, replacement: bool = False) -> dict:
    return {"sampler": sampler, "inner": inner, "replacement": replacement, "split_batches": False,
            "dataset_size": size, "indices": indices, "batch_sizes": [len(indices)], "complete": True}  # fmt: skip


def test_the_split_check_rejects_ranks_that_each_draw_the_whole_sampler() -> None:
    """Without the live runs: a split that covers the original passes; every rank drawing it all does not."""
    reference = {"passes": [_pass("SubsetRandomSampler", [5, 0, 3, 6, 1, 2])]}
    epochs = [[[5, 3, 1], [2, 6, 0]], [[0, 6, 2], [1, 3, 5]]]  # per rank, per epoch
    split = [
        {"passes": [_pass("ShardedSampler", indices, "SubsetRandomSampler") for indices in rank], "replicas": ["a"]}
        for rank in epochs
    ]
    assert_sampler_split(reference, split)
    whole = [{**rank, "passes": [_pass("ShardedSampler", [5, 0, 3, 6, 1, 2], "SubsetRandomSampler")] * 2} for rank in split]
    with pytest.raises(AssertionError, match="drew 6 samples in common"):
        assert_sampler_split(reference, whole)
    weighted = {"passes": [_pass("WeightedRandomSampler", [1, 1, 4, 2, 4, 7], replacement=True)]}
    same = [{**rank, "passes": [_pass("ShardedSampler", [4, 4, 2], "WeightedRandomSampler", replacement=True)] * 2}
            for rank in split]  # fmt: skip
    with pytest.raises(AssertionError, match="every rank drew the same sequence"):
        assert_sampler_split(weighted, same)


@pytest.mark.parametrize("pair", SAMPLED, ids=lambda pair: pair.name)
def test_sampler_fixture_splits_its_sampler(pair: Path, tmp_path: Path) -> None:
    """Each rank draws its own share of the original's first epoch, a new order each epoch, and DDP stays in sync."""
    before, script = tmp_path / "before.py", tmp_path / "train.py"
    shutil.copy(pair / "before.py", before)
    shutil.copy(pair / "after.py", script)
    (tmp_path / "reference").mkdir()
    original = run_bounded([sys.executable, str(PROBE), str(tmp_path / "reference"), str(before)], tmp_path)
    assert original.returncode == 0, original.stdout + original.stderr
    reference = json.loads((tmp_path / "reference" / "rank0.json").read_text())
    completed, ranks = run_under_torchrun(script, tmp_path)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert [rank["world_size"] for rank in ranks] == [2, 2]
    assert_sampler_split(reference, ranks)


@pytest.mark.parametrize("case", ["eval_kept_whole", "eval_kwargs_kept_whole"])
def test_evaluation_before_training_reports_the_originals_numbers_once(case: str, tmp_path: Path) -> None:
    """Kept whole or gathered exactly, evaluation of the same weights prints what one process does."""
    before, script = tmp_path / "before.py", tmp_path / "train.py"
    shutil.copy(FIXTURES / case / "before.py", before)
    shutil.copy(FIXTURES / case / "after.py", script)
    reference = run_bounded([sys.executable, str(before)], tmp_path)
    assert reference.returncode == 0, reference.stderr
    completed, _ = run_under_torchrun(script, tmp_path)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    converted = [line for line in _log(completed) if line.startswith("validate")]
    assert converted == [line for line in _log(reference) if line.startswith("validate")][:1]


def test_guards_never_race_or_crash_the_other_process(tmp_path: Path) -> None:
    """Three fresh runs: the log directory exists before any process logs into it, writes happen once."""
    script = tmp_path / "train.py"
    shutil.copy(FIXTURES / "guarded_escapes" / "after.py", script)
    for run in range(3):
        out = f"run{run}"
        completed, ranks = run_under_torchrun(script, tmp_path, "--out", out, probe=f"probe{run}")
        assert completed.returncode == 0, completed.stdout + completed.stderr
        assert ranks[0]["replicas"] == ranks[1]["replicas"]
        log = (tmp_path / out / "train.log").read_text().splitlines()
        assert [line.split(",")[0] for line in log] == ["INFO:root:epoch 0 done", "INFO:root:epoch 1 done"], log
        assert (tmp_path / out / "metrics.txt").read_text().count("loss") == 2
        # 64 samples, 8 per process per step: 4 steps an epoch, shown by the main process only.
        assert completed.stdout.count("step ") == 8, completed.stdout
        assert [len(rank["saves"]) for rank in ranks] == [2, 0]


def test_loader_function_shared_with_evaluation_splits_only_where_it_trains(tmp_path: Path) -> None:
    """One ``_get_data(flag)`` builds every loader: validation and prediction stay whole, as the original ran them."""
    before, script = tmp_path / "before.py", tmp_path / "train.py"
    shutil.copy(FIXTURES / "loader_factory_for_every_split" / "before.py", before)
    shutil.copy(FIXTURES / "loader_factory_for_every_split" / "after.py", script)
    reference = run_bounded([sys.executable, str(before)], tmp_path)
    assert reference.returncode == 0, reference.stderr
    completed, ranks = run_under_torchrun(script, tmp_path)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    printed = [line for line in completed.stdout.splitlines() if line.startswith(("validate", "predicted"))]
    # Every process validates on all 48 windows (so they stop early together), and predicts with batches of 1.
    assert printed == [line for line in reference.stdout.splitlines() if line.startswith(("validate", "predicted"))]
    assert "predicted 5 windows" in printed
    assert ranks[0]["replicas"] == ranks[1]["replicas"], "the ranks ended with different weights"


def test_unseeded_split_at_start_up_is_one_draw_on_every_process(tmp_path: Path) -> None:
    """A file list split with an unseeded ``np.random`` before training: every process holds the same split."""
    shutil.copy(FIXTURES / "startup_split_unseeded" / "after.py", tmp_path / "train.py")
    runner = tmp_path / "run.py"
    runner.write_text(
        "import json, os, runpy\n"
        "names = runpy.run_path('train.py', run_name='__main__')\n"
        "with open(f\"split{os.environ['RANK']}.json\", 'w') as out:\n"
        "    json.dump(names['train_files'], out)\n",
        encoding="utf-8",
    )
    completed, ranks = run_under_torchrun(runner, tmp_path)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    splits = [json.loads((tmp_path / f"split{rank}.json").read_text()) for rank in range(2)]
    assert splits[0] == splits[1], "the processes split the files differently, so their shards overlap and miss files"
    assert len(splits[0]) == 48
    assert ranks[0]["replicas"] == ranks[1]["replicas"], "the ranks ended with different weights"


def test_converted_script_runs_as_a_single_plain_process(tmp_path: Path) -> None:
    """`python train.py` with no launcher (and no GPUs) still trains, as one process."""
    script = tmp_path / "train.py"
    shutil.copy(FIXTURES / "toplevel_script" / "after.py", script)
    completed = run_bounded([sys.executable, str(script)], tmp_path)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.count("epoch") == 3


def _log(completed: subprocess.CompletedProcess[str]) -> list[str]:
    """The script's own report lines from every rank, without torchrun's banner."""
    text = completed.stdout + completed.stderr
    return [line for line in text.splitlines() if line.startswith(("validate:", "accuracy", "epoch", "best", "resumed"))]


def test_converted_script_logs_once_with_whole_data_metrics_saves_once_and_resumes(tmp_path: Path) -> None:
    """The realistic fixture under 2 processes: one log, whole-set counts, one writer, and resume."""
    before, script = tmp_path / "before.py", tmp_path / "train.py"
    shutil.copy(FIXTURES / "imagenet_meters" / "before.py", before)
    shutil.copy(FIXTURES / "imagenet_meters" / "after.py", script)
    reference = run_bounded([sys.executable, str(before), "--out", "reference"], tmp_path)
    assert reference.returncode == 0, reference.stderr

    completed, ranks = run_under_torchrun(script, tmp_path, "--out", "run", "--epochs", "2")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    log = _log(completed)
    # Each report line once, not once per process (prints and logging land on different streams).
    kinds = Counter(line.split(" ")[0].rstrip(":") for line in log)
    assert kinds == {"validate": 3, "accuracy": 1, "epoch": 2, "best": 1}, log
    # Gathered over both processes: the whole training set and all 101 validation samples, no padding.
    assert all(line.endswith("over 64 samples") for line in log if line.startswith("epoch"))
    assert all(line.endswith("/101") for line in log if line.startswith("validate"))
    # Before training both runs hold the same weights, so exact evaluation prints what one process does.
    for kind in ("validate", "accuracy"):
        assert next(l for l in log if l.startswith(kind)) == next(l for l in _log(reference) if l.startswith(kind))

    # Rank 0 writes one checkpoint per epoch; the other rank writes nothing.
    assert [len(rank["saves"]) for rank in ranks] == [2, 0]
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["checkpoint.pth", "model_best.pth", "summary.json"]

    # Resume from the converted run's checkpoint (`module.` keys) ...
    resumed, _ = run_under_torchrun(
        script, tmp_path, "--out", "resumed", "--resume", "run/checkpoint.pth", "--epochs", "3", probe="probe2"
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert _log(resumed)[0] == "resumed from epoch 2"
    assert sum(line.startswith("epoch 2 ") for line in _log(resumed)) == 1
    # ... and from the original's, which on a machine without several GPUs saved bare keys.
    from_original, _ = run_under_torchrun(
        script, tmp_path, "--out", "from_original", "--resume", "reference/checkpoint.pth", "--epochs", "3",
        probe="probe3",
    )  # fmt: skip
    assert from_original.returncode == 0, from_original.stdout + from_original.stderr
    # It continues from the original's weights: its first evaluation is the original's last one.
    last_reference = [line for line in _log(reference) if line.startswith("validate")][-1]
    assert [line for line in _log(from_original) if line.startswith(("resumed", "validate"))][:2] == [
        "resumed from epoch 2", last_reference,
    ]  # fmt: skip


def test_resume_into_the_bare_model_from_the_original_scripts_checkpoint(tmp_path: Path) -> None:
    """The original saves a checkpoint; the converted script resumes from it before the wrap and saves a loadable model."""
    before, script = tmp_path / "before.py", tmp_path / "train.py"
    shutil.copy(FIXTURES / "resume_before_wrap" / "before.py", before)
    shutil.copy(FIXTURES / "resume_before_wrap" / "after.py", script)
    original = run_bounded([sys.executable, str(before), "--epochs", "1"], tmp_path)
    assert original.returncode == 0, original.stderr
    # The converted run saves checkpoint.pth every epoch: a run repeated after gloo's exit abort
    # must still resume from the original's checkpoint, so it reads a copy.
    shutil.copy(tmp_path / "checkpoint.pth", tmp_path / "original.pth")
    completed, ranks = run_under_torchrun(script, tmp_path, "--resume", "original.pth", "--out", "converted.pt")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert (completed.stdout + completed.stderr).count("resumed from epoch 1") == 1
    assert ranks[0]["replicas"] == ranks[1]["replicas"]
    # The saved model is the module, which loads without a process group.
    loaded = run_bounded(
        [sys.executable, "-c", "import torch; print(type(torch.load('converted.pt', weights_only=False)).__name__)"], tmp_path
    )
    assert loaded.stdout.strip() == "Sequential", loaded.stderr


def test_a_dataset_that_downloads_on_first_use_is_written_once_and_found_by_every_process(tmp_path: Path) -> None:
    """Three fresh runs: the main process writes and renames the file first; the other never misses it."""
    script = tmp_path / "train.py"
    shutil.copy(FIXTURES / "dataset_downloads_once" / "after.py", script)
    for run in range(3):
        data = f"data{run}"
        completed, ranks = run_under_torchrun(script, tmp_path, "--data", data, probe=f"probe{run}")
        assert completed.returncode == 0, completed.stdout + completed.stderr
        # Rank 0 alone writes; a run repeated after gloo's exit abort finds the file there and writes nothing.
        assert len(ranks[0]["saves"]) <= 1 and ranks[1]["saves"] == []
        assert sorted(p.name for p in (tmp_path / data).iterdir()) == ["points.pt"]
        assert ranks[0]["replicas"] == ranks[1]["replicas"]


FAKE_TENSORBOARD = '''
"""Run train.py with a stand-in for torch.utils.tensorboard that records each writer as a file."""
import os
import runpy
import sys
import types


class SummaryWriter:
    def __init__(self, log_dir="runs"):
        os.makedirs(log_dir, exist_ok=True)
        self.file = open(os.path.join(log_dir, f"events.{os.getpid()}.{id(self)}"), "w")

    def add_scalar(self, tag, value, step):
        self.file.write(f"{tag} {step} {value}\\n")

    def close(self):
        self.file.close()


module = types.ModuleType("torch.utils.tensorboard")
module.SummaryWriter = SummaryWriter
sys.modules["torch.utils.tensorboard"] = module
runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "train.py"), run_name="__main__")
'''


def test_lazily_created_writers_write_one_event_file_each_per_run(tmp_path: Path) -> None:
    """Two writers, one created on first use: the run leaves the original's two event files, all from rank 0."""
    shutil.copy(FIXTURES / "lazy_summary_writer" / "after.py", tmp_path / "train.py")
    (tmp_path / "with_fake_tensorboard.py").write_text(FAKE_TENSORBOARD, encoding="utf-8")
    completed, ranks = run_under_torchrun(tmp_path / "with_fake_tensorboard.py", tmp_path, "--logdir", "runs")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert ranks[0]["replicas"] == ranks[1]["replicas"]
    events = sorted((tmp_path / "runs").iterdir())
    assert len(events) == 2, [e.name for e in events]
    assert len({e.name.split(".")[1] for e in events}) == 1, "event files from more than one process"
    # 48 samples, a global batch of 8: 6 steps an epoch, 2 epochs, each written once.
    lines = sorted(line.split()[0] for e in events for line in e.read_text(encoding="utf-8").splitlines())
    assert lines == ["loss"] * 12 + ["lr"] * 12


def test_augmentations_drawn_in_the_main_process_differ_between_processes(tmp_path: Path) -> None:
    """A loader with no workers: each process draws its own augmentations, and the state every process shares
    stays shared, so what the script draws after them is still one draw."""
    shutil.copy(FIXTURES / "augmented_without_workers" / "after.py", tmp_path / "train.py")
    runner = tmp_path / "run.py"
    runner.write_text(
        "import json, os, random\nimport numpy as np\nimport runpy\nimport torch\n"
        "names = runpy.run_path('train.py')\n"
        "names['setup_distributed']()\n"
        "class Draws(torch.utils.data.Dataset):\n"
        "    def __len__(self):\n        return 8\n"
        "    def __getitem__(self, index):\n"
        "        return [random.random(), float(np.random.uniform()), float(torch.rand(()))]\n"
        "data = names['DrawnPerProcess'](Draws(), int(os.environ['RANK']))\n"
        "items = [data[i] for i in range(len(data))]\n"
        "after = [random.random(), float(np.random.uniform()), float(torch.rand(()))]\n"
        "with open(f\"draws{os.environ['RANK']}.json\", 'w') as out:\n"
        "    json.dump({'items': items, 'after': after}, out)\n",
        encoding="utf-8",
    )
    completed, _ = run_under_torchrun(runner, tmp_path)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    draws = [json.loads((tmp_path / f"draws{rank}.json").read_text()) for rank in range(2)]
    for generator in range(3):
        first, second = ([item[generator] for item in d["items"]] for d in draws)
        assert first != second, "both processes drew the same augmentations for different samples"
    assert draws[0]["after"] == draws[1]["after"], "the state every process shares no longer agrees"


def test_noise_drawn_per_process_differs_between_processes_and_never_repeats(tmp_path: Path) -> None:
    """Inside ``per_process_random()`` each process draws from its own stream, which goes on from block to block;
    outside it the state every process shares stays shared."""
    shutil.copy(FIXTURES / "noise_drawn_per_process" / "after.py", tmp_path / "train.py")
    runner = tmp_path / "run.py"
    runner.write_text(
        "import json, os, random\nimport numpy as np\nimport runpy\nimport torch\n"
        "names = runpy.run_path('train.py')\n"
        "names['setup_distributed']()\n"
        "def draws():\n"
        "    return [random.random(), float(np.random.uniform()), float(torch.rand(()))]\n"
        "blocks = []\n"
        "for _ in range(2):\n"
        "    with names['per_process_random']():\n"
        "        blocks.append(draws())\n"
        "with open(f\"draws{os.environ['RANK']}.json\", 'w') as out:\n"
        "    json.dump({'blocks': blocks, 'after': draws()}, out)\n",
        encoding="utf-8",
    )
    completed, _ = run_under_torchrun(runner, tmp_path)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    draws = [json.loads((tmp_path / f"draws{rank}.json").read_text()) for rank in range(2)]
    for generator in range(3):
        assert draws[0]["blocks"][0][generator] != draws[1]["blocks"][0][generator], "both processes drew the same noise"
        for rank in range(2):
            assert draws[rank]["blocks"][0][generator] != draws[rank]["blocks"][1][generator], "a block drew again what the last one drew"
    assert draws[0]["after"] == draws[1]["after"], "the state every process shares no longer agrees"
