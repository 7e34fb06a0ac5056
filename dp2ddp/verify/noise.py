"""Randomness drawn per sample, made the same in the reference and in every rank of the converted run.

Dropout masks, attention dropout and noise such as ``torch.randn_like(std)`` in
a VAE are drawn per sample. One process drawing for the whole batch and W
processes drawing for their shares cannot draw the same numbers, so verify
draws them itself: one tensor for the **global** batch per call, from a
generator seeded with the call's number, and each process keeps its rows
``[rank::world]``, the rows its DistributedSampler gave it.

The batch dimension is the one whose size is the batch the last DataLoader
yielded (the local batch in a rank, the global one in the reference), so
seq-first tensors ``(T, B, E)`` and DataParallel's ``dim=1`` are split along
B (when another dimension has the batch's size too, the first one is taken:
a sequence as long as the batch is mistaken for it). Draws while a dataset
fetches its items are the dataset's own and are left alone. Numbers come from uniform draws, which CPU generators produce in order, so
a partial last batch sees the first rows of the full draw: the same rows in
both runs. Dropout on a tensor with no batch dimension (a flattened
``(B*T, E)``), alpha dropout and the dropout inside ``nn.LSTM``/``GRU``/``RNN``
layers is switched off in both runs alike and counted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import dataloader

_rand = torch.rand  # before install() replaces it


class GlobalNoise:
    def __init__(self, seed: int, rank: int, world: int, dropout: bool) -> None:
        self.seed, self.rank, self.world, self.dropout = seed, rank, world, dropout
        self.rows: int | None = None  # the batch the last DataLoader yielded
        self.calls = 0
        self.switched_off = 0  # dropout calls run as the identity
        self.fetching = False  # inside a dataset's __getitem__: per-sample draws there are the dataset's own

    @contextmanager
    def as_rank(self, rank: int, world: int, rows: int) -> Iterator[None]:
        """Draw as rank ``rank`` of ``world`` would, holding ``rows`` rows (the reference emulating a rank)."""
        saved = self.rank, self.world, self.rows
        self.rank, self.world, self.rows = rank, world, rows
        try:
            yield
        finally:
            self.rank, self.world, self.rows = saved

    def batch_seen(self, batch: Any) -> None:
        tensor = first_tensor(batch)
        if tensor is not None and tensor.dim() >= 1:
            self.rows = tensor.shape[0]

    def batch_dim(self, shape: torch.Size | tuple[int, ...]) -> int | None:
        if self.rows is None or self.fetching:
            return None
        return next((dim for dim, size in enumerate(shape) if size == self.rows), None)

    def uniform(self, shape: tuple[int, ...], dim: int, extra: tuple[int, ...] = ()) -> torch.Tensor:
        """U[0, 1) of ``shape + extra`` in float64: this process's rows of one draw for the global batch."""
        self.calls += 1
        generator = torch.Generator()
        generator.manual_seed(self.seed * 1_000_003 + self.calls)
        rest = shape[:dim] + shape[dim + 1 :]
        drawn = _rand((shape[dim] * self.world, *rest, *extra), generator=generator, dtype=torch.float64)
        return drawn[self.rank :: self.world].movedim(0, dim)

    def normal(self, shape: tuple[int, ...], dim: int) -> torch.Tensor:
        u = self.uniform(shape, dim, extra=(2,))
        return torch.sqrt(-2.0 * torch.log1p(-u[..., 0])) * torch.cos(2.0 * math.pi * u[..., 1])  # Box-Muller


def first_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        for item in value:
            found = first_tensor(item)
            if found is not None:
                return found
    return None


def install(noise: GlobalNoise) -> None:
    next_batch = dataloader._BaseDataLoaderIter.__next__

    def remembering(self: Any) -> Any:
        batch = next_batch(self)
        noise.batch_seen(batch)
        return batch

    dataloader._BaseDataLoaderIter.__next__ = remembering  # type: ignore[method-assign]
    # A dataset drawing an image or a jitter per sample (FakeData, augmentation) is not a batch's noise,
    # even where an image dimension has the local batch's size (a batch of 32 and 32x32 images).
    from torch.utils.data._utils import fetch

    for fetcher in (fetch._MapDatasetFetcher, fetch._IterableDatasetFetcher):

        def fetching(self: Any, index: Any, _fetch: Any = fetcher.fetch) -> Any:
            saved, noise.fetching = noise.fetching, True
            try:
                return _fetch(self, index)
            finally:
                noise.fetching = saved

        fetcher.fetch = fetching  # type: ignore[method-assign]
    _dropout(noise)
    _recurrent_dropout_off(noise)
    _attention_dropout()
    _sample_noise(noise)


def _dropout(noise: GlobalNoise) -> None:
    def masked(channels_only: bool) -> Callable[..., torch.Tensor]:
        def dropout(input: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> torch.Tensor:
            if not training or p == 0.0 or input.dim() == 0:
                return input
            shape = tuple(input.shape[:2]) if channels_only else tuple(input.shape)
            dim = noise.batch_dim(shape) if noise.dropout else None
            if dim is None or (channels_only and dim != 0):
                noise.switched_off += 1
                return input
            keep = (noise.uniform(shape, dim) >= p).to(device=input.device, dtype=input.dtype)
            keep = keep.reshape(*shape, *[1] * (input.dim() - len(shape)))
            mask = keep / (1.0 - p) if p < 1.0 else keep
            return input.mul_(mask) if inplace else input * mask

        return dropout

    def switched_off(input: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        noise.switched_off += 1
        return input

    F.dropout = masked(channels_only=False)
    F.dropout1d = F.dropout2d = F.dropout3d = masked(channels_only=True)
    F.alpha_dropout = F.feature_alpha_dropout = switched_off


def _recurrent_dropout_off(noise: GlobalNoise) -> None:
    for recurrent in (torch.nn.RNN, torch.nn.LSTM, torch.nn.GRU):

        def without_dropout(self: torch.nn.RNNBase, *args: Any, _forward: Any = recurrent.forward, **kwargs: Any) -> Any:
            if not self.training or not self.dropout:
                return _forward(self, *args, **kwargs)
            noise.switched_off += 1
            saved, self.dropout = self.dropout, 0.0
            try:
                return _forward(self, *args, **kwargs)
            finally:
                self.dropout = saved

        recurrent.forward = without_dropout  # type: ignore[method-assign]


def _attention_dropout() -> None:
    """``scaled_dot_product_attention`` drops attention weights in C++; with dropout, spell it out so that
    the weights go through ``F.dropout`` above (multi-head attention calls it through ``F``)."""
    fused = F.scaled_dot_product_attention

    def attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Any = None,
                  dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                  **kwargs: Any) -> torch.Tensor:  # fmt: skip
        if dropout_p == 0.0 or kwargs.get("enable_gqa"):
            return fused(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, **kwargs)
        weights = query @ key.transpose(-2, -1) * (scale if scale is not None else 1.0 / math.sqrt(query.size(-1)))
        if is_causal:
            length, source = query.size(-2), key.size(-2)
            causal = torch.ones(length, source, dtype=torch.bool, device=query.device).tril()
            weights = weights.masked_fill(~causal, float("-inf"))
        if attn_mask is not None:
            weights = weights.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else weights + attn_mask
        return F.dropout(weights.softmax(dim=-1), dropout_p) @ value

    F.scaled_dot_product_attention = attention


def _sample_noise(noise: GlobalNoise) -> None:
    """``randn``/``rand`` and their ``_like`` forms with a batch dimension, once training has drawn a batch."""

    def size_of(args: tuple[Any, ...]) -> tuple[int, ...]:
        if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)):
            return tuple(int(size) for size in args[0])
        return tuple(int(size) for size in args)

    def replaced(original: Callable[..., torch.Tensor], normal: bool, like: bool) -> Callable[..., torch.Tensor]:
        def draw(*args: Any, **kwargs: Any) -> torch.Tensor:
            if kwargs.get("generator") is not None or kwargs.get("out") is not None:
                return original(*args, **kwargs)
            try:
                shape = tuple(args[0].shape) if like else size_of(args)
            except (TypeError, ValueError, IndexError, AttributeError):
                return original(*args, **kwargs)
            dim = noise.batch_dim(shape)
            if dim is None:
                return original(*args, **kwargs)
            template = args[0] if like else None
            dtype = kwargs.get("dtype") or (template.dtype if template is not None else torch.get_default_dtype())
            device = kwargs.get("device") or (template.device if template is not None else None)
            drawn = noise.normal(shape, dim) if normal else noise.uniform(shape, dim)
            return drawn.to(dtype=dtype, device=device).requires_grad_(bool(kwargs.get("requires_grad", False)))

        return draw

    torch.randn = replaced(torch.randn, normal=True, like=False)
    torch.rand = replaced(torch.rand, normal=False, like=False)
    torch.randn_like = replaced(torch.randn_like, normal=True, like=True)
    torch.rand_like = replaced(torch.rand_like, normal=False, like=True)
