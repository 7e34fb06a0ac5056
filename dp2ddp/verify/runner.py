"""Launch the reference and the converted run, bounded in time, and collect what each process recorded.

The converted script runs under ``python -m torch.distributed.run --standalone``
with N processes; the reference is the original script in one process on one
device, whole batches at a time, which is what DataParallel computes on one GPU
(on several GPUs it splits each batch into contiguous chunks with BatchNorm
statistics per chunk; the reference emulates the converted run's per-rank
statistics instead). The runs go one after the other, in the current
directory, as the user would run them: the reference first, while the script
is being converted, then the converted run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from dp2ddp.verify.config import RunConfig

SEMANTICS = (
    "reference: the original script, one process on one device, whole batches, in DistributedSampler order; "
    "BatchNorm statistics per emulated rank; compared with the mean over ranks of the converted losses"
)
_MARKER = "DP2DDP_VERIFY_RUN"  # set in every launched process, so leftovers can be found and killed
_GRACE_S = 5.0
_TAIL_LINES = 25

Progress = Callable[[str, int], None]  # (run name, optimizer steps so far)


class VerifyError(Exception):
    """Verify cannot run as asked: bad arguments or a machine that cannot do it (exit 2)."""


@dataclass(frozen=True)
class Plan:
    original: Path
    converted: Path | None = None  # None: run_all is given a function that converts
    args: tuple[str, ...] = ()
    nproc: int = 2
    backend: str = "auto"  # auto | nccl | gloo
    device: str = "auto"  # auto | cpu | cuda
    max_steps: int | None = None
    timeout_s: float = 600.0
    seed: int = 0
    dropout: str = "mask"
    synthetic_data: bool = False
    synthetic_size: int = 256
    statistical_seeds: int = 0  # 0: exact comparison; k >= 2: k reference seeds


@dataclass(frozen=True)
class RankOutcome:
    rank: int
    outcome: str  # finished | stopped | error | unfinished
    losses: tuple[tuple[int, float], ...]
    error: str | None
    log_tail: str
    ended_at: float | None = None  # wall clock; the first rank to fail is the likely cause

    @property
    def ok(self) -> bool:
        return self.outcome in ("finished", "stopped")


@dataclass(frozen=True)
class RunOutcome:
    name: str
    command: tuple[str, ...]
    exit_code: int | None
    wall_s: float
    timed_out: bool
    ranks: tuple[RankOutcome, ...]
    launcher_tail: str

    @property
    def ok(self) -> bool:
        return not self.timed_out and self.exit_code == 0 and all(rank.ok for rank in self.ranks)


def visible_gpus() -> int:
    """How many GPUs a launched process would see, without importing torch here (2 s)."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return len([device for device in listed.split(",") if device.strip() and device.strip() != "-1"])
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        found = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(line.startswith("GPU ") for line in found.stdout.splitlines()) if found.returncode == 0 else 0


def resolve_device(plan: Plan, gpus: int) -> tuple[str, str]:
    """(backend, device) for the converted run; the reference uses the same device."""
    if plan.nproc < 1:
        raise VerifyError("--nproc must be at least 1")
    device = plan.device
    if device == "auto":
        device = "cuda" if gpus >= plan.nproc and plan.backend != "gloo" else "cpu"
    if device == "cuda" and gpus < plan.nproc:
        raise VerifyError(
            f"{plan.nproc} processes need {plan.nproc} GPUs and {gpus} are visible; "
            "use --nproc {gpus} or --device cpu".replace("{gpus}", str(gpus))
        )
    backend = plan.backend if plan.backend != "auto" else ("nccl" if device == "cuda" else "gloo")
    if backend == "nccl" and device == "cpu":
        raise VerifyError("NCCL runs on GPUs only; use --backend gloo on the CPU")
    return backend, device


def _environment(config: RunConfig, token: str, visible: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(config.to_environment())
    env[_MARKER] = token
    env["PYTHONUNBUFFERED"] = "1"  # a hung rank's last lines must already be in its log
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    return env


def _tail(path: Path, lines: int = _TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _read_losses(path: Path) -> list[tuple[int, float]]:
    losses = []
    try:
        text = path.read_text()
    except OSError:
        return []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a half-written last line of a killed process
        losses.append((int(record["step"]), float(record["loss"])))
    return losses


def _steps_so_far(out: Path, role: str) -> int:
    """The furthest optimizer step any rank has recorded; reads only the end of each losses file."""
    steps = 0
    for path in out.glob(f"{role}-rank*.jsonl"):
        try:
            with path.open("rb") as losses:
                losses.seek(max(losses.seek(0, os.SEEK_END) - 256, 0))
                last = losses.read().rstrip().rsplit(b"\n", 1)[-1]
            steps = max(steps, int(json.loads(last)["step"]))
        except (OSError, ValueError, KeyError):
            continue  # no line yet, or half of one
    return steps


def _kill_leftovers(token: str) -> None:
    """SIGKILL every process that carries this run's marker: torchrun starts ranks in sessions of their own."""
    needle = f"{_MARKER}={token}".encode()
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ValueError):
            continue


def _dump_stacks(out: Path, role: str) -> None:
    """Ask every rank still running to write its Python stack to its log (bootstrap registers SIGUSR1)."""
    signalled = False
    for pid_file in out.glob(f"{role}-rank*.pid"):
        if pid_file.with_suffix(".json").exists():
            continue
        try:
            os.kill(int(pid_file.read_text()), signal.SIGUSR1)
            signalled = True
        except (OSError, ValueError):
            continue
    if signalled:
        time.sleep(0.5)


def _stop(process: subprocess.Popen[bytes], token: str) -> None:
    # SIGTERM first: torchrun passes it on to its ranks and reaps them.
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=_GRACE_S)
    except (OSError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except OSError:
        pass
    process.wait()
    _kill_leftovers(token)


def launch(
    name: str,
    config: RunConfig,
    command: Sequence[str],
    plan: Plan,
    visible: str | None,
    progress: Progress,
    abort: Callable[[], bool] = lambda: False,
) -> RunOutcome:
    out = Path(config.out_dir)
    token = uuid.uuid4().hex
    launcher_log = out / f"{config.role}-launcher.log"
    started = time.monotonic()
    timed_out = False
    with launcher_log.open("wb") as log:
        process = subprocess.Popen(
            command, env=_environment(config, token, visible), stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        try:
            while process.poll() is None:
                if abort():
                    _stop(process, token)
                    break
                if time.monotonic() - started > plan.timeout_s:
                    timed_out = True
                    _dump_stacks(out, config.role)
                    _stop(process, token)
                    break
                progress(name, _steps_so_far(out, config.role))
                time.sleep(0.25)
        except BaseException:
            _stop(process, token)  # Ctrl-C: leave nothing running
            raise
    wall = time.monotonic() - started
    _kill_leftovers(token)
    processes = config.world_size if config.role == "converted" else 1
    ranks = tuple(_rank_outcome(out / f"{config.role}-rank{rank}", rank) for rank in range(processes))
    return RunOutcome(name, tuple(command), process.returncode, wall, timed_out, ranks, _tail(launcher_log))


def _rank_outcome(name: Path, rank: int) -> RankOutcome:
    losses = tuple(_read_losses(name.with_suffix(".jsonl")))
    try:
        ended = json.loads(name.with_suffix(".json").read_text())
    except (OSError, json.JSONDecodeError):
        return RankOutcome(rank, "unfinished", losses, None, _tail(name.with_suffix(".log")))
    log = _tail(name.with_suffix(".log"))
    return RankOutcome(rank, ended["outcome"], losses, ended.get("error"), log, ended["ended_at"])


@dataclass(frozen=True)
class Runs:
    backend: str
    device: str
    converted: RunOutcome | None  # None when a reference run failed first
    references: tuple[RunOutcome, ...]  # one, or one per seed in statistical mode

    @property
    def all(self) -> tuple[RunOutcome, ...]:
        return (*self.references, *([self.converted] if self.converted else []))


def run_all(plan: Plan, work: Path, progress: Progress, convert: Callable[[], Path] | None = None) -> Runs:
    """The reference run(s), then the converted run.

    ``convert``, when given, writes the converted script and returns its path;
    it runs in a thread while the reference runs (converting takes seconds),
    and if it fails the reference is stopped and its exception raised here.
    """
    backend, device = resolve_device(plan, visible_gpus())
    cpu = device == "cpu"
    base = RunConfig(
        role="reference", out_dir="", seed=plan.seed, world_size=plan.nproc, max_steps=plan.max_steps,
        dropout=plan.dropout, synthetic_data=plan.synthetic_data, synthetic_size=plan.synthetic_size, cpu=cpu,
        import_dir=str(plan.original.resolve().parent),
    )  # fmt: skip
    with ThreadPoolExecutor(max_workers=1) as pool:
        converting = pool.submit(convert) if convert is not None else None

        def conversion_failed() -> bool:
            return converting is not None and converting.done() and converting.exception() is not None

        references: list[RunOutcome] = []
        for seed in range(plan.seed, plan.seed + max(plan.statistical_seeds, 1)):
            out = work / f"reference-seed{seed}"
            out.mkdir()
            command = [sys.executable, "-m", "dp2ddp.verify.bootstrap", str(plan.original), *plan.args]
            label = "reference (1 process" + (f", seed {seed})" if plan.statistical_seeds else ")")
            # One device: DataParallel on several GPUs would split batches into chunks.
            visible = "" if cpu else _first_gpu()
            config = replace(base, out_dir=str(out), seed=seed)
            references.append(launch(label, config, command, plan, visible, progress, conversion_failed))
            if not references[-1].ok:
                break
        script = converting.result() if converting is not None else plan.converted
    if not references[-1].ok:
        return Runs(backend, device, None, tuple(references))
    out = work / "converted"
    out.mkdir()
    torchrun = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={plan.nproc}",
        "-m", "--", "dp2ddp.verify.bootstrap", str(script), *plan.args,
    ]  # fmt: skip
    config = replace(base, role="converted", out_dir=str(out), backend=backend)
    name = f"converted ({plan.nproc} processes, {backend}, {device})"
    converted = launch(name, config, torchrun, plan, "" if cpu else None, progress)
    return Runs(backend, device, converted, tuple(references))


def _first_gpu() -> str:
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    return listed.split(",")[0].strip() if listed else "0"
