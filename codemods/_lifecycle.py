"""The model's life-cycle: where it is wrapped, what happens to it around the wrap, and
what the training step does with it.

DDP registers its gradient hooks on the parameters it is given and broadcasts rank 0's
weights once, when it is built. A conversion is only sound when every process wraps the
model, when nothing after the wrap casts, re-creates, re-initialises or moves those
parameters, and when every process runs every backward pass the same number of times.
``ModelLifecycle`` establishes these facts once per tree:

- which wraps may leave their ``if`` (all of one ``if`` together, and only when the
  condition is provably about GPUs or CUDA), and which ``X if gpu else model`` forms
  become an unconditional wrap;
- *blockers*: hazards that no edit makes safe. Any blocker leaves the whole file as it
  was, because a half-converted script is worse than none, with a finding at each line;
- fixes other codemods apply: wraps that need ``find_unused_parameters=True``, and
  ``net.module if use_cuda else net`` where the condition no longer decides the wrap.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import libcst as cst
import libcst.matchers as m

from . import _names as names
from ._base import (
    DEVICE_MOVE,
    MAIN_GUARD,
    argument,
    call_to,
    code_of,
    inside_helper,
    without_device_move,
)

if TYPE_CHECKING:
    from ._analysis import Analysis

# A name that says it holds a GPU count, GPU ids or a CUDA switch: ngpu, args.cuda, gpu_ids.
GPU_WORDS = re.compile(r"gpu|cuda", re.IGNORECASE)
CASTS = frozenset({"half", "float", "double", "bfloat16"})
DTYPE = re.compile(r"^torch\.(half|float16|bfloat16|float|float32|float64|double)$")
# In-place tensor methods that overwrite values; `requires_grad_` and friends do not.
OVERWRITES = re.compile(r"^(normal|uniform|zero|fill|copy|constant|xavier_\w+|kaiming_\w+|orthogonal|ones|trunc_normal)_$")
GPU_OR_DEVICE = re.compile(r"device|gpu|cuda", re.IGNORECASE)
LOCAL_RANK_WORDS = re.compile(r"local_rank|current_device", re.IGNORECASE)
_BACKWARD = m.Call(func=m.Attribute(attr=m.Name("backward")))
_LOOPS = (cst.For, cst.While)
_SCOPES = (cst.FunctionDef, cst.Module, cst.Lambda)


@dataclass(frozen=True)
class Hazard:
    """A finding the life-cycle analysis made: a rule code, its node, the message values."""

    node: cst.CSTNode
    code: str
    values: tuple[tuple[str, str], ...] = ()


@dataclass
class Wrap:
    call: cst.Call
    statement: cst.SimpleStatementLine | None
    scope: cst.CSTNode
    # `model = DataParallel(base)`: the names the wrapped model goes by after the wrap.
    target: str | None
    inner: str | None
    # Ifs and conditional expressions around the wrap, innermost first; the entry guard is no condition.
    conditions: list[cst.If | cst.IfExp] = field(default_factory=list)

    @property
    def names(self) -> set[str]:
        return {name for name in (self.target, self.inner) if name}


class ModelLifecycle:
    """What the analysis knows about every wrapped model of one script."""

    def __init__(self, analysis: Analysis, around: list[cst.Call] | None = None) -> None:
        """The life-cycle around the script's DataParallel wraps, or, for ``check``, ``around`` these DDP wraps."""
        self.analysis = analysis
        self.wraps = [self._wrap(call) for call in (analysis.script_facts.model_wraps if around is None else around)]
        self.blockers: list[Hazard] = []
        self.findings: list[Hazard] = []
        # Each `if` whose wrap statements all move after it, and the statements.
        self.hoisted: dict[cst.If, list[cst.SimpleStatementLine]] = {}
        # `DataParallel(m) if gpu else m`: the whole expression becomes the wrap.
        self.collapsed: dict[cst.IfExp, cst.Call] = {}
        # `net.module if use_cuda else net` once the wrap no longer depends on `use_cuda`.
        self.always_wrapped: set[cst.IfExp] = set()
        # Wraps whose model has parameters its forward never uses.
        self.unused_parameters: dict[cst.Call, str] = {}
        self._assignments: dict[str, list[cst.BaseExpression]] | None = None
        self.model_names: set[str] = set().union(*(wrap.names for wrap in self.wraps))
        if not self.wraps:
            if analysis.script_facts.helper_wraps:
                self._devices()  # Converted already: the devices are still this script's own.
            return
        if around is None:
            self._plan_conditions()
        for wrap in self.wraps:
            self._after_the_wrap(wrap)
            if around is None:
                self._find_unused_parameters(wrap)
        for returned in self._returned_models():
            self.model_names |= returned.names
            self._after_the_wrap(returned)
        self._training_steps()
        self._optimizers()
        if around is None:
            self._devices()

    @property
    def blocked(self) -> bool:
        return bool(self.blockers)

    # -- the wraps ----------------------------------------------------------------------

    def _wrap(self, call: cst.Call) -> Wrap:
        statement: cst.SimpleStatementLine | None = None
        conditions: list[cst.If | cst.IfExp] = []
        node: cst.CSTNode = call
        parents = self.analysis.parents
        while not isinstance(node, (cst.Module, cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            parent = parents[node]
            if isinstance(parent, cst.IfExp) and node is not parent.test:
                conditions.append(parent)
            if isinstance(node, cst.SimpleStatementLine) and statement is None:
                statement = node
            if isinstance(node, cst.If) and not m.matches(node, MAIN_GUARD):
                conditions.append(node)
            node = parent
        scope = node if not isinstance(node, cst.ClassDef) else self.analysis.module
        target = None
        if statement is not None and len(statement.body) == 1 and isinstance(statement.body[0], cst.Assign):
            assign = statement.body[0]
            if len(assign.targets) == 1 and isinstance(assign.targets[0].target, (cst.Name, cst.Attribute)):
                target = code_of(assign.targets[0].target)
        wrapped = argument(call, 0, "module")
        inner = None
        if wrapped is not None:
            bare = without_device_move(wrapped)
            if isinstance(bare, (cst.Name, cst.Attribute)):
                inner = code_of(bare)
        return Wrap(call, statement, scope, target, inner, conditions)

    def _plan_conditions(self) -> None:
        """Hoist the wraps of a GPU condition, all of one ``if`` together, or block."""
        by_if: dict[cst.If, list[Wrap]] = {}
        both_branches = self._wrapped_on_both_branches()
        for wrap in self.wraps:
            if not wrap.conditions or wrap.call in both_branches:
                continue
            innermost = wrap.conditions[0]
            test = innermost.test
            if not self.is_gpu_condition(test):
                self.blockers.append(Hazard(test, "DDP207", (("condition", code_of(test)),)))
            elif len(wrap.conditions) > 1:
                self.blockers.append(Hazard(wrap.call, "DDP204"))
            elif isinstance(innermost, cst.IfExp):
                # `DataParallel(m) if gpu else m`, with or without a device move on the wrap.
                wrap_is_body = innermost.body is wrap.call or (
                    m.matches(innermost.body, DEVICE_MOVE) and innermost.body.func.value is wrap.call  # type: ignore[attr-defined]
                )
                if wrap_is_body and wrap.inner is not None and code_of(without_device_move(innermost.orelse)) == wrap.inner:
                    self.collapsed[innermost] = wrap.call
                    continue
                self.blockers.append(Hazard(wrap.call, "DDP204"))
            else:
                by_if.setdefault(innermost, []).append(wrap)
        for condition, wraps in by_if.items():
            statements = [wrap.statement for wrap in wraps]
            if all(s is not None and self._can_leave_if(s, condition) for s in statements):
                self.hoisted[condition] = statements  # type: ignore[assignment]
                self._old_condition_uses(condition, wraps)
            else:
                for wrap in wraps:
                    self.blockers.append(Hazard(wrap.call, "DDP204"))

    def _wrapped_on_both_branches(self) -> set[cst.Call]:
        """``if c: m = DataParallel(m).cuda() else: m = DataParallel(m)``: every path wraps, in place."""
        found: set[cst.Call] = set()
        for wrap in self.wraps:
            if len(wrap.conditions) != 1 or not isinstance(wrap.conditions[0], cst.If) or wrap.target is None:
                continue
            condition = wrap.conditions[0]
            if not isinstance(condition.orelse, cst.Else):
                continue
            sides = [condition.body, condition.orelse.body]
            wraps_on = [
                [w for w in self.wraps if w.target == wrap.target and w.statement is not None and w.statement in side.body]  # type: ignore[union-attr]
                for side in sides
            ]
            if all(wraps_on):
                found |= {w.call for side in wraps_on for w in side}
        return found

    @staticmethod
    def _can_leave_if(statement: cst.SimpleStatementLine, condition: cst.If) -> bool:
        """Whether ``model = DataParallel(model)`` can move after its plain ``if``.

        It can when the ``if`` has no ``else`` and nothing after the wrap in the
        ``if`` uses the wrapped model, so running the wrap later changes nothing else.
        """
        if condition.orelse is not None or not isinstance(condition.body, cst.IndentedBlock):
            return False
        block = list(condition.body.body)
        if statement not in block or len(statement.body) != 1:
            return False
        wrap = statement.body[0]
        if not m.matches(wrap, m.Assign(targets=[m.AssignTarget(m.Name() | m.Attribute())])):
            return False
        assert isinstance(wrap, cst.Assign)
        target = wrap.targets[0].target
        while isinstance(target, cst.Attribute):
            target = target.value
        later = block[block.index(statement) + 1 :]
        return not any(m.findall(s, m.Name(target.value)) for s in later)  # type: ignore[attr-defined]

    def _old_condition_uses(self, condition: cst.If, wraps: list[Wrap]) -> None:
        """Code that still branches on the condition the wrap left now meets a wrapped model."""
        test = code_of(condition.test)
        wrapped = set().union(*(wrap.names for wrap in wraps))
        for branch in self.analysis.nodes(cst.IfExp):
            if code_of(branch.test) != test:
                continue
            body, orelse = code_of(branch.body), code_of(branch.orelse)
            # `net.module if use_cuda else net`, `net.module.state_dict() if use_cuda else net.state_dict()`
            for name in wrapped:
                if (orelse == name or orelse.startswith((f"{name}.", f"{name}("))) and body == f"{name}.module{orelse[len(name):]}":
                    self.always_wrapped.add(branch)
        for other in self.analysis.nodes(cst.If):
            if other is condition or code_of(other.test) != test:
                continue
            # Only a branch that unwraps or saves the model behaves differently now.
            unwraps = any(code_of(a) in {f"{w}.module" for w in wrapped} for a in self.analysis.within(other, cst.Attribute))
            saves = any(self.analysis.matches(c, call_to(names.TORCH_SAVE)) for c in self.analysis.within(other, cst.Call))
            if unwraps or saves:
                self.findings.append(Hazard(other.test, "DDP208", (("condition", test),)))

    # -- GPU conditions -------------------------------------------------------------------

    def is_gpu_condition(self, test: cst.BaseExpression) -> bool:
        """Provably about GPUs or CUDA: every part a torch.cuda query, a literal, or a value
        assigned only from those, or a name that says GPUs or CUDA; at least one part not a literal."""
        return self._gpu(test, 0) is True

    def _gpu(self, node: cst.BaseExpression, depth: int) -> bool | None:
        """True: about GPUs; False: a literal, neutral; None: unknown."""
        if depth > 4:
            return None
        if isinstance(node, (cst.Integer, cst.Float, cst.SimpleString)) or m.matches(node, m.Name("True") | m.Name("False") | m.Name("None")):
            return False
        if isinstance(node, cst.BooleanOperation):
            return _combine(self._gpu(node.left, depth), self._gpu(node.right, depth))
        if isinstance(node, cst.UnaryOperation):
            return self._gpu(node.expression, depth)
        if isinstance(node, cst.Comparison):
            parts = [self._gpu(node.left, depth), *(self._gpu(c.comparator, depth) for c in node.comparisons)]
            return _combine(*parts)
        if isinstance(node, cst.IfExp):
            return _combine(self._gpu(node.test, depth), self._gpu(node.body, depth), self._gpu(node.orelse, depth))
        if isinstance(node, cst.Call):
            qualified = {q.name for q in self.analysis.qualified_names(node.func)}
            if any(q.startswith("torch.cuda.") for q in qualified):
                return True
            if qualified & {"torch.device", "builtins.len", "builtins.int", "builtins.bool", "builtins.list", "builtins.range"}:
                return _combine(*(self._gpu(arg.value, depth) for arg in node.args)) if node.args else None
            return None
        if isinstance(node, cst.Attribute) and node.attr.value == "type":
            return self._gpu(node.value, depth)  # device.type == "cuda"
        if isinstance(node, (cst.Name, cst.Attribute)):
            spelled = code_of(node)
            if GPU_WORDS.search(spelled.rsplit(".", 1)[-1]):
                return True
            values = self.assignments().get(spelled, [])
            if not values:
                return None
            return _combine(*(self._gpu(value, depth + 1) for value in values))
        return None

    def assignments(self) -> dict[str, list[cst.BaseExpression]]:
        """Every value assigned to each name or attribute in the file, argparse defaults included.

        The locals of dp2ddp's own helpers (``device`` in ``all_reduce_sum``) say nothing about the script's values.
        """
        if self._assignments is None:
            found: dict[str, list[cst.BaseExpression]] = {}
            for assign in self.analysis.nodes(cst.Assign):
                if inside_helper(self.analysis, assign):
                    continue
                for target in assign.targets:
                    if isinstance(target.target, (cst.Name, cst.Attribute)):
                        found.setdefault(code_of(target.target), []).append(assign.value)
            for call in self.analysis.nodes(cst.Call):
                if not m.matches(call.func, m.Attribute(attr=m.Name("add_argument"))):
                    continue
                flags = [a.value.evaluated_value for a in call.args if a.keyword is None and isinstance(a.value, cst.SimpleString)]
                dest = argument(call, 99, "dest")
                name = dest.evaluated_value if isinstance(dest, cst.SimpleString) else (flags[-1] if flags else "")
                name = str(name).lstrip("-").replace("-", "_")
                default = argument(call, 99, "default")
                for holder in ("args", "opt", "opts", "config", "cfg"):
                    found.setdefault(f"{holder}.{name}", []).append(default if default is not None else cst.Name("None"))
            self._assignments = found
        return self._assignments

    # -- after the wrap ---------------------------------------------------------------------

    def _is_model(self, node: cst.CSTNode, model_names: set[str] | None = None) -> bool:
        """Whether ``node`` is a wrapped model or part of one: ``model``, ``base.head``, ``model.module.fc``."""
        spelled = code_of(node)
        for name in model_names if model_names is not None else self.model_names:
            if spelled == name or spelled.startswith((f"{name}.", f"{name}[")):
                return True
        return False

    def _returned_models(self) -> list[Wrap]:
        """``self.model = self.build_model(cfg)`` where ``build_model`` returns the wrapped model.

        The model is then followed after that assignment too, in the caller's function.
        """
        found: list[Wrap] = []
        for wrap in self.wraps:
            function = wrap.scope
            if not isinstance(function, cst.FunctionDef) or wrap.target is None:
                continue
            returns = [r for r in self.analysis.within(function.body, cst.Return) if r.value is not None and code_of(r.value) == wrap.target]
            if not returns:
                continue
            name = function.name.value
            builder = m.Call(func=m.Name(name) | m.Attribute(value=m.Name("self"), attr=m.Name(name)))
            for site in self.analysis.nodes(cst.Call):
                assign = self.analysis.parents.get(site)
                if not self.analysis.matches(site, builder) or not m.matches(assign, m.Assign(targets=[m.AssignTarget(m.Name() | m.Attribute())])):
                    continue
                statement = self.analysis.parents[assign]  # type: ignore[index]
                scope = next(a for a in self.analysis.ancestors(site) if isinstance(a, (cst.FunctionDef, cst.Module)))
                target = code_of(assign.targets[0].target)  # type: ignore[union-attr]
                found.append(Wrap(site, statement, scope, target, None))  # type: ignore[arg-type]
        return found

    def _after(self, wrap: Wrap) -> Iterator[cst.Call]:
        anchor = wrap.statement if wrap.statement is not None else wrap.call
        for call in self.analysis.within(wrap.scope, cst.Call):
            if self.analysis.is_after(call, anchor):
                yield call

    def _after_the_wrap(self, wrap: Wrap) -> None:
        for call in self._after(wrap):
            if self._exclusive(call, wrap.call):
                continue  # `if distributed: model = DDP(model) else: model.to(device)`: never after the wrap
            if any(q.name.startswith("torch.nn.init.") for q in self.analysis.qualified_names(call.func)):
                if call.args and self._is_model(call.args[0].value, wrap.names):
                    self.blockers.append(Hazard(call, "DDP211", (("call", code_of(call)),)))
            elif isinstance(call.func, cst.Attribute):
                receiver = call.func.value
                while m.matches(receiver, DEVICE_MOVE) and not self._casts(receiver):  # type: ignore[arg-type]
                    receiver = receiver.func.value  # type: ignore[attr-defined]
                if not self._is_model(receiver, wrap.names):
                    continue
                method = call.func.attr.value
                if self._casts(call):
                    self.blockers.append(Hazard(call, "DDP210", (("call", code_of(call)),)))
                elif method == "reset_parameters" or OVERWRITES.match(method) or (method == "apply" and self._initialises(call)):
                    self.blockers.append(Hazard(call, "DDP211", (("call", code_of(call)),)))
                elif method in ("to", "cuda") and call.args and not self.is_local_device(call.args[0].value):
                    self.blockers.append(Hazard(call, "DDP212", (("device", code_of(call.args[0].value)),)))

    def _casts(self, call: cst.Call) -> bool:
        if not isinstance(call.func, cst.Attribute):
            return False
        method = call.func.attr.value
        if method in CASTS and not call.args:
            return True
        if method in ("to", "type"):
            return any(
                (arg.keyword is not None and arg.keyword.value == "dtype") or DTYPE.match(code_of(arg.value))
                for arg in call.args
            )
        return False

    def _initialises(self, call: cst.Call) -> bool:
        """``model.apply(fn)`` writes weights unless ``fn`` is a function of this file that never does."""
        function = argument(call, 0, "fn")
        if not isinstance(function, cst.Name):
            return True
        definitions = [f for f in self.analysis.nodes(cst.FunctionDef) if f.name.value == function.value]
        if len(definitions) != 1:
            return True
        body = definitions[0].body
        writes = any(
            OVERWRITES.match(c.func.attr.value) or c.func.attr.value == "reset_parameters"
            for c in self.analysis.within(body, cst.Call)
            if isinstance(c.func, cst.Attribute)
        )
        initialises = any(
            any(q.name.startswith("torch.nn.init.") for q in self.analysis.qualified_names(c.func))
            for c in self.analysis.within(body, cst.Call)
        )
        assigns_data = any(m.matches(t.target, m.Attribute(attr=m.Name("data") | m.Name("weight") | m.Name("bias"))) for t in self.analysis.within(body, cst.AssignTarget))
        return writes or initialises or assigns_data

    def is_local_device(self, device: cst.BaseExpression, depth: int = 0) -> bool:
        """A device every process resolves to its own: "cuda", "cpu", torch.device of those, .cuda(),
        or what a function of this file returns when every value it returns is one of those."""
        if depth > 4:
            return False
        if isinstance(device, cst.SimpleString):
            return device.evaluated_value in ("cuda", "cpu", "cuda:0")  # cuda:0 becomes "cuda" (DDP205)
        if isinstance(device, cst.Integer):
            return device.value == "0"  # .cuda(0) becomes .cuda() (DDP205)
        if isinstance(device, cst.IfExp):
            return self.is_local_device(device.body, depth) and self.is_local_device(device.orelse, depth)
        if isinstance(device, cst.Call):
            if m.matches(device.func, m.Name(names.LOCAL_DEVICE_HELPER)):
                return True
            qualified = {q.name for q in self.analysis.qualified_names(device.func)}
            if "torch.cuda.current_device" in qualified:
                return True
            if "torch.device" in qualified and len(device.args) == 1:
                return self.is_local_device(device.args[0].value, depth)
            # `device = get_device(args.cuda)`, where `get_device` returns torch.device("cuda" if ... else "cpu").
            returned = self._returned_values(device.func)
            return bool(returned) and all(self.is_local_device(value, depth + 1) for value in returned)
        if isinstance(device, (cst.Name, cst.Attribute)):
            values = self.assignments().get(code_of(device), [])
            return bool(values) and all(self.is_local_device(v, depth + 1) for v in values)
        return False

    def _returned_values(self, func: cst.BaseExpression) -> list[cst.BaseExpression]:
        """What the one function of this file that ``func`` (``f``, ``self.f``) calls returns; [] when unknown.

        Every ``return`` must give a value: a bare one, or a function named twice, says nothing.
        """
        if isinstance(func, cst.Attribute) and m.matches(func.value, m.Name("self")):
            name = func.attr.value
        elif isinstance(func, cst.Name):
            name = func.value
        else:
            return []
        definitions = [f for f in self.analysis.nodes(cst.FunctionDef) if f.name.value == name]
        if len(definitions) != 1:
            return []
        function = definitions[0]
        returns = [
            r for r in self.analysis.within(function.body, cst.Return)
            if next(a for a in self.analysis.ancestors(r) if isinstance(a, cst.FunctionDef)) is function
        ]  # fmt: skip
        if not returns or any(r.value is None for r in returns):
            return []
        return [r.value for r in returns]  # type: ignore[misc]

    # -- the model's parameters ------------------------------------------------------------

    def _find_unused_parameters(self, wrap: Wrap) -> None:
        """A model class of this file whose ``__init__`` builds a sub-module its other methods never use."""
        wrapped = argument(wrap.call, 0, "module")
        if wrapped is None:
            return
        built = without_device_move(wrapped)
        if isinstance(built, cst.Name):
            values = self.assignments().get(built.value, [])
            built = without_device_move(values[0]) if len(values) == 1 else built
        if not isinstance(built, cst.Call) or not isinstance(built.func, cst.Name):
            return
        classes = [c for c in self.analysis.nodes(cst.ClassDef) if c.name.value == built.func.value]
        if len(classes) != 1:
            return
        cls = classes[0]
        if not any(self.analysis.matches(b.value, m.Attribute(attr=m.Name("Module")) | m.Name("Module")) for b in cls.bases):
            return  # a parent class of this file or elsewhere may use what this one builds
        methods = [s for s in cls.body.body if isinstance(s, cst.FunctionDef)]
        init = next((s for s in methods if s.name.value == "__init__"), None)
        if init is None or "getattr" in code_of(cls) or ".children()" in code_of(cls) or ".modules()" in code_of(cls):
            return
        used = {
            a.attr.value
            for method in methods
            if method is not init
            for a in self.analysis.within(method, cst.Attribute)
            if m.matches(a.value, m.Name("self"))
        }
        for assign in self.analysis.within(init, cst.Assign):
            target = assign.targets[0].target
            if not m.matches(target, m.Attribute(value=m.Name("self"))) or not isinstance(assign.value, cst.Call):
                continue
            attribute = target.attr.value  # type: ignore[attr-defined]
            qualified = {q.name for q in self.analysis.qualified_names(assign.value.func)}
            is_module = any(q.startswith("torch.nn.") and q.rsplit(".", 1)[-1][:1].isupper() for q in qualified)
            if not is_module or attribute in used:
                continue
            # Any other mention in __init__ (freezing it, say) may explain why it goes unused.
            mentions = [a for a in self.analysis.within(init, cst.Attribute) if m.matches(a, m.Attribute(value=m.Name("self"), attr=m.Name(attribute)))]
            if len(mentions) == 1:
                self.unused_parameters.setdefault(wrap.call, f"self.{attribute}")
                self.findings.append(Hazard(target, "DDP215", (("module", f"self.{attribute}"), ("model", cls.name.value))))

    def _optimizers(self) -> None:
        """An optimizer over a module no DDP wrap holds: its gradients are never averaged."""
        for call in self.analysis.nodes(cst.Call):
            qualified = {q.name for q in self.analysis.qualified_names(call.func)}
            if not any(q.startswith("torch.optim.") and q.rsplit(".", 1)[-1][:1].isupper() and "lr_scheduler" not in q for q in qualified):
                continue
            for parameters in self.analysis.within(call, cst.Call):
                if not m.matches(parameters, m.Call(func=m.Attribute(attr=m.Name("parameters") | m.Name("named_parameters")))):
                    continue
                owner = parameters.func.value  # type: ignore[attr-defined]
                if self._is_model(owner):
                    continue
                root = code_of(owner).split(".")[0] if not code_of(owner).startswith("self.") else ".".join(code_of(owner).split(".")[:2])
                built = self.assignments().get(root, [])
                if built and all(self._builds_module(without_device_move(v)) for v in built):
                    self.blockers.append(Hazard(owner, "DDP223", (("module", code_of(owner)),)))

    def _builds_module(self, value: cst.BaseExpression) -> bool:
        """A call that builds a fresh module: a torch.nn or torchvision model class, or a model class of this file."""
        if not isinstance(value, cst.Call):
            return False
        qualified = {q.name for q in self.analysis.qualified_names(value.func)}
        if any(q.startswith(("torch.nn.", "torchvision.models.")) and "functional" not in q for q in qualified):
            return True
        classes = {c.name.value for c in self.analysis.nodes(cst.ClassDef)}
        return isinstance(value.func, cst.Name) and value.func.value in classes

    # -- the training step -----------------------------------------------------------------

    def _training_steps(self) -> None:
        backwards = [c for c in self.analysis.nodes(cst.Call) if m.matches(c, _BACKWARD)]
        by_loop: dict[cst.CSTNode, list[cst.Call]] = {}
        for backward in backwards:
            loop = self._loop(backward)
            if loop is None:
                continue
            by_loop.setdefault(loop, []).append(backward)
            self._skippable(backward, loop)
        for loop, found in by_loop.items():
            forwards = [
                c for c in self.analysis.within(loop, cst.Call)
                if code_of(c.func) in self.model_names or code_of(c.func).removeprefix("self.") in self.model_names
            ]  # fmt: skip
            for backward in found:
                # Count what one pass through the loop body can run together with this backward.
                together = [b for b in found if not self._exclusive(b, backward)]
                runs = [f for f in forwards if not self._exclusive(f, backward)]
                if runs and len(together) > len(runs):
                    values = (("backwards", str(len(together))), ("forwards", str(len(runs))))
                    self.blockers.append(Hazard(together[len(runs)], "DDP221", values))
                    break
        for call in self.analysis.nodes(cst.Call):
            if self.analysis.matches(call, call_to({"torch.autograd.grad"})):
                create_graph = argument(call, 99, "create_graph")
                if create_graph is not None and not m.matches(create_graph, m.Name("False")):
                    self.blockers.append(Hazard(call, "DDP222"))

    def _exclusive(self, first: cst.CSTNode, second: cst.CSTNode) -> bool:
        """Whether two nodes sit in different branches of one ``if``, so one pass runs at most one."""
        branches: dict[cst.CSTNode, cst.CSTNode] = {}
        child: cst.CSTNode = first
        for ancestor in self.analysis.ancestors(first):
            if isinstance(ancestor, cst.If):
                branches[ancestor] = child
            child = ancestor
        child = second
        for ancestor in self.analysis.ancestors(second):
            if isinstance(ancestor, cst.If) and ancestor in branches and branches[ancestor] is not child:
                return branches[ancestor] is not ancestor.test and child is not ancestor.test
            child = ancestor
        return False

    def _loop(self, node: cst.CSTNode) -> cst.For | cst.While | None:
        for ancestor in self.analysis.ancestors(node):
            if isinstance(ancestor, _LOOPS):
                return ancestor
            if isinstance(ancestor, _SCOPES):
                return None
        return None

    def _skippable(self, backward: cst.Call, loop: cst.For | cst.While) -> None:
        """A ``continue`` on a per-batch condition, or a ``try`` that swallows errors, before backward."""
        dependent = per_process_names(self.analysis, loop)
        # A `continue` before the backward skips it; a `break` anywhere leaves the loop while
        # the other processes go on to their next backward.
        skips = [
            (skip, "this `continue` skips it on some batches")
            for skip in self.analysis.within(loop.body, cst.Continue)
            if self.analysis.is_before(skip, backward)
        ] + [(stop, "this `break` leaves the loop on some batches") for stop in self.analysis.within(loop.body, cst.Break)]
        start = loop.iter if isinstance(loop, cst.For) else loop.test
        for skip, how in skips:
            if self._loop(skip) is not loop:
                continue
            tests = [a.test for a in self.analysis.ancestors(skip) if isinstance(a, cst.If) and self.analysis.is_after(a, start)]
            if any(self.analysis.reads(test) & dependent for test in tests):
                self.blockers.append(Hazard(skip, "DDP220", (("how", how),)))
        for ancestor in self.analysis.ancestors(backward):
            if ancestor is loop:
                break
            if isinstance(ancestor, cst.Try) and not all(_reraises(handler) for handler in ancestor.handlers):
                self.blockers.append(Hazard(ancestor, "DDP220", (("how", "an error caught here skips it on one process"),)))

    # -- devices ----------------------------------------------------------------------------

    def _devices(self) -> None:
        reported: set[str] = set()
        blocked = {hazard.node for hazard in self.blockers}
        wraps = {wrap.call for wrap in self.wraps}
        for call in self.analysis.nodes(cst.Call):
            if call in blocked or (isinstance(call.func, cst.Attribute) and call.func.value in wraps):
                continue  # a hazard already, or the wrap's own move, which the conversion drops
            # `.to(args.device)`: one finding per device value, at its first use.
            if m.matches(call, m.Call(func=m.Attribute(attr=m.Name("to")), args=[m.Arg(m.Name() | m.Attribute(), keyword=None), m.ZeroOrMore()])):
                device = call.args[0].value
                spelled = code_of(device)
                if GPU_OR_DEVICE.search(spelled.rsplit(".", 1)[-1]) and spelled not in reported and not self.is_local_device(device):
                    reported.add(spelled)
                    self.findings.append(Hazard(call, "DDP213", (("device", spelled),)))
            if self.analysis.matches(call, call_to({"torch.cuda.set_device"})) and call.args:
                device = call.args[0].value
                if not isinstance(device, cst.Integer) and not LOCAL_RANK_WORDS.search(code_of(device)):
                    self.findings.append(Hazard(call, "DDP213", (("device", code_of(device)),)))
            elif m.matches(call, m.Call(func=m.Attribute(attr=m.Name("cuda")), args=[m.Arg(keyword=None)])):
                device = call.args[0].value
                spelled = code_of(device)
                if spelled in reported or isinstance(device, cst.Integer) or LOCAL_RANK_WORDS.search(spelled) or self.is_local_device(device):
                    continue
                reported.add(spelled)
                self.findings.append(Hazard(call, "DDP213", (("device", spelled),)))


def per_process_names(analysis: Analysis, loop: cst.For | cst.While) -> set[str]:
    """Names (and dotted attributes) whose value can differ between processes at the same step of ``loop``.

    The batch differs, and so does whatever is computed from it. A value the
    loop body binds is the same on every process only when every binding of it
    there reads no call and nothing that differs, and runs on every process at
    every step: a step counter (``i = i + 1``, ``i += k``) or a schedule
    (``lr = lr * 0.5``). ``x += loss.item()`` or an increment under ``if loss > 0:``
    differs. Anything else the body binds (a loop target, ``with ... as``) differs.
    """
    body = loop.body
    differ: set[str] = set()
    if isinstance(loop, cst.For):
        targets = [n.value for n in analysis.within(loop.target, cst.Name)]
        counter = m.matches(loop.iter, m.Call(func=m.Name("enumerate") | m.Name("range")))
        if counter and m.matches(loop.iter, m.Call(func=m.Name("range"))):
            targets = []
        elif counter and isinstance(loop.target, cst.Tuple) and targets:
            targets = targets[1:]  # `for i, batch in enumerate(loader)`: i is the same everywhere
        differ |= set(targets)
    # What each binding in the body assigns: `x = value` and `x += value` (which reads x too).
    bindings: dict[str, list[tuple[cst.CSTNode, cst.BaseExpression]]] = {}
    for assign in analysis.within(body, cst.Assign):
        for target in assign.targets:
            _bind(analysis, target.target, assign, assign.value, bindings, differ)
    for aug in analysis.within(body, cst.AugAssign):
        _bind(analysis, aug.target, aug, aug.value, bindings, differ)
    for inner in [*analysis.within(body, cst.For), *analysis.within(body, cst.CompFor)]:
        differ |= {n.value for n in analysis.within(inner.target, cst.Name)}
    for item in analysis.within(body, cst.AsName):
        differ |= {n.value for n in analysis.within(item.name, cst.Name)}
    for walrus in analysis.within(body, cst.NamedExpr):
        differ |= {n.value for n in analysis.within(walrus.target, cst.Name)}
    changed = True
    while changed:
        changed = False
        for name, assigned in bindings.items():
            if name in differ:
                continue
            if any(_differs(analysis, loop, node, value, differ) for node, value in assigned):
                differ.add(name)
                changed = True
    return differ


def _bind(
    analysis: Analysis,
    target: cst.BaseExpression,
    node: cst.CSTNode,
    value: cst.BaseExpression,
    bindings: dict[str, list[tuple[cst.CSTNode, cst.BaseExpression]]],
    differ: set[str],
) -> None:
    if isinstance(target, (cst.Name, cst.Attribute)):
        bindings.setdefault(code_of(target), []).append((node, value))
    elif isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            _bind(analysis, element.value, node, value, bindings, differ)
    else:
        differ |= {n.value for n in analysis.within(target, cst.Name)}  # `losses[i] = ...`: the container


def _differs(analysis: Analysis, loop: cst.For | cst.While, node: cst.CSTNode, value: cst.BaseExpression, differ: set[str]) -> bool:
    """Whether this binding can give processes different values, or run on some and not others."""
    if analysis.within(value, cst.Call) or analysis.reads(value) & differ:
        return True
    for ancestor in analysis.ancestors(node):
        if ancestor is loop:
            break
        if isinstance(ancestor, (cst.For, cst.While, cst.Try, cst.FunctionDef, cst.Lambda)):
            return True
        if isinstance(ancestor, cst.If) and (analysis.within(ancestor.test, cst.Call) or analysis.reads(ancestor.test) & differ):
            return True
    # A `continue` on a value that differs, earlier in the step, skips the binding on some processes.
    for skip in analysis.within(loop.body, cst.Continue):
        if not analysis.is_before(skip, node) or _enclosing_loop(analysis, skip) is not loop:
            continue
        tests = [a.test for a in analysis.ancestors(skip) if isinstance(a, cst.If) and analysis.index[a] > analysis.index[loop]]
        if any(analysis.within(test, cst.Call) or analysis.reads(test) & differ for test in tests):
            return True
    return False


def _enclosing_loop(analysis: Analysis, node: cst.CSTNode) -> cst.CSTNode | None:
    for ancestor in analysis.ancestors(node):
        if isinstance(ancestor, _LOOPS):
            return ancestor
        if isinstance(ancestor, _SCOPES):
            return None
    return None


def _reraises(handler: cst.ExceptHandler) -> bool:
    """A handler with a top-level ``raise``: the error still stops this process, and the run."""
    return any(isinstance(s, cst.SimpleStatementLine) and isinstance(s.body[0], cst.Raise) for s in handler.body.body)  # type: ignore[union-attr]


def _combine(*parts: bool | None) -> bool | None:
    if any(part is None for part in parts):
        return None
    return any(parts)
