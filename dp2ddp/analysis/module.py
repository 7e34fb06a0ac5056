"""Facts about one module: the tree's index, then what the script does with its model, data and processes.

Each fact is computed once, on first use, and shared by every codemod that
plans against the same tree and by every rule ``check`` applies to it.
"""

from __future__ import annotations

from functools import cached_property

from .effects import DeviceIndices, ProcessEffects, find_device_indices
from .lifecycle import Hazard, ModelLifecycle
from .losses import batch_normalised_losses
from .script import ScriptFacts, collect_script_facts
from .tree import MISSING, Holder, Tree

__all__ = ["MISSING", "Analysis", "Holder"]


class Analysis(Tree):
    """A module's tree and the facts every codemod and rule reads, each computed once."""

    @cached_property
    def script_facts(self) -> ScriptFacts:
        return collect_script_facts(self)

    @cached_property
    def effects(self) -> ProcessEffects:
        return ProcessEffects(self)

    @cached_property
    def device_indices(self) -> DeviceIndices:
        return find_device_indices(self)

    @cached_property
    def lifecycle(self) -> ModelLifecycle:
        return ModelLifecycle(self)

    @cached_property
    def batch_normalised_losses(self) -> tuple[Hazard, ...]:
        """Training losses whose value depends on the share of the batch a process sees: convert warns, check reports."""
        return batch_normalised_losses(self)
