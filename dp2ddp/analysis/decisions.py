"""Decisions a training loop leaves to each process: a stop, a learning-rate schedule, a plateau step.

Under DDP every process trains on its own share of the data, so a value it computes from that share
differs from the other processes'. When such a value decides something every process must agree on
(whether to stop, what the learning rate is), the processes part ways. ``convert`` finds these in a
DataParallel script and warns (DDP424, DDP421, DDP420); ``check`` finds the same in a DDP script
(DDP543, DDP542, DDP541). One detection, so the two cannot disagree.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from dp2ddp.analysis import names
from dp2ddp.analysis.effects import under_rank_guard
from dp2ddp.analysis.lifecycle import per_process_names
from dp2ddp.analysis.loaders import EVALUATION_NAME
from dp2ddp.analysis.module import Analysis
from dp2ddp.analysis.results import LOADER_NAME, loop_results, owner_of
from dp2ddp.analysis.syntax import REDUCTION, call_to, code_of

LEARNING_RATE = re.compile(r"(^|_|\.|\[['\"])lr(\b|_)|learning_rate", re.IGNORECASE)
BACKWARD = m.Call(func=m.Attribute(attr=m.Name("backward")))


@dataclass(frozen=True)
class PlateauStep:
    """``scheduler.step(value)`` of a ReduceLROnPlateau, on a value not averaged over processes yet."""

    call: cst.Call
    scheduler: str
    value: cst.BaseExpression
    # Under a rank condition: only the processes that pass it step, whatever the value.
    guarded: bool


def split_loader_names(analysis: Analysis) -> set[str]:
    """Names of loaders with a DistributedSampler or a ShardedSampler: given one already, or about to get one."""
    splitting = call_to(names.DISTRIBUTED_SAMPLER) | m.Call(func=m.Name(names.SHARDED_SAMPLER_HELPER))
    bound = {  # `train_sampler = ShardedSampler(...)`, then `sampler=train_sampler`
        code_of(a.targets[0].target) for a in analysis.findall(m.Assign(targets=[m.AssignTarget(m.Name())], value=splitting))
    }
    by_name = m.Name(m.MatchIfTrue(lambda name: name in bound))
    sampler = m.Arg(splitting | by_name, keyword=m.Name("sampler") | m.Name("batch_sampler"))
    sharded = m.Call(args=[m.ZeroOrMore(), sampler, m.ZeroOrMore()])
    split_where_used = m.Call(func=m.Name(names.SPLIT_LOADER_HELPER))
    found = set(analysis.sharded_names)
    for assign in analysis.findall(m.Assign(targets=[m.AssignTarget()])):
        assert isinstance(assign, cst.Assign)
        if assign.value in analysis.sharded_loaders or analysis.matches(assign.value, sharded | split_where_used):
            found.add(code_of(assign.targets[0].target).rsplit(".", 1)[-1])
    return found


def loader_names(loop: cst.For, split: set[str]) -> list[str]:
    """The loaders ``loop`` iterates, by name: one called a loader, or one of the ``split`` loaders."""
    return [
        code_of(n).rsplit(".", 1)[-1]
        for n in m.findall(loop.iter, m.Name() | m.Attribute())
        if LOADER_NAME.search(code_of(n)) or code_of(n).rsplit(".", 1)[-1] in split
    ]


def is_training_loop(loop: cst.For, split: set[str]) -> bool:
    return any(name in split or "train" in name.lower() for name in loader_names(loop, split))


def per_process_stops(analysis: Analysis, split: set[str]) -> list[tuple[cst.BaseExpression, str]]:
    """``if np.mean(losses) > best: break`` after a training loop: each process may stop in another epoch.

    Each finding is the ``if``'s test with the per-process value it reads.
    """
    found: list[tuple[cst.BaseExpression, str]] = []
    for loop in analysis.nodes(cst.For):
        if not loader_names(loop, split) or not is_training_loop(loop, split) or under_rank_guard(analysis, loop):
            continue
        results = loop_results(analysis, loop, training=True)
        reduced = {*results.sums, *results.means, *results.meters}
        targets = {n.value for n in analysis.within(loop.target, cst.Name)}
        flows = {name for name in written_in(analysis, loop) if name not in reduced and name not in targets}
        owner = owner_of(analysis, loop)
        after = [a for a in analysis.within(owner, cst.Assign) if analysis.is_after(a, loop)]
        # A value averaged over processes is the same everywhere: it passes nothing on.
        flows = analysis.flows_from(flows, after, through=lambda a: not analysis.matches(a.value, REDUCTION))
        for test in analysis.within(owner, cst.If):
            if not analysis.is_after(test, loop) or not analysis.findall_in(test.body, m.Break() | m.Return()):
                continue
            reductions = analysis.findall_in(test.test, REDUCTION)
            averaged = {id(n) for r in reductions for n in analysis.within(r, cst.Name)}
            read = {n.value for n in analysis.within(test.test, cst.Name) if id(n) not in averaged} & flows
            if read and not under_rank_guard(analysis, test):
                found.append((test.test, min(read)))
    return found


def written_in(analysis: Analysis, loop: cst.For) -> set[str]:
    """Names a loop body binds or appends to, each holding this process's share after a sharded loop.

    A step counter (``it = it + 1``) or another value every process computes alike holds no share.
    """
    written = {code_of(a.target) for a in analysis.within(loop.body, cst.AugAssign) if isinstance(a.target, cst.Name)}
    for assign in analysis.within(loop.body, cst.Assign):
        written |= {t.target.value for t in assign.targets if isinstance(t.target, cst.Name)}
    written &= per_process_names(analysis, loop)
    for call in analysis.within(loop.body, cst.Call):
        if m.matches(call.func, m.Attribute(value=m.Name(), attr=m.Name("append") | m.Name("extend"))):
            written.add(call.func.value.value)  # type: ignore[attr-defined]
    return written


def schedule_counters(analysis: Analysis) -> list[tuple[cst.AugAssign, str]]:
    """``self.tokens += (y >= 0).sum()`` in a training loop, feeding the learning rate: one process's count.

    Training loops are found by what they do, whatever they iterate (``for it, (x, y) in pbar:``).
    An increment summed over processes already (``all_reduce_sum(...)``) counts every process's share.
    """
    found: list[tuple[cst.AugAssign, str]] = []
    for loop in analysis.nodes(cst.For):
        if not analysis.findall_in(loop.body, BACKWARD) or under_rank_guard(analysis, loop):
            continue
        reduced = set(loop_results(analysis, loop, training=True).running)
        batch = {n.value for n in analysis.within(loop.target, cst.Name)}
        for aug in analysis.within(loop.body, cst.AugAssign):
            counter = code_of(aug.target)
            if counter in reduced or not isinstance(aug.operator, cst.AddAssign) or analysis.findall_in(aug.value, REDUCTION):
                continue
            if not batch & {n.value for n in analysis.within(aug.value, cst.Name)}:
                continue  # Not counted from the batch: the same on every process.
            if sets_learning_rate(analysis, counter):
                found.append((aug, counter))
    return found


def sets_learning_rate(analysis: Analysis, value: str) -> bool:
    """Whether ``value`` flows, through assignments, into a learning rate."""
    return any(LEARNING_RATE.search(name) for name in analysis.flows_from({value}) - {value})


def plateau_steps(analysis: Analysis) -> list[PlateauStep]:
    """Each ``step(value)`` of a ReduceLROnPlateau the file builds, on a value not averaged over processes yet."""
    built = m.Assign(targets=[m.AssignTarget(m.Name() | m.Attribute())], value=call_to(names.REDUCE_LR_ON_PLATEAU))
    schedulers = {code_of(a.targets[0].target) for a in analysis.findall(built)}  # type: ignore[attr-defined]
    found: list[PlateauStep] = []
    if not schedulers:
        return found
    for call in analysis.nodes(cst.Call):
        func = call.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "step" and code_of(func.value) in schedulers):
            continue
        given = next((a for a in call.args if a.keyword is None or a.keyword.value == "metrics"), None)
        if given is None or analysis.matches(given.value, REDUCTION):
            continue
        found.append(PlateauStep(call, code_of(func.value), given.value, under_rank_guard(analysis, call)))
    return found


def ungathered_evaluations(
    analysis: Analysis, trained: Iterable[tuple[cst.CSTNode, cst.BaseExpression | None]]
) -> list[tuple[cst.CSTNode, str, str]]:
    """Evaluations over a "validation" loader that also trains, keeping what no reduction covers.

    ``trained`` holds loaders whose batches reach a backward(), each with the name it is bound
    to. Such a loader is split for the training (DARTS draws architecture batches from it), so
    an evaluation over it sees one share: each finding is the statement that keeps the result,
    the loader's name and what holds the result. The loader is followed by name, through the
    functions it is handed to (``infer(valid_queue, ...)`` iterates its parameter).
    """
    found: list[tuple[cst.CSTNode, str, str]] = []
    for _, reference in trained:
        if reference is None or not EVALUATION_NAME.search(code_of(reference)):
            continue
        stem = code_of(reference).rsplit(".", 1)[-1]
        for loop in analysis.nodes(cst.For):
            if stem not in analysis.reads(loop.iter) or analysis.findall_in(loop, BACKWARD):
                continue
            ungathered = loop_results(analysis, loop, training=False).ungathered
            if ungathered:
                statement, held = ungathered[0]
                found.append((statement, stem, held))
    return found
