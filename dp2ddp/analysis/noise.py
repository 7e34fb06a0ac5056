"""Noise a training loop draws for its batch in the main process: a GAN's ``z``, mixup's permutation.

Under DataParallel one process draws ``torch.randn(batch_size, nz)`` for the whole
batch. Converted, every process starts from rank 0's random state (so that a split
drawn at start-up is one split), and each draws the same rows for its own samples:
the processes feed their generators the same noise. The lines found here are given a
random stream of each process's own.

Only draws sized by the batch count: a draw without a batch dimension (a scalar mixup
weight, a random crop size, a sequence length) was one draw for the whole batch under
DataParallel too, and may decide how many steps a process takes, so it stays alike on
every process. Draws inside a loop over ``parameters()`` (noise added to weights) stay
alike as well: the replicas must stay equal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst
import libcst.matchers as m

from dp2ddp.analysis.syntax import code_of
from dp2ddp.analysis.training_batches import RANDOM_DRAWS

if TYPE_CHECKING:
    from dp2ddp.analysis.module import Analysis

# torch functions that draw a tensor of the size their arguments give: those that make synthetic batches, and masks.
TORCH_DRAWS = RANDOM_DRAWS | {f"torch.{name}" for name in ("bernoulli", "multinomial", "poisson")}
# numpy.random functions that are not draws.
_NUMPY_STATE = frozenset(
    f"numpy.random.{name}"
    for name in ("seed", "get_state", "set_state", "RandomState", "default_rng", "Generator", "SeedSequence", "PCG64", "MT19937")
)
# In-place draws on a tensor (`torch.FloatTensor(b, nz).normal_(0, 1)`) and draws from a torch.distributions object.
_METHOD_DRAWS = frozenset(
    {"normal_", "uniform_", "bernoulli_", "random_", "exponential_", "cauchy_", "log_normal_", "geometric_", "sample", "rsample", "sample_n"}
)
_BACKWARD = m.Call(func=m.Attribute(attr=m.Name("backward")))
_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)


def batch_noise_lines(analysis: Analysis, batch_values: set[str]) -> list[cst.SimpleStatementLine]:
    """The lines of this file's training steps that draw noise sized by the batch, in source order.

    A training step is the outermost loop around a ``backward()`` in its function, or the
    function itself when no loop there holds it (``def train_step(self, real)``). A draw is
    sized by the batch when it reads a loader's batch value (``batch_values``), the rows of
    a batch (``x.size(0)``, ``x.shape[0]``, ``len(x)``) or a name bound to either in the same
    function, or when it is shaped like a batch (``randn_like(x)``, ``torch.rand(x.size())``).
    The batches are what the step's loops and ``next()`` fetch, and a step function's parameters.
    """
    steps: list[cst.CSTNode] = []
    for backward in analysis.findall(_BACKWARD):
        step = None
        for ancestor in analysis.ancestors(backward):
            if isinstance(ancestor, _SCOPES):
                step = step or (ancestor if isinstance(ancestor, cst.FunctionDef) else None)
                break
            if isinstance(ancestor, (cst.For, cst.While)):
                step = ancestor
        if step is not None and not any(step is s for s in steps):
            steps.append(step)
    # Functions of this file that draw and train nothing: `def sample_z(n): return torch.randn(n, nz)`.
    drawing = {
        f.name.value for f in analysis.nodes(cst.FunctionDef)
        if isinstance(_scope_of(analysis, f), cst.Module) and not analysis.findall_in(f, _BACKWARD)
        and any(_is_draw(analysis, c, set()) for c in analysis.within(f, cst.Call))
    }  # fmt: skip
    found: dict[int, cst.SimpleStatementLine] = {}
    for step in steps:
        scope = step if isinstance(step, cst.FunctionDef) else _scope_of(analysis, step)
        assigns = [a for a in analysis.within(scope, cst.Assign) if _scope_of(analysis, a) is scope]
        batch = analysis.flows_from(_batches(analysis, step), assigns)
        rows = set(batch_values) | {
            code_of(t.target) for a in assigns if _reads_rows(analysis, a.value, batch_values, batch) for t in a.targets
        }
        body = step.body
        for call in analysis.within(body, cst.Call):
            if not _is_draw(analysis, call, drawing) or _scope_of(analysis, call) is not scope or _over_parameters(analysis, call, step):
                continue
            # A drawing function of the file, or of another module, handed a batch shapes its draw from it:
            # `noise_for(images)`, `provider.random_point_dropout(points)`, `mixup.aug(target, input_)`.
            own = m.matches(call.func, m.Name()) and call.func.value in drawing  # type: ignore[attr-defined]
            handed = (own or _foreign_draw(analysis, call)) and analysis.reads(call) & batch
            if not (handed or _reads_rows(analysis, call, rows, batch) or _shaped_like(analysis, call, batch)):
                continue
            line = next((a for a in analysis.ancestors(call) if isinstance(a, cst.SimpleStatementLine)), None)
            if line is not None:
                found[analysis.index[line]] = line
    return [found[index] for index in sorted(found)]


def _foreign_draw(analysis: Analysis, call: cst.Call) -> bool:
    """A call of another project module's drawing function, or of a drawing method on an object built from one of
    its classes in this function or module (``mixup = utils.MixUp_AUG()``, then ``mixup.aug(...)``)."""
    drawing = analysis.role.drawing_calls
    if not drawing:
        return False
    if {q.name for q in analysis.qualified_names(call.func)} & drawing or code_of(call.func) in drawing:
        return True
    if not m.matches(call.func, m.Attribute(value=m.Name(), attr=m.Name())):
        return False
    receiver, method = call.func.value, call.func.attr.value  # type: ignore[attr-defined]
    for built in analysis.bindings(receiver) or []:
        if built is not None and isinstance(built.value, cst.Call):
            spelled = {q.name for q in analysis.qualified_names(built.value.func)} | {code_of(built.value.func)}
            if any(f"{cls}.{method}" in drawing for cls in spelled):
                return True
    return False


def _is_draw(analysis: Analysis, call: cst.Call, drawing: set[str]) -> bool:
    if m.matches(call.func, m.Name()) and call.func.value in drawing:  # type: ignore[attr-defined]
        return True
    if _foreign_draw(analysis, call):
        return True
    qualified = {q.name for q in analysis.qualified_names(call.func)}
    if qualified & TORCH_DRAWS or any(q.startswith("numpy.random.") and q not in _NUMPY_STATE for q in qualified):
        return True
    # `random.sample(population, k)` is Python's, not a tensor draw.
    return m.matches(call.func, m.Attribute(attr=m.Name())) and call.func.attr.value in _METHOD_DRAWS and not any(  # type: ignore[attr-defined]
        q.startswith("random.") for q in qualified
    )


def _reads_rows(analysis: Analysis, node: cst.CSTNode, rows: set[str], batch: set[str]) -> bool:
    """Whether ``node`` reads a batch value or a name in ``rows``, or counts a batch's rows: ``x.size(0)``, ``len(x)``."""
    if any(code_of(n) in rows for kind in (cst.Name, cst.Attribute) for n in analysis.within(node, kind)):
        return True
    for counted in analysis.findall_in(node, _ROWS):
        if isinstance(counted, cst.Call) and m.matches(counted.func, m.Name("len")):
            of: cst.CSTNode = counted.args[0].value
        elif isinstance(counted, cst.Call):
            of = counted.func.value  # type: ignore[attr-defined]
        else:
            of = counted.value.value if isinstance(counted.value, cst.Attribute) else counted.value.func.value  # type: ignore[attr-defined]
        if analysis.reads(of) & batch:
            return True
    return False


_ROWS = (
    m.Call(func=m.Attribute(attr=m.Name("size")), args=[m.Arg(m.Integer("0"))])  # x.size(0)
    | m.Subscript(value=m.Attribute(attr=m.Name("shape")), slice=[m.SubscriptElement(m.Index(m.Integer("0")))])  # x.shape[0]
    | m.Subscript(value=m.Call(func=m.Attribute(attr=m.Name("size")), args=[]), slice=[m.SubscriptElement(m.Index(m.Integer("0")))])
    | m.Call(func=m.Name("len"), args=[m.Arg()])  # len(x)
)
_WHOLE_SHAPE = m.Call(func=m.Attribute(attr=m.Name("size")), args=[]) | m.Attribute(attr=m.Name("shape"))


def _shaped_like(analysis: Analysis, call: cst.Call, batch: set[str]) -> bool:
    """``torch.randn_like(x)``, ``torch.rand(x.size())``, ``x.new(x.shape).normal_()``, of a batch value ``x``."""
    qualified = {q.name for q in analysis.qualified_names(call.func)}
    if any(q.endswith("_like") for q in qualified) and call.args and analysis.reads(call.args[0].value) & batch:
        return True
    return any(analysis.reads(shape) & batch for shape in analysis.findall_in(call, _WHOLE_SHAPE))


def _batches(analysis: Analysis, step: cst.CSTNode) -> set[str]:
    """What a training step draws its batches into: for-loop targets, ``next(...)`` fetches, a step function's parameters."""
    found: set[str] = set()
    if isinstance(step, cst.FunctionDef):
        found |= {p.name.value for p in (*step.params.posonly_params, *step.params.params)} - {"self", "cls"}
    loops = [step] if isinstance(step, cst.For) else []
    for inner in [*loops, *analysis.within(step.body, cst.For)]:  # type: ignore[attr-defined]
        if not m.matches(inner.iter, m.Call(func=m.Name("range"))):  # `for epoch in range(n)` counts
            found |= {n.value for n in analysis.within(inner.target, cst.Name)}
    for assign in analysis.within(step.body, cst.Assign):  # type: ignore[attr-defined]
        if m.matches(assign.value, m.Call(func=m.Name("next"))):
            found |= {n.value for t in assign.targets for n in analysis.within(t.target, cst.Name)}
    return found


def _over_parameters(analysis: Analysis, call: cst.Call, step: cst.CSTNode) -> bool:
    """Inside a loop over a model's parameters: noise for the weights, which must stay alike on every process."""
    for ancestor in analysis.ancestors(call):
        if ancestor is step:
            return False
        if isinstance(ancestor, cst.For) and analysis.findall_in(
            ancestor.iter, m.Call(func=m.Attribute(attr=m.Name("parameters") | m.Name("named_parameters")))
        ):
            return True
    return False


def _scope_of(analysis: Analysis, node: cst.CSTNode) -> cst.CSTNode:
    return next((a for a in analysis.ancestors(node) if isinstance(a, _SCOPES)), analysis.module)
