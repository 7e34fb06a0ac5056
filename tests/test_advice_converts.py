"""Every error's advice, followed, leads to a conversion.

An error (a blocking code) leaves the whole file as it was and tells the user what to
change. Each case is a script that triggers exactly that code, and the same script
rewritten the way the code's "Use instead" says: the first must be refused, the
second must convert. A blocking code without a case fails the suite, so a new code
cannot ship advice nobody has followed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from textwrap import dedent

import pytest

from dp2ddp.api import ConvertOptions, convert_source
from dp2ddp.rules import RULES, is_check_rule

pytest.importorskip("torch")

# The training step every case shares, after its own model set-up; `model` is the wrapped model.
TRAIN = """
loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""

HEADER = """
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--parallel", action="store_true")
parser.add_argument("--half", action="store_true")
parser.add_argument("--device", default="cuda:1")
args = parser.parse_args()
"""


def _script(body: str, train: str = TRAIN) -> str:
    return dedent(HEADER) + dedent(body) + dedent(train)


CASES = [
    pytest.param(
        "DDP202",
        _script(
            """
            model = nn.Linear(4, 1)
            """,
            TRAIN.replace("model(x)", "nn.parallel.data_parallel(model, x, device_ids=[0, 1])"),
        ),
        _script(
            """
            model = nn.DataParallel(nn.Linear(4, 1), device_ids=[0, 1])
            """
        ),
        id="a functional data_parallel converts once the module is called directly and wrapped where it is built",
    ),
    pytest.param(
        "DDP234",
        _script(
            """
            from sync_batchnorm import DataParallelWithCallback
            model = DataParallelWithCallback(nn.Linear(4, 1), device_ids=[0, 1])
            """
        ),
        _script(
            """
            model = nn.DataParallel(nn.Linear(4, 1), device_ids=[0, 1])
            """
        ),
        id="a wrap in a DataParallel-like class of unread code converts once it is nn.DataParallel itself",
    ),
    pytest.param(
        "DDP102",
        "from mylib import *\nfrom torch.utils.data import DataLoader, TensorDataset\n\n"
        "model = torch.nn.DataParallel(torch.nn.Linear(4, 1))\n" + dedent(TRAIN),
        "import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\nfrom mylib import *\n\n"
        "model = torch.nn.DataParallel(torch.nn.Linear(4, 1))\n" + dedent(TRAIN),
        id="a wrap only a star import could bind converts once torch is imported by name",
    ),
    pytest.param(
        "DDP204",
        _script(
            """
            model = nn.Linear(4, 1)
            if torch.cuda.device_count() > 1:
                model = nn.DataParallel(model)
            else:
                single_device = True
            """
        ),
        _script(
            """
            model = nn.Linear(4, 1)
            model = nn.DataParallel(model)
            """
        ),
        id="a wrap in an if with an else converts once it is unconditional",
    ),
    pytest.param(
        "DDP207",
        _script(
            """
            model = nn.Linear(4, 1)
            if args.teacher:
                model = nn.DataParallel(model)
            """
        ),
        _script(
            """
            model = nn.Linear(4, 1)
            model = nn.DataParallel(model)
            """
        ),
        id="a wrap under a flag converts once the wrap is right in every mode and made unconditional",
    ),
    pytest.param(
        "DDP210",
        _script(
            """
            net = nn.Linear(4, 1)
            model = nn.DataParallel(net)
            print(model(torch.zeros(1, 4)))
            if args.half:
                model.half()
            """
        ),
        _script(
            """
            net = nn.Linear(4, 1)
            if args.half:
                net.half()
            model = nn.DataParallel(net)
            """
        ),
        id="a cast after the wrap converts once it moves before the wrap",
    ),
    pytest.param(
        "DDP211",
        _script(
            """
            def init_weights(m):
                if isinstance(m, nn.Linear):
                    nn.init.xavier_uniform_(m.weight)


            base = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
            model = nn.DataParallel(base)
            print(model(torch.zeros(1, 4)))
            base.apply(init_weights)
            """
        ),
        _script(
            """
            def init_weights(m):
                if isinstance(m, nn.Linear):
                    nn.init.xavier_uniform_(m.weight)


            base = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
            base.apply(init_weights)
            model = nn.DataParallel(base)
            """
        ),
        id="initialising weights after the wrap converts once it moves before the wrap",
    ),
    pytest.param(
        "DDP212",
        _script(
            """
            model = nn.DataParallel(nn.Linear(4, 1))
            print(model(torch.zeros(1, 4)))
            model = model.to(args.device)
            """
        ),
        _script(
            """
            model = nn.Linear(4, 1).to("cuda" if torch.cuda.is_available() else "cpu")
            model = nn.DataParallel(model)
            """
        ),
        id="a move to a configured device after the wrap converts once it moves before the wrap to this process's device",
    ),
    pytest.param(
        "DDP218",
        _script(
            """
            def build(gpu):
                if torch.cuda.is_available():
                    torch.cuda.set_device(gpu)
                return nn.DataParallel(nn.Linear(4, 1))


            settings = {"gpu": 1}
            model = build(settings["gpu"])
            """
        ),
        _script(
            """
            import os


            def build(gpu):
                if torch.cuda.is_available():
                    torch.cuda.set_device(gpu)
                return nn.DataParallel(nn.Linear(4, 1))


            model = build(int(os.environ.get("LOCAL_RANK", "0")))
            """
        ),
        id="a GPU picked by a parameter converts once every call passes the local rank",
    ),
    pytest.param(
        "DDP226",
        _script(
            """
            if torch.cuda.is_available():
                torch.cuda.set_device(args.gpu)
            model = nn.DataParallel(nn.Linear(4, 1))
            """
        ).replace('parser.add_argument("--half"', 'parser.add_argument("--gpu", type=int, default=0)\nparser.add_argument("--half"'),
        _script(
            """
            import os

            if torch.cuda.is_available():
                torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
            model = nn.DataParallel(nn.Linear(4, 1))
            """
        ),
        id="selecting a GPU by an argument converts once it selects the local rank",
    ),
    pytest.param(
        "DDP220",
        _script(
            "model = nn.DataParallel(nn.Linear(4, 1))\n",
            """
            loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
            optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
            for epoch in range(2):
                for x, y in loader:
                    loss = nn.functional.mse_loss(model(x), y)
                    if bool(loss == 0) or torch.isnan(loss):
                        continue
                    optimizer.zero_grad()
                    try:
                        loss.backward()
                    except RuntimeError:
                        continue
                    optimizer.step()
            """,
        ),
        _script(
            "model = nn.DataParallel(nn.Linear(4, 1))\n",
            """
            loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
            optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
            for epoch in range(2):
                for x, y in loader:
                    loss = nn.functional.mse_loss(model(x), y)
                    optimizer.zero_grad()
                    loss.backward()
                    grads = [p.grad for p in model.parameters() if p.grad is not None]
                    if all(g.isfinite().all() for g in grads) and any(g.any() for g in grads):
                        optimizer.step()
            """,
        ),
        id="a skipped backward converts once every process back-propagates and the step is decided on the averaged gradients",
    ),
    pytest.param(
        "DDP221",
        _script(
            "model = nn.DataParallel(nn.Linear(4, 1))\n",
            """
            loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(2):
                for x, y in loader:
                    out = model(x)
                    fit = nn.functional.mse_loss(out, y)
                    small = out.pow(2).mean()
                    optimizer.zero_grad()
                    fit.backward(retain_graph=True)
                    small.backward()
                    optimizer.step()
            """,
        ),
        _script(
            "model = nn.DataParallel(nn.Linear(4, 1))\n",
            """
            loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(2):
                for x, y in loader:
                    out = model(x)
                    fit = nn.functional.mse_loss(out, y)
                    small = out.pow(2).mean()
                    optimizer.zero_grad()
                    (fit + small).backward()
                    optimizer.step()
            """,
        ),
        id="two backward passes through one forward convert once the losses are summed into one",
    ),
    pytest.param(
        "DDP241",
        _script(
            "net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))\n"
            "net[0].requires_grad_(False)\nmodel = nn.DataParallel(net)\n",
            """
            loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
            optimizer = torch.optim.SGD(model.module[2].parameters(), lr=0.1)
            for epoch in range(2):
                if epoch == 1:
                    model.module[0].requires_grad_(True)
                    optimizer.add_param_group({"params": model.module[0].parameters()})
                for x, y in loader:
                    loss = nn.functional.mse_loss(model(x), y)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
            """,
        ),
        # trainable before the wrap, kept out of the optimizer until the epoch it joins
        _script(
            "net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))\nmodel = nn.DataParallel(net)\n",
            """
            loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
            optimizer = torch.optim.SGD(model.module[2].parameters(), lr=0.1)
            for epoch in range(2):
                if epoch == 1:
                    optimizer.add_param_group({"params": model.module[0].parameters()})
                for x, y in loader:
                    loss = nn.functional.mse_loss(model(x), y)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
            """,
        ),
    ),
    pytest.param(
        "DDP249",
        _script(
            "model = nn.DataParallel(nn.Linear(4, 1))\n",
            """
            loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            last = 10.0
            for epoch in range(2):
                for x, y in loader:
                    loss = nn.functional.mse_loss(model(x), y)
                    optimizer.zero_grad()
                    loss.backward()
                    if loss.item() < 3 * last:
                        optimizer.step()
                        last = loss.item()
            """,
        ),
        # the test of the loss itself, which convert averages over processes
        _script(
            "model = nn.DataParallel(nn.Linear(4, 1))\n",
            """
            loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(2):
                for x, y in loader:
                    loss = nn.functional.mse_loss(model(x), y)
                    optimizer.zero_grad()
                    loss.backward()
                    if loss.item() < 30:
                        optimizer.step()
            """,
        ),
    ),
    pytest.param(
        "DDP250",
        _script(
            """
            class Search(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.op = nn.Linear(4, 1)
                    self.alphas = torch.zeros(2, requires_grad=True)

                def arch_parameters(self):
                    return [self.alphas]

                def forward(self, x):
                    return self.op(x) * self.alphas.softmax(0)[0]


            model = nn.DataParallel(Search())
            """,
            """
            loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
            optimizer = torch.optim.SGD(model.module.op.parameters(), lr=0.1)
            optimizer_a = torch.optim.Adam(model.module.arch_parameters(), lr=0.01)
            for epoch in range(2):
                for x, y in loader:
                    loss = nn.functional.mse_loss(model(x), y)
                    optimizer.zero_grad()
                    optimizer_a.zero_grad()
                    loss.backward()
                    optimizer.step()
                    optimizer_a.step()
            """,
        ),
        # registered as a parameter; the weights' optimizer was already built from the other parameters
        _script(
            """
            class Search(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.op = nn.Linear(4, 1)
                    self.alphas = nn.Parameter(torch.zeros(2))

                def arch_parameters(self):
                    return [self.alphas]

                def forward(self, x):
                    return self.op(x) * self.alphas.softmax(0)[0]


            model = nn.DataParallel(Search())
            """,
            """
            loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
            optimizer = torch.optim.SGD(model.module.op.parameters(), lr=0.1)
            optimizer_a = torch.optim.Adam(model.module.arch_parameters(), lr=0.01)
            for epoch in range(2):
                for x, y in loader:
                    loss = nn.functional.mse_loss(model(x), y)
                    optimizer.zero_grad()
                    optimizer_a.zero_grad()
                    loss.backward()
                    optimizer.step()
                    optimizer_a.step()
            """,
        ),
    ),
    pytest.param(
        "DDP242",
        _script(
            "from backbones import Net\nmodel = nn.DataParallel(Net())\n",
            """
            loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
            optimizer = torch.optim.SGD(model.module.head.parameters(), lr=0.1)
            for epoch in range(2):
                if model.module.features.unfix(epoch / 2):
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for x, y in loader:
                    loss = nn.functional.mse_loss(model(x), y)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
            """,
        ),
        # trainable before the wrap, joining the optimizer when the schedule says
        _script(
            "from backbones import Net\nnet = Net()\nnet.features.unfix(1.0)\nmodel = nn.DataParallel(net)\n",
            """
            loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
            optimizer = torch.optim.SGD(model.module.head.parameters(), lr=0.1)
            for epoch in range(2):
                if epoch == 1:
                    optimizer.add_param_group({"params": model.module.features.parameters()})
                for x, y in loader:
                    loss = nn.functional.mse_loss(model(x), y)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
            """,
        ),
        id="an optimizer built again after a method convert cannot read converts once it is extended instead",
    ),
    pytest.param(
        "DDP222",
        _script(
            "model = nn.DataParallel(nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)))\n",
            """
            loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 4)), batch_size=8, shuffle=True)
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
            for epoch in range(2):
                for real, fake in loader:
                    optimizer.zero_grad()
                    (model(fake).mean() - model(real).mean()).backward()
                    eps = torch.rand(real.size(0), 1)
                    mixed = (eps * real + (1 - eps) * fake).requires_grad_(True)
                    grads = torch.autograd.grad(model(mixed).sum(), mixed, create_graph=True)[0]
                    penalty = ((grads.norm(2, dim=1) - 1) ** 2).mean()
                    (10 * penalty).backward()
                    optimizer.step()
            """,
        ),
        _script(
            "model = nn.DataParallel(nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)))\n",
            """
            loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 4)), batch_size=8, shuffle=True)
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
            for epoch in range(2):
                for real, fake in loader:
                    optimizer.zero_grad()
                    eps = torch.rand(real.size(0), 1)
                    mixed = (eps * real + (1 - eps) * fake).requires_grad_(True)
                    grads = torch.autograd.grad(model(mixed).sum(), mixed, create_graph=True)[0]
                    penalty = ((grads.norm(2, dim=1) - 1) ** 2).mean()
                    loss = model(fake).mean() - model(real).mean() + 10 * penalty
                    loss.backward()
                    optimizer.step()
            """,
        ),
        id="a gradient penalty back-propagated alone converts once it joins the loss in one backward",
    ),
    pytest.param(
        "DDP223",
        _script(
            """
            backbone = nn.Linear(4, 8)
            head = nn.Linear(8, 1)
            net = nn.DataParallel(backbone)
            model = lambda x: head(net(x))
            optimizer = torch.optim.SGD([*backbone.parameters(), *head.parameters()], lr=0.1)
            """,
            TRAIN.replace("optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n", ""),
        ),
        _script(
            """
            backbone = nn.Linear(4, 8)
            head = nn.Linear(8, 1)
            model = nn.DataParallel(nn.Sequential(backbone, head))
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            """,
            TRAIN.replace("optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n", ""),
        ),
        id="an optimizer over a module no wrap holds converts once the wrap holds both",
    ),
    pytest.param(
        "DDP301",
        _script(
            """
            model = nn.DataParallel(nn.Linear(4, 1))
            data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
            batches = None
            if args.half:
                batches = torch.utils.data.BatchSampler(torch.utils.data.RandomSampler(data), 8, False)
            """,
            TRAIN.replace(
                "DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)",
                "DataLoader(data, batch_sampler=batches)",
            ),
        ),
        _script(
            """
            model = nn.DataParallel(nn.Linear(4, 1))
            data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
            batches = torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(data), 8, False)
            if args.half:
                batches = torch.utils.data.BatchSampler(torch.utils.data.RandomSampler(data), 8, False)
            """,
            TRAIN.replace(
                "DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)",
                "DataLoader(data, batch_sampler=batches)",
            ),
        ),
        id="a sampler that is sometimes None converts once every path builds one",
    ),
    pytest.param(
        "DDP317",
        _script(
            "from data import build_loader\n\nmodel = nn.DataParallel(nn.Linear(4, 1))\n",
            TRAIN.replace(
                "DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)",
                "build_loader(batch_size=8)",
            ),
        ),
        _script(
            "from data import build_dataset\n\nmodel = nn.DataParallel(nn.Linear(4, 1))\n",
            TRAIN.replace("TensorDataset(torch.randn(32, 4), torch.randn(32, 1))", "build_dataset()"),
        ),
        id="batches from a loader of another module convert once the DataLoader is built in this file",
    ),
    pytest.param(
        "DDP302",
        _script(
            """
            from torch.utils.data import IterableDataset


            class Stream(IterableDataset):
                def __iter__(self):
                    for index in range(32):
                        yield torch.randn(4), torch.randn(1)


            model = nn.DataParallel(nn.Linear(4, 1))
            """,
            TRAIN.replace("TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True", "Stream(), batch_size=8"),
        ),
        _script(
            """
            import torch.distributed as dist
            from torch.utils.data import IterableDataset


            class Stream(IterableDataset):
                def __iter__(self):
                    rank, world_size = dist.get_rank(), dist.get_world_size()
                    for index in range(32):
                        if index % world_size == rank:
                            yield torch.randn(4), torch.randn(1)


            model = nn.DataParallel(nn.Linear(4, 1))
            """,
            TRAIN.replace("TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True", "Stream(), batch_size=8"),
        ),
        id="an iterable dataset converts once its __iter__ yields this process's share",
    ),
    pytest.param(
        "DDP304",
        _script(
            "model = nn.DataParallel(nn.Linear(4, 1))\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n",
            """
            for x, y in DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True):
                loss = nn.functional.mse_loss(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            """,
        ),
        _script(
            "model = nn.DataParallel(nn.Linear(4, 1))\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n",
            """
            dataset = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
            for x, y in DataLoader(dataset, batch_size=8, shuffle=True):
                loss = nn.functional.mse_loss(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            """,
        ),
        id="a dataset built inside a loader a for loop iterates converts once it is bound to a name",
    ),
    pytest.param(
        "DDP314",
        _script(
            "model = nn.DataParallel(nn.Linear(4, 1))\ntrain_kwargs = dict(batch_size=8, shuffle=True)\n",
            TRAIN.replace("batch_size=8, shuffle=True)", "**train_kwargs)"),
        ),
        _script("model = nn.DataParallel(nn.Linear(4, 1))\n"),
        id="loader arguments unpacked from a dict convert cannot read convert once they are passed by keyword",
    ),
    pytest.param(
        "DDP324",
        _script(
            "model = nn.DataParallel(nn.Linear(4, 1))\n",
            """
            loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=16, shuffle=True,
                                collate_fn=lambda items: [default_collate(items[:8]), default_collate(items[8:])])
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(2):
                for group in loader:
                    for x, y in group:
                        loss = nn.functional.mse_loss(model(x), y)
                        optimizer.zero_grad()
                        loss.backward()
                        optimizer.step()
            """,
        ).replace("import DataLoader,", "import DataLoader, default_collate,"),
        _script("model = nn.DataParallel(nn.Linear(4, 1))\n"),
        id="a loader whose batch is a group of batches converts once it yields the batch a step trains on",
    ),
    pytest.param(
        "DDP325",
        _script(
            "",
            """
            from engines import Engine


            def main():
                model = nn.DataParallel(nn.Linear(4, 1))
                Engine(model, torch.optim.SGD(model.parameters(), lr=0.1)).run(epochs=2)


            if __name__ == "__main__":
                main()
            """,
        ),
        dedent(HEADER)
        + "\n\ndef main():\n    model = nn.DataParallel(nn.Linear(4, 1))\n"
        + "\n".join("    " + line for line in dedent(TRAIN).strip().splitlines())
        + '\n\n\nif __name__ == "__main__":\n    main()\n',
        id="a script that trains through another module converts once its loader and loop are here",
    ),
    pytest.param(
        "DDP227",
        _script(
            """
            def build():
                model = nn.DataParallel(nn.Sequential(nn.Linear(4, 4)))
                return model


            model = build()
            model.module.head = nn.Linear(4, 1)
            """
        ),
        _script(
            """
            def build():
                net = nn.Sequential(nn.Linear(4, 4))
                net.head = nn.Linear(4, 1)
                model = nn.DataParallel(net)
                return model


            model = build()
            """
        ),
        id="a new part after the wrap, in another function, converts once it is added before the wrap",
    ),
]


# Errors only a project has: each case is a folder (path -> source), converted as one project.
# A trainer of another module that loops over the data its constructor keeps.
_TRAINER_MODULE = (
    "import torch.nn as nn\n\n\nclass Trainer:\n    def __init__(self, model, data_iter, optimizer):\n"
    "        self.model, self.data_iter, self.optimizer = model, data_iter, optimizer\n"
    "        self.batches = data_iter\n\n"
    "    def train(self, epochs):\n        for epoch in range(epochs):\n            for x, y in self.batches:\n"
    "                loss = nn.functional.mse_loss(self.model(x), y)\n                self.optimizer.zero_grad()\n"
    "                loss.backward()\n                self.optimizer.step()\n"
)

PROJECT_CASES = [
    pytest.param(
        "DDP228",
        {
            "model.py": "import torch.nn as nn\n\n\ndef build():\n    return nn.DataParallel(nn.Sequential(nn.Linear(4, 4)))\n",
            "train.py": dedent(HEADER)
            + "from model import build\n\n\ndef main():\n    model = build()\n    model.module.head = nn.Linear(4, 1)\n"
            + "\n".join("    " + line for line in dedent(TRAIN).strip().splitlines())
            + '\n\n\nif __name__ == "__main__":\n    main()\n',
        },
        {
            "model.py": "import torch.nn as nn\n\n\ndef build(head=None):\n    net = nn.Sequential(nn.Linear(4, 4))\n"
            "    if head is not None:\n        net.head = head\n    return nn.DataParallel(net)\n",
            "train.py": dedent(HEADER)
            + "from model import build\n\n\ndef main():\n    model = build(head=nn.Linear(4, 1))\n"
            + "\n".join("    " + line for line in dedent(TRAIN).strip().splitlines())
            + '\n\n\nif __name__ == "__main__":\n    main()\n',
        },
        id="a new part after a factory's wrap converts once the factory builds it before its wrap",
    ),
    pytest.param(
        "DDP229",
        {
            "parallel.py": "import torch.nn as nn\n\n\nclass CallbackDataParallel(nn.DataParallel):\n"
            "    def replicate(self, module, device_ids):\n        return super().replicate(module, device_ids)\n",
            "train.py": dedent(HEADER)
            + "from parallel import CallbackDataParallel\n\n\ndef main():\n    model = CallbackDataParallel(nn.Linear(4, 1))\n"
            + "\n".join("    " + line for line in dedent(TRAIN).strip().splitlines())
            + '\n\n\nif __name__ == "__main__":\n    main()\n',
        },
        {
            "parallel.py": "import torch.nn as nn\n\n\nclass CallbackDataParallel(nn.DataParallel):\n"
            "    def replicate(self, module, device_ids):\n        return super().replicate(module, device_ids)\n",
            "train.py": dedent(HEADER)
            + "\n\ndef main():\n    model = nn.DataParallel(nn.Linear(4, 1))\n"
            + "\n".join("    " + line for line in dedent(TRAIN).strip().splitlines())
            + '\n\n\nif __name__ == "__main__":\n    main()\n',
        },
        id="a wrap in another module's DataParallel subclass converts once it is nn.DataParallel itself",
    ),
    pytest.param(
        "DDP230",
        {
            "options.py": "import torch\n\n\ndef select(gpu):\n    if torch.cuda.is_available():\n        torch.cuda.set_device(gpu)\n",
            "train.py": dedent(HEADER)
            + "from options import select\n\n\ndef main():\n    select(0)\n    model = nn.DataParallel(nn.Linear(4, 1))\n"
            + "\n".join("    " + line for line in dedent(TRAIN).strip().splitlines())
            + '\n\n\nif __name__ == "__main__":\n    main()\n',
        },
        {
            "options.py": "import os\n\nimport torch\n\n\ndef select(gpu):\n    if torch.cuda.is_available():\n"
            "        torch.cuda.set_device(int(os.environ.get(\"LOCAL_RANK\", gpu)))\n",
            "train.py": dedent(HEADER)
            + "from options import select\n\n\ndef main():\n    select(0)\n    model = nn.DataParallel(nn.Linear(4, 1))\n"
            + "\n".join("    " + line for line in dedent(TRAIN).strip().splitlines())
            + '\n\n\nif __name__ == "__main__":\n    main()\n',
        },
        id="a GPU selected in an options module converts once it is the local rank",
    ),
    pytest.param(
        "DDP345",
        {
            "trainer.py": _TRAINER_MODULE,
            "train.py": dedent(HEADER)
            + "from trainer import Trainer\n\n\nclass Pairs:\n    def __init__(self, x, y, batch_size):\n"
            "        self.x, self.y, self.batch_size = x, y, batch_size\n\n    def __iter__(self):\n"
            "        for i in range(0, len(self.x), self.batch_size):\n"
            "            yield self.x[i:i + self.batch_size], self.y[i:i + self.batch_size]\n\n\n"
            "def main():\n    model = nn.DataParallel(nn.Linear(4, 1))\n"
            "    data = Pairs(torch.randn(32, 4), torch.randn(32, 1), 8)\n"
            "    Trainer(model, data, torch.optim.SGD(model.parameters(), lr=0.1)).train(2)\n"
            '\n\nif __name__ == "__main__":\n    main()\n',
        },
        {
            "trainer.py": _TRAINER_MODULE,
            "train.py": dedent(HEADER)
            + "from trainer import Trainer\n\n\ndef main():\n    model = nn.DataParallel(nn.Linear(4, 1))\n"
            "    data = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)\n"
            "    Trainer(model, data, torch.optim.SGD(model.parameters(), lr=0.1)).train(2)\n"
            '\n\nif __name__ == "__main__":\n    main()\n',
        },
        id="an iterator handed to another module's trainer converts once it is a DataLoader",
    ),
    pytest.param(
        "DDP346",
        {
            "data.py": "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\n"
            "spare_loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)\n",
            "train.py": dedent(HEADER)
            + "from data import *\n\n\ndef main():\n    model = nn.DataParallel(nn.Linear(4, 1))\n"
            + "\n".join("    " + line for line in dedent(TRAIN).strip().splitlines())
            + '\n\n\nif __name__ == "__main__":\n    main()\n',
        },
        {
            "data.py": "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\ndef spare_loader():\n"
            "    return DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)\n",
            "train.py": dedent(HEADER)
            + "from data import *\n\n\ndef main():\n    model = nn.DataParallel(nn.Linear(4, 1))\n"
            + "\n".join("    " + line for line in dedent(TRAIN).strip().splitlines())
            + '\n\n\nif __name__ == "__main__":\n    main()\n',
        },
        id="a loader an imported module builds at import converts once a function builds it",
    ),
]


# Errors only an option raises: their advice is to drop the option (test_dropping_the_option_converts).
OPTION_CODES = {"DDP107"}
# Raised only where convert's own output fails check: no input is known to reach it (tests/test_output_check.py
# holds it on a crafted output), and its advice is to report the script.
SAFETY_NET_CODES = {"DDP110"}


def _blocking_convert_codes() -> set[str]:
    """The codes that make convert leave a file as it was: errors, without check's DDP5xx."""
    return {
        code for code, rule in RULES.items() if rule.severity == "error" and not is_check_rule(code)
    } - OPTION_CODES - SAFETY_NET_CODES


@pytest.mark.parametrize(
    "options",
    [
        pytest.param(ConvertOptions(skip=("replace_data_parallel",)), id="skipping the wrap"),
        pytest.param(ConvertOptions(skip=("add_distributed_sampler",)), id="skipping the sampler"),
        pytest.param(ConvertOptions(only=("replace_data_parallel", "add_launch_wrapper")), id="only wrap and launch"),
    ],
)
def test_dropping_the_option_converts(options: ConvertOptions) -> None:
    """Should refuse with DDP107 where an option leaves the wrap or the split out, and convert without it."""
    script = "import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\n\n" + (
        "model = nn.DataParallel(nn.Linear(4, 1))\n" + dedent(TRAIN)
    )
    refused = convert_source(script, options)
    assert not refused.changed
    assert {f.code for f in refused.findings if f.severity == "error"} == {"DDP107"}, refused.findings
    assert convert_source(script).changed


def test_every_blocking_code_has_advice_that_converts() -> None:
    """Should fail when an error code has no case below: its advice was never followed."""
    covered = {case.values[0] for case in CASES + PROJECT_CASES}
    assert _blocking_convert_codes() - covered == set(), "add a case to CASES for each of these codes"
    assert covered - _blocking_convert_codes() == set(), "a case names a code that is not a blocking convert code"


@pytest.mark.parametrize(("code", "before", "advised"), CASES)
def test_advice_followed_converts(code: str, before: str, advised: str) -> None:
    refused = convert_source(before)
    assert not refused.changed
    assert {f.code for f in refused.findings if f.severity == "error"} == {code}, refused.findings

    converted = convert_source(advised)
    assert converted.changed, converted.reason
    assert [f for f in converted.findings if f.severity == "error"] == []
    compile(converted.output, f"<{code} advised, converted>", "exec")


@pytest.mark.parametrize(("code", "before", "advised"), PROJECT_CASES)
def test_project_advice_followed_converts(code: str, before: dict[str, str], advised: dict[str, str], tmp_path: Path) -> None:
    from dp2ddp.api import ConvertResult
    from dp2ddp.projects import convert_project

    def convert(files: dict[str, str]) -> dict[str, ConvertResult]:
        sources = {tmp_path / name: text for name, text in files.items()}
        result = convert_project(tmp_path, sources)
        assert all(isinstance(r, ConvertResult) for r in result.files.values()), result.files
        return {path.name: r for path, r in result.files.items()}  # type: ignore[misc]

    refused = convert(before)
    assert not any(r.changed for r in refused.values()), "a refused program must leave every file as it was"
    assert {f.code for r in refused.values() for f in r.findings if f.severity == "error"} == {code}

    converted = convert(advised)
    assert converted["train.py"].changed, converted["train.py"].reason
    assert [f for r in converted.values() for f in r.findings if f.severity == "error"] == []
    for name, r in converted.items():
        compile(r.output, f"<{code} advised, {name} converted>", "exec")


# -- advice of warnings that once led nowhere ------------------------------------------------


def test_a_batch_sampler_is_split_batch_by_batch() -> None:
    """A BatchSampler (once refused with advice) is wrapped: each process takes its share of every batch."""
    body = "model = nn.DataParallel(nn.Linear(4, 1))\n"
    train = TRAIN.replace(
        "batch_size=8, shuffle=True)",
        "batch_sampler=BatchSampler(RandomSampler(range(32)), batch_size=8, drop_last=True))",
    )
    before = _script(body, train).replace(
        "from torch.utils.data import DataLoader, TensorDataset",
        "from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset",
    )
    converted = convert_source(before)
    assert "batch_sampler=ShardedSampler(BatchSampler(RandomSampler(range(32)), batch_size=8, drop_last=True), split_batches=True)" in converted.output
    assert "loader.batch_sampler.set_epoch(epoch)" in converted.output
    assert [f.code for f in converted.findings if f.severity != "note"] == []


RUN_SCRIPT = '''\
import os

import torch
import torch.distributed as dist
import torch.nn as nn

from trainer import Trainer

if __name__ == "__main__":
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    torch.manual_seed(0)
    trainer = Trainer(nn.Linear(4, 1))
    trainer.fit(2)
    weights = trainer.model.module.weight.detach().clone()
    others = [torch.zeros_like(weights) for _ in range(dist.get_world_size())]
    dist.all_gather(others, weights)
    assert all(torch.equal(weights, other) for other in others)
    rank = dist.get_rank()
    if rank == 0:
        print("replicas agree")
    dist.barrier()  # every process leaves together
    dist.destroy_process_group()
    open(f"finished{rank}", "w").close()
'''

TRAINER = '''\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Trainer:
    def __init__(self, model):
        self.model = nn.DataParallel(model)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)

    def fit(self, epochs):
        torch.manual_seed(1)
        data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
        loader = DataLoader(data, batch_size=8, shuffle=True)
        for epoch in range(epochs):
            for x, y in loader:
                loss = nn.functional.mse_loss(self.model(x), y)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
'''


def test_no_entry_point_advice_trains_under_torchrun(tmp_path: Path) -> None:
    """DDP101: the converted trainer, driven by a run script written as `explain DDP101` says, trains in step."""
    from tests.test_end_to_end import GLOO_EXIT_ABORT, finished_despite_exit_abort, run_bounded

    trainer = convert_source(TRAINER)
    assert "DDP101" in {f.code for f in trainer.findings}
    assert "init_process_group" in (RULES["DDP101"].doc or "")
    (tmp_path / "trainer.py").write_text(trainer.output, encoding="utf-8")
    (tmp_path / "run.py").write_text(RUN_SCRIPT, encoding="utf-8")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "--", "run.py"]
    for _ in range(3):
        for rank in range(2):
            (tmp_path / f"finished{rank}").unlink(missing_ok=True)
        done = run_bounded(command, tmp_path)
        # gloo now and then aborts a process at exit, after the script has finished (tests/test_end_to_end.py).
        if done.returncode == 0 or GLOO_EXIT_ABORT not in done.stdout + done.stderr:
            break
    done = finished_despite_exit_abort(done, all((tmp_path / f"finished{rank}").exists() for rank in range(2)))
    assert done.returncode == 0, done.stderr
    assert "replicas agree" in done.stdout
