"""dp2ddp's LibCST codemods, one per module, and the order ``convert`` runs them in.

The codemods come in two groups. Every codemod in a group plans against one
analysis of the same tree, and the group's edits are made in one traversal.

- The first group plans against the script as written: the DataParallel swap,
  the samplers, the learning rate under ``--batch per-process``, the summed
  losses and the metric reductions. The metric
  reductions read what the sampler codemod will shard and which losses will
  be scaled from the analysis, where those codemods publish their plans.
- The second group plans against the first group's output, because guarding
  side effects depends on the structure the first group creates: a wrap
  moved out of its ``if``, reductions added after loops and inside progress
  prints, which are collectives a guard must never hold. Downloads then go
  under the main process first, on the same terms. The checkpoint
  codemod places its barriers around what the guards leave unguarded, and the
  launch wrapper runs last, on the converted script.
"""

from __future__ import annotations

from functools import cache
from importlib import import_module

from libcst.codemod import Codemod

# (module, command class), in the order they run, grouped by the tree they plan against.
# The classes are imported on demand so that `python -m libcst.tool list` shows each
# command once, under its own module.
GROUPS: tuple[tuple[tuple[str, str], ...], ...] = (
    (
        ("replace_data_parallel", "ReplaceDataParallelCommand"),
        ("add_distributed_sampler", "AddDistributedSamplerCommand"),
        ("scale_learning_rate", "ScaleLearningRateCommand"),
        ("scale_summed_losses", "ScaleSummedLossesCommand"),
        ("shard_evaluation", "ShardEvaluationCommand"),
        ("gather_metrics", "GatherMetricsCommand"),
    ),
    (
        ("guard_side_effects", "GuardSideEffectsCommand"),
        ("download_once", "DownloadOnceCommand"),
        ("secure_checkpoints", "SecureCheckpointsCommand"),
        ("add_launch_wrapper", "AddLaunchWrapperCommand"),
    ),
)
REGISTRY: tuple[tuple[str, str], ...] = tuple(entry for group in GROUPS for entry in group)


@cache
def codemods() -> dict[str, type[Codemod]]:
    """Codemod name -> command class, in the order they run."""
    return {module: getattr(import_module(f"{__name__}.{module}"), name) for module, name in REGISTRY}


def groups() -> list[list[str]]:
    """Codemod names, group by group."""
    return [[module for module, _ in group] for group in GROUPS]
