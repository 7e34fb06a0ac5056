"""DDP hazards in a script that already runs DistributedDataParallel, for ``dp2ddp check``.

A converted script and a hand-written DDP script face the same hazards, and
the analysis that lets ``convert`` avoid them finds them here: side effects
every process repeats (``ProcessEffects``), collectives some processes skip
(``ProcessEffects.collectives_in``), training loaders without a
``DistributedSampler`` (the sampler codemod's ``is_training_loader``), the
model's life-cycle around the DDP wrap (``ModelLifecycle``) and losses each
process normalises by its own share (``Analysis.batch_normalised_losses``). Each hazard is a
rule code with its node; ``dp2ddp.check`` turns them into diagnostics.

Facts the analysis cannot establish produce no finding: a linter that cries
wolf on real code is switched off, and then it protects nobody.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst
import libcst.matchers as m
from libcst.metadata import QualifiedNameSource

from dp2ddp.analysis import names
from dp2ddp.analysis.syntax import VISIBLE_DEVICES, argument, call_to, code_of, parameter_for, resolves_to
from dp2ddp.analysis.script import entry_point
from dp2ddp.analysis.batches import divided_batch, gpu_count_scalings, steps_per_epoch
from dp2ddp.analysis.decisions import (
    per_process_stops, plateau_steps, schedule_counters, split_loader_names, ungathered_evaluations,
)
from dp2ddp.analysis.effects import (
    LOGGER_NAME, is_rank_guard, opens_for_writing, process_group_collective, tests_device_index, under_rank_guard,
)
from dp2ddp.analysis.training_batches import RANDOM_DRAWS, TrainingBatches
from dp2ddp.analysis.lifecycle import Hazard, ModelLifecycle, one_sided_unwraps, through_module
from dp2ddp.analysis.loaders import is_placeholder, is_training_loader, sampler_built_at, split_where_used, unsplit_sampler
from dp2ddp.analysis.results import loop_results
from dp2ddp.analysis.writers import attribute_read, imported_writer_calls, per_process_paths

if TYPE_CHECKING:
    from dp2ddp.analysis.module import Analysis, Holder

# torch.distributed calls every process of the group must make; queries, point-to-point calls
# (`if rank == 0: dist.send(...)` is how those are used) and RPC, which talks to one named worker, are not.
COLLECTIVES = frozenset(
    {
        "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor", "all_gather_object", "all_to_all",
        "all_to_all_single", "broadcast", "broadcast_object_list", "reduce", "reduce_scatter", "reduce_scatter_tensor",
        "scatter", "scatter_object_list", "gather", "gather_object", "barrier", "monitored_barrier", "new_group",
    }
)  # fmt: skip
# torch.distributed calls that combine values over processes.
REDUCTIONS = frozenset({"all_reduce", "reduce", "all_gather", "all_gather_object", "gather", "gather_object", "all_gather_into_tensor", "reduce_scatter"})
# The one literal a rank is compared with that every process answers alike: "not launched distributed".
NOT_DISTRIBUTED = "-1"
MAIN_WORDS = re.compile(r"main_process|is_main|is_master|master_process|rank_zero|is_rank_0|is_primary", re.IGNORECASE)
RANK_WORD = re.compile(r"rank", re.IGNORECASE)
FIRST_GPU = re.compile(r"^cuda:0$")
# `self.gpu_id == 0`, `args.gpu == 0`: in a script with one process per GPU, the first process.
FIRST_DEVICE_TEST = re.compile(r"\b(gpu|gpu_id|device_id)\s*==\s*0\b")
# Names that say which process is talking: rank, local_rank, gpu_id.
PROCESS_WORDS = re.compile(r"rank|gpu_id|\bgpu\b|device_id", re.IGNORECASE)
# Names that say code takes one process's share: it may split the batches it makes.
PROCESS_SHARE = re.compile(r"rank|world_size|num_replicas|replica|shard|distributed", re.IGNORECASE)
# Modules whose functions know nothing of processes: batches made with them alone are the same on every process.
PROCESS_BLIND_MODULES = frozenset({"torch", "numpy", "math", "itertools", "functools", "collections", "os", "json", "csv", "pathlib", "glob"})
# The logging levels, and the level each logger method logs at: a logger set to WARNING drops `info` and `debug`.
LOG_LEVELS = {"NOTSET": 0, "DEBUG": 10, "INFO": 20, "WARN": 30, "WARNING": 30, "ERROR": 40, "CRITICAL": 50, "FATAL": 50}
LOG_METHOD_LEVELS = {"debug": 10, "info": 20, "warning": 30, "warn": 30, "error": 40, "exception": 40, "critical": 50, "fatal": 50}
# The life-cycle's hazards, which convert reports against a DataParallel wrap, under their check codes.
LIFECYCLE_CODES = {
    "DDP210": "DDP520",
    "DDP211": "DDP521",
    "DDP212": "DDP522",
    "DDP220": "DDP523",
    "DDP221": "DDP524",
    "DDP222": "DDP525",
    "DDP223": "DDP526",
}

# Tests that ask whether the run is distributed at all: a DataParallel under one is the script's other way to run.
DISTRIBUTED_TEST = re.compile(r"distributed|\bddp\b|world_size|local_rank|multiprocessing|\bdist\.", re.IGNORECASE)
# torch.distributed calls that give every process one process's value.
SHARING = frozenset({"broadcast", "broadcast_object_list", "scatter_object_list", "all_gather_object"})
# Calls that build a path from their arguments alone, the same on every process given the same arguments.
SAME_PATH_CALLS = frozenset(
    {"os.path.join", "os.path.abspath", "os.path.expanduser", "pathlib.Path", "builtins.str", "pathlib.PurePath"}
)  # fmt: skip
# DDP504's values for a loader given no sampler at all.
NO_SAMPLER = {"sampler": "", "fix": "pass `sampler=DistributedSampler(dataset)` (and drop `shuffle`)"}

# Losses normalised by the batch a process sees (``_losses.py``), which convert reports, under their check codes.
LOSS_CODES = {"DDP319": "DDP515", "DDP320": "DDP516"}


def _one_process(analysis: Analysis, test: cst.BaseExpression) -> bool:
    """A test only some processes pass: convert's rank guards, and ``gpu_id == 0`` where a GPU id is the local rank."""
    return is_rank_guard(analysis, test) or rank_dependent(test) or bool(FIRST_DEVICE_TEST.search(code_of(test)))


def rank_dependent(test: cst.BaseExpression, constants: Mapping[str, str] | None = None) -> bool:
    """Whether processes answer ``test`` differently: ``rank == 0``, ``is_main_process()``, ``local_rank in [-1, 0]``.

    ``local_rank != -1`` and ``args.local_rank == -1`` ask whether the run is
    distributed at all, which every process answers alike. A rank compared with
    a constant the file does not define (``self.MAIN_PROCESS_RANK``) is unknown,
    and unknown is not reported.
    """
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return rank_dependent(test.expression, constants)
    if isinstance(test, cst.BooleanOperation):
        return rank_dependent(test.left, constants) or rank_dependent(test.right, constants)
    if isinstance(test, cst.Comparison):
        sides = [test.left, *(c.comparator for c in test.comparisons)]
        ranks = [side for side in sides if RANK_WORD.search(code_of(side)) and not _constant_name(side)]
        if len(ranks) != 1:
            return False
        values = [_value(side, constants or {}) for side in sides if side is not ranks[0]]
        return bool(values) and all(v is not None for v in values) and any(v != NOT_DISTRIBUTED for v in values)
    return bool(MAIN_WORDS.search(code_of(test)))


def _constant_name(node: cst.BaseExpression) -> bool:
    last = node.attr.value if isinstance(node, cst.Attribute) else node.value if isinstance(node, cst.Name) else ""
    return bool(last) and last.isupper()


def _value(node: cst.BaseExpression, constants: Mapping[str, str]) -> str | None:
    """A literal's spelling, or that of the literal a file constant (``MASTER_RANK = 0``) holds."""
    if m.matches(node, LITERAL | m.List() | m.Tuple() | m.Set()):
        return code_of(node)
    if _constant_name(node):
        last = node.attr.value if isinstance(node, cst.Attribute) else node.value  # type: ignore[union-attr]
        return constants.get(last)
    return None


LITERAL = m.Integer() | m.SimpleString() | m.UnaryOperation(expression=m.Integer()) | m.Name("None")


class DistributedHazards:
    """The hazards of one DDP script, each a rule code at a node."""

    def __init__(self, analysis: Analysis) -> None:
        self.analysis = analysis
        self.effects = analysis.effects
        self.hazards: list[Hazard] = []
        # Nodes with a safe fix, and the replacement: `shuffle=True` dropped beside a sampler.
        self.fixes: dict[cst.CSTNode, cst.CSTNode] = {}
        calls = analysis.nodes(cst.Call)
        inits = [c for c in calls if analysis.matches(c, call_to(names.INIT_PROCESS_GROUP))]
        # `setup_distributed()` imported from a project's helpers module starts the group as the inlined one does.
        imported_setup = names.SETUP_HELPER in analysis.script_facts.helpers and names.SETUP_HELPER not in self.effects.functions
        self.initialises = bool(inits) or (imported_setup and any(m.matches(c.func, m.Name(names.SETUP_HELPER)) for c in calls))
        self.wraps = [c for c in calls if analysis.matches(c, call_to(names.DISTRIBUTED_DATA_PARALLEL)) and not self._in_helper(c)]
        if inits and not self.wraps and all(_single_process(c) for c in inits):
            return  # the "fake" backend, or world_size=1: one process, so nothing repeats or waits
        self.helper_wraps = [c for c in calls if m.matches(c.func, m.Name(names.WRAP_HELPER))]
        imported_wrap = names.WRAP_HELPER in analysis.script_facts.helpers and names.WRAP_HELPER not in self.effects.functions
        # A loader module of a DDP program neither starts the group nor wraps, yet divides its batch by the world size.
        self._divided_batches()
        if not (self.initialises or self.wraps or (imported_wrap and self.helper_wraps)):
            return
        self._models()
        self._collectives_under_rank_conditions()
        self._shuffle_with_sampler()
        self._gpu_count_scalings()
        self._devices()
        self._data_parallel_left()
        if self.wraps or self.helper_wraps:
            self._lifecycle()
            self._one_sided_unwraps()
            self._batch_normalised_losses()
        if self.initialises and self._is_script:
            # Side effects and data splitting are a script's business; a library that starts a
            # process group in a function prints for whoever calls it.
            self._unguarded_side_effects()
            self._loaders()
            self._writes_convert_leaves()
        if self.wraps or self.helper_wraps or (self.initialises and self._is_script):
            # A DDP model trained on what one process computes or sees is a hazard wherever it trains:
            # in a trainer module that a script drives too.
            self._per_process_decisions()
            if self.wraps or self.helper_wraps:
                self._unsplit_training_data()

    def _report(self, node: cst.CSTNode, code: str, **values: str) -> None:
        self.hazards.append(Hazard(node, code, tuple(values.items())))

    def _models(self) -> None:
        """Names bound to a DDP model: ``model = DDP(net, device_ids=[rank])`` makes ``model`` run collectives."""
        for call in self.wraps:
            parent = self.analysis.parents.get(call)
            if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
                target = code_of(parent.targets[0].target)
                self.effects.models |= {target, target.rsplit(".", 1)[-1]}
        self.effects.collective_functions = self.effects._functions_reaching_collectives()

    @cached_property
    def _functions(self) -> dict[str, cst.FunctionDef]:
        return self.effects.functions

    def _in_helper(self, node: cst.CSTNode) -> bool:
        return any(
            isinstance(a, (cst.FunctionDef, cst.ClassDef)) and a.name.value in names.HELPERS for a in self.analysis.ancestors(node)
        )

    # -- collectives some processes skip ----------------------------------------------------

    def _collectives_under_rank_conditions(self) -> None:
        """Collectives in a branch of a rank-dependent ``if``/``elif`` chain that another branch does not reach."""
        for head in self.analysis.nodes(cst.If):
            if self._in_helper(head) or isinstance(self.analysis.parents.get(head), cst.If):
                continue  # an `elif` is judged with its chain
            branches, exhaustive = self._chain(head)
            if not any(self._rank_dependent(test) for test, _ in branches if test is not None):
                continue
            reached = [self._collectives(body) for _, body in branches if not _raises(body)]
            keys = [set().union(*(self._primitives(c) for c in calls)) for calls in reached]
            shared = set.intersection(*keys) if exhaustive and len(keys) > 1 else set()
            for calls in reached:
                for call in calls:
                    missing = self._primitives(call) - shared
                    if not missing or self._paired_barrier(call, head) or self._only_without_processes(call, head):
                        continue
                    forward_only = all(key.startswith("forward:") for key in missing)
                    self._report(call, "DDP503" if forward_only else "DDP502", call=code_of(call.func))

    def _only_without_processes(self, call: cst.Call, head: cst.If) -> bool:
        """Inside ``if args.local_rank == -1 and ...:``: a run with a process group never gets there."""
        child: cst.CSTNode = call
        for ancestor in self.analysis.ancestors(call):
            if isinstance(ancestor, cst.If) and child is ancestor.body and any(
                self._not_distributed(test) for test in _conjuncts(ancestor.test)
            ):
                return True
            if ancestor is head:
                return False
            child = ancestor
        return False

    def _not_distributed(self, test: cst.BaseExpression) -> bool:
        """``local_rank == -1``: true only where no process group was started."""
        return m.matches(test, m.Comparison(comparisons=[m.ComparisonTarget(m.Equal(), m.UnaryOperation(m.Minus(), m.Integer("1")))])) and bool(
            RANK_WORD.search(code_of(test.left))  # type: ignore[attr-defined]
        )

    def _rank_dependent(self, test: cst.BaseExpression) -> bool:
        """``rank == 0`` and the like, or ``gpu == 0`` where ``gpu`` is the index the script picks its GPU with."""
        return rank_dependent(test, self._constants) or tests_device_index(self.analysis, test)

    def _chain(self, head: cst.If) -> tuple[list[tuple[cst.BaseExpression | None, cst.BaseSuite]], bool]:
        """The branches of ``if``/``elif``/``else`` with their tests (``None`` for ``else``), and whether one always runs."""
        branches: list[tuple[cst.BaseExpression | None, cst.BaseSuite]] = []
        node: cst.If | cst.Else | None = head
        while isinstance(node, cst.If):
            branches.append((node.test, node.body))
            node = node.orelse
        if isinstance(node, cst.Else):
            branches.append((None, node.body))
        return branches, isinstance(node, cst.Else)

    def _collectives(self, node: cst.CSTNode) -> list[cst.Call]:
        found = [call for call in self.effects.collectives_in(node) if self._primitives(call)]
        # `evaluate(args, model)`, where `evaluate` runs the DDP model it is handed under another name.
        spans = [(self.analysis.index[c], self.analysis.last[c]) for c in found]
        for call in self.analysis.within(node, cst.Call):
            index = self.analysis.index[call]
            if code_of(call.func) not in self._functions or any(start <= index <= end for start, end in spans):
                continue
            if not self.effects._in_definition(call, node) and self._primitives(call):
                found.append(call)
                spans.append((index, self.analysis.last[call]))
        return sorted(found, key=self.analysis.index.__getitem__)

    def _primitives(
        self, call: cst.Call, seen: frozenset[str] = frozenset(), handed: frozenset[str] | None = None
    ) -> set[str]:
        """What a call makes every process wait on: ``torch.distributed.barrier``, ``forward:model``, ``backward``.

        Only torch.distributed's collectives count, not its queries, point-to-point calls or RPC;
        a function of the script counts for what it reaches. Inside a function, ``handed`` holds
        the parameters this call binds to a DDP model: another parameter holds something else
        (``evaluate(args, model.module)``).
        """
        func = code_of(call.func)
        if self._holds_ddp_model(func.removeprefix("self."), call, handed):
            # Without gradients DDP's forward neither syncs buffers nor prepares a reduction.
            return set() if self._without_grad(call) else {f"forward:{func.removeprefix('self.')}"}
        if func in names.COLLECTIVE_HELPERS:
            return {"torch.distributed.all_reduce"}
        if func == names.MAIN_VALUE_HELPER:
            return {"torch.distributed.broadcast_object_list"}
        if m.matches(call.func, m.Attribute(attr=m.Name("backward"))):
            return set() if self._backward_of_a_plain_model(call) else {"backward"}
        group_collective = process_group_collective(self.analysis, call)
        if group_collective is not None:
            return {group_collective}
        qualified = {q.name for q in self.analysis.qualified_names(call.func)}
        found = {q for q in qualified if q.startswith("torch.distributed.") and q.rsplit(".", 1)[-1] in COLLECTIVES}
        if found:
            return found
        function = self._functions.get(func)
        if function is None or func in seen:
            return set()
        inner = self._reached_by(function, func, seen, self._handed_to(function, call, handed))
        if self._without_grad(call):
            return {key for key in inner if not key.startswith("forward:")}
        return inner

    def _reached_by(self, function: cst.FunctionDef, func: str, seen: frozenset[str], handed: frozenset[str]) -> set[str]:
        """What running ``function`` makes every process wait on, with ``handed`` its parameters bound to a DDP model."""
        key = (function, handed)
        if key not in self._reached:
            self._reached[key] = set()  # a recursive call reaches nothing more
            calls = [c for c in self.analysis.within(function.body, cst.Call) if not self.effects._in_definition(c, function.body)]
            self._reached[key] = set().union(*(self._primitives(c, seen | {func}, handed) for c in calls))
        return self._reached[key]

    @cached_property
    def _reached(self) -> dict[tuple[cst.FunctionDef, frozenset[str]], set[str]]:
        return {}

    def _handed_to(self, function: cst.FunctionDef, call: cst.Call, handed: frozenset[str] | None) -> frozenset[str]:
        """The parameters of ``function`` that ``call`` binds to a DDP model."""
        found = set()
        for arg in call.args:
            if self._holds_ddp_model(code_of(arg.value).removeprefix("self."), call, handed):
                parameter = parameter_for(function, call, arg)
                if parameter is not None:
                    found.add(parameter)
        return frozenset(found)

    def _holds_ddp_model(self, name: str, node: cst.CSTNode, handed: frozenset[str] | None) -> bool:
        """Whether ``name`` holds a DDP model where ``node`` runs.

        At the top of the search a name holds one by its spelling; inside a function a
        parameter holds one where the call handed it one. A name bound since to a fresh
        model (``model = Model.from_pretrained(out_dir)``) holds that instead.
        """
        if handed is not None:
            function = next((a for a in self.analysis.ancestors(node) if isinstance(a, cst.FunctionDef)), None)
            params = function.params if function is not None else cst.Parameters()
            parameters = {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}
            if name in parameters and name not in handed:
                return False
            if name not in parameters and name not in self.effects.models:
                return False
        elif name not in self.effects.models:
            return False
        return not self._rebound_before(name, node)

    def _without_grad(self, node: cst.CSTNode) -> bool:
        """Inside ``with torch.no_grad():`` or a function decorated ``@torch.no_grad()``."""
        for ancestor in self.analysis.ancestors(node):
            if isinstance(ancestor, cst.With) and any(self.analysis.matches(i.item, call_to(names.NO_GRAD)) for i in ancestor.items):
                return True
            if isinstance(ancestor, cst.FunctionDef):
                for decorator in ancestor.decorators:
                    spelled = decorator.decorator.func if isinstance(decorator.decorator, cst.Call) else decorator.decorator
                    if self.analysis.matches(spelled, resolves_to(names.NO_GRAD)):
                        return True
        return False

    def _backward_of_a_plain_model(self, backward: cst.Call) -> bool:
        """``loss.backward()`` where every model call the loss comes from is ``model.module`` or a copy: no all-reduce."""
        roots = self._model_calls(backward.func.value, backward, 0)  # type: ignore[attr-defined]
        return roots is not None and bool(roots) and not any(root in self.effects.models for root in roots)

    def _model_calls(self, node: cst.BaseExpression, before: cst.CSTNode, depth: int) -> set[str] | None:
        """The callees that produced ``node``, through the nearest assignments before ``before``; ``None`` when unknown."""
        if depth > 6:
            return None
        if isinstance(node, cst.Call):
            func = code_of(node.func)
            if func.removeprefix("self.") in self.effects.models:
                return {func.removeprefix("self.")}
            if func.endswith(".module") or func in self._plain_models:
                return {func}
            parts: list[cst.BaseExpression] = [a.value for a in node.args]
            if isinstance(node.func, cst.Attribute):
                parts.append(node.func.value)  # `out.sum()`
            return self._combine(parts, before, depth)
        if isinstance(node, cst.BinaryOperation):
            return self._combine([node.left, node.right], before, depth)
        if isinstance(node, (cst.Tuple, cst.List)):
            return self._combine([e.value for e in node.elements], before, depth)
        if isinstance(node, cst.Subscript):
            return self._model_calls(node.value, before, depth + 1)
        if isinstance(node, cst.Name):
            value = self._assigned_before(node.value, before)
            return None if value is None else self._model_calls(value, value, depth + 1)
        if isinstance(node, (cst.Integer, cst.Float)):
            return set()
        return None

    def _combine(self, parts: list[cst.BaseExpression], before: cst.CSTNode, depth: int) -> set[str] | None:
        found: set[str] = set()
        for part in parts:
            roots = self._model_calls(part, before, depth + 1)
            if roots is None:
                return None
            found |= roots
        return found

    def _assigned_before(self, name: str, node: cst.CSTNode) -> cst.BaseExpression | None:
        """The value of the last assignment to ``name`` before ``node`` in its function, tuple targets included."""
        scope = next((a for a in self.analysis.ancestors(node) if isinstance(a, (cst.FunctionDef, cst.Module))), self.analysis.module)
        value = None
        for assign in self.analysis.within(scope, cst.Assign):
            if not self.analysis.is_before(assign, node):
                break
            for target in assign.targets:
                if name in {n.value for n in self.analysis.within(target, cst.Name)}:
                    value = assign.value
        return value

    @cached_property
    def _constants(self) -> dict[str, str]:
        """``MASTER_RANK = 0`` at module or class level: the literal each constant holds."""
        found: dict[str, str] = {}
        for assign in self.analysis.nodes(cst.Assign):
            if m.matches(assign.value, LITERAL):
                for target in assign.targets:
                    if _constant_name(target.target):
                        found[code_of(target.target).rsplit(".", 1)[-1]] = code_of(assign.value)
        return found

    @cached_property
    def _plain_models(self) -> set[str]:
        """Names bound to a model no DDP holds: ``model.module``, ``copy.deepcopy(...)``."""
        found = set()
        for assign in self.analysis.nodes(cst.Assign):
            if code_of(assign.value).endswith(".module") or self.analysis.matches(assign.value, call_to({"copy.deepcopy"})):
                found |= {code_of(t.target) for t in assign.targets}
        return found

    def _paired_barrier(self, call: cst.Call, statement: cst.If) -> bool:
        """``if rank != 0: barrier()`` ... ``if rank == 0: barrier()``: every process meets the other's barrier."""
        if not self.analysis.matches(call, call_to({"torch.distributed.barrier"})):
            return False
        scope = next((a for a in self.analysis.ancestors(statement) if isinstance(a, cst.FunctionDef)), self.analysis.module)
        for other in self.analysis.within(scope, cst.If):
            if other is statement or not self._rank_dependent(other.test) or code_of(other.test) == code_of(statement.test):
                continue
            if any(self.analysis.matches(c, call_to({"torch.distributed.barrier"})) for c in self._collectives(other.body)):
                return True
        return False

    # -- side effects every process repeats ---------------------------------------------------

    def _unguarded_side_effects(self) -> None:
        guarded_functions = self._functions_called_only_when_guarded()
        devnull_writers = self._writers_off_the_main_process()
        for call in self.analysis.nodes(cst.Call):
            if self._in_helper(call) or self._guarded(call, guarded_functions):
                continue
            if self.analysis.matches(call, call_to(names.TQDM)):
                if argument(call, 99, "disable") is None:
                    self._report(call, "DDP501", call=code_of(call.func), what="draws a progress bar")
                continue
            if not self.effects.is_side_effect(call) or self._names_its_process(call):
                continue
            if isinstance(call.func, cst.Attribute) and code_of(call.func.value) in devnull_writers:
                continue
            if isinstance(call.func, cst.Attribute) and code_of(call.func.value) in self._none_off_main:
                continue  # `tb_writer.add_scalar(...)` where `tb_writer` is None off the main process: it writes there only
            if self._silenced_off_main(call):
                continue
            if self.analysis.matches(call, call_to(names.MAKE_DIRECTORY)):
                continue  # with exist_ok, every process may make it; without, DDP417's fix applies
            if self.analysis.matches(call, call_to(names.TORCH_SAVE)) and self._in_memory(argument(call, 1, "f"), call):
                continue  # `torch.save(x, io.BytesIO())` writes nothing outside the process
            if self._shared_file_read_back(call) is not None:
                # The sharper hazard of the same save: the remedy (guard it, then a barrier) covers DDP501's.
                self._report(call, "DDP545", path=code_of(argument(call, 1, "f")))  # type: ignore[arg-type]
                continue
            self._report(call, "DDP501", call=code_of(call.func), what=self._what(call))

    def _shared_file_read_back(self, save: cst.Call) -> cst.Call | None:
        """The later ``torch.load`` of the file ``save`` writes on every process at a path every process spells alike.

        Only a load in the same function, after the save, of the same spelled
        path, with no barrier between them; a path that reads the rank, or a
        value this file cannot see (a parameter, another module's call), may
        differ between processes and is not reported.
        """
        if not self.analysis.matches(save, call_to(names.TORCH_SAVE)):
            return None
        path = argument(save, 1, "f")
        if path is None or self._in_memory(path, save) or not self._same_on_every_process(path, save, depth=4):
            return None
        scope = next((a for a in self.analysis.ancestors(save) if isinstance(a, (cst.FunctionDef, cst.Module))), self.analysis.module)
        for call in self.analysis.within(scope, cst.Call):
            if not self.analysis.is_before(save, call) or self._inside(call, save):
                continue
            if self._barrier(call):
                return None  # every process has finished writing before anyone reads
            if self.analysis.matches(call, call_to(names.TORCH_LOAD)):
                source = argument(call, 0, "f")
                if source is not None and code_of(source) == code_of(path):
                    return call
        return None

    def _barrier(self, call: cst.Call) -> bool:
        """A barrier, or a function of the script that reaches one."""
        return any(p.rsplit(".", 1)[-1] in ("barrier", "monitored_barrier") for p in self._primitives(call))

    def _same_on_every_process(self, path: cst.BaseExpression, at: cst.CSTNode, depth: int) -> bool:
        """A path every process spells alike: literals, and names, attributes and f-strings of them that never read the rank."""
        if depth < 0 or PROCESS_WORDS.search(code_of(path)):
            return False
        if isinstance(path, (cst.SimpleString, cst.Integer)):
            return True
        if isinstance(path, cst.ConcatenatedString):
            return self._same_on_every_process(path.left, at, depth) and self._same_on_every_process(path.right, at, depth)
        if isinstance(path, cst.FormattedString):
            parts = [p.expression for p in path.parts if isinstance(p, cst.FormattedStringExpression)]
            return all(self._same_on_every_process(p, at, depth - 1) for p in parts)
        if isinstance(path, cst.BinaryOperation) and isinstance(path.operator, (cst.Add, cst.Divide, cst.Modulo)):
            return self._same_on_every_process(path.left, at, depth - 1) and self._same_on_every_process(path.right, at, depth - 1)
        if isinstance(path, cst.Attribute):
            # `args.save_dir`: an option every process parsed alike, unless this file assigns it otherwise.
            spelled = code_of(path)
            values = [a.value for a in self.analysis.nodes(cst.Assign) if any(code_of(t.target) == spelled for t in a.targets)]
            return all(self._same_on_every_process(v, at, depth - 1) for v in values)
        if isinstance(path, cst.Name):
            bindings = self.analysis.bindings(path)
            if not bindings or (any(b is None for b in bindings) and not self._counted_alike(path, at, depth)):
                return False  # a parameter, an import, another loop's variable: what it holds is not known here
            return all(self._same_on_every_process(b.value, at, depth - 1) for b in bindings if b is not None)
        if isinstance(path, cst.Call) and self.analysis.matches(path, call_to(SAME_PATH_CALLS)):
            return all(self._same_on_every_process(a.value, at, depth - 1) for a in path.args)
        if isinstance(path, cst.Call) and m.matches(path.func, m.Attribute(value=m.SimpleString(), attr=m.Name("format"))):
            return all(self._same_on_every_process(a.value, at, depth - 1) for a in path.args)
        return False

    def _counted_alike(self, name: cst.Name, at: cst.CSTNode, depth: int) -> bool:
        """``for epoch in range(args.epochs):`` around ``at``: every process counts the same epochs."""
        return any(
            isinstance(a, cst.For) and m.matches(a.target, m.Name(name.value))
            and self.analysis.matches(a.iter, call_to({"builtins.range"}))
            and all(self._same_on_every_process(arg.value, at, depth - 1) for arg in a.iter.args)  # type: ignore[attr-defined]
            for a in self.analysis.ancestors(at)
        )  # fmt: skip

    def _names_its_process(self, call: cst.Call) -> bool:
        """``print(f"[GPU{gpu_id}] epoch {epoch}")``: a line that says which process wrote it is meant for each."""
        if self._what(call) not in ("prints", "logs"):
            return False
        return any(PROCESS_WORDS.search(name) for arg in call.args for name in self.analysis.reads(arg.value))

    def _what(self, call: cst.Call) -> str:
        written = next((w for q in self.analysis.qualified_names(call.func) if (w := self.analysis.role.writer_site(q.name))), None)
        if written is not None:
            return f"writes ({written})"
        if self.analysis.matches(call, call_to(names.TORCH_SAVE)) or (
            isinstance(call.func, cst.Attribute) and call.func.attr.value in names.MODEL_SAVE_METHODS
        ):
            return "writes the checkpoint"
        if self.analysis.matches(call, call_to({"builtins.print", "pprint.pprint", "sys.stdout.write", "sys.stderr.write"})):
            return "prints"
        if isinstance(call.func, cst.Attribute) and call.func.attr.value in names.LOGGER_METHODS | names.SUMMARY_WRITER_METHODS:
            return "logs"
        return "writes"

    def _guarded(self, node: cst.CSTNode, guarded_functions: set[str]) -> bool:
        """Under a rank condition, under a test of a value only the main process holds, or in a function only such code calls."""
        child = node
        for ancestor in self.analysis.ancestors(node):
            if isinstance(ancestor, (cst.If, cst.IfExp, cst.While)) and child is not ancestor.test:
                if _one_process(self.analysis, ancestor.test) or self.analysis.reads(ancestor.test) & self._main_only_values:
                    return True
            if isinstance(ancestor, cst.BooleanOperation) and child is ancestor.right:
                if _one_process(self.analysis, ancestor.left):
                    return True
            if isinstance(ancestor, cst.FunctionDef) and ancestor.name.value in guarded_functions:
                return True
            child = ancestor
        return False

    @cached_property
    def _main_only_values(self) -> set[str]:
        """Names assigned under a rank condition, or from a value that tests one: ``writer = SummaryWriter() if is_main else None``."""
        seeds: set[str] = set()
        for assign in self.analysis.nodes(cst.Assign):
            if self._assigned_by_rank(assign):
                seeds |= {code_of(t.target) for t in assign.targets if isinstance(t.target, (cst.Name, cst.Attribute))}
        seeds |= {"is_main", "main_process", "master_process", "is_master"}
        return seeds | self._none_off_main

    def _assigned_by_rank(self, assign: cst.Assign) -> bool:
        if any(is_rank_guard(self.analysis, n.test) for n in self.analysis.within(assign.value, cst.IfExp)):
            return True
        return bool(isinstance(assign.value, (cst.Comparison, cst.BooleanOperation, cst.UnaryOperation)) and is_rank_guard(self.analysis, assign.value))

    @cached_property
    def _none_off_main(self) -> set[str]:
        """``tb_writer = None`` then ``if args.local_rank in [-1, 0]: tb_writer = SummaryWriter()``: None off the main process.

        Every assignment of such a name is ``None`` or runs under a rank condition, and one
        does; the script's functions that are handed it hold it under their parameter's name.
        """
        assigned: dict[str, list[cst.Assign]] = {}
        for assign in self.analysis.nodes(cst.Assign):
            for target in assign.targets:
                if isinstance(target.target, (cst.Name, cst.Attribute)):
                    assigned.setdefault(code_of(target.target), []).append(assign)
        found = set()
        for name, assigns in assigned.items():
            by_rank = [a for a in assigns if self._under_rank_condition(a)]
            if by_rank and all(a in by_rank or m.matches(a.value, m.Name("None")) for a in assigns):
                found.add(name)
        self.effects._follow_into_functions(found)
        return found

    def _under_rank_condition(self, node: cst.CSTNode) -> bool:
        child = node
        for ancestor in self.analysis.ancestors(node):
            if isinstance(ancestor, cst.If) and child is not ancestor.test and _one_process(self.analysis, ancestor.test):
                return True
            child = ancestor
        return False

    @cached_property
    def _log_levels_off_main(self) -> dict[str, int]:
        """The level a logger has off the main process, where the script sets it by rank; ``""`` is the root logger.

        ``logging.basicConfig(level=logging.INFO if args.local_rank in [-1, 0] else logging.WARN)``
        sets the root logger, which every logger without its own level follows;
        ``logger.setLevel(...)`` sets that logger.
        """
        found: dict[str, int] = {}
        for call in self.analysis.nodes(cst.Call):
            if self.analysis.matches(call, call_to({"logging.basicConfig"})):
                logger, level = "", argument(call, 99, "level")
            elif m.matches(call.func, m.Attribute(attr=m.Name("setLevel"))) and call.args:
                receiver = call.func.value  # type: ignore[attr-defined]
                root = self.analysis.matches(receiver, call_to(names.GET_LOGGER)) and not receiver.args  # type: ignore[attr-defined]
                logger, level = ("" if root or code_of(receiver) == "logging.root" else code_of(receiver)), call.args[0].value
            else:
                continue
            off_main = self._level_by_rank(level)
            if off_main is not None:
                found[logger] = off_main
        return found

    def _level_by_rank(self, level: cst.BaseExpression | None) -> int | None:
        """The higher level of ``logging.INFO if <rank condition> else logging.WARN``: the level off the main process."""
        if isinstance(level, cst.Name):
            values = [a.value for a in self.analysis.nodes(cst.Assign) if any(code_of(t.target) == level.value for t in a.targets)]
            level = values[0] if len(values) == 1 else None
        if not isinstance(level, cst.IfExp) or not _one_process(self.analysis, level.test):
            return None
        levels = [self._log_level(level.body), self._log_level(level.orelse)]
        if None in levels or min(levels) >= LOG_LEVELS["WARNING"] or max(levels) < LOG_LEVELS["WARNING"]:  # type: ignore[type-var]
            return None  # not "INFO on the main process, warnings elsewhere"
        return max(levels)  # type: ignore[type-var]

    def _log_level(self, node: cst.BaseExpression) -> int | None:
        for qualified in self.analysis.qualified_names(node):
            module, _, level = qualified.name.rpartition(".")
            if module == "logging" and level in LOG_LEVELS:
                return LOG_LEVELS[level]
        return None

    def _silenced_off_main(self, call: cst.Call) -> bool:
        """``logger.info(...)`` where the logger drops ``info`` off the main process: it logs on the main process only."""
        if not self._log_levels_off_main or not isinstance(call.func, cst.Attribute):
            return False
        level = LOG_METHOD_LEVELS.get(call.func.attr.value)
        if level is None:
            return False
        if self.analysis.matches(call, call_to(names.LOGGING_FUNCTIONS)):
            off_main = self._log_levels_off_main.get("")  # `logging.info` logs through the root logger
        else:
            receiver = code_of(call.func.value)
            if not (receiver in self.effects.loggers or LOGGER_NAME.search(receiver)):
                return False
            off_main = self._log_levels_off_main.get(receiver, self._log_levels_off_main.get(""))
        return off_main is not None and level < off_main

    def _functions_called_only_when_guarded(self) -> set[str]:
        """Functions of the script every call of which runs under a rank condition."""
        calls_of: dict[str, list[cst.Call]] = {}
        for call in self.analysis.nodes(cst.Call):
            name = code_of(call.func)
            if name in self._functions:
                calls_of.setdefault(self._functions[name].name.value, []).append(call)
        guarded: set[str] = set()
        changed = True
        while changed:
            changed = False
            for name, calls in calls_of.items():
                if name not in guarded and all(self._guarded(c, guarded) for c in calls):
                    guarded.add(name)
                    changed = True
        return guarded

    def _writers_off_the_main_process(self) -> set[str]:
        """Files opened on ``os.devnull`` off the main process: writing to them writes nothing there."""
        found = set()
        for assign in self.analysis.nodes(cst.Assign):
            if opens_for_writing(self.analysis, assign.value) and "devnull" in code_of(assign.value):
                found |= {code_of(t.target) for t in assign.targets}
        for item in self.analysis.nodes(cst.WithItem):
            if opens_for_writing(self.analysis, item.item) and "devnull" in code_of(item.item) and item.asname is not None:
                found.add(code_of(item.asname.name))
        return found

    # -- loaders and samplers ----------------------------------------------------------------

    def _loaders(self) -> None:
        loaders = [c for c in self.analysis.nodes(cst.Call) if self.analysis.matches(c, call_to(names.DATA_LOADER))]
        for call in loaders:
            reference = self._bound_to(call)
            sampler = self._given_sampler(call, 3, "sampler")
            batch_sampler = self._given_sampler(call, 4, "batch_sampler")
            if sampler is None and batch_sampler is None and not any(a.star for a in call.args):
                if is_training_loader(call, reference, len(loaders) == 1) and self._trains_on(call) and not split_where_used(self.analysis, self.analysis.holders(call)):
                    self._report(call, "DDP504", loader=code_of(reference) if reference is not None else "this loader", **NO_SAMPLER)
                continue
            self._unsplit_sampler(call, reference, sampler, batch_sampler, only_loader=len(loaders) == 1)
            distributed = self._distributed_sampler(sampler)
            # Convert's ShardedSampler splits as a DistributedSampler does.
            sharded = sampler is not None and m.matches(sampler, m.Call(func=m.Name(names.SHARDED_SAMPLER_HELPER)))
            if (distributed is not None or sharded) and self._trains_on(call):
                self._steps_per_epoch(call, reference)
            if distributed is not None:
                if self._shuffles(sampler) and (self._trains_on(call) or call in self._fed_to_backward):  # type: ignore[arg-type]
                    self._set_epoch(call, distributed)
                self._evaluation_metrics(call, reference, sampler)  # type: ignore[arg-type]
        if self._sharded_training and not self._reduces:
            self._plateau_steps()

    def _steps_per_epoch(self, loader: cst.Call, reference: cst.BaseExpression | None) -> None:
        """``len(train_set) // args.batch_size`` where each process loads ``args.batch_size`` from its share (DDP534)."""
        for division in self.analysis.nodes(cst.BinaryOperation):
            if isinstance(division.operator, (cst.FloorDivide, cst.Divide)) and steps_per_epoch(self.analysis, division, loader, reference):
                self._report(division, "DDP534", expression=code_of(division), batch=code_of(division.right))

    @cached_property
    def _reduces(self) -> bool:
        """Whether the script combines anything over processes: without that, every metric is one process's."""
        for call in self.analysis.nodes(cst.Call):
            if m.matches(call.func, m.Name(m.MatchIfTrue(lambda n: n in names.COLLECTIVE_HELPERS))):
                return True
            qualified = {q.name for q in self.analysis.qualified_names(call.func)}
            if any(q.startswith("torch.distributed.") and q.rsplit(".", 1)[-1] in REDUCTIONS for q in qualified):
                return True
        return False

    @cached_property
    def _sharded_training(self) -> bool:
        return any(self.analysis.matches(c, call_to(names.DISTRIBUTED_SAMPLER)) for c in self.analysis.nodes(cst.Call))

    def _evaluation_metrics(self, call: cst.Call, reference: cst.BaseExpression | None, sampler: cst.BaseExpression) -> None:
        """An evaluation over a DistributedSampler: its padding counts samples twice, and ungathered sums cover one shard."""
        for loop, holder in self._iterations(call):
            if any(m.matches(c.func, m.Attribute(attr=m.Name("backward"))) for c in self.analysis.within(loop.body, cst.Call)):
                continue
            loader = code_of(reference) if reference is not None else holder.spelled
            results = loop_results(self.analysis, loop, training=False)
            metrics = [*results.sums, *results.means, *results.meters]
            if not metrics:
                continue
            if not self._reduces:
                self._report(loop.iter, "DDP513", metric=metrics[0], loader=loader)
            elif not self._drops_last(sampler):
                self._report(loop.iter, "DDP512", metric=metrics[0], loader=loader)
            return

    def _sampler_argument(self, sampler: cst.BaseExpression, position: int, keyword: str) -> cst.BaseExpression | None:
        built = sampler if isinstance(sampler, cst.Call) else next(
            (a.value for a in self.analysis.nodes(cst.Assign) if any(code_of(t.target) == code_of(sampler) for t in a.targets)),
            None,
        )  # fmt: skip
        return argument(built, position, keyword) if isinstance(built, cst.Call) else None

    def _given_sampler(self, call: cst.Call, position: int, keyword: str) -> cst.BaseExpression | None:
        """The loader's sampler or batch sampler, or ``None`` where it has none: absent, ``None``, or a name only ever ``None``."""
        given = argument(call, position, keyword)
        return None if given is None or is_placeholder(self.analysis, given) else given

    def _unsplit_sampler(
        self,
        call: cst.Call,
        reference: cst.BaseExpression | None,
        sampler: cst.BaseExpression | None,
        batch_sampler: cst.BaseExpression | None,
        only_loader: bool,
    ) -> None:
        """A training loader on a sampler that draws from the whole dataset (``RandomSampler(data)``): DDP504 naming it.

        A sampler that splits itself (told the rank, or distributed by name) is
        taken at its word, as convert takes it (DDP323); one built elsewhere is
        unknown, and not reported.
        """
        given = sampler if sampler is not None else batch_sampler
        if given is None or (sampler is not None and batch_sampler is not None):
            return
        kind = unsplit_sampler(self.analysis, given)
        if kind is None or not is_training_loader(call, reference, only_loader) or not self._trains_on(call):
            return
        if split_where_used(self.analysis, self.analysis.holders(call)):
            return  # `train_loader = split_loader(get_data("train"))`: its callers take their share
        keyword = "sampler" if sampler is not None else "batch_sampler"
        loader = code_of(reference) if reference is not None else "this loader"
        built = sampler_built_at(self.analysis, given)
        if keyword == "sampler" and self.analysis.matches(built, call_to(names.RANDOM_SAMPLER)):
            fix = f"replace `{kind}` with `DistributedSampler(dataset)`, which shuffles too"
        elif keyword == "sampler" and self.analysis.matches(built, call_to(names.SEQUENTIAL_SAMPLER)):
            fix = f"replace `{kind}` with `DistributedSampler(dataset, shuffle=False)`"
        elif self.analysis.matches(built, call_to(names.BATCH_SAMPLER_CLASSES)):
            fix = f"build `{kind}` over `DistributedSampler(dataset)`, which gives each process its share"
        else:
            fix = f"make `{kind}` yield this process's share, every world_size-th index from its rank, as DistributedSampler does"
        self._report(call, "DDP504", loader=loader, sampler=f" (its {keyword} is `{kind}`)", fix=fix)

    def _drops_last(self, sampler: cst.BaseExpression) -> bool:
        drop = self._sampler_argument(sampler, 5, "drop_last")
        return drop is not None and m.matches(drop, m.Name("True"))

    def _shuffles(self, sampler: cst.BaseExpression) -> bool:
        """DistributedSampler shuffles unless told ``shuffle=False``; an unshuffled order needs no epoch."""
        shuffle = self._sampler_argument(sampler, 3, "shuffle")
        return shuffle is None or not m.matches(shuffle, m.Name("False"))

    def _plateau_steps(self) -> None:
        """``ReduceLROnPlateau.step(v)`` on a value no process ever combines: each process lowers its rate alone."""
        schedulers = {
            code_of(t.target) for a in self.analysis.nodes(cst.Assign) if self.analysis.matches(a.value, call_to(names.REDUCE_LR_ON_PLATEAU))
            for t in a.targets
        }  # fmt: skip
        for call in self.analysis.nodes(cst.Call):
            if m.matches(call.func, m.Attribute(attr=m.Name("step"))) and call.args and code_of(call.func.value) in schedulers:  # type: ignore[attr-defined]
                if under_rank_guard(self.analysis, call):
                    continue  # only some processes step it at all: DDP541
                self._report(call, "DDP514", value=code_of(call.args[0].value))

    def _bound_to(self, call: cst.Call) -> cst.BaseExpression | None:
        parent = self.analysis.parents.get(call)
        if isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, (cst.Name, cst.Attribute)):
            return parent.targets[0].target
        return None

    def _distributed_sampler(self, sampler: cst.BaseExpression | None) -> str | None:
        """How the script names the sampler when it is a DistributedSampler: ``sampler`` or ``loader.sampler``."""
        if sampler is None:
            return None
        if self.analysis.matches(sampler, call_to(names.DISTRIBUTED_SAMPLER)):
            return ""
        if isinstance(sampler, (cst.Name, cst.Attribute)):
            values = [
                a.value for a in self.analysis.nodes(cst.Assign)
                if any(code_of(t.target) == code_of(sampler) for t in a.targets)
            ]  # fmt: skip
            if values and all(self.analysis.matches(v, call_to(names.DISTRIBUTED_SAMPLER)) for v in values):
                return code_of(sampler)
        return None

    def _iterations(self, call: cst.Call) -> list[tuple[cst.For, Holder]]:
        """Each loop over the loader ``call`` builds, with the name the loader has there.

        The loader is followed as convert follows it (``Analysis.holders``): through returns,
        arguments, ``self`` attributes and dict entries.
        """
        holders = self.analysis.holders(call)
        found: list[tuple[cst.For, Holder]] = []
        for loop in self.analysis.nodes(cst.For):
            holder = self.analysis.reads_any(loop.iter, holders)
            if holder is not None:
                found.append((loop, holder))
        return found

    def _trains_on(self, call: cst.Call) -> bool:
        """Whether some loop over the loader calls ``backward()``: only then does an unsplit loader repeat the work."""
        for loop, _ in self._iterations(call):
            if any(m.matches(c.func, m.Attribute(attr=m.Name("backward"))) for c in self.analysis.within(loop.body, cst.Call)):
                return True
        return False

    def _set_epoch(self, call: cst.Call, sampler: str) -> None:
        """A DistributedSampler iterated once per epoch needs ``set_epoch(epoch)`` in that epoch loop."""
        holders = self.analysis.holders(call)
        set_epochs = [
            c for c in self.analysis.nodes(cst.Call)
            if m.matches(c.func, m.Attribute(attr=m.Name("set_epoch")))
            and (self.analysis.reads_any(c.func.value, holders) or (sampler and code_of(c.func.value) == sampler))  # type: ignore[attr-defined]
        ]  # fmt: skip
        for loop, holder in self._iterations(call):
            around = self.analysis.loops_around(loop)
            if not around:
                continue  # one pass over the data: the seed of epoch 0 is right
            epoch_loop = around[0]
            # Spelled as the epoch loop sees the loader, where the call belongs.
            spelled = next((h.spelled for h in holders if self.analysis.visible(h, epoch_loop)), holder.spelled)
            if not set_epochs:
                self._report(loop.iter, "DDP506", loader=spelled)
                return
            if not any(self._inside(s, epoch_loop) and not self._inside(s, loop) for s in set_epochs):
                self._report(set_epochs[0], "DDP507", loader=spelled)
                return
        if not set_epochs:
            self._passes_without_epoch_loop(call, holders)

    def _passes_without_epoch_loop(self, call: cst.Call, holders: list[Holder]) -> None:
        """A pass over the loader started again and again where the file shows no epoch loop around a ``for`` over it.

        ``next(iter(loader))`` in a loop starts a pass at every step, and ``it = iter(loader)`` in a
        loop (a restart on StopIteration) at every epoch; a ``for`` over the loader in a function
        that says it runs one epoch (``def train_epoch(self, epoch):``), called from another file,
        runs once per epoch. With no ``set_epoch`` anywhere, every one of those passes draws the
        first epoch's order. A sampler that counts its own passes (the ShardedSampler convert
        writes) is no DistributedSampler, and is never asked about.
        """
        for started in self.analysis.nodes(cst.Call):
            if m.matches(started, m.Call(func=m.Name("iter"), args=[m.Arg()])) and self.analysis.loops_around(started):
                holder = self.analysis.reads_any(started.args[0].value, holders)
                if holder is not None:
                    self._report(started, "DDP506", loader=holder.spelled)
                    return
        for loop, holder in self._iterations(call):
            if self.analysis.loops_around(loop):
                continue  # an epoch loop this file shows: `_set_epoch` judged it
            function = next((a for a in self.analysis.ancestors(loop) if isinstance(a, cst.FunctionDef)), None)
            if function is not None and self._runs_per_epoch(function):
                self._report(loop.iter, "DDP506", loader=holder.spelled)
                return

    def _runs_per_epoch(self, function: cst.FunctionDef) -> bool:
        """``def train_epoch(self, epoch):``: a function that says it runs once per epoch, by its name or a parameter."""
        params = [*function.params.posonly_params, *function.params.params, *function.params.kwonly_params]
        return "epoch" in function.name.value.lower() or any("epoch" in p.name.value.lower() for p in params)

    @cached_property
    def _fed_to_backward(self) -> set[cst.CSTNode]:
        """Loaders whose batches reach a backward(), through a ``for`` or a ``next(it)``: convert's reading of training data."""
        loaders = [c for c in self.analysis.nodes(cst.Call) if self.analysis.matches(c, call_to(names.DATA_LOADER))]
        return TrainingBatches(self.analysis).feeding_backward(loaders)  # type: ignore[arg-type]

    def _inside(self, node: cst.CSTNode, container: cst.CSTNode) -> bool:
        return self.analysis.index[container] < self.analysis.index[node] <= self.analysis.last[container]

    def _shuffle_with_sampler(self) -> None:
        """``DataLoader(..., sampler=s, shuffle=True)`` raises: the sampler decides the order."""
        for call in self.analysis.nodes(cst.Call):
            if not self.analysis.matches(call, call_to(names.DATA_LOADER)) or self._given_sampler(call, 3, "sampler") is None:
                continue  # `sampler=None` is no sampler: DataLoader shuffles with a RandomSampler of its own
            shuffle = next((a for a in call.args if a.keyword is not None and a.keyword.value == "shuffle"), None)
            if shuffle is not None and m.matches(shuffle.value, m.Name("True")):
                self._report(shuffle, "DDP505")
                self.fixes[call] = call.with_changes(args=_without(call.args, shuffle))

    def _divided_batches(self) -> None:
        """A loader's ``B // world_size`` that drops samples, or is 0, on common process counts: convert's DDP309/DDP336 hazards."""
        for call in self.analysis.nodes(cst.Call):
            if not self.analysis.matches(call, call_to(names.DATA_LOADER)) or self._in_helper(call):
                continue
            batch = argument(call, 1, "batch_size")
            hazard = divided_batch(self.analysis, batch) if batch is not None else None
            if hazard is None:
                continue
            # An evaluation's smaller batches lose no sample, and a floored one is correct: only a share of 0 crashes it.
            trains = self._may_train(call)
            if not trains and (hazard.floored or not hazard.below):
                continue
            total, below = code_of(hazard.total), ", ".join(map(str, hazard.below))
            if hazard.size is None:
                what = (
                    "`max(1, ...)` loads 1 sample per process there, so the global batch grows to world_size" if hazard.floored
                    else "DataLoader refuses a batch of 0, so every process crashes with the script's default options"
                )  # fmt: skip
                self._report(hazard.total, "DDP531", total=total, default=str(hazard.default), counts=below, what=what)
                continue
            parts = []
            if hazard.below:
                parts.append(
                    f"on {below} processes `max(1, ...)` loads 1 sample per process, so the global batch grows to world_size"
                    if hazard.floored else f"on {below} processes each process's share is 0, which DataLoader refuses"
                )  # fmt: skip
            shrinks = [str(w) for w in hazard.misses if w not in hazard.below]
            if shrinks and trains:
                parts.append(f"on {', '.join(shrinks)} processes the remainder is dropped and the global batch shrinks")
            misses = ", ".join(map(str, hazard.misses if trains else hazard.below))
            self._report(hazard.total, "DDP530", total=total, size=str(hazard.size), misses=misses, what="; ".join(parts))

    def _may_train(self, call: cst.Call) -> bool:
        """A loop of this file back-propagates through the loader, or, iterated elsewhere, it reads as a training loader."""
        if self._trains_on(call):
            return True
        if self._iterations(call):
            return False
        sampler = argument(call, 3, "sampler")
        if sampler is not None and m.matches(sampler, m.Call(func=m.Name(names.EVALUATION_SHARD_HELPER))):
            return False
        return is_training_loader(call, self._bound_to(call), only_loader=False)

    def _gpu_count_scalings(self) -> None:
        """A batch or worker count scaled by ``torch.cuda.device_count()``: convert's DDP318 hazard, in a DDP script.

        Only a count that is provably the device count: ``n_gpu`` that a script sets
        to 1 under a launcher (``if local_rank != -1: n_gpu = 1``) scales nothing there.
        """
        for scaling in gpu_count_scalings(self.analysis):
            if not scaling.exact or self._in_helper(scaling.node):
                continue
            if "worker" in scaling.scaled.lower():
                advice = (
                    "each process starts its own loader, so the node runs that many times the workers one loader "
                    "had: drop the scaling"
                )
            else:
                advice = (
                    "DDP's number of processes is the world size, which is this count only on one node with one "
                    "process per GPU: scale a global batch by dist.get_world_size(), and a per-process batch not at all"
                )
            self._report(scaling.node, "DDP532", target=scaling.scaled, count=code_of(scaling.count), advice=advice)

    # -- devices ------------------------------------------------------------------------------

    def _devices(self) -> None:
        for string in self.analysis.nodes(cst.SimpleString):
            if FIRST_GPU.match(str(string.evaluated_value)) and self._device_scope(string) and not self._mapped_from(string):
                if not self._replaced_when_distributed(string):
                    self._report(string, "DDP509", device=code_of(string))
        for call in self.analysis.nodes(cst.Call):
            if not self._device_scope(call):
                continue
            if self.analysis.matches(call, call_to({"torch.cuda.set_device"})) and m.matches(argument(call, 0, "device"), m.Integer("0")):
                self._report(call, "DDP509", device=code_of(call))
            elif m.matches(call, m.Call(func=m.Attribute(attr=m.Name("cuda")), args=[m.Arg(m.Integer("0"))])):
                self._report(call, "DDP509", device=code_of(call))
            elif self.analysis.matches(call, call_to(names.TORCH_LOAD)) and argument(call, 1, "map_location") is None:
                if not self._loads_its_own_file(call):
                    self._report(call, "DDP508")
            elif self.analysis.matches(call, call_to(names.TORCH_SAVE)) and call.args:
                saved = code_of(call.args[0].value)
                if saved in self.effects.models:
                    self._report(call, "DDP511", model=saved)
        for target in self.analysis.nodes(cst.AssignTarget):
            if m.matches(target.target, VISIBLE_DEVICES) and self._device_scope(target):
                self._report(target, "DDP510")
        for call in self.analysis.nodes(cst.Call):
            if m.matches(call.func, m.Attribute(value=m.Attribute(value=m.Name("os"), attr=m.Name("environ")), attr=m.Name("setdefault") | m.Name("update"))):
                if "CUDA_VISIBLE_DEVICES" in code_of(call) and self._device_scope(call):
                    self._report(call, "DDP510")

    def _device_scope(self, node: cst.CSTNode) -> bool:
        """Where device choices are this DDP run's: all of a script, or in a library the class or function that starts DDP."""
        if self._in_helper(node):
            return False
        if self._is_script:
            return True
        outermost = [a for a in self.analysis.ancestors(node) if isinstance(a, (cst.FunctionDef, cst.ClassDef))]
        if not outermost:
            return True
        return any(self._inside(start, outermost[-1]) for start in self._starts)

    @cached_property
    def _is_script(self) -> bool:
        return entry_point(self.analysis) is not None

    @cached_property
    def _starts(self) -> list[cst.Call]:
        calls = self.analysis.nodes(cst.Call)
        return [c for c in calls if self.analysis.matches(c, call_to(names.INIT_PROCESS_GROUP))] + self.wraps

    def _mapped_from(self, string: cst.SimpleString) -> bool:
        """``{"cuda:0": f"cuda:{rank}"}``: the key names where a checkpoint was saved, the remedy for DDP508."""
        parent = self.analysis.parents.get(string)
        return isinstance(parent, cst.DictElement) and parent.key is string

    def _replaced_when_distributed(self, string: cst.SimpleString) -> bool:
        """``device = torch.device("cuda:0" if cuda else "cpu")``, then ``device = torch.device("cuda", args.local_rank)``.

        The same function binds the name again to this process's GPU before reading it,
        so the first GPU is only the single-process default.
        """
        assign = next((a for a in self.analysis.ancestors(string) if isinstance(a, (cst.Assign, cst.FunctionDef, cst.Module))), None)
        if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
            return False
        name = code_of(assign.targets[0].target)
        scope = self._scope(assign)
        for later in self.analysis.within(scope, cst.Assign):
            if not self.analysis.is_after(later, assign) or self._scope(later) is not scope:
                continue
            if any(code_of(t.target) == name for t in later.targets) and self._process_device(later.value):
                between = [
                    n for n in [*self.analysis.within(scope, cst.Name), *self.analysis.within(scope, cst.Attribute)]
                    if self.analysis.is_after(n, assign) and self.analysis.is_before(n, later) and code_of(n) == name
                ]  # fmt: skip
                return not between
        return False

    def _scope(self, node: cst.CSTNode) -> cst.CSTNode:
        return next((a for a in self.analysis.ancestors(node) if isinstance(a, (cst.FunctionDef, cst.Module))), self.analysis.module)

    def _process_device(self, value: cst.BaseExpression) -> bool:
        """``torch.device("cuda", args.local_rank)``, ``f"cuda:{local_rank}"``, ``"cuda:%d" % gpu``, or
        ``torch.cuda.current_device()`` (what ``set_device`` chose; the accelerator API's alike): this process's GPU."""
        current = {"torch.cuda.current_device", "torch.accelerator.current_accelerator", "torch.accelerator.current_device_index"}
        if self.analysis.matches(value, call_to(current)):
            return True
        spelled = code_of(value)
        if "cuda" not in spelled:
            return False
        if "LOCAL_RANK" in spelled:
            return True
        read = self.analysis.reads(value)
        return any(PROCESS_WORDS.search(n) and not n.isupper() for n in read) or any(
            self.analysis.device_indices.holds(self.analysis, n) for n in self.analysis.within(value, cst.Name)
        )

    def _in_memory(self, target: cst.BaseExpression | None, node: cst.CSTNode) -> bool:
        """``buffer`` bound to ``io.BytesIO()`` before ``node`` in its function."""
        if target is None:
            return False
        if self.analysis.matches(target, call_to({"io.BytesIO"})):
            return True
        value = self._assigned_before(code_of(target).split(".")[0], node)
        return value is not None and self.analysis.matches(value, call_to({"io.BytesIO"}))

    def _loads_its_own_file(self, load: cst.Call) -> bool:
        """``torch.load`` of a buffer or temporary file this function wrote: it comes back to this process's device."""
        source = argument(load, 0, "f")
        if source is None:
            return False
        spelled = code_of(source)
        root = spelled.split(".")[0]
        scope = next((a for a in self.analysis.ancestors(load) if isinstance(a, (cst.FunctionDef, cst.Module))), self.analysis.module)
        for call in self.analysis.within(scope, cst.Call):
            if not self.analysis.is_before(call, load):
                break
            if self.analysis.matches(call, call_to(names.TORCH_SAVE)) and len(call.args) > 1:
                if code_of(call.args[1].value).split(".")[0] == root:
                    return True
        if self._in_memory(source, load):
            return True
        for item in self.analysis.within(scope, cst.WithItem):
            if item.asname is not None and code_of(item.asname.name) == root:
                if any(q.name.startswith("tempfile.") for q in self.analysis.qualified_names(item.item.func)) if isinstance(item.item, cst.Call) else False:  # fmt: skip
                    return True
        return False

    # -- the model's life-cycle ------------------------------------------------------------------

    def _lifecycle(self) -> None:
        lifecycle = ModelLifecycle(self.analysis, around=self.wraps + self.helper_wraps)
        for hazard in lifecycle.blockers:
            if hazard.code == "DDP223" and not self._beside_a_wrap(hazard.node):
                continue  # an optimizer built where no wrap is: the module may be wrapped after it is handed on
            if hazard.code == "DDP212" and self._move_to_its_own_device(hazard.node):  # type: ignore[arg-type]
                continue
            if hazard.code == "DDP212" and self._move_of_a_fresh_model(hazard.node):  # type: ignore[arg-type]
                continue
            if hazard.code == "DDP221" and self._backward_of_a_plain_model(hazard.node):  # type: ignore[arg-type]
                continue  # a second backward through a copy of the model, which DDP does not hold
            if hazard.code in LIFECYCLE_CODES:
                self.hazards.append(Hazard(hazard.node, LIFECYCLE_CODES[hazard.code], hazard.values))
        for hazard in lifecycle.findings:
            if hazard.code == "DDP213" and not self._to_this_process_device(hazard.node):  # type: ignore[arg-type]
                self.hazards.append(Hazard(hazard.node, "DDP539", hazard.values))

    def _to_this_process_device(self, call: cst.Call) -> bool:
        """A move or a ``set_device`` whose device this file binds to the process's own GPU, as convert's DDP213 could not tell."""
        if isinstance(call.func, cst.Attribute) and call.func.attr.value == "to" and self._move_to_its_own_device(call):
            return True
        if not call.args:
            return True
        device = call.args[0].value
        # `.cuda(gpu)` in `train(gpu, args)`, `set_device(args.local_rank)`: named for the process, as DDP501's guards are.
        last = code_of(device).rsplit(".", 1)[-1]
        # A name the file binds to the process's GPU at least once: a fixed GPU beside it is DDP509's finding.
        return bool(PROCESS_WORDS.search(last)) or any(self._process_device(v) for v in self._values_of(code_of(device)))

    # -- a DDP model treated as unwrapped on one side of a test ---------------------------------

    def _one_sided_unwraps(self) -> None:
        """Convert's DDP208, found in DDP code by the same detection."""
        for branch, name in one_sided_unwraps(self.analysis, self.wraps + self.helper_wraps):
            self._report(branch.test, "DDP533", condition=code_of(branch.test), model=name)
            self.fixes[branch] = through_module(branch, name)

    # -- losses each process computes on its share ----------------------------------------------

    def _batch_normalised_losses(self) -> None:
        """Weighted means and in-batch negatives: the losses convert warns about, computed by a DDP model's processes."""
        for hazard in self.analysis.batch_normalised_losses:
            self.hazards.append(Hazard(hazard.node, LOSS_CODES[hazard.code], hazard.values))

    def _move_to_its_own_device(self, move: cst.Call) -> bool:
        """A move inside a later wrap's arguments, which runs before that wrap, or to a device a wrap binds to."""
        if any(self._inside(move, wrap) for wrap in self.wraps):
            return True
        device = code_of(move.args[0].value) if move.args else ""
        bound = {code_of(e.value) for wrap in self.wraps for ids in [argument(wrap, 1, "device_ids")] if isinstance(ids, cst.List) for e in ids.elements}
        bound |= {code_of(c.args[0].value) for c in self.analysis.nodes(cst.Call) if c.args and self.analysis.matches(c, call_to({"torch.cuda.set_device"}))}
        return device in bound or self._bound_to_process_device(device)

    def _bound_to_process_device(self, device: str) -> bool:
        """``args.device = torch.device("cuda", args.local_rank)``: a name bound to this process's GPU.

        Another binding may name no GPU (``"cpu"``, or ``"cuda"`` when not distributed) but
        no fixed one (``"cuda:1"``).
        """
        values = self._values_of(device)
        if not any(self._process_device(v) for v in values):
            return False
        return not any(
            re.search(r"cuda:\d", code_of(v)) or self.analysis.findall_in(v, m.Call(args=[m.Arg(), m.Arg(m.Integer())]))
            for v in values if not self._process_device(v)
        )  # fmt: skip

    def _values_of(self, name: str, depth: int = 0) -> list[cst.BaseExpression]:
        """The values assigned to ``name`` in the file, through copies: ``args.device = device`` gives ``device``'s."""
        values: list[cst.BaseExpression] = []
        for assign in self.analysis.nodes(cst.Assign):
            if any(code_of(t.target) == name for t in assign.targets):
                copied = isinstance(assign.value, (cst.Name, cst.Attribute)) and depth < 2 and code_of(assign.value) != name
                values += self._values_of(code_of(assign.value), depth + 1) if copied else [assign.value]
        return values

    def _move_of_a_fresh_model(self, move: cst.Call) -> bool:
        """``model = Model.from_pretrained(out_dir)`` then ``model.to(device)``: the name no longer holds the DDP model."""
        moved = move.func.value if isinstance(move.func, cst.Attribute) else None
        return moved is not None and self._rebound_before(code_of(moved), move)

    def _rebound_before(self, name: str, node: cst.CSTNode) -> bool:
        """Whether ``name`` holds a model no DDP wraps where ``node`` runs: bound, on every path to it, to a fresh one.

        The statements before ``node`` are followed in order, into the blocks that hold it:
        ``model = Model.from_pretrained(out_dir)``, or an ``if``/``else`` whose every branch
        binds a fresh model, makes it fresh; a wrap, any other value, or a loop or ``try``
        that may not run its fresh binding leaves it unknown.
        """
        scope = self._scope(node)
        body = scope.body if isinstance(scope, cst.FunctionDef) else scope
        fresh: bool | None = None
        container: cst.CSTNode = body
        while True:
            statements = self._statements(container)
            holding = next((st for st in statements if st is node or self._inside(node, st)), None)
            if holding is None or holding is node:
                return bool(fresh)
            for statement in statements[: statements.index(holding)]:
                fresh = self._after_statement(statement, name, fresh)
            if isinstance(holding, cst.SimpleStatementLine):
                container = holding
                continue
            inner = next((b for b in self._blocks(holding) if self._inside(node, b)), None)
            if not isinstance(holding, (cst.If, cst.With)) and self._assigns(holding, name):
                fresh = False  # a loop or `try` may have bound it otherwise before reaching `node`
            if inner is None:
                return bool(fresh)
            container = inner

    def _statements(self, container: cst.CSTNode) -> list[cst.CSTNode]:
        if isinstance(container, cst.SimpleStatementLine):
            return list(container.body)
        if isinstance(container, (cst.IndentedBlock, cst.SimpleStatementSuite, cst.Module)):
            return list(container.body)
        return []

    def _blocks(self, statement: cst.CSTNode) -> list[cst.CSTNode]:
        """The blocks of a compound statement: an ``if``'s body, its ``elif``s' and ``else``'s."""
        blocks: list[cst.CSTNode] = []
        node: cst.CSTNode | None = statement
        while isinstance(node, cst.If):
            blocks.append(node.body)
            node = node.orelse
        if isinstance(node, (cst.Else, cst.Finally)):
            blocks.append(node.body)
        if isinstance(statement, (cst.For, cst.While, cst.With)):
            blocks.append(statement.body)
        if isinstance(statement, cst.Try):
            blocks += [statement.body, *(h.body for h in statement.handlers)]
        return blocks

    def _assigns(self, node: cst.CSTNode, name: str) -> bool:
        return any(self._bound_value(a, name) is not None for a in self.analysis.within(node, cst.Assign))

    def _after_statement(self, statement: cst.CSTNode, name: str, fresh: bool | None) -> bool | None:
        """Whether ``name`` holds a fresh model after ``statement``: ``None`` where it does not bind it."""
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                fresh = self._after_statement(small, name, fresh)
            return fresh
        if isinstance(statement, cst.Assign):
            value = self._bound_value(statement, name)
            if value is None:
                return fresh
            wraps = self.analysis.findall_in(value, m.Call(func=m.Name(names.WRAP_HELPER)) | call_to(names.DISTRIBUTED_DATA_PARALLEL))
            return not wraps and self._fresh_model(value)
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)) or not self._assigns(statement, name):
            return fresh
        if isinstance(statement, (cst.If, cst.With)):
            blocks = self._blocks(statement)
            every_path = isinstance(statement, cst.With) or self._chain(statement)[1]
            ends = []
            for block in blocks:
                end = fresh
                for inner in self._statements(block):
                    end = self._after_statement(inner, name, end)
                ends.append(end)
            return every_path and all(ends)
        return False

    def _bound_value(self, assign: cst.Assign, name: str) -> cst.BaseExpression | None:
        """The value ``assign`` binds ``name`` to: ``model, tok = Model(...), Tok(...)`` binds ``Model(...)``."""
        for target in assign.targets:
            if code_of(target.target) == name:
                return assign.value
            if isinstance(target.target, (cst.Tuple, cst.List)):
                spelled = [code_of(e.value) for e in target.target.elements]
                if name in spelled:
                    if isinstance(assign.value, (cst.Tuple, cst.List)) and len(assign.value.elements) == len(spelled):
                        return assign.value.elements[spelled.index(name)].value
                    return assign.value
        return None

    def _fresh_model(self, value: cst.BaseExpression) -> bool:
        """A call that builds or loads a model from nothing the script holds as a DDP model: ``Model.from_pretrained(path)``."""
        if not isinstance(value, cst.Call) or code_of(value.func) in self._functions:
            return False
        if value in self.analysis.script_facts.imported_wraps:
            return False
        return not (self.analysis.reads(value) & self.effects.models)

    def _beside_a_wrap(self, node: cst.CSTNode) -> bool:
        scope = next((a for a in self.analysis.ancestors(node) if isinstance(a, cst.FunctionDef)), self.analysis.module)
        return any(self._inside(wrap, scope) for wrap in self.wraps + self.helper_wraps)

    # -- what convert leaves in a script and warns about (DDP201-203, DDP418, DDP422, DDP423) ---------

    def _data_parallel_left(self) -> None:
        """DataParallel a DDP process still runs: on a sub-module, through the functional form, or a subclass."""
        for call in self.analysis.nodes(cst.Call):
            if self.analysis.matches(call, call_to(names.DATA_PARALLEL | names.FUNCTIONAL_DATA_PARALLEL)):
                loads_only = call in self.analysis.script_facts.loading_wraps
                if not self._in_helper(call) and not self._instead_of_ddp(call) and not loads_only:
                    self._report(call, "DDP535", call=code_of(call.func))
        for definition in self.analysis.nodes(cst.ClassDef):
            if any(self.analysis.matches(base.value, resolves_to(names.DATA_PARALLEL)) for base in definition.bases):
                if not self._instead_of_ddp(definition):
                    self._report(definition.name, "DDP535", call=definition.name.value)

    def _instead_of_ddp(self, node: cst.CSTNode) -> bool:
        """DataParallel the script runs where it runs no DDP: a branch of ``if args.distributed:``, or beside its own DDP."""
        child = node
        for ancestor in self.analysis.ancestors(node):
            if isinstance(ancestor, (cst.If, cst.IfExp)) and child is not ancestor.test:
                test = code_of(ancestor.test)
                # `if RANK == -1 and torch.cuda.device_count() > 1:` asks whether the run is distributed.
                asks_distributed = DISTRIBUTED_TEST.search(test) or (RANK_WORD.search(test) and NOT_DISTRIBUTED in test)
                if asks_distributed or self._starts_ddp(ancestor):
                    return True
            if isinstance(ancestor, cst.FunctionDef) and self._starts_ddp(ancestor):
                return True  # `return DDP(model) if distributed` ... `return DataParallel(model)`
            child = ancestor
        return False

    def _starts_ddp(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` holds the script's own ``DistributedDataParallel(...)`` or ``init_process_group(...)``."""
        return any(self._inside(start, node) and not self._in_helper(start) for start in self._starts)

    def _writes_convert_leaves(self) -> None:
        guarded_functions = self._functions_called_only_when_guarded()
        for found in per_process_paths(self.analysis, lambda call: not self._guarded(call, guarded_functions)):
            if not self._guarded(found.assign, guarded_functions) and not self._shared(found.assign):
                self._report(found.assign, "DDP536", value=code_of(found.draw.func), path=found.path)
        for call in imported_writer_calls(self.analysis):
            if not self._guarded(call, guarded_functions):
                self._report(call, "DDP537", call=code_of(call.func))
        self._writers_on_every_process(guarded_functions)

    def _shared(self, assign: cst.Assign) -> bool:
        """Whether a value ``assign`` binds reaches a broadcast: then every process holds the main process's."""
        bound = {code_of(t.target) for t in assign.targets if isinstance(t.target, (cst.Name, cst.Attribute))}
        flows = self.analysis.flows_from(bound)
        for call in self.analysis.nodes(cst.Call):
            qualified = {q.name.rsplit(".", 1)[-1] for q in self.analysis.qualified_names(call.func) if q.name.startswith("torch.distributed.")}
            if qualified & SHARING and any(self.analysis.reads(a.value) & flows for a in call.args):
                return True
        return False

    def _writers_on_every_process(self, guarded_functions: set[str]) -> None:
        """A SummaryWriter every process builds, or a file on os.devnull off the main process that code reads."""
        for assign in self.analysis.nodes(cst.Assign):
            if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, (cst.Name, cst.Attribute)):
                continue
            if self._in_helper(assign) or self._guarded(assign, guarded_functions):
                continue
            target = assign.targets[0].target
            name = code_of(target)
            if opens_for_writing(self.analysis, assign.value):
                if "devnull" not in code_of(assign.value):
                    continue  # every process opens the same file: its writes are DDP501's
                read = self._read_beyond_writes(target, guarded_functions)
                if read is not None:
                    how = "off the main process on os.devnull"
                    self._report(read, "DDP538", writer=name, how=how, where=", and this reads it on every process, where it is os.devnull's")
            elif self.analysis.matches(assign.value, call_to(names.WRITER_CONSTRUCTORS)) and not self._assigned_by_rank(assign):
                read = self._read_beyond_writes(target, guarded_functions)
                how = "each process writes its own event files or run"
                where = ", because this reads it on every process" if read is not None else ""
                self._report(read if read is not None else assign, "DDP538", writer=name, how=how, where=where)

    def _read_beyond_writes(self, target: cst.BaseExpression, guarded_functions: set[str]) -> cst.CSTNode | None:
        """The first unguarded read of one of the writer's attributes, ``writer.log_dir`` or ``log_file.name``."""
        if isinstance(target, cst.Name):
            uses = self.analysis.references(target)
        else:
            spelled = code_of(target)
            uses = [n for n in self.analysis.nodes(cst.Attribute) if n is not target and code_of(n) == spelled]
        for use in uses:
            read = attribute_read(self.analysis, use)  # `writer.add_scalar(...)`, `log_file.write(...)` are writes
            if read is not None and not self._guarded(use, guarded_functions):
                return read
        return None

    # -- decisions each process takes on its own share of the data ---------------------------------

    def _per_process_decisions(self) -> None:
        """What convert warns it leaves per process (DDP420, DDP421, DDP424, DDP326), found by the same detection."""
        for step in plateau_steps(self.analysis):
            if step.guarded:
                self._report(step.call, "DDP541", scheduler=step.scheduler)
        if not self._splits_data:
            return  # every process sees the same data, so what it computes from it is the same everywhere
        split = split_loader_names(self.analysis)
        for test, value in per_process_stops(self.analysis, split):
            if value not in self._reduced_in_place:
                self._report(test, "DDP543", value=value)
        for aug, counter in schedule_counters(self.analysis):
            self._report(aug, "DDP542", counter=counter)
        trained = [
            (c, self._bound_to(c)) for c in self._fed_to_backward
            if isinstance(c, cst.Call) and self._splits(argument(c, 3, "sampler"))
        ]  # fmt: skip
        for statement, loader, held in ungathered_evaluations(self.analysis, trained):
            if held not in self._reduced_in_place:
                self._report(statement, "DDP544", loader=loader, held=held)

    @cached_property
    def _splits_data(self) -> bool:
        """Whether some loader of the script is split between processes: by a DistributedSampler or a ShardedSampler."""
        return any(self._splits(c) for c in self.analysis.nodes(cst.Call))

    def _splits(self, sampler: cst.BaseExpression | None) -> bool:
        if sampler is None:
            return False
        if self._distributed_sampler(sampler) is not None or m.matches(sampler, m.Call(func=m.Name(names.SHARDED_SAMPLER_HELPER))):
            return True
        if isinstance(sampler, cst.Name):
            values = [a.value for a in self.analysis.nodes(cst.Assign) if any(code_of(t.target) == sampler.value for t in a.targets)]
            return bool(values) and all(m.matches(v, m.Call(func=m.Name(names.SHARDED_SAMPLER_HELPER))) for v in values)
        return False

    @cached_property
    def _reduced_in_place(self) -> set[str]:
        """Names handed to a torch.distributed reduction (``dist.all_reduce(loss_sum)``): the same everywhere after it."""
        found: set[str] = set()
        for call in self.analysis.nodes(cst.Call):
            qualified = {q.name for q in self.analysis.qualified_names(call.func)}
            if call.args and any(q.startswith("torch.distributed.") and q.rsplit(".", 1)[-1] in REDUCTIONS for q in qualified):
                found |= self.analysis.reads(call.args[0].value)
        return found

    # -- training batches no sampler splits ----------------------------------------------------------

    def _unsplit_training_data(self) -> None:
        """A DDP model trained on batches this file makes itself, none of them from a DataLoader: every process trains on all.

        Convert's detection (DDP317) finds the training loops whose batches no DataLoader of the
        file produces. Check reports only those whose batches are made by code of this file that
        is blind to the process: a list or comprehension, a generator function, an iterator class,
        a function that slices a batch out. Batches from another module (``build_loader(cfg)``),
        from a parameter, from code that reads the rank or the world size, or drawn at random
        (each process draws its own) may well be split or differ per process, and are not reported.
        """
        loaders = [c for c in self.analysis.nodes(cst.Call) if self.analysis.matches(c, call_to(names.DATA_LOADER))]
        for found in TrainingBatches(self.analysis).unsplit_batches(loaders):  # type: ignore[arg-type]
            if found.code != "DDP317":
                continue
            made = self._batch_maker(found.source)
            if made is not None and all(self._blind_to_the_process(node) for node in made):
                self._report(found.node, "DDP540", source=found.spelled)

    def _batch_maker(self, source: cst.CSTNode) -> list[cst.CSTNode] | None:
        """The code of this file that makes the batches ``source`` yields, with the values it is handed; ``None``
        where that code is not this file's, or is unknown.

        Followed through ``iter``/``enumerate``/``next``/``tqdm`` and names bound once. What
        makes the batches: a list, tuple or comprehension; ``list``/``zip`` of tensors split
        with ``split``/``chunk``; a generator function, an iterator class or a function that
        returns slices (``x[i:i + bs]``), with the arguments of the call.
        """
        node = source
        for _ in range(4):  # each turn follows one name; a name bound to itself cannot loop
            while isinstance(node, cst.Call) and node.args and (
                m.matches(node.func, m.Name("iter") | m.Name("enumerate") | m.Name("next")) or self.analysis.matches(node, call_to(names.TQDM))
            ):  # fmt: skip
                node = node.args[0].value
            if not isinstance(node, cst.Name):
                break
            bindings = self.analysis.bindings(node) or []
            if len(bindings) != 1 or bindings[0] is None:
                return None  # a parameter, an import, a loop target, or several values
            node = bindings[0].value
        if isinstance(node, (cst.List, cst.Tuple, cst.ListComp, cst.GeneratorExp)):
            return [node]
        if not isinstance(node, cst.Call):
            return None
        if m.matches(node.func, m.Name("list") | m.Name("tuple") | m.Name("zip")) or m.matches(
            node.func, m.Attribute(attr=m.Name("split") | m.Name("chunk"))
        ):  # fmt: skip
            return [node] if all(self._splits_tensors(a.value) for a in node.args) else None
        function = self.analysis.callee(node)
        if function is None:
            return None
        cls = next((a for a in self.analysis.ancestors(function) if isinstance(a, cst.ClassDef)), None)
        if function.name.value == "__init__" and cls is not None:
            methods = {f.name.value for f in self.analysis.within(cls, cst.FunctionDef)}
            return [cls, node] if methods & {"__iter__", "__next__"} else None
        if self.analysis.within(function, cst.Yield):
            return [function, node]
        returns = [r.value for r in self.analysis.within(function, cst.Return)]
        # `return X[i:i + bs], Y[i:i + bs]`: a batch sliced out of tensors the process holds whole.
        if returns and all(m.matches(r, m.Tuple(elements=[m.AtLeastN(m.Element(m.Subscript()), n=1)])) for r in returns):
            return [function, node]
        return None

    def _splits_tensors(self, node: cst.BaseExpression) -> bool:
        """``x.split(8)``, ``zip(...)`` of them, a name: what ``list(zip(x.split(8), y.split(8)))`` is made of."""
        if isinstance(node, cst.Call):
            return m.matches(node.func, m.Name("zip") | m.Attribute(attr=m.Name("split") | m.Name("chunk"))) and all(
                self._splits_tensors(a.value) for a in node.args
            )  # fmt: skip
        return isinstance(node, (cst.Name, cst.Attribute, cst.Integer))

    def _assigned_values(self, name: cst.Name) -> list[cst.BaseExpression]:
        """The values of the assignments that bind ``name`` where it is read, tuple targets included (``x, y = load()``)."""
        scope = self.analysis.scopes.get(name)
        if scope is None or name.value not in scope:
            return []
        found = []
        for assignment in scope[name.value]:
            node = getattr(assignment, "node", None)
            while node is not None and not isinstance(node, (cst.Assign, cst.BaseSmallStatement, cst.BaseCompoundStatement)):
                node = self.analysis.parents.get(node)
            if isinstance(node, cst.Assign):
                found.append(node.value)
        return found

    def _blind_to_the_process(self, made: cst.CSTNode) -> bool:
        """Code that neither reads which process it runs on, nor draws at random, nor calls another module's code;
        nor do the values of the names it reads, three assignments back (``path = f"shard{rank}.pt"``, then
        ``x = torch.load(path)``: ``x`` is one process's)."""
        values: list[cst.CSTNode] = [made]
        frontier: list[cst.CSTNode] = [made]
        for _ in range(3):
            bound = [
                value for node in frontier for name in self.analysis.within(node, cst.Name)
                for value in self._assigned_values(name) if not any(value is v for v in values)
            ]  # fmt: skip
            values += bound
            frontier = bound
        for node in values:
            if any(PROCESS_SHARE.search(n.value) for n in self.analysis.within(node, cst.Name)):
                return False
            for call in self.analysis.within(node, cst.Call):
                for qualified in self.analysis.qualified_names(call.func):
                    name = qualified.name
                    if name in RANDOM_DRAWS or name.startswith(("random.", "numpy.random.", "torch.distributed.")):
                        return False
                    if qualified.source is QualifiedNameSource.IMPORT and name.split(".")[0] not in PROCESS_BLIND_MODULES:
                        return False  # another module's code may split the data, or hand back a split loader
        return True


def _single_process(call: cst.Call) -> bool:
    """``init_process_group("fake", ...)`` simulates every rank in one process; ``world_size=1`` is one process."""
    backend = argument(call, 0, "backend")
    if isinstance(backend, cst.SimpleString) and backend.evaluated_value == "fake":
        return True
    size = argument(call, 99, "world_size")
    return m.matches(size, m.Integer("1"))


def _conjuncts(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    """``a and b and c`` -> ``[a, b, c]``: each must hold for the branch to run."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return [*_conjuncts(test.left), *_conjuncts(test.right)]
    return [test]


def _raises(body: cst.BaseSuite) -> bool:
    """A branch that ends in ``raise``: the process stops there, so it waits on nothing."""
    statements = list(body.body) if isinstance(body, cst.IndentedBlock) else []
    last = statements[-1] if statements else None
    return isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[-1], cst.Raise)


def _without(args: tuple[cst.Arg, ...] | list[cst.Arg], dropped: cst.Arg) -> list[cst.Arg]:
    kept = [a for a in args if a is not dropped]
    if kept and args[-1] is dropped:
        kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return kept
