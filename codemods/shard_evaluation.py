"""Shard evaluation loaders so that every sample is evaluated exactly once.

``DataLoader(val_set, batch_size=B)`` becomes ``DataLoader(val_set,
batch_size=B // dist.get_world_size(), sampler=evaluation_shard(val_set))``.
Process ``r`` of ``W`` evaluates samples ``r, r + W, r + 2W, ...``: together
they cover the set once. ``DistributedSampler`` would pad the last round
with repeats, and ``drop_last`` would lose samples; either changes the
accuracy the script reports. ``len(loader.dataset)`` still counts the whole
set, so once the metrics are summed over processes (gather_metrics) a
validation set of 101 samples reports ``/101``.

A loader counts as evaluation when it is not shuffled and is named for
validation or testing, or is iterated under ``torch.no_grad()``.
"""

from __future__ import annotations

from typing import ClassVar

import libcst as cst

from . import _names as names
from ._base import add_helper, import_torch_distributed
from .add_distributed_sampler import AddDistributedSamplerCommand

EVALUATION_SHARD_HELPER_SOURCE = f'''
def {names.EVALUATION_SHARD_HELPER}(dataset) -> range:
    """The indices this process evaluates: with the other processes', every sample exactly once."""
    # Unlike DistributedSampler this never repeats samples to even out the shards,
    # so sums and counts gathered from all processes equal a single process's.
    return range(dist.get_rank(), len(dataset), dist.get_world_size())
'''


class ShardEvaluationCommand(AddDistributedSamplerCommand):
    DESCRIPTION = "Shard evaluation DataLoaders so every sample is evaluated exactly once, with no padding."
    SHARDS_EVALUATION: ClassVar[bool] = True

    def _sampler(self, dataset: cst.BaseExpression, shuffle: cst.BaseExpression) -> cst.Call:
        return cst.Call(func=cst.Name(names.EVALUATION_SHARD_HELPER), args=[cst.Arg(dataset)])

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        module = super().leave_Module(original_node, updated_node)
        if not self.plans:
            return module
        import_torch_distributed(self.context, self.dist)
        return add_helper(module, self.facts, names.EVALUATION_SHARD_HELPER, EVALUATION_SHARD_HELPER_SOURCE)
