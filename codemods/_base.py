"""What every dp2ddp codemod shares: findings, script facts, helper placement."""

from __future__ import annotations

import re
from abc import ABC
from dataclasses import dataclass, field
from typing import ClassVar, Collection, Sequence

import libcst as cst
import libcst.matchers as m
from libcst.codemod import CodemodContext, SkipFile, VisitorBasedCodemodCommand
from libcst.codemod.visitors import AddImportsVisitor
from libcst.metadata import PositionProvider, QualifiedNameProvider

from dp2ddp.rules import RULES, Severity

from . import _names as names

FINDINGS_KEY = "dp2ddp.findings"


@dataclass(frozen=True)
class Finding:
    """Something a human must look at, at a 1-based line and column."""

    code: str
    message: str
    line: int
    column: int
    severity: Severity

    def __str__(self) -> str:
        return f"{self.line}:{self.column}: {self.code} {self.message}"


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


def code_of(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


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


def main_guard(module: cst.Module) -> cst.If | None:
    for statement in module.body:
        if m.matches(statement, MAIN_GUARD):
            assert isinstance(statement, cst.If)
            return statement
    return None


def import_torch_distributed(context: CodemodContext, alias: str) -> None:
    """Queue the import that makes ``alias`` (``dist`` or ``torch.distributed``) usable."""
    if alias == "dist":
        AddImportsVisitor.add_needed_import(context, "torch.distributed", asname="dist")
    else:
        AddImportsVisitor.add_needed_import(context, "torch.distributed")


def defined_functions(module: cst.Module) -> set[str]:
    return {s.name.value for s in module.body if isinstance(s, cst.FunctionDef)}


NO_SPACE = cst.SimpleWhitespace("")


def keyword_arg(
    name: str, value: cst.BaseExpression, comma: cst.Comma | cst.MaybeSentinel = cst.MaybeSentinel.DEFAULT
) -> cst.Arg:
    """``name=value``, spelled as PEP 8 spells keyword arguments."""
    return cst.Arg(value, keyword=cst.Name(name), equal=cst.AssignEqual(NO_SPACE, NO_SPACE), comma=comma)


def with_argument(call: cst.Call, arg: cst.Arg) -> cst.Call:
    """``call`` with ``arg`` added after its last argument."""
    args = list(call.args)
    if args and args[-1].comma == cst.MaybeSentinel.DEFAULT:
        args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    return call.with_changes(args=[*args, arg])


def script_functions(module: cst.Module) -> dict[str, cst.FunctionDef]:
    """Functions and methods of the script, by the name a call would use (``f``, ``self.f``)."""
    functions: dict[str, cst.FunctionDef] = {}
    for statement in module.body:
        if isinstance(statement, cst.FunctionDef):
            functions[statement.name.value] = statement
        elif isinstance(statement, cst.ClassDef):
            for member in statement.body.body:
                if isinstance(member, cst.FunctionDef):
                    functions.setdefault(f"self.{member.name.value}", member)
    return functions


DEVICE_MOVE = m.Call(func=m.Attribute(attr=m.Name("cuda") | m.Name("to")))


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


@dataclass
class ScriptFacts:
    """What the codemods need to know about the whole script before editing it."""

    # Any use of a DataParallel name, convertible or not.
    mentions_data_parallel: bool = False
    # DataParallel calls that wrap a whole model, and those that wrap part of one.
    model_wraps: list[cst.Call] = field(default_factory=list)
    submodule_wraps: list[cst.Call] = field(default_factory=list)
    # Calls of the wrap helper: the script was converted before.
    helper_wraps: int = 0
    # A torch.distributed construct the user wrote (not one of dp2ddp's helpers).
    existing_distributed: tuple[cst.CSTNode, str] | None = None
    helpers: set[str] = field(default_factory=set)
    # The script's own `dist` means something other than torch.distributed.
    dist_name_taken: bool = False

    @property
    def distributed_alias(self) -> str:
        """How added code spells torch.distributed: ``dist`` unless that name is taken."""
        return "torch.distributed" if self.dist_name_taken else "dist"

    @property
    def converts_to_ddp(self) -> bool:
        """The model is (or will be) wrapped in DDP, so the rest of the migration applies."""
        return bool(self.model_wraps) or self.helper_wraps > 0


class _FactsCollector(cst.CSTVisitor):
    def __init__(self, codemod: "Dp2ddpCodemod") -> None:
        self.codemod = codemod
        self.facts = ScriptFacts()
        self._functions: list[str] = []
        self._module_classes: list[bool] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._functions.append(node.name.value)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._functions.pop()

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        is_module = any(self.codemod.matches(base.value, resolves_to(names.NN_MODULE)) for base in node.bases)
        self._module_classes.append(is_module)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self._module_classes.pop()

    def visit_Name(self, node: cst.Name) -> None:
        self._note_mention(node)
        if node.value == "dist":
            qualified = self.codemod.get_metadata(QualifiedNameProvider, node, set())
            # Import aliases carry no qualified name; any other meaning is a clash.
            if qualified and not any(q.name.startswith("torch.distributed") for q in qualified):
                self.facts.dist_name_taken = True

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._note_mention(node)

    def _note_mention(self, node: cst.BaseExpression) -> None:
        if self.codemod.matches(node, resolves_to(names.DATA_PARALLEL | names.FUNCTIONAL_DATA_PARALLEL)):
            self.facts.mentions_data_parallel = True

    def visit_Call(self, node: cst.Call) -> None:
        matches = self.codemod.matches
        if matches(node, call_to(names.DATA_PARALLEL)):
            wrapped = argument(node, 0, "module")
            in_module_class = bool(self._module_classes) and self._module_classes[-1]
            # `model.features = DataParallel(model.features)` wraps part of a model.
            part_of_model = wrapped is not None and m.matches(
                without_device_move(wrapped), m.Attribute(value=m.Name() & ~m.Name("self"))
            )
            if in_module_class or part_of_model:
                self.facts.submodule_wraps.append(node)
            elif wrapped is not None:
                self.facts.model_wraps.append(node)
        if m.matches(node.func, m.Name(names.WRAP_HELPER)):
            self.facts.helper_wraps += 1
        inside_helper = any(f in names.HELPERS for f in self._functions)
        if self.facts.existing_distributed is None and not inside_helper:
            if matches(node, call_to(names.DISTRIBUTED_DATA_PARALLEL)):
                self.facts.existing_distributed = (node, "DistributedDataParallel")
            elif matches(node, call_to(names.INIT_PROCESS_GROUP)):
                self.facts.existing_distributed = (node, "init_process_group")


class Dp2ddpCodemod(VisitorBasedCodemodCommand, ABC):
    """Base of every dp2ddp codemod.

    It skips scripts the user already made distributed, so that a script with
    its own DDP path is left byte-identical, and scripts with no
    DataParallel at all, which dp2ddp does not migrate.
    """

    METADATA_DEPENDENCIES: ClassVar[Sequence[type]] = (PositionProvider, QualifiedNameProvider)
    # Most codemods only make sense once the model is wrapped in DDP; the one
    # that does the wrapping runs wherever DataParallel is mentioned.
    RUNS_ON_MENTION: ClassVar[bool] = False

    facts: ScriptFacts

    def matches(self, node: cst.CSTNode, matcher: m.BaseMatcherNode) -> bool:
        return m.matches(node, matcher, metadata_resolver=self)

    def visit_Module(self, node: cst.Module) -> bool:
        collector = _FactsCollector(self)
        node.visit(collector)
        self.facts = collector.facts
        self.facts.helpers = defined_functions(node)
        existing = self.facts.existing_distributed
        if existing is not None:
            found, what = existing
            self.report(found, "DDP001", what=what)
            raise SkipFile(f"already uses torch.distributed ({what})")
        if not (self.facts.mentions_data_parallel if self.RUNS_ON_MENTION else self.facts.converts_to_ddp):
            raise SkipFile("no nn.DataParallel wrap of a whole model in this file")
        return True

    def report(self, node: cst.CSTNode, code: str, **values: object) -> None:
        """Record a finding at ``node`` for the migration report."""
        rule = RULES[code]
        start = self.get_metadata(PositionProvider, node).start
        finding = Finding(code, rule.message.format(**values), start.line, start.column + 1, rule.severity)
        self.context.scratch.setdefault(FINDINGS_KEY, []).append(finding)
        self.warn(str(finding))


def _is_import_line(statement: cst.CSTNode) -> bool:
    if isinstance(statement, cst.SimpleStatementLine):
        return all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in statement.body)
    if isinstance(statement, cst.Try):
        # `try: import apex / except ImportError: ...` belongs to the import block.
        return all(_is_import_line(s) for s in statement.body.body)
    return False


def helper_insertion_index(module: cst.Module) -> int:
    """Index after the leading imports, where dp2ddp puts the helpers it adds."""
    index = 0
    for position, statement in enumerate(module.body):
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)) or m.matches(statement, MAIN_GUARD):
            break
        if _is_import_line(statement) or (position == 0 and m.matches(statement, m.SimpleStatementLine([m.Expr(m.SimpleString())]))):
            index = position + 1
    return index


def parse_helper(source: str) -> cst.FunctionDef:
    """Parse a helper template into a function with two blank lines before it."""
    statement = cst.parse_statement(source)
    assert isinstance(statement, cst.FunctionDef)
    return statement.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])


def add_helper(module: cst.Module, facts: ScriptFacts, name: str, source: str) -> cst.Module:
    """Add helper ``name`` once, spelling torch.distributed as the script can."""
    if name in facts.helpers:
        return module
    facts.helpers.add(name)
    if facts.distributed_alias != "dist":
        source = re.sub(r"\bdist\.", f"{facts.distributed_alias}.", source)
    return insert_helper(module, parse_helper(source))


def insert_helper(module: cst.Module, helper: cst.FunctionDef) -> cst.Module:
    """Insert ``helper`` right after the leading imports."""
    body = list(module.body)
    index = helper_insertion_index(module)
    if index < len(body):
        follower = body[index]
        # Keep PEP 8's two blank lines between the helper and the code after it.
        blank_lines = sum(1 for line in follower.leading_lines if line.comment is None)
        missing = [cst.EmptyLine()] * max(0, 2 - blank_lines)
        body[index] = follower.with_changes(leading_lines=[*missing, *follower.leading_lines])
    body.insert(index, helper)
    return module.with_changes(body=body)
