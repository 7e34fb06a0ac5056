"""The model's life-cycle: hazards around the wrap leave the file as it was, with a finding at the line."""

from __future__ import annotations

from textwrap import dedent

import pytest

from dp2ddp.api import convert_source

TRAIN = """
def train(model, loader, optimizer):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def _convert(source: str):  # type: ignore[no-untyped-def]
    return convert_source(dedent(source))


def _codes(result) -> list[str]:  # type: ignore[no-untyped-def]
    return [f"{f.line}:{f.code}" for f in result.findings if f.code.startswith("DDP2")]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param(
            """
            import torch
            model = torch.nn.DataParallel(net)
            print(model(x))
            if args.half:
                model.half()
            """,
            ["6:DDP210"],
            id="a cast after a forward through the wrap leaves the file as it was",
        ),
        pytest.param(
            """
            import torch
            net = torch.nn.DataParallel(base)
            evaluate(net)
            base.extras.apply(weights_init)
            """,
            ["5:DDP211"],
            id="re-initialising after the wrapper was handed to a function",
        ),
        pytest.param(
            """
            import torch
            def get_device(gpu):
                return torch.device("cuda", gpu)
            model = torch.nn.DataParallel(model)
            model.to(get_device(args.gpu))
            """,
            ["6:DDP218"],
            id="a move to a helper's device that names a GPU index from the arguments",
        ),
        pytest.param(
            """
            import torch
            def get_device(device):
                if device:
                    return device
                return "cpu"
            model = torch.nn.DataParallel(model)
            print(model(x))
            model.to(get_device(cfg.device))
            """,
            ["9:DDP212"],
            id="a move to a helper's device that may hand back what it was given",
        ),
        pytest.param(
            """
            import torch
            if opt.isTrain and not opt.fp16:
                model = torch.nn.DataParallel(model)
            model(x).sum().backward()
            """,
            ["3:DDP207"],
            id="a wrap under a condition that is not about GPUs, with training after it on either path",
        ),
        pytest.param(
            """
            import torch
            model = torch.nn.DataParallel(model)
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                if loss.item() < 3 * last:
                    optimizer.step()
                    last = loss.item()
            """,
            ["7:DDP249"],
            id="an optimizer step under a test of a value each process computed from its own loss",
        ),
        pytest.param(
            """
            import torch
            class Search(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.alphas = Variable(torch.randn(2), requires_grad=True)
                    self._arch = [self.alphas]
                def arch_parameters(self):
                    return self._arch
                def forward(self, x):
                    return x * self.alphas[0]
            model = torch.nn.DataParallel(Search())
            optimizer_a = torch.optim.Adam(model.module.arch_parameters(), lr=0.01)
            """,
            ["13:DDP250"],
            id="an optimizer over tensors the model makes but does not register as parameters",
        ),
        pytest.param(
            """
            import torch
            if args.teacher:
                G = torch.nn.DataParallel(G)
                D = torch.nn.DataParallel(D)
            """,
            ["3:DDP207"],
            id="a wrap under a flag is reported for every wrap",
        ),
        pytest.param(
            """
            import torch
            if args.network == "resnet":
                if args.dataset == "imagenet":
                    model = torch.nn.DataParallel(model)
            """,
            ["3:DDP207", "4:DDP207"],
            id="every condition that is not about GPUs is reported in one run",
        ),
        pytest.param(
            """
            import torch
            model = torch.nn.DataParallel(model)
            seen = 0
            for x, y in loader:
                loss = model(x).sum()
                loss.backward()
                seen += loss.item()
                if seen >= budget:
                    break
            """,
            ["10:DDP220"],
            id="a break on a sum of this process's losses, added in place",
        ),
        pytest.param(
            """
            import torch
            model = torch.nn.DataParallel(model)

            def train():
                for x, y in loader:
                    out = model(x)
                    if torch.isnan(out).any():
                        return
                    out.sum().backward()
            """,
            ["9:DDP220"],
            id="a return on this process's outputs ends its training alone",
        ),
        pytest.param(
            """
            import torch
            model = torch.nn.DataParallel(model)
            it = 0
            for x, y in loader:
                loss = model(x).sum()
                loss.backward()
                if loss.item() > 0:
                    it = it + 1
                if it >= max_iterations:
                    break
            """,
            ["11:DDP220"],
            id="a break on a counter only some processes advance",
        ),
        pytest.param(
            """
            import torch
            model = torch.nn.DataParallel(model)
            it = 0
            for x, y in loader:
                loss = model(x).sum()
                loss.backward()
                if torch.isnan(loss):
                    continue
                it = it + 1
                if it >= max_iterations:
                    break
            """,
            ["12:DDP220"],
            id="a break on a counter a per-batch continue skips",
        ),
        pytest.param(
            """
            import torch
            model = torch.nn.DataParallel(model)
            for x, y in loader:
                loss = model(x).sum()
                try:
                    loss.backward()
                except RuntimeError:
                    continue
            """,
            ["6:DDP220"],
            id="a try around backward that goes on",
        ),
        pytest.param(
            """
            import torch
            gan = torch.nn.DataParallel(gan)
            for x in loader:
                loss_g, loss_d = gan(x)
                loss_g.backward(retain_graph=True)
                loss_d.backward()
            """,
            ["7:DDP221"],
            id="two backward passes through one forward",
        ),
        pytest.param(
            """
            import torch
            netD = torch.nn.DataParallel(netD)
            for real in loader:
                netD(real).mean().backward()
                grads = torch.autograd.grad(netD(real).sum(), real, create_graph=True)[0]
                grads.norm().backward()
            """,
            ["6:DDP222"],
            id="a gradient penalty back-propagated on its own",
        ),
        pytest.param(
            """
            import torch
            netD = torch.nn.DataParallel(netD)
            for real in loader:
                loss = netD(real).mean()
                grads = torch.autograd.grad(loss, netD.parameters(), create_graph=True)
                (loss + sum(g.pow(2).sum() for g in grads)).backward()
            """,
            ["6:DDP222"],
            id="a gradient penalty on the parameters' gradients",
        ),
        pytest.param(
            """
            import torch
            model = torch.nn.DataParallel(model)
            for x in loader:
                model(x).mean().backward(create_graph=True)
            """,
            ["5:DDP222"],
            id="a backward that creates a graph",
        ),
        pytest.param(
            """
            import torch
            model = torch.nn.DataParallel(model)
            for step, x in enumerate(loader):
                out = model(x)
                out.pow(2).mean().backward(retain_graph=True)
                if step % 2:
                    out.mean().backward()
                else:
                    out.sum().backward()
            """,
            ["8:DDP221"],
            id="a backward before an if and one in each branch",
        ),
        pytest.param(
            """
            import torch
            from torch import nn
            head = nn.Linear(512, 10)
            backbone = torch.nn.DataParallel(backbone)
            optimizer = torch.optim.SGD(list(backbone.parameters()) + list(head.parameters()), lr=0.1)
            """,
            ["6:DDP223"],
            id="an optimizer over a module that is never wrapped",
        ),
        pytest.param(
            """
            import torch
            from torch import nn
            head = {"linear": nn.Linear(512, 10), "bilinear": nn.Bilinear(512, 512, 10)}[args.head]
            backbone = torch.nn.DataParallel(backbone)
            optimizer = torch.optim.SGD([{"params": backbone.parameters()}, {"params": head.parameters()}], lr=0.1)
            """,
            ["6:DDP223"],
            id="an optimizer over a module chosen from a dict of them and never wrapped",
        ),
        pytest.param(
            """
            import torch
            for name in self.model_names:
                if isinstance(name, str) and self.opt.isTrain:
                    net = getattr(self, "net" + name)
                    setattr(self, "net" + name, torch.nn.DataParallel(net))
            """,
            ["4:DDP207"],
            id="a filter on the loop item that also tests an option is a condition on the wrap",
        ),
        pytest.param(
            """
            import torch
            for name in self.model_names:
                if isinstance(name, str):
                    net = getattr(self, "net" + name)
                    setattr(self, "net" + name, torch.nn.DataParallel(net))
                else:
                    print(name)
            """,
            ["4:DDP207"],
            id="a test on the loop item with an else is a condition on the wrap",
        ),
        pytest.param(
            """
            import random
            import torch
            for name in self.model_names:
                if random.random() < 0.5:
                    setattr(self, "net" + name, torch.nn.DataParallel(getattr(self, "net" + name)))
            """,
            ["5:DDP207"],
            id="a test in a loop that is not about the item may differ between processes",
        ),
        pytest.param(
            """
            import torch
            for name in self.model_names:
                name = pick(name)
                if isinstance(name, str):
                    setattr(self, "net" + name, torch.nn.DataParallel(getattr(self, "net" + name)))
            """,
            ["5:DDP207"],
            id="a test on a loop item bound again in the loop is a condition on the wrap",
        ),
    ],
)
def test_hazard_leaves_the_file_as_it_was(source: str, expected: list[str]) -> None:
    result = _convert(source)
    assert result.output == dedent(source)
    assert _codes(result) == expected
    assert all(f.severity == "error" for f in result.findings if f"{f.line}:{f.code}" in expected)


@pytest.mark.parametrize(
    "source",
    [
        pytest.param(
            """
            import torch
            device = torch.device("cuda")
            model.half()
            model.apply(weights_init)
            model.load_state_dict(state)
            model = torch.nn.DataParallel(model).cuda()
            model = model.to(device)
            """,
            id="casts, inits and loads before the wrap are fine",
        ),
        pytest.param(
            """
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.DataParallel(model)
            model.to(device)
            """,
            id="a move to a device every process resolves to its own",
        ),
        pytest.param(
            """
            import torch


            def get_device(cuda):
                return torch.device("cuda" if cuda and torch.cuda.is_available() else "cpu")


            device = get_device(args.cuda)
            model = torch.nn.DataParallel(model)
            model.to(device)
            """,
            id="a move to what a helper of the file returns: cuda or cpu",
        ),
        pytest.param(
            """
            import torch
            DEVICE = "cuda:0"
            model = torch.nn.DataParallel(model)
            model = model.to(DEVICE)
            """,
            id="a move to a cuda:0 constant, which becomes this process's GPU",
        ),
        pytest.param(
            """
            import torch


            def set_eval(m):
                m.training = False


            model = torch.nn.DataParallel(model)
            model.apply(set_eval)
            """,
            id="apply of a function that writes no weights",
        ),
        pytest.param(
            """
            import torch
            model = torch.nn.DataParallel(model)
            for i, (x, y) in enumerate(loader):
                if i < args.skip:
                    continue
                loss = model(x).sum()
                loss.backward()
                if i >= args.max_steps:
                    break
            """,
            id="a continue on the step counter is the same on every process",
        ),
        pytest.param(
            """
            import torch
            netD = torch.nn.DataParallel(netD)
            for real in loader:
                out = netD(real)
                grads = torch.autograd.grad(out.sum(), real, create_graph=True)[0]
                (out.mean() + grads.norm()).backward()
            """,
            id="a gradient penalty back-propagated with the loss of the same forward",
        ),
        pytest.param(
            """
            import torch
            model = torch.nn.DataParallel(model)
            for step, x in enumerate(loader):
                out = model(x)
                if step % 2:
                    out.mean().backward()
                else:
                    out.sum().backward()
            """,
            id="one backward in each branch of an if is one per pass",
        ),
        pytest.param(
            """
            import torch
            model = torch.nn.DataParallel(model)
            iter_num = 0
            for epoch in range(epochs):
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    iter_num = iter_num + 1
                    if iter_num >= max_iterations:
                        break
            """,
            id="a break on a counter assigned its own value plus one",
        ),
        pytest.param(
            """
            import torch
            model = torch.nn.DataParallel(model)
            step, lr = 0, base_lr
            for x, y in loader:
                loss = model(x).sum()
                loss.backward()
                step = step + args.accumulate
                lr = lr * 0.5
                if step > args.max_steps or lr < 1e-6:
                    break
            """,
            id="a break on a counter and a schedule every process shares",
        ),
        pytest.param(
            """
            import torch
            netG = torch.nn.DataParallel(netG)
            netD = torch.nn.DataParallel(netD)
            for real in loader:
                errD_real = netD(real).mean()
                errD_real.backward()
                fake = netG(noise)
                errD_fake = netD(fake.detach()).mean()
                errD_fake.backward()
                errG = netD(fake).mean()
                errG.backward()
            """,
            id="a GAN step with one backward per forward",
        ),
    ],
)
def test_no_hazard_converts(source: str) -> None:
    result = convert_source(dedent(source) + TRAIN)
    assert result.changed
    assert not [f for f in result.findings if f.severity == "error"], result.findings


def test_wraps_of_one_gpu_condition_leave_it_together() -> None:
    """Both wraps move out of the `if`, not only the last one."""
    result = _convert(
        """
        import torch
        if torch.cuda.device_count() > 1:
            G = torch.nn.DataParallel(G)
            D = torch.nn.DataParallel(D)
        """
    )
    assert "if torch.cuda.device_count() > 1:\n    G" not in result.output
    assert "G = wrap_ddp(G)\nD = wrap_ddp(D)\n" in result.output


def test_the_entry_guard_is_no_condition_on_the_wrap() -> None:
    """A GPU condition inside `if __name__ == "__main__":` is hoisted like any other."""
    result = _convert(
        """
        import torch
        if __name__ == "__main__":
            if torch.cuda.device_count() > 1:
                model = torch.nn.DataParallel(model)
        """
    )
    assert "    model = wrap_ddp(model)\n" in result.output
    assert "if torch.cuda.device_count() > 1:\n        model" not in result.output
    assert not _codes(result)


@pytest.mark.parametrize(
    "condition",
    [
        'device == "cuda"',
        'device.type == "cuda" and ngpu > 1',
        "args.cuda",
        "len(args.gpu_ids) > 1",
        "use_cuda",
        "torch.cuda.is_available()",
    ],
)
def test_gpu_conditions_are_hoisted(condition: str) -> None:
    result = _convert(
        f"""
        import torch
        device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
        use_cuda = torch.cuda.is_available()
        if {condition}:
            model = torch.nn.DataParallel(model)
        """
    )
    assert "\nmodel = wrap_ddp(model)\n" in result.output, result.findings


def test_conditional_expression_wrap_becomes_unconditional() -> None:
    result = _convert(
        """
        import torch
        model = torch.nn.DataParallel(model) if torch.cuda.device_count() > 1 else model
        """
    )
    assert "\nmodel = wrap_ddp(model)\n" in result.output


def test_a_branch_on_the_old_condition_takes_the_wrapped_side() -> None:
    """`net.module if use_cuda else net` would save the DDP wrapper on CPU."""
    result = _convert(
        """
        import torch
        use_cuda = torch.cuda.is_available()
        if use_cuda:
            net = torch.nn.DataParallel(net)
        state = (net.module if use_cuda else net).state_dict()
        saved = net.module.state_dict() if use_cuda else net.state_dict()
        if use_cuda:
            torch.save(net.module, "net.pt")
        """
    )
    assert "state = (net.module).state_dict()" in result.output
    assert "saved = net.module.state_dict()\n" in result.output
    assert "8:DDP208" in _codes(result)


def test_unused_submodule_gets_find_unused_parameters() -> None:
    result = _convert(
        """
        import torch
        from torch import nn


        class Encoder(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Linear(4, 4)
                self.pooler = nn.Linear(4, 4)

            def forward(self, x):
                return self.body(x)


        model = torch.nn.DataParallel(Encoder())
        """
    )
    assert "model = wrap_ddp(Encoder(), find_unused_parameters=True)" in result.output
    assert "10:DDP215" in _codes(result)


def test_a_gpu_parameter_no_call_in_the_file_sets_leaves_the_file_as_it_was() -> None:
    """Nothing says what `gpu` is, so every process might pick the same GPU: refused, not guessed."""
    source = """
        import torch


        def train(gpu, args):
            torch.cuda.set_device(gpu)
            model = torch.nn.DataParallel(Net()).cuda(gpu)
        """
    result = _convert(source)
    assert _codes(result) == ["6:DDP218"]
    assert "(nothing in this file calls it)" in result.findings[0].message
    assert result.output == dedent(source)


@pytest.mark.parametrize(
    ("call", "why"),
    [
        pytest.param("train(args.gpu, args)", "a call passes `args.gpu`", id="a value convert cannot resolve"),
        pytest.param("mp.spawn(train, args=(args,))", "`train` is handed on as a value", id="handed to a launcher"),
        pytest.param("train(args=args)", "`train(args=args)` passes no value for it that convert can see", id="no value"),
    ],
)
def test_a_gpu_parameter_set_from_an_unknown_value_leaves_the_file_as_it_was(call: str, why: str) -> None:
    source = f"""
import torch


def train(gpu, args):
    torch.cuda.set_device(gpu)
    model = torch.nn.DataParallel(Net())


{call}
"""
    result = convert_source(source)
    assert [f.code for f in result.findings if f.severity == "error"] == ["DDP218"]
    assert f"({why})" in next(f for f in result.findings if f.code == "DDP218").message
    assert result.output == source


def test_a_gpu_parameter_given_the_local_rank_already_is_left_alone() -> None:
    """Should do nothing to a call that passes the local rank, and report nothing about the parameter."""
    result = _convert(
        """
        import os
        import torch


        def train(gpu, args):
            torch.cuda.set_device(gpu)
            model = torch.nn.DataParallel(Net().cuda(gpu))


        train(int(os.environ["LOCAL_RANK"]), args)
        """
    )
    assert 'train(int(os.environ["LOCAL_RANK"]), args)' in result.output
    assert not [f for f in result.findings if f.code in ("DDP213", "DDP217", "DDP218")]


def test_module_level_effects_before_setup_are_reported_not_guarded() -> None:
    """A guard that runs before the process group exists is true on every process."""
    result = _convert(
        """
        import os
        import torch

        print("starting")
        os.makedirs("runs")


        def main():
            model = torch.nn.DataParallel(Net())


        if __name__ == "__main__":
            main()
        """
    )
    assert '\nprint("starting")\nos.makedirs("runs", exist_ok=True)\n' in result.output
    assert [f"{f.line}:{f.code}" for f in result.findings if f.code in ("DDP216", "DDP417")] == ["5:DDP216", "6:DDP417"]


def test_setup_runs_after_the_entry_block_sets_visible_devices() -> None:
    result = _convert(
        """
        import os
        import torch


        def main():
            os.environ["CUDA_VISIBLE_DEVICES"] = "1"
            model = torch.nn.DataParallel(Net())


        if __name__ == "__main__":
            args = parse()
            os.environ["CUDA_VISIBLE_DEVICES"] = args.gpus
            main()
        """
    )
    assert '    os.environ["CUDA_VISIBLE_DEVICES"] = args.gpus\n    setup_distributed()\n    main()\n' in result.output
    assert "7:DDP209" in [f"{f.line}:{f.code}" for f in result.findings]


def test_saving_the_wrapper_saves_the_module_and_loading_before_the_wrap_works() -> None:
    result = _convert(
        """
        import torch
        model = Net()
        model.load_state_dict(torch.load("ckpt.pt"))
        model = torch.nn.DataParallel(model)
        torch.save(model, "model.pt")
        """
    )
    assert 'torch.save(model.module, "model.pt")' in result.output
    assert 'load_model_state(model, torch.load("ckpt.pt", map_location=local_device()))' in result.output
    assert 'return getattr(model, "module", model).load_state_dict(bare, **kwargs)' in result.output


def test_a_summing_criterion_class_of_the_script_is_scaled() -> None:
    result = _convert(
        """
        import torch
        import torch.nn as nn
        import torch.nn.functional as F


        class Loss(nn.Module):
            def forward(self, x, y):
                return F.mse_loss(x, y, reduction="sum")


        criterion = Loss()
        model = nn.DataParallel(Net())
        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward()
        """
    )
    assert "(loss * dist.get_world_size()).backward()" in result.output


def test_a_criterion_class_that_sums_and_divides_is_reported_not_scaled() -> None:
    result = _convert(
        """
        import torch
        import torch.nn as nn
        import torch.nn.functional as F


        class Loss(nn.Module):
            def forward(self, x, y):
                return F.mse_loss(x, y, reduction="sum") / x.size(0)


        criterion = Loss()
        model = nn.DataParallel(Net())
        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward()
        """
    )
    assert "    loss.backward()" in result.output
    assert "7:DDP311" in [f"{f.line}:{f.code}" for f in result.findings]


def test_a_class_that_sums_only_outside_its_forward_is_no_criterion() -> None:
    """An experiment class that evaluates with reduction="sum" and divides by the count computes no training loss."""
    result = _convert(
        """
        import torch
        import torch.nn as nn
        import torch.nn.functional as F


        class Experiment:
            def evaluate(self, loader):
                total = sum(F.mse_loss(model(x), y, reduction="sum").item() for x, y in loader)
                return total / len(loader.dataset)


        model = nn.DataParallel(Net())
        for x, y in loader:
            F.mse_loss(model(x), y).backward()
        """
    )
    assert "DDP311" not in {f.code for f in result.findings}


def test_a_batch_value_that_sizes_a_criterion_keeps_the_loader_batch_per_process() -> None:
    result = _convert(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader

        criterion = YoloLoss(batch=cfg.batch // cfg.subdivisions)
        model = nn.DataParallel(Net())
        loader = DataLoader(ds, batch_size=cfg.batch // cfg.subdivisions, shuffle=True)


        class YoloLoss(nn.Module):
            pass
        """
    )
    assert "DataLoader(ds, batch_size=cfg.batch // cfg.subdivisions, sampler=" in result.output
    assert "6:DDP312" in [f"{f.line}:{f.code}" for f in result.findings]


def test_a_batch_read_from_a_config_dict_is_its_key_not_the_whole_dict() -> None:
    """`cfg["training"]["batch_size"]` sizes the buffer; `cfg["data"]["classes"]` and `cfg` itself are other values."""
    source = """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader

        head = Head(cfg["data"]["classes"], cfg)
        {sizing}
        model = nn.DataParallel(Net())
        loader = DataLoader(ds, batch_size=cfg["training"]["batch_size"], shuffle=True)


        class Head(nn.Module):
            pass
        """
    other = _convert(source.format(sizing=""))
    assert 'batch_size=cfg["training"]["batch_size"] // dist.get_world_size()' in other.output
    assert "DDP312" not in {f.code for f in other.findings}
    sized = _convert(source.format(sizing='noise = torch.zeros(cfg["training"]["batch_size"], 8)'))
    assert 'batch_size=cfg["training"]["batch_size"], sampler=' in sized.output
    assert "DDP312" in {f.code for f in sized.findings}


def test_evaluation_with_gradients_is_left_whole_and_not_gathered() -> None:
    """DDP's forward syncs buffers with gradients on: unequal shards would hang at the last batch."""
    result = _convert(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader


        def evaluate(model, val_loader):
            correct = 0
            for x, y in val_loader:
                correct += (model(x).argmax(1) == y).sum().item()
            return correct / len(val_loader.dataset)


        model = nn.DataParallel(Net())
        train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
        val_loader = DataLoader(val_set, batch_size=32)
        for epoch in range(3):
            for x, y in train_loader:
                loss = model(x).sum()
                loss.backward()
            print(evaluate(model, val_loader))
        """
    )
    assert "val_loader = DataLoader(val_set, batch_size=32)\n" in result.output
    assert "all_reduce" not in result.output
    assert "10:DDP313" in [f"{f.line}:{f.code}" for f in result.findings]


def test_a_wrap_on_both_branches_of_an_if_converts_in_place() -> None:
    """Every path wraps the model, whatever the condition says."""
    result = _convert(
        """
        import torch
        if torch.cuda.is_available():
            net = torch.nn.DataParallel(net).cuda()
        else:
            net = torch.nn.DataParallel(net)
        """
    )
    assert "if torch.cuda.is_available():\n    net = wrap_ddp(net)\nelse:\n    net = wrap_ddp(net)\n" in result.output
    assert not [f for f in result.findings if f.severity == "error"]


def test_a_device_from_a_helper_of_the_file_is_this_processs_own() -> None:
    """`get_device(args.cuda)` returns "cuda" (the GPU setup_distributed() selected) or "cpu": nothing to report."""
    result = _convert(
        """
        import torch


        def get_device(cuda):
            return torch.device("cuda" if cuda and torch.cuda.is_available() else "cpu")


        def main():
            device = get_device(args.cuda)
            model = torch.nn.DataParallel(Net()).to(device)
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                loss = model(x).sum()
                loss.backward()
        """
    )
    assert result.changed
    assert not [f for f in result.findings if f.code in ("DDP212", "DDP213")], result.findings


def test_a_helper_defined_twice_says_nothing_about_the_device() -> None:
    """Which `get_device` runs is unknown, so the tensors' device is still reported."""
    result = _convert(
        """
        import torch
        if cfg.cpu:
            def get_device():
                return "cpu"
        else:
            def get_device():
                return cfg.device
        device = get_device()
        model = torch.nn.DataParallel(Net())
        for x, y in loader:
            loss = model(x.to(device)).sum()
            loss.backward()
        """
    )
    assert [f"{f.line}:{f.code}" for f in result.findings if f.code == "DDP213"] == ["12:DDP213"]


def test_a_configured_device_for_tensors_is_reported_once() -> None:
    result = _convert(
        """
        import torch
        model = torch.nn.DataParallel(Net())
        for x, y in loader:
            x, y = x.to(cfg.device), y.to(cfg.device)
            loss = model(x).sum()
            loss.backward()
        """
    )
    assert [f"{f.line}:{f.code}" for f in result.findings if f.code == "DDP213"] == ["5:DDP213"]


def test_every_rule_is_documented_under_ruffs_headings() -> None:
    from dp2ddp.rules import RULES

    headings = ["## What it does", "## Why is this bad?", "## Example", "## Use instead", "## Fix safety"]
    for code, rule in RULES.items():
        assert all(h in rule.doc for h in headings), code
        assert [rule.doc.index(h) for h in headings] == sorted(rule.doc.index(h) for h in headings), code


def test_every_error_leaves_the_file_as_it_was() -> None:
    """An error of convert is the promise that nothing was converted; each says so.

    ``check``'s own rules (DDP5xx) report hazards in code nothing converts.
    """
    from dp2ddp.rules import RULES, is_check_rule

    errors = [rule for rule in RULES.values() if rule.severity == "error" and not is_check_rule(rule.code)]
    assert errors and all("the file is left as it was" in rule.message for rule in errors)


def test_a_model_returned_by_the_function_that_wraps_it_is_followed() -> None:
    """`self.model = self.build_model()` then `.half()`: the cast is after the wrap too."""
    result = _convert(
        """
        import torch


        class Trainer:
            def __init__(self, cfg):
                self.model = self.build_model(cfg)
                self.model.half()

            def build_model(self, cfg):
                model = Net()
                model = torch.nn.DataParallel(model)
                return model
        """
    )
    assert not result.changed
    assert _codes(result) == ["8:DDP210"]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param(
            """
            import torch
            model = torch.nn.DataParallel(net)
            if args.half:
                model.half()
            """,
            "if args.half:\n    net.half()\nmodel = wrap_ddp(net)\n",
            id="a cast after the wrap moves the wrap after it",
        ),
        pytest.param(
            """
            import torch
            net = torch.nn.DataParallel(base)
            base.extras.apply(weights_init)
            """,
            "base.extras.apply(weights_init)\nnet = wrap_ddp(base)\n",
            id="re-initialising the inner model moves the wrap after it",
        ),
        pytest.param(
            """
            import torch
            from torch import nn
            model = nn.DataParallel(model)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            nn.init.normal_(model.module.fc.weight)
            """,
            "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\nnn.init.normal_(model.fc.weight)\nmodel = wrap_ddp(model)\n",
            id="nn.init through model.module, with an optimizer in between, names the module",
        ),
        pytest.param(
            """
            import torch
            model = torch.nn.DataParallel(Net())
            model.module.head.apply(init)
            """,
            "model = Net()\nmodel.head.apply(init)\nmodel = wrap_ddp(model)\n",
            id="a wrap of a new model splits: the model is built in place, wrapped later",
        ),
        pytest.param(
            """
            import torch
            DEVICE = cfg.DEVICE
            model = torch.nn.DataParallel(model)
            model = model.to(DEVICE)
            """,
            "model = model.to(DEVICE)\nmodel = wrap_ddp(model)\n",
            id="a move to a configured device after the wrap moves the wrap after it",
        ),
        pytest.param(
            """
            import torch
            model = torch.nn.DataParallel(net).cuda()
            model = model.to(torch.float16)
            """,
            "net = net.to(torch.float16)\nmodel = wrap_ddp(net)\n",
            id="a cast with .to(dtype) of a wrapper moved to the GPU renames it to the module",
        ),
        pytest.param(
            """
            import torch
            net = base
            if args.cuda:
                net = torch.nn.DataParallel(base)
                cudnn.benchmark = True
            base.backbone.load_state_dict(weights)
            if args.cuda:
                net = net.cuda()
            base.head.apply(init)
            """,
            "if args.cuda:\n    cudnn.benchmark = True\nbase.backbone.load_state_dict(weights)\n"
            "if args.cuda:\n    base = base.cuda()\nbase.head.apply(init)\nnet = wrap_ddp(base)\n",
            id="a wrap that leaves its GPU condition then moves after the initialisation",
        ),
    ],
)
def test_wrap_moves_after_a_mutation_of_its_model(source: str, expected: str) -> None:
    """Should move the wrap after the cast, initialisation or move, with a note at each."""
    result = _convert(source)
    assert expected in result.output
    assert "DataParallel(" not in result.output.replace("DistributedDataParallel(", "")
    assert not [f for f in result.findings if f.severity == "error"]
    assert "DDP219" in {f.code for f in result.findings}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param(
            """
            import torch
            net = torch.nn.DataParallel(torch.nn.Linear(2, 1))
            print(net(x))
            net = Model()
            net.apply(init_weights)
            net = torch.nn.DataParallel(net)
            """,
            "net = Model()\nnet.apply(init_weights)\nnet = wrap_ddp(net)\n",
            id="a name rebound to a new model is initialised before its own wrap",
        ),
        pytest.param(
            """
            import torch
            if torch.cuda.is_available():
                if torch.cuda.device_count() > 1:
                    model = torch.nn.DataParallel(model)
                model = model.cuda()
            """,
            "if torch.cuda.is_available():\n    model = model.cuda()\nmodel = wrap_ddp(model)\n",
            id="a wrap in nested GPU conditions leaves them all",
        ),
        pytest.param(
            """
            import torch
            cuda = torch.cuda.is_available()
            if cuda:
                model = torch.nn.DataParallel(model)
                model = model.cuda()
            """,
            "if cuda:\n    model = model.cuda()\nmodel = wrap_ddp(model)\n",
            id="a move after the wrap in its GPU condition stays, the wrap leaves",
        ),
        pytest.param(
            """
            import torch
            if len(gpu_ids) > 1:
                model = torch.nn.DataParallel(model, device_ids=gpu_ids)
                head = model.module.classifier
            else:
                head = model.classifier
            optimizer = torch.optim.SGD(head.parameters(), lr=0.1)
            """,
            "model = wrap_ddp(model)\nhead = model.module.classifier\noptimizer",
            id="a GPU condition with an else that sets up the same things becomes its wrapping branch",
        ),
        pytest.param(
            """
            import torch
            for name in self.model_names:
                if isinstance(name, str):
                    net = getattr(self, "net" + name)
                    setattr(self, "net" + name, torch.nn.DataParallel(net))
            """,
            "    if isinstance(name, str):\n        net = getattr(self, \"net\" + name)\n"
            "        setattr(self, \"net\" + name, wrap_ddp(net))\n",
            id="a type filter on the loop item stays around the wrap it selects for",
        ),
        pytest.param(
            """
            import torch
            nets = {"G": netG, "D": netD, "F": netF}
            for key, net in nets.items():
                if key in ("G", "D") and not isinstance(net, torch.nn.Identity):
                    nets[key] = torch.nn.DataParallel(net)
            """,
            '    if key in ("G", "D") and not isinstance(net, torch.nn.Identity):\n        nets[key] = wrap_ddp(net)\n',
            id="a filter on the loop items by name and type stays around the wrap",
        ),
    ],
)
def test_no_false_refusal(source: str, expected: str) -> None:
    result = _convert(source)
    assert expected in result.output
    assert not [f for f in result.findings if f.severity == "error"]


def test_a_rebinding_inside_a_branch_does_not_hide_a_later_cast() -> None:
    """Should still refuse: the rebinding runs on one branch only, the cast on every path."""
    source = """
        import torch
        model = torch.nn.DataParallel(net)
        print(model(x))
        if args.fresh:
            model = Net()
        model.half()
        """
    result = _convert(source)
    assert result.output == dedent(source)
    assert "DDP210" in {f.code for f in result.findings}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param(
            """
            import torch
            model = torch.nn.DataParallel(model)
            for x, y in loader:
                loss = model(x).sum()
                if bool(loss == 0):
                    continue
                loss.backward()
            """,
            "if bool(all_reduce_mean(loss.detach()) == 0):",
            id="a continue on the loss tests the loss averaged over processes",
        ),
        pytest.param(
            """
            import torch
            model = torch.nn.DataParallel(model)
            for x, y in loader:
                loss = model(x).sum()
                loss.backward()
                if torch.isnan(loss):
                    break
            """,
            "if torch.isnan(all_reduce_mean(loss.detach())):",
            id="a break on the loss tests the loss averaged over processes",
        ),
        pytest.param(
            """
            import torch
            model = torch.nn.DataParallel(model)
            for x, y in loader:
                loss = model(x).sum()
                if loss.item() < 1e-8:
                    continue
                loss.backward()
            """,
            "if all_reduce_mean(loss.item()) < 1e-8:",
            id="a continue on loss.item() averages the number",
        ),
    ],
)
def test_a_skip_on_the_loss_is_agreed_across_processes(source: str, expected: str) -> None:
    """Should convert, with every process taking the same branch: DataParallel's loss was the whole batch's."""
    result = _convert(source)
    assert expected in result.output
    assert "DDP224" in {f.code for f in result.findings}
    assert not [f for f in result.findings if f.severity == "error"]
    assert convert_source(result.output).output == result.output


def test_a_skip_on_the_batch_itself_stays_refused() -> None:
    """Should refuse: `x.size(0)` is this process's share, with no whole-batch value to agree on."""
    source = """
        import torch
        model = torch.nn.DataParallel(model)
        for x, y in loader:
            loss = model(x).sum()
            if x.size(0) < 2 or loss.item() < 1e-8:
                continue
            loss.backward()
        """
    result = _convert(source)
    assert result.output == dedent(source)
    assert "DDP220" in {f.code for f in result.findings}


def test_backward_passes_are_counted_on_one_pass_through_the_loop() -> None:
    """Should count 2 backward passes, not 3: the two branches of the if never run together."""
    result = _convert(
        """
        import torch
        model = torch.nn.DataParallel(model)
        for step, x in enumerate(loader):
            out = model(x)
            out.pow(2).mean().backward(retain_graph=True)
            if step % 2:
                out.mean().backward()
            else:
                out.sum().backward()
        """
    )
    (finding,) = [f for f in result.findings if f.code == "DDP221"]
    assert finding.message.startswith("2 backward passes for 1 forward pass of the wrapped model in one pass through this loop;")


def test_an_else_that_binds_what_the_wrapping_branch_does_not_stays_refused() -> None:
    """Should refuse: later code may read `single_device`, which only the `else` binds."""
    source = """
        import torch
        if torch.cuda.device_count() > 1:
            model = torch.nn.DataParallel(model)
        else:
            single_device = True
        """
    result = _convert(source)
    assert result.output == dedent(source)
    assert "DDP204" in {f.code for f in result.findings}


def test_set_device_of_gpu_zero_becomes_the_local_rank() -> None:
    """`torch.cuda.set_device(0)` after setup_distributed() would move every process to GPU 0."""
    result = _convert(
        """
        import torch
        torch.cuda.set_device(0)
        model = torch.nn.DataParallel(model)
        """
    )
    assert 'torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))' in result.output
    assert "DDP205" in {f.code for f in result.findings}


@pytest.mark.parametrize(
    "device",
    [
        pytest.param("args.gpu", id="an argument that defaults to 0"),
        pytest.param("cfg.GPU", id="a config value"),
    ],
)
def test_set_device_of_a_gpu_convert_cannot_resolve_leaves_the_file_as_it_was(device: str) -> None:
    """A conversion that pins every process to one GPU must never exit 0."""
    source = f"""
        import argparse
        import torch
        parser = argparse.ArgumentParser()
        parser.add_argument("--gpu", type=int, default=0)
        args = parser.parse_args()
        torch.cuda.set_device({device})
        model = torch.nn.DataParallel(model)
        """
    result = _convert(source)
    assert result.output == dedent(source)
    assert [f.code for f in result.findings if f.severity == "error"] == ["DDP226"]


def test_a_copy_of_the_gpu_parameter_is_followed_to_the_call() -> None:
    """`gpu_id = gpu; set_device(gpu_id)` in `train(gpu, args)` called as `train(0, args)`: the call passes the local rank."""
    result = _convert(
        """
        import torch
        def train(gpu, args):
            gpu_id = gpu
            torch.cuda.set_device(gpu_id)
            model = torch.nn.DataParallel(Net())
        train(0, args)
        """
    )
    assert 'train(int(os.environ.get("LOCAL_RANK", "0")), args)' in result.output
    assert not [f for f in result.findings if f.severity == "error"]


def test_a_checkpoint_loaded_through_the_wrapper_keeps_the_wrap_in_place_under_another_name() -> None:
    """`model = DataParallel(net); model.load_state_dict(ckpt); model.half()`: the `module.` keys fit only the wrapper."""
    source = """
        import torch
        model = torch.nn.DataParallel(net)
        model.load_state_dict(torch.load("ckpt.pt"))
        model.half()
        """
    result = _convert(source)
    assert result.output == dedent(source)
    assert "DDP210" in {f.code for f in result.findings}


def test_a_checkpoint_loaded_under_the_wraps_own_name_takes_either_key_spelling() -> None:
    """Under the same name the load moves before the wrap as `load_model_state`, which reads `module.` keys too."""
    result = _convert(
        """
        import torch
        model = torch.nn.DataParallel(model)
        model.load_state_dict(torch.load("ckpt.pt"))
        model.half()
        """
    )
    assert 'load_model_state(model, torch.load("ckpt.pt", map_location=local_device()))\nmodel.half()\nmodel = wrap_ddp(model)\n' in result.output


@pytest.mark.parametrize(
    "condition",
    ["device == TorchDevice.CUDA and torch.cuda.device_count() > 1", "self.parallel", "config['parallel']", "args.device"],
)
def test_a_wrap_under_a_condition_on_the_devices_or_a_parallel_switch_converts(condition: str) -> None:
    """The devices a run was given and a DataParallel switch are the same on every process: the wrap leaves
    the condition, where DDP207 once refused the file as "not about GPUs"."""
    result = _convert(
        f"""
        import torch
        import torch.nn as nn


        class Trainer:
            def build(self, model, device, config, args):
                if {condition}:
                    model = nn.DataParallel(model)
                return model
        """
    )
    assert "DDP207" not in _codes(result) and not [c for c in _codes(result) if c.endswith("DDP207")], result.findings
    assert "wrap_ddp(model)" in result.output


def test_a_penalty_added_to_the_loss_of_a_wrapped_attribute_converts() -> None:
    """`self.D = nn.DataParallel(self.D)`, then a gradient penalty added to the loss of `self.D`'s own forwards and
    back-propagated with it: DDP averages it with the rest, so DDP222 (penalty alone) does not hold."""
    result = _convert(
        """
        import torch
        import torch.nn as nn


        class Trainer:
            def __init__(self, D, loader):
                self.D = D
                self.loader = loader
                self.build_model()

            def build_model(self):
                self.D = nn.DataParallel(self.D)
                self.optimizer = torch.optim.Adam(self.D.parameters())

            def train(self):
                for real in self.loader:
                    out_real, _ = self.D(real)
                    if self.loss == "hinge":
                        loss_real = torch.relu(1.0 - out_real).mean()
                    else:
                        loss_real = -out_real.mean()
                    mixed = real.detach().requires_grad_(True)
                    out, _ = self.D(mixed)
                    grad = torch.autograd.grad(out.sum(), mixed, create_graph=True)[0]
                    loss = loss_real + ((grad.norm(dim=1) - 1) ** 2).mean()
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
        """
    )
    assert not [code for code in _codes(result) if code.endswith("DDP222")], result.findings


def test_a_forward_through_a_slice_of_its_blocks_passes_find_unused_parameters() -> None:
    """A progressive network runs `self.blocks[:self.depth]`: the deeper blocks get no gradient until it grows, and
    DDP without find_unused_parameters stops at the second step (pro_gan_pytorch)."""
    result = _convert(
        """
        import torch
        import torch.nn as nn


        class Generator(nn.Module):
            def __init__(self):
                super().__init__()
                self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
                self.depth = 1

            def forward(self, x):
                for block in self.blocks[: self.depth]:
                    x = block(x)
                return x


        if __name__ == "__main__":
            model = nn.DataParallel(Generator())
            print(model(torch.randn(2, 4)))
        """
    )
    assert "wrap_ddp(Generator(), find_unused_parameters=True)" in result.output, result.findings
    assert [code for code in _codes(result) if code.endswith("DDP215")], result.findings


@pytest.mark.parametrize(
    "forward, unused",
    [
        ("return self.f[0](x) * self.f[1](x)", True),  # ban-vqa's Counter reads 8 of its 16
        ("return self.f[0](x) * self.f[1](x) * self.f[2](x)", False),
        ("return sum(f(x) for f in self.f)", False),
    ],
)
def test_a_list_of_modules_read_by_constant_indices_only_in_part_passes_find_unused_parameters(forward: str, unused: bool) -> None:
    """`self.f = nn.ModuleList([... for _ in range(3)])` read as `self.f[0]` and `self.f[1]` only: `self.f[2]` gets no
    gradient, and DDP stopped at the second step on every process (ban-vqa's counting module)."""
    result = _convert(
        """
        import torch
        import torch.nn as nn


        class Counter(nn.Module):
            def __init__(self):
                super().__init__()
                self.f = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])

            def forward(self, x):
                FORWARD


        if __name__ == "__main__":
            model = nn.DataParallel(Counter())
            print(model(torch.randn(2, 4)))
        """.replace("FORWARD", forward)
    )
    assert ("wrap_ddp(Counter(), find_unused_parameters=True)" in result.output) is unused, result.findings


def test_an_optimizer_over_a_model_a_wrapped_trainer_holds_is_no_unwrapped_module() -> None:
    """`trainer = DiffusionTrainer(net)`, then `trainer = DataParallel(trainer)`: DDP of the trainer registers the
    net's parameters as its own, so stepping `net.parameters()` steps synchronised parameters (no DDP223)."""
    result = _convert(
        """
        import torch
        from torch import nn

        class DiffusionTrainer(nn.Module):
            def __init__(self, net):
                super().__init__()
                self.net = net

            def forward(self, x):
                return self.net(x).pow(2).mean()

        net = nn.Linear(4, 4)
        optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
        trainer = DiffusionTrainer(net)
        trainer = torch.nn.DataParallel(trainer)
        """
    )
    assert "DDP223" not in {f.code for f in result.findings}
    assert result.changed
