"""``--synthetic-data``: torchvision datasets become ``FakeData`` of the same shape and class count.

FakeData draws image i from a generator seeded with i, so both runs, and every
rank, see the same images without downloading anything.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

# name: (image shape (C, H, W), number of classes); ImageFolder counts its class folders.
SHAPES: dict[str, tuple[tuple[int, int, int], int]] = {
    "MNIST": ((1, 28, 28), 10),
    "FashionMNIST": ((1, 28, 28), 10),
    "KMNIST": ((1, 28, 28), 10),
    "CIFAR10": ((3, 32, 32), 10),
    "CIFAR100": ((3, 32, 32), 100),
    "SVHN": ((3, 32, 32), 10),
    "STL10": ((3, 96, 96), 10),
    "ImageNet": ((3, 224, 224), 1000),
    "ImageFolder": ((3, 224, 224), 0),
}
# Train and test splits must differ; FakeData's random_offset shifts the per-image seeds.
_TEST_OFFSET = 1_000_000


def install(size: int) -> list[str]:
    """Swap the datasets in ``torchvision.datasets``; returns the names swapped."""
    from torchvision import datasets

    class Synthetic(datasets.FakeData):
        def __init__(self, image_size: tuple[int, int, int], num_classes: int, test: bool, **kwargs: Any) -> None:
            super().__init__(size, image_size, num_classes, random_offset=_TEST_OFFSET if test else 0, **kwargs)
            self.classes = [str(i) for i in range(num_classes)]
            self.class_to_idx = {name: i for i, name in enumerate(self.classes)}

    def factory(name: str, image_size: tuple[int, int, int], num_classes: int) -> Any:
        signature = inspect.signature(getattr(datasets, name))

        def make(*args: Any, **kwargs: Any) -> Synthetic:
            # Bound against the real signature, so positional `train`/`split`/`transform` are read right.
            given = signature.bind_partial(*args, **kwargs).arguments
            root = given.get("root")
            if name == "ImageFolder":
                test = any(part in str(root).lower() for part in ("val", "test"))
            else:
                test = given.get("train", True) is False or given.get("split", "train") not in ("train", "unlabeled")
            transforms = {key: given[key] for key in ("transform", "target_transform") if given.get(key) is not None}
            return Synthetic(image_size, num_classes or _class_folders(root), test, **transforms)

        make.__name__ = make.__qualname__ = name
        return make

    for name, (image_size, num_classes) in SHAPES.items():
        setattr(datasets, name, factory(name, image_size, num_classes))
    return list(SHAPES)


def _class_folders(root: Any) -> int:
    try:
        return sum(entry.is_dir() for entry in os.scandir(root)) or 10
    except OSError:
        return 10
