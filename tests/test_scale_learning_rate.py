from __future__ import annotations

from dp2ddp.codemods.scale_learning_rate import ScaleLearningRateCommand
from libcst.codemod import CodemodTest

SCALED = (
    "each process keeps the batch (`--batch per-process`), so one step averages world_size times the samples, "
    "and the linear scaling rule scales the rate with it"
)
NOT_SCALED = (
    "DDP331 this optimizer's learning rate is not scaled, though each process keeps the batch (`--batch per-process`) "
    "and one step sees world_size times the samples: "
)


class ScaleLearningRateTest(CodemodTest):
    TRANSFORM = ScaleLearningRateCommand

    def test_keyword_and_positional_rates_are_scaled_by_the_world_size(self) -> None:
        """Should multiply each torch.optim optimizer's lr, however it is spelled, and keep the sum together."""
        before = """
            import torch
            from torch import optim
            from torch.optim import Adam as A
            from torch.utils.data import DataLoader

            def main(args):
                model = torch.nn.DataParallel(Net())
                opt = optim.SGD(model.parameters(), args.lr, momentum=0.9)
                head = A(model.head.parameters(), lr=args.lr + 0.1)
                train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)

            if __name__ == "__main__":
                main(parse())
        """
        after = """
            import torch
            from torch import optim
            from torch.optim import Adam as A
            from torch.utils.data import DataLoader
            import torch.distributed as dist

            def main(args):
                model = torch.nn.DataParallel(Net())
                opt = optim.SGD(model.parameters(), args.lr * dist.get_world_size(), momentum=0.9)
                head = A(model.head.parameters(), lr=(args.lr + 0.1) * dist.get_world_size())
                train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)

            if __name__ == "__main__":
                main(parse())
        """
        self.assertCodemod(
            before,
            after,
            batch="per-process",
            expected_warnings=[
                f"8:41: DDP330 learning rate `args.lr` -> `args.lr * dist.get_world_size()`: {SCALED}",
                f"9:42: DDP330 learning rate `args.lr + 0.1` -> `(args.lr + 0.1) * dist.get_world_size()`: {SCALED}",
            ],
        )

    def test_global_batch_leaves_the_rate_alone(self) -> None:
        """Should do nothing under --batch global: the global batch, and the rate tuned for it, are kept."""
        source = """
            import torch
            from torch.utils.data import DataLoader

            def main(args):
                model = torch.nn.DataParallel(Net())
                opt = torch.optim.SGD(model.parameters(), lr=args.lr)
                train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
                steps = len(train_set) // args.batch_size

            if __name__ == "__main__":
                main(parse())
        """
        self.assertCodemod(source, source, batch="global", expected_skip=True)

    def test_a_rate_scaled_before_is_not_scaled_again(self) -> None:
        """Should do nothing to a converted script: converting twice must not scale twice."""
        source = """
            import torch
            import torch.distributed as dist
            from torch.utils.data import DataLoader

            def main(args):
                model = wrap_ddp(Net())
                opt = torch.optim.SGD(model.parameters(), lr=args.lr * dist.get_world_size())
                train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
                steps = len(train_set) // (args.batch_size * dist.get_world_size())

            if __name__ == "__main__":
                main(parse())
        """
        self.assertCodemod(source, source, batch="per-process")

    def test_a_class_of_the_script_named_like_an_optimizer_is_not_scaled(self) -> None:
        """Should leave the script's own SGD alone: only torch.optim's optimizers take lr second."""
        source = """
            import torch
            from torch.utils.data import DataLoader

            class SGD:
                def __init__(self, params, lr): ...

            def main(args):
                model = torch.nn.DataParallel(Net())
                opt = SGD(model.parameters(), lr=args.lr)
                train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)

            if __name__ == "__main__":
                main(parse())
        """
        self.assertCodemod(source, source, batch="per-process")

    def test_rates_convert_cannot_find_are_reported_and_left(self) -> None:
        """Should warn, not guess, where no lr is given, groups set their own, or the arguments are unpacked."""
        before = """
            import torch
            from torch.utils.data import DataLoader

            def main(args, cfg):
                model = torch.nn.DataParallel(Net())
                a = torch.optim.Adam(model.parameters())
                b = torch.optim.SGD([{"params": model.head.parameters(), "lr": 0.1}, {"params": model.body.parameters()}], lr=0.01)
                c = torch.optim.SGD(model.parameters(), **cfg.optimizer)
                train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)

            if __name__ == "__main__":
                main(parse())
        """
        after = """
            import torch
            from torch.utils.data import DataLoader
            import torch.distributed as dist

            def main(args, cfg):
                model = torch.nn.DataParallel(Net())
                a = torch.optim.Adam(model.parameters())
                b = torch.optim.SGD([{"params": model.head.parameters(), "lr": 0.1}, {"params": model.body.parameters()}], lr=0.01 * dist.get_world_size())
                c = torch.optim.SGD(model.parameters(), **cfg.optimizer)
                train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)

            if __name__ == "__main__":
                main(parse())
        """
        self.assertCodemod(
            before,
            after,
            batch="per-process",
            expected_warnings=[
                f"6:9: {NOT_SCALED}no `lr` is given, so the optimizer's default applies; pass the optimizer's "
                "default rate as `lr=<default> * dist.get_world_size()`",
                f"7:26: {NOT_SCALED}a parameter group sets its own `lr`; multiply each group's `lr` by "
                "`dist.get_world_size()` too",
                f"7:115: DDP330 learning rate `0.01` -> `0.01 * dist.get_world_size()`: {SCALED}",
                f"8:9: {NOT_SCALED}its arguments come from `**cfg.optimizer`; pass `lr=` by keyword, multiplied by "
                "`dist.get_world_size()`",
            ],
        )

    def test_an_optimizer_built_at_import_is_reported(self) -> None:
        """Should not call get_world_size() at module level of a script set up in its __main__ block."""
        source = """
            import torch
            from torch.utils.data import DataLoader

            scale = torch.ones(1, requires_grad=True)
            opt = torch.optim.SGD([scale], lr=0.1)

            def main(args):
                model = torch.nn.DataParallel(Net())
                train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)

            if __name__ == "__main__":
                main(parse())
        """
        self.assertCodemod(
            source,
            source,
            batch="per-process",
            expected_warnings=[
                f"5:7: {NOT_SCALED}the optimizer is built before the process group exists; build the optimizer "
                "where the process group exists (in the function the entry point calls), then scale it"
            ],
        )

    def test_one_cycle_bounds_are_reported(self) -> None:
        """Should name OneCycleLR's max_lr: the scheduler overwrites the scaled rate from it every step."""
        before = """
            import torch
            from torch.optim.lr_scheduler import OneCycleLR
            from torch.utils.data import DataLoader

            def main(args):
                model = torch.nn.DataParallel(Net())
                opt = torch.optim.SGD(model.parameters(), lr=0.1)
                sched = OneCycleLR(opt, max_lr=0.1, total_steps=100)
                train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)

            if __name__ == "__main__":
                main(parse())
        """
        after = before.replace("lr=0.1)", "lr=0.1 * dist.get_world_size())").replace(
            "from torch.utils.data import DataLoader\n", "from torch.utils.data import DataLoader\n            import torch.distributed as dist\n"
        )
        self.assertCodemod(
            before,
            after,
            batch="per-process",
            expected_warnings=[
                f"7:50: DDP330 learning rate `0.1` -> `0.1 * dist.get_world_size()`: {SCALED}",
                "8:36: DDP332 `OneCycleLR` sets the learning rate itself from `max_lr=0.1`, which the optimizer's "
                "scaled rate does not reach: write `max_lr=0.1 * dist.get_world_size()` to follow the linear scaling rule",
            ],
        )

    def test_steps_per_epoch_from_the_dataset_count_global_batches(self) -> None:
        """Should divide len(dataset) // batch by the world size too, leave len(loader), and report other counts."""
        before = """
            import math
            import torch
            from torch.utils.data import DataLoader

            def main(args):
                model = torch.nn.DataParallel(Net())
                train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
                total_steps = len(train_set) // args.batch_size * args.epochs
                per_epoch = math.ceil(len(train_loader.dataset) / args.batch_size)
                loader_steps = len(train_loader)
                guessed = args.num_train // args.batch_size
                mean = total_loss / args.batch_size

            if __name__ == "__main__":
                main(parse())
        """
        after = """
            import math
            import torch
            from torch.utils.data import DataLoader
            import torch.distributed as dist

            def main(args):
                model = torch.nn.DataParallel(Net())
                train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
                total_steps = len(train_set) // (args.batch_size * dist.get_world_size()) * args.epochs
                per_epoch = math.ceil(len(train_loader.dataset) / (args.batch_size * dist.get_world_size()))
                loader_steps = len(train_loader)
                guessed = args.num_train // args.batch_size
                mean = total_loss / args.batch_size

            if __name__ == "__main__":
                main(parse())
        """
        tail = "since each process keeps the batch (`--batch per-process`) and one step takes world_size of them"
        self.assertCodemod(
            before,
            after,
            batch="per-process",
            expected_warnings=[
                "8:19: DDP333 steps per epoch counted in global batches: `len(train_set) // args.batch_size` -> "
                f"`len(train_set) // (args.batch_size * dist.get_world_size())`, {tail}",
                "9:27: DDP333 steps per epoch counted in global batches: `len(train_loader.dataset) / args.batch_size` "
                f"-> `len(train_loader.dataset) / (args.batch_size * dist.get_world_size())`, {tail}",
                "11:15: DDP334 `args.num_train // args.batch_size` divides by the training loader's batch "
                "`args.batch_size`, but convert cannot tell that it counts the loader's samples; each process keeps that "
                "batch (`--batch per-process`), so one step takes world_size batches: if it counts steps, divide by "
                "`(args.batch_size * dist.get_world_size())`, or use `len(loader)`",
            ],
        )


KEPT_BY_THE_SAMPLER_CODEMOD = '''import torch
from torch.utils.data import DataLoader, Sampler


class GroupSampler(Sampler):
    def __init__(self, n, batch_size=1):
        self.n, self.batch_size = n, batch_size


def main(args):
    model = torch.nn.DataParallel(Net())
    sampler = GroupSampler(args.train_size, args.batch_size)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    steps = len(train_set) // args.batch_size
    sized = args.train_size // args.batch_size
    it = iter(train_loader)
    for step in range(steps):
        x, y = next(it)
        model(x, y).backward()


if __name__ == "__main__":
    main(parse())
'''


def test_steps_of_a_loader_the_sampler_codemod_keeps_per_process_count_global_batches() -> None:
    """Under --batch global, a batch that also sizes a step (DDP312) is kept per process: its epochs are shorter too.

    `for step in range(steps): next(it)` would otherwise run past the end of each process's share.
    """
    from dp2ddp.api import convert_source

    result = convert_source(KEPT_BY_THE_SAMPLER_CODEMOD)
    assert "steps = len(train_set) // (args.batch_size * dist.get_world_size())" in result.output
    # A sample count the loader's sampler is built with counts the loader's samples too.
    assert "sized = args.train_size // (args.batch_size * dist.get_world_size())" in result.output
    kept = "since each process keeps the batch (`args.batch_size` also sizes something per step)"
    assert [kept in f.message for f in result.findings if f.code == "DDP333"] == [True, True]
    # The rate is the user's call under --batch global, as DDP308 says; the optimizer is left alone.
    assert "lr=args.lr)" in result.output and not [f for f in result.findings if f.code in ("DDP330", "DDP331")]


def test_steps_of_a_divided_batch_are_left_alone_under_the_global_batch() -> None:
    """Should not touch steps per epoch where the loader's batch is divided: the global batch, and the steps, stay."""
    from dp2ddp.api import convert_source

    source = KEPT_BY_THE_SAMPLER_CODEMOD.replace("GroupSampler(args.train_size, args.batch_size)", "GroupSampler(args.train_size)")
    result = convert_source(source)
    assert "batch_size=args.batch_size // dist.get_world_size()" in result.output
    assert "steps = len(train_set) // args.batch_size\n" in result.output
    assert not [f for f in result.findings if f.code in ("DDP333", "DDP334")]
