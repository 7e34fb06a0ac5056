"""Correct conversions that verify used to reject, and the draws it names where it cannot line them up.

Each end-to-end case writes a small DataParallel script, lets verify convert it and
runs both (a reference process and 2 gloo ranks on CPU, about 10-20 s each):

- a time-major model wrapped ``nn.DataParallel(model, dim=1)``, with dropout;
- a layer re-initialised after the wrap under the script's own ``torch.manual_seed``;
- mixup's ``randperm``, drop-path's ``bernoulli_``, ``torch.bernoulli``, ``torch.normal`` and
  ``Normal(...).rsample()`` drawn per sample of the batch;
- ``torch.randint`` over the batch and ``random.random()`` in a dataset's ``__getitem__``, which
  verify cannot line up and names in the ``unaligned_draws`` fact of every process.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dp2ddp.api import ConvertOptions, convert_source
from dp2ddp.verify.noise import GlobalNoise, UnalignedDraws
from tests.test_verify import run_verify

# --- the batch's permutation --------------------------------------------------------------------------


@pytest.mark.parametrize("rows", [pytest.param(8, id="a full batch"), pytest.param(7, id="a partial last batch")])
def test_the_reference_permutation_on_each_rank_s_rows_is_what_that_rank_draws(rows: int) -> None:
    reference = GlobalNoise(seed=3, rank=0, world=1, dropout=True, emulated_world=2)
    reference.rows = rows
    permutation = reference.permutation(rows)
    assert sorted(permutation.tolist()) == list(range(rows))
    for rank in (0, 1):
        own = torch.arange(rank, rows, 2)
        shard = GlobalNoise(seed=3, rank=rank, world=2, dropout=True)
        shard.rows = len(own)
        local = shard.permutation(len(own))
        # x[perm] on the reference's rows r::2 is rank r's x_r[local]: rows mix only within a rank's share.
        assert torch.equal(permutation[own], own[local])


def test_successive_permutations_differ() -> None:
    noise = GlobalNoise(seed=0, rank=0, world=2, dropout=True)
    noise.rows = 16
    assert not torch.equal(noise.permutation(16), noise.permutation(16))


# --- naming a converted copy's lines by the original's ------------------------------------------------------


def test_a_draw_in_the_converted_copy_is_named_by_the_original_s_line(tmp_path: Path) -> None:
    original = tmp_path / "train.py"
    original.write_text("import torch\nx = 1\nnoise = torch.randint(0, 3, (8,))\n")
    copy = tmp_path / "copy" / "train.py"
    copy.parent.mkdir()
    helpers = "import os\n\n\ndef setup():\n    pass\n\n\n"
    copy.write_text("import torch\n" + helpers + "x = 1\nnoise = torch.randint(0, 3, (8,))\n")
    draws = UnalignedDraws(str(copy), str(original), str(tmp_path))
    assert draws._shown(str(copy), 10) == "train.py:3"
    assert draws._shown(str(copy), 5) == "train.py:5 of the converted copy"  # a helper convert added
    assert draws._shown(str(tmp_path / "models" / "net.py"), 7) == "models/net.py:7"


# --- time-major models ------------------------------------------------------------------------------------

TIME_MAJOR_SCRIPT = '''
import torch
import torch.nn as nn


class LanguageModel(nn.Module):
    def __init__(self, vocabulary=20, width=16):
        super().__init__()
        self.embed = nn.Embedding(vocabulary, width)
        self.rnn = nn.LSTM(width, width)  # not batch_first: (T, B, E)
        self.out = nn.Linear(width, vocabulary)
        self.drop = nn.Dropout(0.3)

    def forward(self, tokens):
        hidden, _ = self.rnn(self.embed(tokens))
        return self.out(self.drop(hidden))  # (T, B, E): the batch is dimension 1


def time_major(items):
    return torch.stack([tokens for (tokens,) in items], dim=1)  # (T, B) token ids


torch.manual_seed(0)
tokens = torch.randint(0, 20, (48, 13))
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(tokens), batch_size=8, shuffle=True,
                                     collate_fn=time_major)
model = nn.DataParallel(LanguageModel(), dim=1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
for epoch in range(2):
    for batch in loader:
        logits = model(batch[:-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, 20), batch[1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
'''


def test_a_time_major_model_wrapped_with_dim_1_is_equivalent(tmp_path: Path) -> None:
    """Without GPUs nn.DataParallel keeps no ``dim``: the reference split (T, B) along time and diverged at
    step 0 by 2.6e-3. The dropout inside is drawn for the batch along dimension 1 in both runs, not switched
    off in one (the converted ranks' loader yields (T, B/W), whose first dimension is time)."""
    script = tmp_path / "time_major.py"
    script.write_text(TIME_MAJOR_SCRIPT)
    assert "wrap_ddp(LanguageModel(), dim=1)" in convert_source(TIME_MAJOR_SCRIPT, ConvertOptions()).output
    code, output, document = run_verify(tmp_path, str(script))
    assert code == 0, output
    assert document["max_rel_gap"] < 1e-9
    assert all(rank["dropout_off"] == 0 for run in document["runs"] for rank in run["ranks"])


# --- a seeded re-initialisation after the wrap --------------------------------------------------------------

RESEEDED_SCRIPT = '''
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def reinit(layer):
    nn.init.xavier_uniform_(layer.weight)
    nn.init.normal_(layer.bias, std=0.1)


generator = torch.Generator().manual_seed(7)
data = torch.utils.data.TensorDataset(torch.randn(48, 6, generator=generator),
                                      torch.randint(0, 3, (48,), generator=generator))
loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True)
model = nn.DataParallel(Net())
torch.manual_seed(5)
reinit(model.module.fc2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
'''


@pytest.fixture(scope="module")
def reseeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    script = tmp_path_factory.mktemp("reseeded") / "reseeded.py"
    script.write_text(RESEEDED_SCRIPT)
    return script


def test_a_re_init_after_the_wrap_under_the_script_s_own_seed_is_equivalent(reseeded: Path) -> None:
    """Every rank of a real run draws the same weights after ``torch.manual_seed(5)``; verify used to redraw
    rank 1's and report replicas that differ."""
    code, output, document = run_verify(reseeded.parent, str(reseeded))
    assert code == 0, output
    assert not [check for check in document["checks"] if check["check"] == "replicas"]


def test_a_re_init_seeded_per_rank_after_the_wrap_is_still_caught(reseeded: Path, tmp_path: Path) -> None:
    converted = convert_source(RESEEDED_SCRIPT, ConvertOptions()).output
    assert "torch.manual_seed(5)\n" in converted
    broken = tmp_path / "per_rank.py"
    broken.write_text(converted.replace("torch.manual_seed(5)\n", "torch.manual_seed(5 + dist.get_rank())\n"))
    code, output, document = run_verify(tmp_path, str(reseeded), "--converted", str(broken), "--max-steps", "3")
    assert code == 1, output
    [replicas] = [check for check in document["checks"] if check["check"] == "replicas"]
    assert replicas["step"] == 0 and "fc2.weight" in replicas["message"]


# --- randomness per sample of the batch ------------------------------------------------------------------

PER_SAMPLE_SCRIPT = '''
import numpy as np
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encode = nn.Linear(6, 8)  # the mean and log-variance of a 4-wide code
        self.decode = nn.Linear(4, 16)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        mu, log_var = self.encode(x).chunk(2, dim=1)
        z = torch.distributions.Normal(mu, (0.5 * log_var).exp()).rsample()  # the VAE's reparameterisation
        z = z + 0.1 * torch.normal(torch.zeros_like(mu), torch.ones_like(mu))
        h = torch.relu(self.decode(z))
        keep = h.new_empty((h.shape[0], 1)).bernoulli_(0.8) / 0.8  # drop-path: a sample's whole branch
        gate = torch.bernoulli(torch.full_like(h, 0.9))
        return self.head(h * keep * gate)


generator = torch.Generator().manual_seed(7)
data = torch.utils.data.TensorDataset(torch.randn(48, 6, generator=generator),
                                      torch.randint(0, 3, (48,), generator=generator))
loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True)
model = nn.DataParallel(Net())
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
np.random.seed(0)
for epoch in range(2):
    for x, y in loader:
        lam = float(np.random.beta(0.4, 0.4))  # mixup: one scalar a step, the same in every process
        perm = torch.randperm(x.size(0))
        mixed = lam * x + (1 - lam) * x[perm]
        out = model(mixed)
        loss = lam * nn.functional.cross_entropy(out, y) + (1 - lam) * nn.functional.cross_entropy(out, y[perm])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
'''


def test_mixup_drop_path_and_reparameterised_noise_line_up(tmp_path: Path) -> None:
    """Each rank permutes, masks and samples its own rows; these diverged at step 0 by 2.2e-2 relative."""
    script = tmp_path / "per_sample.py"
    script.write_text(PER_SAMPLE_SCRIPT)
    code, output, document = run_verify(tmp_path, str(script))
    assert code == 0, output
    assert document["max_rel_gap"] < 1e-9
    assert all(rank["unaligned_draws"] == [] for run in document["runs"] for rank in run["ranks"])


# --- draws that cannot be lined up -----------------------------------------------------------------------

UNALIGNED_SCRIPT = '''
import random
import sys

import torch
import torch.nn as nn


class Flipped(torch.utils.data.Dataset):
    def __init__(self):
        generator = torch.Generator().manual_seed(11)
        self.x, self.y = torch.randn(32, 6, generator=generator), torch.randint(0, 3, (32,), generator=generator)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        flip = -1.0 if random.random() < 0.5 else 1.0  # line 18: per-sample augmentation
        return self.x[i] * flip, self.y[i]


loader = torch.utils.data.DataLoader(Flipped(), batch_size=8, shuffle=True, num_workers=int(sys.argv[1]))
model = nn.DataParallel(nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for x, y in loader:
        noisy = torch.where(torch.rand(x.size(0)) < 0.2, torch.randint(0, 3, (x.size(0),)), y)  # line 27
        loss = nn.functional.cross_entropy(model(x), noisy)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
'''


@pytest.mark.parametrize("workers", [pytest.param("0", id="in the main process"),
                                     pytest.param("2", id="in DataLoader workers")])  # fmt: skip
def test_draws_verify_cannot_line_up_are_named_with_their_lines(workers: str, tmp_path: Path) -> None:
    script = tmp_path / "unaligned.py"
    script.write_text(UNALIGNED_SCRIPT)
    code, output, document = run_verify(tmp_path, str(script), "--max-steps", "4", "--", workers)
    assert code == 1, output
    expected = {"torch.randint at unaligned.py:27", "random.random at unaligned.py:18 (in the dataset)"}
    ranks = [rank for run in document["runs"] for rank in run["ranks"]]
    assert len(ranks) == 3  # the reference and both converted ranks, named by the original's lines
    assert all(set(rank["unaligned_draws"]) == expected for rank in ranks), ranks
    assert "torch.randint at unaligned.py:27" in document["message"]


FLIPPED_FAKE_DATA = '''
import torch
import torch.nn as nn
import torchvision
import torchvision.transforms as T

data = torchvision.datasets.FakeData(size=32, image_size=(3, 8, 8), num_classes=4,
                                     transform=T.Compose([T.RandomHorizontalFlip(), T.ToTensor()]))
loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True)
model = nn.DataParallel(nn.Sequential(nn.Flatten(), nn.Linear(192, 4)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    loss = nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
'''


def test_a_transform_after_fake_data_s_own_seed_is_named_as_the_dataset_s_randomness(tmp_path: Path) -> None:
    """FakeData seeds torch per item and then restores the shared state: the flip after that is augmentation
    (what --synthetic-data gives a CIFAR script), not "no randomness"."""
    script = tmp_path / "flipped.py"
    script.write_text(FLIPPED_FAKE_DATA)
    code, output, document = run_verify(tmp_path, str(script))
    assert code == 1, output
    assert "could not line up" in document["message"] and "(in the dataset)" in document["message"], output
    assert "deterministic" not in document["message"]
