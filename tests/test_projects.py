"""Folders converted as one project: golden trees, stability, the helpers module, and real training.

Each ``fixtures/projects/<case>/`` holds ``before/`` (a small project of
several modules), ``after/`` (the whole tree convert makes of it, absent
when the project must stay as it was) and ``report.txt`` (every finding,
``path:line:col: CODE message``). ``runs.txt`` lists the entry points the
end-to-end test launches, in order, with ``{out}`` for the output folder.
"""

from __future__ import annotations

import filecmp
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dp2ddp.api import ConversionError, ConvertResult
from dp2ddp.conversion import INFERENCE_ONLY
from dp2ddp.projects import DEFAULT_HELPERS_MODULE, ProjectError, ProjectResult, convert_project
from tests.conftest import FIXTURES

PROJECTS = FIXTURES / "projects"
CASES = sorted(path.name for path in PROJECTS.iterdir() if (path / "before").is_dir())


def _sources(root: Path) -> dict[Path, str]:
    return {path: path.read_text(encoding="utf-8") for path in sorted(root.rglob("*.py")) if "__pycache__" not in path.parts}


def _converted_tree(root: Path) -> tuple[ProjectResult, dict[str, str], list[str]]:
    """The project's result, its whole converted tree (relative path -> text) and its findings."""
    sources = _sources(root)
    result = convert_project(root, sources)
    tree = {path.relative_to(root).as_posix(): text for path, text in sources.items()}
    findings: list[str] = []
    for path, converted in result.files.items():
        relative = path.relative_to(root).as_posix()
        assert isinstance(converted, ConvertResult), f"{relative}: {converted}"
        tree[relative] = converted.output
        findings += [f"{relative}:{finding}" for finding in converted.findings]
    if result.helpers is not None:
        tree[result.helpers.path.relative_to(root).as_posix()] = result.helpers.after
    return result, tree, findings


def _read_tree(root: Path) -> dict[str, str]:
    return {path.relative_to(root).as_posix(): text for path, text in _sources(root).items()}


def _write_tree(root: Path, tree: dict[str, str]) -> None:
    shutil.rmtree(root, ignore_errors=True)
    for relative, text in tree.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text, encoding="utf-8")


@pytest.mark.parametrize("case", CASES)
def test_project_converts_to_its_golden_tree(case: str, update_goldens: bool) -> None:
    folder = PROJECTS / case
    before = _read_tree(folder / "before")
    result, tree, findings = _converted_tree(folder / "before")
    report = "".join(f"{line}\n" for line in findings)
    changed = tree != before
    if update_goldens:
        (folder / "report.txt").write_text(report, encoding="utf-8")
        if changed:
            _write_tree(folder / "after", tree)
        else:
            shutil.rmtree(folder / "after", ignore_errors=True)
    assert report == (folder / "report.txt").read_text(encoding="utf-8")
    if not (folder / "after").is_dir():
        assert not changed, "the project must stay as it was"
        return
    assert tree == _read_tree(folder / "after")
    for relative, text in tree.items():
        compile(text, relative, "exec")


@pytest.mark.parametrize("case", [case for case in CASES if (PROJECTS / case / "after").is_dir()])
def test_converting_a_converted_project_again_changes_nothing(case: str, tmp_path: Path) -> None:
    root = tmp_path / case
    shutil.copytree(PROJECTS / case / "after", root)
    result, tree, findings = _converted_tree(root)
    assert tree == _read_tree(root)
    assert not any(f.severity == "error" for r in result.files.values() if isinstance(r, ConvertResult) for f in r.findings)
    # The helpers module is found and reused as it is.
    assert result.helpers is not None and result.helpers.after == result.helpers.before


def test_helpers_go_once_into_one_module_every_converted_file_imports() -> None:
    tree = _read_tree(PROJECTS / "two_entries_shared_model" / "after")
    helpers = tree[f"{DEFAULT_HELPERS_MODULE}.py"]
    for name in ("setup_distributed", "wrap_ddp", "is_main_process"):
        assert helpers.count(f"def {name}(") == 1
    for relative in ("pretrain.py", "finetune.py", "common/model.py"):
        assert "def setup_distributed" not in tree[relative] and "def wrap_ddp" not in tree[relative]
        assert f"from {DEFAULT_HELPERS_MODULE} import" in tree[relative]


def test_a_program_with_a_refused_module_is_left_whole(tmp_path: Path) -> None:
    """finetune.py changes the model after common/model.py wraps it: DDP228 there, and no file of the program changes."""
    result, tree, findings = _converted_tree(PROJECTS / "change_after_factory" / "before")
    assert tree == _read_tree(PROJECTS / "change_after_factory" / "before")
    errors = [line for line in findings if " DDP228 " in line]
    assert len(errors) == 1 and errors[0].startswith("finetune.py:") and "common/model.py:" in errors[0]
    assert result.helpers is None
    held = [r for r in result.files.values() if isinstance(r, ConvertResult) and r.reason and "finetune.py" in r.reason]
    assert {r.source.splitlines()[0] for r in held}  # pretrain.py and common/model.py say why they stay


def test_an_edited_helpers_module_is_never_overwritten(tmp_path: Path) -> None:
    root = tmp_path / "project"
    shutil.copytree(PROJECTS / "model_factory_package" / "after", root)
    helpers = root / f"{DEFAULT_HELPERS_MODULE}.py"
    edited = helpers.read_text(encoding="utf-8").replace('"""Join the process group', '"""Join the group (edited)')
    helpers.write_text(edited, encoding="utf-8")
    result = convert_project(root, _sources(root))
    assert result.helpers is not None and result.helpers.after == edited

    # A module it lacks, which a newly converted file needs, is an error, and nothing is written.
    lacking = edited.replace("def all_reduce_mean(", "def renamed_all_reduce_mean(")
    helpers.write_text(lacking, encoding="utf-8")
    (root / "train.py").write_text((PROJECTS / "model_factory_package" / "before" / "train.py").read_text(), encoding="utf-8")
    with pytest.raises(ProjectError, match="edited by hand and has no all_reduce_mean"):
        convert_project(root, _sources(root))


def test_a_module_of_the_users_with_the_helpers_name_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "project"
    shutil.copytree(PROJECTS / "model_factory_package" / "before", root)
    (root / f"{DEFAULT_HELPERS_MODULE}.py").write_text("def mine():\n    pass\n", encoding="utf-8")
    with pytest.raises(ProjectError, match="not written by dp2ddp"):
        convert_project(root, _sources(root))
    result = convert_project(root, _sources(root), helpers_name="distributed_helpers")
    assert result.helpers is not None and result.helpers.path.name == "distributed_helpers.py"


def test_helpers_inline_keeps_every_file_self_contained() -> None:
    root = PROJECTS / "trainer_with_driver" / "before"
    result = convert_project(root, _sources(root), helpers="inline")
    assert result.helpers is None
    outputs = {path.name: r.output for path, r in result.files.items() if isinstance(r, ConvertResult)}
    assert "def setup_distributed(" in outputs["run.py"] and "def wrap_ddp(" in outputs["trainer.py"]
    assert "ddp_helpers" not in "".join(outputs.values())


def test_a_helper_other_unconverted_code_calls_is_guarded_at_the_converted_call(tmp_path: Path) -> None:
    root = tmp_path / "project"
    shutil.copytree(PROJECTS / "utils_save_and_log" / "before", root)
    # A plain tool that is not converted also saves checkpoints through utils.
    (root / "export.py").write_text(
        "import utils\n\n\nif __name__ == \"__main__\":\n    utils.save_checkpoint({}, False, \"runs\")\n", encoding="utf-8"
    )
    result = convert_project(root, _sources(root))
    outputs = {path.name: r for path, r in result.files.items() if isinstance(r, ConvertResult)}
    assert not outputs["utils.py"].changed and not outputs["export.py"].changed
    main = outputs["main.py"]
    assert "    if is_main_process():\n            utils.save_checkpoint(" in main.output.replace("        if is_main", "    if is_main")
    assert any(f.code == "DDP106" and "utils.py:31" in f.message for f in main.findings)


def test_convert_folder_cli_prints_every_files_diff_in_path_order(tmp_path: Path) -> None:
    root = tmp_path / "project"
    shutil.copytree(PROJECTS / "two_entries_shared_model" / "before", root)
    completed = subprocess.run(
        [sys.executable, "-m", "dp2ddp", "convert", "--diff", "project"], cwd=tmp_path, capture_output=True, text=True
    )
    assert completed.returncode == 0, completed.stderr
    headers = [line.split()[1] for line in completed.stdout.splitlines() if line.startswith("+++ ")]
    assert headers == sorted(headers)
    assert headers == [f"b/project/{name}" for name in ("common/model.py", "ddp_helpers.py", "finetune.py", "pretrain.py")]
    assert "--- /dev/null" in completed.stdout  # the helpers module is a new file to patch and git apply
    assert filecmp.dircmp(root, PROJECTS / "two_entries_shared_model" / "before").diff_files == []  # --diff writes nothing


def test_convert_project_entry_converts_what_it_imports_and_writes_it(tmp_path: Path) -> None:
    root = tmp_path / "project"
    shutil.copytree(PROJECTS / "model_factory_package" / "before", root)
    (root / "notes.py").write_text("print('not imported by train.py')\n", encoding="utf-8")
    completed = subprocess.run(
        [sys.executable, "-m", "dp2ddp", "convert", "--project", "project/train.py"], cwd=tmp_path, capture_output=True, text=True
    )
    assert completed.returncode == 0, completed.stderr
    assert _read_tree(root) == {**_read_tree(PROJECTS / "model_factory_package" / "after"), "notes.py": "print('not imported by train.py')\n"}


def test_convert_refuses_a_bad_helpers_option(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "dp2ddp", "convert", "--helpers", "module:not-a-name", str(tmp_path)], capture_output=True, text=True
    )
    assert completed.returncode == 2 and "module:NAME" in completed.stderr and "Traceback" not in completed.stderr


def test_every_project_error_is_reported_with_its_file() -> None:
    root = PROJECTS / "model_factory_package" / "before"
    sources = _sources(root)
    sources[root / "broken.py"] = "import torch\nmodel = torch.nn.DataParallel(\n"
    result = convert_project(root, sources)
    assert isinstance(result.files[root / "broken.py"], ConversionError)
    assert isinstance(result.files[root / "train.py"], ConvertResult) and result.files[root / "train.py"].changed


# -- the converted projects train ---------------------------------------------------------------


def _runs(case: str) -> list[list[str]]:
    """Each entry point's command line; `whole:` before one that only predicts, which reads its data whole."""
    return [line.split() for line in (PROJECTS / case / "runs.txt").read_text().splitlines() if line.strip()]


@pytest.mark.slow
@pytest.mark.parametrize("case", [case for case in CASES if (PROJECTS / case / "runs.txt").is_file()])
def test_converted_project_trains_on_two_processes(case: str, tmp_path: Path) -> None:
    """Each entry point trains under torchrun: data split and reshuffled, replicas equal, each checkpoint written once."""
    from tests.test_end_to_end import run_under_torchrun

    root = tmp_path / case
    shutil.copytree(PROJECTS / case / "after", root)
    out = tmp_path / "out"
    for number, (script, *args) in enumerate(_runs(case)):
        whole = script == "whole:"
        if whole:
            script, *args = args
        args = [arg.replace("{out}", str(out)) for arg in args]
        # As a user launches it: from inside the converted tree, the entry named as typed there.
        completed, ranks = run_under_torchrun(Path(script), root, *args, probe=f"probe{number}")
        assert completed.returncode == 0, completed.stdout + completed.stderr
        assert [rank["world_size"] for rank in ranks] == [2, 2]
        if whole:
            # It only predicts: every process reads every sample, and one process prints.
            for rank in ranks:
                assert rank["passes"] and all(sorted(p["indices"]) == list(range(p["dataset_size"])) for p in rank["passes"])
            continue
        split = [[p for p in rank["passes"] if p["sampler"] in ("DistributedSampler", "ShardedSampler")] for rank in ranks]
        assert split[0] and len(split[0]) == len(split[1]), f"{script}: the training data was not split"
        for first, second in zip(*split):
            assert set(first["indices"]).isdisjoint(second["indices"])
            assert sorted(first["indices"] + second["indices"]) == list(range(first["dataset_size"]))
        assert split[0][0]["indices"] != split[0][1]["indices"], "set_epoch did not reshuffle"
        assert ranks[0]["replicas"] and ranks[0]["replicas"] == ranks[1]["replicas"], "the ranks ended with different weights"
        assert ranks[0]["saves"] and ranks[1]["saves"] == [], "a checkpoint was written by more than one process"


# -- check reads the same graph -------------------------------------------------------------------


def _check(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dp2ddp", "check", str(folder)], capture_output=True, text=True)


@pytest.mark.parametrize("case", [case for case in CASES if (PROJECTS / case / "after").is_dir()])
def test_check_finds_nothing_in_a_converted_project(case: str) -> None:
    """Should find nothing but what the conversion warned of already, at the same file (convert's DDP213 on a
    device another module passes in is check's DDP539 on the converted tree)."""
    from dp2ddp.rules import REPORTED_IN_OUTPUT

    completed = _check(PROJECTS / case / "after")
    warned: set[tuple[str, str]] = set()
    for line in (PROJECTS / case / "report.txt").read_text(encoding="utf-8").splitlines():
        path, code = line.split(":", 1)[0], line.split(" ")[1]
        warned |= {(path, named) for named in REPORTED_IN_OUTPUT.get(code, ())}
    found = {
        (Path(line.split(":", 1)[0]).relative_to(PROJECTS / case / "after").as_posix(), line.split(" ")[1])
        for line in completed.stdout.splitlines()
        if ": DDP" in line
    }
    assert found <= warned, completed.stdout + completed.stderr
    assert completed.returncode == (1 if found else 0), completed.stdout + completed.stderr


def test_check_reports_a_helper_that_saves_on_every_process_at_its_call(tmp_path: Path) -> None:
    root = tmp_path / "project"
    shutil.copytree(PROJECTS / "utils_save_and_log" / "after", root)
    # The helper as it was before convert guarded it: every process writes the checkpoint.
    shutil.copy(PROJECTS / "utils_save_and_log" / "before" / "utils.py", root / "utils.py")
    completed = _check(root)
    assert completed.returncode == 1
    lines = [line for line in completed.stdout.splitlines() if " DDP501 " in line]
    assert len(lines) == 1 and lines[0].startswith(f"{root}/main.py:") and "utils.py:31" in lines[0], completed.stdout


def test_check_takes_a_helper_file_opened_on_devnull_off_the_main_process_as_guarded(tmp_path: Path) -> None:
    """Convert's own shape for a file other code writes into: only the main process opens the real file."""
    root = tmp_path / "project"
    shutil.copytree(PROJECTS / "utils_save_and_log" / "after", root)
    utils = (root / "utils.py").read_text(encoding="utf-8")
    table = (
        "\n\ndef write_table(path, rows):\n"
        "    out = open(path if is_main_process() else os.devnull, 'wb')\n"
        "    torch.tensor(rows).numpy().tofile(out)\n"
        "    os.fsync(out.fileno())\n"
        "    out.close()\n"
    )
    (root / "utils.py").write_text(utils + table, encoding="utf-8")
    main = (root / "main.py").read_text(encoding="utf-8")
    call = "    run_dir = utils.make_run_dir(args.out, args.name)\n"
    (root / "main.py").write_text(main.replace(call, call + "    utils.write_table(os.path.join(run_dir, 't.bin'), [1.0])\n"), encoding="utf-8")
    completed = _check(root)
    assert completed.returncode == 0 and "0 findings" in completed.stderr, completed.stdout + completed.stderr
    # Every process opening the real file is still every process's write.
    (root / "utils.py").write_text(utils + table.replace("path if is_main_process() else os.devnull", "path"), encoding="utf-8")
    completed = _check(root)
    assert completed.returncode == 1 and " DDP501 `utils.write_table` writes" in completed.stdout, completed.stdout


def test_the_migration_report_covers_the_project_codemod_by_codemod(tmp_path: Path) -> None:
    import json

    root = tmp_path / "project"
    shutil.copytree(PROJECTS / "utils_save_and_log" / "before", root)
    report = tmp_path / "report.json"
    completed = subprocess.run(
        [sys.executable, "-m", "dp2ddp", "convert", "--diff", "--report", str(report), str(root)], capture_output=True, text=True
    )
    assert completed.returncode == 0, completed.stderr
    files = {Path(entry["path"]).name: entry for entry in json.loads(report.read_text())["files"]}
    assert set(files) == {"main.py", "utils.py"}
    assert files["main.py"]["attributed"] is True
    steps = [change["codemod"] for change in files["main.py"]["changes"]]
    assert steps[0] == "replace_data_parallel" and steps[-1] == "helpers module", steps


@pytest.mark.slow
def test_an_evaluation_of_another_modules_whole_loader_prints_the_originals_count(tmp_path: Path) -> None:
    """data.py keeps its validation loader whole (its loop is in train.py): the count is not summed over processes."""
    from tests.test_end_to_end import run_under_torchrun

    root = tmp_path / "project"
    shutil.copytree(PROJECTS / "evaluation_loader_of_data_module" / "after", root)
    completed, _ = run_under_torchrun(root / "train.py", root)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    counts = [line for line in completed.stdout.splitlines() if line.startswith("epoch ")]
    assert len(counts) == 2 and all(line.endswith("/40") for line in counts), completed.stdout


def test_a_batch_option_another_module_declares_with_default_one_is_not_divided_to_zero(tmp_path: Path) -> None:
    """The CycleGAN family declares --batch_size (default 1) in options/; the loader divides it in train.py."""
    root = tmp_path / "project"
    (root / "options").mkdir(parents=True)
    (root / "options" / "__init__.py").write_text("", encoding="utf-8")
    (root / "options" / "base.py").write_text(
        "import argparse\n\n\ndef parse():\n    parser = argparse.ArgumentParser()\n"
        "    parser.add_argument('--batch_size', type=int, default=1)\n    return parser.parse_args()\n",
        encoding="utf-8",
    )
    (root / "train.py").write_text(
        "import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\n\n"
        "from options.base import parse\n\nopt = parse()\ndata = TensorDataset(torch.randn(8, 4), torch.randn(8, 1))\n"
        "loader = DataLoader(data, batch_size=opt.batch_size, shuffle=True)\nmodel = nn.DataParallel(nn.Linear(4, 1))\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\nfor epoch in range(2):\n    for x, y in loader:\n"
        "        optimizer.zero_grad()\n        nn.functional.mse_loss(model(x), y).backward()\n        optimizer.step()\n",
        encoding="utf-8",
    )
    result = convert_project(root, _sources(root))
    train = result.files[root / "train.py"]
    assert isinstance(train, ConvertResult)
    assert "batch_size=max(1, opt.batch_size // dist.get_world_size())" in train.output
    assert any(f.code == "DDP336" for f in train.findings)


def _visualizer_project(root: Path, other_user: bool) -> ProjectResult:
    shutil.copytree(PROJECTS / "model_factory_package" / "before", root)
    (root / "visual.py").write_text(
        "class Visualizer:\n    def __init__(self, name):\n        self.name = name\n\n"
        "    def print_losses(self, epoch, loss):\n        print(f'{self.name} {epoch}: {loss:.4f}')\n",
        encoding="utf-8",
    )
    train = (root / "train.py").read_text(encoding="utf-8")
    train = train.replace("from models import create_model\n", "from models import create_model\nfrom visual import Visualizer\n")
    train = train.replace("    best_acc = 0.0\n", "    best_acc = 0.0\n    visualizer = Visualizer('run')\n")
    train = train.replace("        acc = validate(", "        visualizer.print_losses(epoch, running_loss)\n        acc = validate(")
    (root / "train.py").write_text(train, encoding="utf-8")
    if other_user:
        (root / "plot.py").write_text(
            "from visual import Visualizer\n\nif __name__ == '__main__':\n    Visualizer('plot').print_losses(0, 1.0)\n",
            encoding="utf-8",
        )
    return convert_project(root, _sources(root))


def test_a_class_whose_methods_write_is_guarded_inside_when_only_converted_code_builds_it(tmp_path: Path) -> None:
    result = _visualizer_project(tmp_path / "project", other_user=False)
    visual = result.files[tmp_path / "project" / "visual.py"]
    assert isinstance(visual, ConvertResult) and "        if is_main_process():\n            print(" in visual.output
    train = result.files[tmp_path / "project" / "train.py"]
    assert isinstance(train, ConvertResult) and "visualizer = Visualizer('run')\n" in train.output
    assert not any(f.code == "DDP422" for f in train.findings)


def test_a_class_other_code_also_builds_is_not_guarded_and_its_writes_are_reported(tmp_path: Path) -> None:
    result = _visualizer_project(tmp_path / "project", other_user=True)
    visual = result.files[tmp_path / "project" / "visual.py"]
    assert isinstance(visual, ConvertResult) and not visual.changed
    train = result.files[tmp_path / "project" / "train.py"]
    assert isinstance(train, ConvertResult) and "visualizer = Visualizer('run')\n" in train.output
    assert [f.code for f in train.findings if "print_losses" in f.message] == ["DDP422"]


def test_a_meter_container_of_another_module_is_not_reduced_as_a_meter(tmp_path: Path) -> None:
    """A `MetricMeter` holding a dict of meters has no sum or count: reducing it crashed every rank."""
    root = tmp_path / "project"
    shutil.copytree(PROJECTS / "utils_save_and_log" / "before", root)
    utils = (root / "utils.py").read_text(encoding="utf-8")
    (root / "utils.py").write_text(
        utils + "\n\nclass MetricMeter:\n    def __init__(self):\n        self.meters = {}\n\n"
        "    def update(self, values):\n        for name, value in values.items():\n"
        "            self.meters.setdefault(name, AverageMeter(name)).update(value)\n",
        encoding="utf-8",
    )
    main = (root / "main.py").read_text(encoding="utf-8").replace('utils.AverageMeter("loss")', "utils.MetricMeter()")
    main = main.replace("losses.update(loss.item(), batch.size(0))", 'losses.update({"loss": loss.item()})')
    (root / "main.py").write_text(main, encoding="utf-8")
    result = convert_project(root, _sources(root))
    converted = result.files[root / "main.py"]
    assert isinstance(converted, ConvertResult) and converted.changed
    assert "MetricMeter()" in converted.output and "all_reduce_meter(losses)" not in converted.output
    assert "all_reduce_meter(accuracy)" in converted.output  # the real AverageMeter still is


def test_writes_in_a_base_class_of_another_module_are_guarded_there(tmp_path: Path) -> None:
    """`TrainOptions().parse()` prints and saves the options in BaseOptions, another module."""
    root = tmp_path / "project"
    shutil.copytree(PROJECTS / "model_factory_package" / "before", root)
    (root / "options").mkdir()
    (root / "options" / "__init__.py").write_text("", encoding="utf-8")
    (root / "options" / "base.py").write_text(
        "class BaseOptions:\n    def parse(self):\n        print('options parsed')\n        return self\n", encoding="utf-8"
    )
    (root / "options" / "train.py").write_text(
        "from .base import BaseOptions\n\n\nclass TrainOptions(BaseOptions):\n    pass\n", encoding="utf-8"
    )
    train = (root / "train.py").read_text(encoding="utf-8").replace(
        "from models import create_model\n", "from models import create_model\nfrom options.train import TrainOptions\n"
    )
    train = train.replace("def main():\n", "def main():\n    TrainOptions().parse()\n")
    (root / "train.py").write_text(train, encoding="utf-8")
    result = convert_project(root, _sources(root))
    base = result.files[root / "options" / "base.py"]
    assert isinstance(base, ConvertResult) and "        if is_main_process():\n            print('options parsed')" in base.output
    assert [f.code for f in base.findings] == ["DDP105"] and "train.py:" in base.findings[0].message


def test_a_function_a_class_of_another_module_writes_through_is_guarded_there(tmp_path: Path) -> None:
    """`Logger(args)` of helper.py calls `backup_source_code(directory)` there, which removes and copies a folder:
    on every process, one process's rmtree pulled the tree from under another's copytree at start."""
    root = tmp_path / "project"
    shutil.copytree(PROJECTS / "model_factory_package" / "before", root)
    (root / "helper.py").write_text(
        "import os\nimport shutil\n\n\nclass Logger:\n    def __init__(self, out):\n"
        "        backup_source_code(os.path.join(out, 'code_backup'))\n\n\n"
        "def backup_source_code(directory):\n    if os.path.exists(directory):\n        shutil.rmtree(directory)\n"
        "    shutil.copytree('.', directory)\n",
        encoding="utf-8",
    )
    train = (root / "train.py").read_text(encoding="utf-8").replace(
        "from models import create_model\n", "from models import create_model\nfrom helper import Logger\n"
    )
    train = train.replace("def main():\n", "def main():\n    Logger('runs')\n")
    (root / "train.py").write_text(train, encoding="utf-8")
    result = convert_project(root, _sources(root))
    helper = result.files[root / "helper.py"]
    assert isinstance(helper, ConvertResult) and "    if is_main_process():\n        if os.path.exists(directory):" in helper.output
    assert "backup_source_code" in " ".join(f.message for f in helper.findings if f.code == "DDP105")


_EPOCH_MAIN = (
    "import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\n\n"
    "from train import train_epoch\n\n\ndef main():\n    model = nn.DataParallel(nn.Linear(4, 1))\n"
    "    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)\n"
    "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n    for epoch in range(2):\n"
    "        train_epoch(epoch, model, loader, optimizer)\n\n\nif __name__ == '__main__':\n    main()\n"
)
_EPOCH_TRAIN = (
    "import torch.nn as nn\n\n\ndef train_epoch(epoch, model, loader, optimizer):\n    for x, y in loader:\n"
    "        loss = nn.functional.mse_loss(model(x), y)\n        optimizer.zero_grad()\n        loss.backward()\n"
    "        optimizer.step()\n    print(epoch, loss.item())\n"
)


@pytest.mark.parametrize(
    "other, trains_whole",
    [
        pytest.param("from train import train_epoch\ndef f(:\n    train_epoch(\n", True, id="a caller Python cannot parse runs nothing"),
        pytest.param("from train import train_epoch\n\n\ndef smoke(m, l, o):\n    train_epoch(0, m, l, o)\n", False,
                     id="a caller left unconverted"),
    ],
)  # fmt: skip
def test_a_function_that_trains_is_never_guarded_at_its_call(other: str, trains_whole: bool, tmp_path: Path) -> None:
    """Should never put `train_epoch(...)` under `if is_main_process():`: the other processes would wait in backward forever."""
    sources = {tmp_path / "main.py": _EPOCH_MAIN, tmp_path / "train.py": _EPOCH_TRAIN, tmp_path / "other.py": other}
    result = convert_project(tmp_path, sources)
    main = result.files[tmp_path / "main.py"]
    assert isinstance(main, ConvertResult) and main.changed
    assert "is_main_process():\n            train_epoch(" not in main.output
    assert "        train_epoch(epoch, model, loader, optimizer)\n" in main.output
    trained = result.files[tmp_path / "train.py"]
    assert isinstance(trained, ConvertResult)
    # Converted whole where every caller that can run is converted: its print guarded, its loss reduced.
    assert trained.changed is trains_whole


def test_a_self_test_in_a_module_the_project_imports_is_left_as_it_was(tmp_path: Path) -> None:
    """Should leave a model module's `__main__` shape check alone: it is no program, and it does not make the module wrap."""
    root = tmp_path / "project"
    shutil.copytree(PROJECTS / "entries_reach_by_any_import" / "before", root)
    net = root / "modeling" / "net.py"
    test_block = '\n\nif __name__ == "__main__":\n    print(nn.DataParallel(TinyNet())(torch.randn(2, 6)).shape)\n'
    net.write_text(net.read_text(encoding="utf-8") + test_block, encoding="utf-8")
    result, tree, findings = _converted_tree(root)
    assert tree["modeling/net.py"] == net.read_text(encoding="utf-8")
    left = result.files[net]
    assert isinstance(left, ConvertResult) and "self-test" in (left.reason or "")
    after = _read_tree(PROJECTS / "entries_reach_by_any_import" / "after")
    assert {name: text for name, text in tree.items() if name != "modeling/net.py"} == {
        name: text for name, text in after.items() if name != "modeling/net.py"
    }


def test_an_entry_that_hands_an_optimizer_to_a_library_engine_still_trains(tmp_path: Path) -> None:
    """Should split the loader of an entry whose backward runs in a library engine: it builds an optimizer, so it
    may train, and only a program that never could reads its data whole."""
    model = "import torch.nn as nn\n\n\ndef generate_model():\n    return nn.DataParallel(nn.Linear(4, 2))\n"
    train = (
        "import torch\nimport torch.nn as nn\nfrom ignite.engine import create_supervised_trainer\n"
        "from torch.utils.data import DataLoader, TensorDataset\n\nfrom model import generate_model\n\n"
        "if __name__ == '__main__':\n    model = generate_model()\n"
        "    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,))), batch_size=8, shuffle=True)\n"
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    create_supervised_trainer(model, optimizer, nn.CrossEntropyLoss()).run(loader, max_epochs=2)\n"
    )
    result = convert_project(tmp_path, {tmp_path / "model.py": model, tmp_path / "train.py": train})
    converted = result.files[tmp_path / "train.py"]
    assert isinstance(converted, ConvertResult) and "sampler=" in converted.output
    predict = train.replace("    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n", "").replace(
        "    create_supervised_trainer(model, optimizer, nn.CrossEntropyLoss()).run(loader, max_epochs=2)\n",
        "    for (x, y) in loader:\n        print(model(x).argmax(1))\n",
    )
    result = convert_project(tmp_path, {tmp_path / "model.py": model, tmp_path / "predict.py": predict})
    # Nothing in that project trains: it is left as it was, and says why.
    for path in (tmp_path / "model.py", tmp_path / "predict.py"):
        left = result.files[path]
        assert isinstance(left, ConvertResult) and not left.changed and left.reason == INFERENCE_ONLY


def test_a_module_only_an_inference_program_runs_keeps_its_loader_whole(tmp_path: Path) -> None:
    """Should split the loader of the program that trains, and keep whole the loader a helper module builds for a
    program that only predicts (its outputs are collected by position and never gathered)."""
    model = "import torch.nn as nn\n\n\ndef generate_model():\n    return nn.DataParallel(nn.Linear(4, 2))\n"
    train = (
        "import torch\nimport torch.nn.functional as F\nfrom torch.utils.data import DataLoader, TensorDataset\n\n"
        "from model import generate_model\n\nif __name__ == '__main__':\n    model = generate_model()\n"
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,))), batch_size=8, shuffle=True)\n"
        "    for x, y in loader:\n        optimizer.zero_grad()\n        F.cross_entropy(model(x), y).backward()\n"
        "        optimizer.step()\n"
    )
    classify = (
        "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\ndef classify(model, inputs):\n"
        "    loader = DataLoader(TensorDataset(inputs), batch_size=8)\n    outputs = []\n"
        "    for (x,) in loader:\n        outputs.append(model(x))\n    return torch.cat(outputs)\n"
    )
    predict = (
        "import torch\n\nfrom classify import classify\nfrom model import generate_model\n\n"
        "if __name__ == '__main__':\n    model = generate_model()\n    print(classify(model, torch.randn(20, 4)).argmax(1))\n"
    )
    sources = {tmp_path / "model.py": model, tmp_path / "train.py": train, tmp_path / "classify.py": classify, tmp_path / "predict.py": predict}
    result = convert_project(tmp_path, sources)
    trained, classified = result.files[tmp_path / "train.py"], result.files[tmp_path / "classify.py"]
    assert isinstance(trained, ConvertResult) and "sampler=DistributedSampler(" in trained.output
    assert isinstance(classified, ConvertResult) and "DistributedSampler" not in classified.output


def test_a_writer_whose_value_is_used_is_never_guarded_at_its_call_and_says_so(tmp_path: Path) -> None:
    """Should leave `net = build()` unguarded, with DDP108, where unconverted code also calls `build`: guarded,
    the other processes would get no model; and never claim (DDP106) that it was guarded."""
    build = "import torch.nn as nn\n\n\ndef build():\n    print('building')\n    return nn.Linear(4, 1)\n"
    train = _EPOCH_MAIN.replace("from train import train_epoch\n", "from build import build\n").replace(
        "nn.DataParallel(nn.Linear(4, 1))", "nn.DataParallel(build())"
    ).replace("        train_epoch(epoch, model, loader, optimizer)\n", "        print(epoch)\n")
    other = "from build import build\n\n\ndef export():\n    return build()\n"
    sources = {tmp_path / "build.py": build, tmp_path / "main.py": train, tmp_path / "other.py": other}
    main = convert_project(tmp_path, sources).files[tmp_path / "main.py"]
    assert isinstance(main, ConvertResult) and main.changed
    assert [f.code for f in main.findings if f.code in ("DDP106", "DDP108")] == ["DDP108"]
    assert "model = wrap_ddp(build())" in main.output


def test_a_wrap_in_a_project_data_parallel_subclass_lists_every_finding_in_one_run(tmp_path: Path) -> None:
    """A file refused for DDP229 also lists what convert would report once the wrap is a plain nn.DataParallel
    (its advice), so following that advice surfaces nothing new."""
    parallel = (
        "import torch.nn as nn\n\n\nclass EvenDataParallel(nn.DataParallel):\n"
        "    def scatter(self, inputs, kwargs, device_ids):\n        return super().scatter(inputs, kwargs, device_ids)\n"
    )
    train = (
        "import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\n\n"
        "from parallel import EvenDataParallel\n\n\ndef main():\n"
        "    model = EvenDataParallel(nn.Linear(4, 1), 2)\n"
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)\n"
        "    for x, y in loader:\n        if x.abs().max() > 3:\n            continue\n"
        "        optimizer.zero_grad()\n        nn.functional.mse_loss(model(x), y).backward()\n        optimizer.step()\n\n\n"
        "if __name__ == '__main__':\n    main()\n"
    )
    result = convert_project(tmp_path, {tmp_path / "parallel.py": parallel, tmp_path / "train.py": train})
    trained = result.files[tmp_path / "train.py"]
    assert isinstance(trained, ConvertResult) and not trained.changed
    assert [(f.line, f.code) for f in trained.findings if f.severity == "error"] == [(9, "DDP229"), (14, "DDP220")]
    # Its advice followed, the same DDP220 is all that is left.
    plain = train.replace("EvenDataParallel(nn.Linear(4, 1), 2)", "nn.DataParallel(nn.Linear(4, 1))")
    result = convert_project(tmp_path, {tmp_path / "parallel.py": parallel, tmp_path / "train.py": plain})
    followed = result.files[tmp_path / "train.py"]
    assert isinstance(followed, ConvertResult) and [(f.line, f.code) for f in followed.findings if f.severity == "error"] == [(14, "DDP220")]


def test_a_wrap_inside_a_model_class_does_not_make_an_inference_script_that_imports_it_a_program_to_convert(tmp_path: Path) -> None:
    """`ASTModel.__init__` wraps a pretrained copy of itself in DataParallel only to load its checkpoint: a part of
    the model, left as it is (DDP201). The demo that imports the model class runs inference and stays as it was;
    the training script that wraps the model converts."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "models.py").write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Net(nn.Module):\n    def __init__(self, pretrained=False):\n"
        "        super().__init__()\n        if pretrained:\n            base = nn.DataParallel(Net())\n"
        "            base.load_state_dict(torch.load('base.pt'))\n            self.body = base.module.body\n"
        "        else:\n            self.body = nn.Linear(4, 1)\n\n    def forward(self, x):\n        return self.body(x)\n",
        encoding="utf-8",
    )
    (root / "demo.py").write_text(
        "import torch\nfrom models import Net\n\nmodel = Net()\nprint(model(torch.randn(2, 4)))\n", encoding="utf-8"
    )
    (root / "train.py").write_text(
        "import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\nfrom models import Net\n\n\n"
        "def main():\n    model = nn.DataParallel(Net())\n"
        "    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4, shuffle=True)\n"
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n    for x, y in loader:\n"
        "        loss = nn.functional.mse_loss(model(x), y)\n        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n\n\n"
        "if __name__ == '__main__':\n    main()\n",
        encoding="utf-8",
    )
    result = convert_project(root, _sources(root))
    demo = result.files[root / "demo.py"]
    assert not (isinstance(demo, ConvertResult) and demo.changed)
    train = result.files[root / "train.py"]
    assert isinstance(train, ConvertResult) and "wrap_ddp(Net())" in train.output


_MODELS = (
    "import torch.nn as nn\n\n\ndef define_net():\n    net = nn.DataParallel(nn.Linear(8, 1))\n    return net\n\n\n"
    "def create_model():\n    net = define_net()\n    return net\n"
)
_SOLVER = (
    "import torch\nimport torch.nn as nn\nfrom models import create_model\n\n\n"
    "class Solver:\n    def __init__(self):\n        self.model = create_model()\n"
    "        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)\n        self.x = torch.Tensor()\n\n"
    "    def feed_data(self, batch):\n        x, y = batch\n        self.x.resize_(x.size()).copy_(x)\n        self.y = y\n\n"
    "    def train_step(self):\n        self.optimizer.zero_grad()\n        total = 0.0\n        for i in range(2):\n"
    "            xs = self.x.narrow(0, i * 4, 4)\n            ys = self.y.narrow(0, i * 4, 4)\n"
    "            loss = nn.functional.mse_loss(self.model(xs), ys) / 2\n            loss.backward()\n"
    "            total += loss.item()\n        {step}\n        return total\n"
)


@pytest.mark.parametrize("step, refused", [("self.optimizer.step()", False), ("if total < 3 * self.last:\n            self.optimizer.step()\n            self.last = total", True)])
def test_a_solver_fed_its_batches_by_another_module_trains_on_the_split_loader(tmp_path: Path, step: str, refused: bool) -> None:
    """`solver.feed_data(batch)` then `solver.train_step()`, the model from a factory that calls the wrapping one:
    the sub-batches the solver cuts from what it is fed are the split loader's (no DDP317), and a step skipped on
    its own loss sum is refused (DDP249)."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "solver.py").write_text(_SOLVER.replace("{step}", step), encoding="utf-8")
    (root / "models.py").write_text(_MODELS, encoding="utf-8")
    (root / "train.py").write_text(
        "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\nfrom solver import Solver\n\n\n"
        "def main():\n    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8, shuffle=True)\n"
        "    solver = Solver()\n    for epoch in range(2):\n        for batch in loader:\n            solver.feed_data(batch)\n"
        "            loss = solver.train_step()\n\n\nif __name__ == '__main__':\n    main()\n",
        encoding="utf-8",
    )
    result = convert_project(root, _sources(root))
    solver = result.files[root / "solver.py"]
    codes = {f.code for f in solver.findings} if isinstance(solver, ConvertResult) else set()
    assert "DDP317" not in codes
    assert ("DDP249" in codes) is refused
    train = result.files[root / "train.py"]
    if not refused:
        models = result.files[root / "models.py"]
        assert isinstance(train, ConvertResult) and "DistributedSampler" in train.output
        assert isinstance(models, ConvertResult) and "wrap_ddp(" in models.output


def test_an_optimizer_over_a_search_model_s_unregistered_tensors_of_another_module_is_refused(tmp_path: Path) -> None:
    """`optimizer_a = Adam(model.module.arch_parameters())`, where the model class of another module keeps its
    architecture weights as tensors with requires_grad, not parameters: DDP would not average them (DDP250)."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "search.py").write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Search(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.op = nn.Linear(8, 1)\n        self.alphas = torch.zeros(2, requires_grad=True)\n\n"
        "    def arch_parameters(self):\n        return [self.alphas]\n\n    def forward(self, x):\n        return self.op(x) * self.alphas.softmax(0)[0]\n",
        encoding="utf-8",
    )
    (root / "train.py").write_text(
        "import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\nfrom search import Search\n\n\n"
        "def main():\n    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8, shuffle=True)\n"
        "    model = nn.DataParallel(Search())\n    optimizer_a = torch.optim.Adam(model.module.arch_parameters(), lr=0.01)\n"
        "    for x, y in loader:\n        loss = nn.functional.mse_loss(model(x), y)\n        optimizer_a.zero_grad()\n"
        "        loss.backward()\n        optimizer_a.step()\n\n\nif __name__ == '__main__':\n    main()\n",
        encoding="utf-8",
    )
    result = convert_project(root, _sources(root))
    train = result.files[root / "train.py"]
    assert isinstance(train, ConvertResult) and not train.changed
    assert [(f.code, f.line) for f in train.findings if f.code == "DDP250"] == [("DDP250", 10)]
    assert "search.py:9" in next(f.message for f in train.findings if f.code == "DDP250")


def _with_racing_run_folder(root: Path, body: str) -> None:
    """model_factory_package, whose train.py tests its output folder with ``body`` before every process makes it."""
    shutil.copytree(PROJECTS / "model_factory_package" / "before", root)
    train = root / "train.py"
    text = train.read_text(encoding="utf-8")
    made = "    os.makedirs(opt.out, exist_ok=True)\n"
    assert made in text
    train.write_text(text.replace(made, f"    if os.path.exists(opt.out):\n{body}{made}"), encoding="utf-8")


def test_a_racing_existence_test_converts_stably_with_the_helpers_module(tmp_path: Path) -> None:
    """The main process's answer (DDP429) is taken once, from the helpers module, and converting the converted
    tree changes nothing."""
    root = tmp_path / "project"
    _with_racing_run_folder(root, '        raise SystemExit(f"{opt.out} exists: choose a new folder")\n')
    result, tree, findings = _converted_tree(root)
    assert any(" DDP429 " in line for line in findings)
    assert tree["train.py"].count("main_process_value(os.path.exists(opt.out))") == 1
    _write_tree(root, tree)
    again, tree_again, _ = _converted_tree(root)
    assert tree_again == tree and not any(isinstance(r, ConvertResult) and r.changed for r in again.files.values())


def test_a_folder_made_only_where_missing_takes_no_broadcast(tmp_path: Path) -> None:
    """`if os.path.exists(d)` whose branches only make folders: every process may run them, so nothing is shared."""
    root = tmp_path / "project"
    _with_racing_run_folder(root, "        os.makedirs(os.path.join(opt.out, 'old'), exist_ok=True)\n")
    _, tree, findings = _converted_tree(root)
    assert "main_process_value" not in tree["train.py"] and not any(" DDP429 " in line or " DDP430 " in line for line in findings)


def test_a_module_that_fails_late_holds_back_its_whole_program(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A module whose converted text fails its last check is left as it was, and so is every module of its
    program: none is written half-converted, and no helpers module is written for them."""
    import dp2ddp.projects as projects

    real = projects._recheck

    def failing(converted, output, options, role):  # type: ignore[no-untyped-def]
        if "def parse_args" in output:
            raise ConversionError("internal error: the project's conversion is not stable; please report this project")
        return real(converted, output, options, role)

    monkeypatch.setattr(projects, "_recheck", failing)
    root = PROJECTS / "model_factory_package" / "before"
    result = convert_project(root, _sources(root))
    assert isinstance(result.files[root / "train.py"], ConversionError)
    factory = result.files[root / "models" / "__init__.py"]
    assert isinstance(factory, ConvertResult) and not factory.changed
    assert factory.reason is not None and "train.py, which is part of the same program, failed" in factory.reason
    assert result.helpers is None


_FIT_MAIN = (
    "import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\n\n"
    "from trainer import fit\n\n\ndef main():\n"
    "    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)\n"
    "    net = nn.Linear(loader.dataset.tensors[0].shape[1], 1)\n"
    "    for param in net.parameters():\n        param.requires_grad = True\n"
    "    model = nn.DataParallel(net)\n    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "    fit(model, loader, optimizer, epochs=2)\n\n\nif __name__ == '__main__':\n    main()\n"
)
_FIT = (
    "import torch.nn as nn\n\n\ndef fit(model, loader, optimizer, epochs):\n    for epoch in range(epochs):\n"
    "        for x, y in loader:\n            loss = nn.functional.mse_loss(model(x), y)\n            optimizer.zero_grad()\n"
    "            loss.backward()\n            optimizer.step()\n"
)


def test_a_model_sized_from_the_loader_is_no_pass_over_it(tmp_path: Path) -> None:
    """`nn.Linear(loader.dataset..., 1)` reads a fact of the loader, and a loop over the model's parameters is no
    pass over the data: with the epochs counted in another module, the loader's sampler reshuffles every pass
    by itself (DDP322). Before, that loop was taken for the one pass, and the DistributedSampler repeated
    one order every epoch."""
    sources = {tmp_path / "main.py": _FIT_MAIN, tmp_path / "trainer.py": _FIT}
    result = convert_project(tmp_path, sources)
    main = result.files[tmp_path / "main.py"]
    assert isinstance(main, ConvertResult) and main.changed
    assert "sampler=ShardedSampler(RandomSampler(" in main.output and "DistributedSampler(" not in main.output
    assert any(f.code == "DDP322" for f in main.findings)


_CFG_TRAINER = (
    "import torch.nn as nn\nfrom tqdm import tqdm\n\n\nclass Trainer:\n"
    "    def __init__(self, cfg, model, data_iter, optimizer):\n"
    "        self.cfg, self.model, self.data_iter, self.optimizer = cfg, model, data_iter, optimizer\n"
    "        self.data_iter = data_iter\n        self.cfg = cfg\n\n"
    "    def train(self):\n        for e in range(self.cfg['epochs']):\n            bar = tqdm(self.data_iter)\n"
    "            for x, y in bar:\n                loss = nn.functional.mse_loss(self.model(x), y)\n"
    "                self.optimizer.zero_grad()\n                loss.backward()\n                self.optimizer.step()\n"
)
_CFG_MAIN = (
    "import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\n\n"
    "import trainer\n\n\ndef main():\n    cfg = {'epochs': 2}\n    model = nn.DataParallel(nn.Linear(4, 1))\n"
    "    data = {data}\n    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "    trainer.Trainer(cfg, model, data, optimizer).train()\n\n\nif __name__ == '__main__':\n    main()\n"
)


@pytest.mark.parametrize(
    "data, refused",
    [
        ("DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)", False),
        ("list(zip(torch.randn(32, 4).split(8), torch.randn(32, 1).split(8)))", True),
    ],
    ids=["a DataLoader is split", "a list of batches is refused where it is made"],
)
def test_data_handed_to_another_module_s_trainer_must_be_split(tmp_path: Path, data: str, refused: bool) -> None:
    """The trainer's loop (through `tqdm(self.data_iter)`) trains on what its constructor is handed: a DataLoader
    of the caller is split there; anything else is refused at the caller (DDP345). The config, read only for
    `range(self.cfg['epochs'])`, is no data."""
    sources = {tmp_path / "main.py": _CFG_MAIN.replace("{data}", data), tmp_path / "trainer.py": _CFG_TRAINER}
    result = convert_project(tmp_path, sources)
    main = result.files[tmp_path / "main.py"]
    assert isinstance(main, ConvertResult)
    errors = [f for f in main.findings if f.severity == "error"]
    if refused:
        assert not main.changed and [(f.code, f.line) for f in errors] == [("DDP345", 11)]
        assert "`data` is handed to `trainer.Trainer`, whose training loop (trainer.py:14)" in errors[0].message
    else:
        assert main.changed and errors == [] and "sampler=ShardedSampler(RandomSampler(" in main.output


def test_a_data_loader_re_exported_by_a_project_module_is_torch_s(tmp_path: Path) -> None:
    """`from dataset import DataLoader`, where dataset.py imports it from torch: the loader is split as torch's.
    Before, it was no DataLoader to the analysis, and its training loop was refused as unsplit (DDP317)."""
    dataset = "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\ndef make():\n" \
        "    return TensorDataset(torch.randn(32, 4), torch.randn(32, 1))\n"
    train = _EPOCH_MAIN.replace(
        "from torch.utils.data import DataLoader, TensorDataset\n", "from dataset import DataLoader, make\n"
    ).replace("DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)),", "DataLoader(make(),")
    sources = {tmp_path / "main.py": train, tmp_path / "train.py": _EPOCH_TRAIN, tmp_path / "dataset.py": dataset}
    result = convert_project(tmp_path, sources)
    main = result.files[tmp_path / "main.py"]
    assert isinstance(main, ConvertResult) and main.changed, main
    assert [f for f in main.findings if f.severity == "error"] == []
    assert "sampler=ShardedSampler(RandomSampler(dataset))" in main.output


def test_an_optimizer_over_a_head_of_another_module_that_is_never_wrapped_is_refused(tmp_path: Path) -> None:
    """`heads.MarginHead(...)`, a model class of another module, stepped beside the wrapped backbone: DDP would
    never average its gradients, so the file is refused (DDP223). Before, only torch's and the file's own classes
    counted as modules, and the head drifted apart on each process with exit 0."""
    heads = "import torch.nn as nn\n\n\nclass MarginHead(nn.Module):\n    def __init__(self, d, n):\n" \
        "        super().__init__()\n        self.fc = nn.Linear(d, n)\n\n    def forward(self, x):\n        return self.fc(x)\n"
    train = _EPOCH_MAIN.replace("from train import train_epoch\n", "import heads\nfrom train import train_epoch\n").replace(
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n",
        "    head = heads.MarginHead(1, 1)\n"
        "    optimizer = torch.optim.SGD([{'params': model.parameters()}, {'params': head.parameters()}], lr=0.1)\n",
    )
    sources = {tmp_path / "main.py": train, tmp_path / "train.py": _EPOCH_TRAIN, tmp_path / "heads.py": heads}
    result = convert_project(tmp_path, sources)
    main = result.files[tmp_path / "main.py"]
    assert isinstance(main, ConvertResult) and not main.changed
    assert [f.code for f in main.findings if f.severity == "error"] == ["DDP223"]
