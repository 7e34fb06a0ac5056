"""Make the one-process reference and the W-process converted run see the same numbers.

Measured on CPU with gloo (DESIGN.md, "Verifying equivalence"): with these in
place a correct conversion agrees to about 1e-6, and real defects show up at
1e-4 and above.

- **Seeds** are forced before the script starts, so unseeded scripts build the
  same initial weights in both runs (DDP broadcasts rank 0's).
- **Data order.** In the reference, ``RandomSampler`` yields the permutation a
  ``DistributedSampler`` draws, ``randperm(n)`` seeded with the pass number,
  advancing one pass per full pass. In the converted run, shuffled
  ``DistributedSampler``s draw with the same seed and count epochs from the first
  ``set_epoch`` value, so ``range(1, ...)`` or a resumed ``start_epoch`` line up
  with pass 0; a missing ``set_epoch`` still repeats one order. Rank r's batch k
  is then rows r, r+W, ... of the reference's batch k.
- **Dropout** draws one mask for the whole global batch from a per-call seed;
  each rank keeps rows ``[rank::world]``. Or it is switched off in both runs.
- **BatchNorm** in the reference normalises each rank's rows ``x[r::W]`` on its
  own, as DDP's per-process BatchNorm does; rank 0's rows update the running
  statistics, as DDP broadcasts rank 0's buffers.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DistributedSampler, RandomSampler

from dp2ddp.verify.config import RunConfig

SAMPLER_SEED = 0  # DistributedSampler's default


def force_seeds(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy
    except ImportError:
        return
    numpy.random.seed(seed)


def distributed_sampler_order() -> None:
    """Reference only: shuffled RandomSamplers draw DistributedSampler's permutation for pass 0, 1, ..."""
    random_sampler_iter = RandomSampler.__iter__

    def aligned_iter(self: RandomSampler) -> Iterator[int]:
        if self.replacement or self._num_samples is not None:
            yield from random_sampler_iter(self)
            return
        passes = getattr(self, "_dp2ddp_passes", 0)
        generator = torch.Generator()
        generator.manual_seed(SAMPLER_SEED + passes)
        yield from torch.randperm(len(self.data_source), generator=generator).tolist()
        # After a full pass only: a `next(iter(loader))` peek must not start a new epoch.
        self._dp2ddp_passes = passes + 1  # type: ignore[attr-defined]

    RandomSampler.__iter__ = aligned_iter  # type: ignore[method-assign]


def epochs_from_first_set_epoch() -> None:
    """Converted run only: shuffled DistributedSamplers count epochs from the first value they see."""
    distributed_iter = DistributedSampler.__iter__
    first: list[int] = []

    def counted_iter(self: DistributedSampler) -> Iterator[int]:
        if not self.shuffle:
            return distributed_iter(self)
        if not first:
            first.append(self.epoch)
        seed, epoch = self.seed, self.epoch
        self.seed, self.epoch = SAMPLER_SEED, epoch - first[0]
        try:
            return distributed_iter(self)  # draws its permutation now, before returning
        finally:
            self.seed, self.epoch = seed, epoch

    DistributedSampler.__iter__ = counted_iter  # type: ignore[method-assign]


def _shard(config: RunConfig) -> tuple[int, int]:
    """(rank, world): which rows of a global batch this process holds, and how many processes share it."""
    if config.role == "reference":
        return 0, 1
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def global_dropout_masks(config: RunConfig) -> None:
    rank, world = _shard(config)
    calls = 0

    def masked(channels_only: bool) -> Callable[..., torch.Tensor]:
        def dropout(input: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> torch.Tensor:
            nonlocal calls
            if not training or p == 0.0 or input.dim() == 0:
                return input
            calls += 1
            generator = torch.Generator()
            generator.manual_seed(config.seed * 1_000_003 + calls)
            rows = input.shape[0] * world
            shape = (rows, *input.shape[1:2], *[1] * (input.dim() - 2)) if channels_only else (rows, *input.shape[1:])
            keep = torch.empty(shape).bernoulli_(1.0 - p, generator=generator)[rank::world]
            mask = (keep / (1.0 - p) if p < 1.0 else keep).to(device=input.device, dtype=input.dtype)
            return input.mul_(mask) if inplace else input * mask

        return dropout

    F.dropout = masked(channels_only=False)
    F.dropout1d = F.dropout2d = F.dropout3d = masked(channels_only=True)


def no_dropout() -> None:
    def identity(input: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return input

    F.dropout = F.dropout1d = F.dropout2d = F.dropout3d = identity
    F.alpha_dropout = F.feature_alpha_dropout = identity


def per_rank_batch_norm(world: int) -> None:
    """Reference only: BatchNorm statistics over each emulated rank's rows."""
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
        if not training or input.shape[0] < world:
            return batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)
        groups = [
            batch_norm(input[r::world], *((running_mean, running_var) if r == 0 else (None, None)), weight, bias,
                       training, momentum, eps)
            for r in range(world)
        ]  # fmt: skip
        order = torch.cat([torch.arange(r, input.shape[0], world) for r in range(world)])
        return torch.cat(groups)[torch.argsort(order).to(input.device)]

    F.batch_norm = emulated
