"""What each process records about how it trained, for the checks that losses cannot make.

Losses agree when the converted run is right, but they can also agree when it is
not: a re-initialised layer, an unwrapped second model or a per-rank sampler seed
leave rank 0's loss close to the reference's for many steps. DDP promises more
than equal losses, and these records check the promise directly:

- **Replicas.** After every optimizer step each process writes one float64 sum
  per parameter of that optimizer (``<name>.params.jsonl``). DDP keeps every
  rank's parameters bitwise identical, so any difference between ranks is a
  defect, whatever the losses say. Names come from the DDP-wrapped modules
  first, then from any other module that holds the parameter.
- **Initialisation after the wrap** draws other numbers on ranks other than 0,
  as an unseeded real run would (``redraw_inits_after_wrap``).
- **Process group and wraps.** Whether ``init_process_group`` ran, with which
  world size, and how many modules were wrapped in DDP, kept in the process's
  outcome file.
- **DataLoader passes.** The samples every pass of every DataLoader yields, and
  whether a batch of it was trained on (``<name>.loaders.jsonl``), with what
  drew them: the sampler's class, whether it draws with replacement, how many
  items one unsplit pass of the sampler it shards draws, and a ShardedSampler's
  own seed. The data-split check rests on these, whatever the sampler.
- **Samplers.** Every pass of a ``DistributedSampler`` records the indices it
  would yield under the script's own configuration (its ``seed``, ``epoch``,
  ``num_replicas`` and ``rank``), before verify's alignment replaces the seed,
  and the optimizer step at which the pass began (``<name>.samplers.jsonl``).
  A DataLoader pass names the DistributedSampler pass it drew from, and whether
  it was drawn to its end, so a missing ``set_epoch`` shows without the losses.
- **Samples per step.** In both runs, how many samples the DataLoader pass that
  fed each optimizer step yielded since the step before (``samples_per_step``
  in the process's outcome, the first ``MAX_STEPS_COUNTED`` steps): the ranks
  together must draw what the reference draws, not the world size times it.
- **Buffers.** At every training forward of a DDP-wrapped module where DDP
  broadcasts rank 0's buffers (or would, but for ``broadcast_buffers=False``),
  one float64 sum per buffer (``<name>.buffers.jsonl``): there they must agree.
- **Files written and collectives called** by the script's own code, with the
  line that did it (``<name>.writes.jsonl``, ``<name>.collectives.jsonl``),
  written as they happen, so what ``atexit`` hooks do counts too.
"""

from __future__ import annotations

import gc
import io
import json
import os
import sys
import weakref
from pathlib import Path
from typing import IO, Any

import torch

# Passes recorded per sampler, and indices per pass: enough to see overlap and
# epoch boundaries without writing an ImageNet permutation every epoch.
MAX_PASSES = 3
MAX_INDICES = 200_000
# Optimizer steps whose sample counts are kept; buffer checkpoints and collective calls recorded per process.
MAX_STEPS_COUNTED = 1000
MAX_BUFFER_RECORDS = 1000
MAX_COLLECTIVES = 20_000

# The torch.distributed functions every rank of the group must call together, in the same order.
COLLECTIVES = (
    "barrier", "monitored_barrier", "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor",
    "all_gather_object", "all_gather_coalesced", "broadcast", "broadcast_object_list", "reduce", "gather",
    "gather_object", "scatter", "scatter_object_list", "reduce_scatter", "reduce_scatter_tensor", "all_to_all",
    "all_to_all_single", "new_group",
)  # fmt: skip
_WRITE_MODE = frozenset("wax+")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


def _root_index(dataset: Any, index: Any) -> int:
    """``index`` into ``dataset`` as an index into the dataset under any Subsets (evaluation shards are Subsets)."""
    from torch.utils.data import Subset

    while isinstance(dataset, Subset):
        index, dataset = dataset.indices[index], dataset.dataset
    return int(index)


def _drawn_by(index_sampler: Any) -> dict[str, Any]:
    """What draws a DataLoader's indices: the sampler a BatchSampler batches, else the index sampler itself;
    whether anything it draws through draws with replacement, and how many items the innermost draws a pass."""
    from torch.utils.data import BatchSampler

    sampler = index_sampler.sampler if type(index_sampler) is BatchSampler else index_sampler
    described: dict[str, Any] = {"sampler": type(sampler).__name__, "replacement": False}
    inner = sampler
    for _ in range(4):  # ShardedSampler over a batch sampler over a sampler is as deep as convert writes
        if getattr(inner, "replacement", False) is True:
            described["replacement"] = True
        if type(inner).__name__ == "ShardedSampler" and isinstance(getattr(inner, "seed", None), int):
            described["seed"] = inner.seed
            if getattr(inner, "split_batches", False) is True:
                described.update(split_batches=True, single_batches=0)
        if getattr(inner, "sampler", None) is None:
            break
        inner = inner.sampler
    try:
        described["draws"] = len(inner)
    except TypeError:
        pass  # an endless sampler
    return described


def _distributed_pass(index_sampler: Any, latest: tuple[int, list[int]] | None) -> list[int] | None:
    """The DistributedSampler pass a new DataLoader pass draws from: the latest begun, if its sampler is this
    loader's (a BatchSampler begins it at the first draw, a bare sampler when the loader's iterator is made)."""
    if latest is None:
        return None
    sampler = index_sampler
    for _ in range(4):
        if id(sampler) == latest[0]:
            return latest[1]
        sampler = getattr(sampler, "sampler", None)
        if sampler is None:
            break
    return None


def _buffer_owners(module: torch.nn.Module, names: list[str]) -> list[str]:
    """The class of the module that holds each buffer: BatchNorm's running statistics differ for their own reason."""
    owners = []
    for name in names:
        owner_name = name.rpartition(".")[0]
        try:
            owners.append(type(module.get_submodule(owner_name)).__name__)
        except AttributeError:
            owners.append("")
    return owners


def _uninteresting_prefixes(out_dir: str) -> tuple[str, ...]:
    """Folders whose files no user means when checking for save races: verify's own, the interpreter's,
    caches and configuration under the home folder."""
    home = os.path.expanduser("~")
    folders = [str(Path(out_dir).resolve().parent), sys.prefix, sys.base_prefix, sys.exec_prefix, "/dev", "/proc",
               "/sys", os.path.join(home, ".cache"), os.path.join(home, ".config")]  # fmt: skip
    for variable in ("MPLCONFIGDIR", "TORCH_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "HF_HOME"):
        if os.environ.get(variable):
            folders.append(os.environ[variable])
    return tuple(os.path.abspath(folder).rstrip(os.sep) + os.sep for folder in folders)


def _uninteresting(path: str, prefixes: tuple[str, ...]) -> bool:
    if "__pycache__" in path or "site-packages" in path or "dist-packages" in path:
        return True
    try:
        resolved = os.path.realpath(path)
    except (OSError, ValueError):
        resolved = path
    return any(p.startswith(prefixes) for p in (path, resolved))


class _OwnCode:
    """Frames of the script and of the modules beside it, not of the libraries it calls."""

    def __init__(self, script: str, own_dir: str) -> None:
        self.script = os.path.abspath(script)
        self.folder = os.path.abspath(own_dir).rstrip(os.sep) + os.sep
        self.libraries = tuple(os.path.abspath(p).rstrip(os.sep) + os.sep for p in {sys.prefix, sys.base_prefix})

    def is_own(self, frame: Any) -> bool:
        filename = frame.f_code.co_filename
        if filename.startswith("<"):
            return False
        filename = os.path.abspath(filename)
        if filename == self.script:
            return True
        return (filename.startswith(self.folder) and not filename.startswith(self.libraries)
                and "site-packages" not in filename)  # fmt: skip

    def label(self, frame: Any) -> str:
        return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"

    def first_line(self, frame: Any) -> str | None:
        """The innermost frame of own code on the stack from ``frame`` out, as ``file.py:line``."""
        while frame is not None:
            if self.is_own(frame):
                return self.label(frame)
            frame = frame.f_back
        return None


class Observer:
    def __init__(self, name: Path, replicas: bool) -> None:
        self.replicas = replicas
        self._params: IO[str] | None = name.with_suffix(".params.jsonl").open("w", buffering=1) if replicas else None
        self._samplers: IO[str] = name.with_suffix(".samplers.jsonl").open("w", buffering=1)
        self._optimizers: dict[int, int] = {}
        self._keep: list[Any] = []  # optimizers seen, so their ids are not reused
        self._ddp: list[weakref.ref[torch.nn.Module]] = []
        self._wrapped_storages: set[int] = set()
        self._sampler_ids: dict[int, int] = {}
        self._loaders_path = name.with_suffix(".loaders.jsonl")
        self._loader_passes: list[dict[str, Any]] = []
        self._datasets: dict[int, int] = {}
        self._last_pass: dict[str, Any] | None = None
        self._sampler_passes: dict[int, int] = {}
        self._sampler_pass_now: tuple[int, list[int]] | None = None  # (sampler id, [number, pass]) begun last
        self._drawn: dict[int, int] = {}  # samples each DataLoader iterator yielded since the last optimizer step
        self._last_drawn: int | None = None  # the iterator that yielded last
        self._name = name
        self._buffers: IO[str] | None = None
        self._buffer_records = 0
        self._ddp_numbers: dict[int, int] = {}
        self._buffer_forwards: dict[int, int] = {}
        self._optimizer_steps = 0  # steps taken so far: the label of the losses recorded now
        self.facts: dict[str, Any] = {"process_group": False, "world_size": None, "ddp_modules": 0,
                                      "distributed_sampler_passes": 0, "data_parallel": 0}  # fmt: skip

    # --- process group and wraps ---------------------------------------------------------------

    def process_group_created(self) -> None:
        import torch.distributed as dist

        self.facts["process_group"] = True
        self.facts["world_size"] = dist.get_world_size()
        self.facts["backend"] = str(dist.get_backend())

    def wrapped(self, module: torch.nn.Module) -> None:
        self.facts["ddp_modules"] += 1
        self._ddp.append(weakref.ref(module))
        self._wrapped_storages.update(p.untyped_storage().data_ptr() for p in module.parameters())

    def redraw_inits_after_wrap(self, rank: int) -> None:
        """On ranks other than 0, random initialisation of a wrapped parameter after the wrap draws other numbers.

        Processes of a real run do not share one random state unless the script makes them, and DDP
        broadcasts rank 0's weights only at the wrap: a layer re-initialised after it trains apart on every
        rank. Verify forces one seed everywhere, which would hide that, so here the draw is repeated from a
        seed of the rank's own (the script's random state moves on as on rank 0), and the replica check sees it.

        Only while the script has not seeded torch itself: the seed verify forced at start-up is what a real
        unseeded run lacks, but after the script's own ``torch.manual_seed`` (any value, also through
        statistical mode's mixing) the state is the script's, and a real run draws the same weights on every
        rank; a ``manual_seed(seed + rank)`` draws other ones here as there, and the replica check sees that.
        """
        from dp2ddp.verify.noise import in_dataset_fetch

        if rank == 0:
            return
        seeded_by_script = [False]

        def noting(manual_seed: Any) -> Any:
            def seeded(*args: Any, **kwargs: Any) -> Any:
                # A dataset seeding each item (FakeData) puts the state back: it is not the script's seed.
                seeded_by_script[0] = seeded_by_script[0] or not in_dataset_fetch()
                return manual_seed(*args, **kwargs)

            return seeded

        # One function under two names, or statistical mode's mixing under both: keep them one object.
        same = torch.manual_seed is torch.random.manual_seed
        torch.manual_seed = noting(torch.manual_seed)  # type: ignore[assignment]
        torch.random.manual_seed = (  # type: ignore[assignment]
            torch.manual_seed if same else noting(torch.random.manual_seed)
        )

        def redrawing(original: Any) -> Any:
            def init(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
                result = original(tensor, *args, **kwargs)
                if seeded_by_script[0]:
                    return result
                if self._wrapped_storages and tensor.untyped_storage().data_ptr() in self._wrapped_storages:
                    redraws = self.facts["redrawn_after_wrap"] = self.facts.get("redrawn_after_wrap", 0) + 1
                    with torch.random.fork_rng(devices=[]):
                        torch.random.default_generator.manual_seed(1_000_003 * rank + redraws)
                        original(tensor, *args, **kwargs)
                return result

            return init

        # nn.init's functions and reset_parameters() all end in one of these.
        torch.Tensor.normal_ = redrawing(torch.Tensor.normal_)  # type: ignore[method-assign]
        torch.Tensor.uniform_ = redrawing(torch.Tensor.uniform_)  # type: ignore[method-assign]

    # --- replicas ------------------------------------------------------------------------------

    def optimizer_stepped(self, step: int, optimizer: torch.optim.Optimizer) -> None:
        self._count_step()
        self._optimizer_steps = step + 1
        if self._last_pass is not None:
            self._last_pass["training"] = True  # the pass that yielded the batch this step trained on
        if self._params is None:
            return
        key = id(optimizer)
        first = key not in self._optimizers
        if first:
            self._optimizers[key] = len(self._optimizers)
            self._keep.append(optimizer)
        params = [p for group in optimizer.param_groups for p in group["params"]]
        record: dict[str, Any] = {"step": step, "optimizer": self._optimizers[key]}
        if first:
            record["names"] = self._names(params)
        with torch.no_grad():
            # One float64 sum per tensor: equal tensors give equal sums bit for bit; a stack and
            # one tolist() keep it to a single device-to-host copy.
            sums = torch.stack([p.detach().sum(dtype=torch.float64) for p in params]) if params else None
        record["sums"] = [] if sums is None else sums.cpu().tolist()
        self._params.write(json.dumps(record) + "\n")

    def _names(self, params: list[torch.Tensor]) -> list[str]:
        """A readable name per parameter: its path in a DDP-wrapped module, else in the largest module holding it."""
        names: dict[int, str] = {}
        for reference in self._ddp:
            wrapper = reference()
            if wrapper is not None:
                for name, parameter in wrapper.named_parameters():
                    names.setdefault(id(parameter), name)
        missing = {id(p) for p in params} - names.keys()
        if missing:
            modules = [o for o in gc.get_objects() if isinstance(o, torch.nn.Module)]
            modules.sort(key=lambda m: -sum(1 for _ in m.parameters()))
            for module in modules:
                for name, parameter in module.named_parameters():
                    if id(parameter) in missing and id(parameter) not in names:
                        names[id(parameter)] = f"{type(module).__name__}.{name} (not in a DDP module)"
        return [names.get(id(p), f"parameter {i} (not in a module)") for i, p in enumerate(params)]

    # --- samplers ------------------------------------------------------------------------------

    def sampler_pass(self, sampler: Any, step: int, indices: list[int]) -> None:
        """A DistributedSampler starts a pass; ``indices`` is what its own configuration yields."""
        self.facts["distributed_sampler_passes"] += 1
        key = id(sampler)
        if key not in self._sampler_ids:
            self._sampler_ids[key] = len(self._sampler_ids)
            self._keep.append(sampler)
        number = self._sampler_passes.get(key, 0)
        self._sampler_passes[key] = number + 1
        record = {
            "sampler": self._sampler_ids[key], "pass": number, "step": step, "seed": sampler.seed,
            "epoch": sampler.epoch, "shuffle": sampler.shuffle, "rank": sampler.rank,
            "num_replicas": sampler.num_replicas, "drop_last": sampler.drop_last, "dataset_size": len(sampler.dataset),
        }  # fmt: skip
        if number < MAX_PASSES:
            record["indices"] = indices[:MAX_INDICES]
        self._sampler_pass_now = (key, [self._sampler_ids[key], number])
        self._samplers.write(json.dumps(record) + "\n")

    def watch_loaders(self) -> None:
        """Record the samples each DataLoader pass yields, as indices into the dataset below any Subset, and
        which passes fed an optimizer step: ranks that train on the same samples have not split the data."""
        from torch.utils.data import dataloader

        next_index = dataloader._BaseDataLoaderIter._next_index

        def recorded(iterator: Any) -> Any:
            # A pass begins where the DataLoader makes a new sampler iterator: a new DataLoader iterator, or
            # persistent workers' iterator reset for the next epoch.
            new_pass = getattr(iterator, "_dp2ddp_observed", None) is not iterator._sampler_iter
            iterator._dp2ddp_observed = iterator._sampler_iter
            try:
                index = next_index(iterator)
            except StopIteration:
                if not new_pass and getattr(iterator, "_dp2ddp_record", None) is not None:
                    iterator._dp2ddp_record["ended"] = True  # drawn to its end: the next pass is a new epoch
                raise
            if new_pass:
                dataset = iterator._dataset
                if id(dataset) not in self._datasets:
                    self._datasets[id(dataset)] = len(self._datasets)
                    self._keep.append(dataset)  # so its id is not reused
                number = self._datasets[id(dataset)]
                passes = sum(1 for other in self._loader_passes if other["loader"] == number)
                iterator._dp2ddp_record = {"loader": number, "pass": passes, "training": False,
                                           **_drawn_by(iterator._index_sampler), "indices": []}  # fmt: skip
                drew = _distributed_pass(iterator._index_sampler, self._sampler_pass_now)
                if drew is not None:
                    iterator._dp2ddp_record["distributed_sampler"] = drew
                self._loader_passes.append(iterator._dp2ddp_record)
            record = iterator._dp2ddp_record
            if record.get("split_batches") and isinstance(index, list) and len(index) == 1:
                record["single_batches"] += 1  # a batch shorter than the world size, lent whole to each rank
            if len(record["indices"]) < MAX_INDICES:
                dataset = iterator._dataset
                record["indices"].extend(_root_index(dataset, i) for i in (index if isinstance(index, list) else [index]))
            self._last_pass = record
            return index

        dataloader._BaseDataLoaderIter._next_index = recorded  # type: ignore[method-assign]

    def watch_data_parallel(self) -> None:
        """Reference only: count nn.DataParallel wraps; a script can take a path without one (a CPU branch)."""
        from torch.nn import DataParallel

        data_parallel_init = DataParallel.__init__

        def counted(wrapper: DataParallel, *args: Any, **kwargs: Any) -> None:
            data_parallel_init(wrapper, *args, **kwargs)
            self.facts["data_parallel"] += 1

        DataParallel.__init__ = counted  # type: ignore[method-assign]

    # --- samples per optimizer step ------------------------------------------------------------

    def count_samples(self) -> None:
        """Count the samples each DataLoader iterator yields; at each optimizer step, the count of the one that
        yielded last (the pass that fed the step, not an evaluation pass or a peek drawn before it)."""
        from torch.utils.data import dataloader

        next_index = dataloader._BaseDataLoaderIter._next_index

        def counted(iterator: Any) -> Any:
            index = next_index(iterator)
            key = id(iterator)
            self._drawn[key] = self._drawn.get(key, 0) + (len(index) if isinstance(index, list) else 1)
            self._last_drawn = key
            return index

        dataloader._BaseDataLoaderIter._next_index = counted  # type: ignore[method-assign]
        self.facts["samples_per_step"] = []

    def _count_step(self) -> None:
        counts = self.facts.get("samples_per_step")
        if counts is None:
            return
        if len(counts) < MAX_STEPS_COUNTED:
            counts.append(self._drawn.get(self._last_drawn, 0) if self._last_drawn is not None else 0)
        self._drawn.clear()

    # --- buffers -------------------------------------------------------------------------------

    def watch_buffers(self) -> None:
        """Record buffer sums of each DDP-wrapped module where DDP promises the ranks agree.

        A training forward (grad enabled) broadcasts rank 0's buffers before the wrapped module runs, unless
        the forward before it ran without grad or under no_sync(); then the module's own forward updates
        running statistics from each rank's batch, so between steps they differ by design. The sums are taken
        as DDP's ``_pre_forward`` returns, after that broadcast and before the module runs: at the forwards
        where DDP broadcast, and, with ``broadcast_buffers=False``, at the forwards where it would have. DDP's
        class is patched rather than hooks added to the module, so a script can still pickle its model whole.
        """
        from torch.nn.parallel import DistributedDataParallel

        pre_forward = DistributedDataParallel._pre_forward
        observer = self

        def recorded(wrapper: DistributedDataParallel, *inputs: Any, **kwargs: Any) -> Any:
            point = observer._buffer_point(wrapper)
            result = pre_forward(wrapper, *inputs, **kwargs)
            if point:
                observer._record_buffers(wrapper)
            return result

        DistributedDataParallel._pre_forward = recorded  # type: ignore[method-assign]

    def _buffer_point(self, wrapper: Any) -> bool:
        """Whether this forward is one where DDP broadcasts rank 0's buffers (or would, were it asked to)."""
        if self._buffer_records >= MAX_BUFFER_RECORDS or not torch.is_grad_enabled():
            return False
        if not wrapper.module.training or getattr(wrapper, "_use_python_reducer", False):
            return False
        if getattr(wrapper, "_delay_all_reduce_all_params", False) or not getattr(wrapper, "modules_buffers", None):
            return False
        if self._synced(wrapper):
            check = getattr(wrapper, "_check_sync_bufs_pre_fwd", None)
            return bool(check()) if callable(check) else False
        return bool(getattr(wrapper, "require_forward_param_sync", False))

    @staticmethod
    def _synced(wrapper: Any) -> bool:
        return bool(getattr(wrapper, "forward_sync_buffers", getattr(wrapper, "broadcast_buffers", True)))

    def _record_buffers(self, wrapper: Any) -> None:
        key = id(wrapper)
        if key not in self._ddp_numbers:
            self._ddp_numbers[key] = len(self._ddp_numbers)
            self._keep.append(wrapper)  # so its id is not reused
        number = self._ddp_numbers[key]
        ignored = set(getattr(wrapper, "parameters_to_ignore", ()) or ())
        named = [(name, buffer) for name, buffer in wrapper.module.named_buffers() if name not in ignored]
        if not named:
            return
        forwards = self._buffer_forwards.get(key, 0)
        self._buffer_forwards[key] = forwards + 1
        self._buffer_records += 1
        with torch.no_grad():
            sums = torch.stack([buffer.detach().sum(dtype=torch.float64) for _, buffer in named])
        record: dict[str, Any] = {"module": number, "forward": forwards, "step": self._optimizer_steps,
                                  "sums": sums.cpu().tolist()}  # fmt: skip
        if forwards == 0:
            names = [name for name, _ in named]
            record.update(names=names, broadcast_buffers=self._synced(wrapper),
                          owners=_buffer_owners(wrapper.module, names))  # fmt: skip
        if self._buffers is None:
            self._buffers = self._name.with_suffix(".buffers.jsonl").open("w", buffering=1)
        self._buffers.write(json.dumps(record) + "\n")

    # --- files written and collectives called ---------------------------------------------------

    def watch_writes(self, script: str, own_dir: str, out_dir: str) -> None:
        """Record each path the script's code opens for writing (open, os.open, torch.save to a path), once per
        path, with the script's line that did it: two processes writing one path overwrite each other."""
        own = _OwnCode(script, own_dir)
        skipped = _uninteresting_prefixes(out_dir)
        log = self._name.with_suffix(".writes.jsonl").open("w", buffering=1)
        self._keep.append(log)  # left open: atexit hooks write after close()
        seen: set[str] = set()

        def note(target: Any, call: str) -> None:
            if isinstance(target, int) or not isinstance(target, (str, bytes, os.PathLike)):
                return  # a file descriptor or a buffer: no path
            try:
                path = os.path.abspath(os.fsdecode(target))
            except (TypeError, ValueError):
                return
            if path in seen or _uninteresting(path, skipped):
                return
            line = own.first_line(sys._getframe(2))
            if line is None:
                return  # a library's own file, not one the script asked for
            seen.add(path)
            log.write(json.dumps({"path": path, "call": call, "line": line}) + "\n")

        original_open = io.open

        def watched_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            if isinstance(mode, str) and not _WRITE_MODE.isdisjoint(mode):
                note(file, "open")
            return original_open(file, mode, *args, **kwargs)

        original_os_open = os.open

        def watched_os_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> Any:
            # O_EXCL creates a file no other process can also create (tempfile's way): it cannot be shared.
            if flags & _WRITE_FLAGS and not flags & os.O_EXCL:
                note(path, "os.open")
            return original_os_open(path, flags, *args, **kwargs)

        original_save = torch.save

        def watched_save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
            note(f, "torch.save")
            return original_save(obj, f, *args, **kwargs)

        import builtins

        builtins.open = io.open = watched_open  # type: ignore[assignment]
        os.open = watched_os_open  # type: ignore[assignment]
        torch.save = watched_save  # type: ignore[assignment]

    def watch_collectives(self, script: str, own_dir: str) -> None:
        """Record each torch.distributed collective the script's code calls, in order, with its line: every rank
        must make the same calls, or the ones that do wait for the others (a hang, or an abort at exit)."""
        import torch.distributed as dist

        own = _OwnCode(script, own_dir)
        log = self._name.with_suffix(".collectives.jsonl").open("w", buffering=1)
        self._keep.append(log)  # left open: the exit barrier runs in an atexit hook, after close()
        calls = [0]

        def watching(name: str, function: Any) -> Any:
            def watched(*args: Any, **kwargs: Any) -> Any:
                caller = sys._getframe(1)
                if calls[0] < MAX_COLLECTIVES and own.is_own(caller):
                    calls[0] += 1
                    log.write(json.dumps({"call": name, "line": own.label(caller)}) + "\n")
                return function(*args, **kwargs)

            watched.__wrapped__ = function  # type: ignore[attr-defined]
            return watched

        for name in COLLECTIVES:
            function = getattr(dist, name, None)
            if callable(function):
                setattr(dist, name, watching(name, function))

    def close(self) -> None:
        if self._params is not None:
            self._params.close()
        self._samplers.close()
        if self._buffers is not None:
            self._buffers.close()
            self._buffers = None
        with self._loaders_path.open("w") as loaders:
            for record in self._loader_passes:
                loaders.write(json.dumps(record) + "\n")
