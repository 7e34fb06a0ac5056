"""download_once: the main process downloads first, the others load what it wrote."""

from __future__ import annotations

from textwrap import dedent

from dp2ddp.api import convert_source

SCRIPT = """\
import torch
from torchvision import datasets

{module_level}


def main():
    train_set = datasets.MNIST("data", train=True, download=True)
    model = torch.nn.DataParallel(Net())


if __name__ == "__main__":
    main()
"""


def test_a_download_in_main_runs_on_the_main_process_first() -> None:
    output = convert_source(SCRIPT.format(module_level="")).output
    assert '    with main_process_first():\n        train_set = datasets.MNIST("data", train=True, download=True)\n' in output
    assert "@contextlib.contextmanager\ndef main_process_first():" in output
    assert convert_source(output).output == output  # converted once


def test_a_download_at_import_before_setup_is_left_alone() -> None:
    """No process group exists yet at import, so no barrier can order the processes there."""
    source = SCRIPT.format(module_level='test_set = datasets.MNIST("data", train=False, download=True)')
    output = convert_source(source).output
    assert '\ntest_set = datasets.MNIST("data", train=False, download=True)\n' in output
    assert output.count("with main_process_first():") == 1


def test_a_call_of_another_library_with_download_is_not_touched() -> None:
    source = dedent(
        """
        import torch
        import mylib

        data = mylib.Corpus("data", download=True)
        model = torch.nn.DataParallel(Net())
        """
    )
    assert "main_process_first" not in convert_source(source).output
