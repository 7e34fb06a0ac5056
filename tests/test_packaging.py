"""The built distribution: codemods install as dp2ddp.codemods, never as a top-level package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.conftest import FIXTURES

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Build from a copy, so the checkout gets no build/ or egg-info folders.
    source = tmp_path_factory.mktemp("src") / "dp2ddp"
    ignored = shutil.ignore_patterns(".git", ".venv", "venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache")
    shutil.copytree(ROOT, source, ignore=ignored)
    out = tmp_path_factory.mktemp("wheel")
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(out), str(source)]
    subprocess.run(command, check=True, capture_output=True)
    (built,) = out.glob("dp2ddp-*.whl")
    return built


def test_wheel_puts_codemods_under_dp2ddp(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "dp2ddp/codemods/replace_data_parallel.py" in names
    # The CLI imports dp2ddp.verify: a wheel without it installs a dp2ddp command that cannot start.
    assert "dp2ddp/verify/runner.py" in names
    assert not any(name.startswith("codemods/") for name in names)


def test_wheel_ships_the_check_output_schema(wheel: Path) -> None:
    """The JSON Schema of `check --format json` is package data, so installed users can validate against it."""
    assert "dp2ddp/schemas/check-output.schema.json" in zipfile.ZipFile(wheel).namelist()


def test_installed_wheel_imports_and_converts(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    # -S keeps site's .pth files (and so any editable install) out of the way;
    # the real dependencies come from this interpreter's site-packages.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(target), sysconfig.get_paths()["purelib"]]))
    check = f"""
import importlib.util, pathlib
import dp2ddp.codemods
import dp2ddp.cli
# The commands import their machinery when they run: every module they import is in the wheel.
import dp2ddp.check, dp2ddp.hazards, dp2ddp.projects, dp2ddp.migration, dp2ddp.analysis.project
import dp2ddp.verify.checks, dp2ddp.verify.render, dp2ddp.verify.logs
from dp2ddp.api import convert_source
assert pathlib.Path(dp2ddp.codemods.__file__).is_relative_to({str(target)!r}), dp2ddp.codemods.__file__
assert importlib.util.find_spec("codemods") is None
source = pathlib.Path({str(FIXTURES / "mnist_argparse" / "before.py")!r}).read_text()
assert "wrap_ddp(Net())" in convert_source(source).output
print("ok")
"""
    completed = subprocess.run(
        [sys.executable, "-S", "-c", check], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "ok"


def test_libcst_runner_applies_a_codemod(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text((FIXTURES / "mnist_argparse" / "before.py").read_text(encoding="utf-8"), encoding="utf-8")
    completed = subprocess.run(
        [sys.executable, "-m", "libcst.tool", "codemod", "replace_data_parallel.ReplaceDataParallelCommand", str(script)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert completed.returncode == 0, completed.stderr
    assert "model = wrap_ddp(Net())" in script.read_text(encoding="utf-8")
