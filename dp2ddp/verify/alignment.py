"""Make the one-process reference and the W-process converted run see the same numbers.

Measured on CPU with gloo (README, "Verifying a conversion"): with these in
place a correct conversion agrees to about 1e-16 in float64 and 1e-7 in
float32, and real defects show up at 1e-4 and above.

- **Seeds** are forced before the script starts, so unseeded scripts build the
  same initial weights in both runs (DDP broadcasts rank 0's).
- **Data order.** In the reference, ``RandomSampler`` yields the permutation a
  ``DistributedSampler`` draws, ``randperm(n)`` seeded with the pass number,
  advancing one pass per full pass. In the converted run, shuffled
  ``DistributedSampler``s draw with the same seed and count epochs from the first
  ``set_epoch`` value, so ``range(1, ...)`` or a resumed ``start_epoch`` line up
  with pass 0; a missing ``set_epoch`` still repeats one order. Rank r's batch k
  is then rows r, r+W, ... of the reference's batch k.
- **Other samplers.** A sampler convert cannot turn into a DistributedSampler
  (a subset, weighted or custom sampler, or a batch sampler) is sharded by the
  ``ShardedSampler`` it writes into the script: every process draws the inner
  sampler's whole sequence seeded with ``seed + epoch`` and takes items r, r+W,
  ... In the reference such a sampler draws that sequence for pass 0, 1, ...
  (``seeded_sampler_order``), and in the converted run a ShardedSampler draws
  with the seed verify uses for the same pass (``sharded_sampler_passes``), so
  the union over ranks of step k's items is again the reference's batch k.
- **Dropout and noise** are drawn for the global batch (see ``noise``).
- **Each rank's rows on their own.** The reference's ``nn.DataParallel`` runs
  each emulated rank's rows ``x[r::W]`` through the model separately, and
  BatchNorm outside it normalises them separately, as DDP's per-process
  BatchNorm does; rank 0's rows update the running statistics, as DDP
  broadcasts rank 0's buffers. The rows are taken along the ``dim`` the script
  gave ``nn.DataParallel`` (``dim=1``: a time-major model's ``(T, B)`` input).
- **float64** (CPU): see ``float64``.
"""

from __future__ import annotations

import random
import sys
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import BatchSampler, DistributedSampler, RandomSampler, SequentialSampler

from dp2ddp.verify.noise import first_tensor

SAMPLER_SEED = 0  # DistributedSampler's default, and ShardedSampler's
SHARDED_SAMPLER = "ShardedSampler"  # the class convert writes into a script to shard any other sampler
_drawing_seeded: list[bool] = [False]  # a sampler's sequence is being drawn as ShardedSampler draws it


def force_seeds(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy
    except ImportError:
        return
    numpy.random.seed(seed)


def _to_float64(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.double() if value.dtype == torch.float32 else value
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_to_float64(item) for item in value)
    if isinstance(value, dict):
        return {key: _to_float64(item) for key, item in value.items()}
    return value


def float64() -> None:
    """Both runs compute in float64, so float noise (about 1e-7 relative in float32, amplified past 1e-2 by deep
    BatchNorm nets) falls to about 1e-16 and the tolerance measures only what the conversion changed.

    New tensors and modules are float64 by default; float32 tensors are cast where they enter: batches a
    DataLoader yields, inputs of every module, ``.float()``. Autocast is switched off: its bf16/fp16 rounding
    differs between one process and several as float32's does, only 10 to 1000 times larger.
    """
    from torch.utils.data import dataloader

    torch.set_default_dtype(torch.float64)
    next_batch = dataloader._BaseDataLoaderIter.__next__

    def batch_in_float64(self: Any) -> Any:
        return _to_float64(next_batch(self))

    dataloader._BaseDataLoaderIter.__next__ = batch_in_float64  # type: ignore[method-assign]
    torch.nn.modules.module.register_module_forward_pre_hook(lambda module, args: _to_float64(args))
    torch.Tensor.float = lambda self, *args, **kwargs: self.double(*args, **kwargs)  # type: ignore[method-assign]
    torch.nn.Module.float = torch.nn.Module.double  # type: ignore[method-assign]
    autocast_init = torch.autocast.__init__

    def autocast_off(self: Any, *args: Any, **kwargs: Any) -> None:
        autocast_init(self, *args, **{**kwargs, "enabled": False})

    torch.autocast.__init__ = autocast_off  # type: ignore[method-assign]


def rounding_noise(seed: int) -> None:
    """The noise probe: before every optimizer step, each parameter is scaled by 1 +- a few units in the
    last place (random signs), about what summing gradients in another order changes."""
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    generator = torch.Generator()
    generator.manual_seed(seed + 17)

    def nudge(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        with torch.no_grad():
            for group in optimizer.param_groups:
                for parameter in group["params"]:
                    if parameter.is_floating_point():
                        ulps = 4 * torch.finfo(parameter.dtype).eps
                        signs = torch.randint(0, 2, parameter.shape, generator=generator).to(parameter) * 2 - 1
                        parameter.mul_(1 + ulps * signs)

    register_optimizer_step_pre_hook(nudge)


def vary_script_seeds(seed: int) -> None:
    """Statistical mode: the script's own ``manual_seed``/``random.seed``/``numpy.random.seed`` calls mix in
    verify's seed, so a script that seeds itself still draws differently in each reference run."""
    torch_seed, random_seed = torch.manual_seed, random.seed

    def mixed(value: Any) -> Any:
        if value is None:
            return None
        number = value if isinstance(value, int) else zlib.crc32(repr(value).encode())  # str hashes vary per process
        return (number * 1_000_003 + seed) % 2**31

    torch.manual_seed = torch.random.manual_seed = lambda value: torch_seed(mixed(value))  # type: ignore[assignment]
    random.seed = lambda value=None, *args: random_seed(mixed(value), *args)  # type: ignore[assignment]
    try:
        import numpy
    except ImportError:
        return
    numpy_seed = numpy.random.seed
    numpy.random.seed = lambda value=None: numpy_seed(mixed(value))


def distributed_sampler_order() -> None:
    """Reference only: shuffled RandomSamplers draw DistributedSampler's permutation for pass 0, 1, ..."""
    random_sampler_iter = RandomSampler.__iter__

    def aligned_iter(self: RandomSampler) -> Iterator[int]:
        # Inside another sampler drawn the ShardedSampler way, it draws as written from the seeded generator.
        if self.replacement or self._num_samples is not None or _drawing_seeded[0]:
            yield from random_sampler_iter(self)
            return
        passes = getattr(self, "_dp2ddp_passes", 0)
        generator = torch.Generator()
        generator.manual_seed(SAMPLER_SEED + passes)
        yield from torch.randperm(len(self.data_source), generator=generator).tolist()
        # After a full pass only: a `next(iter(loader))` peek must not start a new epoch.
        self._dp2ddp_passes = passes + 1  # type: ignore[attr-defined]

    RandomSampler.__iter__ = aligned_iter  # type: ignore[method-assign]


def draw_seeded(sampler: Any, seed: int) -> list[Any]:
    """``list(sampler)`` drawn as ShardedSampler draws it: torch's CPU generator, Python's and NumPy's global
    generators and the sampler's own ``generator`` seeded with ``seed``, and every one of them as it was after."""
    numpy = sys.modules.get("numpy")
    generator = getattr(sampler, "generator", None)
    own = generator.get_state() if isinstance(generator, torch.Generator) else None
    python_state = random.getstate()
    numpy_state = numpy.random.get_state() if numpy is not None else None
    _drawing_seeded[0] = True
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        random.seed(seed)  # looked up now: statistical mode mixes its seed in here, as in the script's helper
        if numpy is not None:
            numpy.random.seed(seed % 2**32)
        if own is not None:
            generator.manual_seed(seed)  # type: ignore[union-attr]
        try:
            return list(sampler)
        finally:
            _drawing_seeded[0] = False
            random.setstate(python_state)
            if numpy is not None:
                numpy.random.set_state(numpy_state)
            if own is not None:
                generator.set_state(own)  # type: ignore[union-attr]


def _drawn_as_sharded(sampler: Any) -> bool:
    """Whether convert shards ``sampler`` with ShardedSampler: not the samplers aligned elsewhere or fixed, nor
    an endless one (without a length), whose sequence no one can draw whole."""
    from torch.utils.data.dataloader import _InfiniteConstantSampler

    if isinstance(sampler, (SequentialSampler, DistributedSampler, _InfiniteConstantSampler)):
        return False
    if isinstance(sampler, RandomSampler) and not sampler.replacement and sampler._num_samples is None:
        return False  # distributed_sampler_order aligns it with DistributedSampler
    try:
        len(sampler)
    except TypeError:
        return False
    return True


def seeded_sampler_order() -> None:
    """Reference only: any other sampler or batch sampler of a DataLoader draws ShardedSampler's sequence for
    pass 0, 1, ..., the pass number advancing after a full pass."""
    from torch.utils.data import dataloader

    next_index = dataloader._BaseDataLoaderIter._next_index
    passes: dict[int, int] = {}
    keep: list[Any] = []  # samplers counted, so their ids are not reused

    def seeded(sampler: Any) -> Iterator[Any]:
        if id(sampler) not in passes:
            passes[id(sampler)] = 0
            keep.append(sampler)
        yield from draw_seeded(sampler, SAMPLER_SEED + passes[id(sampler)])
        passes[id(sampler)] += 1  # a `next(iter(loader))` peek must not start a new epoch

    def aligned(iterator: Any) -> Any:
        # A pass begins where the DataLoader makes a new sampler iterator (a new DataLoader iterator, or
        # persistent workers reset for the next epoch); the one it made is replaced before it draws anything.
        if getattr(iterator, "_dp2ddp_sampler_iter", None) is not iterator._sampler_iter:
            index_sampler = iterator._index_sampler
            if type(index_sampler) is BatchSampler:
                sampler = index_sampler.sampler
                if _drawn_as_sharded(sampler):
                    batches = BatchSampler(seeded(sampler), index_sampler.batch_size, index_sampler.drop_last)  # type: ignore[arg-type]
                    iterator._sampler_iter = iter(batches)
            elif _drawn_as_sharded(index_sampler):
                iterator._sampler_iter = seeded(index_sampler)
            iterator._dp2ddp_sampler_iter = iterator._sampler_iter
        return next_index(iterator)

    dataloader._BaseDataLoaderIter._next_index = aligned  # type: ignore[method-assign]


def _sharded_samplers(index_sampler: Any) -> list[Any]:
    """The ShardedSamplers a DataLoader's index sampler draws through: itself, or the sampler a BatchSampler batches."""
    found, sampler = [], index_sampler
    for _ in range(4):  # a BatchSampler over a ShardedSampler is as deep as convert writes
        if type(sampler).__name__ == SHARDED_SAMPLER and isinstance(getattr(sampler, "epoch", None), int):
            found.append(sampler)
        sampler = getattr(sampler, "sampler", None)
        if sampler is None:
            break
    return found


def sharded_sampler_passes() -> None:
    """Converted run only: a ShardedSampler draws the sequence the reference draws for the same pass.

    The reference's pass number advances after a full pass. Where the script set the epoch
    (``set_epoch``), it counts from the first value the sampler saw, as ``epochs_from_first_set_epoch``
    does for DistributedSampler, so a constant or missing ``set_epoch`` still shows; where the sampler
    advanced itself after its last draw, the full passes so far count, so a ``next(iter(loader))``
    peek draws what the reference's peek draws. The script's own seed is back in place once the pass
    has drawn, so what observe records of it is the script's.

    A plain RandomSampler inside it (convert's choice for a loader without an epoch loop) yields the
    permutation the reference's RandomSampler yields for that pass: DistributedSampler's, as above.
    """
    from torch.utils.data import dataloader

    next_index = dataloader._BaseDataLoaderIter._next_index
    random_iter = RandomSampler.__iter__
    permutation_seeds: dict[int, int] = {}  # RandomSamplers drawn inside a ShardedSampler's pass, now

    def permuted(self: RandomSampler) -> Iterator[int]:
        seed = permutation_seeds.get(id(self))
        if seed is None:
            yield from random_iter(self)
            return
        generator = torch.Generator()
        generator.manual_seed(seed)
        yield from torch.randperm(len(self.data_source), generator=generator).tolist()

    RandomSampler.__iter__ = permuted  # type: ignore[method-assign]
    first: dict[int, int] = {}  # the epoch of each sampler's first pass
    last: dict[int, int] = {}  # the epoch its previous pass drew with
    finished: dict[int, int] = {}  # its passes that reached their end
    keep: list[Any] = []

    def aligned(iterator: Any) -> Any:
        if getattr(iterator, "_dp2ddp_sharded_iter", None) is iterator._sampler_iter:
            try:
                return next_index(iterator)
            except StopIteration:
                if getattr(iterator, "_dp2ddp_sharded_done", None) is not iterator._sampler_iter:
                    iterator._dp2ddp_sharded_done = iterator._sampler_iter
                    for sampler in iterator._dp2ddp_sharded:
                        finished[id(sampler)] += 1
                raise
        iterator._dp2ddp_sharded_iter = iterator._sampler_iter
        iterator._dp2ddp_sharded = sharded = _sharded_samplers(iterator._index_sampler)
        seeds = [sampler.seed for sampler in sharded]
        for sampler in sharded:
            key = id(sampler)
            if key not in first:
                first[key], finished[key] = sampler.epoch, 0
                keep.append(sampler)
                number = 0
            elif sampler.epoch == last[key] + 1:
                number = finished[key]  # it advanced itself after its last draw (or was set to just that)
            else:
                number = sampler.epoch - first[key]
            last[key] = sampler.epoch
            sampler.seed = SAMPLER_SEED + number - sampler.epoch
            inner = getattr(sampler, "sampler", None)
            if type(inner) is RandomSampler and not inner.replacement and inner._num_samples is None:
                permutation_seeds[id(inner)] = SAMPLER_SEED + number
        try:
            return next_index(iterator)  # the pass's first index: ShardedSampler draws its whole sequence now
        finally:
            permutation_seeds.clear()
            for sampler, seed in zip(sharded, seeds):
                sampler.seed = seed

    dataloader._BaseDataLoaderIter._next_index = aligned  # type: ignore[method-assign]


def epochs_from_first_set_epoch(on_pass: Callable[[DistributedSampler, list[int]], None]) -> None:
    """Converted run only: shuffled DistributedSamplers count epochs from the first value they see.

    ``on_pass`` is given each pass's indices as the script configured them (its own
    seed and epoch), before the seed is replaced, so a seed that differs per rank
    is still seen.
    """
    distributed_iter = DistributedSampler.__iter__
    first: list[int] = []

    def counted_iter(self: DistributedSampler) -> Iterator[int]:
        own = list(distributed_iter(self))
        on_pass(self, own)
        if not self.shuffle:
            return iter(own)
        if not first:
            first.append(self.epoch)
        seed, epoch = self.seed, self.epoch
        self.seed, self.epoch = SAMPLER_SEED, epoch - first[0]
        try:
            return distributed_iter(self)  # draws its permutation now, before returning
        finally:
            self.seed, self.epoch = seed, epoch

    DistributedSampler.__iter__ = counted_iter  # type: ignore[method-assign]


_inside_rank: list[bool] = [False]  # per_rank_forward is running one emulated rank's rows


def _split(value: Any, rows: int, dim: int, index: torch.Tensor) -> Any:
    if isinstance(value, torch.Tensor):
        return value.index_select(dim, index.to(value.device)) if value.dim() > dim and value.shape[dim] == rows else value
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_split(item, rows, dim, index) for item in value)
    if isinstance(value, dict):
        return {key: _split(item, rows, dim, index) for key, item in value.items()}
    return value


def _merge(parts: list[Any], dim: int, sizes: list[int], inverse: torch.Tensor) -> Any:
    """The ranks' outputs back in batch order, along the dimension that holds each rank's rows: DataParallel's
    ``dim`` where it fits, else the first that does (a seq-first model returns (T, B, ...) from a (B, T) input)."""
    first = parts[0]
    if isinstance(first, torch.Tensor):
        fits = [
            d for d in range(first.dim())
            if all(part.dim() == first.dim() and part.shape[d] == size for part, size in zip(parts, sizes))
            and all(part.shape[:d] + part.shape[d + 1:] == first.shape[:d] + first.shape[d + 1:] for part in parts)
        ]  # fmt: skip
        if not fits:
            raise TypeError("an output without the batch's rows")
        along = dim if dim in fits else fits[0]
        return torch.cat(parts, along).index_select(along, inverse.to(first.device))
    if isinstance(first, (list, tuple)) and not hasattr(first, "_fields"):
        return type(first)(_merge(list(items), dim, sizes, inverse) for items in zip(*parts))
    if isinstance(first, dict):
        return {key: _merge([part[key] for part in parts], dim, sizes, inverse) for key in first}
    raise TypeError(f"cannot merge {type(first).__name__} outputs by rows")


DATA_PARALLEL_DIM = "_dp2ddp_dim"  # the ``dim`` a script gave nn.DataParallel, kept where DataParallel keeps none


def _record_data_parallel_dim() -> None:
    """Keep the ``dim`` the script passed to ``nn.DataParallel``: without GPUs its ``__init__`` returns before
    setting ``self.dim``, and a time-major model (``dim=1``, ``(T, B)`` inputs) would be split along time."""
    from torch.nn import DataParallel

    data_parallel_init = DataParallel.__init__  # perhaps already wrapped: its own signature is not DataParallel's

    def dim_of(module: Any, device_ids: Any = None, output_device: Any = None, dim: int = 0) -> int:
        return dim

    def recorded(self: DataParallel, *args: Any, **kwargs: Any) -> None:
        data_parallel_init(self, *args, **kwargs)
        dim = dim_of(*args, **kwargs)  # DataParallel accepted these arguments, so they bind
        if isinstance(dim, int):
            object.__setattr__(self, DATA_PARALLEL_DIM, dim)

    DataParallel.__init__ = recorded  # type: ignore[method-assign]


def per_rank_forward(world: int, noise: Any) -> None:
    """Reference only: ``nn.DataParallel`` runs each emulated rank's rows ``[r::world]`` through the model on
    their own and puts the outputs back in batch order.

    That is what the converted ranks compute, so the two runs differ only in how gradients are
    summed: kernels that block a batch of 8 differently from a batch of 4 no longer make a
    rounding difference that a deep net amplifies. Each rank's rows see its own BatchNorm
    statistics and its own dropout rows; every rank starts from the same buffers, and rank 0's
    run last, so its running statistics are kept, as DDP broadcasts rank 0's.
    """
    from torch.nn import DataParallel

    _record_data_parallel_dim()
    forward = DataParallel.forward

    def per_rank(self: DataParallel, *inputs: Any, **kwargs: Any) -> Any:
        first = first_tensor((inputs, kwargs))
        dim = getattr(self, "dim", getattr(self, DATA_PARALLEL_DIM, 0))
        rows = first.shape[dim] if first is not None and first.dim() > dim else 0
        if rows < world or _inside_rank[0]:
            return forward(self, *inputs, **kwargs)
        groups = [torch.arange(r, rows, world) for r in range(world)]
        inverse = torch.argsort(torch.cat(groups))
        buffers = [buffer.detach().clone() for buffer in self.module.buffers()]
        calls, outputs = noise.calls, [None] * world
        _inside_rank[0] = True
        try:
            for r in reversed(range(world)):
                for buffer, saved in zip(self.module.buffers(), buffers):
                    buffer.data.copy_(saved)
                noise.calls = calls
                with noise.as_rank(r, world, len(groups[r])):
                    outputs[r] = self.module(*_split(inputs, rows, dim, groups[r]), **_split(kwargs, rows, dim, groups[r]))
            merged = _merge(outputs, dim, [len(group) for group in groups], inverse)
        except TypeError:  # outputs that are not rows of the batch: one whole-batch forward instead
            for buffer, saved in zip(self.module.buffers(), buffers):
                buffer.data.copy_(saved)
            noise.calls = calls
            _inside_rank[0] = False
            return forward(self, *inputs, **kwargs)
        finally:
            _inside_rank[0] = False
        return merged

    DataParallel.forward = per_rank  # type: ignore[method-assign]


def per_rank_batch_norm(world: int) -> None:
    """Reference only: BatchNorm statistics over each emulated rank's rows, where the model is not run
    through ``nn.DataParallel`` (``per_rank_forward`` splits the rows itself there)."""
    batch_norm = F.batch_norm

    def emulated(
        input: torch.Tensor,
        running_mean: torch.Tensor | None,
        running_var: torch.Tensor | None,
        weight: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
        training: bool = False,
        momentum: float = 0.1,
        eps: float = 1e-5,
    ) -> torch.Tensor:
        if not training or input.shape[0] < world or _inside_rank[0]:
            return batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)
        groups = [
            batch_norm(input[r::world], *((running_mean, running_var) if r == 0 else (None, None)), weight, bias,
                       training, momentum, eps)
            for r in range(world)
        ]  # fmt: skip
        order = torch.cat([torch.arange(r, input.shape[0], world) for r in range(world)])
        return torch.cat(groups)[torch.argsort(order).to(input.device)]

    F.batch_norm = emulated
