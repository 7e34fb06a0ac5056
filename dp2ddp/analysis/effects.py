"""What a statement does to the world outside its process, and which calls every process must make.

Two facts decide where a main-process guard may go. A *side effect* (a
print, a log line, a checkpoint, a file write) should happen once per run,
so it belongs under ``if is_main_process():``. A *collective* (an
all-reduce, a barrier, the forward of a DDP model, ``backward()``, or a
function of the script that reaches one) must be reached by every process,
or the ones that did wait forever. A guard may hold the first and must never
hold the second.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import libcst as cst
import libcst.matchers as m
from libcst.metadata import BaseAssignment, ParentNodeProvider

from . import names
from .syntax import argument, call_to, code_of, parameter_for, resolves_to, script_functions
from .tree import Tree

if TYPE_CHECKING:
    from .module import Analysis

# Names people give the objects they log through.
LOGGER_NAME = re.compile(r"(^|[_.])(logger|log)$", re.IGNORECASE)
# Tests that mean "only the main process": rank == 0, local_rank in [-1, 0], is_main_process(), ...
# Not `max_rank` or `top_rank` of a retrieval metric, which count ranked results.
RANK_GUARD = re.compile(r"(?<!max_)(?<!min_)(?<!top_)rank|main_process|is_main|is_master|master_process", re.IGNORECASE)
WRITE_MODE = re.compile(r"[wax+]")
# Where a sub-expression may not be evaluated every time its statement runs.
CONDITIONAL_CONTEXTS = (
    cst.Lambda,
    cst.IfExp,
    cst.BooleanOperation,
    cst.ListComp,
    cst.SetComp,
    cst.DictComp,
    cst.GeneratorExp,
)


class Planner(Protocol):
    """Anything that plans against an analysis, such as a codemod."""

    analysis: Analysis


def _analysis_of(reader: Analysis | Planner) -> Analysis:
    return reader if isinstance(reader, Tree) else reader.analysis  # type: ignore[return-value]


def opens_for_writing(reader: Analysis | Planner, node: cst.CSTNode) -> bool:
    """``open(path, "w")`` and every other mode that creates or changes a file, but ``r+``, which reads it too; so
    too a library's file opener given such a mode (``h5py.File(path, "w")``, ``tarfile.open(path, "w:gz")``,
    ``np.memmap(mode="w+")``)."""
    if not isinstance(node, cst.Call):
        return False
    analysis = _analysis_of(reader)
    if not analysis.matches(node, call_to({"builtins.open"})) and not any(
        "." in q.name and q.name.rsplit(".", 1)[1] in names.FILE_OPENERS for q in analysis.qualified_names(node.func)
    ):
        return False
    mode = argument(node, 1, "mode")
    # `r+` reads the file it may change (`h5py.File(name, "r+")` holding the data set): every process needs the
    # real file, so it is no writer to send to os.devnull off the main process.
    return isinstance(mode, cst.SimpleString) and bool(WRITE_MODE.search(mode.evaluated_value)) and not str(mode.evaluated_value).startswith("r")


@dataclass(frozen=True)
class DeviceIndices:
    """The values a script picks a GPU with: ``gpu`` in ``torch.cuda.set_device(gpu)`` or ``.cuda(gpu)``.

    With one process per GPU such a value is the process's local rank, so a test on it
    (``gpu == 0``) holds on some processes only. A name is one of them by its binding (a
    parameter, an assignment), so another ``gpu`` elsewhere is not; an attribute
    (``args.gpu``, ``self.gpu_id``) by its spelling.
    """

    # Each binding of a name used as a GPU index, with the first call that uses it so.
    bindings: Mapping[BaseAssignment, cst.Call]
    attributes: frozenset[str]

    def holds(self, analysis: Analysis, value: cst.BaseExpression) -> bool:
        if isinstance(value, cst.Attribute):
            return code_of(value) in self.attributes
        return isinstance(value, cst.Name) and any(b in self.bindings for b in _bindings(analysis, value))


def find_device_indices(analysis: Analysis) -> DeviceIndices:
    bindings: dict[BaseAssignment, cst.Call] = {}
    attributes: set[str] = set()
    for call in analysis.nodes(cst.Call):
        for value in _gpu_index_arguments(analysis, call):
            if isinstance(value, cst.Name):
                for binding in _bindings(analysis, value):
                    bindings.setdefault(binding, call)
            elif isinstance(value, cst.Attribute):
                attributes.add(code_of(value))
    # `gpu_id = gpu`, then `set_device(gpu_id)`: the value it copies is an index too.
    pending = list(bindings)
    while pending:
        binding = pending.pop()
        target = analysis.parents.get(getattr(binding, "node", None))  # type: ignore[arg-type]
        assign = analysis.parents.get(target) if isinstance(target, cst.AssignTarget) else None
        if isinstance(assign, cst.Assign) and isinstance(assign.value, cst.Name):
            for copied in _bindings(analysis, assign.value):
                if copied not in bindings:
                    bindings[copied] = bindings[binding]
                    pending.append(copied)
    return DeviceIndices(bindings, frozenset(attributes))


def _gpu_index_arguments(analysis: Analysis, call: cst.Call) -> list[cst.BaseExpression]:
    """What ``call`` takes as a GPU index or a rank: the device of ``set_device``/``.cuda``, ``device_ids``, ``rank=``."""
    found: list[cst.BaseExpression | None] = []
    if analysis.matches(call, call_to({"torch.cuda.set_device"})) or m.matches(call.func, m.Attribute(attr=m.Name("cuda"))):
        found.append(argument(call, 0, "device"))
    elif analysis.matches(call, call_to({"torch.device"})):
        found.append(argument(call, 1, "index"))
    elif analysis.matches(call, call_to(names.DATA_PARALLEL | names.DISTRIBUTED_DATA_PARALLEL)):
        device_ids = argument(call, 1, "device_ids")
        if isinstance(device_ids, (cst.List, cst.Tuple)):
            found += [element.value for element in device_ids.elements]
        found.append(argument(call, 2, "output_device"))
    elif analysis.matches(call, call_to(names.INIT_PROCESS_GROUP)):
        found.append(argument(call, 99, "rank"))
    return [value for value in found if value is not None]


def _bindings(analysis: Analysis, name: cst.Name) -> list[BaseAssignment]:
    scope = analysis.scopes.get(name)
    if scope is None or name.value not in scope:
        return []
    return list(scope[name.value])


def tests_device_index(analysis: Analysis, test: cst.BaseExpression) -> bool:
    """``gpu == 0``, ``args.gpu != 0``: a GPU index compared with a number, which differs between processes.

    ``args.gpu is not None`` asks whether a GPU was chosen at all, which every process answers alike.
    """
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return tests_device_index(analysis, test.expression)
    if isinstance(test, cst.BooleanOperation):
        return tests_device_index(analysis, test.left) or tests_device_index(analysis, test.right)
    if not isinstance(test, cst.Comparison):
        return False
    sides = [test.left, *(target.comparator for target in test.comparisons)]
    indices = [side for side in sides if analysis.device_indices.holds(analysis, side)]
    others = [side for side in sides if side not in indices]
    return len(indices) == 1 and bool(others) and all(isinstance(side, cst.Integer) for side in others)


def is_rank_guard(analysis: Analysis, test: cst.BaseExpression) -> bool:
    """A test only some processes pass: ``rank == 0``, ``is_main_process()``, or ``gpu == 0`` where ``gpu`` picks the GPU."""
    return bool(RANK_GUARD.search(code_of(test))) or tests_device_index(analysis, test)


def under_rank_guard(reader: Analysis | Planner, node: cst.CSTNode) -> bool:
    """Whether ``node`` only runs on some processes: inside ``if rank == 0:`` and the like."""
    analysis = _analysis_of(reader)
    while not isinstance(node, cst.Module):
        child, node = node, analysis.get_metadata(ParentNodeProvider, node)
        if isinstance(node, cst.If) and is_rank_guard(analysis, node.test):
            return True
        if isinstance(node, cst.IfExp) and node.body is child and is_rank_guard(analysis, node.test):
            return True  # `open(path, "w") if is_main_process() else None`
    return False


class ProcessEffects:
    """Side effects and collectives of one script, resolved once."""

    def __init__(self, analysis: Analysis) -> None:
        self.analysis = analysis
        self.models: set[str] = set()
        self.loggers: set[str] = set()
        self.writers: set[str] = set()
        # Names bound to a function that logs: `logging = create_exp_dir(...)`, then `logging("...")`.
        self.log_functions: set[str] = set()
        imported_wraps = set(analysis.script_facts.imported_wraps)
        for assign in analysis.findall(m.Assign(targets=[m.AssignTarget(m.Name() | m.Attribute())])):
            assert isinstance(assign, cst.Assign)
            target, value = code_of(assign.targets[0].target), assign.value
            if m.matches(value, m.Call(func=m.Name(names.WRAP_HELPER))) or value in imported_wraps:
                # A DDP model is often passed on as `model` or kept as `self.model`.
                self.models |= {target, target.rsplit(".", 1)[-1]}
            elif analysis.matches(value, call_to(names.GET_LOGGER)):
                self.loggers.add(target)
            elif analysis.matches(value, call_to(names.WRITER_CONSTRUCTORS)) or opens_for_writing(analysis, value):
                self.writers.add(target)
            elif isinstance(value, cst.Call) and (target == "logging" or LOGGER_NAME.search(target)):
                self.log_functions.add(target)
            elif m.matches(value, m.Name("print") | m.Attribute(attr=m.Name(m.MatchIfTrue(lambda n: n in names.LOGGER_METHODS)))):
                # `print = logger.info`, `log = print`: the name prints or logs from then on.
                self.log_functions.add(target)
        self.log_functions = {name for name in self.log_functions if self._called_directly(name)}
        # `with open(path, "w") as log:`: the name writes the file inside the block.
        for item in analysis.nodes(cst.WithItem):
            if isinstance(item.asname, cst.AsName) and isinstance(item.asname.name, cst.Name) and (
                analysis.matches(item.item, call_to(names.WRITER_CONSTRUCTORS)) or opens_for_writing(analysis, item.item)
            ):  # fmt: skip
                self.writers.add(item.asname.name.value)
        self.functions = script_functions(analysis.module, analysis)
        # Calls in each function's body, found once for the fixpoints below.
        self._calls_in = {name: analysis.within(function.body, cst.Call) for name, function in self.functions.items()}
        # `evaluate(net, loader)` makes `evaluate`'s first parameter a DDP model too, and
        # `log_metrics(writer, step)` makes its first parameter a writer.
        self._follow_into_functions(self.models)
        self._follow_into_functions(self.writers)
        self.collective_functions = self._functions_reaching_collectives()

    def _called_directly(self, name: str) -> bool:
        """Whether the script calls ``name(...)`` itself, as it would a logging function."""
        return any(m.matches(call.func, m.Name(name)) for call in self.analysis.nodes(cst.Call))

    def _follow_into_functions(self, held: set[str]) -> None:
        """Add the parameters of the script's functions that are passed one of ``held``."""
        functions = self.functions
        calls = self.analysis.nodes(cst.Call)
        changed = True
        while changed:
            changed = False
            for call in calls:
                function = functions.get(code_of(call.func))
                if function is None:
                    continue
                for arg in call.args:
                    if code_of(arg.value) not in held:
                        continue
                    parameter = parameter_for(function, call, arg)
                    if parameter is not None and parameter not in held:
                        held.add(parameter)
                        changed = True

    def _functions_reaching_collectives(self) -> set[str]:
        functions = self.functions
        reaching: set[str] = set()
        changed = True
        while changed:
            changed = False
            for name, function in functions.items():
                if name in reaching or name.split(".")[-1] in names.HELPERS:
                    continue
                if any(self._is_collective(call, reaching) for call in self._calls_in[name]):
                    reaching.add(name)
                    changed = True
        return reaching

    def _is_collective(self, call: cst.Call, functions: set[str]) -> bool:
        func = code_of(call.func)
        if func in functions or func in names.COLLECTIVE_HELPERS or func == names.MAIN_VALUE_HELPER:
            return True
        if func in self.models or (func.startswith("self.") and func[5:] in self.models):
            return True
        if m.matches(call.func, m.Attribute(attr=m.Name("backward"))):
            return True  # DDP averages gradients inside backward().
        qualified = self.analysis.qualified_names(call.func)
        if any(q.name.startswith("torch.distributed.") and q.name not in names.DISTRIBUTED_QUERIES for q in qualified):
            return True
        if process_group_collective(self.analysis, call) is not None:
            return True
        # A function from another file that is handed the DDP model probably runs it.
        hands_over_model = any(code_of(arg.value) in self.models for arg in call.args)
        defined_here = func in self.functions
        builtin = bool(qualified) and all(q.name.startswith("builtins.") for q in qualified)
        return hands_over_model and not defined_here and not builtin and not self.is_side_effect(call)

    def is_collective(self, call: cst.Call) -> bool:
        return self._is_collective(call, self.collective_functions)

    def collectives_in(self, node: cst.CSTNode) -> list[cst.Call]:
        """Collective calls in ``node``, outermost first, skipping ones nested in another.

        Calls in a function defined inside ``node`` do not count: defining a
        function runs none of it.
        """
        found: list[cst.Call] = []
        analysis = self.analysis
        skip_through = -1
        for call in analysis.within(node, cst.Call):
            if analysis.index[call] <= skip_through or self._in_definition(call, node):
                continue
            if self.is_collective(call):
                found.append(call)
                skip_through = analysis.last[call]
        return found

    def _in_definition(self, call: cst.Call, node: cst.CSTNode) -> bool:
        ancestor: cst.CSTNode = call
        while ancestor is not node:
            ancestor = self.analysis.parents[ancestor]
            if isinstance(ancestor, cst.FunctionDef):
                return True
        return False

    def is_side_effect(self, call: cst.Call) -> bool:
        matches = self.analysis.matches
        if matches(call, call_to(names.SIDE_EFFECT_CALLS | names.LOGGING_FUNCTIONS)):
            return True
        qualified = self.analysis.qualified_names(call.func)
        if any(q.name.startswith(names.REPORTING_MODULES) for q in qualified):
            return True
        if any(self.analysis.role.writer_site(q.name) for q in qualified):
            return True  # Another module's function that writes, which the project guards at its calls.
        if isinstance(call.func, cst.Name):
            return call.func.value in self.log_functions
        if isinstance(call.func, cst.Attribute):
            receiver = code_of(call.func.value)
            if receiver in self.writers:
                return True
            if call.func.attr.value in names.LOGGER_METHODS:
                return receiver in self.loggers or bool(LOGGER_NAME.search(receiver))
            if call.func.attr.value in names.SUMMARY_WRITER_METHODS:
                return True
            if call.func.attr.value in names.MODEL_SAVE_METHODS:
                return receiver.removesuffix(".module") in self.models | self.analysis.lifecycle.model_names
        return matches(call, call_to(names.MAKE_DIRECTORY)) and not self.makes_directory_everywhere(call)

    def fails_on_a_made_directory(self, call: cst.Call) -> bool:
        """``os.makedirs(d)``, ``os.mkdir(d)`` or a pathlib ``path.mkdir(parents=True)`` without ``exist_ok``: it raises
        where the directory exists, as it does once another process has made it."""
        exist_ok = next((a for a in call.args if a.keyword is not None and a.keyword.value == "exist_ok"), None)
        if exist_ok is not None and not m.matches(exist_ok.value, m.Name("False")):
            return False
        if self.analysis.matches(call, call_to(names.MAKE_DIRECTORY)):
            return True
        return m.matches(call.func, m.Attribute(attr=m.Name("mkdir"))) and all(
            a.keyword is not None and a.keyword.value in ("parents", "mode", "exist_ok") for a in call.args
        )

    def makes_directory_everywhere(self, call: cst.Call) -> bool:
        """``os.makedirs(d, exist_ok=True)``, or a call guard_side_effects turns into one: every process may run it."""
        if not self.analysis.matches(call, call_to(names.MAKE_DIRECTORY)):
            return False
        return isinstance(call.func, cst.Attribute) or m.matches(call.func, m.Name("makedirs"))

    def is_conditionally_evaluated(self, node: cst.CSTNode, statement: cst.CSTNode) -> bool:
        """Whether ``node`` may be skipped when ``statement`` runs (a lambda, an ``and``, a comprehension)."""
        while node is not statement:
            node = self.analysis.parents[node]
            if isinstance(node, CONDITIONAL_CONTEXTS):
                return True
        return False


def process_group_collective(tree: Tree, call: cst.Call) -> str | None:
    """The collective a process group's own method makes (``pg.monitored_barrier()``), as ``torch.distributed.NAME``.

    Only on an object known to be a process group: a ``.barrier()`` on anything
    else (a ``threading.Barrier``, a trainer) is not a collective.
    """
    if not isinstance(call.func, cst.Attribute) or call.func.attr.value not in names.PROCESS_GROUP_METHODS:
        return None
    return f"torch.distributed.{call.func.attr.value}" if is_process_group(tree, call.func.value) else None


def is_process_group(tree: Tree, node: cst.BaseExpression, depth: int = 3) -> bool:
    """``dist.new_group(...)``, ``dist.group.WORLD``, ``_get_default_group()``, a name or attribute only ever bound
    to one, the first of ``dist.new_subgroups()``'s pair, or a parameter named ``process_group``, ``pg`` or ``group``."""
    if tree.matches(node, call_to(names.PROCESS_GROUP_FACTORIES) | resolves_to(names.DEFAULT_PROCESS_GROUP)):
        return True
    if depth == 0 or not isinstance(node, (cst.Name, cst.Attribute)):
        return False
    if isinstance(node, cst.Name):
        bindings = tree.bindings(node)
        if not bindings:
            return False
        if any(b is None for b in bindings):
            # Not a plain assignment: a parameter of that name, or the group of a subgroup pair.
            return _process_group_parameter(tree, node) or _first_of_subgroups(tree, node)
        values = [b.value for b in bindings if b is not None]
    else:
        spelled = code_of(node)
        values = [a.value for a in tree.nodes(cst.Assign) if any(code_of(t.target) == spelled for t in a.targets)]
    return bool(values) and all(is_process_group(tree, v, depth - 1) for v in values)


def _process_group_parameter(tree: Tree, name: cst.Name) -> bool:
    if name.value not in names.PROCESS_GROUP_PARAMETERS:
        return False
    function = next((a for a in tree.ancestors(name) if isinstance(a, cst.FunctionDef)), None)
    if function is None:
        return False
    parameters = [*function.params.posonly_params, *function.params.params, *function.params.kwonly_params]
    return any(p.name.value == name.value for p in parameters)


def _first_of_subgroups(tree: Tree, name: cst.Name) -> bool:
    """``pg, subgroups = dist.new_subgroups()``: the first name is this process's subgroup."""
    scope = next((a for a in tree.ancestors(name) if isinstance(a, (cst.FunctionDef, cst.Module))), tree.module)
    for assign in tree.within(scope, cst.Assign):
        for target in assign.targets:
            if (
                isinstance(target.target, (cst.Tuple, cst.List))
                and target.target.elements
                and m.matches(target.target.elements[0].value, m.Name(name.value))
                and tree.matches(assign.value, call_to(names.PROCESS_SUBGROUP_FACTORIES))
            ):
                return True
    return False
