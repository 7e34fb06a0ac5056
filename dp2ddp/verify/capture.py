"""Record every scalar loss a process back-propagates, grouped by optimizer step.

``torch.autograd.backward`` (which ``Tensor.backward`` calls) and
``torch.autograd.grad`` are wrapped, so nothing in the script changes and all
three ways of training are seen. A loss scaled by an AMP ``GradScaler`` is
recorded unscaled. Several backward calls before one optimizer step (gradient
accumulation, GANs) are recorded in order.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook


class StopRun(BaseException):
    """Raised after the last optimizer step asked for; a BaseException so ``except Exception`` lets it through."""


StepListener = Callable[[int, torch.optim.Optimizer], None]


class LossRecorder:
    """Appends one JSON line per loss, ``{"step": k, "loss": v}``, where k counts optimizer steps before it, and one
    per optimizer step, ``{"step": k, "optimizer": n, "name": "Adam", "lr": [0.1]}``, n numbering optimizers as
    first seen (a GAN's discriminator and generator losses are told apart by the optimizer that steps after them),
    with each parameter group's learning rate at that step."""

    def __init__(self, path: Path, max_steps: int | None, on_step: StepListener | None = None) -> None:
        self.steps = 0
        self._optimizers: dict[int, int] = {}
        self._keep: list[torch.optim.Optimizer] = []  # so their ids are not reused
        self.grad_calls = 0  # torch.autograd.grad: gradients DDP does not average
        self.max_steps = max_steps
        self.on_step = on_step
        self._file: IO[str] = path.open("w", buffering=1)  # line-buffered: progress is visible from outside

    def record(self, loss: float) -> None:
        self._file.write(json.dumps({"step": self.steps, "loss": loss}) + "\n")

    def step_taken(self, optimizer: torch.optim.Optimizer) -> None:
        if id(optimizer) not in self._optimizers:
            self._optimizers[id(optimizer)] = len(self._optimizers)
            self._keep.append(optimizer)
        number = self._optimizers[id(optimizer)]
        rates = [_number(group.get("lr")) for group in optimizer.param_groups]
        self._file.write(json.dumps({"step": self.steps, "optimizer": number, "name": type(optimizer).__name__,
                                     "lr": rates}) + "\n")  # fmt: skip
        if self.on_step is not None:
            self.on_step(self.steps, optimizer)
        self.steps += 1
        if self.max_steps is not None and self.steps >= self.max_steps:
            raise StopRun

    def close(self) -> None:
        self._file.close()


def _number(value: Any) -> float | None:
    """A learning rate as a float: a tensor learning rate too; None for anything else."""
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError):
        return None


def _scalar_loss(outputs: Any) -> torch.Tensor | None:
    if isinstance(outputs, (list, tuple)) and len(outputs) == 1:
        outputs = outputs[0]
    if isinstance(outputs, torch.Tensor) and outputs.numel() == 1 and outputs.requires_grad:
        return outputs
    return None


def install(recorder: LossRecorder) -> None:
    autograd_backward, autograd_grad = torch.autograd.backward, torch.autograd.grad
    scale = torch.amp.GradScaler.scale

    def remember(outputs: Any) -> None:
        loss = _scalar_loss(outputs)
        if loss is not None:
            recorder.record(float(loss.detach()) / getattr(loss, "_dp2ddp_loss_scale", 1.0))

    def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        remember(tensors)
        return autograd_backward(tensors, *args, **kwargs)

    def grad(outputs: Any, *args: Any, **kwargs: Any) -> Any:
        recorder.grad_calls += 1
        remember(outputs)
        return autograd_grad(outputs, *args, **kwargs)

    def remembering_scale(self: torch.amp.GradScaler, outputs: Any) -> Any:
        scaled = scale(self, outputs)
        if scaled is not outputs and isinstance(scaled, torch.Tensor) and self._scale is not None:
            scaled._dp2ddp_loss_scale = float(self._scale)  # type: ignore[attr-defined]
        return scaled

    torch.autograd.backward = backward  # Tensor.backward looks it up here at every call
    torch.autograd.grad = grad
    torch.amp.GradScaler.scale = remembering_scale  # type: ignore[method-assign]
    register_optimizer_step_post_hook(lambda optimizer, args, kwargs: recorder.step_taken(optimizer))


def record_loads(facts: dict[str, Any], limit: int = 20) -> None:
    """Note the files ``torch.load`` reads, as given, in ``facts["loaded"]``: a converted run that took fewer
    steps than the reference may have resumed from a checkpoint the reference left behind."""
    load = torch.load

    def noted(f: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(f, (str, bytes)) or hasattr(f, "__fspath__"):
            loaded = facts.setdefault("loaded", [])
            name = str(f if not isinstance(f, bytes) else f.decode(errors="replace"))
            if name not in loaded and len(loaded) < limit:
                loaded.append(name)
        return load(f, *args, **kwargs)

    torch.load = noted
