from __future__ import annotations

import pytest
from dp2ddp.codemods.add_distributed_sampler import AddDistributedSamplerCommand
from libcst.codemod import CodemodTest


class AddDistributedSamplerTest(CodemodTest):
    TRANSFORM = AddDistributedSamplerCommand

    def test_training_loader_gets_sampler_batch_split_and_set_epoch(self) -> None:
        """Should shard the loader, keep the global batch, and reshuffle every epoch."""
        before = """
            import torch
            from torch.utils.data import DataLoader

            model = wrap_ddp(model)
            train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, num_workers=4)
            for epoch in range(args.epochs):
                for x, y in train_loader:
                    loss = model(x).sum()
                    loss.backward()
        """
        after = """
            import torch
            from torch.utils.data import DataLoader
            import torch.distributed as dist
            from torch.utils.data.distributed import DistributedSampler

            model = wrap_ddp(model)
            train_loader = DataLoader(train_set, batch_size=args.batch_size // dist.get_world_size(), sampler=DistributedSampler(train_set, shuffle=True), num_workers=4, generator=torch.Generator().manual_seed((torch.initial_seed() + dist.get_rank()) % 2**63))
            for epoch in range(args.epochs):
                train_loader.sampler.set_epoch(epoch)
                for x, y in train_loader:
                    loss = model(x).sum()
                    loss.backward()
        """
        self.assertCodemod(
            before,
            after,
            expected_warnings=[
                "5:49: DDP307 global batch `args.batch_size` -> `args.batch_size` (kept): each of the world_size processes "
                "loads `args.batch_size // world_size`; the global batch changes unless it divides by the number of processes"
            ],
        )

    def test_set_epoch_reaches_the_loop_in_another_function(self) -> None:
        """Should put set_epoch in the top-level epoch loop that calls train(epoch)."""
        before = """
            import torch

            model = torch.nn.DataParallel(model)
            trainloader = torch.utils.data.DataLoader(trainset, 64, True)

            def train(epoch):
                for inputs, targets in trainloader:
                    pass

            for epoch in range(start_epoch, start_epoch + 200):
                train(epoch)
        """
        after = """
            import torch
            import torch.distributed as dist
            from torch.utils.data.distributed import DistributedSampler

            model = torch.nn.DataParallel(model)
            trainloader = torch.utils.data.DataLoader(trainset, batch_size=64 // dist.get_world_size(), sampler=DistributedSampler(trainset, shuffle=True))

            def train(epoch):
                for inputs, targets in trainloader:
                    pass

            for epoch in range(start_epoch, start_epoch + 200):
                trainloader.sampler.set_epoch(epoch)
                train(epoch)
        """
        self.assertCodemod(
            before,
            after,
            expected_warnings=[
                "4:53: DDP307 global batch `64` -> `64` (kept): each of the world_size processes loads `64 // world_size`; "
                "64 divides by 2, 4, 8 processes"
            ],
        )

    def test_dataset_built_inline_is_bound_once(self) -> None:
        """Should bind an inline dataset to a name, since the sampler needs it too."""
        before = """
            from torch.utils.data import DataLoader

            model = wrap_ddp(model)
            loader = DataLoader(dataset=Squares(100), batch_size=10, shuffle=False)
        """
        after = """
            from torch.utils.data import DataLoader
            import torch.distributed as dist
            from torch.utils.data.distributed import DistributedSampler

            model = wrap_ddp(model)
            dataset = Squares(100)
            loader = DataLoader(dataset=dataset, batch_size=10 // dist.get_world_size(), sampler=DistributedSampler(dataset, shuffle=False))
        """
        self.assertCodemod(
            before,
            after,
            expected_warnings=[
                "4:54: DDP309 global batch 10 does not divide by 4, 8 processes: each process loads "
                "`10 // world_size` and the global batch shrinks there; pick a multiple of the process count",
                "4:54: DDP307 global batch `10` -> `10` (kept): each of the world_size processes loads `10 // world_size`; "
                "10 does not divide by 4, 8 processes, where the global batch shrinks",
            ],
        )

    def test_keep_per_process_batch(self) -> None:
        """Should keep batch_size as it is and say the effective batch grows."""
        before = """
            from torch.utils.data import DataLoader

            model = wrap_ddp(model)
            train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
            for epoch in range(2):
                for batch in train_loader:
                    pass
        """
        after = """
            from torch.utils.data import DataLoader
            from torch.utils.data.distributed import DistributedSampler

            model = wrap_ddp(model)
            train_loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set, shuffle=True))
            for epoch in range(2):
                train_loader.sampler.set_epoch(epoch)
                for batch in train_loader:
                    pass
        """
        self.assertCodemod(
            before,
            after,
            keep_per_process_batch=True,
            expected_warnings=[
                "4:16: DDP308 global batch `32` -> `32 * world_size`: each process loads `32` (`--batch per-process`); "
                "the optimizers' learning rates are scaled by world_size (DDP330; DDP331 where convert could not)",
            ],
        )

    def test_evaluation_loader_is_left_alone(self) -> None:
        """Should do nothing to a validation loader: every process evaluates all of it."""
        before = """
            from torch.utils.data import DataLoader

            model = wrap_ddp(model)
            val_loader = DataLoader(val_set, batch_size=100, shuffle=False)
            test_loader = DataLoader(test_set, batch_size=100)
        """
        self.assertCodemod(before, before, expected_warnings=[])

    def test_an_iterable_dataset_is_reported(self) -> None:
        """Should leave a loader over a stream alone, and say why: it takes no sampler."""
        before = """
            import torch
            from torch.utils.data import DataLoader, IterableDataset

            class Stream(IterableDataset):
                pass

            model = wrap_ddp(model)
            train_c = DataLoader(Stream(), batch_size=8)
        """
        self.assertCodemod(
            before,
            before,
            expected_warnings=[
                "8:11: DDP302 training DataLoader over an IterableDataset, which takes no sampler, so convert "
                "cannot split it and every process would train on the same stream; the file is left as it was: "
                "make the dataset's `__iter__` yield only this process's share (every `dist.get_world_size()`-th "
                "item, from `dist.get_rank()`), then convert again",
            ],
        )

    def test_no_loader_in_the_file_and_no_training_loop_says_nothing(self) -> None:
        """Should not guess about data a file never touches (no finding at 1:1)."""
        before = """
            model = wrap_ddp(model)
        """
        self.assertCodemod(before, before, expected_warnings=[])

    def test_converted_loader_is_stable(self) -> None:
        """Should do nothing to a loader that already has its DistributedSampler."""
        before = """
            import torch
            from torch.utils.data import DataLoader
            import torch.distributed as dist
            from torch.utils.data.distributed import DistributedSampler

            model = wrap_ddp(model)
            train_loader = DataLoader(train_set, batch_size=8 // dist.get_world_size(), sampler=DistributedSampler(train_set, shuffle=True))
            for epoch in range(3):
                train_loader.sampler.set_epoch(epoch)
                for batch in train_loader:
                    pass
        """
        self.assertCodemod(before, before, expected_warnings=[])

    def test_script_without_ddp_is_skipped(self) -> None:
        """Should do nothing, since no model is wrapped for DDP."""
        before = """
            from torch.utils.data import DataLoader

            train_loader = DataLoader(train_set, batch_size=8, shuffle=True)
        """
        self.assertCodemod(before, before, expected_skip=True)

    def test_dist_name_taken_uses_the_full_module_name(self) -> None:
        """Should not clash with a script's own `dist` variable."""
        before = """
            from torch.utils.data import DataLoader

            dist = 3.0
            model = wrap_ddp(model)
            train_loader = DataLoader(train_set, batch_size=8, shuffle=True)
            for epoch in range(2):
                for batch in train_loader:
                    pass
        """
        after = """
            from torch.utils.data import DataLoader
            import torch.distributed
            from torch.utils.data.distributed import DistributedSampler

            dist = 3.0
            model = wrap_ddp(model)
            train_loader = DataLoader(train_set, batch_size=8 // torch.distributed.get_world_size(), sampler=DistributedSampler(train_set, shuffle=True))
            for epoch in range(2):
                train_loader.sampler.set_epoch(epoch)
                for batch in train_loader:
                    pass
        """
        self.assertCodemod(before, after)

    def test_dist_imported_later_in_the_same_function_is_not_read_before_it(self) -> None:
        """Should spell torch.distributed in full where the function imports `dist` itself after the loader.

        A function-local `import torch.distributed as dist` makes `dist` local in the whole
        function: a `dist.get_world_size()` before that import raises UnboundLocalError.
        """
        before = """
            from torch.utils.data import DataLoader

            def main():
                train_loader = DataLoader(train_set, batch_size=8, shuffle=True)
                import torch.distributed as dist
                model = wrap_ddp(model)
                for epoch in range(2):
                    for batch in train_loader:
                        pass
        """
        after = """
            from torch.utils.data import DataLoader
            import torch.distributed
            from torch.utils.data.distributed import DistributedSampler

            def main():
                train_loader = DataLoader(train_set, batch_size=8 // torch.distributed.get_world_size(), sampler=DistributedSampler(train_set, shuffle=True))
                import torch.distributed as dist
                model = wrap_ddp(model)
                for epoch in range(2):
                    train_loader.sampler.set_epoch(epoch)
                    for batch in train_loader:
                        pass
        """
        self.assertCodemod(before, after)

    def test_parameter_named_dist_keeps_its_meaning_in_its_function_only(self) -> None:
        """Should not read a `dist` parameter as torch.distributed, while code elsewhere still spells `dist`."""
        before = """
            from torch.utils.data import DataLoader

            def train(model, dist):
                train_loader = DataLoader(train_set, batch_size=8, shuffle=True)
                for epoch in range(2):
                    for batch in train_loader:
                        pass

            model = wrap_ddp(model)
            warmup_loader = DataLoader(train_set, batch_size=8, shuffle=True)
            for batch in warmup_loader:
                pass
            train(model, dist=1.0)
        """
        after = """
            from torch.utils.data import DataLoader
            import torch.distributed
            import torch.distributed as dist
            from torch.utils.data.distributed import DistributedSampler

            def train(model, dist):
                train_loader = DataLoader(train_set, batch_size=8 // torch.distributed.get_world_size(), sampler=DistributedSampler(train_set, shuffle=True))
                for epoch in range(2):
                    train_loader.sampler.set_epoch(epoch)
                    for batch in train_loader:
                        pass

            model = wrap_ddp(model)
            warmup_loader = DataLoader(train_set, batch_size=8 // dist.get_world_size(), sampler=DistributedSampler(train_set, shuffle=True))
            for batch in warmup_loader:
                pass
            train(model, dist=1.0)
        """
        self.assertCodemod(before, after)

    def test_dist_bound_in_a_nested_function_leaves_the_outer_one_alone(self) -> None:
        """Should keep `dist` in the outer function, since only the nested function binds the name."""
        before = """
            from torch.utils.data import DataLoader

            def main():
                def distance(dist):
                    return dist * 2
                train_loader = DataLoader(train_set, batch_size=8, shuffle=True)
                model = wrap_ddp(model)
                for epoch in range(2):
                    for batch in train_loader:
                        pass
        """
        after = """
            from torch.utils.data import DataLoader
            import torch.distributed as dist
            from torch.utils.data.distributed import DistributedSampler

            def main():
                def distance(dist):
                    return dist * 2
                train_loader = DataLoader(train_set, batch_size=8 // dist.get_world_size(), sampler=DistributedSampler(train_set, shuffle=True))
                model = wrap_ddp(model)
                for epoch in range(2):
                    train_loader.sampler.set_epoch(epoch)
                    for batch in train_loader:
                        pass
        """
        self.assertCodemod(before, after)

    def test_dist_and_torch_both_bound_locally_get_an_alias_of_their_own(self) -> None:
        """Should import torch.distributed under a name nothing in the file uses when `dist` and `torch` are both local."""
        before = """
            from torch.utils.data import DataLoader

            def main(dist):
                train_loader = DataLoader(train_set, batch_size=8, shuffle=True)
                import torch
                model = wrap_ddp(model)
                for epoch in range(2):
                    for batch in train_loader:
                        pass
        """
        after = """
            from torch.utils.data import DataLoader
            import torch.distributed as torch_distributed
            from torch.utils.data.distributed import DistributedSampler

            def main(dist):
                train_loader = DataLoader(train_set, batch_size=8 // torch_distributed.get_world_size(), sampler=DistributedSampler(train_set, shuffle=True))
                import torch
                model = wrap_ddp(model)
                for epoch in range(2):
                    train_loader.sampler.set_epoch(epoch)
                    for batch in train_loader:
                        pass
        """
        self.assertCodemod(before, after)

    def test_default_batch_of_one_stays_per_process(self) -> None:
        """Should not divide DataLoader's default batch of 1 down to 0."""
        before = """
            from torch.utils.data import DataLoader

            model = wrap_ddp(model)
            train_loader = DataLoader(train_set, shuffle=True)
            for epoch in range(2):
                for batch in train_loader:
                    pass
        """
        after = """
            from torch.utils.data import DataLoader
            from torch.utils.data.distributed import DistributedSampler

            model = wrap_ddp(model)
            train_loader = DataLoader(train_set, sampler=DistributedSampler(train_set, shuffle=True))
            for epoch in range(2):
                train_loader.sampler.set_epoch(epoch)
                for batch in train_loader:
                    pass
        """
        self.assertCodemod(
            before,
            after,
            expected_warnings=[
                "4:16: DDP308 global batch `1` -> `1 * world_size`: each process loads `1` (a batch of 1 cannot be divided: "
                "`1 // world_size` is 0); scale the learning rate to match",
            ],
        )


def test_a_module_level_batch_literal_is_resolved_and_a_batch_of_one_is_never_divided() -> None:
    """`batch_size = 1` at module level would become `1 // world_size == 0`, which DataLoader refuses."""
    from textwrap import dedent

    from dp2ddp.api import convert_source

    result = convert_source(dedent(
        """
        import torch
        from torch.utils.data import DataLoader

        batch_size = 1
        BATCH = 10
        model = torch.nn.DataParallel(Net())
        loader = DataLoader(ds, batch_size=batch_size, shuffle=True)
        other = DataLoader(ds2, batch_size=BATCH, shuffle=True)
        val_loader = DataLoader(val, batch_size=batch_size)
        """
    ))  # fmt: skip
    assert "DataLoader(ds, batch_size=batch_size, sampler=" in result.output
    # No loop of the file evaluates it, so whether its results would be gathered is unknown: it stays whole.
    assert "val_loader = DataLoader(val, batch_size=batch_size)\n" in result.output
    assert "DataLoader(ds2, batch_size=BATCH // dist.get_world_size(), sampler=" in result.output
    codes = {f"{f.line}:{f.code}" for f in result.findings}
    assert {"8:DDP308", "9:DDP309"} <= codes


@pytest.mark.parametrize(
    ("binding", "converted"),
    [
        pytest.param("train_sampler = None", True, id="a sampler name only ever bound to None is no sampler"),
        pytest.param(
            "train_sampler = None\n    if args.weighted:\n        train_sampler = WeightedRandomSampler(w, len(w))",
            False,
            id="a name that may hold a real sampler or None is split, with the loader's own order for None",
        ),
    ],
)
def test_a_placeholder_sampler_gives_way_to_the_distributed_sampler(binding: str, converted: bool) -> None:
    from dp2ddp.api import convert_source

    source = f"""import torch
from torch.utils.data import DataLoader


def main(args):
    model = torch.nn.DataParallel(Net())
    {binding}
    loader = DataLoader(ds, batch_size=args.batch_size, shuffle=(train_sampler is None), sampler=train_sampler)
    for epoch in range(2):
        for x, y in loader:
            model(x).sum().backward()
"""
    result = convert_source(source)
    assert ("sampler=DistributedSampler(ds, shuffle=True))" in result.output) is converted
    either = "sampler=ShardedSampler(train_sampler if train_sampler is not None else RandomSampler(ds), batch_size=args.batch_size))"
    assert (either in result.output) is not converted
    assert not any(f.severity == "error" for f in result.findings)


@pytest.mark.parametrize(
    ("loop", "line"),
    [
        pytest.param(
            "batches = corpus.get_iterator('train', 32)\n    for x, y in batches:", 8, id="an iterator bound in the function"
        ),
        pytest.param("while step < 100:\n        x, y = get_batch('train')", 9, id="a get_batch() in a while loop"),
        pytest.param("for x, y in load_data(args):", 8, id="a loader of another file"),
    ],
)
def test_training_data_from_no_loader_of_the_file_is_reported_where_it_comes_from(loop: str, line: int) -> None:
    from dp2ddp.api import convert_source

    source = f"""import torch
from torch.utils.data import DataLoader


def main(args):
    model = torch.nn.DataParallel(Net())
    val_loader = DataLoader(val_set, batch_size=8)
    {loop}
        loss = model(x, y)
        loss.backward()
"""
    result = convert_source(source)
    assert [(f.line, f.code) for f in result.findings if f.code in ("DDP306", "DDP317")] == [(line, "DDP317")]


def test_training_data_from_a_loader_passed_into_a_function_is_not_reported() -> None:
    from dp2ddp.api import convert_source

    source = """import torch
from torch.utils.data import DataLoader


def train_epoch(model, batches):
    for x, y in batches:
        model(x, y).backward()


def main(args):
    model = torch.nn.DataParallel(Net())
    train_loader = DataLoader(train_set, batch_size=8, shuffle=True)
    for epoch in range(3):
        train_epoch(model, train_loader)
"""
    result = convert_source(source)
    assert not [f for f in result.findings if f.code in ("DDP322", "DDP306", "DDP317")]


def test_training_data_from_a_loader_built_into_the_call_is_not_reported() -> None:
    """Should not say the batches come from elsewhere when the DataLoader is built in the argument list."""
    from dp2ddp.api import convert_source

    source = """import torch
from torch.utils.data import DataLoader


def train(model, loader):
    for x, y in loader:
        model(x, y).backward()


if __name__ == "__main__":
    model = torch.nn.DataParallel(Net())
    train(model, DataLoader(ds, batch_size=8, shuffle=True))
"""
    result = convert_source(source)
    assert "sampler=DistributedSampler(ds, shuffle=True)" in result.output
    assert not [f for f in result.findings if f.code in ("DDP306", "DDP317")]


def test_one_pass_over_the_data_needs_no_epoch_loop() -> None:
    from dp2ddp.api import convert_source

    source = """import torch
from torch.utils.data import DataLoader


def train(model, loader):
    for x, y in loader:
        model(x, y).backward()


def main():
    model = torch.nn.DataParallel(Net())
    loader = DataLoader(ds, batch_size=8, shuffle=True)
    train(model, loader)


if __name__ == "__main__":
    main()
"""
    result = convert_source(source)
    assert "sampler=DistributedSampler(ds, shuffle=True)" in result.output
    assert not [f for f in result.findings if f.code == "DDP322"]


def test_a_while_loop_that_counts_iterations_advances_the_epoch_each_pass() -> None:
    from dp2ddp.api import convert_source

    source = """import torch
from torch.utils.data import DataLoader


def main(cfg):
    model = torch.nn.DataParallel(Net())
    loader = DataLoader(ds, batch_size=8, shuffle=True)
    i = 0
    while i < cfg.iterations:
        for x, y in loader:
            i += 1
            model(x, y).backward()
"""
    result = convert_source(source)
    assert "    while i < cfg.iterations:\n        loader.sampler.set_epoch(loader.sampler.epoch + 1)\n" in result.output
    assert [(f.line, f.code) for f in result.findings if f.code in ("DDP322", "DDP315")] == [(9, "DDP315")]


@pytest.mark.parametrize(
    ("line", "reported"),
    [
        pytest.param("args.batch_size *= torch.cuda.device_count()", True, id="batch times device_count()"),
        pytest.param("args.workers *= n_gpu", True, id="workers times n_gpu"),
        pytest.param("train_batch_size = args.per_gpu_batch * max(1, args.n_gpu)", True, id="per-GPU batch times max(1, n_gpu)"),
        pytest.param("batch = 32 * len(args.gpu_ids)", True, id="batch times the length of a GPU list"),
        pytest.param("args.batch_size *= 2", False, id="a constant"),
        pytest.param("args.lr *= n_gpu", False, id="a learning rate"),
    ],
)
def test_scaling_by_the_gpu_count_is_reported(line: str, reported: bool) -> None:
    from dp2ddp.api import convert_source

    source = f"""import torch
from torch.utils.data import DataLoader


def main(args, n_gpu):
    {line}
    model = torch.nn.DataParallel(Net())
    loader = DataLoader(ds, batch_size=args.batch_size, shuffle=True)
"""
    result = convert_source(source)
    assert any(f.code == "DDP318" and f.line == 6 for f in result.findings) is reported


def test_a_loader_built_on_both_branches_of_an_if_gets_one_set_epoch() -> None:
    from dp2ddp.api import convert_source

    source = """import torch
from torch.utils.data import DataLoader


def main(args):
    model = torch.nn.DataParallel(Net())
    if args.augment:
        train_loader = DataLoader(augmented, batch_size=8, shuffle=True)
    else:
        train_loader = DataLoader(plain, batch_size=8, shuffle=True)
    for epoch in range(3):
        for x, y in train_loader:
            model(x, y).backward()
"""
    result = convert_source(source)
    assert result.output.count("train_loader.sampler.set_epoch(epoch)") == 1
    assert result.output.count("sampler=DistributedSampler(") == 2


class NoSamplerSpellingsTest(CodemodTest):
    TRANSFORM = AddDistributedSamplerCommand

    def test_sampler_none_by_keyword_gives_way_to_the_distributed_sampler(self) -> None:
        """Should treat `sampler=None` as no sampler at all: shard the loader and drop the None."""
        before = """
            from torch.utils.data import DataLoader

            model = wrap_ddp(model)
            loader = DataLoader(data, batch_size=8, shuffle=True, sampler=None)
            for epoch in range(2):
                for x in loader:
                    model(x).sum().backward()
        """
        after = """
            from torch.utils.data import DataLoader
            import torch.distributed as dist
            from torch.utils.data.distributed import DistributedSampler

            model = wrap_ddp(model)
            loader = DataLoader(data, batch_size=8 // dist.get_world_size(), sampler=DistributedSampler(data, shuffle=True))
            for epoch in range(2):
                loader.sampler.set_epoch(epoch)
                for x in loader:
                    model(x).sum().backward()
        """
        self.assertCodemod(before, after, expected_warnings=["4:38: DDP307 global batch `8` -> `8` (kept): each of the world_size processes loads `8 // world_size`; 8 divides by 2, 4, 8 processes"])

    def test_sampler_none_by_position_gives_way_to_the_distributed_sampler(self) -> None:
        """Should read `DataLoader(data, 8, True, None)` as no sampler, not as a fourth argument it cannot place."""
        before = """
            from torch.utils.data import DataLoader

            model = wrap_ddp(model)
            loader = DataLoader(data, 8, True, None)
            for epoch in range(2):
                for x in loader:
                    model(x).sum().backward()
        """
        after = """
            from torch.utils.data import DataLoader
            import torch.distributed as dist
            from torch.utils.data.distributed import DistributedSampler

            model = wrap_ddp(model)
            loader = DataLoader(data, batch_size=8 // dist.get_world_size(), sampler=DistributedSampler(data, shuffle=True))
            for epoch in range(2):
                loader.sampler.set_epoch(epoch)
                for x in loader:
                    model(x).sum().backward()
        """
        self.assertCodemod(before, after, expected_warnings=["4:27: DDP307 global batch `8` -> `8` (kept): each of the world_size processes loads `8 // world_size`; 8 divides by 2, 4, 8 processes"])

    def test_one_line_epoch_loop_becomes_a_block_for_set_epoch(self) -> None:
        """Should turn `for epoch in range(2): train(...)` into a block that calls set_epoch first."""
        before = """
            from torch.utils.data import DataLoader

            model = wrap_ddp(model)
            loader = DataLoader(data, batch_size=8, shuffle=True)

            def train():
                for x in loader:
                    model(x).sum().backward()

            for epoch in range(2): train()
        """
        after = """
            from torch.utils.data import DataLoader
            import torch.distributed as dist
            from torch.utils.data.distributed import DistributedSampler

            model = wrap_ddp(model)
            loader = DataLoader(data, batch_size=8 // dist.get_world_size(), sampler=DistributedSampler(data, shuffle=True))

            def train():
                for x in loader:
                    model(x).sum().backward()

            for epoch in range(2):
                loader.sampler.set_epoch(epoch)
                train()
        """
        self.assertCodemod(before, after, expected_warnings=["4:38: DDP307 global batch `8` -> `8` (kept): each of the world_size processes loads `8 // world_size`; 8 divides by 2, 4, 8 processes"])


def test_a_noise_batch_drawn_with_the_loaders_batch_keeps_the_batch_per_process() -> None:
    """`z = zdist.sample((batch_size,))` beside the loader's batch: split in the loader alone, the two no longer match."""
    from dp2ddp.api import convert_source

    source = """\
import torch
from torch.utils.data import DataLoader

batch_size = 64


def main():
    loader = DataLoader(data, batch_size=batch_size, shuffle=True)
    model = torch.nn.DataParallel(generator)
    for epoch in range(2):
        for x, y in loader:
            z = zdist.sample((batch_size,))
            loss = model(z, y).mean()
            loss.backward()


if __name__ == "__main__":
    main()
"""
    result = convert_source(source)
    assert "DataLoader(data, batch_size=batch_size, sampler=DistributedSampler(data, shuffle=True))" in result.output
    assert "DDP312" in {f.code for f in result.findings}


class GpuCountScalingTest(CodemodTest):
    TRANSFORM = AddDistributedSamplerCommand

    def test_a_gpu_count_that_scales_the_loaders_batch_becomes_the_world_size(self) -> None:
        """Should scale by the world size where the batch reaches the loader after setup, drop a worker factor, and report the rest."""
        before = """
            import torch
            from torch.utils.data import DataLoader

            BATCH = 64
            BATCH *= torch.cuda.device_count()

            def main(args, n_gpus):
                args.batch_size *= torch.cuda.device_count()
                n_gpu = torch.cuda.device_count()
                eval_batch = args.eval_batch * n_gpu
                workers = 4 * n_gpu
                other_workers = 2 * n_gpus
                model = wrap_ddp(Net())
                train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, num_workers=workers)
                other_loader = DataLoader(other_set, batch_size=BATCH, shuffle=True, num_workers=other_workers)
                for epoch in range(args.epochs):
                    for x, y in train_loader:
                        pass
                    for x, y in other_loader:
                        pass

            if __name__ == "__main__":
                main(parse(), 2)
        """
        after = """
            import torch
            from torch.utils.data import DataLoader
            import torch.distributed as dist
            from torch.utils.data.distributed import DistributedSampler

            BATCH = 64
            BATCH *= torch.cuda.device_count()

            def main(args, n_gpus):
                args.batch_size *= dist.get_world_size()
                n_gpu = torch.cuda.device_count()
                eval_batch = args.eval_batch * n_gpu
                workers = 4
                other_workers = 2 * n_gpus
                model = wrap_ddp(Net())
                train_loader = DataLoader(train_set, batch_size=args.batch_size // dist.get_world_size(), sampler=DistributedSampler(train_set, shuffle=True), num_workers=workers, generator=torch.Generator().manual_seed((torch.initial_seed() + dist.get_rank()) % 2**63))
                other_loader = DataLoader(other_set, batch_size=BATCH // dist.get_world_size(), sampler=DistributedSampler(other_set, shuffle=True), num_workers=other_workers, generator=torch.Generator().manual_seed((torch.initial_seed() + dist.get_rank()) % 2**63))
                for epoch in range(args.epochs):
                    train_loader.sampler.set_epoch(epoch)
                    other_loader.sampler.set_epoch(epoch)
                    for x, y in train_loader:
                        pass
                    for x, y in other_loader:
                        pass

            if __name__ == "__main__":
                main(parse(), 2)
        """
        habit = "a DataParallel habit that DDP changes: "
        divided = (
            "convert divides the loader's batch by the world size, which keeps this global batch only while the count "
            "equals the number of processes (one node, one process per GPU): scale by dist.get_world_size() instead"
        )
        kept = "the global batch changes unless it divides by the number of processes"
        self.assertCodemod(
            before,
            after,
            expected_warnings=[
                # At import, before the process group exists.
                f"5:1: DDP318 `BATCH` is scaled by the GPU count `torch.cuda.device_count()`, {habit}{divided}",
                "8:5: DDP335 `args.batch_size` was scaled by the GPU count `torch.cuda.device_count()`, a DataParallel "
                "habit: it is scaled by `dist.get_world_size()` instead, the number of processes, which is the GPU count "
                "on one node and stays right on several",
                # Reaches no loader.
                f"10:5: DDP318 `eval_batch` is scaled by the GPU count `n_gpu`, {habit}{divided}",
                "11:5: DDP335 `workers` was scaled by the GPU count `n_gpu`, a DataParallel habit: the factor is "
                "dropped, since each process starts its own loader: `workers = 4`",
                # A count passed in: not provably the GPU count.
                f"12:5: DDP318 `other_workers` is scaled by the GPU count `n_gpus`, {habit}each process now starts that "
                "many loader workers: drop the scaling",
                "14:53: DDP307 global batch `args.batch_size` -> `args.batch_size` (kept): each of the world_size "
                f"processes loads `args.batch_size // world_size`; {kept}",
                f"15:53: DDP307 global batch `BATCH` -> `BATCH` (kept): each of the world_size processes loads `BATCH // world_size`; {kept}",
            ],
        )

    def test_a_batch_times_a_name_bound_to_the_gpu_count_becomes_the_world_size(self) -> None:
        """Should replace `n_gpu` where `n_gpu = torch.cuda.device_count()` is its only binding and the product reaches the loader."""
        before = """
            import torch
            from torch.utils.data import DataLoader

            def main(args):
                n_gpu = torch.cuda.device_count()
                batch_size = args.per_gpu_batch * n_gpu
                model = wrap_ddp(Net())
                train_loader = DataLoader(train_set, batch_size=batch_size, shuffle=True)
                for epoch in range(args.epochs):
                    for x, y in train_loader:
                        pass

            if __name__ == "__main__":
                main(parse())
        """
        after = """
            import torch
            from torch.utils.data import DataLoader
            import torch.distributed as dist
            from torch.utils.data.distributed import DistributedSampler

            def main(args):
                n_gpu = torch.cuda.device_count()
                batch_size = args.per_gpu_batch * dist.get_world_size()
                model = wrap_ddp(Net())
                train_loader = DataLoader(train_set, batch_size=batch_size // dist.get_world_size(), sampler=DistributedSampler(train_set, shuffle=True))
                for epoch in range(args.epochs):
                    train_loader.sampler.set_epoch(epoch)
                    for x, y in train_loader:
                        pass

            if __name__ == "__main__":
                main(parse())
        """
        self.assertCodemod(
            before,
            after,
            expected_warnings=[
                "6:5: DDP335 `batch_size` was scaled by the GPU count `n_gpu`, a DataParallel habit: it is scaled by "
                "`dist.get_world_size()` instead, the number of processes, which is the GPU count on one node and "
                "stays right on several",
                "8:53: DDP307 global batch `batch_size` -> `batch_size` (kept): each of the world_size processes loads "
                "`batch_size // world_size`; the global batch changes unless it divides by the number of processes",
            ],
        )


def test_a_sampler_rebound_only_after_the_loader_is_built_is_no_sampler() -> None:
    """`train_sampler = None`, the loader, then a per-epoch `train_sampler = ...` that no loader reads: shuffled as before."""
    from dp2ddp.api import convert_source

    source = """import torch
from torch.utils.data import DataLoader


def main(args):
    model = torch.nn.DataParallel(Net())
    train_sampler = None
    loader = DataLoader(ds, batch_size=args.batch_size, shuffle=(train_sampler is None), sampler=train_sampler)
    for epoch in range(2):
        if args.resample:
            train_sampler = Balanced(ds)
        for x, y in loader:
            model(x).sum().backward()
"""
    result = convert_source(source)
    assert "DataLoader(ds, batch_size=args.batch_size // dist.get_world_size(), sampler=DistributedSampler(ds, shuffle=True))" in result.output
    assert not [f for f in result.findings if f.severity == "error"]


FACTORY = """import torch
from torch.utils.data import DataLoader


def create_data_loader(args):
    trainloader = DataLoader(trainset, batch_size=128, shuffle=True, num_workers=2)
    testloader = DataLoader(testset, batch_size=100, shuffle=False, num_workers=2)
    return trainloader, testloader


{train}


def main(args):
    net = torch.nn.DataParallel(Net())
    {main}
"""


@pytest.mark.parametrize(
    ("train", "main", "expected"),
    [
        pytest.param(
            "def train(net, trainloader, optimizer, epoch):\n    for x, y in trainloader:\n        net(x).sum().backward()",
            "trainloader, testloader = create_data_loader(args)\n"
            "    for epoch in range(start_epoch, start_epoch + 200):\n        train(net, trainloader, optimizer, epoch)",
            "        trainloader.sampler.set_epoch(epoch)\n        train(net, trainloader, optimizer, epoch)",
            id="a tuple returned by a factory, passed to train() by position",
        ),
        pytest.param(
            "def train(net, batches, optimizer, epoch):\n    for x, y in batches:\n        net(x).sum().backward()",
            "train_data, test_data = create_data_loader(args)\n"
            "    for epoch in range(args.epochs):\n        train(net, optimizer=optimizer, epoch=epoch, batches=train_data)",
            "        train_data.sampler.set_epoch(epoch)\n        train(net, optimizer=optimizer",
            id="passed by keyword under another name: spelled as the caller names it",
        ),
        pytest.param(
            "def train(net, loader, epochs):\n    for epoch in range(epochs):\n        for x, y in loader:\n"
            "            net(x).sum().backward()",
            "train_data, _ = create_data_loader(args)\n    train(net, train_data, args.epochs)",
            "    for epoch in range(epochs):\n        loader.sampler.set_epoch(epoch)\n        for x, y in loader:",
            id="the epoch loop inside train(): spelled with the parameter",
        ),
    ],
)
def test_set_epoch_follows_a_loader_from_a_factory_to_its_epoch_loop(train: str, main: str, expected: str) -> None:
    """Should put set_epoch in the loop that counts epochs, under the name the loader has there, and report nothing."""
    from dp2ddp.api import convert_source

    result = convert_source(FACTORY.format(train=train, main=main))
    assert "sampler=DistributedSampler(trainset, shuffle=True)" in result.output
    assert expected in result.output
    assert result.output.count(".set_epoch(") == 1
    assert not [f for f in result.findings if f.code in ("DDP322", "DDP306", "DDP317")]


def test_set_epoch_for_a_loader_stored_on_self_goes_in_the_method_that_counts_epochs() -> None:
    from dp2ddp.api import convert_source

    source = """import torch
from torch.utils.data import DataLoader


class Trainer:
    def __init__(self, model, dataset, epochs):
        self.model = torch.nn.DataParallel(model)
        self.train_loader = DataLoader(dataset, batch_size=64, shuffle=True)
        self.epochs = epochs

    def step(self, batch):
        x, y = batch
        self.model(x).sum().backward()

    def fit(self):
        for epoch in range(self.epochs):
            for batch in self.train_loader:
                self.step(batch)


if __name__ == "__main__":
    Trainer(Net(), ds, 3).fit()
"""
    result = convert_source(source)
    assert "        for epoch in range(self.epochs):\n            self.train_loader.sampler.set_epoch(epoch)\n" in result.output
    assert not [f for f in result.findings if f.code in ("DDP322", "DDP317")]


def test_set_epoch_for_a_loader_handed_to_a_trainer_class_uses_its_attribute() -> None:
    """Should follow `Trainer(model, DataLoader(...))` into `__init__`, onto `self.loader`, and into `fit()`."""
    from dp2ddp.api import convert_source

    source = """import torch
from torch.utils.data import DataLoader


class Trainer:
    def __init__(self, model, loader):
        self.model = model
        self.loader = loader

    def fit(self, epochs):
        for epoch in range(epochs):
            self.train_epoch()

    def train_epoch(self):
        for x, y in self.loader:
            self.model(x).sum().backward()


def main(args):
    model = torch.nn.DataParallel(Net())
    trainer = Trainer(model, DataLoader(train_set, batch_size=64, shuffle=True))
    trainer.fit(args.epochs)
"""
    result = convert_source(source)
    assert "        for epoch in range(epochs):\n            self.loader.sampler.set_epoch(epoch)\n" in result.output
    assert not [f for f in result.findings if f.code in ("DDP322", "DDP317")]


def test_set_epoch_for_a_loader_in_a_dict_is_spelled_with_its_key() -> None:
    from dp2ddp.api import convert_source

    source = """import torch
from torch.utils.data import DataLoader


def main(args):
    model = torch.nn.DataParallel(Net())
    loaders = {"train": DataLoader(train_set, batch_size=64, shuffle=True), "val": DataLoader(val_set, batch_size=64)}
    for epoch in range(args.epochs):
        for x, y in loaders["train"]:
            model(x).sum().backward()
        with torch.no_grad():
            for x, y in loaders["val"]:
                model(x)
"""
    result = convert_source(source)
    assert '    for epoch in range(args.epochs):\n        loaders["train"].sampler.set_epoch(epoch)\n' in result.output
    assert "sampler=DistributedSampler(train_set, shuffle=True)" in result.output
    assert "sampler=evaluation_shard(val_set)" in result.output
    assert not [f for f in result.findings if f.code in ("DDP322", "DDP317")]


def test_set_epoch_is_not_put_where_the_loaders_name_means_something_else() -> None:
    """Should not insert `loader.sampler.set_epoch` in a loop of a function whose `loader` is another object."""
    from dp2ddp.api import convert_source

    source = """import torch
from torch.utils.data import DataLoader


def train(net, loader):
    for x, y in loader:
        net(x).sum().backward()


def evaluate(net, loader):
    for epoch in range(3):
        print(loader)


def main(args):
    net = torch.nn.DataParallel(Net())
    loader = DataLoader(train_set, batch_size=64, shuffle=True)
    for epoch in range(args.epochs):
        train(net, loader)
    evaluate(net, other)
"""
    result = convert_source(source)
    assert result.output.count(".set_epoch(") == 1
    assert "    for epoch in range(args.epochs):\n        loader.sampler.set_epoch(epoch)\n" in result.output


def test_a_validation_loader_in_a_while_loop_does_not_hide_unsplit_training_batches() -> None:
    """Should report the fetch: the loop reads val_loader, but its training batches come from get_batch()."""
    from dp2ddp.api import convert_source

    source = """import torch
from torch.utils.data import DataLoader


def main(args):
    model = torch.nn.DataParallel(Net())
    val_loader = DataLoader(val_set, batch_size=8)
    step = 0
    while step < args.steps:
        x, y = get_batch("train")
        model(x, y).backward()
        step += 1
        if step % 100 == 0:
            with torch.no_grad():
                for vx, vy in val_loader:
                    model(vx, vy)
"""
    result = convert_source(source)
    assert [(f.line, f.code) for f in result.findings if f.code in ("DDP306", "DDP317")] == [(10, "DDP317")]


def test_a_helper_class_with_its_own_loaders_and_get_batch_is_sharded() -> None:
    """Should shard the helper's training loader and advance its epoch where get_batch() restarts it."""
    from dp2ddp.api import convert_source

    source = """import torch
from torch.utils.data import DataLoader


class Data:
    def __init__(self, train_set):
        self.train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
        self.train_iter = iter(self.train_loader)

    def get_batch(self):
        try:
            return next(self.train_iter)
        except StopIteration:
            self.train_iter = iter(self.train_loader)
            return next(self.train_iter)


def main(args):
    model = torch.nn.DataParallel(Net())
    data = Data(train_set)
    for step in range(args.steps):
        x, y = data.get_batch()
        model(x, y).backward()
"""
    result = convert_source(source)
    assert "sampler=DistributedSampler(train_set, shuffle=True)" in result.output
    assert "self.train_loader.sampler.set_epoch(self.train_loader.sampler.epoch + 1)" in result.output
    assert not [f for f in result.findings if f.severity == "error"]


def test_batches_from_a_loader_of_another_module_refuse_the_file_at_the_fetch() -> None:
    from dp2ddp.api import convert_source

    source = """import torch
from data import build_loader


def main(args):
    model = torch.nn.DataParallel(Net())
    it = iter(build_loader(args))
    for step in range(args.steps):
        batch = next(it)
        model(batch).backward()
"""
    result = convert_source(source)
    assert not result.changed
    assert [(f.line, f.code, f.severity) for f in result.findings if f.code == "DDP317"] == [(9, "DDP317", "error")]


OPTION_BATCH = """import argparse
import torch
from torch.utils.data import DataLoader

parser = argparse.ArgumentParser()
parser.add_argument({flags}, type=int, default={default})
args = parser.parse_args()


def main():
    model = torch.nn.DataParallel(Net())
    train_loader = DataLoader(train_set, batch_size=args.{dest}, shuffle=True)
    for epoch in range(2):
        for x, y in train_loader:
            model(x, y).backward()


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize(
    ("flags", "dest", "default", "loads"),
    [
        pytest.param('"--batch_size"', "batch_size", 1, "max(1, args.batch_size // dist.get_world_size())", id="default 1"),
        pytest.param(
            '"-b", "--batch-size"', "batch_size", 4, "max(1, args.batch_size // dist.get_world_size())",
            id="default 4, below 8 processes, named by its long option",
        ),
        pytest.param('"--bs", dest="batch"', "batch", 2, "max(1, args.batch // dist.get_world_size())", id="named by dest"),
        pytest.param('"--batch_size"', "batch_size", 64, "args.batch_size // dist.get_world_size()", id="default 64 divides"),
    ],
)
def test_a_batch_option_with_a_small_default_is_floored_at_one_per_process(flags: str, dest: str, default: int, loads: str) -> None:
    """`--batch_size` defaulting to 1 (CycleGAN, pix2pixHD): `1 // world_size` would be 0 and crash every process."""
    from dp2ddp.api import convert_source

    source = OPTION_BATCH.format(flags=flags, dest=dest, default=default)
    result = convert_source(source)
    assert f"DataLoader(train_set, batch_size={loads}, sampler=" in result.output
    floored = [f for f in result.findings if f.code == "DDP336"]
    if default < 8:
        assert [(f.line, f.severity) for f in floored] == [(12, "warning")]
        assert floored[0].message.startswith(f"`args.{dest}` defaults to {default}, fewer than ")
        # Converting the converted script names the hazard again.
        assert [f.code for f in convert_source(result.output).findings if f.code == "DDP336"] == ["DDP336"]
    else:
        assert not floored


def test_a_batch_option_whose_default_is_not_a_literal_is_divided_as_before() -> None:
    """Should leave `B // world_size` where the file does not say what the option defaults to."""
    from dp2ddp.api import convert_source

    source = OPTION_BATCH.format(flags='"--batch_size"', dest="batch_size", default="DEFAULT_BATCH")
    result = convert_source(source)
    assert "batch_size=args.batch_size // dist.get_world_size()," in result.output
    assert not [f for f in result.findings if f.code == "DDP336"]


def test_a_parameter_of_a_function_no_one_here_calls_is_the_callers_data() -> None:
    """Should not refuse a library function that trains on the loader its caller, in another file, hands it."""
    from dp2ddp.api import convert_source

    source = """import torch


def train(model, loader):
    for x, y in loader:
        model(x, y).backward()


model = torch.nn.DataParallel(Net())
"""
    result = convert_source(source)
    assert not [f for f in result.findings if f.code == "DDP317"]
    assert [f.code for f in result.findings if f.code == "DDP306"] == ["DDP306"]


@pytest.mark.parametrize(
    "alias",
    [
        pytest.param("progress = data_loader\n        for x, y in progress:", id="a plain local name"),
        pytest.param("progress = tqdm(data_loader)\n        for i, (x, y) in enumerate(progress):", id="a progress bar enumerated"),
        pytest.param("progress = Timed(data_loader)\n        for x, y in progress:", id="a wrapper class of the file"),
    ],
)
def test_a_loader_parameter_under_a_local_name_is_the_files_loader(alias: str) -> None:
    """Should split the loader handed to a training function in the entry block that iterates it under another name."""
    from dp2ddp.api import convert_source

    source = f"""import torch
from torch.utils.data import DataLoader
from tqdm import tqdm


class Timed:
    def __init__(self, iterable):
        self.iterable = iterable

    def __iter__(self):
        return iter(self.iterable)


if __name__ == "__main__":
    train_loader = DataLoader(ds, batch_size=8, shuffle=True)
    model = torch.nn.DataParallel(Net())

    def train(data_loader, net):
        {alias}
            net(x, y).backward()

    for epoch in range(2):
        train(train_loader, model)
"""
    result = convert_source(source)
    assert not [f for f in result.findings if f.severity == "error"], result.findings
    assert "sampler=DistributedSampler(ds, shuffle=True)" in result.output
    assert "        train_loader.sampler.set_epoch(epoch)\n        train(train_loader, model)" in result.output


@pytest.mark.parametrize(
    ("alias", "source_named"),
    [
        pytest.param("progress = loader\n    for x, y in progress:", None, id="a plain local name"),
        pytest.param("progress = tqdm(loader)\n    for i, (x, y) in enumerate(progress):", None, id="a progress bar enumerated"),
        pytest.param(
            "progress = tools.IteratorTimer(loader)\n    for x, y in progress:", "tools.IteratorTimer(loader)",
            id="a call that may build the batches, named",
        ),
    ],
)
def test_a_local_name_for_a_parameter_no_one_here_passes_is_the_callers_data(alias: str, source_named: str | None) -> None:
    """Should follow `progress = tqdm(loader)` to the parameter, and name the call it does not follow."""
    from dp2ddp.api import convert_source

    source = f"""import torch
import tools
from tqdm import tqdm


def train(model, loader):
    {alias}
        model(x, y).backward()


model = torch.nn.DataParallel(Net())
"""
    result = convert_source(source)
    refused = [f.message for f in result.findings if f.code == "DDP317"]
    if source_named is None:
        assert not refused
    else:
        assert len(refused) == 1 and refused[0].startswith(f"training batches come from `{source_named}`,")


@pytest.mark.parametrize(
    ("iterate", "refused"),
    [
        pytest.param("yield from range(32)", True, id="a stream every process reads whole"),
        pytest.param(
            "yield from range(dist.get_rank(), 32, dist.get_world_size())", False, id="a stream split by rank and world size"
        ),
    ],
)
def test_an_iterable_dataset_that_splits_itself_is_left_to_do_so(iterate: str, refused: bool) -> None:
    from dp2ddp.api import convert_source

    source = f"""import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset


class Stream(IterableDataset):
    def __iter__(self):
        {iterate}


model = torch.nn.DataParallel(Net())
loader = DataLoader(Stream(), batch_size=8)
for epoch in range(2):
    for x in loader:
        model(x).sum().backward()
"""
    result = convert_source(source)
    assert result.changed is not refused
    assert [f.code for f in result.findings if f.severity == "error"] == (["DDP302"] if refused else [])
    assert "DistributedSampler" not in result.output


def test_an_evaluation_loader_with_unpacked_arguments_is_kept_whole_and_does_not_refuse_the_file() -> None:
    from dp2ddp.api import convert_source

    source = """import torch
from torch.utils.data import DataLoader


def main(args):
    model = torch.nn.DataParallel(Net())
    train_loader = DataLoader(train_set, batch_size=8, shuffle=True)
    test_kwargs = {"batch_size": 10}
    test_loader = DataLoader(test_set, **test_kwargs)
    for epoch in range(2):
        for x, y in train_loader:
            model(x, y).backward()
        with torch.no_grad():
            for x, y in test_loader:
                model(x, y)
"""
    result = convert_source(source)
    assert "sampler=DistributedSampler(train_set, shuffle=True)" in result.output
    assert "DataLoader(test_set, **test_kwargs)" in result.output
    assert [(f.line, f.code) for f in result.findings if f.code in ("DDP314", "DDP316")] == [(9, "DDP316")]


@pytest.mark.parametrize(
    ("fetch", "refused_at"),
    [
        pytest.param("batch = next(it)", None, id="next() of an iterator over the loader"),
        pytest.param("batch = get_batch('train')", 11, id="a get_batch() of another file, after a learning-rate line"),
    ],
)
def test_the_batch_is_the_fetch_the_loss_depends_on(fetch: str, refused_at: int | None) -> None:
    """Should judge the fetch whose values reach the loss, not a learning rate computed first, nor the forward."""
    from dp2ddp.api import convert_source

    source = f"""import torch
from torch.utils.data import DataLoader


def main(args):
    model = torch.nn.DataParallel(Net())
    it = iter(DataLoader(train_set, batch_size=32, shuffle=True))
    step = 0
    while step < args.steps:
        lr = cosine(step)
        {fetch}
        out, aux = model(batch)
        loss = out.mean() + aux
        loss.backward()
        step += 1
"""
    result = convert_source(source)
    assert [f.line for f in result.findings if f.code == "DDP317"] == ([refused_at] if refused_at else [])
    assert result.changed is (refused_at is None)


@pytest.mark.parametrize(
    ("imports", "refused"),
    [
        pytest.param("", False, id="a fragment that binds its loader nowhere"),
        pytest.param("from data import *\n", True, id="a loader a star import may bind"),
    ],
)
def test_a_loader_bound_nowhere_is_refused_only_where_an_import_may_bind_it(imports: str, refused: bool) -> None:
    from dp2ddp.api import convert_source

    source = f"""import torch
{imports}
model = torch.nn.DataParallel(Net())
for x, y in loader:
    model(x, y).backward()
"""
    result = convert_source(source)
    assert any(f.code == "DDP317" for f in result.findings) is refused


@pytest.mark.parametrize(
    ("update", "shuffle"),
    [
        pytest.param("train_kwargs.update({'shuffle': True, 'num_workers': 1})", 'train_kwargs.get("shuffle", False)', id="a literal update"),
        pytest.param("cuda_kwargs = {'shuffle': True}\n        train_kwargs.update(cuda_kwargs)", 'train_kwargs.get("shuffle", False)', id="a named dict"),
        pytest.param("pass", "False", id="no shuffle at all"),
    ],
)
def test_unpacked_loader_arguments_the_file_shows_whole_are_split(update: str, shuffle: str) -> None:
    """The MNIST example's `DataLoader(data, **train_kwargs)`: batch and shuffle overridden, a DistributedSampler added."""
    from dp2ddp.api import convert_source

    source = f"""import torch
from torch.utils.data import DataLoader


def main(args):
    train_kwargs = {{'batch_size': args.batch_size}}
    if torch.cuda.is_available():
        {update}
    model = torch.nn.DataParallel(Net())
    train_loader = DataLoader(data, **train_kwargs)
    for epoch in range(2):
        for x, y in train_loader:
            model(x).sum().backward()
"""
    result = convert_source(source)
    batch = '"batch_size": train_kwargs["batch_size"] // dist.get_world_size()'
    assert f"sampler=DistributedSampler(data, shuffle={shuffle})" in result.output
    assert batch in result.output
    assert ('"shuffle": False' in result.output) is (shuffle != "False")
    assert "train_loader.sampler.set_epoch(epoch)" in result.output
    assert not [f for f in result.findings if f.severity == "error"]


def test_unpacked_loader_arguments_that_may_hold_a_sampler_are_refused() -> None:
    """A dict that also carries `sampler` cannot take a second one: refused with DDP314."""
    from dp2ddp.api import convert_source

    source = """import torch
from torch.utils.data import DataLoader


def main(args):
    train_kwargs = {'batch_size': 8, 'sampler': Balanced(data)}
    model = torch.nn.DataParallel(Net())
    train_loader = DataLoader(data, **train_kwargs)
    for epoch in range(2):
        for x, y in train_loader:
            model(x).sum().backward()
"""
    result = convert_source(source)
    assert [f.code for f in result.findings if f.severity == "error"] == ["DDP314"]
    assert result.output == source


@pytest.mark.parametrize(
    "call",
    [
        pytest.param("DataLoader(data, batch_size=batch_size, shuffle=True, **kwargs)", id="by keyword"),
        pytest.param("DataLoader(data, batch_size, True, **kwargs)", id="by position"),
        pytest.param("DataLoader(data, shuffle=True, num_workers=2, pin_memory=True, drop_last=True, batch_size=batch_size, **kwargs)", id="among others"),
        pytest.param(
            "DataLoader(data, batch_size=batch_size, shuffle=True, **options)", id="a dict of this file with no sampler key"
        ),
    ],
)
def test_unpacked_arguments_beside_an_explicit_batch_and_shuffle_are_split(call: str) -> None:
    """`**kwargs` cannot hold the batch, shuffle or a sampler when `batch_size` and `shuffle=True` are given:
    Python and DataLoader would refuse the original. The loader is split, the dict passed on as it was."""
    from dp2ddp.api import convert_source

    source = f"""import torch
from torch.utils.data import DataLoader


def main(data, batch_size, **kwargs):
    options = {{"num_workers": 2, "pin_memory": True}}
    model = torch.nn.DataParallel(Net())
    train_loader = {call}
    for epoch in range(2):
        for x, y in train_loader:
            model(x).sum().backward()
"""
    result = convert_source(source)
    assert not [f for f in result.findings if f.severity == "error"], result.findings
    converted = next(line.strip() for line in result.output.splitlines() if "train_loader = DataLoader(" in line)
    assert "batch_size // dist.get_world_size()" in converted
    assert "sampler=DistributedSampler(data, shuffle=True)" in converted
    assert "shuffle=True," not in converted.replace("DistributedSampler(data, shuffle=True)", "")
    # The dict is passed on whole, after a generator of the process's own that an entry of its own overrides.
    generator = '**{"generator": torch.Generator().manual_seed((torch.initial_seed() + dist.get_rank()) % 2**63), '
    assert converted.endswith(generator + call[call.index("**") : -1] + "})")
    assert "train_loader.sampler.set_epoch(epoch)" in result.output


@pytest.mark.parametrize("own", [False, True], ids=["no generator in the dict", "a generator of its own"])
def test_workers_of_a_loader_with_unpacked_options_draw_per_process(own: bool, tmp_path: Path) -> None:
    """`DataLoader(data, ..., **kwargs)` whose dict may hold `num_workers`: the workers' seeds come from a
    generator seeded by the rank, unless the dict brings a generator, which wins; the loader builds either way."""
    import torch
    import torch.distributed as dist
    from dp2ddp.api import convert_source

    source = """import torch
from torch.utils.data import DataLoader, TensorDataset


def build(batch_size, **kwargs):
    data = TensorDataset(torch.arange(8.0))
    return DataLoader(data, batch_size=batch_size, shuffle=True, **kwargs)


if __name__ == "__main__":
    model = torch.nn.DataParallel(torch.nn.Linear(1, 1))
    for x, in build(4, num_workers=1):
        model(x[:, None]).sum().backward()
"""
    output = convert_source(source).output
    namespace: dict[str, object] = {"__name__": "converted"}
    exec(compile(output, str(tmp_path / "converted.py"), "exec"), namespace)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        given = torch.Generator().manual_seed(7)
        loader = namespace["build"](4, num_workers=1, **({"generator": given} if own else {}))  # type: ignore[operator]
        assert loader.num_workers == 1
        assert loader.generator.initial_seed() == (7 if own else torch.initial_seed() % 2**63)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize(
    ("setup", "call"),
    [
        pytest.param("", "DataLoader(data, batch_size=batch_size, shuffle=args.shuffle, **kwargs)", id="a shuffle that may be false"),
        pytest.param("", "DataLoader(data, shuffle=True, **kwargs)", id="no batch size given"),
        pytest.param("", "DataLoader(data, batch_size=batch_size, **kwargs)", id="no shuffle given"),
        pytest.param("", "DataLoader(data, batch_size=batch_size, shuffle=True, *extra)", id="a positional unpacking"),
        pytest.param(
            "options = {'sampler': None, 'num_workers': 2}\n    ",
            "DataLoader(data, batch_size=batch_size, shuffle=True, **options)",
            id="a dict of this file that holds a sampler of None",
        ),
        pytest.param(
            "options = {'num_workers': 2}\n    options['sampler'] = None\n    ",
            "DataLoader(data, batch_size=batch_size, shuffle=True, **options)",
            id="a dict of this file given a sampler key later",
        ),
        pytest.param(
            "options = dict(num_workers=2)\n    options.update(sampler=None)\n    ",
            "DataLoader(data, batch_size=batch_size, shuffle=True, **options)",
            id="a dict of this file updated with a sampler",
        ),
    ],
)
def test_unpacked_arguments_that_may_decide_the_split_stay_refused(setup: str, call: str) -> None:
    """Where the dict may hold a sampler or the batch, convert cannot tell how the data is split: DDP314."""
    from dp2ddp.api import convert_source

    source = f"""import torch
from torch.utils.data import DataLoader


def main(data, batch_size, args, extra, **kwargs):
    {setup}model = torch.nn.DataParallel(Net())
    train_loader = {call}
    for epoch in range(2):
        for x, y in train_loader:
            model(x).sum().backward()
"""
    result = convert_source(source)
    assert [f.code for f in result.findings if f.severity == "error"] == ["DDP314"]
    assert result.output == source


@pytest.mark.parametrize(
    "loop",
    [
        pytest.param(
            "it = iter(loader)\n    for step in range(10):\n        data = next(it)\n        buffer.resize_(data[0].size()).copy_(data[0])\n"
            "        loss = model(buffer).sum()",
            id="a batch copied into a buffer the model reads",
        ),
        pytest.param(
            "it = iter(loader)\n    with trange(10) as bar:\n      for step in bar:\n        x, y = next(it)\n        loss = model(x).sum()",
            id="steps counted by a trange bound in a with",
        ),
    ],
)
def test_batches_drawn_from_the_files_loader_in_a_step_loop_are_not_refused(loop: str) -> None:
    """Faster R-CNN's copy into holder tensors, DDPM's `with trange(...) as pbar`: the data is the loader's."""
    from dp2ddp.api import convert_source

    source = f"""import torch
from torch.utils.data import DataLoader
from tqdm import trange


def main():
    model = torch.nn.DataParallel(Net())
    buffer = torch.zeros(1)
    loader = DataLoader(ds, batch_size=8, shuffle=True)
    {loop}
    loss.backward()
"""
    result = convert_source(source.replace("    loss.backward()\n", "").replace("sum()\n", "sum()\n        loss.backward()\n", 1))
    assert "DistributedSampler(" in result.output or "ShardedSampler(" in result.output
    assert not [f for f in result.findings if f.severity == "error"], result.findings


def test_sub_batches_of_a_loader_batch_are_refused() -> None:
    """`for batchs in loader: for batch in batchs:` (FastSpeech2's grouped collate): dividing batch_size changes the group."""
    from dp2ddp.api import convert_source

    source = """import torch
from torch.utils.data import DataLoader


def main():
    model = torch.nn.DataParallel(Net())
    loader = DataLoader(ds, batch_size=64, shuffle=True, collate_fn=group_collate)
    for epoch in range(2):
        for batchs in loader:
            for batch in batchs:
                model(batch).sum().backward()
"""
    result = convert_source(source)
    assert [(f.line, f.code) for f in result.findings if f.severity == "error"] == [(10, "DDP324")]
    assert result.output == source


def _sharded_sampler_class(rank: int, world_size: int) -> type:
    """The ShardedSampler convert inlines, run as a world of `world_size` processes seen from `rank`."""
    import random
    import sys
    import types

    torch = pytest.importorskip("torch")
    from dp2ddp.codemods.add_distributed_sampler import SHARDED_SAMPLER_SOURCE

    dist = types.SimpleNamespace(get_rank=lambda: rank, get_world_size=lambda: world_size)
    namespace = {"torch": torch, "dist": dist, "random": random, "sys": sys}
    exec(SHARDED_SAMPLER_SOURCE, namespace)  # noqa: S102 - the helper's own source, as it is inlined
    return namespace["ShardedSampler"]


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_the_sharded_sampler_splits_one_draw_evenly_and_draws_anew_each_epoch(world_size: int) -> None:
    """Every process gets as many items, together every index (padded like DistributedSampler), a new order each pass."""
    pytest.importorskip("torch")
    from torch.utils.data import SubsetRandomSampler

    indices = list(range(3, 40))
    shares = [list(_sharded_sampler_class(r, world_size)(SubsetRandomSampler(indices))) for r in range(world_size)]
    assert len({len(share) for share in shares}) == 1
    drawn = [i for share in shares for i in share]
    assert set(drawn) == set(indices) and len(drawn) - len(indices) < world_size
    sampler = _sharded_sampler_class(0, world_size)(SubsetRandomSampler(indices))
    assert list(sampler) != list(sampler)  # the second pass draws a new sequence


def test_the_sharded_sampler_splits_every_batch_of_a_batch_sampler() -> None:
    from torch.utils.data import BatchSampler, SequentialSampler

    batches = BatchSampler(SequentialSampler(range(10)), batch_size=4, drop_last=False)
    shares = [list(_sharded_sampler_class(r, 2)(batches, split_batches=True)) for r in range(2)]
    assert [a + b for a, b in zip(*shares)] == [[0, 2, 1, 3], [4, 6, 5, 7], [8, 9]]


def test_an_endless_sampler_is_split_as_it_draws_and_keeps_its_own_methods() -> None:
    """An endless batch sampler (audio tagging's balanced sampler) cannot be drawn a pass ahead.

    Each process draws it an item at a time with the pass's seeded generators, so the processes
    agree on every batch and each takes its share; the script's own random state is untouched,
    len() fails as it did, and what the script asks of its sampler (state_dict) is the sampler's.
    """
    import random

    class Endless:
        def __iter__(self):
            while True:
                yield [random.randrange(1000) for _ in range(4)]

        def state_dict(self):
            return {"pointer": 7}

    shares, after = [], []
    for rank in range(2):
        sampler = _sharded_sampler_class(rank, 2)(Endless(), seed=3, split_batches=True)
        random.seed(rank)
        batches = iter(sampler)
        shares.append([next(batches) for _ in range(3)])
        after.append(random.random())
        assert sampler.state_dict() == {"pointer": 7}
        with pytest.raises(TypeError):
            len(sampler)
    random.seed(3)
    drawn = [[random.randrange(1000) for _ in range(4)] for _ in range(3)]
    assert [[*a, *b] for a, b in zip(*shares)] == [batch[0::2] + batch[1::2] for batch in drawn]
    assert after == [random.Random(0).random(), random.Random(1).random()]


def test_a_finite_sampler_without_a_length_is_split_and_padded_like_one_with() -> None:
    from torch.utils.data import SequentialSampler

    class Stream:
        def __iter__(self):
            yield from range(11)

    for batch_size in (None, 4):
        shares = [list(_sharded_sampler_class(r, 2)(Stream(), batch_size=batch_size)) for r in range(2)]
        sized = [list(_sharded_sampler_class(r, 2)(SequentialSampler(range(11)), batch_size=batch_size)) for r in range(2)]
        assert shares == sized and len(shares[0]) == len(shares[1]) == 6


def test_given_the_global_batch_each_process_takes_a_contiguous_part_of_every_batch() -> None:
    """As DataParallel scattered a batch: K consecutive images of one identity stay on one process."""
    from torch.utils.data import SequentialSampler

    shares = [list(_sharded_sampler_class(r, 2)(SequentialSampler(range(10)), batch_size=4)) for r in range(2)]
    assert shares == [[0, 1, 4, 5, 8], [2, 3, 6, 7, 9]]
    odd = [list(_sharded_sampler_class(r, 2)(SequentialSampler(range(10)), batch_size=3)) for r in range(2)]
    assert odd == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]  # a batch that does not divide: every W-th item instead


@pytest.mark.parametrize(
    ("batch", "wrapped"),
    [
        pytest.param("global", "ShardedSampler(GroupedOrder(ds, 8), batch_size=8)", id="the global batch, cut per process"),
        pytest.param(
            "per-process",
            "ShardedSampler(GroupedOrder(ds, 8), batch_size=8 * dist.get_world_size())",
            id="whole batches per process",
        ),
    ],
)
def test_a_sampler_of_the_scripts_own_is_cut_by_the_batch_the_loader_makes(batch: str, wrapped: str) -> None:
    """Faster R-CNN's sampler orders indices in aspect-ratio batches: each process must get whole parts of them."""
    from dp2ddp.api import ConvertOptions, convert_source

    source = """import torch
from torch.utils.data import DataLoader, Sampler


class GroupedOrder(Sampler):
    def __init__(self, data, batch_size):
        self.n, self.batch_size = len(data), batch_size

    def __iter__(self):
        return iter(range(self.n))

    def __len__(self):
        return self.n


def main():
    model = torch.nn.DataParallel(Net())
    loader = DataLoader(ds, batch_size=8, sampler=GroupedOrder(ds, 8))
    for epoch in range(2):
        for x, y in loader:
            model(x).sum().backward()
"""
    result = convert_source(source, ConvertOptions(batch=batch))  # type: ignore[arg-type]
    assert f"sampler={wrapped})" in result.output


def test_a_dataset_built_inside_a_loader_handed_to_a_function_is_bound_on_the_line_before() -> None:
    """`train(DataLoader(TensorDataset(...), ...))`: the dataset the sampler needs too goes to a name just before
    the line (it was refused with DDP304, "bind the dataset to a name first")."""
    from textwrap import dedent

    from dp2ddp.api import convert_source

    result = convert_source(dedent(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset

        model = nn.DataParallel(nn.Linear(4, 1))


        def train(loader):
            for x, y in loader:
                nn.functional.mse_loss(model(x), y).backward()


        train(DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True))
        """
    ))  # fmt: skip
    assert result.changed, result.findings
    assert "dataset = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))\ntrain(DataLoader(dataset," in result.output
    assert "sampler=DistributedSampler(dataset, shuffle=True)" in result.output


def test_an_argument_added_to_a_call_laid_out_one_per_line_gets_a_line_of_its_own() -> None:
    """`pin_memory=True` on the last line before `)`: the worker generator goes on the next line, `)` stays."""
    from dp2ddp.api import convert_source

    source = (
        "import torch\nimport torch.nn as nn\n\nmodel = nn.DataParallel(Net())\n"
        "train_loader = torch.utils.data.DataLoader(\n    train_dataset,\n    batch_size=32,\n    shuffle=True,\n"
        "    num_workers=4,\n    pin_memory=True\n)\nfor epoch in range(3):\n    for x, y in train_loader:\n"
        "        model(x).sum().backward()\n"
    )
    output = convert_source(source).output
    assert "    pin_memory=True,\n    generator=torch.Generator().manual_seed(" in output
    assert "% 2**63)\n)\n" in output


def test_a_conditional_shuffle_stays_one_test_in_the_sampler_it_becomes() -> None:
    """`shuffle=True if sampler is None else False` (RandAugment) as the test of RandomSampler-or-SequentialSampler
    keeps its parentheses: without them the converted script did not parse."""
    from textwrap import dedent

    from dp2ddp.api import convert_source

    source = dedent(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset


        def main(sampler=None):
            model = nn.DataParallel(nn.Linear(4, 1))
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
            loader = DataLoader(data, batch_size=8, shuffle=True if sampler is None else False, sampler=sampler)
            for x, y in loader:
                optimizer.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()


        if __name__ == "__main__":
            main()
        """
    )
    result = convert_source(source)
    assert result.changed
    compile(result.output, "converted.py", "exec")
    assert "RandomSampler(data) if (True if sampler is None else False) else SequentialSampler(data)" in result.output


_GROUPED = """import torch
from torch.utils.data import DataLoader


def group_collate(batch):
{body}


def main():
    model = torch.nn.DataParallel(Net())
    loader = DataLoader(ds, batch_size=64, shuffle=True, collate_fn=group_collate)
    for epoch in range(2):
        for i, batchs in enumerate(loader):
            for j, batch in enumerate(batchs):
                model(batch).sum().backward()
"""


@pytest.mark.parametrize(
    "body, refused",
    [
        # groups of 16 samples: a divided batch makes fewer groups of the same size
        ("    output = []\n    for i in range(0, len(batch), 16):\n        output.append(torch.stack(batch[i:i + 16]))\n    return output", True),
        ("    n = len(batch) // 16\n    output = []\n    for i in range(n):\n        output.append(torch.stack(batch[i * 16:(i + 1) * 16]))\n    return output", True),
        # 4 groups of len(batch) // 4: a divided batch makes 4 smaller groups, each this process's share
        ("    size = len(batch) // 4\n    output = list()\n    for i in range(4):\n        output.append(torch.stack(batch[i * size:(i + 1) * size]))\n    return output", False),
    ],
    ids=["fixed size by range step", "fixed size by a count from the batch", "fixed number of groups"],
)
def test_sub_batches_through_enumerate_are_split_only_where_the_collate_cuts_a_fixed_number(body: str, refused: bool) -> None:
    """`for i, batchs in enumerate(loader): for j, batch in enumerate(batchs):` is the loader-batch-of-batches shape
    too. Where the collate cuts a fixed number of groups (FastSpeech's batch expansion), dividing the loader's batch
    divides each group, and the loader is split; where its groups have a fixed size, DDP324 stays."""
    from dp2ddp.api import convert_source

    source = _GROUPED.replace("{body}", body)
    result = convert_source(source)
    errors = [(f.line, f.code) for f in result.findings if f.severity == "error"]
    if refused:
        inner = source.splitlines().index("            for j, batch in enumerate(batchs):") + 1
        assert errors == [(inner, "DDP324")]
    else:
        assert errors == [] and "sampler=DistributedSampler(ds, shuffle=True)" in result.output
