"""Sources that break parsers: deeply nested, refused by Python, not Python at all, or already DDP.

Each is answered by a clear one-line message and its exit status, never a
traceback or a crash, and in a run over many files the others are still
converted or checked. Inputs are generated here; anything that could crash
the interpreter runs in a subprocess.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from dp2ddp.api import convert_source
from dp2ddp.check import check_source
from dp2ddp.cli import main

WRAP = "import torch.nn as nn\nmodel = nn.DataParallel(nn.Linear(1, 1))\n"
# The deepest CPython admits at its default recursion limit is about 2,980 nested operators.
TOO_LONG_SUM = "x = " + " + ".join(["a"] * 3000) + "\n"
TOO_MANY_PARENTHESES = "x = " + "(" * 3000 + "1" + ")" * 3000 + "\n"


def sum_of(terms: int) -> str:
    return "x = " + " + ".join(["a"] * terms) + "\n"


def dp2ddp(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The command in a process of its own, so that a crash is seen as an exit status, not as pytest dying."""
    return subprocess.run(
        [sys.executable, "-m", "dp2ddp", *map(str, args)], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def run(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, [str(arg) for arg in args])
    return result.exit_code, result.stdout, result.stderr


# -- nesting CPython admits converts --------------------------------------------------------


def nested_ifs(depth: int) -> str:
    return "".join("    " * level + "if a:\n" for level in range(depth)) + "    " * depth + "pass\n"


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(sum_of(1000), id="a sum of 1,000 terms"),
        pytest.param("x = {\n" + "".join(f"    'k{i}': {i},\n" for i in range(2000)) + "}\n", id="a 2,000-line dict"),
        pytest.param(nested_ifs(99), id="99 nested ifs, the most Python allows"),
        pytest.param("x = " + "[" * 150 + "1" + "]" * 150 + "\n", id="150 nested brackets"),
        pytest.param("x = a" + ".b" * 1000 + "\n", id="a chain of 1,000 attributes"),
    ],
)
def test_deep_code_python_runs_is_converted(body: str) -> None:
    """Should convert, since Python runs the script: the parser's recursion gets the room it needs."""
    result = convert_source(WRAP + body)
    assert result.changed and "wrap_ddp(nn.Linear(1, 1))" in result.output
    assert result.output.endswith(body)
    compile(result.output, "<converted>", "exec")


def test_a_long_sum_is_converted_and_checked_from_the_command_line(tmp_path: Path) -> None:
    """Should convert and check a 500-term sum (which raised RecursionError), with the usual exit statuses."""
    script = tmp_path / "train.py"
    script.write_text(WRAP + sum_of(500))
    code, out, err = run("convert", "--diff", script)
    assert (code, "Traceback" in err) == (0, False)
    assert "+model = wrap_ddp(nn.Linear(1, 1))" in out
    code, out, err = run("check", script)
    assert code == 1 and "DDP002" in out and "Traceback" not in err


# -- nesting Python refuses is an error at its line -------------------------------------------


@pytest.mark.parametrize("command", [["convert", "--diff"], ["check"]])
@pytest.mark.parametrize(
    ("body", "says"),
    [
        pytest.param(TOO_MANY_PARENTHESES, ":3:205: syntax error: too many nested parentheses", id="3,000 parentheses"),
        pytest.param(
            TOO_LONG_SUM, ":3:9: too deeply nested for the parser (Python itself refuses it", id="3,000 terms"
        ),
    ],
)
def test_nesting_python_refuses_is_an_error_naming_the_line(
    tmp_path: Path, command: list[str], body: str, says: str
) -> None:
    """Should exit 2 with the file, the line and the cause, where 3,000 parentheses crashed the process."""
    script = tmp_path / "train.py"
    script.write_text(WRAP + body)
    result = dp2ddp(*command, script)
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"error: {script}{says}" in result.stderr
    assert "Traceback" not in result.stderr


def hostile_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "a_train.py").write_text(WRAP)
    (folder / "b_parentheses.py").write_text(WRAP + TOO_MANY_PARENTHESES)
    (folder / "c_sum.py").write_text(WRAP + TOO_LONG_SUM)
    (folder / "d_long.py").write_text(WRAP + sum_of(600))
    (folder / "e_train.py").write_text(WRAP)
    return folder


@pytest.mark.parametrize(
    "how",
    [
        pytest.param("folder", id="a folder, as one project"),
        pytest.param("files", id="files, in a pool of two workers"),
    ],
)
def test_one_file_too_deep_does_not_stop_the_others(tmp_path: Path, how: str) -> None:
    """Should convert every other file and print the summary, where the first deep file ended the run."""
    folder = hostile_folder(tmp_path)
    named = [folder] if how == "folder" else ["-j", "2", *sorted(folder.iterdir())]
    result = dp2ddp("convert", "--check", *named)
    assert result.returncode == 2, result.stderr[-2000:]
    for name in ("a_train.py", "d_long.py", "e_train.py"):
        assert f"would convert {folder / name}" in result.stderr
    assert f"error: {folder / 'b_parentheses.py'}:3:205: syntax error: too many nested parentheses" in result.stderr
    assert f"error: {folder / 'c_sum.py'}:3:9: too deeply nested for the parser" in result.stderr
    assert "3 files would be converted, 0 files unchanged, 2 files failed" in result.stderr
    assert "Traceback" not in result.stderr


def test_check_reports_the_deep_files_of_a_folder_and_checks_the_rest(tmp_path: Path) -> None:
    """Should check every other file of the folder, where reading it as a project raised RecursionError."""
    folder = hostile_folder(tmp_path)
    result = dp2ddp("check", "-j", "2", folder)
    assert result.returncode == 2, result.stderr[-2000:]
    assert sum(line.endswith("[*]") and "DDP002" in line for line in result.stdout.splitlines()) == 3
    summary = "checked 5 files: 3 findings (3 warnings); 3 fixable with --fix [*]; 2 files could not be checked"
    assert summary in result.stderr
    assert "Traceback" not in result.stderr


def test_the_api_says_too_deep_rather_than_raising_recursion_error() -> None:
    """Should raise the ConversionError the CLI prints, not RecursionError, for convert_source and check_source."""
    for entry in (convert_source, check_source):
        with pytest.raises(Exception) as raised:
            entry(WRAP + TOO_LONG_SUM)
        assert type(raised.value).__name__ == "ConversionError"
        assert "too deeply nested for the parser" in str(raised.value)


# -- files the prefilter settles still parse ---------------------------------------------------

PYTHON_2 = 'print "epoch", 1\n'
SETTLED_REFUSED = [
    pytest.param(PYTHON_2, "1:1: syntax error: Missing parentheses in call to 'print'", id="Python 2"),
    pytest.param(
        "def f():\n    return 1\nreturn 2\n", "3:1: syntax error: 'return' outside function", id="return outside"
    ),
]
if sys.version_info < (3, 12):
    SETTLED_REFUSED.append(
        pytest.param("type Vector = list[float]\n", "1:6: syntax error: invalid syntax", id="3.12 syntax")
    )


@pytest.mark.parametrize("command", [["convert", "--check"], ["check"]])
@pytest.mark.parametrize(("body", "says"), SETTLED_REFUSED)
def test_a_file_without_ddp_code_that_python_refuses_is_an_error(
    tmp_path: Path, command: list[str], body: str, says: str
) -> None:
    """Should exit 2 at CPython's position, where the prefilter counted it unchanged with no findings."""
    script = tmp_path / "old.py"
    script.write_text(body)
    clean = tmp_path / "clean.py"
    clean.write_text("x = 1\n")
    code, _, err = run(*command, clean, script)
    assert code == 2
    assert f"error: {script}:{says}" in err
    assert f"{clean}" not in err  # a file that compiles is still settled without a word


def test_a_settled_file_that_compiles_is_still_unchanged(tmp_path: Path) -> None:
    """Should leave a plain script unchanged with exit 0 and no word, as before: compiling it is the only new cost."""
    script = tmp_path / "plain.py"
    script.write_text(sum_of(1500) + "if x is 1:\n    pass\n")
    for command in (["convert", "--check"], ["check"]):
        code, _, err = run(*command, script)
        assert code == 0 and "Warning" not in err  # the compiler's SyntaxWarning is the script's business


# -- verify runs only scripts Python can run -------------------------------------------------------

NOTES = "these are notes:\nnot (Python\n"


@pytest.mark.parametrize(
    ("which", "text", "says"),
    [
        pytest.param("converted", NOTES, ":1:7: syntax error: invalid syntax", id="--converted notes"),
        pytest.param("script", NOTES, ":1:7: syntax error: invalid syntax", id="SCRIPT notes"),
        pytest.param("script", WRAP + TOO_LONG_SUM, ":3:9: too deeply nested for the parser", id="SCRIPT too deep"),
        pytest.param("converted", TOO_MANY_PARENTHESES, ":1:205: syntax error: too many nested parentheses",
                     id="--converted too deep"),  # fmt: skip
    ],
)
def test_verify_refuses_what_python_cannot_run_before_any_run(tmp_path: Path, which: str, text: str, says: str) -> None:
    """Should exit 2 with the file and line before running anything, where a traceback came through the bootstrap."""
    good = tmp_path / "train.py"
    good.write_text(WRAP)
    bad = tmp_path / "notes.txt"
    bad.write_text(text)
    args = [good, "--converted", bad] if which == "converted" else [bad]
    code, out, err = run("verify", *args, "--json", tmp_path / "verify.json")
    assert code == 2
    assert f"error: {bad}{says}" in err and "Python cannot run it, so verify cannot either" in err
    assert "running reference" not in out + err and "Traceback" not in err
    assert '"verdict": "error"' in (tmp_path / "verify.json").read_text()


# -- a DDP script is told it is DDP ------------------------------------------------------------------

DDP_SCRIPT = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    model = DDP(torch.nn.Linear(2, 2))
    return model


if __name__ == "__main__":
    main()
"""


def test_a_ddp_script_without_data_parallel_is_told_ddp001(tmp_path: Path) -> None:
    """Should say DDP001 (it runs DDP already), not that it trains on one device."""
    script = tmp_path / "train_ddp.py"
    script.write_text(DDP_SCRIPT)
    code, _, err = run("convert", script)
    assert code == 0 and script.read_text() == DDP_SCRIPT
    assert "DDP001" in err and "init_process_group on line 7" in err
    assert "trains on one device" not in err
    assert "DDP001" in (convert_source(DDP_SCRIPT).reason or "")


@pytest.mark.parametrize(
    "body",
    [
        pytest.param("def init_process_group(backend):\n    return backend\n", id="a def of the name"),
        pytest.param("import torch\nmodel = torch.nn.Linear(2, 2)\n", id="no distributed call"),
    ],
)
def test_a_script_that_starts_no_ddp_still_trains_on_one_device(body: str) -> None:
    """Should keep the one-device reason where nothing calls DDP or init_process_group."""
    assert "trains on one device" in (convert_source(body).reason or "")


def test_a_script_that_replicates_its_model_by_hand_is_not_said_to_train_on_one_device() -> None:
    """wavenet_vocoder's replicate/scatter/parallel_apply/gather: several GPUs without DataParallel, said so."""
    body = (
        "import torch\nfrom torch.nn.parallel import replicate, scatter, parallel_apply, gather\n\n\n"
        "def forward(model, x, devices):\n    replicas = replicate(model, devices)\n    inputs = scatter(x, devices)\n"
        "    return gather(parallel_apply(replicas, inputs), devices[0])\n"
    )
    reason = convert_source(body).reason or ""
    assert "trains on one device" not in reason
    assert "by hand (parallel_apply on line 8)" in reason
