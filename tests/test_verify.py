"""``dp2ddp verify``: equivalence on converted fixtures, planted defects, hangs, crashes, offline data.

The end-to-end cases launch real runs (torchrun, 2 processes, gloo, CPU) and
take about 10-20 s each on 2 cores.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dp2ddp.verify.compare import Tolerance, compare, compare_band
from dp2ddp.verify.runner import Plan, VerifyError, resolve_device, visible_gpus

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
TIMEOUT_S = 300


# --- comparing numbers -------------------------------------------------------------------------


def test_mean_over_ranks_within_tolerance_is_equivalent() -> None:
    reference = [(0, 2.0), (1, 1.5)]
    ranks = [[(0, 2.1), (1, 1.4)], [(0, 1.9 + 1e-6), (1, 1.6)]]
    comparison = compare(reference, ranks, Tolerance())
    assert comparison.equivalent
    assert [step.converted for step in comparison.steps] == pytest.approx([2.0, 1.5])


def test_first_step_outside_tolerance_is_named() -> None:
    reference = [(0, 2.0), (1, 1.5), (2, 1.2)]
    ranks = [[(0, 2.0), (1, 1.5), (2, 1.3)], [(0, 2.0), (1, 1.5 + 1e-3), (2, 1.3)]]
    comparison = compare(reference, ranks, Tolerance())
    assert comparison.first_divergence is not None
    assert comparison.first_divergence.step == 1


def test_several_backward_calls_per_step_are_compared_one_by_one() -> None:
    """A GAN's two losses per step, or gradient accumulation, are keyed (step, call)."""
    reference = [(0, 1.0), (0, 5.0), (1, 0.9), (1, 4.0)]
    ranks = [[(0, 1.0), (0, 5.0), (1, 0.9), (1, 4.5)]] * 2
    comparison = compare(reference, ranks, Tolerance())
    assert [step.label for step in comparison.steps] == ["0", "0.1", "1", "1.1"]
    assert comparison.first_divergence is not None and comparison.first_divergence.label == "1.1"


def test_a_step_only_one_run_has_is_a_divergence() -> None:
    comparison = compare([(0, 1.0), (1, 1.0)], [[(0, 1.0)], [(0, 1.0)]], Tolerance())
    assert comparison.first_divergence is not None and comparison.first_divergence.step == 1
    comparison = compare([(0, 1.0)], [[(0, 1.0), (1, 1.0)], [(0, 1.0)]], Tolerance())
    assert comparison.first_divergence is not None and comparison.first_divergence.converted is None


def test_statistical_band_accepts_inside_and_rejects_outside() -> None:
    references = [[(0, 1.0), (1, 0.8)], [(0, 1.1), (1, 0.9)], [(0, 1.05), (1, 0.85)]]
    assert compare_band(references, [[(0, 1.12), (1, 0.75)]], Tolerance()).equivalent
    rejected = compare_band(references, [[(0, 1.0), (1, 1.2)]], Tolerance())
    assert rejected.first_divergence is not None and rejected.first_divergence.step == 1


def test_device_and_backend_choices() -> None:
    plan = Plan(original=Path("a.py"), converted=Path("b.py"))
    assert resolve_device(plan, gpus=0) == ("gloo", "cpu")
    assert resolve_device(plan, gpus=1) == ("gloo", "cpu")  # fewer GPUs than processes: CPU
    assert resolve_device(plan, gpus=2) == ("nccl", "cuda")
    with pytest.raises(VerifyError, match="NCCL runs on GPUs only"):
        resolve_device(Plan(Path("a"), Path("b"), backend="nccl", device="cpu"), gpus=4)
    with pytest.raises(VerifyError, match="need 2 GPUs and 1 are visible"):
        resolve_device(Plan(Path("a"), Path("b"), device="cuda"), gpus=1)


# --- whole runs ----------------------------------------------------------------------------------


def _cpu_env() -> dict[str, str]:
    return {**os.environ, "CUDA_VISIBLE_DEVICES": ""}


def run_verify(workdir: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, dict]:
    """``dp2ddp verify ARGS --json`` in ``workdir``; (exit code, all output, the JSON document)."""
    result = workdir / "verify.json"
    command = [sys.executable, "-m", "dp2ddp", "verify", "--json", str(result), *args]
    completed = subprocess.run(
        command, cwd=workdir, env=env or _cpu_env(), capture_output=True, text=True, timeout=TIMEOUT_S
    )
    output = completed.stdout + completed.stderr
    document = json.loads(result.read_text()) if result.exists() else {}
    return completed.returncode, output, document


def fixture(case: str, workdir: Path, part: str = "before") -> Path:
    script = workdir / f"{case}_{part}.py"
    shutil.copy(FIXTURES / case / f"{part}.py", script)
    return script


def planted(case: str, workdir: Path, name: str, *edits: tuple[str, str]) -> Path:
    """The fixture's converted script with ``edits`` applied; each must change something."""
    text = (FIXTURES / case / "after.py").read_text()
    for old, new in edits:
        assert old in text, f"planted defect no longer applies: {old!r}"
        text = text.replace(old, new)
    script = workdir / f"{name}.py"
    script.write_text(text)
    return script


@pytest.mark.parametrize(
    "case",
    [
        pytest.param("mnist_argparse", id="plain, epochs counted from 1"),
        pytest.param("dropout_partial_batch", id="dropout and a partial last batch"),
        pytest.param("cifar_resnet", id="BatchNorm"),
        pytest.param("summed_loss", id="reduction=sum"),
    ],
)
def test_converted_fixture_is_equivalent(case: str, tmp_path: Path) -> None:
    code, output, document = run_verify(tmp_path, str(fixture(case, tmp_path)))
    assert code == 0, output
    assert document["verdict"] == "equivalent"
    assert len(document["steps"]) >= 6
    assert document["max_rel_gap"] < 1e-5  # measured about 1e-7; real defects start near 4e-4
    assert document["backend"] == "gloo" and document["device"] == "cpu"
    assert "equivalent:" in output and "DIVERGES" not in output


DEFECTS = [
    pytest.param(
        "mnist_argparse", [("        train_loader.sampler.set_epoch(epoch)\n", "")], (), "4",
        id="set_epoch removed: diverges at the second epoch's first step",
    ),
    pytest.param(
        "mnist_argparse",
        [("sampler=DistributedSampler(train_set, shuffle=True)", "shuffle=True"),
         ("        train_loader.sampler.set_epoch(epoch)\n", "")],
        (), "0", id="DistributedSampler removed",
    ),
    pytest.param(
        "mnist_argparse", [], ("--", "--batch-size", "15"), "0",
        id="global batch 15 does not divide by 2 processes",
    ),
    pytest.param(
        "summed_loss", [("(loss * dist.get_world_size()).backward()", "loss.backward()")], (), "0",
        id="reduction=sum loss not scaled by the world size",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("case", "edits", "script_args", "first"), DEFECTS)
def test_planted_defect_is_caught_at_the_right_step(
    case: str, edits: list[tuple[str, str]], script_args: tuple[str, ...], first: str, tmp_path: Path
) -> None:
    converted = planted(case, tmp_path, "defect", *edits) if edits else None
    extra = ("--converted", str(converted)) if converted else ()
    code, output, document = run_verify(tmp_path, str(fixture(case, tmp_path)), *extra, *script_args)
    assert code == 1, output
    assert document["verdict"] == "diverges"
    assert document["first_divergence"] == first
    assert re.search(rf"diverges? at step {re.escape(first)}\b", document["message"]), document["message"]


def _processes_running(path: Path) -> list[str]:
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if str(path).encode() in (entry / "cmdline").read_bytes():
                found.append(entry.name)
        except OSError:
            continue
    return found


def test_planted_hang_names_the_ranks_and_leaves_nothing_running(tmp_path: Path) -> None:
    hang = planted(
        "mnist_argparse", tmp_path, "hang",
        ("    model = wrap_ddp(Net())\n", "    model = wrap_ddp(Net())\n    if dist.get_rank() == 0:\n        dist.barrier()\n"),
    )  # fmt: skip
    started = time.monotonic()
    code, output, document = run_verify(
        tmp_path, str(fixture("mnist_argparse", tmp_path)), "--converted", str(hang), "--timeout", "20"
    )
    assert time.monotonic() - started < 20 + 30
    assert code == 2, output
    assert document["verdict"] == "error"
    assert re.search(r"hung: stopped after 20 s; ranks that did not finish: 0\b", output), output
    assert "hang.py\", line" in output and "in main" in output  # where rank 0 waits
    assert _processes_running(hang) == []


def test_crash_shows_the_failing_rank_traceback(tmp_path: Path) -> None:
    crash = planted(
        "mnist_argparse", tmp_path, "crash",
        ("        loss.backward()\n", "        loss.backward()\n        if dist.get_rank() == 1:\n"
                                    "            raise RuntimeError('planted crash on rank 1')\n"),
    )  # fmt: skip
    code, output, _ = run_verify(tmp_path, str(fixture("mnist_argparse", tmp_path)), "--converted", str(crash))
    assert code == 2, output
    assert "rank 1 failed" in output
    assert "RuntimeError: planted crash on rank 1" in output
    assert _processes_running(crash) == []


def test_synthetic_data_verifies_a_downloading_script_offline(tmp_path: Path) -> None:
    code, output, document = run_verify(
        tmp_path, "--synthetic-data", "--synthetic-size", "256", "--max-steps", "3",
        str(fixture("mnist_download", tmp_path)), "--", "--data", str(tmp_path / "data"),
    )  # fmt: skip
    assert code == 0, output
    assert [step["step"] for step in document["steps"]] == [0, 1, 2]
    assert not (tmp_path / "data").exists()  # nothing was downloaded


def test_without_synthetic_data_the_download_is_attempted(tmp_path: Path) -> None:
    """The control for the test above: offline, the real MNIST download fails, in the reference, which runs first."""
    code, output, _ = run_verify(tmp_path, "--max-steps", "1", str(fixture("mnist_download", tmp_path)),
                                 "--", "--data", str(tmp_path / "data"))  # fmt: skip
    assert code == 2, output
    assert "reference (1 process): failed" in output
    assert "Traceback" in output and "mnist" in output.lower()


GPU_SCRIPT = '''
import torch
import torch.nn as nn

model = nn.DataParallel(nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))).cuda()
device = torch.device("cuda:0")
data = torch.utils.data.TensorDataset(torch.randn(48, 6), torch.randint(0, 3, (48,)))
loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for x, y in loader:
        x, y = x.cuda(), y.to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
'''


def test_device_cpu_verifies_a_gpu_only_script(tmp_path: Path) -> None:
    script = tmp_path / "gpu_train.py"
    script.write_text(GPU_SCRIPT)
    code, output, document = run_verify(tmp_path, "--device", "cpu", str(script))
    assert code == 0, output
    assert len(document["steps"]) == 12


NOISY_SCRIPT = '''
import torch
import torch.nn as nn

data = torch.utils.data.TensorDataset(torch.randn(64, 6), torch.randn(64, 1))
loader = torch.utils.data.DataLoader(data, batch_size=16, shuffle=True)
model = nn.DataParallel(nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
for epoch in range(3):
    for x, y in loader:
        x = x + 0.1 * torch.randn_like(x)  # random augmentation: each process draws its own
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
'''


def test_statistical_mode_accepts_random_augmentation_that_exact_mode_rejects(tmp_path: Path) -> None:
    script = tmp_path / "noisy.py"
    script.write_text(NOISY_SCRIPT)
    code, output, _ = run_verify(tmp_path, str(script))
    assert code == 1, output
    code, output, document = run_verify(tmp_path, "--statistical", "--plot", str(tmp_path / "loss.png"), str(script))
    assert code == 0, output
    assert document["statistical"] is True
    assert len(document["runs"]) == 4  # the converted run and 3 reference seeds
    assert (tmp_path / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_max_steps_stops_both_runs(tmp_path: Path) -> None:
    code, output, document = run_verify(tmp_path, "--max-steps", "3", str(fixture("mnist_argparse", tmp_path)))
    assert code == 0, output
    assert [step["step"] for step in document["steps"]] == [0, 1, 2]
    assert [rank["steps"] for run in document["runs"] for rank in run["ranks"]] == [3, 3, 3]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--backend", "nccl", "--device", "cpu"], "NCCL runs on GPUs only", id="nccl on cpu"),
        pytest.param(["--nproc", "0"], "--nproc", id="no processes"),
    ],
)
def test_bad_arguments_exit_2_without_a_traceback(args: list[str], message: str, tmp_path: Path) -> None:
    code, output, _ = run_verify(tmp_path, *args, str(fixture("mnist_argparse", tmp_path)))
    assert code == 2
    assert message in output
    assert "Traceback" not in output


def test_script_without_data_parallel_is_an_error(tmp_path: Path) -> None:
    code, output, _ = run_verify(tmp_path, str(fixture("no_data_parallel", tmp_path)))
    assert code == 2
    assert "has nothing to convert" in output


@pytest.mark.skipif(visible_gpus() < 1, reason="needs a GPU")
def test_nccl_on_one_gpu(tmp_path: Path) -> None:
    code, output, document = run_verify(
        tmp_path, "--backend", "nccl", "--nproc", "1", str(fixture("mnist_argparse", tmp_path)), env=dict(os.environ)
    )
    assert code == 0, output
    assert document["backend"] == "nccl" and document["device"] == "cuda"


def test_converted_copy_imports_modules_next_to_the_original(tmp_path: Path) -> None:
    """The script is converted into a temporary folder; `from models import Net` must still resolve."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "models.py").write_text("import torch.nn as nn\n\ndef Net():\n    return nn.Linear(6, 3)\n")
    script = project / "train.py"
    script.write_text(GPU_SCRIPT.replace("nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))", "Net()")
                      .replace("import torch.nn as nn\n", "import torch.nn as nn\nfrom models import Net\n", 1))  # fmt: skip
    code, output, document = run_verify(tmp_path, "--device", "cpu", "--max-steps", "2", str(script))
    assert code == 0, output
    assert len(document["steps"]) == 2
