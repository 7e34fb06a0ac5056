"""Checks of the converted run that equal losses cannot make: replicas, process group, data split.

Each reads what ``observe`` recorded in the converted run's folder and returns
findings. A finding of kind "defect" fails verify (exit 1) whatever the losses
say; a "warning" is printed beside the verdict.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dp2ddp.verify.compare import keyed
from dp2ddp.verify.logs import LogComparison
from dp2ddp.verify.runner import RunOutcome

_NAMES_SHOWN = 4


@dataclass(frozen=True)
class Finding:
    check: str  # replicas | distributed | data | epochs | logs | noise | reference
    kind: str  # defect | warning | note
    message: str
    step: int | None = None

    def as_json(self) -> dict[str, Any]:
        return {"check": self.check, "kind": self.kind, "message": self.message, "step": self.step}


def _records(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # the half-written last line of a stopped process
    return records


def replicas(run: RunOutcome) -> list[Finding]:
    """The first optimizer step after which some rank's parameters differ from rank 0's."""
    out = Path(run.out_dir)
    per_rank = [_records(out / f"converted-rank{rank.rank}.params.jsonl") for rank in run.ranks]
    if len(per_rank) < 2 or not per_rank[0]:
        return []
    names: dict[int, list[str]] = {}
    for record in per_rank[0]:
        if "names" in record:
            names[record["optimizer"]] = record["names"]
    for position, first in enumerate(per_rank[0]):
        for rank, records in enumerate(per_rank[1:], start=1):
            if position >= len(records):
                continue  # a rank that stopped early is reported by the run's outcome
            other = records[position]
            if (other["step"], other["optimizer"]) != (first["step"], first["optimizer"]):
                return [Finding("replicas", "defect", (
                    f"rank {rank} took optimizer steps in another order than rank 0 (step {first['step']}: "
                    f"optimizer {other['optimizer']} against {first['optimizer']})"), first["step"])]  # fmt: skip
            differ = [i for i, (a, b) in enumerate(zip(first["sums"], other["sums"])) if a != b]
            if differ:
                facts = run.ranks[rank].facts
                return [_replica_finding(first["step"], rank, differ, names.get(first["optimizer"], []),
                                         len(first["sums"]), facts)]  # fmt: skip
    return []


def _replica_finding(
    step: int, rank: int, differ: list[int], names: list[str], count: int, facts: dict[str, Any]
) -> Finding:
    named = [names[i] if i < len(names) else f"parameter {i}" for i in differ]
    shown = ", ".join(named[:_NAMES_SHOWN]) + (f" and {len(named) - _NAMES_SHOWN} more" if len(named) > _NAMES_SHOWN else "")
    unwrapped = [name for name in named if "not in a DDP module" in name]
    redrawn = facts.get("redrawn_after_wrap", 0)
    if redrawn:
        why = (f"parameters of the wrapped model were initialised at random after the DDP wrap ({redrawn} times), "
               "and DDP broadcasts rank 0's weights only at the wrap: unless every rank's random state happens to "
               "match, each rank trains different weights for good. Initialise (or load) before wrapping")  # fmt: skip
    elif unwrapped:
        why = ("a module is trained without DDP, so its gradients are never averaged: wrap it "
               "(or every model the optimizer trains) in DistributedDataParallel")  # fmt: skip
    elif facts.get("autograd_grad"):
        why = ("the script computes gradients with torch.autograd.grad, and DDP averages only what backward() "
               "accumulates into .grad: call backward(), or all-reduce those gradients yourself")  # fmt: skip
    else:
        why = ("DDP averages gradients and broadcasts weights only at the wrap, so parameters were changed outside it: "
               "re-initialised, loaded or cast (.half(), .to(dtype)) after the wrap, edited on some ranks only, "
               "or gradients changed per rank after backward")  # fmt: skip
    return Finding("replicas", "defect", (
        f"replicas differ after optimizer step {step}: {len(differ)} of {count} parameters on rank {rank} are not "
        f"rank 0's ({shown}); {why}"), step)  # fmt: skip


def distributed(run: RunOutcome, nproc: int) -> list[Finding]:
    """The converted run must have trained as ``nproc`` DDP processes on different data."""
    findings = []
    facts = [rank.facts for rank in run.ranks if rank.facts]
    if facts and not any(fact.get("process_group") for fact in facts):
        findings.append(Finding("distributed", "defect", (
            "the converted script never called init_process_group: it trained as independent processes, "
            "not as one DDP run (is it still the DataParallel original?)")))  # fmt: skip
    else:
        sizes = {fact.get("world_size") for fact in facts if fact.get("process_group")}
        if sizes and sizes != {nproc}:
            findings.append(Finding("distributed", "defect", (
                f"the converted script's process group has {', '.join(map(str, sorted(sizes)))} processes; "
                f"verify launched {nproc}")))  # fmt: skip
    if facts and not any(fact.get("ddp_modules") for fact in facts):
        findings.append(Finding("distributed", "defect",
                                "the converted script wrapped no module in DistributedDataParallel"))  # fmt: skip
    losses = [keyed(rank.losses) for rank in run.ranks]
    if len(losses) > 1 and len(losses[0]) >= 2 and all(other == losses[0] for other in losses[1:]):
        findings.append(Finding("data", "defect", (
            f"every rank recorded exactly the same loss at all {len(losses[0])} steps: the ranks trained on the same "
            "samples, so the data is not split between them (no DistributedSampler on the training loader?)")))  # fmt: skip
    return findings


def samplers(run: RunOutcome, max_steps: int | None) -> list[Finding]:
    """Each pass of each DistributedSampler: ranks draw disjoint samples that cover the dataset."""
    out = Path(run.out_dir)
    passes: dict[tuple[int, int], dict[int, dict[str, Any]]] = defaultdict(dict)
    for rank in run.ranks:
        for record in _records(out / f"converted-rank{rank.rank}.samplers.jsonl"):
            passes[(record["sampler"], record["pass"])][rank.rank] = record
    findings: list[Finding] = []
    for (sampler, number), ranks in sorted(passes.items()):
        if len(ranks) < 2:
            continue
        seeds = {rank: record["seed"] for rank, record in ranks.items()}
        step = min(record["step"] for record in ranks.values())
        if len(set(seeds.values())) > 1:
            listed = ", ".join(f"{seed} on rank {rank}" for rank, seed in sorted(seeds.items()))
            findings.append(Finding("data", "defect", (
                f"DistributedSampler #{sampler + 1} has a different seed on each rank ({listed}): each rank shuffles "
                "its own permutation, so some samples are drawn twice per epoch and others never; give every rank "
                "the same seed"), step))  # fmt: skip
            break
        overlap = _overlap(ranks)
        if overlap is not None:
            findings.append(Finding("data", "defect", (
                f"DistributedSampler #{sampler + 1}, pass {number + 1}: the ranks drew {overlap} samples in common "
                "(more than padding explains), so they do not split the data; check num_replicas and rank"), step))  # fmt: skip
            break
    shuffled = {key[0] for key, ranks in passes.items() if any(r["shuffle"] for r in ranks.values())}
    second = {key[0] for key in passes if key[1] >= 1}
    if shuffled and not shuffled & second and run.ranks and run.ranks[0].losses:
        hint = f" (--max-steps {max_steps} ended the run first)" if max_steps is not None else ""
        findings.append(Finding("epochs", "warning", (
            f"no epoch boundary was reached{hint}: the converted run never began a second pass over its shuffled "
            "DistributedSampler, so whether set_epoch reshuffles each epoch was not checked")))  # fmt: skip
    return findings


def loaders(run: RunOutcome) -> list[Finding]:
    """Each training pass of each DataLoader: what the ranks drew splits one pass between them, whatever the
    sampler (a DistributedSampler, a ShardedSampler around any other, or none)."""
    out = Path(run.out_dir)
    passes: dict[tuple[int, int], dict[int, dict[str, Any]]] = defaultdict(dict)
    for rank in run.ranks:
        for record in _records(out / f"converted-rank{rank.rank}.loaders.jsonl"):
            passes[(record["loader"], record["pass"])][rank.rank] = record
    world = len(run.ranks)
    for (loader, number), ranks in sorted(passes.items()):
        if len(ranks) < 2 or not any(record["training"] for record in ranks.values()):
            continue
        where = f"pass {number + 1} of DataLoader #{loader + 1}"
        records = [ranks[rank] for rank in sorted(ranks)]
        sampler = records[0].get("sampler")
        drawn_by = f" (its sampler: {sampler})" if sampler else ""
        seeds = {rank: record["seed"] for rank, record in sorted(ranks.items()) if "seed" in record}
        if len(set(seeds.values())) > 1:
            listed = ", ".join(f"{seed} on rank {rank}" for rank, seed in seeds.items())
            return [Finding("data", "defect", (
                f"the ShardedSampler of DataLoader #{loader + 1} has a different seed on each rank ({listed}): "
                "each rank takes its share of another sequence, so some samples are drawn twice per epoch and "
                "others never; give every rank the same seed"))]  # fmt: skip
        if any(record.get("replacement") for record in records):
            # Samples repeat by design: the ranks must share one pass's draws, not each draw a whole pass.
            drawn = sum(len(record["indices"]) for record in records)
            draws = records[0].get("draws")
            if draws is not None and drawn > draws + world - 1:
                return [Finding("data", "defect", (
                    f"the ranks drew {drawn} samples together in {where}{drawn_by}, which draws {draws} a pass "
                    "with replacement: each rank drew a whole pass of its own instead of its share of one (shard "
                    "the sampler, as ShardedSampler does)"))]  # fmt: skip
            if len(records[0]["indices"]) >= 2 and all(r["indices"] == records[0]["indices"] for r in records[1:]):
                return [Finding("data", "defect", (
                    f"every rank drew the same {len(records[0]['indices'])} samples in the same order in {where}"
                    f"{drawn_by}: the training data is not split between them (shard the sampler, as "
                    "ShardedSampler does)"))]  # fmt: skip
            continue
        drawn_indices = [index for record in records for index in record["indices"]]
        repeated = len(drawn_indices) - len(set(drawn_indices))
        # DistributedSampler and ShardedSampler pad each pass with fewer than `world` repeats; a ShardedSampler
        # that splits batches gives each rank the one sample of a batch too short to split.
        padding = (world - 1) * (1 + max(record.get("single_batches", 0) for record in records))
        if repeated > padding:
            return [Finding("data", "defect", (
                f"the ranks trained on {repeated} of the same samples in {where}{drawn_by}: the training data "
                "is not split between them (give the DataLoader a DistributedSampler, or shard its sampler so "
                "each rank draws its own share, or check num_replicas and rank)"))]  # fmt: skip
    return []


def _overlap(ranks: dict[int, dict[str, Any]]) -> int | None:
    """Samples drawn by more than one rank beyond DistributedSampler's padding; None when within it."""
    records = list(ranks.values())
    if any("indices" not in record for record in records):
        return None
    drawn = [index for record in records for index in record["indices"]]
    size = records[0]["dataset_size"]
    if records[0]["drop_last"] or len(drawn) < size:
        padding = 0
    else:
        padding = min(len(drawn) - size, len(records) - 1)
    repeated = len(drawn) - len(set(drawn))
    return repeated if repeated > padding else None


def logs(comparison: LogComparison, fail: bool) -> Finding:
    """What the runs printed. By default a difference fails verify: convert makes rank 0 print the numbers
    the original printed (losses averaged, counts summed over processes), so a number that still differs
    is one process's share printed as the whole's, such as an accuracy over rank 0's evaluation shard.
    ``--logs warn`` makes it a warning, for a script that prints a per-process number on purpose."""
    message = "\n".join(comparison.summary())
    if comparison.agrees:
        return Finding("logs", "note", message)
    if comparison.first_mismatch is not None:
        message += (
            "\n(a number rank 0 prints from its own share of the data: reduce it over processes before the print, "
            "all_reduce_sum for sums and counts, all_reduce_mean for a mean; --logs warn if it is meant per process)"
        )
    return Finding("logs", "defect" if fail else "warning", message)


def reference_wrapped(reference: RunOutcome) -> list[Finding]:
    """Warn when the reference never built nn.DataParallel: it took a path without it, and that is what was compared."""
    facts = reference.ranks[0].facts if reference.ranks else {}
    if facts.get("data_parallel", 1):
        return []
    return [Finding("reference", "warning", (
        "the reference never built nn.DataParallel (the script took a path without it, such as a branch for "
        "machines without CUDA): the converted run was compared with a plain one-process run; --device cpu does "
        "not change that, as it reports no CUDA: verify where a GPU is visible, or a copy whose wrap is unconditional"))]  # fmt: skip


def switched_off(reference: RunOutcome) -> list[Finding]:
    """Say when dropout verify could not draw for the global batch ran as the identity, in both runs alike."""
    calls = reference.ranks[0].facts.get("dropout_off", 0) if reference.ranks else 0
    if not calls:
        return []
    return [Finding("noise", "note", (
        f"note: dropout ran as the identity in both runs on {calls} calls (no batch dimension, alpha dropout, or "
        "inside nn.LSTM/GRU/RNN), so those masks were not compared"))]  # fmt: skip
