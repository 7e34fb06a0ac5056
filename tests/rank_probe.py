"""Run a training script inside one torchrun rank and record which samples it loaded.

Usage: python -m torch.distributed.run ... -- tests/rank_probe.py OUT_DIR SCRIPT [ARGS...]

It wraps the DataLoader iterator's ``_next_index`` so every pass of every
DataLoader is recorded as the indices its index sampler yields (a
BatchSampler over any sampler, a batch sampler, or a sampler without
batching), with the sampler's class, the class it shards (a
ShardedSampler's inner sampler), the dataset length and the batch sizes;
the optimizers' constructor so each optimizer's learning rate is recorded;
``torch.save`` so
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
from torch.utils.data import dataloader
from torch.utils.data.sampler import BatchSampler

passes: list[dict[str, object]] = []
saves: list[str] = []
ddp_models: list[torch.nn.Module] = []
learning_rates: list[float] = []
_optimizer_init = torch.optim.Optimizer.__init__
_next_index = dataloader._BaseDataLoaderIter._next_index
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
    if isinstance(f, (str, os.PathLike)):
        # A save to a file; torch.distributed pickles objects it sends (broadcast_object_list) into memory.
        saves.append(str(f))
    return _torch_save(obj, f, *args, **kwargs)


def _described(index_sampler: object, dataset_size: int) -> dict[str, object]:
    """What drew a pass: the sampler a torch BatchSampler batches, else the index sampler itself (a batch sampler)."""
    sampler = index_sampler.sampler if type(index_sampler) is BatchSampler else index_sampler  # type: ignore[attr-defined]
    inner = getattr(sampler, "sampler", None)
    drawing = inner if inner is not None else sampler
    return {
        "sampler": type(sampler).__name__,
        "inner": type(inner).__name__ if inner is not None else None,
        "replacement": getattr(drawing, "replacement", False) is True,
        "split_batches": getattr(sampler, "split_batches", False) is True,
        "shuffle": getattr(sampler, "shuffle", True) is not False,  # DistributedSampler(shuffle=False) keeps one order
        "endless": not hasattr(drawing, "__len__"),  # a sampler with no length: one pass the script stops
        "dataset_size": dataset_size,
        "indices": [],
        "batch_sizes": [],
        "complete": False,  # the loader reached the end of the pass (not a next(iter(loader)) peek or a stop)
    }


def _recording_next_index(iterator):  # type: ignore[no-untyped-def]
    """Each new sampler iterator is one pass; its output is recorded as the loader consumes it, nothing drawn twice."""
    # A pass begins where the DataLoader makes a new sampler iterator (a new iterator, or
    # persistent workers reset for the next epoch); the record follows that object.
    if getattr(iterator, "_probe_sampler_iter", None) is not iterator._sampler_iter:
        iterator._probe_sampler_iter = iterator._sampler_iter
        iterator._probe_record = _described(iterator._index_sampler, len(iterator._dataset))
        passes.append(iterator._probe_record)
    try:
        index = _next_index(iterator)
    except StopIteration:
        iterator._probe_record["complete"] = True
        raise
    batch = list(index) if isinstance(index, (list, tuple, torch.Tensor)) else [index]
    iterator._probe_record["indices"].extend(int(i) for i in batch)
    iterator._probe_record["batch_sizes"].append(len(batch))
    return index


def _write() -> None:
    out = Path(sys_argv_out) / f"rank{os.environ.get('RANK', '0')}.json"
    record = {"world_size": int(os.environ.get("WORLD_SIZE", "1")), "passes": passes, "saves": saves, "replicas": _fingerprints(),
              "learning_rates": learning_rates}
    out.write_text(json.dumps(record))


if __name__ == "__main__":
    sys_argv_out, script, *script_args = sys.argv[1:]
    dataloader._BaseDataLoaderIter._next_index = _recording_next_index  # type: ignore[method-assign]
    torch.save = _recording_save
    torch.nn.parallel.DistributedDataParallel.__init__ = _recording_ddp_init  # type: ignore[method-assign]
    torch.optim.Optimizer.__init__ = _recording_optimizer_init  # type: ignore[method-assign]
    atexit.register(_write)
    sys.argv = [script, *script_args]
    sys.path.insert(0, str(Path(script).resolve().parent))
    runpy.run_path(script, run_name="__main__")
