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
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dp2ddp.interrupts import Interrupted, stopping_on_signals  # noqa: F401 (verify's names for them)
from dp2ddp.verify.config import RunConfig

SEMANTICS = (
    "reference: the original script, one process on one device, in DistributedSampler order; DataParallel runs "
    "each emulated rank's rows through the model on their own (BatchNorm statistics and dropout per rank); "
    "compared with the mean over ranks of the converted losses"
)
_MARKER = "DP2DDP_VERIFY_RUN"  # set in every launched process, so leftovers can be found and killed
_GRACE_S = 5.0
_TAIL_LINES = 25
REFERENCE_TIMEOUT_S = 600.0
# Without --timeout the converted run may take this many times the reference, plus a start-up allowance:
# two processes share the machine, torchrun adds about 2 s and DDP a little per step.
_TIMEOUT_FACTOR, _TIMEOUT_START_S = 4.0, 60.0
# After one rank has ended, how long the others may go without a step before their stacks are read.
_LEFT_QUIET_S = 3.0
# Frames that mean a process waits for the others: a collective, DDP's reducer, or a backward it runs.
_WAITING = ("torch/distributed/", "torch/nn/parallel/distributed.py", "torch/autograd/")

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
    timeout_s: float | None = None  # None: 600 s for the reference, then derived from its time
    seed: int = 0
    dropout: str = "mask"
    synthetic_data: bool = False
    synthetic_size: int = 256
    statistical_seeds: int = 0  # 0: exact comparison; k >= 2: k seed pairs (a reference and a converted run each)
    precision: str = "auto"  # auto: float64 on the CPU, as written on GPUs | float64 | native


@dataclass(frozen=True)
class RankOutcome:
    rank: int
    outcome: str  # finished | stopped | error | unfinished | left (the process ended without a word)
    losses: tuple[tuple[int, float], ...]
    error: str | None
    log_tail: str  # the last lines of its stderr, then of its stdout
    ended_at: float | None = None  # wall clock; the first rank to fail is the likely cause
    steps: int | None = None  # optimizer steps it took, when it ended through the bootstrap
    facts: dict[str, Any] = field(default_factory=dict)  # process group, world size, DDP wraps (observe)
    stdout: str = ""
    exit_status: int | None = None  # the script's own sys.exit status, when it called sys.exit
    stepped: tuple[str, ...] = ()  # the optimizer each optimizer step stepped, by step
    learning_rates: tuple[tuple[float | None, ...], ...] = ()  # its parameter groups' learning rates, by step

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
    timeout_s: float = 0.0
    left_early: str | None = None  # the run was stopped because a rank left while the others waited for it
    out_dir: str = ""

    @property
    def ok(self) -> bool:
        # Every rank ended its script: an abort at exit after that (gloo's "terminate called
        # without an active exception") does not undo what they recorded.
        return not self.timed_out and self.left_early is None and all(rank.ok for rank in self.ranks)

    @property
    def exit_note(self) -> str | None:
        if self.ok and self.exit_code != 0:
            return (f"{self.name}: every process finished and recorded its losses, then the launcher exited with "
                    f"status {self.exit_code} (an abort at exit); the losses are kept")  # fmt: skip
        return None


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


def resolve_precision(plan: Plan, device: str) -> str:
    if plan.precision == "auto":
        return "float64" if device == "cpu" else "native"
    if plan.precision == "float64" and device != "cpu":
        raise VerifyError("--precision float64 runs on the CPU only (--device cpu): GPUs are slow at float64")
    return plan.precision


def _environment(config: RunConfig, token: str, visible: str | None) -> dict[str, str]:
    env = dict(os.environ)
    if config.role == "reference" and config.world_size > 1:
        # torchrun runs each rank on one thread unless told otherwise; CPU kernels split their sums by
        # thread, so the reference does the same, or deep nets amplify the difference.
        env.setdefault("OMP_NUM_THREADS", "1")
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
        if "loss" in record:
            losses.append((int(record["step"]), float(record["loss"])))
    return losses


def _read_optimizers(path: Path) -> tuple[tuple[str, ...], tuple[tuple[float | None, ...], ...]]:
    """By step: the optimizer it stepped ("optimizer 2 (Adam)") and its parameter groups' learning rates."""
    stepped, rates = [], []
    for line in _read(path).splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "optimizer" in record:
            stepped.append(f"optimizer {int(record['optimizer']) + 1} ({record.get('name', '?')})")
            rates.append(tuple(record.get("lr") or ()))
    return tuple(stepped), tuple(rates)


def _steps_so_far(out: Path, role: str, rank: int | None = None) -> int:
    """The furthest optimizer step any rank (or ``rank``) has recorded; reads only the end of each losses file."""
    steps = 0
    for path in out.glob(f"{role}-rank{'*' if rank is None else rank}.jsonl"):
        if not path.stem.rsplit("rank", 1)[1].isdigit():
            continue  # params.jsonl and samplers.jsonl
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


def _dump_stacks(out: Path, role: str) -> dict[int, str]:
    """Ask every rank still running to write its Python stack to its stderr log; {rank: the stack}."""
    sizes: dict[int, tuple[Path, int]] = {}
    for pid_file in out.glob(f"{role}-rank*.pid"):
        if pid_file.with_suffix(".json").exists():
            continue
        rank = int(pid_file.stem.rsplit("rank", 1)[1])
        log = pid_file.with_suffix(".log")
        try:
            size = log.stat().st_size if log.exists() else 0
            os.kill(int(pid_file.read_text()), signal.SIGUSR1)
            sizes[rank] = (log, size)
        except (OSError, ValueError):
            continue
    if sizes:
        time.sleep(0.5)
    stacks = {}
    for rank, (log, size) in sizes.items():
        try:
            with log.open("rb") as text:
                text.seek(size)
                stacks[rank] = text.read().decode(errors="replace")
        except OSError:
            continue
    return stacks


def _alive(pid_file: Path) -> bool:
    try:
        return Path(f"/proc/{int(pid_file.read_text())}").exists()
    except (OSError, ValueError):
        return True  # not started yet, as far as we can tell


def _ended_ranks(out: Path, role: str) -> dict[int, str]:
    """{rank: how it ended} for ranks that ended: through the bootstrap (its .json), or not (the process is gone)."""
    ended = {}
    for pid_file in out.glob(f"{role}-rank*.pid"):
        rank = int(pid_file.stem.rsplit("rank", 1)[1])
        if pid_file.with_suffix(".json").exists():
            ended[rank] = "ended"
        elif not _alive(pid_file):
            ended[rank] = "left"
    return ended


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


class _LeftEarly:
    """Notices a rank that ended while the others wait for it in a collective, long before any timeout.

    Ranks of a correct DDP run end together. When one has ended and the rest take no
    step for a while, their stacks are read: if every one waits in torch.distributed,
    DDP or a backward, they will wait forever, and the run is stopped at once.
    """

    def __init__(self, out: Path, role: str, processes: int) -> None:
        self.out, self.role, self.processes = out, role, processes
        self.quiet_since: float | None = None
        self.steps = -1

    def check(self) -> str | None:
        if self.processes < 2:
            return None
        ended = _ended_ranks(self.out, self.role)
        if not ended or len(ended) == self.processes:
            self.quiet_since = None
            return None
        steps = _steps_so_far(self.out, self.role)
        now = time.monotonic()
        if steps != self.steps or self.quiet_since is None:
            self.steps, self.quiet_since = steps, now
            return None
        if now - self.quiet_since < _LEFT_QUIET_S:
            return None
        self.quiet_since = now  # look again later if they are busy with something else
        stacks = _dump_stacks(self.out, self.role)
        if not stacks or not all(any(frame in stack for frame in _WAITING) for stack in stacks.values()):
            return None
        gone = ", ".join(f"rank {rank}" + (" (its process ended without finishing the script)" if how == "left" else "")
                         for rank, how in sorted(ended.items()))  # fmt: skip
        waiting = ", ".join(str(rank) for rank in sorted(stacks))
        return f"{gone} left the run at step {steps} while rank {waiting} waited for it in a collective"


def launch(
    name: str,
    config: RunConfig,
    command: Sequence[str],
    timeout_s: float,
    visible: str | None,
    progress: Progress,
    abort: Callable[[], bool] = lambda: False,
) -> RunOutcome:
    out = Path(config.out_dir)
    token = uuid.uuid4().hex
    launcher_log = out / f"{config.role}-launcher.log"
    processes = config.world_size if config.role == "converted" else 1
    watch = _LeftEarly(out, config.role, processes)
    started = time.monotonic()
    timed_out, left_early = False, None
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
                if time.monotonic() - started > timeout_s:
                    timed_out = True
                    _dump_stacks(out, config.role)
                    _stop(process, token)
                    break
                left_early = watch.check()
                if left_early is not None:
                    _stop(process, token)
                    break
                progress(name, _steps_so_far(out, config.role))
                time.sleep(0.25)
        except BaseException:
            _stop(process, token)  # Ctrl-C: leave nothing running
            raise
    wall = time.monotonic() - started
    _kill_leftovers(token)
    # A rank without an outcome that the launcher did not stop (torchrun logs each process it signals)
    # and verify did not stop either ended on its own: os._exit, a signal, the out-of-memory killer.
    signalled = set(re.findall(r"Sending process (\d+) closing signal", _read(launcher_log)))
    stopped_by_us = timed_out or left_early is not None
    ranks = tuple(
        _rank_outcome(out / f"{config.role}-rank{rank}", rank, signalled, stopped_by_us) for rank in range(processes)
    )
    return RunOutcome(
        name, tuple(command), process.returncode, wall, timed_out, ranks, _tail(launcher_log), timeout_s, left_early,
        str(out),
    )  # fmt: skip


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _rank_outcome(name: Path, rank: int, signalled: set[str], stopped_by_us: bool) -> RankOutcome:
    losses = tuple(_read_losses(name.with_suffix(".jsonl")))
    stdout = _read(name.with_suffix(".out"))
    tails = [_tail(name.with_suffix(".log")), "\n".join(stdout.rstrip().splitlines()[-10:])]
    log = "\n".join(tail for tail in tails if tail)
    try:
        ended = json.loads(name.with_suffix(".json").read_text())
    except (OSError, json.JSONDecodeError):
        pid = _read(name.with_suffix(".pid")).strip()
        if pid and pid not in signalled and not stopped_by_us:
            steps = len({step for step, _ in losses})
            return RankOutcome(rank, "left", losses, None, log, None, steps, stdout=stdout)
        return RankOutcome(rank, "unfinished", losses, None, log, stdout=stdout)
    keys = ("process_group", "world_size", "ddp_modules", "backend", "redrawn_after_wrap", "dropout_off", "autograd_grad",
            "distributed_sampler_passes", "data_parallel", "loaded", "unaligned_draws",
            "samples_per_step")  # fmt: skip
    facts = {key: ended[key] for key in keys if ended.get(key) is not None}
    return RankOutcome(
        rank, ended["outcome"], losses, ended.get("error"), log, ended["ended_at"], ended.get("steps"), facts, stdout,
        ended.get("exit_status"), *_read_optimizers(name.with_suffix(".jsonl")),
    )  # fmt: skip


@dataclass(frozen=True)
class Runs:
    backend: str
    device: str
    converted: RunOutcome | None  # None when a reference run failed first; statistical mode: the first seed's
    references: tuple[RunOutcome, ...]  # one, or one per seed in statistical mode
    written: tuple[str, ...] = ()  # files the reference runs created or changed in the working directory
    # Statistical mode: converted run k has reference k's seed (pairs); ``converted`` is the first of them.
    conversions: tuple[RunOutcome, ...] = ()

    @property
    def all(self) -> tuple[RunOutcome, ...]:
        return (*self.references, *(self.conversions or ([self.converted] if self.converted else [])))


def _snapshot(folder: Path) -> dict[str, float]:
    """Modification times of the files in ``folder`` and one level down: what a script's run leaves there."""
    seen = {}
    for depth in ("*", "*/*"):
        for path in folder.glob(depth):
            try:
                if path.is_file():
                    seen[str(path.relative_to(folder))] = path.stat().st_mtime
            except OSError:
                continue
    return seen


def converted_timeout(plan: Plan, references: Sequence[RunOutcome]) -> float:
    """--timeout when given; else a multiple of the slowest reference run, so a hang is named in minutes, not 10."""
    if plan.timeout_s is not None:
        return plan.timeout_s
    return min(REFERENCE_TIMEOUT_S, _TIMEOUT_START_S + _TIMEOUT_FACTOR * max(run.wall_s for run in references))


def run_all(plan: Plan, work: Path, progress: Progress, convert: Callable[[], Path] | None = None) -> Runs:
    """The reference run(s), then the converted run.

    ``convert``, when given, writes the converted script and returns its path;
    it runs in a thread while the reference runs (converting takes seconds),
    and if it fails the reference is stopped and its exception raised here.
    """
    backend, device = resolve_device(plan, visible_gpus())
    cpu = device == "cpu"
    original = plan.original.resolve()
    base = _reference_config(plan, device)
    before = _snapshot(Path.cwd())
    with ThreadPoolExecutor(max_workers=1) as pool:
        converting = pool.submit(convert) if convert is not None else None

        def conversion_failed() -> bool:
            return converting is not None and converting.done() and converting.exception() is not None

        references: list[RunOutcome] = []
        for seed in reference_seeds(plan):
            out = work / f"reference-seed{seed}"
            out.mkdir()
            command = [sys.executable, "-m", "dp2ddp.verify.bootstrap", str(plan.original), *plan.args]
            label = "reference (1 process" + (f", seed {seed})" if plan.statistical_seeds else ")")
            # One device: DataParallel on several GPUs would split batches into chunks.
            visible = "" if cpu else _first_gpu()
            config = replace(base, out_dir=str(out), seed=seed)
            timeout = plan.timeout_s if plan.timeout_s is not None else REFERENCE_TIMEOUT_S
            references.append(launch(label, config, command, timeout, visible, progress, conversion_failed))
            if not references[-1].ok:
                break
        script = converting.result() if converting is not None else plan.converted
    after = _snapshot(Path.cwd())
    written = tuple(sorted(name for name, stamp in after.items() if before.get(name) != stamp))
    if not references[-1].ok or not references[-1].ranks[0].losses:  # nothing to compare the converted run with
        return Runs(backend, device, None, tuple(references), written)
    out = work / "converted"
    out.mkdir()
    torchrun = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={plan.nproc}",
        "-m", "--", "dp2ddp.verify.bootstrap", str(script), *plan.args,
    ]  # fmt: skip
    assert script is not None
    config = replace(
        base, role="converted", out_dir=str(out), backend=backend, seed=converted_seed(plan),
        script_file=str(original) if convert is not None else None,  # our copy lives in a temporary folder
    )  # fmt: skip
    name = f"converted ({plan.nproc} processes, {backend}, {device})"
    if plan.statistical_seeds:
        out.rmdir()
        conversions = _paired_conversions(plan, config, torchrun, converted_timeout(plan, references), work, progress)
        return Runs(backend, device, conversions[0], tuple(references), written, conversions)
    converted = launch(name, config, torchrun, converted_timeout(plan, references), "" if cpu else None, progress)
    return Runs(backend, device, converted, tuple(references), written)


def _paired_conversions(
    plan: Plan, config: RunConfig, command: Sequence[str], timeout_s: float, work: Path, progress: Progress
) -> tuple[RunOutcome, ...]:
    """Statistical mode: one converted run per reference seed, with that seed, so pair k shares everything
    verify lines up (initial weights, data order, aligned noise) and differs only in what it cannot."""
    conversions: list[RunOutcome] = []
    for seed in reference_seeds(plan):
        out = work / f"converted-seed{seed}"
        out.mkdir()
        name = f"converted ({plan.nproc} processes, {config.backend}, seed {seed})"
        visible = "" if config.cpu else None
        conversions.append(launch(name, replace(config, out_dir=str(out), seed=seed), command, timeout_s, visible,
                                  progress))  # fmt: skip
        if not conversions[-1].ok:
            break
    return tuple(conversions)


def _reference_config(plan: Plan, device: str) -> RunConfig:
    return RunConfig(
        role="reference", out_dir="", seed=plan.seed, world_size=plan.nproc, max_steps=plan.max_steps,
        dropout=plan.dropout, synthetic_data=plan.synthetic_data, synthetic_size=plan.synthetic_size,
        cpu=device == "cpu", import_dir=str(plan.original.resolve().parent), statistical=plan.statistical_seeds > 0,
        precision=resolve_precision(plan, device),
    )  # fmt: skip


def run_noise_probe(plan: Plan, runs: Runs, work: Path, progress: Progress) -> RunOutcome:
    """The reference again, its parameters nudged by a few units in the last place before every step.

    How far this run drifts from the reference measures how much the training amplifies
    rounding, which is all that a correct conversion changes: a deep BatchNorm net with two
    samples per process can turn 1e-16 into 1e-2 within three steps, even in float64.
    """
    out = work / "reference-probe"
    out.mkdir()
    config = replace(_reference_config(plan, runs.device), out_dir=str(out), perturb=True)
    command = [sys.executable, "-m", "dp2ddp.verify.bootstrap", str(plan.original), *plan.args]
    timeout = plan.timeout_s if plan.timeout_s is not None else converted_timeout(plan, runs.references)
    visible = "" if runs.device == "cpu" else _first_gpu()
    return launch("reference with rounding noise (1 process)", config, command, timeout, visible, progress)


def reference_seeds(plan: Plan) -> range:
    return range(plan.seed, plan.seed + max(plan.statistical_seeds, 1))


def converted_seed(plan: Plan) -> int:
    """The first converted run's seed: the reference's. Statistical mode pairs converted run k with reference
    seed k (``reference_seeds``), so the pair differs only in the randomness verify cannot line up."""
    return plan.seed


def _first_gpu() -> str:
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    return listed.split(",")[0].strip() if listed else "0"
