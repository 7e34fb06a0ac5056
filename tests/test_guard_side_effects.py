from __future__ import annotations

import pytest

import re
from textwrap import dedent

from dp2ddp.api import convert_source
from dp2ddp.codemods.guard_side_effects import GuardSideEffectsCommand
from libcst.codemod import CodemodTest

HELPER = '''
import os
import torch.distributed as dist


def is_main_process() -> bool:
    """Whether this process prints, logs and saves for the whole run (rank 0)."""
    if dist.is_initialized():
        return dist.get_rank() == 0
    # Before setup_distributed() (code run at import): the rank the launcher gave, torchrun's or srun's.
    return int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0"))) == 0
'''


def with_helper(expected: str) -> str:
    """``expected`` with the is_main_process helper in place of its ``HELPER`` line (and ``import os`` unless the
    script imports it already)."""
    expected = dedent(expected)
    helper = HELPER.lstrip("\n")
    if "import os\n" in expected.split("HELPER")[0]:
        helper = helper.replace("import os\n", "", 1)
    return re.sub(r"HELPER\n+", lambda _: helper + "\n\n", expected)


class GuardSideEffectsTest(CodemodTest):
    TRANSFORM = GuardSideEffectsCommand

    def test_consecutive_side_effects_share_one_guard(self) -> None:
        """Should put a print and a save with its local state dict under one guard; makedirs runs everywhere."""
        before = """
            import os
            import torch

            def save(model, epoch, acc):
                print("saving")
                state = {"model": model.state_dict(), "epoch": epoch}
                os.makedirs("ckpt", exist_ok=True)
                torch.save(state, "ckpt/last.pt")
                return acc

            model = wrap_ddp(model)
        """
        after = with_helper("""
            import os
            import torch
            HELPER

            def save(model, epoch, acc):
                if is_main_process():
                    print("saving")
                state = {"model": model.state_dict(), "epoch": epoch}
                os.makedirs("ckpt", exist_ok=True)
                if is_main_process():
                    torch.save(state, "ckpt/last.pt")
                return acc

            model = wrap_ddp(model)
        """)
        self.assertCodemod(before, after)

    def test_lone_conditional_print_merges_into_its_condition(self) -> None:
        """Should add the guard to the `if` that only prints, rather than nest a second `if`."""
        before = """
            model = wrap_ddp(model)
            for step, (x, y) in enumerate(loader):
                loss = model(x).sum()
                loss.backward()
                if step % 10 == 0 or step == last:
                    print(step, loss.item())
        """
        after = with_helper("""
            HELPER
            model = wrap_ddp(model)
            for step, (x, y) in enumerate(loader):
                loss = model(x).sum()
                loss.backward()
                if (step % 10 == 0 or step == last) and is_main_process():
                    print(step, loss.item())
        """)
        self.assertCodemod(before, after)

    def test_assignment_read_after_the_run_stays_on_every_process(self) -> None:
        """Should keep `best_acc = acc` unguarded: every process compares against it next epoch."""
        before = """
            import torch

            def test(acc, best_acc):
                if acc > best_acc:
                    print("new best")
                    torch.save(model.state_dict(), "best.pt")
                    best_acc = acc
                return best_acc

            model = wrap_ddp(model)
        """
        after = with_helper("""
            import torch
            HELPER

            def test(acc, best_acc):
                if acc > best_acc:
                    if is_main_process():
                        print("new best")
                        torch.save(model.state_dict(), "best.pt")
                    best_acc = acc
                return best_acc

            model = wrap_ddp(model)
        """)
        self.assertCodemod(before, after)

    def test_assignment_whose_call_changes_state_stays_on_every_process(self) -> None:
        """Should keep `lr = adjust_learning_rate(...)` on every process though only a print reads `lr`: the call
        sets the learning rate, and a process that skipped it would train with another one."""
        before = """
            import time

            def train(optimizer, epoch):
                print("epoch", epoch)
                lr = adjust_learning_rate(optimizer, epoch)
                start = round(time.time(), 1)
                print("lr", lr, start)

            model = wrap_ddp(model)
        """
        after = with_helper("""
            import time
            HELPER

            def train(optimizer, epoch):
                if is_main_process():
                    print("epoch", epoch)
                lr = adjust_learning_rate(optimizer, epoch)
                start = round(time.time(), 1)
                if is_main_process():
                    print("lr", lr, start)

            model = wrap_ddp(model)
        """)
        self.assertCodemod(before, after)

    def test_printed_call_that_changes_state_runs_on_every_process(self) -> None:
        """Should run `adjust_learning_rate(...)` and `next(batches)` on every process and guard only their print."""
        before = """
            def adjust_learning_rate(optimizer, epoch):
                for group in optimizer.param_groups:
                    group["lr"] = 0.1 * 0.5 ** epoch
                return group["lr"]

            def train(optimizer, epoch, batches):
                print("lr", adjust_learning_rate(optimizer, epoch))
                print("first batch", next(batches))

            model = wrap_ddp(model)
        """
        after = with_helper("""
            HELPER

            def adjust_learning_rate(optimizer, epoch):
                for group in optimizer.param_groups:
                    group["lr"] = 0.1 * 0.5 ** epoch
                return group["lr"]

            def train(optimizer, epoch, batches):
                adjust_learning_rate_result = adjust_learning_rate(optimizer, epoch)
                if is_main_process():
                    print("lr", adjust_learning_rate_result)
                next_result = next(batches)
                if is_main_process():
                    print("first batch", next_result)

            model = wrap_ddp(model)
        """)
        self.assertCodemod(before, after)

    def test_write_in_an_elif_beside_other_work_is_guarded(self) -> None:
        """Should guard `self.tb.add_scalar(...)` in an `elif` whose `if` does other work: the writer is None off the
        main process, and the `elif` is no statement of its own to guard whole."""
        before = """
            def add(self, k, v, it):
                if self.monitoring == "telemetry":
                    self.tm.metric_push_async({"metric": k})
                elif self.monitoring == "tensorboard":
                    self.tb.add_scalar(k, v, it)

            model = wrap_ddp(model)
        """
        after = with_helper("""
            HELPER

            def add(self, k, v, it):
                if self.monitoring == "telemetry":
                    self.tm.metric_push_async({"metric": k})
                elif self.monitoring == "tensorboard":
                    if is_main_process():
                        self.tb.add_scalar(k, v, it)

            model = wrap_ddp(model)
        """)
        self.assertCodemod(before, after)

    def test_already_guarded_code_is_left_alone(self) -> None:
        """Should do nothing, since every side effect is already guarded by rank."""
        before = """
            import torch

            model = wrap_ddp(model)
            if args.local_rank in [-1, 0]:
                print("hello")
            if dist.get_rank() == 0:
                torch.save(model.state_dict(), "m.pt")
            if is_main_process():
                print("bye")
        """
        self.assertCodemod(before, before)

    def test_collective_in_a_printed_function_runs_on_every_process(self) -> None:
        """Should evaluate on every process and guard only the print: evaluate() calls the DDP model."""
        before = """
            def evaluate(net, loader):
                return sum(net(x).sum().item() for x in loader)

            model = wrap_ddp(model)
            print("val", evaluate(model, val_loader))
        """
        after = with_helper("""
            HELPER
            def evaluate(net, loader):
                return sum(net(x).sum().item() for x in loader)

            model = wrap_ddp(model)
            evaluate_result = evaluate(model, val_loader)
            if is_main_process():
                print("val", evaluate_result)
        """)
        self.assertCodemod(before, after)

    def test_collective_that_cannot_be_moved_is_reported(self) -> None:
        """Should leave a print of a comprehension over evaluate() on every process and say why."""
        before = """
            def evaluate(loader):
                return model(loader).sum()

            model = wrap_ddp(model)
            print([evaluate(loader) for loader in loaders])
        """
        self.assertCodemod(
            before,
            before,
            expected_warnings=[
                "5:1: DDP401 this line has a side effect and calls `evaluate`, which every process must run, "
                "where it cannot be moved out; left on every process: bind the value first, then guard the "
                "rest with `if is_main_process():`"
            ],
        )

    def test_collective_under_an_existing_rank_guard_is_reported(self) -> None:
        """Should report the barrier that only rank 0 reaches, the classic hang, and change nothing."""
        before = """
            import torch.distributed as dist

            model = wrap_ddp(model)
            if dist.get_rank() == 0:
                print("saving")
                dist.barrier()
        """
        self.assertCodemod(
            before,
            before,
            expected_warnings=[
                "6:5: DDP402 `dist.barrier` runs under a rank guard, but every process must call it; the "
                "processes that skip it leave the others waiting forever: move it out of the guard"
            ],
        )

    def test_backward_next_to_a_print_is_not_guarded(self) -> None:
        """Should guard the print only, since backward() all-reduces gradients."""
        before = """
            model = wrap_ddp(model)
            if step % 10 == 0:
                print("step", step)
                loss.backward()
        """
        after = with_helper("""
            HELPER
            model = wrap_ddp(model)
            if step % 10 == 0:
                if is_main_process():
                    print("step", step)
                loss.backward()
        """)
        self.assertCodemod(before, after)

    def test_tqdm_bars_are_disabled_off_the_main_process(self) -> None:
        """Should disable the bars on other processes instead of guarding the loop."""
        before = """
            from tqdm import tqdm

            model = wrap_ddp(model)
            for x in tqdm(loader, desc="train"):
                model(x).sum().backward()
            for x in tqdm(val_loader, disable=args.quiet):
                model(x)
        """
        after = with_helper("""
            from tqdm import tqdm
            HELPER
            model = wrap_ddp(model)
            for x in tqdm(loader, desc="train", disable=not is_main_process()):
                model(x).sum().backward()
            for x in tqdm(val_loader, disable=args.quiet or not is_main_process()):
                model(x)
        """)
        self.assertCodemod(before, after)

    def test_writers_are_created_on_the_main_process_only(self) -> None:
        """Should create the SummaryWriter and log file on rank 0 and guard every write to them."""
        before = """
            import logging
            from torch.utils.tensorboard import SummaryWriter

            logger = logging.getLogger(__name__)
            writer = SummaryWriter("runs")
            log_file = open("log.txt", "a")
            model = wrap_ddp(model)
            for epoch in range(3):
                loss = train(model)
                writer.add_scalar("loss", loss, epoch)
                log_file.write(f"{epoch} {loss}\\n")
                logger.info("epoch %d", epoch)
            writer.close()
        """
        after = with_helper("""
            import logging
            from torch.utils.tensorboard import SummaryWriter
            HELPER
            logger = logging.getLogger(__name__)
            writer = SummaryWriter("runs") if is_main_process() else None
            log_file = open("log.txt", "a") if is_main_process() else None
            model = wrap_ddp(model)
            for epoch in range(3):
                loss = train(model)
                if is_main_process():
                    writer.add_scalar("loss", loss, epoch)
                    log_file.write(f"{epoch} {loss}\\n")
                    logger.info("epoch %d", epoch)
            if is_main_process():
                writer.close()
        """)
        self.assertCodemod(before, after)

    def test_write_blocks_are_guarded_whole(self) -> None:
        """Should guard a `with open(..., "w")` block and its json.dump as one unit."""
        before = """
            import json

            model = wrap_ddp(model)
            with open("metrics.json", "w") as f:
                json.dump(metrics, f)
        """
        after = with_helper("""
            import json
            HELPER
            model = wrap_ddp(model)
            if is_main_process():
                with open("metrics.json", "w") as f:
                    json.dump(metrics, f)
        """)
        self.assertCodemod(before, after)

    def test_scripts_without_ddp_are_skipped(self) -> None:
        """Should do nothing, since the script has no DDP model to migrate."""
        before = """
            print("hello")
        """
        self.assertCodemod(before, before, expected_skip=True)


def _convert(source: str) -> tuple[str, list[str]]:
    from dp2ddp.api import convert_source

    result = convert_source(dedent(source))
    return result.output, [f"{f.line}:{f.code}" for f in result.findings]


def test_directories_are_made_on_every_process_with_exist_ok() -> None:
    """Made on the main process only, a directory may not exist yet when another process logs into it."""
    output, findings = _convert(
        """
        import os
        import torch

        def main(args):
            model = torch.nn.DataParallel(Net())
            if not os.path.exists(args.out):
                os.mkdir(args.out)
            os.makedirs(args.logs)
            os.makedirs(args.cache, exist_ok=True)
            handler = logging.FileHandler(os.path.join(args.logs, "train.log"))
        """
    )
    assert "    if not os.path.exists(args.out):\n        os.makedirs(args.out, exist_ok=True)\n" in output
    assert "\n    os.makedirs(args.logs, exist_ok=True)\n" in output
    assert "\n    os.makedirs(args.cache, exist_ok=True)\n" in output
    # Only the bare call changes behaviour (it no longer fails on an existing directory), so only it is reported.
    assert [f for f in findings if f.endswith("DDP417")] == ["9:DDP417"]


def test_a_writer_read_beyond_its_writes_exists_on_every_process() -> None:
    output, findings = _convert(
        """
        import os
        import torch
        from torch.utils.tensorboard import SummaryWriter

        def log_loss(writer, value):
            writer.add_scalar("loss", value)

        def report(writer, value):
            path = os.path.join(writer.log_dir, "best.txt")
            print(path, value)

        def main(args):
            model = torch.nn.DataParallel(Net())
            quiet = SummaryWriter(args.logs)
            loud = SummaryWriter(args.logs)
            log = open(args.log, "w")
            log_loss(quiet, 1.0)
            report(loud, 2.0)
            name = log.name
            log.write("done")
            if quiet is not None:
                quiet.close()
        """
    )
    assert "    quiet = SummaryWriter(args.logs) if is_main_process() else None\n" in output
    assert "    loud = SummaryWriter(args.logs)\n" in output
    assert '    log = open(args.log if is_main_process() else os.devnull, "w")\n' in output
    assert "    if is_main_process():\n        writer.add_scalar" in output
    # Reported where the writer escapes: inside the helper for `loud`, at `log.name` for `log`.
    assert [f for f in findings if f.endswith("DDP418")] == ["10:DDP418", "20:DDP418"]


def test_a_file_on_devnull_that_only_meets_writes_is_not_a_warning() -> None:
    """Passed to a function that writes into it, or flushed: os.devnull takes it on the other processes."""
    output, findings = _convert(
        """
        import os
        import numpy as np
        import torch

        def main(args):
            model = torch.nn.DataParallel(Net())
            log = open(args.log, "wb")
            np.zeros(4).tofile(log)
            os.fsync(log.fileno())
            log.write(b"done")
        """
    )
    assert '    log = open(args.log if is_main_process() else os.devnull, "wb")\n' in output
    assert not [f for f in findings if f.endswith("DDP418")]


def test_writes_the_guard_list_did_not_know() -> None:
    output, _ = _convert(
        """
        import sys
        import torch
        from tensorboard_logger import configure, log_value
        from utils import create_exp_dir

        def main(args):
            logging = create_exp_dir(args.work_dir)
            model = torch.nn.DataParallel(Net())
            configure(args.logs)
            sys.stdout.write("starting\\n")
            logging("epoch done")
            log_value("loss", 1.0, 0)
            model.module.save(args.out)
            model.module.train()
        """
    )
    assert "    logging = create_exp_dir(args.work_dir)\n" in output
    guarded = (
        "    if is_main_process():\n"
        "        configure(args.logs)\n"
        '        sys.stdout.write("starting\\n")\n'
        '        logging("epoch done")\n'
        '        log_value("loss", 1.0, 0)\n'
        "        model.module.save(args.out)\n"
        "    model.module.train()\n"
    )
    assert guarded in output


def test_another_files_function_named_for_writing_is_reported_not_guarded() -> None:
    """Convert cannot see into it; a guard around a collective would hang, so it says where to look."""
    output, findings = _convert(
        """
        import torch
        from utils import progress_bar, save_checkpoint, build_model

        def main(args):
            model = torch.nn.DataParallel(build_model())
            progress_bar(1, 10, "loss")
            save_checkpoint({"model": model.state_dict()}, args.out)
            build_model()
        """
    )
    assert '    progress_bar(1, 10, "loss")\n' in output
    assert [f for f in findings if f.endswith("DDP422")] == ["7:DDP422", "8:DDP422"]


def test_another_files_writer_whose_name_says_it_picks_its_process_is_not_reported() -> None:
    """`save_on_master(...)` chooses the main process itself: it is no write every process makes."""
    _, findings = _convert(
        """
        import torch
        from utils import save_on_master, print_rank_0

        def main(args):
            model = torch.nn.DataParallel(torch.nn.Linear(2, 1))
            save_on_master({"model": model.state_dict()}, args.out)
            print_rank_0("saved")
        """
    )
    assert not [f for f in findings if f.endswith("DDP422")]


@pytest.mark.parametrize(
    "where, shared",
    [
        # every process builds the trainer together: one broadcast of the main process's stamp
        (
            "class Trainer:\n    def __init__(self, out):\n        {stamp}\n        self.path = os.path.join(out, stamp)\n\n"
            "    def save(self):\n        torch.save({{}}, self.path)\n\n\ndef main(args):\n    Trainer(args.out).save()",
            True,
        ),
        # a stamp per epoch, in a loop: a process that left the loop early would leave the others waiting
        ("def main(out):\n    for epoch in range(3):\n        {draw}", False),
        # called only on the main process: the others never reach a broadcast there
        ("def make(out):\n    {draw}\n\nif dist.get_rank() == 0:\n    make(args.out)", False),
        # module level runs at import, before the process group exists
        ("{draw}", False),
    ],
)
def test_a_stamp_naming_a_file_takes_the_main_process_value_where_every_process_draws_it(where: str, shared: bool) -> None:
    """`stamp = time.strftime(...)` naming a checkpoint: shared (DDP426) only where a broadcast pairs up, else DDP423."""
    stamp = 'stamp = time.strftime("%Y%m%d-%H%M%S")'
    before = where.split("{draw}")[0]
    indent = " " * (len(before) - len(before.rstrip(" ")))
    draw = f'{stamp}\n{indent}torch.save({{}}, os.path.join("out", stamp + ".pt"))'
    body = where.replace("{draw}", draw).replace("{stamp}", stamp).replace("{{}}", "{}")
    source = "import os\nimport time\nimport torch\nimport torch.distributed as dist\n\n" + body + "\nmodel = torch.nn.DataParallel(Net())\n"
    output, findings = _convert(source)
    codes = {f.split(":")[1] for f in findings}
    assert ("DDP426" in codes, "DDP423" in codes) == (shared, not shared)
    assert ('main_process_value(time.strftime("%Y%m%d-%H%M%S"))' in output) is shared


def test_a_random_run_id_that_names_a_directory_is_reported() -> None:
    output, findings = _convert(
        """
        import os
        import random
        import time
        import torch
        from torch.utils.tensorboard import SummaryWriter

        def main(args):
            run_id = random.randint(1, 100000)
            logdir = os.path.join("runs", str(run_id))
            writer = SummaryWriter(log_dir=logdir)
            started = time.time()
            model = torch.nn.DataParallel(Net())
            print(time.time() - started)
        """
    )
    assert "    run_id = random.randint(1, 100000)\n" in output
    assert [f for f in findings if f.endswith("DDP423")] == ["9:DDP423"]


def test_a_lazily_created_writer_is_created_on_the_main_process_only() -> None:
    """`self.writer = None`, then created on first use: one writer, on rank 0; every use is safe elsewhere."""
    source = """\
import torch
from torch.utils.tensorboard import SummaryWriter


class Board:
    def __init__(self):
        self.writer = None

    def scalar(self, value, step):
        if self.writer is None:
            self.writer = SummaryWriter("runs")
        self.writer.add_scalar("loss", value, step)

    def close(self):
        if self.writer is not None:
            self.writer.close()


def main():
    model = torch.nn.DataParallel(torch.nn.Linear(2, 1))
    board = Board()
    for step in range(3):
        loss = model(torch.randn(4, 2)).sum()
        loss.backward()
        board.scalar(loss.item(), step)
    board.close()


if __name__ == "__main__":
    main()
"""
    result = convert_source(source)
    assert 'self.writer = SummaryWriter("runs") if is_main_process() else None' in result.output
    assert "if is_main_process():\n            self.writer.add_scalar" in result.output
    assert "if self.writer is not None and is_main_process():" in result.output
    assert "DDP418" not in {f.code for f in result.findings}


def test_a_writer_written_with_a_reduced_metric_is_judged_as_its_split_line() -> None:
    """`writer.add_scalar("loss", loss.item(), step)` in the loop: the reduction is hoisted, the writer made on rank 0 (a fixpoint)."""
    source = """\
import torch
from torch.utils.tensorboard import SummaryWriter


def main():
    model = torch.nn.DataParallel(torch.nn.Linear(2, 1))
    loader = torch.utils.data.DataLoader(torch.randn(16, 2), batch_size=4, shuffle=True)
    writer = SummaryWriter()
    for epoch in range(2):
        for step, x in enumerate(loader):
            loss = model(x).sum()
            loss.backward()
            writer.add_scalar("loss", loss.item(), step)
    writer.close()


if __name__ == "__main__":
    main()
"""
    result = convert_source(source)
    assert "writer = SummaryWriter() if is_main_process() else None" in result.output
    assert "global_loss = all_reduce_mean(loss.item())\n            if is_main_process():\n" in result.output
    assert convert_source(result.output).output == result.output


def test_a_writing_method_of_an_object_built_from_another_files_class_is_reported() -> None:
    """`ckpt = CheckpointIO(dir)` from another file, then `ckpt.save(...)`: convert cannot see inside, so it says so."""
    source = """\
import torch
from mylib.checkpoints import CheckpointIO


def main():
    model = torch.nn.DataParallel(torch.nn.Linear(2, 1))
    ckpt = CheckpointIO("out")
    for step in range(3):
        loss = model(torch.randn(4, 2)).sum()
        loss.backward()
        ckpt.save("model.pt", step)


if __name__ == "__main__":
    main()
"""
    result = convert_source(source)
    assert [f.line for f in result.findings if f.code == "DDP422"] == [11]


def test_a_writing_method_of_a_part_of_a_project_object_is_reported(tmp_path) -> None:
    """`logger.train_writer.write(...)`: the project's TermLogger was judged, but not the Writer it holds (SC-SfMLearner)."""
    from dp2ddp.api import ConvertResult
    from dp2ddp.projects import convert_project

    logger = "class Writer:\n    def write(self, text):\n        print(text)\n\n\nclass TermLogger:\n    def __init__(self):\n        self.train_writer = Writer()\n"
    main = """\
import torch
from logger import TermLogger


def main():
    model = torch.nn.DataParallel(torch.nn.Linear(2, 1))
    logger = TermLogger()
    loss = model(torch.randn(4, 2)).sum()
    loss.backward()
    logger.train_writer.write("done")


if __name__ == "__main__":
    main()
"""
    sources = {tmp_path / "logger.py": logger, tmp_path / "main.py": main}
    for path, text in sources.items():
        path.write_text(text)
    entry = convert_project(tmp_path, sources).files[tmp_path / "main.py"]
    assert isinstance(entry, ConvertResult)
    assert [f.line for f in entry.findings if f.code == "DDP422"] == [10]


def test_a_tensorboard_style_add_method_of_another_files_logger_is_reported() -> None:
    """`logger.add_imgs(...)` on a logger built from another file's class writes like a SummaryWriter does."""
    source = """\
import torch
from mylib.logging import Logger


def main():
    model = torch.nn.DataParallel(torch.nn.Linear(2, 1))
    logger = Logger("out")
    for step in range(3):
        loss = model(torch.randn(4, 2)).sum()
        loss.backward()
        logger.add_imgs(torch.zeros(1, 3, 4, 4), "samples", step)


if __name__ == "__main__":
    main()
"""
    assert [f.line for f in convert_source(source).findings if f.code == "DDP422"] == [11]


def test_a_write_inside_a_block_guarded_whole_is_not_reported() -> None:
    """`with open(log, "a") as f: csv.writer(f).writerow(row)` goes under one guard: nothing is left to report."""
    source = """\
import csv

import torch


def main():
    model = torch.nn.DataParallel(torch.nn.Linear(2, 1))
    for step in range(3):
        loss = model(torch.randn(4, 2)).sum()
        loss.backward()
        with open("log.csv", "a") as logfile:
            logwriter = csv.writer(logfile)
            logwriter.writerow([step, loss.item()])


if __name__ == "__main__":
    main()
"""
    result = convert_source(source)
    assert "if is_main_process():\n            with open(" in result.output
    assert "DDP422" not in {f.code for f in result.findings}


def test_a_logger_that_forces_its_file_to_disk_opens_it_on_the_main_process_only() -> None:
    """`os.fsync(self.file.fileno())` is a write of its own: routed to os.devnull, the other processes' fsync raised
    EINVAL at exit (AlignedReID's Logger); guarded, the file is the main process's alone."""
    source = dedent(
        """
        import os
        import sys
        import torch


        class Logger:
            def __init__(self, fpath):
                self.console = sys.stdout
                self.file = open(fpath, "w")

            def write(self, msg):
                self.console.write(msg)
                self.file.write(msg)

            def flush(self):
                self.file.flush()
                os.fsync(self.file.fileno())


        if __name__ == "__main__":
            sys.stdout = Logger("log.txt")
            model = torch.nn.DataParallel(torch.nn.Linear(4, 1))
            print("start")
        """
    )
    output = convert_source(source).output
    assert "os.devnull" not in output
    assert "        if is_main_process():\n            self.file.flush()\n            os.fsync(self.file.fileno())\n" in output


def test_a_progress_bar_draws_on_the_main_process_only() -> None:
    """bearpaw-style `Bar("Processing", max=len(loader))` (the `progress` package, often re-exported by utils/): the
    other processes' bars draw into os.devnull, which is no terminal, so one bar is drawn; given twice, it stays."""
    source = dedent(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset
        from utils import Bar


        def main():
            model = nn.DataParallel(nn.Linear(4, 1))
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
            for epoch in range(2):
                bar = Bar("Processing", max=len(loader))
                for x, y in loader:
                    loss = nn.functional.mse_loss(model(x), y)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    bar.next()
                bar.finish()


        if __name__ == "__main__":
            main()
        """
    )
    result = convert_source(source)
    expected = 'bar = Bar("Processing", max=len(loader), file=sys.stderr if is_main_process() else open(os.devnull, "w"))'
    assert expected in result.output and "import sys" in result.output
    assert convert_source(result.output).output == result.output


def test_a_shell_command_run_for_its_effect_is_reported_on_every_process() -> None:
    """`os.system(...)` as a statement runs on every process, and what it writes is in a string convert does not
    read: reported (DDP428), left as it was; one under a rank condition, or whose output is used, is not."""
    from dp2ddp.api import convert_source

    source = """import os
import subprocess
import torch
from torch.utils.data import DataLoader


def main(data):
    os.system("mkdir -p runs && cp train.py runs")
    gpus = subprocess.check_output(["nvidia-smi", "-L"])
    model = torch.nn.DataParallel(Net())
    loader = DataLoader(data, batch_size=8, shuffle=True)
    for x, y in loader:
        model(x).sum().backward()
    subprocess.run(["rm", "-rf", "scratch"])


if __name__ == "__main__":
    main(None)
"""
    result = convert_source(source)
    assert result.changed
    assert [(f.line, f.code) for f in result.findings if f.code == "DDP428"] == [(8, "DDP428"), (14, "DDP428")]
    assert 'os.system("mkdir -p runs && cp train.py runs")' in result.output


def test_a_compound_statement_on_one_line_that_only_writes_is_guarded() -> None:
    """`if os.path.exists(prev): os.remove(prev)` beside the checkpoint save: its body is a suite on the same line,
    no indented block, and was left on every process (check then found DDP501 in convert's output)."""
    from textwrap import dedent

    from dp2ddp.api import convert_source

    source = dedent(
        """
        import os
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset

        model = nn.DataParallel(nn.Linear(4, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
        for epoch in range(2):
            for x, y in loader:
                optimizer.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()
            torch.save(model.state_dict(), f"epoch_{epoch}.pt")
            prev = f"epoch_{epoch - 1}.pt"
            if os.path.exists(prev): os.remove(prev)
        """
    )
    result = convert_source(source)
    assert "DDP111" not in {f.code for f in result.findings}, result.findings
    lines = result.output.splitlines()
    at = next(i for i, line in enumerate(lines) if "os.remove(prev)" in line)
    assert any("if is_main_process():" in line for line in lines[at - 4 : at]), "\n".join(lines[at - 6 : at + 1])


@pytest.mark.parametrize(
    "where, shared",
    [
        # every process runs the test together, once: the broadcast pairs up
        ("def main(out):\n    {test}", True),
        # in a loop: a process that left the loop early would leave the others waiting in the broadcast
        ("def main(runs):\n    for out in runs:\n        {test}", False),
        # called only on the main process: the others never reach a broadcast there
        ("def make(out):\n    {test}\n\nif dist.get_rank() == 0:\n    make(args.out)", False),
    ],
)
def test_a_test_that_the_run_folder_is_new_takes_the_main_process_answer_where_every_process_runs_it(where: str, shared: bool) -> None:
    """`if os.path.exists(out): raise` before `os.makedirs(out)`, which every process runs: a late process would find
    the folder another made. Shared (DDP429) only where a broadcast pairs up, else reported (DDP430)."""
    before = where.split("{test}")[0]
    indent = " " * (len(before) - len(before.rstrip(" ")))
    test = f'if os.path.exists(out):\n{indent}    raise NameError("exists")\n{indent}os.makedirs(out)'
    source = "import os\nimport torch\nimport torch.distributed as dist\n\n" + where.replace("{test}", test) + "\nmodel = torch.nn.DataParallel(Net())\n"
    output, findings = _convert(source)
    codes = {f.split(":")[1] for f in findings}
    assert ("DDP429" in codes, "DDP430" in codes) == (shared, not shared)
    assert ("if main_process_value(os.path.exists(out)):" in output) is shared


def test_a_data_file_opened_to_read_and_update_stays_the_real_file_on_every_process() -> None:
    """`h5py.File(name, "r+")` holding the data set is read by every process: sent to os.devnull off the main
    process, the others would read no data."""
    output, findings = _convert(
        """
        import h5py
        import torch

        def load(name):
            f = h5py.File(name, "r+")
            data = f["data"][:]
            f.close()
            return data

        def main():
            data = load("train.h5")
            model = torch.nn.DataParallel(Net())
            out = h5py.File("out.h5", "w")
            out["x"] = data

        if __name__ == "__main__":
            main()
        """
    )
    assert 'f = h5py.File(name, "r+")' in output
    assert "os.devnull" in output  # the file opened to write only is still the main process's alone
