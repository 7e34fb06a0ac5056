"""download_once: the main process downloads first, the others load what it wrote."""

from __future__ import annotations

from textwrap import dedent, indent

from dp2ddp.api import convert_source

SCRIPT = """\
import torch
from torchvision import datasets

{module_level}


def main():
    train_set = datasets.MNIST("data", train=True, download=True)
    model = torch.nn.DataParallel(Net())


if __name__ == "__main__":
    main()
"""


def test_a_download_in_main_runs_on_the_main_process_first() -> None:
    output = convert_source(SCRIPT.format(module_level="")).output
    assert '    with main_process_first():\n        train_set = datasets.MNIST("data", train=True, download=True)\n' in output
    assert "@contextlib.contextmanager\ndef main_process_first():" in output
    assert convert_source(output).output == output  # converted once


def test_a_download_at_import_before_setup_is_left_alone() -> None:
    """No process group exists yet at import, so no barrier can order the processes there."""
    source = SCRIPT.format(module_level='test_set = datasets.MNIST("data", train=False, download=True)')
    output = convert_source(source).output
    assert '\ntest_set = datasets.MNIST("data", train=False, download=True)\n' in output
    assert output.count("with main_process_first():") == 1


def test_a_call_of_another_library_with_download_is_not_touched() -> None:
    source = dedent(
        """
        import torch
        import mylib

        data = mylib.Corpus("data", download=True)
        model = torch.nn.DataParallel(Net())
        """
    )
    assert "main_process_first" not in convert_source(source).output


OWN_DATASET = """\
import os

import torch
from torch.utils.data import Dataset


class Points(Dataset):
    def __init__(self, root, download=False):
        self.path = os.path.join(root, "points.pt")
        if download:
            self.download()
        if not os.path.exists(self.path):
            raise RuntimeError("Dataset not found")
        self.points = torch.load(self.path)

    def download(self):
        if os.path.exists(self.path):
            return
        partial = self.path + ".partial"
        torch.save(torch.randn(8, 2), partial)
        os.replace(partial, self.path)
{extra}

def main():
{body}


if __name__ == "__main__":
    main()
"""


def _own_dataset(body: str, extra: str = "") -> str:
    return OWN_DATASET.format(body=indent(dedent(body).strip("\n"), "    "), extra=extra)


def test_a_dataset_of_the_script_that_writes_then_reads_runs_on_the_main_process_first() -> None:
    """The main process writes and renames the file; the others wait, then find it and read it."""
    source = _own_dataset(
        """
        train_set = Points("data", download=True)
        model = torch.nn.DataParallel(torch.nn.Linear(2, 2))
        """
    )
    result = convert_source(source)
    output = result.output
    assert '    with main_process_first():\n        train_set = Points("data", download=True)\n' in output
    # Only the outer construction is ordered: no barrier pair nested inside __init__.
    assert output.count("with main_process_first():") == 1
    assert "        if is_main_process():\n            torch.save(torch.randn(8, 2), partial)\n            os.replace(partial, self.path)\n" in output
    assert [(f.line, f.code) for f in result.findings if f.code == "DDP425"] == [(25, "DDP425")]
    assert convert_source(output).output == output  # converted once


def test_a_function_that_caches_then_loads_runs_on_the_main_process_first() -> None:
    extra = """

def cached_features(path):
    torch.save(torch.randn(8, 2), path)
    return torch.load(path)
"""
    source = _own_dataset(
        """
        features = cached_features("features.pt")
        model = torch.nn.DataParallel(torch.nn.Linear(2, 2))
        """,
        extra,
    )
    output = convert_source(source).output
    assert '    with main_process_first():\n        features = cached_features("features.pt")\n' in output


def test_a_dataset_that_only_reads_is_not_ordered() -> None:
    """Nothing is written, so every process may read at once."""
    source = dedent(
        """
        import torch


        class Frozen(torch.utils.data.Dataset):
            def __init__(self, path):
                self.data = torch.load(path)


        def main():
            train_set = Frozen("data.pt")
            model = torch.nn.DataParallel(torch.nn.Linear(2, 2))


        if __name__ == "__main__":
            main()
        """
    )
    output = convert_source(source).output
    assert "main_process_first" not in output


def test_a_writer_that_reads_nothing_back_is_not_ordered() -> None:
    """A class that only writes (a log file) needs its writes guarded, not an order between processes."""
    source = dedent(
        """
        import json
        import torch


        class RunLog:
            def __init__(self, path, config):
                with open(path, "w") as f:
                    json.dump(config, f)


        def main():
            log = RunLog("run.json", {"lr": 0.1})
            model = torch.nn.DataParallel(torch.nn.Linear(2, 2))


        if __name__ == "__main__":
            main()
        """
    )
    assert "main_process_first" not in convert_source(source).output


def test_code_that_builds_the_ddp_model_is_not_run_by_the_main_process_alone() -> None:
    """Building DDP broadcasts the main process's weights: alone, before the others, it would wait forever."""
    extra = """

class Trainer:
    def __init__(self, path):
        self.model = torch.nn.DataParallel(torch.nn.Linear(2, 2))
        torch.save(self.model.state_dict(), path)
        self.state = torch.load(path)
"""
    source = _own_dataset("trainer = Trainer('init.pt')", extra)
    result = convert_source(source)
    assert "main_process_first" not in result.output
    assert not any(f.code == "DDP425" for f in result.findings)


def test_a_write_only_some_processes_reach_is_not_ordered() -> None:
    """Under `if not os.path.exists(...)` a process that already sees the file skips the barrier the others wait at."""
    source = _own_dataset(
        """
        if not os.path.exists("data/points.pt"):
            train_set = Points("data", download=True)
        model = torch.nn.DataParallel(torch.nn.Linear(2, 2))
        """
    )
    assert "with main_process_first()" not in convert_source(source).output


def test_a_write_in_a_loop_is_not_ordered() -> None:
    source = _own_dataset(
        """
        for root in ("a", "b"):
            train_set = Points(root, download=True)
        model = torch.nn.DataParallel(torch.nn.Linear(2, 2))
        """
    )
    assert "with main_process_first()" not in convert_source(source).output


def test_code_that_calls_what_convert_cannot_see_is_not_run_by_the_main_process_alone() -> None:
    """`train(task.make_step, ...)` runs a step function of a module imported by name: it may train, and the main
    process would then meet DDP's collectives alone while the others wait at the barrier."""
    source = dedent(
        """\
        import importlib

        import torch


        def train(step, config):
            for batch in range(config["steps"]):
                step(batch, config)
            torch.save(config["state"], "checkpoint.pt")


        def main():
            task = importlib.import_module("task")
            config = {"steps": 4, "state": {}}
            if config.get("resume"):
                config["state"] = torch.load("checkpoint.pt")
            train(task.make_step(config), config)


        if __name__ == "__main__":
            torch.nn.DataParallel(torch.nn.Linear(2, 2))
            main()
        """
    )
    result = convert_source(source)
    assert "main_process_first" not in result.output
    assert not any(f.code == "DDP425" for f in result.findings)


def test_a_subclass_of_a_torchvision_dataset_told_to_download_runs_on_the_main_process_first(tmp_path) -> None:
    """LDAM-DRW's `IMBALANCECIFAR10(..., download=True)`, a subclass of CIFAR10 (and one of it) in another module."""
    from dp2ddp.api import ConvertResult
    from dp2ddp.projects import convert_project

    imbalance = (
        "import torchvision\n\n\nclass ImbalancedCIFAR10(torchvision.datasets.CIFAR10):\n    pass\n\n\n"
        "class ImbalancedCIFAR100(ImbalancedCIFAR10):\n    pass\n\n\ndef fetch(root, download=True):\n    return root\n"
    )
    main = SCRIPT.replace("from torchvision import datasets", "from imbalance import ImbalancedCIFAR100, fetch")
    main = main.replace('datasets.MNIST("data", train=True, download=True)', 'ImbalancedCIFAR100("data", download=True)\n    fetch("data", download=True)')
    sources = {tmp_path / "imbalance.py": imbalance, tmp_path / "main.py": main}
    for path, text in sources.items():
        path.write_text(text)
    entry = convert_project(tmp_path, sources).files[tmp_path / "main.py"]
    assert isinstance(entry, ConvertResult)
    assert '    with main_process_first():\n        train_set = ImbalancedCIFAR100("data", download=True)\n' in entry.output
    # a function told to download is no dataset class: convert cannot tell what it does
    assert '    fetch("data", download=True)\n' in entry.output and entry.output.count("with main_process_first():") == 1
    # the same class seen alone, its module unread: left as it is
    assert "main_process_first" not in convert_source(main).output
