"""The checks behind verify's verdict, on recorded data: replicas, process group, data split, noise, messages.

No process is launched here; ``test_verify.py`` runs the same checks end to end.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dp2ddp.verify import checks, render
from dp2ddp.verify.alignment import _to_float64
from dp2ddp.verify.noise import GlobalNoise
from dp2ddp.verify.runner import RankOutcome, RunOutcome

DISTRIBUTED = {"process_group": True, "world_size": 2, "ddp_modules": 1}


def converted_run(out: Path, ranks: list[RankOutcome], **fields: object) -> RunOutcome:
    return RunOutcome("converted (2 processes, gloo, cpu)", (), 0, 1.0, False, tuple(ranks), "", out_dir=str(out),
                      **fields)  # type: ignore[arg-type]  # fmt: skip


def rank(number: int, losses: list[tuple[int, float]] | None = None, **facts: object) -> RankOutcome:
    return RankOutcome(number, "finished", tuple(losses or []), None, "", facts={**DISTRIBUTED, **facts})


def write_records(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))


# --- replicas -----------------------------------------------------------------------------------


def params(sums: list[list[float]], names: list[str]) -> list[dict]:
    records = [{"step": step, "optimizer": 0, "sums": values} for step, values in enumerate(sums)]
    records[0]["names"] = names
    return records


def test_identical_replicas_pass(tmp_path: Path) -> None:
    for number in (0, 1):
        write_records(tmp_path / f"converted-rank{number}.params.jsonl", params([[1.0, 2.0], [1.5, 2.5]], ["w", "b"]))
    assert checks.replicas(converted_run(tmp_path, [rank(0), rank(1)])) == []


def test_first_step_and_parameter_whose_replicas_differ_are_named(tmp_path: Path) -> None:
    write_records(tmp_path / "converted-rank0.params.jsonl", params([[1.0, 2.0], [1.5, 2.5], [1.7, 2.7]], ["body.weight", "head.weight"]))
    write_records(tmp_path / "converted-rank1.params.jsonl", params([[1.0, 2.0], [1.5, 2.5000001], [1.7, 2.8]], ["body.weight", "head.weight"]))
    [finding] = checks.replicas(converted_run(tmp_path, [rank(0), rank(1)]))
    assert finding.kind == "defect" and finding.step == 1
    assert "after optimizer step 1: 1 of 2 parameters on rank 1" in finding.message
    assert "(head.weight)" in finding.message


@pytest.mark.parametrize(
    ("name", "facts", "advice"),
    [
        pytest.param("D.fc.weight (not in a DDP module)", {}, "wrap it", id="a module outside DDP is told to wrap it"),
        pytest.param("head.weight", {"redrawn_after_wrap": 2}, "Initialise (or load) before wrapping",
                     id="a re-initialisation after the wrap is named"),
        pytest.param("head.weight", {"autograd_grad": 4}, "torch.autograd.grad", id="autograd.grad is named"),
        pytest.param("head.weight", {}, "after the wrap", id="otherwise the usual suspects"),
    ],
)  # fmt: skip
def test_replica_finding_gives_the_likely_cause(tmp_path: Path, name: str, facts: dict, advice: str) -> None:
    write_records(tmp_path / "converted-rank0.params.jsonl", params([[1.0]], [name]))
    write_records(tmp_path / "converted-rank1.params.jsonl", params([[1.1]], [name]))
    [finding] = checks.replicas(converted_run(tmp_path, [rank(0), rank(1, **facts)]))
    assert advice in finding.message


# --- a distributed run --------------------------------------------------------------------------


def test_a_correct_run_has_no_distributed_findings(tmp_path: Path) -> None:
    run = converted_run(tmp_path, [rank(0, [(0, 1.0), (1, 0.9)]), rank(1, [(0, 1.2), (1, 0.8)])])
    assert checks.distributed(run, 2) == []


def test_an_unconverted_script_is_named_as_such(tmp_path: Path) -> None:
    plain = {"process_group": False, "world_size": None, "ddp_modules": 0}
    losses = [(0, 1.0), (1, 0.9)]
    run = converted_run(tmp_path, [rank(0, losses, **plain), rank(1, losses, **plain)])
    messages = [finding.message for finding in checks.distributed(run, 2)]
    assert any("never called init_process_group" in message for message in messages)
    assert any("wrapped no module" in message for message in messages)
    assert any("the data is not split" in message for message in messages)


def test_a_process_group_of_another_size_is_a_defect(tmp_path: Path) -> None:
    run = converted_run(tmp_path, [rank(0, world_size=1), rank(1, world_size=1)])
    [finding] = checks.distributed(run, 2)
    assert "has 1 processes; verify launched 2" in finding.message


def sampler_pass(number: int, rank_: int, indices: list[int], seed: int = 0, size: int = 8) -> dict:
    return {"sampler": 0, "pass": number, "step": number * 2, "seed": seed, "epoch": number, "shuffle": True,
            "rank": rank_, "num_replicas": 2, "drop_last": False, "dataset_size": size, "indices": indices}  # fmt: skip


def test_disjoint_shards_with_padding_pass(tmp_path: Path) -> None:
    """7 samples over 2 ranks: DistributedSampler repeats one to give both 4."""
    write_records(tmp_path / "converted-rank0.samplers.jsonl",
                  [sampler_pass(0, 0, [4, 0, 6, 2], size=7), sampler_pass(1, 0, [1, 3, 5, 0], size=7)])
    write_records(tmp_path / "converted-rank1.samplers.jsonl",
                  [sampler_pass(0, 1, [1, 3, 5, 4], size=7), sampler_pass(1, 1, [2, 4, 6, 1], size=7)])  # fmt: skip
    losses = [(0, 1.0)]
    assert checks.samplers(converted_run(tmp_path, [rank(0, losses), rank(1, losses)]), None) == []


def test_a_seed_that_differs_per_rank_is_a_defect(tmp_path: Path) -> None:
    write_records(tmp_path / "converted-rank0.samplers.jsonl", [sampler_pass(0, 0, [4, 0, 6, 2], seed=0)])
    write_records(tmp_path / "converted-rank1.samplers.jsonl", [sampler_pass(0, 1, [4, 3, 0, 7], seed=1)])
    findings = checks.samplers(converted_run(tmp_path, [rank(0), rank(1)]), None)
    assert findings[0].kind == "defect"
    assert "different seed on each rank (0 on rank 0, 1 on rank 1)" in findings[0].message


def test_ranks_drawing_the_same_samples_is_a_defect(tmp_path: Path) -> None:
    write_records(tmp_path / "converted-rank0.samplers.jsonl", [sampler_pass(0, 0, [0, 1, 2, 3])])
    write_records(tmp_path / "converted-rank1.samplers.jsonl", [sampler_pass(0, 1, [0, 1, 2, 3])])
    [finding, *_] = checks.samplers(converted_run(tmp_path, [rank(0), rank(1)]), None)
    assert "drew 4 samples in common" in finding.message


def test_a_run_that_never_reaches_a_second_epoch_is_warned_about(tmp_path: Path) -> None:
    write_records(tmp_path / "converted-rank0.samplers.jsonl", [sampler_pass(0, 0, [4, 0, 6, 2])])
    write_records(tmp_path / "converted-rank1.samplers.jsonl", [sampler_pass(0, 1, [1, 3, 5, 7])])
    [finding] = checks.samplers(converted_run(tmp_path, [rank(0, [(0, 1.0)]), rank(1, [(0, 1.0)])]), 3)
    assert finding.kind == "warning"
    assert "--max-steps 3 ended the run first" in finding.message and "set_epoch" in finding.message


def loader_pass(indices: list[int], training: bool = True, number: int = 0) -> dict:
    return {"loader": 0, "pass": number, "training": training, "indices": indices}


def test_training_on_the_same_samples_on_every_rank_is_a_defect(tmp_path: Path) -> None:
    """A loader without a DistributedSampler: each rank iterates the whole dataset."""
    for number in (0, 1):
        write_records(tmp_path / f"converted-rank{number}.loaders.jsonl", [loader_pass(list(range(16)))])
    [finding] = checks.loaders(converted_run(tmp_path, [rank(0), rank(1)]))
    assert "trained on 16 of the same samples in pass 1 of DataLoader #1" in finding.message


def test_split_training_and_whole_set_evaluation_pass(tmp_path: Path) -> None:
    """Padding repeats fewer than world-size samples; an evaluation loader every rank reads whole is no defect."""
    write_records(tmp_path / "converted-rank0.loaders.jsonl",
                  [loader_pass([0, 2, 4, 6]), {**loader_pass(list(range(8)), training=False), "loader": 1}])
    write_records(tmp_path / "converted-rank1.loaders.jsonl",
                  [loader_pass([1, 3, 5, 0]), {**loader_pass(list(range(8)), training=False), "loader": 1}])  # fmt: skip
    assert checks.loaders(converted_run(tmp_path, [rank(0), rank(1)])) == []


def sharded_pass(indices: list[int], sampler: str = "ShardedSampler", **drawn: object) -> dict:
    return {**loader_pass(indices), "sampler": sampler, "replacement": False, "seed": 0, "draws": 8, **drawn}


def test_a_sharded_sampler_split_passes_without_a_distributed_sampler(tmp_path: Path) -> None:
    """No DistributedSampler anywhere: what the ranks drew decides, and a ShardedSampler's shares are disjoint."""
    write_records(tmp_path / "converted-rank0.loaders.jsonl", [sharded_pass([5, 3, 1, 7])])
    write_records(tmp_path / "converted-rank1.loaders.jsonl", [sharded_pass([0, 6, 2, 4])])
    run = converted_run(tmp_path, [rank(0, [(0, 1.0)], distributed_sampler_passes=0),
                                   rank(1, [(0, 1.2)], distributed_sampler_passes=0)])  # fmt: skip
    assert checks.distributed(run, 2) == []
    assert checks.loaders(run) == []


def test_a_sampler_left_unsplit_is_named_with_its_class(tmp_path: Path) -> None:
    for number in (0, 1):
        write_records(tmp_path / f"converted-rank{number}.loaders.jsonl",
                      [sharded_pass([5, 3, 1, 7, 0, 6, 2, 4], sampler="SubsetRandomSampler")])  # fmt: skip
    [finding] = checks.loaders(converted_run(tmp_path, [rank(0), rank(1)]))
    assert finding.check == "data" and finding.kind == "defect"
    assert "trained on 8 of the same samples in pass 1 of DataLoader #1 (its sampler: SubsetRandomSampler)" in finding.message


@pytest.mark.parametrize(
    ("first", "second", "message"),
    [
        pytest.param([4, 4, 1, 6], [2, 4, 7, 1], None, id="shares of one pass with repeats pass"),
        pytest.param([4, 4, 1, 6, 2, 4, 7, 1], [3, 0, 0, 5, 6, 6, 1, 2], "drew 16 samples together",
                     id="a whole pass on each rank is named"),
        pytest.param([4, 4, 1, 6], [4, 4, 1, 6], "every rank drew the same 4 samples in the same order",
                     id="the same draws on every rank are named"),
    ],
)  # fmt: skip
def test_draws_with_replacement_are_judged_by_count_and_sequence(
    tmp_path: Path, first: list[int], second: list[int], message: str | None
) -> None:
    """A WeightedRandomSampler repeats samples by design: split, the ranks share one pass of 8 draws."""
    for number, indices in enumerate((first, second)):
        write_records(tmp_path / f"converted-rank{number}.loaders.jsonl", [sharded_pass(indices, replacement=True)])
    findings = checks.loaders(converted_run(tmp_path, [rank(0), rank(1)]))
    if message is None:
        assert findings == []
    else:
        [finding] = findings
        assert finding.kind == "defect" and message in finding.message


def test_a_sharded_sampler_seed_that_differs_per_rank_is_a_defect(tmp_path: Path) -> None:
    write_records(tmp_path / "converted-rank0.loaders.jsonl", [sharded_pass([5, 3, 1, 7], seed=0)])
    write_records(tmp_path / "converted-rank1.loaders.jsonl", [sharded_pass([0, 6, 2, 4], seed=1)])
    [finding] = checks.loaders(converted_run(tmp_path, [rank(0), rank(1)]))
    assert "different seed on each rank (0 on rank 0, 1 on rank 1)" in finding.message


def test_batches_too_short_to_split_are_lent_to_every_rank(tmp_path: Path) -> None:
    """split_batches: each rank takes half of every batch; a batch of one goes to both, and that is no defect."""
    write_records(tmp_path / "converted-rank0.loaders.jsonl",
                  [sharded_pass([0, 2, 4, 6], split_batches=True, single_batches=2)])
    write_records(tmp_path / "converted-rank1.loaders.jsonl",
                  [sharded_pass([1, 3, 4, 6], split_batches=True, single_batches=2)])  # fmt: skip
    assert checks.loaders(converted_run(tmp_path, [rank(0), rank(1)])) == []
    write_records(tmp_path / "converted-rank1.loaders.jsonl",
                  [sharded_pass([0, 2, 4, 6], split_batches=True, single_batches=0)])  # fmt: skip
    write_records(tmp_path / "converted-rank0.loaders.jsonl",
                  [sharded_pass([0, 2, 4, 6], split_batches=True, single_batches=0)])  # fmt: skip
    [finding] = checks.loaders(converted_run(tmp_path, [rank(0), rank(1)]))
    assert "trained on 4 of the same samples" in finding.message


def test_a_reference_that_never_built_data_parallel_is_warned_about(tmp_path: Path) -> None:
    without = RunOutcome("reference (1 process)", (), 0, 1.0, False, (rank(0, data_parallel=0),), "")
    [finding] = checks.reference_wrapped(without)
    assert finding.kind == "warning" and "never built nn.DataParallel" in finding.message
    assert checks.reference_wrapped(RunOutcome("reference", (), 0, 1.0, False, (rank(0, data_parallel=1),), "")) == []


# --- noise drawn for the global batch --------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "rows"),
    [
        pytest.param((8, 5), 8, id="batch first"),
        pytest.param((7, 8, 3), 8, id="sequence first: the batch is dimension 1"),
        pytest.param((6, 4), 6, id="a partial last batch"),
    ],
)
def test_ranks_draw_the_rows_of_the_reference_draw(shape: tuple[int, ...], rows: int) -> None:
    reference = GlobalNoise(seed=3, rank=0, world=1, dropout=True)
    reference.rows = rows
    dim = reference.batch_dim(shape)
    assert dim is not None
    whole = reference.normal(shape, dim)
    for rank_ in (0, 1):
        local = list(shape)
        local[dim] = (rows + 1 - rank_) // 2
        shard = GlobalNoise(seed=3, rank=rank_, world=2, dropout=True)
        shard.rows = local[dim]
        mine = shard.normal(tuple(local), dim)
        expected = whole.index_select(dim, torch.arange(rank_, rows, 2))
        assert torch.equal(mine.narrow(dim, 0, expected.shape[dim]), expected)


def test_noise_without_a_batch_dimension_is_left_to_the_script() -> None:
    noise = GlobalNoise(seed=0, rank=0, world=1, dropout=True)
    assert noise.batch_dim((3, 4)) is None  # no batch drawn yet
    noise.rows = 16
    assert noise.batch_dim((3, 4)) is None


def test_float64_casting_reaches_nested_batches() -> None:
    batch = {"x": torch.zeros(2, dtype=torch.float32), "pair": (torch.zeros(1), torch.zeros(1, dtype=torch.int64))}
    cast = _to_float64(batch)
    assert cast["x"].dtype == torch.float64 and cast["pair"][0].dtype == torch.float64
    assert cast["pair"][1].dtype == torch.int64


# --- messages ---------------------------------------------------------------------------------------


def test_ddp_runtime_errors_are_explained() -> None:
    error = "RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one."
    assert "find_unused_parameters=True" in (render.explain(error) or "")
    assert "static_graph=True" in (render.explain("Expected to mark a variable ready only once.") or "")
    assert render.explain("ZeroDivisionError: division by zero") is None


def test_a_rank_that_left_on_its_own_is_named_before_the_crash_it_caused(tmp_path: Path) -> None:
    crashed = RankOutcome(0, "error", ((0, 1.0),), "RuntimeError: Connection closed by peer", "", 2.0)
    left = RankOutcome(1, "left", ((0, 1.0),), None, "", None, 1)
    message = render.failure(converted_run(tmp_path, [crashed, left]))
    assert message.index("rank 1 left at step 1") < message.index("rank 0 failed")


def test_a_script_exit_status_comes_with_what_the_script_said(tmp_path: Path) -> None:
    failed = RankOutcome(0, "error", (), "the script exited with status 2", "orig.py: error: unrecognized arguments: --bogus 3")
    message = render.failure(converted_run(tmp_path, [failed]))
    assert "unrecognized arguments: --bogus 3" in message
