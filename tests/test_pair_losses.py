"""Losses that pair the samples of a batch with each other keep the batch each process's loss sees (DDP342).

Under DataParallel the loss ran once, on the outputs gathered from every GPU: a contrastive or hard-mining
loss paired the whole batch. A loader whose batch convert divides would give each process's loss a share of
it, and the pairs it mines would change, with exit 0. The loss may sit in the script or in another module of
the project, reached through a factory; the project fixture ``pair_loss_from_factory`` trains the result.
"""

from __future__ import annotations

import ast
from pathlib import Path
from textwrap import dedent

import pytest

from dp2ddp.analysis.losses import pairing_losses
from dp2ddp.api import ConvertResult, convert_source
from dp2ddp.conversion import ConvertOptions
from dp2ddp.projects import convert_project


def _pairing(source: str, module: str = "train") -> list[str]:
    return [name for name, _, _ in pairing_losses(ast.parse(dedent(source)), module)]


@pytest.mark.parametrize(
    ("source", "module", "expected"),
    [
        pytest.param(
            """
            class ContrastiveLoss(nn.Module):
                def forward(self, x, y):
                    sim = torch.matmul(x, x.t())
                    return sim.mean()
            """,
            "train",
            ["ContrastiveLoss"],
            id="a similarity matrix of the batch against itself",
        ),
        pytest.param(
            """
            def triplet_loss(feats, labels):
                mask = labels.eq(labels.T)
                return feats.sum() * mask.sum()
            """,
            "train",
            ["triplet_loss"],
            id="a mask of equal labels",
        ),
        pytest.param(
            """
            def euclidean_dist(x, y):
                return torch.cdist(x, y)

            class Criterion(nn.Module):
                def forward(self, feats, labels):
                    return euclidean_dist(feats, feats).mean()
            """,
            "reid.loss",
            ["Criterion"],
            id="a distance through a function of its module, in a module named for losses",
        ),
        pytest.param(
            """
            def clip_objective(a, b):
                return (a @ b.transpose(0, 1)).mean()
            """,
            "train",
            ["clip_objective"],
            id="a transpose of the first two dimensions, in a function named for an objective",
        ),
    ],
)
def test_finds_losses_that_pair_samples(source: str, module: str, expected: list[str]) -> None:
    assert _pairing(source, module) == expected


@pytest.mark.parametrize(
    ("source", "module"),
    [
        pytest.param(
            """
            class CenterLoss(nn.Module):
                def forward(self, x, labels):
                    dist = x.pow(2).sum(1, keepdim=True) - 2 * x @ self.centers.t()
                    return dist.mean()
            """,
            "train",
            id="samples against the loss's own parameters",
        ),
        pytest.param(
            """
            class EdgeLoss(nn.Module):
                def __init__(self):
                    k = torch.tensor([[0.05, 0.25, 0.4, 0.25, 0.05]])
                    self.kernel = torch.matmul(k.t(), k)

                def forward(self, x, y):
                    return (x - y).abs().mean()
            """,
            "train",
            id="a kernel built once in __init__",
        ),
        pytest.param(
            """
            def create_window(size, channel):
                w = gaussian(size).unsqueeze(1)
                return w.mm(w.t()).expand(channel, 1, size, size)

            class SSIMLoss(nn.Module):
                def forward(self, img1, img2):
                    window = create_window(self.size, img1.size(1))
                    return 1 - ssim(img1, img2, window)
            """,
            "losses",
            id="a window the loss builds from values, not from its inputs",
        ),
        pytest.param(
            """
            class Attention(nn.Module):
                def forward(self, q, k):
                    return (q @ k.t()).softmax(-1)
            """,
            "train",
            id="a model's layer: it runs on each replica's share under DataParallel too",
        ),
        pytest.param(
            """
            class AttentionLoss(nn.Module):
                def forward(self, q, k):
                    return (q @ k.transpose(-2, -1)).mean()
            """,
            "train",
            id="a product over the last two dimensions, within each sample",
        ),
    ],
)
def test_leaves_other_computations_alone(source: str, module: str) -> None:
    assert _pairing(source, module) == []


SCRIPT = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

{loss}

def main():
    loader = DataLoader(TensorDataset(torch.randn(32, 6), torch.arange(32) % 4), batch_size=8, shuffle=True)
    model = nn.DataParallel(nn.Linear(6, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            loss = {call}
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main()
"""

PAIR_LOSS = """\
def contrastive_loss(feats, labels):
    sim = feats @ feats.t()
    same = labels.view(-1, 1) == labels.view(1, -1)
    return (sim * same).mean()
"""


def _codes(result: ConvertResult) -> set[str]:
    return {finding.code for finding in result.findings}


def test_a_pair_loss_of_the_script_keeps_the_batch_per_process() -> None:
    result = convert_source(SCRIPT.format(loss=PAIR_LOSS, call="contrastive_loss(model(x), y)"))
    assert "batch_size=8," in result.output and "8 // " not in result.output
    assert {"DDP342", "DDP308"} <= _codes(result)
    message = next(f.message for f in result.findings if f.code == "DDP342")
    assert "`contrastive_loss` (line 6)" in message


def test_a_pair_loss_the_script_never_calls_leaves_the_batch_divided() -> None:
    result = convert_source(SCRIPT.format(loss=PAIR_LOSS.replace("contrastive_loss", "unused_loss"), call="nn.functional.cross_entropy(model(x), y)").replace("unused_loss", "contrastive_loss", 1))
    assert "8 // dist.get_world_size()" in result.output
    assert "DDP342" not in _codes(result)


def test_per_process_batches_need_no_warning() -> None:
    result = convert_source(SCRIPT.format(loss=PAIR_LOSS, call="contrastive_loss(model(x), y)"), ConvertOptions(batch="per-process"))
    assert "DDP342" not in _codes(result)


def _project(tmp_path: Path, files: dict[str, str]) -> dict[str, ConvertResult]:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(dedent(text), encoding="utf-8")
    sources = {path: path.read_text(encoding="utf-8") for path in sorted(tmp_path.rglob("*.py"))}
    result = convert_project(tmp_path, sources)
    converted = {path.relative_to(tmp_path).as_posix(): outcome for path, outcome in result.files.items()}
    assert all(isinstance(outcome, ConvertResult) for outcome in converted.values()), converted
    return converted  # type: ignore[return-value]


TRIPLET = """\
import torch.nn as nn


class TripletLoss(nn.Module):
    def forward(self, feats, labels):
        return (feats @ feats.t()).mean()
"""


def test_a_pair_loss_of_another_module_the_program_uses_keeps_the_batch(tmp_path: Path) -> None:
    converted = _project(
        tmp_path,
        {
            "losses/__init__.py": "from .triplet import TripletLoss\n",
            "losses/triplet.py": TRIPLET,
            "train.py": SCRIPT.format(loss="from losses import TripletLoss\ncriterion = TripletLoss()", call="criterion(model(x), y)"),
        },
    )
    train = converted["train.py"]
    assert "batch_size=8," in train.output
    message = next(f.message for f in train.findings if f.code == "DDP342")
    assert "`TripletLoss` (losses/triplet.py:6)" in message


def test_a_pair_loss_a_package_only_exports_leaves_the_batch_divided(tmp_path: Path) -> None:
    converted = _project(
        tmp_path,
        {
            "losses/__init__.py": "from .triplet import TripletLoss\n\n__all__ = ['TripletLoss']\n",
            "losses/triplet.py": TRIPLET,
            "train.py": SCRIPT.format(loss="import losses", call="nn.functional.cross_entropy(model(x), y)"),
        },
    )
    train = converted["train.py"]
    assert "8 // dist.get_world_size()" in train.output
    assert "DDP342" not in _codes(train)


def test_a_pair_loss_a_trainer_only_tests_for_leaves_the_batch_divided(tmp_path: Path) -> None:
    """`isinstance(criterion, TripletLoss)` in a shared trainer: the softmax entry computes no pair loss."""
    converted = _project(
        tmp_path,
        {
            "losses/__init__.py": "from .triplet import TripletLoss\n",
            "losses/triplet.py": TRIPLET,
            "train.py": SCRIPT.format(
                loss="from losses import TripletLoss\n\ndef pairs(criterion):\n    return isinstance(criterion, (TripletLoss,))",
                call="nn.functional.cross_entropy(model(x), y)",
            ),
        },
    )
    train = converted["train.py"]
    assert "8 // dist.get_world_size()" in train.output
    assert "DDP342" not in _codes(train)


def test_a_loader_split_where_it_trains_keeps_its_batch_for_a_pair_loss(tmp_path: Path) -> None:
    """A builder of another module kept whole for evaluation: the training binding takes its share with the batch kept."""
    factory = (
        "from torch.utils.data import DataLoader\n\n\ndef get_loader(dataset, flag):\n"
        '    return DataLoader(dataset, batch_size=8, shuffle=flag == "train")\n'
    )
    train = SCRIPT.format(loss=PAIR_LOSS + "\nfrom factory import get_loader", call="contrastive_loss(model(x), y)").replace(
        "    loader = DataLoader(TensorDataset(torch.randn(32, 6), torch.arange(32) % 4), batch_size=8, shuffle=True)\n",
        '    data = TensorDataset(torch.randn(32, 6), torch.arange(32) % 4)\n    loader = get_loader(data, "train")\n    print(len(get_loader(data, "val")))\n',
    )
    converted = _project(tmp_path, {"factory.py": factory, "train.py": train})
    output = converted["train.py"].output
    assert "    loader = split_loader(loader, keep_batch=True)\n" in output
    message = next(f.message for f in converted["train.py"].findings if f.code == "DDP342")
    assert "keeps `loader.batch_size` per process" in message
