"""Functions that take one training step each time they run, and the flags that choose whether they do.

``train_step(model, x, y)`` runs a ``backward()`` in no loop of its own: a loop that calls it
trains on what it hands it, as a loop around the ``backward()`` itself would. A flag of the
function may choose the path: ``loss_compute(x, y, logits, only_return_losses=True)`` returns
before its backward, and ``step(batch, train=False)`` skips the one under ``if train:``, as
``iterate("val", loader)`` skips the one under ``if mode == "train":``. A call that picks the
path without the step by a constant (or by the flag's default) takes none.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass

_REPEATED = (
    ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
    ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,
)  # fmt: skip
Function = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class Flag:
    """A parameter of a stepping function whose truth chooses whether the step is taken."""

    name: str
    steps_when: bool  # what the test must give for the step to run
    default: object  # its default value, where it is a constant; ... where it has none or it is not one
    position: int | None  # where a call passes it by position (after `self` for a method); None for keyword-only
    # The test: the parameter's truth (`if train:`), or, where given, whether it is one of these constants
    # (`if mode == "train":`, `if phase in ("train", "trainval"):`).
    among: tuple[object, ...] | None = None

    def test(self, value: object) -> bool:
        """What the flag's test gives for ``value``."""
        return bool(value) if self.among is None else value in self.among


def calls_once(function: Function) -> Iterator[ast.Call]:
    """The calls ``function`` makes at most once each time it runs: in no loop, comprehension or nested function."""
    return _calls_in_turn(function.body)


def dotted(func: ast.expr) -> str | None:
    """``a.b.c`` for a name or a dotted name, else None."""
    parts: list[str] = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name):
        return None
    return ".".join([func.id, *reversed(parts)])


def step_flags(function: Function, steps: Callable[[str], bool]) -> tuple[Flag, ...] | None:
    """The flags that choose whether ``function`` takes its step; None when it takes none.

    A ``backward()`` takes a step, and so does a call ``steps`` accepts, spelled as written (a
    stepping function of the same module). The first such call made once per run is the step.
    """
    step = next((c for c in calls_once(function) if _is_backward(c) or (spelled := dotted(c.func)) is not None and steps(spelled)), None)
    if step is None:
        return None
    return flags_at(function, step)


def flags_at(function: Function, step: ast.AST) -> tuple[Flag, ...]:
    """The flags of ``function`` that choose whether it reaches ``step``: the tests of the ifs around it, and of
    the ifs before it that return or raise (``if only_return_losses: return losses``), on its parameters."""
    parameters = {a.arg: a for a in (*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs)}
    flags: dict[str, tuple[bool, tuple[object, ...] | None]] = {}
    for block, inside in _path(function, step):
        for statement in block[: block.index(inside)] if inside in block else ():
            # `if only_return_losses: return losses` before the step: the step needs the flag false.
            if isinstance(statement, ast.If) and not statement.orelse and isinstance(statement.body[-1], (ast.Return, ast.Raise)):
                flag = _flag(statement.test, parameters)
                if flag is not None:
                    flags.setdefault(flag[0], (not flag[1], flag[2]))
    for parent, child in _ancestry(function, step):
        if isinstance(parent, ast.If) and (flag := _flag(parent.test, parameters)) is not None:
            flags.setdefault(flag[0], (flag[1] if child in parent.body else not flag[1], flag[2]))
    order = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
    order = order[1:] if order[:1] in (["self"], ["cls"]) else order
    return tuple(
        Flag(name, when, _default(function, name), order.index(name) if name in order else None, among)
        for name, (when, among) in flags.items()
    )


def skips_step(flags: tuple[Flag, ...], passed: dict[str | int, object]) -> bool:
    """Whether a call surely skips the step, by what it passes (constants by keyword or position, ``...`` for
    any other value) or by a flag's default it leaves as it is."""
    for flag in flags:
        key = flag.name if flag.name in passed else flag.position if flag.position in passed else None
        value = flag.default if key is None else passed[key]
        if value is not ... and flag.test(value) != flag.steps_when:
            return True
    return False


def _is_backward(call: ast.Call) -> bool:
    return isinstance(call.func, ast.Attribute) and call.func.attr == "backward"


def _flag(test: ast.expr, parameters: dict[str, ast.arg]) -> tuple[str, bool, tuple[object, ...] | None] | None:
    """The parameter ``test`` reads, whether the test holds when the flag's own test does, and the constants
    that test compares with: ``p`` and ``not p`` test its truth; ``p == "train"``, ``p != "train"``,
    ``p in ("train", "trainval")`` and ``p not in (...)`` whether it is one of them."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _flag(test.operand, parameters)
        return None if inner is None else (inner[0], not inner[1], inner[2])
    if isinstance(test, ast.Name) and test.id in parameters:
        return test.id, True, None
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name) and test.left.id in parameters):
        return None
    operator, right = test.ops[0], test.comparators[0]
    if isinstance(operator, (ast.Eq, ast.NotEq)) and isinstance(right, ast.Constant):
        return test.left.id, isinstance(operator, ast.Eq), (right.value,)
    if isinstance(operator, (ast.In, ast.NotIn)) and isinstance(right, (ast.Tuple, ast.List, ast.Set)):
        if all(isinstance(e, ast.Constant) for e in right.elts):
            return test.left.id, isinstance(operator, ast.In), tuple(e.value for e in right.elts)  # type: ignore[attr-defined]
    return None


def _default(function: Function, name: str) -> object:
    arguments = function.args
    positional = [*arguments.posonlyargs, *arguments.args]
    defaults = dict(zip([a.arg for a in positional][len(positional) - len(arguments.defaults) :], arguments.defaults))
    defaults |= {a.arg: d for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is not None}
    value = defaults.get(name)
    return value.value if isinstance(value, ast.Constant) else ...


def _ancestry(function: ast.AST, target: ast.AST) -> list[tuple[ast.AST, ast.AST]]:
    """(parent, child) pairs from ``function`` down to ``target``."""
    for child in ast.iter_child_nodes(function):
        if child is target:
            return [(function, child)]
        found = _ancestry(child, target)
        if found:
            return [(function, child), *found]
    return []


def _path(function: Function, target: ast.AST) -> Iterator[tuple[list[ast.stmt], ast.AST]]:
    """Each statement block on the way to ``target``, with the statement of it that holds ``target``."""
    for parent, child in _ancestry(function, target):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(parent, field, None)
            if isinstance(block, list) and child in block:
                yield block, child


def repeated_forwards(tree: ast.AST) -> Iterator[tuple[str, ast.Call]]:
    """Callables a loop calls two or more times before its ``backward()`` (``self.model(source)``, then
    ``self.model(target, "feat")``): each by the last part of its spelling, with the backward."""
    for loop in ast.walk(tree):
        if not isinstance(loop, (ast.For, ast.AsyncFor, ast.While)):
            continue
        calls = list(_calls_in_turn(loop.body))
        for backward in (c for c in calls if _is_backward(c)):
            before = [dotted(c.func) for c in calls if (c.lineno, c.col_offset) < (backward.lineno, backward.col_offset)]
            spelled = [s for s in before if s is not None]
            for name in sorted({s for s in spelled if spelled.count(s) > 1}):
                yield name.rpartition(".")[2], backward


def _calls_in_turn(body: list[ast.stmt]) -> Iterator[ast.Call]:
    """The calls one turn of a loop makes at most once: in no nested loop, comprehension or function."""
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, _REPEATED):
            continue
        if isinstance(node, ast.Call):
            yield node
        stack.extend(ast.iter_child_nodes(node))
