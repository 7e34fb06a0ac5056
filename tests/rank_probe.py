"""Run a training script inside one torchrun rank and record which samples it loaded.

Usage: python -m torch.distributed.run ... -- tests/rank_probe.py OUT_DIR SCRIPT [ARGS...]

It wraps ``BatchSampler.__iter__`` so every pass of every DataLoader is
recorded with the sampler type and dataset length, and ``torch.save`` so
every checkpoint this process writes is recorded, then runs SCRIPT as
``__main__``. At exit it writes ``OUT_DIR/rank<RANK>.json``.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import sys
from pathlib import Path

import torch
from torch.utils.data.sampler import BatchSampler

passes: list[dict[str, object]] = []
saves: list[str] = []
_batch_sampler_iter = BatchSampler.__iter__
_torch_save = torch.save


def _recording_save(obj, f, *args, **kwargs):  # type: ignore[no-untyped-def]
    saves.append(str(f))
    return _torch_save(obj, f, *args, **kwargs)


def _recording_iter(self: BatchSampler):  # type: ignore[no-untyped-def]
    record: dict[str, object] = {
        "sampler": type(self.sampler).__name__,
        "dataset_size": len(getattr(self.sampler, "dataset", getattr(self.sampler, "data_source", ()))),
        "indices": [],
    }
    passes.append(record)
    for batch in _batch_sampler_iter(self):
        record["indices"].extend(int(i) for i in batch)  # type: ignore[union-attr]
        yield batch


def _write() -> None:
    out = Path(sys_argv_out) / f"rank{os.environ.get('RANK', '0')}.json"
    out.write_text(json.dumps({"world_size": int(os.environ.get("WORLD_SIZE", "1")), "passes": passes, "saves": saves}))


if __name__ == "__main__":
    sys_argv_out, script, *script_args = sys.argv[1:]
    BatchSampler.__iter__ = _recording_iter  # type: ignore[method-assign]
    torch.save = _recording_save
    atexit.register(_write)
    sys.argv = [script, *script_args]
    sys.path.insert(0, str(Path(script).resolve().parent))
    runpy.run_path(script, run_name="__main__")
