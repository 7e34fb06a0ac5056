"""Everything dp2ddp knows about one parsed tree, resolved once.

LibCST's metadata providers are the expensive part of a conversion: scope
resolution alone costs about four bare parses, and every provider walks the
whole tree again. A ``Tree`` resolves ``ScopeProvider`` once, without
copying the tree and in two walks instead of LibCST's four
(``resolve_scopes``), and reads the tree once more, without a traversal's
rebuilding (``_index``), to record each node's parent and an index of nodes
by type in document order. Qualified names are then
looked up in the scopes only for the nodes a codemod asks about, and
positions are resolved only when something is reported.

Codemods read the tree's index instead of resolving metadata themselves; the
facts derived from it live in ``module.Analysis``.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, fields
from functools import cached_property
from typing import TypeVar

import libcst as cst
import libcst.matchers as m
from libcst.helpers import get_full_name_for_node
from libcst.metadata import (
    CodeRange,
    ExpressionContextProvider,
    GlobalScope,
    MetadataWrapper,
    ParentNodeProvider,
    PositionProvider,
    QualifiedName,
    QualifiedNameProvider,
    QualifiedNameSource,
    Scope,
    ScopeProvider,
)

from .roles import ModuleRole
from .syntax import code_of

NodeT = TypeVar("NodeT", bound=cst.CSTNode)
MISSING = object()


@dataclass(frozen=True)
class Holder:
    """One spelling under which code sees an object: ``loader``, ``self.train_loader``, ``loaders["train"]``.

    ``scope`` is the function, class or module in which ``spelled`` means the
    object; ``binding`` is the node that binds it there (the assigned name, the
    parameter, the ``self.x`` target, the dict's name); ``reads`` are the
    nodes that read the object under that spelling.
    """

    spelled: str
    scope: cst.CSTNode
    binding: cst.CSTNode
    reads: tuple[cst.CSTNode, ...]


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


def resolve_scopes(module: cst.Module, wrapper: MetadataWrapper) -> Mapping[cst.CSTNode, Scope | None]:
    """``wrapper.resolve(ScopeProvider)``, in two walks of the tree instead of four.

    ``ScopeProvider`` and the ``ExpressionContextProvider`` it depends on do
    all their work in ``visit_Module``, each with a walk of its own; resolved
    through the wrapper, each is then driven through a second, batched walk of
    the whole tree that calls nothing, because a batched walk cannot stop at
    the module. Each walk rebuilds every node, so those two cost as much as
    the two that resolve. Here each provider's ``visit_Module`` runs once on
    the module, the scope provider reading the expression contexts the first
    one recorded, as the wrapper would hand them over. A LibCST whose
    providers no longer work this way is resolved through the wrapper.
    """
    expressions = ExpressionContextProvider()
    scopes = ScopeProvider()
    if not (hasattr(expressions, "_computed") and hasattr(scopes, "_computed") and hasattr(scopes, "metadata")):
        return wrapper.resolve(ScopeProvider)
    expressions.visit_Module(module)
    scopes.metadata = {ExpressionContextProvider: expressions._computed}
    scopes.visit_Module(module)
    return scopes._computed


class _FieldRecorder(cst.CSTVisitor):
    """The fields through which LibCST's traversal enters a node's children, in its order."""

    def __init__(self) -> None:
        self.fields: list[str] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        return False

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        self.fields.append(attribute)


# Node type -> the fields a traversal entered in the first node of that type, and the others.
_CHILD_FIELDS: dict[type, tuple[tuple[str, ...], tuple[str, ...]]] = {}


def _recorded_fields(node: cst.CSTNode) -> tuple[str, ...]:
    recorder = _FieldRecorder()
    node._visit_and_replace_children(recorder)
    return tuple(dict.fromkeys(recorder.fields))


def _child_fields(node: cst.CSTNode) -> tuple[str, ...]:
    known = _CHILD_FIELDS.get(type(node))
    if known is None:
        entered = _recorded_fields(node)
        others = tuple(f.name for f in fields(node) if f.name not in entered)  # type: ignore[arg-type]
        known = _CHILD_FIELDS[type(node)] = (entered, others)
    entered, others = known
    for name in others:
        # A few types enter a field only when it holds something (an f-string's format spec):
        # a node that holds one there is asked afresh.
        value = getattr(node, name)
        if isinstance(value, cst.CSTNode) or (isinstance(value, (tuple, list)) and any(isinstance(v, cst.CSTNode) for v in value)):
            return _recorded_fields(node)
    return entered


def _index(module: cst.Module) -> _Indexer:
    """What ``module.visit(_Indexer())`` records, without the visit's cost.

    A LibCST traversal rebuilds every node it passes, whether or not anything
    changes; this walk only reads each node's children, through the fields a
    traversal enters for that type (learned once per type from LibCST itself),
    in the order it enters them, so the pre-order is the traversal's.
    """
    indexer = _Indexer()
    parents, order, index, last = indexer.parents, indexer.order, indexer.index, indexer.last
    index[module] = 0
    order.append(module)
    # (node, its children left to enter, reversed) pairs: the walk needs no recursion.
    stack: list[tuple[cst.CSTNode, list[cst.CSTNode]]] = [(module, _children(module))]
    while stack:
        node, pending = stack[-1]
        if not pending:
            last[node] = len(order) - 1
            stack.pop()
            continue
        child = pending.pop()
        parents[child] = node
        index[child] = len(order)
        order.append(child)
        stack.append((child, _children(child)))
    return indexer


def _children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """``node``'s children in reverse traversal order."""
    found: list[cst.CSTNode] = []
    for field in _child_fields(node):
        value = getattr(node, field)
        if isinstance(value, cst.CSTNode):
            found.append(value)
        elif isinstance(value, (tuple, list)):
            found.extend(item for item in value if isinstance(item, cst.CSTNode))
    found.reverse()
    return found


class Tree:
    """One module and the metadata every fact, codemod and rule needs about it.

    It answers ``get_metadata`` like a resolved ``MetadataWrapper`` for
    ``ParentNodeProvider``, ``ScopeProvider``, ``QualifiedNameProvider`` and
    ``PositionProvider``, so it can be passed to matchers as their
    ``metadata_resolver``.
    """

    def __init__(self, module: cst.Module, role: ModuleRole | None = None) -> None:
        self.module = module
        # What the rest of the project says about this module; a file on its own has none.
        self.role = role or ModuleRole()
        # The module was parsed for this analysis alone, so the wrapper need not copy it.
        self.wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        self.scopes: Mapping[cst.CSTNode, Scope | None] = resolve_scopes(module, self.wrapper)
        indexer = _index(module)
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
        # Names of loaders split where a function that also builds evaluation loaders returns them:
        self.sharded_names: set[str] = set()
        # Those of them that keep their batch per process under `--batch global`, with why (DDP308):
        self.per_process_loaders: dict[cst.Call, str] = {}
        # Whether a loader keeps its batch per process because the loss pairs the samples of a batch (DDP342):
        # the in-batch negatives of DDP320 are then those DataParallel saw.
        self.batch_kept_for_pairs = False
        # backward() calls whose loss is multiplied by the world size first:
        self.scaled_backwards: set[cst.Call] = set()
        # Criterion objects whose loss sums over the batch (`criterion = nn.MSELoss(reduction="sum")`):
        self.summing_criteria: set[str] = set()
        # Loops over evaluation loaders every process iterates whole, so their metrics need no gathering:
        self.whole_loops: set[cst.For] = set()
        # Loops over evaluation loaders shard_evaluation shards, whose results gather_metrics must then reduce,
        # whatever the loader is called (`valid_queue`).
        self.gathered_loops: set[cst.For] = set()

    @cached_property
    def code(self) -> str:
        """The module's code: generating it walks the whole tree, so it is generated once."""
        return self.module.code

    @classmethod
    def of_source(cls, source: str) -> Tree:
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
            if not found and scope is not None and self.role.star_bindings:
                found = self._through_star_import(node, scope)
            elif found and self.role.star_bindings:
                found = self._reexported(node, found)
            self._qualified[node] = found
        return found

    def _through_star_import(self, node: cst.CSTNode, scope: Scope) -> Collection[QualifiedName]:
        """``nn.DataParallel`` where ``nn`` is bound by ``from models import *`` of a project module that
        imports ``torch.nn as nn``: the project says what the star import binds."""
        spelled = get_full_name_for_node(node)
        if spelled is None:
            return set()
        head, dot, rest = spelled.partition(".")
        bound = dict(self.role.star_bindings).get(head)
        if bound is None or head in scope:
            return set()
        return {QualifiedName(bound + dot + rest, QualifiedNameSource.IMPORT)}

    def _reexported(self, node: cst.CSTNode, found: Collection[QualifiedName]) -> Collection[QualifiedName]:
        """``DataLoader`` bound by ``from dataset import DataLoader``, where the project module ``dataset`` imports it
        from torch: what the project module re-exports is torch's."""
        spelled = get_full_name_for_node(node)
        head, dot, rest = (spelled or "").partition(".")
        bound = dict(self.role.star_bindings).get(head)
        if bound is None or not any(q.source is QualifiedNameSource.IMPORT and q.name.endswith(f".{spelled}") for q in found):
            return found
        return {QualifiedName(bound + dot + rest, QualifiedNameSource.IMPORT)}

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

    def reached(self, target: cst.Name) -> list[cst.CSTNode]:
        """The reads of the name ``target`` binds that may see this binding, not another one of the same name.

        ``tbar = tqdm(train_loader)``, the training loop over it, then ``tbar = tqdm(val_loader)``
        and the evaluation loop: the training loop reads the first binding only. A later binding
        hides this one from a read when it runs on every path to the read (its block holds the
        read). A read in another function (a closure), or before every binding of its scope (the
        next turn of a loop), may see any of them.
        """
        scope = self.scopes.get(target)
        if scope is None or target.value not in scope:
            return []
        owner = self.owner(target)
        # `loader = tqdm(loader)`, `train_loader = split_loader(train_loader)`: a binding made from this one's
        # value still holds it, so it hides nothing.
        others = [
            a.node for a in scope.assignments[target.value]
            if isinstance(a.node, cst.Name) and a.node is not target and a.node in self.index
            and not (isinstance(bound := self._assigned(a.node), cst.BaseExpression) and target.value in self.reads(bound))
        ]  # fmt: skip
        at = self.index[target]
        reached = []
        for read in self.references(target):
            where = self.index.get(read, -1)
            if self.owner(read) is not owner:
                reached.append(read)  # a closure reads the name when it is called
            elif where > at:
                if not any(at < self.index[o] < where and self._holds(self._block_of(o), read) for o in others):
                    reached.append(read)
            elif any(
                isinstance(a, (cst.For, cst.While)) and at <= self.last[a]
                and not any(self.index[a] < self.index[o] < where and self._holds(self._block_of(o), read) for o in others)
                for a in self.ancestors(read)
            ):  # fmt: skip
                reached.append(read)  # the next turn of a loop around both, unless a binding in it comes first
            elif not any(self.index[o] < where for o in others):
                reached.append(read)  # read before every binding here: which one it sees is not for this scope to say
        return reached

    def _assigned(self, name: cst.Name) -> cst.BaseExpression | None:
        """The value an assignment binds to ``name``; None for any other binding."""
        target = self.parents.get(name)
        assign = self.parents.get(target) if isinstance(target, cst.AssignTarget) else None
        return assign.value if isinstance(assign, cst.Assign) else None

    def _block_of(self, node: cst.CSTNode) -> cst.CSTNode:
        """The block (an indented block, or the module) whose statement holds ``node``."""
        return next((a for a in self.ancestors(node) if isinstance(a, (cst.IndentedBlock, cst.Module))), self.module)

    def _holds(self, outer: cst.CSTNode, inner: cst.CSTNode) -> bool:
        return self.index[outer] <= self.index[inner] <= self.last[outer]

    def references(self, name: cst.Name) -> list[cst.CSTNode]:
        """Where the name a binding binds is read, in any scope that sees that binding."""
        scope = self.scopes.get(name)
        if scope is None or name.value not in scope:
            return []
        found = {access.node for assignment in scope.assignments[name.value] for access in assignment.references}
        # In source order: LibCST keeps accesses in sets, whose order changes from run to run, and callers
        # report the first one.
        return sorted(found, key=lambda node: self.index.get(node, -1))

    def reads(self, node: cst.CSTNode) -> set[str]:
        """The names and dotted attributes ``node`` reads: ``x``, ``self.tokens`` (and ``tokens``)."""
        return {n.value for n in self.within(node, cst.Name)} | {code_of(a) for a in self.within(node, cst.Attribute)}

    def flows_from(
        self, seeds: set[str], assigns: Collection[cst.Assign] | None = None, through: Callable[[cst.Assign], bool] = bool
    ) -> set[str]:
        """``seeds`` and every name or attribute assigned, directly or not, from a value that reads one of them.

        Only ``assigns`` (every assignment of the file by default) that ``through`` accepts pass a value on.
        """
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

    def holders(self, value: cst.BaseExpression, depth: int = 4) -> list[Holder]:
        """Every spelling under which the object ``value`` evaluates to reaches code of this file.

        The object is followed through assignments (``loader = DataLoader(...)``,
        ``self.train_loader = ...``, ``alias = loader``), a dict literal
        (``loaders = {"train": DataLoader(...)}`` read as ``loaders["train"]``),
        returns unpacked by the caller (``train_loader, val_loader = build(args)``)
        and arguments to functions and classes of this file, positional or by
        keyword, to the parameter's name in the callee. ``depth`` bounds how many
        of those steps are taken, so a recursive helper cannot loop.
        """
        found: dict[tuple[str, int], Holder] = {}
        self._follow(value, depth, found, set())
        return list(found.values())

    def target_holders(self, target: cst.BaseExpression, depth: int = 4) -> list[Holder]:
        """Every spelling under which what is assigned to ``target`` (a name, ``self.x``) reaches code of this file."""
        found: dict[tuple[str, int], Holder] = {}
        self._hold(target, depth, found, set())
        return list(found.values())

    def _follow(self, value: cst.CSTNode, depth: int, found: dict[tuple[str, int], Holder], seen: set[int]) -> None:
        if depth < 0 or id(value) in seen:
            return
        seen.add(id(value))
        parent = self.parents.get(value)
        for target, _ in self.returned_to(value):
            self._hold(target, depth - 1, found, seen)
        if isinstance(parent, cst.Assign) and parent.value is value:
            for target in parent.targets:
                self._hold(target.target, depth, found, seen)
        elif (
            isinstance(parent, cst.Element) and isinstance(values := self.parents.get(parent), cst.Tuple)
            and isinstance(assign := self.parents.get(values), cst.Assign) and assign.value is values
        ):  # fmt: skip
            # `train_loader, val_loader = DataLoader(...), DataLoader(...)`
            position = list(values.elements).index(parent)
            for target in assign.targets:
                if isinstance(target.target, (cst.Tuple, cst.List)) and len(target.target.elements) == len(values.elements):
                    self._hold(target.target.elements[position].value, depth, found, seen)
        elif isinstance(parent, cst.Arg) and isinstance(call := self.parents.get(parent), cst.Call) and not parent.star:
            function = self.callee(call)
            param = self._parameter(function, call, parent) if function is not None else None
            if param is not None:
                self._add(param.name.value, function, param, self.references(param.name), depth - 1, found, seen)  # type: ignore[arg-type]
            elif function is not None and parent.keyword is not None and isinstance(function.params.star_kwarg, cst.Param):
                # `train(data_loader=loader)` into `def train(**kwargs)`, read as `kwargs["data_loader"]`.
                kwargs = function.params.star_kwarg.name
                reads = [r for r in self.references(kwargs) if self._keyed(r, parent.keyword.value)]
                spelled = f'{kwargs.value}["{parent.keyword.value}"]'
                self._add(spelled, function, kwargs, [self.parents[r] for r in reads], depth - 1, found, seen)
        elif isinstance(parent, cst.DictComp) and parent.value is value:
            # `loaders = {x: DataLoader(sets[x], ...) for x in ["train", "val"]}`, read as `loaders[phase]`.
            assign = self.parents.get(parent)
            if isinstance(assign, cst.Assign) and assign.value is parent and len(assign.targets) == 1:
                if isinstance(table := assign.targets[0].target, cst.Name):
                    self._hold_table(table, depth, found, seen)
        elif isinstance(parent, cst.DictElement) and isinstance(parent.key, cst.SimpleString):
            table = self.parents.get(parent)
            assign = self.parents.get(table) if isinstance(table, cst.Dict) else None
            if isinstance(assign, cst.Assign) and assign.value is table and len(assign.targets) == 1:
                name = assign.targets[0].target
                key = parent.key.evaluated_value
                if isinstance(name, cst.Name) and isinstance(key, str):
                    # `loaders["train"]`, and `loaders[phase]` or a function's parameter that gets the dict.
                    self._hold_table(name, depth, found, seen, key)
            elif isinstance(table, cst.Dict):
                # `return {"train": DataLoader(...)}`, then `loaders = get_loaders()` ... `loaders["train"]`.
                key = parent.key.evaluated_value
                for target, _ in self.returned_to(table):
                    if isinstance(target, cst.Name):
                        reads = [self.parents[r] for r in self.references(target) if self._keyed(r, key)]
                        spelled = f"{target.value}[{self.module.code_for_node(parent.key)}]"
                        self._add(spelled, self.owner(target), target, reads, depth - 1, found, seen)

    def _hold_table(
        self, table: cst.Name, depth: int, found: dict[tuple[str, int], Holder], seen: set[int], key: str | None = None
    ) -> None:
        """A dict whose every value is the object (or whose entry ``key`` is), bound to ``table``: read by that key or
        by one that changes (``loaders[phase]``), and passed on to functions of this file, where their parameter
        holds it. Read by a literal key, it is spelled ``table["train"]``; by any other, ``table[...]``, which names
        no one entry."""
        if depth < 0 or id(table) in seen:
            return
        seen.add(id(table))
        reads: dict[str, list[cst.CSTNode]] = {}
        for read in self.references(table):
            parent = self.parents.get(read)
            if isinstance(parent, cst.Subscript) and parent.value is read and not isinstance(self.parents.get(parent), cst.AssignTarget):
                index = parent.slice[0].slice if len(parent.slice) == 1 else None
                literal = isinstance(index, cst.Index) and isinstance(index.value, cst.SimpleString)
                if literal and key is not None and index.value.evaluated_value != key:  # type: ignore[union-attr]
                    continue  # another entry of the dict
                spelled = self.module.code_for_node(index.value) if literal else "..."  # type: ignore[union-attr]
                reads.setdefault(f"{table.value}[{spelled}]", []).append(parent)
            elif isinstance(parent, cst.Arg) and isinstance(call := self.parents.get(parent), cst.Call) and not parent.star:
                function = self.callee(call)
                param = self._parameter(function, call, parent) if function is not None else None
                if param is not None:
                    self._hold_table(param.name, depth - 1, found, seen, key)
        for spelled, keyed in reads.items():
            self._add(spelled, self.owner(table), table, keyed, depth, found, seen)

    def _parameter(self, function: cst.FunctionDef, call: cst.Call, arg: cst.Arg) -> cst.Param | None:
        """The parameter of ``function`` that ``arg`` of ``call`` binds, or None when it cannot tell."""
        if arg.keyword is not None:
            return next((p for p in _parameters(function) if p.name.value == arg.keyword.value), None)
        positional = [a for a in call.args if a.keyword is None]
        if any(a.star for a in positional[: positional.index(arg)]):
            return None
        parameters = [*function.params.posonly_params, *function.params.params]
        decorators = {self.module.code_for_node(d.decorator) for d in function.decorators}
        in_class = isinstance(self.parents.get(self.parents.get(function)), cst.ClassDef)  # type: ignore[arg-type]
        if in_class and "staticmethod" not in decorators:
            parameters = parameters[1:]  # `self`, or `cls`, is bound by the call's object
        position = positional.index(arg)
        return parameters[position] if position < len(parameters) else None

    def _keyed(self, read: cst.CSTNode, key: str) -> bool:
        """Whether ``read`` is the object of ``read["key"]``."""
        subscript = self.parents.get(read)
        return (
            isinstance(subscript, cst.Subscript) and subscript.value is read and len(subscript.slice) == 1
            and isinstance(index := subscript.slice[0].slice, cst.Index)
            and isinstance(index.value, cst.SimpleString) and index.value.evaluated_value == key
        )  # fmt: skip

    def _hold(self, target: cst.BaseExpression, depth: int, found: dict[tuple[str, int], Holder], seen: set[int]) -> None:
        """The object is assigned to ``target``: a name, ``self.x`` read by the methods of its class, or
        ``table["key"]`` of such a name or attribute, read with the same key."""
        if (
            isinstance(target, cst.Subscript) and len(target.slice) == 1 and isinstance(index := target.slice[0].slice, cst.Index)
            and isinstance(index.value, cst.SimpleString) and isinstance(key := index.value.evaluated_value, str)
            and m.matches(target.value, m.Name() | m.Attribute(value=m.Name("self"), attr=m.Name()))
        ):  # fmt: skip
            # `self.data_loader["train"] = DataLoader(...)`, read as `self.data_loader["train"]`.
            table = code_of(target.value)
            scope = next((a for a in self.ancestors(target) if isinstance(a, cst.ClassDef)), None) if table.startswith("self.") else self.owner(target)
            if scope is None:
                return
            reads = [
                self.parents[n] for n in self.within(scope, type(target.value))
                if code_of(n) == table and self._keyed(n, key) and self.parents[n] is not target
            ]  # fmt: skip
            self._add(f'{table}["{key}"]', scope, target, reads, depth, found, seen)
            return
        if isinstance(target, cst.Name):
            self._add(target.value, self.owner(target), target, self.reached(target), depth, found, seen)
        elif m.matches(target, m.Attribute(value=m.Name("self"))):
            cls = next((a for a in self.ancestors(target) if isinstance(a, cst.ClassDef)), None)
            if cls is None:
                return
            attribute = target.attr.value  # type: ignore[attr-defined]
            reads = [
                a for a in self.within(cls, cst.Attribute)
                if a is not target and m.matches(a, m.Attribute(value=m.Name("self"), attr=m.Name(attribute)))
                and not (isinstance(p := self.parents.get(a), cst.AssignTarget) and p.target is a)
            ]  # fmt: skip
            self._add(f"self.{attribute}", cls, target, reads, depth, found, seen)

    def _add(
        self, spelled: str, scope: cst.CSTNode, binding: cst.CSTNode, reads: Collection[cst.CSTNode], depth: int,
        found: dict[tuple[str, int], Holder], seen: set[int],
    ) -> None:  # fmt: skip
        key = (spelled, id(scope))
        if key in found:
            return
        found[key] = Holder(spelled, scope, binding, tuple(reads))
        for read in reads:
            self._follow(read, depth, found, seen)

    def owner(self, node: cst.CSTNode) -> cst.CSTNode:
        """The function a local name of ``node`` belongs to, or the module."""
        return next((a for a in self.ancestors(node) if isinstance(a, (cst.FunctionDef, cst.Lambda))), self.module)

    def callee(self, call: cst.Call) -> cst.FunctionDef | None:
        """The function of this file ``call`` runs: ``f(...)``, ``self.f(...)``, a method named once in the
        file (``trainer.fit(...)``), or a class's ``__init__`` (``Trainer(...)``)."""
        func = call.func
        if isinstance(func, cst.Name):
            # A function defined inside the caller's function (`def run_epoch(loader): ...` in `train`).
            scope = self.scopes.get(func)
            if scope is not None and not isinstance(scope, GlobalScope) and func.value in scope:
                defined = [a.node for a in scope[func.value] if isinstance(getattr(a, "node", None), cst.FunctionDef)]
                if len(defined) == 1:
                    return defined[0]  # type: ignore[return-value]
            if func.value not in self._functions and scope is not None and func.value in scope:
                # `def train(loader): ...` inside `if __name__ == "__main__":`, the one binding of its name there.
                bound = [getattr(a, "node", None) for a in scope[func.value]]
                if len(bound) == 1 and isinstance(bound[0], cst.FunctionDef):
                    return bound[0]
            return self._functions.get(func.value)
        if isinstance(func, cst.Attribute):
            methods = self._methods.get(func.attr.value, [])
            return methods[0] if len(methods) == 1 else None
        return None

    def callers(self, function: cst.FunctionDef) -> list[cst.Call]:
        """The calls of this file that run ``function``."""
        return self._calls_by_callee.get(function, [])

    @cached_property
    def _calls_by_callee(self) -> dict[cst.FunctionDef, list[cst.Call]]:
        found: dict[cst.FunctionDef, list[cst.Call]] = {}
        for call in self.nodes(cst.Call):
            function = self.callee(call)
            if function is not None:
                found.setdefault(function, []).append(call)
        return found

    @cached_property
    def _functions(self) -> dict[str, cst.FunctionDef]:
        """Module-level functions, and classes by their ``__init__``, by name."""
        found: dict[str, cst.FunctionDef] = {}
        for statement in self.module.body:
            if isinstance(statement, cst.FunctionDef):
                found[statement.name.value] = statement
            elif isinstance(statement, cst.ClassDef):
                init = next((f for f in self._class_methods(statement) if f.name.value == "__init__"), None)
                if init is not None:
                    found[statement.name.value] = init
        return found

    @cached_property
    def _methods(self) -> dict[str, list[cst.FunctionDef]]:
        found: dict[str, list[cst.FunctionDef]] = {}
        for cls in self.nodes(cst.ClassDef):
            for method in self._class_methods(cls):
                found.setdefault(method.name.value, []).append(method)
        return found

    @staticmethod
    def _class_methods(cls: cst.ClassDef) -> list[cst.FunctionDef]:
        return [f for f in cls.body.body if isinstance(f, cst.FunctionDef)] if isinstance(cls.body, cst.IndentedBlock) else []

    def loops_around(self, node: cst.CSTNode, depth: int = 3) -> list[cst.For | cst.While]:
        """The loops that run ``node`` again and again, innermost first.

        A loop in another function counts when it calls the function ``node`` is in:
        ``for epoch in ...: train(...)`` runs every loop of ``train`` each epoch. The
        callers are followed ``depth`` functions up.
        """
        found: list[cst.For | cst.While] = []
        frontier: list[tuple[cst.CSTNode, int]] = [(node, depth)]
        visited: set[int] = set()
        while frontier:
            current, left = frontier.pop(0)
            if id(current) in visited:
                continue
            visited.add(id(current))
            function = None
            for ancestor in self.ancestors(current):
                if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                    function = ancestor
                    break
                if isinstance(ancestor, (cst.For, cst.While)) and ancestor not in found:
                    found.append(ancestor)
            if isinstance(function, cst.FunctionDef) and left > 0:
                frontier.extend((caller, left - 1) for caller in self.callers(function))
        return found

    def reads_any(self, node: cst.CSTNode, holders: Collection[Holder]) -> Holder | None:
        """The first holder one of whose reads lies in ``node``'s subtree."""
        start, end = self.index[node], self.last[node]
        for holder in holders:
            if any(start <= self.index[r] <= end for r in holder.reads):
                return holder
        return None

    def visible(self, holder: Holder, node: cst.CSTNode) -> bool:
        """Whether ``holder.spelled`` written at ``node`` means the held object."""
        if isinstance(holder.scope, cst.ClassDef):
            cls = next((a for a in self.ancestors(node) if isinstance(a, cst.ClassDef)), None)
            return cls is holder.scope
        base = holder.spelled.split("[", 1)[0]
        scope = self.scopes.get(node)
        if scope is None or base not in scope:
            return False
        return any(getattr(a, "node", None) is holder.binding for a in scope[base])

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        while node in self.parents:
            node = self.parents[node]
            yield node


def _parameters(function: cst.FunctionDef) -> list[cst.Param]:
    params = function.params
    return [*params.posonly_params, *params.params, *params.kwonly_params]


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
