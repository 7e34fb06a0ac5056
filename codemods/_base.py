"""What every dp2ddp codemod shares: findings, the plan-then-edit base class, helper placement."""

from __future__ import annotations

import re
from abc import ABC
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import libcst as cst
import libcst.matchers as m
from libcst.codemod import CodemodCommand, CodemodContext, SkipFile
from libcst.codemod.visitors import AddImportsVisitor

from dp2ddp.analysis.module import MISSING as _MISSING
from dp2ddp.analysis.module import Analysis
from dp2ddp.analysis.script import ScriptFacts, distributed_alias_at
from dp2ddp.analysis.syntax import MAIN_GUARD, defined_functions
from dp2ddp.rules import RULES, Severity

from ._chain import ChainedTransformer

FINDINGS_KEY = "dp2ddp.findings"
# Set in a context whose findings nobody reads, such as the stability check's.
QUIET_KEY = "dp2ddp.quiet"

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


def import_torch_distributed(context: CodemodContext, alias: str) -> None:
    """Queue the import that makes ``alias`` (``dist``, ``torch.distributed`` or another name) usable."""
    if "." in alias:
        AddImportsVisitor.add_needed_import(context, alias)
    else:
        AddImportsVisitor.add_needed_import(context, "torch.distributed", asname=alias)


NO_SPACE = cst.SimpleWhitespace("")


def keyword_arg(
    name: str, value: cst.BaseExpression, comma: cst.Comma | cst.MaybeSentinel = cst.MaybeSentinel.DEFAULT
) -> cst.Arg:
    """``name=value``, spelled as PEP 8 spells keyword arguments."""
    return cst.Arg(value, keyword=cst.Name(name), equal=cst.AssignEqual(NO_SPACE, NO_SPACE), comma=comma)


def with_argument(call: cst.Call, arg: cst.Arg) -> cst.Call:
    """``call`` with ``arg`` added after its last argument.

    In a call laid out one argument per line, with ``)`` on a line of its own, the new argument gets a
    line of its own too, indented as the last one, and ``)`` stays where it was.
    """
    args = list(call.args)
    if args and args[-1].comma == cst.MaybeSentinel.DEFAULT:
        last = args[-1]
        closing = last.whitespace_after_arg
        if isinstance(closing, cst.ParenthesizedWhitespace):
            # The whitespace before the last argument: its line break and indentation.
            before = args[-2].comma.whitespace_after if len(args) > 1 and isinstance(args[-2].comma, cst.Comma) else call.whitespace_before_args
            if isinstance(before, cst.ParenthesizedWhitespace):
                args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=before), whitespace_after_arg=cst.SimpleWhitespace(""))
                return call.with_changes(args=[*args, arg.with_changes(whitespace_after_arg=closing)])
        args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    return call.with_changes(args=[*args, arg])


def prepend_statements(suite: cst.BaseSuite, statements: Sequence[cst.BaseStatement]) -> cst.IndentedBlock:
    """``suite`` with ``statements`` first; a one-line suite (``for e in r: train()``) becomes a block."""
    if isinstance(suite, cst.IndentedBlock):
        return suite.with_changes(body=[*statements, *suite.body])
    assert isinstance(suite, cst.SimpleStatementSuite)
    small = list(suite.body)
    # The last small statement of a one-line suite may carry a `;` that a line of its own does not need.
    small[-1] = small[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
    line = cst.SimpleStatementLine(body=small, trailing_whitespace=suite.trailing_whitespace)
    return cst.IndentedBlock(body=[*statements, line])


class Dp2ddpCodemod(CodemodCommand, ABC):
    """Base of every dp2ddp codemod.

    A codemod plans against an ``Analysis`` of the tree, which resolves
    metadata once for every codemod that plans against the same tree, and
    then makes its edits in its ``visit_<Node>``/``leave_<Node>`` methods,
    which one shared traversal (``ChainedTransformer``) calls. It is not a
    transformer itself: LibCST's matcher-decorator machinery, which every
    transformer instance pays for on construction, would go unused. Under
    LibCST's own runner it analyses the tree itself and runs alone.

    It skips scripts the user already made distributed, so that a script with
    its own DDP path is left byte-identical, and scripts with no
    DataParallel at all, which dp2ddp does not migrate.
    """

    # The analysis resolves metadata once for all codemods; LibCST resolves nothing itself.
    METADATA_DEPENDENCIES: ClassVar[Sequence[type]] = ()
    # Most codemods only make sense once the model is wrapped in DDP; the one
    # that does the wrapping runs wherever DataParallel is mentioned.
    RUNS_ON_MENTION: ClassVar[bool] = False
    # In a project, a module with no model of its own may hold functions that converted
    # modules call to write files: only the codemod that guards writes runs there.
    GUARDS_HELPERS: ClassVar[bool] = False

    analysis: Analysis
    facts: ScriptFacts
    # Each original statement of this traversal -> what the codemods before and
    # including this one turned it into; filled by the ChainedTransformer.
    became: dict[cst.CSTNode, object]

    def get_metadata(self, key: object, node: cst.CSTNode, default: object = _MISSING) -> object:  # type: ignore[override]
        return self.analysis.get_metadata(key, node, default)

    def matches(self, node: cst.CSTNode, matcher: m.BaseMatcherNode) -> bool:
        return m.matches(node, matcher, metadata_resolver=self.analysis)

    def plan(self, analysis: Analysis) -> None:
        """Decide every edit against ``analysis``; raise ``SkipFile`` when none applies."""
        self.analysis = analysis
        self.facts = analysis.script_facts
        existing = self.facts.existing_distributed
        if existing is not None:
            found, what = existing
            self.report(found, "DDP001", what=what)
            raise SkipFile(f"already uses torch.distributed ({what})")
        role = analysis.role
        if role.guard_only and not self.GUARDS_HELPERS:
            raise SkipFile("converted only for the writes of functions that converted modules call")
        # A converted file still runs the codemods that report, so a second run names the hazards left.
        mentioned = self.facts.mentions_data_parallel or self.facts.helper_wraps > 0 or bool(self.facts.imported_wraps)
        if not (mentioned if self.RUNS_ON_MENTION else self.facts.converts_to_ddp or role.converts):
            raise SkipFile("no nn.DataParallel wrap of a whole model in this file")
        if not self.RUNS_ON_MENTION and analysis.lifecycle.blocked:
            raise SkipFile("the model's life-cycle has a hazard no edit makes safe; the file is left as it was")

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        """LibCST's runner: analyse the tree, plan, and apply this codemod alone."""
        analysis = Analysis(tree)
        self.plan(analysis)
        return tree.visit(ChainedTransformer([self]))

    def distributed_at(self, node: cst.CSTNode) -> str:
        """Spell torch.distributed for code inserted at ``node`` of the analysed tree, and queue its import."""
        alias = distributed_alias_at(self.analysis, node)
        import_torch_distributed(self.context, alias)
        return alias

    def report(self, node: cst.CSTNode, code: str, **values: object) -> None:
        """Record a finding at ``node`` for the migration report."""
        if self.context.scratch.get(QUIET_KEY):
            return  # Positions are resolved only for reports someone reads.
        rule = RULES[code]
        start = self.analysis.position(node).start
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


def parse_helper(source: str) -> cst.FunctionDef | cst.ClassDef:
    """Parse a helper template into a function or class with two blank lines before it."""
    statement = cst.parse_statement(source)
    assert isinstance(statement, (cst.FunctionDef, cst.ClassDef))
    return statement.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])


def add_helper(module: cst.Module, facts: ScriptFacts, name: str, source: str) -> cst.Module:
    """Add helper ``name`` once, spelling torch.distributed as the script can."""
    if name in defined_functions(module) or name in facts.helpers:
        return module
    if facts.distributed_alias != "dist":
        source = re.sub(r"\bdist\.", f"{facts.distributed_alias}.", source)
    return insert_helper(module, parse_helper(source))


def insert_helper(module: cst.Module, helper: cst.FunctionDef | cst.ClassDef) -> cst.Module:
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
