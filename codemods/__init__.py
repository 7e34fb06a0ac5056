"""dp2ddp's LibCST codemods, one per module, and the order ``convert`` runs them in.

The DataParallel swap runs first, so the sampler and launch codemods see a
script whose model is already wrapped in DDP. The launch wrapper runs last:
it looks at the converted script to decide whether setup belongs in the
``__main__`` entry or right after the imports.
"""

from __future__ import annotations

from libcst.codemod import Codemod

from .add_distributed_sampler import AddDistributedSamplerCommand
from .add_launch_wrapper import AddLaunchWrapperCommand
from .replace_data_parallel import ReplaceDataParallelCommand

CODEMODS: dict[str, type[Codemod]] = {
    "replace_data_parallel": ReplaceDataParallelCommand,
    "add_distributed_sampler": AddDistributedSamplerCommand,
    "add_launch_wrapper": AddLaunchWrapperCommand,
}

__all__ = [
    "CODEMODS",
    "AddDistributedSamplerCommand",
    "AddLaunchWrapperCommand",
    "ReplaceDataParallelCommand",
]
