"""Converted fixtures really train under torchrun: 2 processes, gloo, CPU, synthetic data."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES

pytest.importorskip("torchvision")

PROBE = Path(__file__).resolve().parent / "rank_probe.py"
TIMEOUT_S = 240
# Converted fixtures the suite trains, one of each launch and loader shape.
TRAINED = ["mnist_argparse", "cifar_resnet", "toplevel_script", "conditional_dp", "gan_two_models", "detectron_launch"]


def run_under_torchrun(script: Path, workdir: Path, nproc: int = 2) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    out = workdir / "probe"
    out.mkdir()
    env = {key: value for key, value in os.environ.items() if key not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["CUDA_VISIBLE_DEVICES"] = ""  # gloo on CPU, even where a GPU is present
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
        "--", str(PROBE), str(out), str(script),
    ]  # fmt: skip
    try:
        completed = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"{script.name} did not finish in {TIMEOUT_S}s; output so far:\n{expired.stdout}\n{expired.stderr}")
    ranks = [json.loads(path.read_text()) for path in sorted(out.glob("rank*.json"))]
    return completed, ranks


@pytest.mark.parametrize("case", TRAINED)
def test_converted_fixture_trains_on_two_processes_with_disjoint_data(case: str, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    shutil.copy(FIXTURES / case / "after.py", script)
    completed, ranks = run_under_torchrun(script, tmp_path)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert [rank["world_size"] for rank in ranks] == [2, 2]

    sharded = [
        [p for p in rank["passes"] if p["sampler"] == "DistributedSampler"] for rank in ranks
    ]
    assert sharded[0], "the converted script never loaded data through a DistributedSampler"
    assert len(sharded[0]) == len(sharded[1])
    for first, second in zip(*sharded):
        size = first["dataset_size"]
        assert len(first["indices"]) == len(second["indices"]) == size // 2
        assert set(first["indices"]).isdisjoint(second["indices"])
        assert sorted(first["indices"] + second["indices"]) == list(range(size))
    if len(sharded[0]) > 1:
        # set_epoch reshuffles: the second epoch does not repeat the first one's order.
        assert sharded[0][0]["indices"] != sharded[0][1]["indices"]


def test_converted_script_runs_as_a_single_plain_process(tmp_path: Path) -> None:
    """`python train.py` with no launcher (and no GPUs) still trains, as one process."""
    script = tmp_path / "train.py"
    shutil.copy(FIXTURES / "toplevel_script" / "after.py", script)
    env = {key: value for key, value in os.environ.items() if key not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["CUDA_VISIBLE_DEVICES"] = ""
    completed = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.count("epoch") == 3
