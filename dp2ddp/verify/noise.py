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

The same holds for ``bernoulli_``/``torch.bernoulli`` (drop-path, sampled masks),
``torch.normal`` and ``Tensor.normal_`` on a tensor that is not a parameter
(``Normal(mu, std).sample()``/``.rsample()``): drawn from the global batch's uniform
numbers. Mixup's ``randperm(B)`` cannot be a slice of one draw, since a rank can only
mix its own rows: each rank draws a permutation of its rows from the call's number and
its rank, and the reference composes the W of them, rank r's acting on rows ``r::W``.
Inside a DDP model wrapped with ``dim=1`` the batch is the input's size along it.

Whatever else draws random numbers whose size follows the batch (``torch.randint``,
``multinomial``, ``Tensor.random_``...), and any draw while a dataset fetches its items
(per-sample augmentation with ``random``, ``numpy.random`` or torch), differs between one
process and W by design: ``UnalignedDraws`` names those calls by the script's lines, so
that a divergence can name its cause.
"""

from __future__ import annotations

import math
import os
import random
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import dataloader

_rand = torch.rand  # before install() replaces it
_fetches = [0]  # datasets fetching items in this process now


def in_dataset_fetch() -> bool:
    """Whether a dataset is fetching items: its seeds and draws are per sample, not the script's training state."""
    return _fetches[0] > 0
_randperm = torch.randperm


class GlobalNoise:
    def __init__(self, seed: int, rank: int, world: int, dropout: bool, emulated_world: int = 1) -> None:
        self.seed, self.rank, self.world, self.dropout = seed, rank, world, dropout
        self.emulated_world = emulated_world  # the reference: the ranks it emulates, whose permutations it composes
        self.unaligned = UnalignedDraws()
        self.fetch_seeded: set[str] = set()  # generators a dataset seeded itself while fetching the current items
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

    def permutation(self, rows: int) -> torch.Tensor:
        """``randperm(rows)`` of the batch's rows: each rank permutes its own rows with a permutation drawn from
        the call's number and its rank, and the reference, outside the model, composes the permutations of the
        ranks it emulates, rank r's acting on its rows ``r::W``, so ``x[perm]`` mixes only rows one rank holds."""
        self.calls += 1
        if self.world > 1 or self.emulated_world <= 1:
            return self._local_permutation(self.rank, rows)
        world, composed = self.emulated_world, torch.empty(rows, dtype=torch.int64)
        for rank in range(world):
            own = torch.arange(rank, rows, world)
            composed[own] = own[self._local_permutation(rank, len(own))]
        return composed

    def _local_permutation(self, rank: int, rows: int) -> torch.Tensor:
        generator = torch.Generator()
        generator.manual_seed((self.seed * 1_000_003 + self.calls) * 1_009 + rank)
        return _randperm(rows, generator=generator)


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
            noise.fetch_seeded.clear()
            _fetches[0] += 1
            try:
                return _fetch(self, index)
            finally:
                noise.fetching = saved
                _fetches[0] -= 1

        fetcher.fetch = fetching  # type: ignore[method-assign]
    _dropout(noise)
    _recurrent_dropout_off(noise)
    _attention_dropout()
    _sample_noise(noise)
    _permutations(noise)
    _bernoulli(noise)
    _normal(noise)
    _watch_unaligned(noise)


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


def _permutations(noise: GlobalNoise) -> None:
    """``randperm(n)`` over the batch's rows, mixup's ``x[perm]``: see ``GlobalNoise.permutation``."""

    def randperm(*args: Any, **kwargs: Any) -> torch.Tensor:
        rows = args[0] if args else kwargs.get("n")
        if (
            len(args) != 1 or not isinstance(rows, int) or kwargs.get("generator") is not None
            or kwargs.get("out") is not None or noise.batch_dim((rows,)) is None
        ):  # fmt: skip
            return _randperm(*args, **kwargs)
        permutation = noise.permutation(rows).to(dtype=kwargs.get("dtype") or torch.int64, device=kwargs.get("device"))
        return permutation.requires_grad_(bool(kwargs.get("requires_grad", False)))

    torch.randperm = randperm


def _bernoulli(noise: GlobalNoise) -> None:
    """Drop-path's ``x.new_empty((B, 1, 1, 1)).bernoulli_(keep)`` and ``torch.bernoulli(probs)`` with a batch
    dimension: 1 where the global batch's uniform draw falls below the probability."""

    def kept(shape: tuple[int, ...], probability: Any) -> torch.Tensor | None:
        dim = noise.batch_dim(shape)
        if dim is None:
            return None
        if isinstance(probability, torch.Tensor):
            probability = probability.detach().to(device="cpu", dtype=torch.float64)
        return noise.uniform(shape, dim) < probability

    in_place = torch.Tensor.bernoulli_

    def bernoulli_(self: torch.Tensor, p: Any = 0.5, *args: Any, **kwargs: Any) -> torch.Tensor:
        drawn = None if args or kwargs.get("generator") is not None else kept(tuple(self.shape), p)
        if drawn is None:
            return in_place(self, p, *args, **kwargs)
        with torch.no_grad():
            return self.copy_(drawn)

    def drawing(original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        def bernoulli(input: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            probability = args[0] if args else kwargs.get("p", input)
            plain = len(args) <= 1 and set(kwargs) <= {"p", "generator"} and kwargs.get("generator") is None
            drawn = kept(tuple(input.shape), probability) if plain and isinstance(input, torch.Tensor) else None
            if drawn is None:
                return original(input, *args, **kwargs)
            return drawn.to(dtype=input.dtype, device=input.device)

        return bernoulli

    torch.Tensor.bernoulli_ = bernoulli_  # type: ignore[method-assign]
    torch.bernoulli = drawing(torch.bernoulli)
    torch.Tensor.bernoulli = drawing(torch.Tensor.bernoulli)  # type: ignore[method-assign]


def _normal(noise: GlobalNoise) -> None:
    """``torch.normal`` with a batch dimension (``Normal(mu, std).sample()``), and ``Tensor.normal_`` on a
    batch-shaped tensor that is not a parameter (``Normal(mu, std).rsample()`` draws ``empty(shape).normal_()``)."""
    original = torch.normal

    def normal(*args: Any, **kwargs: Any) -> torch.Tensor:
        if kwargs.get("generator") is not None or kwargs.get("out") is not None or len(args) > 3:
            return original(*args, **kwargs)
        mean = args[0] if args else kwargs.get("mean", 0.0)
        std = args[1] if len(args) > 1 else kwargs.get("std", 1.0)
        size = args[2] if len(args) > 2 else kwargs.get("size")
        tensors = [value for value in (mean, std) if isinstance(value, torch.Tensor)]
        if size is not None and not tensors:
            shape, dtype, device = tuple(int(n) for n in size), kwargs.get("dtype"), kwargs.get("device")
        elif size is None and tensors:
            shape = tuple(torch.broadcast_shapes(*(tensor.shape for tensor in tensors)))
            dtype, device = torch.result_type(mean, std), tensors[0].device
        else:
            return original(*args, **kwargs)
        dim = noise.batch_dim(shape)
        if dim is None:
            return original(*args, **kwargs)
        mean, std = (value.detach() if isinstance(value, torch.Tensor) else value for value in (mean, std))
        drawn = noise.normal(shape, dim).to(dtype=dtype or torch.get_default_dtype(), device=device)
        return (mean + std * drawn).requires_grad_(bool(kwargs.get("requires_grad", False)))

    in_place = torch.Tensor.normal_

    def normal_(self: torch.Tensor, mean: float = 0.0, std: float = 1.0, *args: Any, **kwargs: Any) -> torch.Tensor:
        # Parameters are initialised, not noise: a layer as wide as the batch must draw as the script wrote.
        if args or kwargs.get("generator") is not None or isinstance(self, torch.nn.Parameter) or self.requires_grad:
            return in_place(self, mean, std, *args, **kwargs)
        dim = noise.batch_dim(tuple(self.shape))
        if dim is None:
            return in_place(self, mean, std, *args, **kwargs)
        with torch.no_grad():
            return self.copy_(noise.normal(tuple(self.shape), dim) * std + mean)

    torch.normal = normal
    torch.Tensor.normal_ = normal_  # type: ignore[method-assign]


# --- draws verify cannot line up -----------------------------------------------------------------------------

MAX_UNALIGNED = 5  # call sites named per process: enough to point at the cause


def _library_folders() -> tuple[str, ...]:
    import sysconfig

    paths = sysconfig.get_paths()
    folders = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    folders.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # dp2ddp itself
    return tuple(os.path.join(folder, "") for folder in folders)


_INSTALLED = ("/site-packages/", "/dist-packages/")  # torch and numpy may live in another environment's


class UnalignedDraws:
    """The script's calls that draw random numbers verify does not line up, as ``"torch.randint at train.py:57"``.

    A divergence is then named by its cause. Recorded are draws whose size follows the batch once training
    has drawn one (the reference draws B rows where a rank draws B/W), and any draw while a dataset fetches
    its items unless the dataset seeded that generator itself in the same fetch (per-sample augmentation:
    the reference draws for B samples a step, a rank for B/W). DataLoader workers are other processes: they
    append to ``worker_file``, read back by ``sites``.
    """

    def __init__(self, script: str = "", shown_as: str = "", folder: str | None = None,
                 worker_file: Path | None = None) -> None:  # fmt: skip
        self.script = os.path.abspath(script) if script else ""
        self.original = os.path.abspath(shown_as) if shown_as else self.script  # a converted copy's original
        self.shown_as = os.path.basename(shown_as or script)
        self.folders = tuple(os.path.join(os.path.abspath(f), "") for f in (folder, os.path.dirname(self.script)) if f)
        self.worker_file = worker_file
        self.pid = os.getpid()
        self._sites: list[str] = []
        self._callers: set[tuple[Any, int]] = set()  # the calling lines already looked at
        self._libraries = _library_folders()

    def record(self, name: str, in_dataset: bool, depth: int = 2) -> None:
        if len(self._sites) >= MAX_UNALIGNED:
            return
        frame = sys._getframe(depth)
        if (frame.f_code, frame.f_lineno) in self._callers:
            return  # one look per calling line: a per-sample draw is met thousands of times
        self._callers.add((frame.f_code, frame.f_lineno))
        while frame is not None and self._in_library(frame.f_code.co_filename):
            frame = frame.f_back  # type: ignore[assignment]
        if frame is None:
            return
        site = f"{name} at {self._shown(frame.f_code.co_filename, frame.f_lineno)}"
        site += " (in the dataset)" if in_dataset else ""
        if site in self._sites:
            return
        self._sites.append(site)
        if os.getpid() != self.pid and self.worker_file is not None:
            with self.worker_file.open("a") as shared:  # a DataLoader worker: the main process reads it at the end
                shared.write(site + "\n")

    def _in_library(self, filename: str) -> bool:
        if filename.startswith("<"):
            return True
        installed = any(marker in filename for marker in _INSTALLED)
        return filename != self.script and (installed or filename.startswith(self._libraries))

    def _shown(self, filename: str, line: int) -> str:
        if filename == self.script:
            return f"{self.shown_as}:{self._original_line(line)}"
        for folder in self.folders:
            if filename.startswith(folder):
                return f"{os.path.relpath(filename, folder)}:{line}"
        return f"{filename}:{line}"

    def _original_line(self, line: int) -> str:
        """The line of the script the user wrote: a converted copy (in a temporary folder, with helpers added)
        is matched back by the line's text, the occurrence nearest to where the added lines put it."""
        if self.original == self.script:
            return str(line)
        try:
            copy = Path(self.script).read_text(encoding="utf-8", errors="replace").splitlines()
            original = Path(self.original).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return f"{line} of the converted copy"
        text = copy[line - 1].strip() if 0 < line <= len(copy) else ""
        matches = [number for number, other in enumerate(original, 1) if text and other.strip() == text]
        if not matches:
            return f"{line} of the converted copy"
        expected = line - (len(copy) - len(original))
        return str(min(matches, key=lambda number: abs(number - expected)))

    def sites(self) -> list[str]:
        """Distinct call sites in first-seen order, this process's first, then its DataLoader workers'."""
        found = list(self._sites)
        if self.worker_file is not None and self.worker_file.exists():
            for line in self.worker_file.read_text().splitlines():
                if line and line not in found:  # every worker of every epoch writes what it met
                    found.append(line)
        return found[:MAX_UNALIGNED]


def _batch_sized(noise: GlobalNoise, shape: Any) -> bool:
    try:
        return noise.batch_dim(tuple(int(size) for size in shape)) is not None
    except (TypeError, ValueError):
        return False


def _size_argument(args: tuple[Any, ...], kwargs: dict[str, Any], first: int) -> Any:
    """The ``size`` of ``randint(low, high, size)`` / ``randint(high, size)``: the first tuple from ``first`` on."""
    if "size" in kwargs:
        return kwargs["size"]
    return next((arg for arg in args[first:] if isinstance(arg, (tuple, list, torch.Size))), ())


def _watch_unaligned(noise: GlobalNoise) -> None:
    """Record the draws ``UnalignedDraws`` names. A call that is lined up, or comes before training, costs one
    check and no frame walk; a draw with a generator of the script's own is left alone (conservative: the
    samplers draw through one)."""

    def watched(name: str, original: Callable[..., Any], shape: Callable[..., Any] | None, library: str) -> Any:
        def draw(*args: Any, **kwargs: Any) -> Any:
            if noise.fetching:
                if library not in noise.fetch_seeded:
                    noise.unaligned.record(name, in_dataset=True)
            elif (
                shape is not None and noise.rows is not None and kwargs.get("generator") is None
                and _batch_sized(noise, shape(*args, **kwargs))
            ):  # fmt: skip
                noise.unaligned.record(name, in_dataset=False)
            return original(*args, **kwargs)

        return draw

    def seeding(original: Callable[..., Any], library: str) -> Any:
        def seed(*args: Any, **kwargs: Any) -> Any:
            if noise.fetching:
                noise.fetch_seeded.add(library)  # FakeData's per-index seed: the items are the same in both runs
            return original(*args, **kwargs)

        return seed

    def restoring(original: Callable[..., Any], library: str) -> Any:
        def restore(*args: Any, **kwargs: Any) -> Any:
            if noise.fetching:
                # FakeData seeds per index, draws the image, then puts the shared state back: the transform's
                # draws after that (a random crop, a flip) are the per-sample augmentation again.
                noise.fetch_seeded.discard(library)
            return original(*args, **kwargs)

        return restore

    tensor = torch.Tensor
    # A parameter (re-)initialised as wide as the batch is not the batch's noise.
    own_shape = lambda self, *args, **kwargs: () if isinstance(self, torch.nn.Parameter) else self.shape  # noqa: E731
    batch_shaped = {  # drawn with a batch dimension, these differ between the reference and a rank
        "randint": (torch, lambda *a, **k: _size_argument(a, k, 1)),
        "randint_like": (torch, lambda input, *a, **k: input.shape),
        "poisson": (torch, lambda input, *a, **k: input.shape),
        "multinomial": (torch, lambda input, n=1, *a, **k: (*input.shape[:-1], n)),
    }
    for name, (owner, shape) in batch_shaped.items():
        setattr(owner, name, watched(f"torch.{name}", getattr(owner, name), shape, "torch"))
    tensor.multinomial = watched("Tensor.multinomial", tensor.multinomial,  # type: ignore[method-assign]
                                 lambda self, n=1, *a, **k: (*self.shape[:-1], n), "torch")  # fmt: skip
    for name in ("random_", "exponential_", "geometric_", "cauchy_", "log_normal_", "uniform_"):
        setattr(tensor, name, watched(f"Tensor.{name}", getattr(tensor, name), own_shape, "torch"))
    # Lined up outside a dataset (or drawn without a batch dimension): named only while a dataset fetches.
    for name in ("rand", "randn", "rand_like", "randn_like", "randperm", "normal", "bernoulli"):
        setattr(torch, name, watched(f"torch.{name}", getattr(torch, name), None, "torch"))
    for name in ("normal_", "bernoulli_"):
        setattr(tensor, name, watched(f"Tensor.{name}", getattr(tensor, name), None, "torch"))
    same = torch.manual_seed is torch.random.manual_seed
    torch.manual_seed = seeding(torch.manual_seed, "torch")  # type: ignore[assignment]
    torch.random.manual_seed = (  # type: ignore[assignment]
        torch.manual_seed if same else seeding(torch.random.manual_seed, "torch")
    )

    python = ("random", "uniform", "randint", "randrange", "choice", "choices", "shuffle", "sample", "gauss",
              "normalvariate", "betavariate", "expovariate", "triangular", "lognormvariate",
              "gammavariate")  # fmt: skip
    for name in python:
        setattr(random, name, watched(f"random.{name}", getattr(random, name), None, "random"))
    same = torch.set_rng_state is torch.random.set_rng_state
    torch.set_rng_state = restoring(torch.set_rng_state, "torch")  # type: ignore[assignment]
    torch.random.set_rng_state = (  # type: ignore[assignment]
        torch.set_rng_state if same else restoring(torch.random.set_rng_state, "torch")
    )
    random.seed = seeding(random.seed, "random")  # type: ignore[assignment]
    random.setstate = restoring(random.setstate, "random")  # type: ignore[assignment]
    numpy = sys.modules.get("numpy")
    if numpy is None:
        return
    drawn_by_numpy = ("rand", "randn", "random", "random_sample", "uniform", "normal", "randint", "choice",
                      "shuffle", "permutation", "beta", "binomial", "poisson")  # fmt: skip
    for name in drawn_by_numpy:
        if hasattr(numpy.random, name):
            setattr(numpy.random, name, watched(f"numpy.random.{name}", getattr(numpy.random, name), None, "numpy"))
    numpy.random.seed = seeding(numpy.random.seed, "numpy")
    numpy.random.set_state = restoring(numpy.random.set_state, "numpy")


def rows_along_ddp_dim(noise: GlobalNoise) -> None:
    """Converted run only: inside a DDP model wrapped with ``dim=1`` (a time-major model fed ``(T, B)``), the
    batch is the input's size along ``dim``, as in the reference's per-rank forward, not the first dimension
    of what the DataLoader yielded (time, where a collate makes ``(T, B)``)."""
    from torch.nn.parallel import DistributedDataParallel

    ddp_forward = DistributedDataParallel.forward

    def forward(self: DistributedDataParallel, *inputs: Any, **kwargs: Any) -> Any:
        dim, first = getattr(self, "dim", 0), first_tensor((inputs, kwargs))
        if dim == 0 or first is None or first.dim() <= dim:
            return ddp_forward(self, *inputs, **kwargs)
        saved, noise.rows = noise.rows, first.shape[dim]
        try:
            return ddp_forward(self, *inputs, **kwargs)
        finally:
            noise.rows = saved

    DistributedDataParallel.forward = forward  # type: ignore[method-assign]
