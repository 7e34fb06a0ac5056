"""Everything dp2ddp knows about one parsed tree, resolved once.

LibCST's metadata providers are the expensive part of a conversion: scope
resolution alone costs about four bare parses, and every provider walks the
whole tree again. An ``Analysis`` resolves ``ScopeProvider`` once, without
copying the tree, and walks the tree once more to record each node's parent
and an index of nodes by type in document order. Qualified names are then
looked up in the scopes only for the nodes a codemod asks about, and
positions are resolved only when something is reported.

Codemods read the analysis instead of resolving metadata themselves, and the
facts derived from it (``script_facts``, ``effects``, ``lifecycle``) are computed once and
shared by every codemod that plans against the same tree.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Collection, Iterator, Mapping
from functools import cached_property
from typing import TYPE_CHECKING, TypeVar

import libcst as cst
import libcst.matchers as m
from libcst.metadata import (
    CodeRange,
    MetadataWrapper,
    ParentNodeProvider,
    PositionProvider,
    QualifiedName,
    QualifiedNameProvider,
    Scope,
    ScopeProvider,
)

if TYPE_CHECKING:
    from ._base import ScriptFacts
    from ._effects import DeviceIndices, ProcessEffects
    from ._lifecycle import Hazard, ModelLifecycle

NodeT = TypeVar("NodeT", bound=cst.CSTNode)
MISSING = object()


class _Indexer(cst.CSTVisitor):
    """One walk: each node's parent, and every node in document (pre-)order."""

    def __init__(self) -> None:
        self.parents: dict[cst.CSTNode, cst.CSTNode] = {}
        self.order: list[cst.CSTNode] = []
        # Pre-order index of each node and of the last node in its subtree.
        self.index: dict[cst.CSTNode, int] = {}
        self.last: dict[cst.CSTNode, int] = {}
        self._stack: list[cst.CSTNode] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self._stack:
            self.parents[node] = self._stack[-1]
        self._stack.append(node)
        self.index[node] = len(self.order)
        self.order.append(node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.last[original_node] = len(self.order) - 1
        self._stack.pop()


class Analysis:
    """One module and the metadata every codemod needs about it.

    It answers ``get_metadata`` like a resolved ``MetadataWrapper`` for
    ``ParentNodeProvider``, ``ScopeProvider``, ``QualifiedNameProvider`` and
    ``PositionProvider``, so it can be passed to matchers as their
    ``metadata_resolver``.
    """

    def __init__(self, module: cst.Module) -> None:
        self.module = module
        # The module was parsed for this analysis alone, so the wrapper need not copy it.
        self.wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        self.scopes: Mapping[cst.CSTNode, Scope | None] = self.wrapper.resolve(ScopeProvider)
        indexer = _Indexer()
        module.visit(indexer)
        self.parents = indexer.parents
        self.order = indexer.order
        self.index = indexer.index
        self.last = indexer.last
        self._by_type: dict[type, list[cst.CSTNode]] = {}
        for node in indexer.order:
            self._by_type.setdefault(type(node), []).append(node)
        self._type_indices: dict[type, list[int]] = {}
        self._qualified: dict[cst.CSTNode, Collection[QualifiedName]] = {}
        # Plans that codemods earlier in a group publish for the ones after them, so a
        # codemod plans against the script as the earlier ones will have changed it.
        # DataLoader calls that get a DistributedSampler:
        self.sharded_loaders: set[cst.Call] = set()
        # backward() calls whose loss is multiplied by the world size first:
        self.scaled_backwards: set[cst.Call] = set()
        # Criterion objects whose loss sums over the batch (`criterion = nn.MSELoss(reduction="sum")`):
        self.summing_criteria: set[str] = set()
        # Loops over evaluation loaders every process iterates whole, so their metrics need no gathering:
        self.whole_loops: set[cst.For] = set()

    @classmethod
    def of_source(cls, source: str) -> Analysis:
        return cls(cst.parse_module(source))

    # -- metadata ---------------------------------------------------------------------

    def get_metadata(self, key: object, node: cst.CSTNode, default: object = MISSING) -> object:
        if key is ParentNodeProvider:
            value = self.parents.get(node, MISSING)
        elif key is QualifiedNameProvider:
            value = self.qualified_names(node)
        elif key is ScopeProvider:
            value = self.scopes.get(node, MISSING)
        elif key is PositionProvider:
            value = self.positions.get(node, MISSING)
        else:
            raise KeyError(f"the analysis does not provide {key!r}")
        if value is MISSING:
            if default is MISSING:
                raise KeyError(f"no {getattr(key, '__name__', key)} for {type(node).__name__}")
            return default
        return value

    def qualified_names(self, node: cst.CSTNode) -> Collection[QualifiedName]:
        """What ``node`` means, as ``QualifiedNameProvider`` would say, computed on demand."""
        found = self._qualified.get(node)
        if found is None:
            scope = self.scopes.get(node)
            found = scope.get_qualified_names_for(node) if scope is not None else set()
            self._qualified[node] = found
        return found

    @cached_property
    def positions(self) -> Mapping[cst.CSTNode, CodeRange]:
        # Only reports need positions, so most trees never pay for them.
        return self.wrapper.resolve(PositionProvider)

    def position(self, node: cst.CSTNode) -> CodeRange:
        return self.positions[node]

    # -- finding nodes ----------------------------------------------------------------

    def nodes(self, kind: type[NodeT]) -> list[NodeT]:
        """Every node of exactly this type, in document order."""
        return self._by_type.get(kind, [])  # type: ignore[return-value]

    def within(self, node: cst.CSTNode, kind: type[NodeT]) -> list[NodeT]:
        """Every node of type ``kind`` in ``node``'s subtree (itself included), in document order."""
        indices = self._type_indices.get(kind)
        if indices is None:
            indices = self._type_indices[kind] = [self.index[n] for n in self.nodes(kind)]
        found = self.nodes(kind)
        return found[bisect_left(indices, self.index[node]) : bisect_right(indices, self.last[node])]

    def findall_in(self, node: cst.CSTNode, matcher: m.BaseMatcherNode) -> list[cst.CSTNode]:
        """``m.findall(node, matcher)`` for a node of this tree, from the index."""
        kinds = _matched_types(matcher)
        if kinds is None or len(kinds) != 1:
            return m.findall(node, matcher, metadata_resolver=self)
        return [n for n in self.within(node, next(iter(kinds))) if m.matches(n, matcher, metadata_resolver=self)]

    def is_before(self, node: cst.CSTNode, other: cst.CSTNode) -> bool:
        """Whether ``node`` starts before ``other`` does, in document order."""
        return self.index[node] < self.index[other]

    def is_after(self, node: cst.CSTNode, other: cst.CSTNode) -> bool:
        """Whether ``node`` starts after all of ``other`` has ended."""
        return self.index[node] > self.last[other]

    def findall(self, matcher: m.BaseMatcherNode) -> list[cst.CSTNode]:
        """``m.findall(module, matcher)`` from the index, without walking the tree again."""
        kinds = _matched_types(matcher)
        if kinds is None:
            candidates: Iterator[cst.CSTNode] | list[cst.CSTNode] = self.order
        elif len(kinds) == 1:
            candidates = self.nodes(next(iter(kinds)))
        else:
            candidates = (node for node in self.order if type(node) in kinds)
        return [node for node in candidates if m.matches(node, matcher, metadata_resolver=self)]

    def matches(self, node: cst.CSTNode, matcher: m.BaseMatcherNode) -> bool:
        return m.matches(node, matcher, metadata_resolver=self)

    def bindings(self, name: cst.Name) -> list[cst.Assign | None] | None:
        """The ``Assign`` statements that bind ``name`` where it is read, in scope order.

        ``None`` stands for a binding that is not a plain assignment (a parameter,
        an import, a loop target); the whole answer is ``None`` when the scope
        does not know the name.
        """
        scope = self.scopes.get(name)
        if scope is None or name.value not in scope:
            return None
        found: list[cst.Assign | None] = []
        for assignment in scope[name.value]:
            # A builtin (`None`, `len`) has no node in this tree: it is not a plain assignment.
            target = self.parents.get(getattr(assignment, "node", None))
            assign = self.parents.get(target) if isinstance(target, cst.AssignTarget) else None
            found.append(assign if isinstance(assign, cst.Assign) else None)
        return found

    def references(self, name: cst.Name) -> list[cst.CSTNode]:
        """Where the name a binding binds is read, in any scope that sees that binding."""
        scope = self.scopes.get(name)
        if scope is None or name.value not in scope:
            return []
        return [access.node for assignment in scope.assignments[name.value] for access in assignment.references]

    def reads(self, node: cst.CSTNode) -> set[str]:
        """The names and dotted attributes ``node`` reads: ``x``, ``self.tokens`` (and ``tokens``)."""
        from ._base import code_of

        return {n.value for n in self.within(node, cst.Name)} | {code_of(a) for a in self.within(node, cst.Attribute)}

    def flows_from(
        self, seeds: set[str], assigns: Collection[cst.Assign] | None = None, through: Callable[[cst.Assign], bool] = bool
    ) -> set[str]:
        """``seeds`` and every name or attribute assigned, directly or not, from a value that reads one of them.

        Only ``assigns`` (every assignment of the file by default) that ``through`` accepts pass a value on.
        """
        from ._base import code_of

        flows = set(seeds)
        candidates = [a for a in (self.nodes(cst.Assign) if assigns is None else assigns) if through(a)]
        changed = True
        while changed:
            changed = False
            for assign in candidates:
                if not self.reads(assign.value) & flows:
                    continue
                for target in assign.targets:
                    if isinstance(target.target, (cst.Name, cst.Attribute)) and code_of(target.target) not in flows:
                        flows.add(code_of(target.target))
                        changed = True
        return flows

    def returned_to(self, node: cst.CSTNode) -> list[tuple[cst.BaseExpression, cst.Assign]]:
        """Where the caller binds a value a function returns: ``x = f()``, or one name of ``a, x = f()``.

        ``node`` is what a ``return`` gives back, whole or as one element of a
        returned tuple. Each caller's target for it comes with the assignment.
        """
        parent = self.parents.get(node)
        position = None
        if isinstance(parent, cst.Element) and isinstance(self.parents.get(parent), cst.Tuple):
            returned = self.parents[parent]
            position = list(returned.elements).index(parent)  # type: ignore[attr-defined]
            parent = self.parents.get(returned)
        if not isinstance(parent, cst.Return):
            return []
        function = next((a for a in self.ancestors(parent) if isinstance(a, cst.FunctionDef)), None)
        if function is None:
            return []
        name = function.name.value
        builder = m.Call(func=m.Name(name) | m.Attribute(value=m.Name("self"), attr=m.Name(name)))
        found = []
        for assign in self.findall(m.Assign(targets=[m.AssignTarget()], value=builder)):
            assert isinstance(assign, cst.Assign)
            target = assign.targets[0].target
            if position is None:
                found.append((target, assign))
            elif isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == len(returned.elements):  # type: ignore[attr-defined]
                found.append((target.elements[position].value, assign))
        return found

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        while node in self.parents:
            node = self.parents[node]
            yield node

    # -- facts, shared by every codemod planning against this tree ----------------------

    @cached_property
    def script_facts(self) -> ScriptFacts:
        from ._base import collect_script_facts

        return collect_script_facts(self)

    @cached_property
    def effects(self) -> ProcessEffects:
        from ._effects import ProcessEffects

        return ProcessEffects(self)

    @cached_property
    def device_indices(self) -> DeviceIndices:
        from ._effects import find_device_indices

        return find_device_indices(self)

    @cached_property
    def lifecycle(self) -> ModelLifecycle:
        from ._lifecycle import ModelLifecycle

        return ModelLifecycle(self)

    @cached_property
    def batch_normalised_losses(self) -> tuple[Hazard, ...]:
        """Training losses whose value depends on the share of the batch a process sees: convert warns, check reports."""
        from ._losses import batch_normalised_losses

        return batch_normalised_losses(self)


def _matched_types(matcher: m.BaseMatcherNode) -> set[type] | None:
    """The LibCST node types a matcher can match, or None when it cannot tell."""
    if isinstance(matcher, m.OneOf):
        kinds: set[type] = set()
        for option in matcher.options:
            option_kinds = _matched_types(option)
            if option_kinds is None:
                return None
            kinds |= option_kinds
        return kinds
    kind = getattr(cst, type(matcher).__name__, None)
    if isinstance(kind, type) and issubclass(kind, cst.CSTNode) and type(matcher).__module__.startswith("libcst.matchers"):
        return {kind}
    return None
