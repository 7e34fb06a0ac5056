"""Shapes from the fixtures, combined: no combination may end in an internal error.

Each training script below is assembled from one variant per slot (how it
logs, what it accumulates, how it shows progress, how its loops are written,
how it evaluates, how it spells its loader). Every pair of variants appears in
at least one script, so an interplay between two codemods, such as a metric
write that one group rewrites and the next group judges again, is exercised.
A conversion must be a fixpoint: converting its output changes nothing, which
``convert_source`` checks before it returns.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from dp2ddp.api import ConversionError, convert_source

HEADER = """\
import logging

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm


class AverageMeter:
    def __init__(self):
        self.sum, self.count, self.avg = 0.0, 0, 0.0

    def update(self, value, n=1):
        self.sum += value * n
        self.count += n
        self.avg = self.sum / self.count


class Logger:
    def __init__(self, logdir):
        self.logdir = logdir
        self.writer = None

    def scalar(self, name, value, step):
        if self.writer is None:
            self.writer = SummaryWriter(self.logdir)
        self.writer.add_scalar(name, value, step)

    def close(self):
        if self.writer is not None:
            self.writer.close()

"""

# slot -> variant name -> (setup lines in main, per-step lines, after-training lines)
WRITERS = {
    "no writer": ([], [], []),
    "summary writer in scope": (["writer = SummaryWriter()"], ['writer.add_scalar("loss", loss.item(), step)'], ["writer.close()"]),
    "lazily created writer": (['board = Logger("runs")'], ['board.scalar("loss", loss.item(), step)'], ["board.close()"]),
    "log file": (['log_file = open("train.log", "w")'], ['log_file.write(f"{step} {loss.item()}\\n")'], ["log_file.close()"]),
    "logger": (["logger = logging.getLogger(__name__)"], ['logger.info("step %d loss %.3f", step, loss.item())'], []),
}
METERS = {
    "no meter": ([], [], []),
    "running loss": (["running_loss = 0.0"], ["running_loss += loss.item()"], ['print("mean loss", running_loss / max(step, 1))']),
    "average meter": (["losses = AverageMeter()"], ["losses.update(loss.item(), x.size(0))"], ['print("avg", losses.avg)']),
}
PROGRESS = {
    "plain loader": "loader",
    "tqdm bar": "tqdm(loader)",
    "enumerate": "enumerate(loader)",
}
SAMPLERS = {
    "shuffle keyword": "DataLoader(data, batch_size=8, shuffle=True)",
    "sampler none keyword": "DataLoader(data, batch_size=8, shuffle=True, sampler=None)",
    "sampler none positional": "DataLoader(data, 8, True, None)",
}
EVALUATIONS = {
    "no evaluation": "",
    "sharded evaluation": "val_loader = DataLoader(val_data, batch_size=8)\n",
    "evaluation from kwargs": 'val_kwargs = {"batch_size": 8}\nval_loader = DataLoader(val_data, **val_kwargs)\n',
}
LOOPS = ("nested in main", "one-line epoch loop", "epoch loop with a print")


def _indent(lines: list[str], depth: int) -> str:
    return "".join("    " * depth + line + "\n" for line in lines)


def build_script(writer: str, meter: str, progress: str, sampler: str, evaluation: str, loop: str) -> str:
    setup_w, step_w, end_w = WRITERS[writer]
    setup_m, step_m, end_m = METERS[meter]
    iterate = PROGRESS[progress]
    target = "i, (x, y)" if progress == "enumerate" else "x, y"
    step_lines = [
        "loss = nn.functional.mse_loss(model(x), y)",
        "optimizer.zero_grad()",
        "loss.backward()",
        "optimizer.step()",
        *step_w,
        *step_m,
        "step += 1",
    ]
    train = (
        "def train(model, loader, optimizer, step, " + ", ".join(["writer", "running_loss", "losses", "board", "log_file", "logger"]) + "):\n"
        + f"    for {target} in {iterate}:\n"
        + _indent(step_lines, 2)
        + "    return step\n\n\n"
    )
    evaluate = ""
    if evaluation != "no evaluation":
        evaluate = (
            "def evaluate(model, val_loader):\n"
            "    correct = total = 0\n"
            "    with torch.no_grad():\n"
            "        for x, y in val_loader:\n"
            "            correct += (model(x).argmax(1) == y.argmax(1)).sum().item()\n"
            "            total += y.size(0)\n"
            '    print(f"accuracy {correct}/{total}")\n\n\n'
        )
    main = [
        "data = TensorDataset(torch.randn(64, 4), torch.randn(64, 2))",
        "val_data = TensorDataset(torch.randn(24, 4), torch.randn(24, 2))",
        f"loader = {SAMPLERS[sampler]}",
        *EVALUATIONS[evaluation].splitlines(),
        "model = nn.DataParallel(nn.Linear(4, 2))",
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)",
        "step = 0",
        "writer = running_loss = losses = board = log_file = logger = None",
        *setup_w,
        *setup_m,
    ]
    call = "step = train(model, loader, optimizer, step, writer, running_loss, losses, board, log_file, logger)"
    evaluate_call = ["evaluate(model, val_loader)"] if evaluate else []
    if loop == "one-line epoch loop":
        main += [f"for epoch in range(2): {call}", *evaluate_call]
    elif loop == "epoch loop with a print":
        main += ["for epoch in range(2):", f"    {call}", '    print("epoch", epoch, "done")', *(f"    {c}" for c in evaluate_call)]
    else:
        main += ["for epoch in range(2):", f"    for {target} in {iterate}:", *(f"        {line}" for line in step_lines), *(f"    {c}" for c in evaluate_call)]
    main += [*end_w, *end_m]
    return HEADER + "\n" + train + evaluate + "def main():\n" + _indent(main, 1) + '\n\nif __name__ == "__main__":\n    main()\n'


SLOTS: tuple[tuple[str, ...], ...] = (
    tuple(WRITERS), tuple(METERS), tuple(PROGRESS), tuple(SAMPLERS), tuple(EVALUATIONS), LOOPS,
)


def all_pairs(slots: tuple[tuple[str, ...], ...]) -> Iterator[tuple[str, ...]]:
    """A small set of combinations in which every pair of variants from two slots appears (greedy)."""
    uncovered = {
        (i, a, j, b)
        for i, j in itertools.combinations(range(len(slots)), 2)
        for a in slots[i]
        for b in slots[j]
    }
    candidates = list(itertools.product(*slots))
    while uncovered:
        best = max(
            candidates,
            key=lambda combo: sum((i, combo[i], j, combo[j]) in uncovered for i, j in itertools.combinations(range(len(slots)), 2)),
        )
        uncovered -= {(i, best[i], j, best[j]) for i, j in itertools.combinations(range(len(slots)), 2)}
        yield best


COMBINATIONS = list(all_pairs(SLOTS))


def test_every_pair_of_shapes_is_covered() -> None:
    """The combinations are few, but no pair of variants is left out."""
    seen = {(i, c[i], j, c[j]) for c in COMBINATIONS for i, j in itertools.combinations(range(len(SLOTS)), 2)}
    total = sum(len(SLOTS[i]) * len(SLOTS[j]) for i, j in itertools.combinations(range(len(SLOTS)), 2))
    assert len(seen) == total
    assert len(COMBINATIONS) < 40


@pytest.mark.parametrize("combination", COMBINATIONS, ids=" + ".join)
def test_combination_converts_without_internal_error(combination: tuple[str, ...]) -> None:
    source = build_script(*combination)
    compile(source, "<before>", "exec")
    try:
        result = convert_source(source)
    except ConversionError as error:
        pytest.fail(f"{error}\n--- script ---\n{source}")
    assert result.changed, [str(f) for f in result.findings]
    compile(result.output, "<after>", "exec")
    assert not [f for f in result.findings if f.severity == "error"], [str(f) for f in result.findings]


@pytest.mark.parametrize("combination", [c for c in COMBINATIONS if c[0] not in ("no writer", "logger")], ids=" + ".join)
def test_a_writer_is_created_on_the_main_process_only(combination: tuple[str, ...]) -> None:
    """One event or log file per run: the writer exists on the main process and is None elsewhere."""
    output = convert_source(build_script(*combination)).output
    created = {
        "summary writer in scope": "writer = SummaryWriter() if is_main_process() else None",
        "lazily created writer": "self.writer = SummaryWriter(self.logdir) if is_main_process() else None",
        "log file": 'log_file = open("train.log", "w") if is_main_process() else None',
        "logger": "logger = logging.getLogger(__name__)",
    }[combination[0]]
    assert created in output
