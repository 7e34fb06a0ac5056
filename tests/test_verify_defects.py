"""Planted defects that leave the losses equal (or that the losses see only by chance), caught directly.

One small BatchNorm script and its conversion serve every case: each test plants one defect in the
conversion and checks that verify fails (exit 1) with a message naming the cause and the fix; the
conversion as written, and a fixture whose ranks call barriers from different lines, must pass.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dp2ddp.api import ConvertOptions, convert_source
from dp2ddp.verify import checks
from tests.test_verify import fixture, run_verify
from tests.test_verify_checks import converted_run, rank

BATCH_NORM_SCRIPT = '''
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU())
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.body(x))


def main():
    generator = torch.Generator().manual_seed(7)
    data = torch.utils.data.TensorDataset(torch.randn(64, 6, generator=generator),
                                          torch.randint(0, 3, (64,), generator=generator))
    loader = torch.utils.data.DataLoader(data, batch_size=16, shuffle=True)
    model = nn.DataParallel(Net())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        model.train()
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    torch.save(model.module.state_dict(), "net.pt")
    model.module.load_state_dict(torch.load("net.pt"))


if __name__ == "__main__":
    main()
'''
WRAP = "    model = wrap_ddp(Net())\n"
SAVE = "    if is_main_process():\n        torch.save(model.module.state_dict(), \"net.pt\")\n    dist.barrier()\n"
SET_EPOCH = "        loader.sampler.set_epoch(epoch)\n"
BATCH = "batch_size=16 // dist.get_world_size()"


@pytest.fixture(scope="module")
def batch_norm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The original and its conversion, converted once; every piece a defect is planted in must be there."""
    folder = tmp_path_factory.mktemp("batch_norm")
    script = folder / "batch_norm.py"
    script.write_text(BATCH_NORM_SCRIPT)
    converted = convert_source(BATCH_NORM_SCRIPT, ConvertOptions()).output
    for piece in (WRAP, SAVE, SET_EPOCH, BATCH):
        assert piece in converted, f"the conversion changed; planted defects no longer apply: {piece!r}"
    return script, converted


def verify_planted(batch_norm: tuple[Path, str], tmp_path: Path, old: str, new: str) -> tuple[int, str, dict]:
    script, converted = batch_norm
    (tmp_path / script.name).write_text(script.read_text())
    broken = tmp_path / "broken.py"
    broken.write_text(converted.replace(old, new))
    return run_verify(tmp_path, script.name, "--converted", str(broken))


def finding(document: dict, check: str) -> dict:
    found = [item for item in document["checks"] if item["check"] == check and item["kind"] == "defect"]
    assert found, document["checks"]
    return found[0]


def defects(document: dict) -> list[dict]:
    return [item for item in document.get("checks", []) if item["kind"] == "defect"]


def test_the_conversion_as_written_passes_every_check(batch_norm: tuple[Path, str], tmp_path: Path) -> None:
    """BatchNorm with DDP's default buffer broadcast, a save on the main process and a barrier after it."""
    code, output, document = verify_planted(batch_norm, tmp_path, "", "")
    assert code == 0, output
    assert document["verdict"] == "equivalent" and defects(document) == []


def test_batch_norm_statistics_left_apart_by_broadcast_buffers_false_are_named(
    batch_norm: tuple[Path, str], tmp_path: Path
) -> None:
    apart = "    model = wrap_ddp(Net(), broadcast_buffers=False)\n"
    code, output, document = verify_planted(batch_norm, tmp_path, WRAP, apart)
    assert code == 1, output
    assert document["first_divergence"] is None  # training forwards use batch statistics: the losses agree
    buffers = finding(document, "buffers")
    assert buffers["step"] == 1  # equal after the wrap's broadcast, apart after the first step's forward
    assert "body.1.running_mean" in buffers["message"] and "body.1.running_var" in buffers["message"]
    assert "broadcast_buffers=False" in buffers["message"] and "SyncBatchNorm" in buffers["message"]


def test_a_checkpoint_saved_by_every_process_is_named(batch_norm: tuple[Path, str], tmp_path: Path) -> None:
    code, output, document = verify_planted(batch_norm, tmp_path, "    if is_main_process():\n        torch.save",
                                            "    if True:\n        torch.save")  # fmt: skip
    assert code == 1, output
    writes = finding(document, "writes")
    assert f"both rank 0 and rank 1 write {tmp_path / 'net.pt'} (torch.save at broken.py:" in writes["message"]
    assert "main process only" in writes["message"]


def test_a_barrier_only_the_main_process_reaches_is_named_by_its_line(
    batch_norm: tuple[Path, str], tmp_path: Path
) -> None:
    """Rank 1's exit barrier pairs with it, so the run ends (with an abort at exit): only the records show it."""
    _, converted = batch_norm
    extra = SAVE + "    if is_main_process():\n        dist.barrier()\n"
    line = converted[: converted.index(SAVE)].count("\n") + 5  # the planted barrier: two lines after SAVE's three
    code, output, document = verify_planted(batch_norm, tmp_path, SAVE, extra)
    assert code == 1, output
    collectives = finding(document, "collectives")
    assert f"rank 0 called dist.barrier at broken.py:{line} " in collectives["message"], collectives["message"]
    assert "rank 1 made no such call" in collectives["message"] and "rank condition" in collectives["message"]


def test_a_missing_set_epoch_is_named_without_the_losses(batch_norm: tuple[Path, str], tmp_path: Path) -> None:
    code, output, document = verify_planted(batch_norm, tmp_path, SET_EPOCH, "")
    assert code == 1, output
    epochs = finding(document, "epochs")
    assert epochs["step"] == 4  # the second epoch's first step: 64 samples, a global batch of 16
    assert "DistributedSampler #1" in epochs["message"] and "set_epoch(epoch)" in epochs["message"]


def test_a_per_process_batch_left_undivided_is_named(batch_norm: tuple[Path, str], tmp_path: Path) -> None:
    code, output, document = verify_planted(batch_norm, tmp_path, BATCH, "batch_size=16")
    assert code == 1, output
    batch = finding(document, "batch")
    assert "each process trains on the global batch of 16: the effective batch is 2 x 16" in batch["message"]


def test_a_doubled_learning_rate_is_named_by_its_rate(batch_norm: tuple[Path, str], tmp_path: Path) -> None:
    code, output, document = verify_planted(batch_norm, tmp_path, "lr=0.1)", "lr=0.2)")
    assert code == 1, output
    rate = finding(document, "learning rate")
    assert rate["step"] == 0 and "learning rate 0.2 in the converted run and 0.1 in the reference, 2 times" in rate["message"]
    assert document["verdict"] == "not equivalent"


def test_download_once_barriers_from_different_lines_pass(tmp_path: Path) -> None:
    """Rank 1 waits before the download and rank 0 after it: two lines, one barrier each; only rank 0 writes."""
    script = fixture("dataset_downloads_once", tmp_path)
    code, output, document = run_verify(tmp_path, str(script), "--", "--data", str(tmp_path / "data"))
    assert code == 0, output
    assert defects(document) == []


# --- the same checks on recorded data, no process launched ----------------------------------------


def write_records(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))


def barrier(line: int, call: str = "barrier") -> dict:
    return {"call": call, "line": f"train.py:{line}"}


@pytest.mark.parametrize(
    ("rank0", "rank1", "named"),
    [
        pytest.param([barrier(57), barrier(41)], [barrier(60), barrier(41)], None,
                     id="download-once barriers from two lines pair"),
        pytest.param([barrier(9, "all_reduce"), barrier(93), barrier(41)], [barrier(9, "all_reduce"), barrier(41)],
                     "rank 0 called dist.barrier at train.py:93 (its collective call #2)",
                     id="a barrier under a rank condition is named, not the exit barrier it paired with"),
        pytest.param([barrier(41)], [barrier(70, "all_reduce"), barrier(41)],
                     "rank 1 called dist.all_reduce at train.py:70", id="a call only another rank made"),
    ],
)  # fmt: skip
def test_collective_sequences(rank0: list[dict], rank1: list[dict], named: str | None, tmp_path: Path) -> None:
    write_records(tmp_path / "converted-rank0.collectives.jsonl", rank0)
    write_records(tmp_path / "converted-rank1.collectives.jsonl", rank1)
    found = checks.collectives(converted_run(tmp_path, [rank(0), rank(1)]))
    if named is None:
        assert found == []
    else:
        [defect] = found
        assert defect.kind == "defect" and named in defect.message, defect.message


@pytest.mark.parametrize(
    ("reference", "per_rank", "defect"),
    [
        pytest.param([16] * 8, [8] * 8, False, id="the global batch split"),
        pytest.param([15] * 8, [7] * 8, False, id="a global batch that does not divide"),
        pytest.param([16, 0] * 4, [16, 0] * 4, True, id="two optimizers a batch, the batch undivided"),
        pytest.param([32, 16, 16, 0], [16, 8, 8, 0], False, id="prefetching workers count ahead in both runs"),
    ],
)  # fmt: skip
def test_samples_per_step(reference: list[int], per_rank: list[int], defect: bool, tmp_path: Path) -> None:
    run = converted_run(tmp_path, [rank(0, samples_per_step=per_rank), rank(1, samples_per_step=per_rank)])
    reference_run = converted_run(tmp_path, [rank(0, samples_per_step=reference)])
    found = checks.batch(reference_run, run)
    assert bool(found) == defect, found


def test_set_epoch_ignores_peeks_that_never_finish_a_pass(tmp_path: Path) -> None:
    """`next(iter(loader))` each step begins a pass with the same epoch every time, as the reference does too."""
    sampler = {"sampler": 0, "seed": 0, "epoch": 0, "shuffle": True}
    write_records(tmp_path / "converted-rank0.samplers.jsonl",
                  [{**sampler, "pass": number, "step": number} for number in range(3)])  # fmt: skip
    loader = {"loader": 0, "training": True, "indices": []}
    passes = [{**loader, "pass": number, "distributed_sampler": [0, number]} for number in range(3)]
    write_records(tmp_path / "converted-rank0.loaders.jsonl", passes)
    run = converted_run(tmp_path, [rank(0), rank(1)])
    assert checks.set_epoch(run) == []
    write_records(tmp_path / "converted-rank0.loaders.jsonl", [{**p, "ended": True} for p in passes])
    [defect] = checks.set_epoch(run)
    assert defect.step == 1 and "all 3 of its training passes with epoch 0" in defect.message


def test_a_learning_rate_that_differs_from_the_reference_s_is_named_at_its_step() -> None:
    """Read from the optimizer itself: a doubled rate fails at once, however noisy the losses are."""
    from dp2ddp.verify.checks import learning_rates
    from dp2ddp.verify.runner import RankOutcome, RunOutcome

    def run(rates: list[tuple[float, ...]]) -> RunOutcome:
        rank = RankOutcome(0, "finished", (), None, "", stepped=("optimizer 1 (SGD)",) * len(rates),
                           learning_rates=tuple(rates))  # fmt: skip
        return RunOutcome("run", (), 0, 1.0, False, (rank,), "")

    schedule = [(0.1,), (0.1,), (0.05,), (0.05,)]
    assert learning_rates(run(schedule), run(schedule)) == []
    [finding] = learning_rates(run(schedule), run([(0.1,), (0.1,), (0.1,), (0.05,)]))  # a scheduler a step late
    assert finding.kind == "defect" and finding.step == 2
    assert "learning rate 0.1 in the converted run and 0.05 in the reference, 2 times" in finding.message
    assert learning_rates(run([(0.1, 0.01)]), run([(0.1, 0.01 + 1e-15)])) == []  # rounding is not a change
