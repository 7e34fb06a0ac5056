"""Training losses normalised by the whole batch, which DDP computes on each process's share.

Under DataParallel the loss is computed once, on the outputs gathered from
every GPU: it sees the whole batch. Under DDP each process computes it on its
own share and DDP averages the gradients. That average is the whole batch's
gradient when the loss is a plain mean over samples and the shares are equal.
Two common losses are no such mean:

- cross-entropy or NLL with class weights and ``reduction="mean"`` divides by
  the sum of the weights of the batch's targets, and each process now divides
  by the sum of its own share's;
- contrastive cross-entropy with in-batch negatives (labels
  ``torch.arange(n)`` over a similarity matrix of two batches of embeddings)
  scores each sample against the others of the batch, and each process now
  sees only its own share as negatives.

A loss counts when it reaches a ``backward()``: through the names assigned
before it in the same function, sums and scalings, criterion objects
(``criterion = nn.CrossEntropyLoss(weight=w)`` ... ``criterion(out, y)``),
and the functions or criterion classes of the script that return it. A loss
only evaluated never trains, so it is not reported. ``convert`` reports these
at conversion time and ``check`` in a script that already runs DDP, both from
``Analysis.batch_normalised_losses``.
"""

from __future__ import annotations

import ast
import re

from collections.abc import Iterator
from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst
import libcst.matchers as m

from . import names
from .syntax import DEVICE_MOVE, argument, call_to, code_of, script_functions
from .script import inside_helper
from .lifecycle import Hazard

if TYPE_CHECKING:
    from .module import Analysis

WEIGHTED_CODE = "DDP319"
CONTRASTIVE_CODE = "DDP320"
_BACKWARD = m.Call(func=m.Attribute(attr=m.Name("backward")))
_SCALER_SCALE = m.Call(func=m.Attribute(attr=m.Name("scale")), args=[m.Arg(keyword=None)])
# Calls that keep what a tensor holds and where its rows are: `.cuda()`, `.long()`, `.contiguous()`.
_SAME_VALUES = m.Call(func=m.Attribute(attr=m.Name("to") | m.Name("cuda") | m.Name("long") | m.Name("type_as") | m.Name("contiguous") | m.Name("float")))
_TRANSPOSED = m.Attribute(attr=m.Name("T") | m.Name("mT")) | m.Call(
    func=m.Attribute(attr=m.Name("t") | m.Name("transpose")), args=[m.ZeroOrMore(m.Arg(keyword=None))]
)
_SCALINGS = m.Multiply() | m.Divide() | m.Subtract()
# How deep the loss is followed through names, functions and criterion classes.
_MAX_DEPTH = 8


def batch_normalised_losses(analysis: Analysis) -> tuple[Hazard, ...]:
    """Each loss call that reaches backward and is normalised by the batch a process sees, once per call and code."""
    return _Losses(analysis).hazards


class _Losses:
    def __init__(self, analysis: Analysis) -> None:
        self.analysis = analysis
        self.found: dict[tuple[cst.Call, str], Hazard] = {}
        for backward in analysis.nodes(cst.Call):
            if not m.matches(backward, _BACKWARD) or inside_helper(analysis, backward):
                continue
            loss = backward.func.value  # type: ignore[attr-defined]
            if m.matches(loss, _SCALER_SCALE):
                loss = loss.args[0].value  # type: ignore[attr-defined]
            for call, built in self._loss_calls(loss, backward, 0):
                self._judge(call, built)
        self.hazards = tuple(sorted(self.found.values(), key=lambda h: analysis.index[h.node]))

    # -- which loss calls produce what backward receives -------------------------------------

    def _loss_calls(self, node: cst.CSTNode, before: cst.CSTNode, depth: int) -> Iterator[tuple[cst.Call, cst.Call]]:
        """Each cross-entropy or NLL call ``node`` is computed from, with the torch call that says how it reduces.

        That call is the functional call itself, or the constructor of the criterion object called.
        """
        if depth > _MAX_DEPTH:
            return
        if isinstance(node, cst.Call):
            built = self._built_by(node)
            if built:
                yield from ((node, b) for b in built)
                return
            returned = self._returned_by(node)
            if returned is not None:
                for value in returned:
                    yield from self._loss_calls(value, value, depth + 1)
                return
            if isinstance(node.func, cst.Attribute):
                yield from self._loss_calls(node.func.value, before, depth + 1)  # `criterion(out, y).mean()`
            for arg in node.args:
                yield from self._loss_calls(arg.value, before, depth + 1)  # `sum([l1, l2])`, `torch.stack(...)`
        elif isinstance(node, cst.BinaryOperation):
            yield from self._loss_calls(node.left, before, depth + 1)
            yield from self._loss_calls(node.right, before, depth + 1)
        elif isinstance(node, cst.UnaryOperation):
            yield from self._loss_calls(node.expression, before, depth + 1)
        elif isinstance(node, (cst.List, cst.Tuple)):
            for element in node.elements:
                yield from self._loss_calls(element.value, before, depth + 1)
        elif isinstance(node, cst.Name):
            for value, assigned in self._values_before(node.value, before):
                yield from self._loss_calls(value, assigned, depth + 1)

    def _built_by(self, call: cst.Call) -> list[cst.Call]:
        """``F.cross_entropy(...)`` itself; for ``criterion(out, y)``, the loss constructors ``criterion`` is bound to."""
        if self.analysis.matches(call, call_to(names.CROSS_ENTROPY | names.NLL)):
            return [call]
        if self._is_loss_class(call.func):
            return [call.func]  # type: ignore[list-item]  # `nn.CrossEntropyLoss(weight=w)(out, y)`
        if isinstance(call.func, (cst.Name, cst.Attribute)):
            return self._criteria.get(code_of(call.func), [])
        return []

    def _is_loss_class(self, node: cst.CSTNode) -> bool:
        return self.analysis.matches(node, call_to(names.CROSS_ENTROPY_LOSS | names.NLL_LOSS))

    @cached_property
    def _criteria(self) -> dict[str, list[cst.Call]]:
        """``criterion`` or ``self.criterion`` -> the loss constructors assigned to it, through ``.cuda()`` and ``x if c else y``."""
        found: dict[str, list[cst.Call]] = {}
        for assign in self.analysis.nodes(cst.Assign):
            built = [c for c in self._constructors(assign.value) if self._is_loss_class(c)]
            if not built:
                continue
            for target in assign.targets:
                if isinstance(target.target, (cst.Name, cst.Attribute)):
                    found.setdefault(code_of(target.target), []).extend(built)
        return found

    def _constructors(self, value: cst.BaseExpression) -> list[cst.Call]:
        if isinstance(value, cst.IfExp):
            return self._constructors(value.body) + self._constructors(value.orelse)
        if m.matches(value, DEVICE_MOVE):
            return self._constructors(value.func.value)  # type: ignore[attr-defined]
        return [value] if isinstance(value, cst.Call) else []

    def _returned_by(self, call: cst.Call) -> list[cst.BaseExpression] | None:
        """What a function of the script, or the ``forward`` of a criterion class of the script, returns; ``None`` when neither."""
        spelled = code_of(call.func)
        function = self._functions.get(spelled)
        if function is None:
            built = [c for c in self._instances.get(spelled, []) if code_of(c.func) in self._forwards]
            if isinstance(call.func, cst.Call) and code_of(call.func.func) in self._forwards:
                built = [call.func]  # `ContrastiveLoss(0.1)(a, b)`
            if not built:
                return None
            function = self._forwards[code_of(built[0].func)]
        returns = [r for r in self.analysis.within(function.body, cst.Return) if self._owner(r) is function]
        return [r.value for r in returns if r.value is not None]

    @cached_property
    def _functions(self) -> dict[str, cst.FunctionDef]:
        return script_functions(self.analysis.module, self.analysis)

    @cached_property
    def _forwards(self) -> dict[str, cst.FunctionDef]:
        """Class name -> its ``forward``, for the classes of this file that have one."""
        found: dict[str, cst.FunctionDef] = {}
        for cls in self.analysis.nodes(cst.ClassDef):
            for member in cls.body.body:
                if isinstance(member, cst.FunctionDef) and member.name.value == "forward":
                    found[cls.name.value] = member
        return found

    @cached_property
    def _instances(self) -> dict[str, list[cst.Call]]:
        """``criterion`` -> the calls of classes of this file assigned to it: ``criterion = NTXentLoss(0.5)``."""
        found: dict[str, list[cst.Call]] = {}
        for assign in self.analysis.nodes(cst.Assign):
            built = [c for c in self._constructors(assign.value) if code_of(c.func) in self._forwards]
            for target in assign.targets:
                if built and isinstance(target.target, (cst.Name, cst.Attribute)):
                    found.setdefault(code_of(target.target), []).extend(built)
        return found

    def _owner(self, node: cst.CSTNode) -> cst.CSTNode:
        return next((a for a in self.analysis.ancestors(node) if isinstance(a, (cst.FunctionDef, cst.Lambda))), self.analysis.module)

    def _values_before(self, name: str, node: cst.CSTNode) -> list[tuple[cst.BaseExpression, cst.CSTNode]]:
        """What ``name`` may hold at ``node``: the last plain assignment in its function before it, and the ``+=`` since."""
        scope = self._owner(node)
        statements = sorted(
            [*self.analysis.within(scope, cst.Assign), *self.analysis.within(scope, cst.AugAssign)], key=lambda s: self.analysis.index[s]
        )
        values: list[tuple[cst.BaseExpression, cst.CSTNode]] = []
        for statement in statements:
            if not self.analysis.is_before(statement, node) or self._owner(statement) is not scope:
                continue
            if isinstance(statement, cst.Assign) and any(m.matches(t.target, m.Name(name)) for t in statement.targets):
                values = [(statement.value, statement)]
            elif isinstance(statement, cst.AugAssign) and m.matches(statement.target, m.Name(name)):
                values.append((statement.value, statement))
        return values

    def _last_value(self, node: cst.BaseExpression, before: cst.CSTNode) -> tuple[cst.BaseExpression, cst.CSTNode] | None:
        if not isinstance(node, cst.Name):
            return None
        values = self._values_before(node.value, before)
        return values[0] if len(values) == 1 else None

    # -- what makes a loss depend on the batch a process sees --------------------------------

    def _judge(self, call: cst.Call, built: cst.Call) -> None:
        functional = built is call
        weight = argument(built, 2 if functional else 0, "weight")
        logits, labels = argument(call, 0, "input"), argument(call, 1, "target")
        if weight is not None and not m.matches(weight, m.Name("None")) and self._averages(built, functional):
            target = code_of(labels) if isinstance(labels, (cst.Name, cst.Attribute)) else "y"
            self._report(call, WEIGHTED_CODE, loss=code_of(call), weight=code_of(weight), target=target)
        if not self.analysis.matches(built, call_to(names.CROSS_ENTROPY | names.CROSS_ENTROPY_LOSS)):
            return
        if logits is not None and labels is not None and self._is_arange(labels, call, 0) and self._is_similarity(logits, call, 0):
            self._report(call, CONTRASTIVE_CODE, loss=code_of(call), labels=code_of(labels))

    def _report(self, call: cst.Call, code: str, **values: str) -> None:
        self.found.setdefault((call, code), Hazard(call, code, tuple(values.items())))

    def _averages(self, built: cst.Call, functional: bool) -> bool:
        """``reduction="mean"``, spelled or by default; a reduction the file does not spell as a literal is unknown."""
        offset = 2 if functional else 0
        if m.matches(argument(built, offset + 1, "size_average"), m.Name("False")):
            return False
        if m.matches(argument(built, offset + 3, "reduce"), m.Name("False")):
            return False
        reduction = argument(built, offset + 4, "reduction")
        return reduction is None or (isinstance(reduction, cst.SimpleString) and reduction.evaluated_value == "mean")

    def _is_arange(self, node: cst.BaseExpression, before: cst.CSTNode, depth: int) -> bool:
        """``torch.arange(n)``, moved or cast, directly or through the name it was bound to."""
        if depth > _MAX_DEPTH:
            return False
        if self.analysis.matches(node, call_to(names.ARANGE)):
            return True
        if m.matches(node, _SAME_VALUES):
            return self._is_arange(node.func.value, before, depth + 1)  # type: ignore[attr-defined]
        found = self._last_value(node, before)
        return found is not None and self._is_arange(found[0], found[1], depth + 1)

    def _is_similarity(self, node: cst.BaseExpression, before: cst.CSTNode, depth: int) -> bool:
        """Scores of every row of one batch of embeddings against every row of another: ``a @ b.T / temperature``."""
        if depth > _MAX_DEPTH:
            return False
        if isinstance(node, cst.BinaryOperation):
            if isinstance(node.operator, cst.MatrixMultiply):
                return m.matches(node.right, _TRANSPOSED)
            if m.matches(node.operator, _SCALINGS):  # a temperature or `logit_scale`, either side
                return self._is_similarity(node.left, before, depth + 1) or self._is_similarity(node.right, before, depth + 1)
            return False
        if isinstance(node, cst.UnaryOperation):
            return self._is_similarity(node.expression, before, depth + 1)
        if isinstance(node, cst.Call):
            if self.analysis.matches(node, call_to(names.MATRIX_PRODUCTS)):
                second = argument(node, 1, "other") or argument(node, 1, "mat2")
                return second is not None and m.matches(second, _TRANSPOSED)
            if self.analysis.matches(node, call_to(names.EINSUM)):
                return _pairs_rows(node)
            if m.matches(node.func, m.Attribute(attr=m.Name("mm") | m.Name("matmul"))) and not self._is_torch(node.func):
                return len(node.args) == 1 and m.matches(node.args[0].value, _TRANSPOSED)  # `a.mm(b.t())`
            if m.matches(node, _SAME_VALUES | _TRANSPOSED):
                return self._is_similarity(node.func.value, before, depth + 1)  # type: ignore[attr-defined]
            return False
        if m.matches(node, _TRANSPOSED):
            return self._is_similarity(node.value, before, depth + 1)  # type: ignore[attr-defined]  # CLIP's `logits.T`
        found = self._last_value(node, before)
        return found is not None and self._is_similarity(found[0], found[1], depth + 1)

    def _is_torch(self, func: cst.Attribute) -> bool:
        return any(q.name.startswith("torch.") for q in self.analysis.qualified_names(func))


def _pairs_rows(einsum: cst.Call) -> bool:
    """``torch.einsum("nc,mc->nm", a, b)``: a matrix whose rows index the first operand and columns the second."""
    equation = argument(einsum, 0, "equation")
    if not isinstance(equation, cst.SimpleString) or not isinstance(equation.evaluated_value, str):
        return False
    spelled = equation.evaluated_value.replace(" ", "")
    if "->" not in spelled:
        return False
    inputs, output = spelled.split("->")
    operands = inputs.split(",")
    if len(operands) != 2 or len(output) != 2:
        return False
    rows, columns = output
    first, second = operands
    return rows in first and rows not in second and columns in second and columns not in first


# -- losses that pair the samples of a batch, found in source text -----------------------------------

# Definitions that compute a loss, by their own name or their module's: `ContrastiveLoss`, `triplet_loss`,
# `losses/HardMining.py`. A model's forward runs on each replica's share under DataParallel as under DDP;
# only the loss, computed on the gathered outputs, saw the whole batch.
_LOSS_NAME = re.compile(r"loss|criterion|objective|triplet|contrastive|mining|n_?t_?xent|info_?nce", re.IGNORECASE)
# Operations whose result pairs two sets of rows: a matrix product, a comparison, a distance.
_PAIRING_METHODS = frozenset({"matmul", "mm", "addmm", "addmm_", "eq", "ne", "ge", "gt", "le", "lt"})
_DISTANCES = frozenset({"cdist", "pdist"})


def pairing_losses(tree: ast.Module, module_name: str) -> list[tuple[str, int, range]]:
    """The loss definitions of ``tree`` that pair every sample of a batch with every other: each name, the line
    where it pairs, and the lines of its definition.

    A similarity or distance matrix of the batch against itself (``inputs @ inputs.t()``, ``torch.cdist(x, x)``)
    or a mask of equal labels (``targets.eq(targets.t())``): metric-learning and contrastive losses mine their
    pairs from the batch they are given. An operand that reads ``self`` (a classifier's weights,
    ``x @ self.centers.t()``) pairs samples with parameters, not with each other.
    """
    whole_module = bool(_LOSS_NAME.search(module_name.rpartition(".")[2]))
    functions = {f.name: f for f in tree.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
    found: dict[int, tuple[str, range]] = {}
    for definition in tree.body:
        if isinstance(definition, ast.ClassDef):
            methods = [f for f in definition.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name != "__init__"]
            computes = whole_module and any(f.name in {"forward", "__call__"} for f in methods)
            named = [definition.name] * len(methods) if computes or _LOSS_NAME.search(definition.name) else [f.name for f in methods]
            candidates = [(name, f) for name, f in zip(named, methods) if name == definition.name or _LOSS_NAME.search(name)]
        elif isinstance(definition, (ast.FunctionDef, ast.AsyncFunctionDef)) and _LOSS_NAME.search(definition.name):
            candidates = [(definition.name, definition)]
        else:
            continue
        for name, function in candidates:
            line = _pairing_line(function, functions, 2)
            if line is not None:
                found.setdefault(line, (name, range(definition.lineno, (definition.end_lineno or definition.lineno) + 1)))
    return [(name, line, span) for line, (name, span) in sorted(found.items())]


def referenced(tree: ast.Module, name: str, outside: range = range(0)) -> bool:
    """Whether ``tree`` builds or calls ``name`` (``TripletLoss(margin)``, ``triplet_loss(a, b)``) or lists it in a
    factory's table (``{"triplet": TripletLoss}``), outside the lines ``outside`` of its own definition: a loss a
    package only re-exports, or a trainer only tests for (``isinstance(c, TripletLoss)``), is not one the program
    computes."""

    def names_it(node: ast.AST) -> bool:
        return (isinstance(node, ast.Name) and node.id == name) or (isinstance(node, ast.Attribute) and node.attr == name)

    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in outside:
            continue
        if isinstance(node, ast.Call) and names_it(node.func):
            return True
        if isinstance(node, ast.Dict) and any(names_it(v) for v in node.values):
            return True
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)) and any(names_it(e) for e in node.elts) and not _tests_a_type(tree, node):
            return True
        if isinstance(node, ast.Assign) and names_it(node.value):
            return True  # `Loss = TripletLoss`, then `Loss(...)`
    return False


def _tests_a_type(tree: ast.Module, node: ast.AST) -> bool:
    """Whether ``node`` is the class tuple of an ``isinstance``/``issubclass`` call."""
    return any(
        isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in {"isinstance", "issubclass"} and node in call.args
        for call in ast.walk(tree)
    )


def _pairing_line(function: ast.FunctionDef | ast.AsyncFunctionDef, functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef], depth: int) -> int | None:
    """Where ``function`` pairs samples, itself or through a function of its module handed its own parameters
    (``euclidean_dist(feats, feats)``), not values it builds (``create_window(self.size, channel)``)."""
    pairing = next((node for node in ast.walk(function) if _pairs_samples(node)), None)
    if pairing is not None:
        return pairing.lineno  # type: ignore[attr-defined]
    if depth == 0:
        return None
    parameters = {a.arg for a in (*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs)} - {"self"}
    for call in ast.walk(function):
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name) or call.func.id not in functions:
            continue
        handed = [*call.args, *(k.value for k in call.keywords)]
        if any(isinstance(a, ast.Name) and a.id in parameters for a in handed):
            line = _pairing_line(functions[call.func.id], functions, depth - 1)
            if line is not None:
                return line
    return None


def _pairs_samples(node: ast.AST) -> bool:
    """``a @ b.t()``, ``torch.mm(a, b.T)``, ``a.eq(b.t())``, ``a == b.t()`` or ``torch.cdist(a, b)``, where no
    operand reads ``self``."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
        operands = [node.left, node.right]
    elif isinstance(node, ast.Compare) and len(node.comparators) == 1:
        operands = [node.left, node.comparators[0]]
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _DISTANCES:
        return bool(node.args) and not any(_reads_self(a) for a in node.args)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _PAIRING_METHODS:
        receiver = node.func.value
        # `torch.mm(a, b)` names a module; `a.mm(b)` is a method of the tensor `a`.
        operands = [*node.args] if isinstance(receiver, ast.Name) and receiver.id in {"torch", "th"} else [receiver, *node.args]
    else:
        return False
    operands = [o for o in operands if not isinstance(o, ast.Constant)]
    return len(operands) >= 2 and any(_transposed(o) for o in operands) and not any(_reads_self(o) for o in operands)


def _transposed(node: ast.expr) -> bool:
    """``x.t()``, ``x.T``, ``x.transpose(0, 1)`` or ``x.permute(1, 0)``: a matrix with its rows as columns."""
    if isinstance(node, ast.Attribute):
        return node.attr in {"T", "mT"}
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return False
    if node.func.attr == "t" and not node.args:
        return True
    constants = [a.value for a in node.args if isinstance(a, ast.Constant)]
    return node.func.attr in {"transpose", "permute"} and sorted(constants) == [0, 1] and len(node.args) == 2


def _reads_self(node: ast.expr) -> bool:
    return any(isinstance(n, ast.Name) and n.id == "self" for n in ast.walk(node))
