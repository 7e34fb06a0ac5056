from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
# A small DataParallel script: converting it is quick, for tests of the command line.
DP_SCRIPT = """\
import torch
import torch.nn as nn


def main():
    model = nn.DataParallel(nn.Linear(2, 2))
    return model


if __name__ == "__main__":
    main()
"""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens",
        action="store_true",
        help="Rewrite fixtures/*/after.py and report.txt from the current codemods (review the diff!).",
    )


def fixture_cases() -> list[Path]:
    """Every fixtures/<case>/ folder; a case without after.py must stay byte-identical."""
    return sorted(path for path in FIXTURES.iterdir() if (path / "before.py").is_file())


@pytest.fixture
def update_goldens(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-goldens"))
