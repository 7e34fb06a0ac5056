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
"""

from __future__ import annotations

import gc
import json
import weakref
from pathlib import Path
from typing import IO, Any

import torch

# Passes recorded per sampler, and indices per pass: enough to see overlap and
# epoch boundaries without writing an ImageNet permutation every epoch.
MAX_PASSES = 3
MAX_INDICES = 200_000


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
            index = next_index(iterator)
            if new_pass:
                dataset = iterator._dataset
                if id(dataset) not in self._datasets:
                    self._datasets[id(dataset)] = len(self._datasets)
                    self._keep.append(dataset)  # so its id is not reused
                number = self._datasets[id(dataset)]
                passes = sum(1 for other in self._loader_passes if other["loader"] == number)
                iterator._dp2ddp_record = {"loader": number, "pass": passes, "training": False,
                                           **_drawn_by(iterator._index_sampler), "indices": []}  # fmt: skip
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

    def close(self) -> None:
        if self._params is not None:
            self._params.close()
        self._samplers.close()
        with self._loaders_path.open("w") as loaders:
            for record in self._loader_passes:
                loaders.write(json.dumps(record) + "\n")
