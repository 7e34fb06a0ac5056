"""Whole-script facts: what wraps a model, what is already distributed, where setup goes."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import libcst as cst
import libcst.matchers as m
from libcst.metadata import ClassScope, GlobalScope

from . import names
from .syntax import MAIN_GUARD, argument, call_to, code_of, defined_functions, main_guard, resolves_to, without_device_move

if TYPE_CHECKING:
    from .module import Analysis


def entry_point(analysis: "Analysis") -> str | None:
    """Where ``setup_distributed()`` goes: "main" (the entry guard), "top" (after the imports) or nowhere.

    Training code at module level needs the process group as soon as the
    script runs; otherwise the ``if __name__ == "__main__":`` block starts it,
    and everything else at module level runs at import, before setup.
    """
    module = analysis.module
    needs = m.Call(func=m.Name(names.WRAP_HELPER)) | call_to(names.DATA_PARALLEL | names.DATA_LOADER | names.DISTRIBUTED_SAMPLER)
    imported = set(analysis.script_facts.imported_wraps)
    top_level_training = any(
        analysis.findall_in(statement, needs) or any(call in imported for call in analysis.within(statement, cst.Call))
        for statement in module.body
        if not isinstance(statement, (cst.FunctionDef, cst.ClassDef)) and not m.matches(statement, MAIN_GUARD)
    )
    if top_level_training:
        return "top"
    if main_guard(module) is not None:
        return "main"
    if analysis.role.drives is not None:
        return "top"  # A script of the project whose top level drives code that trains (`Trainer(...).train()`).
    return None


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


@dataclass
class ScriptFacts:
    """What the codemods need to know about the whole script before editing it."""

    # Any use of a DataParallel name, convertible or not.
    mentions_data_parallel: bool = False
    # DataParallel calls that wrap a whole model, and those that wrap part of one.
    model_wraps: list[cst.Call] = field(default_factory=list)
    submodule_wraps: list[cst.Call] = field(default_factory=list)
    # DataParallel calls whose model only loads a checkpoint saved from a DataParallel model (its `module.` keys)
    # and is unwrapped at once (`m = nn.DataParallel(m); m.load_state_dict(sd); m = m.module`): they run no batch.
    loading_wraps: list[cst.Call] = field(default_factory=list)
    # Those of them returned still wrapped, by the return that hands them on, where the caller wraps the model
    # again (`crnn = net_init()` ... `crnn = nn.DataParallel(crnn)`): the return takes the model out.
    returned_loading_wraps: dict[cst.Call, cst.Return] = field(default_factory=dict)
    # DataParallel calls whose name a star import may bind: what they mean is unknown.
    unresolved_wraps: list[cst.Call] = field(default_factory=list)
    # Calls of the wrap helper: the script was converted before.
    helper_wraps: int = 0
    # Calls of a project function that returns a wrapped model (`model = create_model(opt)`).
    imported_wraps: list[cst.Call] = field(default_factory=list)
    # Wraps in a DataParallel subclass another module of the project defines.
    subclass_wraps: list[cst.Call] = field(default_factory=list)
    # Calls of a DataParallel-like class whose code convert does not read (`DataParallelWithCallback` from a
    # package outside the project): what they do cannot be told.
    foreign_wraps: list[cst.Call] = field(default_factory=list)
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
        return bool(self.model_wraps) or self.helper_wraps > 0 or bool(self.imported_wraps)


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
            elif wrapped is not None and _only_loads(analysis, call):
                facts.loading_wraps.append(call)
            elif wrapped is not None and (handed_on := _returned_after_loading(analysis, call)) is not None:
                facts.loading_wraps.append(call)
                facts.returned_loading_wraps[call] = handed_on
            elif wrapped is not None:
                facts.model_wraps.append(call)
        if m.matches(call.func, m.Name(names.WRAP_HELPER)):
            facts.helper_wraps += 1
        elif analysis.role.imported_wraps and any(analysis.role.wrap_site(q.name) for q in analysis.qualified_names(call.func)):
            facts.imported_wraps.append(call)
        elif analysis.role.subclass_wraps and any(analysis.role.subclass_site(q.name) for q in analysis.qualified_names(call.func)):
            facts.subclass_wraps.append(call)
            facts.mentions_data_parallel = True
        elif _foreign_wrap(analysis, call):
            facts.foreign_wraps.append(call)
            facts.mentions_data_parallel = True
        if facts.existing_distributed is None and not inside_helper(analysis, call):
            if analysis.matches(call, call_to(names.DISTRIBUTED_DATA_PARALLEL)):
                facts.existing_distributed = (call, "DistributedDataParallel")
            elif analysis.matches(call, call_to(names.INIT_PROCESS_GROUP)):
                facts.existing_distributed = (call, "init_process_group")
    # The helpers this file defines, or imports from the project's helpers module.
    facts.helpers = defined_functions(analysis.module) | {
        code_of(alias.asname.name if alias.asname else alias.name)
        for alias in analysis.nodes(cst.ImportAlias)
        if code_of(alias.name) in names.HELPERS and isinstance(analysis.parents.get(alias), cst.ImportFrom)
    }
    return facts


def _only_loads(analysis: Analysis, call: cst.Call) -> bool:
    """``m = nn.DataParallel(m)``, then only ``m.load_state_dict(...)``, then only ``m.module`` (or ``next(m.children())``).

    The statements after the wrap in its function are read in order, up to where the name is bound
    again in the wrap's block: each one that mentions the name must load a state dict into it (before
    any unwrap) or read the model inside the wrapper, and nothing else. Such a wrap only lets keys saved
    from a DataParallel model (``module.conv1.weight``) load.
    """
    assign = analysis.parents.get(call)
    if not m.matches(assign, m.Assign(targets=[m.AssignTarget(m.Name())])):
        return False
    name = assign.targets[0].target.value  # type: ignore[union-attr]
    statement = analysis.parents.get(assign)
    block = analysis.parents.get(statement)
    scope = next((a for a in analysis.ancestors(call) if isinstance(a, (cst.FunctionDef, cst.Module))), None)
    if not isinstance(statement, cst.SimpleStatementLine) or not isinstance(block, (cst.IndentedBlock, cst.Module)) or scope is None:
        return False
    uses = [
        n for n in analysis.within(scope, cst.Name)
        if n.value == name and analysis.index[n] > analysis.last[statement] and _reads_name(analysis, n)
    ]
    loads = unwraps = 0
    for use in uses:
        small = next(a for a in analysis.ancestors(use) if isinstance(a, cst.BaseSmallStatement | cst.BaseCompoundStatement))
        if m.matches(small, m.Assign(targets=[m.AssignTarget(m.Name(name))])) and use is small.targets[0].target:  # type: ignore[union-attr]
            if analysis.parents.get(small) not in block.body:
                return False
            # Bound again in the wrap's block, to what it reads of the wrapper (`m = next(m.children()).encoder`),
            # or to anything else: what follows is another model.
            read = [n for n in analysis.within(small.value, cst.Name) if n.value == name and _reads_name(analysis, n)]  # type: ignore[union-attr]
            if not all(_unwraps(analysis, n) for n in read) or (read and unwraps):
                return False
            unwraps += len(read)
            break
        if _loads_into(small, use) and not unwraps:
            loads += 1
        elif _unwraps(analysis, use):
            unwraps += 1
        else:
            return False
    return loads > 0 and unwraps > 0


def _returned_after_loading(analysis: Analysis, call: cst.Call) -> cst.Return | None:
    """``m = nn.DataParallel(m)``, then only ``m.load_state_dict(...)``, then ``return m``, from a function whose
    callers wrap what it returns again (``crnn = net_init()`` ... ``crnn = nn.DataParallel(crnn)``).

    The first wrap only lets a checkpoint's ``module.`` keys load; under DataParallel the model ran wrapped
    twice. Returned bare instead, it is wrapped once, by the caller's wrap.
    """
    assign = analysis.parents.get(call)
    if not m.matches(assign, m.Assign(targets=[m.AssignTarget(m.Name())])):
        return None
    name = assign.targets[0].target.value  # type: ignore[union-attr]
    statement = analysis.parents.get(assign)
    function = next((a for a in analysis.ancestors(call) if isinstance(a, cst.FunctionDef)), None)
    if function is None or not isinstance(statement, cst.SimpleStatementLine):
        return None
    uses = [n for n in analysis.within(function, cst.Name) if n.value == name and analysis.index[n] > analysis.last[statement] and _reads_name(analysis, n)]
    loads, returned = 0, None
    for use in uses:
        small = next(a for a in analysis.ancestors(use) if isinstance(a, cst.BaseSmallStatement | cst.BaseCompoundStatement))
        if _loads_into(small, use) and returned is None:
            loads += 1
        elif isinstance(small, cst.Return) and small.value is use and returned is None and isinstance(analysis.parents.get(analysis.parents.get(small)), cst.IndentedBlock) and analysis.parents.get(analysis.parents.get(analysis.parents.get(small))) is function:
            returned = small
        else:
            return None
    if not loads or returned is None:
        return None
    # Each caller's binding of the result is wrapped again after it.
    results = [
        a.targets[0].target.value for a in analysis.nodes(cst.Assign)
        if m.matches(a, m.Assign(targets=[m.AssignTarget(m.Name())], value=m.Call(func=m.Name(function.name.value))))
    ]  # fmt: skip
    rewrapped = {
        wrapped.value for other in analysis.nodes(cst.Call)
        if other is not call and analysis.matches(other, call_to(names.DATA_PARALLEL))
        and isinstance(wrapped := without_device_move(argument(other, 0, "module") or cst.Name("None")), cst.Name)
    }  # fmt: skip
    return returned if results and set(results) <= rewrapped else None


def _loads_into(statement: cst.CSTNode, use: cst.Name) -> bool:
    """``use.load_state_dict(...)``, or ``load_model_state(use, ...)`` as convert writes it, as a statement."""
    if not isinstance(statement, cst.Expr) or not isinstance(call := statement.value, cst.Call):
        return False
    if m.matches(call.func, m.Attribute(attr=m.Name("load_state_dict"))):
        return call.func.value is use  # type: ignore[attr-defined]
    return m.matches(call.func, m.Name(names.LOAD_STATE_HELPER)) and bool(call.args) and call.args[0].value is use


def _reads_name(analysis: Analysis, name: cst.Name) -> bool:
    """Not the attribute of ``x.name`` nor the keyword of ``f(name=...)``."""
    parent = analysis.parents.get(name)
    return not (isinstance(parent, cst.Attribute) and parent.attr is name) and not (isinstance(parent, cst.Arg) and parent.keyword is name)


_MODULE_OR_ITSELF = m.Call(func=m.Name("getattr"), args=[m.Arg(m.Name()), m.Arg(m.SimpleString('"module"')), m.Arg(m.Name())])


def _unwraps(analysis: Analysis, use: cst.Name) -> bool:
    """``use.module``, ``getattr(use, "module", use)`` or ``next(use.children())``: the model inside the wrapper."""
    parent = analysis.parents.get(use)
    if m.matches(parent, m.Attribute(attr=m.Name("module"))):
        return True
    call = analysis.parents.get(parent)
    if m.matches(call, _MODULE_OR_ITSELF) and use in (call.args[0].value, call.args[2].value):  # type: ignore[union-attr]
        return code_of(call.args[0].value) == code_of(call.args[2].value)  # type: ignore[union-attr]
    call = analysis.parents.get(parent)
    outer = analysis.parents.get(analysis.parents.get(call))
    return m.matches(parent, m.Attribute(attr=m.Name("children"))) and m.matches(outer, m.Call(func=m.Name("next"), args=[m.Arg()]))


def _in_module_class(analysis: Analysis, node: cst.CSTNode) -> bool:
    """Whether the innermost class around ``node`` is an ``nn.Module``."""
    for ancestor in analysis.ancestors(node):
        if isinstance(ancestor, cst.ClassDef):
            return any(analysis.matches(base.value, resolves_to(names.NN_MODULE)) for base in ancestor.bases)
    return False


def inside_helper(analysis: Analysis, node: cst.CSTNode) -> bool:
    """Whether ``node`` is in one of the helpers dp2ddp adds (``wrap_ddp``, ``all_reduce_sum``, ...)."""
    return any(isinstance(a, (cst.FunctionDef, cst.ClassDef)) and a.name.value in names.HELPERS for a in analysis.ancestors(node))


def _foreign_wrap(analysis: Analysis, call: cst.Call) -> bool:
    """``DataParallelWithCallback(model, ...)`` where the class is imported from code convert does not read,
    not defined in this file (a subclass here is read with the file)."""
    spelled = call.func.attr if isinstance(call.func, cst.Attribute) else call.func
    if not isinstance(spelled, cst.Name) or not names.is_data_parallel_like(spelled.value):
        return False
    if any(c.name.value == spelled.value for c in analysis.nodes(cst.ClassDef)):
        return False
    return not any(q.name.startswith("torch.") for q in analysis.qualified_names(call.func))
