"""What the codemods that follow the global batch share: the ``--batch`` option, and when a line may ask for the world size.

A converted script learns its world size from the process group, which
``setup_distributed()`` starts at the entry point. A line that runs before it,
at import, cannot call ``dist.get_world_size()``; such lines are reported, not edited.
"""

from __future__ import annotations

import argparse

import libcst as cst
import libcst.matchers as m

from dp2ddp.analysis.module import Analysis
from dp2ddp.analysis.syntax import MAIN_GUARD, VISIBLE_DEVICES
from dp2ddp.analysis.script import entry_point
from ._base import helper_insertion_index

GLOBAL, PER_PROCESS = "global", "per-process"


def add_batch_args(arg_parser: argparse.ArgumentParser) -> None:
    """``--batch`` for LibCST's runner, spelled as ``dp2ddp convert`` spells it."""
    arg_parser.add_argument(
        "--batch",
        choices=(GLOBAL, PER_PROCESS),
        default=GLOBAL,
        help="global: each process loads batch // world_size; per-process: each process loads the whole batch "
        "and the learning rate is scaled by the world size.",
    )
    # The option's old spelling.
    arg_parser.add_argument("--keep-per-process-batch", dest="keep_per_process_batch", action="store_true", help=argparse.SUPPRESS)


def times_world_size(value: cst.BaseExpression, distributed: str) -> cst.BinaryOperation:
    """``value * dist.get_world_size()``, with ``value`` in parentheses where it binds less tightly than ``*``."""
    tight = m.Name() | m.Attribute() | m.Integer() | m.Float() | m.Call() | m.Subscript() | m.UnaryOperation()
    products = m.BinaryOperation(operator=m.Multiply() | m.Divide() | m.FloorDivide() | m.Modulo() | m.Power())
    if not m.matches(value, tight | products) and not value.lpar:
        value = value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    world_size = cst.Call(func=cst.parse_expression(f"{distributed}.get_world_size"))
    return cst.BinaryOperation(left=value, operator=cst.Multiply(), right=world_size)


def asks_world_size(analysis: Analysis, node: cst.CSTNode) -> bool:
    """Whether ``node`` already calls ``get_world_size()``: converted before."""
    return bool(analysis.findall_in(node, m.Call(func=m.Attribute(attr=m.Name("get_world_size")) | m.Name("get_world_size"))))


def runs_after_setup(analysis: Analysis, node: cst.CSTNode) -> bool:
    """Whether ``node`` runs after the converted script's ``setup_distributed()`` started the process group.

    Setup goes first in the ``__main__`` block (after a ``CUDA_VISIBLE_DEVICES``
    assignment there), or, for a script that trains at module level, right
    after its imports. Functions and methods run when they are called: after
    setup, unless a module-level line that runs before it calls them.
    """
    entry = entry_point(analysis)
    if entry is None:
        return False
    module = analysis.module
    chain = [node, *analysis.ancestors(node)]
    top = next((a for a in chain if analysis.parents.get(a) is module), None)
    if top is None:
        return False
    if isinstance(top, cst.ClassDef):
        return True
    if isinstance(top, cst.FunctionDef):
        callers = analysis.findall(m.Call(func=m.Name(top.name.value)))
        return all(_after_setup_at_module_level(analysis, caller, entry) for caller in callers)
    return _after_setup_at_module_level(analysis, node, entry)


def _after_setup_at_module_level(analysis: Analysis, node: cst.CSTNode, entry: str) -> bool:
    """For a line that is not in a function or class: whether it runs after setup."""
    module = analysis.module
    chain = [node, *analysis.ancestors(node)]
    if any(isinstance(a, (cst.FunctionDef, cst.ClassDef, cst.Lambda)) for a in chain):
        return True
    top = next(a for a in chain if analysis.parents.get(a) is module)
    if m.matches(top, MAIN_GUARD):
        # Setup goes after the guard's own CUDA_VISIBLE_DEVICES assignments.
        visible = analysis.findall_in(top, VISIBLE_DEVICES)
        return entry == "top" or all(analysis.is_after(node, a) for a in visible)
    if entry != "top":
        return False  # runs at import, before the `__main__` block sets up
    body = list(module.body)
    position = body.index(top)  # type: ignore[arg-type]
    visible = [body.index(s) for s in body if analysis.findall_in(s, VISIBLE_DEVICES) and not m.matches(s, MAIN_GUARD)]
    return position >= helper_insertion_index(module) and all(position > v for v in visible)
