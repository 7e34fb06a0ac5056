"""A function of another module that builds the training and the evaluation loaders alike (DDP327).

``data_provider(args, flag)`` in ``data/`` builds every split's loader. Split inside it, the
validation and test loaders would be too, and each process would validate on its own shard. The
project leaves its loader whole; each converted caller takes its share where it trains, through
``split_loader``. The project fixture ``loader_builder_shared_with_evaluation`` trains the result.
"""

from __future__ import annotations

from pathlib import Path
from textwrap import dedent

from dp2ddp.api import ConvertResult
from dp2ddp.projects import convert_project

FACTORY = """\
from torch.utils.data import DataLoader


def get_loader(dataset, flag, batch_size):
    shuffle = flag == "train"
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle)
"""

TRAIN = """\
import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

from factory import get_loader


def main():
    dataset = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    model = nn.DataParallel(nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    {binding}
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    {evaluation}


if __name__ == "__main__":
    main()
"""


def _convert(tmp_path: Path, files: dict[str, str]) -> dict[str, ConvertResult]:
    for name, text in files.items():
        (tmp_path / name).write_text(dedent(text), encoding="utf-8")
    result = convert_project(tmp_path, {path: path.read_text(encoding="utf-8") for path in sorted(tmp_path.glob("*.py"))})
    converted = {path.name: outcome for path, outcome in result.files.items()}
    assert all(isinstance(outcome, ConvertResult) for outcome in converted.values()), converted
    return converted  # type: ignore[return-value]


def test_a_builder_asked_for_evaluation_stays_whole_and_the_trainer_splits_its_share(tmp_path: Path) -> None:
    converted = _convert(
        tmp_path,
        {
            "factory.py": FACTORY,
            "train.py": TRAIN.format(
                binding='loader = get_loader(dataset, "train", 8)',
                evaluation='print(sum(nn.functional.mse_loss(model(x), y).item() for x, y in get_loader(dataset, "test", 8)))',
            ),
        },
    )
    assert "Sampler" not in converted["factory.py"].output
    train = converted["train.py"].output
    assert '    loader = get_loader(dataset, "train", 8)\n    loader = split_loader(loader)\n' in train
    assert [f.code for f in converted["train.py"].findings].count("DDP327") == 1
    assert not any(f.code == "DDP317" for f in converted["train.py"].findings)


def test_the_loader_s_place_in_a_returned_tuple_is_split_through_a_method(tmp_path: Path) -> None:
    """``_get_data(flag)`` returns what the builder returned; its callers bind the loader second of two."""
    factory = """\
    from torch.utils.data import DataLoader


    def data_provider(dataset, flag):
        if flag == "test":
            shuffle = False
        else:
            shuffle = True
        loader = DataLoader(dataset, batch_size=8, shuffle=shuffle)
        return dataset, loader
    """
    train = """\
    import torch
    import torch.nn as nn
    from torch.utils.data import TensorDataset

    from factory import data_provider


    class Experiment:
        def __init__(self):
            self.data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
            self.model = nn.DataParallel(nn.Linear(4, 1))

        def _get_data(self, flag):
            data_set, data_loader = data_provider(self.data, flag)
            return data_set, data_loader

        def train(self):
            train_data, train_loader = self._get_data(flag="train")
            test_data, test_loader = self._get_data(flag="test")
            optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
            for x, y in train_loader:
                optimizer.zero_grad()
                nn.functional.mse_loss(self.model(x), y).backward()
                optimizer.step()


    if __name__ == "__main__":
        Experiment().train()
    """
    converted = _convert(tmp_path, {"factory.py": factory, "train.py": train})
    output = converted["train.py"].output
    assert output.count("split_loader(") == 1  # the helper comes from the helpers module
    assert '        train_data, train_loader = self._get_data(flag="train")\n        train_loader = split_loader(train_loader)\n' in output
    assert "test_loader = split_loader" not in output and "data_loader = split_loader" not in output


def test_a_builder_only_training_asks_for_is_split_where_it_builds(tmp_path: Path) -> None:
    factory = FACTORY.replace('shuffle = flag == "train"', "shuffle = True")
    converted = _convert(
        tmp_path,
        {"factory.py": factory, "train.py": TRAIN.format(binding="loader = get_loader(dataset, flag, 8)", evaluation="").replace("def main():", "def main(flag=None):")},
    )
    assert "DistributedSampler" in converted["factory.py"].output or "ShardedSampler" in converted["factory.py"].output
    assert "split_loader" not in converted["train.py"].output


def test_a_builder_its_own_module_trains_with_is_left_to_that_module(tmp_path: Path) -> None:
    """`get_loader(..., "train")` called in the builder's own module, which trains the model handed to it: that
    loader is split there, not left whole for callers elsewhere."""
    factory = "import torch\nimport torch.nn as nn\n" + FACTORY + dedent(
        """

        def fit(model, dataset):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = get_loader(dataset, "train", 8)
            for x, y in loader:
                optimizer.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()
        """
    )
    train = dedent(
        """\
        import torch
        import torch.nn as nn
        from torch.utils.data import TensorDataset

        from factory import fit, get_loader

        if __name__ == "__main__":
            data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
            model = nn.DataParallel(nn.Linear(4, 1))
            fit(model, data)
            print(len(get_loader(data, "val", 8)))
        """
    )
    converted = _convert(tmp_path, {"factory.py": factory, "train.py": train})
    output = converted["factory.py"].output
    assert "Sampler(" in output or "split_loader(" in output, output


def test_training_batches_read_straight_off_a_builder_kept_whole_are_refused(tmp_path: Path) -> None:
    """`for x, y in get_loader(dataset, "train", 8):` binds no name to split: the batches are whole, so DDP317."""
    train = TRAIN.format(binding="loader = None", evaluation='print(len(get_loader(dataset, "test", 8)))').replace(
        "for x, y in loader:", 'for x, y in get_loader(dataset, "train", 8):'
    )
    for name, text in {"factory.py": FACTORY, "train.py": train}.items():
        (tmp_path / name).write_text(dedent(text), encoding="utf-8")
    result = convert_project(tmp_path, {path: path.read_text(encoding="utf-8") for path in sorted(tmp_path.glob("*.py"))})
    findings = [f.code for outcome in result.files.values() if isinstance(outcome, ConvertResult) for f in outcome.findings]
    assert "DDP317" in findings
    assert not any(isinstance(o, ConvertResult) and o.changed for o in result.files.values())


WRAPPED_FACTORY = """\
from torch.utils.data import DataLoader


def get_loader(dataset, split, batch_size, shuffle=True, train=True, fast=False):
    if fast:
        loader = DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, drop_last=train)
    else:
        loader = DataLoader(dataset, batch_size=batch_size, shuffle=shuffle)
    return loader


def get_loaders(dataset, batch_size):
    train_loader = get_loader(dataset, "train", batch_size, True)
    val_loader = get_loader(dataset, "dev", batch_size, False, train=False)
    return train_loader, val_loader
"""

WRAPPED_TRAIN = """\
import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

import factory


class Learner:
    def __init__(self):
        self.net = nn.DataParallel(nn.Linear(4, 1))
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.1)

    def train_step(self, x, y):
        self.optimizer.zero_grad()
        nn.functional.mse_loss(self.net(x), y).backward()
        self.optimizer.step()


def train(loader, learner):
    for x, y in loader:
        learner.train_step(x, y)


def main():
    dataset = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    learner = Learner()
    train_loader, val_loader = factory.get_loaders(dataset, 8)
    for epoch in range(2):
        train(train_loader, learner)
        with torch.no_grad():
            print(sum(nn.functional.mse_loss(learner.net(x), y).item() for x, y in val_loader))


if __name__ == "__main__":
    main()
"""


def test_a_builder_its_module_wraps_for_both_splits_is_split_where_the_caller_trains(tmp_path: Path) -> None:
    """`get_loader(dataset, split, ...)` builds each split's loader (in one of two branches), and `get_loaders()`
    of its own module hands on the "train" and the "dev" one. The caller trains on the first through a learner it
    hands a function: that one is split where it is bound, and the validation loader stays whole. Before, both
    were split inside `get_loader`, and every process validated on its own shard."""
    converted = _convert(tmp_path, {"factory.py": WRAPPED_FACTORY, "train.py": WRAPPED_TRAIN})
    assert "Sampler" not in converted["factory.py"].output
    train = converted["train.py"].output
    assert "    train_loader, val_loader = factory.get_loaders(dataset, 8)\n    train_loader = split_loader(train_loader)\n" in train
    assert "val_loader = split_loader" not in train
    assert [f.code for f in converted["train.py"].findings].count("DDP327") == 1


FLAG_FACTORY = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


def get_loader(train=False, val=False):
    data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    return DataLoader(data, batch_size=8, shuffle=train)
"""

FLAG_TRAIN = """\
import torch
import torch.nn as nn
from tqdm import tqdm

import data


def run(net, loader, optimizer, train=False):
    tq = tqdm(loader)
    total = 0.0
    for x, y in tq:
        loss = nn.functional.mse_loss(net(x), y)
        if train:
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        total += loss.item()
    return total


def main():
    train_loader = data.get_loader(train=True)
    val_loader = data.get_loader(val=True)
    net = nn.DataParallel(nn.Linear(4, 1))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    for epoch in range(2):
        run(net, train_loader, optimizer, train=True)
        run(net, val_loader, optimizer, train=False)


if __name__ == "__main__":
    main()
"""


def test_a_builder_asked_for_a_split_by_a_keyword_flag_is_split_where_the_shared_loop_trains(tmp_path: Path) -> None:
    """`get_loader(train=True)` and `get_loader(val=True)` ask one builder for each split; one function runs both,
    stepping only under `if train:`. The training binding is split where it is bound, the validation one stays
    whole. Before, the batches of `tqdm(loader)` in the shared function were refused as unsplit (DDP317)."""
    converted = _convert(tmp_path, {"data.py": FLAG_FACTORY, "train.py": FLAG_TRAIN})
    train = converted["train.py"]
    assert train.changed and [f for f in train.findings if f.severity == "error"] == []
    assert "    train_loader = data.get_loader(train=True)\n    train_loader = split_loader(train_loader)\n" in train.output
    assert "val_loader = split_loader" not in train.output
    assert "Sampler" not in converted["data.py"].output
