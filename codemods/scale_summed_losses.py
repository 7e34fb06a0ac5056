"""Scale summed losses by the world size before backward.

DDP averages gradients over processes, which matches DataParallel for losses
that average over the batch. A loss built with ``reduction="sum"`` (or the
old ``size_average=False``) sums instead: DataParallel's gradient is the sum
over the whole batch, while DDP's average over W processes of per-process
sums is 1/W of it. ``loss.backward()`` becomes
``(loss * dist.get_world_size()).backward()``, and
``scaler.scale(loss)`` becomes ``scaler.scale(loss * dist.get_world_size())``;
the loss the script logs is unchanged.

Losses normalised by the whole batch in another way, class-weighted means
and in-batch contrastive losses, are reported where they are computed: no
factor makes each process's share compute the DataParallel objective
(``_losses.py`` says why).

A loss counts as summed when it is the value of a ``torch.nn`` call with
``reduction="sum"``, directly or through a criterion object built with it
(or built from a criterion class of the script that uses it and never
divides), assigned to the name that back-propagates in the same function.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m
from libcst.metadata import ParentNodeProvider, QualifiedNameProvider

from dp2ddp.analysis.losses import CONTRASTIVE_CODE
from dp2ddp.analysis.module import Analysis
from ._base import Dp2ddpCodemod
from dp2ddp.analysis.syntax import code_of, string_literal, without_device_move

_TORCH_NN = m.MatchMetadataIfTrue(QualifiedNameProvider, lambda found: any(q.name.startswith("torch.nn.") for q in found))
_SUMS = m.Arg(keyword=m.Name("reduction"), value=string_literal("sum")) | m.Arg(
    keyword=m.Name("size_average"), value=m.Name("False")
)
_SUMMED_TORCH_CALL = m.Call(func=m.Name(metadata=_TORCH_NN) | m.Attribute(metadata=_TORCH_NN), args=[m.ZeroOrMore(), _SUMS, m.ZeroOrMore()])
_BACKWARD = m.Call(func=m.Attribute(attr=m.Name("backward")))
_SCALER_SCALE = m.Call(func=m.Attribute(attr=m.Name("scale")), args=[m.Arg(keyword=None)])


class ScaleSummedLossesCommand(Dp2ddpCodemod):
    DESCRIPTION = "Multiply summed (reduction='sum') losses by the world size before backward, as DDP averages gradients."
    def plan(self, analysis: Analysis) -> None:
        super().plan(analysis)
        # Criterion objects that sum: `criterion = nn.MSELoss(reduction="sum")`, `self.loss_fn = ...`.
        # A criterion class of this file that sums (`class Loss(nn.Module)` using reduction="sum")
        # sums too, unless it divides as well, which may make it a mean: that one is reported.
        summing_classes: set[str] = set()
        for cls in analysis.nodes(cst.ClassDef):
            # What a call of its instances computes: `forward` (or `__call__`). A class that sums only in other
            # methods (an experiment's `evaluate`) is no criterion.
            computes = [
                f for f in (cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ())
                if isinstance(f, cst.FunctionDef) and f.name.value in ("forward", "__call__")
            ]  # fmt: skip
            if not any(analysis.findall_in(f, _SUMMED_TORCH_CALL) for f in computes):
                continue
            if analysis.findall_in(cls, m.BinaryOperation(operator=m.Divide() | m.FloorDivide())) or analysis.findall_in(cls, m.AugAssign(operator=m.DivideAssign())):
                self.report(cls.name, "DDP311", loss=cls.name.value)
            else:
                summing_classes.add(cls.name.value)
        builds_summing = _SUMMED_TORCH_CALL | m.Call(func=m.Name(m.MatchIfTrue(lambda name: name in summing_classes)))
        # `nn.L1Loss(size_average=False).cuda()`: moved to a device, the criterion sums all the same.
        self.summing = {
            code_of(target.target)
            for assign in analysis.nodes(cst.Assign)
            if self.matches(without_device_move(assign.value), builds_summing)
            for target in assign.targets
        }
        analysis.summing_criteria |= self.summing
        self.scaled: dict[cst.BaseExpression, cst.Call] = {}  # loss expression -> its backward call
        for call in analysis.nodes(cst.Call):
            self._plan_backward(call)
        analysis.scaled_backwards.update(self.scaled.values())
        # Losses no scaling makes whole again: each process's value depends on the share it sees.
        for hazard in analysis.batch_normalised_losses:
            if hazard.code == CONTRASTIVE_CODE and analysis.batch_kept_for_pairs:
                continue  # each process keeps the whole batch DataParallel's loss saw (DDP342)
            self.report(hazard.node, hazard.code, **dict(hazard.values))

    def _sums(self, value: cst.BaseExpression, scope: cst.CSTNode) -> bool:
        if self.matches(value, _SUMMED_TORCH_CALL):
            return True
        if isinstance(value, cst.Call) and code_of(value.func) in self.summing:
            return True
        if isinstance(value, cst.Name):
            assigned = m.findall(scope, m.Assign(targets=[m.AssignTarget(m.Name(value.value))]))
            return any(isinstance(a, cst.Assign) and self._sums(a.value, scope) for a in assigned)
        return False

    def _scope(self, node: cst.CSTNode) -> cst.CSTNode:
        while not isinstance(node, (cst.FunctionDef, cst.Module)):
            node = self.get_metadata(ParentNodeProvider, node)
        return node

    def _plan_backward(self, node: cst.Call) -> None:
        if not m.matches(node, _BACKWARD):
            return
        assert isinstance(node.func, cst.Attribute)
        loss = node.func.value
        if m.matches(loss, _SCALER_SCALE):
            assert isinstance(loss, cst.Call)
            loss = loss.args[0].value
        if self._sums(loss, self._scope(node)):
            self.scaled[loss] = node
            self.report(node, "DDP310", loss=code_of(loss))

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        if m.matches(original_node, _BACKWARD) and original_node.func.value in self.scaled:  # type: ignore[attr-defined]
            assert isinstance(updated_node.func, cst.Attribute)
            scaled = self._times_world_size(updated_node.func.value, original_node, parenthesized=True)
            return updated_node.with_changes(func=updated_node.func.with_changes(value=scaled))
        if m.matches(original_node, _SCALER_SCALE) and original_node.args[0].value in self.scaled:
            argument = updated_node.args[0]
            return updated_node.with_changes(args=[argument.with_changes(value=self._times_world_size(argument.value, original_node))])
        return updated_node

    def _times_world_size(self, loss: cst.BaseExpression, at: cst.Call, parenthesized: bool = False) -> cst.BaseExpression:
        world_size = cst.parse_expression(f"{self.distributed_at(at)}.get_world_size()")
        product = cst.BinaryOperation(loss, cst.Multiply(), world_size)
        return product.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()]) if parenthesized else product
