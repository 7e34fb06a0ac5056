"""A loader's batch divided by the world size, where the division loses samples or leaves a process none.

Keeping DataParallel's global batch under DDP divides it: each process loads
``B // world_size``. Convert writes that division and warns where it goes wrong
(a literal the common process counts do not divide, an option whose default is
below them); check finds the same division in any DDP script, converted or
written by hand. Both read it here, so they cannot disagree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst
import libcst.matchers as m

from .loaders import BATCH_SAMPLER, BATCH_SIZE, SAMPLER
from .options import integer_option_default
from .syntax import argument, call_to, code_of

if TYPE_CHECKING:
    from .module import Analysis

# Process counts a divided batch is checked against.
COMMON_WORLD_SIZES = (2, 4, 8)

# `dist.get_world_size()`, a helper of that name, or a value named for it (`world_size`, `args.world_size`).
_WORLD_SIZE_CALL = m.Call(func=m.Attribute(attr=m.Name("get_world_size")) | m.Name("get_world_size"))
_WORLD_SIZE_NAME = m.Name("world_size") | m.Attribute(attr=m.Name("world_size"))
WORLD_SIZE = _WORLD_SIZE_CALL | _WORLD_SIZE_NAME
_FLOOR_DIVIDED = m.BinaryOperation(operator=m.FloorDivide(), right=WORLD_SIZE)
# `int(B / world_size)`, as some scripts spell the floor.
_INT_DIVIDED = m.Call(func=m.Name("int"), args=[m.Arg(m.BinaryOperation(operator=m.Divide(), right=WORLD_SIZE))])
# `max(1, B // world_size)`: a share floored at one sample.
_FLOORED = m.Call(func=m.Name("max"), args=[m.Arg(m.Integer("1")), m.Arg(_FLOOR_DIVIDED | _INT_DIVIDED)])


@dataclass(frozen=True)
class DividedBatch:
    """A loader's batch ``B // world_size`` that loses samples, or is 0, on some common process counts.

    ``total`` is ``B`` as written: a literal (``size``, the counts it does not divide
    in ``misses``) or a command-line option whose default (``default``) is below the
    counts in ``below``; ``floored`` where the share is ``max(1, ...)``.
    """

    total: cst.BaseExpression
    size: int | None = None
    misses: tuple[int, ...] = ()
    default: int | None = None
    below: tuple[int, ...] = ()
    floored: bool = False


def divided_batch(analysis: Analysis, batch: cst.BaseExpression) -> DividedBatch | None:
    """The hazard of a loader's ``batch_size`` value that divides a batch by the world size; None where there is none.

    The value is the loader's argument itself, or a name bound once to the division
    (``batch_size = args.batch_size // world_size``). A batch the analysis cannot read
    (a config value, a computed number) has no hazard it can establish.
    """
    if isinstance(batch, cst.Name):
        assigns = analysis.bindings(batch)
        if assigns and len(assigns) == 1 and assigns[0] is not None and len(assigns[0].targets) == 1:
            batch = assigns[0].value
    floored = m.matches(batch, _FLOORED)
    divided = batch.args[1].value if floored else batch  # type: ignore[attr-defined]
    if m.matches(divided, _FLOOR_DIVIDED):
        total = divided.left  # type: ignore[attr-defined]
    elif m.matches(divided, _INT_DIVIDED):
        total = divided.args[0].value.left  # type: ignore[attr-defined]
    else:
        return None
    size = literal_size(analysis, total)
    if size is not None:
        misses = tuple(w for w in COMMON_WORLD_SIZES if size % w)
        below = tuple(w for w in COMMON_WORLD_SIZES if w > size)
        return DividedBatch(total, size=size, misses=misses, below=below, floored=floored) if misses else None
    default = integer_option_default(analysis, total)
    if default is not None and default < max(COMMON_WORLD_SIZES):
        return DividedBatch(total, default=default, below=tuple(w for w in COMMON_WORLD_SIZES if w > default), floored=floored)
    return None


def literal_size(analysis: Analysis, value: cst.BaseExpression) -> int | None:
    """``value`` when it is an integer literal, or a name bound once, at module level, to one."""
    if isinstance(value, cst.Integer):
        return int(value.evaluated_value)
    if not isinstance(value, cst.Name):
        return None
    assigns = analysis.bindings(value)
    if not assigns or len(assigns) != 1 or assigns[0] is None:
        return None
    assign = assigns[0]
    line = analysis.parents.get(assign)
    if not isinstance(line, cst.SimpleStatementLine) or not isinstance(analysis.parents.get(line), cst.Module):
        return None
    return int(assign.value.evaluated_value) if isinstance(assign.value, cst.Integer) else None


# A batch size or loader worker count, by the last part of its name: what DataParallel scripts scale by the GPU count.
SCALED_BY_GPUS = re.compile(r"batch|^bs$|workers", re.IGNORECASE)
GPU_COUNT = re.compile(r"^(n_?gpus?|num_?gpus?|ngpus?|gpu_?count|n_?devices|num_?devices)$", re.IGNORECASE)
GPU_LIST = re.compile(r"gpu|device", re.IGNORECASE)
_DEVICE_COUNT = call_to({"torch.cuda.device_count"})


@dataclass(frozen=True)
class GpuCountScaling:
    """``args.batch_size *= n_gpu``, ``workers = 4 * torch.cuda.device_count()``: a DataParallel habit.

    ``count`` is the factor that counts GPUs; ``exact`` where it is provably
    ``torch.cuda.device_count()`` (directly, or a name every assignment of which binds
    it), not a count the script may set otherwise (``n_gpu = 1`` under a launcher).
    """

    node: cst.Assign | cst.AugAssign
    targets: tuple[cst.BaseExpression, ...]
    scaled: str
    factors: tuple[cst.BaseExpression, ...]
    count: cst.BaseExpression
    exact: bool


def gpu_count_scalings(analysis: Analysis) -> tuple[GpuCountScaling, ...]:
    """Every assignment that multiplies a batch size or a worker count by a GPU count."""
    found = []
    for node in analysis.nodes(cst.AugAssign) + analysis.nodes(cst.Assign):  # type: ignore[operator]
        targets = (node.target,) if isinstance(node, cst.AugAssign) else tuple(t.target for t in node.targets)
        scaled = [code_of(t) for t in targets if SCALED_BY_GPUS.search(code_of(t).rsplit(".", 1)[-1])]
        if not scaled:
            continue
        if isinstance(node, cst.AugAssign):
            factors = (node.value,) if isinstance(node.operator, cst.MultiplyAssign) else ()
        else:
            factors = tuple(multiplied(node.value))
        count = next((f for f in factors if counts_gpus(analysis, f)), None)
        if count is not None:
            found.append(GpuCountScaling(node, targets, scaled[0], factors, count, is_device_count(analysis, count)))
    return tuple(found)


def multiplied(value: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The factors of a product: ``[a, b, c]`` for ``a * b * c``."""
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Multiply):
        return multiplied(value.left) + multiplied(value.right)
    return [value]


def counts_gpus(analysis: Analysis, value: cst.BaseExpression) -> bool:
    """``torch.cuda.device_count()``, ``n_gpu``, ``len(args.gpu_ids)``, ``max(1, n_gpu)``."""
    if analysis.matches(value, _DEVICE_COUNT):
        return True
    if isinstance(value, cst.Call) and m.matches(value.func, m.Name("max") | m.Name("len")):
        return any(counts_gpus(analysis, a.value) or GPU_LIST.search(code_of(a.value)) for a in value.args)
    return isinstance(value, (cst.Name, cst.Attribute)) and bool(GPU_COUNT.search(code_of(value).rsplit(".", 1)[-1]))


def is_device_count(analysis: Analysis, value: cst.BaseExpression) -> bool:
    """``torch.cuda.device_count()``, or a name or attribute every assignment of which binds it."""
    if analysis.matches(value, _DEVICE_COUNT):
        return True
    if not isinstance(value, (cst.Name, cst.Attribute)):
        return False
    spelled = code_of(value)
    assigned = [
        a for a in analysis.nodes(cst.Assign) if any(code_of(t.target) == spelled for t in a.targets)
    ] + [a for a in analysis.nodes(cst.AugAssign) if code_of(a.target) == spelled]  # fmt: skip
    if isinstance(value, cst.Name):
        bindings = analysis.bindings(value)
        if not bindings or any(b is None for b in bindings):
            return False  # a parameter, an import or a loop target: any value
    return bool(assigned) and all(isinstance(a, cst.Assign) and analysis.matches(a.value, _DEVICE_COUNT) for a in assigned)


# -- steps per epoch counted in the per-process batch ------------------------------------------

# Names that count a data set's samples: `num_train`, `n_samples`, `train_size`, `dataset_len`.
SAMPLE_COUNT = re.compile(r"(num|n)_?(train|samples?|examples?|images?|data)|train_?(size|len|num)|dataset_?(size|len)", re.IGNORECASE)
_WORLD_SIZE_ASKED = m.Call(func=m.Attribute(attr=m.Name("get_world_size")) | m.Name("get_world_size"))


def steps_per_epoch(
    analysis: Analysis, division: cst.BinaryOperation, loader: cst.Call, reference: cst.BaseExpression | None
) -> str | None:
    """Whether ``division`` counts ``loader``'s steps per epoch in its batch: ``len(train_set) // args.batch_size``.

    ``"samples"`` where the count is provably the loader's samples (the length of its
    dataset, or a count that sizes its dataset or sampler), ``"unclear"`` where it only
    may be (a length of something else, or a name that says it counts samples), ``None``
    where it is no such division, or already asks the world size. Where each process
    loads that batch from its share, such a count is world_size times the steps a
    process takes: convert scales it (DDP333) or warns (DDP334), and check reports it (DDP534).
    """
    batch = argument(loader, BATCH_SIZE, "batch_size")
    if batch is None or code_of(batch) != code_of(division.right) or analysis.findall_in(division.right, _WORLD_SIZE_ASKED):
        return None
    counted = division.left
    datasets = {code_of(d) for d in (argument(loader, 0, "dataset"),) if d is not None}
    if reference is not None:
        datasets.add(f"{code_of(reference)}.dataset")
    is_length = m.matches(counted, m.Call(func=m.Name("len"), args=[m.Arg()]))
    if is_length and code_of(counted.args[0].value) in datasets:  # type: ignore[attr-defined]
        return "samples"
    if _sizes_the_data(analysis, counted, loader, ((0, "dataset"), (SAMPLER, "sampler"), (BATCH_SAMPLER, "batch_sampler"))):
        return "samples"
    if is_length or SAMPLE_COUNT.search(code_of(counted).rsplit(".", 1)[-1]):
        return "unclear"
    return None


def _sizes_the_data(
    analysis: Analysis, counted: cst.BaseExpression, loader: cst.Call, arguments: tuple[tuple[int, str], ...]
) -> bool:
    """``train_size`` named as a sample count, read where the loader's dataset or sampler is built.

    ``dataset = TensorDataset(torch.randn(train_size, 4), ...)`` or
    ``sampler = GroupSampler(train_size, args.batch_size)``: the count sizes what the loader
    draws from, so dividing it by the batch counts the loader's steps.
    """
    if not isinstance(counted, (cst.Name, cst.Attribute)) or not SAMPLE_COUNT.search(code_of(counted).rsplit(".", 1)[-1]):
        return False
    built: list[cst.CSTNode] = []
    for position, keyword in arguments:
        given = argument(loader, position, keyword)
        if given is None:
            continue
        built.append(given)
        bindings = analysis.bindings(given) if isinstance(given, cst.Name) else None
        if bindings and len(bindings) == 1 and bindings[0] is not None:
            built.append(bindings[0].value)
    return any(code_of(counted) in analysis.reads(node) for node in built)
