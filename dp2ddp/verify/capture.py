"""Record every scalar loss a process back-propagates, grouped by optimizer step.

``Tensor.backward`` is wrapped, so nothing in the script changes. A loss scaled by
an AMP ``GradScaler`` is recorded unscaled. Several backward calls before one
optimizer step (gradient accumulation, GANs) are recorded in order.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook


class StopRun(BaseException):
    """Raised after the last optimizer step asked for; a BaseException so ``except Exception`` lets it through."""


class LossRecorder:
    """Appends one JSON line per loss, ``{"step": k, "loss": v}``, where k counts optimizer steps before it."""

    def __init__(self, path: Path, max_steps: int | None) -> None:
        self.steps = 0
        self.max_steps = max_steps
        self._file: IO[str] = path.open("w", buffering=1)  # line-buffered: progress is visible from outside

    def record(self, loss: float) -> None:
        self._file.write(json.dumps({"step": self.steps, "loss": loss}) + "\n")

    def step_taken(self) -> None:
        self.steps += 1
        if self.max_steps is not None and self.steps >= self.max_steps:
            raise StopRun

    def close(self) -> None:
        self._file.close()


def install(recorder: LossRecorder) -> None:
    tensor_backward = torch.Tensor.backward
    scale = torch.amp.GradScaler.scale

    def backward(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if self.numel() == 1:
            recorder.record(float(self.detach()) / getattr(self, "_dp2ddp_loss_scale", 1.0))
        return tensor_backward(self, *args, **kwargs)

    def remembering_scale(self: torch.amp.GradScaler, outputs: Any) -> Any:
        scaled = scale(self, outputs)
        if scaled is not outputs and isinstance(scaled, torch.Tensor) and self._scale is not None:
            scaled._dp2ddp_loss_scale = float(self._scale)  # type: ignore[attr-defined]
        return scaled

    torch.Tensor.backward = backward  # type: ignore[method-assign]
    torch.amp.GradScaler.scale = remembering_scale  # type: ignore[method-assign]
    register_optimizer_step_post_hook(lambda optimizer, args, kwargs: recorder.step_taken())
