"""The helpers convert inserts are total: they run on whatever a real script hands them.

Each helper's source is executed as a converted script would hold it, in a process
group of one process (and of two, where the arithmetic over processes matters).
"""

from __future__ import annotations

import collections
import tempfile
import warnings
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from dp2ddp.codemods.gather_metrics import (
    MEAN_HELPER_SOURCE,
    METER_COPY_HELPER_SOURCE,
    METER_HELPER_SOURCE,
    SUM_HELPER_SOURCE,
)
from dp2ddp.codemods.replace_data_parallel import WRAP_HELPER_SOURCE

Pair = collections.namedtuple("Pair", "loss accuracy")


def _helpers() -> dict[str, Any]:
    from torch.nn.parallel import DistributedDataParallel

    namespace: dict[str, Any] = {"torch": torch, "dist": dist, "DistributedDataParallel": DistributedDataParallel}
    for source in (SUM_HELPER_SOURCE, MEAN_HELPER_SOURCE, METER_HELPER_SOURCE, METER_COPY_HELPER_SOURCE, WRAP_HELPER_SOURCE):
        exec(source, namespace)
    return namespace


def test_without_a_process_group_the_reductions_are_this_processs_values() -> None:
    """Runs before the module's process group exists (tests run in file order). A converted module's evaluation called by a script of the project that was not converted (one process,
    no group) reports its own values, where the reduction used to raise 'Default process group has not been
    initialized'."""
    assert not dist.is_initialized()
    namespace = _helpers()
    meter = SimpleNamespace(sum=6.0, count=3, avg=2.0, val=1.5)
    namespace["all_reduce_meter"](meter)
    assert (meter.sum, meter.count, meter.avg) == (6.0, 3, 2.0)
    assert namespace["all_reduce_sum"](3, 2.5) == (3, 2.5)
    assert namespace["all_reduce_mean"](torch.tensor(0.25)) == torch.tensor(0.25)
    copy = namespace["all_reduce_meter_copy"](meter)
    assert (copy.avg, copy.val) == (2.0, 1.5)


@pytest.mark.parametrize(("environment", "main"), [({}, True), ({"RANK": "0"}, True), ({"RANK": "1"}, False), ({"SLURM_PROCID": "3"}, False)])
def test_before_the_process_group_the_main_process_is_the_launchers_rank_0(
    environment: dict[str, str], main: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Code run at import, before setup_distributed(): a guarded print there ran on every process of torchrun."""
    import os

    from dp2ddp.codemods.guard_side_effects import MAIN_PROCESS_HELPER_SOURCE

    assert not dist.is_initialized()
    for name in ("RANK", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    namespace: dict[str, Any] = {"dist": dist, "os": os}
    exec(MAIN_PROCESS_HELPER_SOURCE, namespace)
    assert namespace["is_main_process"]() is main


@pytest.fixture(scope="module")
def helpers() -> Any:
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield SimpleNamespace(**_helpers())
    dist.destroy_process_group()


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(3, id="an int stays an int"),
        pytest.param(2.5, id="a float"),
        pytest.param(torch.tensor(4), id="an integer tensor keeps its dtype"),
        pytest.param(torch.tensor([[1.0, 2.0], [3.0, 4.0]]), id="a matrix, such as a confusion matrix"),
        pytest.param(np.int64(7), id="a NumPy scalar"),
        pytest.param(np.arange(6).reshape(2, 3), id="a NumPy array keeps its shape and dtype"),
        pytest.param([1.0, 2, torch.tensor(3.0)], id="a list of per-class sums"),
        pytest.param({"l1": 1.0, "gan": torch.tensor(2.0)}, id="a dict of loss terms"),
        pytest.param(Pair(1.0, 2), id="a named tuple"),
    ],
)
def test_sum_returns_each_value_as_it_came(helpers: Any, value: Any) -> None:
    """Should hand back the same type, shape and dtype: one process sums to itself."""
    reduced = helpers.all_reduce_sum(value)
    assert type(reduced) is type(value)
    assert repr(reduced) == repr(value)


def test_several_values_come_back_as_a_tuple(helpers: Any) -> None:
    """Should reduce ``correct, total`` in one call and return them in order."""
    assert helpers.all_reduce_sum(3, 10) == (3, 10)


def test_a_value_that_cannot_be_summed_is_left_alone_with_a_warning(helpers: Any) -> None:
    """Should warn and go on, never crash the run, on a value that is no number (a string, an object)."""
    odd = object()
    with pytest.warns(UserWarning, match="each process reports its own"):
        assert helpers.all_reduce_sum("top-1", odd) == ("top-1", odd)
    with pytest.warns(UserWarning):
        assert helpers.all_reduce_mean([1.0, "n/a"]) == [1.0, "n/a"]


def test_meter_with_a_list_sum_is_averaged_per_entry(helpers: Any) -> None:
    """Should average each entry of a meter that sums a list (one value per class), as the copy for a progress line."""
    meter = SimpleNamespace(sum=[2.0, 4.0], count=2, val=[1.0, 2.0], avg=[1.0, 2.0])
    copy = helpers.all_reduce_meter_copy(meter)
    assert (copy.sum, copy.count, copy.avg, copy.val) == ([2.0, 4.0], 2, [1.0, 2.0], [1.0, 2.0])
    meter = SimpleNamespace(sum={"l1": 3.0}, count=3, avg=None)
    helpers.all_reduce_meter(meter)
    assert meter.avg == {"l1": 1.0}


def test_frozen_module_is_not_wrapped_in_ddp(helpers: Any) -> None:
    """Should leave a module with nothing to train out of DDP (which refuses it), keeping ``.module``."""
    frozen = torch.nn.Linear(2, 2).requires_grad_(False)
    wrapped = helpers.wrap_ddp(frozen)
    assert not isinstance(wrapped, torch.nn.parallel.DistributedDataParallel)
    assert wrapped.module is frozen
    x = torch.randn(3, 2)
    assert torch.equal(wrapped(x), frozen(x))
    assert list(wrapped.state_dict()) == ["module.weight", "module.bias"]
    trained = helpers.wrap_ddp(torch.nn.Linear(2, 2))
    assert isinstance(trained, torch.nn.parallel.DistributedDataParallel)


class _Devices(torch.nn.Module):
    """A loss with no parameters: it reports where it was handed its inputs."""

    def forward(self, output: Any, batch: Any) -> Any:
        return output.device, batch["labels"].device, batch["pair"].loss.device, batch["sizes"]


def test_a_module_with_nothing_to_train_gets_its_inputs_on_this_processs_device(
    helpers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Should move what a parameter-less module is handed to this process's GPU, as DataParallel and DDP do, so a
    criterion handed labels still on the CPU computes on one device (the meta device stands in for the GPU)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: torch.device("meta"))
    wrapped = helpers.wrap_ddp(_Devices())
    batch = {"labels": torch.zeros(2), "pair": Pair(torch.ones(1), 0.5), "sizes": torch.Size([2, 3])}
    output, labels, loss, sizes = wrapped(torch.ones(2), batch)
    assert (output.type, labels.type, loss.type) == ("meta", "meta", "meta")
    assert sizes == torch.Size([2, 3])


def _two_processes(rank: int, store_path: str, results: Any) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = _helpers()
        values = found["all_reduce_sum"]([rank + 1, np.array([rank, 1])], {"n": torch.tensor(rank + 1)})
        mean = found["all_reduce_mean"]([float(rank), torch.tensor([2.0 * rank])])
        meter = SimpleNamespace(sum=[float(rank), 2.0], count=rank + 1, avg=None)
        found["all_reduce_meter"](meter)
    results.put((rank, repr(values), repr(mean), repr(meter.avg)))
    dist.destroy_process_group()


def test_sums_and_means_over_two_processes() -> None:
    """Should add every process's value, leaf by leaf, and divide means by the world size."""
    context = mp.get_context("spawn")
    results = context.SimpleQueue()
    with tempfile.TemporaryDirectory() as folder:
        mp.start_processes(_two_processes, args=(f"{folder}/store", results), nprocs=2, start_method="spawn")
    seen = sorted(results.get() for _ in range(2))
    assert seen[0][1:] == seen[1][1:]
    _, values, mean, average = seen[0]
    assert values == "([3, array([1, 2])], {'n': tensor(3)})"
    assert mean == "[0.5, tensor([1.])]"
    assert average == "[0.3333333333333333, 1.3333333333333333]"

