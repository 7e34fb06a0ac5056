"""What the verifier tells each process it launches, passed in one environment variable."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass

ENVIRONMENT_VARIABLE = "DP2DDP_VERIFY"


@dataclass(frozen=True)
class RunConfig:
    """How one process of a verify run patches itself before it runs the script."""

    role: str  # "reference" or "converted"
    out_dir: str  # where each process writes its losses, its log and its outcome
    seed: int  # forced into random, numpy and torch before the script starts
    world_size: int  # the converted run's process count; the reference emulates it
    max_steps: int | None = None  # stop after this many optimizer steps
    dropout: str = "mask"  # "mask": one global mask, rows [rank::world]; "off": no dropout
    synthetic_data: bool = False
    synthetic_size: int = 256
    cpu: bool = False  # map CUDA onto the CPU
    precision: str = "native"  # "float64": both runs compute in float64 (CPU only); "native": as written
    backend: str | None = None  # forced onto init_process_group in the converted run
    import_dir: str | None = None  # first on sys.path: the original's folder, also for a converted copy elsewhere
    statistical: bool = False  # the script's own seeding is mixed with `seed`, so seeds really vary
    perturb: bool = False  # the noise probe: parameters nudged by a few units in the last place every step
    script_file: str | None = None  # __file__ and argv[0] for a converted copy: the original's path

    def to_environment(self) -> dict[str, str]:
        return {ENVIRONMENT_VARIABLE: json.dumps(dataclasses.asdict(self))}

    @classmethod
    def from_environment(cls) -> RunConfig:
        return cls(**json.loads(os.environ[ENVIRONMENT_VARIABLE]))

    def rank(self) -> int:
        return int(os.environ.get("RANK", "0")) if self.role == "converted" else 0
