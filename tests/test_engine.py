"""The convert engine: what it decides early, how many analyses a file costs, and trees of files."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from dp2ddp import api
from dp2ddp.api import ConversionError, convert_source
from dp2ddp.cli import main
from tests.conftest import FIXTURES


@pytest.fixture
def analyses(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every Analysis the engine builds (each one is a metadata resolution)."""
    built: list[object] = []
    original = api.Analysis

    def counting(module: object, role: object = None) -> object:
        built.append(module)
        return original(module, role)  # type: ignore[arg-type]

    monkeypatch.setattr(api, "Analysis", counting)
    return built


@pytest.mark.parametrize(
    "source",
    [
        pytest.param('"""Wraps the model in nn.DataParallel when it can."""\nx = 1\n', id="a docstring"),
        pytest.param("import torch\n# model = torch.nn.DataParallel(model)\n", id="a comment"),
        pytest.param(
            "import torch\n\ndef bare(m):\n    return m.module if isinstance(m, torch.nn.DataParallel) else m\n",
            id="an isinstance test",
        ),
        pytest.param("import torch\nKINDS = (torch.nn.DataParallel, torch.nn.Linear)\n", id="a reference"),
    ],
)
def test_a_file_that_only_mentions_data_parallel_is_settled_without_metadata(source: str, analyses: list[object]) -> None:
    """Should leave the file byte-identical with no findings, and never resolve metadata for it."""
    result = convert_source(source)
    assert result.output == source and result.findings == ()
    assert analyses == []


def test_library_code_that_wraps_no_model_is_left_byte_identical(analyses: list[object]) -> None:
    """Should not widen isinstance or add imports in a file that imports DataParallel but wraps nothing."""
    source = textwrap.dedent(
        """\
        import torch
        from torch.nn import DataParallel


        def unwrap(module):
            if isinstance(module, (DataParallel, torch.nn.DataParallel)):
                return module.module
            return module.to("cuda:0")
        """
    )
    result = convert_source(source)
    assert result.output == source
    assert result.findings == ()
    assert len(analyses) == 1


def test_a_script_already_using_ddp_is_settled_by_its_first_analysis(analyses: list[object]) -> None:
    source = (FIXTURES / "already_ddp" / "before.py").read_text(encoding="utf-8")
    result = convert_source(source)
    assert not result.changed
    assert [f.code for f in result.findings] == ["DDP001"]
    assert len(analyses) == 1


def test_a_changed_script_costs_three_analyses(analyses: list[object]) -> None:
    """One per codemod group (two) and one of the output for the stability check."""
    source = (FIXTURES / "imagenet_meters" / "before.py").read_text(encoding="utf-8")
    assert convert_source(source).changed
    assert len(analyses) == 3


def test_an_unstable_conversion_is_an_error_not_an_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """Should refuse to return a result that a second pass would change again."""
    source = (FIXTURES / "mnist_argparse" / "before.py").read_text(encoding="utf-8")
    real = api._apply_group

    def drifting(*args: object, **kwargs: object) -> tuple[str, list[object]]:
        code, findings = real(*args, **kwargs)  # type: ignore[arg-type]
        return code + "# again\n", findings

    monkeypatch.setattr(api, "_apply_group", drifting)
    with pytest.raises(api.ConversionError, match="not stable"):
        convert_source(source)


# -- trees ------------------------------------------------------------------------------

DP_SCRIPT = "import torch.nn as nn\n\nmodel = nn.DataParallel(nn.Linear(2, 2))\n"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """Enough files for a worker pool: convertible, unchanged and broken ones, interleaved."""
    root = tmp_path / "project"
    root.mkdir()
    for index in range(8):
        kind = index % 3
        text = DP_SCRIPT if kind == 0 else ("x = 1\n" if kind == 1 else "def broken(:\n    DataParallel\n")
        (root / f"f{index}.py").write_text(text, encoding="utf-8")
    return root


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_parallel_jobs_report_in_the_same_order_with_the_same_exit_code(tree: Path) -> None:
    serial = run("convert", "--check", "-j", "1", str(tree))
    parallel = run("convert", "--check", "-j", "2", str(tree))
    assert serial == parallel
    code, _, err = serial
    assert code == 2  # two files do not parse
    assert "3 files would be converted, 3 files unchanged, 2 files failed" in err
    numbers = [int(match) for match in re.findall(r"/f(\d+)\.py", err)]
    # Unchanged files without findings are not named; the others come in the order given.
    assert numbers == sorted(numbers) and set(numbers) == {0, 2, 3, 5, 6}


def test_parallel_jobs_write_the_same_files(tree: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in tree.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    run("convert", "-j", "1", str(tree))
    run("convert", "-j", "2", str(copy))
    for path in tree.iterdir():
        assert (copy / path.name).read_bytes() == path.read_bytes(), path.name


def test_ctrl_c_mid_tree_leaves_every_file_untouched_or_fully_written(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dp2ddp import cli

    originals = {path.name: path.read_text(encoding="utf-8") for path in tree.iterdir()}
    written: list[Path] = []
    real_write = cli.write_atomic

    def interrupted_on_second_write(path: Path, text: str, encoding: str) -> None:
        if written:
            raise KeyboardInterrupt
        real_write(path, text, encoding)
        written.append(path)

    monkeypatch.setattr(cli, "write_atomic", interrupted_on_second_write)
    code, _, err = run("convert", "-j", "2", str(tree))
    assert code == 130
    assert "interrupted" in err
    (first,) = written
    assert "wrap_ddp(nn.Linear(2, 2))" in first.read_text(encoding="utf-8")
    for path in tree.iterdir():
        if path != first:
            assert path.read_text(encoding="utf-8") == originals[path.name], path.name
    assert not [p for p in tree.iterdir() if p.suffix == ".dp2ddp"]


# -- refused files --------------------------------------------------------------------

REFUSED = FIXTURES / "refused_lists_everything" / "before.py"


def test_a_refused_file_lists_the_hazards_behind_its_error_in_one_run() -> None:
    """Should name the skippable backward that refuses the file and also what the conversion would report after it is fixed.

    The sampler codemod (first group) warns about the batch, the guard codemod
    (second group, which plans on the converted tree) about the per-process run
    directory; both positions are in the file as written, which stays byte-identical.
    """
    source = REFUSED.read_text(encoding="utf-8")
    result = convert_source(source)
    assert result.output == source
    assert [(f.line, f.code, f.severity) for f in result.findings] == [
        (9, "DDP423", "warning"),
        (15, "DDP309", "warning"),
        (23, "DDP220", "error"),
    ]


def test_a_refused_file_reports_no_notes_of_changes_it_did_not_make() -> None:
    """Should not say `os.makedirs` now passes exist_ok=True (DDP417) or the batch is split (DDP307): nothing changed."""
    result = convert_source(REFUSED.read_text(encoding="utf-8"))
    assert not [f for f in result.findings if f.severity == "note"]


def test_a_refused_file_with_nothing_else_to_report_lists_only_its_error() -> None:
    """Should add nothing to a refusal whose script has no other hazard."""
    source = (FIXTURES / "gradient_penalty_alone" / "before.py").read_text(encoding="utf-8")
    result = convert_source(source)
    assert result.output == source
    assert [f.code for f in result.findings] == ["DDP222"]


def test_a_codemod_failing_past_the_refusal_keeps_the_refusal_and_what_came_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """Should still refuse cleanly, with the first group's findings, when the second group raises on the in-memory tree."""
    real = api._apply_group

    def second_group_fails(analysis: object, group: list[object], *args: object, **kwargs: object) -> object:
        if any(codemod.__name__ == "GuardSideEffectsCommand" for codemod in group):  # type: ignore[attr-defined]
            raise api.ConversionError("internal error in codemod guard_side_effects")
        return real(analysis, group, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(api, "_apply_group", second_group_fails)
    source = REFUSED.read_text(encoding="utf-8")
    result = convert_source(source)
    assert result.output == source
    assert [f.code for f in result.findings] == ["DDP309", "DDP220"]


def test_a_refused_file_costs_two_analyses(analyses: list[object]) -> None:
    """One of the script, and one of the second group's input, built in memory and thrown away."""
    convert_source(REFUSED.read_text(encoding="utf-8"))
    assert len(analyses) == 2


def test_indentation_mixing_tabs_and_spaces_that_libcst_cannot_read_names_its_line() -> None:
    """CPython accepts a tab after spaces (tabs are 8 columns); LibCST does not: say which line and what to do."""
    source = "def f(xs):\n    for x in xs:\n        y = x\n       \ty = y + 1\n        with open(y):\n    \t    z = y\n        return z\n"
    compile(source, "<mixed>", "exec")
    with pytest.raises(ConversionError) as raised:
        convert_source(source + "import torch\nmodel = torch.nn.DataParallel(net)\n")
    assert raised.value.line == 4
    assert "mixes tabs and spaces" in raised.value.message and "expand -i -t 8" in raised.value.message
