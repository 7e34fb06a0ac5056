"""The model's life-cycle: where it is wrapped, what happens to it around the wrap, and
what the training step does with it.

DDP registers its gradient hooks on the parameters it is given and broadcasts rank 0's
weights once, when it is built. A conversion is only sound when every process wraps the
model, when nothing after the wrap casts, re-creates, re-initialises or moves those
parameters, and when every process runs every backward pass the same number of times.
``ModelLifecycle`` establishes these facts once per tree:

- which wraps may leave their ``if`` (all of one ``if`` together, and only when the
  condition is provably about GPUs or CUDA), and which ``X if gpu else model`` forms
  become an unconditional wrap;
- *blockers*: hazards that no edit makes safe. Any blocker leaves the whole file as it
  was, because a half-converted script is worse than none, with a finding at each line;
- fixes other codemods apply: wraps that need ``find_unused_parameters=True``, and
  ``net.module if use_cuda else net`` where the condition no longer decides the wrap.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst
import libcst.matchers as m
from libcst.metadata import Assignment

from . import names
from .parameters import MODULE_METHODS, PARAMETER_FREE, skipping_classes, unfreezing_methods, unregistered_tensor_methods
from .syntax import DEVICE_MOVE, MAIN_GUARD, REDUCTION, argument, call_to, code_of, parameter_for, resolves_to, without_device_move
from .script import entry_point, inside_helper
from .effects import is_rank_guard

if TYPE_CHECKING:
    from .module import Analysis

# A name that says it holds a GPU count, GPU ids or a CUDA switch: ngpu, args.cuda, gpu_ids.
# A name that says GPUs or CUDA, or a flag that chooses the CPU instead (`args.cpu`, `use_cpu`).
# What a name says of the devices it runs on: `use_gpu`, `args.cuda`, `no_cpu`, `self.parallel` (a DataParallel switch).
GPU_WORDS = re.compile(r"gpu|cuda|^(use_|no_|only_|force_)?cpu$|^(use_|data_|multi_)?parallel$", re.IGNORECASE)
BUILTIN_TYPES = frozenset(f"builtins.{name}" for name in ("list", "tuple", "int", "str", "dict", "float", "bool"))
# Packages whose models convert takes to reach every parameter they build.
LIBRARY_MODELS = ("torch", "torchvision", "timm")


def _from_library(qualified: set[str]) -> bool:
    return any(q.split(".")[0] in LIBRARY_MODELS for q in qualified)


# A list of devices, counted with len(): `arg.device` given with nargs="+", `device_ids`.
DEVICE_LIST = re.compile(r"^devices?(_ids?)?$", re.IGNORECASE)
# `p.requires_grad = False`, `p.requires_grad_(False)`: a parameter frozen.
FREEZES = m.Assign(
    targets=[m.ZeroOrMore(), m.AssignTarget(m.Attribute(attr=m.Name("requires_grad"))), m.ZeroOrMore()], value=m.Name("False")
) | m.Call(func=m.Attribute(attr=m.Name("requires_grad_")), args=[m.Arg(m.Name("False"))])
UNFREEZES = m.Assign(
    targets=[m.ZeroOrMore(), m.AssignTarget(m.Attribute(attr=m.Name("requires_grad"))), m.ZeroOrMore()], value=m.Name("True")
) | m.Call(func=m.Attribute(attr=m.Name("requires_grad_")), args=[m.ZeroOrOne(m.Arg(m.Name("True")))])
# What a loop around `x.requires_grad = ...` walks: parameters, or modules whose `weight` and `bias` it switches.
_OVER_PARAMETERS = m.Call(
    func=m.Attribute(attr=m.Name("parameters") | m.Name("named_parameters") | m.Name("modules") | m.Name("named_modules") | m.Name("children"))
)
CASTS = frozenset({"half", "float", "double", "bfloat16"})
DTYPE = re.compile(r"^torch\.(half|float16|bfloat16|float|float32|float64|double)$")
# In-place tensor methods that overwrite values; `requires_grad_` and friends do not.
OVERWRITES = re.compile(r"^(normal|uniform|zero|fill|copy|constant|xavier_\w+|kaiming_\w+|orthogonal|ones|trunc_normal)_$")
GPU_OR_DEVICE = re.compile(r"device|gpu|cuda", re.IGNORECASE)
LOCAL_RANK_WORDS = re.compile(r"local_rank|current_device", re.IGNORECASE)
_BACKWARD = m.Call(func=m.Attribute(attr=m.Name("backward")))
CONTROL_FLOW = m.Return() | m.Break() | m.Continue() | m.Raise()
_LOOPS = (cst.For, cst.While)
_SCOPES = (cst.FunctionDef, cst.Module, cst.Lambda)
# Why a double backward would train differently under DDP (DDP222's `how`).
PENALTY_ON_PARAMETERS = "it differentiates with respect to the parameters, and each process gets its own shard's gradient"
PENALTY_ALONE = (
    "its penalty is back-propagated alone, so parameters it does not reach get no gradient, the reduction "
    "never completes and the penalty's gradients are never averaged"
)
PENALTY_NOT_FOLLOWED = "convert cannot follow its penalty into a backward() of this file"
BACKWARD_CREATE_GRAPH = "backward(create_graph=True) through a DDP model raises an error"


@dataclass(frozen=True)
class Hazard:
    """A finding the life-cycle analysis made: a rule code, its node, the message values."""

    node: cst.CSTNode
    code: str
    values: tuple[tuple[str, str], ...] = ()


@dataclass
class Wrap:
    call: cst.Call
    statement: cst.SimpleStatementLine | None
    scope: cst.CSTNode
    # `model = DataParallel(base)`: the names the wrapped model goes by after the wrap.
    target: str | None
    inner: str | None
    # Ifs and conditional expressions around the wrap, innermost first; the entry guard is no condition.
    conditions: list[cst.If | cst.IfExp] = field(default_factory=list)

    @property
    def names(self) -> set[str]:
        return {name for name in (self.target, self.inner) if name}


class ModelLifecycle:
    """What the analysis knows about every wrapped model of one script."""

    def __init__(self, analysis: Analysis, around: list[cst.Call] | None = None) -> None:
        """The life-cycle around the script's DataParallel wraps, or, for ``check``, ``around`` these DDP wraps."""
        self.analysis = analysis
        # Planning a conversion (edits allowed), or checking DDP code someone wrote.
        self.converting = around is None
        self.wraps = [self._wrap(call) for call in (analysis.script_facts.model_wraps if around is None else around)]
        self.blockers: list[Hazard] = []
        self.findings: list[Hazard] = []
        # Each `if` whose wrap statements all move after it, and the statements.
        self.hoisted: dict[cst.If, list[cst.SimpleStatementLine]] = {}
        # `DataParallel(m) if gpu else m`: the whole expression becomes the wrap.
        self.collapsed: dict[cst.IfExp, cst.Call] = {}
        # `net.module if use_cuda else net` once the wrap no longer depends on `use_cuda`.
        self.always_wrapped: set[cst.IfExp] = set()
        # Wrap statements that move later in their block: after this statement, the last that
        # casts, re-initialises or moves the model; and the uses of the wrapper before it,
        # which then name the model it wraps (`model.module.head` -> `model.head`).
        # Each moved wrap -> (the statement of its block it was in, the one it goes after).
        self.moved: dict[cst.SimpleStatementLine, tuple[cst.BaseStatement, cst.BaseStatement]] = {}
        self.unwrapped: dict[cst.CSTNode, str] = {}
        self.split: set[cst.SimpleStatementLine] = set()
        # Moved wraps whose last mutation is returned (`return model.to(device)`): the mutation is
        # bound to the wrap's name, the wrap follows it, and the wrapped model is returned.
        self.returned: set[cst.SimpleStatementLine] = set()
        # `if gpus > 1: <wrap and set up> else: <set up>`: the `if` becomes its wrapping branch.
        self.taken_branches: set[cst.If] = set()
        # The same where the wrap is in the `else`: the `if` becomes its `else`.
        self.taken_else: set[cst.If] = set()
        # The sides such an `if` drops: what they do (pick one GPU) no longer runs.
        self.dropped_branches: set[cst.CSTNode] = set()
        # Device names whose values is_local_device is reading, so a name its own values lead back to ends there.
        self._resolving_devices: set[str] = set()
        # The side of an `if` that wraps only a part of the model the other side wraps whole: the model, and
        # the part wraps, which go; the whole model is wrapped at the end of that side instead.
        self.submodule_sides: dict[cst.BaseSuite, tuple[str, list[cst.SimpleStatementLine]]] = {}
        # Wraps whose model has parameters its forward never uses.
        self.unused_parameters: dict[cst.Call, str] = {}
        # Those of them whose model runs several forwards before one backward: static_graph=True instead.
        self.static_graph: set[cst.Call] = set()
        # Values of the loss that a skip tests (`loss`, `loss.item()`): they become its average
        # over processes, so every process skips the same backward passes.
        self.agreed_losses: set[cst.BaseExpression] = set()
        self._assignments: dict[str, list[cst.BaseExpression]] | None = None
        # The command-line options among them (`args.parallel`): set by the user, whatever their default.
        self._options: set[str] = set()
        # Set only while convert lists what a refused file would also report: the blockers
        # still stand and are reported, but the codemods plan as if they were fixed.
        self.blockers_waived = False
        # `0` in `train(0, args)` where `train(gpu, args)` picks its GPU with `gpu`: each process passes its local rank.
        self.local_rank_arguments: dict[cst.Arg, str] = {}
        # Parameters that pick the GPU and that every call sets to this process's own GPU, or will.
        self.local_gpu_parameters: set[cst.Param] = set()
        self._decided_parameters: set[cst.Param] = set()
        # Calls of another module's function that returns the model it wrapped (`model = build(args)`):
        # the model is followed from there as from a wrap, but the wrap itself cannot move.
        self.imported = [replace(self._wrap(call), inner=None) for call in analysis.script_facts.imported_wraps] if around is None else []
        self.model_names: set[str] = set().union(*(wrap.names for wrap in self.wraps + self.imported))
        if not self.wraps and not self.imported:
            if analysis.script_facts.helper_wraps:
                # Converted already: the devices are still this script's own, and so are branches that
                # unwrap the model on one side only (DDP208, as the first conversion reported them).
                self._gpu_parameters()
                self._devices()
                helper_wraps = [c for c in analysis.nodes(cst.Call) if m.matches(c.func, m.Name(names.WRAP_HELPER))]
                for branch, _ in one_sided_unwraps(analysis, helper_wraps):
                    self.findings.append(Hazard(branch.test, "DDP208", (("condition", code_of(branch.test)),)))
            return
        if around is None:
            self._gpu_parameters()
            self._plan_conditions()
        for wrap in self.wraps:
            before = len(self.blockers)
            self._after_the_wrap(wrap)
            if around is None:
                self._move_after_mutations(wrap, self.blockers[before:])
                self._find_unused_parameters(wrap)
                self._frozen_after_the_wrap(wrap)
                self._unfrozen_after_the_wrap(wrap)
        for wrap in self.imported:
            before = len(self.blockers)
            self._after_the_wrap(wrap)
            self._name_the_factory(wrap, before)
        for returned in self._returned_models():
            self.model_names |= returned.names
            self._after_the_wrap(returned)
        self._training_steps()
        if around is None:
            self._several_forwards_per_backward()
        self._optimizers()
        # For check too: a device read from a variable is the same question in a DDP script (DDP539).
        self._devices()

    @property
    def blocked(self) -> bool:
        return bool(self.blockers) and not self.blockers_waived

    # -- the wraps ----------------------------------------------------------------------

    def _wrap(self, call: cst.Call) -> Wrap:
        statement: cst.SimpleStatementLine | None = None
        conditions: list[cst.If | cst.IfExp] = []
        node: cst.CSTNode = call
        parents = self.analysis.parents
        while not isinstance(node, (cst.Module, cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            parent = parents[node]
            if isinstance(parent, cst.IfExp) and node is not parent.test:
                conditions.append(parent)
            if isinstance(node, cst.SimpleStatementLine) and statement is None:
                statement = node
            if isinstance(node, cst.If) and not m.matches(node, MAIN_GUARD) and not self._filters_loop_items(node):
                conditions.append(node)
            node = parent
        scope = node if not isinstance(node, cst.ClassDef) else self.analysis.module
        target = None
        if statement is not None and len(statement.body) == 1 and isinstance(statement.body[0], cst.Assign):
            assign = statement.body[0]
            if len(assign.targets) == 1 and isinstance(assign.targets[0].target, (cst.Name, cst.Attribute)):
                target = code_of(assign.targets[0].target)
        wrapped = argument(call, 0, "module")
        inner = None
        if wrapped is not None:
            bare = without_device_move(wrapped)
            if isinstance(bare, (cst.Name, cst.Attribute)):
                inner = code_of(bare)
        return Wrap(call, statement, scope, target, inner, conditions)

    def _filters_loop_items(self, condition: cst.If) -> bool:
        """``for name in self.model_names: if isinstance(name, str): <wrap>``: a filter, not a condition on the wrap.

        Such an ``if`` tests only the item the loop is at, with literals, types and
        ``isinstance``-like builtins, and has no ``else``: it picks which items are wrapped
        as a list filtered beforehand would, the same on every process that iterates the
        same items, and says nothing of GPUs or of whether to run data-parallel. So it
        stays where it is and the wrap inside converts as one in a plain loop does.
        Anything else in the test (a flag, a device, a call that may differ between
        processes) keeps it a condition, which DDP207 refuses.
        """
        if condition.orelse is not None:
            return False
        loop = next((a for a in self.analysis.ancestors(condition) if isinstance(a, (cst.For, cst.While, *_SCOPES, cst.ClassDef))), None)
        if not isinstance(loop, cst.For) or not self.analysis.is_after(condition, loop.iter) or self.analysis.is_after(condition, loop.body):
            return False
        items = _bound_names(loop.target)
        # An item bound again inside the loop is no longer the item the loop is at.
        rebound = [
            *(t.target for t in self.analysis.within(loop.body, cst.AssignTarget)),
            *(t.target for t in self.analysis.within(loop.body, cst.AugAssign)),
            *(t.target for t in self.analysis.within(loop.body, cst.AnnAssign)),
            *(t.target for t in self.analysis.within(loop.body, cst.NamedExpr)),
            *(f.target for f in self.analysis.within(loop.body, cst.For)),
        ]
        if any(items & _bound_names(target) for target in rebound):
            return False
        return bool(items) and self._item_test(condition.test, items) and not GPU_OR_DEVICE.search(code_of(condition.test))

    def _item_test(self, node: cst.BaseExpression, items: set[str]) -> bool:
        """Whether ``node`` is computed from the loop's items, literals and types alone, without side effects."""
        if isinstance(node, (cst.Integer, cst.Float, cst.SimpleString)) or m.matches(node, m.Name("True") | m.Name("False") | m.Name("None")):
            return True
        if isinstance(node, cst.Name) and node.value in items:
            return True
        if isinstance(node, cst.BooleanOperation):
            return self._item_test(node.left, items) and self._item_test(node.right, items)
        if isinstance(node, cst.UnaryOperation) and m.matches(node.operator, m.Not()):
            return self._item_test(node.expression, items)
        if isinstance(node, cst.Comparison):
            return self._item_test(node.left, items) and all(self._item_test(c.comparator, items) for c in node.comparisons)
        if isinstance(node, (cst.Tuple, cst.List, cst.Set)):
            # `name in ("G", "D")`, and the classes of `isinstance(net, (nn.Module, str))`.
            return all(isinstance(e, cst.Element) and (self._item_test(e.value, items) or self._is_type(e.value)) for e in node.elements)
        if isinstance(node, cst.Call):
            qualified = {q.name for q in self.analysis.qualified_names(node.func)}
            if not qualified & {"builtins.isinstance", "builtins.issubclass", "builtins.callable", "builtins.type"}:
                return False
            return all(arg.keyword is None and arg.star == "" and (self._item_test(arg.value, items) or self._is_type(arg.value)) for arg in node.args)
        return False

    def _is_type(self, node: cst.BaseExpression) -> bool:
        """A builtin or torch type, or a class this module defines: the same object on every process."""
        if not isinstance(node, (cst.Name, cst.Attribute)):
            return False
        qualified = {q.name for q in self.analysis.qualified_names(node)}
        if any(q.startswith(("builtins.", "torch.")) for q in qualified):
            return True
        classes = {c.name.value for c in self.analysis.nodes(cst.ClassDef)}
        return isinstance(node, cst.Name) and node.value in classes and node.value in qualified

    def _plan_conditions(self) -> None:
        """Hoist the wraps of GPU conditions, nested or not, all of one outermost ``if`` together, or block."""
        by_if: dict[cst.If, list[Wrap]] = {}
        # The conditions each wrap leaves: all of them, or the GPU ones inside a flag that rebuilds the model.
        gpu_conditions: dict[cst.Call, list[cst.If]] = {}
        both_branches = self._wrapped_on_both_branches()
        for wrap in self.wraps:
            if not wrap.conditions or wrap.call in both_branches:
                continue
            conditions = wrap.conditions
            # Every condition that is not about GPUs, all in one run: fixing the innermost alone revealed the next.
            not_gpu = [c for c in conditions if not self.is_gpu_condition(c.test)]
            settled = self._wrapped_either_way(wrap, not_gpu) if not_gpu else None
            if settled is not None:
                self.findings.append(settled)
                conditions = [c for c in conditions if c not in not_gpu]
                if not conditions:
                    continue
                not_gpu = []
            for test in (c.test for c in not_gpu):
                if not any(h.node is test for h in self.blockers):
                    self.blockers.append(Hazard(test, "DDP207", (("condition", code_of(test)),)))
            if not_gpu:
                continue
            innermost = conditions[0]
            if isinstance(innermost, cst.IfExp) and len(conditions) == 1:
                # `DataParallel(m) if gpu else m`, with or without a device move on the wrap.
                wrap_is_body = innermost.body is wrap.call or (
                    m.matches(innermost.body, DEVICE_MOVE) and innermost.body.func.value is wrap.call  # type: ignore[attr-defined]
                )
                if wrap_is_body and wrap.inner is not None and code_of(without_device_move(innermost.orelse)) == wrap.inner:
                    self.collapsed[innermost] = wrap.call
                    continue
                self.blockers.append(Hazard(wrap.call, "DDP204"))
            elif any(isinstance(c, cst.IfExp) for c in conditions):
                self.blockers.append(Hazard(wrap.call, "DDP204"))
            else:
                # `if cuda: if device_count() > 1: wrap`: every condition is about GPUs, so the
                # wrap leaves them all, to just after the outermost one.
                by_if.setdefault(conditions[-1], []).append(wrap)  # type: ignore[arg-type]
                gpu_conditions[wrap.call] = conditions  # type: ignore[assignment]
        for condition, wraps in by_if.items():
            statements = [wrap.statement for wrap in wraps]
            if all(w.statement is not None and self._can_leave(w.statement, gpu_conditions[w.call]) for w in wraps):  # type: ignore[arg-type]
                self.hoisted[condition] = statements  # type: ignore[assignment]
                for wrap in wraps:
                    for left in gpu_conditions[wrap.call]:
                        self._old_condition_uses(left, [wrap])  # type: ignore[arg-type]
            elif (side := self._may_take_the_wrapping_branch(condition, wraps)) is not None:
                (self.taken_branches if side == "body" else self.taken_else).add(condition)
                dropped = condition.orelse.body if side == "body" else condition.body  # type: ignore[union-attr]
                self.dropped_branches.add(dropped)
                self._old_condition_uses(condition, wraps)
                dropped_side = "the `else`" if side == "body" else "the first branch"
                self.findings.append(Hazard(condition.test, "DDP225", (("condition", code_of(condition.test)), ("dropped", dropped_side))))
            else:
                for wrap in wraps:
                    self.blockers.append(Hazard(wrap.call, "DDP204"))

    def _may_take_the_wrapping_branch(self, condition: cst.If, wraps: list[Wrap]) -> str | None:
        """``if len(gpu_ids) > 1: model = DataParallel(model); <setup through model.module> else: <setup>``, or the
        ImageNet example's ``if args.gpu is not None: <one GPU> else: model = DataParallel(model)``.

        Under DDP every process wraps, so the branch that wraps is the one that runs:
        the whole ``if`` becomes that branch ("body" or "else"). Safe when the other side
        (not an ``elif``) binds nothing the wrapping branch does not, and leaves no other
        way out (``return``, ``break``, ``raise``), so no later code depends on it.
        """
        orelse = condition.orelse
        if not isinstance(orelse, cst.Else) or not isinstance(condition.body, cst.IndentedBlock):
            return None
        if all(len(w.conditions) == 1 and w.statement in condition.body.body for w in wraps):
            side, taken, other = "body", condition.body, orelse
        elif all(len(w.conditions) == 1 and w.statement in orelse.body.body for w in wraps):  # type: ignore[attr-defined]
            side, taken, other = "else", orelse, condition.body
        else:
            return None
        if m.findall(other, CONTROL_FLOW):
            return None

        def bound(node: cst.CSTNode) -> set[str]:
            targets = [*self.analysis.within(node, cst.AssignTarget), *self.analysis.within(node, cst.AugAssign), *self.analysis.within(node, cst.AnnAssign)]
            found = {n.value for t in targets for n in self.analysis.within(t.target, cst.Name)}
            return found | {n.value for a in self.analysis.within(node, cst.ImportAlias) for n in self.analysis.within(a, cst.Name)}

        return side if bound(other) <= bound(taken) else None

    def _wrapped_on_both_branches(self) -> set[cst.Call]:
        """``if c: m = DataParallel(m).cuda() else: m = DataParallel(m)``: every path wraps, in place.

        A side that wraps only a part of the same model (``m.features = DataParallel(m.features)``, as the
        ImageNet example does for AlexNet and VGG) parallelises too: under DDP the whole model is
        wrapped there instead, at the end of that side (``submodule_sides``).
        """
        found: set[cst.Call] = set()
        for wrap in self.wraps:
            if len(wrap.conditions) != 1 or not isinstance(wrap.conditions[0], cst.If) or wrap.target is None:
                continue
            condition = wrap.conditions[0]
            if not isinstance(condition.orelse, cst.Else):
                continue
            sides = [condition.body, condition.orelse.body]
            wraps_on = [
                [w for w in self.wraps if w.target == wrap.target and w.statement is not None and w.statement in side.body]  # type: ignore[union-attr]
                for side in sides
            ]
            if all(wraps_on):
                found |= {w.call for side in wraps_on for w in side}
                continue
            parts = [self._part_wraps(side, wrap.target) for side in sides]
            if any(wraps_on[i] and parts[1 - i] and not parts[i] for i in (0, 1)):
                side = sides[0] if parts[0] else sides[1]
                self.submodule_sides[side] = (wrap.target, parts[0] or parts[1])  # type: ignore[index]
                found |= {w.call for on in wraps_on for w in on}
        return found

    def _part_wraps(self, side: cst.BaseSuite, model: str) -> list[cst.SimpleStatementLine]:
        """The statements of ``side`` that only wrap a part of ``model`` in DataParallel: ``model.features =
        DataParallel(model.features)``; [] unless that is all the parallelism there is on the side."""
        parts: list[cst.SimpleStatementLine] = []
        for statement in getattr(side, "body", ()):
            calls = [c for c in self.analysis.within(statement, cst.Call) if c in self.analysis.script_facts.submodule_wraps]
            if not calls:
                continue
            wrapped = argument(calls[0], 0, "module")
            if (
                isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and len(calls) == 1
                and m.matches(statement.body[0], m.Assign(targets=[m.AssignTarget(m.Attribute())]))
                and wrapped is not None and code_of(wrapped) == code_of(statement.body[0].targets[0].target)  # type: ignore[attr-defined]
                and code_of(wrapped).startswith(f"{model}.")
            ):  # fmt: skip
                parts.append(statement)
            else:
                return []
        return parts

    def _wrapped_before(self, wrap: Wrap, flags: list[cst.If | cst.IfExp]) -> int | None:
        """The line of an earlier wrap of the same model, when ``wrap`` wraps it again under ``flags`` (not about GPUs).

        ``if args.cuda: model = DataParallel(model)`` first; later ``if not args.state: model = Net(encoder=...);
        if args.cuda: model = DataParallel(model)``. The flags must be outside every GPU condition of the wrap, and
        without an ``else``; the earlier wrap must be in the same block as the outermost flag, before it, under GPU
        conditions only, and the model not bound again in between, unless by a function of this file that returns
        the model it is handed (``model = load_my_state_dict(model, state)``).
        """
        conditions = wrap.conditions
        if wrap.target is None or any(not isinstance(c, cst.If) or c.orelse is not None for c in flags):
            return None
        if conditions[len(conditions) - len(flags):] != flags:
            return None  # a GPU condition around a flag: leaving it would take the wrap out of the flag too
        outer = flags[-1]
        block = self.analysis.parents.get(outer)
        body = list(block.body) if isinstance(block, (cst.IndentedBlock, cst.Module)) else []
        for other in self.wraps:
            if other is wrap or other.target != wrap.target or other.scope is not wrap.scope:
                continue
            if any(isinstance(c, cst.IfExp) or not self.is_gpu_condition(c.test) for c in other.conditions):
                continue
            top = other.conditions[-1] if other.conditions else other.statement
            if top not in body or body.index(top) >= body.index(outer):
                continue
            between = body[body.index(top) + 1 : body.index(outer)]
            if all(self._keeps_model(statement, wrap.target) for statement in between):
                return self.analysis.position(other.call).start.line
        return None

    def _wrapped_either_way(self, wrap: Wrap, flags: list[cst.If | cst.IfExp]) -> Hazard | None:
        """The finding that lets a wrap under ``flags`` (not about GPUs) convert where it is, when every process
        trains a wrapped model whichever way the flags go; None when that is not established (DDP207)."""
        test = flags[-1].test
        earlier = self._wrapped_before(wrap, flags)
        if earlier is not None:
            # A model built again and wrapped again under a flag: on the path that skips it, the model
            # is the one wrapped earlier.
            return Hazard(test, "DDP240", (("condition", code_of(test)), ("line", str(earlier))))
        if len(flags) == 1 and isinstance(flags[0], cst.If) and flags[0].orelse is None and self._wraps_once(wrap, flags[0].test):
            # `if not isinstance(model, nn.DataParallel): model = nn.DataParallel(model)`: wrapped either way.
            return Hazard(test, "DDP247", (("condition", code_of(test)), ("model", wrap.target or "")))
        untrained = self._untrained_path(wrap, flags)
        if untrained is not None:
            # `if args.test_only: <wrap>; <evaluate>; sys.exit(0)`, or `if args.train: <wrap>; <train> else:
            # <evaluate>`: the flag is alike on every process, and the path without the wrap trains nothing.
            return Hazard(test, "DDP244", (("condition", code_of(test)), ("path", untrained)))
        unwrapped = self._unwrapped_before(wrap, flags)
        if unwrapped is not None:
            # `model = model.cpu().module; <change it>; model = DataParallel(model)` under a flag: on either
            # path the model is a wrapped one.
            return Hazard(unwrapped, "DDP243", (("condition", code_of(test)), ("unwrap", code_of(unwrapped))))
        return None

    def _wraps_once(self, wrap: Wrap, test: cst.BaseExpression) -> bool:
        """``not isinstance(model, nn.DataParallel)`` around ``model = nn.DataParallel(model)``: the test only keeps a
        wrapped model from being wrapped again (and accepts the DDP model once converted), so the model is wrapped
        whichever way it goes."""
        if wrap.target is None or wrap.inner != wrap.target:
            return False
        if not m.matches(test, m.UnaryOperation(operator=m.Not(), expression=m.Call(func=m.Name("isinstance"), args=[m.Arg(), m.Arg()]))):
            return False
        checked, classes = test.expression.args  # type: ignore[attr-defined]
        spelled = [classes.value] if not isinstance(classes.value, cst.Tuple) else [e.value for e in classes.value.elements]
        return code_of(checked.value) == wrap.target and any(self.analysis.matches(c, resolves_to(names.DATA_PARALLEL)) for c in spelled)

    def _untrained_path(self, wrap: Wrap, flags: list[cst.If | cst.IfExp]) -> str | None:
        """Which path of the flags around ``wrap`` trains nothing, where that makes the wrap safe to convert in place:
        "this branch" when the outermost flag's branch holding the wrap trains nothing and ends by leaving (``sys.exit(0)``,
        ``return``, ``raise``), so the wrapped model never reaches training; "the other branch" when the branch
        without the wrap trains nothing and nothing after the ``if`` trains, so no process trains an unwrapped model.
        None when a flag reads the rank, or both paths train."""
        if any(not isinstance(f, cst.If) or is_rank_guard(self.analysis, f.test) or LOCAL_RANK_WORDS.search(code_of(f.test)) for f in flags):
            return None
        outer = flags[-1]
        assert isinstance(outer, cst.If)
        inside = any(a is outer.body for a in self.analysis.ancestors(wrap.call))
        branch = outer.body if inside else outer.orelse
        if isinstance(branch, cst.If) and self._others_leave(wrap, outer):
            return "every other branch (each wraps a model of its own, binds none, or leaves by `raise`, `sys.exit` or `return`)"
        if branch is None or not isinstance(branch, (cst.IndentedBlock, cst.Else)):
            return None
        body = branch.body if isinstance(branch, cst.IndentedBlock) else branch.body.body  # type: ignore[union-attr]
        if not self._trains(branch) and body and self._leaves(body[-1]):
            return "this branch"
        if self._others_leave(wrap, outer):
            return "every other branch (each wraps a model of its own, binds none, or leaves by `raise`, `sys.exit` or `return`)"
        other = outer.orelse if inside else outer.body
        block = self.analysis.parents.get(outer)
        if isinstance(other, cst.If) or not isinstance(block, (cst.IndentedBlock, cst.Module)):
            return None  # an `elif` chain: more paths than two
        statements = list(block.body)
        after = statements[statements.index(outer) + 1 :]
        # At module level only after the model was handed to the project's code that trains it (`train(model, ...)`
        # of another module, then `if args.final_eval: <wrap>; <load the best>; <evaluate>`), in a script that runs
        # its top level after setup_distributed().
        runs_after_setup = isinstance(self._scope_of(outer), cst.FunctionDef) or (
            entry_point(self.analysis) == "top" and self._handed_to_the_project(wrap, statements[: statements.index(outer)])
        )
        if (other is None or not self._trains(other)) and not any(self._trains(s) for s in after) and runs_after_setup:
            return "the other branch"
        return None

    def _others_leave(self, wrap: Wrap, outer: cst.If) -> bool:
        """``if args.model == "dcp": <wrap> ... else: raise ValueError(...)``: every branch of ``outer``'s chain (``elif``s
        and a final ``else``) but the one holding the wrap trains nothing and ends by leaving, so a process that goes
        on past the chain has wrapped its model."""
        branches: list[cst.BaseSuite] = []
        node: cst.If | cst.Else | None = outer
        while isinstance(node, cst.If):
            branches.append(node.body)
            node = node.orelse
        if not isinstance(node, cst.Else):
            return False  # no branch matched: the process goes on without the wrap
        branches.append(node.body)
        around = set(map(id, self.analysis.ancestors(wrap.call)))
        holding = [b for b in branches if id(b) in around]
        if len(holding) != 1:
            return False
        wrapping = {id(b) for b in branches for w in self.wraps if id(b) in set(map(id, self.analysis.ancestors(w.call)))}
        for branch in branches:
            if branch is holding[0]:
                continue
            body = list(branch.body) if isinstance(branch, cst.IndentedBlock) else []
            if not body or self._trains(branch):
                return False
            if id(branch) in wrapping or self._leaves(body[-1]) or self._binds_only_none(body):
                # `elif name == "multi_scale": model_d = DataParallel(...)`, `if name == "no_gan": model_d = None`
                continue
            return False
        return True

    @staticmethod
    def _binds_only_none(body: list[cst.BaseStatement]) -> bool:
        """``model_d = None``: the branch builds no model, so none trains unwrapped."""
        return all(
            isinstance(line, cst.SimpleStatementLine)
            and all(isinstance(small, cst.Assign) and m.matches(small.value, m.Name("None")) for small in line.body)
            for line in body
        )

    def _handed_to_the_project(self, wrap: Wrap, before: list[cst.CSTNode]) -> bool:
        """Whether one of ``before`` hands the model ``wrap`` wraps to a function of this file that trains, or to one of
        another module of the project."""
        model = wrap.inner or wrap.target
        project = self.analysis.role.project_calls
        for statement in before:
            for call in self.analysis.within(statement, cst.Call):
                trains = code_of(call.func) in self._training_functions or {q.name for q in self.analysis.qualified_names(call.func)} & project
                if trains and any(
                    m.matches(arg.value, m.Name(model)) for arg in call.args if model
                ):
                    return True
        return False

    def _trains(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` runs a backward pass, itself or through a function of this file it calls."""
        return bool(self.analysis.findall_in(node, m.Call(func=m.Attribute(attr=m.Name("backward"))))) or any(
            m.matches(c.func, m.Name() | m.Attribute(value=m.Name("self"))) and code_of(c.func).removeprefix("self.") in self._training_functions
            for c in self.analysis.within(node, cst.Call)
        )

    @cached_property
    def _training_functions(self) -> set[str]:
        """The functions of this file that run a backward pass, directly or through another of them."""
        functions = {f.name.value: f for f in self.analysis.nodes(cst.FunctionDef)}
        found = {name for name, f in functions.items() if self.analysis.findall_in(f, m.Call(func=m.Attribute(attr=m.Name("backward"))))}
        while True:
            more = {
                name for name, f in functions.items() if name not in found
                and any(code_of(c.func).removeprefix("self.") in found for c in self.analysis.within(f, cst.Call))
            }  # fmt: skip
            if not more:
                return found
            found |= more

    def _leaves(self, statement: cst.BaseStatement) -> bool:
        """``sys.exit(0)``, ``exit()``, ``return`` or ``raise``: the statement ends the program or the function."""
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            return False
        small = statement.body[0]
        if isinstance(small, (cst.Return, cst.Raise)):
            return True
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
            qualified = {q.name for q in self.analysis.qualified_names(small.value.func)}
            return bool(qualified & {"sys.exit", "builtins.exit", "builtins.quit", "os._exit"}) or code_of(small.value.func) in ("exit", "quit")
        return False

    def _unwrapped_before(self, wrap: Wrap, flags: list[cst.If | cst.IfExp]) -> cst.Assign | None:
        """``model = model.cpu().module`` earlier in the block of ``wrap``'s statement, under the same ``flags`` and
        no other condition: the branch takes the model out of the wrapper it was in, changes it, and wraps it again.
        The model was a wrapper before the flag, or ``.module`` would have raised, and is one after it."""
        if wrap.target is None or wrap.statement is None or wrap.conditions[-len(flags):] != flags or len(flags) != len(wrap.conditions):
            return None
        block = self.analysis.parents.get(wrap.statement)
        if not isinstance(block, cst.IndentedBlock) or self.analysis.parents.get(block) is not flags[0]:
            return None
        body = list(block.body)
        for statement in reversed(body[: body.index(wrap.statement)]):
            assign = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
            if not isinstance(assign, cst.Assign) or not any(code_of(t.target) == wrap.target for t in assign.targets):
                continue
            value = _unmoved(assign.value)
            if isinstance(value, cst.Attribute) and value.attr.value == "module" and code_of(_unmoved(value.value)) == wrap.target:
                return assign
            return None  # bound to something else first
        return None

    def _keeps_model(self, statement: cst.BaseStatement, name: str) -> bool:
        """Whether ``statement`` leaves ``name`` bound to the model it held: it does not bind it, or binds it to
        what a function of this file returns of it (``name = f(name, ...)``, every ``return`` of ``f`` returning
        the parameter it is handed in that place)."""
        for assign in self.analysis.within(statement, cst.Assign):
            if not any(code_of(t.target) == name for t in assign.targets):
                continue
            value = assign.value
            if not isinstance(value, cst.Call) or not isinstance(value.func, cst.Name):
                return False
            position = next((i for i, a in enumerate(value.args) if a.keyword is None and code_of(a.value) == name), None)
            functions = [f for f in self.analysis.nodes(cst.FunctionDef) if f.name.value == value.func.value]
            if position is None or len(functions) != 1 or position >= len(functions[0].params.params):
                return False
            parameter = functions[0].params.params[position].name.value
            returns = self.analysis.within(functions[0].body, cst.Return)
            if not returns or not all(m.matches(r.value, m.Name(parameter)) for r in returns):
                return False
        others = (cst.AugAssign, cst.AnnAssign, cst.For, cst.With, cst.NamedExpr)
        return not any(
            code_of(getattr(node, "target", None) or cst.Name("_")) == name
            for kind in others
            for node in self.analysis.within(statement, kind)
            if not isinstance(node, cst.With)
        )

    def _can_leave(self, statement: cst.SimpleStatementLine, conditions: list[cst.If]) -> bool:
        """Whether ``model = DataParallel(model)`` can move after its ``if`` statements (innermost first).

        It can when no ``if`` on the way out has an ``else``, and the code after
        the wrap (or after the inner ``if``) in each of them uses the model only
        to move it to this process's device: ``model = model.cuda()``. Such a
        move of the unwrapped model, then the wrap, is what the wrap there did.
        """
        if len(statement.body) != 1 or not m.matches(statement.body[0], m.Assign(targets=[m.AssignTarget(m.Name() | m.Attribute())])):
            return False
        # `self.s_net = DataParallel(self.s_net)`: the model is `self.s_net`, not every use of `self`.
        name = code_of(statement.body[0].targets[0].target)  # type: ignore[attr-defined]
        node: cst.CSTNode = statement
        for condition in conditions:
            if not isinstance(condition.body, cst.IndentedBlock):
                return False
            if condition.orelse is not None and not (condition is conditions[0] and self._moves_or_prints(condition.orelse, name)):
                return False
            block = list(condition.body.body)
            if node not in block:
                return False
            later = block[block.index(node) + 1 :]  # type: ignore[arg-type]
            if any(_reads(s, name) and not self._moves_to_own_device(s, name) for s in later):
                return False
            node = condition
        return True

    def _moves_or_prints(self, orelse: cst.If | cst.Else, name: str) -> bool:
        """``else: print("single GPU"); model = model.cuda()``: a plain ``else`` of the wrap's own ``if`` that uses the
        model only to move it to this process's device and leaves no other way: it may stay where it is while the
        wrap moves out."""
        if not isinstance(orelse, cst.Else) or not isinstance(orelse.body, cst.IndentedBlock) or m.findall(orelse, CONTROL_FLOW):
            return False
        # Only moves and calls that read nothing of the model (a print, a log line): a name the `else` binds alone
        # (`single_device = True`) may decide later code, which would then disagree with the wrap.
        return all(
            self._moves_to_own_device(s, name)
            or isinstance(s, cst.SimpleStatementLine) and all(isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) for small in s.body)
            and not _reads(s, name)
            for s in orelse.body.body
        )  # fmt: skip

    def _moves_to_own_device(self, statement: cst.BaseStatement, name: str) -> bool:
        """``model = model.cuda()``, ``model.to(device)`` with a device each process resolves to its own."""
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            return False
        small = statement.body[0]
        spelled = m.MatchIfTrue(lambda node: code_of(node) == name)
        move = m.Call(func=m.Attribute(value=spelled, attr=m.Name("cuda") | m.Name("to")))
        if m.matches(small, m.Assign(targets=[m.AssignTarget(spelled)], value=move)):
            call = small.value  # type: ignore[attr-defined]
        elif m.matches(small, m.Expr(move)):
            call = small.value  # type: ignore[attr-defined]
        else:
            return False
        return not self._casts(call) and all(arg.keyword is not None or self.is_local_device(arg.value) for arg in call.args)

    def _old_condition_uses(self, condition: cst.If, wraps: list[Wrap]) -> None:
        """Code that still branches on the condition the wrap left now meets a wrapped model."""
        test = code_of(condition.test)
        wrapped = set().union(*(wrap.names for wrap in wraps))
        for branch in self.analysis.nodes(cst.IfExp):
            if code_of(branch.test) != test:
                continue
            body, orelse = code_of(branch.body), code_of(branch.orelse)
            # `net.module if use_cuda else net`, `net.module.state_dict() if use_cuda else net.state_dict()`
            for name in wrapped:
                if (orelse == name or orelse.startswith((f"{name}.", f"{name}("))) and body == f"{name}.module{orelse[len(name):]}":
                    self.always_wrapped.add(branch)
        for other in self.analysis.nodes(cst.If):
            if other is condition or code_of(other.test) != test:
                continue
            # Only a branch that unwraps or saves the model behaves differently now.
            unwraps = any(code_of(a) in {f"{w}.module" for w in wrapped} for a in self.analysis.within(other, cst.Attribute))
            saves = any(self.analysis.matches(c, call_to(names.TORCH_SAVE)) for c in self.analysis.within(other, cst.Call))
            if unwraps or saves:
                self.findings.append(Hazard(other.test, "DDP208", (("condition", test),)))

    # -- GPU conditions -------------------------------------------------------------------

    def is_gpu_condition(self, test: cst.BaseExpression) -> bool:
        """Provably about GPUs or CUDA, or constant: every part a torch.cuda query, a literal, or a value
        assigned only from those, or a name that says GPUs or CUDA. Either way it is the same on every
        process (`device = "cuda"` ... `if device == "cuda":` always wraps)."""
        return self._gpu(test, 0) is not None

    def _gpu(self, node: cst.BaseExpression, depth: int) -> bool | None:
        """True: about GPUs; False: a literal, neutral; None: unknown."""
        if depth > 4:
            return None
        if isinstance(node, (cst.Integer, cst.Float, cst.SimpleString)) or m.matches(node, m.Name("True") | m.Name("False") | m.Name("None")):
            return False
        if isinstance(node, cst.Name) and {q.name for q in self.analysis.qualified_names(node)} & BUILTIN_TYPES:
            return False  # `type(arg.device) is list`: a type, the same everywhere
        if isinstance(node, cst.BooleanOperation):
            return _combine(self._gpu(node.left, depth), self._gpu(node.right, depth))
        if isinstance(node, cst.UnaryOperation):
            return self._gpu(node.expression, depth)
        if isinstance(node, cst.Comparison):
            parts = [self._gpu(node.left, depth), *(self._gpu(c.comparator, depth) for c in node.comparisons)]
            return _combine(*parts)
        if isinstance(node, cst.IfExp):
            return _combine(self._gpu(node.test, depth), self._gpu(node.body, depth), self._gpu(node.orelse, depth))
        if isinstance(node, (cst.ListComp, cst.GeneratorExp, cst.SetComp)) and node.for_in.inner_for_in is None:
            # `[i for i in range(torch.cuda.device_count())]`: as many items as its iterable has.
            return self._gpu(node.for_in.iter, depth)
        if isinstance(node, (cst.List, cst.Tuple)):
            return _combine(*(self._gpu(e.value, depth) if isinstance(e, cst.Element) else None for e in node.elements))
        if isinstance(node, cst.Call):
            qualified = {q.name for q in self.analysis.qualified_names(node.func)}
            if any(q.startswith("torch.cuda.") for q in qualified):
                return True
            if m.matches(node.func, m.Attribute(attr=m.Name("get"))) and node.args and isinstance(node.args[0].value, cst.SimpleString):
                # `config.get("_parallel")`: what the script stores under that key.
                return self._gpu(cst.Subscript(node.func.value, [cst.SubscriptElement(cst.Index(node.args[0].value))]), depth)  # type: ignore[attr-defined]
            if m.matches(node.func, m.Attribute(attr=m.Name("split") | m.Name("strip") | m.Name("keys") | m.Name("values"))):
                return self._gpu(node.func.value, depth)  # type: ignore[attr-defined]  # `args.gpu.split(",")`: as many parts as GPUs
            if (
                qualified & {"builtins.len", "builtins.type", "builtins.isinstance"} and node.args
                and m.matches(node.args[0].value, m.Name() | m.Attribute())
                and DEVICE_LIST.search(code_of(node.args[0].value).rsplit(".", 1)[-1])
            ):  # fmt: skip
                # `len(arg.device) > 1`, `len(device_ids)`: how many devices it was given; `type(arg.device) is list`:
                # whether it was given several.
                return True
            if qualified & {"torch.device", "builtins.len", "builtins.int", "builtins.bool", "builtins.list", "builtins.range"}:
                return _combine(*(self._gpu(arg.value, depth) for arg in node.args)) if node.args else None
            return None
        if isinstance(node, cst.Attribute) and node.attr.value == "type":
            return self._gpu(node.value, depth)  # device.type == "cuda"
        if isinstance(node, cst.Subscript) and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
            key = node.slice[0].slice.value
            if isinstance(key, cst.SimpleString):
                if isinstance(key.evaluated_value, str) and GPU_WORDS.search(key.evaluated_value):
                    return True  # `config["parallel"]`, `opt["use_gpu"]`: a key that says what it switches
                stored = self._stored(code_of(node.value), key.evaluated_value)
                return _combine(*(self._gpu(v, depth + 1) for v in stored)) if stored else None
        if isinstance(node, (cst.Name, cst.Attribute)):
            spelled = code_of(node)
            if GPU_WORDS.search(spelled.rsplit(".", 1)[-1]) or DEVICE_LIST.search(spelled.rsplit(".", 1)[-1]):
                return True  # `args.use_gpu`, `device == TorchDevice.CUDA`: the devices the run was given
            values = self.assignments().get(spelled, [])
            if not values:
                return None
            found = _combine(*(self._gpu(value, depth + 1) for value in values))
            # A command-line option with a literal default holds whatever the user passes: not a constant.
            return None if found is False and spelled in self._options else found
        return None

    def _stored(self, mapping: str, key: object) -> list[cst.BaseExpression]:
        """What the file stores under ``mapping[key]``: each value, and True where a GPU condition guards
        the store (``if len(gpus) > 1: config["_parallel"] = True`` stores a GPU count's verdict)."""
        found: list[cst.BaseExpression] = []
        for assign in self.analysis.nodes(cst.Assign):
            for target in assign.targets:
                subscript = target.target
                if not (
                    isinstance(subscript, cst.Subscript) and code_of(subscript.value) == mapping and len(subscript.slice) == 1
                    and isinstance(subscript.slice[0].slice, cst.Index) and isinstance(subscript.slice[0].slice.value, cst.SimpleString)
                    and subscript.slice[0].slice.value.evaluated_value == key
                ):  # fmt: skip
                    continue
                tests = [a.test for a in self.analysis.ancestors(assign) if isinstance(a, cst.If)]
                found.append(assign.value if not tests else cst.BooleanOperation(tests[0], cst.And(), assign.value))
        return found

    def assignments(self) -> dict[str, list[cst.BaseExpression]]:
        """Every value assigned to each name or attribute in the file, argparse defaults included.

        The locals of dp2ddp's own helpers (``device`` in ``all_reduce_sum``) say nothing about the script's values.
        """
        if self._assignments is None:
            found: dict[str, list[cst.BaseExpression]] = {}
            for assign in self.analysis.nodes(cst.Assign):
                if inside_helper(self.analysis, assign):
                    continue
                for target in assign.targets:
                    if isinstance(target.target, (cst.Name, cst.Attribute)):
                        found.setdefault(code_of(target.target), []).append(assign.value)
            for call in self.analysis.nodes(cst.Call):
                if not m.matches(call.func, m.Attribute(attr=m.Name("add_argument"))):
                    continue
                flags = [a.value.evaluated_value for a in call.args if a.keyword is None and isinstance(a.value, cst.SimpleString)]
                dest = argument(call, 99, "dest")
                name = dest.evaluated_value if isinstance(dest, cst.SimpleString) else (flags[-1] if flags else "")
                name = str(name).lstrip("-").replace("-", "_")
                default = argument(call, 99, "default")
                for holder in ("args", "opt", "opts", "config", "cfg"):
                    found.setdefault(f"{holder}.{name}", []).append(default if default is not None else cst.Name("None"))
                    self._options.add(f"{holder}.{name}")
            self._assignments = found
        return self._assignments

    # -- after the wrap ---------------------------------------------------------------------

    def _is_model(self, node: cst.CSTNode, model_names: set[str] | None = None) -> bool:
        """Whether ``node`` is a wrapped model or part of one: ``model``, ``base.head``, ``model.module.fc``."""
        spelled = code_of(node)
        for name in model_names if model_names is not None else self.model_names:
            if spelled == name or spelled.startswith((f"{name}.", f"{name}[")):
                return True
        return False

    def _returned_models(self) -> list[Wrap]:
        """``self.model = self.build_model(cfg)`` where ``build_model`` returns the wrapped model.

        The model is then followed after that assignment too, in the caller's function.
        """
        found: list[Wrap] = []
        for wrap in self.wraps:
            function = wrap.scope
            if not isinstance(function, cst.FunctionDef) or wrap.target is None:
                continue
            returns = [r for r in self.analysis.within(function.body, cst.Return) if r.value is not None and code_of(r.value) == wrap.target]
            if not returns:
                continue
            name = function.name.value
            builder = m.Call(func=m.Name(name) | m.Attribute(value=m.Name("self"), attr=m.Name(name)))
            for site in self.analysis.nodes(cst.Call):
                assign = self.analysis.parents.get(site)
                if not self.analysis.matches(site, builder) or not m.matches(assign, m.Assign(targets=[m.AssignTarget(m.Name() | m.Attribute())])):
                    continue
                statement = self.analysis.parents[assign]  # type: ignore[index]
                scope = next(a for a in self.analysis.ancestors(site) if isinstance(a, (cst.FunctionDef, cst.Module)))
                target = code_of(assign.targets[0].target)  # type: ignore[union-attr]
                found.append(Wrap(site, statement, scope, target, None))  # type: ignore[arg-type]
        return found

    def _after(self, wrap: Wrap) -> Iterator[cst.Call]:
        anchor = wrap.statement if wrap.statement is not None else wrap.call
        # A branch around the wrap that ends by leaving (`sys.exit(0)`): what follows that `if` runs without it.
        left = [
            a for a in self.analysis.ancestors(wrap.call)
            if isinstance(a, cst.IndentedBlock) and isinstance(self.analysis.parents.get(a), cst.If) and a.body and self._leaves(a.body[-1])
        ]  # fmt: skip
        for call in self.analysis.within(wrap.scope, cst.Call):
            if self.analysis.is_after(call, anchor) and all(any(x is block for x in self.analysis.ancestors(call)) for block in left):
                yield call

    def _after_the_wrap(self, wrap: Wrap) -> None:
        for call in self._after(wrap):
            if self._exclusive(call, wrap.call):
                continue  # `if distributed: model = DDP(model) else: model.to(device)`: never after the wrap
            # A name rebound to a new model before this call no longer holds the wrapped one.
            held = {name for name in wrap.names if not self._rebound_between(wrap, name, call)}
            if self._replaces_part(call, held):
                assign = self.analysis.parents[call]
                assert isinstance(assign, cst.Assign)
                target = assign.targets[0].target
                if any(q.name.startswith("torch.nn.") and q.name.rpartition(".")[2] in PARAMETER_FREE for q in self.analysis.qualified_names(call.func)):
                    # `model.module.head = nn.Identity()`: nothing new to register, average or initialise alike; the
                    # part it replaces stays hooked in DDP and gets no gradient.
                    self.unused_parameters.setdefault(wrap.call, code_of(target))
                    self.findings.append(Hazard(target, "DDP235", (("target", code_of(target)), ("value", code_of(call)))))
                    continue
                self.blockers.append(Hazard(target, "DDP227", (("target", code_of(target)),)))
            elif any(q.name.startswith("torch.nn.init.") for q in self.analysis.qualified_names(call.func)):
                if call.args and self._is_model(call.args[0].value, held):
                    self.blockers.append(Hazard(call, "DDP211", (("call", code_of(call)),)))
            elif isinstance(call.func, cst.Attribute):
                receiver = call.func.value
                while m.matches(receiver, DEVICE_MOVE) and not self._casts(receiver):  # type: ignore[arg-type]
                    receiver = receiver.func.value  # type: ignore[attr-defined]
                if not self._is_model(receiver, held):
                    continue
                method = call.func.attr.value
                if self._casts(call):
                    self.blockers.append(Hazard(call, "DDP210", (("call", code_of(call)),)))
                elif method == "reset_parameters" or OVERWRITES.match(method) or (method == "apply" and self._initialises(call)):
                    self.blockers.append(Hazard(call, "DDP211", (("call", code_of(call)),)))
                elif method in ("to", "cuda") and call.args and not self.is_local_device(call.args[0].value):
                    self.blockers.append(Hazard(call, "DDP212", (("device", code_of(call.args[0].value)),)))


    def _frozen_after_the_wrap(self, wrap: Wrap) -> None:
        """Parameters of the wrapped model frozen after the wrap: ``for p in model.module.features.parameters():
        p.requires_grad = False``, ``model.module.head.requires_grad_(False)``, or a function of this file that
        freezes what it is handed, called with the model. DDP hooked them when it was built and waits for their
        gradients in every backward; with find_unused_parameters=True it marks them ready itself (DDP238)."""
        anchor = wrap.statement if wrap.statement is not None else wrap.call
        held = wrap.names
        if not held:
            return
        freezing = {
            f.name.value for f in self.analysis.nodes(cst.FunctionDef)
            if self.analysis.findall_in(f, FREEZES) and f.params.params
        }  # fmt: skip
        for freeze in self.analysis.findall_in(wrap.scope, FREEZES):
            if not self.analysis.is_after(freeze, anchor):
                continue
            frozen = self._switched(freeze)
            if frozen is None:
                continue
            if self._is_model(frozen, held) or self.analysis.reads(frozen) & held:
                self._frozen(wrap, freeze, code_of(frozen))
                return
        for call in self._after(wrap):
            if m.matches(call.func, m.Name()) and call.func.value in freezing:  # type: ignore[attr-defined]
                if any(self.analysis.reads(a.value) & held for a in call.args):
                    self._frozen(wrap, call, code_of(call))
                    return

    def _unfrozen_after_the_wrap(self, wrap: Wrap) -> None:
        """Parameters of the wrapped model made trainable after the wrap: ``for p in model.module.backbone.parameters():
        p.requires_grad = True``, ``model.module.head.requires_grad_()``, or a method or function that does it
        (``model.module.features.unfix(ratio)``), in this file or another module of the program, called on the
        model or on what a function of this file is handed as the model. DDP synchronises the parameters that
        required gradients when it was built; the others train apart on each process (DDP241)."""
        anchor = wrap.statement if wrap.statement is not None else wrap.call
        held = set(wrap.names) | set(self.analysis.effects.models)
        if not held:
            return
        def on_the_wrapper(node: cst.CSTNode) -> bool:
            # In the wrap's own function after it, what holds the wrapper; in another function (`train(model, ...)`),
            # a name spelled as the wrapper's, or DataParallel's `.module`, which only a wrapper has.
            if self._scope_of(node) is wrap.scope:
                return self.analysis.is_after(node, anchor) and (self._is_model(node, held) or bool(self.analysis.reads(node) & held))
            return bool(self.analysis.reads(node) & held) or bool(self.analysis.findall_in(node, m.Attribute(attr=m.Name("module"))))

        freezes = self.analysis.findall_in(self.analysis.module, FREEZES)
        # Every freeze of the file comes after the wrap, in its function: every parameter required gradients
        # when DDP was built, and unfreezing what such a freeze froze (`p.requires_grad = False` around an
        # evaluation, then `True` before the next step) gives back the parameters DDP synchronises.
        refrozen = {
            code_of(frozen) for freeze in freezes if (frozen := self._switched(freeze)) is not None
        } if all(self._scope_of(f) is wrap.scope and self.analysis.is_after(f, anchor) for f in freezes) else set()
        for unfreeze in self.analysis.findall_in(self.analysis.module, UNFREEZES):
            if self._scope_of(unfreeze) is wrap.scope and not self.analysis.is_after(unfreeze, anchor):
                continue
            unfrozen = self._switched(unfreeze)
            if unfrozen is None or code_of(unfrozen) in refrozen:
                continue
            if self._scope_of(unfreeze) is not wrap.scope and not self.analysis.findall_in(unfrozen, m.Attribute(attr=m.Name("module"))):
                continue  # a model of the script's own making, frozen and unfrozen before any wrap sees it
            if on_the_wrapper(unfrozen) or (self._scope_of(unfreeze) is wrap.scope and self.analysis.reads(unfrozen) & held):
                self.blockers.append(Hazard(unfreeze, "DDP241", (("call", code_of(unfrozen)),)))
                return
        try:
            own = unfreezing_methods(ast.parse(self.analysis.code))
        except (SyntaxError, ValueError):
            own = set()
        methods = (own | self.analysis.role.unfreezing_methods) - {"requires_grad_"}
        for call in self.analysis.nodes(cst.Call):
            if not m.matches(call.func, m.Attribute(attr=m.Name(m.MatchIfTrue(lambda name: name in methods)))):
                continue
            receiver = call.func.value  # type: ignore[attr-defined]
            if on_the_wrapper(receiver):
                self.blockers.append(Hazard(call, "DDP241", (("call", code_of(call)),)))
                return
        self._rebuilt_after_unread_code(wrap, on_the_wrapper)

    def _rebuilt_after_unread_code(self, wrap: Wrap, on_the_wrapper: Callable[[cst.CSTNode], bool]) -> None:
        """The optimizer built again from the wrapped model after a method convert cannot read ran on it
        (`if model.module.features.unfix(ratio): optimizer = build_optimizer(model.module)`, the method in a class
        imported from a folder put on sys.path): building it again is how a script trains what the method made
        trainable, and DDP would leave that training apart on each process. Unknown, and training would change:
        DDP242, unless every method called there is one of nn.Module's or one the program defines."""
        try:
            known = {f.name for f in ast.walk(ast.parse(self.analysis.code)) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
        except (SyntaxError, ValueError):
            return
        known |= MODULE_METHODS | self.analysis.role.program_functions
        optimizers = {
            c.func.value.value for c in self.analysis.nodes(cst.Call)  # type: ignore[attr-defined]
            if m.matches(c.func, m.Attribute(value=m.Name(), attr=m.Name("zero_grad") | m.Name("step")))
        } - set(wrap.names) - set(self.analysis.effects.models)  # fmt: skip
        for assign in self.analysis.nodes(cst.Assign):
            if not isinstance(assign.value, cst.Call) or not on_the_wrapper(assign.value):
                continue
            bound = {n.value for t in assign.targets for n in self.analysis.findall_in(t.target, m.Name())}
            if not bound & optimizers:
                continue
            scope = self._scope_of(assign)
            for call in self.analysis.within(scope, cst.Call):
                if not isinstance(call.func, cst.Attribute) or self._scope_of(call) is not scope or not self.analysis.is_after(assign, call):
                    continue
                receiver = call.func.value
                if call.func.attr.value not in known and _dotted(receiver) and on_the_wrapper(receiver):
                    values = (("call", code_of(call)), ("rebuild", code_of(assign).strip()))
                    self.blockers.append(Hazard(call, "DDP242", values))
                    return

    def _switched(self, switch: cst.CSTNode) -> cst.CSTNode | None:
        """What a ``requires_grad`` switch applies to: ``part`` of ``part.requires_grad_(...)``, or the parameters a
        loop around ``p.requires_grad = ...`` walks (``model.module.backbone.parameters()``); None for any other."""
        if isinstance(switch, cst.Call):
            return switch.func.value  # type: ignore[attr-defined]
        loop = next((a for a in self.analysis.ancestors(switch) if isinstance(a, cst.For) and self.analysis.findall_in(a.iter, _OVER_PARAMETERS)), None)
        return loop.iter if loop is not None else None

    def _scope_of(self, node: cst.CSTNode) -> cst.CSTNode:
        return next((a for a in self.analysis.ancestors(node) if isinstance(a, (cst.FunctionDef, cst.Module))), self.analysis.module)

    def _frozen(self, wrap: Wrap, at: cst.CSTNode, frozen: str) -> None:
        self.unused_parameters.setdefault(wrap.call, frozen)
        self.findings.append(Hazard(at, "DDP238", (("frozen", frozen),)))

    def _name_the_factory(self, wrap: Wrap, first: int) -> None:
        """Blockers after an imported wrap name the factory that wraps: the change belongs there."""
        role = self.analysis.role
        site = next((role.wrap_site(q.name) for q in self.analysis.qualified_names(wrap.call.func) if role.wrap_site(q.name)), None)
        for index in range(first, len(self.blockers)):
            hazard = self.blockers[index]
            change = code_of(self.analysis.parents[self.analysis.parents[hazard.node]]) if hazard.code == "DDP227" else code_of(hazard.node)
            values = (("change", change.strip()), ("factory", code_of(wrap.call.func)), ("site", str(site)))
            self.blockers[index] = Hazard(hazard.node, "DDP228", values)

    def _replaces_part(self, call: cst.Call, held: set[str]) -> bool:
        """``model.module.head = nn.Linear(...)``: a new sub-module put into the wrapped model."""
        parent = self.analysis.parents.get(call)
        if not isinstance(parent, cst.Assign) or parent.value is not call or not self._builds_module(call):
            return False
        return any(
            isinstance(t.target, cst.Attribute) and self._is_model(t.target, held) for t in parent.targets
        )

    def _move_after_mutations(self, wrap: Wrap, hazards: list[Hazard]) -> None:
        """Move ``model = DataParallel(m)`` after the casts, initialisations and moves that follow it.

        Safe when the wrap and each mutation sit in one block, and nothing in
        between uses the wrapper other than to mutate it or to build an
        optimizer over its parameters, which are the wrapped model's own.
        Those uses then name the wrapped model. Otherwise the hazards stay.
        """
        if not hazards or wrap.statement is None or wrap.target is None:
            return
        # A wrap that leaves its GPU conditions goes after the outermost `if` first: from there, on.
        leaves = wrap.conditions[-1] if wrap.conditions else wrap.statement
        if wrap.conditions and wrap.statement not in self.hoisted.get(leaves, []):  # type: ignore[arg-type]
            return
        module = argument(wrap.call, 0, "module")
        value = wrap.statement.body[0].value if len(wrap.statement.body) == 1 else None  # type: ignore[attr-defined]
        if module is None or not (value is wrap.call or (m.matches(value, DEVICE_MOVE) and value.func.value is wrap.call)):  # type: ignore[union-attr]
            return  # `model = DataParallel(net)` or `model = DataParallel(net).cuda()` alone on its line
        # `model = DataParallel(Net())` has no name for the module: it keeps the wrap's, and the
        # wrap splits in two, `model = Net()` here and `model = DataParallel(model)` later.
        inner = wrap.inner if wrap.inner is not None else wrap.target
        if wrap.target != inner and wrap.target in self.analysis.reads(module):
            return
        block = self.analysis.parents.get(leaves)
        body = list(block.body) if isinstance(block, (cst.IndentedBlock, cst.Module)) else []  # type: ignore[union-attr]
        start = body.index(leaves) if leaves in body else -1
        if start < 0:
            return
        last = start
        for hazard in hazards:
            holder = next((s for s in body[start + 1 :] if any(a is s for a in self.analysis.ancestors(hazard.node))), None)
            if holder is None:
                return
            last = max(last, body.index(holder))
        returned = _returned_value(body[last])
        if returned is not None and not code_of(returned).startswith(f"{wrap.target}."):
            return  # `return model.to(device), optimizer`: no single name to wrap before returning
        unwrapped: dict[cst.CSTNode, str] = {}
        for statement in body[start + 1 : last + 1]:
            for use in self.analysis.within(statement, cst.Name):
                if use.value != wrap.target.split(".")[0]:
                    continue
                chain = self._outermost_chain(use)
                spelled = code_of(chain)
                if not (spelled == wrap.target or spelled.startswith(f"{wrap.target}.")):
                    continue
                if not self._mutates_or_lists_parameters(chain):
                    return
                if spelled.endswith(".load_state_dict") and inner != wrap.target:
                    # A DataParallel checkpoint's `module.` keys fit the wrapper; under the wrap's
                    # name, secure_checkpoints loads them either way, under the module's they would not.
                    return
                rest = spelled[len(wrap.target) :].removeprefix(".module")
                unwrapped[chain] = inner + rest
        self.moved[wrap.statement] = (leaves, body[last])
        if returned is not None:
            self.returned.add(wrap.statement)
        if wrap.inner is None:
            self.split.add(wrap.statement)
        self.unwrapped.update({node: name for node, name in unwrapped.items() if name != code_of(node)})
        for hazard in hazards:
            self.blockers.remove(hazard)
            self.findings.append(Hazard(hazard.node, "DDP219", (("call", code_of(hazard.node)),)))

    def _outermost_chain(self, name: cst.Name, through_calls: bool = False) -> cst.BaseExpression:
        """``model.module.head`` for the ``model`` in ``model.module.head.apply(init)``;
        through calls, the whole value read: ``loss.item()`` for the ``loss`` in it."""
        node: cst.BaseExpression = name
        while True:
            parent = self.analysis.parents.get(node)
            if isinstance(parent, cst.Attribute) and parent.value is node:
                node = parent
            elif through_calls and isinstance(parent, cst.Call) and parent.func is node:
                node = parent
            else:
                return node

    def _mutates_or_lists_parameters(self, chain: cst.BaseExpression) -> bool:
        """``model.half()``, ``model.module.fc.apply(init)``, ``nn.init.zeros_(model.fc.bias)``,
        ``model = model.to(device)``, or ``model.parameters()`` given to an optimizer."""
        parent = self.analysis.parents.get(chain)
        if isinstance(parent, cst.AssignTarget):
            assign = self.analysis.parents.get(parent)
            value = assign.value if isinstance(assign, cst.Assign) else None
            if isinstance(chain, cst.Attribute) and value is not None and self._builds_module(value):
                return True  # `model.module.head = nn.Linear(...)`: a new part, before the wrap once it moves
            return isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and code_of(value.func.value) == code_of(chain)
        if isinstance(parent, cst.Arg):
            call = self.analysis.parents.get(parent)
            return isinstance(call, cst.Call) and any(q.name.startswith("torch.nn.init.") for q in self.analysis.qualified_names(call.func))
        if not isinstance(parent, cst.Call) or parent.func is not chain or not isinstance(chain, cst.Attribute):
            return False
        method = chain.attr.value
        if method in ("parameters", "named_parameters"):
            return any(
                isinstance(a, cst.Call) and any(q.name.startswith("torch.optim.") for q in self.analysis.qualified_names(a.func))
                for a in self.analysis.ancestors(parent)
            )
        return (
            self._casts(parent)
            or method in ("apply", "reset_parameters", "cuda", "to", "load_state_dict")
            or bool(OVERWRITES.match(method))
        )

    def _rebound_between(self, wrap: Wrap, name: str, call: cst.Call) -> bool:
        """Whether ``name = <a new value>`` runs after the wrap and before ``call`` on every path to it.

        ``net = DataParallel(a)`` to evaluate, then ``net = Model(); net.apply(init)``:
        the re-initialisation is of the new model, before its own wrap, not after a wrap.
        The binding must be in a block that holds the call, before it, so it always runs first.
        """
        anchor = wrap.statement if wrap.statement is not None else wrap.call
        fresh = m.Assign(targets=[m.AssignTarget(m.Name() | m.Attribute())])
        for line in self.analysis.within(wrap.scope, cst.SimpleStatementLine):
            if len(line.body) != 1 or not m.matches(line.body[0], fresh) or line is anchor:
                continue
            assign = line.body[0]
            assert isinstance(assign, cst.Assign)
            if code_of(assign.targets[0].target) != name:
                continue
            block = self.analysis.parents.get(line)
            if name in self.analysis.reads(assign.value) and not self._unwrapped_to_wrap_again(assign, name, block, call):
                continue
            if (
                self.analysis.is_after(line, anchor)
                and self.analysis.is_after(call, line)
                and any(ancestor is block for ancestor in self.analysis.ancestors(call))
            ):
                return True
        return False

    def _unwrapped_to_wrap_again(self, assign: cst.Assign, name: str, block: cst.CSTNode | None, call: cst.Call) -> bool:
        """``model = model.cpu().module``, then, in the same block after ``call``, ``model`` wrapped again: what
        ``call`` changes is the inner model before its new wrap; the old wrapper is dropped unused."""
        value = _unmoved(assign.value)
        if not (isinstance(value, cst.Attribute) and value.attr.value == "module" and code_of(_unmoved(value.value)) == name):
            return False
        return any(
            other.target == name and other.statement is not None and self.analysis.parents.get(other.statement) is block
            and self.analysis.is_after(other.statement, call)
            for other in self.wraps
        )  # fmt: skip

    def _casts(self, call: cst.Call) -> bool:
        if not isinstance(call.func, cst.Attribute):
            return False
        method = call.func.attr.value
        if method in CASTS and not call.args:
            return True
        if method in ("to", "type"):
            return any(
                (arg.keyword is not None and arg.keyword.value == "dtype") or DTYPE.match(code_of(arg.value))
                for arg in call.args
            )
        return False

    def _initialises(self, call: cst.Call) -> bool:
        """``model.apply(fn)`` writes weights unless ``fn`` is a function of this file that never does."""
        function = argument(call, 0, "fn")
        if not isinstance(function, cst.Name):
            return True
        definitions = [f for f in self.analysis.nodes(cst.FunctionDef) if f.name.value == function.value]
        if len(definitions) != 1:
            return True
        body = definitions[0].body
        writes = any(
            OVERWRITES.match(c.func.attr.value) or c.func.attr.value == "reset_parameters"
            for c in self.analysis.within(body, cst.Call)
            if isinstance(c.func, cst.Attribute)
        )
        initialises = any(
            any(q.name.startswith("torch.nn.init.") for q in self.analysis.qualified_names(c.func))
            for c in self.analysis.within(body, cst.Call)
        )
        assigns_data = any(m.matches(t.target, m.Attribute(attr=m.Name("data") | m.Name("weight") | m.Name("bias"))) for t in self.analysis.within(body, cst.AssignTarget))
        return writes or initialises or assigns_data

    @cached_property
    def gathering_devices(self) -> dict[cst.BaseExpression, str]:
        """Each device this file names as the first of a DataParallel wrap's ``device_ids``, the GPU it gathers
        on, and how: ``"string"`` for a device string built from it (``f"cuda:{gpus[0]}"``,
        ``"cuda:{}".format(gpus[0])``, ``"cuda:%d" % gpus[0]``, ``"cuda:" + str(gpus[0])``), ``"index"`` for the
        index itself where a device goes (``.cuda(gpus[0])``, ``torch.device("cuda", gpus[0])``, ``device=gpus[0]``).

        Under DDP every process would use that one GPU: convert names this process's own instead (DDP246).
        """
        if not self.converting:
            return {}
        lists: set[str] = set()
        for wrap in self.wraps:
            ids = argument(wrap.call, 1, "device_ids")
            if isinstance(ids, (cst.Name, cst.Attribute)):
                lists.add(code_of(ids))
                lists |= self._handed_as(ids)  # `train(args.gpus)` for `def train(device_ids)`
        if not lists:
            return {}

        def first(node: cst.BaseExpression) -> bool:
            return m.matches(node, m.Subscript(slice=[m.SubscriptElement(m.Index(m.Integer("0")))])) and code_of(node.value) in lists  # type: ignore[attr-defined]

        def text(node: cst.CSTNode, *values: str) -> bool:
            return isinstance(node, cst.SimpleString) and node.evaluated_value in values

        found: dict[cst.BaseExpression, str] = {}
        for string in self.analysis.nodes(cst.FormattedString):
            parts = string.parts
            if (len(parts) == 2 and m.matches(parts[0], m.FormattedStringText("cuda:"))
                    and isinstance(parts[1], cst.FormattedStringExpression) and first(parts[1].expression)):
                found[string] = "string"
        for operation in self.analysis.nodes(cst.BinaryOperation):
            right = operation.right.elements[0].value if isinstance(operation.right, cst.Tuple) and len(operation.right.elements) == 1 else operation.right
            if isinstance(operation.operator, cst.Modulo) and text(operation.left, "cuda:%d", "cuda:%s", "cuda:%i") and first(right):
                found[operation] = "string"
            elif (isinstance(operation.operator, cst.Add) and text(operation.left, "cuda:")
                    and m.matches(right, m.Call(func=m.Name("str"), args=[m.Arg(keyword=None)])) and first(right.args[0].value)):  # type: ignore[attr-defined]
                found[operation] = "string"
        for call in self.analysis.nodes(cst.Call):
            if (m.matches(call.func, m.Attribute(attr=m.Name("format"))) and text(call.func.value, "cuda:{}", "cuda:{0}")  # type: ignore[attr-defined]
                    and len(call.args) == 1 and first(call.args[0].value)):
                found[call] = "string"
            for arg in call.args:
                device_position = (
                    (arg.keyword is None and m.matches(call.func, m.Attribute(attr=m.Name("cuda") | m.Name("to"))))
                    or (arg.keyword is not None and arg.keyword.value == "device")
                    or self.analysis.matches(call, call_to({"torch.device", "torch.cuda.set_device", "torch.cuda.device"}))
                )
                if device_position and first(arg.value):
                    found[arg.value] = "index"
        return found

    def _handed_as(self, name: cst.BaseExpression) -> set[str]:
        """What the calls in this file pass for the parameter ``name`` is, where it is one: plain names and attributes."""
        scope = self.analysis.scopes.get(name)
        if not isinstance(name, cst.Name) or scope is None or name.value not in scope:
            return set()
        handed: set[str] = set()
        for binding in scope[name.value]:
            if not isinstance(binding, Assignment) or not isinstance(binding.node, cst.Param):
                continue
            function = next((a for a in self.analysis.ancestors(binding.node) if isinstance(a, cst.FunctionDef)), None)
            if function is None:
                continue
            for reference in self.analysis.references(function.name):
                call = self.analysis.parents.get(reference)
                if isinstance(call, cst.Call) and call.func is reference:
                    for arg in call.args:
                        if not arg.star and parameter_for(function, call, arg) == name.value and isinstance(arg.value, (cst.Name, cst.Attribute)):
                            handed.add(code_of(arg.value))
        return handed

    def is_local_device(self, device: cst.BaseExpression, depth: int = 0) -> bool:
        """A device every process resolves to its own: "cuda", "cpu", torch.device of those, .cuda(),
        or what a function of this file returns when every value it returns is one of those."""
        if depth > 4:
            return False
        if device in self.gathering_devices:
            return True  # DataParallel's first GPU, which becomes this process's own (DDP246)
        if isinstance(device, cst.SimpleString):
            return device.evaluated_value in ("cuda", "cpu", "cuda:0")  # cuda:0 becomes "cuda" (DDP205)
        if isinstance(device, cst.Integer):
            # .cuda(0) becomes .cuda() (DDP205); a 0 held in a variable (`--gpu` defaults to 0) stays 0.
            return depth == 0 and device.value == "0"
        if isinstance(device, cst.IfExp):
            return self.is_local_device(device.body, depth) and self.is_local_device(device.orelse, depth)
        if isinstance(device, cst.Call):
            if m.matches(device.func, m.Name(names.LOCAL_DEVICE_HELPER)):
                return True
            qualified = {q.name for q in self.analysis.qualified_names(device.func)}
            if "torch.cuda.current_device" in qualified:
                return True
            if "torch.device" in qualified and len(device.args) == 1:
                return self.is_local_device(device.args[0].value, depth)
            if "torch.device" in qualified and len(device.args) == 2 and device.args[1].value in self.gathering_devices:
                return self.is_local_device(device.args[0].value, depth)  # torch.device("cuda", gpus[0])
            # `device = get_device(args.cuda)`, where `get_device` returns torch.device("cuda" if ... else "cpu").
            returned = self._returned_values(device.func)
            return bool(returned) and all(self.is_local_device(value, depth + 1) for value in returned)
        if isinstance(device, cst.Name) and self._bound_to(device, self.local_gpu_parameters):
            return True
        if {q.name for q in self.analysis.qualified_names(device)} & self.analysis.role.local_devices:
            return True  # `from config import device`, bound there to torch.device("cuda" if ... else "cpu")
        if isinstance(device, (cst.Name, cst.Attribute)):
            spelled = code_of(device)
            if spelled in self._resolving_devices:
                # `device = get_device(cuda)` where get_device returns its own `device`: the name's other
                # values decide; this one adds nothing new.
                return True
            values = self.assignments().get(spelled, [])
            self._resolving_devices.add(spelled)
            try:
                return bool(values) and all(self.is_local_device(v, depth + 1) for v in values)
            finally:
                self._resolving_devices.discard(spelled)
        return False

    def _returned_values(self, func: cst.BaseExpression) -> list[cst.BaseExpression]:
        """What the one function of this file that ``func`` (``f``, ``self.f``) calls returns; [] when unknown.

        Every ``return`` must give a value: a bare one, or a function named twice, says nothing.
        """
        if isinstance(func, cst.Attribute) and m.matches(func.value, m.Name("self")):
            name = func.attr.value
        elif isinstance(func, cst.Name):
            name = func.value
        else:
            return []
        definitions = [f for f in self.analysis.nodes(cst.FunctionDef) if f.name.value == name]
        if len(definitions) != 1:
            return []
        function = definitions[0]
        returns = [
            r for r in self.analysis.within(function.body, cst.Return)
            if next(a for a in self.analysis.ancestors(r) if isinstance(a, cst.FunctionDef)) is function
        ]  # fmt: skip
        if not returns or any(r.value is None for r in returns):
            return []
        return [r.value for r in returns]  # type: ignore[misc]

    # -- the model's parameters ------------------------------------------------------------

    def _find_unused_parameters(self, wrap: Wrap) -> None:
        """A wrapped model whose forward may leave a sub-module without a gradient (see :mod:`.parameters`).

        The model's class is read where convert can follow the wrapped value to it: a class of this
        file, or of a module this one imports. Where it cannot (``models.create(args.arch)``, a name
        bound twice), any model class of this file or of the modules it reaches that may skip one
        is taken to be the one wrapped: the fact that every parameter gets a gradient is not known.
        """
        wrapped = argument(wrap.call, 0, "module")
        if wrapped is None:
            return
        built = without_device_move(wrapped)
        if isinstance(built, cst.Name):
            # `model = TSN(...)`, then `model = DataParallel(model)`: what the name held before the wrap.
            values = [v for v in self.assignments().get(built.value, []) if not m.findall(v, m.MatchIfTrue(lambda n: n is wrap.call))]
            built = without_device_move(values[0]) if len(values) == 1 else built
        if isinstance(built, cst.Call) and self._freezes_in_train(built):
            # Parameters frozen after DDP is built get no gradient, and DDP waits for every one it hooked.
            self.unused_parameters.setdefault(wrap.call, code_of(built.func))
            self.findings.append(Hazard(wrap.call, "DDP231", (("model", code_of(built.func)),)))
            return
        own = self._skipping_here
        elsewhere = {qualified: (submodule, site) for qualified, submodule, site in self.analysis.role.skipping_classes}
        if isinstance(built, cst.Call):
            qualified = {q.name for q in self.analysis.qualified_names(built.func)}
            spelled = code_of(built.func)
            if isinstance(built.func, cst.Name) and built.func.value in own:
                reason = own[built.func.value]
            elif skipped := [elsewhere[q][0] for q in qualified if q in elsewhere]:
                reason = skipped[0]
            elif _from_library(qualified) or spelled.rpartition(".")[2][:1].isupper():
                return  # a library model, or a class of the project that reaches every parameter it builds
            else:
                reason = None
            if reason is not None:
                self.unused_parameters.setdefault(wrap.call, reason)
                self.findings.append(Hazard(self._built_at(spelled, reason) or wrap.call, "DDP215", (("model", spelled), ("module", reason))))
                return
        source = f"{code_of(built.func)}(...)" if isinstance(built, cst.Call) else code_of(built)
        candidates = [(name, submodule, "this file") for name, submodule in own.items()]
        candidates += [(qualified, submodule, str(site)) for qualified, (submodule, site) in elsewhere.items()]
        if candidates:
            name, submodule, where = candidates[0]
            self.unused_parameters.setdefault(wrap.call, submodule)
            details = (("source", source), ("model", name.rpartition(".")[2]), ("module", submodule), ("where", where))
            self.findings.append(Hazard(wrap.call, "DDP232", details))
        elif isinstance(built, cst.Call) and self._unread(built):
            self.unused_parameters.setdefault(wrap.call, source)
            self.findings.append(Hazard(wrap.call, "DDP233", (("source", source),)))

    def _unread(self, built: cst.Call) -> bool:
        """Whether ``built`` calls code convert does not read: not this file's, not a module of the project's,
        not torch's, torchvision's or timm's (``torchvision.models.__dict__[arch]()`` is theirs)."""
        func = built.func
        while True:
            qualified = {q.name for q in self.analysis.qualified_names(func)}
            if _from_library(qualified) or qualified & self.analysis.role.project_calls:
                return False
            if not isinstance(func, cst.Subscript | cst.Attribute | cst.Call):
                break
            func = func.value if isinstance(func, cst.Subscript | cst.Attribute) else func.func
        if not isinstance(func, cst.Name) or any(q.startswith("builtins.") for q in qualified):
            return False  # `getattr(self, "net" + name)`: what it finds is this file's
        defined = {d.name.value for d in self.analysis.nodes(cst.FunctionDef)} | {c.name.value for c in self.analysis.nodes(cst.ClassDef)}
        return func.value not in defined

    def _built_at(self, cls: str, submodule: str) -> cst.CSTNode | None:
        """Where this file's class ``cls`` builds ``submodule`` (``self.pooler``), to report it there."""
        attribute = submodule.split()[0].removeprefix("self.")
        for definition in self.analysis.nodes(cst.ClassDef):
            if definition.name.value != cls:
                continue
            for target in self.analysis.within(definition, cst.AssignTarget):
                if m.matches(target.target, m.Attribute(value=m.Name("self"), attr=m.Name(attribute))):
                    return target.target
        return None

    @cached_property
    def _skipping_here(self) -> dict[str, str]:
        """This file's model classes that may leave a sub-module without a gradient, with which."""
        try:
            tree = ast.parse(self.analysis.module.code)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return {}
        classes = [c for c in ast.walk(tree) if isinstance(c, ast.ClassDef)]
        known = {q.rpartition(".")[2]: submodule for q, submodule, _ in self.analysis.role.skipping_classes}
        return skipping_classes(classes, known)

    def _freezes_in_train(self, built: cst.Call) -> bool:
        """Whether ``built`` makes a model whose class's ``train()`` freezes parameters: this file's class,
        read here, or another project module's, as the project read it."""
        qualified = {q.name for q in self.analysis.qualified_names(built.func)}
        if qualified & self.analysis.role.freezing_classes:
            return True
        if not isinstance(built.func, cst.Name):
            return False
        own = [c for c in self.analysis.nodes(cst.ClassDef) if c.name.value == built.func.value]
        if len(own) != 1 or not isinstance(own[0].body, cst.IndentedBlock):
            return False
        train = next((s for s in own[0].body.body if isinstance(s, cst.FunctionDef) and s.name.value == "train"), None)
        return train is not None and bool(m.findall(train, FREEZES))

    def _optimizers(self) -> None:
        """An optimizer over a module no DDP wrap holds, or over tensors a model returns but does not register as
        parameters (DDP250): their gradients are never averaged."""
        try:
            own = {method: f"line {line}" for method, line in unregistered_tensor_methods(ast.parse(self.analysis.code)).items()}
        except (SyntaxError, ValueError):
            own = {}
        unregistered = {**{method: str(site) for method, site in self.analysis.role.unregistered_tensors}, **own}
        for call in self.analysis.nodes(cst.Call):
            qualified = {q.name for q in self.analysis.qualified_names(call.func)}
            if not any(q.startswith("torch.optim.") and q.rsplit(".", 1)[-1][:1].isupper() and "lr_scheduler" not in q for q in qualified):
                continue
            stepped = argument(call, 0, "params")
            if (
                isinstance(stepped, cst.Call) and isinstance(stepped.func, cst.Attribute)
                and stepped.func.attr.value in unregistered and not stepped.args
                and self._is_model(stepped.func.value)
            ):
                site = unregistered[stepped.func.attr.value]
                self.blockers.append(Hazard(call, "DDP250", (("call", code_of(stepped)), ("site", site))))
            for parameters in self.analysis.within(call, cst.Call):
                if not m.matches(parameters, m.Call(func=m.Attribute(attr=m.Name("parameters") | m.Name("named_parameters")))):
                    continue
                owner = parameters.func.value  # type: ignore[attr-defined]
                if self._is_model(owner):
                    continue
                root = code_of(owner).split(".")[0] if not code_of(owner).startswith("self.") else ".".join(code_of(owner).split(".")[:2])
                built = self.assignments().get(root, [])
                if built and all(self._builds_module(without_device_move(v)) for v in built) and not self._held_by_a_wrap(root):
                    self.blockers.append(Hazard(owner, "DDP223", (("module", code_of(owner)),)))

    def _held_by_a_wrap(self, module: str) -> bool:
        """Whether ``module`` is handed to the building of something a wrap holds: ``trainer =
        DiffusionTrainer(net_model, ...)``, then ``trainer = DataParallel(trainer)``; DDP of the trainer registers
        ``net_model``'s parameters as its own, and averages their gradients."""
        wrapped = {name for wrap in self.wraps for name in wrap.names}
        for name, values in self.assignments().items():
            if name not in wrapped:
                continue
            for value in values:
                value = without_device_move(value)
                if isinstance(value, cst.Call) and any(code_of(arg.value) == module for arg in value.args):
                    return True
        return False

    def _builds_module(self, value: cst.BaseExpression) -> bool:
        """A call that builds a fresh module: a torch.nn or torchvision model class, or a model class of this file or
        of another module of the project; or one of a dict of them chosen by key (``{"MCP": MarginCosineProduct(...),
        "L": nn.Linear(...)}[args.classifier_type]``)."""
        if isinstance(value, cst.Subscript) and isinstance(value.value, cst.Dict) and value.value.elements:
            return all(
                isinstance(e, cst.DictElement) and self._builds_module(without_device_move(e.value)) for e in value.value.elements
            )
        if not isinstance(value, cst.Call):
            return False
        qualified = {q.name for q in self.analysis.qualified_names(value.func)}
        if any(q.startswith(("torch.nn.", "torchvision.models.")) and "functional" not in q for q in qualified):
            return True
        if qualified & self.analysis.role.model_classes or code_of(value.func) in self.analysis.role.model_classes:
            return True
        classes = {c.name.value for c in self.analysis.nodes(cst.ClassDef)}
        return isinstance(value.func, cst.Name) and value.func.value in classes

    # -- the training step -----------------------------------------------------------------

    def _training_steps(self) -> None:
        backwards = [c for c in self.analysis.nodes(cst.Call) if m.matches(c, _BACKWARD)]
        by_loop: dict[cst.CSTNode, list[cst.Call]] = {}
        for backward in backwards:
            loop = self._loop(backward)
            if loop is None:
                continue
            by_loop.setdefault(loop, []).append(backward)
            self._skippable(backward, loop)
        for backward in backwards:
            self._gated_step(backward)
        for loop, found in by_loop.items():
            forwards = [
                c for c in self.analysis.within(loop, cst.Call)
                if code_of(c.func) in self.model_names or code_of(c.func).removeprefix("self.") in self.model_names
            ]  # fmt: skip
            worst = self._worst_pass(loop, found, forwards)
            if worst is not None:
                backwards, runs = worst
                values = (("backwards", _count_of(len(backwards), "backward")), ("forwards", _count_of(runs, "forward")))
                self.blockers.append(Hazard(backwards[runs], "DDP221", values))
        dead = self.analysis.role.unreferenced_functions
        for call in self.analysis.nodes(cst.Call):
            if dead and any(isinstance(a, cst.FunctionDef) and a.name.value in dead for a in self.analysis.ancestors(call)):
                continue  # a function no module of the program names: it never runs here
            if self.analysis.matches(call, call_to({"torch.autograd.grad"})):
                create_graph = argument(call, 99, "create_graph")
                if create_graph is not None and not m.matches(create_graph, m.Name("False")):
                    how = self._unsound_penalty(call)
                    if how is not None:
                        self.blockers.append(Hazard(call, "DDP222", (("how", how),)))
            elif m.matches(call, _BACKWARD):
                create_graph = argument(call, 99, "create_graph")
                if create_graph is not None and not m.matches(create_graph, m.Name("False")) and self._loop(call) is not None:
                    self.blockers.append(Hazard(call, "DDP222", (("how", BACKWARD_CREATE_GRAPH),)))

    def _worst_pass(
        self, loop: cst.For | cst.While, backwards: list[cst.Call], forwards: list[cst.Call]
    ) -> tuple[list[cst.Call], int] | None:
        """The one pass through ``loop`` that runs the most backward passes beyond its forwards, if any does.

        A pass takes one branch of every ``if``, so backward passes in the two branches of
        one ``if`` never run together; counting every backward that can run with a given
        one would add up both branches.
        """
        paths = self._passes(loop, [(b, True) for b in backwards] + [(f, False) for f in forwards])
        blocked = [
            (sorted(ran_backwards, key=lambda node: self.analysis.index[node]), runs)
            for ran_backwards, runs in paths
            if runs and len(ran_backwards) > runs
        ]
        # The pass with the most backward passes too many; of equals, the one that comes first in the file.
        return min(blocked, key=lambda p: (p[1] - len(p[0]), [self.analysis.index[b] for b in p[0]]), default=None)

    def _passes(
        self, loop: cst.CSTNode, calls: list[tuple[cst.Call, bool]]
    ) -> set[tuple[frozenset[cst.Call], int]]:
        """Every (backward calls, forward count) one pass through ``loop`` can run, by the branches it takes."""
        keyed = [(call, is_backward, self._branches(call, loop)) for call, is_backward in calls]
        return _combine_passes(keyed, 0)

    def _branches(self, node: cst.CSTNode, loop: cst.CSTNode) -> tuple[tuple[cst.If, int], ...]:
        """The ``if`` branches between ``loop`` and ``node``, outermost first: (the ``if``, 0 for its body, 1 for else)."""
        found: list[tuple[cst.If, int]] = []
        child: cst.CSTNode = node
        for ancestor in self.analysis.ancestors(node):
            if ancestor is loop:
                break
            if isinstance(ancestor, cst.If) and child is not ancestor.test:
                found.append((ancestor, 0 if child is ancestor.body else 1))
            child = ancestor
        return tuple(reversed(found))

    # -- double backward -------------------------------------------------------------------

    def _unsound_penalty(self, grad: cst.Call) -> str | None:
        """Why ``torch.autograd.grad(..., create_graph=True)`` would train differently under DDP; ``None`` when it would not.

        DDP averages gradients when they reach the parameters in a ``backward()``.
        ``autograd.grad`` with respect to the inputs returns per-process gradients that
        reach no parameter, so a penalty on them is sound when it is back-propagated in
        the same ``backward()`` as a term of an ordinary forward, which gives every
        parameter its gradient: then the penalty's part is averaged with the rest.
        Back-propagated alone, parameters the penalty does not reach (a last bias) get
        no gradient, the reduction never completes, and the penalty's gradients stay
        per-process. With respect to the parameters, the gradient is the shard's, not
        the whole batch's that DataParallel computed.
        """
        inputs = argument(grad, 1, "inputs")
        if inputs is None or self._holds_parameters(inputs, grad):
            return PENALTY_ON_PARAMETERS
        sites = self._penalty_sites(grad)
        if sites is None:
            return PENALTY_NOT_FOLLOWED
        found = False
        for site in sites:
            scope = self._scope(site)
            here = False
            for backward in self.analysis.within(scope, cst.Call):
                if not m.matches(backward, _BACKWARD):
                    continue
                reached = self._sources(backward.func.value, backward, scope, set(sites), 0)  # type: ignore[attr-defined]
                if site not in reached:
                    continue
                here = True
                if not any(self._is_forward(call) for call in reached):
                    return PENALTY_ALONE
            if not here and isinstance(scope, cst.FunctionDef):
                how = self._returned_penalty(site, scope)
                if how:
                    return how
                here = how is not None
            found = found or here
        return None if found else PENALTY_NOT_FOLLOWED

    def _returned_penalty(self, site: cst.Call, function: cst.FunctionDef) -> str | None:
        """Whether the loss ``function`` returns, holding the penalty, reaches a ``backward()`` at a call of it
        (``d_loss, parts = compute_d_loss(...)``, then ``d_loss.backward()``): "" when it does with a forward of
        the model in the same backward, PENALTY_ALONE when without one, None when convert cannot follow it there."""
        returns = [ret.value for ret in self.analysis.within(function, cst.Return) if ret.value is not None and self._scope(ret) is function]

        def returned(position: int | None) -> list[set[cst.Call]]:
            """The calls each return computes the value from; of a tuple, its ``position``-th element's alone."""
            values = [
                v.elements[position].value if position is not None and isinstance(v, cst.Tuple) and position < len(v.elements) else v
                for v in returns
            ]
            return [reached for value in values if site in (reached := self._sources(value, value, function, {site}, 0))]

        if not returned(None):
            return None
        name = function.name.value
        spelled = m.Call(func=m.Name(name) | m.Attribute(value=m.Name("self"), attr=m.Name(name)))
        how = None
        for call in (c for c in self.analysis.nodes(cst.Call) if m.matches(c, spelled)):
            scope = self._scope(call)
            for backward in self.analysis.within(scope, cst.Call):
                if not m.matches(backward, _BACKWARD):
                    continue
                receiver = backward.func.value  # type: ignore[attr-defined]
                reached = self._sources(receiver, backward, scope, {call}, 0)
                if call not in reached:
                    continue
                # `d_loss, parts = compute_d_loss(...)`, then `d_loss.backward()`: only the first element is trained.
                assign = self.analysis.parents.get(call)
                position = None
                if isinstance(receiver, cst.Name) and m.matches(assign, m.Assign(targets=[m.AssignTarget(m.Tuple())])):
                    spelled_targets = [code_of(e.value) for e in assign.targets[0].target.elements]  # type: ignore[union-attr]
                    position = spelled_targets.index(receiver.value) if receiver.value in spelled_targets else None
                sources = returned(position)
                if not sources:
                    continue  # the element trained holds no penalty
                inside = any(self._is_forward(c) for reached_inside in sources for c in reached_inside)
                if not inside and not any(self._is_forward(c) for c in reached):
                    return PENALTY_ALONE
                how = ""
        return how

    def _holds_parameters(self, node: cst.BaseExpression, before: cst.CSTNode, depth: int = 0) -> bool:
        """``model.parameters()``, or a name bound to an expression that calls it."""
        if any(m.matches(c.func, m.Attribute(attr=m.Name("parameters") | m.Name("named_parameters"))) for c in self.analysis.within(node, cst.Call)):
            return True
        if isinstance(node, (cst.Call, cst.Attribute)) and m.matches(node, m.Call(func=m.Attribute(attr=m.Name("parameters")))):
            return True
        if depth > 4:
            return False
        for name in [node] if isinstance(node, cst.Name) else self.analysis.within(node, cst.Name):
            for value in self._values_before(name.value, before, self._scope(before)):
                if self._holds_parameters(value, before, depth + 1):
                    return True
        return False

    def _penalty_sites(self, grad: cst.Call) -> list[cst.Call] | None:
        """Where the penalty enters a training step: the call itself in a loop, or the calls of the function that holds it."""
        if self._loop(grad) is not None:
            return [grad]
        function = next((a for a in self.analysis.ancestors(grad) if isinstance(a, cst.FunctionDef)), None)
        if function is None:
            return None
        name = function.name.value
        spelled = m.Call(func=m.Name(name) | m.Attribute(value=m.Name("self"), attr=m.Name(name)))
        calls = [c for c in self.analysis.nodes(cst.Call) if m.matches(c, spelled)]
        return calls or None

    def _scope(self, node: cst.CSTNode) -> cst.CSTNode:
        return next((a for a in self.analysis.ancestors(node) if isinstance(a, (cst.FunctionDef, cst.Module))), self.analysis.module)

    def _values_before(self, name: str, before: cst.CSTNode, scope: cst.CSTNode) -> list[cst.BaseExpression]:
        """What ``name`` holds at ``before``: the last assignment's value, and the ``+=`` after it."""
        values: list[cst.BaseExpression] = []
        statements: list[cst.Assign | cst.AugAssign] = [*self.analysis.within(scope, cst.Assign), *self.analysis.within(scope, cst.AugAssign)]
        for node in sorted(statements, key=lambda statement: self.analysis.index[statement]):
            if not self.analysis.is_before(node, before):
                break
            if not self.analysis.is_after(before, node):
                continue  # `loss = loss + penalty`: the `loss` read is the one assigned before this line
            if isinstance(node, cst.Assign) and any(name in {n.value for n in self.analysis.within(t, cst.Name)} for t in node.targets):
                values = [node.value]
            elif isinstance(node, cst.AugAssign) and m.matches(node.target, m.Name(name)):
                values.append(node.value)
        return values

    def _sources(
        self, node: cst.CSTNode, before: cst.CSTNode, scope: cst.CSTNode, stops: set[cst.Call], depth: int
    ) -> set[cst.Call]:
        """The calls a value is computed from, through the names assigned before ``before``; not into ``stops``."""
        if depth > 8:  # names followed
            return set()
        found: set[cst.Call] = set()
        if isinstance(node, cst.Name):
            for value in self._values_before(node.value, before, scope):
                found |= self._sources(value, value, scope, stops, depth + 1)
            return found
        if isinstance(node, cst.Call):
            found.add(node)
            if node in stops:
                return found
        for child in node.children:
            if isinstance(node, cst.Attribute) and child is node.attr:
                continue
            if isinstance(node, cst.Call) and child is node.func and isinstance(child, cst.Name):
                continue  # `critic(x)` is a call of critic, not a value computed from what critic was built of
            found |= self._sources(child, before, scope, stops, depth)
        return found

    def _several_forwards_per_backward(self) -> None:
        """A wrap given find_unused_parameters=True whose model runs two or more forwards before one backward in a
        loop: DDP marks a parameter one forward skips as unused, then gets its gradient from another (DDP245)."""
        for wrap in self.wraps:
            if wrap.call not in self.unused_parameters:
                continue
            for backward in self.analysis.findall(m.Call(func=m.Attribute(attr=m.Name("backward")))):
                loop = next((a for a in self.analysis.ancestors(backward) if isinstance(a, (cst.For, cst.While, cst.FunctionDef))), None)
                if not isinstance(loop, (cst.For, cst.While)):
                    continue
                forwards = [
                    c for c in self.analysis.within(loop.body, cst.Call)
                    if code_of(c.func).removeprefix("self.").removesuffix(".module") in wrap.names
                    and self.analysis.index[c] < self.analysis.index[backward]
                    and self._loop(c) is loop and not self._without_graph(c)
                ]  # fmt: skip
                if not any(not self._exclusive(a, b) for i, a in enumerate(forwards) for b in forwards[i + 1 :]):
                    continue  # `if mixup: out = net(mixed) else: out = net(x)`: one forward per step
                self.static_graph.add(wrap.call)
                lines = ", ".join(f"line {self.analysis.position(c).start.line}" for c in forwards)
                details = (("model", code_of(forwards[0].func)), ("count", str(len(forwards))), ("lines", lines), ("reason", self.unused_parameters[wrap.call]))
                self.findings.append(Hazard(backward, "DDP245", details))
                break
            elsewhere = [(callee, site) for callee, site in self.analysis.role.repeated_forwards if callee in wrap.names]
            if wrap.call not in self.static_graph and elsewhere:
                # `trainer = Trainer(model, ...)`, whose loop runs `self.model(...)` twice before its backward.
                callee, site = elsewhere[0]
                self.static_graph.add(wrap.call)
                details = (("model", callee), ("count", "several"), ("lines", f"before the backward at {site}"), ("reason", self.unused_parameters[wrap.call]))
                self.findings.append(Hazard(wrap.call, "DDP245", details))

    def _exclusive(self, first: cst.CSTNode, second: cst.CSTNode) -> bool:
        """Whether two nodes sit in different branches of one ``if``, so no pass runs both."""

        def inside(outer: cst.CSTNode, inner: cst.CSTNode) -> bool:
            return self.analysis.index[outer] <= self.analysis.index[inner] <= self.analysis.last[outer]

        for branch in self.analysis.ancestors(first):
            if isinstance(branch, cst.If) and branch.orelse is not None:
                if inside(branch.body, first) and inside(branch.orelse, second):
                    return True
                if inside(branch.orelse, first) and inside(branch.body, second):
                    return True
        return False

    def _without_graph(self, call: cst.Call) -> bool:
        """A forward under ``torch.no_grad()``: it builds no graph, so DDP prepares no backward for it."""
        return any(
            isinstance(a, cst.With) and any(m.matches(i.item, m.Call(func=m.Attribute(attr=m.Name("no_grad")) | m.Name("no_grad"))) for i in a.items)
            for a in self.analysis.ancestors(call)
        )

    def _is_forward(self, call: cst.Call) -> bool:
        """A call of a wrapped model (``model(x)``, ``self.model(x)``), or of the module inside it."""
        spelled = code_of(call.func).removesuffix(".module")
        return spelled in self.model_names or spelled.removeprefix("self.") in self.model_names

    def _exclusive(self, first: cst.CSTNode, second: cst.CSTNode) -> bool:
        """Whether two nodes sit in different branches of one ``if``, so one pass runs at most one."""
        branches: dict[cst.CSTNode, cst.CSTNode] = {}
        child: cst.CSTNode = first
        for ancestor in self.analysis.ancestors(first):
            if isinstance(ancestor, cst.If):
                branches[ancestor] = child
            child = ancestor
        child = second
        for ancestor in self.analysis.ancestors(second):
            if isinstance(ancestor, cst.If) and ancestor in branches and branches[ancestor] is not child:
                return branches[ancestor] is not ancestor.test and child is not ancestor.test
            child = ancestor
        return False

    def _loop(self, node: cst.CSTNode) -> cst.For | cst.While | None:
        for ancestor in self.analysis.ancestors(node):
            if isinstance(ancestor, _LOOPS):
                return ancestor
            if isinstance(ancestor, _SCOPES):
                return None
        return None

    def _skippable(self, backward: cst.Call, loop: cst.For | cst.While) -> None:
        """A ``continue`` on a per-batch condition before backward, a ``break`` or ``return`` on one anywhere in the
        loop, or a ``try`` that swallows errors."""
        dependent = per_process_names(self.analysis, loop)
        # A `continue` before the backward skips it; a `break` anywhere leaves the loop while
        # the other processes go on to their next backward.
        skips = [
            (skip, "this `continue` skips it on some batches")
            for skip in self.analysis.within(loop.body, cst.Continue)
            if self.analysis.is_before(skip, backward)
        ] + [(stop, "this `break` leaves the loop on some batches") for stop in self.analysis.within(loop.body, cst.Break)] + [
            # `if torch.isnan(loss): return`: the function, and with it the loop, ends on this process alone.
            (stop, "this `return` leaves the loop on some batches") for stop in self.analysis.within(loop.body, cst.Return)
        ]
        start = loop.iter if isinstance(loop, cst.For) else loop.test
        losses = {code_of(b.func.value) for b in self.analysis.within(loop.body, cst.Call) if m.matches(b, _BACKWARD)}  # type: ignore[attr-defined]

        def reads(skip: cst.CSTNode, dependent: set[str]) -> tuple[list[cst.Name], set[str]]:
            tests = [a.test for a in self.analysis.ancestors(skip) if isinstance(a, cst.If) and self.analysis.is_after(a, start)]
            read = [n for test in tests for n in self.analysis.within(test, cst.Name) if n.value in dependent and not self._reduced(n)]
            read_attributes = {code_of(a) for test in tests for a in self.analysis.within(test, cst.Attribute) if not self._reduced(a)} & dependent
            return read, read_attributes

        def agreeable(read: list[cst.Name], read_attributes: set[str]) -> bool:
            return not read_attributes and all(n.value in losses for n in read) and not any(self._under(n, cst.Lambda) for n in read)

        # A skip whose test reads nothing that differs, or only the loss (taken on the averaged loss, DDP224, or
        # already reduced), is taken alike on every process: a step counter after it (`step += 1`) is alike too.
        agreed = [
            skip for skip, _ in skips
            if isinstance(skip, cst.Continue) and (r := reads(skip, dependent)) and (not any(r) or self.converting and agreeable(*r))
        ]  # fmt: skip
        if agreed:
            dependent = per_process_names(self.analysis, loop, agreed)
        for skip, how in skips:
            if self._loop(skip) is not loop:
                continue
            read, read_attributes = reads(skip, dependent)
            if not read and not read_attributes:
                continue
            if self.converting and agreeable(read, read_attributes):
                # Under DataParallel the loss was the whole batch's: the faithful test is on the
                # loss averaged over processes, the same number everywhere, so all take one branch.
                for name in read:
                    self.agreed_losses.add(self._outermost_chain(name, through_calls=True))
                self.findings.append(Hazard(skip, "DDP224", (("how", how),)))
                continue
            self.blockers.append(Hazard(skip, "DDP220", (("how", how),)))
        for ancestor in self.analysis.ancestors(backward):
            if ancestor is loop:
                break
            if isinstance(ancestor, cst.Try) and not all(_reraises(handler) for handler in ancestor.handlers):
                self.blockers.append(Hazard(ancestor, "DDP220", (("how", "an error caught here skips it on one process"),)))

    def _gated_step(self, backward: cst.Call) -> None:
        """``optimizer.step()`` after a backward, under an ``if`` on this process's loss (``if loss < 3 * last:``, a
        skip of steps whose loss spikes). Under DataParallel the loss was the whole batch's and one process stepped
        or not; here one process may step while another does not, and the replicas drift apart. A test on the loss
        alone now reads it averaged over processes (DDP248); a test on anything else this process computed from
        its batch is an error (DDP249)."""
        function = next((a for a in self.analysis.ancestors(backward) if isinstance(a, cst.FunctionDef)), self.analysis.module)
        if not m.matches(backward.func, m.Attribute(value=m.Name())):
            return
        loss = backward.func.value.value  # type: ignore[attr-defined]
        # Names computed from the loss in its function (`loss_value = loss.item()`, `last = loss.item()`).
        # A value reduced over processes (`all_reduce_mean(loss.item())`) is the same everywhere.
        derived = {loss}
        bindings = [
            (t.target, a.value) for a in self.analysis.within(function, cst.Assign) if not m.matches(a.value, REDUCTION) for t in a.targets
        ] + [(a.target, a.value) for a in self.analysis.within(function, cst.AugAssign)]  # `loss_batch += loss.item()`
        while True:
            more = {
                code_of(target) for target, value in bindings
                if isinstance(target, (cst.Name, cst.Attribute))
                and {code_of(n) for kind in (cst.Name, cst.Attribute) for n in self.analysis.within(value, kind)} & derived
            } - derived
            if not more:
                break
            derived |= more
        for step in self.analysis.within(function, cst.Call):
            if not m.matches(step, m.Call(func=m.Attribute(attr=m.Name("step")), args=[])) or not self.analysis.is_after(step, backward):
                continue
            if "optim" not in code_of(step.func.value).lower():  # type: ignore[attr-defined]
                continue
            tests = []
            for ancestor in self.analysis.ancestors(step):
                if ancestor is function:
                    break
                if isinstance(ancestor, cst.If) and self.analysis.is_after(ancestor, backward):
                    tests.append(ancestor.test)
            for test in tests:
                read = [n for n in self.analysis.within(test, cst.Name) if n.value in derived and not self._reduced(n)]
                read += [a for a in self.analysis.within(test, cst.Attribute) if code_of(a) in derived and not self._reduced(a)]
                if not read:
                    continue
                others = [n for n in read if not (isinstance(n, cst.Name) and n.value == loss)]
                if self.converting and not others:
                    for name in read:
                        self.agreed_losses.add(self._outermost_chain(name, through_calls=True))  # type: ignore[arg-type]
                    self.findings.append(Hazard(test, "DDP248", (("test", code_of(test)), ("step", code_of(step)))))
                else:
                    self.blockers.append(Hazard(test, "DDP249", (("test", code_of(test)), ("step", code_of(step)), ("value", code_of(others[0] if others else read[0])))))
                return

    def _reduced(self, node: cst.CSTNode) -> bool:
        """Inside ``all_reduce_mean(...)`` or another reduction: the same value on every process."""
        return any(m.matches(a, REDUCTION) for a in self.analysis.ancestors(node))

    def _under(self, node: cst.CSTNode, kind: type) -> bool:
        return any(isinstance(a, kind) for a in self.analysis.ancestors(node))

    # -- devices ----------------------------------------------------------------------------

    def _gpu_parameters(self) -> None:
        """``def train(gpu, args)`` that picks its GPU with ``gpu``: what every call passes decides it.

        ``train(0, args)`` meant the GPU DataParallel gathers on; under DDP each process
        passes its local rank instead, which makes every use of ``gpu`` this process's own
        GPU at once. A call whose value convert cannot resolve, or a function handed on
        as a value (``mp.spawn(train, ...)``), blocks: every process would share one GPU.
        """
        parents = self.analysis.parents
        for binding, use in self.analysis.device_indices.bindings.items():
            parameter = binding.node if isinstance(binding, Assignment) else None
            if not isinstance(parameter, cst.Param) or parameter in self._decided_parameters:
                continue
            function = parents.get(parents[parameter])  # Param -> Parameters -> FunctionDef or Lambda
            if not isinstance(function, cst.FunctionDef):
                continue
            self._decided_parameters.add(parameter)
            name = parameter.name.value
            arguments, unknown = self._arguments_for(function, parameter)
            if unknown is None:
                first_gpu = [arg for arg in arguments if m.matches(arg.value, m.Integer("0"))]
                self.local_rank_arguments.update((arg, name) for arg in first_gpu)
                self.local_gpu_parameters.add(parameter)
                for arg in first_gpu:
                    values = (("function", function.name.value), ("parameter", name), ("value", code_of(arg.value)))
                    self.findings.append(Hazard(arg, "DDP217", values))
            elif not (isinstance(unknown, str) and LOCAL_RANK_WORDS.search(name)):
                # A `local_rank` parameter of a function called from elsewhere is taken at its word, as before.
                node, why = (unknown, f"a call passes `{code_of(unknown.value)}`") if isinstance(unknown, cst.Arg) else (use, unknown)
                values = (("function", function.name.value), ("parameter", name), ("why", why))
                self.blockers.append(Hazard(node, "DDP218", values))

    def _arguments_for(self, function: cst.FunctionDef, parameter: cst.Param) -> tuple[list[cst.Arg], cst.Arg | str | None]:
        """What each call of ``function`` passes for ``parameter``, and what spoils that, if anything: the first
        argument that is neither GPU 0 nor this process's own GPU, or why the calls cannot be known."""
        references = self.analysis.references(function.name)
        if not references:
            return [], "nothing in this file calls it"
        arguments: list[cst.Arg] = []
        for reference in references:
            call = self.analysis.parents.get(reference)
            if not isinstance(call, cst.Call) or call.func is not reference:
                return arguments, f"`{function.name.value}` is handed on as a value"
            bound = [arg for arg in call.args if not arg.star and parameter_for(function, call, arg) == parameter.name.value]
            if any(arg.star for arg in call.args) or len(bound) != 1:
                return arguments, f"`{code_of(call)}` passes no value for it that convert can see"
            value = bound[0].value
            if not (m.matches(value, m.Integer("0")) or LOCAL_RANK_WORDS.search(code_of(value)) or self.is_local_device(value)):
                return arguments, bound[0]
            arguments.append(bound[0])
        return arguments, None

    def _bound_to(self, name: cst.Name, parameters: set[cst.Param]) -> bool:
        scope = self.analysis.scopes.get(name)
        return scope is not None and name.value in scope and any(
            isinstance(binding, Assignment) and binding.node in parameters for binding in scope[name.value]
        )

    def _devices(self) -> None:
        reported: set[str] = set()
        blocked = {hazard.node for hazard in self.blockers}
        wraps = {wrap.call for wrap in self.wraps}
        for call in self.analysis.nodes(cst.Call):
            if call in blocked or (isinstance(call.func, cst.Attribute) and call.func.value in wraps):
                continue  # a hazard already, or the wrap's own move, which the conversion drops
            if self.dropped_branches and any(a in self.dropped_branches for a in self.analysis.ancestors(call)):
                continue  # the side of a GPU `if` that no longer runs
            if any(isinstance(a, cst.FunctionDef) and a.name.value in names.HELPERS for a in self.analysis.ancestors(call)):
                continue  # the helpers convert writes use the device setup_distributed() chose
            device = call.args[0].value if call.args else None
            if isinstance(device, cst.Name) and self._bound_to(device, self._decided_parameters):
                continue  # a GPU parameter: made this process's own at its calls, or a blocker
            # `.to(args.device)`: one finding per device value, at its first use.
            if m.matches(call, m.Call(func=m.Attribute(attr=m.Name("to")), args=[m.Arg(m.Name() | m.Attribute(), keyword=None), m.ZeroOrMore()])):
                device = call.args[0].value
                spelled = code_of(device)
                if GPU_OR_DEVICE.search(spelled.rsplit(".", 1)[-1]) and spelled not in reported and not self.is_local_device(device):
                    reported.add(spelled)
                    self.findings.append(Hazard(call, "DDP213", (("device", spelled),)))
            if self.analysis.matches(call, call_to({"torch.cuda.set_device"})) and call.args:
                device = call.args[0].value
                if not isinstance(device, cst.Integer) and not LOCAL_RANK_WORDS.search(code_of(device)) and not self.is_local_device(device):
                    # After setup_distributed() picked this process's GPU, selecting another puts every
                    # process on the same one: NCCL fails on duplicate GPUs.
                    self.blockers.append(Hazard(call, "DDP226", (("device", code_of(device)),)))
            elif m.matches(call, m.Call(func=m.Attribute(attr=m.Name("cuda")), args=[m.Arg(keyword=None)])):
                device = call.args[0].value
                spelled = code_of(device)
                if spelled in reported or isinstance(device, cst.Integer) or LOCAL_RANK_WORDS.search(spelled) or self.is_local_device(device):
                    continue
                reported.add(spelled)
                self.findings.append(Hazard(call, "DDP213", (("device", spelled),)))


def per_process_names(analysis: Analysis, loop: cst.For | cst.While, agreed: Sequence[cst.Continue] = ()) -> set[str]:
    """Names (and dotted attributes) whose value can differ between processes at the same step of ``loop``.

    The batch differs, and so does whatever is computed from it. A value the
    loop body binds is the same on every process only when every binding of it
    there reads no call and nothing that differs, and runs on every process at
    every step: a step counter (``i = i + 1``, ``i += k``) or a schedule
    (``lr = lr * 0.5``). ``x += loss.item()`` or an increment under ``if loss > 0:``
    differs. Anything else the body binds (a loop target, ``with ... as``) differs. The ``agreed`` skips are
    taken alike on every process (their test is on the averaged loss): they make nothing after them differ.
    """
    body = loop.body
    differ: set[str] = set()
    if isinstance(loop, cst.For):
        targets = [n.value for n in analysis.within(loop.target, cst.Name)]
        counter = m.matches(loop.iter, m.Call(func=m.Name("enumerate") | m.Name("range")))
        if counter and m.matches(loop.iter, m.Call(func=m.Name("range"))):
            targets = []
        elif counter and isinstance(loop.target, cst.Tuple) and targets:
            targets = targets[1:]  # `for i, batch in enumerate(loader)`: i is the same everywhere
        differ |= set(targets)
    # What each binding in the body assigns: `x = value` and `x += value` (which reads x too).
    bindings: dict[str, list[tuple[cst.CSTNode, cst.BaseExpression]]] = {}
    for assign in analysis.within(body, cst.Assign):
        for target in assign.targets:
            _bind(analysis, target.target, assign, assign.value, bindings, differ)
    for aug in analysis.within(body, cst.AugAssign):
        _bind(analysis, aug.target, aug, aug.value, bindings, differ)
    for inner in [*analysis.within(body, cst.For), *analysis.within(body, cst.CompFor)]:
        differ |= {n.value for n in analysis.within(inner.target, cst.Name)}
    for item in analysis.within(body, cst.AsName):
        differ |= {n.value for n in analysis.within(item.name, cst.Name)}
    for walrus in analysis.within(body, cst.NamedExpr):
        differ |= {n.value for n in analysis.within(walrus.target, cst.Name)}
    changed = True
    while changed:
        changed = False
        for name, assigned in bindings.items():
            if name in differ:
                continue
            if any(_differs(analysis, loop, node, value, differ, agreed) for node, value in assigned):
                differ.add(name)
                changed = True
    return differ


def _bind(
    analysis: Analysis,
    target: cst.BaseExpression,
    node: cst.CSTNode,
    value: cst.BaseExpression,
    bindings: dict[str, list[tuple[cst.CSTNode, cst.BaseExpression]]],
    differ: set[str],
) -> None:
    if isinstance(target, (cst.Name, cst.Attribute)):
        bindings.setdefault(code_of(target), []).append((node, value))
    elif isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            _bind(analysis, element.value, node, value, bindings, differ)
    else:
        differ |= {n.value for n in analysis.within(target, cst.Name)}  # `losses[i] = ...`: the container


def _differs(
    analysis: Analysis, loop: cst.For | cst.While, node: cst.CSTNode, value: cst.BaseExpression, differ: set[str],
    agreed: Sequence[cst.Continue] = (),
) -> bool:
    """Whether this binding can give processes different values, or run on some and not others."""
    if analysis.within(value, cst.Call) or analysis.reads(value) & differ:
        return True
    for ancestor in analysis.ancestors(node):
        if ancestor is loop:
            break
        if isinstance(ancestor, (cst.For, cst.While, cst.Try, cst.FunctionDef, cst.Lambda)):
            return True
        if isinstance(ancestor, cst.If) and (analysis.within(ancestor.test, cst.Call) or analysis.reads(ancestor.test) & differ):
            return True
    # A `continue` on a value that differs, earlier in the step, skips the binding on some processes.
    for skip in analysis.within(loop.body, cst.Continue):
        if not analysis.is_before(skip, node) or _enclosing_loop(analysis, skip) is not loop or skip in agreed:
            continue
        tests = [a.test for a in analysis.ancestors(skip) if isinstance(a, cst.If) and analysis.index[a] > analysis.index[loop]]
        if any(analysis.within(test, cst.Call) or analysis.reads(test) & differ for test in tests):
            return True
    return False


def _enclosing_loop(analysis: Analysis, node: cst.CSTNode) -> cst.CSTNode | None:
    for ancestor in analysis.ancestors(node):
        if isinstance(ancestor, _LOOPS):
            return ancestor
        if isinstance(ancestor, _SCOPES):
            return None
    return None


def _reraises(handler: cst.ExceptHandler) -> bool:
    """A handler with a top-level ``raise``: the error still stops this process, and the run."""
    return any(isinstance(s, cst.SimpleStatementLine) and isinstance(s.body[0], cst.Raise) for s in handler.body.body)  # type: ignore[union-attr]


def _count_of(count: int, kind: str) -> str:
    return f"{count} {kind} pass" + ("" if count == 1 else "es")


def _combine_passes(
    keyed: list[tuple[cst.Call, bool, tuple[tuple[cst.If, int], ...]]], depth: int
) -> set[tuple[frozenset[cst.Call], int]]:
    """Each (backward calls, forward count) that one choice of branches runs, for calls below ``depth`` ifs."""
    here = [(call, is_backward) for call, is_backward, branches in keyed if len(branches) == depth]
    passes = {(frozenset(call for call, is_backward in here if is_backward), sum(1 for _, is_backward in here if not is_backward))}
    by_if: dict[cst.If, dict[int, list[tuple[cst.Call, bool, tuple[tuple[cst.If, int], ...]]]]] = {}
    for item in keyed:
        if len(item[2]) > depth:
            condition, side = item[2][depth]
            by_if.setdefault(condition, {}).setdefault(side, []).append(item)
    for sides in by_if.values():
        options: set[tuple[frozenset[cst.Call], int]] = set()
        for items in sides.values():
            options |= _combine_passes(items, depth + 1)
        if len(sides) < 2:
            options.add((frozenset(), 0))  # the branch that holds none of them
        passes = {(a | b, n + k) for a, n in passes for b, k in options}
    return passes


def _bound_names(target: cst.BaseExpression) -> set[str]:
    """The names an assignment to ``target`` binds: ``name``, ``key, net``; not ``nets[key]`` or ``self.net``."""
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        return set().union(*(_bound_names(e.value) for e in target.elements))
    if isinstance(target, cst.StarredElement):
        return _bound_names(target.value)
    return set()


def _combine(*parts: bool | None) -> bool | None:
    if any(part is None for part in parts):
        return None
    return any(parts)


def one_sided_unwraps(analysis: Analysis, wraps: list[cst.Call]) -> list[tuple[cst.If | cst.IfExp, str]]:
    """Branches that read ``model.module`` on one side and ``model``'s own attributes on the other, where
    ``model`` is bound by one of the DDP ``wraps`` whatever the branch's test says.

    ``model.module.state_dict() if use_gpu else model.state_dict()``: a DataParallel script wrapped only
    on GPUs and unwrapped on the same test; under DDP the model is wrapped on both sides, so the side
    without ``.module`` meets the wrapper. A wrap under the same test, or a test that asks the model
    itself (``hasattr``, ``isinstance``), is consistent.
    """
    wrapped: dict[str, list[cst.Call]] = {}
    for call in wraps:
        parent = analysis.parents.get(call)
        if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
            wrapped.setdefault(code_of(parent.targets[0].target), []).append(call)
    found: list[tuple[cst.If | cst.IfExp, str]] = []
    branches: list[cst.If | cst.IfExp] = [*analysis.nodes(cst.If), *analysis.nodes(cst.IfExp)]
    for branch in sorted(branches, key=lambda b: analysis.index[b]):
        if isinstance(branch, cst.If) and not isinstance(branch.orelse, cst.Else):
            continue
        test = code_of(branch.test)
        if re.search(r"\b(hasattr|isinstance|getattr)\(|module|DataParallel|DDP", test):
            continue
        sides = (branch.body, branch.orelse.body) if isinstance(branch, cst.If) else (branch.body, branch.orelse)
        for name, calls in wrapped.items():
            tests = {code_of(a.test) for call in calls for a in analysis.ancestors(call) if isinstance(a, (cst.If, cst.IfExp))}
            if test in tests:
                continue  # wrapped under the same test: each side has the model it expects
            uses = [_model_uses(analysis, side, name) for side in sides]
            if {frozenset(uses[0]), frozenset(uses[1])} == {frozenset({"module"}), frozenset({"direct"})}:
                found.append((branch, name))  # type: ignore[arg-type]
                break
    return found


def _reads(statement: cst.CSTNode, spelled: str) -> bool:
    """Whether ``statement`` reads or binds the name or attribute chain ``spelled`` (``model``, ``self.s_net``)."""
    kind = m.Attribute() if "." in spelled else m.Name()
    return any(code_of(node) == spelled for node in m.findall(statement, kind))


def through_module(branch: cst.If | cst.IfExp, name: str) -> cst.If | cst.IfExp:
    """``branch`` with each attribute of ``name`` its sides read, other than ``module``, read through
    ``name.module``: the side written for the bare model, when the model is DDP on both."""

    class _ThroughModule(cst.CSTTransformer):
        def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.Attribute:
            if code_of(original_node.value) != name or original_node.attr.value == "module":
                return updated_node
            return updated_node.with_changes(value=cst.Attribute(value=updated_node.value, attr=cst.Name("module")))

    transformer = _ThroughModule()
    return branch.with_changes(body=branch.body.visit(transformer), orelse=branch.orelse.visit(transformer))  # type: ignore[arg-type]


def _model_uses(analysis: Analysis, side: cst.CSTNode, name: str) -> set[str]:
    """``module`` where ``side`` reads ``name.module``, ``direct`` where it reads another attribute of ``name``."""
    found: set[str] = set()
    for attribute in analysis.within(side, cst.Attribute):
        if code_of(attribute.value) == name:
            found.add("module" if attribute.attr.value == "module" else "direct")
    return found


def _returned_value(statement: cst.BaseStatement) -> cst.BaseExpression | None:
    """The value of ``return value`` alone on its line, or None for any other statement."""
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        small = statement.body[0]
        if isinstance(small, cst.Return) and small.value is not None:
            return small.value
    return None


def _dotted(node: cst.BaseExpression) -> bool:
    """``model.module.features``: names and attributes only, no call or subscript between."""
    while isinstance(node, cst.Attribute):
        node = node.value
    return isinstance(node, cst.Name)


def _unmoved(node: cst.BaseExpression) -> cst.BaseExpression:
    """``model.cpu()``, ``model.cuda()`` or ``model.to(device)``, any number of them -> ``model``."""
    while m.matches(node, m.Call(func=m.Attribute(attr=m.Name("cpu") | m.Name("cuda") | m.Name("to")))):
        node = node.func.value  # type: ignore[attr-defined]
    return node
