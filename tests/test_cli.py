"""The dp2ddp command line as a user drives it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from dp2ddp.cli import main
from tests.conftest import DP_SCRIPT, FIXTURES


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(DP_SCRIPT, encoding="utf-8")
    return path


def test_convert_rewrites_in_place_and_reports(script: Path) -> None:
    code, _, err = run("convert", str(script))
    assert code == 0
    text = script.read_text(encoding="utf-8")
    assert "wrap_ddp(nn.Linear(2, 2))" in text and "setup_distributed()" in text
    assert "1 file converted, 0 files unchanged, 0 files failed" in err


def test_diff_prints_the_change_and_writes_nothing(script: Path) -> None:
    code, out, _ = run("convert", "--diff", str(script))
    assert code == 0
    assert script.read_text(encoding="utf-8") == DP_SCRIPT
    assert f"--- a/{script.as_posix().lstrip('/')}" in out  # absolute, outside here: applies from /
    assert "-    model = nn.DataParallel(nn.Linear(2, 2))" in out
    assert "+    model = wrap_ddp(nn.Linear(2, 2))" in out


def test_check_exits_1_when_work_is_found_and_0_when_clean(script: Path) -> None:
    assert run("convert", "--check", str(script))[0] == 1
    assert script.read_text(encoding="utf-8") == DP_SCRIPT
    run("convert", str(script))
    assert run("convert", "--check", str(script))[0] == 0


def test_output_writes_elsewhere_and_keeps_the_input(script: Path, tmp_path: Path) -> None:
    target = tmp_path / "train_ddp.py"
    code, _, _ = run("convert", str(script), "-o", str(target))
    assert code == 0
    assert script.read_text(encoding="utf-8") == DP_SCRIPT
    assert "wrap_ddp" in target.read_text(encoding="utf-8")


@pytest.fixture
def umask_022() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def test_output_takes_the_input_files_mode(script: Path, tmp_path: Path, umask_022: None) -> None:
    """Should make train_ddp.py as executable and as private as train.py, not 0600, less the umask as cp does."""
    script.chmod(0o754)
    target = tmp_path / "train_ddp.py"
    assert run("convert", str(script), "-o", str(target))[0] == 0
    assert target.stat().st_mode & 0o777 == 0o754
    script.chmod(0o666)
    assert run("convert", str(script), "-o", str(target))[0] == 0
    assert target.stat().st_mode & 0o777 == 0o644


def test_output_of_a_refused_file_writes_nothing_and_exits_1(tmp_path: Path) -> None:
    """Should not write a copy of the unconverted script where the conversion was asked for."""
    path = tmp_path / "train.py"
    path.write_text((FIXTURES / "refused_lists_everything" / "before.py").read_text(encoding="utf-8"), encoding="utf-8")
    target = tmp_path / "train_ddp.py"
    code, _, err = run("convert", str(path), "-o", str(target))
    assert code == 1
    assert not target.exists()
    assert f"did not write {target}: {path} was left as it was" in err
    assert "wrote" not in err


def test_output_of_a_refused_file_leaves_an_older_output_alone_and_says_so(tmp_path: Path) -> None:
    """Should neither overwrite nor delete what an earlier run wrote, and should warn that it is stale."""
    path = tmp_path / "train.py"
    path.write_text((FIXTURES / "refused_lists_everything" / "before.py").read_text(encoding="utf-8"), encoding="utf-8")
    target = tmp_path / "train_ddp.py"
    target.write_text("# an earlier conversion\n", encoding="utf-8")
    code, _, err = run("convert", str(path), "-o", str(target))
    assert code == 1
    assert target.read_text(encoding="utf-8") == "# an earlier conversion\n"
    assert f"the {target} already there is not from this run" in err


def test_output_of_a_file_with_nothing_to_convert_is_a_copy(tmp_path: Path) -> None:
    """Should still write the output, unchanged, for a file that needs no conversion: nothing was refused."""
    path = tmp_path / "plain.py"
    path.write_text("import torch\nmodel = torch.nn.Linear(2, 2)\n", encoding="utf-8")
    target = tmp_path / "plain_ddp.py"
    code, _, err = run("convert", str(path), "-o", str(target))
    assert code == 0
    assert target.read_text(encoding="utf-8") == path.read_text(encoding="utf-8")
    assert f"wrote {target}" in err


def test_output_refuses_several_inputs(script: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.py"
    other.write_text(DP_SCRIPT, encoding="utf-8")
    code, _, err = run("convert", str(script), str(other), "-o", str(tmp_path / "x.py"))
    assert code == 2
    assert "--output takes exactly one input file" in err


def test_syntax_error_exits_2_names_the_place_and_leaves_the_file(tmp_path: Path, script: Path) -> None:
    broken = tmp_path / "broken.py"
    source = "import torch\nmodel = torch.nn.DataParallel(net)\n\ndef main(:\n    pass\n"
    broken.write_text(source, encoding="utf-8")
    code, _, err = run("convert", str(tmp_path))
    assert code == 2
    assert f"error: {broken}:4:10: syntax error: invalid syntax" in err
    assert broken.read_text(encoding="utf-8") == source
    # The other file is still converted.
    assert "wrap_ddp" in script.read_text(encoding="utf-8")
    assert "1 file converted, 0 files unchanged, 1 file failed" in err


HEAD = "import torch\nmodel = torch.nn.DataParallel(net)\n"


@pytest.mark.parametrize(
    ("body", "where", "says"),
    [
        pytest.param(
            "x = x.cuda(async=True)\n", "3:12",
            "syntax error: invalid syntax. `async=` is pre-3.7 (or Python 2) source: `async` has been a keyword "
            "since Python 3.7, and PyTorch 0.4 renamed the argument, so rename every `async=` to `non_blocking=`",
            id="async= in a .cuda() call names non_blocking",
        ),
        pytest.param(
            "x = x.to(device, async=True)\n", "3:18", "rename every `async=` to `non_blocking=`",
            id="async= after another argument names non_blocking",
        ),
        pytest.param(
            "async = True\n", "3:7", "`async` has been a keyword since Python 3.7, so this is older source: rename it",
            id="async as a name says it is a keyword now",
        ),
        pytest.param(
            'print "epoch", 1\n', "3:1",
            "syntax error: Missing parentheses in call to 'print'. Did you mean print(...)? This is Python 2 source "
            "(a print or exec statement): port it to Python 3 first, then run dp2ddp again",
            id="a print statement says Python 2",
        ),
        pytest.param(
            "try:\n    pass\nexcept ValueError, error:\n    pass\n", "5:8",
            "`except E, name:` is Python 2 source: port it to Python 3 first (`except E as name:`)",
            id="except with a comma, which LibCST parses, says Python 2",
        ),
    ],
)
def test_older_python_says_so_at_cpythons_position(tmp_path: Path, body: str, where: str, says: str) -> None:
    """Should keep CPython's message and position and add what the old spelling is and what to write instead."""
    path = tmp_path / "old.py"
    path.write_text(HEAD + body, encoding="utf-8")
    code, _, err = run("convert", str(path))
    assert code == 2
    assert f"error: {path}:{where}: " in err and says in err
    assert "internal error" not in err
    assert path.read_text(encoding="utf-8") == HEAD + body


@pytest.mark.parametrize(
    "body",
    [
        pytest.param("x = f(1 2)\n", id="a missing comma"),
        pytest.param("async def f():\n    await g(1 2)\n", id="an error in an async def"),
    ],
)
def test_a_modern_syntax_error_gets_no_older_python_advice(tmp_path: Path, body: str) -> None:
    """Should say only what CPython says when nothing on the line is Python 2 or pre-3.7."""
    path = tmp_path / "new.py"
    path.write_text(HEAD + body, encoding="utf-8")
    code, _, err = run("convert", str(path))
    assert code == 2
    assert "syntax error: invalid syntax. Perhaps you forgot a comma?\n" in err
    assert "Python 2" not in err and "3.7" not in err


def test_non_blocking_is_converted(tmp_path: Path) -> None:
    """Should convert the spelling that replaced async=, with no syntax error."""
    path = tmp_path / "new.py"
    path.write_text(HEAD + "x = x.cuda(non_blocking=True)\n", encoding="utf-8")
    assert run("convert", str(path))[0] == 0
    assert "x.cuda(non_blocking=True)" in path.read_text(encoding="utf-8")


def test_non_utf8_file_gives_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "latin.py"
    data = "# caf\xe9\nimport torch\nmodel = torch.nn.DataParallel(net)\n".encode("latin-1")
    path.write_bytes(data)
    code, _, err = run("convert", str(path))
    assert code == 2
    assert f"{path}:1: not valid utf-8 (byte 0xe9)" in err
    assert "Traceback" not in err
    assert path.read_bytes() == data


def test_declared_encoding_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "latin.py"
    path.write_bytes(("# -*- coding: latin-1 -*-\n# caf\xe9\n" + DP_SCRIPT).encode("latin-1"))
    assert run("convert", str(path))[0] == 0
    text = path.read_bytes().decode("latin-1")
    assert "# caf\xe9" in text and "wrap_ddp" in text


def test_crlf_newlines_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "crlf.py"
    path.write_bytes(DP_SCRIPT.replace("\n", "\r\n").encode())
    assert run("convert", str(path))[0] == 0
    data = path.read_bytes()
    assert b"wrap_ddp" in data
    assert data.count(b"\n") == data.count(b"\r\n")


def test_tab_indentation_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "tabs.py"
    path.write_text(DP_SCRIPT.replace("    ", "\t"), encoding="utf-8")
    assert run("convert", str(path))[0] == 0
    text = path.read_text(encoding="utf-8")
    assert "wrap_ddp" in text
    indented = [line for line in text.splitlines() if line[:1].isspace()]
    assert indented and all(line.startswith("\t") for line in indented)
    compile(text, str(path), "exec")


def test_bom_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "bom.py"
    path.write_bytes(b"\xef\xbb\xbf" + DP_SCRIPT.encode())
    assert run("convert", str(path))[0] == 0
    assert path.read_bytes().startswith(b"\xef\xbb\xbf")
    assert path.read_bytes().count(b"\xef\xbb\xbf") == 1


def test_file_mode_is_kept(script: Path) -> None:
    script.chmod(0o754)
    run("convert", str(script))
    assert script.stat().st_mode & 0o777 == 0o754


def test_a_new_report_file_follows_the_umask_not_0600(script: Path, tmp_path: Path, umask_022: None) -> None:
    """Should create the migration report as open() would, readable by the team that reviews it."""
    report = tmp_path / "migration.md"
    run("convert", "--diff", "--report", str(report), str(script))
    assert report.stat().st_mode & 0o777 == 0o644


def test_directories_are_searched_recursively(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    nested = tmp_path / "pkg" / "sub" / "train.py"
    nested.write_text(DP_SCRIPT, encoding="utf-8")
    (tmp_path / "pkg" / "notes.txt").write_text("DataParallel", encoding="utf-8")
    code, _, err = run("convert", str(tmp_path))
    assert code == 0
    assert "wrap_ddp" in nested.read_text(encoding="utf-8")
    assert "1 file converted, 0 files unchanged" in err


def test_missing_path_is_a_usage_error(tmp_path: Path) -> None:
    code, _, err = run("convert", str(tmp_path / "nope.py"))
    assert code == 2
    assert "no such file or directory" in err


def test_only_and_skip_select_codemods(script: Path) -> None:
    assert run("convert", "--only", "replace_data_parallel", str(script))[0] == 0
    text = script.read_text(encoding="utf-8")
    assert "wrap_ddp(" in text and "def setup_distributed" not in text


def test_unknown_codemod_name_is_rejected(script: Path) -> None:
    code, _, err = run("convert", "--skip", "replace_everything", str(script))
    assert code == 2
    assert "unknown codemod replace_everything" in err
    assert script.read_text(encoding="utf-8") == DP_SCRIPT


def test_findings_are_printed_with_path_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "sub.py"
    path.write_text("import torch\nmodel.features = torch.nn.DataParallel(model.features)\n", encoding="utf-8")
    code, _, err = run("convert", str(path))
    assert code == 0
    assert f"{path}:2:18: DDP201 DataParallel wraps a sub-module" in err


def test_batch_per_process_keeps_the_batch_and_scales_the_learning_rate(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text((FIXTURES / "mnist_argparse" / "before.py").read_text(encoding="utf-8"), encoding="utf-8")
    code, out, err = run("convert", "--diff", "--batch", "per-process", str(path))
    assert code == 0
    assert "+    train_loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, sampler=DistributedSampler(train_set, shuffle=True))" in out
    assert "+    optimizer = optim.SGD(model.parameters(), lr=args.lr * dist.get_world_size())" in out
    assert "DDP308 global batch `args.batch_size` -> `args.batch_size * world_size`" in err
    assert "DDP330 learning rate `args.lr` -> `args.lr * dist.get_world_size()`" in err
    # The default keeps the global batch and the learning rate.
    code, out, err = run("convert", "--diff", str(path))
    assert "batch_size=args.batch_size // dist.get_world_size()" in out and "lr=args.lr * dist" not in out
    assert "DDP307 global batch `args.batch_size` -> `args.batch_size` (kept)" in err and "DDP330" not in err


def test_keep_per_process_batch_still_means_batch_per_process(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text((FIXTURES / "mnist_argparse" / "before.py").read_text(encoding="utf-8"), encoding="utf-8")
    code, _, err = run("convert", "--keep-per-process-batch", str(path))
    assert code == 0
    text = path.read_text(encoding="utf-8")
    assert "batch_size=args.batch_size, sampler=DistributedSampler(train_set, shuffle=True)" in text
    assert "lr=args.lr * dist.get_world_size()" in text
    assert "--keep-per-process-batch is deprecated; use --batch per-process" in err
    assert "--keep-per-process-batch" not in run("convert", "--help")[1]


def test_help_shows_examples() -> None:
    assert "Examples:" in run("--help")[1]
    convert_help = run("convert", "--help")[1]
    assert "dp2ddp convert --diff train.py" in convert_help
    assert "replace_data_parallel" in convert_help


def test_python_dash_m_works(script: Path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "dp2ddp", "convert", "--check", str(script)], capture_output=True, text=True
    )
    assert completed.returncode == 1
    assert "1 file would be converted" in completed.stderr


def test_files_without_data_parallel_are_left_unchanged(tmp_path: Path) -> None:
    """The prefilter leaves scripts with no DataParallel alone without parsing them."""
    path = tmp_path / "plain.py"
    source = "import torch\nmodel = torch.nn.Linear(2, 2)\n"
    path.write_text(source, encoding="utf-8")
    code, _, err = run("convert", "--check", str(path))
    assert code == 0
    assert path.read_text(encoding="utf-8") == source
    assert "0 files would be converted, 1 file unchanged" in err
    assert f"left {path} unchanged: it never wraps a model in nn.DataParallel" in err


def test_an_unchanged_file_says_why(tmp_path: Path) -> None:
    """A converted file, or one that only tests for DataParallel, names the reason; a tree stays quiet."""
    converted = tmp_path / "converted.py"
    converted.write_text((FIXTURES / "cifar_resnet" / "after.py").read_text(encoding="utf-8"), encoding="utf-8")
    checks = tmp_path / "checks.py"
    checks.write_text("import torch\n\n\ndef bare(m):\n    return m.module if isinstance(m, torch.nn.DataParallel) else m\n")
    (tmp_path / "plain.py").write_text("x = 1\n")
    _, _, err = run("convert", "--check", str(converted))
    assert f"left {converted} unchanged: converted already" in err
    code, _, err = run("convert", "--check", str(tmp_path))
    assert code == 0
    assert "plain.py unchanged" not in err
    assert f"left {converted} unchanged: converted already" in err


def test_a_file_convert_cannot_make_safe_is_left_as_it_was_and_exits_1(tmp_path: Path) -> None:
    """Errors name each line to fix by hand; the file is byte-identical and the exit says work is left."""
    path = tmp_path / "train.py"
    # A forward through the wrapper before the re-initialisations: the wrap cannot move after them.
    source = (FIXTURES / "reinit_after_wrap" / "before.py").read_text(encoding="utf-8").replace(
        "    net = torch.nn.DataParallel(base)\n", "    net = torch.nn.DataParallel(base)\n    print(net(torch.zeros(1, 3, 12, 12)).shape)\n"
    )
    path.write_text(source, encoding="utf-8")
    code, _, err = run("convert", str(path))
    assert code == 1
    assert path.read_text(encoding="utf-8") == source
    assert f"{path}:28:5: DDP211 " in err
    assert "left" in err and "as it was" in err and "2 errors above" in err
    assert "1 left as it was" in err.splitlines()[-1]


def test_a_refused_file_lists_every_hazard_in_one_run(tmp_path: Path) -> None:
    """Fixing the error by hand should not reveal new findings: the warnings behind it come in the same run."""
    path = tmp_path / "train.py"
    source = (FIXTURES / "refused_lists_everything" / "before.py").read_text(encoding="utf-8")
    path.write_text(source, encoding="utf-8")
    code, _, err = run("convert", str(path))
    assert code == 1
    assert path.read_text(encoding="utf-8") == source
    assert [line.split(" ")[1] for line in err.splitlines() if line.startswith(f"{path}:")] == ["DDP423", "DDP309", "DDP220"]
    assert "until the error above is fixed by hand" in err


STAR_IMPORTED = """\
from models import *


def main():
    model = torch.nn.DataParallel(Net()).cuda()
    return model


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize("flags", [pytest.param((), id="convert"), pytest.param(("--check",), id="convert --check")])
def test_a_wrap_a_star_import_may_bind_fails_ci_until_torch_is_imported_by_name(tmp_path: Path, flags: tuple[str, ...]) -> None:
    """Should exit 1 on a file left unconverted because `torch` may come from `import *` (DDP102), so CI does not pass it."""
    path = tmp_path / "train.py"
    path.write_text(STAR_IMPORTED, encoding="utf-8")
    code, _, err = run("convert", *flags, str(path))
    assert code == 1
    assert path.read_text(encoding="utf-8") == STAR_IMPORTED
    assert f"{path}:5:13: DDP102 `torch.nn.DataParallel` cannot be resolved" in err
    assert f"left {path} as it was" in err and "1 left as it was" in err.splitlines()[-1]


def test_a_star_import_beside_torch_imported_by_name_converts(tmp_path: Path) -> None:
    """Should convert, with no DDP102, once the script imports torch by name after its star import."""
    path = tmp_path / "train.py"
    path.write_text(STAR_IMPORTED.replace("from models import *\n", "from models import *\nimport torch\n"), encoding="utf-8")
    code, _, err = run("convert", str(path))
    assert code == 0
    assert "DDP102" not in err
    assert "wrap_ddp(Net())" in path.read_text(encoding="utf-8")


def test_explain_documents_every_code() -> None:
    from dp2ddp.rules import RULES

    code, out, _ = run("explain", "--all")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == list(RULES)
    for rule in RULES.values():
        code, out, _ = run("explain", rule.code.lower())
        assert code == 0
        assert out.startswith(f"# {rule.code} ({rule.name}, {rule.severity})")
        assert "## Why is this bad?" in out


def test_explain_names_an_unknown_code() -> None:
    code, _, err = run("explain", "DDP999")
    assert code == 2
    assert "unknown code 'DDP999'" in err
