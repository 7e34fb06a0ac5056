"""A project converted the way users type it: from inside the folder or outside, relative or absolute.

Every spelling of one project (``convert .``, ``./``, ``DIR``, ``DIR/``, ``../DIR``, the absolute
path, ``--project ENTRY.py`` and ``--project ./ENTRY.py``) must write byte-identical trees and say the
same things, paths aside. The folder spellings write the golden tree.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from tests.test_end_to_end import GLOO_EXIT_ABORT

PROJECTS = FIXTURES / "projects"
CASES = sorted(path.name for path in PROJECTS.iterdir() if (path / "before").is_dir())


def _tree(root: Path) -> dict[str, str]:
    return {
        path.relative_to(root).as_posix(): path.read_text(encoding="utf-8")
        for path in sorted(root.rglob("*.py"))
        if "__pycache__" not in path.parts
    }


def _entries(case: str) -> list[str]:
    runs = PROJECTS / case / "runs.txt"
    lines = runs.read_text().splitlines() if runs.is_file() else []
    return [line.removeprefix("whole:").split()[0] for line in lines if line.strip()]


def _convert(case: str, tmp_path: Path, where: str, *arguments: str) -> tuple[dict[str, str], str, int]:
    """Convert a fresh copy of the case from ``where`` (``inside``, ``parent`` or ``sibling``) with the arguments typed.

    ``{abs}`` in an argument is the copy's absolute path. The messages come back with every spelling of
    the folder's path taken out, so that two spellings can be compared.
    """
    work = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
    root = work / case
    shutil.copytree(PROJECTS / case / "before", root)
    (work / "sibling").mkdir()
    cwd = {"inside": root, "parent": work, "sibling": work / "sibling"}[where]
    typed = [argument.replace("{abs}", str(root)) for argument in arguments]
    completed = subprocess.run(
        [sys.executable, "-m", "dp2ddp", "convert", *typed], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert "Traceback" not in completed.stderr, completed.stderr
    messages = completed.stdout + completed.stderr
    for prefix in (f"{root}/", f"../{case}/", f"{case}/"):
        messages = messages.replace(prefix, "")
    return _tree(root), messages, completed.returncode


FOLDER_SPELLINGS = [
    ("inside", "."),
    ("inside", "./"),
    ("inside", "{abs}"),
    ("parent", "{case}"),
    ("parent", "{case}/"),
    ("sibling", "../{case}"),
]


@pytest.mark.parametrize("case", CASES)
def test_every_spelling_of_a_project_folder_converts_it_the_same(case: str, tmp_path: Path) -> None:
    """Should convert the folder to its golden tree however the user names it, with the same messages."""
    results = {
        f"{where} {typed}": _convert(case, tmp_path, where, typed.replace("{case}", case))
        for where, typed in FOLDER_SPELLINGS
    }
    golden = PROJECTS / case / ("after" if (PROJECTS / case / "after").is_dir() else "before")
    expected = _tree(golden)
    first_tree, first_messages, first_code = results["inside ."]
    assert first_tree == expected
    for spelling, (tree, messages, code) in results.items():
        assert tree == first_tree, f"{spelling} wrote another tree than `convert .`"
        assert (messages, code) == (first_messages, first_code), f"{spelling} said other things than `convert .`"


@pytest.mark.parametrize(
    "case, entry", [(case, entry) for case in CASES for entry in dict.fromkeys(_entries(case))]
)
def test_every_spelling_of_a_project_entry_converts_it_the_same(case: str, entry: str, tmp_path: Path) -> None:
    """Should convert the entry and what it imports however the user names the entry, with the same messages."""
    spellings = [
        ("inside", entry),
        ("inside", f"./{entry}"),
        ("parent", f"{case}/{entry}"),
        ("inside", f"{{abs}}/{entry}"),
    ]
    results = {f"{where} {typed}": _convert(case, tmp_path, where, "--project", typed) for where, typed in spellings}
    first_tree, first_messages, first_code = results[f"inside {entry}"]
    assert first_code != 2, first_messages
    assert first_tree != _tree(PROJECTS / case / "before"), f"--project {entry} converted nothing:\n{first_messages}"
    # What the entry reaches is converted as the whole folder converts it (the helpers module holds what it needs).
    after, before = _tree(PROJECTS / case / "after"), _tree(PROJECTS / case / "before")
    changed = {name for name, text in first_tree.items() if text != before.get(name)} - {"ddp_helpers.py"}
    assert changed and all(first_tree[name] == after[name] for name in changed)
    for spelling, (tree, messages, code) in results.items():
        assert tree == first_tree, f"--project {spelling} wrote another tree than `--project {entry}`"
        assert (messages, code) == (first_messages, first_code), f"--project {spelling} said other things"


def _cli(cwd: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dp2ddp", *arguments], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def test_skipping_the_wrap_of_a_factory_leaves_the_whole_program_as_it_was(tmp_path: Path) -> None:
    """Should refuse the factory with DDP107 and hold back its caller: no split data around a DataParallel model."""
    root = tmp_path / "src"
    shutil.copytree(PROJECTS / "factory_returns_moved_wrap" / "before", root)
    completed = _cli(tmp_path, "convert", "--skip", "replace_data_parallel", "src/")
    assert completed.returncode == 1, completed.stderr
    assert "src/model.py:18:17: DDP107 the model stays in DataParallel" in completed.stderr
    assert "DDP104" not in completed.stderr  # no claim that the wrap was made
    assert _tree(root) == _tree(PROJECTS / "factory_returns_moved_wrap" / "before")
    assert "0 files converted" in completed.stderr


def test_an_internal_error_suggests_no_option_that_half_converts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Should name the codemod and ask for a report, never suggest --skip: skipping it leaves its part unconverted."""
    from dp2ddp import api
    from dp2ddp.codemods.replace_data_parallel import ReplaceDataParallelCommand

    def broken(self: object, *args: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(ReplaceDataParallelCommand, "leave_Call", broken)
    source = (PROJECTS / "factory_returns_moved_wrap" / "before" / "model.py").read_text(encoding="utf-8")
    with pytest.raises(api.ConversionError) as raised:
        api.convert_source(source)
    assert "internal error in codemod replace_data_parallel (RuntimeError)" in str(raised.value)
    assert "--skip" not in str(raised.value) and "--only" not in str(raised.value)


def test_an_entry_named_with_project_writes_nothing_its_program_does_not_reach(tmp_path: Path) -> None:
    """Should convert what the entry reaches, and every other entry that shares a converted module with it (left
    behind, it would crash on its first wrap), list every file written, and write nothing anywhere else."""
    root = tmp_path / "project"
    shutil.copytree(PROJECTS / "trainer_with_driver" / "before", root)
    (root / "tools").mkdir()
    (root / "tools" / "export.py").write_text(
        "import sys\nsys.path.insert(0, '..')\nfrom trainer import Trainer\n\nif __name__ == '__main__':\n"
        "    Trainer.__name__\n",
        encoding="utf-8",
    )
    (root / "other").mkdir()
    (root / "other" / "tool.py").write_text("import json\n\nif __name__ == '__main__':\n    print(json.dumps({}))\n")
    (root / "notes.py").write_text("print('not imported')\n", encoding="utf-8")
    completed = _cli(root, "convert", "--project", "notes.py")
    assert completed.returncode == 0, completed.stderr
    assert "left notes.py unchanged: neither it nor a module of its folder it imports wraps a model" in completed.stderr
    assert "0 files converted" in completed.stderr
    assert not list(root.rglob("ddp_helpers.py"))

    completed = _cli(root, "convert", "--project", "run.py")
    assert completed.returncode == 0, completed.stderr
    written = {line.split()[-1] for line in completed.stderr.splitlines() if line.startswith(("converted ", "wrote the helpers module "))}
    assert written == {"run.py", "trainer.py", "tools/export.py"}
    # Its entry points run from two folders: no one helpers module serves both, and the run says so.
    assert "note: the converted entry points run from different folders (./, tools/)" in completed.stderr
    assert not list(root.rglob("ddp_helpers.py"))
    assert "setup_distributed()" in (root / "tools" / "export.py").read_text(encoding="utf-8")
    assert (root / "other" / "tool.py").read_text(encoding="utf-8").startswith("import json\n")


@pytest.mark.parametrize(
    "case, typed, command",
    [
        pytest.param("trainer_with_driver", "trainer.py", "dp2ddp convert .", id="a trainer module: its folder"),
        pytest.param("factory_returns_moved_wrap", "train.py", "dp2ddp convert --project train.py", id="an entry: itself"),
        pytest.param("entries_reach_by_any_import", "trainer.py", "dp2ddp convert .", id="a star import the folder resolves"),
    ],
)
def test_a_file_that_converts_with_its_folder_says_the_exact_command(case: str, typed: str, command: str, tmp_path: Path) -> None:
    """Should end a file converted alone, refused or left without what its folder provides, with the command that converts it."""
    root = tmp_path / case
    shutil.copytree(PROJECTS / case / "before", root)
    completed = _cli(root, "convert", "--check", typed)
    assert f"hint: {typed} converts with the rest of its project: {command}" in completed.stderr
    followed = _cli(root, *command.split()[1:])
    assert followed.returncode == 0, followed.stderr
    assert _tree(root)[typed] == _tree(PROJECTS / case / "after")[typed]


@pytest.mark.parametrize("case", [case for case in CASES if (PROJECTS / case / "after").is_dir()])
def test_check_reads_a_project_folder_the_same_however_it_is_named(case: str, tmp_path: Path) -> None:
    """Should find the same hazards in a converted project from inside it (`check .`) as by its absolute path."""
    root = tmp_path / case
    shutil.copytree(PROJECTS / case / "after", root)
    inside = _cli(root, "check", ".")
    absolute = _cli(tmp_path, "check", str(root))
    assert inside.returncode == absolute.returncode, inside.stdout + absolute.stdout
    assert inside.stdout == absolute.stdout.replace(f"{root}/", ""), inside.stdout + absolute.stdout


def test_a_script_in_a_package_it_imports_by_name_is_converted_from_above_the_package(tmp_path: Path) -> None:
    """Should read `--project pkg/train.py`, which imports `pkg.model`, from the folder that holds `pkg`, and not
    climb past a top folder whose `__init__.py` nothing imports by name."""
    from dp2ddp.files import project_root

    (tmp_path / "__init__.py").write_text("", encoding="utf-8")  # a repository with an __init__ at its top
    package = tmp_path / "src" / "pkg"
    package.mkdir(parents=True)
    (tmp_path / "src" / "__init__.py").write_text("", encoding="utf-8")
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "model.py").write_text(
        "import torch.nn as nn\n\n\ndef build():\n    return nn.DataParallel(nn.Linear(4, 1))\n", encoding="utf-8"
    )
    (package / "train.py").write_text(
        "from pkg.model import build\n\nif __name__ == '__main__':\n    build()\n", encoding="utf-8"
    )
    assert project_root(package / "train.py") == tmp_path / "src"
    completed = _cli(tmp_path / "src", "convert", "--check", "--project", "pkg/train.py")
    assert "would convert pkg/model.py" in completed.stderr and "would convert pkg/train.py" in completed.stderr
    (package / "train.py").write_text("from .model import build\n", encoding="utf-8")
    assert project_root(package / "train.py") == package


def test_a_script_that_imports_the_package_its_repository_installs_is_converted_with_it(tmp_path: Path) -> None:
    """Should read `--project train.py` in scripts/reader, which imports `qa` from the repository's top (a setup.py
    there installs it), from that top: converting the script's folder alone found nothing to convert."""
    from dp2ddp.files import project_root

    (tmp_path / "setup.py").write_text("from setuptools import setup\nsetup(name='qa', packages=['qa'])\n", encoding="utf-8")
    (tmp_path / "qa").mkdir()
    (tmp_path / "qa" / "__init__.py").write_text("from .model import build\n", encoding="utf-8")
    (tmp_path / "qa" / "model.py").write_text(
        "import torch.nn as nn\n\n\ndef build():\n    return nn.DataParallel(nn.Linear(4, 1))\n", encoding="utf-8"
    )
    scripts = tmp_path / "scripts" / "reader"
    scripts.mkdir(parents=True)
    (scripts / "train.py").write_text("import qa\n\nif __name__ == '__main__':\n    qa.build()\n", encoding="utf-8")
    assert project_root(scripts / "train.py") == tmp_path
    completed = _cli(scripts, "convert", "--check", "--project", "train.py")
    assert "would convert ../../qa/model.py" in completed.stderr, completed.stderr
    (tmp_path / "setup.py").unlink()
    assert project_root(scripts / "train.py") == scripts


def test_an_entry_whose_trainer_does_not_parse_names_that_file(tmp_path: Path) -> None:
    """Should fail on the imported trainer's syntax error (exit 2), not say its program wraps nothing."""
    (tmp_path / "trainer.py").write_text(
        "import torch\n\n\ndef train(model, x):\n    model = torch.nn.DataParallel(model)\n    return x.cuda(async=True)\n",
        encoding="utf-8",
    )
    (tmp_path / "main.py").write_text(
        "from trainer import train\n\nif __name__ == \"__main__\":\n    train(None, None)\n", encoding="utf-8"
    )
    completed = _cli(tmp_path, "convert", "--project", "main.py")
    assert completed.returncode == 2, completed.stdout + completed.stderr
    out = completed.stdout + completed.stderr
    assert "trainer.py:6" in out and "non_blocking=" in out
    assert "it imports trainer.py, which Python cannot parse" in out
    assert "wraps a model in nn.DataParallel: nothing to convert" not in out


TRAINER = (
    "import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\n"
    "class Trainer:\n    def __init__(self, argv=None):\n        self.model = nn.DataParallel(nn.Linear(4, 1))\n\n"
    "    def start(self):\n        optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)\n"
    "        loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)\n"
    "        for epoch in range(2):\n            for x, y in loader:\n"
    "                loss = nn.functional.mse_loss(self.model(x), y)\n"
    "                optimizer.zero_grad()\n                loss.backward()\n                optimizer.step()\n"
)


def test_an_entry_run_from_the_top_with_its_packages_there_is_converted_with_them(tmp_path: Path) -> None:
    """`python tools/train.py` with `sys.path.append('.')` imports packages of the folder it is run from; a
    `"/"` on a line mentioning a path is no folder of the project (it once made the whole disk the project)."""
    root = tmp_path / "repo"
    (root / "engine").mkdir(parents=True)
    (root / "tools").mkdir()
    (root / "engine" / "__init__.py").write_text("", encoding="utf-8")
    (root / "engine" / "trainer.py").write_text(TRAINER, encoding="utf-8")
    (root / "tools" / "train.py").write_text(
        "import sys\nsys.path.append('.')\nfrom engine.trainer import Trainer\n\n"
        "if __name__ == '__main__':\n    out_path = 'runs/x'.split('/')\n    Trainer().start()\n",
        encoding="utf-8",
    )
    completed = _cli(root, "convert", "--project", "tools/train.py")
    assert completed.returncode == 0, completed.stderr
    assert "setup_distributed()" in (root / "tools" / "train.py").read_text(encoding="utf-8")
    assert "wrap_ddp(" in (root / "engine" / "trainer.py").read_text(encoding="utf-8")


def test_modules_an_entry_loads_by_a_dotted_name_are_part_of_its_program(tmp_path: Path) -> None:
    """`import_class("processor.recognition.Trainer")` imports that module at run time: its wrap is converted."""
    root = tmp_path / "repo"
    (root / "processor").mkdir(parents=True)
    (root / "processor" / "__init__.py").write_text("", encoding="utf-8")
    (root / "processor" / "recognition.py").write_text(TRAINER, encoding="utf-8")
    (root / "main.py").write_text(
        "import importlib\n\n\ndef import_class(name):\n    module, _, cls = name.rpartition('.')\n"
        "    return getattr(importlib.import_module(module), cls)\n\n\n"
        "if __name__ == '__main__':\n    processor = import_class('processor.recognition.Trainer')\n    processor().start()\n",
        encoding="utf-8",
    )
    completed = _cli(root, "convert", "--project", "main.py")
    assert completed.returncode == 0, completed.stderr
    assert "setup_distributed()" in (root / "main.py").read_text(encoding="utf-8")
    assert "wrap_ddp(" in (root / "processor" / "recognition.py").read_text(encoding="utf-8")


def test_modules_an_entry_loads_from_a_package_named_by_a_prefix_are_part_of_its_program(tmp_path: Path) -> None:
    """`load("trainers." + name)` may import any module of `trainers`: their wraps are converted, where
    the entry once said "nothing to convert" with exit 0."""
    root = tmp_path / "repo"
    (root / "trainers").mkdir(parents=True)
    (root / "trainers" / "__init__.py").write_text("", encoding="utf-8")
    (root / "trainers" / "simple.py").write_text(TRAINER, encoding="utf-8")
    (root / "main.py").write_text(
        "import importlib\n\n\ndef load(module, name):\n    return getattr(importlib.import_module(module), name)\n\n\n"
        "if __name__ == '__main__':\n    kind = 'simple'\n    load('trainers.' + kind, 'Trainer')().start()\n",
        encoding="utf-8",
    )
    completed = _cli(root, "convert", "--project", "main.py")
    assert completed.returncode == 0, completed.stderr
    assert "setup_distributed()" in (root / "main.py").read_text(encoding="utf-8")
    assert "wrap_ddp(" in (root / "trainers" / "simple.py").read_text(encoding="utf-8")


@pytest.mark.slow
def test_a_package_run_by_its_full_name_imports_its_helpers_through_the_package(tmp_path: Path) -> None:
    """`pkg/train.py` imports `pkg.trainer`, so it runs as `python -m pkg.train` or a console script, where a bare
    `from ddp_helpers import` is not found; a module of the program that only asks `isinstance(m, nn.DataParallel)`
    accepts the DDP model it is now handed."""
    root = tmp_path / "repo"
    package = root / "pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "trainer.py").write_text(TRAINER + "        return is_wrapped(self.model)\n", encoding="utf-8")
    (package / "trainer.py").write_text(
        (package / "trainer.py").read_text(encoding="utf-8").replace("import torch\n", "import torch\nfrom pkg.model import is_wrapped\n", 1),
        encoding="utf-8",
    )
    (package / "model.py").write_text(
        "import torch.nn as nn\n\n\ndef is_wrapped(model):\n    return isinstance(model, nn.DataParallel)\n", encoding="utf-8"
    )
    (package / "train.py").write_text(
        "from pkg.trainer import Trainer\n\n\ndef main():\n    assert Trainer().start()\n\n\nif __name__ == '__main__':\n    main()\n",
        encoding="utf-8",
    )
    completed = _cli(root, "convert", "--project", "pkg/train.py")
    assert completed.returncode == 0, completed.stderr
    assert "from pkg.ddp_helpers import" in (package / "trainer.py").read_text(encoding="utf-8")
    assert "isinstance(model, (nn.DataParallel, DistributedDataParallel))" in (package / "model.py").read_text(encoding="utf-8")
    again = _cli(root, "convert", "--check", "--project", "pkg/train.py")
    assert again.returncode == 0, again.stdout + again.stderr
    env = {key: value for key, value in os.environ.items() if key not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["CUDA_VISIBLE_DEVICES"] = ""
    for _ in range(3):
        run = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "pkg.train"],
            cwd=root, env=env, capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        # gloo now and then aborts a process at exit, after the script has finished: run again to tell them apart.
        if run.returncode == 0 or GLOO_EXIT_ABORT not in run.stdout + run.stderr:
            break
    assert run.returncode == 0, run.stdout + run.stderr


def test_batches_from_a_loader_handed_to_a_trainers_constructor_are_split_where_it_is_built(tmp_path: Path) -> None:
    """`Trainer(data.loader(), config)` in main.py: the trainer's `next(iter(self.data_loader))` draws from what
    main.py handed in, and the data module's loader is split there; it was refused as unsplit (DDP317), and
    the trainer's own `self.D.train()` was taken for a call of its `train` method."""
    root = tmp_path / "repo"
    root.mkdir()
    (root / "data.py").write_text(
        "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\nclass Data:\n"
        "    def __init__(self, batch):\n        self.batch = batch\n\n"
        "    def loader(self):\n"
        "        return DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=self.batch, shuffle=True)\n",
        encoding="utf-8",
    )
    (root / "trainer.py").write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Trainer:\n    def __init__(self, data_loader, steps):\n"
        "        self.data_loader = data_loader\n        self.steps = steps\n"
        "        self.D = nn.DataParallel(nn.Linear(4, 1))\n        self.optimizer = torch.optim.SGD(self.D.parameters(), lr=0.1)\n\n"
        "    def train(self):\n        data_iter = iter(self.data_loader)\n        for step in range(self.steps):\n"
        "            self.D.train()\n            try:\n                x, y = next(data_iter)\n            except StopIteration:\n"
        "                data_iter = iter(self.data_loader)\n                x, y = next(data_iter)\n"
        "            loss = nn.functional.mse_loss(self.D(x), y)\n            self.optimizer.zero_grad()\n"
        "            loss.backward()\n            self.optimizer.step()\n",
        encoding="utf-8",
    )
    (root / "main.py").write_text(
        "from data import Data\nfrom trainer import Trainer\n\nif __name__ == '__main__':\n"
        "    Trainer(Data(8).loader(), 10).train()\n",
        encoding="utf-8",
    )
    completed = _cli(root, "convert", "--project", "main.py")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "DDP317" not in completed.stderr
    assert "sampler=" in (root / "data.py").read_text(encoding="utf-8")
    assert "wrap_ddp(" in (root / "trainer.py").read_text(encoding="utf-8")


def test_a_device_a_config_module_binds_to_cuda_or_cpu_is_each_processs_own(tmp_path: Path) -> None:
    """`from config import device`, bound there to torch.device("cuda" if ... else "cpu"): moving the wrapped model
    to it is no hazard (it was refused with DDP212 as a device that may not be this process's GPU)."""
    root = tmp_path / "repo"
    root.mkdir()
    (root / "config.py").write_text(
        "import torch\n\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n", encoding="utf-8"
    )
    (root / "train.py").write_text(
        TRAINER.replace("import torch\n", "import torch\nfrom config import device\n", 1).replace(
            "        optimizer = torch", "        self.model = self.model.to(device)\n        optimizer = torch", 1
        )
        + "\n\nif __name__ == '__main__':\n    Trainer().start()\n",
        encoding="utf-8",
    )
    completed = _cli(root, "convert", "--project", "train.py")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "DDP212" not in completed.stderr and "DDP213" not in completed.stderr


def test_option_defaults_are_read_from_the_program_not_from_other_scripts(tmp_path: Path) -> None:
    """The training program's options module defaults `--batch_size` to 32; a test script beside it defaults its own
    to 1. The training loader's batch is not floored for a default of 1 (DDP336), nor does check say so (DDP531)."""
    root = tmp_path / "repo"
    root.mkdir()
    (root / "options.py").write_text(
        "import argparse\n\n\ndef parse():\n    parser = argparse.ArgumentParser()\n"
        "    parser.add_argument('--batch_size', type=int, default=32)\n    return parser.parse_args()\n",
        encoding="utf-8",
    )
    (root / "net.py").write_text(
        "import torch.nn as nn\n\n\ndef build():\n    return nn.DataParallel(nn.Linear(4, 1))\n", encoding="utf-8"
    )
    (root / "test_model.py").write_text(
        "import argparse\nimport net\n\nparser = argparse.ArgumentParser()\nparser.add_argument('--batch_size', type=int, default=1)\n"
        "if __name__ == '__main__':\n    net.build()\n",
        encoding="utf-8",
    )
    (root / "train.py").write_text(
        "import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\nimport options\nimport net\n\n"
        "opt = options.parse()\nmodel = net.build()\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=opt.batch_size, shuffle=True)\n"
        "for epoch in range(2):\n    for x, y in loader:\n        loss = nn.functional.mse_loss(model(x), y)\n"
        "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n",
        encoding="utf-8",
    )
    completed = _cli(root, "convert", "--project", "train.py")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "DDP336" not in completed.stderr and "DDP111" not in completed.stderr, completed.stderr
    assert "max(1," not in (root / "train.py").read_text(encoding="utf-8")


def test_a_file_name_in_a_string_is_no_import_of_the_script_it_names(tmp_path: Path) -> None:
    """`logging.basicConfig(filename="train.log")` in train.py read as a module `train` imported by name made the entry
    look imported, and its wrap was skipped as a self-test with exit 0 (NER-BERT-pytorch)."""
    root = tmp_path / "repo"
    root.mkdir()
    (root / "train.py").write_text(
        "import logging\nimport torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\n\n"
        "if __name__ == '__main__':\n    logging.basicConfig(filename='train.log')\n"
        "    model = nn.DataParallel(nn.Linear(4, 1))\n    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)\n"
        "    for x, y in loader:\n        loss = nn.functional.mse_loss(model(x), y)\n"
        "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n",
        encoding="utf-8",
    )
    completed = _cli(root, "convert", "--project", "train.py")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "wrap_ddp(" in (root / "train.py").read_text(encoding="utf-8")


def test_a_folder_put_on_sys_path_from_a_root_named_elsewhere_is_found(tmp_path: Path) -> None:
    """`sys.path.insert(0, osp.join(cfg.root_dir, 'common'))` in main/config.py, with root_dir the parent of main/:
    train.py's `from base import Trainer` is common/base.py, whose Trainer wraps the model. Before, the entry was
    left with "nothing to convert"."""
    from dp2ddp.analysis.paths import sys_path_folders
    from dp2ddp.projects import convert_project

    config = "import os.path as osp\nimport sys\nroot_dir = osp.join(osp.dirname(__file__), '..')\nsys.path.insert(0, osp.join(root_dir, 'common'))\n"
    assert tmp_path / "common" in set(sys_path_folders(config, tmp_path / "main"))
    # A line that goes up (`'../../'`) is read from the module's own folder only: from one above, it would leave
    # the repository, and the project would take in every folder around it.
    upward = "sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '../../'))\n"
    assert set(sys_path_folders(upward, tmp_path / "a" / "b")) == {tmp_path}
    assert set(sys_path_folders("sys.path.append('./')\n", tmp_path / "a" / "b")) == {tmp_path / "a" / "b"}
    files = {
        "main/config.py": config,
        "main/train.py": "import config\nfrom base import build\n\nif __name__ == '__main__':\n    build()\n",
        "common/base.py": "import torch.nn as nn\n\n\ndef build():\n    return nn.DataParallel(nn.Linear(4, 1))\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    result = convert_project(tmp_path, {tmp_path / name: text for name, text in files.items()})
    assert "wrap_ddp(nn.Linear(4, 1))" in result.files[tmp_path / "common" / "base.py"].output  # type: ignore[union-attr]


def test_a_script_whose_sys_path_line_names_its_own_folder_stays_in_its_repository(tmp_path: Path) -> None:
    """`sys.path.append('./')` in aster's main.py: the project is the script's folder, never a folder around the
    repository (read from the folders above, it took in all of /tmp and ran for minutes)."""
    from dp2ddp.files import project_root

    repository = tmp_path / "outer" / "repo"
    repository.mkdir(parents=True)
    (repository / ".git").mkdir()
    (tmp_path / "stray.py").write_text("x = 1\n")
    (tmp_path / "outer" / "other.py").write_text("x = 1\n")
    (repository / "main.py").write_text("import sys\nsys.path.append('./')\nsys.path.insert(0, '../..')\n")
    assert project_root(repository / "main.py") == repository


def test_a_model_class_imported_through_a_sys_path_folder_is_read_for_unused_parameters(tmp_path: Path) -> None:
    """`sys.path.append('core')`, then `from network import Net`: Net's attention uses its positional embedding only
    under an option, so the wrap needs find_unused_parameters (without it DDP stops at the second step)."""
    root = tmp_path / "repo"
    (root / "core").mkdir(parents=True)
    (root / "core" / "attention.py").write_text(
        "import torch.nn as nn\n\n\nclass Attention(nn.Module):\n    def __init__(self, args):\n"
        "        super().__init__()\n        self.args = args\n        self.qk = nn.Linear(4, 4)\n"
        "        self.pos_emb = nn.Linear(4, 4)\n\n    def forward(self, x):\n        if self.args.position:\n"
        "            return self.pos_emb(x)\n        return self.qk(x)\n",
        encoding="utf-8",
    )
    (root / "core" / "network.py").write_text(
        "import torch.nn as nn\nfrom attention import Attention\n\n\nclass Net(nn.Module):\n"
        "    def __init__(self, args):\n        super().__init__()\n        self.att = Attention(args)\n\n"
        "    def forward(self, x):\n        return self.att(x)\n",
        encoding="utf-8",
    )
    (root / "train.py").write_text(
        "import sys\nsys.path.append('core')\nimport argparse\nimport torch\nimport torch.nn as nn\n"
        "from torch.utils.data import DataLoader, TensorDataset\nfrom network import Net\n\n\n"
        "def main(args):\n    model = nn.DataParallel(Net(args))\n"
        "    loader = DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4, shuffle=True)\n"
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n    for (x,) in loader:\n"
        "        loss = model(x).sum()\n        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n\n\n"
        "if __name__ == '__main__':\n    parser = argparse.ArgumentParser()\n    parser.add_argument('--position', action='store_true')\n"
        "    main(parser.parse_args())\n",
        encoding="utf-8",
    )
    completed = _cli(root, "convert", "--project", "train.py")
    assert completed.returncode == 0, completed.stderr
    assert "wrap_ddp(Net(args), find_unused_parameters=True)" in (root / "train.py").read_text(encoding="utf-8")
    assert "DDP215" in completed.stdout + completed.stderr
