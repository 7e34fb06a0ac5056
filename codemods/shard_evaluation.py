"""Shard evaluation loaders so that every sample is evaluated exactly once.

``DataLoader(val_set, batch_size=B)`` becomes ``DataLoader(val_set,
batch_size=B // dist.get_world_size(), sampler=evaluation_shard(val_set))``.
Process ``r`` of ``W`` evaluates samples ``r, r + W, r + 2W, ...``: together
they cover the set once. ``DistributedSampler`` would pad the last round
with repeats, and ``drop_last`` would lose samples; either changes the
accuracy the script reports. ``len(loader.dataset)`` still counts the whole
set, so once the metrics are summed over processes (gather_metrics) a
validation set of 101 samples reports ``/101``.

A loader counts as evaluation when it is not shuffled and is named for
validation or testing, or is iterated under ``torch.no_grad()``.

A loader is sharded only when every loop over it is known and leaves
nothing behind that gather_metrics cannot reduce exactly (see _results):
otherwise every process evaluates the whole set, which is correct, not faster.
An evaluation loop that runs the DDP model with gradients enabled is not
sharded: DDP's forward then syncs buffers, a collective, and shards of
unequal length would leave one process waiting at the last batch. Every
process evaluates the whole set instead, and its metrics are not gathered.
"""

from __future__ import annotations

from typing import ClassVar

import libcst as cst
import libcst.matchers as m

from dp2ddp.analysis import names
from ._base import add_helper, import_torch_distributed
from dp2ddp.analysis.syntax import MAIN_GUARD, call_to, code_of, parameter_for, resolves_to, script_functions
from dp2ddp.analysis.module import Analysis
from dp2ddp.analysis.results import is_bound_here, loop_results, owner_of
from dp2ddp.analysis.decisions import ungathered_evaluations
from .add_distributed_sampler import AddDistributedSamplerCommand

EVALUATION_SHARD_HELPER_SOURCE = f'''
def {names.EVALUATION_SHARD_HELPER}(dataset) -> range:
    """The indices this process evaluates: with the other processes', every sample exactly once."""
    # Unlike DistributedSampler this never repeats samples to even out the shards,
    # so sums and counts gathered from all processes equal a single process's.
    return range(dist.get_rank(), len(dataset), dist.get_world_size())
'''


def _stem(reference: cst.BaseExpression) -> str:
    """The name the loops over a loader read: ``val_loader`` of ``self.val_loader``, and ``test_loader`` of
    ``globals()["test_loader"] = load_testlist(...)``."""
    if m.matches(reference, m.Subscript(value=m.Call(func=m.Name("globals")), slice=[m.SubscriptElement(m.Index(m.SimpleString()))])):
        return reference.slice[0].slice.value.evaluated_value  # type: ignore[attr-defined]
    return code_of(reference).rsplit(".", 1)[-1]


class ShardEvaluationCommand(AddDistributedSamplerCommand):
    DESCRIPTION = "Shard evaluation DataLoaders so every sample is evaluated exactly once, with no padding."
    SHARDS_EVALUATION: ClassVar[bool] = True
    # A loader convert cannot split refuses the file when it trains; when it evaluates, every
    # process evaluating the whole set is correct, only not faster.
    KEPT_WHOLE: ClassVar[dict[str, str]] = {
        "DDP302": "its IterableDataset takes no sampler",
        "DDP304": "its dataset is built inside the call, where no sampler can share it (bind it to a name first)",
        "DDP314": "its arguments come from `{arguments}`, which convert cannot see into (pass them by keyword)",
    }

    def report(self, node: cst.CSTNode, code: str, **values: object) -> None:
        why = self.KEPT_WHOLE.get(code)
        if why is None or not isinstance(node, cst.Call):
            super().report(node, code, **values)
            return
        reference, _ = self._binding(self.analysis.module, node, self.analysis.parents[node])
        loader = code_of(reference) if reference is not None else "this loader"
        super().report(node, "DDP316", loader=loader, why=why.format(**values))

    def plan(self, analysis: Analysis) -> None:
        super().plan(analysis)
        self._keep_unsharded_loops_whole(analysis)
        self._keep_other_modules_evaluations_whole(analysis)
        self._report_evaluations_of_trained_loaders(analysis)

    def _report_evaluations_of_trained_loaders(self, analysis: Analysis) -> None:
        """A "validation" loader that also trains is split for training; its evaluation then sees one share.

        The split is what the training needs (DARTS draws architecture batches from it), so
        the evaluation loops over it are reported where their results are not gathered.
        """
        trained = [(call, self._binding(analysis.module, call, analysis.parents[call])[0]) for call in self.trained]  # type: ignore[arg-type]
        for statement, loader, held in ungathered_evaluations(analysis, trained):
            self.report(statement, "DDP326", loader=loader, held=held)

    def _keep_unsharded_loops_whole(self, analysis: Analysis) -> None:
        """Loops over a loader that no codemod shards hold whole-set values: gather_metrics must not sum them.

        A loader convert leaves as it is (arguments from ``**kwargs``, a sampler
        of its own, a shape it cannot rewrite) loads the whole set on every
        process. Summing its ``correct`` over W processes would print W times
        the original's count, so a reduction goes only where values are per shard.
        """
        sharded_already = m.Call(
            args=[
                m.ZeroOrMore(),
                m.Arg(
                    call_to(names.DISTRIBUTED_SAMPLER) | m.Call(func=m.Name(names.EVALUATION_SHARD_HELPER) | m.Name(names.SHARDED_SAMPLER_HELPER)),
                    keyword=m.Name("sampler") | m.Name("batch_sampler"),
                ),
                m.ZeroOrMore(),
            ]
        )
        for call in analysis.findall(call_to(names.DATA_LOADER)):
            assert isinstance(call, cst.Call)
            if call in self.plans or call in analysis.sharded_loaders or self.matches(call, sharded_already):
                continue
            reference, _ = self._binding(analysis.module, call, analysis.parents[call])
            if reference is None:
                continue
            loops, _ = self._loops_over(_stem(reference))
            analysis.whole_loops.update(loops)

    def _keep_other_modules_evaluations_whole(self, analysis: Analysis) -> None:
        """Evaluation loops over loaders another module of the project builds see the whole set on every process.

        That module keeps its evaluation loaders whole (their loops are not there to
        gather), so summing a count over processes here would print W times the count.
        """
        backward = m.Call(func=m.Attribute(attr=m.Name("backward")))
        for loop in analysis.nodes(cst.For):
            # A loader named for training is split there, as is_training_loader decides, and is gathered here.
            training = "train" in code_of(loop.iter).lower()
            if not training and self.batches.from_project_loader(loop.iter) and not analysis.findall_in(loop.body, backward):
                analysis.whole_loops.add(loop)

    def _may_shard(self, call: cst.Call, reference: cst.BaseExpression | None) -> bool:
        if reference is None:
            loop = self.analysis.parents.get(call)
            if isinstance(loop, cst.For) and loop.iter is call:
                return self._gathered("this loader", [loop])  # `for x, y in DataLoader(...):`
            # `return {"val": DataLoader(...)}`: where its results go is not followed, so they are not gathered.
            return self._keep_whole(call, "this loader", [], "convert cannot follow it to the loop that evaluates it")
        stem = _stem(reference)
        loops, unknown = self._loops_over(stem)
        if self.analysis.role.setup_elsewhere:
            # The `__main__` self-test of a module the project's programs import runs apart from them: its
            # loops say nothing of how those programs evaluate the loader.
            loops = [loop for loop in loops if not any(self.matches(a, MAIN_GUARD) for a in self.analysis.ancestors(loop))]
        if unknown is not None:
            where, why = unknown
            return self._keep_whole(where, stem, loops, why)
        if not loops:
            # Evaluated in another module (a data module's `self.query_loader`), or where convert does not follow
            # it (`loaders["val"]` of a returned dict): whether that loop gathers its results is not known.
            return self._keep_whole(call, stem, loops, "no loop of this file evaluates it, so convert cannot see whether its results are gathered")
        return self._gathered(stem, loops)

    def _gathered(self, stem: str, loops: list[cst.For]) -> bool:
        """Whether the results of ``loops`` over the loader are gathered exactly once sharded; if not, it stays whole."""
        # Wrapped models, as written (DataParallel) or as converted (wrap_ddp), and the parameters they are passed as.
        models = self.analysis.lifecycle.model_names | self.analysis.effects.models
        for loop in loops:
            for forward in self.analysis.within(loop.body, cst.Call):
                func = code_of(forward.func).removeprefix("self.")
                if func in models and not self._without_gradients(forward):
                    self.report(forward, "DDP313", loader=stem)
                    self.analysis.whole_loops.update(loops)
                    return False
            ungathered = loop_results(self.analysis, loop, training=False).ungathered
            counted = self._counts_its_batches(loop)
            if counted is not None:
                why = f"`{code_of(counted)}` counts this process's batches, not the whole set's, so what it divides would be one shard's"
                return self._keep_whole(counted, stem, loops, why)
            if ungathered:
                statement, held = ungathered[0]
                why = f"`{held}` keeps this process's share of the results, which convert cannot gather exactly"
                return self._keep_whole(statement, stem, loops, why)
        self.analysis.gathered_loops.update(loops)
        return True

    def _counts_its_batches(self, loop: cst.For) -> cst.Call | None:
        """``len(test_loader)`` in the function of a loop over it (``mae / len(test_loader)``): sharded, the loader has
        this process's batches only, and no reduction makes that count the whole set's."""
        iterated = {n.value for n in self.analysis.within(loop.iter, cst.Name)}
        owner = owner_of(self.analysis, loop)
        for call in self.analysis.findall_in(owner, m.Call(func=m.Name("len"), args=[m.Arg(m.Name())])):
            assert isinstance(call, cst.Call)
            if call.args[0].value.value in iterated:  # type: ignore[attr-defined]
                return call
        return None

    def _keep_whole(self, where: cst.CSTNode, loader: str, loops: list[cst.For], why: str) -> bool:
        self.report(where, "DDP316", loader=loader, why=why)
        self.analysis.whole_loops.update(loops)
        return False

    def _loops_over(self, stem: str) -> tuple[list[cst.For], tuple[cst.CSTNode, str] | None]:
        """The loops that iterate the loader, followed through assignments and the script's functions.

        All the loops convert can follow are found, also past a use it cannot: a loader
        kept whole must keep every loop over it from being gathered. The second value
        is the first use convert cannot follow, if any, and why, said
        as DDP316 says it: the loader is handed to a function of another file or to
        ``iter()``, iterated by a comprehension, returned to a caller convert does not follow.
        """
        analysis = self.analysis
        functions = script_functions(analysis.module, analysis)
        constructors = {
            c.name.value: member
            for c in analysis.nodes(cst.ClassDef)
            for member in c.body.body
            if isinstance(member, cst.FunctionDef) and member.name.value == "__init__"
        }
        loops: list[cst.For] = []
        # The first use convert cannot follow; the search goes on, so that every loop it can follow is known.
        unknown: tuple[cst.CSTNode, str] | None = None
        # (name, where it is visible, and for a tuple the caller kept whole, the loader's place in it)
        pending: list[tuple[str, cst.CSTNode, int | None]] = [(stem, analysis.module, None)]
        seen: set[tuple[str, int, int | None]] = set()
        # The one plain name binding an alias was followed from, where it has just one: (name, scope) -> target.
        bound_at: dict[tuple[str, int], cst.Name] = {}
        followed: dict[tuple[str, int], set[int]] = {}
        while pending:
            name, within, position = pending.pop()
            if (name, id(within), position) in seen:
                continue
            seen.add((name, id(within), position))
            # `loaders["val"]`, a loader kept under a key of a dict: its reads spelled so.
            keyed = [n for n in analysis.within(within, cst.Subscript) if code_of(n) == name] if "[" in name else []
            # `tbar = tqdm(val_loader)` after `tbar = tqdm(train_loader)`: only the reads that binding reaches.
            reached = {id(r) for r in analysis.reached(bound_at[(name, id(within))])} if (name, id(within)) in bound_at else None
            for node in [*analysis.within(within, cst.Name), *keyed]:
                parent = analysis.parents[node]
                if isinstance(node, cst.Name) and node.value != name or isinstance(parent, cst.Param):
                    continue
                if reached is not None and isinstance(node, cst.Name) and id(node) not in reached and not isinstance(parent, cst.AssignTarget):
                    continue
                if isinstance(parent, cst.AssignTarget):
                    continue  # `loaders["val"] = DataLoader(...)`: the loader being bound
                use: cst.CSTNode = parent if isinstance(parent, cst.Attribute) and parent.attr is node else node
                if is_bound_here(analysis, use):
                    continue  # the loader being bound
                parent = analysis.parents[use]
                if position is not None:
                    # `loaders = make_loaders()`: only `loaders[position]` is the loader; any other use of
                    # the whole tuple (unpacked, handed on) may reach it where convert does not look.
                    index = _literal_index(parent) if isinstance(parent, cst.Subscript) and parent.value is use else None
                    if index is None:
                        unknown = unknown or (use, f"it is returned in a tuple kept whole as `{name}`, whose use convert does not follow")
                        continue
                    if index != position:
                        continue
                    use, parent = parent, analysis.parents[parent]
                # `enumerate(loader)`, `tqdm(loader)`, `a if c else loader` iterate the loader as it is.
                while self._passes_through(use, parent):
                    use = analysis.parents[parent] if isinstance(parent, cst.Arg) else parent
                    parent = analysis.parents[use]
                if isinstance(parent, cst.Attribute):
                    continue  # `loader.dataset`
                loop = self._iterated_by(use)
                if isinstance(loop, cst.For):
                    loops.append(loop)
                    continue
                if isinstance(parent, cst.Assign):
                    for target in parent.targets:
                        alias = target.target
                        if isinstance(alias, (cst.Name, cst.Attribute)):
                            owner = analysis.module if isinstance(alias, cst.Attribute) else owner_of(analysis, parent)
                            key = (code_of(alias).rsplit(".", 1)[-1], id(owner))
                            followed.setdefault(key, set()).add(id(alias))
                            if isinstance(alias, cst.Name) and len(followed[key]) == 1:
                                bound_at[key] = alias
                            elif bound_at.pop(key, None) is not None:
                                # Followed from a second binding: every read counts, so the name is read again.
                                seen.discard((key[0], key[1], None))
                            pending.append((code_of(alias).rsplit(".", 1)[-1], owner, None))
                    continue
                if isinstance(loop, cst.CompFor):
                    unknown = unknown or (loop, "it is iterated by a comprehension, which convert cannot see into")
                    continue
                callers = analysis.returned_to(use)
                if callers:
                    # `return model, val_loader` in `get_data()`: follow it to each caller's name.
                    for target, assign in callers:
                        if isinstance(target, (cst.Name, cst.Attribute)):
                            owner = analysis.module if isinstance(target, cst.Attribute) else owner_of(analysis, assign)
                            pending.append((code_of(target).rsplit(".", 1)[-1], owner, None))
                    continue
                kept = self._tuples_kept_whole(use)
                if kept:
                    pending.extend(kept)
                    continue
                if isinstance(parent, (cst.Return, cst.Yield, cst.Element, cst.DictElement, cst.Lambda)):
                    unknown = unknown or (use, self._passed_on(use))
                    continue
                if not isinstance(parent, cst.Arg):
                    continue  # a test such as `loader is not None`
                receiver = analysis.parents[parent]
                assert isinstance(receiver, cst.Call)
                if m.matches(receiver.func, m.Name("len")):
                    continue
                callee = code_of(receiver.func)
                function = functions.get(callee) or constructors.get(callee)
                parameter = parameter_for(function, receiver, parent) if function is not None else None
                if parameter is None:
                    unknown = unknown or (receiver, f"it is handed to `{callee}`, which convert cannot see into")
                    continue
                pending.append((parameter, function, None))  # type: ignore[arg-type]
        return loops, unknown

    def _tuples_kept_whole(self, use: cst.CSTNode) -> list[tuple[str, cst.CSTNode, int | None]]:
        """``return train_loader, val_loader`` to ``loaders = make_loaders()``: the names each caller keeps the tuple as.

        Empty unless every caller of the function in this file binds its result to one name.
        """
        element = self.analysis.parents.get(use)
        returned = self.analysis.parents.get(element) if isinstance(element, cst.Element) else None
        if not isinstance(returned, cst.Tuple) or not isinstance(self.analysis.parents.get(returned), cst.Return):
            return []
        function = next((a for a in self.analysis.ancestors(returned) if isinstance(a, cst.FunctionDef)), None)
        if function is None:
            return []
        position = list(returned.elements).index(element)  # type: ignore[arg-type]
        kept = []
        for call in self.analysis.callers(function):
            assign = self.analysis.parents.get(call)
            if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name)):
                return []
            kept.append((assign.targets[0].target.value, owner_of(self.analysis, assign), position))
        return kept

    def _passed_on(self, use: cst.CSTNode) -> str:
        """Where a loader goes that no caller of this file binds: returned, yielded, or put in a container."""
        node, container = use, None
        # `return train_loader, val_loader, n`: the tuple, not the loader, is what the function returns.
        while isinstance(self.analysis.parents.get(node), (cst.Element, cst.DictElement)):
            element = self.analysis.parents[node]
            if isinstance(element, cst.DictElement) and node is element.key:
                break
            node = self.analysis.parents[element]
            container = container or {cst.Tuple: "a tuple", cst.List: "a list", cst.Set: "a set", cst.Dict: "a dict"}.get(type(node))
        parent = self.analysis.parents.get(node)
        function = next((a for a in self.analysis.ancestors(node) if isinstance(a, (cst.FunctionDef, cst.Lambda))), None)
        if isinstance(parent, (cst.Return, cst.Yield)) or isinstance(function, cst.Lambda) and node is function.body:
            verb = "yielded" if isinstance(parent, cst.Yield) else "returned"
            by = f"`{function.name.value}`" if isinstance(function, cst.FunctionDef) else "a lambda"
            inside = f" in {container}" if container else ""
            return f"it is {verb}{inside} by {by}, and convert does not follow what its callers do with it"
        return f"it is put in {container or 'a container'}, which convert does not follow"

    def _passes_through(self, use: cst.CSTNode, parent: cst.CSTNode) -> bool:
        if isinstance(parent, cst.IfExp):
            return use is parent.body or use is parent.orelse
        if not isinstance(parent, cst.Arg) or parent.keyword is not None:
            return False
        call = self.analysis.parents[parent]
        return isinstance(call, cst.Call) and (
            m.matches(call.func, m.Name("enumerate") | m.Name("zip")) or self.matches(call, call_to(names.TQDM))
        )

    def _iterated_by(self, node: cst.CSTNode) -> cst.For | cst.CompFor | None:
        """The loop or comprehension whose ``iter`` holds ``node``, if any."""
        child = node
        for ancestor in self.analysis.ancestors(node):
            if isinstance(ancestor, (cst.For, cst.CompFor)) and child is ancestor.iter:
                return ancestor
            if isinstance(ancestor, (cst.BaseStatement, cst.BaseSmallStatement)):
                return None
            child = ancestor
        return None

    def _without_gradients(self, node: cst.CSTNode, depth: int = 0) -> bool:
        """Inside ``with torch.no_grad():``, a function decorated with it, or a function only called under it."""
        for ancestor in self.analysis.ancestors(node):
            if isinstance(ancestor, cst.With) and any(self.matches(item.item, call_to(names.NO_GRAD)) for item in ancestor.items):
                return True
            if isinstance(ancestor, cst.FunctionDef):
                if any(self.matches(d.decorator, call_to(names.NO_GRAD) | resolves_to(names.NO_GRAD)) for d in ancestor.decorators):
                    return True
                name = ancestor.name.value
                callers = [
                    c for c in self.analysis.nodes(cst.Call)
                    if m.matches(c.func, m.Name(name) | m.Attribute(value=m.Name("self"), attr=m.Name(name)))
                ]  # fmt: skip
                return depth < 3 and bool(callers) and all(self._without_gradients(c, depth + 1) for c in callers)
        return False

    def _sampler(self, dataset: cst.BaseExpression, shuffle: cst.BaseExpression) -> cst.Call:
        return cst.Call(func=cst.Name(names.EVALUATION_SHARD_HELPER), args=[cst.Arg(dataset)])

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        module = super().leave_Module(original_node, updated_node)
        if not self.plans:
            return module
        import_torch_distributed(self.context, self.dist)
        return add_helper(module, self.facts, names.EVALUATION_SHARD_HELPER, EVALUATION_SHARD_HELPER_SOURCE)


def _literal_index(subscript: cst.Subscript) -> int | None:
    """``3`` in ``loaders[3]``; None for a slice, a name or several indices."""
    if len(subscript.slice) != 1 or not isinstance(subscript.slice[0].slice, cst.Index):
        return None
    value = subscript.slice[0].slice.value
    return int(value.value) if isinstance(value, cst.Integer) else None
