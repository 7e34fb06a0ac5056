"""Statistical mode's decision on synthetic curves: converted run k against reference seed k.

A pair shares what verify lines up (here: the seed's own curve, standing for initial weights and
aligned noise) and differs by what it cannot (fresh noise per run). End-to-end runs of
``verify --statistical`` live in test_verify.py; false-alarm rate and power are measured by
bench/statistical_power.py.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dp2ddp.api import ConvertOptions, convert_source
from dp2ddp.verify.compare import Tolerance, compare_band, t_critical

STEPS = 12


def seed_curve(seed: int, spread: float = 0.2) -> list[float]:
    """What seed ``seed`` fixes: a decaying loss with its own offset and wiggle."""
    generator = torch.Generator().manual_seed(1000 + seed)
    draws = torch.randn(STEPS + 1, generator=generator).tolist()
    return [2.0 - 0.05 * step + spread * draws[0] + 0.5 * spread * draws[step + 1] for step in range(STEPS)]


def run(seed: int, draw: int, noise: float = 0.05, shift: float = 0.0, scale: float = 1.0) -> list[tuple[int, float]]:
    """One run of seed ``seed``: its curve plus ``noise`` drawn afresh by ``draw`` (what verify cannot line up)."""
    generator = torch.Generator().manual_seed(draw)
    fresh = torch.randn(STEPS, generator=generator).tolist()
    return [(step, scale * loss + shift + noise * fresh[step]) for step, loss in enumerate(seed_curve(seed))]


def pairs(group: int, **converted: float) -> tuple[list, list]:
    """Five references and five converted runs (two ranks each, the same loss) of one group of seeds."""
    seeds = range(5 * group, 5 * group + 5)
    references = [run(seed, draw=10_000 + seed) for seed in seeds]
    conversions = [[run(seed, draw=20_000 + seed, **converted)] * 2 for seed in seeds]
    return references, conversions


def test_the_threshold_is_the_two_sided_one_percent_t_quantile() -> None:
    assert t_critical(4) == pytest.approx(4.604)
    assert t_critical(11) == t_critical(10)  # between tabulated degrees: the stricter one


def test_paired_noise_passes_for_every_group_of_seeds() -> None:
    """Should pass: the converted runs differ from their references only by fresh noise."""
    for group in range(20):
        comparison = compare_band(*pairs(group), Tolerance())
        assert comparison.paired is not None
        assert comparison.equivalent, (group, comparison.paired)


def test_a_paired_shift_smaller_than_the_seeds_spread_is_caught() -> None:
    """Should fail: a shift of half the seeds' spread, the same in every pair, is far from the pairs' noise."""
    for group in range(20):
        comparison = compare_band(*pairs(group, shift=0.1), Tolerance())
        assert not comparison.equivalent and comparison.shifted, (group, comparison.paired)
        assert comparison.first_divergence is None  # no single step is to blame
        assert comparison.paired is not None and comparison.paired.t > comparison.paired.t_limit


def test_gaps_larger_than_independent_seeds_fail_whatever_their_sign() -> None:
    """Should fail: converted runs that train on other batches (a missing set_epoch) give gaps of either sign."""
    references, _ = pairs(0)
    conversions = [[run(seed + 50, draw=seed)] * 2 for seed in range(5)]  # not paired with anything
    conversions = [[[(step, loss + 0.8 * math.sin(3 * step + seed)) for step, loss in ranks[0]]] * 2
                   for seed, ranks in enumerate(conversions)]  # fmt: skip
    comparison = compare_band(references, conversions, Tolerance())
    assert comparison.paired is not None and comparison.paired.spread_ratio > comparison.paired.spread_limit
    assert not comparison.equivalent


def test_identical_pairs_fall_back_to_exact_agreement() -> None:
    """Nothing unaligned was drawn: every pair agrees to the tolerance, and a tiny shift still fails."""
    references = [run(seed, draw=0, noise=0.0) for seed in range(5)]
    same = [[curve] * 2 for curve in references]
    comparison = compare_band(references, same, Tolerance())
    assert comparison.equivalent and comparison.paired is not None and comparison.paired.exact
    shifted = [[[(step, loss + 1e-3) for step, loss in curve]] * 2 for curve in references]
    assert not compare_band(references, shifted, Tolerance()).equivalent


def test_a_missing_step_and_a_nan_fail_at_their_step() -> None:
    references, conversions = pairs(0)
    conversions[2] = [ranks[:-1] for ranks in conversions[2]]  # one converted run stopped a step early
    comparison = compare_band(references, conversions, Tolerance())
    assert comparison.first_divergence is not None and comparison.first_divergence.step == STEPS - 1
    references, conversions = pairs(0)
    conversions[1] = [[(step, math.nan if step == 4 else loss) for step, loss in conversions[1][0]]] * 2
    comparison = compare_band(references, conversions, Tolerance())
    assert comparison.first_divergence is not None and comparison.first_divergence.step == 4


def test_pairs_must_match() -> None:
    references, conversions = pairs(0)
    with pytest.raises(ValueError, match="at least 2 pairs"):
        compare_band(references, conversions[:4], Tolerance())


# --- whole runs: 5 reference seeds and 5 converted runs each ------------------------------------------------

JITTERED_SCRIPT = '''
import random

import torch
import torch.nn as nn


class Jittered(torch.utils.data.Dataset):
    def __init__(self):
        self.x = torch.randn(96, 6, generator=torch.Generator().manual_seed(11))
        self.y = self.x.abs().sum(dim=1, keepdim=True) - 4.0

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        x = self.x[i] * random.uniform(0.95, 1.05)  # drawn in the dataset: verify cannot line it up
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


def verify_statistical(folder: Path, *args: str) -> tuple[int, str, dict]:
    result = folder / "verify.json"
    command = [sys.executable, "-m", "dp2ddp", "verify", "--statistical", "--json", str(result), *args]
    completed = subprocess.run(command, cwd=folder, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
                               capture_output=True, text=True, timeout=1200)  # fmt: skip
    document = json.loads(result.read_text()) if result.exists() else {}
    return completed.returncode, completed.stdout + completed.stderr, document


@pytest.mark.slow
def test_a_correct_noisy_conversion_passes_and_a_loss_scaled_by_the_world_size_fails(tmp_path: Path) -> None:
    """A doubled learning rate is not here: 5 pairs of 12 steps pass the paired test (README, "Statistical mode");
    verify fails it through its learning-rate check instead (tests/test_verify_defects.py)."""
    original = tmp_path / "jittered.py"
    original.write_text(JITTERED_SCRIPT)
    code, output, document = verify_statistical(tmp_path, str(original))
    assert code == 0, output
    assert len(document["runs"]) == 10 and not document["paired"]["exact"]
    assert "mean paired gap" in output and "paired test of 5 seed pairs" in output
    converted = convert_source(JITTERED_SCRIPT, ConvertOptions()).output
    assert "loss.backward()" in converted
    scaled = tmp_path / "scaled.py"
    scaled.write_text(converted.replace("loss.backward()", "(loss * dist.get_world_size()).backward()"))
    code, output, document = verify_statistical(tmp_path, str(original), "--converted", str(scaled))
    assert code == 1, output
    assert document["verdict"] == "diverges" and document["paired"]["rejects"], output
