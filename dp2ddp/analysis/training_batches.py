"""Where a training loop's batches come from, and whether a DataLoader of this file produces them.

``convert`` gives a DataLoader of the file a DistributedSampler; batches from anything else (a
generator, a list of tensors, a ``get_batch()`` method, a loader built in another file) it cannot
split, and reports (DDP317). ``check`` asks the same of a DDP script (DDP540), and which loaders
feed a backward() (a "validation" queue that trains the architecture, DDP326/DDP544). One
detection, so the two cannot disagree.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst
import libcst.matchers as m

from dp2ddp.analysis import names
from dp2ddp.analysis.steps import Flag, flags_at, skips_step, step_flags
from dp2ddp.analysis.collates import cuts_fixed_groups
from dp2ddp.analysis.syntax import call_to, code_of, parameter_for

if TYPE_CHECKING:
    from dp2ddp.analysis.module import Analysis, Holder
    from dp2ddp.analysis.roles import Site

# Batches drawn at random in the training loop: synthetic data, with no data set to split.
RANDOM_DRAWS = frozenset(
    f"torch.{name}" for name in ("randn", "rand", "randint", "randn_like", "rand_like", "randint_like", "randperm", "normal")
)


# `loader.next()`, `loader.__next__()`: the next batch of an iterator object (an `IterLoader` around a DataLoader).
_NEXT_OF_OBJECT = m.Call(func=m.Attribute(value=m.Name() | m.Attribute(), attr=m.Name("next") | m.Name("__next__")), args=[])


@dataclass(frozen=True)
class UnsplitBatches:
    """A training loop's batches that no DataLoader of this file produces, so no sampler of this file splits them."""

    node: cst.CSTNode  # where to report: the batches' source, or where the name it iterates is bound
    code: str  # DDP317, or DDP324 for a loader batch that holds several training batches
    spelled: str  # what produces the batches, as the finding names it
    source: cst.CSTNode
    loop: cst.For | cst.While


@dataclass(frozen=True)
class HandedBatches:
    """Data handed to another module's function or class that trains on it, which no split loader provides."""

    node: cst.CSTNode  # where to report: the value handed, or where the name handed is bound
    spelled: str  # the value handed, as written
    callee: str  # the function or class, as written
    site: Site  # the loop that trains on it


class TrainingBatches:
    """The sources of one file's training batches, read from its analysis."""

    def __init__(self, analysis: Analysis) -> None:
        self.analysis = analysis

    def unsplit_batches(self, loaders: list[cst.CSTNode]) -> list[UnsplitBatches]:
        """Training loops whose batches come from no DataLoader of this file: every process trains on the same data.

        The batches are judged by what produces them: the loop's iterable, or the fetch in a
        loop that counts steps. A loader the loop also reads elsewhere, such as a validation
        loader run every few steps, does not make them split.
        """
        holders = self.loader_holders(loaders)
        seen: set[int] = set()
        found: list[UnsplitBatches] = []
        for step, loss in self.steps:
            loop = self._loop_of(step)
            if loop is None or id(loop) in seen:
                continue
            seen.add(id(loop))
            if not self._hands_on(step, loop, loss):
                continue  # `for lr in rates: train_step(x, y, lr)`: the loop hands the step no batch
            source = self.batch_source(loop, loss)
            if source is None or self.reaches(source, holders, depth=2) or self.handed_in(source, loop):
                continue
            if self._unpacks_a_loader_batch(source, loop, holders):
                # The loader's batch holds several training batches (a collate_fn groups them): dividing its
                # batch_size would change how many a process trains on per step, not their size; unless the
                # collate cuts a fixed number of groups, each `len(batch) // K` samples.
                if not self._collated_in_fixed_groups(loop, loaders):
                    found.append(UnsplitBatches(source, "DDP324", code_of(source), source, loop))
                continue
            if self._never_bound(source):
                continue  # a fragment: where its batches come from is not for this file to say
            if self._draws_at_random(source):
                continue  # `torch.randn(8, 4)`: noise drawn per step, no data set to split
            if self.from_project_loader(source):
                continue  # batches of a loader another module of the project builds, and splits there
            where = self._bound_in_function(source, loop) or source
            found.append(UnsplitBatches(where, "DDP317", self._unfollowed(source, loop), source, loop))
        return found

    def handed_unsplit(self, loaders: list[cst.CSTNode]) -> list[HandedBatches]:
        """What this file hands another module's function or class whose training loop iterates it
        (``train.Trainer(cfg, model, data_iter, ...)``), where it is no loader this file splits or the program's
        loader modules split: every process would train on all of it.

        A constant, a name this file never binds, a parameter of the caller's own function (its callers choose)
        and values drawn at random are not this file's to judge.
        """
        entries = self.analysis.role.batch_parameters
        if not entries:
            return []
        holders = self.loader_holders(loaders)
        found: list[HandedBatches] = []
        for call in self.analysis.nodes(cst.Call):
            qualified = {q.name for q in self.analysis.qualified_names(call.func)}
            for callee, parameter, position, site in entries:
                if callee not in qualified:
                    continue
                arg = next((a for a in call.args if a.keyword is not None and a.keyword.value == parameter), None)
                positional = [a for a in call.args if a.keyword is None]
                if arg is None and position < len(positional) and not any(a.star for a in positional[: position + 1]):
                    arg = positional[position]
                if arg is None or self._split_or_chosen_elsewhere(arg.value, holders):
                    continue
                bound = self._bound_in_function(arg.value, call)
                found.append(HandedBatches(bound or arg.value, code_of(arg.value), code_of(call.func), site))
        return found

    def _split_or_chosen_elsewhere(self, value: cst.BaseExpression, holders: list[Holder]) -> bool:
        if _constant(value) is not ... or self._never_bound(value) or self._draws_at_random(value):
            return True
        if self.reaches(value, holders, depth=2) or self.from_project_loader(value):
            return True
        if isinstance(value, cst.Name):
            scope = self.analysis.scopes.get(value)
            return scope is not None and value.value in scope and any(
                isinstance(getattr(a, "node", None), cst.Param) for a in scope[value.value]
            )
        return False

    def from_project_loader(self, source: cst.BaseExpression) -> bool:
        """Whether ``source`` reads what a call of a project function that builds the program's loaders returned."""
        role = self.analysis.role
        if not role.loader_sources and not role.loader_attributes:
            return False
        # A builder that keeps its loaders whole (it builds the evaluation ones too) splits nothing there: only
        # the bindings this file splits where it trains are split (add_distributed_sampler's split-at-use).
        whole = dict(role.split_builders)

        def splits(qualified: str) -> bool:
            return role.loader_site(qualified) is not None and qualified not in whole

        seeds: set[str] = set()
        attributes = {attribute for attribute, _ in role.loader_attributes}
        for assign in self.analysis.nodes(cst.Assign):
            # `self.loader_train = loader.loader_train`: a loader a data module of the program built and split.
            if m.matches(assign.value, m.Attribute()) and assign.value.attr.value in attributes:  # type: ignore[attr-defined]
                seeds |= {code_of(target.target) for target in assign.targets}
        if any(isinstance(a, cst.Attribute) and a.attr.value in attributes for a in self.analysis.within(source, cst.Attribute)):
            return True
        for assign in self.analysis.nodes(cst.Assign):
            calls = self.analysis.within(assign.value, cst.Call)
            if any(splits(q.name) for call in calls for q in self.analysis.qualified_names(call.func)):
                # `loader = make_loader()`, `train_loader, val_loader = make_loaders()`, and what is read off
                # the result: `self.train_loader = DataModule(cfg).train_loader`, `make_loaders(cfg)["train"]`
                for target in assign.targets:
                    if isinstance(target.target, (cst.Tuple, cst.List)):
                        seeds |= {code_of(element.value) for element in target.target.elements}
                    else:
                        seeds.add(code_of(target.target))
        # And what is made from them: `dataset = data_loader.load_data()`, `tbar = tqdm(loader)`.
        produced = self.analysis.flows_from(seeds) if seeds else set()
        calls = self.analysis.within(source, cst.Call)
        direct = any(splits(q.name) for call in calls for q in self.analysis.qualified_names(call.func))
        return direct or bool(self.analysis.reads(source) & produced) or self.handed_from(source, produced)

    def handed_from(self, source: cst.CSTNode, produced: set[str], loop: cst.For | cst.While | None = None) -> bool:
        """Whether ``source`` is a parameter of its function (``def run_epoch(model, loader, ...)``), or what its
        function iterates of one (``tq = tqdm(loader)``), and every call of that function in this file passes it
        something read off the program's split loaders; with ``loop``, calls whose flags skip the loop's step
        (``run(net, val_loader, train=False)``) may pass anything, since they do not train."""
        if not produced:
            return False
        function = next((a for a in self.analysis.ancestors(source) if isinstance(a, cst.FunctionDef)), None)
        if function is None:
            return False
        if not (isinstance(source, cst.Name) and source.value in {p.name.value for p in function.params.params}):
            source = self.iterated_root(source, function)
        if not isinstance(source, cst.Name) or source.value not in {p.name.value for p in function.params.params}:
            return False
        for binding in self.analysis.bindings(source) or ():
            if binding is not None and source.value not in self.analysis.reads(binding.value):
                return False  # rebound to something else; `loader = tqdm(loader)` still holds what callers pass
        steps = [s for s, _ in self.steps if loop is not None and self.encloses(loop, s)]
        flags = self._flags_at(function, steps[0]) if steps else ()
        name = function.name.value
        called = [c for c in self.analysis.nodes(cst.Call) if m.matches(c.func, m.Name(name) | m.Attribute(value=m.Name("self"), attr=m.Name(name)))]
        if not called:
            return False
        for call in called:
            given = [a for a in call.args if parameter_for(function, call, a) == source.value]
            if len(given) == 1 and self.analysis.reads(given[0].value) & produced:
                continue
            passed = {(arg.keyword.value if arg.keyword is not None else i): _constant(arg.value) for i, arg in enumerate(call.args)}
            if flags and not any(arg.star for arg in call.args) and skips_step(flags, passed):
                continue  # `run(net, val_loader, train=False)`: this call takes no step
            return False
        return True

    def _unpacks_a_loader_batch(self, source: cst.CSTNode, loop: cst.For | cst.While, holders: list[Holder]) -> bool:
        """``for batchs in loader: for batch in batchs:``: the inner loop walks a batch the outer one drew, also as
        ``enumerate(batchs)`` and from an outer ``for i, batchs in enumerate(loader):``."""
        while isinstance(source, cst.Call) and m.matches(source.func, m.Name("enumerate") | m.Name("iter")) and source.args:
            source = source.args[0].value
        if not isinstance(source, cst.Name):
            return False
        for outer in self.analysis.ancestors(loop):
            drawn = outer.target if isinstance(outer, cst.For) else None
            if isinstance(drawn, cst.Tuple) and len(drawn.elements) == 2 and m.matches(outer.iter, m.Call(func=m.Name("enumerate"))):  # type: ignore[union-attr]
                drawn = drawn.elements[1].value  # `for i, batchs in enumerate(loader):`
            if isinstance(outer, cst.For) and m.matches(drawn, m.Name(source.value)):
                return self.reaches(outer.iter, holders, depth=2)
        return False

    def _collated_in_fixed_groups(self, loop: cst.For | cst.While, loaders: list[cst.CSTNode]) -> bool:
        """Whether every loader of the file an outer loop around ``loop`` iterates collates with a function that cuts
        its batch into a fixed number of groups (``collate_fn=collate_fn_tensor``), of this file or of another
        module of the project."""
        outers = [a.iter for a in self.analysis.ancestors(loop) if isinstance(a, cst.For)]
        drawn = [
            loader for loader in loaders
            if isinstance(loader, cst.Call) and any(self.reaches(o, self.analysis.holders(loader), depth=2) for o in outers)  # type: ignore[arg-type]
        ]  # fmt: skip
        if not drawn:
            return False
        for loader in drawn:
            collate = next((a.value for a in loader.args if a.keyword is not None and a.keyword.value == "collate_fn"), None)  # type: ignore[attr-defined]
            if not isinstance(collate, cst.Name):
                return False
            if collate.value in self.analysis.role.fixed_group_collates:
                continue
            own = [f for f in self.analysis.nodes(cst.FunctionDef) if f.name.value == collate.value and isinstance(self.analysis.parents.get(f), cst.Module)]
            try:
                parsed = ast.parse(code_of(own[0]).strip()).body[0] if len(own) == 1 else None
            except SyntaxError:
                parsed = None
            if not isinstance(parsed, (ast.FunctionDef, ast.AsyncFunctionDef)) or not cuts_fixed_groups(parsed):
                return False
        return True

    def _draws_at_random(self, source: cst.CSTNode) -> bool:
        calls = self.analysis.within(source, cst.Call)
        return any({q.name for q in self.analysis.qualified_names(c.func)} & RANDOM_DRAWS for c in calls)

    def _never_bound(self, source: cst.CSTNode) -> bool:
        """``for x, y in loader`` where this file binds ``loader`` nowhere, and imports nothing with ``*``."""
        while isinstance(source, cst.Call) and m.matches(source.func, m.Name("iter") | m.Name("enumerate") | m.Name("next")):
            if not source.args:
                return False
            source = source.args[0].value
        if not isinstance(source, cst.Name) or self.analysis.findall(m.ImportFrom(names=m.ImportStar())):
            return False
        return self.analysis.bindings(source) is None

    def handed_in(self, source: cst.CSTNode, loop: cst.For | cst.While) -> bool:
        """Batches from a parameter of a function this file never calls: its callers, elsewhere, choose the data."""
        function = next((a for a in self.analysis.ancestors(loop) if isinstance(a, cst.FunctionDef)), None)
        # `self.D.train()` calls the module's own train(), not this class's method of that name.
        on_parts = m.Call(func=m.Attribute(value=m.Attribute(value=m.Name("self"))))
        if function is None or [c for c in self.analysis.callers(function) if not m.matches(c, on_parts)]:
            return False
        source = self.iterated_root(source, function)
        # A piece of an attribute (`self.LR.narrow(0, i * n, n)`, `self.x.chunk(k)[i]`): the attribute's batches.
        while isinstance(source, (cst.Call, cst.Subscript)) and (
            isinstance(source, cst.Subscript) or m.matches(source.func, m.Attribute(attr=m.Name(m.MatchIfTrue(lambda n: n in _PIECES))))
        ):
            source = source.value if isinstance(source, cst.Subscript) else source.func.value  # type: ignore[attr-defined]
        if m.matches(source, m.Attribute(value=m.Name("self"), attr=m.Name())):
            return self._given_to_the_constructor(source, function) or self._fed_by_a_method(source, function)  # type: ignore[arg-type]
        if not isinstance(source, cst.Name):
            return False
        scope = self.analysis.scopes.get(source)
        return scope is not None and source.value in scope and any(
            isinstance(getattr(a, "node", None), cst.Param) for a in scope[source.value]
        )

    def _given_to_the_constructor(self, attribute: cst.Attribute, function: cst.FunctionDef) -> bool:
        """``self.data_loader``, bound in ``__init__`` to its parameter, of a class this file never builds:
        ``Trainer(data_loader.loader(), config)`` in another module chooses the data."""
        cls = next((a for a in self.analysis.ancestors(function) if isinstance(a, cst.ClassDef)), None)
        if cls is None or not isinstance(cls.body, cst.IndentedBlock):
            return False
        init = next((s for s in cls.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"), None)
        if init is None or self.analysis.callers(init):
            return False
        parameters = {p.name.value for p in (*init.params.posonly_params, *init.params.params, *init.params.kwonly_params)}
        binds = m.Assign(targets=[m.AssignTarget(m.Attribute(value=m.Name("self"), attr=m.Name(attribute.attr.value)))])
        values = [a.value for a in self.analysis.findall_in(cls, binds)]  # type: ignore[attr-defined]
        return bool(values) and all(isinstance(v, cst.Name) and v.value in parameters for v in values)

    def _fed_by_a_method(self, attribute: cst.Attribute, function: cst.FunctionDef) -> bool:
        """``self.LR``, filled by a method of the class from what it is handed (``feed_data(self, batch)``:
        ``self.LR = batch["LR"]``, or ``self.LR.resize_(x.size()).copy_(x)``), a method no code of this file calls:
        the callers elsewhere hand it their loader's batches, as a solver's ``feed_data`` then ``train_step``."""
        cls = next((a for a in self.analysis.ancestors(function) if isinstance(a, cst.ClassDef)), None)
        if cls is None or not isinstance(cls.body, cst.IndentedBlock):
            return False
        name = attribute.attr.value
        target = m.Attribute(value=m.Name("self"), attr=m.Name(name))
        fed = False
        for method in (s for s in cls.body.body if isinstance(s, cst.FunctionDef)):
            parameters = {p.name.value for p in (*method.params.params[1:], *method.params.kwonly_params)}
            locals_from = set(parameters)
            for assign in self.analysis.within(method, cst.Assign):  # `input = batch["LR"]`: one hop from a parameter
                if {n.value for n in self.analysis.within(assign.value, cst.Name)} & parameters:
                    locals_from |= {n.value for t in assign.targets for n in self.analysis.within(t.target, cst.Name)}
            values = [a.value for a in self.analysis.within(method, cst.Assign) if any(m.findall(t.target, target) for t in a.targets)]
            values += [
                c.args[0].value for c in self.analysis.within(method, cst.Call)
                if m.matches(c.func, m.Attribute(attr=m.Name("copy_"))) and c.args and self.analysis.findall_in(c.func, target)
            ]  # fmt: skip
            for value in values:
                if m.matches(value, m.Call(args=[]) | m.Name("None")):
                    continue  # a placeholder filled later (`self.LR = self.Tensor()`)
                if not {n.value for n in self.analysis.within(value, cst.Name)} & locals_from:
                    return False  # filled from something of the class's own making
                if [c for c in self.analysis.callers(method) if not m.matches(c, m.Call(func=m.Attribute(value=m.Attribute(value=m.Name("self")))))]:
                    return False  # this file hands it its data
                fed = True
        return fed

    def iterated_root(self, source: cst.CSTNode, function: cst.FunctionDef) -> cst.CSTNode:
        """What ``source`` iterates, through ``iter``/``enumerate``/``tqdm`` and local names bound once to them.

        ``progress = tqdm(loader)`` then ``for i, batch in enumerate(progress):`` iterates
        ``loader``. The walk stops at any other call, which may build the batches itself
        (``make_batches(dataset)``): that call is returned, and names what is not followed.
        """
        for _ in range(4):  # each turn follows one local name; a name bound to itself cannot loop
            while isinstance(source, cst.Call) and m.matches(source.func, m.Name() | m.Attribute()):
                if m.matches(source, _NEXT_OF_OBJECT):
                    source = source.func.value  # type: ignore[attr-defined]  # `loader.next()`: the object's own batches
                    continue
                if not source.args or code_of(source.func).rsplit(".", 1)[-1] not in ("iter", "enumerate", "tqdm", "next"):
                    return source
                source = source.args[0].value
            if not isinstance(source, cst.Name):
                return source
            bindings = self.analysis.bindings(source) or []
            if not bindings or any(b is None or self.analysis.owner(b) is not function for b in bindings):
                return source  # a parameter, or a name bound elsewhere
            if len({code_of(b.value) for b in bindings if b is not None}) != 1:
                return source  # several values; `data_iter = iter(loader)` again at each pass is one
            source = bindings[0].value  # type: ignore[union-attr]
        return source

    def feeding_backward(self, loaders: list[cst.CSTNode]) -> set[cst.CSTNode]:
        """Loaders whose batches reach a ``backward()``: training data, whatever their name says.

        DARTS-style search trains its architecture on batches drawn with
        ``next(valid_queue_iter)`` inside the weights' training loop: that "valid"
        loader trains too, and left whole every process would draw its own batches.
        """
        return {loader for loader in loaders if self.feeds_backward(self.loader_holders([loader]))}

    def feeds_backward(self, holders: list[Holder]) -> bool:
        """Whether a training loop draws its batches from the object ``holders`` spell."""
        return any(
            self.analysis.reads_any(source, holders) and not self._handed_only_to_skip(source, step, holders)
            for source, step in self._backward_sources
        )

    @cached_property
    def _backward_sources(self) -> list[tuple[cst.CSTNode, cst.Call]]:
        """What the loops around each ``backward()`` draw their batches from (the loop's iterable, or
        ``next(it)``), each with its step."""
        sources: list[tuple[cst.CSTNode, cst.Call]] = []
        for step, loss in self.steps:
            loop = self._loop_of(step)
            if loop is None:
                continue
            assigns = list(self.analysis.within(loop.body, cst.Assign))
            copies = [e.value for e in self.analysis.within(loop.body, cst.Expr) if isinstance(e.value, cst.Call)]
            sources += [(loop.iter, step)] if isinstance(loop, cst.For) else []
            sources += [
                (a.value, step) for a in assigns
                if m.matches(a.value, m.Call(func=m.Name("next"))) and self.flows_into(a, assigns, copies) & loss
            ]  # fmt: skip
        return sources

    def _handed_only_to_skip(self, source: cst.CSTNode, step: cst.Call, holders: list[Holder]) -> bool:
        """Whether the loader reaches ``source`` only as a parameter of the function around its loop, from calls
        that each pass a flag that skips ``step``: ``iterate("val", args, val_loader)``, where ``iterate(mode,
        args, loader)`` takes its step only under ``if mode == "train":``. Its batches never train."""
        function = next((a for a in self.analysis.ancestors(step) if isinstance(a, cst.FunctionDef)), None)
        if function is None:
            return False
        read = [h for h in holders if any(self.encloses(source, r) for r in h.reads)]
        params = [h.binding for h in read]
        own = list(self.analysis.within(function.params, cst.Param))
        if read and any(not isinstance(p, cst.Param) or p not in own for p in params):
            # `tq = tqdm(loader)`, then `for ... in tq:`: the parameter it iterates.
            root = self.iterated_root(source, function)
            params = [p for p in own if isinstance(root, cst.Name) and p.name.value == root.value]
        if not read or not params or any(not isinstance(p, cst.Param) or p not in own for p in params):
            return False
        flags = self._flags_at(function, step)
        if not flags:
            return False
        handing = False
        for reference in self.analysis.references(function.name):
            call = self.analysis.parents.get(reference)
            if not isinstance(call, cst.Call) or call.func is not reference or any(arg.star for arg in call.args):
                return False  # handed on as a value, or its arguments are not read here
            names = {p.name.value for p in params}  # type: ignore[attr-defined]
            if not any(parameter_for(function, call, arg) in names and self.analysis.reads_any(arg.value, holders) for arg in call.args):
                continue
            handing = True
            passed = {(arg.keyword.value if arg.keyword is not None else i): _constant(arg.value) for i, arg in enumerate(call.args)}
            if not skips_step(flags, passed):
                return False
        return handing

    def _flags_at(self, function: cst.FunctionDef, step: cst.Call) -> tuple[Flag, ...]:
        """The flags of ``function`` that choose whether it reaches ``step``, read on its syntax tree, where the
        step is the call at the same place in source order."""
        try:
            parsed = ast.parse(code_of(function)).body[0]
        except SyntaxError:
            return ()
        calls = [c for c in self.analysis.within(function, cst.Call)]
        ordered = sorted(
            (n for n in ast.walk(parsed) if isinstance(n, ast.Call)),
            key=lambda n: (n.lineno, n.col_offset, -(n.end_lineno or 0), -(n.end_col_offset or 0)),
        )
        if len(calls) != len(ordered) or step not in calls:
            return ()
        return flags_at(parsed, ordered[calls.index(step)])  # type: ignore[arg-type]

    def loader_holders(self, loaders: list[cst.CSTNode], holders: list[Holder] | None = None) -> list[Holder]:
        """Where the file's loaders, and iterators over them (``it = iter(loader)``), are read.

        ``holders``, where given, are where the loaders are known to be read already.
        """
        holders = [*(holders or []), *(h for loader in loaders for h in self.analysis.holders(loader))]  # type: ignore[arg-type]
        for _ in range(2):
            derived = [
                a.value for a in self.analysis.nodes(cst.Assign)
                if m.matches(a.value, m.Call())
                and (self._handed_a_loader(a.value, holders) or any(self.encloses(a.value, loader) for loader in loaders))
            ]  # fmt: skip
            known = {(h.spelled, id(h.scope)) for h in holders}
            holders += [h for value in derived for h in self.analysis.holders(value) if (h.spelled, id(h.scope)) not in known]
        return holders

    def _handed_a_loader(self, value: cst.BaseExpression, holders: list[Holder]) -> bool:
        """Whether ``value`` is handed a loader itself (``iter(loader)``, ``tqdm(enumerate(loader))``), not only a
        fact about it: ``Net(num_classes=loader.dataset.num_class)`` or ``len(loader)`` holds no loader."""
        start, end = self.analysis.index[value], self.analysis.last[value]
        for holder in holders:
            for read in holder.reads:
                if not start <= self.analysis.index[read] <= end:
                    continue
                arg = self.analysis.parents.get(read)
                if m.matches(arg, m.Attribute(attr=m.Name("__iter__"))):
                    return True  # `loader.__iter__()`
                call = self.analysis.parents.get(arg) if isinstance(arg, cst.Arg) else None
                if isinstance(call, cst.Call) and not m.matches(call.func, m.Name("len")):
                    return True
        return False

    @cached_property
    def steps(self) -> list[tuple[cst.Call, set[str]]]:
        """The calls of this file that take a training step, each with the names its loss is computed from.

        A ``backward()``, whose loss is what it differentiates. Or a call of a function that takes
        one step each time it runs (its ``backward()`` in no loop of its own): ``train_step(model,
        x, y)`` of this file or of another module of the project, or an object whose method runs
        the backward (``compute_loss(x, y, logits)`` of a ``LossCompute``). Its loss is computed
        from what the call is handed, and a loop that calls it trains on those batches.
        """
        backwards = self.analysis.findall(m.Call(func=m.Attribute(attr=m.Name("backward"))))
        found = [(b, self.analysis.reads(b.func.value)) for b in backwards]  # type: ignore[attr-defined]
        stepping = self._stepping_functions
        for call in self.analysis.nodes(cst.Call):
            if call not in backwards and self._takes_a_step(call, stepping):
                found.append((call, self.analysis.reads(call)))
        return found

    def _hands_on(self, step: cst.Call, loop: cst.For | cst.While, loss: set[str]) -> bool:
        """Whether a call that takes a step in a for loop is handed what the loop draws, or what is computed from it."""
        if not isinstance(loop, cst.For) or m.matches(step.func, m.Attribute(attr=m.Name("backward"))) or self.counts_steps(loop.iter):
            return True
        drawn = {n.value for n in self.analysis.within(loop.target, cst.Name)}
        return bool(self._flowing(drawn, list(self.analysis.within(loop.body, cst.Assign)), []) & loss)

    def _loop_of(self, step: cst.Call) -> cst.For | cst.While | None:
        """The innermost loop around ``step`` in its own function that may draw batches; None where there is none.

        A loop over a display written out (``for net in (G, D):``, or a name bound to one) walks a
        few objects the script names, not data: the loop around it draws the batches.
        """
        for loop in self.analysis.ancestors(step):
            if isinstance(loop, cst.FunctionDef):
                return None
            if isinstance(loop, cst.While) or isinstance(loop, cst.For) and not self._walks_a_display(loop.iter):
                return loop
        return None

    def _walks_a_display(self, iterable: cst.BaseExpression) -> bool:
        displays = (cst.Tuple, cst.List, cst.Set)
        if isinstance(iterable, cst.Name):
            bindings = self.analysis.bindings(iterable) or [None]
            return all(b is not None and isinstance(b.value, displays) for b in bindings)
        return isinstance(iterable, displays)

    @cached_property
    def _stepping_functions(self) -> dict[cst.FunctionDef, tuple[Flag, ...]]:
        """The functions of this file that take one training step each time they run, directly or through
        another, each with the flags that choose whether it does."""
        found: dict[cst.FunctionDef, tuple[Flag, ...]] = {}
        while True:
            names = {f.name.value for f in found}
            more = {}
            for function in self.analysis.nodes(cst.FunctionDef):
                if function in found or not any(self._takes_a_step(c, found) for c in self.analysis.within(function, cst.Call)):
                    continue
                try:
                    parsed = ast.parse(code_of(function)).body[0]
                except SyntaxError:
                    continue
                flags = step_flags(parsed, lambda spelled: spelled.removeprefix("self.") in names)  # type: ignore[arg-type]
                if flags is not None:
                    more[function] = flags
            if not more:
                return found
            found |= more

    def _takes_a_step(self, call: cst.Call, stepping: dict[cst.FunctionDef, tuple[Flag, ...]]) -> bool:
        """Whether ``call`` runs a backward once: itself, or a function or method among ``stepping`` or the
        project's, unless a flag it passes (or leaves at its default) skips the step."""
        if m.matches(call.func, m.Attribute(attr=m.Name("backward"))):
            return True
        flags = self._step_flags(call, stepping)
        if flags is None:
            return False
        passed: dict[str | int, object] = {}
        for position, arg in enumerate(call.args):
            if arg.star:
                return False  # `*args`, `**kwargs`: what it passes is not read here
            passed[arg.keyword.value if arg.keyword is not None else position] = _constant(arg.value)
        return not skips_step(flags, passed)

    @cached_property
    def _project_steps(self) -> dict[str, tuple[Flag, ...]]:
        """The project's stepping functions and methods this module calls, by qualified name, with their flags."""
        return dict(self.analysis.role.step_calls)

    @cached_property
    def _classes(self) -> dict[str, cst.ClassDef]:
        """This file's classes by name, the first of each name."""
        found: dict[str, cst.ClassDef] = {}
        for cls in self.analysis.nodes(cst.ClassDef):
            found.setdefault(cls.name.value, cls)
        return found

    def _step_flags(self, call: cst.Call, stepping: dict[cst.FunctionDef, tuple[Flag, ...]]) -> tuple[Flag, ...] | None:
        """The flags of the stepping function or method ``call`` runs; None where it runs none."""
        callee = self.analysis.callee(call)
        if callee in stepping:
            return stepping[callee]  # type: ignore[index]
        steps = self._project_steps
        for qualified in self.analysis.qualified_names(call.func):
            if qualified.name in steps:
                return steps[qualified.name]
        # `compute = LossCompute(...)`, then `compute(x, y)` or `compute.step(x, y)`: the object's method.
        receiver, method = (call.func, "__call__") if isinstance(call.func, cst.Name) else (
            (call.func.value, call.func.attr.value) if m.matches(call.func, m.Attribute(value=m.Name())) else (None, "")
        )  # fmt: skip
        if not isinstance(receiver, cst.Name):
            return None
        bindings = self.analysis.bindings(receiver) or []
        if bindings and all(b is None for b in bindings):
            bindings = self._bound_by_callers(receiver)  # `def train(opt, loader, model)`, called with `model = VSE(opt)`
        if not bindings or any(b is None or not isinstance(b.value, cst.Call) for b in bindings):
            return None
        found: tuple[Flag, ...] | None = None
        for binding in bindings:
            built = binding.value.func  # type: ignore[union-attr]
            flags = next((steps[f"{q.name}.{method}"] for q in self.analysis.qualified_names(built) if f"{q.name}.{method}" in steps), None)
            if flags is None and isinstance(built, cst.Name):
                cls = self._classes.get(built.value)
                own = [s for s in cls.body.body if isinstance(s, cst.FunctionDef) and s.name.value == method] if cls is not None else []
                flags = stepping.get(own[0]) if own else None
            if flags is None:
                return None
            found = flags
        return found

    def _bound_by_callers(self, parameter: cst.Name) -> list[cst.Assign | None]:
        """The bindings of what every call of this file hands a function as its parameter ``parameter``; empty where
        a call hands it anything but a name, or the function has no caller here."""
        function = next((a for a in self.analysis.ancestors(parameter) if isinstance(a, cst.FunctionDef)), None)
        if function is None or parameter.value not in {p.name.value for p in function.params.params}:
            return []
        found: list[cst.Assign | None] = []
        callers = self.analysis.callers(function)
        for call in callers:
            arg = next((a for a in call.args if parameter_for(function, call, a) == parameter.value), None)
            if arg is None or not isinstance(arg.value, cst.Name):
                return []
            found += self.analysis.bindings(arg.value) or [None]
        return found

    def batch_source(self, loop: cst.For | cst.While, loss: set[str]) -> cst.CSTNode | None:
        """What a training loop takes its batches from: a for loop's iterable, or the fetch that produces them.

        In a loop that counts steps the batch is fetched inside, as ``x, y = next(it)`` or
        ``x, y = data.get_batch()``: an assignment from a call whose values reach the names in ``loss``,
        those the step's loss is computed from. A fetch in a loop nested inside (a periodic evaluation) is not it,
        nor a value the loss does not depend on (a learning rate for the step).
        """
        if isinstance(loop, cst.For) and not self.counts_steps(loop.iter):
            return loop.iter
        nested: list[cst.CSTNode] = [*self.analysis.within(loop.body, cst.For), *self.analysis.within(loop.body, cst.While)]
        assigns = [
            a for a in self.analysis.within(loop.body, cst.Assign)
            if not any(self.encloses(n, a) for n in nested)
        ]  # fmt: skip
        # `im_data.resize_(data[0].size()).copy_(data[0])`: a batch copied into a buffer the model then reads.
        copies = [
            e.value for e in self.analysis.within(loop.body, cst.Expr)
            if isinstance(e.value, cst.Call) and not any(self.encloses(n, e) for n in nested)
        ]  # fmt: skip
        fetches = [
            a for a in assigns
            if isinstance(a.value, cst.Call) and isinstance(a.targets[0].target, (cst.Tuple, cst.Name))
            and self.flows_into(a, assigns, copies) & loss
        ]  # fmt: skip
        # `out, aux = model(inputs)` computes from `inputs = get_batch()`: the batch is the first of the chain.
        bound: set[str] = set()
        roots = []
        for fetch in fetches:
            if not self.analysis.reads(fetch.value) & bound:
                roots.append(fetch)
            bound |= {n.value for t in fetch.targets for n in self.analysis.within(t.target, cst.Name)}
        drawn = [a for a in roots if m.matches(a.value, m.Call(func=m.Name("next")))]
        unpacked = [a for a in roots if isinstance(a.targets[0].target, cst.Tuple)]
        return (drawn or unpacked or roots)[0].value if roots else None

    def counts_steps(self, iterable: cst.BaseExpression) -> bool:
        """``range(n)``, ``trange(n)``, ``tqdm(range(n))``, or a name a ``with`` binds to one: a loop over step numbers."""
        counting = m.Call(func=m.Name("range") | m.Name("trange"))
        counter = counting | m.Call(func=m.Name("tqdm") | m.Attribute(attr=m.Name("tqdm")), args=[m.Arg(counting), m.ZeroOrMore()])
        if self.analysis.matches(iterable, counter):
            return True
        if not isinstance(iterable, cst.Name):
            return False
        bound = m.WithItem(item=counter, asname=m.AsName(name=m.Name(iterable.value)))
        function = next((a for a in self.analysis.ancestors(iterable) if isinstance(a, cst.FunctionDef)), self.analysis.module)
        return bool(m.findall(function, bound))

    def flows_into(self, fetch: cst.Assign, assigns: list[cst.Assign], copies: list[cst.Call] = ()) -> set[str]:  # type: ignore[assignment]
        """The names ``fetch`` binds, and the names bound from them, directly or not, by ``assigns``.

        A call in ``copies`` that reads them passes them on to the object it is called on.
        """
        return self._flowing({n.value for t in fetch.targets for n in self.analysis.within(t.target, cst.Name)}, assigns, copies, fetch)

    def _flowing(self, flows: set[str], assigns: list[cst.Assign], copies: list[cst.Call], fetch: cst.Assign | None = None) -> set[str]:
        changed = True
        while changed:
            changed = False
            for copy in copies:
                base = copy.func
                while isinstance(base, (cst.Attribute, cst.Call)):
                    base = base.value if isinstance(base, cst.Attribute) else base.func
                if isinstance(base, cst.Name) and base.value not in flows and self.analysis.reads(copy) & flows:
                    flows.add(base.value)
                    changed = True
            for assign in assigns:
                if assign is fetch or not self.analysis.reads(assign.value) & flows:
                    continue
                bound = {n.value for t in assign.targets for n in self.analysis.within(t.target, cst.Name)}
                if not bound <= flows:
                    flows |= bound
                    changed = True
        return flows

    def _unfollowed(self, source: cst.CSTNode, loop: cst.For | cst.While) -> str:
        """How DDP317 names the batches: the call a function's parameter passes through where that is what stops the walk.

        ``progress = tools.IteratorTimer(data_loader)`` in a function no code of this file
        calls: the batches come from ``tools.IteratorTimer(data_loader)``, a call that may
        build them itself, not from ``progress``.
        """
        function = next((a for a in self.analysis.ancestors(loop) if isinstance(a, cst.FunctionDef)), None)
        root = self.iterated_root(source, function) if function is not None and not self.analysis.callers(function) else source
        if root is not source and isinstance(root, cst.Call) and any(
            self.handed_in(a.value, loop) for a in root.args
        ):  # fmt: skip
            return " ".join(code_of(root).split())
        return " ".join(code_of(source).split())

    def _bound_in_function(self, source: cst.CSTNode, loop: cst.CSTNode) -> cst.CSTNode | None:
        """Where the one name a loop iterates is bound, in the loop's own function, if it is."""
        if not isinstance(source, cst.Name):
            return None
        bindings = self.analysis.bindings(source)
        if not bindings or len(bindings) != 1 or bindings[0] is None:
            return None
        return bindings[0].value

    def encloses(self, outer: cst.CSTNode, inner: cst.CSTNode) -> bool:
        """Whether ``inner`` is ``outer`` or lies in its subtree."""
        return self.analysis.index[outer] <= self.analysis.index[inner] <= self.analysis.last[outer]

    def reaches(self, node: cst.CSTNode, holders: list[Holder], depth: int) -> bool:
        """Whether ``node`` reads a loader of this file, builds one, or calls a function of this file that does."""
        if self.analysis.reads_any(node, holders) or self.analysis.findall_in(node, call_to(names.DATA_LOADER)):
            return True
        if depth == 0:
            return False
        if isinstance(node, cst.Name):
            # `pbar = tqdm(enumerate(loader)) if is_train else enumerate(loader)`, then `for x, y in pbar:`.
            bindings = self.analysis.bindings(node) or []
            if bindings and all(b is not None and self.reaches(b.value, holders, depth - 1) for b in bindings):
                return True
        for call in self.analysis.within(node, cst.Call):
            function = self.analysis.callee(call)
            if function is not None and self.reaches(function.body, holders, depth - 1):
                return True
        return False


# Methods that take a piece of a tensor: a batch split into sub-batches.
_PIECES = frozenset({"narrow", "chunk", "split", "view", "reshape", "to", "cuda", "float", "contiguous"})


def _constant(value: cst.BaseExpression) -> object:
    """What a constant argument holds (``True``, ``0``, ``"train"``); ``...`` for anything else."""
    if isinstance(value, cst.Name) and value.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[value.value]
    if isinstance(value, (cst.Integer, cst.Float, cst.SimpleString)):
        return value.evaluated_value
    return ...
