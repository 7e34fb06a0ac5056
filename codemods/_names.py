"""Qualified names of the torch APIs the codemods recognise.

Every codemod resolves names through ``QualifiedNameProvider``, so
``nn.DataParallel`` after ``import torch.nn as nn`` and ``DP`` after
``from torch.nn import DataParallel as DP`` both land in these sets.
"""

from __future__ import annotations

DATA_PARALLEL = frozenset(
    {
        "torch.nn.DataParallel",
        "torch.nn.parallel.DataParallel",
        "torch.nn.parallel.data_parallel.DataParallel",
    }
)
FUNCTIONAL_DATA_PARALLEL = frozenset(
    {
        "torch.nn.parallel.data_parallel",
        "torch.nn.parallel.data_parallel.data_parallel",
    }
)
DISTRIBUTED_DATA_PARALLEL = frozenset(
    {
        "torch.nn.parallel.DistributedDataParallel",
        "torch.nn.parallel.distributed.DistributedDataParallel",
    }
)
INIT_PROCESS_GROUP = frozenset({"torch.distributed.init_process_group"})
DATA_LOADER = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
DISTRIBUTED_SAMPLER = frozenset(
    {
        "torch.utils.data.DistributedSampler",
        "torch.utils.data.distributed.DistributedSampler",
    }
)
ITERABLE_DATASET = frozenset(
    {"torch.utils.data.IterableDataset", "torch.utils.data.dataset.IterableDataset"}
)
NN_MODULE = frozenset({"torch.nn.Module", "torch.nn.modules.module.Module"})

# Names of the helpers that converted scripts define. Finding them marks a
# script as converted by dp2ddp, which keeps every codemod idempotent.
SETUP_HELPER = "setup_distributed"
WRAP_HELPER = "wrap_ddp"
