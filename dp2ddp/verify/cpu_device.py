"""``--device cpu``: run a GPU script on the CPU, in both runs, so CI without GPUs can verify it.

Mapped: ``torch.cuda.is_available()`` (False), ``device_count()`` (0),
``set_device``/``synchronize`` (no-ops), ``.cuda()`` and ``.to("cuda"...)`` on
tensors and modules, ``torch.device("cuda...")``, ``torch.load`` map locations,
and DDP's ``device_ids``. Not mapped: tensors created with ``device="cuda"`` in
factory calls such as ``torch.zeros(..., device="cuda")``, CUDA streams and
events, and custom CUDA kernels. AMP autocast and GradScaler turn themselves off
without CUDA, in both runs alike.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

_CPU = torch.device("cpu")
_real_device = torch.device


def _on_cpu(device: Any) -> Any:
    if isinstance(device, int) and not isinstance(device, bool):
        return _CPU
    if isinstance(device, str) and device.startswith("cuda"):
        return _CPU
    if isinstance(device, _real_device) and device.type == "cuda":
        return _CPU
    return device


class _DeviceType(type):
    def __instancecheck__(cls, instance: object) -> bool:
        return isinstance(instance, _real_device)


class _Device(metaclass=_DeviceType):
    """Stands in for ``torch.device``: builds real devices, CUDA ones as the CPU; isinstance still works."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
        device = _real_device(*args, **kwargs)
        return _CPU if device.type == "cuda" else device


def install() -> None:
    torch.cuda.is_available = lambda: False
    torch.cuda.device_count = lambda: 0
    torch.cuda.set_device = lambda device: None
    torch.cuda.synchronize = lambda device=None: None
    torch.cuda.current_device = lambda: 0
    torch.device = _Device  # type: ignore[misc, assignment]

    tensor_to, module_to, load = torch.Tensor.to, torch.nn.Module.to, torch.load

    def to_cpu(original: Any) -> Any:
        def to(self: Any, *args: Any, **kwargs: Any) -> Any:
            if args and not isinstance(args[0], (torch.dtype, torch.Tensor)):
                args = (_on_cpu(args[0]), *args[1:])
            if "device" in kwargs:
                kwargs["device"] = _on_cpu(kwargs["device"])
            return original(self, *args, **kwargs)

        return to

    def cuda(self: Any, *args: Any, **kwargs: Any) -> Any:
        return self

    def load_on_cpu(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
        if not callable(map_location) and not isinstance(map_location, dict):
            map_location = _CPU
        return load(f, map_location, *args, **kwargs)

    torch.Tensor.to = to_cpu(tensor_to)  # type: ignore[method-assign]
    torch.nn.Module.to = to_cpu(module_to)  # type: ignore[method-assign]
    torch.Tensor.cuda = torch.nn.Module.cuda = cuda  # type: ignore[method-assign]
    torch.load = load_on_cpu

    ddp_init = DistributedDataParallel.__init__

    def ddp_on_cpu(self: DistributedDataParallel, module: torch.nn.Module, *args: Any, **kwargs: Any) -> None:
        # DDP refuses device_ids for a CPU module; device_ids and output_device are its 2nd and 3rd.
        kwargs.pop("device_ids", None)
        kwargs.pop("output_device", None)
        ddp_init(self, module, None, None, *args[2:], **kwargs)

    DistributedDataParallel.__init__ = ddp_on_cpu  # type: ignore[method-assign]
