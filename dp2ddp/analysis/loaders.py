"""Which DataLoader trains: the question convert and check both ask of every loader."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import libcst as cst
import libcst.matchers as m

from . import names
from .syntax import argument, call_to, code_of, resolves_to

if TYPE_CHECKING:
    from .tree import Holder, Tree

EVALUATION_NAME = re.compile(r"val|test|eval", re.IGNORECASE)
# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, ...)
BATCH_SIZE, SHUFFLE, SAMPLER, BATCH_SAMPLER, WORKERS = 1, 2, 3, 4, 5
# Keywords by which a sampler of the script's own takes the process's rank: it splits the data itself.
SPLITS_ITSELF = frozenset({"rank", "num_replicas", "world_size", "local_rank"})
# Names a sampler class reads when it picks this process's share itself.
RANK_NAMES = frozenset({"rank", "get_rank", "local_rank", "world_size", "get_world_size", "num_replicas"})


def is_training_loader(call: cst.Call, reference: cst.BaseExpression | None, only_loader: bool) -> bool:
    """A loader named for training or shuffled, or the script's only loader: ``check`` asks the same."""
    name = code_of(reference) if reference is not None else ""
    if "train" in name.lower():
        return True
    if EVALUATION_NAME.search(name):
        return False
    shuffle = argument(call, SHUFFLE, "shuffle")
    if shuffle is not None and not m.matches(shuffle, m.Name("False") | m.Name("None")):
        return True
    # A sampler or batch sampler of its own, unless it only reads the data in order, draws training batches.
    for position, keyword in ((SAMPLER, "sampler"), (BATCH_SAMPLER, "batch_sampler")):
        sampler = argument(call, position, keyword)
        if sampler is not None and not m.matches(sampler, m.Name("None")) and "sequential" not in code_of(sampler).lower():
            return True
    return only_loader


def in_evaluation_function(tree: Tree, call: cst.Call) -> bool:
    """Whether the loader is built in a function named for evaluation (``val``, ``test``, ``evaluate``) that
    neither runs ``backward()`` nor steps an optimizer: a shuffled loader there draws a random subset to evaluate.

    Or in a function that runs its model under ``torch.no_grad()``, trains nothing, and keeps the loader to
    itself: ``inception_score(imgs)`` builds a loader over the images it is given and scores them all.
    """
    function = next((a for a in tree.ancestors(call) if isinstance(a, cst.FunctionDef)), None)
    if function is None:
        return False
    trains = m.Call(func=m.Attribute(attr=m.Name("backward") | m.Name("step")))
    if tree.findall_in(function.body, trains):
        return False
    if EVALUATION_NAME.search(function.name.value):
        return True
    return _scores_locally(tree, function, call)


def _scores_locally(tree: Tree, function: cst.FunctionDef, call: cst.Call) -> bool:
    """``loader = DataLoader(...)`` bound to a local name that the function only iterates, in a function with
    a ``torch.no_grad()`` block: it is neither returned, stored, nor handed to another call."""
    assign = tree.parents.get(call)
    if not m.matches(assign, m.Assign(targets=[m.AssignTarget(m.Name())])):
        return False
    name = assign.targets[0].target.value  # type: ignore[union-attr]
    no_grad = [w for w in tree.findall_in(function.body, m.With()) if any(tree.matches(i.item, call_to(names.NO_GRAD)) for i in w.items)]  # type: ignore[attr-defined]
    if not no_grad:
        return False
    for read in tree.findall_in(function.body, m.Name(name)):
        parent = tree.parents.get(read)
        if read is assign.targets[0].target:  # type: ignore[union-attr]
            continue
        if isinstance(parent, cst.For) and parent.iter is read:
            continue
        if isinstance(parent, cst.Arg) and m.matches(tree.parents.get(parent), m.Call(func=m.Name("enumerate") | m.Name("len") | m.Name("tqdm") | m.Name("iter"))):
            continue
        return False
    return True


def split_where_used(tree: Tree, holders: list[Holder]) -> bool:
    """Whether a read of the loader ``holders`` spell is handed to ``split_loader(...)``: the caller takes its share."""
    splitting = m.Call(func=m.Name(names.SPLIT_LOADER_HELPER))
    return any(
        isinstance(arg := tree.parents.get(read), cst.Arg) and m.matches(tree.parents.get(arg), splitting)
        for holder in holders for read in holder.reads
    )  # fmt: skip


def splits_itself(built: cst.Call) -> bool:
    """A sampler that is told the process's rank, or is distributed by name, yields one process's share already."""
    keywords = {a.keyword.value for a in built.args if a.keyword is not None}
    return bool(keywords & SPLITS_ITSELF) or "distributed" in code_of(built.func).lower()


def bindings_reaching(tree: Tree, name: cst.Name) -> list[cst.Assign | None]:
    """The bindings of ``name`` that can hold when it is read: not those written after it outside any loop around both."""
    assigns = tree.bindings(name) or []
    loops = {id(a) for a in tree.ancestors(name) if isinstance(a, (cst.For, cst.While))}

    def reaches(assign: cst.Assign | None) -> bool:
        if assign is None or tree.index[assign] < tree.index[name]:
            return True
        return any(id(a) in loops for a in tree.ancestors(assign))

    return [a for a in assigns if reaches(a)]


def is_placeholder(tree: Tree, value: cst.BaseExpression) -> bool:
    """``None``, or a name every binding of which is ``= None``: a loader given no sampler at all."""
    if not isinstance(value, cst.Name):
        return False
    if value.value == "None":
        return True
    assigns = bindings_reaching(tree, value)
    return bool(assigns) and all(a is not None and m.matches(a.value, m.Name("None")) for a in assigns)


def sampler_built_at(tree: Tree, given: cst.BaseExpression) -> cst.Call | None:
    """The call that builds the sampler: ``given`` itself, or the one assignment of the name ``given``."""
    if isinstance(given, cst.Call):
        return given
    if not isinstance(given, cst.Name):
        return None
    bindings = tree.bindings(given)
    if not bindings or len(bindings) != 1 or bindings[0] is None or len(bindings[0].targets) != 1:
        return None
    value = bindings[0].value
    return value if isinstance(value, cst.Call) else None


def unsplit_sampler(tree: Tree, given: cst.BaseExpression) -> str | None:
    """The class of a sampler known to draw from the whole dataset on every process, or ``None``.

    Known: torch's RandomSampler, SequentialSampler, WeightedRandomSampler and
    SubsetRandomSampler, a BatchSampler over one of them, and a Sampler
    subclass defined in this file that never reads a rank or world size. A
    sampler that splits itself (``splits_itself``), one whose arguments read
    the rank (``SubsetRandomSampler(indices[rank::world_size])``) and one built
    elsewhere are not known, and unknown is not reported.
    """
    built = sampler_built_at(tree, given)
    if built is None or splits_itself(built) or _reads_rank(tree, built):
        return None
    if tree.matches(built, call_to(names.PLAIN_SAMPLERS)):
        return code_of(built.func)
    if tree.matches(built, call_to(names.BATCH_SAMPLER_CLASSES)):
        inner = argument(built, 0, "sampler")
        return code_of(built.func) if inner is not None and unsplit_sampler(tree, inner) is not None else None
    if isinstance(built.func, cst.Name) and _sampler_class(tree, built.func.value, depth=3):
        # A class that draws from a sampler it is given (`GroupedBatchSampler(DistributedSampler(data), ...)`)
        # splits as that sampler does.
        inner = [a.value for a in built.args if "sampler" in code_of(a.value).lower()]
        if all(unsplit_sampler(tree, sampler) is not None for sampler in inner):
            return built.func.value
    return None


def _reads_rank(tree: Tree, built: cst.Call) -> bool:
    """Whether the sampler's arguments, or the values of names they read, mention the process's rank."""
    for arg in built.args:
        read = tree.reads(arg.value)
        if any(RANK_NAMES & set(name.split(".")) for name in read):
            return True
        for name in tree.within(arg.value, cst.Name):
            for assign in bindings_reaching(tree, name):
                if assign is not None and any(RANK_NAMES & set(n.split(".")) for n in tree.reads(assign.value)):
                    return True
    return False


def _sampler_class(tree: Tree, name: str, depth: int) -> bool:
    """A class of this file that subclasses torch's Sampler (or one of this file's) and never reads a rank."""
    classes = [c for c in tree.nodes(cst.ClassDef) if c.name.value == name]
    if len(classes) != 1 or depth == 0 or "distributed" in name.lower():
        return False
    defined = classes[0]
    if {n.value for n in tree.within(defined, cst.Name)} & RANK_NAMES:
        return False  # it picks this process's share itself
    bases = [b.value for b in defined.bases]
    return any(
        tree.matches(base, resolves_to(names.SAMPLER_BASES))
        or (isinstance(base, cst.Name) and _sampler_class(tree, base.value, depth - 1))
        for base in bases
    )
