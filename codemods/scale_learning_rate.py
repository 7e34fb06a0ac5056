"""Under ``--batch per-process``, scale the learning rate by the world size and count steps in global batches.

Each process then loads DataParallel's whole batch, so one optimizer step
averages the gradients of world_size times the samples. The linear scaling
rule keeps training comparable: ``SGD(params, lr=args.lr)`` becomes
``SGD(params, lr=args.lr * dist.get_world_size())``. An epoch also has
world_size times fewer steps, so ``len(train_set) // args.batch_size`` becomes
``len(train_set) // (args.batch_size * dist.get_world_size())``. Under the
default ``--batch global`` the global batch, and with it the rate and the step
count, stay as they were, except for a loader whose batch the sampler codemod
keeps per process all the same (a batch of 1, a batch value that also sizes a
step: DDP308): its steps per epoch are counted in global batches too, and its
rate is left to the user, as DDP308 says.
"""

from __future__ import annotations

import argparse

import libcst as cst
import libcst.matchers as m
from libcst.codemod import CodemodContext, SkipFile

from dp2ddp.analysis import names
from dp2ddp.analysis.module import Analysis
from ._base import Dp2ddpCodemod
from dp2ddp.analysis.syntax import argument, call_to, code_of
from ._global_batch import PER_PROCESS, add_batch_args, asks_world_size, runs_after_setup, times_world_size
from dp2ddp.analysis.batches import steps_per_epoch
from dp2ddp.analysis.loaders import is_training_loader

# Counts of samples a script divides by its batch to count steps, when not written `len(dataset)`.


class ScaleLearningRateCommand(Dp2ddpCodemod):
    DESCRIPTION = "Under --batch per-process, scale each optimizer's learning rate by the world size and count steps in global batches."

    @staticmethod
    def add_args(arg_parser: argparse.ArgumentParser) -> None:
        add_batch_args(arg_parser)

    def __init__(self, context: CodemodContext, batch: str = "global", keep_per_process_batch: bool = False) -> None:
        super().__init__(context)
        self.per_process = keep_per_process_batch or batch == PER_PROCESS
        # The `lr` argument of each optimizer scaled, with how torch.distributed is spelled there.
        self.scaled_rates: dict[cst.Arg, str] = {}
        # Steps-per-epoch divisions whose divisor becomes `(batch * world_size)`.
        self.scaled_steps: dict[cst.BinaryOperation, str] = {}

    def plan(self, analysis: Analysis) -> None:
        super().plan(analysis)
        # Under `--batch global`, loaders whose batch the sampler codemod keeps per process all the same
        # (a batch of 1, a batch value that also sizes a step): their epochs have world_size times fewer steps too.
        kept = {} if self.per_process else analysis.per_process_loaders
        if not self.per_process and not kept:
            raise SkipFile("the global batch is kept (--batch global): the learning rate needs no change")
        loaders = [c for c in analysis.findall(call_to(names.DATA_LOADER)) if isinstance(c, cst.Call)]
        training: list[tuple[cst.Call, cst.BaseExpression | None, str]] = []
        for loader in loaders:
            parent = analysis.parents.get(loader)
            reference = parent.targets[0].target if isinstance(parent, cst.Assign) and len(parent.targets) == 1 else None
            if loader in kept:
                training.append((loader, reference, kept[loader]))
            elif self.per_process and is_training_loader(loader, reference, len(loaders) == 1):
                training.append((loader, reference, f"`--batch {PER_PROCESS}`"))
        if not training:
            raise SkipFile("no training DataLoader in this file: its batch, kept or not, is not known here")
        if self.per_process:
            # Under `--batch global` the rate is the user's call: DDP308 says so.
            optimizers = [c for c in analysis.findall(call_to(names.OPTIMIZERS)) if isinstance(c, cst.Call)]
            scaled = [optimizer for optimizer in optimizers if self._plan_optimizer(optimizer)]
            if scaled:
                self._report_cyclic_schedules()
        for division in analysis.nodes(cst.BinaryOperation):
            if isinstance(division.operator, (cst.FloorDivide, cst.Divide)):
                self._plan_steps(division, training)

    # -- the learning rate ------------------------------------------------------------

    def _plan_optimizer(self, call: cst.Call) -> bool:
        """Plan scaling ``call``'s ``lr``, or say why it is not; whether the rate is (or was) scaled."""
        unpacked = next((a for a in call.args if a.star), None)
        if unpacked is not None:
            advice = "pass `lr=` by keyword, multiplied by `dist.get_world_size()`"
            self.report(call, "DDP331", why=f"its arguments come from `{unpacked.star}{code_of(unpacked.value)}`", advice=advice)
            return False
        rate = argument(call, 1, "lr")
        if rate is not None and asks_world_size(self.analysis, rate):
            return True  # converted already
        groups = self._groups_with_own_rate(argument(call, 0, "params"))
        if groups:
            advice = "multiply each group's `lr` by `dist.get_world_size()` too"
            self.report(groups[0], "DDP331", why="a parameter group sets its own `lr`", advice=advice)
        if rate is None:
            advice = "pass the optimizer's default rate as `lr=<default> * dist.get_world_size()`"
            self.report(call, "DDP331", why="no `lr` is given, so the optimizer's default applies", advice=advice)
            return False
        if not runs_after_setup(self.analysis, call):
            advice = "build the optimizer where the process group exists (in the function the entry point calls), then scale it"
            self.report(call, "DDP331", why="the optimizer is built before the process group exists", advice=advice)
            return False
        arg = self.analysis.parents[rate]
        assert isinstance(arg, cst.Arg)
        distributed = self.distributed_at(call)
        self.scaled_rates[arg] = distributed
        self.report(rate, "DDP330", lr=code_of(rate), scaled=code_of(times_world_size(rate, distributed)))
        return True

    def _groups_with_own_rate(self, params: cst.BaseExpression | None) -> list[cst.Dict]:
        """``[{"params": head, "lr": 0.1}, ...]``: the parameter groups that set an ``lr`` of their own."""
        if not isinstance(params, (cst.List, cst.Tuple)):
            return []
        own_rate = m.Dict(elements=[m.ZeroOrMore(), m.DictElement(key=m.SimpleString(m.MatchRegex(r"""^['"]lr['"]$"""))), m.ZeroOrMore()])
        return [e.value for e in params.elements if m.matches(e.value, own_rate)]  # type: ignore[misc]

    def _report_cyclic_schedules(self) -> None:
        """OneCycleLR and CyclicLR overwrite the optimizer's rate from their own bounds, which the scaling misses."""
        for call in self.analysis.findall(call_to(names.CYCLIC_SCHEDULERS.keys())):
            assert isinstance(call, cst.Call)
            qualified = {q.name for q in self.analysis.qualified_names(call.func)} & names.CYCLIC_SCHEDULERS.keys()
            scheduler = code_of(call.func)
            for position, keyword in enumerate(names.CYCLIC_SCHEDULERS[next(iter(qualified))], start=1):
                bound = argument(call, position, keyword)
                if bound is not None and not asks_world_size(self.analysis, bound):
                    self.report(bound, "DDP332", scheduler=scheduler, argument=keyword, value=code_of(bound))

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> cst.Arg:
        distributed = self.scaled_rates.get(original_node)
        if distributed is None:
            return updated_node
        return updated_node.with_changes(value=times_world_size(updated_node.value, distributed))

    # -- steps per epoch --------------------------------------------------------------

    def _plan_steps(self, division: cst.BinaryOperation, training: list[tuple[cst.Call, cst.BaseExpression | None, str]]) -> None:
        """``len(train_set) // args.batch_size``: an epoch's steps, now world_size times fewer."""
        divisor = code_of(division.right)
        for loader, reference, kept in training:
            counted = steps_per_epoch(self.analysis, division, loader, reference)
            if counted is None:
                continue
            if counted == "samples" and runs_after_setup(self.analysis, division):
                distributed = self.distributed_at(division)
                self.scaled_steps[division] = distributed
                after = code_of(self._divided(division, distributed))
                self.report(division, "DDP333", before=code_of(division), after=after, kept=kept)
            else:
                why = "before the process group exists" if counted == "samples" else "but convert cannot tell that it counts the loader's samples"
                self.report(division, "DDP334", expression=code_of(division), batch=divisor, why=why, kept=kept)
            return

    @staticmethod
    def _divided(division: cst.BinaryOperation, distributed: str) -> cst.BinaryOperation:
        divisor = times_world_size(division.right, distributed).with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        return division.with_changes(right=divisor)

    def leave_BinaryOperation(self, original_node: cst.BinaryOperation, updated_node: cst.BinaryOperation) -> cst.BaseExpression:
        distributed = self.scaled_steps.get(original_node)
        return updated_node if distributed is None else self._divided(updated_node, distributed)
