"""The first code of every process verify launches; it patches this process, then runs the script.

Usage (by the runner only): ``python -m dp2ddp.verify.bootstrap SCRIPT [ARGS...]``
with the ``RunConfig`` in the ``DP2DDP_VERIFY`` environment variable, directly
for the reference and under ``torch.distributed.run -m`` for each converted
rank. Launched as a module rather than through ``sitecustomize``, which would
replace a user's own. The script runs as ``__main__`` with its own argv and its
directory first on ``sys.path``, as ``python SCRIPT`` would run it.

Each process writes, under ``out_dir``, ``<role>-rank<r>.out`` (its stdout),
``.log`` (its stderr), ``.pid``, ``.jsonl`` (its losses, see ``capture``), the
records of ``observe`` and, when it ends, ``.json`` (how it ended and what it
saw of the process group). A rank without a ``.json`` did not finish. SIGUSR1
makes a process write its Python stack to its stderr log: where a hung rank waits.

A converted copy of the script lives in a temporary folder, but runs with
``__file__`` set to the original's path, so files next to the script are found.
"""

from __future__ import annotations

import builtins
import faulthandler
import json
import os
import runpy
import signal
import sys
import time
import traceback
import types
from pathlib import Path
from typing import Any

from dp2ddp.verify import alignment, capture
from dp2ddp.verify.config import RunConfig
from dp2ddp.verify.noise import GlobalNoise, UnalignedDraws, rows_along_ddp_dim
from dp2ddp.verify.noise import install as install_noise
from dp2ddp.verify.observe import Observer


def _redirect_output(name: Path) -> None:
    # stdout apart from stderr: the logs comparison reads what the script prints, not warnings.
    for suffix, target in ((".out", 1), (".log", 2)):
        fd = os.open(name.with_suffix(suffix), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, target)
        os.close(fd)


def _script_traceback(error: BaseException, script: str) -> str:
    """The traceback from the script's first frame on; the bootstrap and runpy frames say nothing."""
    frames = traceback.extract_tb(error.__traceback__)
    first = next((i for i, frame in enumerate(frames) if frame.filename == script), 0)
    lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames[first:])]
    return "".join(lines + traceback.format_exception_only(type(error), error))


def _watch_process_group(observer: Observer, backend: str | None) -> None:
    """Record the process group and every DDP wrap; force ``backend`` on the group when given."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    init_process_group = dist.init_process_group

    def watched(*args: Any, **kwargs: Any) -> Any:
        if backend is not None:
            kwargs.pop("backend", None)
            args = (backend, *args[1:])
        result = init_process_group(*args, **kwargs)
        observer.process_group_created()
        return result

    dist.init_process_group = watched
    ddp_init = DistributedDataParallel.__init__

    def recorded(self: DistributedDataParallel, *args: Any, **kwargs: Any) -> None:
        ddp_init(self, *args, **kwargs)
        observer.wrapped(self.module)

    DistributedDataParallel.__init__ = recorded  # type: ignore[method-assign]


def _install(config: RunConfig, recorder: capture.LossRecorder, observer: Observer) -> GlobalNoise:
    if config.cpu:
        from dp2ddp.verify import cpu_device

        cpu_device.install()
    if config.synthetic_data:
        from dp2ddp.verify import synthetic

        synthetic.install(config.synthetic_size)
    if config.precision == "float64":
        alignment.float64()
    alignment.force_seeds(config.seed)
    if config.statistical:
        alignment.vary_script_seeds(config.seed)
    if config.perturb:
        alignment.rounding_noise(config.seed)
    rank, world = (config.rank(), config.world_size) if config.role == "converted" else (0, 1)
    emulated = config.world_size if config.role == "reference" else 1
    noise = GlobalNoise(config.seed, rank, world, dropout=config.dropout != "off", emulated_world=emulated)
    name = Path(config.out_dir) / f"{config.role}-rank{config.rank()}"
    noise.unaligned = UnalignedDraws(sys.argv[1], config.script_file or sys.argv[1], config.import_dir,
                                     name.with_suffix(".unaligned"))  # fmt: skip
    install_noise(noise)
    if config.role == "reference":
        observer.watch_data_parallel()
        alignment.distributed_sampler_order()
        alignment.seeded_sampler_order()
        if config.world_size > 1:
            alignment.per_rank_forward(config.world_size, noise)
            alignment.per_rank_batch_norm(config.world_size)
    else:
        alignment.epochs_from_first_set_epoch(lambda sampler, own: observer.sampler_pass(sampler, recorder.steps, own))
        _watch_process_group(observer, config.backend)
        observer.redraw_inits_after_wrap(config.rank())
        rows_along_ddp_dim(noise)
        alignment.sharded_sampler_passes()
        observer.watch_loaders()
        capture.record_loads(observer.facts)
        script = sys.argv[1]  # the file run, whose frames are the script's own code
        own_dir = config.import_dir or os.path.dirname(os.path.abspath(script))
        observer.watch_buffers()
        observer.watch_writes(script, own_dir, config.out_dir)
        observer.watch_collectives(script, own_dir)
    observer.count_samples()
    capture.install(recorder)
    return noise


def main() -> None:
    config = RunConfig.from_environment()
    script, args = sys.argv[1], sys.argv[2:]
    name = Path(config.out_dir) / f"{config.role}-rank{config.rank()}"  # the probe runs as a reference
    _redirect_output(name)
    faulthandler.register(signal.SIGUSR1, all_threads=False)
    name.with_suffix(".pid").write_text(str(os.getpid()))
    observer = Observer(name, replicas=config.role == "converted")
    recorder = capture.LossRecorder(name.with_suffix(".jsonl"), config.max_steps, observer.optimizer_stepped)
    noise = _install(config, recorder, observer)

    sys.argv = [config.script_file or script, *args]
    sys.path[0] = config.import_dir or os.path.dirname(os.path.abspath(script))
    outcome: dict[str, Any] = {"outcome": "finished"}
    try:
        _run_as_main(script, config.script_file or script)
    except capture.StopRun:
        outcome = {"outcome": "stopped"}
    except SystemExit as exit:
        outcome["exit_status"] = exit.code if isinstance(exit.code, int) or exit.code is None else 1
        if exit.code not in (None, 0):
            message = exit.code if isinstance(exit.code, str) else f"the script exited with status {exit.code}"
            outcome.update(outcome="error", error=message)
        raise
    except BaseException as error:
        outcome = {"outcome": "error", "error": _script_traceback(error, script)}
        raise
    finally:
        recorder.close()
        observer.close()
        outcome.update(ended_at=time.time(), steps=recorder.steps, dropout_off=noise.switched_off,
                       autograd_grad=recorder.grad_calls, unaligned_draws=noise.unaligned.sites(), **observer.facts)
        name.with_suffix(".json").write_text(json.dumps(outcome))


def _run_as_main(script: str, file: str) -> None:
    """``runpy.run_path(script, run_name="__main__")``, but with ``__file__`` set to ``file``.

    A converted copy runs from a temporary folder; its tracebacks name the copy,
    but ``os.path.dirname(__file__)`` must find what lies next to the original.
    """
    if file == script:
        runpy.run_path(script, run_name="__main__")
        return
    code = compile(Path(script).read_bytes(), script, "exec")
    main = types.ModuleType("__main__")
    main.__file__ = file
    main.__builtins__ = builtins  # type: ignore[attr-defined]
    saved = sys.modules["__main__"]
    sys.modules["__main__"] = main  # pickling classes the script defines finds them here
    try:
        exec(code, main.__dict__)  # noqa: S102 - running the user's script is what verify does
    finally:
        sys.modules["__main__"] = saved


if __name__ == "__main__":
    main()
