"""The first code of every process verify launches; it patches this process, then runs the script.

Usage (by the runner only): ``python -m dp2ddp.verify.bootstrap SCRIPT [ARGS...]``
with the ``RunConfig`` in the ``DP2DDP_VERIFY`` environment variable, directly
for the reference and under ``torch.distributed.run -m`` for each converted
rank. Launched as a module rather than through ``sitecustomize``, which would
replace a user's own. The script runs as ``__main__`` with its own argv and its
directory first on ``sys.path``, as ``python SCRIPT`` would run it.

Each process writes, under ``out_dir``, ``<role>-rank<r>.log`` (its stdout and
stderr), ``.pid``, ``.jsonl`` (its losses, see ``capture``) and, when it ends,
``.json`` (how it ended). A rank without a ``.json`` did not finish. SIGUSR1
makes a process write its Python stack to its log: where a hung rank waits.
"""

from __future__ import annotations

import faulthandler
import json
import os
import runpy
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from dp2ddp.verify import alignment, capture
from dp2ddp.verify.config import RunConfig


def _redirect_output(log: Path) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _script_traceback(error: BaseException, script: str) -> str:
    """The traceback from the script's first frame on; the bootstrap and runpy frames say nothing."""
    frames = traceback.extract_tb(error.__traceback__)
    first = next((i for i, frame in enumerate(frames) if frame.filename == script), 0)
    lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames[first:])]
    return "".join(lines + traceback.format_exception_only(type(error), error))


def _force_backend(backend: str) -> None:
    import torch.distributed as dist

    init_process_group = dist.init_process_group

    def forced(*args: Any, **kwargs: Any) -> Any:
        kwargs.pop("backend", None)
        return init_process_group(backend, *args[1:], **kwargs)

    dist.init_process_group = forced


def _install(config: RunConfig, recorder: capture.LossRecorder) -> None:
    if config.cpu:
        from dp2ddp.verify import cpu_device

        cpu_device.install()
    if config.synthetic_data:
        from dp2ddp.verify import synthetic

        synthetic.install(config.synthetic_size)
    alignment.force_seeds(config.seed)
    if config.role == "reference":
        alignment.distributed_sampler_order()
        if config.world_size > 1:
            alignment.per_rank_batch_norm(config.world_size)
    else:
        alignment.epochs_from_first_set_epoch()
        if config.backend:
            _force_backend(config.backend)
    if config.dropout == "off":
        alignment.no_dropout()
    else:
        alignment.global_dropout_masks(config)
    capture.install(recorder)


def main() -> None:
    config = RunConfig.from_environment()
    script, args = sys.argv[1], sys.argv[2:]
    name = Path(config.out_dir) / f"{config.role}-rank{config.rank()}"
    _redirect_output(name.with_suffix(".log"))
    faulthandler.register(signal.SIGUSR1, all_threads=False)
    name.with_suffix(".pid").write_text(str(os.getpid()))
    recorder = capture.LossRecorder(name.with_suffix(".jsonl"), config.max_steps)
    _install(config, recorder)

    sys.argv = [script, *args]
    sys.path[0] = config.import_dir or os.path.dirname(os.path.abspath(script))
    outcome: dict[str, Any] = {"outcome": "finished"}
    try:
        runpy.run_path(script, run_name="__main__")
    except capture.StopRun:
        outcome = {"outcome": "stopped"}
    except SystemExit as exit:
        if exit.code not in (None, 0):
            outcome = {"outcome": "error", "error": f"the script exited with status {exit.code}"}
        raise
    except BaseException as error:
        outcome = {"outcome": "error", "error": _script_traceback(error, script)}
        raise
    finally:
        recorder.close()
        outcome.update(ended_at=time.time())
        name.with_suffix(".json").write_text(json.dumps(outcome))


if __name__ == "__main__":
    main()
