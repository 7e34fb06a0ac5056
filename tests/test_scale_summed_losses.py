from __future__ import annotations

from dp2ddp.codemods.scale_summed_losses import ScaleSummedLossesCommand
from libcst.codemod import CodemodTest

from dp2ddp.rules import RULES


def scaled(line: str, loss: str) -> str:
    return f"{line} DDP310 " + RULES["DDP310"].message.format(loss=loss)


class ScaleSummedLossesTest(CodemodTest):
    TRANSFORM = ScaleSummedLossesCommand

    def test_criterion_object_that_sums(self) -> None:
        """Should back-propagate loss * world_size, since DDP averages the per-process sums."""
        before = """
            import torch.nn as nn

            model = wrap_ddp(Net())
            criterion = nn.MSELoss(reduction="sum")
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                print(loss.item())
        """
        after = """
            import torch.nn as nn
            import torch.distributed as dist

            model = wrap_ddp(Net())
            criterion = nn.MSELoss(reduction="sum")
            for x, y in loader:
                loss = criterion(model(x), y)
                (loss * dist.get_world_size()).backward()
                print(loss.item())
        """
        self.assertCodemod(before, after, expected_warnings=[scaled("7:5:", "loss")])

    def test_world_size_in_a_function_that_binds_dist_itself(self) -> None:
        """Should spell torch.distributed in full in a function whose own `dist` is a distance, not the module."""
        before = """
            import torch.nn as nn

            model = wrap_ddp(Net())
            criterion = nn.MSELoss(reduction="sum")

            def step(x, y, dist):
                loss = criterion(model(x), y)
                loss.backward()
                return loss.item() < dist
        """
        after = """
            import torch.nn as nn
            import torch.distributed

            model = wrap_ddp(Net())
            criterion = nn.MSELoss(reduction="sum")

            def step(x, y, dist):
                loss = criterion(model(x), y)
                (loss * torch.distributed.get_world_size()).backward()
                return loss.item() < dist
        """
        self.assertCodemod(before, after, expected_warnings=[scaled("8:5:", "loss")])

    def test_functional_sum_and_old_size_average(self) -> None:
        """Should scale a functional loss that sums, spelled either way, backward called on the call itself."""
        before = """
            import torch.nn.functional as F
            import torch.distributed as dist

            model = wrap_ddp(Net())
            F.l1_loss(model(x), y, reduction='sum').backward()
            F.mse_loss(model(x), y, size_average=False).backward()
        """
        after = """
            import torch.nn.functional as F
            import torch.distributed as dist

            model = wrap_ddp(Net())
            (F.l1_loss(model(x), y, reduction='sum') * dist.get_world_size()).backward()
            (F.mse_loss(model(x), y, size_average=False) * dist.get_world_size()).backward()
        """
        self.assertCodemod(
            before,
            after,
            expected_warnings=[
                scaled("5:1:", "F.l1_loss(model(x), y, reduction='sum')"),
                scaled("6:1:", "F.mse_loss(model(x), y, size_average=False)"),
            ],
        )

    def test_amp_scaler(self) -> None:
        """Should scale the loss inside scaler.scale(), leaving the AMP call as it is."""
        before = """
            import torch

            model = wrap_ddp(Net())
            criterion = torch.nn.CrossEntropyLoss(reduction="sum")

            def train(loader):
                for x, y in loader:
                    loss = criterion(model(x), y)
                    scaler.scale(loss).backward()
        """
        after = """
            import torch
            import torch.distributed as dist

            model = wrap_ddp(Net())
            criterion = torch.nn.CrossEntropyLoss(reduction="sum")

            def train(loader):
                for x, y in loader:
                    loss = criterion(model(x), y)
                    scaler.scale(loss * dist.get_world_size()).backward()
        """
        self.assertCodemod(before, after, expected_warnings=[scaled("9:9:", "loss")])

    def test_mean_losses_are_left_alone(self) -> None:
        """Should do nothing, since DDP's averaged gradient of a mean loss is DataParallel's."""
        before = """
            import torch.nn as nn

            model = wrap_ddp(Net())
            criterion = nn.CrossEntropyLoss()
            loss = criterion(model(x), y)
            loss.backward()
            nn.functional.mse_loss(model(x), y, reduction="mean").backward()
        """
        self.assertCodemod(before, before, expected_warnings=[])

    def test_sum_in_another_function_does_not_leak(self) -> None:
        """Should scale only where the name that back-propagates was bound to a summed loss."""
        before = """
            import torch.nn.functional as F

            model = wrap_ddp(Net())

            def evaluate_loss(x, y):
                loss = F.nll_loss(model(x), y, reduction="sum")
                return loss

            def train(x, y):
                loss = F.nll_loss(model(x), y)
                loss.backward()
        """
        self.assertCodemod(before, before, expected_warnings=[])

    def test_already_scaled_is_stable(self) -> None:
        """Should do nothing the second time, since the loss already carries the world size."""
        before = """
            import torch.nn as nn
            import torch.distributed as dist

            model = wrap_ddp(Net())
            criterion = nn.MSELoss(reduction="sum")
            loss = criterion(model(x), y)
            (loss * dist.get_world_size()).backward()
        """
        self.assertCodemod(before, before, expected_warnings=[])
