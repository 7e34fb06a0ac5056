"""What every dp2ddp codemod shares: findings, script facts, helper placement."""

from __future__ import annotations

import re
from abc import ABC
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import libcst as cst
import libcst.matchers as m
from libcst.codemod import CodemodCommand, CodemodContext, SkipFile
from libcst.codemod.visitors import AddImportsVisitor
from libcst.metadata import ClassScope, GlobalScope, QualifiedNameProvider

from dp2ddp.rules import RULES, Severity

from . import _names as names
from ._analysis import MISSING as _MISSING

FINDINGS_KEY = "dp2ddp.findings"
# Set in a context whose findings nobody reads, such as the stability check's.
QUIET_KEY = "dp2ddp.quiet"

if TYPE_CHECKING:
    from ._analysis import Analysis


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


VISIBLE_DEVICES = m.Subscript(
    value=m.Attribute(value=m.Name("os"), attr=m.Name("environ")),
    slice=[m.SubscriptElement(m.Index(string_literal("CUDA_VISIBLE_DEVICES")))],
)


def entry_point(analysis: "Analysis") -> str | None:
    """Where ``setup_distributed()`` goes: "main" (the entry guard), "top" (after the imports) or nowhere.

    Training code at module level needs the process group as soon as the
    script runs; otherwise the ``if __name__ == "__main__":`` block starts it,
    and everything else at module level runs at import, before setup.
    """
    module = analysis.module
    needs = m.Call(func=m.Name(names.WRAP_HELPER)) | call_to(names.DATA_PARALLEL | names.DATA_LOADER | names.DISTRIBUTED_SAMPLER)
    top_level_training = any(
        analysis.findall_in(statement, needs)
        for statement in module.body
        if not isinstance(statement, (cst.FunctionDef, cst.ClassDef)) and not m.matches(statement, MAIN_GUARD)
    )
    if top_level_training:
        return "top"
    if main_guard(module) is not None:
        return "main"
    return None


def main_guard(module: cst.Module) -> cst.If | None:
    for statement in module.body:
        if m.matches(statement, MAIN_GUARD):
            assert isinstance(statement, cst.If)
            return statement
    return None


def import_torch_distributed(context: CodemodContext, alias: str) -> None:
    """Queue the import that makes ``alias`` (``dist``, ``torch.distributed`` or another name) usable."""
    if "." in alias:
        AddImportsVisitor.add_needed_import(context, alias)
    else:
        AddImportsVisitor.add_needed_import(context, "torch.distributed", asname=alias)


def bound_in_enclosing_scope(analysis: Analysis, node: cst.CSTNode, name: str) -> bool:
    """Whether ``name`` at ``node`` means something a function, comprehension or class body binds, not the module.

    A function that binds ``dist`` anywhere in its body (``import torch.distributed as dist``
    after the loader is built, a parameter, an assignment) makes every ``dist`` in it local:
    a module-level alias read there raises ``UnboundLocalError`` or means the user's value.
    """
    scope = analysis.scopes.get(node)
    innermost = True
    while scope is not None and not isinstance(scope, GlobalScope):
        # A class body's names are not visible in the functions defined in it.
        if (innermost or not isinstance(scope, ClassScope)) and name in scope.assignments:
            return True
        innermost = False
        scope = scope.parent
    return False


def distributed_alias_at(analysis: Analysis, node: cst.CSTNode) -> str:
    """How code inserted at ``node`` spells torch.distributed, so that no local name shadows it.

    The module-wide alias (``dist``) where nothing local binds it, else ``torch.distributed``,
    else a module-level alias no code of the file uses.
    """
    module_alias = analysis.script_facts.distributed_alias
    for alias in (module_alias, "torch.distributed"):
        if not bound_in_enclosing_scope(analysis, node, alias.split(".")[0]):
            return alias
    used = {name.value for name in analysis.nodes(cst.Name)}
    alias = "torch_distributed"
    while alias in used:
        alias = f"{alias}_"
    return alias


def defined_functions(module: cst.Module) -> set[str]:
    """Functions and classes the module defines at its top level."""
    return {s.name.value for s in module.body if isinstance(s, (cst.FunctionDef, cst.ClassDef))}


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


@dataclass
class ScriptFacts:
    """What the codemods need to know about the whole script before editing it."""

    # Any use of a DataParallel name, convertible or not.
    mentions_data_parallel: bool = False
    # DataParallel calls that wrap a whole model, and those that wrap part of one.
    model_wraps: list[cst.Call] = field(default_factory=list)
    submodule_wraps: list[cst.Call] = field(default_factory=list)
    # DataParallel calls whose name a star import may bind: what they mean is unknown.
    unresolved_wraps: list[cst.Call] = field(default_factory=list)
    # Calls of the wrap helper: the script was converted before.
    helper_wraps: int = 0
    # A torch.distributed construct the user wrote (not one of dp2ddp's helpers).
    existing_distributed: tuple[cst.CSTNode, str] | None = None
    helpers: set[str] = field(default_factory=set)
    # The script's own module-level `dist` means something other than torch.distributed.
    dist_name_taken: bool = False

    @property
    def distributed_alias(self) -> str:
        """How module-level helpers spell torch.distributed: ``dist`` unless the module takes that name.

        Code inserted inside a function asks ``distributed_alias_at``, which also
        avoids the names that function binds.
        """
        return "torch.distributed" if self.dist_name_taken else "dist"

    @property
    def converts_to_ddp(self) -> bool:
        """The model is (or will be) wrapped in DDP, so the rest of the migration applies."""
        return bool(self.model_wraps) or self.helper_wraps > 0


def collect_script_facts(analysis: Analysis) -> ScriptFacts:
    """The whole-script facts every codemod starts from, read off the analysis's index."""
    facts = ScriptFacts()

    def means(node: cst.CSTNode, qualified: Collection[str]) -> bool:
        return any(q.name in qualified for q in analysis.qualified_names(node))

    # Spellings that can mean DataParallel here: its own names and what imports bind them to.
    spellings = {"DataParallel", "data_parallel"}
    for alias in analysis.nodes(cst.ImportAlias):
        if code_of(alias.name).rsplit(".", 1)[-1] in spellings and alias.asname is not None:
            spellings.add(code_of(alias.asname.name))
    data_parallel = names.DATA_PARALLEL | names.FUNCTIONAL_DATA_PARALLEL
    mentions = [n for n in analysis.nodes(cst.Name) if n.value in spellings]
    mentions += [n for n in analysis.nodes(cst.Attribute) if n.attr.value in spellings]
    facts.mentions_data_parallel = any(means(node, data_parallel) for node in mentions)
    if analysis.nodes(cst.ImportStar):
        # `from models import *` may bind `torch` or `nn`: a spelling of DataParallel that
        # resolves to nothing could be torch's, and nothing about it can be established.
        for call in analysis.nodes(cst.Call):
            spelled = call.func.attr if isinstance(call.func, cst.Attribute) else call.func
            if isinstance(spelled, cst.Name) and spelled.value == "DataParallel" and not means(call.func, data_parallel):
                facts.unresolved_wraps.append(call)
        facts.mentions_data_parallel |= bool(facts.unresolved_wraps)
    for name in analysis.nodes(cst.Name):
        if name.value == "dist" and not bound_in_enclosing_scope(analysis, name, "dist"):
            qualified = analysis.qualified_names(name)
            # Import aliases carry no qualified name; any other meaning is a clash. A `dist`
            # that a function binds for itself is no clash here: code inserted in that
            # function spells torch.distributed another way (distributed_alias_at).
            if qualified and not any(q.name.startswith("torch.distributed") for q in qualified):
                facts.dist_name_taken = True
                break
    for call in analysis.nodes(cst.Call):
        if analysis.matches(call, call_to(names.DATA_PARALLEL)):
            wrapped = argument(call, 0, "module")
            # `model.features = DataParallel(model.features)` wraps part of a model.
            part_of_model = wrapped is not None and m.matches(
                without_device_move(wrapped), m.Attribute(value=m.Name() & ~m.Name("self"))
            )
            if _in_module_class(analysis, call) or part_of_model:
                facts.submodule_wraps.append(call)
            elif wrapped is not None:
                facts.model_wraps.append(call)
        if m.matches(call.func, m.Name(names.WRAP_HELPER)):
            facts.helper_wraps += 1
        if facts.existing_distributed is None and not inside_helper(analysis, call):
            if analysis.matches(call, call_to(names.DISTRIBUTED_DATA_PARALLEL)):
                facts.existing_distributed = (call, "DistributedDataParallel")
            elif analysis.matches(call, call_to(names.INIT_PROCESS_GROUP)):
                facts.existing_distributed = (call, "init_process_group")
    facts.helpers = defined_functions(analysis.module)
    return facts


def _in_module_class(analysis: Analysis, node: cst.CSTNode) -> bool:
    """Whether the innermost class around ``node`` is an ``nn.Module``."""
    for ancestor in analysis.ancestors(node):
        if isinstance(ancestor, cst.ClassDef):
            return any(analysis.matches(base.value, resolves_to(names.NN_MODULE)) for base in ancestor.bases)
    return False


def inside_helper(analysis: Analysis, node: cst.CSTNode) -> bool:
    """Whether ``node`` is in one of the helpers dp2ddp adds (``wrap_ddp``, ``all_reduce_sum``, ...)."""
    return any(isinstance(a, (cst.FunctionDef, cst.ClassDef)) and a.name.value in names.HELPERS for a in analysis.ancestors(node))


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
        # A converted file still runs the codemods that report, so a second run names the hazards left.
        mentioned = self.facts.mentions_data_parallel or self.facts.helper_wraps > 0
        if not (mentioned if self.RUNS_ON_MENTION else self.facts.converts_to_ddp):
            raise SkipFile("no nn.DataParallel wrap of a whole model in this file")
        if not self.RUNS_ON_MENTION and analysis.lifecycle.blocked:
            raise SkipFile("the model's life-cycle has a hazard no edit makes safe; the file is left as it was")

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        """LibCST's runner: analyse the tree, plan, and apply this codemod alone."""
        from ._analysis import Analysis
        from ._chain import ChainedTransformer

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
    if name in defined_functions(module):
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
