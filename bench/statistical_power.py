"""Measure ``verify --statistical``'s false-alarm rate and power on small noisy scripts of our own.

Each scenario is a DataParallel original with randomness verify cannot line up (augmentation drawn
with ``random`` or numpy in the dataset) or can (``torch.randint`` noise over the batch), and either
verify's own conversion (correct: must pass) or that conversion with a defect planted by hand
(must fail). A full ``verify --statistical`` is 10 runs, so 20 verifies per scenario would be 200
runs: instead this runs S seeded pairs once per scenario (``run_all`` with S seeds: reference seed k
and converted seed k, verify's own runner) and takes the decision of ``compare.compare_band`` on 20
groups of 5 pairs drawn from them (``random.Random(0).sample``, so the groups overlap: with S = 20 two
groups share 1.25 pairs on average, and the 20 outcomes are not independent).

Per scenario it prints: groups the statistical test passes / 20, the median |t|, and, for defects,
groups verify as a whole fails / 20 (the statistical test or a defect the sampler/replica/data checks
find in the group's first converted run, which is the run verify checks).

Usage: python bench/statistical_power.py [--pairs 20] [--only NAME ...] [--save raw.json] [--load raw.json]
(--load re-evaluates saved curves without running anything.)
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import tempfile
from pathlib import Path

from dp2ddp.api import ConvertOptions, convert_source
from dp2ddp.verify import checks
from dp2ddp.verify.compare import Tolerance, compare_band
from dp2ddp.verify.runner import Plan, run_all

GROUPS, GROUP_SIZE = 20, 5

DROPOUT_MLP = '''
import random

import torch
import torch.nn as nn


class Jittered(torch.utils.data.Dataset):
    def __init__(self):
        generator = torch.Generator().manual_seed(11)
        self.x, self.y = torch.randn(96, 6, generator=generator), torch.randn(96, 1, generator=generator)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        x = self.x[i] * (-1.0 if random.random() < 0.5 else 1.0)  # a random flip, drawn in the dataset
        return x + 0.1 * torch.randn(6), self.y[i]


loader = torch.utils.data.DataLoader(Jittered(), batch_size=16, shuffle=True)
model = nn.DataParallel(nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Dropout(0.2), nn.Linear(32, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
for epoch in range(2):
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
'''

# The same with a target it can learn (flips do not change it): the loss falls within the 12 steps, so a
# doubled learning rate changes the curve; DROPOUT_MLP's random targets leave it little to change.
LEARNABLE_MLP = DROPOUT_MLP.replace(
    "torch.randn(96, 1, generator=generator)", "torch.zeros(96, 1)").replace(
    "    def __len__(self):",
    "        self.y = self.x.abs().sum(dim=1, keepdim=True) - 4.0\n\n    def __len__(self):", 1)

# Mild jitter instead of flips: the unaligned noise moves the loss less than a doubled learning rate does.
JITTERED_MLP = LEARNABLE_MLP.replace(
    "x = self.x[i] * (-1.0 if random.random() < 0.5 else 1.0)  # a random flip, drawn in the dataset",
    "x = self.x[i] * random.uniform(0.95, 1.05)  # a random scale, drawn in the dataset")

BATCH_NOISE = '''
import torch
import torch.nn as nn

generator = torch.Generator().manual_seed(5)
x, y = torch.randn(96, 8, generator=generator), torch.randint(0, 3, (96,), generator=generator)
data = torch.utils.data.TensorDataset(x, y)
loader = torch.utils.data.DataLoader(data, batch_size=16, shuffle=True)
model = nn.DataParallel(nn.Sequential(nn.Linear(8, 24), nn.ReLU(), nn.Linear(24, 3)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
for epoch in range(2):
    for x, y in loader:
        x = x + 0.3 * torch.randint(-1, 2, x.shape).float()  # noise drawn over the whole batch in training
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
'''

CROPPED_CONV = '''
import numpy as np
import torch
import torch.nn as nn


class Cropped(torch.utils.data.Dataset):
    def __init__(self):
        generator = torch.Generator().manual_seed(3)
        self.images = torch.randn(96, 1, 10, 10, generator=generator)
        self.labels = torch.randint(0, 4, (96,), generator=generator)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        top, left = np.random.randint(0, 3, size=2)  # a random crop, drawn with numpy in the dataset
        return self.images[i, :, top:top + 8, left:left + 8], self.labels[i]


loader = torch.utils.data.DataLoader(Cropped(), batch_size=16, shuffle=True)
model = nn.DataParallel(nn.Sequential(nn.Conv2d(1, 6, 3), nn.ReLU(), nn.Flatten(), nn.Linear(6 * 36, 4)))
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
for epoch in range(2):
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
'''

# name: (original, edits planted in verify's own conversion, or None for the conversion as it is)
SCENARIOS: dict[str, tuple[str, tuple[tuple[str, str], ...] | None]] = {
    "correct dropout MLP, random flips": (DROPOUT_MLP, None),
    "correct MLP, torch.randint batch noise": (BATCH_NOISE, None),
    "correct conv net, numpy crops": (CROPPED_CONV, None),
    "correct dropout MLP, learnable target, random flips": (LEARNABLE_MLP, None),
    "correct dropout MLP, learnable target, mild jitter": (JITTERED_MLP, None),
    "defect: learning rate x2": (DROPOUT_MLP, (("lr=0.05", "lr=0.1"),)),
    "defect: learning rate x2, learnable target, mild jitter": (JITTERED_MLP, (("lr=0.05", "lr=0.1"),)),
    "defect: learning rate x2, learnable target": (LEARNABLE_MLP, (("lr=0.05", "lr=0.1"),)),
    "defect: set_epoch removed": (DROPOUT_MLP, (("    loader.sampler.set_epoch(epoch)\n", ""),)),
    "defect: per-process batch undivided": (
        DROPOUT_MLP, (("batch_size=16 // dist.get_world_size()", "batch_size=16"),)),
    "defect: loss x world size": (DROPOUT_MLP, (("loss.backward()", "(loss * dist.get_world_size()).backward()"),)),
}


def _planted(original: str, edits: tuple[tuple[str, str], ...]) -> str:
    text = convert_source(original, ConvertOptions()).output
    for old, new in edits:
        if old not in text:
            sys.exit(f"planted defect no longer applies: {old!r}")
        text = text.replace(old, new)
    return text


def run_pairs(original: str, edits: tuple[tuple[str, str], ...] | None, pairs: int) -> list[dict]:
    """S pairs through verify's runner: per seed the reference curve, the converted ranks' curves, and
    whether the checks verify runs on a converted run found a defect in it."""
    with tempfile.TemporaryDirectory(prefix="dp2ddp-power-") as temporary:
        folder = Path(temporary)
        script = folder / "train.py"
        script.write_text(original)
        converted = folder / "train_ddp.py"
        converted.write_text(_planted(original, edits) if edits else convert_source(original, ConvertOptions()).output)
        work = folder / "work"
        work.mkdir()
        plan = Plan(original=script, converted=converted, device="cpu", statistical_seeds=pairs)
        runs = run_all(plan, work, lambda name, steps: None)
        results = []
        for reference, conversion in zip(runs.references, runs.conversions):
            found = [*checks.distributed(conversion, plan.nproc), *checks.replicas(conversion),
                     *checks.samplers(conversion, None), *checks.loaders(conversion)]  # fmt: skip
            results.append({
                "ok": reference.ok and conversion.ok,
                "reference": [list(pair) for pair in reference.ranks[0].losses],
                "ranks": [[list(pair) for pair in rank.losses] for rank in conversion.ranks],
                "defects": [finding.message for finding in found if finding.kind == "defect"],
            })  # fmt: skip
        return results


def evaluate(pairs: list[dict]) -> dict[str, float]:
    """Over 20 groups of 5 pairs: groups the statistical test passes, groups its t test and its spread test
    pass on their own, groups verify as a whole passes, and the medians of |t| and of the spread ratio."""
    chooser = random.Random(0)
    counts = {"passed": 0, "t passed": 0, "spread passed": 0, "whole passed": 0}
    ts, ratios = [], []
    for _ in range(GROUPS):
        group = [pairs[index] for index in chooser.sample(range(len(pairs)), GROUP_SIZE)]
        if not all(pair["ok"] for pair in group):
            ts.append(math.inf)
            ratios.append(math.inf)
            continue
        comparison = compare_band([pair["reference"] for pair in group], [pair["ranks"] for pair in group], Tolerance())
        test = comparison.paired
        assert test is not None
        ts.append(abs(test.t))
        ratios.append(test.spread_ratio)
        counts["passed"] += comparison.equivalent
        counts["t passed"] += test.exact or abs(test.t) <= test.t_limit
        counts["spread passed"] += test.exact or test.spread_ratio <= test.spread_limit
        counts["whole passed"] += comparison.equivalent and not group[0]["defects"]
    return {**counts, "median t": statistics.median(ts), "median spread": statistics.median(ratios)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=20, help="seeded pairs run per scenario (S)")
    parser.add_argument("--only", nargs="*", default=None, help="scenario names containing any of these words")
    parser.add_argument("--save", type=Path, help="write the curves of every pair here (JSON), scenario by scenario")
    parser.add_argument("--load", type=Path, help="evaluate the curves saved with --save instead of running")
    args = parser.parse_args()
    saved: dict[str, list[dict]] = json.loads(args.load.read_text()) if args.load else {}
    for name, (original, edits) in SCENARIOS.items():
        if args.only and not any(word in name for word in args.only):
            continue
        if args.load:
            if name not in saved:
                continue
        else:
            saved[name] = run_pairs(original, edits, args.pairs)
            if args.save:
                args.save.write_text(json.dumps(saved))
        result = evaluate(saved[name])
        line = (f"{name:56s} passes {result['passed']:2.0f}/{GROUPS} (t test alone {result['t passed']:2.0f}, spread "
                f"test alone {result['spread passed']:2.0f})  median |t| {result['median t']:7.3g}  median spread "
                f"ratio {result['median spread']:7.3g}")  # fmt: skip
        if edits is not None:
            line += f"  verify as a whole passes {result['whole passed']:2.0f}/{GROUPS}"
        print(line, flush=True)

if __name__ == "__main__":
    main()
