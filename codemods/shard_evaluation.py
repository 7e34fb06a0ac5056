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

An evaluation loop that runs the DDP model with gradients enabled is not
sharded: DDP's forward then syncs buffers, a collective, and shards of
unequal length would leave one process waiting at the last batch. Every
process evaluates the whole set instead, and its metrics are not gathered.
"""

from __future__ import annotations

from typing import ClassVar

import libcst as cst
import libcst.matchers as m

from . import _names as names
from ._base import add_helper, call_to, code_of, import_torch_distributed, resolves_to
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

    def _may_shard(self, call: cst.Call, reference: cst.BaseExpression | None) -> bool:
        if reference is None:
            return True
        stem = code_of(reference).rsplit(".", 1)[-1]
        # Wrapped models, as written (DataParallel) or as converted (wrap_ddp), and the parameters they are passed as.
        models = self.analysis.lifecycle.model_names | self.analysis.effects.models
        for loop in self.analysis.nodes(cst.For):
            if not any(code_of(n).rsplit(".", 1)[-1] == stem for n in self.analysis.within(loop.iter, cst.Name)):
                continue
            for forward in self.analysis.within(loop.body, cst.Call):
                func = code_of(forward.func).removeprefix("self.")
                if func in models and not self._without_gradients(forward):
                    self.report(forward, "DDP313", loader=stem)
                    self.analysis.whole_loaders.add(stem)
                    return False
        return True

    def _without_gradients(self, node: cst.CSTNode, depth: int = 0) -> bool:
        """Inside ``with torch.no_grad():``, a function decorated with it, or a function only called under it."""
        for ancestor in self.analysis.ancestors(node):
            if isinstance(ancestor, cst.With) and any(self.matches(item.item, call_to(names.NO_GRAD)) for item in ancestor.items):
                return True
            if isinstance(ancestor, cst.FunctionDef):
                if any(self.matches(d.decorator, call_to(names.NO_GRAD) | resolves_to(names.NO_GRAD)) for d in ancestor.decorators):
                    return True
                name = ancestor.name.value
                callers = [
                    c for c in self.analysis.nodes(cst.Call)
                    if m.matches(c.func, m.Name(name) | m.Attribute(value=m.Name("self"), attr=m.Name(name)))
                ]  # fmt: skip
                return depth < 3 and bool(callers) and all(self._without_gradients(c, depth + 1) for c in callers)
        return False

    def _sampler(self, dataset: cst.BaseExpression, shuffle: cst.BaseExpression) -> cst.Call:
        return cst.Call(func=cst.Name(names.EVALUATION_SHARD_HELPER), args=[cst.Arg(dataset)])

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        module = super().leave_Module(original_node, updated_node)
        if not self.plans:
            return module
        import_torch_distributed(self.context, self.dist)
        return add_helper(module, self.facts, names.EVALUATION_SHARD_HELPER, EVALUATION_SHARD_HELPER_SOURCE)
