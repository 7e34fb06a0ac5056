"""Stable finding codes with their messages, in one place.

A codemod never writes a message inline: it reports a code and the values
that fill the code's message template, so wording stays consistent between
``convert``'s migration report and the unit tests that expect it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Severity = Literal["warning", "note"]


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    severity: Severity
    message: str


RULES: dict[str, Rule] = {
    rule.code: rule
    for rule in (
        Rule(
            "DDP001",
            "already-distributed",
            "note",
            "already uses torch.distributed ({what}); left unchanged",
        ),
        Rule(
            "DDP101",
            "no-entry-point",
            "warning",
            "no `if __name__ == \"__main__\":` entry or top-level training code; "
            "call setup_distributed() first thing in the script that starts training",
        ),
        Rule(
            "DDP201",
            "data-parallel-submodule",
            "warning",
            "DataParallel wraps a sub-module; left unchanged: wrap the whole model "
            "in DistributedDataParallel instead",
        ),
        Rule(
            "DDP202",
            "functional-data-parallel",
            "warning",
            "functional nn.parallel.data_parallel cannot be converted; left unchanged: "
            "call the module directly and wrap the model in DistributedDataParallel",
        ),
        Rule(
            "DDP203",
            "data-parallel-subclass",
            "warning",
            "subclass of DataParallel `{name}` cannot be converted; left unchanged",
        ),
        Rule(
            "DDP204",
            "conditional-wrap",
            "warning",
            "the DDP wrap is conditional: every process must wrap the model, or "
            "gradients are not averaged; check the condition holds whenever the "
            "world size is above 1",
        ),
        Rule(
            "DDP205",
            "first-gpu-literal",
            "note",
            "`{literal}` would put every process on GPU 0; now `{replacement}`, this process's GPU",
        ),
        Rule(
            "DDP206",
            "visible-devices-in-script",
            "warning",
            "the script sets CUDA_VISIBLE_DEVICES: every process sees the same GPUs, so start "
            "no more processes than it lists, or set it in the shell instead",
        ),
        Rule(
            "DDP301",
            "loader-has-sampler",
            "warning",
            "DataLoader already has `{argument}=`; left unchanged: shard it across "
            "processes yourself (e.g. wrap it for DistributedSampler)",
        ),
        Rule(
            "DDP302",
            "iterable-dataset",
            "warning",
            "DataLoader over an IterableDataset cannot take a sampler; left unchanged: "
            "shard the stream by rank inside the dataset",
        ),
        Rule(
            "DDP303",
            "loader-arguments",
            "warning",
            "DataLoader with {count} positional arguments; left unchanged: pass "
            "arguments after `shuffle` by keyword",
        ),
        Rule(
            "DDP304",
            "dataset-expression",
            "warning",
            "the dataset is built inside the DataLoader call of a non-assignment; "
            "left unchanged: bind the dataset to a name first",
        ),
        Rule(
            "DDP305",
            "no-epoch-loop",
            "warning",
            "no epoch loop found for `{loader}`: call `{loader}.sampler.set_epoch(epoch)` "
            "at the start of every epoch, or every epoch repeats one order",
        ),
        Rule(
            "DDP306",
            "no-data-loader",
            "warning",
            "no DataLoader in this file: give the training loader a DistributedSampler "
            "where it is built, and call set_epoch every epoch",
        ),
        Rule(
            "DDP307",
            "global-batch-kept",
            "note",
            "global batch kept: each process loads `{batch} // world_size` samples; "
            "{divisibility}",
        ),
        Rule(
            "DDP308",
            "per-process-batch-kept",
            "note",
            "per-process batch kept: the effective batch becomes `{batch} * world_size`; "
            "scale the learning rate to match",
        ),
        Rule(
            "DDP309",
            "global-batch-not-divisible",
            "warning",
            "global batch {size} does not divide by {misses} processes: each process loads "
            "`{size} // world_size` and the global batch shrinks there; pick a multiple of the process count",
        ),
        Rule(
            "DDP310",
            "summed-loss-scaled",
            "note",
            "`{loss}` sums over the batch and DDP averages gradients over processes: backward "
            "now runs on `{loss} * world_size`, so the gradient is the whole batch's sum again",
        ),
        Rule(
            "DDP401",
            "side-effect-with-collective",
            "warning",
            "this line has a side effect and calls `{call}`, which every process must run, "
            "where it cannot be moved out; left on every process: bind the value first, then "
            "guard the rest with `if is_main_process():`",
        ),
        Rule(
            "DDP402",
            "collective-under-rank-guard",
            "warning",
            "`{call}` runs under a rank guard, but every process must call it; the processes "
            "that skip it leave the others waiting forever: move it out of the guard",
        ),
        Rule(
            "DDP403",
            "per-process-progress",
            "note",
            "this progress line shows this process's running values, not the whole data's: a "
            "collective here could hang while processes run different numbers of steps; the "
            "values after the loop are gathered from every process",
        ),
    )
}
