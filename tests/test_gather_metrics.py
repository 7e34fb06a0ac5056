"""Values that drive a decision on every process are the same on every process."""

from __future__ import annotations

from textwrap import dedent

import pytest

from dp2ddp.api import convert_source

SCRIPT = """
import torch
from torch.optim.lr_scheduler import ReduceLROnPlateau
from torch.utils.data import DataLoader


def main(args):
    model = torch.nn.DataParallel(Net())
    scheduler = ReduceLROnPlateau(optimizer)
    loader = DataLoader(ds, batch_size=32, shuffle=True)
    for epoch in range(10):
        for x, y in loader:
            loss = model(x).sum()
            loss.backward()
        {step}
"""


@pytest.mark.parametrize(
    ("step", "converted"),
    [
        pytest.param("scheduler.step(loss.item())", "scheduler.step(all_reduce_mean(loss.item()))", id="positional"),
        pytest.param("scheduler.step(metrics=loss)", "scheduler.step(metrics=all_reduce_mean(loss))", id="keyword"),
        pytest.param("scheduler.step(all_reduce_mean(loss))", "scheduler.step(all_reduce_mean(loss))", id="reduced already"),
    ],
)
def test_a_plateau_scheduler_steps_on_a_value_averaged_over_processes(step: str, converted: str) -> None:
    result = convert_source(dedent(SCRIPT).replace("{step}", step))
    assert f"        {converted}\n" in result.output


def test_a_plateau_scheduler_stepped_on_one_process_is_reported() -> None:
    step = "if args.rank == 0:\n            scheduler.step(loss.item())"
    result = convert_source(dedent(SCRIPT).replace("{step}", step))
    assert "scheduler.step(loss.item())" in result.output
    assert any(f.code == "DDP420" for f in result.findings)


def test_a_counter_of_the_batch_that_sets_the_learning_rate_is_reported() -> None:
    source = """
import torch
from torch.utils.data import DataLoader


class Trainer:
    def train(self):
        model = torch.nn.DataParallel(self.model)
        loader = DataLoader(self.train_set, batch_size=32, shuffle=True)
        for epoch in range(10):
            for x, y in loader:
                loss = model(x, y).mean()
                loss.backward()
                self.tokens += (y >= 0).sum()
                self.steps += 1
                lr_mult = float(self.tokens) / float(max(1, self.warmup_tokens))
                lr = self.learning_rate * lr_mult
"""
    result = convert_source(source)
    assert [(f.line, f.code) for f in result.findings if f.code == "DDP421"] == [(14, "DDP421")]


def test_a_running_sum_of_summed_losses_is_summed_over_processes_not_averaged() -> None:
    """Averaged, `total / len(dataset)` would report half the loss per sample on 2 processes."""
    source = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader


def evaluate(model, loader, criterion):
    total = 0.0
    with torch.no_grad():
        for x, y in loader:
            loss = criterion(model(x), y)
            total += loss.item()
    return total / len(loader.dataset)


def main():
    model = torch.nn.DataParallel(Net())
    criterion = nn.MSELoss(reduction="sum")
    train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=32)
    for epoch in range(3):
        for x, y in train_loader:
            criterion(model(x), y).backward()
        print(evaluate(model, val_loader, criterion))
"""
    result = convert_source(source)
    assert "        total = all_reduce_sum(total)\n" in result.output
    assert "all_reduce_mean" not in result.output


def test_validation_every_n_steps_reports_its_own_gathered_numbers_without_a_progress_note() -> None:
    """The validation loop's meter is reduced after it; the training loop does not claim it as per-process progress."""
    source = """
import torch
from torch.utils.data import DataLoader


def main(cfg, writer):
    model = torch.nn.DataParallel(Net())
    train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=32)
    val_meter = AverageMeter()
    i = 0
    for epoch in range(3):
        for x, y in train_loader:
            i += 1
            loss = model(x, y)
            loss.backward()
            if i % cfg.print_every == 0:
                writer.add_scalar("loss/train", loss.item(), i)
            if i % cfg.val_every == 0:
                with torch.no_grad():
                    for vx, vy in val_loader:
                        val_meter.update(model(vx, vy).item(), len(vy))
                writer.add_scalar("loss/val", val_meter.avg, i)
"""
    result = convert_source(source)
    assert not [f for f in result.findings if f.code == "DDP403"]
    assert "all_reduce_meter(val_meter)" in result.output
    # `i` counts steps, the same on every process: the training loss is averaged there.
    assert 'writer.add_scalar("loss/train", global_loss, i)' in result.output


@pytest.mark.parametrize(
    ("after", "reported"),
    [
        pytest.param("epoch_loss = np.mean(losses)\n        if epoch_loss < target:\n            break", True, id="a list of losses"),
        pytest.param("if loss.item() < target:\n            break", True, id="the last batch's loss"),
        pytest.param("if running / len(train_loader) < target:\n            break", False, id="an accumulator gathered after the loop"),
        pytest.param("if epoch > 5:\n            break", False, id="the epoch"),
        pytest.param("if all_reduce_mean(np.mean(losses)) < target:\n            break", False, id="averaged already"),
    ],
)
def test_stopping_on_a_per_process_value_is_reported(after: str, reported: bool) -> None:
    source = f"""
import numpy as np
import torch
from torch.utils.data import DataLoader


def main(target):
    model = torch.nn.DataParallel(Net())
    train_loader = DataLoader(ds, batch_size=32, shuffle=True)
    for epoch in range(100):
        losses, running = [], 0.0
        for x, y in train_loader:
            loss = model(x, y)
            loss.backward()
            losses.append(loss.item())
            running += loss.item()
        {after}
"""
    result = convert_source(source)
    assert any(f.code == "DDP424" for f in result.findings) is reported


def test_a_metric_passed_by_a_keyword_of_the_same_name_keeps_its_keyword() -> None:
    """`log(avg_loss=avg_loss)` reads the reduced value; the keyword stays a keyword (was a parse error)."""
    source = dedent(
        """\
        import torch
        from torch.utils.data import DataLoader


        def main():
            loader = DataLoader(data, batch_size=8, shuffle=True)
            model = torch.nn.DataParallel(net)
            for epoch in range(2):
                avg_loss = 0.0
                for i, (x, y) in enumerate(loader):
                    loss = model(x).mean()  # a per-batch mean: averaged over processes
                    loss.backward()
                    avg_loss += loss.item()
                    print("step", i, "avg", avg_loss / (i + 1), "meter", meter.avg_loss)
                print(epoch, avg_loss=avg_loss)


        if __name__ == "__main__":
            main()
        """
    )
    output = convert_source(source).output
    compile(output, "<converted>", "exec")
    assert "global_avg_loss = all_reduce_mean(avg_loss)" in output
    assert '"avg", global_avg_loss / (i + 1), "meter", meter.avg_loss)' in output
    assert "print(epoch, avg_loss=avg_loss)" in output


GUARDED_PRINT = """
import torch
from torch.utils.data import DataLoader


def train(gpu, args):
    {device}
    model = torch.nn.DataParallel(Net())
    loader = DataLoader(ds, batch_size=32, shuffle=True)
    for epoch in range(2):
        for step, (x, y) in enumerate(loader):
            loss = model(x).sum()
            loss.backward()
            if {test}:
                print(f"step {{step}} loss {{loss.item():.4f}}")


train(0, args)
"""


@pytest.mark.parametrize(
    ("device", "test"),
    [
        pytest.param("torch.cuda.set_device(gpu)", "step % 10 == 0 and gpu == 0", id="gpu == 0"),
        pytest.param("gpu_id = gpu\n    torch.cuda.set_device(gpu_id)", "step % 10 == 0 and gpu_id == 0", id="gpu_id == 0"),
        pytest.param("scale = torch.ones(1).cuda(args.gpu)", "step % 10 == 0 and args.gpu == 0", id="args.gpu == 0"),
        pytest.param("device = torch.device('cuda', gpu)", "gpu == 0 and step % 10 == 0", id="an index of torch.device"),
        pytest.param("local_rank = gpu\n    torch.cuda.set_device(local_rank)", "step % 10 == 0 and local_rank == 0", id="local_rank == 0"),
    ],
)
def test_the_reduction_a_print_under_a_gpu_index_test_reads_goes_before_that_test(device: str, test: str) -> None:
    """Once `gpu` is each process's own GPU only one process passes `gpu == 0`: a reduction inside would hang."""
    result = convert_source(GUARDED_PRINT.format(device=device, test=test))
    expected = (
        "            global_loss = all_reduce_mean(loss.item())\n"
        f"            if {test}:\n"
        '                print(f"step {step} loss {global_loss:.4f}")\n'
    )
    assert expected in result.output
    assert not [f for f in result.findings if f.code in ("DDP402", "DDP403")]


def test_a_test_on_a_gpu_count_is_the_same_everywhere_and_reduces_inside() -> None:
    """Should keep the reduction in the `if`: `gpus` counts GPUs and is no process's index."""
    source = GUARDED_PRINT.format(device="gpus = torch.cuda.device_count()", test="step % 10 == 0 and gpus == 0")
    result = convert_source(source)
    assert (
        "            if step % 10 == 0 and gpus == 0:\n"
        "                global_loss = all_reduce_mean(loss.item())\n"
        "                if is_main_process():\n"
    ) in result.output


def test_a_print_whose_test_guards_the_value_is_left_per_process() -> None:
    """`loss is not None` protects `loss.item()`: reducing before the test could fail, so the line is noted instead."""
    source = GUARDED_PRINT.format(device="torch.cuda.set_device(gpu)", test="loss is not None and gpu == 0")
    result = convert_source(source)
    assert '                print(f"step {step} loss {loss.item():.4f}")\n' in result.output
    assert "all_reduce_mean" not in result.output
    assert [f.code for f in result.findings if f.code == "DDP403"] == ["DDP403"]


@pytest.mark.parametrize(
    ("step", "reported"),
    [
        pytest.param("it += 1", False, id="a counter added to in place"),
        pytest.param("it = it + 1", False, id="a counter assigned its own value plus one"),
        pytest.param("it = args.accumulate + it", False, id="a counter plus a value every process shares"),
        pytest.param("it = it + loss.item()", True, id="a sum of this process's losses"),
        pytest.param("it += loss.item()", False, id="a sum of losses added in place, averaged after the loop"),
        pytest.param("it = it + len(x)", True, id="a count of this process's samples"),
    ],
)
def test_stopping_on_a_step_counter_is_not_a_per_process_value(step: str, reported: bool) -> None:
    """A counter advances alike on every process, so every process stops after the same epoch."""
    source = f"""
import torch
from torch.utils.data import DataLoader


def main(args, max_steps):
    model = torch.nn.DataParallel(Net())
    train_loader = DataLoader(ds, batch_size=32, shuffle=True)
    it = 0
    for epoch in range(100):
        for x, y in train_loader:
            loss = model(x, y)
            loss.backward()
            {step}
        if it >= max_steps:
            break
"""
    result = convert_source(source)
    assert any(f.code == "DDP424" for f in result.findings) is reported, result.findings


PRINTS = """
import torch
from torch.utils.data import DataLoader


def main(rank):
    model = torch.nn.DataParallel(Net())
    loader = DataLoader(ds, batch_size=32, shuffle=True)
    for epoch in range(10):
        for batch_idx, (data, target) in enumerate(loader):
            data = data.cuda()
            noise = torch.randn(data.size(0), 4)
            loss = model(data, noise).sum()
            loss.backward()
            {inside}
        {after}
"""


@pytest.mark.parametrize(
    ("inside", "converted"),
    [
        pytest.param(
            "print(batch_idx * len(data), len(loader.dataset))",
            "print(batch_idx * len(data) * dist.get_world_size(), len(loader.dataset))",
            id="a samples-seen count becomes the global batch's, the dataset's length stays",
        ),
        pytest.param(
            "print(data.shape[0] / 2, target.size(0))",
            "print((data.shape[0] * dist.get_world_size()) / 2, target.size(0) * dist.get_world_size())",
            id="a batch size inside another operator keeps its own parentheses",
        ),
        pytest.param("print(noise.size(0))", "print(noise.size(0))", id="a tensor made in the loop is no batch"),
    ],
)
def test_a_batch_size_a_training_report_prints_is_the_global_batch_s(inside: str, converted: str) -> None:
    result = convert_source(dedent(PRINTS).replace("{inside}", inside).replace("{after}", "pass"))
    assert converted in result.output
    assert convert_source(result.output).output == result.output  # multiplied once only


@pytest.mark.parametrize(
    ("after", "converted", "reported"),
    [
        pytest.param(
            "print(epoch, loss.item())", "global_loss = all_reduce_mean(loss.item())", False,
            id="the last step's loss after the loop is averaged over processes",
        ),
        pytest.param(
            "if epoch % 5 == 0:\n            print(epoch, loss)", "global_loss = all_reduce_mean(loss)", False,
            id="the loss tensor under a test every process passes alike",
        ),
        pytest.param(
            "if rank == 0:\n            print(epoch, loss.item())", "print(epoch, loss.item())", True,
            id="under a rank condition it stays per process and is reported",
        ),
    ],
)
def test_the_loss_printed_after_the_training_loop(after: str, converted: str, reported: bool) -> None:
    result = convert_source(dedent(PRINTS).replace("{inside}", "pass").replace("{after}", after))
    assert converted in result.output
    assert any(f.code == "DDP403" for f in result.findings) == reported


PRINTED = """
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
{extra}

def train_epoch(model, loader, optimizer, criterion):
    losses = []
    for x, y in loader:
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        {collect}
    {after}


def main():
    model = nn.DataParallel(nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
    criterion = {criterion}
    for epoch in range(2):
        train_loss = train_epoch(model, loader, optimizer, criterion)
        print("epoch", epoch, "train loss", train_loss)
"""


@pytest.mark.parametrize(
    ("collect", "after", "criterion", "extra", "reduced", "reported"),
    [
        # Autoformer's shape: the mean of a list of per-step losses, returned, then printed by the caller
        ("losses.append(loss.item())", "return np.average(losses)", "nn.MSELoss()", "", "return all_reduce_mean(np.average(losses))", False),
        ("losses.append(loss.item())", "return sum(losses) / len(losses)", "nn.MSELoss()", "", "return all_reduce_mean(sum(losses)) / len(losses)", False),
        # a criterion that sums over the batch: each step's value is a sum over this process's share
        ("losses.append(loss.item())", "return np.average(losses)", "nn.MSELoss(reduction='sum')", "", None, True),
        # a spread of the steps' losses is not linear in them: not averaged over processes
        ("losses.append(loss.item())", "return np.std(losses)", "nn.MSELoss()", "", None, True),
        # a collector of the script's own convert knows nothing of
        ("meter.add(loss)", "return meter.value()", "nn.MSELoss()", "meter = Averager()", None, True),
    ],
)
def test_a_number_printed_from_the_losses_is_averaged_or_reported(
    collect: str, after: str, criterion: str, extra: str, reduced: str | None, reported: bool
) -> None:
    """Every number a training loop's loss reaches a print through is reduced, or reported at the print (DDP427)."""
    source = PRINTED.format(collect=collect, after=after, criterion=criterion, extra=extra)
    result = convert_source(dedent(source))
    assert result.changed
    if reduced is not None:
        assert f"    {reduced}\n" in result.output
    assert ("DDP427" in {f.code for f in result.findings}) is reported


@pytest.mark.parametrize("read", ["loss.data[0]", "loss.data.item()", "loss.detach().item()"])
def test_the_loss_read_through_its_data_is_averaged_where_it_is_printed(read: str) -> None:
    source = SCRIPT.replace("{step}", "").replace("            loss.backward()", f"            loss.backward()\n            print({read})")
    result = convert_source(dedent(source))
    assert f"global_loss = all_reduce_mean({read})" in result.output
    assert "DDP427" not in {f.code for f in result.findings}


def test_the_terms_of_a_summed_loss_logged_per_step_are_reported() -> None:
    """`loss = loss_1 + 0.1 * loss_2`, then `writer.add_scalar("photometric", loss_1.item(), n)`: rank 0's term (DDP427)."""
    source = SCRIPT.replace("{step}", "").replace(
        "            loss = model(x).sum()\n            loss.backward()",
        "            loss_1 = model(x).sum()\n            loss_2 = model(x).abs().sum()\n            loss = loss_1 + 0.1 * loss_2\n"
        "            loss.backward()\n            print(\"photometric\", loss_1.item())",
    )
    result = convert_source(dedent(source))
    assert [f.code for f in result.findings if f.code == "DDP427"] == ["DDP427"]


def test_a_dict_a_nested_function_fills_with_its_loss_is_per_process_where_the_caller_shows_it() -> None:
    """`state["train_loss"] = loss_avg` in train(), then the epoch loop prints the entry: rank 0's own loss,
    reported (DDP427), though test() reduces a `loss_avg` of its own. An entry train() does not fill
    (`state["test_loss"]`, from the whole test set) is not."""
    from textwrap import dedent

    from dp2ddp.api import convert_source

    source = dedent(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset

        state = {}
        net = nn.DataParallel(nn.Linear(4, 1))
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        train_loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
        test_loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=8)


        def train():
            loss_avg = 0.0
            for x, y in train_loader:
                loss = nn.functional.mse_loss(net(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                loss_avg = loss_avg * 0.8 + float(loss) * 0.2
            state["train_loss"] = loss_avg


        def test():
            loss_avg = 0.0
            with torch.no_grad():
                for x, y in test_loader:
                    loss_avg += float(nn.functional.mse_loss(net(x), y))
            state["test_loss"] = loss_avg / len(test_loader)


        for epoch in range(2):
            train()
            test()
            print("train", state["train_loss"])
            print("test", state["test_loss"])
        """
    )
    result = convert_source(source)
    reported = [f.line for f in result.findings if f.code == "DDP427"]
    assert reported == [source.splitlines().index('    print("train", state["train_loss"])') + 1], result.findings
