"""Checks of the converted run that equal losses cannot make: replicas, process group, data split.

Each reads what ``observe`` recorded in the converted run's folder and returns
findings. A finding of kind "defect" fails verify (exit 1) whatever the losses
say; a "warning" is printed beside the verdict.
"""

from __future__ import annotations

import difflib
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
    check: str  # replicas | distributed | data | epochs | buffers | writes | collectives | batch | learning rate | logs | noise
    #             | reference
    kind: str  # defect | warning | note
    message: str
    step: int | None = None

    def as_json(self) -> dict[str, Any]:
        return {"check": self.check, "kind": self.kind, "message": self.message, "step": self.step}


def read_records(path: Path) -> list[dict[str, Any]]:
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
    per_rank = [read_records(out / f"converted-rank{rank.rank}.params.jsonl") for rank in run.ranks]
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
        for record in read_records(out / f"converted-rank{rank.rank}.samplers.jsonl"):
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
        for record in read_records(out / f"converted-rank{rank.rank}.loaders.jsonl"):
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
    ``--logs warn`` makes it a warning, for a script that prints a per-process number on purpose. A line
    printed twice (by rank 1 too, or twice by rank 0) with the right numbers is a warning: the user sees it
    twice, but nothing printed is wrong."""
    message = "\n".join(comparison.summary())
    if comparison.agrees:
        return Finding("logs", "note", message)
    if comparison.first_mismatch is None:
        return Finding("logs", "warning", message)
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


def buffers(run: RunOutcome) -> list[Finding]:
    """The first training forward at which some rank's buffers of a DDP-wrapped module differ from rank 0's,
    taken where DDP broadcasts rank 0's buffers (or would have, but for ``broadcast_buffers=False``)."""
    out = Path(run.out_dir)
    per_rank = {rank.rank: read_records(out / f"converted-rank{rank.rank}.buffers.jsonl") for rank in run.ranks}
    if len(per_rank) < 2 or not per_rank.get(0):
        return []
    first: dict[int, dict[str, Any]] = {}
    for record in per_rank[0]:
        first.setdefault(record["module"], record)
    keyed_records = {rank: {(r["module"], r["forward"]): r for r in records} for rank, records in per_rank.items()}
    for record in per_rank[0]:
        key = (record["module"], record["forward"])
        for rank in sorted(per_rank)[1:]:
            other = keyed_records[rank].get(key)
            if other is None or len(other["sums"]) != len(record["sums"]):
                continue  # a rank that stopped early is reported by the run's outcome
            differ = [i for i, (a, b) in enumerate(zip(record["sums"], other["sums"])) if a != b]
            if differ:
                return [_buffer_finding(record, rank, differ, first[record["module"]])]
    return []


def _buffer_finding(record: dict[str, Any], rank: int, differ: list[int], first: dict[str, Any]) -> Finding:
    names = first.get("names", [])
    owners = first.get("owners", [])
    named = [names[i] if i < len(names) else f"buffer {i}" for i in differ]
    more = f" and {len(named) - _NAMES_SHOWN} more" if len(named) > _NAMES_SHOWN else ""
    shown = ", ".join(named[:_NAMES_SHOWN]) + more
    batch_norm = any("BatchNorm" in owners[i] and "Sync" not in owners[i] for i in differ if i < len(owners))
    step = record["step"]
    if not first.get("broadcast_buffers", True) and batch_norm:
        why = ("DistributedDataParallel(..., broadcast_buffers=False) leaves each rank's BatchNorm running statistics "
               "to follow its own batches, so the ranks evaluate (and save) different models: convert the BatchNorm "
               "layers with nn.SyncBatchNorm.convert_sync_batchnorm(model) before wrapping, or keep DDP's default "
               "broadcast_buffers=True")  # fmt: skip
    elif not first.get("broadcast_buffers", True):
        why = ("with broadcast_buffers=False DDP never makes them agree, and a buffer was changed on some ranks "
               "only (or from each rank's own data): keep DDP's default broadcast_buffers=True, or change the "
               "buffer the same way on every rank")  # fmt: skip
    else:
        why = ("DDP broadcasts rank 0's buffers at the start of a training forward, so they were changed on some "
               "ranks between that broadcast and the wrapped module's forward: change buffers the same way on every "
               "rank, outside any rank condition")  # fmt: skip
    return Finding("buffers", "defect", (
        f"buffers differ between ranks at the training forward of step {step}: {len(differ)} of "
        f"{len(record['sums'])} buffers of DDP module #{record['module'] + 1} on rank {rank} are not rank 0's "
        f"({shown}); {why}"), step)  # fmt: skip


def writes(run: RunOutcome) -> list[Finding]:
    """Paths that more than one process opened for writing: each overwrites the others' file, and a process that
    reads it back may read a half-written one."""
    out = Path(run.out_dir)
    writers: dict[str, dict[int, dict[str, Any]]] = defaultdict(dict)
    for rank in run.ranks:
        for record in read_records(out / f"converted-rank{rank.rank}.writes.jsonl"):
            writers[record["path"]].setdefault(rank.rank, record)
    shared = [(path, ranks) for path, ranks in writers.items() if len(ranks) > 1]
    if not shared:
        return []
    path, ranks = shared[0]
    record = ranks[min(ranks)]
    listed = ("both " if len(ranks) == 2 else "all of ") + " and ".join(f"rank {rank}" for rank in sorted(ranks))
    more = f" ({len(shared) - 1} more such paths)" if len(shared) > 1 else ""
    return [Finding("writes", "defect", (
        f"{listed} write {path} ({record['call']} at {record['line']}){more}: the processes overwrite each "
        "other's file, and one that reads it back may read another's half-written copy; write it on the main "
        "process only (if dist.get_rank() == 0:, then dist.barrier() before others read it), or give each "
        "process its own path (with its rank in the name)"))]  # fmt: skip


def collectives(run: RunOutcome) -> list[Finding]:
    """The first torch.distributed collective one rank called and another did not: each rank must reach every
    collective, in the same order, or the ones that do wait for the others.

    The ranks' sequences of collective names decide; lines may differ (a download-once guard calls barrier
    from one line on rank 0 and another on the rest). To name the call, the sequences are lined up with their
    lines: otherwise a barrier under a rank condition would pair with the other ranks' exit barrier, and the
    exit barrier would be blamed.
    """
    out = Path(run.out_dir)
    per_rank = {rank.rank: read_records(out / f"converted-rank{rank.rank}.collectives.jsonl") for rank in run.ranks}
    if len(per_rank) < 2 or 0 not in per_rank:
        return []
    names = {rank: [call["call"] for call in calls] for rank, calls in per_rank.items()}
    other = next((rank for rank in sorted(names) if names[rank] != names[0]), None)
    if other is None:
        return []
    what = _unpaired_call(per_rank[0], per_rank[other], 0, other)
    return [Finding("collectives", "defect", (
        f"{what}: a collective under a rank condition (such as `if dist.get_rank() == 0:`) waits for every "
        "rank, and the others never reach it; here a later call of theirs, such as the exit barrier, happened "
        "to pair with it, but a real run hangs there or aborts at exit ('Connection closed by peer'). Every "
        "rank must make the same collective calls in the same order: move it out of the condition"))]  # fmt: skip


def _unpaired_call(first: list[dict[str, Any]], second: list[dict[str, Any]], one: int, two: int) -> str:
    """The first call of either rank that the other's sequence has no partner for, in words."""
    matcher = difflib.SequenceMatcher(a=[(c["call"], c["line"]) for c in first],
                                      b=[(c["call"], c["line"]) for c in second], autojunk=False)  # fmt: skip
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag == "equal":
            continue
        # Within a block that differs, calls of the same name pair in order (the same collective from other
        # lines on each side); the first left without a partner is the one to name.
        paired = 0
        while a0 + paired < a1 and b0 + paired < b1 and first[a0 + paired]["call"] == second[b0 + paired]["call"]:
            paired += 1
        a, b = a0 + paired, b0 + paired
        if a < a1 and b == b1:
            call, rank, number, missing = first[a], one, a, two
        elif b < b1 and a == a1:
            call, rank, number, missing = second[b], two, b, one
        elif a < a1 and b < b1:
            return (f"rank {one}'s collective call #{a + 1} is dist.{first[a]['call']} at {first[a]['line']} "
                    f"where rank {two}'s is dist.{second[b]['call']} at {second[b]['line']}")  # fmt: skip
        else:
            continue
        return (f"rank {rank} called dist.{call['call']} at {call['line']} (its collective call #{number + 1}) "
                f"and rank {missing} made no such call")  # fmt: skip
    return f"ranks {one} and {two} made different collective calls"


def set_epoch(run: RunOutcome) -> list[Finding]:
    """A shuffled DistributedSampler whose training passes all drew with the same epoch: every epoch repeats the
    first one's order. Only passes that fed an optimizer step count, after a pass drawn to its end."""
    if not run.ranks:
        return []
    out = Path(run.out_dir)
    rank = run.ranks[0].rank
    samplers = {(r["sampler"], r["pass"]): r for r in read_records(out / f"converted-rank{rank}.samplers.jsonl")}
    training: dict[int, list[tuple[dict[str, Any], dict[str, Any]]]] = defaultdict(list)
    for loader in read_records(out / f"converted-rank{rank}.loaders.jsonl"):
        drew = loader.get("distributed_sampler")
        if not loader.get("training") or drew is None:
            continue
        sampler = samplers.get((drew[0], drew[1]))
        if sampler is not None and sampler["shuffle"]:
            training[drew[0]].append((loader, sampler))
    for number, passes in sorted(training.items()):
        if len(passes) < 2 or not passes[0][0].get("ended"):
            continue  # one epoch, or `next(iter(loader))` draws that never finish a pass
        epochs = {sampler["epoch"] for _, sampler in passes}
        if len(epochs) == 1:
            step = passes[1][1]["step"]
            return [Finding("epochs", "defect", (
                f"DistributedSampler #{number + 1} drew all {len(passes)} of its training passes with epoch "
                f"{epochs.pop()}: set_epoch is never called (or always with the same value), so from step {step} "
                "on every epoch repeats the first epoch's order; call loader.sampler.set_epoch(epoch) at the start "
                "of each epoch"), step)]  # fmt: skip
    return []


def learning_rates(reference: RunOutcome, run: RunOutcome) -> list[Finding]:
    """The first optimizer step at which converted rank 0 steps with another learning rate than the reference.

    A conversion keeps the global batch, so it keeps the learning rate and its schedule: DDP averages
    gradients over processes as DataParallel averaged them over its batch. A rate scaled by the world size,
    or a scheduler stepped per process or per sample, changes training slowly enough that noisy losses may
    not show it in a short run; the rate itself shows it at once.
    """
    if not reference.ranks or not run.ranks:
        return []
    expected, stepped = reference.ranks[0].learning_rates, reference.ranks[0].stepped
    for step, (wanted, got) in enumerate(zip(expected, run.ranks[0].learning_rates)):
        for group, (a, b) in enumerate(zip(wanted, got)):
            if a is None or b is None or abs(a - b) <= 1e-9 * max(abs(a), abs(b)):
                continue
            ratio = f", {b / a:g} times the reference's" if a else ""
            which = stepped[step] if step < len(stepped) else "an optimizer"
            return [Finding("learning rate", "defect", (
                f"at optimizer step {step} {which} steps parameter group {group} with learning rate {b:g} in the "
                f"converted run and {a:g} in the reference{ratio}: the converted script changes the rate (scaled by "
                "the world size, or by hand) or steps its scheduler a different number of times; keep the original's "
                "rate and schedule, since DDP averages gradients over processes as DataParallel did over its batch"),
                step)]  # fmt: skip
    return []


def batch(reference: RunOutcome, run: RunOutcome) -> list[Finding]:
    """The converted ranks together drawing the world size times the reference's samples per optimizer step:
    each process trains on the whole global batch, so the effective batch is multiplied."""
    reference_counts = reference.ranks[0].facts.get("samples_per_step") if reference.ranks else None
    counts = [rank.facts.get("samples_per_step") for rank in run.ranks]
    world = len(counts)
    if not reference_counts or world < 2 or any(not c for c in counts):
        return []
    steps = min(len(reference_counts), *(len(c) for c in counts))
    expected = sum(reference_counts[:steps])
    drawn = sum(sum(c[:steps]) for c in counts)
    if expected <= 0 or drawn <= expected * (world + 1) / 2:
        return []
    global_batch = _most_common([c for c in reference_counts[:steps] if c])
    per_process = _most_common([c for c in counts[0][:steps] if c])
    return [Finding("batch", "defect", (
        f"each process trains on the global batch of {per_process}: the effective batch is {world} x {per_process} "
        f"= {world * per_process} samples per optimizer step, where the reference trained on {global_batch}, so "
        "the per-process batch was not divided by the world size; give the DataLoader batch_size=... // "
        "dist.get_world_size() (or, if the larger batch is meant, scale the learning rate knowingly: the losses "
        "cannot then be compared with the reference)"), 0)]  # fmt: skip


def _most_common(values: list[int]) -> int:
    return max(set(values), key=values.count) if values else 0
