"""Give the training DataLoader a DistributedSampler and call ``set_epoch`` every epoch.

``DataLoader(train_set, batch_size=B, shuffle=S)`` becomes
``DataLoader(train_set, batch_size=B // dist.get_world_size(),
sampler=DistributedSampler(train_set, shuffle=S))``, so each process loads a
disjoint shard and the global batch stays ``B``. ``loader.sampler.set_epoch(epoch)``
goes first in the loop that runs epochs, even when that loop only calls a
function which iterates the loader.
"""

from __future__ import annotations

import argparse
import ast
import re
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar, TypeVar

import libcst as cst
import libcst.matchers as m
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor
from libcst.metadata import ParentNodeProvider, QualifiedNameSource, ScopeProvider

from dp2ddp.analysis import names
from dp2ddp.analysis.loaders import (
    BATCH_SAMPLER,
    BATCH_SIZE,
    EVALUATION_NAME,
    SAMPLER,
    SHUFFLE,
    WORKERS,
    bindings_reaching,
    is_placeholder,
    in_evaluation_function,
    is_training_loader,
    sampler_built_at,
    split_where_used,
    splits_itself,
)
from dp2ddp.analysis.losses import pairing_losses, referenced
from dp2ddp.analysis.noise import batch_noise_lines
from dp2ddp.analysis.training_batches import RANDOM_DRAWS, TrainingBatches
from dp2ddp.analysis.module import Analysis, Holder
from dp2ddp.analysis.roles import Site
from dp2ddp.analysis.batches import COMMON_WORLD_SIZES, divided_batch, gpu_count_scalings, literal_size
from dp2ddp.analysis.options import integer_option_default
from ._base import Dp2ddpCodemod, add_helper, import_torch_distributed, keyword_arg, prepend_statements, with_argument
from dp2ddp.analysis.syntax import argument, call_to, code_of, main_guard, parameter_for, resolves_to
from ._global_batch import add_batch_args, runs_after_setup, times_world_size

RestartT = TypeVar("RestartT", cst.ExceptHandler, cst.While)
# Values a DataParallel script scales by its GPU count, and the names it counts GPUs by.
SHARDED_SAMPLER_SOURCE = f'''
class {names.SHARDED_SAMPLER_HELPER}(torch.utils.data.Sampler):
    """This process's share of ``sampler``: items rank, rank + W, ... of one sequence every process draws alike.

    For each pass the sampler draws with torch's, Python's and NumPy's generators (and its
    own ``generator``) seeded by ``seed + epoch``, the same on every process, so the
    processes agree on the sequence and a new pass draws a new one. The sequence is padded
    from its start to a multiple of the world size, as DistributedSampler pads: a process
    with one batch fewer would leave the others waiting in the last step. With
    ``split_batches`` the items are batches, and each process takes its share of every
    batch, so the batches and the global batch size stay the sampler's. Given the global
    ``batch_size`` the sequence is cut into, each process takes a contiguous part of every
    batch, as DataParallel scattered it, so a sampler that groups items (K images of each
    identity) keeps its groups. A loader built anew for every pass names its ``site``: its
    samplers go on counting that site's passes, where a new one would start at epoch 0. A
    sampler with no length (an endless one) is drawn as it goes, each process its share.
    """

    # Passes drawn so far at each site whose loader is built anew for every pass.
    passes = {{}}

    def __init__(self, sampler, seed=0, split_batches=False, batch_size=None, site=None):
        self.sampler = sampler
        self.seed = seed
        self.split_batches = split_batches
        self.batch_size = batch_size
        self.site = site
        self.epoch = self.passes.get(site, 0)

    def __getattr__(self, name):
        # What the script asks of its sampler (state_dict, load_state_dict, ...) is the wrapped sampler's.
        if name.startswith("__") or name == "sampler":
            raise AttributeError(name)
        return getattr(self.sampler, name)

    def set_epoch(self, epoch):
        self.epoch = epoch
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def __len__(self):
        # A sampler with no length (an endless one) has none here either: len() raises TypeError, as it did.
        if self.split_batches:
            return len(self.sampler)
        return -(-len(self.sampler) // dist.get_world_size())

    def __iter__(self):
        rank, world_size = dist.get_rank(), dist.get_world_size()
        items = self._draw(self.seed + self.epoch)
        # The next pass draws a new sequence, also where no epoch loop calls set_epoch.
        self.epoch += 1
        if self.site is not None:
            self.passes[self.site] = self.epoch
        if self.split_batches:
            for batch in items:
                batch = list(batch)
                yield batch[rank::world_size] or [batch[rank % len(batch)]]
            return
        # Each process takes its part of every global batch (or item rank of every W items). The
        # last part is padded with the sequence's first items to a multiple of the world size.
        size = world_size if self.batch_size is None or self.batch_size % world_size else self.batch_size
        first, batch = [], []
        for item in items:
            if len(first) < world_size:
                first.append(item)
            batch.append(item)
            if len(batch) == size:
                yield from batch[rank * size // world_size : (rank + 1) * size // world_size]
                batch = []
        if batch:
            batch += (first * world_size)[: -len(batch) % world_size]
            share = len(batch) // world_size
            yield from batch[rank * share : (rank + 1) * share]

    def _draw(self, seed):
        """The pass's sequence, drawn with generators seeded by ``seed``; the script's own are kept aside.

        A sampler with a length is drawn whole at once. One without (an endless sampler) is
        drawn an item at a time, its generators' states kept between draws.
        """
        numpy = sys.modules.get("numpy")  # a sampler can only draw from NumPy if the script imported it
        own = getattr(self.sampler, "generator", None)
        own = own if isinstance(own, torch.Generator) else None
        whole = hasattr(self.sampler, "__len__")
        items, drawing = None, None
        while True:
            kept = (random.getstate(), numpy.random.get_state() if numpy else None, own.get_state() if own else None)
            with torch.random.fork_rng(devices=[]):
                try:
                    if drawing is None:
                        torch.default_generator.manual_seed(seed)
                        random.seed(seed)
                        if numpy is not None:
                            numpy.random.seed(seed % 2**32)
                        if own is not None:
                            own.manual_seed(seed)
                        items = iter(self.sampler)
                    else:
                        torch.set_rng_state(drawing[0])
                        random.setstate(drawing[1])
                        if numpy is not None:
                            numpy.random.set_state(drawing[2])
                        if own is not None:
                            own.set_state(drawing[3])
                    try:
                        drawn = list(items) if whole else [next(items)]
                    except StopIteration:
                        drawn = []
                    drawing = (
                        torch.get_rng_state(),
                        random.getstate(),
                        numpy.random.get_state() if numpy else None,
                        own.get_state() if own else None,
                    )
                finally:
                    random.setstate(kept[0])
                    if numpy is not None:
                        numpy.random.set_state(kept[1])
                    if own is not None:
                        own.set_state(kept[2])
            yield from drawn
            if whole or not drawn:
                return
'''
SPLIT_LOADER_SOURCE = f'''
def {names.SPLIT_LOADER_HELPER}(loader, keep_batch=False):
    """This process's share of ``loader``, built by a function that also builds loaders for evaluation.

    The loader is built again over its dataset, with its own arguments, and its sampler (or
    batch sampler) split by ShardedSampler, so the evaluation loaders the function builds stay
    whole. Each process loads its part of every batch, so the global batch stays the loader's,
    unless ``keep_batch``.
    """
    if type(loader) is not torch.utils.data.DataLoader or isinstance(loader.dataset, torch.utils.data.IterableDataset):
        raise TypeError(f"expected a DataLoader over a map-style dataset, got {{type(loader).__name__}}")
    rebuilt = ("dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "drop_last")
    kept = {{
        name: getattr(loader, name) for name in inspect.signature(torch.utils.data.DataLoader).parameters
        if name not in rebuilt and hasattr(loader, name)
    }}
    if kept.get("num_workers") and kept.get("generator") is None:
        # The workers' seeds come from the generator: each process draws its own augmentations.
        kept["generator"] = torch.Generator().manual_seed((torch.initial_seed() + dist.get_rank()) % 2**63)
    if loader.batch_size is None and loader.batch_sampler is not None:
        sampler = {names.SHARDED_SAMPLER_HELPER}(loader.batch_sampler, split_batches=True)
        return torch.utils.data.DataLoader(loader.dataset, batch_sampler=sampler, **kept)
    batch_size = loader.batch_size
    if batch_size is None or keep_batch:
        sampler = {names.SHARDED_SAMPLER_HELPER}(loader.sampler)
    else:
        sampler = {names.SHARDED_SAMPLER_HELPER}(loader.sampler, batch_size=batch_size)
        batch_size = max(1, batch_size // dist.get_world_size())
    return torch.utils.data.DataLoader(
        loader.dataset, batch_size=batch_size, sampler=sampler, drop_last=loader.drop_last, **kept
    )
'''
WORKER_INIT_SOURCE = f'''
class {names.WORKER_INIT_HELPER}:
    """Runs the script's ``worker_init_fn``, then mixes this process's rank into what it seeded.

    A worker_init_fn that seeds from a fixed seed and the worker id would give the workers of
    every process the same augmentations, for different samples. Rank 0 draws as the script did.
    """

    def __init__(self, function, rank):
        self.function = function
        self.rank = rank

    def __call__(self, worker_id):
        if self.function is not None:
            self.function(worker_id)
        if self.rank:
            random.seed(random.getrandbits(64) + self.rank)
            numpy = sys.modules.get("numpy")
            if numpy is not None:
                numpy.random.seed((int(numpy.random.randint(0, 2**31)) + self.rank) % 2**32)
            # A draw from the seeded stream, not the seed plus the rank: with `seed + worker_id` seeds, that
            # would give worker 1 of rank 0 and worker 0 of rank 1 the same stream.
            torch.manual_seed((int(torch.randint(0, 2**62, ())) + self.rank) % 2**63)
'''
# What `random` and `numpy.random` offer that draws nothing from the shared state.
NOT_DRAWS = frozenset({"seed", "getstate", "setstate", "get_state", "set_state", "Random", "RandomState", "default_rng", "Generator", "SeedSequence"})
DRAWN_PER_PROCESS_SOURCE = f'''
class {names.DRAWN_PER_PROCESS_HELPER}(torch.utils.data.Dataset):
    """The dataset, drawing its random augmentations from a stream of this process's own.

    With no loader workers, the main process draws the augmentations, from the random state
    every process shares (so that a split made at start-up is one split): every process would
    draw the same crops and flips for different samples. In a loader worker, which draws from
    a seed of its own, the dataset is read as it is. Each item is drawn here from Python's,
    NumPy's and torch's generators seeded by the rank; the shared state is put back after it, so
    the rest of the script draws as before, alike on every process.
    """

    def __init__(self, dataset, rank):
        self.dataset = dataset
        seed = (torch.initial_seed() + 1 + rank) % 2**32
        self._random = random.Random(seed).getstate()
        self._torch = torch.Generator().manual_seed(seed).get_state()
        numpy = sys.modules.get("numpy")
        self._numpy = numpy.random.RandomState(seed).get_state() if numpy is not None else None

    def __len__(self):
        return len(self.dataset)

    def __getattr__(self, name):
        # `loader.dataset.classes`: what the script reads of its dataset.
        if name == "dataset":
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def __getitem__(self, index):
        if torch.utils.data.get_worker_info() is not None:
            return self.dataset[index]  # a loader worker draws from its own seed, which the rank is mixed into
        numpy = sys.modules.get("numpy") if self._numpy is not None else None
        shared = random.getstate(), torch.get_rng_state(), numpy.random.get_state() if numpy is not None else None
        random.setstate(self._random)
        torch.set_rng_state(self._torch)
        if numpy is not None:
            numpy.random.set_state(self._numpy)
        try:
            return self.dataset[index]
        finally:
            self._random, self._torch = random.getstate(), torch.get_rng_state()
            random.setstate(shared[0])
            torch.set_rng_state(shared[1])
            if numpy is not None:
                self._numpy = numpy.random.get_state()
                numpy.random.set_state(shared[2])
'''
PER_PROCESS_RANDOM_SOURCE = f'''
@contextlib.contextmanager
def {names.PER_PROCESS_RANDOM_HELPER}():
    """Draw inside the block from a random stream of this process's own: noise for this process's samples.

    Every process shares rank 0's random state, so that what the script draws at start-up (a
    split, a dataset) is one draw. Noise drawn per step for the batch (a GAN's `z`) would then
    be the same on every process, for different samples, where DataParallel drew it once for
    the whole batch. Inside the block, Python's, NumPy's and torch's generators (the CPU one
    and this process's GPU's) continue a stream seeded by the rank; the shared state is put
    back after it, so everything else stays alike on every process.
    """
    state = {names.PER_PROCESS_RANDOM_HELPER}.__dict__
    if state.get("inside") or not (dist.is_available() and dist.is_initialized()):
        yield
        return
    numpy = sys.modules.get("numpy")
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()

    def current():
        return {{
            "random": random.getstate(),
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state() if cuda else None,
            "numpy": numpy.random.get_state() if numpy is not None else None,
        }}

    def restore(saved):
        random.setstate(saved["random"])
        torch.set_rng_state(saved["torch"])
        if saved["cuda"] is not None:
            torch.cuda.set_rng_state(saved["cuda"])
        if saved["numpy"] is not None:
            numpy.random.set_state(saved["numpy"])

    shared = current()
    own = state.get("own")
    seed = (torch.initial_seed() + 2**16 + dist.get_rank()) % 2**32
    if own is None:
        own = {{"random": random.Random(seed).getstate(), "torch": torch.Generator().manual_seed(seed).get_state(), "cuda": None, "numpy": None}}
    restore(own)
    # A generator that came into use after the first block (CUDA, NumPy) starts its own stream now.
    if cuda and own["cuda"] is None:
        torch.cuda.manual_seed(seed)
    if numpy is not None and own["numpy"] is None:
        numpy.random.seed(seed)
    state["inside"] = True
    try:
        yield
    finally:
        state["inside"] = False
        state["own"] = current()
        restore(shared)
'''
# Calls whose arguments size a tensor or a buffer for one step.
_TENSOR_FACTORIES = names.TENSOR_FACTORIES
_RESHAPES = names.TENSOR_RESHAPES
_DRAWS = names.SIZED_DRAWS


@dataclass(frozen=True)
class _Unpacked:
    """``DataLoader(data, **name)`` where the file shows every key ``name`` can hold."""

    name: str
    always: frozenset[str]  # keys every path puts in
    maybe: frozenset[str]  # keys some path adds


@dataclass(frozen=True)
class _LoaderPlan:
    dataset: cst.BaseExpression
    hoisted_dataset: str | None  # name the dataset expression moves to
    # The loader's own `sampler` or `batch_sampler` argument, split where it is built or wrapped at the loader.
    own_sampler: str | None = None
    wrap_at_loader: bool = False
    built: cst.Call | None = None  # where that sampler is built, if in this file


@dataclass(frozen=True)
class _Site:
    """Where a caller binds a loader that a function of the file returns."""

    target: cst.BaseExpression
    assign: cst.Assign
    statement: cst.SimpleStatementLine


# What a caller asking a loader function for evaluation data names it or asks with.
EVALUATION_REQUEST = re.compile(r"val|test|eval|pred|infer", re.IGNORECASE)


def _holds(spelled: str, values: set[str]) -> bool:
    """Whether the value ``spelled`` is one of ``values``: ``cfg["data"]["dataset"]`` is not
    ``cfg["training"]["batch_size"]``, and neither is the whole ``cfg``, as ``cfg.data`` is not ``cfg.batch``."""
    return spelled in values


class AddDistributedSamplerCommand(Dp2ddpCodemod):
    DESCRIPTION = "Give the training DataLoader a DistributedSampler, keep the global batch, call set_epoch."
    @staticmethod
    def add_args(arg_parser: argparse.ArgumentParser) -> None:
        add_batch_args(arg_parser)

    # The evaluation codemod shares this machinery and shards the other loaders.
    SHARDS_EVALUATION: ClassVar[bool] = False

    def __init__(self, context: CodemodContext, batch: str = "global", keep_per_process_batch: bool = False) -> None:
        super().__init__(context)
        # `keep_per_process_batch=True` is the option's old spelling.
        self.keep_per_process_batch = keep_per_process_batch or batch == "per-process"
        self.plans: dict[cst.Call, _LoaderPlan] = {}
        self.hoists: dict[cst.SimpleStatementLine, _LoaderPlan] = {}
        self.set_epochs: dict[cst.For, list[cst.BaseExpression]] = {}
        # Epoch loops of functions that run more than once: their sampler advances by one each epoch instead.
        self.advancing: set[cst.For] = set()
        # `except StopIteration:` handlers that re-iterate a loader, with the loaders.
        self.restarts: dict[cst.ExceptHandler | cst.While, list[cst.BaseExpression]] = {}
        self.dist = "dist"
        # Loaders whose batch value also sizes something per step: they keep it per process.
        self.per_process_calls: set[cst.Call] = set()
        # Batch samplers whose batches the loss pairs within: each process takes whole batches of them.
        self.whole_batches: set[cst.CSTNode] = set()
        # Those of them that keep it because the loss pairs the samples of a batch (DDP342).
        self.paired: set[cst.Call] = set()
        # Loaders whose batch is an option defaulting below a common world size, with the default:
        # divided, it is floored at 1 (`max(1, B // world_size)`), since 0 would crash every process.
        self.floored: dict[cst.Call, int] = {}
        # Those whose batch is a name one of whose bindings is that small a literal (`batch_size = 1`), with the binding.
        self.small_bindings: dict[cst.Call, cst.CSTNode] = {}
        # Loaders given `sampler=<a name only ever bound to None>`, with that name.
        self.placeholders: dict[cst.Call, str] = {}
        # Sampler constructions to split, with how: "shuffle"/"sequential" (a DistributedSampler), or the
        # loader argument they feed ("sampler"/"batch_sampler", wrapped in ShardedSampler).
        self.sampler_edits: dict[cst.Call, str] = {}
        # Loaders with no epoch loop for set_epoch: their shuffle moves into a ShardedSampler, which reshuffles itself.
        # Loaders built anew for every pass, by the name their passes are counted under.
        self.sites: dict[cst.Call, str] = {}
        self.rebuilt_data: set[str] = set()
        # Loaders whose sampler is a parameter that may be None at run time.
        self.maybe_none: set[cst.Call] = set()
        self.self_advancing: set[cst.Call] = set()
        # Loaders (as the epoch loop names them) whose batch sampler carries the epoch.
        self.batch_sampled: set[str] = set()
        self.helpers_needed = False
        self.split_helper_needed = False
        self.worker_helper_needed = False
        # Split training loaders with no workers whose augmentations each process draws on its own.
        self.drawn_per_process: set[cst.Call] = set()
        self.drawn_helper_needed = False
        # Lines of a training step that draw noise for the batch: each process draws its own.
        self.noise_lines: set[cst.SimpleStatementLine] = set()
        # Statements binding a loader that a function also builds for evaluation, with the names
        # (`train_loader`) that take this process's share of it after them.
        self.split_at_use: dict[cst.SimpleStatementLine, list[tuple[str, bool]]] = {}
        # The names split there, of loaders another module's function builds (`train_loader`).
        self.split_names: set[str] = set()
        # Loaders whose batches reach a backward(): they train, whatever their name says.
        self.trained: set[cst.CSTNode] = set()
        # Loaders whose arguments come from a dict the file shows whole, with its keys.
        self.unpacked: dict[cst.Call, _Unpacked] = {}
        # Sampler bindings no loader reads any more.
        self.dropped_lines: set[cst.SimpleStatementLine] = set()
        # Seeds a dataset sets in a loader worker from the worker's id alone (`torch.manual_seed(worker_info.id)`).
        self.worker_seeds: set[cst.Call] = set()
        # `batch_size *= torch.cuda.device_count()` and the like -> the value with the GPU count replaced.
        self.gpu_count_scaling: dict[cst.AugAssign | cst.Assign, cst.BaseExpression] = {}

    # -- detection, on the original tree --------------------------------------------

    def plan(self, analysis: Analysis) -> None:
        super().plan(analysis)
        self.batches = TrainingBatches(analysis)
        node = analysis.module
        self.dist = self.facts.distributed_alias
        loaders = analysis.findall(call_to(names.DATA_LOADER))
        if not self.SHARDS_EVALUATION:
            self._plan_split_builders(analysis)
            self._report_data_from_elsewhere(analysis, loaders)
            self._report_gpu_count_scaling(analysis)
            self._plan_noise_per_process(analysis, loaders)
            self._plan_worker_seeds(analysis)
        if not loaders:
            return
        if not self.SHARDS_EVALUATION:
            self._report_per_process_state(analysis)
        self.trained = self.batches.feeding_backward(loaders)
        iterable = [
            c for c in analysis.nodes(cst.ClassDef) if any(self.matches(b.value, resolves_to(names.ITERABLE_DATASET)) for b in c.bases)
        ]  # fmt: skip
        iterable_classes = {c.name.value for c in iterable}
        splitting = {c.name.value for c in iterable if self._iterates_own_share(c)}
        # Data some loader is built anew for every pass over: every loader over it counts the
        # passes of one site, so a loader built once beside it does not repeat its first order.
        self.rebuilt_data = {
            code_of(dataset) for call in loaders
            if (dataset := argument(call, 0, "dataset")) is not None and self._rebuilt(call, depth=3)  # type: ignore[arg-type]
        }  # fmt: skip
        for call in loaders:
            assert isinstance(call, cst.Call)
            function = next((a for a in analysis.ancestors(call) if isinstance(a, cst.FunctionDef)), None)
            if function is not None and function.name.value in analysis.role.whole_builders:
                continue  # it builds the evaluation loaders too: its callers split what they train on
            dataset = argument(call, 0, "dataset")
            if dataset is not None and self._is_iterable_dataset(node, dataset, splitting):
                continue  # its `__iter__` yields this process's share already
            if dataset is not None and not self._is_iterable_dataset(node, dataset, iterable_classes):
                sites = self._shared_factory_sites(call)
                if sites is not None:
                    self._plan_split_at_use(call, *sites)
                    continue
            self._plan_loader(node, call, only_loader=len(loaders) == 1, iterable_classes=iterable_classes)
        if not self.SHARDS_EVALUATION:
            analysis.sharded_loaders.update(self.plans)
            # A dict of split loaders (`loaders = {x: DataLoader(...) for x in keys}`), under whatever name a
            # function gets it: a loop over `loaders[phase]` reads split batches.
            for call in self.plans:
                for holder in analysis.holders(call):
                    if "[" in holder.spelled:
                        analysis.sharded_names.add(holder.spelled.split("[", 1)[0].rsplit(".", 1)[-1])
            if not self.keep_per_process_batch:
                analysis.per_process_loaders.update({call: self._kept_because(call) for call in self.per_process_calls})

    def _report_per_process_state(self, analysis: Analysis) -> None:
        """A tensor the training loop updates per sample and reads into the loss: a center-loss table, a memory bank.

        ``feature_center[y] += beta * (features - feature_center[y])``: each process now updates
        it from its own share of the batch, so the processes keep different tables, where
        DataParallel kept one updated from the whole batch, and the loss differs.
        """
        for backward in analysis.findall(m.Call(func=m.Attribute(attr=m.Name("backward")))):
            loop = next((a for a in analysis.ancestors(backward) if isinstance(a, (cst.For, cst.While, cst.FunctionDef))), None)
            if not isinstance(loop, (cst.For, cst.While)):
                continue
            loss = analysis.reads(backward.func.value)  # type: ignore[attr-defined]
            assigns = list(analysis.within(loop.body, cst.Assign))
            for update in [*analysis.within(loop.body, cst.AugAssign), *assigns]:
                targets = [update.target] if isinstance(update, cst.AugAssign) else [t.target for t in update.targets]
                for target in targets:
                    if not isinstance(target, cst.Subscript) or not m.matches(target.value, m.Name() | m.Attribute()):
                        continue
                    table = code_of(target.value)
                    bound_in_loop = any(code_of(t.target) == table for a in assigns for t in a.targets) or (
                        isinstance(loop, cst.For) and any(code_of(n) == table for n in analysis.within(loop.target, cst.Name))
                    )
                    indexed_by_batch = analysis.reads(target.slice[0].slice) & analysis.flows_from(self._batch_names(loop), assigns)  # type: ignore[attr-defined]
                    if not bound_in_loop and indexed_by_batch and analysis.flows_from({table}, assigns) & loss:
                        self.report(update, "DDP337", table=table)

    def _plan_noise_per_process(self, analysis: Analysis, loaders: list[cst.CSTNode]) -> None:
        """Lines of a training step that draw noise for the batch go under ``per_process_random()`` (DDP339)."""
        batch_values = {
            code_of(n) for call in loaders
            if (batch := argument(call, BATCH_SIZE, "batch_size")) is not None  # type: ignore[arg-type]
            for n in self._outermost_names(batch)
        }  # fmt: skip
        held = m.With(items=[m.WithItem(m.Call(func=m.Name(names.PER_PROCESS_RANDOM_HELPER)))])
        for line in batch_noise_lines(analysis, batch_values):
            if not any(analysis.matches(a, held) for a in analysis.ancestors(line)):
                self.noise_lines.add(line)
                self.report(line, "DDP339")

    def _batch_names(self, loop: cst.For | cst.While) -> set[str]:
        """What the loop binds from its batch: the for loop's target names, or the names ``next(...)`` is unpacked to."""
        if isinstance(loop, cst.For):
            return {n.value for n in self.analysis.within(loop.target, cst.Name)}
        fetches = [a for a in self.analysis.within(loop.body, cst.Assign) if m.matches(a.value, m.Call(func=m.Name("next")))]
        return {code_of(t.target) for a in fetches for t in a.targets} | {
            n.value for a in fetches for t in a.targets for n in self.analysis.within(t.target, cst.Name)
        }

    # -- loaders built by one function for training and for evaluation ---------------------------------

    def _shared_factory_sites(self, call: cst.Call) -> tuple[list[_Site], list[_Site]] | None:
        """Where a function returning the loader ``call`` is called for training, and where for evaluation.

        ``_get_data(flag)`` builds the train, validation, test and prediction loaders alike.
        Split inside it, every one of them would be: each process would validate on its own
        shard, stop early on its own, and predict with a batch of ``1 // world_size``. Each of
        its callers is judged instead: a caller's loader that feeds a ``backward()`` trains, one
        that does not and is named for evaluation (or asked for with such a name, ``flag="val"``)
        evaluates. None when the callers are not all of one or the other, or not of both.
        """
        function = next((a for a in self.analysis.ancestors(call) if isinstance(a, cst.FunctionDef)), None)
        if function is None or call not in self.trained:
            return None
        returned = [call, *(r for h in self.analysis.holders(call, depth=0) if h.scope is function for r in h.reads)]
        training: list[_Site] = []
        evaluation: list[_Site] = []
        for value in returned:
            for target, assign in self.analysis.returned_to(value):
                holders = self.batches.loader_holders([], self.analysis.target_holders(target))
                statement = self.analysis.parents.get(assign)
                if self.batches.feeds_backward(holders):
                    if not m.matches(target, m.Name() | m.Attribute(value=m.Name())) or not isinstance(statement, cst.SimpleStatementLine):
                        return None
                    training.append(_Site(target, assign, statement))
                elif self._asks_for_evaluation(target, assign.value):
                    evaluation.append(_Site(target, assign, statement))  # type: ignore[arg-type]
                else:
                    return None
        return (training, evaluation) if training and evaluation else None

    def _asks_for_evaluation(self, target: cst.BaseExpression, request: cst.BaseExpression) -> bool:
        """``val_loader = ...``, or a call asking for it by a string (``get_data(flag="test")``)."""
        asked = [s.evaluated_value for s in self.analysis.within(request, cst.SimpleString)]
        return any(isinstance(text, str) and EVALUATION_REQUEST.search(text) for text in [code_of(target), *asked])

    def _plan_split_at_use(self, call: cst.Call, training: list[_Site], evaluation: list[_Site]) -> None:
        """Leave the loader whole where it is built; each training caller takes its share after the call."""
        if self.SHARDS_EVALUATION:
            return
        sizing = self._sizes_per_step(call)
        keep = self.keep_per_process_batch or sizing is not None or self._pair_loss is not None
        if sizing is not None and not self.keep_per_process_batch:
            self._report_sizing(call, sizing)
        elif self._pair_loss is not None and not self.keep_per_process_batch:
            self._report_pairing(call)
        lines = ", ".join(sorted({str(self.analysis.position(site.assign).start.line) for site in evaluation}, key=int))
        for site in training:
            if code_of(site.target) in (target for target, _ in self.split_at_use.get(site.statement, [])):
                continue  # `if mode == "train": loader = DataLoader(...) else: loader = DataLoader(...)`: one share
            if not split_where_used(self.analysis, self.analysis.target_holders(site.target, depth=0)):  # converted already
                self.split_at_use.setdefault(site.statement, []).append((code_of(site.target), keep))
                self.split_helper_needed = True
            self.analysis.sharded_names.add(code_of(site.target).rsplit(".", 1)[-1])
            self.report(site.assign, "DDP327", loader=code_of(site.target), builder=code_of(site.assign.value.func), lines=lines)  # type: ignore[attr-defined]

    def _plan_loader(self, module: cst.Module, call: cst.Call, only_loader: bool, iterable_classes: set[str]) -> None:
        for position, keyword in ((SAMPLER, "sampler"), (BATCH_SAMPLER, "batch_sampler")):
            sampler = argument(call, position, keyword)
            if sampler is not None and self._is_sharded(sampler):
                if not self.SHARDS_EVALUATION and not self.matches(sampler, m.Call(func=m.Name(names.EVALUATION_SHARD_HELPER))):
                    self._report_converted_batch(call)
                return  # Converted already.
        parent = self.get_metadata(ParentNodeProvider, call)
        statement = self.get_metadata(ParentNodeProvider, parent) if isinstance(parent, (cst.Assign, cst.Return)) else None
        values = self.analysis.parents.get(parent) if isinstance(parent, cst.Element) else None
        if isinstance(values, cst.Tuple) and isinstance(assign := self.analysis.parents.get(values), cst.Assign) and assign.value is values:
            statement = self.analysis.parents.get(assign)  # `train_loader, val_loader = DataLoader(...), DataLoader(...)`
        reference, bound_at = self._binding(module, call, parent)
        trained = call in self.trained
        if self.SHARDS_EVALUATION:
            wanted = not trained and self._is_evaluation_loader(module, call, reference, only_loader)
        else:
            # A program that never calls backward() trains on none of its loaders, whatever their names say.
            wanted = trained or (
                not self.analysis.role.evaluates_only and is_training_loader(call, reference, only_loader)
                and not in_evaluation_function(self.analysis, call)
            )
        if not wanted:
            return
        own_sampler = None
        for position, keyword in ((SAMPLER, "sampler"), (BATCH_SAMPLER, "batch_sampler")):
            given = argument(call, position, keyword)
            if given is not None and keyword == "sampler" and self._is_placeholder(given):
                # `train_sampler = None` ... `sampler=train_sampler`: no sampler at all.
                self.placeholders[call] = given.value  # type: ignore[attr-defined]
            elif given is not None and self.SHARDS_EVALUATION and self._is_sequential(given):
                # An evaluation loader's SequentialSampler gives way to the evaluation shard.
                self.placeholders[call] = code_of(given)
                self._drop_if_only_for(given)
            elif given is not None and not m.matches(given, m.Name("None")):
                if self.SHARDS_EVALUATION:
                    return  # a sampler of its own picks what is evaluated: every process evaluates it whole
                own_sampler = self._plan_own_sampler(call, keyword, given)
                if own_sampler is None:
                    return
        unpacked = next((a for a in call.args if a.star), None)
        if unpacked is not None and not self._unpacked_beside_explicit_shuffle(call):
            keys = None if self.SHARDS_EVALUATION or own_sampler is not None else self._unpacked_keys(call, unpacked)
            if keys is None:
                self.report(call, "DDP314", arguments=f"{unpacked.star}{code_of(unpacked.value)}")
                return
            self.unpacked[call] = keys
        positional = [a for a in call.args if a.keyword is None and not a.star]
        # `DataLoader(data, 8, True, None)`: a sampler or batch sampler of None, by position, is no sampler.
        if len(positional) > SHUFFLE + 1 and all(m.matches(a.value, m.Name("None")) for a in positional[SHUFFLE + 1 :]):
            positional = positional[: SHUFFLE + 1]
        # A sampler or batch sampler of its own, by position, is split where it stands.
        limit = BATCH_SAMPLER + 1 if own_sampler is not None else SHUFFLE + 1
        if len(positional) > limit:
            self.report(call, "DDP303", count=len(positional))
            return
        dataset = argument(call, 0, "dataset")
        if dataset is None:
            return
        if self._is_iterable_dataset(module, dataset, iterable_classes):
            self.report(call, "DDP302")
            return
        hoisted_dataset = None
        if own_sampler is None and not _read_only(dataset):
            statement = statement if isinstance(statement, cst.SimpleStatementLine) else self._line_evaluating(call)
            if not isinstance(statement, cst.SimpleStatementLine):
                self.report(call, "DDP304")
                return
            hoisted_dataset = self._dataset_name(reference, call)
        if not self._may_shard(call, reference):
            return
        if own_sampler is not None:
            plan = _LoaderPlan(dataset, None, *own_sampler)
            hoisted_dataset = None  # the sampler keeps its own dataset
        else:
            plan = _LoaderPlan(dataset, hoisted_dataset)
        self.plans[call] = plan
        if not self.SHARDS_EVALUATION and self._draws_alike(call):
            # The main process draws the augmentations, from the random state every process shares.
            self.drawn_per_process.add(call)
            self.report(call, "DDP338")
        sizing = self._sizes_per_step(call)
        if sizing is not None:
            self.per_process_calls.add(call)
            self._report_sizing(call, sizing)
        elif self._pair_loss is not None and not self.keep_per_process_batch:
            self.per_process_calls.add(call)
            batches = own_sampler[2] if own_sampler is not None and own_sampler[0] == "batch_sampler" else None
            if batches is not None:
                # The loss pairs within the batch sampler's batches (P identities x K images): each process takes
                # whole batches, every world_size-th, as `--batch per-process` does; a share of each would break the groups.
                self.whole_batches.add(batches)
            size = next((a.value for a in batches.args if a.keyword is not None and a.keyword.value == "batch_size"), None) if batches is not None else None
            self._report_pairing(call, batch=code_of(size) if size is not None else ("len(batch)" if batches is not None else None))
        size = self._literal_batch(call)
        if size is not None and size < 2:
            # A batch of 1 cannot be split: `1 // world_size` is 0, which DataLoader refuses.
            self.per_process_calls.add(call)
        default = integer_option_default(self.analysis, argument(call, BATCH_SIZE, "batch_size") or cst.Name("None"))
        if call not in self.per_process_calls and default is not None and default < max(COMMON_WORLD_SIZES):
            # `--batch_size` defaults to 1: a literal 1 stays per process, but the option may be given any
            # value, which is divided as usual; only below the world size is each process's share 0.
            self.floored[call] = default
        elif call not in self.per_process_calls and default is None and (small := self._small_binding(call)) is not None:
            # `batch_size = 1` on the evaluation side of a builder that binds the batch per split: 0 there.
            self.floored[call] = small[0]
            self.small_bindings[call] = small[1]
        if hoisted_dataset is not None:
            assert isinstance(statement, cst.SimpleStatementLine)
            self.hoists[statement] = plan
        if self.SHARDS_EVALUATION:
            return
        if own_sampler is not None and own_sampler[0] == "batch_sampler":
            # No batch_size: the batches are the batch sampler's, each split over the processes (DDP321).
            if reference is not None:
                self.batch_sampled.add(code_of(reference))
            if own_sampler[2] not in self.whole_batches:
                self._report_batches(call, own_sampler[2])
        else:
            self._report_batch(call)
        if code_of(dataset) in self.rebuilt_data:
            # A new loader, and with it a new sampler at epoch 0, for every pass: the passes over
            # the data are counted for it instead, across the samplers built over it.
            self.sites[call] = code_of(dataset)
            if plan.built is not None:
                self.sites[plan.built] = self.sites[call]
            self._no_epoch_loop(call, code_of(reference) if reference is not None else "loader", rebuilt=True)
        elif reference is None or bound_at is None:
            if not self._runs_once(call, depth=3):
                self._no_epoch_loop(call, "loader")
        else:
            if self._iterated_per_step(reference):
                self._no_epoch_loop(call, code_of(reference), per_step=True)
                return
            self._plan_set_epoch(module, call, reference, bound_at)

    # -- samplers of the script's own -------------------------------------------------

    def _plan_own_sampler(
        self, call: cst.Call, keyword: str, given: cst.BaseExpression
    ) -> tuple[str, bool, cst.Call | None] | None:
        """Split the training loader's own sampler or batch sampler: ``(keyword, wrapped at the loader)``.

        Where the sampler is built (inline, or bound once in this file), a
        ``RandomSampler(data)`` or ``SequentialSampler(data)`` becomes a
        DistributedSampler with that shuffle, and any other sampler is wrapped in
        ShardedSampler there; one that comes from elsewhere is wrapped at the loader.
        None where it cannot be split (reported) or splits the data itself.
        """
        built = self._sampler_built_at(given)
        if built is not None and self._splits_itself(built):
            self.report(given, "DDP323", sampler=code_of(built).split("(")[0])
            return None
        if built is None:
            bindings = self._bindings_reaching(given) if isinstance(given, cst.Name) else []
            sometimes_none = any(a is None or m.matches(a.value, m.Name("None")) for a in bindings or [None])
            if keyword == "batch_sampler" and isinstance(given, cst.Name) and sometimes_none:
                self.report(given, "DDP301", argument=keyword, sampler=code_of(given))
                return None
            self.report(given, "DDP321", sampler=code_of(given), split=self._split_note(keyword))
            if isinstance(given, cst.Name) and sometimes_none:
                # A parameter (`sampler=None` by default), or a name bound to None on some path, may be None
                # at run time: no sampler, so the loader's own order (its `shuffle=`) is split instead.
                self.maybe_none.add(call)
            return keyword, True, None
        if keyword == "sampler" and not self._from_torch(built):
            # A sampler of the script's own may group items within a batch: it is wrapped at the
            # loader, where the batch it is cut into is known.
            self.report(built, "DDP321", sampler=code_of(built.func), split=self._split_note(keyword))
            return keyword, True, None
        if keyword == "sampler" and self._plain_sampler(built, names.RANDOM_SAMPLER):
            self.sampler_edits[built] = "shuffle"
        elif keyword == "sampler" and self._plain_sampler(built, names.SEQUENTIAL_SAMPLER):
            self.sampler_edits[built] = "sequential"
        else:
            self.sampler_edits[built] = keyword
            self.report(built, "DDP321", sampler=code_of(built.func), split=self._split_note(keyword))
        return keyword, False, built

    def _drop_if_only_for(self, given: cst.BaseExpression) -> None:
        """``eval_sampler = SequentialSampler(data)``, read only by the loader that no longer takes it, goes too."""
        if not isinstance(given, cst.Name) or self._sampler_built_at(given) is None:
            return
        assign = self.analysis.bindings(given)[0]  # type: ignore[index]
        line = self.analysis.parents.get(assign)
        target = assign.targets[0].target  # type: ignore[union-attr]
        commented = isinstance(line, cst.SimpleStatementLine) and (
            any(empty.comment for empty in line.leading_lines) or line.trailing_whitespace.comment is not None
        )
        if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 and isinstance(target, cst.Name) and not commented:
            if len(self.analysis.references(target)) == 1:
                self.dropped_lines.add(line)

    def _unpacked_keys(self, call: cst.Call, unpacked: cst.Arg) -> _Unpacked | None:
        """The keys of ``**kwargs`` when the file shows all of them: a dict literal, grown only by literal updates.

        ``train_kwargs = {"batch_size": 64}`` then ``train_kwargs.update({"shuffle": True})``
        in a branch (the MNIST example's shape): which keys are always there, and which may
        be, is then known, and none of them may be a sampler.
        """
        name = unpacked.value
        if unpacked.star != "**" or not isinstance(name, cst.Name) or len(call.args) != 2 or call.args[0].keyword or call.args[0].star:
            return None
        bindings = self.analysis.bindings(name)
        if not bindings or len(bindings) != 1 or bindings[0] is None or not isinstance(bindings[0].value, cst.Dict):
            return None
        always = self._literal_keys(bindings[0].value)
        if always is None:
            return None
        maybe: set[str] = set()
        for use in self.analysis.references(bindings[0].targets[0].target):  # type: ignore[arg-type]
            if use is name:
                continue
            method = self.analysis.parents.get(use)
            update = self.analysis.parents.get(method) if isinstance(method, cst.Attribute) else None
            if not (
                isinstance(method, cst.Attribute) and method.attr.value == "update" and isinstance(update, cst.Call)
                and len(update.args) == 1 and self.analysis.index[update] < self.analysis.index[call]
            ):  # fmt: skip
                return None  # handed on, subscripted or updated from elsewhere: its keys are not known
            added = self._dict_keys(update.args[0].value)
            if added is None:
                return None
            maybe |= added
        if (always | maybe) & {"sampler", "batch_sampler", "dataset"}:
            return None
        return _Unpacked(name.value, frozenset(always), frozenset(maybe - always))

    def _unpacked_beside_explicit_shuffle(self, call: cst.Call) -> bool:
        """``DataLoader(data, batch_size=B, shuffle=True, **kwargs)``: nothing in ``kwargs`` decides the split.

        In a program that runs, ``kwargs`` holds no ``dataset``, ``batch_size`` or ``shuffle``:
        given here too, Python raises "got multiple values for keyword argument". With
        shuffle true, DataLoader raises "sampler option is mutually exclusive with shuffle"
        for any sampler and the same for any batch sampler, so neither is there but as None.
        The rest (num_workers, pin_memory, drop_last, collate_fn) does not change how the data
        is split, so the loader is split as one with every argument written out. Only a
        ``"sampler": None`` entry would clash with the sampler added here, so a dict literal
        of this file with a ``sampler`` key stays refused; a ``**kwargs`` from elsewhere
        holding it would fail at once, on every process, with that TypeError.
        """
        stars = [a for a in call.args if a.star]
        if self.SHARDS_EVALUATION or len(stars) != 1 or stars[0].star != "**":
            return False
        shuffle = argument(call, SHUFFLE, "shuffle")
        if shuffle is None or argument(call, BATCH_SIZE, "batch_size") is None:
            return False
        if argument(call, SAMPLER, "sampler") is not None or argument(call, BATCH_SAMPLER, "batch_sampler") is not None:
            return False
        if not m.matches(shuffle, m.Name("True")):
            # `kwargs = {"num_workers": 4, "pin_memory": True} if use_cuda else {}`: every key it can hold is in
            # sight, and none of them decides the split.
            keys = self._only_literal_keys(stars[0].value)
            return keys is not None and not keys & {"dataset", "batch_size", "shuffle", "sampler", "batch_sampler"}
        return not self._shows_a_sampler_key(stars[0].value)

    def _only_literal_keys(self, mapping: cst.BaseExpression) -> set[str] | None:
        """Every key a name bound once to dict literals (``{...} if c else {...}``) can hold, where nothing else in
        this file adds to it or hands it on; None where that is not certain."""
        if not isinstance(mapping, cst.Name):
            return None
        bindings = self.analysis.bindings(mapping)
        if not bindings or len(bindings) != 1 or bindings[0] is None or len(bindings[0].targets) != 1:
            return None
        value = bindings[0].value
        literals = [value.body, value.orelse] if isinstance(value, cst.IfExp) else [value]
        keys: set[str] = set()
        for literal in literals:
            found = self._literal_keys(literal) if isinstance(literal, cst.Dict) else None
            if found is None:
                return None
            keys |= found
        target = bindings[0].targets[0].target
        uses = self.analysis.references(target) if isinstance(target, cst.Name) else []
        if any(not isinstance(self.analysis.parents.get(use), cst.Arg) for use in uses):
            return None  # `kwargs["sampler"] = ...`, `kwargs.update(...)`: it may hold more
        return keys

    def _shows_a_sampler_key(self, mapping: cst.BaseExpression) -> bool:
        """Whether this file puts a ``sampler`` key into the dict: in the literal or ``dict()`` it is bound to, by
        ``mapping["sampler"] = ...``, or by ``update``/``setdefault``."""
        if isinstance(mapping, cst.Dict):
            return "sampler" in (self._literal_keys(mapping) or set())
        if not isinstance(mapping, cst.Name):
            return False
        keyed = m.Call(args=[m.ZeroOrMore(), m.Arg(keyword=m.Name("sampler")), m.ZeroOrMore()])
        named = m.SimpleString(m.MatchIfTrue(lambda text: text[1:-1] == "sampler"))
        written = m.DictElement(key=named) | m.SubscriptElement(slice=m.Index(named)) | keyed
        for assign in self.analysis.bindings(mapping) or []:
            if assign is not None and self.analysis.findall_in(assign.value, written):
                return True
        for binding in self.analysis.bindings(mapping) or []:
            target = binding.targets[0].target if binding is not None else None
            for use in self.analysis.references(target) if isinstance(target, cst.Name) else []:
                parent = self.analysis.parents.get(use)
                holder = self.analysis.parents.get(parent) if parent is not None else None
                if isinstance(parent, (cst.Subscript, cst.Attribute)) and holder is not None and self.analysis.findall_in(holder, written):
                    return True
        return False

    def _dict_keys(self, value: cst.BaseExpression) -> set[str] | None:
        """The keys of a dict literal, or of the one dict literal a name is bound to (``cuda_kwargs``)."""
        if isinstance(value, cst.Name):
            bindings = self.analysis.bindings(value)
            if not bindings or len(bindings) != 1 or bindings[0] is None:
                return None
            value = bindings[0].value
        return self._literal_keys(value) if isinstance(value, cst.Dict) else None

    @staticmethod
    def _literal_keys(mapping: cst.Dict) -> set[str] | None:
        keys = set()
        for element in mapping.elements:
            if not isinstance(element, cst.DictElement) or not isinstance(element.key, cst.SimpleString):
                return None
            keys.add(element.key.evaluated_value)
        return keys  # type: ignore[return-value]

    def _from_torch(self, built: cst.Call) -> bool:
        return any(q.name.split(".")[0] == "torch" for q in self.analysis.qualified_names(built.func))

    def _split_note(self, keyword: str) -> str:
        if keyword == "sampler":
            return "each process takes every world_size-th index"
        if self.keep_per_process_batch:
            return "each process takes every world_size-th batch, whole"
        if self._pair_loss is not None:
            return f"each process takes every world_size-th batch, whole, since {self._pairing_reason}"
        return "each process takes its share of every batch, so the global batch stays the sampler's"

    def _sampler_built_at(self, given: cst.BaseExpression) -> cst.Call | None:
        """The call that builds the sampler: ``given`` itself, or the one assignment of the name ``given``."""
        return sampler_built_at(self.analysis, given)

    def _plain_sampler(self, built: cst.Call, kind: frozenset[str]) -> bool:
        """``RandomSampler(data)`` with no replacement, sample count or generator: DistributedSampler's order."""
        return self.matches(built, call_to(kind)) and len(built.args) == 1 and not built.args[0].star and (
            built.args[0].keyword is None or built.args[0].keyword.value == "data_source"
        )

    def _splits_itself(self, built: cst.Call) -> bool:
        """A sampler that is told the process's rank, or is distributed by name, yields one process's share already."""
        return splits_itself(built)

    def _is_sequential(self, given: cst.BaseExpression) -> bool:
        built = self._sampler_built_at(given)
        return built is not None and self._plain_sampler(built, names.SEQUENTIAL_SAMPLER)

    def _is_sharded(self, given: cst.BaseExpression) -> bool:
        """A sampler convert has split already: a DistributedSampler or ShardedSampler, inline or by name."""
        built = self._sampler_built_at(given)
        split = call_to(names.DISTRIBUTED_SAMPLER) | m.Call(
            func=m.Name(names.EVALUATION_SHARD_HELPER) | m.Name(names.SHARDED_SAMPLER_HELPER)
        )
        return built is not None and self.matches(built, split)

    def _iterated_per_step(self, reference: cst.BaseExpression) -> bool:
        """``next(iter(loader))`` inside a loop: every step starts a new pass over the loader."""
        loader = code_of(reference)
        for found in self.analysis.findall(m.Call(func=m.Name("iter"), args=[m.Arg()])):
            assert isinstance(found, cst.Call)
            if code_of(found.args[0].value) != loader:
                continue
            if any(isinstance(a, cst.ExceptHandler) for a in self.analysis.ancestors(found)):
                continue  # restarting after StopIteration: a new epoch, which set_epoch handles
            if any(isinstance(a, (cst.For, cst.While)) for a in self.analysis.ancestors(found)):
                return True
        return False

    def _no_epoch_loop(self, call: cst.Call, loader: str, per_step: bool = False, rebuilt: bool = False, keyed: bool = False) -> None:
        """No loop to call set_epoch from: the loader's sampler advances its epoch on every pass instead."""
        plan = self.plans.get(call)
        if plan is None:
            return
        edit = self.sampler_edits.get(plan.built) if plan.built is not None else None
        if plan.own_sampler is None:
            if self._unshuffled(call):
                return  # one order every pass, as before: nothing to advance
            self.self_advancing.add(call)
        elif edit == "sequential":
            return
        elif edit == "shuffle":
            self.sampler_edits[plan.built] = "sampler"  # type: ignore[index]  # a DistributedSampler would repeat one order
        why = "a loop starts its passes with `iter()`" if per_step else "convert found no epoch loop where it could call `set_epoch` on it"
        if rebuilt:
            why = "loaders over its data are built anew for passes over it, and a new DistributedSampler would start at epoch 0 each time"
        if keyed:
            why = "the loop reads it by a key that changes (`loaders[phase]`), so no one name reaches it at the epoch loop"
        epoch_loops = [loop for loop in self.analysis.nodes(cst.For) if "ep" in code_of(loop.target).lower()]
        if not per_step and not rebuilt and not keyed and self.analysis.role.setup_elsewhere and not epoch_loops:
            why = "its epochs are counted in another module, where convert cannot call `set_epoch` on it"
        self.report(call, "DDP322", loader=loader, why=why)

    def _unshuffled(self, call: cst.Call) -> bool:
        if call in self.unpacked:
            return "shuffle" not in self.unpacked[call].always | self.unpacked[call].maybe
        shuffle = argument(call, SHUFFLE, "shuffle")
        return shuffle is None or m.matches(shuffle, m.Name("False"))

    def _binding(
        self, module: cst.Module, call: cst.Call, parent: cst.CSTNode
    ) -> tuple[cst.BaseExpression | None, cst.CSTNode | None]:
        """What the loader is bound to, and the node that binds it.

        ``loader = DataLoader(...)`` binds it directly. ``return DataLoader(...)``
        in ``build_train_loader()`` binds it wherever the script assigns
        ``x = build_train_loader()`` or ``self.x = self.build_train_loader()``.
        """
        if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
            target = parent.targets[0].target
            # `train_loader = DataLoader(...)` in `get_data()`, which returns it, alone or in a tuple.
            for use in self.analysis.references(target) if isinstance(target, cst.Name) else ():
                callers = self.analysis.returned_to(use)
                if len(callers) == 1:
                    return callers[0][0], callers[0][1].value
            return target, call
        callers = self.analysis.returned_to(call)
        if len(callers) == 1:
            return callers[0][0], callers[0][1].value
        # `Trainer(model, DataLoader(...))`, `{"train": DataLoader(...)}`: the name code reads it by.
        holders = self.analysis.holders(call)
        if not holders:
            return None, None
        return cst.parse_expression(holders[0].spelled), holders[0].binding

    def _is_evaluation_loader(
        self, module: cst.Module, call: cst.Call, reference: cst.BaseExpression | None, only_loader: bool
    ) -> bool:
        """An unshuffled loader named for evaluation, or iterated under ``torch.no_grad()``."""
        if is_training_loader(call, reference, only_loader) and not in_evaluation_function(self.analysis, call):
            return False
        name = code_of(reference) if reference is not None else ""
        dataset = argument(call, 0, "dataset")
        if EVALUATION_NAME.search(name) or (dataset is not None and EVALUATION_NAME.search(code_of(dataset))):
            return True
        if reference is None:
            return False
        stem = name.rsplit(".", 1)[-1]
        no_grad = m.With(items=[m.ZeroOrMore(), m.WithItem(call_to(names.NO_GRAD)), m.ZeroOrMore()])
        for block in self.analysis.findall(no_grad):
            for loop in m.findall(block, m.For()):
                assert isinstance(loop, cst.For)
                if any(code_of(n).rsplit(".", 1)[-1] == stem for n in m.findall(loop.iter, m.Name() | m.Attribute())):
                    return True
        return False

    def _is_iterable_dataset(self, module: cst.Module, dataset: cst.BaseExpression, iterable_classes: set[str]) -> bool:
        built_by_class = m.Call(func=m.Name(m.MatchIfTrue(lambda n: n in iterable_classes)))
        if m.matches(dataset, built_by_class):
            return True
        if isinstance(dataset, cst.Name):
            assigned = m.Assign(targets=[m.AssignTarget(m.Name(dataset.value))], value=built_by_class)
            return bool(self.analysis.findall(assigned))
        return False

    def _iterates_own_share(self, dataset_class: cst.ClassDef) -> bool:
        """An IterableDataset whose ``__iter__`` reads the process's rank and the world size: it shards its own stream."""
        methods = [f for f in self.analysis.within(dataset_class, cst.FunctionDef) if f.name.value == "__iter__"]
        read = {n.value for f in methods for n in self.analysis.within(f.body, cst.Name)}
        return bool(read & {"get_rank", "rank"}) and bool(read & {"get_world_size", "world_size", "num_replicas"})

    def _line_evaluating(self, call: cst.Call) -> cst.SimpleStatementLine | None:
        """The line that always evaluates ``call``, once: ``return {"train": DataLoader(...)}``; None inside a
        comprehension, a lambda, a conditional expression or a short-circuit, where it may run any number of times."""
        for ancestor in self.analysis.ancestors(call):
            if isinstance(ancestor, cst.SimpleStatementLine):
                return ancestor
            if isinstance(ancestor, (cst.BaseComp, cst.Lambda, cst.IfExp, cst.BooleanOperation, cst.BaseCompoundStatement)):
                return None
        return None

    def _dataset_name(self, reference: cst.BaseExpression | None, call: cst.Call) -> str:
        if reference is None:
            base = ""
        elif m.matches(reference, m.Subscript(slice=[m.SubscriptElement(m.Index(m.SimpleString()))])):
            key = reference.slice[0].slice.value.evaluated_value  # type: ignore[attr-defined]
            base = key if isinstance(key, str) and key.isidentifier() else ""  # `loaders["train"]`: train
        else:
            base = reference.attr.value if isinstance(reference, cst.Attribute) else code_of(reference)
        stem = re.sub(r"_?(data)?_?loader$", "", base, flags=re.IGNORECASE)
        candidate = f"{stem}_dataset" if stem else "dataset"
        scope = self.get_metadata(ScopeProvider, call)
        while scope is not None and candidate in scope:
            candidate = f"{candidate}_"
        return candidate

    def _may_shard(self, call: cst.Call, reference: cst.BaseExpression | None) -> bool:
        return True

    def _sizes_per_step(self, call: cst.Call) -> cst.Call | None:
        """Another use of the loader's batch value that sizes a tensor or an object per step.

        ``Loss(batch=cfg.batch)``, ``torch.zeros(batch_size, ...)`` or a GAN's noise,
        ``zdist.sample((batch_size,))``, expect the loader's batch: divided by the
        world size in the loader alone, they no longer match it. The first such
        use is returned.
        """
        batch = argument(call, BATCH_SIZE, "batch_size")
        if batch is None:
            return None
        if self._sized_elsewhere(batch) is not None:
            return call  # the caller that hands the batch in also sizes something with it
        # The values the batch is computed from: `cfg.batch` and `cfg.subdivisions` in their quotient.
        # A key of a config dict is a value of its own: `cfg["training"]["batch_size"]`, not all of `cfg`.
        values = {code_of(n) for n in self._value_chains(batch)}
        if not values:
            return None
        classes = {c.name.value for c in self.analysis.nodes(cst.ClassDef)}
        for other in self.analysis.nodes(cst.Call):
            if other is call or self.analysis.index[call] <= self.analysis.index[other] <= self.analysis.last[call]:
                continue
            if not any(_holds(code_of(n), values) for n in self._value_chains(other)):
                continue
            func = other.func
            qualified = {q.name for q in self.analysis.qualified_names(func)}
            if (
                (isinstance(func, cst.Name) and func.value in classes)
                or qualified & _TENSOR_FACTORIES
                or (isinstance(func, cst.Attribute) and func.attr.value in _RESHAPES | _DRAWS)
                # A class or function of another project module handed the batch (`BatchCriterion(m, t, batch_size)`
                # builds a 2B x 2B mask): convert does not change that code, so it keeps expecting the loader's batch.
                or (qualified & self.analysis.role.project_calls and self._passes_batch(other, values))
                or self._sizes_in_function(other, values)
            ):
                return other
        return None

    def _sizes_in_function(self, call: cst.Call, values: set[str]) -> bool:
        """Whether ``call`` hands the batch value to a function of this file that sizes or divides by it:
        ``create_label(shape, cfg.batch_size)`` repeats a mask that many times, ``weighted_loss(out, gt, w,
        cfg.batch_size)`` divides a summed loss by it. A function that builds a loader with it sizes no tensor."""
        function = self.analysis.callee(call)
        if function is None or self.analysis.findall_in(function, call_to(names.DATA_LOADER)):
            return False
        handed = {
            parameter_for(function, call, arg) for arg in call.args
            if not arg.star and not self.analysis.within(arg.value, cst.Call)
            and any(_holds(code_of(n), values) for n in self._value_chains(arg.value))
        }  # fmt: skip
        handed.discard(None)
        for name in self.analysis.within(function.body, cst.Name):
            if name.value not in handed:
                continue
            parent = self.analysis.parents.get(name)
            if isinstance(parent, cst.BinaryOperation) and parent.right is name and isinstance(parent.operator, (cst.Divide, cst.FloorDivide)):
                return True  # a sum over the batch divided by it: the loss normalised by the global batch
            sized = self.analysis.parents.get(parent) if isinstance(parent, cst.Arg) else None
            if isinstance(sized, cst.Call) and not (parent.keyword is not None and parent.keyword.value == "batch_size") and not self.analysis.matches(
                sized, call_to(names.SIDE_EFFECT_CALLS | {"builtins.str", "builtins.int", "builtins.float", "builtins.len"})
            ):
                return True  # `np.repeat(mask, batch_size, axis=0)`, `torch.zeros(batch_size, n)`
        return False

    @cached_property
    def _pair_loss(self) -> tuple[str, str] | None:
        """A loss of this file or of another module of its programs that pairs the samples of a batch with each
        other (``sim = inputs @ inputs.t()``, hard-pair mining), with where: under DataParallel it saw the whole
        batch, so each process keeps that many samples for it."""
        if self.analysis.role.pair_losses:
            loss, site = self.analysis.role.pair_losses[0]
            return loss, str(site)
        try:
            tree = ast.parse(self.analysis.code)
        except (SyntaxError, ValueError):
            return None
        for loss, line, span in pairing_losses(tree, ""):
            if referenced(tree, loss, span):
                return loss, f"line {line}"
        return None

    @property
    def _pairing_reason(self) -> str:
        assert self._pair_loss is not None
        return f"the loss `{self._pair_loss[0]}` pairs the samples of a batch"

    def _report_pairing(self, call: cst.Call, batch: str | None = None) -> None:
        """DDP342 at ``call``, a DataLoader (its ``batch_size``) or a binding split where it trains (``batch``)."""
        assert self._pair_loss is not None
        self.paired.add(call)
        self.analysis.batch_kept_for_pairs = True
        if batch is None:
            value = argument(call, BATCH_SIZE, "batch_size")
            batch = code_of(value) if value is not None else "1"
        self.report(call, "DDP342", loss=self._pair_loss[0], site=self._pair_loss[1], batch=batch)

    def _passes_batch(self, call: cst.Call, values: set[str]) -> bool:
        """Whether one of ``call``'s arguments is the batch value itself, or a product or sum with it."""
        for arg in call.args:
            if any(_holds(code_of(n), values) for n in self._value_chains(arg.value)) and not self.analysis.within(arg.value, cst.Call):
                return True
        return False

    def _value_chains(self, node: cst.CSTNode) -> list[cst.BaseExpression]:
        """``_outermost_names``, each extended through the literal keys it is read at (``cfg["training"]["batch"]``)."""
        found: list[cst.BaseExpression] = []
        for name in self._outermost_names(node):
            chain: cst.BaseExpression = name
            while True:
                parent = self.analysis.parents.get(chain)
                if isinstance(parent, cst.Subscript) and parent.value is chain and len(parent.slice) == 1 and m.matches(
                    parent.slice[0], m.SubscriptElement(m.Index(m.SimpleString() | m.Integer()))
                ):
                    chain = parent
                elif isinstance(parent, cst.Attribute) and parent.value is chain and chain is not name:
                    chain = parent
                else:
                    break
            found.append(chain)
        return found

    def _sized_elsewhere(self, batch: cst.BaseExpression) -> tuple[str, Site] | None:
        """The parameter ``batch`` is, and where another module that hands it in sizes something per step with it."""
        if not isinstance(batch, cst.Name):
            return None
        function = next((a for a in self.analysis.ancestors(batch) if isinstance(a, cst.FunctionDef)), None)
        if function is None:
            return None
        site = self.analysis.role.batch_sized_by_caller(function.name.value, batch.value)
        return (batch.value, site) if site is not None else None

    def _report_sizing(self, call: cst.Call, sizing: cst.Call) -> None:
        """DDP312 at the use that sizes something with the loader's batch, or DDP341 where a caller does."""
        batch = argument(call, BATCH_SIZE, "batch_size")
        elsewhere = self._sized_elsewhere(batch) if sizing is call and batch is not None else None
        if elsewhere is not None:
            self.report(call, "DDP341", batch=elsewhere[0], site=elsewhere[1])
        else:
            self.report(sizing, "DDP312", batch=code_of(batch))  # type: ignore[arg-type]

    def _outermost_names(self, node: cst.CSTNode) -> list[cst.BaseExpression]:
        """Names and attribute chains in ``node`` that are not part of a longer chain."""
        found: list[cst.BaseExpression] = []
        for kind in (cst.Name, cst.Attribute):
            for candidate in self.analysis.within(node, kind):
                parent = self.analysis.parents.get(candidate)
                if isinstance(parent, cst.Attribute) and (parent.value is candidate or parent.attr is candidate):
                    continue
                if isinstance(parent, cst.Arg) and parent.keyword is candidate:
                    continue  # batch=... names a parameter
                if isinstance(parent, cst.Call) and parent.func is candidate:
                    continue  # int(...) names a function
                found.append(candidate)
        return found

    def _is_placeholder(self, value: cst.BaseExpression) -> bool:
        """``None``, or a name every binding of which is ``= None``: the DataParallel half of a sampler switch."""
        return is_placeholder(self.analysis, value)

    def _bindings_reaching(self, name: cst.Name) -> list[cst.Assign | None]:
        """The bindings of ``name`` that can hold when it is read: not those written after it outside any loop around both."""
        return bindings_reaching(self.analysis, name)

    def _small_binding(self, call: cst.Call) -> tuple[int, cst.CSTNode] | None:
        """A binding of the loader's batch name to a literal smaller than some common world sizes, where the name
        has other bindings too (``batch_size = opt["batch_size"]`` for training, ``batch_size = 1`` otherwise)."""
        batch = argument(call, BATCH_SIZE, "batch_size")
        if not isinstance(batch, cst.Name):
            return None
        scope = self.analysis.scopes.get(batch)
        if scope is None or batch.value not in scope:
            return None
        assignments = list(scope[batch.value])
        for assignment in assignments if len(assignments) > 1 else []:
            node = getattr(assignment, "node", None)
            binding = next((a for a in self.analysis.ancestors(node) if isinstance(a, cst.Assign)), None) if node is not None else None
            if binding is None or len(binding.targets) != 1:
                continue
            value, target = binding.value, binding.targets[0].target
            if isinstance(target, cst.Tuple) and isinstance(value, cst.Tuple) and len(target.elements) == len(value.elements):
                # `batch_size, shuffle = 1, False`
                value = next((v.value for t, v in zip(target.elements, value.elements) if t.value is node), value)
            elif target is not node:
                continue
            if isinstance(value, cst.Integer) and int(value.evaluated_value) < max(COMMON_WORLD_SIZES):
                return int(value.evaluated_value), binding
        return None

    def _literal_batch(self, call: cst.Call) -> int | None:
        """The loader's batch size when it is a literal, or a name bound once, at module level, to one."""
        batch = argument(call, BATCH_SIZE, "batch_size")
        return literal_size(self.analysis, batch) if batch is not None else None

    def _kept_because(self, call: cst.Call) -> str:
        """Why a loader keeps its batch per process under ``--batch global``, as DDP308 says it."""
        size = self._literal_batch(call)
        if size is not None and size < 2:
            return f"a batch of {size} cannot be divided"
        if call in self.paired:
            return self._pairing_reason
        return f"`{code_of(argument(call, BATCH_SIZE, 'batch_size'))}` also sizes something per step"  # type: ignore[arg-type]

    def _report_converted_batch(self, call: cst.Call) -> None:
        """The batch hazards a converted loader still has, so converting twice reports them again; check reads the same."""
        batch = argument(call, BATCH_SIZE, "batch_size")
        if batch is None:
            # `batch_sampler=ShardedSampler(sampler)` without `split_batches`: whole batches per process, kept for
            # a loss that pairs within them.
            given = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "batch_sampler"), None)
            whole = m.Call(func=m.Name(names.SHARDED_SAMPLER_HELPER), args=[m.Arg(keyword=None)])
            if given is not None and m.matches(given, whole) and self._pair_loss is not None and not self.keep_per_process_batch:
                self._report_pairing(call, batch="len(batch)")
            return
        hazard = divided_batch(self.analysis, batch)
        if hazard is not None:
            if hazard.default is not None and hazard.floored:
                self._report_floor(hazard.total, hazard.default)
            elif hazard.size is not None and isinstance(hazard.total, cst.Integer) and not hazard.floored:
                self.report(hazard.total, "DDP309", size=hazard.size, misses=", ".join(map(str, hazard.misses)))
            return
        divided = m.BinaryOperation(operator=m.FloorDivide(), right=m.Call(func=m.Attribute(attr=m.Name("get_world_size"))))
        floored = m.Call(func=m.Name("max"), args=[m.Arg(m.Integer("1")), m.Arg(divided)])
        if not m.matches(batch, divided | floored) and (sizing := self._sizes_per_step(call)) is not None:
            self._report_sizing(call, sizing)
        elif not m.matches(batch, divided | floored) and self._pair_loss is not None and not self.keep_per_process_batch:
            self._report_pairing(call)

    def _report_batch(self, call: cst.Call) -> None:
        """State the global batch before and after, with why it is divided or kept per process."""
        keys = self.unpacked.get(call)
        if keys is not None and "batch_size" in keys.always and not self.keep_per_process_batch:
            batch_code = f'{keys.name}["batch_size"]'
            self.report(call, "DDP307", batch=batch_code, divisibility="the global batch changes unless it divides by the number of processes")
            return
        batch = argument(call, BATCH_SIZE, "batch_size")
        size = self._literal_batch(call) if batch is not None else 1
        if batch is None or call in self.per_process_calls or self.keep_per_process_batch:
            if size is not None and size < 2:
                reason = f"a batch of {size} cannot be divided: `{size} // world_size` is 0"
            elif call in self.paired:
                reason = self._pairing_reason
            elif call in self.per_process_calls:
                reason = f"`{code_of(batch)}` also sizes something per step"  # type: ignore[arg-type]
            else:
                reason = "`--batch per-process`"
            if self.keep_per_process_batch:
                learning_rate = "the optimizers' learning rates are scaled by world_size (DDP330; DDP331 where convert could not)"
            elif call in self.per_process_calls and not (size is not None and size < 2):
                learning_rate = "scale the learning rate to match, or divide the batch where it is defined, for every use"
            else:
                learning_rate = "scale the learning rate to match"
            where = batch if batch is not None and size is not None and size < 2 else call
            self.report(where, "DDP308", batch=code_of(batch) if batch is not None else "1", reason=reason, learning_rate=learning_rate)
            return
        divisibility = "the global batch changes unless it divides by the number of processes"
        if call in self.small_bindings:
            below = [str(w) for w in COMMON_WORLD_SIZES if w > self.floored[call]]
            line = self.analysis.position(self.small_bindings[call]).start.line
            self.report(batch, "DDP343", batch=code_of(batch), value=self.floored[call], line=line, counts=", ".join(below))
            divisibility = f"never below 1 per process: where it is {self.floored[call]}, on {', '.join(below)} processes the global batch grows to world_size"
        elif call in self.floored:
            divisibility = self._report_floor(batch, self.floored[call])
        elif size is not None:
            misses = [str(w) for w in COMMON_WORLD_SIZES if size % w]
            if misses:
                self.report(batch, "DDP309", size=size, misses=", ".join(misses))
                divisibility = f"{size} does not divide by {', '.join(misses)} processes, where the global batch shrinks"
            else:
                divisibility = f"{size} divides by {', '.join(map(str, COMMON_WORLD_SIZES))} processes"
        self.report(batch, "DDP307", batch=code_of(batch), divisibility=divisibility)

    def _report_floor(self, batch: cst.BaseExpression, default: int) -> str:
        """DDP336 for a batch option whose default is below some common world sizes; DDP307's clause for it."""
        below = [str(w) for w in COMMON_WORLD_SIZES if w > default]
        self.report(batch, "DDP336", batch=code_of(batch), default=default, counts=", ".join(below))
        return f"never below 1 per process: with its default {default}, on {', '.join(below)} processes the global batch grows to world_size"

    def _report_batches(self, call: cst.Call, built: cst.Call | None) -> None:
        """The global batch of a loader whose batch sampler makes the batches: its ``batch_size``, if it has one."""
        size = None if built is None else next(
            (a.value for a in built.args if a.keyword is not None and a.keyword.value == "batch_size"), None
        )
        batch = code_of(size) if size is not None else "len(batch)"
        if self.keep_per_process_batch:
            reason = "`--batch per-process`: each process takes whole batches of the batch sampler, every world_size-th"
            learning_rate = "the optimizers' learning rates are scaled by world_size (DDP330; DDP331 where convert could not)"
            self.report(call, "DDP308", batch=batch, reason=reason, learning_rate=learning_rate)
        else:
            divisibility = "each of the batch sampler's batches is split between the processes"
            self.report(call, "DDP307", batch=batch, divisibility=divisibility)

    # -- finding the epoch loop ----------------------------------------------------

    def _plan_set_epoch(
        self, module: cst.Module, call: cst.Call, reference: cst.BaseExpression, bound_at: cst.CSTNode
    ) -> None:
        """``set_epoch(epoch)`` at the top of the loop that counts the passes over the loader.

        The loader is followed to every loop over it (``analysis.holders``): through
        returns, arguments, ``self`` attributes and dict entries. From each loop the
        enclosing loops are searched outwards, through the functions' callers, for the
        one that counts epochs; the call is spelled with the name the loader has there.
        """
        holders = self.analysis.holders(call)
        if not holders or any(h.spelled.endswith("[...]") for h in holders):
            # `loaders[phase]`: no one spelling names the loader at the epoch loop.
            self._no_epoch_loop(call, code_of(reference), keyed=bool(holders))
            return
        # `except StopIteration: it = iter(loader)` starts each new pass over the data: the
        # pass count is the sampler's own epoch, advanced there. A bare `except:` (or one for
        # Exception) that re-iterates the loader catches the StopIteration too.
        out_of_data = m.ExceptHandler(
            type=m.MatchIfTrue(lambda t: t is None or (isinstance(t, cst.Name) and t.value in ("StopIteration", "Exception", "BaseException")))
        )
        restarts = [h for h in self.analysis.findall(out_of_data) if self.analysis.reads_any(h.body, holders)]  # type: ignore[attr-defined]
        if restarts:
            for handler in restarts:
                assert isinstance(handler, cst.ExceptHandler)
                holder = self.analysis.reads_any(handler.body, holders)
                assert holder is not None
                planned = self.restarts.setdefault(handler, [])
                if not m.findall(handler.body, m.Call(func=m.Attribute(attr=m.Name("set_epoch")))) and all(
                    code_of(r) != holder.spelled for r in planned
                ):
                    planned.append(cst.parse_expression(holder.spelled))
                    self.report(handler, "DDP315", loader=holder.spelled)
            return
        # `progress = tqdm(loader)`, `for i, batch in enumerate(progress):` is a pass over the loader too.
        passes = self._passes(self.batches.loader_holders([call]))
        epoch_loops: dict[cst.For, Holder] = {}
        for start in passes:
            found = self._epoch_loop(start, holders)
            if found is not None:
                epoch_loops.setdefault(*found)
        if not epoch_loops:
            # `while i < iterations: for x, y in loader: ...`: each turn of the while is a new pass.
            repeats: dict[cst.While, Holder] = {}
            for loop in self.analysis.nodes(cst.While):
                holder = self._can_see(loop, holders)
                if holder is not None and any(self._encloses(loop, p) for p in passes):
                    repeats[loop] = holder
            innermost = [w for w in repeats if not any(o is not w and self._encloses(w, o) for o in repeats)]
            if innermost:
                for loop in innermost:
                    planned = self.restarts.setdefault(loop, [])
                    if all(code_of(r) != repeats[loop].spelled for r in planned):
                        planned.append(cst.parse_expression(repeats[loop].spelled))
                        self.report(loop, "DDP315", loader=repeats[loop].spelled)
                return
            if not passes or not all(self._runs_once(loop, depth=3) for loop in passes):
                self._no_epoch_loop(call, code_of(reference))
            return  # One pass over the data: a single order, and nothing to reshuffle.
        for loop, holder in epoch_loops.items():
            if m.findall(loop.body, m.Call(func=m.Attribute(attr=m.Name("set_epoch")))):
                continue
            planned = self.set_epochs.setdefault(loop, [])
            if all(code_of(r) != holder.spelled for r in planned):  # one call, if both branches of an `if` build it
                planned.append(cst.parse_expression(holder.spelled))
                again = self._runs_again(loop, depth=3)
                if again is not None:
                    # Its epochs count from 0 on every call: the sampler counts the passes instead.
                    self.advancing.add(loop)
                    self.report(loop, "DDP340", function=again, loader=holder.spelled)

    def _passes(self, holders: list[Holder]) -> list[cst.CSTNode]:
        """Where a pass over the loader starts: ``for ... in loader`` (or ``enumerate(loader)``), ``iter(loader)``."""
        loops: list[cst.CSTNode] = [loop for loop in self.analysis.nodes(cst.For) if self.analysis.reads_any(loop.iter, holders)]
        iterators = [
            c for c in self.analysis.nodes(cst.Call)
            if m.matches(c.func, m.Name("iter")) and self.analysis.reads_any(c, holders)
            and not any(self.batches.encloses(p.iter, c) for p in loops)  # type: ignore[attr-defined]
        ]  # fmt: skip
        return loops + iterators

    def _epoch_loop(self, start: cst.CSTNode, holders: list[Holder]) -> tuple[cst.For, Holder] | None:
        """The loop that repeats the pass starting at ``start``: the innermost enclosing ``for`` whose
        target names epochs, else the innermost one, searched through callers; with the loader's name there."""
        found: list[tuple[cst.For, Holder]] = []
        for loop in self.analysis.loops_around(start):
            if (
                isinstance(loop, cst.For) and isinstance(loop.target, cst.Name)
                and not self.analysis.reads_any(loop.iter, holders)
                and (holder := self._can_see(loop, holders)) is not None
            ):  # fmt: skip
                found.append((loop, holder))
        named = [(loop, holder) for loop, holder in found if "ep" in loop.target.value.lower()]  # type: ignore[attr-defined]
        return (named or found or [None])[0]

    def _rebuilt(self, node: cst.CSTNode, depth: int) -> bool:
        """Whether ``node`` runs again for every turn of a loop: in one, or in a function called once, from one."""
        return self._in_a_loop(node, depth) is True

    def _runs_again(self, loop: cst.For, depth: int) -> str | None:
        """The function around ``loop`` that runs more than once, followed out through single callers: called in
        two places or more, or from a loop. None where none is known to."""
        node: cst.CSTNode = loop
        for _ in range(depth + 1):
            function = next((a for a in self.analysis.ancestors(node) if isinstance(a, (cst.For, cst.While, cst.FunctionDef))), None)
            if not isinstance(function, cst.FunctionDef):
                return None  # an enclosing loop counts passes itself, or module level
            name = function.name.value
            method = isinstance(self.analysis.parents.get(self.analysis.parents.get(function)), cst.ClassDef)
            spelled = m.Attribute(value=m.Name("self"), attr=m.Name(name)) if method else m.Name(name)
            callers = [c for c in self.analysis.nodes(cst.Call) if m.matches(c.func, spelled)]
            if len(callers) > 1 or (len(callers) == 1 and self._in_a_loop(callers[0], 0)):
                return name
            if len(callers) != 1:
                return None
            node = callers[0]
        return None

    def _runs_once(self, node: cst.CSTNode, depth: int) -> bool:
        """Whether ``node`` runs at most once per run: in no loop, in functions each called once."""
        return self._in_a_loop(node, depth) is False

    def _in_a_loop(self, node: cst.CSTNode, depth: int) -> bool | None:
        """Whether ``node`` runs in a loop, followed out through functions called from one place only, up to
        ``depth`` callers: None where a function has several callers, or the depth runs out."""
        for ancestor in self.analysis.ancestors(node):
            if isinstance(ancestor, (cst.For, cst.While)):
                return True
            if isinstance(ancestor, cst.FunctionDef):
                name = ancestor.name.value
                callers = [
                    c for c in self.analysis.nodes(cst.Call)
                    if m.matches(c.func, m.Name(name) | m.Attribute(value=m.Name("self"), attr=m.Name(name)))
                ]  # fmt: skip
                if depth == 0 or len(callers) != 1:
                    return None
                return self._in_a_loop(callers[0], depth - 1)
        return False

    # -- training data from elsewhere ------------------------------------------------

    def _plan_split_builders(self, analysis: Analysis) -> None:
        """Loaders of another module's function that builds the evaluation loaders too: split where they train.

        ``train_data, train_loader = self._get_data(flag="train")``, where ``_get_data`` returns what
        ``data_provider(args, flag)`` of another module built: the project leaves that function's loader whole,
        and this file takes this process's share of it after each binding whose batches reach a backward.
        """
        builders: dict[str, list[int]] = {}
        for qualified, position in analysis.role.split_builders:
            builders.setdefault(qualified, []).append(position)
        if not builders:
            return
        for assign in analysis.nodes(cst.Assign):
            if len(assign.targets) != 1 or not isinstance(assign.value, cst.Call):
                continue
            positions = next((builders[q.name] for q in analysis.qualified_names(assign.value.func) if q.name in builders), [])
            if positions:
                self._split_where_trained(analysis, assign, positions)

    def _split_where_trained(self, analysis: Analysis, assign: cst.Assign, positions: list[int]) -> None:
        """The share of each loader of what ``assign`` binds (at ``positions`` of it), taken after each binding that
        trains; the others stay whole."""
        targets: list[cst.BaseExpression] = []
        for position in positions:
            target = assign.targets[0].target
            if position >= 0:
                if not isinstance(target, (cst.Tuple, cst.List)) or len(target.elements) <= position:
                    continue
                target = target.elements[position].value
            targets.append(target)
        training: list[_Site] = []
        evaluation: list[_Site] = []
        # Returned by a function of this file (`_get_data(flag)`), it is judged where that function's callers bind it.
        for bound, where in [found for target in targets for found in self._returned_again(target) or [(target, assign)]]:
            holders = self.batches.loader_holders([], analysis.target_holders(bound))
            statement = analysis.parents.get(where)
            if self.batches.feeds_backward(holders) and isinstance(statement, cst.SimpleStatementLine):
                if m.matches(bound, m.Name() | m.Attribute(value=m.Name())):
                    training.append(_Site(bound, where, statement))
            else:
                evaluation.append(_Site(bound, where, statement))  # type: ignore[arg-type]
        builder = code_of(assign.value.func)  # type: ignore[attr-defined]
        at = {analysis.position(site.assign).start.line for site in evaluation}
        if not at:
            # `val_loader = get_loader(val=True)` on a line of its own: the other bindings of the builder's loaders.
            at = {
                analysis.position(other).start.line for other in analysis.nodes(cst.Assign)
                if other is not assign and isinstance(other.value, cst.Call) and code_of(other.value.func) == builder
            }  # fmt: skip
        lines = ", ".join(str(line) for line in sorted(at)) or "another module"
        for site in training:
            keep = self.keep_per_process_batch or self._pair_loss is not None
            if code_of(site.target) in (target for target, _ in self.split_at_use.get(site.statement, [])):
                continue
            if not split_where_used(analysis, analysis.target_holders(site.target, depth=0)):  # converted already
                self.split_at_use.setdefault(site.statement, []).append((code_of(site.target), keep))
                self.split_helper_needed = True
            self.split_names.add(code_of(site.target))
            analysis.sharded_names.add(code_of(site.target).rsplit(".", 1)[-1])
            self.report(site.assign, "DDP327", loader=code_of(site.target), builder=builder, lines=lines)
            if self._pair_loss is not None and not self.keep_per_process_batch:
                self._report_pairing(site.assign.value, batch=f"{code_of(site.target)}.batch_size")  # type: ignore[arg-type]

    def _returned_again(self, bound: cst.BaseExpression) -> list[tuple[cst.BaseExpression, cst.Assign]]:
        """Where the callers of the function that bound ``bound`` bind it, when the function returns it:
        ``data_set, data_loader = data_provider(...)`` then ``return data_set, data_loader``."""
        if not isinstance(bound, cst.Name):
            return []
        function = next((a for a in self.analysis.ancestors(bound) if isinstance(a, cst.FunctionDef)), None)
        if function is None:
            return []
        returned = [
            n for r in self.analysis.within(function, cst.Return) if r.value is not None
            for n in ([r.value] if isinstance(r.value, cst.Name) else [e.value for e in r.value.elements] if isinstance(r.value, cst.Tuple) else [])
            if isinstance(n, cst.Name) and n.value == bound.value
        ]  # fmt: skip
        return [found for value in returned for found in self.analysis.returned_to(value)]

    def _report_data_from_elsewhere(self, analysis: Analysis, loaders: list[cst.CSTNode]) -> None:
        # Batches of a loader split where it is bound, read there or handed a function as its parameter (`train(train_loader)`).
        unsplit = [
            u for u in self.batches.unsplit_batches(loaders)
            if not analysis.reads(u.source) & self.split_names and not self.batches.handed_from(u.source, self.split_names, u.loop)
        ]  # fmt: skip
        for found in unsplit:
            self.report(found.node, found.code, source=found.spelled)
        handed = self.batches.handed_unsplit(loaders)
        for found in handed:
            self.report(found.node, "DDP345", source=found.spelled, callee=found.callee, site=found.site)
        wraps = self.facts.model_wraps or self.facts.imported_wraps
        role = analysis.role
        if not loaders and not unsplit and not handed and wraps and not role.loader_sources and not role.program_loaders and not role.evaluates_only:
            # A script run on its own that trains through another module (`engine.run(model)`) would train every
            # process on that module's unsplit loader; a module others import only builds the model.
            runs = main_guard(analysis.module) is not None and self._handed_to_another_module(analysis)
            self.report(wraps[0], "DDP325" if runs else "DDP306")

    def _handed_to_another_module(self, analysis: Analysis) -> bool:
        """Whether the wrapped model is passed to something imported from outside torch: an engine, a trainer."""
        models = analysis.lifecycle.model_names | analysis.effects.models
        for call in analysis.nodes(cst.Call):
            if not any(code_of(a.value) in models for a in call.args):
                continue
            imported = [q.name for q in analysis.qualified_names(call.func) if q.source is QualifiedNameSource.IMPORT]
            if imported and not any(name.split(".")[0] == "torch" for name in imported):
                return True
        return False

    def _report_gpu_count_scaling(self, analysis: Analysis) -> None:
        """``batch_size *= n_gpu``, ``workers = 4 * torch.cuda.device_count()``: DataParallel's habits.

        Where the value provably reaches a DataLoader and the count is provably
        ``torch.cuda.device_count()``, a batch is scaled by the world size instead
        (the count of processes, which is the GPU count on one node) and a worker
        count loses the factor, since each process starts its own loader.
        """
        loaders = [c for c in analysis.findall(call_to(names.DATA_LOADER)) if isinstance(c, cst.Call)]
        batches: set[str] = set()
        workers: set[str] = set()
        for loader in loaders:
            parent = analysis.parents.get(loader)
            reference = parent.targets[0].target if isinstance(parent, cst.Assign) and len(parent.targets) == 1 else None
            batch = argument(loader, BATCH_SIZE, "batch_size")
            if batch is not None and is_training_loader(loader, reference, len(loaders) == 1):
                batches |= analysis.reads(batch)
            count = argument(loader, 5, "num_workers")
            if count is not None:
                workers |= analysis.reads(count)
        for scaling in gpu_count_scalings(analysis):
            node, scaled, factors, count = scaling.node, [scaling.scaled], scaling.factors, scaling.count
            feeds = len(scaling.targets) == 1 and scaling.exact
            if "worker" in scaled[0].lower():
                if feeds and isinstance(node, cst.Assign) and len(factors) > 1 and analysis.flows_from({scaled[0]}) & workers:
                    value = self._with_factor(node.value, count, None)
                    self.gpu_count_scaling[node] = value
                    what = f"the factor is dropped, since each process starts its own loader: `{scaled[0]} = {code_of(value)}`"
                    self.report(node, "DDP335", target=scaled[0], count=code_of(count), what=what)
                    continue
                advice = "each process now starts that many loader workers: drop the scaling"
            else:
                if feeds and analysis.flows_from({scaled[0]}) & batches and runs_after_setup(analysis, node):
                    world_size = cst.parse_expression(f"{self.distributed_at(node)}.get_world_size()")
                    self.gpu_count_scaling[node] = self._with_factor(node.value, count, world_size)
                    what = (
                        f"it is scaled by `{code_of(world_size)}` instead, the number of processes, which is the GPU "
                        "count on one node and stays right on several"
                    )
                    self.report(node, "DDP335", target=scaled[0], count=code_of(count), what=what)
                    continue
                advice = (
                    "convert divides the loader's batch by the world size, which keeps this global batch only "
                    "while the count equals the number of processes (one node, one process per GPU): "
                    "scale by dist.get_world_size() instead"
                )
            self.report(node, "DDP318", target=scaled[0], count=code_of(count), advice=advice)

    def _with_factor(
        self, value: cst.BaseExpression, count: cst.BaseExpression, replacement: cst.BaseExpression | None
    ) -> cst.BaseExpression:
        """``value`` with the factor ``count`` replaced by ``replacement``, or dropped where that is None."""
        if value is count:
            assert replacement is not None
            return replacement
        if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Multiply):
            if replacement is None and value.right is count:
                return value.left
            if replacement is None and value.left is count:
                return value.right
            return value.with_changes(
                left=self._with_factor(value.left, count, replacement),
                right=self._with_factor(value.right, count, replacement),
            )
        return value

    def leave_AugAssign(self, original_node: cst.AugAssign, updated_node: cst.AugAssign) -> cst.AugAssign:
        value = self.gpu_count_scaling.get(original_node)
        return updated_node if value is None else updated_node.with_changes(value=value)

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> cst.Assign:
        value = self.gpu_count_scaling.get(original_node)
        if value is None or not updated_node.value.deep_equals(original_node.value):
            return updated_node  # another codemod edited the value: leave it to that one
        return updated_node.with_changes(value=value)


    def _encloses(self, outer: cst.CSTNode, inner: cst.CSTNode) -> bool:
        return bool(m.findall(outer.body, m.MatchIfTrue(lambda n: n is inner)))  # type: ignore[attr-defined]

    def _can_see(self, loop: cst.For | cst.While, holders: list[Holder]) -> Holder | None:
        """The name under which code at ``loop`` sees the loader, if any: the insert must refer to it there."""
        return next((h for h in holders if self.analysis.visible(h, loop)), None)

    # -- rewriting ------------------------------------------------------------------

    def _plan_worker_seeds(self, analysis: Analysis) -> None:
        """``torch.manual_seed(worker_info.id)`` where ``worker_info = torch.utils.data.get_worker_info()``: a dataset
        that seeds each loader worker from its id alone seeds the workers of every process alike, so each process
        would draw the same augmentations for different samples. The rank is mixed in (DDP344); rank 0 draws as
        the script did."""
        info = m.Call(func=m.MatchIfTrue(lambda f: bool({q.name for q in analysis.qualified_names(f)} & {"torch.utils.data.get_worker_info"})))
        holders = {
            code_of(t.target) for a in analysis.nodes(cst.Assign) if m.matches(a.value, info) for t in a.targets if isinstance(t.target, cst.Name)
        }  # fmt: skip
        worker_id = m.Attribute(value=m.Name(m.MatchIfTrue(lambda n: n in holders)) | info, attr=m.Name("id"))
        for call in analysis.findall(call_to(names.SEEDING_CALLS)):
            assert isinstance(call, cst.Call)
            if len(call.args) != 1 or call.args[0].keyword is not None or not self.analysis.findall_in(call.args[0].value, worker_id):
                continue
            reads = {n.value for n in analysis.within(call.args[0].value, cst.Name)}
            if reads & {"initial_seed", "get_rank", "rank", "local_rank", "environ"}:
                continue  # seeded from something per process already
            self.worker_seeds.add(call)
            self.report(call, "DDP344", call=code_of(call))

    def _built_in_a_loop(self, call: cst.Call) -> bool:
        """Whether ``call`` runs in a loop of its own function, once for each pass or more."""
        for ancestor in self.analysis.ancestors(call):
            if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                return False
            if isinstance(ancestor, (cst.For, cst.While)) and call not in self.analysis.within(ancestor.iter if isinstance(ancestor, cst.For) else ancestor.test, cst.Call):
                return True
        return False

    def _rank_in_seed(self, call: cst.Call) -> cst.Call:
        """``torch.manual_seed(worker_info.id)`` -> ``torch.manual_seed(worker_info.id + 104729 * rank)``: distinct
        for every worker of every process while workers are fewer than 104729; the rank comes from the launcher's
        environment, which loader workers inherit."""
        AddImportsVisitor.add_needed_import(self.context, "os")
        seed = call.args[0].value
        if not isinstance(seed, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)):
            seed = seed.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        mixed = cst.BinaryOperation(left=seed, operator=cst.Add(), right=cst.parse_expression('104729 * int(os.environ.get("RANK", "0"))'))
        return call.with_changes(args=[call.args[0].with_changes(value=mixed)])

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        if original_node in self.worker_seeds:
            return self._rank_in_seed(updated_node)
        edit = self.sampler_edits.get(original_node)
        if edit is not None:
            return self._split_sampler(updated_node, edit, whole=original_node in self.whole_batches)
        if original_node not in self.plans:
            return updated_node
        split = self._split_loader(original_node, updated_node)
        if original_node in self.drawn_per_process:
            split = self._drawn_per_process(original_node, split)
        workers = argument(original_node, WORKERS, "num_workers")
        unpacked = [arg for arg in original_node.args if arg.star == "**"]
        if self.SHARDS_EVALUATION or (workers is None and not unpacked) or m.matches(workers, m.Integer("0")):
            return split
        split = self._worker_init_per_process(split)
        if argument(original_node, 99, "generator") or len(unpacked) > 1:
            return split  # a generator of its own, or dicts of which any may hold one
        # The workers' seeds are drawn from the loader's generator: seeded alike on every process, they
        # would draw the same augmentations for different samples. Each process draws its own.
        # A loader built anew on each pass (`iter(DataLoader(...))` every `epoch_size` steps) would get the same
        # generator each time, so its workers would repeat the first pass's augmentations: its seed is drawn from
        # torch's generator instead, which advances as the script's loader's own draw did.
        base = "int(torch.empty((), dtype=torch.int64).random_())" if self._built_in_a_loop(original_node) else "torch.initial_seed()"
        seed = cst.parse_expression(
            f"torch.Generator().manual_seed(({base} + {self.distributed_at(original_node)}.get_rank()) % 2**63)"
        )
        AddImportsVisitor.add_needed_import(self.context, "torch")
        if not unpacked:
            return with_argument(split, keyword_arg("generator", seed))
        # `**kwargs` may hold `num_workers` and a generator of its own: the generator goes in first, so the
        # dict's own wins where it has one, and the loader gets exactly one either way.
        first = cst.DictElement(cst.SimpleString('"generator"'), seed)
        args = []
        for arg in split.args:
            if arg.star == "**" and isinstance(arg.value, cst.Dict):  # `**{**kwargs, "batch_size": ...}`, as split
                arg = arg.with_changes(value=arg.value.with_changes(elements=[first, *arg.value.elements]))
            elif arg.star == "**":
                arg = arg.with_changes(value=cst.Dict([first, cst.StarredDictElement(arg.value)]))
            args.append(arg)
        return split.with_changes(args=args)

    def _draws_alike(self, call: cst.Call) -> bool:
        """A split training loader that may have no workers (none given, 0, or an option such as
        `num_workers=args.workers` that may be 0), in a file that draws augmentations (DDP338)."""
        workers = argument(call, WORKERS, "num_workers")
        some_workers = isinstance(workers, cst.Integer) and workers.evaluated_value > 0
        return not some_workers and not any(a.star == "*" for a in call.args) and self._draws_augmentations

    @cached_property
    def _draws_augmentations(self) -> bool:
        """Whether the program draws random augmentations: a torchvision ``Random*`` transform, or a draw from
        ``random``, ``numpy.random`` or torch in a dataset class (one with ``__getitem__``), in this file or in
        another module of its programs."""
        if self.analysis.role.augmentations is not None:
            return True
        for call in self.analysis.nodes(cst.Call):
            qualified = {q.name for q in self.analysis.qualified_names(call.func)}
            if any(q.startswith("torchvision.transforms.") and q.rsplit(".", 1)[-1].startswith("Random") for q in qualified):
                return True
            if any(_draws_shared(q) for q in qualified) and not argument(call, 99, "generator") and _per_item(self.analysis, call):
                return True
        return False

    def _drawn_per_process(self, original: cst.Call, loader: cst.Call) -> cst.Call:
        """``DataLoader(data, ...)`` becomes ``DataLoader(DrawnPerProcess(data, rank), ...)``; the sampler keeps ``data``."""
        index = next((i for i, a in enumerate(loader.args) if (a.keyword is None and i == 0) or (a.keyword is not None and a.keyword.value == "dataset")), None)
        if index is None or m.matches(loader.args[index].value, m.Call(func=m.Name(names.DRAWN_PER_PROCESS_HELPER))):
            return loader
        self.drawn_helper_needed = True
        wrapped = cst.Call(
            func=cst.Name(names.DRAWN_PER_PROCESS_HELPER),
            args=[cst.Arg(loader.args[index].value, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))), cst.Arg(cst.parse_expression(f"{self.distributed_at(original)}.get_rank()"))],
        )
        args = list(loader.args)
        args[index] = args[index].with_changes(value=wrapped)
        return loader.with_changes(args=args)

    def _worker_init_per_process(self, loader: cst.Call) -> cst.Call:
        """``worker_init_fn=seed_worker`` becomes ``WorkerInitPerProcess(seed_worker, rank)``.

        A script's worker_init_fn commonly seeds ``random`` and NumPy from a fixed seed and the
        worker id (``random.seed(args.seed + worker_id)``): alike on every process, so each would
        draw the same crops and flips for different samples. After it runs, the rank is mixed in.
        """
        index = next((i for i, a in enumerate(loader.args) if a.keyword is not None and a.keyword.value == "worker_init_fn"), None)
        if index is None:
            return loader
        given = loader.args[index]
        if m.matches(given.value, m.Name("None") | m.Call(func=m.Name(names.WORKER_INIT_HELPER))):
            return loader
        self.worker_helper_needed = True
        wrapped = cst.parse_expression(f"{names.WORKER_INIT_HELPER}(__f, {self.facts.distributed_alias}.get_rank())")
        wrapped = wrapped.with_changes(args=[cst.Arg(given.value, comma=wrapped.args[0].comma), wrapped.args[1]])  # type: ignore[attr-defined]
        args = list(loader.args)
        args[index] = given.with_changes(value=wrapped)
        return loader.with_changes(args=args)

    def _split_loader(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        plan = self.plans[original_node]
        if plan.own_sampler is not None:
            return self._split_own_sampler(original_node, updated_node, plan)
        if original_node in self.unpacked:
            return self._split_unpacked(original_node, updated_node, plan)
        dataset = cst.Name(plan.hoisted_dataset) if plan.hoisted_dataset else plan.dataset
        shuffle = argument(updated_node, SHUFFLE, "shuffle") or cst.Name("False")
        placeholder = self.placeholders.get(original_node)
        if placeholder is not None and m.matches(
            shuffle, m.Comparison(left=m.Name(placeholder), comparisons=[m.ComparisonTarget(m.Is(), m.Name("None"))])
        ):
            shuffle = cst.Name("True")  # `shuffle=(train_sampler is None)` with the sampler always None
        sampler = self._loader_sampler(original_node, dataset, shuffle)
        args: list[cst.Arg] = []
        placed = False
        for position, arg in enumerate(updated_node.args):
            # `**kwargs` beside an explicit `shuffle=True` stays as it is (_unpacked_beside_explicit_shuffle).
            keyword = arg.keyword.value if arg.keyword else arg.star or ("dataset", "batch_size", "shuffle", "sampler", "batch_sampler")[position]
            if keyword in ("sampler", "batch_sampler") and m.matches(arg.value, m.Name("None")):
                continue  # no sampler at all: the DistributedSampler takes its place
            if keyword == "dataset":
                args.append(arg.with_changes(value=dataset) if plan.hoisted_dataset else arg)
            elif keyword == "batch_size":
                value = arg.value if original_node in self.per_process_calls else self._per_process(arg.value, original_node)
                args.append(keyword_arg("batch_size", value, arg.comma))
            elif keyword == "shuffle":
                args.append(keyword_arg("sampler", sampler, arg.comma))
                placed = True
            elif keyword == "sampler" and placeholder is not None:
                continue  # the placeholder gives way to the DistributedSampler
            else:
                args.append(arg)
        if args and len(args) < len(updated_node.args):
            # The dropped last argument leaves its comma and layout (a closing bracket on its own line).
            last = updated_node.args[-1]
            args[-1] = args[-1].with_changes(comma=last.comma, whitespace_after_arg=last.whitespace_after_arg)
        if not placed:
            after = next((i for i, a in enumerate(args) if a.keyword and a.keyword.value == "batch_size"), len(args) - 1)
            comma = args[after].comma
            args[after] = args[after].with_changes(comma=cst.MaybeSentinel.DEFAULT if comma == cst.MaybeSentinel.DEFAULT else comma)
            args.insert(after + 1, keyword_arg("sampler", sampler, comma if after + 1 < len(args) else cst.MaybeSentinel.DEFAULT))
        return updated_node.with_changes(args=args)

    def _split_sampler(self, sampler: cst.Call, edit: str, whole: bool = False) -> cst.Call:
        if edit in ("shuffle", "sequential"):
            return self._sampler(sampler.args[0].value, cst.Name("True" if edit == "shuffle" else "False"))
        return self._sharded(sampler, batches=edit == "batch_sampler" and not whole, site=self.sites.get(sampler))

    def _sharded(
        self,
        sampler: cst.BaseExpression,
        batches: bool = False,
        batch_size: cst.BaseExpression | None = None,
        site: str | None = None,
    ) -> cst.Call:
        self.helpers_needed = True
        args = [cst.Arg(sampler)]
        if batches and not self.keep_per_process_batch:
            args.append(keyword_arg("split_batches", cst.Name("True")))
        if batch_size is not None:
            args.append(keyword_arg("batch_size", batch_size.deep_clone()))
        if site is not None:
            args.append(keyword_arg("site", cst.SimpleString(f'"{site}"' if '"' not in site else repr(site))))
        return cst.Call(func=cst.Name(names.SHARDED_SAMPLER_HELPER), args=args)

    def _split_own_sampler(self, original_node: cst.Call, updated_node: cst.Call, plan: _LoaderPlan) -> cst.Call:
        """The loader keeps its own sampler, split where it is built or wrapped here; the batch is divided as usual."""
        args: list[cst.Arg] = []
        for position, arg in enumerate(updated_node.args):
            keyword = arg.keyword.value if arg.keyword else ("dataset", "batch_size", "shuffle", "sampler", "batch_sampler")[position]
            if keyword == "batch_size" and original_node not in self.per_process_calls:
                arg = arg.with_changes(value=self._per_process(arg.value, original_node))
            elif keyword == "shuffle" and original_node in self.maybe_none:
                continue  # the shuffle goes into the order that stands in for a sampler of None
            elif keyword == plan.own_sampler and plan.wrap_at_loader:
                if original_node in self.maybe_none:
                    # `ShardedSampler(sampler if sampler is not None else RandomSampler(data))`
                    shuffle = argument(original_node, SHUFFLE, "shuffle") or cst.Name("False")
                    if m.matches(shuffle, m.Comparison(left=m.Name(code_of(arg.value)), comparisons=[m.ComparisonTarget(m.Is(), m.Name("None"))])):
                        shuffle = cst.Name("True")  # `shuffle=(sampler is None)`, where it is None
                    dataset = argument(updated_node, 0, "dataset")
                    assert dataset is not None
                    order = self._order(dataset, shuffle)
                    absent = cst.Comparison(arg.value, [cst.ComparisonTarget(cst.IsNot(), cst.Name("None"))])
                    arg = arg.with_changes(value=cst.IfExp(test=absent, body=arg.value, orelse=order))
                batch = argument(original_node, BATCH_SIZE, "batch_size")
                whole = None
                if keyword == "sampler" and batch is not None:
                    whole = batch
                    if self.keep_per_process_batch or original_node in self.per_process_calls:
                        # Each process keeps the batch: the global batch, cut into whole batches per process, is W of them.
                        whole = times_world_size(batch, self.distributed_at(original_node))
                arg = arg.with_changes(
                    value=self._sharded(
                        arg.value, batches=keyword == "batch_sampler" and original_node not in self.per_process_calls,
                        batch_size=whole, site=self.sites.get(original_node),
                    )
                )
            args.append(arg)
        return updated_node.with_changes(args=args)

    def _split_unpacked(self, original_node: cst.Call, updated_node: cst.Call, plan: _LoaderPlan) -> cst.Call:
        """``DataLoader(data, **kwargs)``: the batch and shuffle are overridden in the unpacked dict, the sampler added."""
        keys = self.unpacked[original_node]
        name = keys.name
        overrides: list[cst.BaseDictElement] = [cst.StarredDictElement(cst.Name(name))]
        if "batch_size" in keys.always and original_node not in self.per_process_calls:
            batch = self._per_process(cst.parse_expression(f'{name}["batch_size"]'), original_node)
            overrides.append(cst.DictElement(cst.SimpleString('"batch_size"'), batch))
        shuffle: cst.BaseExpression = cst.Name("False")
        if keys.always & {"shuffle"}:
            shuffle = cst.parse_expression(f'{name}["shuffle"]')
        elif keys.maybe & {"shuffle"}:
            shuffle = cst.parse_expression(f'{name}.get("shuffle", False)')
        if "shuffle" in keys.always | keys.maybe:
            # A sampler and shuffle=True together are refused by DataLoader; the sampler shuffles instead.
            overrides.append(cst.DictElement(cst.SimpleString('"shuffle"'), cst.Name("False")))
        kwargs = cst.Dict(overrides) if len(overrides) > 1 else cst.Name(name)
        sampler = self._loader_sampler(original_node, plan.dataset, shuffle)
        dataset = updated_node.args[0]
        return updated_node.with_changes(
            args=[
                dataset,
                cst.Arg(kwargs, star="**", comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                keyword_arg("sampler", sampler),
            ]
        )

    def _loader_sampler(self, loader: cst.Call, dataset: cst.BaseExpression, shuffle: cst.BaseExpression) -> cst.Call:
        """The sampler a loader without one gets: a DistributedSampler, or one that reshuffles by itself."""
        if loader not in self.self_advancing:
            return self._sampler(dataset, shuffle)
        # No epoch loop calls set_epoch: a sampler that reshuffles on every pass by itself.
        return self._sharded(self._order(dataset, shuffle), site=self.sites.get(loader))

    def _order(self, dataset: cst.BaseExpression, shuffle: cst.BaseExpression) -> cst.BaseExpression:
        """The sampler a DataLoader builds for itself from ``shuffle=``: ``RandomSampler`` or ``SequentialSampler``."""
        random = cst.Call(func=cst.Name("RandomSampler"), args=[cst.Arg(dataset)])
        sequential = cst.Call(func=cst.Name("SequentialSampler"), args=[cst.Arg(dataset)])
        if not m.matches(shuffle, m.Name("False")):
            AddImportsVisitor.add_needed_import(self.context, "torch.utils.data", "RandomSampler")
        if m.matches(shuffle, m.Name("True")):
            return random
        AddImportsVisitor.add_needed_import(self.context, "torch.utils.data", "SequentialSampler")
        if m.matches(shuffle, m.Name("False")):
            return sequential
        if isinstance(shuffle, (cst.IfExp, cst.Lambda, cst.NamedExpr)) and not shuffle.lpar:
            # `shuffle=True if sampler is None else False`: a conditional as a test needs its parentheses.
            shuffle = shuffle.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        return cst.IfExp(test=shuffle, body=random, orelse=sequential)

    def _sampler(self, dataset: cst.BaseExpression, shuffle: cst.BaseExpression) -> cst.Call:
        AddImportsVisitor.add_needed_import(self.context, "torch.utils.data.distributed", "DistributedSampler")
        return cst.Call(func=cst.Name("DistributedSampler"), args=[cst.Arg(dataset), keyword_arg("shuffle", shuffle)])

    def _per_process(self, batch: cst.BaseExpression, loader: cst.Call) -> cst.BaseExpression:
        """``batch // dist.get_world_size()``, spelled so that no name bound where ``loader`` is shadows it."""
        if self.keep_per_process_batch:
            return batch
        if not m.matches(batch, m.Name() | m.Attribute() | m.Integer() | m.Call() | m.Subscript()):
            batch = batch.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        divided = cst.BinaryOperation(
            left=batch,
            operator=cst.FloorDivide(),
            right=cst.Call(func=cst.parse_expression(f"{self.distributed_at(loader)}.get_world_size")),
        )
        if loader not in self.floored:
            return divided
        return cst.Call(func=cst.Name("max"), args=[cst.Arg(cst.Integer("1")), cst.Arg(divided)])

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        if original_node in self.noise_lines:
            return cst.With(
                items=[cst.WithItem(cst.Call(func=cst.Name(names.PER_PROCESS_RANDOM_HELPER)))],
                body=cst.IndentedBlock([updated_node.with_changes(leading_lines=[])]),
                leading_lines=updated_node.leading_lines,
            )
        if original_node in self.dropped_lines:
            return cst.RemoveFromParent()  # type: ignore[return-value]
        if original_node in self.split_at_use:
            splits = [
                cst.parse_statement(f"{target} = {names.SPLIT_LOADER_HELPER}({target}{', keep_batch=True' if keep else ''})")
                for target, keep in self.split_at_use[original_node]
            ]
            return cst.FlattenSentinel([updated_node, *splits])
        plan = self.hoists.get(original_node)
        if plan is None or plan.hoisted_dataset is None:
            return updated_node
        # The dataset is needed twice now, by the sampler and the loader.
        dataset = cst.SimpleStatementLine(
            [cst.Assign([cst.AssignTarget(cst.Name(plan.hoisted_dataset))], plan.dataset)],
            leading_lines=updated_node.leading_lines,
        )
        return cst.FlattenSentinel([dataset, updated_node.with_changes(leading_lines=[])])

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock) -> cst.IndentedBlock:
        """Noise lines that follow each other share one ``with per_process_random():`` block."""
        if not self.noise_lines:
            return updated_node
        held = m.With(items=[m.WithItem(m.Call(func=m.Name(names.PER_PROCESS_RANDOM_HELPER)))], body=m.IndentedBlock())
        body: list[cst.BaseStatement] = []
        for statement in updated_node.body:
            previous = body[-1] if body else None
            if previous is not None and not statement.leading_lines and m.matches(previous, held) and m.matches(statement, held):
                block = previous.body  # type: ignore[attr-defined]
                body[-1] = previous.with_changes(body=block.with_changes(body=[*block.body, *statement.body.body]))  # type: ignore[attr-defined]
                continue
            body.append(statement)
        return updated_node.with_changes(body=body)

    def leave_For(self, original_node: cst.For, updated_node: cst.For) -> cst.For:
        references = self.set_epochs.get(original_node)
        if not references:
            return updated_node
        assert isinstance(original_node.target, cst.Name)
        epoch = original_node.target.value
        calls = []
        for reference in references:
            sampler = f"{code_of(reference)}.{self._epoch_holder(reference)}"
            advanced = f"{sampler}.epoch + 1" if original_node in self.advancing else epoch
            calls.append(cst.parse_statement(f"{sampler}.set_epoch({advanced})"))
        return updated_node.with_changes(body=prepend_statements(updated_node.body, calls))

    def _epoch_holder(self, reference: cst.BaseExpression) -> str:
        """The loader attribute that holds the epoch: its batch sampler, where that is what convert split."""
        return "batch_sampler" if code_of(reference) in self.batch_sampled else "sampler"

    def leave_While(self, original_node: cst.While, updated_node: cst.While) -> cst.While:
        return self._restart(original_node, updated_node)

    def leave_ExceptHandler(self, original_node: cst.ExceptHandler, updated_node: cst.ExceptHandler) -> cst.ExceptHandler:
        return self._restart(original_node, updated_node)

    def _restart(self, original_node: RestartT, updated_node: RestartT) -> RestartT:
        """A new pass over the data starts here: advance each loader's sampler by one epoch first."""
        references = self.restarts.get(original_node)
        if not references:
            return updated_node
        calls = [
            cst.parse_statement(f"{code_of(r)}.{self._epoch_holder(r)}.set_epoch({code_of(r)}.{self._epoch_holder(r)}.epoch + 1)")
            for r in references
        ]
        return updated_node.with_changes(body=prepend_statements(updated_node.body, calls))

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        if self.noise_lines:
            for module_name in ("contextlib", "random", "sys", "torch"):
                AddImportsVisitor.add_needed_import(self.context, module_name)
            import_torch_distributed(self.context, self.facts.distributed_alias)
            updated_node = add_helper(updated_node, self.facts, names.PER_PROCESS_RANDOM_HELPER, PER_PROCESS_RANDOM_SOURCE)
        if not (self.helpers_needed or self.split_helper_needed or self.worker_helper_needed or self.drawn_helper_needed):
            return updated_node
        for module_name in ("random", "sys", "torch"):
            AddImportsVisitor.add_needed_import(self.context, module_name)
        import_torch_distributed(self.context, self.facts.distributed_alias)
        module = updated_node
        if self.worker_helper_needed:
            module = add_helper(module, self.facts, names.WORKER_INIT_HELPER, WORKER_INIT_SOURCE)
        if self.drawn_helper_needed:
            module = add_helper(module, self.facts, names.DRAWN_PER_PROCESS_HELPER, DRAWN_PER_PROCESS_SOURCE)
        if self.split_helper_needed:
            AddImportsVisitor.add_needed_import(self.context, "inspect")
            module = add_helper(module, self.facts, names.SPLIT_LOADER_HELPER, SPLIT_LOADER_SOURCE)
        if not (self.helpers_needed or self.split_helper_needed):
            return module
        return add_helper(module, self.facts, names.SHARDED_SAMPLER_HELPER, SHARDED_SAMPLER_SOURCE)


def _draws_shared(qualified: str) -> bool:
    """A draw from Python's, NumPy's or torch's shared random state; not a seed, a state or a generator of its own."""
    if qualified in RANDOM_DRAWS:
        return True
    module, _, name = qualified.rpartition(".")
    return module in ("random", "numpy.random") and name not in NOT_DRAWS


def _per_item(analysis: Analysis, call: cst.Call) -> bool:
    """In a method of a dataset class (one with ``__getitem__``) other than ``__init__``: drawn for each item read."""
    ancestors = list(analysis.ancestors(call))
    method = next((a for a in ancestors if isinstance(a, cst.FunctionDef)), None)
    owner = next((a for a in ancestors if isinstance(a, cst.ClassDef)), None)
    if method is None or owner is None or method.name.value == "__init__":
        return False
    return any(isinstance(s, cst.FunctionDef) and s.name.value == "__getitem__" for s in owner.body.body)


def _read_only(expression: cst.BaseExpression) -> bool:
    """A name, an attribute of one, or a subscript of one by a name or a literal (``datasets[x]``): evaluated
    again for the sampler, it reads the same dataset, so it needs no name of its own."""
    if isinstance(expression, cst.Name):
        return True
    if isinstance(expression, cst.Attribute):
        return _read_only(expression.value)
    if isinstance(expression, cst.Subscript) and len(expression.slice) == 1 and isinstance(expression.slice[0].slice, cst.Index):
        index = expression.slice[0].slice.value
        return _read_only(expression.value) and isinstance(index, (cst.Name, cst.SimpleString, cst.Integer))
    return False
