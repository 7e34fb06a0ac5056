"""``dp2ddp convert --report``: the migration report a pull request carries."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from dp2ddp import migration
from dp2ddp.api import ConvertOptions, ConvertResult
from dp2ddp.cli import main
from dp2ddp.codemods import codemods
from dp2ddp.rules import RULES, section
from tests.conftest import DP_SCRIPT, FIXTURES


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stderr


def report_of(tmp_path: Path, fixture: str, suffix: str, *options: str) -> tuple[Path, str, int]:
    """Copy a fixture's before.py, run ``convert --diff --report`` on it; its path, report and exit code."""
    script = tmp_path / f"{fixture}.py"
    shutil.copy(FIXTURES / fixture / "before.py", script)
    report = tmp_path / f"report{suffix}"
    code, err = run("convert", "--diff", "--report", str(report), *options, str(script))
    assert report.exists(), err
    return script, report.read_text(encoding="utf-8"), code


def fixture_findings(fixture: str) -> list[tuple[int, int, str]]:
    """(line, column, code) of each finding the fixture's golden report lists."""
    text = (FIXTURES / fixture / "report.txt").read_text(encoding="utf-8")
    found = re.findall(r"^(\d+):(\d+): (DDP\d+)", text, re.MULTILINE)
    return [(int(line), int(column), code) for line, column, code in found]


def file_section(markdown: str, path: Path) -> str:
    start = markdown.index(f"## `{path}`")
    following = markdown.find("\n## ", start + 1)
    return markdown[start : following if following != -1 else len(markdown)]


def subsection(text: str, heading: str) -> str:
    start = text.index(f"\n### {heading}")
    following = text.find("\n### ", start + 1)
    return text[start : following if following != -1 else len(text)]


def markdown_items(section_text: str) -> list[dict[str, Any]]:
    """The "Needs a human" items as a reader sees them: heading, message, why, suggested code."""
    items = []
    for block in re.split(r"\n(?=#### )", section_text)[1:]:
        heading = re.match(r"#### Line (\d+), column (\d+): (DDP\d+) (\S+) \((\w+)\)\n\n(.*?)\n", block)
        assert heading, block
        why = re.search(r"^\*\*Why:\*\* (.*)$", block, re.MULTILINE)
        suggestion = re.search(r"^```python\n(.*?)\n```$", block, re.MULTILINE | re.DOTALL)
        line, column, code, name, severity, message = heading.groups()
        items.append({
            "code": code, "name": name, "severity": severity, "line": int(line), "column": int(column),
            "message": message, "why": why and why.group(1), "suggestion": suggestion and suggestion.group(1),
        })  # fmt: skip
    return items


@pytest.fixture(scope="module")
def mnist(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, Any]]:
    """mnist_argparse's report, as Markdown and as JSON."""
    folder = tmp_path_factory.mktemp("mnist")
    script, markdown, code = report_of(folder, "mnist_argparse", ".md")
    assert code == 0
    _, document, _ = report_of(folder, "mnist_argparse", ".json")
    return script, markdown, json.loads(document)


def test_markdown_names_each_codemod_that_changed_something_in_run_order(
    mnist: tuple[Path, str, dict[str, Any]],
) -> None:
    _, markdown, document = mnist
    reported = [group["codemod"] for group in document["files"][0]["changes"]]
    assert {"replace_data_parallel", "add_distributed_sampler", "add_launch_wrapper"} <= set(reported)
    assert reported == [name for name in codemods() if name in reported]
    headings = re.findall(r"^#### (\w+)$", markdown, re.MULTILINE)
    assert headings == reported
    for name in reported:
        assert codemods()[name].DESCRIPTION in markdown


def test_line_references_point_at_the_changed_lines_of_the_script(mnist: tuple[Path, str, dict[str, Any]]) -> None:
    _, markdown, document = mnist
    original = (FIXTURES / "mnist_argparse" / "before.py").read_text(encoding="utf-8").splitlines()
    changes = {group["codemod"]: group["changes"] for group in document["files"][0]["changes"]}

    def line_of(text: str) -> int:
        return next(number for number, line in enumerate(original, start=1) if text in line)

    def lines_changed(codemod: str) -> list[int]:
        return [change["lines"]["first"] for change in changes[codemod] if change["lines"]["first"] is not None]

    assert line_of("nn.DataParallel(") in lines_changed("replace_data_parallel")
    assert line_of("train_loader = torch.utils.data.DataLoader(") in lines_changed("add_distributed_sampler")
    assert line_of("torch.save(") in lines_changed("guard_side_effects")
    entry = [c for c in changes["add_launch_wrapper"] if c["added"] == ["    setup_distributed()"]]
    assert [c["lines"]["after"] for c in entry] == [line_of('if __name__ == "__main__":')]
    # Where a change removes lines of the script as written, they are the lines it names.
    for group in changes.values():
        for change in group:
            if change["lines"]["first"] is not None and all(line in original for line in change["removed"]):
                assert original[change["lines"]["first"] - 1 : change["lines"]["last"]] == change["removed"]
    assert f"Line {line_of('nn.DataParallel(')} (1 line changed):" in markdown
    assert "Line numbers refer to each script as it was before the conversion." in markdown


def test_a_dry_run_says_nothing_was_written_and_the_file_is_kept(mnist: tuple[Path, str, dict[str, Any]]) -> None:
    script, markdown, document = mnist
    assert script.read_text(encoding="utf-8") == (FIXTURES / "mnist_argparse" / "before.py").read_text(encoding="utf-8")
    assert document["written"] is False
    assert f"## `{script}`: would be converted" in markdown
    assert "Nothing was written" in markdown


@pytest.fixture(scope="module")
def warnings(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, Any]]:
    """use_cuda_branches has three warnings; its report as Markdown and JSON."""
    folder = tmp_path_factory.mktemp("warnings")
    script, markdown, _ = report_of(folder, "use_cuda_branches", ".md")
    _, document, _ = report_of(folder, "use_cuda_branches", ".json")
    return script, markdown, json.loads(document)


def test_each_warning_has_a_why_and_a_suggested_change(warnings: tuple[Path, str, dict[str, Any]]) -> None:
    script, markdown, _ = warnings
    items = markdown_items(subsection(file_section(markdown, script), "Needs a human"))
    expected = [f for f in fixture_findings("use_cuda_branches") if RULES[f[2]].severity in ("error", "warning")]
    assert [(item["line"], item["column"], item["code"]) for item in items] == expected
    for item in items:
        rule = RULES[item["code"]]
        assert item["why"] == section(rule.doc, "Why is this bad?")
        assert item["suggestion"] and f"```python\n{item['suggestion']}\n```" == section(rule.doc, "Use instead")


def test_json_has_the_same_items_as_the_markdown(warnings: tuple[Path, str, dict[str, Any]]) -> None:
    script, markdown, document = warnings
    assert set(document) == {"tool", "written", "keep_per_process_batch", "batch", "files"}
    assert document["batch"] == "global" and document["keep_per_process_batch"] is False
    [file] = document["files"]
    assert file["path"] == str(script) and file["status"] == "changed" and file["attributed"] is True
    assert markdown_items(subsection(file_section(markdown, script), "Needs a human")) == file["needs_human"]
    for consequence in file["batch"]:
        code, name, severity = consequence["code"], consequence["name"], consequence["severity"]
        assert f"{code} {name} ({severity}): {consequence['message']}" in markdown
        assert consequence["consequence"] in markdown
    for group in file["changes"]:
        assert f"#### {group['codemod']}\n\n{group['description']}" in markdown


def test_batch_section_explains_the_global_batch_kept_and_summed_losses(tmp_path: Path) -> None:
    script, markdown, _ = report_of(tmp_path, "summed_loss", ".md")
    batch = subsection(file_section(markdown, script), "Batch size and learning rate")
    for line, column, code in fixture_findings("summed_loss"):
        assert f"**Line {line}, column {column}**, {code} {RULES[code].name}" in batch
        assert migration.BATCH_CONSEQUENCES[code] in batch
    # Notes the batch section explains are not listed twice.
    assert "### For review" not in markdown


@pytest.mark.parametrize("option", [("--batch", "per-process"), ("--keep-per-process-batch",)])
def test_per_process_batch_reports_the_larger_effective_batch(tmp_path: Path, option: tuple[str, ...]) -> None:
    _, document, _ = report_of(tmp_path, "summed_loss", ".json", *option)
    report = json.loads(document)
    assert report["keep_per_process_batch"] is True and report["batch"] == "per-process"
    [kept] = [c for c in report["files"][0]["batch"] if c["code"] == "DDP308"]
    assert "`16 * world_size`" in kept["message"]
    assert "world_size times the batch" in kept["consequence"] and "learning rate" in kept["consequence"]
    [loader] = report["files"][0]["global_batch"]
    assert (loader["before"], loader["after"], loader["per_process"]) == ("16", "16 * world_size", "16")
    # The optimizer's rate follows the batch, and the report says so next to it.
    [scaled] = [c for c in report["files"][0]["batch"] if c["code"] == "DDP330"]
    assert "`0.01 * dist.get_world_size()`" in scaled["message"]


def test_every_training_loader_has_its_global_batch_before_and_after(tmp_path: Path) -> None:
    """The Global batch table lists each training loader once, at the line the conversion reports it."""
    script, markdown, _ = report_of(tmp_path, "summed_loss", ".md")
    table = subsection(file_section(markdown, script), "Global batch")
    [(line, column, _)] = [f for f in fixture_findings("summed_loss") if f[2] == "DDP307"]
    assert f"| {line} | `16` | `16` | `16 // world_size` |" in table
    assert "`--batch global`: each process loads `batch_size // world_size`" in markdown


def test_a_batch_of_one_is_listed_as_kept_per_process(tmp_path: Path) -> None:
    _, document, _ = report_of(tmp_path, "batch_of_one", ".json")
    [loader] = json.loads(document)["files"][0]["global_batch"]
    assert (loader["before"], loader["after"], loader["per_process"]) == ("batch_size", "batch_size * world_size", "batch_size")


@pytest.mark.parametrize("name", ["report.txt", "report", "report.html"])
def test_an_unknown_report_suffix_is_refused_before_any_file_is_converted(tmp_path: Path, name: str) -> None:
    script = tmp_path / "train.py"
    script.write_text(DP_SCRIPT, encoding="utf-8")
    source = DP_SCRIPT
    code, err = run("convert", "--report", str(tmp_path / name), str(script))
    assert code == 2
    assert "*.md for Markdown or *.json for JSON" in err
    assert script.read_text(encoding="utf-8") == source
    assert sorted(path.name for path in tmp_path.iterdir()) == ["train.py"]


def test_a_report_in_a_missing_folder_is_refused(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(DP_SCRIPT, encoding="utf-8")
    code, err = run("convert", "--check", "--report", str(tmp_path / "nowhere" / "r.md"), str(script))
    assert code == 2 and "no such directory" in err


def test_a_directory_run_covers_every_file_in_order_and_lists_failures(tmp_path: Path) -> None:
    tree = tmp_path / "src"
    (tree / "a").mkdir(parents=True)
    (tree / "b").mkdir()
    shutil.copy(FIXTURES / "eval_with_grad" / "before.py", tree / "a" / "one.py")
    (tree / "a" / "plain.py").write_text("print('no model here')\n", encoding="utf-8")
    (tree / "b" / "broken.py").write_text("import torch\nmodel = torch.nn.DataParallel(net\n", encoding="utf-8")
    shutil.copy(FIXTURES / "skipped_backward" / "before.py", tree / "b" / "skips.py")
    report = tmp_path / "report.json"
    code, _ = run("convert", "--report", str(report), str(tree))
    assert code == 2  # the broken file; the report is written all the same
    files = json.loads(report.read_text(encoding="utf-8"))["files"]
    assert [(Path(f["path"]).relative_to(tree).as_posix(), f["status"]) for f in files] == [
        ("a/one.py", "changed"), ("a/plain.py", "unchanged"), ("b/broken.py", "failed"), ("b/skips.py", "blocked"),
    ]  # fmt: skip
    assert "wrap_ddp" in (tree / "a" / "one.py").read_text(encoding="utf-8")
    one, plain, broken, skips = files
    assert "never wraps a model in nn.DataParallel" in plain["reason"]
    assert "syntax error" in broken["reason"] and broken["changes"] == []
    assert "not be safe until the error below is fixed" in skips["reason"]
    # The error that refuses the file (its one pass over the loader needs no set_epoch, so nothing else).
    assert {item["code"] for item in skips["needs_human"]} == {"DDP220"}
    # A note the batch section does not explain is listed for review.
    assert [c["code"] for c in one["batch"]] == ["DDP307"] and [i["code"] for i in one["review"]] == ["DDP313"]


def test_the_report_is_written_when_check_exits_1(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(DP_SCRIPT, encoding="utf-8")
    report = tmp_path / "report.md"
    code, err = run("convert", "--check", "--report", str(report), str(script))
    assert code == 1
    assert f"## `{script}`: would be converted" in report.read_text(encoding="utf-8")
    assert f"wrote the migration report {report}" in err


def test_output_and_report_together(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(DP_SCRIPT, encoding="utf-8")
    report = tmp_path / "report.md"
    code, _ = run("convert", str(script), "-o", str(tmp_path / "ddp.py"), "--report", str(report))
    assert code == 0
    assert "wrap_ddp" in (tmp_path / "ddp.py").read_text(encoding="utf-8")
    markdown = report.read_text(encoding="utf-8")
    assert f"## `{script}`: converted" in markdown and "Nothing was written" not in markdown


def test_markdown_lists_notes_for_review_and_folds_long_changes() -> None:
    note = migration.Item("DDP313", RULES["DDP313"].name, "note", 11, 21, "evaluated with gradients")
    long = migration.Change(migration.Lines(after=0), (), tuple(f"x{n} = {n}" for n in range(migration.FOLD_LINES + 1)))
    short = migration.Change(migration.Lines(first=3, last=4), ("a = 1", "b = 2"), ("a = 2",))
    group = migration.CodemodChanges("replace_data_parallel", "Swap.", (long, short))
    file = migration.FileReport("train.py", "changed", changes=(group,), review=(note,))
    markdown = migration.to_markdown(migration.MigrationReport("dp2ddp", True, False, (file,)))
    review = "### For review\n\n- **Line 11, column 21**, DDP313 evaluation-with-gradients: evaluated with gradients"
    assert review in markdown
    assert f"<details><summary>At the top ({migration.FOLD_LINES + 1} lines added)</summary>" in markdown
    assert "Lines 3-4 (2 lines replaced by 1):\n\n```diff\n-a = 1\n-b = 2\n+a = 2\n```" in markdown


def test_a_fence_in_the_script_does_not_end_the_markdown_block() -> None:
    change = migration.Change(migration.Lines(first=1, last=1), ('s = """```"""',), ('s = """````"""',))
    group = migration.CodemodChanges("replace_data_parallel", "Swap.", (change,))
    file = migration.FileReport("train.py", "changed", changes=(group,))
    markdown = migration.to_markdown(migration.MigrationReport("dp2ddp", True, False, (file,)))
    assert "\n`````diff\n-s = \"\"\"```\"\"\"\n+s = \"\"\"````\"\"\"\n`````\n" in markdown


def test_attribution_that_does_not_reproduce_the_conversion_is_not_invented(monkeypatch: pytest.MonkeyPatch) -> None:
    source = "a = 1\nb = 2\n"
    # Every prefix converts to something the full conversion did not produce.
    monkeypatch.setattr(migration, "convert_source", lambda text, options, role=None: ConvertResult(text, "a = 1\n", ()))
    changes, attributed = migration.attribute(source, "a = 1\nb = 3\nc = 4\n", ConvertOptions())
    assert attributed is False
    [group] = changes
    assert group.codemod == migration.ALL_CODEMODS
    [change] = group.changes
    assert str(change.lines) == "line 2" and change.removed == ("b = 2",) and change.added == ("b = 3", "c = 4")


def test_section_reads_a_rule_documentation_heading() -> None:
    doc = "## Why is this bad?\nBecause.\n\n## Use instead\n```python\n## a comment, not a heading\nx = 1\n```\n"
    assert section(doc, "Why is this bad?") == "Because."
    assert section(doc, "Use instead") == "```python\n## a comment, not a heading\nx = 1\n```"
    assert section(doc, "Example") is None
