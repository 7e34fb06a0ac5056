"""Which DataLoader trains: the question convert and check both ask of every loader."""

from __future__ import annotations

import re

import libcst as cst
import libcst.matchers as m

from .syntax import argument, code_of

EVALUATION_NAME = re.compile(r"val|test|eval", re.IGNORECASE)
# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, ...)
BATCH_SIZE, SHUFFLE, SAMPLER, BATCH_SAMPLER = 1, 2, 3, 4


def is_training_loader(call: cst.Call, reference: cst.BaseExpression | None, only_loader: bool) -> bool:
    """A loader named for training or shuffled, or the script's only loader: ``check`` asks the same."""
    name = code_of(reference) if reference is not None else ""
    if "train" in name.lower():
        return True
    if EVALUATION_NAME.search(name):
        return False
    shuffle = argument(call, SHUFFLE, "shuffle")
    if shuffle is not None and not m.matches(shuffle, m.Name("False") | m.Name("None")):
        return True
    # A sampler or batch sampler of its own, unless it only reads the data in order, draws training batches.
    for position, keyword in ((SAMPLER, "sampler"), (BATCH_SAMPLER, "batch_sampler")):
        sampler = argument(call, position, keyword)
        if sampler is not None and not m.matches(sampler, m.Name("None")) and "sequential" not in code_of(sampler).lower():
            return True
    return only_loader
