"""dp2ddp's LibCST codemods, one per module, and the order ``convert`` runs them in.

The DataParallel swap runs first, so the sampler and launch codemods see a
script whose model is already wrapped in DDP. The launch wrapper runs last:
it looks at the converted script to decide whether setup belongs in the
``__main__`` entry or right after the imports.
"""

from __future__ import annotations

from functools import cache
from importlib import import_module

from libcst.codemod import Codemod

# (module, command class). The classes are imported on demand so that
# `python -m libcst.tool list` shows each command once, under its own module.
REGISTRY: tuple[tuple[str, str], ...] = (
    ("replace_data_parallel", "ReplaceDataParallelCommand"),
    ("add_distributed_sampler", "AddDistributedSamplerCommand"),
    ("scale_summed_losses", "ScaleSummedLossesCommand"),
    ("shard_evaluation", "ShardEvaluationCommand"),
    ("gather_metrics", "GatherMetricsCommand"),
    ("guard_side_effects", "GuardSideEffectsCommand"),
    ("secure_checkpoints", "SecureCheckpointsCommand"),
    ("add_launch_wrapper", "AddLaunchWrapperCommand"),
)


@cache
def codemods() -> dict[str, type[Codemod]]:
    """Codemod name -> command class, in the order they run."""
    return {module: getattr(import_module(f"{__name__}.{module}"), name) for module, name in REGISTRY}
