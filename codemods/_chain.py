"""Several codemods, one traversal.

Codemods that plan against the same tree make their edits in one walk: at
each node, every codemod's ``visit_<Node>`` runs in order, and on the way
back every codemod's ``leave_<Node>`` runs in order, each given what the
codemods before it made of the node. This is what running them one after
another would do, without re-parsing and re-resolving metadata in between.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor

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
        for codemod in self.codemods:
            codemod.became = self.became

    def on_visit(self, node: cst.CSTNode) -> bool:
        kind = type(node).__name__
        for index, codemod in enumerate(self.codemods):
            if index in self._suppressed_at:
                continue
            visit = getattr(codemod, f"visit_{kind}", None)
            self.active = codemod
            if visit is not None and visit(node) is False:
                self._suppressed_at[index] = node
        return True

    def on_leave(
        self, original_node: cst.CSTNode, updated_node: cst.CSTNode
    ) -> cst.CSTNode | cst.RemovalSentinel | cst.FlattenSentinel[cst.CSTNode]:
        kind = type(original_node).__name__
        result: cst.CSTNode | cst.RemovalSentinel | cst.FlattenSentinel[cst.CSTNode] = updated_node
        for index, codemod in enumerate(self.codemods):
            suppressed_at = self._suppressed_at.get(index)
            if suppressed_at is not None and suppressed_at is not original_node:
                continue
            leave = getattr(codemod, f"leave_{kind}", None)
            if leave is not None:
                self.active = codemod
                result = _apply(leave, original_node, result)
            if suppressed_at is original_node:
                del self._suppressed_at[index]
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


class AddImportsAtTop(AddImportsVisitor):
    """LibCST's ``AddImportsVisitor``, walking only what it reads: the top of the module.

    It only reads and extends the imports before the module's first other
    statement, so the walks into function and class bodies, one for its
    gatherer and one for its transform, are skipped.
    """

    def visit_Module(self, node: cst.Module) -> None:
        leading = []
        for statement in node.body:
            if not isinstance(statement, cst.SimpleStatementLine):
                break
            leading.append(statement)
        super().visit_Module(node.with_changes(body=leading))

    def on_visit(self, node: cst.CSTNode) -> bool:
        return super().on_visit(node) and not isinstance(node, cst.BaseCompoundStatement)


def apply_queued_imports(tree: cst.Module, contexts: Sequence[CodemodContext], added: set[object]) -> cst.Module:
    """Add and remove the imports each codemod queued, codemod by codemod, as LibCST's runner does.

    An import an earlier codemod already added (``added``, kept across
    groups) is at the top already, so asking again changes nothing and costs
    nothing: a codemod left with nothing new to add is not run at all.
    """
    for context in contexts:
        queued = context.scratch.get(AddImportsVisitor.CONTEXT_KEY, [])
        new = [request for request in queued if request not in added]
        if new:
            added.update(new)
            context.scratch[AddImportsVisitor.CONTEXT_KEY] = new
            tree = tree.visit(AddImportsAtTop(context))
        if RemoveImportsVisitor.CONTEXT_KEY in context.scratch:
            tree = RemoveImportsVisitor(context).transform_module(tree)
    return tree
