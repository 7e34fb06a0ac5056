"""Several codemods, one traversal.

Codemods that plan against the same tree make their edits in one walk: at
each node, every codemod's ``visit_<Node>`` runs in order, and on the way
back every codemod's ``leave_<Node>`` runs in order, each given what the
codemods before it made of the node. This is what running them one after
another would do, without re-parsing and re-resolving metadata in between.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import libcst as cst
from libcst.codemod import CodemodContext
import libcst.matchers as m
from libcst.codemod.visitors import AddImportsVisitor, ImportItem, RemoveImportsVisitor
from libcst.helpers import get_absolute_module_from_package_for_import

if TYPE_CHECKING:
    from ._base import Dp2ddpCodemod


class ChainedTransformer(cst.CSTTransformer):
    def __init__(self, codemods: Sequence[Dp2ddpCodemod]) -> None:
        super().__init__()
        self.codemods = list(codemods)
        # A codemod whose visit_<Node> returned False sees nothing below that node,
        # as LibCST promises a single transformer.
        self._suppressed_at: dict[int, cst.CSTNode] = {}
        self.became: dict[cst.CSTNode, object] = {}
        # The codemod whose method runs now: the one to name if it raises.
        self.active: Dp2ddpCodemod | None = None
        # Whether any leave method returned something other than what it was given: until
        # then the traversal has only rebuilt the tree it was given, and its code is unchanged.
        self.edited = False
        # Node type -> the codemods' visit_<Node> (and leave_<Node>) methods, with each codemod's
        # place in the chain: a traversal meets every node, and most codemods have no method
        # for most types, so each type's methods are looked up once, not at every node.
        self._visits: dict[type, list[tuple[int, Dp2ddpCodemod, Callable[..., object]]]] = {}
        self._leaves: dict[type, list[tuple[int, Dp2ddpCodemod, Callable[..., object]]]] = {}
        for codemod in self.codemods:
            codemod.became = self.became

    def _methods(
        self, table: dict[type, list[tuple[int, Dp2ddpCodemod, Callable[..., object]]]], prefix: str, kind: type
    ) -> list[tuple[int, Dp2ddpCodemod, Callable[..., object]]]:
        methods = table.get(kind)
        if methods is None:
            found = ((index, codemod, getattr(codemod, f"{prefix}{kind.__name__}", None)) for index, codemod in enumerate(self.codemods))
            methods = table[kind] = [(index, codemod, method) for index, codemod, method in found if method is not None]
        return methods

    def on_visit(self, node: cst.CSTNode) -> bool:
        # Until this node is left, an error (LibCST rebuilding a child) is the last visiting codemod's to name.
        listening = [c for i, c in enumerate(self.codemods) if i not in self._suppressed_at] if self._suppressed_at else self.codemods
        for index, codemod, visit in self._methods(self._visits, "visit_", type(node)):
            if index in self._suppressed_at:
                continue
            self.active = codemod
            if visit(node) is False:
                self._suppressed_at[index] = node
        if listening:
            self.active = listening[-1]
        return True

    def on_leave(
        self, original_node: cst.CSTNode, updated_node: cst.CSTNode
    ) -> cst.CSTNode | cst.RemovalSentinel | cst.FlattenSentinel[cst.CSTNode]:
        result: cst.CSTNode | cst.RemovalSentinel | cst.FlattenSentinel[cst.CSTNode] = updated_node
        # A codemod whose visit returned False at this node leaves it, and then sees the rest.
        for index, suppressed_at in list(self._suppressed_at.items()):
            if suppressed_at is original_node:
                del self._suppressed_at[index]
        for index, codemod, leave in self._methods(self._leaves, "leave_", type(original_node)):
            if index in self._suppressed_at:
                continue
            self.active = codemod
            given = result
            result = _apply(leave, original_node, result)  # type: ignore[arg-type]
            if result is not given:
                self.edited = True
        if isinstance(original_node, cst.BaseStatement):
            self.became[original_node] = result
        self.active = None
        return result


def _apply(
    leave: object,
    original: cst.CSTNode,
    current: cst.CSTNode | cst.RemovalSentinel | cst.FlattenSentinel[cst.CSTNode],
) -> cst.CSTNode | cst.RemovalSentinel | cst.FlattenSentinel[cst.CSTNode]:
    """Run one codemod's leave method on what the node has become so far.

    A node an earlier codemod expanded into several (``FlattenSentinel``) is
    still there as the last of them of its own type, e.g. the loop after which
    reductions were added; one that was removed has nothing left to edit.
    """
    if isinstance(current, cst.CSTNode):
        return leave(original, current)  # type: ignore[operator]
    if isinstance(current, cst.FlattenSentinel):
        nodes = list(current.nodes)
        same = [i for i, node in enumerate(nodes) if type(node) is type(original)]
        if not same:
            return current
        index = same[-1]
        edited = leave(original, nodes[index])  # type: ignore[operator]
        if isinstance(edited, cst.FlattenSentinel):
            replacement = list(edited.nodes)
        elif isinstance(edited, cst.RemovalSentinel):
            replacement = []
        else:
            replacement = [edited]
        return cst.FlattenSentinel([*nodes[:index], *replacement, *nodes[index + 1 :]])
    return current


def apply_queued_imports(tree: cst.Module, contexts: Sequence[CodemodContext], added: set[object]) -> cst.Module:
    """Add and remove the imports each codemod queued, codemod by codemod, as LibCST's runner does.

    An import an earlier codemod already added (``added``, kept across
    groups) is at the top already, so asking again changes nothing and costs
    nothing. The additions are made by ``add_imports_at_top`` on the module's
    list of statements, not by a transformer: LibCST's ``AddImportsVisitor``
    would cost two matcher-decoratable visitors per codemod (each scans its own
    class for decorated methods when it is built), more than a parse of the file.
    """
    for context in contexts:
        queued = context.scratch.get(AddImportsVisitor.CONTEXT_KEY, [])
        new = [request for request in queued if request not in added]
        if new:
            added.update(new)
            context.scratch[AddImportsVisitor.CONTEXT_KEY] = new
            tree = add_imports_at_top(tree, new)
        if RemoveImportsVisitor.CONTEXT_KEY in context.scratch:
            tree = RemoveImportsVisitor(context).transform_module(tree)
    return tree


def _is_import_line(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and isinstance(statement.body[0], (cst.Import, cst.ImportFrom))


def _opens_with_docstring_or_strict(module: cst.Module) -> bool:
    """Whether the first statement is a docstring or ``__strict__ = ...``, which imports never go above."""
    first = module.body[0] if module.body else None
    if not isinstance(first, cst.SimpleStatementLine) or not first.body:
        return False
    if len(first.body) != 1:
        return False
    small = first.body[0]
    if isinstance(small, cst.Expr):
        return isinstance(small.value, cst.SimpleString)
    return m.matches(small, m.Assign(targets=[m.AssignTarget(target=m.Name("__strict__"))]))


def add_imports_at_top(module: cst.Module, requests: Sequence[ImportItem]) -> cst.Module:
    """``module`` with the imports ``requests`` ask for, as one ``AddImportsVisitor`` run would add them.

    The same output, byte for byte, so that a converted file does not depend
    on which of the two made it: only the block of one-import lines at the top
    (after a docstring) counts as already importing something; a name asked
    from a module that block already imports from joins that line, sorted, in
    front of its names; the rest go at the end of the block in LibCST's order
    (``__future__`` first, then ``import m`` sorted, ``import m as a`` as asked,
    ``from m import ...`` sorted by module and name), and the code after the
    block keeps a blank line above it.
    """
    items = [item.resolve_relative(None) for item in requests]
    plain = {item.module for item in items if item.obj_name is None and item.alias is None}
    aliased: dict[str, str] = {}
    for item in items:
        if item.obj_name is None and item.alias is not None:
            aliased[item.module] = item.alias  # the last alias asked, in the order first asked
    objects: dict[str, set[str]] = {}
    renamed: dict[str, list[tuple[str, str]]] = {}
    for item in sorted(items, key=lambda i: i.module):
        if item.obj_name is not None and item.alias is None:
            objects.setdefault(item.module, set()).add(item.obj_name)
        elif item.obj_name is not None:
            renamed.setdefault(item.module, []).append((item.obj_name, item.alias))  # type: ignore[arg-type]

    body = list(module.body)
    start = 1 if _opens_with_docstring_or_strict(module) else 0
    end = start
    while end < len(body) and _is_import_line(body[end]):
        end += 1
    top = [line.body[0] for line in body[start:end]]  # type: ignore[attr-defined]

    # What the top block imports already is not asked again; a module imported under
    # several aliases counts under the last of them.
    top_plain: set[str] = set()
    top_aliased: dict[str, str] = {}
    top_objects: dict[str, set[str]] = {}
    top_renamed: dict[str, list[tuple[str, str]]] = {}
    for statement in top:
        if isinstance(statement, cst.Import):
            for alias in statement.names:
                if alias.asname is not None:
                    top_aliased[alias.evaluated_name] = alias.evaluated_alias  # type: ignore[assignment]
                else:
                    top_plain.add(alias.evaluated_name)
            continue
        source = get_absolute_module_from_package_for_import(None, statement)
        if source is None:
            continue
        if isinstance(statement.names, cst.ImportStar):
            top_objects[source] = {"*"}
            continue
        top_renamed.setdefault(source, []).extend(
            (alias.evaluated_name, alias.evaluated_alias) for alias in statement.names if alias.asname is not None  # type: ignore[misc]
        )
        names = {alias.evaluated_name for alias in statement.names if alias.asname is None}
        if names:
            known = top_objects.setdefault(source, set())
            if "*" not in known:
                known.update(names)
    plain -= top_plain
    for name, alias in top_aliased.items():
        if aliased.get(name) == alias:
            del aliased[name]
    for source, pairs in top_renamed.items():
        for pair in pairs:
            if pair in renamed.get(source, ()):
                renamed[source].remove(pair)
                if not renamed[source]:
                    del renamed[source]
    for source, names in top_objects.items():
        if source in objects:
            objects[source] = set() if "*" in names else objects[source] - names
            if not objects[source]:
                del objects[source]
    if not (plain or objects or aliased or renamed):
        return module

    # Names from a module the top block imports from join its first such line.
    for position, statement in enumerate(top, start):
        if not isinstance(statement, cst.ImportFrom) or isinstance(statement.names, cst.ImportStar):
            continue
        source = get_absolute_module_from_package_for_import(None, statement)
        if source is None or (source not in objects and source not in renamed):
            continue
        joined = [cst.ImportAlias(name=cst.Name(name)) for name in sorted(objects.pop(source, ()))]
        joined += [
            cst.ImportAlias(name=cst.Name(name), asname=cst.AsName(name=cst.Name(alias)))
            for name, alias in sorted(renamed.pop(source, ()))
        ]
        line = body[position]
        body[position] = line.with_changes(body=[statement.with_changes(names=[*joined, *statement.names])])  # type: ignore[attr-defined]
    if not (plain or objects or aliased or renamed):
        return module.with_changes(body=body)

    after = body[end:]
    if after:
        first = after[0]
        if not first.leading_lines:
            after[0] = first.with_changes(leading_lines=(cst.EmptyLine(),))
        elif first.leading_lines[0].comment is not None:
            after[0] = first.with_changes(leading_lines=(cst.EmptyLine(), *first.leading_lines))
    from_lines: dict[str, list[tuple[str, str | None]]] = {}
    for source, pairs in renamed.items():
        from_lines.setdefault(source, []).extend(pairs)
    for source, names in objects.items():
        from_lines.setdefault(source, []).extend((name, None) for name in names)
    config = module.config_for_parsing

    def from_line(source: str, pairs: list[tuple[str, str | None]]) -> cst.BaseStatement:
        spelled = ", ".join(name if alias is None else f"{name} as {alias}" for name, alias in sorted(pairs))  # type: ignore[type-var]
        return cst.parse_statement(f"from {source} import {spelled}", config=config)

    return module.with_changes(
        body=[
            *body[:start],
            *(from_line(source, pairs) for source, pairs in from_lines.items() if source == "__future__"),
            *body[start:end],
            *(cst.parse_statement(f"import {name}", config=config) for name in sorted(plain)),
            *(cst.parse_statement(f"import {name} as {alias}", config=config) for name, alias in aliased.items()),
            *(from_line(source, pairs) for source, pairs in from_lines.items() if source != "__future__"),
            *after,
        ]
    )
