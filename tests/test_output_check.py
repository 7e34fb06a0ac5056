"""convert runs check on its own output: what check finds there and convert did not report is never silent."""

from __future__ import annotations

import textwrap

from dp2ddp.api import ConvertOptions, convert_source, deeply, with_output_checked
from dp2ddp.codemods._base import Finding
from tests.conftest import FIXTURES

# A flow model trained under DataParallel only with several GPUs; on one GPU its own `reverse` is called on the
# bare model. Converted, the model is DDP on every path, so that branch calls `reverse` on the wrapper.
ONE_SIDED = textwrap.dedent(
    """\
    import argparse

    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset


    class Flow(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(4, 4)

        def forward(self, x):
            return self.layer(x)

        def reverse(self, z):
            return z - self.layer.bias


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--num_gpu", type=int, default=1)
        args = parser.parse_args()
        model = Flow()
        if args.num_gpu > 1:
            model = nn.DataParallel(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(TensorDataset(torch.randn(32, 4)), batch_size=8, shuffle=True)
        for epoch in range(2):
            for (x,) in loader:
                loss = model(x).pow(2).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            with torch.no_grad():
                if args.num_gpu == 1:
                    sample = model.reverse(torch.zeros(1, 4))
                else:
                    sample = model.module.reverse(torch.zeros(1, 4))
            print(epoch, sample.sum().item())


    if __name__ == "__main__":
        main()
    """
)


def test_a_fix_check_knows_is_made_in_the_output() -> None:
    """Should read the model through `.module` on the side written for the bare model, and note it at the original's line."""
    result = convert_source(ONE_SIDED)
    assert result.changed
    assert "                sample = model.module.reverse(torch.zeros(1, 4))\n" in result.output
    assert "model.reverse(" not in result.output
    notes = [f for f in result.findings if f.code == "DDP112"]
    assert [f.line for f in notes] == [ONE_SIDED.splitlines().index("            if args.num_gpu == 1:") + 1]
    assert "DDP533" in notes[0].message
    assert convert_source(result.output).output == result.output, "converting the fixed output again changes nothing"


# What a conversion gone wrong would write: rank 0 alone reaches a collective, and every other process hangs.
HANGS = textwrap.dedent(
    """\
    import torch
    import torch.distributed as dist


    def setup_distributed():
        dist.init_process_group("gloo")


    def main():
        setup_distributed()
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
        if dist.get_rank() == 0:
            dist.barrier()
            torch.save(model.module.state_dict(), "model.pth")


    if __name__ == "__main__":
        main()
    """
)
SOURCE = HANGS.replace("    if dist.get_rank() == 0:\n        dist.barrier()\n", "    if True:\n")


def test_an_error_check_finds_in_the_output_leaves_the_file_as_it_was() -> None:
    """Should keep the source, with DDP110 near the line the collective came from, every warning, and no note."""
    note = Finding("DDP112", "made a change", 1, 1, "note")
    output, findings = deeply(SOURCE, with_output_checked, SOURCE, HANGS, [note], None)
    assert output == SOURCE
    errors = [f for f in findings if f.severity == "error"]
    assert [f.code for f in errors] == ["DDP110"], findings
    assert "DDP502" in errors[0].message and "at its line 13" in errors[0].message
    assert SOURCE.splitlines()[errors[0].line - 1].strip().startswith(("if True:", "torch.save("))
    assert note not in findings


def test_a_warning_check_finds_in_the_output_is_passed_on_at_the_original_line() -> None:
    """Should name each unguarded print and save that skipping guard_side_effects leaves, at the line it was."""
    before = (FIXTURES / "cifar_resnet" / "before.py").read_text(encoding="utf-8")
    result = convert_source(before, ConvertOptions(skip=("guard_side_effects",)))
    assert result.changed
    passed_on = [f for f in result.findings if f.code == "DDP111"]
    assert passed_on and all("DDP501" in f.message for f in passed_on)
    lines = before.splitlines()
    assert all(("print(" in lines[f.line - 1] or "torch.save(" in lines[f.line - 1]) for f in passed_on)


def test_a_clean_conversion_reports_nothing_of_check() -> None:
    """Should add no finding where the output is what check expects: every golden converts without DDP110/DDP111."""
    for case in sorted(p for p in FIXTURES.iterdir() if (p / "after.py").exists()):
        report = (case / "report.txt").read_text(encoding="utf-8")
        assert "DDP110" not in report and "DDP111" not in report, case.name
