"""What ``convert`` takes and gives back, without the machinery that converts. Imports no LibCST.

The CLI parses its options into these, and a file the prefilter settles gets
its result here, so ``dp2ddp convert`` on files without DataParallel never
loads the codemods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from dp2ddp.codemods._base import Finding


class ConversionError(Exception):
    """The source cannot be converted; ``line``/``column`` point at the cause when known."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column

    def __str__(self) -> str:
        where = f"{self.line}:{self.column}: " if self.line is not None else ""
        return f"{where}{self.message}"


# "global": each process loads batch // world_size, so a step sees DataParallel's batch.
# "per-process": each process loads the whole batch; the learning rate is scaled by the world size.
BatchMode = Literal["global", "per-process"]
BATCH_MODES: tuple[BatchMode, ...] = ("global", "per-process")

# Where a project's distributed helpers go: into each converted file, or once into a module of the project.
HelpersMode = Literal["inline", "module"]
DEFAULT_HELPERS_MODULE = "ddp_helpers"


@dataclass(frozen=True)
class ConvertOptions:
    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    batch: BatchMode = "global"
    # A prefix of the codemods the migration report converts with to attribute each change: the whole
    # conversion discharges what the prefix leaves open, so no DDP107 for it.
    attributing: bool = False

    @property
    def keep_per_process_batch(self) -> bool:
        return self.batch == "per-process"


@dataclass(frozen=True)
class ConvertResult:
    source: str
    output: str
    # Positions refer to the source as given, not to the output.
    findings: tuple[Finding, ...]
    # Why an unchanged file was left as it was, where no finding says so.
    reason: str | None = None

    @property
    def changed(self) -> bool:
        return self.output != self.source


NO_DATA_PARALLEL = "it never wraps a model in nn.DataParallel, so it trains on one device: nothing to convert"
# DDP speeds up training only: an inference program under torchrun repeats the whole inference on every process,
# and splitting it right means gathering its outputs in order, which the program's own code decides.
INFERENCE_ONLY = (
    "its DataParallel model only runs inference on the data it loads: nothing calls backward(), steps or builds an "
    "optimizer, so DDP has nothing to synchronise and each process would repeat the whole inference: left as it was "
    "(keep nn.DataParallel for inference, or shard the inputs and gather the outputs by hand)"
)


def already_distributed(what: str, line: int) -> str:
    """Why convert leaves a script that runs DDP already, and never uses DataParallel, as it was."""
    return (
        f"it already uses torch.distributed ({what} on line {line}), so it runs DDP already (DDP001): "
        "nothing to convert"
    )


def unconverted(source: str) -> ConvertResult:
    """The result for a source with no DataParallel to convert, and why: it trains on one device, or it
    runs DDP already."""
    # Imported here: the prefilter reads names, and this module must load without them.
    from dp2ddp.prefilter import distributed_call, hand_parallel_call

    found = distributed_call(source)
    by_hand = hand_parallel_call(source) if found is None else None
    if by_hand is not None:
        reason = (
            f"it never wraps a model in nn.DataParallel, but splits batches over GPUs by hand ({by_hand[0]} on line "
            f"{by_hand[1]}), which convert does not rewrite: nothing was converted; wrap the model in nn.DataParallel "
            "in place of the hand-made replicas, then convert"
        )
    else:
        reason = NO_DATA_PARALLEL if found is None else already_distributed(found[0], found[1])
    return ConvertResult(source, source, (), reason)
