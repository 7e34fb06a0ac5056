"""Losses normalised by the whole batch: class-weighted means (DDP319/DDP515) and in-batch negatives (DDP320/DDP516).

The detection is one analysis (``codemods/_losses.py``); convert reports it through the loss codemod and
check through the DDP hazards, so both layers are tested on the same shapes.
"""

from __future__ import annotations

from textwrap import dedent

import pytest
from libcst.codemod import CodemodTest

from dp2ddp.check import check_source
from dp2ddp.analysis.module import Analysis
from dp2ddp.codemods.scale_summed_losses import ScaleSummedLossesCommand
from dp2ddp.rules import RULES

HEADER = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

model = wrap_ddp(Net())
"""


def found(body: str) -> list[tuple[int, str, str]]:
    """(line in ``body``, code, the loss call) of each loss the analysis reports."""
    analysis = Analysis.of_source(HEADER + dedent(body))
    offset = HEADER.count("\n")
    return [
        (analysis.position(h.node).start.line - offset, h.code, dict(h.values)["loss"]) for h in analysis.batch_normalised_losses
    ]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(
            """
            criterion = nn.CrossEntropyLoss(weight=class_weights)
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
            """,
            [(4, "DDP319", "criterion(model(x), y)")],
            id="a weighted criterion object whose loss is backwarded",
        ),
        pytest.param(
            """
            criterion = nn.NLLLoss(torch.tensor([1.0, 4.0]), reduction="mean").cuda()
            for x, y in loader:
                criterion(model(x), y).backward()
            """,
            [(4, "DDP319", "criterion(model(x), y)")],
            id="positional weight, explicit mean and a device move on the criterion",
        ),
        pytest.param(
            """
            for x, y in loader:
                out = model(x)
                loss = F.cross_entropy(out, y, weight=w) + 0.1 * out.pow(2).mean()
                scaler.scale(loss / accumulation).backward()
            """,
            [(4, "DDP319", "F.cross_entropy(out, y, weight=w)")],
            id="functional weighted loss inside a sum, through AMP and accumulation",
        ),
        pytest.param(
            """
            for x, y in loader:
                loss = 0
                loss += F.nll_loss(model(x).log_softmax(1), y, w)
                loss.backward()
            """,
            [(4, "DDP319", "F.nll_loss(model(x).log_softmax(1), y, w)")],
            id="positional weight of the functional nll, accumulated with +=",
        ),
        pytest.param(
            """
            class Trainer:
                def __init__(self):
                    self.criterion = nn.CrossEntropyLoss(weight=w) if weighted else nn.CrossEntropyLoss()

                def step(self, x, y):
                    loss = self.criterion(model(x), y)
                    loss.backward()
            """,
            [(7, "DDP319", "self.criterion(model(x), y)")],
            id="a criterion attribute that may be weighted",
        ),
        pytest.param(
            """
            def info_nce(a, b, temperature):
                logits = a @ b.T / temperature
                labels = torch.arange(a.size(0), device=a.device)
                return F.cross_entropy(logits, labels)

            for x, t in loader:
                image, text = model(x, t)
                info_nce(image, text, 0.07).backward()
            """,
            [(5, "DDP320", "F.cross_entropy(logits, labels)")],
            id="in-batch negatives in a loss function of the script",
        ),
        pytest.param(
            """
            for x, t in loader:
                image, text = model(x, t)
                logits_per_image = logit_scale * image @ text.t()
                logits_per_text = logits_per_image.t()
                labels = torch.arange(len(image)).cuda()
                loss = (F.cross_entropy(logits_per_image, labels) + F.cross_entropy(logits_per_text, labels)) / 2
                loss.backward()
            """,
            [
                (7, "DDP320", "F.cross_entropy(logits_per_image, labels)"),
                (7, "DDP320", "F.cross_entropy(logits_per_text, labels)"),
            ],
            id="CLIP's symmetric loss with a logit scale, each direction",
        ),
        pytest.param(
            """
            class ContrastiveLoss(nn.Module):
                def __init__(self, temperature):
                    super().__init__()
                    self.temperature = temperature
                    self.ce = nn.CrossEntropyLoss()

                def forward(self, a, b):
                    similarity = torch.einsum("nc,mc->nm", a, b) / self.temperature
                    return self.ce(similarity, torch.arange(a.shape[0], device=a.device))

            criterion = ContrastiveLoss(0.1)
            for x, t in loader:
                loss = criterion(*model(x, t))
                loss.backward()
            """,
            [(10, "DDP320", "self.ce(similarity, torch.arange(a.shape[0], device=a.device))")],
            id="a criterion class of the script, einsum similarity, CrossEntropyLoss object",
        ),
        pytest.param(
            """
            for x, t in loader:
                q, k = model(x, t)
                loss = F.cross_entropy(torch.mm(q, k.t()) / 0.2, torch.arange(batch_size))
                loss.backward()
            """,
            [(4, "DDP320", "F.cross_entropy(torch.mm(q, k.t()) / 0.2, torch.arange(batch_size))")],
            id="torch.mm and a batch-size name",
        ),
    ],
)
def test_reports_losses_normalised_by_the_batch(body: str, expected: list[tuple[int, str, str]]) -> None:
    assert found(body) == expected


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(
            """
            criterion = nn.CrossEntropyLoss()
            for x, y in loader:
                criterion(model(x), y).backward()
            """,
            id="unweighted cross-entropy is a plain mean",
        ),
        pytest.param(
            """
            criterion = nn.CrossEntropyLoss(weight=w, reduction="sum")
            for x, y in loader:
                criterion(model(x), y).backward()
                F.cross_entropy(model(x), y, w, size_average=False).backward()
                F.nll_loss(model(x), y, weight=w, reduction="none").mean().backward()
            """,
            id="weights with a sum or no reduction divide by no weight sum",
        ),
        pytest.param(
            """
            for x, y in loader:
                F.cross_entropy(model(x), y, weight=None).backward()
                F.cross_entropy(model(x), y, weight=w, reduction=args.reduction).backward()
            """,
            id="no weight, or a reduction the file does not spell",
        ),
        pytest.param(
            """
            for x, y in loader:
                logits = model(x)
                loss = F.cross_entropy(logits, torch.arange(logits.size(0)))
                loss.backward()
            """,
            id="arange labels over a classifier's logits are no similarity",
        ),
        pytest.param(
            """
            for x, y in loader:
                loss = F.mse_loss(model(x), y)
                loss.backward()
                with torch.no_grad():
                    val = F.cross_entropy(model(x), y, weight=w)
                    a, b = model(x, y)
                    contrastive = F.cross_entropy(a @ b.T, torch.arange(len(a)))
            """,
            id="losses only evaluated never reach backward",
        ),
        pytest.param(
            """
            for x, t in loader:
                q, k = model(x, t)
                all_k = torch.cat(dist_nn.all_gather(k))
                n = q.size(0)
                labels = torch.arange(n) + dist.get_rank() * n
                F.cross_entropy(q @ all_k.T, labels).backward()
            """,
            id="negatives already gathered, labels offset by the rank",
        ),
    ],
)
def test_leaves_other_losses_alone(body: str) -> None:
    assert found(body) == []


def weighted(line: str, loss: str, weight: str, target: str) -> str:
    return f"{line} DDP319 " + RULES["DDP319"].message.format(loss=loss, weight=weight, target=target)


class ConvertReportsTest(CodemodTest):
    TRANSFORM = ScaleSummedLossesCommand

    def test_weighted_loss_is_reported_and_left_as_it_was(self) -> None:
        """Should warn at the loss and change nothing: no edit of the loss alone keeps the objective."""
        source = """
            import torch.nn as nn

            model = wrap_ddp(Net())
            criterion = nn.CrossEntropyLoss(weight=class_weights)
            for x, targets in loader:
                loss = criterion(model(x), targets)
                loss.backward()
        """
        self.assertCodemod(
            source, source, expected_warnings=[weighted("6:12:", "criterion(model(x), targets)", "class_weights", "targets")]
        )

    def test_weighted_loss_that_sums_is_scaled_not_reported(self) -> None:
        """Should scale a weighted summed loss like any summed one: its sum needs no weight total."""
        before = """
            import torch.nn as nn

            model = wrap_ddp(Net())
            criterion = nn.CrossEntropyLoss(weight=w, reduction="sum")
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
        """
        after = """
            import torch.nn as nn
            import torch.distributed as dist

            model = wrap_ddp(Net())
            criterion = nn.CrossEntropyLoss(weight=w, reduction="sum")
            for x, y in loader:
                loss = criterion(model(x), y)
                (loss * dist.get_world_size()).backward()
        """
        self.assertCodemod(before, after, expected_warnings=["7:5: DDP310 " + RULES["DDP310"].message.format(loss="loss")])


DDP_SCRIPT = """\
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
model = DDP(Net())
for x, y in loader:
    {loss}
    loss.backward()
"""


@pytest.mark.parametrize(
    ("loss", "codes"),
    [
        ("loss = F.cross_entropy(model(x), y, weight=w)", ["DDP515"]),
        ("loss = F.cross_entropy(model(x) @ y.T, torch.arange(len(x)))", ["DDP516"]),
        ("loss = F.cross_entropy(model(x), y)", []),
    ],
)
def test_check_reports_the_same_losses_in_a_ddp_script(loss: str, codes: list[str]) -> None:
    diagnostics = check_source(DDP_SCRIPT.format(loss=loss)).diagnostics
    assert [(d.line, d.code) for d in diagnostics if d.code in ("DDP515", "DDP516")] == [(10, c) for c in codes]
    assert all(d.severity == "warning" for d in diagnostics if d.code in codes)


def test_check_does_not_report_losses_in_a_script_without_ddp() -> None:
    """A single-process script has one batch per step: its weighted mean is the whole batch's."""
    source = DDP_SCRIPT.format(loss="loss = F.cross_entropy(model(x), y, weight=w)").replace("model = DDP(Net())", "model = Net()")
    assert not [d for d in check_source(source).diagnostics if d.code in ("DDP515", "DDP516")]
