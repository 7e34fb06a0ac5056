"""``dp2ddp check``: one fixture per rule, converted goldens that check clean, and the CLI a user drives.

Each ``fixtures/check/<CODE>/`` holds ``case.py`` with ``case.txt`` (the
``line:col CODE message`` lines check must report) and ``valid.py``, the
same script written safely, which must report nothing. A rule's other shapes
sit beside them: ``case_<what>.py`` with ``case_<what>.txt`` (a hazard the rule
once missed) and ``valid_<what>.py`` (right code it once flagged).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from dp2ddp.api import convert_source
from dp2ddp.check import Selection, check_source
from dp2ddp.cli import main
from dp2ddp.rules import RULES, is_check_rule
from tests.conftest import FIXTURES

CHECK_CASES = sorted(path for path in (FIXTURES / "check").iterdir() if (path / "case.py").is_file())
# Every hazard script of every rule, and every safe one.
HAZARD_SCRIPTS = sorted(script for case in CHECK_CASES for script in case.glob("case*.py"))
SAFE_SCRIPTS = sorted(script for case in CHECK_CASES for script in case.glob("valid*.py"))


def _script_id(script: Path) -> str:
    return f"{script.parent.name}/{script.stem}"


def _lines(source: str) -> str:
    return "".join(f"{d.line}:{d.column} {d.code} {d.message}\n" for d in check_source(source).diagnostics)


@pytest.mark.parametrize("script", HAZARD_SCRIPTS, ids=_script_id)
def test_each_rule_reports_its_cases_exactly(script: Path, update_goldens: bool) -> None:
    found = _lines(script.read_text(encoding="utf-8"))
    expected = script.with_suffix(".txt")
    if update_goldens:
        expected.write_text(found, encoding="utf-8")
    assert found == expected.read_text(encoding="utf-8")
    assert script.parent.name in found, "a case must show its own rule"


@pytest.mark.parametrize("script", SAFE_SCRIPTS, ids=_script_id)
def test_the_safe_scripts_report_nothing(script: Path) -> None:
    source = script.read_text(encoding="utf-8")
    compile(source, str(script), "exec")
    assert _lines(source) == ""


def test_every_check_rule_has_a_case() -> None:
    check_codes = {code for code in RULES if is_check_rule(code)} | {"DDP002"}
    assert check_codes == {case.name for case in CHECK_CASES}


def test_the_fixes_remove_what_they_fix_and_nothing_else() -> None:
    source = (FIXTURES / "check" / "DDP505" / "case.py").read_text(encoding="utf-8")
    result = check_source(source)
    assert [d.code for d in result.diagnostics if d.fixable] == ["DDP505"]
    assert result.fixed.replace(", sampler=DistributedSampler(dataset))", ", sampler=DistributedSampler(dataset), shuffle=True)") == source
    assert check_source(result.fixed).diagnostics == ()


def test_converting_is_the_fix_for_data_parallel() -> None:
    source = (FIXTURES / "mnist_argparse" / "before.py").read_text(encoding="utf-8")
    result = check_source(source)
    assert [d.code for d in result.diagnostics] == ["DDP002"]
    assert result.fixed == convert_source(source).output
    assert check_source(result.fixed).diagnostics == ()


def test_a_data_parallel_script_convert_refuses_gets_no_fix_and_the_reason() -> None:
    source = (FIXTURES / "composite_gan_losses" / "before.py").read_text(encoding="utf-8")
    result = check_source(source)
    assert {d.code for d in result.diagnostics} == {"DDP002", "DDP221"}
    assert not any(d.fixable for d in result.diagnostics) and result.fixed == source


def test_files_of_neither_ddp_nor_data_parallel_have_no_findings() -> None:
    source = "import torch\nprint(torch.zeros(1))\ntorch.save(torch.zeros(1), 'x.pt')\n"
    assert check_source(source).diagnostics == ()


def test_a_library_function_that_starts_a_process_group_is_not_a_script() -> None:
    """Side effects and samplers are a script's business: a library that prints does so for its caller."""
    source = "import torch.distributed as dist\n\ndef setup():\n    dist.init_process_group('gloo')\n    print('ready')\n"
    assert check_source(source).diagnostics == ()


@pytest.mark.parametrize(
    "select, ignore, wanted",
    [
        pytest.param(("DDP5",), (), {"DDP501", "DDP502", "DDP505"}, id="a prefix selects a family"),
        pytest.param(("DDP",), ("DDP50",), set(), id="a prefix ignores a family"),
        pytest.param(("DDP502",), ("DDP5",), {"DDP502"}, id="the more specific prefix wins"),
        pytest.param(("ALL",), ("DDP501",), {"DDP502", "DDP505"}, id="ALL selects everything"),
    ],
)
def test_selection_expands_prefixes(select: tuple[str, ...], ignore: tuple[str, ...], wanted: set[str]) -> None:
    source = (FIXTURES / "check" / "DDP505" / "case.py").read_text(encoding="utf-8")
    source = source.replace("    for epoch in range(2):", "    print('start')\n    if dist.get_rank() == 0:\n        dist.barrier()\n    for epoch in range(2):")
    found = {d.code for d in check_source(source, Selection(select, ignore)).diagnostics}
    assert found == wanted


def test_an_unknown_code_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown code or prefix 'DDP9'"):
        Selection(("DDP9",))


# -- the command line ---------------------------------------------------------------------------


def run(*args: str, cwd: Path | None = None) -> tuple[int, str, str]:
    previous = Path.cwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        result = CliRunner().invoke(main, list(args))
    finally:
        os.chdir(previous)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A folder with one hazardous DDP script and one clean one."""
    (tmp_path / "train.py").write_text((FIXTURES / "check" / "DDP502" / "case.py").read_text(encoding="utf-8"))
    (tmp_path / "clean.py").write_text((FIXTURES / "check" / "DDP502" / "valid.py").read_text(encoding="utf-8"))
    return tmp_path


def test_check_reports_path_line_column_and_exits_1(project: Path) -> None:
    code, out, err = run("check", ".", cwd=project)
    assert code == 1
    assert out.splitlines() == [line.replace(" ", ": ", 1).join(["train.py:", ""]) for line in
                                (FIXTURES / "check" / "DDP502" / "case.txt").read_text().splitlines()]  # fmt: skip
    assert "checked 2 files: 1 finding (1 error)" in err


def test_fail_on_and_exit_zero_decide_the_exit_status(project: Path) -> None:
    (project / "train.py").write_text((FIXTURES / "check" / "DDP501" / "case.py").read_text(encoding="utf-8"))
    assert run("check", "train.py", cwd=project)[0] == 1
    assert run("check", "--fail-on", "error", "train.py", cwd=project)[0] == 0
    assert run("check", "--exit-zero", "train.py", cwd=project)[0] == 0


def test_noqa_silences_a_line_for_its_codes_only(project: Path) -> None:
    source = (project / "train.py").read_text()
    (project / "train.py").write_text(source.replace("dist.barrier()", "dist.barrier()  # noqa: DDP501"))
    assert run("check", "train.py", cwd=project)[0] == 1
    (project / "train.py").write_text(source.replace("dist.barrier()", "dist.barrier()  # noqa: DDP502"))
    assert run("check", "train.py", cwd=project)[0] == 0
    (project / "train.py").write_text(source.replace("dist.barrier()", "dist.barrier()  # noqa"))
    assert run("check", "train.py", cwd=project)[0] == 0


def test_pyproject_configures_selection_per_file_ignores_and_exclude(project: Path) -> None:
    (project / "legacy").mkdir()
    (project / "legacy" / "old.py").write_text((project / "train.py").read_text())
    (project / "pyproject.toml").write_text(
        '[tool.dp2ddp]\nignore = ["DDP508"]\nexclude = ["legacy"]\n[tool.dp2ddp.per-file-ignores]\n"train.py" = ["DDP502"]\n'
    )
    code, out, err = run("check", ".", cwd=project)
    assert (code, out) == (0, "")
    assert "checked 2 files" in err  # legacy/old.py is excluded


def test_a_bad_configuration_is_an_error_without_traceback(project: Path) -> None:
    (project / "pyproject.toml").write_text('[tool.dp2ddp]\nselekt = ["DDP5"]\n')
    code, _, err = run("check", ".", cwd=project)
    assert code == 2 and "unknown key 'selekt'" in err and "Traceback" not in err


def test_an_unknown_select_code_is_a_usage_error(project: Path) -> None:
    code, _, err = run("check", "--select", "DDP9", ".", cwd=project)
    assert code == 2 and "unknown code or prefix 'DDP9'" in err


def test_a_file_that_does_not_parse_is_reported_and_exits_2(project: Path) -> None:
    (project / "broken.py").write_text("import torch.distributed as dist\ndist.init_process_group(\n")
    code, out, err = run("check", ".", cwd=project)
    assert code == 2
    assert "broken.py:" in err and "syntax error" in err and "Traceback" not in err
    assert "train.py:" in out  # the other files are still checked


def test_diff_shows_the_fix_and_writes_nothing_and_fix_writes_it(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    source = (FIXTURES / "check" / "DDP505" / "case.py").read_text(encoding="utf-8")
    script.write_text(source)
    code, out, _ = run("check", "--diff", str(script))
    assert code == 1 and "-    loader = DataLoader(" in out and "shuffle=True)" in out
    assert script.read_text() == source
    code, out, err = run("check", "--fix", str(script))
    assert code == 0 and out == "" and "fixed 1 file" in err
    assert "shuffle=True" not in script.read_text()


# -- quiet on real code: each a shape seen in torch's own distributed tests, where nothing is wrong ----------

_DDP = """\
import copy
import io
import torch
import torch.distributed as dist
import torch.distributed.rpc as rpc
from torch.nn.parallel import DistributedDataParallel as DDP

MASTER_RANK = 0


class Test:
    def run(self, rank):
        dist.init_process_group("gloo")
        model = torch.nn.Linear(2, 2)
        ddp = DDP(model)
{body}

if __name__ == "__main__":
    Test().run(0)
"""


@pytest.mark.parametrize(
    "body",
    [
        pytest.param("if self.rank != self.MAIN_PROCESS_RANK:\n    dist.barrier()", id="a rank compared with a constant from another file"),
        pytest.param(
            "if self.rank == MASTER_RANK:\n    self.master()\nelif self.rank == 1:\n    self.worker()\nelse:\n    raise RuntimeError(rank)",
            id="every branch of a role dispatch reaches the same barrier",
        ),
        pytest.param("if rank == 0:\n    level = dist.get_debug_level()", id="a query is no collective"),
        pytest.param("if rank == 0:\n    inference = ddp.module\n    loss = inference(torch.ones(2)).sum()\n    loss.backward()", id="backward through the module inside"),
        pytest.param("local = copy.deepcopy(model)\nif rank == 0:\n    local(torch.ones(2)).sum().backward()", id="backward through a copy"),
        pytest.param(
            "if rank == 0:\n    out = ddp(torch.ones(2))\n    out.sum().backward()\nelse:\n    a = ddp(torch.ones(2))\n    (a.sum() * 2).backward()",
            id="both branches run the DDP forward and backward, spelled differently",
        ),
        pytest.param("if rank == 0:\n    rpc.rpc_sync('worker1', torch.add, args=(1, 1))", id="an RPC names its worker"),
        pytest.param("if rank == 0:\n    dist.send(torch.ones(1), dst=1)\nelse:\n    dist.recv(torch.ones(1), src=0)", id="point-to-point calls"),
        pytest.param("buffer = io.BytesIO()\ntorch.save(model.state_dict(), buffer)\nbuffer.seek(0)\nstate = torch.load(buffer)", id="a load of the buffer this process wrote"),
        pytest.param("state = torch.load('c.pt', map_location={'cuda:0': f'cuda:{rank}'})", id="cuda:0 as the key of a map_location"),
        pytest.param("again = DDP(model.cuda(rank), device_ids=[rank])", id="a move inside a later wrap's arguments"),
        pytest.param("print(f'rank {rank} ready')", id="a print that names its process"),
        pytest.param(
            "if rank >= 0:\n    other = DDP(model)\nelse:\n    other = model\n    other.to('cuda:1')",
            id="a move in the branch that does not wrap",
        ),
        pytest.param("if rank == 0:\n    dist.barrier()\nif rank != 0:\n    dist.barrier()", id="the main-process-first barrier pair"),
    ],
)
def test_quiet_where_nothing_is_wrong(body: str) -> None:
    import textwrap

    source = _DDP.format(body=textwrap.indent(body, " " * 8))
    compile(source, "case.py", "exec")
    assert [f"{d.line}:{d.code}" for d in check_source(source).diagnostics] == []


def test_a_fake_backend_runs_every_rank_in_one_process() -> None:
    source = "import torch.distributed as dist\n\nif __name__ == '__main__':\n    dist.init_process_group('fake', rank=0, world_size=8)\n    print('one process')\n"
    assert check_source(source).diagnostics == ()


def test_a_rule_that_fails_names_the_file_instead_of_a_traceback(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dp2ddp.check

    def broken(analysis: object) -> None:
        raise AttributeError("a bug")

    monkeypatch.setattr(dp2ddp.check, "DistributedHazards", broken)
    code, _, err = run("check", "-j", "1", "train.py", cwd=project)
    assert code == 2
    assert "train.py: internal error in check (AttributeError: a bug)" in err and "Traceback" not in err


_GPU_ARGUMENT = """
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def train(gpu, args):
    dist.init_process_group("nccl", rank=gpu, world_size=2)
    torch.cuda.set_device(gpu)
    model = DDP(Net().cuda(gpu), device_ids=[gpu])
    for step, (x, y) in enumerate(loader):
        loss = model(x).sum()
        loss.backward()
        if {test}:
            dist.all_reduce(loss)


if __name__ == "__main__":
    mp.spawn(train, nprocs=2, args=(None,))
"""


@pytest.mark.parametrize(
    ("test", "reported"),
    [
        pytest.param("step % 10 == 0 and gpu == 0", True, id="the GPU the process picks is 0"),
        pytest.param("not gpu != 0", True, id="negated"),
        pytest.param("gpu is not None", False, id="whether a GPU was given: the same everywhere"),
        pytest.param("step % 10 == 0", False, id="a step counter"),
    ],
)
def test_a_collective_under_a_test_of_the_gpu_index_is_reported(test: str, reported: bool) -> None:
    """With one process per GPU, `gpu` is the local rank: `gpu == 0` holds on one process, which then waits alone."""
    source = _GPU_ARGUMENT.format(test=test)
    found = [f"{d.line}:{d.code}" for d in check_source(source).diagnostics if d.code == "DDP502"]
    assert found == (["16:DDP502"] if reported else [])


def test_a_name_like_gpu_that_picks_no_gpu_is_no_rank_condition() -> None:
    """Should report nothing: this `gpu` counts GPUs; only the parameter `set_device` is given is the index."""
    source = _GPU_ARGUMENT.format(test="gpus == 0").replace("def train(gpu, args):", "def train(gpu, args):\n    gpus = torch.cuda.device_count()")
    assert [d.code for d in check_source(source).diagnostics if d.code == "DDP502"] == []


def test_a_missing_set_epoch_is_found_through_a_factory_and_spelled_as_the_epoch_loop_names_the_loader() -> None:
    """Should follow the loader as convert does: out of create_data_loader(), into main(), into train()."""
    source = """import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler


def create_data_loader(trainset):
    trainloader = DataLoader(trainset, batch_size=8, sampler=DistributedSampler(trainset))
    return trainloader, None


def train(model, batches):
    for x, y in batches:
        model(x).sum().backward()


def main(trainset):
    dist.init_process_group("gloo")
    model = DDP(torch.nn.Linear(4, 2))
    train_data, _ = create_data_loader(trainset)
    for epoch in range(2):
        train(model, train_data)


if __name__ == "__main__":
    main(None)
"""
    found = [(d.line, d.code, d.message.split("`")[1]) for d in check_source(source).diagnostics]
    assert found == [(13, "DDP506", "train_data")]
    fixed = source.replace("    for epoch in range(2):\n", "    for epoch in range(2):\n        train_data.sampler.set_epoch(epoch)\n")
    assert [d.code for d in check_source(fixed).diagnostics] == []
