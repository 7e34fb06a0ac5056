"""``dp2ddp verify`` stopped by a signal leaves no process behind, whichever run it was in.

The reference and the converted run each run in a process group of their own, out of reach of a
signal sent to verify; a CI cancel (SIGTERM), a closed terminal (SIGHUP) or Ctrl-C (SIGINT) must
still end them all: the reference, torchrun and every rank.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SLOW_SCRIPT = '''
import time

import torch
import torch.nn as nn

data = torch.utils.data.TensorDataset(torch.randn(400, 4), torch.randn(400, 1))
loader = torch.utils.data.DataLoader(data, batch_size=4, shuffle=True)
model = nn.DataParallel(nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in loader:
    loss = nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    time.sleep(0.2)  # 100 steps: 20 s a run, long enough to be interrupted in either
'''


def _tagged(tag: str) -> list[int]:
    """The processes whose environment carries ``tag``: verify and everything it started."""
    needle = f"DP2DDP_TEST_TAG={tag}".encode()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return found


def _running(tag: str, needle: str) -> bool:
    for pid in _tagged(tag):
        try:
            if needle.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


@pytest.mark.parametrize(
    ("signum", "during"),
    [
        pytest.param(signal.SIGTERM, "torch.distributed.run", id="SIGTERM during the converted run"),
        pytest.param(signal.SIGHUP, "dp2ddp.verify.bootstrap", id="SIGHUP during the reference run"),
        pytest.param(signal.SIGINT, "torch.distributed.run", id="SIGINT during the converted run"),
    ],
)
def test_a_signal_stops_verify_and_every_process_it_started(signum: int, during: str, tmp_path: Path) -> None:
    script = tmp_path / "slow.py"
    script.write_text(SLOW_SCRIPT)
    tag = uuid.uuid4().hex
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "DP2DDP_TEST_TAG": tag}
    # The reference must run long enough to be caught in it, and the converted run must start.
    verify = subprocess.Popen(
        [sys.executable, "-m", "dp2ddp", "verify", "--timeout", "120", str(script)],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while not _running(tag, during):
            assert verify.poll() is None, verify.communicate()
            assert time.monotonic() < deadline, f"{during} never started"
            time.sleep(0.2)
        if during == "torch.distributed.run":  # both ranks are up and training
            while not _ranks_started(tag):
                assert time.monotonic() < deadline, "the ranks never started"
                time.sleep(0.2)
        time.sleep(1.0)
        sent = time.monotonic()
        verify.send_signal(signum)
        _, stderr = verify.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if verify.poll() is None:
            verify.kill()
    assert verify.returncode == 128 + signum, stderr
    assert "every process it started has been stopped" in stderr
    assert "Traceback" not in stderr
    assert took < 15, f"verify took {took:.1f} s to stop"
    time.sleep(0.5)
    assert _tagged(tag) == [], "processes verify started are still running"


def _ranks_started(tag: str) -> bool:
    ranks = 0
    for pid in _tagged(tag):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(item.startswith(b"LOCAL_RANK=") for item in environ):
            ranks += 1
    return ranks >= 2
