"""Shapes real scripts nobody on the project wrote showed, each as the mechanism it needed.

Each case holds one obligation: refused where a senior engineer would refuse, converted where a
safe edit exists, never exit 0 with training that differs from DataParallel's.
"""

from __future__ import annotations

from textwrap import dedent

import pytest

from dp2ddp.api import convert_source
from tests.conftest import FIXTURES as FIXTURES_DIR

TRAIN = """
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
    for epoch in range(2):
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
"""
HEADER = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

"""


def _script(setup: str, rest: str = "") -> str:
    return dedent(HEADER) + "\ndef main():\n" + dedent(setup).replace("\n", "\n    ").rstrip() + "\n" + dedent(TRAIN).replace(
        "\n", "\n    "
    ).rstrip() + "\n" + dedent(rest).replace("\n", "\n    ").rstrip() + '\n\n\nif __name__ == "__main__":\n    main()\n'


@pytest.mark.parametrize(
    "setup",
    [
        pytest.param(
            """
            device_ids = [i for i in range(torch.cuda.device_count())]
            model = nn.Linear(4, 1)
            if len(device_ids) > 1:
                model = nn.DataParallel(model, device_ids=device_ids)
            """,
            id="a GPU count built through a list comprehension is about GPUs",
        ),
        pytest.param(
            """
            import sys
            device = [int(d) for d in sys.argv[1:]] or 0
            model = nn.Linear(4, 1)
            if type(device) is list:
                if len(device) > 1:
                    model = nn.DataParallel(model, device_ids=device)
            """,
            id="a device option given as one id or a list of them",
        ),
        pytest.param(
            """
            device = "cuda"
            model = nn.Linear(4, 1)
            if device == "cuda":
                model = nn.DataParallel(model)
            """,
            id="a condition on a constant is the same on every process",
        ),
        pytest.param(
            """
            gpus = (0, 1)
            model = nn.Linear(4, 1)
            if len(gpus) > 1:
                model = nn.DataParallel(model, device_ids=list(gpus))
            """,
            id="a literal tuple of GPU ids",
        ),
        pytest.param(
            """
            import sys
            config = {}
            gpus = sys.argv[1] if len(sys.argv) > 1 else "0"
            if len(gpus.split(",")) > 1:
                config["_parallel"] = True
            model = nn.Linear(4, 1)
            if config.get("_parallel"):
                model = nn.DataParallel(model)
            """,
            id="a flag stored under a dict key only when a GPU list has several entries",
        ),
    ],
)
def test_a_wrap_under_a_condition_the_same_on_every_process_converts(setup: str) -> None:
    """Should make the wrap unconditional: the test cannot differ between processes."""
    result = convert_source(_script(setup))
    assert result.changed, result.findings
    assert "wrap_ddp(model" in result.output
    assert not [f for f in result.findings if f.severity == "error"]


def test_a_wrap_under_an_option_is_still_refused() -> None:
    """Should refuse a wrap under a flag the user sets, which says nothing of GPUs (DDP207)."""
    setup = """
        import sys
        model = nn.Linear(4, 1)
        if "--parallel" in sys.argv:
            model = nn.DataParallel(model)
        """
    result = convert_source(_script(setup))
    assert not result.changed
    assert {f.code for f in result.findings if f.severity == "error"} == {"DDP207"}


def test_a_shuffled_loader_of_an_evaluation_function_stays_whole() -> None:
    """Should not split the random subset a `val()` function draws: it never trains, and its accuracy is per process."""
    source = dedent(HEADER) + dedent(
        """
        def val(model, dataset, max_iter=2):
            model.eval()
            loader = DataLoader(dataset, shuffle=True, batch_size=4)
            correct = 0
            for i, (x, y) in enumerate(loader):
                if i == max_iter:
                    break
                correct += int((model(x) > 0).eq(y > 0).sum())
            print("accuracy", correct / (max_iter * 4))


        def main():
            model = nn.DataParallel(nn.Linear(4, 1))
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
            train_loader = DataLoader(data, batch_size=8, shuffle=True)
            for epoch in range(2):
                for x, y in train_loader:
                    loss = nn.functional.mse_loss(model(x), y)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                val(model, data)


        if __name__ == "__main__":
            main()
        """
    )
    result = convert_source(source)
    assert result.changed
    assert "    loader = DataLoader(dataset, shuffle=True, batch_size=4)\n" in result.output
    assert "train_loader = DataLoader(data, batch_size=8 // dist.get_world_size(), sampler=DistributedSampler(data, shuffle=True))" in result.output


def test_a_library_file_opened_for_writing_is_written_once() -> None:
    """Should treat `h5py.File(path, "w")` as `open(path, "w")`: made and written on the main process only."""
    setup = """
        import h5py
        store = h5py.File("features.h5", "w")
        store.create_dataset("x", data=[1, 2, 3])
        store.close()
        model = nn.DataParallel(nn.Linear(4, 1))
        """
    result = convert_source(_script(setup))
    assert 'store = h5py.File("features.h5", "w") if is_main_process() else None' in result.output
    assert "if is_main_process():\n        store.create_dataset" in result.output


def test_a_library_file_opened_for_reading_is_read_everywhere() -> None:
    """Should leave `h5py.File(path, "r")` on every process: each one reads its data from it."""
    setup = """
        import h5py
        store = h5py.File("features.h5", "r")
        model = nn.DataParallel(nn.Linear(4, 1))
        """
    result = convert_source(_script(setup))
    assert '    store = h5py.File("features.h5", "r")\n' in result.output


@pytest.mark.parametrize(
    ("arguments", "seeded"),
    [
        pytest.param("shuffle=True, num_workers=4", True, id="workers draw augmentations: each process seeds its own"),
        pytest.param("shuffle=True, num_workers=0", False, id="no workers: nothing to seed"),
        pytest.param("shuffle=True", False, id="the default of no workers"),
        pytest.param("shuffle=True, num_workers=4, generator=g", False, id="a generator of the script's own is kept"),
    ],
)
def test_loader_workers_draw_their_own_augmentations_on_each_process(arguments: str, seeded: bool) -> None:
    """Should seed a split loader's workers per process, where a seeded script would give every process the same draws."""
    setup = f"""
        torch.manual_seed(0)
        g = torch.Generator()
        model = nn.DataParallel(nn.Linear(4, 1))
        """
    source = _script(setup).replace("batch_size=8, shuffle=True)", f"batch_size=8, {arguments})")
    result = convert_source(source)
    assert result.changed
    per_process = "generator=torch.Generator().manual_seed((torch.initial_seed() + dist.get_rank()) % 2**63)"
    assert (per_process in result.output) is seeded


def test_a_model_of_another_module_that_freezes_parameters_in_train_finds_unused_ones(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Should pass find_unused_parameters=True to the wrap of a project class whose train() freezes its BatchNorm."""
    from dp2ddp.projects import convert_project

    models = dedent(
        """
        import torch.nn as nn


        class TSN(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 1)
                self.bn = nn.BatchNorm1d(4)

            def forward(self, x):
                return self.fc(self.bn(x))

            def train(self, mode=True):
                super().train(mode)
                for module in self.modules():
                    if isinstance(module, nn.BatchNorm1d):
                        module.weight.requires_grad_(False)
                return self
        """
    )
    main = "from models import TSN\n" + _script("\nmodel = nn.DataParallel(TSN())\n")
    sources = {tmp_path / "models.py": models, tmp_path / "main.py": main}
    result = convert_project(tmp_path, sources, helpers="inline")
    converted = result.files[tmp_path / "main.py"]
    assert "model = wrap_ddp(TSN(), find_unused_parameters=True)" in converted.output  # type: ignore[union-attr]
    assert any(f.code == "DDP231" for f in converted.findings)  # type: ignore[union-attr]


def test_a_wrap_behind_a_star_import_lists_every_finding_in_one_run() -> None:
    """Should report with DDP102 what importing torch by name would then show, so one round of fixes is enough."""
    source = dedent(
        """\
        from mylib import *


        def main():
            model = torch.nn.DataParallel(Net())
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(2):
                for x, y in get_loader():
                    loss = model(x).sum()
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()


        if __name__ == "__main__":
            main()
        """
    )
    first = convert_source(source)
    assert not first.changed
    errors = {(f.code, f.line) for f in first.findings if f.severity == "error"}
    assert errors == {("DDP102", 5), ("DDP317", 8)}
    advised = convert_source(source.replace("from mylib import *\n", "from mylib import *\nimport torch\n", 1))
    assert {(f.code, f.line - 1) for f in advised.findings if f.severity == "error"} == {("DDP317", 8)}


def test_a_script_that_trains_through_an_alias_of_a_project_class_starts_the_process_group(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Should take a script calling `Exp = Exp_Trainer; Exp(args).train()` at top level for the program that runs."""
    from dp2ddp.projects import convert_project

    (tmp_path / "exp").mkdir()
    trainer = dedent(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset


        class Exp_Trainer:
            def __init__(self, epochs):
                self.epochs = epochs
                self.model = nn.DataParallel(nn.Linear(4, 1))

            def train(self):
                optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
                loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
                for epoch in range(self.epochs):
                    for x, y in loader:
                        loss = nn.functional.mse_loss(self.model(x), y)
                        optimizer.zero_grad()
                        loss.backward()
                        optimizer.step()
        """
    )
    main = "from exp.trainer import Exp_Trainer\n\nExp = Exp_Trainer\nfor run in range(2):\n    Exp(2).train()\n"
    sources = {tmp_path / "exp" / "__init__.py": "", tmp_path / "exp" / "trainer.py": trainer, tmp_path / "main.py": main}
    result = convert_project(tmp_path, sources, helpers="inline")
    converted = result.files[tmp_path / "main.py"]
    assert "setup_distributed()" in converted.output  # type: ignore[union-attr]


def test_a_gpu_selection_in_a_function_nobody_calls_does_not_refuse(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Should convert a script importing one helper from a module whose unused `init_distributed_mode()` sets a GPU."""
    from dp2ddp.projects import convert_project

    utils = dedent(
        """
        import torch


        def collate_fn(batch):
            return tuple(zip(*batch))


        def init_distributed_mode(args):
            torch.cuda.set_device(args.gpu)
        """
    )
    main = "from utils import collate_fn\n" + _script("\nmodel = nn.DataParallel(nn.Linear(4, 1))\n")
    sources = {tmp_path / "utils.py": utils, tmp_path / "main.py": main}
    converted = convert_project(tmp_path, sources, helpers="inline").files[tmp_path / "main.py"]
    assert "DDP230" not in {f.code for f in converted.findings}  # type: ignore[union-attr]
    assert "wrap_ddp(nn.Linear(4, 1))" in converted.output  # type: ignore[union-attr]
    called = "from utils import collate_fn, init_distributed_mode\n" + _script(
        "\ninit_distributed_mode(None)\nmodel = nn.DataParallel(nn.Linear(4, 1))\n"
    )
    sources[tmp_path / "main.py"] = called
    refused = convert_project(tmp_path, sources, helpers="inline").files[tmp_path / "main.py"]
    assert "DDP230" in {f.code for f in refused.findings}  # type: ignore[union-attr]


def test_a_worker_init_fn_seeding_without_the_rank_draws_per_process() -> None:
    """Should wrap a worker_init_fn that seeds from a fixed seed, so workers of different ranks draw differently."""
    import random

    import numpy as np
    import torch

    setup = """
        def seed_worker(worker_id):
            random.seed(7 + worker_id)
            np.random.seed(7 + worker_id)
        model = nn.DataParallel(nn.Linear(4, 1))
        """
    source = "import random\nimport numpy as np\n" + _script(setup).replace(
        "batch_size=8, shuffle=True)", "batch_size=8, shuffle=True, num_workers=2, worker_init_fn=seed_worker)"
    )
    result = convert_source(source)
    assert "worker_init_fn=WorkerInitPerProcess(seed_worker, dist.get_rank())" in result.output
    assert convert_source(result.output).output == result.output
    namespace: dict = {}
    exec(compile(result.output.split("\n\ndef main")[0], "converted", "exec"), namespace)

    def seed_worker(worker_id: int) -> None:
        random.seed(7 + worker_id)
        np.random.seed(7 + worker_id)

    draws = []
    state = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    try:
        for rank in (0, 1, 0):
            namespace["WorkerInitPerProcess"](seed_worker, rank)(3)
            draws.append((random.random(), float(np.random.uniform()), float(torch.rand(1))))
    finally:
        random.setstate(state[0]), np.random.set_state(state[1]), torch.set_rng_state(state[2])
    seed_worker(3)
    assert draws[0][:2] == (random.random(), float(np.random.uniform()))  # rank 0 draws as the script did
    assert draws[0][:2] == draws[2][:2]  # and the same on every run
    assert all(a != b for a, b in zip(draws[0], draws[1]))  # another rank draws its own

    # Seeded from the worker id alone, worker 0 of rank 1 draws nothing that worker 1 of rank 0 draws.
    def seed_torch(worker_id: int) -> None:
        torch.manual_seed(7 + worker_id)

    state = torch.get_rng_state()
    try:
        namespace["WorkerInitPerProcess"](seed_torch, 1)(0)
        second_rank_first_worker = float(torch.rand(1))
        namespace["WorkerInitPerProcess"](seed_torch, 0)(1)
        first_rank_second_worker = float(torch.rand(1))
    finally:
        torch.set_rng_state(state)
    assert second_rank_first_worker != first_rank_second_worker


# -- every parameter the forward may skip is found (obligation 3) --------------------------------------


def _model_class(body: str) -> str:
    return "class Net(nn.Module):\n" + dedent(body).replace("\n", "\n    ").rstrip() + "\n\n"


@pytest.mark.parametrize(
    ("body", "skipped"),
    [
        # A per-run option decides whether the head is used: off, it never gets a gradient.
        (
            """
            def __init__(self, use_head=False):
                super().__init__()
                self.body = nn.Linear(4, 1)
                self.use_head = use_head
                self.head = nn.Linear(1, 1)
            def forward(self, x):
                x = self.body(x)
                if self.use_head:
                    x = self.head(x)
                return x
            """,
            "self.head",
        ),
        # An early return on an option ends the forward before the head.
        (
            """
            def __init__(self, cut=False):
                super().__init__()
                self.body = nn.Linear(4, 1)
                self.cut = cut
                self.head = nn.Linear(1, 1)
            def forward(self, x):
                x = self.body(x)
                if self.cut:
                    return x
                return self.head(x)
            """,
            "self.head",
        ),
        # Used only by a method forward never calls (an embedding for retrieval).
        (
            """
            def __init__(self):
                super().__init__()
                self.body = nn.Linear(4, 1)
                self.projection = nn.Linear(1, 1)
            def forward(self, x):
                return self.body(x)
            def embed(self, x):
                return self.projection(self.body(x))
            """,
            "self.projection",
        ),
        # A parameter tensor of the class itself counts as much as a layer.
        (
            """
            def __init__(self):
                super().__init__()
                self.body = nn.Linear(4, 1)
                self.scale = nn.Parameter(torch.ones(1))
            def forward(self, x):
                return self.body(x) * self.scale if x.sum() > 0 else self.body(x)
            """,
            "self.scale",
        ),
    ],
)
def test_a_sub_module_the_forward_may_skip_gets_find_unused_parameters(body: str, skipped: str) -> None:
    """Should pass find_unused_parameters=True and name the sub-module: DDP stops at the second step otherwise."""
    result = convert_source(_script("\nmodel = nn.DataParallel(Net())").replace("\ndef main", "\n" + _model_class(body) + "\ndef main"))
    assert "wrap_ddp(Net(), find_unused_parameters=True)" in result.output
    assert any(f.code == "DDP215" and skipped in f.message for f in result.findings)


@pytest.mark.parametrize(
    "body",
    [
        # Read on both branches of the same `if`.
        """
        def __init__(self, pre_norm=False):
            super().__init__()
            self.body = nn.Linear(4, 1)
            self.norm = nn.LayerNorm(1)
            self.pre_norm = pre_norm
        def forward(self, x):
            if self.pre_norm:
                return self.body(x) + self.norm(x.sum(1, keepdim=True))
            else:
                return self.norm(self.body(x))
        """,
        # Built under the option that guards its use.
        """
        def __init__(self, use_head=False):
            super().__init__()
            self.body = nn.Linear(4, 1)
            self.use_head = use_head
            if use_head:
                self.head = nn.Linear(1, 1)
        def forward(self, x):
            x = self.body(x)
            if self.use_head:
                x = self.head(x)
            return x
        """,
        # Only the training flag decides, and training always takes that branch; layers without parameters never count.
        """
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(4, 1)
            self.drop = nn.Dropout(0.5)
            self.aux = nn.Linear(1, 1)
        def forward(self, x):
            x = self.body(x)
            if self.training:
                x = self.aux(x)
            if x.sum() > 0:
                x = self.drop(x)
            return x
        """,
    ],
)
def test_a_forward_that_reaches_every_parameter_keeps_the_plain_wrap(body: str) -> None:
    """Should wrap without find_unused_parameters, which costs a walk of the graph on every step."""
    result = convert_source(_script("\nmodel = nn.DataParallel(Net())").replace("\ndef main", "\n" + _model_class(body) + "\ndef main"))
    assert "wrap_ddp(Net())" in result.output
    assert not any(f.code in ("DDP215", "DDP232", "DDP233") for f in result.findings)


def test_a_model_from_code_convert_does_not_read_gets_find_unused_parameters() -> None:
    """Should not assume every parameter gets a gradient when the model's class is out of sight (DDP233)."""
    result = convert_source("from reid import models\n" + _script("\nmodel = nn.DataParallel(models.create('resnet50'))"))
    assert "wrap_ddp(models.create('resnet50'), find_unused_parameters=True)" in result.output
    assert any(f.code == "DDP233" and "models.create(...)" in f.message for f in result.findings)


@pytest.mark.parametrize(
    "setup",
    ["\nimport torchvision\nmodel = nn.DataParallel(torchvision.models.resnet18())", "\nmodel = nn.DataParallel(nn.Linear(4, 1))"],
)
def test_a_library_model_keeps_the_plain_wrap(setup: str) -> None:
    """torch's and torchvision's models reach every parameter: no argument, no finding."""
    result = convert_source(_script(setup))
    assert "find_unused_parameters" not in result.output


# -- a DataParallel-like class convert cannot read is never "nothing to convert" ----------------------------


def test_a_data_parallel_like_class_from_unread_code_is_refused_and_its_advice_converts() -> None:
    """Should refuse with DDP234, not say 'nothing to convert' of a multi-GPU script; with `nn.DataParallel` in
    its place, as the finding advises, the file converts."""
    setup = "\nfrom sync_batchnorm import DataParallelWithCallback\nmodel = DataParallelWithCallback(nn.Linear(4, 1), device_ids=[0, 1])"
    refused = convert_source(_script(setup))
    assert refused.output == refused.source
    assert [f.code for f in refused.findings if f.severity == "error"] == ["DDP234"]
    advised = convert_source(_script("\nmodel = nn.DataParallel(nn.Linear(4, 1), device_ids=[0, 1])"))
    assert "wrap_ddp(nn.Linear(4, 1))" in advised.output


def test_a_project_whose_trainer_wraps_in_an_unread_data_parallel_class_is_held_back(tmp_path) -> None:
    """Should name the wrap in the trainer module and leave the whole program as it was."""
    from dp2ddp.api import ConvertResult
    from dp2ddp.projects import convert_project

    trainer = "from sync_batchnorm import DataParallelWithCallback\n\n\nclass Trainer:\n    def __init__(self, net):\n        self.net = DataParallelWithCallback(net, device_ids=[0, 1])\n"
    main = "import torch.nn as nn\nfrom trainer import Trainer\n\nif __name__ == '__main__':\n    Trainer(nn.Linear(4, 1))\n"
    sources = {tmp_path / "trainer.py": trainer, tmp_path / "train.py": main}
    result = convert_project(tmp_path, sources, helpers="inline")
    refused = result.files[tmp_path / "trainer.py"]
    assert isinstance(refused, ConvertResult) and refused.output == trainer
    assert any(f.code == "DDP234" for f in refused.findings)
    assert all(not isinstance(r, ConvertResult) or r.output == sources[p] for p, r in result.files.items())


def test_a_loader_a_data_module_binds_to_an_attribute_is_split_there_for_a_trainer_that_reads_it(tmp_path) -> None:
    """`self.loader_train = loader.loader_train`, with `loader` a data object another module built: the batches are
    the data module's split loader, not a reason to refuse (DDP317)."""
    from dp2ddp.api import ConvertResult
    from dp2ddp.projects import convert_project

    data = dedent(
        """
        import torch
        from torch.utils.data import DataLoader, TensorDataset


        class Data:
            def __init__(self, batch_size):
                self.loader_train = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=batch_size, shuffle=True)
        """
    )
    trainer = dedent(
        """
        import torch
        import torch.nn as nn


        class Trainer:
            def __init__(self, loader, model):
                self.loader_train = loader.loader_train
                self.model = model
                self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

            def train(self):
                for x, y in self.loader_train:
                    loss = nn.functional.mse_loss(self.model(x), y)
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
        """
    )
    main = dedent(
        """
        import torch.nn as nn

        from data import Data
        from trainer import Trainer

        if __name__ == "__main__":
            use_cpu = False
            model = nn.Linear(4, 1)
            if not use_cpu and torch.cuda.device_count() > 1:
                model = nn.DataParallel(model)
            Trainer(Data(8), model).train()
        """
    ).replace("import torch.nn as nn\n", "import torch\nimport torch.nn as nn\n", 1)
    sources = {tmp_path / "data.py": data, tmp_path / "trainer.py": trainer, tmp_path / "main.py": main}
    result = convert_project(tmp_path, sources, helpers="inline")
    converted = {path.name: r for path, r in result.files.items() if isinstance(r, ConvertResult)}
    assert not any(f.severity == "error" for r in converted.values() for f in r.findings), [f for r in converted.values() for f in r.findings]
    assert "sampler=ShardedSampler(" in converted["data.py"].output or "sampler=DistributedSampler(" in converted["data.py"].output
    assert "wrap_ddp(model)" in converted["main.py"].output


def test_a_device_a_helper_returns_under_the_same_name_is_this_process_own() -> None:
    """`device = get_device(cuda)` where get_device binds and returns its own `device = torch.device("cuda" if ...)`:
    a device every process resolves to its own, so a move after the wrap is no refusal (DDP212)."""
    setup = """
        def get_device(cuda):
            cuda = cuda and torch.cuda.is_available()
            device = torch.device("cuda" if cuda else "cpu")
            return device
        device = get_device(True)
        model = nn.DataParallel(nn.Linear(4, 1))
        model.to(device)
        """
    result = convert_source(_script(setup))
    assert result.changed and not any(f.code in ("DDP212", "DDP213") for f in result.findings), result.findings


def test_a_loader_re_iterated_in_a_bare_except_advances_its_epoch_there() -> None:
    """`try: next(it) except: it = iter(loader)` inside an accumulation loop: each new pass advances the sampler's
    epoch where it starts, never `set_epoch` with the accumulation loop's counter."""
    source = dedent(HEADER) + dedent(
        """
        def main():
            model = nn.DataParallel(nn.Linear(4, 1))
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
            loader_iter = iter(loader)
            for iteration in range(10):
                optimizer.zero_grad()
                for _ in range(2):
                    try:
                        x, y = next(loader_iter)
                    except:
                        loader_iter = iter(loader)
                        x, y = next(loader_iter)
                    loss = nn.functional.mse_loss(model(x), y) / 2
                    loss.backward()
                optimizer.step()


        if __name__ == "__main__":
            main()
        """
    )
    result = convert_source(source)
    assert "loader.sampler.set_epoch(loader.sampler.epoch + 1)\n                loader_iter = iter(loader)" in result.output
    assert "set_epoch(_)" not in result.output


def test_a_loader_whose_workers_an_option_sets_draws_augmentations_per_process() -> None:
    """`num_workers=args.workers` may be 0: the dataset draws per process (DrawnPerProcess), and a worker that
    does run reads it as it is."""
    setup = """
        import random
        class Flips(torch.utils.data.Dataset):
            def __len__(self):
                return 32
            def __getitem__(self, index):
                return torch.full((4,), -1.0 if random.random() < 0.5 else 1.0), torch.zeros(1)
        workers = int(os.environ.get("WORKERS", "0"))
        model = nn.DataParallel(nn.Linear(4, 1))
        """
    source = "import os\n" + _script(setup).replace(
        "DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)",
        "DataLoader(Flips(), batch_size=8, shuffle=True, num_workers=workers)",
    )
    result = convert_source(source)
    assert "DrawnPerProcess(" in result.output and any(f.code == "DDP338" for f in result.findings)


def test_a_loader_a_scoring_function_builds_and_reads_under_no_grad_stays_whole() -> None:
    """`inception_score(imgs)` builds a loader over what it is given and scores every image under no_grad: split,
    each process would fill half of the predictions and score zeros for the rest."""
    setup = """
        def inception_score(imgs, scorer, batch_size=8):
            loader = DataLoader(imgs, batch_size=batch_size)
            preds = torch.zeros(len(imgs))
            for i, batch in enumerate(loader):
                with torch.no_grad():
                    preds[i * batch_size:i * batch_size + len(batch)] = scorer(batch).squeeze(1)
            return preds.mean()
        model = nn.DataParallel(nn.Linear(4, 1))
        """
    result = convert_source(_script(setup, "print(inception_score(torch.randn(16, 4), model))"))
    assert "loader = DataLoader(imgs, batch_size=batch_size)\n" in result.output
    assert "DistributedSampler(dataset, shuffle=True)" in result.output or "sampler=DistributedSampler(" in result.output


def test_a_dataset_that_draws_in_a_helper_method_draws_per_process() -> None:
    """The crop is drawn in `_sync_transform`, which `__getitem__` calls: still an augmentation of the dataset."""
    setup = """
        import random
        class Crops(torch.utils.data.Dataset):
            def __len__(self):
                return 32
            def _sync_transform(self, x):
                start = random.randint(0, 2)
                return x[start:start + 4]
            def __getitem__(self, index):
                return self._sync_transform(torch.arange(6.0)), torch.zeros(1)
        model = nn.DataParallel(nn.Linear(4, 1))
        """
    source = _script(setup).replace(
        "DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)",
        "DataLoader(Crops(), batch_size=8, shuffle=True)",
    )
    result = convert_source(source)
    assert "DrawnPerProcess(" in result.output and any(f.code == "DDP338" for f in result.findings)


DATASET_MODULE = '''
import random

import torch


class Segments(torch.utils.data.Dataset):
    def __len__(self):
        return 32

    def _sync_transform(self, x):
        {draw}
        return x[start:start + 4]

    def __getitem__(self, index):
        return self._sync_transform(torch.arange(6.0)), torch.zeros(1)
'''
TRAIN_MODULE = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader

from data.segments import Segments


def main():
    torch.manual_seed(0)
    model = nn.DataParallel(nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(dataset=Segments(), batch_size=8, shuffle=True)
    for epoch in range(2):
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main()
'''


@pytest.mark.parametrize("draw, per_process", [("start = random.randint(0, 2)", True), ("start = index % 3", False)])
def test_a_dataset_of_another_module_that_draws_augmentations_draws_per_process(tmp_path, draw: str, per_process: bool) -> None:
    """Fast-SCNN: the dataset's crops are drawn in a module of the `data` package and the loader has no workers. Every
    process would draw the same crops for different samples; a dataset that draws nothing is left as it is."""
    from dp2ddp.projects import convert_project

    (tmp_path / "data").mkdir()
    sources = {
        tmp_path / "data" / "__init__.py": "",
        tmp_path / "data" / "segments.py": DATASET_MODULE.replace("{draw}", draw),
        tmp_path / "train.py": TRAIN_MODULE,
    }
    result = convert_project(tmp_path, sources)
    train = result.files[tmp_path / "train.py"]
    assert ("DataLoader(dataset=DrawnPerProcess(dataset, dist.get_rank())" in train.output) is per_process
    assert any(f.code == "DDP338" for f in train.findings) is per_process


PHASES = """
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def train(model, loader):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--state", default=None)
    parser.add_argument("--pretrained", default=None)
    args = parser.parse_args()
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
    model = nn.Linear(4, 1)
    if torch.cuda.is_available():
        model = nn.DataParallel(model).cuda()
    model = train(model, loader)
    {between}
    if not args.state:
        {rebuild}
        if torch.cuda.is_available():
            model = nn.DataParallel(model).cuda()
    model = train(model, loader)


if __name__ == "__main__":
    main()
"""


def test_a_model_rebuilt_and_wrapped_again_under_a_flag_converts() -> None:
    """erfnet: the decoder phase rebuilds the model under `if not args.state:` and wraps it again. On the other path the
    model is the one wrapped before, so the flag decides nothing about DDP (DDP240, no DDP207)."""
    result = convert_source(PHASES.replace("{between}", "pass").replace("{rebuild}", "model = nn.Linear(4, 1)"))
    assert result.changed, result.findings
    assert result.output.count("model = wrap_ddp(model)") == 2 and "nn.DataParallel(" not in result.output
    assert [f.code for f in result.findings if f.code.startswith("DDP2")] == ["DDP240"]


@pytest.mark.parametrize(
    "between",
    ["model = model.module if hasattr(model, 'module') else model", "model = nn.Linear(4, 1)"],
)
def test_a_model_rebuilt_under_a_flag_after_it_was_unwrapped_stays_refused(between: str) -> None:
    """Bound again between the two wraps, the model on the path that skips the flag is no longer the wrapped one."""
    result = convert_source(PHASES.replace("{between}", between).replace("{rebuild}", "model = nn.Linear(4, 1)"))
    assert not result.changed
    assert "DDP207" in {f.code for f in result.findings}


@pytest.mark.parametrize(
    "rebuild, loads_only",
    [
        (
            "encoder = nn.DataParallel(nn.Linear(4, 1))\n        encoder.load_state_dict(torch.load(args.pretrained))\n"
            "        model = encoder.module",
            True,
        ),
        (
            "encoder = nn.DataParallel(nn.Linear(4, 1))\n        encoder.load_state_dict(torch.load(args.pretrained))\n"
            "        model = next(encoder.children())",
            True,
        ),
        # erfnet: the name is bound again to what it reads of the wrapper, then used as that
        (
            "encoder = nn.DataParallel(nn.Linear(4, 1))\n        encoder.load_state_dict(torch.load(args.pretrained))\n"
            "        encoder = next(encoder.children())\n        model = encoder.cpu()",
            True,
        ),
        # the wrapper itself runs a batch: a wrap like any other, under a flag that is not about GPUs
        (
            "encoder = nn.DataParallel(nn.Linear(4, 1))\n        encoder.load_state_dict(torch.load(args.pretrained))\n"
            "        print(encoder(torch.zeros(1, 4)))\n        model = encoder.module",
            False,
        ),
    ],
)
def test_a_wrap_that_only_loads_a_checkpoint_stays_as_it_was(rebuild: str, loads_only: bool) -> None:
    """`nn.DataParallel(m)` only to load `module.` keys, then unwrapped: it runs no batch, so it stays (DDP239)."""
    from dp2ddp.check import check_source

    result = convert_source(PHASES.replace("{between}", "pass").replace("{rebuild}", rebuild))
    codes = {f.code for f in result.findings}
    if loads_only:
        assert result.changed and {"DDP239", "DDP240"} <= codes and "DDP207" not in codes
        assert "encoder = nn.DataParallel(nn.Linear(4, 1))" in result.output
        assert not [d for d in check_source(result.output).diagnostics if d.code == "DDP535"]
    else:
        assert not result.changed and "DDP207" in codes


@pytest.mark.parametrize(
    "calls, advances",
    [
        ("train(model, loader, 1)", False),
        ("train(model, loader, 1)\n    train(model, loader, 2)", True),
        ("for stage in range(3):\n        train(model, loader, 1)", True),
    ],
)
def test_an_epoch_loop_in_a_function_run_more_than_once_advances_the_sampler(calls: str, advances: bool) -> None:
    """Two training phases through one `train()`: `set_epoch(epoch)` would replay the first phase's orders."""
    source = dedent(HEADER) + dedent(
        """
        def train(model, loader, epochs):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(epochs):
                for x, y in loader:
                    loss = nn.functional.mse_loss(model(x), y)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()


        def main():
            model = nn.DataParallel(nn.Linear(4, 1))
            loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
            CALLS


        if __name__ == "__main__":
            main()
        """
    ).replace("CALLS", calls)
    result = convert_source(source)
    advancing = "loader.sampler.set_epoch(loader.sampler.epoch + 1)" in result.output
    assert advancing is advances and ("loader.sampler.set_epoch(epoch)" in result.output) is not advances
    assert any(f.code == "DDP340" for f in result.findings) is advances


def test_loaders_of_a_dict_comprehension_read_by_literal_keys_split_with_set_epoch_on_the_training_key() -> None:
    """`loaders = {x: DataLoader(sets[x], ...) for x in ["train", "val"]}`, read as `loaders["train"]` in the epoch loop and
    `loaders["val"]` in evaluate(): the dataset subscript is read again for the sampler, and set_epoch names the key."""
    source = dedent(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset


        def evaluate(model, loader):
            correct = total = 0
            with torch.no_grad():
                for x, y in loader:
                    correct += (model(x).argmax(1) == y).sum().item()
                    total += y.size(0)
            return correct / total


        def main():
            sets = {x: TensorDataset(torch.randn(40, 4), torch.randint(0, 2, (40,))) for x in ["train", "val"]}
            loaders = {x: DataLoader(sets[x], batch_size=8, shuffle=(x == "train")) for x in ["train", "val"]}
            model = nn.DataParallel(nn.Linear(4, 2))
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(2):
                for x, y in loaders["train"]:
                    loss = nn.functional.cross_entropy(model(x), y)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                print("epoch", epoch, "acc", evaluate(model, loaders["val"]))


        if __name__ == "__main__":
            main()
        """
    )
    result = convert_source(source)
    assert result.changed, result.findings
    assert 'sampler=DistributedSampler(sets[x], shuffle=(x == "train"))' in result.output
    assert 'loaders["train"].sampler.set_epoch(epoch)' in result.output and "[...]" not in result.output
    assert "correct, total = all_reduce_sum(correct, total)" in result.output


@pytest.mark.parametrize("parameter", ["dataloaders", "phases"])
def test_loaders_read_by_a_changing_key_reshuffle_by_themselves(parameter: str) -> None:
    """`for phase in ["train", "val"]: for x, y in dataloaders[phase]:`, whatever the parameter is called: no name
    reaches the loader at the epoch loop, so its sampler advances by itself (DDP322), and the phase's sums are reduced."""
    source = (FIXTURES_DIR / "phase_keyed_loaders" / "before.py").read_text(encoding="utf-8")
    source = source.replace("dataloaders, dataset_sizes, num_epochs", f"{parameter}, dataset_sizes, num_epochs")
    source = source.replace("in dataloaders[phase]:", f"in {parameter}[phase]:")
    result = convert_source(source)
    assert result.changed, result.findings
    assert "sampler=ShardedSampler(RandomSampler(image_datasets[x]))" in result.output and "[...]" not in result.output
    assert "running_loss, running_corrects = all_reduce_sum(running_loss, running_corrects)" in result.output
    assert [f.code for f in result.findings if f.severity == "error"] == []


def test_loaders_of_a_dict_literal_read_by_a_changing_key_convert() -> None:
    """`{"train": DataLoader(...), "val": DataLoader(...)}` read as `dataloaders[phase]`: each entry is split, the
    shuffled one advancing by itself, and no entry is read for another (refused before, DDP317)."""
    source = (FIXTURES_DIR / "phase_keyed_loaders" / "before.py").read_text(encoding="utf-8")
    source = source.replace(
        'dataloaders = {x: DataLoader(image_datasets[x], batch_size=4, shuffle=True) for x in ["train", "val"]}',
        'dataloaders = {"train": DataLoader(image_datasets["train"], batch_size=4, shuffle=True), '
        '"val": DataLoader(image_datasets["val"], batch_size=4)}',
    )
    result = convert_source(source)
    assert result.changed, result.findings
    assert 'sampler=ShardedSampler(RandomSampler(image_datasets["train"]))' in result.output
    assert 'sampler=DistributedSampler(image_datasets["val"], shuffle=False)' in result.output
    assert "running_loss, running_corrects = all_reduce_sum(running_loss, running_corrects)" in result.output


def test_torch_bound_through_star_imports_two_modules_deep_is_torch(tmp_path) -> None:
    """SCNN: `from utils.transforms import *`, whose package re-exports `from .transforms import *`, which imports torch:
    the project reads where `torch` comes from, so `torch.nn.DataParallel` converts (no DDP102)."""
    from dp2ddp.projects import convert_project

    (tmp_path / "utils" / "transforms").mkdir(parents=True)
    sources = {
        tmp_path / "utils" / "__init__.py": "",
        tmp_path / "utils" / "transforms" / "__init__.py": "from .transforms import *\n",
        tmp_path / "utils" / "transforms" / "transforms.py": "import torch\n\n\nclass ToTensor:\n    pass\n",
        tmp_path / "train.py": dedent(
            """
            from torch.utils.data import DataLoader, TensorDataset
            from utils.transforms import *

            net = torch.nn.DataParallel(torch.nn.Linear(4, 1))
            optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
            loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
            for epoch in range(2):
                for x, y in loader:
                    loss = torch.nn.functional.mse_loss(net(x), y)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
            """
        ),
    }
    result = convert_project(tmp_path, sources)
    train = result.files[tmp_path / "train.py"]
    assert "DDP102" not in {f.code for f in train.findings}
    assert train.changed and "net = wrap_ddp(torch.nn.Linear(4, 1))" in train.output


def test_a_batch_handed_to_a_class_of_another_module_stays_per_process(tmp_path) -> None:
    """UEL: `BatchCriterion(m, t, args.batch_size)` (another module) builds a 2B x 2B mask from the batch. Divided in the
    loader alone, the mask no longer matched the batch and every process crashed at the first step (DDP312 now)."""
    from dp2ddp.projects import convert_project

    criterion = dedent(
        """
        import torch
        import torch.nn as nn


        class BatchCriterion(nn.Module):
            def __init__(self, batch_size):
                super().__init__()
                self.mask = 1 - torch.eye(batch_size)

            def forward(self, x):
                return (x @ x.t() * self.mask).mean()
        """
    )
    train = dedent(HEADER) + dedent(
        """
        import argparse

        from criteria import BatchCriterion


        def main():
            parser = argparse.ArgumentParser()
            parser.add_argument("--batch-size", type=int, default=8)
            args = parser.parse_args()
            model = nn.DataParallel(nn.Linear(4, 3))
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            criterion = BatchCriterion(args.batch_size)
            loader = DataLoader(TensorDataset(torch.randn(32, 4)), batch_size=args.batch_size, shuffle=True, drop_last=True)
            for epoch in range(2):
                for (x,) in loader:
                    loss = criterion(model(x))
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()


        if __name__ == "__main__":
            main()
        """
    )
    result = convert_project(tmp_path, {tmp_path / "criteria.py": criterion, tmp_path / "train.py": train})
    converted = result.files[tmp_path / "train.py"]
    assert "batch_size=args.batch_size, sampler=DistributedSampler(" in converted.output
    assert "DDP312" in {f.code for f in converted.findings}


@pytest.mark.parametrize("counter", ["count", "cnt"])
def test_an_evaluation_sharded_under_any_loader_name_has_its_meters_reduced(counter: str) -> None:
    """DARTS: `valid_queue`, a name that says nothing of loaders, was sharded while its meters stayed this process's share:
    the printed validation numbers were rank 0's. DARTS's `AvgrageMeter` counts in `cnt`."""
    source = MEASURED.replace("COUNTER", counter)
    result = convert_source(source)
    assert "sampler=evaluation_shard(valid_queue_dataset)" in result.output
    assert "    all_reduce_meter(objs)\n    return objs.avg" in result.output


MEASURED = dedent(
    """
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset


    class AvgrageMeter(object):
        def __init__(self):
            self.reset()

        def reset(self):
            self.avg = 0
            self.sum = 0
            self.COUNTER = 0

        def update(self, val, n=1):
            self.sum += val * n
            self.COUNTER += n
            self.avg = self.sum / self.COUNTER


    def infer(valid_queue, model):
        objs = AvgrageMeter()
        model.eval()
        for step, (x, y) in enumerate(valid_queue):
            with torch.no_grad():
                loss = nn.functional.mse_loss(model(x), y)
            objs.update(loss.item(), x.size(0))
        return objs.avg


    def main():
        model = nn.DataParallel(nn.Linear(4, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train_queue = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
        valid_queue = DataLoader(TensorDataset(torch.randn(30, 4), torch.randn(30, 1)), batch_size=8)
        for epoch in range(2):
            for x, y in train_queue:
                loss = nn.functional.mse_loss(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            print("valid", infer(valid_queue, model))


    if __name__ == "__main__":
        main()
    """
)


def test_a_printing_function_re_exported_by_a_package_star_import_prints_once(tmp_path) -> None:
    """GwcNet: `from utils import *`, whose `__init__` does `from utils.experiment import *`: adjust_learning_rate printed
    on every process, unseen, since the package itself defines nothing (DDP105 now, guarded inside)."""
    from dp2ddp.projects import convert_project

    (tmp_path / "utils").mkdir()
    experiment = dedent(
        """
        def adjust_learning_rate(optimizer, epoch, base_lr):
            lr = base_lr * (0.5 ** (epoch // 10))
            print("setting learning rate to {}".format(lr))
            for group in optimizer.param_groups:
                group["lr"] = lr
        """
    )
    train = dedent(HEADER) + dedent(
        """
        from utils import *


        def main():
            model = nn.DataParallel(nn.Linear(4, 1))
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
            for epoch in range(2):
                adjust_learning_rate(optimizer, epoch, 0.1)
                for x, y in loader:
                    loss = nn.functional.mse_loss(model(x), y)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()


        if __name__ == "__main__":
            main()
        """
    )
    sources = {
        tmp_path / "utils" / "__init__.py": "from utils.experiment import *\n",
        tmp_path / "utils" / "experiment.py": experiment,
        tmp_path / "train.py": train,
    }
    result = convert_project(tmp_path, sources)
    helper = result.files[tmp_path / "utils" / "experiment.py"]
    assert "    if is_main_process():\n        print(" in helper.output
    assert "DDP105" in {f.code for f in helper.findings}


def test_batches_a_trainer_draws_with_next_from_a_loader_object_handed_in_are_its_callers_to_split(tmp_path) -> None:
    """`data_loader.next()` on an `IterLoader` the entry builds around its DataLoader and hands to the trainer: the
    entry splits the loader, so the trainer's batches are not a reason to refuse (DDP317)."""
    from dp2ddp.api import ConvertResult
    from dp2ddp.projects import convert_project

    trainer = dedent(
        """
        import torch
        import torch.nn as nn


        class IterLoader:
            def __init__(self, loader):
                self.loader = loader
                self.iter = iter(loader)

            def next(self):
                try:
                    return next(self.iter)
                except StopIteration:
                    self.iter = iter(self.loader)
                    return next(self.iter)


        class Trainer:
            def __init__(self, model):
                self.model = model

            def train(self, data_loader, optimizer, train_iters=4):
                for i in range(train_iters):
                    x, y = data_loader.next()
                    loss = nn.functional.mse_loss(self.model(x), y)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
        """
    )
    main = dedent(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset

        from trainer import IterLoader, Trainer

        if __name__ == "__main__":
            loader = IterLoader(DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True))
            model = nn.DataParallel(nn.Linear(4, 1))
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(2):
                Trainer(model).train(loader, optimizer)
        """
    )
    (tmp_path / "trainer.py").write_text(trainer)
    (tmp_path / "main.py").write_text(main)
    result = convert_project(tmp_path, {tmp_path / "trainer.py": trainer, tmp_path / "main.py": main})
    converted = {path.name: outcome for path, outcome in result.files.items()}
    assert all(isinstance(outcome, ConvertResult) for outcome in converted.values()), converted
    assert "Sampler(" in converted["main.py"].output  # type: ignore[union-attr]
    assert not any(f.code == "DDP317" for outcome in converted.values() for f in outcome.findings)  # type: ignore[union-attr]


def test_a_logger_class_guarded_inside_is_no_writer_for_the_check_of_its_callers(tmp_path) -> None:
    """`sys.stdout = Logger(path)`, whose file convert opens on the main process only (`open(...) if
    is_main_process() else None`) and which closes it through its own `self.close()`: the check of the converted
    entry finds no write of it left on every process (no DDP111)."""
    from dp2ddp.api import ConvertResult
    from dp2ddp.projects import convert_project

    logging = dedent(
        """
        import sys


        class Logger:
            def __init__(self, path):
                self.console = sys.stdout
                self.file = open(path, "w")

            def __del__(self):
                self.close()

            def write(self, message):
                self.console.write(message)
                self.file.write(message)

            def flush(self):
                self.console.flush()

            def close(self):
                self.file.close()
        """
    )
    main = dedent(
        """
        import sys

        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset

        from logger import Logger

        if __name__ == "__main__":
            sys.stdout = Logger("log.txt")
            loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
            model = nn.DataParallel(nn.Linear(4, 1))
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                loss = nn.functional.mse_loss(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        """
    )
    sources = {tmp_path / "logger.py": logging, tmp_path / "main.py": main}
    for path, text in sources.items():
        path.write_text(text)
    result = convert_project(tmp_path, sources)
    converted = {path.name: outcome for path, outcome in result.files.items()}
    assert all(isinstance(outcome, ConvertResult) and outcome.changed for outcome in converted.values()), converted
    assert "is_main_process()" in converted["logger.py"].output  # type: ignore[union-attr]
    assert not any(f.code == "DDP111" for f in converted["main.py"].findings)  # type: ignore[union-attr]


UNFREEZING = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

{model_module}


def train(model, loader, optimizer, epochs):
    for epoch in range(epochs):
        {unfreeze}
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
    net = Net()
    {before_wrap}
    model = nn.DataParallel(net)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train(model, loader, optimizer, 2)
"""
NET = """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Linear(4, 8)
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        return self.head(self.backbone(x))
"""


@pytest.mark.parametrize(
    "unfreeze, before_wrap, refused",
    [
        ("if epoch == 1:\n            model.module.backbone.requires_grad_(True)", "net.backbone.requires_grad_(False)", True),
        ("if epoch == 1:\n            for p in model.module.backbone.parameters():\n                p.requires_grad = True", "pass", True),
        # made trainable before the wrap, added to the optimizer later: nothing changes after DDP is built
        ("if epoch == 1:\n            optimizer.add_param_group({'params': []})", "net.backbone.requires_grad_(True)", False),
        # frozen after the wrap: DDP238's find_unused_parameters, not a refusal
        ("if epoch == 1:\n            model.module.backbone.requires_grad_(False)", "pass", False),
    ],
)
def test_parameters_made_trainable_after_the_wrap_are_refused(unfreeze: str, before_wrap: str, refused: bool) -> None:
    """DDP hooks the parameters that require gradients when it is built; one unfrozen later trains apart (DDP241)."""
    result = convert_source(UNFREEZING.format(model_module=NET, unfreeze=unfreeze, before_wrap=before_wrap))
    codes = {f.code for f in result.findings}
    assert ("DDP241" in codes) is refused
    assert result.changed is not refused


@pytest.mark.parametrize(
    "unfreeze, refused",
    [
        # SiamMask: the backbone's class comes from a folder on sys.path, and the optimizer is built again after it
        ("if model.module.backbone.unfix(epoch / 2):\n            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)", True),
        # nothing built again: whatever the method does, the optimizer steps what it stepped
        ("model.module.backbone.unfix(epoch / 2)", False),
        # nn.Module's own methods run code convert knows
        ("model.module.backbone.train()\n        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)", False),
    ],
)
def test_an_optimizer_built_again_after_a_method_convert_cannot_read_is_refused(unfreeze: str, refused: bool) -> None:
    """A method of an unreadable class called on the wrapped model, then the optimizer built again from it: the
    method may have made parameters trainable that DDP never hooked (DDP242)."""
    net = "from siam import Backbone\n" + NET.replace("nn.Linear(4, 8)", "Backbone()")
    result = convert_source(UNFREEZING.format(model_module=net, unfreeze=unfreeze, before_wrap="pass"))
    codes = {f.code for f in result.findings}
    assert ("DDP242" in codes) is refused
    assert result.changed is not refused


def test_a_method_the_program_defines_is_read_not_feared(tmp_path) -> None:
    """The same rebuild, but the program defines `unfix` and it only freezes: convert reads it and converts."""
    from dp2ddp.api import ConvertResult
    from dp2ddp.projects import convert_project

    siam = dedent(
        """
        import torch.nn as nn


        class Backbone(nn.Module):
            def __init__(self):
                super().__init__()
                self.layer = nn.Linear(4, 8)

            def unfix(self, ratio):
                for p in self.layer.parameters():
                    p.requires_grad = False
                return ratio > 0.5

            def forward(self, x):
                return self.layer(x)
        """
    )
    net = "from siam import Backbone\n" + NET.replace("nn.Linear(4, 8)", "Backbone()")
    unfreeze = "if model.module.backbone.unfix(epoch / 2):\n            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)"
    sources = {tmp_path / "siam.py": siam, tmp_path / "main.py": UNFREEZING.format(model_module=net, unfreeze=unfreeze, before_wrap="pass")}
    for path, text in sources.items():
        path.write_text(text)
    entry = convert_project(tmp_path, sources).files[tmp_path / "main.py"]
    assert isinstance(entry, ConvertResult) and entry.changed
    assert "DDP242" not in {f.code for f in entry.findings}


def test_a_method_of_another_module_that_unfreezes_called_on_the_wrapped_model_is_refused(tmp_path) -> None:
    """`model.module.features.unfix(ratio)`, whose class (another module) sets requires_grad = True: DDP241."""
    from dp2ddp.api import ConvertResult
    from dp2ddp.projects import convert_project

    features = dedent(
        """
        import torch.nn as nn


        class Features(nn.Module):
            def __init__(self):
                super().__init__()
                self.layer = nn.Linear(4, 8)
                self.unfix(0.0)

            def unfix(self, ratio):
                for p in self.layer.parameters():
                    p.requires_grad = ratio > 0.5
                    if ratio > 0.5:
                        p.requires_grad = True
                return ratio > 0.5

            def forward(self, x):
                return self.layer(x)
        """
    )
    net = NET.replace("self.backbone = nn.Linear(4, 8)", "self.backbone = Features()")
    main = UNFREEZING.format(
        model_module="from features import Features\n" + net, unfreeze="model.module.backbone.unfix(epoch / 2)", before_wrap="pass"
    )
    sources = {tmp_path / "features.py": features, tmp_path / "main.py": main}
    for path, text in sources.items():
        path.write_text(text)
    result = convert_project(tmp_path, sources)
    entry = result.files[tmp_path / "main.py"]
    assert isinstance(entry, ConvertResult) and not entry.changed
    assert "DDP241" in {f.code for f in entry.findings}


REWRAP = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main(args):
    if args.small:
        model = nn.DataParallel(nn.Linear(4, 1))
    else:
        model = nn.DataParallel(nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 1)))
    if args.convert_from:
{branch}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
"""


@pytest.mark.parametrize(
    "branch, converts",
    [
        # CondenseNet: taken out of its wrapper, changed, wrapped again: a wrapped model on either path
        ("model = model.cpu().module\nconvert_model(model)\nmodel = nn.DataParallel(model)", True),
        # a model of its own under the flag: the other path keeps the earlier wrap, this one wraps a new model
        ("model = nn.DataParallel(nn.Linear(4, 1))", False),
        # unwrapped and replaced before the wrap: the wrap is of something else
        ("model = model.module\nmodel = nn.Linear(4, 1)\nmodel = nn.DataParallel(model)", False),
    ],
)
def test_a_model_unwrapped_and_wrapped_again_under_a_flag_converts(branch: str, converts: bool) -> None:
    """A wrap under a flag converts where the same branch took the model out of its wrapper first (DDP243)."""
    body = "\n".join("        " + line for line in branch.splitlines())
    result = convert_source(REWRAP.format(branch=body))
    codes = {f.code for f in result.findings}
    assert result.changed is converts
    assert ("DDP243" in codes) is converts and ("DDP207" in codes) is not converts


MODE_FLAG = """
import sys
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def train(model):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()


def main(args):
    model = nn.Linear(4, 1)
{body}
"""


@pytest.mark.parametrize(
    "body, converts",
    [
        # DeepLabv3: the wrap and training under `if args.train:`, the `else` only evaluates
        ("if args.train:\n    model = nn.DataParallel(model)\n    train(model)\nelse:\n    print(model(torch.randn(2, 4)))", True),
        # wide-resnet: a test-only branch that wraps, evaluates and exits
        ("if args.test_only:\n    model = nn.DataParallel(model)\n    print(model(torch.randn(2, 4)))\n    sys.exit(0)\n"
         "model = nn.DataParallel(nn.Linear(4, 1))\ntrain(model)", True),
        # the path without the wrap trains: some processes could train a model DDP does not synchronise
        ("if args.finetune:\n    model = nn.DataParallel(model)\ntrain(model)", False),
        # the branch with the wrap evaluates but does not leave: the wrapped model goes on to training
        ("if args.test_only:\n    model = nn.DataParallel(model)\n    print(model(torch.randn(2, 4)))\ntrain(model)", False),
        # a flag that reads the rank differs between processes
        ("if args.local_rank == 0:\n    model = nn.DataParallel(model)\n    train(model)\nelse:\n    print(model)", False),
    ],
)
def test_a_wrap_under_a_mode_flag_converts_where_one_path_trains_nothing(body: str, converts: bool) -> None:
    """A wrap under a flag that is not about GPUs converts in place where the path without it trains nothing (DDP244)."""
    source = MODE_FLAG.format(body="\n".join("    " + line for line in body.splitlines()))
    result = convert_source(source)
    codes = {f.code for f in result.findings}
    assert result.changed is converts
    assert ("DDP244" in codes) is converts and ("DDP207" in codes) is not converts


def test_batchnorm_frozen_through_modules_after_the_wrap_finds_unused_parameters() -> None:
    """`for m in model.modules(): m.weight.requires_grad = False` after the wrap: DDP238, find_unused_parameters."""
    body = (
        "model = nn.DataParallel(nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 1)))\n"
        "for m in model.modules():\n    if isinstance(m, nn.BatchNorm1d):\n        m.weight.requires_grad = False\n"
        "        m.bias.requires_grad = False\ntrain(model)"
    )
    result = convert_source(MODE_FLAG.format(body="\n".join("    " + line for line in body.splitlines())))
    assert "DDP238" in {f.code for f in result.findings}
    assert "find_unused_parameters=True" in result.output


@pytest.mark.parametrize(
    "forward, unused",
    [
        # SC-SfMLearner: a torchvision ResNet kept whole, of which forward calls the stem and the stages, never fc
        ("x = self.encoder.conv1(x)\n        return self.encoder.layer1(x)", True),
        ("return self.encoder(x)", False),
    ],
)
def test_a_sub_module_forward_calls_only_parts_of_finds_unused_parameters(forward: str, unused: bool) -> None:
    source = f"""
import torch.nn as nn
import torchvision.models as models


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = models.resnet18()

    def forward(self, x):
        {forward}


model = nn.DataParallel(Encoder())
"""
    result = convert_source(source)
    assert ("DDP215" in {f.code for f in result.findings}) is unused
    assert ("find_unused_parameters=True" in result.output) is unused


def test_a_model_returning_one_output_per_pass_through_a_package_finds_unused_parameters(tmp_path) -> None:
    """SC-SfMLearner: `models.DispResNet` re-exported by a package, whose decoder appends one head's output per scale
    and returns the list; a loss reading only some scales leaves the other heads without a gradient."""
    from dp2ddp.api import ConvertResult
    from dp2ddp.projects import convert_project

    net = dedent(
        """
        import torch.nn as nn


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Linear(4, 8)
                self.heads = nn.ModuleList([nn.Linear(8, 1) for _ in range(3)])

            def forward(self, x):
                x = self.body(x)
                outputs = []
                for i in range(3):
                    outputs.append(self.heads[i](x))
                return outputs
        """
    )
    main = dedent(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset

        import models


        def main():
            model = nn.DataParallel(models.Net())
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
            for x, y in loader:
                optimizer.zero_grad()
                nn.functional.mse_loss(model(x)[0], y).backward()
                optimizer.step()


        if __name__ == "__main__":
            main()
        """
    )
    (tmp_path / "models").mkdir()
    sources = {tmp_path / "models" / "net.py": net, tmp_path / "models" / "__init__.py": "from .net import Net\n", tmp_path / "main.py": main}
    for path, text in sources.items():
        path.write_text(text)
    entry = convert_project(tmp_path, sources).files[tmp_path / "main.py"]
    assert isinstance(entry, ConvertResult) and entry.changed
    assert "DDP215" in {f.code for f in entry.findings}
    assert "wrap_ddp(models.Net(), find_unused_parameters=True)" in entry.output


@pytest.mark.parametrize("called", [False, True])
def test_a_double_backward_in_a_function_the_program_never_names_blocks_nothing(tmp_path, called: bool) -> None:
    """CycleGAN's networks.py defines a gradient penalty no model of the program calls: dead code, no DDP222."""
    from dp2ddp.api import ConvertResult
    from dp2ddp.projects import convert_project

    networks = dedent(
        """
        import torch
        import torch.nn as nn


        def build():
            return nn.DataParallel(nn.Linear(4, 1))


        def gradient_penalty(net, real):
            real.requires_grad_(True)
            out = net(real)
            grads = torch.autograd.grad(outputs=out, inputs=real, grad_outputs=torch.ones_like(out), create_graph=True)[0]
            penalty = (grads.norm(2, dim=1) - 1).pow(2).mean()
            penalty.backward(retain_graph=True)
            return penalty
        """
    )
    main = dedent(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset

        import networks


        def main():
            model = networks.build()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
            for x, y in loader:
                optimizer.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                PENALTY
                optimizer.step()


        if __name__ == "__main__":
            main()
        """
    ).replace("PENALTY", "networks.gradient_penalty(model, x)" if called else "pass")
    sources = {tmp_path / "networks.py": networks, tmp_path / "main.py": main}
    for path, text in sources.items():
        path.write_text(text)
    result = convert_project(tmp_path, sources)
    entry = result.files[tmp_path / "networks.py"]
    assert isinstance(entry, ConvertResult)
    assert ("DDP222" in {f.code for f in entry.findings}) is called
    assert entry.changed is not called


INFERENCE = """
import json
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    model = nn.DataParallel(nn.Linear(4, 2))
    model.eval()
    loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=16)
    outputs = []
    for (x,) in loader:
        outputs.append(model(x))
    with open("out.json", "w") as f:
        json.dump(torch.cat(outputs).tolist(), f)


if __name__ == "__main__":
    main()
"""


def test_a_script_that_only_runs_inference_on_loaded_data_is_left_as_it_was() -> None:
    """A DataParallel batch-inference script trains nothing DDP could synchronise: sharding its only loader would
    write every W-th output; kept whole, each process would repeat it. It is left as it was, saying why."""
    from dp2ddp.conversion import INFERENCE_ONLY

    result = convert_source(INFERENCE)
    assert not result.changed and result.reason == INFERENCE_ONLY and not result.findings


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(("        outputs.append(model(x))\n", "        model(x).sum().backward()\n"), id="a backward"),
        pytest.param(("import json\n", "import json\nfrom engine import run\n"), id="code of its own imported"),
    ],
)
def test_a_script_that_may_train_is_converted(change: tuple[str, str]) -> None:
    """Only what the file shows decides: a backward, or an import of code of its own that may train, converts."""
    result = convert_source(INFERENCE.replace(*change))
    assert result.changed and "setup_distributed()" in result.output


def test_print_rebound_to_a_logger_is_guarded_reduced_and_the_rest_reported() -> None:
    """`print = logger.info` makes every later `print(...)` a log line: guarded, its loss averaged, and an accuracy
    counted from this process's outputs reported (DDP427); `traceback.print_exc()` stays on every process."""
    source = dedent(
        """
        import logging
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset

        logger = logging.getLogger("train")
        print = logger.info


        def main():
            model = nn.DataParallel(nn.Linear(4, 2))
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,))), batch_size=8, shuffle=True)
            try:
                for x, y in loader:
                    output = model(x)
                    loss = nn.functional.cross_entropy(output, y)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    acc = output.argmax(1).eq(y).float().mean()
                    print("loss {:.4f} acc {:.4f}".format(loss.item(), acc))
            except Exception:
                import traceback
                traceback.print_exc()


        if __name__ == "__main__":
            main()
        """
    )
    result = convert_source(source)
    assert "global_loss = all_reduce_mean(loss.item())" in result.output
    assert 'if is_main_process():\n                print("loss' in result.output
    assert [(f.line, f.code) for f in result.findings if f.severity != "note"] == [(23, "DDP427")]


def test_a_count_read_beside_an_unreduced_accumulator_is_not_reduced_alone() -> None:
    """`metrics / cnt` where `metrics` is an object of the script's own: summing `cnt` alone would divide this
    process's sums by the whole data's count (a W times smaller accuracy). Both stay per process, reported."""
    source = dedent(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset


        class Accumulator:
            def __init__(self):
                self.total = 0.0

            def add(self, value):
                self.total += value


        def main():
            model = nn.DataParallel(nn.Linear(4, 2))
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            train_loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,))), batch_size=8, shuffle=True)
            metrics = Accumulator()
            cnt = 0
            for x, y in train_loader:
                loss = nn.functional.cross_entropy(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                metrics.add(loss.item() * len(x))
                cnt += len(x)
            print(metrics.total / cnt)


        if __name__ == "__main__":
            main()
        """
    )
    result = convert_source(source)
    assert result.changed and "all_reduce_sum(cnt)" not in result.output
    assert [(f.line, f.code) for f in result.findings if f.severity == "warning"] == [(28, "DDP427")]


def test_a_penalty_returned_by_a_helper_is_followed_to_the_callers_backward() -> None:
    """The penalty reaches `backward()` through the loss a helper returns in a tuple: converted where the same
    backward holds a forward of the model, refused (DDP222) where the penalty is back-propagated alone."""
    source = (FIXTURES_DIR / "penalty_returned_through_a_helper" / "before.py").read_text(encoding="utf-8")
    assert convert_source(source).changed
    alone = source.replace("    loss = loss_real + 1.0 * loss_reg\n", "    loss = loss_reg\n")
    result = convert_source(alone)
    assert not result.changed and [f.code for f in result.findings if f.severity == "error"] == ["DDP222"]
    assert "back-propagated alone" in next(f.message for f in result.findings if f.code == "DDP222")


def test_names_a_whole_set_evaluation_binds_again_are_not_its_share() -> None:
    """`output`, `correct` and `acc` in the training loop are this process's (DDP427 at the training print); the
    same names bound again by an evaluation over a test set kept whole hold whole-set values: not reported."""
    source = dedent(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset

        model = nn.DataParallel(nn.Linear(4, 2))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train_loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,))), batch_size=8, shuffle=True)
        test_loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,))), batch_size=8, **{})
        for epoch in range(2):
            for data, target in train_loader:
                output = model(data)
                loss = nn.functional.cross_entropy(output, target)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                correct = output.argmax(1).eq(target).sum()
                acc = correct * 1.0 / len(data)
                print("train acc", acc)
            correct = 0
            with torch.no_grad():
                for data, target in test_loader:
                    output = model(data)
                    correct += output.argmax(1).eq(target).sum()
            acc = 100.0 * correct / len(test_loader.dataset)
            print("test acc", acc)
        """
    )
    result = convert_source(source)
    assert result.changed
    assert [(f.line, f.code) for f in result.findings if f.code == "DDP427"] == [(19, "DDP427")]


ARRAY_BATCHES = """
import numpy as np
import torch
import torch.nn as nn


def iter_data(X, Y, n_batch):
    for i in range(0, len(X), n_batch):
        yield X[i:i + n_batch], Y[i:i + n_batch]
"""


def test_a_step_taken_in_a_helper_on_array_batches_is_refused_at_the_loop() -> None:
    """`for x, y in iter_data(X, Y, 8): train_step(model, opt, x, y)`: the backward is in the helper, the batches
    in the loop that calls it. Before, no loop around a backward was found, and every process trained on all of it
    with exit 0."""
    source = dedent(ARRAY_BATCHES) + dedent(
        """

        def train_step(model, opt, x, y):
            loss = nn.functional.mse_loss(model(torch.tensor(x)), torch.tensor(y))
            opt.zero_grad()
            loss.backward()
            opt.step()


        def main():
            X, Y = np.random.randn(64, 4), np.random.randn(64, 1)
            model = nn.DataParallel(nn.Linear(4, 1))
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(2):
                for x, y in iter_data(X, Y, 8):
                    train_step(model, opt, x, y)


        if __name__ == "__main__":
            main()
        """
    )
    result = convert_source(source)
    assert [f.code for f in result.findings if f.severity == "error"] == ["DDP317"]
    assert "iter_data(X, Y, 8)" in next(f.message for f in result.findings if f.code == "DDP317")
    assert result.output == source


def test_a_loop_over_models_that_calls_a_step_is_not_a_loop_over_batches() -> None:
    """`for model in (a, b): train_step(model, x, y)` hands the step no batch from the loop: its batches come from
    the loader around it, which is split."""
    source = _script(
        """
        model = nn.DataParallel(nn.Linear(4, 1))

        def train_step(net, x, y):
            nn.functional.mse_loss(net(x), y).backward()
        """,
        """
        for x, y in loader:
            for net in (model,):
                train_step(net, x, y)
        """,
    )
    result = convert_source(source)
    assert not [f for f in result.findings if f.severity == "error"], result.findings
    assert "DistributedSampler(" in result.output


def test_a_step_a_loss_object_of_another_module_takes_on_array_batches_is_refused(tmp_path) -> None:
    """A language model's training loop over `iter_data(*shuffle(...))` of utils.py hands each batch to a loss object
    of loss.py whose `__call__` runs the backward; the evaluation calls it with `only_return_losses=True`, which
    returns before it. Only the training loop is refused (DDP317)."""
    from dp2ddp.api import ConvertResult
    from dp2ddp.projects import convert_project

    files = {
        "utils.py": dedent(ARRAY_BATCHES),
        "loss.py": dedent(
            """
            class LossCompute:
                def __init__(self, criterion, opt):
                    self.criterion = criterion
                    self.opt = opt

                def __call__(self, logits, y, only_return_losses=False):
                    losses = self.criterion(logits, y)
                    if only_return_losses:
                        return losses
                    losses.sum().backward()
                    self.opt.step()
                    self.opt.zero_grad()
            """
        ),
        "train.py": dedent(
            """
            import numpy as np
            import torch
            import torch.nn as nn

            from loss import LossCompute
            from utils import iter_data


            def evaluate(X, Y):
                for x, y in iter_data(X, Y, 8):
                    compute_loss(model(torch.tensor(x)), torch.tensor(y), only_return_losses=True)


            def run_epoch(X, Y):
                for x, y in iter_data(X, Y, 8):
                    logits = model(torch.tensor(x))
                    compute_loss(logits, torch.tensor(y))


            if __name__ == "__main__":
                X, Y = np.random.randn(64, 4), np.random.randn(64, 1)
                model = nn.DataParallel(nn.Linear(4, 1))
                compute_loss = LossCompute(nn.MSELoss(reduction="none"), torch.optim.SGD(model.parameters(), lr=0.1))
                for epoch in range(2):
                    run_epoch(X, Y)
                    evaluate(X, Y)
            """
        ),
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    result = convert_project(tmp_path, {tmp_path / name: text for name, text in files.items()})
    train = result.files[tmp_path / "train.py"]
    assert isinstance(train, ConvertResult)
    errors = [(f.code, f.line) for f in train.findings if f.severity == "error"]
    assert errors == [("DDP317", 16)], train.findings
    assert train.output == files["train.py"]


def test_a_progress_bar_name_rebound_to_the_validation_loader_does_not_make_it_train() -> None:
    """`tbar = tqdm(trainloader)` for the training loop, then `tbar = tqdm(valloader)` for the evaluation: the
    training loop reads the first binding only. Before, the validation loader was split and reshuffled as training
    data, and each process picked its best model on its own shard's score."""
    source = dedent(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset
        from tqdm import tqdm


        def train(model, trainloader, valloader, optimizer):
            best = 0.0
            for epoch in range(2):
                tbar = tqdm(trainloader)
                for x, y in tbar:
                    loss = nn.functional.mse_loss(model(x), y)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                tbar = tqdm(valloader)
                scores = []
                with torch.no_grad():
                    for x, y in tbar:
                        scores.append(nn.functional.mse_loss(model(x), y).item())
                score = -sum(scores)
                if score > best:
                    best = score
                    torch.save(model.module.state_dict(), "best.pth")


        def main():
            valloader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=1, shuffle=False)
            trainloader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
            model = nn.DataParallel(nn.Linear(4, 1))
            train(model, trainloader, valloader, torch.optim.SGD(model.parameters(), lr=0.1))


        if __name__ == "__main__":
            main()
        """
    )
    result = convert_source(source)
    assert not [f for f in result.findings if f.severity == "error"], result.findings
    lines = result.output.splitlines()
    assert "sampler=DistributedSampler(" in next(line for line in lines if "trainloader = DataLoader(" in line)
    assert next(line for line in lines if "valloader = DataLoader(" in line).strip() == (
        "valloader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=1, shuffle=False)"
    )
    assert "valloader.sampler" not in result.output
    # Nor is the training loop's forward taken for an evaluation of the validation loader with gradients (DDP313).
    assert "DDP313" not in {f.code for f in result.findings}


def test_a_loader_bound_in_either_branch_is_split_on_both() -> None:
    """A binding in one branch does not hide the other branch's from the loop after them."""
    source = _script(
        """
        model = nn.DataParallel(nn.Linear(4, 1))
        if torch.cuda.is_available():
            data = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
        else:
            data = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=8, shuffle=True)
        """,
        """
        for x, y in data:
            nn.functional.mse_loss(model(x), y).backward()
        """,
    )
    result = convert_source(source)
    assert result.output.count("sampler=DistributedSampler(") == 3, result.output


def test_a_trainer_module_that_runs_the_handed_model_twice_per_backward_gets_a_static_graph(tmp_path) -> None:
    """Domain adaptation: the entry wraps a model whose class may skip its head and hands it to a Trainer of another
    module, whose loop runs a source forward and a feature forward before one backward. find_unused_parameters=True
    stopped that run at its first backward; static_graph=True trains it (DDP245)."""
    from dp2ddp.api import ConvertResult
    from dp2ddp.projects import convert_project

    files = {
        "models.py": dedent(
            """
            import torch
            import torch.nn as nn


            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.base = nn.Linear(4, 8)
                    self.head = nn.Linear(8, 3)

                def forward(self, x, mode=None):
                    h = torch.relu(self.base(x))
                    if mode == "feat":
                        return h
                    return self.head(h)
            """
        ),
        "trainers.py": dedent(
            """
            import torch.nn as nn


            class Trainer:
                def __init__(self, model):
                    self.model = model

                def train(self, loader, optimizer):
                    for source, labels, target in loader:
                        logits = self.model(source)
                        features = self.model(target, "feat")
                        loss = nn.functional.cross_entropy(logits, labels) + features.pow(2).mean()
                        optimizer.zero_grad()
                        loss.backward()
                        optimizer.step()
            """
        ),
        "main.py": dedent(
            """
            import torch
            import torch.nn as nn
            from torch.utils.data import DataLoader, TensorDataset

            from models import Net
            from trainers import Trainer

            if __name__ == "__main__":
                data = TensorDataset(torch.randn(32, 4), torch.randint(0, 3, (32,)), torch.randn(32, 4))
                loader = DataLoader(data, batch_size=8, shuffle=True)
                model = nn.DataParallel(Net())
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for epoch in range(2):
                    Trainer(model).train(loader, optimizer)
            """
        ),
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    result = convert_project(tmp_path, {tmp_path / name: text for name, text in files.items()})
    main = result.files[tmp_path / "main.py"]
    assert isinstance(main, ConvertResult)
    assert "wrap_ddp(Net(), static_graph=True)" in main.output
    assert "DDP245" in {f.code for f in main.findings}
