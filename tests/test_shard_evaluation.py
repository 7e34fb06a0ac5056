"""An evaluation loader is sharded only when every result of every loop over it is gathered exactly."""

from __future__ import annotations

import pytest

from dp2ddp.api import convert_source

HEADER = """import numpy as np
import torch
from torch.utils.data import DataLoader
from metrics import Evaluator


"""
MAIN = """

def main():
    model = torch.nn.DataParallel(Net())
    train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=32)
    for epoch in range(3):
        train(model, train_loader)
        {call}
"""
SHARDED = "sampler=evaluation_shard(val_set)"


def convert(evaluation: str, call: str = "print(evaluate(model, val_loader))") -> tuple[str, set[str]]:
    result = convert_source(HEADER + evaluation + MAIN.format(call=call))
    return result.output, {f.code for f in result.findings}


@pytest.mark.parametrize(
    "body",
    [
        pytest.param("correct += (model(x).argmax(1) == y).sum().item()\n            total += y.size(0)", id="sums and counts"),
        pytest.param("meter.update(loss_fn(model(x), y).item(), x.size(0))", id="an AverageMeter"),
        pytest.param("out = model(x)\n            correct += (out.argmax(1) == y).sum().item()", id="a per-step temporary"),
    ],
)
def test_gatherable_results_shard_the_loader(body: str) -> None:
    evaluation = f"""def evaluate(model, loader):
    correct, total = 0, 0
    meter = AverageMeter()
    with torch.no_grad():
        for x, y in loader:
            {body}
    return correct / max(total, 1), meter.avg
"""
    output, codes = convert(evaluation)
    assert SHARDED in output
    assert "DDP316" not in codes


@pytest.mark.parametrize(
    ("body", "after"),
    [
        pytest.param("losses.append(loss_fn(model(x), y).item())", "np.mean(losses)", id="a list averaged later"),
        pytest.param("evaluator.add_batch(y, model(x).argmax(1))", "evaluator.miou()", id="a metric object of another file"),
        pytest.param("scores[len(scores)] = model(x).sum().item()", "sum(scores.values())", id="a dict of scores"),
        pytest.param("acc = (model(x).argmax(1) == y).float().mean().item()", "acc", id="the last batch's value"),
        pytest.param("self_check(evaluator, model(x))", "evaluator.miou()", id="a result holder handed to a function"),
        pytest.param("hits = hits + (model(x).argmax(1) == y).sum().item()", "hits", id="an accumulation by assignment"),
    ],
)
def test_results_that_cannot_be_gathered_keep_the_loader_whole(body: str, after: str) -> None:
    evaluation = f"""def evaluate(model, loader):
    losses, scores, hits, acc = [], {{}}, 0, 0.0
    evaluator = Evaluator(2)
    with torch.no_grad():
        for x, y in loader:
            {body}
    return {after}
"""
    output, codes = convert(evaluation)
    assert SHARDED not in output
    assert "val_loader = DataLoader(val_set, batch_size=32)" in output
    assert "DDP316" in codes
    assert "all_reduce" not in output.split("def main")[0].split("def evaluate")[1]


@pytest.mark.parametrize(
    "call",
    [
        pytest.param("print(external_evaluate(model, val_loader))", id="a function of another file"),
        pytest.param("print(np.mean([model(x).sum().item() for x, _ in val_loader]))", id="a comprehension"),
        pytest.param("batches = iter(val_loader)", id="iter()"),
    ],
)
def test_a_loader_handed_to_code_convert_cannot_read_stays_whole(call: str) -> None:
    output, codes = convert("", call=call)
    assert SHARDED not in output
    assert "DDP316" in codes


def test_the_loader_is_followed_through_a_class_of_the_script() -> None:
    evaluation = """class Validator:
    def __init__(self, model, loader):
        self.model = model
        self.val_loader = loader

    def run(self):
        losses = []
        with torch.no_grad():
            for x, y in self.val_loader:
                losses.append(self.model(x).sum().item())
        return np.mean(losses)
"""
    output, codes = convert(evaluation, call="print(Validator(model, val_loader).run())")
    assert SHARDED not in output
    assert "DDP316" in codes


def test_an_integer_count_under_a_condition_is_summed_in_evaluation() -> None:
    evaluation = """def evaluate(model, loader):
    right, steps = 0, 0
    with torch.no_grad():
        for x, y in loader:
            steps += 1
            for p, t in zip(model(x).argmax(1), y):
                if p == t:
                    right += 1
    return right / len(loader.dataset)
"""
    output, _ = convert(evaluation)
    assert SHARDED in output
    assert "right = all_reduce_sum(right)" in output


def test_a_validation_loader_that_trains_is_split_and_its_ungathered_evaluation_reported() -> None:
    """DARTS's valid_queue feeds the architecture step: split like training; its meters of another module are reported."""
    from dp2ddp.api import convert_source

    source = """import torch
from torch.utils.data import DataLoader, SubsetRandomSampler
import utils


def infer(valid_queue, model):
    top1 = utils.AvgrageMeter()
    with torch.no_grad():
        for x, y in valid_queue:
            top1.update(accuracy(model(x), y), x.size(0))
    return top1.avg


def main():
    model = torch.nn.DataParallel(Net())
    train_queue = DataLoader(data, batch_size=8, sampler=SubsetRandomSampler(train_idx))
    valid_queue = DataLoader(data, batch_size=8, sampler=SubsetRandomSampler(valid_idx))
    for epoch in range(2):
        valid_iter = iter(valid_queue)
        for x, y in train_queue:
            x_search, y_search = next(valid_iter)
            loss_a = model(x_search).sum()
            loss_a.backward()
            model(x).sum().backward()
        print(infer(valid_queue, model))
"""
    result = convert_source(source)
    assert "valid_queue = DataLoader(data, batch_size=8 // dist.get_world_size(), sampler=ShardedSampler(" in result.output
    assert [(f.line, f.code) for f in result.findings if f.code == "DDP326"] == [(10, "DDP326")]


@pytest.mark.parametrize(
    ("returned", "said"),
    [
        pytest.param("return train_loader, val_loader, 40", "it is returned in a tuple by `make_loaders`", id="in a tuple"),
        pytest.param("return [train_loader, val_loader]", "it is returned in a list by `make_loaders`", id="in a list"),
        pytest.param("return val_loader", "it is returned by `make_loaders`", id="alone"),
        pytest.param("yield val_loader", "it is yielded by `make_loaders`", id="yielded"),
        pytest.param("loaders = {'val': val_loader}", "it is put in a dict, which convert does not follow", id="put in a dict"),
    ],
)
def test_a_loader_returned_to_code_convert_does_not_follow_is_said_so(returned: str, said: str) -> None:
    """DDP316 says where the loader went, in the script's words, never an internal name such as `element`."""
    source = f"""import torch
from torch.utils.data import DataLoader


def make_loaders(batch_size):
    train_loader = DataLoader(train_set, batch_size=batch_size, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=batch_size, shuffle=False)
    {returned}


model = torch.nn.DataParallel(Net())
"""
    result = convert_source(source)
    messages = [f.message for f in result.findings if f.code == "DDP316"]
    assert len(messages) == 1 and said in messages[0], messages
    assert "val_loader = DataLoader(val_set, batch_size=batch_size, shuffle=False)" in result.output


EVALUATE = """def evaluate(model, loader):
    correct = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
    return correct
"""
KEPT_TUPLE = """

def make_validation(batch_size):
    val_loader = DataLoader(val_set, batch_size=batch_size)
    return val_loader, len(val_set)


def main():
    model = torch.nn.DataParallel(Net())
    train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
    validation = make_validation(32)
    for epoch in range(3):
        train(model, train_loader)
        {uses}
"""


def test_a_loader_in_a_tuple_the_caller_keeps_is_followed_through_its_index() -> None:
    """`validation = make_validation(); evaluate(model, validation[0])`: the loader is sharded, its count gathered."""
    result = convert_source(HEADER + EVALUATE + KEPT_TUPLE.format(uses="print(evaluate(model, validation[0]), validation[1])"))
    assert "sampler=evaluation_shard(val_set)" in result.output
    assert "correct = all_reduce_sum(correct)" in result.output
    assert "DDP316" not in {f.code for f in result.findings}


def test_a_loader_kept_whole_keeps_every_loop_over_it_ungathered() -> None:
    """Handed on whole first, then evaluated here: the loop here counts the whole set on every process,
    so summing its count over processes would report W times the original's."""
    uses = "report(validation)\n        print(evaluate(model, validation[0]))"
    result = convert_source(HEADER + EVALUATE + KEPT_TUPLE.format(uses=uses))
    assert "val_loader = DataLoader(val_set, batch_size=batch_size)" in result.output
    assert "all_reduce" not in result.output.split("def evaluate")[1].split("def make_validation")[0]
    messages = [f.message for f in result.findings if f.code == "DDP316"]
    assert messages and "kept whole as `validation`" in messages[0], messages
