"""What a loop over a DataLoader leaves behind, and which of it can be gathered exactly.

A sharded loop leaves each process with its share of every result. gather_metrics
reduces the shares it can reduce exactly: sums and counts, per-batch means
summed over steps, and AverageMeter-style meters. Anything else that outlives
the loop (a list of losses averaged later, a confusion-matrix object, a
dictionary of scores, the last batch's accuracy) would stay one process's
share. shard_evaluation reads the same answer and leaves such a loop whole on
every process, so the two codemods never disagree about what is gathered.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import libcst as cst
import libcst.matchers as m
from libcst.metadata import ImportAssignment

from . import names
from .syntax import call_to, code_of

if TYPE_CHECKING:
    from .module import Analysis

# Increments that add a count or a sum over samples, which add up exactly across processes.
SUM_INCREMENT = re.compile(
    r"\.sum\(|reduction\s*=\s*['\"]sum|size_average\s*=\s*False|\.size\(|\bsize\(|len\(|\.shape\b|\.numel\(|\*"
)
# A value that counts the samples of a batch: `data.size()[0]`, `len(labels)`, `x.shape[0]`.
SAMPLE_COUNT = re.compile(r"\.size\(|\bsize\(|len\(|\.shape\b|\.numel\(")
LOADER_NAME = re.compile(r"loader", re.IGNORECASE)
NUMBER = m.Integer() | m.Float() | m.UnaryOperation(expression=m.Integer() | m.Float())
REDUCTION = m.Call(func=m.Name(m.MatchIfTrue(lambda f: f in names.COLLECTIVE_HELPERS)))


@dataclass
class LoopResults:
    sums: list[str] = field(default_factory=list)
    means: list[str] = field(default_factory=list)
    meters: list[str] = field(default_factory=list)
    # Accumulators each process reads inside the loop, with the helper that reduces them.
    running: dict[str, str] = field(default_factory=dict)
    # What outlives the loop that no reduction covers: (statement, what it holds).
    ungathered: list[tuple[cst.CSTNode, str]] = field(default_factory=list)


def owner_of(analysis: Analysis, node: cst.CSTNode) -> cst.CSTNode:
    """The function, or the module, whose body holds ``node``."""
    return next(a for a in analysis.ancestors(node) if isinstance(a, (cst.FunctionDef, cst.Module)))


def loop_results(analysis: Analysis, loop: cst.For, training: bool) -> LoopResults:
    owner = owner_of(analysis, loop)
    results = LoopResults()
    increments: dict[str, list[cst.AugAssign]] = {}
    for aug in analysis.within(loop.body, cst.AugAssign):
        if isinstance(aug.target, cst.Name) and isinstance(aug.operator, cst.AddAssign) and not in_inner_data_loop(analysis, aug, loop):
            increments.setdefault(aug.target.value, []).append(aug)
    for name, augs in increments.items():
        values = [aug.value for aug in augs]
        if all(m.matches(v, m.Integer()) for v in values) and (training or all(at_step_level(analysis, a, loop) for a in augs)):
            continue  # Counts steps, which every process takes alike in training.
        if _reduced_already(analysis, owner, name, loop) or not _initialised_before(analysis, owner, name, loop):
            continue
        sums = any(
            SUM_INCREMENT.search(code_of(v)) or m.matches(v, m.Integer()) or summed_loss(analysis, v, loop)
            or _holds_a_count(analysis, v, loop)
            for v in values
        )  # fmt: skip
        kind = "sum" if sums else "mean"
        if kind == "mean" and not training:
            # Per-batch values summed over steps: evaluation shards differ in their numbers of batches and in the
            # batch each takes, so no reduction gives the whole set's value; it is left for _ungathered.
            continue
        if _read_after(analysis, owner, name, loop):
            (results.sums if kind == "sum" else results.means).append(name)
        results.running[name] = names.SUM_HELPER if kind == "sum" else names.MEAN_HELPER
    results.meters = _meters(analysis, loop, owner)
    results.ungathered = _ungathered(analysis, loop, owner, results)
    return results


def _holds_a_count(analysis: Analysis, value: cst.BaseExpression, loop: cst.For) -> bool:
    """``count += batch_size`` where the loop binds ``batch_size = data.size()[0]``: a count over samples; and
    ``score += batch_score`` where it binds ``batch_score = (pred == a).sum()``: a sum over samples."""
    read = {n.value for n in analysis.within(value, cst.Name)}
    return any(
        SAMPLE_COUNT.search(code_of(assign.value)) or _summed(assign.value)
        for assign in analysis.within(loop.body, cst.Assign)
        if any(isinstance(t.target, cst.Name) and t.target.value in read for t in assign.targets)
    )


def _summed(value: cst.BaseExpression) -> bool:
    """``(pred == y).sum()``, ``x.sum().item()``, ``x.float().sum().cpu()``: the value ends in a sum over the batch (not
    ``x.sum() / len(y)``, a mean)."""
    while m.matches(value, m.Call(func=m.Attribute(attr=m.Name("item") | m.Name("cpu") | m.Name("float") | m.Name("double")), args=[])):
        value = value.func.value  # type: ignore[attr-defined]
    return m.matches(value, m.Call(func=m.Attribute(attr=m.Name("sum")), args=[]))


def summed_loss(analysis: Analysis, value: cst.BaseExpression, loop: cst.For) -> bool:
    """``total += loss.item()`` where the loop computes ``loss`` with a criterion that sums over the batch."""
    read = {n.value for n in analysis.within(value, cst.Name)}
    for assign in analysis.within(loop.body, cst.Assign):
        if not any(isinstance(t.target, cst.Name) and t.target.value in read for t in assign.targets):
            continue
        if isinstance(assign.value, cst.Call) and code_of(assign.value.func) in analysis.summing_criteria:
            return True
    return False


def in_inner_data_loop(analysis: Analysis, node: cst.CSTNode, loop: cst.For) -> bool:
    """Whether ``node`` belongs to another loop over a loader inside ``loop``, such as validation every N steps.

    That loop's results are its own, reduced after it.
    """
    for ancestor in analysis.ancestors(node):
        if ancestor is loop:
            return False
        if isinstance(ancestor, cst.For) and LOADER_NAME.search(code_of(ancestor.iter)):
            return True
    return False


def at_step_level(analysis: Analysis, node: cst.CSTNode, loop: cst.For) -> bool:
    """Whether ``node`` runs exactly once per step of ``loop``: no ``if`` or inner loop around it."""
    for ancestor in analysis.ancestors(node):
        if ancestor is loop:
            return True
        if isinstance(ancestor, (cst.If, cst.For, cst.While, cst.Try, cst.FunctionDef)):
            return False
    return False


def _initialised_before(analysis: Analysis, owner: cst.CSTNode, name: str, loop: cst.For) -> bool:
    initialised = m.Assign(targets=[m.ZeroOrMore(), m.AssignTarget(m.Name(name)), m.ZeroOrMore()], value=NUMBER)
    starts = list(analysis.findall_in(owner, initialised))
    unpacked = m.Assign(targets=[m.AssignTarget(m.Tuple())], value=m.Tuple())
    for assign in analysis.findall_in(owner, unpacked):
        assert isinstance(assign, cst.Assign)
        target, value = assign.targets[0].target, assign.value
        assert isinstance(target, cst.Tuple) and isinstance(value, cst.Tuple)
        for element, initial in zip(target.elements, value.elements):
            if m.matches(element.value, m.Name(name)) and m.matches(initial.value, NUMBER):
                starts.append(assign)
    return any(analysis.is_before(start, loop) for start in starts)


def _reduced_already(analysis: Analysis, owner: cst.CSTNode, name: str, loop: cst.For) -> bool:
    for call in analysis.findall_in(owner, REDUCTION):
        if analysis.is_after(call, loop) and any(code_of(a.value) == name for a in call.args):  # type: ignore[attr-defined]
            return True
    return False


def _read_after(analysis: Analysis, owner: cst.CSTNode, name: str, loop: cst.For) -> bool:
    """Whether code after the loop reads ``name`` before binding it anew: ``mae = mae / len(loader)`` reads it,
    as the value of an assignment runs before its targets are bound."""

    def runs_at(found: cst.CSTNode) -> int:
        if not is_bound_here(analysis, found):
            return analysis.index[found]
        statement = next(a for a in analysis.ancestors(found) if isinstance(a, (cst.Assign, cst.For, cst.BaseSmallStatement, cst.BaseCompoundStatement)))
        return analysis.last[statement] if isinstance(statement, cst.Assign) else analysis.index[found]

    after = [found for found in analysis.findall_in(owner, m.Name(name)) if analysis.is_after(found, loop)]
    return bool(after) and not is_bound_here(analysis, min(after, key=runs_at))


def is_bound_here(analysis: Analysis, name: cst.CSTNode) -> bool:
    node = name
    for parent in analysis.ancestors(name):
        if isinstance(parent, cst.AssignTarget) or (isinstance(parent, cst.For) and parent.target is node):
            return True
        if not isinstance(parent, (cst.Tuple, cst.List, cst.Element, cst.StarredElement)):
            return False
        node = parent
    return False


def _is_meter(analysis: Analysis, func: cst.CSTNode) -> bool:
    """Whether ``func(...)`` builds an AverageMeter-style meter, whose ``sum`` and ``count`` can be reduced.

    A class the project knows is judged by what it keeps: this file's own class by its body, another
    module's by the project's reading of it (a ``MetricMeter`` that holds a dict of meters is no meter).
    A class from outside the project is judged by its name.
    """
    qualified = {q.name for q in analysis.qualified_names(func)}
    if qualified & analysis.role.meter_classes:
        return True
    if isinstance(func, cst.Name):
        own = next((c for c in analysis.nodes(cst.ClassDef) if c.name.value == func.value), None)
        if own is not None:
            kept = {code_of(t) for t in analysis.within(own, cst.Attribute) if isinstance(t.value, cst.Name) and t.value.value == "self"}
            return "self.sum" in kept and bool({"self.count", "self.cnt"} & kept)
    if qualified & analysis.role.project_calls:
        return False
    name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
    return isinstance(func, cst.Name) and "Meter" in name


def _meters(analysis: Analysis, loop: cst.For, owner: cst.CSTNode) -> list[str]:
    """Meters updated in the loop and created in the same function before it."""
    updated: list[str] = []
    for call in analysis.findall_in(loop.body, m.Call(func=m.Attribute(value=m.Name(), attr=m.Name("update")))):
        assert isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
        if in_inner_data_loop(analysis, call, loop):
            continue
        name = code_of(call.func.value)
        if name not in updated:
            updated.append(name)
    meters = []
    for name in updated:
        created = m.Assign(
            targets=[m.AssignTarget(m.Name(name))],
            # `AverageMeter(...)`, or a meter class of another module of the project: `utils.AverageMeter(...)`.
            value=m.Call(func=m.MatchIfTrue(lambda func: _is_meter(analysis, func))),
        )
        before = any(analysis.is_before(a, loop) for a in analysis.findall_in(owner, created))
        if before and not _reduced_already(analysis, owner, name, loop):
            meters.append(name)
    return meters


def _ungathered(analysis: Analysis, loop: cst.For, owner: cst.CSTNode, results: LoopResults) -> list[tuple[cst.CSTNode, str]]:
    """State the loop changes, that outlives it, and that no reduction covers."""
    covered = set(results.running) | set(results.meters)
    # What a reduction after the loop covers already (`all_reduce_meter(top1)` in a converted script).
    covered |= {
        code_of(arg.value)
        for call in analysis.findall_in(owner, REDUCTION)
        if analysis.is_after(call, loop)
        for arg in call.args  # type: ignore[attr-defined]
    }
    bound_in_loop = {
        n.value  # type: ignore[attr-defined]
        for n in analysis.within(loop, cst.Name)
        if n is not loop and is_bound_here(analysis, n)
    }
    models = analysis.lifecycle.model_names | analysis.effects.models
    effects = analysis.effects
    found: list[tuple[cst.CSTNode, str]] = []

    def outside(expression: cst.BaseExpression) -> str | None:
        """The name an expression's object is held by, when it is bound outside the loop and is not a module."""
        base = expression
        while isinstance(base, (cst.Attribute, cst.Subscript, cst.Call)):
            base = base.func if isinstance(base, cst.Call) else base.value
        if not isinstance(base, cst.Name) or base.value in bound_in_loop or base.value in models:
            return None
        scope = analysis.scopes.get(base)
        if scope is not None and any(isinstance(a, ImportAssignment) for a in scope[base.value]):
            return None
        if base.value in ("self", "cls") and isinstance(expression, cst.Name):
            return None
        return base.value

    for aug in analysis.within(loop.body, cst.AugAssign):
        target = aug.target
        if isinstance(target, cst.Name):
            step_count = m.matches(aug.value, m.Integer()) and at_step_level(analysis, aug, loop)
            if target.value not in covered and not step_count and _read_after(analysis, owner, target.value, loop):
                found.append((aug, target.value))
        elif outside(target) is not None:
            found.append((aug, code_of(target)))
    for assign in analysis.within(loop.body, cst.Assign):
        for target in assign.targets:
            for name in _target_names(target.target):
                if isinstance(name, cst.Name):
                    if name.value not in covered and _read_after(analysis, owner, name.value, loop):
                        found.append((assign, name.value))
                elif outside(name) is not None:
                    found.append((assign, code_of(name)))
    for expr in analysis.within(loop.body, cst.Expr):
        call = expr.value
        if not isinstance(call, cst.Call) or effects.is_side_effect(call) or analysis.matches(call, call_to(names.TQDM)):
            continue
        if isinstance(call.func, cst.Attribute):
            held = outside(call.func.value)
            if held is not None and held not in covered and not _is_progress_bar(analysis, held, owner):
                found.append((expr, held))
        elif isinstance(call.func, cst.Name) and call.func.value not in names.HELPERS:
            for arg in call.args:
                held = outside(arg.value) if isinstance(arg.value, cst.Name) else None
                if held is not None and held not in covered:
                    found.append((expr, held))
                    break
    return sorted(found, key=lambda item: analysis.index[item[0]])


def _target_names(target: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for element in target.elements for n in _target_names(element.value)]
    return [target]


def _is_progress_bar(analysis: Analysis, name: str, owner: cst.CSTNode) -> bool:
    bar = m.Assign(targets=[m.AssignTarget(m.Name(name))], value=call_to(names.TQDM))
    return bool(analysis.findall_in(owner, bar))


# What moves or picks from a batch keeps its first dimension: `x = x.to(device)`, `x = batch[0]`, `x = x.float()`.
_MOVES = frozenset({"to", "cuda", "cpu", "float", "half"})
_KEEPS_BATCH = m.Call(func=m.Attribute(attr=m.Name(m.MatchIfTrue(lambda name: name in _MOVES))))


def batch_names(analysis: Analysis, loop: cst.For) -> set[str]:
    """Names holding this process's batch in ``loop``: its targets, less an ``enumerate`` index, and their moves."""
    targets = [n.value for n in analysis.within(loop.target, cst.Name)]
    if m.matches(loop.iter, m.Call(func=m.Name("enumerate"))) and isinstance(loop.target, cst.Tuple) and targets:
        targets = targets[1:]
    held = set(targets)
    for assign in analysis.within(loop.body, cst.Assign):
        values = assign.value.elements if isinstance(assign.value, cst.Tuple) else [assign.value]
        for target in assign.targets:
            names_bound = _target_names(target.target)
            if len(names_bound) != len(values):
                continue
            for name, value in zip(names_bound, values):
                value = value.value if isinstance(value, cst.Element) else value
                source = value
                while isinstance(source, cst.Call) and m.matches(source, _KEEPS_BATCH):
                    source = source.func.value  # type: ignore[attr-defined]
                if isinstance(source, cst.Subscript):
                    source = source.value
                if isinstance(name, cst.Name) and isinstance(source, cst.Name) and source.value in held:
                    held.add(name.value)
    return held


def batch_sizes(analysis: Analysis, node: cst.CSTNode, batch: set[str]) -> list[cst.BaseExpression]:
    """The reads of a batch's size in ``node``: ``len(x)``, ``x.size(0)``, ``x.size()[0]``, ``x.shape[0]``.

    Under DDP each is this process's share of the batch DataParallel saw, so a count of samples
    printed from one (``batch_idx * len(data)``) is one process's. A read already multiplied by
    the world size (what convert writes) is not listed again.
    """
    held = m.Name(m.MatchIfTrue(lambda name: name in batch))
    zero = m.Integer("0")
    size = (
        m.Call(func=m.Name("len"), args=[m.Arg(held)])
        | m.Call(func=m.Attribute(value=held, attr=m.Name("size")), args=[m.Arg(zero)])
        | m.Subscript(
            value=m.Attribute(value=held, attr=m.Name("shape"))
            | m.Call(func=m.Attribute(value=held, attr=m.Name("size")), args=[]),
            slice=[m.SubscriptElement(m.Index(zero))],
        )
    )
    found = []
    for candidate in [*analysis.within(node, cst.Call), *analysis.within(node, cst.Subscript)]:
        if not m.matches(candidate, size):
            continue
        if not _times_world_size(analysis, candidate):
            found.append(candidate)
    return sorted(found, key=lambda n: analysis.index[n])


def _times_world_size(analysis: Analysis, node: cst.CSTNode) -> bool:
    """Whether a product that ``node`` is a factor of multiplies by ``get_world_size()``: ``a * len(x) * W``."""
    parent = analysis.parents.get(node)
    while isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, cst.Multiply):
        if m.matches(parent.right, m.Call(func=m.Attribute(attr=m.Name("get_world_size")))):
            return True
        parent = analysis.parents.get(parent)
    return False
