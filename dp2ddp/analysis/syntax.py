"""Matchers and small readings of syntax that every fact, codemod and rule shares."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

import libcst as cst
import libcst.matchers as m
from libcst.metadata import QualifiedNameProvider

from . import names

if TYPE_CHECKING:
    from .module import Analysis


def resolves_to(qualified: Collection[str]) -> m.OneOf[m.BaseMatcherNode]:
    """Matcher for a name or attribute that means one of ``qualified``."""
    means = m.MatchMetadataIfTrue(
        QualifiedNameProvider, lambda found: any(q.name in qualified for q in found)
    )
    return m.Name(metadata=means) | m.Attribute(metadata=means)


def call_to(qualified: Collection[str]) -> m.Call:
    return m.Call(func=resolves_to(qualified))


def string_literal(value: str) -> m.SimpleString:
    """Matcher for a plain string literal spelled with any quotes."""
    return m.SimpleString(m.MatchIfTrue(lambda raw: raw.strip("'\"") == value))


_NO_MODULE = cst.Module([])


def code_of(node: cst.CSTNode) -> str:
    # Most nodes asked about are names and dotted names (`model`, `self.loader`), asked many
    # times over: for those, spelled without parentheses or spaces, the code is their text,
    # and generating it through LibCST would cost a code generator per call.
    if isinstance(node, cst.Name) and not node.lpar:
        return node.value
    if isinstance(node, cst.Attribute) and not node.lpar and _plain_dot(node.dot):
        value = node.value
        if isinstance(value, (cst.Name, cst.Attribute)) and not node.attr.lpar:
            return f"{code_of(value)}.{node.attr.value}"
    return _NO_MODULE.code_for_node(node)


def _plain_dot(dot: cst.Dot) -> bool:
    return all(isinstance(w, cst.SimpleWhitespace) and not w.value for w in (dot.whitespace_before, dot.whitespace_after))




MAIN_GUARD = m.If(
    test=m.Comparison(
        left=m.Name("__name__"),
        comparisons=[m.ComparisonTarget(m.Equal(), string_literal("__main__"))],
    )
    | m.Comparison(
        left=string_literal("__main__"),
        comparisons=[m.ComparisonTarget(m.Equal(), m.Name("__name__"))],
    )
)


VISIBLE_DEVICES = m.Subscript(
    value=m.Attribute(value=m.Name("os"), attr=m.Name("environ")),
    slice=[m.SubscriptElement(m.Index(string_literal("CUDA_VISIBLE_DEVICES")))],
)


def main_guard(module: cst.Module) -> cst.If | None:
    for statement in module.body:
        if m.matches(statement, MAIN_GUARD):
            assert isinstance(statement, cst.If)
            return statement
    return None


def defined_functions(module: cst.Module) -> set[str]:
    """Functions and classes the module defines at its top level."""
    return {s.name.value for s in module.body if isinstance(s, (cst.FunctionDef, cst.ClassDef))}


def script_functions(module: cst.Module, analysis: Analysis | None = None) -> dict[str, cst.FunctionDef]:
    """Functions and methods of the script, by the name a call would use (``f``, ``self.f``).

    With the module's ``analysis``, nested functions come from its index instead of a walk per function.
    """
    functions: dict[str, cst.FunctionDef] = {}
    for statement in module.body:
        if isinstance(statement, cst.FunctionDef):
            functions[statement.name.value] = statement
        elif isinstance(statement, cst.ClassDef):
            for member in statement.body.body:
                if isinstance(member, cst.FunctionDef):
                    functions.setdefault(f"self.{member.name.value}", member)
    # Functions defined inside another one, such as `run_epoch` inside `train`, are called by name.
    for outer in list(functions.values()):
        nested = analysis.within(outer.body, cst.FunctionDef) if analysis is not None else m.findall(outer.body, m.FunctionDef())
        for inner in nested:
            functions.setdefault(inner.name.value, inner)  # type: ignore[attr-defined]
    return functions


def parameter_for(function: cst.FunctionDef, call: cst.Call, arg: cst.Arg) -> str | None:
    """The parameter of ``function`` that ``arg`` of ``call`` binds, or None when it cannot tell."""
    if arg.star:
        return None
    if arg.keyword is not None:
        return arg.keyword.value
    parameters = [p.name.value for p in function.params.params]
    if parameters[:1] == ["self"] and (code_of(call.func).startswith("self.") or function.name.value == "__init__"):
        parameters = parameters[1:]
    position = [a for a in call.args if a.keyword is None].index(arg)
    return parameters[position] if position < len(parameters) else None


DEVICE_MOVE = m.Call(func=m.Attribute(attr=m.Name("cuda") | m.Name("to")))


# A call to one of the reductions convert adds: `all_reduce_mean(loss.item())`.
REDUCTION = m.Call(func=m.Name(m.MatchIfTrue(lambda f: f in names.COLLECTIVE_HELPERS)))


def without_device_move(expression: cst.BaseExpression) -> cst.BaseExpression:
    """``model.cuda()`` or ``model.to(device)`` -> ``model``."""
    if m.matches(expression, DEVICE_MOVE):
        assert isinstance(expression, cst.Call) and isinstance(expression.func, cst.Attribute)
        return expression.func.value
    return expression


def argument(call: cst.Call, position: int, keyword: str) -> cst.BaseExpression | None:
    """The value passed for a parameter, by position or by keyword."""
    positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
    if position < len(positional):
        return positional[position].value
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg.value
    return None
