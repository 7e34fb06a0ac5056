"""Run a training script inside one torchrun rank and record which samples it loaded.

Usage: python -m torch.distributed.run ... -- tests/rank_probe.py OUT_DIR SCRIPT [ARGS...]

It wraps ``BatchSampler.__iter__`` so every pass of every DataLoader is
recorded with the sampler type, dataset length and batch sizes, the optimizers'
constructor so each optimizer's learning rate is recorded, ``torch.save`` so
every checkpoint this process writes is recorded, and DDP's constructor so
the parameters of every DDP model can be fingerprinted when the script
ends, then runs SCRIPT as ``__main__``. At exit it writes
``OUT_DIR/rank<RANK>.json``.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import runpy
import sys
from pathlib import Path

import torch
from torch.utils.data.sampler import BatchSampler

passes: list[dict[str, object]] = []
saves: list[str] = []
ddp_models: list[torch.nn.Module] = []
learning_rates: list[float] = []
_optimizer_init = torch.optim.Optimizer.__init__
_batch_sampler_iter = BatchSampler.__iter__
_torch_save = torch.save
_ddp_init = torch.nn.parallel.DistributedDataParallel.__init__


def _recording_ddp_init(self, module, *args, **kwargs):  # type: ignore[no-untyped-def]
    ddp_models.append(module)
    _ddp_init(self, module, *args, **kwargs)


def _fingerprints() -> list[str]:
    """One hash per DDP model over every parameter's bytes: equal on every rank iff the replicas are."""
    found = []
    for module in ddp_models:
        digest = hashlib.sha256()
        for name, parameter in module.named_parameters():
            digest.update(name.encode())
            digest.update(parameter.detach().cpu().contiguous().numpy().tobytes())
        found.append(digest.hexdigest())
    return found


def _recording_optimizer_init(self, params, defaults, *args, **kwargs):  # type: ignore[no-untyped-def]
    if "lr" in defaults:
        learning_rates.append(float(defaults["lr"]))
    _optimizer_init(self, params, defaults, *args, **kwargs)


def _recording_save(obj, f, *args, **kwargs):  # type: ignore[no-untyped-def]
    saves.append(str(f))
    return _torch_save(obj, f, *args, **kwargs)


def _recording_iter(self: BatchSampler):  # type: ignore[no-untyped-def]
    record: dict[str, object] = {
        "sampler": type(self.sampler).__name__,
        "dataset_size": len(getattr(self.sampler, "dataset", getattr(self.sampler, "data_source", ()))),
        "indices": [],
        "batch_sizes": [],
    }
    passes.append(record)
    for batch in _batch_sampler_iter(self):
        record["indices"].extend(int(i) for i in batch)  # type: ignore[union-attr]
        record["batch_sizes"].append(len(batch))  # type: ignore[union-attr]
        yield batch


def _write() -> None:
    out = Path(sys_argv_out) / f"rank{os.environ.get('RANK', '0')}.json"
    record = {"world_size": int(os.environ.get("WORLD_SIZE", "1")), "passes": passes, "saves": saves, "replicas": _fingerprints(),
              "learning_rates": learning_rates}
    out.write_text(json.dumps(record))


if __name__ == "__main__":
    sys_argv_out, script, *script_args = sys.argv[1:]
    BatchSampler.__iter__ = _recording_iter  # type: ignore[method-assign]
    torch.save = _recording_save
    torch.nn.parallel.DistributedDataParallel.__init__ = _recording_ddp_init  # type: ignore[method-assign]
    torch.optim.Optimizer.__init__ = _recording_optimizer_init  # type: ignore[method-assign]
    atexit.register(_write)
    sys.argv = [script, *script_args]
    sys.path.insert(0, str(Path(script).resolve().parent))
    runpy.run_path(script, run_name="__main__")
